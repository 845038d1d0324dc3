use serde_json::{Map, Value, json};

use super::*;
use crate::dwp::plan::journal::tests::copy_plan;
use crate::dwp::plan::{EventType, journal};

fn observation(statement: &str) -> NewEvent {
    let mut payload = Map::new();
    payload.insert("statement".into(), json!(statement));
    payload.insert("trust".into(), json!("asserted"));
    NewEvent {
        kind: "observation".into(),
        actor_kind: "helper".into(),
        actor_identity: "dwp resources".into(),
        ts: "2026-04-01T10:00:00Z".into(),
        payload,
    }
}

#[test]
fn append_repairs_a_torn_tail_then_writes_one_canonical_line() {
    let (_tmp, dir) = copy_plan("v6");
    let plan = Plan::open(&dir).unwrap();
    let contract = plan.contract().unwrap();
    let event = append(
        &plan,
        &contract,
        observation("LIMIT: exhausted spend_usd: über"),
    )
    .unwrap();
    assert_eq!(event.seq, 9, "seq 8 went to the journal_repair record");
    let text = std::fs::read_to_string(dir.join(journal::LIVE_FILE)).unwrap();
    let last = text.lines().last().unwrap();
    let value: Value = serde_json::from_str(last).unwrap();
    assert_eq!(last, crate::canonical::to_compact(&value));
    assert!(last.contains(r#""statement":"LIMIT: exhausted spend_usd: \u00fcber""#));
    assert_eq!(value["contract_id"], json!(contract.id));
    let j = journal::read(&dir, &contract).unwrap();
    assert!(j.torn_tail.is_none());
    assert_eq!(j.events[7].kind, EventType::JournalRepair);
    assert_eq!(j.events.len(), 9);
}

#[test]
fn append_ends_an_unterminated_last_event_instead_of_truncating_it() {
    let (_tmp, dir) = copy_plan("v7");
    let live = dir.join(journal::LIVE_FILE);
    let text = std::fs::read_to_string(&live).unwrap();
    std::fs::write(&live, text.strip_suffix('\n').unwrap()).unwrap();
    let plan = Plan::open(&dir).unwrap();
    let contract = plan.contract().unwrap();
    let j = journal::read(&dir, &contract).unwrap();
    assert_eq!(j.events.len(), 99, "the unterminated last event is read");
    assert_eq!(j.unterminated, Some(text.len() as u64 - 1));
    assert!(j.torn_tail.is_none());
    let e = append(&plan, &contract, observation("after")).unwrap();
    assert_eq!(e.seq, 100);
    let after = std::fs::read_to_string(&live).unwrap();
    assert!(after.starts_with(&text), "the old last line is intact");
    assert_eq!(after[text.len()..].lines().count(), 1);
    let j = journal::read(&dir, &contract).unwrap();
    assert_eq!((j.events.len(), j.unterminated), (100, None));
}

#[test]
fn seqs_continue_after_archives_and_live() {
    let (_tmp, dir) = copy_plan("v7");
    let plan = Plan::open(&dir).unwrap();
    let contract = plan.contract().unwrap();
    let e = append(&plan, &contract, observation("one")).unwrap();
    assert_eq!(e.seq, 100);
    let e = append(&plan, &contract, observation("two")).unwrap();
    assert_eq!(e.seq, 101);
}

#[test]
fn a_foreign_ledger_lock_refuses_and_writes_nothing() {
    let (_tmp, dir) = copy_plan("v7");
    let plan = Plan::open(&dir).unwrap();
    let contract = plan.contract().unwrap();
    std::fs::create_dir(dir.join(FOREIGN_LOCK_DIR)).unwrap();
    std::fs::write(
        dir.join(FOREIGN_LOCK_DIR).join("owner.json"),
        r#"{"pid": 4242}"#,
    )
    .unwrap();
    let before = std::fs::read(dir.join(journal::LIVE_FILE)).unwrap();
    let err = append(&plan, &contract, observation("x")).unwrap_err();
    assert_eq!(err.kind, crate::ErrorKind::Conflict);
    assert!(err.message.contains("4242"), "{}", err.message);
    assert_eq!(std::fs::read(dir.join(journal::LIVE_FILE)).unwrap(), before);
}

#[test]
fn an_invalid_event_is_refused_before_writing() {
    let (_tmp, dir) = copy_plan("v7");
    let plan = Plan::open(&dir).unwrap();
    let contract = plan.contract().unwrap();
    let before = std::fs::read(dir.join(journal::LIVE_FILE)).unwrap();
    let mut bad = observation("x");
    bad.payload.insert("trust".into(), json!("observed"));
    let err = append(&plan, &contract, bad).unwrap_err();
    assert!(
        err.message.contains("must cite its artifact"),
        "{}",
        err.message
    );
    assert_eq!(std::fs::read(dir.join(journal::LIVE_FILE)).unwrap(), before);
}

#[test]
fn decide_sees_the_journal_and_can_decline() {
    let (_tmp, dir) = copy_plan("v7");
    let plan = Plan::open(&dir).unwrap();
    let contract = plan.contract().unwrap();
    let (event, written) = append_with(
        &plan,
        &contract,
        |_| {},
        |j| Ok(Decision::Existing(j.events[0].clone())),
    )
    .unwrap();
    assert!(!written);
    assert_eq!(event.seq, 1);
}
