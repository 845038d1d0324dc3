//! Rendering to stdout/stderr, shared by both binaries.
//!
//! A closed stdout (`kxen-agent … | head`) is not a crash and not a reason to stop: once a write
//! fails with `BrokenPipe`, further output is dropped and the command carries on. A run must
//! reach a durable terminal state whoever stops reading its events (exiting here would leave it
//! `running` for `--resume` to untangle); the exit code still tells the outcome.

use std::io::Write;

use clap::ValueEnum;
use serde_json::json;

use crate::error::Error;

/// Output format of kxen-agent commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Format {
    /// One JSON object per line on stdout, each with a "type" (`json` is accepted too).
    #[default]
    #[value(alias = "json")]
    Jsonl,
    /// A human view.
    Text,
}

/// Writes one line to stdout.
/// `text` made safe for a terminal: line breaks and tabs stay, a CR before a line break goes, any
/// other control character (an escape sequence a model or a tool wrote, which could retitle the
/// window or clear the screen) is shown as `?`. For the human (`text`) views only; JSON lines
/// escape control characters anyway.
pub fn terminal_safe(text: &str) -> String {
    text.replace("\r\n", "\n")
        .chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            c if c.is_control() => '?',
            c => c,
        })
        .collect()
}

/// Every line (and raw text) goes through [`crate::redact`]: no credential reaches stdout.
pub fn line(text: &str) {
    write_stdout(format!("{}\n", crate::redact::redact(text)).as_bytes());
}

/// Writes raw text to stdout (no newline added), redacted.
pub fn raw(text: &str) {
    write_stdout(crate::redact::redact(text).as_bytes());
}

/// Set once stdout is gone; later output is dropped.
static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn write_stdout(bytes: &[u8]) {
    use std::sync::atomic::Ordering;
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    if let Err(e) = lock.write_all(bytes).and_then(|_| lock.flush())
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
    }
}

/// Writes one JSON value as one compact line on stdout.
pub fn json_line(value: &serde_json::Value) {
    line(&serde_json::to_string(value).unwrap_or_else(|_| "{}".into()));
}

/// Writes `value` as one compact JSON line on stdout, serialized straight into stdout's buffer:
/// a large view (every operation of a long run) is never also held as one string. For values
/// whose serialization cannot fail (no map with non-string keys, no failing `Serialize`).
pub fn serialize_line<T: serde::Serialize + ?Sized>(value: &T) {
    use std::sync::atomic::Ordering;
    if STDOUT_CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let written = serde_json::to_writer(&mut out, value)
        .map_err(std::io::Error::from)
        .and_then(|_| out.write_all(b"\n"))
        .and_then(|_| out.flush());
    if let Err(e) = written
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        STDOUT_CLOSED.store(true, Ordering::Relaxed);
    }
}

/// Writes a line to stderr (warnings, progress, "waiting for lock").
pub fn note(text: &str) {
    let _ = writeln!(std::io::stderr(), "{}", crate::redact::redact(text));
}

/// Reports an error: `error: …` and `hint: …` lines on stderr, plus one
/// `{"type":"error","kind","message"}` line on stdout in jsonl mode so log consumers see it.
/// Returns the exit code to use.
pub fn report_error(err: &Error, format: Format) -> i32 {
    note(&format!("error: {}", err.message));
    for hint in &err.hints {
        note(&format!("hint: {hint}"));
    }
    if format == Format::Jsonl {
        let mut value = json!({"type": "error", "kind": err.kind.name(), "message": err.message});
        if !err.hints.is_empty() {
            value["hints"] = json!(err.hints);
        }
        json_line(&value);
    }
    err.exit_code()
}

#[cfg(test)]
mod terminal_tests {
    use super::terminal_safe;

    #[test]
    fn escape_sequences_never_reach_the_terminal() {
        assert_eq!(
            terminal_safe("hello \u{1b}]0;PWNED\u{7} \u{1b}[2J model\rX"),
            "hello ?]0;PWNED? ?[2J model?X"
        );
        assert_eq!(terminal_safe("a\r\nb\tc\n"), "a\nb\tc\n");
    }
}
