//! The exporter: a bounded queue drained by one background thread that posts batches to the
//! collector. Nothing here can block or fail the run: a full queue drops the span (counted), a
//! slow or unreachable collector only delays this thread, and the end of the run waits at most
//! [`FLUSH_WAIT`] for what is still queued.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::otlp::{self, Origin};
use super::span::Span;
use super::{Protocol, Settings};

/// Spans waiting for the exporter thread; more are dropped.
pub const QUEUE: usize = 4096;
/// Spans per request.
const BATCH: usize = 512;
/// A batch is sent once this old, full or not.
const LINGER: Duration = Duration::from_millis(500);
/// The longest one request may take (connect, send, answer).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the end of a run waits for the last batch.
pub const FLUSH_WAIT: Duration = Duration::from_millis(1500);

pub struct Exporter {
    queue: Queue,
    thread: JoinHandle<Report>,
    done: Receiver<()>,
}

/// The sending end of the exporter's queue: cheap to clone, one per sink (a `task` child's run
/// and every MCP or LSP request of a traced tool call send through their own clone).
#[derive(Clone)]
pub struct Queue {
    spans: SyncSender<Span>,
    /// Spans handed to [`Queue::send`], and those dropped on a full queue.
    sent: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
}

impl Queue {
    /// Queues a finished span, or drops it (counted) if the queue is full. Never blocks.
    pub fn send(&self, span: Span) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.spans.try_send(span)
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What the exporter thread could not do.
#[derive(Debug, Default)]
struct Report {
    refused: u64,
    last_error: Option<String>,
}

impl Exporter {
    pub fn start(settings: Settings) -> Exporter {
        let (queue, spans) = mpsc::sync_channel(QUEUE);
        let (finished, done) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("kxen-otlp".into())
            .spawn(move || {
                let report = drain(&settings, &spans);
                let _ = finished.send(());
                report
            });
        let thread = match thread {
            Ok(t) => t,
            // No thread, no export: the spans are dropped and counted.
            Err(_) => std::thread::spawn(|| Report {
                refused: 0,
                last_error: Some("cannot start the exporter thread".into()),
            }),
        };
        Exporter {
            queue: Queue {
                spans: queue,
                sent: Arc::new(AtomicU64::new(0)),
                dropped: Arc::new(AtomicU64::new(0)),
            },
            thread,
            done,
        }
    }

    /// A sending end of the queue.
    pub fn queue(&self) -> Queue {
        self.queue.clone()
    }

    /// Sends what is queued, waiting at most [`FLUSH_WAIT`]; returns one warning when spans were
    /// lost (dropped, refused by the collector, or still unsent at the deadline). Every clone of
    /// the queue must be gone by now (the thread drains until the last sender is dropped).
    pub fn finish(self) -> Option<String> {
        let Exporter {
            queue,
            thread,
            done,
        } = self;
        let queued = queue.sent.load(Ordering::Relaxed);
        let dropped = queue.dropped.load(Ordering::Relaxed);
        drop(queue);
        let report = match done.recv_timeout(FLUSH_WAIT) {
            Ok(()) => thread.join().unwrap_or_default(),
            Err(_) => {
                // The collector hangs: leave the thread (the process ends soon) and say so.
                return Some(format!(
                    "telemetry: the trace collector did not take the last spans within {} ms; \
                     up to {queued} spans of this run may be missing ({dropped} dropped on a \
                     full queue)",
                    FLUSH_WAIT.as_millis()
                ));
            }
        };
        let lost = dropped + report.refused;
        (lost > 0).then(|| {
            format!(
                "telemetry: {lost} of {queued} spans were not exported ({dropped} dropped on a \
                 full queue, {} refused or unreachable){}",
                report.refused,
                report
                    .last_error
                    .map(|e| format!("; last error: {e}"))
                    .unwrap_or_default()
            )
        })
    }
}

fn drain(settings: &Settings, spans: &Receiver<Span>) -> Report {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(REQUEST_TIMEOUT))
        .build()
        .into();
    let origin = Origin {
        service_name: &settings.service_name,
    };
    let mut report = Report::default();
    let mut batch = Vec::new();
    let mut open = true;
    while open {
        let deadline = Instant::now() + LINGER;
        while batch.len() < BATCH {
            let left = deadline.saturating_duration_since(Instant::now());
            match spans.recv_timeout(left) {
                Ok(span) => batch.push(span),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        if batch.is_empty() {
            continue;
        }
        let (content_type, body) = match settings.protocol {
            Protocol::Protobuf => ("application/x-protobuf", otlp::protobuf(&origin, &batch)),
            Protocol::Json => (
                "application/json",
                otlp::json(&origin, &batch).to_string().into_bytes(),
            ),
        };
        let mut request = agent
            .post(&settings.endpoint)
            .header("Content-Type", content_type);
        for (name, value) in &settings.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        match request.send(&body[..]) {
            Ok(response) if response.status().is_success() => {}
            Ok(response) => {
                report.refused += batch.len() as u64;
                report.last_error = Some(format!("the collector answered {}", response.status()));
            }
            Err(e) => {
                report.refused += batch.len() as u64;
                // Redacted like every message (a URL's user info).
                report.last_error = Some(crate::redact::redact(&format!(
                    "{}: {e}",
                    settings.endpoint
                )));
            }
        }
        batch.clear();
    }
    report
}
