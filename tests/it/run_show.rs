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
