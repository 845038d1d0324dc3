use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use super::*;

fn v7() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/dwp/plans/v7/.dwp/plans/PLAN_007_login_rework")
}

const LIVE_V7: &str = "b47bfbc9a3fc27ec83415353405839564657fa9a945c373df79d68fa89e9233f";

/// Python's sha256(json.dumps({"contract_id", "files"}, sort_keys=True, separators=(',', ':')))
/// over the fixture files, computed independently when the fixtures were made.
#[test]
fn inputs_fingerprint_vectors_match_python() {
    let records = Records::load(&v7()).unwrap();
    for (task, expected) in [
        (
            "T-login-form",
            "e88541eab9ac0c4cfdd03375e8caa9efed4900dc43911e5e63b8817a52fc5567",
        ),
        (
            "T-session-store",
            "3553cc835c6a602e62c21a6796f17d6d55b2417397ef804398dc3b96d964ecc7",
        ),
    ] {
        let doc = derive(&records, task, None).unwrap();
        assert_eq!(doc["freshness"]["inputs_fingerprint"], expected, "{task}");
    }
    let mut files = Map::new();
    files.insert("a.rs".into(), Value::Null);
    // python3 -c 'import json,hashlib;print(hashlib.sha256(json.dumps({"contract_id":"x",
    //   "files":{"a.rs":None}},sort_keys=True,separators=(",",":")).encode()).hexdigest())'
    assert_eq!(
        inputs_fingerprint("x", &files),
        crate::hash::sha256_hex(br#"{"contract_id":"x","files":{"a.rs":null}}"#)
    );
}

#[test]
fn sections_must_name_every_mandatory_section() {
    assert_eq!(parse_sections(None).unwrap(), None);
    let err = parse_sections(Some("acceptance")).unwrap_err();
    assert_eq!(err.kind, crate::ErrorKind::Usage);
    assert!(
        err.message
            .contains("mandatory section(s) authorization, repository_rules - context pruning")
    );
    let ok = parse_sections(Some(" authorization ,repository_rules,acceptance")).unwrap();
    assert_eq!(ok.unwrap().len(), 3);
}

#[test]
fn an_undeclared_task_is_an_error_never_a_guess() {
    let records = Records::load(&v7()).unwrap();
    let err = derive(&records, "T-login", None).unwrap_err();
    assert_eq!(err.kind, crate::ErrorKind::NotFound);
    assert!(
        err.message
            .starts_with("task 'T-login' is not in the contract")
    );
}

#[test]
fn the_derivation_is_a_pure_function_of_the_records() {
    let records = Records::load(&v7()).unwrap();
    let a = to_bytes(&derive(&records, "T-docs", None).unwrap());
    let b = to_bytes(
        &Records::load(&v7())
            .map(|r| derive(&r, "T-docs", None).unwrap())
            .unwrap(),
    );
    assert_eq!(a, b);
    assert_eq!(json!(records.contract.id), json!(LIVE_V7));
}

#[test]
fn the_dead_end_cap_keeps_the_latest_fifty() {
    let records = Records::load(&v7()).unwrap();
    let doc = derive(&records, "T-docs", None).unwrap();
    let dead = doc["dead_ends"].as_array().unwrap();
    assert_eq!(dead.len(), DEAD_END_CAP);
    // The oldest failing clippy run (seq 5) fell off; the newest entry is the last one recorded.
    assert_eq!(dead[0]["seq"], 6);
    assert_eq!(dead[49]["kind"], "non_discriminating_control");
}
