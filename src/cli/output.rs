//! Rendering to stdout/stderr, shared by both binaries.
//!
//! A closed stdout (`kxen-agent … | head`) is not a crash and not a reason to stop: once a write
//! fails with `BrokenPipe`, further output is dropped and the command carries on. A run must
//! reach a durable terminal state whoever stops reading its events (exiting here would leave it
//! `running` for `--resume` to untangle); the exit code still tells the outcome.

use std::io::Write;

use clap::ValueEnum;
use serde_json::json;

use crate::error::{Error, ExitStatus};

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

/// The one renderer of errors, warnings and hints, shared by both binaries: `error: …` /
/// `warning: …` / `hint: …` lines on stderr, and with JSON-lines output one
/// `{"type":"error","kind","message"[,"hints"]}` line on stdout so log consumers see why a
/// command stopped.
///
/// `dwp` labels its errors and warnings `ERROR:` and `WARNING:` (docs/dwp-spec.md ("Diagnostics") fixes those words
/// and its goldens pin them), and writes no JSON error line; [`Diagnostics::DWP`] says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Diagnostics {
    error_label: &'static str,
    warning_label: &'static str,
    /// Write the `{"type":"error"}` line on stdout too.
    json: bool,
    /// Warnings can carry text from files or a model: show them [`terminal_safe`].
    safe_warnings: bool,
}

impl Diagnostics {
    /// `dwp`: `ERROR:` / `WARNING:` / `hint:` on stderr only.
    pub const DWP: Diagnostics = Diagnostics {
        error_label: "ERROR:",
        warning_label: "WARNING:",
        json: false,
        safe_warnings: false,
    };

    /// `kxen-agent` in output format `format`.
    pub fn kxen(format: Format) -> Diagnostics {
        Diagnostics {
            error_label: "error:",
            warning_label: "warning:",
            json: format == Format::Jsonl,
            safe_warnings: true,
        }
    }

    /// Reports `err` (stderr lines, and the JSON line in JSON output); returns the exit status.
    pub fn error(&self, err: &Error) -> ExitStatus {
        self.write_lines(err);
        self.error_json(err)
    }

    /// Only the JSON line of [`Diagnostics::error`] (when the output is JSON lines): for an error
    /// whose stderr lines someone else wrote (clap's usage errors).
    pub fn error_json(&self, err: &Error) -> ExitStatus {
        if self.json {
            let mut value =
                json!({"type": "error", "kind": err.kind.name(), "message": err.message});
            if !err.hints.is_empty() {
                value["hints"] = json!(err.hints);
            }
            json_line(&value);
        }
        err.exit_status()
    }

    /// Reports `err` on stderr only: the JSON stream already told the outcome (a run's own
    /// `runFinished` event).
    pub fn error_lines(&self, err: &Error) -> ExitStatus {
        self.write_lines(err);
        err.exit_status()
    }

    fn write_lines(&self, err: &Error) {
        note(&format!("{} {}", self.error_label, err.message));
        for hint in &err.hints {
            self.hint(hint);
        }
    }

    /// One `warning: …` line.
    pub fn warning(&self, text: &str) {
        let line = format!("{} {text}", self.warning_label);
        if self.safe_warnings {
            note(&terminal_safe(&line));
        } else {
            note(&line);
        }
    }

    /// Each warning once, in order.
    pub fn warnings(&self, warnings: &[String]) {
        let mut seen = std::collections::HashSet::new();
        for w in warnings {
            if seen.insert(w.as_str()) {
                self.warning(w);
            }
        }
    }

    /// One `hint: …` line (a next step that goes with an outcome printed on stdout).
    pub fn hint(&self, text: &str) {
        note(&format!("hint: {text}"));
    }
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
