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
//!
//! [mcp.servers.tracker]
//! url = "https://mcp.example.com/mcp"         # Streamable HTTP endpoint
//! bearer_token_env = "TRACKER_TOKEN"          # optional: `Authorization: Bearer $TRACKER_TOKEN`
//! timeout_ms = 60000
//! ```
//!
//! A `url` server is not a process of ours: `cwd`, `env`, `passEnv`, `sandbox` and
//! `allow_network` are for `command` servers only. A bearer token goes over `https://`, or over
//! `http://` only to this machine (loopback): never in cleartext over a network. The entry (and
//! so the lock's hash of it) holds the variable's *name*; its value is read when kxen-agent
//! connects and never written anywhere.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::sandbox::{FencePolicy, SandboxMode};
use crate::secrets::is_valid_env_name;

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
    /// Streamable HTTP endpoint (`http://` or `https://`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The variable holding the bearer token of a `url` server (its name only).
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
    /// `[mcp.servers.NAME.oauth]`: a registered OAuth client of a `url` server
    /// ([`super::oauth`]). Left out of the entry's JSON when absent (old hashes stay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oauth: Option<super::oauth::OAuthConfig>,
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
pub fn check(name: &str, entry: &ServerConfig) -> Result<(), Error> {
    let at = format!("[mcp.servers.{name}]");
    if let Some(why) = server_name_error(name) {
        return Err(Error::invalid(format!("{at}: {why}")));
    }
    match (&entry.command, &entry.url) {
        (Some(_), Some(_)) => {
            return Err(Error::invalid(format!(
                "{at}: give either `command` (stdio) or `url`, not both"
            )));
        }
        (None, None) => {
            return Err(Error::invalid(format!(
                "{at}: give `command = [\"program\", \"arg\", …]` (a stdio server)"
            )));
        }
        (None, Some(url)) => return check_url_entry(&at, url, entry),
        (Some(argv), None) => {
            if argv.first().is_none_or(|a| a.is_empty()) {
                return Err(Error::invalid(format!("{at}: command must name a program")));
            }
        }
    }
    if entry.bearer_token_env.is_some() {
        return Err(Error::invalid(format!(
            "{at}: bearer_token_env is only for `url` servers"
        )));
    }
    if entry.oauth.is_some() {
        return Err(Error::invalid(format!(
            "{at}: oauth is only for `url` servers"
        )));
    }
    for key in entry.env.keys().chain(entry.pass_env.iter()) {
        if !is_valid_env_name(key) {
            return Err(Error::invalid(format!(
                "{at}: {key:?} is not an environment variable name"
            )));
        }
    }
    for (key, value) in &entry.env {
        if crate::secrets::rules::secret_value(key, std::ffi::OsStr::new(value)) {
            return Err(Error::invalid(format!(
                "{at}: env.{key} looks like a credential; a config holds no secret: list the \
                 name in passEnv (and the policy's passEnv) instead"
            )));
        }
    }
    if entry.timeout_ms == Some(0) {
        return Err(Error::invalid(format!(
            "{at}: timeout_ms must be at least 1"
        )));
    }
    Ok(())
}

/// Checks a `url` (Streamable HTTP) entry.
fn check_url_entry(at: &str, url: &str, entry: &ServerConfig) -> Result<(), Error> {
    let stdio_only = [
        ("cwd", entry.cwd.is_some()),
        ("env", !entry.env.is_empty()),
        ("passEnv", !entry.pass_env.is_empty()),
        ("sandbox", entry.sandbox != SandboxMode::default()),
        ("allow_network", entry.allow_network),
    ];
    if let Some((field, _)) = stdio_only.iter().find(|(_, given)| *given) {
        return Err(Error::invalid(format!(
            "{at}: `{field}` is only for `command` servers (a `url` server is not a process \
             kxen-agent starts)"
        )));
    }
    let parsed = match url::Url::parse(url) {
        Ok(u) => u,
        Err(e) => return Err(Error::invalid(format!("{at}: url is not a URL ({e})"))),
    };
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(Error::invalid(format!(
            "{at}: url must be an http:// or https:// address with a host"
        )));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Error::invalid(format!(
            "{at}: url must not hold credentials (user info); name the variable holding the \
             token in bearer_token_env instead"
        )));
    }
    if crate::secrets::rules::sensitive_value(url) {
        return Err(Error::invalid(format!(
            "{at}: url looks like it holds a credential; a config holds no secret: name the \
             variable holding the token in bearer_token_env instead"
        )));
    }
    if let Some(oauth) = &entry.oauth {
        if entry.bearer_token_env.is_some() {
            return Err(Error::invalid(format!(
                "{at}: give either bearer_token_env or an oauth table, not both"
            )));
        }
        if let Some(why) = oauth.error(at) {
            return Err(Error::invalid(why));
        }
        if parsed.scheme() == "http" && !crate::net::is_loopback(url) {
            return Err(Error::invalid(format!(
                "{at}: oauth with a plain http:// url to {}: tokens would cross the network in \
                 cleartext; use https://",
                parsed.host_str().unwrap_or("?")
            )));
        }
    }
    if let Some(var) = &entry.bearer_token_env {
        if !is_valid_env_name(var) {
            return Err(Error::invalid(format!(
                "{at}: bearer_token_env = {var:?} is not an environment variable name"
            )));
        }
        if parsed.scheme() == "http" && !crate::net::is_loopback(url) {
            return Err(Error::invalid(format!(
                "{at}: bearer_token_env with a plain http:// url to {}: the token would cross \
                 the network in cleartext; use https:// (plain http is only for a server on \
                 this machine: localhost, 127.0.0.1, [::1])",
                parsed.host_str().unwrap_or("?")
            )));
        }
    }
    if entry.timeout_ms == Some(0) {
        return Err(Error::invalid(format!(
            "{at}: timeout_ms must be at least 1"
        )));
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
    fn oauth_tables_are_checked() {
        let parse = |s: &str| toml::from_str::<ServerConfig>(s).unwrap();
        let ok = parse(
            "url = \"https://mcp.example.com/mcp\"\n[oauth]\nclient_id = \"ci\"\n\
             client_secret_env = \"CI_SECRET\"\ngrant = \"client_credentials\"\n",
        );
        assert!(check("t", &ok).is_ok());
        let plain = parse("url = \"https://mcp.example.com/mcp\"");
        assert_ne!(ok.entry_hash(), plain.entry_hash());
        assert!(!serde_json::to_string(&plain).unwrap().contains("oauth"));
        let cases = [
            (
                "command = [\"srv\"]\n[oauth]\nclient_id = \"ci\"\ngrant = \"client_credentials\"\n",
                "oauth is only for `url` servers",
            ),
            (
                "url = \"https://x.example/mcp\"\nbearer_token_env = \"T\"\n[oauth]\nclient_id = \"ci\"\ngrant = \"client_credentials\"\n",
                "not both",
            ),
            (
                "url = \"https://x.example/mcp\"\n[oauth]\nclient_id = \"ci\"\ngrant = \"implicit\"\n",
                "not supported",
            ),
            (
                "url = \"https://x.example/mcp\"\n[oauth]\ngrant = \"client_credentials\"\n",
                "needs the client_id",
            ),
            (
                "url = \"http://x.example/mcp\"\n[oauth]\nclient_id = \"ci\"\ngrant = \"client_credentials\"\n",
                "cleartext",
            ),
            (
                "url = \"https://x.example/mcp\"\n[oauth]\nclient_id = \"ci\"\nclient_secret_env = \"a b\"\ngrant = \"client_credentials\"\n",
                "not an environment variable name",
            ),
        ];
        for (entry, why) in cases {
            let err = check("t", &parse(entry)).unwrap_err();
            assert_eq!(err.exit_code(), 4, "{entry}: invalid input");
            assert!(err.message.contains(why), "{entry}: {err}");
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
        let url = parse("url = \"http://localhost:1/mcp\"");
        assert!(check("s", &url).is_ok());
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
        assert!(
            check("s", &secret)
                .unwrap_err()
                .message
                .contains("credential")
        );
    }

    #[test]
    fn url_entries() {
        let parse = |s: &str| toml::from_str::<ServerConfig>(s).unwrap();
        let err = |s: &str| check("s", &parse(s)).unwrap_err().message;
        for ok in [
            "url = \"https://mcp.example.com/mcp\"\nbearer_token_env = \"T\"",
            "url = \"http://127.0.0.1:8000/mcp\"\nbearer_token_env = \"T\"",
            "url = \"http://[::1]:8000/mcp\"\nbearer_token_env = \"T\"",
            "url = \"http://localhost/mcp\"\nbearer_token_env = \"T\"",
            "url = \"http://mcp.example.com/mcp\"",
        ] {
            assert!(check("s", &parse(ok)).is_ok(), "{ok}");
        }
        assert!(
            err("url = \"http://mcp.example.com/mcp\"\nbearer_token_env = \"T\"")
                .contains("cleartext")
        );
        assert!(err("url = \"https://u:p@example.com/mcp\"").contains("user info"));
        assert!(err("url = \"ftp://example.com/\"").contains("http://"));
        assert!(err("url = \"not a url\"").contains("not a URL"));
        assert!(err("url = \"https://x.com/\"\nbearer_token_env = \"A B\"").contains("name"));
        assert!(err("url = \"https://x.com/\"\nenv = { A = \"b\" }").contains("`env`"));
        assert!(err("url = \"https://x.com/\"\nsandbox = \"off\"").contains("`sandbox`"));
        assert!(err("command = [\"s\"]\nbearer_token_env = \"T\"").contains("only for `url`"));
        // The lock's entry hash covers the url and the token variable's name.
        let a = parse("url = \"https://x.com/mcp\"\nbearer_token_env = \"T\"");
        let b = parse("url = \"https://x.com/mcp\"\nbearer_token_env = \"U\"");
        let c = parse("url = \"https://y.com/mcp\"\nbearer_token_env = \"T\"");
        assert_ne!(a.entry_hash(), b.entry_hash());
        assert_ne!(a.entry_hash(), c.entry_hash());
    }
}
