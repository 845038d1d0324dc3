//! Durable compaction (issue #20 item 5): when a run's next request would pass `compact_at` of
//! the execution provider's `context_window`, the model is asked (role `compaction`, else the
//! execution role's provider) for a summary of the conversation so far, and a `compaction`
//! record naming the range it replaces is appended durably to `messages.jsonl`. Later requests
//! carry the summary in place of the range; the messages themselves stay in the log.
//!
//! What is never summarized away: the run's task (a range holds no `user` message), the last
//! turn (the latest assistant message and its tool results stay after the range) and any tool
//! call without its result (a range holds every result of every call it holds, and no result
//! of a call outside it). A second compaction of a run starts where the first did, so its
//! summary is cumulative (the earlier summary is part of what it summarizes) and the earlier
//! record is replaced with its range.
//!
//! The size of the next request is the last reported input tokens (the usage of the latest
//! model response since the last compaction, its output tokens included, since that response is
//! now part of the prompt) plus the bytes appended since, divided by [`BYTES_PER_TOKEN`];
//! before any report, the bytes of the whole request divided by [`BYTES_PER_TOKEN`]. Three
//! bytes a token overestimates English prose and code (about four) and JSON (about three and a
//! half), so the estimate compacts early rather than late.
//!
//! The compaction call is an ordinary model call: its usage is recorded in the record and
//! counted in the run's usage (and so in a DWP plan's metered tokens), it is retried like any
//! call under `maxPureRetries`, and it does not count as a turn (`maxTurns` counts the model's
//! responses to the task). A crash before the record is durable leaves no record (the resumed
//! run compacts again, from the same state); a crash after it leaves a complete one (the
//! resumed run does not compact again: the record already shrank the estimate).

use std::sync::Arc;

use crate::config::ModelConfig;
use crate::error::Result;
use crate::provider::{COMPACTION_ROLE, ChatMessage, ChatRole, Provider};

/// `compact_at` when the config does not give it.
pub const DEFAULT_COMPACT_AT: f64 = 0.8;
/// The conservative bytes-per-token ratio of the size estimate (see the module docs).
pub const BYTES_PER_TOKEN: u64 = 3;
/// The share of the window a compaction call leaves for the summary it asks for.
pub const SUMMARY_ROOM: f64 = 0.05;

/// When and by whom a run's conversation is compacted.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Writes the summaries.
    pub provider: Arc<dyn Provider>,
    /// The execution provider's `context_window` (tokens).
    pub context_window: u64,
    /// The share of it at which the run compacts.
    pub compact_at: f64,
}

impl Settings {
    /// The estimated request size (tokens) at which the run compacts.
    pub fn threshold(&self) -> u64 {
        ((self.context_window as f64) * self.compact_at).floor() as u64
    }

    /// The bytes a compaction call may take (its instructions, the task and the transcript):
    /// the window's worth at [`BYTES_PER_TOKEN`] (so the call fits even where text runs that
    /// dense), less room for the summary ([`SUMMARY_ROOM`] of the window). A range is at most the
    /// request before the threshold was passed, so only text that runs sparser than that (at
    /// about 4 bytes a token, a few percent of the longest entries) is ever cut.
    pub fn transcript_budget(&self) -> usize {
        let window = self.context_window * BYTES_PER_TOKEN;
        let room = (window as f64 * SUMMARY_ROOM) as u64;
        window.saturating_sub(room) as usize
    }

    /// The same settings with the summaries written by `provider` (a `task` child's wrapper).
    pub fn with_provider(&self, provider: Arc<dyn Provider>) -> Settings {
        Settings {
            provider,
            ..self.clone()
        }
    }
}

/// The compaction settings of runs whose execution role is `role`, served by `execution`:
/// `None` when that provider has no `context_window`.
pub fn settings(
    config: &ModelConfig,
    role: &str,
    execution: &Arc<dyn Provider>,
) -> Result<Option<Settings>> {
    let (_, provider, _) = config.provider_config(role)?;
    let (Some(context_window), compact_at) = provider.context() else {
        return Ok(None);
    };
    let provider = if config.has_role(COMPACTION_ROLE) {
        Arc::from(config.provider_for(COMPACTION_ROLE)?)
    } else {
        Arc::clone(execution)
    };
    Ok(Some(Settings {
        provider,
        context_window,
        compact_at: compact_at.unwrap_or(DEFAULT_COMPACT_AT),
    }))
}

/// Tokens estimated for `bytes` of request (rounded up).
pub fn estimate_tokens(bytes: u64) -> u64 {
    bytes.div_ceil(BYTES_PER_TOKEN)
}

/// What one message adds to a request, roughly as a provider serializes it: its text, its tool
/// calls' names and arguments, and a little framing.
pub fn message_bytes(m: &ChatMessage) -> u64 {
    let calls: usize = m
        .tool_calls
        .iter()
        .map(|c| c.id.len() + c.name.len() + c.arguments.to_string().len() + 48)
        .sum();
    (m.content.len() + calls + m.tool_call_id.as_ref().map_or(0, |id| id.len()) + 32) as u64
}

/// The system prompt of a compaction call.
pub const INSTRUCTIONS: &str = "You compact the conversation of a coding agent so it can go on \
working within its context window. Write a summary of the conversation you are given that \
the agent can continue from without it: what was done and found so far (files read or \
changed, commands run and their results, decisions and why), what failed and what was tried, \
exact names, paths and values it will need again, and what is left to do. Do not restate the \
task; do not invent anything. Answer with the summary only, as plain text.";

/// The text that introduces a summary where it replaces its range in later requests.
pub const SUMMARY_HEADER: &str = "[Summary of the earlier conversation, written when it was \
compacted to fit the context window; the messages it replaces are not shown.]";

/// The messages of the compaction call for a run with `task`, summarizing `span` (the part of
/// the model's view the record will replace, an earlier summary included), in at most about
/// `budget` bytes: when the transcript would be longer (a range that grew past the window, say
/// after `context_window` was lowered between runs), the longest entries are cut to an equal
/// share, each cut saying how much it left out, so the call itself still fits.
pub fn request_messages(task: &str, span: &[ChatMessage], budget: usize) -> Vec<ChatMessage> {
    let mut text = String::from("The agent's task (kept as it is, for context):\n");
    text.push_str(task);
    text.push_str("\n\nThe conversation to summarize, oldest first:\n");
    let entries: Vec<String> = span
        .iter()
        .map(|m| {
            let mut entry = String::new();
            transcript_entry(m, &mut entry);
            entry
        })
        .collect();
    let cap = entry_cap(
        &entries,
        budget.saturating_sub(text.len() + INSTRUCTIONS.len()),
    );
    for entry in &entries {
        text.push('\n');
        match cap {
            Some(cap) if entry.len() > cap => {
                let cut = (0..=cap)
                    .rev()
                    .find(|&i| entry.is_char_boundary(i))
                    .unwrap_or(0);
                text.push_str(&entry[..cut]);
                text.push_str(&format!(
                    "… [{} bytes left out to fit the window]\n",
                    entry.len() - cut
                ));
            }
            _ => text.push_str(entry),
        }
    }
    text.push_str("\nWrite the summary now.");
    vec![ChatMessage::system(INSTRUCTIONS), ChatMessage::user(text)]
}

/// The length every entry is cut to so that all of them fit `budget` bytes (`None`: they fit
/// as they are): the largest cap under which the cut entries add up to the budget, never below
/// 200 bytes an entry.
fn entry_cap(entries: &[String], budget: usize) -> Option<usize> {
    let total: usize = entries.iter().map(String::len).sum();
    if total <= budget {
        return None;
    }
    let mut lengths: Vec<usize> = entries.iter().map(String::len).collect();
    lengths.sort_unstable();
    // Entries shorter than the cap stay whole; the rest share what is left.
    let mut left = budget;
    for (i, len) in lengths.iter().enumerate() {
        let share = left / (lengths.len() - i);
        if *len > share {
            return Some(share.max(200));
        }
        left -= len;
    }
    None
}

/// One message as a line of the transcript a compaction call reads.
fn transcript_entry(m: &ChatMessage, out: &mut String) {
    match m.role {
        ChatRole::System => out.push_str("[system] "),
        ChatRole::User => out.push_str("[user] "),
        ChatRole::Assistant => out.push_str("[assistant] "),
        ChatRole::Tool => {
            out.push_str("[tool result");
            if let Some(id) = &m.tool_call_id {
                out.push(' ');
                out.push_str(id);
            }
            out.push_str("] ");
        }
    }
    out.push_str(&m.content);
    for call in &m.tool_calls {
        out.push_str(&format!(
            "\n[assistant calls {} {} {}]",
            call.name, call.id, call.arguments
        ));
    }
    out.push('\n');
}

/// How a summary stands in for its range in later requests.
pub fn summary_message(summary: &str) -> ChatMessage {
    ChatMessage::user(format!("{SUMMARY_HEADER}\n\n{summary}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;
    use serde_json::json;

    #[test]
    fn the_request_holds_task_and_span_as_text_and_is_deterministic() {
        let span = vec![
            ChatMessage::assistant(
                "Reading.",
                vec![ToolCall {
                    id: "c1".into(),
                    name: "read".into(),
                    arguments: json!({"path": "a"}),
                }],
            ),
            ChatMessage::tool("c1", "alpha"),
        ];
        let a = request_messages("fix it", &span, 1 << 20);
        assert_eq!(a, request_messages("fix it", &span, 1 << 20));
        assert_eq!(a[0].role, ChatRole::System);
        let text = &a[1].content;
        assert!(text.contains("fix it"), "{text}");
        assert!(text.contains("[assistant] Reading."), "{text}");
        assert!(
            text.contains(r#"[assistant calls read c1 {"path":"a"}]"#),
            "{text}"
        );
        assert!(text.contains("[tool result c1] alpha"), "{text}");
        assert!(a.iter().all(|m| m.tool_calls.is_empty()));
    }

    #[test]
    fn a_transcript_past_the_budget_cuts_its_longest_entries() {
        let span = vec![
            ChatMessage::tool("c1", "é".repeat(20_000)),
            ChatMessage::assistant("short", vec![]),
            ChatMessage::tool("c2", "y".repeat(30_000)),
        ];
        let whole = request_messages("t", &span, 1 << 20);
        assert!(whole[1].content.len() > 60_000);
        let cut = request_messages("t", &span, 12_000 + INSTRUCTIONS.len());
        let text = &cut[1].content;
        assert!(text.len() < 13_000, "{}", text.len());
        assert!(
            text.contains("[assistant] short"),
            "a short entry stays whole"
        );
        assert_eq!(text.matches("bytes left out to fit the window").count(), 2);
        assert_eq!(entry_cap(&["a".repeat(10)], 100), None);
        assert_eq!(
            entry_cap(&["a".repeat(10), "b".repeat(1000)], 500),
            Some(490)
        );
        assert_eq!(entry_cap(&["b".repeat(1000)], 10), Some(200));
    }

    /// A config whose execution role is a script provider with the `[providers.s]` lines `extra`.
    fn config(extra: &str, more: &str) -> ModelConfig {
        let text = format!(
            "[providers.s]\nkind = \"script\"\npath = \"t.jsonl\"\n{extra}\n[roles]\nexecution = \"s\"\n{more}"
        );
        ModelConfig::parse(
            &text,
            std::path::Path::new("/cfg/config.toml"),
            crate::config::ConfigSource::Flag,
        )
        .unwrap()
    }

    #[test]
    fn settings_follow_the_context_window_and_fall_back_to_the_execution_provider() {
        let c = config("context_window = 8000", "");
        let execution: Arc<dyn Provider> = Arc::from(c.provider_for("execution").unwrap());
        let s = settings(&c, "execution", &execution).unwrap().unwrap();
        assert_eq!(s.threshold(), 6400);
        assert!(
            Arc::ptr_eq(&s.provider, &execution),
            "falls back to execution's"
        );
        let mapped = config(
            "context_window = 8000\ncompact_at = 0.5",
            "compaction = \"t\"\n[providers.t]\nkind = \"script\"\npath = \"u.jsonl\"\n",
        );
        let s = settings(&mapped, "execution", &execution).unwrap().unwrap();
        assert_eq!(s.threshold(), 4000);
        assert!(!Arc::ptr_eq(&s.provider, &execution));
        let none = config("", "");
        assert!(settings(&none, "execution", &execution).unwrap().is_none());
    }

    #[test]
    fn estimate_rounds_up_and_threshold_floors() {
        assert_eq!(estimate_tokens(0), 0);
        assert_eq!(estimate_tokens(1), 1);
        assert_eq!(estimate_tokens(7), 3);
        let s = Settings {
            provider: Arc::new(crate::provider::script::ScriptProvider::new("x".into())),
            context_window: 1001,
            compact_at: 0.8,
        };
        assert_eq!(s.threshold(), 800);
    }
}
