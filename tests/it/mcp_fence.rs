//! MCP servers run in the same fence as `exec` (`sandbox`, `allow_network` of their
//! `[mcp.servers.NAME]` entry), against the real Python SDK fixture server with its fence tools
//! (`write_file`, `connect`).

use serde_json::json;

use crate::env::TestEnv;
use crate::mcp::{config, python, text_agent, tool_outputs};
use crate::run_support::*;

/// A `[mcp.servers.fx]` entry of the fixture server with the fence tools and `extra` lines.
fn fence_server(python: &str, extra: &str) -> String {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/server.py");
    format!(
        "[mcp.servers.fx]\ncommand = [{python:?}, {:?}]\ntimeout_ms = 30000\n{extra}env = {{ KXEN_MCP_FENCE_TOOLS = \"1\" }}\n",
        script.to_str().unwrap(),
    )
}

#[test]
fn a_fenced_server_writes_only_where_its_sandbox_lets_it() {
    let Some(py) = python() else { return };
    // (entry lines, inside the workspace written, outside written)
    let cases = [
        ("", true, false),
        ("sandbox = \"workspaceWrite\"\n", true, false),
        ("sandbox = \"readOnly\"\n", false, false),
        ("sandbox = \"off\"\n", true, true),
    ];
    for (extra, inside_ok, outside_ok) in cases {
        let env = TestEnv::new();
        let repo = env.git_repo("repo", &[("README", "x\n")]);
        let outside = env.path().join("outside.txt");
        let inside = repo.join("inside.txt");
        let cfg = config(
            &env,
            &[
                call(
                    "c1",
                    "mcp__fx__write_file",
                    json!({"path": outside.to_str().unwrap(), "text": "escaped"}),
                ),
                call(
                    "c2",
                    "mcp__fx__write_file",
                    json!({"path": inside.to_str().unwrap(), "text": "in"}),
                ),
                answer("done"),
            ],
            &fence_server(&py, extra),
        );
        let agent = text_agent(&env, "mcp__fx__write_file", "");
        let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
        run.expect(0);
        let outputs = tool_outputs(&run);
        let expect = |ok: bool, out: &str| {
            if ok {
                assert_eq!(out, "wrote", "{extra:?}");
            } else {
                assert!(
                    out.starts_with("error:")
                        && (out.contains("denied") || out.contains("Read-only file system")),
                    "{extra:?}: {out}"
                );
            }
        };
        expect(outside_ok, &outputs[0].1);
        expect(inside_ok, &outputs[1].1);
        assert_eq!(outside.exists(), outside_ok, "{extra:?}");
        assert_eq!(inside.exists(), inside_ok, "{extra:?}");
    }
}

#[test]
fn a_server_reaches_a_loopback_listener_only_with_allow_network() {
    let Some(py) = python() else { return };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    for (extra, expected) in [
        ("", "error:"),
        ("allow_network = false\n", "error:"),
        ("allow_network = true\n", "connected"),
        ("sandbox = \"off\"\n", "connected"),
    ] {
        let env = TestEnv::new();
        let repo = env.git_repo("repo", &[("README", "x\n")]);
        let cfg = config(
            &env,
            &[
                call("c1", "mcp__fx__connect", json!({"port": port})),
                answer("done"),
            ],
            &fence_server(&py, extra),
        );
        let agent = text_agent(&env, "mcp__fx__connect", "");
        let run = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
        run.expect(0);
        let out = &tool_outputs(&run)[0].1;
        assert!(out.starts_with(expected), "{extra:?}: {out}");
    }
}

/// The fence fields are part of the server entry locked with the Session: changing either one is
/// MCP drift on resume (exit 6); the unchanged entry resumes.
#[test]
fn changing_a_servers_sandbox_or_network_is_mcp_drift() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let turns = [answer("one"), answer("two")];
    let cfg = config(&env, &turns, &fence_server(&py, ""));
    let agent = text_agent(&env, "mcp__fx__connect", "");
    let first = run_new(&env, &repo, "t", &agent, &cfg, &["--allow-mcp"]);
    first.expect(0);
    let id = finished(&first.jsonl())["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let resume = |cfg: &std::path::Path| {
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
    for extra in ["sandbox = \"off\"\n", "allow_network = true\n"] {
        let changed = config(&env, &turns, &fence_server(&py, extra));
        let run = resume(&changed);
        run.expect(6);
        assert!(
            run.stderr.contains("MCP drift") && run.stderr.contains("[mcp.servers.fx] changed"),
            "{extra:?}: {}",
            run.stderr
        );
    }
    // Spelling out the default is the same entry.
    let explicit = config(
        &env,
        &turns,
        &fence_server(&py, "sandbox = \"workspaceWrite\"\n"),
    );
    resume(&explicit).expect(0);
}
