//! Bad input to `kxen-agent run`: one clear error, the right exit code, nothing written.

use serde_json::json;

use crate::env::TestEnv;
use crate::run_support::*;

/// Runs `kxen-agent run` with `args`, expects `code`, and checks the state dir was not touched.
fn refused(env: &TestEnv, args: &[&str], code: i32, message: &str) {
    let run = env.run("kxen-agent", args);
    run.expect(code);
    assert!(
        run.stderr.contains(message),
        "expected {message:?} in:\n{}",
        run.stderr
    );
    assert!(run.stderr.starts_with("error: "), "{}", run.stderr);
    assert!(
        !env.state_dir().exists(),
        "the state dir was created: {:?}",
        files_under(&env.state_dir())
    );
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn session_creation_failures_write_nothing() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a")]);
    let repo = repo.to_str().unwrap();
    let agent = fixer(&env);
    let agent = agent.to_str().unwrap();
    let config = script_config(&env, &[answer("done")]);
    let config = config.to_str().unwrap();
    let base = |extra: &[&'static str]| -> Vec<String> {
        let mut v: Vec<String> = ["run", "--agent", agent, "--config", config]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };

    let mut v = base(&["--task", "   \n"]);
    v.extend(["--workspace".into(), repo.into()]);
    refused(&env, &args(&v), 2, "the task is empty");

    let mut v = base(&[]);
    v.extend(["--workspace".into(), repo.into()]);
    refused(&env, &args(&v), 2, "no task given");

    let mut v = base(&["--task", "x", "--task-file", "t.txt"]);
    v.extend(["--workspace".into(), repo.into()]);
    let run = env.run("kxen-agent", &args(&v));
    run.expect(2);
    assert!(!env.state_dir().exists());

    let mut v = base(&["--task-file", "missing-task.txt"]);
    v.extend(["--workspace".into(), repo.into()]);
    refused(&env, &args(&v), 3, "missing-task.txt");

    std::fs::create_dir_all(env.path().join("a-dir")).unwrap();
    let mut v = base(&["--task-file", "a-dir"]);
    v.extend(["--workspace".into(), repo.into()]);
    refused(&env, &args(&v), 4, "a-dir");

    let v = base(&["--task", "x", "--workspace", "no-such-dir"]);
    refused(&env, &args(&v), 3, "no-such-dir");

    std::fs::write(env.path().join("plain-file"), "x").unwrap();
    let v = base(&["--task", "x", "--workspace", "plain-file"]);
    refused(&env, &args(&v), 4, "plain-file");

    // A required capability the policy denies: exit 6.
    let needs_shell = agent_with(&env, "shell_needed", "read, exec", "");
    let run_args = [
        "run",
        "--workspace",
        repo,
        "--task",
        "x",
        "--agent",
        needs_shell.to_str().unwrap(),
        "--config",
        config,
    ];
    refused(&env, &run_args, 6, "exec");

    // An invalid definition file: exit 4.
    std::fs::write(env.path().join("bad.yaml"), "kind: Nope\n").unwrap();
    let run_args = [
        "run",
        "--workspace",
        repo,
        "--task",
        "x",
        "--agent",
        "bad.yaml",
        "--config",
        config,
    ];
    refused(&env, &run_args, 4, "bad.yaml");

    // A model role the config does not map: exit 4, naming the config file.
    std::fs::write(
        env.path().join("roles.toml"),
        "[providers.p]\nkind = \"script\"\npath = \"t.jsonl\"\n[roles]\nplanning = \"p\"\n",
    )
    .unwrap();
    let run_args = [
        "run",
        "--workspace",
        repo,
        "--task",
        "x",
        "--agent",
        agent,
        "--config",
        "roles.toml",
    ];
    refused(&env, &run_args, 4, "roles.toml");
}

fn agent_with(env: &TestEnv, name: &str, required: &str, optional: &str) -> std::path::PathBuf {
    agent(
        env,
        name,
        required,
        optional,
        "{format: text, requiredFields: []}",
    )
}

#[test]
fn the_builder_writes_the_definition_when_no_agent_is_given() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let definition = "```yaml\napiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: built_reader}\nspec:\n  objective: Answer questions about the repository.\n  instructions: [Read the files.]\n  successCriteria: []\n  capabilities: {required: [read], optional: [glob]}\n  execution: {maxTurns: 8}\n  output: {format: text, requiredFields: []}\n```";
    // The planning role has its own script: the Builder's answer is its first line.
    let dir = env.path().join("model");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("plan.jsonl"),
        format!("{}\n", json!({"text": definition})),
    )
    .unwrap();
    std::fs::write(
        dir.join("exec.jsonl"),
        format!(
            "{}\n{}\n",
            call("c1", "read", json!({"path": "a.txt"})),
            answer("It says alpha.")
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("config.toml"),
        "[providers.plan]\nkind = \"script\"\npath = \"plan.jsonl\"\n[providers.exec]\nkind = \"script\"\npath = \"exec.jsonl\"\n[roles]\nplanning = \"plan\"\nexecution = \"exec\"\n",
    )
    .unwrap();
    let config = dir.join("config.toml");
    let run = env.run(
        "kxen-agent",
        &[
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "What does a.txt say?",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    run.expect(0);
    let events = run.jsonl();
    assert_eq!(events[0]["type"], "sessionCreated");
    assert_eq!(events[0]["built"], true);
    assert_eq!(events[0]["agent"], "built_reader");
    assert_eq!(events[0]["capabilities"], json!(["glob", "read"]));
    let fin = finished(&events);
    assert_eq!(fin["finalText"], "It says alpha.");
    let show = env.run(
        "kxen-agent",
        &["session", "show", fin["sessionId"].as_str().unwrap()],
    );
    let shown = &show.jsonl()[0];
    // The original task is the first run's input.
    assert_eq!(shown["messages"][0]["content"], "What does a.txt say?");

    // Builder output that is not a valid definition, or picks a capability outside the
    // permitted catalog: exit 4, nothing written.
    for bad in [
        json!({"text": "Sure! Here is a plan: read the files."}),
        json!({"text": definition.replace("optional: [glob]", "optional: [exec]")}),
    ] {
        let env = TestEnv::new();
        let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
        let config = script_config(&env, &[bad]);
        let run = env.run(
            "kxen-agent",
            &[
                "run",
                "--workspace",
                repo.to_str().unwrap(),
                "--task",
                "x",
                "--config",
                config.to_str().unwrap(),
            ],
        );
        run.expect(4);
        assert!(run.stderr.contains("Builder"), "{}", run.stderr);
        assert!(!env.state_dir().exists());
    }
}

#[test]
fn a_model_config_that_is_not_utf8_is_invalid_input_naming_the_file() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a")]);
    let agent = fixer(&env);
    let config = env.path().join("latin1.toml");
    std::fs::write(&config, b"# caf\xe9\n[roles]\n").unwrap();
    let run_args = [
        "run",
        "--workspace",
        repo.to_str().unwrap(),
        "--task",
        "x",
        "--agent",
        agent.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ];
    refused(&env, &run_args, 4, "latin1.toml");
    let run = env.run("kxen-agent", &run_args);
    assert!(run.stderr.contains("UTF-8"), "{}", run.stderr);
}

/// A directory given where a file is expected (`--config`, `--agent`, `--policy`,
/// `--task-file`) is the user's mistake: exit 4 naming it, never exit 1 (internal).
#[test]
fn a_directory_given_as_a_file_option_is_invalid_input() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a")]);
    let agent = fixer(&env);
    let dir = env.path().join("a-directory");
    std::fs::create_dir(&dir).unwrap();
    let dir = dir.to_str().unwrap();
    let base = ["run", "--workspace", repo.to_str().unwrap()];
    for (option, rest) in [
        (
            "--config",
            vec!["--task", "x", "--agent", agent.to_str().unwrap()],
        ),
        ("--agent", vec!["--task", "x"]),
        (
            "--policy",
            vec!["--task", "x", "--agent", agent.to_str().unwrap()],
        ),
        ("--task-file", vec!["--agent", agent.to_str().unwrap()]),
    ] {
        let mut run_args: Vec<&str> = base.to_vec();
        run_args.extend(rest);
        run_args.extend([option, dir]);
        refused(&env, &run_args, 4, "a-directory");
    }
    let check = env.run("kxen-agent", &["policy", "check", "--config", dir]);
    check.expect(4);
    assert!(check.stderr.contains("a-directory"), "{}", check.stderr);
}

#[test]
fn a_script_line_over_the_limit_fails_the_model_call_naming_file_and_line() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a")]);
    // 17 MiB of valid JSON on one line: more than the 16 MiB a script line may hold.
    let huge = answer(&"x".repeat(17 << 20));
    let config = script_config(&env, &[huge]);
    let run = run_new(&env, &repo, "x", &fixer(&env), &config, &[]);
    run.expect(9);
    assert!(
        run.stderr
            .contains("turns.jsonl:1: a response line is longer than 16777216 bytes"),
        "{}",
        run.stderr
    );
}
