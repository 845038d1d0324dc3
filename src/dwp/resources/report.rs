//! `dwp resources report` (docs/dwp-spec.md, "Report rows and effective mode", "Pending, reserve and refusal"): per limit, where its counter comes from,
//! its effective mode, spent, pending, reserve, dispatch ceiling, whether it is over the ceiling,
//! and the first refusal.

use serde_json::{Map, Value, json};

use super::counters::{Family, JournalCounters};
use super::{Abilities, Num, reservations};
use crate::dwp::config::ABILITIES;
use crate::dwp::plan::contract::Limit;
use crate::dwp::plan::{Contract, Event};
use crate::dwp::pyfmt::py_repr;

/// One limit's row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub limit_id: String,
    pub unit: String,
    pub limit: Num,
    pub declared_enforcement: &'static str,
    pub family: Option<Family>,
    pub effective_mode: String,
    pub spent: Option<Num>,
    pub pending: f64,
    pub reserve: Num,
    pub dispatch_ceiling: Num,
    pub over_ceiling: bool,
    pub asserted_latest: Option<Num>,
}

impl Row {
    pub fn is_enforced(&self) -> bool {
        self.effective_mode.starts_with("enforced")
    }

    fn to_json(&self) -> Value {
        json!({
            "asserted_latest": self.asserted_latest.map(Num::to_value),
            "counter_source": self.family.map(|f| if f.is_journal() { "journal" } else { "host" }),
            "declared_enforcement": self.declared_enforcement,
            "dispatch_ceiling": self.dispatch_ceiling.to_value(),
            "effective_mode": self.effective_mode,
            "host_capability": self.family.and_then(Family::meter),
            "limit": self.limit.to_value(),
            "limit_id": self.limit_id,
            "over_ceiling": self.over_ceiling,
            "pending": Num::Float(self.pending).to_value(),
            "reserve": self.reserve.to_value(),
            "spent": self.spent.map(Num::to_value),
            "spent_source": if self.family.is_some_and(Family::is_journal) { "journal" } else { "host meter" },
            "unit": self.unit,
        })
    }

    /// The refusal detail for an over-ceiling row (also the detail of the `LIMIT: exhausted`
    /// record a host writes when it stops for it).
    pub fn refusal_detail(&self) -> String {
        let mut detail = format!(
            "enforced limit '{}' over its dispatchable ceiling: spent {} + pending {} > {} \
             (limit {} - reserve {})",
            self.limit_id,
            self.spent.unwrap_or(Num::Float(0.0)).py_str(),
            Num::Float(self.pending).py_str(),
            self.dispatch_ceiling.py_str(),
            self.limit.py_str(),
            self.reserve.py_str()
        );
        if self.spent.is_none() {
            detail.push_str(" [unmetered spend: pending-side enforcement only]");
        }
        detail
    }
}

/// The whole report.
#[derive(Debug, Clone)]
pub struct Report {
    pub host_capabilities: Vec<(String, bool)>,
    pub rows: Vec<Row>,
}

impl Report {
    /// The first over-ceiling row: the rule that refuses dispatch.
    pub fn refusal(&self) -> Option<&Row> {
        self.rows.iter().find(|r| r.over_ceiling)
    }

    pub fn to_json(&self) -> Value {
        let caps: Map<String, Value> = self
            .host_capabilities
            .iter()
            .map(|(k, v)| (k.clone(), Value::from(*v)))
            .collect();
        let refusal = self
            .refusal()
            .map(|row| json!({"rule": "limit-exhausted", "detail": row.refusal_detail()}));
        let unsupported: Vec<&str> = self
            .rows
            .iter()
            .filter(|r| r.family.is_none())
            .map(|r| r.limit_id.as_str())
            .collect();
        json!({
            "host_capabilities": caps,
            "limits": self.rows.iter().map(Row::to_json).collect::<Vec<_>>(),
            "refusal": refusal,
            "unsupported_counters": unsupported,
        })
    }
}

/// Builds the report from the live contract, the full journal and the effective abilities.
pub fn build(contract: &Contract, events: &[Event], abilities: &Abilities) -> Report {
    let mut fold = super::fold::Fold::default();
    for e in events {
        fold.add(e);
    }
    fold.report(contract, abilities)
}

/// The report of the state `fold` holds (the one way both `dwp resources report` and a host's
/// incremental check compute it).
pub(super) fn from_fold(
    contract: &Contract,
    fold: &super::fold::Fold,
    abilities: &Abilities,
) -> Report {
    let rows = contract
        .limits
        .iter()
        .map(|limit| row_of(limit, fold, abilities))
        .collect();
    Report {
        host_capabilities: ABILITIES
            .iter()
            .map(|a| (a.to_string(), abilities.has(a)))
            .collect(),
        rows,
    }
}

/// One limit's row of the state `fold` holds.
pub(super) fn row_of(limit: &Limit, fold: &super::fold::Fold, abilities: &Abilities) -> Row {
    let pending = reservations::pending(&limit.unit, &fold.reservations, &fold.settlements);
    row(limit, &fold.counters, pending, abilities)
}

fn row(limit: &Limit, counters: &JournalCounters, pending: f64, abilities: &Abilities) -> Row {
    let family = Family::of(&limit.unit);
    let (effective_mode, spent) = mode(limit, family, counters, abilities);
    let limit_value = Num::from_number(&limit.limit);
    // `limit.get("reserve") or 0`: a falsy reserve (absent, 0, 0.0) prints as the int 0.
    let reserve = limit
        .reserve
        .as_ref()
        .map(Num::from_number)
        .filter(|r| !r.is_zero())
        .unwrap_or(Num::Int(0));
    let dispatch_ceiling = limit_value.minus(reserve);
    let over_ceiling = effective_mode.starts_with("enforced")
        && spent.map_or(0.0, Num::as_f64) + pending > dispatch_ceiling.as_f64();
    Row {
        limit_id: limit.id.clone(),
        unit: limit.unit.clone(),
        limit: limit_value,
        declared_enforcement: if limit.enforced {
            "enforced"
        } else {
            "advisory"
        },
        family,
        effective_mode,
        spent,
        pending,
        reserve,
        dispatch_ceiling,
        over_ceiling,
        asserted_latest: counters.asserted.get(&limit.id).map(|s| s.value),
    }
}

/// The effective mode, first match wins (docs/dwp-spec.md, "Report rows and effective mode"), and the spent value it allows.
/// The first word (`advisory`, `enforced`, `enforced-pending-only`) is what consumers branch on.
fn mode(
    limit: &Limit,
    family: Option<Family>,
    counters: &JournalCounters,
    abilities: &Abilities,
) -> (String, Option<Num>) {
    if !limit.enforced {
        return ("advisory (declared advisory)".into(), None);
    }
    let Some(family) = family else {
        return (
            format!(
                "advisory (counter family unknown for unit {} — no meter is invented)",
                py_repr(&limit.unit)
            ),
            None,
        );
    };
    if family.is_journal() {
        return (
            "enforced (journal-computed counter)".into(),
            counters.journal_value(family, &limit.unit).map(Num::Float),
        );
    }
    let meter = family.meter().unwrap_or_default();
    if !abilities.has(meter) {
        return (
            format!(
                "advisory (host cannot meter: no {meter} capability — enforcement parity is \
                 never claimed)"
            ),
            None,
        );
    }
    match counters.observed.get(&limit.id) {
        None => (
            "enforced-pending-only (unmetered spend: a missing counter is not free usage)".into(),
            None,
        ),
        Some(sample) => (
            "enforced (observed meter sample)".into(),
            Some(sample.value),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Number;

    fn limit(id: &str, limit: Value, unit: &str, enforced: bool, reserve: Option<Value>) -> Limit {
        let num = |v: Value| match v {
            Value::Number(n) => n,
            _ => Number::from(0),
        };
        Limit {
            id: id.into(),
            limit: num(limit),
            unit: unit.into(),
            enforced,
            reserve: reserve.map(num),
        }
    }

    #[test]
    fn modes_first_match_wins() {
        let none = Abilities::default();
        let c = JournalCounters::default();
        let r = row(&limit("a", json!(5), "gpu-s", true, None), &c, 0.0, &none);
        assert_eq!(
            r.effective_mode,
            "advisory (counter family unknown for unit 'gpu-s' — no meter is invented)"
        );
        assert_eq!((r.spent, r.over_ceiling), (None, false));
        // A bare `h` unit is wall-clock hours computed from the journal (0.0 without events).
        let r = row(&limit("h", json!(5), "h", true, None), &c, 0.0, &none);
        assert_eq!(r.effective_mode, "enforced (journal-computed counter)");
        assert_eq!(r.spent, Some(Num::Float(0.0)));
        // A journal-family limit declared advisory never shows spent.
        let r = row(
            &limit("r", json!(5), "retries", false, None),
            &c,
            0.0,
            &none,
        );
        assert_eq!(
            (r.effective_mode.as_str(), r.spent),
            ("advisory (declared advisory)", None)
        );
    }

    #[test]
    fn reserve_and_ceiling_keep_python_number_kinds() {
        let c = JournalCounters::default();
        let a = Abilities::default();
        let r = row(
            &limit("a", json!(4000), "calls", true, Some(json!(0.0))),
            &c,
            0.0,
            &a,
        );
        assert_eq!(
            (r.reserve, r.dispatch_ceiling),
            (Num::Int(0), Num::Int(4000))
        );
        let r = row(
            &limit("a", json!(4000), "calls", true, Some(json!(3995.0))),
            &c,
            0.0,
            &a,
        );
        assert_eq!(r.dispatch_ceiling.py_str(), "5.0");
    }

    #[test]
    fn unmetered_pending_only_refuses_on_pending_alone() {
        let mut a = Abilities::default();
        a.values.insert("meter_spend".into(), true);
        let c = JournalCounters::default();
        let r = row(
            &limit("spend", json!(10), "usd", true, Some(json!(2))),
            &c,
            8.5,
            &a,
        );
        assert!(r.effective_mode.starts_with("enforced-pending-only"));
        assert!(r.over_ceiling);
        assert_eq!(
            r.refusal_detail(),
            "enforced limit 'spend' over its dispatchable ceiling: spent 0.0 + pending 8.5 > 8 \
             (limit 10 - reserve 2) [unmetered spend: pending-side enforcement only]"
        );
        // Exactly at the ceiling is still dispatchable.
        let r = row(
            &limit("spend", json!(10), "usd", true, Some(json!(2))),
            &c,
            8.0,
            &a,
        );
        assert!(!r.over_ceiling);
    }
}
