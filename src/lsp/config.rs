//! `[lsp.NAME]` tables of the runtime config (the model config file): which language servers the
//! `lsp` tool may start. Like MCP servers they are the runtime's business: a definition only asks
//! for the `lsp` capability, and it is granted only when at least one server is configured.
//!
//! ```toml
//! [lsp.python]
//! command = ["/usr/bin/python3", "-m", "pylsp"]   # argv, no shell
//! extensions = [".py", ".pyi"]                    # or language ids: ["python"]
//! initialization_options = { pylsp = { plugins = { pycodestyle = { enabled = false } } } }
//! diagnostics_after_edit = true                   # append the file's diagnostics to edit/write
//! timeout_ms = 60000                              # per request (and start-up); default 60000
//! diagnostics_timeout_ms = 10000                  # wait for published diagnostics; default 10000
//! sandbox = "readOnly"                            # the fence: readOnly (default) | workspaceWrite | off
//! allow_network = false                           # default false
//! env = { PYTHONPATH = "/opt/lib" }               # literal, non-secret values
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::sandbox::{FencePolicy, SandboxMode};
use crate::secrets::is_valid_env_name;

/// Per-request timeout when `timeout_ms` is not given (start-up and indexing can be slow).
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;
/// How long `diagnostics` waits for the server's publish when `diagnostics_timeout_ms` is not
/// given.
pub const DEFAULT_DIAGNOSTICS_TIMEOUT_MS: u64 = 10_000;

/// Language ids an entry may give instead of extensions, with the extensions they stand for.
/// The first id of a file's extension is also the `languageId` sent in `didOpen`.
pub const LANGUAGES: &[(&str, &[&str])] = &[
    ("python", &[".py", ".pyi"]),
    ("rust", &[".rs"]),
    ("go", &[".go"]),
    ("typescript", &[".ts", ".mts", ".cts"]),
    ("typescriptreact", &[".tsx"]),
    ("javascript", &[".js", ".mjs", ".cjs"]),
    ("javascriptreact", &[".jsx"]),
    ("c", &[".c", ".h"]),
    ("cpp", &[".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx"]),
    ("java", &[".java"]),
    ("ruby", &[".rb"]),
    ("lua", &[".lua"]),
    ("shellscript", &[".sh", ".bash"]),
    ("toml", &[".toml"]),
    ("json", &[".json"]),
    ("yaml", &[".yaml", ".yml"]),
];

/// One `[lsp.NAME]` table. Its compact JSON ([`ServerConfig::entry_hash`]) is locked with the
/// `lsp` capability: a changed, added or removed entry is drift on resume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// argv of a stdio language server.
    pub command: Vec<String>,
    /// File extensions (`.py`) or language ids (`python`, see [`LANGUAGES`]) it serves.
    pub extensions: Vec<String>,
    /// Sent as `initializationOptions` (a TOML table becomes a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initialization_options: Option<serde_json::Map<String, serde_json::Value>>,
    /// Append the file's new diagnostics to the result of an `edit` or `write` of a file it
    /// serves.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub diagnostics_after_edit: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics_timeout_ms: Option<u64>,
    /// The fence the server runs in. Default `readOnly`: `lsp` is a read-class tool, so its
    /// server writes nothing but its own TMPDIR (a server that must write, say a build
    /// directory, sets `workspaceWrite`).
    #[serde(default = "read_only", skip_serializing_if = "is_read_only")]
    pub sandbox: SandboxMode,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_network: bool,
    /// Literal environment values (never secrets: the config is not the policy).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

fn read_only() -> SandboxMode {
    SandboxMode::ReadOnly
}

fn is_read_only(mode: &SandboxMode) -> bool {
    *mode == SandboxMode::ReadOnly
}

impl ServerConfig {
    /// `sha256:` of the entry's compact JSON (fields in declaration order, maps sorted).
    pub fn entry_hash(&self) -> String {
        let json = serde_json::to_value(self).expect("a server entry always serializes");
        format!("sha256:{}", crate::canonical::hash_hex(&json))
    }

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
        self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)
    }

    pub fn diagnostics_timeout_ms(&self) -> u64 {
        self.diagnostics_timeout_ms
            .unwrap_or(DEFAULT_DIAGNOSTICS_TIMEOUT_MS)
    }

    /// Every extension it serves (language ids expanded), lowercase, with the dot.
    pub fn all_extensions(&self) -> Vec<String> {
        let mut out = Vec::new();
        for e in &self.extensions {
            if e.starts_with('.') {
                out.push(e.to_ascii_lowercase());
            } else if let Some((_, exts)) = LANGUAGES.iter().find(|(id, _)| id == e) {
                out.extend(exts.iter().map(|x| x.to_string()));
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// Whether it serves `path` (by its extension).
    pub fn serves(&self, path: &std::path::Path) -> bool {
        extension_of(path).is_some_and(|ext| self.all_extensions().contains(&ext))
    }
}

/// `.py` of `a/b.PY`.
pub fn extension_of(path: &std::path::Path) -> Option<String> {
    path.extension()
        .and_then(|e| e.to_str())
        .map(|e| format!(".{}", e.to_ascii_lowercase()))
}

/// The `languageId` of `path` for `didOpen`: the language its extension belongs to, else the
/// entry's single language id, else the extension without its dot.
pub fn language_id(entry: &ServerConfig, path: &std::path::Path) -> String {
    let ext = extension_of(path).unwrap_or_default();
    if let Some((id, _)) = LANGUAGES
        .iter()
        .find(|(_, exts)| exts.contains(&ext.as_str()))
    {
        return id.to_string();
    }
    let ids: Vec<&String> = entry
        .extensions
        .iter()
        .filter(|e| !e.starts_with('.'))
        .collect();
    match ids.as_slice() {
        [one] => one.to_string(),
        _ => ext.trim_start_matches('.').to_string(),
    }
}

/// Why `name` is not a valid server name, or `None`: `[a-z0-9_-]{1,32}`.
pub fn server_name_error(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    (!ok).then(|| {
        format!("language server name {name:?} must be 1 to 32 characters of a-z, 0-9, `_` and `-`")
    })
}

/// Checks every entry (and that no extension is served twice); the message is prefixed by the
/// caller with the config file.
pub fn check_all(servers: &BTreeMap<String, ServerConfig>) -> Result<()> {
    let mut owner: BTreeMap<String, &str> = BTreeMap::new();
    for (name, entry) in servers {
        check(name, entry)?;
        for ext in entry.all_extensions() {
            if let Some(other) = owner.insert(ext.clone(), name) {
                return Err(Error::invalid(format!(
                    "[lsp.{other}] and [lsp.{name}] both serve `{ext}` files; give each \
                     extension to one server"
                )));
            }
        }
    }
    Ok(())
}

/// Checks one entry.
pub fn check(name: &str, entry: &ServerConfig) -> Result<()> {
    let at = format!("[lsp.{name}]");
    if let Some(why) = server_name_error(name) {
        return Err(Error::invalid(format!("{at}: {why}")));
    }
    if entry.command.first().is_none_or(|a| a.is_empty()) {
        return Err(Error::invalid(format!(
            "{at}: command must name a program: command = [\"program\", \"arg\", …]"
        )));
    }
    if entry.extensions.is_empty() {
        return Err(Error::invalid(format!(
            "{at}: extensions is empty; list the files it serves, e.g. extensions = [\".py\"]"
        )));
    }
    for e in &entry.extensions {
        if let Some(rest) = e.strip_prefix('.') {
            let ok = !rest.is_empty()
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '+');
            if !ok {
                return Err(Error::invalid(format!(
                    "{at}: extension {e:?} must be a dot and letters or digits, e.g. \".py\""
                )));
            }
        } else if !LANGUAGES.iter().any(|(id, _)| id == e) {
            let known: Vec<&str> = LANGUAGES.iter().map(|(id, _)| *id).collect();
            return Err(Error::invalid(format!(
                "{at}: {e:?} is neither an extension (\".py\") nor a known language id ({})",
                known.join(", ")
            )));
        }
    }
    for key in entry.env.keys() {
        if !is_valid_env_name(key) {
            return Err(Error::invalid(format!(
                "{at}: {key:?} is not an environment variable name"
            )));
        }
    }
    for (key, value) in &entry.env {
        if crate::secrets::rules::secret_value(key, std::ffi::OsStr::new(value)) {
            return Err(Error::invalid(format!(
                "{at}: env.{key} looks like a credential; a language server gets none (the \
                 config holds no secret)"
            )));
        }
    }
    if entry.timeout_ms == Some(0) || entry.diagnostics_timeout_ms == Some(0) {
        return Err(Error::invalid(format!(
            "{at}: timeout_ms and diagnostics_timeout_ms must be at least 1"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> ServerConfig {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn entries_are_checked_and_hashed() {
        let a = parse("command = [\"pylsp\"]\nextensions = [\".py\"]");
        assert!(check("py", &a).is_ok());
        assert_eq!(a.fence().mode, SandboxMode::ReadOnly);
        assert!(!a.fence().allow_network);
        let b = parse("command = [\"pylsp\", \"-v\"]\nextensions = [\".py\"]");
        assert_ne!(a.entry_hash(), b.entry_hash());
        let explicit =
            parse("command = [\"pylsp\"]\nextensions = [\".py\"]\nsandbox = \"readOnly\"");
        assert_eq!(a.entry_hash(), explicit.entry_hash());
        let opts = parse(
            "command = [\"pylsp\"]\nextensions = [\".py\"]\n[initialization_options]\nx = { y = 1 }",
        );
        assert_eq!(
            serde_json::Value::Object(opts.initialization_options.clone().unwrap()),
            serde_json::json!({"x": {"y": 1}})
        );
        assert_ne!(a.entry_hash(), opts.entry_hash());
        let lang = parse("command = [\"pylsp\"]\nextensions = [\"python\"]");
        assert_eq!(lang.all_extensions(), [".py", ".pyi"]);
        assert!(lang.serves(std::path::Path::new("a/b.PY")));
        assert_eq!(language_id(&lang, std::path::Path::new("x.py")), "python");
        for bad in [
            "command = []\nextensions = [\".py\"]",
            "command = [\"\"]\nextensions = [\".py\"]",
            "command = [\"x\"]\nextensions = []",
            "command = [\"x\"]\nextensions = [\"py\"]",
            "command = [\"x\"]\nextensions = [\".p y\"]",
            "command = [\"x\"]\nextensions = [\".py\"]\ntimeout_ms = 0",
            "command = [\"x\"]\nextensions = [\".py\"]\nenv = { A = \"ghp_abcdefghijklmnopqrstuvwxyz0123\" }",
        ] {
            assert!(check("s", &parse(bad)).is_err(), "{bad}");
        }
        assert!(check("Bad", &a).is_err());
        assert!(toml::from_str::<ServerConfig>("command = [\"x\"]").is_err());
        assert!(
            toml::from_str::<ServerConfig>("command = [\"x\"]\nextensions = [\".py\"]\nfoo = 1")
                .is_err()
        );
        let both: BTreeMap<String, ServerConfig> =
            [("a".to_string(), a.clone()), ("b".to_string(), lang)].into();
        assert!(
            check_all(&both)
                .unwrap_err()
                .message
                .contains("both serve `.py`")
        );
    }
}
