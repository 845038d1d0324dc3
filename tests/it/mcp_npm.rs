//! MCP against a reference server from the npm registry: `@modelcontextprotocol/server-filesystem`
//! (installed by `.ci/run` into `$HOME/.cache/kxen-ci/npm`, or `$KXEN_NPM_PREFIX`). This is the
//! README's example config, run as a user would: `policy check --config` lists its tools with their
//! rules, a read is allowed, a write waits for approval and then runs once.

use std::path::PathBuf;

use serde_json::json;

use crate::env::TestEnv;
use crate::run_support::*;

/// The server's entry point, or `None` (with a loud message) when node is not installed. With
/// node present, a missing server is a failure: `.ci/run` installs it.
fn filesystem_server() -> Option<PathBuf> {
    let node = std::process::Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        eprintln!("\n*** SKIPPED: the npm MCP server test needs node (`apt-get install nodejs`)");
        return None;
    }
    let prefix = std::env::var_os("KXEN_NPM_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/kxen-ci/npm")
        });
    let entry = prefix.join("node_modules/@modelcontextprotocol/server-filesystem/dist/index.js");
    assert!(
        entry.is_file(),
        "{} is missing: install it with `npm install --prefix {} @modelcontextprotocol/server-filesystem` (.ci/run does)",
        entry.display(),
        prefix.display()
    );
    Some(entry)
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
