//! `agent init` and `policy init`.

use crate::env::TestEnv;

#[test]
fn agent_init_writes_the_template_and_refuses_to_overwrite() {
    let env = TestEnv::new();
    let run = env.run("kxen-agent", &["agent", "init", "--output", "a.yaml"]);
    run.expect(0);
    let written = std::fs::read_to_string(env.path().join("a.yaml")).unwrap();
    assert!(written.contains("kind: DCPAgent"));
    std::fs::write(env.path().join("a.yaml"), "mine").unwrap();
    let run = env.run("kxen-agent", &["agent", "init", "--output", "a.yaml"]);
    run.expect(5);
    assert_eq!(run.jsonl()[0]["kind"], "conflict");
    assert!(run.stderr.contains("a.yaml already exists"));
    assert_eq!(
        std::fs::read_to_string(env.path().join("a.yaml")).unwrap(),
        "mine"
    );
}

#[test]
fn policy_init_writes_valid_json() {
    let env = TestEnv::new();
    env.run("kxen-agent", &["policy", "init"]).expect(0);
    let text = std::fs::read_to_string(env.path().join("policy.json")).unwrap();
    let policy: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(policy["allowShell"], false);
}

#[test]
fn version_and_help() {
    let env = TestEnv::new();
    let run = env.run("kxen-agent", &["--version"]);
    run.expect(0);
    assert!(run.stdout.starts_with("kxen-agent "));
    let run = env.run("kxen-agent", &["--help"]);
    run.expect(0);
    assert!(run.stdout.contains("130  canceled"));
    env.run("dwp", &["--version"]).expect(0);
}

#[test]
fn clap_usage_errors_also_print_a_jsonl_error_line() {
    let env = TestEnv::new();
    let run = env.run("kxen-agent", &["--task", "x", "--task-file", "f"]);
    run.expect(2);
    let lines = run.jsonl();
    assert_eq!(lines[0]["type"], "error");
    assert_eq!(lines[0]["kind"], "usage");
    assert!(run.stderr.contains("cannot be used with"), "{}", run.stderr);
    let run = env.run("kxen-agent", &["--bogus", "--format", "text"]);
    run.expect(2);
    assert!(run.stdout.is_empty(), "{}", run.stdout);
}
