//! Human approval of calls whose policy rule is `ask` (the policy's `mcpTools`, see
//! [`crate::policy::ToolRules`]).
//!
//! Such a call is journaled `AwaitingApproval` INSTEAD of being started: nothing has run, and
//! the run stops `inputRequired` (exit 7) with a `runApprovalRequired` event. An operator then
//! records a decision, bound to the operation id and to the hash of the call's arguments:
//!
//! - `kxen-agent run approve SES RUN OP` journals `Approved`; the next `--resume` starts the call
//!   through the normal durable path (`Started` with the same operation id, then
//!   `OutcomeKnown`/UNKNOWN, the turn, `Settled`), after checking the call's arguments still hash
//!   to what was approved;
//! - `kxen-agent run deny SES RUN OP [--reason TEXT]` journals `Denied` with the error the model
//!   gets as the tool's result; the next `--resume` appends it and settles, and the call never
//!   runs.
//!
//! The call boundary (`crate::run::boundary`) calls in at two points: [`decided`] and
//! [`hold_or_run`] before a call would start, and
//! [`close_unrun`] when a call cannot run (cancel, budget), so an approved operation never stays
//! open in a run that ends.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::events::Event;
use crate::fsx::failpoint;
use crate::journal::{Journal, JournalRecord, OpPhase, OpState, OpTable, ToolOutcome};
use crate::policy::{ToolRule, ToolRules};
use crate::provider::ToolCall;
use crate::state::StateDir;

/// `sha256:` of the canonical JSON of a call's arguments: what a decision is bound to.
pub fn arguments_hash(arguments: &Value) -> String {
    format!("sha256:{}", crate::canonical::hash_hex(arguments))
}

/// What the loop does with a call that is about to start.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Start it under this operation id (a new one, or the approved operation's).
    Run(String),
    /// It waits for a human under this operation id (`AwaitingApproval` is durable).
    Wait(String),
}

/// A call about to be journaled under `op_id` before it starts: call `index` of assistant
/// message `message_id`.
#[derive(Debug, Clone, Copy)]
pub struct HeldCall<'a> {
    pub message_id: &'a str,
    pub index: usize,
    pub call: &'a ToolCall,
    pub op_id: &'a str,
}

/// The approved operation of call `index` of `message_id`, if it has one (checked against the
/// call's arguments); `None` for a call nothing was recorded for yet.
pub fn decided(
    journal: &Journal,
    message_id: &str,
    index: usize,
    call: &ToolCall,
) -> Result<Option<String>> {
    if let Some(op) = journal.table().for_call(message_id, index) {
        let bound = op.approval.as_ref().map(|a| a.arguments_hash.as_str());
        if op.phase != OpPhase::Approved {
            return Err(Error::failed(format!(
                "operation {} of call {index} of {message_id} is {}, so the call cannot start",
                op.op_id,
                op.phase.name()
            )));
        }
        if bound != Some(arguments_hash(&call.arguments).as_str()) {
            return Err(Error::corrupt(format!(
                "{}: operation {} was approved for other arguments than call {index} of \
                 {message_id} holds",
                journal.path().display(),
                op.op_id
            ))
            .with_hint("restore the session from a backup or bundle"));
        }
        return Ok(Some(op.op_id.clone()));
    }
    Ok(None)
}

/// A call nothing was recorded for, to start under the new `op_id`: held when its policy
/// rule is `ask` (`awaitingApproval` is durable), else run.
pub fn hold_or_run(journal: &mut Journal, rules: &ToolRules, held: HeldCall) -> Result<Gate> {
    let (rule, pattern) = crate::policy::rule_for(rules, &held.call.name);
    if rule != ToolRule::Ask {
        return Ok(Gate::Run(held.op_id.to_string()));
    }
    journal.record(awaiting(held, pattern.unwrap_or_default()))?;
    failpoint::hit("approval.after-awaiting");
    Ok(Gate::Wait(held.op_id.to_string()))
}

/// The `awaitingApproval` record of `held`, held by `rule` (an `mcpTools` pattern, or the
/// hook that asked or denied).
fn awaiting(held: HeldCall, rule: &str) -> JournalRecord {
    let HeldCall {
        message_id,
        index,
        call,
        op_id,
    } = held;
    JournalRecord::AwaitingApproval {
        op_id: op_id.to_string(),
        at: crate::clock::now_rfc3339(),
        tool: call.name.clone(),
        arguments: call.arguments.clone(),
        message_id: message_id.to_string(),
        tool_call_id: call.id.clone(),
        call_index: index,
        rule: rule.to_string(),
        arguments_hash: arguments_hash(&call.arguments),
    }
}

/// A `pre_tool_use` hook asked a human about the call: held like an `ask` rule, the hook named
/// as its rule (`hook: …`), so `run approve`/`run deny` decide it and the hook is not asked again.
pub fn hook_asked(journal: &mut Journal, held: HeldCall, hook: &str, reason: &str) -> Result<()> {
    let rule = format!("{hook}: {reason}");
    journal.record(awaiting(held, &rule))?;
    failpoint::hit("approval.after-awaiting");
    Ok(())
}

/// A `pre_tool_use` hook denied the call: journaled as held by the hook and denied, in one
/// append (a kill leaves both or neither), so the call never starts, the model reads `reason`,
/// and a resume settles it without asking the hook again.
pub fn hook_denied(journal: &mut Journal, held: HeldCall, hook: &str, reason: &str) -> Result<()> {
    journal.record_steps(vec![
        awaiting(held, hook),
        JournalRecord::Denied {
            op_id: held.op_id.to_string(),
            at: crate::clock::now_rfc3339(),
            arguments_hash: arguments_hash(&held.call.arguments),
            output: error_outcome(format!("denied by {hook}, the call was not run: {reason}")),
        },
    ])?;
    failpoint::hit("approval.after-decision");
    Ok(())
}

/// Every `pre_tool_use` hook that matched the call allowed it: journaled as held by the hooks
/// and approved, in one append, before the call's `started` record. A kill between the hooks'
/// answer and the start then resumes into an approved operation ([`decided`]), so the hooks
/// are never asked twice about one operation. Costs one fsync, only for a call a hook matched.
pub fn hook_allowed(journal: &mut Journal, held: HeldCall, hooks: &str) -> Result<()> {
    journal.record_steps(vec![
        awaiting(held, hooks),
        JournalRecord::Approved {
            op_id: held.op_id.to_string(),
            at: crate::clock::now_rfc3339(),
            arguments_hash: arguments_hash(&held.call.arguments),
        },
    ])?;
    failpoint::hit("hook.after-allowed");
    Ok(())
}

/// A call that will not run (`why`: a cancel, the budget) whose operation was approved: its
/// outcome is known — it did not run — and recorded, so the loop settles it like any outcome.
/// Returns the operation id, or `None` when the call has no approved operation (the loop then
/// answers it without a journal operation, as for every call that never started).
pub fn close_unrun(
    journal: &mut Journal,
    message_id: &str,
    index: usize,
    why: &str,
) -> Result<Option<String>> {
    let Some(op) = journal
        .table()
        .for_call(message_id, index)
        .filter(|op| op.phase == OpPhase::Approved)
    else {
        return Ok(None);
    };
    let op_id = op.op_id.clone();
    journal.record(JournalRecord::OutcomeKnown {
        op_id: op_id.clone(),
        at: crate::clock::now_rfc3339(),
        output: error_outcome(why.to_string()),
    })?;
    Ok(Some(op_id))
}

/// Of the operations a run stops for, those that wait for a decision (the rest are UNKNOWN).
pub fn split_waiting(table: &OpTable, ops: Vec<String>) -> (Vec<String>, Vec<String>) {
    ops.into_iter().partition(|op| {
        table
            .get(op)
            .is_none_or(|s| s.phase != OpPhase::AwaitingApproval)
    })
}

/// The `runApprovalRequired` event of an operation awaiting approval.
pub fn required_event(session_id: &str, run_id: &str, op: &OpState) -> Event {
    let approval = op.approval.as_ref();
    Event::RunApprovalRequired {
        session_id: session_id.to_string(),
        run_id: run_id.to_string(),
        op_id: op.op_id.clone(),
        tool: op.tool.clone(),
        arguments: op.arguments.value(),
        arguments_hash: approval
            .map(|a| a.arguments_hash.clone())
            .unwrap_or_default(),
        rule: approval.map(|a| a.rule.clone()).unwrap_or_default(),
    }
}

/// An operator's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Deny { reason: Option<String> },
}

/// Records `decision` for operation `op_id` (`run approve` / `run deny`), under the Session's
/// lease, on a run whose files agree. `expected_hash` (`--arguments-hash`), when given, must be
/// the hash of the call's arguments. Returns the arguments hash the decision is bound to.
///
/// Errors: an unknown Session, run or operation is exit 3; an operation that is not awaiting
/// approval (decided already, or never asked) or whose arguments hash differs is exit 5.
pub fn decide(
    state: &StateDir,
    session_id: &str,
    run_id: &str,
    op_id: &str,
    decision: &Decision,
    expected_hash: Option<&str>,
) -> Result<String> {
    let super::operator::OpenedOperation {
        mut journal,
        op,
        inspect,
        ..
    } = super::operator::open(
        state,
        session_id,
        run_id,
        op_id,
        "the run's operations and pending approvals",
    )?;
    let resume = format!(
        "continue the run with `kxen-agent --resume {session_id}`, {}",
        super::SAME_FLAGS
    );
    let verb = match decision {
        Decision::Approve => "approve",
        Decision::Deny { .. } => "deny",
    };
    let Some(approval) = op.approval.clone() else {
        let mut err = Error::conflict(format!(
            "operation {op_id} ({}) is not awaiting approval: no `ask` rule held it, it is {}",
            op.tool,
            op.phase.name()
        ));
        if op.phase == OpPhase::OutcomeUnknown {
            err = err.with_hint(format!(
                "its outcome is UNKNOWN: record what happened with `kxen-agent run resolve \
                 {session_id} {run_id} {op_id} --output TEXT`"
            ));
        }
        return Err(err.with_hint(format!("see its phase with `{inspect}`")));
    };
    if let Some(done) = approval.decision {
        return Err(Error::conflict(format!(
            "operation {op_id} was already {} (at {}); a decision is recorded once",
            done.name(),
            approval.decided_at.as_deref().unwrap_or("?")
        ))
        .with_hint(resume));
    }
    if let Some(expected) = expected_hash
        && expected != approval.arguments_hash
    {
        return Err(Error::conflict(format!(
            "operation {op_id}: --arguments-hash {expected} is not the hash of its arguments \
             ({}); nothing was recorded",
            approval.arguments_hash
        ))
        .with_hint(format!(
            "check the arguments with `{inspect}` and {verb} again"
        )));
    }
    let at = crate::clock::now_rfc3339();
    let arguments_hash = approval.arguments_hash.clone();
    let record = match decision {
        Decision::Approve => JournalRecord::Approved {
            op_id: op_id.to_string(),
            at,
            arguments_hash: arguments_hash.clone(),
        },
        Decision::Deny { reason } => {
            let text = match reason.as_deref().map(str::trim) {
                Some(r) if !r.is_empty() => {
                    format!("denied by the operator, the call was not run: {r}")
                }
                _ => "denied by the operator, the call was not run".to_string(),
            };
            JournalRecord::Denied {
                op_id: op_id.to_string(),
                at,
                arguments_hash: arguments_hash.clone(),
                output: error_outcome(text),
            }
        }
    };
    journal.record(record)?;
    failpoint::hit("approval.after-decision");
    Ok(arguments_hash)
}

fn error_outcome(text: String) -> ToolOutcome {
    ToolOutcome {
        text,
        is_error: true,
        blob: None,
        interrupted: false,
        fence: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_hash_is_canonical() {
        let a = arguments_hash(&json!({"b": 1, "a": "x"}));
        assert_eq!(a, arguments_hash(&json!({"a": "x", "b": 1})));
        assert_ne!(a, arguments_hash(&json!({"a": "y", "b": 1})));
        assert!(a.starts_with("sha256:"));
    }
}
