//! Unit and property tests of the journal state machine.

use super::*;
use proptest::prelude::*;
use serde_json::json;
use std::collections::HashMap;

fn outcome(text: &str) -> ToolOutcome {
    ToolOutcome {
        text: text.into(),
        is_error: false,
        blob: None,
        interrupted: false,
    }
}

fn make(op: usize, phase: OpPhase) -> JournalRecord {
    let op_id = format!("op_{op}");
    let at = "2026-11-30T00:00:00.000Z".to_string();
    match phase {
        OpPhase::Started => JournalRecord::Started {
            op_id,
            at,
            tool: "exec".into(),
            arguments: json!({"command": format!("echo {op}")}),
            message_id: format!("msg_{op}"),
            tool_call_id: format!("call_{op}"),
            call_index: 0,
        },
        OpPhase::OutcomeKnown => JournalRecord::OutcomeKnown {
            op_id,
            at,
            output: outcome("ok"),
        },
        OpPhase::OutcomeUnknown => JournalRecord::OutcomeUnknown {
            op_id,
            at,
            reason: "crash".into(),
        },
        OpPhase::Resolved => JournalRecord::Resolved {
            op_id,
            at,
            output: outcome("verified"),
        },
        OpPhase::Settled => JournalRecord::Settled {
            op_id,
            at,
            turn_message_id: "msg_t".into(),
        },
    }
}

#[test]
fn happy_path_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let mut j = Journal::open(&path).unwrap();
    j.record(make(1, OpPhase::Started)).unwrap();
    assert!(j.record(make(1, OpPhase::Settled)).is_err());
    assert!(j.record(make(1, OpPhase::Started)).is_err());
    j.record(make(1, OpPhase::OutcomeKnown)).unwrap();
    j.record(make(1, OpPhase::Settled)).unwrap();
    assert!(j.record(make(2, OpPhase::Resolved)).is_err());
    let op = j.table().get("op_1").unwrap();
    assert_eq!(op.phase, OpPhase::Settled);
    assert_eq!(op.output.as_ref().unwrap().text, "ok");
    // Refused records were never written.
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 3);
    assert_eq!(read(&path).unwrap(), *j.table());
}

#[test]
fn an_illegal_sequence_on_disk_is_corrupt_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    // Correctly chained lines, so the refusal comes from the state machine, not the chain.
    let mut prev = fsx::chain::GENESIS.to_string();
    let mut text = String::new();
    for r in [make(1, OpPhase::Started), make(1, OpPhase::Settled)] {
        let line = fsx::chain::chain_line(&serde_json::to_string(&r).unwrap(), &prev);
        prev = fsx::chain::line_hash(line.as_bytes());
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(&path, text).unwrap();
    let err = read(&path).unwrap_err();
    assert_eq!(err.kind, crate::error::ErrorKind::Corrupt);
    assert!(err.message.contains("journal.jsonl:2"), "{}", err.message);
}

/// An independent model of the state machine: the allowed successors of each phase.
fn model_allows(current: Option<OpPhase>, next: OpPhase) -> bool {
    use OpPhase::*;
    let allowed: &[OpPhase] = match current {
        None => &[Started],
        Some(Started) => &[OutcomeKnown, OutcomeUnknown],
        Some(OutcomeUnknown) => &[Resolved],
        Some(OutcomeKnown) | Some(Resolved) => &[Settled],
        Some(Settled) => &[],
    };
    allowed.contains(&next)
}

fn phase_strategy() -> impl Strategy<Value = OpPhase> {
    prop_oneof![
        Just(OpPhase::Started),
        Just(OpPhase::OutcomeKnown),
        Just(OpPhase::OutcomeUnknown),
        Just(OpPhase::Resolved),
        Just(OpPhase::Settled),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random event sequences: the journal agrees with the model after every step, terminal
    /// operations stay terminal, and replaying the file gives the live state — also after a
    /// torn tail is added and repaired.
    #[test]
    fn journal_matches_model(
        events in proptest::collection::vec((0usize..4, phase_strategy()), 0..40),
        torn in proptest::collection::vec(any::<u8>(), 1..40),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let mut journal = Journal::open(&path).unwrap();
        let mut model: HashMap<usize, OpPhase> = HashMap::new();
        for (op, phase) in events {
            let before = model.get(&op).copied();
            let accepted = journal.record(make(op, phase)).is_ok();
            prop_assert_eq!(accepted, model_allows(before, phase));
            if before == Some(OpPhase::Settled) {
                prop_assert!(!accepted, "a settled operation took another record");
            }
            if accepted {
                model.insert(op, phase);
            }
            let live = journal.table().get(&format!("op_{op}")).map(|s| s.phase);
            prop_assert_eq!(live, model.get(&op).copied());
        }
        let replayed = read(&path).unwrap();
        prop_assert_eq!(&replayed, journal.table());

        // A crash mid-append leaves a torn tail: readers see the complete prefix, and the next
        // writer repairs it and carries on.
        let mut bytes = std::fs::read(&path).unwrap_or_default();
        let torn: Vec<u8> = torn.into_iter().filter(|&b| b != b'\n').collect();
        bytes.extend_from_slice(&torn);
        std::fs::write(&path, &bytes).unwrap();
        prop_assert_eq!(&read(&path).unwrap(), journal.table());
        let reopened = Journal::open(&path).unwrap();
        prop_assert_eq!(reopened.table(), journal.table());
    }
}
