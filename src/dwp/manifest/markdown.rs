//! `--md`: the same facts as the JSON manifest, as Markdown for a prompt (docs/dwp-spec.md, "Markdown rendering").
//! Markdown is not ASCII-escaped; `—` is written raw.

use serde_json::Value;

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "None".into(),
        other => other.to_string(),
    }
}

fn joined(v: &Value, sep: &str) -> String {
    v.as_array()
        .map(|a| a.iter().map(s).collect::<Vec<_>>().join(sep))
        .unwrap_or_default()
}

/// Renders a derived manifest document (all sections present) as Markdown ending in `\n`.
pub fn render(doc: &Value) -> String {
    let mut lines: Vec<String> = Vec::new();
    lines.push(format!(
        "# Context manifest — {} / {}",
        s(&doc["plan"]),
        s(&doc["task"])
    ));
    lines.push(String::new());
    lines.push(format!(
        "Derived from the records at seq {} ({}). No history is loaded; every line below is a \
         recorded fact or a pointer.",
        s(&doc["as_of"]["last_seq"]),
        s(&doc["as_of"]["event_ts"])
    ));
    lines.push(String::new());
    lines.push("## Authorization (carried, never summarized)".into());
    lines.push(String::new());
    let auth = &doc["authorization"];
    for a in auth["approvals"].as_array().into_iter().flatten() {
        lines.push(format!(
            "- approval by {} via {} at {} (seq {})",
            s(&a["authority"]),
            s(&a["mechanism"]),
            s(&a["ts"]),
            s(&a["seq"])
        ));
    }
    for c in auth["contract_authorization"]["consent_checkpoints"]
        .as_array()
        .into_iter()
        .flatten()
    {
        lines.push(format!("- consent checkpoint: {}", s(c)));
    }
    lines.push(String::new());
    lines.push("## Repository rules".into());
    lines.push(String::new());
    let rules = &doc["repository_rules"];
    lines.push(format!(
        "- forbidden operations: {}",
        joined(&rules["scope"]["forbidden_operations"], ", ")
    ));
    lines.push(format!(
        "- allowed command classes: {}",
        joined(&rules["scope"]["allowed_command_classes"], ", ")
    ));
    lines.push("- invariants:".into());
    for inv in rules["invariants"].as_array().into_iter().flatten() {
        lines.push(format!(
            "  - {} — {} ({})",
            s(&inv["id"]),
            s(&inv["state"]),
            s(&inv["statement"])
        ));
    }
    lines.push(String::new());
    lines.push("## Acceptance".into());
    lines.push(String::new());
    for a in doc["acceptance"].as_array().into_iter().flatten() {
        if a["satisfied"] == Value::Bool(true) {
            lines.push(format!(
                "- {}: satisfied ({})",
                s(&a["criterion"]),
                s(&a["mechanism"])
            ));
        } else {
            lines.push(format!("- {}: {}", s(&a["criterion"]), s(&a["mechanism"])));
        }
    }
    lines.push(String::new());
    lines.push("## Next action".into());
    lines.push(String::new());
    lines.push(format!("1. {}", s(&doc["next_action"]["action"])));
    lines.push(String::new());
    let dead_ends = doc["dead_ends"].as_array().cloned().unwrap_or_default();
    if !dead_ends.is_empty() {
        lines.push("## Dead ends (recorded — do not retry blindly)".into());
        lines.push(String::new());
        for d in &dead_ends {
            let aged = match d.get("aged_out") {
                Some(a) => format!(" [{}]", s(a)),
                None => String::new(),
            };
            let cause = match d.get("cause") {
                Some(Value::String(c)) if !c.is_empty() => c.clone(),
                _ => d.get("reason").map(s).unwrap_or_default(),
            };
            lines.push(format!(
                "- seq {} {}{aged} — {cause}",
                s(&d["seq"]),
                s(&d["kind"])
            ));
        }
    }
    lines.push(String::new());
    lines.push("## Touched surface".into());
    lines.push(String::new());
    let surface = &doc["touched_surface"];
    let mut files: Vec<(&String, &Value)> = surface["files"]
        .as_object()
        .map(|m| m.iter().collect())
        .unwrap_or_default();
    files.sort_by(|a, b| a.0.cmp(b.0));
    for (path, hash) in files {
        let shown = match hash {
            Value::String(h) => h.clone(),
            _ => "MISSING ON DISK".into(),
        };
        lines.push(format!("- {path}: {shown}"));
    }
    if surface["widen_discovery"] == Value::Bool(true) {
        lines.push(String::new());
        lines.push(format!(
            "Discovery is WIDENED: {}",
            joined(&surface["widen_reasons"], "; ")
        ));
    }
    lines.push(String::new());
    lines.push(format!(
        "Freshness fingerprint: `{}`",
        s(&doc["freshness"]["inputs_fingerprint"])
    ));
    lines.push(String::new());
    lines.join("\n")
}
