//! The live trace context of this process: under which span a deeper client call goes — an MCP
//! `tools/call`, an LSP request, a `task` child's run — none of which sees the run's event sink.
//!
//! The tracing sink of a traced run registers each tool call's span here while the call runs
//! ([`op_started`] / [`op_ended`], keyed by run and operation id); the tool executor makes the
//! call's span *current* on the thread that runs it ([`within`]); a client then measures its
//! request with [`client_call`] and sends one span under it. A `task` child finds its parent's
//! span by the parent's run and operation ids ([`op_parent`]).
//!
//! This module sits on the ground floor (it knows spans and the export queue, nothing of runs),
//! so the capability modules (`mcp`, `lsp`, `tools`) may call it. With tracing off every entry
//! point is one relaxed atomic load: nothing is allocated, locked or measured.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use super::export::Queue;
use super::span::{self, Kind, Span, Status, Value};

/// A span that others go under: its trace and id, and the Session and run ids every span of
/// that run carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub session_id: String,
    pub run_id: String,
}

/// The operation id under which a run's `invoke_agent` span of the current attempt is
/// registered (no real operation id is empty).
pub const RUN: &str = "";

/// Whether a tracer is installed (the fast path of every function here).
static ON: AtomicBool = AtomicBool::new(false);

/// The installed queue and the open tool-call spans, by (run id, operation id).
static STATE: Mutex<Option<Installed>> = Mutex::new(None);

struct Installed {
    queue: Queue,
    /// `[telemetry] content` of the traced command.
    content: bool,
    ops: HashMap<(String, String), Parent>,
}

thread_local! {
    /// The tool call this thread is running, when its run is traced.
    static CURRENT: RefCell<Option<Parent>> = const { RefCell::new(None) };
}

fn state() -> std::sync::MutexGuard<'static, Option<Installed>> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes `queue` the process's tracer (a traced command, for its duration); `content`: spans
/// may carry prompts, arguments and outputs.
pub fn install(queue: Queue, content: bool) {
    *state() = Some(Installed {
        queue,
        content,
        ops: HashMap::new(),
    });
    ON.store(true, Ordering::SeqCst);
}

/// Removes the tracer (its queue clone with it, so the exporter can drain and end).
pub fn uninstall() {
    ON.store(false, Ordering::SeqCst);
    *state() = None;
}

/// Whether a tracer is installed.
pub fn is_on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The installed queue (a `task` child's sink sends through a clone), and whether spans may
/// carry content.
pub fn queue() -> Option<(Queue, bool)> {
    if !is_on() {
        return None;
    }
    state().as_ref().map(|s| (s.queue.clone(), s.content))
}

/// Tool call `op_id` of run `run_id` is running under span `parent`.
pub fn op_started(run_id: &str, op_id: &str, parent: Parent) {
    if !is_on() {
        return;
    }
    if let Some(s) = state().as_mut() {
        s.ops
            .insert((run_id.to_string(), op_id.to_string()), parent);
    }
}

/// Tool call `op_id` of run `run_id` has ended.
pub fn op_ended(run_id: &str, op_id: &str) {
    if !is_on() {
        return;
    }
    if let Some(s) = state().as_mut() {
        s.ops.remove(&(run_id.to_string(), op_id.to_string()));
    }
}

/// Every call of run `run_id` has ended (the attempt is over).
pub fn run_ended(run_id: &str) {
    if !is_on() {
        return;
    }
    if let Some(s) = state().as_mut() {
        s.ops.retain(|(run, _), _| run != run_id);
    }
}

/// The span of running tool call `op_id` of run `run_id`, when that run is traced.
pub fn op_parent(run_id: &str, op_id: &str) -> Option<Parent> {
    if !is_on() {
        return None;
    }
    state()
        .as_ref()?
        .ops
        .get(&(run_id.to_string(), op_id.to_string()))
        .cloned()
}

/// Runs `f` (the tool call `op_id` of run `run_id`) with the call's span current on this thread.
pub fn within<T>(run_id: &str, op_id: &str, f: impl FnOnce() -> T) -> T {
    let Some(parent) = op_parent(run_id, op_id) else {
        return f();
    };
    let before = CURRENT.with(|c| c.replace(Some(parent)));
    // Restored even if `f` unwinds (the tool executor catches panics above this frame).
    struct Restore(Option<Parent>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let before = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = before);
        }
    }
    let _restore = Restore(before);
    f()
}

/// One client request being measured (see [`client_call`]).
pub struct ClientCall {
    parent: Parent,
    start_ns: u64,
}

/// Starts measuring a client request (an MCP or LSP request) of the current tool call; `None`
/// when no traced call is current on this thread.
pub fn client_call() -> Option<ClientCall> {
    if !is_on() {
        return None;
    }
    let parent = CURRENT.with(|c| c.borrow().clone())?;
    Some(ClientCall {
        parent,
        start_ns: span::now_ns(),
    })
}

impl ClientCall {
    /// Ends the request: one CLIENT span `name` under the tool call's span, with
    /// `attributes` after the Session and run ids. `message` (a server's error text, which may
    /// quote arguments or files) becomes the status message only when content is opted in.
    pub fn end(
        self,
        name: String,
        attributes: Vec<(&'static str, Value)>,
        status: Status,
        message: &str,
    ) {
        let Some((queue, content)) = queue() else {
            return;
        };
        let message = match content {
            true => crate::text::preview(&crate::redact::redact(message), 200),
            false => String::new(),
        };
        let mut all = Vec::with_capacity(attributes.len() + 2);
        all.push(("kxen.session.id", Value::from(self.parent.session_id)));
        all.push(("kxen.run.id", Value::from(self.parent.run_id)));
        all.extend(attributes);
        queue.send(Span {
            trace_id: self.parent.trace_id,
            span_id: span::span_id(),
            parent: Some(self.parent.span_id),
            name,
            kind: Kind::Client,
            start_ns: self.start_ns,
            end_ns: span::now_ns(),
            attributes: all,
            status,
            status_message: message,
        });
    }
}
