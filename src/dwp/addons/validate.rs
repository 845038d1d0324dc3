//! Descriptor validation (docs/dwp-spec.md, "Descriptor validation"): every error, in the reference's emission order.

use regex::Regex;
use serde_json::{Map, Value};

use super::DESCRIPTOR_SCHEMA;
use crate::dwp::config::{ABILITIES, is_version};
use crate::dwp::plan::contract::GRANTS;
use crate::dwp::pyfmt::py_repr;

const TOP_FIELDS: [&str; 7] = [
    "schema",
    "key",
    "product",
    "detect",
    "provides_abilities",
    "requires_grants",
    "transport",
];
const PRODUCT_FIELDS: [&str; 3] = ["repo", "tag", "interface"];
const DETECT_FIELDS: [&str; 4] = ["command", "paths", "interface_from", "legacy_paths"];

/// A valid descriptor, typed.
#[derive(Debug, Clone, PartialEq)]
pub struct Descriptor {
    pub key: String,
    /// The pinned interface major (`product.interface`), if any.
    pub interface_pin: Option<i64>,
    pub detect: DetectSpec,
    pub interface_from: Option<InterfaceFrom>,
    /// `provides_abilities`, in descriptor order.
    pub provides: Vec<String>,
    pub requires_grants: Vec<String>,
    pub transport: Option<String>,
}

/// How an addon is detected.
#[derive(Debug, Clone, PartialEq)]
pub enum DetectSpec {
    /// An argv line, split on spaces (the character rule leaves no quoting to interpret).
    Command(String),
    Paths {
        paths: Vec<String>,
        legacy: Vec<String>,
    },
}

/// Where the interface major is read from.
#[derive(Debug, Clone, PartialEq)]
pub enum InterfaceFrom {
    /// A field of the detect command's stdout parsed as one JSON object.
    Json(String),
    /// The first group of the first match on the detect command's stdout.
    Regex(String),
    /// A field of a JSON file under the home directory (`~/`-relative path).
    FileJson { path: String, field: String },
}

fn re(pattern: &str) -> Regex {
    Regex::new(pattern).expect("static regex")
}

fn sorted_unknown<'a>(map: &'a Map<String, Value>, known: &[&str]) -> Vec<&'a String> {
    let mut unknown: Vec<&String> = map
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .collect();
    unknown.sort();
    unknown
}

fn is_path_list(value: &Value) -> bool {
    let path_re = re(r"^(~/)?[A-Za-z0-9._][A-Za-z0-9._/-]*$");
    let Some(items) = value.as_array() else {
        return false;
    };
    let mut seen = std::collections::HashSet::new();
    !items.is_empty()
        && items.iter().all(|item| {
            item.as_str().is_some_and(|s| {
                path_re.is_match(s) && !s.split('/').any(|seg| seg == "..") && seen.insert(s)
            })
        })
}

/// Parses `interface_from`, or `None` for an unknown form (including a `regex:` pattern that
/// does not compile, so a bad pattern is a descriptor error rather than a detection surprise).
pub fn parse_interface_from(s: &str) -> Option<InterfaceFrom> {
    let ident = re(r"^[A-Za-z_][A-Za-z0-9_]*$");
    if let Some(field) = s.strip_prefix("json:") {
        return ident
            .is_match(field)
            .then(|| InterfaceFrom::Json(field.into()));
    }
    if let Some(pattern) = s.strip_prefix("regex:") {
        return Regex::new(pattern)
            .ok()
            .map(|_| InterfaceFrom::Regex(pattern.into()));
    }
    if let Some(rest) = s.strip_prefix("file-json:") {
        let (path, field) = rest.rsplit_once('#')?;
        let rel = path.strip_prefix("~/")?;
        let ok = ident.is_match(field)
            && is_path_list(&Value::Array(vec![Value::String(path.into())]))
            && !rel.is_empty();
        return ok.then(|| InterfaceFrom::FileJson {
            path: path.into(),
            field: field.into(),
        });
    }
    None
}

fn closed_list(value: Option<&Value>, set: &[&str]) -> bool {
    let Some(items) = value.and_then(Value::as_array) else {
        return false;
    };
    let mut seen = std::collections::HashSet::new();
    items.iter().all(|i| {
        i.as_str()
            .is_some_and(|s| set.contains(&s) && seen.insert(s))
    })
}

/// Every validation error of `value`, in order. `dir` is the directory (key) it was loaded from.
pub fn descriptor_errors(value: &Value, dir: Option<&str>) -> Vec<String> {
    let Some(obj) = value.as_object() else {
        return vec!["descriptor is not an object".into()];
    };
    let mut errors = Vec::new();
    for f in sorted_unknown(obj, &TOP_FIELDS) {
        errors.push(format!("unknown field {}", py_repr(f)));
    }
    for f in [
        "schema",
        "key",
        "detect",
        "provides_abilities",
        "requires_grants",
    ] {
        if !obj.contains_key(f) {
            errors.push(format!("missing '{f}'"));
        }
    }
    if let Some(schema) = obj.get("schema")
        && schema.as_str() != Some(DESCRIPTOR_SCHEMA)
    {
        errors.push(format!("schema is not {DESCRIPTOR_SCHEMA}"));
    }
    let key = obj.get("key");
    if let Some(k) = key
        && !k
            .as_str()
            .is_some_and(|s| re(r"^[a-z][a-z0-9-]{0,63}$").is_match(s))
    {
        errors.push("key is not a kebab-case name".into());
    }
    if let Some(dir) = dir
        && key.and_then(Value::as_str) != Some(dir)
    {
        let shown = match key {
            None => "None".to_string(),
            Some(Value::String(s)) => py_repr(s),
            Some(other) => crate::canonical::to_compact(other),
        };
        errors.push(format!(
            "key {shown} does not equal its directory {}",
            py_repr(dir)
        ));
    }
    if let Some(product) = obj.get("product") {
        match product.as_object() {
            None => errors.push("product is not an object".into()),
            Some(p) => {
                for f in sorted_unknown(p, &PRODUCT_FIELDS) {
                    errors.push(format!("product: unknown field {}", py_repr(f)));
                }
                if let Some(repo) = p.get("repo")
                    && !repo
                        .as_str()
                        .is_some_and(|s| re(r"^[A-Za-z0-9-]+/[A-Za-z0-9._-]+$").is_match(s))
                {
                    errors.push("product.repo is not owner/name".into());
                }
                if let Some(tag) = p.get("tag")
                    && !tag.as_str().is_some_and(is_version)
                {
                    errors.push("product.tag is not an exact tag".into());
                }
                if let Some(i) = p.get("interface")
                    && interface_pin(i).is_none()
                {
                    errors.push("product.interface is not an integer >= 1".into());
                }
            }
        }
    }
    if let Some(detect) = obj.get("detect") {
        match detect.as_object() {
            None => errors.push("detect is not an object".into()),
            Some(d) => detect_errors(d, &mut errors),
        }
    }
    if obj.contains_key("provides_abilities")
        && !closed_list(obj.get("provides_abilities"), &ABILITIES)
    {
        errors.push(format!(
            "provides_abilities holds an unknown or repeated value (the closed set is {})",
            ABILITIES.join(", ")
        ));
    }
    if obj.contains_key("requires_grants") && !closed_list(obj.get("requires_grants"), &GRANTS) {
        errors.push(format!(
            "requires_grants holds an unknown or repeated value (the closed set is {})",
            GRANTS.join(", ")
        ));
    }
    if let Some(t) = obj.get("transport") {
        if !matches!(t.as_str(), Some("headless" | "interactive")) {
            errors.push("transport is not headless|interactive".into());
        } else {
            let has = |field: &str, v: &str| {
                obj.get(field)
                    .and_then(Value::as_array)
                    .is_some_and(|a| a.iter().any(|x| x.as_str() == Some(v)))
            };
            if !has("provides_abilities", "subagents") {
                errors.push("a transport addon must provide subagents".into());
            }
            if !has("requires_grants", "agent_delegation") {
                errors.push("a transport addon must require agent_delegation".into());
            }
        }
    }
    errors
}

fn detect_errors(d: &Map<String, Value>, errors: &mut Vec<String>) {
    for f in sorted_unknown(d, &DETECT_FIELDS) {
        errors.push(format!("detect: unknown field {}", py_repr(f)));
    }
    if d.contains_key("command") == d.contains_key("paths") {
        errors.push("detect needs exactly one of command or paths".into());
    }
    if let Some(c) = d.get("command")
        && !c.as_str().is_some_and(|s| {
            s.chars().count() <= 200 && re(r"^[A-Za-z0-9][A-Za-z0-9._/ -]*$").is_match(s)
        })
    {
        errors.push("detect.command is not a plain argv line".into());
    }
    if let Some(p) = d.get("paths")
        && !is_path_list(p)
    {
        errors.push("detect.paths is not a non-empty list of plain paths".into());
    }
    if let Some(l) = d.get("legacy_paths")
        && !(is_path_list(l) && d.contains_key("paths"))
    {
        errors.push(
            "detect.legacy_paths is not a non-empty list of plain paths beside detect.paths".into(),
        );
    }
    if let Some(i) = d.get("interface_from")
        && i.as_str().and_then(parse_interface_from).is_none()
    {
        errors.push("detect.interface_from has an unknown form".into());
    }
}

/// `product.interface`: an integer ≥ 1 (a boolean or a float is not one).
fn interface_pin(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => match n.as_i64() {
            Some(i) => (i >= 1).then_some(i),
            // Above i64::MAX: larger than any major a product reports.
            None => n.as_u64().map(|_| i64::MAX),
        },
        _ => None,
    }
}

/// Validates and types a descriptor; `Err` carries every error in order.
pub fn parse_descriptor(value: &Value, dir: Option<&str>) -> Result<Descriptor, Vec<String>> {
    let errors = descriptor_errors(value, dir);
    if !errors.is_empty() {
        return Err(errors);
    }
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let detect = &value["detect"];
    let spec = match detect.get("command").and_then(Value::as_str) {
        Some(c) => DetectSpec::Command(c.to_string()),
        None => DetectSpec::Paths {
            paths: strings(&detect["paths"]),
            legacy: detect.get("legacy_paths").map(strings).unwrap_or_default(),
        },
    };
    Ok(Descriptor {
        key: value["key"].as_str().unwrap_or_default().to_string(),
        interface_pin: value
            .get("product")
            .and_then(|p| p.get("interface"))
            .and_then(interface_pin),
        detect: spec,
        interface_from: detect
            .get("interface_from")
            .and_then(Value::as_str)
            .and_then(parse_interface_from),
        provides: strings(&value["provides_abilities"]),
        requires_grants: strings(&value["requires_grants"]),
        transport: value
            .get("transport")
            .and_then(Value::as_str)
            .map(String::from),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> Value {
        json!({
            "schema": DESCRIPTOR_SCHEMA, "key": "herdr",
            "detect": {"command": "herdr-peers --version"},
            "provides_abilities": [], "requires_grants": []
        })
    }

    #[test]
    fn not_an_object_is_the_only_error() {
        assert_eq!(
            descriptor_errors(&json!([]), Some("x")),
            vec!["descriptor is not an object"]
        );
    }

    #[test]
    fn every_error_in_emission_order() {
        let v = json!({
            "zz": 1, "aa": 2, "schema": "x", "key": "Bad_Key",
            "product": {"repo": "nope", "tag": "1.0", "interface": true, "extra": 1},
            "detect": {"command": "rm -rf / ; echo", "paths": ["../x"], "legacy_paths": [], "interface_from": "yaml:x", "shell": 1},
            "provides_abilities": ["teleport"], "requires_grants": ["root", "root"],
            "transport": "pigeon"
        });
        let errors = descriptor_errors(&v, Some("herdr"));
        let expected = [
            "unknown field 'aa'",
            "unknown field 'zz'",
            "schema is not https://deepworkplan.com/schema/addon-descriptor/v1.json",
            "key is not a kebab-case name",
            "key 'Bad_Key' does not equal its directory 'herdr'",
            "product: unknown field 'extra'",
            "product.repo is not owner/name",
            "product.tag is not an exact tag",
            "product.interface is not an integer >= 1",
            "detect: unknown field 'shell'",
            "detect needs exactly one of command or paths",
            "detect.command is not a plain argv line",
            "detect.paths is not a non-empty list of plain paths",
            "detect.legacy_paths is not a non-empty list of plain paths beside detect.paths",
            "detect.interface_from has an unknown form",
            "provides_abilities holds an unknown or repeated value (the closed set is stop_agent, meter_spend, meter_tokens, meter_wall_clock, cancel_children, model_routing, subagents, telemetry)",
            "requires_grants holds an unknown or repeated value (the closed set is gate_command_exec, fs_write_plan_scope, fs_write_repo_scope, git_operations, network_access, host_adapter_metering, agent_delegation, context_export, model_routing)",
            "transport is not headless|interactive",
        ];
        assert_eq!(errors, expected);
    }

    #[test]
    fn missing_fields_and_transport_rules() {
        let errors = descriptor_errors(&json!({}), Some("vim"));
        assert_eq!(
            errors,
            vec![
                "missing 'schema'",
                "missing 'key'",
                "missing 'detect'",
                "missing 'provides_abilities'",
                "missing 'requires_grants'",
                "key None does not equal its directory 'vim'",
            ]
        );
        let mut v = base();
        v["transport"] = json!("headless");
        assert_eq!(
            descriptor_errors(&v, None),
            vec![
                "a transport addon must provide subagents",
                "a transport addon must require agent_delegation"
            ]
        );
        let mut v = base();
        v["product"] = json!({"repo": "a/b", "tag": "v1.0.0", "interface": 1.0});
        assert_eq!(
            descriptor_errors(&v, None),
            vec!["product.interface is not an integer >= 1"]
        );
        let mut v = base();
        v["detect"] = json!({"paths": ["~/a", "a/../b"]});
        assert_eq!(
            descriptor_errors(&v, None),
            vec!["detect.paths is not a non-empty list of plain paths"]
        );
        let mut v = base();
        v["detect"] = json!({"command": "x", "interface_from": "regex:(unclosed"});
        assert_eq!(
            descriptor_errors(&v, None),
            vec!["detect.interface_from has an unknown form"]
        );
        let mut v = base();
        v["detect"] = json!({"command": "x", "interface_from": "file-json:/etc/x.json#f"});
        assert_eq!(
            descriptor_errors(&v, None),
            vec!["detect.interface_from has an unknown form"]
        );
        assert!(descriptor_errors(&base(), Some("herdr")).is_empty());
    }

    proptest::proptest! {
        #[test]
        fn validator_never_panics_on_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
                let _ = parse_descriptor(&v, Some("vim"));
            }
        }

        #[test]
        fn validator_never_panics_on_shaped_json(text in "\\{(\"(schema|key|product|detect|provides_abilities|requires_grants|transport|x)\": ?(null|1|true|\"[ -~]{0,12}\"|\\[(\"[a-z_~/.]{0,10}\",?){0,3}\\]|\\{(\"(command|paths|interface_from|legacy_paths|repo|tag|interface)\": ?(1|\"[ -~]{0,16}\"|\\[(\"[a-z~/.]{0,8}\",?){0,2}\\]),? ?){0,3}\\}),? ?){0,7}\\}") {
            if let Ok(v) = serde_json::from_str::<Value>(&text) {
                let _ = parse_descriptor(&v, Some("vim"));
            }
        }
    }
}
