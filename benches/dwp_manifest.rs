//! `dwp manifest` against the floor: a plain read-and-parse of the same journal with serde_json.
//!
//! Generates a plan with 10 tasks (20 criteria, 4 invariants) and N journal events — gate runs
//! (passing and failing, with run fingerprints in evidence.jsonl), observations (invariant and
//! LIMIT grammars), refusals, resource samples and selections — then times, best of several runs:
//! - floor: read journal.ndjson and parse every line into a `serde_json::Value`;
//! - manifest (library): load + validate the records, derive one task's manifest, serialize it;
//! - manifest (CLI): the `dwp manifest` binary end to end, stdout to /dev/null.
//!
//! `DWP_BENCH_KEEP=DIR` writes the first size's plan under DIR, prints its path and stops (to
//! profile the CLI on it).
//!
//! Run: `cargo bench --bench dwp_manifest` (sizes via `DWP_BENCH_SIZES=10000,100000,1000000`;
//! default 10000,100000).

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const PLAN: &str = "PLAN_bench_manifest_plan";

fn contract() -> Value {
    let criteria: Vec<Value> = (0..20)
        .map(|i| {
            let mut c = json!({
                "id": format!("AC-c{i}"),
                "statement": format!("criterion {i}"),
                "observable_check": "cargo test",
                "accepted_evidence": ["observed", "imported"],
            });
            if i % 5 == 0 {
                c["control"] = json!({"kind": "regression", "rationale": "bench"});
            }
            c
        })
        .collect();
    let tasks: Vec<Value> = (0..10)
        .map(|t| {
            json!({
                "id": format!("T-t{t}"),
                "title": format!("task {t}"),
                "prerequisites": if t == 0 { json!([]) } else { json!([format!("T-t{}", t - 1)]) },
                "touched_surface": [format!("src/t{t}.rs"), "docs"],
                "gate_intent": [
                    {"criterion": format!("AC-c{}", 2 * t), "check": "cargo test a"},
                    {"criterion": format!("AC-c{}", 2 * t + 1), "check": "cargo test b"},
                ],
            })
        })
        .collect();
    json!({
        "schema": "https://deepworkplan.com/schema/plan-contract/v7.json",
        "spec_version": "7.0.0",
        "plan": PLAN,
        "revision": 1,
        "created_at": "2026-01-01T00:00:00Z",
        "outcome": {"statement": "s", "success_definition": "d", "out_of_scope": ["x"]},
        "acceptance": {"criteria": criteria},
        "invariants": [
            {"id": "INV-a", "statement": "a"}, {"id": "INV-b", "statement": "b"},
            {"id": "INV-c", "statement": "c"}, {"id": "INV-d", "statement": "d"},
        ],
        "scope": {"allowed_paths": ["src/"], "allowed_command_classes": ["cargo"],
                  "forbidden_operations": ["rm -rf"]},
        "authorization": {"mechanism": "plan_authorship", "authority": "dev",
                          "timestamp": "2026-01-01T00:00:00Z", "boundaries": "b",
                          "consent_checkpoints": []},
        "permissions": {"granted": ["gate_command_exec"], "not_granted": []},
        "dependencies": [],
        "resource_envelope": {"limits": [
            {"id": "spend_usd", "limit": 50.0, "unit": "usd", "enforcement": "enforced",
             "metering_source": "host", "reserve": 5.0},
            {"id": "retries", "limit": 1000, "unit": "retries", "enforcement": "enforced",
             "metering_source": "journal"},
        ]},
        "tasks": tasks,
    })
}

/// Writes the plan folder (inside a small repo) and returns its path.
fn generate(root: &Path, n: usize) -> PathBuf {
    let dir = root.join(".dwp/plans").join(PLAN);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    for t in 0..10 {
        std::fs::write(root.join(format!("src/t{t}.rs")), format!("// task {t}\n")).unwrap();
    }
    std::fs::write(root.join("docs/readme.md"), "docs\n").unwrap();
    let c = contract();
    let id = kxen::canonical::hash_hex(&c);
    std::fs::write(
        dir.join("contract.json"),
        kxen::canonical::to_pretty(&c) + "\n",
    )
    .unwrap();
    let mut journal = String::with_capacity(n * 330);
    let mut evidence = String::new();
    for i in 0..n {
        let seq = i as u64 + 1;
        let task = format!("T-t{}", i % 10);
        let criterion = format!("AC-c{}", 2 * (i % 10) + (i / 10) % 2);
        let mut e = json!({
            "schema": "https://deepworkplan.com/schema/journal-event/v7.json",
            "seq": seq,
            "ts": kxen::clock::format_seconds(1_767_225_600 + i as i64 * 3),
            "plan": PLAN,
            "contract_id": id,
            "actor": {"kind": "helper", "identity": "dwp-ledger/7.0"},
        });
        let extra = match (i, i % 20) {
            (0, _) => {
                json!({"type": "approval", "authority": "dev", "mechanism": "plan_authorship",
                              "plan_digest": "d"})
            }
            (1..=10, _) => json!({"type": "task_start", "task": format!("T-t{}", i - 1)}),
            (_, 0..=7) => {
                let code = if i % 3 == 0 { 0 } else { 1 };
                evidence.push_str(&format!(
                    "{{\"run_fingerprint\":\"fp-{}\",\"seq\":{seq}}}\n",
                    i % 5000
                ));
                json!({"type": "gate_run", "command": "cargo test", "cwd": ".",
                       "timeout_seconds": 600, "exit_code": code, "task": task,
                       "criterion": criterion, "trust": "observed",
                       "evidence_path": format!("gates/{task}/{seq}.log")})
            }
            (_, 8..=11) => json!({"type": "observation", "trust": "asserted",
                "statement": match i % 4 { 0 => "INV-a: pass".to_string(),
                                           1 => "INV-b: fail: broke".to_string(),
                                           2 => "LIMIT: exhausted retries: hit".to_string(),
                                           _ => format!("note {i}") }}),
            (_, 12..=13) => json!({"type": "refusal", "subject": format!("dispatch {task}"),
                                   "stage": "dispatch", "reason": format!("attempt {i}")}),
            (_, 14..=16) => {
                e["actor"] = json!({"kind": "host_adapter", "identity": "kxen-agent"});
                json!({"type": "resource_sample", "source": "meter", "limit_id": "spend_usd",
                       "value": (i as f64) / 1000.0, "unit": "usd", "trust": "observed",
                       "evidence_path": "analysis_results/spend.json"})
            }
            _ => json!({"type": "selection", "task": task, "priority_boost": false}),
        };
        for (k, v) in extra.as_object().unwrap() {
            e[k.as_str()] = v.clone();
        }
        journal.push_str(&kxen::canonical::to_compact(&e));
        journal.push('\n');
    }
    std::fs::write(dir.join("journal.ndjson"), journal).unwrap();
    std::fs::write(dir.join("evidence.jsonl"), evidence).unwrap();
    dir
}

fn best(runs: usize, mut f: impl FnMut()) -> Duration {
    f(); // warm the page cache
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .min()
        .unwrap()
}

fn main() {
    let sizes: Vec<usize> = std::env::var("DWP_BENCH_SIZES")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let exe = env!("CARGO_BIN_EXE_dwp");
    println!(
        "{:>9} {:>10} {:>12} {:>8} {:>12} {:>8} {:>10}",
        "events", "MiB", "floor ms", "", "manifest ms", "ratio", "cli ms"
    );
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
        let journal = dir.join("journal.ndjson");
        let mib = std::fs::metadata(&journal).unwrap().len() as f64 / (1024.0 * 1024.0);
        let runs = if n >= 1_000_000 { 3 } else { 7 };
        let floor = best(runs, || {
            let text = std::fs::read_to_string(&journal).unwrap();
            let mut count = 0usize;
            for line in text.lines() {
                let v: Value = serde_json::from_str(line).unwrap();
                count += v.as_object().map_or(0, |m| m.len());
            }
            std::hint::black_box(count);
        });
        let mut bytes = 0usize;
        let manifest = best(runs, || {
            let records = kxen::dwp::manifest::Records::load(&dir).unwrap();
            let doc = kxen::dwp::manifest::derive(&records, "T-t3", None).unwrap();
            bytes = kxen::dwp::manifest::to_bytes(&doc).len();
        });
        if std::env::var_os("DWP_BENCH_PROFILE_READ").is_some() {
            let plan = kxen::dwp::plan::Plan::open(&dir).unwrap();
            let contract = plan.contract().unwrap();
            for _ in 0..5 {
                let j = kxen::dwp::plan::journal::read(&dir, &contract).unwrap();
                std::hint::black_box(j.events.len());
            }
            return;
        }
        if std::env::var_os("DWP_BENCH_BREAKDOWN").is_some() {
            let keep = best(runs, || {
                let f = kxen::fsx::read_jsonl_values(&journal).unwrap();
                std::hint::black_box(f.records.len());
            });
            let plan = kxen::dwp::plan::Plan::open(&dir).unwrap();
            let contract = plan.contract().unwrap();
            let read = best(runs, || {
                let j = kxen::dwp::plan::journal::read(&dir, &contract).unwrap();
                std::hint::black_box(j.events.len());
            });
            let records = kxen::dwp::manifest::Records::load(&dir).unwrap();
            let derive = best(runs, || {
                let doc = kxen::dwp::manifest::derive(&records, "T-t3", None).unwrap();
                std::hint::black_box(doc);
            });
            let ms = |d: Duration| d.as_secs_f64() * 1000.0;
            println!(
                "  breakdown: parse+keep {:.1} ms, parse+validate+keep {:.1} ms, derive {:.1} ms",
                ms(keep),
                ms(read),
                ms(derive)
            );
        }
        let cli = best(runs, || {
            let status = Command::new(exe)
                .args(["manifest", "--plan"])
                .arg(&dir)
                .args(["--task", "T-t3"])
                .stdout(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success());
        });
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "{n:>9} {mib:>10.1} {:>12.1} {:>8} {:>12.1} {:>7.2}x {:>10.1}   (manifest {bytes} bytes)",
            ms(floor),
            "",
            ms(manifest),
            ms(manifest) / ms(floor),
            ms(cli)
        );
    }
}
