//! The durable tool journal of one run (docs/spec.md §8).
//!
//! Every tool call is an *operation* that moves `Started → OutcomeKnown → Settled`, or
//! `Started → OutcomeUnknown → Resolved → Settled`; a call whose policy rule is `ask` starts
//! with `AwaitingApproval`, then `Approved → Started → …` or `Denied → Settled`. Each transition is one appended line; the
//! file is never rewritten. The live state of an operation is the fold of its lines, so reading
//! the file back always gives exactly the state the writer had ([`fold`]). Readers fold each
//! record as its line is read ([`read`], [`Journal::open`]): a long journal costs its folded
//! state, never also its decoded records.
//!
//! Invariants the writer keeps (and [`Journal::record`] enforces): `Started` is durable before
//! the side effect runs; no record follows `Settled`; a transition the state machine does not
//! allow is refused before anything is written.
//!
//! # Durability: two fdatasyncs per tool call
//!
//! A sequential tool call costs two `fdatasync`s, and `k` calls started together `2` (the
//! protocol's floor: one before the side effect, one for its outcome). Everything else a call
//! writes is appended *lazily* (written, not synced: [`Journal::record_lazy`],
//! `MessageLog::append_lazy`) and becomes durable with a later sync, because recovery can
//! re-derive it from what is durable:
//!
//! | write | durable | if a power cut loses it |
//! |---|---|---|
//! | the assistant message (`messages.jsonl`) | lazy | the first `started` record of its calls carries it (`assistant`); recovery appends it again |
//! | `started` (+ the assistant message) | **fsync**, before the side effect | — |
//! | `outcomeKnown` | **fsync** | — |
//! | the tool message (`messages.jsonl`) | lazy | `outcomeKnown` holds its content: recovery appends it again (under the id `settled` names, if that survived) |
//! | `settled` | lazy (with the next `started`'s fsync) | the outcome is durable: recovery settles again |
//! | `mcpStream` (an MCP call's stream position) | lazy (with its `outcomeKnown`) | nothing refers to it: the call is UNKNOWN, as without a position |
//!
//! The invariant: **every line that may be lost is re-derivable from lines that are durable**,
//! so no durable line ever refers to something that cannot be put back. In detail:
//! - an assistant message is lazy only while no durable record refers to it without carrying
//!   it: the next `started` carries it; before `awaitingApproval` (which does not) the log is
//!   synced; a synced append to the log (an unrun call's answer, a final answer) covers it;
//! - a lazy tool message or `settled` refers only to an operation whose outcome is durable;
//! - before `run.json` records that the run stopped (`inputRequired`, awaiting approval) or
//!   ended, both files are synced: a run that ended refers only to durable lines, and a later
//!   writer (`run resolve`, a new run) finds nothing lazy behind it;
//! - a file loses lines only at its end (each line chains the previous one's hash, so a lost
//!   line in the middle breaks the chain): what the log lacks is its newest messages, which
//!   recovery (`run::agent_loop`, `rederive_messages`) appends again in the log's order by
//!   walking the operations in start order, before anything else reads the conversation; and
//!   verification accepts exactly these references of a run whose record says `running` (an assistant
//!   message a `started` record carries, the tool message of an operation with an outcome).
//!
//! A process crash (SIGKILL) loses nothing written; only a power cut can lose lazy lines. The
//! crash tests simulate the worst case with `KXEN_FAILPOINT_POWERCUT` (every lazy line since
//! the last sync cut off at the failpoint).

mod compact;
mod record;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

pub use compact::{JsonText, Phases};
pub use record::{BlobPointer, ChildRef, JournalRecord, OpPhase, ToolOutcome};

use crate::error::{Error, Result};
use crate::fsx;

/// The live state of one operation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OpState {
    pub op_id: String,
    pub phase: OpPhase,
    pub tool: String,
    /// The arguments as compact JSON text (they are only ever shown, never re-run from here).
    pub arguments: JsonText,
    pub message_id: String,
    pub tool_call_id: String,
    pub call_index: usize,
    /// `task`: the child Session the operation runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub child: Option<ChildRef>,
    pub started_at: String,
    /// The outcome: recorded by the tool (`OutcomeKnown`) or by an operator (`Resolved`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<ToolOutcome>,
    /// Why the outcome is unknown (after `OutcomeUnknown`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unknown_reason: Option<String>,
    /// The tool result message in the Session (after `Settled`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_message_id: Option<String>,
    /// Every phase the operation went through, in order.
    pub history: Phases,
    /// A call whose rule is `ask`: the rule, what the decision is bound to, and the decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// A Streamable HTTP MCP call: where its answer can be replayed from (`mcpStream`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<crate::mcp::StreamPosition>,
}

/// The approval part of an operation whose policy rule is `ask`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    /// The `mcpTools` pattern whose rule is `ask`.
    pub rule: String,
    /// The hash of the arguments the approval or denial is bound to.
    pub arguments_hash: String,
    /// `approved` or `denied`, once decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<OpPhase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<String>,
}

/// A record the state machine refuses, and why ([`OpTable::apply`]). Its own type, not
/// [`Error`]: what a refusal means depends on the caller (a journal read back is corrupt, exit
/// 10, and names its line; a record about to be written is a bug in the runtime), so each
/// caller gives it its kind; the plain conversion is the writer's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IllegalTransition(pub String);

impl std::fmt::Display for IllegalTransition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for IllegalTransition {}

/// A refusal of a record the runtime itself was about to write: an internal failure.
impl From<IllegalTransition> for Error {
    fn from(why: IllegalTransition) -> Error {
        Error::failed(format!("journal state machine: {why}"))
    }
}

/// Operations in the order they were started, with an index by id.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OpTable {
    ops: Vec<OpState>,
    index: HashMap<String, usize>,
}

impl OpTable {
    /// Applies one record (consumed: folding a large journal moves its data instead of copying
    /// it), refusing a transition the state machine does not allow.
    pub fn apply(&mut self, record: JournalRecord) -> std::result::Result<(), IllegalTransition> {
        let next = record.phase();
        let op_id = record.op_id().to_string();
        let record = match record {
            JournalRecord::AwaitingApproval {
                op_id,
                at,
                tool,
                arguments,
                message_id,
                tool_call_id,
                call_index,
                rule,
                arguments_hash,
            } => {
                if self.index.contains_key(&op_id) {
                    return Err(IllegalTransition(format!(
                        "operation {op_id} recorded twice"
                    )));
                }
                self.index.insert(op_id.clone(), self.ops.len());
                self.ops.push(OpState {
                    op_id,
                    phase: OpPhase::AwaitingApproval,
                    tool,
                    arguments: JsonText::new(&arguments),
                    message_id,
                    tool_call_id,
                    call_index,
                    child: None,
                    started_at: at,
                    output: None,
                    unknown_reason: None,
                    turn_message_id: None,
                    history: Phases::new(OpPhase::AwaitingApproval),
                    approval: Some(Approval {
                        rule,
                        arguments_hash,
                        decision: None,
                        decided_at: None,
                    }),
                    stream: None,
                });
                return Ok(());
            }
            JournalRecord::Started {
                op_id,
                at,
                tool,
                arguments,
                message_id,
                tool_call_id,
                call_index,
                child,
                ..
            } if !self.index.contains_key(&op_id) => {
                // Paths are built from a child's ids: they must be ids.
                if let Some(c) = &child {
                    let bad = crate::ids::validate_kind(&c.session_id, crate::ids::IdKind::Session)
                        .and_then(|()| {
                            crate::ids::validate_kind(&c.run_id, crate::ids::IdKind::Run)
                        });
                    if let Err(e) = bad {
                        return Err(IllegalTransition(format!(
                            "operation {op_id} names its child badly: {}",
                            e.message
                        )));
                    }
                }
                self.index.insert(op_id.clone(), self.ops.len());
                self.ops.push(OpState {
                    op_id,
                    phase: OpPhase::Started,
                    tool,
                    arguments: JsonText::new(&arguments),
                    message_id,
                    tool_call_id,
                    call_index,
                    child,
                    started_at: at,
                    output: None,
                    unknown_reason: None,
                    turn_message_id: None,
                    history: Phases::new(OpPhase::Started),
                    approval: None,
                    stream: None,
                });
                return Ok(());
            }
            // Not a transition: the position of a running call, at most once, while it is
            // `started` (the operation's phase and history stay as they are).
            JournalRecord::McpStream { position, .. } => {
                let op = self
                    .index
                    .get(&op_id)
                    .map(|&i| &mut self.ops[i])
                    .filter(|op| op.phase == OpPhase::Started && op.stream.is_none())
                    .ok_or_else(|| {
                        IllegalTransition(format!(
                            "an mcpStream record for {op_id}, which is not a running call"
                        ))
                    })?;
                op.stream = Some(position);
                return Ok(());
            }
            other => other,
        };
        let Some(&i) = self.index.get(&op_id) else {
            return Err(IllegalTransition(format!(
                "{} record for unknown operation {op_id}",
                next.name()
            )));
        };
        if next == OpPhase::Started && self.ops[i].phase != OpPhase::Approved {
            return Err(IllegalTransition(format!(
                "operation {op_id} started twice"
            )));
        }
        if let Some(why) = self.binding_refusal(&record) {
            return Err(IllegalTransition(why));
        }
        let op = &mut self.ops[i];
        if !op.phase.allows(next) {
            return Err(IllegalTransition(format!(
                "operation {op_id} cannot go from {} to {}",
                op.phase.name(),
                next.name()
            )));
        }
        match record {
            JournalRecord::OutcomeKnown { output, .. } | JournalRecord::Resolved { output, .. } => {
                op.output = Some(output);
            }
            JournalRecord::OutcomeUnknown { reason, .. } => op.unknown_reason = Some(reason),
            JournalRecord::Settled {
                turn_message_id, ..
            } => op.turn_message_id = Some(turn_message_id),
            // An approved call starts as exactly that call ([`OpTable::binding_refusal`]).
            JournalRecord::Started { child, .. } => op.child = child,
            JournalRecord::Approved { at, .. } => {
                if let Some(a) = op.approval.as_mut() {
                    a.decision = Some(OpPhase::Approved);
                    a.decided_at = Some(at);
                }
            }
            JournalRecord::Denied { at, output, .. } => {
                if let Some(a) = op.approval.as_mut() {
                    a.decision = Some(OpPhase::Denied);
                    a.decided_at = Some(at);
                }
                op.output = Some(output);
            }
            JournalRecord::AwaitingApproval { .. } | JournalRecord::McpStream { .. } => {
                unreachable!("handled above")
            }
        }
        op.phase = next;
        op.history.push(next);
        Ok(())
    }

    /// Why `record` does not belong to the approval it follows, or `None`: the `started` of an
    /// approved operation must be exactly the call that was held, and a decision must be bound
    /// to the held call's arguments hash. Checked before a record is written and when one is read.
    pub fn binding_refusal(&self, record: &JournalRecord) -> Option<String> {
        let op = self.get(record.op_id())?;
        let approval = op.approval.as_ref();
        match record {
            JournalRecord::Started {
                op_id,
                tool,
                arguments,
                message_id,
                tool_call_id,
                call_index,
                ..
            } if op.phase == OpPhase::Approved => {
                let same = op.tool == *tool
                    && op.message_id == *message_id
                    && op.tool_call_id == *tool_call_id
                    && op.call_index == *call_index
                    && op.arguments == JsonText::new(arguments);
                (!same).then(|| {
                    format!("operation {op_id} started another call than the one approved")
                })
            }
            JournalRecord::Approved {
                op_id,
                arguments_hash,
                ..
            }
            | JournalRecord::Denied {
                op_id,
                arguments_hash,
                ..
            } if approval.is_none_or(|a| a.arguments_hash != *arguments_hash) => Some(format!(
                "operation {op_id}: the decision is bound to other arguments than the call's"
            )),
            _ => None,
        }
    }

    pub fn get(&self, op_id: &str) -> Option<&OpState> {
        self.index.get(op_id).map(|&i| &self.ops[i])
    }

    /// All operations, in start order.
    pub fn ops(&self) -> &[OpState] {
        &self.ops
    }

    /// All operations, in start order, by value.
    pub fn into_ops(self) -> Vec<OpState> {
        self.ops
    }

    /// The operation started for call `call_index` of assistant message `message_id`, if any.
    pub fn for_call(&self, message_id: &str, call_index: usize) -> Option<&OpState> {
        self.ops
            .iter()
            .rev()
            .find(|op| op.message_id == message_id && op.call_index == call_index)
    }
}

/// Folds records into the live state; `path` names the file in a corrupt-state error.
pub fn fold(path: &Path, records: Vec<JournalRecord>) -> Result<OpTable> {
    let mut folder = Folder::default();
    records.into_iter().for_each(|record| folder.push(record));
    folder.finish(path)
}

/// A fold fed one record at a time, in file order, as the chained reader checks each line.
///
/// A record the state machine refuses is remembered with its line and reported by
/// [`Folder::finish`], after the reader has checked the rest of the file: damage to the file (a
/// broken chain, a damaged line) is reported before an illegal sequence, exactly as when every
/// line was decoded before folding.
#[derive(Debug, Default)]
pub struct Folder {
    table: OpTable,
    /// Records seen so far (= the line number of the last one: every record is one line).
    line: usize,
    /// The first refusal: its line and why.
    refused: Option<(usize, IllegalTransition)>,
}

impl Folder {
    pub fn push(&mut self, record: JournalRecord) {
        self.line += 1;
        if self.refused.is_some() {
            return;
        }
        if let Err(why) = self.table.apply(record) {
            self.refused = Some((self.line, why));
            self.table = OpTable::default(); // never used: free it while the reader goes on
        }
    }

    pub fn finish(self, path: &Path) -> Result<OpTable> {
        match self.refused {
            None => Ok(self.table),
            Some((line, why)) => Err(Error::corrupt(format!("{}:{line}: {why}", path.display()))
                .with_hint("the journal was not written by kxen-agent in this order; restore it from a backup or bundle")),
        }
    }
}

/// Reads a journal without changing it (read-only commands). A torn last line is ignored; the
/// hash chain is checked ([`fsx::chain`]).
pub fn read(path: &Path) -> Result<OpTable> {
    let mut folder = Folder::default();
    fsx::visit_chain(path, |record| folder.push(record))?;
    folder.finish(path)
}

/// The journal of one run, open for writing. Only the holder of the Session's run lease opens
/// one, so there is a single writer.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    /// Appends chain each record to the previous line (`prevHash`).
    writer: fsx::ChainWriter,
    table: OpTable,
}

impl Journal {
    /// Opens (or starts) the journal at `path`, repairing a torn last line left by a crash.
    /// Call only under the Session's run lease.
    pub fn open(path: &Path) -> Result<Journal> {
        let mut journal = Journal::open_deferred(path, |_| {})?;
        journal.repair()?;
        Ok(journal)
    }

    /// [`Journal::open`] that shows each record to `visit` before folding it and leaves a torn
    /// last line in place until [`Journal::repair`] or the first record: the agent loop checks
    /// the journal against the run's other files before it cuts anything off.
    pub fn open_deferred(path: &Path, mut visit: impl FnMut(&JournalRecord)) -> Result<Journal> {
        let mut folder = Folder::default();
        let writer = fsx::ChainWriter::open_deferred(path, |record| {
            visit(&record);
            folder.push(record)
        })?;
        Ok(Journal {
            path: path.to_path_buf(),
            writer,
            table: folder.finish(path)?,
        })
    }

    /// Truncates a torn last line left by a crash (see [`Journal::open_deferred`]).
    pub fn repair(&mut self) -> Result<()> {
        self.writer.repair()
    }

    /// Makes `record` durable, then applies it to the live state. An illegal transition is
    /// refused before anything is written.
    pub fn record(&mut self, mut record: JournalRecord) -> Result<()> {
        // The one step every record passes before it is durable: no credential in the file.
        record.redact();
        self.check(&record)?;
        self.writer.append(&record)?;
        self.table.apply(record).map_err(Error::from)
    }

    /// [`Journal::record`] without the fsync: durable with the next durable record or
    /// [`Journal::sync`]. Only for a record recovery can re-derive (see the module docs).
    pub fn record_lazy(&mut self, mut record: JournalRecord) -> Result<()> {
        record.redact();
        self.check(&record)?;
        self.writer.append_lazy(&record)?;
        self.table.apply(record).map_err(Error::from)
    }

    /// Makes lazily written records durable (nothing to do when there are none).
    pub fn sync(&mut self) -> Result<()> {
        self.writer.sync()
    }

    /// [`Journal::record`] for several records of distinct operations with one fsync (a group
    /// commit): all are checked before anything is written.
    pub fn record_all(&mut self, mut records: Vec<JournalRecord>) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        for record in &mut records {
            record.redact();
            if !seen.insert(record.op_id().to_string()) {
                return Err(Error::failed(format!(
                    "operation {} appears twice in one group commit",
                    record.op_id()
                )));
            }
            self.check(record)?;
        }
        self.writer.append_all(&records)?;
        for record in records {
            self.table.apply(record)?;
        }
        Ok(())
    }

    /// Consecutive records of one operation (a hook's `awaitingApproval` then `denied`) in one
    /// append and one fsync, so a kill leaves all of them or none: a crash between two separate
    /// records would leave a hook's deny as a hold an operator could approve.
    pub fn record_steps(&mut self, mut records: Vec<JournalRecord>) -> Result<()> {
        for record in &mut records {
            record.redact();
        }
        let Some(first) = records.first() else {
            return Ok(());
        };
        self.check(first)?;
        for pair in records.windows(2) {
            if pair[0].op_id() != pair[1].op_id() || !pair[0].phase().allows(pair[1].phase()) {
                return Err(Error::failed(format!(
                    "operation {}: {} cannot follow {} in one append",
                    pair[1].op_id(),
                    pair[1].phase().name(),
                    pair[0].phase().name()
                )));
            }
        }
        self.writer.append_all(&records)?;
        for record in records {
            self.table.apply(record)?;
        }
        Ok(())
    }

    fn check(&self, record: &JournalRecord) -> Result<()> {
        let table = &self.table;
        let op_id = record.op_id();
        let ok = match (record, table.get(op_id)) {
            (JournalRecord::AwaitingApproval { .. }, existing) => existing.is_none(),
            (JournalRecord::Started { .. }, None) => true,
            (JournalRecord::McpStream { .. }, Some(op)) => {
                op.phase == OpPhase::Started && op.stream.is_none()
            }
            (_, Some(op)) => op.phase.allows(record.phase()),
            (_, None) => false,
        };
        if ok {
            match self.table.binding_refusal(record) {
                None => Ok(()),
                Some(why) => Err(Error::conflict(why)),
            }
        } else {
            let from = table.get(op_id).map_or("nothing", |op| op.phase.name());
            Err(Error::conflict(format!(
                "operation {op_id} cannot go from {from} to {}",
                record.phase().name()
            )))
        }
    }

    pub fn table(&self) -> &OpTable {
        &self.table
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests;
