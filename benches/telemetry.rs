//! Benchmark: what tracing costs a tool call. Runs N `read` calls (default 1,000;
//! `KXEN_BENCH_CALLS`) through the script provider, as `benches/tool_journal.rs` does, once with
//! the plain event sink and once wrapped in the OpenTelemetry sink exporting protobuf to a live
//! collector (a loopback HTTP server in a separate process answering 200 to every export),
//! alternating `KXEN_BENCH_REPS` times (default 3; untraced first on even reps, traced first on
//! odd ones). Target: traced ≤ 1.05× untraced per call.
//!
//! Two figures per mode, each the median over the reps with its spread ((max − min) / median,
//! what machine noise alone does to one mode): wall clock, and this process's user + sys CPU
//! (`getrusage`, every thread: the run's and the exporter's; the collector is another process,
//! so what it costs to parse the exports is not counted against tracing). A call's wall clock is
//! mostly the journal's fsyncs, whose latency on a shared disk drifts more between runs than
//! tracing could add; CPU is what tracing can actually cost. Every rep's figures are printed
//! too, in the order they ran.
//!
//! Run: `cargo bench --bench telemetry` (release build; `KXEN_BENCH_DIR` puts the scratch
//! Sessions on another disk).

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, Read, Write};
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

/// The collector, as a separate process (this bench binary again, with [`COLLECTOR`] set): it
/// answers 200 to every export and counts them. Out of process so that the CPU the bench
/// measures is the run's (its exporter thread included), not the collector's parsing.
fn collector() -> (u16, std::process::Child) {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .env(COLLECTOR, "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start the collector process");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    (line.trim().parse().expect("the collector's port"), child)
}

/// Set in the collector process's environment.
const COLLECTOR: &str = "KXEN_BENCH_COLLECTOR";

/// The collector process: prints its port, serves until its stdin closes, then prints how many
/// exports it received.
fn serve() {
    let socket = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("{}", socket.local_addr().unwrap().port());
    std::io::stdout().flush().unwrap();
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
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    println!("{}", exports.load(Ordering::SeqCst));
}

fn main() {
    if std::env::var_os(COLLECTOR).is_some() {
        return serve();
    }
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
    let (port, mut collector) = collector();
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
    // The collector's count of exports, once its stdin closes.
    drop(collector.stdin.take());
    let mut exports = String::new();
    collector
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut exports)
        .unwrap();
    collector.wait().unwrap();
    let ms = |secs: f64| secs / calls as f64 * 1e3;
    // Median, and the spread of the runs around it (max - min over the median): what the
    // machine's noise does to one mode alone.
    let figure = |xs: Vec<f64>| {
        let median = support::median(xs.clone());
        let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().copied().fold(0.0, f64::max);
        (median, (hi - lo) / median)
    };
    let (pw, pw_spread) = figure(plain.iter().map(|r| r.0).collect());
    let (tw, tw_spread) = figure(traced.iter().map(|r| r.0).collect());
    let (pc, pc_spread) = figure(plain.iter().map(|r| r.1).collect());
    let (tc, tc_spread) = figure(traced.iter().map(|r| r.1).collect());
    println!("telemetry: {calls} tool calls (read) through the script provider, median of {reps}");
    println!(
        "  wall per tool call: untraced {:.3} ms (spread {:.0}%), traced {:.3} ms (spread {:.0}%); \
         ratio {:.3}x (target <= 1.05x)",
        ms(pw),
        pw_spread * 100.0,
        ms(tw),
        tw_spread * 100.0,
        tw / pw
    );
    println!(
        "  CPU per tool call:  untraced {:.3} ms (spread {:.0}%), traced {:.3} ms (spread {:.0}%); \
         ratio {:.3}x (target <= 1.05x)",
        ms(pc),
        pc_spread * 100.0,
        ms(tc),
        tc_spread * 100.0,
        tc / pc
    );
    println!(
        "  exports received by the collector: {}",
        exports.trim().lines().last().unwrap_or("?")
    );
    println!("  tracing off: {off_ns:.1} ns of hooks per tool call");
    // Every run's figures, in the order they ran (for an off-vs-off comparison).
    for (i, (p, t)) in plain.iter().zip(&traced).enumerate() {
        println!(
            "  rep {i}: untraced {:.3} ms wall {:.3} ms CPU; traced {:.3} ms wall {:.3} ms CPU",
            ms(p.0),
            ms(p.1),
            ms(t.0),
            ms(t.1)
        );
    }
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
