//! `dwp resources report|routing|hold|exhaust|recover|settle` on copies of the fixture plans
//! (fixtures/dwp/plans/), with golden outputs in fixtures/dwp/golden/resources/. Set
//! DWP_UPDATE_GOLDEN=1 to rewrite the goldens after a deliberate change, then review the diff.

use serde_json::{Value, json};

use crate::dwp_fixtures::{self, V6, V7, copy_repo};
use crate::env::{Run, TestEnv, snapshot};

/// Goldens of this file live in fixtures/dwp/golden/resources/.
#[track_caller]
fn golden(name: &str, actual: &str) {
    dwp_fixtures::golden(&format!("resources/{name}"), actual);
}

fn res(env: &TestEnv, verb: &str, plan: &str, extra: &[&str]) -> Run {
    let mut args = vec!["resources", verb, "--plan", plan];
    args.extend_from_slice(extra);
    env.run("dwp", &args)
}

fn json_of(run: &Run) -> Value {
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", run.stdout))
}

/// The complete events of the live journal (a torn last line skipped).
fn live_events(env: &TestEnv, plan: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(env.path().join(plan).join("journal.ndjson")).unwrap();
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Appends a reservation (an authorized adaptation with a resource_impact) by hand, the way
/// another DWP tool would, after dropping the fixture's torn last line. Returns its key.
fn add_reservation(env: &TestEnv, plan: &str, declared: Value, unit: &str) -> String {
    let path = env.path().join(plan).join("journal.ndjson");
    let text = std::fs::read_to_string(&path).unwrap();
    let complete: String = text
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .collect();
    let last: Value = serde_json::from_str(complete.lines().last().unwrap()).unwrap();
    let seq = last["seq"].as_u64().unwrap() + 1;
    let event = json!({
        "schema": last["schema"], "type": "adaptation", "seq": seq,
        "ts": "2026-03-02T00:00:00Z", "plan": last["plan"], "contract_id": last["contract_id"],
        "actor": {"kind": "agent", "identity": "caller"},
        "kind": "retry", "trigger_observation": 3, "evidence_artifact": null,
        "hypothesis": "child run", "action": "dispatch a child", "rationale": "parallel work",
        "authority": "developer", "affected_tasks": ["T-cleanup"], "affected_criteria": [],
        "evidence_invalidated": [], "evidence_preserved": [],
        "resource_impact": {"declared": declared, "unit": unit}, "decision": "authorized",
    });
    let line = format!("{}\n", kxen::canonical::to_compact(&event));
    std::fs::write(&path, complete + &line).unwrap();
    format!("seq-{seq}")
}

fn row<'v>(report: &'v Value, id: &str) -> &'v Value {
    report["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["limit_id"] == id)
        .unwrap_or_else(|| panic!("no row {id}"))
}

#[test]
fn report_and_routing_match_their_goldens() {
    let env = TestEnv::new();
    copy_repo(&env, "v7");
    copy_repo(&env, "v6");
    let full =
        r#"{"meter_spend": true, "meter_tokens": 1, "model_routing": true, "subagents": true}"#;
    for (name, verb, plan, extra) in [
        ("v7-report-minimal-host.json", "report", V7, vec![]),
        (
            "v7-report-metered-host.json",
            "report",
            V7,
            vec!["--caps", full],
        ),
        ("v6-report-minimal-host.json", "report", V6, vec![]),
        ("v7-routing-minimal-host.json", "routing", V7, vec![]),
        (
            "v7-routing-full-host.json",
            "routing",
            V7,
            vec!["--caps", full],
        ),
        (
            "v6-routing-full-host.json",
            "routing",
            V6,
            vec!["--caps", full],
        ),
    ] {
        let run = res(&env, verb, plan, &extra);
        run.expect(0);
        assert_eq!(run.stderr, "", "{name}");
        golden(name, &run.stdout);
    }
    // Deriving twice gives identical bytes.
    let a = res(&env, "report", V7, &["--caps", full]).stdout;
    let b = res(&env, "report", V7, &["--caps", full]).stdout;
    assert_eq!(a, b);
}

#[test]
fn report_rows_follow_the_counter_families_and_modes() {
    let env = TestEnv::new();
    copy_repo(&env, "v7");
    let minimal = json_of(res(&env, "report", V7, &[]).expect(0));
    assert_eq!(minimal["host_capabilities"].as_object().unwrap().len(), 8);
    assert_eq!(minimal["unsupported_counters"], json!(["gpu_seconds"]));
    assert_eq!(minimal["refusal"], Value::Null);
    // Journal counters come from the plan's own records.
    assert_eq!(row(&minimal, "wall_hours")["spent"], json!(11.4333));
    assert_eq!(row(&minimal, "gate_retries")["spent"], json!(45.0));
    assert_eq!(row(&minimal, "gate_retries")["dispatch_ceiling"], json!(55));
    // Declared advisory: never a spent value.
    assert_eq!(
        row(&minimal, "dispatch_calls")["effective_mode"],
        "advisory (declared advisory)"
    );
    assert_eq!(row(&minimal, "dispatch_calls")["spent"], Value::Null);
    // The advisory downgrade names the missing meter.
    let spend = row(&minimal, "spend_usd");
    assert!(
        spend["effective_mode"]
            .as_str()
            .unwrap()
            .starts_with("advisory (host cannot meter: no meter_spend capability")
    );
    assert_eq!(spend["host_capability"], "meter_spend");
    // seq-60 was released (not pending), seq-61 committed (still counts): 2.
    assert_eq!(spend["pending"], json!(2.0));
    assert_eq!(spend["dispatch_ceiling"], json!(17.5));
    assert_eq!(row(&minimal, "tokens")["asserted_latest"], json!(120000));

    // With the meters: spend is metered by the observed host-adapter sample; tokens have only
    // an asserted estimate, so they are enforced on pending spend only.
    let metered = json_of(
        res(
            &env,
            "report",
            V7,
            &["--caps", r#"{"meter_spend": true, "meter_tokens": true}"#],
        )
        .expect(0),
    );
    let spend = row(&metered, "spend_usd");
    assert_eq!(spend["effective_mode"], "enforced (observed meter sample)");
    assert_eq!(spend["spent"], json!(3.75));
    let tokens = row(&metered, "tokens");
    assert!(
        tokens["effective_mode"]
            .as_str()
            .unwrap()
            .starts_with("enforced-pending-only")
    );
    assert_eq!(tokens["spent"], Value::Null);
}

#[test]
fn reserve_refusal_names_the_first_over_ceiling_limit() {
    let env = TestEnv::new();
    copy_repo(&env, "v7");
    let caps = r#"{"meter_spend": true, "meter_tokens": true}"#;
    // tokens: 1,950,000 pending > 2,000,000 - 100,000 reserve, unmetered.
    add_reservation(&env, V7, json!(1950000), "tokens");
    let report = json_of(res(&env, "report", V7, &["--caps", caps]).expect(0));
    assert_eq!(row(&report, "tokens")["over_ceiling"], true);
    assert_eq!(
        report["refusal"],
        json!({
            "rule": "limit-exhausted",
            "detail": "enforced limit 'tokens' over its dispatchable ceiling: spent 0.0 + pending \
                       1950000.0 > 1900000.0 (limit 2000000 - reserve 100000.0) [unmetered spend: \
                       pending-side enforcement only]"
        })
    );
    // spend_usd comes first in contract order: 3.75 spent + 2.0 + 12.0 pending > 17.5.
    add_reservation(&env, V7, json!(12.0), "usd");
    let report = json_of(res(&env, "report", V7, &["--caps", caps]).expect(0));
    assert_eq!(
        report["refusal"]["detail"],
        "enforced limit 'spend_usd' over its dispatchable ceiling: spent 3.75 + pending 14.0 > \
         17.5 (limit 20.0 - reserve 2.5)"
    );
    // On the minimal host the same limits are advisory: never over the ceiling, no refusal.
    let minimal = json_of(res(&env, "report", V7, &[]).expect(0));
    assert_eq!(minimal["refusal"], Value::Null);
    assert_eq!(row(&minimal, "spend_usd")["over_ceiling"], false);
}

#[test]
fn exhaust_hold_recover_sequence() {
    let env = TestEnv::new();
    copy_repo(&env, "v7");
    let journal = env.path().join(V7).join("journal.ndjson");
    let live_id = live_events(&env, V7).last().unwrap()["contract_id"].clone();

    // The fixture ends with gate_retries exhausted (and spend_usd exhausted, then recovered).
    let hold = res(&env, "hold", V7, &[]);
    hold.expect(1);
    assert_eq!(
        hold.stdout,
        "HOLD: limit gate_retries (via seq 88) too many retries\n"
    );

    let rec = res(&env, "recover", V7, &["--limit", "gate_retries"]);
    rec.expect(0);
    let events = live_events(&env, V7);
    let last = events.last().unwrap();
    let seq = last["seq"].as_u64().unwrap();
    assert_eq!(rec.stdout, format!("OK: recovery recorded at seq {seq}\n"));
    assert_eq!(last["type"], "observation");
    assert_eq!(last["statement"], "LIMIT: recovered gate_retries");
    assert_eq!(last["trust"], "asserted");
    assert_eq!(
        last["actor"],
        json!({"kind": "helper", "identity": "dwp resources.py"})
    );
    assert_eq!(last["contract_id"], live_id);
    assert_eq!(
        last["schema"],
        "https://deepworkplan.com/schema/journal-event/v7.json"
    );
    assert_eq!(
        res(&env, "hold", V7, &[]).expect(0).stdout,
        "OK: no resource hold\n"
    );

    // An identical replay writes nothing and reports the first seq.
    let before = std::fs::read(&journal).unwrap();
    let again = res(&env, "recover", V7, &["--limit", "gate_retries"]);
    again.expect(0);
    assert!(
        again
            .stdout
            .starts_with(&format!("OK: recovery already recorded at seq {seq} "))
    );
    assert_eq!(std::fs::read(&journal).unwrap(), before);

    // Exhaust an enforced limit: the hold is back, naming it.
    let ex = res(
        &env,
        "exhaust",
        V7,
        &["--limit", "spend_usd", "--detail", "budget hit at 19.5"],
    );
    ex.expect(0);
    let ex_seq = seq + 1;
    assert_eq!(
        ex.stdout,
        format!("OK: exhaustion recorded at seq {ex_seq}\n")
    );
    let hold = res(&env, "hold", V7, &[]);
    hold.expect(1);
    assert_eq!(
        hold.stdout,
        format!("HOLD: limit spend_usd (via seq {ex_seq}) budget hit at 19.5\n")
    );
    let before = std::fs::read(&journal).unwrap();
    res(
        &env,
        "exhaust",
        V7,
        &["--limit", "spend_usd", "--detail", "budget hit at 19.5"],
    )
    .expect(0);
    assert_eq!(std::fs::read(&journal).unwrap(), before);

    // Recover, then exhaust again with the same detail: a new record, the hold returns.
    res(&env, "recover", V7, &["--limit", "spend_usd"]).expect(0);
    res(&env, "hold", V7, &[]).expect(0);
    let ex2 = res(
        &env,
        "exhaust",
        V7,
        &["--limit", "spend_usd", "--detail", "budget hit at 19.5"],
    );
    ex2.expect(0);
    assert_eq!(
        ex2.stdout,
        format!("OK: exhaustion recorded at seq {}\n", ex_seq + 2)
    );
    res(&env, "hold", V7, &[]).expect(1);
    res(&env, "recover", V7, &["--limit", "spend_usd"]).expect(0);

    // An advisory limit's exhaustion is recorded but never holds.
    res(&env, "exhaust", V7, &["--limit", "dispatch_calls"]).expect(0);
    assert_eq!(
        live_events(&env, V7).last().unwrap()["statement"],
        "LIMIT: exhausted dispatch_calls"
    );
    res(&env, "hold", V7, &[]).expect(0);
}

#[test]
fn settle_exactly_once() {
    let env = TestEnv::new();
    copy_repo(&env, "v7");
    let journal = env.path().join(V7).join("journal.ndjson");
    let key = add_reservation(&env, V7, json!(3.0), "usd");
    let pending = |env: &TestEnv| {
        row(&json_of(res(env, "report", V7, &[]).expect(0)), "spend_usd")["pending"].clone()
    };
    assert_eq!(pending(&env), json!(5.0));

    let s = res(
        &env,
        "settle",
        V7,
        &[
            "--key",
            &key,
            "--disposition",
            "released",
            "--detail",
            "child cancelled",
        ],
    );
    s.expect(0);
    let last = live_events(&env, V7).last().unwrap().clone();
    assert_eq!(
        s.stdout,
        format!("OK: settlement recorded at seq {}\n", last["seq"])
    );
    assert_eq!(
        last["statement"],
        format!("RESERVATION: {key}: released: child cancelled")
    );
    assert_eq!(last["trust"], "asserted");
    // Released: no longer pending.
    assert_eq!(pending(&env), json!(2.0));

    // Identical replay: a no-op reporting the same seq.
    let before = std::fs::read(&journal).unwrap();
    let replay = res(
        &env,
        "settle",
        V7,
        &[
            "--key",
            &key,
            "--disposition",
            "released",
            "--detail",
            "child cancelled",
        ],
    );
    replay.expect(0);
    assert!(replay.stdout.contains(&format!("at seq {}", last["seq"])));
    assert_eq!(std::fs::read(&journal).unwrap(), before);

    // A conflicting second settlement is refused, never decided; nothing written.
    let plan_dir = env.path().join(V7);
    let before = snapshot(&plan_dir);
    let conflict = res(
        &env,
        "settle",
        V7,
        &["--key", &key, "--disposition", "committed"],
    );
    conflict.expect(5);
    assert!(conflict.stderr.starts_with(&format!(
        "ERROR: reservation '{key}' already settled as 'released'"
    )));
    assert_eq!(conflict.stdout, "");
    assert_eq!(snapshot(&plan_dir), before);

    // The fixture's own settlements: seq-61 committed (replay is a no-op), seq-60 released.
    res(
        &env,
        "settle",
        V7,
        &["--key", "seq-61", "--disposition", "committed"],
    )
    .expect(0);
    res(
        &env,
        "settle",
        V7,
        &["--key", "seq-60", "--disposition", "committed"],
    )
    .expect(5);
    assert_eq!(snapshot(&plan_dir), before);
}

#[test]
fn bad_input_gets_one_message_and_writes_nothing() {
    let env = TestEnv::new();
    copy_repo(&env, "v7");
    let plan_dir = env.path().join(V7);
    let before = snapshot(&plan_dir);
    let cases: [(&[&str], i32, &str); 9] = [
        (
            &["resources", "exhaust", "--plan", V7, "--limit", "gpu_hours"],
            3,
            "ERROR: limit 'gpu_hours' is not declared in the contract",
        ),
        (
            &["resources", "recover", "--plan", V7, "--limit", "gpu_hours"],
            3,
            "ERROR: limit 'gpu_hours' is not declared",
        ),
        (
            &[
                "resources",
                "settle",
                "--plan",
                V7,
                "--key",
                "seq-5",
                "--disposition",
                "released",
            ],
            3,
            "ERROR: no reservation 'seq-5' in this plan",
        ),
        (
            &[
                "resources",
                "report",
                "--plan",
                V7,
                "--caps",
                "[\"subagents\"]",
            ],
            4,
            "ERROR: --caps is not a JSON object",
        ),
        (
            &["resources", "report", "--plan", V7, "--caps", "{"],
            4,
            "ERROR: --caps is not valid JSON",
        ),
        (
            &[
                "resources",
                "exhaust",
                "--plan",
                V7,
                "--limit",
                "tokens",
                "--caps",
                "{\"teleport\": true}",
            ],
            4,
            "ERROR: unknown host ability 'teleport'",
        ),
        (
            &["resources", "report", "--plan", "nowhere/PLAN_x"],
            3,
            "ERROR: plan folder nowhere/PLAN_x does not exist",
        ),
        (
            &[
                "resources",
                "settle",
                "--plan",
                V7,
                "--key",
                "seq-60",
                "--disposition",
                "refunded",
            ],
            2,
            "error: invalid value 'refunded'",
        ),
        (
            &["resources", "exhaust", "--plan", V7],
            2,
            "error: the following required arguments",
        ),
    ];
    for (args, code, message) in cases {
        let run = env.run("dwp", args);
        run.expect(code);
        assert!(run.stderr.starts_with(message), "{args:?}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{args:?}");
        assert_eq!(
            run.stderr.matches("ERROR:").count(),
            if code == 2 { 0 } else { 1 },
            "{args:?}"
        );
    }
    assert_eq!(
        snapshot(&plan_dir),
        before,
        "a refused command changed the plan folder"
    );
}

#[test]
fn host_records_count_and_caps_win_per_ability() {
    let env = TestEnv::new();
    let repo = copy_repo(&env, "v7");
    std::fs::write(
        repo.join(".dwp/config.json"),
        r#"{"schema": "dwp-config/v1", "host": {"meter_spend": true, "subagents": true}}"#,
    )
    .unwrap();
    let routing = json_of(res(&env, "routing", V7, &[]).expect(0));
    assert_eq!(
        routing["ability_sources"],
        json!({"meter_spend": ["record:.dwp/config.json"], "subagents": ["record:.dwp/config.json"]})
    );
    assert_eq!(routing["parallel"]["posture"], "parallel_authorized");
    // model_routing is neither granted nor available.
    assert_eq!(routing["model"]["posture"], "fixed_model");
    let routing =
        json_of(res(&env, "routing", V7, &["--caps", r#"{"subagents": false}"#]).expect(0));
    assert_eq!(
        routing["parallel"],
        json!({"missing": ["host capability subagents"], "posture": "sequential_only"})
    );
    let report = json_of(res(&env, "report", V7, &[]).expect(0));
    assert_eq!(report["host_capabilities"]["meter_spend"], true);
    assert_eq!(row(&report, "spend_usd")["spent"], json!(3.75));
}

/// `dwp resources VERB --plan V7 ARGS` aborted at `point`; the process must die there.
#[cfg(feature = "failpoints")]
fn crash(env: &TestEnv, point: &str, verb: &str, extra: &[&str]) {
    let out = env
        .cmd("dwp")
        .env("KXEN_FAILPOINT", point)
        .args(["resources", verb, "--plan", V7])
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        None,
        "{point}: the failpoint was not reached"
    );
    assert!(
        out.stdout.is_empty(),
        "{point}: nothing reported before the crash"
    );
}

/// The live journal without the fixture's torn last line (an earlier crash), so the only
/// append of the next write is the one under test.
#[cfg(feature = "failpoints")]
fn drop_torn_tail(env: &TestEnv, plan: &str) -> Vec<u8> {
    let path = env.path().join(plan).join("journal.ndjson");
    let text = std::fs::read_to_string(&path).unwrap();
    let complete: String = text
        .split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .collect();
    std::fs::write(&path, &complete).unwrap();
    complete.into_bytes()
}

/// `settle` and `exhaust` aborted around their one append: before the write the journal is
/// unchanged, after it the journal has the complete line; either way a rerun ends with exactly
/// one record, and a further rerun writes nothing.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_mid_append_leaves_the_journal_whole_and_a_rerun_settles_once() {
    let settle = ["--disposition", "committed", "--detail", "child finished"];
    let exhaust = ["--limit", "spend_usd", "--detail", "budget hit"];
    for point in ["dwp.append.before-write", "dwp.append.after-write"] {
        for verb in ["settle", "exhaust"] {
            let env = TestEnv::new();
            copy_repo(&env, "v7");
            let journal = env.path().join(V7).join("journal.ndjson");
            let mut args: Vec<String> = Vec::new();
            let statement = if verb == "settle" {
                let key = add_reservation(&env, V7, json!(3.0), "usd");
                args.extend(["--key".to_string(), key.clone()]);
                args.extend(settle.map(String::from));
                format!("RESERVATION: {key}: committed: child finished")
            } else {
                drop_torn_tail(&env, V7);
                args.extend(exhaust.map(String::from));
                "LIMIT: exhausted spend_usd: budget hit".to_string()
            };
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let before = std::fs::read(&journal).unwrap();
            let records = |env: &TestEnv| {
                live_events(env, V7)
                    .into_iter()
                    .filter(|e| e["statement"] == statement.as_str())
                    .count()
            };

            crash(&env, point, verb, &args);
            let after = std::fs::read(&journal).unwrap();
            if point == "dwp.append.before-write" {
                assert_eq!(after, before, "{point} {verb}: journal unchanged");
            } else {
                let added = std::str::from_utf8(&after[before.len()..]).unwrap();
                assert!(
                    after.starts_with(&before) && added.ends_with('\n'),
                    "{added}"
                );
                assert_eq!(
                    added.lines().count(),
                    1,
                    "{point} {verb}: one complete line"
                );
                assert_eq!(records(&env), 1);
            }

            let rerun = res(&env, verb, V7, &args);
            rerun.expect(0);
            assert_eq!(records(&env), 1, "{point} {verb}: recorded exactly once");
            let settled = std::fs::read(&journal).unwrap();
            res(&env, verb, V7, &args).expect(0);
            assert_eq!(
                std::fs::read(&journal).unwrap(),
                settled,
                "replay writes nothing"
            );
            // The report reads the recovered journal.
            res(&env, "report", V7, &[]).expect(0);
        }
    }
}

/// A power cut mid-write can leave part of the line: the next writer truncates it (recording a
/// journal_repair) and then appends the settlement once.
#[test]
fn a_torn_settlement_line_is_repaired_and_settled_once() {
    let env = TestEnv::new();
    copy_repo(&env, "v7");
    let journal = env.path().join(V7).join("journal.ndjson");
    let key = add_reservation(&env, V7, json!(3.0), "usd");
    let before = std::fs::read_to_string(&journal).unwrap();
    let torn = format!("{before}{{\"actor\":{{\"kind\":\"helper\",\"identity\":\"dwp res");
    std::fs::write(&journal, &torn).unwrap();
    let args = ["--key", &key, "--disposition", "released"];
    res(&env, "settle", V7, &args).expect(0);
    let events = live_events(&env, V7);
    let tail: Vec<&Value> = events.iter().rev().take(2).collect();
    assert_eq!(tail[1]["type"], "journal_repair");
    assert_eq!(tail[1]["byte_offset"], json!(before.len()));
    assert_eq!(
        tail[0]["statement"],
        format!("RESERVATION: {key}: released")
    );
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(text.starts_with(&before) && text.ends_with('\n'));
    let settled = text.clone();
    res(&env, "settle", V7, &args).expect(0);
    assert_eq!(std::fs::read_to_string(&journal).unwrap(), settled);
}

/// A complete last event without its trailing newline (another tool, or a hand edit) is an
/// event: readers count it, and the next writer adds the newline before its own line instead of
/// truncating it as torn.
#[test]
fn a_complete_last_event_without_a_newline_is_kept_and_terminated() {
    let env = TestEnv::new();
    copy_repo(&env, "v7");
    let journal = env.path().join(V7).join("journal.ndjson");
    let key = add_reservation(&env, V7, json!(3.0), "usd");
    let with_newline = std::fs::read_to_string(&journal).unwrap();
    let unterminated = with_newline.strip_suffix('\n').unwrap();
    std::fs::write(&journal, unterminated).unwrap();
    let pending = |env: &TestEnv| {
        row(&json_of(res(env, "report", V7, &[]).expect(0)), "spend_usd")["pending"].clone()
    };
    assert_eq!(
        pending(&env),
        json!(5.0),
        "the unterminated reservation counts"
    );

    res(
        &env,
        "settle",
        V7,
        &["--key", &key, "--disposition", "released"],
    )
    .expect(0);
    let text = std::fs::read_to_string(&journal).unwrap();
    assert!(
        text.starts_with(&with_newline),
        "the last event was kept and terminated:\n{}",
        &text[with_newline.len().saturating_sub(200)..]
    );
    let added: Vec<Value> = text[with_newline.len()..]
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(added.len(), 1, "only the settlement, no journal_repair");
    assert_eq!(
        added[0]["statement"],
        format!("RESERVATION: {key}: released")
    );
    assert!(text.ends_with('\n'));
    assert_eq!(pending(&env), json!(2.0));
}

/// A last line that parses as JSON but is not a valid event is an invalid event (exit 4), not a
/// torn tail to delete.
#[test]
fn an_unterminated_last_line_that_parses_but_is_invalid_is_refused_not_deleted() {
    let env = TestEnv::new();
    copy_repo(&env, "v7");
    let journal = env.path().join(V7).join("journal.ndjson");
    add_reservation(&env, V7, json!(3.0), "usd");
    let mut text = std::fs::read_to_string(&journal).unwrap();
    text.push_str(r#"{"type":"adaptation"}"#);
    std::fs::write(&journal, &text).unwrap();
    let run = res(&env, "exhaust", V7, &["--limit", "spend_usd"]);
    run.expect(4);
    assert!(run.stderr.contains("journal invalid"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&journal).unwrap(), text);
}

/// Killed right after ending an unterminated last event with its newline: the journal holds
/// exactly that newline more, and a rerun settles once.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_after_adding_the_missing_newline_leaves_a_whole_journal() {
    let env = TestEnv::new();
    copy_repo(&env, "v7");
    let journal = env.path().join(V7).join("journal.ndjson");
    let key = add_reservation(&env, V7, json!(3.0), "usd");
    let with_newline = std::fs::read_to_string(&journal).unwrap();
    std::fs::write(&journal, with_newline.strip_suffix('\n').unwrap()).unwrap();
    let args = ["--key", key.as_str(), "--disposition", "committed"];
    crash(&env, "dwp.append.after-newline", "settle", &args);
    assert_eq!(std::fs::read_to_string(&journal).unwrap(), with_newline);
    res(&env, "settle", V7, &args).expect(0);
    let text = std::fs::read_to_string(&journal).unwrap();
    assert_eq!(text[with_newline.len()..].lines().count(), 1);
}
