//! The resource frame's view of a journal, folded one event at a time: the journal counters,
//! the reservations and their settlements, and the latest `LIMIT:` record of every limit.
//!
//! `dwp resources report` folds the whole journal once; a host that checks its limits before
//! every model call (kxen-agent) keeps one [`Fold`] and adds only the events appended since,
//! so a check costs the same on a plan of ten events or ten thousand. Both then compute the
//! report with the same code ([`Fold::report`]).

use std::collections::BTreeMap;

use super::Abilities;
use super::counters::JournalCounters;
use super::limits::Hold;
use super::records::{self, LimitRecord, Settlement};
use super::report::{self, Report, Row};
use super::reservations::{self, Reservation};
use crate::dwp::plan::contract::Limit;
use crate::dwp::plan::{Contract, Event};

/// Everything the report and the hold read, after the events folded so far.
#[derive(Debug, Clone, Default)]
pub struct Fold {
    pub(super) counters: JournalCounters,
    pub(super) reservations: Vec<Reservation>,
    /// The first settlement of each key (a later conflicting record cannot undo it).
    pub(super) settlements: BTreeMap<String, Settlement>,
    /// The latest `LIMIT:` record of every limit id (journal order, any actor).
    latest: BTreeMap<String, LimitRecord>,
    /// How many events were folded.
    pub events: usize,
}

impl Fold {
    /// Folds the next event (journal order).
    pub fn add(&mut self, e: &Event) {
        self.events += 1;
        self.counters.add(e);
        if let Some(r) = reservations::reservation(e) {
            self.reservations.push(r);
        }
        if let Some(s) = records::settlement(e) {
            self.settlements.entry(s.key.clone()).or_insert(s);
        }
        if let Some(r) = records::limit_record(e) {
            self.latest.insert(r.limit.clone(), r);
        }
    }

    /// The `LIMIT:` record `e` is, if any (what [`Fold::add`] would record for it).
    pub fn limit_record(e: &Event) -> Option<LimitRecord> {
        records::limit_record(e)
    }

    /// The report of the folded state (`dwp resources report`).
    pub fn report(&self, contract: &Contract, abilities: &Abilities) -> Report {
        report::from_fold(contract, self, abilities)
    }

    /// One limit's row of the folded state.
    pub fn row(&self, limit: &Limit, abilities: &Abilities) -> Row {
        report::row_of(limit, self, abilities)
    }

    /// The latest `LIMIT:` record of `limit`.
    pub fn latest(&self, limit: &str) -> Option<&LimitRecord> {
        self.latest.get(limit)
    }

    /// The hold of the folded state: what [`super::limits::hold`] says of the same events.
    pub fn hold(&self, contract: &Contract) -> Option<Hold> {
        super::limits::hold_of(contract, &self.latest)
    }
}
