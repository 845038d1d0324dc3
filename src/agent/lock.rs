//! The `DcpAgentLock`: what a Session fixes for life (kxen-agent.md §1, §4).
//!
//! Built once at Session creation from a validated definition and the merged policy; never
//! rebuilt on resume. [`DcpAgentLock::verify`] re-derives everything derivable (a damaged lock is
//! corrupt state, exit 10), and [`DcpAgentLock::check_drift`] compares the lock with the policy of
//! the current command line (any difference is "policy drift", exit 6).

use serde::{Deserialize, Serialize};

use super::AgentDefinition;
use crate::error::{Error, Result};
use crate::policy::{self, MergedPolicy};
use crate::tools;

/// The immutable capability/policy lock of a Session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DcpAgentLock {
    /// The definition with its budgets tightened by the policy.
    pub definition: AgentDefinition,
    /// `definitionHash` of [`definition`](Self::definition) (the tightened one).
    pub definition_hash: String,
    /// The effective capabilities: every required one plus the permitted optional ones, sorted,
    /// unique. The only tools the model is ever offered.
    pub capabilities: Vec<String>,
    /// The merged policy the lock was built under (environment variable names, never values).
    pub policy: MergedPolicy,
    /// `policyHash` of [`policy`](Self::policy).
    pub policy_hash: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// Every MCP tool granted (from the `mcp__…` capabilities), with its input schema: the only
    /// MCP tools the model is offered. Absent in locks without MCP.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_tools: Vec<crate::mcp::LockedTool>,
    /// `entryHash` of each `[mcp.servers.NAME]` a granted tool comes from.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_servers: std::collections::BTreeMap<String, String>,
    /// `entryHash` of each `[lsp.NAME]` of the runtime config, when `lsp` is granted: the
    /// language servers the `lsp` tool may start (a changed set is drift on resume).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub lsp_servers: std::collections::BTreeMap<String, String>,
    /// The hash of the runtime config's `[[hooks.*]]` tables ([`crate::hooks`]): a resume with
    /// other hooks is drift. Absent when no hook is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks_hash: Option<String>,
}

impl DcpAgentLock {
    /// Intersects the definition's capabilities with the permitted catalog, tightens the budgets
    /// and fixes both hashes.
    ///
    /// A required capability outside the permitted catalog is `Error::policy` (exit 6) naming
    /// every such capability and why; optional ones are dropped silently.
    pub fn build(definition: &AgentDefinition, merged: &MergedPolicy) -> Result<DcpAgentLock> {
        let caps = &definition.spec.capabilities;
        let refused: Vec<(String, String)> = caps
            .required
            .iter()
            .filter_map(|c| merged.refusal(c).map(|why| (c.clone(), why)))
            .collect();
        if !refused.is_empty() {
            let list: Vec<String> = refused
                .iter()
                .map(|(c, why)| format!("`{c}` ({why})"))
                .collect();
            let mut err = Error::policy(format!(
                "agent `{}` requires {} not permitted by the runtime policy: {}",
                definition.metadata.name,
                if refused.len() == 1 {
                    "a capability"
                } else {
                    "capabilities"
                },
                list.join(", ")
            ));
            // Hints only where the flag is what refused it: not for a capability without a
            // tool, nor one the policy file denies.
            if refused.iter().any(|(_, why)| why.contains("--allow-shell")) {
                err = err.with_hint("pass --allow-shell (or set \"allowShell\": true in the policy) if the agent may run commands");
            }
            if refused.iter().any(|(_, why)| why.contains("--allow-mcp")) {
                err = err.with_hint("pass --allow-mcp if the agent may use MCP tools");
            }
            return Err(err.with_hint(
                "to run the agent without it, move it to `optional` in the definition",
            ));
        }
        let mut capabilities: Vec<String> = caps
            .required
            .iter()
            .chain(caps.optional.iter().filter(|c| merged.refusal(c).is_none()))
            .cloned()
            .collect();
        capabilities.sort();
        capabilities.dedup();
        let tightened = tighten(definition, merged);
        Ok(DcpAgentLock {
            definition_hash: tightened.definition_hash(),
            definition: tightened,
            capabilities,
            policy: merged.clone(),
            policy_hash: merged.policy_hash(),
            created_at: crate::clock::now_rfc3339(),
            mcp_tools: Vec::new(),
            mcp_servers: std::collections::BTreeMap::new(),
            lsp_servers: std::collections::BTreeMap::new(),
            hooks_hash: None,
        })
    }

    /// Re-derives what the lock claims: both hashes, the tightened budgets and the capability set.
    /// Any mismatch means the stored lock was damaged or edited: `Error::corrupt` (exit 10).
    pub fn verify(&self) -> Result<()> {
        let corrupt = |what: String| {
            Error::corrupt(format!("the session's agent lock is damaged: {what}"))
                .with_hint("the lock cannot be repaired; start a new session (or fork from a bundle with an intact lock)")
        };
        let actual = self.definition.definition_hash();
        if actual != self.definition_hash {
            return Err(corrupt(format!(
                "definitionHash is {} but the definition hashes to {actual}",
                self.definition_hash
            )));
        }
        let actual = self.policy.policy_hash();
        if actual != self.policy_hash {
            return Err(corrupt(format!(
                "policyHash is {} but the policy hashes to {actual}",
                self.policy_hash
            )));
        }
        if tighten(&self.definition, &self.policy) != self.definition {
            return Err(corrupt(
                "the definition's budgets exceed the policy's".into(),
            ));
        }
        let mut sorted = self.capabilities.clone();
        sorted.sort();
        sorted.dedup();
        if sorted != self.capabilities {
            return Err(corrupt("capabilities are not sorted and unique".into()));
        }
        let caps = &self.definition.spec.capabilities;
        for c in &self.capabilities {
            if !tools::REGISTRY.implements(c) {
                return Err(corrupt(format!(
                    "capability `{c}` is not implemented by this runtime"
                )));
            }
            if !caps.required.contains(c) && !caps.optional.contains(c) {
                return Err(corrupt(format!(
                    "capability `{c}` is not in the definition"
                )));
            }
            if let Some(why) = self.policy.refusal(c) {
                return Err(corrupt(format!(
                    "capability `{c}` is not permitted by the locked policy: {why}"
                )));
            }
        }
        for c in caps.required.iter().chain(
            caps.optional
                .iter()
                .filter(|c| self.policy.refusal(c).is_none()),
        ) {
            // An optional MCP capability is dropped when its server lacks it (see mcp::grant),
            // an optional `lsp` when no language server is configured (lsp::grant).
            if !self.capabilities.contains(c)
                && !c.starts_with(crate::mcp::PREFIX)
                && c != crate::lsp::CAPABILITY
            {
                return Err(corrupt(format!(
                    "capability `{c}` is missing from the effective set"
                )));
            }
        }
        if !self.lsp_servers.is_empty()
            && !self
                .capabilities
                .iter()
                .any(|c| c == crate::lsp::CAPABILITY)
        {
            return Err(corrupt(
                "language servers are locked but capability `lsp` is not granted".into(),
            ));
        }
        for t in &self.mcp_tools {
            if t.name != crate::mcp::capability(&t.server, &t.tool) {
                return Err(corrupt(format!(
                    "MCP tool `{}` does not name its server and tool",
                    t.name
                )));
            }
            if crate::mcp::schema_hash(&t.input_schema) != t.schema_hash {
                return Err(corrupt(format!(
                    "MCP tool `{}`: its schemaHash does not match its schema",
                    t.name
                )));
            }
            if !self.mcp_servers.contains_key(&t.server) {
                return Err(corrupt(format!(
                    "MCP tool `{}`: server `{}` is not locked",
                    t.name, t.server
                )));
            }
            if !self
                .capabilities
                .iter()
                .any(|c| crate::mcp::pattern_covers(c, &t.name))
            {
                return Err(corrupt(format!(
                    "MCP tool `{}` is not covered by a locked capability",
                    t.name
                )));
            }
        }
        Ok(())
    }

    /// The names of the tools the model is offered: the non-MCP capabilities and the granted
    /// MCP tools, sorted.
    pub fn tool_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .capabilities
            .iter()
            .filter(|c| !c.starts_with(crate::mcp::PREFIX))
            .cloned()
            .chain(self.mcp_tools.iter().map(|t| t.name.clone()))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Refuses (exit 6) unless `now`, the policy of the current command line, is the locked one,
    /// and every locked capability is still permitted (a newer runtime may implement fewer).
    pub fn check_drift(&self, now: &MergedPolicy) -> Result<()> {
        if now.policy_hash() != self.policy_hash {
            return Err(Error::policy(format!(
                "policy drift: the policy of this command differs from the one locked when the session was created\n{}",
                policy::drift_diff(&self.policy, now).trim_end()
            ))
            .with_hint("repeat the session's original --policy, --allow-shell, --allow-mcp, --allow-network and --pass-env options; a session's permissions never change")
            .with_hint("to run under the new policy, start a new session"));
        }
        for c in &self.capabilities {
            if let Some(why) = now.refusal(c) {
                return Err(Error::policy(format!(
                    "the session's locked capability `{c}` is no longer permitted: {why}"
                )));
            }
        }
        Ok(())
    }
}

/// The definition with its budgets lowered to the policy's where the policy is stricter.
pub fn tighten(definition: &AgentDefinition, policy: &MergedPolicy) -> AgentDefinition {
    let mut out = definition.clone();
    let exec = &mut out.spec.execution;
    if let Some(max) = policy.max_turns {
        exec.max_turns = exec.max_turns.min(max);
    }
    if let Some(max) = policy.max_wall_clock_ms {
        exec.max_wall_clock_ms = Some(exec.max_wall_clock_ms.map_or(max, |ms| ms.min(max)));
    }
    if let Some(max) = policy.max_pure_retries {
        exec.max_pure_retries = exec.max_pure_retries.min(max);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::policy::{PolicyFlags, merge_with, parse_policy};

    fn definition(extra: &str) -> AgentDefinition {
        let yaml = format!(
            "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {{name: fixer}}\nspec:\n  objective: Fix it\n  instructions: [Look, Fix]\n{extra}"
        );
        crate::agent::parse_definition(yaml.as_bytes(), "a.yaml").unwrap()
    }

    fn policy(json: &str, allow_shell: bool) -> MergedPolicy {
        let file = parse_policy(json.as_bytes(), "policy.json").unwrap();
        merge_with(
            file,
            &PolicyFlags {
                allow_shell,
                ..Default::default()
            },
        )
        .unwrap()
    }

    const CAPS: &str = "  capabilities:\n    required: [read, grep]\n    optional: [exec, edit, lsp, mcp__gh__search, write]\n";

    #[test]
    fn effective_capabilities_are_required_plus_permitted_optional() {
        let def = definition(CAPS);
        let lock = DcpAgentLock::build(&def, &policy("{}", false)).unwrap();
        assert_eq!(lock.capabilities, ["edit", "grep", "lsp", "read", "write"]);
        let lock = DcpAgentLock::build(&def, &policy("{}", true)).unwrap();
        assert_eq!(
            lock.capabilities,
            ["edit", "exec", "grep", "lsp", "read", "write"]
        );
        // Denied wins, even over --allow-shell.
        let lock = DcpAgentLock::build(
            &def,
            &policy(r#"{"deniedCapabilities": ["exec", "write"]}"#, true),
        )
        .unwrap();
        assert_eq!(lock.capabilities, ["edit", "grep", "lsp", "read"]);
        lock.verify().unwrap();
        assert_eq!(lock.policy_hash, lock.policy.policy_hash());
        assert!(crate::clock::parse_rfc3339(&lock.created_at).is_some());
    }

    #[test]
    fn a_required_capability_outside_the_catalog_is_refused_by_name() {
        let def = definition("  capabilities:\n    required: [read, exec]\n");
        let err = DcpAgentLock::build(&def, &policy("{}", false)).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Policy);
        assert_eq!(err.exit_code(), 6);
        assert!(err.message.contains("`exec`"), "{}", err.message);
        assert!(err.hints.iter().any(|h| h.contains("--allow-shell")));
        let err = DcpAgentLock::build(&def, &policy(r#"{"deniedCapabilities": ["exec"]}"#, true))
            .unwrap_err();
        assert!(
            err.message
                .contains("`exec` (the policy's deniedCapabilities lists it)")
        );
        let def = definition("  capabilities:\n    required: [browser, read, mcp__gh__x]\n");
        let err = DcpAgentLock::build(&def, &policy("{}", true)).unwrap_err();
        assert!(
            err.message
                .contains("`browser` (this runtime has no tool for it"),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("`mcp__gh__x` (MCP is off"),
            "{}",
            err.message
        );
        // MCP tools exist (through servers of the runtime config): the hint names the flag.
        assert!(err.hints.iter().any(|h| h.contains("--allow-mcp")));
        // Denied by the policy file: --allow-shell would not help either.
        let def = definition("  capabilities:\n    required: [read, exec]\n");
        let err = DcpAgentLock::build(&def, &policy(r#"{"deniedCapabilities": ["exec"]}"#, false))
            .unwrap_err();
        assert!(!err.hints.iter().any(|h| h.contains("--allow-shell")));
        let def = definition("  capabilities:\n    required: [grep]\n");
        let err = DcpAgentLock::build(&def, &policy(r#"{"allowedCapabilities": ["read"]}"#, false))
            .unwrap_err();
        assert!(err.message.contains("allowedCapabilities does not list it"));
    }

    #[test]
    fn budgets_only_tighten() {
        let def = definition(&format!(
            "{CAPS}  execution:\n    maxTurns: 48\n    maxWallClockMs: 600000\n    maxPureRetries: 3\n"
        ));
        let lock = DcpAgentLock::build(
            &def,
            &policy(
                r#"{"maxTurns": 10, "maxWallClockMs": 900000, "maxPureRetries": 0}"#,
                false,
            ),
        )
        .unwrap();
        let exec = &lock.definition.spec.execution;
        assert_eq!(exec.max_turns, 10);
        assert_eq!(
            exec.max_wall_clock_ms,
            Some(600_000),
            "a looser policy never raises it"
        );
        assert_eq!(exec.max_pure_retries, 0);
        assert_ne!(lock.definition_hash, def.definition_hash());
        assert_eq!(lock.definition_hash, lock.definition.definition_hash());
        lock.definition.validate("tightened").unwrap();
        // A policy limit applies where the definition has none; a higher one changes nothing.
        let lock = DcpAgentLock::build(
            &definition(CAPS),
            &policy(r#"{"maxTurns": 500, "maxWallClockMs": 5000}"#, false),
        )
        .unwrap();
        assert_eq!(lock.definition.spec.execution.max_turns, 32);
        assert_eq!(lock.definition.spec.execution.max_wall_clock_ms, Some(5000));
        // No policy limits: the tightened definition is the definition.
        let lock = DcpAgentLock::build(&def, &policy("{}", false)).unwrap();
        assert_eq!(lock.definition_hash, def.definition_hash());
    }

    #[test]
    fn verify_detects_tampering() {
        let lock = DcpAgentLock::build(&definition(CAPS), &policy("{}", false)).unwrap();
        let json = serde_json::to_string(&lock).unwrap();
        let back: DcpAgentLock = serde_json::from_str(&json).unwrap();
        assert_eq!(back, lock);
        back.verify().unwrap();

        let tamper = |f: &dyn Fn(&mut DcpAgentLock)| {
            let mut l = lock.clone();
            f(&mut l);
            let err = l.verify().unwrap_err();
            assert_eq!(err.kind, ErrorKind::Corrupt);
            err.message
        };
        assert!(
            tamper(&|l| l.definition.spec.objective = "Other".into()).contains("definitionHash")
        );
        assert!(tamper(&|l| l.policy.allow_shell = true).contains("policyHash"));
        assert!(
            tamper(&|l| {
                l.capabilities.push("exec".into());
                l.capabilities.sort();
            })
            .contains("`exec` is not permitted")
        );
        assert!(tamper(&|l| l.capabilities.retain(|c| c != "read")).contains("`read` is missing"));
        assert!(tamper(&|l| l.capabilities.reverse()).contains("sorted"));
        assert!(
            tamper(&|l| {
                l.definition.spec.execution.max_turns = 500;
                l.policy.max_turns = Some(10);
                l.definition_hash = l.definition.definition_hash();
                l.policy_hash = l.policy.policy_hash();
            })
            .contains("budgets")
        );
        // A lock whose definition breaks a rule does not even load.
        let bad = json.replace("\"maxTurns\":32", "\"maxTurns\":0");
        assert!(serde_json::from_str::<DcpAgentLock>(&bad).is_err());
    }

    #[test]
    fn drift_is_refused_with_a_diff() {
        let locked_policy = policy(r#"{"passEnv": ["NPM_TOKEN"]}"#, false);
        let lock = DcpAgentLock::build(&definition(CAPS), &locked_policy).unwrap();
        lock.check_drift(&policy(r#"{"passEnv": ["NPM_TOKEN"]}"#, false))
            .unwrap();
        let err = lock
            .check_drift(&policy(
                r#"{"passEnv": ["NPM_TOKEN", "GITHUB_TOKEN"]}"#,
                true,
            ))
            .unwrap_err();
        assert_eq!(err.kind, ErrorKind::Policy);
        assert!(err.message.starts_with("policy drift"), "{}", err.message);
        assert!(
            err.message.contains("+  \"allowShell\": true"),
            "{}",
            err.message
        );
        assert!(
            err.message.contains("+    \"GITHUB_TOKEN\""),
            "{}",
            err.message
        );
        assert!(err.hints[0].contains("--pass-env"));
    }

    #[test]
    fn a_locked_capability_no_longer_permitted_is_refused() {
        let mut lock = DcpAgentLock::build(&definition(CAPS), &policy("{}", false)).unwrap();
        // Simulate a runtime that no longer implements a locked capability: same policy hash,
        // but `refusal` says no (here via an edited lock whose capability set names `browser`).
        lock.capabilities.push("browser".into());
        let err = lock.check_drift(&lock.policy.clone()).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Policy);
        assert!(err.message.contains("`browser` is no longer permitted"));
    }
}
