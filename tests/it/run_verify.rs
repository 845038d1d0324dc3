//! Verification before completion (docs/verification.md) and `write`'s read-before-replace rule,
//! end to end: the reminder is sent once and only when due, survives a crash right after it
//! exactly once and byte for byte, and the run's read set survives a resume.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::fake_model::{completion, config as model_config, serve, tool_call_message};
use crate::run_support::*;

const TASK: &str = "Fix greeting.txt; `sh check.sh` must pass.";

fn workspace(env: &TestEnv) -> PathBuf {
    env.git_repo(
        "repo",
        &[
            (
                "check.sh",
                "test \"$(cat greeting.txt)\" = 'hello, world' && echo PASS || { echo FAIL; exit 1; }\n",
            ),
            ("greeting.txt", "hello wrld\n"),
        ],
    )
}

/// The usual fixer with `verifyBeforeCompletion` set as given (absent: `None`).
fn verifier(env: &TestEnv, verify: Option<bool>) -> PathBuf {
    let path = env.path().join("verifier.yaml");
    let line = verify.map_or(String::new(), |v| {
        format!("\n    verifyBeforeCompletion: {v}")
    });
    let yaml = format!(
        "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata:\n  name: verifier\nspec:\n  \
         objective: Complete the supplied repository task with evidence.\n  instructions:\n    \
         - Inspect the repository first.\n  successCriteria: []\n  capabilities:\n    \
         required: [read, glob, grep]\n    optional: [edit, write, exec]\n  execution:\n    \
         maxTurns: 16{line}\n  output: {{format: text, requiredFields: []}}\n"
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

fn edit_greeting(id: &str) -> Value {
    call(
        id,
        "edit",
        json!({"path": "greeting.txt", "oldString": "hello wrld", "newString": "hello, world"}),
    )
}

fn only_session(env: &TestEnv) -> String {
    let list = env.run("kxen-agent", &["session", "list"]).jsonl();
    assert_eq!(list.len(), 1, "{list:?}");
    list[0]["id"].as_str().unwrap().to_string()
}

/// The Session's messages (`session show`).
fn messages(env: &TestEnv, session: &str) -> Vec<Value> {
    let show = env.run("kxen-agent", &["session", "show", session]);
    show.expect(0);
    show.jsonl()[0]["messages"].as_array().unwrap().clone()
}

/// The user messages of the Session after the task: the reminders.
fn reminders(env: &TestEnv, session: &str) -> Vec<String> {
    messages(env, session)
        .iter()
        .filter(|m| m["role"] == "user")
        .skip(1)
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

fn run(env: &TestEnv, repo: &Path, agent: &Path, turns: &[Value]) -> (Value, String) {
    let config = script_config(env, turns);
    let run = run_new(env, repo, TASK, agent, &config, &["--allow-shell"]);
    run.expect(0);
    let fin = finished(&run.jsonl()).clone();
    let session = fin["sessionId"].as_str().unwrap().to_string();
    (fin, session)
}

#[test]
fn a_change_without_a_check_is_reminded_once_naming_the_check() {
    let env = TestEnv::new();
    let repo = workspace(&env);
    let agent = verifier(&env, Some(true));
    let (fin, session) = run(
        &env,
        &repo,
        &agent,
        &[
            call("c1", "read", json!({"path": "greeting.txt"})),
            edit_greeting("c2"),
            answer("Fixed; the check passes."),
            call("c3", "exec", json!({"command": "sh check.sh"})),
            answer("Fixed; `sh check.sh` prints PASS."),
        ],
    );
    assert_eq!(fin["status"], "completed");
    assert_eq!(fin["finalText"], "Fixed; `sh check.sh` prints PASS.");
    // The reminded answer was a turn like any other.
    assert_eq!(fin["turns"], 5);
    assert_eq!(
        reminders(&env, &session),
        [
            "Not done yet: call exec with {\"command\":\"sh check.sh\"} now. You changed \
             `greeting.txt` and have not run a check since. If the check fails, fix the cause \
             and run it again. If you cannot run a check, say so plainly in your final answer; \
             do not claim what you did not see. [kxen-agent runtime]"
        ]
    );
    // The reminded answer is in the conversation, before the reminder.
    let all = messages(&env, &session);
    let at = all
        .iter()
        .position(|m| {
            m["role"] == "user"
                && m["content"]
                    .as_str()
                    .unwrap()
                    .ends_with("[kxen-agent runtime]")
        })
        .unwrap();
    assert_eq!(all[at - 1]["role"], "assistant");
    assert_eq!(all[at - 1]["content"], "Fixed; the check passes.");
    let verify = env.run("kxen-agent", &["session", "verify", &session]);
    assert_eq!(verify.code, 0, "{}", verify.stderr);
}

#[test]
fn the_reminder_is_sent_once_and_only_when_due() {
    // A change, then a check (even a failing one): nothing to remind.
    let env = TestEnv::new();
    let repo = workspace(&env);
    let agent = verifier(&env, Some(true));
    let (fin, session) = run(
        &env,
        &repo,
        &agent,
        &[
            call("c1", "read", json!({"path": "greeting.txt"})),
            call(
                "c2",
                "write",
                json!({"path": "greeting.txt", "content": "hello world\n"}),
            ),
            call("c3", "exec", json!({"command": "sh check.sh"})),
            answer("The check still fails."),
        ],
    );
    assert_eq!(
        (fin["status"].as_str(), fin["turns"].as_u64()),
        (Some("completed"), Some(4))
    );
    assert!(reminders(&env, &session).is_empty());

    // No change at all: nothing to remind.
    let env = TestEnv::new();
    let repo = workspace(&env);
    let agent = verifier(&env, Some(true));
    let (fin, session) = run(
        &env,
        &repo,
        &agent,
        &[
            call("c1", "read", json!({"path": "greeting.txt"})),
            answer("It says hello wrld."),
        ],
    );
    assert_eq!(fin["turns"], 2);
    assert!(reminders(&env, &session).is_empty());

    // Reminded once; a second answer without a check ends the run as it is.
    let env = TestEnv::new();
    let repo = workspace(&env);
    let agent = verifier(&env, Some(true));
    let (fin, session) = run(
        &env,
        &repo,
        &agent,
        &[
            call("c1", "read", json!({"path": "greeting.txt"})),
            edit_greeting("c2"),
            answer("Done."),
            answer("I cannot run the check."),
        ],
    );
    assert_eq!(fin["status"], "completed");
    assert_eq!(fin["finalText"], "I cannot run the check.");
    assert_eq!(fin["turns"], 4);
    assert_eq!(reminders(&env, &session).len(), 1);

    // Without `verifyBeforeCompletion` the first answer ends the run.
    for flag in [None, Some(false)] {
        let env = TestEnv::new();
        let repo = workspace(&env);
        let agent = verifier(&env, flag);
        let (fin, session) = run(
            &env,
            &repo,
            &agent,
            &[
                call("c1", "read", json!({"path": "greeting.txt"})),
                edit_greeting("c2"),
                answer("Done."),
            ],
        );
        assert_eq!(
            (fin["finalText"].as_str(), fin["turns"].as_u64()),
            (Some("Done."), Some(3))
        );
        assert!(reminders(&env, &session).is_empty());
    }
}

/// The model's answer to a request holding `turns` assistant messages: read, edit, a claimed
/// success (reminded), the check, the answer.
fn model_reply(turns: usize) -> crate::fake_model::Reply {
    let message = match turns {
        0 => tool_call_message("call_0", "read", &json!({"path": "greeting.txt"})),
        1 => tool_call_message(
            "call_1",
            "edit",
            &json!({"path": "greeting.txt", "oldString": "hello wrld", "newString": "hello, world"}),
        ),
        2 => json!({"role": "assistant", "content": "Done."}),
        3 => tool_call_message("call_3", "exec", &json!({"command": "sh check.sh"})),
        _ => json!({"role": "assistant", "content": "The check passes."}),
    };
    crate::fake_model::Reply::json(&completion(message))
}

fn assistant_turns(request: &crate::fake_model::Request) -> usize {
    request.json()["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
        .unwrap_or(0)
}

/// The request bodies of one run against a recording model server; with `crash`, the run dies
/// right after the reminder is durable and is continued with `--resume`.
fn bodies(crash: bool) -> Vec<Vec<u8>> {
    let env = TestEnv::new();
    let repo = workspace(&env);
    let agent = verifier(&env, Some(true));
    let (url, seen) = serve(|_, r| model_reply(assistant_turns(r)));
    let config = model_config(
        &env,
        &format!("kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\nseed = 1"),
    );
    let mut cmd = env.cmd("kxen-agent");
    cmd.args(["run", "--workspace", repo.to_str().unwrap(), "--task", TASK])
        .args([
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ])
        .arg("--allow-shell");
    if crash {
        cmd.env("KXEN_FAILPOINT", "verify.after-reminder");
    }
    let out = cmd.output().unwrap();
    let session = only_session(&env);
    if crash {
        assert_ne!(out.status.code(), Some(0), "the failpoint was not reached");
        let verify = env.run("kxen-agent", &["session", "verify", &session]);
        assert_eq!(verify.code, 0, "{}", verify.stderr);
        let config = config.to_str().unwrap();
        let resumed = env.run(
            "kxen-agent",
            &["--resume", &session, "--config", config, "--allow-shell"],
        );
        resumed.expect(0);
    } else {
        assert_eq!(out.status.code(), Some(0));
    }
    assert_eq!(reminders(&env, &session).len(), 1);
    let show = env.run("kxen-agent", &["session", "show", &session]);
    let shown = &show.jsonl()[0];
    let last = shown["runs"].as_array().and_then(|r| r.last()).cloned();
    if let Some(run) = last {
        assert_eq!(run["status"], "completed", "{run}");
    }
    assert_eq!(
        std::fs::read_to_string(repo.join("greeting.txt")).unwrap(),
        "hello, world\n"
    );
    let bodies: Vec<Vec<u8>> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.body.clone())
        .collect();
    bodies
}

#[test]
fn the_reminder_survives_a_crash_exactly_once_and_keeps_every_request_byte_stable() {
    let a = bodies(false);
    assert_eq!(a.len(), 5);
    // Each request is the previous one plus new messages: the reminder only appends.
    for (n, pair) in a.windows(2).enumerate() {
        let before = String::from_utf8(pair[0].clone()).unwrap();
        let after = String::from_utf8(pair[1].clone()).unwrap();
        let open = before
            .strip_suffix("]}")
            .expect("the messages close the body");
        assert!(
            after.starts_with(open) && after[open.len()..].starts_with(",{"),
            "request {} is not request {n} plus new messages:\n{before}\n{after}",
            n + 1
        );
    }
    let reminded = String::from_utf8(a[3].clone()).unwrap();
    assert_eq!(reminded.matches("Not done yet:").count(), 1, "{reminded}");
    // Killed right after the reminder and resumed: the same requests, byte for byte, and the
    // reminder in them once.
    let b = bodies(true);
    assert_eq!(b.len(), a.len());
    for (n, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            x == y,
            "request {n} differs after the crash and resume:\n{}\n{}",
            String::from_utf8_lossy(x),
            String::from_utf8_lossy(y)
        );
    }
}

#[test]
fn write_replaces_only_a_file_the_run_has_read_and_the_read_survives_a_resume() {
    let env = TestEnv::new();
    let repo = workspace(&env);
    let agent = fixer(&env);
    let write = |id: &str, path: &str, content: &str| {
        call(id, "write", json!({"path": path, "content": content}))
    };
    let config = script_config(
        &env,
        &[
            write("c1", "check.sh", "guess\n"),
            write("c2", "new.txt", "new\n"),
            call("c3", "read", json!({"path": "greeting.txt"})),
            write("c4", "greeting.txt", "hello, world\n"),
            // The refusal showed the file: a second write replaces it.
            write("c5", "check.sh", "exit 0\n"),
            answer("Done."),
        ],
    );
    // The run dies right after the `read` is settled (the third settled call); the resumed run
    // knows the file was read, from the journal.
    let crashed = env
        .cmd("kxen-agent")
        .args(["run", "--workspace", repo.to_str().unwrap(), "--task", TASK])
        .args(["--agent", agent.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap()])
        .env("KXEN_FAILPOINT", "tool.after-settled")
        .env("KXEN_FAILPOINT_SKIP", "2")
        .output()
        .unwrap();
    assert_ne!(
        crashed.status.code(),
        Some(0),
        "the failpoint was not reached"
    );
    let session = only_session(&env);
    let config_s = config.to_str().unwrap();
    let resumed = env.run("kxen-agent", &["--resume", &session, "--config", config_s]);
    resumed.expect(0);
    let read = |p: &str| std::fs::read_to_string(repo.join(p)).unwrap();
    assert_eq!(read("greeting.txt"), "hello, world\n");
    assert_eq!(read("new.txt"), "new\n");
    assert_eq!(read("check.sh"), "exit 0\n");
    let results: Vec<(String, bool)> = messages(&env, &session)
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let text = m["content"].as_str().unwrap().to_string();
            (text, m["isError"].as_bool().unwrap_or(false))
        })
        .collect();
    assert_eq!(
        results[0],
        (
            "`check.sh` exists and this run had not read it, so it was not replaced. It holds \
             this now (as read shows it); change it with edit, or call write again to replace it \
             whole:\n     1\ttest \"$(cat greeting.txt)\" = 'hello, world' && echo PASS || { echo \
             FAIL; exit 1; }\n"
                .to_string(),
            true
        )
    );
    let starts = |i: usize, prefix: &str| !results[i].1 && results[i].0.starts_with(prefix);
    assert!(starts(1, "created `new.txt`"), "{results:?}");
    assert!(starts(2, "     1\thello wrld"), "{results:?}");
    assert!(starts(3, "overwrote `greeting.txt`"), "{results:?}");
    assert!(starts(4, "overwrote `check.sh`"), "{results:?}");
}

/// The `unverified` of a run's result as `run show` prints it (`None`: absent).
fn recorded_unverified(env: &TestEnv, session: &str, run: &str) -> Option<Value> {
    let show = env.run("kxen-agent", &["run", "show", session, run]);
    show.expect(0);
    show.jsonl()[0]["run"]["result"].get("unverified").cloned()
}

#[test]
fn an_answer_after_the_reminder_with_no_check_ends_unverified_across_a_crash() {
    // A change, the reminder, and a second claim with no check: the run ends `completed` (the
    // model did answer) and its ending says which change no check saw.
    let turns = [
        call("c1", "read", json!({"path": "greeting.txt"})),
        edit_greeting("c2"),
        answer("Done."),
        answer("Fixed and tested."),
    ];
    let env = TestEnv::new();
    let repo = workspace(&env);
    let agent = verifier(&env, Some(true));
    let (fin, session) = run(&env, &repo, &agent, &turns);
    assert_eq!(fin["status"], "completed");
    assert_eq!(fin["finalText"], "Fixed and tested.");
    assert_eq!(fin["unverified"], json!({"changed": ["greeting.txt"]}));
    let run_id = fin["runId"].as_str().unwrap();
    assert_eq!(
        recorded_unverified(&env, &session, run_id),
        Some(json!({"changed": ["greeting.txt"]}))
    );
    let text = env.run(
        "kxen-agent",
        &["--format", "text", "run", "show", &session, run_id],
    );
    assert!(
        text.stdout
            .contains("not verified: `greeting.txt` changed and no check ran after"),
        "{}",
        text.stdout
    );
    let verify = env.run("kxen-agent", &["session", "verify", &session]);
    assert_eq!(verify.code, 0, "{}", verify.stderr);

    // Killed right after the reminder is durable and resumed: the same ending.
    let env = TestEnv::new();
    let repo = workspace(&env);
    let agent = verifier(&env, Some(true));
    let config = script_config(&env, &turns);
    let mut cmd = env.cmd("kxen-agent");
    cmd.args(["run", "--workspace", repo.to_str().unwrap(), "--task", TASK])
        .args(["--agent", agent.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap(), "--allow-shell"])
        .env("KXEN_FAILPOINT", "verify.after-reminder");
    let out = cmd.output().unwrap();
    assert_ne!(out.status.code(), Some(0), "the failpoint was not reached");
    let session = only_session(&env);
    let resumed = resume(&env, &session, &config, &["--allow-shell"]);
    resumed.expect(0);
    let fin = finished(&resumed.jsonl()).clone();
    assert_eq!(fin["finalText"], "Fixed and tested.");
    assert_eq!(fin["unverified"], json!({"changed": ["greeting.txt"]}));
    assert_eq!(reminders(&env, &session).len(), 1);

    // A change that failed, then two claims: the failure is what no check saw.
    let env = TestEnv::new();
    let repo = workspace(&env);
    let agent = verifier(&env, Some(true));
    let (fin, _) = run(
        &env,
        &repo,
        &agent,
        &[
            call(
                "c1",
                "edit",
                json!({"path": "greeting.txt", "oldString": "absent", "newString": "x"}),
            ),
            answer("Done."),
            answer("Done, really."),
        ],
    );
    assert_eq!(fin["unverified"], json!({"failed": ["greeting.txt"]}));

    // A check after the reminder, or no `verifyBeforeCompletion`: nothing is unverified.
    for (flag, turns) in [
        (
            Some(true),
            vec![
                edit_greeting("c1"),
                answer("Done."),
                call("c2", "exec", json!({"command": "sh check.sh"})),
                answer("PASS."),
            ],
        ),
        (None, vec![edit_greeting("c1"), answer("Done.")]),
    ] {
        let env = TestEnv::new();
        let repo = workspace(&env);
        let agent = verifier(&env, flag);
        let (fin, session) = run(&env, &repo, &agent, &turns);
        assert!(fin.get("unverified").is_none(), "{fin}");
        let run_id = fin["runId"].as_str().unwrap();
        assert_eq!(recorded_unverified(&env, &session, run_id), None);
    }
}
