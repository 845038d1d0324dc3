//! `task {description, prompt}`: a subagent (docs/spec.md §9; capability `task`, permitted only
//! with `allowShell`, since the child may run whatever its parent may).
//!
//! The call runs a child DCPRun in a child Session of its own (`forkKind: "task"`), with its own
//! journal, lease and recovery; the child's final text (or its failure) is this call's result.
//! The tool only parses the arguments and hands them to the [`TaskRunner`] the runtime put in
//! the [`ToolContext`] (`crate::run::children`), which knows the parent's lock, budgets and
//! journal record.

use std::sync::atomic::AtomicBool;

use schemars::JsonSchema;
use serde::Deserialize;

use super::paths::Workspace;
use super::{ToolContext, ToolOutput};

/// The longest `description` accepted (it names the child Session in listings and selects a
/// script's lines).
pub const MAX_DESCRIPTION_CHARS: usize = 200;

/// Arguments of `task`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskArgs {
    /// A short (3-7 words) description of the subtask; it names the child Session.
    pub description: String,
    /// The complete task for the subagent, which starts from this text and the workspace alone.
    pub prompt: String,
}

/// Runs the child Session of one `task` call (implemented by the runtime).
pub trait TaskRunner: Sync {
    /// Creates and runs the child; its final text (or failure) is the output. A child that
    /// needs input (UNKNOWN operations of its own) gives an output with `interrupted` set,
    /// whose text names the child Session, run and operations: the parent records its call as
    /// UNKNOWN and waits for the child to be resolved.
    fn run_task(&self, args: &TaskArgs, cancel: &AtomicBool) -> ToolOutput;
}

pub(crate) fn run(_ws: &Workspace, args: TaskArgs, ctx: &ToolContext) -> ToolOutput {
    let description = args.description.trim();
    if description.is_empty() || args.prompt.trim().is_empty() {
        return ToolOutput::error(
            "`task` needs a non-empty description and prompt; no child Session was created",
        );
    }
    if description.chars().count() > MAX_DESCRIPTION_CHARS || description.contains(['\n', '\r']) {
        return ToolOutput::error(format!(
            "`task` description must be one line of at most {MAX_DESCRIPTION_CHARS} characters; \
             no child Session was created"
        ));
    }
    match ctx.task {
        Some(runner) => runner.run_task(&args, ctx.cancel),
        None => ToolOutput::error(
            "`task` cannot run here: this execution cannot create child Sessions; the call was \
             not run",
        ),
    }
}
