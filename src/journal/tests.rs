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
        fence: None,
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
            child: None,
            assistant: None,
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
        // The same call as `Started`, so an approved operation starts as exactly that call.
        OpPhase::AwaitingApproval => JournalRecord::AwaitingApproval {
            op_id,
            at,
            tool: "exec".into(),
            arguments: json!({"command": format!("echo {op}")}),
            message_id: format!("msg_{op}"),
            tool_call_id: format!("call_{op}"),
            call_index: 0,
            rule: "exec".into(),
            arguments_hash: "sha256:h".into(),
        },
        OpPhase::Approved => JournalRecord::Approved {
            op_id,
            at,
            arguments_hash: "sha256:h".into(),
        },
        OpPhase::Denied => JournalRecord::Denied {
            op_id,
            at,
            arguments_hash: "sha256:h".into(),
            output: outcome("denied"),
        },
        OpPhase::McpStream => JournalRecord::McpStream {
            op_id,
            at,
            position: crate::mcp::StreamPosition {
                server: "fx".into(),
                session_id: Some("s-1".into()),
                protocol_version: "2025-11-25".into(),
                request_id: 2,
                event_id: "e-1".into(),
            },
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
fn approvals_bind_the_call_and_its_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let mut j = Journal::open(&path).unwrap();
    j.record(make(1, OpPhase::AwaitingApproval)).unwrap();
    assert!(
        j.record(make(1, OpPhase::Started)).is_err(),
        "not approved yet"
    );
    let wrong = JournalRecord::Approved {
        op_id: "op_1".into(),
        at: "t".into(),
        arguments_hash: "sha256:other".into(),
    };
    assert!(
        j.record(wrong).is_err(),
        "a decision bound to other arguments"
    );
    j.record(make(1, OpPhase::Approved)).unwrap();
    let other_call = JournalRecord::Started {
        op_id: "op_1".into(),
        at: "t".into(),
        tool: "exec".into(),
        arguments: json!({"command": "rm -rf /"}),
        message_id: "msg_1".into(),
        tool_call_id: "call_1".into(),
        call_index: 0,
        child: None,
        assistant: None,
    };
    assert!(
        j.record(other_call).is_err(),
        "only the approved call starts"
    );
    j.record(make(1, OpPhase::Started)).unwrap();
    j.record(make(1, OpPhase::OutcomeKnown)).unwrap();
    j.record(make(1, OpPhase::Settled)).unwrap();
    let op = j.table().get("op_1").unwrap();
    let history: Vec<&str> = op.history.as_slice().iter().map(|p| p.name()).collect();
    assert_eq!(
        history,
        [
            "awaitingApproval",
            "approved",
            "started",
            "outcomeKnown",
            "settled"
        ]
    );
    assert_eq!(
        op.approval.as_ref().unwrap().decision,
        Some(OpPhase::Approved)
    );
    j.record(make(2, OpPhase::AwaitingApproval)).unwrap();
    j.record(make(2, OpPhase::Denied)).unwrap();
    assert!(
        j.record(make(2, OpPhase::Approved)).is_err(),
        "decided once"
    );
    j.record(make(2, OpPhase::Settled)).unwrap();
    assert_eq!(
        j.table().get("op_2").unwrap().output.as_ref().unwrap().text,
        "denied"
    );
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

/// A stream position is recorded once, while the operation is `started`, and changes neither
/// its phase nor its history; reading the file back gives it again.
#[test]
fn mcp_stream_is_not_a_transition() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let mut j = Journal::open(&path).unwrap();
    assert!(
        j.record(make(1, OpPhase::McpStream)).is_err(),
        "no operation yet"
    );
    j.record(make(1, OpPhase::Started)).unwrap();
    j.record(make(1, OpPhase::McpStream)).unwrap();
    let op = j.table().get("op_1").unwrap();
    assert_eq!(op.phase, OpPhase::Started);
    assert_eq!(op.history.as_slice(), [OpPhase::Started]);
    assert_eq!(op.stream.as_ref().unwrap().event_id, "e-1");
    assert!(j.record(make(1, OpPhase::McpStream)).is_err(), "only once");
    j.record(make(1, OpPhase::OutcomeKnown)).unwrap();
    j.record(make(2, OpPhase::Started)).unwrap();
    j.record(make(2, OpPhase::OutcomeUnknown)).unwrap();
    assert!(
        j.record(make(2, OpPhase::McpStream)).is_err(),
        "not after an outcome"
    );
    let read_back = read(&path).unwrap();
    assert_eq!(&read_back, j.table());
}

/// An independent model of the state machine: the allowed successors of each phase.
fn model_allows(current: Option<OpPhase>, next: OpPhase) -> bool {
    use OpPhase::*;
    let allowed: &[OpPhase] = match current {
        None => &[Started, AwaitingApproval],
        Some(Started) => &[OutcomeKnown, OutcomeUnknown],
        Some(OutcomeUnknown) => &[Resolved],
        Some(OutcomeKnown) | Some(Resolved) | Some(Denied) => &[Settled],
        Some(AwaitingApproval) => &[Approved, Denied],
        Some(Approved) => &[Started, OutcomeKnown],
        // Not a phase: no operation is ever in it (`mcpStream_is_not_a_transition`).
        Some(Settled) | Some(McpStream) => &[],
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
        Just(OpPhase::AwaitingApproval),
        Just(OpPhase::Approved),
        Just(OpPhase::Denied),
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

/// The fold as it was before records were folded while reading: decode the whole file, then
/// fold the list, refusing at the first illegal record. The streaming readers must agree with
/// it on every file, damaged or not.
fn fold_after_reading(path: &Path) -> Result<OpTable> {
    let file = fsx::read_chain::<JournalRecord>(path)?;
    let mut table = OpTable::default();
    for (i, record) in file.records.into_iter().enumerate() {
        table.apply(record).map_err(|why| {
            Error::corrupt(format!("{}:{}: {why}", path.display(), i + 1))
                .with_hint("the journal was not written by kxen-agent in this order; restore it from a backup or bundle")
        })?;
    }
    Ok(table)
}

/// Chained journal lines for `events`, written as they come (no state machine in the way).
fn chained(events: &[(usize, OpPhase)]) -> Vec<String> {
    let mut prev = fsx::chain::GENESIS.to_string();
    events
        .iter()
        .map(|&(op, phase)| {
            let json = serde_json::to_string(&make(op, phase)).unwrap();
            let line = fsx::chain::chain_line(&json, &prev);
            prev = fsx::chain::line_hash(line.as_bytes());
            line
        })
        .collect()
}

/// How a file is damaged before it is read.
#[derive(Debug, Clone)]
enum Damage {
    None,
    /// A torn last line: the bytes of a line cut short, without its newline.
    Torn(usize),
    /// One byte of the file changed.
    Flip(usize, u8),
    /// Two lines swapped.
    Swap(usize, usize),
    /// One line removed.
    Drop(usize),
}

fn damage_strategy() -> impl Strategy<Value = Damage> {
    prop_oneof![
        Just(Damage::None),
        (1usize..200).prop_map(Damage::Torn),
        (any::<usize>(), 0u8..8).prop_map(|(p, b)| Damage::Flip(p, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Damage::Swap(a, b)),
        any::<usize>().prop_map(Damage::Drop),
    ]
}

fn damaged(mut lines: Vec<String>, damage: &Damage) -> Vec<u8> {
    let n = lines.len();
    match *damage {
        Damage::Swap(a, b) if n > 0 => lines.swap(a % n, b % n),
        Damage::Drop(i) if n > 0 => {
            lines.remove(i % n);
        }
        _ => {}
    }
    let mut bytes: Vec<u8> = lines
        .iter()
        .flat_map(|l| format!("{l}\n").into_bytes())
        .collect();
    match *damage {
        Damage::Flip(pos, bit) if !bytes.is_empty() => {
            let pos = pos % bytes.len();
            bytes[pos] ^= 1 << bit;
        }
        Damage::Torn(len) => {
            let tail = serde_json::to_string(&make(9, OpPhase::Started)).unwrap();
            bytes.extend_from_slice(&tail.as_bytes()[..len.min(tail.len() - 1)]);
        }
        _ => {}
    }
    bytes
}

/// Same outcome: equal tables, or errors of the same kind with the same message and hints.
fn same(a: &Result<OpTable>, b: &Result<OpTable>) -> std::result::Result<(), String> {
    match (a, b) {
        (Ok(x), Ok(y)) if x == y => Ok(()),
        (Err(x), Err(y)) if x.kind == y.kind && x.message == y.message && x.hints == y.hints => {
            Ok(())
        }
        _ => Err(format!("{a:?}\n  vs\n{b:?}")),
    }
}

#[test]
fn a_chain_break_is_reported_before_an_earlier_illegal_record() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    // Line 2 is illegal (settled right after started); line 3 is then changed, so line 4 names
    // the wrong predecessor. The damage is reported, not the state machine's refusal.
    let mut lines = chained(&[
        (1, OpPhase::Started),
        (1, OpPhase::Settled),
        (2, OpPhase::Started),
        (2, OpPhase::OutcomeKnown),
    ]);
    lines[2] = lines[2].replace("echo 2", "echo 3");
    std::fs::write(&path, damaged(lines, &Damage::None)).unwrap();
    for err in [
        read(&path).unwrap_err(),
        Journal::open(&path).unwrap_err(),
        fold_after_reading(&path).unwrap_err(),
    ] {
        assert_eq!(err.kind, crate::error::ErrorKind::Corrupt);
        assert!(
            err.message.contains("journal.jsonl:4: the chain is broken"),
            "{}",
            err.message
        );
    }
}

#[test]
fn an_illegal_record_is_reported_and_the_writer_leaves_the_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("journal.jsonl");
    let lines = chained(&[(1, OpPhase::Started), (1, OpPhase::Settled)]);
    let complete = damaged(lines.clone(), &Damage::None);
    std::fs::write(&path, damaged(lines, &Damage::Torn(30))).unwrap();
    let err = read(&path).unwrap_err();
    assert!(err.message.contains("journal.jsonl:2:"), "{}", err.message);
    // A reader leaves the torn tail alone; so does a writer that refuses the sequence (it cuts
    // a torn tail only off a file it goes on to append to).
    let torn = std::fs::read(&path).unwrap();
    assert_ne!(torn, complete);
    let err = Journal::open(&path).unwrap_err();
    assert!(err.message.contains("journal.jsonl:2:"), "{}", err.message);
    assert_eq!(std::fs::read(&path).unwrap(), torn);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Folding while reading gives exactly what decoding the whole file and then folding gave:
    /// the same table, or the same error (file, line, message, hints) — for legal and illegal
    /// sequences, torn tails, flipped bytes, swapped and dropped lines — and a writer opening
    /// the file leaves the same bytes behind.
    #[test]
    fn streaming_fold_equals_fold_after_reading(
        events in proptest::collection::vec((0usize..4, phase_strategy()), 0..24),
        damage in damage_strategy(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.jsonl");
        let bytes = damaged(chained(&events), &damage);
        std::fs::write(&path, &bytes).unwrap();
        let reference = fold_after_reading(&path);
        let streamed = read(&path);
        prop_assert_eq!(std::fs::read(&path).unwrap(), bytes.clone(), "a reader changed the file");
        if let Err(diff) = same(&reference, &streamed) {
            prop_assert!(false, "read: {}", diff);
        }

        // The writer: the old open was read, repair a torn tail, then fold.
        let old = fsx::ChainWriter::open::<JournalRecord>(&path).and_then(|(_, records)| {
            let mut table = OpTable::default();
            for (i, record) in records.into_iter().enumerate() {
                table.apply(record).map_err(|why| {
                    Error::corrupt(format!("{}:{}: {why}", path.display(), i + 1))
                        .with_hint("the journal was not written by kxen-agent in this order; restore it from a backup or bundle")
                })?;
            }
            Ok(table)
        });
        let old_bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let new = Journal::open(&path).map(|j| j.table().clone());
        if let Err(diff) = same(&old, &new) {
            prop_assert!(false, "open: {}", diff);
        }
        // A writer that refuses the file leaves it as it was (a torn tail is cut only from a file
        // it goes on to append to); one that accepts it repairs it as the old open did.
        let expected = if new.is_ok() { old_bytes } else { bytes };
        prop_assert_eq!(std::fs::read(&path).unwrap(), expected);
    }
}
