//! `kxen-agent mcp login|logout|status` and the token store, against an OAuth-protected MCP
//! server that is its own authorization server (fixtures/mcp/oauth_http.py): login → run →
//! expiry → silent refresh → logout from the CLI, the store's modes, canary tokens, hostile
//! token endpoints and a killed login.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::env::{Run, TestEnv};
use crate::mcp::{config, ids, python, text_agent, tool_outputs};
use crate::run_support::*;

/// fixtures/mcp/oauth_http.py in `mode`; killed when dropped.
struct OAuthServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl OAuthServer {
    fn start(env: &TestEnv, py: &str, mode: &str) -> OAuthServer {
        let port_file = env.path().join(format!("oauth-port-{mode}"));
        let log = env.path().join(format!("oauth-{mode}.log"));
        let child = Command::new(py)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/oauth_http.py"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("PORT_FILE", &port_file)
            .env("OAUTH_LOG", &log)
            .env("OAUTH_MODE", mode)
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
            assert!(start.elapsed() < Duration::from_secs(20), "never listened");
            std::thread::sleep(Duration::from_millis(20));
        };
        OAuthServer { child, port, log }
    }

    fn entry(&self, timeout_ms: u64) -> String {
        format!(
            "[mcp.servers.fx]\nurl = \"http://127.0.0.1:{}/mcp\"\ntimeout_ms = {timeout_ms}\n",
            self.port
        )
    }

    fn log(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

impl Drop for OAuthServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A browser that approves at once (follows the redirects to kxen-agent's loopback listener).
fn browser() -> String {
    format!(
        "python3 {}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/conformance/browser.py")
            .display()
    )
}

/// The token store of `env` (`$XDG_STATE_HOME/kxen-agent-mcp-tokens`).
fn store_dir(env: &TestEnv) -> PathBuf {
    env.path().join("xdg-state/kxen-agent-mcp-tokens")
}

fn store_files(env: &TestEnv) -> Vec<PathBuf> {
    match std::fs::read_dir(store_dir(env)) {
        Err(_) => Vec::new(),
        Ok(dir) => dir.map(|e| e.unwrap().path()).collect(),
    }
}

/// The one stored entry.
fn stored(env: &TestEnv) -> Value {
    let files = store_files(env);
    assert_eq!(files.len(), 1, "{files:?}");
    serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap()
}

fn mcp(env: &TestEnv, args: &[&str], browser_cmd: Option<&str>) -> Run {
    let mut cmd = env.cmd("kxen-agent");
    cmd.arg("mcp").args(args).stdin(Stdio::null());
    if let Some(b) = browser_cmd {
        cmd.env("BROWSER", b);
    }
    Run::from(cmd.output().unwrap())
}

/// `run` without a person at hand (no BROWSER, stdin not a terminal), the clock moved by
/// `skew_ms`. The store is named by `KXEN_TOKEN_DIR` here (the same directory `mcp` finds by
/// `XDG_STATE_HOME`), which no tool may see.
fn run(env: &TestEnv, args: &[&str], skew_ms: i64) -> Run {
    let mut cmd = env.cmd("kxen-agent");
    cmd.args(args)
        .stdin(Stdio::null())
        .env("KXEN_TOKEN_DIR", store_dir(env))
        .env("KXEN_TEST_CLOCK_SKEW_MS", skew_ms.to_string());
    Run::from(cmd.output().unwrap())
}

fn assert_nowhere(env: &TestEnv, canaries: &[String], outputs: &[&Run]) {
    for file in files_under(&env.state_dir()) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).unwrap()).into_owned();
        for c in canaries {
            assert!(
                !text.contains(c.as_str()),
                "a token is in {}",
                file.display()
            );
        }
    }
    for out in outputs {
        for c in canaries {
            assert!(!out.stdout.contains(c.as_str()) && !out.stderr.contains(c.as_str()));
        }
    }
}

#[test]
fn login_run_refresh_and_logout_from_the_cli() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let server = OAuthServer::start(&env, &py, "");
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let turns = [
        call("c1", "mcp__fx__whoami", json!({})),
        call(
            "c2",
            "exec",
            json!({"command": "env | grep -c kxen-canary; env | grep -c KXEN_TOKEN_DIR"}),
        ),
        answer("done"),
        call("c3", "mcp__fx__whoami", json!({})),
        answer("done again"),
        call("c4", "mcp__fx__whoami", json!({})),
        answer("done thrice"),
    ];
    let cfg = config(&env, &turns, &server.entry(10_000));
    let agent = text_agent(&env, "mcp__fx__whoami, exec", "");
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

    // No token and nobody at hand: exit 9 at Session creation, naming `mcp login`.
    let before = run(&env, &new_run, 0);
    before.expect(9);
    assert!(
        before.stderr.contains("kxen-agent mcp login fx"),
        "{}",
        before.stderr
    );
    assert!(!env.state_dir().exists());
    assert!(store_files(&env).is_empty());

    // Login: the browser approves; the tokens are stored 0600 in a 0700 directory.
    let login = mcp(
        &env,
        &["login", "fx", "--config", cfg.to_str().unwrap()],
        Some(&browser()),
    );
    login.expect(0);
    let line = &login.jsonl()[0];
    assert_eq!(line["type"], "mcpLogin");
    assert_eq!(line["server"]["stored"], true);
    assert_eq!(line["server"]["refreshable"], true);
    assert_eq!(line["server"]["scope"], "notes:read offline_access");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&store_dir(&env)), 0o700);
    assert_eq!(mode(&store_files(&env)[0]), 0o600);
    let first = stored(&env);
    let mut canaries = vec![
        first["accessToken"].as_str().unwrap().to_string(),
        first["refreshToken"].as_str().unwrap().to_string(),
    ];
    assert!(canaries[0].starts_with("kxen-canary-at-1-"));
    assert!(!login.stdout.contains("kxen-canary") && !login.stderr.contains("kxen-canary"));
    let log = server.log();
    assert!(
        log.contains(&"register grant_types=authorization_code,refresh_token".to_string()),
        "{log:?}"
    );

    // A run with nobody at hand sends the stored token: no authorization, no token request.
    let first_run = run(&env, &new_run, 0);
    first_run.expect(0);
    let outs = tool_outputs(&first_run);
    assert_eq!(outs[0].1, "called with token number 1");
    assert!(
        outs[1].1.starts_with("0\n0\n"),
        "exec sees a token or the store: {}",
        outs[1].1
    );
    let tokens_before = server
        .log()
        .iter()
        .filter(|l| l.starts_with("token "))
        .count();
    assert_eq!(tokens_before, 1, "{:?}", server.log());

    // Two hours later the token has expired: it is refreshed silently (one round trip) and
    // the new tokens are stored.
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
    let later = run(&env, &resume, 2 * 3600 * 1000);
    later.expect(0);
    assert_eq!(tool_outputs(&later)[0].1, "called with token number 2");
    let log = server.log();
    let token_lines: Vec<&String> = log.iter().filter(|l| l.starts_with("token ")).collect();
    assert_eq!(
        token_lines,
        ["token authorization_code", "token refresh_token"],
        "{log:?}"
    );
    assert_eq!(log.iter().filter(|l| l.starts_with("authorize")).count(), 1);
    let second = stored(&env);
    assert_ne!(second["accessToken"], first["accessToken"]);
    assert_ne!(second["refreshToken"], first["refreshToken"], "rotated");
    canaries.push(second["accessToken"].as_str().unwrap().to_string());
    canaries.push(second["refreshToken"].as_str().unwrap().to_string());

    // Status shows scopes, expiry and refreshability, never a token.
    let status = mcp(&env, &["status", "--config", cfg.to_str().unwrap()], None);
    status.expect(0);
    let line = &status.jsonl()[0];
    assert_eq!(line["type"], "mcpToken");
    assert_eq!(line["name"], "fx");
    assert_eq!(line["stored"], true);
    assert_eq!(line["refreshable"], true);
    assert!(line["expiresAt"].is_string());

    // No token anywhere: the state dir, the outputs, an exported bundle.
    let bundle = env.path().join("ses.bundle.json");
    let export = env.run(
        "kxen-agent",
        &[
            "session",
            "export",
            &id,
            "--output",
            bundle.to_str().unwrap(),
        ],
    );
    export.expect(0);
    let bundle_text = std::fs::read_to_string(&bundle).unwrap();
    for c in &canaries {
        assert!(
            !bundle_text.contains(c.as_str()),
            "a token is in the bundle"
        );
    }
    assert_nowhere(
        &env,
        &canaries,
        &[&login, &first_run, &later, &status, &export],
    );

    // Logout deletes the entry, and says when there was none.
    let out = mcp(
        &env,
        &["logout", "fx", "--config", cfg.to_str().unwrap()],
        None,
    );
    out.expect(0);
    assert_eq!(out.jsonl()[0]["removed"], true);
    assert!(store_files(&env).is_empty());
    let again = mcp(
        &env,
        &[
            "--format",
            "text",
            "logout",
            "fx",
            "--config",
            cfg.to_str().unwrap(),
        ],
        None,
    );
    // `--format` is global: it may come after the subcommand too.
    again.expect(0);
    assert!(
        again.stdout.contains("no stored tokens"),
        "{}",
        again.stdout
    );
    let status = mcp(&env, &["status", "--config", cfg.to_str().unwrap()], None);
    assert_eq!(status.jsonl()[0]["stored"], false);
    // Logged out and nobody at hand: the next connect is exit 9 naming `mcp login`.
    let after = run(&env, &resume, 0);
    after.expect(9);
    assert!(
        after.stderr.contains("kxen-agent mcp login fx"),
        "{}",
        after.stderr
    );
}

/// A refused refresh with nobody at hand is exit 9 naming `mcp login`; a damaged or
/// too widely readable entry is refused (exit 4) naming the file and `mcp logout`.
#[test]
fn a_refused_refresh_or_a_bad_store_entry_is_one_clear_error() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let server = OAuthServer::start(&env, &py, "refuse_refresh");
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let cfg = config(
        &env,
        &[call("c1", "mcp__fx__whoami", json!({})), answer("done")],
        &server.entry(10_000),
    );
    let agent = text_agent(&env, "mcp__fx__whoami", "");
    let args = [
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
    mcp(
        &env,
        &["login", "fx", "--config", cfg.to_str().unwrap()],
        Some(&browser()),
    )
    .expect(0);
    let expired = run(&env, &args, 2 * 3600 * 1000);
    expired.expect(9);
    assert!(
        expired.stderr.contains("kxen-agent mcp login fx"),
        "{}",
        expired.stderr
    );
    assert!(server.log().contains(&"token refresh_token".to_string()));
    assert!(!env.state_dir().exists());

    let file = store_files(&env).remove(0);
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let wide = run(&env, &args, 0);
    wide.expect(4);
    assert!(
        wide.stderr.contains(file.to_str().unwrap())
            && wide.stderr.contains("mode 644")
            && wide.stderr.contains("kxen-agent mcp logout fx"),
        "{}",
        wide.stderr
    );
    let status = mcp(&env, &["status", "--config", cfg.to_str().unwrap()], None);
    status.expect(4);
    std::fs::write(&file, "{\"version\": 1").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let damaged = run(&env, &args, 0);
    damaged.expect(4);
    assert!(damaged.stderr.contains("damaged"), "{}", damaged.stderr);
    mcp(
        &env,
        &["logout", "fx", "--config", cfg.to_str().unwrap()],
        None,
    )
    .expect(0);
    assert!(store_files(&env).is_empty());
}

/// A token endpoint that never answers, or redirects to another origin, during `mcp login`:
/// one clear error each (exit 9) and nothing stored.
#[test]
fn a_hostile_token_endpoint_during_login_stores_nothing() {
    let Some(py) = python() else { return };
    for (mode, why) in [
        ("token_hang", "the token request to"),
        ("token_redirect", "redirects to http://127.0.0.2:9/token"),
    ] {
        let env = TestEnv::new();
        let server = OAuthServer::start(&env, &py, mode);
        let cfg = config(&env, &[answer("done")], &server.entry(3000));
        let started = Instant::now();
        let login = mcp(
            &env,
            &["login", "fx", "--config", cfg.to_str().unwrap()],
            Some(&browser()),
        );
        login.expect(9);
        assert!(started.elapsed() < Duration::from_secs(20), "{mode}");
        assert!(
            login.stderr.contains("OAuth authorization failed") && login.stderr.contains(why),
            "{mode}: {}",
            login.stderr
        );
        assert_eq!(
            login.stderr.matches("error:").count(),
            1,
            "{mode}: {}",
            login.stderr
        );
        assert!(
            store_files(&env).is_empty(),
            "{mode}: {:?}",
            store_files(&env)
        );
    }
}

/// kill -9 while `mcp login` waits for the person leaves no store file, whole or half.
#[test]
fn a_killed_login_leaves_no_store_file() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let server = OAuthServer::start(&env, &py, "");
    let cfg = config(&env, &[answer("done")], &server.entry(3000));
    // A browser that opens nothing: the login waits for an approval that never comes.
    let mut child = env
        .cmd("kxen-agent")
        .args(["mcp", "login", "fx", "--config", cfg.to_str().unwrap()])
        .env("BROWSER", "true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !server.log().iter().any(|l| l.starts_with("register")) {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{:?}",
            server.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(store_files(&env).is_empty(), "{:?}", store_files(&env));
}

/// Two processes that find the same expired token at once refresh it once: the second waits
/// for the store's lock and uses the tokens the first stored (a rotating refresh token used
/// twice would be refused).
#[test]
fn concurrent_connects_refresh_an_expired_token_once() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let server = OAuthServer::start(&env, &py, "");
    let cfg = config(&env, &[answer("done")], &server.entry(10_000));
    mcp(
        &env,
        &["login", "fx", "--config", cfg.to_str().unwrap()],
        Some(&browser()),
    )
    .expect(0);
    let check = || {
        env.cmd("kxen-agent")
            .args([
                "policy",
                "check",
                "--allow-mcp",
                "--config",
                cfg.to_str().unwrap(),
            ])
            .stdin(Stdio::null())
            .env("KXEN_TEST_CLOCK_SKEW_MS", (2 * 3600 * 1000).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (check(), check());
    for child in [a, b] {
        let out = Run::from(child.wait_with_output().unwrap());
        out.expect(0);
        assert!(out.stdout.contains("mcp__fx__whoami"), "{}", out.stdout);
    }
    let log = server.log();
    let refreshes = log.iter().filter(|l| *l == "token refresh_token").count();
    assert_eq!(refreshes, 1, "{log:?}");
    let authorizations = log.iter().filter(|l| l.starts_with("authorize")).count();
    assert_eq!(authorizations, 1, "only the login's: {log:?}");
}

/// A second `mcp login` reuses the client the first one registered; once the stored entry
/// names another authorization server than the one the server now points to, the old client
/// is not sent there: kxen-agent registers anew.
#[test]
fn a_stored_registration_is_reused_only_with_the_server_that_issued_it() {
    let Some(py) = python() else { return };
    let env = TestEnv::new();
    let server = OAuthServer::start(&env, &py, "");
    let cfg = config(&env, &[answer("done")], &server.entry(10_000));
    let login = || {
        mcp(
            &env,
            &["login", "fx", "--config", cfg.to_str().unwrap()],
            Some(&browser()),
        )
    };
    let registrations = || {
        server
            .log()
            .iter()
            .filter(|l| l.starts_with("register"))
            .count()
    };
    login().expect(0);
    assert_eq!(registrations(), 1);
    login().expect(0);
    assert_eq!(registrations(), 1, "the same server: its client is reused");
    // The entry now says another server issued its client.
    let path = store_files(&env).remove(0);
    let mut entry = stored(&env);
    entry["issuer"] = json!("https://other-issuer.example");
    std::fs::write(&path, serde_json::to_vec(&entry).unwrap()).unwrap();
    login().expect(0);
    assert_eq!(
        registrations(),
        2,
        "another issuer's client is never reused"
    );
}
