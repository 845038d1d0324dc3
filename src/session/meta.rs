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
    /// The workspace binding captured at creation (kxen-agent.md §7; written by `git::capture`).
    pub workspace: WorkspaceBinding,
    /// Lineage, set by `session fork`: the Session this one was forked from.
    pub parent_id: Option<String>,
    /// The first Session of the fork tree (this Session's own id when it is not a fork).
    pub branch_root_id: String,
    /// The message id the fork was taken at.
    pub fork_point: Option<String>,
    /// `at` (fork includes the message) or `before`.
    pub fork_kind: Option<String>,
    /// The `DcpAgentLock` fixed for the Session's life.
    pub lock: DcpAgentLock,
    /// The Session's first run (started with the creating task).
    pub first_run_id: String,
}

impl SessionMeta {
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
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::corrupt(format!("{}: {e}", path.display())))
    }
}
