//! Spans from run events: [`TracingSink`] passes every event on to the sink it wraps and turns
//! the run's life into spans, so the agent loop needs no tracing code.
//!
//! The tree: `invoke_agent` (one per attempt of the run: a resume is another one in the same
//! trace) → `chat` (one per model call: from the moment the run waits for the model — its start,
//! or the last tool of a turn finishing — to its answer) → `execute_tool` (from the journaled
//! start to the outcome; a call held for approval is an `execute_tool` span with outcome
//! `awaitingApproval`, a call refused without running one with `refused`). Every span carries
//! `kxen.session.id` and `kxen.run.id`. Attribute values are ids, names, statuses and counts
//! only — unless the config opts in (`[telemetry] content = true`): then the task, the model's
//! text, each call's arguments and the start of its output too, redacted and cut to
//! [`CONTENT_BYTES`].
//!
//! While a tool call runs its span is registered in [`super::current`], so an MCP or LSP request
//! it makes and a `task` child it runs go under it. A child's run has a sink of its own
//! ([`TracingSink::for_child`]) in the parent's trace, rooted at the parent's `task` span.

use std::collections::HashMap;

use serde_json::Value as Json;

use super::current::{self, Parent};
use super::export::Queue;
use super::span::{self, Kind, Span, Status, Value};
use crate::events::{Event, EventSink};
use crate::state::StateDir;
use crate::usage::UsageRecord;

/// Which model answer a `chat` span stands for, so the tool calls of one answer share it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// The answer of turn N of this attempt, told by the loop's progress reports.
    Turn(u64),
    /// A journaled message: a compaction summary, or an earlier attempt's answer whose calls
    /// this attempt runs (found in the journal).
    Message(String),
}

/// A span being measured.
struct Open {
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    name: String,
    kind: Kind,
    start_ns: u64,
    attributes: Vec<(&'static str, Value)>,
}

/// The most bytes of one content attribute (`content = true`); longer text is cut.
pub const CONTENT_BYTES: usize = 4096;

pub struct TracingSink<'a> {
    inner: &'a mut dyn EventSink,
    queue: Queue,
    /// `[telemetry] content`: prompts, arguments and outputs go into attributes.
    content: bool,
    /// A `task` child's sink: the parent's `task` span, whose trace the child's spans join.
    under: Option<Parent>,
    /// `kxen.task.depth` of a child's run.
    depth: Option<u64>,
    /// The model's text of the answer being received (`content = true`).
    model_text: Option<String>,
    /// `gen_ai.provider.name` and `gen_ai.request.model` of the run's model calls.
    provider: Option<String>,
    model: Option<String>,
    session_id: String,
    run_id: String,
    trace_id: [u8; 16],
    run: Option<Open>,
    /// Since when the run waits for the model (its start, or the end of a turn's last tool):
    /// the start of the next `chat` span.
    waiting_since: Option<u64>,
    /// The answer of the last model call, and its span (the parent of its tools).
    last_chat: Option<(Option<Answer>, [u8; 8])>,
    tools: HashMap<String, Open>,
    journal: Option<JournalTail>,
    state: Option<StateDir>,
    /// The run's last [`Progress`](crate::events::Progress) report (turn, tokens so far).
    progress: Option<crate::events::Progress>,
    /// The tokens of the model call that answered last: the difference of the two progress
    /// reports around it (the loop reports before a call and after its answer, with the same
    /// turn). The final answer's `chat` span carries them; its message is in no journal record.
    answered: Option<UsageRecord>,
    /// The turn whose model call answered last in this attempt (two progress reports of the
    /// same turn): the answer the next tool calls belong to.
    answered_turn: Option<u64>,
}

impl<'a> TracingSink<'a> {
    /// `provider_info` is the run record's description of the provider (`kind`, `model`).
    /// `state` is where the run's journal is read to tell which model call a tool call of an
    /// earlier attempt's answer belongs to (events do not say; the loop's progress reports tell
    /// it for this attempt's own answers).
    pub fn new(
        inner: &'a mut dyn EventSink,
        queue: Queue,
        provider_info: Option<&Json>,
        state: &StateDir,
        content: bool,
    ) -> TracingSink<'a> {
        let field = |key: &str| {
            provider_info
                .and_then(|p| p[key].as_str())
                .map(str::to_string)
        };
        TracingSink {
            inner,
            queue,
            content,
            under: None,
            depth: None,
            model_text: None,
            provider: field("kind"),
            model: field("model"),
            session_id: String::new(),
            run_id: String::new(),
            trace_id: [0; 16],
            run: None,
            waiting_since: None,
            last_chat: None,
            progress: None,
            answered: None,
            answered_turn: None,
            tools: HashMap::new(),
            journal: None,
            state: Some(state.clone()),
        }
    }

    /// The sink of a `task` child's run (depth `depth`): its spans join `under`'s trace, its
    /// `invoke_agent` span a child of `under` (the parent's `execute_tool task` span).
    pub fn for_child(
        inner: &'a mut dyn EventSink,
        queue: Queue,
        provider_info: Option<&Json>,
        state: &StateDir,
        content: bool,
        under: Parent,
        depth: u64,
    ) -> TracingSink<'a> {
        let mut sink = TracingSink::new(inner, queue, provider_info, state, content);
        sink.under = Some(under);
        sink.depth = Some(depth);
        sink
    }

    /// `text` as a content attribute: redacted (every credential this process knows), then cut
    /// to [`CONTENT_BYTES`] on a character boundary.
    fn content_value(text: &str) -> Value {
        Value::Str(Self::clipped(text))
    }

    /// `text` as the one text part of a message of `role`, in the GenAI conventions' JSON form
    /// of `gen_ai.input.messages` / `gen_ai.output.messages` (the text redacted and cut).
    fn message_value(role: &str, text: &str) -> Value {
        let parts = serde_json::json!([{"type": "text", "content": Self::clipped(text)}]);
        Value::Str(serde_json::json!([{"role": role, "parts": parts}]).to_string())
    }

    fn clipped(text: &str) -> String {
        let mut text = crate::redact::redact(text);
        if text.len() > CONTENT_BYTES {
            let mut cut = CONTENT_BYTES;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            let more = text.len() - cut;
            text.truncate(cut);
            text.push_str(&format!("… [{more} more bytes]"));
        }
        text
    }

    fn open(&self, name: String, kind: Kind, parent: Option<[u8; 8]>) -> Open {
        Open {
            span_id: span::span_id(),
            parent,
            name,
            kind,
            start_ns: span::now_ns(),
            attributes: vec![
                ("kxen.session.id", Value::from(self.session_id.as_str())),
                ("kxen.run.id", Value::from(self.run_id.as_str())),
            ],
        }
    }

    fn close(&mut self, open: Open, status: Status, message: &str) {
        self.queue.send(Span {
            trace_id: self.trace_id,
            span_id: open.span_id,
            parent: open.parent,
            name: open.name,
            kind: open.kind,
            start_ns: open.start_ns,
            end_ns: span::now_ns(),
            attributes: open.attributes,
            status,
            status_message: message.to_string(),
        });
    }

    /// Ends the model call that produced message `message_id` (if it is a new one): a `chat`
    /// span from when the run began waiting for the model until now.
    fn chat(&mut self, answer: Option<Answer>, usage: Option<UsageRecord>, finish: &str) {
        if answer.is_some() && self.last_chat.as_ref().map(|(a, _)| a) == Some(&answer) {
            return; // another call of the same model answer
        }
        let Some(start) = self.waiting_since.take() else {
            return;
        };
        let parent = self.run.as_ref().map(|r| r.span_id);
        let name = match &self.model {
            Some(m) => format!("chat {m}"),
            None => "chat".to_string(),
        };
        let mut chat = self.open(name, Kind::Client, parent);
        chat.start_ns = start;
        chat.attributes
            .push(("gen_ai.operation.name", "chat".into()));
        if let Some(p) = &self.provider {
            chat.attributes
                .push(("gen_ai.provider.name", p.clone().into()));
        }
        if let Some(m) = &self.model {
            chat.attributes
                .push(("gen_ai.request.model", m.clone().into()));
        }
        chat.attributes
            .push(("gen_ai.response.finish_reasons", finish.into()));
        if let Some(u) = usage {
            chat.attributes
                .push(("gen_ai.usage.input_tokens", Value::from(u.input_tokens)));
            chat.attributes
                .push(("gen_ai.usage.output_tokens", Value::from(u.output_tokens)));
        }
        if let Some(text) = self.model_text.take().filter(|t| !t.is_empty()) {
            chat.attributes.push((
                "gen_ai.output.messages",
                Self::message_value("assistant", &text),
            ));
        }
        self.last_chat = Some((answer, chat.span_id));
        self.close(chat, Status::Unset, "");
    }

    /// The assistant message (and its usage) that asked for operation `op_id`, from the
    /// journal's `started` / `awaitingApproval` record.
    fn message_of(&mut self, op_id: &str) -> (Option<String>, Option<UsageRecord>) {
        if self.journal.is_none()
            && let Some(state) = &self.state
        {
            let path = state.session(&self.session_id).run(&self.run_id).journal();
            self.journal = Some(JournalTail::new(path));
        }
        match &mut self.journal {
            Some(tail) => tail.lookup(op_id),
            None => (None, None),
        }
    }

    /// Tool call `op_id` starts or is held: the model call whose answer asked for it ended (if
    /// it is a new one), and the run no longer waits for the model.
    ///
    /// A call of an answer this attempt received belongs to the last answered turn, with the
    /// tokens of that call's progress reports: nothing is read. Only a call of an earlier
    /// attempt's answer (a resume runs an approved or recovered call before any model call)
    /// is looked up in the journal, for its message and usage. (Reading the journal's new tail
    /// for every call cost a tool call a seek, two reads and a JSON parse on the run's thread.)
    fn turn_of(&mut self, op_id: &str) {
        match self.answered_turn {
            Some(turn) => {
                let usage = self.answered;
                self.chat(Some(Answer::Turn(turn)), usage, "tool_calls");
            }
            None => {
                let (message, usage) = self.message_of(op_id);
                self.chat(message.map(Answer::Message), usage, "tool_calls");
            }
        }
        self.waiting_since = None;
    }

    fn tool_span(&self, op_id: Option<&str>, tool: &str) -> Open {
        let parent = self
            .last_chat
            .as_ref()
            .map(|(_, id)| *id)
            .or(self.run.as_ref().map(|r| r.span_id));
        let mut open = self.open(format!("execute_tool {tool}"), Kind::Internal, parent);
        open.attributes
            .push(("gen_ai.operation.name", "execute_tool".into()));
        open.attributes.push(("gen_ai.tool.name", tool.into()));
        if let Some(op) = op_id {
            open.attributes.push(("kxen.op.id", op.into()));
        }
        open
    }

    /// Ends the attempt's span (and anything still open under it).
    fn end_run(&mut self, status: &str, error: Option<&str>, extra: Vec<(&'static str, Value)>) {
        // A completed run ended with the model's final answer: that call ends with the run. A
        // run that stopped (input required, a cancel, a budget) may never have called it.
        if status == "completed" {
            let usage = self.answered.take();
            self.chat(None, usage, "stop");
        }
        self.waiting_since = None;
        current::run_ended(&self.run_id);
        let tools: Vec<Open> = self.tools.drain().map(|(_, o)| o).collect();
        for mut tool in tools {
            tool.attributes.push(("kxen.tool.phase", "started".into()));
            self.close(tool, Status::Unset, "");
        }
        if let Some(mut run) = self.run.take() {
            run.attributes.push(("kxen.run.status", status.into()));
            run.attributes.extend(extra);
            match error {
                Some(e) => self.close(run, Status::Error, e),
                None => self.close(run, Status::Unset, ""),
            }
        }
    }

    /// Ends what is still open (an attempt that stopped without a final event).
    pub fn finish(mut self) {
        if self.run.is_some() {
            self.end_run("interrupted", None, Vec::new());
        }
    }

    fn observe(&mut self, event: &Event) {
        match event {
            Event::SessionCreated { session_id, .. } => self.session_id = session_id.clone(),
            Event::SessionResumed { session_id, .. } => self.session_id = session_id.clone(),
            Event::RunStarted {
                session_id,
                run_id,
                task,
            } => {
                if self.run.is_some() {
                    self.end_run("interrupted", None, Vec::new());
                }
                self.session_id = session_id.clone();
                self.run_id = run_id.clone();
                self.trace_id = match &self.under {
                    Some(parent) => parent.trace_id,
                    None => span::trace_id(run_id),
                };
                let root_parent = self.under.as_ref().map(|p| p.span_id);
                let mut run = self.open("invoke_agent".into(), Kind::Internal, root_parent);
                run.attributes
                    .push(("gen_ai.operation.name", "invoke_agent".into()));
                if let Some(p) = &self.provider {
                    run.attributes
                        .push(("gen_ai.provider.name", p.clone().into()));
                }
                if let Some(depth) = self.depth {
                    run.attributes.push(("kxen.task.depth", Value::from(depth)));
                }
                if self.content {
                    run.attributes
                        .push(("gen_ai.input.messages", Self::message_value("user", task)));
                }
                // The attempt itself, for a `task` child its recovery resumes (no call span).
                current::op_started(
                    run_id,
                    current::RUN,
                    Parent {
                        trace_id: self.trace_id,
                        span_id: run.span_id,
                        session_id: session_id.clone(),
                        run_id: run_id.clone(),
                    },
                );
                self.run = Some(run);
                self.waiting_since = Some(span::now_ns());
                self.journal = None;
                self.last_chat = None;
                self.answered_turn = None;
            }
            Event::Compacted {
                message_id, usage, ..
            } => {
                // A compaction summary is a model call of its own; the next one starts now.
                let id = message_id.clone();
                self.chat(Some(Answer::Message(id)), *usage, "compaction");
                self.waiting_since = Some(span::now_ns());
            }
            Event::ModelText { text, .. } if self.content => {
                self.model_text = Some(text.clone());
            }
            Event::ToolStarted {
                op_id,
                tool,
                arguments,
                ..
            } => {
                self.turn_of(op_id);
                let mut open = self.tool_span(Some(op_id), tool);
                if self.content {
                    open.attributes.push((
                        "gen_ai.tool.call.arguments",
                        Self::content_value(&arguments.to_string()),
                    ));
                }
                current::op_started(
                    &self.run_id,
                    op_id,
                    Parent {
                        trace_id: self.trace_id,
                        span_id: open.span_id,
                        session_id: self.session_id.clone(),
                        run_id: self.run_id.clone(),
                    },
                );
                self.tools.insert(op_id.clone(), open);
            }
            Event::ToolFinished {
                op_id,
                tool,
                is_error,
                output,
                ..
            } => {
                let (mut open, outcome) =
                    match op_id.as_deref().and_then(|op| self.tools.remove(op)) {
                        Some(open) => (open, if *is_error { "error" } else { "ok" }),
                        // Answered without running (refused, unknown tool, a cancel).
                        None => (self.tool_span(op_id.as_deref(), tool), "refused"),
                    };
                open.attributes.push(("kxen.tool.outcome", outcome.into()));
                if self.content {
                    open.attributes
                        .push(("gen_ai.tool.call.result", Self::content_value(output)));
                }
                if let Some(op) = op_id.as_deref() {
                    current::op_ended(&self.run_id, op);
                }
                let status = if *is_error {
                    Status::Error
                } else {
                    Status::Unset
                };
                self.close(open, status, "");
                if self.tools.is_empty() && self.run.is_some() {
                    // The turn's tools are done (unless another call of the same answer starts
                    // next): the run waits for the model again.
                    self.waiting_since = Some(span::now_ns());
                }
            }
            Event::RunApprovalRequired {
                op_id, tool, rule, ..
            } => {
                self.turn_of(op_id);
                let mut open = self.tool_span(Some(op_id), tool);
                open.attributes
                    .push(("kxen.tool.outcome", "awaitingApproval".into()));
                open.attributes
                    .push(("kxen.approval.rule", rule.as_str().into()));
                self.close(open, Status::Unset, "");
            }
            Event::RunInputRequired { op_ids, .. } => {
                let unknown = Value::from(op_ids.len() as u64);
                self.end_run(
                    "inputRequired",
                    None,
                    vec![("kxen.run.unknown_ops", unknown)],
                );
            }
            Event::RunStopped { reason, .. } => {
                let reason = Value::from(reason.as_str());
                self.end_run(
                    "inputRequired",
                    None,
                    vec![("kxen.run.stop_reason", reason)],
                );
            }
            Event::RunFinished {
                status,
                reason,
                turns,
                usage,
                ..
            } => {
                let mut extra = vec![
                    ("kxen.run.turns", Value::from(*turns)),
                    ("gen_ai.usage.input_tokens", Value::from(usage.input_tokens)),
                    (
                        "gen_ai.usage.output_tokens",
                        Value::from(usage.output_tokens),
                    ),
                ];
                if let Some(r) = reason {
                    extra.push(("kxen.run.reason", r.as_str().into()));
                }
                let error = (status != "completed").then_some(status.as_str());
                self.end_run(status, error, extra);
            }
            _ => {}
        }
    }
}

impl EventSink for TracingSink<'_> {
    fn emit(&mut self, event: Event) {
        self.observe(&event);
        self.inner.emit(event);
    }

    fn progress(&mut self, progress: &crate::events::Progress) {
        if let Some(before) = self.progress.filter(|b| b.turn == progress.turn) {
            let (now, was) = (progress.usage, before.usage);
            let call = UsageRecord {
                input_tokens: now.input_tokens.saturating_sub(was.input_tokens),
                output_tokens: now.output_tokens.saturating_sub(was.output_tokens),
                cache_read_tokens: now.cache_read_tokens.saturating_sub(was.cache_read_tokens),
                cache_write_tokens: now
                    .cache_write_tokens
                    .saturating_sub(was.cache_write_tokens),
            };
            // A provider that reported no usage leaves the totals as they were.
            self.answered = (call != UsageRecord::default()).then_some(call);
            self.answered_turn = Some(progress.turn);
        }
        self.progress = Some(*progress);
        self.inner.progress(progress);
    }
}

/// Reads a run's journal as it grows, keeping the assistant message (and its usage) of each
/// operation: only new complete lines are read, so a long run costs its journal once.
struct JournalTail {
    path: std::path::PathBuf,
    /// Kept open once the journal exists: one open per run, not one per tool call.
    file: Option<std::fs::File>,
    offset: u64,
    ops: HashMap<String, (String, Option<UsageRecord>)>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartLine {
    op_id: String,
    message_id: String,
    #[serde(default)]
    assistant: Option<AssistantLine>,
}

#[derive(serde::Deserialize)]
struct AssistantLine {
    #[serde(default)]
    usage: Option<UsageRecord>,
}

impl JournalTail {
    fn new(path: std::path::PathBuf) -> JournalTail {
        JournalTail {
            path,
            file: None,
            offset: 0,
            ops: HashMap::new(),
        }
    }

    fn lookup(&mut self, op_id: &str) -> (Option<String>, Option<UsageRecord>) {
        if !self.ops.contains_key(op_id) {
            self.read_new();
        }
        match self.ops.get(op_id) {
            Some((m, u)) => (Some(m.clone()), *u),
            None => (None, None),
        }
    }

    fn read_new(&mut self) {
        use std::io::{Read, Seek, SeekFrom};
        if self.file.is_none() {
            self.file = std::fs::File::open(&self.path).ok();
        }
        let Some(file) = self.file.as_mut() else {
            return;
        };
        if file.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut bytes = Vec::new();
        if file.read_to_end(&mut bytes).is_err() {
            return;
        }
        // Only complete lines: a line being written is read next time.
        let Some(end) = bytes.iter().rposition(|&b| b == b'\n') else {
            return;
        };
        self.offset += end as u64 + 1;
        for line in bytes[..end].split(|&b| b == b'\n') {
            if !(line.starts_with(br#"{"phase":"started""#)
                || line.starts_with(br#"{"phase":"awaitingApproval""#))
            {
                continue;
            }
            if let Ok(start) = serde_json::from_slice::<StartLine>(line) {
                let usage = start.assistant.and_then(|a| a.usage);
                let entry = self
                    .ops
                    .entry(start.op_id)
                    .or_insert((start.message_id, None));
                if usage.is_some() {
                    entry.1 = usage;
                }
            }
        }
    }
}
