//! Operator hooks (issue 33 item 2): `pre_tool_use` hooks allow, deny, ask and fail closed in
//! the one call boundary; `post_tool_use` hooks annotate results; `run_start`/`run_end` hooks
//! see the run. Every hook starts through the run's fence with the filtered environment, is
//! asked once per operation across a crash and resume, and a changed hook set is drift.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::env::{Run, TestEnv};
use crate::run_support::*;

/// Writes an executable `sh` script `name` into the env's root; returns its path.
fn script(env: &TestEnv, name: &str, body: &str) -> PathBuf {
    let path = env.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// A script config replaying `turns`, with `hooks` (TOML tables) appended.
fn config(env: &TestEnv, turns: &[Value], hooks: &str) -> PathBuf {
    let path = script_config(env, turns);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push('\n');
    text.push_str(hooks);
    std::fs::write(&path, text).unwrap();
    path
}

/// `[[hooks.EVENT]]` with `command = [script]` and `extra` lines.
fn hook(event: &str, matcher: &str, script: &Path, extra: &str) -> String {
    format!(
        "[[hooks.{event}]]\nmatcher = {matcher:?}\ncommand = [{:?}]\n{extra}\n",
        script.to_str().unwrap()
    )
}

fn start(env: &TestEnv, repo: &Path, cfg: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["--allow-shell"];
    args.extend_from_slice(extra);
    run_new(env, repo, "Work", &fixer(env), cfg, &args)
}

/// `kxen-agent run` of `agent` on `task` in `repo` with `cfg` (and `--allow-shell`).
fn run_cmd(
    env: &TestEnv,
    repo: &Path,
    agent: impl AsRef<Path>,
    cfg: &Path,
    task: &str,
    allow_shell: bool,
) -> std::process::Command {
    let mut cmd = env.cmd("kxen-agent");
    cmd.args(["run", "--workspace", repo.to_str().unwrap(), "--task", task])
        .args(["--agent", agent.as_ref().to_str().unwrap()])
        .args(["--config", cfg.to_str().unwrap()]);
    if allow_shell {
        cmd.arg("--allow-shell");
    }
    cmd
}

fn log(env: &TestEnv) -> Vec<String> {
    std::fs::read_to_string(env.path().join("hook.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

fn finished(run: &Run) -> Vec<(bool, String)> {
    run.jsonl()
        .into_iter()
        .filter(|e| e["type"] == "toolFinished")
        .map(|e| {
            (
                e["isError"] == true,
                e["output"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn only_session(env: &TestEnv) -> (String, String) {
    let list = env.run("kxen-agent", &["session", "list"]);
    let first = list.jsonl().remove(0);
    (
        first["id"].as_str().unwrap().to_string(),
        first["lastRunId"].as_str().unwrap().to_string(),
    )
}

fn histories(env: &TestEnv) -> Vec<Vec<String>> {
    let (session, run) = only_session(env);
    let show = env.run("kxen-agent", &["run", "show", &session, &run]);
    show.expect(0);
    let mut ops: Vec<Value> = show.jsonl().remove(0)["operations"]
        .as_array()
        .unwrap()
        .clone();
    ops.sort_by_key(|op| op["callIndex"].as_u64());
    ops.iter()
        .map(|op| {
            op["history"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn a_pre_hook_denies_with_exit_2_and_the_model_reads_its_reason() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let deny = script(
        &env,
        "deny.sh",
        "cat >/dev/null; echo 'no shell today' >&2; exit 2",
    );
    let cfg = config(
        &env,
        &[
            call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
            call("c2", "read", json!({"path": "README"})),
            answer("done"),
        ],
        &hook("pre_tool_use", "exec", &deny, ""),
    );
    let out = start(&env, &repo, &cfg, &[]);
    out.expect(0);
    assert!(
        !repo.join("counter.txt").exists(),
        "the denied call never ran"
    );
    let results = finished(&out);
    assert!(
        results[0].0 && results[0].1.contains("no shell today"),
        "{results:?}"
    );
    assert!(
        results[0].1.contains("pre_tool_use hook `exec`"),
        "{results:?}"
    );
    assert_eq!(
        results[1],
        (false, "     1\tx\n".to_string()),
        "the hook matches exec only"
    );
    assert_eq!(
        histories(&env)[0],
        ["awaitingApproval", "denied", "settled"]
    );
    let (session, _) = only_session(&env);
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(0);
}

#[test]
fn a_hook_that_crashes_times_out_or_answers_nonsense_denies() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let crash = script(&env, "crash.sh", "kill -9 $$");
    let slow = script(&env, "slow.sh", "sleep 5");
    let odd = script(&env, "odd.sh", "echo '{\"decision\": \"maybe\"}'");
    let hooks = format!(
        "{}{}{}",
        hook("pre_tool_use", "exec", &crash, ""),
        hook("pre_tool_use", "read", &slow, "timeout_ms = 300"),
        hook("pre_tool_use", "glob", &odd, ""),
    );
    let cfg = config(
        &env,
        &[
            call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
            call("c2", "read", json!({"path": "README"})),
            call("c3", "glob", json!({"pattern": "*"})),
            answer("done"),
        ],
        &hooks,
    );
    let out = start(&env, &repo, &cfg, &[]);
    out.expect(0);
    let results = finished(&out);
    assert_eq!(results.len(), 3);
    assert!(
        results
            .iter()
            .all(|(err, text)| *err && text.contains("fail closed")),
        "{results:?}"
    );
    assert!(results[0].1.contains("signal 9"), "{results:?}");
    assert!(results[1].1.contains("300 ms"), "{results:?}");
    assert!(results[2].1.contains("maybe"), "{results:?}");
    assert!(!repo.join("counter.txt").exists());
}

#[test]
fn an_ask_hook_holds_the_call_once_and_a_crash_does_not_ask_it_again() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let log_path = env.path().join("hook.log");
    let ask = script(
        &env,
        "ask.sh",
        &format!(
            "cat >/dev/null; echo asked >> {:?}; echo '{{\"decision\": \"ask\", \"reason\": \"a human should look\"}}'",
            log_path
        ),
    );
    let cfg = config(
        &env,
        &[
            call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
            answer("done"),
        ],
        &hook("pre_tool_use", "*", &ask, "sandbox = \"off\""),
    );
    // Killed right after the hold is durable.
    let mut cmd = run_cmd(&env, &repo, fixer(&env), &cfg, "Work", true);
    cmd.env("KXEN_FAILPOINT", "approval.after-awaiting");
    let crashed = Run::from(cmd.output().unwrap());
    assert_ne!(crashed.code, 0, "{}", crashed.stderr);
    assert_eq!(log(&env), ["asked"]);
    let (session, run) = only_session(&env);
    let resume = [
        "--resume",
        session.as_str(),
        "--config",
        cfg.to_str().unwrap(),
        "--allow-shell",
    ];
    let held = env.run("kxen-agent", &resume);
    held.expect(7);
    assert_eq!(log(&env), ["asked"], "the hook is not asked again");
    let asked = held
        .jsonl()
        .into_iter()
        .find(|e| e["type"] == "runApprovalRequired")
        .unwrap();
    assert!(
        asked["rule"]
            .as_str()
            .unwrap()
            .contains("a human should look"),
        "{asked}"
    );
    let op = asked["opId"].as_str().unwrap();
    env.run("kxen-agent", &["run", "approve", &session, &run, op])
        .expect(0);
    env.run("kxen-agent", &resume).expect(0);
    assert_eq!(
        log(&env),
        ["asked"],
        "an approved call does not ask the hook again"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("counter.txt")).unwrap(),
        "ran\n"
    );
}

#[test]
fn post_hooks_annotate_results_and_run_hooks_see_the_run_without_secrets() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let log_path = env.path().join("hook.log");
    let note = script(
        &env,
        "note.sh",
        "input=$(cat); case \"$input\" in *'\"is_error\":false'*) echo '{\"additionalContext\": \"checked by the note hook\"}';; esac",
    );
    let record = script(
        &env,
        "record.sh",
        &format!(
            "cat >> {log:?}; echo >> {log:?}; env >> {log:?}",
            log = log_path
        ),
    );
    let hooks = format!(
        "{}{}{}",
        hook("post_tool_use", "read", &note, ""),
        hook("run_start", "*", &record, "sandbox = \"off\""),
        hook("run_end", "*", &record, "sandbox = \"off\""),
    );
    let cfg = config(
        &env,
        &[
            call("c1", "read", json!({"path": "README"})),
            answer("done"),
        ],
        &hooks,
    );
    let mut cmd = run_cmd(&env, &repo, fixer(&env), &cfg, "Work", false);
    cmd.env("OPENAI_API_KEY", "sk-canary-hooks-4242");
    let out = Run::from(cmd.output().unwrap());
    out.expect(0);
    let results = finished(&out);
    assert!(
        results[0]
            .1
            .ends_with("[post_tool_use hook] checked by the note hook"),
        "{results:?}"
    );
    let text = std::fs::read_to_string(&log_path).unwrap();
    assert!(text.contains("\"hook_event_name\":\"RunStart\""), "{text}");
    assert!(text.contains("\"hook_event_name\":\"RunEnd\""), "{text}");
    assert!(text.contains("\"status\":\"completed\""), "{text}");
    assert!(
        !text.contains("sk-canary-hooks-4242"),
        "no credential reaches a hook"
    );
    // The annotation is part of the durable outcome: run show replays it.
    let (session, run) = only_session(&env);
    let show = env.run("kxen-agent", &["run", "show", &session, &run]);
    assert!(show.stdout.contains("checked by the note hook"));
}

#[test]
fn a_hook_is_fenced_and_a_changed_hook_set_is_drift() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let writer = script(
        &env,
        "writer.sh",
        &format!(
            "cat >/dev/null; if echo hooked > {:?}/hooked.txt; then echo '{{\"decision\": \"deny\", \"reason\": \"wrote\"}}'; fi",
            repo
        ),
    );
    let cfg = config(
        &env,
        &[
            call("c1", "read", json!({"path": "README"})),
            answer("done"),
        ],
        &hook("pre_tool_use", "*", &writer, ""),
    );
    let out = start(&env, &repo, &cfg, &[]);
    out.expect(0);
    assert!(
        !repo.join("hooked.txt").exists(),
        "a readOnly hook cannot write the workspace"
    );
    assert!(
        !finished(&out)[0].0,
        "it still allowed the call: the write was refused"
    );
    // The same Session resumed with other hooks: drift.
    let (session, _) = only_session(&env);
    let other = config(&env, &[answer("again")], "");
    let drift = env.run(
        "kxen-agent",
        &[
            "--resume",
            &session,
            "--task",
            "More",
            "--config",
            other.to_str().unwrap(),
            "--allow-shell",
        ],
    );
    drift.expect(6);
    assert!(drift.stderr.contains("hooks drift"), "{}", drift.stderr);
}

#[test]
fn an_unreadable_decision_denies_and_a_hook_the_agent_could_write_never_runs() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    // A deny whose reason echoes padded input: longer than what is kept, so it cannot be read.
    let long = script(
        &env,
        "long.sh",
        "cat >/dev/null; printf '{\"decision\": \"deny\", \"reason\": \"'; head -c 100000 /dev/zero | tr '\\0' x; printf '\"}'",
    );
    // A guard inside the workspace: the agent's `write` could replace it.
    let inside = repo.join("guard.sh");
    std::fs::write(&inside, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&inside, std::fs::Permissions::from_mode(0o755)).unwrap();
    let hooks = format!(
        "{}{}",
        hook("pre_tool_use", "exec", &long, ""),
        hook("pre_tool_use", "read", &inside, ""),
    );
    let cfg = config(
        &env,
        &[
            call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
            call("c2", "read", json!({"path": "README"})),
            answer("done"),
        ],
        &hooks,
    );
    let out = start(&env, &repo, &cfg, &[]);
    out.expect(0);
    let results = finished(&out);
    assert!(
        results[0].0 && results[0].1.contains("output limit"),
        "{results:?}"
    );
    assert!(
        results[1].0 && results[1].1.contains("where the agent's tools can write"),
        "{results:?}"
    );
    assert!(!repo.join("counter.txt").exists());
}

#[test]
fn a_relative_program_or_a_regex_matcher_is_a_config_error() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    for (tables, says) in [
        (
            "[[hooks.pre_tool_use]]\nmatcher = \"exec\"\ncommand = [\".claude/hooks/guard.sh\"]\n",
            "absolute",
        ),
        (
            "[[hooks.pre_tool_use]]\nmatcher = \"write|exec\"\ncommand = [\"/bin/true\"]\n",
            "no regular expressions",
        ),
    ] {
        let cfg = config(&env, &[answer("done")], tables);
        let out = start(&env, &repo, &cfg, &[]);
        out.expect(4);
        assert!(out.stderr.contains(says), "{}", out.stderr);
    }
}

#[test]
fn a_kill_right_after_a_hooks_deny_never_turns_it_into_a_hold() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let deny = script(
        &env,
        "deny.sh",
        "cat >/dev/null; echo 'not today' >&2; exit 2",
    );
    let cfg = config(
        &env,
        &[
            call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
            answer("done"),
        ],
        &hook("pre_tool_use", "exec", &deny, ""),
    );
    for point in ["approval.after-awaiting", "approval.after-decision"] {
        let mut cmd = run_cmd(&env, &repo, fixer(&env), &cfg, point, true);
        cmd.env("KXEN_FAILPOINT", point);
        let crashed = Run::from(cmd.output().unwrap());
        let list = env.run("kxen-agent", &["session", "list"]);
        let session = list.jsonl().remove(0)["id"].as_str().unwrap().to_string();
        let resume = [
            "--resume",
            session.as_str(),
            "--config",
            cfg.to_str().unwrap(),
            "--allow-shell",
        ];
        let done = env.run("kxen-agent", &resume);
        if crashed.code == 0 {
            // The failpoint was never reached (a deny writes both records at once).
            assert_eq!(point, "approval.after-awaiting", "{}", crashed.stderr);
        } else {
            done.expect(0);
        }
        assert!(
            !repo.join("counter.txt").exists(),
            "{point}: the denied call never ran"
        );
        std::fs::remove_dir_all(env.state_dir()).unwrap();
    }
}

#[test]
fn a_kill_after_the_hooks_allowed_resumes_without_asking_them_again() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let log_path = env.path().join("hook.log");
    let allow = script(
        &env,
        "allow.sh",
        &format!(
            "cat >/dev/null; echo asked >> {}; exit 0",
            log_path.display()
        ),
    );
    let cfg = config(
        &env,
        &[
            call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
            answer("done"),
        ],
        &hook("pre_tool_use", "exec", &allow, "sandbox = \"off\""),
    );
    let mut cmd = run_cmd(&env, &repo, fixer(&env), &cfg, "work", true);
    cmd.env("KXEN_FAILPOINT", "hook.after-allowed");
    let crashed = Run::from(cmd.output().unwrap());
    assert_ne!(
        crashed.code, 0,
        "the failpoint was reached: {}",
        crashed.stdout
    );
    assert_eq!(log(&env), ["asked"]);
    assert!(!repo.join("counter.txt").exists(), "nothing started yet");
    let (session, _) = only_session(&env);
    let verify = env.run("kxen-agent", &["session", "verify", &session]);
    verify.expect(0);
    let resume = [
        "--resume",
        session.as_str(),
        "--config",
        cfg.to_str().unwrap(),
        "--allow-shell",
    ];
    env.run("kxen-agent", &resume).expect(0);
    assert_eq!(log(&env), ["asked"], "the hook was asked once");
    assert_eq!(
        std::fs::read_to_string(repo.join("counter.txt")).unwrap(),
        "ran\n",
        "the call ran once"
    );
}

#[test]
fn time_in_hooks_counts_and_a_cancel_during_a_hook_starts_nothing() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let log_path = env.path().join("hook.log");
    let slow = script(
        &env,
        "slow-allow.sh",
        &format!("cat >/dev/null; echo started >> {log_path:?}; sleep 2; exit 0"),
    );
    let cfg = config(
        &env,
        &[
            call("c1", "write", json!({"path": "late.txt", "content": "x"})),
            answer("done"),
        ],
        &hook("pre_tool_use", "write", &slow, "sandbox = \"off\""),
    );
    // The wall clock runs out while the hook decides: the call does not start.
    let agent = fixer(&env);
    let text = std::fs::read_to_string(&agent).unwrap();
    let timed = env.path().join("timed.yaml");
    std::fs::write(
        &timed,
        text.replace("maxTurns: 16\n", "maxTurns: 16\n    maxWallClockMs: 1000\n"),
    )
    .unwrap();
    let out = run_new(&env, &repo, "Write", &timed, &cfg, &[]);
    assert_eq!(out.code, 8, "{}", out.stderr);
    assert!(
        !repo.join("late.txt").exists(),
        "the call did not start after the budget ended"
    );
    // A cancel while the hook decides: nothing starts.
    std::fs::remove_dir_all(env.state_dir()).unwrap();
    std::fs::remove_file(&log_path).unwrap();
    let mut cmd = run_cmd(&env, &repo, agent, &cfg, "Write", false);
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let child = cmd.spawn().unwrap();
    let started = std::time::Instant::now();
    while !log_path.exists() && started.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(log_path.exists(), "the hook started");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = Run::from(child.wait_with_output().unwrap());
    assert_eq!(out.code, 130, "{}", out.stderr);
    assert!(
        !repo.join("late.txt").exists(),
        "a canceled run starts nothing after its hook"
    );
}
