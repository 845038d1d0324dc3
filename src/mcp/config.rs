//! `[mcp.servers.NAME]` tables of the runtime config (the model config file): which MCP servers
//! this runtime may start. Servers are the runtime's business, like providers: a definition only
//! names `mcp__<server>__<tool>` capabilities, the policy decides whether they are granted.
//!
//! ```toml
//! [mcp.servers.notes]
//! command = ["python3", "notes_server.py"]   # argv, no shell
//! cwd = "servers"                            # optional, relative to the config file
//! env = { NOTES_DIR = "/srv/notes" }         # optional literal, non-secret values
//! passEnv = ["NOTES_TOKEN"]                  # sensitive names it may get, if the policy passes them
//! timeout_ms = 60000                         # per request, default 120000
//! sandbox = "workspaceWrite"                 # the fence: workspaceWrite (default) | readOnly | off
//! allow_network = false                      # default false: an empty network namespace
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::policy::is_valid_env_name;
use crate::sandbox::{FencePolicy, SandboxMode};

/// Per-request timeout when `timeout_ms` is not given (the `exec` default).
pub const DEFAULT_MCP_TIMEOUT_MS: u64 = 120_000;

/// The `[mcp]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    #[serde(default)]
    pub servers: BTreeMap<String, ServerConfig>,
}

/// One `[mcp.servers.NAME]` table. Its canonical JSON ([`ServerConfig::entry_hash`]) is locked
/// with every tool granted from it: a changed entry is MCP drift.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// argv of a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Streamable HTTP endpoint: parsed so the message can be precise, refused (not supported yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_env: Option<String>,
    /// Working directory (relative: to the config file's directory). Default: the workspace root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// Literal environment values (never secrets: they are part of the config, not the policy).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Sensitive variables the server may receive; each one only if the policy's `passEnv` also
    /// lists it.
    #[serde(default, rename = "passEnv", skip_serializing_if = "Vec::is_empty")]
    pub pass_env: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The fence the server runs in, as `exec`'s (see [`crate::sandbox`]). Left out of the
    /// entry's JSON when default, so entries written before the field keep their hash.
    #[serde(default, skip_serializing_if = "SandboxMode::is_default")]
    pub sandbox: SandboxMode,
    /// Whether the server keeps the runner's network (default: an empty network namespace).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_network: bool,
}

impl ServerConfig {
    /// `sha256:` of the entry's compact JSON (fields in declaration order, `env` sorted).
    pub fn entry_hash(&self) -> String {
        let json = serde_json::to_string(self).expect("a server entry always serializes");
        crate::hash::sha256_prefixed(json.as_bytes())
    }

    /// The fence policy of the server process.
    pub fn fence(&self) -> FencePolicy {
        if self.sandbox == SandboxMode::Off {
            return FencePolicy::OFF;
        }
        FencePolicy {
            mode: self.sandbox,
            allow_network: self.allow_network,
        }
    }

    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms.unwrap_or(DEFAULT_MCP_TIMEOUT_MS)
    }

    /// The entry with a relative `cwd` made absolute against `config_dir`.
    pub fn resolved(mut self, config_dir: &Path) -> ServerConfig {
        if let Some(cwd) = &self.cwd
            && cwd.is_relative()
        {
            self.cwd = Some(config_dir.join(cwd));
        }
        self
    }
}

/// Why `name` is not a valid server name, or `None`. `[a-z0-9_-]{1,32}` without `__` (which
/// separates server and tool in `mcp__<server>__<tool>`), not starting or ending with `_`.
pub fn server_name_error(name: &str) -> Option<String> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if name.is_empty() || name.len() > 32 || !ok_chars {
        Some(format!(
            "MCP server name {name:?} must be 1 to 32 characters of a-z, 0-9, `_` and `-`"
        ))
    } else if name.contains("__") || name.starts_with('_') || name.ends_with('_') {
        Some(format!(
            "MCP server name {name:?} must not contain `__` or start or end with `_` (`__` \
             separates server and tool in `mcp__<server>__<tool>`)"
        ))
    } else {
        None
    }
}

/// Checks one entry; the message is prefixed by the caller with the config file.
pub fn check(name: &str, entry: &ServerConfig) -> Result<(), String> {
    let at = format!("[mcp.servers.{name}]");
    if let Some(why) = server_name_error(name) {
        return Err(format!("{at}: {why}"));
    }
    match (&entry.command, &entry.url) {
        (Some(_), Some(_)) => {
            return Err(format!(
                "{at}: give either `command` (stdio) or `url`, not both"
            ));
        }
        (None, None) => {
            return Err(format!(
                "{at}: give `command = [\"program\", \"arg\", …]` (a stdio server)"
            ));
        }
        (None, Some(url)) => {
            return Err(format!(
                "{at}: url = {url:?}: Streamable HTTP MCP servers are not supported yet; run \
                 the server over stdio with `command = [...]`"
            ));
        }
        (Some(argv), None) => {
            if argv.first().is_none_or(|a| a.is_empty()) {
                return Err(format!("{at}: command must name a program"));
            }
        }
    }
    if entry.bearer_token_env.is_some() {
        return Err(format!("{at}: bearer_token_env is only for `url` servers"));
    }
    for key in entry.env.keys().chain(entry.pass_env.iter()) {
        if !is_valid_env_name(key) {
            return Err(format!("{at}: {key:?} is not an environment variable name"));
        }
    }
    for (key, value) in &entry.env {
        if crate::tools::env::secret_value(key, std::ffi::OsStr::new(value)) {
            return Err(format!(
                "{at}: env.{key} looks like a credential; a config holds no secret: list the \
                 name in passEnv (and the policy's passEnv) instead"
            ));
        }
    }
    if entry.timeout_ms == Some(0) {
        return Err(format!("{at}: timeout_ms must be at least 1"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names() {
        for ok in ["github", "a", "my-server_2", &"x".repeat(32)] {
            assert_eq!(server_name_error(ok), None, "{ok}");
        }
        for bad in [
            "",
            "GitHub",
            "a b",
            "a__b",
            "_a",
            "a_",
            "ü",
            &"x".repeat(33),
        ] {
            assert!(server_name_error(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn entry_hash_changes_with_the_entry() {
        let parse = |s: &str| toml::from_str::<ServerConfig>(s).unwrap();
        let a = parse("command = [\"srv\"]");
        let b = parse("command = [\"srv\", \"--v2\"]");
        assert_ne!(a.entry_hash(), b.entry_hash());
        assert_eq!(a.entry_hash(), parse("command = [\"srv\"]\n").entry_hash());
        assert!(check("s", &a).is_ok());
        let url = parse("url = \"http://localhost:1\"");
        assert!(check("s", &url).unwrap_err().contains("not supported yet"));
        // The fence fields are part of the entry: changing them is MCP drift.
        let off = parse("command = [\"srv\"]\nsandbox = \"off\"");
        let net = parse("command = [\"srv\"]\nallow_network = true");
        let ro = parse("command = [\"srv\"]\nsandbox = \"readOnly\"");
        let explicit = parse("command = [\"srv\"]\nsandbox = \"workspaceWrite\"");
        for changed in [&off, &net, &ro] {
            assert_ne!(a.entry_hash(), changed.entry_hash(), "{changed:?}");
        }
        assert_eq!(a.entry_hash(), explicit.entry_hash());
        assert_eq!(off.fence(), FencePolicy::OFF);
        assert_eq!(a.fence(), FencePolicy::default());
        assert!(net.fence().allow_network && ro.fence().mode == SandboxMode::ReadOnly);
        assert!(toml::from_str::<ServerConfig>("command = [\"s\"]\nsandbox = \"none\"").is_err());
        let secret = parse("command = [\"s\"]\nenv = { GH_TOKEN = \"ghp_x\" }");
        assert!(check("s", &secret).unwrap_err().contains("credential"));
    }
}
