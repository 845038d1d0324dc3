//! Benchmark: the cost of the durable tool boundary.
//!
//! Runs N tool calls (default 1,000; `KXEN_BENCH_CALLS` overrides) of a trivial tool (`read` of a
//! one-line file) through the script provider, one call per model turn, and compares the time
//! per tool call with the floor the protocol cannot go below on the same disk: two durable
//! appends (write + fsync) per call, `Started` before the side effect and `OutcomeKnown` after it
//! (the assistant message, the tool message and `Settled` are lazy appends riding on those
//! syncs; see `src/journal/mod.rs`). Target: runtime ≤ 1.3× the floor.
//!
//! Run: `cargo bench --bench tool_journal` (uses `CARGO_TARGET_TMPDIR`, i.e. the disk of
//! `target/`; set `KXEN_BENCH_DIR` to measure another disk).

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::path::Path;

use kxen::policy::PolicyFlags;
use kxen::run::create::NewRunRequest;
use kxen::state::StateDir;

mod support;

fn main() {
    // As the binary starts: the environment snapshot is taken (and credentials wiped) first, so
    // redaction works from the fixed snapshot as it does in `kxen-agent`.
    kxen::own_env::init().expect("environment snapshot");
    let calls = support::env_num("KXEN_BENCH_CALLS", 1000);
    let tmp = support::scratch();
    let root = tmp.path();

    let (run_secs, appends, bytes) = run_agent(root, calls);
    let floor_secs = support::fsync_floor(root, appends, bytes / appends.max(1));

    let per_call = run_secs / calls as f64;
    let floor_per_call = floor_secs / calls as f64;
    println!("tool_journal: {calls} tool calls (read) through the script provider");
    println!("  disk: {}", root.display());
    println!(
        "  run:   {:.3} s total, {:.3} ms per tool call",
        run_secs,
        per_call * 1e3
    );
    println!(
        "  floor: {:.3} s total, {:.3} ms per tool call ({appends} durable appends of ~{} bytes)",
        floor_secs,
        floor_per_call * 1e3,
        bytes / appends.max(1)
    );
    println!(
        "  ratio: {:.2}x the fsync floor (target <= 1.30x)",
        run_secs / floor_secs
    );
}

/// Creates a Session and runs `calls` tool calls; returns (seconds, durable appends, bytes).
fn run_agent(root: &Path, calls: usize) -> (f64, usize, usize) {
    let repo = support::repo(root);
    let agent = support::agent(root, "read", 1024);
    let turns = support::turns(calls, "read", |_| r#"{"path":"a.txt"}"#.into());
    let config = support::script_config(root, &turns, "");
    let state = StateDir::at(root.join("state"));
    let request = NewRunRequest {
        workspace: repo,
        task: "read a.txt many times".into(),
        agent: Some(agent),
        policy: PolicyFlags::default(),
        config: Some(config),
        plan_dir: None,
    };
    let prepared = support::session(&state, &request);
    let secs = support::run_to_end(&prepared);
    let (paths, run_id) = (prepared.paths.clone(), prepared.run_id.clone());
    drop(prepared);
    // Durable appends the protocol needs: `started` and `outcomeKnown` per call, plus the final
    // answer (every other line is appended lazily).
    let journal = std::fs::read_to_string(paths.run(&run_id).journal()).unwrap();
    let messages = std::fs::read_to_string(paths.messages()).unwrap();
    let appends = 2 * calls + 1;
    assert_eq!(journal.lines().count(), calls * 3);
    (secs, appends, journal.len() + messages.len())
}
