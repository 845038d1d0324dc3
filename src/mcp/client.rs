//! A blocking MCP client over stdio: newline-delimited JSON-RPC 2.0 to a child process.
//!
//! Why not the official Rust SDK (`rmcp`): it is async (tokio), and the rest of the runtime is
//! blocking and single-threaded on purpose (a tool call runs on the thread that spawned its
//! process, so `PR_SET_PDEATHSIG` kills it with us). The stdio transport is small — one line
//! per message, four methods (`initialize`, `notifications/initialized`, `tools/list`,
//! `tools/call`), `notifications/cancelled`, and the server's own requests answered at once
//! ([`super::inbound`]) — and a hand-written client keeps every
//! failure mapped to our error kinds and the journal's outcome classes. Tested against the
//! official Python SDK's server (fixtures/mcp/).
//!
//! The server runs as the leader of its own process group; [`Client`]'s drop SIGKILLs the
//! group, so no server outlives its runtime (nor, through `PR_SET_PDEATHSIG`, a SIGKILLed one).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::error::Error;
use crate::process;

/// The protocol version we ask for (the newest); a server may answer with another one we also
/// speak.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// Versions whose stdio transport and tool methods are what this client implements.
pub const SUPPORTED_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
/// After a `notifications/cancelled`, how long the server gets to answer before it is killed.
pub const CLEANUP_WINDOW: Duration = Duration::from_secs(2);
/// The largest message line accepted from a server (the model sees at most 64 KiB anyway).
const MAX_LINE: usize = 16 * 1024 * 1024;
/// How many answers and server requests the reader thread holds before it stops reading (the
/// server then blocks on its stdout). Notifications are never queued: nothing uses them, and a
/// server writing them while no request waits would otherwise grow our memory without bound.
const QUEUE: usize = 4;
/// Requests are written in pieces of this size, so a stalled write says how much got through.
const WRITE_CHUNK: usize = 64 * 1024;
/// How much of the server's stderr is kept for error messages.
const STDERR_TAIL: usize = 2048;
const POLL: Duration = Duration::from_millis(50);
/// After the server closed a pipe, how long we wait for its exit status to be reapable.
const EXIT_WAIT: Duration = Duration::from_secs(2);
/// After that, how long we wait for the rest of its stderr (its EOF).
const STDERR_DRAIN: Duration = Duration::from_secs(1);

/// How the server process is started.
pub struct Spawn<'a> {
    pub server: &'a str,
    pub argv: &'a [String],
    pub cwd: &'a std::path::Path,
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    pub timeout: Duration,
    /// The server entry's own fence policy: writable, under `workspaceWrite`, are the
    /// workspace, `home` and `tmp`, never a protected directory of `run_fence`.
    pub fence: crate::sandbox::FencePolicy,
    /// The run's fence, which starts the server.
    pub run_fence: &'a crate::sandbox::RunFence,
    pub home: &'a std::path::Path,
    /// The server's own `TMPDIR` (in `env`), removed when the server is gone.
    pub tmp: tempfile::TempDir,
    /// How the server's own requests are answered (and what we declare in `initialize`).
    pub answerer: super::inbound::Answerer,
}

/// Why a request got no result. Whether the request may have acted is the caller's question:
/// everything but [`Failure::Rpc`] and [`Failure::NotSent`] leaves a `tools/call` UNKNOWN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The request was never written (the server was already gone).
    NotSent(String),
    /// The server answered with a JSON-RPC error.
    Rpc(String),
    /// The server exited, closed stdout or wrote something that is not JSON-RPC.
    Broken(String),
    /// No answer within the timeout (the server was killed).
    Timeout(Duration),
    /// Canceled; the server did not answer within the cleanup window and was killed.
    Canceled,
    /// The server stopped reading its stdin while part of the request was written (it was
    /// killed): it may have read the whole request.
    Stalled(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::NotSent(why)
            | Failure::Rpc(why)
            | Failure::Broken(why)
            | Failure::Stalled(why) => f.write_str(why),
            Failure::Timeout(t) => write!(f, "no answer within {} ms", t.as_millis()),
            Failure::Canceled => f.write_str("canceled, and the server did not answer in time"),
        }
    }
}

enum Incoming {
    Message(Value),
    Garbage(String),
    Eof,
}

/// The writing end of the server's stdin: a thread that writes each line it is given (in
/// [`WRITE_CHUNK`] pieces, counting the bytes that got through) and acknowledges it, so a
/// server that stops reading blocks that thread, never the run: the caller waits for the
/// acknowledgement with its deadline and cancel flag.
///
/// The pipe is non-blocking and the thread waits for it with `poll(2)` in short slices, checking
/// `stop`: dropping the [`Writer`] ends the thread (and closes the pipe) within one slice even
/// when a process the server started — outside its process group, so not killed with it —
/// still holds the reading end open and never reads. Shutdown never waits on such a process.
struct Writer {
    lines: Sender<Vec<u8>>,
    acks: Receiver<std::io::Result<()>>,
    /// Bytes of the line in flight written so far (reset before each line).
    progress: Arc<AtomicUsize>,
    /// Set on drop: the thread gives up the line in flight and ends.
    stop: Arc<AtomicBool>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Why a line was not (entirely) written.
enum WriteFailure {
    /// The pipe is closed (the server exited) or the writer is gone.
    Closed(String),
    /// The deadline passed, or the run was canceled, before the line was written; `written`
    /// bytes of `total` got through.
    Stalled {
        written: usize,
        total: usize,
        canceled: bool,
    },
}

impl Writer {
    fn start(mut stdin: ChildStdin) -> Writer {
        let (lines, rx) = mpsc::channel::<Vec<u8>>();
        let (ack_tx, acks) = mpsc::channel();
        let progress = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let counted = Arc::clone(&progress);
        let stopped = Arc::clone(&stop);
        let nonblocking = set_nonblocking(&stdin);
        std::thread::spawn(move || {
            for line in rx {
                let mut result = Ok(());
                for chunk in line.chunks(WRITE_CHUNK) {
                    result = if nonblocking {
                        write_polling(&mut stdin, chunk, &stopped, &counted)
                    } else {
                        stdin.write_all(chunk).map(|()| {
                            counted.fetch_add(chunk.len(), Ordering::SeqCst);
                        })
                    };
                    if result.is_err() {
                        break;
                    }
                }
                let failed = result.is_err();
                if ack_tx.send(result).is_err() || failed {
                    return; // dropping stdin closes the pipe
                }
            }
        });
        Writer {
            lines,
            acks,
            progress,
            stop,
        }
    }

    /// Writes `line`, waiting at most until `until` (and, once `cancel` is set, at most
    /// [`CLEANUP_WINDOW`] more, but never past `until`).
    fn write(
        &self,
        line: Vec<u8>,
        until: Instant,
        cancel: Option<&AtomicBool>,
    ) -> Result<(), WriteFailure> {
        let total = line.len();
        self.progress.store(0, Ordering::SeqCst);
        if self.lines.send(line).is_err() {
            return Err(WriteFailure::Closed("its stdin is closed".into()));
        }
        let mut until = until;
        let mut canceled = false;
        loop {
            let now = Instant::now();
            if !canceled && cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
                canceled = true;
                until = until.min(now + CLEANUP_WINDOW);
            }
            if now >= until {
                return Err(WriteFailure::Stalled {
                    written: self.progress.load(Ordering::SeqCst),
                    total,
                    canceled,
                });
            }
            match self.acks.recv_timeout((until - now).min(POLL)) {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => return Err(WriteFailure::Closed(e.to_string())),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(WriteFailure::Closed("its stdin is closed".into()));
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

/// One running server after a successful handshake.
pub struct Client {
    server: String,
    child: Child,
    stdin: Option<Writer>,
    rx: Receiver<Incoming>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The thread collecting `stderr`; finished once the server's stderr is closed.
    stderr_reader: std::thread::JoinHandle<()>,
    next_id: u64,
    timeout: Duration,
    /// The protocol version the server chose.
    pub protocol_version: String,
    /// `serverInfo` as the server sent it.
    pub server_info: Value,
    /// Set once the server broke: every later request fails fast.
    dead: Option<String>,
    /// Whether the server declared the `tools` capability (without it, its listing is empty).
    has_tools: bool,
    answerer: super::inbound::Answerer,
    /// What the server asked of us (elicitations) since the last `tools/call` began.
    exchanges: Vec<String>,
    /// The server's `TMPDIR`; dropped (removed) after the server is killed.
    _tmp: tempfile::TempDir,
}

impl Client {
    /// Starts the server and performs the handshake (`initialize`, `notifications/initialized`).
    pub fn start(spec: Spawn) -> Result<Client, Error> {
        let mut cmd = Command::new(&spec.argv[0]);
        cmd.args(&spec.argv[1..])
            .current_dir(spec.cwd)
            .env_clear()
            .envs(spec.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let launch = crate::sandbox::Launch {
            policy: spec.fence,
            home: spec.home,
            tmp: spec.tmp.path(),
        };
        let mut child = match spec.run_fence.spawn(launch, cmd) {
            Ok(spawned) => spawned.child,
            Err(crate::sandbox::SpawnError::Refused(refusal)) => {
                return Err(Error::external(refusal.message_for(
                    &format!("MCP server `{}`", spec.server),
                    spec.fence,
                    &format!(
                        "sandbox = \"off\" in its [mcp.servers.{}] entry",
                        spec.server
                    ),
                )));
            }
            Err(crate::sandbox::SpawnError::Io(e)) => {
                return Err(Error::external(format!(
                    "cannot start `{}`: {e}",
                    spec.argv[0]
                )));
            }
        };
        let stdout = child.stdout.take().expect("piped");
        let stderr_pipe = child.stderr.take().expect("piped");
        let stdin = child.stdin.take().map(Writer::start);
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        std::thread::spawn(move || read_messages(stdout, tx));
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let tail = Arc::clone(&stderr);
        let stderr_reader = std::thread::spawn(move || keep_tail(stderr_pipe, tail));
        let mut client = Client {
            server: spec.server.to_string(),
            child,
            stdin,
            rx,
            stderr,
            stderr_reader,
            next_id: 0,
            timeout: spec.timeout,
            protocol_version: String::new(),
            server_info: Value::Null,
            dead: None,
            has_tools: true,
            answerer: spec.answerer,
            exchanges: Vec::new(),
            _tmp: spec.tmp,
        };
        let init = client
            .request(
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": client.answerer.capabilities(),
                    "clientInfo": {"name": "kxen-agent", "version": env!("CARGO_PKG_VERSION")},
                }),
                None,
            )
            .map_err(|f| Error::external(format!("the initialize handshake failed: {f}")))?;
        let version = init["protocolVersion"].as_str().unwrap_or_default();
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(Error::external(format!(
                "the server speaks protocol version {version:?}; kxen-agent speaks {}",
                SUPPORTED_VERSIONS.join(", ")
            )));
        }
        client.has_tools = offers_tools(&init);
        client.protocol_version = version.to_string();
        client.server_info = init["serverInfo"].clone();
        let until = Instant::now() + client.timeout;
        client
            .notify("notifications/initialized", json!({}), until)
            .map_err(|f| Error::external(format!("the initialize handshake failed: {f}")))?;
        Ok(client)
    }

    /// `tools/list`, every page; empty, without asking, for a server that offers no tools.
    pub fn list_tools(&mut self) -> Result<Vec<Value>, String> {
        if !self.has_tools {
            return Ok(Vec::new());
        }
        list_pages(|params| self.request("tools/list", params, None))
    }

    /// `tools/call`; the result object as the server sent it.
    pub fn call_tool(
        &mut self,
        tool: &str,
        arguments: &Value,
        cancel: &AtomicBool,
    ) -> Result<Value, Failure> {
        self.exchanges.clear();
        self.request(
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
            Some(cancel),
        )
    }

    /// The JSON-RPC id of the last request sent (a trace span's `jsonrpc.request.id`).
    pub fn last_request_id(&self) -> u64 {
        self.next_id
    }

    /// What the server asked of us during the last `tools/call` (one line per elicitation).
    pub fn take_exchanges(&mut self) -> Vec<String> {
        std::mem::take(&mut self.exchanges)
    }

    /// Whether the server is unusable (it broke, timed out or was killed).
    pub fn is_dead(&self) -> bool {
        self.dead.is_some()
    }

    /// Sends a notification, waiting at most until `until` for the server to read it.
    fn notify(&mut self, method: &str, params: Value, until: Instant) -> Result<(), Failure> {
        self.send(
            &json!({"jsonrpc": "2.0", "method": method, "params": params}),
            until,
            None,
        )
    }

    /// Writes `message`, waiting at most until `until` (see [`Writer::write`]). A server that
    /// does not read it in time is killed: [`Failure::NotSent`] if not one byte got through,
    /// else [`Failure::Stalled`] (it may have read all of it), or [`Failure::Canceled`].
    fn send(
        &mut self,
        message: &Value,
        until: Instant,
        cancel: Option<&AtomicBool>,
    ) -> Result<(), Failure> {
        if let Some(why) = &self.dead {
            return Err(Failure::NotSent(why.clone()));
        }
        let mut line = serde_json::to_vec(message).expect("a message always serializes");
        line.push(b'\n');
        let written = match self.stdin.as_ref() {
            Some(stdin) => stdin.write(line, until, cancel),
            None => Err(WriteFailure::Closed("its stdin is closed".into())),
        };
        match written {
            Ok(()) => Ok(()),
            Err(WriteFailure::Closed(e)) => {
                // A closed stdin is, nearly always, a server that exited: say how (and what
                // its stderr says) rather than "broken pipe".
                let why = self.exited();
                Err(Failure::NotSent(format!(
                    "{why} (writing to it failed: {e})"
                )))
            }
            Err(WriteFailure::Stalled {
                written,
                total,
                canceled,
            }) => {
                let why = self.broke(format!(
                    "the server stopped reading its stdin: {written} of the {total} bytes of the \
                     message were written {}; the server was killed",
                    if canceled {
                        "when the run was canceled".to_string()
                    } else {
                        format!("within {} ms (timeout_ms)", self.timeout.as_millis())
                    }
                ));
                Err(if written == 0 {
                    Failure::NotSent(why)
                } else if canceled {
                    Failure::Canceled
                } else {
                    Failure::Stalled(why)
                })
            }
        }
    }

    fn request(
        &mut self,
        method: &str,
        params: Value,
        cancel: Option<&AtomicBool>,
    ) -> Result<Value, Failure> {
        self.next_id += 1;
        let id = self.next_id;
        // The clock starts before the request is written: a server that stops reading its
        // stdin is a server that does not answer.
        let deadline = Instant::now() + self.timeout;
        self.send(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
            deadline,
            cancel,
        )?;
        let mut cleanup_until: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if let Some(until) = cleanup_until {
                if now >= until {
                    self.broke("canceled".into());
                    return Err(Failure::Canceled);
                }
            } else if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
                let until = now + CLEANUP_WINDOW;
                if self
                    .notify(
                        "notifications/cancelled",
                        json!({"requestId": id, "reason": "canceled by the user"}),
                        until,
                    )
                    .is_err()
                {
                    // It stopped reading (and was killed) or is gone: no answer will come.
                    self.broke("canceled".into());
                    return Err(Failure::Canceled);
                }
                cleanup_until = Some(until);
                continue;
            } else if now >= deadline {
                let _ = self.notify(
                    "notifications/cancelled",
                    json!({"requestId": id, "reason": "timed out"}),
                    now + Duration::from_millis(100),
                );
                self.broke(format!("no answer within {} ms", self.timeout.as_millis()));
                return Err(Failure::Timeout(self.timeout));
            }
            let message = match self.rx.recv_timeout(POLL) {
                Ok(Incoming::Message(m)) => m,
                Ok(Incoming::Garbage(line)) => {
                    let why = self.broke(format!(
                        "the server wrote something that is not a JSON-RPC message on stdout: {}",
                        crate::text::preview(&line, 120)
                    ));
                    return Err(Failure::Broken(why));
                }
                Ok(Incoming::Eof) | Err(RecvTimeoutError::Disconnected) => {
                    let why = self.exited();
                    return Err(Failure::Broken(why));
                }
                Err(RecvTimeoutError::Timeout) => continue,
            };
            if message.get("method").and_then(Value::as_str).is_some() {
                if message.get("id").is_some() {
                    // A request from the server, answered at once ([`super::inbound`]).
                    let answered = self.answerer.answer(&message);
                    self.exchanges.extend(answered.record);
                    let reply = answered.reply;
                    let until = cleanup_until.unwrap_or(deadline);
                    if let Err(failure) = self.send(&reply, until, None) {
                        // The server stopped reading while our request was pending: it was
                        // killed, and the request may have acted.
                        return Err(match failure {
                            Failure::NotSent(why) | Failure::Stalled(why) => Failure::Broken(why),
                            other => other,
                        });
                    }
                }
                continue;
            }
            if message.get("id").and_then(Value::as_u64) != Some(id) {
                continue; // an answer to a request we gave up on
            }
            if cleanup_until.is_some() && message.get("error").is_some() {
                // An error answer to a canceled call does not prove it did nothing.
                self.broke("canceled".into());
                return Err(Failure::Canceled);
            }
            if let Some(error) = message.get("error") {
                let text = error["message"].as_str().unwrap_or("no message");
                return Err(Failure::Rpc(format!(
                    "the server answered with error {}: {text}",
                    error["code"]
                )));
            }
            return Ok(message.get("result").cloned().unwrap_or(Value::Null));
        }
    }

    /// Marks the server dead and kills its process group; returns `why`.
    fn broke(&mut self, why: String) -> String {
        self.kill();
        self.dead = Some(why.clone());
        why
    }

    /// The server closed stdout: how it ended, with the tail of its stderr.
    ///
    /// Both waits are bounded and only taken on this failure path. Closing stdout (or stdin)
    /// usually means the process is exiting, but on a loaded machine its exit status and the
    /// last of its stderr (read by another thread) arrive later: without the waits the message
    /// would say "closed its stdout" and miss the server's own words.
    fn exited(&mut self) -> String {
        let until = Instant::now() + EXIT_WAIT;
        let mut status = None;
        while Instant::now() < until {
            if let Ok(Some(s)) = self.child.try_wait() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // The stderr reader ends at EOF, once every holder of the pipe closed it: the server
        // and anything it started that kept its stderr (then the wait runs out, and we say
        // what was read so far).
        let until = Instant::now() + STDERR_DRAIN;
        while !self.stderr_reader.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let how = match status {
            Some(s) => format!("the server exited ({})", process::describe_status(&s)),
            None => "the server closed its stdout".to_string(),
        };
        let stderr = self.stderr_tail();
        let why = if stderr.is_empty() {
            how
        } else {
            format!("{how}; its stderr ends with: {stderr}")
        };
        self.broke(why)
    }

    fn stderr_tail(&self) -> String {
        let bytes = self
            .stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let text = String::from_utf8_lossy(&bytes);
        let text = crate::redact::redact(text.trim());
        text.lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join(" | ")
    }

    fn kill(&mut self) {
        self.stdin = None;
        process::signal_group(self.child.id(), libc::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn server(&self) -> &str {
        &self.server
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.dead.is_none() {
            self.kill();
        }
    }
}

/// Makes the pipe non-blocking (for [`write_polling`]); false if that failed (then writes block,
/// as before, and only the caller's deadline bounds them).
#[allow(unsafe_code)] // fcntl(2) F_GETFL/F_SETFL on a pipe we own: no std API sets O_NONBLOCK
fn set_nonblocking(pipe: &ChildStdin) -> bool {
    use std::os::fd::AsRawFd;
    let fd = pipe.as_raw_fd();
    // SAFETY: `fd` is an open descriptor owned by `pipe` for the duration of both calls; fcntl
    // with these commands reads and sets its status flags and touches no memory of ours.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) >= 0
    }
}

/// Writes all of `chunk` to the non-blocking `pipe`, waiting for room with `poll(2)` in
/// [`POLL`] slices; gives up once `stop` is set.
#[allow(unsafe_code)] // poll(2) on one descriptor we own: std has no readiness wait for pipes
fn write_polling(
    pipe: &mut ChildStdin,
    chunk: &[u8],
    stop: &AtomicBool,
    counted: &AtomicUsize,
) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut rest = chunk;
    while !rest.is_empty() {
        if stop.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("the writer was stopped"));
        }
        match pipe.write(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                counted.fetch_add(n, Ordering::SeqCst);
                rest = &rest[n..];
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut fds = libc::pollfd {
                    fd: pipe.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                };
                // SAFETY: `fds` is one valid pollfd on our stack for the duration of the call.
                unsafe { libc::poll(&mut fds, 1, POLL.as_millis() as libc::c_int) };
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Whether an `initialize` result declares the `tools` capability. A server without it offers
/// no tools: its listing is empty (the protocol says not to ask it for one), which is no error —
/// a capability that needs one of its tools is refused like any missing tool.
pub(crate) fn offers_tools(init: &Value) -> bool {
    init["capabilities"].get("tools").is_some()
}

/// Every page of `tools/list`, asked with `request` (either transport).
pub(crate) fn list_pages(
    mut request: impl FnMut(Value) -> Result<Value, Failure>,
) -> Result<Vec<Value>, String> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..1000 {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = request(params).map_err(|f| format!("tools/list failed: {f}"))?;
        let Some(items) = page["tools"].as_array() else {
            return Err("tools/list answered without a `tools` array".into());
        };
        tools.extend(items.iter().cloned());
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(next) if !next.is_empty() => cursor = Some(next.to_string()),
            _ => return Ok(tools),
        }
    }
    Err("tools/list returned more than 1000 pages".into())
}

fn read_messages(stdout: impl Read, tx: SyncSender<Incoming>) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => {
                let _ = tx.send(Incoming::Eof);
                return;
            }
            Ok(_) => {}
        }
        if line.len() > MAX_LINE {
            let _ = tx.send(Incoming::Garbage(format!("a line over {MAX_LINE} bytes")));
            return;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim();
        if text.is_empty() {
            continue;
        }
        let incoming = match serde_json::from_str::<Value>(text) {
            // A notification (progress, logging…): nothing uses them; dropped here, so a
            // server flooding them costs one line of memory, whether a request waits or not.
            Ok(v) if v.get("method").is_some() && v.get("id").is_none() => continue,
            Ok(v) if v.is_object() => Incoming::Message(v),
            _ => Incoming::Garbage(text.to_string()),
        };
        if tx.send(incoming).is_err() {
            return;
        }
    }
}

fn keep_tail(mut stderr: impl Read, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf) {
        if n == 0 {
            return;
        }
        let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
        t.extend_from_slice(&buf[..n]);
        if t.len() > STDERR_TAIL {
            let cut = t.len() - STDERR_TAIL;
            t.drain(..cut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that never reads (here the server itself; in the wild a process it detached
    /// that kept its stdin) cannot keep the writer thread alive once the writer is dropped.
    #[test]
    fn a_dropped_writer_ends_its_thread_even_if_nobody_reads() {
        let mut child = Command::new("sleep")
            .arg("30")
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let writer = Writer::start(child.stdin.take().unwrap());
        let progress = Arc::clone(&writer.progress);
        let until = Instant::now() + Duration::from_millis(300);
        let stalled = writer.write(vec![b'x'; 1 << 20], until, None);
        assert!(
            matches!(stalled, Err(WriteFailure::Stalled { written, total, .. }) if written < total),
            "the pipe filled up"
        );
        drop(writer);
        let start = Instant::now();
        while Arc::strong_count(&progress) > 1 {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the writer thread is still blocked on the pipe"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
