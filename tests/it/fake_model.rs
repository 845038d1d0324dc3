//! A model server on 127.0.0.1 for run tests of the network providers (OpenAI
//! chat-completions, Anthropic Messages, their streams): one request per connection, answered by
//! a handler that sees each request; every request is recorded byte for byte.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct Request {
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// The body exactly as sent.
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// How the server answers one request.
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

pub type Seen = Arc<Mutex<Vec<Request>>>;

/// Serves until the test process ends; `handler(n, request)` answers the `n`-th (from 0).
/// Returns `http://127.0.0.1:PORT` and the requests seen so far.
pub fn serve(mut handler: impl FnMut(usize, &Request) -> Reply + Send + 'static) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let record = Arc::clone(&seen);
    std::thread::spawn(move || {
        let mut n = 0;
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let Some(request) = read_request(&stream) else {
                continue;
            };
            record.lock().unwrap().push(request.clone());
            let reply = handler(n, &request);
            n += 1;
            // Answered on a thread of its own: a slow stream holds up no other connection.
            std::thread::spawn(move || {
                let _ = answer(stream, reply);
            });
        }
    });
    (url, seen)
}

fn read_request(stream: &std::net::TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            return None;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (n, v) = header.split_once(':')?;
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let len = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        path,
        headers,
        body,
    })
}

fn answer(mut stream: std::net::TcpStream, reply: Reply) -> std::io::Result<()> {
    match reply {
        Reply::Hangup => Ok(()),
        Reply::Full {
            status,
            headers,
            body,
        } => {
            let mut head = format!("HTTP/1.1 {status} X\r\nConnection: close\r\n");
            for (n, v) in headers {
                head.push_str(&format!("{n}: {v}\r\n"));
            }
            head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
            stream.write_all(head.as_bytes())?;
            stream.flush()
        }
        Reply::Chunks {
            content_type,
            pieces,
            end,
        } => {
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n"
            )?;
            stream.flush()?;
            for (pause, piece) in pieces {
                std::thread::sleep(pause);
                if !piece.is_empty() {
                    write!(stream, "{:x}\r\n{piece}\r\n", piece.len())?;
                    stream.flush()?;
                }
            }
            if end {
                write!(stream, "0\r\n\r\n")?;
            }
            stream.flush()
        }
    }
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
