//! `kxen-agent agent validate FILE`.

use std::path::PathBuf;

use crate::env::TestEnv;

const MINIMAL_HASH: &str =
    "sha256:b0f8eed214bd25b7c59fd33f16974631b683a8c6ea7a68fe0b727074ad13ab4b";

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/agents")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn minimal_definition_prints_the_pinned_hash_and_filled_defaults() {
    let env = TestEnv::new();
    let run = env.run(
        "kxen-agent",
        &["agent", "validate", &fixture("minimal.yaml")],
    );
    run.expect(0);
    let lines = run.jsonl();
    assert_eq!(lines.len(), 1);
    let line = &lines[0];
    assert_eq!(line["type"], "agentValid");
    assert_eq!(line["definitionHash"], MINIMAL_HASH);
    let spec = &line["definition"]["spec"];
    assert_eq!(spec["execution"]["modelRole"], "execution");
    assert_eq!(spec["execution"]["maxTurns"], 32);
    assert_eq!(spec["execution"]["maxPureRetries"], 1);
    assert!(spec["execution"].get("maxWallClockMs").is_none());
    assert_eq!(spec["capabilities"]["optional"], serde_json::json!([]));
    assert_eq!(spec["output"]["format"], "text");
    assert!(line["definition"]["metadata"].get("description").is_none());
    // Key order on the line is the schema order (the bytes that are hashed).
    let definition = serde_json::to_string(&line["definition"]).unwrap();
    assert_eq!(
        kxen::hash::sha256_prefixed(definition.as_bytes()),
        MINIMAL_HASH
    );
    // Read-only: nothing written to the state dir or the working directory.
    assert!(!env.state_dir().exists());
}

#[test]
fn text_format_prints_a_summary() {
    let env = TestEnv::new();
    let run = env.run(
        "kxen-agent",
        &[
            "--format",
            "text",
            "agent",
            "validate",
            &fixture("full.yaml"),
        ],
    );
    run.expect(0);
    assert!(run.stdout.contains("valid DCPAgent `repository_fixer`"));
    assert!(run.stdout.contains("definitionHash: sha256:"));
    assert!(
        run.stdout
            .contains("required [read, glob, grep], optional [edit, write, exec, lsp]")
    );
    assert!(
        run.stdout
            .contains("output: json (required fields: summary, evidence)")
    );
}

#[test]
fn the_init_template_validates() {
    let env = TestEnv::new();
    env.run("kxen-agent", &["agent", "init", "-o", "agent.yaml"])
        .expect(0);
    let run = env.run("kxen-agent", &["agent", "validate", "agent.yaml"]);
    run.expect(0);
    assert_eq!(
        run.jsonl()[0]["definition"]["metadata"]["name"],
        "repository_fixer"
    );
}

/// Each fixture in `fixtures/agents/invalid/` names its expected message on its first line.
#[test]
fn every_invalid_fixture_exits_4_naming_file_and_field() {
    let env = TestEnv::new();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/agents/invalid");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert!(names.len() >= 40);
    for name in names {
        // Copy to the env as a.yaml so messages start with the name we pass.
        let text = std::fs::read_to_string(dir.join(&name)).unwrap();
        let expect = text
            .lines()
            .next()
            .unwrap()
            .strip_prefix("# expect: ")
            .unwrap();
        std::fs::write(env.path().join("a.yaml"), &text).unwrap();
        let run = env.run("kxen-agent", &["agent", "validate", "a.yaml"]);
        assert_eq!(run.code, 4, "{name}: {}", run.stderr);
        let error = &run.jsonl()[0];
        assert_eq!(error["type"], "error");
        assert_eq!(error["kind"], "invalidInput");
        let message = error["message"].as_str().unwrap();
        assert!(message.starts_with("a.yaml"), "{name}: {message}");
        assert!(
            message.contains(expect),
            "{name}: expected {expect:?} in {message:?}"
        );
        assert!(run.stderr.contains(&format!("error: {message}")), "{name}");
        assert!(run.stderr.contains("hint: "), "{name}");
    }
}

#[test]
fn bad_files_end_in_one_clear_error() {
    let env = TestEnv::new();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.yaml", vec![], "the file is empty"),
        (
            "binary.yaml",
            (0..=255u8).cycle().take(5000).collect(),
            "a.yaml",
        ),
        (
            "huge.yaml",
            vec![b'#'; 10 * 1024 * 1024],
            "limited to 4194304 bytes",
        ),
    ];
    for (name, bytes, expect) in cases {
        std::fs::write(env.path().join(name), &bytes).unwrap();
        let run = env.run(
            "kxen-agent",
            &["--format", "text", "agent", "validate", name],
        );
        assert_eq!(run.code, 4, "{name}: {}", run.stderr);
        assert!(
            run.stderr.starts_with(&format!("error: {name}")),
            "{}",
            run.stderr
        );
        if expect != "a.yaml" {
            assert!(run.stderr.contains(expect), "{name}: {}", run.stderr);
        }
        assert!(run.stdout.is_empty());
    }
    let run = env.run("kxen-agent", &["agent", "validate", "missing.yaml"]);
    run.expect(3);
    assert!(
        run.jsonl()[0]["message"]
            .as_str()
            .unwrap()
            .contains("missing.yaml")
    );
}

#[test]
fn crlf_and_bom_hash_like_the_plain_file() {
    let env = TestEnv::new();
    let plain = std::fs::read_to_string(fixture("minimal.yaml")).unwrap();
    let crlf = format!("\u{feff}{}", plain.replace('\n', "\r\n"));
    std::fs::write(env.path().join("crlf.yaml"), crlf).unwrap();
    let run = env.run("kxen-agent", &["agent", "validate", "crlf.yaml"]);
    run.expect(0);
    assert_eq!(run.jsonl()[0]["definitionHash"], MINIMAL_HASH);
}
