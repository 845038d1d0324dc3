//! One running language server: a child process speaking LSP over its stdin/stdout, framed by
//! `lsp-server`'s [`Message`] (`Content-Length` headers, JSON-RPC 2.0).
//!
//! Three threads per server: a writer (every message we send goes through a channel, so a
//! server that stops reading never blocks a tool call: the call times out instead), a reader
//! (answers go to the waiting request; `textDocument/publishDiagnostics` is kept per document;
//! the server's own requests — `workspace/configuration`, `client/registerCapability`, … — are
//! answered at once) and a stderr collector (its tail names why a server broke).
//!
//! Lifecycle: [`Client::start`] spawns the server through [`crate::sandbox::spawn`] on the
//! [`Launcher`]'s thread and performs `initialize`/`initialized`; [`Client::shutdown`] sends
//! `shutdown`, then `exit`, waits a moment and SIGKILLs the process group whatever happened.
//! The server leads its own process group; `PR_SET_PDEATHSIG` (set by the launcher) kills it
//! when the thread that spawned it ends, which is why that thread is the launcher's and lives as
//! long as the execution: a tool call's own thread (a parallel batch runs each call on a thread
//! of its own) ends with the call. A kill -9 of kxen-agent ends every thread, so the server dies
//! with it.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use lsp_server::{Message, Notification, Request, RequestId, Response};
use lsp_types::{Diagnostic, PositionEncodingKind, ServerCapabilities};

pub use super::uri::Encoding;
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::process;

/// The largest message accepted from a server (a hostile `Content-Length` must not make us
/// allocate it).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// The longest header line accepted.
const MAX_HEADER_LINE: usize = 4096;
const STDERR_TAIL: usize = 2048;
const POLL: Duration = Duration::from_millis(20);
/// How long `shutdown` may take before the server is killed anyway.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);
/// After `exit`, how long the server gets to end by itself.
const EXIT_WAIT: Duration = Duration::from_millis(500);
/// A server whose publishes carry no version may publish a document more than once for one
/// change (an empty list first, the real one a moment later): its latest publish counts once
/// no newer one came for this long.
pub const UNVERSIONED_SETTLE: Duration = Duration::from_millis(300);

/// A piece of work for the launcher thread.
type Job = Box<dyn FnOnce() + Send>;

/// Runs the spawns of one execution's servers on one long-lived thread (see the module doc).
pub struct Launcher {
    jobs: Mutex<Option<Sender<Job>>>,
}

impl Launcher {
    pub fn new() -> Launcher {
        Launcher {
            jobs: Mutex::new(None),
        }
    }

    /// Runs `job` on the launcher thread (started on first use) and returns its result.
    fn run<T: Send + 'static>(&self, job: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let mut jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if jobs.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name("kxen-lsp-launcher".into())
                .spawn(move || {
                    for job in rx {
                        job();
                    }
                })
                .ok()?;
            *jobs = Some(tx);
        }
        let (done_tx, done_rx) = mpsc::channel();
        let boxed: Job = Box::new(move || {
            let _ = done_tx.send(job());
        });
        jobs.as_ref()?.send(boxed).ok()?;
        drop(jobs);
        done_rx.recv().ok()
    }

    /// Ends the launcher thread (after every server it started is gone).
    pub fn stop(&self) {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

impl Default for Launcher {
    fn default() -> Self {
        Launcher::new()
    }
}

/// How the server process is started.
pub struct Spawn<'a> {
    pub server: &'a str,
    pub argv: &'a [String],
    pub cwd: PathBuf,
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// The server entry's own fence policy.
    pub fence: crate::sandbox::FencePolicy,
    /// The run's fence, which starts the server.
    pub run_fence: &'a crate::sandbox::RunFence,
    /// The workspace root (canonical), the server's workspace folder.
    pub workspace: &'a Path,
    /// The server's HOME (inside `tmp`).
    pub home: PathBuf,
    /// The server's `TMPDIR`, removed when the server is gone.
    pub tmp: tempfile::TempDir,
    pub timeout: Duration,
    pub initialization_options: Option<Value>,
}

/// Why a request got no result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The server answered with a JSON-RPC error (it is still usable).
    Rpc(String),
    /// The server exited, closed its stdout or wrote something that is not LSP.
    Broken(String),
    /// No answer within the timeout (the server was killed).
    Timeout(Duration),
    /// The run was canceled while waiting (the request was canceled with `$/cancelRequest`).
    Canceled,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Rpc(why) | Failure::Broken(why) => f.write_str(why),
            Failure::Timeout(t) => write!(f, "no answer within {} ms (timeout_ms)", t.as_millis()),
            Failure::Canceled => f.write_str("the run was canceled"),
        }
    }
}

/// The latest `publishDiagnostics` of one document.
#[derive(Debug, Clone)]
pub struct Published {
    pub version: Option<i32>,
    pub diagnostics: Vec<Diagnostic>,
    /// Order of arrival among all publishes of this server.
    pub seq: u64,
    pub at: Instant,
}

#[derive(Default)]
struct State {
    seq: u64,
    docs: HashMap<String, Published>,
    /// Set when the reader ended: why.
    ended: Option<String>,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// One running server after a successful handshake.
pub struct Client {
    server: String,
    child: Child,
    out: Option<Sender<Message>>,
    responses: Receiver<Response>,
    shared: Arc<Shared>,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_reader: std::thread::JoinHandle<()>,
    next_id: i32,
    timeout: Duration,
    pub capabilities: ServerCapabilities,
    pub encoding: Encoding,
    dead: Option<String>,
    _tmp: tempfile::TempDir,
}

impl Client {
    /// Starts the server on `launcher`'s thread and performs the handshake. A failure is the
    /// crate's [`Error`]: the fence refused the server (policy), the program could not start or
    /// failed the handshake (external); the `lsp` tool gives the model its message.
    pub fn start(spec: Spawn, launcher: &Launcher, cancel: &AtomicBool) -> Result<Client> {
        let mut cmd = Command::new(&spec.argv[0]);
        cmd.args(&spec.argv[1..])
            .current_dir(&spec.cwd)
            .env_clear()
            .envs(spec.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let policy = spec.fence;
        let (run_fence, home, tmp) = (
            spec.run_fence.clone(),
            spec.home.clone(),
            spec.tmp.path().to_path_buf(),
        );
        let spawned = launcher
            .run(move || {
                let launch = crate::sandbox::Launch {
                    policy,
                    home: &home,
                    tmp: &tmp,
                };
                run_fence.spawn(launch, cmd)
            })
            .ok_or_else(|| Error::failed("the launcher thread could not be started"))?;
        let mut child = match spawned {
            Ok(spawned) => spawned.child,
            Err(crate::sandbox::SpawnError::Refused(refusal)) => {
                return Err(Error::policy(refusal.message_for(
                    &format!("language server `{}`", spec.server),
                    spec.fence,
                    &format!("sandbox = \"off\" in its [lsp.{}] entry", spec.server),
                )));
            }
            Err(crate::sandbox::SpawnError::Io(e)) => {
                let message = format!("cannot start `{}`: {e}", spec.argv[0]);
                return Err(Error::external(message).with_source(e));
            }
        };
        let stdout = child.stdout.take().expect("piped");
        let stdin = child.stdin.take().expect("piped");
        let stderr_pipe = child.stderr.take().expect("piped");
        let (out_tx, out_rx) = mpsc::channel::<Message>();
        std::thread::spawn(move || write_messages(stdin, out_rx));
        let (resp_tx, responses) = mpsc::channel();
        let shared = Arc::new(Shared::default());
        let reader_shared = Arc::clone(&shared);
        let replies = out_tx.clone();
        let folder = workspace_folder(spec.workspace);
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let logs = Arc::clone(&stderr);
        std::thread::spawn(move || {
            read_messages(stdout, resp_tx, replies, reader_shared, folder, logs)
        });
        let tail = Arc::clone(&stderr);
        let stderr_reader = std::thread::spawn(move || keep_tail(stderr_pipe, tail));
        let mut client = Client {
            server: spec.server.to_string(),
            child,
            out: Some(out_tx),
            responses,
            shared,
            stderr,
            stderr_reader,
            next_id: 0,
            timeout: spec.timeout,
            capabilities: ServerCapabilities::default(),
            encoding: Encoding::Utf16,
            dead: None,
            _tmp: spec.tmp,
        };
        let init = client
            .request(
                "initialize",
                initialize_params(spec.workspace, spec.initialization_options),
                cancel,
            )
            .map_err(|f| Error::external(format!("the initialize handshake failed: {f}")))?;
        let caps = init.get("capabilities").cloned().unwrap_or(json!({}));
        client.capabilities = serde_json::from_value(caps).map_err(|e| {
            Error::external(format!(
                "its initialize answer has unreadable capabilities: {e}"
            ))
            .with_source(e)
        })?;
        client.encoding = match &client.capabilities.position_encoding {
            Some(e) if *e == PositionEncodingKind::UTF8 => Encoding::Utf8,
            Some(e) if *e == PositionEncodingKind::UTF32 => Encoding::Utf32,
            _ => Encoding::Utf16,
        };
        client.notify("initialized", json!({}));
        Ok(client)
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Why the server is unusable, if it is (it broke, timed out or exited).
    pub fn broken(&mut self) -> Option<String> {
        if self.dead.is_none() {
            let ended = self
                .shared
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .ended
                .is_some();
            if ended || matches!(self.child.try_wait(), Ok(Some(_))) {
                let why = self.exited();
                self.dead = Some(why);
            }
        }
        self.dead.clone()
    }

    /// Sends a notification (never waits: the writer thread delivers it).
    pub fn notify(&mut self, method: &str, params: Value) {
        if let Some(out) = &self.out {
            let _ = out.send(Message::Notification(Notification::new(
                method.to_string(),
                params,
            )));
        }
    }

    /// Sends request `method` and waits for its answer (at most `timeout_ms`; a cancel sends
    /// `$/cancelRequest` and gives up). Within a traced tool call, one span per request
    /// (`crate::telemetry::current`).
    pub fn request(
        &mut self,
        method: &str,
        params: Value,
        cancel: &AtomicBool,
    ) -> Result<Value, Failure> {
        let traced = crate::telemetry::current::client_call();
        let result = self.send_request(method, params, cancel);
        if let Some(call) = traced {
            use crate::telemetry::span::{Status, Value as Attr};
            let mut attributes = vec![
                ("kxen.lsp.method", Attr::from(method)),
                ("kxen.lsp.server", Attr::from(self.server.as_str())),
                ("jsonrpc.request.id", Attr::from(self.next_id.to_string())),
                ("network.transport", Attr::from("pipe")),
            ];
            let (status, message) = match &result {
                Ok(_) => (Status::Unset, String::new()),
                Err(failure) => {
                    let kind = match failure {
                        Failure::Rpc(_) => "jsonrpc_error",
                        Failure::Broken(_) => "broken",
                        Failure::Timeout(_) => "timeout",
                        Failure::Canceled => "canceled",
                    };
                    attributes.push(("error.type", Attr::from(kind)));
                    (Status::Error, failure.to_string())
                }
            };
            call.end(format!("lsp {method}"), attributes, status, &message);
        }
        result
    }

    fn send_request(
        &mut self,
        method: &str,
        params: Value,
        cancel: &AtomicBool,
    ) -> Result<Value, Failure> {
        if let Some(why) = self.broken() {
            return Err(Failure::Broken(why));
        }
        self.next_id += 1;
        let id = RequestId::from(self.next_id);
        let sent = self.out.as_ref().is_some_and(|out| {
            out.send(Message::Request(Request::new(
                id.clone(),
                method.to_string(),
                params,
            )))
            .is_ok()
        });
        if !sent {
            let why = self.exited();
            return Err(Failure::Broken(self.broke(why)));
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            if cancel.load(Ordering::SeqCst) {
                self.notify("$/cancelRequest", json!({"id": self.next_id}));
                return Err(Failure::Canceled);
            }
            if Instant::now() >= deadline {
                self.broke(format!(
                    "no answer to `{method}` within {} ms",
                    self.timeout.as_millis()
                ));
                return Err(Failure::Timeout(self.timeout));
            }
            match self.responses.recv_timeout(POLL) {
                Ok(response) if response.id == id => {
                    return response.response_result.map_err(|error| {
                        Failure::Rpc(format!(
                            "the server answered `{method}` with error {}: {}",
                            error.code, error.message
                        ))
                    });
                }
                Ok(_) => {} // the answer to a request we gave up on
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    let why = self.exited();
                    return Err(Failure::Broken(self.broke(why)));
                }
            }
        }
    }

    /// The publish counter now: a publish with a higher `seq` arrived after this moment.
    pub fn publish_seq(&self) -> u64 {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .seq
    }

    /// Waits for the diagnostics of `uri` published after `after_seq` — for `version`, when
    /// the server versions its publishes; for an unversioned publish, once no newer one came
    /// for [`UNVERSIONED_SETTLE`]. `Ok(None)`: nothing within `timeout`.
    pub fn wait_diagnostics(
        &mut self,
        uri: &str,
        after_seq: u64,
        version: i32,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> Result<Option<Published>, Failure> {
        let deadline = Instant::now() + timeout;
        let shared = Arc::clone(&self.shared);
        let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(p) = state.docs.get(uri).filter(|p| p.seq > after_seq) {
                match p.version {
                    Some(v) if v >= version => return Ok(Some(p.clone())),
                    Some(_) => {} // an older version's publish: the one for ours is coming
                    None if p.at.elapsed() >= UNVERSIONED_SETTLE => return Ok(Some(p.clone())),
                    None => {}
                }
            }
            if state.ended.is_some() {
                drop(state);
                let why = self.exited();
                return Err(Failure::Broken(self.broke(why)));
            }
            if cancel.load(Ordering::SeqCst) {
                return Err(Failure::Canceled);
            }
            let now = Instant::now();
            if now >= deadline {
                // An unversioned publish that has not settled by the deadline still counts.
                return Ok(state.docs.get(uri).filter(|p| p.seq > after_seq).cloned());
            }
            let nap = (deadline - now).min(Duration::from_millis(50));
            state = shared
                .changed
                .wait_timeout(state, nap)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Marks the server dead and kills its process group; returns `why`.
    fn broke(&mut self, why: String) -> String {
        self.kill();
        self.dead = Some(why.clone());
        why
    }

    /// How the server ended (exit status, stderr tail), waiting briefly for both.
    fn exited(&mut self) -> String {
        let until = Instant::now() + Duration::from_secs(2);
        let mut status = None;
        while Instant::now() < until {
            if let Ok(Some(s)) = self.child.try_wait() {
                status = Some(s);
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let until = Instant::now() + Duration::from_secs(1);
        while !self.stderr_reader.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let ended = self
            .shared
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ended
            .clone();
        let how = match (status, ended) {
            (Some(s), _) => format!("the server exited ({})", process::describe_status(&s)),
            (None, Some(why)) => why,
            (None, None) => "the server stopped answering".to_string(),
        };
        let stderr = self.stderr_tail();
        if stderr.is_empty() {
            how
        } else {
            format!("{how}; its stderr (and log messages) end with: {stderr}")
        }
    }

    fn stderr_tail(&self) -> String {
        let bytes = self
            .stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let text = String::from_utf8_lossy(&bytes);
        let text = crate::redact::redact(text.trim());
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    fn kill(&mut self) {
        self.out = None;
        process::signal_group(self.child.id(), libc::SIGKILL);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// `shutdown`, `exit`, a moment to end, then SIGKILL of the process group in any case.
    pub fn shutdown(mut self) {
        if self.dead.is_none() {
            let never = AtomicBool::new(false);
            self.timeout = self.timeout.min(SHUTDOWN_WAIT);
            if self.request("shutdown", Value::Null, &never).is_ok() {
                self.notify("exit", Value::Null);
                self.out = None; // closes its stdin once the writer has sent `exit`
                let until = Instant::now() + EXIT_WAIT;
                while Instant::now() < until {
                    if matches!(self.child.try_wait(), Ok(Some(_))) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
        self.kill();
        self.dead = Some("shut down".into());
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if self.dead.is_none() {
            self.kill();
        }
    }
}

fn workspace_folder(root: &Path) -> Value {
    json!({
        "uri": super::uri::from_path(root),
        "name": root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
    })
}

/// The `initialize` params: rooted at the workspace, with the capabilities of the six
/// operations (and UTF-8 or UTF-16 positions).
fn initialize_params(root: &Path, options: Option<Value>) -> Value {
    use lsp_types::*;
    let goto = GotoCapability {
        dynamic_registration: Some(false),
        link_support: Some(true),
    };
    let capabilities = ClientCapabilities {
        text_document: Some(TextDocumentClientCapabilities {
            synchronization: Some(TextDocumentSyncClientCapabilities {
                dynamic_registration: Some(false),
                will_save: Some(false),
                will_save_wait_until: Some(false),
                did_save: Some(false),
            }),
            publish_diagnostics: Some(PublishDiagnosticsClientCapabilities {
                related_information: Some(false),
                version_support: Some(true),
                ..Default::default()
            }),
            definition: Some(goto),
            references: Some(DynamicRegistrationClientCapabilities {
                dynamic_registration: Some(false),
            }),
            hover: Some(HoverClientCapabilities {
                dynamic_registration: Some(false),
                content_format: Some(vec![MarkupKind::PlainText, MarkupKind::Markdown]),
            }),
            document_symbol: Some(DocumentSymbolClientCapabilities {
                hierarchical_document_symbol_support: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }),
        workspace: Some(WorkspaceClientCapabilities {
            symbol: Some(WorkspaceSymbolClientCapabilities::default()),
            workspace_folders: Some(true),
            configuration: Some(true),
            ..Default::default()
        }),
        general: Some(GeneralClientCapabilities {
            position_encodings: Some(vec![
                PositionEncodingKind::UTF16,
                PositionEncodingKind::UTF8,
            ]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut params = serde_json::to_value(InitializeParams {
        // No parent pid: servers that watch it (pyright) probe it with kill(pid, 0), which
        // fails from inside the fence's user namespace (EPERM), and they exit thinking we died.
        // The server dies with us anyway (PR_SET_PDEATHSIG and the process-group kill).
        process_id: None,
        capabilities,
        initialization_options: options,
        client_info: Some(ClientInfo {
            name: "kxen-agent".into(),
            version: Some(env!("CARGO_PKG_VERSION").into()),
        }),
        ..Default::default()
    })
    .expect("initialize params always serialize");
    // rootUri/rootPath are deprecated in favour of workspaceFolders, which lsp-types builds from
    // a `Uri` type; the plain JSON keeps the path conversion in one place (`uri::from_path`).
    let folder = workspace_folder(root);
    params["rootUri"] = folder["uri"].clone();
    params["rootPath"] = json!(root.to_string_lossy());
    params["workspaceFolders"] = json!([folder]);
    params
}

fn write_messages(stdin: std::process::ChildStdin, rx: Receiver<Message>) {
    let mut w = std::io::BufWriter::new(stdin);
    for message in rx {
        if message.write(&mut w).is_err() {
            return;
        }
    }
    let _ = w.flush();
}

/// Reads one message, refusing a header line or a `Content-Length` beyond our limits before
/// `lsp-server` allocates the body.
fn read_bounded(r: &mut impl BufRead) -> std::io::Result<Option<Message>> {
    let invalid = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidData, m);
    let mut header = Vec::new();
    let mut length: Option<usize> = None;
    loop {
        let mut line = Vec::new();
        let n = r
            .by_ref()
            .take(MAX_HEADER_LINE as u64 + 1)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return if header.is_empty() {
                Ok(None)
            } else {
                Err(invalid("the stream ended inside a header".into()))
            };
        }
        if line.len() > MAX_HEADER_LINE {
            return Err(invalid(format!(
                "a header line over {MAX_HEADER_LINE} bytes"
            )));
        }
        header.extend_from_slice(&line);
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        if let Some((name, value)) = text.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().ok();
        }
    }
    match length {
        Some(n) if n > MAX_MESSAGE => {
            return Err(invalid(format!(
                "a message of {n} bytes (at most {MAX_MESSAGE} are accepted)"
            )));
        }
        Some(_) => {}
        None => return Err(invalid("a message without a Content-Length".into())),
    }
    let body = r.take(length.unwrap_or(0) as u64);
    Message::read(&mut std::io::Cursor::new(header).chain(body))
}

fn read_messages(
    stdout: std::process::ChildStdout,
    responses: Sender<Response>,
    replies: Sender<Message>,
    shared: Arc<Shared>,
    folder: Value,
    logs: Arc<Mutex<Vec<u8>>>,
) {
    let mut reader = BufReader::new(stdout);
    let end = |why: String| {
        shared.state.lock().unwrap_or_else(|p| p.into_inner()).ended = Some(why);
        shared.changed.notify_all();
    };
    loop {
        let message = match read_bounded(&mut reader) {
            Ok(Some(m)) => m,
            Ok(None) => return end("the server closed its stdout".into()),
            Err(e) => {
                return end(format!(
                    "the server wrote something that is not an LSP message: {}",
                    crate::text::preview(&e.to_string(), 160)
                ));
            }
        };
        match message {
            Message::Response(r) => {
                if responses.send(r).is_err() {
                    return;
                }
            }
            Message::Notification(n) if n.method == "textDocument/publishDiagnostics" => {
                let Ok(p) = serde_json::from_value::<lsp_types::PublishDiagnosticsParams>(n.params)
                else {
                    continue;
                };
                let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                state.seq += 1;
                let seq = state.seq;
                state.docs.insert(
                    p.uri.as_str().to_string(),
                    Published {
                        version: p.version,
                        diagnostics: p.diagnostics,
                        seq,
                        at: Instant::now(),
                    },
                );
                drop(state);
                shared.changed.notify_all();
            }
            Message::Notification(n) if n.method == "window/logMessage" => {
                // Kept with the stderr tail: a server that breaks often said why here.
                if let Some(text) = n.params["message"].as_str() {
                    let mut line = text.as_bytes().to_vec();
                    line.push(b'\n');
                    append_tail(&logs, &line);
                }
            }
            Message::Notification(_) => {} // progress and the like: nothing uses them
            Message::Request(req) => {
                let _ = replies.send(Message::Response(answer(&req, &folder)));
            }
        }
    }
}

/// Our answer to a request from the server: what a plain editor with no settings would say.
fn answer(req: &Request, folder: &Value) -> Response {
    let ok = |v: Value| Response::new_ok(req.id.clone(), v);
    match req.method.as_str() {
        "workspace/configuration" => {
            let n = req.params["items"].as_array().map_or(0, Vec::len);
            ok(Value::Array(vec![Value::Null; n]))
        }
        "workspace/workspaceFolders" => ok(json!([folder])),
        "client/registerCapability"
        | "client/unregisterCapability"
        | "window/workDoneProgress/create"
        | "window/showMessageRequest"
        | "workspace/diagnostic/refresh"
        | "workspace/semanticTokens/refresh"
        | "workspace/inlayHint/refresh"
        | "workspace/codeLens/refresh" => ok(Value::Null),
        other => Response::new_err(
            req.id.clone(),
            lsp_server::ErrorCode::MethodNotFound as i32,
            format!("kxen-agent does not support {other}"),
        ),
    }
}

fn keep_tail(mut stderr: impl Read, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf) {
        if n == 0 {
            return;
        }
        append_tail(&tail, &buf[..n]);
    }
}

fn append_tail(tail: &Mutex<Vec<u8>>, bytes: &[u8]) {
    let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
    t.extend_from_slice(bytes);
    if t.len() > STDERR_TAIL {
        let cut = t.len() - STDERR_TAIL;
        t.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(body: &str) -> Vec<u8> {
        format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
    }

    #[test]
    fn frames_are_read_and_hostile_ones_refused() {
        let body = r#"{"jsonrpc":"2.0","method":"x","params":{}}"#;
        let mut two = frame(body);
        two.extend(frame(r#"{"jsonrpc":"2.0","id":1,"result":null}"#));
        let mut r = std::io::Cursor::new(two);
        assert!(matches!(
            read_bounded(&mut r).unwrap(),
            Some(Message::Notification(n)) if n.method == "x"
        ));
        assert!(matches!(
            read_bounded(&mut r).unwrap(),
            Some(Message::Response(_))
        ));
        assert!(read_bounded(&mut r).unwrap().is_none());
        let huge = b"Content-Length: 99999999999999\r\n\r\n".to_vec();
        let err = read_bounded(&mut std::io::Cursor::new(huge)).unwrap_err();
        assert!(err.to_string().contains("at most"), "{err}");
        let long = vec![b'a'; 10_000];
        assert!(read_bounded(&mut std::io::Cursor::new(long)).is_err());
        let none = b"X: 1\r\n\r\n{}".to_vec();
        assert!(read_bounded(&mut std::io::Cursor::new(none)).is_err());
        let short = b"Content-Length: 50\r\n\r\n{}".to_vec();
        assert!(read_bounded(&mut std::io::Cursor::new(short)).is_err());
        let garbage = frame("not json");
        assert!(read_bounded(&mut std::io::Cursor::new(garbage)).is_err());
    }

    #[test]
    fn server_requests_get_plain_answers() {
        let folder = json!({"uri": "file:///w", "name": "w"});
        let req =
            |method: &str, params: Value| Request::new(RequestId::from(7), method.into(), params);
        let r = answer(
            &req("workspace/configuration", json!({"items": [{}, {}]})),
            &folder,
        );
        assert_eq!(r.response_result.unwrap(), json!([null, null]));
        let r = answer(&req("workspace/workspaceFolders", Value::Null), &folder);
        assert_eq!(r.response_result.unwrap(), json!([folder]));
        let r = answer(&req("workspace/applyEdit", json!({})), &folder);
        assert!(r.response_result.is_err());
    }
}
