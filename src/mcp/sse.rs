//! Server-sent events (the `text/event-stream` format of the WHATWG HTML standard) read from a
//! byte stream, bounded: a Streamable HTTP MCP server may answer a POST with a stream of events
//! whose `data` carries JSON-RPC messages.
//!
//! Only what the MCP transport uses is kept: each event's `event` name and its `data` (lines
//! joined with `\n`), and, for resuming a stream that ended before its answer, the last event
//! id and the server's `retry` delay ([`Events::last_event_id`], [`Events::retry`]). Every limit
//! is a clear error, so a hostile server can neither grow our memory nor keep us reading a line
//! forever.

use std::io::BufRead;

/// The longest event id kept (a longer one is ignored; it would be sent back in a header).
const MAX_ID: usize = 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field; `message` when absent.
    pub name: String,
    pub data: String,
}

/// Reads events from `reader`.
pub struct Events<R> {
    reader: R,
    /// The largest line, and the largest `data` of one event.
    max_event: usize,
    /// The most bytes read over the whole stream.
    max_total: usize,
    total: usize,
    line: Vec<u8>,
    /// The `id` field last read (the standard's "last event ID buffer").
    id_buffer: Option<String>,
    /// The last event ID as of the last dispatch (a blank line), as the standard says.
    last_id: Option<String>,
    /// The `retry` field last read, in milliseconds.
    retry: Option<u64>,
    /// Whether the stream ended because reading failed (the connection broke), not a limit.
    read_failed: bool,
}

impl<R: BufRead> Events<R> {
    pub fn new(reader: R, max_event: usize, max_total: usize) -> Events<R> {
        Events {
            reader,
            max_event,
            max_total,
            total: 0,
            line: Vec::new(),
            id_buffer: None,
            last_id: None,
            retry: None,
            read_failed: false,
        }
    }

    /// The id of the last event read (the `Last-Event-ID` to resume after), if the server
    /// gave one.
    pub fn last_event_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// The server's reconnection delay (`retry`), in milliseconds.
    pub fn retry(&self) -> Option<u64> {
        self.retry
    }

    /// Whether [`next_event`](Self::next_event) failed because the connection broke (worth
    /// resuming), not because the server broke a limit (never resumed).
    pub fn read_failed(&self) -> bool {
        self.read_failed
    }

    /// The next event with data, `Ok(None)` at the end of the stream (an event not ended by a
    /// blank line is dropped, as the standard says), or why the stream is unreadable.
    pub fn next_event(&mut self) -> Result<Option<Event>, String> {
        let mut name = String::new();
        let mut data: Option<String> = None;
        loop {
            self.line.clear();
            let limit = (self.max_event + 2) as u64;
            let n = match std::io::Read::take(&mut self.reader, limit)
                .read_until(b'\n', &mut self.line)
            {
                Ok(n) => n,
                Err(e) => {
                    self.read_failed = true;
                    return Err(format!("reading the event stream failed: {e}"));
                }
            };
            if n == 0 {
                return Ok(None);
            }
            self.total += n;
            if self.total > self.max_total {
                return Err(format!(
                    "the event stream went past {} bytes without the answer",
                    self.max_total
                ));
            }
            if self.line.len() as u64 >= limit && self.line.last() != Some(&b'\n') {
                return Err(format!(
                    "the event stream has a line over {} bytes",
                    self.max_event
                ));
            }
            while matches!(self.line.last(), Some(b'\n' | b'\r')) {
                self.line.pop();
            }
            if self.line.is_empty() {
                self.last_id.clone_from(&self.id_buffer);
                match data.take() {
                    Some(mut data) => {
                        data.pop();
                        let name = if name.is_empty() {
                            "message".to_string()
                        } else {
                            std::mem::take(&mut name)
                        };
                        return Ok(Some(Event { name, data }));
                    }
                    None => {
                        name.clear();
                        continue;
                    }
                }
            }
            let text = String::from_utf8_lossy(&self.line);
            if text.starts_with(':') {
                continue; // a comment (keep-alive)
            }
            let (field, value) = match text.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (text.as_ref(), ""),
            };
            match field {
                "data" => {
                    // As the standard says: each line's value and a newline; the last newline
                    // is removed when the event is dispatched.
                    let d = data.get_or_insert_with(String::new);
                    if d.len() + value.len() > self.max_event {
                        return Err(format!(
                            "an event of the stream is over {} bytes",
                            self.max_event
                        ));
                    }
                    d.push_str(value);
                    d.push('\n');
                }
                "event" => name = value.to_string(),
                "id" if !value.contains('\0') && value.len() <= MAX_ID => {
                    self.id_buffer = Some(value.to_string());
                }
                "retry" if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) => {
                    self.retry = value.parse().ok();
                }
                _ => {} // unknown fields, and ids or retries the standard says to ignore
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &[u8], max_event: usize) -> Result<Vec<Event>, String> {
        let mut events = Events::new(text, max_event, 1 << 20);
        let mut out = Vec::new();
        while let Some(e) = events.next_event()? {
            out.push(e);
        }
        Ok(out)
    }

    #[test]
    fn events_are_read_as_the_standard_says() {
        let got = all(
            b": keep-alive\r\nevent: message\r\ndata: {\"a\":1}\r\n\r\nid: 7\ndata:x\ndata: y\n\n\ndata: tail-without-blank",
            100,
        )
        .unwrap();
        assert_eq!(
            got,
            [
                Event {
                    name: "message".into(),
                    data: "{\"a\":1}".into()
                },
                Event {
                    name: "message".into(),
                    data: "x\ny".into()
                }
            ]
        );
        let got = all(b"data:\n\nevent: ping\n\n", 100).unwrap();
        assert_eq!(got.len(), 1, "an event with no data is not dispatched");
        assert_eq!(got[0].data, "");
    }

    #[test]
    fn the_last_event_id_and_retry_are_kept_for_resuming() {
        let mut events = Events::new(
            &b"id: e-1\nretry: 500\ndata: \n\nid: e-2\nretry: soon\n"[..],
            100,
            1 << 20,
        );
        assert_eq!(events.next_event().unwrap().unwrap().data, "");
        assert_eq!(events.last_event_id(), Some("e-1"));
        assert_eq!(events.retry(), Some(500));
        assert_eq!(events.next_event().unwrap(), None);
        assert_eq!(
            events.last_event_id(),
            Some("e-1"),
            "an id not followed by a blank line is not the last event's"
        );
        assert_eq!(
            events.retry(),
            Some(500),
            "a retry that is not digits is ignored"
        );
        assert!(!events.read_failed());
    }

    #[test]
    fn limits_are_errors() {
        let long = format!("data: {}\n\n", "x".repeat(200));
        assert!(
            all(long.as_bytes(), 100)
                .unwrap_err()
                .contains("line over 100")
        );
        let many = "data: xxxxxxxxxx\n".repeat(20) + "\n";
        assert!(
            all(many.as_bytes(), 100)
                .unwrap_err()
                .contains("over 100 bytes")
        );
        let endless = ": ping\n".repeat(1000);
        let mut events = Events::new(endless.as_bytes(), 100, 500);
        assert!(events.next_event().unwrap_err().contains("past 500 bytes"));
    }
}
