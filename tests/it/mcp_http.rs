//! MCP tools over Streamable HTTP, against the official Python SDK's server
//! (fixtures/mcp/server.py `--http`, started and stopped by each test on a port it picks).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::env::TestEnv;
use crate::mcp::{
    calls, config, ids, python, session_json, text_agent, tool_outputs, unknown_op, wait_for_calls,
};
use crate::run_support::*;

/// A running `server.py --http`; killed when dropped.
pub(crate) struct HttpServer {
    child: Child,
    pub port: u16,
    python: String,
    envs: Vec<(String, String)>,
}

/// How the fixture server is started.
#[derive(Default, Clone)]
pub(crate) struct ServerOptions {
    /// The token every request must carry (`KXEN_MCP_EXPECT_TOKEN`).
    pub expect_token: Option<String>,
    /// JSON answers instead of SSE streams.
    pub json: bool,
    /// The SDK's resumability with an in-memory event store, and the `wait_for` tool.
    pub event_store: bool,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/server.py")
}

impl HttpServer {
    pub(crate) fn start(env: &TestEnv, python: &str, options: &ServerOptions) -> HttpServer {
        let mut envs = vec![
            (
                "KXEN_MCP_COUNT_FILE".to_string(),
                env.path().join("calls.txt").to_str().unwrap().to_string(),
            ),
            (
                "KXEN_MCP_SCHEMA_FILE".into(),
                env.path().join("schema-v2").to_str().unwrap().to_string(),
            ),
            (
                "KXEN_MCP_HTTP_LOG".into(),
                env.path().join("http.log").to_str().unwrap().to_string(),
            ),
        ];
        if let Some(token) = &options.expect_token {
            envs.push(("KXEN_MCP_EXPECT_TOKEN".into(), token.clone()));
        }
        if options.json {
            envs.push(("KXEN_MCP_JSON_RESPONSE".into(), "1".into()));
        }
        if options.event_store {
            envs.push(("KXEN_MCP_EVENT_STORE".into(), "1".into()));
        }
        Self::launch(env, python, envs, None)
    }

    fn launch(
        env: &TestEnv,
        python: &str,
        envs: Vec<(String, String)>,
        port: Option<u16>,
    ) -> HttpServer {
        let port_file = env.path().join("http-port");
        let _ = std::fs::remove_file(&port_file);
        let mut cmd = Command::new(python);
        cmd.arg(script())
            .arg("--http")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("KXEN_MCP_PORT_FILE", &port_file)
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(port) = port {
            cmd.env("KXEN_MCP_PORT", port.to_string());
        }
        let mut child = cmd.spawn().unwrap();
        let start = Instant::now();
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                break text.trim().parse().unwrap();
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("the HTTP fixture server exited at start: {status}");
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the HTTP fixture server never listened"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        // The port file is written once the socket listens; uvicorn answers soon after.
        HttpServer {
            child,
            port,
            python: python.to_string(),
            envs,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Stops the server and starts it again on the same port (a new process: it knows no
    /// session, and reads the schema file again).
    pub(crate) fn restart(&mut self, env: &TestEnv) {
        self.stop();
        let next = HttpServer::launch(env, &self.python, self.envs.clone(), Some(self.port));
        *self = next;
    }

    pub(crate) fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `[mcp.servers.fx]` reaching `url`, with `extra` lines.
pub(crate) fn http_entry(url: &str, extra: &str) -> String {
    format!("[mcp.servers.fx]\nurl = {url:?}\ntimeout_ms = 30000\n{extra}")
}

fn http_log(env: &TestEnv) -> Vec<String> {
    std::fs::read_to_string(env.path().join("http.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_scripted_run_calls_an_http_tool_and_the_model_sees_its_result() {
    let Some(py) = python() else { return };
    for json_answers in [false, true] {
        let env = TestEnv::new();
        let server = HttpServer::start(
            &env,
            &py,
            &ServerOptions {
                json: json_answers,
                ..Default::default()
            },
        );
        let repo = env.git_repo("repo", &[("README", "x\n")]);
        let cfg = config(
            &env,
            &[
                call("c1", "mcp__fx__echo", json!({"text": "hello over http"})),
                call("c2", "mcp__fx__fail", json!({"text": "boom"})),
                answer("done"),
            ],
            &http_entry(&server.url(), ""),
        );
        let agent = text_agent(&env, "mcp__fx__echo, mcp__fx__fail", "");
        let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
        run.expect(0);
        let outs = tool_outputs(&run);
        assert_eq!(
            outs[0],
            ("mcp__fx__echo".into(), "hello over http".into(), false),
            "json answers: {json_answers}"
        );
        assert!(outs[1].2 && outs[1].1.contains("fail"), "{outs:?}");
        let lock = &session_json(&env)["lock"];
        let names: Vec<&str> = lock["mcpTools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["mcp__fx__echo", "mcp__fx__fail"]);
        assert!(
            lock["mcpServers"]["fx"]
                .as_str()
                .unwrap()
                .starts_with("sha256:")
        );
        // The transport as the spec says: the session id and protocol version on every request
        // after `initialize`, and the session ended with DELETE when the run is done.
        let log = http_log(&env);
        assert_eq!(log[0], "POST session=no version=-", "{log:?}");
        assert!(
            log[1..]
                .iter()
                .all(|l| l.ends_with("session=yes version=2025-11-25")),
            "{log:?}"
        );
        assert!(log.iter().any(|l| l.starts_with("DELETE ")), "{log:?}");

        // session show lists the locked tools; policy check lists the server and its rules.
        let (id, _) = ids(&env);
        let show = env.run("kxen-agent", &["session", "show", &id]);
        show.expect(0);
        assert!(show.stdout.contains("mcp__fx__echo"), "{}", show.stdout);
        let check = env.run(
            "kxen-agent",
            &[
                "policy",
                "check",
                "--allow-mcp",
                "--config",
                cfg.to_str().unwrap(),
            ],
        );
        check.expect(0);
        let shown = &check.jsonl()[0];
        let text = shown.to_string();
        assert!(
            text.contains("mcp__fx__echo") && text.contains("\"allow\""),
            "{text}"
        );
    }
}

#[test]
fn a_bearer_token_from_the_environment_reaches_the_server_and_nowhere_else() {
    let Some(py) = python() else { return };
    let canary = "kxen-bearer-canary-5d1e9f";
    let env = TestEnv::new();
    let server = HttpServer::start(
        &env,
        &py,
        &ServerOptions {
            expect_token: Some(canary.into()),
            ..Default::default()
        },
    );
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let turns = [
        call("c1", "mcp__fx__echo", json!({"text": "authorized"})),
        call(
            "c2",
            "exec",
            json!({"command": "echo ${MCP_BEARER:-absent}; env | grep -c bearer-canary"}),
        ),
        answer("done"),
        call("c3", "mcp__fx__echo", json!({"text": "again"})),
        answer("done again"),
    ];
    // A variable name the credential filter would not catch by itself: the config makes it one.
    let entry = http_entry(&server.url(), "bearer_token_env = \"MCP_BEARER\"\n");
    let cfg = config(&env, &turns, &entry);
    let agent = text_agent(&env, "mcp__fx__echo, exec", "");
    let run_with = |token: Option<&str>, args: &[&str]| {
        let mut cmd = env.cmd("kxen-agent");
        cmd.args(args);
        if let Some(t) = token {
            cmd.env("MCP_BEARER", t);
        }
        crate::env::Run::from(cmd.output().unwrap())
    };
    let new_run = [
        "run",
        "--workspace",
        repo.to_str().unwrap(),
        "--task",
        "t",
        "--agent",
        agent.to_str().unwrap(),
        "--config",
        cfg.to_str().unwrap(),
        "--allow-mcp",
        "--allow-shell",
    ];
    let run = run_with(Some(canary), &new_run);
    run.expect(0);
    let outs = tool_outputs(&run);
    assert_eq!(outs[0].1, "authorized");
    assert!(
        outs[1].1.starts_with("absent\n0\n"),
        "exec got the token: {}",
        outs[1].1
    );
    assert!(!run.stdout.contains(canary) && !run.stderr.contains(canary));
    for file in files_under(&env.state_dir()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(canary),
            "the token is in {}",
            file.display()
        );
    }
    // A resume connects again with the token (and the lock's hash holds only its name).
    let (id, _) = ids(&env);
    let resume = [
        "--resume",
        &id,
        "--task",
        "again",
        "--allow-mcp",
        "--allow-shell",
        "--config",
        cfg.to_str().unwrap(),
    ];
    let again = run_with(Some(canary), &resume);
    again.expect(0);
    assert_eq!(tool_outputs(&again)[0].1, "again");

    // The variable unset: exit 4 naming it, no Session.
    let env2 = TestEnv::new();
    let repo2 = env2.git_repo("repo", &[("README", "x\n")]);
    let cfg_unset = config(&env2, &turns, &entry);
    let agent2 = text_agent(&env2, "mcp__fx__echo", "");
    let unset = run_new(&env2, &repo2, "t", &agent2, &cfg_unset, &["--allow-mcp"]);
    unset.expect(4);
    assert!(unset.stderr.contains("MCP_BEARER"), "{}", unset.stderr);
    assert!(!env2.state_dir().exists());

    // A wrong token: the server's 401 echoes the header it got; the message shows neither.
    let mut cmd = env2.cmd("kxen-agent");
    cmd.args([
        "run",
        "--workspace",
        repo2.to_str().unwrap(),
        "--task",
        "t",
        "--agent",
        agent2.to_str().unwrap(),
        "--config",
        cfg_unset.to_str().unwrap(),
        "--allow-mcp",
    ])
    .env("MCP_BEARER", "wrong-token-0e5c2a");
    let wrong = crate::env::Run::from(cmd.output().unwrap());
    wrong.expect(9);
    assert!(
        wrong.stderr.contains("MCP server `fx`") && wrong.stderr.contains("401"),
        "{}",
        wrong.stderr
    );
    assert!(
        wrong.stderr.contains("unauthorized") && !wrong.stderr.contains("wrong-token-0e5c2a"),
        "the echoed header is redacted: {}",
        wrong.stderr
    );
    assert!(!env2.state_dir().exists());
}

#[test]
fn a_token_over_cleartext_http_to_another_host_is_refused() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[answer("done")],
        &http_entry(
            "http://mcp.example.com/mcp",
            "bearer_token_env = \"MCP_BEARER\"\n",
        ),
    );
    let agent = text_agent(&env, "mcp__fx__echo", "");
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(4);
    assert!(
        run.stderr.contains("cleartext") && run.stderr.contains("https://"),
        "{}",
        run.stderr
    );
    assert!(!env.state_dir().exists());
}

#[test]
fn an_http_server_that_is_down_at_creation_is_exit_9_and_no_session() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let mut server = HttpServer::start(&env, &py, &ServerOptions::default());
    let url = server.url();
    server.stop();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(&env, &[answer("done")], &http_entry(&url, ""));
    let agent = text_agent(&env, "mcp__fx__echo", "");
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(9);
    assert!(
        run.stderr.contains("MCP server `fx`")
            && run.stderr.contains("cannot reach")
            && run.stderr.contains(&url),
        "{}",
        run.stderr
    );
    assert!(!env.state_dir().exists(), "no Session is written");
}

#[test]
fn sigkill_during_a_slow_http_call_is_unknown_resolved_and_never_repeated() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let server = HttpServer::start(&env, &py, &ServerOptions::default());
    crate::mcp::a_killed_slow_call_is_resolved_and_never_repeated(
        &env,
        &http_entry(&server.url(), ""),
    );
}

#[test]
fn a_call_past_timeout_ms_or_canceled_over_http_is_unknown() {
    let Some(py) = python() else { return };
    // timeout_ms: the call is given up, the server told (notifications/cancelled), UNKNOWN.
    let env = TestEnv::new();
    let server = HttpServer::start(&env, &py, &ServerOptions::default());
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call(
                "c1",
                "mcp__fx__hold",
                json!({"text": "slow", "seconds": 60}),
            ),
            answer("done"),
        ],
        &http_entry(&server.url(), "").replace("timeout_ms = 30000", "timeout_ms = 3000"),
    );
    let agent = text_agent(&env, "mcp__fx__hold", "");
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(7);
    let (id, run_id) = ids(&env);
    let op = unknown_op(&env, &id, &run_id);
    assert!(
        op["unknownReason"]
            .as_str()
            .unwrap()
            .contains("no answer within 3000 ms"),
        "{op}"
    );
    let start = Instant::now();
    while !calls(&env).contains(&"cancelled:slow".to_string()) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the server was never told: {:?}",
            calls(&env)
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Ctrl-C: notifications/cancelled, the cleanup window, UNKNOWN (exit 7).
    let env = TestEnv::new();
    let server = HttpServer::start(&env, &py, &ServerOptions::default());
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__fx__hold", json!({"text": "pr", "seconds": 60})),
            answer("done"),
        ],
        &http_entry(&server.url(), ""),
    );
    let child = spawn_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    wait_for_calls(&env, 2);
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (id, run_id) = ids(&env);
    unknown_op(&env, &id, &run_id);
    assert!(
        calls(&env).contains(&"cancelled:pr".to_string()),
        "{:?}",
        calls(&env)
    );
}

#[test]
fn a_changed_http_schema_or_url_is_mcp_drift() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let mut server = HttpServer::start(&env, &py, &ServerOptions::default());
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let entry = http_entry(&server.url(), "");
    let cfg = config(&env, &[answer("one"), answer("two")], &entry);
    let agent = text_agent(&env, "mcp__fx__echo", "");
    run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]).expect(0);
    let (id, _) = ids(&env);
    let resume = |cfg: &Path| {
        env.run(
            "kxen-agent",
            &[
                "--resume",
                &id,
                "--task",
                "again",
                "--allow-mcp",
                "--config",
                cfg.to_str().unwrap(),
            ],
        )
    };
    std::fs::write(env.path().join("schema-v2"), "").unwrap();
    server.restart(&env);
    let drift = resume(&cfg);
    drift.expect(6);
    assert!(
        drift.stderr.contains("MCP drift")
            && drift.stderr.contains("mcp__fx__echo input schema changed")
            && drift.stderr.contains("loud"),
        "{}",
        drift.stderr
    );
    std::fs::remove_file(env.path().join("schema-v2")).unwrap();
    server.restart(&env);
    let other_url = config(
        &env,
        &[answer("one"), answer("two")],
        &entry.replace("/mcp\"", "/mcp/\""),
    );
    let changed = resume(&other_url);
    changed.expect(6);
    assert!(
        changed.stderr.contains("[mcp.servers.fx] changed"),
        "{}",
        changed.stderr
    );
    let cfg = config(&env, &[answer("one"), answer("two")], &entry);
    resume(&cfg).expect(0);
}

/// A server restarted between two calls of one run forgets the session: the second call is
/// answered 404, reported to the model as not run (never sent again by itself), and the third
/// call runs in a new session.
#[test]
fn a_forgotten_http_session_is_started_again_and_the_call_not_resent() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let mut server = HttpServer::start(&env, &py, &ServerOptions::default());
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let marker = env.path().join("model/restart-now");
    let restarted = env.path().join("model/restarted");
    let script = format!(
        r#"n=$(cat n 2>/dev/null || echo 0); echo $((n+1)) > n; cat > /dev/null
case $n in
0) echo '{{"text":"","toolCalls":[{{"id":"c1","name":"mcp__fx__slow","arguments":{{"text":"one","seconds":0}}}}]}}' ;;
1) touch {marker:?}; while [ ! -e {restarted:?} ]; do sleep 0.05; done
   echo '{{"text":"","toolCalls":[{{"id":"c2","name":"mcp__fx__slow","arguments":{{"text":"two","seconds":0}}}}]}}' ;;
2) echo '{{"text":"","toolCalls":[{{"id":"c3","name":"mcp__fx__slow","arguments":{{"text":"three","seconds":0}}}}]}}' ;;
*) echo '{{"text":"done"}}' ;;
esac
"#
    );
    let cfg = command_config(&env, &script);
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str(&http_entry(&server.url(), ""));
    std::fs::write(&cfg, text).unwrap();
    let agent = text_agent(&env, "mcp__fx__slow", "");
    let child = spawn_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    wait_for(&marker);
    server.restart(&env);
    std::fs::write(&restarted, "").unwrap();
    let out = child.wait_with_output().unwrap();
    let run = crate::env::Run::from(out);
    run.expect(0);
    let outs = tool_outputs(&run);
    assert_eq!(outs[0], ("mcp__fx__slow".into(), "one".into(), false));
    assert!(
        outs[1].2 && outs[1].1.contains("404") && outs[1].1.contains("not sent"),
        "{outs:?}"
    );
    assert_eq!(outs[2], ("mcp__fx__slow".into(), "three".into(), false));
    assert_eq!(
        calls(&env),
        ["one", "three"],
        "the forgotten call never ran"
    );
}

/// A call whose SSE stream ends after an event id, before its answer, is resumed: after the
/// server's `retry` delay, a GET with `Last-Event-ID` brings the answer, and the call is a known
/// outcome. A server that refuses the GET leaves the call UNKNOWN (exit 7), saying why.
#[test]
fn a_cut_stream_is_resumed_and_one_that_cannot_be_is_unknown() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let server = Hostile::start(&env, &py, "call_cut");
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__h__echo", json!({"text": "x"})),
            answer("done"),
        ],
        &server.entry(10000),
    );
    let agent = text_agent(&env, "mcp__h__echo", "");
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(0);
    assert_eq!(
        tool_outputs(&run),
        [("mcp__h__echo".into(), "resumed".into(), false)]
    );
    let log = calls(&env);
    assert_eq!(log[0], "call:call_cut");
    let (resume, after) = log[1].split_once(" after:").unwrap();
    assert_eq!(resume, "resume:cut-1");
    let after: u64 = after.parse().unwrap();
    assert!(
        after >= 250,
        "the retry delay (300 ms) was kept: {after} ms"
    );
    drop(server);

    let env = TestEnv::new();
    let server = Hostile::start(&env, &py, "call_cut_gone");
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__h__echo", json!({"text": "x"})),
            answer("done"),
        ],
        &server.entry(10000),
    );
    let agent = text_agent(&env, "mcp__h__echo", "");
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(7);
    let (id, run_id) = ids(&env);
    let op = unknown_op(&env, &id, &run_id);
    let reason = op["unknownReason"].as_str().unwrap();
    assert!(
        reason.contains("ended without the answer")
            && reason.contains("resuming it after event \"cut-1\" failed")
            && reason.contains("405"),
        "{op}"
    );
}

/// A run whose Streamable HTTP call (`wait_for`, held until a file appears) is killed right
/// after its stream position is journaled (failpoint `mcp.after-stream-position`, an abort: as
/// a kill -9), on a server with an event store. Returns the server, the release file, the
/// config, the Session and run ids.
fn killed_mid_call(env: &TestEnv, py: &str) -> (HttpServer, PathBuf, PathBuf, (String, String)) {
    let server = HttpServer::start(
        env,
        py,
        &ServerOptions {
            event_store: true,
            ..Default::default()
        },
    );
    let release = env.path().join("release");
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        env,
        &[
            call(
                "c1",
                "mcp__fx__wait_for",
                json!({"text": "made-it", "path": release.to_str().unwrap()}),
            ),
            answer("done"),
        ],
        &http_entry(&server.url(), ""),
    );
    let agent = text_agent(env, "mcp__fx__wait_for", "");
    let crashed = env
        .cmd("kxen-agent")
        .args(["run", "--workspace", repo.to_str().unwrap(), "--task", "t"])
        .args(["--agent", agent.to_str().unwrap()])
        .args(["--config", cfg.to_str().unwrap(), "--allow-mcp"])
        .env("KXEN_FAILPOINT", "mcp.after-stream-position")
        .output()
        .unwrap();
    assert_eq!(
        crashed.status.code(),
        None,
        "the failpoint aborted the run: {}",
        String::from_utf8_lossy(&crashed.stderr)
    );
    let ids = ids(env);
    // The position is in the journal: the session and request ids and the first event id,
    // never a token.
    let journal = env
        .state_dir()
        .join(format!("sessions/{}/runs/{}/journal.jsonl", ids.0, ids.1));
    let text = std::fs::read_to_string(&journal).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("\"phase\":\"mcpStream\""))
        .unwrap_or_else(|| panic!("no mcpStream record: {text}"));
    let record: serde_json::Value = serde_json::from_str(line).unwrap();
    let position = &record["position"];
    assert!(position["sessionId"].is_string(), "{record}");
    assert!(position["requestId"].is_u64(), "{record}");
    assert!(
        position["eventId"].as_str().unwrap().starts_with("ev-"),
        "{record}"
    );
    (server, release, cfg, ids)
}

/// kill -9 during a Streamable HTTP call on a server that can replay its stream: `--resume`
/// joins the same session, reads the answer from the replay (`GET` with `Last-Event-ID`) and
/// settles the call; the run completes and the tool ran once.
#[test]
fn a_call_killed_mid_stream_is_settled_from_the_servers_replay() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let (_server, release, cfg, (id, run_id)) = killed_mid_call(&env, &py);
    std::fs::write(&release, "").unwrap();
    let resume = [
        "--resume",
        &id,
        "--allow-mcp",
        "--config",
        cfg.to_str().unwrap(),
    ];
    let run = env.run("kxen-agent", &resume);
    run.expect(0);
    assert_eq!(
        tool_outputs(&run),
        [("mcp__fx__wait_for".into(), "made-it".into(), false)]
    );
    assert_eq!(calls(&env), ["made-it"], "the tool ran once");
    assert!(
        http_log(&env)
            .iter()
            .any(|l| l == "GET session=yes version=2025-11-25"),
        "{:?}",
        http_log(&env)
    );
    let show = env.run("kxen-agent", &["run", "show", &id, &run_id]);
    show.expect(0);
    let op = &show.jsonl()[0]["operations"][0];
    assert_eq!(op["phase"], "settled", "{op}");
}

/// The same kill, but the server was restarted meanwhile (the session is gone, HTTP 404 on the
/// replay): the call is UNKNOWN with the usual message and the run stops for a human (exit 7).
#[test]
fn a_call_killed_mid_stream_on_a_restarted_server_is_unknown() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let (mut server, release, cfg, (id, run_id)) = killed_mid_call(&env, &py);
    server.restart(&env);
    std::fs::write(&release, "").unwrap();
    let resume = [
        "--resume",
        &id,
        "--allow-mcp",
        "--config",
        cfg.to_str().unwrap(),
    ];
    env.run("kxen-agent", &resume).expect(7);
    let op = unknown_op(&env, &id, &run_id);
    let reason = op["unknownReason"].as_str().unwrap();
    assert!(
        reason.starts_with("the runtime stopped after the tool started")
            && reason.contains("could not be read again")
            && reason.contains("404"),
        "{op}"
    );
    assert_eq!(calls(&env), ["made-it"]);
}

/// Hostile authorization: an oversized protected-resource document, and a token endpoint that
/// never answers, are each one clear error at Session creation (exit 9), bounded by
/// `timeout_ms`, with nothing written and the client secret nowhere in the output.
#[test]
fn hostile_authorization_is_one_clear_error_and_nothing_is_stored() {
    let Some(py) = python() else { return };
    let secret = "kxen-canary-secret-5a1f9e";
    for (mode, why) in [
        ("auth_oversized", "protected-resource metadata"),
        ("auth_token_hang", "the token request to"),
    ] {
        let env = TestEnv::new();
        let server = Hostile::start(&env, &py, mode);
        let repo = env.git_repo("repo", &[("README", "x\n")]);
        let cfg = config(
            &env,
            &[answer("done")],
            &format!(
                "{}[mcp.servers.h.oauth]\nclient_id = \"ci\"\nclient_secret_env = \
                 \"KXEN_TEST_OAUTH_SECRET\"\ngrant = \"client_credentials\"\n",
                server.entry(3000)
            ),
        );
        let agent = text_agent(&env, "mcp__h__echo", "");
        let started = Instant::now();
        let run = crate::env::Run::from(
            env.cmd("kxen-agent")
                .args([
                    "run",
                    "--workspace",
                    repo.to_str().unwrap(),
                    "--task",
                    "t",
                    "--agent",
                    agent.to_str().unwrap(),
                    "--config",
                    cfg.to_str().unwrap(),
                    "--allow-mcp",
                ])
                .env("KXEN_TEST_OAUTH_SECRET", secret)
                .output()
                .unwrap(),
        );
        run.expect(9);
        assert!(started.elapsed() < Duration::from_secs(20), "{mode}");
        assert!(
            run.stderr.contains("OAuth authorization failed") && run.stderr.contains(why),
            "{mode}: {}",
            run.stderr
        );
        assert!(
            !run.stderr.contains(secret) && !run.stdout.contains(secret),
            "{mode}"
        );
        assert!(!env.state_dir().exists(), "{mode}: nothing is written");
        if mode == "auth_token_hang" {
            // The secret went to the token endpoint (Basic), and only there.
            let calls = calls(&env);
            assert!(
                calls.iter().any(|c| c.starts_with("token:Basic ")),
                "{calls:?}"
            );
        }
    }
}

/// Over HTTP too, an elicitation on the call's stream gets the policy's answer at once.
#[test]
fn an_elicitation_over_http_gets_the_policys_answer() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let server = HttpServer::start(&env, &py, &ServerOptions::default());
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[call("c1", "mcp__fx__ask", json!({})), answer("done")],
        &http_entry(&server.url(), ""),
    );
    let policy = env.path().join("accept.json");
    std::fs::write(
        &policy,
        r#"{"allowMcp": true, "mcpElicitation": "acceptDefaults"}"#,
    )
    .unwrap();
    let agent = text_agent(&env, "mcp__fx__ask", "");
    let run = run_new(
        &env,
        &repo,
        "t",
        &agent,
        &cfg,
        &["--policy", policy.to_str().unwrap()],
    );
    run.expect(0);
    let outs = tool_outputs(&run);
    assert!(
        outs[0]
            .1
            .starts_with(r#"accept {"count": 3, "name": "Ada"}"#)
            && outs[0].1.contains("[MCP elicitation]"),
        "{outs:?}"
    );
}

/// fixtures/mcp/hostile_http.py in `mode`; killed when dropped.
struct Hostile {
    child: Child,
    port: u16,
}

impl Hostile {
    fn start(env: &TestEnv, py: &str, mode: &str) -> Hostile {
        let port_file = env.path().join("hostile-port");
        let mut child = Command::new(py)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/hostile_http.py"))
            .env("HOSTILE_MODE", mode)
            .env("PORT_FILE", &port_file)
            .env("COUNT_FILE", env.path().join("calls.txt"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file) {
                break text.trim().parse().unwrap();
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "the hostile server exited"
            );
            assert!(start.elapsed() < Duration::from_secs(30));
            std::thread::sleep(Duration::from_millis(20));
        };
        Hostile { child, port }
    }

    fn entry(&self, timeout_ms: u64) -> String {
        format!(
            "[mcp.servers.h]\nurl = \"http://127.0.0.1:{}/mcp\"\ntimeout_ms = {timeout_ms}\n",
            self.port
        )
    }
}

impl Drop for Hostile {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the spawned `child` to its end, at most `limit`: a run still alive then fails the test.
fn bounded(mut child: Child, limit: Duration, what: &str) -> crate::env::Run {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("{what}: the run was still alive after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    crate::env::Run::from(child.wait_with_output().unwrap())
}

/// A server misbehaving during the handshake: one clear error naming it (exit 9), bounded in
/// time and memory, no Session.
#[test]
fn a_hostile_http_server_at_the_handshake_is_one_clear_error() {
    let Some(py) = python() else { return };
    let cases = [
        ("init_garbage", "not JSON"),
        ("init_oversized", "reading the answer failed"),
        ("init_endless", "no answer within 2000 ms"),
        ("init_flood", "past 67108864 bytes"),
        (
            "init_wrong_id",
            "not the answer to request 1 (it answers id 999)",
        ),
        ("init_bad_session", "Mcp-Session-Id"),
        ("init_redirect", "another origin"),
        ("init_html404", "HTTP 404"),
    ];
    for (mode, why) in cases {
        let env = TestEnv::new();
        let server = Hostile::start(&env, &py, mode);
        let repo = env.git_repo("repo", &[("README", "x\n")]);
        let cfg = config(&env, &[answer("done")], &server.entry(2000));
        let agent = text_agent(&env, "mcp__h__echo", "");
        let child = spawn_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
        let run = bounded(child, Duration::from_secs(60), mode);
        run.expect(9);
        assert!(
            run.stderr.contains("MCP server `h`") && run.stderr.contains(why),
            "{mode}: {}",
            run.stderr
        );
        assert!(!run.stderr.contains("panicked"), "{mode}: {}", run.stderr);
        assert!(!env.state_dir().exists(), "{mode}: nothing is written");
    }
}

/// A server misbehaving once the call was sent: the call is UNKNOWN (it reached the server),
/// bounded by timeout_ms.
#[test]
fn a_hostile_http_server_during_a_call_leaves_it_unknown() {
    let Some(py) = python() else { return };
    for (mode, why) in [
        (
            "call_drop",
            "the connection failed after the request was sent",
        ),
        ("call_endless", "no answer within 3000 ms"),
        ("call_wrong_id", "ended without the answer"),
    ] {
        let env = TestEnv::new();
        let server = Hostile::start(&env, &py, mode);
        let repo = env.git_repo("repo", &[("README", "x\n")]);
        let cfg = config(
            &env,
            &[
                call("c1", "mcp__h__echo", json!({"text": "x"})),
                answer("done"),
            ],
            &server.entry(3000),
        );
        let agent = text_agent(&env, "mcp__h__echo", "");
        let child = spawn_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
        let run = bounded(child, Duration::from_secs(60), mode);
        run.expect(7);
        let (id, run_id) = ids(&env);
        let op = unknown_op(&env, &id, &run_id);
        assert!(
            op["unknownReason"].as_str().unwrap().contains(why),
            "{mode}: {op}"
        );
        assert_eq!(calls(&env), [format!("call:{mode}")], "{mode}");
    }
}
