//! The OpenAI-compatible provider: `POST {base_url}/chat/completions` with tool calling.
//!
//! Works with ollama, vLLM, llama.cpp's server, LM Studio and hosted OpenAI-compatible APIs. The
//! key is read from the environment variable named by `api_key_env` at call time and sent only as
//! `Authorization: Bearer …`; it is never stored, logged or put into an error message (errors
//! carry the HTTP status and a short body excerpt, never headers; the excerpt is redacted before
//! it is cut, see [`crate::redact`]).

use std::borrow::Cow;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::command::excerpt;
use super::config::RequestOptions;
use super::http::{Endpoint, Failure};
use super::{ChatMessage, ChatRole, ModelRequest, ModelResponse, Provider, ToolCall, Usage};
use crate::error::{Error, ErrorKind, Result};

#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    endpoint: Endpoint,
    model: String,
    api_key_env: Option<String>,
    options: RequestOptions,
    /// The serialized messages of recent calls ([`super::wire`]).
    wire: super::wire::WireCache,
    /// Ask for the answer as a stream of deltas.
    stream: bool,
}

impl OpenAiProvider {
    pub fn new(
        name: &str,
        base_url: &str,
        model: &str,
        api_key_env: Option<String>,
        timeout: Duration,
    ) -> Self {
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        OpenAiProvider {
            endpoint: Endpoint::new(
                name,
                url,
                timeout,
                super::http::DEFAULT_MAX_TRANSPORT_RETRIES,
            ),
            model: model.to_string(),
            api_key_env,
            options: RequestOptions::default(),
            wire: super::wire::WireCache::default(),
            stream: false,
        }
    }

    /// Sends `options` (sampling, output cap, `extra_body`) with every request.
    pub fn with_options(mut self, options: RequestOptions) -> Self {
        self.options = options;
        self
    }

    /// Streams answers (`stream: true`, usage in the last chunk).
    pub fn with_stream(mut self, stream: bool) -> Self {
        self.stream = stream;
        self
    }

    /// Retries transient failures of one call at most `n` times ([`super::http`]).
    pub fn with_max_transport_retries(mut self, n: u32) -> Self {
        self.endpoint = self.endpoint.with_max_retries(n);
        self
    }

    /// The chat-completions request body: the fixed fields, then the messages, last
    /// ([`super::wire`]: turn N+1's body is turn N's plus the new messages).
    fn body(&self, request: &ModelRequest) -> String {
        let mut head = Map::new();
        head.insert("model".into(), json!(self.model));
        let o = &self.options;
        if let Some(t) = o.temperature {
            head.insert("temperature".into(), json!(t));
        }
        if let Some(p) = o.top_p {
            head.insert("top_p".into(), json!(p));
        }
        if let Some(n) = o.max_tokens {
            head.insert("max_tokens".into(), json!(n));
        }
        if let Some(seed) = o.seed {
            head.insert("seed".into(), json!(seed));
        }
        // The config refused keys the runtime writes, so this adds and never replaces.
        head.extend(o.extra_body.clone());
        head.insert("stream".into(), json!(self.stream));
        if self.stream {
            head.insert("stream_options".into(), json!({"include_usage": true}));
        }
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
            head.insert("tools".into(), Value::Array(tools));
        }
        let mut out = Value::Object(head).to_string();
        out.pop(); // the closing brace: the messages come last
        out.push_str(",\"messages\":[");
        self.wire.render(&ChatFormat, request.messages, &mut out);
        out.push_str("]}");
        out
    }
}

/// The chat-completions message layout: one wire message per message.
struct ChatFormat;

impl super::wire::WireFormat for ChatFormat {
    fn merges(&self, _: &ChatMessage, _: &ChatMessage) -> bool {
        false
    }
    fn write_group(&self, group: &[ChatMessage], _last: bool, out: &mut String) {
        for (i, m) in group.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            super::wire::push_json(out, &wire_message(m));
        }
    }
}

fn wire_message(m: &ChatMessage) -> Value {
    match m.role {
        ChatRole::System => json!({"role": "system", "content": m.content}),
        ChatRole::User => json!({"role": "user", "content": m.content}),
        ChatRole::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": m.content
        }),
        ChatRole::Assistant => {
            let mut v = json!({"role": "assistant", "content": m.content});
            if !m.tool_calls.is_empty() {
                if m.content.is_empty() {
                    v["content"] = Value::Null;
                }
                v["tool_calls"] = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        // A raw string is what the model sent unparsed; send it back verbatim.
                        let args = match &c.arguments {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        json!({"id": c.id, "type": "function",
                               "function": {"name": c.name, "arguments": args}})
                    })
                    .collect();
            }
            v
        }
    }
}

/// Turns a chat-completions response body into a [`ModelResponse`].
/// A body without the expected shape is an external failure (the server's); the caller names the
/// provider in front ([`Error::wrap`]).
fn parse_response(body: &Value, call_number: usize) -> Result<ModelResponse> {
    let message = body
        .pointer("/choices/0/message")
        .filter(|m| m.is_object())
        .ok_or_else(|| Error::external("the response has no choices[0].message"))?;
    let text = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        // Some servers send content parts: [{"type":"text","text":"…"}].
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (i, c) in calls.iter().enumerate() {
            let function = c.get("function").unwrap_or(&Value::Null);
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                // Older servers omit ids; make a stable one so the tool result can refer to it.
                .unwrap_or_else(|| format!("call_{}_{}", call_number + 1, i + 1));
            let name = function
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let arguments = match function.get("arguments") {
                Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
                Some(Value::String(s)) => {
                    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
                }
                Some(other) => other.clone(),
                None => Value::Null,
            };
            tool_calls.push(ToolCall {
                id,
                name,
                arguments,
            });
        }
    }
    let usage = body.get("usage").and_then(|u| {
        let input = u.get("prompt_tokens").and_then(Value::as_u64);
        let output = u.get("completion_tokens").and_then(Value::as_u64);
        (input.is_some() || output.is_some()).then(|| Usage {
            input_tokens: input.unwrap_or(0),
            output_tokens: output.unwrap_or(0),
            // OpenAI's automatic prefix caching reports the part of the prompt it read back.
            cache_read_tokens: u
                .pointer("/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
            cache_write_tokens: 0,
        })
    });
    Ok(ModelResponse {
        text,
        tool_calls,
        usage,
    })
}

impl Provider for OpenAiProvider {
    fn complete(&self, request: &ModelRequest, responses_so_far: usize) -> Result<ModelResponse> {
        let mut response = self.exchange(request, responses_so_far)?;
        if self.options.tool_calls_in_text == Some(true) {
            super::text_calls::extract(&mut response, request.tools, responses_so_far);
        }
        Ok(response)
    }
}

impl OpenAiProvider {
    /// One request and its answer as the server sent it.
    fn exchange(&self, request: &ModelRequest, responses_so_far: usize) -> Result<ModelResponse> {
        let key = super::http::api_key(self.api_key_env.as_deref(), &self.endpoint.what)?;
        let auth = key.map(|k| format!("Bearer {k}"));
        let mut headers = Vec::new();
        if let Some(a) = &auth {
            headers.push(("Authorization", a.as_str()));
        }
        let body = self.body(request);
        let what = &self.endpoint.what;
        if self.stream {
            let deadline = request.timeout.map(|t| std::time::Instant::now() + t);
            return self
                .endpoint
                .post(request, &headers, body.as_bytes(), true, |response| {
                    if super::http::is_json(&response) {
                        // A server or proxy that does not stream answers with one JSON body.
                        return read_json(what, response, responses_so_far);
                    }
                    let mut stream = ChatStream::default();
                    super::http::read_events(what, response, request, deadline, |event, live| {
                        stream.on_event(what, &event.data, live)
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

/// Reads a 2xx `response` holding one chat-completions JSON body.
fn read_json(
    what: &str,
    response: ureq::http::Response<ureq::Body>,
    responses_so_far: usize,
) -> std::result::Result<ModelResponse, Failure> {
    let value = super::http::read_json_body(what, response)?;
    parse_response(&value, responses_so_far)
        .map_err(|e| Failure::Fatal(Error::wrap(ErrorKind::External, what, e)))
}

/// The most tool calls one streamed answer may build.
const MAX_STREAMED_CALLS: u64 = 1024;

/// A chat-completions answer being streamed: `choices[0].delta` pieces, gathered.
#[derive(Debug, Default)]
struct ChatStream {
    text: String,
    /// `(id, name, arguments)` by the chunk's `index`.
    calls: Vec<(String, String, String)>,
    usage: Option<Value>,
}

impl ChatStream {
    /// Takes one event, its text appended to `live` too; true once the answer is complete
    /// (`[DONE]`).
    fn on_event(
        &mut self,
        what: &str,
        data: &str,
        live: &mut String,
    ) -> std::result::Result<bool, Failure> {
        if data.trim() == "[DONE]" {
            return Ok(true);
        }
        // The typed, borrowing read is the fast way; what it refuses (a value of another type
        // than the API's, a duplicate key) is read through a `Value` with the same meaning.
        let value: Value;
        let chunk = match serde_json::from_str::<Chunk>(data) {
            Ok(chunk) => chunk,
            Err(_) => {
                value = serde_json::from_str(data)
                    .map_err(|e| super::http::malformed(what, e, data))?;
                Chunk::from_value(&value)
            }
        };
        self.apply(what, chunk, data, live)
    }

    /// Adds one chunk's pieces (`data`, its text, is quoted if it is malformed).
    fn apply(
        &mut self,
        what: &str,
        chunk: Chunk,
        data: &str,
        live: &mut String,
    ) -> std::result::Result<bool, Failure> {
        if let Some(error) = &chunk.error {
            return Err(Failure::Fatal(Error::external(format!(
                "{what}: the stream reported an error: {}",
                excerpt(&crate::redact::redact(&error.to_string()), 300)
            ))));
        }
        if let Some(u) = chunk.usage.filter(|u| u.is_object()) {
            self.usage = Some(*u);
        }
        let Some(delta) = chunk.choices.and_then(|c| c.delta) else {
            return Ok(false);
        };
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            self.text.push_str(&text);
            live.push_str(&text);
        }
        for (position, call) in delta.tool_calls.into_iter().flatten().enumerate() {
            let index = call.index.unwrap_or(position as u64);
            if index >= MAX_STREAMED_CALLS {
                return Err(super::http::malformed(
                    what,
                    "tool call index too large",
                    data,
                ));
            }
            let index = index as usize;
            if self.calls.len() <= index {
                self.calls.resize_with(index + 1, Default::default);
            }
            let slot = &mut self.calls[index];
            if let Some(id) = call.id {
                slot.0 = id.into_owned();
            }
            let function = call.function.unwrap_or_default();
            if let Some(name) = function.name {
                slot.1.push_str(&name);
            }
            if let Some(args) = function.arguments {
                slot.2.push_str(&args);
            }
        }
        Ok(false)
    }

    /// The answer as a non-streamed response body, for [`parse_response`].
    fn into_body(self) -> Value {
        let calls: Vec<Value> = self
            .calls
            .into_iter()
            .filter(|(id, name, args)| !(id.is_empty() && name.is_empty() && args.is_empty()))
            .map(|(id, name, args)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}})
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": self.text});
        if !calls.is_empty() {
            message["tool_calls"] = Value::Array(calls);
        }
        let mut body = json!({"choices": [{"message": message}]});
        if let Some(u) = self.usage {
            body["usage"] = u;
        }
        body
    }
}

/// One chunk of a chat-completions stream, the parts the answer is built from. Deserialized
/// straight from the event's text, borrowing its strings (a `Cow` allocates only for text with
/// escapes) and keeping only `choices[0]`: a `Value` tree per chunk was most of a streamed
/// call's CPU (benches/provider_stream.rs).
#[derive(Debug, Default, serde::Deserialize)]
struct Chunk<'a> {
    /// Present (and not null) when the server reports an error in the stream.
    /// Boxed: with the two `Value`s inline the chunk was twice as large, and its read of a
    /// delta (which has neither) a fifth slower.
    #[serde(default)]
    error: Option<Box<Value>>,
    #[serde(default)]
    usage: Option<Box<Value>>,
    #[serde(default, borrow, deserialize_with = "first_choice")]
    choices: Option<Choice<'a>>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow, deserialize_with = "text")]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<CallDelta<'a>>>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct CallDelta<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default, borrow, deserialize_with = "text")]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Debug, Default, serde::Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default, borrow, deserialize_with = "text")]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "text")]
    arguments: Option<Cow<'a, str>>,
}

/// A string or null. serde borrows a bare `Cow<str>` marked `borrow` but not one inside an
/// `Option`, which it always copies into a new `String`: an allocation per streamed delta.
fn text<'de, D>(d: D) -> std::result::Result<Option<Cow<'de, str>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(serde::Deserialize)]
    struct Text<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(<Option<Text<'de>> as serde::Deserialize>::deserialize(d)?.map(|t| t.0))
}

impl<'a> Chunk<'a> {
    /// The chunk a `Value` holds, read leniently: a field of another type than the API's is
    /// absent (as `Value::as_str` and `as_u64` read it), whatever the chunk is it yields one.
    fn from_value(v: &'a Value) -> Chunk<'a> {
        let text = |v: &'a Value, key: &str| v.get(key).and_then(Value::as_str).map(Cow::Borrowed);
        let delta = v.pointer("/choices/0/delta").map(|d| Delta {
            content: text(d, "content"),
            tool_calls: d.get("tool_calls").and_then(Value::as_array).map(|calls| {
                calls
                    .iter()
                    .map(|c| CallDelta {
                        index: c.get("index").and_then(Value::as_u64),
                        id: text(c, "id"),
                        function: c.get("function").map(|f| FunctionDelta {
                            name: text(f, "name"),
                            arguments: text(f, "arguments"),
                        }),
                    })
                    .collect()
            }),
        });
        Chunk {
            error: v
                .get("error")
                .filter(|e| !e.is_null())
                .cloned()
                .map(Box::new),
            usage: v.get("usage").cloned().map(Box::new),
            choices: Some(Choice { delta }),
        }
    }
}

/// `choices`: the first element (the only one the runtime asks for), the others skipped
/// without being built; null is none.
fn first_choice<'de, D>(d: D) -> std::result::Result<Option<Choice<'de>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    struct First;
    impl<'de> serde::de::Visitor<'de> for First {
        type Value = Option<Choice<'de>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an array of choices")
        }
        fn visit_unit<E>(self) -> std::result::Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A>(self, mut seq: A) -> std::result::Result<Self::Value, A::Error>
        where
            A: serde::de::SeqAccess<'de>,
        {
            let first = seq.next_element()?;
            while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(first)
        }
    }
    d.deserialize_any(First)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigSource;
    use crate::config::ModelConfig;
    use crate::error::ErrorKind;
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// One HTTP/1.1 exchange as the loopback server saw it.
    #[derive(Debug)]
    struct Seen {
        request_line: String,
        headers: Vec<(String, String)>,
        body: Value,
    }

    impl Seen {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    /// A real HTTP/1.1 server on 127.0.0.1:0 that answers each connection with the next canned
    /// `(status, body)` and reports what it received.
    fn serve(responses: Vec<(u16, String)>) -> (String, mpsc::Receiver<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for (index, (status, body)) in responses.into_iter().enumerate() {
                let (stream, _) = listener.accept().unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                reader.read_line(&mut request_line).unwrap();
                let mut headers = Vec::new();
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    let (n, v) = line.split_once(':').unwrap();
                    headers.push((n.trim().to_string(), v.trim().to_string()));
                }
                let len: usize = headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                    .map(|(_, v)| v.parse().unwrap())
                    .unwrap_or(0);
                let mut buf = vec![0u8; len];
                reader.read_exact(&mut buf).unwrap();
                let mut stream = stream;
                let reason = if status == 200 { "OK" } else { "Error" };
                // Real servers use both framings: alternate Content-Length and chunked.
                if index % 2 == 0 {
                    write!(
                        stream,
                        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .unwrap();
                } else {
                    write!(
                        stream,
                        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                    )
                    .unwrap();
                    let (a, b) = body.split_at(body.len() / 2);
                    for part in [a, b] {
                        if !part.is_empty() {
                            write!(stream, "{:x}\r\n{part}\r\n", part.len()).unwrap();
                        }
                    }
                    write!(stream, "0\r\n\r\n").unwrap();
                }
                stream.flush().unwrap();
                let _ = tx.send(Seen {
                    request_line: request_line.trim_end().to_string(),
                    headers,
                    body: serde_json::from_slice(&buf).unwrap_or(Value::Null),
                });
            }
        });
        (format!("http://{addr}/v1"), rx)
    }

    fn provider(base_url: &str, key_env: Option<&str>) -> Box<dyn Provider> {
        let key_line = key_env
            .map(|k| format!("api_key_env = \"{k}\"\n"))
            .unwrap_or_default();
        provider_with(base_url, &format!("{key_line}timeout_ms = 20000"))
    }

    fn provider_with(base_url: &str, options: &str) -> Box<dyn Provider> {
        let text = format!(
            "[providers.local]\nkind = \"openai\"\nbase_url = \"{base_url}\"\nmodel = \"test-model\"\n{options}\n[roles]\nexecution = \"local\"\n"
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

    /// An execution-role request of `messages` and `tools`, with no limit, marks or observer.
    fn request<'a>(
        messages: &'a [ChatMessage],
        tools: &'a [crate::tools::ToolSchema],
    ) -> ModelRequest<'a> {
        ModelRequest::plain("execution", messages, tools)
    }

    fn one_call(p: &dyn Provider) {
        let messages = vec![ChatMessage::user("hi")];
        p.complete(&request(&messages, &[]), 0).unwrap();
    }

    #[test]
    fn request_options_reach_the_body_over_real_http() {
        let done = json!({"choices": [{"message": {"role": "assistant", "content": "ok"}}]});
        // A JSON body, whatever the request asked for: a streaming request is read by the
        // reply's Content-Type (http::is_json), as servers that cannot stream answer.
        let (url, seen) = serve(vec![(200, done.to_string()); 4]);
        // Every option, and an extra_body table (nested values included) merged at the top.
        let p = provider_with(
            &url,
            "temperature = 0.0\ntop_p = 0.5\nmax_tokens = 256\nseed = 7\n\
             [providers.local.extra_body]\ncache_prompt = true\ntop_k = 20\n\
             grammar = { kind = \"json\", strict = [1, 2] }\n",
        );
        one_call(p.as_ref());
        let body = seen.recv().unwrap().body;
        assert_eq!(body["model"], "test-model");
        assert_eq!(body["temperature"], json!(0.0));
        assert_eq!(body["top_p"], json!(0.5));
        assert_eq!(body["max_tokens"], 256);
        assert_eq!(body["seed"], 7);
        assert_eq!(body["cache_prompt"], true);
        assert_eq!(body["top_k"], 20);
        assert_eq!(body["grammar"], json!({"kind": "json", "strict": [1, 2]}));
        // Streaming is the default, usage asked for in the stream's last chunk.
        assert_eq!(body["stream"], true);
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        // Nothing set: only the default output cap is sent.
        one_call(provider_with(&url, "").as_ref());
        let body = seen.recv().unwrap().body;
        assert_eq!(body["max_tokens"], 4096);
        assert_eq!(body["stream"], true);
        // `stream = false`: one JSON body asked for, no stream options.
        one_call(provider_with(&url, "stream = false").as_ref());
        let body = seen.recv().unwrap().body;
        assert_eq!(body["stream"], false);
        assert!(body.get("stream_options").is_none(), "{body}");
        for absent in ["temperature", "top_p", "seed"] {
            assert!(body.get(absent).is_none(), "{absent}: {body}");
        }
        // max_completion_tokens (newer OpenAI models) replaces max_tokens.
        one_call(provider_with(&url, "extra_body = { max_completion_tokens = 99 }").as_ref());
        let body = seen.recv().unwrap().body;
        assert_eq!(body["max_completion_tokens"], 99);
        assert!(body.get("max_tokens").is_none(), "{body}");
    }

    #[test]
    fn invalid_request_options_are_config_errors() {
        let parse = |options: &str| {
            let text = format!(
                "[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n{options}\n[roles]\nexecution = \"local\"\n"
            );
            ModelConfig::parse(
                &text,
                std::path::Path::new("/cfg/c.toml"),
                ConfigSource::Flag,
            )
            .unwrap_err()
        };
        for (options, says) in [
            ("temprature = 0.1", "unknown field `temprature`"),
            ("temperature = 2.5", "temperature must be between 0 and 2"),
            ("temperature = nan", "temperature must be between 0 and 2"),
            ("top_p = 0.0", "top_p must be above 0"),
            ("max_tokens = 0", "max_tokens must be at least 1"),
            ("max_tokens = -1", "expected u32"),
            ("seed = \"x\"", "expected i64"),
            (
                "extra_body = { model = \"other\" }",
                "extra_body cannot set `model`",
            ),
            (
                "extra_body = { messages = [] }",
                "extra_body cannot set `messages`",
            ),
            (
                "temperature = 0.1\nextra_body = { temperature = 0.2 }",
                "both directly and in extra_body",
            ),
            (
                "max_tokens = 9\nextra_body = { max_completion_tokens = 9 }",
                "keep one",
            ),
            ("extra_body = 3", "expected a map"),
        ] {
            let err = parse(options);
            assert_eq!(err.kind, crate::error::ErrorKind::InvalidInput, "{options}");
            assert!(err.message.contains(says), "{options}: {}", err.message);
            assert!(err.message.contains("/cfg/c.toml"), "{}", err.message);
        }
    }

    #[test]
    fn run_records_show_the_options_but_never_a_key() {
        let text = "[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\napi_key_env = \"KXEN_TEST_OPTIONS_KEY\"\ntemperature = 0.2\nextra_body = { top_k = 5 }\n[roles]\nexecution = \"local\"\n";
        let config = ModelConfig::parse(
            text,
            std::path::Path::new("/cfg/c.toml"),
            ConfigSource::Flag,
        )
        .unwrap();
        let info = serde_json::to_value(config.provider_info("execution").unwrap()).unwrap();
        assert_eq!(
            info,
            json!({"name": "local", "kind": "openai", "model": "m", "options":
                {"temperature": 0.2, "maxTokens": 4096, "extraBody": {"top_k": 5}}})
        );
    }

    #[test]
    fn tool_call_round_trip_over_real_http() {
        let canary = "sk-canary-0d1e2f3a4b5c";
        // SAFETY: the variable name is unique to this test; no other thread reads it.
        #[allow(unsafe_code)] // test: set_var is unsafe since Rust 2024
        unsafe {
            std::env::set_var("KXEN_TEST_OPENAI_KEY_RT", canary)
        };
        let first = json!({
            "id": "chatcmpl-1", "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null,
                "tool_calls": [
                    {"id": "call_abc", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"src/lib.rs\"}"}},
                    {"id": "call_bad", "type": "function", "function": {"name": "write", "arguments": "{not json"}}
                ]}}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
        });
        let second = json!({
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "All done."}}]
        });
        let (url, seen) = serve(vec![(200, first.to_string()), (200, second.to_string())]);
        let p = provider(&url, Some("KXEN_TEST_OPENAI_KEY_RT"));
        let tools = crate::tools::schemas(&["read".to_string(), "write".to_string()]);
        let mut messages = vec![ChatMessage::system("be careful"), ChatMessage::user("fix")];
        let r = p.complete(&request(&messages, &tools), 0).unwrap();
        assert_eq!(r.text, "");
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].id, "call_abc");
        assert_eq!(r.tool_calls[0].name, "read");
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "src/lib.rs"}));
        assert_eq!(
            r.tool_calls[1].arguments,
            json!("{not json"),
            "garbage kept raw"
        );
        assert_eq!(
            r.usage,
            Some(Usage {
                input_tokens: 120,
                output_tokens: 30,
                ..Usage::default()
            })
        );
        let s1 = seen.recv().unwrap();
        assert_eq!(s1.request_line, "POST /v1/chat/completions HTTP/1.1");
        assert_eq!(
            s1.header("authorization"),
            Some(&*format!("Bearer {canary}"))
        );
        assert_eq!(s1.body["model"], "test-model");
        assert_eq!(
            s1.body["messages"][1],
            json!({"role": "user", "content": "fix"})
        );
        assert_eq!(s1.body["tools"][0]["type"], "function");
        assert_eq!(s1.body["tools"][0]["function"]["name"], "read");
        assert_eq!(
            s1.body["tools"][1]["function"]["parameters"]["required"],
            json!(["path", "content"])
        );

        // Second call: the assistant turn and the tool results go back in OpenAI's shape.
        messages.push(ChatMessage::assistant("", r.tool_calls.clone()));
        messages.push(ChatMessage::tool("call_abc", "     1\tpub fn x() {}\n"));
        messages.push(ChatMessage::tool(
            "call_bad",
            "arguments for `write` must be a JSON object",
        ));
        let r2 = p.complete(&request(&messages, &tools), 1).unwrap();
        assert_eq!(r2.text, "All done.");
        assert!(r2.tool_calls.is_empty() && r2.usage.is_none());
        let s2 = seen.recv().unwrap();
        let sent = &s2.body["messages"];
        assert_eq!(sent[2]["role"], "assistant");
        assert_eq!(sent[2]["content"], Value::Null);
        assert_eq!(
            sent[2]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\"src/lib.rs\"}"
        );
        assert_eq!(
            sent[2]["tool_calls"][1]["function"]["arguments"],
            "{not json"
        );
        assert_eq!(
            sent[3],
            json!({"role": "tool", "tool_call_id": "call_abc", "content": "     1\tpub fn x() {}\n"})
        );
        // The key never shows up in what the provider exposes.
        assert!(!format!("{p:?}").contains(canary));
    }

    /// A server that echoes the key in its error body, right where the excerpt is cut: the
    /// redaction runs on the whole body first, so not even the key's head survives.
    #[test]
    fn a_key_straddling_the_excerpt_cut_is_redacted_whole() {
        let canary = "sk-canary-straddle-5a6b7c8d9e";
        // SAFETY: the variable name is unique to this test; no other thread reads it.
        #[allow(unsafe_code)] // test: set_var is unsafe since Rust 2024
        unsafe {
            std::env::set_var("KXEN_TEST_OPENAI_KEY_CUT", canary)
        };
        let body = format!("{{\"error\":\"{}{canary} is not valid\"}}", "x".repeat(280));
        let (url, _seen) = serve(vec![(401, body)]);
        let p = provider(&url, Some("KXEN_TEST_OPENAI_KEY_CUT"));
        let req = request(&[], &[]);
        let e = p.complete(&req, 0).unwrap_err();
        assert!(e.message.contains("HTTP 401"), "{}", e.message);
        assert!(!e.message.contains("sk-canary"), "{}", e.message);
        assert!(e.message.contains("[redacted]"), "{}", e.message);
    }

    #[test]
    fn http_error_status_is_external_without_the_key() {
        let canary = "sk-canary-errpath-9876";
        // SAFETY: the variable name is unique to this test; no other thread reads it.
        #[allow(unsafe_code)] // test: set_var is unsafe since Rust 2024
        unsafe {
            std::env::set_var("KXEN_TEST_OPENAI_KEY_ERR", canary)
        };
        let (url, seen) = serve(vec![
            (
                401,
                r#"{"error":{"message":"Incorrect API key provided"}}"#.to_string(),
            ),
            (200, "this is not json".to_string()),
            (200, r#"{"choices":[]}"#.to_string()),
        ]);
        let p = provider(&url, Some("KXEN_TEST_OPENAI_KEY_ERR"));
        let req = request(&[], &[]);
        let e = p.complete(&req, 0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::External);
        assert!(e.message.contains("HTTP 401"), "{}", e.message);
        assert!(e.message.contains("Incorrect API key provided"));
        assert!(!e.message.contains(canary) && !e.hints.iter().any(|h| h.contains(canary)));
        assert!(!e.message.to_ascii_lowercase().contains("authorization"));
        assert_eq!(
            seen.recv().unwrap().header("Authorization"),
            Some(&*format!("Bearer {canary}"))
        );
        let e = p.complete(&req, 0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::External);
        assert!(e.message.contains("not JSON"));
        let e = p.complete(&req, 0).unwrap_err();
        assert!(e.message.contains("choices[0].message"));
        // No tools: the request carries no `tools` key at all.
        assert!(seen.recv().unwrap().body.get("tools").is_none());
    }

    #[test]
    fn unreachable_server_and_missing_key() {
        // Bind then drop a listener: the port is (almost certainly) closed.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let p = provider(&format!("http://127.0.0.1:{port}/v1"), None);
        let req = ModelRequest {
            timeout: Some(Duration::from_secs(5)),
            ..ModelRequest::plain("execution", &[], &[])
        };
        assert_eq!(p.complete(&req, 0).unwrap_err().kind, ErrorKind::External);
        let p = provider(
            "http://127.0.0.1:9/v1",
            Some("KXEN_TEST_OPENAI_KEY_UNSET_XYZ"),
        );
        let e = p.complete(&req, 0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidInput);
        assert!(e.message.contains("KXEN_TEST_OPENAI_KEY_UNSET_XYZ"));
    }

    #[test]
    fn loopback_hosts() {
        for yes in [
            "http://127.0.0.1:11434/v1/chat/completions",
            "http://localhost:8080/v1",
            "http://LOCALHOST/v1",
            "http://[::1]:8000/v1",
            "http://user@127.0.0.2:1/x",
            "http://user:pw@[0:0:0:0:0:0:0:1]/v1",
        ] {
            assert!(super::super::http::is_loopback(yes), "{yes}");
        }
        for no in [
            "https://api.openai.com/v1",
            "http://10.0.0.1:8000/v1",
            "http://localhost.evil.com/",
            "http://127.0.0.1.evil.com/",
            "http://evil.com/?next=http://127.0.0.1/",
            "not a url",
        ] {
            assert!(!super::super::http::is_loopback(no), "{no}");
        }
    }

    #[test]
    fn parses_servers_without_ids_or_string_arguments() {
        let body = json!({"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "tool_calls": [{"function": {"name": "glob", "arguments": {"pattern": "*.rs"}}},
                           {"function": {"name": "read", "arguments": ""}}]}}],
            "usage": {"prompt_tokens": 5}});
        let r = parse_response(&body, 3).unwrap();
        assert_eq!(r.text, "ab");
        assert_eq!(r.tool_calls[0].id, "call_4_1");
        assert_eq!(r.tool_calls[0].arguments, json!({"pattern": "*.rs"}));
        assert_eq!(r.tool_calls[1].arguments, json!({}));
        assert_eq!(
            r.usage,
            Some(Usage {
                input_tokens: 5,
                output_tokens: 0,
                ..Usage::default()
            })
        );
    }

    /// The stream of `chunks` read through the typed fast path (`typed`) or always through a
    /// `Value` ([`Chunk::from_value`]): the answer, or the failure's message.
    fn read_chunks(chunks: &[String], typed: bool) -> std::result::Result<Value, String> {
        let mut stream = ChatStream::default();
        let mut live = String::new();
        for data in chunks {
            let step = if typed {
                stream.on_event("p", data, &mut live)
            } else {
                match serde_json::from_str::<Value>(data) {
                    Ok(v) => stream.apply("p", Chunk::from_value(&v), data, &mut live),
                    Err(e) => Err(super::super::http::malformed("p", e, data)),
                }
            };
            match step {
                Ok(_) => {}
                Err(Failure::Fatal(e)) => return Err(e.message),
                Err(Failure::Transient { why, .. }) => return Err(why),
            }
        }
        // What streamed live is the answer's text, no more, no less.
        assert_eq!(live, stream.text);
        Ok(stream.into_body())
    }

    proptest::proptest! {
        /// The typed read of a chunk means what the `Value` read means, for chunks of the API's
        /// shape and for chunks with values of other types, nulls, extra keys and duplicates.
        #[test]
        fn typed_chunks_read_like_values(
            pieces in proptest::collection::vec(
                proptest::sample::select(vec![
                    r#""content":"a""#, r#""content":"b\n\u00e9""#, r#""content":null"#,
                    r#""content":5"#, r#""content":"""#, r#""tool_calls":[{"index":0,"id":"c1","function":{"name":"re","arguments":"{\"p"}}]"#,
                    r#""tool_calls":[{"index":1,"function":{"arguments":"ath\":1}"}}]"#,
                    r#""tool_calls":[{"function":{"name":"x"}},{"id":"c9"}]"#,
                    r#""tool_calls":[{"index":"0","function":{"arguments":{"a":1}}}]"#,
                    r#""tool_calls":[{"index":-1}]"#, r#""tool_calls":null"#, r#""tool_calls":{}"#,
                    r#""role":"assistant""#,
                ]),
                0..4,
            ),
            outer in proptest::sample::select(vec![
                "", r#","usage":{"prompt_tokens":3}"#, r#","usage":7"#, r#","error":null"#,
                r#","error":{"message":"boom"}"#, r#","choices":[]"#, r#","x":[1,{"y":2}]"#,
            ]),
            shape in 0..5usize,
        ) {
            let delta = format!("{{{}}}", pieces.join(","));
            let chunk = match shape {
                0 => format!(r#"{{"choices":[{{"index":0,"delta":{delta}}}]{outer}}}"#),
                1 => format!(r#"{{"choices":[{{"delta":{delta}}},{{"delta":{{"content":"z"}}}}]{outer}}}"#),
                2 => format!(r#"{{"choices":null{outer}}}"#),
                3 => format!(r#"{{"choices":[7]{outer}}}"#),
                _ => format!(r#"{{"choices":[{{"delta":null}}]{outer}}}"#),
            };
            let chunks = vec![chunk.clone(), chunk];
            proptest::prop_assert_eq!(read_chunks(&chunks, true), read_chunks(&chunks, false));
        }
    }
}
