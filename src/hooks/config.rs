//! The `[hooks]` section of the operator's model config: which programs run around tool calls
//! and runs. Owned here; `provider::config` only parses it into this type.
//!
//! ```toml
//! [[hooks.pre_tool_use]]
//! matcher = "exec"                 # the mcpTools pattern syntax, or "*" for every tool
//! command = ["/path/to/check.sh"]  # argv, no shell
//! timeout_ms = 10000               # default 60000
//! sandbox = "readOnly"             # the hook's fence: readOnly (default) | workspaceWrite | off
//! [[hooks.post_tool_use]]
//! matcher = "*"
//! command = ["/path/to/note.sh"]
//! [[hooks.run_start]]
//! command = ["/path/to/notify.sh"]
//! [[hooks.run_end]]
//! command = ["/path/to/notify.sh"]
//! ```

use serde::{Deserialize, Serialize};

use crate::sandbox::{FencePolicy, SandboxMode};

/// How long a hook may take when its entry sets no `timeout_ms` (Claude Code's default).
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;

/// `[hooks]`: the configured hooks per event, in the order they run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksConfig {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_tool_use: Vec<HookEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_tool_use: Vec<HookEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_start: Vec<HookEntry>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_end: Vec<HookEntry>,
}

/// One `[[hooks.EVENT]]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookEntry {
    /// Which tools (`pre_tool_use`, `post_tool_use`): an exact name, an MCP family
    /// (`mcp__github__*`) or `*`. Run hooks ignore it.
    #[serde(default = "every_tool")]
    pub matcher: String,
    /// The program and its arguments (no shell).
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The hook's fence; `readOnly` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxMode>,
    /// Whether the hook may use the network (a chat notifier needs it); default false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_network: bool,
}

fn every_tool() -> String {
    "*".into()
}

impl HookEntry {
    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms.unwrap_or(DEFAULT_TIMEOUT_MS)
    }

    /// The fence the hook runs in.
    pub fn fence(&self) -> FencePolicy {
        FencePolicy {
            mode: self.sandbox.unwrap_or(SandboxMode::ReadOnly),
            allow_network: self.allow_network,
        }
    }

    /// Whether the hook is about tool `name`.
    pub fn matches(&self, name: &str) -> bool {
        self.matcher == "*" || crate::mcp::pattern_covers(&self.matcher, name)
    }

    /// How `run show` and error messages name the hook.
    pub fn describe(&self, event: &str) -> String {
        format!(
            "{event} hook `{}` ({})",
            self.matcher,
            self.command.first().map(String::as_str).unwrap_or("")
        )
    }
}

impl HooksConfig {
    /// The same hooks with every value that equals its default left out.
    fn normalized(&self) -> HooksConfig {
        let plain = |entries: &[HookEntry]| -> Vec<HookEntry> {
            entries
                .iter()
                .map(|e| HookEntry {
                    timeout_ms: e.timeout_ms.filter(|ms| *ms != DEFAULT_TIMEOUT_MS),
                    sandbox: e.sandbox.filter(|m| *m != SandboxMode::ReadOnly),
                    ..e.clone()
                })
                .collect()
        };
        HooksConfig {
            pre_tool_use: plain(&self.pre_tool_use),
            post_tool_use: plain(&self.post_tool_use),
            run_start: plain(&self.run_start),
            run_end: plain(&self.run_end),
        }
    }

    pub fn is_empty(&self) -> bool {
        self == &HooksConfig::default()
    }

    /// Why the section cannot be used (an empty command), or `None`.
    pub fn error(&self) -> Option<String> {
        let events = [
            ("pre_tool_use", &self.pre_tool_use),
            ("post_tool_use", &self.post_tool_use),
            ("run_start", &self.run_start),
            ("run_end", &self.run_end),
        ];
        for (event, entries) in events {
            for (i, entry) in entries.iter().enumerate() {
                let Some(program) = entry.command.first().filter(|p| !p.is_empty()) else {
                    return Some(format!(
                        "[[hooks.{event}]] entry {}: `command` is empty",
                        i + 1
                    ));
                };
                // A relative program is looked up in the workspace (the hook's working
                // directory) or through PATH: the agent could write it.
                if !std::path::Path::new(program).is_absolute() {
                    return Some(format!(
                        "[[hooks.{event}]] entry {}: the program {program:?} must be an absolute \
                         path (a relative one resolves inside the workspace or through PATH, \
                         where the agent could place its own)",
                        i + 1
                    ));
                }
                let tool_event = matches!(event, "pre_tool_use" | "post_tool_use");
                if tool_event
                    && entry.matcher != "*"
                    && let Some(why) = crate::policy::pattern_error(&entry.matcher)
                {
                    return Some(format!(
                        "[[hooks.{event}]] entry {}: matcher {why} (a matcher is a tool name, an \
                         MCP family `mcp__<server>__*` or \"*\"; no regular expressions)",
                        i + 1
                    ));
                }
                if entry.timeout_ms == Some(0) {
                    return Some(format!(
                        "[[hooks.{event}]] entry {}: `timeout_ms` must be positive",
                        i + 1
                    ));
                }
            }
        }
        None
    }

    /// The hash the Session's lock records: a resume with other hooks is drift. A value spelled
    /// out at its default (`timeout_ms = 60000`, `sandbox = "readOnly"`) hashes as if omitted,
    /// so writing the default down is not drift; the hash of a config that omits them is the
    /// one earlier versions recorded.
    pub fn hash(&self) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let value = serde_json::to_value(self.normalized()).ok()?;
        Some(format!("sha256:{}", crate::canonical::hash_hex(&value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> HooksConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn entries_parse_with_defaults_and_match_like_mcp_tools_rules() {
        let h = parse(
            "[[pre_tool_use]]\nmatcher = \"mcp__gh__*\"\ncommand = [\"/bin/true\"]\n\
             [[post_tool_use]]\ncommand = [\"/bin/true\"]\ntimeout_ms = 5\n",
        );
        let pre = &h.pre_tool_use[0];
        assert!(pre.matches("mcp__gh__search") && !pre.matches("exec"));
        assert_eq!(pre.timeout_ms(), DEFAULT_TIMEOUT_MS);
        assert_eq!(pre.fence().mode, SandboxMode::ReadOnly);
        assert!(!pre.fence().allow_network);
        let post = &h.post_tool_use[0];
        assert!(post.matches("exec") && post.matches("read"));
        assert_eq!(post.timeout_ms(), 5);
        assert!(h.error().is_none());
        assert!(h.hash().unwrap().starts_with("sha256:"));
        assert_eq!(HooksConfig::default().hash(), None);
    }

    #[test]
    fn an_empty_command_or_zero_timeout_is_an_error_and_unknown_keys_are_refused() {
        assert!(
            parse("[[run_end]]\ncommand = []\n")
                .error()
                .unwrap()
                .contains("run_end")
        );
        assert!(
            parse("[[run_end]]\ncommand = [\"/bin/x\"]\ntimeout_ms = 0\n")
                .error()
                .unwrap()
                .contains("timeout_ms")
        );
        assert!(
            toml::from_str::<HooksConfig>("[[pre_tool_use]]\ncommand=[\"x\"]\nshell=true\n")
                .is_err()
        );
        assert!(toml::from_str::<HooksConfig>("[[on_start]]\ncommand=[\"x\"]\n").is_err());
    }

    #[test]
    fn a_default_spelled_out_hashes_as_if_omitted() {
        let omitted = parse("[[pre_tool_use]]\ncommand = [\"/bin/true\"]\n");
        let spelled = parse(
            "[[pre_tool_use]]\ncommand = [\"/bin/true\"]\ntimeout_ms = 60000\nsandbox = \"readOnly\"\n",
        );
        let other = parse("[[pre_tool_use]]\ncommand = [\"/bin/true\"]\ntimeout_ms = 5\n");
        assert_eq!(omitted.hash(), spelled.hash());
        assert_ne!(omitted.hash(), other.hash());
        // The omitted form hashes as before the normalization (Sessions locked then resume).
        let before = serde_json::to_value(&omitted).unwrap();
        assert_eq!(
            omitted.hash().unwrap(),
            format!("sha256:{}", crate::canonical::hash_hex(&before))
        );
    }
}
