//! Which MCP tools a Session gets (creation) and whether they are still what was locked
//! (resume).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::{LockedTool, Servers, capability, schema_hash, split_capability};
// Up to `agent` (a floor above): granting MCP tools is writing them into the Session's lock,
// whose type `agent` owns (it holds `LockedTool`s of ours without calling any server).
use crate::agent::DcpAgentLock;
use crate::error::{Error, Result};

/// The longest tool description kept; a longer one is cut here (with a warning): the model is
/// sent every granted tool's description on every turn.
pub const MAX_DESCRIPTION: usize = 2048;
/// The longest `mcp__<server>__<tool>` name: what OpenAI-style APIs accept as a function name
/// (`^[a-zA-Z0-9_-]{1,64}$`).
pub const MAX_TOOL_NAME: usize = 64;

/// `server`'s tool listing, refused (exit 9) if two tools share a name: which of them a call
/// would reach, and which one the lock describes, would be a guess.
fn listing(servers: &Servers, server: &str) -> Result<Vec<Value>> {
    let tools = servers.list_tools(server)?;
    let mut seen = BTreeSet::new();
    for name in tools.iter().filter_map(|t| t["name"].as_str()) {
        if !seen.insert(name) {
            return Err(Error::external(format!(
                "MCP server `{server}` lists tool {name:?} more than once; kxen-agent cannot \
                 tell which one a call would reach"
            ))
            .with_hint(format!(
                "fix the server (or its [mcp.servers.{server}] entry) so each tool name is listed once"
            )));
        }
    }
    Ok(tools)
}

/// Why tool `t` (an entry of a `tools/list` answer) of `server` cannot be offered, or `None`:
/// its name is not `[A-Za-z0-9_-]` or makes `mcp__<server>__<tool>` longer than
/// [`MAX_TOOL_NAME`] or ambiguous, or its `inputSchema` is not an object schema. A missing
/// `inputSchema` stands for `{"type": "object"}`.
pub fn tool_error(server: &str, t: &Value) -> Option<String> {
    let Some(name) = t["name"].as_str() else {
        return Some(format!("a tool's name is not a string: {}", t["name"]));
    };
    let shown = crate::text::preview(&format!("{name:?}"), 80);
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Some(format!(
            "tool {shown}: a tool name must be letters, digits, `_` and `-` (what model APIs accept)"
        ));
    }
    let full = capability(server, name);
    if full.len() > MAX_TOOL_NAME {
        return Some(format!(
            "tool {shown}: `mcp__{server}__<tool>` would be {} characters; model APIs accept at \
             most {MAX_TOOL_NAME} (a shorter server name leaves more room)",
            full.len()
        ));
    }
    if split_capability(&full) != Some((server, name)) {
        return Some(format!(
            "tool {shown}: `{full}` would read as another server's tool (`_` next to the `__`)"
        ));
    }
    match t.get("inputSchema") {
        None => None,
        Some(Value::Object(schema)) if schema.get("type") == Some(&Value::from("object")) => None,
        Some(other) => Some(format!(
            "tool {shown}: its inputSchema is not a JSON Schema of type \"object\": {}",
            crate::text::preview(&other.to_string(), 80)
        )),
    }
}

/// A description as it is locked: at most [`MAX_DESCRIPTION`] bytes (cut at a character).
fn description(t: &Value) -> (String, bool) {
    let text = t["description"].as_str().unwrap_or_default();
    if text.len() <= MAX_DESCRIPTION {
        return (text.to_string(), false);
    }
    let mut end = MAX_DESCRIPTION;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_string(), true)
}

/// Grants the MCP tools of `lock`'s MCP capabilities (already permitted by the policy's
/// `allowMcp`, allowed and denied lists): starts each server they name, lists its tools, and
/// records in the lock every tool granted, with its schema's hash and the server entry's hash.
///
/// A required capability whose server is not configured or has no such tool is refused
/// (exit 6); an optional one is dropped with a warning (returned). A server that fails to start
/// or to answer is exit 9. Tools of an `mcp__<server>__*` family that the policy denies are left
/// out.
pub fn grant(lock: &mut DcpAgentLock, servers: &Servers) -> Result<Vec<String>> {
    let mut warnings = Vec::new();
    let required = lock.definition.spec.capabilities.required.clone();
    let mcp_caps: Vec<String> = lock
        .capabilities
        .iter()
        .filter(|c| c.starts_with(super::PREFIX))
        .cloned()
        .collect();
    let mut dropped: BTreeSet<String> = BTreeSet::new();
    let mut listings: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for cap in &mcp_caps {
        let is_required = required.contains(cap);
        let Some((server, _)) = split_capability(cap) else {
            return Err(refuse(format!("`{cap}` names no MCP server")));
        };
        if servers.config(server).is_none() {
            let why = format!(
                "`{cap}` needs MCP server `{server}`, which the runtime config does not define"
            );
            if is_required {
                return Err(refuse(why).with_hint(format!(
                    "add [mcp.servers.{server}] with its command to the runtime config (see docs/mcp-servers.md)"
                )));
            }
            warnings.push(format!("{why}; the optional capability is dropped"));
            dropped.insert(cap.clone());
            continue;
        }
        if !listings.contains_key(server) {
            let tools = listing(servers, server)
                .map_err(|e| e.with_consequence("no session was created"))?;
            listings.insert(server.to_string(), tools);
        }
    }
    let mut granted: BTreeMap<String, LockedTool> = BTreeMap::new();
    let kept: Vec<&String> = mcp_caps.iter().filter(|c| !dropped.contains(*c)).collect();
    for cap in kept {
        let (server, tool) = split_capability(cap).expect("checked above");
        let listing = &listings[server];
        let found: Vec<&Value> = listing
            .iter()
            .filter(|t| tool == "*" || t["name"].as_str() == Some(tool))
            .collect();
        if found.is_empty() && tool != "*" {
            let names: Vec<&str> = listing.iter().filter_map(|t| t["name"].as_str()).collect();
            let why = format!(
                "MCP server `{server}` has no tool `{tool}` (it has: {})",
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            );
            if required.contains(cap) {
                return Err(refuse(format!("`{cap}`: {why}")));
            }
            warnings.push(format!(
                "`{cap}`: {why}; the optional capability is dropped"
            ));
            dropped.insert(cap.clone());
            continue;
        }
        for t in found {
            if let Some(why) = tool_error(server, t) {
                if tool != "*" && required.contains(cap) {
                    return Err(refuse(format!("`{cap}`: MCP server `{server}`: {why}")));
                }
                warnings.push(format!(
                    "MCP server `{server}`: {why}; the tool is not granted"
                ));
                continue;
            }
            let name = t["name"].as_str().expect("checked by tool_error");
            let full = capability(server, name);
            if let Some(why) = crate::agent::capability_name_error(&full) {
                warnings.push(format!(
                    "MCP server `{server}`: tool {name:?} is left out: {why}"
                ));
                continue;
            }
            if lock.policy.refusal(&full).is_some() {
                continue; // denied by a policy pattern: never offered
            }
            let input_schema = t
                .get("inputSchema")
                .cloned()
                .unwrap_or_else(|| serde_json::json!({"type": "object"}));
            let (description, cut) = description(t);
            if cut {
                warnings.push(format!(
                    "MCP server `{server}`: the description of tool `{name}` is cut to \
                     {MAX_DESCRIPTION} bytes"
                ));
            }
            granted.insert(
                full.clone(),
                LockedTool {
                    name: full,
                    server: server.to_string(),
                    tool: name.to_string(),
                    description,
                    schema_hash: schema_hash(&input_schema),
                    input_schema,
                },
            );
        }
    }
    lock.capabilities.retain(|c| !dropped.contains(c));
    lock.mcp_tools = granted.into_values().collect();
    lock.mcp_servers = lock
        .mcp_tools
        .iter()
        .map(|t| t.server.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(|s| {
            let hash = servers.config(&s).expect("listed").entry_hash();
            (s, hash)
        })
        .collect();
    Ok(warnings)
}

fn refuse(why: String) -> Error {
    Error::policy(format!("{why}; no session was created"))
}

/// Refuses (exit 6, with a diff) unless every locked MCP tool is still there with its schema
/// and every locked server entry is unchanged. Starts the servers it checks (they stay running
/// in `servers` for the execution).
pub fn check_drift(lock: &DcpAgentLock, servers: &Servers) -> Result<()> {
    let mut diff: Vec<String> = Vec::new();
    let mut usable: BTreeSet<&str> = BTreeSet::new();
    for (server, locked_hash) in &lock.mcp_servers {
        match servers.config(server) {
            None => diff.push(format!(
                "- [mcp.servers.{server}] (locked {locked_hash}; gone from the runtime config)"
            )),
            Some(c) if c.entry_hash() != *locked_hash => diff.push(format!(
                "~ [mcp.servers.{server}] changed: locked {locked_hash}, now {}",
                c.entry_hash()
            )),
            Some(_) => {
                usable.insert(server);
            }
        }
    }
    for server in &usable {
        let listing = listing(servers, server)?;
        for locked in lock.mcp_tools.iter().filter(|t| t.server == *server) {
            let now = listing
                .iter()
                .find(|t| t["name"].as_str() == Some(locked.tool.as_str()));
            match now {
                None => diff.push(format!(
                    "- {} (the server no longer has tool `{}`)",
                    locked.name, locked.tool
                )),
                Some(t) => {
                    let schema = t
                        .get("inputSchema")
                        .cloned()
                        .unwrap_or_else(|| serde_json::json!({"type": "object"}));
                    if schema_hash(&schema) != locked.schema_hash {
                        let old = crate::canonical::to_pretty(&locked.input_schema);
                        let new = crate::canonical::to_pretty(&schema);
                        let text = similar::TextDiff::from_lines(&old, &new)
                            .unified_diff()
                            .context_radius(2)
                            .header(
                                &format!("{} (locked)", locked.name),
                                &format!("{} (now)", locked.name),
                            )
                            .to_string();
                        diff.push(format!(
                            "~ {} input schema changed:\n{}",
                            locked.name,
                            text.trim_end()
                        ));
                    }
                }
            }
        }
    }
    if diff.is_empty() {
        return Ok(());
    }
    Err(Error::policy(format!(
        "MCP drift: the MCP tools locked when the session was created changed\n{}",
        diff.join("\n")
    ))
    .with_hint("restore the server and its [mcp.servers.…] entry as they were; a session's tools never change")
    .with_hint("to use the changed tools, start a new session"))
}

/// What `policy check --config` shows of one configured server: its tools and what the policy
/// does with each, or why it could not be listed.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerView {
    pub name: String,
    pub tools: Vec<ToolView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One tool of a [`ServerView`].
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolView {
    /// `mcp__<server>__<tool>`.
    pub capability: String,
    /// `allow`, `ask` or `deny` (its `mcpTools` rule), or `refused`.
    pub rule: String,
    /// The `mcpTools` pattern that decided the rule (absent: none covers it, so `allow`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pattern: Option<String>,
    /// Why the policy does not permit the tool at all (`allowMcp` off, `deniedCapabilities`, a
    /// `deny` rule), when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// Starts every server of `servers`, lists its tools and says what `policy` does with each. A
/// server that fails is reported in its entry (with the exit-9 message), not skipped.
pub fn catalog(servers: &Servers, policy: &crate::policy::MergedPolicy) -> Vec<ServerView> {
    servers
        .configs()
        .keys()
        .map(|name| match listing(servers, name) {
            Err(e) => ServerView {
                name: name.clone(),
                tools: Vec::new(),
                error: Some(e.message),
            },
            Ok(listing) => ServerView {
                name: name.clone(),
                tools: listing
                    .iter()
                    .filter_map(|t| Some((t["name"].as_str()?, tool_error(name, t))))
                    .map(|(tool, invalid)| {
                        let full = capability(name, tool);
                        let refused = invalid.or_else(|| policy.refusal(&full));
                        let (rule, pattern) = policy.rule(&full);
                        ToolView {
                            rule: if refused.is_some() && rule != crate::policy::ToolRule::Deny {
                                "refused".to_string()
                            } else {
                                rule.name().to_string()
                            },
                            pattern: pattern.map(str::to_string),
                            refused,
                            capability: full,
                        }
                    })
                    .collect(),
                error: None,
            },
        })
        .collect()
}
