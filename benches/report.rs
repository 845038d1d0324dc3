//! Benchmark: `kxen-agent session report` of a 1,000-tool-call Session. Target: ≤ 1 s of
//! kxen-agent time (the whole process: reading, `session verify`'s checks, rendering, the
//! atomic write) and a page of ≤ 5 MB.
//!
//! The Session is made by a real run through the script provider (as `kxen-agent run` does it):
//! calls cycling through `write` (a 40-line file), `edit` (of that file: a diff against the
//! whole file), `read` (its 40 numbered lines as output) and a failing `edit`, each turn with
//! growing token counts, priced by the config. N: `KXEN_BENCH_CALLS` (default 1,000); each
//! report is made `KXEN_BENCH_REPS` times (default 5) and the fastest and median are printed,
//! with `session verify` of the same Session for comparison.
//!
//! Run: `cargo bench --bench report`.

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::process::{Command, Stdio};
use std::time::Instant;

use kxen::policy::PolicyFlags;
use kxen::run::create::NewRunRequest;
use kxen::state::StateDir;
use serde_json::json;

mod support;

fn main() {
    kxen::own_env::init().expect("environment snapshot");
    let calls = support::env_num("KXEN_BENCH_CALLS", 1000);
    let reps = support::env_num("KXEN_BENCH_REPS", 5).max(1);
    let tmp = support::scratch();
    let root = tmp.path();
    let bin = env!("CARGO_BIN_EXE_kxen-agent");

    let repo = support::repo(root);
    let agent = support::agent(root, "read, write, edit", calls + 8);
    let mut turns = String::new();
    for i in 0..calls {
        let file = format!("src/f{}.txt", i / 4);
        let (tool, arguments) = match i % 4 {
            0 => {
                let content: String = (0..40)
                    .map(|j| format!("row {j} of file {}\n", i / 4))
                    .collect();
                ("write", json!({"path": file, "content": content}))
            }
            1 => (
                "edit",
                json!({"path": file, "oldString": format!("row 7 of file {}\n", i / 4),
                       "newString": format!("ROW 7 of file {} (edited)\n", i / 4)}),
            ),
            2 => ("read", json!({"path": file})),
            _ => (
                "edit",
                json!({"path": file, "oldString": "not there", "newString": "x"}),
            ),
        };
        let line = json!({"text": format!("step {i}"), "toolCalls": [{"id": format!("call_{i}"),
            "name": tool, "arguments": arguments}],
            "usage": {"inputTokens": 2000 + 40 * i, "outputTokens": 60 + i % 50}});
        turns.push_str(&format!("{line}\n"));
    }
    turns.push_str("{\"text\":\"done\"}\n");
    let config = support::script_config(
        root,
        &turns,
        "[providers.s.price]\ninput_per_million = 3.0\noutput_per_million = 15.0\ncurrency = \"USD\"\n",
    );
    let state = StateDir::at(root.join("state"));
    let prepared = support::session(
        &state,
        &NewRunRequest {
            workspace: repo,
            task: "write, edit and read many files".into(),
            agent: Some(agent),
            policy: PolicyFlags::default(),
            config: Some(config.clone()),
            plan_dir: None,
            output_schema: None,
        },
    );
    let run_secs = support::run_to_end(&prepared);
    let session_id = prepared.meta.id.clone();
    drop(prepared);

    let page = root.join("report.html");
    let mut report = Vec::new();
    let mut verify = Vec::new();
    for _ in 0..reps {
        let start = Instant::now();
        let ok = Command::new(bin)
            .arg("--state-dir")
            .arg(root.join("state"))
            .args(["session", "report", &session_id, "--output"])
            .arg(&page)
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        report.push(start.elapsed().as_secs_f64());
        assert!(ok, "session report failed");
        let start = Instant::now();
        let ok = Command::new(bin)
            .arg("--state-dir")
            .arg(root.join("state"))
            .args(["session", "verify", &session_id])
            .stdout(Stdio::null())
            .status()
            .unwrap()
            .success();
        verify.push(start.elapsed().as_secs_f64());
        assert!(ok, "session verify failed");
    }
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(
        html.matches("<li class=\"call\">").count(),
        calls,
        "every call shown"
    );
    let edits = (0..calls).filter(|i| i % 4 != 2).count();
    assert_eq!(
        html.matches("<details class=\"diff\"").count(),
        edits,
        "every edit's diff"
    );
    let best = report.iter().copied().fold(f64::MAX, f64::min);
    println!(
        "report: `session report` of a Session of {calls} tool calls (write/edit/read/failing edit)"
    );
    println!("  run that made it: {run_secs:.2} s");
    println!(
        "  session report: fastest {:.3} s, median {:.3} s of {reps} (target <= 1 s)",
        best,
        support::median(report)
    );
    println!(
        "  session verify: median {:.3} s (the checks the report includes)",
        support::median(verify)
    );
    println!(
        "  page: {} bytes = {:.2} MB (target <= 5 MB)",
        html.len(),
        html.len() as f64 / (1024.0 * 1024.0)
    );
}
