//! Nothing of an operation runs on while an operator resolves it: a SIGKILLed runtime's `exec`
//! (or model command) may leave programs running — the shell dies with the runtime, what it
//! started does not — and the next start stops them before it records the operation as UNKNOWN;
//! a detached descendant of a command is stopped when the command ends. Only crashed attempts are
//! scanned for by attempt mark (a model command's daemon survives), and never another state
//! dir's copy of the Session.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::env::{TestEnv, git};
use crate::run_support::{
    answer, call, command_config, finished, fixer, interrupt, script_config, spawn_new, wait_for,
};

#[test]
fn resume_stops_what_a_killed_runtime_left_running_before_recording_unknown() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    // The inner shell is a child of the tool's shell: it survives the runtime's death and would
    // write `late.txt` as soon as `release` exists. It announces itself (`started`), so the kill
    // below always finds it running.
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "sh -c 'touch started; while [ ! -e release ]; do sleep 0.05; done; touch late.txt'"}),
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
    wait_for(&repo.join("started"));
    child.kill().unwrap();
    child.wait().unwrap();
    let list = env.run("kxen-agent", &["session", "list"]);
    let session = list.jsonl()[0]["id"].as_str().unwrap().to_string();

    let resumed = crate::run_support::resume(&env, &session, &config, &["--allow-shell"]);
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
    // One unknown operation: the command names it, ready to paste.
    let op_id = op["opId"].as_str().unwrap();
    assert!(
        text.stdout.contains(&format!(
            "kxen-agent run resolve {session} {run_id} {op_id} --output TEXT"
        )),
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
    let config = command_config(
        &env,
        "cat > /dev/null\n\
         if [ ! -e started ]; then\n\
         (while [ ! -e release ]; do sleep 0.05; done; touch late) </dev/null >/dev/null 2>&1 &\n\
         touch started\n\
         exec sleep 30\n\
         fi\n\
         echo '{\"text\":\"done\"}'\n",
    );
    let dir = env.path().join("model");
    let mut child = env
        .cmd("kxen-agent")
        .args(["run", "--workspace", repo.to_str().unwrap(), "--task", "Go"])
        .args(["--agent", agent.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&dir.join("started"));
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

/// A script config in `dir` (several per test: one per state dir).
fn config_in(dir: &Path, turns: &[Value]) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let lines: String = turns.iter().map(|t| format!("{t}\n")).collect();
    std::fs::write(dir.join("turns.jsonl"), lines).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[providers.script]\nkind = \"script\"\npath = \"turns.jsonl\"\n\n[roles]\nexecution = \"script\"\nplanning = \"script\"\n",
    )
    .unwrap();
    config
}

/// An imported copy of a Session keeps its ids; its own runs must never stop the original's.
#[test]
fn a_resume_in_another_state_dir_never_touches_a_live_run_of_the_same_session() {
    let env = TestEnv::new();
    let origin = env.git_repo("origin", &[("README.md", "hello\n")]);
    for clone in ["a", "b"] {
        git(
            env.path(),
            &["clone", "-q", origin.to_str().unwrap(), clone],
        );
    }
    let (ws_a, ws_b) = (env.path().join("a"), env.path().join("b"));
    let (state_a, state_b) = (env.path().join("state-a"), env.path().join("state-b"));
    let agent = fixer(&env);
    let config_a = config_in(
        &env.path().join("model-a"),
        &[
            answer("first"),
            call(
                "c1",
                "exec",
                json!({"command": "touch started; sleep 3; touch finished"}),
            ),
            answer("a done"),
        ],
    );
    let config_b = config_in(
        &env.path().join("model-b"),
        &[answer("first"), answer("b done")],
    );
    let sa = state_a.to_str().unwrap();
    let sb = state_b.to_str().unwrap();
    let first = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            sa,
            "run",
            "--workspace",
            ws_a.to_str().unwrap(),
            "--task",
            "hi",
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config_a.to_str().unwrap(),
            "--allow-shell",
        ],
    );
    first.expect(0);
    let id = finished(&first.jsonl())["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let bundle = env.path().join("b.json");
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            sa,
            "session",
            "export",
            &id,
            "--output",
            bundle.to_str().unwrap(),
        ],
    )
    .expect(0);
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            sb,
            "session",
            "import",
            bundle.to_str().unwrap(),
            "--workspace",
            ws_b.to_str().unwrap(),
        ],
    )
    .expect(0);

    // A live run of the Session in state dir A, inside its exec.
    let r1 = env
        .cmd("kxen-agent")
        .args([
            "--state-dir",
            sa,
            "--resume",
            &id,
            "--task",
            "second",
            "--config",
            config_a.to_str().unwrap(),
            "--allow-shell",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&ws_a.join("started"));
    // An unrelated resume of the imported copy in state dir B (its own lease, free).
    let r2 = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            sb,
            "--resume",
            &id,
            "--task",
            "other",
            "--config",
            config_b.to_str().unwrap(),
            "--allow-shell",
        ],
    );
    r2.expect(0);
    let out = r1.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !r2.stdout.contains("stopped"),
        "state dir B's resume stopped processes of state dir A's live run: {}\n--- A's events:\n{stdout}",
        r2.stdout
    );
    assert!(
        ws_a.join("finished").exists(),
        "A's live exec was killed: {stdout}"
    );
}

/// UNKNOWN recorded in-process (a cancel whose tool had to be killed): a process that left the
/// command's group (`setsid`) is stopped too, so it cannot act after the resolution.
#[test]
fn nothing_of_a_killed_operation_runs_on_after_it_is_resolved() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = config_in(
        &env.path().join("model"),
        &[
            call(
                "c1",
                "exec",
                json!({"command": "setsid sh -c 'while [ ! -e release ]; do sleep 0.05; done; touch late.txt' >/dev/null 2>&1 </dev/null & trap '' TERM; touch started; while true; do sleep 0.1; done"}),
            ),
            answer("done"),
        ],
    );
    let child = spawn_new(&env, &repo, "Wait", &agent, &config, &["--allow-shell"]);
    wait_for(&repo.join("started"));
    std::thread::sleep(Duration::from_millis(200));
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(7), "{stdout}");
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ir = events
        .iter()
        .find(|e| e["type"] == "runInputRequired")
        .unwrap();
    let session = ir["sessionId"].as_str().unwrap().to_string();
    let run_id = ir["runId"].as_str().unwrap().to_string();
    let op = ir["opIds"][0].as_str().unwrap().to_string();
    let resolved = env.run(
        "kxen-agent",
        &[
            "run",
            "resolve",
            &session,
            &run_id,
            &op,
            "--output",
            "nothing happened",
        ],
    );
    resolved.expect(0);
    // The operator has recorded the outcome; the operation's detached process still runs.
    std::fs::write(repo.join("release"), "").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert!(
        !repo.join("late.txt").exists(),
        "the resolved operation changed the workspace after its resolution was recorded"
    );
}

/// Only crashed attempts are cleaned up: a server a `command` model provider starts on first use
/// (a local inference daemon) survives a clean run and the next one.
#[test]
fn a_daemon_a_model_command_started_survives_later_runs() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = command_config(
        &env,
        "cat > /dev/null\n\
         if [ ! -e daemon.pid ]; then\n\
         setsid sh -c 'echo $$ > daemon.pid; exec sleep 30' >/dev/null 2>&1 </dev/null &\n\
         while [ ! -s daemon.pid ]; do sleep 0.02; done\n\
         fi\n\
         echo '{\"text\":\"ok\"}'\n",
    );
    let dir = env.path().join("model");
    let first = env.run(
        "kxen-agent",
        &[
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "hi",
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
    );
    first.expect(0);
    let session = finished(&first.jsonl())["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let pid = std::fs::read_to_string(dir.join("daemon.pid"))
        .unwrap()
        .trim()
        .to_string();
    let alive = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
    };
    assert!(alive(&pid));
    let second = env.run(
        "kxen-agent",
        &[
            "--resume",
            &session,
            "--task",
            "again",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    second.expect(0);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        alive(&pid),
        "the model server was SIGKILLed by a clean resume: {}",
        second.stdout
    );
    std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()
        .unwrap();
}

/// A cancel the command obeys still stops what it detached (`setsid`): canceled means stopped.
#[test]
fn a_canceled_command_takes_what_it_detached_with_it() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "setsid sh -c 'while [ ! -e release ]; do sleep 0.05; done; touch late.txt' >/dev/null 2>&1 </dev/null & touch started; sleep 30"}),
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
    assert_eq!(out.status.code(), Some(130));
    assert_released_changes_nothing(&repo.join("release"), &repo.join("late.txt"));
}

/// A cancel abandons a model call; what a `command` provider started stops with it.
#[test]
fn an_abandoned_model_command_stops_with_the_cancel() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = command_config(
        &env,
        "cat > /dev/null\n\
         (while [ ! -e release ]; do sleep 0.05; done; touch late) </dev/null >/dev/null 2>&1 &\n\
         touch calling\n\
         exec sleep 30\n",
    );
    let dir = env.path().join("model");
    let child = spawn_new(&env, &repo, "Go", &fixer(&env), &config, &[]);
    wait_for(&dir.join("calling"));
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert_released_changes_nothing(&dir.join("release"), &dir.join("late"));
}

/// Creates `release`, then checks for a second that `late` never appears: the process that
/// would write it is gone.
fn assert_released_changes_nothing(release: &Path, late: &Path) {
    std::fs::write(release, "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(1);
    while Instant::now() < deadline {
        assert!(!late.exists(), "a stopped process acted after the cancel");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A daemon an `exec` command detaches (`setsid`) does not outlive the call, even when the
/// command ends by itself: it is stopped before the outcome is recorded.
#[test]
fn a_daemon_started_from_exec_is_stopped_when_the_command_ends() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "setsid sh -c 'echo $$ > daemon.pid; while [ ! -e release ]; do sleep 0.05; done; touch late.txt' >/dev/null 2>&1 </dev/null & while [ ! -s daemon.pid ]; do sleep 0.02; done; echo started"}),
            ),
            answer("done"),
        ],
    );
    let run = env.run(
        "kxen-agent",
        &[
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "Start a daemon",
            "--agent",
            fixer(&env).to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--allow-shell",
        ],
    );
    run.expect(0);
    let pid = std::fs::read_to_string(repo.join("daemon.pid")).unwrap();
    assert!(
        !Path::new(&format!("/proc/{}/cmdline", pid.trim())).exists()
            || std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).is_ok_and(|s| s
                .rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))),
        "the daemon {pid} outlived its exec call"
    );
    assert_released_changes_nothing(&repo.join("release"), &repo.join("late.txt"));
}
