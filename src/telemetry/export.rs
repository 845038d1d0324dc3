//! The exporter: a bounded queue drained by one background thread that posts batches to the
//! collector. Nothing here can block or fail the run: a full queue drops the span (counted), a
//! slow or unreachable collector only delays this thread, and the end of the run waits at most
//! [`FLUSH_WAIT`] for what is still queued.
//!
//! What the run pays per span is one short lock and a push: the queue wakes the exporter only
//! when a batch is full (otherwise the thread wakes by itself every [`LINGER`]), and the
//! encoding (protobuf or JSON) and the request happen on the exporter thread. A wake-up per span
//! (a channel's receiver blocked in `recv`) cost the run a futex call and a context switch per
//! span, the largest part of what tracing cost a tool call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use super::otlp::{self, Origin};
use super::span::Span;
use super::{Protocol, Settings};

/// Spans waiting for the exporter thread; more are dropped.
pub const QUEUE: usize = 4096;
/// Spans per request; a full batch wakes the exporter.
const BATCH: usize = 512;
/// The exporter sends what is queued at least this often, full batch or not.
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
    shared: Arc<Shared>,
    /// Spans handed to [`Queue::send`], and those dropped on a full (or closed) queue.
    sent: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
}

/// The queue proper, shared by the senders and the exporter thread.
struct Shared {
    pending: Mutex<Pending>,
    /// Signalled when a batch is full and when the queue closes.
    ready: Condvar,
}

#[derive(Default)]
struct Pending {
    spans: Vec<Span>,
    /// [`Exporter::finish`] was called: the thread sends what is left and ends.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        // A sender cannot panic while holding the lock (a push), so poison carries no meaning.
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Queue {
    /// Queues a finished span, or drops it (counted) if the queue is full. Never blocks on the
    /// collector: the lock is held by the exporter only to take a batch.
    pub fn send(&self, span: Span) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        let mut pending = self.shared.lock();
        if pending.closed || pending.spans.len() >= QUEUE {
            drop(pending);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        pending.spans.push(span);
        let full = pending.spans.len() == BATCH;
        drop(pending);
        if full {
            self.shared.ready.notify_one();
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
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            ready: Condvar::new(),
        });
        let (finished, done) = mpsc::sync_channel(1);
        let drained = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("kxen-otlp".into())
            .spawn(move || {
                let report = drain(&settings, &drained);
                let _ = finished.send(());
                report
            });
        let thread = match thread {
            Ok(t) => t,
            // No thread, no export: the queue is closed, so every span is dropped and counted.
            Err(_) => {
                shared.lock().closed = true;
                std::thread::spawn(|| Report {
                    refused: 0,
                    last_error: Some("cannot start the exporter thread".into()),
                })
            }
        };
        Exporter {
            queue: Queue {
                shared,
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
    /// lost (dropped, refused by the collector, or still unsent at the deadline). Every sink must
    /// be finished by now: the queue closes, and a span sent later is dropped (counted).
    pub fn finish(self) -> Option<String> {
        let Exporter {
            queue,
            thread,
            done,
        } = self;
        queue.shared.lock().closed = true;
        queue.shared.ready.notify_one();
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

/// The exporter thread: takes a batch when one is full, the queue closes or [`LINGER`] passes,
/// encodes it and posts it; ends once the queue is closed and empty.
fn drain(settings: &Settings, shared: &Shared) -> Report {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(REQUEST_TIMEOUT))
        .build()
        .into();
    let origin = Origin {
        service_name: &settings.service_name,
    };
    let mut report = Report::default();
    loop {
        let batch = {
            let mut pending = shared.lock();
            if pending.spans.len() < BATCH && !pending.closed {
                pending = shared
                    .ready
                    .wait_timeout(pending, LINGER)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            if pending.spans.is_empty() && pending.closed {
                break;
            }
            match pending.spans.len() > BATCH {
                true => pending.spans.drain(..BATCH).collect(),
                false => std::mem::take(&mut pending.spans),
            }
        };
        if batch.is_empty() {
            continue;
        }
        send(settings, &agent, &origin, &batch, &mut report);
    }
    report
}

/// Posts one batch; a refusal or a failure is counted in `report`, never returned.
fn send(
    settings: &Settings,
    agent: &ureq::Agent,
    origin: &Origin<'_>,
    batch: &[Span],
    report: &mut Report,
) {
    let (content_type, body) = match settings.protocol {
        Protocol::Protobuf => ("application/x-protobuf", otlp::protobuf(origin, batch)),
        Protocol::Json => (
            "application/json",
            otlp::json(origin, batch).to_string().into_bytes(),
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
}
