//! `kind = "anthropic"` in real runs against a loopback Messages API: tool use and results,
//! cache breakpoints, cache usage recorded as numbers of their own, and a canary key that never
//! reaches state, events or errors (not even from an error body that echoes the headers).

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::fake_model::{Reply, config, serve};
use crate::run_support::*;

const KEY: &str = "sk-ant-api03-canary-9f8e7d6c5b4a";

fn message(content: Value, usage: Value) -> Reply {
    Reply::json(&json!({"id": "msg", "type": "message", "role": "assistant",
        "content": content, "stop_reason": "end_turn", "usage": usage}))
}

fn claude_config(env: &TestEnv, url: &str) -> std::path::PathBuf {
    config(
        env,
        &format!(
            "kind = \"anthropic\"\nbase_url = \"{url}\"\nmodel = \"claude-test\"\n\
             api_key_env = \"KXEN_TEST_ANTHROPIC_KEY\"\nmax_tokens = 2048"
        ),
    )
}

fn assert_no_key(env: &TestEnv, run: &crate::env::Run) {
    assert!(!run.stdout.contains(KEY), "{}", run.stdout);
    assert!(!run.stderr.contains(KEY), "{}", run.stderr);
    for file in files_under(&env.state_dir()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains("canary-9f8e"),
            "{}",
            file.display()
        );
    }
}

#[test]
fn a_run_uses_tools_through_the_messages_api_and_records_cache_usage() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let (url, seen) = serve(|n, _| match n {
        0 => message(
            json!([{"type": "text", "text": "Let me look."},
                   {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.txt"}}]),
            json!({"input_tokens": 20, "output_tokens": 9, "cache_creation_input_tokens": 1500,
                   "cache_read_input_tokens": 0}),
        ),
        _ => message(
            json!([{"type": "text", "text": "It says alpha."}]),
            json!({"input_tokens": 30, "output_tokens": 4, "cache_creation_input_tokens": 60,
                   "cache_read_input_tokens": 1500}),
        ),
    });
    let config = claude_config(&env, &url);
    let agent = fixer(&env);
    let out = env
        .cmd("kxen-agent")
        .env("KXEN_TEST_ANTHROPIC_KEY", KEY)
        .args([
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "What does a.txt say?",
        ])
        .args([
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let run = crate::env::Run::from(out);
    run.expect(0);
    let events = run.jsonl();
    let fin = finished(&events);
    assert_eq!(fin["finalText"], "It says alpha.");
    assert_eq!(
        fin["usage"],
        json!({"inputTokens": 1520 + 1590, "outputTokens": 13,
               "cacheReadTokens": 1500, "cacheWriteTokens": 1560})
    );
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    for r in &requests {
        assert_eq!(r.path, "/v1/messages");
        assert_eq!(r.header("x-api-key"), Some(KEY));
        assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
        let body = r.json();
        assert_eq!(body["model"], "claude-test");
        assert_eq!(body["max_tokens"], 2048);
        assert_eq!(
            body["system"][0]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert!(
            body["system"][0]["text"]
                .as_str()
                .unwrap()
                .contains("Execution contract")
        );
        let tools = body["tools"].as_array().unwrap();
        assert_eq!(
            tools.last().unwrap()["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert!(
            tools
                .iter()
                .any(|t| t["name"] == "read" && t["input_schema"].is_object())
        );
    }
    let second = requests[1].json();
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(messages[1]["content"][1]["type"], "tool_use");
    assert_eq!(messages[1]["content"][1]["id"], "toolu_1");
    let result = &messages[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "toolu_1");
    assert!(result["content"].as_str().unwrap().contains("alpha"));
    assert_eq!(result["cache_control"], json!({"type": "ephemeral"}));
    // The earlier messages carry no breakpoint any more.
    assert!(messages[0]["content"][0].get("cache_control").is_none());
    // The Session records the cache counts with each response.
    let session = fin["sessionId"].as_str().unwrap();
    let log = files_under(&env.state_dir())
        .into_iter()
        .find(|f| f.ends_with("messages.jsonl"))
        .map(|f| std::fs::read_to_string(f).unwrap())
        .unwrap();
    assert!(
        log.contains("\"cacheReadTokens\":1500,\"cacheWriteTokens\":60"),
        "{log}"
    );
    let show = env.run("kxen-agent", &["session", "show", session]);
    show.expect(0);
    assert_eq!(
        show.jsonl()[0]["runs"][0]["attempts"][0]["provider"],
        json!({"name": "p", "kind": "anthropic", "model": "claude-test",
               "options": {"maxTokens": 2048, "cache": true}})
    );
    assert_no_key(&env, &run);
    assert_no_key(&env, &show);
}

#[test]
fn an_error_body_echoing_the_request_headers_never_shows_the_key() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let (url, _seen) = serve(|n, request| {
        let echo: Vec<String> = request
            .headers
            .iter()
            .map(|(n, v)| format!("{n}: {v}"))
            .collect();
        let body = json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": format!("bad request; headers were {}", echo.join(", "))}})
        .to_string();
        // First a retried 500, then a refused 400: both echo the key.
        Reply::Full {
            status: if n == 0 { 500 } else { 400 },
            headers: vec![("retry-after", "0".into())],
            body,
        }
    });
    let config = claude_config(&env, &url);
    let agent = fixer(&env);
    let out = env
        .cmd("kxen-agent")
        .env("KXEN_TEST_ANTHROPIC_KEY", KEY)
        .args([
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "Read a.txt",
        ])
        .args([
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let run = crate::env::Run::from(out);
    run.expect(9);
    let events = run.jsonl();
    let retry = events.iter().find(|e| e["type"] == "modelRetry").unwrap();
    assert!(
        retry["reason"].as_str().unwrap().contains("[redacted]"),
        "{retry}"
    );
    let error = finished(&events)["error"].as_str().unwrap().to_string();
    assert!(
        error.contains("HTTP 400") && error.contains("x-api-key: [redacted]"),
        "{error}"
    );
    assert_no_key(&env, &run);
    // Text view too.
    let out = env
        .cmd("kxen-agent")
        .env("KXEN_TEST_ANTHROPIC_KEY", KEY)
        .args([
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "Read a.txt",
        ])
        .args([
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ])
        .args(["--format", "text"])
        .output()
        .unwrap();
    assert_no_key(&env, &crate::env::Run::from(out));
}

#[test]
fn anthropic_config_errors_are_exit_4_and_never_echo_a_key() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let agent = fixer(&env);
    for (body, says) in [
        (
            "kind = \"anthropic\"\nmodel = \"m\"\ntemperature = 1.5",
            "between 0 and 1",
        ),
        (
            "kind = \"anthropic\"\nmodel = \"m\"\nextra_body = { system = \"x\" }",
            "cannot set `system`",
        ),
        (
            "kind = \"anthropic\"\nmodel = \"m\"\nextra_body = { max_tokens = 5 }",
            "set it directly",
        ),
        (
            "kind = \"anthropic\"\nmodel = \"m\"\napi_key_env = \"sk-ant-api03-abcdefgh\"",
            "not shown",
        ),
        (
            "kind = \"anthropic\"\nmodel = \"m\"\nmax_transport_retries = 99",
            "above 20",
        ),
        (
            "kind = \"anthropic\"\nmodel = \"m\"\ncache = \"yes\"",
            "invalid type",
        ),
    ] {
        let config = config(&env, body);
        let run = run_new(&env, &repo, "x", &agent, &config, &[]);
        run.expect(4);
        assert!(
            run.stderr.contains(says) || run.stdout.contains(says),
            "{body}: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("sk-ant-api03-abcdefgh"));
    }
    // The key variable unset: the call fails (exit 9) naming it.
    let config = config(
        &env,
        "kind = \"anthropic\"\nmodel = \"m\"\nbase_url = \"http://127.0.0.1:9\"\napi_key_env = \"KXEN_TEST_ANTHROPIC_UNSET\"",
    );
    let run = run_new(&env, &repo, "x", &agent, &config, &[]);
    run.expect(9);
    assert!(
        run.stdout.contains("KXEN_TEST_ANTHROPIC_UNSET")
            || run.stderr.contains("KXEN_TEST_ANTHROPIC_UNSET")
    );
}
