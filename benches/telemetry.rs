//! Benchmark: what tracing costs a tool call. Runs N `read` calls (default 1,000;
//! `KXEN_BENCH_CALLS`) through the script provider, as `benches/tool_journal.rs` does, once with
//! the plain event sink and once wrapped in the OpenTelemetry sink exporting protobuf to a live
//! collector (a loopback HTTP server in this process answering 200 to every export), alternating
//! `KXEN_BENCH_REPS` times (default 3). Target: traced ≤ 1.05× untraced per call.
//!
//! Two figures per mode: wall clock, and the process's user + sys CPU (`getrusage`, every
//! thread: the exporter's and the in-process collector's included, so the traced figure is an
//! upper bound). A call's wall clock is mostly the journal's fsyncs, whose latency on a shared
//! disk drifts more between runs than tracing could add; CPU is what tracing can actually cost.
//!
//! Run: `cargo bench --bench telemetry`.

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::io::{BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use kxen::policy::PolicyFlags;
use kxen::run::agent_loop::{self, Ending};
use kxen::run::create::NewRunRequest;
use kxen::run::events::Discard;
use kxen::state::StateDir;
use kxen::telemetry::{Protocol, Settings, Tracing};

mod support;

/// A collector: reads each request and answers 200; counts the exports.
fn collector() -> (u16, Arc<AtomicUsize>) {
    let socket = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = socket.local_addr().unwrap().port();
    let exports = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&exports);
    std::thread::spawn(move || {
        for stream in socket.incoming().flatten() {
            let seen = Arc::clone(&seen);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                while let Some(body) = support::read_request(&mut reader) {
                    assert!(!body.is_empty());
                    seen.fetch_add(1, Ordering::SeqCst);
                    let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
                }
                let _ = reader.read(&mut [0u8; 1]);
            });
        }
    });
    (port, exports)
}

fn main() {
    kxen::own_env::init().expect("environment snapshot");
    let calls = support::env_num("KXEN_BENCH_CALLS", 1000);
    let reps = support::env_num("KXEN_BENCH_REPS", 3).max(1);
    // Tracing off: what every tool call still pays (the executor's hook, an MCP/LSP client's
    // check) — one atomic load each, against milliseconds per call.
    let n = 1_000_000u32;
    let off = Instant::now();
    for i in 0..n {
        let x = kxen::telemetry::current::within("run_x", "op_x", || std::hint::black_box(i));
        std::hint::black_box(kxen::telemetry::current::client_call().is_some() || x == n);
    }
    let off_ns = off.elapsed().as_nanos() as f64 / f64::from(n);
    let (port, exports) = collector();
    let settings = Settings {
        endpoint: format!("http://127.0.0.1:{port}/v1/traces"),
        headers: Default::default(),
        service_name: "bench".into(),
        protocol: Protocol::Protobuf,
        content: false,
    };
    let mut plain = Vec::new();
    let mut traced = Vec::new();
    for rep in 0..reps {
        // Alternating which goes first: a shared disk's fsync latency drifts over a minute.
        if rep % 2 == 0 {
            plain.push(run(calls, None, rep));
            traced.push(run(calls, Some(settings.clone()), rep));
        } else {
            traced.push(run(calls, Some(settings.clone()), rep));
            plain.push(run(calls, None, rep));
        }
    }
    let cpu = |runs: &[(f64, f64)]| support::median(runs.iter().map(|r| r.1).collect());
    let (pc, tc) = (cpu(&plain), cpu(&traced));
    let wall = |runs: Vec<(f64, f64)>| support::median(runs.into_iter().map(|r| r.0).collect());
    let (p, t) = (wall(plain), wall(traced));
    println!("telemetry: {calls} tool calls (read) through the script provider, median of {reps}");
    println!(
        "  untraced: {:.3} s, {:.3} ms per tool call",
        p,
        p / calls as f64 * 1e3
    );
    println!(
        "  traced:   {:.3} s, {:.3} ms per tool call ({} exports received)",
        t,
        t / calls as f64 * 1e3,
        exports.load(Ordering::SeqCst)
    );
    println!("  ratio: {:.3}x (target <= 1.05x)", t / p);
    println!("  tracing off: {off_ns:.1} ns of hooks per tool call");
    println!(
        "  CPU: untraced {:.3} ms, traced {:.3} ms per tool call; ratio {:.3}x",
        pc / calls as f64 * 1e3,
        tc / calls as f64 * 1e3,
        tc / pc
    );
}

/// One run of `calls` reads; seconds of wall clock and of CPU from the first model call to the
/// end of the run (the traced run's final flush included).
fn run(calls: usize, settings: Option<Settings>, rep: usize) -> (f64, f64) {
    let tmp = support::scratch();
    let root = tmp.path();
    let repo = support::repo(root);
    let agent = support::agent(root, "read", calls + 8);
    let turns = support::turns(calls, "read", |i| {
        format!("{{\"path\":\"a.txt\",\"limit\":{}}}", i % 7 + 1 + rep)
    });
    let config = support::script_config(root, &turns, "");
    let state = StateDir::at(root.join("state"));
    let prepared = support::session(
        &state,
        &NewRunRequest {
            workspace: repo,
            task: "read".into(),
            agent: Some(agent),
            policy: PolicyFlags::default(),
            config: Some(config),
            plan_dir: None,
            output_schema: None,
        },
    );
    let cancel = AtomicBool::new(false);
    let execution = prepared.execution(&cancel);
    let start = Instant::now();
    let cpu = support::cpu_seconds();
    let mut discard = Discard;
    let ending = match settings {
        None => agent_loop::execute(&execution, &prepared.run_id, &mut discard).unwrap(),
        Some(s) => {
            let tracing = Tracing::start(s);
            let mut sink = tracing.sink(
                &mut discard,
                prepared.services.provider_info.as_ref(),
                &state,
            );
            let ending = agent_loop::execute(&execution, &prepared.run_id, &mut sink).unwrap();
            sink.finish();
            if let Some(warning) = tracing.finish() {
                panic!("spans lost: {warning}");
            }
            ending
        }
    };
    let secs = start.elapsed().as_secs_f64();
    let cpu = support::cpu_seconds() - cpu;
    assert!(
        matches!(ending, Ending::Finished(_)),
        "the run did not finish"
    );
    (secs, cpu)
}
