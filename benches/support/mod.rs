//! What the benches that time a run share: a scratch directory, a git repository, the bench
//! agent, a script of tool-call turns, a Session created and executed through the library as
//! `kxen-agent run` does it, and the fsync floor the runs are held against.

#![allow(dead_code)] // each bench uses its part

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use kxen::run::Prepared;
use kxen::run::agent_loop::{self, Ending};
use kxen::run::create::{self, NewRunRequest};
use kxen::run::events::Discard;
use kxen::state::StateDir;

/// A fresh directory under `KXEN_BENCH_DIR` (default: cargo's target tmpdir), removed at the end.
pub fn scratch() -> tempfile::TempDir {
    let base = std::env::var_os("KXEN_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
    std::fs::create_dir_all(&base).unwrap();
    tempfile::tempdir_in(&base).unwrap()
}

/// The number in environment variable `name`, or `default`.
pub fn env_num(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// `git ARGS` in `dir`, without the user's config; it must succeed.
pub fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.invalid")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.invalid")
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?} failed");
}

/// `root/repo`: a git repository with `a.txt` committed.
pub fn repo(root: &Path) -> PathBuf {
    repo_with(root, "alpha\n")
}

/// `root/repo`: a git repository with `a.txt` (holding `text`) committed.
pub fn repo_with(root: &Path, text: &str) -> PathBuf {
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("a.txt"), text).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "bench"]);
    repo
}

/// `root/agent.yaml`: an agent that requires `capability`, with `max_turns` turns and no limit
/// on repeated calls.
pub fn agent(root: &Path, capability: &str, max_turns: usize) -> PathBuf {
    let path = root.join("agent.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {{name: bench}}\nspec:\n  \
             objective: Call the tool many times.\n  instructions: [Call it.]\n  successCriteria: []\n  \
             capabilities: {{required: [{capability}], optional: []}}\n  execution: {{maxTurns: {max_turns}, maxRepeatedCalls: 0}}\n  \
             output: {{format: text, requiredFields: []}}\n"
        ),
    )
    .unwrap();
    path
}

/// Script turns: call `i` of `calls` is `tool` with the JSON object `arguments(i)`, one call a
/// turn, then the answer `done`.
pub fn turns(calls: usize, tool: &str, arguments: impl Fn(usize) -> String) -> String {
    let mut script = String::new();
    for i in 0..calls {
        script.push_str(&format!(
            "{{\"text\":\"\",\"toolCalls\":[{{\"id\":\"call_{i}\",\"name\":\"{tool}\",\"arguments\":{}}}],\"usage\":{{\"inputTokens\":1,\"outputTokens\":1}}}}\n",
            arguments(i)
        ));
    }
    script.push_str("{\"text\":\"done\"}\n");
    script
}

/// `root/config.toml`: the script provider replaying `turns` (written to `root/turns.jsonl`) as
/// the execution role, then the TOML `extra` (server tables).
pub fn script_config(root: &Path, turns: &str, extra: &str) -> PathBuf {
    std::fs::write(root.join("turns.jsonl"), turns).unwrap();
    let config = root.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.s]\nkind = \"script\"\npath = \"turns.jsonl\"\n[roles]\nexecution = \"s\"\n\n{extra}"
        ),
    )
    .unwrap();
    config
}

/// A new Session for `request` (its MCP tools granted when the policy allows MCP), written and
/// ready to execute its first run.
pub fn session(state: &StateDir, request: &NewRunRequest) -> Prepared {
    let mut draft = create::prepare(state, request).unwrap();
    create::grant_mcp(&mut draft, state).unwrap();
    create::create(state, draft).unwrap().0
}

/// Executes the prepared run, which must complete; the seconds it took.
pub fn run_to_end(prepared: &Prepared) -> f64 {
    let cancel = AtomicBool::new(false);
    let execution = prepared.execution(&cancel);
    let start = Instant::now();
    let ending = agent_loop::execute(&execution, &prepared.run_id, &mut Discard).unwrap();
    let secs = start.elapsed().as_secs_f64();
    match ending {
        Ending::Finished(result) => assert_eq!(result.status.name(), "completed"),
        other => panic!("bench run did not finish: {other:?}"),
    }
    secs
}

/// Seconds for `appends` durable appends of `line_len`-byte lines to one file under `root` (on
/// the same disk as the run's state).
pub fn fsync_floor(root: &Path, appends: usize, line_len: usize) -> f64 {
    let path = root.join("floor.jsonl");
    let line = format!("{{\"x\":\"{}\"}}", "a".repeat(line_len.saturating_sub(9)));
    let start = Instant::now();
    for _ in 0..appends {
        kxen::fsx::append_line(&path, &line).unwrap();
    }
    start.elapsed().as_secs_f64()
}

/// The body of the next request on a keep-alive HTTP/1.1 connection (the fake model servers'
/// read: request line, headers up to the blank line, `Content-Length` bytes); `None` once the
/// client is gone.
pub fn read_request(reader: &mut impl BufRead) -> Option<Vec<u8>> {
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
            break;
        }
        if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some(body)
}

/// User + sys CPU of this process so far (every thread), in seconds.
pub fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes the struct it is given; RUSAGE_SELF is always valid.
    #[allow(unsafe_code)]
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// `root/config.toml`: an `openai` provider `o` at `url` (model `m`, then the TOML lines
/// `extra`) as the execution role.
pub fn openai_config(root: &Path, url: &str, extra: &str) -> PathBuf {
    let config = root.join("config.toml");
    std::fs::write(
        &config,
        format!("[providers.o]\nkind = \"openai\"\nbase_url = \"{url}\"\nmodel = \"m\"\n{extra}[roles]\nexecution = \"o\"\n"),
    )
    .unwrap();
    config
}

/// This bench binary run again with `var=value` as a fake model server in its own process (its
/// CPU is not the client's); the server prints its port on its first line. Returns the child
/// and the server's `http://127.0.0.1:PORT/v1`. The server dies with the bench (a bench that
/// panics does not leave it holding the terminal's pipe open).
pub fn server_process(var: &str, value: &str) -> (Child, String) {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.env(var, value).stdout(Stdio::piped());
    // SAFETY: prctl is async-signal-safe and touches only the child's own attributes.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let mut server = command.spawn().unwrap();
    let mut port = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut port)
        .unwrap();
    (server, format!("http://127.0.0.1:{}/v1", port.trim()))
}
