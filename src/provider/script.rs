//! The script provider: deterministic replay of recorded model responses.
//!
//! The file holds one [`ModelResponse`] per line
//! (`{"text":…,"toolCalls":[{"id","name","arguments"}],"usage":{"inputTokens","outputTokens"}}`,
//! `toolCalls` and `usage` optional); blank lines are skipped. Call number N+1 of a Session —
//! N being the model responses already recorded in its history — gets response N+1, so a resumed
//! run continues from the right line. It is read on every call, so nothing is cached across runs.
//!
//! Child Sessions (the `task` tool) are served from the same file: a line with a `"task"` key
//! (`{"task":"check a","text":"a is fine"}`) belongs to the child Sessions whose `task` call had
//! that description, and lines without one to top-level Sessions. Each Session counts only its
//! own lines, so parallel children interleave deterministically.
//!
//! Compaction calls ([`crate::run::compaction`], role `compaction`) are answered from the lines
//! with `"compaction": true` (`{"compaction":true,"text":"the summary"}`), counted by the
//! compaction records the Session holds; the other calls never see those lines.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;

use super::{ModelRequest, ModelResponse, Provider};
use crate::error::{Error, Result};

/// The longest response line read (a tool call that writes a large file still fits).
pub const MAX_LINE_BYTES: u64 = 16 << 20;
/// The most of a script file read before giving up: a script is a list of recorded turns, so
/// anything bigger is a mistake (`/dev/zero`, a log file) that must not exhaust memory.
pub const MAX_FILE_BYTES: u64 = 256 << 20;

#[derive(Debug, Clone)]
pub struct ScriptProvider {
    path: PathBuf,
    max_line: u64,
    max_file: u64,
}

impl ScriptProvider {
    pub fn new(path: PathBuf) -> ScriptProvider {
        Self::with_limits(path, MAX_LINE_BYTES, MAX_FILE_BYTES)
    }

    /// A provider with smaller read limits, for tests.
    pub fn with_limits(path: PathBuf, max_line: u64, max_file: u64) -> ScriptProvider {
        ScriptProvider {
            path,
            max_line,
            max_file,
        }
    }

    /// Reads the script line by line up to the non-blank line number `wanted` (0-based) and
    /// returns it with its 1-based line number, or the count of response lines when the file
    /// ends first. Only that much of the file is read, and never more than the limits.
    fn response_line(
        &self,
        wanted: usize,
        task: Option<&str>,
        compaction: bool,
    ) -> Result<std::result::Result<(usize, String), usize>> {
        let file = std::fs::File::open(&self.path)
            .map_err(|e| Error::io("read the model script", &self.path, e))?;
        let mut reader = BufReader::new(file);
        let (mut line_no, mut responses, mut total) = (0usize, 0usize, 0u64);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let n = reader
                .by_ref()
                .take(self.max_line + 1)
                .read_until(b'\n', &mut buf)
                .map_err(|e| Error::io("read the model script", &self.path, e))?;
            if n == 0 {
                return Ok(Err(responses));
            }
            line_no += 1;
            total += n as u64;
            let content = buf.strip_suffix(b"\n").unwrap_or(&buf);
            if content.len() as u64 > self.max_line {
                return Err(self.too_big(format!(
                    "{}:{line_no}: a response line is longer than {} bytes",
                    self.path.display(),
                    self.max_line
                )));
            }
            if total > self.max_file {
                return Err(self.too_big(format!(
                    "{} is larger than {} bytes (read up to line {line_no})",
                    self.path.display(),
                    self.max_file
                )));
            }
            let Ok(line) = std::str::from_utf8(content) else {
                return Err(Error::invalid(format!(
                    "{}:{line_no}: not UTF-8 text",
                    self.path.display()
                )));
            };
            if line.trim().is_empty() {
                continue;
            }
            let (line_task, line_compaction) = selectors(line);
            if line_task.as_deref() != task || line_compaction != compaction {
                continue;
            }
            if responses == wanted {
                return Ok(Ok((line_no, line.to_string())));
            }
            responses += 1;
        }
    }

    fn too_big(&self, message: String) -> Error {
        Error::invalid(message).with_hint(format!(
            "a script holds one JSON response per line (at most {} bytes a line, {} bytes in all); \
             check that the config's `path` names the right file",
            self.max_line, self.max_file
        ))
    }
}

/// The `task` and `compaction` selectors of a script line (see the module doc); none for a
/// line without them, and for a line that is not a JSON object (it is reported when it is
/// answered).
fn selectors(line: &str) -> (Option<String>, bool) {
    #[derive(serde::Deserialize)]
    struct Selector {
        #[serde(default)]
        task: Option<String>,
        #[serde(default)]
        compaction: Option<bool>,
    }
    if !line.contains("\"task\"") && !line.contains("\"compaction\"") {
        return (None, false); // the common case, without a parse
    }
    match serde_json::from_str::<Selector>(line) {
        Ok(s) => (s.task, s.compaction.unwrap_or(false)),
        Err(_) => (None, false),
    }
}

impl Provider for ScriptProvider {
    fn complete(&self, request: &ModelRequest, responses_so_far: usize) -> Result<ModelResponse> {
        let compaction = request.role == super::COMPACTION_ROLE;
        let (line_no, line) =
            match self.response_line(responses_so_far, request.task, compaction)? {
                Ok(found) => found,
                Err(count) => {
                    let mut whose = request
                        .task
                        .map_or(String::new(), |t| format!(" for task `{t}`"));
                    if compaction {
                        whose.push_str(" for compaction calls (\"compaction\": true)");
                    }
                    return Err(Error::external(format!(
                    "script exhausted: {} has {count} response line(s){whose} and response {} was \
                     requested",
                    self.path.display(),
                    responses_so_far + 1
                ))
                .with_hint(
                    "add more response lines to the script, or map the role to another provider",
                ));
                }
            };
        let bad = |e: serde_json::Error| {
            Error::invalid(format!(
                "{}:{line_no}: not a model response: {e}",
                self.path.display()
            ))
            .with_hint(
                r#"each line is {"text":"…","toolCalls":[{"id":"…","name":"…","arguments":{…}}],"usage":{"inputTokens":0,"outputTokens":0}} (plus "task":"…" for a child Session's line)"#,
            )
        };
        let mut value: serde_json::Value = serde_json::from_str(&line).map_err(bad)?;
        if let Some(fields) = value.as_object_mut() {
            fields.remove("task");
            fields.remove("compaction");
        }
        serde_json::from_value(value).map_err(bad)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::provider::{ToolCall, Usage};
    use serde_json::json;

    fn request() -> ModelRequest<'static> {
        ModelRequest::plain("execution", &[], &[])
    }

    #[test]
    fn answers_call_n_plus_one_and_then_is_exhausted() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("turns.jsonl");
        std::fs::write(
            &path,
            concat!(
                r#"{"text":"","toolCalls":[{"id":"call_1","name":"write","arguments":{"path":"a.txt","content":"x"}}],"usage":{"inputTokens":12,"outputTokens":5}}"#,
                "\n\n",
                r#"{"text":"done"}"#,
                "\n"
            ),
        )
        .unwrap();
        let p = ScriptProvider::new(path.clone());
        let first = p.complete(&request(), 0).unwrap();
        assert_eq!(
            first.tool_calls,
            vec![ToolCall {
                id: "call_1".into(),
                name: "write".into(),
                arguments: json!({"path": "a.txt", "content": "x"})
            }]
        );
        assert_eq!(
            first.usage,
            Some(Usage {
                input_tokens: 12,
                output_tokens: 5,
                ..Usage::default()
            })
        );
        // A resumed run with one recorded response gets line 2 (blank lines skipped).
        let second = p.complete(&request(), 1).unwrap();
        assert_eq!(second.text, "done");
        assert!(second.tool_calls.is_empty() && second.usage.is_none());
        let e = p.complete(&request(), 2).unwrap_err();
        assert_eq!(e.kind, ErrorKind::External);
        assert!(e.message.starts_with("script exhausted"));
        assert!(e.message.contains("turns.jsonl") && e.message.contains("2 response line(s)"));
    }

    #[test]
    fn bad_lines_name_file_and_line_and_missing_file_is_not_found() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t.jsonl");
        std::fs::write(&path, "{\"text\":\"ok\"}\nnot json\n{\"txt\":1}\n").unwrap();
        let p = ScriptProvider::new(path);
        let e = p.complete(&request(), 1).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidInput);
        assert!(e.message.contains("t.jsonl:2:"), "{}", e.message);
        let e = p.complete(&request(), 2).unwrap_err();
        assert!(e.message.contains("t.jsonl:3:") && e.message.contains("txt"));
        let e = ScriptProvider::new(tmp.path().join("none"))
            .complete(&request(), 0)
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound);
    }

    #[test]
    fn reads_only_up_to_the_wanted_line_within_the_limits() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t.jsonl");
        // Line 2 is longer than the line limit, but line 1 is answered without reading it.
        let long = format!("{{\"text\":\"{}\"}}", "x".repeat(100));
        std::fs::write(&path, format!("{{\"text\":\"ok\"}}\n{long}\n")).unwrap();
        let p = ScriptProvider::with_limits(path.clone(), 64, 1 << 20);
        assert_eq!(p.complete(&request(), 0).unwrap().text, "ok");
        let e = p.complete(&request(), 1).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidInput);
        assert!(
            e.message.contains("t.jsonl:2:") && e.message.contains("longer than 64 bytes"),
            "{}",
            e.message
        );
        // Many blank lines: the file limit stops the read, naming the file.
        std::fs::write(&path, "\n".repeat(5000)).unwrap();
        let p = ScriptProvider::with_limits(path, 64, 1000);
        let e = p.complete(&request(), 0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidInput);
        assert!(
            e.message.contains("larger than 1000 bytes"),
            "{}",
            e.message
        );
    }

    #[test]
    fn an_endless_file_is_refused_at_the_line_limit() {
        // `/dev/zero` never ends and has no newline: the default line limit stops it.
        let p = ScriptProvider::new(PathBuf::from("/dev/zero"));
        let e = p.complete(&request(), 0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidInput);
        assert!(e.message.contains("/dev/zero:1:"), "{}", e.message);
        assert!(e.hints[0].contains("one JSON response per line"));
    }

    #[test]
    fn a_line_that_is_not_utf8_names_its_line() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("t.jsonl");
        std::fs::write(&path, b"{\"text\":\"ok\"}\n{\"text\":\"\xff\"}\n").unwrap();
        let p = ScriptProvider::new(path);
        let e = p.complete(&request(), 1).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidInput);
        assert!(e.message.contains("t.jsonl:2: not UTF-8"), "{}", e.message);
    }

    proptest::proptest! {
        /// A script line that is not a response is an error naming file:line, never a panic.
        #[test]
        fn arbitrary_lines_never_panic(line in "[ -~]{0,80}") {
            let tmp = tempfile::tempdir().unwrap();
            let path = tmp.path().join("t.jsonl");
            std::fs::write(&path, format!("{line}\n")).unwrap();
            let p = ScriptProvider::new(path);
            match p.complete(&request(), 0) {
                Ok(_) => {}
                Err(e) => proptest::prop_assert!(
                    e.message.contains("t.jsonl:1:") || e.message.starts_with("script exhausted")
                ),
            }
        }
    }
}
