//! Streaming in real runs (the default for `openai`, no `stream` key in the configs here):
//! `modelTextDelta` events as the text arrives, live
//! text in `--format text` shown once, the durable record written once when the answer is
//! complete, a cut stream sent again, and a key split across two deltas redacted whole.

use std::time::Duration;

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::fake_model::{Reply, config, serve};
use crate::run_support::*;

const KEY: &str = "sk-stream-canary-5e6f7a8b9c";

fn data(v: Value) -> String {
    format!("data: {v}\n\n")
}

fn text_chunk(text: &str) -> String {
    data(json!({"choices": [{"index": 0, "delta": {"content": text}}]}))
}

/// A streamed chat-completions answer: `texts` as deltas, then a `read` call if `call`.
fn stream(texts: &[&str], call: bool, end: bool) -> Reply {
    let mut pieces: Vec<(Duration, String)> = texts
        .iter()
        .map(|t| (Duration::from_millis(5), text_chunk(t)))
        .collect();
    if call {
        pieces.push((
            Duration::ZERO,
            data(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
                "id": "call_1", "type": "function",
                "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}}]}}]}),
            ),
        ));
    }
    if end {
        pieces.push((
            Duration::ZERO,
            data(json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}})),
        ));
        pieces.push((Duration::ZERO, "data: [DONE]\n\n".into()));
    }
    Reply::Chunks {
        content_type: "text/event-stream",
        pieces,
        end,
    }
}

fn serve_run() -> (String, crate::fake_model::Seen) {
    // The key is split between two deltas: "sk-stream-can" + "ary-5e6f7a8b9c".
    serve(|n, _| match n {
        0 => stream(
            &[
                "Reading ",
                "a.txt (key sk-stream-can",
                "ary-5e6f7a8b9c) ",
                "now.",
            ],
            true,
            true,
        ),
        // The final answer's first stream is cut mid-way; the second is whole.
        1 => stream(&["It says ", "alp"], false, false),
        _ => stream(&["It says ", "alpha."], false, true),
    })
}

#[test]
fn streamed_text_arrives_as_deltas_and_is_recorded_once() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let (url, seen) = serve_run();
    let config = config(
        &env,
        &format!(
            "kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\n\
             api_key_env = \"KXEN_TEST_STREAM_KEY\""
        ),
    );
    let agent = fixer(&env);
    let out = env
        .cmd("kxen-agent")
        .env("KXEN_TEST_STREAM_KEY", KEY)
        .args([
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "Read a.txt",
        ])
        .args([
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let run = crate::env::Run::from(out);
    run.expect(0);
    let events = run.jsonl();
    let deltas: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "modelTextDelta")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert!(
        !deltas.iter().any(|d| d.contains("sk-stream")),
        "{deltas:?}"
    );
    // The first answer's deltas (how many depends on how the pieces came off the socket:
    // pieces read together are one delta) are all before its `modelText`.
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    let first_text = kinds.iter().position(|k| *k == "modelText").unwrap();
    let first_turn: String = events[..first_text]
        .iter()
        .filter(|e| e["type"] == "modelTextDelta")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(first_turn, "Reading a.txt (key [redacted]) now.");
    // The cut stream's text, then the retry, then the whole answer.
    let retry = kinds.iter().position(|k| *k == "modelRetry").unwrap();
    assert!(
        kinds[retry - 1] == "modelTextDelta" && kinds[retry + 1] == "modelTextDelta",
        "{kinds:?}"
    );
    let after: String = events[retry..]
        .iter()
        .filter(|e| e["type"] == "modelTextDelta")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(after, "It says alpha.");
    // Durable once, complete: one modelText per answer and the Session holds whole answers.
    assert_eq!(kinds.iter().filter(|k| **k == "modelText").count(), 2);
    let fin = finished(&events);
    assert_eq!(fin["finalText"], "It says alpha.");
    assert_eq!(fin["usage"]["inputTokens"], 18);
    let log = files_under(&env.state_dir())
        .into_iter()
        .find(|f| f.ends_with("messages.jsonl"))
        .map(|f| std::fs::read_to_string(f).unwrap())
        .unwrap();
    let contents: Vec<String> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        contents,
        ["Reading a.txt (key [redacted]) now.", "It says alpha."]
    );
    assert!(!log.contains("sk-stream"));
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert_eq!(seen.lock().unwrap()[0].json()["stream"], true);
}

#[test]
fn the_text_view_shows_streamed_text_live_and_once() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let (url, _seen) = serve_run();
    let config = config(
        &env,
        &format!("kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\""),
    );
    let run = run_new(
        &env,
        &repo,
        "Read a.txt",
        &fixer(&env),
        &config,
        &["--format", "text"],
    );
    run.expect(0);
    let out = &run.stdout;
    assert_eq!(out.matches("It says alpha.").count(), 1, "{out}");
    assert_eq!(out.matches("now.").count(), 1, "{out}");
    assert!(out.contains("model call failed, retry 1/5"), "{out}");
    // The streamed line ends before the tool line.
    assert!(out.contains("now.\n  [read]"), "{out}");
}

/// A Session whose first run did not stream (`stream = false`, as every config was before
/// streaming became the default) resumes for a new task with a config that does not mention
/// `stream`: no drift, the second request repeats the first one's messages and asks for a
/// stream, and the Session records both answers in the same shape, usage and cost included.
#[test]
fn a_session_made_without_streaming_resumes_streaming_with_no_drift() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let (url, seen) = serve(|_, request| {
        if request.json()["stream"] == true {
            stream(&["Second ", "answer."], false, true)
        } else {
            Reply::json(
                &json!({"choices": [{"index": 0, "message": {"role": "assistant",
                "content": "First answer."}}],
                "usage": {"prompt_tokens": 9, "completion_tokens": 2}}),
            )
        }
    });
    let body = format!(
        "kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\n\
         price = {{ input_per_mtok = 3.0, output_per_mtok = 15.0 }}"
    );
    let old = config(&env, &format!("{body}\nstream = false"));
    let first = run_new(&env, &repo, "First task", &fixer(&env), &old, &[]);
    first.expect(0);
    let events = first.jsonl();
    let session = events
        .iter()
        .find(|e| e["type"] == "sessionCreated")
        .map(|e| e["sessionId"].as_str().unwrap().to_string())
        .unwrap();
    let new = config(&env, &body);
    let mut cmd = env.cmd("kxen-agent");
    cmd.args(["--resume", &session, "--task", "Second task", "--config"])
        .arg(&new);
    let second = crate::env::Run::from(cmd.output().unwrap());
    second.expect(0);
    assert_eq!(finished(&second.jsonl())["finalText"], "Second answer.");

    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    let (a, b) = (seen[0].json(), seen[1].json());
    assert_eq!(a["stream"], false);
    assert!(a.get("stream_options").is_none(), "{a}");
    assert_eq!(b["stream"], true);
    assert_eq!(b["stream_options"], json!({"include_usage": true}));
    let (a, b) = (
        a["messages"].as_array().unwrap(),
        b["messages"].as_array().unwrap(),
    );
    assert_eq!(
        &b[..a.len()],
        &a[..],
        "the second request repeats the first's messages"
    );

    // Both answers are recorded alike: same keys, usage, and the cost of that usage.
    let log = files_under(&env.state_dir())
        .into_iter()
        .find(|f| f.ends_with("messages.jsonl"))
        .map(|f| std::fs::read_to_string(f).unwrap())
        .unwrap();
    let answers: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(answers.len(), 2);
    let keys = |m: &Value| m.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&answers[0]), keys(&answers[1]));
    for (answer, text) in answers.iter().zip(["First answer.", "Second answer."]) {
        assert_eq!(answer["content"], text);
        assert_eq!(
            answer["usage"],
            json!({"inputTokens": 9, "outputTokens": 2})
        );
        assert!(answer["costUsd"].as_f64().unwrap() > 0.0, "{answer}");
    }
}

/// A server that answers the streaming request with a JSON body (read outside the event loop)
/// or an error body, then trickles one byte per half second, never finishing: the run's
/// wall-clock budget still ends the call, although no single read is silent for `timeout_ms`.
#[test]
fn a_trickled_json_or_error_body_cannot_outlive_the_wall_clock_budget() {
    use std::io::{Read, Write};
    for head in [
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n",
    ] {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                std::thread::spawn(move || {
                    let mut seen = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                    }
                    if conn.write_all(head.as_bytes()).is_err() {
                        return;
                    }
                    while conn.write_all(b"1\r\n \r\n").is_ok() {
                        std::thread::sleep(Duration::from_millis(500));
                    }
                });
            }
        });
        let env = TestEnv::new();
        let repo = env.git_repo("repo", &[("README", "x\n")]);
        let agent = env.path().join("timed.yaml");
        std::fs::write(
            &agent,
            "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: timed}\nspec:\n  \
             objective: o\n  instructions: [i]\n  capabilities: {required: [read], optional: []}\n  \
             execution: {maxTurns: 4, maxWallClockMs: 2000}\n",
        )
        .unwrap();
        let cfg = config(
            &env,
            &format!(
                "kind = \"openai\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"m\"\n\
                 timeout_ms = 3000\nmax_transport_retries = 0"
            ),
        );
        let mut cmd = env.cmd("kxen-agent");
        cmd.args(["run", "--workspace", repo.to_str().unwrap(), "--task", "t"])
            .args(["--agent", agent.to_str().unwrap()])
            .args(["--config", cfg.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut child = cmd.spawn().unwrap();
        // Generous: the budget is 2 s; before the fix the run never ended by itself.
        let until = std::time::Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > until {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{head:?}: the run outlived its 2 s wall-clock budget by 18 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(!status.success(), "{head:?}: the run cannot have completed");
    }
}
