//! Durable appends to JSONL files and torn-tail-aware reading.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Appends `line` plus a newline to `path` with one `write` call, then fsyncs.
///
/// `line` must not contain a newline (JSON produced by `serde_json::to_string` never does). The
/// file is created with mode 0600 if missing, and then its directory is fsynced too, so the new
/// name survives a crash. A crash mid-write leaves at most a torn last line, which
/// [`read_jsonl`] reports and ignores.
pub fn append_line(path: &Path, line: &str) -> Result<()> {
    append_lines(path, std::slice::from_ref(&line.to_string()))
}

/// Appends `lines` with one write and one fsync (a group commit): durable together. A crash
/// mid-write leaves the lines before the cut complete and at most a torn last line, exactly as
/// when they were appended one by one. Same rules as [`append_line`] otherwise. Lines appended
/// lazily before ([`append_lines_lazy`]) become durable with them.
pub fn append_lines(path: &Path, lines: &[String]) -> Result<()> {
    write_lines(path, lines, true)
}

/// Appends `lines` with one write and **no** fsync: they are in the file for every reader at
/// once, but durable only with the next synced append to the same file or [`sync_data`]. A
/// power cut may lose them (a process crash does not). Use only for lines the writer can
/// re-derive from what is durable elsewhere (see `journal`'s module docs). A missing file is
/// created and made durable as by [`append_lines`].
pub fn append_lines_lazy(path: &Path, lines: &[String]) -> Result<()> {
    let exists = path.exists();
    write_lines(path, lines, !exists)
}

/// Makes everything appended to `path` so far durable (one `fdatasync`).
pub fn sync_data(path: &Path) -> Result<()> {
    let file = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| Error::io("open for sync", path, e))?;
    file.sync_data().map_err(|e| Error::io("fsync", path, e))?;
    power_cut::durable(path, &file);
    Ok(())
}

fn write_lines(path: &Path, lines: &[String], sync: bool) -> Result<()> {
    let existed = path.exists();
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(super::STATE_FILE_MODE)
        .open(path)
        .map_err(|e| Error::io("open for append", path, e))?;
    if !sync {
        power_cut::lazy(path, &file);
    }
    let mut buf = Vec::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
    for line in lines {
        debug_assert!(
            !line.contains('\n'),
            "JSONL lines must not contain newlines"
        );
        buf.extend_from_slice(line.as_bytes());
        buf.push(b'\n');
    }
    file.write_all(&buf)
        .map_err(|e| Error::io("append to", path, e))?;
    if sync {
        file.sync_data().map_err(|e| Error::io("fsync", path, e))?;
        power_cut::durable(path, &file);
        if !existed {
            super::fsync_dir(super::atomic::parent_dir(path))?;
        }
    }
    Ok(())
}

/// Crash tests only (`failpoints`): what a power cut would keep of lazily appended files. Each
/// file with lazy appends is remembered with the length it had when it was last durable;
/// [`power_cut::simulate`] cuts every such file back to that length (the worst a power cut can
/// do to appends that were never synced) before a failpoint aborts with `KXEN_FAILPOINT_POWERCUT`.
pub(crate) mod power_cut {
    use std::fs::File;
    use std::path::Path;

    #[cfg(feature = "failpoints")]
    static DURABLE: std::sync::Mutex<Vec<(std::path::PathBuf, u64)>> =
        std::sync::Mutex::new(Vec::new());

    /// `file` (open on `path`) is about to get a lazy append: remember its durable length.
    pub fn lazy(path: &Path, file: &File) {
        #[cfg(feature = "failpoints")]
        {
            let mut durable = DURABLE.lock().unwrap_or_else(|e| e.into_inner());
            if !durable.iter().any(|(p, _)| p == path) {
                let len = file.metadata().map(|m| m.len()).unwrap_or(0);
                durable.push((path.to_path_buf(), len));
            }
        }
        #[cfg(not(feature = "failpoints"))]
        let _ = (path, file);
    }

    /// Everything in `file` (open on `path`) is durable now.
    pub fn durable(path: &Path, file: &File) {
        #[cfg(feature = "failpoints")]
        {
            let mut durable = DURABLE.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(entry) = durable.iter_mut().find(|(p, _)| p == path) {
                entry.1 = file.metadata().map(|m| m.len()).unwrap_or(entry.1);
            }
        }
        #[cfg(not(feature = "failpoints"))]
        let _ = (path, file);
    }

    /// Cuts every lazily appended file back to its durable length.
    #[cfg(feature = "failpoints")]
    pub fn simulate() {
        let durable = DURABLE.lock().unwrap_or_else(|e| e.into_inner());
        for (path, len) in durable.iter() {
            if let Ok(file) = std::fs::OpenOptions::new().write(true).open(path) {
                let _ = file.set_len(*len);
            }
        }
    }
}

/// A torn last line found by [`read_jsonl`]: the bytes from `offset` to the end are incomplete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Length of the valid prefix; truncating the file to it repairs the file.
    pub offset: u64,
    /// 1-based line number of the torn line.
    pub line: usize,
    /// How many bytes the torn line has.
    pub len: usize,
}

/// The parsed content of a JSONL file.
#[derive(Debug, Clone)]
pub struct JsonlFile<T> {
    pub records: Vec<T>,
    pub torn_tail: Option<TornTail>,
}

/// Reads a JSONL file. A missing file reads as empty.
///
/// Rules: every line but the last must parse (else `Corrupt` naming the file and line); the last
/// line is torn if it has no newline or does not parse, and is then reported in `torn_tail` and
/// left out. Empty lines are corrupt: our writer never produces them.
pub fn read_jsonl<T: DeserializeOwned>(path: &Path) -> Result<JsonlFile<T>> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(JsonlFile {
                records: Vec::new(),
                torn_tail: None,
            });
        }
        Err(e) => return Err(Error::io("read", path, e)),
    };
    parse_jsonl(path, &bytes)
}

/// Like [`read_jsonl`] for untyped values.
pub fn read_jsonl_values(path: &Path) -> Result<JsonlFile<serde_json::Value>> {
    read_jsonl(path)
}

pub(crate) fn parse_jsonl<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<JsonlFile<T>> {
    let mut records = Vec::new();
    let mut offset = 0usize;
    let mut line_no = 0usize;
    while offset < bytes.len() {
        line_no += 1;
        let rest = &bytes[offset..];
        let (line, complete) = match rest.iter().position(|&b| b == b'\n') {
            Some(i) => (&rest[..i], true),
            None => (rest, false),
        };
        let is_last = offset + line.len() + usize::from(complete) >= bytes.len();
        let parsed = if complete {
            serde_json::from_slice::<T>(line).map_err(|e| e.to_string())
        } else {
            Err("no trailing newline".to_string())
        };
        match parsed {
            Ok(record) => records.push(record),
            Err(_) if is_last => {
                return Ok(JsonlFile {
                    records,
                    torn_tail: Some(TornTail {
                        offset: offset as u64,
                        line: line_no,
                        len: rest.len(),
                    }),
                });
            }
            Err(reason) => {
                return Err(Error::corrupt(format!(
                    "{}:{line_no}: damaged record ({reason})",
                    path.display()
                ))
                .with_hint(
                    "this is not a torn last line from a crash; restore the file from a backup or bundle",
                ));
            }
        }
        offset += line.len() + 1;
    }
    Ok(JsonlFile {
        records,
        torn_tail: None,
    })
}

/// Truncates a torn tail found by [`read_jsonl`]. Call only while holding the file's writer lock,
/// and only with the `TornTail` of a read done under that same lock.
pub fn repair_torn_tail(path: &Path, tail: &TornTail) -> Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| Error::io("open for repair", path, e))?;
    let len = file
        .metadata()
        .map_err(|e| Error::io("stat", path, e))?
        .len();
    if len != tail.offset + tail.len as u64 {
        return Err(Error::conflict(format!(
            "{} changed while repairing its torn last line; retry",
            path.display()
        )));
    }
    file.set_len(tail.offset)
        .map_err(|e| Error::io("truncate", path, e))?;
    file.sync_all().map_err(|e| Error::io("fsync", path, e))
}

/// Ends a file whose last line is complete but lacks its newline (written by another tool or by
/// hand) with one, so the next [`append_line`] starts a line of its own. `len` is the length
/// the caller read under the file's writer lock; a file of another length changed meanwhile.
pub fn terminate_last_line(path: &Path, len: u64) -> Result<()> {
    let mut file = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| Error::io("open for append", path, e))?;
    let now = file
        .metadata()
        .map_err(|e| Error::io("stat", path, e))?
        .len();
    if now != len {
        return Err(Error::conflict(format!(
            "{} changed while adding the newline its last line lacks; retry",
            path.display()
        )));
    }
    file.write_all(b"\n")
        .map_err(|e| Error::io("append to", path, e))?;
    file.sync_data().map_err(|e| Error::io("fsync", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Value, json};

    #[test]
    fn append_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        append_line(&path, r#"{"a":1}"#).unwrap();
        append_line(&path, r#"{"a":2}"#).unwrap();
        let file: JsonlFile<Value> = read_jsonl(&path).unwrap();
        assert_eq!(file.records, vec![json!({"a":1}), json!({"a":2})]);
        assert!(file.torn_tail.is_none());
    }

    #[test]
    fn torn_tail_is_reported_and_repaired() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.jsonl");
        append_line(&path, r#"{"a":1}"#).unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"a":"#).unwrap();
        let file: JsonlFile<Value> = read_jsonl(&path).unwrap();
        assert_eq!(file.records.len(), 1);
        let tail = file.torn_tail.unwrap();
        assert_eq!(tail.line, 2);
        repair_torn_tail(&path, &tail).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "{\"a\":1}\n");
        append_line(&path, r#"{"a":3}"#).unwrap();
        let file: JsonlFile<Value> = read_jsonl(&path).unwrap();
        assert_eq!(file.records.len(), 2);
    }

    #[test]
    fn complete_but_unparsable_last_line_is_torn() {
        let file: JsonlFile<Value> = parse_jsonl(Path::new("x"), b"{\"a\":1}\n{garbage\n").unwrap();
        assert_eq!(file.records.len(), 1);
        assert_eq!(file.torn_tail.unwrap().offset, 8);
    }

    #[test]
    fn damage_in_the_middle_is_corrupt() {
        let err =
            parse_jsonl::<Value>(Path::new("j.jsonl"), b"{\"a\":1}\nxx\n{\"a\":2}\n").unwrap_err();
        assert_eq!(err.kind, crate::error::ErrorKind::Corrupt);
        assert!(err.message.contains("j.jsonl:2"), "{}", err.message);
    }

    #[test]
    fn empty_line_in_the_middle_is_corrupt() {
        assert!(parse_jsonl::<Value>(Path::new("j"), b"{}\n\n{}\n").is_err());
    }

    proptest! {
        /// Any prefix of a valid file reads as the complete records it contains, never an error.
        #[test]
        fn any_prefix_recovers_the_complete_records(n in 1usize..20, cut in 0usize..400) {
            let mut bytes = Vec::new();
            let mut ends = Vec::new();
            for i in 0..n {
                bytes.extend_from_slice(format!("{{\"i\":{i},\"pad\":\"{}\"}}\n", "x".repeat(i)).as_bytes());
                ends.push(bytes.len());
            }
            let cut = cut.min(bytes.len());
            let file: JsonlFile<Value> = parse_jsonl(Path::new("p"), &bytes[..cut]).unwrap();
            let complete = ends.iter().filter(|&&e| e <= cut).count();
            prop_assert_eq!(file.records.len(), complete);
            prop_assert_eq!(file.torn_tail.is_some(), !ends.contains(&cut) && cut != 0);
        }

        /// Arbitrary bytes never panic the reader.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_jsonl::<Value>(Path::new("p"), &bytes);
        }
    }
}
