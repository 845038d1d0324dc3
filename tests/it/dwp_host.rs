//! kxen-agent as a DWP host (issue 18): `host abilities`, runs bound to a plan task, the host
//! meter's samples in the plan journal, limits that stop a run (exit 8) until
//! `dwp resources recover`, and `dwp accounting` over what the host recorded.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::env::{Run, TestEnv};
use crate::run_support::*;

pub const PLAN: &str = "PLAN_host_fixture";
const V7_JOURNAL: &str = "https://deepworkplan.com/schema/journal-event/v7.json";

/// A v7 contract with a token limit, a spend limit and a wall-clock limit.
pub fn contract(token_limit: u64, granted: &[&str]) -> Value {
    json!({
        "schema": "https://deepworkplan.com/schema/plan-contract/v7.json",
        "spec_version": "7.0.0", "plan": PLAN, "revision": 1,
        "created_at": "2026-01-01T00:00:00Z",
        "title": "Host fixture — metered",
        "outcome": {"statement": "s", "success_definition": "d", "out_of_scope": ["x"]},
        "acceptance": {"criteria": [{"id": "AC-readme", "statement": "README explains",
            "observable_check": "grep -q x README", "accepted_evidence": ["observed"]}]},
        "invariants": [{"id": "INV-a", "statement": "nothing else changes"}],
        "scope": {"allowed_paths": ["README"], "allowed_command_classes": ["grep"],
                  "forbidden_operations": ["rm -rf"]},
        "authorization": {"mechanism": "plan_authorship", "authority": "dev",
                          "timestamp": "2026-01-01T00:00:00Z", "boundaries": "b",
                          "consent_checkpoints": []},
        "permissions": {"granted": granted, "not_granted": []},
        "dependencies": [],
        "resource_envelope": {"limits": [
            {"id": "tokens", "limit": token_limit, "unit": "tokens", "enforcement": "enforced",
             "metering_source": "host adapter"},
            {"id": "spend_usd", "limit": 100.0, "unit": "usd", "enforcement": "enforced",
             "metering_source": "host adapter"},
            {"id": "wall_hours", "limit": 1000, "unit": "hours", "enforcement": "enforced",
             "metering_source": "journal ts span"},
        ]},
        "tasks": [{"id": "T-docs", "title": "Document the repo", "prerequisites": [],
                   "touched_surface": ["README"], "parallel_safe": true,
                   "gate_intent": [{"criterion": "AC-readme", "check": "grep -q x README"}]}],
    })
}

/// Writes the plan folder into `repo` (manifest, unstamped contract, approval and task start)
/// and returns it.
pub fn write_plan(repo: &Path, contract: &Value) -> PathBuf {
    let dir = repo.join(".dwp/plans").join(PLAN);
    std::fs::create_dir_all(&dir).unwrap();
    let id = kxen::dwp::plan::contract::compute_id(contract.as_object().unwrap());
    std::fs::write(
        dir.join("manifest.json"),
        format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({"contract": {"id": id, "path": "contract.json"},
                "plan": PLAN, "schema": "https://deepworkplan.com/schema/plan-manifest/v7.json"}))
            .unwrap()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("contract.json"),
        serde_json::to_string_pretty(contract).unwrap(),
    )
    .unwrap();
    // Recent, so the wall-clock limit measures the run, not the fixture's age.
    let now = kxen::clock::format_seconds(kxen::clock::now_millis() / 1000 - 60);
    let envelope = |seq: u64, kind: &str, actor: Value, ts: &str| {
        json!({"schema": V7_JOURNAL, "type": kind, "seq": seq, "ts": ts, "plan": PLAN,
               "contract_id": id, "actor": actor})
    };
    let mut approval = envelope(
        1,
        "approval",
        json!({"kind": "human", "identity": "developer"}),
        &now,
    );
    approval["authority"] = json!("dev");
    approval["mechanism"] = json!("plan_authorship");
    approval["plan_digest"] = json!("e".repeat(64));
    let mut start = envelope(
        2,
        "task_start",
        json!({"kind": "agent", "identity": "caller"}),
        &now,
    );
    start["task"] = json!("T-docs");
    let lines: String = [approval, start]
        .iter()
        .map(|e| format!("{}\n", kxen::canonical::to_compact(e)))
        .collect();
    std::fs::write(dir.join("journal.ndjson"), lines).unwrap();
    dir
}

/// A turn reading file `f<i>` with the given usage (distinct calls: no loop detection).
fn read_turn(i: usize, input: u64, output: u64) -> Value {
    json!({"text": "", "toolCalls": [{"id": format!("c{i}"), "name": "read",
           "arguments": {"path": format!("f{i}")}}],
           "usage": {"inputTokens": input, "outputTokens": output}})
}

/// A config whose script reports usage (or not), priced or not.
fn config(env: &TestEnv, turns: &[Value], price: bool) -> PathBuf {
    let config = script_config(env, turns);
    if price {
        let mut text = std::fs::read_to_string(&config).unwrap();
        text = text.replace(
            "\n\n[roles]",
            "\n[providers.script.price]\ninput_per_million = 3.0\noutput_per_million = 15.0\ncurrency = \"USD\"\n\n[roles]",
        );
        std::fs::write(&config, text).unwrap();
    }
    config
}

fn reader(env: &TestEnv) -> PathBuf {
    agent(
        env,
        "reader",
        "read",
        "",
        "{format: text, requiredFields: []}",
    )
}

pub fn journal_lines(plan: &Path) -> Vec<String> {
    std::fs::read_to_string(plan.join("journal.ndjson"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn events(plan: &Path) -> Vec<Value> {
    journal_lines(plan)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn samples(plan: &Path, unit: &str) -> Vec<Value> {
    events(plan)
        .into_iter()
        .filter(|e| e["type"] == "resource_sample" && e["unit"] == unit)
        .collect()
}

/// The values of the plan's `tokens` samples, in journal order.
fn token_values(plan: &Path) -> Vec<u64> {
    samples(plan, "tokens")
        .iter()
        .map(|s| s["value"].as_u64().unwrap())
        .collect()
}

fn limit_lines(plan: &Path) -> Vec<String> {
    events(plan)
        .into_iter()
        .filter_map(|e| e["statement"].as_str().map(str::to_string))
        .filter(|s| s.starts_with("LIMIT: "))
        .collect()
}

/// The meter record a sample cites: the line its `source` names of the artifact its
/// `evidence_path` names (which exists: it was written first).
fn meter_record(plan: &Path, sample: &Value) -> Value {
    let path = plan.join(sample["evidence_path"].as_str().unwrap());
    let source = sample["source"].as_str().unwrap();
    let line: usize = source
        .rsplit_once("meter record line ")
        .unwrap()
        .1
        .parse()
        .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let record: Value = serde_json::from_str(text.lines().nth(line - 1).unwrap()).unwrap();
    assert_eq!(record["schema"], "kxen-agent/meter-record/v2");
    assert_eq!(
        record["run_id"].as_str().unwrap(),
        path.file_stem().unwrap().to_str().unwrap()
    );
    let cited = record["samples"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["unit"] == sample["unit"] && c["value"] == sample["value"]);
    assert!(cited, "{record} does not hold {sample}");
    record
}

/// The cumulative tokens of a meter record the sample belongs to.
fn tokens_of(_sample: &Value, record: &Value) -> Value {
    record["cumulative"]["tokens"].clone()
}

/// The reference's rules for every line: compact canonical (sorted keys, `,`/`:`), ASCII only,
/// seq one above the previous; and `dwp` reads the whole plan.
pub fn assert_journal_valid(env: &TestEnv, plan: &Path) {
    let mut last = 0;
    for line in journal_lines(plan) {
        assert!(line.is_ascii(), "{line}");
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(kxen::canonical::to_compact(&v), line, "not canonical");
        let seq = v["seq"].as_u64().unwrap();
        assert_eq!(seq, last + 1, "{line}");
        last = seq;
    }
    let report = env.run(
        "dwp",
        &[
            "resources",
            "report",
            "--plan",
            plan.to_str().unwrap(),
            "--host-only",
        ],
    );
    report.expect(0);
}

fn kx(env: &TestEnv, args: &[&str]) -> Run {
    env.run("kxen-agent", args)
}

/// `kxen-agent run` of `agent` on `task` in `repo`, for plan task `T-docs` of `plan`; `extra`
/// flags (`--allow-shell`) go before the plan's.
fn plan_run(
    env: &TestEnv,
    repo: &Path,
    task: &str,
    agent: &Path,
    cfg: &Path,
    plan: &Path,
    extra: &[&str],
) -> std::process::Command {
    let mut cmd = env.cmd("kxen-agent");
    cmd.args(["run", "--workspace"])
        .arg(repo)
        .args(["--task", task, "--agent"])
        .arg(agent)
        .arg("--config")
        .arg(cfg)
        .args(extra)
        .arg("--plan")
        .arg(plan)
        .args(["--plan-task", "T-docs"]);
    cmd
}

/// `kxen-agent --resume session` for plan task `T-docs` of `plan`, with `extra` flags.
fn plan_resume(env: &TestEnv, session: &str, cfg: &Path, plan: &Path, extra: &[&str]) -> Run {
    let mut cmd = env.cmd("kxen-agent");
    cmd.args(["--resume", session, "--config"])
        .arg(cfg)
        .args(extra)
        .arg("--plan")
        .arg(plan)
        .args(["--plan-task", "T-docs"]);
    Run::from(cmd.output().unwrap())
}

fn session_of(run: &Run) -> String {
    run.jsonl()
        .iter()
        .find(|e| e["type"] == "sessionCreated")
        .and_then(|e| e["sessionId"].as_str())
        .unwrap()
        .to_string()
}

fn model_calls(env: &TestEnv, session: &str) -> usize {
    let show = kx(env, &["session", "show", session]);
    show.expect(0);
    show.jsonl()[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .count()
}

#[test]
fn host_abilities_for_four_configs_are_valid_caps_for_dwp() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let plan = write_plan(&repo, &contract(300, &["agent_delegation"]));
    let dir = env.path().join("cfgs");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("usage.jsonl"),
        "{\"text\":\"a\",\"usage\":{\"inputTokens\":1,\"outputTokens\":1}}\n",
    )
    .unwrap();
    std::fs::write(dir.join("plain.jsonl"), "{\"text\":\"a\"}\n").unwrap();
    let price = "[providers.P.price]\ninput_per_million = 1.5\noutput_per_million = 6.0\ncurrency = \"USD\"\n";
    let cases: Vec<(&str, String, &[&str], Value)> = vec![
        (
            "script without usage, default policy",
            "[providers.s]\nkind = \"script\"\npath = \"plain.jsonl\"\n[roles]\nexecution = \"s\"\nplanning = \"s\"\n".into(),
            &[],
            json!({"stop_agent": true, "meter_spend": false, "meter_tokens": false,
                   "meter_wall_clock": true, "cancel_children": false, "model_routing": false,
                   "subagents": false, "telemetry": false}),
        ),
        (
            "priced script with usage, --allow-shell (task permitted)",
            format!(
                "[providers.P]\nkind = \"script\"\npath = \"usage.jsonl\"\n{price}[roles]\nexecution = \"P\"\nplanning = \"P\"\n"
            ),
            &["--allow-shell"],
            json!({"stop_agent": true, "meter_spend": true, "meter_tokens": true,
                   "meter_wall_clock": true, "cancel_children": true, "model_routing": false,
                   "subagents": true, "telemetry": false}),
        ),
        (
            "two openai models for execution and planning, unpriced",
            "[providers.big]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"big\"\n[providers.small]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"small\"\n[roles]\nexecution = \"small\"\nplanning = \"big\"\n".into(),
            &[],
            json!({"stop_agent": true, "meter_spend": false, "meter_tokens": true,
                   "meter_wall_clock": true, "cancel_children": false, "model_routing": true,
                   "subagents": false, "telemetry": false}),
        ),
        (
            "priced command provider (no usage promised)",
            format!(
                "[providers.P]\nkind = \"command\"\nargv = [\"true\"]\n{price}[roles]\nexecution = \"P\"\nplanning = \"P\"\n"
            ),
            &["--allow-shell"],
            json!({"stop_agent": true, "meter_spend": false, "meter_tokens": false,
                   "meter_wall_clock": true, "cancel_children": true, "model_routing": false,
                   "subagents": true, "telemetry": false}),
        ),
    ];
    for (i, (what, text, flags, expected)) in cases.into_iter().enumerate() {
        let path = dir.join(format!("c{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let mut args = vec!["host", "abilities", "--config", path.to_str().unwrap()];
        args.extend_from_slice(flags);
        let out = kx(&env, &args);
        out.expect(0);
        let caps = out.stdout.trim().to_string();
        let got: Value = serde_json::from_str(&caps).unwrap();
        assert_eq!(got, expected, "{what}");
        // dwp takes it as --caps, for abilities and the resource report.
        let abilities = env.run(
            "dwp",
            &[
                "abilities",
                "--repo",
                repo.to_str().unwrap(),
                "--host-only",
                "--caps",
                &caps,
            ],
        );
        abilities.expect(0);
        let doc: Value = serde_json::from_str(&abilities.stdout).unwrap();
        assert_eq!(doc["abilities"], expected, "{what}");
        let report = env.run(
            "dwp",
            &[
                "resources",
                "report",
                "--plan",
                plan.to_str().unwrap(),
                "--host-only",
                "--caps",
                &caps,
            ],
        );
        report.expect(0);
        let doc: Value = serde_json::from_str(&report.stdout).unwrap();
        assert_eq!(doc["host_capabilities"], expected, "{what}");
        let tokens_mode = doc["limits"][0]["effective_mode"].as_str().unwrap();
        assert_eq!(
            tokens_mode.starts_with("advisory"),
            expected["meter_tokens"] == false,
            "{what}: {tokens_mode}"
        );
    }
    // An agent that does not ask for `task` gets no subagents, whatever the policy permits.
    let path = dir.join("c1.toml");
    let out = kx(
        &env,
        &[
            "host",
            "abilities",
            "--config",
            path.to_str().unwrap(),
            "--allow-shell",
            "--agent",
            reader(&env).to_str().unwrap(),
        ],
    );
    out.expect(0);
    let got: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(got["subagents"], false);
    assert_eq!(got["meter_spend"], true);
}

#[test]
fn a_token_limit_stops_the_run_at_the_right_call_and_recover_lets_it_finish() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let plan = write_plan(&repo, &contract(300, &[]));
    let plan_s = plan.to_str().unwrap().to_string();
    // 100 tokens per call: after call 3 the spent is 300 (at the ceiling: still dispatchable),
    // after call 4 it is 400, so call 5 is refused.
    let mut turns: Vec<Value> = (0..6).map(|i| read_turn(i, 80, 20)).collect();
    turns.push(json!({"text": "documented", "usage": {"inputTokens": 80, "outputTokens": 20}}));
    let cfg = config(&env, &turns, true);
    let agent = reader(&env);
    let run_args = [
        "run",
        "--workspace",
        repo.to_str().unwrap(),
        "--task",
        "Document the repo",
        "--agent",
        agent.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--plan",
        &plan_s,
        "--plan-task",
        "T-docs",
    ];
    // What `dwp manifest --md` says before the run is the run's first input after the task.
    let md = env.run(
        "dwp",
        &["manifest", "--plan", &plan_s, "--task", "T-docs", "--md"],
    );
    md.expect(0);
    let manifest = env.run("dwp", &["manifest", "--plan", &plan_s, "--task", "T-docs"]);
    let manifest: Value = serde_json::from_str(&manifest.stdout).unwrap();
    let first = kx(&env, &run_args);
    first.expect(8);
    assert!(
        first.stderr.contains("planLimitExhausted"),
        "{}",
        first.stderr
    );
    assert!(
        first.stderr.contains("dwp resources recover"),
        "{}",
        first.stderr
    );
    let session = session_of(&first);
    let stopped: Vec<Value> = first
        .jsonl()
        .into_iter()
        .filter(|e| e["type"] == "runStopped")
        .collect();
    assert_eq!(stopped.len(), 1);
    assert_eq!(stopped[0]["reason"], "planLimitExhausted");
    assert_eq!(stopped[0]["limit"], "tokens");
    assert_eq!(
        model_calls(&env, &session),
        4,
        "stopped before call 5, not later"
    );

    // The manifest was the run's first input, and the run record keeps plan and fingerprint.
    let show = kx(&env, &["session", "show", &session]);
    show.expect(0);
    let shown = &show.jsonl()[0];
    let task_message = shown["messages"][0]["content"].as_str().unwrap();
    assert_eq!(task_message, format!("Document the repo\n\n{}", md.stdout));
    let run = &shown["runs"][0];
    assert_eq!(run["plan"]["task"], "T-docs");
    assert_eq!(run["plan"]["plan"], PLAN);
    assert_eq!(run["planHold"], "tokens");
    assert_eq!(
        run["plan"]["inputsFingerprint"],
        manifest["freshness"]["inputs_fingerprint"]
    );

    let text = kx(&env, &["--format", "text", "session", "show", &session]);
    text.expect(0);
    assert!(
        text.stdout.contains(&format!("plan {PLAN} task T-docs"))
            && text.stdout.contains("inputs_fingerprint")
            && text.stdout.contains("stopped: plan limit tokens exhausted"),
        "{}",
        text.stdout
    );

    // Samples: cumulative tokens 100..400, USD alongside, each citing its artifact; one LIMIT.
    let tokens = token_values(&plan);
    assert_eq!(tokens, [100, 200, 300, 400]);
    for s in samples(&plan, "tokens")
        .iter()
        .chain(&samples(&plan, "USD"))
    {
        assert_eq!(s["actor"]["kind"], "host_adapter");
        assert!(
            s["actor"]["identity"]
                .as_str()
                .unwrap()
                .starts_with("kxen-agent/")
        );
        assert_eq!(s["trust"], "observed");
        let record = meter_record(&plan, s);
        assert_eq!(record["rates"]["currency"], "USD");
        assert_eq!(record["cumulative"]["tokens"], tokens_of(s, &record));
    }
    let usd = samples(&plan, "USD");
    assert_eq!(usd.len(), 4);
    assert_eq!(usd[3]["limit_id"], "spend_usd");
    // 4 calls of 80 in + 20 out at 3 / 15 USD per million.
    let expected = (320.0 * 3.0 + 80.0 * 15.0) / 1e6;
    assert!((usd[3]["value"].as_f64().unwrap() - expected).abs() < 1e-12);
    let limits = limit_lines(&plan);
    assert_eq!(limits.len(), 1, "{limits:?}");
    assert!(
        limits[0].starts_with("LIMIT: exhausted tokens: enforced limit 'tokens' over its dispatchable ceiling: spent 400 + pending 0.0 > 300"),
        "{}",
        limits[0]
    );
    assert_journal_valid(&env, &plan);
    env.run(
        "dwp",
        &["resources", "hold", "--plan", &plan_s, "--host-only"],
    )
    .expect(1);

    // Resume refuses while the hold stands (no model call, nothing appended).
    let before = journal_lines(&plan).len();
    let resume_args = [
        "--resume",
        &session,
        "--config",
        cfg.to_str().unwrap(),
        "--plan",
        &plan_s,
        "--plan-task",
        "T-docs",
    ];
    let refused = kx(&env, &resume_args);
    refused.expect(8);
    assert!(refused.stderr.contains("tokens") && refused.stderr.contains("dwp resources recover"));
    assert_eq!(journal_lines(&plan).len(), before);
    assert_eq!(model_calls(&env, &session), 4);
    // Without the plan, or with another task: exit 6.
    kx(
        &env,
        &["--resume", &session, "--config", cfg.to_str().unwrap()],
    )
    .expect(6);
    kx(
        &env,
        &[
            "--resume",
            &session,
            "--config",
            cfg.to_str().unwrap(),
            "--plan",
            &plan_s,
            "--plan-task",
            "T-other",
        ],
    )
    .expect(6);

    env.run(
        "dwp",
        &[
            "resources",
            "recover",
            "--plan",
            &plan_s,
            "--limit",
            "tokens",
            "--host-only",
        ],
    )
    .expect(0);
    let done = kx(&env, &resume_args);
    done.expect(0);
    assert_eq!(model_calls(&env, &session), 7);
    let tokens = token_values(&plan);
    assert_eq!(tokens, [100, 200, 300, 400, 500, 600, 700]);
    assert_eq!(
        limit_lines(&plan).len(),
        2,
        "exhausted once, recovered once"
    );
    assert_journal_valid(&env, &plan);

    // Accounting reads the host's samples and the event times.
    let acc = env.run("dwp", &["accounting", "--plan", &plan_s]);
    acc.expect(0);
    let acc: Value = serde_json::from_str(&acc.stdout).unwrap();
    assert_eq!(acc["provider_tokens"]["value"], 700);
    let cost = (560.0 * 3.0 + 140.0 * 15.0) / 1e6;
    assert!(
        (acc["cost_usd"]["value"].as_f64().unwrap() - cost).abs() < 1e-12,
        "{acc}"
    );
    assert!(acc["wall_clock_hours"]["value"].as_f64().is_some(), "{acc}");
    assert!(
        acc["cost_usd"]["source"]
            .as_str()
            .unwrap()
            .contains("kxen-agent")
    );
}

#[test]
fn a_provider_without_usage_leaves_the_token_limit_advisory_and_writes_no_sample() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let plan = write_plan(&repo, &contract(1, &[]));
    let turns = vec![
        json!({"text": "", "toolCalls": [{"id": "c0", "name": "read", "arguments": {"path": "README"}}]}),
        json!({"text": "done"}),
    ];
    let cfg = config(&env, &turns, true);
    let out = Run::from(
        plan_run(&env, &repo, "Document", &reader(&env), &cfg, &plan, &[])
            .output()
            .unwrap(),
    );
    out.expect(0);
    let warnings: Vec<String> = out
        .jsonl()
        .iter()
        .filter(|e| e["type"] == "warning")
        .map(|e| e["message"].as_str().unwrap().to_string())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("plan limit tokens") && w.contains("advisory")),
        "{warnings:?}"
    );
    assert!(samples(&plan, "tokens").is_empty());
    assert!(limit_lines(&plan).is_empty());
    assert_eq!(journal_lines(&plan).len(), 2, "nothing appended");
}

#[test]
fn a_kill_around_the_meter_neither_duplicates_nor_loses_usage() {
    for point in ["plan.meter.after-artifact", "plan.meter.after-sample"] {
        for skip in 0..4 {
            let env = TestEnv::new();
            let repo = env.git_repo("repo", &[("README", "x\n")]);
            let plan = write_plan(&repo, &contract(100_000, &[]));
            let mut turns: Vec<Value> = (0..3).map(|i| read_turn(i, 40, 10)).collect();
            turns.push(json!({"text": "done", "usage": {"inputTokens": 40, "outputTokens": 10}}));
            let cfg = config(&env, &turns, false);
            let mut cmd = plan_run(&env, &repo, "Document", &reader(&env), &cfg, &plan, &[]);
            cmd.env("KXEN_FAILPOINT", point)
                .env("KXEN_FAILPOINT_SKIP", skip.to_string());
            let crashed = Run::from(cmd.output().unwrap());
            assert_ne!(crashed.code, 0, "{point}/{skip}: not reached");
            let session = session_of(&crashed);
            let resumed = plan_resume(&env, &session, &cfg, &plan, &[]);
            resumed.expect(0);
            let tokens = token_values(&plan);
            assert_eq!(
                tokens.last(),
                Some(&200),
                "{point}/{skip}: usage lost: {tokens:?}"
            );
            let mut dedup = tokens.clone();
            dedup.dedup();
            assert_eq!(dedup, tokens, "{point}/{skip}: duplicate sample");
            assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
            assert_journal_valid(&env, &plan);
        }
    }
}

#[test]
fn task_is_refused_in_a_plan_run_without_the_delegation_grant() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let plan = write_plan(&repo, &contract(100_000, &[]));
    let turns = vec![
        json!({"text": "", "toolCalls": [{"id": "t1", "name": "task",
               "arguments": {"description": "check", "prompt": "look at README"}}],
               "usage": {"inputTokens": 1, "outputTokens": 1}}),
        json!({"text": "done", "usage": {"inputTokens": 1, "outputTokens": 1}}),
    ];
    let cfg = config(&env, &turns, false);
    let delegator = agent(
        &env,
        "delegator",
        "read",
        "task",
        "{format: text, requiredFields: []}",
    );
    let out = Run::from(
        plan_run(
            &env,
            &repo,
            "Delegate",
            &delegator,
            &cfg,
            &plan,
            &["--allow-shell"],
        )
        .output()
        .unwrap(),
    );
    out.expect(0);
    let finished: Vec<Value> = out
        .jsonl()
        .into_iter()
        .filter(|e| e["type"] == "toolFinished" && e["tool"] == "task")
        .collect();
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["isError"], true);
    let text = finished[0]["output"].as_str().unwrap();
    assert!(text.contains("agent_delegation"), "{text}");
}

/// The plan folder sits in the workspace here (as `dwp` lays it out): the agent's own tools must
/// not be a way to forge the host's samples or drop its LIMIT record. Every attempt is a tool
/// error the model reads; the journal holds only what the host appended, and stays valid.
#[test]
fn the_agents_tools_cannot_change_the_plan_folder_in_the_workspace() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let plan = write_plan(&repo, &contract(100_000, &[]));
    std::os::unix::fs::symlink(&plan, repo.join("plan-link")).unwrap();
    let rel = format!(".dwp/plans/{PLAN}");
    let forged = r#"{"seq":3,"type":"resource_sample","value":0}"#;
    let turns = vec![
        call(
            "w1",
            "write",
            json!({"path": format!("{rel}/journal.ndjson"), "content": forged}),
        ),
        call(
            "w2",
            "write",
            json!({"path": "plan-link/analysis_results/kxen-agent-meter/forged.json", "content": "{}"}),
        ),
        call(
            "e1",
            "edit",
            json!({"path": format!("{rel}/journal.ndjson"), "oldString": "approval", "newString": "x"}),
        ),
        call(
            "x1",
            "exec",
            json!({"command": format!(
                "echo '{forged}' >> {rel}/journal.ndjson; sed -i 1d plan-link/journal.ndjson; \
                 rm -rf {rel}/analysis_results; mv .dwp .dwp-aside; echo tried"
            )}),
        ),
        answer("done"),
    ];
    let cfg = config(&env, &turns, false);
    let out = Run::from(
        plan_run(
            &env,
            &repo,
            "Tamper",
            &fixer(&env),
            &cfg,
            &plan,
            &["--allow-shell"],
        )
        .output()
        .unwrap(),
    );
    out.expect(0);
    let finished: Vec<Value> = out
        .jsonl()
        .into_iter()
        .filter(|e| e["type"] == "toolFinished")
        .collect();
    assert_eq!(finished.len(), 4);
    for f in &finished[..3] {
        assert_eq!(f["isError"], true, "{f}");
        assert!(
            f["output"].as_str().unwrap().contains("DWP plan folder"),
            "{f}"
        );
    }
    let exec_out = finished[3]["output"].as_str().unwrap();
    assert!(exec_out.contains("tried"), "{exec_out}");
    assert!(exec_out.contains("Read-only file system"), "{exec_out}");
    // Only the host's own lines: the two of the fixture, then one sample per model call.
    let events = events(&plan);
    assert_eq!(events[0]["type"], "approval");
    assert!(
        events[2..]
            .iter()
            .all(|e| e["type"] == "resource_sample" && e["actor"]["kind"] == "host_adapter"),
        "{events:?}"
    );
    assert_eq!(samples(&plan, "tokens").len(), 5);
    assert!(!repo.join(".dwp-aside").exists());
    assert!(plan.join("analysis_results").is_dir());
    assert!(
        !plan
            .join("analysis_results/kxen-agent-meter/forged.json")
            .exists()
    );
    assert_journal_valid(&env, &plan);
}

/// The script of a plan run that delegates once: the parent calls `task`, the child reads and
/// answers, the parent answers. Usage per reply: parent 12 then 25, child 12 then 25 (74).
fn delegating_script(env: &TestEnv) -> PathBuf {
    let mut task = crate::task::tasks(&[("t1", "check readme", "look at README")]);
    task["usage"] = json!({"inputTokens": 10, "outputTokens": 2});
    config(
        env,
        &[
            task,
            crate::task::child(
                "check readme",
                call("r1", "read", json!({"path": "README"})),
            ),
            crate::task::child("check readme", answer("readme-ok")),
            answer("delegated"),
        ],
        false,
    )
}

fn delegations(plan: &Path) -> Vec<Value> {
    events(plan)
        .into_iter()
        .filter(|e| e["type"] == "delegation")
        .collect()
}

fn delegating_run(env: &TestEnv, repo: &Path, plan: &Path, cfg: &Path) -> std::process::Command {
    let delegator = crate::task::delegator(env, 12);
    plan_run(
        env,
        repo,
        "Delegate",
        &delegator,
        cfg,
        plan,
        &["--allow-shell"],
    )
}

fn resume_delegating(env: &TestEnv, session: &str, plan: &Path, cfg: &Path) -> Run {
    plan_resume(env, session, cfg, plan, &["--allow-shell"])
}

/// Exactly `launched` then `completed` for the one child, with the fields the spec asks for.
fn assert_one_completed_delegation(plan: &Path, what: &str) {
    let d = delegations(plan);
    let states: Vec<&str> = d.iter().map(|e| e["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["launched", "completed"], "{what}: {d:?}");
    assert_eq!(d[0]["delegation_id"], d[1]["delegation_id"], "{what}");
    for e in &d {
        assert_eq!(e["task"], "T-docs");
        assert_eq!(e["transport"], "headless");
        assert_eq!(e["via"], "kxen-agent");
        assert_eq!(e["actor"]["kind"], "host_adapter");
        assert!(e.get("trust").is_none() && e.get("evidence_path").is_none());
    }
    assert_eq!(
        d[0]["prompt_digest"],
        kxen::hash::sha256_prefixed(b"look at README"),
        "{what}"
    );
    let target = d[0]["target"].as_str().unwrap();
    assert!(
        target.contains(d[0]["delegation_id"].as_str().unwrap()),
        "{target}"
    );
}

/// With the `agent_delegation` grant a `task` child is a recorded delegation of the plan task,
/// and its model calls are the task's spending: in the same cumulative samples.
#[test]
fn a_granted_task_child_is_a_recorded_delegation_and_its_usage_is_metered() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let plan = write_plan(&repo, &contract(100_000, &["agent_delegation"]));
    let cfg = delegating_script(&env);
    let out = Run::from(delegating_run(&env, &repo, &plan, &cfg).output().unwrap());
    out.expect(0);
    let finished: Vec<Value> = out
        .jsonl()
        .into_iter()
        .filter(|e| e["type"] == "toolFinished" && e["tool"] == "task")
        .collect();
    assert_eq!(finished[0]["isError"], false, "{finished:?}");
    assert_one_completed_delegation(&plan, "clean run");
    let tokens = token_values(&plan);
    // The child's samples include the parent's first reply (durable before the child ran).
    assert_eq!(tokens, [12, 24, 49, 74]);
    for s in samples(&plan, "tokens") {
        meter_record(&plan, &s);
    }
    assert_journal_valid(&env, &plan);
    let acc = env.run("dwp", &["accounting", "--plan", plan.to_str().unwrap()]);
    acc.expect(0);
    let acc: Value = serde_json::from_str(&acc.stdout).unwrap();
    assert_eq!(acc["provider_tokens"]["value"], 74);
}

/// kill -9 at every durable step around a delegation: the resume records exactly one terminal
/// state (never two, never none), loses no usage and repeats no sample; with a power cut too.
#[test]
fn a_kill_around_a_delegation_records_exactly_one_end() {
    for point in [
        "task.after-child-created",
        "plan.delegation.after-launched",
        "plan.meter.after-artifact",
        "task.after-child-ended",
        "plan.delegation.after-ended",
    ] {
        for powercut in [false, true] {
            let what = format!("{point} powercut={powercut}");
            let env = TestEnv::new();
            let repo = env.git_repo("repo", &[("README", "x\n")]);
            let plan = write_plan(&repo, &contract(100_000, &["agent_delegation"]));
            let cfg = delegating_script(&env);
            let mut cmd = delegating_run(&env, &repo, &plan, &cfg);
            cmd.env("KXEN_FAILPOINT", point);
            if powercut {
                cmd.env("KXEN_FAILPOINT_POWERCUT", "1");
            }
            let crashed = Run::from(cmd.output().unwrap());
            assert_ne!(crashed.code, 0, "{what}: not reached");
            let session = session_of(&crashed);
            let resumed = resume_delegating(&env, &session, &plan, &cfg);
            resumed.expect(0);
            assert_one_completed_delegation(&plan, &what);
            let tokens = token_values(&plan);
            assert_eq!(tokens.last(), Some(&74), "{what}: {tokens:?}");
            assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{what}: {tokens:?}");
            assert_journal_valid(&env, &plan);
            // A second resume of the finished Session appends nothing.
            let before = journal_lines(&plan).len();
            resume_delegating(&env, &session, &plan, &cfg);
            assert_eq!(journal_lines(&plan).len(), before, "{what}");
        }
    }
}

/// A child's model calls are checked against the plan's limits too: the child stops at the
/// right call, its parent stops with it (exit 8, planLimitExhausted), and after
/// `dwp resources recover` the resume continues the child, then the parent.
#[test]
fn a_plan_limit_stops_a_child_and_its_parent_until_recovered() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let plan = write_plan(&repo, &contract(20, &["agent_delegation"]));
    let plan_s = plan.to_str().unwrap().to_string();
    let cfg = delegating_script(&env);
    let first = Run::from(delegating_run(&env, &repo, &plan, &cfg).output().unwrap());
    first.expect(8);
    assert!(
        first.stderr.contains("planLimitExhausted") && first.stderr.contains("recover"),
        "{}",
        first.stderr
    );
    let session = session_of(&first);
    let limits = limit_lines(&plan);
    assert_eq!(limits.len(), 1, "{limits:?}");
    assert!(limits[0].contains("spent 24 "), "{}", limits[0]);
    let states: Vec<String> = delegations(&plan)
        .iter()
        .map(|e| e["state"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(states, ["launched"], "the child has not ended");
    // Still held: the resume refuses without a model call.
    let held = resume_delegating(&env, &session, &plan, &cfg);
    held.expect(8);
    assert_eq!(limit_lines(&plan).len(), 1);
    env.run(
        "dwp",
        &[
            "resources",
            "recover",
            "--plan",
            &plan_s,
            "--limit",
            "tokens",
            "--host-only",
        ],
    )
    .expect(0);
    let done = resume_delegating(&env, &session, &plan, &cfg);
    done.expect(0);
    assert_one_completed_delegation(&plan, "after recover");
    let tokens = token_values(&plan);
    assert_eq!(tokens, [12, 24, 49, 74]);
    assert_journal_valid(&env, &plan);
}

/// Power cuts around the meter: a sample never states usage the Session could lose, so after
/// the cut the records hold at least what every surviving sample says, and the resume's
/// samples rise from there to the full total.
#[test]
fn a_power_cut_around_the_meter_never_leaves_a_sample_above_the_records() {
    for point in [
        "plan.meter.after-artifact",
        "plan.meter.after-sample",
        "plan.meter.before-check",
        // The reply is in the log, lazily: a power cut loses it (it was never sampled).
        "tool.after-assistant-message",
    ] {
        for skip in 0..3 {
            let what = format!("{point}/{skip}");
            let env = TestEnv::new();
            let repo = env.git_repo("repo", &[("README", "x\n")]);
            let plan = write_plan(&repo, &contract(100_000, &[]));
            let mut turns: Vec<Value> = (0..3).map(|i| read_turn(i, 40, 10)).collect();
            turns.push(json!({"text": "done", "usage": {"inputTokens": 40, "outputTokens": 10}}));
            let cfg = config(&env, &turns, false);
            let mut cmd = plan_run(&env, &repo, "Document", &reader(&env), &cfg, &plan, &[]);
            cmd.env("KXEN_FAILPOINT", point)
                .env("KXEN_FAILPOINT_SKIP", skip.to_string())
                .env("KXEN_FAILPOINT_POWERCUT", "1");
            let crashed = Run::from(cmd.output().unwrap());
            assert_ne!(crashed.code, 0, "{what}: not reached");
            let session = session_of(&crashed);
            let durable = durable_tokens(&env, &session);
            let before = token_values(&plan);
            assert!(
                before.last().is_none_or(|v| *v <= durable),
                "{what}: sample {before:?} above the durable records ({durable})"
            );
            let resumed = plan_resume(&env, &session, &cfg, &plan, &[]);
            resumed.expect(0);
            let tokens = token_values(&plan);
            assert_eq!(tokens.last(), Some(&200), "{what}: {tokens:?}");
            assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{what}: {tokens:?}");
            assert_journal_valid(&env, &plan);
        }
    }
}

/// The tokens of the replies the Session's files hold after a crash: the message log's, and
/// those only a `started` record of the journal carries (re-derived by the next execution).
fn durable_tokens(env: &TestEnv, session: &str) -> u64 {
    let dir = env.state_dir().join("sessions").join(session);
    let lines = |p: PathBuf| -> Vec<Value> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let mut seen = std::collections::BTreeMap::new();
    let tokens = |m: &Value| {
        m["usage"]["inputTokens"].as_u64().unwrap_or(0)
            + m["usage"]["outputTokens"].as_u64().unwrap_or(0)
    };
    for m in lines(dir.join("messages.jsonl")) {
        let m = m.get("record").cloned().unwrap_or(m);
        seen.insert(m["id"].as_str().unwrap_or_default().to_string(), tokens(&m));
    }
    for run in std::fs::read_dir(dir.join("runs")).unwrap().flatten() {
        for r in lines(run.path().join("journal.jsonl")) {
            let r = r.get("record").cloned().unwrap_or(r);
            let a = &r["assistant"];
            if let Some(id) = a["id"].as_str() {
                seen.entry(id.to_string()).or_insert(tokens(a));
            }
        }
    }
    seen.values().sum()
}

/// Issue 30 hole 2: the servers a plan run starts get the plan folder read-only too. An MCP
/// server (its entry's default `workspaceWrite` fence) is asked by the model to write the plan
/// journal; a language server whose entry says `workspaceWrite` tries to append to it as it
/// starts. Both run through the run's one fence, which holds the plan folder.
#[test]
fn mcp_and_language_servers_cannot_change_the_plan_folder() {
    let (Some(py), Some(pylsp)) = (crate::mcp::python(), crate::lsp::pylsp_python()) else {
        return;
    };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n"), ("lib.py", "import os\n")]);
    let plan = write_plan(&repo, &contract(100_000, &[]));
    let journal = plan.join("journal.ndjson");
    let results = plan.join("analysis_results");
    let forged = r#"{"seq":3,"type":"resource_sample","value":0}"#;
    let turns = vec![
        call(
            "m1",
            "mcp__fx__write_file",
            json!({"path": journal.to_str().unwrap(), "text": forged}),
        ),
        call(
            "m2",
            "mcp__fx__write_file",
            json!({"path": results.join("forged.json").to_str().unwrap(), "text": "{}"}),
        ),
        call(
            "l1",
            "lsp",
            json!({"operation": "diagnostics", "path": "lib.py"}),
        ),
        answer("done"),
    ];
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/server.py");
    // The language server's first act: append to the plan journal, then be pylsp.
    let lsp_command = format!(
        "echo '{forged}' >> '{}' 2>/dev/null; exec '{pylsp}' -m pylsp",
        journal.display()
    );
    let tables = format!(
        "[mcp.servers.fx]\ncommand = [{py:?}, {:?}]\ntimeout_ms = 30000\n\
         env = {{ KXEN_MCP_FENCE_TOOLS = \"1\" }}\n\n\
         [lsp.python]\ncommand = [\"/bin/sh\", \"-c\", {lsp_command:?}]\nextensions = [\".py\"]\n\
         sandbox = \"workspaceWrite\"\ndiagnostics_timeout_ms = 20000\n",
        script.to_str().unwrap(),
    );
    let cfg = crate::lsp::config_with(&env, &turns, &tables);
    let agent = agent(
        &env,
        "servers",
        "read, lsp, mcp__fx__write_file",
        "",
        "{format: text, requiredFields: []}",
    );
    let before = journal_lines(&plan);
    let out = Run::from(
        plan_run(
            &env,
            &repo,
            "Tamper through the servers",
            &agent,
            &cfg,
            &plan,
            &["--allow-mcp"],
        )
        .output()
        .unwrap(),
    );
    out.expect(0);
    let finished: Vec<Value> = out
        .jsonl()
        .into_iter()
        .filter(|e| e["type"] == "toolFinished")
        .collect();
    assert_eq!(finished.len(), 3, "{finished:?}");
    for f in &finished[..2] {
        let output = f["output"].as_str().unwrap();
        assert!(output.contains("Read-only file system"), "{f}");
    }
    assert_eq!(finished[2]["isError"], false, "{:?}", finished[2]);
    let after = journal_lines(&plan);
    assert!(
        after.iter().all(|l| !l.contains(r#""value":0"#)),
        "no forged line: {after:?}"
    );
    assert_eq!(
        after[..before.len()],
        before[..],
        "the fixture's lines are untouched"
    );
    assert!(!results.join("forged.json").exists());
    assert_journal_valid(&env, &plan);
}
