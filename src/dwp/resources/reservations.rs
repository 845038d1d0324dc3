//! Reservations and their settlement exactly once (docs/dwp-spec.md, "Pending, reserve and refusal", "Reservation settlement").
//!
//! An authorized `adaptation` with a `resource_impact` reserves budget: pending spend keyed
//! `seq-<its seq>`. A cancelled child's reservation is settled once, as `released` (it never
//! consumed the budget, so it stops being pending) or `committed` (it did, so it keeps counting:
//! a missing meter sample is not free usage).

use std::collections::BTreeMap;

use serde_json::Value;

use super::records::{self, Settlement};
use crate::dwp::plan::writer::Decision;
use crate::dwp::plan::{Contract, Event, EventType, Journal};
use crate::error::{Error, Result};

pub const DISPOSITIONS: [&str; 2] = ["released", "committed"];

/// One reservation: an authorized adaptation's declared resource impact.
#[derive(Debug, Clone, PartialEq)]
pub struct Reservation {
    pub key: String,
    pub seq: u64,
    /// `resource_impact.declared` when it is a number.
    pub declared: Option<f64>,
    pub unit: String,
}

/// Every reservation, in journal order.
pub fn reservations(events: &[Event]) -> Vec<Reservation> {
    events.iter().filter_map(reservation).collect()
}

/// The reservation `e` makes, if it is an authorized adaptation with a resource impact.
pub fn reservation(e: &Event) -> Option<Reservation> {
    if e.kind != EventType::Adaptation || e.str("decision") != Some("authorized") {
        return None;
    }
    let impact = e.value("resource_impact")?;
    let impact = impact.as_object()?;
    Some(Reservation {
        key: format!("seq-{}", e.seq),
        seq: e.seq,
        declared: impact
            .get("declared")
            .filter(|v| v.is_number())
            .and_then(Value::as_f64),
        unit: impact
            .get("unit")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
    })
}

/// The settlement of each key: its first `RESERVATION:` record (a later conflicting record,
/// written by some other tool, cannot undo it).
pub fn settlements(events: &[Event]) -> BTreeMap<String, Settlement> {
    let mut out = BTreeMap::new();
    for s in events.iter().filter_map(records::settlement) {
        out.entry(s.key.clone()).or_insert(s);
    }
    out
}

/// Pending spend in `unit`: Σ declared (> 0) over the reservations in exactly that unit that were
/// not released, summed in journal order from `0.0` like the reference.
pub fn pending(
    unit: &str,
    reservations: &[Reservation],
    settlements: &BTreeMap<String, Settlement>,
) -> f64 {
    reservations
        .iter()
        .filter(|r| r.unit == unit)
        .filter(|r| {
            settlements
                .get(&r.key)
                .is_none_or(|s| s.disposition != "released")
        })
        .filter_map(|r| r.declared.filter(|d| *d > 0.0))
        .fold(0.0, |sum, d| sum + d)
}

/// The statement `settle` appends.
pub fn statement(key: &str, disposition: &str, detail: Option<&str>) -> String {
    records::with_detail(format!("RESERVATION: {key}: {disposition}"), detail)
}

/// Decides a settlement on the journal as it stands under the writer lock: an unknown key is
/// refused, a settlement conflicting with an earlier one is refused (never decided), an identical
/// replay reports the earlier record, and anything else is appended.
pub fn decide(
    journal: &Journal,
    contract: &Contract,
    key: &str,
    disposition: &str,
    detail: Option<&str>,
) -> Result<Decision> {
    if !DISPOSITIONS.contains(&disposition) {
        return Err(Error::usage(format!(
            "disposition '{disposition}' outside released/committed"
        )));
    }
    let known = reservations(&journal.events);
    if !known.iter().any(|r| r.key == key) {
        let keys: Vec<&str> = known.iter().map(|r| r.key.as_str()).collect();
        return Err(Error::not_found(format!(
            "no reservation '{key}' in this plan — a reservation is an authorized adaptation \
             with a resource_impact, keyed seq-<its seq>"
        ))
        .with_hint(if keys.is_empty() {
            "this plan's journal holds no reservations".to_string()
        } else {
            format!("reservations: {}", keys.join(", "))
        }));
    }
    let conflict = journal
        .events
        .iter()
        .filter_map(records::settlement)
        .find(|s| s.key == key && s.disposition != disposition);
    if let Some(prior) = conflict {
        return Err(Error::conflict(format!(
            "reservation '{key}' already settled as '{}' at seq {} — settling again as \
             '{disposition}' is the double-charge ambiguity; refused",
            prior.disposition, prior.seq
        ))
        .with_hint(
            "investigate the cancelled child's real usage; a settlement is never decided twice",
        ));
    }
    let statement = statement(key, disposition, detail);
    Ok(
        match records::identical(&journal.events, &contract.id, &statement, 0) {
            Some(existing) => Decision::Existing(existing.clone()),
            None => Decision::Append(records::observation(&statement)),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(seq: u64, kind: EventType, raw: Value) -> Event {
        let Value::Object(raw) = raw else { panic!() };
        Event::from_map(seq, kind, &raw).unwrap()
    }

    #[test]
    fn pending_excludes_released_and_other_units() {
        let events = vec![
            event(
                1,
                EventType::Adaptation,
                json!({"decision": "authorized", "resource_impact": {"declared": 1.5, "unit": "usd"}}),
            ),
            event(
                2,
                EventType::Adaptation,
                json!({"decision": "authorized", "resource_impact": {"declared": 2, "unit": "usd"}}),
            ),
            event(
                3,
                EventType::Adaptation,
                json!({"decision": "refused", "resource_impact": {"declared": 4, "unit": "usd"}}),
            ),
            event(
                4,
                EventType::Adaptation,
                json!({"decision": "authorized", "resource_impact": {"declared": 8, "unit": "USD"}}),
            ),
            event(
                5,
                EventType::Adaptation,
                json!({"decision": "authorized", "resource_impact": {"declared": 0, "unit": "usd"}}),
            ),
            event(6, EventType::Adaptation, json!({"decision": "authorized"})),
            event(
                7,
                EventType::Observation,
                json!({"statement": "RESERVATION: seq-1: released"}),
            ),
            event(
                8,
                EventType::Observation,
                json!({"statement": "RESERVATION: seq-2: committed"}),
            ),
            event(
                9,
                EventType::Observation,
                json!({"statement": "RESERVATION: seq-2: released"}),
            ),
        ];
        let r = reservations(&events);
        assert_eq!(
            r.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
            ["seq-1", "seq-2", "seq-4", "seq-5"]
        );
        let s = settlements(&events);
        assert_eq!(s["seq-2"].disposition, "committed");
        assert_eq!(pending("usd", &r, &s), 2.0);
        assert_eq!(pending("usd", &r, &BTreeMap::new()), 3.5);
        assert_eq!(pending("USD", &r, &s), 8.0);
        assert_eq!(pending("tokens", &r, &s), 0.0);
    }
}
