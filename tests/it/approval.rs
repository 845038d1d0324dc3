//! Approvals: a policy rule `ask` holds a call before it starts (`awaitingApproval`, exit 7,
//! `runApprovalRequired`); `run approve` / `run deny` record the decision; `--resume` runs the
//! approved call through the durable journal once, or gives the model the denial. Crashes at
//! every approval step and SIGKILLs around them repeat nothing.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::env::{Run, TestEnv};
use crate::run_support::*;

/// A policy with `exec` behind an `ask` rule.
fn ask_policy(env: &TestEnv) -> PathBuf {
    let path = env.path().join("policy.json");
    std::fs::write(
        &path,
        r#"{"allowShell": true, "mcpTools": {"exec": "ask"}}"#,
    )
    .unwrap();
    path
}

struct Setup {
    env: TestEnv,
    repo: PathBuf,
    agent: PathBuf,
    config: PathBuf,
    policy: PathBuf,
}

fn setup(turns: &[Value]) -> Setup {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    let config = script_config(&env, turns);
    let policy = ask_policy(&env);
    Setup {
        env,
        repo,
        agent,
        config,
        policy,
    }
}

impl Setup {
    fn start(&self, failpoint: Option<&str>) -> Run {
        let mut cmd = self.env.cmd("kxen-agent");
        cmd.args(["run", "--workspace", self.repo.to_str().unwrap()])
            .args(["--task", "Count", "--agent", self.agent.to_str().unwrap()])
            .args(["--config", self.config.to_str().unwrap()])
            .args(["--policy", self.policy.to_str().unwrap()]);
        if let Some(point) = failpoint {
            cmd.env("KXEN_FAILPOINT", point);
        }
        Run::from(cmd.output().unwrap())
    }

    fn resume_args<'a>(&'a self, session: &'a str) -> Vec<&'a str> {
        vec![
            "--resume",
            session,
            "--config",
            self.config.to_str().unwrap(),
            "--policy",
            self.policy.to_str().unwrap(),
        ]
    }

    fn resume(&self, session: &str, failpoint: Option<&str>) -> Run {
        let mut cmd = self.env.cmd("kxen-agent");
        cmd.args(self.resume_args(session));
        if let Some(point) = failpoint {
            cmd.env("KXEN_FAILPOINT", point);
        }
        Run::from(cmd.output().unwrap())
    }

    fn kxen(&self, args: &[&str]) -> Run {
        self.env.run("kxen-agent", args)
    }

    fn session(&self) -> Option<(String, String)> {
        let list = self.kxen(&["session", "list"]);
        list.expect(0);
        let first = list.jsonl().into_iter().next()?;
        Some((
            first["id"].as_str()?.to_string(),
            first["lastRunId"].as_str()?.to_string(),
        ))
    }

    fn show(&self, session: &str, run: &str) -> Value {
        let show = self.kxen(&["run", "show", session, run]);
        show.expect(0);
        show.jsonl().remove(0)
    }

    fn counter(&self) -> Vec<String> {
        std::fs::read_to_string(self.repo.join("counter.txt"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

fn event<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    events
        .iter()
        .find(|e| e["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} event in {events:?}"))
}

fn history(op: &Value) -> Vec<&str> {
    op["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect()
}

#[test]
fn an_ask_rule_waits_for_approval_then_the_call_runs_once() {
    let s = setup(&[
        call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
        answer("done"),
    ]);
    let first = s.start(None);
    first.expect(7);
    assert!(
        first.stderr.contains("waits for approval") && first.stderr.contains("run approve"),
        "{}",
        first.stderr
    );
    let events = first.jsonl();
    let asked = event(&events, "runApprovalRequired");
    assert_eq!(asked["tool"], "exec");
    assert_eq!(
        asked["arguments"],
        json!({"command": "echo ran >> counter.txt"})
    );
    assert_eq!(asked["rule"], "exec");
    let op = asked["opId"].as_str().unwrap().to_string();
    let hash = asked["argumentsHash"].as_str().unwrap().to_string();
    assert!(hash.starts_with("sha256:"), "{hash}");
    assert!(
        events.iter().all(|e| e["type"] != "toolStarted"),
        "nothing started"
    );
    assert!(s.counter().is_empty(), "nothing ran");
    let (session, run) = s.session().unwrap();
    let shown = s.show(&session, &run);
    assert_eq!(shown["run"]["status"], "inputRequired");
    assert_eq!(shown["run"]["approvalOps"], json!([op]));
    assert_eq!(shown["pendingApprovals"][0]["opId"], op.as_str());
    assert_eq!(shown["pendingApprovals"][0]["argumentsHash"], hash.as_str());
    assert_eq!(shown["operations"][0]["phase"], "awaitingApproval");
    let text = s.kxen(&["--format", "text", "run", "show", &session, &run]);
    assert!(
        text.stdout.contains("needs approval") && text.stdout.contains("run approve"),
        "{}",
        text.stdout
    );
    // A resume without a decision stops again, and runs nothing.
    let again = s.resume(&session, None);
    again.expect(7);
    assert_eq!(
        event(&again.jsonl(), "runApprovalRequired")["opId"],
        op.as_str()
    );
    assert!(s.counter().is_empty());
    // Clear errors: a wrong id (3), resolve of a call that never ran (5), a wrong hash (5).
    let wrong = s.kxen(&[
        "run",
        "approve",
        &session,
        &run,
        "op_00000000000000000000000000",
    ]);
    wrong.expect(3);
    assert!(wrong.stderr.contains("no operation"), "{}", wrong.stderr);
    let resolve = s.kxen(&["run", "resolve", &session, &run, &op, "--output", "x"]);
    resolve.expect(5);
    assert!(
        resolve.stderr.contains("waits for approval"),
        "{}",
        resolve.stderr
    );
    let bad_hash = s.kxen(&[
        "run",
        "approve",
        &session,
        &run,
        &op,
        "--arguments-hash",
        "sha256:00",
    ]);
    bad_hash.expect(5);
    assert!(
        bad_hash.stderr.contains("nothing was recorded"),
        "{}",
        bad_hash.stderr
    );
    // A changed rule is policy drift (the rules are in the policy hash).
    let drift = s.kxen(&[
        "--resume",
        &session,
        "--config",
        s.config.to_str().unwrap(),
        "--allow-shell",
    ]);
    drift.expect(6);
    assert!(drift.stderr.contains("mcpTools"), "{}", drift.stderr);

    let approve = s.kxen(&[
        "run",
        "approve",
        &session,
        &run,
        &op,
        "--arguments-hash",
        &hash,
    ]);
    approve.expect(0);
    let decided = approve.jsonl().remove(0);
    assert_eq!(decided["type"], "operationDecided");
    assert_eq!(decided["decision"], "approved");
    let twice = s.kxen(&["run", "approve", &session, &run, &op]);
    twice.expect(5);
    assert!(
        twice.stderr.contains("already approved"),
        "{}",
        twice.stderr
    );
    let deny = s.kxen(&["run", "deny", &session, &run, &op]);
    deny.expect(5);
    s.kxen(&["session", "verify", &session]).expect(0);

    let done = s.resume(&session, None);
    done.expect(0);
    assert_eq!(s.counter(), ["ran"], "the approved call ran exactly once");
    let started = event(&done.jsonl(), "toolStarted").clone();
    assert_eq!(
        started["opId"],
        op.as_str(),
        "under the approved operation id"
    );
    let shown = s.show(&session, &run);
    assert_eq!(shown["run"]["status"], "completed");
    assert_eq!(
        history(&shown["operations"][0]),
        [
            "awaitingApproval",
            "approved",
            "started",
            "outcomeKnown",
            "settled"
        ]
    );
    assert_eq!(shown["pendingApprovals"], json!([]));
    s.kxen(&["session", "verify", &session]).expect(0);
    let late = s.kxen(&["run", "approve", &session, &run, &op]);
    late.expect(5);
}

#[test]
fn a_denied_call_never_runs_and_the_model_reads_the_denial() {
    let s = setup(&[
        call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
        call("c2", "read", json!({"path": "README"})),
        answer("done"),
    ]);
    s.start(None).expect(7);
    let (session, run) = s.session().unwrap();
    let op = s.show(&session, &run)["pendingApprovals"][0]["opId"]
        .as_str()
        .unwrap()
        .to_string();
    let deny = s.kxen(&[
        "run",
        "deny",
        &session,
        &run,
        &op,
        "--reason",
        "no pushes today",
    ]);
    deny.expect(0);
    assert_eq!(deny.jsonl()[0]["decision"], "denied");
    s.kxen(&["run", "approve", &session, &run, &op]).expect(5);
    s.kxen(&["session", "verify", &session]).expect(0);
    let done = s.resume(&session, None);
    done.expect(0);
    assert!(s.counter().is_empty(), "a denied call never runs");
    let finished: Vec<Value> = done
        .jsonl()
        .into_iter()
        .filter(|e| e["type"] == "toolFinished")
        .collect();
    assert_eq!(finished[0]["tool"], "exec");
    assert_eq!(finished[0]["isError"], true);
    assert!(
        finished[0]["output"]
            .as_str()
            .unwrap()
            .contains("denied by the operator, the call was not run: no pushes today"),
        "{finished:?}"
    );
    assert_eq!(finished[1]["tool"], "read", "the run goes on");
    let shown = s.show(&session, &run);
    assert_eq!(
        history(&shown["operations"][0]),
        ["awaitingApproval", "denied", "settled"]
    );
    // The model's history holds the denial as the exec call's result.
    let show = s.kxen(&["session", "show", &session]);
    let messages = show.jsonl()[0]["messages"].as_array().unwrap().clone();
    let tool = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert!(
        tool["content"]
            .as_str()
            .unwrap()
            .contains("no pushes today")
    );
    assert_eq!(tool["isError"], true);
}

#[test]
fn a_pending_approval_survives_export_and_import() {
    let s = setup(&[
        call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
        answer("done"),
    ]);
    s.start(None).expect(7);
    let (session, run) = s.session().unwrap();
    let bundle = s.env.path().join("s.bundle.json");
    s.kxen(&[
        "session",
        "export",
        &session,
        "--output",
        bundle.to_str().unwrap(),
    ])
    .expect(0);
    // Import into a second state dir, bound to a clone of the repository.
    let other_state = s.env.path().join("state2");
    let clone = s.env.path().join("clone");
    crate::env::git(
        s.env.path(),
        &[
            "clone",
            "-q",
            s.repo.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    let state2 = other_state.to_str().unwrap();
    let import = s.kxen(&[
        "--state-dir",
        state2,
        "session",
        "import",
        bundle.to_str().unwrap(),
        "--workspace",
        clone.to_str().unwrap(),
    ]);
    import.expect(0);
    let show = s.kxen(&["--state-dir", state2, "run", "show", &session, &run]);
    show.expect(0);
    let op = show.jsonl()[0]["pendingApprovals"][0]["opId"]
        .as_str()
        .unwrap()
        .to_string();
    s.kxen(&["--state-dir", state2, "run", "approve", &session, &run, &op])
        .expect(0);
    let mut args = vec!["--state-dir", state2];
    args.extend(s.resume_args(&session));
    args.extend(["--workspace", clone.to_str().unwrap()]);
    s.kxen(&args).expect(0);
    assert_eq!(
        std::fs::read_to_string(clone.join("counter.txt")).unwrap(),
        "ran\n"
    );
    assert!(
        s.counter().is_empty(),
        "the original workspace is untouched"
    );
}

/// Every crash point an approval's path reaches: holding the call, recording the decision, and
/// the approved call's own durable steps. After each crash, whatever decision is still missing
/// is made, and the run completes with the call run at most once (exactly once unless the crash
/// left it UNKNOWN before it ran).
#[test]
fn a_crash_at_every_approval_step_loses_nothing_and_repeats_nothing() {
    let points: Vec<&str> = kxen::fsx::failpoint::ALL
        .iter()
        .copied()
        .filter(|p| {
            p.starts_with("approval.") || p.starts_with("tool.") || p.starts_with("settle.")
        })
        .collect();
    for point in points {
        let s = setup(&[
            call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
            answer("done"),
        ]);
        // The first run stops for approval (or crashes holding the call).
        let crash_first = matches!(
            point,
            "approval.after-awaiting" | "tool.after-assistant-message"
        );
        let first = s.start(crash_first.then_some(point));
        let (session, run) = s.session().unwrap_or_else(|| panic!("{point}: no session"));
        if crash_first {
            assert_ne!(first.code, 0, "{point}: not reached");
            s.resume(&session, None).expect(7);
        } else {
            first.expect(7);
        }
        let op = s.show(&session, &run)["pendingApprovals"][0]["opId"]
            .as_str()
            .unwrap_or_else(|| panic!("{point}: nothing pending"))
            .to_string();
        let mut approve = s.env.cmd("kxen-agent");
        approve.args(["run", "approve", &session, &run, &op]);
        if point == "approval.after-decision" {
            approve.env("KXEN_FAILPOINT", point);
        }
        let approved = Run::from(approve.output().unwrap());
        if point == "approval.after-decision" {
            assert_ne!(approved.code, 0, "{point}: not reached");
            // The decision was durable before the crash: a second one is refused.
            let again = s.kxen(&["run", "approve", &session, &run, &op]);
            again.expect(5);
            assert!(
                again.stderr.contains("already approved"),
                "{point}: {}",
                again.stderr
            );
        } else {
            approved.expect(0);
        }
        let crash_resume = !crash_first && point != "approval.after-decision";
        let resumed = s.resume(&session, crash_resume.then_some(point));
        if crash_resume {
            assert_ne!(resumed.code, 0, "{point}: not reached\n{}", resumed.stdout);
        }
        let mut resolved = false;
        for _ in 0..3 {
            let next = s.resume(&session, None);
            match next.code {
                0 => break,
                2 if next.stderr.contains("nothing to resume") => break,
                7 => {
                    let shown = s.show(&session, &run);
                    assert_eq!(shown["run"]["unknownOps"], json!([op]), "{point}: {shown}");
                    s.kxen(&[
                        "run", "resolve", &session, &run, &op, "--output", "verified",
                    ])
                    .expect(0);
                    resolved = true;
                }
                other => panic!("{point}: resume exited {other}\n{}", next.stderr),
            }
        }
        let shown = s.show(&session, &run);
        assert_eq!(shown["run"]["status"], "completed", "{point}: {shown}");
        let h = history(&shown["operations"][0]);
        assert_eq!(
            &h[..3],
            ["awaitingApproval", "approved", "started"],
            "{point}"
        );
        let count = s.counter().len();
        match point {
            "tool.after-started" => assert_eq!((count, resolved), (0, true), "{point}"),
            "tool.after-side-effect" => assert_eq!((count, resolved), (1, true), "{point}"),
            _ => assert_eq!((count, resolved), (1, false), "{point}"),
        }
        s.kxen(&["session", "verify", &session]).expect(0);
    }
}

/// SIGKILL at random moments of runs whose every call needs approval: between kills the test
/// approves what waits and resolves what is UNKNOWN. No call runs twice, and every call ends
/// settled with a history the state machine allows.
#[test]
fn sigkills_around_approvals_repeat_nothing() {
    const CALLS: usize = 12;
    const KILLS: usize = 20;
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
    let s = setup(&turns);
    let decide = |session: &str, run: &str| {
        let shown = s.show(session, run);
        for op in shown["operations"].as_array().unwrap() {
            let id = op["opId"].as_str().unwrap();
            match op["phase"].as_str().unwrap() {
                "awaitingApproval" => s.kxen(&["run", "approve", session, run, id]).expect(0),
                "outcomeUnknown" => s
                    .kxen(&["run", "resolve", session, run, id, "--output", "killed"])
                    .expect(0),
                _ => continue,
            };
        }
    };
    let spawn = |args: &[&str]| {
        s.env
            .cmd("kxen-agent")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let start_args: Vec<String> = [
        "run",
        "--workspace",
        s.repo.to_str().unwrap(),
        "--task",
        "t",
        "--agent",
        s.agent.to_str().unwrap(),
        "--config",
        s.config.to_str().unwrap(),
        "--policy",
        s.policy.to_str().unwrap(),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let start_args: Vec<&str> = start_args.iter().map(String::as_str).collect();
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut kills = 0;
    for _ in 0..KILLS * 4 {
        if kills >= KILLS {
            break;
        }
        let (mut child, resumed) = match s.session() {
            None => (spawn(&start_args), false),
            Some((session, run)) => {
                decide(&session, &run);
                (spawn(&s.resume_args(&session)), true)
            }
        };
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(seed % 60));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            // Only kills around approvals count: on a loaded machine a first run killed within
            // 60 ms may not have created its Session yet, and then there is nothing to resume.
            if resumed {
                kills += 1;
            }
        }
        child.wait().unwrap();
    }
    if s.session().is_none() {
        // Every start was killed before its Session existed: start one that is not killed.
        let _ = s.env.cmd("kxen-agent").args(&start_args).output().unwrap();
    }
    let (session, run) = s.session().expect("a session");
    for _ in 0..(CALLS * 3) {
        decide(&session, &run);
        let next = s.resume(&session, None);
        match next.code {
            0 => break,
            2 if next.stderr.contains("nothing to resume") => break,
            7 => continue,
            other => panic!("resume exited {other}\n{}", next.stderr),
        }
    }
    let shown = s.show(&session, &run);
    assert_eq!(shown["run"]["status"], "completed", "{shown}");
    let mut seen: HashMap<String, usize> = HashMap::new();
    for line in s.counter() {
        *seen.entry(line).or_default() += 1;
    }
    assert!(seen.values().all(|n| *n == 1), "a call ran twice: {seen:?}");
    let ops = shown["operations"].as_array().unwrap();
    assert_eq!(ops.len(), CALLS);
    for op in ops {
        let h = history(op);
        assert_eq!(&h[..3], ["awaitingApproval", "approved", "started"], "{op}");
        let token = op["arguments"]["command"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .to_string();
        if h[3..] == ["outcomeKnown", "settled"] {
            assert_eq!(seen.get(&token), Some(&1), "{token} recorded as run");
        } else {
            assert_eq!(h[3..], ["outcomeUnknown", "resolved", "settled"], "{op}");
        }
    }
    s.kxen(&["session", "verify", &session]).expect(0);
    eprintln!("approval kill loop: {kills} kills");
}

/// A stop for a human starts a new repeat window: after a decision the workspace may have been
/// edited by hand, so a read made before the stop runs again instead of being answered from the
/// record (src/run/repeat.rs).
#[test]
fn a_read_after_a_decision_runs_again_and_sees_the_human_edit() {
    let s = setup(&[
        call("c1", "read", json!({"path": "README"})),
        call("c2", "exec", json!({"command": "echo ran >> counter.txt"})),
        call("c3", "read", json!({"path": "README"})),
        answer("done"),
    ]);
    s.start(None).expect(7);
    let (session, run) = s.session().unwrap();
    let op = s.show(&session, &run)["pendingApprovals"][0]["opId"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(s.repo.join("README"), "edited by hand\n").unwrap();
    s.kxen(&["run", "deny", &session, &run, &op, "--reason", "I fixed it"])
        .expect(0);
    s.resume(&session, None).expect(0);
    let show = s.kxen(&["session", "show", &session]);
    let tools: Vec<Value> = show.jsonl()[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect();
    assert_eq!(tools.len(), 3, "{tools:?}");
    let last = tools[2]["content"].as_str().unwrap();
    assert!(
        last.contains("edited by hand") && !last.contains("already made"),
        "{last}"
    );
    assert!(s.counter().is_empty(), "the denied call never ran");
}
