//! Rendering to stdout/stderr, shared by both binaries.
//!
//! A closed stdout (`kxen-agent … | head`) is a normal end, not a crash: writes that fail with
//! `BrokenPipe` end the process with exit 0, as ripgrep does.

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
pub fn line(text: &str) {
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    if let Err(e) = writeln!(lock, "{text}").and_then(|_| lock.flush())
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// Writes raw text to stdout (no newline added).
pub fn raw(text: &str) {
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    if let Err(e) = lock.write_all(text.as_bytes()).and_then(|_| lock.flush())
        && e.kind() == std::io::ErrorKind::BrokenPipe
    {
        std::process::exit(0);
    }
}

/// Writes one JSON value as one compact line on stdout.
pub fn json_line(value: &serde_json::Value) {
    line(&serde_json::to_string(value).unwrap_or_else(|_| "{}".into()));
}

/// Writes a line to stderr (warnings, progress, "waiting for lock").
pub fn note(text: &str) {
    let _ = writeln!(std::io::stderr(), "{text}");
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
