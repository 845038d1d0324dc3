//! Benchmark: the `lsp` tool against a minimal LSP client, both talking to the same pylsp.
//!
//! 1. Server start + first diagnostics: `kxen::lsp::Servers` (what an `lsp diagnostics` call
//!    runs: spawn in the fence, `initialize`/`initialized`, `didOpen`, wait for the versioned
//!    `publishDiagnostics`, render) against `benches/lsp_client.py` (stdlib Python: spawn,
//!    `initialize`, `didOpen`, first `publishDiagnostics`), timed inside its own process. Median
//!    of `KXEN_BENCH_STARTS` (default 5) each.
//! 2. A warm `definition`: median of `KXEN_BENCH_WARM` (default 20) calls on the started
//!    server (the tool also re-reads the open files and renders the answer) against the same
//!    request by the minimal client.
//!
//! Target: ≤ 1.2× the minimal client plus 10 ms. pylsp debounces its linting by 0.5 s, so both
//! start figures include that wait. Run: `cargo bench --bench lsp` (needs python3 with
//! `python-lsp-server[pyflakes]`); `KXEN_BENCH_SANDBOX=off` runs the server unfenced, as the
//! minimal client does.

#![allow(clippy::disallowed_methods)] // a bench writes its own scratch files

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use kxen::lsp::{Operation, Query, ServerConfig, Servers};

const LIB: &str = "def greet(name):\n    return 'hi ' + name\n";
const MAIN: &str = "from lib import greet\n\nprint(greet('a'))\nprint(undefined_name)\n";

fn main() {
    let starts = env_num("KXEN_BENCH_STARTS", 5);
    let warm = env_num("KXEN_BENCH_WARM", 20);
    let Some(python) = python() else {
        eprintln!("lsp bench: SKIPPED, needs python3 with python-lsp-server[pyflakes]");
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    std::fs::write(root.join("lib.py"), LIB).unwrap();
    std::fs::write(root.join("main.py"), MAIN).unwrap();
    let sandbox = std::env::var("KXEN_BENCH_SANDBOX").unwrap_or_else(|_| "readOnly".into());
    let entry: ServerConfig = toml::from_str(&format!(
        "command = [{python:?}, \"-m\", \"pylsp\"]\nextensions = [\".py\"]\nsandbox = {sandbox:?}\n"
    ))
    .unwrap();

    let mut ours_start = Vec::new();
    let mut ours_def = Vec::new();
    for _ in 0..starts {
        let (start, def) = ours(&root, &entry, warm);
        ours_start.push(start);
        ours_def.push(def);
    }
    let mut theirs_start = Vec::new();
    let mut theirs_def = Vec::new();
    for _ in 0..starts {
        let (start, def) = minimal(&python, &root, warm);
        theirs_start.push(start);
        theirs_def.push(def);
    }
    let report = |what: &str, ours: f64, theirs: f64| {
        let target = theirs * 1.2 + 10.0;
        println!(
            "  {what}: kxen {ours:.1} ms, minimal client {theirs:.1} ms ({:.2}x; target ≤ {target:.1} ms: {})",
            ours / theirs,
            if ours <= target { "met" } else { "MISSED" }
        );
    };
    println!(
        "lsp: pylsp (pyflakes), server fence {sandbox}, medians of {starts} starts / {warm} warm calls"
    );
    report(
        "start + first diagnostics",
        median(ours_start),
        median(theirs_start),
    );
    report("warm definition", median(ours_def), median(theirs_def));
}

/// One start + diagnostics, then `warm` definitions, through the tool's servers (ms).
fn ours(root: &Path, entry: &ServerConfig, warm: usize) -> (f64, f64) {
    let cancel = AtomicBool::new(false);
    let configs = BTreeMap::from([("python".to_string(), entry.clone())]);
    let main = root.join("main.py");
    let t = Instant::now();
    let fence = kxen::sandbox::RunFence::new(Default::default(), root, None, None);
    let servers = Servers::new(configs, fence);
    let out = servers.run(
        &Query {
            operation: Operation::Diagnostics,
            path: &main,
            position: None,
            query: None,
        },
        &cancel,
        "bench",
    );
    let start = t.elapsed().as_secs_f64() * 1e3;
    assert!(out.text.contains("undefined name"), "{}", out.text);
    let mut times = Vec::new();
    for _ in 0..warm {
        let t = Instant::now();
        let out = servers.run(
            &Query {
                operation: Operation::Definition,
                path: &main,
                position: Some((3, 7)),
                query: None,
            },
            &cancel,
            "bench",
        );
        times.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(out.text, "lib.py:1:5: def greet(name):");
    }
    drop(servers);
    (start, median(times))
}

/// The minimal client's figures (ms), as it measured them.
fn minimal(python: &str, root: &Path, warm: usize) -> (f64, f64) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/lsp_client.py");
    let out = Command::new(python)
        .arg(&script)
        .args([
            root.to_str().unwrap(),
            "main.py",
            "2",
            "6",
            "--",
            python,
            "-m",
            "pylsp",
        ])
        .env("WARM", warm.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["diagnostics"], 1, "{v}");
    (
        v["start_diag_ms"].as_f64().unwrap(),
        v["definition_ms"].as_f64().unwrap(),
    )
}

fn python() -> Option<String> {
    let out = Command::new("python3")
        .args(["-c", "import pylsp, pyflakes, sys; print(sys.executable)"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).unwrap());
    xs[xs.len() / 2]
}
