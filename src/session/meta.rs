//! `session.json`: who a Session is, where it is bound, where it came from and what it may do.

use serde::{Deserialize, Serialize};

use crate::agent::DcpAgentLock;
use crate::git::WorkspaceBinding;

use crate::error::{Error, Result};
use crate::state::SessionPaths;

/// The current `formatVersion` of `session.json`.
pub const FORMAT_VERSION: u32 = 1;

/// The content of `sessions/<ses>/session.json` (replaced atomically, never appended).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionMeta {
    pub format_version: u32,
    pub id: String,
    pub created_at: String,
    /// The workspace binding captured at creation (docs/spec.md §7; written by `git::capture`).
    pub workspace: WorkspaceBinding,
    /// Lineage, set by `session fork`: the Session this one was forked from.
    pub parent_id: Option<String>,
    /// The first Session of the fork tree (this Session's own id when it is not a fork).
    pub branch_root_id: String,
    /// Where in the parent's conversation the fork was taken (`session fork`).
    pub fork_point: Option<ForkPoint>,
    /// `conversation` (shares the parent's workspace), `worktree` (its own git worktree) or
    /// `task` (a child Session created by the parent's `task` tool call).
    pub fork_kind: Option<ForkKind>,
    /// A `task` child: the parent's run and operation that created it (the parent Session is
    /// `parentId`), its description and its depth below the top-level Session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_parent: Option<TaskParent>,
    /// The `DcpAgentLock` fixed for the Session's life.
    pub lock: DcpAgentLock,
    /// The Session's first run (started with the creating task). A fork starts without runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_run_id: Option<String>,
    /// Events in the Session's life that are not conversation, oldest first (a rebound
    /// workspace). Changed only together with the rest of `session.json`, by atomic replace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<HistoryEntry>,
}

/// The message a fork was taken at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ForkPoint {
    /// The parent's message id given with `--at`.
    pub message_id: String,
    /// Its 1-based position in the parent's conversation.
    pub index: usize,
    /// `--before`: the fork's history ends just before that message instead of with it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub before: bool,
}

impl ForkPoint {
    /// How many of the parent's messages the fork copied: its common prefix with the parent.
    pub fn copied(&self) -> usize {
        if self.before {
            self.index - 1
        } else {
            self.index
        }
    }
}

/// How a fork relates to its parent's workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ForkKind {
    /// Same workspace as the parent (files are not copied).
    Conversation,
    /// A new git worktree on branch `kxen/NAME`.
    Worktree,
    /// A subagent: a child Session run by the parent's `task` tool call, same workspace.
    Task,
}

/// Where a `task` child Session came from (see [`SessionMeta::task_parent`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskParent {
    /// The parent's run whose tool call created this Session.
    pub run_id: String,
    /// The parent's `task` operation (its journal's `started` record names this Session).
    pub op_id: String,
    /// The call's `description` (the script provider selects this Session's lines by it).
    pub description: String,
    /// 1 for a child of a top-level Session, one more per level below.
    pub depth: u32,
}

impl ForkKind {
    pub fn name(self) -> &'static str {
        match self {
            ForkKind::Conversation => "conversation",
            ForkKind::Worktree => "worktree",
            ForkKind::Task => "task",
        }
    }
}

/// One entry of [`SessionMeta::history`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum HistoryEntry {
    /// `--resume SES --workspace NEW --rebind-workspace` moved the Session to a new root.
    #[serde(rename_all = "camelCase")]
    WorkspaceRebound {
        from: String,
        to: String,
        at: String,
    },
}

impl SessionMeta {
    /// How many `task` levels this Session is below its top-level Session (0: top level).
    pub fn task_depth(&self) -> u32 {
        self.task_parent.as_ref().map_or(0, |t| t.depth)
    }

    /// Reads `session.json` of a Session (read-only).
    pub fn read(paths: &SessionPaths, session_id: &str) -> Result<SessionMeta> {
        let path = paths.session_json();
        let bytes = std::fs::read(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::not_found(format!("no session {session_id} ({})", path.display())).with_hint(
                    "run `kxen-agent session list` to see the sessions in this state dir",
                )
            } else {
                Error::io("read", &path, e)
            }
        })?;
        crate::state::check_format_version(&bytes, FORMAT_VERSION, &path)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::corrupt(format!("{}: {e}", path.display())))
    }
}
