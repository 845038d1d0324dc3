//! Model providers (MRM, docs/spec.md §10): the runtime's model-role map and the clients behind
//! it.
//!
//! The model config ([`crate::config::ModelConfig`], TOML) maps role names (`execution`,
//! `planning`, …) to providers of three kinds: an OpenAI-compatible chat-completions endpoint ([`openai`]), an
//! external command speaking JSON on stdin/stdout ([`command`]), and a deterministic script that
//! replays recorded responses ([`script`]). The definition never names a provider or a model;
//! credentials are read from the environment at call time and never stored.

pub mod anthropic;
pub mod command;
pub mod config;
pub mod http;
#[cfg(test)]
#[allow(dead_code)] // shared by the providers' tests; not each uses every part
pub(crate) mod loopback;
pub mod openai;
pub mod script;
pub mod sse;
pub mod text_calls;
pub mod wire;

use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Result;
use crate::tools::ToolSchema;

pub use config::ProviderInfo;

/// The model role that writes compaction summaries; unmapped, the execution role's provider
/// does (`run::compaction` asks for it, the script provider answers it in kind).
pub const COMPACTION_ROLE: &str = "compaction";

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ChatRole {
    System,
    User,
    Assistant,
    Tool,
}

/// One message of the conversation sent to a model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChatMessage {
    pub role: ChatRole,
    #[serde(default)]
    pub content: String,
    /// Assistant messages: the tool calls the model made.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Tool messages: the id of the call this result answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    pub fn system(content: impl Into<String>) -> ChatMessage {
        ChatMessage::plain(ChatRole::System, content)
    }
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::plain(ChatRole::User, content)
    }
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> ChatMessage {
        ChatMessage {
            tool_calls,
            ..ChatMessage::plain(ChatRole::Assistant, content)
        }
    }
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            tool_call_id: Some(tool_call_id.into()),
            ..ChatMessage::plain(ChatRole::Tool, content)
        }
    }
    fn plain(role: ChatRole, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// Usually an object. Anything else (the raw string when the model sent unparsable JSON,
    /// `null` when it sent none) is passed on, and the tool layer turns it into a tool error.
    #[serde(default)]
    pub arguments: Value,
}

/// How deeply a tool call's arguments may nest. Deeper arguments are kept as their JSON text (a
/// string, which every tool refuses as "not an object"): the durable records that embed them
/// (`messages.jsonl`, the journal) add nesting levels of their own, and every record must stay
/// within what the readers parse back (serde_json's limit of 128) — a record written but not
/// readable would be taken for a torn tail or for damage. No real tool needs a tenth of this.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

impl ToolCall {
    /// Applies [`MAX_ARGUMENT_DEPTH`] to `arguments`.
    pub fn bound_arguments(&mut self) {
        if depth(&self.arguments) > MAX_ARGUMENT_DEPTH {
            let text = serde_json::to_string(&self.arguments).unwrap_or_default();
            self.arguments = Value::String(text);
        }
    }
}

/// The nesting depth of `value` (a scalar is 0), without recursion.
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// Tokens a model call consumed, when the provider reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Usage {
    /// Every prompt token, cached ones included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, those read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "crate::session::is_zero")]
    pub cache_read_tokens: u64,
    /// Of `input_tokens`, those written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "crate::session::is_zero")]
    pub cache_write_tokens: u64,
}

/// What a model answered: text, tool calls, or both. This is also the line format of script
/// files and the stdout format of command providers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelResponse {
    #[serde(default)]
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

/// One model call.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The role being served (`execution`, `planning`, …); passed on to command providers.
    pub role: &'a str,
    pub messages: &'a [ChatMessage],
    /// The tools the model may call (empty for tool-less calls such as the Builder).
    pub tools: &'a [ToolSchema],
    /// A limit for this call; the provider's own timeout applies too (the shorter wins).
    pub timeout: Option<Duration>,
    /// The mark of the run attempt the call serves (`None` for the Builder, before any run). A
    /// command provider's process carries it in its environment, so that what a killed runtime
    /// left running is stopped at the run's next start ([`crate::process::orphans`]).
    pub attempt_mark: Option<&'a str>,
    /// A random mark of this one call (`KXEN_MODEL_CALL_ID` in a command provider's
    /// environment): when a cancel abandons the call, what the command started is stopped by it.
    pub call_mark: Option<&'a str>,
    /// The `description` of the `task` call whose child Session this call serves (`None` for a
    /// top-level Session): the script provider answers a child from the lines tagged with it,
    /// a command provider gets it as `task` in its input.
    pub task: Option<&'a str>,
    /// Told what happens while the call is under way (transport retries, streamed text); the
    /// run turns it into events. `None`: nobody listens (the Builder, tests).
    pub observer: Option<Observer<'a>>,
    /// Set when the run is canceled: a provider waiting out a backoff stops at once.
    pub cancel: Option<&'a AtomicBool>,
}

impl<'a> ModelRequest<'a> {
    /// A call of `role` with `messages` and `tools` and nothing else: no limit of its own, no
    /// marks, no task, nobody listening, no cancel (the Builder, tests); set the fields a
    /// call needs on the result.
    pub fn plain(
        role: &'a str,
        messages: &'a [ChatMessage],
        tools: &'a [ToolSchema],
    ) -> ModelRequest<'a> {
        ModelRequest {
            role,
            messages,
            tools,
            timeout: None,
            attempt_mark: None,
            call_mark: None,
            task: None,
            observer: None,
            cancel: None,
        }
    }
}

impl ModelRequest<'_> {
    /// Reports `event` to the observer, if any.
    pub fn report(&self, event: CallEvent) {
        if let Some(observer) = self.observer {
            (observer.0)(event)
        }
    }

    /// Whether the run was canceled.
    pub fn canceled(&self) -> bool {
        self.cancel
            .is_some_and(|c| c.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// What a provider reports while one call is under way. Nothing of it is durable: a call that
/// fails or is abandoned leaves only these events behind.
#[derive(Debug, Clone, PartialEq)]
pub enum CallEvent {
    /// A transient failure (HTTP 408/429/5xx, a reset connection): the call is sent again after
    /// `wait`. `attempt` counts the retries of this call from 1, up to `max`
    /// (`max_transport_retries`). Text streamed before it is void.
    Retry {
        attempt: u32,
        max: u32,
        wait: Duration,
        reason: String,
    },
    /// A piece of the answer's text as it streams in.
    TextDelta(String),
}

/// The listener of a [`ModelRequest`].
#[derive(Clone, Copy)]
pub struct Observer<'a>(pub &'a (dyn Fn(CallEvent) + Sync));

impl std::fmt::Debug for Observer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

/// A model client. `responses_so_far` is the number of model responses already recorded in the
/// Session's history (the script provider answers with line `responses_so_far + 1`, so a resumed
/// run continues where it stopped).
///
/// Errors: a provider failure (unreachable, HTTP error, bad output, script exhausted) is
/// `ErrorKind::External` — the runtime counts it against `maxPureRetries`; an invalid script
/// line is `ErrorKind::InvalidInput`.
pub trait Provider: Send + Sync + std::fmt::Debug {
    fn complete(&self, request: &ModelRequest, responses_so_far: usize) -> Result<ModelResponse>;
}

/// The shorter of a provider's own limit and the request's.
pub(crate) fn effective_timeout(own: Duration, request: Option<Duration>) -> Duration {
    match request {
        Some(r) => r.min(own),
        None => own,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Arguments as deep as a provider can parse them must still give records that read back.
    #[test]
    fn too_deep_arguments_are_kept_as_text_so_every_record_reads_back() {
        use crate::session::{CallRecord, Message, MessageLog, Role};
        let deep = 126;
        let text = format!("{}1{}", "{\"a\":".repeat(deep), "}".repeat(deep));
        let mut call = ToolCall {
            id: "c1".into(),
            name: "exec".into(),
            arguments: serde_json::from_str(&text).unwrap(),
        };
        call.bound_arguments();
        assert_eq!(call.arguments, Value::String(text));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("messages.jsonl");
        let mut message = Message::new("run_1", Role::Assistant, "");
        message.tool_calls = vec![CallRecord {
            id: call.id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
        }];
        let mut log = MessageLog::open(&path).unwrap();
        log.append(Message::new("run_1", Role::User, "task"))
            .unwrap();
        log.append(message).unwrap();
        drop(log);
        let size = std::fs::metadata(&path).unwrap().len();
        let reopened = MessageLog::open(&path).unwrap();
        assert_eq!(reopened.messages().len(), 2);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), size);

        // Ordinary nesting is left alone.
        let mut call = ToolCall {
            id: "c2".into(),
            name: "write".into(),
            arguments: json!({"path": "a", "content": {"x": [[[1]]]}}),
        };
        let before = call.arguments.clone();
        call.bound_arguments();
        assert_eq!(call.arguments, before);
    }

    #[test]
    fn messages_serialize_camel_case_and_round_trip() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "read".into(),
            arguments: json!({"path": "a"}),
        };
        let msgs = vec![
            ChatMessage::system("sys"),
            ChatMessage::assistant("", vec![call]),
            ChatMessage::tool("call_1", "out"),
        ];
        let v = serde_json::to_value(&msgs).unwrap();
        assert_eq!(
            v,
            json!([
                {"role": "system", "content": "sys"},
                {"role": "assistant", "content": "", "toolCalls": [{"id": "call_1", "name": "read", "arguments": {"path": "a"}}]},
                {"role": "tool", "content": "out", "toolCallId": "call_1"}
            ])
        );
        let back: Vec<ChatMessage> = serde_json::from_value(v).unwrap();
        assert_eq!(back, msgs);
    }

    #[test]
    fn response_shape_is_strict_with_optional_parts() {
        let r: ModelResponse = serde_json::from_str(r#"{"text":"hi"}"#).unwrap();
        assert_eq!(r.text, "hi");
        assert!(r.tool_calls.is_empty() && r.usage.is_none());
        let r: ModelResponse = serde_json::from_str(
            r#"{"text":"","toolCalls":[{"id":"c","name":"exec","arguments":"garbage"}],"usage":{"inputTokens":3,"outputTokens":4}}"#,
        )
        .unwrap();
        assert_eq!(r.tool_calls[0].arguments, json!("garbage"));
        assert_eq!(
            r.usage,
            Some(Usage {
                input_tokens: 3,
                output_tokens: 4,
                ..Usage::default()
            })
        );
        assert!(serde_json::from_str::<ModelResponse>(r#"{"txt":"hi"}"#).is_err());
    }

    #[test]
    fn timeout_takes_the_shorter() {
        let s = Duration::from_secs;
        assert_eq!(effective_timeout(s(300), Some(s(120))), s(120));
        assert_eq!(effective_timeout(s(60), Some(s(120))), s(60));
        assert_eq!(effective_timeout(s(60), None), s(60));
    }
}
