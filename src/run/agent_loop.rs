//! The agent loop with the durable tool boundary (docs/spec.md §8).
//!
//! Per model response: the assistant message is appended to the Session; then, per tool call,
//! `Started` is made durable BEFORE the tool runs, `OutcomeKnown` right after it returns, then
//! the tool result message is appended, then `Settled`. A call that cannot run (unknown tool,
//! arguments that are not an object, a tool the lock does not allow) becomes a tool error the
//! model reads, without a journal operation, since nothing happened.
//!
//! Every execution starts with recovery, so the same code continues a run after a crash at any
//! step: an outcome already recorded goes into history and the tool is not run again; a `Started`
//! without an outcome becomes `OutcomeUnknown` and the run stops as `inputRequired`; a call that
//! never started runs now — unless an earlier call of its turn is UNKNOWN (it may depend on it:
//! it waits for the resolution) or a cancel arrived (it is answered as not run); a terminal but
//! unsettled run is only settled.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::agent::AgentDefinition;
use crate::error::{Error, Result};
use crate::events::{Event, EventSink, preview};
use crate::fsx::failpoint;
use crate::host::{Exhausted, PlanHost};
use crate::ids::{self, IdKind};
use crate::journal::{BlobPointer, Journal, JournalRecord, OpPhase, ToolOutcome};
use crate::process::orphans;
use crate::provider::{
    CallEvent, ChatMessage, ModelRequest, ModelResponse, Observer, Provider, ToolCall,
};
use crate::run::conversation::Conversation;
use crate::run::repeat::RepeatGuard;
use crate::run::services::RunServices;
use crate::run::settle;
use crate::run::{approval, children, compaction, contract, prompt, verification};
use crate::session::run_record::{Attempt, FailReason, RunError, RunResult, RunState, RunStatus};
use crate::session::verify::{self, JournalIndex, MessageIndex};
use crate::session::{CallRecord, Message, MessageLog, Role, UsageRecord};
use crate::state::{RunPaths, SessionPaths, StateDir};
use crate::tools::{self, ToolOutput, ToolSchema};

#[path = "boundary.rs"]
mod boundary;
#[path = "replay.rs"]
mod replay;
pub use boundary::DEFAULT_PARALLEL_TOOLS;

/// How many characters of a tool's output go into a `toolFinished` event.
const EVENT_PREVIEW_CHARS: usize = 2000;

/// Everything one execution of a run needs. The caller holds the Session's run lease.
pub struct Execution<'a> {
    /// The provider, prices, hooks, fence, servers … of the run, built once
    /// ([`crate::run::services::RunServices`]) and borrowed here and by every tool call.
    pub services: &'a RunServices,
    pub state: &'a StateDir,
    pub session_id: &'a str,
    pub paths: &'a SessionPaths,
    /// The locked (tightened) definition.
    pub definition: &'a AgentDefinition,
    /// The tools the model may call: the lock's non-MCP capabilities and its MCP tools
    /// ([`crate::agent::DcpAgentLock::tool_names`]).
    pub capabilities: &'a [String],
    /// The lock's MCP tools (their schemas are what the model is offered).
    pub mcp_tools: &'a [crate::mcp::LockedTool],
    /// The merged policy's `mcpTools` rules: a call whose rule is `ask` waits for a human
    /// ([`crate::run::approval`]).
    pub tool_rules: &'a crate::policy::ToolRules,
    pub workspace_root: &'a Path,
    pub cancel: &'a AtomicBool,
    /// The DWP plan task the run works on: its meter and limit check ([`crate::host`]).
    pub plan: Option<&'a Mutex<PlanHost>>,
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// The run is terminal and settled.
    Finished(RunResult),
    /// Tool outcomes are unknown; a human must resolve these operations (`run resolve`).
    InputRequired(Vec<String>),
    /// Calls whose policy rule is `ask` wait for a human (`run approve` / `run deny`).
    ApprovalRequired(Vec<String>),
    /// A limit of the run's DWP plan is exhausted (or held): the run stopped before a model
    /// call, nothing pending, until `dwp resources recover` (exit 8).
    PlanLimitExhausted(Exhausted),
}

/// Executes (or continues) run `run_id` until it is terminal or needs input.
pub fn execute(ex: &Execution, run_id: &str, sink: &mut dyn EventSink) -> Result<Ending> {
    let run_paths = ex.paths.run(run_id);
    let mut run = RunState::read(&run_paths, run_id)?;
    // The log is read once, straight into the model's history (the conversation is held once).
    let mut conv = Conversation::new(
        &run.id,
        &run.task_message_id,
        prompt::system_prompt(ex.definition),
    );
    // Before anything is written, the run's record, journal and messages must agree exactly as
    // `session verify` checks them (one shared check, fed while the files are read anyway):
    // acting on damaged state could re-run an UNKNOWN operation or a finished run. Torn tails
    // are cut only once the rest agrees.
    let mut index = MessageIndex::default();
    let mut messages = MessageLog::open_deferred(&ex.paths.messages(), |m| {
        index.push(&m);
        conv.push(m);
    })?;
    let mut refs = JournalIndex::default();
    // Assistant messages the journal carries that the log lost (a power cut after the
    // `started` record that carried them was durable).
    let mut embedded = std::collections::HashMap::new();
    let mut journal = Journal::open_deferred(&run_paths.journal(), |r| {
        refs.push(r);
        if let JournalRecord::Started {
            assistant: Some(m), ..
        } = r
            && !messages.contains(&m.id)
        {
            embedded.insert(m.id.clone(), (**m).clone());
        }
    })?;
    verify::check_writer(
        &ex.paths.messages(),
        &index,
        &run_paths.run_json(),
        &run_paths.journal(),
        &run,
        &refs,
        journal.table(),
    )?;
    drop((index, refs));
    messages.repair()?;
    journal.repair()?;
    rederive_messages(&mut messages, &mut conv, journal.table(), embedded, &run.id)?;
    if run.status.is_terminal() {
        // Terminal but maybe unsettled: finish settlement without the model or any tool.
        settle::finish(&mut run, &run_paths, &mut messages)?;
        let result = run.result.clone().ok_or_else(|| {
            Error::corrupt(format!(
                "{}: terminal run without a result",
                run_paths.run_json().display()
            ))
        })?;
        // The sample of the run's last model call, if a crash kept it from being written.
        if let Some(host) = ex.plan {
            lock_host(host).before_final(&run.id, result.turns, result.usage)?;
        }
        sink.emit(finished_event(ex.session_id, &run.id, &result));
        return Ok(Ending::Finished(result));
    }
    if !messages.contains(&run.task_message_id) {
        // run.json of a new run is written before its task message; finish that step.
        let mut task = Message::new(&run.id, Role::User, run.task.clone());
        task.id = run.task_message_id.clone();
        // The model has seen nothing of this run yet: its rules are read now.
        let workspace = crate::session::SessionMeta::read(ex.paths, ex.session_id)?.workspace;
        let environment = ex.definition.spec.execution.environment_preamble == Some(true);
        task.context = crate::run::context::read(
            &workspace,
            &ex.services.context_files,
            environment.then_some(run.task.as_str()),
        )?;
        messages.append(task.clone())?;
        conv.push(task);
    }
    let crashed_marks = close_crashed_attempts(&mut run, &conv);
    // The MCP servers' processes carry the attempt mark of the first attempt of this process.
    let attempt_mark = ex
        .services
        .tools
        .mcp
        .as_deref()
        .and_then(crate::mcp::Servers::claim_attempt_mark)
        .unwrap_or_else(orphans::new_attempt_mark);
    let schemas = tools::REGISTRY.schemas(ex.capabilities, ex.mcp_tools);
    let schema_bytes = serde_json::to_string(&schemas).map_or(0, |s| s.len() as u64);
    let repeats = RepeatGuard::from_history(
        ex.definition.spec.execution.max_repeated_calls,
        &conv,
        journal.table(),
    );
    let mut lp = Loop {
        ex,
        run_paths,
        journal,
        messages,
        turns: conv.turns(),
        usage: conv.usage(),
        conv,
        schemas: Arc::new(schemas),
        schema_bytes,
        started: Instant::now(),
        attempt_mark: attempt_mark.clone(),
        crashed_marks,
        repeats,
        pending_assistant: None,
        seen: Default::default(),
    };
    run.status = RunStatus::Running;
    run.unknown_ops.clear();
    run.approval_ops.clear();
    run.plan_hold = None;
    run.attempts.push(Attempt {
        started_at: crate::clock::now_rfc3339(),
        pid: std::process::id(),
        mark: Some(attempt_mark),
        provider: ex.services.provider_info.clone(),
        ended_at: None,
        crashed: false,
        wall_clock_ms: None,
    });
    run.save(&lp.run_paths)?;
    let task = lp.conv.task().unwrap_or_default().to_string();
    sink.emit(Event::RunStarted {
        session_id: ex.session_id.to_string(),
        run_id: run.id.clone(),
        task,
    });
    if let Some(host) = ex.plan {
        for message in lock_host(host).advisories() {
            sink.emit(Event::Warning { message });
        }
        if !ex.services.tools.fence.policy().is_fenced()
            && ex.capabilities.iter().any(|c| c == "exec")
        {
            let dir = lock_host(host).plan_dir().to_path_buf();
            sink.emit(Event::Warning {
                message: format!(
                    "the policy's sandbox is \"off\": `exec` commands run unfenced and could \
                     change the plan folder {} (its journal and meter records), which only the \
                     fence keeps read-only for them",
                    dir.display()
                ),
            });
        }
    }
    let hooks = &ex.services.hooks;
    let fence = &ex.services.tools.fence;
    if !hooks.run_start.is_empty() {
        let warnings = crate::hooks::run_event(hooks, fence, ex.session_id, &run.id, None);
        for message in warnings {
            sink.emit(Event::Warning { message });
        }
    }
    let ending = lp.run(&mut run, sink);
    if !hooks.run_end.is_empty() {
        // What the run ended with, as the hook sees it; the run is settled already and nothing
        // the hook does changes it.
        let outcome = match &ending {
            Ok(Ending::Finished(result)) => serde_json::json!({
                "status": run.status, "result": result,
            }),
            Ok(Ending::InputRequired(ops)) => {
                serde_json::json!({"status": "inputRequired", "unknownOps": ops})
            }
            Ok(Ending::ApprovalRequired(ops)) => {
                serde_json::json!({"status": "inputRequired", "approvalOps": ops})
            }
            Ok(Ending::PlanLimitExhausted(_)) => {
                serde_json::json!({"status": "planLimitExhausted"})
            }
            Err(e) => serde_json::json!({"status": "error", "message": e.message}),
        };
        let warnings =
            crate::hooks::run_event(hooks, fence, ex.session_id, &run.id, Some(&outcome));
        for message in warnings {
            sink.emit(Event::Warning { message });
        }
    }
    ending
}

struct Loop<'a, 'b> {
    ex: &'a Execution<'b>,
    run_paths: RunPaths,
    journal: Journal,
    /// Appends to the conversation; holds no messages (see `conv`).
    messages: MessageLog,
    /// The model's history and this run's index of the conversation, kept in step with every
    /// append ([`Loop::append`]) so no turn re-reads the files.
    conv: Conversation,
    schemas: Arc<Vec<ToolSchema>>,
    /// The size of the tool schemas in a request (the compaction estimate's fixed part).
    schema_bytes: u64,
    started: Instant,
    /// This attempt's mark (see [`orphans`]): carried by its tool and model-command processes.
    attempt_mark: String,
    /// The marks of earlier attempts found crashed at this start: their leftovers are stopped
    /// in recovery.
    crashed_marks: Vec<String>,
    /// Repeated-call detection, rebuilt from the run's history at every start.
    repeats: RepeatGuard,
    /// Model responses of this run so far (all attempts).
    turns: u64,
    usage: UsageRecord,
    /// The assistant message appended to the log without an fsync and not yet durable anywhere:
    /// the next `started` record carries it ([`Loop::embed_assistant`]), or the log is synced
    /// before anything else refers to it ([`Loop::assistant_durable`]).
    pending_assistant: Option<Message>,
    /// The files this run has seen, for `write` ([`crate::run::verification::SeenFiles`]).
    seen: crate::run::verification::SeenFiles,
}

/// The next step of the loop after handling tool calls.
enum Next {
    Continue,
    Unknown(Vec<String>),
}

/// Why a model call produced no response.
enum Stop {
    /// The run fails (budget, provider).
    Fail(FailReason, String),
    /// A cancel arrived while waiting; the call is abandoned (it produced nothing to journal).
    Canceled,
}

/// What one model call sends, and to whom.
struct CallSpec {
    provider: Arc<dyn Provider>,
    /// The role served (`compaction` for a summary, whoever serves it).
    role: String,
    messages: Arc<Vec<ChatMessage>>,
    tools: Arc<Vec<ToolSchema>>,
    /// A summary: an answer without text is a failed call (not only one without anything), and
    /// its streamed text is not shown as the run's (`modelTextDelta`).
    needs_text: bool,
}

/// The plan host of a run; a panic elsewhere while it was held does not stop the meter.
pub(crate) fn lock_host(host: &Mutex<PlanHost>) -> std::sync::MutexGuard<'_, PlanHost> {
    host.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How often a waiting model call looks at the cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);

impl Loop<'_, '_> {
    fn run(&mut self, run: &mut RunState, sink: &mut dyn EventSink) -> Result<Ending> {
        if let Next::Unknown(ops) = self.recover(run, sink)? {
            return self.input_required(run, ops, sink);
        }
        let execution = &self.ex.definition.spec.execution;
        let max_turns = u64::from(execution.max_turns);
        loop {
            if self.canceled() {
                return self.cancel(run, sink);
            }
            if let Some(why) = self.repeats.loop_detected() {
                let why = why.to_string();
                return self.fail(run, FailReason::LoopDetected, why, sink);
            }
            let delegated = children::turns_spent(self.ex.state, self.journal.table())?;
            if self.turns + delegated >= max_turns {
                let why = match delegated {
                    0 => format!("the run reached its turn budget (maxTurns {max_turns})"),
                    n => format!(
                        "the run reached its turn budget (maxTurns {max_turns}, {n} of them taken by its subagents)"
                    ),
                };
                return self.fail(run, FailReason::BudgetExhausted, why, sink);
            }
            if let Some(stop) = self.plan_check(run)? {
                return self.plan_stop(run, stop, sink);
            }
            match self.compact(run, sink)? {
                Ok(()) => {}
                Err(Stop::Fail(reason, why)) => return self.fail(run, reason, why, sink),
                Err(Stop::Canceled) => return self.cancel(run, sink),
            }
            self.report_progress(self.turns + 1, None, sink);
            let mut response = match self.call_model(run, sink)? {
                Ok(response) => response,
                Err(Stop::Fail(reason, why)) => return self.fail(run, reason, why, sink),
                Err(Stop::Canceled) => return self.cancel(run, sink),
            };
            self.turns += 1;
            // Credentials go before anything else sees the response (events, the Session, the
            // journal, the tools) and before the arguments are bounded.
            crate::redact::redact_in_place(&mut response.text);
            for call in &mut response.tool_calls {
                crate::redact::redact_json(&mut call.arguments);
                call.bound_arguments();
            }
            let usage = response.usage.map(|u| UsageRecord {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                cache_read_tokens: u.cache_read_tokens,
                cache_write_tokens: u.cache_write_tokens,
            });
            if let Some(u) = usage {
                self.usage.add(u);
            }
            let cost = cost_of(self.ex.services.prices.execution.as_ref(), usage);
            self.report_progress(self.turns, Some((usage.is_some(), cost)), sink);
            if response.tool_calls.is_empty() {
                if let Some(reminder) = self.reminder_due()? {
                    self.remind(run, response.text, (usage, cost), reminder, sink)?;
                    continue;
                }
                return self.finish(run, response.text, (usage, cost), sink);
            }
            let mut message = Message::new(&run.id, Role::Assistant, response.text.clone());
            message.usage = usage;
            message.cost_usd = cost;
            message.tool_calls = response
                .tool_calls
                .iter()
                .map(|c| CallRecord {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                })
                .collect();
            let message_id = message.id.clone();
            // Not synced: the first `started` record of its calls carries it (see the journal
            // module's durability invariant); a call that starts nothing syncs the log.
            self.append_lazy(message.clone())?;
            message.redact();
            self.pending_assistant = Some(message);
            failpoint::hit("tool.after-assistant-message");
            self.plan_meter(run, usage, sink)?;
            if !response.text.is_empty() {
                sink.emit(Event::ModelText {
                    run_id: run.id.clone(),
                    message_id: message_id.clone(),
                    text: response.text.clone(),
                });
            }
            let mut unknown = Vec::new();
            let mut batched = 0; // calls answered by an earlier batch
            for (index, call) in response.tool_calls.iter().enumerate() {
                if index < batched {
                    continue;
                }
                if self.canceled() {
                    // Not started, so nothing happened: say so, and start nothing more.
                    self.answer_unrun(
                        run,
                        &message_id,
                        index,
                        call,
                        "not run: the run was canceled",
                        sink,
                    )?;
                    continue;
                }
                // Read-class and `task` calls that follow each other run together; every call
                // passes the one boundary, a lone call as a batch of one.
                let rest = &response.tool_calls[index..];
                let batch = boundary::batch_len(rest, self.ex.services.parallel_tools);
                batched = index + batch;
                let stops = self.run_calls(run, &message_id, index, &rest[..batch], sink)?;
                if !stops.is_empty() {
                    // The later calls may depend on these: they stay unanswered, and run (in
                    // order) once each outcome is resolved or each held call decided.
                    unknown.extend(stops);
                    break;
                }
            }
            if !unknown.is_empty() {
                return self.input_required(run, unknown, sink);
            }
        }
    }

    fn canceled(&self) -> bool {
        self.ex.cancel.load(Ordering::SeqCst)
    }

    /// The plan's limit check before a model call (`None`: no plan, or the call may go).
    fn plan_check(&self, run: &RunState) -> Result<Option<Exhausted>> {
        match self.ex.plan {
            Some(host) => lock_host(host).before_call(&run.id, self.turns, self.usage),
            None => Ok(None),
        }
    }

    /// After a model call: says so when a provider that reports usage did not. The call is
    /// metered once its usage is durable ([`Loop::plan_check`] before the next call, or the
    /// final sample), never before: see the recovery rule in [`crate::host::meter`].
    fn plan_meter(
        &self,
        run: &RunState,
        usage: Option<UsageRecord>,
        sink: &mut dyn EventSink,
    ) -> Result<()> {
        let Some(host) = self.ex.plan else {
            return Ok(());
        };
        let warning = lock_host(host).after_call(&run.id, self.turns, usage);
        if let Some(message) = warning {
            sink.emit(Event::Warning { message });
        }
        Ok(())
    }

    /// Why a plan run may not make this call: `task` needs the contract's `agent_delegation`
    /// grant (the host's abilities are not authority) and a v7 plan (whose journal records the
    /// delegation).
    pub(super) fn plan_refuses(&self, call: &ToolCall) -> Option<String> {
        let host = self.ex.plan?;
        if call.name != "task" {
            return None;
        }
        lock_host(host).delegation_refusal()
    }

    /// This run's usage so far is durable (a `started` record carrying its last reply is): the
    /// plan host counts it for the `task` children about to run, whose samples include it.
    pub(super) fn plan_note_usage(&self, run: &RunState) {
        if let Some(host) = self.ex.plan {
            lock_host(host).set_usage(&run.id, self.usage);
        }
    }

    /// The plan's hold, when one of the UNKNOWN `ops` is a `task` child that stopped on it.
    fn child_plan_hold(&self, ops: &[String]) -> Result<Option<Exhausted>> {
        let Some(host) = self.ex.plan else {
            return Ok(None);
        };
        for op in ops.iter().filter_map(|op| self.journal.table().get(op)) {
            let Some(child) = &op.child else { continue };
            let paths = self.ex.state.session(&child.session_id).run(&child.run_id);
            if paths.run_json().is_file()
                && RunState::read(&paths, &child.run_id)?.plan_hold.is_some()
            {
                return Ok(lock_host(host).hold());
            }
        }
        Ok(None)
    }

    /// A plan limit stops the run before its next model call: nothing is pending, the run is
    /// `inputRequired` with the limit named, and a resume continues once the hold is lifted.
    fn plan_stop(
        &mut self,
        run: &mut RunState,
        stop: Exhausted,
        sink: &mut dyn EventSink,
    ) -> Result<Ending> {
        run.status = RunStatus::InputRequired;
        run.plan_hold = Some(stop.limit.clone());
        settle::close_attempt(run, crate::clock::duration_millis(self.started.elapsed()));
        run.save(&self.run_paths)?;
        sink.emit(Event::RunStopped {
            session_id: self.ex.session_id.to_string(),
            run_id: run.id.clone(),
            reason: "planLimitExhausted".into(),
            limit: stop.limit.clone(),
            detail: stop.detail.clone(),
            seq: stop.seq,
        });
        Ok(Ending::PlanLimitExhausted(stop))
    }

    /// Appends `message` to the Session durably (and every message appended lazily before it),
    /// then to the model's history.
    fn append(&mut self, mut message: Message) -> Result<()> {
        // Redacted here too, so the model's history is what the Session holds.
        message.redact();
        self.messages.append(message.clone())?;
        self.pending_assistant = None;
        self.conv.push(message);
        Ok(())
    }

    /// [`Loop::append`] without the fsync: only for a message the journal makes re-derivable
    /// (an assistant message carried by its first `started` record, a tool message whose outcome
    /// is durable).
    fn append_lazy(&mut self, mut message: Message) -> Result<()> {
        message.redact();
        self.messages.append_lazy(message.clone())?;
        self.conv.push(message);
        Ok(())
    }

    /// The pending assistant message, for the `started` record about to make it durable.
    pub(super) fn embed_assistant(&mut self) -> Option<Box<Message>> {
        self.pending_assistant.take().map(Box::new)
    }

    /// Makes the pending assistant message durable in the log itself, before a record that
    /// refers to it without carrying it (`awaitingApproval`).
    fn assistant_durable(&mut self) -> Result<()> {
        if self.pending_assistant.take().is_some() {
            self.messages.sync()?;
        }
        Ok(())
    }

    /// Makes every lazy append durable: before the run's record says the run stopped (or ended),
    /// nothing it rests on may be lost.
    fn make_durable(&mut self) -> Result<()> {
        self.messages.sync()?;
        self.journal.sync()?;
        self.pending_assistant = None;
        Ok(())
    }

    /// One model call on its own thread, so a cancel can abandon it without waiting. What the
    /// provider reports meanwhile (retries, streamed text) becomes events as it arrives.
    fn complete_cancelable(
        &self,
        run_id: &str,
        call: &CallSpec,
        timeout: Option<Duration>,
        responses_so_far: usize,
        sink: &mut dyn EventSink,
    ) -> std::result::Result<Result<ModelResponse>, Stop> {
        /// What the call's thread sends back.
        enum FromCall {
            Event(CallEvent),
            Done(Result<ModelResponse>),
        }
        let provider = Arc::clone(&call.provider);
        let history = Arc::clone(&call.messages);
        let schemas = Arc::clone(&call.tools);
        let role = call.role.clone();
        let attempt_mark = self.attempt_mark.clone();
        let call_mark = orphans::new_attempt_mark();
        let call_mark_sent = call_mark.clone();
        let canceled = Arc::new(AtomicBool::new(false));
        let canceled_seen = Arc::clone(&canceled);
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let events = tx.clone();
            let observe = move |event: CallEvent| {
                let _ = events.send(FromCall::Event(event));
            };
            let result = {
                let request = ModelRequest {
                    role: &role,
                    messages: &history,
                    tools: &schemas,
                    timeout,
                    attempt_mark: Some(&attempt_mark),
                    call_mark: Some(&call_mark_sent),
                    task: None,
                    observer: Some(Observer(&observe)),
                    cancel: Some(&canceled_seen),
                };
                provider.complete(&request, responses_so_far)
            };
            // Release the shared history before answering, so the loop appends to it in place.
            drop(history);
            let _ = tx.send(FromCall::Done(result));
        });
        // Streamed text is shown up to its last whitespace, redacted: a secret has no
        // whitespace, so one cut across two deltas is redacted whole once its word is complete.
        let mut pending = String::new();
        loop {
            match rx.recv_timeout(CANCEL_POLL) {
                Ok(FromCall::Done(result)) => {
                    if result.is_ok() && !pending.is_empty() {
                        sink.emit(call_event(run_id, CallEvent::TextDelta(pending)));
                    }
                    return Ok(result);
                }
                // A summary's text is no model text of the run: it is reported as `compacted`.
                Ok(FromCall::Event(CallEvent::TextDelta(_))) if call.needs_text => {}
                Ok(FromCall::Event(CallEvent::TextDelta(text))) => {
                    pending.push_str(&text);
                    if let Some((at, c)) = pending.char_indices().rfind(|(_, c)| c.is_whitespace())
                    {
                        let rest = pending.split_off(at + c.len_utf8());
                        let shown = std::mem::replace(&mut pending, rest);
                        sink.emit(call_event(run_id, CallEvent::TextDelta(shown)));
                    }
                }
                Ok(FromCall::Event(event)) => {
                    // A retry voids what the failed attempt streamed.
                    pending.clear();
                    sink.emit(call_event(run_id, event));
                }
                Err(RecvTimeoutError::Timeout) if self.canceled() => {
                    // The call is abandoned (nothing of it is journaled); a command provider's
                    // processes stop with it rather than outliving the run, and a network
                    // provider's backoff wait ends.
                    canceled.store(true, Ordering::SeqCst);
                    orphans::stop_marked(orphans::MODEL_CALL_VAR, &[&call_mark]);
                    return Err(Stop::Canceled);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Ok(Err(Error::failed(
                        "the model call ended without an answer (the provider panicked)",
                    )));
                }
            }
        }
    }

    /// Answers call `index` with a tool error without running it (no journal operation).
    fn answer_unrun(
        &mut self,
        run: &RunState,
        message_id: &str,
        index: usize,
        call: &ToolCall,
        why: &str,
        sink: &mut dyn EventSink,
    ) -> Result<()> {
        if let Some(op_id) = approval::close_unrun(&mut self.journal, message_id, index, why)? {
            // An approved operation: its "did not run" outcome is journaled; settle it.
            return self.settle_op(run, &op_id, false, sink);
        }
        let mut reply = Message::new(&run.id, Role::Tool, why.to_string());
        reply.tool_call_id = Some(call.id.clone());
        reply.reply_to = Some(message_id.to_string());
        reply.call_index = Some(index);
        reply.is_error = true;
        self.append(reply)?;
        sink.emit(Event::ToolFinished {
            run_id: run.id.clone(),
            op_id: None,
            tool: call.name.clone(),
            is_error: true,
            output: preview(why, EVENT_PREVIEW_CHARS),
        });
        Ok(())
    }

    /// A cancel with nothing pending: the run ends `canceled` (exit 130).
    fn cancel(&mut self, run: &mut RunState, sink: &mut dyn EventSink) -> Result<Ending> {
        let result = RunResult {
            status: RunStatus::Canceled,
            reason: None,
            final_text: String::new(),
            error: Some(RunError {
                kind: "canceled".into(),
                message: "the run was canceled (SIGINT/SIGTERM); no tool was left running".into(),
            }),
            final_message_id: None,
            final_usage: None,
            final_cost_usd: None,
            unverified: None,
            turns: self.turns,
            usage: self.usage,
            at: crate::clock::now_rfc3339(),
        };
        self.end(run, result, sink)
    }

    /// Compacts the conversation when the next request would pass the threshold
    /// ([`crate::run::compaction`]): asks for a summary of the span, then appends the
    /// `compaction` record durably. A crash before the append leaves no record, after it a
    /// complete one; the resumed run then decides again from the same log.
    fn compact(
        &mut self,
        run: &RunState,
        sink: &mut dyn EventSink,
    ) -> Result<std::result::Result<(), Stop>> {
        let ex = self.ex;
        let Some(settings) = &ex.services.compaction else {
            return Ok(Ok(()));
        };
        let threshold = settings.threshold();
        let estimated = self.conv.estimated_tokens(self.schema_bytes);
        if estimated < threshold {
            return Ok(Ok(()));
        }
        let Some(span) = self.conv.compaction_span() else {
            return Ok(Ok(()));
        };
        let task = self.conv.task().unwrap_or_default();
        let call = CallSpec {
            provider: Arc::clone(&settings.provider),
            role: crate::provider::COMPACTION_ROLE.to_string(),
            // The summary is read from a transcript, tool-less: a provider that refuses tool
            // blocks without tool definitions (Anthropic) takes it as well as any.
            messages: Arc::new(compaction::request_messages(
                task,
                &span.view,
                settings.transcript_budget(),
            )),
            tools: Arc::new(Vec::new()),
            needs_text: true,
        };
        let responses_so_far = self.conv.compactions();
        let mut response =
            match self.call_retrying(run, &call, responses_so_far, "compaction call", sink)? {
                Ok(response) => response,
                Err(stop) => return Ok(Err(stop)),
            };
        crate::redact::redact_in_place(&mut response.text);
        failpoint::hit("compaction.after-summary");
        let usage = response.usage.map(|u| UsageRecord {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
        });
        let mut record = Message::new(&run.id, Role::Compaction, response.text.trim());
        record.compacts = Some(span.range.clone());
        record.usage = usage;
        record.cost_usd = cost_of(self.ex.services.prices.compaction.as_ref(), usage);
        let message_id = record.id.clone();
        self.append(record)?;
        failpoint::hit("compaction.after-record");
        if let Some(u) = usage {
            self.usage.add(u);
        }
        sink.emit(Event::Compacted {
            run_id: run.id.clone(),
            message_id,
            from: span.range.from,
            to: span.range.to,
            messages: span.range.messages,
            estimated_tokens: estimated,
            threshold,
            usage,
        });
        Ok(Ok(()))
    }

    /// One model call, retried while it fails and `maxPureRetries` allows (a failed call
    /// produced nothing, so retrying it cannot repeat a side effect). The outer `Result` is an
    /// I/O failure of ours; the inner error ends the run.
    fn call_model(
        &mut self,
        run: &RunState,
        sink: &mut dyn EventSink,
    ) -> Result<std::result::Result<ModelResponse, Stop>> {
        let call = CallSpec {
            provider: Arc::clone(&self.ex.services.provider),
            role: self.ex.definition.spec.execution.model_role.clone(),
            messages: Arc::clone(self.conv.history()),
            tools: Arc::clone(&self.schemas),
            needs_text: false,
        };
        let responses_so_far = self.messages.model_responses();
        self.call_retrying(run, &call, responses_so_far, "model call", sink)
    }

    /// `call`, retried while it fails and `maxPureRetries` allows (`what` names it in the
    /// failure).
    fn call_retrying(
        &mut self,
        run: &RunState,
        call: &CallSpec,
        responses_so_far: usize,
        what: &str,
        sink: &mut dyn EventSink,
    ) -> Result<std::result::Result<ModelResponse, Stop>> {
        if let Some(why) = self.cost_spent()? {
            return Ok(Err(Stop::Fail(FailReason::BudgetExhausted, why)));
        }
        let execution = &self.ex.definition.spec.execution;
        let retries = execution.max_pure_retries;
        let mut last_error = String::new();
        for _ in 0..=retries {
            let timeout = match self.remaining_wall_clock(run) {
                Some(Duration::ZERO) => {
                    return Ok(Err(Stop::Fail(
                        FailReason::BudgetExhausted,
                        format!(
                            "the run reached its wall-clock budget (maxWallClockMs {})",
                            execution.max_wall_clock_ms.unwrap_or_default()
                        ),
                    )));
                }
                other => other,
            };
            let answer =
                match self.complete_cancelable(&run.id, call, timeout, responses_so_far, sink) {
                    Ok(answer) => answer,
                    Err(stop) => return Ok(Err(stop)),
                };
            match answer {
                Ok(r)
                    if r.text.trim().is_empty() && (call.needs_text || r.tool_calls.is_empty()) =>
                {
                    last_error = "the model returned an empty response".into();
                }
                Ok(r) => return Ok(Ok(r)),
                Err(e) => last_error = e.message,
            }
        }
        Ok(Err(Stop::Fail(
            FailReason::ProviderFailed,
            format!(
                "the {what} failed {} time{} (maxPureRetries {retries}): {last_error}",
                retries + 1,
                if retries == 0 { "" } else { "s" }
            ),
        )))
    }

    /// Why no model call may start under `maxCostUsd` (`None`: it may, or there is no
    /// limit): the run's calls (all attempts) and its `task` children's cost it all, or their
    /// cost is unknown (a budget that cannot be kept stops the run rather than being ignored).
    fn cost_spent(&self) -> Result<Option<String>> {
        let Some(max) = self.ex.definition.spec.execution.max_cost_usd else {
            return Ok(None);
        };
        let mut spent = self.conv.cost();
        spent.add(&crate::session::cost::children(
            self.ex.state,
            self.journal.table(),
        )?);
        if let Some(why) = spent.unknown() {
            return Ok(Some(format!(
                "the run's cost is unknown ({why}), so its cost budget (maxCostUsd {max}) \
                 cannot be kept"
            )));
        }
        Ok((spent.usd >= max.0).then(|| {
            format!(
                "the run reached its cost budget (maxCostUsd {max}): its model calls{} cost \
                 {}",
                if self.journal.table().ops().iter().any(|o| o.child.is_some()) {
                    " and its subagents'"
                } else {
                    ""
                },
                spent.to_text()
            )
        }))
    }

    /// Time left under `maxWallClockMs`, counting earlier attempts; `None` without a limit.
    fn remaining_wall_clock(&self, run: &RunState) -> Option<Duration> {
        let limit = self.ex.definition.spec.execution.max_wall_clock_ms?;
        let spent =
            run.spent_wall_clock_ms() + crate::clock::duration_millis(self.started.elapsed());
        Some(Duration::from_millis(limit.saturating_sub(spent)))
    }

    /// Tells `sink` where the run stands at turn `turn`; `answered` is the call of that turn
    /// that just answered and is not in the conversation yet (whether it reported usage, its
    /// cost).
    fn report_progress(
        &self,
        turn: u64,
        answered: Option<(bool, Option<f64>)>,
        sink: &mut dyn EventSink,
    ) {
        let mut cost = self.conv.cost();
        if let Some((reported, usd)) = answered {
            cost.add_call(reported, usd);
        }
        sink.progress(&crate::events::Progress {
            turn,
            max_turns: u64::from(self.ex.definition.spec.execution.max_turns),
            usage: self.usage,
            cost_usd: cost.unknown().is_none().then_some(cost.usd),
        });
    }

    /// The turns the run may still make, its children's included (`task` carving).
    pub(super) fn turns_left(&self) -> Result<u64> {
        let spent = children::turns_spent(self.ex.state, self.journal.table())?;
        Ok(u64::from(self.ex.definition.spec.execution.max_turns)
            .saturating_sub(self.turns + spent))
    }

    /// Why nothing more runs once `maxWallClockMs` is spent.
    fn budget_spent(&self) -> String {
        format!(
            "the run's wall-clock budget (maxWallClockMs {}) ran out",
            self.ex
                .definition
                .spec
                .execution
                .max_wall_clock_ms
                .unwrap_or_default()
        )
    }

    /// Appends the tool result message of an operation whose outcome is recorded (if it is not
    /// in the Session yet: only recovery, `may_exist`, has to look), then records `Settled`.
    fn settle_op(
        &mut self,
        run: &RunState,
        op_id: &str,
        may_exist: bool,
        sink: &mut dyn EventSink,
    ) -> Result<()> {
        let op = self
            .journal
            .table()
            .get(op_id)
            .cloned()
            .ok_or_else(|| Error::failed(format!("operation {op_id} is not in the journal")))?;
        let output = op.output.clone().unwrap_or(ToolOutcome {
            text: String::new(),
            is_error: true,
            blob: None,
            interrupted: false,
            fence: None,
        });
        let existing = may_exist
            .then(|| self.conv.result_of(op_id).map(str::to_string))
            .flatten();
        let turn_id = match existing {
            Some(id) => id,
            None => {
                let reply = tool_message(&run.id, &op, &output, None);
                let id = reply.id.clone();
                // Not synced: the durable outcome re-derives it (see the journal module docs).
                self.append_lazy(reply)?;
                failpoint::hit("tool.after-turn-append");
                id
            }
        };
        // Not synced either: durable with the next durable journal record.
        self.journal.record_lazy(JournalRecord::Settled {
            op_id: op_id.to_string(),
            at: crate::clock::now_rfc3339(),
            turn_message_id: turn_id,
        })?;
        failpoint::hit("tool.after-settled");
        sink.emit(Event::ToolFinished {
            run_id: run.id.clone(),
            op_id: Some(op_id.to_string()),
            tool: op.tool,
            is_error: output.is_error,
            output: preview(&output.text, EVENT_PREVIEW_CHARS),
        });
        Ok(())
    }

    /// Recovery at the start of every execution: brings every tool call of this run to a
    /// settled state, or reports the operations whose outcome is unknown.
    fn recover(&mut self, run: &RunState, sink: &mut dyn EventSink) -> Result<Next> {
        // Processes a crashed attempt left running stop first, so that nothing of an operation
        // recorded below as UNKNOWN still runs when an operator resolves it.
        let marks: Vec<&str> = self.crashed_marks.iter().map(String::as_str).collect();
        let stopped = orphans::stop_marked(orphans::ATTEMPT_VAR, &marks);
        if stopped > 0 {
            sink.emit(Event::Warning {
                message: format!(
                    "stopped {stopped} process(es) that a crashed earlier attempt at this run left \
                     running (SIGKILL)"
                ),
            });
        }
        // Operations with a recorded outcome (by the tool or an operator) but not settled: the
        // recorded result goes into history; the tool is never run again.
        // Results stay in the model's order: one whose earlier call (of the same message) has
        // no outcome yet waits, and is settled below once that one is.
        let is_ready = |op: &crate::journal::OpState| {
            matches!(
                op.phase,
                OpPhase::OutcomeKnown | OpPhase::Resolved | OpPhase::Denied
            )
        };
        let unanswered = self.conv.unanswered_calls();
        let table = self.journal.table();
        let ready: Vec<String> = table
            .ops()
            .iter()
            .filter(|op| is_ready(op))
            .filter(|op| {
                !unanswered.iter().any(|(m, j, _)| {
                    *m == op.message_id
                        && *j < op.call_index
                        && !table.for_call(m, *j).is_some_and(is_ready)
                })
            })
            .map(|op| op.op_id.clone())
            .collect();
        for op_id in ready {
            self.settle_op(run, &op_id, true, sink)?;
        }
        // Calls of this run's assistant messages that have no tool result message yet, in order.
        let pending = self.conv.unanswered_calls();
        let mut unknown = Vec::new();
        for (message_id, index, call) in pending {
            let op = self.journal.table().for_call(&message_id, index);
            let op = op.map(|op| (op.phase, op.op_id.clone()));
            // An approved call has not started: it is treated as a call that never started.
            let not_started = matches!(op, None | Some((OpPhase::Approved, _)));
            match op {
                // After an UNKNOWN call, later calls wait (they may depend on it): they run, in
                // order, once it is resolved. Started ones still become UNKNOWN below.
                _ if not_started && !unknown.is_empty() => {}
                // A cancel is honoured here as in every phase: nothing more starts.
                _ if not_started && self.canceled() => {
                    self.answer_unrun(
                        run,
                        &message_id,
                        index,
                        &call,
                        "not run: the run was canceled",
                        sink,
                    )?;
                }
                // Never started: nothing happened yet, so running it now is its first run.
                _ if not_started => {
                    let call = std::slice::from_ref(&call);
                    unknown.extend(self.run_calls(run, &message_id, index, call, sink)?);
                }
                // A `task` call: its child's own state says how far it got.
                Some((OpPhase::Started | OpPhase::OutcomeUnknown, op_id))
                    if self
                        .journal
                        .table()
                        .get(&op_id)
                        .is_some_and(|o| o.child.is_some()) =>
                {
                    let settle = unknown.is_empty();
                    let known = self.recover_child(run, &op_id, settle, sink)?;
                    if !known {
                        unknown.push(op_id);
                    }
                }
                // A Streamable HTTP MCP call with a journaled stream position: its answer is read
                // from the server's replay when it can be (`replay`).
                Some((OpPhase::Started, op_id))
                    if self
                        .journal
                        .table()
                        .get(&op_id)
                        .is_some_and(|o| o.stream.is_some()) =>
                {
                    let settle = unknown.is_empty();
                    if let Some(why) = self.replay_op(run, &op_id, settle, sink)? {
                        self.journal.record(JournalRecord::OutcomeUnknown {
                            op_id: op_id.clone(),
                            at: crate::clock::now_rfc3339(),
                            reason: format!("{}; {why}", unknown_reason(stopped)),
                        })?;
                        unknown.push(op_id);
                    }
                }
                Some((OpPhase::Started, op_id)) => {
                    self.journal.record(JournalRecord::OutcomeUnknown {
                        op_id: op_id.clone(),
                        at: crate::clock::now_rfc3339(),
                        reason: unknown_reason(stopped),
                    })?;
                    unknown.push(op_id);
                }
                Some((OpPhase::OutcomeUnknown | OpPhase::AwaitingApproval, op_id)) => {
                    unknown.push(op_id)
                }
                // An outcome that waited for an earlier call's (see `ready` above).
                Some((OpPhase::OutcomeKnown | OpPhase::Resolved | OpPhase::Denied, op_id))
                    if unknown.is_empty() =>
                {
                    self.settle_op(run, &op_id, true, sink)?
                }
                // Settled (or settled above): nothing to do.
                _ => {}
            }
        }
        Ok(if unknown.is_empty() {
            Next::Continue
        } else {
            Next::Unknown(unknown)
        })
    }

    /// Recovers the child of `task` operation `op_id` ([`children::recover`]): a known outcome
    /// is recorded (`outcomeKnown`, or `resolved` after an UNKNOWN) and settled; `false` when
    /// it is still unknown (recorded as `outcomeUnknown` if it was only `started`).
    fn recover_child(
        &mut self,
        run: &RunState,
        op_id: &str,
        settle: bool,
        sink: &mut dyn EventSink,
    ) -> Result<bool> {
        let Some(op) = self.journal.table().get(op_id).cloned() else {
            return Ok(false);
        };
        let Some(child) = &op.child else {
            return Ok(false);
        };
        self.plan_note_usage(run);
        let output = children::recover(self.ex, child, self.ex.cancel)?;
        let at = crate::clock::now_rfc3339();
        let op_id = op_id.to_string();
        match (output.interrupted, op.phase) {
            (true, OpPhase::Started) => {
                self.journal.record(JournalRecord::OutcomeUnknown {
                    op_id,
                    at,
                    reason: output.text,
                })?;
                Ok(false)
            }
            (true, _) => Ok(false),
            (false, phase) => {
                let record = if phase == OpPhase::Started {
                    JournalRecord::OutcomeKnown {
                        op_id: op_id.clone(),
                        at,
                        output: outcome(&output),
                    }
                } else {
                    JournalRecord::Resolved {
                        op_id: op_id.clone(),
                        at,
                        output: outcome(&output),
                    }
                };
                self.journal.record(record)?;
                // After an earlier UNKNOWN call its result waits (the model's order).
                if settle {
                    self.settle_op(run, &op_id, true, sink)?;
                }
                Ok(true)
            }
        }
    }

    fn input_required(
        &mut self,
        run: &mut RunState,
        ops: Vec<String>,
        sink: &mut dyn EventSink,
    ) -> Result<Ending> {
        self.make_durable()?;
        let (unknown, approvals) = approval::split_waiting(self.journal.table(), ops.clone());
        let child_hold = match approvals.is_empty() {
            true => self.child_plan_hold(&unknown)?,
            false => None,
        };
        run.status = RunStatus::InputRequired;
        run.unknown_ops = unknown;
        run.approval_ops = approvals.clone();
        if let Some(stop) = child_hold {
            // A subagent stopped on the plan's limit: so does its parent (exit 8); a resume
            // after `dwp resources recover` continues the child, then the parent.
            return self.plan_stop(run, stop, sink);
        }
        settle::close_attempt(run, crate::clock::duration_millis(self.started.elapsed()));
        run.save(&self.run_paths)?;
        for op in approvals
            .iter()
            .filter_map(|op| self.journal.table().get(op))
        {
            sink.emit(approval::required_event(self.ex.session_id, &run.id, op));
        }
        sink.emit(Event::RunInputRequired {
            session_id: self.ex.session_id.to_string(),
            run_id: run.id.clone(),
            op_ids: ops.clone(),
        });
        Ok(if approvals.is_empty() {
            Ending::InputRequired(ops)
        } else {
            Ending::ApprovalRequired(approvals)
        })
    }

    /// The model answered without tool calls: check the output contract and settle.
    fn finish(
        &mut self,
        run: &mut RunState,
        text: String,
        (usage, cost): (Option<UsageRecord>, Option<f64>),
        sink: &mut dyn EventSink,
    ) -> Result<Ending> {
        let final_message_id = ids::new_id(IdKind::Message);
        if !text.is_empty() {
            sink.emit(Event::ModelText {
                run_id: run.id.clone(),
                message_id: final_message_id.clone(),
                text: text.clone(),
            });
        }
        let output = &self.ex.definition.spec.output;
        let mut text = contract::normalize(output, text);
        if run.output_schema.is_some() {
            text = contract::normalize_json(text);
        }
        let checked = contract::check_answer(output, run.output_schema.as_ref(), &text);
        let (status, reason, error) = match checked {
            Ok(()) => (RunStatus::Completed, None, None),
            Err(why) => (
                RunStatus::Failed,
                Some(FailReason::OutputContract),
                Some(RunError {
                    kind: "outputContract".into(),
                    message: why.0,
                }),
            ),
        };
        let result = RunResult {
            status,
            reason,
            final_text: text,
            error,
            final_message_id: Some(final_message_id),
            final_usage: usage,
            final_cost_usd: cost,
            unverified: self.unverified(),
            turns: self.turns,
            usage: self.usage,
            at: crate::clock::now_rfc3339(),
        };
        self.end(run, result, sink)
    }

    /// What a run that asked for verification ends without checking (`None`: it did not ask,
    /// or a check ran after every change). Read from the journal like the reminder, so an
    /// answer after the reminder that still has not run a check is recorded as unverified
    /// rather than as the success it may claim (docs/verification.md).
    fn unverified(&self) -> Option<crate::events::Unverified> {
        if self.ex.definition.spec.execution.verify_before_completion != Some(true) {
            return None;
        }
        let unchecked = verification::unchecked_changes(self.journal.table());
        (!unchecked.is_empty()).then_some(crate::events::Unverified {
            changed: unchecked.changed,
            failed: unchecked.failed,
        })
    }

    /// The reminder a final answer gets now, if it is due ([`crate::run::verification`]): the
    /// definition asks for it, the run has not had one, a `write`/`edit` succeeded after its
    /// last `exec`, and a turn is left to act on it (the reminded answer was a turn, and so is
    /// the next). Read from the journal and the Session, so a resumed run decides the same.
    fn reminder_due(&self) -> Result<Option<String>> {
        let execution = &self.ex.definition.spec.execution;
        if execution.verify_before_completion != Some(true) || self.conv.reminders() > 0 {
            return Ok(None);
        }
        let unchecked = verification::unchecked_changes(self.journal.table());
        if unchecked.is_empty() {
            return Ok(None);
        }
        let delegated = children::turns_spent(self.ex.state, self.journal.table())?;
        if self.turns + delegated >= u64::from(execution.max_turns) {
            return Ok(None);
        }
        let task = self.conv.task().unwrap_or_default();
        Ok(Some(verification::reminder(
            task,
            &unchecked,
            self.ex.workspace_root,
        )))
    }

    /// Answers a final answer with `reminder` instead of ending the run: the answer goes into
    /// the Session as an assistant message (a turn, as every response is) and the reminder as a
    /// user message after it, in one write and one fsync. A crash before it loses both (the
    /// model is asked again); after it, the reminder is part of the conversation a resume
    /// replays as it is, and [`Conversation::reminders`] keeps it from being sent twice.
    fn remind(
        &mut self,
        run: &RunState,
        text: String,
        (usage, cost): (Option<UsageRecord>, Option<f64>),
        reminder: String,
        sink: &mut dyn EventSink,
    ) -> Result<()> {
        let mut answer = Message::new(&run.id, Role::Assistant, text.clone());
        answer.usage = usage;
        answer.cost_usd = cost;
        let answer_id = answer.id.clone();
        let mut pair = vec![answer, Message::new(&run.id, Role::User, reminder)];
        for m in &mut pair {
            m.redact();
        }
        self.messages.append_all(pair.clone())?;
        for m in pair {
            self.conv.push(m);
        }
        if !text.is_empty() {
            sink.emit(Event::ModelText {
                run_id: run.id.clone(),
                message_id: answer_id,
                text,
            });
        }
        failpoint::hit("verify.after-reminder");
        self.plan_meter(run, usage, sink)?;
        sink.emit(Event::Warning {
            message: "the run answered after changing files without running a check since: \
                      the model is reminded once to run one (verifyBeforeCompletion)"
                .to_string(),
        });
        Ok(())
    }

    fn fail(
        &mut self,
        run: &mut RunState,
        reason: FailReason,
        why: String,
        sink: &mut dyn EventSink,
    ) -> Result<Ending> {
        let kind = match reason {
            FailReason::BudgetExhausted => "budget",
            FailReason::OutputContract => "outputContract",
            FailReason::ProviderFailed => "external",
            FailReason::LoopDetected => "loopDetected",
        };
        let result = RunResult {
            status: RunStatus::Failed,
            reason: Some(reason),
            final_text: String::new(),
            error: Some(RunError {
                kind: kind.into(),
                message: why,
            }),
            final_message_id: None,
            final_usage: None,
            final_cost_usd: None,
            unverified: None,
            turns: self.turns,
            usage: self.usage,
            at: crate::clock::now_rfc3339(),
        };
        self.end(run, result, sink)
    }

    fn end(
        &mut self,
        run: &mut RunState,
        mut result: RunResult,
        sink: &mut dyn EventSink,
    ) -> Result<Ending> {
        // The final message, run.json and the event all get the redacted text, so they agree.
        crate::redact::redact_in_place(&mut result.final_text);
        if let Some(error) = &mut result.error {
            crate::redact::redact_in_place(&mut error.message);
        }
        self.make_durable()?;
        settle::close_attempt(run, crate::clock::duration_millis(self.started.elapsed()));
        settle::persist_result(run, &self.run_paths, result.clone())?;
        if let Some(host) = self.ex.plan {
            // The last call's usage is durable in the result: meter it while the run is still
            // unsettled, so a crash here is metered by the resume that settles it.
            lock_host(host).before_final(&run.id, self.turns, self.usage)?;
        }
        settle::finish(run, &self.run_paths, &mut self.messages)?;
        sink.emit(finished_event(self.ex.session_id, &run.id, &result));
        Ok(Ending::Finished(result))
    }
}

/// The event a provider's report of a call under way becomes.
fn call_event(run_id: &str, event: CallEvent) -> Event {
    match event {
        CallEvent::Retry {
            attempt,
            max,
            wait,
            reason,
        } => Event::ModelRetry {
            run_id: run_id.to_string(),
            attempt,
            max_attempts: max,
            wait_ms: crate::clock::duration_millis(wait),
            reason,
        },
        CallEvent::TextDelta(text) => Event::ModelTextDelta {
            run_id: run_id.to_string(),
            text: crate::redact::redact(&text),
        },
    }
}

/// The tool result message of operation `op` with outcome `output` (`id`: the id a durable
/// `settled` record already names, when recovery writes it again).
fn tool_message(
    run_id: &str,
    op: &crate::journal::OpState,
    output: &ToolOutcome,
    id: Option<&str>,
) -> Message {
    let mut reply = Message::new(run_id, Role::Tool, output.text.clone());
    if let Some(id) = id {
        reply.id = id.to_string();
    }
    reply.tool_call_id = Some(op.tool_call_id.clone());
    reply.reply_to = Some(op.message_id.clone());
    reply.call_index = Some(op.call_index);
    reply.op_id = Some(op.op_id.clone());
    reply.is_error = output.is_error;
    reply
}

/// Puts back what a power cut took from the end of `messages.jsonl` while the journal kept it
/// (see the journal module's durability invariant), in the log's order: walking the run's
/// operations in start order, an assistant message the log lacks is appended from the
/// `started` record that carried it (`embedded`), and a settled operation's tool message the
/// log lacks from its recorded outcome, under the id `settled` names. Then the log is synced.
fn rederive_messages(
    messages: &mut MessageLog,
    conv: &mut Conversation,
    table: &crate::journal::OpTable,
    mut embedded: std::collections::HashMap<String, Message>,
    run_id: &str,
) -> Result<()> {
    let mut appended = false;
    for op in table.ops() {
        if !messages.contains(&op.message_id)
            && let Some(message) = embedded.remove(&op.message_id)
        {
            messages.append_lazy(message.clone())?;
            conv.push(message);
            appended = true;
        }
        if op.phase == OpPhase::Settled
            && let (Some(id), Some(output)) = (&op.turn_message_id, &op.output)
            && !messages.contains(id)
        {
            let reply = tool_message(run_id, op, output, Some(id));
            messages.append_lazy(reply.clone())?;
            conv.push(reply);
            appended = true;
        }
    }
    if appended {
        messages.sync()?;
    }
    Ok(())
}

/// How often [`bounded`] looks at the cancel flag and the clock.
const BUDGET_POLL: Duration = Duration::from_millis(10);

/// Runs `tool` with a cancel flag of its own, set when `cancel` is or once `deadline` passes, so
/// the run's wall-clock budget stops a tool exactly as a cancel does. Returns the output and
/// whether the deadline stopped it. Without a thread to watch, the tool gets `cancel` itself.
fn bounded(
    cancel: &AtomicBool,
    deadline: Instant,
    tool: impl FnOnce(&AtomicBool) -> ToolOutput,
) -> (ToolOutput, bool) {
    let stop = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let watcher = std::thread::Builder::new().spawn_scoped(s, || {
            while !done.load(Ordering::SeqCst) {
                if cancel.load(Ordering::SeqCst) {
                    stop.store(true, Ordering::SeqCst);
                    return false;
                }
                if Instant::now() >= deadline {
                    stop.store(true, Ordering::SeqCst);
                    return true;
                }
                std::thread::sleep(BUDGET_POLL);
            }
            false
        });
        let Ok(watcher) = watcher else {
            return (tool(cancel), false);
        };
        let output = tool(&stop);
        done.store(true, Ordering::SeqCst);
        let out_of_time = watcher.join().unwrap_or(false);
        (output, out_of_time)
    })
}

/// Attempts that ended in a crash never recorded their duration. Count them up to the run's
/// last durable activity (its last message), so budgets keep counting them without counting
/// the time nothing ran. Returns the marks of the attempts it closed, whose leftover processes
/// recovery stops.
fn close_crashed_attempts(run: &mut RunState, conv: &Conversation) -> Vec<String> {
    let last_activity = conv.last_activity().and_then(crate::clock::parse_rfc3339);
    let mut marks = Vec::new();
    for attempt in run
        .attempts
        .iter_mut()
        .filter(|a| a.wall_clock_ms.is_none())
    {
        let start = crate::clock::parse_rfc3339(&attempt.started_at);
        let spent = match (start, last_activity) {
            (Some(s), Some(l)) if l > s => (l - s) as u64,
            _ => 0,
        };
        attempt.wall_clock_ms = Some(spent);
        attempt.crashed = true;
        marks.extend(attempt.mark.clone());
    }
    marks
}

/// What a call with `usage` cost at `price` (`None` without either: never estimated).
fn cost_of(
    price: Option<&crate::provider::config::Price>,
    usage: Option<UsageRecord>,
) -> Option<f64> {
    let (price, u) = (price?, usage?);
    Some(price.cost_usd(
        u.input_tokens,
        u.output_tokens,
        u.cache_read_tokens,
        u.cache_write_tokens,
    ))
}

/// The `runFinished` event for a result.
pub fn finished_event(session_id: &str, run_id: &str, result: &RunResult) -> Event {
    Event::RunFinished {
        session_id: session_id.to_string(),
        run_id: run_id.to_string(),
        status: result.status.name().to_string(),
        reason: result.reason.map(|r| {
            serde_json::to_value(r)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        }),
        final_text: result.final_text.clone(),
        error: result.error.as_ref().map(|e| e.message.clone()),
        unverified: result.unverified.clone(),
        turns: result.turns,
        usage: result.usage,
    }
}

fn outcome(output: &ToolOutput) -> ToolOutcome {
    ToolOutcome {
        text: output.text.clone(),
        is_error: output.is_error,
        blob: output.blob.as_ref().map(|b| BlobPointer {
            sha256: b.sha256.clone(),
            bytes: b.bytes,
        }),
        interrupted: output.interrupted,
        fence: output.fence.clone(),
    }
}

/// Why a call that started before a crash has an unknown outcome; `stopped` leftover processes
/// of the Session were killed just before.
fn unknown_reason(stopped: usize) -> String {
    let mut reason = "the runtime stopped after the tool started and before its outcome was \
                      recorded; its effects may have happened"
        .to_string();
    if stopped > 0 {
        reason.push_str(&format!(
            " (its processes may have run on after the crash: {stopped} leftover process(es) of \
             the crashed attempt were stopped before this was recorded)"
        ));
    }
    reason
}
