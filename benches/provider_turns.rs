//! Benchmark: kxen-agent's own CPU per turn through a network provider, as the history grows.
//!
//! A run of N tool calls (default 1,000; `KXEN_BENCH_CALLS` overrides), one `read` per model
//! turn, against a fake OpenAI chat-completions server on 127.0.0.1. The server is this
//! binary run again as a separate process, so the CPU it spends parsing requests is not ours;
//! the run executes in this process and its user + sys CPU (`getrusage(RUSAGE_SELF)`, every
//! thread, the model-call threads included) is read at each `toolFinished` event. Reported: CPU
//! per turn over the first 100 and the last 100 turns, and their ratio (target ≤ 2×: before
//! request bodies kept their bytes, each turn rebuilt the whole history as a
//! `serde_json::Value` tree, and the last turns cost about nine times the first).
//!
//! Then the same loop with an answer of 200 text pieces beside each call, once with
//! `stream = false` and once with `stream = true` (`KXEN_BENCH_STREAM_CALLS` turns each,
//! default 300): kxen-agent's own CPU per call in each mode and their ratio, the whole runtime
//! counted (request, response, `modelTextDelta` events, journal and messages), against the
//! ≤ 1.1× target for streaming's per-call overhead. `provider_stream` measures the provider's
//! HTTP client alone.
//!
//! Run: `cargo bench --bench provider_turns`.

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::io::{BufReader, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use kxen::policy::PolicyFlags;
use kxen::run::agent_loop::{self, Ending};
use kxen::run::create::NewRunRequest;
use kxen::run::events::Event;
use kxen::state::StateDir;

mod support;

const SERVER_VAR: &str = "KXEN_BENCH_FAKE_OPENAI_CALLS";
const TEXT_SERVER_VAR: &str = "KXEN_BENCH_FAKE_OPENAI_TEXT_CALLS";
/// Text pieces in each answer of the streaming comparison.
const PIECES: usize = 200;
const WINDOW: usize = 100;

fn main() {
    if let Ok(calls) = std::env::var(SERVER_VAR) {
        serve(calls.parse().unwrap(), 0);
        return;
    }
    if let Ok(calls) = std::env::var(TEXT_SERVER_VAR) {
        serve(calls.parse().unwrap(), PIECES);
        return;
    }
    // As `kxen-agent` does first thing: the environment snapshot that the redaction of every
    // event, message and record reads its secrets from once (without it each redaction scans
    // the environment again, which is not what a user's run costs).
    kxen::own_env::init().expect("environment snapshot");
    let calls = support::env_num("KXEN_BENCH_CALLS", 1000).max(2 * WINDOW);
    let (mut server, url) = support::server_process(SERVER_VAR, &calls.to_string());

    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (cpu, wall) = run_agent(tmp.path(), &url, calls);
    let _ = server.kill();
    let _ = server.wait();

    let per_turn = |from: usize, to: usize| (cpu[to] - cpu[from]) / (to - from) as f64 * 1e3;
    let first = per_turn(0, WINDOW);
    let last = per_turn(calls - WINDOW, calls);
    println!(
        "provider_turns: {calls} tool calls (read) through an openai provider, loopback server in its own process"
    );
    println!(
        "  wall: {wall:.2} s, {:.3} ms per turn",
        wall / calls as f64 * 1e3
    );
    println!("  own CPU (user+sys) per turn, first {WINDOW} turns: {first:.3} ms");
    println!("  own CPU (user+sys) per turn, last {WINDOW} turns:  {last:.3} ms");
    println!("  ratio last/first: {:.2}x (target <= 2.00x)", last / first);

    let turns = support::env_num("KXEN_BENCH_STREAM_CALLS", 300).max(10);
    let per_call = |extra: &str| {
        let (mut server, url) = support::server_process(TEXT_SERVER_VAR, &turns.to_string());
        let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let (cpu, _) = run_agent_with(tmp.path(), &url, turns, extra);
        let _ = server.kill();
        let _ = server.wait();
        (cpu[turns] - cpu[0]) / turns as f64 * 1e3
    };
    // Alternating rounds, best of each (the least disturbed on a shared machine).
    let (mut plain, mut streamed) = (f64::MAX, f64::MAX);
    for _ in 0..support::env_num("KXEN_BENCH_ROUNDS", 3).max(1) {
        plain = plain.min(per_call("stream = false\n"));
        streamed = streamed.min(per_call("stream = true\n"));
    }
    println!(
        "  with {PIECES} text pieces per answer, {turns} calls per mode (best of rounds): own CPU per call"
    );
    println!("    non-streaming: {plain:.3} ms");
    println!("    streaming:     {streamed:.3} ms");
    println!(
        "    ratio streaming/non-streaming: {:.2}x (target <= 1.10x)",
        streamed / plain
    );
}

/// Runs `calls` tool calls; returns the process CPU seconds before the first turn and after
/// each, and the wall time.
fn run_agent(root: &Path, url: &str, calls: usize) -> (Vec<f64>, f64) {
    // Not streamed (streaming is the default): the figure stays comparable with earlier runs.
    run_agent_with(root, url, calls, "stream = false\n")
}

/// [`run_agent`] with `extra` TOML lines in the provider's table.
fn run_agent_with(root: &Path, url: &str, calls: usize, extra: &str) -> (Vec<f64>, f64) {
    let repo = support::repo(root);
    let agent = support::agent(root, "read", calls + 8);
    let config = support::openai_config(root, url, extra);
    let state = StateDir::at(root.join("state"));
    let request = NewRunRequest {
        output_schema: None,
        workspace: repo.clone(),
        task: "read a.txt many times".into(),
        agent: Some(agent),
        policy: PolicyFlags::default(),
        config: Some(config),
        plan_dir: None,
    };
    let prepared = support::session(&state, &request);
    let run_id = prepared.run_id.clone();
    let cancel = AtomicBool::new(false);
    let execution = prepared.execution(&cancel);
    let mut cpu = vec![support::cpu_seconds()];
    let mut sink = |event: Event| {
        if let Event::ToolFinished { .. } = event {
            cpu.push(support::cpu_seconds());
        }
    };
    let start = Instant::now();
    let ending = agent_loop::execute(&execution, &run_id, &mut sink).unwrap();
    let wall = start.elapsed().as_secs_f64();
    drop(prepared);
    match ending {
        Ending::Finished(result) => assert_eq!(result.status.name(), "completed"),
        other => panic!("bench run did not finish: {other:?}"),
    }
    assert_eq!(cpu.len(), calls + 1);
    (cpu, wall)
}

/// The fake server: keep-alive HTTP/1.1 on 127.0.0.1:0 (port printed on stdout); request n
/// (from 0) gets a `read` call while n < `calls`, then a final answer. With `pieces`, each
/// answer also carries that many words of text: as one JSON body, or, to a streamed request
/// (`"stream":true`), as one SSE event a word (the first event alone, then the rest).
fn serve(calls: usize, pieces: usize) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("{}", listener.local_addr().unwrap().port());
    std::io::stdout().flush().unwrap();
    let mut n = 0usize;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { return };
        let _ = stream.set_nodelay(true);
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut writer = stream;
        while let Some(body) = support::read_request(&mut reader) {
            let call = (n < calls).then(|| {
                format!(
                    "{{\"index\":0,\"id\":\"call_{n}\",\"type\":\"function\",\"function\":{{\"name\":\"read\",\"arguments\":\"{{\\\"path\\\":\\\"a.txt\\\"}}\"}}}}"
                )
            });
            n += 1;
            let words: Vec<String> = (0..pieces).map(|i| format!("word{i} ")).collect();
            let ok = if String::from_utf8_lossy(&body).contains("\"stream\":true") {
                write_stream(&mut writer, &words, call.as_deref())
            } else {
                let content = if pieces > 0 || call.is_none() {
                    let text = if pieces > 0 {
                        words.concat()
                    } else {
                        "done".into()
                    };
                    format!("\"{text}\"")
                } else {
                    "null".into()
                };
                let calls = call.map_or(String::new(), |c| format!(",\"tool_calls\":[{c}]"));
                let reply = format!(
                    "{{\"choices\":[{{\"message\":{{\"role\":\"assistant\",\"content\":{content}{calls}}}}}],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":1}}}}"
                );
                writer.write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
                        reply.len()
                    )
                    .as_bytes(),
                )
            };
            if ok.is_err() {
                break;
            }
        }
    }
}

/// One streamed answer: the words as content deltas (the first event in its own write), the
/// call if any, usage, `[DONE]`.
fn write_stream(w: &mut impl Write, words: &[String], call: Option<&str>) -> std::io::Result<()> {
    let event =
        |delta: String| format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{delta}}}]}}\n\n");
    let mut events: Vec<String> = words
        .iter()
        .map(|w| event(format!("{{\"content\":\"{w}\"}}")))
        .collect();
    if words.is_empty() && call.is_none() {
        events.push(event("{\"content\":\"done\"}".into()));
    }
    if let Some(call) = call {
        events.push(event(format!("{{\"tool_calls\":[{call}]}}")));
    }
    events.push(
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: [DONE]\n\n"
            .into(),
    );
    let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
    let (first, rest) = events.split_first().unwrap();
    w.write_all(
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n{}",
            chunk(first)
        )
        .as_bytes(),
    )?;
    w.flush()?;
    w.write_all(format!("{}0\r\n\r\n", chunk(&rest.concat())).as_bytes())?;
    w.flush()
}
