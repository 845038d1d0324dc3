//! The one durable boundary every tool call passes, alone or started together with others
//! (issue 30 item 1). A lone call is a batch of one; parallelism is a property of this code,
//! never a second copy of it.
//!
//! For the calls `first..` of one model turn, in the model's order:
//! 1. **gate**: admission by the registry and the lock's capabilities, the DWP plan's refusal,
//!    the repeat guard, the `pre_tool_use` hooks ([`crate::hooks`]), then the approval rules
//!    ([`approval::hold_or_run`]: `deny` never reaches here, `ask` journals `awaitingApproval`).
//!    A cancel or the end of the wall clock during the gate stops the calls before they start. A call held for approval holds itself and every later
//!    call of the turn (they may depend on it; they run in order once it is decided); the calls
//!    before it still run;
//! 2. **`started`**: every admitted call's record, in one append and one fsync — durable before
//!    any of them runs;
//! 3. **run**: a lone call on this thread; several concurrently, each on its own thread with its
//!    own cancel and wall-clock bound;
//! 4. **outcome**: every `outcomeKnown` (or `outcomeUnknown` for an interrupted call), in one
//!    append and one fsync;
//! 5. **settle**: in the model's order, each tool result message, then its `settled` record (a
//!    refused call's tool error takes its place in that order), up to the first UNKNOWN one.
//!
//! Only consecutive calls whose tool reads (`read`, `glob`, `grep`, read-only MCP tools, `lsp`)
//! or runs a child Session (`task`) form batches of more than one ([`batch_len`]); writes and
//! `exec` come as batches of one. Recovery needs nothing special: every state a crash leaves is
//! one a lone call can leave too (`started` without an outcome is UNKNOWN, or a `task` call's
//! child is recovered; an outcome without its message is settled).
//!
//! Every [`ToolContext`] of the loop is built here, in [`CallScope::context`], so a service a
//! tool needs (the fence, the protected paths, the servers) is handed to every call alike.

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::{Execution, Loop, bounded, outcome};
use crate::error::Result;
use crate::events::{Event, EventSink, preview};
use crate::fsx::failpoint;
use crate::ids::{self, IdKind};
use crate::journal::{ChildRef, JournalRecord};
use crate::provider::ToolCall;
use crate::run::approval;
use crate::run::children;
use crate::session::run_record::RunState;
use crate::tools::task::TaskRunner;
use crate::tools::{self, OperationMark, ToolContext, ToolOutput};

pub use crate::config::DEFAULT_PARALLEL_TOOLS;

/// How many of `calls` (from the first) form one batch: consecutive parallel-safe calls, at
/// most `limit`. 1 means "run the first call alone".
pub fn batch_len(calls: &[ToolCall], limit: usize) -> usize {
    calls
        .iter()
        .take(limit.max(1))
        .take_while(|c| children::parallel_safe(&c.name))
        .count()
        .max(1)
}

/// One call of a batch that passed the gate, or was refused by it.
struct Slot<'c> {
    index: usize,
    call: &'c ToolCall,
    verdict: Verdict<'c>,
    child: Option<ChildRef>,
}

/// What the gate decided about one call.
enum Verdict<'c> {
    /// It starts under this operation id.
    Run(tools::Admitted<'c>, String),
    /// It was refused before anything was recorded (not admitted, the plan, a repeat): answered
    /// unrun with this text.
    Refused(String),
    /// A `pre_tool_use` hook denied it: its operation (`denied`) is settled in its place.
    Denied(String),
}

impl Slot<'_> {
    /// The operation id of a call that starts.
    fn op_id(&self) -> Option<&str> {
        match &self.verdict {
            Verdict::Run(_, op) => Some(op),
            _ => None,
        }
    }

    fn runs(&self) -> bool {
        matches!(self.verdict, Verdict::Run(..))
    }
}

/// What every call of one execution shares: the one place a [`ToolContext`] is built.
#[derive(Clone, Copy)]
pub(super) struct CallScope<'s> {
    pub ex: &'s Execution<'s>,
    pub run_id: &'s str,
    pub attempt: &'s str,
    /// The files the run has read, written or edited, from its journal
    /// ([`crate::run::verification::seen_files`]): what `write` may replace.
    pub seen_files: &'s [String],
    /// Where MCP calls journal their stream position, or the position recovery replays.
    pub mcp_stream: Option<crate::mcp::StreamMode<'s>>,
}

impl<'s> CallScope<'s> {
    /// The context of operation `op_id`: the execution's tool services (borrowed), the call's
    /// own cancel flag and, for a `task` call, the runner of its child Session.
    pub fn context<'c>(
        &'c self,
        op_id: &'c str,
        cancel: &'c AtomicBool,
        task: Option<&'c dyn TaskRunner>,
    ) -> ToolContext<'c> {
        let ex = self.ex;
        ToolContext {
            workspace_root: ex.workspace_root,
            services: &ex.services.tools,
            cancel,
            mark: OperationMark {
                session_id: ex.session_id,
                run_id: self.run_id,
                attempt: self.attempt,
                op_id,
            },
            task,
            seen_files: Some(self.seen_files),
            granted: Some(ex.capabilities),
            mcp_stream: self.mcp_stream,
        }
    }
}

impl Loop<'_, '_> {
    /// Runs calls `first..first + calls.len()` of assistant message `message_id` through the
    /// boundary (see the module doc). Returns the operations the run stops for: those whose
    /// outcome is unknown and the one held for approval.
    pub(super) fn run_calls(
        &mut self,
        run: &RunState,
        message_id: &str,
        first: usize,
        calls: &[ToolCall],
        sink: &mut dyn EventSink,
    ) -> Result<Vec<String>> {
        // `maxWallClockMs` bounds tool calls too: none starts once it is spent.
        let remaining = self.remaining_wall_clock(run);
        if remaining == Some(Duration::ZERO) {
            let why = format!("not run: {}", self.budget_spent());
            for (i, call) in calls.iter().enumerate() {
                self.answer_unrun(run, message_id, first + i, call, &why, sink)?;
            }
            return Ok(Vec::new());
        }
        let (slots, held) = self.gate(run, message_id, first, calls)?;
        // The gate may have taken a while (hooks run there): a cancel or the end of the wall
        // clock that came meanwhile stops the calls before any of them starts.
        let remaining = self.remaining_wall_clock(run);
        let stopped = match (self.canceled(), remaining) {
            (true, _) => Some("not run: the run was canceled".to_string()),
            (false, Some(Duration::ZERO)) => Some(format!("not run: {}", self.budget_spent())),
            _ => None,
        };
        if let Some(why) = stopped {
            for slot in &slots {
                match &slot.verdict {
                    Verdict::Denied(op_id) => self.settle_op(run, op_id, false, sink)?,
                    Verdict::Refused(text) => {
                        self.answer_unrun(run, message_id, slot.index, slot.call, text, sink)?
                    }
                    Verdict::Run(..) => {
                        self.answer_unrun(run, message_id, slot.index, slot.call, &why, sink)?
                    }
                }
            }
            return Ok(held.into_iter().collect());
        }
        let mut stops = self.start_run_settle(run, message_id, &slots, remaining, sink)?;
        stops.extend(held);
        Ok(stops)
    }

    /// Step 1: each call in order is refused, denied or held by a hook, held for approval, or
    /// admitted under its operation id. Returns the slots before the held call, and the held
    /// call's operation.
    fn gate<'c>(
        &mut self,
        run: &RunState,
        message_id: &str,
        first: usize,
        calls: &'c [ToolCall],
    ) -> Result<(Vec<Slot<'c>>, Option<String>)> {
        let mut slots: Vec<Slot> = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            let index = first + i;
            let admitted = tools::REGISTRY
                .admit(&call.name, &call.arguments, self.ex.capabilities)
                .and_then(|admitted| match self.plan_refuses(call) {
                    Some(refusal) => Err(refusal),
                    None => Ok(admitted),
                })
                .and_then(|admitted| match self.repeats.check(call) {
                    Some(answer) => Err(answer),
                    None => Ok(admitted),
                });
            let slot = |verdict| Slot {
                index,
                call,
                verdict,
                // A `task` call's child ids are durable in `started`, before the child exists.
                child: children::plan(&call.name),
            };
            let admitted = match admitted {
                Ok(admitted) => admitted,
                Err(refusal) => {
                    slots.push(slot(Verdict::Refused(refusal)));
                    continue;
                }
            };
            // An approved operation runs as decided: neither its hooks nor its rule are asked
            // again.
            if let Some(op_id) = approval::decided(&self.journal, message_id, index, call)? {
                slots.push(slot(Verdict::Run(admitted, op_id)));
                continue;
            }
            let op_id = ids::new_id(IdKind::Operation);
            let facts = crate::hooks::CallFacts {
                session_id: self.ex.session_id,
                run_id: &run.id,
                op_id: &op_id,
                tool: &call.name,
                arguments: &call.arguments,
            };
            let hooked = crate::hooks::matching_pre_hooks(&self.ex.services.hooks, &call.name);
            let verdict = match hooked.is_empty() {
                true => crate::hooks::Verdict::Allow,
                false => crate::hooks::pre_tool_use(
                    &self.ex.services.hooks,
                    &self.ex.services.tools.fence,
                    facts,
                ),
            };
            let asks = crate::policy::rule_for(self.ex.tool_rules, &call.name).0
                == crate::policy::ToolRule::Ask;
            if asks || !hooked.is_empty() {
                // The call an `awaitingApproval` record names must be durable first.
                self.assistant_durable()?;
            }
            let held = approval::HeldCall {
                message_id,
                index,
                call,
                op_id: &op_id,
            };
            let journal = &mut self.journal;
            match verdict {
                crate::hooks::Verdict::Deny { hook, reason } => {
                    approval::hook_denied(journal, held, &hook, &reason)?;
                    slots.push(slot(Verdict::Denied(op_id)));
                    continue;
                }
                crate::hooks::Verdict::Ask { hook, reason } => {
                    approval::hook_asked(journal, held, &hook, &reason)?;
                    return Ok((slots, Some(op_id)));
                }
                // The hooks' answer is durable before the start (an `ask` rule's hold is too).
                crate::hooks::Verdict::Allow if !hooked.is_empty() && !asks => {
                    approval::hook_allowed(journal, held, &hooked)?;
                    slots.push(slot(Verdict::Run(admitted, op_id)));
                    continue;
                }
                crate::hooks::Verdict::Allow => {}
            }
            match approval::hold_or_run(journal, self.ex.tool_rules, held)? {
                approval::Gate::Run(op_id) => slots.push(slot(Verdict::Run(admitted, op_id))),
                approval::Gate::Wait(op_id) => return Ok((slots, Some(op_id))),
            }
        }
        Ok((slots, None))
    }

    /// Steps 2 to 5 for the gated `slots`. Returns the operations whose outcome is unknown.
    fn start_run_settle(
        &mut self,
        run: &RunState,
        message_id: &str,
        slots: &[Slot],
        remaining: Option<Duration>,
        sink: &mut dyn EventSink,
    ) -> Result<Vec<String>> {
        // The first `started` record carries the assistant message if it is not durable yet;
        // when nothing starts, the refusals' answers make it durable in the log.
        let mut assistant = match slots.iter().any(Slot::runs) {
            true => self.embed_assistant(),
            false => None,
        };
        let started: Vec<JournalRecord> = slots
            .iter()
            .filter_map(|s| Some((s, s.op_id()?)))
            .map(|(s, op_id)| JournalRecord::Started {
                op_id: op_id.to_string(),
                at: crate::clock::now_rfc3339(),
                tool: s.call.name.clone(),
                arguments: s.call.arguments.clone(),
                message_id: message_id.to_string(),
                tool_call_id: s.call.id.clone(),
                call_index: s.index,
                child: s.child.clone(),
                assistant: assistant.take(),
            })
            .collect();
        if !started.is_empty() {
            // One fsync for every `started` of the batch, before any of them runs.
            self.journal.record_all(started)?;
        }
        for (slot, op_id) in slots.iter().filter_map(|s| Some((s, s.op_id()?))) {
            failpoint::hit("tool.after-started");
            sink.emit(Event::ToolStarted {
                run_id: run.id.clone(),
                op_id: op_id.to_string(),
                tool: slot.call.name.clone(),
                arguments: slot.call.arguments.clone(),
            });
        }
        let delegates = slots.iter().any(|s| s.child.is_some() && s.runs());
        let turns_left = match delegates {
            true => {
                self.plan_note_usage(run);
                self.turns_left()?
            }
            false => 0,
        };
        // Read from the journal, so a resumed run knows what its earlier attempts read; a batch
        // that writes is a batch of one, so an earlier batch's reads are in it already.
        self.seen.update(self.journal.table());
        let positions = super::replay::Positions::new(&mut self.journal);
        let scope = CallScope {
            ex: self.ex,
            run_id: &run.id,
            attempt: &self.attempt_mark,
            seen_files: self.seen.paths(),
            mcp_stream: Some(crate::mcp::StreamMode::Journal(&positions)),
        };
        let mut outputs = execute(&scope, slots, remaining, turns_left);
        if !self.ex.services.hooks.post_tool_use.is_empty() {
            self.post_hooks(run, slots, &mut outputs, sink);
        }
        let stopped_why = self.budget_spent();
        let mut outcomes = Vec::new();
        let mut unknown = Vec::new();
        for (slot, output) in slots.iter().zip(&outputs) {
            let (Some(op_id), Some((output, out_of_time))) = (slot.op_id(), output) else {
                continue;
            };
            let why = out_of_time.then(|| stopped_why.clone());
            let at = crate::clock::now_rfc3339();
            if output.interrupted {
                // Killed mid-way: whether its effects happened cannot be proven.
                let why = why.map_or(String::new(), |why| format!("; stopped because {why}"));
                let reason = match slot.child {
                    // A child that needs input says where (its Session, run and operations).
                    Some(_) => format!("{}{why}", output.text),
                    None => format!(
                        "the tool was interrupted before it finished{why}; its effects may have \
                         happened ({})",
                        preview(&output.text, 200)
                    ),
                };
                outcomes.push(JournalRecord::OutcomeUnknown {
                    op_id: op_id.to_string(),
                    at,
                    reason,
                });
                unknown.push(op_id.to_string());
            } else {
                let mut output = output.clone();
                if let Some(why) = why {
                    output.text.push_str(&format!("\n[stopped: {why}]"));
                }
                let output = outcome(&output);
                self.repeats
                    .made(&slot.call.name, &slot.call.arguments, Some(&output));
                outcomes.push(JournalRecord::OutcomeKnown {
                    op_id: op_id.to_string(),
                    at,
                    output,
                });
            }
        }
        if !outcomes.is_empty() {
            // One fsync for every outcome of the batch.
            self.journal.record_all(outcomes)?;
        }
        for _ in 0..outputs.iter().flatten().count() {
            failpoint::hit("tool.after-outcome-known");
        }
        // The results in the model's order, up to the first UNKNOWN one: the later ones wait
        // for it (recovery settles them in order once it is resolved).
        for (slot, output) in slots.iter().zip(&outputs) {
            match (&slot.verdict, output) {
                (_, Some((output, _))) if output.interrupted => break,
                (Verdict::Refused(refusal), _) => {
                    self.answer_unrun(run, message_id, slot.index, slot.call, refusal, sink)?
                }
                (Verdict::Denied(op_id), _) => self.settle_op(run, op_id, false, sink)?,
                (Verdict::Run(_, op_id), Some(_)) => self.settle_op(run, op_id, false, sink)?,
                (Verdict::Run(..), None) => {}
            }
        }
        Ok(unknown)
    }

    /// Runs the `post_tool_use` hooks of every call that ran to an end: what they add is
    /// appended to the output before it is recorded (so resume replays it); a failed hook is a
    /// warning.
    fn post_hooks(
        &self,
        run: &RunState,
        slots: &[Slot],
        outputs: &mut [Option<(ToolOutput, bool)>],
        sink: &mut dyn EventSink,
    ) {
        for (slot, output) in slots.iter().zip(outputs.iter_mut()) {
            let (Some(op_id), Some((output, _))) = (slot.op_id(), output.as_mut()) else {
                continue;
            };
            if output.interrupted {
                continue;
            }
            let facts = crate::hooks::CallFacts {
                session_id: self.ex.session_id,
                run_id: &run.id,
                op_id,
                tool: &slot.call.name,
                arguments: &slot.call.arguments,
            };
            let (notes, warnings) = crate::hooks::post_tool_use(
                &self.ex.services.hooks,
                &self.ex.services.tools.fence,
                facts,
                &output.text,
                output.is_error,
            );
            for note in notes {
                output
                    .text
                    .push_str(&format!("\n\n[post_tool_use hook] {note}"));
            }
            for message in warnings {
                sink.emit(Event::Warning { message });
            }
        }
    }
}

/// Step 3: runs every admitted call of `slots` (a lone one on this thread, several on a thread
/// each); the outputs, with whether the wall clock stopped the call, in slot order, `None` for
/// a refused call.
fn execute(
    scope: &CallScope,
    slots: &[Slot],
    remaining: Option<Duration>,
    turns_left: u64,
) -> Vec<Option<(ToolOutput, bool)>> {
    // The children of the batch split what the parent has left (`children::share`).
    let children: Vec<&str> = slots
        .iter()
        .filter(|s| s.child.is_some())
        .filter_map(Slot::op_id)
        .collect();
    let deadline = remaining.map(|left| Instant::now() + left);
    let run_one = |slot: &Slot| -> Option<(ToolOutput, bool)> {
        let Verdict::Run(admitted, op_id) = &slot.verdict else {
            return None;
        };
        let runner = slot.child.as_ref().map(|child| children::Runner {
            parent: scope.ex,
            parent_run_id: scope.run_id,
            op_id,
            child,
            remaining: children::Remaining {
                turns: children::share(
                    turns_left,
                    children.iter().position(|op| op == op_id).unwrap_or(0),
                    children.len(),
                ),
                wall_clock: remaining,
            },
        });
        let execute = |cancel: &AtomicBool| {
            let task = runner.as_ref().map(|r| r as &dyn TaskRunner);
            admitted.execute(&scope.context(op_id, cancel, task))
        };
        // The tool's own timeout still applies; the run's remaining wall clock stops it as a
        // cancel does (cleanup window, then SIGKILL) when that comes first.
        let result = match deadline {
            None => (execute(scope.ex.cancel), false),
            Some(deadline) => bounded(scope.ex.cancel, deadline, execute),
        };
        failpoint::hit("tool.after-side-effect");
        Some(result)
    };
    if slots.iter().filter(|s| s.runs()).count() <= 1 {
        return slots.iter().map(run_one).collect();
    }
    std::thread::scope(|threads| {
        let handles: Vec<_> = slots
            .iter()
            .map(|slot| slot.runs().then(|| threads.spawn(|| run_one(slot))))
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                let handle = handle?;
                Some(handle.join().ok().flatten().unwrap_or_else(|| {
                    // The tool's own panic is caught in `execute`; this is ours.
                    let mut out = ToolOutput::error(
                        "internal error: the call's thread failed (a bug in kxen-agent); its \
                         effects are unknown",
                    );
                    out.interrupted = true;
                    (out, false)
                }))
            })
            .collect()
    })
}
