//! Effective abilities (docs/dwp-spec.md, "Host abilities", "Addon descriptors and detection", "The abilities document").
//!
//! effective = host-declared (`--caps`, then the `host` records, per ability) ∪ the
//! `provides_abilities` of every addon that is enabled, validly described, detected and on the
//! pinned interface major. Recomputed on every call and never written anywhere: this module only
//! reads files and runs detect commands.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use super::addons::{self, DetectEnv};
pub use super::config::ABILITIES;
use super::config::Config;
use super::pyfmt::{py_repr, truthy};
use crate::error::{Error, Result};

/// The source name of an ability declared with `--caps`.
pub const CAPS_SOURCE: &str = "host";

/// Parses `--caps JSON`: an object over the closed set; values are coerced with Python
/// truthiness (`1` → true; `0`, `""`, `null`, `[]`, `{}` → false). Unknown ability, malformed JSON
/// or a non-object: invalid input (exit 4), naming the closed set.
pub fn parse_caps(json: &str) -> Result<BTreeMap<String, bool>> {
    let value: Value = serde_json::from_str(json).map_err(|e| {
        Error::invalid(format!("--caps is not valid JSON ({e})"))
            .with_hint("pass an object such as --caps '{\"subagents\": true}'")
    })?;
    let Value::Object(map) = value else {
        return Err(Error::invalid("--caps is not a JSON object")
            .with_hint("pass an object such as --caps '{\"subagents\": true}'"));
    };
    let mut out = BTreeMap::new();
    for (k, v) in map {
        if !ABILITIES.contains(&k.as_str()) {
            return Err(Error::invalid(format!(
                "unknown host ability {} in --caps — the closed set is {}; an ability is never invented",
                py_repr(&k),
                ABILITIES.join("/")
            )));
        }
        out.insert(k, truthy(&v));
    }
    Ok(out)
}

/// The 8-ability floor (all false) merged with a `--caps` declaration.
pub fn declared(caps: &BTreeMap<String, bool>) -> BTreeMap<String, bool> {
    ABILITIES
        .iter()
        .map(|a| (a.to_string(), caps.get(*a).copied().unwrap_or(false)))
        .collect()
}

/// One enabled addon's verdict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub descriptor_ok: bool,
    pub detected: bool,
    pub interface: Option<i64>,
    pub compatible: bool,
    /// `provides_abilities` in descriptor order (empty for an invalid descriptor).
    pub provides: Vec<String>,
    pub reason: Option<String>,
    pub version: Option<String>,
}

impl Verdict {
    pub fn to_json(&self) -> Value {
        json!({
            "compatible": self.compatible,
            "descriptor_ok": self.descriptor_ok,
            "detected": self.detected,
            "interface": self.interface,
            "provides": self.provides,
            "reason": self.reason,
            "version": self.version,
        })
    }
}

/// The effective abilities and everything that explains them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveAbilities {
    /// All eight abilities.
    pub abilities: BTreeMap<String, bool>,
    /// For each of the eight: where a `true` comes from (`host`, `record:<file label>`,
    /// `addon:<key>`), host source first, then addons in key order.
    pub sources: BTreeMap<String, Vec<String>>,
    /// A verdict per enabled addon (none with `host_only`).
    pub addons: BTreeMap<String, Verdict>,
    /// Enabled addons with a valid descriptor that are not detected and carry a note.
    pub deferred: BTreeMap<String, String>,
    /// Registry warnings, then one per addon that contributes nothing for a reason worth saying.
    pub warnings: Vec<String>,
}

impl EffectiveAbilities {
    /// Whether `ability` is effective.
    pub fn has(&self, ability: &str) -> bool {
        self.abilities.get(ability).copied().unwrap_or(false)
    }

    /// The `dwp abilities` document (docs/dwp-spec.md, "The abilities document").
    pub fn to_json(&self) -> Value {
        let addons: Map<String, Value> = self
            .addons
            .iter()
            .map(|(k, v)| (k.clone(), v.to_json()))
            .collect();
        json!({
            "abilities": self.abilities,
            "addons": addons,
            "deferred": self.deferred,
            "persisted": false,
            "sources": self.sources,
            "warnings": self.warnings,
        })
    }
}

/// Computes the effective abilities for the repository at `repo_root` (`None`: no repository
/// file, e.g. a plan outside `<repo>/.dwp/plans/`). `caps_json` is `--caps`; `host_only` ignores
/// the addon registry of both files (the `host` records still count).
pub fn effective(
    repo_root: Option<&Path>,
    caps_json: Option<&str>,
    host_only: bool,
) -> Result<EffectiveAbilities> {
    let caps = parse_caps(caps_json.unwrap_or("{}"))?;
    let home = super::repo::home_dir();
    let config = Config::load(repo_root, home.as_deref());
    let mut warnings = config.warnings.clone();
    let registry = if host_only {
        BTreeMap::new()
    } else {
        config.addons(&mut warnings)
    };
    let records = config.host(&mut warnings);

    let mut abilities = BTreeMap::new();
    let mut sources: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for a in ABILITIES {
        let (value, source) = match (caps.get(a), records.get(a)) {
            (Some(v), _) => (*v, CAPS_SOURCE.to_string()),
            (None, Some(r)) => (r.value, format!("record:{}", r.source)),
            (None, None) => (false, String::new()),
        };
        abilities.insert(a.to_string(), value);
        sources.insert(a.to_string(), if value { vec![source] } else { vec![] });
    }

    let enabled: Vec<(&String, Option<&String>)> = registry
        .iter()
        .filter(|(_, v)| v.enabled)
        .map(|(k, v)| (k, v.note.as_ref()))
        .collect();
    let env = DetectEnv::current(repo_root);
    // Descriptors are opened and detect commands run only for enabled addons.
    let keys: Vec<String> = enabled.iter().map(|(k, _)| k.to_string()).collect();
    let results = addons::detect_all(&keys, &env);

    let mut verdicts = BTreeMap::new();
    let mut deferred = BTreeMap::new();
    for ((key, note), (_, result)) in enabled.iter().zip(results) {
        let key = key.to_string();
        let (desc, det) = match result {
            Err(errors) => {
                let first = errors.first().cloned().unwrap_or_default();
                warnings.push(format!("addon {key}: invalid descriptor ({first})"));
                verdicts.insert(
                    key,
                    Verdict {
                        descriptor_ok: false,
                        detected: false,
                        interface: None,
                        compatible: false,
                        provides: vec![],
                        reason: Some(format!("invalid descriptor ({first})")),
                        version: None,
                    },
                );
                continue;
            }
            Ok(pair) => pair,
        };
        let reason = det.reason.clone().unwrap_or_default();
        if det.compatible {
            for a in &desc.provides {
                abilities.insert(a.clone(), true);
                sources
                    .entry(a.clone())
                    .or_default()
                    .push(format!("addon:{key}"));
            }
        } else if !det.detected && note.is_some() {
            deferred.insert(key.clone(), note.cloned().unwrap_or_default());
        } else if det.legacy_only {
            warnings.push(format!("addon {key}: {reason}"));
        } else if !desc.provides.is_empty() {
            warnings.push(format!(
                "addon {key}: enabled but contributes nothing — {reason}"
            ));
        } else if det.detected {
            // Detected on the wrong or an unreadable interface: one warning even when the addon
            // provides no ability (docs/dwp-spec.md, "Where dwp departs from the reference", item 4).
            warnings.push(format!("addon {key}: {reason}"));
        }
        verdicts.insert(
            key,
            Verdict {
                descriptor_ok: true,
                detected: det.detected,
                interface: det.interface,
                compatible: det.compatible,
                provides: desc.provides.clone(),
                reason: det.reason.clone().filter(|_| !det.compatible),
                version: det.version.clone(),
            },
        );
    }
    Ok(EffectiveAbilities {
        abilities,
        sources,
        addons: verdicts,
        deferred,
        warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_parse_with_python_truthiness() {
        let caps = parse_caps(
            r#"{"subagents": 1, "telemetry": "no", "stop_agent": [], "meter_spend": null}"#,
        )
        .unwrap();
        assert!(caps["subagents"]);
        assert!(caps["telemetry"]);
        assert!(!caps["stop_agent"]);
        assert!(!caps["meter_spend"]);
        let d = declared(&caps);
        assert_eq!(d.len(), 8);
        assert!(!d["model_routing"]);
    }

    #[test]
    fn caps_refusals_are_invalid_input() {
        for bad in ["[]", "null", "{", r#"{"teleport": true}"#] {
            let err = parse_caps(bad).unwrap_err();
            assert_eq!(err.exit_code(), 4, "{bad}");
        }
        let err = parse_caps(r#"{"teleport": true}"#).unwrap_err();
        assert!(err.message.contains("stop_agent/meter_spend/meter_tokens/meter_wall_clock/cancel_children/model_routing/subagents/telemetry"));
    }
}
