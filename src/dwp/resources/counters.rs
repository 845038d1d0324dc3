//! Counter families and the journal-observable counters (docs/dwp-spec.md, "Counter families").
//!
//! A limit is only enforced when it names a real metering source: either the plan's own records
//! (wall-clock span, gate retries, dispatch calls) or an observed host-meter sample. Units outside
//! every family get no counter at all — a meter is never invented.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::dwp::plan::{Event, EventType};

/// What counts a limit's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Money: counted only by a host meter (`meter_spend`).
    Spend,
    /// Provider tokens: counted only by a host meter (`meter_tokens`).
    Tokens,
    /// Hours between the first and the last journal event.
    WallClock,
    /// Gate runs beyond the first per (task, criterion).
    Retries,
    /// `selection` events.
    Dispatch,
}

impl Family {
    /// Classifies a unit: lower-cased, padded with one space each side, matched by substring,
    /// first family wins (so `" h"` catches a bare `h` unit but not `hash`).
    pub fn of(unit: &str) -> Option<Family> {
        let padded = format!(" {} ", unit.to_lowercase());
        let has = |subs: &[&str]| subs.iter().any(|s| padded.contains(s));
        if has(&["usd", "$", "cost"]) {
            Some(Family::Spend)
        } else if has(&["token"]) {
            Some(Family::Tokens)
        } else if has(&["hour", "wall", "time", " h"]) {
            Some(Family::WallClock)
        } else if has(&["retr", "attempt"]) {
            Some(Family::Retries)
        } else if has(&["call", "dispatch", "invocation"]) {
            Some(Family::Dispatch)
        } else {
            None
        }
    }

    /// The host meter ability a host family needs; `None` for journal families.
    pub fn meter(self) -> Option<&'static str> {
        match self {
            Family::Spend => Some("meter_spend"),
            Family::Tokens => Some("meter_tokens"),
            _ => None,
        }
    }

    pub fn is_journal(self) -> bool {
        self.meter().is_none()
    }
}

/// A host-meter sample of one limit.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub seq: u64,
    pub value: super::Num,
}

/// Everything the report needs from the journal, gathered in one pass.
#[derive(Debug, Clone, Default)]
pub struct JournalCounters {
    /// Earliest and latest `ts` (compared as strings, as the reference sorts them).
    first_ts: Option<String>,
    last_ts: Option<String>,
    ts_count: usize,
    gate_runs: u64,
    /// Distinct (task, criterion) pairs among gate runs, by task.
    gate_pairs: HashMap<String, HashSet<String>>,
    distinct_pairs: u64,
    selections: u64,
    /// Latest observed (host-meter) sample per `limit_id`.
    pub observed: BTreeMap<String, Sample>,
    /// Latest non-observed sample per `limit_id` (advisory information only).
    pub asserted: BTreeMap<String, Sample>,
}

impl JournalCounters {
    pub fn from_events<'e>(events: impl IntoIterator<Item = &'e Event>) -> JournalCounters {
        let mut c = JournalCounters::default();
        for e in events {
            c.add(e);
        }
        c
    }

    /// Folds one more event (journal order) into the counters.
    pub fn add(&mut self, e: &Event) {
        let ts = e.ts();
        self.ts_count += 1;
        // Reuse the buffers: on an append-only journal the latest ts changes on every event.
        for (slot, better) in [
            (&mut self.first_ts, std::cmp::Ordering::Less),
            (&mut self.last_ts, std::cmp::Ordering::Greater),
        ] {
            match slot {
                Some(cur) if ts.cmp(cur.as_str()) == better => {
                    cur.clear();
                    cur.push_str(ts);
                }
                Some(_) => {}
                None => *slot = Some(ts.to_string()),
            }
        }
        match e.kind {
            EventType::GateRun => {
                self.gate_runs += 1;
                let task = e.str("task").unwrap_or_default();
                let criterion = e.str("criterion").unwrap_or_default();
                // Looked up by reference first: most gate runs repeat a known pair.
                let known = self
                    .gate_pairs
                    .get(task)
                    .is_some_and(|c| c.contains(criterion));
                if !known {
                    self.gate_pairs
                        .entry(task.to_string())
                        .or_default()
                        .insert(criterion.to_string());
                    self.distinct_pairs += 1;
                }
            }
            EventType::Selection => self.selections += 1,
            EventType::ResourceSample => {
                let (Some(limit), Some(value)) = (
                    e.str("limit_id"),
                    e.value("value").as_ref().and_then(super::Num::from_value),
                ) else {
                    return;
                };
                // Observed is mintable only by a host adapter citing an artifact; the journal
                // validator already enforced that, so trust alone decides here.
                let sample = Sample { seq: e.seq, value };
                if e.trust() == Some("observed") {
                    self.observed.insert(limit.to_string(), sample);
                } else {
                    self.asserted.insert(limit.to_string(), sample);
                }
            }
            _ => {}
        }
    }

    /// Hours between the first and the last event, `round(seconds / 3600, 4)`; `0.0` with fewer
    /// than two events.
    pub fn wall_clock_hours(&self) -> f64 {
        let (Some(first), Some(last)) = (&self.first_ts, &self.last_ts) else {
            return 0.0;
        };
        if self.ts_count < 2 {
            return 0.0;
        }
        let (Some(a), Some(b)) = (seconds(first), seconds(last)) else {
            return 0.0;
        };
        round4((b - a) as f64 / 3600.0)
    }

    /// `max(0, #gate_run − #distinct (task, criterion))`.
    pub fn gate_retries(&self) -> f64 {
        self.gate_runs.saturating_sub(self.distinct_pairs) as f64
    }

    /// `#selection`.
    pub fn dispatch_calls(&self) -> f64 {
        self.selections as f64
    }

    /// The journal counter of a journal-family `unit`.
    ///
    /// The family table matches `" h"` anywhere in the padded unit, so `hash` lands in the
    /// wall-clock family too. Hours are computed for `hour`/`wall`/`time` and for a bare word `h`
    /// (the reference leaves even a bare `h` at `null`, which would make an enforced journal
    /// limit uncounted); any other `" h"` match keeps `spent: null`, as in the reference.
    pub fn journal_value(&self, family: Family, unit: &str) -> Option<f64> {
        match family {
            Family::WallClock => {
                let lower = unit.to_lowercase();
                let hours = ["hour", "wall", "time"].iter().any(|s| lower.contains(s))
                    || format!(" {lower} ").contains(" h ");
                hours.then(|| self.wall_clock_hours())
            }
            Family::Retries => Some(self.gate_retries()),
            Family::Dispatch => Some(self.dispatch_calls()),
            Family::Spend | Family::Tokens => None,
        }
    }
}

/// Seconds since the epoch of the first 19 characters (`%Y-%m-%dT%H:%M:%S`, UTC).
fn seconds(ts: &str) -> Option<i64> {
    let head = ts.get(..19)?;
    crate::clock::parse_rfc3339(&format!("{head}Z")).map(|ms| ms.div_euclid(1000))
}

/// Python's `round(x, 4)`: correctly rounded from the exact binary value, ties to even (the
/// standard library's fixed-precision formatting does exactly that).
fn round4(x: f64) -> f64 {
    format!("{x:.4}").parse().unwrap_or(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_first_match_wins() {
        assert_eq!(Family::of("USD"), Some(Family::Spend));
        assert_eq!(Family::of("$"), Some(Family::Spend));
        assert_eq!(Family::of("cost units"), Some(Family::Spend));
        assert_eq!(Family::of("tokens"), Some(Family::Tokens));
        assert_eq!(Family::of("token cost"), Some(Family::Spend));
        assert_eq!(Family::of("hours"), Some(Family::WallClock));
        assert_eq!(Family::of("h"), Some(Family::WallClock));
        assert_eq!(Family::of("wall-clock"), Some(Family::WallClock));
        assert_eq!(Family::of("retries"), Some(Family::Retries));
        assert_eq!(Family::of("attempts"), Some(Family::Retries));
        assert_eq!(Family::of("retry hours"), Some(Family::WallClock));
        assert_eq!(Family::of("calls"), Some(Family::Dispatch));
        assert_eq!(Family::of("invocations"), Some(Family::Dispatch));
        assert_eq!(Family::of("gpu-s"), None);
        assert_eq!(Family::of("hash"), Some(Family::WallClock));
        assert_eq!(Family::of("sha"), None);
        let c = JournalCounters::default();
        assert_eq!(c.journal_value(Family::WallClock, "h"), Some(0.0));
        assert_eq!(c.journal_value(Family::WallClock, "GPU h"), Some(0.0));
        assert_eq!(c.journal_value(Family::WallClock, "hash"), None);
        assert_eq!(Family::Spend.meter(), Some("meter_spend"));
        assert!(Family::Dispatch.is_journal());
    }

    #[test]
    fn rounding_matches_python() {
        // Python: round(7/3600*1000, 4) etc.
        assert_eq!(round4(0.116666666), 0.1167);
        assert_eq!(round4(11.2), 11.2);
        assert_eq!(round4(1.0 / 3.0), 0.3333);
        assert_eq!(seconds("2026-03-01T00:07:00Z"), Some(1772323620));
        assert_eq!(seconds("2026-03-01T00:07"), None);
    }
}
