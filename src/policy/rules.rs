//! `mcpTools` rules of the policy: capability patterns mapped to `allow`, `ask` or `deny`.
//!
//! ```json
//! {"allowMcp": true,
//!  "mcpTools": {"mcp__*": "allow", "mcp__github__*": "ask", "mcp__github__delete_repo": "deny",
//!               "exec": "ask"}}
//! ```
//!
//! The most specific pattern covering a capability decides: an exact name beats every pattern,
//! a longer `mcp__…*` prefix beats a shorter one. A capability no rule covers is `allow` (once
//! its gate, `allowMcp` or `allowShell`, lets it in). `deny` takes the capability out of the
//! permitted catalog (a required one fails Session creation, exit 6); `ask` keeps it, and every
//! call of it waits for a human (`run approve` / `run deny`, see [`crate::run::approval`]). The
//! rules are part of the merged policy and so of its hash: changing them is policy drift.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What a rule says about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ToolRule {
    Allow,
    Ask,
    Deny,
}

impl ToolRule {
    pub fn name(self) -> &'static str {
        match self {
            ToolRule::Allow => "allow",
            ToolRule::Ask => "ask",
            ToolRule::Deny => "deny",
        }
    }
}

/// The `mcpTools` table: pattern → rule (sorted, so it hashes canonically).
pub type ToolRules = BTreeMap<String, ToolRule>;

/// The rule for capability `name` and the pattern that decided it (`None`: no rule covers it,
/// so it is `allow`).
pub fn rule_for<'r>(rules: &'r ToolRules, name: &str) -> (ToolRule, Option<&'r str>) {
    if let Some((pattern, rule)) = rules.get_key_value(name) {
        return (*rule, Some(pattern.as_str()));
    }
    // Up to `mcp` (a floor above): an `mcpTools` pattern covers what the registry's MCP
    // pattern covers, by the one function that defines the `mcp__server__*` family.
    rules
        .iter()
        .filter(|(pattern, _)| crate::mcp::pattern_covers(pattern, name))
        .max_by_key(|(pattern, _)| pattern.len())
        .map_or((ToolRule::Allow, None), |(p, r)| (*r, Some(p.as_str())))
}

/// Why `pattern` cannot be an `mcpTools` key, or `None`.
pub fn pattern_error(pattern: &str) -> Option<String> {
    if let Some(why) = crate::agent::capability_name_error(pattern) {
        return Some(why);
    }
    if pattern.contains('*') && !pattern.starts_with(crate::mcp::PREFIX) {
        return Some(format!(
            "{pattern:?}: only MCP patterns (`mcp__*`, `mcp__<server>__*`) may contain `*`; \
             name a built-in capability exactly (\"exec\")"
        ));
    }
    // A key that names nothing (`Exec`, `exce`) would silently leave the capability unruled:
    // the user asked for `ask` and would get `allow`.
    if !pattern.starts_with(crate::mcp::PREFIX) && !crate::tools::REGISTRY.implements(pattern) {
        let builtins: Vec<&str> = crate::tools::REGISTRY
            .entries()
            .iter()
            .filter_map(|e| match e.name() {
                crate::tools::ToolName::Exact(name) => Some(name),
                crate::tools::ToolName::Pattern(_) => None,
            })
            .collect();
        return Some(format!(
            "{pattern:?} names no capability: a key is a built-in capability ({}) or an MCP \
             pattern (`mcp__<server>__<tool>`, `mcp__<server>__*`, `mcp__*`); names are \
             case-sensitive",
            builtins.join(", ")
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(pairs: &[(&str, ToolRule)]) -> ToolRules {
        pairs.iter().map(|(p, r)| (p.to_string(), *r)).collect()
    }

    #[test]
    fn the_most_specific_pattern_wins() {
        use ToolRule::*;
        let r = rules(&[
            ("mcp__*", Ask),
            ("mcp__gh__*", Allow),
            ("mcp__gh__delete_repo", Deny),
            ("exec", Ask),
        ]);
        assert_eq!(
            rule_for(&r, "mcp__gh__delete_repo"),
            (Deny, Some("mcp__gh__delete_repo"))
        );
        assert_eq!(rule_for(&r, "mcp__gh__search"), (Allow, Some("mcp__gh__*")));
        assert_eq!(rule_for(&r, "mcp__notes__add"), (Ask, Some("mcp__*")));
        assert_eq!(rule_for(&r, "exec"), (Ask, Some("exec")));
        assert_eq!(rule_for(&r, "read"), (Allow, None));
        // A family pattern as a capability gets the family's rule, not a member's.
        assert_eq!(rule_for(&r, "mcp__gh__*"), (Allow, Some("mcp__gh__*")));
        assert_eq!(rule_for(&ToolRules::new(), "mcp__gh__x"), (Allow, None));
    }

    #[test]
    fn patterns_are_capability_names() {
        assert_eq!(pattern_error("exec"), None);
        assert_eq!(pattern_error("mcp__gh__*"), None);
        assert_eq!(pattern_error("mcp__*"), None);
        assert!(pattern_error("e*").is_some());
        assert!(pattern_error("*").is_some());
        assert!(pattern_error("mcp__gh").is_some());
        assert!(pattern_error("").is_some());
        // Keys that name no capability are refused, not silently unmatched.
        for typo in ["Exec", "exce", "EXEC", "mcp", "push"] {
            let why = pattern_error(typo).unwrap_or_else(|| panic!("{typo} accepted"));
            assert!(
                why.contains("names no capability") && why.contains("exec"),
                "{why}"
            );
        }
        for builtin in ["read", "edit", "write", "glob", "grep", "exec", "task"] {
            assert_eq!(pattern_error(builtin), None, "{builtin}");
        }
    }
}
