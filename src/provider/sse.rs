//! A small incremental parser for server-sent events (the WHATWG `text/event-stream` format),
//! as OpenAI and Anthropic stream their answers.
//!
//! No crate: the maintained SSE crates are async (`eventsource-stream` over futures streams,
//! `reqwest-eventsource`), and the client here is blocking ureq; the part of the format a model
//! API uses is a few lines. Bytes are fed as they arrive, cut anywhere (even inside a UTF-8
//! character or between `\r` and `\n`); complete events come out. Fields other than `event` and
//! `data` (`id`, `retry`) are read and ignored; a line starting with `:` is a comment (servers
//! send them as keep-alives).

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; empty when the event had none (OpenAI's).
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The parser's state between chunks.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the line being read (not yet ended).
    line: Vec<u8>,
    /// The last byte was `\r`: a `\n` right after it ends nothing more.
    after_cr: bool,
    event: String,
    data: String,
    /// Whether a `data` field was seen for the event being read.
    has_data: bool,
    /// The largest line or event kept before refusing the stream.
    limit: usize,
    /// An event handed back by [`SseParser::recycle`]: its buffers hold the next event's.
    spare: Option<SseEvent>,
}

/// A line or an event longer than the limit: the stream is refused rather than held in memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLong;

impl SseParser {
    /// A parser refusing lines and events above `limit` bytes.
    pub fn new(limit: usize) -> SseParser {
        SseParser {
            limit,
            ..SseParser::default()
        }
    }

    /// Feeds `bytes`; appends every event they complete to `out`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<SseEvent>) -> Result<(), TooLong> {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.after_cr && rest[0] == b'\n' {
                // The `\n` of a `\r\n` whose `\r` ended the line already.
                self.after_cr = false;
                rest = &rest[1..];
                continue;
            }
            self.after_cr = false;
            let end = memchr::memchr2(b'\n', b'\r', rest);
            let text = &rest[..end.unwrap_or(rest.len())];
            if self.line.len() + text.len() > self.limit {
                return Err(TooLong);
            }
            let Some(end) = end else {
                // The line goes on in the next chunk.
                self.line.extend_from_slice(text);
                break;
            };
            self.after_cr = rest[end] == b'\r';
            if self.line.is_empty() {
                // The whole line is in this chunk: read in place, not copied first.
                self.end_line(text, out);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(text);
                self.end_line(&line, out);
                // Its buffer is kept for the next line cut across chunks.
                line.clear();
                self.line = line;
            }
            rest = &rest[end + 1..];
        }
        if self.data.len() > self.limit {
            return Err(TooLong);
        }
        Ok(())
    }

    /// Takes back an event that was read, so that the next one reuses its buffers (a stream of
    /// small deltas otherwise allocates a string per event).
    pub fn recycle(&mut self, event: SseEvent) {
        self.spare = Some(event);
    }

    /// Reads one complete `line` (its end taken off).
    fn end_line(&mut self, line: &[u8], out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            // A blank line dispatches the event (one without data is dropped, as the spec says).
            if self.has_data {
                let mut next = self.spare.take().unwrap_or_default();
                next.event.clear();
                next.data.clear();
                out.push(SseEvent {
                    event: std::mem::replace(&mut self.event, next.event),
                    data: std::mem::replace(&mut self.data, next.data),
                });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return;
        }
        if line[0] != b':' {
            let (field, value) = match memchr::memchr(b':', line) {
                Some(at) => {
                    let v = &line[at + 1..];
                    (&line[..at], v.strip_prefix(b" ").unwrap_or(v))
                }
                None => (line, &[][..]),
            };
            match field {
                b"event" => {
                    self.event.clear();
                    self.event.push_str(&String::from_utf8_lossy(value));
                }
                b"data" => {
                    if self.has_data {
                        self.data.push('\n');
                    }
                    match std::str::from_utf8(value) {
                        Ok(v) => self.data.push_str(v),
                        Err(_) => self.data.push_str(&String::from_utf8_lossy(value)),
                    }
                    self.has_data = true;
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new(1 << 20);
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut out).unwrap();
        }
        out
    }

    /// The spec's algorithm, written plainly: split into lines (`\r\n`, `\n`, `\r`), a blank
    /// line dispatches, `field: value` (one leading space stripped), only complete events.
    fn reference(text: &str) -> Vec<SseEvent> {
        let mut lines = Vec::new();
        let mut line = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '\r' || c == '\n' {
                if c == '\r' && chars.peek() == Some(&'\n') {
                    chars.next();
                }
                lines.push(std::mem::take(&mut line));
            } else {
                line.push(c);
            }
        }
        // An unended last line is dropped: it cannot be the blank line that dispatches.
        let (mut out, mut event, mut data, mut has) =
            (Vec::new(), String::new(), String::new(), false);
        for l in lines {
            if l.is_empty() {
                if has {
                    out.push(ev(&event, &data));
                }
                (event, data, has) = (String::new(), String::new(), false);
                continue;
            }
            if l.starts_with(':') {
                continue;
            }
            let (f, v) = l
                .split_once(':')
                .map_or((&*l, ""), |(f, v)| (f, v.strip_prefix(' ').unwrap_or(v)));
            match f {
                "event" => event = v.to_string(),
                "data" => {
                    if has {
                        data.push('\n');
                    }
                    data.push_str(v);
                    has = true;
                }
                _ => {}
            }
        }
        out
    }

    fn ev(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn reads_the_formats_model_apis_send() {
        let stream = b"data: {\"a\":1}\n\n: keep-alive\n\nevent: message_start\ndata: {\"b\":2}\n\nevent: ping\ndata:x\ndata: y\r\n\r\nid: 3\nretry: 10\ndata\n\ndata: [DONE]\n\n";
        assert_eq!(
            parse(&[stream]),
            vec![
                ev("", "{\"a\":1}"),
                ev("message_start", "{\"b\":2}"),
                ev("ping", "x\ny"),
                ev("", ""),
                ev("", "[DONE]"),
            ]
        );
        // An event not ended by a blank line is not dispatched (a cut stream).
        assert_eq!(parse(&[b"data: partial"]), vec![]);
        assert_eq!(parse(&[b"event: x\n\n"]), vec![], "no data, no event");
        // \r alone ends lines too, and \r\n split across chunks ends one line.
        assert_eq!(parse(&[b"data: a\r", b"\n\r", b"\n"]), vec![ev("", "a")]);
        assert_eq!(
            parse(&[b"data: a\r\rdata: b\n\n"]),
            vec![ev("", "a"), ev("", "b")]
        );
    }

    #[test]
    fn a_line_over_the_limit_is_refused() {
        let mut p = SseParser::new(16);
        let mut out = Vec::new();
        assert_eq!(p.feed(&[b'x'; 17], &mut out), Err(TooLong));
        let mut p = SseParser::new(16);
        let many = b"data: 0123456789\n".repeat(3);
        assert_eq!(p.feed(&many, &mut out), Err(TooLong));
    }

    proptest! {
        /// However the bytes are cut into chunks, the same events come out; nothing panics.
        #[test]
        fn chunking_does_not_change_the_events(
            lines in proptest::collection::vec(
                "(data|event|id|:|data: |event: )?[ -~é]{0,12}(\r\n|\n|\r)?", 0..30),
            cuts in proptest::collection::vec(0usize..400, 0..10),
        ) {
            let text: String = lines.concat();
            let bytes = text.as_bytes();
            let whole = parse(&[bytes]);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(bytes.len())).collect();
            cuts.sort();
            let mut chunks = Vec::new();
            let mut at = 0;
            for c in cuts {
                chunks.push(&bytes[at..c]);
                at = c;
            }
            chunks.push(&bytes[at..]);
            prop_assert_eq!(parse(&chunks), whole);
        }

        /// The parser agrees with a line-at-a-time reading of the spec, on any bytes.
        #[test]
        fn matches_the_spec_reading(
            lines in proptest::collection::vec(
                "(data|event|id|:|data: |event: |dat)?[ -~é]{0,12}(\r\n|\n|\r)?", 0..30),
        ) {
            let text: String = lines.concat();
            prop_assert_eq!(parse(&[text.as_bytes()]), reference(&text));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..500)) {
            let mut p = SseParser::new(64);
            let mut out = Vec::new();
            let _ = p.feed(&bytes, &mut out);
        }
    }
}
