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
