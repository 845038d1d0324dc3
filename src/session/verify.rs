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
//! every referenced blob (present, right size, right hash).
//!
//! Reading only: nothing is written and no lock is taken, so it works while a run is active (a
//! torn last line being written is ignored, unless `strict` asks for complete files).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::fsx;
use crate::ids::{self, IdKind};
use crate::journal::{self, JournalRecord, OpPhase};
use crate::run::state::{RunState, RunStatus};
use crate::session::{Message, Role, SessionMeta};
use crate::state::SessionPaths;

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
    verify_with(paths, session_id, blobs_dir, mode, &HashMap::new())
}

/// [`verify`], where `hashed` maps blob names (hex) whose bytes the caller has already hashed
/// against their name (import does so while staging them) to their size: such a blob's reference
/// is checked against that size instead of reading and hashing the file a second time. Every
/// other blob is read and hashed here.
pub fn verify_with(
    paths: &SessionPaths,
    session_id: &str,
    blobs_dir: &Path,
    mode: Mode,
    hashed: &HashMap<String, u64>,
) -> Result<Verified> {
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

    let messages_path = paths.messages();
    let messages = read_chain::<Message>(&messages_path, mode, &mut out)?;
    let mut by_id: HashMap<&str, (usize, &Message)> = HashMap::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        if by_id.insert(m.id.as_str(), (i + 1, m)).is_some() {
            return Err(corrupt_at(
                &messages_path,
                i + 1,
                format!("message id {} appears twice", m.id),
            ));
        }
    }
    out.messages = messages.len();

    let runs = run_ids(&paths.runs_dir())?;
    // A fork starts without runs (its copied messages name the parent's runs).
    if let Some(first) = &meta.first_run_id
        && !runs.contains(first)
    {
        return Err(corrupt(
            &paths.session_json(),
            format!("firstRunId {first} has no run directory"),
        ));
    }
    let mut journals = HashMap::new();
    for run_id in &runs {
        let run_paths = paths.run(run_id);
        let run: RunState = read_json(&run_paths.run_json())?;
        let run_json = run_paths.run_json();
        if run.id != *run_id || run.session_id != session_id {
            return Err(corrupt(
                &run_json,
                format!(
                    "names run {} of session {} but is stored as {run_id} of {session_id}",
                    run.id, run.session_id
                ),
            ));
        }
        match by_id.get(run.task_message_id.as_str()) {
            Some((_, m)) if m.role == Role::User && m.run_id == *run_id => {}
            _ => {
                return Err(corrupt(
                    &run_json,
                    format!(
                        "taskMessageId {} is not a user message of this run in messages.jsonl",
                        run.task_message_id
                    ),
                ));
            }
        }
        if run.settled
            && let Some(final_id) = run
                .result
                .as_ref()
                .and_then(|r| r.final_message_id.as_ref())
            && !by_id.contains_key(final_id.as_str())
        {
            return Err(corrupt(
                &run_json,
                format!(
                    "the run is settled but its final message {final_id} is not in messages.jsonl"
                ),
            ));
        }

        let journal_path = run_paths.journal();
        let records = read_chain::<JournalRecord>(&journal_path, mode, &mut out)?;
        // Cross-references are checked on the records by reference, then the records are folded
        // (moved, not cloned); a fold error still wins, as it is the first check of the journal.
        let checked = (|| -> Result<()> {
            for (i, record) in records.iter().enumerate() {
                let line = i + 1;
                match record {
                    JournalRecord::Started {
                        op_id,
                        message_id,
                        tool_call_id,
                        call_index,
                        ..
                    } => {
                        let asks = by_id.get(message_id.as_str()).is_some_and(|(_, m)| {
                            m.role == Role::Assistant
                                && m.run_id == *run_id
                                && m.tool_calls
                                    .get(*call_index)
                                    .is_some_and(|c| c.id == *tool_call_id)
                        });
                        if !asks {
                            return Err(corrupt_at(
                                &journal_path,
                                line,
                                format!(
                                    "operation {op_id} names call {call_index} ({tool_call_id}) of assistant message {message_id}, which messages.jsonl does not hold"
                                ),
                            ));
                        }
                    }
                    JournalRecord::Settled {
                        op_id,
                        turn_message_id,
                        ..
                    } => {
                        let answers = by_id.get(turn_message_id.as_str()).is_some_and(|(_, m)| {
                            m.role == Role::Tool && m.op_id.as_deref() == Some(op_id.as_str())
                        });
                        if !answers {
                            return Err(corrupt_at(
                                &journal_path,
                                line,
                                format!(
                                    "operation {op_id} is settled by tool message {turn_message_id}, which messages.jsonl does not hold"
                                ),
                            ));
                        }
                    }
                    JournalRecord::OutcomeKnown { output, .. }
                    | JournalRecord::Resolved { output, .. } => {
                        if let Some(blob) = &output.blob {
                            let name = blob.sha256.strip_prefix("sha256:").unwrap_or(&blob.sha256);
                            check_blob(blobs_dir, name, blob.bytes, hashed)
                                .map_err(|why| corrupt_at(&journal_path, line, why))?;
                            out.blobs.insert(name.to_string());
                        }
                    }
                    JournalRecord::OutcomeUnknown { .. } => {}
                }
            }
            Ok(())
        })();
        let table = journal::fold(&journal_path, records)?;
        checked?;
        if run.status == RunStatus::InputRequired {
            for op in &run.unknown_ops {
                if table.get(op).map(|s| s.phase) != Some(OpPhase::OutcomeUnknown) {
                    return Err(corrupt(
                        &run_json,
                        format!(
                            "unknownOps names {op}, which its journal does not hold as outcomeUnknown"
                        ),
                    ));
                }
            }
        }
        out.operations += table.ops().len();
        journals.insert(run_id.clone(), table);
    }

    // A fork's copied prefix belongs to its parent's runs (reachable through `parentId`).
    let inherited = meta.fork_point.as_ref().map_or(0, |p| p.copied());
    for (id, (line, m)) in &by_id {
        if *line <= inherited {
            continue;
        }
        let Some(table) = journals.get(&m.run_id) else {
            return Err(corrupt_at(
                &messages_path,
                *line,
                format!(
                    "message {id} belongs to run {}, which has no run directory",
                    m.run_id
                ),
            ));
        };
        if let Some(op_id) = &m.op_id
            && table.get(op_id).is_none()
        {
            return Err(corrupt_at(
                &messages_path,
                *line,
                format!(
                    "tool message {id} answers operation {op_id}, which the journal of run {} does not hold",
                    m.run_id
                ),
            ));
        }
    }
    out.runs = runs;
    out.torn_tails.sort();
    Ok(out)
}

/// The lock must re-derive (definition hash, policy hash, budgets, capabilities):
/// [`DcpAgentLock::verify`](crate::agent::lock::DcpAgentLock::verify).
fn check_lock(session_json: &Path, lock: &crate::agent::lock::DcpAgentLock) -> Result<()> {
    lock.verify().map_err(|e| {
        let mut err = Error::corrupt(format!("{}: {}", session_json.display(), e.message));
        err.hints = e.hints;
        err
    })
}

fn check_blob(
    blobs_dir: &Path,
    name: &str,
    bytes: u64,
    hashed: &HashMap<String, u64>,
) -> std::result::Result<(), String> {
    if name.len() != 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(format!("blob id {name:?} is not 64 lowercase hex digits"));
    }
    let path = blobs_dir.join(name);
    if let Some(&len) = hashed.get(name) {
        if len != bytes {
            return Err(format!(
                "blob {} does not match its reference (expected {bytes} bytes hashing to its name)",
                path.display()
            ));
        }
        return Ok(());
    }
    let mut hasher = crate::hash::Sha256Stream::new();
    let mut file = std::fs::File::open(&path)
        .map_err(|e| format!("references blob {name}, which cannot be read ({e})"))?;
    let mut buf = vec![0u8; 1 << 16];
    let mut len = 0u64;
    loop {
        use std::io::Read;
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("cannot read blob {} ({e})", path.display()))?;
        if n == 0 {
            break;
        }
        len += n as u64;
        hasher.update(&buf[..n]);
    }
    if len != bytes || hasher.finish_hex() != name {
        return Err(format!(
            "blob {} does not match its reference (expected {bytes} bytes hashing to its name)",
            path.display()
        ));
    }
    Ok(())
}

fn read_chain<T: DeserializeOwned>(path: &Path, mode: Mode, out: &mut Verified) -> Result<Vec<T>> {
    let file = fsx::read_chain::<T>(path)?;
    out.complete_lengths
        .insert(path.to_path_buf(), file.complete_len);
    if let Some(tail) = &file.torn_tail {
        if mode == Mode::Strict {
            return Err(corrupt_at(
                path,
                tail.line,
                "incomplete last line (the file was cut short)".into(),
            ));
        }
        out.torn_tails
            .push(format!("{}:{}", path.display(), tail.line));
    }
    Ok(file.records)
}

fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let bytes = std::fs::read(path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::corrupt(format!("{} is missing", path.display()))
        } else {
            Error::io("read", path, e)
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| corrupt(path, format!("does not parse: {e}")))
}

/// The run directories, sorted; anything else under `runs/` (but dot files) is damage.
fn run_ids(runs_dir: &Path) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(runs_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", runs_dir, e)),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list", runs_dir, e))?;
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
        ids.push(name);
    }
    ids.sort();
    Ok(ids)
}

fn corrupt(path: &Path, why: String) -> Error {
    Error::corrupt(format!("{}: {why}", path.display()))
        .with_hint("restore the session from a backup or bundle")
}

fn corrupt_at(path: &Path, line: usize, why: String) -> Error {
    Error::corrupt(format!("{}:{line}: {why}", path.display()))
        .with_hint("restore the session from a backup or bundle")
}
