//! SIGKILL from outside at arbitrary moments (a bounded loop of 50 kills): no tool runs twice,
//! nothing recorded is lost, every file parses, and the run still completes after resolving the
//! UNKNOWN outcomes the kills left.

use std::collections::HashMap;
use std::process::{Child, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::run_support::*;

const KILLS: usize = 50;
const CALLS: usize = 30;

fn spawn(env: &TestEnv, args: &[&str]) -> Child {
    env.cmd("kxen-agent")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn session_and_run(env: &TestEnv) -> Option<(String, String)> {
    let list = env.run("kxen-agent", &["session", "list"]);
    list.expect(0);
    let first = list.jsonl().into_iter().next()?;
    Some((
        first["id"].as_str()?.to_string(),
        first["lastRunId"].as_str()?.to_string(),
    ))
}

/// Resolves every UNKNOWN operation of the run; returns how many.
fn resolve_unknown(env: &TestEnv, session: &str, run: &str) -> usize {
    let show = env.run("kxen-agent", &["run", "show", session, run]);
    show.expect(0);
    let shown = show.jsonl().remove(0);
    let mut n = 0;
    for op in shown["operations"].as_array().unwrap() {
        if op["phase"] == "outcomeUnknown" {
            let id = op["opId"].as_str().unwrap();
            env.run(
                "kxen-agent",
                &[
                    "run",
                    "resolve",
                    session,
                    run,
                    id,
                    "--output",
                    "killed; verified by the test",
                ],
            )
            .expect(0);
            n += 1;
        }
    }
    n
}

#[test]
fn fifty_sigkills_lose_nothing_and_repeat_nothing() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = env.path().join("writer.yaml");
    std::fs::write(
        &agent,
        "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: writer}\nspec:\n  objective: o\n  \
         instructions: [i]\n  capabilities: {required: [read], optional: [exec]}\n  execution: {maxTurns: 64}\n",
    )
    .unwrap();
    let mut turns: Vec<Value> = (0..CALLS)
        .map(|i| {
            call(
                &format!("c{i}"),
                "exec",
                json!({"command": format!("echo token-{i} >> counter.txt")}),
            )
        })
        .collect();
    turns.push(answer("all tokens written"));
    let config = script_config(&env, &turns);
    let (repo_s, agent_s, config_s) = (
        repo.to_str().unwrap().to_string(),
        agent.to_str().unwrap().to_string(),
        config.to_str().unwrap().to_string(),
    );
    let run_args = [
        "run",
        "--workspace",
        &repo_s,
        "--task",
        "Write the tokens",
        "--agent",
        &agent_s,
        "--config",
        &config_s,
        "--allow-shell",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut kills = 0;
    let mut attempts = 0;
    while kills < KILLS && attempts < KILLS * 3 {
        attempts += 1;
        let mut child = match session_and_run(&env) {
            None => spawn(&env, &run_args),
            Some((session, run)) => {
                resolve_unknown(&env, &session, &run);
                spawn(
                    &env,
                    &["--resume", &session, "--config", &config_s, "--allow-shell"],
                )
            }
        };
        // xorshift: a reproducible spread of kill moments between 0 and 100 ms.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(seed % 100));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            kills += 1;
        }
        child.wait().unwrap();
        if let Some((_, _)) = session_and_run(&env) {
            let list = env.run("kxen-agent", &["session", "list"]);
            let status = list.jsonl()[0]["lastRunStatus"].clone();
            if status == "completed" || status == "failed" {
                break;
            }
        }
    }
    // Finish without kills.
    let (session, run) = session_and_run(&env).expect("a session exists after the kills");
    let mut resolved_total = 0;
    for _ in 0..(CALLS + 3) {
        resolved_total += resolve_unknown(&env, &session, &run);
        let next = env.run(
            "kxen-agent",
            &["--resume", &session, "--config", &config_s, "--allow-shell"],
        );
        match next.code {
            0 => break,
            2 if next.stderr.contains("nothing to resume") => break,
            7 => continue,
            other => panic!("resume exited {other}\n{}\n{}", next.stdout, next.stderr),
        }
    }
    let show = env.run("kxen-agent", &["run", "show", &session, &run]);
    show.expect(0);
    let shown = show.jsonl().remove(0);
    assert_eq!(shown["run"]["status"], "completed", "{shown}");
    assert_eq!(shown["run"]["settled"], true);

    // No tool ran twice: every token is in the counter file at most once, and exactly once for
    // each operation whose outcome the tool itself recorded.
    let counter = std::fs::read_to_string(repo.join("counter.txt")).unwrap_or_default();
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for line in counter.lines() {
        *seen.entry(line).or_default() += 1;
    }
    for (token, n) in &seen {
        assert_eq!(*n, 1, "{token} was executed {n} times (kills: {kills})");
    }
    let ops = shown["operations"].as_array().unwrap();
    assert_eq!(ops.len(), CALLS, "one operation per call");
    let mut resolved = 0;
    for op in ops {
        assert_eq!(op["phase"], "settled", "{op}");
        let command = op["arguments"]["command"].as_str().unwrap();
        let token = command.split_whitespace().nth(1).unwrap();
        if op["history"] == json!(["started", "outcomeKnown", "settled"]) {
            assert_eq!(
                seen.get(token),
                Some(&1),
                "{token} recorded as run but not in the file"
            );
        } else {
            assert_eq!(
                op["history"],
                json!(["started", "outcomeUnknown", "resolved", "settled"])
            );
            resolved += 1;
        }
    }
    assert!(resolved <= resolved_total + kills);

    // Nothing lost or duplicated in the conversation: every call answered exactly once.
    let show = env.run("kxen-agent", &["session", "show", &session]);
    let messages = show.jsonl()[0]["messages"].as_array().unwrap().clone();
    let assistant = messages.iter().filter(|m| m["role"] == "assistant").count();
    let tool = messages.iter().filter(|m| m["role"] == "tool").count();
    assert_eq!(assistant, CALLS + 1);
    assert_eq!(tool, CALLS);
    let mut ids: Vec<&str> = messages.iter().map(|m| m["id"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), messages.len());
    // Every JSON file parses.
    for file in files_under(&env.state_dir()) {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.to_string_lossy();
        if name.ends_with(".jsonl") {
            for line in text.lines() {
                serde_json::from_str::<Value>(line).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        } else if name.ends_with(".json") {
            serde_json::from_str::<Value>(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }
    eprintln!("sigkill loop: {kills} kills, {resolved} operations resolved");
}

/// A SIGKILLed runner takes its running tool with it: the side effect the journal calls UNKNOWN
/// does not quietly happen later, after the operator has resolved it.
#[test]
fn a_killed_runner_takes_its_running_tool_with_it() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "touch started; sleep 3; touch late"}),
            ),
            answer("done"),
        ],
    );
    let mut child = spawn(
        &env,
        &[
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "t",
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--allow-shell",
        ],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !repo.join("started").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the tool never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    std::thread::sleep(Duration::from_secs(5));
    assert!(!repo.join("late").exists(), "the tool outlived its runner");
}

/// A reader that stops reading (`| head -1`) does not stop the run half-way.
#[test]
fn a_closed_stdout_does_not_stop_the_run() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call("c1", "write", json!({"path": "a.txt", "content": "a"})),
            answer("done"),
        ],
    );
    let mut child = env
        .cmd("kxen-agent")
        .args([
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "t",
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    let list = env.run("kxen-agent", &["session", "list"]);
    assert_eq!(list.jsonl()[0]["lastRunStatus"], "completed");
}

/// A relative --state-dir is made absolute, so the tools' HOME never lands in the workspace.
#[test]
fn a_relative_state_dir_keeps_the_tool_home_out_of_the_workspace() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "echo \"$HOME\" > home.txt; mkdir -p ~/.cache"}),
            ),
            answer("done"),
        ],
    );
    env.run(
        "kxen-agent",
        &[
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "t",
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--allow-shell",
            "--state-dir",
            "rel-state",
        ],
    )
    .expect(0);
    let home = std::fs::read_to_string(repo.join("home.txt")).unwrap();
    assert!(home.trim().starts_with('/'), "HOME={home}");
    let home = std::path::Path::new(home.trim());
    assert!(
        home.starts_with(env.path().join("rel-state/tool-home")),
        "HOME={}",
        home.display()
    );
    assert!(home.join(".cache").is_dir());
    assert!(!repo.join("rel-state").exists());
}

/// Damage in the middle of a finished run's journal stops a new task too (exit 10), instead of
/// being built upon.
#[test]
fn a_damaged_earlier_journal_refuses_the_next_task() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call("c1", "write", json!({"path": "a.txt", "content": "a"})),
            answer("done"),
            answer("second task done"),
        ],
    );
    let (repo_s, agent_s, config_s) = (
        repo.to_str().unwrap(),
        agent.to_str().unwrap(),
        config.to_str().unwrap(),
    );
    env.run(
        "kxen-agent",
        &[
            "run",
            "--workspace",
            repo_s,
            "--task",
            "t",
            "--agent",
            agent_s,
            "--config",
            config_s,
        ],
    )
    .expect(0);
    let list = env.run("kxen-agent", &["session", "list"]);
    let first = list.jsonl().remove(0);
    let (session, run) = (
        first["id"].as_str().unwrap(),
        first["lastRunId"].as_str().unwrap(),
    );
    let journal = env
        .state_dir()
        .join("sessions")
        .join(session)
        .join("runs")
        .join(run)
        .join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let damaged = text.replacen('{', "{\"x", 1);
    std::fs::write(&journal, damaged).unwrap();
    let before = files_under(&env.state_dir()).len();
    let resumed = env.run(
        "kxen-agent",
        &["--resume", session, "--task", "next", "--config", config_s],
    );
    resumed.expect(10);
    assert!(
        resumed.stderr.contains("journal.jsonl:1"),
        "{}",
        resumed.stderr
    );
    assert_eq!(
        files_under(&env.state_dir()).len(),
        before,
        "a new run was started"
    );
}

/// Every durable step of a Session moved through a git remote (`pull.*`: a fast-forward of a
/// local copy; `remote.*`: claim, pull, push of `--resume --remote`), crashed: the local copy
/// stays verifiable, the next pull or take-over finishes the job, and the tool runs once.
#[test]
fn a_crash_at_every_remote_step_loses_nothing_and_repeats_nothing() {
    use crate::session_remote::machines;
    let points: Vec<&str> = kxen::fsx::failpoint::ALL
        .iter()
        .copied()
        .filter(|p| p.starts_with("pull.") || p.starts_with("remote."))
        .collect();
    assert_eq!(points.len(), 6, "{points:?}");
    for point in points {
        let m = machines();
        let config = script_config(
            &m.env,
            &[
                call("call_1", "read", json!({"path": "README.md"})),
                answer("A done."),
                call("call_2", "exec", json!({"command": "echo ran >> ran.txt"})),
                answer("B done."),
                answer("C done."),
                answer("D done."),
            ],
        );
        let id = m.first_run(0, &config, &["--allow-shell"]);
        m.run(0, &["session", "push", &id]).expect(0);
        let ws_b = m.ws[1].to_str().unwrap().to_string();
        let pull = |extra: &[(&str, &str)]| {
            let mut cmd = m.cmd(1, &["session", "pull", &id, "--workspace", &ws_b]);
            for (k, v) in extra {
                cmd.env(k, v);
            }
            crate::env::Run::from(cmd.output().unwrap())
        };
        if point.starts_with("pull.") {
            pull(&[]).expect(0);
            // A goes on and pushes; B's fast-forward is killed at the point.
            let mut more = m.cmd(
                0,
                &[
                    "--resume",
                    &id,
                    "--task",
                    "More",
                    "--allow-shell",
                    "--config",
                ],
            );
            more.arg(&config);
            crate::env::Run::from(more.output().unwrap()).expect(0);
            m.run(0, &["session", "push", &id]).expect(0);
            let crashed = pull(&[("KXEN_FAILPOINT", point)]);
            assert_ne!(crashed.code, 0, "{point}: not reached");
            m.run(1, &["session", "verify", &id]).expect(0);
            let again = pull(&[]);
            again.expect(0);
            // Every `pull.*` point lies after the swap record (the commit point): the command
            // after the kill (`session verify`) completed the fast-forward.
            let action = again.jsonl()[0]["action"].as_str().unwrap().to_string();
            assert_eq!(action, "upToDate", "{point}");
            m.run(1, &["session", "verify", &id]).expect(0);
            let leftovers: Vec<_> = std::fs::read_dir(m.state[1].join("sessions"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.'))
                .collect();
            assert!(leftovers.is_empty(), "{point}: {leftovers:?}");
            continue;
        }
        // remote.*: B's --resume --remote is killed at the point.
        let resume = |extra: &[&str], env: &[(&str, &str)]| {
            let mut cmd = m.remote_resume(1, &id, &config, &["--allow-shell", "--lease-ttl", "2"]);
            cmd.args(extra);
            for (k, v) in env {
                cmd.env(k, v);
            }
            crate::env::Run::from(cmd.output().unwrap())
        };
        let crashed = resume(&[], &[("KXEN_FAILPOINT", point)]);
        assert_ne!(crashed.code, 0, "{point}: not reached");
        // The dead holder's lease is still there: refused, until it expires (a clock 10 s
        // ahead stands for the wait), then taken over.
        let refused = resume(&[], &[]);
        refused.expect(5);
        let taken = resume(
            &["--take-expired-lease"],
            &[("KXEN_TEST_CLOCK_SKEW_MS", "10000")],
        );
        taken.expect(0);
        // A warning event of the run (stdout, JSONL when piped).
        assert!(
            taken.stdout.contains("took over"),
            "{point}: {}",
            taken.stdout
        );
        assert_eq!(
            m.remote_refs(),
            vec![format!("refs/kxen/sessions/{id}")],
            "{point}: lease released"
        );
        let ran = std::fs::read_to_string(m.ws[1].join("ran.txt")).unwrap();
        assert_eq!(ran, "ran\n", "{point}: the call ran once");
        // A gets every record.
        let ws_a = m.ws[0].to_str().unwrap();
        m.run(0, &["session", "pull", &id, "--workspace", ws_a])
            .expect(0);
        m.run(0, &["session", "verify", &id]).expect(0);
    }
}
