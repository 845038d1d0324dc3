//! Parallel tool calls of one model turn (issue 15 item 3), a part of the agent loop.
//!
//! Consecutive calls of one response whose tool only reads (`read`, `glob`, `grep`) or runs a
//! child Session (`task`) form a batch of at most `Execution::parallel_tools` calls. A batch
//! goes through the same durable boundary as a single call, group-committed:
//! 1. every admitted call's `started` record, in one append and one fsync — durable before any
//!    of them runs;
//! 2. the calls run concurrently, each on its own thread with its own cancel/wall-clock bound;
//! 3. every outcome (`outcomeKnown`, or `outcomeUnknown` for an interrupted call), in one
//!    append and one fsync;
//! 4. in the model's order: each tool result message, then its `settled` record (a refused
//!    call's tool error takes its place in that order).
//!
//! Writes, `exec` and MCP calls stay sequential. Recovery needs nothing new: every state a crash
//! leaves is one a sequential call can leave too (`started` without an outcome is UNKNOWN, or a
//! `task` call's child is recovered; an outcome without its message is settled).

use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::{Loop, bounded, outcome};
use crate::error::Result;
use crate::fsx::failpoint;
use crate::ids::{self, IdKind};
use crate::journal::JournalRecord;
use crate::provider::ToolCall;
use crate::run::children;
use crate::run::events::{Event, EventSink, preview};
use crate::session::run_record::RunState;
use crate::tools::task::TaskRunner;
use crate::tools::{self, OperationMark, ToolContext, ToolOutput};

pub use crate::provider::config::DEFAULT_PARALLEL_TOOLS;

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

/// One call of a batch.
struct Slot<'c> {
    index: usize,
    call: &'c ToolCall,
    /// The admitted call, or why it was refused (answered without running).
    admitted: std::result::Result<tools::Admitted<'c>, String>,
    op_id: String,
    child: Option<crate::journal::ChildRef>,
}

impl Loop<'_, '_> {
    /// Runs calls `first..first + calls.len()` of assistant message `message_id` together (see
    /// the module doc). Returns the operations whose outcome is unknown.
    pub(super) fn run_batch(
        &mut self,
        run: &RunState,
        message_id: &str,
        first: usize,
        calls: &[ToolCall],
        sink: &mut dyn EventSink,
    ) -> Result<Vec<String>> {
        let remaining = self.remaining_wall_clock(run);
        if remaining == Some(Duration::ZERO) {
            let why = format!("not run: {}", self.budget_spent());
            for (i, call) in calls.iter().enumerate() {
                self.answer_unrun(run, message_id, first + i, call, &why, sink)?;
            }
            return Ok(Vec::new());
        }
        let mut slots: Vec<Slot> = Vec::with_capacity(calls.len());
        for (i, call) in calls.iter().enumerate() {
            // Refused as a call run alone would be: not admitted, refused by the plan, or a
            // repeat.
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
            slots.push(Slot {
                index: first + i,
                call,
                admitted,
                op_id: ids::new_id(IdKind::Operation),
                child: children::plan(&call.name),
            });
        }
        // The first `started` record carries the assistant message if it is not durable yet.
        let mut assistant = if slots.iter().any(|s| s.admitted.is_ok()) {
            self.embed_assistant()
        } else {
            None // nothing starts: the refusals' answers make it durable in the log
        };
        let started: Vec<JournalRecord> = slots
            .iter()
            .filter(|s| s.admitted.is_ok())
            .map(|s| JournalRecord::Started {
                op_id: s.op_id.clone(),
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
        // One fsync for every `started` of the batch, before any of them runs.
        self.journal.record_all(started)?;
        for slot in slots.iter().filter(|s| s.admitted.is_ok()) {
            failpoint::hit("tool.after-started");
            sink.emit(Event::ToolStarted {
                run_id: run.id.clone(),
                op_id: slot.op_id.clone(),
                tool: slot.call.name.clone(),
                arguments: slot.call.arguments.clone(),
            });
        }
        if slots.iter().any(|s| s.child.is_some()) {
            self.plan_note_usage(run);
        }
        let turns_left = self.turns_left()?;
        let outputs = self.execute_together(run, &slots, remaining, turns_left);
        let stopped_why = self.budget_spent();
        let mut outcomes = Vec::new();
        let mut unknown = Vec::new();
        for (slot, output) in slots.iter().zip(&outputs) {
            let Some((output, out_of_time)) = output else {
                continue;
            };
            let why = out_of_time.then(|| stopped_why.clone());
            let at = crate::clock::now_rfc3339();
            if output.interrupted {
                let why = why.map_or(String::new(), |why| format!("; stopped because {why}"));
                let reason = match slot.child {
                    Some(_) => format!("{}{why}", output.text),
                    None => format!(
                        "the tool was interrupted before it finished{why}; its effects may have \
                         happened ({})",
                        preview(&output.text, 200)
                    ),
                };
                outcomes.push(JournalRecord::OutcomeUnknown {
                    op_id: slot.op_id.clone(),
                    at,
                    reason,
                });
                unknown.push(slot.op_id.clone());
            } else {
                let mut output = output.clone();
                if let Some(why) = why {
                    output.text.push_str(&format!("\n[stopped: {why}]"));
                }
                let output = outcome(&output);
                self.repeats
                    .made(&slot.call.name, &slot.call.arguments, Some(&output));
                outcomes.push(JournalRecord::OutcomeKnown {
                    op_id: slot.op_id.clone(),
                    at,
                    output,
                });
            }
        }
        // One fsync for every outcome of the batch.
        self.journal.record_all(outcomes)?;
        for _ in 0..outputs.iter().flatten().count() {
            failpoint::hit("tool.after-outcome-known");
        }
        // The results in the model's order, up to the first UNKNOWN one: the later ones wait
        // for it (recovery settles them in order once it is resolved).
        for (slot, output) in slots.iter().zip(&outputs) {
            if output.as_ref().is_some_and(|(o, _)| o.interrupted) {
                break;
            }
            match (&slot.admitted, output) {
                (Err(refusal), _) => {
                    self.answer_unrun(run, message_id, slot.index, slot.call, refusal, sink)?
                }
                (Ok(_), Some((output, _))) if !output.interrupted => {
                    self.settle_op(run, &slot.op_id, false, sink)?
                }
                _ => {}
            }
        }
        Ok(unknown)
    }

    /// Runs every admitted call of `slots` on a thread of its own; the outputs (with whether
    /// the wall clock stopped the call) in slot order, `None` for a refused call.
    fn execute_together(
        &self,
        run: &RunState,
        slots: &[Slot],
        remaining: Option<Duration>,
        turns_left: u64,
    ) -> Vec<Option<(ToolOutput, bool)>> {
        let ex = self.ex;
        let (tool_home, blobs, attempt) = (&self.tool_home, &self.blobs, &self.attempt_mark);
        // The children of the batch split what the parent has left (`children::share`).
        let children: Vec<&str> = slots
            .iter()
            .filter(|s| s.child.is_some() && s.admitted.is_ok())
            .map(|s| s.op_id.as_str())
            .collect();
        let tasks = children.len();
        let child_index = |slot: &Slot| {
            children
                .iter()
                .position(|op| *op == slot.op_id)
                .unwrap_or(0)
        };
        let deadline = remaining.map(|left| Instant::now() + left);
        std::thread::scope(|scope| {
            let handles: Vec<_> = slots
                .iter()
                .map(|slot| {
                    let admitted = slot.admitted.as_ref().ok()?;
                    Some(scope.spawn(move || {
                        let runner = slot.child.as_ref().map(|child| children::Runner {
                            parent: ex,
                            parent_run_id: &run.id,
                            op_id: &slot.op_id,
                            child,
                            remaining: children::Remaining {
                                turns: children::share(turns_left, child_index(slot), tasks),
                                wall_clock: remaining,
                            },
                        });
                        let execute = |cancel: &AtomicBool| {
                            let ctx = ToolContext {
                                workspace_root: ex.workspace_root,
                                tool_home,
                                blobs,
                                pass_env: ex.pass_env,
                                cancel,
                                mark: OperationMark {
                                    session_id: ex.session_id,
                                    run_id: &run.id,
                                    attempt,
                                    op_id: &slot.op_id,
                                },
                                fence: ex.fence,
                                mcp: ex.mcp,
                                lsp: ex.lsp,
                                task: runner.as_ref().map(|r| r as &dyn TaskRunner),
                                protected: ex.protected,
                            };
                            admitted.execute(&ctx)
                        };
                        let result = match deadline {
                            None => (execute(ex.cancel), false),
                            Some(deadline) => bounded(ex.cancel, deadline, execute),
                        };
                        failpoint::hit("tool.after-side-effect");
                        result
                    }))
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| {
                    handle.map(|h| {
                        h.join().unwrap_or_else(|_| {
                            // The tool's own panic is caught in `execute`; this is ours.
                            let mut out = ToolOutput::error(
                                "internal error: the call's thread failed (a bug in kxen-agent); \
                                 its effects are unknown",
                            );
                            out.interrupted = true;
                            (out, false)
                        })
                    })
                })
                .collect()
        })
    }
}
