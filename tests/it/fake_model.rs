//! A model server on 127.0.0.1 for run tests of the network providers (OpenAI
//! chat-completions, Anthropic Messages, their streams): the providers' unit-test server
//! (`src/provider/loopback.rs`), with every request kept for the test to read, and the answers
//! and config the tests share.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

// The providers' unit tests' server, shared so that there is one.
#[path = "../../src/provider/loopback.rs"]
#[allow(dead_code)]
mod loopback;

pub use loopback::Seen as Request;

/// How the server answers one request: the loopback server's answers, with status 200 for a
/// stream and a JSON value for [`Reply::json`].
pub enum Reply {
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// A chunked body, a pause before each piece; `end` false cuts the connection mid-body.
    Chunks {
        content_type: &'static str,
        pieces: Vec<(Duration, String)>,
        end: bool,
    },
    /// The connection is closed without an answer.
    Hangup,
}

impl Reply {
    pub fn json(body: &Value) -> Reply {
        Reply::Full {
            status: 200,
            headers: vec![("Content-Type", "application/json".into())],
            body: body.to_string(),
        }
    }
}

impl From<Reply> for loopback::Reply {
    fn from(reply: Reply) -> loopback::Reply {
        match reply {
            Reply::Full {
                status,
                headers,
                body,
            } => loopback::Reply::Full {
                status,
                headers,
                body,
            },
            Reply::Chunks {
                content_type,
                pieces,
                end,
            } => loopback::Reply::Chunks {
                status: 200,
                content_type,
                pieces,
                end,
            },
            Reply::Hangup => loopback::Reply::Hangup,
        }
    }
}

pub type Seen = Arc<Mutex<Vec<Request>>>;

/// Serves until the test process ends; `handler(n, request)` answers the `n`-th (from 0).
/// Returns `http://127.0.0.1:PORT` and the requests seen so far.
pub fn serve(mut handler: impl FnMut(usize, &Request) -> Reply + Send + 'static) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let record = Arc::clone(&seen);
    let handler = move |n: usize, request: &Request| handler(n, request).into();
    let url = loopback::serve_each(handler, move |request| {
        record.lock().unwrap().push(request.clone());
    });
    (url, seen)
}

/// An OpenAI chat-completions answer with `message`.
pub fn completion(message: Value) -> Value {
    serde_json::json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0,
        "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3}})
}

/// An OpenAI assistant message calling `tool` with `arguments`.
pub fn tool_call_message(id: &str, tool: &str, arguments: &Value) -> Value {
    serde_json::json!({"role": "assistant", "content": null, "tool_calls": [{"id": id,
        "type": "function", "function": {"name": tool, "arguments": arguments.to_string()}}]})
}

/// A config whose `execution` role is provider `[providers.p]` with the given TOML body.
pub fn config(env: &crate::env::TestEnv, body: &str) -> std::path::PathBuf {
    let path = env.path().join("model.toml");
    std::fs::write(
        &path,
        format!("[providers.p]\n{body}\n[roles]\nexecution = \"p\"\n"),
    )
    .unwrap();
    path
}
