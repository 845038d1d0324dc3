//! Read-only views: `session list`, `session show`, `run show` never write.

use serde_json::json;

use crate::env::TestEnv;
use crate::run_support::*;

#[test]
fn read_only_commands_on_an_empty_state_dir_write_nothing() {
    let env = TestEnv::new();
    let run = env.run("kxen-agent", &["session", "list"]);
    run.expect(0);
    assert_eq!(run.stdout, "");
    assert!(
        !env.state_dir().exists(),
        "session list created the state dir"
    );
    let run = env.run(
        "kxen-agent",
        &["session", "show", "ses_0000000000aaaaaaaaaaaaaaaa"],
    );
    run.expect(3);
    assert_eq!(run.jsonl()[0]["kind"], "notFound");
    assert!(run.stderr.contains("session list"), "{}", run.stderr);
    let run = env.run("kxen-agent", &["run", "show", "../etc", "run_x"]);
    run.expect(4);
    assert!(!env.state_dir().exists());
}

/// `--format text` on `session show` and `run show` is a human summary, not JSON.
#[test]
fn text_views_summarize_session_and_run() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call("c1", "write", json!({"path": "a.txt", "content": "a"})),
            answer("all written"),
        ],
    );
    run_new(&env, &repo, "write a", &agent, &config, &[]).expect(0);
    let list = env
        .run("kxen-agent", &["session", "list"])
        .jsonl()
        .remove(0);
    let (session, run) = (
        list["id"].as_str().unwrap(),
        list["lastRunId"].as_str().unwrap(),
    );
    let shown = env.run(
        "kxen-agent",
        &["--format", "text", "session", "show", session],
    );
    shown.expect(0);
    assert!(
        shown.stdout.starts_with(&format!("session {session}")),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains("[assistant] all written"),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.contains("-> write"), "{}", shown.stdout);
    let shown = env.run(
        "kxen-agent",
        &["--format", "text", "run", "show", session, run],
    );
    shown.expect(0);
    assert!(
        shown.stdout.contains("result: all written"),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.contains("settled"), "{}", shown.stdout);
}

/// One damaged `session.json` does not hide the healthy Sessions: `session list` lists them,
/// reports the damaged one as a `damagedSession` entry with its error and a warning, and exits
/// 0; `--strict` lists the same and exits 10.
#[test]
fn session_list_reports_a_damaged_session_and_lists_the_rest() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = script_config(&env, &[answer("done")]);
    run_new(&env, &repo, "one", &agent, &config, &[]).expect(0);
    std::fs::write(
        env.path().join("model/turns.jsonl"),
        format!("{}\n", answer("done")),
    )
    .unwrap();
    run_new(&env, &repo, "two", &agent, &config, &[]).expect(0);
    let listed = env.run("kxen-agent", &["session", "list"]).jsonl();
    assert_eq!(listed.len(), 2);
    let (damaged, healthy) = (listed[0]["id"].as_str().unwrap(), listed[1]["id"].clone());
    let session_json = env
        .state_dir()
        .join("sessions")
        .join(damaged)
        .join("session.json");
    std::fs::write(&session_json, "{\"formatVersion\": 1, \"id\": tru").unwrap();

    let run = env.run("kxen-agent", &["session", "list"]);
    run.expect(0);
    let listed = run.jsonl();
    assert_eq!(listed.len(), 2, "{}", run.stdout);
    assert_eq!(listed[0]["type"], "damagedSession");
    assert_eq!(listed[0]["id"], damaged);
    assert_eq!(listed[0]["error"]["kind"], "corrupt");
    let message = listed[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("session.json"), "{message}");
    assert_eq!(listed[1]["type"], "session");
    assert_eq!(listed[1]["id"], healthy);
    assert!(
        run.stderr.starts_with("warning: ") && run.stderr.contains(damaged),
        "{}",
        run.stderr
    );

    let text = env.run("kxen-agent", &["--format", "text", "session", "list"]);
    text.expect(0);
    assert!(
        text.stdout.contains(&format!("{damaged}  DAMAGED")),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(healthy.as_str().unwrap()),
        "{}",
        text.stdout
    );

    let strict = env.run("kxen-agent", &["session", "list", "--strict"]);
    strict.expect(10);
    assert!(
        strict.stdout.contains(healthy.as_str().unwrap()),
        "{}",
        strict.stdout
    );
    assert!(strict.stderr.contains("error: "), "{}", strict.stderr);
}
