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
const WINDOW: usize = 100;

fn main() {
    if let Ok(calls) = std::env::var(SERVER_VAR) {
        serve(calls.parse().unwrap());
        return;
    }
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
}

/// Runs `calls` tool calls; returns the process CPU seconds before the first turn and after
/// each, and the wall time.
fn run_agent(root: &Path, url: &str, calls: usize) -> (Vec<f64>, f64) {
    let repo = support::repo(root);
    let agent = support::agent(root, "read", calls + 8);
    let config = support::openai_config(root, url, "");
    let state = StateDir::at(root.join("state"));
    let request = NewRunRequest {
        workspace: repo.clone(),
        task: "read a.txt many times".into(),
        agent: Some(agent),
        policy: PolicyFlags::default(),
        config: Some(config),
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
/// (from 0) gets a `read` call while n < `calls`, then a final answer.
fn serve(calls: usize) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    println!("{}", listener.local_addr().unwrap().port());
    std::io::stdout().flush().unwrap();
    let mut n = 0usize;
    for stream in listener.incoming() {
        let Ok(stream) = stream else { return };
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut writer = stream;
        while support::read_request(&mut reader).is_some() {
            let reply = if n < calls {
                format!(
                    "{{\"choices\":[{{\"message\":{{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{{\"id\":\"call_{n}\",\"type\":\"function\",\"function\":{{\"name\":\"read\",\"arguments\":\"{{\\\"path\\\":\\\"a.txt\\\"}}\"}}}}]}}}}],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":1}}}}"
                )
            } else {
                "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"done\"}}]}"
                    .to_string()
            };
            n += 1;
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}",
                reply.len()
            );
            if writer.write_all(response.as_bytes()).is_err() {
                break;
            }
        }
    }
}
