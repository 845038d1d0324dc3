use proptest::prelude::*;

use super::*;
use crate::error::ErrorKind;

fn policy(json: &str) -> MergedPolicy {
    let file = parse_policy(json.as_bytes(), "policy.json").unwrap();
    merge_with(file, &PolicyFlags::default()).unwrap()
}

#[track_caller]
fn invalid(json: &str) -> String {
    let err = parse_policy(json.as_bytes(), "policy.json").unwrap_err();
    assert_eq!(err.kind, ErrorKind::InvalidInput, "{}", err.message);
    assert!(err.message.starts_with("policy.json"), "{}", err.message);
    err.message
}

#[test]
fn the_spec_example_and_the_template_parse() {
    let p = policy(
        r#"{"allowedCapabilities": ["read","glob","grep","edit","write","exec","lsp"], "deniedCapabilities": [],
            "allowShell": true, "allowMcp": false, "passEnv": [], "maxTurns": 48, "maxWallClockMs": 1800000}"#,
    );
    assert!(p.allow_shell);
    assert_eq!(p.max_turns, Some(48));
    let t = policy(crate::templates::POLICY_JSON);
    assert!(!t.allow_shell);
}

#[test]
fn no_file_means_the_closed_defaults() {
    let p = merge(&PolicyFlags::default()).unwrap();
    assert_eq!(p, MergedPolicy::default());
    assert_eq!(
        p.canonical_json(),
        r#"{"allowedCapabilities":null,"deniedCapabilities":[],"allowShell":false,"allowMcp":false,"passEnv":[],"maxTurns":null,"maxWallClockMs":null,"maxPureRetries":null}"#
    );
    // Shell and MCP are off by default.
    assert_eq!(
        permitted_catalog(&p),
        ["edit", "glob", "grep", "lsp", "read", "write"]
    );
}

#[test]
fn flags_merge_into_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.json");
    std::fs::write(
        &path,
        r#"{"passEnv": ["NPM_TOKEN", "CARGO_HOME"], "maxTurns": 10}"#,
    )
    .unwrap();
    let merged = merge(&PolicyFlags {
        policy_file: Some(path),
        allow_shell: true,
        allow_mcp: true,
        pass_env: vec!["GITHUB_TOKEN".into(), "CARGO_HOME".into()],
        ..Default::default()
    })
    .unwrap();
    assert!(merged.allow_shell && merged.allow_mcp);
    assert_eq!(merged.pass_env, ["CARGO_HOME", "GITHUB_TOKEN", "NPM_TOKEN"]);
    assert_eq!(merged.max_turns, Some(10));
    // A flag never turns a file's `true` off: flags only add.
    let file = parse_policy(br#"{"allowShell": true}"#, "p.json").unwrap();
    assert!(
        merge_with(file, &PolicyFlags::default())
            .unwrap()
            .allow_shell
    );
}

#[test]
fn missing_policy_file_is_not_found() {
    let err = merge(&PolicyFlags {
        policy_file: Some("/nonexistent/policy.json".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert_eq!(err.kind, ErrorKind::NotFound);
    assert!(err.message.contains("/nonexistent/policy.json"));
}

#[test]
fn pass_env_flags_are_validated() {
    for (name, expect) in [
        ("OPENAI_API_KEY", "model-provider credential"),
        ("anthropic_api_key", "model-provider credential"),
        ("XAI_API_KEY", "model-provider credential"),
        ("1BAD", "not an environment variable name"),
        ("A=B", "not an environment variable name"),
    ] {
        let err = merge(&PolicyFlags {
            pass_env: vec![name.into()],
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(err.kind, ErrorKind::InvalidInput);
        assert!(
            err.message.contains(&format!("--pass-env {name:?}")),
            "{}",
            err.message
        );
        assert!(err.message.contains(expect), "{}", err.message);
    }
    let msg = invalid(r#"{"passEnv": ["PATH", "Gemini_Api_Key"]}"#);
    assert!(
        msg.contains("passEnv[1]: Gemini_Api_Key is a model-provider credential"),
        "{msg}"
    );
}

#[test]
fn hash_is_stable_and_order_independent() {
    let a = merge_with(
        parse_policy(
            br#"{"deniedCapabilities": ["write", "edit"], "passEnv": ["B", "A"]}"#,
            "a",
        )
        .unwrap(),
        &PolicyFlags {
            pass_env: vec!["C".into(), "A".into()],
            ..Default::default()
        },
    )
    .unwrap();
    let b = merge_with(
        parse_policy(
            br#"{"passEnv": ["C"], "deniedCapabilities": ["edit", "write", "edit"]}"#,
            "b",
        )
        .unwrap(),
        &PolicyFlags {
            pass_env: vec!["A".into(), "B".into()],
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(a, b);
    assert_eq!(a.policy_hash(), b.policy_hash());
    assert_eq!(a.pass_env, ["A", "B", "C"]);
    assert!(a.policy_hash().starts_with("sha256:") && a.policy_hash().len() == 71);
    // The hash is a pure function of the canonical bytes.
    assert_eq!(
        a.policy_hash(),
        crate::hash::sha256_prefixed(a.canonical_json().as_bytes())
    );
    // And it changes with any permission.
    let mut c = a.clone();
    c.allow_shell = true;
    assert_ne!(c.policy_hash(), a.policy_hash());
    let mut d = a.clone();
    d.pass_env.push("D".into());
    assert_ne!(d.policy_hash(), a.policy_hash());
    // The merged policy round-trips through JSON (as stored in a lock).
    let back: MergedPolicy = serde_json::from_str(&a.canonical_json()).unwrap();
    assert_eq!(back.policy_hash(), a.policy_hash());
}

#[test]
fn permitted_catalog_rules() {
    // allowShell gates exec and task; denied wins over allowed and over allowShell.
    let p = policy(r#"{"allowShell": true, "deniedCapabilities": ["exec", "edit"]}"#);
    assert_eq!(
        permitted_catalog(&p),
        ["glob", "grep", "lsp", "read", "task", "write"]
    );
    assert!(p.refusal("exec").unwrap().contains("deniedCapabilities"));
    let p = policy(r#"{"allowShell": true}"#);
    assert_eq!(
        permitted_catalog(&p),
        [
            "edit", "exec", "glob", "grep", "lsp", "read", "task", "write"
        ]
    );
    assert!(
        policy("{}")
            .refusal("task")
            .unwrap()
            .contains("--allow-shell")
    );
    // allowedCapabilities restricts; unknown and unimplemented names are never permitted.
    let p = policy(
        r#"{"allowedCapabilities": ["read", "browser", "exec"], "allowShell": true, "allowMcp": true}"#,
    );
    assert_eq!(permitted_catalog(&p), ["exec", "read"]);
    assert!(p.refusal("grep").unwrap().contains("allowedCapabilities"));
    assert!(p.refusal("lsp").unwrap().contains("allowedCapabilities"));
    assert!(p.refusal("browser").unwrap().contains("no tool"));
    assert!(
        p.refusal("mcp__github__search")
            .unwrap()
            .contains("allowedCapabilities")
    );
    // MCP capabilities: gated by allowMcp; `mcp__…*` entries of the lists are patterns.
    assert!(
        policy("{}")
            .refusal("mcp__gh__search")
            .unwrap()
            .contains("--allow-mcp")
    );
    let p = policy(r#"{"allowMcp": true, "deniedCapabilities": ["mcp__gh__delete_repo"]}"#);
    assert_eq!(p.refusal("mcp__gh__search"), None);
    assert_eq!(p.refusal("mcp__gh__*"), None);
    assert!(
        p.refusal("mcp__gh__delete_repo")
            .unwrap()
            .contains("deniedCapabilities")
    );
    let p = policy(r#"{"allowMcp": true, "allowedCapabilities": ["mcp__gh__*"]}"#);
    assert_eq!(p.refusal("mcp__gh__search"), None);
    assert!(p.refusal("mcp__web__get").is_some());
    // A family has no fixed names: the Builder is never offered MCP tools.
    assert!(
        permitted_catalog(&policy(r#"{"allowMcp": true}"#))
            .iter()
            .all(|c| !c.starts_with("mcp__"))
    );
    // Without allowShell, exec and task are refused with the flag to use.
    let p = policy("{}");
    assert!(p.refusal("exec").unwrap().contains("--allow-shell"));
    // An empty allow-list permits nothing.
    assert!(permitted_catalog(&policy(r#"{"allowedCapabilities": []}"#)).is_empty());
}

#[test]
fn invalid_policies_name_the_field() {
    assert!(invalid("").contains("the file is empty"));
    assert!(
        invalid(r#"{"allowShell": true, "allowInternet": true}"#)
            .contains("unknown field `allowInternet`")
    );
    assert!(
        invalid(r#"{"allowShell": true, "allowShell": false}"#)
            .contains("duplicate field `allowShell`")
    );
    assert!(
        invalid(r#"{"allowShell": "yes"}"#)
            .contains("policy.json:1:20: invalid type: string \"yes\", expected a boolean")
    );
    assert!(invalid(r#"{"maxTurns": 0}"#).contains("maxTurns: must be at least 1"));
    assert!(invalid(r#"{"maxTurns": -1}"#).contains("invalid value"));
    assert!(invalid(r#"{"maxWallClockMs": 0}"#).contains("maxWallClockMs: must be at least 1"));
    assert!(
        invalid(r#"{"maxPureRetries": 256}"#).contains("maxPureRetries: must be between 0 and 255")
    );
    assert!(invalid(r#"{"deniedCapabilities": ["a b"]}"#).contains("deniedCapabilities[0]"));
    assert!(invalid(r#"{"allowedCapabilities": [""]}"#).contains("allowedCapabilities[0]"));
    assert!(invalid(r#"[]"#).contains("must be one JSON object"));
    assert!(invalid(r#" [true, [], false]"#).contains("must be one JSON object"));
    assert!(invalid(r#"{"passEnv": {"A": 1}}"#).contains("invalid type: map"));
    assert!(invalid(r#"{"allowShell": true"#).contains("EOF"));
    assert!(invalid("{\"a\":1}\n{}").contains("policy.json:"));
    assert!(invalid(&format!("{{\"passEnv\": {}", "[".repeat(10_000))).contains("policy.json:1:"));
    let big = format!("{{\"passEnv\": [{}\"A\"]}}", "\"A\",".repeat(300_000));
    assert!(invalid(&big).contains("larger than 1048576 bytes"));
    // A BOM and CRLF are fine; maxPureRetries is accepted as a tightening.
    let p = parse_policy(b"\xEF\xBB\xBF{\r\n\"maxPureRetries\": 0\r\n}\r\n", "p").unwrap();
    assert_eq!(p.max_pure_retries, Some(0));
}

#[test]
fn drift_diff_shows_what_changed() {
    let locked = policy(r#"{"passEnv": ["NPM_TOKEN"]}"#);
    let now = merge_with(
        parse_policy(br#"{"passEnv": ["NPM_TOKEN"]}"#, "p").unwrap(),
        &PolicyFlags {
            allow_shell: true,
            pass_env: vec!["GITHUB_TOKEN".into()],
            ..Default::default()
        },
    )
    .unwrap();
    let diff = drift_diff(&locked, &now);
    assert!(
        diff.starts_with("--- locked policy\n+++ current policy\n"),
        "{diff}"
    );
    assert!(
        diff.contains("-  \"allowShell\": false,\n+  \"allowShell\": true,\n"),
        "{diff}"
    );
    assert!(diff.contains("+    \"GITHUB_TOKEN\",\n"), "{diff}");
    assert!(
        !diff.contains("maxPureRetries"),
        "context is limited: {diff}"
    );
    assert_eq!(drift_diff(&locked, &locked), "");
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        if let Err(e) = parse_policy(&bytes, "fuzz.json") {
            prop_assert_eq!(e.kind, ErrorKind::InvalidInput);
        }
    }

    #[test]
    fn pass_env_order_never_changes_the_hash(
        names in proptest::collection::vec("[A-Z_][A-Z0-9_]{0,12}", 0..8),
        split in 0usize..8,
    ) {
        let names: Vec<String> = names.into_iter().filter(|n| !is_provider_credential(n)).collect();
        let split = split.min(names.len());
        let mut reversed = names.clone();
        reversed.reverse();
        let a = merge_with(PolicyFile { pass_env: names[..split].to_vec(), ..Default::default() },
            &PolicyFlags { pass_env: names[split..].to_vec(), ..Default::default() }).unwrap();
        let b = merge_with(PolicyFile::default(),
            &PolicyFlags { pass_env: reversed, ..Default::default() }).unwrap();
        prop_assert_eq!(a.policy_hash(), b.policy_hash());
    }
}

#[test]
fn the_fence_fields_keep_old_hashes_at_their_defaults_and_change_them_otherwise() {
    // The hash every pre-fence Session with the default policy has locked (docs/state-format.md).
    let default = policy("{}");
    assert_eq!(
        default.policy_hash(),
        "sha256:ade4dc00f3cefea6fce8a0b2b2d86c75838d5413d192b97633cc99b7542414b4"
    );
    assert_eq!(
        policy(r#"{"sandbox": "workspaceWrite", "allowNetwork": false}"#),
        default
    );
    let off = policy(r#"{"sandbox": "off"}"#);
    assert_eq!(off.sandbox, SandboxMode::Off);
    assert!(
        off.canonical_json()
            .ends_with(r#""maxPureRetries":null,"sandbox":"off"}"#)
    );
    let ro_net = policy(r#"{"sandbox": "readOnly", "allowNetwork": true}"#);
    assert!(
        ro_net
            .canonical_json()
            .ends_with(r#""sandbox":"readOnly","allowNetwork":true}"#)
    );
    let hashes = [&default, &off, &ro_net].map(|p| p.policy_hash());
    assert!(hashes[0] != hashes[1] && hashes[1] != hashes[2] && hashes[0] != hashes[2]);
    // The flag adds the network like the file field does.
    let flagged = merge_with(
        PolicyFile::default(),
        &PolicyFlags {
            allow_network: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(flagged.allow_network && flagged.fence().allow_network);
    // A locked policy without the keys reads back as the defaults.
    let old: MergedPolicy = serde_json::from_str(&default.canonical_json()).unwrap();
    assert_eq!(old.fence(), FencePolicy::default());
    let back: MergedPolicy = serde_json::from_str(&ro_net.canonical_json()).unwrap();
    assert_eq!(back, ro_net);
}

#[test]
fn an_unknown_sandbox_mode_names_the_field() {
    let m = invalid(r#"{"sandbox": "none"}"#);
    assert!(m.contains("sandbox: must be"), "{m}");
    invalid(r#"{"allowNetwork": "yes"}"#);
}

#[test]
fn mcp_tools_rules_deny_ask_and_hash() {
    let p = policy(
        r#"{"allowMcp": true, "allowShell": true,
            "mcpTools": {"mcp__gh__*": "ask", "mcp__gh__delete_repo": "deny", "exec": "ask"}}"#,
    );
    assert!(
        p.refusal("mcp__gh__delete_repo")
            .unwrap()
            .contains("mcpTools rule \"mcp__gh__delete_repo\"")
    );
    assert_eq!(p.refusal("mcp__gh__search"), None);
    assert_eq!(
        p.rule("mcp__gh__search"),
        (ToolRule::Ask, Some("mcp__gh__*"))
    );
    assert_eq!(p.rule("exec"), (ToolRule::Ask, Some("exec")));
    assert_eq!(
        p.refusal("exec"),
        None,
        "ask keeps a capability in the catalog"
    );
    // Rules are part of the hash; no rules hash as before they existed.
    let plain = policy(r#"{"allowMcp": true, "allowShell": true}"#);
    assert_ne!(p.policy_hash(), plain.policy_hash());
    assert!(!plain.canonical_json().contains("mcpTools"));
    assert!(p.canonical_json().ends_with(
        r#""mcpTools":{"exec":"ask","mcp__gh__*":"ask","mcp__gh__delete_repo":"deny"}}"#
    ));
    let deny_exec = policy(r#"{"allowShell": true, "mcpTools": {"exec": "deny"}}"#);
    assert!(!permitted_catalog(&deny_exec).contains(&"exec".to_string()));
    assert!(invalid(r#"{"mcpTools": {"exec": "maybe"}}"#).contains("unknown variant `maybe`"));
    assert!(invalid(r#"{"mcpTools": {"e*": "ask"}}"#).contains("only MCP patterns"));
    assert!(
        invalid(r#"{"mcpTools": {"exec": "ask", "exec": "deny"}}"#)
            .contains("pattern \"exec\" appears twice")
    );
}

#[test]
fn mcp_pass_env_is_per_server_hashed_and_absent_keeps_the_old_hash() {
    let none = policy("{}");
    // An empty map, or servers with no names, hash exactly as a policy without the field.
    for same in [r#"{"mcpPassEnv": {}}"#, r#"{"mcpPassEnv": {"gh": []}}"#] {
        let p = policy(same);
        assert_eq!(p.policy_hash(), none.policy_hash(), "{same}");
        assert!(!p.canonical_json().contains("mcpPassEnv"), "{same}");
    }
    let p = policy(
        r#"{"passEnv": ["NPM_TOKEN"], "mcpPassEnv": {"gh": ["GITHUB_TOKEN", "GH_HOST_TOKEN", "GITHUB_TOKEN"]}}"#,
    );
    assert_ne!(p.policy_hash(), none.policy_hash());
    assert!(
        p.canonical_json()
            .ends_with(r#""mcpPassEnv":{"gh":["GH_HOST_TOKEN","GITHUB_TOKEN"]}}"#),
        "{}",
        p.canonical_json()
    );
    // exec gets passEnv only; the server its own list as well.
    assert_eq!(p.pass_env, ["NPM_TOKEN"]);
    assert_eq!(
        p.server_pass_env("gh"),
        ["GH_HOST_TOKEN", "GITHUB_TOKEN", "NPM_TOKEN"]
    );
    assert_eq!(p.server_pass_env("other"), ["NPM_TOKEN"]);
    assert_eq!(
        p.all_pass_env(),
        ["GH_HOST_TOKEN", "GITHUB_TOKEN", "NPM_TOKEN"]
    );
    let other = policy(
        r#"{"passEnv": ["NPM_TOKEN"], "mcpPassEnv": {"gl": ["GITHUB_TOKEN", "GH_HOST_TOKEN"]}}"#,
    );
    assert_ne!(p.policy_hash(), other.policy_hash());
    // Names and servers are checked like passEnv and server names.
    assert!(invalid(r#"{"mcpPassEnv": {"GH": ["A"]}}"#).contains("mcpPassEnv: MCP server name"));
    assert!(invalid(r#"{"mcpPassEnv": {"gh": ["OPENAI_API_KEY"]}}"#).contains("mcpPassEnv.gh[0]:"));
    assert!(invalid(r#"{"mcpPassEnv": ["A"]}"#).contains("invalid type"));
}

#[test]
fn max_task_depth_is_hashed_only_when_given_and_bounded() {
    let none = policy("{}");
    assert_eq!(none.task_depth_limit(), 1);
    assert!(!none.canonical_json().contains("maxTaskDepth"));
    let two = policy(r#"{"maxTaskDepth": 2}"#);
    assert_eq!(two.task_depth_limit(), 2);
    assert_ne!(
        two.policy_hash(),
        none.policy_hash(),
        "a changed limit is drift"
    );
    assert!(two.canonical_json().ends_with(r#""maxTaskDepth":2}"#));
    for bad in [r#"{"maxTaskDepth": 0}"#, r#"{"maxTaskDepth": 9}"#] {
        assert!(
            invalid(bad).contains("maxTaskDepth: must be between 1 and 8"),
            "{bad}"
        );
    }
}

#[test]
fn mcp_elicitation_is_hashed_only_when_it_is_not_the_default() {
    let none = policy("{}");
    assert_eq!(none.mcp_elicitation, McpElicitation::Decline);
    let decline = policy(r#"{"mcpElicitation": "decline"}"#);
    assert_eq!(decline.policy_hash(), none.policy_hash());
    assert!(!decline.canonical_json().contains("mcpElicitation"));
    let accept = policy(r#"{"mcpElicitation": "acceptDefaults"}"#);
    assert_eq!(accept.mcp_elicitation, McpElicitation::AcceptDefaults);
    assert_ne!(accept.policy_hash(), none.policy_hash());
    assert!(
        accept
            .canonical_json()
            .ends_with(r#""mcpElicitation":"acceptDefaults"}"#),
        "{}",
        accept.canonical_json()
    );
    let round: MergedPolicy = serde_json::from_str(&accept.canonical_json()).unwrap();
    assert_eq!(round, accept);
    assert!(invalid(r#"{"mcpElicitation": "accept"}"#).contains("unknown variant"));
}
