//! MCP against a reference server from the npm registry: `@modelcontextprotocol/server-filesystem`
//! (installed by `.ci/run` into `$HOME/.cache/kxen-ci/npm`, or `$KXEN_NPM_PREFIX`). This is the
//! README's example config, run as a user would: `policy check --config` lists its tools with their
//! rules, a read is allowed, a write waits for approval and then runs once.

use std::path::PathBuf;

use serde_json::json;

use crate::env::TestEnv;
use crate::run_support::*;

/// The server's entry point; `None` only when `KXEN_TEST_SKIP` names `npm-mcp`.
fn filesystem_server() -> Option<PathBuf> {
    npm_server("server-filesystem")
}

/// `@modelcontextprotocol/<name>`'s entry point, as [`filesystem_server`].
fn npm_server(name: &str) -> Option<PathBuf> {
    crate::needs::needs("npm-mcp", || {
        crate::needs::on_path("node")?;
        let entry = crate::needs::npm_prefix().join(format!(
            "node_modules/@modelcontextprotocol/{name}/dist/index.js"
        ));
        if !entry.is_file() {
            return Err(format!("{} is missing", entry.display()));
        }
        Ok(entry)
    })
}

#[test]
fn the_reference_filesystem_server_reads_and_writes_after_approval() {
    let Some(server) = filesystem_server() else {
        return;
    };
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "hello from the repo\n")]);
    let readme = repo.join("README");
    let notes = repo.join("notes.txt");
    let config = script_config(
        &env,
        &[
            call("c1", "mcp__fs__read_text_file", json!({"path": readme})),
            call(
                "c2",
                "mcp__fs__write_file",
                json!({"path": notes, "content": "written through MCP\n"}),
            ),
            answer("done"),
        ],
    );
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[mcp.servers.fs]\ncommand = [\"node\", {:?}, {:?}]\n",
        server.to_str().unwrap(),
        repo.to_str().unwrap()
    ));
    std::fs::write(&config, text).unwrap();
    let policy = env.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"allowMcp": true, "mcpTools": {"mcp__fs__*": "ask", "mcp__fs__read_text_file": "allow",
            "mcp__fs__move_file": "deny"}}"#,
    )
    .unwrap();
    let policy_s = policy.to_str().unwrap();
    let config_s = config.to_str().unwrap();

    let check = env.run(
        "kxen-agent",
        &[
            "policy", "check", "--policy", policy_s, "--config", config_s,
        ],
    );
    check.expect(0);
    let shown = check.jsonl().remove(0);
    let tools = shown["mcpServers"][0]["tools"].as_array().unwrap();
    let rule = |name: &str| {
        tools
            .iter()
            .find(|t| t["capability"] == name)
            .unwrap_or_else(|| panic!("{name} not listed: {tools:?}"))["rule"]
            .clone()
    };
    assert_eq!(shown["mcpServers"][0]["name"], "fs");
    assert_eq!(rule("mcp__fs__read_text_file"), "allow");
    assert_eq!(rule("mcp__fs__write_file"), "ask");
    assert_eq!(rule("mcp__fs__move_file"), "deny");

    let agent = agent(
        &env,
        "fs-user",
        "mcp__fs__read_text_file, mcp__fs__write_file",
        "",
        "{format: text, requiredFields: []}",
    );
    let first = run_new(&env, &repo, "t", &agent, &config, &["--policy", policy_s]);
    first.expect(7);
    let events = first.jsonl();
    let read = events
        .iter()
        .find(|e| e["type"] == "toolFinished")
        .expect("the read ran");
    assert_eq!(read["isError"], false, "{read}");
    assert!(
        read["output"]
            .as_str()
            .unwrap()
            .contains("hello from the repo")
    );
    let asked = events
        .iter()
        .find(|e| e["type"] == "runApprovalRequired")
        .expect("the write waits");
    assert!(!notes.exists(), "nothing was written before the approval");
    let session = asked["sessionId"].as_str().unwrap();
    let run = asked["runId"].as_str().unwrap();
    env.run(
        "kxen-agent",
        &[
            "run",
            "approve",
            session,
            run,
            asked["opId"].as_str().unwrap(),
        ],
    )
    .expect(0);
    let done = env.run(
        "kxen-agent",
        &[
            "--resume", session, "--config", config_s, "--policy", policy_s,
        ],
    );
    done.expect(0);
    assert_eq!(
        std::fs::read_to_string(&notes).unwrap(),
        "written through MCP\n"
    );
    let show = env.run(
        "kxen-agent",
        &["--format", "text", "session", "show", session],
    );
    assert!(
        show.stdout.contains("mcp tool mcp__fs__write_file"),
        "{}",
        show.stdout
    );
}

#[test]
fn policy_check_names_a_server_that_cannot_start() {
    let env = TestEnv::new();
    let config = script_config(&env, &[answer("done")]);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(
        "\n[mcp.servers.broken]\ncommand = [\"sh\", \"-c\", \"echo no such luck >&2; exit 3\"]\n",
    );
    std::fs::write(&config, text).unwrap();
    let check = env.run(
        "kxen-agent",
        &[
            "policy",
            "check",
            "--allow-mcp",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    check.expect(9);
    let shown = check.jsonl().remove(0);
    assert_eq!(shown["mcpServers"][0]["name"], "broken");
    assert!(
        shown["mcpServers"][0]["error"]
            .as_str()
            .unwrap()
            .contains("exited"),
        "{shown}"
    );
    assert!(
        check.stderr.contains("MCP server `broken`") && check.stderr.contains("no such luck"),
        "{}",
        check.stderr
    );
    assert!(!env.state_dir().exists(), "policy check writes nothing");
}

/// The reference "everything" server in its Streamable HTTP mode (`index.js streamableHttp`, on
/// a port the test picks): a scripted run calls two of its tools over HTTP and reads the results.
#[test]
fn the_reference_everything_server_over_streamable_http() {
    let Some(server) = npm_server("server-everything") else {
        return;
    };
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let mut child = std::process::Command::new("node")
        .arg(&server)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let start = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the server exited at start"
        );
        assert!(start.elapsed().as_secs() < 60, "the server never listened");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _server = Kill(child);
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "mcp__everything__echo",
                json!({"message": "over http"}),
            ),
            call("c2", "mcp__everything__get-sum", json!({"a": 2, "b": 3})),
            answer("done"),
        ],
    );
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[mcp.servers.everything]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"
    ));
    std::fs::write(&config, text).unwrap();
    let agent = agent(
        &env,
        "everything-user",
        "mcp__everything__echo, mcp__everything__get-sum",
        "",
        "{format: text, requiredFields: []}",
    );
    let run = run_new(&env, &repo, "t", &agent, &config, &["--allow-mcp"]);
    run.expect(0);
    let outs = crate::mcp::tool_outputs(&run);
    assert_eq!(outs[0].1, "Echo: over http", "{outs:?}");
    assert!(outs[1].1.contains("is 5"), "{outs:?}");
    assert!(!outs[0].2 && !outs[1].2, "{outs:?}");
}
