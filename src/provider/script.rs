//! The script provider: deterministic replay of recorded model responses.
//!
//! The file holds one [`ModelResponse`] per line
//! (`{"text":…,"toolCalls":[{"id","name","arguments"}],"usage":{"inputTokens","outputTokens"}}`,
//! `toolCalls` and `usage` optional); blank lines are skipped. Call number N+1 of a Session —
//! N being the model responses already recorded in its history — gets response N+1, so a resumed
//! run continues from the right line. It is read on every call, so nothing is cached across runs.

use std::path::PathBuf;

use super::{ModelRequest, ModelResponse, Provider};
use crate::error::{Error, Result};

#[derive(Debug, Clone)]
pub struct ScriptProvider {
    path: PathBuf,
}

impl ScriptProvider {
    pub fn new(path: PathBuf) -> ScriptProvider {
        ScriptProvider { path }
    }
}

impl Provider for ScriptProvider {
    fn complete(&self, _request: &ModelRequest, responses_so_far: usize) -> Result<ModelResponse> {
        let text = std::fs::read_to_string(&self.path)
            .map_err(|e| Error::io("read the model script", &self.path, e))?;
        let lines: Vec<(usize, &str)> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| (i + 1, l))
            .collect();
        let Some((line_no, line)) = lines.get(responses_so_far) else {
            return Err(Error::external(format!(
                "script exhausted: {} has {} response line(s) and response {} was requested",
                self.path.display(),
                lines.len(),
                responses_so_far + 1
            ))
            .with_hint(
                "add more response lines to the script, or map the role to another provider",
            ));
        };
        serde_json::from_str(line).map_err(|e| {
            Error::invalid(format!(
                "{}:{line_no}: not a model response: {e}",
                self.path.display()
            ))
            .with_hint(
                r#"each line is {"text":"…","toolCalls":[{"id":"…","name":"…","arguments":{…}}],"usage":{"inputTokens":0,"outputTokens":0}}"#,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::provider::{ToolCall, Usage};
    use serde_json::json;

    fn request() -> ModelRequest<'static> {
        ModelRequest {
            role: "execution",
            messages: &[],
            tools: &[],
            timeout: None,
            attempt_mark: None,
            call_mark: None,
        }
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
                output_tokens: 5
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
