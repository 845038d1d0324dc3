//! `kxen-agent run resolve SES RUN OP --output TEXT [--is-error]`: an operator records the
//! verified outcome of an operation whose outcome is UNKNOWN (docs/spec.md §8).
//!
//! Bound to that exact operation id, under the run lease; the operation is never re-executed, and
//! the next `--resume` gives the model exactly this output as the tool's result.

use crate::error::{Error, Result};
use crate::journal::{JournalRecord, OpPhase, ToolOutcome};
use crate::state::StateDir;

/// What an operator says happened: operation `op_id` of run `run_id` of Session `session_id`
/// returned `output` (a failure when `is_error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    pub session_id: String,
    pub run_id: String,
    pub op_id: String,
    pub output: String,
    pub is_error: bool,
}

/// Records the resolution's output as the outcome of its operation.
pub fn resolve(state: &StateDir, resolution: &Resolution) -> Result<()> {
    let Resolution {
        session_id,
        run_id,
        op_id,
        output,
        is_error,
    } = resolution;
    let (session_id, run_id, op_id) = (session_id.as_str(), run_id.as_str(), op_id.as_str());
    let (output, is_error) = (output.clone(), *is_error);
    // The resolution is recorded only on a run whose record, journal and messages agree, as
    // `session verify` checks them (corrupt state: exit 10, naming the file).
    let super::operator::OpenedOperation {
        mut journal,
        op,
        inspect,
        ..
    } = super::operator::open(state, session_id, run_id, op_id, "the run's operations")?;
    match op.phase {
        OpPhase::OutcomeUnknown => {}
        OpPhase::Resolved => {
            return Err(Error::conflict(format!(
                "operation {op_id} is already resolved; a resolution is recorded once"
            ))
            .with_hint(format!(
                "continue the run with `kxen-agent --resume {session_id}`, {}",
                super::SAME_FLAGS
            )));
        }
        OpPhase::AwaitingApproval => {
            return Err(Error::conflict(format!(
                "operation {op_id} waits for approval and has not run, so there is no outcome to resolve"
            ))
            .with_hint(format!(
                "approve it with `kxen-agent run approve {session_id} {run_id} {op_id}` or deny it with `kxen-agent run deny {session_id} {run_id} {op_id} --reason TEXT`"
            )));
        }
        phase => {
            return Err(Error::conflict(format!(
                "operation {op_id} is {}, not UNKNOWN: only an operation whose outcome is unknown can be resolved",
                phase.name()
            ))
            .with_hint(format!("see its phase with `{inspect}`")));
        }
    }
    // A `task` call whose child has not ended takes the child's result when the parent
    // resumes: an outcome typed here would settle the parent while the child can still act.
    if let Some(child) = super::children::waiting_child(state, &op)? {
        return Err(Error::conflict(format!(
            "operation {op_id} is a task call whose subagent (Session {}, run {}) has not \
             ended, so its outcome is the subagent's result, not one recorded by hand",
            child.session_id, child.run_id
        ))
        .with_id(&child.session_id)
        .with_hint(child.next_step(
            "kxen-agent",
            &format!(
                "continue the parent with `kxen-agent --resume {session_id}`, {}",
                super::SAME_FLAGS
            ),
        )));
    }
    // Whatever of the operation still runs (a program that left the killed command's process
    // group) stops before the resolution is recorded: nothing of it may act after it.
    crate::process::orphans::stop_marked(crate::process::orphans::OPERATION_VAR, &[op_id]);
    journal.record(JournalRecord::Resolved {
        op_id: op_id.to_string(),
        at: crate::clock::now_rfc3339(),
        output: ToolOutcome {
            text: output,
            is_error,
            blob: None,
            interrupted: false,
            fence: None,
        },
    })
}
