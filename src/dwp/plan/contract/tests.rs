use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::ErrorKind;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/dwp/plans")
        .join(rel)
}

const V7: &str = "v7/.dwp/plans/PLAN_007_login_rework";
const V6: &str = "v6/.dwp/plans/PLAN_v6_contract_fixture";

fn v7_r2() -> Value {
    let bytes = std::fs::read(fixture(&format!("{V7}/contracts/002-expiry-amended.json"))).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Validates `value` with its stamped id recomputed (mutations change the hash).
fn check(mut value: Value) -> Result<Contract> {
    let map = value.as_object_mut().unwrap();
    map.remove("contract_id");
    validate(Path::new("c.json"), value)
}

/// The ids Python's json.dumps(sort_keys=True, separators=(',', ':')) produced when the fixtures
/// were generated (fixtures/dwp/plans/generate.py): the cross-tool contract-id vectors.
#[test]
fn contract_id_vectors_match_python() {
    for (rel, id) in [
        (
            format!("{V7}/contracts/001-initial.json"),
            "874619221c9cce6f7464e1e4868597256a2689aff78ee793faf33b793fa3c216",
        ),
        (
            format!("{V7}/contracts/002-expiry-amended.json"),
            "b47bfbc9a3fc27ec83415353405839564657fa9a945c373df79d68fa89e9233f",
        ),
        (
            format!("{V6}/contract.json"),
            "64570eabe8e8a214a4a57754175ad89e30462290e7dbb81b770282772d7c47e2",
        ),
    ] {
        let contract = read(&fixture(&rel)).unwrap();
        assert_eq!(contract.id, id, "{rel}");
        assert_eq!(compute_id(&contract.raw), id, "{rel}");
    }
}

#[test]
fn small_vector_with_floats_and_escapes() {
    // python3 -c 'import json,hashlib; print(hashlib.sha256(json.dumps({"b":[1e-07,1e+16,2.5,3],
    //   "a":"\u00fc\U0001F600"},sort_keys=True,separators=(",",":")).encode()).hexdigest())'
    let doc = json!({"b": [1e-7, 1e16, 2.5, 3], "a": "ü😀", "contract_id": "ignored"});
    assert_eq!(
        crate::canonical::to_compact(&json!({"b": [1e-7, 1e16, 2.5, 3], "a": "ü😀"})),
        r#"{"a":"\u00fc\ud83d\ude00","b":[1e-07,1e+16,2.5,3]}"#
    );
    assert_eq!(
        compute_id(doc.as_object().unwrap()),
        "aee9027b4355a1bc8d17183876465991ecca21b4db4415706d33e84676e7862d"
    );
}

#[test]
fn fixture_contracts_validate_with_their_shape() {
    let c = read(&fixture(&format!("{V7}/contracts/002-expiry-amended.json"))).unwrap();
    assert_eq!(c.generation, Generation::V7);
    assert_eq!(c.revision, 2);
    assert_eq!(c.tasks.len(), 6);
    assert!(c.criterion("AC-no-plaintext").unwrap().is_controlled());
    assert!(!c.criterion("AC-audit-signoff").unwrap().is_controlled());
    assert_eq!(c.owner_of("AC-login-ok").unwrap().id, "T-login-form");
    assert!(c.handoff().is_some());
    let v6 = read(&fixture(&format!("{V6}/contract.json"))).unwrap();
    assert_eq!(v6.generation, Generation::V6);
    assert!(v6.handoff().is_none());
}

fn expect_invalid(value: Value, needle: &str) {
    let err = check(value).unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput, "{}", err.message);
    assert!(
        err.message.contains(needle),
        "message {:?} lacks {needle:?}",
        err.message
    );
    assert!(err.message.starts_with("contract invalid: c.json: "));
}

#[test]
fn every_rule_rejects_with_one_message() {
    let mut v = v7_r2();
    v["surprise"] = json!(1);
    expect_invalid(v, "contract: unknown field 'surprise'");

    let mut v = v7_r2();
    v["acceptance"]["criteria"][0]["extra"] = json!(true);
    expect_invalid(v, "contract.acceptance.criteria[0]: unknown field 'extra'");

    let mut v = v7_r2();
    v["tasks"][0]["id"] = json!("T-Bad");
    expect_invalid(v, "contract.tasks[0].id: 'T-Bad' is not a valid task id");

    let mut v = v7_r2();
    v["acceptance"]["criteria"][1]["id"] = json!("AC-login-ok");
    expect_invalid(v, "duplicate criterion id 'AC-login-ok'");

    let mut v = v7_r2();
    v["resource_envelope"]["limits"][3]["reserve"] = json!(25.5);
    expect_invalid(
        v,
        "contract.resource_envelope.limits[3].reserve (id 'spend_usd'): reserve 25.5 exceeds the \
         limit 20.0 - a reserve larger than its limit can never dispatch",
    );

    let mut v = v7_r2();
    v["schema"] = json!("https://deepworkplan.com/schema/plan-contract/v5.json");
    expect_invalid(v, "contract.schema:");

    let mut v = v7_r2();
    v["tasks"][1]["prerequisites"] = json!(["T-nope"]);
    expect_invalid(v, "'T-nope' is not a declared task");

    let mut v = v7_r2();
    v["tasks"][0]["prerequisites"] = json!(["T-audit-log"]);
    expect_invalid(v, "prerequisites form a cycle");

    let mut v = v7_r2();
    v["tasks"][0]["gate_intent"][0]["criterion"] = json!("AC-ghost");
    expect_invalid(v, "'AC-ghost' is not declared in acceptance.criteria");

    let mut v = v7_r2();
    v.as_object_mut().unwrap().remove("parent_contract_id");
    expect_invalid(v, "revision 2 requires parent_contract_id");

    let mut v = v7_r2();
    v["revision"] = json!(1);
    expect_invalid(v, "revision 1 must not name a parent contract");

    let mut v = v7_r2();
    v["revision"] = json!(true);
    expect_invalid(v, "contract.revision: expected an integer");

    let mut v = v7_r2();
    v["permissions"]["not_granted"] = json!(["git_operations"]);
    expect_invalid(v, "'git_operations' is both granted and not_granted");

    let mut v = v7_r2();
    v["permissions"]["granted"] = json!(["telepathy"]);
    expect_invalid(v, "'telepathy' is not a grant");

    let mut v = v7_r2();
    v["resource_envelope"]["limits"][0]
        .as_object_mut()
        .unwrap()
        .remove("metering_source");
    expect_invalid(v, "an enforced limit must name its metering_source");

    let mut v = v7_r2();
    v["resource_envelope"]["limits"][0]["limit"] = json!(false);
    expect_invalid(v, "limits[0].limit: expected a number");

    let mut v = v7_r2();
    v["schema"] = json!(SCHEMA_V6);
    expect_invalid(
        v,
        "unknown field 'parallel_safe' (a v7 field; this contract is v6)",
    );

    let mut v = v7_r2();
    v["plan"] = json!("PLAN_x");
    expect_invalid(v, "contract.plan: 'PLAN_x' is not a valid plan id");
}

#[test]
fn a_stamped_id_that_does_not_match_is_invalid() {
    let mut v = v7_r2();
    let id = v["contract_id"].as_str().unwrap().to_uppercase();
    v["contract_id"] = json!(id);
    let err = validate(Path::new("c.json"), v).unwrap_err();
    assert!(
        err.message.contains("not a valid sha256 hex id"),
        "{}",
        err.message
    );

    let mut v = v7_r2();
    v["title"] = json!("edited after stamping");
    let err = validate(Path::new("c.json"), v).unwrap_err();
    assert!(
        err.message.contains("does not match the canonical sha256"),
        "{}",
        err.message
    );
}

#[test]
fn an_unstamped_contract_gets_its_computed_id() {
    let v = v7_r2();
    let stamped = v["contract_id"].as_str().unwrap().to_string();
    let c = check(v).unwrap();
    assert_eq!(c.id, stamped);
    assert!(!c.raw.contains_key("contract_id"));
}

proptest! {
    #[test]
    fn parser_never_panics_on_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = parse(Path::new("c.json"), &bytes);
    }

    /// Mutating any one top-level value of a valid contract never panics the validator.
    #[test]
    fn validator_never_panics_on_mutations(key in 0usize..20, junk in prop_oneof![
        Just(json!(null)), Just(json!(1.5)), Just(json!(-1)), Just(json!("x")),
        Just(json!([])), Just(json!({})), Just(json!([{}])), Just(json!([1, "a", null])),
    ]) {
        let mut v = v7_r2();
        let keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        let k = &keys[key % keys.len()];
        v[k.as_str()] = junk.clone();
        let _ = check(v.clone());
        if let Some(obj) = v.get_mut("tasks").and_then(|t| t.get_mut(0)).and_then(Value::as_object_mut) {
            for val in obj.values_mut() { *val = junk.clone(); }
        }
        let _ = check(v);
    }
}
