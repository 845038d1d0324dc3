//! The per-task context manifest (docs/dwp-spec.md, "The context manifest").
//!
//! A view derived from the live contract, the whole journal (archives + live), the evidence
//! sidecar and the bytes of the task's touched surface — nothing else: no clock, no environment,
//! no config, nothing outside the plan and its repository. It takes no lock and is never stored
//! as plan state. Deriving twice from the same records gives identical bytes because every input
//! is a record and the output goes through the canonical pretty serializer.

mod acceptance;
mod dead_ends;
pub mod markdown;
mod surface;

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::dwp::plan::contract::Contract;
use crate::dwp::plan::{Event, EventType, Journal, Plan, evidence, journal};
use crate::error::{Error, Result};

pub use dead_ends::DEAD_END_CAP;

pub const SCHEMA: &str = "https://deepworkplan.com/schema/context-manifest/v6.json";
pub const DERIVED_BY: &str = "dwp context_manifest.py";
pub const MANDATORY: [&str; 3] = ["authorization", "repository_rules", "acceptance"];
pub const FRESHNESS_RULE: &str =
    "a stored fingerprint different from the current one invalidates the summary that carries it";

/// Everything a derivation reads, loaded once.
pub struct Records {
    pub plan: Plan,
    pub contract: Contract,
    pub journal: Journal,
    /// `evidence.jsonl`: seq → run fingerprint.
    pub fingerprints: HashMap<u64, String>,
}

impl Records {
    /// Reads and validates a plan's records (no lock: appends are single-line and a torn last
    /// line is ignored, so a concurrent writer never makes this read inconsistent).
    pub fn load(dir: &Path) -> Result<Records> {
        let plan = Plan::open(dir)?;
        let contract = plan.contract()?;
        let journal = journal::read(&plan.dir, &contract)?;
        let fingerprints = evidence::read(&plan.dir)?;
        Ok(Records {
            plan,
            contract,
            journal,
            fingerprints,
        })
    }

    fn events(&self) -> &[Event] {
        &self.journal.events
    }
}

/// The sections `--sections` may name: the mandatory ones, the one optional one, and those that
/// are always present (naming them changes nothing). Sorted, as the document's keys are.
pub const SECTIONS: [&str; 10] = [
    "acceptance",
    "as_of",
    "authorization",
    "dead_ends",
    "evidence",
    "freshness",
    "history_triggers",
    "next_action",
    "repository_rules",
    "touched_surface",
];

/// Which optional sections to include, from `--sections a,b,…` (None = all). Refuses a name
/// that is no section of the manifest (a typo would otherwise silently drop
/// `history_triggers`) and a list that leaves out a mandatory section. Empty items are skipped.
pub fn parse_sections(arg: Option<&str>) -> Result<Option<Vec<String>>> {
    let Some(arg) = arg else { return Ok(None) };
    let items: Vec<String> = arg
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();
    let unknown: Vec<&str> = items
        .iter()
        .map(String::as_str)
        .filter(|i| !SECTIONS.contains(i))
        .collect();
    if !unknown.is_empty() {
        return Err(Error::usage(format!(
            "--sections names unknown section(s) {} - valid sections: {}",
            unknown.join(", "),
            SECTIONS.join(", ")
        ))
        .with_hint(format!(
            "{} are mandatory, history_triggers is the only optional one, the others are always \
             present",
            MANDATORY.join(", ")
        )));
    }
    let missing: Vec<&str> = MANDATORY
        .iter()
        .copied()
        .filter(|m| !items.iter().any(|i| i == m))
        .collect();
    if !missing.is_empty() {
        return Err(Error::usage(format!(
            "the manifest never drops mandatory section(s) {} - context pruning cannot hide the \
             acceptance or authorization boundary",
            missing.join(", ")
        ))
        .with_hint(format!(
            "list them in --sections, e.g. --sections {}",
            MANDATORY.join(",")
        )));
    }
    Ok(Some(items))
}

/// Derives the manifest of `task` as a JSON document.
pub fn derive(records: &Records, task_id: &str, sections: Option<&[String]>) -> Result<Value> {
    let contract = &records.contract;
    let events = records.events();
    let task = contract.task(task_id).ok_or_else(|| {
        Error::not_found(format!(
            "task '{task_id}' is not in the contract - the manifest never guesses a task the \
             plan did not declare"
        ))
        .with_hint(format!(
            "declared tasks: {}",
            contract
                .tasks
                .iter()
                .map(|t| t.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;

    let mut doc = Map::new();
    doc.insert("schema".into(), json!(SCHEMA));
    doc.insert("derived_by".into(), json!(DERIVED_BY));
    doc.insert("plan".into(), json!(contract.plan));
    doc.insert("contract_id".into(), json!(contract.id));
    doc.insert(
        "contract_revision".into(),
        contract.raw.get("revision").cloned().unwrap_or(Value::Null),
    );
    doc.insert("task".into(), json!(task.id));
    doc.insert(
        "as_of".into(),
        json!({
            "last_seq": events.iter().map(|e| e.seq).max().unwrap_or(0),
            "event_ts": events.iter().map(|e| e.ts()).max().unwrap_or(""),
        }),
    );

    let approvals: Vec<Value> = events
        .iter()
        .filter(|e| e.kind == EventType::Approval && e.contract_id() == contract.id)
        .map(|e| {
            json!({
                "authority": e.value("authority"),
                "mechanism": e.value("mechanism"),
                "seq": e.seq,
                "ts": e.ts(),
            })
        })
        .collect();
    let has_approval = !approvals.is_empty();
    doc.insert(
        "authorization".into(),
        json!({
            "approvals": approvals,
            "contract_authorization": contract.raw.get("authorization"),
            "permissions": contract.raw.get("permissions"),
        }),
    );
    doc.insert(
        "repository_rules".into(),
        json!({
            "scope": contract.raw.get("scope"),
            "invariants": invariants(contract, events),
            "dependencies": contract.raw.get("dependencies"),
        }),
    );

    // This task's criteria: those whose owner (first task naming it in gate_intent) is this task.
    let window = acceptance::window(events, &task.id);
    let mut gates = acceptance::GateEvidence::new(events, &task.id, window);
    let entries: Vec<Value> = contract
        .criteria
        .iter()
        .filter(|c| contract.owner_of(&c.id).is_some_and(|t| t.id == task.id))
        .map(|c| acceptance::entry(events, &task.id, c, &mut gates))
        .collect();

    let mut evidence_list = Vec::new();
    let mut seen = Vec::new();
    for intent in &task.gate_intent {
        if seen.contains(&intent.criterion.as_str()) {
            continue;
        }
        seen.push(intent.criterion.as_str());
        let Some(criterion) = contract.criterion(&intent.criterion) else {
            continue;
        };
        if let Ok(run) = gates.of(criterion) {
            let path = run.value("evidence_path").unwrap_or(Value::Null);
            let resolves = path.as_str().is_some_and(|p| {
                records.plan.dir.join(p).is_file() || records.plan.root.join(p).is_file()
            });
            evidence_list.push(json!({
                "criterion": criterion.id,
                "seq": run.seq,
                "trust": run.trust(),
                "evidence_path": path,
                "pointer_resolves": resolves,
            }));
        }
    }

    let surface = surface::files(&records.plan.root, &task.touched_surface)?;
    let missing: Vec<&str> = surface
        .files
        .iter()
        .filter(|(p, h)| h.is_none() && !surface.outside.contains(*p))
        .map(|(p, _)| p.as_str())
        .collect();
    let mut reasons = Vec::new();
    if !missing.is_empty() {
        reasons.push(format!(
            "touched-surface entries missing on disk: {}",
            missing.join(", ")
        ));
    }
    if !surface.outside.is_empty() {
        let outside: Vec<&str> = surface.outside.iter().map(String::as_str).collect();
        reasons.push(format!(
            "touched-surface entries outside the repository (not read): {}",
            outside.join(", ")
        ));
    }
    if evidence_list.is_empty() {
        reasons.push(
            "no in-window accepted evidence yet - the impact of the surface is unmapped".into(),
        );
    }
    let files_value: Map<String, Value> = surface
        .files
        .into_iter()
        .map(|(k, v)| (k, v.map_or(Value::Null, Value::String)))
        .collect();
    let fingerprint = inputs_fingerprint(&contract.id, &files_value);

    doc.insert(
        "next_action".into(),
        next_action(
            records,
            task,
            has_approval,
            window.start.is_some(),
            &entries,
        ),
    );
    doc.insert("acceptance".into(), Value::Array(entries));
    doc.insert("evidence".into(), Value::Array(evidence_list));
    doc.insert(
        "touched_surface".into(),
        json!({
            "files": files_value,
            "widen_discovery": !reasons.is_empty(),
            "widen_reasons": reasons,
        }),
    );
    doc.insert(
        "dead_ends".into(),
        Value::Array(dead_ends::digest(
            events,
            &records.fingerprints,
            &contract.id,
        )),
    );
    doc.insert(
        "freshness".into(),
        json!({"inputs_fingerprint": fingerprint, "rule": FRESHNESS_RULE}),
    );
    if sections.is_none_or(|s| s.iter().any(|x| x == "history_triggers")) {
        doc.insert(
            "history_triggers".into(),
            history_triggers(contract, events, &task.id),
        );
    }
    Ok(Value::Object(doc))
}

/// `inputs_fingerprint`: SHA-256 hex of the compact canonical
/// `{"contract_id": …, "files": <touched_surface.files>}`. Only the declared surface takes part.
pub fn inputs_fingerprint(contract_id: &str, files: &Map<String, Value>) -> String {
    crate::canonical::hash_hex(&json!({"contract_id": contract_id, "files": files}))
}

/// The JSON bytes of a manifest: sorted keys, two-space indent, ASCII-escaped, one trailing
/// newline.
pub fn to_bytes(doc: &Value) -> String {
    let mut out = crate::canonical::to_pretty(doc);
    out.push('\n');
    out
}

/// Each declared invariant with its latest evaluation (docs/dwp-spec.md, "Invariant state").
fn invariants(contract: &Contract, events: &[Event]) -> Vec<Value> {
    let reference = events
        .iter()
        .filter(|e| e.kind == EventType::TaskStart)
        .map(|e| e.seq)
        .max()
        .or_else(|| {
            events
                .iter()
                .filter(|e| e.kind == EventType::Approval)
                .map(|e| e.seq)
                .max()
        })
        .unwrap_or(0);
    contract
        .invariants
        .iter()
        .map(|inv| {
            let pass = format!("{}: pass", inv.id);
            let fail = format!("{}: fail", inv.id);
            let fail_reason = format!("{}: fail:", inv.id);
            let latest = events.iter().rev().find(|e| {
                e.kind == EventType::Observation
                    && e.str("statement")
                        .is_some_and(|s| s == pass || s == fail || s.starts_with(&fail_reason))
            });
            let mut m = Map::new();
            m.insert("id".into(), json!(inv.id));
            m.insert("statement".into(), json!(inv.statement));
            match latest {
                None => {
                    m.insert("state".into(), json!("unevaluated"));
                    m.insert("seq".into(), Value::Null);
                }
                Some(e) if e.seq < reference => {
                    m.insert("state".into(), json!("stale"));
                    m.insert("seq".into(), json!(e.seq));
                }
                Some(e) => {
                    let statement = e.str("statement").unwrap_or_default();
                    let state = if statement == pass { "pass" } else { "fail" };
                    m.insert("state".into(), json!(state));
                    m.insert("seq".into(), json!(e.seq));
                    m.insert("detail".into(), json!(statement));
                }
            }
            Value::Object(m)
        })
        .collect()
}

/// The next-action ladder (docs/dwp-spec.md, "Next-action ladder"): fixed order, first match wins. An ordinary
/// passed gate is never shown as closing a controlled criterion: controlled entries only close
/// through their control pair. Steps that need a ledger act name the DWP ledger verb; `dwp`
/// itself records no approvals, starts or gates.
fn next_action(
    records: &Records,
    task: &crate::dwp::plan::contract::Task,
    has_approval: bool,
    started: bool,
    entries: &[Value],
) -> Value {
    let dir = records.plan.dir.display();
    let t = &task.id;
    if !has_approval {
        let id12: String = records.contract.id.chars().take(12).collect();
        return json!({
            "step": "approval",
            "action": format!(
                "record the materialization-time approval citing contract_id {id12} - \
                 task_start is refused without it (the DWP ledger records approvals; a revised \
                 contract needs a new one)"
            ),
        });
    }
    if !started {
        return json!({
            "step": "start",
            "action": format!(
                "start the task with the DWP ledger (start --plan {dir} --task {t}) - captures \
                 the starting fingerprint a control pair materializes"
            ),
        });
    }
    let open: Vec<&Value> = entries
        .iter()
        .filter(|e| e["satisfied"] != Value::Bool(true))
        .collect();
    let blocked: Vec<String> = open
        .iter()
        .filter(|e| {
            e["mechanism"]
                .as_str()
                .is_some_and(|m| m.starts_with("blocked"))
        })
        .map(|e| {
            format!(
                "{} ({})",
                e["criterion"].as_str().unwrap_or_default(),
                e["mechanism"].as_str().unwrap_or_default()
            )
        })
        .collect();
    if !blocked.is_empty() {
        return json!({
            "step": "authority",
            "action": format!(
                "blocked criteria need an authority act (amendment) or a changed world, not \
                 more evidence: {}",
                blocked.join("; ")
            ),
        });
    }
    let id_of = |e: &&Value| e["criterion"].as_str().unwrap_or_default().to_string();
    let controlled: Vec<String> = open
        .iter()
        .filter(|e| {
            matches!(
                e["control_kind"].as_str(),
                Some("regression" | "discrimination")
            )
        })
        .map(id_of)
        .collect();
    let check_of = |criterion: &str| {
        task.gate_intent
            .iter()
            .find(|g| g.criterion == criterion)
            .map(|g| g.check.clone())
            .unwrap_or_else(|| "<command>".into())
    };
    if let Some(first) = controlled.first() {
        return json!({
            "step": "control",
            "criteria": controlled,
            "action": format!(
                "execute the declared control pair (DWP outcomes: control --plan {dir} --task {t} \
                 --criterion {first} --command {} --artifact <path>) - an ordinary passing gate \
                 never closes a controlled criterion",
                check_of(first)
            ),
        });
    }
    let unsatisfied: Vec<String> = open.iter().map(id_of).collect();
    if let Some(first) = unsatisfied.first() {
        return json!({
            "step": "evidence",
            "criteria": unsatisfied,
            "action": format!(
                "produce in-window accepted evidence (DWP ledger: gate --plan {dir} --task {t} \
                 --criterion {first} --json {})",
                check_of(first)
            ),
        });
    }
    json!({
        "step": "complete",
        "action": format!(
            "all criteria satisfied on in-window accepted evidence: complete the task with the \
             DWP ledger (complete --plan {dir} --task {t})"
        ),
    })
}

/// When more than this manifest should be loaded (docs/dwp-spec.md, "History triggers").
fn history_triggers(contract: &Contract, events: &[Event], task: &str) -> Value {
    let mut out = vec![json!({"trigger": "none", "loads": "this manifest alone"})];
    if let Some(handoff) = contract.handoff() {
        let mut pairs: Vec<(&String, &Value)> = handoff.iter().collect();
        pairs.sort_by(|a, b| a.0.cmp(b.0));
        let text: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
            .collect();
        out.push(json!({
            "trigger": format!("handoff ({})", text.join("; ")),
            "loads": "state.json + this manifest + the handoff observation",
        }));
    }
    if events.iter().any(|e| {
        e.kind == EventType::Amendment && e.list("affected_tasks").iter().any(|t| t == task)
    }) {
        out.push(json!({
            "trigger": "an amendment affects this task",
            "loads": "the amendment event and the revised criterion text",
        }));
    }
    Value::Array(out)
}

#[cfg(test)]
mod tests;
