//! The observation grammars the resource frame reads and writes (docs/dwp-spec.md, "The journal") and the
//! content-deduplicated append both `LIMIT:` and `RESERVATION:` records share.

use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::HELPER_IDENTITY;
use crate::dwp::plan::writer::NewEvent;
use crate::dwp::plan::{Event, EventType};

/// `LIMIT: exhausted|recovered <id>[: <detail>]`, with Python `re.match` + `$` semantics (one
/// trailing newline tolerated, `.` stops at a newline).
fn limit_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"\ALIMIT: (exhausted|recovered) ([a-z][a-z0-9_]*)(?:: (.*))?\n?\z")
            .expect("valid built-in regex")
    })
}

/// `RESERVATION: <key>: released|committed[: <detail>]`.
fn reservation_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"\ARESERVATION: (\S+): (released|committed)(?:: (.*))?\n?\z")
            .expect("valid built-in regex")
    })
}

/// A parsed `LIMIT:` observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitRecord {
    pub seq: u64,
    pub exhausted: bool,
    pub limit: String,
    pub detail: Option<String>,
}

/// A parsed `RESERVATION:` observation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    pub seq: u64,
    pub key: String,
    pub disposition: String,
    pub detail: Option<String>,
}

fn statement(e: &Event) -> Option<&str> {
    if e.kind != EventType::Observation {
        return None;
    }
    e.str("statement")
}

pub fn limit_record(e: &Event) -> Option<LimitRecord> {
    let s = statement(e)?;
    if !s.starts_with("LIMIT: ") {
        return None;
    }
    let caps = limit_re().captures(s)?;
    Some(LimitRecord {
        seq: e.seq,
        exhausted: &caps[1] == "exhausted",
        limit: caps[2].to_string(),
        detail: caps.get(3).map(|m| m.as_str().to_string()),
    })
}

pub fn settlement(e: &Event) -> Option<Settlement> {
    let s = statement(e)?;
    if !s.starts_with("RESERVATION: ") {
        return None;
    }
    let caps = reservation_re().captures(s)?;
    Some(Settlement {
        seq: e.seq,
        key: caps[1].to_string(),
        disposition: caps[2].to_string(),
        detail: caps.get(3).map(|m| m.as_str().to_string()),
    })
}

/// `<head>[: <detail>]`.
pub fn with_detail(head: String, detail: Option<&str>) -> String {
    match detail {
        Some(d) => format!("{head}: {d}"),
        None => head,
    }
}

/// The asserted helper observation carrying `statement`, stamped now.
pub fn observation(statement: &str) -> NewEvent {
    let mut payload = Map::new();
    payload.insert("statement".into(), Value::from(statement));
    payload.insert("trust".into(), Value::from("asserted"));
    NewEvent {
        kind: "observation".into(),
        actor_kind: "helper".into(),
        actor_identity: HELPER_IDENTITY.into(),
        ts: crate::clock::format_seconds(crate::clock::now_millis().div_euclid(1000)),
        payload,
    }
}

/// An earlier event with the same content as `observation(statement)` would have — type,
/// statement and trust, actor identity and contract id — with a seq above `after`. Its seq is
/// reported instead of appending a duplicate.
pub fn identical<'j>(
    events: &'j [Event],
    contract_id: &str,
    statement: &str,
    after: u64,
) -> Option<&'j Event> {
    events.iter().find(|e| {
        e.seq > after
            && e.kind == EventType::Observation
            && e.str("statement") == Some(statement)
            && e.trust() == Some("asserted")
            && !e.has("evidence_path")
            && e.actor_identity() == HELPER_IDENTITY
            && e.contract_id() == contract_id
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(seq: u64, statement: &str) -> Event {
        let mut raw = Map::new();
        raw.insert("statement".into(), Value::from(statement));
        Event::from_map(seq, EventType::Observation, &raw).unwrap()
    }

    #[test]
    fn limit_grammar() {
        let r = limit_record(&obs(3, "LIMIT: exhausted spend_usd: budget hit at 18.0")).unwrap();
        assert!(r.exhausted);
        assert_eq!(r.limit, "spend_usd");
        assert_eq!(r.detail.as_deref(), Some("budget hit at 18.0"));
        let r = limit_record(&obs(4, "LIMIT: recovered spend_usd")).unwrap();
        assert!(!r.exhausted);
        assert_eq!(r.detail, None);
        assert!(limit_record(&obs(5, "LIMIT: recovered spend_usd\n")).is_some());
        assert_eq!(
            limit_record(&obs(5, "LIMIT: exhausted a: "))
                .unwrap()
                .detail
                .as_deref(),
            Some("")
        );
        for bad in [
            "LIMIT: exhausted Spend",
            "LIMIT: paused spend_usd",
            "LIMIT: exhausted spend_usd: a\nb",
            "LIMIT: exhausted spend_usd\n\n",
            " LIMIT: exhausted spend_usd",
        ] {
            assert!(limit_record(&obs(1, bad)).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn reservation_grammar() {
        let s = settlement(&obs(9, "RESERVATION: seq-11: released: child cancelled")).unwrap();
        assert_eq!(
            (s.key.as_str(), s.disposition.as_str(), s.detail.as_deref()),
            ("seq-11", "released", Some("child cancelled"))
        );
        assert!(settlement(&obs(9, "RESERVATION: seq-11: refunded")).is_none());
        assert!(settlement(&obs(9, "RESERVATION: seq 11: released")).is_none());
    }

    #[test]
    fn only_observations_carry_grammars() {
        let mut e = obs(1, "LIMIT: exhausted a");
        e.kind = EventType::Refusal;
        assert!(limit_record(&e).is_none());
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    fn obs(statement: &str) -> Event {
        let mut raw = Map::new();
        raw.insert("statement".into(), Value::from(statement));
        Event::from_map(1, EventType::Observation, &raw).unwrap()
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC*") {
            let _ = limit_record(&obs(&s));
            let _ = settlement(&obs(&s));
        }

        #[test]
        fn written_statements_parse_back(
            exhausted in any::<bool>(),
            id in "[a-z][a-z0-9_]{0,12}",
            detail in proptest::option::of("[^\\n\\r]{0,20}"),
        ) {
            let verb = if exhausted { "exhausted" } else { "recovered" };
            let s = with_detail(format!("LIMIT: {verb} {id}"), detail.as_deref());
            let r = limit_record(&obs(&s)).unwrap();
            prop_assert_eq!(r.exhausted, exhausted);
            prop_assert_eq!(r.limit, id);
            prop_assert_eq!(r.detail, detail);
        }
    }
}
