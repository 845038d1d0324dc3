//! Request options of an `openai` provider (`temperature`, `top_p`, `max_tokens`, `seed`,
//! `extra_body`) reach every request of a real run, and run records show them (never a key).

use serde_json::json;

use crate::env::TestEnv;
use crate::run_canary::{completion, serve};
use crate::run_support::*;

const KEY: &str = "sk-options-canary-4e5f6a7b";

fn config(env: &TestEnv, url: &str, options: &str) -> std::path::PathBuf {
    let path = env.path().join("config.toml");
    std::fs::write(
        &path,
        format!(
            "[providers.local]\nkind = \"openai\"\nbase_url = \"{url}\"\nmodel = \"test-model\"\n\
             api_key_env = \"KXEN_TEST_OPTIONS_KEY\"\n{options}\n[roles]\nexecution = \"local\"\n"
        ),
    )
    .unwrap();
    path
}

#[test]
fn each_option_reaches_every_request_and_session_show_reports_it() {
    let env = TestEnv::new();
    let (run, bodies) = ask_about_a(
        &env,
        "temperature = 0.0\ntop_p = 0.8\nmax_tokens = 512\nseed = 42\n\
         extra_body = { cache_prompt = true, top_k = 1 }\n",
        vec![
            completion(
                json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "read", "arguments": "{\"path\": \"a.txt\"}"}}]}),
            ),
            completion(json!({"role": "assistant", "content": "It says a."})),
        ],
    );
    run.expect(0);
    assert_eq!(bodies.len(), 2);
    for body in &bodies {
        assert_eq!(body["temperature"], json!(0.0));
        assert_eq!(body["top_p"], json!(0.8));
        assert_eq!(body["max_tokens"], 512);
        assert_eq!(body["seed"], 42);
        assert_eq!(body["cache_prompt"], true);
        assert_eq!(body["top_k"], 1);
        assert_eq!(body["model"], "test-model");
    }
    let fin = finished(&run.jsonl()).clone();
    let session = fin["sessionId"].as_str().unwrap();
    let show = env.run("kxen-agent", &["session", "show", session]);
    show.expect(0);
    let provider = &show.jsonl()[0]["runs"][0]["attempts"][0]["provider"];
    assert_eq!(
        *provider,
        json!({"name": "local", "kind": "openai", "model": "test-model", "options": {
            "temperature": 0.0, "topP": 0.8, "maxTokens": 512, "seed": 42,
            "extraBody": {"cache_prompt": true, "top_k": 1}}})
    );
    assert!(!show.stdout.contains(KEY));
    let text = env.run(
        "kxen-agent",
        &["session", "show", session, "--format", "text"],
    );
    text.expect(0);
    assert!(
        text.stdout.contains("provider local (openai test-model")
            && text.stdout.contains("temperature 0"),
        "{}",
        text.stdout
    );
}

#[test]
fn an_unknown_or_invalid_option_is_exit_4_naming_the_file() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let agent = fixer(&env);
    for (options, says) in [
        ("temprature = 0.1", "unknown field `temprature`"),
        ("top_p = 1.5", "top_p must be above 0 and at most 1"),
        (
            "extra_body = { stream = true }",
            "extra_body cannot set `stream`",
        ),
    ] {
        let config = config(&env, "http://127.0.0.1:9/v1", options);
        let run = env.run(
            "kxen-agent",
            &[
                "run",
                "--workspace",
                repo.to_str().unwrap(),
                "--task",
                "t",
                "--agent",
                agent.to_str().unwrap(),
                "--config",
                config.to_str().unwrap(),
            ],
        );
        run.expect(4);
        assert!(run.stderr.contains(says), "{options}: {}", run.stderr);
        assert!(
            run.stderr.contains(config.to_str().unwrap()),
            "{}",
            run.stderr
        );
        assert!(
            !env.state_dir().join("sessions").exists(),
            "nothing written"
        );
    }
}

/// A run asking what `a.txt` says against a model server that gives `answers` in turn, with
/// the provider `options`: how it ended and the request bodies the server saw.
fn ask_about_a(
    env: &TestEnv,
    options: &str,
    answers: Vec<serde_json::Value>,
) -> (crate::env::Run, Vec<serde_json::Value>) {
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let (url, seen) = serve(answers);
    let config = config(env, &url, options);
    let agent = fixer(env);
    let out = env
        .cmd("kxen-agent")
        .env("KXEN_TEST_OPTIONS_KEY", KEY)
        .args([
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "What does a.txt say?",
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let bodies = seen
        .lock()
        .unwrap()
        .iter()
        .map(|(_, b)| b.clone())
        .collect();
    (crate::env::Run::from(out), bodies)
}

const FENCED_READ: &str =
    "I will read it.\n```json\n{\"name\": \"read\", \"arguments\": {\"path\": \"a.txt\"}}\n```";

#[test]
fn a_call_written_in_the_text_runs_when_the_provider_reads_text_calls() {
    let env = TestEnv::new();
    let (run, bodies) = ask_about_a(
        &env,
        "tool_calls_in_text = true",
        vec![
            completion(json!({"role": "assistant", "content": FENCED_READ})),
            completion(json!({"role": "assistant", "content": "It says alpha."})),
        ],
    );
    run.expect(0);
    assert_eq!(bodies.len(), 2);
    assert!(bodies[0].get("tool_calls_in_text").is_none(), "not sent");
    // The second request carries the call as a call, with the text outside the fence.
    let messages = bodies[1]["messages"].as_array().unwrap();
    let assistant = &messages[messages.len() - 2];
    assert_eq!(assistant["content"], "I will read it.");
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "read");
    assert_eq!(assistant["tool_calls"][0]["id"], "call_1_1");
    let tool = &messages[messages.len() - 1];
    assert_eq!(tool["tool_call_id"], "call_1_1");
    assert!(
        tool["content"].as_str().unwrap().contains("alpha"),
        "{tool}"
    );
    let fin = finished(&run.jsonl()).clone();
    assert_eq!(fin["status"], "completed");
    let session = fin["sessionId"].as_str().unwrap();
    let show = env.run("kxen-agent", &["session", "show", session]);
    show.expect(0);
    let provider = &show.jsonl()[0]["runs"][0]["attempts"][0]["provider"];
    assert_eq!(provider["options"]["toolCallsInText"], true, "{provider}");
}

#[test]
fn without_the_option_a_call_written_in_the_text_is_the_answer() {
    let env = TestEnv::new();
    let (run, bodies) = ask_about_a(
        &env,
        "",
        vec![completion(
            json!({"role": "assistant", "content": FENCED_READ}),
        )],
    );
    run.expect(0);
    assert_eq!(bodies.len(), 1, "one model call: the text was the answer");
    let fin = finished(&run.jsonl()).clone();
    let session = fin["sessionId"].as_str().unwrap();
    let show = env.run("kxen-agent", &["session", "show", session]);
    let provider = &show.jsonl()[0]["runs"][0]["attempts"][0]["provider"];
    assert!(
        provider["options"].get("toolCallsInText").is_none(),
        "{provider}"
    );
}
