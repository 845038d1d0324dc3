//! `kxen-agent policy check`: the merged policy, its hash and the capability intersection.

use std::path::PathBuf;

use crate::env::TestEnv;

fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/agents")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn defaults_permit_no_shell_and_flags_merge() {
    let env = TestEnv::new();
    let run = env.run("kxen-agent", &["policy", "check"]);
    run.expect(0);
    let v = &run.jsonl()[0];
    assert_eq!(v["type"], "policy");
    assert_eq!(
        v["permittedCapabilities"],
        serde_json::json!(["edit", "glob", "grep", "read", "write"])
    );
    let default_hash = v["policyHash"].as_str().unwrap().to_string();

    std::fs::write(
        env.path().join("p.json"),
        r#"{"passEnv": ["NPM_TOKEN"], "maxTurns": 10}"#,
    )
    .unwrap();
    let args = |order: [&'static str; 2]| {
        let mut a = vec!["policy", "check", "--policy", "p.json", "--allow-shell"];
        for name in order {
            a.extend(["--pass-env", name]);
        }
        a
    };
    let one = env.run("kxen-agent", &args(["GITHUB_TOKEN", "CARGO_HOME"]));
    one.expect(0);
    let two = env.run("kxen-agent", &args(["CARGO_HOME", "GITHUB_TOKEN"]));
    let (one, two) = (&one.jsonl()[0], &two.jsonl()[0]);
    assert_eq!(one["policyHash"], two["policyHash"]);
    assert_ne!(one["policyHash"], default_hash.as_str());
    assert_eq!(
        one["policy"]["passEnv"],
        serde_json::json!(["CARGO_HOME", "GITHUB_TOKEN", "NPM_TOKEN"])
    );
    assert_eq!(one["policy"]["allowShell"], true);
    assert!(
        one["permittedCapabilities"]
            .as_array()
            .unwrap()
            .contains(&"exec".into())
    );
}

#[test]
fn agent_capabilities_are_intersected_and_budgets_tightened() {
    let env = TestEnv::new();
    std::fs::write(
        env.path().join("p.json"),
        r#"{"deniedCapabilities": ["write"], "maxTurns": 5, "maxPureRetries": 0}"#,
    )
    .unwrap();
    let run = env.run(
        "kxen-agent",
        &[
            "policy",
            "check",
            "--policy",
            "p.json",
            "--agent",
            &fixture("full.yaml"),
        ],
    );
    run.expect(0);
    let v = &run.jsonl()[0];
    // full.yaml: required read, glob, grep; optional edit, write, exec, lsp.
    assert_eq!(
        v["capabilities"],
        serde_json::json!(["edit", "glob", "grep", "read"])
    );
    assert_eq!(v["execution"]["maxTurns"], 5);
    assert_eq!(v["execution"]["maxPureRetries"], 0);
    assert_eq!(v["execution"]["maxWallClockMs"], 1_800_000);
}

#[test]
fn a_denied_required_capability_exits_6_naming_it() {
    let env = TestEnv::new();
    std::fs::write(
        env.path().join("p.json"),
        r#"{"deniedCapabilities": ["grep"]}"#,
    )
    .unwrap();
    let run = env.run(
        "kxen-agent",
        &[
            "policy",
            "check",
            "--policy",
            "p.json",
            "--agent",
            &fixture("full.yaml"),
        ],
    );
    run.expect(6);
    let v = &run.jsonl()[0];
    assert_eq!(v["kind"], "policy");
    assert!(v["message"].as_str().unwrap().contains("`grep`"));

    std::fs::write(
        env.path().join("shell.yaml"),
        "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: sh}\nspec:\n  objective: Run\n  instructions: [Run it]\n  capabilities: {required: [exec]}\n",
    )
    .unwrap();
    let run = env.run("kxen-agent", &["policy", "check", "--agent", "shell.yaml"]);
    run.expect(6);
    assert!(run.stderr.contains("`exec`"));
    assert!(run.stderr.contains("hint: pass --allow-shell"));
    env.run(
        "kxen-agent",
        &["policy", "check", "--agent", "shell.yaml", "--allow-shell"],
    )
    .expect(0);
}

#[test]
fn bad_policies_and_provider_keys_exit_4() {
    let env = TestEnv::new();
    let cases = [
        (
            r#"{"allowShell": true, "shell": true}"#,
            "unknown field `shell`",
        ),
        (
            r#"{"passEnv": ["ANTHROPIC_API_KEY"]}"#,
            "passEnv[0]: ANTHROPIC_API_KEY is a model-provider credential",
        ),
        (r#"{"allowShell": "yes"}"#, "p.json:1:20: invalid type"),
        ("", "the file is empty"),
        ("\u{0}\u{1}garbage", "must be one JSON object"),
    ];
    for (body, expect) in cases {
        std::fs::write(env.path().join("p.json"), body).unwrap();
        let run = env.run("kxen-agent", &["policy", "check", "--policy", "p.json"]);
        run.expect(4);
        let message = run.jsonl()[0]["message"].as_str().unwrap().to_string();
        assert!(message.starts_with("p.json"), "{message}");
        assert!(message.contains(expect), "{expect:?} not in {message:?}");
    }
    for key in ["OPENAI_API_KEY", "xai_api_key", "Mistral_Api_Key"] {
        let run = env.run("kxen-agent", &["policy", "check", "--pass-env", key]);
        run.expect(4);
        assert!(
            run.stderr.contains("model-provider credential"),
            "{}",
            run.stderr
        );
    }
    env.run(
        "kxen-agent",
        &["policy", "check", "--policy", "missing.json"],
    )
    .expect(3);
}

/// An `mcpTools` key that names no capability (`Exec`, `exce`) would match nothing, so the
/// `ask` the user wrote would silently be `allow`: refused, exit 4, naming the key.
#[test]
fn a_mistyped_mcp_tools_key_exits_4_naming_it() {
    let env = TestEnv::new();
    for key in ["Exec", "exce", "git_push"] {
        std::fs::write(
            env.path().join("p.json"),
            format!(r#"{{"allowShell": true, "mcpTools": {{"{key}": "ask"}}}}"#),
        )
        .unwrap();
        let run = env.run("kxen-agent", &["policy", "check", "--policy", "p.json"]);
        run.expect(4);
        let message = run.jsonl()[0]["message"].as_str().unwrap().to_string();
        assert!(
            message.contains(&format!("{key:?} names no capability")) && message.contains("exec"),
            "{message}"
        );
    }
    for key in ["exec", "mcp__gh__*", "mcp__gh__create_pr", "mcp__*"] {
        std::fs::write(
            env.path().join("p.json"),
            format!(r#"{{"allowShell": true, "mcpTools": {{"{key}": "ask"}}}}"#),
        )
        .unwrap();
        env.run("kxen-agent", &["policy", "check", "--policy", "p.json"])
            .expect(0);
    }
}
