//! `dwp resources routing` (docs/dwp-spec.md, "Routing postures"): the model and parallel postures. A posture
//! needs its contract grant AND the matching effective ability — abilities are not permissions —
//! and states permissions, never efficacy.

use serde_json::{Map, Value, json};

use super::Abilities;
use crate::dwp::plan::Contract;

/// One posture and what it lacks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posture {
    pub posture: &'static str,
    pub missing: Vec<String>,
}

fn posture(
    granted: &[&str],
    abilities: &Abilities,
    grant: &str,
    ability: &str,
    authorized: &'static str,
    default: &'static str,
) -> Posture {
    let mut missing = Vec::new();
    if !granted.contains(&grant) {
        missing.push(format!("contract grant {grant}"));
    }
    if !abilities.has(ability) {
        missing.push(format!("host capability {ability}"));
    }
    Posture {
        posture: if missing.is_empty() {
            authorized
        } else {
            default
        },
        missing,
    }
}

/// The contract's `permissions.granted` list.
pub fn granted(contract: &Contract) -> Vec<&str> {
    contract
        .raw
        .get("permissions")
        .and_then(|p| p.get("granted"))
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Model switching needs grant `model_routing` and ability `model_routing`; the default is a
/// fixed model.
pub fn model(contract: &Contract, abilities: &Abilities) -> Posture {
    posture(
        &granted(contract),
        abilities,
        "model_routing",
        "model_routing",
        "switching_authorized",
        "fixed_model",
    )
}

/// Parallel dispatch needs grant `agent_delegation` and ability `subagents`.
pub fn parallel(contract: &Contract, abilities: &Abilities) -> Posture {
    posture(
        &granted(contract),
        abilities,
        "agent_delegation",
        "subagents",
        "parallel_authorized",
        "sequential_only",
    )
}

/// The routing document.
pub fn to_json(contract: &Contract, abilities: &Abilities) -> Value {
    let model = model(contract, abilities);
    let parallel = parallel(contract, abilities);
    let sources: Map<String, Value> = abilities
        .sources
        .iter()
        .filter(|(_, s)| !s.is_empty())
        .map(|(k, s)| (k.clone(), json!(s)))
        .collect();
    json!({
        "ability_sources": sources,
        "model": {
            "missing": model.missing,
            "never_an_efficacy_claim": true,
            "posture": model.posture,
        },
        "parallel": {
            "missing": parallel.missing,
            "posture": parallel.posture,
        },
    })
}
