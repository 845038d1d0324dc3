//! Rendering run events: one JSON object per line (`jsonl`), or the human view (`text`: agent
//! text, one line per tool call, the final result; on a terminal with a live status line on
//! stderr, [`super::status`]).

use std::collections::HashMap;

use serde_json::Value;

use super::status::StatusLine;
use crate::cli::output::{self, Format};
use crate::events::{Event, EventSink, Progress, preview};

pub struct Renderer {
    format: Format,
    /// Text view: the arguments of started tool calls, shown on their one line when they finish.
    started: HashMap<String, Value>,
    /// Text view: streamed model text is on the screen and its line is not ended yet.
    streaming: bool,
    /// Text view on a terminal: the live status line, until the run's last event.
    status: Option<StatusLine>,
}

impl Renderer {
    pub fn new(format: Format) -> Renderer {
        Renderer {
            format,
            started: HashMap::new(),
            streaming: false,
            status: match format {
                Format::Text => StatusLine::for_terminal(),
                Format::Jsonl => None,
            },
        }
    }

    /// The text view of `event`, with the status line (if any) erased while it is printed.
    fn text(&mut self, event: Event) {
        let Some(status) = self.status.take() else {
            return self.print(event);
        };
        // Streamed text whose line is not ended keeps the status line away (a `\r` would
        // overwrite it); an empty piece changes nothing.
        let open = match &event {
            Event::ModelTextDelta { text, .. } if text.is_empty() => self.streaming,
            Event::ModelTextDelta { text, .. } => !text.ends_with('\n'),
            _ => false,
        };
        let last = matches!(
            event,
            Event::RunFinished { .. } | Event::RunStopped { .. } | Event::RunInputRequired { .. }
        );
        if last {
            // Erased for good before the run's last lines and the command's (hints, errors).
            drop(status);
            return self.print(event);
        }
        status.around(open, || self.print(event));
        self.status = Some(status);
    }

    fn print(&mut self, event: Event) {
        if let Event::ModelTextDelta { text, .. } = &event {
            output::raw(&output::terminal_safe(text));
            self.streaming = !text.is_empty() || self.streaming;
            return;
        }
        let streamed = std::mem::take(&mut self.streaming);
        if streamed {
            output::raw("\n");
        }
        match event {
            Event::ModelTextDelta { .. } => {}
            Event::ModelRetry {
                attempt,
                max_attempts,
                wait_ms,
                reason,
                ..
            } => say(&format!(
                "  model call failed, retry {attempt}/{max_attempts} in {:.1} s: {}",
                wait_ms as f64 / 1000.0,
                preview(&reason, 200)
            )),
            Event::SessionCreated {
                session_id,
                agent,
                capabilities,
                built,
                ..
            } => say(&format!(
                "session {session_id}: agent {agent}{} with {}",
                if built { " (built for this task)" } else { "" },
                capabilities.join(", ")
            )),
            Event::SessionResumed {
                session_id,
                run_id,
                new_run,
            } => say(&format!(
                "session {session_id}: {} run {run_id}",
                if new_run { "new" } else { "continuing" }
            )),
            Event::OperationResolved { op_id, run_id, .. } => say(&format!(
                "operation {op_id} of run {run_id} resolved; continue with --resume"
            )),
            Event::OperationDecided {
                op_id,
                run_id,
                decision,
                ..
            } => say(&format!(
                "operation {op_id} of run {run_id} {decision}; continue with --resume"
            )),
            Event::RunApprovalRequired {
                op_id,
                tool,
                arguments,
                rule,
                ..
            } => say(&format!(
                "  [{tool}] {} -> waits for approval ({op_id}, rule {rule:?}: ask)",
                preview(&arguments.to_string(), 80)
            )),
            Event::Warning { message } => output::Diagnostics::kxen(Format::Text).warning(&message),
            Event::RunStarted { run_id, .. } => say(&format!("run {run_id} started")),
            Event::Compacted {
                messages,
                estimated_tokens,
                threshold,
                message_id,
                ..
            } => say(&format!(
                "  compacted {messages} messages into a summary ({message_id}): the next \
                 request was about {estimated_tokens} tokens, compaction starts at {threshold}"
            )),
            // Streamed already: its line was ended above.
            Event::ModelText { .. } if streamed => {}
            Event::ModelText { text, .. } => say(text.trim_end()),
            Event::ToolStarted {
                op_id, arguments, ..
            } => {
                self.started.insert(op_id, arguments);
            }
            Event::ToolFinished {
                op_id,
                tool,
                is_error,
                output: out,
                ..
            } => {
                let args = op_id
                    .and_then(|id| self.started.remove(&id))
                    .map(|a| preview(&a.to_string(), 80))
                    .unwrap_or_default();
                let first = out.lines().next().unwrap_or("");
                let status = if is_error {
                    format!("error: {}", preview(first, 100))
                } else {
                    "ok".to_string()
                };
                say(&format!("  [{tool}] {args} -> {status}"));
            }
            Event::RunInputRequired { run_id, op_ids, .. } => say(&format!(
                "run {run_id} needs input for {}: an outcome to resolve or a call to approve \
                 (the hint below says which)",
                op_ids.join(", ")
            )),
            Event::RunStopped {
                run_id,
                limit,
                detail,
                ..
            } => say(&format!(
                "run {run_id} stopped: plan limit {limit} exhausted ({detail})"
            )),
            Event::RunFinished {
                run_id,
                status,
                turns,
                final_text,
                unverified,
                ..
            } => {
                say(&format!("run {run_id} {status} after {turns} turns"));
                if !final_text.is_empty() && status != "completed" {
                    say(final_text.trim_end());
                }
                if let Some(unverified) = unverified {
                    say(&unverified.describe());
                }
            }
        }
    }
}

impl EventSink for Renderer {
    fn emit(&mut self, event: Event) {
        match self.format {
            Format::Jsonl => {
                output::json_line(&serde_json::to_value(&event).unwrap_or(Value::Null))
            }
            Format::Text => self.text(event),
        }
    }

    fn progress(&mut self, progress: &Progress) {
        if let Some(status) = &mut self.status {
            status.update(progress);
        }
    }
}

/// One line of the text view, made safe for the terminal.
fn say(text: &str) {
    output::line(&output::terminal_safe(text));
}
