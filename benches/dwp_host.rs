//! The cost a plan run adds per model call (issue 18): `PlanHost::before_call` — the meter of
//! the previous call (one durable append to the run's meter artifact, then one fsync'd group
//! append of the token and USD samples under the plan's writer lock) and the limit check (the
//! same report/hold code as `dwp resources`, over counters folded incrementally) — on a plan
//! whose journal already holds N events (default 10,000).
//!
//! Floor: two fsync'd appends of a journal-sized line to a file in the same directory (the
//! issue's target is at most that plus 5 ms per call). Also shown: opening the host (the one
//! full journal read of a run), how many appends and whole-journal reads the calls made, a
//! check after another writer appended (only the new line is read), and one after an in-place
//! change (the whole journal is read again).
//!
//! Run: `cargo bench --bench dwp_host` (`DWP_HOST_BENCH_EVENTS=N`, `DWP_HOST_BENCH_CALLS=M`);
//! `strace -f -c -e trace=fsync,fdatasync` over it counts 2 fdatasyncs per metered call (plus
//! the floor's 2 per call, one for the foreign append and a few directory fsyncs).

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kxen::host::abilities::Metering;
use kxen::host::{PlanBinding, PlanHost};
use kxen::provider::config::Price;
use kxen::session::UsageRecord;
use serde_json::{Value, json};

const PLAN: &str = "PLAN_bench_host";
const SCHEMA: &str = "https://deepworkplan.com/schema/journal-event/v7.json";

fn contract() -> Value {
    json!({
        "schema": "https://deepworkplan.com/schema/plan-contract/v7.json",
        "spec_version": "7.0.0", "plan": PLAN, "revision": 1,
        "created_at": "2026-01-01T00:00:00Z",
        "outcome": {"statement": "s", "success_definition": "d", "out_of_scope": ["x"]},
        "acceptance": {"criteria": [{"id": "AC-a", "statement": "a", "observable_check": "true",
            "accepted_evidence": ["observed"]}]},
        "invariants": [{"id": "INV-a", "statement": "a"}],
        "scope": {"allowed_paths": ["src/"], "allowed_command_classes": ["cargo"],
                  "forbidden_operations": ["rm -rf"]},
        "authorization": {"mechanism": "plan_authorship", "authority": "dev",
                          "timestamp": "2026-01-01T00:00:00Z", "boundaries": "b",
                          "consent_checkpoints": []},
        "permissions": {"granted": [], "not_granted": []},
        "dependencies": [],
        "resource_envelope": {"limits": [
            {"id": "tokens", "limit": 1_000_000_000_000u64, "unit": "tokens",
             "enforcement": "enforced", "metering_source": "host adapter"},
            {"id": "spend_usd", "limit": 1.0e9, "unit": "usd", "enforcement": "enforced",
             "metering_source": "host adapter", "reserve": 5.0},
            {"id": "wall_hours", "limit": 1_000_000, "unit": "hours", "enforcement": "enforced",
             "metering_source": "journal ts span"},
            {"id": "dispatch_calls", "limit": 100_000_000, "unit": "calls",
             "enforcement": "enforced", "metering_source": "journal selections"},
        ]},
        "tasks": [{"id": "T-a", "title": "a", "prerequisites": [], "touched_surface": ["src/a.rs"],
                   "parallel_safe": true, "gate_intent": [{"criterion": "AC-a", "check": "true"}]}],
    })
}

/// A plan folder whose journal holds `n` events (approval, task start, then selections,
/// observations and asserted samples).
fn write_plan(root: &Path, n: usize) -> PathBuf {
    let dir = root.join(".dwp/plans").join(PLAN);
    std::fs::create_dir_all(&dir).unwrap();
    let contract = contract();
    let id = kxen::dwp::plan::contract::compute_id(contract.as_object().unwrap());
    std::fs::write(
        dir.join("manifest.json"),
        json!({"contract": {"id": id, "path": "contract.json"}, "plan": PLAN,
               "schema": "https://deepworkplan.com/schema/plan-manifest/v7.json"})
        .to_string(),
    )
    .unwrap();
    std::fs::write(dir.join("contract.json"), contract.to_string()).unwrap();
    let mut out = String::new();
    let now = kxen::clock::now_millis() / 1000;
    for seq in 1..=n as u64 {
        let ts = kxen::clock::format_seconds(now - 3600 + (seq as i64 * 3600 / n as i64));
        let mut e = json!({"schema": SCHEMA, "seq": seq, "ts": ts, "plan": PLAN,
                           "contract_id": id, "actor": {"kind": "agent", "identity": "caller"}});
        match seq {
            1 => {
                e["type"] = json!("approval");
                e["actor"] = json!({"kind": "human", "identity": "dev"});
                e["authority"] = json!("dev");
                e["mechanism"] = json!("plan_authorship");
                e["plan_digest"] = json!("e".repeat(64));
            }
            2 => {
                e["type"] = json!("task_start");
                e["task"] = json!("T-a");
            }
            _ if seq % 3 == 0 => {
                e["type"] = json!("selection");
                e["task"] = json!("T-a");
                e["priority_boost"] = json!(false);
            }
            _ if seq % 3 == 1 => {
                e["type"] = json!("observation");
                e["statement"] = json!(format!("note {seq}: the build is green"));
                e["trust"] = json!("asserted");
            }
            _ => {
                e["type"] = json!("resource_sample");
                e["source"] = json!("estimate");
                e["limit_id"] = json!("tokens");
                e["value"] = json!(seq);
                e["unit"] = json!("tokens");
                e["trust"] = json!("asserted");
            }
        }
        out.push_str(&kxen::canonical::to_compact(&e));
        out.push('\n');
    }
    std::fs::write(dir.join("journal.ndjson"), out).unwrap();
    dir
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let events = env_usize("DWP_HOST_BENCH_EVENTS", 10_000);
    let calls = env_usize("DWP_HOST_BENCH_CALLS", 100);
    let tmp =
        tempfile::tempdir_in(std::env::var_os("TMPDIR").unwrap_or_else(|| "/tmp".into())).unwrap();
    let dir = write_plan(tmp.path(), events);
    let binding = PlanBinding {
        dir: dir.clone(),
        plan: PLAN.into(),
        task: "T-a".into(),
        contract_id: String::new(),
        inputs_fingerprint: String::new(),
    };
    let abilities: BTreeMap<String, bool> = kxen::dwp::config::ABILITIES
        .iter()
        .map(|a| (a.to_string(), a.starts_with("meter") || *a == "stop_agent"))
        .collect();
    let metering = Metering {
        provider: "bench".into(),
        reports_usage: true,
        price: Some(Price {
            input_per_million: 3.0,
            output_per_million: 15.0,
            cache_read_per_mtok: None,
            cache_write_per_mtok: None,
            currency: "USD".into(),
        }),
    };

    let t = Instant::now();
    let mut host = PlanHost::open(binding, &abilities, metering, UsageRecord::default()).unwrap();
    let open = t.elapsed();

    // One model call = the check before it (which first samples the previous call's usage,
    // now durable: the meter record's durable append, then one fsync'd group append of the
    // token and USD samples) and the after-call look at its usage (no write).
    let mut usage = UsageRecord::default();
    let mut per_call = Vec::with_capacity(calls);
    let live = dir.join("journal.ndjson");
    let lines_before = line_count(&live);
    for call in 1..=calls as u64 {
        let t = Instant::now();
        assert!(
            host.before_call("run_bench", call - 1, usage)
                .unwrap()
                .is_none()
        );
        let call_usage = UsageRecord {
            input_tokens: 900,
            output_tokens: 100,
            ..Default::default()
        };
        usage.add(call_usage);
        assert!(
            host.after_call("run_bench", call, Some(call_usage))
                .is_none()
        );
        per_call.push(t.elapsed());
    }
    host.before_final("run_bench", calls as u64, usage).unwrap();
    let appended = line_count(&live) - lines_before;
    let artifact = dir.join("analysis_results/kxen-agent-meter/run_bench.ndjson");
    let records = line_count(&artifact);
    let reads_after_calls = host.full_reads();
    let (mean, p50, worst) = stats(&mut per_call);

    // Another writer appends an event: only the new line is read and folded.
    let contract = kxen::dwp::plan::Plan::open(&dir)
        .unwrap()
        .contract()
        .unwrap();
    let plan = kxen::dwp::plan::Plan::open(&dir).unwrap();
    let mut payload = serde_json::Map::new();
    payload.insert("task".into(), json!("T-a"));
    payload.insert("priority_boost".into(), json!(false));
    kxen::dwp::plan::writer::append(
        &plan,
        &contract,
        kxen::dwp::plan::writer::NewEvent {
            kind: "selection".into(),
            actor_kind: "agent".into(),
            actor_identity: "caller".into(),
            ts: kxen::clock::format_seconds(kxen::clock::now_millis() / 1000),
            payload,
        },
    )
    .unwrap();
    let t = Instant::now();
    host.before_call("run_bench", calls as u64, usage).unwrap();
    let foreign = t.elapsed();
    let reads_after_foreign = host.full_reads();

    // A file that changed in place (same length, new mtime): the journal is read again.
    filetime_touch(&live);
    let t = Instant::now();
    host.before_call("run_bench", calls as u64, usage).unwrap();
    let reread = t.elapsed();

    // Floor: two fsync'd appends of a sample-sized line.
    let line = std::fs::read_to_string(&live)
        .unwrap()
        .lines()
        .last()
        .unwrap()
        .to_string();
    let floor_file = dir.join("floor.ndjson");
    let mut floor = Duration::ZERO;
    for _ in 0..calls {
        let t = Instant::now();
        kxen::fsx::append_line(&floor_file, &line).unwrap();
        kxen::fsx::append_line(&floor_file, &line).unwrap();
        floor += t.elapsed();
    }
    let per_floor = floor / calls as u32;
    println!("plan journal: {events} events; {calls} model calls metered");
    println!("open (one full journal read):        {:8.2} ms", ms(open));
    println!(
        "added per model call (check + meter): {:8.3} ms mean, {:.3} ms median, {:.3} ms worst",
        ms(mean),
        ms(p50),
        ms(worst)
    );
    println!(
        "floor: 2 fsync'd appends per call:   {:8.3} ms",
        ms(per_floor)
    );
    println!(
        "added minus floor:                   {:8.3} ms (target <= 5 ms)",
        ms(mean) - ms(per_floor)
    );
    println!(
        "durable appends for {calls} calls and the final sample: {records} meter records + \
         {records} sample groups ({appended} journal lines): 2 fdatasyncs per metered call"
    );
    println!(
        "whole-journal reads: {reads_after_calls} for the run's calls, {reads_after_foreign} after a foreign append"
    );
    println!(
        "check after a foreign append (tail read): {:.3} ms",
        ms(foreign)
    );
    println!(
        "check after an in-place change (whole re-read): {:.2} ms",
        ms(reread)
    );
    assert_eq!(reads_after_calls, 1, "no whole re-read per call");
    assert_eq!(reads_after_foreign, 1, "a foreign append is read as a tail");
}

fn line_count(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |s| s.lines().count())
}

/// Mean, median and worst of the per-call times.
fn stats(times: &mut [Duration]) -> (Duration, Duration, Duration) {
    times.sort();
    let sum: Duration = times.iter().sum();
    (
        sum / times.len().max(1) as u32,
        times[times.len() / 2],
        *times.last().unwrap(),
    )
}

/// Moves the file's mtime forward (a foreign writer's append), so the tracked stamp differs.
fn filetime_touch(path: &Path) {
    let f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    let later = std::time::SystemTime::now() + Duration::from_secs(5);
    f.set_modified(later).unwrap();
}
