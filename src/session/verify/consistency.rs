//! The cross-file consistency of a run — its `run.json` against its journal against the
//! Session's messages — as one set of checks shared by `session verify` and by every writer
//! before it changes a run (the agent loop, `run resolve`, a new run of `--resume --task`).
//!
//! Why writers check too: a writer that trusted damaged state would act on it — re-run an
//! operation whose outcome is UNKNOWN because its journal was emptied, cut a message log that
//! was truncated mid-file further as if it were a torn tail, or continue a completed run that
//! was edited back to `running`. Every state a crash can leave passes these checks (they are
//! the states the writers produce between any two durable steps); everything else is corrupt
//! state (exit 10, naming the file).
//!
//! What is kept of each record is its ids and links ([`MsgRef`], [`OpRef`]), never its content,
//! so a writer can index the files while it reads them anyway, at no second read.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::error::{Error, ErrorKind, Result};
use crate::journal::{JournalRecord, OpPhase, OpTable};
use crate::session::run_record::{RunState, RunStatus};
use crate::session::{Message, Role};

/// What the checks keep of a message: its ids and links, not its content (so memory does not
/// grow with the size of the log).
#[derive(Debug)]
pub(super) struct MsgRef {
    pub line: usize,
    pub id: String,
    pub run_id: String,
    pub role: Role,
    /// The ids of an assistant message's tool calls, in order.
    pub call_ids: Vec<String>,
    /// A digest of each call's arguments (compact JSON), compared with the journal's `started`
    /// record: the journal covers a last assistant message no successor's `prevHash` protects.
    pub call_args: Vec<u64>,
    pub op_id: Option<String>,
    /// Tool messages: the assistant message and the position of the call they answer.
    pub reply_to: Option<(String, usize)>,
    /// Compaction records: the range they replace (`from`, `to`, message count).
    pub compacts: Option<(String, String, usize)>,
    /// For an assistant message without tool calls (a run's final answer): a hash of its content,
    /// to compare with the run's recorded `finalText`. The last line of a chained file has no
    /// successor to protect it; this cross-reference does.
    pub answer_hash: Option<u64>,
}

/// A fast, non-cryptographic digest of a final answer or a call's arguments. It detects a changed
/// or swapped record; a forger able to rewrite both sides of a cross-reference is beyond any check
/// without a secret, as `docs/state-format.md` says.
pub(super) fn digest(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// The messages of a Session as the checks see them, in log order. Feed it every message as the
/// log is read ([`MessageIndex::push`]).
#[derive(Debug, Default)]
pub struct MessageIndex {
    pub(super) refs: Vec<MsgRef>,
}

impl MsgRef {
    /// What the checks keep of message `m` at `line` of its file.
    fn of(m: &Message, line: usize) -> MsgRef {
        MsgRef {
            line,
            id: m.id.clone(),
            run_id: m.run_id.clone(),
            role: m.role,
            answer_hash: (m.role == Role::Assistant && m.tool_calls.is_empty())
                .then(|| digest(&m.content)),
            call_args: m
                .tool_calls
                .iter()
                .map(|c| digest(&c.arguments.to_string()))
                .collect(),
            call_ids: m.tool_calls.iter().map(|c| c.id.clone()).collect(),
            op_id: m.op_id.clone(),
            reply_to: m
                .reply_to
                .clone()
                .map(|r| (r, m.call_index.unwrap_or(usize::MAX))),
            compacts: m
                .compacts
                .as_ref()
                .map(|c| (c.from.clone(), c.to.clone(), c.messages)),
        }
    }
}

impl MessageIndex {
    /// Takes the next message of the log.
    pub fn push(&mut self, m: &Message) {
        // Every record is one line, in order.
        let line = self.refs.len() + 1;
        self.refs.push(MsgRef::of(m, line));
    }

    pub fn len(&self) -> usize {
        self.refs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.refs.is_empty()
    }

    /// The messages by id; a repeated id is corrupt (naming `messages:line`).
    pub(super) fn by_id(&self, messages: &Path) -> Result<HashMap<&str, &MsgRef>> {
        let mut by_id = HashMap::with_capacity(self.refs.len());
        for m in &self.refs {
            if by_id.insert(m.id.as_str(), m).is_some() {
                return Err(corrupt_at(
                    messages,
                    m.line,
                    format!("message id {} appears twice", m.id),
                ));
            }
        }
        Ok(by_id)
    }
}

/// What the checks keep of a journal record.
#[derive(Debug)]
pub(super) enum OpRef {
    Started {
        op_id: String,
        message_id: String,
        tool_call_id: String,
        call_index: usize,
        /// [`digest`] of the arguments' compact JSON.
        arguments: u64,
        /// The assistant message the record carries (see [`JournalRecord::Started`]).
        embedded: Option<Box<MsgRef>>,
    },
    Settled {
        op_id: String,
        turn_message_id: String,
    },
    /// An outcome whose full output is in a blob.
    Blob { sha256: String, bytes: u64 },
}

/// The references of a run journal's records, with their line numbers. Feed it every record as
/// the journal is read ([`JournalIndex::push`]), before folding it.
#[derive(Debug, Default)]
pub struct JournalIndex {
    pub(super) records: Vec<(usize, OpRef)>,
    line: usize,
}

impl JournalIndex {
    /// Takes the next record of the journal.
    pub fn push(&mut self, record: &JournalRecord) {
        self.line += 1;
        let kept = match record {
            // An approval's first record names its call as `started` does (and the `started`
            // of an approved call names the same call again).
            JournalRecord::Started {
                op_id,
                message_id,
                tool_call_id,
                call_index,
                arguments,
                assistant,
                ..
            } => Some(OpRef::Started {
                op_id: op_id.clone(),
                message_id: message_id.clone(),
                tool_call_id: tool_call_id.clone(),
                call_index: *call_index,
                arguments: digest(&arguments.to_string()),
                embedded: assistant
                    .as_ref()
                    .map(|m| Box::new(MsgRef::of(m, self.line))),
            }),
            JournalRecord::AwaitingApproval {
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
                embedded: None,
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
            JournalRecord::OutcomeUnknown { .. }
            | JournalRecord::Approved { .. }
            | JournalRecord::Denied { .. }
            | JournalRecord::McpStream { .. } => None,
        };
        if let Some(kept) = kept {
            self.records.push((self.line, kept));
        }
    }
}

/// One run as the checks see it.
pub(super) struct RunFiles<'a> {
    pub run_json: &'a Path,
    pub journal: &'a Path,
    pub run: &'a RunState,
    pub refs: &'a JournalIndex,
    pub table: &'a OpTable,
}

/// Checks a referenced blob (`sha256` as recorded, `bytes`); the error (corrupt state) says
/// only what is wrong with the blob, and the caller places it at the journal's line.
pub(super) type BlobCheck<'a> = dyn FnMut(&str, u64) -> Result<()> + 'a;

/// The checks of one run against the messages (`by_id`, read from `messages`), in the order
/// `docs/state-format.md` lists them; the first failure is returned. `blobs` checks each blob a
/// journal record references (verification; writers do not re-hash blobs).
pub(super) fn check_run(
    messages: &Path,
    by_id: &HashMap<&str, &MsgRef>,
    files: &RunFiles,
    blobs: Option<&mut BlobCheck>,
) -> Result<()> {
    check_run_record(messages, by_id, files.run_json, files.run)?;
    check_run_journal(messages, by_id, files, blobs)
}

/// The run record's own references: its task message and, once settled, its final message.
pub(super) fn check_run_record(
    messages: &Path,
    by_id: &HashMap<&str, &MsgRef>,
    run_json: &Path,
    run: &RunState,
) -> Result<()> {
    let run_id = run.id.as_str();
    let messages_name = file_name(messages);
    match by_id.get(run.task_message_id.as_str()) {
        Some(m) if m.role == Role::User && m.run_id == run_id => {}
        // `--resume --task` writes the new run's run.json before its task message, and the run
        // appends the message itself if a crash came between: a run that never started may
        // lack it.
        None if run.status == RunStatus::Queued && run.attempts.is_empty() => {}
        _ => {
            return Err(corrupt(
                run_json,
                format!(
                    "taskMessageId {} is not a user message of this run in {messages_name}",
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
                run_json,
                format!(
                    "the run is settled but its final message {final_id} is not in {messages_name}"
                ),
            ));
        };
        let agrees = message.role == Role::Assistant
            && message.run_id == run_id
            && message.answer_hash == Some(digest(&result.final_text));
        if !agrees {
            return Err(corrupt(
                run_json,
                format!(
                    "the run's finalText is not the content of its final message {final_id} \
                     ({messages_name} line {}): one of them was changed",
                    message.line
                ),
            ));
        }
    }
    Ok(())
}

/// The journal against the messages ([`check_journal_refs`]) and the run's status against the
/// journal ([`check_status`]).
pub(super) fn check_run_journal(
    messages: &Path,
    by_id: &HashMap<&str, &MsgRef>,
    files: &RunFiles,
    blobs: Option<&mut BlobCheck>,
) -> Result<()> {
    let messages_name = file_name(messages);
    check_journal_refs(messages_name, by_id, files, blobs)?;
    if files.run.status == RunStatus::Queued
        && files.run.attempts.is_empty()
        && !files.table.ops().is_empty()
    {
        return Err(corrupt(
            files.run_json,
            format!(
                "the run never started, but {} holds operations",
                files.journal.display()
            ),
        ));
    }
    check_status(files.run_json, files.journal, files.run, files.table)
}

/// Each journal record's references: a `started` record's assistant message and call (with the
/// same arguments), a `settled` record's tool message, an outcome's blob.
///
/// A run still `running` may reference messages a power cut took from the end of the log
/// (lazy appends, see the journal module's durability invariant), exactly those recovery puts
/// back: an assistant message a `started` record of the journal carries (its copy is then
/// checked as the log's would be), and the tool message of an operation whose outcome is
/// recorded. The hash chain makes anything the log lost a suffix. A run that stopped
/// (`inputRequired`) or ended made its files durable first, so it references only what the log
/// holds.
fn check_journal_refs(
    messages_name: &str,
    by_id: &HashMap<&str, &MsgRef>,
    files: &RunFiles,
    mut blobs: Option<&mut BlobCheck>,
) -> Result<()> {
    let (run_id, journal) = (files.run.id.as_str(), files.journal);
    // Only a run its record calls `running` can lag: one that stopped or ended synced first.
    let lag = files.run.status == RunStatus::Running;
    let mut carried: HashMap<&str, &MsgRef> = HashMap::new();
    for (line, record) in &files.refs.records {
        let line = *line;
        match record {
            OpRef::Started {
                op_id,
                message_id,
                tool_call_id,
                call_index,
                arguments,
                embedded,
            } => {
                if let Some(copy) = embedded {
                    if copy.id != *message_id {
                        return Err(corrupt_at(
                            journal,
                            line,
                            format!(
                                "operation {op_id} carries assistant message {} but names                                  {message_id}",
                                copy.id
                            ),
                        ));
                    }
                    if let Some(logged) = by_id.get(message_id.as_str())
                        && (logged.call_ids != copy.call_ids || logged.call_args != copy.call_args)
                    {
                        return Err(corrupt_at(
                            journal,
                            line,
                            format!(
                                "operation {op_id} carries a copy of assistant message                                  {message_id} that differs from {messages_name}'s: one of them                                  was changed"
                            ),
                        ));
                    }
                    carried.insert(message_id.as_str(), copy);
                }
                let message = by_id.get(message_id.as_str()).copied().or_else(|| {
                    lag.then(|| carried.get(message_id.as_str()).copied())
                        .flatten()
                });
                let asked = message.filter(|m| {
                    m.role == Role::Assistant
                        && m.run_id == run_id
                        && m.call_ids
                            .get(*call_index)
                            .is_some_and(|c| c == tool_call_id)
                });
                let Some(asked) = asked else {
                    return Err(corrupt_at(
                        journal,
                        line,
                        format!(
                            "operation {op_id} names call {call_index} ({tool_call_id}) of \
                             assistant message {message_id}, which {messages_name} does not hold"
                        ),
                    ));
                };
                if asked.call_args.get(*call_index) != Some(arguments) {
                    return Err(corrupt_at(
                        journal,
                        line,
                        format!(
                            "operation {op_id} started call {call_index} of assistant message \
                             {message_id} with other arguments than {messages_name} holds: one \
                             of them was changed"
                        ),
                    ));
                }
            }
            OpRef::Settled {
                op_id,
                turn_message_id,
            } => {
                let answers = match by_id.get(turn_message_id.as_str()) {
                    Some(m) => m.role == Role::Tool && m.op_id.as_deref() == Some(op_id.as_str()),
                    // Lost from the log's end: recovery writes it again from the outcome.
                    None => lag && files.table.get(op_id).is_some_and(|op| op.output.is_some()),
                };
                if !answers {
                    return Err(corrupt_at(
                        journal,
                        line,
                        format!(
                            "operation {op_id} is settled by tool message {turn_message_id}, \
                             which {messages_name} does not hold"
                        ),
                    ));
                }
            }
            OpRef::Blob { sha256, bytes } => {
                if let Some(check) = blobs.as_deref_mut() {
                    check(sha256, *bytes).map_err(|why| {
                        let at = format!("{}:{line}", journal.display());
                        Error::wrap(ErrorKind::Corrupt, at, why)
                            .with_hint("restore the session from a backup or bundle")
                    })?;
                }
            }
        }
    }
    Ok(())
}

/// The run's status must be one its journal allows (docs/spec.md §6, §8):
/// - a terminal run has its result (of the same status), no UNKNOWN operation left, and every
///   operation settled — its journal is complete (a journal that lost its last lines leaves an
///   operation short of `settled`);
/// - a run that is not terminal has no result and is not settled (a settled run edited back to
///   `running` would run again);
/// - `inputRequired` names at least one operation, each UNKNOWN (or resolved since).
fn check_status(run_json: &Path, journal: &Path, run: &RunState, table: &OpTable) -> Result<()> {
    let status = run.status.name();
    let journal_name = file_name(journal);
    if run.status.is_terminal() {
        match &run.result {
            Some(result) if result.status == run.status => {}
            Some(result) => {
                return Err(corrupt(
                    run_json,
                    format!(
                        "the run is {status} but its result is {}: one of them was changed",
                        result.status.name()
                    ),
                ));
            }
            None => {
                return Err(corrupt(
                    run_json,
                    format!("the run is {status} but records no result"),
                ));
            }
        }
        if let Some(op) = table.ops().iter().find(|op| op.phase != OpPhase::Settled) {
            return Err(corrupt(
                run_json,
                format!(
                    "the run is {status} but operation {} is {} in {} ({journal_name} lost its \
                     last lines, or the status was changed)",
                    op.op_id,
                    op.phase.name(),
                    journal.display()
                ),
            ));
        }
        if !run.unknown_ops.is_empty() || !run.approval_ops.is_empty() {
            return Err(corrupt(
                run_json,
                format!("the run is {status} but unknownOps or approvalOps is not empty"),
            ));
        }
        return Ok(());
    }
    if run.settled || run.result.is_some() {
        return Err(corrupt(
            run_json,
            format!(
                "the run is {status} but {}: a finished run's status was changed",
                if run.settled {
                    "settled"
                } else {
                    "records a result"
                }
            ),
        ));
    }
    if run.status == RunStatus::InputRequired {
        if run.unknown_ops.is_empty() && run.approval_ops.is_empty() && run.plan_hold.is_none() {
            return Err(corrupt(
                run_json,
                "the run is inputRequired but unknownOps, approvalOps and planHold are empty"
                    .into(),
            ));
        }
        for op in &run.approval_ops {
            let phase = table.get(op).map(|s| s.phase);
            let waits = matches!(
                phase,
                Some(OpPhase::AwaitingApproval | OpPhase::Approved | OpPhase::Denied)
            );
            if !waits {
                return Err(corrupt(
                    run_json,
                    format!(
                        "approvalOps names {op}, which {} does not hold as awaitingApproval",
                        journal.display()
                    ),
                ));
            }
        }
        for op in &run.unknown_ops {
            let phase = table.get(op).map(|s| s.phase);
            if !matches!(phase, Some(OpPhase::OutcomeUnknown | OpPhase::Resolved)) {
                return Err(corrupt(
                    run_json,
                    format!(
                        "unknownOps names {op}, which {} does not hold as outcomeUnknown",
                        journal.display()
                    ),
                ));
            }
        }
    } else if !run.unknown_ops.is_empty() || !run.approval_ops.is_empty() {
        return Err(corrupt(
            run_json,
            format!("the run is {status} but unknownOps or approvalOps is not empty"),
        ));
    }
    Ok(())
}

/// What the message pass knows of a run: its state and folded journal.
pub(super) struct RunSeen<'a> {
    pub run_json: &'a Path,
    pub run: &'a RunState,
    pub table: &'a OpTable,
}

/// Each message's run (it must have a run directory), a tool message's operation (in that run's
/// journal) and a final answer's run (a run that records it as its final message: a final answer
/// is only ever appended after its run's result). Messages up to line `inherited` belong to a
/// fork's parent and are skipped; with `only`, so are the messages of every other run.
pub(super) fn check_messages(
    messages: &Path,
    index: &MessageIndex,
    runs: &HashMap<&str, RunSeen>,
    inherited: usize,
    only: Option<&str>,
) -> Result<()> {
    let reminded = reminded_answers(index);
    for m in &index.refs {
        if m.line <= inherited || only.is_some_and(|r| r != m.run_id) {
            continue;
        }
        let id = &m.id;
        let Some(seen) = runs.get(m.run_id.as_str()) else {
            return Err(corrupt_at(
                messages,
                m.line,
                format!(
                    "message {id} belongs to run {}, which has no run directory",
                    m.run_id
                ),
            ));
        };
        if let Some(op_id) = &m.op_id
            && seen.table.get(op_id).is_none()
        {
            return Err(corrupt_at(
                messages,
                m.line,
                format!(
                    "tool message {id} answers operation {op_id}, which the journal of run {} does not hold",
                    m.run_id
                ),
            ));
        }
        // An answer the runtime replied to with a reminder (`verifyBeforeCompletion`) is not
        // final: the two are appended in one write, so neither is ever there alone.
        if m.answer_hash.is_some() && !reminded.contains(id.as_str()) {
            let recorded = seen
                .run
                .result
                .as_ref()
                .and_then(|r| r.final_message_id.as_deref());
            if !seen.run.status.is_terminal() || recorded != Some(id.as_str()) {
                return Err(corrupt(
                    seen.run_json,
                    format!(
                        "the run is {} and does not record final message {id}, which {}:{} \
                         holds: its status or result was changed",
                        seen.run.status.name(),
                        file_name(messages),
                        m.line
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Answers (assistant messages without tool calls) that are not a run's final message: those
/// the next message of their run answers as a user message, the runtime's reminder
/// ([`crate::run::verification`]).
fn reminded_answers(index: &MessageIndex) -> HashSet<&str> {
    let mut reminded = HashSet::new();
    let mut open: HashMap<&str, &str> = HashMap::new();
    for m in &index.refs {
        if m.role == Role::Compaction {
            continue;
        }
        if let Some(answer) = open.remove(m.run_id.as_str())
            && m.role == Role::User
        {
            reminded.insert(answer);
        }
        if m.answer_hash.is_some() {
            open.insert(m.run_id.as_str(), m.id.as_str());
        }
    }
    reminded
}

/// Every `compaction` record's range ([`crate::run::compaction`]): both ends are conversation
/// messages before the record, in order; the count it gives is the conversation messages the
/// range holds; it holds no `user` message (a task is never summarized away) and every tool
/// exchange in it whole (each call's result, and no result of a call outside it); and it holds
/// each earlier compaction's range whole or not at all. Only a record carries a range.
pub(super) fn check_compactions(messages: &Path, index: &MessageIndex) -> Result<()> {
    let refs = &index.refs;
    if !refs
        .iter()
        .any(|m| m.role == Role::Compaction || m.compacts.is_some())
    {
        return Ok(());
    }
    // Ids are unique (checked before: `MessageIndex::by_id`).
    let pos: HashMap<&str, usize> = refs
        .iter()
        .enumerate()
        .map(|(i, m)| (m.id.as_str(), i))
        .collect();
    let mut earlier: Vec<(usize, usize, &str)> = Vec::new();
    for (i, m) in refs.iter().enumerate() {
        let bad = |why: String| {
            corrupt_at(
                messages,
                m.line,
                format!("compaction record {} {why}", m.id),
            )
        };
        if m.role != Role::Compaction {
            if m.compacts.is_some() {
                return Err(corrupt_at(
                    messages,
                    m.line,
                    format!(
                        "message {} names a compacted range but is not a compaction record",
                        m.id
                    ),
                ));
            }
            continue;
        }
        let Some((from_id, to_id, count)) = &m.compacts else {
            return Err(bad("names no range (`compacts`)".into()));
        };
        let end = |id: &str| {
            pos.get(id)
                .copied()
                .filter(|&p| p < i && refs[p].role != Role::Compaction)
        };
        let (Some(from), Some(to)) = (end(from_id), end(to_id)) else {
            let missing = if end(from_id).is_none() {
                from_id
            } else {
                to_id
            };
            return Err(bad(format!(
                "names message {missing}, which is not a conversation message before it in the log"
            )));
        };
        if from > to {
            return Err(bad(format!(
                "has a range that runs backwards (from line {} to line {})",
                refs[from].line, refs[to].line
            )));
        }
        let range = &refs[from..=to];
        let held = range.iter().filter(|r| r.role != Role::Compaction).count();
        if held != *count {
            return Err(bad(format!(
                "says it replaces {count} messages, but lines {} to {} hold {held}",
                refs[from].line, refs[to].line
            )));
        }
        if let Some(user) = range
            .iter()
            .find(|r| r.role == Role::User && r.run_id == m.run_id)
        {
            return Err(bad(format!(
                "would summarize away user message {} (line {}), the task of its own run {}: \
                 a run's task is never compacted",
                user.id, user.line, m.run_id
            )));
        }
        let inside = |p: usize| (from..=to).contains(&p);
        let mut answered = std::collections::HashSet::new();
        for (p, r) in refs.iter().enumerate() {
            let Some((asked, index)) = &r.reply_to else {
                continue;
            };
            let asked_inside = pos.get(asked.as_str()).is_some_and(|&a| inside(a));
            if asked_inside != inside(p) {
                return Err(bad(format!(
                    "splits a tool exchange: tool message {} (line {}) answers message {asked},                      and only one of them is in the range",
                    r.id, r.line
                )));
            }
            if inside(p) {
                answered.insert((asked.as_str(), *index));
            }
        }
        for r in range.iter().filter(|r| r.role == Role::Assistant) {
            if let Some(c) =
                (0..r.call_ids.len()).find(|c| !answered.contains(&(r.id.as_str(), *c)))
            {
                return Err(bad(format!(
                    "holds tool call {} of message {} (line {}) without its result",
                    r.call_ids[c], r.id, r.line
                )));
            }
        }
        if let Some((_, _, other)) = earlier
            .iter()
            .find(|(f, t, _)| !((*f >= from && *t <= to) || *t < from || *f > to))
        {
            return Err(bad(format!(
                "overlaps part of the range of compaction record {other} (a range holds an \
                 earlier one whole or not at all)"
            )));
        }
        earlier.push((from, to, m.id.as_str()));
    }
    Ok(())
}

/// The check a writer makes before it changes run `run`: [`check_run`] and [`check_messages`]
/// for that run, on the messages and journal the writer read (`messages`, `journal`; `table` is
/// the folded journal). Blobs are not re-hashed. Any failure is corrupt state (exit 10) naming
/// the file, and the writer must then change nothing.
pub fn check_writer(
    messages_path: &Path,
    messages: &MessageIndex,
    run_json: &Path,
    journal_path: &Path,
    run: &RunState,
    journal: &JournalIndex,
    table: &OpTable,
) -> Result<()> {
    let by_id = messages.by_id(messages_path)?;
    let files = RunFiles {
        run_json,
        journal: journal_path,
        run,
        refs: journal,
        table,
    };
    check_run(messages_path, &by_id, &files, None)?;
    let seen = HashMap::from([(
        run.id.as_str(),
        RunSeen {
            run_json,
            run,
            table,
        },
    )]);
    check_messages(messages_path, messages, &seen, 0, Some(&run.id))?;
    check_compactions(messages_path, messages)
}

fn file_name(path: &Path) -> &str {
    path.file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("the file")
}

pub(super) fn corrupt(path: &Path, why: String) -> Error {
    Error::corrupt(format!("{}: {why}", path.display()))
        .with_hint("restore the session from a backup or bundle")
}

pub(super) fn corrupt_at(path: &Path, line: usize, why: String) -> Error {
    Error::corrupt(format!("{}:{line}: {why}", path.display()))
        .with_hint("restore the session from a backup or bundle")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::{CallRecord, Compacted};

    /// task, then `turns` one-call turns (assistant `msg_aN`, result `msg_rN`).
    fn log(turns: usize) -> Vec<Message> {
        let mut out = vec![Message::new("run_1", Role::User, "task")];
        out[0].id = "msg_task".into();
        for n in 0..turns {
            let mut a = Message::new("run_1", Role::Assistant, "");
            a.id = format!("msg_a{n}");
            a.tool_calls = vec![CallRecord {
                id: format!("c{n}"),
                name: "read".into(),
                arguments: serde_json::json!({}),
            }];
            let mut r = Message::new("run_1", Role::Tool, "x");
            r.id = format!("msg_r{n}");
            r.reply_to = Some(a.id.clone());
            r.call_index = Some(0);
            out.extend([a, r]);
        }
        out
    }

    fn record(id: &str, from: &str, to: &str, messages: usize) -> Message {
        let mut m = Message::new("run_1", Role::Compaction, "summary");
        m.id = id.into();
        m.compacts = Some(Compacted {
            from: from.into(),
            to: to.into(),
            messages,
        });
        m
    }

    fn check(messages: &[Message]) -> std::result::Result<(), String> {
        let mut index = MessageIndex::default();
        for m in messages {
            index.push(m);
        }
        check_compactions(Path::new("messages.jsonl"), &index).map_err(|e| e.message)
    }

    #[test]
    fn compaction_ranges_are_checked() {
        let mut ok = log(4);
        ok.push(record("msg_c1", "msg_a0", "msg_r1", 4));
        assert_eq!(check(&ok), Ok(()));
        // Cumulative (holds the first whole, the record among its lines) and disjoint: fine.
        let mut more = ok.clone();
        more.push(record("msg_c2", "msg_a0", "msg_r2", 6));
        assert_eq!(check(&more), Ok(()));
        let mut disjoint = ok.clone();
        disjoint.push(record("msg_c2", "msg_a2", "msg_r2", 2));
        assert_eq!(check(&disjoint), Ok(()));

        let cases: Vec<(Message, &str)> = vec![
            (
                record("msg_c", "msg_a0", "msg_zz", 4),
                "names message msg_zz",
            ),
            (record("msg_c", "msg_a1", "msg_a0", 1), "runs backwards"),
            (
                record("msg_c", "msg_a0", "msg_r1", 5),
                "says it replaces 5 messages",
            ),
            (
                record("msg_c", "msg_task", "msg_r0", 3),
                "would summarize away user message msg_task",
            ),
            (
                record("msg_c", "msg_r0", "msg_r1", 3),
                "splits a tool exchange",
            ),
            (
                record("msg_c", "msg_a0", "msg_a1", 3),
                "splits a tool exchange",
            ),
            (
                record("msg_c", "msg_a1", "msg_r2", 4),
                "overlaps part of the range of compaction record msg_c1",
            ),
            (
                record("msg_c", "msg_c1", "msg_r2", 4),
                "not a conversation message",
            ),
        ];
        for (bad, why) in cases {
            let mut messages = ok.clone();
            messages.push(bad);
            let err = check(&messages).unwrap_err();
            assert!(err.contains(why), "{why}: {err}");
            assert!(err.starts_with("messages.jsonl:"), "{err}");
        }
        // A range that names a message after the record.
        let mut later = log(2);
        later.insert(3, record("msg_c", "msg_a0", "msg_r1", 4));
        assert!(
            check(&later)
                .unwrap_err()
                .contains("not a conversation message before it")
        );
        // A call without its result in the range.
        let mut open = log(2);
        open.remove(2);
        open.push(record("msg_c", "msg_a0", "msg_r1", 3));
        let err = check(&open).unwrap_err();
        assert!(err.contains("holds tool call c0"), "{err}");
        // Only a compaction record carries a range; a record carries one.
        let mut stray = log(1);
        stray[1].compacts = Some(Compacted {
            from: "msg_a0".into(),
            to: "msg_a0".into(),
            messages: 1,
        });
        assert!(
            check(&stray)
                .unwrap_err()
                .contains("is not a compaction record")
        );
        let mut bare = log(1);
        let mut r = record("msg_c", "x", "y", 0);
        r.compacts = None;
        bare.push(r);
        assert!(check(&bare).unwrap_err().contains("names no range"));
    }
}
