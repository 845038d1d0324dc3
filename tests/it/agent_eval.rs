//! The CI slice of the agent eval (benches/agent-eval/, docs/eval.md): every task of the suite
//! fails its check unsolved and passes it with its reference solution, and the harness runs end
//! to end against the real binary with the script provider, recording what the check says —
//! not what the agent claims — and the run's bookkeeping from `run show`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::env::Run;

fn harness() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/agent-eval/eval.py")
}

/// `python3 eval.py ARGS…` with the caller's environment (the Rust tasks' checks need the
/// toolchain that runs this test).
fn eval(args: &[&str]) -> Run {
    let out = Command::new("python3")
        .arg(harness())
        .args(args)
        .output()
        .expect("python3 runs (it is required by the eval harness)");
    Run::from(out)
}

fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn by_task<'a>(rows: &'a [Value], name: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["task"] == name)
        .unwrap_or_else(|| panic!("no row for {name} in {rows:?}"))
}

#[test]
fn every_task_fails_unsolved_and_passes_with_its_solution() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("verify.jsonl");
    let run = eval(&["verify", "-j", "2", "--out", out.to_str().unwrap()]);
    run.expect(0);
    let rows = lines(&out);
    assert!(rows.len() >= 30, "the suite has {} tasks", rows.len());
    for row in &rows {
        assert_eq!(row["ok"], true, "{row}");
        assert_ne!(row["unsolvedExit"], 0, "{row}");
        assert_eq!(row["solvedExit"], 0, "{row}");
    }
    // Every language and kind of task the suite promises is there.
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/agent-eval/tasks");
    let metas: Vec<String> = rows
        .iter()
        .map(|r| {
            std::fs::read_to_string(suite.join(r["task"].as_str().unwrap()).join("task.toml"))
                .unwrap()
        })
        .collect();
    for want in [
        "\"python\"",
        "\"shell\"",
        "\"javascript\"",
        "\"rust\"",
        "\"fix-bug\"",
        "\"implement\"",
        "\"implement-from-test\"",
        "\"rename\"",
        "\"write-test\"",
        "\"agents-rule\"",
        "\"recover\"",
    ] {
        assert!(
            metas.iter().any(|m| m.contains(want)),
            "no task with {want}"
        );
    }
}

#[test]
fn the_harness_records_a_scripted_solution_with_its_bookkeeping() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("results.jsonl");
    let run = eval(&[
        "run",
        "--agent",
        "kxen",
        "--script-solution",
        "--bin",
        env!("CARGO_BIN_EXE_kxen-agent"),
        "-j",
        "2",
        "--timeout",
        "60",
        "--out",
        out.to_str().unwrap(),
        "--only",
        "py-fix-off-by-one",
        "sh-agents-set-eu",
        "rs-rename-field",
    ]);
    run.expect(0);
    assert!(run.stdout.contains("3/3 passed"), "{}", run.stdout);
    let rows = lines(&out);
    assert_eq!(rows.len(), 3);
    // (task, turns, tool calls): a read before each write of an existing file, then the answer.
    for (task, turns, calls) in [
        ("py-fix-off-by-one", 3, 2),
        ("sh-agents-set-eu", 2, 1),
        ("rs-rename-field", 5, 4),
    ] {
        let row = by_task(&rows, task);
        assert_eq!(row["passed"], true, "{row}");
        assert_eq!(row["checkExit"], 0, "{row}");
        assert_eq!(row["exit"], 0, "{row}");
        assert_eq!(row["status"], "completed", "{row}");
        assert_eq!(row["turns"], turns, "{row}");
        assert_eq!(row["toolCalls"], calls, "{row}");
        // The script's usage: turn n reports 100·n input and 10 output tokens.
        let n = turns as u64;
        assert_eq!(row["inputTokens"], 100 * n * (n + 1) / 2, "{row}");
        assert_eq!(row["outputTokens"], 10 * n, "{row}");
        assert!(row["wallS"].as_f64().unwrap() >= 0.0, "{row}");
        assert_eq!(row["agent"], "kxen");
    }
}

#[test]
fn a_run_that_claims_success_without_doing_the_work_is_a_failure() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(
        model.join("turns.jsonl"),
        "{\"text\":\"Fixed the bug; all tests pass.\",\"usage\":{\"inputTokens\":7,\"outputTokens\":3}}\n",
    )
    .unwrap();
    let config = model.join("config.toml");
    std::fs::write(
        &config,
        "[providers.s]\nkind = \"script\"\npath = \"turns.jsonl\"\n\n\
         [providers.s.price]\ninput_per_million = 1000000.0\noutput_per_million = 2000000.0\ncurrency = \"USD\"\n\n\
         [roles]\nexecution = \"s\"\nplanning = \"s\"\n",
    )
    .unwrap();
    let out = tmp.path().join("results.jsonl");
    let run = eval(&[
        "run",
        "--config",
        config.to_str().unwrap(),
        "--bin",
        env!("CARGO_BIN_EXE_kxen-agent"),
        "--label",
        "claims",
        "--out",
        out.to_str().unwrap(),
        "--only",
        "js-fix-capitalize",
    ]);
    run.expect(0);
    let rows = lines(&out);
    let row = by_task(&rows, "js-fix-capitalize");
    // The agent ended `completed` and said it fixed the bug; the check says otherwise.
    assert_eq!(row["status"], "completed", "{row}");
    assert_eq!(row["exit"], 0, "{row}");
    assert_eq!(row["passed"], false, "{row}");
    assert_ne!(row["checkExit"], 0, "{row}");
    assert_eq!(row["turns"], 1, "{row}");
    assert_eq!(row["toolCalls"], 0, "{row}");
    assert_eq!(row["label"], "claims");
    // Cost from the config's price table: 7 · 1 + 3 · 2.
    assert_eq!(row["cost"], 13.0, "{row}");
    assert!(run.stdout.contains("0/1 passed"), "{}", run.stdout);

    // The side-by-side table of two result files names both columns.
    let table = eval(&["table", out.to_str().unwrap(), out.to_str().unwrap()]);
    table.expect(0);
    assert!(
        table.stdout.contains("js-fix-capitalize"),
        "{}",
        table.stdout
    );
    // And counts the run's claim the check did not confirm, in each column.
    let claims = table
        .stdout
        .lines()
        .find(|l| l.starts_with("claimed done, check failed"))
        .unwrap_or_else(|| panic!("{}", table.stdout));
    let counts: Vec<&str> = claims.split('|').skip(1).map(str::trim).collect();
    assert_eq!(counts, ["1", "1"], "{claims}");
}

#[test]
fn a_missing_binary_or_task_is_a_clear_error() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("no-such-binary");
    let run = eval(&[
        "run",
        "--script-solution",
        "--bin",
        missing.to_str().unwrap(),
        "--out",
        tmp.path().join("r.jsonl").to_str().unwrap(),
    ]);
    run.expect(3);
    assert!(
        run.stderr.contains("no kxen-agent binary"),
        "{}",
        run.stderr
    );
    let run = eval(&["verify", "--only", "no-such-task"]);
    run.expect(3);
    assert!(
        run.stderr.contains("no such task: no-such-task"),
        "{}",
        run.stderr
    );
}
