//! Cost budgets: each model call's cost (reported usage x the provider's `price`) is recorded
//! with it; `maxCostUsd` (definition, or a policy that can only lower it) stops a run before a
//! model call once its calls — all attempts, and its `task` children's — cost it all (exit 8);
//! `session show` / `run show` report the cost, or "unknown" with the reason.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::run_support::*;
use crate::task::{child, tasks};

/// One dollar per token: a `call` turn (10 in, 2 out) costs $12, an `answer` turn $25.
const PRICE: &str = "price = { input_per_mtok = 1000000.0, output_per_mtok = 1000000.0 }";

/// [`script_config`] with [`PRICE`] (or `price`) on the provider.
fn priced(env: &TestEnv, turns: &[Value], price: &str) -> PathBuf {
    let config = script_config(env, turns);
    std::fs::write(
        &config,
        format!(
            "[providers.script]\nkind = \"script\"\npath = \"turns.jsonl\"\n{price}\n\n[roles]\n\
             execution = \"script\"\nplanning = \"script\"\n"
        ),
    )
    .unwrap();
    config
}

fn budgeted(env: &TestEnv, name: &str, max: &str, optional: &str) -> PathBuf {
    let path = env.path().join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {{name: {name}}}\nspec:\n  \
             objective: o\n  instructions: [i]\n  capabilities: {{required: [read], optional: \
             [{optional}]}}\n  execution: {{maxTurns: 30, maxCostUsd: {max}}}\n"
        ),
    )
    .unwrap();
    path
}

fn reads(n: usize) -> Vec<Value> {
    let mut turns: Vec<Value> = (0..n)
        .map(|i| call(&format!("c{i}"), "read", json!({"path": "a.txt"})))
        .collect();
    turns.push(answer("done"));
    turns
}

fn session_of(env: &TestEnv) -> String {
    let list = env.run("kxen-agent", &["session", "list"]);
    list.jsonl()[0]["id"].as_str().unwrap().to_string()
}

#[test]
fn a_spent_budget_stops_the_run_before_its_next_model_call() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "x\n")]);
    let config = priced(&env, &reads(5), PRICE);
    let agent = budgeted(&env, "thrifty", "30", "");
    let run = run_new(&env, &repo, "Read", &agent, &config, &[]);
    run.expect(8);
    let done = finished(&run.jsonl()).clone();
    assert_eq!(done["status"], "failed");
    assert_eq!(done["reason"], "budgetExhausted");
    assert_eq!(
        done["turns"], 3,
        "$12 + $12 < $30, then $36: no fourth call"
    );
    let error = done["error"].as_str().unwrap();
    assert!(
        error.contains("maxCostUsd $30.0000") && error.contains("$36.0000"),
        "{error}"
    );
    // Each call's cost is recorded with it, and shown per run and per Session.
    let session = session_of(&env);
    let shown = env
        .run("kxen-agent", &["session", "show", &session])
        .jsonl()[0]
        .clone();
    let costs: Vec<f64> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["costUsd"].as_f64())
        .collect();
    assert_eq!(costs, [12.0, 12.0, 12.0]);
    assert_eq!(shown["runs"][0]["cost"]["usd"], 36.0);
    assert_eq!(shown["cost"]["usd"], 36.0);
    let run_id = shown["runs"][0]["id"].as_str().unwrap();
    let run_view = env
        .run("kxen-agent", &["run", "show", &session, run_id])
        .jsonl()[0]
        .clone();
    assert_eq!(run_view["cost"]["usd"], 36.0);
    let text = env.run(
        "kxen-agent",
        &["--format", "text", "run", "show", &session, run_id],
    );
    assert!(text.stdout.contains("cost: $36.0000"), "{}", text.stdout);

    // A policy can only lower the budget.
    let policy = env.path().join("policy.json");
    std::fs::write(&policy, r#"{"maxCostUsd": 20}"#).unwrap();
    let p = policy.to_str().unwrap();
    let config = priced(&env, &reads(5), PRICE);
    let run = run_new(&env, &repo, "Read", &agent, &config, &["--policy", p]);
    run.expect(8);
    assert_eq!(finished(&run.jsonl())["turns"], 2);
    std::fs::write(&policy, r#"{"maxCostUsd": 1000}"#).unwrap();
    let config = priced(&env, &reads(5), PRICE);
    let run = run_new(&env, &repo, "Read", &agent, &config, &["--policy", p]);
    run.expect(8);
    assert_eq!(finished(&run.jsonl())["turns"], 3);
}

#[test]
fn the_cost_of_earlier_attempts_counts_after_a_resume() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "x\n")]);
    let mut turns = vec![call("e1", "exec", json!({"command": "true"}))];
    turns.extend(reads(4));
    let config = priced(&env, &turns, PRICE);
    let agent = budgeted(&env, "thrifty", "30", "exec");
    let policy = env.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"allowShell": true, "mcpTools": {"exec": "ask"}}"#,
    )
    .unwrap();
    let p = policy.to_str().unwrap();
    // The first attempt pays for one call ($12) and stops for an approval.
    let first = run_new(&env, &repo, "Go", &agent, &config, &["--policy", p]);
    first.expect(7);
    let asked = first
        .jsonl()
        .into_iter()
        .find(|e| e["type"] == "runApprovalRequired")
        .unwrap();
    let session = session_of(&env);
    let run_id = asked["runId"].as_str().unwrap().to_string();
    let op = asked["opId"].as_str().unwrap().to_string();
    env.run("kxen-agent", &["run", "approve", &session, &run_id, &op])
        .expect(0);
    // The resumed attempt counts it: two more calls ($36), then the budget stops it.
    let c = config.to_str().unwrap();
    let resumed = env.run(
        "kxen-agent",
        &["--resume", &session, "--config", c, "--policy", p],
    );
    resumed.expect(8);
    let done = finished(&resumed.jsonl()).clone();
    assert_eq!(done["turns"], 3);
    assert!(
        done["error"].as_str().unwrap().contains("$36.0000"),
        "{done}"
    );
}

#[test]
fn task_children_spend_from_their_parents_budget() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "x\n")]);
    let agent = budgeted(&env, "parent", "40", "exec, task");
    let mut delegate = tasks(&[("t1", "look", "Look at a.txt")]);
    delegate["usage"] = json!({"inputTokens": 1, "outputTokens": 1});
    let config = priced(
        &env,
        &[
            delegate,
            child("look", call("k1", "read", json!({"path": "a.txt"}))),
            child("look", call("k2", "read", json!({"path": "a.txt"}))),
            child("look", answer("seen")),
            answer("parent done"),
        ],
        PRICE,
    );
    // Parent $2, then the child (its budget: the $38 the parent has left) $12 + $12 + $25;
    // the parent has nothing left for its next call.
    let run = run_new(&env, &repo, "Delegate", &agent, &config, &["--allow-shell"]);
    run.expect(8);
    let done = finished(&run.jsonl()).clone();
    assert_eq!(done["reason"], "budgetExhausted", "{done}");
    assert!(
        done["error"].as_str().unwrap().contains("subagents"),
        "{done}"
    );
    let session = env
        .run("kxen-agent", &["session", "list"])
        .jsonl()
        .into_iter()
        .find(|s| s["forkKind"] != "task")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = env
        .run("kxen-agent", &["session", "show", &session])
        .jsonl()[0]
        .clone();
    let parent_own: f64 = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["costUsd"].as_f64())
        .sum();
    let total = shown["cost"]["usd"].as_f64().unwrap();
    assert!(
        total > parent_own,
        "children counted: {total} vs {parent_own}"
    );
    assert!(total >= 40.0, "{total}");
}

#[test]
fn without_a_price_the_cost_is_unknown_and_a_budget_is_refused() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "x\n")]);
    let config = script_config(&env, &reads(1));
    let run = run_new(&env, &repo, "Read", &fixer(&env), &config, &[]);
    run.expect(0);
    let session = session_of(&env);
    let shown = env
        .run("kxen-agent", &["session", "show", &session])
        .jsonl()[0]
        .clone();
    assert_eq!(shown["cost"]["usd"], Value::Null);
    assert!(
        shown["cost"]["unknown"]
            .as_str()
            .unwrap()
            .contains("no price"),
        "{}",
        shown["cost"]
    );
    let text = env.run(
        "kxen-agent",
        &["--format", "text", "session", "show", &session],
    );
    assert!(text.stdout.contains("cost unknown ("), "{}", text.stdout);
    // A budget that could never be kept is refused before anything is created.
    let agent = budgeted(&env, "thrifty", "5", "");
    let run = run_new(&env, &repo, "Read", &agent, &config, &[]);
    run.expect(4);
    assert!(run.stderr.contains("has no price"), "{}", run.stderr);
    // The old price names still read.
    let old = priced(
        &env,
        &reads(1),
        "[providers.script.price]\ninput_per_million = 1.0\noutput_per_million = 2.0\ncurrency = \"USD\"",
    );
    run_new(&env, &repo, "Read", &agent, &old, &[]).expect(0);
}
