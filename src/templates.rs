//! Starter files shipped inside the binary (from `templates/`).

/// A commented starter DCPAgent definition (`kxen-agent agent init`).
pub const AGENT_YAML: &str = include_str!("../templates/agent.yaml");

/// A starter runtime policy (`kxen-agent policy init`).
pub const POLICY_JSON: &str = include_str!("../templates/policy.json");
