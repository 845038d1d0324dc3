//! The policy file: closed JSON schema of docs/spec.md §4.

use std::io::Read;
use std::path::Path;

use serde::Deserialize;

use super::SandboxMode;
// Up to `agent` (a floor above): a policy names capabilities with the same grammar as a
// definition does, checked by the one function that defines it.
use crate::agent::capability_name_error;
use crate::error::{Error, ErrorKind, Result};
use crate::secrets::check_pass_env;

/// Largest policy file accepted (1 MiB), refused before parsing.
pub const MAX_POLICY_BYTES: u64 = 1024 * 1024;

/// A policy file as written. Unknown fields and duplicate keys are errors.
///
/// `maxPureRetries` is accepted **(beyond the seed)** as a tightening like `maxTurns`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyFile {
    /// Absent: no restriction beyond the runtime's catalog.
    #[serde(default)]
    pub allowed_capabilities: Option<Vec<String>>,
    #[serde(default)]
    pub denied_capabilities: Vec<String>,
    #[serde(default)]
    pub allow_shell: bool,
    #[serde(default)]
    pub allow_mcp: bool,
    #[serde(default)]
    pub pass_env: Vec<String>,
    #[serde(default)]
    pub max_turns: Option<u32>,
    #[serde(default)]
    pub max_wall_clock_ms: Option<u64>,
    #[serde(default)]
    pub max_pure_retries: Option<u32>,
    /// The most a run may spend on model calls (US dollars); only lowers the definition's.
    #[serde(default)]
    pub max_cost_usd: Option<super::Usd>,
    /// The `exec` fence: `workspaceWrite` (the default), `readOnly` or `off` (checked by
    /// [`sandbox_mode`], so the message names the field).
    #[serde(default)]
    pub sandbox: Option<String>,
    #[serde(default)]
    pub allow_network: bool,
    /// Capability patterns → `allow` | `ask` | `deny` (see [`super::rules`]).
    #[serde(default, deserialize_with = "unique_rules")]
    pub mcp_tools: super::ToolRules,
    /// Server name → sensitive environment variables only that MCP server may get (when its
    /// `[mcp.servers.NAME]` entry lists them in its own `passEnv`); never `exec` or any other
    /// tool.
    #[serde(default)]
    pub mcp_pass_env: std::collections::BTreeMap<String, Vec<String>>,
    /// **(beyond)** How deep `task` subagents may nest: a child at this depth gets no `task`
    /// (absent: 1, children never delegate further).
    #[serde(default)]
    pub max_task_depth: Option<u32>,
    /// How an MCP server's request for user input is answered: `"decline"` (the default) or
    /// `"acceptDefaults"` ([`super::McpElicitation`]).
    #[serde(default)]
    pub mcp_elicitation: Option<super::McpElicitation>,
}

/// `mcpTools` with a repeated pattern refused (serde_json's map would keep the last silently).
fn unique_rules<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> std::result::Result<super::ToolRules, D::Error> {
    struct Rules;
    impl<'de> serde::de::Visitor<'de> for Rules {
        type Value = super::ToolRules;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an object of capability patterns to \"allow\", \"ask\" or \"deny\"")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Self::Value, A::Error> {
            let mut rules = super::ToolRules::new();
            while let Some((pattern, rule)) = map.next_entry::<String, super::ToolRule>()? {
                if rules.insert(pattern.clone(), rule).is_some() {
                    return Err(serde::de::Error::custom(format!(
                        "mcpTools: pattern {pattern:?} appears twice"
                    )));
                }
            }
            Ok(rules)
        }
    }
    d.deserialize_map(Rules)
}

/// The `sandbox` value of a policy file (absent: `workspaceWrite`).
pub(super) fn sandbox_mode(value: Option<&str>) -> Result<SandboxMode> {
    match value {
        None | Some("workspaceWrite") => Ok(SandboxMode::WorkspaceWrite),
        Some("readOnly") => Ok(SandboxMode::ReadOnly),
        Some("off") => Ok(SandboxMode::Off),
        Some(other) => Err(Error::invalid(format!(
            "sandbox: must be \"workspaceWrite\", \"readOnly\" or \"off\", found {other:?}"
        ))),
    }
}

const HINT: &str = "`kxen-agent policy init --output policy.json` writes a valid example";

/// Reads and validates the policy file at `path` (missing: exit 3; invalid: exit 4).
pub fn load_policy_file(path: &Path) -> Result<PolicyFile> {
    let file = std::fs::File::open(path).map_err(|e| Error::io("read policy", path, e))?;
    let meta = file
        .metadata()
        .map_err(|e| Error::io("read policy", path, e))?;
    let source = path.display().to_string();
    if meta.is_dir() {
        return Err(Error::invalid(format!(
            "{source}: is a directory, not a policy file"
        )));
    }
    let mut bytes = Vec::new();
    file.take(MAX_POLICY_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read policy", path, e))?;
    parse_policy(&bytes, &source)
}

/// Validates a policy in `bytes`; `source` (a file name) prefixes every message.
pub fn parse_policy(bytes: &[u8], source: &str) -> Result<PolicyFile> {
    if bytes.len() as u64 > MAX_POLICY_BYTES {
        return Err(Error::invalid(format!(
            "{source}: the file is larger than {MAX_POLICY_BYTES} bytes; a policy is a few lines of JSON"
        )));
    }
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::invalid(format!(
            "{source}: the file is empty; a policy is a JSON object such as {{\"allowShell\": false}}"
        ))
        .with_hint(HINT));
    }
    // serde would also fill a struct from a JSON array (`[true]`); a policy is an object.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Error::invalid(format!(
            "{source}: a policy must be one JSON object (`{{…}}`)"
        ))
        .with_hint(HINT));
    }
    let policy: PolicyFile = serde_json::from_slice(body).map_err(|e| {
        let mut message = e.to_string();
        let suffix = format!(" at line {} column {}", e.line(), e.column());
        if let Some(stripped) = message.strip_suffix(&suffix) {
            message = stripped.to_string();
        }
        Error::invalid(format!("{source}:{}:{}: {message}", e.line(), e.column())).with_hint(HINT)
    })?;
    check(&policy).map_err(|m| Error::wrap(ErrorKind::InvalidInput, source, m).with_hint(HINT))?;
    Ok(policy)
}

/// The value rules (types and closedness are serde's job). Each failure is an invalid input
/// (exit 4) that names its field; the caller puts the file in front.
fn check(p: &PolicyFile) -> Result<()> {
    let invalid = |field: String, why: Error| Error::wrap(ErrorKind::InvalidInput, field, why);
    let lists = [
        (
            "allowedCapabilities",
            p.allowed_capabilities.as_deref().unwrap_or(&[]),
        ),
        ("deniedCapabilities", &p.denied_capabilities[..]),
    ];
    for (field, list) in lists {
        for (i, name) in list.iter().enumerate() {
            if let Some(why) = capability_name_error(name) {
                return Err(Error::invalid(format!("{field}[{i}]: {why}")));
            }
        }
    }
    for pattern in p.mcp_tools.keys() {
        if let Some(why) = super::rules::pattern_error(pattern) {
            return Err(Error::invalid(format!("mcpTools: {why}")));
        }
    }
    for (i, name) in p.pass_env.iter().enumerate() {
        check_pass_env(name).map_err(|why| invalid(format!("passEnv[{i}]"), why.into()))?;
    }
    for (server, names) in &p.mcp_pass_env {
        // Up to `mcp` (a floor above): a server name here must be one `[mcp.servers.NAME]`
        // could define, by the rule of the module that owns that table.
        if let Some(why) = crate::mcp::config::server_name_error(server) {
            return Err(Error::invalid(format!("mcpPassEnv: {why}")));
        }
        for (i, name) in names.iter().enumerate() {
            check_pass_env(name)
                .map_err(|why| invalid(format!("mcpPassEnv.{server}[{i}]"), why.into()))?;
        }
    }
    if p.max_turns == Some(0) {
        return Err(Error::invalid(
            "maxTurns: must be at least 1 (omit it to keep the definition's)",
        ));
    }
    if let Some(usd) = p.max_cost_usd {
        super::check_usd(usd.0).map_err(|why| invalid("maxCostUsd".into(), why))?;
    }
    if p.max_wall_clock_ms == Some(0) {
        return Err(Error::invalid(
            "maxWallClockMs: must be at least 1 (omit it to keep the definition's)",
        ));
    }
    if let Some(n) = p.max_task_depth
        && !(1..=super::MAX_TASK_DEPTH_LIMIT).contains(&n)
    {
        return Err(Error::invalid(format!(
            "maxTaskDepth: must be between 1 and {}, found {n} (omit it for 1)",
            super::MAX_TASK_DEPTH_LIMIT
        )));
    }
    sandbox_mode(p.sandbox.as_deref())?;
    if let Some(n) = p.max_pure_retries
        && n > 255
    {
        return Err(Error::invalid(format!(
            "maxPureRetries: must be between 0 and 255, found {n}"
        )));
    }
    Ok(())
}
