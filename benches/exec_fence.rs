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

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use kxen::policy::PolicyFlags;
use kxen::run::agent_loop::{self, Ending, Execution};
use kxen::run::create::{self, NewRunRequest};
use kxen::run::events::Discard;
use kxen::sandbox::{Fence, FencePolicy, FenceSpec};
use kxen::state::StateDir;

fn main() {
    let calls: usize = env_number("KXEN_BENCH_CALLS", 200);
    let rounds: usize = env_number("KXEN_BENCH_ROUNDS", 3);
    let base = std::env::var_os("KXEN_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&base).unwrap();
    let tmp = tempfile::tempdir_in(&base).unwrap();
    let root = tmp.path();
    let repo = repo(root);
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
    let (f, u) = (median(&mut fenced), median(&mut unfenced));
    // The tool alone (no model turn, no journal fsync): the fence's share of one call.
    let mut tool_fenced = Vec::new();
    let mut tool_unfenced = Vec::new();
    for _ in 0..rounds {
        tool_fenced.push(tool_only_secs(root, &repo, calls, FencePolicy::default()));
        tool_unfenced.push(tool_only_secs(root, &repo, calls, FencePolicy::OFF));
    }
    let (tf, tu) = (median(&mut tool_fenced), median(&mut tool_unfenced));
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

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn repo(root: &Path) -> PathBuf {
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("a.txt"), "alpha\n").unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "bench"]);
    repo
}

/// A new Session running `calls` exec calls; returns the seconds of the run itself.
fn run_agent(root: &Path, repo: &Path, calls: usize, policy: Option<&Path>, round: usize) -> f64 {
    let dir = root.join(format!(
        "{}-{round}",
        if policy.is_some() { "off" } else { "fenced" }
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let agent = dir.join("agent.yaml");
    std::fs::write(
        &agent,
        "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: bench}\nspec:\n  \
         objective: Run a command many times.\n  instructions: [Run.]\n  successCriteria: []\n  \
         capabilities: {required: [exec], optional: []}\n  execution: {maxTurns: 1024, maxRepeatedCalls: 0}\n  \
         output: {format: text, requiredFields: []}\n",
    )
    .unwrap();
    let mut script = String::new();
    for i in 0..calls {
        script.push_str(&format!(
            "{{\"text\":\"\",\"toolCalls\":[{{\"id\":\"call_{i}\",\"name\":\"exec\",\"arguments\":{{\"command\":\"true\"}}}}],\"usage\":{{\"inputTokens\":1,\"outputTokens\":1}}}}\n"
        ));
    }
    script.push_str("{\"text\":\"done\"}\n");
    std::fs::write(dir.join("turns.jsonl"), script).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[providers.s]\nkind = \"script\"\npath = \"turns.jsonl\"\n[roles]\nexecution = \"s\"\n",
    )
    .unwrap();
    let state = StateDir::at(dir.join("state"));
    let request = NewRunRequest {
        workspace: repo.to_path_buf(),
        task: "run true many times".into(),
        agent: Some(agent),
        policy: PolicyFlags {
            policy_file: policy.map(Path::to_path_buf),
            allow_shell: true,
            ..Default::default()
        },
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
    let home = state.join("tool-home");
    let blobs = kxen::blobs::BlobStore::new(state.join("blobs"));
    let capabilities = vec!["exec".to_string()];
    let cancel = AtomicBool::new(false);
    let attempt = "att_bench".to_string();
    let args = serde_json::json!({"command": "true"});
    let start = Instant::now();
    for i in 0..calls {
        let op_id = format!("op_bench{i}");
        let ctx = kxen::tools::ToolContext {
            workspace_root: repo,
            tool_home: &home,
            blobs: &blobs,
            pass_env: &[],
            cancel: &cancel,
            mark: kxen::tools::OperationMark {
                session_id: "ses_bench",
                run_id: "run_bench",
                attempt: &attempt,
                op_id: &op_id,
            },
            fence,
            mcp: None,
            lsp: None,
            task: None,
            protected: &[],
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
