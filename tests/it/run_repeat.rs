//! Repeated-call detection (src/run/repeat.rs): a call repeated with nothing changed in between
//! is answered from the record, never run again, and `maxRepeatedCalls` repeats end the run
//! `failed` with reason `loopDetected` (exit 1) — also across a kill and a resume.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::run_support::*;

/// Appends one line per execution: the file counts how often the tool really ran.
const COUNTED: &str = "echo ran >> count.txt";

fn repo(env: &TestEnv) -> PathBuf {
    env.git_repo(
        "repo",
        &[
            (
                "check.sh",
                "grep -q fixed code.txt && echo PASS || { echo FAIL; exit 1; }\n",
            ),
            ("code.txt", "broken\n"),
        ],
    )
}

/// The usual agent, with `maxRepeatedCalls: LIMIT` in its execution block when given.
fn agent_with_limit(env: &TestEnv, limit: Option<u32>) -> PathBuf {
    let path = fixer(env);
    if let Some(limit) = limit {
        let yaml = std::fs::read_to_string(&path).unwrap().replace(
            "    maxTurns: 16\n",
            &format!("    maxTurns: 16\n    maxRepeatedCalls: {limit}\n"),
        );
        std::fs::write(&path, yaml).unwrap();
    }
    path
}

fn executions(repo: &Path) -> usize {
    std::fs::read_to_string(repo.join("count.txt"))
        .unwrap_or_default()
        .lines()
        .count()
}

fn tool_messages(env: &TestEnv, session: &str) -> Vec<Value> {
    let show = env.run("kxen-agent", &["session", "show", session]);
    show.expect(0);
    show.jsonl()[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect()
}

fn operations(env: &TestEnv, session: &str, run: &str) -> Vec<Value> {
    let show = env.run("kxen-agent", &["run", "show", session, run]);
    show.expect(0);
    show.jsonl()[0]["operations"].as_array().unwrap().clone()
}

#[test]
fn a_repeated_call_is_answered_from_the_record_and_the_third_repeat_ends_the_run() {
    let env = TestEnv::new();
    let repo = repo(&env);
    let agent = agent_with_limit(&env, None);
    let exec = json!({"command": COUNTED});
    let config = script_config(
        &env,
        &[
            call("c1", "exec", exec.clone()),
            call("c2", "exec", exec.clone()),
            call("c3", "exec", exec.clone()),
            call("c4", "exec", exec.clone()),
            answer("never reached"),
        ],
    );
    let run = run_new(&env, &repo, "Count", &agent, &config, &["--allow-shell"]);
    run.expect(1);
    assert!(run.stderr.contains("loop detected"), "{}", run.stderr);
    assert_eq!(executions(&repo), 1, "the repeats never ran");
    let events = run.jsonl();
    let fin = finished(&events);
    assert_eq!(fin["status"], "failed");
    assert_eq!(fin["reason"], "loopDetected");
    assert_eq!(fin["turns"], 4);
    assert!(
        fin["error"]
            .as_str()
            .unwrap()
            .contains("repeated the same `exec` call 3 times"),
        "{fin}"
    );
    let session = fin["sessionId"].as_str().unwrap();
    let run_id = fin["runId"].as_str().unwrap();
    // One operation; the repeats were answered without one, as any call refused before it runs.
    assert_eq!(operations(&env, session, run_id).len(), 1);
    let tools = tool_messages(&env, session);
    assert_eq!(tools.len(), 4);
    assert!(tools[0]["opId"].is_string());
    for repeat in &tools[1..] {
        assert_eq!(repeat["isError"], true);
        assert!(repeat.get("opId").is_none_or(Value::is_null), "{repeat}");
        let text = repeat["content"].as_str().unwrap();
        assert!(text.contains("already made"), "{text}");
        assert!(
            text.contains("exit code 0"),
            "quotes what it returned: {text}"
        );
    }
    assert!(
        tools[3]["content"]
            .as_str()
            .unwrap()
            .contains("The run ends here")
    );
    let show = env.run("kxen-agent", &["run", "show", session, run_id]);
    assert_eq!(show.jsonl()[0]["run"]["result"]["reason"], "loopDetected");
    env.run("kxen-agent", &["session", "verify", session])
        .expect(0);
}

#[test]
fn an_exec_test_repeated_after_an_edit_runs_again() {
    let env = TestEnv::new();
    let repo = repo(&env);
    let agent = agent_with_limit(&env, None);
    let test = json!({"command": format!("{COUNTED}; sh check.sh")});
    let config = script_config(
        &env,
        &[
            call("c1", "exec", test.clone()),
            call("c2", "read", json!({"path": "code.txt"})),
            call(
                "c3",
                "edit",
                json!({"path": "code.txt", "oldString": "broken", "newString": "fixed"}),
            ),
            call("c4", "exec", test.clone()),
            call("c5", "read", json!({"path": "code.txt"})),
            answer("fixed"),
        ],
    );
    let run = run_new(&env, &repo, "Fix", &agent, &config, &["--allow-shell"]);
    run.expect(0);
    assert_eq!(
        executions(&repo),
        2,
        "the test ran before and after the edit"
    );
    let fin = finished(&run.jsonl()).clone();
    assert_eq!(fin["status"], "completed");
    let session = fin["sessionId"].as_str().unwrap();
    let run_id = fin["runId"].as_str().unwrap();
    assert_eq!(operations(&env, session, run_id).len(), 5);
}

#[test]
fn max_repeated_calls_sets_the_limit_and_zero_turns_detection_off() {
    // The loop: the same write again and again.
    let write = json!({"path": "hello.txt", "content": "hello world\n"});
    let turns = [
        call("c1", "write", write.clone()),
        call("c2", "write", write.clone()),
        call("c3", "write", write.clone()),
        answer("done"),
    ];
    let env = TestEnv::new();
    let repo = repo(&env);
    let agent = agent_with_limit(&env, Some(1));
    let config = script_config(&env, &turns);
    let run = run_new(&env, &repo, "Write", &agent, &config, &[]);
    run.expect(1);
    let fin = finished(&run.jsonl()).clone();
    assert_eq!(fin["reason"], "loopDetected");
    assert_eq!(fin["turns"], 2, "the first repeat ends the run");
    assert!(
        fin["error"]
            .as_str()
            .unwrap()
            .contains("maxRepeatedCalls 1")
    );

    let env = TestEnv::new();
    let repo = self::repo(&env);
    let agent = agent_with_limit(&env, Some(0));
    let config = script_config(&env, &turns);
    let run = run_new(&env, &repo, "Write", &agent, &config, &[]);
    run.expect(0);
    let fin = finished(&run.jsonl()).clone();
    let session = fin["sessionId"].as_str().unwrap();
    let run_id = fin["runId"].as_str().unwrap();
    assert_eq!(
        operations(&env, session, run_id).len(),
        3,
        "off: every call ran"
    );

    // Out of range: the definition is invalid input.
    let env = TestEnv::new();
    let repo = self::repo(&env);
    let agent = agent_with_limit(&env, Some(101));
    let config = script_config(&env, &turns);
    let run = run_new(&env, &repo, "Write", &agent, &config, &[]);
    run.expect(4);
    assert!(run.stderr.contains("maxRepeatedCalls"), "{}", run.stderr);
}

/// The model always repeats the counted `exec`; its third call waits (marker `waiting`) until
/// the test kills the runner. The resumed run must still know the two calls before the kill.
#[test]
fn a_kill_and_resume_in_the_middle_of_a_loop_keeps_the_count() {
    let env = TestEnv::new();
    let repo = repo(&env);
    let agent = agent_with_limit(&env, None);
    let script = format!(
        "n=$(( $(cat calls 2>/dev/null || echo 0) + 1 )); echo $n > calls\n\
         if [ $n = 3 ] && [ ! -e waiting ]; then touch waiting; sleep 60; fi\n\
         printf '%s' '{{\"text\":\"\",\"toolCalls\":[{{\"id\":\"c'$n'\",\"name\":\"exec\",\"arguments\":{{\"command\":\"{COUNTED}\"}}}}]}}'\n"
    );
    let config = command_config(&env, &script);
    let mut child = spawn_new(&env, &repo, "Count", &agent, &config, &["--allow-shell"]);
    wait_for(&env.path().join("model/waiting"));
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(executions(&repo), 1);
    let list = env.run("kxen-agent", &["session", "list"]);
    let session = list.jsonl()[0]["id"].as_str().unwrap().to_string();
    // Before the kill: the call ran once and its first repeat was answered from the record.
    assert_eq!(tool_messages(&env, &session).len(), 2);

    let resumed = resume(&env, &session, &config, &["--allow-shell"]);
    resumed.expect(1);
    assert_eq!(
        executions(&repo),
        1,
        "the resumed run did not run the repeat"
    );
    let fin = finished(&resumed.jsonl()).clone();
    assert_eq!(fin["reason"], "loopDetected");
    // Call 3 was abandoned by the kill (nothing recorded); calls 4 and 5 are repeats 2 and 3.
    assert_eq!(fin["turns"], 4);
    assert_eq!(tool_messages(&env, &session).len(), 4);
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(0);
}
