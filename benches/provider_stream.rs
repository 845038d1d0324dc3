//! Benchmark: what streaming costs the client, and how soon a streamed delta reaches it.
//!
//! An `openai` provider makes N calls (default 2,000; `KXEN_BENCH_CALLS`) against a loopback
//! server that is this binary run again as its own process (its CPU is not ours), once with
//! `stream = false` (one JSON answer) and once with `stream = true` (the same answer as 200 SSE
//! deltas), the two modes alternating in rounds. Reported: the client's CPU per call (user +
//! sys, `getrusage(RUSAGE_SELF)`; the median round) in each mode and their ratio (target ≤ 1.1×), and the time
//! from the server taking the timestamp it writes into the first event (just before the write)
//! to the provider handing that delta to its observer (CLOCK_MONOTONIC, which both processes
//! share; target ≤ 5 ms apart): median, p99 and worst. The server sets TCP_NODELAY, as
//! streaming servers do.
//!
//! Run: `cargo bench --bench provider_stream`.

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::io::{BufReader, Write};
use std::net::TcpListener;
use std::sync::OnceLock;
use std::time::Duration;

use kxen::provider::openai::OpenAiProvider;

mod support;
use kxen::provider::{CallEvent, ChatMessage, ModelRequest, Observer, Provider};

const SERVER_VAR: &str = "KXEN_BENCH_FAKE_STREAM_SERVER";
const DELTAS: usize = 200;
const ROUNDS: usize = 20;

fn main() {
    if std::env::var_os(SERVER_VAR).is_some() {
        serve();
        return;
    }
    let calls = support::env_num("KXEN_BENCH_CALLS", 2000);
    let (mut server, url) = support::server_process(SERVER_VAR, "1");
    let plain = OpenAiProvider::new("p", &url, "m", None, Duration::from_secs(30));
    let streamed =
        OpenAiProvider::new("p", &url, "m", None, Duration::from_secs(30)).with_stream(true);
    // Warm up both (connections, allocator).
    for _ in 0..10 {
        one(&plain, &mut Vec::new());
        one(&streamed, &mut Vec::new());
    }
    // The modes alternate in rounds, so that a change of machine load falls on both alike; the
    // figure of a mode is its median round (per call), which a burst of load on a shared
    // machine moves least.
    let (mut rounds_plain, mut rounds_stream, mut first) = (Vec::new(), Vec::new(), Vec::new());
    let n = (calls / ROUNDS).max(1);
    for _ in 0..ROUNDS {
        rounds_plain.push(measure(&plain, n, &mut Vec::new()) / n as f64);
        rounds_stream.push(measure(&streamed, n, &mut first) / n as f64);
    }
    let calls = n * ROUNDS;
    let (cpu_plain, cpu_stream) = (
        support::median(rounds_plain),
        support::median(rounds_stream),
    );
    let _ = server.kill();
    let _ = server.wait();
    first.sort_by(f64::total_cmp);
    println!(
        "provider_stream: {calls} calls per mode in {ROUNDS} alternating rounds, answer of {DELTAS} text pieces, loopback server in its own process"
    );
    println!("  (CPU per call: the median of {ROUNDS} rounds of {n} calls per mode)");
    println!(
        "  client CPU per call, non-streaming: {:.3} ms",
        cpu_plain * 1e3
    );
    println!(
        "  client CPU per call, streaming:     {:.3} ms",
        cpu_stream * 1e3
    );
    println!(
        "  ratio streaming/non-streaming: {:.2}x (target <= 1.10x)",
        cpu_stream / cpu_plain
    );
    println!(
        "  first event written -> delta reported: median {:.3} ms, p99 {:.3} ms, worst {:.3} ms (target <= 5 ms)",
        first[first.len() / 2],
        first[first.len() * 99 / 100],
        first[first.len() - 1]
    );
}

/// CPU seconds of `calls` calls; each call's first-delta latency (ms) goes to `first`.
fn measure(p: &OpenAiProvider, calls: usize, first: &mut Vec<f64>) -> f64 {
    let before = support::cpu_seconds();
    for _ in 0..calls {
        one(p, first);
    }
    support::cpu_seconds() - before
}

fn one(p: &OpenAiProvider, first: &mut Vec<f64>) {
    // The least a consumer does with a delta (a look at one flag), so that the figure is the
    // provider's.
    let seen = OnceLock::new();
    let observe = |e: CallEvent| {
        if let CallEvent::TextDelta(t) = e
            && seen.get().is_none()
        {
            let now = monotonic_ns();
            // The first delta may hold more than the first piece (what one read brought).
            let stamp = t.split_whitespace().next().unwrap_or_default();
            let sent: u64 = stamp.trim_start_matches("t=").parse().unwrap();
            let _ = seen.set((now - sent) as f64 / 1e6);
        }
    };
    let messages = [ChatMessage::user("go")];
    let request = ModelRequest {
        observer: Some(Observer(&observe)),
        ..ModelRequest::plain("execution", &messages, &[])
    };
    let r = p.complete(&request, 0).unwrap();
    assert!(r.text.len() > DELTAS);
    if let Some(ms) = seen.into_inner() {
        first.push(ms);
    }
}

fn monotonic_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    #[allow(unsafe_code)]
    unsafe {
        libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t)
    };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Keep-alive HTTP/1.1: a streamed request (`"stream":true`) gets SSE, another one JSON; the
/// answer's first piece is `t=<CLOCK_MONOTONIC ns when written> `.
fn serve() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("{}", listener.local_addr().unwrap().port());
    std::io::stdout().flush().unwrap();
    for stream in listener.incoming() {
        let Ok(stream) = stream else { return };
        // As streaming servers do (Go's net/http, uvicorn, nginx's tcp_nodelay): without it
        // the write after the first event waits for the client's delayed ACK (~40 ms).
        let _ = stream.set_nodelay(true);
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut w = stream;
            while let Some(body) = support::read_request(&mut reader) {
                let streamed = String::from_utf8_lossy(&body).contains("\"stream\":true");
                let piece = |i: usize| format!("word{i} ");
                let ok = if streamed {
                    let mut out = String::from(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
                    );
                    let first = format!(
                        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"t={} \"}}}}]}}\n\n",
                        monotonic_ns()
                    );
                    out.push_str(&format!("{:x}\r\n{first}\r\n", first.len()));
                    let mut rest = String::new();
                    for i in 1..DELTAS {
                        rest.push_str(&format!(
                            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
                            piece(i)
                        ));
                    }
                    rest.push_str("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":200}}\n\ndata: [DONE]\n\n");
                    w.write_all(out.as_bytes())
                        .and_then(|_| w.flush())
                        .and_then(|_| {
                            w.write_all(
                                format!("{:x}\r\n{rest}\r\n0\r\n\r\n", rest.len()).as_bytes(),
                            )
                        })
                } else {
                    let mut text = format!("t={} ", monotonic_ns());
                    for i in 1..DELTAS {
                        text.push_str(&piece(i));
                    }
                    let reply = format!(
                        "{{\"choices\":[{{\"message\":{{\"role\":\"assistant\",\"content\":\"{text}\"}}}}],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":200}}}}"
                    );
                    w.write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
                            reply.len()
                        )
                        .as_bytes(),
                    )
                };
                if ok.and_then(|_| w.flush()).is_err() {
                    return;
                }
            }
        });
    }
}
