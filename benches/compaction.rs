//! Benchmark: what durable compaction saves over a long run (issue #20, item 5).
//!
//! A run of 200 tool calls (`KXEN_BENCH_CALLS` overrides), one `read` of a 1 KiB file per model
//! turn, through an `openai` provider against a fake chat-completions server on 127.0.0.1 that
//! reports a quarter of each request's bytes as its prompt tokens, answers compaction calls with
//! a short summary, and records every request body. The run is made twice: with
//! `context_window` (default 8,000 tokens; `KXEN_BENCH_WINDOW`) and without. Reported: the
//! compactions made, the largest request (bytes and the server's tokens) against the window,
//! and the total bytes sent with and without compaction, with their ratio.
//!
//! Run: `cargo bench --bench compaction`.

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::io::{BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};

use kxen::policy::PolicyFlags;
use kxen::run::create::NewRunRequest;
use kxen::state::StateDir;

mod support;

/// What the fake server saw: every body's length, and whether it was a compaction call.
type Seen = Arc<Mutex<Vec<(usize, bool)>>>;

fn main() {
    let calls = support::env_num("KXEN_BENCH_CALLS", 200);
    let window: u64 = std::env::var("KXEN_BENCH_WINDOW")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8000);
    let with = run(calls, Some(window));
    let without = run(calls, None);
    let total = |seen: &[(usize, bool)]| seen.iter().map(|(n, _)| *n as u64).sum::<u64>();
    let largest = |seen: &[(usize, bool)]| seen.iter().map(|(n, _)| *n).max().unwrap_or(0);
    let summaries = with.iter().filter(|(_, c)| *c).count();
    println!(
        "compaction: {calls} tool calls (read of a 1 KiB file) through an openai provider, loopback server"
    );
    println!(
        "  with context_window = {window}: {summaries} compactions, {} requests, largest {} bytes = {} tokens (server: bytes/4; window {window}, {})",
        with.len(),
        largest(&with),
        largest(&with) / 4,
        if (largest(&with) as u64 / 4) <= window {
            "within"
        } else {
            "OVER"
        }
    );
    println!(
        "  without: {} requests, largest {} bytes = {} tokens",
        without.len(),
        largest(&without),
        largest(&without) / 4
    );
    println!(
        "  total bytes sent: {} with compaction, {} without; ratio {:.3}",
        total(&with),
        total(&without),
        total(&with) as f64 / total(&without) as f64
    );
}

/// One run of `calls` reads; returns what the server saw.
fn run(calls: usize, window: Option<u64>) -> Vec<(usize, bool)> {
    let seen: Seen = Arc::default();
    let url = serve(calls, Arc::clone(&seen));
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    run_agent(tmp.path(), &url, calls, window);
    seen.lock().unwrap().clone()
}

fn run_agent(root: &Path, url: &str, calls: usize, window: Option<u64>) {
    let repo = support::repo_with(root, &"lorem ipsum dolor sit amet\n".repeat(38));
    let agent = support::agent(root, "read", calls + 8);
    let context = window.map_or(String::new(), |w| format!("context_window = {w}\n"));
    let config = support::openai_config(root, url, &context);
    let state = StateDir::at(root.join("state"));
    let request = NewRunRequest {
        workspace: repo,
        task: "read a.txt many times".into(),
        agent: Some(agent),
        policy: PolicyFlags::default(),
        config: Some(config),
        plan_dir: None,
    };
    support::run_to_end(&support::session(&state, &request));
}

/// The fake server on a thread: keep-alive HTTP/1.1 on 127.0.0.1:0. A compaction call (its
/// system prompt starts "You compact") gets a summary; turn n (from 0) a `read` while
/// n < `calls`, then a final answer. Prompt tokens: a quarter of the body's bytes.
fn serve(calls: usize, seen: Seen) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut n = 0usize;
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut writer = stream;
            while let Some(body) = support::read_request(&mut reader) {
                let summary = String::from_utf8_lossy(&body).contains("\"content\":\"You compact");
                seen.lock().unwrap().push((body.len(), summary));
                let tokens = body.len() / 4;
                let reply = if summary {
                    format!(
                        "{{\"choices\":[{{\"message\":{{\"role\":\"assistant\",\"content\":\"Read a.txt {n} times; it says lorem ipsum each time.\"}}}}],\"usage\":{{\"prompt_tokens\":{tokens},\"completion_tokens\":20}}}}"
                    )
                } else if n < calls {
                    n += 1;
                    format!(
                        "{{\"choices\":[{{\"message\":{{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{{\"id\":\"call_{n}\",\"type\":\"function\",\"function\":{{\"name\":\"read\",\"arguments\":\"{{\\\"path\\\":\\\"a.txt\\\"}}\"}}}}]}}}}],\"usage\":{{\"prompt_tokens\":{tokens},\"completion_tokens\":12}}}}"
                    )
                } else {
                    format!(
                        "{{\"choices\":[{{\"message\":{{\"role\":\"assistant\",\"content\":\"done\"}}}}],\"usage\":{{\"prompt_tokens\":{tokens},\"completion_tokens\":1}}}}"
                    )
                };
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
    url
}
