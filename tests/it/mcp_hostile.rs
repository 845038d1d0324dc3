//! MCP servers that misbehave at the protocol level: a raw stdio server (no SDK,
//! fixtures/mcp/hostile.py, its behaviour chosen by `HOSTILE_MODE`) started by each test.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::mcp::{config, text_agent, tool_outputs};
use crate::run_support::*;

/// python3 as an absolute path (the server's HOME is not ours); a missing one fails the test.
fn python3() -> Option<String> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output();
    match out {
        Ok(out) if out.status.success() => {
            Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
        }
        _ => {
            panic!("the hostile MCP server tests need python3: run .ci/run")
        }
    }
}

fn hostile_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/hostile.py")
}

/// `[mcp.servers.h]` running the hostile server in `mode`; it may write files outside the
/// workspace (count and mark files), so it runs unfenced.
fn hostile_server(env: &TestEnv, py: &str, mode: &str, timeout_ms: u64) -> String {
    format!(
        "[mcp.servers.h]\ncommand = [{py:?}, {:?}]\ntimeout_ms = {timeout_ms}\nsandbox = \"off\"\n\
         env = {{ HOSTILE_MODE = {mode:?}, COUNT_FILE = {:?}, MARK_FILE = {:?} }}\n",
        hostile_script().to_str().unwrap(),
        env.path().join("calls.txt").to_str().unwrap(),
        env.path().join("mark").to_str().unwrap(),
    )
}

/// Waits for `child` at most `limit` (draining its stdout and stderr meanwhile); a run still
/// alive then is SIGKILLed and the test fails.
fn wait_at_most(mut child: std::process::Child, limit: Duration, what: &str) -> crate::env::Run {
    use std::io::Read;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut bytes);
            }
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: the run was still alive after {limit:?}\n--- stderr\n{}",
                stderr.join().unwrap()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    crate::env::Run {
        code: status.code().unwrap_or(-1),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn first_op(env: &TestEnv) -> Value {
    let sessions = env.state_dir().join("sessions");
    let dir = std::fs::read_dir(&sessions)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let session: Value =
        serde_json::from_slice(&std::fs::read(dir.join("session.json")).unwrap()).unwrap();
    let show = env.run(
        "kxen-agent",
        &[
            "run",
            "show",
            session["id"].as_str().unwrap(),
            session["firstRunId"].as_str().unwrap(),
        ],
    );
    show.jsonl()[0]["operations"][0].clone()
}

/// A request larger than the pipe buffer to a server that stopped reading its stdin: the
/// write itself runs against `timeout_ms`; on expiry the server is killed and the call, part
/// of which was written, is UNKNOWN.
#[test]
fn a_server_that_stops_reading_stdin_times_out_and_the_call_is_unknown() {
    let Some(py) = python3() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let big = "a".repeat(300_000);
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__h__echo", json!({"text": big})),
            answer("done"),
        ],
        &hostile_server(&env, &py, "stop_reading", 2000),
    );
    let agent = text_agent(&env, "read, mcp__h__echo", "");
    let started = Instant::now();
    let child = spawn_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    let run = wait_at_most(child, Duration::from_secs(40), "timeout_ms = 2000");
    run.expect(7);
    assert!(started.elapsed() < Duration::from_secs(30));
    let op = first_op(&env);
    assert_eq!(op["phase"], "outcomeUnknown", "{op}");
    let reason = op["unknownReason"].as_str().unwrap();
    assert!(
        reason.contains("stopped reading its stdin") && reason.contains("2000 ms"),
        "{op}"
    );
    assert!(!env.path().join("calls.txt").exists(), "it never read it");
}

/// Ctrl-C while the runtime is stuck writing to a server that stopped reading: the run stops
/// (the write gets the cleanup window, then the server is killed), the call is UNKNOWN.
#[test]
fn a_run_stuck_writing_to_a_server_stays_cancellable() {
    let Some(py) = python3() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let big = "a".repeat(300_000);
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__h__echo", json!({"text": big})),
            answer("done"),
        ],
        &hostile_server(&env, &py, "stop_reading", 600_000),
    );
    let agent = text_agent(&env, "read, mcp__h__echo", "");
    let child = spawn_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    wait_for(&env.path().join("mark"));
    std::thread::sleep(Duration::from_millis(1500)); // the call is being written by now
    let interrupted = Instant::now();
    interrupt(&child);
    let run = wait_at_most(child, Duration::from_secs(20), "SIGINT");
    run.expect(7);
    assert!(interrupted.elapsed() < Duration::from_secs(15));
    let op = first_op(&env);
    assert_eq!(op["phase"], "outcomeUnknown", "{op}");
}

/// The largest resident set of `pid` seen while it runs, sampled every 100 ms; SIGKILLs it
/// (and returns what it saw) once it passes `cap` KiB.
fn peak_rss_kib(pid: u32, cap: u64) -> u64 {
    let mut peak = 0;
    while let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
        // A zombie (exited, not yet reaped) has no VmRSS line.
        let Some(rss) = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        else {
            break;
        };
        peak = peak.max(rss);
        if peak > cap {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    peak
}

/// A server that writes 1 MiB notifications endlessly while no request waits (the model's
/// `exec sleep 3` runs): the runtime's memory stays bounded, and the run goes on.
#[test]
fn a_server_flooding_notifications_does_not_grow_the_runtime() {
    let Some(py) = python3() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call("c1", "exec", json!({"command": "sleep 3"})),
            call("c2", "mcp__h__echo", json!({"text": "still here"})),
            answer("done"),
        ],
        &hostile_server(&env, &py, "idle_flood", 20_000),
    );
    let agent = text_agent(&env, "read, mcp__h__echo", "exec");
    let child = spawn_new(
        &env,
        &repo,
        "t",
        &agent,
        &cfg,
        &["--allow-mcp", "--allow-shell"],
    );
    let pid = child.id();
    let sampler = std::thread::spawn(move || peak_rss_kib(pid, 400 * 1024));
    let run = wait_at_most(child, Duration::from_secs(60), "idle flood");
    let peak = sampler.join().unwrap();
    assert!(
        peak < 200 * 1024,
        "the runtime grew to {} MiB while the server flooded it",
        peak / 1024
    );
    run.expect(0);
    let outputs = tool_outputs(&run);
    assert_eq!(outputs.len(), 2, "{outputs:?}");
}

fn session_lock(env: &TestEnv) -> Value {
    let sessions = env.state_dir().join("sessions");
    let dir = std::fs::read_dir(&sessions)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let session: Value =
        serde_json::from_slice(&std::fs::read(dir.join("session.json")).unwrap()).unwrap();
    session["lock"].clone()
}

fn locked_names(lock: &Value) -> Vec<String> {
    lock["mcpTools"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn warnings(run: &crate::env::Run) -> Vec<String> {
    run.jsonl()
        .into_iter()
        .filter(|e| e["type"] == "warning")
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect()
}

/// Two tools of one name: which one a call reaches (and which one the lock describes) would be
/// a guess, so the listing is refused — one error naming the server and the tool, exit 9, no
/// Session. (Before: the lock took the last, drift checks the first: every resume was drift.)
#[test]
fn a_listing_with_a_duplicate_tool_name_is_refused_naming_server_and_tool() {
    let Some(py) = python3() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[answer("done")],
        &hostile_server(&env, &py, "dup_names", 20_000),
    );
    for wanted in ["mcp__h__echo", "mcp__h__other"] {
        let agent = text_agent(&env, &format!("read, {wanted}"), "");
        let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
        run.expect(9);
        assert!(
            run.stderr.contains("MCP server `h`") && run.stderr.contains("\"echo\" more than once"),
            "{}",
            run.stderr
        );
        assert!(!env.state_dir().join("sessions").exists(), "no session");
    }
    let check = env.run(
        "kxen-agent",
        &[
            "policy",
            "check",
            "--allow-mcp",
            "--config",
            cfg.to_str().unwrap(),
        ],
    );
    assert!(check.stdout.contains("more than once"), "{check:?}");
}

/// Tools whose schema is not an object schema, or whose name is not what model APIs accept
/// (`[A-Za-z0-9_-]`, `mcp__<server>__<tool>` at most 64) are not granted (a warning names
/// each); a huge description is cut; a required one fails Session creation (exit 6).
#[test]
fn bad_tool_listings_grant_only_valid_tools() {
    let Some(py) = python3() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[answer("done")],
        &hostile_server(&env, &py, "bad_schema", 20_000),
    );
    let agent = text_agent(&env, "read", "mcp__h__*");
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(0);
    let lock = session_lock(&env);
    assert_eq!(locked_names(&lock), ["mcp__h__env", "mcp__h__good"]);
    assert_eq!(
        lock["mcpTools"][0]["description"].as_str().unwrap().len(),
        2048
    );
    let warned = warnings(&run).join("\n");
    for bad in ["\"echo\"", "\"nulls\"", "\"arr\"", "`env` is cut"] {
        assert!(warned.contains(bad), "{bad}: {warned}");
    }

    std::fs::remove_dir_all(env.state_dir()).unwrap();
    let required = text_agent(&env, "read, mcp__h__echo", "");
    let run = run_new(&env, &repo, "t", &required, &cfg, &["--allow-mcp"]);
    run.expect(6);
    assert!(
        run.stderr.contains("mcp__h__echo") && run.stderr.contains("inputSchema"),
        "{}",
        run.stderr
    );
    assert!(!env.state_dir().join("sessions").exists(), "no session");

    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[answer("done")],
        &hostile_server(&env, &py, "weird_names", 20_000),
    );
    let agent = text_agent(&env, "read", "mcp__h__*");
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(0);
    let y56 = format!("mcp__h__{}", "y".repeat(56));
    assert_eq!(
        locked_names(&session_lock(&env)),
        ["mcp__h__good_one", "mcp__h__ok-2", y56.as_str()]
    );
    let warned = warnings(&run).join("\n");
    for bad in [
        "\"*\"",
        "\"../x\"",
        "\"d.o.t\"",
        "\"ü\"",
        "\"a b\"",
        "65 characters",
    ] {
        assert!(warned.contains(bad), "{bad}: {warned}");
    }
}
