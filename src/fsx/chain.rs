//! Hash-chained JSONL: every line carries the SHA-256 of the line before it.
//!
//! The message log and every run journal are chained (kxen-agent issue 6, "integrity"), so a
//! Session or a bundle can be verified end to end: changing, removing, inserting or reordering
//! any complete line breaks the chain at the line after it. The chain is written at append time
//! and never by rewriting a file.
//!
//! Line format: the record's JSON object with one extra last key,
//! `…,"prevHash":"sha256:<hex>"}`, where `<hex>` is the SHA-256 of the previous line's exact
//! bytes (without its newline). The first line chains from [`GENESIS`]. Because the key is always
//! last and has a fixed length, the record is recovered without re-serializing anything, and the
//! typed record structs (which refuse unknown fields) never see it.
//!
//! Torn tails behave as in [`super::read_jsonl`]: a last line without a newline, or one that does
//! not parse, is a crash mid-append and is ignored (the chain is checked over the complete
//! prefix); a last line that parses but names the wrong predecessor is damage, not a crash.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::append::TornTail;
use crate::error::{Error, Result};
use crate::hash;

/// The `prevHash` of a file's first line.
pub const GENESIS: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

/// `"prevHash":"` — the key every chained line ends with (after a `,` unless the record is empty).
const KEY: &[u8] = b"\"prevHash\":\"";
/// `sha256:` + 64 hex digits.
const HASH_LEN: usize = 7 + 64;
/// Length of `"prevHash":"sha256:<64 hex>"}`.
const SUFFIX_LEN: usize = KEY.len() + HASH_LEN + 2;

/// The hash a line's successor names: `sha256:` + hex SHA-256 of `line` (no newline).
pub fn line_hash(line: &[u8]) -> String {
    hash::sha256_prefixed(line)
}

/// Adds `prevHash` as the last key of the JSON object `record`.
pub fn chain_line(record: &str, prev: &str) -> String {
    debug_assert!(record.starts_with('{') && record.ends_with('}'));
    debug_assert_eq!(prev.len(), HASH_LEN);
    let body = &record[..record.len() - 1];
    let mut out = String::with_capacity(record.len() + SUFFIX_LEN + 1);
    out.push_str(body);
    if body.len() > 1 {
        out.push(',');
    }
    out.push_str("\"prevHash\":\"");
    out.push_str(prev);
    out.push_str("\"}");
    out
}

/// Why a line is not a chained record. A closed set of its own (not [`Error`]): a reader tells
/// a torn last line from damage by where the line is, not by why it fails, and says the reason
/// inside its own message (`damaged record (…)`); as an [`Error`] on its own it is corrupt state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineError {
    /// The line does not end with `"prevHash":"sha256:…"}` (or is not an object).
    NoPrevHash,
    /// The `prevHash` value is not `sha256:<64 lowercase hex>`.
    MalformedHash(String),
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LineError::NoPrevHash => {
                f.write_str("no prevHash as its last key (not a chained record)")
            }
            LineError::MalformedHash(prev) => {
                write!(f, "prevHash {prev:?} is not sha256:<64 lowercase hex>")
            }
        }
    }
}

impl std::error::Error for LineError {}

impl From<LineError> for Error {
    fn from(e: LineError) -> Error {
        Error::corrupt(e.to_string()).with_source(e)
    }
}

/// Splits a chained line into the record's JSON (written into `record`) and its `prevHash`.
pub fn split_line<'a>(
    line: &'a [u8],
    record: &mut Vec<u8>,
) -> std::result::Result<&'a str, LineError> {
    let missing = || LineError::NoPrevHash;
    if line.len() < SUFFIX_LEN + 1 || !line.starts_with(b"{") {
        return Err(missing());
    }
    let (body, suffix) = line.split_at(line.len() - SUFFIX_LEN);
    if !suffix.starts_with(KEY) || !suffix.ends_with(b"\"}") {
        return Err(missing());
    }
    let prev =
        std::str::from_utf8(&suffix[KEY.len()..KEY.len() + HASH_LEN]).map_err(|_| missing())?;
    let well_formed = prev.starts_with("sha256:")
        && prev[7..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !well_formed {
        return Err(LineError::MalformedHash(prev.to_string()));
    }
    record.clear();
    match body {
        b"{" => record.extend_from_slice(b"{}"),
        _ if body.ends_with(b",") => {
            record.extend_from_slice(&body[..body.len() - 1]);
            record.push(b'}');
        }
        _ => return Err(missing()),
    }
    Ok(prev)
}

/// A chained JSONL file read back: its complete records, a torn tail if any, and the hash the
/// next line must name.
#[derive(Debug, Clone)]
pub struct ChainFile<T> {
    pub records: Vec<T>,
    pub torn_tail: Option<TornTail>,
    /// `prevHash` for the next append: the hash of the last complete line, or [`GENESIS`].
    pub last_hash: String,
    /// Length in bytes of the complete prefix (everything but a torn tail).
    pub complete_len: u64,
}

/// What is left of a chained file once its records went to a visitor ([`visit_chain`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainEnd {
    pub torn_tail: Option<TornTail>,
    /// `prevHash` for the next append: the hash of the last complete line, or [`GENESIS`].
    pub last_hash: String,
    /// Length in bytes of the complete prefix (everything but a torn tail).
    pub complete_len: u64,
    /// How many complete records the file holds (each was given to the visitor).
    pub records: usize,
}

impl ChainEnd {
    fn with<T>(self, records: Vec<T>) -> ChainFile<T> {
        ChainFile {
            records,
            torn_tail: self.torn_tail,
            last_hash: self.last_hash,
            complete_len: self.complete_len,
        }
    }
}

/// Reads and checks a chained JSONL file. A missing file reads as empty.
///
/// Every complete line must parse as `T` and name its predecessor; the first broken line is
/// `Corrupt` naming `path:line`.
pub fn read_chain<T: DeserializeOwned>(path: &Path) -> Result<ChainFile<T>> {
    let mut records = Vec::new();
    let end = visit_chain(path, |record: T| records.push(record))?;
    Ok(end.with(records))
}

/// [`read_chain`] without holding the records: each complete record goes to `visit` as soon as
/// its line is checked, in file order, so a reader that folds them (a journal's live state)
/// never holds the decoded file. The file is streamed a line at a time, never held whole.
///
/// `visit` sees every record of a well-formed prefix before a broken line is reported, so a
/// caller that can refuse a record (a state machine) must defer its own error until this returns
/// `Ok`: damage to the file is reported first, as if the whole file had been read before folding.
pub fn visit_chain<T: DeserializeOwned>(path: &Path, visit: impl FnMut(T)) -> Result<ChainEnd> {
    let file = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Checker::new(visit).finish());
        }
        Err(e) => return Err(Error::io("read", path, e)),
    };
    visit_chain_from(path, BufReader::with_capacity(1 << 16, file), visit)
}

/// [`visit_chain`] over the bytes of the file at `path` as `source` yields them (import checks a
/// file's chain from the bytes it is staging, instead of reading the file back).
pub fn visit_chain_from<T: DeserializeOwned>(
    path: &Path,
    mut reader: impl BufRead,
    visit: impl FnMut(T),
) -> Result<ChainEnd> {
    let name = path.display().to_string();
    let io = |e| Error::io("read", path, e);
    let mut checker = Checker::new(visit);
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(io)? == 0 {
            return Ok(checker.finish());
        }
        let complete = line.last() == Some(&b'\n');
        if complete {
            line.pop();
        }
        let is_last = reader.fill_buf().map_err(io)?.is_empty();
        if let Some(done) = checker.line(&name, &line, complete, is_last)? {
            return Ok(done);
        }
    }
}

/// [`read_chain`] over bytes already in memory; `name` names the file in errors.
pub fn parse_chain<T: DeserializeOwned>(name: &str, bytes: &[u8]) -> Result<ChainFile<T>> {
    let mut records = Vec::new();
    let end = visit_chain_bytes(name, bytes, |record: T| records.push(record))?;
    Ok(end.with(records))
}

/// [`visit_chain`] over bytes already in memory; `name` names the file in errors.
pub fn visit_chain_bytes<T: DeserializeOwned>(
    name: &str,
    bytes: &[u8],
    visit: impl FnMut(T),
) -> Result<ChainEnd> {
    let mut checker = Checker::new(visit);
    let mut offset = 0usize;
    while offset < bytes.len() {
        let rest = &bytes[offset..];
        let (line, complete) = match memchr(rest) {
            Some(i) => (&rest[..i], true),
            None => (rest, false),
        };
        let is_last = offset + line.len() + usize::from(complete) >= bytes.len();
        if let Some(done) = checker.line(name, line, complete, is_last)? {
            return Ok(done);
        }
        offset += line.len() + 1;
    }
    Ok(checker.finish())
}

fn memchr(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

/// The chain check over lines fed in file order (shared by the streaming and the in-memory
/// reader): each complete line is split, decoded straight into `T` and its `prevHash` compared
/// with the hash of the raw bytes of the line before it; a checked record goes to `visit`.
struct Checker<T, F> {
    visit: F,
    records: usize,
    prev: String,
    /// Offset of the next line.
    offset: usize,
    line_no: usize,
    /// The record's JSON without `prevHash`, reused across lines.
    buf: Vec<u8>,
    _record: std::marker::PhantomData<fn(T)>,
}

impl<T: DeserializeOwned, F: FnMut(T)> Checker<T, F> {
    fn new(visit: F) -> Checker<T, F> {
        Checker {
            visit,
            records: 0,
            prev: GENESIS.to_string(),
            offset: 0,
            line_no: 0,
            buf: Vec::new(),
            _record: std::marker::PhantomData,
        }
    }

    /// Checks one line (`line` without its newline; `complete` if it had one; `is_last` if
    /// nothing follows it). Returns the end of the file when a torn tail ends it.
    fn line(
        &mut self,
        name: &str,
        line: &[u8],
        complete: bool,
        is_last: bool,
    ) -> Result<Option<ChainEnd>> {
        self.line_no += 1;
        let parsed = if complete {
            let buf = &mut self.buf;
            split_line(line, buf)
                .map_err(|e| e.to_string())
                .and_then(|named| {
                    serde_json::from_slice::<T>(buf)
                        .map(|record| (named, record))
                        .map_err(|e| e.to_string())
                })
        } else {
            Err("no trailing newline".to_string())
        };
        match parsed {
            Ok((named, record)) => {
                if named != self.prev {
                    return Err(broken(
                        name,
                        self.line_no,
                        &format!(
                            "the chain is broken: prevHash is {named} but the previous line hashes to {} (a line before it was changed, removed, inserted or reordered)",
                            self.prev
                        ),
                    ));
                }
                self.prev = line_hash(line);
                (self.visit)(record);
                self.records += 1;
                self.offset += line.len() + 1;
                Ok(None)
            }
            Err(_) if is_last => Ok(Some(ChainEnd {
                torn_tail: Some(TornTail {
                    offset: self.offset as u64,
                    line: self.line_no,
                    len: line.len() + usize::from(complete),
                }),
                last_hash: std::mem::take(&mut self.prev),
                complete_len: self.offset as u64,
                records: self.records,
            })),
            Err(reason) => Err(broken(
                name,
                self.line_no,
                &format!("damaged record ({reason})"),
            )),
        }
    }

    fn finish(self) -> ChainEnd {
        ChainEnd {
            torn_tail: None,
            last_hash: self.prev,
            complete_len: self.offset as u64,
            records: self.records,
        }
    }
}

fn broken(name: &str, line_no: usize, why: &str) -> Error {
    Error::corrupt(format!("{name}:{line_no}: {why}")).with_hint(
        "this is not a torn last line from a crash; restore the file from a backup or bundle",
    )
}

/// The single writer of one chained file: remembers the last line's hash, so an append never
/// re-reads the file. Open one only under the lock that makes its holder the only writer.
#[derive(Debug)]
pub struct ChainWriter {
    path: PathBuf,
    last_hash: String,
    /// A torn tail left in place by [`ChainWriter::open_deferred`], cut off by
    /// [`ChainWriter::repair`] or before the first append.
    torn_tail: Option<super::TornTail>,
    /// Lines were appended lazily since the file was last durable ([`ChainWriter::append_lazy`]).
    dirty: bool,
}

impl ChainWriter {
    /// Reads and checks the file, truncates a torn tail left by a crash, and returns the writer
    /// with the records. Call only under the file's writer lock (the Session's run lease).
    pub fn open<T: DeserializeOwned>(path: &Path) -> Result<(ChainWriter, Vec<T>)> {
        let mut records = Vec::new();
        let writer = ChainWriter::open_visit(path, |record: T| records.push(record))?;
        Ok((writer, records))
    }

    /// [`ChainWriter::open`] giving each record to `visit` instead of holding them
    /// ([`visit_chain`]); a torn tail is repaired after the whole file checked out.
    pub fn open_visit<T: DeserializeOwned>(
        path: &Path,
        visit: impl FnMut(T),
    ) -> Result<ChainWriter> {
        let mut writer = ChainWriter::open_deferred(path, visit)?;
        writer.repair()?;
        Ok(writer)
    }

    /// [`ChainWriter::open_visit`] that leaves a torn tail in place until [`ChainWriter::repair`]
    /// (or the first append): a writer that checks the file against others first must not cut
    /// anything off a file it then refuses — a tail is torn by a crash only if the rest of the
    /// state agrees.
    pub fn open_deferred<T: DeserializeOwned>(
        path: &Path,
        visit: impl FnMut(T),
    ) -> Result<ChainWriter> {
        let end = visit_chain(path, visit)?;
        Ok(ChainWriter {
            path: path.to_path_buf(),
            last_hash: end.last_hash,
            torn_tail: end.torn_tail,
            dirty: false,
        })
    }

    /// Truncates the torn tail left by a crash, if there is one.
    pub fn repair(&mut self) -> Result<()> {
        if let Some(tail) = self.torn_tail.take() {
            super::repair_torn_tail(&self.path, &tail)?;
        }
        Ok(())
    }

    /// Serializes `record` (a JSON object), chains it to the previous line and appends it
    /// durably ([`super::append_line`]); lazily appended lines before it become durable with it.
    pub fn append<S: Serialize>(&mut self, record: &S) -> Result<()> {
        self.append_all(std::slice::from_ref(record))
    }

    /// [`ChainWriter::append`] without the fsync ([`super::append_lines_lazy`]): durable only
    /// with the next synced append or [`ChainWriter::sync`].
    pub fn append_lazy<S: Serialize>(&mut self, record: &S) -> Result<()> {
        self.write_all(std::slice::from_ref(record), false)
    }

    /// Makes lazily appended lines durable (nothing to do when there are none).
    pub fn sync(&mut self) -> Result<()> {
        if self.dirty {
            super::sync_data(&self.path)?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Whether lazily appended lines are not durable yet.
    pub fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// Appends `records`, each chained to the one before, with one write and one fsync
    /// ([`super::append_lines`]). Nothing is written when one of them cannot be serialized.
    pub fn append_all<S: Serialize>(&mut self, records: &[S]) -> Result<()> {
        self.write_all(records, true)
    }

    fn write_all<S: Serialize>(&mut self, records: &[S], sync: bool) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        self.repair()?;
        let mut last = self.last_hash.clone();
        let mut lines = Vec::with_capacity(records.len());
        for record in records {
            let json = serde_json::to_string(record).map_err(|e| {
                Error::failed(format!(
                    "cannot serialize a record for {}: {e}",
                    self.path.display()
                ))
            })?;
            if !json.starts_with('{') {
                return Err(Error::failed(format!(
                    "only JSON objects can be chained into {}",
                    self.path.display()
                )));
            }
            let line = chain_line(&json, &last);
            last = line_hash(line.as_bytes());
            lines.push(line);
        }
        if sync {
            super::append_lines(&self.path, &lines)?;
            self.dirty = false;
        } else {
            super::append_lines_lazy(&self.path, &lines)?;
            self.dirty = true;
        }
        self.last_hash = last;
        Ok(())
    }

    /// The `prevHash` the next line will carry.
    pub fn last_hash(&self) -> &str {
        &self.last_hash
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    fn write(dir: &Path, records: &[Value]) -> PathBuf {
        let path = dir.join("c.jsonl");
        let (mut w, existing) = ChainWriter::open::<Value>(&path).unwrap();
        assert!(existing.is_empty());
        for r in records {
            w.append(r).unwrap();
        }
        path
    }

    #[test]
    fn lines_chain_from_genesis_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), &[json!({"a":1}), json!({}), json!({"b":"x"})]);
        let text = fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], format!(r#"{{"a":1,"prevHash":"{GENESIS}"}}"#));
        assert_eq!(
            lines[1],
            format!(r#"{{"prevHash":"{}"}}"#, line_hash(lines[0].as_bytes()))
        );
        assert!(lines[2].ends_with(&format!(
            r#""prevHash":"{}"}}"#,
            line_hash(lines[1].as_bytes())
        )));
        let file = read_chain::<Value>(&path).unwrap();
        assert_eq!(
            file.records,
            vec![json!({"a":1}), json!({}), json!({"b":"x"})]
        );
        assert_eq!(file.last_hash, line_hash(lines[2].as_bytes()));
        // A reopened writer continues the chain without re-deriving anything else.
        let (mut w, recs) = ChainWriter::open::<Value>(&path).unwrap();
        assert_eq!(recs.len(), 3);
        w.append(&json!({"c":3})).unwrap();
        assert_eq!(read_chain::<Value>(&path).unwrap().records.len(), 4);
    }

    #[test]
    fn changed_removed_and_reordered_lines_break_the_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            &[
                json!({"i":1}),
                json!({"i":2}),
                json!({"i":3}),
                json!({"i":4}),
            ],
        );
        let text = fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let cases: Vec<(Vec<String>, usize)> = vec![
            // changed line 2 ⇒ line 3 names the old hash
            (
                vec![
                    lines[0].into(),
                    lines[1].replacen(r#""i":2"#, r#""i":5"#, 1),
                    lines[2].into(),
                    lines[3].into(),
                ],
                3,
            ),
            // removed line 2
            (vec![lines[0].into(), lines[2].into(), lines[3].into()], 2),
            // swapped lines 2 and 3
            (
                vec![
                    lines[0].into(),
                    lines[2].into(),
                    lines[1].into(),
                    lines[3].into(),
                ],
                2,
            ),
            // last line changed: parses, wrong predecessor is damage, not a torn tail
            (vec![lines[0].into(), lines[1].into(), lines[3].into()], 3),
        ];
        for (case, line) in cases {
            let bytes = format!("{}\n", case.join("\n"));
            let err = parse_chain::<Value>("c.jsonl", bytes.as_bytes()).unwrap_err();
            assert_eq!(err.kind, crate::error::ErrorKind::Corrupt);
            assert!(
                err.message.starts_with(&format!("c.jsonl:{line}:")),
                "{}",
                err.message
            );
        }
        // A line without prevHash in the middle is damage too.
        let bytes = format!("{}\n{{\"i\":2}}\n{}\n", lines[0], lines[2]);
        let err = parse_chain::<Value>("c", bytes.as_bytes()).unwrap_err();
        assert!(
            err.message.contains("c:2: damaged record (no prevHash"),
            "{}",
            err.message
        );
    }

    #[test]
    fn torn_tail_is_ignored_and_repaired_by_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), &[json!({"i":1}), json!({"i":2})]);
        let good = fs::read(&path).unwrap();
        let mut torn = good.clone();
        torn.extend_from_slice(b"{\"i\":3,\"prev");
        fs::write(&path, &torn).unwrap();
        let file = read_chain::<Value>(&path).unwrap();
        assert_eq!(file.records.len(), 2);
        assert_eq!(file.torn_tail.as_ref().unwrap().line, 3);
        assert_eq!(file.complete_len, good.len() as u64);
        let (mut w, _) = ChainWriter::open::<Value>(&path).unwrap();
        assert_eq!(fs::read(&path).unwrap(), good);
        w.append(&json!({"i":3})).unwrap();
        assert_eq!(read_chain::<Value>(&path).unwrap().records.len(), 3);
    }

    #[test]
    fn split_refuses_lookalikes() {
        let mut buf = Vec::new();
        for bad in [
            &b"{}"[..],
            br#"{"a":1}"#,
            br#"{"a":1,"prevHash":"sha256:XYZ"}"#,
            br#"{"a":1"prevHash":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}"#,
            br#"["prevHash":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}"#,
        ] {
            assert!(split_line(bad, &mut buf).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    proptest! {
        /// Any prefix of a chained file reads as its complete records; never an error.
        #[test]
        fn any_prefix_recovers_the_complete_records(n in 1usize..12, cut in 0usize..2000) {
            let mut bytes = Vec::new();
            let mut ends = Vec::new();
            let mut prev = GENESIS.to_string();
            for i in 0..n {
                let line = chain_line(&format!("{{\"i\":{i},\"pad\":\"{}\"}}", "x".repeat(i)), &prev);
                prev = line_hash(line.as_bytes());
                bytes.extend_from_slice(line.as_bytes());
                bytes.push(b'\n');
                ends.push(bytes.len());
            }
            let cut = cut.min(bytes.len());
            let file = parse_chain::<Value>("p", &bytes[..cut]).unwrap();
            let complete = ends.iter().filter(|&&e| e <= cut).count();
            prop_assert_eq!(file.records.len(), complete);
        }

        /// Flipping any byte of a complete non-last line is always detected or yields the same
        /// records (never silently different content).
        #[test]
        fn a_flipped_byte_never_passes_as_other_content(n in 2usize..6, pos in 0usize..10_000, bit in 0u8..8) {
            let mut bytes = Vec::new();
            let mut prev = GENESIS.to_string();
            let mut records = Vec::new();
            for i in 0..n {
                let rec = json!({"i": i, "s": format!("v{i}")});
                let line = chain_line(&rec.to_string(), &prev);
                prev = line_hash(line.as_bytes());
                bytes.extend_from_slice(line.as_bytes());
                bytes.push(b'\n');
                records.push(rec);
            }
            let last_start = bytes[..bytes.len() - 1].iter().rposition(|&b| b == b'\n').unwrap() + 1;
            let pos = pos % last_start;
            bytes[pos] ^= 1 << bit;
            if let Ok(file) = parse_chain::<Value>("p", &bytes) {
                // Only a change that turns the damage into a torn tail can read; then it is a prefix.
                prop_assert!(file.records.len() < n || file.records == records);
                prop_assert_eq!(&file.records[..], &records[..file.records.len()]);
            }
        }

        /// Arbitrary bytes never panic the reader.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_chain::<Value>("p", &bytes);
        }
    }
}
