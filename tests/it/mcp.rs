//! MCP tools end to end, against a real MCP server: the official Python SDK's `MCPServer`
//! (fixtures/mcp/server.py). `.ci/deps` installs the SDK; where it is missing the tests fail with
//! its install command, unless `KXEN_TEST_SKIP` names `mcp-sdk` (tests/it/needs.rs).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::run_support::*;

/// The Python interpreter that has the MCP SDK (absolute: the server's HOME is the tool home,
/// where a pyenv shim would not find its versions); `None` only when `KXEN_TEST_SKIP` names
/// `mcp-sdk`.
pub(crate) fn python() -> Option<String> {
    crate::needs::needs("mcp-sdk", || {
        crate::needs::python_with("mcp.server.mcpserver")
    })
}

fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/server.py")
}

/// A `[mcp.servers.fx]` entry running the fixture server.
pub(crate) fn fixture_server(env: &TestEnv, python: &str, extra: &str) -> String {
    format!(
        "[mcp.servers.fx]\ncommand = [{:?}, {:?}]\ntimeout_ms = 30000\n{extra}env = {{ KXEN_MCP_COUNT_FILE = {:?}, KXEN_MCP_SCHEMA_FILE = {:?} }}\n",
        python,
        server_script().to_str().unwrap(),
        count_file(env).to_str().unwrap(),
        env.path().join("schema-v2").to_str().unwrap(),
    )
}

/// `extra` of a server whose tools write the count file: it lives outside the workspace, where
/// the default fence lets no server write (tests/it/mcp_fence.rs tests that fence).
const COUNTING: &str = "sandbox = \"off\"\n";

fn count_file(env: &TestEnv) -> PathBuf {
    env.path().join("calls.txt")
}

/// The lines the fixture server's tools wrote to the count file.
pub(crate) fn calls(env: &TestEnv) -> Vec<String> {
    std::fs::read_to_string(count_file(env))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A script config replaying `turns`, with the MCP server table(s) `servers` appended.
pub(crate) fn config(env: &TestEnv, turns: &[Value], servers: &str) -> PathBuf {
    let path = script_config(env, turns);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push('\n');
    text.push_str(servers);
    std::fs::write(&path, text).unwrap();
    path
}

pub(crate) fn text_agent(env: &TestEnv, required: &str, optional: &str) -> PathBuf {
    agent(
        env,
        "mcp-user",
        required,
        optional,
        "{format: text, requiredFields: []}",
    )
}

/// session.json of the one Session in the state dir.
pub(crate) fn session_json(env: &TestEnv) -> Value {
    let sessions = env.state_dir().join("sessions");
    let dir = std::fs::read_dir(&sessions)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    serde_json::from_slice(&std::fs::read(dir.join("session.json")).unwrap()).unwrap()
}

pub(crate) fn tool_outputs(run: &crate::env::Run) -> Vec<(String, String, bool)> {
    run.jsonl()
        .into_iter()
        .filter(|e| e["type"] == "toolFinished")
        .map(|e| {
            (
                e["tool"].as_str().unwrap().to_string(),
                e["output"].as_str().unwrap().to_string(),
                e["isError"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_scripted_run_calls_mcp_tools_and_the_model_sees_their_results() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let dir = env.path().join("model");
    std::fs::create_dir_all(&dir).unwrap();
    // A command model that keeps every request it gets: what the model is offered and reads.
    std::fs::write(
        dir.join("model.sh"),
        r#"n=$(ls req*.json 2>/dev/null | wc -l)
cat > req$n.json
case $n in
0) echo '{"text":"","toolCalls":[{"id":"c1","name":"mcp__fx__echo","arguments":{"text":"hello mcp"}},{"id":"c2","name":"mcp__fx__fail","arguments":{"text":"boom"}}]}' ;;
*) echo '{"text":"done"}' ;;
esac
"#,
    )
    .unwrap();
    let cfg = dir.join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[providers.cmd]\nkind = \"command\"\nargv = [\"sh\", \"model.sh\"]\n\n[roles]\nexecution = \"cmd\"\n\n{}",
            fixture_server(&env, &py, "")
        ),
    )
    .unwrap();
    let agent = text_agent(&env, "read, mcp__fx__echo", "mcp__fx__fail");
    let run = run_new(&env, &repo, "say hello", &agent, &cfg, &["--allow-mcp"]);
    run.expect(0);
    let outputs = tool_outputs(&run);
    assert_eq!(
        outputs,
        [
            ("mcp__fx__echo".to_string(), "hello mcp".to_string(), false),
            ("mcp__fx__fail".to_string(), outputs[1].1.clone(), true),
        ]
    );
    assert!(outputs[1].1.contains("fail"), "{}", outputs[1].1);
    // The model was offered exactly the locked tools, with the server's schemas…
    let first: Value =
        serde_json::from_slice(&std::fs::read(dir.join("req0.json")).unwrap()).unwrap();
    let names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read", "mcp__fx__echo", "mcp__fx__fail"]);
    let echo = &first["tools"][1];
    assert_eq!(echo["description"], "Return the text.");
    assert_eq!(echo["parameters"]["required"], json!(["text"]));
    // …and read the result in its next request.
    let second = std::fs::read_to_string(dir.join("req1.json")).unwrap();
    assert!(second.contains("hello mcp"), "{second}");
    // The lock records every granted tool with its schema hash and the server entry's hash.
    let lock = &session_json(&env)["lock"];
    let tools: Vec<&str> = lock["mcpTools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(tools, ["mcp__fx__echo", "mcp__fx__fail"]);
    assert!(
        lock["mcpTools"][0]["schemaHash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(
        lock["mcpServers"]["fx"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
}

#[test]
fn without_allow_mcp_no_mcp_tool_is_offered_and_a_required_one_is_refused() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let server = fixture_server(&env, &py, "");
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__fx__echo", json!({"text": "hi"})),
            answer("done"),
        ],
        &server,
    );
    let required = text_agent(&env, "read, mcp__fx__echo", "");
    let run = run_new(&env, &repo, "t", &required, &cfg, &[]);
    run.expect(6);
    assert!(
        run.stderr.contains("mcp__fx__echo") && run.stderr.contains("--allow-mcp"),
        "{}",
        run.stderr
    );
    assert!(!env.state_dir().exists(), "nothing is written");

    let optional = text_agent(&env, "read", "mcp__fx__*");
    let run = run_new(&env, &repo, "t", &optional, &cfg, &[]);
    run.expect(0);
    let outputs = tool_outputs(&run);
    assert!(
        outputs[0].2 && outputs[0].1.contains("not allowed"),
        "{outputs:?}"
    );
    assert!(session_json(&env)["lock"].get("mcpTools").is_none());
    assert!(calls(&env).is_empty());
}

#[test]
fn denied_patterns_win_and_a_missing_required_tool_is_refused() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__fx__slow", json!({"text": "x", "seconds": 0})),
            answer("done"),
        ],
        &fixture_server(&env, &py, ""),
    );
    let policy = env.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"allowMcp": true, "deniedCapabilities": ["mcp__fx__slow", "mcp__fx__crash"]}"#,
    )
    .unwrap();
    let family = text_agent(&env, "mcp__fx__*", "");
    let run = run_new(
        &env,
        &repo,
        "t",
        &family,
        &cfg,
        &["--policy", policy.to_str().unwrap()],
    );
    run.expect(0);
    let lock = &session_json(&env)["lock"];
    let tools: Vec<&str> = lock["mcpTools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        [
            "mcp__fx__ask",
            "mcp__fx__echo",
            "mcp__fx__fail",
            "mcp__fx__has_env",
            "mcp__fx__hold",
            "mcp__fx__probe"
        ]
    );
    assert!(tool_outputs(&run)[0].2, "a denied tool is never called");
    assert!(calls(&env).is_empty());

    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(&env, &[answer("done")], &fixture_server(&env, &py, ""));
    let missing = text_agent(&env, "mcp__fx__teleport", "");
    let run = run_new(&env, &repo, "t", &missing, &cfg, &["--allow-mcp"]);
    run.expect(6);
    assert!(
        run.stderr.contains("has no tool `teleport`") && run.stderr.contains("echo"),
        "{}",
        run.stderr
    );
    assert!(!env.state_dir().exists());
    let unconfigured = text_agent(&env, "mcp__other__x", "");
    let run = run_new(&env, &repo, "t", &unconfigured, &cfg, &["--allow-mcp"]);
    run.expect(6);
    assert!(run.stderr.contains("[mcp.servers.other]"), "{}", run.stderr);
}

/// A server that declares no `tools` capability (fixtures/mcp/no_tools.py) has an empty
/// listing: `policy check` says so and exits 0; a required tool of it is refused (exit 6).
#[test]
fn a_server_without_tools_has_an_empty_listing() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/no_tools.py");
    let cfg = config(
        &env,
        &[answer("done")],
        &format!(
            "[mcp.servers.empty]\ncommand = [{py:?}, {:?}]\n",
            script.to_str().unwrap()
        ),
    );
    let cfg_arg = cfg.to_str().unwrap();
    let check = env.run(
        "kxen-agent",
        &[
            "--format",
            "text",
            "policy",
            "check",
            "--allow-mcp",
            "--config",
            cfg_arg,
        ],
    );
    check.expect(0);
    assert!(
        check.stdout.contains("empty") && check.stdout.contains("no tools"),
        "{}",
        check.stdout
    );
    let json = env.run(
        "kxen-agent",
        &["policy", "check", "--allow-mcp", "--config", cfg_arg],
    );
    json.expect(0);
    assert!(
        json.stdout.contains(r#""name":"empty","tools":[]"#),
        "{}",
        json.stdout
    );
    let agent = text_agent(&env, "mcp__empty__anything", "");
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(6);
    assert!(
        run.stderr.contains("has no tool `anything` (it has: none)"),
        "{}",
        run.stderr
    );
}

/// A server asking for input mid-call (`elicitation/create`) gets the policy's answer at once:
/// `decline` by default; `acceptDefaults` accepts with every default, or declines when a
/// required field has none. What was asked and answered is part of the call's journaled
/// outcome, shown by `run show`.
#[test]
fn elicitations_are_answered_by_the_policy_and_journaled_with_the_outcome() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__fx__ask", json!({})),
            call("c2", "mcp__fx__ask", json!({"required": true})),
            answer("done"),
        ],
        &fixture_server(&env, &py, ""),
    );
    let agent = text_agent(&env, "mcp__fx__ask", "");
    let declined = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    declined.expect(0);
    let outs = tool_outputs(&declined);
    assert!(outs[0].1.starts_with("decline null"), "{outs:?}");
    assert!(
        outs[0]
            .1
            .contains("[MCP elicitation] the server asked \"Which name?\"")
            && outs[0]
                .1
                .contains("answered decline (policy mcpElicitation \"decline\")"),
        "{outs:?}"
    );

    let policy = env.path().join("accept.json");
    std::fs::write(
        &policy,
        r#"{"allowMcp": true, "mcpElicitation": "acceptDefaults"}"#,
    )
    .unwrap();
    let accepted = run_new(
        &env,
        &repo,
        "t",
        &agent,
        &cfg,
        &["--policy", policy.to_str().unwrap()],
    );
    accepted.expect(0);
    let outs = tool_outputs(&accepted);
    assert!(
        outs[0]
            .1
            .starts_with(r#"accept {"count": 3, "name": "Ada"}"#)
            && outs[0]
                .1
                .contains(r#"answered accept with {"name":"Ada","count":3}"#),
        "{outs:?}"
    );
    assert!(
        outs[1].1.starts_with("decline null") && outs[1].1.contains("answered decline"),
        "a required field without a default is declined: {outs:?}"
    );
    let events = accepted.jsonl();
    let fin = finished(&events);
    let show = env.run(
        "kxen-agent",
        &[
            "--format",
            "text",
            "run",
            "show",
            fin["sessionId"].as_str().unwrap(),
            fin["runId"].as_str().unwrap(),
        ],
    );
    show.expect(0);
    assert!(show.stdout.contains("[MCP elicitation]"), "{}", show.stdout);
}

/// Every request a server sends during a call gets an answer at once: `ping` a result,
/// `roots/list` the workspace root (declared to stdio servers), `sampling/createMessage` an
/// error. The call completes; nothing waits for its timeout.
#[test]
fn a_servers_own_requests_are_answered_and_the_call_completes() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[call("c1", "mcp__fx__probe", json!({})), answer("done")],
        &fixture_server(&env, &py, ""),
    );
    let agent = text_agent(&env, "mcp__fx__probe", "");
    let started = std::time::Instant::now();
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(0);
    assert!(started.elapsed() < Duration::from_secs(20));
    let outs = tool_outputs(&run);
    let text = &outs[0].1;
    assert!(text.contains("ping: {}"), "{text}");
    assert!(
        text.contains(r#"roots/list: {"roots": [{"name": "workspace", "uri": "file:///"#)
            && text.contains("/repo/\""),
        "{text}"
    );
    assert!(
        text.contains("sampling/createMessage: error") && text.contains("does not offer sampling"),
        "{text}"
    );
}

#[test]
fn a_broken_server_is_one_clear_error_naming_it_and_no_session() {
    let Some(_py) = python() else { return };
    let cases = [
        (
            "command = [\"sh\", \"-c\", \"echo starting up >&2; exit 3\"]\n",
            "exited",
        ),
        (
            "command = [\"sh\", \"-c\", \"echo hello there; sleep 20\"]\n",
            "not a JSON-RPC message",
        ),
        (
            "command = [\"sleep\", \"20\"]\ntimeout_ms = 1000\n",
            "no answer within 1000 ms",
        ),
        ("command = [\"/nonexistent/server\"]\n", "cannot start"),
    ];
    for (entry, why) in cases {
        let env = TestEnv::new();
        let repo = env.git_repo("repo", &[("README", "x\n")]);
        let cfg = config(
            &env,
            &[answer("done")],
            &format!("[mcp.servers.fx]\n{entry}"),
        );
        let agent = text_agent(&env, "mcp__fx__echo", "");
        let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
        run.expect(9);
        assert!(
            run.stderr.contains("MCP server `fx`") && run.stderr.contains(why),
            "{entry}: {}",
            run.stderr
        );
        assert!(!env.state_dir().exists(), "{entry}: nothing is written");
    }
}

#[test]
fn the_canary_reaches_the_server_only_through_both_pass_envs() {
    let Some(py) = python() else { return };
    let turns = [
        call(
            "c1",
            "mcp__fx__has_env",
            json!({"name": "KXEN_CANARY_TOKEN"}),
        ),
        answer("done"),
    ];
    let cases = [
        ("", &[][..], "absent"),
        ("passEnv = [\"KXEN_CANARY_TOKEN\"]\n", &[][..], "absent"),
        ("", &["--pass-env", "KXEN_CANARY_TOKEN"][..], "absent"),
        (
            "passEnv = [\"KXEN_CANARY_TOKEN\"]\n",
            &["--pass-env", "KXEN_CANARY_TOKEN"][..],
            "present",
        ),
    ];
    for (server_pass, flags, expected) in cases {
        let env = TestEnv::new();
        let repo = env.git_repo("repo", &[("README", "x\n")]);
        let cfg = config(&env, &turns, &fixture_server(&env, &py, server_pass));
        let agent = text_agent(&env, "mcp__fx__has_env", "");
        let mut args = vec![
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
        ];
        args.extend_from_slice(flags);
        let out = env
            .cmd("kxen-agent")
            .args(&args)
            .env("KXEN_CANARY_TOKEN", "canary-7f3a")
            .output()
            .unwrap();
        let run = crate::env::Run::from(out);
        run.expect(0);
        assert_eq!(tool_outputs(&run)[0].1, expected, "{server_pass} {flags:?}");
    }
}

/// Waits until the count file has `n` lines.
pub(crate) fn wait_for_calls(env: &TestEnv, n: usize) {
    let start = std::time::Instant::now();
    while calls(env).len() < n {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the server never got the call"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The one Session's id and its first run's.
pub(crate) fn ids(env: &TestEnv) -> (String, String) {
    let s = session_json(env);
    (
        s["id"].as_str().unwrap().to_string(),
        s["firstRunId"].as_str().unwrap().to_string(),
    )
}

/// The operation of `run show` in phase `outcomeUnknown`.
pub(crate) fn unknown_op(env: &TestEnv, id: &str, run_id: &str) -> Value {
    let show = env.run("kxen-agent", &["run", "show", id, run_id]);
    show.expect(0);
    show.jsonl()[0]["operations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["phase"] == "outcomeUnknown")
        .unwrap_or_else(|| panic!("no UNKNOWN operation: {}", show.stdout))
        .clone()
}

/// Records `output` as the outcome of the UNKNOWN operation `op`, then resumes the Session with
/// `--allow-mcp --config cfg`; the run completes.
pub(crate) fn resolve_and_resume(
    env: &TestEnv,
    (id, run_id): (&str, &str),
    op: &Value,
    output: &str,
    cfg: &Path,
) -> crate::env::Run {
    let op_id = op["opId"].as_str().unwrap();
    env.run(
        "kxen-agent",
        &["run", "resolve", id, run_id, op_id, "--output", output],
    )
    .expect(0);
    let run = env.run(
        "kxen-agent",
        &[
            "--resume",
            id,
            "--allow-mcp",
            "--config",
            cfg.to_str().unwrap(),
        ],
    );
    run.expect(0);
    run
}

/// The run is killed during the slow call of the `fx` server of `servers` (its tools count their
/// calls in `calls.txt`): the call is UNKNOWN (exit 7 on resume), its resolution is its result,
/// and it never runs again.
pub(crate) fn a_killed_slow_call_is_resolved_and_never_repeated(env: &TestEnv, servers: &str) {
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        env,
        &[
            call(
                "c1",
                "mcp__fx__slow",
                json!({"text": "create-pr", "seconds": 20}),
            ),
            call("c2", "mcp__fx__echo", json!({"text": "after"})),
            answer("done"),
        ],
        servers,
    );
    let agent = text_agent(env, "mcp__fx__slow, mcp__fx__echo", "");
    let mut child = spawn_new(env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    wait_for_calls(env, 1);
    child.kill().unwrap();
    child.wait().unwrap();
    let (id, run_id) = ids(env);
    let resume = [
        "--resume",
        &id,
        "--allow-mcp",
        "--config",
        cfg.to_str().unwrap(),
    ];
    env.run("kxen-agent", &resume).expect(7);
    let op = unknown_op(env, &id, &run_id);
    assert_eq!(op["tool"], "mcp__fx__slow");
    let run = resolve_and_resume(env, (&id, &run_id), &op, "the PR exists", &cfg);
    assert_eq!(
        tool_outputs(&run),
        [
            ("mcp__fx__slow".into(), "the PR exists".into(), false),
            ("mcp__fx__echo".into(), "after".into(), false)
        ],
        "the resolution is the slow call's result; it is not run again"
    );
    assert_eq!(calls(env), ["create-pr"], "the slow call ran exactly once");
}

#[test]
fn sigkill_during_a_slow_call_is_unknown_resolved_and_never_repeated() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let servers = fixture_server(&env, &py, COUNTING);
    a_killed_slow_call_is_resolved_and_never_repeated(&env, &servers);
}

#[test]
fn a_server_crash_mid_call_is_unknown_and_the_server_restarts() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__fx__crash", json!({"text": "crashed"})),
            call("c2", "mcp__fx__echo", json!({"text": "restarted"})),
            answer("done"),
        ],
        &fixture_server(&env, &py, COUNTING),
    );
    let agent = text_agent(&env, "mcp__fx__crash, mcp__fx__echo", "");
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(7);
    let (id, run_id) = ids(&env);
    let op = unknown_op(&env, &id, &run_id);
    let run = resolve_and_resume(&env, (&id, &run_id), &op, "it crashed", &cfg);
    assert_eq!(
        tool_outputs(&run),
        [
            ("mcp__fx__crash".into(), "it crashed".into(), false),
            ("mcp__fx__echo".into(), "restarted".into(), false)
        ]
    );
    assert_eq!(calls(&env), ["crashed"]);
}

#[test]
fn a_changed_schema_or_server_entry_is_mcp_drift() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let server = fixture_server(&env, &py, "");
    let cfg = config(&env, &[answer("one"), answer("two")], &server);
    let agent = text_agent(&env, "mcp__fx__echo", "");
    run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]).expect(0);
    let id = session_json(&env)["id"].as_str().unwrap().to_string();
    let resume = [
        "--resume",
        &id,
        "--task",
        "again",
        "--allow-mcp",
        "--config",
        cfg.to_str().unwrap(),
    ];
    std::fs::write(env.path().join("schema-v2"), "").unwrap();
    let run = env.run("kxen-agent", &resume);
    run.expect(6);
    assert!(
        run.stderr.contains("MCP drift")
            && run.stderr.contains("mcp__fx__echo input schema changed")
            && run.stderr.contains("+")
            && run.stderr.contains("loud"),
        "{}",
        run.stderr
    );
    std::fs::remove_file(env.path().join("schema-v2")).unwrap();
    let changed = config(
        &env,
        &[answer("one"), answer("two")],
        &server.replace("timeout_ms = 30000", "timeout_ms = 20000"),
    );
    let run = env.run(
        "kxen-agent",
        &[
            "--resume",
            &id,
            "--task",
            "again",
            "--allow-mcp",
            "--config",
            changed.to_str().unwrap(),
        ],
    );
    run.expect(6);
    assert!(
        run.stderr.contains("[mcp.servers.fx] changed"),
        "{}",
        run.stderr
    );
    let cfg = config(&env, &[answer("one"), answer("two")], &server);
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
    .expect(0);
}

#[test]
fn a_cancel_during_a_call_notifies_the_server_then_kills_it_and_is_unknown() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call(
                "c1",
                "mcp__fx__slow",
                json!({"text": "once", "seconds": 30}),
            ),
            answer("done"),
        ],
        &fixture_server(&env, &py, COUNTING),
    );
    let agent = text_agent(&env, "mcp__fx__slow", "");
    let child = spawn_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    wait_for_calls(&env, 1);
    let started = std::time::Instant::now();
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the cleanup window is short"
    );
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (id, run_id) = ids(&env);
    unknown_op(&env, &id, &run_id);
    assert_eq!(calls(&env), ["once"]);
}

#[test]
fn mcp_tools_rules_allow_ask_and_deny() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__fx__echo", json!({"text": "no question"})),
            call(
                "c2",
                "mcp__fx__slow",
                json!({"text": "asked", "seconds": 0}),
            ),
            answer("done"),
        ],
        &fixture_server(&env, &py, COUNTING),
    );
    let policy = env.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"allowMcp": true, "mcpTools": {"mcp__fx__*": "ask", "mcp__fx__echo": "allow",
            "mcp__fx__crash": "deny"}}"#,
    )
    .unwrap();
    let policy_flag = ["--policy", policy.to_str().unwrap()];
    // A required tool whose rule is deny: no Session.
    let required = text_agent(&env, "mcp__fx__crash", "");
    let refused = run_new(&env, &repo, "t", &required, &cfg, &policy_flag);
    refused.expect(6);
    assert!(refused.stderr.contains("\"deny\""), "{}", refused.stderr);
    assert!(!env.state_dir().exists());

    let family = text_agent(&env, "mcp__fx__*", "");
    let first = run_new(&env, &repo, "t", &family, &cfg, &policy_flag);
    first.expect(7);
    let lock = &session_json(&env)["lock"];
    let tools: Vec<&str> = lock["mcpTools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        !tools.contains(&"mcp__fx__crash"),
        "a denied tool is not granted: {tools:?}"
    );
    assert_eq!(
        tool_outputs(&first),
        [("mcp__fx__echo".into(), "no question".into(), false)],
        "allow beats the family's ask"
    );
    let events = first.jsonl();
    let asked = events
        .iter()
        .find(|e| e["type"] == "runApprovalRequired")
        .expect("the slow call waits");
    assert_eq!(asked["tool"], "mcp__fx__slow");
    assert_eq!(asked["rule"], "mcp__fx__*");
    assert!(calls(&env).is_empty(), "the held call was not sent");
    let session = session_json(&env);
    let (id, run_id) = (
        session["id"].as_str().unwrap().to_string(),
        session["firstRunId"].as_str().unwrap().to_string(),
    );
    env.run(
        "kxen-agent",
        &[
            "run",
            "approve",
            &id,
            &run_id,
            asked["opId"].as_str().unwrap(),
        ],
    )
    .expect(0);
    let mut resume = vec!["--resume", id.as_str(), "--config", cfg.to_str().unwrap()];
    resume.extend_from_slice(&policy_flag);
    let done = env.run("kxen-agent", &resume);
    done.expect(0);
    assert_eq!(
        tool_outputs(&done),
        [("mcp__fx__slow".into(), "asked".into(), false)]
    );
    assert_eq!(calls(&env), ["asked"], "the approved call ran once");
}

/// Waits until the count file has a line starting with `prefix`; returns it.
fn wait_for_line(env: &TestEnv, prefix: &str) -> String {
    let start = std::time::Instant::now();
    loop {
        if let Some(line) = calls(env).into_iter().find(|l| l.starts_with(prefix)) {
            return line;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no {prefix:?} line: {:?}",
            calls(env)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn process_gone(pid: &str) -> bool {
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            // A zombie waiting for its reaper is gone too.
            Ok(stat)
                if stat
                    .rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z')) =>
            {
                return true;
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    false
}

/// Ctrl-C during a call: the server gets `notifications/cancelled` for it (its tool sees the
/// cancellation), then, after the cleanup window, its whole process group is killed (a process
/// the server started is gone too); the call is UNKNOWN, resolved, and never run again.
#[test]
fn a_cancel_reaches_the_server_and_its_process_group_is_killed() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__fx__hold", json!({"text": "pr", "seconds": 60})),
            call("c2", "mcp__fx__echo", json!({"text": "later"})),
            answer("done"),
        ],
        &fixture_server(&env, &py, COUNTING),
    );
    let agent = text_agent(&env, "mcp__fx__hold, mcp__fx__echo", "");
    let child = spawn_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    let grandchild = wait_for_line(&env, "child:")["child:".len()..].to_string();
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_for_line(&env, "cancelled:pr");
    assert!(
        process_gone(&grandchild),
        "the server's process group was not killed: {grandchild} still runs"
    );
    let (id, run_id) = ids(&env);
    let op = unknown_op(&env, &id, &run_id);
    let done = resolve_and_resume(&env, (&id, &run_id), &op, "no PR", &cfg);
    assert_eq!(
        tool_outputs(&done),
        [
            ("mcp__fx__hold".into(), "no PR".into(), false),
            ("mcp__fx__echo".into(), "later".into(), false)
        ]
    );
    let holds = calls(&env).iter().filter(|l| *l == "pr").count();
    assert_eq!(
        holds,
        1,
        "the canceled call never ran again: {:?}",
        calls(&env)
    );
}

/// A call longer than the server's `timeout_ms` is stopped (cancel notification, process group
/// killed), UNKNOWN, and the server is started again for the next call.
#[test]
fn a_call_past_timeout_ms_is_unknown_and_the_server_restarts() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let server =
        fixture_server(&env, &py, COUNTING).replace("timeout_ms = 30000", "timeout_ms = 20000");
    let cfg = config(
        &env,
        &[
            call(
                "c1",
                "mcp__fx__hold",
                json!({"text": "slow", "seconds": 300}),
            ),
            call("c2", "mcp__fx__echo", json!({"text": "after the timeout"})),
            answer("done"),
        ],
        &server,
    );
    let agent = text_agent(&env, "mcp__fx__hold, mcp__fx__echo", "");
    let started = std::time::Instant::now();
    let first = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    first.expect(7);
    assert!(
        started.elapsed() < Duration::from_secs(200),
        "the timeout stopped the call (it holds 300 s)"
    );
    let grandchild = calls(&env)
        .into_iter()
        .find_map(|l| l.strip_prefix("child:").map(str::to_string))
        .expect("the call ran");
    assert!(
        process_gone(&grandchild),
        "{grandchild} outlived the timeout"
    );
    let (id, run_id) = ids(&env);
    let op = unknown_op(&env, &id, &run_id);
    assert!(
        op["unknownReason"]
            .as_str()
            .unwrap()
            .contains("no answer within 20000 ms"),
        "{op}"
    );
    let done = resolve_and_resume(&env, (&id, &run_id), &op, "timed out", &cfg);
    assert_eq!(
        tool_outputs(&done)[1],
        ("mcp__fx__echo".into(), "after the timeout".into(), false)
    );
    assert_eq!(calls(&env).iter().filter(|l| *l == "slow").count(), 1);
}

/// A server entry for the fixture started as a module (`python -m server`, the `uvx`/`-m` form,
/// which puts the working directory first on `sys.path`), with `extra` lines.
fn module_server(python: &str, extra: &str) -> String {
    format!(
        "[mcp.servers.fx]\ncommand = [{python:?}, \"-m\", \"server\"]\ntimeout_ms = 30000\n{extra}",
    )
}

fn fixture_dir() -> String {
    server_script()
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string()
}

/// A workspace file named like a module the server imports (`json.py`) never runs inside the
/// server: the server's working directory is its own directory under the state dir, not the
/// workspace, and servers get `PYTHONSAFEPATH=1` and `PYTHONNOUSERSITE=1`.
#[test]
fn a_workspace_module_never_runs_inside_a_server() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let marker = env.path().join("shadowed.txt");
    let shadow = format!(
        "import os, sys\nopen({:?}, 'w').write(os.getcwd())\ndel sys.modules['json']\n\
         sys.path = [p for p in sys.path if p not in ('', os.getcwd())]\nimport json as _j\n\
         sys.modules['json'] = _j\nglobals().update(_j.__dict__)\n",
        marker.to_str().unwrap()
    );
    let repo = env.git_repo("repo", &[("README", "x\n"), ("json.py", &shadow)]);
    let turns = [
        call("c1", "mcp__fx__echo", json!({"text": "hi"})),
        call("c2", "mcp__fx__has_env", json!({"name": "PYTHONSAFEPATH"})),
        call(
            "c3",
            "mcp__fx__has_env",
            json!({"name": "PYTHONNOUSERSITE"}),
        ),
        answer("done"),
    ];
    // PYTHONSAFEPATH set empty (Python then ignores it) isolates the working-directory default.
    let cfg = config(
        &env,
        &turns,
        &module_server(
            &py,
            &format!(
                "sandbox = \"off\"\nenv = {{ PYTHONPATH = {:?}, PYTHONSAFEPATH = \"\" }}\n",
                fixture_dir()
            ),
        ),
    );
    let agent = text_agent(&env, "mcp__fx__echo, mcp__fx__has_env", "");
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(0);
    assert!(
        !marker.exists(),
        "the workspace's json.py ran in the server (cwd {:?})",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
    let outs = tool_outputs(&run);
    assert_eq!(outs[0].1, "hi");
    assert_eq!(outs[2].1, "present");

    // Without the override, PYTHONSAFEPATH=1 reaches the server.
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n"), ("json.py", &shadow)]);
    let cfg = config(
        &env,
        &turns,
        &module_server(
            &py,
            &format!("env = {{ PYTHONPATH = {:?} }}\n", fixture_dir()),
        ),
    );
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(0);
    let outs = tool_outputs(&run);
    assert_eq!(outs[1].1, "present", "PYTHONSAFEPATH");
    assert_eq!(outs[2].1, "present", "PYTHONNOUSERSITE");
}

/// `exec` and the MCP servers never share a HOME: a Python `usercustomize.py` that `exec`
/// plants in its HOME's user site never runs in a server (even one with `sandbox = "off"` and
/// the user site enabled), and `exec`'s fence cannot write the server's own HOME.
#[test]
fn exec_cannot_plant_code_in_a_servers_home() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let marker = env.path().join("planted-ran.txt");
    let plant = format!(
        "d=$({py} -c 'import site;print(site.getusersitepackages())') && mkdir -p $d && \
         echo 'open({:?}, \"w\").write(\"ran\")' > $d/usercustomize.py && echo planted",
        marker.to_str().unwrap()
    );
    let server_home = env.state_dir().join("mcp-home");
    let touch = format!(
        "touch {}/$KXEN_SESSION_ID/fx/planted; echo exit=$?",
        server_home.to_str().unwrap()
    );
    let turns = [
        call("c1", "exec", json!({ "command": plant })),
        answer("planted"),
        call("c2", "mcp__fx__echo", json!({"text": "hi"})),
        call("c3", "exec", json!({ "command": touch })),
        answer("done"),
    ];
    let cfg = config(
        &env,
        &turns,
        &format!(
            "[mcp.servers.fx]\ncommand = [{py:?}, {:?}]\nsandbox = \"off\"\n\
             env = {{ PYTHONNOUSERSITE = \"\" }}\n",
            server_script().to_str().unwrap()
        ),
    );
    let agent = text_agent(&env, "mcp__fx__echo", "exec");
    let run = run_new(
        &env,
        &repo,
        "t",
        &agent,
        &cfg,
        &["--allow-mcp", "--allow-shell"],
    );
    run.expect(0);
    assert!(
        tool_outputs(&run)[0].1.contains("planted"),
        "{:?}",
        tool_outputs(&run)
    );
    let id = session_json(&env)["id"].as_str().unwrap().to_string();
    let run = env.run(
        "kxen-agent",
        &[
            "--resume",
            &id,
            "--task",
            "again",
            "--allow-mcp",
            "--allow-shell",
            "--config",
            cfg.to_str().unwrap(),
        ],
    );
    run.expect(0);
    let outs = tool_outputs(&run);
    assert_eq!(outs[0].1, "hi");
    assert!(!marker.exists(), "code exec planted ran in the MCP server");
    assert!(
        server_home.join(&id).join("fx").is_dir(),
        "the server has its own HOME under the state dir"
    );
    assert!(!outs[1].1.contains("exit=0"), "{}", outs[1].1);
    assert!(!server_home.join(&id).join("fx/planted").exists());
}

fn daemon_server(env: &TestEnv, python: &str) -> String {
    fixture_server(env, python, COUNTING).replace(
        "env = { KXEN_MCP_COUNT_FILE",
        "env = { KXEN_MCP_DAEMON_TOOL = \"1\", KXEN_MCP_COUNT_FILE",
    )
}

/// A process an MCP server detaches (`setsid`, out of its process group) is stopped when the
/// run ends; after a kill -9 of kxen-agent (the server dies with it, its daemon does not), the
/// next start of the run stops it by the crashed attempt's mark.
#[test]
fn what_a_server_detaches_never_outlives_the_run() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__fx__daemon", json!({"text": "a"})),
            answer("done"),
        ],
        &daemon_server(&env, &py),
    );
    let agent = text_agent(&env, "mcp__fx__daemon, mcp__fx__slow", "");
    let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    run.expect(0);
    let pid = tool_outputs(&run)[0].1.clone();
    assert!(pid.parse::<u32>().is_ok(), "{pid}");
    assert!(
        process_gone(&pid),
        "the server's daemon {pid} outlived the run"
    );

    // kill -9 during a later call: the daemon survives the runtime, the resume stops it.
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[
            call("c1", "mcp__fx__daemon", json!({"text": "a"})),
            call("c2", "mcp__fx__slow", json!({"text": "s", "seconds": 60})),
            answer("done"),
        ],
        &daemon_server(&env, &py),
    );
    let mut child = spawn_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    wait_for_calls(&env, 1);
    child.kill().unwrap();
    child.wait().unwrap();
    let count_mark = format!("KXEN_MCP_COUNT_FILE={}", count_file(&env).to_str().unwrap());
    let daemons: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|e| e.split(|b| *b == 0).any(|v| v == count_mark.as_bytes()))
                && std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.starts_with("sleep\x00300"))
        })
        .collect();
    assert_eq!(
        daemons.len(),
        1,
        "the daemon survives the kill: {daemons:?}"
    );
    let id = session_json(&env)["id"].as_str().unwrap().to_string();
    let run = env.run(
        "kxen-agent",
        &[
            "--resume",
            &id,
            "--allow-mcp",
            "--config",
            cfg.to_str().unwrap(),
        ],
    );
    run.expect(7);
    assert!(
        process_gone(&daemons[0]),
        "the crashed run's server daemon {} still runs after the resume",
        daemons[0]
    );
}

/// `mcpPassEnv` hands a sensitive variable to one MCP server (whose entry's `passEnv` lists it)
/// and never to `exec`; another server's entry in `mcpPassEnv` gives this one nothing.
#[test]
fn mcp_pass_env_reaches_only_its_server_and_never_exec() {
    let Some(py) = python() else { return };
    let turns = [
        call(
            "c1",
            "mcp__fx__has_env",
            json!({"name": "KXEN_CANARY_TOKEN"}),
        ),
        call(
            "c2",
            "exec",
            json!({"command": "echo ${KXEN_CANARY_TOKEN:-absent}; env | grep -c canary-7f''3a"}),
        ),
        answer("done"),
    ];
    for (grant, expected) in [("fx", "present"), ("other", "absent")] {
        let env = TestEnv::new();
        let repo = env.git_repo("repo", &[("README", "x\n")]);
        let cfg = config(
            &env,
            &turns,
            &fixture_server(&env, &py, "passEnv = [\"KXEN_CANARY_TOKEN\"]\n"),
        );
        let policy = env.path().join("policy.json");
        std::fs::write(
            &policy,
            format!(
                r#"{{"allowMcp": true, "allowShell": true, "mcpPassEnv": {{"{grant}": ["KXEN_CANARY_TOKEN"]}}}}"#
            ),
        )
        .unwrap();
        let agent = text_agent(&env, "mcp__fx__has_env, exec", "");
        let out = env
            .cmd("kxen-agent")
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
                "--policy",
                policy.to_str().unwrap(),
            ])
            .env("KXEN_CANARY_TOKEN", "canary-7f3a")
            .output()
            .unwrap();
        let run = crate::env::Run::from(out);
        run.expect(0);
        let outs = tool_outputs(&run);
        assert_eq!(outs[0].1, expected, "mcpPassEnv for {grant}");
        assert!(
            outs[1].1.starts_with("absent\n0\n"), // (the value split: arguments are redacted)
            "exec got the server's token: {}",
            outs[1].1
        );
        // policy check shows the grant, and it is part of the hash.
        let check = env.run(
            "kxen-agent",
            &["policy", "check", "--policy", policy.to_str().unwrap()],
        );
        check.expect(0);
        let shown = check.jsonl().remove(0);
        assert_eq!(
            shown["policy"]["mcpPassEnv"][grant],
            json!(["KXEN_CANARY_TOKEN"])
        );
        let plain = env.run(
            "kxen-agent",
            &["policy", "check", "--allow-mcp", "--allow-shell"],
        );
        assert_ne!(shown["policyHash"], plain.jsonl()[0]["policyHash"]);
    }
}
