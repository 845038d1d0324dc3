//! `kxen-agent run`: the agent loop end to end with the script provider in real git repos.

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::run_support::*;

fn repo(env: &TestEnv) -> std::path::PathBuf {
    env.git_repo(
        "repo",
        &[
            ("check.sh", "test \"$(cat greeting.txt)\" = 'hello, world' && echo PASS || { echo FAIL; exit 1; }\n"),
            ("greeting.txt", "hello wrld\n"),
        ],
    )
}

#[test]
fn a_run_that_reads_edits_writes_and_executes_completes() {
    let env = TestEnv::new();
    let repo = repo(&env);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call("c1", "read", json!({"path": "check.sh"})),
            call("c2", "exec", json!({"command": "sh check.sh"})),
            call(
                "c3",
                "edit",
                json!({"path": "greeting.txt", "oldString": "hello wrld", "newString": "hello, world"}),
            ),
            call(
                "c4",
                "write",
                json!({"path": "notes/FIX.md", "content": "fixed the greeting\n"}),
            ),
            call(
                "c5",
                "exec",
                json!({"command": "sh check.sh && echo ran >> exec-count.txt"}),
            ),
            answer("The check passes."),
        ],
    );
    let run = run_new(
        &env,
        &repo,
        "Fix the check",
        &agent,
        &config,
        &["--allow-shell"],
    );
    run.expect(0);
    // The files changed as scripted.
    assert_eq!(
        std::fs::read_to_string(repo.join("greeting.txt")).unwrap(),
        "hello, world\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("notes/FIX.md")).unwrap(),
        "fixed the greeting\n"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("exec-count.txt")).unwrap(),
        "ran\n"
    );

    // The events stream is valid JSONL with the documented types, in order.
    let events = run.jsonl();
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(types[0], "sessionCreated");
    assert_eq!(types[1], "runStarted");
    assert_eq!(types.iter().filter(|t| **t == "toolStarted").count(), 5);
    assert_eq!(types.iter().filter(|t| **t == "toolFinished").count(), 5);
    assert_eq!(*types.last().unwrap(), "runFinished");
    let fin = finished(&events);
    assert_eq!(fin["status"], "completed");
    assert_eq!(fin["finalText"], "The check passes.");
    assert_eq!(fin["turns"], 6);
    assert_eq!(fin["usage"], json!({"inputTokens": 70, "outputTokens": 15}));
    let failing_exec = events
        .iter()
        .filter(|e| e["type"] == "toolFinished")
        .nth(1)
        .unwrap();
    assert_eq!(failing_exec["isError"], true);
    assert!(failing_exec["output"].as_str().unwrap().contains("FAIL"));

    // run show: the run is completed and settled, every operation is settled.
    let session = fin["sessionId"].as_str().unwrap();
    let run_id = fin["runId"].as_str().unwrap();
    let show = env.run("kxen-agent", &["run", "show", session, run_id]);
    show.expect(0);
    let shown = &show.jsonl()[0];
    assert_eq!(shown["run"]["status"], "completed");
    assert_eq!(shown["run"]["settled"], true);
    let ops = shown["operations"].as_array().unwrap();
    let tools: Vec<&str> = ops.iter().map(|o| o["tool"].as_str().unwrap()).collect();
    assert_eq!(tools, ["read", "exec", "edit", "write", "exec"]);
    for op in ops {
        assert_eq!(op["phase"], "settled", "{op}");
        assert_eq!(op["history"], json!(["started", "outcomeKnown", "settled"]));
    }

    // session show: the conversation, with usage per model call and the final message once.
    let show = env.run("kxen-agent", &["session", "show", session]);
    show.expect(0);
    let shown = &show.jsonl()[0];
    let messages = shown["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );
    assert_eq!(messages[0]["content"], "Fix the check");
    assert_eq!(
        messages[1]["usage"],
        json!({"inputTokens": 10, "outputTokens": 2})
    );
    assert_eq!(messages.last().unwrap()["content"], "The check passes.");
    assert_eq!(shown["workspace"]["branch"], "main");
    assert_eq!(shown["lock"]["definition"]["metadata"]["name"], "fixer");

    // session list shows it; the state files are private.
    let list = env.run("kxen-agent", &["session", "list"]);
    list.expect(0);
    assert_eq!(list.jsonl()[0]["id"], session);
    assert_eq!(list.jsonl()[0]["lastRunStatus"], "completed");
    use std::os::unix::fs::PermissionsExt;
    for file in files_under(&env.state_dir().join("sessions")) {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
    }
}

#[test]
fn text_format_and_run_omitted_and_task_from_stdin() {
    let env = TestEnv::new();
    let repo = repo(&env);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            json!({"text": "Looking.", "toolCalls": [{"id": "c1", "name": "read", "arguments": {"path": "greeting.txt"}}]}),
            answer("It says hello wrld."),
        ],
    );
    // `run` omitted, --workspace defaults to the current directory, task on stdin.
    let mut cmd = env.cmd("kxen-agent");
    cmd.current_dir(&repo).args([
        "--stdin",
        "--agent",
        agent.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--format",
        "text",
    ]);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"What does the greeting say?")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Looking."), "{stdout}");
    assert!(
        stdout.contains("[read] {\"path\":\"greeting.txt\"} -> ok"),
        "{stdout}"
    );
    assert!(stdout.contains("completed after 2 turns"), "{stdout}");
    assert!(stdout.contains("It says hello wrld."), "{stdout}");
    let list = env.run("kxen-agent", &["session", "list"]);
    let session = list.jsonl()[0]["id"].as_str().unwrap().to_string();
    let show = env.run("kxen-agent", &["session", "show", &session]);
    let shown = &show.jsonl()[0];
    assert_eq!(
        shown["messages"][0]["content"],
        "What does the greeting say?"
    );
    let root = std::fs::canonicalize(&repo).unwrap();
    assert_eq!(shown["workspace"]["root"], root.to_str().unwrap());
}

#[test]
fn json_output_missing_a_required_field_fails_naming_it() {
    let env = TestEnv::new();
    let repo = repo(&env);
    let agent = agent(
        &env,
        "reporter",
        "read",
        "",
        "{format: json, requiredFields: [summary, passed]}",
    );
    let config = script_config(&env, &[answer(r#"{"summary": "all good"}"#)]);
    let run = run_new(&env, &repo, "Report", &agent, &config, &[]);
    run.expect(1);
    let events = run.jsonl();
    let fin = finished(&events);
    assert_eq!(fin["status"], "failed");
    assert_eq!(fin["reason"], "outputContract");
    let error = fin["error"].as_str().unwrap();
    assert!(
        error.contains("`passed`") && !error.contains("`summary`"),
        "{error}"
    );
    assert!(run.stderr.contains("passed"), "{}", run.stderr);
    let show = env.run(
        "kxen-agent",
        &[
            "run",
            "show",
            fin["sessionId"].as_str().unwrap(),
            fin["runId"].as_str().unwrap(),
        ],
    );
    let shown = &show.jsonl()[0];
    assert_eq!(shown["run"]["status"], "failed");
    assert_eq!(shown["run"]["settled"], true);
    assert_eq!(shown["run"]["result"]["reason"], "outputContract");

    // With every field present the same agent completes.
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a", "a")]);
    let agent = crate::run_support::agent(
        &env,
        "reporter",
        "read",
        "",
        "{format: json, requiredFields: [summary, passed]}",
    );
    let config = script_config(
        &env,
        &[answer(
            "```json\n{\"summary\": \"ok\", \"passed\": true}\n```",
        )],
    );
    run_new(&env, &repo, "Report", &agent, &config, &[]).expect(0);
}

#[test]
fn malformed_model_calls_are_tool_errors_and_never_run() {
    let env = TestEnv::new();
    let repo = repo(&env);
    // exec is optional but shell is off: the lock does not allow it.
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call("c1", "rm_rf", json!({"path": "."})),
            call("c2", "write", json!("not an object")),
            call("c3", "exec", json!({"command": "echo ran > ran.txt"})),
            call("c4", "read", json!({"path": "../../etc/passwd"})),
            answer("done"),
        ],
    );
    let run = run_new(&env, &repo, "Try things", &agent, &config, &[]);
    run.expect(0);
    assert!(
        !repo.join("ran.txt").exists(),
        "a tool outside the lock ran"
    );
    let events = run.jsonl();
    let finished_tools: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "toolFinished")
        .collect();
    assert_eq!(finished_tools.len(), 4);
    for e in &finished_tools {
        assert_eq!(e["isError"], true, "{e}");
    }
    assert!(
        finished_tools[0]["output"]
            .as_str()
            .unwrap()
            .contains("unknown tool `rm_rf`")
    );
    assert!(
        finished_tools[1]["output"]
            .as_str()
            .unwrap()
            .contains("must be a JSON object")
    );
    assert!(
        finished_tools[2]["output"]
            .as_str()
            .unwrap()
            .contains("not allowed")
    );
    // Only the confined read reached the journal (it ran, and failed, as a tool).
    let fin = finished(&events);
    let show = env.run(
        "kxen-agent",
        &[
            "run",
            "show",
            fin["sessionId"].as_str().unwrap(),
            fin["runId"].as_str().unwrap(),
        ],
    );
    let ops = show.jsonl()[0]["operations"].as_array().unwrap().clone();
    assert_eq!(ops.len(), 1);
    assert_eq!(ops[0]["tool"], "read");
    assert_eq!(ops[0]["phase"], "settled");
    assert_eq!(ops[0]["output"]["isError"], true);
}

#[test]
fn budgets_and_provider_failures_end_the_run() {
    // maxTurns reached: failed, budgetExhausted, exit 8.
    let env = TestEnv::new();
    let repo = repo(&env);
    let agent = fixer(&env);
    // Distinct arguments: identical calls would end the run `loopDetected` first.
    let turns: Vec<Value> = (0..20)
        .map(|i| {
            call(
                &format!("c{i}"),
                "read",
                json!({"path": "greeting.txt", "limit": i + 1}),
            )
        })
        .collect();
    let config = script_config(&env, &turns);
    let run = run_new(&env, &repo, "Loop", &agent, &config, &[]);
    run.expect(8);
    let events = run.jsonl();
    let fin = finished(&events);
    assert_eq!(fin["status"], "failed");
    assert_eq!(fin["reason"], "budgetExhausted");
    assert_eq!(fin["turns"], 16);

    // The script runs out: the model call fails maxPureRetries+1 times, exit 9, named.
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a", "a")]);
    let agent = fixer(&env);
    let config = script_config(&env, &[call("c1", "read", json!({"path": "a"}))]);
    let run = run_new(&env, &repo, "Go", &agent, &config, &[]);
    run.expect(9);
    let events = run.jsonl();
    let fin = finished(&events);
    assert_eq!(fin["reason"], "providerFailed");
    assert!(
        fin["error"].as_str().unwrap().contains("exhausted"),
        "{fin}"
    );
}

#[test]
fn large_tool_output_goes_to_a_blob_and_the_journal_keeps_its_hash() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a", "a\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "i=0; while [ $i -lt 3000 ]; do echo \"line $i of a long output that fills the buffer\"; i=$((i+1)); done"}),
            ),
            answer("done"),
        ],
    );
    let run = run_new(
        &env,
        &repo,
        "Print a lot",
        &agent,
        &config,
        &["--allow-shell"],
    );
    run.expect(0);
    let events = run.jsonl();
    let fin = finished(&events);
    let shown = env.run(
        "kxen-agent",
        &[
            "run",
            "show",
            fin["sessionId"].as_str().unwrap(),
            fin["runId"].as_str().unwrap(),
        ],
    );
    let op = shown.jsonl()[0]["operations"][0].clone();
    let blob = &op["output"]["blob"];
    let sha = blob["sha256"].as_str().expect("a blob reference");
    let stored = std::fs::read(env.state_dir().join("blobs").join(sha)).unwrap();
    assert_eq!(stored.len() as u64, blob["bytes"].as_u64().unwrap());
    assert!(String::from_utf8_lossy(&stored).contains("line 2999 of"));
    assert!(op["output"]["text"].as_str().unwrap().len() <= 64 * 1024 + 1024);
}
