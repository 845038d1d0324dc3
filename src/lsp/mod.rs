//! The `lsp` tool's language servers: diagnostics, definitions, references, hover and symbols
//! from real language servers (pylsp, pyright, rust-analyzer, …) of the runtime config.
//!
//! - [`config`]: the `[lsp.NAME]` tables.
//! - [`client`]: one running server (spawn, `initialize`, requests, published diagnostics,
//!   `shutdown`/`exit`/kill), over `lsp-server`'s message framing.
//! - [`servers`]: the servers of one execution: started lazily on the first call for a file they
//!   serve, restarted after a crash, kept in sync with the files on disk, shut down when the
//!   execution ends.
//! - [`render`]: results as the compact text the model reads.
//! - [`grant`]: the lock's record of the configured servers, and drift on resume.
//!
//! `lsp` is a read-class tool (registry entry `lsp`): it changes nothing in the workspace, so it
//! is journaled like `read` and `grep` (`started`, then `outcomeKnown`; it is never UNKNOWN) and
//! joins parallel batches of reads.

pub mod client;
pub mod config;
pub mod grant;
pub mod render;
pub mod servers;
pub mod uri;

use schemars::JsonSchema;
use serde::Deserialize;

pub use config::ServerConfig;
pub use grant::{check_drift, grant};
pub use servers::Servers;

/// The capability (and tool) name.
pub const CAPABILITY: &str = "lsp";

/// What an `lsp` call asks (described to the model by the `operation` field; the schema is a
/// plain inline `enum` of the names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(inline)]
pub enum Operation {
    Diagnostics,
    Definition,
    References,
    Hover,
    DocumentSymbols,
    WorkspaceSymbols,
}

impl Operation {
    pub fn name(self) -> &'static str {
        match self {
            Operation::Diagnostics => "diagnostics",
            Operation::Definition => "definition",
            Operation::References => "references",
            Operation::Hover => "hover",
            Operation::DocumentSymbols => "documentSymbols",
            Operation::WorkspaceSymbols => "workspaceSymbols",
        }
    }

    /// Whether it needs `line` and `character`.
    pub fn at_position(self) -> bool {
        matches!(
            self,
            Operation::Definition | Operation::References | Operation::Hover
        )
    }
}

/// One `lsp` call, its path already confined to the workspace.
#[derive(Debug, Clone)]
pub struct Query<'a> {
    pub operation: Operation,
    /// Canonical, inside the workspace.
    pub path: &'a std::path::Path,
    /// 1-based line and character column (the position operations).
    pub position: Option<(u32, u32)>,
    pub query: Option<&'a str>,
}
