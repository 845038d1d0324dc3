//! OpenTelemetry traces: runs export spans to a trace receiver built on the official
//! `opentelemetry-proto` definitions (fixtures/otel/receiver.py, installed by `.ci/run`), over
//! OTLP/HTTP protobuf and JSON. The span tree, attribute names, one trace across a resume, no
//! secret, and a collector that is down or hangs costs the run nothing but a warning; the
//! config's `[telemetry]` table, content opt-in, MCP request spans and `task` children.

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
/// The OTLP endpoint variable pointing at `rx`.
fn endpoint(rx: &Receiver) -> [(&'static str, String); 1] {
    [(
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        format!("http://127.0.0.1:{}", rx.port),
    )]
}

/// `run --workspace repo --task task --agent agent --config config` and `extra`.
fn new_run(repo: &Path, task: &str, agent: &Path, config: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["run", "--workspace"].map(String::from).to_vec();
    args.push(repo.to_str().unwrap().into());
    args.extend(["--task".into(), task.into(), "--agent".into()]);
    args.push(agent.to_str().unwrap().into());
    args.push("--config".into());
    args.push(config.to_str().unwrap().into());
    args.extend(extra.iter().map(|e| e.to_string()));
    args
}

fn traced<S: AsRef<std::ffi::OsStr>>(env: &TestEnv, vars: &[(&str, String)], args: &[S]) -> Run {
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
            &new_run(&repo, &task, &fixer(&env), &config, &[]),
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
        // The final answer's call carries its own tokens too (its message is in no journal
        // record: they come from the loop's progress reports around the call).
        assert_eq!(attr(chats[2], "gen_ai.usage.input_tokens"), 20);
        assert_eq!(attr(chats[2], "gen_ai.usage.output_tokens"), 5);
        assert_eq!(attr(chats[2], "gen_ai.response.finish_reasons"), "stop");
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
            &new_run(&repo, "read", &agent, &config, &[]),
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
        &new_run(&repo, "read", &agent, &config, &[]),
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
        &endpoint(&rx),
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
    assert_eq!(attr(child_root, "kxen.task.depth"), 1);
    // The child's own model calls, live: both under its root; its read under the first.
    let child_chats: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"].as_str().unwrap().starts_with("chat"))
        .filter(|s| s["parentSpanId"] == child_root["spanId"])
        .collect();
    assert_eq!(child_chats.len(), 2, "{spans:#?}");
    assert!(
        child_chats
            .iter()
            .all(|c| attr(c, "kxen.run.id") == attr(child_root, "kxen.run.id"))
    );
    let read = spans
        .iter()
        .find(|s| s["name"] == "execute_tool read")
        .expect("the child's read");
    assert_eq!(read["parentSpanId"], child_chats[0]["spanId"]);
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
        &new_run(
            &repo,
            "env",
            &fixer(&env),
            &config,
            &["--allow-shell", "--pass-env", "OTEL_EXPORTER_OTLP_HEADERS"],
        ),
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

/// `[telemetry]` of the config, with no OTEL_ variable: the table alone switches tracing on, its
/// header comes from the variable `headers_env` names (never the file), and without `content`
/// no task, argument or output is exported.
#[test]
fn the_config_table_alone_exports_and_keeps_content_out() {
    let env = TestEnv::new();
    let Some(rx) = receiver(&env, "ok") else {
        return;
    };
    let repo = env.git_repo("repo", &[("README", "readme-body-7f3a\n")]);
    let table = format!(
        "[telemetry]\nendpoint = \"http://127.0.0.1:{}\"\nservice_name = \"from-table\"\n\
         headers_env = {{ authorization = \"COLLECTOR_AUTH\" }}\n",
        rx.port
    );
    let config = crate::mcp::config(
        &env,
        &[
            call(
                "c1",
                "write",
                json!({"path": "a.txt", "content": "argument-body-9c1e"}),
            ),
            call("c2", "read", json!({"path": "README"})),
            answer("model-answer-5d2b"),
        ],
        &table,
    );
    let token = "Bearer table-token-3e8d";
    let run = traced(
        &env,
        &[("COLLECTOR_AUTH", token.to_string())],
        &new_run(&repo, "task-text-a61f", &fixer(&env), &config, &[]),
    );
    run.expect(0);
    assert!(!run.stderr.contains("telemetry"), "{}", run.stderr);
    let spans = rx.spans();
    assert!(
        spans.iter().any(|s| s["name"] == "invoke_agent"),
        "{spans:#?}"
    );
    assert!(spans.iter().any(|s| s["name"] == "execute_tool read"));
    assert!(
        spans
            .iter()
            .all(|s| s["resource"]["service.name"] == "from-table")
    );
    assert!(spans.iter().all(|s| s["authorization"] == token));
    let raw = std::fs::read(rx.out.with_extension("jsonl.raw")).unwrap();
    let raw = String::from_utf8_lossy(&raw);
    for content in [
        "task-text-a61f",
        "argument-body-9c1e",
        "readme-body-7f3a",
        "model-answer-5d2b",
    ] {
        assert!(!raw.contains(content), "{content} was exported");
    }
    assert!(
        spans
            .iter()
            .all(|s| attr(s, "gen_ai.tool.call.arguments").is_null())
    );
    // The header's value is a credential: nowhere in what kxen-agent wrote or printed.
    assert!(!run.stdout.contains("table-token") && !run.stderr.contains("table-token"));
    for file in files_under(&env.state_dir()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("table-token"));
    }

    // The header's variable unset: one warning naming it, and the run goes on untraced.
    let before = rx.spans().len();
    let run = traced(&env, &[], &new_run(&repo, "t", &fixer(&env), &config, &[]));
    run.expect(0);
    assert!(
        run.stderr.contains("telemetry is off") && run.stderr.contains("COLLECTOR_AUTH"),
        "{}",
        run.stderr
    );
    assert_eq!(rx.spans().len(), before);

    // An unknown key of the table is the config's error: exit 4, naming the file and the key.
    let bad = crate::mcp::config(&env, &[answer("x")], "[telemetry]\nendpoints = \"x\"\n");
    let run = traced(&env, &[], &new_run(&repo, "t", &fixer(&env), &bad, &[]));
    run.expect(4);
    assert!(
        run.stderr.contains(bad.to_str().unwrap()) && run.stderr.contains("endpoints"),
        "{}",
        run.stderr
    );
}

/// `content = true`: the task, the arguments, the output and the model's text are in the
/// spans — and a secret of the environment in them is still redacted.
#[test]
fn content_opt_in_exports_the_prompt_but_never_a_secret() {
    let env = TestEnv::new();
    let Some(rx) = receiver(&env, "ok") else {
        return;
    };
    let repo = env.git_repo("repo", &[("README", "readme-body-7f3a\n")]);
    let table = format!(
        "[telemetry]\nendpoint = \"http://127.0.0.1:{}\"\ncontent = true\n",
        rx.port
    );
    let config = crate::mcp::config(
        &env,
        &[
            call(
                "c1",
                "write",
                json!({"path": "a.txt", "content": format!("argument-body-9c1e {CANARY}")}),
            ),
            call("c2", "read", json!({"path": "README"})),
            answer("model-answer-5d2b"),
        ],
        &table,
    );
    let task = format!("task-text-a61f {CANARY}");
    let run = traced(
        &env,
        &[],
        &new_run(&repo, &task, &fixer(&env), &config, &[]),
    );
    run.expect(0);
    let spans = rx.spans();
    let root = spans.iter().find(|s| s["name"] == "invoke_agent").unwrap();
    let prompt = attr(root, "gen_ai.input.messages").as_str().unwrap();
    let prompt: Value = serde_json::from_str(prompt).unwrap();
    assert_eq!(prompt[0]["role"], "user");
    assert!(
        prompt[0]["parts"][0]["content"]
            .as_str()
            .unwrap()
            .contains("task-text-a61f"),
        "{prompt}"
    );
    let write = spans
        .iter()
        .find(|s| s["name"] == "execute_tool write")
        .unwrap();
    assert!(
        attr(write, "gen_ai.tool.call.arguments")
            .as_str()
            .unwrap()
            .contains("argument-body-9c1e")
    );
    let read = spans
        .iter()
        .find(|s| s["name"] == "execute_tool read")
        .unwrap();
    assert!(
        attr(read, "gen_ai.tool.call.result")
            .as_str()
            .unwrap()
            .contains("readme-body-7f3a")
    );
    assert!(spans.iter().any(|s| {
        attr(s, "gen_ai.output.messages")
            .as_str()
            .is_some_and(|m| m.contains("model-answer-5d2b"))
    }));
    let raw = std::fs::read(rx.out.with_extension("jsonl.raw")).unwrap();
    assert!(
        !String::from_utf8_lossy(&raw).contains(CANARY),
        "a secret was exported"
    );
}

/// An MCP `tools/call` is a CLIENT span under its tool call's span, named and attributed as the
/// OTel MCP conventions say; the tool's own error is an error status.
#[test]
fn an_mcp_request_is_a_span_under_its_tool_call() {
    let Some(py) = crate::mcp::python() else {
        return;
    };
    let env = TestEnv::new();
    let Some(rx) = receiver(&env, "ok") else {
        return;
    };
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let server = crate::mcp::fixture_server(&env, &py, "");
    let config = crate::mcp::config(
        &env,
        &[
            json!({"text": "", "toolCalls": [
                {"id": "c1", "name": "mcp__fx__echo", "arguments": {"text": "hi"}},
                {"id": "c2", "name": "mcp__fx__fail", "arguments": {"text": "boom"}}]}),
            answer("done"),
        ],
        &server,
    );
    let agent = crate::mcp::text_agent(&env, "mcp__fx__echo, mcp__fx__fail", "");
    let run = traced(
        &env,
        &endpoint(&rx),
        &new_run(&repo, "echo", &agent, &config, &["--allow-mcp"]),
    );
    run.expect(0);
    let spans = rx.spans();
    for (tool, outcome, status) in [("echo", "ok", 0), ("fail", "error", 2)] {
        let call = spans
            .iter()
            .find(|s| s["name"] == format!("execute_tool mcp__fx__{tool}"))
            .expect("the tool call");
        let request = spans
            .iter()
            .find(|s| s["name"] == format!("tools/call {tool}"))
            .unwrap_or_else(|| panic!("the MCP request of {tool}: {spans:#?}"));
        assert_eq!(request["parentSpanId"], call["spanId"]);
        assert_eq!(request["traceId"], call["traceId"]);
        assert_eq!(request["kind"], 3); // CLIENT
        assert_eq!(attr(request, "mcp.method.name"), "tools/call");
        assert_eq!(attr(request, "gen_ai.tool.name"), tool);
        assert_eq!(attr(request, "kxen.mcp.server"), "fx");
        assert_eq!(attr(request, "network.transport"), "pipe");
        assert_eq!(attr(request, "kxen.mcp.outcome"), outcome);
        assert_eq!(request["status"], status);
        assert!(
            attr(request, "jsonrpc.request.id")
                .as_str()
                .unwrap()
                .parse::<u64>()
                .is_ok()
        );
        assert_eq!(attr(request, "kxen.run.id"), attr(call, "kxen.run.id"));
        assert!(request["start"].as_u64() >= call["start"].as_u64());
        assert!(request["end"].as_u64() <= call["end"].as_u64());
    }
}

/// An `lsp` call's requests to its language server are CLIENT spans under the call's span, one
/// per request (the server's start-up handshake included), with the method and the server.
#[test]
fn lsp_requests_are_spans_under_their_tool_call() {
    let Some(python) = crate::lsp::pylsp_python() else {
        return;
    };
    let env = TestEnv::new();
    let Some(rx) = receiver(&env, "ok") else {
        return;
    };
    let repo = env.git_repo("repo", &[("ok.py", "fine\n")]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/lsp/fake_server.py");
    let entry = format!(
        "[lsp.fake]\ncommand = [{python:?}, {:?}]\nextensions = [\".py\"]\ntimeout_ms = 3000\n\
         sandbox = \"off\"\n",
        script.to_str().unwrap(),
    );
    let config = crate::lsp::config_with(
        &env,
        &[
            call(
                "c1",
                "lsp",
                json!({"operation": "hover", "path": "ok.py", "line": 1, "character": 1}),
            ),
            answer("done"),
        ],
        &entry,
    );
    let agent = agent(
        &env,
        "lsp-user",
        "read, lsp",
        "",
        "{format: text, requiredFields: []}",
    );
    let run = traced(
        &env,
        &endpoint(&rx),
        &new_run(&repo, "look", &agent, &config, &[]),
    );
    run.expect(0);
    let spans = rx.spans();
    let call = spans
        .iter()
        .find(|s| s["name"] == "execute_tool lsp")
        .expect("the lsp call");
    let hover = spans
        .iter()
        .find(|s| s["name"] == "lsp textDocument/hover")
        .unwrap_or_else(|| panic!("the hover request: {spans:#?}"));
    assert_eq!(hover["parentSpanId"], call["spanId"]);
    assert_eq!(hover["kind"], 3);
    assert_eq!(attr(hover, "kxen.lsp.method"), "textDocument/hover");
    assert_eq!(attr(hover, "kxen.lsp.server"), "fake");
    assert_eq!(hover["status"], 0);
    // The call started the server: its handshake is a request of the call too.
    let init = spans
        .iter()
        .find(|s| s["name"] == "lsp initialize")
        .expect("the initialize request");
    assert_eq!(init["parentSpanId"], call["spanId"]);
    assert!(init["end"].as_u64() <= hover["start"].as_u64());
}

/// Over Streamable HTTP the request span says so (`network.transport=tcp`, protocol http).
#[test]
fn an_mcp_request_over_http_says_its_transport() {
    use crate::mcp_http::{HttpServer, ServerOptions, http_entry};
    let Some(py) = crate::mcp::python() else {
        return;
    };
    let env = TestEnv::new();
    let Some(rx) = receiver(&env, "ok") else {
        return;
    };
    let server = HttpServer::start(&env, &py, &ServerOptions::default());
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = crate::mcp::config(
        &env,
        &[
            call("c1", "mcp__fx__echo", json!({"text": "over http"})),
            answer("done"),
        ],
        &http_entry(&server.url(), ""),
    );
    let agent = crate::mcp::text_agent(&env, "mcp__fx__echo", "");
    let run = traced(
        &env,
        &endpoint(&rx),
        &new_run(&repo, "echo", &agent, &config, &["--allow-mcp"]),
    );
    run.expect(0);
    let spans = rx.spans();
    let call = spans
        .iter()
        .find(|s| s["name"] == "execute_tool mcp__fx__echo")
        .expect("the tool call");
    let request = spans
        .iter()
        .find(|s| s["name"] == "tools/call echo")
        .unwrap_or_else(|| panic!("the MCP request: {spans:#?}"));
    assert_eq!(request["parentSpanId"], call["spanId"]);
    assert_eq!(attr(request, "network.transport"), "tcp");
    assert_eq!(attr(request, "network.protocol.name"), "http");
    assert_eq!(attr(request, "kxen.mcp.outcome"), "ok");
}

/// The parent dies right after creating its `task` child; the resume's recovery runs the child:
/// there is no `task` call span in that attempt, so the child's run goes under the attempt's
/// `invoke_agent` span, with its own model and tool spans, in the parent's trace.
#[test]
fn a_child_run_by_the_parents_recovery_is_under_the_resumed_attempt() {
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
    let endpoint = format!("http://127.0.0.1:{}", rx.port);
    let agent = delegator(&env, 8);
    let crashed = env
        .cmd("kxen-agent")
        .args(["run", "--workspace", repo.to_str().unwrap()])
        .args(["--task", "delegate", "--agent", agent.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap(), "--allow-shell"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env("KXEN_FAILPOINT", "task.after-child-created")
        .env("KXEN_TEST_NO_POWERCUT", "1")
        .output()
        .unwrap();
    assert_eq!(crashed.status.code(), None, "the failpoint aborts");
    let parent = crate::task::session_list(&env)
        .into_iter()
        .find(|s| s["parentId"].is_null())
        .unwrap();
    let id = parent["id"].as_str().unwrap().to_string();
    let run = traced(
        &env,
        &[("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)],
        &[
            "--resume",
            &id,
            "--config",
            config.to_str().unwrap(),
            "--allow-shell",
        ],
    );
    run.expect(0);
    let spans = rx.spans();
    let resumed = spans
        .iter()
        .find(|s| {
            s["name"] == "invoke_agent"
                && s["parentSpanId"] == ""
                && attr(s, "kxen.run.status") == "completed"
        })
        .unwrap_or_else(|| panic!("the resumed attempt: {spans:#?}"));
    let child_root = spans
        .iter()
        .find(|s| s["name"] == "invoke_agent" && s["parentSpanId"] == resumed["spanId"])
        .unwrap_or_else(|| panic!("the child's run under the resumed attempt: {spans:#?}"));
    assert_eq!(child_root["traceId"], resumed["traceId"]);
    assert_ne!(
        attr(child_root, "kxen.session.id"),
        attr(resumed, "kxen.session.id")
    );
    let read = spans
        .iter()
        .find(|s| s["name"] == "execute_tool read")
        .expect("the child's read");
    assert_eq!(read["traceId"], resumed["traceId"]);
    assert_eq!(attr(read, "kxen.run.id"), attr(child_root, "kxen.run.id"));
}
