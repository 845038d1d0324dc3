//! Benchmark: `task` children and parallel tool calls (issue 15).
//!
//! 1. Four `task` children in one turn, every model call sleeping 1 s (a `command` provider),
//!    three calls per child: the parent's turn (first `toolStarted` to last `toolFinished` of
//!    the turn) vs the slowest child's run. Target: <= 1.3x (the children run together).
//! 2. Eight `read` calls per turn (20 turns), parallel (`[tools] parallel = 8`) vs sequential
//!    (`parallel = 1`): the ratio of the runs' times.
//! 3. Creating a child Session (`children::create`: the parent's session.json read, the child
//!    lock, the Session written all or nothing) vs creating a top-level Session
//!    (`create::prepare` + `create::create`). Target: <= 2x.
//!
//! Run: `cargo bench --bench task` (uses `CARGO_TARGET_TMPDIR`; `KXEN_BENCH_DIR` for another
//! disk). Runs the real binary for 1 and 2.

// A bench sets up its fixtures with plain writes (as the others do).
#![allow(clippy::disallowed_methods)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kxen::policy::PolicyFlags;
use kxen::run::children::{self, Origin, Remaining};
use kxen::run::create::{self, NewRunRequest};
use kxen::state::StateDir;
use kxen::tools::task::TaskArgs;

const BIN: &str = env!("CARGO_BIN_EXE_kxen-agent");

fn main() {
    let base = std::env::var_os("KXEN_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&base).unwrap();
    let tmp = tempfile::tempdir_in(&base).unwrap();
    let root = tmp.path();
    println!(
        "task: subagents and parallel tool calls (disk {})",
        root.display()
    );
    println!("  load before: {}", load());
    four_children(&root.join("four"));
    parallel_reads(&root.join("reads"));
    creation(&root.join("create"));
    println!("  load after: {}", load());
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A git repository with one file, and an agent that may read and delegate.
fn setup(dir: &Path) -> (PathBuf, PathBuf) {
    let repo = dir.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let text: String = (1..=400).map(|i| format!("line {i}\n")).collect();
    std::fs::write(repo.join("README"), text).unwrap();
    for args in [
        &["init", "-q"][..],
        &["add", "."],
        &[
            "-c",
            "user.name=b",
            "-c",
            "user.email=b@b",
            "commit",
            "-qm",
            "init",
        ],
    ] {
        let ok = Command::new("git")
            .args(args)
            .current_dir(&repo)
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let agent = dir.join("agent.yaml");
    std::fs::write(
        &agent,
        "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: bench}\nspec:\n  \
         objective: o\n  instructions: [i]\n  capabilities: {required: [read], optional: [task]}\n  \
         execution: {maxTurns: 400}\n",
    )
    .unwrap();
    (repo, agent)
}

fn kxen(dir: &Path, repo: &Path, agent: &Path, config: &Path) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .args(["--state-dir", dir.join("state").to_str().unwrap()])
        .args([
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "bench",
        ])
        .args([
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ])
        .arg("--allow-shell");
    cmd
}

fn four_children(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let (repo, agent) = setup(dir);
    // The model: 1 s per call. A child (its request has "task") reads twice, then answers; the
    // parent calls four tasks, then answers.
    let model = r#"input=$(cat)
sleep 1
turns=$(printf '%s' "$input" | grep -o '"role":"assistant"' | wc -l)
if printf '%s' "$input" | grep -q '"task":"'; then
  if [ "$turns" -lt 2 ]; then
    echo '{"text":"","toolCalls":[{"id":"r","name":"read","arguments":{"path":"README"}}]}'
  else
    echo '{"text":"child done"}'
  fi
elif [ "$turns" -eq 0 ]; then
  echo '{"text":"","toolCalls":[{"id":"t1","name":"task","arguments":{"description":"c1","prompt":"p"}},{"id":"t2","name":"task","arguments":{"description":"c2","prompt":"p"}},{"id":"t3","name":"task","arguments":{"description":"c3","prompt":"p"}},{"id":"t4","name":"task","arguments":{"description":"c4","prompt":"p"}}]}'
else
  echo '{"text":"all done"}'
fi
"#;
    std::fs::write(dir.join("model.sh"), model).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[providers.cmd]\nkind = \"command\"\nargv = [\"sh\", \"model.sh\"]\n\n[roles]\nexecution = \"cmd\"\n",
    )
    .unwrap();
    let mut child = kxen(dir, &repo, &agent, &config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let (mut first_started, mut last_finished) = (None, None);
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        let at = start.elapsed();
        match event["type"].as_str() {
            Some("toolStarted") if first_started.is_none() => first_started = Some(at),
            Some("toolFinished") => last_finished = Some(at),
            _ => {}
        }
    }
    assert!(child.wait().unwrap().success(), "the run failed");
    let turn = last_finished.unwrap() - first_started.unwrap();
    let slowest = slowest_child(&dir.join("state"));
    println!(
        "  four children x 3 model calls of 1 s: parent's turn {:.2} s, slowest child {:.2} s, \
         sum of children {:.2} s -> {:.2}x the slowest (target <= 1.30x)",
        turn.as_secs_f64(),
        slowest.0.as_secs_f64(),
        slowest.1.as_secs_f64(),
        turn.as_secs_f64() / slowest.0.as_secs_f64()
    );
}

/// The slowest child run's wall clock (from its run.json) and the sum over all children.
fn slowest_child(state: &Path) -> (Duration, Duration) {
    let (mut max, mut sum) = (Duration::ZERO, Duration::ZERO);
    for entry in std::fs::read_dir(state.join("sessions")).unwrap() {
        let dir = entry.unwrap().path();
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("session.json")).unwrap())
                .unwrap();
        if meta["forkKind"] != "task" {
            continue;
        }
        let run = meta["firstRunId"].as_str().unwrap();
        let run: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("runs").join(run).join("run.json")).unwrap(),
        )
        .unwrap();
        let ms = run["attempts"][0]["wallClockMs"].as_u64().unwrap();
        let d = Duration::from_millis(ms);
        max = max.max(d);
        sum += d;
    }
    (max, sum)
}

fn parallel_reads(dir: &Path) {
    const TURNS: usize = 20;
    let mut times = Vec::new();
    for parallel in [8, 1] {
        let dir = dir.join(format!("p{parallel}"));
        std::fs::create_dir_all(&dir).unwrap();
        let (repo, agent) = setup(&dir);
        let mut lines = String::new();
        for turn in 0..TURNS {
            // Every call distinct (a repeated call would not run again).
            let reads: Vec<serde_json::Value> = (0..8)
                .map(|i| serde_json::json!({"id": format!("r{i}"), "name": "read", "arguments": {"path": "README", "offset": turn * 8 + i + 1, "limit": 1}}))
                .collect();
            lines.push_str(&serde_json::json!({"text": "", "toolCalls": reads}).to_string());
            lines.push('\n');
        }
        lines.push_str("{\"text\":\"done\"}\n");
        std::fs::write(dir.join("turns.jsonl"), lines).unwrap();
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[providers.s]\nkind = \"script\"\npath = \"turns.jsonl\"\n\n[roles]\nexecution \
                 = \"s\"\n\n[tools]\nparallel = {parallel}\n"
            ),
        )
        .unwrap();
        let start = Instant::now();
        let out = kxen(&dir, &repo, &agent, &config).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        times.push(start.elapsed().as_secs_f64());
    }
    println!(
        "  8 reads per turn x {TURNS} turns: parallel {:.3} s, sequential {:.3} s -> parallel \
         takes {:.2}x the sequential time",
        times[0],
        times[1],
        times[0] / times[1]
    );
}

fn creation(dir: &Path) {
    const N: usize = 50;
    std::fs::create_dir_all(dir).unwrap();
    let (repo, agent) = setup(dir);
    std::fs::write(dir.join("turns.jsonl"), "{\"text\":\"x\"}\n").unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[providers.s]\nkind = \"script\"\npath = \"turns.jsonl\"\n\n[roles]\nexecution = \"s\"\n",
    )
    .unwrap();
    let state = StateDir::at(dir.join("state"));
    let request = NewRunRequest {
        workspace: repo.clone(),
        task: "bench".into(),
        agent: Some(agent.clone()),
        policy: PolicyFlags {
            allow_shell: true,
            ..PolicyFlags::default()
        },
        config: Some(config.clone()),
        plan_dir: None,
    };
    let start = Instant::now();
    let mut parent = None;
    for _ in 0..N {
        let draft = create::prepare(&state, &request).unwrap();
        let (prepared, _) = create::create(&state, draft).unwrap();
        parent = Some((prepared.meta.id.clone(), prepared.run_id.clone()));
    }
    let top = start.elapsed() / N as u32;
    let parent = parent.unwrap();
    let args = TaskArgs {
        description: "bench child".into(),
        prompt: "do it".into(),
    };
    let start = Instant::now();
    for _ in 0..N {
        let child = children::plan("task").unwrap();
        let origin = Origin {
            parent_session_id: &parent.0,
            parent_run_id: &parent.1,
            op_id: "op_01bench000000000000000000",
            child: &child,
            remaining: Remaining {
                turns: 10,
                wall_clock: None,
            },
        };
        let (_, lease) = children::create(&state, &origin, &args).unwrap();
        drop(lease);
    }
    let child = start.elapsed() / N as u32;
    println!(
        "  Session creation ({N} each): top-level {:.2} ms, task child {:.2} ms -> {:.2}x \
         (target <= 2x)",
        top.as_secs_f64() * 1e3,
        child.as_secs_f64() * 1e3,
        child.as_secs_f64() / top.as_secs_f64()
    );
}
