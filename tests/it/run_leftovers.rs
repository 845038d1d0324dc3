//! A SIGKILLed runtime's `exec` may leave programs running (the shell dies with the runtime, what
//! it started does not). The next start of the Session stops them before it records the
//! operation as UNKNOWN, so nothing of it runs on while an operator resolves it.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::env::TestEnv;
use crate::run_support::{answer, call, fixer, script_config};

#[test]
fn resume_stops_what_a_killed_runtime_left_running_before_recording_unknown() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    // The inner shell is a child of the tool's shell: it survives the runtime's death and would
    // write `late.txt` as soon as `release` exists.
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "touch started; sh -c 'while [ ! -e release ]; do sleep 0.05; done; touch late.txt'"}),
            ),
            answer("done"),
        ],
    );
    let flags = [
        "--agent",
        agent.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--allow-shell",
    ];
    let mut child = env
        .cmd("kxen-agent")
        .args([
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "Wait",
        ])
        .args(flags)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while !repo.join("started").exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let list = env.run("kxen-agent", &["session", "list"]);
    let session = list.jsonl()[0]["id"].as_str().unwrap().to_string();

    let resumed = env.run(
        "kxen-agent",
        &[
            "--resume",
            &session,
            "--config",
            config.to_str().unwrap(),
            "--allow-shell",
        ],
    );
    resumed.expect(7);
    let events = resumed.jsonl();
    let warning = events
        .iter()
        .find(|e| e["type"] == "warning")
        .unwrap_or_else(|| panic!("no warning event: {}", resumed.stdout));
    // The inner shell, and the `sleep` it may be running at that moment.
    let message = warning["message"].as_str().unwrap();
    assert!(
        message.starts_with("stopped 1 process") || message.starts_with("stopped 2 process"),
        "{warning}"
    );

    // The leftover is gone: releasing it changes nothing any more.
    std::fs::write(repo.join("release"), "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        assert!(
            !repo.join("late.txt").exists(),
            "a leftover of the killed run changed the workspace after recovery"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let list = env.run("kxen-agent", &["session", "list"]);
    let run_id = list.jsonl()[0]["lastRunId"].as_str().unwrap().to_string();
    let shown = env.run("kxen-agent", &["run", "show", &session, &run_id]);
    let op = &shown.jsonl()[0]["operations"][0];
    assert_eq!(op["phase"], "outcomeUnknown", "{op}");
    assert!(
        op["unknownReason"]
            .as_str()
            .is_some_and(|r| r.contains("leftover")),
        "{op}"
    );
    // The human view tells the operator why and what to do.
    let text = env.run(
        "kxen-agent",
        &["--format", "text", "run", "show", &session, &run_id],
    );
    text.expect(0);
    assert!(
        text.stdout.contains("    unknown: the runtime stopped"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout
            .contains(&format!("kxen-agent run resolve {session} {run_id} OP")),
        "{}",
        text.stdout
    );
}

#[test]
fn resume_stops_what_a_killed_runtime_s_model_command_left_running() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    // The first model call starts a background job (it would write `late` once `release`
    // exists) and hangs; the runtime is killed during it. Later calls answer at once.
    let dir = env.path().join("model");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("model.sh"),
        "cat > /dev/null\n\
         if [ ! -e started ]; then\n\
         (while [ ! -e release ]; do sleep 0.05; done; touch late) </dev/null >/dev/null 2>&1 &\n\
         touch started\n\
         exec sleep 30\n\
         fi\n\
         echo '{\"text\":\"done\"}'\n",
    )
    .unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[providers.cmd]\nkind = \"command\"\nargv = [\"sh\", \"model.sh\"]\n\n[roles]\nexecution = \"cmd\"\n",
    )
    .unwrap();
    let mut child = env
        .cmd("kxen-agent")
        .args(["run", "--workspace", repo.to_str().unwrap(), "--task", "Go"])
        .args(["--agent", agent.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while !dir.join("started").exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let list = env.run("kxen-agent", &["session", "list"]);
    let session = list.jsonl()[0]["id"].as_str().unwrap().to_string();

    let resumed = env.run(
        "kxen-agent",
        &["--resume", &session, "--config", config.to_str().unwrap()],
    );
    resumed.expect(0);
    assert!(
        resumed.stdout.contains("\"type\":\"warning\"") && resumed.stdout.contains("stopped "),
        "{}",
        resumed.stdout
    );
    std::fs::write(dir.join("release"), "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        assert!(
            !dir.join("late").exists(),
            "a leftover of the killed model call ran on after recovery"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
