//! A blocking MCP client over Streamable HTTP (MCP 2025-03-26, 2025-06-18 and 2025-11-25,
//! "Transports"):
//! every JSON-RPC message is one POST to the server's endpoint; the answer to a request comes
//! back as a JSON body or as an SSE stream ([`super::sse`]) carrying it.
//!
//! - The handshake is `initialize` then `notifications/initialized`. The server may name a
//!   session in the `Mcp-Session-Id` header of its `initialize` answer: every later request
//!   carries it, with `MCP-Protocol-Version`. A request answered 404 while a session is held
//!   means the server forgot the session: it did not run the request, and the client starts a
//!   new session before its next request (`tools/list` is asked again at once; a `tools/call`
//!   is never sent again on its own — the caller says it was not run).
//! - Each request runs on a thread of its own while the caller waits with its deadline
//!   (`timeout_ms`) and cancel flag: a server that never answers, or an SSE stream that never
//!   ends, blocks that thread (until the same deadline ends it), never the run. On cancel the
//!   client POSTs `notifications/cancelled` and waits [`CLEANUP_WINDOW`] for the answer.
//! - Whether a failed request may have acted: refused before it was sent (no connection, a
//!   redirect, a 4xx) it did not; sent and then no answer (the connection dropped, the deadline
//!   passed, the stream ended without the answer or broke and could not be resumed) it may
//!   have: a `tools/call` then is UNKNOWN ([`Failure`]). A stream that ends after an event id
//!   is resumed first (`stream_answer`).
//! - Requests the server sends us are answered at once ([`super::inbound`]), on the stream of a
//!   POST and on the standalone stream opened after the handshake (`listen`).
//! - The bearer token (`bearer_token_env`, or an OAuth token of the token store or issued at
//!   connect) lives only in this value's memory, the `Authorization` header and (OAuth) the
//!   per-user token store ([`super::oauth_store`]); every message made of what a server sent is
//!   redacted ([`crate::redact`], and the token itself) before it leaves this module.
//! - Redirects are followed only to the same origin (307/308, which resend the same POST);
//!   another origin, or a redirect that would turn the POST into a GET, is refused.
//! - On drop, a held session is ended with `DELETE` (bounded by [`GOODBYE`]).
//! - Durable resumption: the first event id of a `tools/call`'s stream is handed to the caller
//!   (its [`super::StreamPosition`] goes to the run's journal); after a kill -9, recovery
//!   connects again *into the same session* ([`Connect::attach`], no handshake) and reads the
//!   answer from the server's replay ([`HttpClient::replay_call`]).

use std::io::BufReader;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::client::{CLEANUP_WINDOW, Failure, PROTOCOL_VERSION};
use super::inbound::Answerer;
use super::sse::Events;
use crate::error::Error;

/// The protocol versions whose HTTP transport is Streamable HTTP (2024-11-05's HTTP+SSE
/// transport is another protocol).
pub const HTTP_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26"];
/// The largest JSON answer body, and the largest event of an SSE answer.
const MAX_BODY: usize = 16 * 1024 * 1024;
/// The most bytes of one SSE answer (notifications and keep-alives included).
const MAX_STREAM: usize = 64 * 1024 * 1024;
/// The longest `Mcp-Session-Id` accepted.
const MAX_SESSION_ID: usize = 512;
/// Same-origin redirects followed for one message.
const MAX_REDIRECTS: usize = 5;
/// How long the `DELETE` that ends a session, and a `notifications/cancelled` after a timeout,
/// may take.
pub const GOODBYE: Duration = Duration::from_secs(1);
const POLL: Duration = Duration::from_millis(50);
/// How much longer than the caller the thread of a request may wait (see `round_trip`).
const THREAD_SLACK: Duration = Duration::from_secs(1);
/// How many times one request is authorized again (a 401, or a 403 asking for more scope)
/// before its refusal stands.
const MAX_AUTHORIZATIONS: u32 = 2;
/// How long the handshake waits for the standalone event stream to open.
const LISTEN_WAIT: Duration = Duration::from_secs(1);
/// The longest the standalone event stream is read (one connection; a run needing more
/// connects again after a failure).
const LISTEN_LIFETIME: Duration = Duration::from_secs(24 * 3600);
/// The reconnection delay when the server gave none (`retry`).
const DEFAULT_RETRY_MS: u64 = 1000;
/// Resumptions in a row that bring no new event before the stream is given up.
const MAX_IDLE_RESUMES: u32 = 3;
/// How much of an error body is shown.
const EXCERPT: usize = 300;

/// How to reach the server.
pub struct Connect<'a> {
    pub server: &'a str,
    pub url: &'a str,
    /// The bearer token (read from `bearer_token_env` by the caller at connect time).
    pub token: Option<String>,
    pub timeout: Duration,
    /// How the server's own requests are answered (and what we declare in `initialize`).
    pub answerer: Answerer,
    /// The OAuth client to authorize with when the server asks for it (a 401).
    pub oauth: Option<super::oauth::Client>,
    /// What the token store holds for this server and client (read by the caller).
    pub stored: Option<super::oauth_store::Entry>,
    /// `mcp login`: the stored tokens are not sent (only a registered client is reused), so
    /// the server asks for a new authorization.
    pub login: bool,
    /// Recovery: join the session of this position (no handshake) to read its replay.
    pub attach: Option<&'a super::StreamPosition>,
}

/// What is sent with every message. Cloned into the thread that makes a request.
#[derive(Clone)]
struct Wire {
    agent: ureq::Agent,
    endpoint: url::Url,
    token: Option<String>,
    session: Option<String>,
    version: Option<String>,
    answerer: Arc<Answerer>,
    /// What the server asked of us (elicitations) since the last `tools/call` began.
    exchanges: Arc<Mutex<Vec<String>>>,
    /// Set on the copy a `tools/call` runs with: the first event id of its stream goes here.
    first_event: Option<mpsc::Sender<String>>,
}

/// What one POST brought back.
struct Posted {
    /// The JSON-RPC answer to the request (`None` for a notification or a response: 202).
    answer: Option<Value>,
    /// The `Mcp-Session-Id` header of the answer, checked.
    session: Option<String>,
}

/// Why a POST brought back no answer.
enum PostError {
    /// Nothing reached the server (no connection, a refused redirect).
    NotSent(String),
    /// The server refused the message with a 4xx status: it did not run it.
    Refused(String),
    /// HTTP 401: the server wants (another) token; it did not run the request. Carries its
    /// `WWW-Authenticate` header.
    Unauthorized { why: String, challenge: String },
    /// HTTP 404 while a session is held: the server forgot the session (did not run it).
    Expired,
    /// The message was sent and no answer came (the connection dropped, the stream ended or
    /// broke, the answer was not JSON-RPC): it may have been acted on.
    Broken(String),
}

/// One connection to a Streamable HTTP server after a successful handshake.
pub struct HttpClient {
    server: String,
    wire: Wire,
    next_id: u64,
    timeout: Duration,
    /// The protocol version the server chose.
    pub protocol_version: String,
    /// `serverInfo` as the server sent it.
    pub server_info: Value,
    /// Set once a request broke or timed out: the session is given up (`DELETE`) and a new
    /// client connects for later calls.
    dead: Option<String>,
    /// Set when the server answered 404 to the session: no `DELETE` for it.
    expired: bool,
    /// Whether the server declared the `tools` capability (without it, its listing is empty).
    has_tools: bool,
    /// Set to stop the thread reading the standalone event stream ([`Self::listen`]).
    listening: Option<Arc<AtomicBool>>,
    /// Boxed: most servers have none, and `Peer` holds a client inline.
    oauth: Option<Box<super::oauth::Client>>,
    /// The `WWW-Authenticate` of the last 401.
    challenge: Option<String>,
    /// The token store's entry for this server (updated by every authorization and refresh).
    stored: Option<Box<super::oauth_store::Entry>>,
    /// The endpoint as configured (the token store's key).
    url: String,
    /// The access token the last refresh brought: refused again, it is not refreshed again.
    refreshed: Option<String>,
    /// A refresh was refused: the next authorization is a new grant.
    refresh_refused: bool,
    login: bool,
}

impl HttpClient {
    /// Connects: the `initialize` handshake (and `notifications/initialized`).
    pub fn connect(spec: Connect) -> Result<HttpClient, Error> {
        let endpoint = url::Url::parse(spec.url)
            .map_err(|e| Error::external(format!("url {:?} is not a URL: {e}", spec.url)))?;
        let mut config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(format!("kxen-agent/{}", env!("CARGO_PKG_VERSION")))
            // Shorter than common servers' keep-alive (uvicorn: 5 s), so a pooled connection
            // is rarely one the server is closing while a call is written to it.
            .max_idle_age(Duration::from_secs(3));
        if crate::net::is_loopback(spec.url) {
            // A local server is never reached through an HTTP(S)_PROXY of the environment.
            config = config.proxy(None);
        }
        let mut client = HttpClient {
            server: spec.server.to_string(),
            wire: Wire {
                agent: config.build().into(),
                endpoint,
                token: spec.token,
                session: None,
                version: None,
                answerer: Arc::new(spec.answerer),
                exchanges: Arc::default(),
                first_event: None,
            },
            next_id: 0,
            timeout: spec.timeout,
            protocol_version: String::new(),
            server_info: Value::Null,
            dead: None,
            expired: false,
            has_tools: true,
            listening: None,
            oauth: spec.oauth.map(Box::new),
            challenge: None,
            stored: spec.stored.map(Box::new),
            url: spec.url.to_string(),
            refreshed: None,
            refresh_refused: false,
            login: spec.login,
        };
        client.use_stored();
        match spec.attach {
            None => client.handshake()?,
            Some(position) => {
                // The session of a call a crashed attempt made: joined as it is (a handshake
                // would start another session, whose replay holds nothing of that call).
                client.wire.session = position.session_id.clone();
                client.wire.version = Some(position.protocol_version.clone());
                client.protocol_version = position.protocol_version.clone();
                client.next_id = position.request_id;
            }
        }
        Ok(client)
    }

    /// Sends the stored access token while it is fresh; an expired one is refreshed first
    /// (one round trip). A refresh that fails leaves no token: the server's 401 then starts an
    /// authorization as without a store.
    fn use_stored(&mut self) {
        let Some(entry) = self.stored.as_ref().filter(|_| !self.login) else {
            return;
        };
        if entry.is_fresh() {
            self.wire.token = Some(entry.access_token.clone());
        } else if entry.refresh_token.is_some() && self.refresh_stored().is_err() {
            self.refresh_refused = true;
        }
    }

    /// Refreshes the stored entry and keeps the new tokens (in the store, atomically).
    fn refresh_stored(&mut self) -> Result<(), Error> {
        let (Some(entry), Some(oauth)) = (self.stored.clone(), self.oauth.clone()) else {
            return Err(Error::external("no stored token"));
        };
        let _lock = match &oauth.store {
            Some(slot) => Some(slot.lock(self.timeout)?),
            None => None,
        };
        // Another process may have refreshed it while this one waited: its tokens are used.
        if let Some(slot) = &oauth.store
            && let Ok(Some(current)) = slot.load()
            && current.access_token != entry.access_token
            && current.is_fresh()
        {
            self.wire.token = Some(current.access_token.clone());
            self.refreshed = Some(current.access_token.clone());
            self.stored = Some(Box::new(current));
            return Ok(());
        }
        let until = Instant::now() + self.timeout;
        let next = super::oauth::refresh(&self.wire.agent, &entry, &oauth, until)?;
        if let Some(slot) = &oauth.store {
            slot.save(&next)?;
        }
        self.wire.token = Some(next.access_token.clone());
        self.refreshed = Some(next.access_token.clone());
        self.stored = Some(Box::new(next));
        Ok(())
    }

    fn handshake(&mut self) -> Result<(), Error> {
        self.wire.session = None;
        self.wire.version = None;
        self.dead = None;
        self.expired = false;
        let params = json!({
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": self.wire.answerer.capabilities(),
            "clientInfo": {"name": "kxen-agent", "version": env!("CARGO_PKG_VERSION")},
        });
        self.challenge = None;
        let first = self.round_trip("initialize", params.clone(), None, None);
        let (init, session) = match (first, self.challenge.take(), self.oauth.clone()) {
            (Err(Failure::Rpc(refused)), Some(challenge), Some(oauth)) => {
                // The server wants a token: authorize, then ask again (once).
                self.authorize(&challenge, &oauth).map_err(|why| {
                    Error::external(format!("the initialize handshake failed: {refused}; {why}"))
                })?;
                self.dead = None;
                self.round_trip("initialize", params, None, None)
            }
            (first, _, _) => first,
        }
        .map_err(|f| Error::external(format!("the initialize handshake failed: {f}")))?;
        let version = init["protocolVersion"].as_str().unwrap_or_default();
        if !HTTP_VERSIONS.contains(&version) {
            return Err(Error::external(format!(
                "the server speaks protocol version {}; kxen-agent speaks Streamable HTTP in {}",
                crate::text::preview(&format!("{version:?}"), 40),
                HTTP_VERSIONS.join(", ")
            )));
        }
        self.has_tools = super::client::offers_tools(&init);
        self.protocol_version = version.to_string();
        self.server_info = init["serverInfo"].clone();
        self.wire.session = session;
        self.wire.version = Some(version.to_string());
        let until = Instant::now() + self.timeout;
        self.notify("notifications/initialized", json!({}), until)
            .map_err(|f| Error::external(format!("the initialize handshake failed: {f}")))?;
        self.listen();
        Ok(())
    }

    /// Gets a token with the configured OAuth client after a 401 with `challenge`
    /// ([`super::oauth`]); it replaces the one held (in memory only).
    fn authorize(&mut self, challenge: &str, oauth: &super::oauth::Client) -> Result<(), Error> {
        let parsed = super::oauth::parse_challenge(challenge);
        // A stored refresh token first (one round trip, nobody asked), unless the server wants
        // more scope than the token has, or the token it refused came from a refresh.
        let refreshable = self
            .stored
            .as_ref()
            .is_some_and(|e| e.refresh_token.is_some());
        if refreshable
            && !self.login
            && parsed.error.as_deref() != Some("insufficient_scope")
            && !self.refresh_refused
            && (self.refreshed.is_none() || self.refreshed != self.wire.token)
        {
            if self.refresh_stored().is_ok() {
                return Ok(());
            }
            self.refresh_refused = true;
        }
        let until = Instant::now() + self.timeout;
        let stored = self.stored.as_deref();
        let registration = stored.and_then(|e| Some((e.registration.as_ref()?, e.issuer.as_str())));
        let authorized = super::oauth::authorize(
            &self.wire.agent,
            &self.wire.endpoint,
            &parsed,
            oauth,
            registration,
            until,
        )
        .map_err(|why| {
            let why = scrub(&why.message, oauth.secret.as_deref());
            Error::external(format!("OAuth authorization failed: {}", self.scrub(&why)))
        })?;
        let entry = authorized.entry(&self.url, oauth);
        if let Some(slot) = &oauth.store {
            slot.save(&entry).map_err(|e| {
                Error::external(format!(
                    "OAuth authorization succeeded but storing the token failed: {}",
                    e.message
                ))
            })?;
        }
        self.wire.token = Some(entry.access_token.clone());
        self.refreshed = None;
        self.refresh_refused = false;
        self.stored = Some(Box::new(entry));
        Ok(())
    }

    /// Whether the connection holds a token (`mcp login` reports a server that never asked).
    pub fn is_authorized(&self) -> bool {
        self.wire.token.is_some()
    }

    /// Opens the standalone event stream (a GET on the endpoint), where a server sends the
    /// requests that belong to no request of ours (an SDK server's `elicitation/create` or
    /// `roots/list` made outside a call's own stream): a thread answers each one
    /// ([`super::inbound`]) until the stream ends or this client is dropped. A server that
    /// offers no such stream (405, or anything but an event stream) simply has none. Waits at
    /// most [`LISTEN_WAIT`] for the stream to open, so a request the server sends right after
    /// is not lost.
    fn listen(&mut self) {
        self.stop_listening();
        let stop = Arc::new(AtomicBool::new(false));
        let wire = self.wire.clone();
        let stopped = Arc::clone(&stop);
        let (opened, is_open) = mpsc::channel();
        std::thread::spawn(move || {
            let until = Instant::now() + LISTEN_LIFETIME;
            let mut call = wire
                .agent
                .get(wire.endpoint.as_str())
                .config()
                .timeout_global(Some(LISTEN_LIFETIME))
                .build()
                .header("Accept", "text/event-stream");
            for (name, value) in wire.headers() {
                call = call.header(name, value);
            }
            let response = match call.call() {
                Ok(r) if r.status().is_success() && is_event_stream(&r) => r,
                _ => {
                    let _ = opened.send(());
                    return;
                }
            };
            let _ = opened.send(());
            let reader = response
                .into_body()
                .into_with_config()
                .limit(u64::MAX)
                .reader();
            let mut events = Events::new(BufReader::new(reader), MAX_BODY, u64::MAX as usize);
            while let Ok(Some(event)) = events.next_event() {
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(value) = serde_json::from_str::<Value>(&event.data) else {
                    continue;
                };
                for message in messages(value) {
                    if message.get("method").is_some() && message.get("id").is_some() {
                        let answered = wire.answerer.answer(&message);
                        wire.exchanges().extend(answered.record);
                        let body = serde_json::to_vec(&answered.reply).expect("serializes");
                        let _ = wire.post(&body, None, until.min(Instant::now() + GOODBYE * 30));
                    }
                }
            }
        });
        let _ = is_open.recv_timeout(LISTEN_WAIT);
        self.listening = Some(stop);
    }

    fn stop_listening(&mut self) {
        if let Some(stop) = self.listening.take() {
            stop.store(true, Ordering::SeqCst);
        }
    }

    /// `tools/list`, every page. A session the server forgot is started again once.
    pub fn list_tools(&mut self) -> Result<Vec<Value>, String> {
        if !self.has_tools {
            return Ok(Vec::new());
        }
        match super::client::list_pages(|params| self.request("tools/list", params, None, None)) {
            Err(_) if self.expired => {
                self.handshake().map_err(|e| e.message)?;
                super::client::list_pages(|params| self.request("tools/list", params, None, None))
            }
            other => other,
        }
    }

    /// `tools/call`; the result object as the server sent it. `seen` gets the call's stream
    /// position once the server's event stream gave its first event id (at most once).
    pub fn call_tool(
        &mut self,
        tool: &str,
        arguments: &Value,
        cancel: &AtomicBool,
        seen: Option<&dyn Fn(super::StreamPosition)>,
    ) -> Result<Value, Failure> {
        self.wire.exchanges().clear();
        self.request(
            "tools/call",
            json!({"name": tool, "arguments": arguments}),
            Some(cancel),
            seen,
        )
    }

    /// Recovery ([`Connect::attach`]): the answer to the position's request, read from the
    /// server's replay of the stream after its event id (`GET` with `Last-Event-ID`), within
    /// `timeout_ms`. A server that cannot replay (an unknown session, no GET, a replay that
    /// ends without the answer) is a [`Failure::Broken`]; a JSON-RPC error answer is
    /// [`Failure::Rpc`] (the server answered: a known outcome).
    pub fn replay_call(&mut self, position: &super::StreamPosition) -> Result<Value, Failure> {
        let until = Instant::now() + self.timeout;
        let shown = crate::text::preview(&format!("{:?}", position.event_id), 60);
        let response = self.wire.resume(&position.event_id, until).map_err(|why| {
            Failure::Broken(self.scrub(&format!(
                "the server did not replay the stream after event {shown}: {why}"
            )))
        })?;
        let mut events = events_of(response);
        let mut reported = true; // the position is journaled already
        let answer = self
            .wire
            .read_answer(&mut events, position.request_id, until, &mut reported)
            .map_err(|end| {
                let why = match end {
                    StreamEnd::Resumable(why) => why,
                    StreamEnd::Fatal(PostError::NotSent(why))
                    | StreamEnd::Fatal(PostError::Refused(why))
                    | StreamEnd::Fatal(PostError::Unauthorized { why, .. })
                    | StreamEnd::Fatal(PostError::Broken(why)) => why,
                    StreamEnd::Fatal(PostError::Expired) => "the server forgot the session".into(),
                };
                Failure::Broken(self.scrub(&format!(
                    "the server's replay after event {shown} did not bring the answer: {why}"
                )))
            })?;
        if let Some(error) = answer.get("error") {
            let text = error["message"].as_str().unwrap_or("no message");
            return Err(Failure::Rpc(self.scrub(&format!(
                "the server answered with error {}: {text}",
                error["code"]
            ))));
        }
        Ok(answer.get("result").cloned().unwrap_or(Value::Null))
    }

    /// The JSON-RPC id of the last request sent (a trace span's `jsonrpc.request.id`).
    pub fn last_request_id(&self) -> u64 {
        self.next_id
    }

    /// What the server asked of us during the last `tools/call` (one line per elicitation).
    pub fn take_exchanges(&mut self) -> Vec<String> {
        std::mem::take(&mut *self.wire.exchanges())
    }

    /// Whether this client is given up (a later call connects again).
    pub fn is_dead(&self) -> bool {
        self.dead.is_some()
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    fn request(
        &mut self,
        method: &str,
        params: Value,
        cancel: Option<&AtomicBool>,
        seen: Option<&dyn Fn(super::StreamPosition)>,
    ) -> Result<Value, Failure> {
        // A request refused for want of a token (401) or of scope (403 insufficient_scope) did
        // not run: it is sent again after authorizing, at most MAX_AUTHORIZATIONS times.
        let mut authorizations = 0;
        loop {
            self.challenge = None;
            let result = self.round_trip(method, params.clone(), cancel, seen);
            match (&result, self.challenge.take(), self.oauth.clone()) {
                (Err(Failure::Rpc(refused)), Some(challenge), Some(oauth))
                    if authorizations < MAX_AUTHORIZATIONS =>
                {
                    authorizations += 1;
                    let refused = refused.clone();
                    self.authorize(&challenge, &oauth)
                        .map_err(|why| Failure::Rpc(format!("{refused}; {why}")))?;
                    self.dead = None;
                }
                _ => return result.map(|(v, _)| v),
            }
        }
    }

    /// Sends request `method` and waits for its answer (module doc): the result and the
    /// answer's session id.
    fn round_trip(
        &mut self,
        method: &str,
        params: Value,
        cancel: Option<&AtomicBool>,
        seen: Option<&dyn Fn(super::StreamPosition)>,
    ) -> Result<(Value, Option<String>), Failure> {
        if let Some(why) = &self.dead {
            return Err(Failure::NotSent(why.clone()));
        }
        self.next_id += 1;
        let id = self.next_id;
        let body = serde_json::to_vec(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )
        .expect("a message always serializes");
        let deadline = Instant::now() + self.timeout;
        let (tx, rx) = mpsc::channel();
        let mut wire = self.wire.clone();
        let (event_tx, first_event) = mpsc::channel();
        if seen.is_some() {
            wire.first_event = Some(event_tx);
        }
        // The thread's own bound is a little later than ours, so a server that never answers is
        // reported as that ("no answer within …"), not as whatever ureq says at the same instant.
        let thread_until = deadline + THREAD_SLACK;
        std::thread::spawn(move || {
            let _ = tx.send(wire.post(&body, Some(id), thread_until));
        });
        let mut cleanup_until: Option<Instant> = None;
        let posted = loop {
            let now = Instant::now();
            if let Some(until) = cleanup_until {
                if now >= until {
                    self.dead = Some("canceled".into());
                    return Err(Failure::Canceled);
                }
            } else if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
                let until = now + CLEANUP_WINDOW;
                let _ = self.notify(
                    "notifications/cancelled",
                    json!({"requestId": id, "reason": "canceled by the user"}),
                    until,
                );
                cleanup_until = Some(until);
                continue;
            } else if now >= deadline {
                let _ = self.notify(
                    "notifications/cancelled",
                    json!({"requestId": id, "reason": "timed out"}),
                    now + GOODBYE,
                );
                self.dead = Some(format!("no answer within {} ms", self.timeout.as_millis()));
                return Err(Failure::Timeout(self.timeout));
            }
            if let (Some(seen), Ok(event_id)) = (seen, first_event.try_recv()) {
                // Journaled (the caller's) while the call goes on: a kill -9 from here on can
                // be settled from the server's replay.
                seen(super::StreamPosition {
                    server: self.server.clone(),
                    session_id: self.wire.session.clone(),
                    protocol_version: self.protocol_version.clone(),
                    request_id: id,
                    event_id,
                });
            }
            match rx.recv_timeout(POLL) {
                Ok(result) => break result,
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => {
                    break Err(PostError::Broken("the request thread ended".into()));
                }
            }
        };
        let canceled = cleanup_until.is_some();
        let posted = match posted {
            Ok(p) => p,
            Err(e) => return Err(self.failure(e, canceled)),
        };
        let Some(answer) = posted.answer else {
            self.dead = Some("the server accepted a request without answering it".into());
            return Err(Failure::Broken(
                "the server accepted the request (HTTP 202) without answering it".into(),
            ));
        };
        if let Some(error) = answer.get("error") {
            if canceled {
                // An error answer to a canceled call does not prove it did nothing.
                self.dead = Some("canceled".into());
                return Err(Failure::Canceled);
            }
            let text = error["message"].as_str().unwrap_or("no message");
            return Err(Failure::Rpc(self.scrub(&format!(
                "the server answered with error {}: {text}",
                error["code"]
            ))));
        }
        Ok((
            answer.get("result").cloned().unwrap_or(Value::Null),
            posted.session,
        ))
    }

    /// The [`Failure`] of a POST that brought no answer.
    fn failure(&mut self, error: PostError, canceled: bool) -> Failure {
        match error {
            PostError::NotSent(why) => Failure::NotSent(self.scrub(&why)),
            PostError::Refused(why) => Failure::Rpc(self.scrub(&why)),
            PostError::Unauthorized { why, challenge } => {
                // Not run. A later call connects (and authorizes) again.
                self.challenge = Some(challenge);
                self.dead = Some("the server refused the token".into());
                Failure::Rpc(self.scrub(&why))
            }
            PostError::Expired => {
                self.expired = true;
                self.dead = Some("the server forgot the session".into());
                Failure::NotSent(
                    "the server no longer knows this client's session (HTTP 404), so it did not \
                     run the request; a new session is started for later calls"
                        .into(),
                )
            }
            PostError::Broken(why) => {
                let why = self.scrub(&why);
                self.dead = Some(why.clone());
                if canceled {
                    Failure::Canceled
                } else {
                    Failure::Broken(why)
                }
            }
        }
    }

    /// POSTs a notification, waiting at most until `until`.
    fn notify(&mut self, method: &str, params: Value, until: Instant) -> Result<(), Failure> {
        let body =
            serde_json::to_vec(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
                .expect("a message always serializes");
        match self.wire.post(&body, None, until) {
            Ok(_) => Ok(()),
            Err(e) => Err(self.failure(e, false)),
        }
    }

    /// `text` without secrets: the redaction of every message, and this client's token.
    fn scrub(&self, text: &str) -> String {
        scrub(text, self.wire.token.as_deref())
    }
}

fn scrub(text: &str, token: Option<&str>) -> String {
    let mut text = text.to_string();
    if let Some(token) = token.filter(|t| !t.is_empty()) {
        text = text.replace(token, crate::redact::MARK);
    }
    crate::redact::redact(&text)
}

impl Drop for HttpClient {
    /// Ends the session the server named, if it still knows it (which also ends its event
    /// streams, and with them the thread reading the standalone one).
    fn drop(&mut self) {
        self.stop_listening();
        if self.wire.session.is_none() || self.expired {
            return;
        }
        let mut call = self
            .wire
            .agent
            .delete(self.wire.endpoint.as_str())
            .config()
            .timeout_global(Some(GOODBYE))
            .build();
        for (name, value) in self.wire.headers() {
            call = call.header(name, value);
        }
        let _ = call.call();
    }
}

impl Wire {
    fn exchanges(&self) -> MutexGuard<'_, Vec<String>> {
        self.exchanges.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The headers of every message but the `Content-Type` and `Accept` of a POST.
    fn headers(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(t) = &self.token {
            out.push(("Authorization", format!("Bearer {t}")));
        }
        if let Some(s) = &self.session {
            out.push(("Mcp-Session-Id", s.clone()));
        }
        if let Some(v) = &self.version {
            out.push(("MCP-Protocol-Version", v.clone()));
        }
        out
    }

    /// POSTs `body` (a request with id `id`, or a notification or response) and reads the
    /// answer, all before `until`.
    fn post(&self, body: &[u8], id: Option<u64>, until: Instant) -> Result<Posted, PostError> {
        let mut target = self.endpoint.clone();
        for _ in 0..=MAX_REDIRECTS {
            let remaining = until.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(PostError::NotSent(
                    "the time ran out before it was sent".into(),
                ));
            }
            let mut call = self
                .agent
                .post(target.as_str())
                .config()
                .timeout_global(Some(remaining))
                .build()
                .header("Content-Type", "application/json")
                .header("Accept", "application/json, text/event-stream");
            for (name, value) in self.headers() {
                call = call.header(name, value);
            }
            let response = call.send(body).map_err(classify)?;
            let status = response.status().as_u16();
            if (300..400).contains(&status) {
                target = self.redirect(&target, status, &response)?;
                continue;
            }
            let session = match response.headers().get("mcp-session-id") {
                None => None,
                Some(v) => {
                    Some(session_id(v.as_bytes()).map_err(|e| PostError::Broken(e.message))?)
                }
            };
            if status == 404 && self.session.is_some() {
                return Err(PostError::Expired);
            }
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .split(';')
                .next()
                .unwrap_or_default()
                .trim()
                .to_ascii_lowercase();
            let challenge = response
                .headers()
                .get("www-authenticate")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            let step_up = status == 403 && challenge.contains("insufficient_scope");
            if status == 401 || step_up {
                let text = error_body(response);
                let what = if step_up {
                    "403 (the token lacks a scope)"
                } else {
                    "401 (not authorized)"
                };
                return Err(PostError::Unauthorized {
                    why: format!("the server answered HTTP {what}{text} (the request was not run)"),
                    challenge,
                });
            }
            if !(200..300).contains(&status) {
                let text = error_body(response);
                let why = format!("the server answered HTTP {status}{text}");
                return Err(if (400..500).contains(&status) {
                    PostError::Refused(format!("{why} (the request was not run)"))
                } else {
                    PostError::Broken(why)
                });
            }
            let Some(id) = id else {
                return Ok(Posted {
                    answer: None,
                    session,
                }); // a notification or a response: 202 (or any 2xx) is all it gets
            };
            if status == 202 {
                return Ok(Posted {
                    answer: None,
                    session,
                });
            }
            let answer = match content_type.as_str() {
                "application/json" => json_answer(response, id)?,
                "text/event-stream" => self.stream_answer(response, id, until)?,
                other => {
                    return Err(PostError::Broken(format!(
                        "the server answered with content type {} (neither application/json nor \
                         text/event-stream)",
                        crate::text::preview(&format!("{other:?}"), 60)
                    )));
                }
            };
            return Ok(Posted {
                answer: Some(answer),
                session,
            });
        }
        Err(PostError::NotSent(format!(
            "more than {MAX_REDIRECTS} redirects; none followed further"
        )))
    }

    /// Where a 3xx answer sends the POST: a 307/308 to the same origin; anything else is
    /// refused (nothing was run).
    fn redirect(
        &self,
        from: &url::Url,
        status: u16,
        response: &ureq::http::Response<ureq::Body>,
    ) -> Result<url::Url, PostError> {
        let location = response
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let shown = crate::text::preview(&format!("{location:?}"), 120);
        let Ok(next) = from.join(location) else {
            return Err(PostError::NotSent(format!(
                "the server redirected (HTTP {status}) to {shown}, which is not a URL"
            )));
        };
        if next.origin() != self.endpoint.origin() {
            return Err(PostError::NotSent(format!(
                "the server redirected (HTTP {status}) to another origin, {}; kxen-agent does \
                 not follow it (the request and its token stay with the configured server): \
                 put the new address in `url`",
                crate::text::preview(&next.origin().ascii_serialization(), 120)
            )));
        }
        if !matches!(status, 307 | 308) {
            return Err(PostError::NotSent(format!(
                "the server redirected (HTTP {status}) to {shown}; only 307 and 308 keep a POST \
                 a POST: put the new address in `url`"
            )));
        }
        Ok(next)
    }

    /// Reads the SSE answer to request `id`: server requests in it are answered
    /// ([`super::inbound`]), notifications and other ids are skipped. A stream that ends or
    /// breaks before the answer, after the server gave an event id, is resumed as the transport
    /// says: after the server's `retry` delay, a GET with `Last-Event-ID` (see [`Self::resume`]).
    fn stream_answer(
        &self,
        response: ureq::http::Response<ureq::Body>,
        id: u64,
        until: Instant,
    ) -> Result<Value, PostError> {
        let mut response = response;
        let mut last_id: Option<String> = None;
        let mut retry: Option<u64> = None;
        let mut idle_resumes = 0;
        let mut reported = self.first_event.is_none();
        loop {
            let mut events = events_of(response);
            let ended = match self.read_answer(&mut events, id, until, &mut reported) {
                Ok(answer) => return Ok(answer),
                Err(ended) => ended,
            };
            retry = events.retry().or(retry);
            let progressed = events
                .last_event_id()
                .is_some_and(|e| last_id.as_deref() != Some(e));
            if let Some(e) = events.last_event_id() {
                last_id = Some(e.to_string());
            }
            let why = match ended {
                StreamEnd::Fatal(error) => return Err(error),
                StreamEnd::Resumable(why) => why,
            };
            let Some(event_id) = last_id.clone() else {
                return Err(PostError::Broken(format!(
                    "{why}, and the server gave no event id to resume it from"
                )));
            };
            idle_resumes = if progressed { 0 } else { idle_resumes + 1 };
            if idle_resumes > MAX_IDLE_RESUMES {
                return Err(PostError::Broken(format!(
                    "{why}; {MAX_IDLE_RESUMES} resumptions in a row brought no new event"
                )));
            }
            let delay = Duration::from_millis(retry.unwrap_or(DEFAULT_RETRY_MS));
            if Instant::now() + delay >= until {
                return Err(PostError::Broken(format!(
                    "{why}; no time was left to resume it after the server's retry delay ({} ms)",
                    delay.as_millis()
                )));
            }
            std::thread::sleep(delay);
            response = self.resume(&event_id, until).map_err(|e| {
                PostError::Broken(format!(
                    "{why}; resuming it after event {} failed: {e}",
                    crate::text::preview(&format!("{event_id:?}"), 60)
                ))
            })?;
        }
    }

    /// GET the endpoint with `Last-Event-ID: after`: the server replays what followed that
    /// event on a new SSE stream. Anything but a 2xx event stream means the stream cannot be
    /// resumed.
    fn resume(
        &self,
        after: &str,
        until: Instant,
    ) -> Result<ureq::http::Response<ureq::Body>, String> {
        let remaining = until.saturating_duration_since(Instant::now());
        let mut call = self
            .agent
            .get(self.endpoint.as_str())
            .config()
            .timeout_global(Some(remaining))
            .build()
            .header("Accept", "text/event-stream")
            .header("Last-Event-ID", after);
        for (name, value) in self.headers() {
            call = call.header(name, value);
        }
        let response = call.call().map_err(|e| e.to_string())?;
        let status = response.status().as_u16();
        let event_stream = is_event_stream(&response);
        if !(200..300).contains(&status) || !event_stream {
            return Err(format!(
                "the server answered HTTP {status}{}",
                if event_stream {
                    ""
                } else {
                    " without an event stream"
                }
            ));
        }
        Ok(response)
    }

    /// Reads `events` until the answer to request `id`, answering the server's requests.
    /// The first event id (once `reported` is false) goes to [`Wire::first_event`].
    fn read_answer<R: std::io::BufRead>(
        &self,
        events: &mut Events<R>,
        id: u64,
        until: Instant,
        reported: &mut bool,
    ) -> Result<Value, StreamEnd> {
        loop {
            let next = events.next_event();
            if !*reported
                && let (Some(tx), Some(event_id)) = (&self.first_event, events.last_event_id())
            {
                *reported = true;
                let _ = tx.send(event_id.to_string());
            }
            let event = match next {
                Ok(Some(event)) => event,
                Ok(None) => {
                    return Err(StreamEnd::Resumable(
                        "the server's event stream ended without the answer".into(),
                    ));
                }
                Err(why) if events.read_failed() => return Err(StreamEnd::Resumable(why)),
                Err(why) => return Err(StreamEnd::Fatal(PostError::Broken(why))),
            };
            if event.name != "message" || event.data.trim().is_empty() {
                continue;
            }
            let message: Value = serde_json::from_str(&event.data).map_err(|_| {
                StreamEnd::Fatal(PostError::Broken(format!(
                    "the server's event stream carried something that is not JSON: {}",
                    crate::text::preview(&event.data, 120)
                )))
            })?;
            for message in messages(message) {
                if let Some(method) = message.get("method").and_then(Value::as_str) {
                    if message.get("id").is_some() {
                        // A request of the server, answered at once ([`super::inbound`]).
                        let answered = self.answerer.answer(&message);
                        self.exchanges().extend(answered.record);
                        let body = serde_json::to_vec(&answered.reply).expect("serializes");
                        self.post(&body, None, until).map_err(|e| {
                            StreamEnd::Fatal(match e {
                                PostError::NotSent(why)
                                | PostError::Refused(why)
                                | PostError::Unauthorized { why, .. }
                                | PostError::Broken(why) => PostError::Broken(format!(
                                    "answering the server's {method} request failed: {why}"
                                )),
                                PostError::Expired => PostError::Broken(
                                    "the server forgot the session while a request was running"
                                        .into(),
                                ),
                            })
                        })?;
                    }
                    continue; // a notification (progress, logging…): nothing uses them
                }
                if is_answer_to(&message, id) {
                    return Ok(message);
                }
                // An answer to another request: a server mixing up ids; skipped, bounded by
                // the stream's size and the deadline.
            }
        }
    }
}

/// Why an SSE stream brought no answer.
enum StreamEnd {
    /// It ended, or the connection broke: resumable if the server gave an event id.
    Resumable(String),
    /// The server broke the protocol or a limit: never resumed.
    Fatal(PostError),
}

/// Whether `response` is an SSE stream (`Content-Type: text/event-stream`).
/// The SSE events of `response`'s body, each line and event bounded ([`MAX_BODY`]) and the
/// whole stream too ([`MAX_STREAM`]): a live call's stream and a replayed one are read alike.
fn events_of(
    response: ureq::http::Response<ureq::Body>,
) -> Events<BufReader<ureq::BodyReader<'static>>> {
    let reader = response
        .into_body()
        .into_with_config()
        .limit(u64::MAX)
        .reader();
    Events::new(BufReader::new(reader), MAX_BODY, MAX_STREAM)
}

fn is_event_stream(response: &ureq::http::Response<ureq::Body>) -> bool {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| {
            t.trim_start()
                .to_ascii_lowercase()
                .starts_with("text/event-stream")
        })
}

/// The messages of one JSON value: itself, or the items of a batch (2025-03-26).
fn messages(value: Value) -> Vec<Value> {
    match value {
        Value::Array(items) => items,
        other => vec![other],
    }
}

fn is_answer_to(message: &Value, id: u64) -> bool {
    message.get("id").and_then(Value::as_u64) == Some(id)
        && (message.get("result").is_some() || message.get("error").is_some())
}

/// The JSON body answering request `id`.
fn json_answer(
    mut response: ureq::http::Response<ureq::Body>,
    id: u64,
) -> Result<Value, PostError> {
    let bytes = response
        .body_mut()
        .with_config()
        .limit(MAX_BODY as u64)
        .read_to_vec()
        .map_err(|e| PostError::Broken(format!("reading the answer failed: {e}")))?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| {
        PostError::Broken(format!(
            "the server's answer is not JSON: {}",
            crate::text::preview(&String::from_utf8_lossy(&bytes), 120)
        ))
    })?;
    let mut ids = Vec::new();
    for message in messages(value) {
        if is_answer_to(&message, id) {
            return Ok(message);
        }
        ids.push(crate::text::preview(&message["id"].to_string(), 40));
    }
    Err(PostError::Broken(format!(
        "the server's answer is not the answer to request {id} (it answers id {})",
        if ids.is_empty() {
            "none".to_string()
        } else {
            ids.join(", ")
        }
    )))
}

/// ": <excerpt of the body>" of an error answer, or "" (the excerpt is redacted by the caller).
fn error_body(mut response: ureq::http::Response<ureq::Body>) -> String {
    let Ok(bytes) = response
        .body_mut()
        .with_config()
        .limit(64 * 1024)
        .read_to_vec()
    else {
        return String::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    // Redacted whole before it is cut (a secret straddling the cut would keep its head).
    format!(
        ": {}",
        crate::text::preview(&crate::redact::redact(text), EXCERPT)
    )
}

/// A session id as the transport allows it: 1 to [`MAX_SESSION_ID`] visible ASCII characters.
fn session_id(raw: &[u8]) -> Result<String, Error> {
    if raw.is_empty()
        || raw.len() > MAX_SESSION_ID
        || !raw.iter().all(|b| (0x21..=0x7e).contains(b))
    {
        let shown: String = String::from_utf8_lossy(&raw[..raw.len().min(40)])
            .escape_debug()
            .collect();
        return Err(Error::external(format!(
            "the server sent an Mcp-Session-Id that is not 1 to {MAX_SESSION_ID} visible ASCII \
             characters (\"{shown}\"…, {} bytes)",
            raw.len()
        )));
    }
    Ok(String::from_utf8_lossy(raw).into_owned())
}

/// Whether a failed exchange reached the server: errors before a byte was sent are
/// [`PostError::NotSent`]; every other one may have been acted on.
fn classify(error: ureq::Error) -> PostError {
    use std::io::ErrorKind;
    use ureq::Error as E;
    use ureq::Timeout as T;
    let text = error.to_string();
    match error {
        E::HostNotFound
        | E::ConnectionFailed
        | E::BadUri(_)
        | E::Http(_)
        | E::Tls(_)
        | E::Timeout(T::Resolve | T::Connect) => {
            PostError::NotSent(format!("cannot reach the server: {text}"))
        }
        E::Io(ref io)
            if matches!(
                io.kind(),
                ErrorKind::ConnectionRefused | ErrorKind::AddrNotAvailable | ErrorKind::NotFound
            ) =>
        {
            PostError::NotSent(format!("cannot reach the server: {text}"))
        }
        E::Timeout(_) => PostError::Broken(format!("no answer in time: {text}")),
        _ => PostError::Broken(format!(
            "the connection failed after the request was sent: {text}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_visible_ascii() {
        assert_eq!(session_id(b"abc-123").unwrap(), "abc-123");
        for bad in [&b""[..], b"a b", b"a\x01b", b"\xc3\xa9", &[b'x'; 600]] {
            assert!(session_id(bad).is_err(), "{bad:?}");
        }
        assert!(session_id(b"a\rb").unwrap_err().message.contains("\\r"));
    }

    #[test]
    fn the_token_is_scrubbed_from_messages() {
        assert_eq!(
            scrub("got Bearer tok-123456", Some("tok-123456")),
            "got Bearer [redacted]"
        );
    }
}
