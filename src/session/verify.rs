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
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::fsx;
use crate::fsx::ChainEnd;
use crate::ids::{self, IdKind};
use crate::journal::{Folder, JournalRecord, OpPhase, OpTable};
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
    let messages_path = paths.messages();
    let listed = run_ids(&paths.runs_dir());
    let no_runs = Vec::new();
    let early_messages = match early.remove(&messages_path) {
        Some(Early::Messages(done)) => Some(done),
        _ => None,
    };
    let (messages, journals) = std::thread::scope(|s| {
        // On a second thread unless it was read early (or no thread can be started).
        let messages = match early_messages {
            Some(done) => Err(Some(done)),
            None => std::thread::Builder::new()
                .spawn_scoped(s, || read_messages(&messages_path, mode))
                .map_err(|_| None),
        };
        let runs = listed.as_ref().unwrap_or(&no_runs);
        let journals: Vec<Result<JournalRead>> = runs
            .iter()
            .map(|run_id| {
                let path = paths.run(run_id).journal();
                match early.remove(&path) {
                    Some(Early::Journal(done)) => done,
                    _ => read_journal(&path, mode),
                }
            })
            .collect();
        let messages = match messages {
            Ok(thread) => thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(Some(done)) => done,
            Err(None) => read_messages(&messages_path, mode),
        };
        (messages, journals)
    });

    let (messages, chain) = messages?;
    note_chain(&messages_path, &chain, &mut out);
    let mut by_id: HashMap<&str, &MsgRef> = HashMap::with_capacity(messages.len());
    for m in &messages {
        if by_id.insert(m.id.as_str(), m).is_some() {
            return Err(corrupt_at(
                &messages_path,
                m.line,
                format!("message id {} appears twice", m.id),
            ));
        }
    }
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
    let mut tables = HashMap::new();
    let mut seqs: HashMap<u64, &str> = HashMap::new();
    for (run_id, journal) in runs.iter().zip(journals) {
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
        if let Some(seq) = run.seq
            && let Some(other) = seqs.insert(seq, run_id)
        {
            return Err(corrupt(
                &run_json,
                format!("has seq {seq}, as run {other} has: the order of the runs is lost"),
            ));
        }
        match by_id.get(run.task_message_id.as_str()) {
            Some(m) if m.role == Role::User && m.run_id == *run_id => {}
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
            && let Some(result) = run.result.as_ref()
            && let Some(final_id) = result.final_message_id.as_ref()
        {
            let Some(message) = by_id.get(final_id.as_str()) else {
                return Err(corrupt(
                    &run_json,
                    format!(
                        "the run is settled but its final message {final_id} is not in \
                         messages.jsonl"
                    ),
                ));
            };
            let agrees = message.role == Role::Assistant
                && message.run_id == *run_id
                && message.answer_hash == Some(digest(&result.final_text));
            if !agrees {
                return Err(corrupt(
                    &run_json,
                    format!(
                        "the run's finalText is not the content of its final message {final_id} \
                         (messages.jsonl line {}): one of them was changed",
                        message.line
                    ),
                ));
            }
        }

        let journal_path = run_paths.journal();
        let journal = journal?;
        note_chain(&journal_path, &journal.chain, &mut out);
        // Cross-references are checked on what was kept of each record; a fold error still
        // wins, as it is the first check of the journal.
        let checked = (|| -> Result<()> {
            for (line, record) in &journal.records {
                let line = *line;
                match record {
                    OpRef::Started {
                        op_id,
                        message_id,
                        tool_call_id,
                        call_index,
                        arguments,
                    } => {
                        let asks = by_id.get(message_id.as_str()).is_some_and(|m| {
                            m.role == Role::Assistant
                                && m.run_id == *run_id
                                && m.call_ids
                                    .get(*call_index)
                                    .is_some_and(|c| c == tool_call_id)
                        });
                        let same_arguments = asks
                            && by_id
                                .get(message_id.as_str())
                                .is_some_and(|m| m.call_args.get(*call_index) == Some(arguments));
                        if asks && !same_arguments {
                            return Err(corrupt_at(
                                &journal_path,
                                line,
                                format!(
                                    "operation {op_id} started call {call_index} of assistant \
                                     message {message_id} with other arguments than \
                                     messages.jsonl holds: one of them was changed"
                                ),
                            ));
                        }
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
                    OpRef::Settled {
                        op_id,
                        turn_message_id,
                    } => {
                        let answers = by_id.get(turn_message_id.as_str()).is_some_and(|m| {
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
                    OpRef::Blob { sha256, bytes } => {
                        let name = sha256.strip_prefix("sha256:").unwrap_or(sha256);
                        check_blob(blobs_dir, name, *bytes, hashed)
                            .map_err(|why| corrupt_at(&journal_path, line, why))?;
                        out.blobs.insert(name.to_string());
                    }
                }
            }
            Ok(())
        })();
        let table = journal.table?;
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
        tables.insert(run_id.clone(), table);
    }

    // A fork's copied prefix belongs to its parent's runs (reachable through `parentId`).
    let inherited = meta.fork_point.as_ref().map_or(0, |p| p.copied());
    for (id, m) in &by_id {
        if m.line <= inherited {
            continue;
        }
        let Some(table) = tables.get(&m.run_id) else {
            return Err(corrupt_at(
                &messages_path,
                m.line,
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
                m.line,
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

/// Checks chained files on a background thread ahead of [`verify_with`]: import hands it each
/// `messages.jsonl` and `journal.jsonl` as it stages it — its bytes as they are decoded
/// ([`Prefetch::stream`]), or the complete file ([`Prefetch::file`]) — so hashing and parsing
/// the chains overlaps with reading the rest of the bundle, and no file is read back. The bytes
/// must be exactly the file's. Dropping it abandons the work.
pub struct Prefetch {
    jobs: Option<mpsc::Sender<Job>>,
    worker: Option<std::thread::JoinHandle<HashMap<PathBuf, Early>>>,
}

/// One file for the worker: its path, whether it is a journal, and where its bytes come from.
struct Job {
    path: PathBuf,
    journal: bool,
    /// `None`: read the complete file.
    bytes: Option<mpsc::Receiver<Vec<u8>>>,
}

/// The bytes of a file being staged, sent to a [`Prefetch`] as they are written. Dropping it
/// ends the file.
pub struct Feed(mpsc::SyncSender<Vec<u8>>);

impl Feed {
    pub fn send(&self, bytes: &[u8]) {
        // A worker that stopped (it panicked) is reported when the prefetch is finished.
        let _ = self.0.send(bytes.to_vec());
    }
}

/// A [`Read`](std::io::Read) over the chunks of a [`Feed`].
struct FeedReader {
    chunks: mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
}

impl std::io::Read for FeedReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::BufRead;
        let chunk = self.fill_buf()?;
        let n = buf.len().min(chunk.len());
        buf[..n].copy_from_slice(&chunk[..n]);
        self.consume(n);
        Ok(n)
    }
}

/// The chunks are the buffer: lines are read out of them without another copy.
impl std::io::BufRead for FeedReader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.at == self.chunk.len() {
            match self.chunks.recv() {
                Ok(chunk) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                Err(_) => return Ok(&[]),
            }
        }
        Ok(&self.chunk[self.at..])
    }

    fn consume(&mut self, n: usize) {
        self.at += n;
    }
}

/// A file read by a [`Prefetch`].
enum Early {
    Messages(Result<(Vec<MsgRef>, ChainEnd)>),
    Journal(Result<JournalRead>),
}

impl Prefetch {
    /// A prefetch that reads nothing ahead.
    pub fn none() -> Prefetch {
        Prefetch {
            jobs: None,
            worker: None,
        }
    }

    /// A prefetch with one worker thread, checking files with `mode`, one after the other (or
    /// [`Prefetch::none`] if no thread can be started).
    pub fn start(mode: Mode) -> Prefetch {
        let (tx, rx) = mpsc::channel::<Job>();
        let worker = std::thread::Builder::new().spawn(move || {
            let mut done = HashMap::new();
            for job in rx {
                let early = match (job.bytes, job.journal) {
                    (Some(chunks), journal) => {
                        let source = FeedReader {
                            chunks,
                            chunk: Vec::new(),
                            at: 0,
                        };
                        if journal {
                            Early::Journal(read_journal_from(&job.path, source, mode))
                        } else {
                            Early::Messages(read_messages_from(&job.path, source, mode))
                        }
                    }
                    (None, true) => Early::Journal(read_journal(&job.path, mode)),
                    (None, false) => Early::Messages(read_messages(&job.path, mode)),
                };
                done.insert(job.path, early);
            }
            done
        });
        match worker {
            Ok(worker) => Prefetch {
                jobs: Some(tx),
                worker: Some(worker),
            },
            // No thread to spare: everything is read by `verify_with` itself.
            Err(_) => Prefetch::none(),
        }
    }

    /// Queues the complete file at `path` (`journal`: a run journal, else the message log).
    pub fn file(&self, path: &Path, journal: bool) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(Job {
                path: path.to_path_buf(),
                journal,
                bytes: None,
            });
        }
    }

    /// Queues the file being written at `path`; its bytes go through the returned feed, which
    /// must be dropped (ending the file) before the next one is queued. A few chunks are
    /// buffered; beyond that, sending waits for the worker.
    pub fn stream(&self, path: &Path, journal: bool) -> Option<Feed> {
        let jobs = self.jobs.as_ref()?;
        let (tx, rx) = mpsc::sync_channel(8);
        jobs.send(Job {
            path: path.to_path_buf(),
            journal,
            bytes: Some(rx),
        })
        .ok()?;
        Some(Feed(tx))
    }

    /// Waits for the queued files.
    fn finish(mut self) -> HashMap<PathBuf, Early> {
        drop(self.jobs.take());
        match self.worker.take() {
            Some(worker) => worker
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            None => HashMap::new(),
        }
    }
}

/// What verification keeps of a message: its ids and links, not its content (so memory does
/// not grow with the size of the log).
struct MsgRef {
    line: usize,
    id: String,
    run_id: String,
    role: Role,
    /// The ids of an assistant message's tool calls, in order.
    call_ids: Vec<String>,
    /// A digest of each call's arguments (compact JSON), compared with the journal's `started`
    /// record: the journal covers a last assistant message no successor's `prevHash` protects.
    call_args: Vec<u64>,
    op_id: Option<String>,
    /// For an assistant message without tool calls (a run's final answer): a hash of its content,
    /// to compare with the run's recorded `finalText`. The last line of a chained file has no
    /// successor to protect it; this cross-reference does.
    answer_hash: Option<u64>,
}

/// A fast, non-cryptographic digest of a final answer or a call's arguments. It detects a changed
/// or swapped record; a forger able to rewrite both sides of a cross-reference is beyond any check
/// without a secret, as `docs/state-format.md` says.
fn digest(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// What verification keeps of a journal record for the cross-references.
enum OpRef {
    Started {
        op_id: String,
        message_id: String,
        tool_call_id: String,
        call_index: usize,
        /// [`digest`] of the arguments' compact JSON.
        arguments: u64,
    },
    Settled {
        op_id: String,
        turn_message_id: String,
    },
    /// An outcome whose full output is in a blob.
    Blob { sha256: String, bytes: u64 },
}

/// A run journal read: its chain, its folded table (or the fold's first error) and the
/// references of its records (with their line numbers).
struct JournalRead {
    chain: ChainEnd,
    table: Result<OpTable>,
    records: Vec<(usize, OpRef)>,
}

fn read_messages(path: &Path, mode: Mode) -> Result<(Vec<MsgRef>, ChainEnd)> {
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
) -> Result<(Vec<MsgRef>, ChainEnd)> {
    let mut messages = Vec::new();
    let chain = fsx::visit_chain_from(path, source, |m: Message| {
        messages.push(MsgRef {
            // Every record is one line, in order.
            line: messages.len() + 1,
            id: m.id,
            run_id: m.run_id,
            role: m.role,
            answer_hash: (m.role == Role::Assistant && m.tool_calls.is_empty())
                .then(|| digest(&m.content)),
            call_args: m
                .tool_calls
                .iter()
                .map(|c| digest(&c.arguments.to_string()))
                .collect(),
            call_ids: m.tool_calls.into_iter().map(|c| c.id).collect(),
            op_id: m.op_id,
        });
    })?;
    strict(path, &chain, mode)?;
    Ok((messages, chain))
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
    let mut records = Vec::new();
    let mut line = 0;
    let chain = fsx::visit_chain_from(path, source, |record: JournalRecord| {
        line += 1;
        let kept = match &record {
            JournalRecord::Started {
                op_id,
                message_id,
                tool_call_id,
                call_index,
                arguments,
                ..
            } => Some(OpRef::Started {
                op_id: op_id.clone(),
                message_id: message_id.clone(),
                tool_call_id: tool_call_id.clone(),
                call_index: *call_index,
                arguments: digest(&arguments.to_string()),
            }),
            JournalRecord::Settled {
                op_id,
                turn_message_id,
                ..
            } => Some(OpRef::Settled {
                op_id: op_id.clone(),
                turn_message_id: turn_message_id.clone(),
            }),
            JournalRecord::OutcomeKnown { output, .. } | JournalRecord::Resolved { output, .. } => {
                output.blob.as_ref().map(|b| OpRef::Blob {
                    sha256: b.sha256.clone(),
                    bytes: b.bytes,
                })
            }
            JournalRecord::OutcomeUnknown { .. } => None,
        };
        if let Some(kept) = kept {
            records.push((line, kept));
        }
        folder.push(record);
    })?;
    strict(path, &chain, mode)?;
    Ok(JournalRead {
        chain,
        table: folder.finish(path),
        records,
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
