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

/// A tracked journal reads what other writers appended as a tail (never the whole journal
/// again), folds our own appends without reading, and reads everything again only when the
/// file is not the one it knew grown by whole valid lines.
#[test]
fn a_tracked_journal_reads_foreign_appends_as_a_tail() {
    let (_tmp, dir) = copy_plan("v7");
    let plan = Plan::open(&dir).unwrap();
    let contract = plan.contract().unwrap();
    let live = dir.join(journal::LIVE_FILE);
    let mut tracked = Tracked::read(&plan, &contract).unwrap();
    assert_eq!((tracked.full_reads, tracked.journal.events.len()), (1, 99));
    assert!(
        !tracked.refresh(&plan, &contract).unwrap(),
        "nothing changed"
    );
    // Ours: folded in memory.
    append_tracked(
        &plan,
        &contract,
        &mut tracked,
        |_| {},
        |_| Ok(vec![observation("ours")]),
    )
    .unwrap();
    // Another writer's two appends: read as a tail, by refresh and under the lock.
    append(&plan, &contract, observation("theirs 1")).unwrap();
    assert!(tracked.refresh(&plan, &contract).unwrap());
    append(&plan, &contract, observation("theirs 2")).unwrap();
    let written = append_tracked(
        &plan,
        &contract,
        &mut tracked,
        |_| {},
        |j| {
            assert_eq!(j.events.last().unwrap().str("statement"), Some("theirs 2"));
            Ok(vec![observation("ours again")])
        },
    )
    .unwrap();
    assert_eq!(written[0].seq, 103);
    assert_eq!(tracked.full_reads, 1, "no whole re-read for appends");
    let whole = journal::read(&dir, &contract).unwrap();
    let seqs = |events: &[journal::Event]| events.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(seqs(&tracked.journal.events), seqs(&whole.events));
    // A half-written foreign line: not whole lines, so the journal is read again (torn tail
    // ignored, as every reader does), and again once it is complete.
    let len = std::fs::metadata(&live).unwrap().len();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&live)
        .unwrap();
    std::io::Write::write_all(&mut f, b"{\"seq\":10").unwrap();
    assert!(tracked.refresh(&plan, &contract).unwrap());
    assert_eq!(tracked.full_reads, 2);
    assert_eq!(tracked.journal.events.len(), 103);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&live)
        .unwrap()
        .set_len(len)
        .unwrap();
    // The same length but another file (replaced): read again.
    let text = std::fs::read(&live).unwrap();
    std::fs::remove_file(&live).unwrap();
    std::fs::write(&live, &text).unwrap();
    tracked.refresh(&plan, &contract).unwrap();
    assert!(tracked.full_reads >= 3);
    assert_eq!(seqs(&tracked.journal.events), seqs(&whole.events));
}
