//! The runtime policy (docs/spec.md §4): what the caller, outside the agent, permits.
//!
//! A policy file ([`PolicyFile`], closed JSON schema) and the CLI flags ([`PolicyFlags`]) merge
//! into one [`MergedPolicy`], whose hash a Session locks for life: every later execution
//! recomputes it from the same inputs and refuses on any difference ("policy drift"), so a resume
//! can never silently widen permissions or expose a new secret.
//!
//! The permitted catalog is what this runtime implements (the tool registry,
//! [`tools::REGISTRY`]) filtered by the policy: `allowedCapabilities` (absent = no extra
//! restriction), `deniedCapabilities` (always wins), and the gate a tool's registry entry names:
//! `allowShell` (`exec`, later `task`) or `allowMcp` (`mcp__*`).

mod file;
mod rules;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use crate::secrets::{is_provider_credential, is_valid_env_name};
pub use file::{MAX_POLICY_BYTES, PolicyFile, load_policy_file, parse_policy};
pub use rules::{ToolRule, ToolRules, pattern_error, rule_for};

use crate::error::{Error, ErrorKind, Result};

/// An amount of US dollars: finite and not negative (checked where it is read), so equality is
/// total and it can sit in `Eq` types such as the definition.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Usd(pub f64);

impl Eq for Usd {}

impl std::fmt::Display for Usd {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "${:.4}", self.0)
    }
}

impl Usd {
    /// The smaller of two limits (`None`: no limit).
    pub fn tighter(a: Option<Usd>, b: Option<Usd>) -> Option<Usd> {
        match (a, b) {
            (Some(x), Some(y)) => Some(if y.0 < x.0 { y } else { x }),
            (x, None) => x,
            (None, y) => y,
        }
    }
}

/// A cost limit is finite and above 0. The message is a fragment (`must be …`): the caller puts
/// the field it came from in front ([`Error::wrap`], or serde's field path).
pub fn check_usd(v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "must be an amount of US dollars above 0, found {v} (omit it for no limit)"
        )))
    }
}

pub use crate::sandbox::{FencePolicy, SandboxMode};
use crate::tools::{self, Gate};

/// The policy inputs of one command line: `--policy FILE`, `--allow-shell`, `--allow-mcp`,
/// `--allow-network`, `--pass-env NAME`…
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyFlags {
    pub policy_file: Option<PathBuf>,
    pub allow_shell: bool,
    pub allow_mcp: bool,
    pub allow_network: bool,
    pub pass_env: Vec<String>,
}

/// The effective policy: the file merged with the flags, normalized (capability lists and
/// `passEnv` sorted and de-duplicated) so that equal permissions always hash equal.
///
/// It holds environment variable *names* only, never their values. Every key up to
/// `maxPureRetries` is always present (absent values are `null`), so the hashed bytes have one
/// fixed key order. The fence keys that came later (`sandbox`, `allowNetwork`) are written only
/// when they differ from their defaults: a policy that does not change the fence hashes exactly
/// as it did before the fence existed, so Sessions locked earlier resume without drift (and run
/// fenced, the default).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MergedPolicy {
    /// `None`: no restriction beyond the runtime's catalog.
    pub allowed_capabilities: Option<Vec<String>>,
    pub denied_capabilities: Vec<String>,
    pub allow_shell: bool,
    pub allow_mcp: bool,
    /// Sensitive environment variables tool subprocesses may see.
    pub pass_env: Vec<String>,
    pub max_turns: Option<u32>,
    pub max_wall_clock_ms: Option<u64>,
    pub max_pure_retries: Option<u32>,
    /// `maxCostUsd`: lowers the definition's cost budget. Written only when given, so a policy
    /// without it hashes as before it existed; being hashed, a resume cannot drop it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<Usd>,
    /// The fence around `exec` ([`crate::sandbox`]); `workspaceWrite` when absent.
    #[serde(default, skip_serializing_if = "SandboxMode::is_default")]
    pub sandbox: SandboxMode,
    /// `exec` children may use the network (otherwise they run in an empty network namespace).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_network: bool,
    /// `mcpTools`: capability patterns → `allow` | `ask` | `deny` ([`rules`]). Written only when
    /// there are rules, so a policy without them hashes as before they existed.
    #[serde(default, skip_serializing_if = "ToolRules::is_empty")]
    pub mcp_tools: ToolRules,
    /// `mcpPassEnv`: server name → sensitive environment variables only that MCP server may
    /// get (names sorted and de-duplicated; servers without names left out). Unlike `passEnv`
    /// (every tool subprocess: `exec` and every server), these never reach `exec`. Written only
    /// when non-empty, so a policy without it hashes as before it existed.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_pass_env: std::collections::BTreeMap<String, Vec<String>>,
    /// `maxTaskDepth`: how deep `task` subagents may nest ([`MergedPolicy::task_depth_limit`]).
    /// Written only when given, so a policy without it hashes as before it existed; being part
    /// of the hash, it cannot change on a resume without a drift error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_task_depth: Option<u32>,
    /// `mcpElicitation`: how an MCP server's `elicitation/create` request is answered
    /// ([`McpElicitation`]). Written only when it differs from the default (`decline`), so a
    /// policy without it hashes as before it existed.
    #[serde(default, skip_serializing_if = "McpElicitation::is_default")]
    pub mcp_elicitation: McpElicitation,
}

/// How kxen-agent answers an MCP server that asks the user for input (`elicitation/create`)
/// during a call. Runs are unattended, so no person is asked: the policy decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum McpElicitation {
    /// The server gets `action: "decline"`.
    #[default]
    Decline,
    /// The server gets `action: "accept"` with every field's default when each required field
    /// has one; otherwise `decline`.
    AcceptDefaults,
}

impl McpElicitation {
    pub fn is_default(&self) -> bool {
        *self == McpElicitation::Decline
    }

    /// The name as written in a policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            McpElicitation::Decline => "decline",
            McpElicitation::AcceptDefaults => "acceptDefaults",
        }
    }
}

/// The default `maxTaskDepth`: children of a top-level Session, none below them.
pub const DEFAULT_TASK_DEPTH: u32 = 1;

/// The largest `maxTaskDepth` a policy may give.
pub const MAX_TASK_DEPTH_LIMIT: u32 = 8;

impl MergedPolicy {
    /// The depth at which a `task` child gets no `task` capability: 1 (the default) lets a
    /// top-level Session delegate and its children not.
    pub fn task_depth_limit(&self) -> u32 {
        self.max_task_depth.unwrap_or(DEFAULT_TASK_DEPTH)
    }

    /// The fence this policy puts around every `exec` child.
    pub fn fence(&self) -> FencePolicy {
        FencePolicy {
            mode: self.sandbox,
            allow_network: self.allow_network,
        }
    }

    /// The bytes that are hashed: compact JSON in the field order above.
    pub fn canonical_json(&self) -> String {
        serde_json::to_string(self).expect("a policy always serializes")
    }

    /// `sha256:` + hex SHA-256 of [`canonical_json`](Self::canonical_json).
    pub fn policy_hash(&self) -> String {
        crate::hash::sha256_prefixed(self.canonical_json().as_bytes())
    }

    /// Pretty JSON (one key per line), for drift diffs and human views.
    pub fn to_pretty(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a policy always serializes");
        text.push('\n');
        text
    }

    /// The sensitive variables MCP server `server` may get from the policy: `passEnv` (shared
    /// with `exec`) and its own `mcpPassEnv` entry. Its config entry's `passEnv` must list a
    /// name too.
    pub fn server_pass_env(&self, server: &str) -> Vec<String> {
        let mut names = self.pass_env.clone();
        names.extend(self.mcp_pass_env.get(server).into_iter().flatten().cloned());
        sorted(names)
    }

    /// Every sensitive name the policy passes to anything: `passEnv` and every `mcpPassEnv`
    /// list (for the checks against the config's provider keys).
    pub fn all_pass_env(&self) -> Vec<String> {
        let mut names = self.pass_env.clone();
        names.extend(self.mcp_pass_env.values().flatten().cloned());
        sorted(names)
    }

    /// The `mcpTools` rule of `capability` and the pattern that decided it (`None`: no rule).
    pub fn rule(&self, capability: &str) -> (ToolRule, Option<&str>) {
        rule_for(&self.mcp_tools, capability)
    }

    /// Why `capability` is not in the permitted catalog, or `None` if it is.
    ///
    /// A definition may name capabilities no tool implements (`lsp`, `task`, `mcp__…`); they are
    /// never permitted until a registry entry implements them.
    pub fn refusal(&self, capability: &str) -> Option<String> {
        let Some(tool) = tools::REGISTRY.find(capability) else {
            let implemented: Vec<&str> = tools::REGISTRY
                .entries()
                .iter()
                .map(|e| e.name().as_str())
                .collect();
            return Some(format!(
                "this runtime has no tool for it (it implements {})",
                implemented.join(", ")
            ));
        };
        // `mcp__…*` entries are patterns (a server's family, or every MCP tool); up to `mcp`
        // (a floor above) so the policy and the tool registry match them by one rule.
        let listed = |list: &[String]| {
            list.iter()
                .any(|p| crate::mcp::pattern_covers(p, capability))
        };
        if listed(&self.denied_capabilities) {
            return Some("the policy's deniedCapabilities lists it".into());
        }
        if let (ToolRule::Deny, Some(pattern)) = rule_for(&self.mcp_tools, capability) {
            return Some(format!(
                "the policy's mcpTools rule {pattern:?} is \"deny\""
            ));
        }
        if let Some(allowed) = &self.allowed_capabilities
            && !listed(allowed)
        {
            return Some("the policy's allowedCapabilities does not list it".into());
        }
        match tool.gate() {
            Some(Gate::Shell) if !self.allow_shell => {
                Some("shell access is off: pass --allow-shell or set \"allowShell\": true".into())
            }
            Some(Gate::Mcp) if !self.allow_mcp => {
                Some("MCP is off: pass --allow-mcp or set \"allowMcp\": true".into())
            }
            _ => None,
        }
    }
}

/// Reads the policy file (if any) and merges the flags into it.
///
/// Errors: a missing file is exit 3; an invalid file or an invalid `--pass-env` name (not an
/// environment variable name, or a model-provider credential) is exit 4.
pub fn merge(flags: &PolicyFlags) -> Result<MergedPolicy> {
    let file = match &flags.policy_file {
        Some(path) => load_policy_file(path)?,
        None => PolicyFile::default(),
    };
    merge_with(file, flags)
}

/// [`merge`] for an already parsed policy file (`flags.policy_file` is not read).
pub fn merge_with(file: PolicyFile, flags: &PolicyFlags) -> Result<MergedPolicy> {
    for name in &flags.pass_env {
        crate::secrets::check_pass_env(name).map_err(|why| {
            Error::wrap(
                ErrorKind::InvalidInput,
                format!("--pass-env {name:?}"),
                why.into(),
            )
        })?;
    }
    let sandbox = file::sandbox_mode(file.sandbox.as_deref())?;
    let mut pass_env = file.pass_env;
    pass_env.extend(flags.pass_env.iter().cloned());
    Ok(MergedPolicy {
        allowed_capabilities: file.allowed_capabilities.map(sorted),
        denied_capabilities: sorted(file.denied_capabilities),
        allow_shell: file.allow_shell || flags.allow_shell,
        allow_mcp: file.allow_mcp || flags.allow_mcp,
        pass_env: sorted(pass_env),
        max_turns: file.max_turns,
        max_wall_clock_ms: file.max_wall_clock_ms,
        max_pure_retries: file.max_pure_retries,
        max_cost_usd: file.max_cost_usd,
        sandbox,
        allow_network: file.allow_network || flags.allow_network,
        mcp_tools: file.mcp_tools,
        mcp_pass_env: file
            .mcp_pass_env
            .into_iter()
            .map(|(server, names)| (server, sorted(names)))
            .filter(|(_, names)| !names.is_empty())
            .collect(),
        max_task_depth: file.max_task_depth,
        mcp_elicitation: file.mcp_elicitation.unwrap_or_default(),
    })
}

fn sorted(mut items: Vec<String>) -> Vec<String> {
    items.sort();
    items.dedup();
    items
}

/// The capabilities a Session may be granted under `policy`, sorted: every registry tool the
/// policy permits. A pattern entry (a family such as `mcp__<server>__*`) has no fixed names to
/// list; its members are permitted one by one by [`MergedPolicy::refusal`].
pub fn permitted_catalog(policy: &MergedPolicy) -> Vec<String> {
    let mut permitted: Vec<String> = tools::REGISTRY
        .entries()
        .iter()
        .filter_map(|e| match e.name() {
            tools::ToolName::Exact(name) => Some(name),
            tools::ToolName::Pattern(_) => None,
        })
        .filter(|c| policy.refusal(c).is_none())
        .map(|c| c.to_string())
        .collect();
    permitted.sort();
    permitted
}

/// A unified diff of two policies, pretty-printed, for "policy drift" messages.
pub fn drift_diff(locked: &MergedPolicy, now: &MergedPolicy) -> String {
    let (old, new) = (locked.to_pretty(), now.to_pretty());
    similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(2)
        .header("locked policy", "current policy")
        .to_string()
}

#[cfg(test)]
mod tests;
