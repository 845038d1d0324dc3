//! Builds realistic Sessions through the library's own writers (store, message log, journal,
//! blobs), exactly as the agent loop leaves them: a completed, settled run whose every tool call
//! went `started → outcomeKnown → settled`, some outputs large enough to live in blobs.
//!
//! Shared by the bundle tests and `benches/bundle.rs` (included there with `#[path]`), so the
//! benchmark measures the same shapes the tests check.

use std::path::Path;

use kxen::fsx;
use kxen::ids::{IdKind, new_id};
use kxen::journal::{Journal, JournalRecord};
use kxen::session::run_record::RunState;
use kxen::session::store::{self, NewSession};
use kxen::session::{CallRecord, Message, MessageLog, Role};
use kxen::state::StateDir;
use serde_json::{Value, json};

/// What to put in a Session.
pub struct Shape<'a> {
    /// The workspace the Session is bound to (captured with `git::capture`).
    pub workspace: &'a Path,
    pub task: &'a str,
    /// Tool calls (each: an assistant message, three journal records, a tool message).
    pub tool_calls: usize,
    /// Bytes of output per tool call.
    pub output_bytes: usize,
    /// Every n-th call's output goes to a blob (0: never).
    pub blob_every: usize,
}

/// The ids of a built Session.
pub struct Built {
    pub session_id: String,
    pub run_id: String,
}

/// A real lock (the starter definition under the default policy): its hashes re-derive.
pub fn lock() -> Value {
    let def = kxen::agent::parse_definition(kxen::templates::AGENT_YAML.as_bytes(), "agent.yaml")
        .unwrap();
    let merged = kxen::policy::merge(&kxen::policy::PolicyFlags::default()).unwrap();
    serde_json::to_value(kxen::agent::lock::DcpAgentLock::build(&def, &merged).unwrap()).unwrap()
}

/// Writes one Session into the state dir at `state` and returns its ids.
pub fn build(state: &Path, shape: &Shape) -> Built {
    let state = StateDir::at(state);
    let session_id = new_id(IdKind::Session);
    let run_id = new_id(IdKind::Run);
    let task = Message::new(&run_id, Role::User, shape.task);
    let meta = serde_json::from_value(json!({
        "formatVersion": 1,
        "id": session_id,
        "createdAt": kxen::clock::now_rfc3339(),
        "workspace": kxen::git::capture(shape.workspace).unwrap().0,
        "parentId": null,
        "branchRootId": session_id,
        "forkPoint": null,
        "forkKind": null,
        "lock": lock(),
        "firstRunId": run_id,
    }))
    .unwrap();
    let new = NewSession {
        meta,
        run: RunState::new(&session_id, &run_id, &task, 1),
        task,
    };
    let lease = store::create(&state, &new).unwrap();
    let paths = state.session(&session_id);
    let run_paths = paths.run(&run_id);
    let mut messages = MessageLog::open(&paths.messages()).unwrap();
    let mut journal = Journal::open(&run_paths.journal()).unwrap();
    let blobs = state.blobs_dir();
    for i in 0..shape.tool_calls {
        let mut ask = Message::new(
            &run_id,
            Role::Assistant,
            format!("Step {i}: running a check."),
        );
        ask.tool_calls = vec![CallRecord {
            id: format!("call_{i}"),
            name: "exec".into(),
            arguments: json!({"command": format!("sh check.sh --step {i}")}),
        }];
        messages.append(ask.clone()).unwrap();
        let op_id = new_id(IdKind::Operation);
        journal
            .record(JournalRecord::Started {
                op_id: op_id.clone(),
                at: kxen::clock::now_rfc3339(),
                tool: "exec".into(),
                arguments: ask.tool_calls[0].arguments.clone(),
                message_id: ask.id.clone(),
                tool_call_id: format!("call_{i}"),
                call_index: 0,
                child: None,
                assistant: None,
            })
            .unwrap();
        let full: String = format!("output of step {i}: ")
            .chars()
            .chain("ok \"quoted\" \\ tab\t é\n".chars().cycle())
            .take(shape.output_bytes.max(24))
            .collect();
        let in_blob = shape.blob_every > 0 && i % shape.blob_every == shape.blob_every - 1;
        let output = if in_blob {
            let sha = kxen::hash::sha256_hex(full.as_bytes());
            fsx::create_dir_private(&blobs).unwrap();
            fsx::write_atomic(&blobs.join(&sha), full.as_bytes(), fsx::STATE_FILE_MODE).unwrap();
            json!({"text": format!("{}… (full output in blob)", &full[..16]), "isError": false,
                   "blob": {"sha256": sha, "bytes": full.len()}})
        } else {
            json!({"text": full, "isError": false})
        };
        let output = serde_json::from_value(output).unwrap();
        journal
            .record(JournalRecord::OutcomeKnown {
                op_id: op_id.clone(),
                at: kxen::clock::now_rfc3339(),
                output,
            })
            .unwrap();
        let text = journal
            .table()
            .get(&op_id)
            .unwrap()
            .output
            .clone()
            .unwrap()
            .text;
        let mut reply = Message::new(&run_id, Role::Tool, text);
        reply.tool_call_id = Some(format!("call_{i}"));
        reply.reply_to = Some(ask.id.clone());
        reply.call_index = Some(0);
        reply.op_id = Some(op_id.clone());
        messages.append(reply.clone()).unwrap();
        journal
            .record(JournalRecord::Settled {
                op_id,
                at: kxen::clock::now_rfc3339(),
                turn_message_id: reply.id.clone(),
            })
            .unwrap();
    }
    let last = Message::new(&run_id, Role::Assistant, "The check passes now.");
    messages.append(last.clone()).unwrap();
    let mut run = RunState::read(&run_paths, &run_id).unwrap();
    let mut value = serde_json::to_value(&run).unwrap();
    value["status"] = json!("completed");
    value["result"] = json!({
        "status": "completed",
        "finalText": "The check passes now.",
        "finalMessageId": last.id,
        "turns": shape.tool_calls + 1,
        "usage": {"inputTokens": 10, "outputTokens": 5},
        "at": kxen::clock::now_rfc3339(),
    });
    value["settled"] = json!(true);
    run = serde_json::from_value(value).unwrap();
    run.save(&run_paths).unwrap();
    drop(lease);
    Built { session_id, run_id }
}
