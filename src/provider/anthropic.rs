//! The Anthropic provider: `POST {base_url}/v1/messages` (the Messages API) with tool use.
//!
//! The key is read from the variable `api_key_env` names at call time and sent only as
//! `x-api-key`; like the `openai` provider's it is never stored, and error bodies are redacted
//! before they are cut ([`super::http`]). Prompt caching (`cache = true`, the default) puts
//! `cache_control` breakpoints on the stable prefix — the system prompt and the tool list,
//! which never change within a Session — and on the last message, so each turn reads the
//! previous turn's prefix from the cache and writes only what is new. Usage is recorded with
//! the cache's reads and writes as numbers of their own (`inputTokens` is every prompt token:
//! Anthropic's `input_tokens` plus both cache counts).
//!
//! The history maps onto the API's shape: the system messages become `system`; an assistant
//! message becomes `text` and `tool_use` blocks; tool results and user text that follow each
//! other become one `user` message (`tool_result` blocks first), since the API wants user and
//! assistant turns to alternate.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::command::excerpt;
use super::config::RequestOptions;
use super::http::{Endpoint, Failure};
use super::wire::{WireCache, WireFormat, push_json};
use super::{ChatMessage, ChatRole, ModelRequest, ModelResponse, Provider, ToolCall, Usage};
use crate::error::{Error, ErrorKind, Result};

/// The API version sent when the config names none.
pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";
/// The API's own address.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    endpoint: Endpoint,
    model: String,
    api_key_env: Option<String>,
    version: String,
    /// Sampling and the output cap (`max_tokens` is always set), `extra_body`.
    options: RequestOptions,
    cache: bool,
    wire: WireCache,
    /// Ask for the answer as a stream of events.
    stream: bool,
}

impl AnthropicProvider {
    /// `base_url` is the API root (`https://api.anthropic.com`); one that already ends in
    /// `/v1` is taken as is.
    pub fn new(
        name: &str,
        base_url: &str,
        model: &str,
        api_key_env: Option<String>,
        timeout: Duration,
    ) -> Self {
        let root = base_url.trim_end_matches('/');
        let url = if root.ends_with("/v1") {
            format!("{root}/messages")
        } else {
            format!("{root}/v1/messages")
        };
        AnthropicProvider {
            endpoint: Endpoint::new(
                name,
                url,
                timeout,
                super::http::DEFAULT_MAX_TRANSPORT_RETRIES,
            ),
            model: model.to_string(),
            api_key_env,
            version: DEFAULT_ANTHROPIC_VERSION.to_string(),
            options: RequestOptions {
                max_tokens: Some(super::config::DEFAULT_MAX_TOKENS),
                ..RequestOptions::default()
            },
            cache: true,
            wire: WireCache::default(),
            stream: false,
        }
    }

    pub fn with_options(mut self, options: RequestOptions) -> Self {
        self.options = options;
        self
    }

    pub fn with_version(mut self, version: &str) -> Self {
        self.version = version.to_string();
        self
    }

    /// Whether `cache_control` breakpoints are sent.
    pub fn with_cache(mut self, cache: bool) -> Self {
        self.cache = cache;
        self
    }

    /// Streams answers (`stream: true`, Anthropic's SSE events).
    pub fn with_stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    pub fn with_max_transport_retries(mut self, n: u32) -> Self {
        self.endpoint = self.endpoint.with_max_retries(n);
        self
    }

    /// The Messages request body: fixed fields, system, tools, then the messages, last
    /// ([`super::wire`]).
    fn body(&self, request: &ModelRequest) -> String {
        let mut head = Map::new();
        head.insert("model".into(), json!(self.model));
        let o = &self.options;
        head.insert(
            "max_tokens".into(),
            json!(o.max_tokens.unwrap_or(super::config::DEFAULT_MAX_TOKENS)),
        );
        if let Some(t) = o.temperature {
            head.insert("temperature".into(), json!(t));
        }
        if let Some(p) = o.top_p {
            head.insert("top_p".into(), json!(p));
        }
        head.extend(o.extra_body.clone());
        head.insert("stream".into(), json!(self.stream));
        // Leading system messages are the system prompt; the rest is the conversation.
        let skip = request
            .messages
            .iter()
            .take_while(|m| m.role == ChatRole::System)
            .count();
        let system: Vec<&str> = request.messages[..skip]
            .iter()
            .map(|m| m.content.as_str())
            .filter(|c| !c.is_empty())
            .collect();
        if !system.is_empty() {
            let mut block = json!({"type": "text", "text": system.join("\n\n")});
            self.mark(&mut block);
            head.insert("system".into(), json!([block]));
        }
        if !request.tools.is_empty() {
            let mut tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({"name": t.name, "description": t.description,
                           "input_schema": t.parameters})
                })
                .collect();
            if let Some(last) = tools.last_mut() {
                self.mark(last);
            }
            head.insert("tools".into(), Value::Array(tools));
        }
        let mut out = Value::Object(head).to_string();
        out.pop(); // the closing brace: the messages come last
        out.push_str(",\"messages\":[");
        let format = MessagesFormat { cache: self.cache };
        self.wire
            .render(&format, &request.messages[skip..], &mut out);
        out.push_str("]}");
        out
    }

    /// Puts a cache breakpoint on `block` when caching is on.
    fn mark(&self, block: &mut Value) {
        if self.cache {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
    }
}

/// The Messages layout: tool results and user text that follow each other are one `user`
/// message; the last message carries the moving cache breakpoint.
struct MessagesFormat {
    cache: bool,
}

fn wire_role(m: &ChatMessage) -> &'static str {
    match m.role {
        ChatRole::Assistant => "assistant",
        // A system message after the conversation began is passed on as user text.
        ChatRole::User | ChatRole::Tool | ChatRole::System => "user",
    }
}

impl WireFormat for MessagesFormat {
    fn merges(&self, prev: &ChatMessage, next: &ChatMessage) -> bool {
        wire_role(prev) == wire_role(next)
    }

    fn write_group(&self, group: &[ChatMessage], last: bool, out: &mut String) {
        let Some(first) = group.first() else { return };
        let mut blocks = Vec::new();
        for m in group {
            blocks.extend(content_blocks(m));
        }
        if blocks.is_empty() {
            // The API refuses empty content; an empty message says so in words.
            blocks.push(json!({"type": "text", "text": "(empty)"}));
        }
        if last
            && self.cache
            && let Some(block) = blocks.last_mut()
        {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
        push_json(out, &json!({"role": wire_role(first), "content": blocks}));
    }
}

/// The content blocks of one message.
fn content_blocks(m: &ChatMessage) -> Vec<Value> {
    let mut blocks = Vec::new();
    match m.role {
        ChatRole::Tool => blocks.push(json!({
            "type": "tool_result",
            "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": m.content,
        })),
        _ => {
            // Empty text blocks are refused by the API.
            if !m.content.is_empty() {
                blocks.push(json!({"type": "text", "text": m.content}));
            }
            for c in &m.tool_calls {
                // `input` must be an object; what the model sent otherwise (kept as the tool
                // layer refused it) goes back under a key of its own.
                let input = match &c.arguments {
                    Value::Object(_) => c.arguments.clone(),
                    Value::Null => json!({}),
                    other => json!({"arguments": other}),
                };
                blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name,
                                   "input": input}));
            }
        }
    }
    blocks
}

/// Turns a Messages response body into a [`ModelResponse`]. A body without the expected shape is
/// an external failure (the server's); the caller names the provider in front ([`Error::wrap`]).
pub(crate) fn parse_response(body: &Value, call_number: usize) -> Result<ModelResponse> {
    let content = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::external("the response has no `content` array"))?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: block
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .unwrap_or_else(|| {
                        format!("toolu_{}_{}", call_number + 1, tool_calls.len() + 1)
                    }),
                name: block
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                arguments: block.get("input").cloned().unwrap_or(Value::Null),
            }),
            // Thinking and other blocks are not part of the answer.
            _ => {}
        }
    }
    Ok(ModelResponse {
        text,
        tool_calls,
        usage: body.get("usage").and_then(usage),
    })
}

/// Anthropic's usage: `input_tokens` excludes the cached part, which comes as
/// `cache_read_input_tokens` and `cache_creation_input_tokens`; ours is the sum.
pub(crate) fn usage(u: &Value) -> Option<Usage> {
    let n = |key: &str| u.get(key).and_then(Value::as_u64);
    let (input, output) = (n("input_tokens"), n("output_tokens"));
    if input.is_none() && output.is_none() {
        return None;
    }
    let read = n("cache_read_input_tokens").unwrap_or(0);
    let write = n("cache_creation_input_tokens").unwrap_or(0);
    Some(Usage {
        input_tokens: input
            .unwrap_or(0)
            .saturating_add(read)
            .saturating_add(write),
        output_tokens: output.unwrap_or(0),
        cache_read_tokens: read,
        cache_write_tokens: write,
    })
}

impl Provider for AnthropicProvider {
    fn complete(&self, request: &ModelRequest, responses_so_far: usize) -> Result<ModelResponse> {
        let key = super::http::api_key(self.api_key_env.as_deref(), &self.endpoint.what)?;
        let mut headers = vec![("anthropic-version", self.version.as_str())];
        if let Some(k) = &key {
            headers.push(("x-api-key", k.as_str()));
        }
        let body = self.body(request);
        let what = &self.endpoint.what;
        if self.stream {
            let deadline = request.timeout.map(|t| std::time::Instant::now() + t);
            return self
                .endpoint
                .post(request, &headers, body.as_bytes(), true, |response| {
                    if super::http::is_json(&response) {
                        // A proxy that does not stream answers with one JSON body.
                        return read_json(what, response, responses_so_far);
                    }
                    let mut stream = MessagesStream::default();
                    super::http::read_events(what, response, request, deadline, |event, live| {
                        stream.on_event(what, event, live)
                    })?;
                    parse_response(&stream.into_body(), responses_so_far)
                        .map_err(|e| Failure::Fatal(Error::wrap(ErrorKind::External, what, e)))
                });
        }
        self.endpoint
            .post(request, &headers, body.as_bytes(), false, |response| {
                read_json(what, response, responses_so_far)
            })
    }
}

/// Reads a 2xx `response` holding one Messages JSON body.
fn read_json(
    what: &str,
    response: ureq::http::Response<ureq::Body>,
    responses_so_far: usize,
) -> std::result::Result<ModelResponse, Failure> {
    let value = super::http::read_json_body(what, response)?;
    parse_response(&value, responses_so_far)
        .map_err(|e| Failure::Fatal(Error::wrap(ErrorKind::External, what, e)))
}

/// The most content blocks one streamed answer may build.
const MAX_STREAMED_BLOCKS: u64 = 1024;

/// A Messages answer being streamed (`message_start`, `content_block_*`, `message_delta`,
/// `message_stop`), gathered into the blocks and usage of a non-streamed answer.
#[derive(Debug, Default)]
struct MessagesStream {
    blocks: Vec<Value>,
    /// The `input_json_delta` pieces of each tool_use block.
    inputs: Vec<String>,
    usage: Map<String, Value>,
}

impl MessagesStream {
    /// Takes one event, its text appended to `live` too; true once the answer is complete
    /// (`message_stop`).
    fn on_event(
        &mut self,
        what: &str,
        event: &super::sse::SseEvent,
        live: &mut String,
    ) -> std::result::Result<bool, Failure> {
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| super::http::malformed(what, e, &event.data))?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or(event.event.as_str());
        let index = || -> std::result::Result<usize, Failure> {
            match data.get("index").and_then(Value::as_u64) {
                Some(i) if i < MAX_STREAMED_BLOCKS => Ok(i as usize),
                _ => Err(super::http::malformed(
                    what,
                    "no valid `index`",
                    &event.data,
                )),
            }
        };
        match kind {
            "message_start" => {
                if let Some(Value::Object(u)) = data.pointer("/message/usage") {
                    self.usage.extend(u.clone());
                }
            }
            "content_block_start" => {
                let i = index()?;
                let Some(block) = data.get("content_block").filter(|b| b.is_object()) else {
                    return Err(super::http::malformed(
                        what,
                        "no `content_block`",
                        &event.data,
                    ));
                };
                if self.blocks.len() <= i {
                    self.blocks.resize(i + 1, Value::Null);
                    self.inputs.resize(i + 1, String::new());
                }
                self.blocks[i] = block.clone();
                if let Some(text) = block.get("text").and_then(Value::as_str)
                    && !text.is_empty()
                {
                    live.push_str(text);
                }
            }
            "content_block_delta" => {
                let i = index()?;
                let delta = data.get("delta").unwrap_or(&Value::Null);
                let Some(block) = self.blocks.get_mut(i).filter(|b| b.is_object()) else {
                    return Err(super::http::malformed(
                        what,
                        "a delta for a block never started",
                        &event.data,
                    ));
                };
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        let text = delta.get("text").and_then(Value::as_str).unwrap_or("");
                        // Appended in place: copying the text so far for every delta made a
                        // long answer quadratic.
                        match block.get_mut("text") {
                            Some(Value::String(whole)) => whole.push_str(text),
                            _ => block["text"] = Value::String(text.to_string()),
                        }
                        live.push_str(text);
                    }
                    Some("input_json_delta") => self.inputs[i].push_str(
                        delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or(""),
                    ),
                    // Thinking and signature deltas are not part of the answer.
                    _ => {}
                }
            }
            "content_block_stop" => {
                let i = index()?;
                if let Some(block) = self.blocks.get_mut(i)
                    && block.get("type").and_then(Value::as_str) == Some("tool_use")
                {
                    let json = self.inputs[i].trim();
                    if !json.is_empty() {
                        // Unparsable input is kept as its text; the tool layer refuses it.
                        block["input"] = serde_json::from_str(json)
                            .unwrap_or_else(|_| Value::String(json.to_string()));
                    }
                }
            }
            "message_delta" => {
                if let Some(Value::Object(u)) = data.get("usage") {
                    for (k, v) in u {
                        if !v.is_null() {
                            self.usage.insert(k.clone(), v.clone());
                        }
                    }
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let why = format!(
                    "{what}: the stream reported an error: {}",
                    excerpt(&crate::redact::redact(&event.data), 300)
                );
                let error_type = data.pointer("/error/type").and_then(Value::as_str);
                return Err(match error_type {
                    Some("overloaded_error" | "api_error" | "rate_limit_error") => {
                        Failure::Transient { why, wait: None }
                    }
                    _ => Failure::Fatal(Error::external(why)),
                });
            }
            // `ping` and event types added later.
            _ => {}
        }
        Ok(false)
    }

    fn into_body(self) -> Value {
        let blocks: Vec<Value> = self.blocks.into_iter().filter(|b| b.is_object()).collect();
        let mut body = json!({"content": blocks});
        if !self.usage.is_empty() {
            body["usage"] = Value::Object(self.usage);
        }
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigSource, ModelConfig};
    use crate::provider::loopback::{Reply, serve};

    fn provider(url: &str, extra: &str) -> Box<dyn Provider> {
        let text = format!(
            "[providers.claude]\nkind = \"anthropic\"\nbase_url = \"{url}\"\nmodel = \"claude-test\"\n\
             api_key_env = \"KXEN_TEST_ANTHROPIC_KEY_UNIT\"\n{extra}\n[roles]\nexecution = \"claude\"\n"
        );
        ModelConfig::parse(
            &text,
            std::path::Path::new("/cfg/c.toml"),
            ConfigSource::Flag,
        )
        .unwrap()
        .provider_for("execution")
        .unwrap()
    }

    fn request<'a>(
        messages: &'a [ChatMessage],
        tools: &'a [crate::tools::ToolSchema],
    ) -> ModelRequest<'a> {
        ModelRequest::plain("execution", messages, tools)
    }

    const KEY: &str = "sk-ant-canary-unit-0a1b2c3d4e";

    fn set_key() {
        // SAFETY: the variable name is unique to this module's tests, which set the same value.
        #[allow(unsafe_code)] // test: set_var is unsafe since Rust 2024
        unsafe {
            std::env::set_var("KXEN_TEST_ANTHROPIC_KEY_UNIT", KEY)
        };
    }

    #[test]
    fn tool_use_round_trip_with_cache_breakpoints_and_usage() {
        set_key();
        let first = json!({"id": "msg_1", "type": "message", "role": "assistant",
            "content": [{"type": "text", "text": "Reading."},
                        {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a.txt"}},
                        {"type": "tool_use", "id": "toolu_b", "name": "glob", "input": {"pattern": "*"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 12, "output_tokens": 30,
                      "cache_creation_input_tokens": 900, "cache_read_input_tokens": 0}});
        let second = json!({"content": [{"type": "text", "text": "Done."}],
            "usage": {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 900,
                      "cache_creation_input_tokens": 40}});
        let replies = [first.to_string(), second.to_string()];
        let (url, seen) = serve(move |n, _| Reply::json(200, replies[n].clone()));
        let p = provider(&url, "max_tokens = 1000\ntemperature = 0.5");
        let tools = crate::tools::schemas(&["read".to_string(), "glob".to_string()]);
        let mut messages = vec![ChatMessage::system("be careful"), ChatMessage::user("fix")];
        let r = p.complete(&request(&messages, &tools), 0).unwrap();
        assert_eq!(r.text, "Reading.");
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].id, "toolu_a");
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "a.txt"}));
        assert_eq!(
            r.usage,
            Some(Usage {
                input_tokens: 912,
                output_tokens: 30,
                cache_read_tokens: 0,
                cache_write_tokens: 900
            })
        );
        let s1 = seen.recv().unwrap();
        assert_eq!(s1.request_line, "POST /v1/messages HTTP/1.1");
        assert_eq!(s1.header("x-api-key"), Some(KEY));
        assert_eq!(
            s1.header("anthropic-version"),
            Some(DEFAULT_ANTHROPIC_VERSION)
        );
        assert!(s1.header("authorization").is_none());
        let b1 = s1.json();
        assert_eq!(b1["model"], "claude-test");
        assert_eq!(b1["max_tokens"], 1000);
        assert_eq!(b1["temperature"], json!(0.5));
        // Streaming is the default; this server answers with a JSON body anyway, which is read
        // by its Content-Type (http::is_json).
        assert_eq!(b1["stream"], true);
        assert_eq!(
            b1["system"],
            json!([{"type": "text", "text": "be careful", "cache_control": {"type": "ephemeral"}}])
        );
        assert_eq!(b1["tools"][0]["name"], "read");
        assert!(b1["tools"][0].get("cache_control").is_none());
        assert_eq!(
            b1["tools"][1]["cache_control"],
            json!({"type": "ephemeral"})
        );
        assert_eq!(b1["tools"][1]["input_schema"]["type"], "object");
        assert_eq!(
            b1["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "fix",
                                                  "cache_control": {"type": "ephemeral"}}]}])
        );
        // The messages come last in the body's bytes.
        let text = String::from_utf8(s1.body.clone()).unwrap();
        assert!(text.ends_with("}]}]}"), "{text}");

        messages.push(ChatMessage::assistant("Reading.", r.tool_calls.clone()));
        messages.push(ChatMessage::tool("toolu_a", "alpha"));
        messages.push(ChatMessage::tool("toolu_b", "a.txt"));
        let r2 = p.complete(&request(&messages, &tools), 1).unwrap();
        assert_eq!(r2.text, "Done.");
        assert_eq!(r2.usage.unwrap().cache_read_tokens, 900);
        assert_eq!(r2.usage.unwrap().input_tokens, 945);
        let b2 = seen.recv().unwrap().json();
        assert_eq!(
            b2["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": "fix"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "a.txt"}},
                    {"type": "tool_use", "id": "toolu_b", "name": "glob", "input": {"pattern": "*"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_a", "content": "alpha"},
                    {"type": "tool_result", "tool_use_id": "toolu_b", "content": "a.txt",
                     "cache_control": {"type": "ephemeral"}}]}
            ])
        );
    }

    #[test]
    fn cache_off_sends_no_breakpoints_and_base_url_forms() {
        set_key();
        let done = json!({"content": [{"type": "text", "text": "ok"}]}).to_string();
        let (url, seen) = serve(move |_, _| Reply::json(200, done.clone()));
        let messages = [ChatMessage::system("s"), ChatMessage::user("u")];
        let tools = crate::tools::schemas(&["read".to_string()]);
        let p = provider(
            &format!("{url}/v1/"),
            "cache = false\nanthropic_version = \"2099-01-01\"\nstream = false",
        );
        p.complete(&request(&messages, &tools), 0).unwrap();
        let s = seen.recv().unwrap();
        assert_eq!(s.request_line, "POST /v1/messages HTTP/1.1");
        assert_eq!(s.header("anthropic-version"), Some("2099-01-01"));
        assert!(!String::from_utf8_lossy(&s.body).contains("cache_control"));
        assert_eq!(s.json()["max_tokens"], 4096);
        assert_eq!(s.json()["stream"], false);
    }

    /// A gateway that echoes the request headers in its error body: the key is redacted from
    /// the error, whole, even where the excerpt is cut.
    #[test]
    fn an_error_body_echoing_the_key_never_shows_it() {
        set_key();
        let (url, _seen) = serve(|_, seen| {
            let echo: Vec<String> = seen
                .headers
                .iter()
                .map(|(n, v)| format!("{n}: {v}"))
                .collect();
            let pad = "x".repeat(250);
            Reply::json(
                401,
                json!({"type": "error", "error": {"type": "authentication_error",
                    "message": format!("{pad} bad key; you sent {}", echo.join("; "))}})
                .to_string(),
            )
        });
        let p = provider(&url, "");
        let e = p
            .complete(&request(&[ChatMessage::user("u")], &[]), 0)
            .unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::External);
        assert!(e.message.contains("HTTP 401"), "{}", e.message);
        assert!(!e.message.contains("canary"), "{}", e.message);
        assert!(!format!("{p:?}").contains(KEY));
    }

    #[test]
    fn overloaded_is_retried_and_odd_bodies_fail_cleanly() {
        set_key();
        let (url, seen) = serve(|n, _| match n {
            0 => Reply::Full {
                status: 529,
                headers: vec![("retry-after", "0".into())],
                body: r#"{"type":"error","error":{"type":"overloaded_error"}}"#.into(),
            },
            1 => Reply::json(200, r#"{"content":[{"type":"text","text":"fine"}]}"#),
            2 => Reply::json(200, "not json"),
            _ => Reply::json(200, r#"{"content":"nope"}"#),
        });
        let p = provider(&url, "");
        let req_messages = [ChatMessage::user("u")];
        assert_eq!(
            p.complete(&request(&req_messages, &[]), 0).unwrap().text,
            "fine"
        );
        assert!(
            p.complete(&request(&req_messages, &[]), 0)
                .unwrap_err()
                .message
                .contains("not JSON")
        );
        assert!(
            p.complete(&request(&req_messages, &[]), 0)
                .unwrap_err()
                .message
                .contains("`content` array")
        );
        assert_eq!(seen.try_iter().count(), 4);
    }

    proptest::proptest! {
        /// Whatever JSON a server answers, reading it never panics.
        #[test]
        fn parse_never_panics(text in "[\\[\\]{}\",:a-z0-9_ ]{0,200}") {
            if let Ok(v) = serde_json::from_str::<Value>(&text) {
                let _ = parse_response(&v, 0);
            }
        }
    }
}
