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

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use kxen::policy::PolicyFlags;
use kxen::run::agent_loop::{self, Ending, Execution};
use kxen::run::create::{self, NewRunRequest};
use kxen::run::events::Discard;
use kxen::state::StateDir;

fn main() {
    // As the binary starts: the environment snapshot is taken (and credentials wiped) first, so
    // redaction works from the fixed snapshot as it does in `kxen-agent`.
    kxen::own_env::init().expect("environment snapshot");
    let calls: usize = std::env::var("KXEN_BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let base = std::env::var_os("KXEN_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&base).unwrap();
    let tmp = tempfile::tempdir_in(&base).unwrap();
    let root = tmp.path();

    let (run_secs, appends, bytes) = run_agent(root, calls);
    let floor_secs = fsync_floor(root, appends, bytes / appends.max(1));

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
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("a.txt"), "alpha\n").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "bench"]);

    let agent = root.join("agent.yaml");
    std::fs::write(
        &agent,
        "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: bench}\nspec:\n  \
         objective: Read a file many times.\n  instructions: [Read.]\n  successCriteria: []\n  \
         capabilities: {required: [read], optional: []}\n  execution: {maxTurns: 1024, maxRepeatedCalls: 0}\n  \
         output: {format: text, requiredFields: []}\n",
    )
    .unwrap();
    let mut script = String::new();
    for i in 0..calls {
        script.push_str(&format!(
            "{{\"text\":\"\",\"toolCalls\":[{{\"id\":\"call_{i}\",\"name\":\"read\",\"arguments\":{{\"path\":\"a.txt\"}}}}],\"usage\":{{\"inputTokens\":1,\"outputTokens\":1}}}}\n"
        ));
    }
    script.push_str("{\"text\":\"done\"}\n");
    std::fs::write(root.join("turns.jsonl"), script).unwrap();
    let config = root.join("config.toml");
    std::fs::write(
        &config,
        "[providers.s]\nkind = \"script\"\npath = \"turns.jsonl\"\n[roles]\nexecution = \"s\"\n",
    )
    .unwrap();

    let state = StateDir::at(root.join("state"));
    let request = NewRunRequest {
        workspace: repo.clone(),
        task: "read a.txt many times".into(),
        agent: Some(agent),
        policy: PolicyFlags::default(),
        config: Some(config),
    };
    let prepared = create::prepare(&request).unwrap();
    let (lease, _) = create::create(&state, &prepared).unwrap();
    let session_id = prepared.new.meta.id.clone();
    let run_id = prepared.new.run.id.clone();
    let paths = state.session(&session_id);
    let cancel = AtomicBool::new(false);
    let execution = Execution {
        state: &state,
        session_id: &session_id,
        paths: &paths,
        definition: &prepared.lock.definition,
        capabilities: &prepared.lock.capabilities,
        mcp_tools: &[],
        mcp: None,
        lsp: None,
        pass_env: &prepared.merged.pass_env,
        tool_rules: &prepared.merged.mcp_tools,
        fence: prepared.merged.fence(),
        workspace_root: &prepared.binding.root,
        provider: std::sync::Arc::clone(&prepared.provider),
        provider_info: None,
        parallel_tools: 1,
        cancel: &cancel,
        plan: None,
        compaction: None,
        protected: &[],
    };
    let start = Instant::now();
    let ending = agent_loop::execute(&execution, &run_id, &mut Discard).unwrap();
    let secs = start.elapsed().as_secs_f64();
    drop(lease);
    match ending {
        Ending::Finished(result) => assert_eq!(result.status.name(), "completed"),
        other => panic!("bench run did not finish: {other:?}"),
    }
    // Durable appends the protocol needs: `started` and `outcomeKnown` per call, plus the final
    // answer (every other line is appended lazily).
    let journal = std::fs::read_to_string(paths.run(&run_id).journal()).unwrap();
    let messages = std::fs::read_to_string(paths.messages()).unwrap();
    let appends = 2 * calls + 1;
    assert_eq!(journal.lines().count(), calls * 3);
    (secs, appends, journal.len() + messages.len())
}

/// Seconds for `appends` durable appends of `line_len`-byte lines to one file on the same disk.
fn fsync_floor(root: &Path, appends: usize, line_len: usize) -> f64 {
    let path = root.join("floor.jsonl");
    let line = format!("{{\"x\":\"{}\"}}", "a".repeat(line_len.saturating_sub(9)));
    let start = Instant::now();
    for _ in 0..appends {
        kxen::fsx::append_line(&path, &line).unwrap();
    }
    start.elapsed().as_secs_f64()
}

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?} failed");
}
