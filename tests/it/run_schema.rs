//! A JSON Schema for the final answer: `spec.output.schema` (inline or a file next to the
//! definition) and `run --output-schema FILE`. An answer that fits completes the run, one that
//! does not fails it (exit 1) naming violations by JSON pointer, and a schema that is no JSON
//! Schema is refused at validation (exit 4).

use serde_json::json;

use crate::env::TestEnv;
use crate::run_support::*;

const SCHEMA: &str = r#"{"type": "object", "required": ["ok", "count"], "properties": {"ok": {"type": "boolean"}, "count": {"type": "integer", "minimum": 0}}}"#;

fn json_agent(env: &TestEnv, schema: &str) -> std::path::PathBuf {
    agent(
        env,
        "reporter",
        "read",
        "",
        &format!("{{format: json, requiredFields: [ok], schema: {schema}}}"),
    )
}

#[test]
fn an_inline_schema_passes_a_fitting_answer_and_fails_one_that_does_not() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "x\n")]);
    let agent = json_agent(&env, SCHEMA);
    let config = script_config(&env, &[answer(r#"{"ok": true, "count": 2}"#)]);
    let run = run_new(&env, &repo, "Report", &agent, &config, &[]);
    run.expect(0);
    assert_eq!(finished(&run.jsonl())["status"], "completed");

    let config = script_config(&env, &[answer(r#"{"ok": "yes", "count": -1}"#)]);
    let run = run_new(&env, &repo, "Report", &agent, &config, &[]);
    run.expect(1);
    let done = finished(&run.jsonl()).clone();
    assert_eq!(done["status"], "failed");
    assert_eq!(done["reason"], "outputContract");
    let error = done["error"].as_str().unwrap();
    assert!(
        error.contains("`/ok`") && error.contains("`/count`"),
        "violations by pointer: {error}"
    );
}

#[test]
fn a_schema_file_next_to_the_definition_is_read_into_the_lock_and_hashed() {
    let env = TestEnv::new();
    std::fs::write(env.path().join("answer.schema.json"), SCHEMA).unwrap();
    let agent = json_agent(&env, "answer.schema.json");
    let valid = env.run(
        "kxen-agent",
        &["agent", "validate", agent.to_str().unwrap()],
    );
    valid.expect(0);
    let v = &valid.jsonl()[0];
    assert_eq!(
        v["definition"]["spec"]["output"]["schema"]["required"],
        json!(["ok", "count"])
    );
    let inline = json_agent(&env, SCHEMA);
    let same = env.run(
        "kxen-agent",
        &["agent", "validate", inline.to_str().unwrap()],
    );
    assert_eq!(same.jsonl()[0]["definitionHash"], v["definitionHash"]);
    // Without a schema the hash is the one it always was.
    let plain = agent_with_output(&env, "{format: json, requiredFields: [ok]}");
    let plain = env.run(
        "kxen-agent",
        &["agent", "validate", plain.to_str().unwrap()],
    );
    assert!(!plain.stdout.contains("\"schema\""));
    assert_ne!(plain.jsonl()[0]["definitionHash"], v["definitionHash"]);
}

fn agent_with_output(env: &TestEnv, output: &str) -> std::path::PathBuf {
    agent(env, "plain", "read", "", output)
}

#[test]
fn an_invalid_schema_is_exit_4_at_validation() {
    let env = TestEnv::new();
    for (schema, says) in [
        (r#"{"type": "objekt"}"#, "not a valid JSON Schema"),
        ("missing.json", "missing.json"),
    ] {
        let agent = json_agent(&env, schema);
        let run = env.run(
            "kxen-agent",
            &["agent", "validate", agent.to_str().unwrap()],
        );
        assert!(run.stderr.contains(says), "{}", run.stderr);
        assert_ne!(run.code, 0);
    }
    let agent = json_agent(&env, r#"{"type": "objekt"}"#);
    let run = env.run(
        "kxen-agent",
        &["agent", "validate", agent.to_str().unwrap()],
    );
    run.expect(4);
    // `schema` without `format: json`.
    let text = agent_with_output(&env, "{format: text, schema: {type: object}}");
    let run = env.run("kxen-agent", &["agent", "validate", text.to_str().unwrap()]);
    run.expect(4);
    assert!(run.stderr.contains("format: json"), "{}", run.stderr);
}

#[test]
fn output_schema_checks_one_run_of_a_text_agent() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "x\n")]);
    let schema = env.path().join("s.json");
    std::fs::write(&schema, SCHEMA).unwrap();
    let s = schema.to_str().unwrap();
    let config = script_config(
        &env,
        &[answer("```json\n{\"ok\": true, \"count\": 1}\n```")],
    );
    let run = run_new(
        &env,
        &repo,
        "Report",
        &fixer(&env),
        &config,
        &["--output-schema", s],
    );
    run.expect(0);
    let done = finished(&run.jsonl()).clone();
    assert_eq!(done["finalText"], "{\"ok\": true, \"count\": 1}");
    // The model was told (in its task), and the run keeps the schema in run.json.
    let session = env.run("kxen-agent", &["session", "list"]).jsonl()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = env
        .run("kxen-agent", &["session", "show", &session])
        .jsonl()[0]
        .clone();
    assert!(
        shown["runs"][0]["task"]
            .as_str()
            .unwrap()
            .contains("JSON Schema")
    );
    assert_eq!(
        shown["runs"][0]["outputSchema"]["required"],
        json!(["ok", "count"])
    );

    let config = script_config(&env, &[answer("All done.")]);
    let run = run_new(
        &env,
        &repo,
        "Report",
        &fixer(&env),
        &config,
        &["--output-schema", s],
    );
    run.expect(1);
    assert!(
        finished(&run.jsonl())["error"]
            .as_str()
            .unwrap()
            .contains("not valid JSON")
    );

    // A schema file that is no JSON Schema, or missing: refused before anything is created.
    std::fs::write(&schema, r#"{"minimum": "zero"}"#).unwrap();
    let run = run_new(
        &env,
        &repo,
        "Report",
        &fixer(&env),
        &config,
        &["--output-schema", s],
    );
    run.expect(4);
    let missing = env.path().join("none.json");
    let run = run_new(
        &env,
        &repo,
        "Report",
        &fixer(&env),
        &config,
        &["--output-schema", missing.to_str().unwrap()],
    );
    run.expect(3);
}
