//! A streaming JSON tokenizer for bundles: large reads, and a string decoder that hands the
//! decoded bytes of a string to a sink in chunks, so a file's content goes from the bundle to its
//! staging file (and its hash) without ever being held as one value.
//!
//! Only the grammar a bundle needs is exposed (objects, arrays, strings, and any other value
//! captured raw for `serde_json::from_slice`); errors carry the line and column of the offending
//! byte and use serde_json's wording, so a damaged bundle reads the same as before.
//!
//! Hand-written for a measured reason: serde_json (and the streaming JSON crates) hand a string
//! over only whole, so a file's content would be held at least once in memory, and the bundle's
//! file entries would be decoded per byte through `serde_json::Deserializer`. With this reader,
//! import of a 124.7 MiB Session (`cargo bench --bench bundle`) went from 2.3–2.7× to 1.0–1.2×
//! the `cp -r` + `sha256sum` floor and from 146.6 to 52–55 MiB peak RSS, and a 200 MiB entry
//! whose content comes before its path from 211 to 11 MiB (CHANGELOG, "Faster, leaner
//! `session import`").

use std::io::Read;

use crate::error::Error;

/// Why reading stopped.
#[derive(Debug)]
pub enum ReadError {
    /// Not valid JSON (or not the expected shape) at this 1-based line and byte column.
    Syntax { line: u64, col: u64, why: String },
    /// Reading the bundle failed.
    Io(std::io::Error),
    /// The sink refused the bytes (a write failed, or a check on the entry failed).
    Sink(Error),
}

pub type ReadResult<T> = std::result::Result<T, ReadError>;

/// The bundle as a stream of JSON tokens.
pub struct Reader<R> {
    inner: R,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
    /// Absolute offset of `buf[0]`.
    base: u64,
    line: u64,
    /// Absolute offset of the first byte of the current line.
    line_start: u64,
    eof: bool,
}

/// The byte each one-letter escape stands for (`\n` → newline), 0 for every other byte.
const ESCAPED: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b'"' as usize] = b'"';
    t[b'\\' as usize] = b'\\';
    t[b'/' as usize] = b'/';
    t[b'b' as usize] = 0x08;
    t[b'f' as usize] = 0x0c;
    t[b'n' as usize] = b'\n';
    t[b'r' as usize] = b'\r';
    t[b't' as usize] = b'\t';
    t
};

/// Read size: large reads keep the syscall count low on a 100 MB bundle.
const BUF: usize = 1 << 20;
/// Decoded bytes handed to a string's sink per call.
const CHUNK: usize = 1 << 18;

impl<R: Read> Reader<R> {
    pub fn new(inner: R) -> Reader<R> {
        Reader {
            inner,
            buf: vec![0; BUF],
            pos: 0,
            end: 0,
            base: 0,
            line: 1,
            line_start: 0,
            eof: false,
        }
    }

    /// Makes at least one unread byte available; `false` at the end of the input.
    fn fill(&mut self) -> ReadResult<bool> {
        if self.pos < self.end {
            return Ok(true);
        }
        if self.eof {
            return Ok(false);
        }
        self.base += self.end as u64;
        self.pos = 0;
        self.end = 0;
        loop {
            match self.inner.read(&mut self.buf) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.end = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
    }

    fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// The 1-based (line, column) of the next unread byte.
    pub fn position(&self) -> (u64, u64) {
        (self.line, self.offset() - self.line_start + 1)
    }

    /// A syntax error at the next unread byte.
    pub fn error<T>(&self, why: impl Into<String>) -> ReadResult<T> {
        let (line, col) = self.position();
        Err(ReadError::Syntax {
            line,
            col,
            why: why.into(),
        })
    }

    fn skip_ws(&mut self) -> ReadResult<()> {
        while self.fill()? {
            match self.buf[self.pos] {
                b' ' | b'\t' | b'\r' => self.pos += 1,
                b'\n' => {
                    self.pos += 1;
                    self.line += 1;
                    self.line_start = self.offset();
                }
                _ => return Ok(()),
            }
        }
        Ok(())
    }

    /// The next non-whitespace byte, not consumed; `None` at the end of the input.
    pub fn peek(&mut self) -> ReadResult<Option<u8>> {
        self.skip_ws()?;
        Ok(if self.fill()? {
            Some(self.buf[self.pos])
        } else {
            None
        })
    }

    /// Consumes `want` (after whitespace), or fails with `why` (`eof` at the end of input).
    pub fn expect(&mut self, want: u8, why: &str, eof: &str) -> ReadResult<()> {
        match self.peek()? {
            Some(b) if b == want => {
                self.pos += 1;
                Ok(())
            }
            Some(_) => self.error(why),
            None => self.error(eof),
        }
    }

    /// Fails unless only whitespace is left.
    pub fn end(&mut self) -> ReadResult<()> {
        match self.peek()? {
            None => Ok(()),
            Some(_) => self.error("trailing characters"),
        }
    }

    /// After an object's `{` (`first`) or a member: `true` if another member follows (its key
    /// is next), `false` after consuming the closing `}`.
    pub fn next_member(&mut self, first: bool) -> ReadResult<bool> {
        match self.peek()? {
            Some(b'}') => {
                self.pos += 1;
                Ok(false)
            }
            Some(b',') if !first => {
                self.pos += 1;
                match self.peek()? {
                    Some(b'}') => self.error("trailing comma"),
                    _ => Ok(true),
                }
            }
            Some(_) if first => Ok(true),
            Some(_) => self.error("expected `,` or `}`"),
            None => self.error("EOF while parsing an object"),
        }
    }

    /// After an array's `[` (`first`) or an element: `true` if another element follows,
    /// `false` after consuming the closing `]`.
    pub fn next_element(&mut self, first: bool) -> ReadResult<bool> {
        match self.peek()? {
            Some(b']') => {
                self.pos += 1;
                Ok(false)
            }
            Some(b',') if !first => {
                self.pos += 1;
                match self.peek()? {
                    Some(b']') => self.error("trailing comma"),
                    _ => Ok(true),
                }
            }
            Some(_) if first => Ok(true),
            Some(_) => self.error("expected `,` or `]`"),
            None => self.error("EOF while parsing a list"),
        }
    }

    /// An object key and its `:`.
    pub fn key(&mut self) -> ReadResult<String> {
        if self.peek()? != Some(b'"') {
            return self.error("key must be a string");
        }
        let key = self.string_to_vec()?;
        self.expect(b':', "expected `:`", "EOF while parsing an object")?;
        // Decoded strings are checked UTF-8.
        String::from_utf8(key).or_else(|_| self.error("invalid unicode code point"))
    }

    /// A string value, decoded whole (for small fields).
    pub fn string_to_vec(&mut self) -> ReadResult<Vec<u8>> {
        let mut out = Vec::new();
        self.string(&mut |chunk| {
            out.extend_from_slice(chunk);
            Ok(())
        })?;
        Ok(out)
    }

    /// Decodes the JSON string at the next token and hands its bytes (valid UTF-8 overall) to
    /// `sink` in chunks of about [`CHUNK`] bytes (one call per chunk, however dense the
    /// escapes: a bundle's content is escaped JSON, with an escape every few bytes).
    pub fn string(
        &mut self,
        sink: &mut dyn FnMut(&[u8]) -> crate::error::Result<()>,
    ) -> ReadResult<()> {
        self.expect(b'"', "expected a string", "EOF while parsing a value")?;
        let mut utf8 = Utf8Check::default();
        // Decoded bytes; the slack lets the fast path copy whole words past `j`.
        let mut out = vec![0u8; CHUNK + 16];
        let mut j = 0;
        loop {
            if j >= CHUNK {
                self.flush(&mut utf8, &out[..j], sink)?;
                j = 0;
            }
            // Fast path, eight bytes at a time: plain words are copied whole, and a word with a
            // special byte is copied up to it; one-letter escapes are decoded in place. A quote,
            // a control character, `\u`, or anything near the buffer's end takes the slow path.
            let end = self.end;
            let buf = &self.buf[..end];
            let mut i = self.pos;
            while i + 8 <= end && j < CHUNK {
                let mut word = [0u8; 8];
                word.copy_from_slice(&buf[i..i + 8]);
                out[j..j + 8].copy_from_slice(&word);
                let hit = special_mask(u64::from_le_bytes(word));
                if hit == 0 {
                    i += 8;
                    j += 8;
                    continue;
                }
                // The lowest flagged byte is always a real special byte.
                let k = (hit.trailing_zeros() / 8) as usize;
                i += k;
                j += k;
                if buf[i] != b'\\' || i + 1 >= end {
                    break;
                }
                let c = ESCAPED[usize::from(buf[i + 1])];
                if c == 0 {
                    break;
                }
                out[j] = c;
                j += 1;
                i += 2;
            }
            self.pos = i;
            if j >= CHUNK {
                continue;
            }
            // Slow path: one byte or one escape.
            if !self.fill()? {
                return self.error("EOF while parsing a string");
            }
            match self.buf[self.pos] {
                b'"' => {
                    self.flush(&mut utf8, &out[..j], sink)?;
                    if !utf8.complete() {
                        return self.error("invalid unicode code point");
                    }
                    self.pos += 1;
                    return Ok(());
                }
                b'\\' => {
                    self.pos += 1;
                    let c = self.escape()?;
                    j += c.encode_utf8(&mut out[j..j + 4]).len();
                }
                b if b < 0x20 => {
                    return self
                        .error("control character (\\u0000-\\u001F) found while parsing a string");
                }
                b => {
                    out[j] = b;
                    j += 1;
                    self.pos += 1;
                }
            }
        }
    }

    fn flush(
        &self,
        utf8: &mut Utf8Check,
        out: &[u8],
        sink: &mut dyn FnMut(&[u8]) -> crate::error::Result<()>,
    ) -> ReadResult<()> {
        if !utf8.feed(out) {
            return self.error("invalid unicode code point");
        }
        sink(out).map_err(ReadError::Sink)
    }

    fn next_byte(&mut self, eof: &str) -> ReadResult<u8> {
        if !self.fill()? {
            return self.error(eof);
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        Ok(b)
    }

    /// The character of the escape after a `\`.
    fn escape(&mut self) -> ReadResult<char> {
        let eof = "EOF while parsing a string";
        Ok(match self.next_byte(eof)? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = self.hex4()?;
                let code = match hi {
                    0xD800..=0xDBFF => {
                        if self.next_byte(eof)? != b'\\' || self.next_byte(eof)? != b'u' {
                            return self.error("lone leading surrogate in hex escape");
                        }
                        let lo = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&lo) {
                            return self.error("lone leading surrogate in hex escape");
                        }
                        0x10000 + ((u32::from(hi) - 0xD800) << 10) + (u32::from(lo) - 0xDC00)
                    }
                    _ => u32::from(hi),
                };
                match char::from_u32(code) {
                    Some(c) => c,
                    None => return self.error("invalid unicode code point"),
                }
            }
            _ => return self.error("invalid escape"),
        })
    }

    fn hex4(&mut self) -> ReadResult<u16> {
        let mut n = 0u16;
        for _ in 0..4 {
            let b = self.next_byte("EOF while parsing a string")?;
            let d = match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => return self.error("invalid escape"),
            };
            n = n * 16 + u16::from(d);
        }
        Ok(n)
    }

    /// The raw text of the next value (any JSON value), for `serde_json::from_slice`; returns it
    /// with the position it started at. Only its extent is found here: serde_json checks it.
    pub fn raw_value(&mut self) -> ReadResult<(Vec<u8>, (u64, u64))> {
        self.skip_ws()?;
        let at = self.position();
        let mut out = Vec::new();
        let mut depth = 0usize;
        loop {
            if !self.fill()? {
                if depth == 0 && !out.is_empty() {
                    return Ok((out, at));
                }
                return self.error("EOF while parsing a value");
            }
            let b = self.buf[self.pos];
            match b {
                b'"' => {
                    self.raw_string(&mut out)?;
                    if depth == 0 {
                        return Ok((out, at));
                    }
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' | b',' if depth == 0 => {
                    if out.is_empty() {
                        return self.error("expected value");
                    }
                    return Ok((out, at));
                }
                b'}' | b']' => depth -= 1,
                b' ' | b'\t' | b'\r' | b'\n' => {
                    if depth == 0 {
                        return Ok((out, at));
                    }
                    // Copied as read, so a position serde_json reports inside the value maps
                    // back to the same line and column of the bundle.
                    out.push(b);
                    self.pos += 1;
                    if b == b'\n' {
                        self.line += 1;
                        self.line_start = self.offset();
                    }
                    continue;
                }
                _ => {}
            }
            out.push(b);
            self.pos += 1;
            if depth == 0 && (b == b'}' || b == b']') {
                return Ok((out, at));
            }
        }
    }

    /// Copies a string token raw (quotes and escapes included) into `out`.
    fn raw_string(&mut self, out: &mut Vec<u8>) -> ReadResult<()> {
        out.push(b'"');
        self.pos += 1;
        loop {
            if !self.fill()? {
                return self.error("EOF while parsing a string");
            }
            let start = self.pos;
            let n = find_special(&self.buf[start..self.end]);
            out.extend_from_slice(&self.buf[start..start + n]);
            self.pos += n;
            if self.pos == self.end {
                continue;
            }
            let b = self.buf[self.pos];
            out.push(b);
            self.pos += 1;
            match b {
                b'"' => return Ok(()),
                b'\\' => {
                    let next = self.next_byte("EOF while parsing a string")?;
                    out.push(next);
                }
                // A control character: serde_json names it when it parses the copy.
                _ => {}
            }
        }
    }

    /// Parses the next value as `T` with serde_json (small values: numbers, the manifest),
    /// with errors placed at their position in the bundle.
    pub fn value<T: serde::de::DeserializeOwned>(&mut self) -> ReadResult<T> {
        let (raw, (line, col)) = self.raw_value()?;
        serde_json::from_slice(&raw).map_err(|e| {
            let text = e.to_string();
            let why = match text.rsplit_once(" at line ") {
                Some((why, _)) => why.to_string(),
                None => text,
            };
            let (line, col) = if e.line() <= 1 {
                (line, col + e.column().saturating_sub(1) as u64)
            } else {
                (line + e.line() as u64 - 1, e.column() as u64)
            };
            ReadError::Syntax { line, col, why }
        })
    }
}

/// Index of the first byte of `s` that ends a run of plain string bytes — `"`, `\` or a control
/// character (below 0x20) — or `s.len()`. Checks eight bytes per step (the bytes JSON strings
/// must escape are rare in most content).
pub fn find_special(s: &[u8]) -> usize {
    let mut i = 0;
    while i + 8 <= s.len() {
        let mut word = [0u8; 8];
        word.copy_from_slice(&s[i..i + 8]);
        let hit = special_mask(u64::from_le_bytes(word));
        if hit != 0 {
            return i + (hit.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < s.len() {
        let b = s[i];
        if b == b'"' || b == b'\\' || b < 0x20 {
            return i;
        }
        i += 1;
    }
    s.len()
}

/// For eight bytes read little-endian: the high bit of each byte that is `"`, `\` or below
/// 0x20 is set. Bytes above a flagged one may be flagged falsely (borrows propagate upwards),
/// but the lowest flagged byte is always a real one — all the callers use.
pub(super) fn special_mask(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let quote = w ^ (ONES * u64::from(b'"'));
    let slash = w ^ (ONES * u64::from(b'\\'));
    ((quote.wrapping_sub(ONES) & !quote)
        | (slash.wrapping_sub(ONES) & !slash)
        | (w.wrapping_sub(ONES * 0x20) & !w))
        & HIGH
}

/// Incremental UTF-8 validation over chunks that may split a character.
#[derive(Default)]
struct Utf8Check {
    pending: [u8; 4],
    len: usize,
}

impl Utf8Check {
    /// `false` if the bytes so far are not a prefix of valid UTF-8.
    fn feed(&mut self, mut bytes: &[u8]) -> bool {
        while self.len > 0 {
            let Some((&b, rest)) = bytes.split_first() else {
                return true;
            };
            self.pending[self.len] = b;
            self.len += 1;
            bytes = rest;
            match std::str::from_utf8(&self.pending[..self.len]) {
                Ok(_) => self.len = 0,
                Err(e) if e.error_len().is_some() || self.len == 4 => return false,
                Err(_) => {}
            }
        }
        match std::str::from_utf8(bytes) {
            Ok(_) => true,
            Err(e) if e.error_len().is_none() => {
                let rest = &bytes[e.valid_up_to()..];
                self.pending[..rest.len()].copy_from_slice(rest);
                self.len = rest.len();
                true
            }
            Err(_) => false,
        }
    }

    fn complete(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A reader over `bytes` with a tiny buffer, so every token crosses buffer boundaries.
    fn small(bytes: &[u8]) -> Reader<&[u8]> {
        let mut r = Reader::new(bytes);
        r.buf = vec![0; 3];
        r
    }

    /// Decodes with a tiny buffer (every token crosses a boundary, slow path) and a large one
    /// (fast path); both must agree.
    fn decode(json: &[u8]) -> ReadResult<Vec<u8>> {
        let run = |size: usize| -> ReadResult<Vec<u8>> {
            let mut r = Reader::new(json);
            r.buf = vec![0; size];
            let out = r.string_to_vec()?;
            r.end()?;
            Ok(out)
        };
        let small = run(3);
        let large = run(1 << 12);
        assert_eq!(small.as_ref().ok(), large.as_ref().ok());
        large
    }

    proptest! {
        /// Any string serde_json writes decodes to the same bytes, across any chunking.
        #[test]
        fn strings_decode_like_serde(text in any::<String>()) {
            let json = serde_json::to_vec(&text).unwrap();
            prop_assert_eq!(decode(&json).unwrap(), text.as_bytes());
        }

        /// Whatever serde_json refuses as a string is refused; whatever it accepts decodes alike.
        #[test]
        fn arbitrary_bytes_agree_with_serde(body in proptest::collection::vec(
            prop_oneof![any::<u8>(), Just(b'\\'), Just(b'"'), Just(b'n'), Just(b'u'), Just(b'a')], 0..40)) {
            let mut json = b"\"".to_vec();
            json.extend_from_slice(&body);
            json.push(b'"');
            let ours = decode(&json).ok();
            let theirs = serde_json::from_slice::<String>(&json).ok().map(String::into_bytes);
            prop_assert_eq!(ours, theirs);
        }

        #[test]
        fn find_special_finds_the_first(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let want = bytes.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20).unwrap_or(bytes.len());
            prop_assert_eq!(find_special(&bytes), want);
        }
    }

    #[test]
    fn escapes_and_surrogates() {
        assert_eq!(
            decode(br#""a\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00""#).unwrap(),
            "a\"\\/\u{8}\u{c}\n\r\té😀".as_bytes()
        );
        for bad in [
            &br#""\ud83d""#[..],
            br#""\x""#,
            br#""abc"#,
            b"\"a\nb\"",
            b"\"\xff\"",
        ] {
            assert!(decode(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn errors_name_line_and_column() {
        let mut r = small(b"{\n  \"a\": 1,\n  \"b\" 2}");
        r.expect(b'{', "", "").unwrap();
        assert!(r.next_member(true).unwrap());
        assert_eq!(r.key().unwrap(), "a");
        assert_eq!(r.value::<u64>().unwrap(), 1);
        assert!(r.next_member(false).unwrap());
        match r.key() {
            Err(ReadError::Syntax { line, col, why }) => {
                assert_eq!((line, col, why.as_str()), (3, 7, "expected `:`"));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn raw_values_are_captured_whole() {
        let mut r = small(br#"[{"x": [1, "]\"", {}]}, 12 ,true]"#);
        r.expect(b'[', "", "").unwrap();
        assert!(r.next_element(true).unwrap());
        let v: serde_json::Value = r.value().unwrap();
        assert_eq!(v, serde_json::json!({"x": [1, "]\"", {}]}));
        assert!(r.next_element(false).unwrap());
        assert_eq!(r.value::<u64>().unwrap(), 12);
        assert!(r.next_element(false).unwrap());
        assert!(r.value::<bool>().unwrap());
        assert!(!r.next_element(false).unwrap());
        r.end().unwrap();
    }

    /// An error inside a multi-line value is placed where serde_json places it in the whole
    /// document.
    #[test]
    fn errors_inside_a_multi_line_value_keep_their_position() {
        for doc in [
            &b"[{\n  \"a\": 1,\n  \"b\":   x}]"[..],
            &b"[ {\"a\":\t[1,\r\n 2,\n\n   ]} ]"[..],
            &b"[{\"a\": 1,  \"b\": 2 , }]"[..],
        ] {
            let mut r = small(doc);
            r.expect(b'[', "", "").unwrap();
            assert!(r.next_element(true).unwrap());
            let serde = serde_json::from_slice::<Vec<serde_json::Value>>(doc).unwrap_err();
            match r.value::<serde_json::Value>() {
                Err(ReadError::Syntax { line, col, .. }) => assert_eq!(
                    (line, col),
                    (serde.line() as u64, serde.column() as u64),
                    "{}",
                    String::from_utf8_lossy(doc)
                ),
                other => panic!("{other:?}"),
            }
        }
    }
}
