//! MCP tools (`mcp__<server>__<tool>`): servers of the runtime config, granted at Session
//! creation, locked with their schemas, called through the durable journal.
//!
//! - [`config`]: the `[mcp.servers.NAME]` tables.
//! - [`client`]: the protocol over stdio (JSON-RPC lines; why not `rmcp` is written there).
//! - [`http`]: the protocol over Streamable HTTP (a `url` server), with [`sse`] for answers that
//!   come as an event stream.
//! - [`inbound`]: the answers to a server's own requests (ping, elicitation, roots, sampling).
//! - [`oauth`]: OAuth for a `url` server (`[mcp.servers.NAME.oauth]`): discovery, the
//!   `client_credentials` grant, refresh; [`oauth_code`] the authorization-code grant a person
//!   approves; [`oauth_store`] the per-user token store (`kxen-agent mcp login/logout/status`).
//! - [`servers`]: the servers of one execution, started on demand, restarted after a crash, and
//!   the conversion of a `tools/call` result into a tool output.
//! - [`grant`]: the intersection of a definition's MCP capabilities with the policy and the
//!   servers' tool lists (Session creation), and MCP drift (resume).
//!
//! Everything enters the runtime through one registry entry, `mcp__*` (gate `allowMcp`, side
//! effect `external`), so a call is journaled `Started` before it is sent and `OutcomeKnown` when
//! its result arrives; a call whose answer never came is UNKNOWN.

pub mod client;
pub mod config;
pub mod grant;
pub mod http;
pub mod inbound;
pub mod oauth;
pub mod oauth_code;
pub mod oauth_store;
pub mod servers;
pub mod sse;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use config::{McpSection, ServerConfig};
pub use grant::{ServerView, ToolView, catalog, check_drift, grant};
pub use servers::Servers;

/// Where the answer of a running Streamable HTTP `tools/call` can be read again (the
/// transport's resumability): journaled once per call, when the server's event stream gives its
/// first event id (`mcpStream`, [`crate::journal::JournalRecord::McpStream`]). After a kill -9,
/// `--resume` reconnects with [`session_id`](Self::session_id), `GET`s with `Last-Event-ID:
/// event_id`, and settles the call from the replay if it holds the answer to
/// [`request_id`](Self::request_id) ([`Servers::replay`]). Holds no credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StreamPosition {
    /// The server's name in the runtime config.
    pub server: String,
    /// The `Mcp-Session-Id` the server gave (`None`: a server without sessions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The protocol version the session speaks (`MCP-Protocol-Version`).
    pub protocol_version: String,
    /// The JSON-RPC id of the `tools/call` request.
    pub request_id: u64,
    /// The first event id of the call's stream: everything after it can be replayed.
    pub event_id: String,
}

/// Writes a call's [`StreamPosition`] to the run's journal before the call goes on; a failure
/// only loses the chance to replay after a crash (the call is then UNKNOWN, as without a
/// position), so it does not stop the call.
pub trait StreamJournal: Sync {
    fn record_position(&self, op_id: &str, position: StreamPosition);
}

/// What a call's stream position means to one `mcp__…` call ([`crate::tools::ToolContext`]).
#[derive(Clone, Copy)]
pub enum StreamMode<'a> {
    /// A live call: its position goes to this journal.
    Journal(&'a dyn StreamJournal),
    /// Recovery: the call is not sent again; its answer is read from the server's replay of
    /// this position (an interrupted output when it cannot be).
    Replay(&'a StreamPosition),
}

/// The prefix of every MCP capability.
pub const PREFIX: &str = "mcp__";

/// `mcp__<server>__<tool>` (or `mcp__<server>__*`) split into server and tool (`*`).
pub fn split_capability(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(PREFIX)?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// The capability name of `tool` of `server`.
pub fn capability(server: &str, tool: &str) -> String {
    format!("{PREFIX}{server}__{tool}")
}

/// Why an `mcp__…` capability name is malformed, or `None` (also `None` for other names).
/// Accepted: `mcp__<server>__<tool>`, `mcp__<server>__*` and, in policy lists, `mcp__*`.
pub fn capability_error(name: &str) -> Option<String> {
    let rest = name.strip_prefix(PREFIX)?;
    if rest == "*" {
        return None;
    }
    let Some((server, tool)) = split_capability(name) else {
        return Some(format!(
            "{name:?} is not an MCP capability: write `mcp__<server>__<tool>` or `mcp__<server>__*`"
        ));
    };
    if let Some(why) = config::server_name_error(server) {
        return Some(format!("{name:?}: {why}"));
    }
    if tool != "*" && tool.contains('*') {
        return Some(format!(
            "{name:?}: `*` stands only alone for every tool of the server (`mcp__{server}__*`)"
        ));
    }
    None
}

/// Whether policy list entry `pattern` covers capability `name`: equal, or an `mcp__…*` pattern
/// whose prefix `name` extends.
pub fn pattern_covers(pattern: &str, name: &str) -> bool {
    if pattern == name {
        return true;
    }
    match pattern.strip_suffix('*') {
        Some(prefix) if pattern.starts_with(PREFIX) => {
            name.len() > prefix.len() && name.starts_with(prefix)
        }
        _ => false,
    }
}

/// One MCP tool granted to a Session, as its lock records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LockedTool {
    /// `mcp__<server>__<tool>`: the name the model calls.
    pub name: String,
    pub server: String,
    /// The tool's name on its server.
    pub tool: String,
    #[serde(default)]
    pub description: String,
    pub input_schema: Value,
    /// [`schema_hash`] of [`input_schema`](Self::input_schema).
    pub schema_hash: String,
}

/// `sha256:` of the canonical JSON of a tool's input schema.
pub fn schema_hash(schema: &Value) -> String {
    format!("sha256:{}", crate::canonical::hash_hex(schema))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_patterns() {
        assert_eq!(split_capability("mcp__gh__search"), Some(("gh", "search")));
        assert_eq!(split_capability("mcp__gh__a__b"), Some(("gh", "a__b")));
        assert_eq!(split_capability("mcp__gh__*"), Some(("gh", "*")));
        assert_eq!(split_capability("mcp__gh"), None);
        assert_eq!(split_capability("exec"), None);
        assert_eq!(capability_error("exec"), None);
        assert_eq!(capability_error("mcp__gh__*"), None);
        assert_eq!(capability_error("mcp__*"), None);
        assert!(capability_error("mcp__gh").is_some());
        assert!(capability_error("mcp__GH__x").is_some());
        assert!(capability_error("mcp__gh__a*").is_some());
        assert!(pattern_covers("mcp__gh__*", "mcp__gh__search"));
        assert!(pattern_covers("mcp__*", "mcp__gh__search"));
        assert!(pattern_covers("mcp__gh__search", "mcp__gh__search"));
        assert!(!pattern_covers("mcp__gh__*", "mcp__ghx__search"));
        assert!(!pattern_covers("e*", "exec"), "only MCP names are patterns");
    }
}
