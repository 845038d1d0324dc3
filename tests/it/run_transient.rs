//! Transient provider failures in real runs: HTTP 429/5xx and hang-ups are retried with the
//! server's wait (each retry an event), never past a cancel; a call that still fails counts once
//! against `maxPureRetries`; a key echoed in an error body never shows.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::env::TestEnv;
use crate::fake_model::{Reply, completion, config, serve, tool_call_message};
use crate::run_support::*;

const KEY: &str = "sk-transient-canary-1a2b3c4d";

#[test]
fn rate_limits_and_server_errors_are_retried_with_the_servers_wait() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let (url, seen) = serve(|n, request| match n {
        // A gateway that echoes the request headers in its error body.
        0 => Reply::Full {
            status: 429,
            headers: vec![("Retry-After", "1".into())],
            body: format!(
                "{{\"error\":\"rate limited\",\"echo\":\"authorization: {}\"}}",
                request.header("authorization").unwrap_or_default()
            ),
        },
        1 => Reply::Full {
            status: 502,
            headers: vec![("retry-after-ms", "50".into())],
            body: "bad gateway".into(),
        },
        2 => Reply::json(&completion(tool_call_message(
            "call_1",
            "read",
            &json!({"path": "a.txt"}),
        ))),
        3 => Reply::Hangup,
        _ => Reply::json(&completion(
            json!({"role": "assistant", "content": "It says alpha."}),
        )),
    });
    let config = config(
        &env,
        &format!(
            "kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\napi_key_env = \"KXEN_TEST_TRANSIENT_KEY\""
        ),
    );
    let agent = fixer(&env);
    let started = Instant::now();
    let out = env
        .cmd("kxen-agent")
        .env("KXEN_TEST_TRANSIENT_KEY", KEY)
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
    run.expect(0);
    assert!(started.elapsed() >= Duration::from_millis(1050));
    let events = run.jsonl();
    let retries: Vec<_> = events
        .iter()
        .filter(|e| e["type"] == "modelRetry")
        .collect();
    assert_eq!(retries.len(), 3, "{events:#?}");
    assert_eq!(retries[0]["attempt"], 1);
    assert_eq!(retries[0]["maxAttempts"], 5);
    assert_eq!(retries[0]["waitMs"], 1000);
    let reason = retries[0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("HTTP 429") && reason.contains("[redacted]"),
        "{reason}"
    );
    assert_eq!(retries[1]["waitMs"], 50);
    assert!(retries[1]["reason"].as_str().unwrap().contains("HTTP 502"));
    // The hang-up came on the second model call: its retries count from 1 again.
    assert_eq!(retries[2]["attempt"], 1);
    let fin = finished(&events);
    assert_eq!(fin["status"], "completed");
    assert_eq!(fin["turns"], 2);
    assert_eq!(seen.lock().unwrap().len(), 5);
    // The key: sent, but never shown or kept.
    assert_eq!(
        seen.lock().unwrap()[0].header("authorization"),
        Some(&*format!("Bearer {KEY}"))
    );
    assert!(!run.stdout.contains(KEY) && !run.stderr.contains(KEY));
    for file in files_under(&env.state_dir()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(KEY),
            "{}",
            file.display()
        );
    }
}

#[test]
fn a_call_that_still_fails_counts_once_against_max_pure_retries() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let (url, seen) = serve(|_, _| Reply::Full {
        status: 503,
        headers: vec![("Retry-After", "0".into())],
        body: "overloaded".into(),
    });
    let config = config(
        &env,
        &format!(
            "kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\nmax_transport_retries = 2"
        ),
    );
    // maxPureRetries 1 (the default): two calls, each sent three times.
    let run = run_new(&env, &repo, "Read a.txt", &fixer(&env), &config, &[]);
    run.expect(9);
    assert_eq!(seen.lock().unwrap().len(), 6);
    let events = run.jsonl();
    let retries = events.iter().filter(|e| e["type"] == "modelRetry").count();
    assert_eq!(retries, 4);
    let fin = finished(&events);
    let error = fin["error"].as_str().unwrap();
    assert!(
        error.contains("failed 2 times (maxPureRetries 1)")
            && error.contains("HTTP 503")
            && error.contains("after 2 transport retries"),
        "{error}"
    );
    // A client error is not retried at all.
    let (url, seen) = serve(|_, _| Reply::Full {
        status: 401,
        headers: vec![],
        body: "{\"error\":\"invalid key\"}".into(),
    });
    let config = crate::fake_model::config(
        &env,
        &format!("kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\""),
    );
    let run = run_new(&env, &repo, "Read a.txt", &fixer(&env), &config, &[]);
    run.expect(9);
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "one per pure retry, none by transport"
    );
    assert!(!run.jsonl().iter().any(|e| e["type"] == "modelRetry"));
}

#[test]
fn ctrl_c_ends_a_backoff_wait_at_once() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let (url, seen) = serve(|_, _| Reply::Full {
        status: 429,
        headers: vec![("Retry-After", "120".into())],
        body: "later".into(),
    });
    let config = crate::fake_model::config(
        &env,
        &format!("kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\""),
    );
    let child = spawn_new(&env, &repo, "Read a.txt", &fixer(&env), &config, &[]);
    while seen.lock().unwrap().is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let interrupted = Instant::now();
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    assert!(
        interrupted.elapsed() < Duration::from_secs(3),
        "{:?}",
        interrupted.elapsed()
    );
    let run = crate::env::Run::from(out);
    run.expect(130);
    let events = run.jsonl();
    let retry = events.iter().find(|e| e["type"] == "modelRetry").unwrap();
    assert_eq!(retry["waitMs"], 120_000);
    assert_eq!(finished(&events)["status"], "canceled");
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[test]
fn a_wait_past_the_wall_clock_budget_is_not_started() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let (url, seen) = serve(|_, _| Reply::Full {
        status: 429,
        headers: vec![("Retry-After", "30".into())],
        body: "later".into(),
    });
    let config = crate::fake_model::config(
        &env,
        &format!("kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\""),
    );
    let agent = fixer(&env);
    let yaml = std::fs::read_to_string(&agent).unwrap();
    std::fs::write(
        &agent,
        yaml.replace("maxTurns: 16", "maxTurns: 16\n    maxWallClockMs: 5000"),
    )
    .unwrap();
    let started = Instant::now();
    let run = run_new(&env, &repo, "Read a.txt", &agent, &config, &[]);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let fin = finished(&run.jsonl()).clone();
    assert_eq!(fin["status"], "failed", "{fin}");
    assert!(
        fin["error"].as_str().unwrap().contains("wall-clock budget"),
        "{fin}"
    );
    assert_eq!(seen.lock().unwrap().len(), 2, "one per pure retry");
}
