//! One model call over HTTP, with the transient-failure policy both network providers share.
//!
//! A call is sent again, after a wait, when it failed in a way that says nothing about the
//! request itself: HTTP 408, 429 and 5xx, or a connection that was reset or closed before the
//! answer was complete. Other 4xx answers are the request's fault and fail at once, and so do a
//! refused connection, an unknown host and a timeout (a wrong `base_url` or a dead server should
//! not cost minutes of waiting; the provider's `timeout_ms` already waited).
//!
//! The wait is the server's when it gives one (`retry-after-ms`, then `Retry-After` in seconds
//! or as an HTTP date), otherwise exponential backoff with jitter. Retries of one call are
//! bounded by `max_transport_retries` and by the call's time limit (the run's remaining
//! wall-clock budget): a wait that would pass it is not started. A cancel ends a wait within
//! [`CANCEL_POLL`]. These retries happen inside one model call, so the runtime counts a call
//! that still fails after them as one failure against `maxPureRetries`.

use std::time::{Duration, Instant};

use super::command::excerpt;
use super::{CallEvent, ModelRequest, effective_timeout};
use crate::error::{Error, Result};

/// Retries of one call when the config does not say.
pub const DEFAULT_MAX_TRANSPORT_RETRIES: u32 = 5;
/// The most `max_transport_retries` may be.
pub const MAX_TRANSPORT_RETRIES: u32 = 20;
/// The first backoff wait; each retry doubles it, up to [`BACKOFF_CAP`].
const BACKOFF_BASE: Duration = Duration::from_millis(500);
const BACKOFF_CAP: Duration = Duration::from_secs(30);
/// A server asking for a longer wait than this is not waited for: the call fails, saying so.
pub const MAX_SERVER_WAIT: Duration = Duration::from_secs(600);
/// How often a backoff wait looks at the cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(20);
/// How much of an error body is read (its excerpt is shorter still).
const MAX_ERROR_BODY: u64 = 64 * 1024;

/// Why one attempt failed.
pub enum Failure {
    /// Worth sending again; `wait` is the server's request, if it made one.
    Transient { why: String, wait: Option<Duration> },
    /// The call fails.
    Fatal(Error),
}

impl Failure {
    /// A failure of reading the answer: transient when the connection broke.
    pub fn reading(what: &str, e: &ureq::Error) -> Failure {
        let why = format!("{what}: reading the response failed: {e}");
        if broken_connection(e) {
            Failure::Transient { why, wait: None }
        } else {
            Failure::Fatal(Error::external(why))
        }
    }
}

/// A POST endpoint of one provider.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// `model provider `NAME` (URL)`, the start of every error message.
    pub what: String,
    pub url: String,
    agent: ureq::Agent,
    /// The provider's own limit for one attempt (`timeout_ms`).
    timeout: Duration,
    max_retries: u32,
}

impl Endpoint {
    pub fn new(name: &str, url: String, timeout: Duration, max_retries: u32) -> Endpoint {
        let mut config = ureq::Agent::config_builder().http_status_as_error(false);
        if is_loopback(&url) {
            // A local server (ollama, llama.cpp) is never reached through an HTTP(S)_PROXY from
            // the environment, whether or not NO_PROXY lists it.
            config = config.proxy(None);
        }
        Endpoint {
            what: format!("model provider `{name}` ({url})"),
            url,
            agent: config.build().into(),
            timeout,
            max_retries,
        }
    }

    /// The same endpoint, retrying transient failures at most `n` times.
    pub fn with_max_retries(mut self, n: u32) -> Endpoint {
        self.max_retries = n;
        self
    }

    /// Sends `body` with `headers` until an attempt succeeds or the policy (module docs) gives
    /// up; `read` turns a 2xx response into the answer. With `idle`, the time limit of one
    /// attempt applies to each read of the response (a stream), not to the whole exchange.
    pub fn post<T>(
        &self,
        request: &ModelRequest,
        headers: &[(&str, &str)],
        body: &[u8],
        idle: bool,
        mut read: impl FnMut(ureq::http::Response<ureq::Body>) -> std::result::Result<T, Failure>,
    ) -> Result<T> {
        let deadline = request.timeout.map(|t| Instant::now() + t);
        let mut retries = 0;
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            if left == Some(Duration::ZERO) {
                return Err(Error::external(format!(
                    "{}: the call's time limit ran out",
                    self.what
                )));
            }
            let limit = effective_timeout(self.timeout, left);
            let why = match self.attempt(limit, left, idle, headers, body) {
                Ok(response) => match read(response) {
                    Ok(answer) => return Ok(answer),
                    Err(Failure::Fatal(e)) => return Err(e),
                    Err(Failure::Transient { why, wait }) => (why, wait),
                },
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Transient { why, wait }) => (why, wait),
            };
            let (why, asked) = why;
            if retries >= self.max_retries {
                let tries = if self.max_retries == 0 {
                    String::new()
                } else {
                    format!(
                        " (after {} transport retr{}, max_transport_retries {})",
                        retries,
                        if retries == 1 { "y" } else { "ies" },
                        self.max_retries
                    )
                };
                return Err(Error::external(format!("{why}{tries}")));
            }
            let wait = asked.unwrap_or_else(|| backoff(retries));
            if wait > MAX_SERVER_WAIT {
                return Err(Error::external(format!(
                    "{why} (the server asks to wait {} s, more than the {} s kxen-agent waits)",
                    wait.as_secs(),
                    MAX_SERVER_WAIT.as_secs()
                )));
            }
            if let Some(d) = deadline
                && Instant::now() + wait >= d
            {
                return Err(Error::external(format!(
                    "{why} (not retried: waiting {} ms would pass the call's time limit, the \
                     run's wall-clock budget)",
                    wait.as_millis()
                )));
            }
            retries += 1;
            request.report(CallEvent::Retry {
                attempt: retries,
                max: self.max_retries,
                wait,
                reason: crate::redact::redact(&why),
            });
            if !sleep_unless_canceled(wait, request) {
                return Err(Error::external(format!(
                    "{}: canceled while waiting to retry",
                    self.what
                )));
            }
        }
    }

    /// One exchange: a 2xx response, or why not. `left` is what remains of the call's time
    /// limit (the run's wall-clock budget), if it has one.
    fn attempt(
        &self,
        limit: Duration,
        left: Option<Duration>,
        idle: bool,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::result::Result<ureq::http::Response<ureq::Body>, Failure> {
        let mut call = self.agent.post(&self.url).config();
        call = if idle {
            // A stream may go on for long; what must not last is a silence. The budget still
            // bounds the whole exchange: a body read outside the event loop (a JSON answer to
            // a streaming request, an error body) trickled one byte per silence would
            // otherwise outlive it.
            call.timeout_per_read(Some(limit))
                .timeout_connect(Some(limit))
                .timeout_global(left)
        } else {
            call.timeout_global(Some(limit))
        };
        let mut call = call.build().header("Content-Type", "application/json");
        for (name, value) in headers {
            call = call.header(*name, *value);
        }
        let mut response = match call.send(body) {
            Ok(r) => r,
            Err(e) => {
                // `Error::new` redacts (`crate::redact`): the key, any URL user info.
                let why = format!("{}: request failed: {e}", self.what);
                return Err(if broken_connection(&e) {
                    Failure::Transient { why, wait: None }
                } else {
                    Failure::Fatal(Error::external(why))
                });
            }
        };
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(response);
        }
        let wait = retry_after(response.headers(), crate::clock::now_millis());
        let bytes = response
            .body_mut()
            .with_config()
            .limit(MAX_ERROR_BODY)
            .read_to_vec()
            .unwrap_or_default();
        // Redacted whole before it is cut: a key straddling the cut goes too.
        let text = crate::redact::redact(String::from_utf8_lossy(&bytes).trim());
        let why = format!(
            "{} returned HTTP {status}: {}",
            self.what,
            excerpt(&text, 300)
        );
        Err(if transient_status(status) {
            Failure::Transient { why, wait }
        } else {
            Failure::Fatal(Error::external(why))
        })
    }
}

/// The key in the variable `api_key_env` names (the start-up snapshot: the process's own copy
/// was wiped, see [`crate::own_env`]); `None` without `api_key_env`. Unset or empty is exit 4.
pub fn api_key(api_key_env: Option<&str>, what: &str) -> Result<Option<String>> {
    let Some(var) = api_key_env else {
        return Ok(None);
    };
    match crate::own_env::var_os(var).and_then(|k| k.into_string().ok()) {
        Some(k) if !k.is_empty() => Ok(Some(k)),
        _ => Err(Error::invalid(format!(
            "{what}: the environment variable {var} (api_key_env) is not set"
        ))
        .with_hint(format!(
            "export {var}=… before running, or remove api_key_env from the model config"
        ))),
    }
}

/// Whether a 2xx `response` to a streaming request says it is one JSON body
/// (`application/json`, or any `…+json` type) rather than an event stream. Some servers and
/// proxies (an OpenAI-compatible gateway in front of a model that cannot stream, an older
/// llama.cpp or vLLM build, a caching proxy) ignore `stream: true`; their answer is read as the
/// non-streamed one it is, instead of failing as a malformed stream. The reply is read by what
/// it declares: anything else (`text/event-stream`, or no type at all) is read as events.
pub fn is_json(response: &ureq::http::Response<ureq::Body>) -> bool {
    let Some(kind) = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let media = kind.split(';').next().unwrap_or("").trim();
    media.eq_ignore_ascii_case("application/json") || media.to_ascii_lowercase().ends_with("+json")
}

/// The most bytes one JSON answer may have.
const MAX_JSON_BODY: u64 = 32 * 1024 * 1024;

/// The JSON body of a 2xx `response` (a non-streamed answer, or a server that answered a
/// streaming request with one body). A body that is not JSON is fatal, quoted by a short
/// redacted excerpt (a gateway may echo the request's key).
pub fn read_json_body(
    what: &str,
    mut response: ureq::http::Response<ureq::Body>,
) -> std::result::Result<serde_json::Value, Failure> {
    let bytes = response
        .body_mut()
        .with_config()
        .limit(MAX_JSON_BODY)
        .read_to_vec()
        .map_err(|e| Failure::reading(what, &e))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        Failure::Fatal(Error::external(format!(
            "{what}: the response is not JSON ({e}): {}",
            excerpt(
                &crate::redact::redact(String::from_utf8_lossy(&bytes).trim()),
                200
            )
        )))
    })
}

/// Largest streamed response, and largest single event, accepted.
const MAX_STREAM: u64 = 32 * 1024 * 1024;
const MAX_EVENT: usize = 4 * 1024 * 1024;

/// Reads the event stream of a 2xx `response`, handing each event to `on_event` until it says
/// the answer is complete (`Ok(true)`). A stream that ends first, or whose connection breaks,
/// is a transient failure (the whole call is sent again; nothing of it was kept); a silence
/// longer than the provider's `timeout_ms` is not. `deadline` (the call's time limit) and a
/// cancel are checked between reads.
///
/// `on_event` appends the answer text an event carries to the `String` it is given; that text
/// is reported as one [`CallEvent::TextDelta`] per read of the socket, not one per event. The
/// events of one read arrived together, so nobody could have seen them apart; reported one by
/// one, a burst of small deltas cost an allocation, a channel send (a thread wake-up) and an
/// event line each (benches/provider_stream.rs, provider_turns.rs), while a server that streams
/// at the model's pace still gets one delta per event, as soon as it arrives.
pub fn read_events(
    what: &str,
    response: ureq::http::Response<ureq::Body>,
    request: &ModelRequest,
    deadline: Option<Instant>,
    mut on_event: impl FnMut(&super::sse::SseEvent, &mut String) -> std::result::Result<bool, Failure>,
) -> std::result::Result<(), Failure> {
    use std::io::Read;
    let mut reader = response
        .into_body()
        .into_with_config()
        .limit(MAX_STREAM)
        .reader();
    let mut parser = super::sse::SseParser::new(MAX_EVENT);
    let mut events = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut live = String::new();
    loop {
        let n = match reader.read(&mut buf) {
            Ok(n) => n,
            Err(e) => return Err(Failure::reading(what, &ureq::Error::from(e))),
        };
        if n == 0 {
            return Err(Failure::Transient {
                why: format!("{what}: the stream ended before the answer was complete"),
                wait: None,
            });
        }
        parser.feed(&buf[..n], &mut events).map_err(|_| {
            Failure::Fatal(Error::external(format!(
                "{what}: a stream event is larger than {} MiB",
                MAX_EVENT >> 20
            )))
        })?;
        let mut done = false;
        for event in events.drain(..) {
            if !done {
                done = on_event(&event, &mut live)?;
            }
            parser.recycle(event);
        }
        if !live.is_empty() {
            request.report(CallEvent::TextDelta(std::mem::take(&mut live)));
        }
        if done {
            drain(reader);
            return Ok(());
        }
        if request.canceled() {
            return Err(Failure::Fatal(Error::external(format!(
                "{what}: canceled while the answer streamed"
            ))));
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Failure::Fatal(Error::external(format!(
                "{what}: the call's time limit (the run's wall-clock budget) ran out while the \
                 answer streamed"
            ))));
        }
    }
}

/// The most read after an answer is complete, so that the connection can be used again.
const MAX_DRAIN: u64 = 64 * 1024;

/// Reads what follows the event that completed an answer (the body's end: the last chunk of a
/// chunked body), as OpenAI's and Anthropic's own SDKs consume a stream to its end. Only a body
/// read to its end returns the connection to the agent's pool; left unread, every streamed call
/// opened a new connection (and ureq a resolver thread for it): most of what streaming cost over
/// a plain call (benches/provider_stream.rs). The answer is complete already, so a failure here
/// only costs the connection.
///
/// The reading is done on a drainer thread while the call waits for it at most [`DRAIN_WAIT`]:
/// a server that sends its last event but never ends the body held the call (and the run) until
/// `timeout_ms` ran out, with the answer in hand. A body that ends is read within microseconds
/// of its last event, so the call still returns with its connection back in the pool. One that
/// does not end keeps only the drainer, until the read timeout drops that connection; the next
/// call gets a new drainer.
fn drain(reader: impl std::io::Read + Send + 'static) {
    use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
    use std::sync::{Mutex, PoisonError};
    type Job = (Box<dyn std::io::Read + Send>, SyncSender<()>);
    static DRAINER: Mutex<Option<SyncSender<Job>>> = Mutex::new(None);
    use std::sync::atomic::{AtomicUsize, Ordering};
    /// Drainer threads alive; those beyond the current one are each stuck on a body that does
    /// not end (for at most [`DRAIN_LIMIT`] plus one read timeout).
    static LIVE: AtomicUsize = AtomicUsize::new(0);
    let queue = {
        let mut slot = DRAINER.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            if LIVE.load(Ordering::SeqCst) >= MAX_DRAINERS {
                // Enough threads wait on such servers: this connection is closed unread.
                return;
            }
            let (tx, rx) = sync_channel::<Job>(4);
            LIVE.fetch_add(1, Ordering::SeqCst);
            let started = std::thread::Builder::new()
                .name("kxen-drain".into())
                .spawn(move || {
                    for (reader, done) in rx {
                        drain_now(reader);
                        let _ = done.send(());
                    }
                    LIVE.fetch_sub(1, Ordering::SeqCst);
                });
            match started {
                Ok(_) => *slot = Some(tx),
                Err(_) => {
                    LIVE.fetch_sub(1, Ordering::SeqCst);
                }
            }
        }
        slot.clone()
    };
    let (done, finished) = sync_channel(1);
    let job: Job = (Box::new(reader), done);
    let Some(queue) = queue else {
        return drain_now(job.0);
    };
    if let Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) = queue.try_send(job) {
        // The drainer is busy with a body that does not end: this one gets a drainer of its own.
        *DRAINER.lock().unwrap_or_else(PoisonError::into_inner) = None;
        return drain(job.0);
    }
    if finished.recv_timeout(DRAIN_WAIT).is_err() {
        *DRAINER.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }
}

/// How long a call waits for the end of its body after its answer is complete.
const DRAIN_WAIT: Duration = Duration::from_millis(200);
/// How long a drainer reads one body (a server that keeps sending comments after the last
/// event would otherwise hold it for [`MAX_DRAIN`] bytes, however slowly they come).
const DRAIN_LIMIT: Duration = Duration::from_secs(5);
/// The most drainer threads at once; past that a body that has not ended is not read.
const MAX_DRAINERS: usize = 4;

/// Reads `reader` to its end, at most [`MAX_DRAIN`] bytes and, checked after each read,
/// [`DRAIN_LIMIT`]; then drops it (which closes a connection not read to its end).
fn drain_now(reader: impl std::io::Read) {
    use std::io::Read;
    let until = Instant::now() + DRAIN_LIMIT;
    let mut reader = reader.take(MAX_DRAIN);
    let mut buf = [0u8; 4096];
    while let Ok(n) = reader.read(&mut buf) {
        if n == 0 || Instant::now() >= until {
            break;
        }
    }
}

/// A stream event that is not what the API sends: the call fails (it counts against
/// `maxPureRetries`), the event's start quoted.
pub fn malformed(what: &str, why: impl std::fmt::Display, data: &str) -> Failure {
    Failure::Fatal(Error::external(format!(
        "{what}: malformed stream event ({why}): {}",
        excerpt(&crate::redact::redact(data), 200)
    )))
}

/// HTTP statuses worth a retry: timeout, rate limit, server trouble (Anthropic's 529
/// "overloaded" included).
pub fn transient_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500..=599)
}

/// Whether `e` is a connection that broke under the exchange (reset, closed early).
fn broken_connection(e: &ureq::Error) -> bool {
    use std::io::ErrorKind as K;
    match e {
        ureq::Error::Io(io) => matches!(
            io.kind(),
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof
        ),
        _ => false,
    }
}

/// The wait before retry `retry + 1`: `BACKOFF_BASE · 2^retry` capped at `BACKOFF_CAP`, of which
/// a random half is taken off ("equal jitter": many clients hit by one outage spread out, and
/// each still waits at least half the step).
pub fn backoff(retry: u32) -> Duration {
    let step = BACKOFF_BASE
        .saturating_mul(1u32.checked_shl(retry.min(16)).unwrap_or(u32::MAX))
        .min(BACKOFF_CAP);
    let mut bits = [0u8; 8];
    let unit = match getrandom::fill(&mut bits) {
        Ok(()) => (u64::from_le_bytes(bits) >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.5,
    };
    step / 2 + step.div_f64(2.0).mul_f64(unit)
}

/// The wait a server asks for: `retry-after-ms` (milliseconds, OpenAI's), else `Retry-After` as
/// seconds or as an HTTP date (RFC 9110 §10.2.3; a date in the past means now). `now_ms` is the
/// wall clock. Unreadable values are ignored (the backoff applies).
pub fn retry_after(headers: &ureq::http::HeaderMap, now_ms: i64) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64((ms / 1000.0).min(1e9)));
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs.min(1_000_000_000)));
    }
    let at = http_date_millis(value)?;
    Some(Duration::from_millis(
        at.saturating_sub(now_ms).max(0) as u64
    ))
}

/// Milliseconds since the epoch of an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`; the obsolete
/// RFC 850 and asctime forms are not sent by model APIs and are not read).
fn http_date_millis(value: &str) -> Option<i64> {
    let zoned = jiff::fmt::rfc2822::parse(value).ok()?;
    Some(zoned.timestamp().as_millisecond())
}

/// Sleeps `wait`, or less when the request is canceled; false when it was.
fn sleep_unless_canceled(wait: Duration, request: &ModelRequest) -> bool {
    let until = Instant::now() + wait;
    loop {
        if request.canceled() {
            return false;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(CANCEL_POLL));
    }
}

pub use crate::net::is_loopback;

#[cfg(test)]
mod tests {
    use super::*;
    use ureq::http::{HeaderMap, HeaderValue};

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn retry_after_reads_ms_seconds_and_dates() {
        let now = http_date_millis("Wed, 02 Dec 2026 04:00:00 GMT").unwrap();
        let at = |pairs: &[(&'static str, &str)]| retry_after(&headers(pairs), now);
        assert_eq!(
            at(&[("retry-after-ms", "1500")]),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            at(&[("retry-after-ms", "250.5"), ("retry-after", "9")]),
            Some(Duration::from_micros(250_500))
        );
        assert_eq!(at(&[("retry-after", " 7 ")]), Some(Duration::from_secs(7)));
        assert_eq!(
            at(&[("retry-after", "Wed, 02 Dec 2026 04:00:03 GMT")]),
            Some(Duration::from_secs(3))
        );
        // A date already past: retry now.
        assert_eq!(
            at(&[("retry-after", "Wed, 02 Dec 2026 03:59:00 GMT")]),
            Some(Duration::ZERO)
        );
        for junk in ["-1", "soon", "", "1e3x", "Wed, 99 Dec 2026 04:00:03 GMT"] {
            assert_eq!(at(&[("retry-after", junk)]), None, "{junk:?}");
        }
        assert_eq!(at(&[("retry-after-ms", "-5")]), None);
        assert_eq!(at(&[]), None);
    }

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        for retry in 0..40 {
            let step = (BACKOFF_BASE * 2u32.pow(retry.min(10))).min(BACKOFF_CAP);
            for _ in 0..20 {
                let wait = backoff(retry);
                assert!(wait >= step / 2 && wait <= step, "{retry}: {wait:?}");
            }
        }
        // Jitter: not every draw is the same.
        let draws: std::collections::HashSet<_> = (0..20).map(|_| backoff(3)).collect();
        assert!(draws.len() > 1);
    }

    #[test]
    fn which_statuses_are_retried() {
        for yes in [408, 429, 500, 502, 503, 504, 529] {
            assert!(transient_status(yes), "{yes}");
        }
        for no in [200, 400, 401, 403, 404, 409, 413, 422] {
            assert!(!transient_status(no), "{no}");
        }
    }

    use super::super::loopback::{Reply, serve};
    use super::super::openai::OpenAiProvider;
    use super::super::{ChatMessage, ModelResponse, Observer, Provider};
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};

    const DONE: &str = r#"{"choices":[{"message":{"role":"assistant","content":"ok"}}]}"#;

    fn provider(url: &str, retries: u32) -> OpenAiProvider {
        OpenAiProvider::new(
            "p",
            &format!("{url}/v1"),
            "m",
            None,
            Duration::from_secs(10),
        )
        .with_max_transport_retries(retries)
    }

    /// One call with `timeout` and `cancel`; returns the answer and the events it reported.
    fn call(
        p: &OpenAiProvider,
        timeout: Option<Duration>,
        cancel: &AtomicBool,
    ) -> (crate::error::Result<ModelResponse>, Vec<CallEvent>) {
        let events = Mutex::new(Vec::new());
        let observe = |e: CallEvent| events.lock().unwrap().push(e);
        let messages = [ChatMessage::user("hi")];
        let request = ModelRequest {
            timeout,
            observer: Some(Observer(&observe)),
            cancel: Some(cancel),
            ..ModelRequest::plain("execution", &messages, &[])
        };
        let answer = p.complete(&request, 0);
        (answer, events.into_inner().unwrap())
    }

    fn waits(events: &[CallEvent]) -> Vec<Duration> {
        events
            .iter()
            .map(|e| match e {
                CallEvent::Retry { wait, .. } => *wait,
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn rate_limits_and_server_errors_are_retried_as_the_server_asks() {
        let (url, seen) = serve(|n, _| match n {
            0 => Reply::Hangup,
            1 => Reply::Full {
                status: 429,
                headers: vec![
                    ("retry-after-ms", "120".into()),
                    ("retry-after", "9".into()),
                ],
                body: r#"{"error":"slow down"}"#.into(),
            },
            2 => Reply::Full {
                status: 503,
                headers: vec![("Retry-After", "0".into())],
                body: "overloaded".into(),
            },
            _ => Reply::json(200, DONE),
        });
        let started = Instant::now();
        let (answer, events) = call(&provider(&url, 5), None, &AtomicBool::new(false));
        assert_eq!(answer.unwrap().text, "ok");
        let w = waits(&events);
        // The hang-up had no server wait: the first backoff step, jittered.
        assert!(w[0] >= BACKOFF_BASE / 2 && w[0] <= BACKOFF_BASE, "{w:?}");
        assert_eq!(w[1..], [Duration::from_millis(120), Duration::ZERO]);
        assert!(started.elapsed() >= Duration::from_millis(120) + BACKOFF_BASE / 2);
        match &events[1] {
            CallEvent::Retry {
                attempt,
                max,
                reason,
                ..
            } => {
                assert_eq!((*attempt, *max), (2, 5));
                assert!(
                    reason.contains("HTTP 429") && reason.contains("slow down"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(seen.try_iter().count(), 4);
    }

    #[test]
    fn other_client_errors_are_not_retried_and_retries_are_bounded() {
        let (url, seen) = serve(|_, _| Reply::json(400, r#"{"error":"bad field"}"#));
        let (answer, events) = call(&provider(&url, 5), None, &AtomicBool::new(false));
        let e = answer.unwrap_err();
        assert!(e.message.contains("HTTP 400") && e.message.contains("bad field"));
        assert!(events.is_empty());
        assert_eq!(seen.try_iter().count(), 1);

        let (url, seen) = serve(|_, _| Reply::Full {
            status: 500,
            headers: vec![("retry-after", "0".into())],
            body: "boom".into(),
        });
        let (answer, events) = call(&provider(&url, 2), None, &AtomicBool::new(false));
        let e = answer.unwrap_err();
        assert!(
            e.message.contains("HTTP 500")
                && e.message
                    .contains("after 2 transport retries, max_transport_retries 2"),
            "{}",
            e.message
        );
        assert_eq!(events.len(), 2);
        assert_eq!(seen.try_iter().count(), 3);
        // max_transport_retries = 0: one attempt.
        let (answer, events) = call(&provider(&url, 0), None, &AtomicBool::new(false));
        assert!(answer.unwrap_err().message.contains("HTTP 500"));
        assert!(events.is_empty());
    }

    #[test]
    fn a_wait_past_the_time_limit_or_too_long_is_not_started() {
        let (url, _seen) = serve(|n, _| Reply::Full {
            status: 429,
            headers: vec![("retry-after", if n == 0 { "5" } else { "100000" }.into())],
            body: "later".into(),
        });
        let started = Instant::now();
        let (answer, events) = call(
            &provider(&url, 5),
            Some(Duration::from_secs(2)),
            &AtomicBool::new(false),
        );
        let e = answer.unwrap_err();
        assert!(e.message.contains("wall-clock budget"), "{}", e.message);
        assert!(events.is_empty());
        assert!(started.elapsed() < Duration::from_secs(2));
        let (answer, _) = call(&provider(&url, 5), None, &AtomicBool::new(false));
        assert!(
            answer
                .unwrap_err()
                .message
                .contains("asks to wait 100000 s")
        );
    }

    #[test]
    fn a_cancel_ends_a_backoff_wait_at_once() {
        let (url, _seen) = serve(|_, _| Reply::Full {
            status: 429,
            headers: vec![("retry-after", "60".into())],
            body: "later".into(),
        });
        let cancel = AtomicBool::new(false);
        let started = Instant::now();
        let (answer, events) = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                cancel.store(true, Ordering::SeqCst);
            });
            call(&provider(&url, 5), None, &cancel)
        });
        assert!(answer.unwrap_err().message.contains("canceled"));
        assert_eq!(waits(&events), [Duration::from_secs(60)]);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }

    proptest::proptest! {
        /// Whatever a server puts in the headers, reading them never panics.
        #[test]
        fn retry_after_never_panics(ms in "[ -~]{0,40}", secs in "[ -~]{0,40}") {
            let mut map = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(&ms) { map.insert("retry-after-ms", v); }
            if let Ok(v) = HeaderValue::from_str(&secs) { map.insert("retry-after", v); }
            let _ = retry_after(&map, 0);
        }
    }
}

/// Streaming over real HTTP, both wire formats: what reaches the answer, the deltas, a cut
/// stream, malformed events, the read timeout between chunks.
#[cfg(test)]
mod stream_tests {
    use super::super::anthropic::AnthropicProvider;
    use super::super::loopback::{Reply, serve};
    use super::super::openai::OpenAiProvider;
    use super::super::{ChatMessage, ModelResponse, Observer, Provider, Usage};
    use super::*;
    use serde_json::json;
    use std::sync::Mutex;

    fn sse(events: &[String], pause: Duration, end: bool) -> Reply {
        Reply::Chunks {
            status: 200,
            content_type: "text/event-stream",
            pieces: events.iter().map(|e| (pause, e.clone())).collect(),
            end,
        }
    }

    fn data(v: serde_json::Value) -> String {
        format!("data: {v}\n\n")
    }

    fn openai_events() -> Vec<String> {
        vec![
            data(
                json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]}),
            ),
            // One event cut across two chunks.
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo.\"}}]}".into(),
            "\n\n".into(),
            data(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1",
                "type": "function", "function": {"name": "read", "arguments": "{\"pa"}}]}}]}),
            ),
            data(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
                "function": {"arguments": "th\":\"a.txt\"}"}}]}, "finish_reason": "tool_calls"}]}),
            ),
            ": keep-alive\n\n".into(),
            data(
                json!({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3,
                "prompt_tokens_details": {"cached_tokens": 4}}}),
            ),
            "data: [DONE]\n\n".into(),
        ]
    }

    fn anthropic_events() -> Vec<String> {
        let ev = |name: &str, v: serde_json::Value| format!("event: {name}\ndata: {v}\n\n");
        vec![
            ev(
                "message_start",
                json!({"type": "message_start", "message": {"usage":
                {"input_tokens": 3, "output_tokens": 1, "cache_read_input_tokens": 100,
                 "cache_creation_input_tokens": 20}}}),
            ),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
            ),
            ev("ping", json!({"type": "ping"})),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "Hel"}}),
            ),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "lo."}}),
            ),
            ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            ev(
                "content_block_start",
                json!({"type": "content_block_start", "index": 1,
                "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}}),
            ),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}}),
            ),
            ev(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": "th\":\"a.txt\"}"}}),
            ),
            ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 1}),
            ),
            ev(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                "usage": {"output_tokens": 9}}),
            ),
            ev("message_stop", json!({"type": "message_stop"})),
        ]
    }

    fn openai(url: &str, timeout: Duration) -> OpenAiProvider {
        OpenAiProvider::new("p", &format!("{url}/v1"), "m", None, timeout).with_stream(true)
    }

    fn anthropic(url: &str) -> AnthropicProvider {
        AnthropicProvider::new("c", url, "m", None, Duration::from_secs(10)).with_stream(true)
    }

    fn call(p: &dyn Provider) -> (crate::error::Result<ModelResponse>, Vec<CallEvent>) {
        let events = Mutex::new(Vec::new());
        let observe = |e: CallEvent| events.lock().unwrap().push(e);
        let messages = [ChatMessage::user("hi")];
        let request = ModelRequest {
            observer: Some(Observer(&observe)),
            ..ModelRequest::plain("execution", &messages, &[])
        };
        let answer = p.complete(&request, 0);
        (answer, events.into_inner().unwrap())
    }

    fn deltas(events: &[CallEvent]) -> Vec<&str> {
        events
            .iter()
            .filter_map(|e| match e {
                CallEvent::TextDelta(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    fn check_answer(r: &ModelResponse) {
        assert_eq!(r.text, "Hello.");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].name, "read");
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "a.txt"}));
    }

    /// A keep-alive server answering every request on a connection with `events` (a chunked
    /// SSE body); returns its URL and how many connections it accepted.
    fn keep_alive(events: Vec<String>) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::io::{BufRead, BufReader, Read, Write};
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = std::sync::Arc::new(AtomicUsize::new(0));
        let count = std::sync::Arc::clone(&accepted);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                count.fetch_add(1, Ordering::SeqCst);
                let events = events.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    loop {
                        let mut length = 0;
                        let mut line = String::new();
                        while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
                            if let Some(v) =
                                line.to_ascii_lowercase().strip_prefix("content-length:")
                            {
                                length = v.trim().parse().unwrap();
                            }
                            line.clear();
                        }
                        let mut body = vec![0; length];
                        if line.is_empty() || reader.read_exact(&mut body).is_err() {
                            return;
                        }
                        let mut out = String::from(
                            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
                        );
                        for e in &events {
                            out.push_str(&format!("{:x}\r\n{e}\r\n", e.len()));
                        }
                        out.push_str("0\r\n\r\n");
                        if stream.write_all(out.as_bytes()).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (url, accepted)
    }

    #[test]
    fn a_streamed_answer_leaves_its_connection_for_the_next_call() {
        let (url, accepted) = keep_alive(openai_events());
        let p = openai(&url, Duration::from_secs(10));
        for _ in 0..3 {
            check_answer(&call(&p).0.unwrap());
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
        let (url, accepted) = keep_alive(anthropic_events());
        let p = anthropic(&url);
        for _ in 0..3 {
            check_answer(&call(&p).0.unwrap());
        }
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// Makes a provider for a server's URL.
    type Make = fn(&str) -> Box<dyn Provider>;

    /// Each streaming provider (10 s read timeout) with the events of one answer in its format.
    fn streaming_providers() -> [(Vec<String>, Make); 2] {
        [
            (openai_events(), |url| {
                Box::new(openai(url, Duration::from_secs(10)))
            }),
            (anthropic_events(), |url| Box::new(anthropic(url))),
        ]
    }

    /// A server (or proxy) that answers a streaming request with one JSON body is read by the
    /// reply's Content-Type, parameters and `+json` types included, for both providers.
    #[test]
    fn a_json_answer_to_a_streaming_request_is_read_as_json() {
        let openai_body = json!({"choices": [{"message": {"role": "assistant",
            "content": "Hello.", "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}}]}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3}});
        let anthropic_body = json!({"content": [{"type": "text", "text": "Hello."},
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.txt"}}],
            "usage": {"input_tokens": 7, "output_tokens": 3}});
        let makers = streaming_providers().map(|(_, make)| make);
        for (body, make) in [openai_body, anthropic_body].into_iter().zip(makers) {
            for kind in [
                "application/json",
                "Application/JSON; charset=utf-8",
                "application/x+json",
            ] {
                let body = body.to_string();
                let (url, seen) = serve(move |_, _| Reply::Full {
                    status: 200,
                    headers: vec![("Content-Type", kind.into())],
                    body: body.clone(),
                });
                let (answer, events) = call(make(&url).as_ref());
                let answer = answer.unwrap();
                check_answer(&answer);
                let usage = answer.usage.unwrap();
                assert_eq!((usage.input_tokens, usage.output_tokens), (7, 3));
                assert!(deltas(&events).is_empty(), "{kind}");
                assert_eq!(seen.recv().unwrap().json()["stream"], true);
            }
        }
    }

    /// A server that sends the last event of an answer but holds the body open (never ends it)
    /// gets the answer at once, not after the 10 s read timeout; the next call still works.
    #[test]
    fn an_answer_whose_body_never_ends_is_returned_without_waiting_for_its_end() {
        for (events, make) in streaming_providers() {
            let mut pieces: Vec<(Duration, String)> =
                events.iter().map(|e| (Duration::ZERO, e.clone())).collect();
            // Silent, the body open, for longer than the read timeout.
            pieces.push((Duration::from_secs(15), String::new()));
            let (url, _) = serve(move |_, _| Reply::Chunks {
                status: 200,
                content_type: "text/event-stream",
                pieces: pieces.clone(),
                end: true,
            });
            let provider = make(&url);
            for _ in 0..2 {
                let started = Instant::now();
                let (answer, _) = call(provider.as_ref());
                check_answer(&answer.unwrap());
                // Well under the 10 s it waited before (the read timeout); a loaded machine
                // still answers within this.
                assert!(
                    started.elapsed() < Duration::from_secs(5),
                    "the call waited {:?} for the body's end",
                    started.elapsed()
                );
            }
        }
    }

    /// Text is reported as it arrives: a piece that comes on its own is its own delta, at once;
    /// the events of one write are one delta (the docs of [`read_events`]).
    #[test]
    fn text_that_arrives_apart_streams_live_and_text_that_arrives_together_is_one_delta() {
        for (events, make) in streaming_providers() {
            // Everything up to the first text, a long silence, then the rest.
            let first_text = events.iter().position(|e| e.contains("Hel")).unwrap();
            let pieces: Vec<(Duration, String)> = events
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let pause = if i == first_text + 1 {
                        Duration::from_millis(300)
                    } else {
                        Duration::ZERO
                    };
                    (pause, e.clone())
                })
                .collect();
            let together = vec![(Duration::ZERO, events.concat())];
            for (pieces, expected) in [(pieces, vec!["Hel", "lo."]), (together, vec!["Hello."])] {
                let (url, _) = serve(move |_, _| Reply::Chunks {
                    status: 200,
                    content_type: "text/event-stream",
                    pieces: pieces.clone(),
                    end: true,
                });
                let (answer, seen) = call(make(&url).as_ref());
                check_answer(&answer.unwrap());
                assert_eq!(deltas(&seen), expected);
            }
        }
    }

    #[test]
    fn openai_stream_gives_the_answer_deltas_and_usage() {
        let (url, seen) = serve(|_, _| sse(&openai_events(), Duration::ZERO, true));
        let (answer, events) = call(&openai(&url, Duration::from_secs(10)));
        let r = answer.unwrap();
        check_answer(&r);
        assert_eq!(r.tool_calls[0].id, "call_1");
        assert_eq!(
            r.usage,
            Some(Usage {
                input_tokens: 7,
                output_tokens: 3,
                cache_read_tokens: 4,
                cache_write_tokens: 0
            })
        );
        assert_eq!(deltas(&events).concat(), "Hello.");
        let body = seen.recv().unwrap().json();
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
    }

    #[test]
    fn anthropic_stream_gives_the_answer_deltas_and_cache_usage() {
        let (url, seen) = serve(|_, _| sse(&anthropic_events(), Duration::ZERO, true));
        let (answer, events) = call(&anthropic(&url));
        let r = answer.unwrap();
        check_answer(&r);
        assert_eq!(
            r.usage,
            Some(Usage {
                input_tokens: 123,
                output_tokens: 9,
                cache_read_tokens: 100,
                cache_write_tokens: 20
            })
        );
        assert_eq!(deltas(&events).concat(), "Hello.");
        assert_eq!(seen.recv().unwrap().json()["stream"], true);
    }

    #[test]
    fn a_stream_cut_mid_way_is_sent_again_and_its_text_voided() {
        let cut: Vec<String> = openai_events()[..4].to_vec();
        let (url, seen) = serve(move |n, _| match n {
            0 => sse(&cut, Duration::ZERO, false),
            _ => sse(&openai_events(), Duration::ZERO, true),
        });
        let (answer, events) = call(&openai(&url, Duration::from_secs(10)));
        check_answer(&answer.unwrap());
        let retry = events
            .iter()
            .position(|e| matches!(e, CallEvent::Retry { .. }))
            .unwrap();
        match &events[retry] {
            CallEvent::Retry { reason, .. } => assert!(
                reason.contains("stream ended before the answer was complete")
                    || reason.contains("reading the response failed"),
                "{reason}"
            ),
            _ => unreachable!(),
        }
        assert_eq!(deltas(&events[..retry]).concat(), "Hello.");
        assert_eq!(deltas(&events[retry..]).concat(), "Hello.");
        assert_eq!(seen.try_iter().count(), 2);

        // Anthropic: an overloaded error event mid-stream is retried too.
        let mut overloaded = anthropic_events()[..4].to_vec();
        overloaded.push(
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n".into(),
        );
        let (url, _) = serve(move |n, _| match n {
            0 => sse(&overloaded, Duration::ZERO, true),
            _ => sse(&anthropic_events(), Duration::ZERO, true),
        });
        let (answer, events) = call(&anthropic(&url));
        check_answer(&answer.unwrap());
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, CallEvent::Retry { .. }))
                .count(),
            1
        );
    }

    #[test]
    fn malformed_events_fail_the_call_without_a_retry() {
        for bad in [
            "data: {not json\n\n".to_string(),
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":99999999}]}}]}\n\n".into(),
            "data: {\"error\":{\"message\":\"context too long\"}}\n\n".into(),
        ] {
            let events = vec![openai_events()[0].clone(), bad.clone()];
            let (url, seen) = serve(move |_, _| sse(&events, Duration::ZERO, true));
            let (answer, events) = call(&openai(&url, Duration::from_secs(10)));
            let e = answer.unwrap_err();
            assert!(
                e.message.contains("malformed stream event")
                    || e.message.contains("context too long"),
                "{bad}: {}",
                e.message
            );
            assert!(!events.iter().any(|e| matches!(e, CallEvent::Retry { .. })));
            assert_eq!(seen.try_iter().count(), 1);
        }
        for bad in [
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":7,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":-1}\n\n",
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\"}}\n\n",
        ] {
            let events = vec![anthropic_events()[0].clone(), bad.to_string()];
            let (url, _) = serve(move |_, _| sse(&events, Duration::ZERO, true));
            let (answer, _) = call(&anthropic(&url));
            let e = answer.unwrap_err();
            assert!(
                e.message.contains("malformed stream event")
                    || e.message.contains("invalid_request_error"),
                "{bad}: {}",
                e.message
            );
        }
    }

    #[test]
    fn the_timeout_applies_between_chunks_not_to_the_whole_stream() {
        // 8 pieces 150 ms apart: 1.2 s in all, more than the 500 ms timeout, and fine.
        let (url, _) = serve(|n, _| {
            let mut events = openai_events();
            if n == 1 {
                // Silent for longer than the timeout after the first piece.
                events.insert(1, String::new());
                return Reply::Chunks {
                    status: 200,
                    content_type: "text/event-stream",
                    pieces: events
                        .into_iter()
                        .enumerate()
                        .map(|(i, e)| (Duration::from_millis(if i == 1 { 1500 } else { 0 }), e))
                        .collect(),
                    end: true,
                };
            }
            sse(&events, Duration::from_millis(150), true)
        });
        let p = openai(&url, Duration::from_millis(500)).with_max_transport_retries(0);
        let started = Instant::now();
        check_answer(&call(&p).0.unwrap());
        assert!(started.elapsed() > Duration::from_millis(1000));
        let e = call(&p).0.unwrap_err();
        assert!(
            e.message.to_lowercase().contains("timeout") || e.message.contains("timed out"),
            "{}",
            e.message
        );
    }
}
