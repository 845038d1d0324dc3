//! The `lsp` tool end to end, against real language servers that `.ci/run` installs:
//! python-lsp-server with pyflakes (PyPI) and pyright (npm). A missing one fails the test with
//! its install command, unless `KXEN_TEST_SKIP` names it (tests/it/needs.rs).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::needs::{needs, npm_prefix, on_path, python_with};
use crate::run_support::*;

/// The Python interpreter that has pylsp (absolute: the server's HOME is its own, where a
/// pyenv shim would not find its versions).
/// `None` only when `KXEN_TEST_SKIP` names `pylsp`.
pub(crate) fn pylsp_python() -> Option<String> {
    needs("pylsp", || python_with("pylsp, pyflakes"))
}

/// pyright's language server and the node that runs it; `None` only when `KXEN_TEST_SKIP`
/// names `pyright`.
fn pyright() -> Option<PathBuf> {
    needs("pyright", || {
        on_path("node")?;
        let path = npm_prefix().join("node_modules/pyright/langserver.index.js");
        if !path.is_file() {
            return Err(format!("{} is missing", path.display()));
        }
        Ok(path)
    })
}

/// A `[lsp.python]` entry running pylsp.
pub(crate) fn pylsp_entry(python: &str, extra: &str) -> String {
    format!(
        "[lsp.python]\ncommand = [{python:?}, \"-m\", \"pylsp\"]\nextensions = [\".py\"]\n\
         diagnostics_timeout_ms = 20000\n{extra}"
    )
}

/// A script config replaying `turns`, with `tables` appended.
pub(crate) fn config_with(env: &TestEnv, turns: &[Value], tables: &str) -> PathBuf {
    let path = script_config(env, turns);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push('\n');
    text.push_str(tables);
    std::fs::write(&path, text).unwrap();
    path
}

fn lsp_agent(env: &TestEnv) -> PathBuf {
    agent(
        env,
        "lsp-user",
        "read, lsp",
        "edit, write, exec",
        "{format: text, requiredFields: []}",
    )
}

fn lsp(op: &str, path: &str, more: Value) -> Value {
    let mut args = json!({"operation": op, "path": path});
    args.as_object_mut()
        .unwrap()
        .extend(more.as_object().unwrap().clone());
    args
}

/// `(isError, output)` of every finished tool call, in order.
fn outputs(events: &[Value]) -> Vec<(bool, String)> {
    events
        .iter()
        .filter(|e| e["type"] == "toolFinished")
        .map(|e| {
            (
                e["isError"] == true,
                e["output"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

const LIB: &str = "def greet(name):\n    return 'hi ' + name\n";
const MAIN: &str = "from lib import greet\n\nprint(greet('a'))\nprint(undefined_name)\n";

fn python_repo(env: &TestEnv) -> PathBuf {
    env.git_repo(
        "repo",
        &[("lib.py", LIB), ("main.py", MAIN), ("notes.txt", "x\n")],
    )
}

#[test]
fn pylsp_diagnostics_edit_definition_references_hover_and_symbols() {
    let Some(python) = pylsp_python() else { return };
    let env = TestEnv::new();
    let repo = python_repo(&env);
    std::os::unix::fs::symlink("/etc/hostname", repo.join("escape.py")).unwrap();
    let turns = [
        call("c1", "lsp", lsp("diagnostics", "main.py", json!({}))),
        call(
            "c2",
            "edit",
            json!({"path": "main.py", "oldString": "print(undefined_name)", "newString": "print(greet('b'))"}),
        ),
        call("c3", "lsp", lsp("diagnostics", "main.py", json!({}))),
        call(
            "c4",
            "lsp",
            lsp("definition", "main.py", json!({"line": 3, "character": 7})),
        ),
        call(
            "c5",
            "lsp",
            lsp("references", "lib.py", json!({"line": 1, "character": 5})),
        ),
        call(
            "c6",
            "lsp",
            lsp("hover", "lib.py", json!({"line": 1, "character": 5})),
        ),
        call("c7", "lsp", lsp("documentSymbols", "lib.py", json!({}))),
        call("c8", "lsp", lsp("diagnostics", "../outside.py", json!({}))),
        call("c9", "lsp", lsp("diagnostics", "/etc/passwd", json!({}))),
        call("c10", "lsp", lsp("diagnostics", "escape.py", json!({}))),
        call("c11", "lsp", lsp("diagnostics", "notes.txt", json!({}))),
        call("c12", "lsp", lsp("definition", "main.py", json!({}))),
        answer("done"),
    ];
    let config = config_with(
        &env,
        &turns,
        &pylsp_entry(&python, "diagnostics_after_edit = true\n"),
    );
    let run = run_new(
        &env,
        &repo,
        "check the code",
        &lsp_agent(&env),
        &config,
        &[],
    );
    run.expect(0);
    let out = outputs(&run.jsonl());
    assert_eq!(out.len(), 12, "{out:#?}");
    let ok = |i: usize| {
        assert!(!out[i].0, "call {} failed: {}", i + 1, out[i].1);
        out[i].1.as_str()
    };
    assert_eq!(
        ok(0),
        "main.py:4:7 error undefined name 'undefined_name' (pyflakes)"
    );
    let edited = ok(1);
    assert!(
        edited.ends_with("Diagnostics from `python`:\nno diagnostics in main.py"),
        "{edited}"
    );
    assert_eq!(ok(2), "no diagnostics in main.py");
    assert_eq!(ok(3), "lib.py:1:5: def greet(name):");
    assert_eq!(
        ok(4),
        "lib.py:1:5: def greet(name):\nmain.py:1:17: from lib import greet\n\
         main.py:3:7: print(greet('a'))\nmain.py:4:7: print(greet('b'))"
    );
    assert!(ok(5).contains("greet(name)"), "{}", out[5].1);
    assert!(ok(6).contains("function greet"), "{}", out[6].1);
    for (i, words) in [
        (7, "contains `..`"),
        (8, "outside the workspace"),
        (9, "outside the workspace root"),
        (10, "no language server is configured for `notes.txt`"),
        (11, "needs `line` and `character`"),
    ] {
        assert!(
            out[i].0 && out[i].1.contains(words),
            "call {}: {}",
            i + 1,
            out[i].1
        );
    }
    // The lock records the configured server, and lsp calls are journaled like reads.
    let fin = finished(&run.jsonl()).clone();
    let session = fin["sessionId"].as_str().unwrap();
    let shown = env.run(
        "kxen-agent",
        &["session", "show", session, "--format", "json"],
    );
    let text = shown.stdout.clone();
    assert!(text.contains("\"lspServers\""), "{text}");
}

#[test]
fn pyright_workspace_symbols_and_diagnostics() {
    let Some(server) = pyright() else { return };
    let env = TestEnv::new();
    let repo = python_repo(&env);
    let turns = [
        call("c1", "lsp", lsp("diagnostics", "main.py", json!({}))),
        call(
            "c2",
            "lsp",
            lsp("workspaceSymbols", "main.py", json!({"query": "greet"})),
        ),
        call(
            "c3",
            "lsp",
            lsp("definition", "main.py", json!({"line": 3, "character": 7})),
        ),
        answer("done"),
    ];
    // In the default fence (readOnly, no network): pyright exits when it cannot see its
    // client's pid, which is why `initialize` sends none.
    let entry = format!(
        "[lsp.pyright]\ncommand = [\"node\", {:?}, \"--stdio\"]\nextensions = [\"python\"]\n\
         diagnostics_timeout_ms = 30000\n",
        server.to_str().unwrap()
    );
    let config = config_with(&env, &turns, &entry);
    let run = run_new(&env, &repo, "look", &lsp_agent(&env), &config, &[]);
    run.expect(0);
    let out = outputs(&run.jsonl());
    assert!(!out[0].0, "{}", out[0].1);
    assert!(
        out[0]
            .1
            .starts_with("main.py:4:7 error \"undefined_name\" is not defined"),
        "{}",
        out[0].1
    );
    assert!(!out[1].0, "{}", out[1].1);
    assert!(
        out[1].1.lines().any(|l| l == "lib.py:1:5 function greet"),
        "{}",
        out[1].1
    );
    assert_eq!(out[2], (false, "lib.py:1:5: def greet(name):".to_string()));
}

#[test]
fn a_server_that_cannot_start_is_a_tool_error_and_the_run_goes_on() {
    let env = TestEnv::new();
    let repo = python_repo(&env);
    let turns = [
        call("c1", "lsp", lsp("diagnostics", "main.py", json!({}))),
        call("c2", "read", json!({"path": "lib.py"})),
        call(
            "c3",
            "lsp",
            lsp("hover", "main.py", json!({"line": 1, "character": 1})),
        ),
        answer("done"),
    ];
    let entry = "[lsp.ghost]\ncommand = [\"/nonexistent/ghost-lsp\", \"--stdio\"]\nextensions = [\".py\"]\n";
    let config = config_with(&env, &turns, entry);
    let run = run_new(&env, &repo, "look", &lsp_agent(&env), &config, &[]);
    run.expect(0);
    let out = outputs(&run.jsonl());
    assert!(out[0].0, "{out:?}");
    assert!(
        out[0]
            .1
            .contains("language server `ghost` could not be started")
            && out[0].1.contains("/nonexistent/ghost-lsp"),
        "{}",
        out[0].1
    );
    assert!(!out[1].0, "{out:?}");
    assert!(out[2].0 && out[2].1.contains("`ghost`"), "{out:?}");
}

#[test]
fn lsp_is_granted_only_with_a_configured_server() {
    let env = TestEnv::new();
    let repo = python_repo(&env);
    // Optional: dropped with a warning, and a call is refused as not in the lock.
    let optional = agent(
        &env,
        "opt",
        "read",
        "lsp",
        "{format: text, requiredFields: []}",
    );
    let turns = [
        call("c1", "lsp", lsp("diagnostics", "main.py", json!({}))),
        answer("done"),
    ];
    let config = script_config(&env, &turns);
    let run = run_new(&env, &repo, "look", &optional, &config, &[]);
    run.expect(0);
    let events = run.jsonl();
    assert!(
        events.iter().any(|e| e["type"] == "warning"
            && e["message"]
                .as_str()
                .unwrap()
                .contains("`lsp` needs a language server")),
        "{events:?}"
    );
    let created = events
        .iter()
        .find(|e| e["type"] == "sessionCreated")
        .unwrap();
    assert_eq!(created["capabilities"], json!(["read"]));
    let out = outputs(&events);
    assert!(out[0].0 && out[0].1.contains("not allowed"), "{out:?}");
    // Required: no Session at all (exit 6).
    let required = lsp_agent(&env);
    let run = run_new(&env, &repo, "look", &required, &config, &[]);
    run.expect(6);
    assert!(
        run.stderr.contains("`lsp` needs a language server"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_changed_lsp_server_set_on_resume_is_drift() {
    let env = TestEnv::new();
    let repo = python_repo(&env);
    let entry = "[lsp.ghost]\ncommand = [\"/nonexistent/ghost-lsp\"]\nextensions = [\".py\"]\n";
    let config = config_with(&env, &[answer("done"), answer("again")], entry);
    let run = run_new(&env, &repo, "look", &lsp_agent(&env), &config, &[]);
    run.expect(0);
    let session = finished(&run.jsonl())["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let resume = |env: &TestEnv| {
        env.run(
            "kxen-agent",
            &[
                "--resume",
                &session,
                "--task",
                "more",
                "--config",
                config.to_str().unwrap(),
            ],
        )
    };
    for changed in [
        "[lsp.ghost]\ncommand = [\"/nonexistent/ghost-lsp\", \"-v\"]\nextensions = [\".py\"]\n",
        "",
        "[lsp.ghost]\ncommand = [\"/nonexistent/ghost-lsp\"]\nextensions = [\".py\"]\n\
         [lsp.other]\ncommand = [\"x\"]\nextensions = [\".rs\"]\n",
    ] {
        let text = std::fs::read_to_string(&config).unwrap();
        let base = text.split("[lsp.").next().unwrap().to_string();
        std::fs::write(&config, format!("{base}{changed}")).unwrap();
        let out = resume(&env);
        out.expect(6);
        assert!(out.stderr.contains("LSP drift"), "{}", out.stderr);
    }
    let text = std::fs::read_to_string(&config).unwrap();
    let base = text.split("[lsp.").next().unwrap().to_string();
    std::fs::write(&config, format!("{base}{entry}")).unwrap();
    resume(&env).expect(0);
}

/// Pids of live processes whose environment holds `needle` (`NAME=value`).
fn pids_with(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit(')')
                .next()
                .is_some_and(|r| r.trim_start().starts_with('Z'))
        });
        if !zombie && environ.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// The attempt marks of every attempt of the only run in the state dir.
fn attempt_marks(env: &TestEnv) -> Vec<String> {
    let Some(run_json) = files_under(&env.state_dir())
        .into_iter()
        .find(|p| p.file_name().is_some_and(|n| n == "run.json"))
    else {
        return Vec::new();
    };
    let Ok(v) = serde_json::from_slice::<Value>(&std::fs::read(run_json).unwrap_or_default())
    else {
        return Vec::new();
    };
    v["attempts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a["mark"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_killed_runtime_leaves_no_server_and_none_gets_a_secret() {
    let Some(python) = pylsp_python() else { return };
    let env = TestEnv::new();
    let repo = python_repo(&env);
    // Inside the workspace: the fenced `exec` writes nowhere else.
    let marker = repo.join("started");
    let turns = [
        call("c1", "lsp", lsp("diagnostics", "main.py", json!({}))),
        call(
            "c2",
            "exec",
            json!({"command": format!("touch {} && sleep 60", marker.display())}),
        ),
        answer("done"),
    ];
    let config = config_with(&env, &turns, &pylsp_entry(&python, ""));
    let canary = "sk-canary-lsp-0123456789abcdef";
    let mut child = env
        .cmd("kxen-agent")
        .args([
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "look",
        ])
        .args(["--agent", lsp_agent(&env).to_str().unwrap()])
        .args(["--config", config.to_str().unwrap(), "--allow-shell"])
        .env("OPENAI_API_KEY", canary)
        .env("KXEN_TEST_CANARY_TOKEN", canary)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the exec call never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let marks = attempt_marks(&env);
    assert_eq!(marks.len(), 1);
    let servers = pids_with(&format!("KXEN_ATTEMPT_ID={}", marks[0]))
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|e| e.windows(18).any(|w| w == b"KXEN_LSP_SERVER_ID"))
        })
        .collect::<Vec<_>>();
    assert!(!servers.is_empty(), "no language server is running");
    for pid in &servers {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        let environ = String::from_utf8_lossy(&environ);
        assert!(!environ.contains(canary), "the canary reached server {pid}");
        assert!(!environ.contains("KXEN_TEST_CANARY_TOKEN"), "{environ}");
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while servers.iter().any(|p| alive(*p)) {
        assert!(
            Instant::now() < deadline,
            "a server outlived the SIGKILLed runtime"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let session = env.run("kxen-agent", &["session", "list"]).jsonl()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let resumed = resume(&env, &session, &config, &["--allow-shell"]);
    resumed.expect(7); // the exec call is UNKNOWN
    assert!(
        servers.iter().all(|p| !alive(*p)),
        "a server is alive after resume"
    );
    for mark in attempt_marks(&env) {
        assert!(
            pids_with(&format!("KXEN_ATTEMPT_ID={mark}")).is_empty(),
            "a process of attempt {mark} survived"
        );
    }
}

/// Resolves every UNKNOWN operation of the only run; returns how many.
fn resolve_unknown(env: &TestEnv) -> usize {
    let list = env.run("kxen-agent", &["session", "list"]);
    let first = list.jsonl().remove(0);
    let (session, run) = (
        first["id"].as_str().unwrap().to_string(),
        first["lastRunId"].as_str().unwrap().to_string(),
    );
    let show = env.run("kxen-agent", &["run", "show", &session, &run]);
    let shown = show.jsonl().remove(0);
    let mut n = 0;
    for op in shown["operations"].as_array().unwrap() {
        if op["phase"] == "outcomeUnknown" {
            let id = op["opId"].as_str().unwrap();
            env.run(
                "kxen-agent",
                &[
                    "run",
                    "resolve",
                    &session,
                    &run,
                    id,
                    "--output",
                    "killed; checked by the test",
                ],
            )
            .expect(0);
            n += 1;
        }
    }
    n
}

/// SIGKILLs of the runtime at moments spread over a run of `lsp` calls: after each, no process
/// of any attempt (the servers, what they started) is left, and the run completes on resume.
#[test]
fn sigkills_during_lsp_calls_leave_no_server() {
    let Some(python) = pylsp_python() else { return };
    let env = TestEnv::new();
    let repo = python_repo(&env);
    // Distinct calls (a repeated one would not run again).
    let mut turns: Vec<Value> = (0..12u32)
        .map(|i| {
            let op = ["references", "hover", "definition"][(i % 3) as usize];
            let at = json!({"line": 1 + i % 2, "character": 1 + i / 2});
            call(&format!("c{i}"), "lsp", lsp(op, "lib.py", at))
        })
        .collect();
    turns.push(answer("done"));
    let config = config_with(&env, &turns, &pylsp_entry(&python, ""));
    let agent = lsp_agent(&env);
    let mut args: Vec<String> = [
        "run",
        "--workspace",
        repo.to_str().unwrap(),
        "--task",
        "look",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(["--agent".into(), agent.to_str().unwrap().into()]);
    args.extend(["--config".into(), config.to_str().unwrap().into()]);
    // A language server of this env is running: the run is between or inside `lsp` calls.
    let root = env.path().to_str().unwrap().to_string();
    let server_up = || {
        std::fs::read_dir("/proc").unwrap().flatten().any(|p| {
            std::fs::read(p.path().join("environ")).is_ok_and(|bytes| {
                let text = String::from_utf8_lossy(&bytes);
                text.contains("KXEN_LSP_SERVER_ID=") && text.contains(root.as_str())
            })
        })
    };
    let mut kills = 0;
    // Kills at moments spread over the calls, counted from the server's start (not from the
    // spawn: a fast runtime would otherwise finish before a fixed delay on an idle machine).
    for delay_ms in [0u64, 150, 300, 450, 75] {
        let mut child = env
            .cmd("kxen-agent")
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let wait_until = Instant::now() + Duration::from_secs(10);
        while !server_up() && child.try_wait().unwrap().is_none() && Instant::now() < wait_until {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(delay_ms));
        let finished_early = child.try_wait().unwrap().is_some();
        child.kill().ok();
        child.wait().unwrap();
        if !finished_early {
            kills += 1;
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        for mark in attempt_marks(&env) {
            while !pids_with(&format!("KXEN_ATTEMPT_ID={mark}")).is_empty() {
                assert!(
                    Instant::now() < deadline,
                    "attempt {mark} left a process after SIGKILL"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if env
            .run("kxen-agent", &["session", "list"])
            .jsonl()
            .is_empty()
        {
            continue; // killed before the Session existed
        }
        resolve_unknown(&env);
        let session = env.run("kxen-agent", &["session", "list"]).jsonl()[0]["id"]
            .as_str()
            .unwrap()
            .to_string();
        args = ["--resume", &session, "--config", config.to_str().unwrap()]
            .iter()
            .map(|s| s.to_string())
            .collect();
    }
    assert!(kills >= 3, "only {kills} kills landed mid-run");
    // Resolve and resume until the run completes.
    for _ in 0..10 {
        let run = env.run(
            "kxen-agent",
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        if run.code == 0 {
            for mark in attempt_marks(&env) {
                assert!(pids_with(&format!("KXEN_ATTEMPT_ID={mark}")).is_empty());
            }
            return;
        }
        assert!(run.code == 7 || run.code == 5, "{run:?}");
        resolve_unknown(&env);
    }
    panic!("the run never completed");
}

/// `lsp` calls of one response run together with reads (a parallel batch, each call on a thread
/// of its own): the server started by one of them survives its thread, serves the others, and
/// is gone once the run ended.
#[test]
fn lsp_calls_join_parallel_batches_and_the_server_ends_with_the_run() {
    let Some(python) = pylsp_python() else { return };
    let env = TestEnv::new();
    let repo = python_repo(&env);
    let batch = |id: &str, calls: Vec<(&str, Value)>| {
        let calls: Vec<Value> = calls
            .into_iter()
            .enumerate()
            .map(|(i, (tool, args))| json!({"id": format!("{id}-{i}"), "name": tool, "arguments": args}))
            .collect();
        json!({"text": "", "toolCalls": calls, "usage": {"inputTokens": 10, "outputTokens": 2}})
    };
    let turns = [
        batch(
            "b1",
            vec![
                ("lsp", lsp("diagnostics", "main.py", json!({}))),
                ("lsp", lsp("documentSymbols", "lib.py", json!({}))),
                ("read", json!({"path": "lib.py"})),
            ],
        ),
        batch(
            "b2",
            vec![
                (
                    "lsp",
                    lsp("definition", "main.py", json!({"line": 3, "character": 7})),
                ),
                (
                    "lsp",
                    lsp("hover", "main.py", json!({"line": 3, "character": 7})),
                ),
            ],
        ),
        answer("done"),
    ];
    let config = config_with(&env, &turns, &pylsp_entry(&python, ""));
    let run = run_new(&env, &repo, "look", &lsp_agent(&env), &config, &[]);
    run.expect(0);
    let out = outputs(&run.jsonl());
    assert_eq!(out.len(), 5, "{out:#?}");
    assert!(out.iter().all(|(err, _)| !err), "{out:#?}");
    assert_eq!(
        out[0].1,
        "main.py:4:7 error undefined name 'undefined_name' (pyflakes)"
    );
    assert!(out[1].1.contains("function greet"), "{}", out[1].1);
    assert_eq!(out[3].1, "lib.py:1:5: def greet(name):");
    for mark in attempt_marks(&env) {
        assert!(
            pids_with(&format!("KXEN_ATTEMPT_ID={mark}")).is_empty(),
            "a process of attempt {mark} outlived the run"
        );
    }
}

/// A server that crashes, writes something that is not LSP or stops answering: a tool error
/// naming it (with what it said), the run goes on, and the next call starts it again.
#[test]
fn a_crashed_or_hostile_server_is_a_tool_error_and_is_restarted() {
    let Some(python) = pylsp_python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo(
        "repo",
        &[
            ("crash.py", "crash\n"),
            ("garbage.py", "garbage\n"),
            ("hang.py", "hang\n"),
            ("ok.py", "fine\n"),
        ],
    );
    let at = json!({"line": 1, "character": 1});
    let turns = [
        call("c1", "lsp", lsp("hover", "crash.py", at.clone())),
        call("c2", "lsp", lsp("hover", "ok.py", at.clone())),
        call("c3", "lsp", lsp("hover", "garbage.py", at.clone())),
        call("c4", "lsp", lsp("definition", "ok.py", at.clone())),
        call("c5", "lsp", lsp("hover", "hang.py", at.clone())),
        call("c6", "lsp", lsp("definition", "crash.py", at.clone())),
        answer("done"),
    ];
    let starts = env.path().join("starts.txt");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/lsp/fake_server.py");
    let entry = format!(
        "[lsp.fake]\ncommand = [{python:?}, {:?}]\nextensions = [\".py\"]\ntimeout_ms = 3000\n\
         sandbox = \"off\"\nenv = {{ FAKE_LSP_STARTS = {:?} }}\n",
        script.to_str().unwrap(),
        starts.to_str().unwrap()
    );
    let config = config_with(&env, &turns, &entry);
    let run = run_new(&env, &repo, "look", &lsp_agent(&env), &config, &[]);
    run.expect(0);
    let out = outputs(&run.jsonl());
    assert_eq!(out.len(), 6, "{out:#?}");
    let failed = |i: usize, words: &[&str]| {
        assert!(out[i].0, "call {}: {}", i + 1, out[i].1);
        for w in words {
            assert!(out[i].1.contains(w), "call {}: {}", i + 1, out[i].1);
        }
    };
    failed(
        0,
        &[
            "language server `fake` failed",
            "exit code 3",
            "boom",
            "restarted on the next call",
        ],
    );
    assert_eq!(out[1], (false, "fake hover".to_string()));
    failed(2, &["`fake`", "not an LSP message"]);
    assert_eq!(out[3], (false, "ok.py:1:1: fine".to_string()));
    failed(4, &["`fake`", "within 3000 ms"]);
    assert_eq!(out[5], (false, "crash.py:1:1: crash".to_string()));
    let started = std::fs::read_to_string(&starts).unwrap().lines().count();
    assert_eq!(started, 4, "one start, then one after each failure");
}
