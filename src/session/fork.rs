//! `session fork SES --at MSG [--before] [--worktree NAME]` (docs/spec.md §11).
//!
//! A fork is a new, complete Session: the parent's lock unchanged, its conversation up to the fork
//! point (message ids kept, so the common prefix is visible by id), no runs, and lineage
//! (`parentId`, `branchRootId`, `forkPoint`, `forkKind`). The parent is never modified: we only
//! read it, under its lease so no run appends to it meanwhile.
//!
//! With `--worktree NAME` the fork gets its own git worktree on the new branch `kxen/NAME`, made
//! from the parent's current HEAD only after the lease is held, the message is found and the
//! parent's workspace verified; if anything fails after that, the worktree and branch are removed.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::git::{self, WorkspaceBinding};
use crate::ids::{self, IdKind};
use crate::session::{
    ForkKind, ForkPoint, Lease, Message, Role, SessionMeta, messages, meta, store,
};
use crate::state::StateDir;

/// What `session fork` was asked for.
#[derive(Debug, Clone)]
pub struct ForkRequest {
    pub parent: String,
    /// The message id given with `--at`.
    pub at: String,
    pub before: bool,
    pub worktree: Option<String>,
}

/// A fork that was written.
#[derive(Debug, Clone)]
pub struct Forked {
    pub meta: SessionMeta,
    /// Messages copied from the parent.
    pub copied: usize,
    /// The new worktree and its branch, for `--worktree`.
    pub worktree: Option<(PathBuf, String)>,
    pub warnings: Vec<String>,
}

/// Forks a Session. See the module doc for the guarantees.
pub fn fork(state: &StateDir, req: &ForkRequest) -> Result<Forked> {
    if let Some(name) = &req.worktree {
        git::validate_worktree_name(name)?;
    }
    ids::validate_kind(&req.at, IdKind::Message)?;
    let paths = store::session_paths(state, &req.parent)?;
    let _parent_lease = Lease::acquire(&paths.dir, &req.parent)?;
    let parent = SessionMeta::read(&paths, &req.parent)?;
    let history = messages::read(&paths.messages())?;
    let point = fork_point(&req.parent, &history, &req.at, req.before)?;
    let copied = &history[..point.copied()];

    let mut meta = SessionMeta {
        format_version: meta::FORMAT_VERSION,
        id: ids::new_id(IdKind::Session),
        created_at: crate::clock::now_rfc3339(),
        workspace: parent.workspace.clone(),
        parent_id: Some(parent.id.clone()),
        branch_root_id: parent.branch_root_id.clone(),
        fork_point: Some(point),
        fork_kind: Some(ForkKind::Conversation),
        task_parent: None,
        lock: parent.lock.clone(),
        first_run_id: None,
        history: Vec::new(),
    };
    let Some(name) = &req.worktree else {
        drop(store::create_fork(state, &meta, copied)?);
        return Ok(Forked {
            meta,
            copied: copied.len(),
            worktree: None,
            warnings: Vec::new(),
        });
    };

    let stored = parent.workspace.clone();
    let (repo_root, head, mut warnings) = worktree_base(&parent.id, &stored)?;
    let worktree = git::add_worktree(&repo_root, name, &head)?;
    let written = (|| -> Result<Vec<String>> {
        let (binding, capture_warnings) = fork_binding(&stored, &repo_root, &worktree)?;
        meta.workspace = binding;
        meta.fork_kind = Some(ForkKind::Worktree);
        drop(store::create_fork(state, &meta, copied)?);
        Ok(capture_warnings)
    })();
    match written {
        Ok(w) => warnings.extend(w),
        Err(err) => {
            if let Err(cleanup) = git::remove_worktree(&repo_root, name) {
                return Err(err.with_hint(format!(
                    "the new worktree {} could not be removed again ({}); remove it with \
                     `git worktree remove --force {}` and `git branch -D {}`",
                    worktree.display(),
                    cleanup.message,
                    worktree.display(),
                    git::worktree_branch(name)
                )));
            }
            return Err(err);
        }
    }
    Ok(Forked {
        meta,
        copied: copied.len(),
        worktree: Some((worktree, git::worktree_branch(name))),
        warnings,
    })
}

/// Finds `at` in the parent's conversation and checks that the cut does not split a tool
/// exchange (an assistant message kept whose tool results would be left behind): a fork must be
/// a conversation a model can continue.
fn fork_point(parent: &str, history: &[Message], at: &str, before: bool) -> Result<ForkPoint> {
    let Some(pos) = history.iter().position(|m| m.id == at) else {
        return Err(
            Error::not_found(format!("message {at} is not in session {parent}")).with_hint(
                format!("run `kxen-agent session show {parent}` to see its message ids"),
            ),
        );
    };
    let point = ForkPoint {
        message_id: at.to_string(),
        index: pos + 1,
        before,
    };
    let (kept, left) = history.split_at(point.copied());
    let split = left.iter().filter(|m| m.role == Role::Tool).find_map(|m| {
        let asked = m.reply_to.as_deref()?;
        kept.iter().find(|k| k.id == asked)
    });
    if let Some(assistant) = split {
        let last_result = history
            .iter()
            .rev()
            .find(|m| m.reply_to.as_deref() == Some(assistant.id.as_str()))
            .map(|m| m.id.as_str())
            .unwrap_or(at);
        return Err(Error::invalid(format!(
            "forking {} message {at} would keep the tool calls of message {} without their results",
            if before { "before" } else { "at" },
            assistant.id
        ))
        .with_hint(format!(
            "fork at its last tool result (`--at {last_result}`) or before it (`--at {} --before`)",
            assistant.id
        )));
    }
    Ok(point)
}

/// Verifies the parent's workspace (it must still be what the parent is bound to) and returns
/// its repository root and current HEAD, the base of the new worktree.
fn worktree_base(
    parent: &str,
    stored: &WorkspaceBinding,
) -> Result<(PathBuf, String, Vec<String>)> {
    let Some(repo_root) = stored.repository_root.clone() else {
        return Err(Error::invalid(format!(
            "session {parent} works in {}, which is not a git repository; \
             `--worktree` needs one",
            stored.root.display()
        ))
        .with_hint(format!(
            "fork without --worktree to share the workspace: `kxen-agent session fork {parent} --at MSG`"
        )));
    };
    let verified = git::verify(stored, &stored.root, false)?;
    let Some(head) = verified.current_head else {
        return Err(Error::invalid(format!(
            "the repository at {} has no commit yet; a worktree needs one",
            repo_root.display()
        )));
    };
    let mut warnings = verified.warnings;
    if git::has_uncommitted_changes(&repo_root)? {
        warnings.push(format!(
            "{} has uncommitted changes; the new worktree starts at HEAD {head} without them",
            repo_root.display()
        ));
    }
    Ok((repo_root, head, warnings))
}

/// The fork's binding: the same repository (the parent's identity), at the same subdirectory of
/// the new worktree as the parent's workspace is of its repository, on branch `kxen/NAME`.
fn fork_binding(
    parent: &WorkspaceBinding,
    repo_root: &Path,
    worktree: &Path,
) -> Result<(WorkspaceBinding, Vec<String>)> {
    let sub = parent.root.strip_prefix(repo_root).unwrap_or(Path::new(""));
    let root = worktree.join(sub);
    if !root.is_dir() {
        return Err(Error::not_found(format!(
            "the Session's workspace is the subdirectory {} of its repository, which is not in \
             the parent's HEAD commit, so the worktree {} does not have it",
            sub.display(),
            worktree.display()
        ))
        .with_hint("commit that directory first, or fork without --worktree"));
    }
    let (mut binding, warnings) = git::capture(&root)?;
    binding.identity_kind = parent.identity_kind;
    binding.identity_hash = parent.identity_hash.clone();
    Ok((binding, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn msg(role: Role) -> Message {
        Message::new("run_1", role, "x")
    }

    fn exchange() -> Vec<Message> {
        let user = msg(Role::User);
        let mut asst = msg(Role::Assistant);
        asst.tool_calls = vec![
            crate::session::CallRecord {
                id: "c1".into(),
                name: "read".into(),
                arguments: serde_json::json!({}),
            },
            crate::session::CallRecord {
                id: "c2".into(),
                name: "read".into(),
                arguments: serde_json::json!({}),
            },
        ];
        let mut r1 = msg(Role::Tool);
        r1.reply_to = Some(asst.id.clone());
        r1.tool_call_id = Some("c1".into());
        let mut r2 = msg(Role::Tool);
        r2.reply_to = Some(asst.id.clone());
        r2.tool_call_id = Some("c2".into());
        let done = msg(Role::Assistant);
        vec![user, asst, r1, r2, done]
    }

    #[test]
    fn fork_points_and_split_exchanges() {
        let h = exchange();
        let p = fork_point("ses_p", &h, &h[0].id, false).unwrap();
        assert_eq!((p.index, p.copied()), (1, 1));
        let p = fork_point("ses_p", &h, &h[0].id, true).unwrap();
        assert_eq!(p.copied(), 0);
        let p = fork_point("ses_p", &h, &h[1].id, true).unwrap();
        assert_eq!(p.copied(), 1);
        let p = fork_point("ses_p", &h, &h[3].id, false).unwrap();
        assert_eq!(p.copied(), 4);
        let p = fork_point("ses_p", &h, &h[4].id, false).unwrap();
        assert_eq!(p.copied(), 5);
        for (i, before) in [(1, false), (2, false), (2, true), (3, true)] {
            let err = fork_point("ses_p", &h, &h[i].id, before).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidInput, "{i} {before}");
            assert!(err.hints[0].contains(&h[3].id), "{err:?}");
        }
        let err = fork_point("ses_p", &h, "msg_nope", false).unwrap_err();
        assert_eq!(err.kind, ErrorKind::NotFound);
        assert!(err.hints[0].contains("session show ses_p"));
    }
}
