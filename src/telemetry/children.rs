//! The spans of a `task` child's run, linked under the parent's `execute_tool task` span.
//!
//! A child runs in-process with its own event sink, so its spans are made from its records once
//! the parent's `task` call returns (the child's run has ended by then): an `invoke_agent` span
//! for the child run and an `execute_tool` span per operation, with the journal's start times
//! and the tool messages' times as ends, recursively for the child's own children. They join
//! the parent run's trace.

use std::collections::HashMap;

use super::span::{self, Kind, Span, Status, Value};
use crate::journal::OpPhase;
use crate::session::{messages, view};
use crate::state::StateDir;

/// Task trees deeper than this are not followed (the runtime's own limit is lower).
const MAX_DEPTH: u32 = 8;

fn ns(stamp: &str) -> Option<u64> {
    crate::clock::parse_rfc3339(stamp)
        .and_then(|ms| u64::try_from(ms).ok())
        .map(|ms| ms * 1_000_000)
}

/// Appends the spans of run `run_id` of child Session `session_id` to `out`.
pub fn spans(
    state: &StateDir,
    trace_id: [u8; 16],
    parent: [u8; 8],
    session_id: &str,
    run_id: &str,
    depth: u32,
    out: &mut Vec<Span>,
) {
    if depth > MAX_DEPTH {
        return;
    }
    // A child that was never created, or cannot be read: nothing to show (the parent's span
    // says how the call ended).
    let Ok(shown) = view::show_run(state, session_id, run_id) else {
        return;
    };
    let ended: HashMap<String, String> = messages::read(&state.session(session_id).messages())
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.run_id == run_id)
        .map(|m| (m.id, m.created_at))
        .collect();
    let run = &shown.run;
    let start = ns(&run.created_at).unwrap_or_else(span::now_ns);
    let end = run
        .result
        .as_ref()
        .and_then(|r| ns(&r.at))
        .or_else(|| ns(&run.updated_at))
        .unwrap_or(start);
    let ids = |mut attributes: Vec<(&'static str, Value)>| {
        attributes.insert(0, ("kxen.session.id", session_id.into()));
        attributes.insert(1, ("kxen.run.id", run_id.into()));
        attributes
    };
    let root = span::span_id();
    let mut attributes = ids(vec![
        ("gen_ai.operation.name", "invoke_agent".into()),
        ("kxen.run.status", run.status.name().into()),
        ("kxen.task.depth", Value::from(u64::from(depth))),
    ]);
    if let Some(result) = &run.result {
        attributes.push(("kxen.run.turns", Value::from(result.turns)));
        attributes.push((
            "gen_ai.usage.input_tokens",
            Value::from(result.usage.input_tokens),
        ));
        attributes.push((
            "gen_ai.usage.output_tokens",
            Value::from(result.usage.output_tokens),
        ));
    }
    out.push(Span {
        trace_id,
        span_id: root,
        parent: Some(parent),
        name: "invoke_agent".into(),
        kind: Kind::Internal,
        start_ns: start,
        end_ns: end,
        attributes,
        status: if run.status.name() == "completed" {
            Status::Unset
        } else {
            Status::Error
        },
        status_message: String::new(),
    });
    for op in &shown.operations {
        let id = span::span_id();
        let op_start = ns(&op.started_at).unwrap_or(start);
        let op_end = op
            .turn_message_id
            .as_ref()
            .and_then(|m| ended.get(m))
            .and_then(|at| ns(at))
            .unwrap_or(end);
        let outcome = match op.phase {
            OpPhase::AwaitingApproval | OpPhase::Approved => "awaitingApproval",
            OpPhase::OutcomeUnknown | OpPhase::Started => "unknown",
            _ if op.history.as_slice().contains(&OpPhase::Denied) => "denied",
            _ if op.output.as_ref().is_some_and(|o| o.is_error) => "error",
            _ => "ok",
        };
        out.push(Span {
            trace_id,
            span_id: id,
            parent: Some(root),
            name: format!("execute_tool {}", op.tool),
            kind: Kind::Internal,
            start_ns: op_start,
            end_ns: op_end.max(op_start),
            attributes: ids(vec![
                ("gen_ai.operation.name", "execute_tool".into()),
                ("gen_ai.tool.name", op.tool.as_str().into()),
                ("kxen.op.id", op.op_id.as_str().into()),
                ("kxen.tool.outcome", outcome.into()),
            ]),
            status: if outcome == "error" {
                Status::Error
            } else {
                Status::Unset
            },
            status_message: String::new(),
        });
        if let Some(child) = &op.child {
            spans(
                state,
                trace_id,
                id,
                &child.session_id,
                &child.run_id,
                depth + 1,
                out,
            );
        }
    }
}
