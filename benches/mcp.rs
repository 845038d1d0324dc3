//! Benchmark: MCP calls through the durable journal, and MCP server start-up.
//!
//! 1. N calls (default 1,000; `KXEN_BENCH_CALLS`) of the fixture server's `echo` tool
//!    (fixtures/mcp/server.py, official Python SDK, stdio) through a scripted run, one call per
//!    model turn, against the floor: the same N `tools/call` round trips made directly by a
//!    minimal client (raw JSON lines on the server's stdin/stdout, no journal) plus the journal's
//!    fsync floor (the durable appends the run made, on the same disk). Target: ≤ 1.3× that floor.
//! 2. Server start + handshake + `tools/list` by kxen-agent (median of `KXEN_BENCH_STARTS`,
//!    default 5) against the official Python client (`mcp.client.stdio` + `ClientSession`) doing
//!    the same for the same server, timed inside its process. Target: ≤ 1.2×.
//!
//! 3. The same N calls with the server over Streamable HTTP (`server.py --http`, SSE answers, as
//!    the SDK serves by default) against the floor of N `tools/call` POSTs made directly by a
//!    minimal client (ureq, one keep-alive agent, the session header, each answer read up to
//!    the event that carries the response, as a client does) plus the fsync floor.
//!    Target: ≤ 1.3×.
//! 4. Connect + handshake + `tools/list` to that running server, kxen-agent vs the official
//!    Python client (`mcp.client.streamable_http` + `ClientSession`), timed inside its process.
//!    Target: ≤ 1.2×.
//!
//! 5. OAuth: the same N calls to an OAuth-protected server (fixtures/mcp/oauth_http.py, its own
//!    authorization server, JSON answers) with a valid token from the token store (after one
//!    `kxen-agent mcp login`), against N direct POSTs carrying the token plus the fsync floor.
//!    Target: ≤ 1.3×. Then connect + handshake + `tools/list` with a fresh stored token and with
//!    an expired one (median of `KXEN_BENCH_STARTS`): the refresh must add one round trip (the
//!    server's log counts the requests) and about one round trip's time.
//!
//! Run: `cargo bench --bench mcp` (needs python3 with `pip install mcp`; uses `CARGO_TARGET_TMPDIR`
//! or `KXEN_BENCH_DIR`).

#![allow(clippy::disallowed_methods)] // a bench writes its own scratch files

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use kxen::policy::PolicyFlags;
use kxen::run::create::NewRunRequest;
use kxen::state::StateDir;

mod support;
use support::{env_num, fsync_floor, median};

fn main() {
    let tmp_tokens = tempfile::tempdir().unwrap();
    // SAFETY: nothing else runs yet (no thread started): the token store of section 5 is this
    // scratch directory, never the user's.
    unsafe { std::env::set_var("KXEN_TOKEN_DIR", tmp_tokens.path().join("tokens")) };
    let calls: usize = env_num("KXEN_BENCH_CALLS", 1000);
    let starts: usize = env_num("KXEN_BENCH_STARTS", 5);
    let Some(python) = python() else {
        eprintln!("mcp bench: SKIPPED, needs python3 with the MCP SDK (pip install mcp)");
        return;
    };
    let tmp = support::scratch();
    let root = tmp.path();
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/server.py");
    let argv = [python.clone(), server.to_str().unwrap().to_string()];

    let stdio_root = root.join("stdio");
    std::fs::create_dir_all(&stdio_root).unwrap();
    let (run_secs, appends, bytes) = run_agent(&stdio_root, &server_entry(&argv), calls);
    let trips_secs = raw_round_trips(&argv, calls);
    let fsync_secs = fsync_floor(root, appends, bytes / appends.max(1));
    let floor = trips_secs + fsync_secs;
    println!("mcp: {calls} calls of `echo` (Python SDK server, stdio) through a scripted run");
    println!("  disk: {}", root.display());
    println!(
        "  run:   {run_secs:.3} s total, {:.3} ms per call",
        run_secs / calls as f64 * 1e3
    );
    println!(
        "  floor: {floor:.3} s = {trips_secs:.3} s of raw round trips + {fsync_secs:.3} s fsync \
         floor ({appends} durable appends of ~{} bytes)",
        bytes / appends.max(1)
    );
    println!(
        "  ratio: {:.2}x the floor (target <= 1.30x)",
        run_secs / floor
    );

    let stdio_config = format!(
        "command = [{:?}, {:?}]\nsandbox = \"off\"\n",
        argv[0], argv[1]
    );
    let ours = median(
        (0..starts)
            .map(|_| kxen_start(root, &stdio_config))
            .collect(),
    );
    let theirs = median((0..starts).map(|_| python_start(&python, &argv)).collect());
    println!("mcp: server start + handshake + tools/list, median of {starts}");
    println!("  kxen-agent:            {:.1} ms", ours * 1e3);
    println!("  official Python client: {:.1} ms", theirs * 1e3);
    println!(
        "  ratio: {:.2}x the Python client (target <= 1.20x)",
        ours / theirs
    );

    let http = HttpServer::start(root, &python, &server);
    let url = format!("http://127.0.0.1:{}/mcp", http.port);
    let http_root = root.join("http");
    std::fs::create_dir_all(&http_root).unwrap();
    let entry = format!("[mcp.servers.fx]\nurl = {url:?}\n");
    let (run_secs, appends, bytes) = run_agent(&http_root, &entry, calls);
    let trips_secs = http_round_trips(&url, calls);
    let fsync_secs = fsync_floor(&http_root, appends, bytes / appends.max(1));
    let floor = trips_secs + fsync_secs;
    println!(
        "mcp: {calls} calls of `echo` (Python SDK server, Streamable HTTP) through a scripted run"
    );
    println!(
        "  run:   {run_secs:.3} s total, {:.3} ms per call",
        run_secs / calls as f64 * 1e3
    );
    println!(
        "  floor: {floor:.3} s = {trips_secs:.3} s of direct POSTs + {fsync_secs:.3} s fsync \
         floor ({appends} durable appends)"
    );
    println!(
        "  ratio: {:.2}x the floor (target <= 1.30x)",
        run_secs / floor
    );
    let http_config = format!("url = {url:?}\n");
    let ours = median(
        (0..starts)
            .map(|_| kxen_start(root, &http_config))
            .collect(),
    );
    let theirs = median(
        (0..starts)
            .map(|_| python_http_start(&python, &url))
            .collect(),
    );
    println!("mcp: connect + handshake + tools/list over HTTP, median of {starts}");
    println!("  kxen-agent:            {:.1} ms", ours * 1e3);
    println!("  official Python client: {:.1} ms", theirs * 1e3);
    println!(
        "  ratio: {:.2}x the Python client (target <= 1.20x)",
        ours / theirs
    );
    oauth(root, &python, calls, starts);
}

/// Section 5 of the module doc.
fn oauth(root: &Path, python: &str, calls: usize, starts: usize) {
    let dir = root.join("oauth");
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("oauth.log");
    let port_file = dir.join("port");
    let mut child = Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp/oauth_http.py"))
        .env("PORT_FILE", &port_file)
        .env("OAUTH_LOG", &log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let port: u16 = loop {
        if let Ok(text) = std::fs::read_to_string(&port_file) {
            break text.trim().parse().unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let url = format!("http://127.0.0.1:{port}/mcp");
    let entry = format!("[mcp.servers.fx]\nurl = {url:?}\n");
    let config = dir.join("login.toml");
    std::fs::write(&config, &entry).unwrap();
    let browser = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/browser.py");
    let login = Command::new(env!("CARGO_BIN_EXE_kxen-agent"))
        .args(["mcp", "login", "fx", "--config", config.to_str().unwrap()])
        .env("BROWSER", format!("{python} {}", browser.display()))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        login.status.success(),
        "{}",
        String::from_utf8_lossy(&login.stderr)
    );
    let store = std::path::PathBuf::from(std::env::var_os("KXEN_TOKEN_DIR").unwrap());
    let entry_file = std::fs::read_dir(&store)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let stored: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&entry_file).unwrap()).unwrap();
    let token = stored["accessToken"].as_str().unwrap().to_string();

    let (run_secs, appends, bytes) = run_agent(&dir, &entry, calls);
    let trips_secs = token_round_trips(&url, &token, calls);
    let fsync_secs = fsync_floor(&dir, appends, bytes / appends.max(1));
    let floor = trips_secs + fsync_secs;
    println!(
        "mcp: {calls} calls of `echo` (OAuth-protected server, a stored token) through a scripted run"
    );
    println!(
        "  run:   {run_secs:.3} s total, {:.3} ms per call",
        run_secs / calls as f64 * 1e3
    );
    println!(
        "  floor: {floor:.3} s = {trips_secs:.3} s of direct POSTs with the token + {fsync_secs:.3} s \
         fsync floor ({appends} durable appends)"
    );
    println!(
        "  ratio: {:.2}x the floor (target <= 1.30x)",
        run_secs / floor
    );

    let http_config = format!("url = {url:?}\n");
    let requests = || std::fs::read_to_string(&log).unwrap().lines().count();
    let fresh = median(
        (0..starts)
            .map(|_| kxen_start(root, &http_config))
            .collect(),
    );
    let mut extra = Vec::new();
    let expired = median(
        (0..starts)
            .map(|_| {
                // The stored token made stale (its expiry in the past): the connect refreshes it.
                let mut entry: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(&entry_file).unwrap()).unwrap();
                entry["expiresAt"] = serde_json::json!(0);
                std::fs::write(&entry_file, serde_json::to_vec(&entry).unwrap()).unwrap();
                let before = requests();
                let secs = kxen_start(root, &http_config);
                extra.push(requests() - before);
                secs
            })
            .collect(),
    );
    let (_, one_trip) = {
        let start = Instant::now();
        token_round_trips(&url, &token, 20);
        ((), start.elapsed().as_secs_f64() / 20.0)
    };
    println!("mcp: connect + handshake + tools/list to the OAuth server, median of {starts}");
    println!("  stored token valid:   {:.1} ms", fresh * 1e3);
    println!(
        "  stored token expired: {:.1} ms (requests per connect: {:?}, of which the refresh is 1; \
         the handshake and listing are 3)",
        expired * 1e3,
        extra
    );
    println!(
        "  the refresh added {:.1} ms (one POST to this server: ~{:.1} ms)",
        (expired - fresh) * 1e3,
        one_trip * 1e3
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// `calls` `tools/call` POSTs of `echo` carrying `token`, after a handshake (not timed).
fn token_round_trips(url: &str, token: &str, calls: usize) -> f64 {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    let post = |body: String| {
        agent
            .post(url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .header("Authorization", format!("Bearer {token}"))
            .send(body.as_bytes())
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap_or_default()
    };
    let init = post(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"floor","version":"1"}}}"#.into());
    assert!(init.contains("\"result\""), "{init}");
    let start = Instant::now();
    for i in 1..=calls {
        let text = post(format!(
            r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"echo {i}"}}}}}}"#
        ));
        assert!(text.contains("\"result\""), "{text}");
    }
    start.elapsed().as_secs_f64()
}

/// `server.py --http` on a free port; killed when dropped.
struct HttpServer {
    child: std::process::Child,
    port: u16,
}

impl HttpServer {
    fn start(root: &Path, python: &str, script: &Path) -> HttpServer {
        let port_file = root.join("http-port");
        let mut child = Command::new(python)
            .arg(script)
            .arg("--http")
            .env("KXEN_MCP_PORT_FILE", &port_file)
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
                "the HTTP server exited"
            );
            assert!(
                start.elapsed().as_secs() < 60,
                "the HTTP server never listened"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        HttpServer { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The floor over HTTP: a handshake (not timed), then `calls` `tools/call` POSTs of `echo` by a
/// minimal client: one keep-alive ureq agent, the session header, and of an SSE answer only the
/// lines up to the event that carries the response (as any client stops there: the SDK's server
/// keeps such a stream open a while after it, which reading it to its end would time).
fn http_round_trips(url: &str, calls: usize) -> f64 {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .into();
    let post = |body: String, session: Option<&str>| {
        let mut call = agent
            .post(url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        if let Some(s) = session {
            call = call
                .header("Mcp-Session-Id", s)
                .header("MCP-Protocol-Version", "2025-06-18");
        }
        let mut response = call.send(body.as_bytes()).unwrap();
        let session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_string());
        let sse = response
            .headers()
            .get("content-type")
            .is_some_and(|v| v.to_str().unwrap_or("").starts_with("text/event-stream"));
        let text = if sse {
            response_event(BufReader::new(response.body_mut().as_reader()))
        } else {
            response.body_mut().read_to_string().unwrap_or_default()
        };
        (session, text)
    };
    let (session, init) = post(
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"floor","version":"1"}}}"#.into(),
        None,
    );
    assert!(init.contains("\"result\""), "{init}");
    let session = session.expect("the server names a session");
    post(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}"#.into(),
        Some(&session),
    );
    let start = Instant::now();
    for i in 1..=calls {
        let (_, text) = post(
            format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"echo {i}"}}}}}}"#
            ),
            Some(&session),
        );
        assert!(text.contains("\"result\""), "{text}");
    }
    start.elapsed().as_secs_f64()
}

/// The `data:` line of the first event of an SSE stream that answers a request (a `result` or an
/// `error`); the rest of the stream is left unread. Empty if the stream ends first.
fn response_event(mut body: impl BufRead) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        if body.read_line(&mut line).unwrap_or(0) == 0 {
            return String::new();
        }
        if let Some(data) = line.strip_prefix("data:")
            && (data.contains("\"result\"") || data.contains("\"error\""))
        {
            return data.trim().to_string();
        }
    }
}

/// The official Python client's connect + initialize + list_tools over Streamable HTTP, timed
/// inside its process.
fn python_http_start(python: &str, url: &str) -> f64 {
    let script = r#"
import sys, time, anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main():
    start = time.perf_counter()
    async with streamable_http_client(sys.argv[1]) as streams:
        async with ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            tools = await session.list_tools()
            elapsed = time.perf_counter() - start
            assert any(t.name == "echo" for t in tools.tools)
    print(elapsed)

anyio.run(main)
"#;
    let out = Command::new(python)
        .args(["-c", script, url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .lines()
        .last()
        .unwrap()
        .parse()
        .unwrap()
}

fn python() -> Option<String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import mcp.server.mcpserver, sys; print(sys.executable)",
        ])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn server_entry(argv: &[String]) -> String {
    format!(
        "[mcp.servers.fx]\ncommand = [{:?}, {:?}]\nsandbox = \"off\"\n",
        argv[0], argv[1]
    )
}

/// Creates a Session granted `mcp__fx__echo` of server table `entry` and runs `calls` calls;
/// (seconds, appends, bytes).
fn run_agent(root: &Path, entry: &str, calls: usize) -> (f64, usize, usize) {
    let repo = support::repo(root);
    let agent = support::agent(root, "mcp__fx__echo", 1024);
    let turns = support::turns(calls, "mcp__fx__echo", |i| {
        format!(r#"{{"text":"echo {i}"}}"#)
    });
    let config = support::script_config(root, &turns, entry);
    let state = StateDir::at(root.join("state"));
    let request = NewRunRequest {
        output_schema: None,
        workspace: repo,
        task: "echo many times".into(),
        agent: Some(agent),
        policy: PolicyFlags {
            allow_mcp: true,
            ..PolicyFlags::default()
        },
        config: Some(config),
        plan_dir: None,
    };
    let prepared = support::session(&state, &request);
    // The server is already running (it was started and listed at creation), so the timer
    // measures calls, as the floor does.
    let secs = support::run_to_end(&prepared);
    let (paths, run_id) = (prepared.paths.clone(), prepared.run_id.clone());
    drop(prepared);
    let journal = std::fs::read_to_string(paths.run(&run_id).journal()).unwrap();
    let messages = std::fs::read_to_string(paths.messages()).unwrap();
    assert_eq!(journal.lines().count(), calls * 3);
    assert!(messages.contains("echo 999") || calls < 1000);
    let appends = journal.lines().count() + messages.lines().count() - 1;
    (secs, appends, journal.len() + messages.len())
}

/// The floor of the protocol itself: `calls` `tools/call` round trips of `echo` written and read
/// as raw JSON lines, after a handshake (not timed).
fn raw_round_trips(argv: &[String], calls: usize) -> f64 {
    let mut child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut request = |stdin: &mut std::process::ChildStdin, msg: String, wait: bool| {
        stdin.write_all(msg.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
        if wait {
            line.clear();
            stdout.read_line(&mut line).unwrap();
            assert!(line.contains("\"result\""), "{line}");
        }
    };
    request(
        &mut stdin,
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"floor","version":"1"}}}"#.into(),
        true,
    );
    request(
        &mut stdin,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized","params":{}}"#.into(),
        false,
    );
    let start = Instant::now();
    for i in 1..=calls {
        request(
            &mut stdin,
            format!(
                r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"echo {i}"}}}}}}"#
            ),
            true,
        );
    }
    let secs = start.elapsed().as_secs_f64();
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    secs
}

/// kxen-agent's start of the server of entry `config`: spawn (environment filter, process
/// group) or connect, handshake, `tools/list`.
fn kxen_start(root: &Path, config: &str) -> f64 {
    let config: kxen::mcp::ServerConfig = toml::from_str(config).unwrap();
    let servers = kxen::mcp::Servers::new(
        [("fx".to_string(), config)].into_iter().collect(),
        &kxen::policy::MergedPolicy::default(),
        kxen::mcp::servers::ServerHomes {
            root: root.join("mcp-home"),
            once_exists: root.to_path_buf(),
        },
        kxen::sandbox::RunFence::new(Default::default(), root, None, None),
    );
    let start = Instant::now();
    let tools = servers.list_tools("fx").unwrap();
    let secs = start.elapsed().as_secs_f64();
    assert!(tools.iter().any(|t| t["name"] == "echo"));
    secs
}

/// The official Python client's start of the same server, timed inside its process (its own
/// interpreter start-up is not counted, as ours is not).
fn python_start(python: &str, argv: &[String]) -> f64 {
    let script = r#"
import sys, time, anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main():
    params = StdioServerParameters(command=sys.argv[1], args=[sys.argv[2]])
    start = time.perf_counter()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            elapsed = time.perf_counter() - start
            assert any(t.name == "echo" for t in tools.tools)
    print(elapsed)

anyio.run(main)
"#;
    let out = Command::new(python)
        .args(["-c", script, &argv[0], &argv[1]])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .lines()
        .last()
        .unwrap()
        .parse()
        .unwrap()
}
