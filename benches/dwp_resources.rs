//! `dwp resources report` against the floor: a plain read-and-parse of the same journal with
//! serde_json.
//!
//! Generates a plan with 10 tasks and N journal events weighted toward what the resource frame
//! reads — gate runs (retries), selections (dispatch calls), observed and asserted resource
//! samples, authorized adaptations with a resource impact (reservations), `RESERVATION:` and
//! `LIMIT:` observations, refusals — then times, best of several runs:
//! - floor: read journal.ndjson and parse every line into a `serde_json::Value`;
//! - report (library): open the plan, validate contract and journal, build the report,
//!   serialize it (abilities fixed, so no addon detect command runs);
//! - report (CLI): the `dwp resources report --host-only` binary end to end, stdout discarded.
//!
//! `DWP_BENCH_KEEP=DIR` writes the first size's plan under DIR, prints its path and stops (to
//! profile the CLI on it).
//!
//! Run: `cargo bench --bench dwp_resources` (sizes via `DWP_BENCH_SIZES=10000,100000,1000000`;
//! default 10000,100000).

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kxen::dwp::plan::{Plan, journal};
use kxen::dwp::resources::{Abilities, report};
use serde_json::{Value, json};

const PLAN: &str = "PLAN_bench_resources";

fn contract() -> Value {
    let criteria: Vec<Value> = (0..20)
        .map(|i| {
            json!({"id": format!("AC-c{i}"), "statement": format!("criterion {i}"),
                   "observable_check": "cargo test", "accepted_evidence": ["observed", "asserted"]})
        })
        .collect();
    let tasks: Vec<Value> = (0..10)
        .map(|t| {
            json!({"id": format!("T-t{t}"), "title": format!("task {t}"), "prerequisites": [],
                   "touched_surface": [format!("src/t{t}.rs")],
                   "gate_intent": [
                       {"criterion": format!("AC-c{}", 2 * t), "check": "cargo test a"},
                       {"criterion": format!("AC-c{}", 2 * t + 1), "check": "cargo test b"}]})
        })
        .collect();
    json!({
        "schema": "https://deepworkplan.com/schema/plan-contract/v7.json",
        "spec_version": "7.0.0", "plan": PLAN, "revision": 1,
        "created_at": "2026-01-01T00:00:00Z",
        "outcome": {"statement": "s", "success_definition": "d", "out_of_scope": ["x"]},
        "acceptance": {"criteria": criteria},
        "invariants": [{"id": "INV-a", "statement": "a"}],
        "scope": {"allowed_paths": ["src/"], "allowed_command_classes": ["cargo"],
                  "forbidden_operations": ["rm -rf"]},
        "authorization": {"mechanism": "plan_authorship", "authority": "dev",
                          "timestamp": "2026-01-01T00:00:00Z", "boundaries": "b",
                          "consent_checkpoints": []},
        "permissions": {"granted": ["gate_command_exec", "agent_delegation"], "not_granted": []},
        "dependencies": [],
        "resource_envelope": {"limits": [
            {"id": "wall_hours", "limit": 1000, "unit": "hours", "enforcement": "enforced",
             "metering_source": "journal ts span"},
            {"id": "gate_retries", "limit": 100000000, "unit": "retries",
             "enforcement": "enforced", "metering_source": "journal gate runs", "reserve": 5},
            {"id": "dispatch_calls", "limit": 100000000, "unit": "calls",
             "enforcement": "enforced", "metering_source": "journal selections"},
            {"id": "spend_usd", "limit": 1.0e9, "unit": "usd", "enforcement": "enforced",
             "metering_source": "host adapter", "reserve": 5.0},
            {"id": "tokens", "limit": 2000000000, "unit": "tokens", "enforcement": "enforced",
             "metering_source": "host adapter"},
            {"id": "gpu_seconds", "limit": 10, "unit": "gpu-s", "enforcement": "advisory"},
        ]},
        "tasks": tasks,
    })
}

/// Writes the plan folder (inside a small repo) and returns its path.
fn generate(root: &Path, n: usize) -> PathBuf {
    let dir = root.join(".dwp/plans").join(PLAN);
    std::fs::create_dir_all(dir.join("analysis_results")).unwrap();
    std::fs::write(dir.join("analysis_results/spend.json"), "{}\n").unwrap();
    let c = contract();
    let id = kxen::canonical::hash_hex(&c);
    std::fs::write(
        dir.join("contract.json"),
        kxen::canonical::to_pretty(&c) + "\n",
    )
    .unwrap();
    let mut journal = String::with_capacity(n * 330);
    let mut last_adaptation = 0u64;
    for i in 0..n {
        let seq = i as u64 + 1;
        let task = format!("T-t{}", i % 10);
        let criterion = format!("AC-c{}", 2 * (i % 10) + (i / 10) % 2);
        let mut e = json!({
            "schema": "https://deepworkplan.com/schema/journal-event/v7.json",
            "seq": seq,
            "ts": kxen::clock::format_seconds(1_767_225_600 + i as i64 * 3),
            "plan": PLAN, "contract_id": id,
            "actor": {"kind": "helper", "identity": "dwp-ledger/7.0"},
        });
        let extra = match (i, i % 20) {
            (0, _) => json!({"type": "approval", "authority": "dev",
                             "mechanism": "plan_authorship", "plan_digest": "d"}),
            (1..=10, _) => json!({"type": "task_start", "task": format!("T-t{}", i - 1)}),
            (_, 0..=5) => json!({"type": "gate_run", "command": "cargo test", "cwd": ".",
                                 "timeout_seconds": 600, "exit_code": i % 2, "task": task,
                                 "criterion": criterion, "trust": "asserted"}),
            (_, 6..=8) => json!({"type": "selection", "task": task, "priority_boost": false}),
            (_, 9..=10) => {
                e["actor"] = json!({"kind": "host_adapter", "identity": "kxen-agent"});
                json!({"type": "resource_sample", "source": "meter",
                       "limit_id": if i % 2 == 0 { "spend_usd" } else { "tokens" },
                       "value": (i as f64) / 1000.0,
                       "unit": if i % 2 == 0 { "usd" } else { "tokens" },
                       "trust": "observed", "evidence_path": "analysis_results/spend.json"})
            }
            (_, 11) => json!({"type": "resource_sample", "source": "estimate",
                              "limit_id": "tokens", "value": i, "unit": "tokens",
                              "trust": "asserted"}),
            (_, 12..=13) => {
                last_adaptation = seq;
                e["actor"] = json!({"kind": "agent", "identity": "caller"});
                json!({"type": "adaptation", "kind": "retry", "trigger_observation": null,
                       "evidence_artifact": null, "hypothesis": "h", "action": "child",
                       "rationale": "r", "authority": "dev", "affected_tasks": [task],
                       "affected_criteria": [], "evidence_invalidated": [],
                       "evidence_preserved": [], "decision": "authorized",
                       "resource_impact": {"declared": 0.01, "unit": "usd"}})
            }
            (_, 14..=15) => json!({"type": "observation", "trust": "asserted",
            "statement": if i % 2 == 0 && last_adaptation > 0 {
                format!("RESERVATION: seq-{last_adaptation}: released")
            } else {
                format!("LIMIT: {} gate_retries: n{i}",
                        if i % 4 < 2 { "exhausted" } else { "recovered" })
            }}),
            (_, 16..=17) => json!({"type": "refusal", "subject": format!("dispatch {task}"),
                                   "stage": "dispatch", "reason": format!("attempt {i}")}),
            _ => json!({"type": "observation", "trust": "asserted",
                        "statement": format!("note {i}")}),
        };
        for (k, v) in extra.as_object().unwrap() {
            e[k.as_str()] = v.clone();
        }
        journal.push_str(&kxen::canonical::to_compact(&e));
        journal.push('\n');
    }
    std::fs::write(dir.join("journal.ndjson"), journal).unwrap();
    dir
}

fn best_of(runs: usize, mut f: impl FnMut()) -> Duration {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .min()
        .unwrap()
}

fn floor(dir: &Path) -> usize {
    let text = std::fs::read_to_string(dir.join("journal.ndjson")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v.is_object())
        .count()
}

fn report_lib(dir: &Path, abilities: &Abilities) -> usize {
    let plan = Plan::open(dir).unwrap();
    let contract = plan.contract().unwrap();
    let journal = journal::read(&plan.dir, &contract).unwrap();
    let report = report::build(&contract, &journal.events, abilities);
    kxen::canonical::to_pretty(&report.to_json()).len()
}

fn dwp_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe.parent().unwrap().parent().unwrap();
    target.join(format!("dwp{}", std::env::consts::EXE_SUFFIX))
}

fn report_cli(dwp: &Path, dir: &Path, home: &Path) {
    let status = Command::new(dwp)
        .args([
            "resources",
            "report",
            "--host-only",
            "--caps",
            r#"{"meter_spend": true}"#,
        ])
        .arg("--plan")
        .arg(dir)
        .env("HOME", home)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
}

fn main() {
    let sizes: Vec<usize> = std::env::var("DWP_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .map(|s| {
            s.trim()
                .parse()
                .expect("DWP_BENCH_SIZES: comma-separated integers")
        })
        .collect();
    let abilities = Abilities {
        values: BTreeMap::from([("meter_spend".to_string(), true)]),
        sources: BTreeMap::new(),
    };
    let dwp = dwp_binary();
    println!("events     floor (serde_json)   report (lib)   ratio   report (CLI)   ratio");
    for n in sizes {
        let tmp = tempfile::tempdir().unwrap();
        let dir = generate(tmp.path(), n);
        if let Some(keep) = std::env::var_os("DWP_BENCH_KEEP") {
            // Keep the generated plan (for profiling the CLI on it) and stop.
            let to = PathBuf::from(keep).join(n.to_string());
            std::fs::rename(tmp.path(), &to).unwrap();
            println!(
                "kept {}",
                to.join(dir.strip_prefix(tmp.path()).unwrap()).display()
            );
            return;
        }
        let home = tmp.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        let runs = if n >= 1_000_000 { 3 } else { 7 };
        assert_eq!(floor(&dir), n);
        // Warm the page cache and check the report once.
        assert!(report_lib(&dir, &abilities) > 0);
        let f = best_of(runs, || {
            std::hint::black_box(floor(&dir));
        });
        let r = best_of(runs, || {
            std::hint::black_box(report_lib(&dir, &abilities));
        });
        let read_only = best_of(runs, || {
            let plan = Plan::open(&dir).unwrap();
            let contract = plan.contract().unwrap();
            std::hint::black_box(journal::read(&plan.dir, &contract).unwrap().events.len());
        });
        let plan = Plan::open(&dir).unwrap();
        let contract = plan.contract().unwrap();
        let events = journal::read(&plan.dir, &contract).unwrap().events;
        let build_only = best_of(runs, || {
            std::hint::black_box(report::build(&contract, &events, &abilities).rows.len());
        });
        println!(
            "{n:>9}   of which: validated journal read {:.1} ms, report build {:.1} ms",
            read_only.as_secs_f64() * 1000.0,
            build_only.as_secs_f64() * 1000.0
        );
        let cli = if dwp.is_file() {
            Some(best_of(runs, || report_cli(&dwp, &dir, &home)))
        } else {
            None
        };
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let cli_text = cli.map_or("   (no dwp binary)".to_string(), |c| {
            format!("{:>10.1} ms   {:>5.2}x", ms(c), ms(c) / ms(f))
        });
        println!(
            "{n:>9}   {:>12.1} ms   {:>9.1} ms   {:>5.2}x   {cli_text}",
            ms(f),
            ms(r),
            ms(r) / ms(f)
        );
    }
}
