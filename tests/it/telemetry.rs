//! OpenTelemetry traces: runs export spans to a trace receiver built on the official
//! `opentelemetry-proto` definitions (fixtures/otel/receiver.py, installed by `.ci/run`), over
//! OTLP/HTTP protobuf and JSON. The span tree, attribute names, one trace across a resume, no
//! secret, and a collector that is down or hangs costs the run nothing but a warning.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::env::{Run, TestEnv};
use crate::run_support::*;

const CANARY: &str = "sk-canary-otel-41c0d9e7";

struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The OTLP receiver, started; `None` only when `KXEN_TEST_SKIP` names `otel-proto`.
fn receiver(env: &TestEnv, mode: &str) -> Option<Receiver> {
    crate::needs::needs("otel-proto", || {
        crate::needs::python_with("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
    })?;
    let out = env.path().join(format!("spans-{mode}.jsonl"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/otel/receiver.py");
    let mut child = Command::new("python3")
        .arg(script)
        .arg(&out)
        .arg(mode)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with opentelemetry-proto (installed by .ci/run)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line.trim().parse().expect("the receiver's port");
    Some(Receiver { child, port, out })
}

impl Receiver {
    fn spans(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let spans: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for s in &spans {
            assert!(
                s.get("error").is_none(),
                "the receiver refused an export: {s}"
            );
        }
        spans
    }
}

/// `kxen-agent ARGS` with the OTLP variables and the canary key set.
fn traced(env: &TestEnv, vars: &[(&str, String)], args: &[&str]) -> Run {
    let mut cmd = env.cmd("kxen-agent");
    cmd.args(args).env("OPENAI_API_KEY", CANARY);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    Run::from(cmd.output().unwrap())
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

#[test]
fn a_run_exports_its_span_tree_over_protobuf_and_json() {
    for protocol in ["http/protobuf", "http/json"] {
        let env = TestEnv::new();
        let Some(rx) = receiver(&env, "ok") else {
            return;
        };
        let repo = env.git_repo("repo", &[("README", "x\n")]);
        let config = script_config(
            &env,
            &[
                json!({"text": "", "toolCalls": [
                    {"id": "c1", "name": "write", "arguments": {"path": "a.txt", "content": CANARY}},
                    {"id": "c2", "name": "read", "arguments": {"path": "README"}}],
                    "usage": {"inputTokens": 11, "outputTokens": 3}}),
                call("c3", "read", json!({"path": "a.txt"})),
                answer("done"),
            ],
        );
        let vars = [
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{}", rx.port),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol.to_string()),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20collector-token".to_string(),
            ),
            ("OTEL_SERVICE_NAME", "agent-ci".to_string()),
        ];
        let task = format!("write {CANARY}");
        let run = traced(
            &env,
            &vars,
            &[
                "run",
                "--workspace",
                repo.to_str().unwrap(),
                "--task",
                &task,
                "--agent",
                fixer(&env).to_str().unwrap(),
                "--config",
                config.to_str().unwrap(),
            ],
        );
        run.expect(0);
        assert!(!run.stderr.contains("telemetry"), "{}", run.stderr);
        let finished = finished(&run.jsonl()).clone();
        let (ses, run_id) = (
            finished["sessionId"].as_str().unwrap(),
            finished["runId"].as_str().unwrap(),
        );
        let spans = rx.spans();
        let kind = if protocol == "http/json" {
            "application/json"
        } else {
            "application/x-protobuf"
        };
        assert!(spans.iter().all(|s| s["contentType"] == kind));
        assert!(
            spans
                .iter()
                .all(|s| s["authorization"] == "Bearer collector-token")
        );
        assert!(
            spans
                .iter()
                .all(|s| s["resource"]["service.name"] == "agent-ci")
        );
        // One trace, derived from the run id.
        let trace = &kxen::hash::sha256_hex(format!("kxen-agent trace {run_id}").as_bytes())[..32];
        assert!(spans.iter().all(|s| s["traceId"] == trace), "{spans:#?}");
        assert!(
            spans
                .iter()
                .all(|s| attr(s, "kxen.session.id") == ses && attr(s, "kxen.run.id") == run_id)
        );
        let named = |prefix: &str| -> Vec<&Value> {
            spans
                .iter()
                .filter(|s| s["name"].as_str().unwrap().starts_with(prefix))
                .collect()
        };
        let root = named("invoke_agent");
        assert_eq!(root.len(), 1);
        assert_eq!(root[0]["parentSpanId"], "");
        assert_eq!(attr(root[0], "kxen.run.status"), "completed");
        assert_eq!(attr(root[0], "gen_ai.usage.input_tokens"), 41);
        let chats = named("chat");
        assert_eq!(chats.len(), 3, "{chats:#?}");
        for c in &chats {
            assert_eq!(c["parentSpanId"], root[0]["spanId"]);
            assert_eq!(attr(c, "gen_ai.operation.name"), "chat");
            assert_eq!(attr(c, "gen_ai.provider.name"), "script");
            assert_eq!(c["kind"], 3); // CLIENT
        }
        assert_eq!(attr(chats[0], "gen_ai.usage.input_tokens"), 11);
        assert_eq!(
            attr(chats[0], "gen_ai.response.finish_reasons"),
            "tool_calls"
        );
        let tools = named("execute_tool");
        assert_eq!(tools.len(), 3);
        // Both calls of the first answer are children of its model call, the third of the second.
        assert_eq!(tools[0]["parentSpanId"], chats[0]["spanId"]);
        assert_eq!(tools[1]["parentSpanId"], chats[0]["spanId"]);
        assert_eq!(tools[2]["parentSpanId"], chats[1]["spanId"]);
        assert_eq!(attr(tools[0], "gen_ai.tool.name"), "write");
        assert_eq!(attr(tools[0], "kxen.tool.outcome"), "ok");
        assert!(
            attr(tools[0], "kxen.op.id")
                .as_str()
                .unwrap()
                .starts_with("op_")
        );
        for s in &spans {
            assert!(s["end"].as_u64().unwrap() >= s["start"].as_u64().unwrap());
        }
        // No task, argument or output, and never the key.
        let raw = std::fs::read(rx.out.with_extension("jsonl.raw")).unwrap();
        let raw = String::from_utf8_lossy(&raw);
        assert!(
            !raw.contains(CANARY) && !raw.contains("collector-token"),
            "{protocol}: a secret was exported"
        );
    }
}

#[test]
fn every_attempt_of_a_run_joins_one_trace() {
    let env = TestEnv::new();
    let Some(rx) = receiver(&env, "ok") else {
        return;
    };
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let policy = env.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"allowShell": true, "mcpTools": {"exec": "ask"}}"#,
    )
    .unwrap();
    let config = script_config(
        &env,
        &[
            call("c1", "exec", json!({"command": "echo hi"})),
            answer("done"),
        ],
    );
    let vars = [(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        format!("http://127.0.0.1:{}/v1/traces", rx.port),
    )];
    let (repo_s, policy_s, config_s) = (
        repo.to_str().unwrap(),
        policy.to_str().unwrap(),
        config.to_str().unwrap(),
    );
    let first = traced(
        &env,
        &vars,
        &[
            "run",
            "--workspace",
            repo_s,
            "--task",
            "hi",
            "--agent",
            fixer(&env).to_str().unwrap(),
            "--config",
            config_s,
            "--policy",
            policy_s,
        ],
    );
    first.expect(7);
    let asked = first
        .jsonl()
        .into_iter()
        .find(|e| e["type"] == "runApprovalRequired")
        .unwrap();
    let (ses, run_id, op) = (
        asked["sessionId"].as_str().unwrap().to_string(),
        asked["runId"].as_str().unwrap().to_string(),
        asked["opId"].as_str().unwrap().to_string(),
    );
    env.run("kxen-agent", &["run", "approve", &ses, &run_id, &op])
        .expect(0);
    traced(
        &env,
        &vars,
        &[
            "--resume",
            &ses,
            "--workspace",
            repo_s,
            "--config",
            config_s,
            "--policy",
            policy_s,
        ],
    )
    .expect(0);
    let spans = rx.spans();
    let roots: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "invoke_agent")
        .collect();
    assert_eq!(roots.len(), 2, "one span per attempt");
    assert_eq!(roots[0]["traceId"], roots[1]["traceId"]);
    assert!(spans.iter().all(|s| s["traceId"] == roots[0]["traceId"]));
    assert_eq!(attr(roots[0], "kxen.run.status"), "inputRequired");
    assert_eq!(attr(roots[1], "kxen.run.status"), "completed");
    let waits: Vec<&Value> = spans
        .iter()
        .filter(|s| attr(s, "kxen.tool.outcome") == "awaitingApproval")
        .collect();
    assert_eq!(waits.len(), 1);
    assert_eq!(attr(waits[0], "kxen.approval.rule"), "exec");
    let ran: Vec<&Value> = spans
        .iter()
        .filter(|s| attr(s, "kxen.op.id") == op.as_str() && attr(s, "kxen.tool.outcome") == "ok")
        .collect();
    assert_eq!(
        ran.len(),
        1,
        "the approved call ran once, in the second attempt"
    );
    assert_eq!(ran[0]["parentSpanId"].as_str().unwrap().len(), 16);
}

#[test]
fn a_collector_that_is_down_or_hangs_costs_the_run_only_a_warning() {
    let env = TestEnv::new();
    let Some(hang) = receiver(&env, "hang") else {
        return;
    };
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = script_config(
        &env,
        &[
            call("c1", "read", json!({"path": "README"})),
            answer("done"),
        ],
    );
    let agent = fixer(&env);
    // Port 1 on loopback: nothing listens, the connection is refused at once.
    for (endpoint, says) in [
        ("http://127.0.0.1:1".to_string(), "not exported"),
        (
            format!("http://127.0.0.1:{}", hang.port),
            "did not take the last spans",
        ),
    ] {
        let started = Instant::now();
        let run = traced(
            &env,
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)],
            &[
                "run",
                "--workspace",
                repo.to_str().unwrap(),
                "--task",
                "read",
                "--agent",
                agent.to_str().unwrap(),
                "--config",
                config.to_str().unwrap(),
            ],
        );
        run.expect(0);
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "the run waited {:?}",
            started.elapsed()
        );
        assert_eq!(
            run.stderr.matches("telemetry:").count(),
            1,
            "{}",
            run.stderr
        );
        assert!(run.stderr.contains(says), "{}", run.stderr);
    }
    // A malformed endpoint: a warning, and the run goes on without tracing.
    let run = traced(
        &env,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318".to_string())],
        &[
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "read",
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ],
    );
    run.expect(0);
    assert!(run.stderr.contains("telemetry is off"), "{}", run.stderr);
}

/// kill -9 in the middle of a tool call, then the resume that finds it UNKNOWN, then the resume
/// after `run resolve`: all three attempts' spans are in the run's one trace.
#[test]
fn a_run_killed_and_resumed_stays_one_trace() {
    let env = TestEnv::new();
    let Some(rx) = receiver(&env, "ok") else {
        return;
    };
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = script_config(
        &env,
        &[
            call("c1", "exec", json!({"command": "sleep 30"})),
            answer("done"),
        ],
    );
    let endpoint = format!("http://127.0.0.1:{}", rx.port);
    let (repo_s, config_s) = (repo.to_str().unwrap(), config.to_str().unwrap());
    let mut child = env
        .cmd("kxen-agent")
        .args(["run", "--workspace", repo_s, "--task", "wait", "--agent"])
        .arg(fixer(&env))
        .args(["--config", config_s, "--allow-shell"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut events = BufReader::new(child.stdout.take().unwrap());
    let mut run_id = String::new();
    let mut session = String::new();
    loop {
        let mut line = String::new();
        assert!(
            events.read_line(&mut line).unwrap() > 0,
            "the run ended early"
        );
        let event: Value = serde_json::from_str(&line).unwrap();
        if event["type"] == "runStarted" {
            run_id = event["runId"].as_str().unwrap().to_string();
            session = event["sessionId"].as_str().unwrap().to_string();
        }
        if event["type"] == "toolStarted" {
            break;
        }
    }
    // The model call's span is sent within the exporter's linger (0.5 s); then the kill.
    let deadline = Instant::now() + Duration::from_secs(10);
    while rx.spans().is_empty() {
        assert!(
            Instant::now() < deadline,
            "no span exported before the kill"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let vars = [("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)];
    let resume = [
        "--resume",
        session.as_str(),
        "--workspace",
        repo_s,
        "--config",
        config_s,
        "--allow-shell",
    ];
    traced(&env, &vars, &resume).expect(7);
    let shown = env
        .run("kxen-agent", &["run", "show", &session, &run_id])
        .jsonl()
        .remove(0);
    let op = shown["operations"][0]["opId"].as_str().unwrap().to_string();
    env.run(
        "kxen-agent",
        &[
            "run", "resolve", &session, &run_id, &op, "--output", "killed",
        ],
    )
    .expect(0);
    traced(&env, &vars, &resume).expect(0);

    let spans = rx.spans();
    let trace = &kxen::hash::sha256_hex(format!("kxen-agent trace {run_id}").as_bytes())[..32];
    assert!(spans.iter().all(|s| s["traceId"] == trace), "{spans:#?}");
    let roots: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"] == "invoke_agent")
        .collect();
    let statuses: Vec<&str> = roots
        .iter()
        .map(|r| attr(r, "kxen.run.status").as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["inputRequired", "completed"],
        "the killed attempt's own span is lost"
    );
    // The killed attempt's model call arrived, under the root that died with it.
    let ids: Vec<&str> = spans
        .iter()
        .map(|s| s["spanId"].as_str().unwrap())
        .collect();
    let orphans = spans
        .iter()
        .filter(|s| s["name"].as_str().unwrap().starts_with("chat"))
        .filter(|s| !ids.contains(&s["parentSpanId"].as_str().unwrap()))
        .count();
    assert_eq!(orphans, 1, "{spans:#?}");
    // The attempt that stopped at the UNKNOWN call never called the model: no `chat` span.
    let chats: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"].as_str().unwrap().starts_with("chat"))
        .collect();
    assert_eq!(chats.len(), 2, "{chats:#?}");
    assert!(
        chats
            .iter()
            .all(|c| c["parentSpanId"] != roots[0]["spanId"])
    );
}

/// A `task` child's run is in the parent's trace, under the parent's `execute_tool task` span.
#[test]
fn a_task_childs_run_is_under_its_parents_task_span() {
    use crate::task::{child, delegator, tasks};
    let env = TestEnv::new();
    let Some(rx) = receiver(&env, "ok") else {
        return;
    };
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = script_config(
        &env,
        &[
            tasks(&[("t1", "check a", "Read the README, then say a-ok")]),
            child("check a", call("a1", "read", json!({"path": "README"}))),
            child("check a", answer("a-ok")),
            answer("checked"),
        ],
    );
    let run = traced(
        &env,
        &[(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", rx.port),
        )],
        &[
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "delegate",
            "--agent",
            delegator(&env, 8).to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--allow-shell",
        ],
    );
    run.expect(0);
    let parent_run = finished(&run.jsonl())["runId"]
        .as_str()
        .unwrap()
        .to_string();
    let spans = rx.spans();
    let trace = &kxen::hash::sha256_hex(format!("kxen-agent trace {parent_run}").as_bytes())[..32];
    assert!(spans.iter().all(|s| s["traceId"] == trace), "{spans:#?}");
    let task = spans
        .iter()
        .find(|s| s["name"] == "execute_tool task")
        .expect("the task call");
    let child_root = spans
        .iter()
        .find(|s| s["name"] == "invoke_agent" && s["parentSpanId"] == task["spanId"])
        .expect("the child's run under the task span");
    assert_ne!(
        attr(child_root, "kxen.session.id"),
        attr(task, "kxen.session.id")
    );
    assert_eq!(attr(child_root, "kxen.run.status"), "completed");
    let read = spans
        .iter()
        .find(|s| s["name"] == "execute_tool read")
        .expect("the child's read");
    assert_eq!(read["parentSpanId"], child_root["spanId"]);
    assert_eq!(attr(read, "kxen.tool.outcome"), "ok");
    assert_eq!(
        attr(read, "kxen.session.id"),
        attr(child_root, "kxen.session.id")
    );
}

/// A collector token in OTEL_EXPORTER_OTLP_HEADERS is a credential: a tool never sees it, and
/// nothing kxen-agent records or exports holds it.
#[test]
fn the_collector_token_never_reaches_a_tool_or_the_session() {
    let token = "collector-canary-93be1f04a7";
    let env = TestEnv::new();
    let Some(rx) = receiver(&env, "ok") else {
        return;
    };
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = script_config(
        &env,
        &[
            call("c1", "exec", json!({"command": "env; echo done"})),
            answer("done"),
        ],
    );
    let run = traced(
        &env,
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{}", rx.port),
            ),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                format!("x-collector-token={token}"),
            ),
        ],
        &[
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "env",
            "--agent",
            fixer(&env).to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--allow-shell",
            "--pass-env",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ],
    );
    // Even named in passEnv, the tool does not get it (like a model-provider key).
    run.expect(0);
    let done = finished(&run.jsonl()).clone();
    let shown = env
        .run(
            "kxen-agent",
            &[
                "run",
                "show",
                done["sessionId"].as_str().unwrap(),
                done["runId"].as_str().unwrap(),
            ],
        )
        .jsonl()
        .remove(0);
    let output = shown["operations"][0]["output"]["text"].as_str().unwrap();
    assert!(
        output.contains("PATH=") && output.contains("done"),
        "{output}"
    );
    assert!(
        !output.contains("OTEL_EXPORTER_OTLP_HEADERS"),
        "the tool saw the variable: {output}"
    );
    assert!(!run.stdout.contains(token) && !run.stderr.contains(token));
    for file in files_under(&env.state_dir()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(token),
            "{}",
            file.display()
        );
    }
    assert!(!rx.spans().is_empty());
    let raw = std::fs::read(rx.out.with_extension("jsonl.raw")).unwrap();
    assert!(!String::from_utf8_lossy(&raw).contains(token));
}
