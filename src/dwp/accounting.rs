//! Four-quantity accounting (docs/dwp-spec.md, "Four-quantity accounting" and "Where dwp departs from the reference", item 7).
//!
//! Instruction bytes, provider tokens, money and wall-clock time are four separate quantities,
//! each from its own source and never converted into one another. A quantity without a source
//! is reported missing with its reason — never estimated. Tokens and money count only when a
//! host meter recorded them (an `observed` `resource_sample` from a `host_adapter` actor); an
//! asserted estimate is not a meter reading.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::dwp::manifest::{self, Records};
use crate::dwp::plan::{Event, EventType};
use crate::error::Result;

pub const NEVER: &str = "bytes are never converted to tokens or money";

/// The accounting document for a plan; `bundles` are paths as the user gave them (resolved
/// against the current directory, keyed by the given string).
pub fn account(records: &Records, bundles: &[String]) -> Result<Value> {
    let first = &records.contract.tasks[0].id;
    let manifest = manifest::derive(records, first, None)?;
    let manifest_len = crate::canonical::to_pretty(&manifest).len();
    let mut bytes = Map::new();
    bytes.insert("manifest_json".into(), json!(manifest_len));
    for bundle in bundles {
        let size = std::fs::metadata(Path::new(bundle))
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len());
        bytes.insert(bundle.clone(), json!(size));
    }
    let events = &records.journal.events;
    Ok(json!({
        "instruction_bytes": {"source": "measured", "bytes": bytes},
        "provider_tokens": metered(events, |e| e.str("unit") == Some("tokens"))
            .unwrap_or_else(|| missing("no observed token meter sample in the records")),
        "cost_usd": metered(events, |e| e.str("limit_id") == Some("spend_usd"))
            .unwrap_or_else(|| missing(
                "no observed spend sample in the records - cost comes only from real rates, \
                 never from bytes",
            )),
        "wall_clock_hours": wall_clock(events)
            .unwrap_or_else(|| missing("fewer than two timestamped events")),
        "never": NEVER,
    }))
}

fn missing(reason: &str) -> Value {
    json!({"value": null, "status": "missing", "reason": reason})
}

/// The host-metered sample with the highest seq that `matches`.
fn metered(events: &[Event], matches: impl Fn(&Event) -> bool) -> Option<Value> {
    events
        .iter()
        .rev()
        .find(|e| {
            e.kind == EventType::ResourceSample
                && e.trust() == Some("observed")
                && e.actor_kind() == "host_adapter"
                && matches(e)
        })
        .map(|e| {
            json!({
                "value": e.value("value"),
                "source": e.value("source"),
                "seq": e.seq,
            })
        })
}

/// Hours between the lexicographically first and last event timestamps, rounded to 3 decimals.
fn wall_clock(events: &[Event]) -> Option<Value> {
    if events.len() < 2 {
        return None;
    }
    let first = events.iter().map(|e| e.ts()).min()?;
    let last = events.iter().map(|e| e.ts()).max()?;
    let start = crate::clock::parse_rfc3339(first)?;
    let end = crate::clock::parse_rfc3339(last)?;
    let hours = (end - start) as f64 / 3_600_000.0;
    // Python's round(x, 3): correctly rounded decimal, which `{:.3}` also gives.
    let rounded: f64 = format!("{hours:.3}").parse().ok()?;
    Some(json!({"value": rounded, "source": "recorded event ts span"}))
}
