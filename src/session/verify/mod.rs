//! End-to-end verification of one Session directory (`session verify`, and every bundle before
//! export and after import).
//!
//! Checks, in order, and stops at the first broken record (an `Error::corrupt`, exit 10, naming
//! `file:line` or the file and id): `session.json` parses and names this Session; the lock's
//! definition hash re-derives; `messages.jsonl` parses, its hash chain holds and message ids are
//! unique; every run's `run.json` parses and belongs to this Session; every run journal parses,
//! its chain holds and its state machine replays; and the cross-references between them:
//! a run's task message, final message and unknown operations, a journal operation's assistant
//! message and tool call, a settled operation's tool message, a tool message's operation, and
//! every referenced blob (present, right size, right hash); and each run's status against its
//! journal. The cross-file checks live in [`consistency`], shared with the writers
//! ([`check_writer`], [`check_consistency`]).
//!
//! Reading only: nothing is written and no lock is taken, so it works while a run is active: it
//! reads one consistent instant of the files ([`snapshot`]), and a torn last line being written
//! is ignored, unless `strict` asks for complete files.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, ErrorKind, Result};
use crate::fsx;
use crate::fsx::ChainEnd;
use crate::ids::{self, IdKind};
use crate::journal::{Folder, JournalRecord, OpTable};
use crate::session::run_record::RunState;
use crate::session::{Message, SessionMeta};
use crate::state::SessionPaths;

mod consistency;
mod prefetch;
mod snapshot;

use consistency::{
    BlobCheck, RunFiles, RunSeen, check_compactions, check_messages, check_run_journal,
    check_run_record, corrupt, corrupt_at,
};
pub use consistency::{JournalIndex, MessageIndex, check_writer};
use prefetch::Early;
pub use prefetch::{Feed, Prefetch};

/// What a verified Session holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verified {
    pub session_id: String,
    pub messages: usize,
    pub runs: Vec<String>,
    pub operations: usize,
    /// Every blob the journals reference (lowercase hex SHA-256), sorted.
    pub blobs: BTreeSet<String>,
    /// Files that end in a torn last line (a crash mid-append; ignored, repaired by the next
    /// writer). Always empty with `strict`.
    pub torn_tails: Vec<String>,
    /// The `task` children the journals name, as `(run, operation, child)` in run order, then
    /// journal order: what an import checks a tree's links with, without reading the journals
    /// again.
    #[serde(skip)]
    pub children: Vec<(String, String, crate::journal::ChildRef)>,
    /// Length of the complete prefix of each chained file (everything but a torn tail): what an
    /// export copies.
    #[serde(skip)]
    pub complete_lengths: HashMap<std::path::PathBuf, u64>,
}

/// How to treat incomplete files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A Session in a state dir: a torn last line is a crash's leftover and is reported.
    InPlace,
    /// A Session built from a bundle: every file must be complete.
    Strict,
}

/// Verifies the Session in `paths.dir`, whose id must be `session_id`, with blobs in `blobs_dir`.
pub fn verify(
    paths: &SessionPaths,
    session_id: &str,
    blobs_dir: &Path,
    mode: Mode,
) -> Result<Verified> {
    verify_with(
        paths,
        session_id,
        blobs_dir,
        mode,
        &HashMap::new(),
        Prefetch::none(),
    )
}

/// [`verify`], where `hashed` maps blob names (hex) whose bytes the caller has already hashed
/// against their name (import does so while staging them) to their size: such a blob's reference
/// is checked against that size instead of reading and hashing the file a second time. Every
/// other blob is read and hashed here.
///
/// `early` holds chained files already read by a [`Prefetch`] (import reads each file as soon
/// as it is staged, while the rest of the bundle is still arriving); the others are read here.
pub fn verify_with(
    paths: &SessionPaths,
    session_id: &str,
    blobs_dir: &Path,
    mode: Mode,
    hashed: &HashMap<String, u64>,
    early: Prefetch,
) -> Result<Verified> {
    let checks = Checks {
        blobs: Some((blobs_dir, hashed)),
        only: None,
    };
    verify_checked(paths, session_id, mode, &checks, early)
}

/// The consistency check of a writer that reads the files itself (`run resolve`, a new run of
/// `--resume --task`), under the Session's run lease, before it writes: the Session's own
/// records, and every run's (or only run `only`'s) record, journal and messages against each
/// other exactly as [`verify`] checks them — blobs aside, which no writer reads. Corrupt state
/// is exit 10 naming the file, and the caller must then change nothing.
pub fn check_consistency(paths: &SessionPaths, session_id: &str, only: Option<&str>) -> Result<()> {
    let checks = Checks { blobs: None, only };
    verify_checked(paths, session_id, Mode::InPlace, &checks, Prefetch::none()).map(|_| ())
}

/// What [`verify_checked`] checks besides the files' own integrity.
struct Checks<'a> {
    /// Where blobs are and which were hashed already; `None`: blobs are not checked.
    blobs: Option<(&'a Path, &'a HashMap<String, u64>)>,
    /// Check only this run (and its messages); `None`: every run.
    only: Option<&'a str>,
}

fn verify_checked(
    paths: &SessionPaths,
    session_id: &str,
    mode: Mode,
    checks: &Checks,
    early: Prefetch,
) -> Result<Verified> {
    let mut early = early.finish();
    ids::validate_kind(session_id, IdKind::Session)?;
    let mut out = Verified {
        session_id: session_id.to_string(),
        ..Verified::default()
    };

    let meta: SessionMeta = read_json(&paths.session_json())?;
    if meta.id != session_id {
        return Err(corrupt(
            &paths.session_json(),
            format!("names session {} but is stored as {session_id}", meta.id),
        ));
    }
    check_lock(&paths.session_json(), &meta.lock)?;
    let lease_json = paths.lease_json();
    if lease_json.exists() {
        read_json::<crate::session::LeaseRecord>(&lease_json)?;
    }

    // The message log and the run journals are read (chain, parse, journal fold) at the same
    // time on two threads; the results are then checked in the order documented above, so the
    // first broken record reported is the same as reading them one after the other.
    // What is read is one consistent instant of the files (a run may be writing them).
    let snap = snapshot::stable(paths)?;
    let messages_path = paths.messages();
    let listed = match &snap.runs {
        Some(runs) => Ok(runs.iter().map(|r| r.id.clone()).collect::<Vec<_>>()),
        None => run_ids(paths),
    };
    let extent = |run_id: &str| {
        snap.runs
            .as_ref()
            .and_then(|runs| runs.iter().find(|r| r.id == run_id))
    };
    let no_runs = Vec::new();
    let early_messages = match early.remove(&messages_path) {
        Some(Early::Messages(done)) => Some(done),
        _ => None,
    };
    let checked_runs: Vec<String> = listed
        .as_ref()
        .unwrap_or(&no_runs)
        .iter()
        .filter(|id| checks.only.is_none_or(|only| only == id.as_str()))
        .cloned()
        .collect();
    let (messages, journals) = std::thread::scope(|s| {
        // On a second thread unless it was read early (or no thread can be started).
        let messages = match early_messages {
            Some(done) => Err(Some(done)),
            None => std::thread::Builder::new()
                .spawn_scoped(s, || {
                    read_messages_upto(&messages_path, mode, snap.messages)
                })
                .map_err(|_| None),
        };
        let journals: Vec<Result<JournalRead>> = checked_runs
            .iter()
            .map(|run_id| {
                let path = paths.run(run_id).journal();
                match early.remove(&path) {
                    Some(Early::Journal(done)) => done,
                    _ => read_journal_upto(&path, mode, extent(run_id).and_then(|r| r.journal)),
                }
            })
            .collect();
        let messages = match messages {
            Ok(thread) => thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(Some(done)) => done,
            Err(None) => read_messages_upto(&messages_path, mode, snap.messages),
        };
        (messages, journals)
    });

    let (messages, chain) = messages?;
    note_chain(&messages_path, &chain, &mut out);
    let by_id = messages.by_id(&messages_path)?;
    check_compactions(&messages_path, &messages)?;
    out.messages = messages.len();

    let runs = listed?;
    // A fork starts without runs (its copied messages name the parent's runs).
    if let Some(first) = &meta.first_run_id
        && !runs.contains(first)
    {
        return Err(corrupt(
            &paths.session_json(),
            format!("firstRunId {first} has no run directory"),
        ));
    }
    let mut read_runs = Vec::with_capacity(checked_runs.len());
    let mut seqs: HashMap<u64, &str> = HashMap::new();
    for (run_id, journal) in checked_runs.iter().zip(journals) {
        let run_paths = paths.run(run_id);
        let run_json = run_paths.run_json();
        let run: RunState = match extent(run_id).and_then(|r| r.run_json.as_deref()) {
            Some(bytes) => parse_json(&run_json, bytes)?,
            None => return Err(Error::corrupt(format!("{} is missing", run_json.display()))),
        };
        if run.id != *run_id || run.session_id != session_id {
            return Err(corrupt(
                &run_json,
                format!(
                    "names run {} of session {} but is stored as {run_id} of {session_id}",
                    run.id, run.session_id
                ),
            ));
        }
        if let Some(seq) = run.seq
            && let Some(other) = seqs.insert(seq, run_id)
        {
            return Err(corrupt(
                &run_json,
                format!("has seq {seq}, as run {other} has: the order of the runs is lost"),
            ));
        }
        let journal_path = run_paths.journal();
        let journal = journal?;
        note_chain(&journal_path, &journal.chain, &mut out);
        check_run_record(&messages_path, &by_id, &run_json, &run)?;
        // A fold error is the first check of the journal: it wins over its cross-references.
        let table = journal.table?;
        let mut blob_check = checks.blobs.map(|(dir, hashed)| {
            let found = &mut out.blobs;
            move |sha256: &str, bytes: u64| {
                let name = sha256.strip_prefix("sha256:").unwrap_or(sha256);
                check_blob(dir, name, bytes, hashed)?;
                found.insert(name.to_string());
                Ok(())
            }
        });
        let files = RunFiles {
            run_json: &run_json,
            journal: &journal_path,
            run: &run,
            refs: &journal.refs,
            table: &table,
        };
        check_run_journal(
            &messages_path,
            &by_id,
            &files,
            blob_check.as_mut().map(|c| c as &mut BlobCheck),
        )?;
        out.operations += table.ops().len();
        for op in table.ops() {
            if let Some(child) = &op.child {
                out.children
                    .push((run_id.clone(), op.op_id.clone(), child.clone()));
            }
        }
        read_runs.push((run_json, run, table));
    }

    let seen: HashMap<&str, RunSeen> = read_runs
        .iter()
        .map(|(run_json, run, table)| {
            let seen = RunSeen {
                run_json,
                run,
                table,
            };
            (run.id.as_str(), seen)
        })
        .collect();
    // A fork's copied prefix belongs to its parent's runs (reachable through `parentId`).
    let inherited = meta.fork_point.as_ref().map_or(0, |p| p.copied());
    check_messages(&messages_path, &messages, &seen, inherited, checks.only)?;
    out.runs = runs;
    out.torn_tails.sort();
    Ok(out)
}

/// A run journal read: its chain, its folded table (or the fold's first error) and the
/// references of its records (with their line numbers).
struct JournalRead {
    chain: ChainEnd,
    table: Result<OpTable>,
    refs: JournalIndex,
}

/// The first `len` bytes of `path`, as captured in a [`snapshot`] (`None`: the file was absent,
/// so nothing, even if it exists now).
fn prefix(path: &Path, len: Option<u64>) -> Result<Box<dyn std::io::BufRead + Send>> {
    use std::io::Read;
    let Some(len) = len else {
        return Ok(Box::new(std::io::empty()));
    };
    match std::fs::File::open(path) {
        Ok(file) => Ok(Box::new(std::io::BufReader::with_capacity(
            1 << 16,
            file.take(len),
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Box::new(std::io::empty())),
        Err(e) => Err(Error::io("read", path, e)),
    }
}

/// [`read_messages`] of the snapshot's extent of the log.
fn read_messages_upto(
    path: &Path,
    mode: Mode,
    len: Option<u64>,
) -> Result<(MessageIndex, ChainEnd)> {
    read_messages_from(path, prefix(path, len)?, mode)
}

/// [`read_journal`] of the snapshot's extent of the journal.
fn read_journal_upto(path: &Path, mode: Mode, len: Option<u64>) -> Result<JournalRead> {
    read_journal_from(path, prefix(path, len)?, mode)
}

fn read_messages(path: &Path, mode: Mode) -> Result<(MessageIndex, ChainEnd)> {
    match std::fs::File::open(path) {
        Ok(file) => {
            read_messages_from(path, std::io::BufReader::with_capacity(1 << 16, file), mode)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            read_messages_from(path, std::io::empty(), mode)
        }
        Err(e) => Err(Error::io("read", path, e)),
    }
}

fn read_messages_from(
    path: &Path,
    source: impl std::io::BufRead,
    mode: Mode,
) -> Result<(MessageIndex, ChainEnd)> {
    let mut index = MessageIndex::default();
    let chain = fsx::visit_chain_from(path, source, |m: Message| index.push(&m))?;
    strict(path, &chain, mode)?;
    Ok((index, chain))
}

fn read_journal(path: &Path, mode: Mode) -> Result<JournalRead> {
    match std::fs::File::open(path) {
        Ok(file) => read_journal_from(path, std::io::BufReader::with_capacity(1 << 16, file), mode),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            read_journal_from(path, std::io::empty(), mode)
        }
        Err(e) => Err(Error::io("read", path, e)),
    }
}

fn read_journal_from(
    path: &Path,
    source: impl std::io::BufRead,
    mode: Mode,
) -> Result<JournalRead> {
    let mut folder = Folder::default();
    let mut refs = JournalIndex::default();
    let chain = fsx::visit_chain_from(path, source, |record: JournalRecord| {
        refs.push(&record);
        folder.push(record);
    })?;
    strict(path, &chain, mode)?;
    Ok(JournalRead {
        chain,
        table: folder.finish(path),
        refs,
    })
}

/// A torn last line is a crash's leftover in place, damage in a bundle.
fn strict(path: &Path, chain: &ChainEnd, mode: Mode) -> Result<()> {
    if let Some(tail) = &chain.torn_tail
        && mode == Mode::Strict
    {
        return Err(corrupt_at(
            path,
            tail.line,
            "incomplete last line (the file was cut short)".into(),
        ));
    }
    Ok(())
}

fn note_chain(path: &Path, chain: &ChainEnd, out: &mut Verified) {
    out.complete_lengths
        .insert(path.to_path_buf(), chain.complete_len);
    if let Some(tail) = &chain.torn_tail {
        out.torn_tails
            .push(format!("{}:{}", path.display(), tail.line));
    }
}

/// The lock must re-derive (definition hash, policy hash, budgets, capabilities):
/// [`DcpAgentLock::verify`](crate::agent::lock::DcpAgentLock::verify).
fn check_lock(session_json: &Path, lock: &crate::agent::lock::DcpAgentLock) -> Result<()> {
    lock.verify().map_err(|e| {
        Error::wrap(ErrorKind::Corrupt, session_json.display().to_string(), e)
            .with_path(session_json)
    })
}

fn check_blob(
    blobs_dir: &Path,
    name: &str,
    bytes: u64,
    hashed: &HashMap<String, u64>,
) -> Result<()> {
    if name.len() != 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(Error::corrupt(format!(
            "blob id {name:?} is not 64 lowercase hex digits"
        )));
    }
    let path = blobs_dir.join(name);
    if let Some(&len) = hashed.get(name) {
        if len != bytes {
            return Err(Error::corrupt(format!(
                "blob {} does not match its reference (expected {bytes} bytes hashing to its name)",
                path.display()
            )));
        }
        return Ok(());
    }
    let mut hasher = crate::hash::Sha256Stream::new();
    let mut file = std::fs::File::open(&path).map_err(|e| {
        Error::corrupt(format!(
            "references blob {name}, which cannot be read ({e})"
        ))
        .with_source(e)
    })?;
    let mut buf = vec![0u8; 1 << 16];
    let mut len = 0u64;
    loop {
        use std::io::Read;
        let n = file.read(&mut buf).map_err(|e| {
            Error::corrupt(format!("cannot read blob {} ({e})", path.display())).with_source(e)
        })?;
        if n == 0 {
            break;
        }
        len += n as u64;
        hasher.update(&buf[..n]);
    }
    if len != bytes || hasher.finish_hex() != name {
        return Err(Error::corrupt(format!(
            "blob {} does not match its reference (expected {bytes} bytes hashing to its name)",
            path.display()
        )));
    }
    Ok(())
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = std::fs::read(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::corrupt(format!("{} is missing", path.display()))
        } else {
            Error::io("read", path, e)
        }
    })?;
    parse_json(path, &bytes)
}

fn parse_json<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| corrupt(path, format!("does not parse: {e}")))
}

/// The run directories, sorted; anything else under `runs/` (but dot files) is damage. A run
/// directory with neither `run.json` nor a journal is skipped: a crash between creating a new
/// run's directory and writing its `run.json` leaves one, and nothing refers to it.
fn run_ids(paths: &SessionPaths) -> Result<Vec<String>> {
    let runs_dir = paths.runs_dir();
    let entries = match std::fs::read_dir(&runs_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", &runs_dir, e)),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list", &runs_dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if ids::validate_kind(&name, IdKind::Run).is_err() || !entry.path().is_dir() {
            return Err(corrupt(
                &entry.path(),
                "is not a run directory (runs/ holds only run_… directories)".into(),
            ));
        }
        let run = paths.run(&name);
        if !run.run_json().exists() && !run.journal().exists() {
            continue;
        }
        ids.push(name);
    }
    ids.sort();
    Ok(ids)
}
