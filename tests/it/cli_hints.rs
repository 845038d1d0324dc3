//! What the user is told: hints that can be pasted as they are, refusals of outputs that cannot
//! work, and a final JSON answer that can be piped into `jq`.

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::run_support::{
    agent, answer, call, finished, fixer, interrupt, run_new, script_config, spawn_new, wait_for,
};

/// The id in the `sessionCreated` event of a run's stdout.
fn session_id(events: &[Value]) -> String {
    events
        .iter()
        .find(|e| e["type"] == "sessionCreated")
        .expect("a sessionCreated event")["sessionId"]
        .as_str()
        .unwrap()
        .to_string()
}

/// An agent whose final output must be a JSON object with `ok`.
fn json_reporter(env: &TestEnv) -> std::path::PathBuf {
    agent(
        env,
        "reporter",
        "read",
        "",
        "{format: json, requiredFields: [ok]}",
    )
}

#[test]
fn a_fenced_json_answer_is_recorded_as_the_bare_object() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let agent = json_reporter(&env);
    let config = script_config(&env, &[answer("```json\n{\"ok\": true}\n```")]);
    let run = run_new(&env, &repo, "Report", &agent, &config, &[]);
    run.expect(0);
    let events = run.jsonl();
    let text = finished(&events)["finalText"].as_str().unwrap();
    let parsed: Value = serde_json::from_str(text).expect("finalText is the JSON object");
    assert_eq!(parsed, json!({"ok": true}));

    // A broken contract fails the run, and the human view says why.
    let config = script_config(&env, &[answer("all fine, no JSON")]);
    let run = run_new(&env, &repo, "Report", &agent, &config, &[]);
    run.expect(1);
    let events = run.jsonl();
    let fin = finished(&events);
    let session = fin["sessionId"].as_str().unwrap();
    let run_id = fin["runId"].as_str().unwrap();
    let text = env.run(
        "kxen-agent",
        &["--format", "text", "run", "show", session, run_id],
    );
    text.expect(0);
    assert!(
        text.stdout
            .contains("error: the final output must be one JSON object"),
        "{}",
        text.stdout
    );
}

#[test]
fn export_refuses_stdout_and_a_missing_directory_naming_it() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let config = script_config(&env, &[answer("done")]);
    let run = run_new(&env, &repo, "Look", &fixer(&env), &config, &[]);
    run.expect(0);
    let id = session_id(&run.jsonl());

    let out = env.run("kxen-agent", &["session", "export", &id, "--output", "-"]);
    out.expect(2);
    assert!(out.stderr.contains("--output -"), "{}", out.stderr);
    assert!(!env.path().join("-").exists());

    let missing = env.path().join("nodir").join("x.bundle.json");
    let out = env.run(
        "kxen-agent",
        &[
            "session",
            "export",
            &id,
            "--output",
            missing.to_str().unwrap(),
        ],
    );
    out.expect(3);
    assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
    assert!(!out.stderr.contains(".tmp-"), "{}", out.stderr);
    assert!(!env.path().join("nodir").exists());
}

#[test]
fn run_show_of_an_unknown_run_names_the_real_session_in_its_hint() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let config = script_config(&env, &[answer("done")]);
    let run = run_new(&env, &repo, "Look", &fixer(&env), &config, &[]);
    let id = session_id(&run.jsonl());
    let bogus = kxen::ids::new_id(kxen::ids::IdKind::Run);
    let out = env.run("kxen-agent", &["run", "show", &id, &bogus]);
    out.expect(3);
    assert!(
        out.stderr
            .contains(&format!("kxen-agent session show {id}")),
        "{}",
        out.stderr
    );
}

#[test]
fn the_input_required_hint_repeats_the_flags_a_resume_needs() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    // A command that ignores SIGTERM outlives the 2 s cleanup window: its outcome is UNKNOWN.
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "trap '' TERM; touch started; sleep 30"}),
            ),
            answer("never reached"),
        ],
    );
    let child = spawn_new(
        &env,
        &repo,
        "Wait",
        &fixer(&env),
        &config,
        &["--allow-shell"],
    );
    wait_for(&repo.join("started"));
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    let hint = stderr
        .lines()
        .find(|l| l.contains("kxen-agent --resume"))
        .unwrap_or_else(|| panic!("no resume hint in: {stderr}"));
    let expected = format!(
        "--workspace {} --allow-shell --config {}",
        repo.display(),
        config.display()
    );
    assert!(hint.contains(&expected), "{hint}");
    // The one unknown operation is named in the resolve command.
    assert!(hint.contains(" op_") && !hint.contains(" OP "), "{hint}");
}

#[test]
fn an_agent_left_without_tools_is_warned_about() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let agent = agent(
        &env,
        "asker",
        "",
        "exec",
        "{format: text, requiredFields: []}",
    );
    let config = script_config(&env, &[answer("done")]);
    let run = run_new(&env, &repo, "Look", &agent, &config, &[]);
    run.expect(0);
    let warning = run
        .jsonl()
        .into_iter()
        .find(|e| e["type"] == "warning")
        .unwrap_or_else(|| panic!("no warning: {}", run.stdout));
    let message = warning["message"].as_str().unwrap();
    assert!(
        message.contains("gets no tools") && message.contains("exec"),
        "{message}"
    );
    // With the shell allowed, the agent has a tool and nothing is said.
    let config = script_config(&env, &[answer("done")]);
    let run = run_new(&env, &repo, "Look", &agent, &config, &["--allow-shell"]);
    run.expect(0);
    assert!(!run.stdout.contains("gets no tools"), "{}", run.stdout);
}

/// A run in a state dir given on the command line: the hint's command names it, so pasting the
/// hint finds the run.
#[test]
fn hints_repeat_a_state_dir_given_on_the_command_line() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let agent = json_reporter(&env);
    let config = script_config(&env, &[answer("no JSON here")]);
    let other = env.path().join("other-state");
    let run = run_new(
        &env,
        &repo,
        "Report",
        &agent,
        &config,
        &["--state-dir", other.to_str().unwrap()],
    );
    run.expect(1);
    let hint = run
        .stderr
        .lines()
        .find(|l| l.starts_with("hint: inspect the run with `"))
        .unwrap_or_else(|| panic!("no hint: {}", run.stderr));
    let command = hint.split('`').nth(1).unwrap();
    let words: Vec<&str> = command.split_whitespace().collect();
    assert_eq!(
        words[..3],
        ["kxen-agent", "--state-dir", other.to_str().unwrap()]
    );
    let pasted = env.run("kxen-agent", &words[1..]);
    pasted.expect(0);
    assert_eq!(pasted.jsonl()[0]["run"]["status"], "failed");
}

#[test]
fn export_never_replaces_a_symlink_or_writes_under_a_file() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let config = script_config(&env, &[answer("done")]);
    let run = run_new(&env, &repo, "Look", &fixer(&env), &config, &[]);
    let id = session_id(&run.jsonl());
    let target = env.path().join("target.json");
    std::fs::write(&target, "keep").unwrap();
    let link = env.path().join("link.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let out = env.run(
        "kxen-agent",
        &["session", "export", &id, "--output", link.to_str().unwrap()],
    );
    out.expect(2);
    assert!(out.stderr.contains("symlink"), "{}", out.stderr);
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");

    let under_file = target.join("x.bundle.json");
    let out = env.run(
        "kxen-agent",
        &[
            "session",
            "export",
            &id,
            "--output",
            under_file.to_str().unwrap(),
        ],
    );
    out.expect(2);
    assert!(out.stderr.contains("is not a directory"), "{}", out.stderr);
}

/// A second Ctrl-C does not wait for the first one's cleanup: it exits at once with 130 (the
/// journal is consistent at any instant; recovery handles the operation in flight).
#[test]
fn a_second_interrupt_exits_at_once_with_130() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    // The command ignores SIGTERM, so the first interrupt's cleanup window lasts its full 2 s.
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "trap '' TERM; touch started; sleep 30"}),
            ),
            answer("never reached"),
        ],
    );
    let child = spawn_new(
        &env,
        &repo,
        "Wait",
        &fixer(&env),
        &config,
        &["--allow-shell"],
    );
    wait_for(&repo.join("started"));
    interrupt(&child);
    std::thread::sleep(std::time::Duration::from_millis(200));
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{stdout}");
    // It did not end the run the graceful way (that would be runFinished, then exit 7).
    assert!(!stdout.contains("\"runFinished\""), "{stdout}");
}
