//! Recovery: crashes at every named durable step, UNKNOWN outcomes and `run resolve`, resume,
//! policy drift, the run lease, and budgets that survive a resume.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::env::{Run, TestEnv};
use crate::run_support::*;

/// The scripted run every crash test replays: an `exec` that counts its executions, a read, an
/// answer.
fn counting_script(env: &TestEnv) -> PathBuf {
    script_config(
        env,
        &[
            call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
            call("c2", "read", json!({"path": "counter.txt"})),
            answer("done"),
        ],
    )
}

fn start(env: &TestEnv, repo: &Path, agent: &Path, config: &Path, failpoint: Option<&str>) -> Run {
    start_cut(env, repo, agent, config, failpoint, false)
}

/// [`start`]; with `power_cut`, the failpoint also drops every append that was never synced
/// (`KXEN_FAILPOINT_POWERCUT`), as a power cut could.
fn start_cut(
    env: &TestEnv,
    repo: &Path,
    agent: &Path,
    config: &Path,
    failpoint: Option<&str>,
    power_cut: bool,
) -> Run {
    let mut cmd = env.cmd("kxen-agent");
    if power_cut {
        cmd.env("KXEN_FAILPOINT_POWERCUT", "1");
    }
    cmd.args([
        "run",
        "--workspace",
        repo.to_str().unwrap(),
        "--task",
        "Count",
        "--agent",
        agent.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--allow-shell",
    ]);
    if let Some(point) = failpoint {
        cmd.env("KXEN_FAILPOINT", point);
    }
    let out = cmd.output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn only_session(env: &TestEnv) -> Option<String> {
    let list = env.run("kxen-agent", &["session", "list"]);
    list.expect(0);
    let sessions = list.jsonl();
    assert!(sessions.len() <= 1);
    sessions
        .first()
        .map(|s| s["id"].as_str().unwrap().to_string())
}

fn run_show(env: &TestEnv, session: &str, run: &str) -> Value {
    let show = env.run("kxen-agent", &["run", "show", session, run]);
    show.expect(0);
    show.jsonl().remove(0)
}

/// Every JSON and JSONL file in the state dir parses (a torn last line is allowed only in a
/// file the next writer repairs; after a completed resume there is none).
fn assert_state_parses(env: &TestEnv) {
    for file in files_under(&env.state_dir()) {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&file).unwrap();
        if name.ends_with(".jsonl") {
            for (i, line) in text.lines().enumerate() {
                serde_json::from_str::<Value>(line)
                    .unwrap_or_else(|e| panic!("{}:{}: {e}", file.display(), i + 1));
            }
            assert!(
                text.is_empty() || text.ends_with('\n'),
                "{}",
                file.display()
            );
        } else if name.ends_with(".json") {
            serde_json::from_str::<Value>(&text)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
    }
}

#[test]
fn a_crash_at_every_failpoint_loses_nothing_and_repeats_nothing() {
    crash_at_every_failpoint(false);
}

/// As above, but each crash is a power cut: what was appended without an fsync is gone. The
/// journal re-derives it (the durability invariant in `src/journal/mod.rs`), and the state each
/// cut leaves verifies before anything repairs it.
#[test]
fn a_power_cut_at_every_failpoint_loses_nothing_and_repeats_nothing() {
    crash_at_every_failpoint(true);
}

fn crash_at_every_failpoint(power_cut: bool) {
    for point in kxen::fsx::failpoint::ALL {
        if point.starts_with("import.") {
            continue; // not on a run's path; tests/it/session_bundle.rs crashes imports there
        }
        if point.starts_with("dwp.") {
            continue; // plan journal appends; tests/it/dwp_resources.rs crashes them
        }
        if point.starts_with("approval.") {
            continue; // only with an `ask` rule; tests/it/approval.rs crashes there
        }
        if point.starts_with("hook.") {
            continue; // only with a `pre_tool_use` hook; tests/it/hooks.rs crashes there
        }
        if point.starts_with("export.") {
            continue; // not on a run's path; tests/it/state_damage.rs crashes an export there
        }
        if point.starts_with("plan.") {
            continue; // plan runs' host meter; tests/it/dwp_host.rs crashes at every pass there
        }
        if point.starts_with("task.") {
            continue; // `task` children; tests/it/task.rs crashes at every pass of every point
        }
        if point.starts_with("pull.") || point.starts_with("remote.") {
            continue; // only with a git remote; tests/it/run_sigkill.rs crashes there
        }
        if point.starts_with("compaction.") {
            continue; // only with a context_window; tests/it/run_compaction.rs crashes there
        }
        if point.starts_with("mcp.") {
            continue; // only with a Streamable HTTP MCP call; tests/it/mcp_http.rs crashes there
        }
        if point.starts_with("verify.") {
            continue; // only with verifyBeforeCompletion; tests/it/run_verify.rs crashes there
        }
        let env = TestEnv::new();
        let repo = env.git_repo("repo", &[("README", "x\n")]);
        let agent = fixer(&env);
        let config = counting_script(&env);
        let crashed = start_cut(&env, &repo, &agent, &config, Some(point), power_cut);
        assert_ne!(
            crashed.code, 0,
            "{point}: the failpoint was not reached\n{}",
            crashed.stdout
        );
        if let Some(session) = only_session(&env) {
            // Every state a crash leaves verifies as it is.
            let verify = env.run("kxen-agent", &["session", "verify", &session]);
            assert_eq!(verify.code, 0, "{point}: {}", verify.stderr);
        }
        let Some(session) = only_session(&env) else {
            // Before the Session's rename nothing is visible, and nothing else was written.
            assert!(
                matches!(
                    *point,
                    "session.create.after-lock" | "session.create.before-rename"
                ),
                "{point}: no session"
            );
            assert!(!repo.join("counter.txt").exists());
            // What the crash left is a staging directory with the lock written, which no reader
            // takes for a Session; the next run starts afresh and completes.
            let staged: Vec<_> = std::fs::read_dir(env.state_dir().join("sessions"))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert_eq!(staged.len(), 1, "{point}: {staged:?}");
            assert!(
                staged[0].starts_with(".staging-ses_"),
                "{point}: {staged:?}"
            );
            let stage = env.state_dir().join("sessions").join(&staged[0]);
            let meta: Value =
                serde_json::from_str(&std::fs::read_to_string(stage.join("session.json")).unwrap())
                    .unwrap();
            assert!(
                meta["lock"]["definitionHash"].is_string(),
                "{point}: {meta}"
            );
            let again = start(&env, &repo, &agent, &config, None);
            assert_eq!(again.code, 0, "{point}: {}\n{}", again.stdout, again.stderr);
            only_session(&env).expect("the new run's Session");
            assert_eq!(
                std::fs::read_to_string(repo.join("counter.txt")).unwrap(),
                "ran\n",
                "{point}"
            );
            continue;
        };
        let mut resolved = Vec::new();
        let mut finished = None;
        for _ in 0..4 {
            let next = resume(&env, &session, &config, &["--allow-shell"]);
            match next.code {
                0 => {
                    finished = Some(finish_event(&next));
                    break;
                }
                // A run that had already settled: there is nothing left to do.
                2 if next.stderr.contains("nothing to resume") => break,
                7 => {
                    let event = next
                        .jsonl()
                        .into_iter()
                        .find(|e| e["type"] == "runInputRequired")
                        .unwrap_or_else(|| panic!("{point}: {}", next.stdout));
                    let run = event["runId"].as_str().unwrap().to_string();
                    for op in event["opIds"].as_array().unwrap() {
                        let op = op.as_str().unwrap();
                        env.run(
                            "kxen-agent",
                            &[
                                "run",
                                "resolve",
                                &session,
                                &run,
                                op,
                                "--output",
                                "verified by hand",
                            ],
                        )
                        .expect(0);
                        resolved.push(op.to_string());
                    }
                }
                other => panic!(
                    "{point}: resume exited {other}\n{}\n{}",
                    next.stdout, next.stderr
                ),
            }
        }
        let list = env.run("kxen-agent", &["session", "list"]);
        let run_id = list.jsonl()[0]["lastRunId"].as_str().unwrap().to_string();
        let shown = run_show(&env, &session, &run_id);
        assert_eq!(shown["run"]["status"], "completed", "{point}: {shown}");
        assert_eq!(shown["run"]["settled"], true, "{point}");
        let ops = shown["operations"].as_array().unwrap();
        assert_eq!(ops.len(), 2, "{point}: {ops:?}");
        for op in ops {
            assert_eq!(op["phase"], "settled", "{point}: {op}");
            if resolved.contains(&op["opId"].as_str().unwrap().to_string()) {
                assert_eq!(
                    op["history"],
                    json!(["started", "outcomeUnknown", "resolved", "settled"]),
                    "{point}"
                );
            }
        }
        // No tool ran twice: the exec ran once, or not at all when the crash came before it
        // (then its UNKNOWN outcome was resolved, never re-executed).
        let count = std::fs::read_to_string(repo.join("counter.txt"))
            .map(|t| t.lines().count())
            .unwrap_or(0);
        match *point {
            "tool.after-started" => assert_eq!(count, 0, "{point}"),
            _ => assert_eq!(count, 1, "{point}"),
        }
        if matches!(*point, "tool.after-started" | "tool.after-side-effect") {
            assert_eq!(
                resolved.len(),
                1,
                "{point}: Started without outcome must become UNKNOWN"
            );
        } else {
            assert!(resolved.is_empty(), "{point}: {resolved:?}");
        }
        // Nothing recorded was lost or duplicated: the whole conversation, once.
        let show = env.run("kxen-agent", &["session", "show", &session]);
        let messages = show.jsonl()[0]["messages"].as_array().unwrap().clone();
        let roles: Vec<&str> = messages
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles,
            [
                "user",
                "assistant",
                "tool",
                "assistant",
                "tool",
                "assistant"
            ],
            "{point}"
        );
        assert_eq!(messages[5]["content"], "done", "{point}");
        if !resolved.is_empty() {
            assert_eq!(messages[2]["content"], "verified by hand", "{point}");
        }
        if let Some(fin) = finished {
            assert_eq!(fin["status"], "completed");
        }
        assert_state_parses(&env);
    }
}

fn finish_event(run: &Run) -> Value {
    finished(&run.jsonl()).clone()
}

#[test]
fn unknown_outcome_resolve_and_resume() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = counting_script(&env);
    start(&env, &repo, &agent, &config, Some("tool.after-side-effect"));
    let session = only_session(&env).unwrap();

    let first = resume(&env, &session, &config, &["--allow-shell"]);
    first.expect(7);
    assert!(first.stderr.contains("run show"), "{}", first.stderr);
    let events = first.jsonl();
    let event = events
        .iter()
        .find(|e| e["type"] == "runInputRequired")
        .unwrap();
    assert!(
        !events.iter().any(|e| e["type"] == "modelText"),
        "the model was called"
    );
    let run = event["runId"].as_str().unwrap();
    let op = event["opIds"][0].as_str().unwrap();
    let shown = run_show(&env, &session, run);
    assert_eq!(shown["run"]["status"], "inputRequired");
    assert_eq!(shown["run"]["unknownOps"], json!([op]));
    assert_eq!(shown["operations"][0]["phase"], "outcomeUnknown");
    // Still unknown on a second resume: no model call, exit 7 again.
    resume(&env, &session, &config, &["--allow-shell"]).expect(7);

    // Bad resolutions: wrong id (3), a bad id (4); nothing changes.
    let wrong = env.run(
        "kxen-agent",
        &[
            "run",
            "resolve",
            &session,
            run,
            "op_0000000000aaaaaaaaaaaaaaaa",
            "--output",
            "x",
        ],
    );
    wrong.expect(3);
    env.run(
        "kxen-agent",
        &["run", "resolve", &session, run, "../op", "--output", "x"],
    )
    .expect(4);

    env.run(
        "kxen-agent",
        &[
            "run",
            "resolve",
            &session,
            run,
            op,
            "--output",
            "it ran: counter has one line",
            "--is-error",
        ],
    )
    .expect(0);
    // Resolving twice is a conflict.
    let twice = env.run(
        "kxen-agent",
        &["run", "resolve", &session, run, op, "--output", "again"],
    );
    twice.expect(5);
    assert!(
        twice.stderr.contains("already resolved"),
        "{}",
        twice.stderr
    );

    let done = resume(&env, &session, &config, &["--allow-shell"]);
    done.expect(0);
    let shown = run_show(&env, &session, run);
    let ops = shown["operations"].as_array().unwrap();
    assert_eq!(
        ops[0]["output"],
        json!({"text": "it ran: counter has one line", "isError": true})
    );
    // A settled (known) operation cannot be resolved.
    let known = ops[1]["opId"].as_str().unwrap();
    env.run(
        "kxen-agent",
        &["run", "resolve", &session, run, known, "--output", "x"],
    )
    .expect(5);
    // The model saw exactly the resolution as the tool's result.
    let show = env.run("kxen-agent", &["session", "show", &session]);
    let messages = show.jsonl()[0]["messages"].as_array().unwrap().clone();
    assert_eq!(messages[2]["role"], "tool");
    assert_eq!(messages[2]["content"], "it ran: counter has one line");
    assert_eq!(messages[2]["isError"], true);
    assert_eq!(
        std::fs::read_to_string(repo.join("counter.txt")).unwrap(),
        "ran\n"
    );
}

#[test]
fn next_task_drift_and_nothing_to_resume() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call("c1", "exec", json!({"command": "echo one >> log.txt"})),
            answer("first done"),
            call("c2", "read", json!({"path": "log.txt"})),
            answer("second done"),
        ],
    );
    start(&env, &repo, &agent, &config, None).expect(0);
    let session = only_session(&env).unwrap();

    // Nothing pending and no task.
    let nothing = resume(&env, &session, &config, &["--allow-shell"]);
    nothing.expect(2);
    assert!(
        nothing.stderr.contains("nothing to resume"),
        "{}",
        nothing.stderr
    );
    // --agent with --resume is a usage error.
    resume(
        &env,
        &session,
        &config,
        &[
            "--allow-shell",
            "--agent",
            agent.to_str().unwrap(),
            "--task",
            "x",
        ],
    )
    .expect(2);
    // Policy drift: created with --allow-shell, resumed without.
    let drift = resume(&env, &session, &config, &["--task", "again"]);
    drift.expect(6);
    assert!(drift.stderr.contains("policy drift"), "{}", drift.stderr);
    assert!(drift.stderr.contains("allowShell"), "{}", drift.stderr);
    // Unknown session: exit 3.
    resume(
        &env,
        "ses_0000000000aaaaaaaaaaaaaaaa",
        &config,
        &["--task", "x"],
    )
    .expect(3);

    // The next task is a new consecutive run; the script continues at the right line.
    let second = resume(
        &env,
        &session,
        &config,
        &["--allow-shell", "--task", "Read the log"],
    );
    second.expect(0);
    let events = second.jsonl();
    assert_eq!(events[0]["type"], "sessionResumed");
    assert_eq!(events[0]["newRun"], true);
    assert_eq!(finished(&events)["finalText"], "second done");
    assert_eq!(finished(&events)["turns"], 2);
    let show = env.run("kxen-agent", &["session", "show", &session]);
    let shown = &show.jsonl()[0];
    assert_eq!(shown["runs"].as_array().unwrap().len(), 2);
    let messages = shown["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 8);
    assert_eq!(messages[4]["content"], "Read the log");
    assert_eq!(messages[6]["content"], "     1\tone\n");
}

#[test]
fn a_second_process_gets_exit_5_naming_the_holder() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "touch started; while [ ! -e release ]; do sleep 0.05; done"}),
            ),
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
            "Wait",
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--allow-shell",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&repo.join("started"));
    let session = only_session(&env).unwrap();
    // Read-only views work while the run holds the lease.
    env.run("kxen-agent", &["session", "show", &session])
        .expect(0);
    let second = resume(&env, &session, &config, &["--allow-shell"]);
    std::fs::write(repo.join("release"), "").unwrap();
    second.expect(5);
    assert!(
        second.stderr.contains(&format!("pid {}", child.id())),
        "{}",
        second.stderr
    );
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn budgets_count_every_attempt() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a", "a\n")]);
    let agent = env.path().join("short.yaml");
    std::fs::write(
        &agent,
        "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: short}\nspec:\n  objective: o\n  \
         instructions: [i]\n  capabilities: {required: [read], optional: [exec]}\n  execution: {maxTurns: 3}\n",
    )
    .unwrap();
    // Distinct arguments: identical calls would end the run `loopDetected` first.
    let turns: Vec<Value> = (0..10)
        .map(|i| {
            call(
                &format!("c{i}"),
                "read",
                json!({"path": "a", "limit": i + 1}),
            )
        })
        .collect();
    let config = script_config(&env, &turns);
    // The first attempt dies right after its first model turn is recorded.
    start(
        &env,
        &repo,
        &agent,
        &config,
        Some("tool.after-assistant-message"),
    );
    let session = only_session(&env).unwrap();
    let run = resume(&env, &session, &config, &["--allow-shell"]);
    run.expect(8);
    let events = run.jsonl();
    let fin = finished(&events);
    assert_eq!(fin["reason"], "budgetExhausted");
    assert_eq!(fin["turns"], 3, "the crashed attempt's turn counts too");
    let shown = run_show(&env, &session, fin["runId"].as_str().unwrap());
    let attempts = shown["run"]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["crashed"], true);
    assert_eq!(shown["operations"].as_array().unwrap().len(), 3);
}

#[test]
fn sigint_during_a_long_exec_stops_the_run_cleanly() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call("c1", "exec", json!({"command": "touch started; sleep 30"})),
            answer("never reached"),
        ],
    );
    let child = spawn_new(&env, &repo, "Wait", &agent, &config, &["--allow-shell"]);
    wait_for(&repo.join("started"));
    let signaled = std::time::Instant::now();
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    // The 30 s command was not waited for: the cleanup window is 2 s.
    assert!(signaled.elapsed() < std::time::Duration::from_secs(20));
    let code = out.status.code();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(matches!(code, Some(130) | Some(7)), "{code:?}\n{stdout}");
    assert!(!stdout.contains("never reached"));
    let session = only_session(&env).unwrap();
    let list = env.run("kxen-agent", &["session", "list"]);
    let run_id = list.jsonl()[0]["lastRunId"].as_str().unwrap().to_string();
    let shown = run_show(&env, &session, &run_id);
    let op = &shown["operations"][0];
    if code == Some(130) {
        assert_eq!(shown["run"]["status"], "canceled");
        assert_eq!(op["phase"], "settled");
        assert!(
            op["output"]["text"].as_str().unwrap().contains("canceled"),
            "{op}"
        );
    } else {
        assert_eq!(shown["run"]["status"], "inputRequired");
        assert_eq!(op["phase"], "outcomeUnknown");
    }
    assert_state_parses(&env);
}

/// SIGINT while a model call is in flight: the call is abandoned (it produced nothing, so
/// nothing is journaled or appended for it), the run ends `canceled` with exit 130, and the
/// journal still holds exactly the earlier, settled tool call.
#[test]
fn sigint_during_a_model_call_abandons_it() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    // The model is a command: its first call asks for one read; its second hangs (after saying
    // so with a marker file) until it is abandoned.
    let config = command_config(
        &env,
        "cat > /dev/null\n\
         n=$(($(cat calls 2>/dev/null || echo 0) + 1)); echo $n > calls\n\
         if [ $n -eq 1 ]; then\n\
         echo '{\"text\":\"\",\"toolCalls\":[{\"id\":\"c1\",\"name\":\"read\",\"arguments\":{\"path\":\"README\"}}]}'\n\
         exit 0\n\
         fi\n\
         touch calling\n\
         exec sleep 30\n",
    );
    let dir = env.path().join("model");
    let child = spawn_new(&env, &repo, "Read", &agent, &config, &[]);
    wait_for(&dir.join("calling"));
    let signaled = std::time::Instant::now();
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    // The 30 s call was not waited for.
    assert!(signaled.elapsed() < std::time::Duration::from_secs(20));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{stdout}");
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(finished(&events)["status"], "canceled");
    assert_eq!(std::fs::read_to_string(dir.join("calls")).unwrap(), "2\n");

    let session = only_session(&env).unwrap();
    let list = env.run("kxen-agent", &["session", "list"]);
    let run_id = list.jsonl()[0]["lastRunId"].as_str().unwrap().to_string();
    let shown = run_show(&env, &session, &run_id);
    assert_eq!(shown["run"]["status"], "canceled");
    assert_eq!(shown["run"]["settled"], true);
    // Only the first call's read is in the journal, settled; the abandoned call left nothing.
    let ops = shown["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 1, "{shown}");
    assert_eq!(ops[0]["tool"], "read");
    assert_eq!(ops[0]["phase"], "settled");
    let run_dir = env
        .state_dir()
        .join("sessions")
        .join(&session)
        .join("runs")
        .join(&run_id);
    let journal = std::fs::read_to_string(run_dir.join("journal.jsonl")).unwrap();
    assert_eq!(journal.lines().count(), 3, "{journal}");
    // The conversation: the task, the model's read call and its result; no message of the
    // abandoned call.
    let messages = std::fs::read_to_string(
        env.state_dir()
            .join("sessions")
            .join(&session)
            .join("messages.jsonl"),
    )
    .unwrap();
    let roles: Vec<String> = messages
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["role"].to_string())
        .collect();
    assert_eq!(
        roles,
        ["\"user\"", "\"assistant\"", "\"tool\""],
        "{messages}"
    );
    // The files verify end to end (chains intact, journal consistent).
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(0);
    assert_state_parses(&env);
}

#[test]
fn damaged_state_is_corrupt_never_guessed() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = counting_script(&env);
    start(&env, &repo, &agent, &config, Some("tool.after-side-effect"));
    let session = only_session(&env).unwrap();
    let dir = env.state_dir().join("sessions").join(&session);

    // A message file damaged in the middle (not a torn tail): exit 10 naming file and line.
    let messages = dir.join("messages.jsonl");
    let original = std::fs::read_to_string(&messages).unwrap();
    let damaged = original.replacen("\"role\":\"user\"", "\"role\":", 1);
    std::fs::write(&messages, &damaged).unwrap();
    let run = resume(&env, &session, &config, &["--allow-shell"]);
    run.expect(10);
    assert!(run.stderr.contains("messages.jsonl:1"), "{}", run.stderr);
    std::fs::write(&messages, &original).unwrap();

    // A torn last line (a crash mid-append) is not damage: it is ignored and repaired.
    std::fs::write(&messages, format!("{original}{{\"id\":\"msg_")).unwrap();
    resume(&env, &session, &config, &["--allow-shell"]).expect(7);
    assert_eq!(std::fs::read_to_string(&messages).unwrap(), original);

    // A hand-edited lock (objective changed): exit 10, before anything else.
    let session_json = dir.join("session.json");
    let text = std::fs::read_to_string(&session_json).unwrap();
    let edited = text.replacen(
        "Complete the supplied repository task",
        "Do whatever you like",
        1,
    );
    assert_ne!(edited, text);
    std::fs::write(&session_json, edited).unwrap();
    let run = resume(&env, &session, &config, &["--allow-shell"]);
    run.expect(10);
    assert!(run.stderr.contains("lock"), "{}", run.stderr);
}

/// Runs are ordered by the `seq` recorded when each is created, never by id or time: a run
/// created by a runner whose clock is an hour behind (its id sorts before the first run's) and
/// killed mid-tool is still the Session's latest run, so `--resume` continues it (its started
/// operation becomes UNKNOWN) instead of saying there is nothing to resume.
#[test]
fn a_run_created_with_a_clock_an_hour_behind_is_still_the_latest() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            answer("first done"),
            call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
            answer("second done"),
        ],
    );
    start(&env, &repo, &agent, &config, None).expect(0);
    let session = only_session(&env).unwrap();
    let killed = env
        .cmd("kxen-agent")
        .args(["--resume", &session, "--task", "Count"])
        .args(["--config", config.to_str().unwrap(), "--allow-shell"])
        .env("KXEN_TEST_CLOCK_SKEW_MS", "-3600000")
        .env("KXEN_FAILPOINT", "tool.after-started")
        .output()
        .unwrap();
    assert_ne!(killed.status.code(), Some(0));
    let show = env.run("kxen-agent", &["session", "show", &session]);
    let runs = show.jsonl()[0]["runs"].as_array().unwrap().clone();
    assert_eq!(runs.len(), 2);
    let (first, second) = (
        runs[0]["id"].as_str().unwrap(),
        runs[1]["id"].as_str().unwrap(),
    );
    assert!(
        second < first,
        "the skewed run's id sorts first: {first} {second}"
    );
    assert_eq!(
        (runs[0]["seq"].clone(), runs[1]["seq"].clone()),
        (json!(1), json!(2))
    );
    assert_eq!(runs[1]["status"], "running");
    let list = env.run("kxen-agent", &["session", "list"]);
    assert_eq!(list.jsonl()[0]["lastRunId"], second);
    // A new task is refused while that run is unfinished; the resume continues it.
    resume(&env, &session, &config, &["--allow-shell", "--task", "x"]).expect(2);
    let next = resume(&env, &session, &config, &["--allow-shell"]);
    next.expect(7);
    let event = next
        .jsonl()
        .into_iter()
        .find(|e| e["type"] == "runInputRequired")
        .unwrap();
    assert_eq!(event["runId"], second);
    assert!(!repo.join("counter.txt").exists(), "the exec never ran");
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(0);
}

/// A model turn calling `calls` (id, tool, arguments) in order.
fn turn(calls: &[(&str, &str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, tool, arguments)| json!({"id": id, "name": tool, "arguments": arguments}))
        .collect();
    json!({"text": "", "toolCalls": calls, "usage": {"inputTokens": 10, "outputTokens": 2}})
}

/// The `runInputRequired` event of a run's stdout: its run id and operation ids.
fn input_required(run: &Run) -> (String, Vec<String>) {
    let event = run
        .jsonl()
        .into_iter()
        .find(|e| e["type"] == "runInputRequired")
        .unwrap_or_else(|| panic!("no runInputRequired\n{}\n{}", run.stdout, run.stderr));
    let ops = event["opIds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o.as_str().unwrap().to_string())
        .collect();
    (event["runId"].as_str().unwrap().to_string(), ops)
}

/// A turn `[step1, step2]` killed during step1: step2 may depend on step1, so `--resume` must not
/// run it while step1's outcome is UNKNOWN; once step1 is resolved, step2 runs.
#[test]
fn later_calls_of_a_turn_wait_for_an_earlier_unknown_call() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            turn(&[
                ("s1", "exec", json!({"command": "echo one >> steps.txt"})),
                ("s2", "exec", json!({"command": "echo two >> steps.txt"})),
            ]),
            answer("done"),
        ],
    );
    start(&env, &repo, &agent, &config, Some("tool.after-started"));
    let session = only_session(&env).unwrap();
    let stopped = resume(&env, &session, &config, &["--allow-shell"]);
    stopped.expect(7);
    let (run, ops) = input_required(&stopped);
    assert_eq!(ops.len(), 1, "{ops:?}");
    assert!(
        !repo.join("steps.txt").exists(),
        "step2 ran before step1 was resolved: {:?}",
        std::fs::read_to_string(repo.join("steps.txt"))
    );
    let shown = run_show(&env, &session, &run);
    assert_eq!(shown["operations"].as_array().unwrap().len(), 1, "{shown}");
    // Still waiting on a second resume.
    resume(&env, &session, &config, &["--allow-shell"]).expect(7);
    assert!(!repo.join("steps.txt").exists());
    env.run(
        "kxen-agent",
        &[
            "run", "resolve", &session, &run, &ops[0], "--output", "not run",
        ],
    )
    .expect(0);
    // Resolved, not yet resumed: `unknownOps` still names the operation, which is consistent.
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(0);
    resume(&env, &session, &config, &["--allow-shell"]).expect(0);
    assert_eq!(
        std::fs::read_to_string(repo.join("steps.txt")).unwrap(),
        "two\n"
    );
    let shown = run_show(&env, &session, &run);
    let ops = shown["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 2);
    assert_eq!(ops[1]["toolCallId"], "s2");
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(0);
}

/// SIGINT while a resume re-runs a crashed turn's remaining calls is honoured like in any other
/// phase: no call starts after the signal; the calls not run are answered as canceled and the
/// run ends `canceled` (exit 130).
#[test]
fn sigint_during_recovery_stops_the_remaining_calls() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    const CALLS: usize = 400;
    let calls: Vec<(String, Value)> = (0..CALLS)
        .map(|i| {
            (
                format!("w{i}"),
                json!({"path": format!("out/{i}.txt"), "content": "x"}),
            )
        })
        .collect();
    let refs: Vec<(&str, &str, Value)> = calls
        .iter()
        .map(|(id, args)| (id.as_str(), "write", args.clone()))
        .collect();
    let config = script_config(&env, &[turn(&refs), answer("done")]);
    // The first attempt dies right after the turn is recorded: every call is left to recovery.
    start(
        &env,
        &repo,
        &agent,
        &config,
        Some("tool.after-assistant-message"),
    );
    let session = only_session(&env).unwrap();
    let child = env
        .cmd("kxen-agent")
        .args(["--resume", &session, "--config", config.to_str().unwrap()])
        .arg("--allow-shell")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&repo.join("out/0.txt"));
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(130), "{stdout}");
    let written = std::fs::read_dir(repo.join("out")).unwrap().count();
    assert!(
        written < CALLS / 2,
        "{written} of {CALLS} writes happened although SIGINT came after the first"
    );
    let list = env.run("kxen-agent", &["session", "list"]);
    let run_id = list.jsonl()[0]["lastRunId"].as_str().unwrap().to_string();
    let shown = run_show(&env, &session, &run_id);
    assert_eq!(shown["run"]["status"], "canceled");
    assert_eq!(shown["operations"].as_array().unwrap().len(), written);
    let show = env.run("kxen-agent", &["session", "show", &session]);
    let messages = show.jsonl()[0]["messages"].as_array().unwrap().clone();
    let canceled = messages
        .iter()
        .filter(|m| m["content"] == "not run: the run was canceled")
        .count();
    assert_eq!(written + canceled, CALLS, "every call is answered once");
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(0);
}

/// Resume (and `run resolve`) check the run's record, journal and messages against each other
/// as `session verify` does before they write anything: damaged state never re-runs an UNKNOWN
/// operation or a finished run, and a log cut mid-file is not cut further (issue 12 item 6).
#[test]
fn resume_refuses_state_that_verify_refuses_and_changes_nothing() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = counting_script(&env);
    start(&env, &repo, &agent, &config, Some("tool.after-side-effect"));
    let session = only_session(&env).unwrap();
    let stopped = resume(&env, &session, &config, &["--allow-shell"]);
    stopped.expect(7);
    let (run, ops) = input_required(&stopped);
    let dir = env.state_dir().join("sessions").join(&session);
    let journal = dir.join("runs").join(&run).join("journal.jsonl");
    let messages = dir.join("messages.jsonl");
    let counted = || {
        std::fs::read_to_string(repo.join("counter.txt"))
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!(counted(), 1);
    let refused = |what: &str, names: &str| {
        let before = crate::env::snapshot(&dir);
        env.run("kxen-agent", &["session", "verify", &session])
            .expect(10);
        let out = resume(&env, &session, &config, &["--allow-shell"]);
        out.expect(10);
        assert!(out.stderr.contains(names), "{what}: {}", out.stderr);
        assert_eq!(counted(), 1, "{what}: the UNKNOWN exec ran again");
        let resolve = env.run(
            "kxen-agent",
            &["run", "resolve", &session, &run, &ops[0], "--output", "x"],
        );
        assert_eq!(resolve.code, 10, "{what}: {}", resolve.stderr);
        let mut after = crate::env::snapshot(&dir);
        let mut before = before;
        for s in [&mut before, &mut after] {
            s.remove("lease.json");
        }
        assert_eq!(
            before, after,
            "{what}: a refused writer changed the Session"
        );
    };
    let original_journal = std::fs::read_to_string(&journal).unwrap();
    let original_messages = std::fs::read_to_string(&messages).unwrap();

    std::fs::write(&journal, "").unwrap();
    refused("emptied journal", "journal.jsonl");
    std::fs::remove_file(&journal).unwrap();
    refused("deleted journal", "journal.jsonl");
    std::fs::write(&journal, &original_journal).unwrap();

    let lines: Vec<&str> = original_messages.lines().collect();
    std::fs::write(&messages, lines[..lines.len() - 1].join("\n") + "\n").unwrap();
    refused("last message removed", "journal.jsonl:1");
    std::fs::write(&messages, &original_messages).unwrap();

    // Intact again: resolve and finish.
    env.run(
        "kxen-agent",
        &[
            "run", "resolve", &session, &run, &ops[0], "--output", "ran once",
        ],
    )
    .expect(0);
    resume(&env, &session, &config, &["--allow-shell"]).expect(0);
    assert_eq!(counted(), 1);

    // A message log cut mid-file: its cut line looks like a torn tail, but the settled runs name
    // what is gone, so `--resume --task` refuses and leaves the file as it is.
    let full = std::fs::read(&messages).unwrap();
    let cut = &full[..full.len() / 2];
    std::fs::write(&messages, cut).unwrap();
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(10);
    let next = resume(
        &env,
        &session,
        &config,
        &["--allow-shell", "--task", "Count again"],
    );
    next.expect(10);
    assert!(next.stderr.contains("messages.jsonl"), "{}", next.stderr);
    assert_eq!(
        std::fs::read(&messages).unwrap(),
        cut,
        "the log was cut further"
    );
    let show = env.run("kxen-agent", &["session", "show", &session]);
    assert_eq!(
        show.jsonl()[0]["runs"].as_array().unwrap().len(),
        1,
        "a run was started"
    );
    std::fs::write(&messages, &full).unwrap();

    // A finished run edited back to `running` is not run again.
    let run_json = dir.join("runs").join(&run).join("run.json");
    let text = std::fs::read_to_string(&run_json).unwrap();
    std::fs::write(
        &run_json,
        text.replacen("\"status\": \"completed\"", "\"status\": \"running\"", 1),
    )
    .unwrap();
    let again = resume(&env, &session, &config, &["--allow-shell"]);
    again.expect(10);
    assert!(again.stderr.contains("run.json"), "{}", again.stderr);
    // With a new task it is the same corrupt state (exit 10), not "continue the unfinished run".
    let with_task = resume(
        &env,
        &session,
        &config,
        &["--allow-shell", "--task", "More"],
    );
    with_task.expect(10);
    assert!(
        with_task.stderr.contains("run.json"),
        "{}",
        with_task.stderr
    );
    assert_eq!(counted(), 1);
}

/// An agent whose runs may take `wall_ms` of wall-clock time, with `exec`.
fn timed_agent(env: &TestEnv, wall_ms: u64) -> PathBuf {
    let agent = env.path().join("timed.yaml");
    std::fs::write(
        &agent,
        format!(
            "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {{name: timed}}\nspec:\n  \
             objective: o\n  instructions: [i]\n  capabilities: {{required: [read], optional: [exec]}}\n  \
             execution: {{maxTurns: 8, maxWallClockMs: {wall_ms}}}\n"
        ),
    )
    .unwrap();
    agent
}

/// `maxWallClockMs` bounds tool calls: a tool runs at most until the run's wall-clock budget
/// ends, then it is stopped as on cancel; with its outcome known the run ends `failed` /
/// `budgetExhausted` (exit 8), and the calls after it in the turn never start (issue 12 item 15).
#[test]
fn the_wall_clock_budget_stops_a_running_tool() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = timed_agent(&env, 2000);
    let config = script_config(
        &env,
        &[
            turn(&[
                ("c1", "exec", json!({"command": "touch started; sleep 30"})),
                ("c2", "exec", json!({"command": "touch second"})),
            ]),
            answer("never reached"),
        ],
    );
    let began = std::time::Instant::now();
    let run = start(&env, &repo, &agent, &config, None);
    assert!(
        began.elapsed() < std::time::Duration::from_secs(15),
        "the 30 s command ran past the 2 s budget ({:?})",
        began.elapsed()
    );
    run.expect(8);
    let fin = finish_event(&run);
    assert_eq!(fin["status"], "failed");
    assert_eq!(fin["reason"], "budgetExhausted");
    assert!(repo.join("started").exists());
    assert!(
        !repo.join("second").exists(),
        "a call started after the budget ended"
    );
    let session = only_session(&env).unwrap();
    let shown = run_show(&env, &session, fin["runId"].as_str().unwrap());
    let ops = shown["operations"].as_array().unwrap();
    assert_eq!(ops.len(), 1, "{shown}");
    assert_eq!(ops[0]["phase"], "settled");
    let text = ops[0]["output"]["text"].as_str().unwrap();
    assert!(text.contains("maxWallClockMs 2000"), "{text}");
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(0);
}

/// A tool that ignores SIGTERM when the budget ends is killed after the cleanup window: its
/// outcome is UNKNOWN, so the run stops for a human (exit 7); once resolved, the run ends
/// `budgetExhausted` (exit 8) without starting anything more.
#[test]
fn a_tool_killed_at_the_end_of_the_budget_is_unknown_then_the_run_is_exhausted() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = timed_agent(&env, 1500);
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
    let began = std::time::Instant::now();
    let run = start(&env, &repo, &agent, &config, None);
    assert!(began.elapsed() < std::time::Duration::from_secs(15));
    run.expect(7);
    let (run_id, ops) = input_required(&run);
    let session = only_session(&env).unwrap();
    env.run(
        "kxen-agent",
        &[
            "run", "resolve", &session, &run_id, &ops[0], "--output", "killed",
        ],
    )
    .expect(0);
    let done = resume(&env, &session, &config, &["--allow-shell"]);
    done.expect(8);
    assert_eq!(finish_event(&done)["reason"], "budgetExhausted");
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(0);
}
