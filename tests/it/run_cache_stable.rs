//! Cache-stable requests (issue #20 item 4), byte for byte, for both network providers:
//! - within a run, the request of turn N+1 is the request of turn N with the new messages
//!   appended (for `anthropic`, once the moving `cache_control` breakpoint is taken out);
//! - a run killed (SIGKILL) while its model call is in flight and continued with `--resume`
//!   sends exactly the bytes the uninterrupted run sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::fake_model::{Reply, completion, config, serve, tool_call_message};
use crate::run_support::*;

/// Tool calls the scripted model makes before it answers.
const CALLS: usize = 6;
/// The turn whose model call is in flight when the run is killed.
const KILLED_AT: usize = 3;

#[derive(Clone, Copy)]
enum Kind {
    OpenAi,
    /// `openai` with `tool_calls_in_text`: the model writes each call as a fence in its text.
    OpenAiTextCalls,
    Anthropic,
}

/// The scripted model's answer to a request that already holds `turns` assistant messages:
/// a `read` (alternating files, some calls two at once), then a final answer.
fn reply(kind: Kind, turns: usize) -> Reply {
    let path = if turns.is_multiple_of(2) {
        "a.txt"
    } else {
        "b.txt"
    };
    match kind {
        Kind::OpenAi if turns < CALLS => Reply::json(&completion(tool_call_message(
            &format!("call_{turns}"),
            "read",
            &json!({"path": path}),
        ))),
        Kind::OpenAiTextCalls if turns < CALLS => Reply::json(&completion(json!({
            "role": "assistant",
            "content": format!("Turn {turns}.\n```json\n{}\n```",
                json!({"name": "read", "arguments": {"path": path}})),
        }))),
        Kind::OpenAi | Kind::OpenAiTextCalls => Reply::json(&completion(
            json!({"role": "assistant", "content": "Read them."}),
        )),
        Kind::Anthropic if turns < CALLS => {
            let mut content = vec![
                json!({"type": "text", "text": format!("Turn {turns}.")}),
                json!({"type": "tool_use", "id": format!("toolu_{turns}"), "name": "read",
                       "input": {"path": path}}),
            ];
            if turns == 2 {
                content.push(json!({"type": "tool_use", "id": "toolu_2b", "name": "glob",
                                    "input": {"pattern": "*.txt"}}));
            }
            Reply::json(
                &json!({"content": content, "usage": {"input_tokens": 5, "output_tokens": 5}}),
            )
        }
        Kind::Anthropic => {
            Reply::json(&json!({"content": [{"type": "text", "text": "Read them."}]}))
        }
    }
}

fn assistant_turns(request: &crate::fake_model::Request) -> usize {
    request.json()["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "assistant").count())
        .unwrap_or(0)
}

fn provider_config(env: &TestEnv, kind: Kind, url: &str) -> std::path::PathBuf {
    match kind {
        Kind::OpenAi => config(
            env,
            &format!("kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\nseed = 1"),
        ),
        Kind::OpenAiTextCalls => config(
            env,
            &format!(
                "kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\nseed = 1\n\
                 tool_calls_in_text = true"
            ),
        ),
        Kind::Anthropic => config(
            env,
            &format!("kind = \"anthropic\"\nbase_url = \"{url}\"\nmodel = \"claude-test\""),
        ),
    }
}

fn repo(env: &TestEnv) -> std::path::PathBuf {
    env.git_repo(
        "repo",
        &[
            ("a.txt", "alpha\n"),
            ("b.txt", "beta\n"),
            ("AGENTS.md", "Read before you write.\n"),
        ],
    )
}

/// The request bodies of an uninterrupted run.
fn uninterrupted(kind: Kind) -> Vec<Vec<u8>> {
    let env = TestEnv::new();
    let repo = repo(&env);
    let (url, seen) = serve(move |_, r| reply(kind, assistant_turns(r)));
    let config = provider_config(&env, kind, &url);
    let run = run_new(&env, &repo, "Read the files", &fixer(&env), &config, &[]);
    run.expect(0);
    assert_eq!(finished(&run.jsonl())["turns"], CALLS as u64 + 1);
    let bodies: Vec<Vec<u8>> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.body.clone())
        .collect();
    bodies
}

/// The request bodies of the same run, killed while the model call of turn [`KILLED_AT`] is
/// in flight and resumed.
fn killed_and_resumed(kind: Kind) -> Vec<Vec<u8>> {
    let env = TestEnv::new();
    let repo = repo(&env);
    let stalled = Arc::new(AtomicBool::new(false));
    let stall = Arc::clone(&stalled);
    let (url, seen) = serve(move |_, r| {
        let turns = assistant_turns(r);
        if turns == KILLED_AT && !stall.swap(true, Ordering::SeqCst) {
            // Answered never: the run is killed while it waits.
            return Reply::Chunks {
                content_type: "application/json",
                pieces: vec![(Duration::from_secs(30), String::new())],
                end: false,
            };
        }
        reply(kind, turns)
    });
    let config = provider_config(&env, kind, &url);
    let mut child = spawn_new(&env, &repo, "Read the files", &fixer(&env), &config, &[]);
    while !stalled.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // The rules change before the resume: it replays the text the run recorded.
    std::fs::write(repo.join("AGENTS.md"), "Changed rules.\n").unwrap();
    let list = env.run("kxen-agent", &["session", "list"]);
    let session = list.jsonl()[0]["id"].as_str().unwrap().to_string();
    let config_s = config.to_str().unwrap();
    let run = env.run("kxen-agent", &["--resume", &session, "--config", config_s]);
    run.expect(0);
    let bodies: Vec<Vec<u8>> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.body.clone())
        .collect();
    assert_eq!(bodies.len(), CALLS + 2, "the killed call was sent again");
    bodies
}

/// `body` without its cache breakpoints (they move to the last message each turn).
fn without_breakpoints(body: &[u8]) -> String {
    String::from_utf8(body.to_vec())
        .unwrap()
        .replace(",\"cache_control\":{\"type\":\"ephemeral\"}", "")
}

fn check(kind: Kind) {
    let a = uninterrupted(kind);
    assert_eq!(a.len(), CALLS + 1);
    assert!(String::from_utf8_lossy(&a[0]).contains("Read before you write."));
    for (n, pair) in a.windows(2).enumerate() {
        let (before, after) = (without_breakpoints(&pair[0]), without_breakpoints(&pair[1]));
        let open = before
            .strip_suffix("]}")
            .expect("the messages close the body");
        assert!(
            after.starts_with(open) && after[open.len()..].starts_with(",{"),
            "request {} is not request {n} plus new messages:\n{before}\n{after}",
            n + 1
        );
        // Sanity: the bodies are what the provider's API expects.
        let v: Value = serde_json::from_str(&after).unwrap();
        assert!(v["messages"].as_array().unwrap().len() > 1);
    }
    let b = killed_and_resumed(kind);
    // The killed call and its re-sent twin, then the rest: all byte-identical to the
    // uninterrupted run's.
    assert_eq!(
        b[KILLED_AT],
        b[KILLED_AT + 1],
        "the resumed request differs from the killed one"
    );
    let mut resumed = b.clone();
    resumed.remove(KILLED_AT);
    for (n, (x, y)) in a.iter().zip(&resumed).enumerate() {
        assert!(
            x == y,
            "request {n} differs after kill and resume:\n{}\n{}",
            String::from_utf8_lossy(x),
            String::from_utf8_lossy(y)
        );
    }
}

#[test]
fn openai_requests_only_grow_and_survive_kill_and_resume_byte_for_byte() {
    check(Kind::OpenAi);
}

/// Calls read out of the model's text are recorded as calls: the next request sends them as
/// `tool_calls`, and a resume replays them byte for byte.
#[test]
fn openai_text_calls_only_grow_and_survive_kill_and_resume_byte_for_byte() {
    check(Kind::OpenAiTextCalls);
}

#[test]
fn anthropic_requests_only_grow_and_survive_kill_and_resume_byte_for_byte() {
    check(Kind::Anthropic);
}
