//! Benchmark: resume cost against history size (issue 4).
//!
//! Builds a Session whose interrupted run holds 100,000 journal records (33,333 settled read
//! calls) over 1,000 turns, so about 34,300 messages (`KXEN_BENCH_RECORDS`, `KXEN_BENCH_TURNS`
//! override; turns stay under the definition's `maxTurns` of 1024, since the resumed run must
//! still be allowed its next model call), then measures, each in a fresh child process so peak memory
//! (VmHWM) is its own:
//! - `run show` (the read-only view of the run and all its operations),
//! - resume up to the first model call (lease, lock and policy checks, workspace verification,
//!   reading and folding messages and journal, recovery, building the model's history),
//! - the floor: reading the same JSONL bytes and parsing every line with serde_json.
//!
//! Target: each ≤ 2× the floor's time, peak memory ≤ 2× the files' size (plus the process's own
//! baseline, reported separately). Run: `cargo bench --bench resume`. Each child runs
//! `KXEN_BENCH_RUNS` times (default 3, interleaved); the best time and the highest peak count.

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kxen::Result;
use kxen::policy::PolicyFlags;
use kxen::provider::{ModelRequest, ModelResponse, Provider};
use kxen::run::agent_loop;
use kxen::run::create::{self, NewRunRequest};
use kxen::run::events::Discard;
use kxen::run::resume::{self, ResumeRequest};
use kxen::state::StateDir;
use serde_json::{Value, json};

mod support;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        // As `kxen-agent` does first thing (the secrets every redaction uses are read once).
        kxen::own_env::init().expect("environment snapshot");
        let (what, root) = (&args[i + 1], PathBuf::from(&args[i + 2]));
        let secs = match what.as_str() {
            "show" => child_show(&root),
            "resume" => child_resume(&root),
            _ => child_floor(&root),
        };
        println!("{secs} {}", peak_kb());
        return;
    }
    let turns: usize = env_or("KXEN_BENCH_TURNS", 1_000).clamp(1, 1_000);
    let records: usize = env_or("KXEN_BENCH_RECORDS", 100_000);
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(&base).unwrap();
    let tmp = tempfile::tempdir_in(&base).unwrap();
    // `KXEN_BENCH_KEEP=DIR` only builds the Session into DIR and keeps it, so one child can be
    // run alone under a heap profiler: `resume-… --child show|resume|floor DIR` (resume changes
    // the Session: run it on a copy).
    if let Some(dir) = std::env::var_os("KXEN_BENCH_KEEP") {
        build(Path::new(&dir), turns, records);
        return;
    }
    let root = tmp.path();
    let (bytes, messages) = build(root, turns, records);
    println!(
        "resume: a Session with {messages} messages and {records} journal records ({:.1} MiB of JSONL)",
        bytes as f64 / 1048576.0
    );
    // Each child runs `KXEN_BENCH_RUNS` times (default 3), interleaved, and reports its best
    // time (the least disturbed by other processes on a shared machine) and its highest peak.
    // A resume changes the Session (its run ends at the stopped model call), so every resume
    // starts from a fresh copy of the built state.
    let runs = env_or("KXEN_BENCH_RUNS", 3).max(1);
    let state = root.join("state");
    let pristine = root.join("state.pristine");
    copy_dir(&state, &pristine);
    let mut results: Vec<(&str, f64, u64)> = Vec::new();
    for _ in 0..runs {
        for (i, what) in ["floor", "show", "resume"].into_iter().enumerate() {
            if what == "resume" {
                std::fs::remove_dir_all(&state).unwrap();
                copy_dir(&pristine, &state);
            }
            let (secs, kb) = child(what, root);
            match results.get_mut(i) {
                Some(r) => *r = (what, r.1.min(secs), r.2.max(kb)),
                None => results.push((what, secs, kb)),
            }
        }
    }
    println!("  (best time and highest peak of {runs} run(s) each, interleaved)");
    let (floor_secs, floor_kb) = (results[0].1, results[0].2);
    for (what, secs, kb) in &results {
        println!(
            "  {what:<7} {:>8.1} ms  ({:.2}x floor)   peak RSS {:>7.1} MiB ({:.2}x the files)",
            secs * 1e3,
            secs / floor_secs,
            *kb as f64 / 1024.0,
            (*kb as f64 * 1024.0) / bytes as f64,
        );
    }
    println!(
        "  (peak RSS includes the process baseline; the floor child's peak is {:.1} MiB)",
        floor_kb as f64 / 1024.0
    );
}

/// Runs one child (`floor`, `show` or `resume`) on the Session under `root`: its time in
/// seconds and its peak RSS in KiB.
fn child(what: &str, root: &Path) -> (f64, u64) {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--child", what, root.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default().to_string();
    let mut parts = last.split_whitespace();
    let Some(secs) = parts.next().and_then(|s| s.parse::<f64>().ok()) else {
        panic!("{what}: {text} {}", String::from_utf8_lossy(&out.stderr));
    };
    let kb: u64 = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    (secs, kb)
}

/// `cp -a from to` (file modes kept: the state dir is private).
fn copy_dir(from: &Path, to: &Path) {
    let ok = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap()
        .success();
    assert!(ok, "cp -a {} {}", from.display(), to.display());
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Peak resident set size of this process, in KiB.
fn peak_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

struct Fixture {
    state: StateDir,
    session: String,
    run: String,
    config: PathBuf,
}

fn fixture(root: &Path) -> Fixture {
    let ids: Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("ids.json")).unwrap()).unwrap();
    Fixture {
        state: StateDir::at(root.join("state")),
        session: ids["session"].as_str().unwrap().into(),
        run: ids["run"].as_str().unwrap().into(),
        config: root.join("config.toml"),
    }
}

fn child_floor(root: &Path) -> f64 {
    let f = fixture(root);
    let paths = f.state.session(&f.session);
    let start = Instant::now();
    let mut n = 0usize;
    for file in [paths.messages(), paths.run(&f.run).journal()] {
        let bytes = std::fs::read(&file).unwrap();
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let v: Value = serde_json::from_slice(line).unwrap();
            n += usize::from(!v.is_null());
        }
    }
    assert!(n > 0);
    start.elapsed().as_secs_f64()
}

fn child_show(root: &Path) -> f64 {
    let f = fixture(root);
    let start = Instant::now();
    let shown = kxen::session::view::show_run(&f.state, &f.session, &f.run).unwrap();
    let text = serde_json::to_string(&shown).unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert!(text.len() > 100);
    secs
}

/// Stops the run at its first model call and remembers when that was.
#[derive(Debug)]
struct FirstCall(Mutex<Option<Instant>>);

impl Provider for FirstCall {
    fn complete(&self, _request: &ModelRequest, _n: usize) -> Result<ModelResponse> {
        self.0.lock().unwrap().get_or_insert_with(Instant::now);
        Err(kxen::Error::external(
            "benchmark: stop at the first model call",
        ))
    }
}

fn child_resume(root: &Path) -> f64 {
    let f = fixture(root);
    let start = Instant::now();
    let mut resumed = resume::prepare(
        &f.state,
        &ResumeRequest {
            output_schema: None,
            session_id: f.session.clone(),
            task: None,
            workspace: None,
            rebind: false,
            policy: PolicyFlags::default(),
            config: Some(f.config.clone()),
            plan_dir: None,
        },
    )
    .unwrap();
    let first = Arc::new(FirstCall(Mutex::new(None)));
    let cancel = std::sync::atomic::AtomicBool::new(false);
    resumed.services.provider = first.clone();
    let execution = resumed.execution(&cancel);
    agent_loop::execute(&execution, &resumed.run_id, &mut Discard).unwrap();
    let at = first.0.lock().unwrap().expect("the model was called");
    at.duration_since(start).as_secs_f64()
}

/// Creates the Session and replaces its history with `turns` turns holding `records` journal
/// records (a consistent history: every call answered and settled). Returns the JSONL bytes and
/// the number of messages.
fn build(root: &Path, turns: usize, records: usize) -> (usize, usize) {
    let repo = support::repo(root);
    let agent = root.join("agent.yaml");
    std::fs::write(&agent, "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: bench}\nspec:\n  objective: o\n  instructions: [i]\n  capabilities: {required: [read]}\n  execution: {maxTurns: 1024, maxPureRetries: 0}\n").unwrap();
    let config = support::script_config(root, "{\"text\":\"x\"}\n", "");
    let state = StateDir::at(root.join("state"));
    let draft = create::prepare(
        &state,
        &NewRunRequest {
            output_schema: None,
            workspace: repo,
            task: "bench".into(),
            agent: Some(agent),
            policy: PolicyFlags::default(),
            config: Some(config),
            plan_dir: None,
        },
    )
    .unwrap();
    let task = draft.new.task.clone();
    let (prepared, _) = create::create(&state, draft).unwrap();
    let session = prepared.meta.id.clone();
    let run = prepared.run_id.clone();
    drop(prepared);
    let paths = state.session(&session);

    // Messages: the task, then `turns` assistant messages of this run, each with its share of
    // the read calls, every call answered by a tool message and settled in the journal. The
    // history must be consistent (`session verify`'s cross-file checks run on resume), and a
    // run's turns are capped by `maxTurns` (at most 1024), so the calls come several per turn.
    let mut msg_lines = Chained::default();
    msg_lines.push(&serde_json::to_value(&task).unwrap());
    let ops = records / 3;
    let per_turn = ops.div_ceil(turns);
    let mut journal = Chained::default();
    let at = "2026-11-30T00:00:00.000Z";
    let args = json!({"path": "a.txt"});
    for (t, first) in (0..ops).step_by(per_turn).enumerate() {
        let calls: Vec<usize> = (first..ops.min(first + per_turn)).collect();
        let msg = format!("msg_a{t:025}");
        let tool_calls: Vec<Value> = calls
            .iter()
            .map(|i| json!({"id": format!("call_{i}"), "name": "read", "arguments": args}))
            .collect();
        msg_lines.push(&json!({"id": msg, "runId": run, "role": "assistant", "content": "Reading the files again to be sure.", "toolCalls": tool_calls, "usage": {"inputTokens": 1000, "outputTokens": 20}, "createdAt": at}));
        for (index, i) in calls.iter().enumerate() {
            let (op, turn) = (format!("op_{i:026}"), format!("msg_t{i:025}"));
            journal.push(&json!({"phase": "started", "opId": op, "at": at, "tool": "read", "arguments": args, "messageId": msg, "toolCallId": format!("call_{i}"), "callIndex": index}));
            journal.push(&json!({"phase": "outcomeKnown", "opId": op, "at": at, "output": {"text": "     1\talpha\n", "isError": false}}));
            msg_lines.push(&json!({"id": turn, "runId": run, "role": "tool", "content": "     1\talpha\n", "toolCallId": format!("call_{i}"), "replyTo": msg, "callIndex": index, "opId": op, "createdAt": at}));
            journal.push(&json!({"phase": "settled", "opId": op, "at": at, "turnMessageId": turn}));
        }
    }
    std::fs::write(paths.messages(), &msg_lines.text).unwrap();
    std::fs::write(paths.run(&run).journal(), &journal.text).unwrap();
    // The run was interrupted while running.
    let run_json = paths.run(&run).run_json();
    let mut state_json: Value =
        serde_json::from_str(&std::fs::read_to_string(&run_json).unwrap()).unwrap();
    state_json["status"] = json!("running");
    std::fs::write(
        &run_json,
        serde_json::to_string_pretty(&state_json).unwrap(),
    )
    .unwrap();
    std::fs::write(
        root.join("ids.json"),
        json!({"session": session, "run": run}).to_string(),
    )
    .unwrap();
    (msg_lines.text.len() + journal.text.len(), msg_lines.lines)
}

/// JSONL text with the hash chain the runtime's files carry (`prevHash`, see `fsx::chain`).
struct Chained {
    text: String,
    prev: String,
    lines: usize,
}

impl Default for Chained {
    fn default() -> Chained {
        Chained {
            text: String::new(),
            prev: kxen::fsx::chain::GENESIS.to_string(),
            lines: 0,
        }
    }
}

impl Chained {
    fn push(&mut self, record: &Value) {
        let line = kxen::fsx::chain::chain_line(&record.to_string(), &self.prev);
        self.prev = kxen::fsx::chain::line_hash(line.as_bytes());
        self.text.push_str(&line);
        self.text.push('\n');
        self.lines += 1;
    }
}
