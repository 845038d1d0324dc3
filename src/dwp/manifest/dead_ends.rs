//! The dead-end digest (docs/dwp-spec.md, "Dead ends"): what was tried and failed, kept so nobody retries
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

/// What kind of dead end an event is (decided in one pass; entries are built only for the
/// survivors of the cap, so a journal with 100k failed gates stays cheap).
#[derive(Clone, Copy)]
enum Kind {
    FailedGate,
    Refusal,
    RefusedAdaptation,
    NonDiscriminating,
}

pub fn digest(events: &[Event], fingerprints: &HashMap<u64, String>, live_id: &str) -> Vec<Value> {
    let mut passing: HashSet<&str> = HashSet::new();
    let mut found: Vec<(Kind, &Event)> = Vec::new();
    // Latest refusal per (subject, stage).
    let mut refusals: HashMap<(&str, &str), &Event> = HashMap::new();
    for e in events {
        match e.kind {
            EventType::GateRun => {
                if e.i64("exit_code") == Some(0) {
                    if let Some(fp) = fingerprints.get(&e.seq) {
                        passing.insert(fp.as_str());
                    }
                } else {
                    found.push((Kind::FailedGate, e));
                }
            }
            EventType::Refusal => {
                let key = (
                    e.str("subject").unwrap_or_default(),
                    e.str("stage").unwrap_or_default(),
                );
                refusals.insert(key, e);
            }
            EventType::Adaptation if e.str("decision") == Some("refused") => {
                found.push((Kind::RefusedAdaptation, e));
            }
            EventType::ControlPair if e.str("verdict") == Some("non_discriminating") => {
                found.push((Kind::NonDiscriminating, e));
            }
            _ => {}
        }
    }
    // Drop failed gates whose run fingerprint later (or ever) passed: same inputs, now passing.
    found.retain(|(kind, e)| {
        !matches!(kind, Kind::FailedGate)
            || fingerprints
                .get(&e.seq)
                .is_none_or(|fp| !passing.contains(fp.as_str()))
    });
    found.extend(refusals.into_values().map(|e| (Kind::Refusal, e)));
    found.sort_by_key(|(_, e)| e.seq);
    let skip = found.len().saturating_sub(DEAD_END_CAP);
    found
        .into_iter()
        .skip(skip)
        .map(|(kind, e)| Value::Object(entry(kind, e, fingerprints, live_id)))
        .collect()
}

fn entry(
    kind: Kind,
    e: &Event,
    fingerprints: &HashMap<u64, String>,
    live_id: &str,
) -> Map<String, Value> {
    let get = |key: &str| e.value(key).unwrap_or(Value::Null);
    let journal_seq = json!(format!("journal seq {}", e.seq));
    let mut m = Map::new();
    m.insert("seq".into(), json!(e.seq));
    m.insert("ts".into(), json!(e.ts()));
    match kind {
        Kind::FailedGate => {
            m.insert("kind".into(), json!("failed_gate"));
            for key in ["task", "criterion", "command", "exit_code"] {
                m.insert(key.into(), get(key));
            }
            m.insert("cause".into(), get("evidence_path"));
            m.insert("run_fingerprint".into(), json!(fingerprints.get(&e.seq)));
        }
        Kind::Refusal => {
            m.insert("kind".into(), json!("refusal"));
            for key in ["subject", "stage", "reason"] {
                m.insert(key.into(), get(key));
            }
            m.insert("cause".into(), journal_seq);
        }
        Kind::RefusedAdaptation => {
            m.insert("kind".into(), json!("refused_adaptation"));
            m.insert(
                "subject".into(),
                json!(format!("{} adaptation", e.str("kind").unwrap_or_default())),
            );
            m.insert("reason".into(), get("reason"));
            m.insert("cause".into(), journal_seq);
        }
        Kind::NonDiscriminating => {
            m.insert("kind".into(), json!("non_discriminating_control"));
            m.insert("criterion".into(), get("criterion"));
            m.insert("verdict".into(), json!("non_discriminating"));
            m.insert("cause".into(), get("evidence_path"));
            m.insert("recorded_contract_id".into(), json!(e.contract_id()));
            if e.contract_id() != live_id {
                m.insert("aged_out".into(), json!("superseded contract revision"));
            }
        }
    }
    m
}
