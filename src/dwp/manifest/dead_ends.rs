//! The dead-end digest (dwp-details.md §2.6): what was tried and failed, kept so nobody retries
//! it blindly.
//!
//! An entry leaves only on a recorded fact: the same run fingerprint later passed (a failed gate
//! is dropped), a newer refusal of the same (subject, stage) replaced it, or a contract revision
//! aged it out (kept, marked `aged_out`). A change of the touched surface alone never removes
//! one. The last [`DEAD_END_CAP`] entries by seq are kept.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

use crate::dwp::plan::{Event, EventType};

pub const DEAD_END_CAP: usize = 50;

pub fn digest(events: &[Event], fingerprints: &HashMap<u64, String>, live_id: &str) -> Vec<Value> {
    let mut passing: HashSet<&str> = HashSet::new();
    let mut entries: Vec<(u64, Option<&str>, Map<String, Value>)> = Vec::new();
    // Latest refusal per (subject, stage), in order of first appearance of the key.
    let mut refusals: Vec<((&str, &str), &Event)> = Vec::new();
    let mut refusal_index: HashMap<(&str, &str), usize> = HashMap::new();
    for e in events {
        match e.kind {
            EventType::GateRun => {
                let fp = fingerprints.get(&e.seq).map(String::as_str);
                if e.raw.get("exit_code").and_then(Value::as_i64) == Some(0) {
                    if let Some(fp) = fp {
                        passing.insert(fp);
                    }
                    continue;
                }
                let mut m = base(e, "failed_gate");
                for key in ["task", "criterion", "command", "exit_code"] {
                    m.insert(key.into(), e.raw.get(key).cloned().unwrap_or(Value::Null));
                }
                m.insert(
                    "cause".into(),
                    e.raw.get("evidence_path").cloned().unwrap_or(Value::Null),
                );
                m.insert("run_fingerprint".into(), json!(fp));
                entries.push((e.seq, fp, m));
            }
            EventType::Refusal => {
                let key = (
                    e.str("subject").unwrap_or_default(),
                    e.str("stage").unwrap_or_default(),
                );
                match refusal_index.get(&key) {
                    Some(&i) => refusals[i].1 = e,
                    None => {
                        refusal_index.insert(key, refusals.len());
                        refusals.push((key, e));
                    }
                }
            }
            EventType::Adaptation if e.str("decision") == Some("refused") => {
                let mut m = base(e, "refused_adaptation");
                m.insert(
                    "subject".into(),
                    json!(format!("{} adaptation", e.str("kind").unwrap_or_default())),
                );
                m.insert(
                    "reason".into(),
                    e.raw.get("reason").cloned().unwrap_or(Value::Null),
                );
                m.insert("cause".into(), json!(format!("journal seq {}", e.seq)));
                entries.push((e.seq, None, m));
            }
            EventType::ControlPair if e.str("verdict") == Some("non_discriminating") => {
                let mut m = base(e, "non_discriminating_control");
                m.insert("criterion".into(), json!(e.str("criterion")));
                m.insert("verdict".into(), json!("non_discriminating"));
                m.insert(
                    "cause".into(),
                    e.raw.get("evidence_path").cloned().unwrap_or(Value::Null),
                );
                m.insert("recorded_contract_id".into(), json!(e.contract_id()));
                if e.contract_id() != live_id {
                    m.insert("aged_out".into(), json!("superseded contract revision"));
                }
                entries.push((e.seq, None, m));
            }
            _ => {}
        }
    }
    entries.retain(|(_, fp, _)| fp.is_none_or(|fp| !passing.contains(fp)));
    for (_, e) in refusals {
        let mut m = base(e, "refusal");
        for key in ["subject", "stage", "reason"] {
            m.insert(key.into(), e.raw.get(key).cloned().unwrap_or(Value::Null));
        }
        m.insert("cause".into(), json!(format!("journal seq {}", e.seq)));
        entries.push((e.seq, None, m));
    }
    entries.sort_by_key(|(seq, _, _)| *seq);
    let skip = entries.len().saturating_sub(DEAD_END_CAP);
    entries
        .into_iter()
        .skip(skip)
        .map(|(_, _, m)| Value::Object(m))
        .collect()
}

fn base(e: &Event, kind: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("kind".into(), json!(kind));
    m.insert("seq".into(), json!(e.seq));
    m.insert("ts".into(), json!(e.ts()));
    m
}
