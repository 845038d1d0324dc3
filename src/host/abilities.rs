//! The DWP host abilities kxen-agent can truthfully declare for a Session made with a given
//! model config, policy and agent (`kxen-agent host abilities`, docs/dwp-spec.md, "Host abilities").
//!
//! Each ability is true only when the runtime exercises it for such a Session:
//! - `stop_agent`: a cancel (SIGINT/SIGTERM) stops the run cooperatively — always.
//! - `meter_wall_clock`: every attempt is timed — always.
//! - `meter_tokens`: the provider serving the agent's model role reports usage, and a plan run
//!   writes it as observed samples. Per kind: `openai` reads the `usage` of every completion
//!   (OpenAI-compatible servers report prompt/completion tokens; a reply without it writes no
//!   sample and a warning), `anthropic` the Messages API's `usage` (cached prompt tokens
//!   count as input tokens, and are priced at the input rate); `script` only when every top-level line of the script carries
//!   `usage` (the file is the provider, so it is read); `command` never (its protocol makes
//!   `usage` optional, so nothing says it will come).
//! - `meter_spend`: `meter_tokens` and a `[providers.X.price]` (USD per million tokens) for
//!   that provider: spend is reported tokens times real rates, never an estimate.
//! - `subagents`, `cancel_children`: the `task` tool is permitted (children run as Sessions, a
//!   cancel reaches them).
//! - `model_routing`: the roles the agent uses map to more than one distinct model.
//! - `telemetry`: never.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::config::ModelConfig;
use crate::dwp::config::ABILITIES;
use crate::error::Result;
use crate::provider::config::{Price, ProviderConfig};

/// What the host abilities are computed from.
pub struct HostInputs<'a> {
    pub config: &'a ModelConfig,
    /// The agent's execution model role (`execution` by default).
    pub execution_role: &'a str,
    /// The Builder's `planning` role also serves the Session (no `--agent` given).
    pub built: bool,
    /// The `task` tool is among what the Session may call.
    pub task_permitted: bool,
}

/// How the provider of the metered role meters, as far as the config tells.
#[derive(Debug, Clone, PartialEq)]
pub struct Metering {
    /// `[providers.NAME]`.
    pub provider: String,
    pub reports_usage: bool,
    /// Set only when usage is reported (spend is usage times rates).
    pub price: Option<Price>,
}

/// The metering facts of the provider serving `role`.
pub fn metering(config: &ModelConfig, role: &str) -> Result<Metering> {
    let (name, provider, dir) = config.provider_config(role)?;
    let reports_usage = match provider {
        ProviderConfig::Openai(_) | ProviderConfig::Anthropic(_) => true,
        ProviderConfig::Command(_) => false,
        ProviderConfig::Script(s) => script_reports_usage(&dir.join(&s.path)),
    };
    Ok(Metering {
        provider: name.to_string(),
        reports_usage,
        price: provider.price().filter(|_| reports_usage).cloned(),
    })
}

/// True when the script has top-level lines and every one carries a `usage` object. An
/// unreadable script reports nothing (the run itself then says why it cannot read it).
fn script_reports_usage(path: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return false;
    };
    let mut lines = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let Ok(serde_json::Value::Object(map)) = serde_json::from_str(line) else {
            return false;
        };
        if map.contains_key("task") {
            continue; // a child Session's line: children are not metered into the plan
        }
        if !map.get("usage").is_some_and(serde_json::Value::is_object) {
            return false;
        }
        lines += 1;
    }
    lines > 0
}

/// The identity of the model serving `role`: the model name of an `openai` provider, else the
/// provider itself.
fn model_of(config: &ModelConfig, role: &str) -> Option<String> {
    let (name, provider, _) = config.provider_config(role).ok()?;
    Some(match provider {
        ProviderConfig::Openai(o) => format!("model:{}", o.model),
        ProviderConfig::Anthropic(a) => format!("model:{}", a.model),
        _ => format!("provider:{name}"),
    })
}

/// The closed eight-ability map, in the canonical order.
pub fn host_abilities(inputs: &HostInputs) -> Result<BTreeMap<String, bool>> {
    let meter = metering(inputs.config, inputs.execution_role)?;
    let mut roles = vec![inputs.execution_role];
    if inputs.built {
        roles.push("planning");
    }
    let models: BTreeSet<String> = roles
        .iter()
        .filter_map(|r| model_of(inputs.config, r))
        .collect();
    let mut out = BTreeMap::new();
    for ability in ABILITIES {
        let value = match ability {
            "stop_agent" | "meter_wall_clock" => true,
            "meter_tokens" => meter.reports_usage,
            "meter_spend" => meter.price.is_some(),
            "cancel_children" | "subagents" => inputs.task_permitted,
            "model_routing" => models.len() > 1,
            _ => false, // telemetry: kxen-agent sends nothing anywhere
        };
        out.insert(ability.to_string(), value);
    }
    Ok(out)
}

/// The map as `--caps` JSON for `dwp abilities` / `dwp resources report` (keys in the canonical
/// order, one line).
pub fn caps_json(abilities: &BTreeMap<String, bool>) -> String {
    let fields: Vec<String> = ABILITIES
        .iter()
        .map(|a| format!("\"{a}\":{}", abilities.get(*a).copied().unwrap_or(false)))
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// The resource frame's view of the map (every true ability's source is `host`).
pub fn as_frame(abilities: &BTreeMap<String, bool>) -> crate::dwp::resources::Abilities {
    let mut frame = crate::dwp::resources::Abilities::default();
    for (k, v) in abilities {
        frame.values.insert(k.clone(), *v);
        frame
            .sources
            .insert(k.clone(), if *v { vec!["host".into()] } else { Vec::new() });
    }
    frame
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigSource;

    fn config(dir: &Path, text: &str) -> ModelConfig {
        ModelConfig::parse(text, &dir.join("config.toml"), ConfigSource::Flag).unwrap()
    }

    #[test]
    fn script_usage_decides_meter_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write(
            "usage.jsonl",
            "{\"text\":\"a\",\"usage\":{\"inputTokens\":1,\"outputTokens\":2}}\n\n{\"task\":\"t\",\"text\":\"c\"}\n",
        );
        write("plain.jsonl", "{\"text\":\"a\"}\n");
        assert!(script_reports_usage(&dir.path().join("usage.jsonl")));
        assert!(!script_reports_usage(&dir.path().join("plain.jsonl")));
        assert!(!script_reports_usage(&dir.path().join("missing.jsonl")));
        let c = config(
            dir.path(),
            "[providers.s]\nkind = \"script\"\npath = \"usage.jsonl\"\n[providers.s.price]\ninput_per_million = 3.0\noutput_per_million = 15.0\ncurrency = \"USD\"\n[roles]\nexecution = \"s\"\nplanning = \"s\"\n",
        );
        let a = host_abilities(&HostInputs {
            config: &c,
            execution_role: "execution",
            built: true,
            task_permitted: false,
        })
        .unwrap();
        assert!(a["meter_tokens"] && a["meter_spend"] && a["stop_agent"]);
        assert!(!a["model_routing"] && !a["subagents"] && !a["telemetry"]);
        assert_eq!(
            caps_json(&a),
            "{\"stop_agent\":true,\"meter_spend\":true,\"meter_tokens\":true,\"meter_wall_clock\":true,\"cancel_children\":false,\"model_routing\":false,\"subagents\":false,\"telemetry\":false}"
        );
    }

    #[test]
    fn price_needs_usd_and_sane_rates() {
        let dir = tempfile::tempdir().unwrap();
        let base = "[providers.s]\nkind = \"script\"\npath = \"x\"\n[providers.s.price]\n";
        for bad in [
            "input_per_million = 1.0\noutput_per_million = 2.0\ncurrency = \"EUR\"\n",
            "input_per_million = -1.0\noutput_per_million = 2.0\ncurrency = \"USD\"\n",
            "input_per_million = 1.0\ncurrency = \"USD\"\n",
        ] {
            let text = format!("{base}{bad}");
            assert!(
                ModelConfig::parse(&text, &dir.path().join("c.toml"), ConfigSource::Flag).is_err(),
                "{bad}"
            );
        }
    }
}
