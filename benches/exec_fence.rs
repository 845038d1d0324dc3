//! Benchmark: the cost of the `exec` fence.
//!
//! Runs N `exec` calls (default 200; `KXEN_BENCH_CALLS` overrides) of `true` through the script
//! provider, one call per model turn, under the default policy (fenced: Landlock, an empty network
//! namespace, read-only git paths in a mount namespace) and under `"sandbox": "off"`, in the same
//! kind of run. The two alternate for `KXEN_BENCH_ROUNDS` rounds (default 3) so drift of a shared
//! machine hits both; the medians are compared. Target: fenced ≤ 1.2× unfenced. It also times
//! building the fence alone (ruleset, git path discovery, report pipe) per call.
//!
//! Run: `cargo bench --bench exec_fence` (uses `CARGO_TARGET_TMPDIR`; `KXEN_BENCH_DIR` for
//! another disk).

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use kxen::policy::PolicyFlags;
use kxen::run::create::NewRunRequest;
use kxen::sandbox::{Fence, FencePolicy, FenceSpec};
use kxen::state::StateDir;

mod support;

fn main() {
    let calls = support::env_num("KXEN_BENCH_CALLS", 200);
    let rounds = support::env_num("KXEN_BENCH_ROUNDS", 3);
    let tmp = support::scratch();
    let root = tmp.path();
    let repo = support::repo(root);
    std::fs::write(root.join("off.json"), r#"{"sandbox": "off"}"#).unwrap();

    let mut fenced = Vec::new();
    let mut unfenced = Vec::new();
    for round in 0..rounds {
        fenced.push(run_agent(root, &repo, calls, None, round));
        unfenced.push(run_agent(
            root,
            &repo,
            calls,
            Some(&root.join("off.json")),
            round,
        ));
    }
    let (f, u) = (support::median(fenced), support::median(unfenced));
    // The tool alone (no model turn, no journal fsync): the fence's share of one call.
    let mut tool_fenced = Vec::new();
    let mut tool_unfenced = Vec::new();
    for _ in 0..rounds {
        tool_fenced.push(tool_only_secs(root, &repo, calls, FencePolicy::default()));
        tool_unfenced.push(tool_only_secs(root, &repo, calls, FencePolicy::OFF));
    }
    let (tf, tu) = (support::median(tool_fenced), support::median(tool_unfenced));
    let build = fence_build_secs(root, &repo, calls, FencePolicy::default());
    let ro = FencePolicy {
        mode: kxen::sandbox::SandboxMode::ReadOnly,
        allow_network: false,
    };
    let build_ro = fence_build_secs(root, &repo, calls, ro);

    println!(
        "exec_fence: {calls} exec calls of `true` through the script provider, {rounds} rounds each"
    );
    println!(
        "  fenced:   median {:.3} s, {:.3} ms per call",
        f,
        f / calls as f64 * 1e3
    );
    println!(
        "  unfenced: median {:.3} s, {:.3} ms per call",
        u,
        u / calls as f64 * 1e3
    );
    println!(
        "  building the fence: {:.1} us per call (ruleset, git paths, report pipe; {calls} builds)",
        build / calls as f64 * 1e6
    );
    println!(
        "    of which the git paths (readOnly has none): {:.1} us",
        (build - build_ro) / calls as f64 * 1e6
    );
    println!("  ratio: {:.2}x unfenced (target <= 1.20x)", f / u);
    println!(
        "  the exec tool alone (no journal): fenced {:.3} ms, unfenced {:.3} ms per call ({:.2}x)",
        tf / calls as f64 * 1e3,
        tu / calls as f64 * 1e3,
        tf / tu
    );
}

/// A new Session running `calls` exec calls; returns the seconds of the run itself.
fn run_agent(root: &Path, repo: &Path, calls: usize, policy: Option<&Path>, round: usize) -> f64 {
    let dir = root.join(format!(
        "{}-{round}",
        if policy.is_some() { "off" } else { "fenced" }
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let agent = support::agent(&dir, "exec", 1024);
    let turns = support::turns(calls, "exec", |_| r#"{"command":"true"}"#.into());
    let config = support::script_config(&dir, &turns, "");
    let state = StateDir::at(dir.join("state"));
    let request = NewRunRequest {
        output_schema: None,
        workspace: repo.to_path_buf(),
        task: "run true many times".into(),
        agent: Some(agent),
        policy: PolicyFlags {
            policy_file: policy.map(Path::to_path_buf),
            allow_shell: true,
            ..Default::default()
        },
        config: Some(config),
        plan_dir: None,
    };
    let prepared = support::session(&state, &request);
    let secs = support::run_to_end(&prepared);
    let (paths, run_id) = (prepared.paths.clone(), prepared.run_id.clone());
    drop(prepared);
    // Every call ran (and, when fenced, ran fenced).
    let journal = std::fs::read_to_string(paths.run(&run_id).journal()).unwrap();
    let errors = journal.matches("\"isError\":true").count();
    assert_eq!(errors, 0, "a bench exec failed");
    let fenced_ops = journal.matches("\"landlockAbi\"").count();
    assert_eq!(fenced_ops, if policy.is_some() { 0 } else { calls });
    secs
}

/// Seconds for `calls` builds of the default fence around `repo` (nothing is spawned).
fn fence_build_secs(root: &Path, repo: &Path, calls: usize, policy: FencePolicy) -> f64 {
    let home = root.join("home");
    let tmp = root.join("tmp");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    let spec = FenceSpec {
        policy,
        workspace: repo,
        home: &home,
        tmp: &tmp,
        protected: &[],
    };
    let start = Instant::now();
    for _ in 0..calls {
        let fence = Fence::build(&spec).unwrap().unwrap();
        std::hint::black_box(&fence);
    }
    start.elapsed().as_secs_f64()
}

/// Seconds for `calls` direct `exec` tool calls of `true` under `fence`.
fn tool_only_secs(root: &Path, repo: &Path, calls: usize, fence: FencePolicy) -> f64 {
    let state = root.join("tool-state");
    let capabilities = vec!["exec".to_string()];
    let cancel = AtomicBool::new(false);
    let attempt = "att_bench".to_string();
    let args = serde_json::json!({"command": "true"});
    let services = kxen::tools::ToolServices::new(
        state.join("tool-home"),
        kxen::blobs::BlobStore::new(state.join("blobs")),
        kxen::sandbox::RunFence::new(fence, repo, None, Some(&state)),
    );
    let start = Instant::now();
    for i in 0..calls {
        let op_id = format!("op_bench{i}");
        let ctx = kxen::tools::ToolContext {
            workspace_root: repo,
            services: &services,
            cancel: &cancel,
            mark: kxen::tools::OperationMark {
                session_id: "ses_bench",
                run_id: "run_bench",
                attempt: &attempt,
                op_id: &op_id,
            },
            task: None,
            seen_files: None,
            granted: None,
            mcp_stream: None,
        };
        let call = kxen::tools::REGISTRY
            .admit("exec", &args, &capabilities)
            .expect("exec is admitted");
        let out = call.execute(&ctx);
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(out.fence.is_some(), fence.is_fenced());
    }
    start.elapsed().as_secs_f64()
}
