//! The one durable boundary (issue 30 item 1): calls started together in one model turn pass
//! the same gate as a lone call. A call whose rule is `ask` is held — journaled
//! `awaitingApproval`, nothing started — and holds every later call of its turn; the calls
//! before it run.

use serde_json::{Value, json};

use crate::env::{Run, TestEnv};
use crate::mcp::{calls, config as mcp_config, fixture_server, python, text_agent};
use crate::run_support::*;
use crate::task::{delegator, tasks};

/// One model turn with every call of `calls` (`(id, tool, arguments)`).
fn turn(calls: &[(&str, &str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, arguments)| json!({"id": id, "name": name, "arguments": arguments}))
        .collect();
    json!({"text": "", "toolCalls": calls, "usage": {"inputTokens": 10, "outputTokens": 2}})
}

fn policy(env: &TestEnv, text: &str) -> std::path::PathBuf {
    let path = env.path().join("policy.json");
    std::fs::write(&path, text).unwrap();
    path
}

fn approval_events(run: &Run) -> Vec<Value> {
    run.jsonl()
        .into_iter()
        .filter(|e| e["type"] == "runApprovalRequired")
        .collect()
}

fn started_tools(run: &Run) -> Vec<String> {
    run.jsonl()
        .into_iter()
        .filter(|e| e["type"] == "toolStarted")
        .map(|e| e["tool"].as_str().unwrap().to_string())
        .collect()
}

fn first_session(env: &TestEnv) -> (String, String) {
    let list = env.run("kxen-agent", &["session", "list"]);
    list.expect(0);
    let first = list.jsonl().into_iter().next().unwrap();
    (
        first["id"].as_str().unwrap().to_string(),
        first["lastRunId"].as_str().unwrap().to_string(),
    )
}

/// Approves the one operation `run` stopped for and resumes; returns the resumed run.
fn approve_and_resume(env: &TestEnv, held: &Run, resume: &[&str]) -> Run {
    let asked = approval_events(held);
    assert_eq!(asked.len(), 1, "one held call at a time: {asked:?}");
    let (session, run) = first_session(env);
    let op = asked[0]["opId"].as_str().unwrap();
    env.run("kxen-agent", &["run", "approve", &session, &run, op])
        .expect(0);
    let mut args = vec!["--resume", session.as_str()];
    args.extend_from_slice(resume);
    env.run("kxen-agent", &args)
}

#[test]
fn two_read_calls_started_together_are_each_held_for_approval_and_the_call_before_runs() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n"), ("b.txt", "beta\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            turn(&[
                ("g", "glob", json!({"pattern": "*.txt"})),
                ("r1", "read", json!({"path": "a.txt"})),
                ("r2", "read", json!({"path": "b.txt"})),
            ]),
            answer("read both"),
        ],
    );
    let policy = policy(&env, r#"{"mcpTools": {"read": "ask"}}"#);
    let flags = [
        "--config",
        config.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
    ];
    let first = run_new(&env, &repo, "Read", &agent, &config, &flags[2..]);
    first.expect(7);
    assert_eq!(
        started_tools(&first),
        ["glob"],
        "only the call before the held one ran"
    );
    let asked = approval_events(&first);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["arguments"], json!({"path": "a.txt"}));

    let second = approve_and_resume(&env, &first, &flags);
    second.expect(7);
    assert_eq!(
        started_tools(&second),
        ["read"],
        "the approved read, and not the next one"
    );
    assert_eq!(
        approval_events(&second)[0]["arguments"],
        json!({"path": "b.txt"})
    );

    let third = approve_and_resume(&env, &second, &flags);
    third.expect(0);
    assert_eq!(started_tools(&third), ["read"]);
    let (session, run) = first_session(&env);
    let show = env.run("kxen-agent", &["run", "show", &session, &run]);
    show.expect(0);
    let ops = show.jsonl().remove(0)["operations"].clone();
    let mut by_call: Vec<&Value> = ops.as_array().unwrap().iter().collect();
    by_call.sort_by_key(|op| op["callIndex"].as_u64());
    let histories: Vec<Vec<String>> = by_call
        .iter()
        .map(|op| {
            op["history"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h.as_str().unwrap().to_string())
                .collect()
        })
        .collect();
    let approved = [
        "awaitingApproval",
        "approved",
        "started",
        "outcomeKnown",
        "settled",
    ];
    assert_eq!(histories.len(), 3, "{ops}");
    assert_eq!(histories[1], approved, "{ops}");
    assert_eq!(histories[2], approved, "{ops}");
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(0);
}

#[test]
fn two_task_calls_started_together_are_held_and_no_child_session_exists() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = delegator(&env, 10);
    let config = script_config(
        &env,
        &[
            tasks(&[("t1", "a", "Do a"), ("t2", "b", "Do b")]),
            answer("done"),
        ],
    );
    let policy = policy(&env, r#"{"allowShell": true, "mcpTools": {"task": "ask"}}"#);
    let first = run_new(
        &env,
        &repo,
        "Delegate",
        &agent,
        &config,
        &["--policy", policy.to_str().unwrap()],
    );
    first.expect(7);
    assert!(started_tools(&first).is_empty(), "nothing started");
    assert_eq!(approval_events(&first).len(), 1);
    let list = env.run("kxen-agent", &["session", "list"]);
    assert_eq!(list.jsonl().len(), 1, "no child Session: {}", list.stdout);
}

#[test]
fn two_mcp_calls_of_one_turn_are_each_held_for_approval() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = mcp_config(
        &env,
        &[
            turn(&[
                ("m1", "mcp__fx__slow", json!({"text": "one", "seconds": 0})),
                ("m2", "mcp__fx__slow", json!({"text": "two", "seconds": 0})),
            ]),
            answer("done"),
        ],
        &fixture_server(&env, &py, "sandbox = \"off\"\n"),
    );
    let policy = policy(
        &env,
        r#"{"allowMcp": true, "mcpTools": {"mcp__fx__*": "ask"}}"#,
    );
    let agent = text_agent(&env, "mcp__fx__slow", "");
    let first = run_new(
        &env,
        &repo,
        "t",
        &agent,
        &cfg,
        &["--policy", policy.to_str().unwrap()],
    );
    first.expect(7);
    assert!(started_tools(&first).is_empty());
    assert!(calls(&env).is_empty(), "nothing reached the server");
    let flags = [
        "--config",
        cfg.to_str().unwrap(),
        "--policy",
        policy.to_str().unwrap(),
    ];
    let second = approve_and_resume(&env, &first, &flags);
    second.expect(7);
    assert_eq!(calls(&env), ["one"]);
    let third = approve_and_resume(&env, &second, &flags);
    third.expect(0);
    assert_eq!(calls(&env), ["one", "two"]);
}
