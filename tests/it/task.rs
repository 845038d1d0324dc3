//! The `task` tool: subagents as child Sessions with their own journals (issue 15).

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::env::{Run, TestEnv};
use crate::run_support::*;

/// An agent that may read, execute and delegate (`task` needs `--allow-shell`).
pub fn delegator(env: &TestEnv, max_turns: u32) -> PathBuf {
    let path = env.path().join("delegator.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {{name: delegator}}\nspec:\n  \
             objective: o\n  instructions: [i]\n  capabilities: {{required: [read], optional: \
             [exec, task]}}\n  execution: {{maxTurns: {max_turns}}}\n"
        ),
    )
    .unwrap();
    path
}

/// A turn calling `task` once per `(id, description, prompt)`.
pub fn tasks(calls: &[(&str, &str, &str)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, description, prompt)| {
            json!({"id": id, "name": "task",
                   "arguments": {"description": description, "prompt": prompt}})
        })
        .collect();
    json!({"text": "", "toolCalls": calls})
}

/// `line` as a line of the child Session whose task description is `description`.
pub fn child(description: &str, mut line: Value) -> Value {
    line["task"] = json!(description);
    line
}

/// The script of the usual two-children run: the parent calls `task` twice in one turn, each
/// child runs a command (counting its executions in `counter.txt`) and reads, then answers.
pub fn two_children_script(env: &TestEnv) -> PathBuf {
    script_config(
        env,
        &[
            tasks(&[
                ("t1", "check a", "Check a, then say a-ok"),
                ("t2", "check b", "Check b, then say b-ok"),
            ]),
            child(
                "check a",
                call("a1", "exec", json!({"command": "echo a >> counter.txt"})),
            ),
            child(
                "check b",
                call("b1", "exec", json!({"command": "echo b >> counter.txt"})),
            ),
            child(
                "check a",
                call("a2", "read", json!({"path": "counter.txt"})),
            ),
            child(
                "check b",
                call("b2", "read", json!({"path": "counter.txt"})),
            ),
            child("check a", answer("a-ok")),
            child("check b", answer("b-ok")),
            answer("both checked"),
        ],
    )
}

pub fn session_list(env: &TestEnv) -> Vec<Value> {
    let list = env.run("kxen-agent", &["session", "list"]);
    list.expect(0);
    list.jsonl()
}

fn run_show(env: &TestEnv, session: &str, run: &str) -> Value {
    let show = env.run("kxen-agent", &["run", "show", session, run]);
    show.expect(0);
    show.jsonl().remove(0)
}

fn session_show(env: &TestEnv, session: &str) -> Value {
    let show = env.run("kxen-agent", &["session", "show", session]);
    show.expect(0);
    show.jsonl().remove(0)
}

fn start(env: &TestEnv, repo: &Path, agent: &Path, config: &Path) -> Run {
    run_new(env, repo, "Check both", agent, config, &["--allow-shell"])
}

/// The first tool result in a shown Session's messages (a parent's `task` call's answer).
fn first_tool_result(shown: &Value) -> Value {
    shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()
        .clone()
}

/// The top-level Session of the state dir (the one without a parent).
pub fn parent_of_all(env: &TestEnv) -> Value {
    let top: Vec<Value> = session_list(env)
        .into_iter()
        .filter(|s| s["parentId"].is_null())
        .collect();
    assert_eq!(top.len(), 1, "{top:?}");
    top[0].clone()
}

#[test]
fn two_task_calls_run_two_child_sessions_together_and_their_results_arrive_in_the_models_order() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = delegator(&env, 8);
    let config = two_children_script(&env);
    let out = start(&env, &repo, &agent, &config);
    out.expect(0);
    assert_eq!(finished(&out.jsonl())["finalText"], "both checked");
    let counter = std::fs::read_to_string(repo.join("counter.txt")).unwrap();
    assert_eq!(
        counter.lines().count(),
        2,
        "each child ran its command once"
    );

    let parent = parent_of_all(&env);
    let parent_id = parent["id"].as_str().unwrap();
    let shown = session_show(&env, parent_id);
    // The results, in the model's order of the calls.
    let tool_messages: Vec<&Value> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_messages.len(), 2);
    assert_eq!(tool_messages[0]["toolCallId"], "t1");
    // Started together with 7 of the parent's 8 turns left, the children split them (4 + 3).
    let mut carved: Vec<u64> = session_list(&env)
        .iter()
        .filter(|s| s["forkKind"] == "task")
        .map(|s| {
            session_show(&env, s["id"].as_str().unwrap())["lock"]["definition"]["spec"]["execution"]
                ["maxTurns"]
                .as_u64()
                .unwrap()
        })
        .collect();
    carved.sort_unstable();
    assert_eq!(carved, [3, 4]);
    assert_eq!(tool_messages[0]["content"], "a-ok");
    assert_eq!(tool_messages[1]["toolCallId"], "t2");
    assert_eq!(tool_messages[1]["content"], "b-ok");

    // Each operation names its child; each child names its parent's run and operation.
    let run_id = parent["lastRunId"].as_str().unwrap();
    // The two calls started together: both `started` records before any outcome.
    let journal = env
        .state_dir()
        .join("sessions")
        .join(parent_id)
        .join("runs")
        .join(run_id)
        .join("journal.jsonl");
    let phases: Vec<String> = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["phase"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        phases,
        [
            "started",
            "started",
            "outcomeKnown",
            "outcomeKnown",
            "settled",
            "settled"
        ]
    );
    let ops = run_show(&env, parent_id, run_id)["operations"].clone();
    let ops = ops.as_array().unwrap();
    assert_eq!(ops.len(), 2);
    for (op, description) in ops.iter().zip(["check a", "check b"]) {
        assert_eq!(op["tool"], "task");
        assert_eq!(op["phase"], "settled");
        let child_id = op["child"]["sessionId"].as_str().unwrap();
        let child_run = op["child"]["runId"].as_str().unwrap();
        let child = session_show(&env, child_id);
        assert_eq!(child["parentId"], parent_id);
        assert_eq!(child["branchRootId"], parent_id);
        assert_eq!(child["forkKind"], "task");
        assert_eq!(child["firstRunId"], child_run);
        assert_eq!(
            child["taskParent"],
            json!({"runId": run_id, "opId": op["opId"], "description": description, "depth": 1})
        );
        assert_eq!(child["lock"]["policyHash"], shown["lock"]["policyHash"]);
        assert_eq!(child["workspace"], shown["workspace"]);
        // Never wider than the parent, and no `task` below the depth limit.
        assert_eq!(child["lock"]["capabilities"], json!(["exec", "read"]));
        let child_ops = run_show(&env, child_id, child_run)["operations"].clone();
        assert_eq!(child_ops.as_array().unwrap().len(), 2, "{child_ops}");
        env.run("kxen-agent", &["session", "verify", child_id])
            .expect(0);
    }
    env.run("kxen-agent", &["session", "verify", parent_id])
        .expect(0);

    // `session list` shows the children right under their parent, which names them.
    let list = session_list(&env);
    let children: Vec<Value> = ops
        .iter()
        .map(|op| op["child"]["sessionId"].clone())
        .collect();
    // (Children created in the same millisecond are in no particular order.)
    let sorted = |mut v: Vec<Value>| {
        v.sort_by_key(|x| x.to_string());
        v
    };
    assert_eq!(list.len(), 3);
    assert_eq!(list[0]["id"], parent_id);
    let listed: Vec<Value> = list[1..].iter().map(|s| s["id"].clone()).collect();
    assert_eq!(sorted(listed), sorted(children.clone()));
    let named: Vec<Value> = list[0]["tasks"].as_array().unwrap().clone();
    assert_eq!(sorted(named), sorted(children.clone()));
    assert_eq!(list[1]["taskParent"]["depth"], 1);
    let text = env.run("kxen-agent", &["--format", "text", "session", "list"]);
    let lines: Vec<&str> = text.stdout.lines().collect();
    for line in &lines[1..] {
        assert!(line.starts_with("  ses_"), "{}", text.stdout);
        assert!(
            line.contains(&format!(" of {parent_id})")),
            "{}",
            text.stdout
        );
    }
    assert!(
        text.stdout.contains("(task `check a` of "),
        "{}",
        text.stdout
    );
    // `session show` of the parent: its task children with their status.
    let tasks = shown["lineage"]["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2);
    for t in tasks {
        assert!(children.contains(&t["sessionId"]), "{t}");
        assert_eq!(t["status"], "completed");
    }
    assert_eq!(shown["lineage"]["forks"], json!([]));
}

#[test]
fn task_needs_allow_shell() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = delegator(&env, 8);
    let config = two_children_script(&env);
    // Without --allow-shell the optional `task` is dropped: the call is refused, never run.
    let out = run_new(&env, &repo, "Check both", &agent, &config, &[]);
    let parent = parent_of_all(&env);
    assert_eq!(session_list(&env).len(), 1, "no child Session: {out:?}");
    let shown = session_show(&env, parent["id"].as_str().unwrap());
    assert_eq!(shown["lock"]["capabilities"], json!(["read"]));
    let refused = first_tool_result(&shown);
    assert!(
        refused["content"]
            .as_str()
            .unwrap()
            .contains("tool `task` is not allowed"),
        "{refused}"
    );
}

#[test]
fn a_child_cannot_exceed_the_parents_remaining_turns_and_its_turns_are_the_parents() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    // Turn 1 calls task, so the child has 2 of the parent's 3 turns left; it wants 3. What it
    // takes is the parent's: afterwards the parent has none left.
    let agent = delegator(&env, 3);
    let config = script_config(
        &env,
        &[
            tasks(&[("t1", "long", "Work long")]),
            child("long", call("l1", "read", json!({"path": "README"}))),
            child("long", call("l2", "glob", json!({"pattern": "*"}))),
            child("long", answer("never reached")),
            answer("never reached either"),
        ],
    );
    let out = start(&env, &repo, &agent, &config);
    out.expect(8);
    assert!(
        out.stderr
            .contains("maxTurns 3, 2 of them taken by its subagents"),
        "{}",
        out.stderr
    );
    let child = session_list(&env)
        .into_iter()
        .find(|s| s["forkKind"] == "task")
        .unwrap();
    let child_id = child["id"].as_str().unwrap();
    let shown = session_show(&env, child_id);
    assert_eq!(
        shown["lock"]["definition"]["spec"]["execution"]["maxTurns"],
        2
    );
    assert_eq!(child["lastRunStatus"], "failed");
    let run = &shown["runs"][0];
    assert_eq!(run["result"]["reason"], "budgetExhausted", "{run}");
    assert_eq!(run["result"]["turns"], 2);
    // The parent got the failure as its call's result, then stopped at its own budget: three
    // model calls in all.
    let parent = parent_of_all(&env);
    let parent_shown = session_show(&env, parent["id"].as_str().unwrap());
    let result = first_tool_result(&parent_shown);
    assert_eq!(result["isError"], true);
    assert!(
        result["content"].as_str().unwrap().contains("turn budget"),
        "{result}"
    );
    assert_eq!(
        parent_shown["runs"][0]["result"]["reason"],
        "budgetExhausted"
    );
    assert_eq!(parent_shown["runs"][0]["result"]["turns"], 1);
}

/// Two children one after the other, each wanting 3 turns, under a parent budget of 4: the
/// first takes 3 of the 3 left, and the parent (and so the second child) gets no more: the
/// parent and its children make 4 model calls, never more.
#[test]
fn sequential_children_share_the_parents_turn_budget() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = delegator(&env, 4);
    let work = |d: &str, n: &str| {
        [
            child(d, call(&format!("r{n}"), "read", json!({"path": "README"}))),
            child(d, call(&format!("g{n}"), "glob", json!({"pattern": "*"}))),
            child(d, answer(&format!("{d} done"))),
        ]
    };
    let mut turns = vec![tasks(&[("t1", "a", "p")])];
    turns.extend(work("a", "1"));
    turns.push(tasks(&[("t2", "b", "p")]));
    turns.extend(work("b", "2"));
    turns.push(answer("parent done"));
    let config = script_config(&env, &turns);
    let out = start(&env, &repo, &agent, &config);
    out.expect(8);
    let calls: u64 = session_list(&env)
        .iter()
        .map(|s| {
            let shown = session_show(&env, s["id"].as_str().unwrap());
            shown["runs"][0]["result"]["turns"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(
        calls, 4,
        "the parent's maxTurns bounds parent and children together"
    );
    assert_eq!(
        session_list(&env).len(),
        2,
        "no second child: no turns were left"
    );
}

/// Resolves what blocks the parent: for each UNKNOWN operation of the parent, the UNKNOWN
/// operations of its child when the child exists and needs input, else the parent's operation
/// itself (the child was recorded but never created). Returns the operations resolved.
fn resolve_blockers(env: &TestEnv, parent: &str, run: &str) -> Vec<String> {
    let mut resolved = Vec::new();
    let shown = run_show(env, parent, run);
    for op in shown["operations"].as_array().unwrap() {
        if op["phase"] != "outcomeUnknown" {
            continue;
        }
        let op_id = op["opId"].as_str().unwrap();
        let child = shown["children"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["opId"] == op_id)
            .cloned();
        match child {
            Some(c) if c["status"] == "inputRequired" => {
                let (ses, child_run) = (
                    c["sessionId"].as_str().unwrap(),
                    c["runId"].as_str().unwrap(),
                );
                for unknown in c["unknownOps"].as_array().unwrap() {
                    let unknown = unknown.as_str().unwrap();
                    env.run(
                        "kxen-agent",
                        &[
                            "run", "resolve", ses, child_run, unknown, "--output", "verified",
                        ],
                    )
                    .expect(0);
                    resolved.push(unknown.to_string());
                }
            }
            Some(c) if c["status"] != "notCreated" => {} // resumed with the parent
            _ => {
                env.run(
                    "kxen-agent",
                    &["run", "resolve", parent, run, op_id, "--output", "verified"],
                )
                .expect(0);
                resolved.push(op_id.to_string());
            }
        }
    }
    resolved
}

/// Resumes the top-level Session until it completes, resolving what blocks it; returns how
/// many operations had to be resolved.
fn finish_parent(env: &TestEnv, config: &Path, what: &str) -> usize {
    let mut resolved_total = 0;
    for _ in 0..8 {
        let Some(parent) = session_list(env)
            .into_iter()
            .find(|s| s["parentId"].is_null())
        else {
            // The crash came before the parent existed: start again.
            let agent = env.path().join("delegator.yaml");
            let repo = env.path().join("repo");
            let out = start(env, &repo, &agent, config);
            assert_eq!(out.code, 0, "{what}: {}\n{}", out.stdout, out.stderr);
            return resolved_total;
        };
        let id = parent["id"].as_str().unwrap();
        let run = parent["lastRunId"].as_str().unwrap();
        if parent["lastRunStatus"] == "completed"
            && run_show(env, id, run)["run"]["settled"] == true
        {
            return resolved_total;
        }
        let next = resume(env, id, config, &["--allow-shell"]);
        match next.code {
            0 => return resolved_total,
            7 => {
                let resolved = resolve_blockers(env, id, run);
                assert!(
                    !resolved.is_empty(),
                    "{what}: exit 7 with nothing to resolve\n{}",
                    next.stderr
                );
                resolved_total += resolved.len();
            }
            other => panic!(
                "{what}: resume exited {other}\n{}\n{}",
                next.stdout, next.stderr
            ),
        }
    }
    panic!("{what}: the parent never completed");
}

/// Checks what a crash-and-recover cycle left: the parent completed with both children's
/// results in the model's order, no child tool ran twice, no child was started twice, every
/// Session verifies.
fn check_recovered(env: &TestEnv, repo: &Path, what: &str) {
    let sessions = session_list(env);
    let parent = sessions.iter().find(|s| s["parentId"].is_null()).unwrap();
    assert_eq!(parent["lastRunStatus"], "completed", "{what}");
    let children: Vec<&Value> = sessions
        .iter()
        .filter(|s| s["forkKind"] == "task")
        .collect();
    assert!(
        children.len() <= 2,
        "{what}: a child started twice: {children:?}"
    );
    for s in &sessions {
        let id = s["id"].as_str().unwrap();
        let verify = env.run("kxen-agent", &["session", "verify", id]);
        assert_eq!(verify.code, 0, "{what}: {id}: {}", verify.stderr);
        if s["forkKind"] == "task" {
            // One run, one task message: the child was never started over.
            let shown = session_show(env, id);
            let users = shown["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "user")
                .count();
            assert_eq!(users, 1, "{what}: {id}");
            assert_eq!(shown["runs"].as_array().unwrap().len(), 1, "{what}: {id}");
        }
    }
    let counter = std::fs::read_to_string(repo.join("counter.txt")).unwrap_or_default();
    for token in ["a", "b"] {
        let n = counter.lines().filter(|l| *l == token).count();
        assert!(n <= 1, "{what}: child `{token}`'s command ran {n} times");
    }
    let shown = session_show(env, parent["id"].as_str().unwrap());
    let results: Vec<&Value> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(results.len(), 2, "{what}");
    assert_eq!(results[0]["toolCallId"], "t1", "{what}");
    assert_eq!(results[1]["toolCallId"], "t2", "{what}");
    let last = shown["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["content"], "both checked", "{what}");
}

/// kill -9 (abort) at every pass of every durable step of the parent and of both children:
/// the parent always completes after resolving what the crash left UNKNOWN, no child's tool
/// runs twice, no child starts twice, every Session verifies. With the children in parallel
/// (the default) and one after the other (`[tools] parallel = 1`, where the order of the
/// passes is fixed and so is what each crash leaves UNKNOWN).
#[test]
fn a_crash_at_every_pass_of_every_failpoint_never_runs_a_child_twice() {
    crash_at_every_pass(false, false);
}

#[test]
fn a_crash_at_every_pass_of_every_failpoint_never_runs_a_sequential_child_twice() {
    crash_at_every_pass(true, false);
}

/// The sequential crash test with power cuts (`KXEN_FAILPOINT_POWERCUT`: what the parent and the
/// children appended lazily is lost) at every pass of the tool and task points: the journals
/// re-derive it, and the same operations (no more) are UNKNOWN.
#[test]
fn a_power_cut_at_every_pass_of_the_tool_and_task_points_never_runs_a_child_twice() {
    crash_at_every_pass(true, true);
}

fn crash_at_every_pass(sequential: bool, power_cut: bool) {
    let mut crashes = 0;
    for point in kxen::fsx::failpoint::ALL {
        if ["import.", "export.", "dwp.", "pull.", "remote.", "mcp."]
            .iter()
            .any(|p| point.starts_with(p))
        {
            continue;
        }
        if power_cut && !(point.starts_with("tool.") || point.starts_with("task.")) {
            continue;
        }
        for skip in 0.. {
            let what = format!("{point} (pass {})", skip + 1);
            let env = TestEnv::new();
            let repo = env.git_repo("repo", &[("README", "x\n")]);
            let agent = delegator(&env, 8);
            let config = two_children_script(&env);
            if sequential {
                let mut text = std::fs::read_to_string(&config).unwrap();
                text.push_str("\n[tools]\nparallel = 1\n");
                std::fs::write(&config, text).unwrap();
            }
            let out = env
                .cmd("kxen-agent")
                .args([
                    "run",
                    "--workspace",
                    repo.to_str().unwrap(),
                    "--task",
                    "Check both",
                ])
                .args([
                    "--agent",
                    agent.to_str().unwrap(),
                    "--config",
                    config.to_str().unwrap(),
                ])
                .arg("--allow-shell")
                .env("KXEN_FAILPOINT", point)
                .env("KXEN_FAILPOINT_SKIP", skip.to_string())
                .env(
                    if power_cut {
                        "KXEN_FAILPOINT_POWERCUT"
                    } else {
                        "KXEN_TEST_NO_POWERCUT"
                    },
                    "1",
                )
                .output()
                .unwrap();
            if out.status.code() == Some(0) {
                // This point has fewer passes: the next point.
                check_recovered(&env, &repo, &what);
                break;
            }
            assert_eq!(
                out.status.code(),
                None,
                "{what}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            crashes += 1;
            // Every state a crash (or power cut) leaves verifies as it is, in every Session.
            for s in session_list(&env) {
                let id = s["id"].as_str().unwrap();
                let verify = env.run("kxen-agent", &["session", "verify", id]);
                assert_eq!(verify.code, 0, "{what}: {id}: {}", verify.stderr);
            }
            let resolved = finish_parent(&env, &config, &what);
            check_recovered(&env, &repo, &what);
            // Only a tool that started and had no recorded outcome, or a child recorded but
            // never created, is UNKNOWN; everything else recovers by itself.
            // The passes of `tool.after-side-effect` are, in order: child a's two calls, the
            // parent's first `task` call, child b's two calls, the second `task` call. A
            // parent's `task` call that crashed after its child finished is not UNKNOWN: the
            // child's result is taken.
            let expected = match *point {
                "tool.after-side-effect" if skip == 2 || skip == 5 => 0,
                "tool.after-started" | "tool.after-side-effect" => 1,
                "session.create.after-lock" | "session.create.before-rename" if skip > 0 => 1,
                _ => 0,
            };
            if sequential {
                assert_eq!(resolved, expected, "{what}");
            } else {
                // Two children run at once: the other one may have a call in flight too, and
                // both `task` calls start together.
                assert!(resolved <= 2, "{what}: {resolved} resolved");
            }
        }
    }
    let least = if power_cut { 20 } else { 40 };
    assert!(crashes > least, "only {crashes} crashes");
}

/// The script of children that block: each child's only call runs a command that marks its
/// start (`mark-a`, `mark-b` in the workspace) and sleeps; used to signal the parent while children run.
fn sleeping_children_script(env: &TestEnv) -> PathBuf {
    script_config(
        env,
        &[
            tasks(&[("t1", "sleep a", "Sleep a"), ("t2", "sleep b", "Sleep b")]),
            child(
                "sleep a",
                call("a1", "exec", json!({"command": "touch mark-a; sleep 30"})),
            ),
            child(
                "sleep b",
                call("b1", "exec", json!({"command": "touch mark-b; sleep 30"})),
            ),
            child("sleep a", answer("a slept")),
            child("sleep b", answer("b slept")),
            answer("both slept"),
        ],
    )
}

/// A human cannot resume a child while its parent's run is active (exit 5 naming the parent);
/// SIGINT of the parent cancels both running children (their commands get the cleanup window),
/// then the parent: exit 130, every Session stopped and verifiable.
#[test]
fn sigint_cancels_both_running_children_then_the_parent_and_a_child_is_the_parents_while_it_runs() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = delegator(&env, 8);
    let config = sleeping_children_script(&env);
    let parent = spawn_new(&env, &repo, "Sleep", &agent, &config, &["--allow-shell"]);
    // Both children run at once (the two `task` calls of one turn).
    wait_for(&repo.join("mark-a"));
    wait_for(&repo.join("mark-b"));
    let sessions = session_list(&env);
    let running: Vec<&Value> = sessions
        .iter()
        .filter(|s| s["forkKind"] == "task")
        .collect();
    assert_eq!(running.len(), 2, "{sessions:?}");
    let child = running[0];
    let parent_id = child["parentId"].as_str().unwrap().to_string();
    let child_id = child["id"].as_str().unwrap().to_string();
    let busy = resume(&env, &child_id, &config, &["--allow-shell"]);
    assert_eq!(busy.code, 5, "{}", busy.stderr);
    assert!(
        busy.stderr.contains(&format!(
            "task child of session {parent_id}, whose run is active"
        )),
        "{}",
        busy.stderr
    );
    interrupt(&parent);
    let out = parent.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    let stopped = session_list(&env);
    assert_eq!(stopped.len(), 3, "the parent and both children");
    for s in stopped {
        let id = s["id"].as_str().unwrap();
        assert_eq!(s["lastRunStatus"], "canceled", "{s}");
        env.run("kxen-agent", &["session", "verify", id]).expect(0);
    }
    // The parent stopped: the child is no longer held by its lease, but the parent's call has
    // its outcome (the child's cancellation), so nothing would take the child's result.
    let after = resume(&env, &child_id, &config, &["--allow-shell"]);
    after.expect(5);
    assert!(
        !after.stderr.contains("whose run is active") && after.stderr.contains("already recorded"),
        "{}",
        after.stderr
    );
}

/// A child waiting for approval keeps the parent's `task` call UNKNOWN: the exit hint names the
/// child's `run approve`, `run resolve` of the parent's operation is refused (exit 5, naming the
/// child), and once the parent's call has an outcome the child is never resumed on its own.
#[test]
fn a_child_awaiting_approval_is_approved_through_the_child_never_resolved_in_the_parent() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = delegator(&env, 8);
    let policy = env.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"allowShell": true, "mcpTools": {"exec": "ask"}}"#,
    )
    .unwrap();
    let config = script_config(
        &env,
        &[
            tasks(&[("t1", "count", "Count once")]),
            child(
                "count",
                call("k1", "exec", json!({"command": "echo ran >> counter.txt"})),
            ),
            child("count", answer("child done")),
            answer("parent done"),
        ],
    );
    let policy_flag = ["--policy", policy.to_str().unwrap()];
    let out = run_new(&env, &repo, "Count", &agent, &config, &policy_flag);
    out.expect(7);
    let parent = parent_of_all(&env);
    let (pid, prun) = (
        parent["id"].as_str().unwrap(),
        parent["lastRunId"].as_str().unwrap(),
    );
    let shown = run_show(&env, pid, prun);
    let c = &shown["children"][0];
    let (cid, crun) = (
        c["sessionId"].as_str().unwrap(),
        c["runId"].as_str().unwrap(),
    );
    let pop = c["opId"].as_str().unwrap();
    let cop = run_show(&env, cid, crun)["pendingApprovals"][0]["opId"]
        .as_str()
        .unwrap()
        .to_string();
    // The error names the waiting subagent, not an unknown side effect of the parent's call.
    assert!(
        out.stderr.contains(&format!(
            "task call {pop} (subagent session {cid}) waits for a subagent that needs input"
        )) && !out.stderr.contains("may have had its effect"),
        "{}",
        out.stderr
    );
    // The hint names the child's approve command, not a resolve of the parent's call.
    assert!(
        out.stderr
            .contains(&format!("kxen-agent run approve {cid} {crun} {cop}")),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr
            .contains(&format!("run resolve {pid} {prun} {pop}")),
        "{}",
        out.stderr
    );
    // Resolving the parent's call by hand is refused, naming the child's command.
    let refused = env.run(
        "kxen-agent",
        &[
            "run",
            "resolve",
            pid,
            prun,
            pop,
            "--output",
            "it did nothing",
        ],
    );
    refused.expect(5);
    assert!(
        refused
            .stderr
            .contains(&format!("run approve {cid} {crun} {cop}")),
        "{}",
        refused.stderr
    );
    assert_eq!(
        run_show(&env, pid, prun)["operations"][0]["phase"],
        "outcomeUnknown"
    );
    // Following the hint: approve the child's call, resume the parent: the exec runs once and
    // the parent takes the child's result.
    env.run("kxen-agent", &["run", "approve", cid, crun, &cop])
        .expect(0);
    let mut resume = vec!["--resume", pid, "--config", config.to_str().unwrap()];
    resume.extend(policy_flag);
    env.run("kxen-agent", &resume).expect(0);
    assert_eq!(
        std::fs::read_to_string(repo.join("counter.txt")).unwrap(),
        "ran\n"
    );
    let parent_shown = session_show(&env, pid);
    let result = first_tool_result(&parent_shown);
    assert_eq!(result["content"], "child done", "{result}");
    // The parent's call is settled: the child is not resumed on its own any more.
    let mut again = vec![
        "--resume",
        cid,
        "--task",
        "more",
        "--config",
        config.to_str().unwrap(),
    ];
    again.extend(policy_flag);
    let late = env.run("kxen-agent", &again);
    late.expect(5);
    assert!(late.stderr.contains("already recorded"), "{}", late.stderr);
    assert_eq!(
        std::fs::read_to_string(repo.join("counter.txt")).unwrap(),
        "ran\n"
    );
}

/// `maxTaskDepth` 2 (policy): a child may delegate once more, its own child may not; the depth
/// is in every lock, and a tree of three levels exports and verifies.
#[test]
fn a_policy_depth_of_two_lets_a_child_delegate_once_more() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = delegator(&env, 12);
    let policy = env.path().join("policy.json");
    std::fs::write(&policy, r#"{"allowShell": true, "maxTaskDepth": 2}"#).unwrap();
    let config = script_config(
        &env,
        &[
            tasks(&[("t1", "middle", "Delegate the leaf")]),
            child("middle", tasks(&[("t2", "leaf", "Say leaf-ok")])),
            child("leaf", answer("leaf-ok")),
            child("middle", answer("middle-ok")),
            answer("all done"),
        ],
    );
    let out = run_new(
        &env,
        &repo,
        "Delegate twice",
        &agent,
        &config,
        &["--policy", policy.to_str().unwrap()],
    );
    out.expect(0);
    assert_eq!(finished(&out.jsonl())["finalText"], "all done");
    let sessions = session_list(&env);
    assert_eq!(sessions.len(), 3, "{sessions:?}");
    let depth_of = |d: u64| {
        sessions
            .iter()
            .find(|s| s["taskParent"]["depth"] == d)
            .unwrap_or_else(|| panic!("no session at depth {d}: {sessions:?}"))["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (middle, leaf) = (depth_of(1), depth_of(2));
    assert_eq!(
        session_show(&env, &middle)["lock"]["capabilities"],
        json!(["exec", "read", "task"])
    );
    assert_eq!(
        session_show(&env, &leaf)["lock"]["capabilities"],
        json!(["exec", "read"])
    );
    assert_eq!(session_show(&env, &leaf)["parentId"], middle.as_str());
    let tool: Vec<Value> = session_show(&env, &middle)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect();
    assert_eq!(tool[0]["content"], "leaf-ok");
    for s in &sessions {
        env.run(
            "kxen-agent",
            &["session", "verify", s["id"].as_str().unwrap()],
        )
        .expect(0);
    }
    // The three levels travel in one bundle and import as one tree.
    let parent = parent_of_all(&env)["id"].as_str().unwrap().to_string();
    let bundle = env.path().join("deep.bundle.json");
    let exported = env.run(
        "kxen-agent",
        &[
            "session",
            "export",
            &parent,
            "--output",
            bundle.to_str().unwrap(),
        ],
    );
    exported.expect(0);
    assert_eq!(exported.jsonl()[0]["tasks"], json!([middle, leaf]));
    let target = env.path().join("target");
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            target.to_str().unwrap(),
            "session",
            "import",
            bundle.to_str().unwrap(),
            "--workspace",
            repo.to_str().unwrap(),
        ],
    )
    .expect(0);
}

#[test]
fn a_childs_unverified_claim_reaches_the_parent_as_unverified() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = env.path().join("verifying-delegator.yaml");
    std::fs::write(
        &agent,
        "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: vd}\nspec:\n  \
         objective: o\n  instructions: [i]\n  capabilities: {required: [read], optional: \
         [write, exec, task]}\n  execution: {maxTurns: 8, verifyBeforeCompletion: true}\n",
    )
    .unwrap();
    // The child writes a file, claims success, is reminded, and claims it again.
    let config = script_config(
        &env,
        &[
            tasks(&[("t1", "make", "Make notes.txt")]),
            child(
                "make",
                call(
                    "w1",
                    "write",
                    json!({"path": "notes.txt", "content": "n\n"}),
                ),
            ),
            child("make", answer("Made it.")),
            child("make", answer("Made it, tested.")),
            answer("The subagent made it."),
        ],
    );
    let out = start(&env, &repo, &agent, &config);
    out.expect(0);
    let child = session_list(&env)
        .into_iter()
        .find(|s| s["forkKind"] == "task")
        .unwrap();
    let shown = session_show(&env, child["id"].as_str().unwrap());
    assert_eq!(
        shown["runs"][0]["result"]["unverified"],
        json!({"changed": ["notes.txt"]})
    );
    let parent = parent_of_all(&env);
    let parent_shown = session_show(&env, parent["id"].as_str().unwrap());
    let result = first_tool_result(&parent_shown);
    assert!(result.get("isError").is_none(), "{result}");
    assert_eq!(
        result["content"],
        "Made it, tested.\n[kxen-agent runtime] The subagent's run is not verified: \
         `notes.txt` changed and no check ran after."
    );
}
