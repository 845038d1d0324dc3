//! The closure decision per criterion (docs/dwp-spec.md, "Acceptance closure").
//!
//! A controlled criterion (control kind `regression`/`discrimination`) closes only on an
//! executed (`observed`), in-window `control_pair` whose verdict is `discriminating`; an ordinary
//! passing gate never closes it, so gate evidence is not even consulted for it here.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::dwp::plan::contract::Criterion;
use crate::dwp::plan::{Event, EventType};

/// Where a task's evidence window starts.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Seq of the task's latest `task_start`, if it was ever started.
    pub start: Option<u64>,
}

/// The command text a human sign-off gate carries.
pub const SIGNOFF_COMMAND: &str = "signoff (asserted, not executed)";

/// The latest `task_start` seq of `task`.
pub fn window(events: &[Event], task: &str) -> Window {
    let start = events
        .iter()
        .rev()
        .find(|e| e.kind == EventType::TaskStart && e.str("task") == Some(task))
        .map(|e| e.seq);
    Window { start }
}

/// The highest seq of an amendment listing `criterion` in `evidence_invalidated` (0 if none).
fn invalidation_floor(events: &[Event], criterion: &str) -> u64 {
    events
        .iter()
        .filter(|e| {
            e.kind == EventType::Amendment
                && e.list("evidence_invalidated")
                    .iter()
                    .any(|c| c == criterion)
        })
        .map(|e| e.seq)
        .max()
        .unwrap_or(0)
}

/// In-window accepted gate evidence for (task, criterion): the passing gate run with the highest
/// seq at or after the task's latest start and the criterion's latest invalidating amendment,
/// whose trust the criterion accepts. `Err(stale seqs)` when only out-of-window runs passed.
pub fn gate_evidence<'e>(
    events: &'e [Event],
    task: &str,
    criterion: &Criterion,
    window: Window,
) -> Result<&'e Event, Vec<u64>> {
    let floor = invalidation_floor(events, &criterion.id);
    let mut best: Option<&Event> = None;
    let mut stale = Vec::new();
    for e in events {
        if e.kind != EventType::GateRun
            || e.str("task") != Some(task)
            || e.str("criterion") != Some(criterion.id.as_str())
        {
            continue;
        }
        let accepted = e
            .trust()
            .is_some_and(|t| criterion.accepted_evidence.iter().any(|a| a == t));
        let passed = e.i64("exit_code") == Some(0);
        if !(accepted && passed) {
            continue;
        }
        let in_window = window.start.is_some_and(|s| e.seq >= s) && e.seq >= floor;
        if in_window {
            best = Some(e);
        } else {
            stale.push(e.seq);
        }
    }
    best.ok_or(stale)
}

/// [`gate_evidence`] per criterion of one task, each computed once (the acceptance entries and
/// the evidence list both ask, and each answer is a scan of the whole journal).
pub struct GateEvidence<'e> {
    events: &'e [Event],
    task: &'e str,
    window: Window,
    found: HashMap<String, Result<&'e Event, Vec<u64>>>,
}

impl<'e> GateEvidence<'e> {
    pub fn new(events: &'e [Event], task: &'e str, window: Window) -> GateEvidence<'e> {
        GateEvidence {
            events,
            task,
            window,
            found: HashMap::new(),
        }
    }

    pub fn of(&mut self, criterion: &Criterion) -> Result<&'e Event, Vec<u64>> {
        let (events, task, window) = (self.events, self.task, self.window);
        self.found
            .entry(criterion.id.clone())
            .or_insert_with(|| gate_evidence(events, task, criterion, window))
            .clone()
    }
}

/// The acceptance entry of one criterion for `task` (`gates` answers for the same task).
pub fn entry(
    events: &[Event],
    task: &str,
    criterion: &Criterion,
    gates: &mut GateEvidence,
) -> Value {
    let window = gates.window;
    let mut out = Map::new();
    out.insert("criterion".into(), json!(criterion.id));
    out.insert("task".into(), json!(task));
    out.insert(
        "control_kind".into(),
        json!(criterion.control_kind.as_deref().unwrap_or("none")),
    );
    let mechanism: String;
    let mut satisfied = false;
    if criterion.is_controlled() {
        let start = window.start.unwrap_or(0);
        let pairs: Vec<&Event> = events
            .iter()
            .filter(|e| {
                e.kind == EventType::ControlPair
                    && e.seq >= start
                    && e.str("criterion") == Some(criterion.id.as_str())
            })
            .collect();
        let closing = pairs
            .iter()
            .rev()
            .find(|e| e.str("verdict") == Some("discriminating") && e.trust() == Some("observed"));
        if let Some(pair) = closing {
            satisfied = true;
            mechanism = "control_pair".into();
            out.insert("via_seq".into(), json!(pair.seq));
            out.insert("verdict".into(), json!("discriminating"));
            out.insert(
                "evidence_path".into(),
                pair.value("evidence_path").unwrap_or(Value::Null),
            );
        } else if pairs.is_empty() {
            mechanism = "open (no in-window control pair)".into();
        } else if !pairs.iter().any(|e| e.trust() == Some("observed")) {
            mechanism = "open (pair is asserted, not executed - a claim is not behavior)".into();
        } else if pairs
            .iter()
            .any(|e| e.str("verdict") == Some("control_unavailable"))
        {
            mechanism =
                "blocked (control unavailable: the pair proves nothing and never rounds up)".into();
        } else {
            let last = pairs
                .last()
                .and_then(|e| e.str("verdict"))
                .unwrap_or_default();
            mechanism = format!("open (control did not discriminate: {last})");
        }
    } else {
        match gates.of(criterion) {
            Ok(run) => {
                satisfied = true;
                mechanism = if run.str("command") == Some(SIGNOFF_COMMAND) {
                    "signoff".into()
                } else {
                    "evidence".into()
                };
                out.insert("via_seq".into(), json!(run.seq));
                out.insert("trust".into(), json!(run.trust()));
                out.insert(
                    "evidence_path".into(),
                    run.value("evidence_path").unwrap_or(Value::Null),
                );
            }
            Err(stale) if !stale.is_empty() => {
                let seqs: Vec<String> = stale.iter().map(u64::to_string).collect();
                mechanism = format!("open (evidence stale: {})", seqs.join(", "));
            }
            Err(_) => mechanism = "open (no in-window accepted evidence)".into(),
        }
    }
    let mut mechanism = mechanism;
    if !satisfied && let Some(reconciliation) = latest_reconciliation(events, &criterion.id) {
        let authority = reconciliation.str("authority").unwrap_or_default();
        if amendment_authorities(events, &criterion.id).any(|a| a == authority) {
            satisfied = true;
            mechanism = "reconciled".into();
            out.insert("authority".into(), json!(authority));
        } else {
            mechanism =
                "blocked (reconciliation without amendment authority never closes evidence)".into();
        }
    }
    out.insert("satisfied".into(), json!(satisfied));
    out.insert("mechanism".into(), json!(mechanism));
    Value::Object(out)
}

/// The latest reconciliation whose `trigger` + `editor` text mentions the criterion.
fn latest_reconciliation<'e>(events: &'e [Event], criterion: &str) -> Option<&'e Event> {
    events.iter().rev().find(|e| {
        e.kind == EventType::Reconciliation
            && format!(
                "{}{}",
                e.str("trigger").unwrap_or_default(),
                e.str("editor").unwrap_or_default()
            )
            .contains(criterion)
    })
}

/// Authorities of amendments whose original or revised criterion text mentions the criterion.
fn amendment_authorities<'e>(
    events: &'e [Event],
    criterion: &'e str,
) -> impl Iterator<Item = &'e str> {
    events.iter().filter_map(move |e| {
        let mentions = e.kind == EventType::Amendment
            && (e
                .str("original_criterion")
                .is_some_and(|t| t.contains(criterion))
                || e.str("revised_criterion")
                    .is_some_and(|t| t.contains(criterion)));
        if mentions { e.str("authority") } else { None }
    })
}
