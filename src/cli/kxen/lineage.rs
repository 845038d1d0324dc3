//! `session fork` and `session diff`: branching a conversation and comparing two.

use serde_json::json;

use crate::cli::output::{self, Format};
use crate::error::{ExitStatus, Result};
use crate::session::diff;
use crate::session::fork::{self, ForkRequest};
use crate::state::StateDir;

pub fn session_fork(state: &StateDir, request: &ForkRequest, format: Format) -> Result<ExitStatus> {
    let forked = fork::fork(state, request)?;
    for warning in &forked.warnings {
        match format {
            Format::Jsonl => output::json_line(&json!({"type": "warning", "message": warning})),
            Format::Text => output::Diagnostics::kxen(format).warning(warning),
        }
    }
    let meta = &forked.meta;
    let workspace = json!(meta.workspace.root);
    let (worktree, branch) = match &forked.worktree {
        Some((path, branch)) => (json!(path), json!(branch)),
        None => (json!(null), json!(null)),
    };
    match format {
        Format::Jsonl => output::json_line(&json!({
            "type": "sessionForked",
            "sessionId": meta.id,
            "parentId": meta.parent_id,
            "branchRootId": meta.branch_root_id,
            "forkPoint": meta.fork_point,
            "forkKind": meta.fork_kind,
            "messages": forked.copied,
            "workspace": workspace,
            "worktree": worktree,
            "branch": branch,
        })),
        Format::Text => {
            output::line(&format!(
                "forked {} from {} ({} message(s) copied)",
                meta.id, request.parent, forked.copied
            ));
            if let Some((path, branch)) = &forked.worktree {
                output::line(&format!("worktree {} on branch {branch}", path.display()));
            }
            output::line(&format!(
                "continue it with: kxen-agent --resume {} --task TEXT ({})",
                meta.id,
                crate::run::SAME_FLAGS
            ));
        }
    }
    Ok(ExitStatus::Success)
}

pub fn session_diff(
    state_a: &StateDir,
    a: &str,
    state_b: &StateDir,
    b: &str,
    format: Format,
) -> Result<ExitStatus> {
    let d = diff::diff_across(state_a, a, state_b, b)?;
    match format {
        Format::Jsonl => output::json_line(&d.to_json()),
        Format::Text => output::raw(&d.to_text()),
    }
    Ok(ExitStatus::Success)
}

/// The arguments of `kxen-agent session fork`.
#[derive(Debug, clap::Args)]
pub struct SessionForkArgs {
    /// The Session to fork (`ses_…`).
    pub session: String,
    /// The message to fork at (`msg_…`, see `session show`); it is the last one copied.
    #[arg(long, value_name = "MSG")]
    pub at: String,
    /// Copy the history up to just before MSG instead.
    #[arg(long)]
    pub before: bool,
    /// Create a git worktree and branch `kxen/NAME` for the new Session
    /// (NAME: 1-64 of A-Z a-z 0-9 _ -).
    #[arg(long, value_name = "NAME")]
    pub worktree: Option<String>,
}

/// The arguments of `kxen-agent session diff`.
#[derive(Debug, clap::Args)]
pub struct SessionDiffArgs {
    /// The first Session (`ses_…`).
    pub a: String,
    /// The second Session (`ses_…`).
    pub b: String,
    /// Read the second Session from this state dir instead (e.g. compare a Session with its
    /// imported copy on another runner).
    #[arg(long, value_name = "PATH")]
    pub other_state_dir: Option<std::path::PathBuf>,
}
