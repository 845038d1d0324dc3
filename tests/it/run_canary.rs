//! Provider credentials never reach the state dir, the events or a tool subprocess: a run
//! against a loopback OpenAI-compatible server with a canary key.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::run_support::*;

const CANARY: &str = "sk-canary-7f3a9c1e5b";

/// What the loopback server saw of each request: its Authorization header and its JSON body.
pub type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// A chat-completions server on 127.0.0.1 answering with `bodies` in order; records the
/// Authorization header and the body of every request.
pub fn serve(bodies: Vec<Value>) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen_by_server = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut bodies = bodies.into_iter();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut writer = stream;
            // Several requests may share one keep-alive connection.
            loop {
                let mut length = 0usize;
                let mut auth = String::new();
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    break;
                }
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                        break;
                    }
                    let lower = header.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if lower.starts_with("authorization:") {
                        auth = header.trim().to_string();
                    }
                }
                let mut body = vec![0u8; length];
                reader.read_exact(&mut body).unwrap();
                let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                seen_by_server.lock().unwrap().push((auth, body));
                let reply = bodies
                    .next()
                    .unwrap_or(json!({"error": "no more turns"}))
                    .to_string();
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
                    reply.len()
                );
                if writer.write_all(response.as_bytes()).is_err() {
                    break;
                }
            }
        }
    });
    (url, seen)
}

pub fn completion(message: Value) -> Value {
    json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": message,
           "finish_reason": "stop"}], "usage": {"prompt_tokens": 11, "completion_tokens": 3}})
}

#[test]
fn the_provider_key_never_reaches_state_events_or_tools() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let (url, seen) = serve(vec![
        completion(
            json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_env", "type": "function",
            "function": {"name": "exec", "arguments": "{\"command\": \"env; echo PROBE-DONE\"}"}}]}),
        ),
        completion(json!({"role": "assistant", "content": "The environment is listed."})),
    ]);
    let config = env.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.local]\nkind = \"openai\"\nbase_url = \"{url}\"\nmodel = \"test-model\"\n\
             api_key_env = \"KXEN_TEST_CANARY_KEY\"\n[roles]\nexecution = \"local\"\n"
        ),
    )
    .unwrap();
    let agent = fixer(&env);
    let out = env
        .cmd("kxen-agent")
        .env("KXEN_TEST_CANARY_KEY", CANARY)
        .args([
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "List the environment",
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--allow-shell",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    // The key did reach the model client (so the test is not vacuous)…
    let auth: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(a, _)| a.clone())
        .collect();
    assert_eq!(auth.len(), 2);
    assert!(auth.iter().all(|a| a.contains(CANARY)), "{auth:?}");
    // …and the tool really ran and printed its environment…
    assert!(stdout.contains("PROBE-DONE"), "{stdout}");
    assert!(stdout.contains("PATH="), "{stdout}");
    // …but the key is nowhere else: not in events, not on stderr, not in any state file.
    assert!(!stdout.contains(CANARY) && !stderr.contains(CANARY));
    let files = files_under(&env.state_dir());
    assert!(files.len() >= 5, "{files:?}");
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(CANARY),
            "the provider key leaked into {}",
            file.display()
        );
    }
    // The run records the provider and model, and the usage it reported.
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let fin = finished(&events);
    assert_eq!(fin["usage"], json!({"inputTokens": 22, "outputTokens": 6}));
    let show = env.run(
        "kxen-agent",
        &[
            "run",
            "show",
            fin["sessionId"].as_str().unwrap(),
            fin["runId"].as_str().unwrap(),
        ],
    );
    let attempt = &show.jsonl()[0]["run"]["attempts"][0];
    assert_eq!(attempt["provider"]["model"], "test-model");
}
