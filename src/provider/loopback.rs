//! A real HTTP/1.1 server on 127.0.0.1 for the network providers' tests: the unit tests here and
//! the run tests of `tests/it` (which include this file, `tests/it/fake_model.rs`). Each
//! connection carries one request, recorded byte for byte and answered by a handler that sees
//! every request (and how many came before), on a thread of its own so that a slow stream holds
//! up no other connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

/// One request as the server read it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub request_line: String,
    /// The request target (`/v1/messages`).
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// The body exactly as sent.
    pub body: Vec<u8>,
}

impl Seen {
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
    /// A complete response with a Content-Length.
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// Status line and headers, then these pieces of a chunked body with a pause before each;
    /// `end` false cuts the connection instead of ending the body.
    Chunks {
        status: u16,
        content_type: &'static str,
        pieces: Vec<(Duration, String)>,
        end: bool,
    },
    /// The connection is closed without an answer.
    Hangup,
}

impl Reply {
    /// A JSON body (`&str`, `String` or `&serde_json::Value`).
    pub fn json(status: u16, body: impl ToString) -> Reply {
        Reply::Full {
            status,
            headers: vec![("Content-Type", "application/json".into())],
            body: body.to_string(),
        }
    }
}

/// Serves requests until the test ends; `handler(n, request)` answers the `n`-th (from 0).
/// Returns `http://127.0.0.1:PORT` and what the server received, request by request.
pub fn serve(
    handler: impl FnMut(usize, &Seen) -> Reply + Send + 'static,
) -> (String, mpsc::Receiver<Seen>) {
    let (tx, rx) = mpsc::channel();
    let url = serve_each(handler, move |seen| {
        let _ = tx.send(seen.clone());
    });
    (url, rx)
}

/// [`serve`], with `record` seeing each request before it is answered.
pub fn serve_each(
    mut handler: impl FnMut(usize, &Seen) -> Reply + Send + 'static,
    mut record: impl FnMut(&Seen) + Send + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut n = 0;
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let Some(seen) = read_request(&stream) else {
                continue;
            };
            record(&seen);
            let reply = handler(n, &seen);
            n += 1;
            std::thread::spawn(move || {
                let _ = answer(stream, reply);
            });
        }
    });
    format!("http://{addr}")
}

fn read_request(stream: &std::net::TcpStream) -> Option<Seen> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (n, v) = line.split_once(':')?;
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).ok()?;
    Some(Seen {
        path: request_line.split_whitespace().nth(1)?.to_string(),
        request_line: request_line.trim_end().to_string(),
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
            head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
            stream.write_all(head.as_bytes())?;
            stream.write_all(body.as_bytes())?;
            stream.flush()
        }
        Reply::Chunks {
            status,
            content_type,
            pieces,
            end,
        } => {
            write!(
                stream,
                "HTTP/1.1 {status} X\r\nConnection: close\r\nContent-Type: {content_type}\r\nTransfer-Encoding: chunked\r\n\r\n"
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
