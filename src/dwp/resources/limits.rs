//! Exhaustion and recovery (dwp-details.md §5.4): `LIMIT:` observations, the hold they cause,
//! and recording them exactly once.

use std::collections::BTreeMap;

use super::records::{self, LimitRecord};
use crate::dwp::plan::writer::Decision;
use crate::dwp::plan::{Contract, Event, Journal};
use crate::error::{Error, Result};

/// An enforced limit whose latest `LIMIT:` record is an exhaustion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub limit: String,
    pub seq: u64,
    pub detail: Option<String>,
}

/// The latest `LIMIT:` record of every limit id (journal order, any actor).
pub fn latest(events: &[Event]) -> BTreeMap<String, LimitRecord> {
    let mut out = BTreeMap::new();
    for record in events.iter().filter_map(records::limit_record) {
        out.insert(record.limit.clone(), record);
    }
    out
}

/// The hold, if any: among limits declared `enforced` whose latest record is an exhaustion, the
/// one exhausted last. Advisory limits never hold; an exhaustion never satisfies a criterion
/// (nothing here touches acceptance).
pub fn hold(contract: &Contract, events: &[Event]) -> Option<Hold> {
    let latest = latest(events);
    contract
        .limits
        .iter()
        .filter(|l| l.enforced)
        .filter_map(|l| latest.get(&l.id))
        .filter(|r| r.exhausted)
        .max_by_key(|r| r.seq)
        .map(|r| Hold {
            limit: r.limit.clone(),
            seq: r.seq,
            detail: r.detail.clone(),
        })
}

/// Refuses a limit id the contract does not declare: exhaustion of an undeclared counter is
/// never recorded.
pub fn require_declared(contract: &Contract, limit: &str) -> Result<()> {
    if contract.limit(limit).is_some() {
        return Ok(());
    }
    let declared: Vec<&str> = contract.limits.iter().map(|l| l.id.as_str()).collect();
    Err(Error::not_found(format!(
        "limit {} is not declared in the contract {} — exhaustion or recovery of an \
         undeclared counter is never recorded",
        crate::dwp::config::py_repr(limit),
        contract.path.display()
    ))
    .with_hint(format!("declared limits: {}", declared.join(", "))))
}

/// The statement `exhaust`/`recover` appends.
pub fn statement(exhausted: bool, limit: &str, detail: Option<&str>) -> String {
    let verb = if exhausted { "exhausted" } else { "recovered" };
    records::with_detail(format!("LIMIT: {verb} {limit}"), detail)
}

/// Decides, on the journal as it stands under the writer lock, whether to append the record.
///
/// An identical record (same statement, trust, helper identity and contract id) that is not
/// older than the limit's latest opposite record is an identical replay: nothing is appended and
/// its seq is reported. Unlike the reference, re-exhausting after a recovery records a new
/// exhaustion, so the hold comes back (dwp-details.md §9.9).
pub fn decide(
    journal: &Journal,
    contract: &Contract,
    exhausted: bool,
    limit: &str,
    detail: Option<&str>,
) -> Result<Decision> {
    require_declared(contract, limit)?;
    let statement = statement(exhausted, limit, detail);
    let flipped_at = journal
        .events
        .iter()
        .filter_map(records::limit_record)
        .filter(|r| r.limit == limit && r.exhausted != exhausted)
        .map(|r| r.seq)
        .max()
        .unwrap_or(0);
    Ok(
        match records::identical(&journal.events, &contract.id, &statement, flipped_at) {
            Some(existing) => Decision::Existing(existing.clone()),
            None => Decision::Append(records::observation(&statement)),
        },
    )
}
