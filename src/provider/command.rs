//! The command provider: an external program is the model.
//!
//! It is started per call from `argv` (no shell), in the config file's directory, with the
//! runtime's full environment (it is the model client, so it may need a key), in its own process
//! group. It reads `{"role","messages","tools"}` (plus `"task"`, the `task` call's description,
//! when it serves a child Session) (camelCase, as [`ChatMessage`] and
//! [`ToolSchema`] serialize) on stdin and prints one [`ModelResponse`] JSON object on stdout.
//! A non-zero exit, a timeout or output that is not such an object is an external failure
//! (exit 9), which the runtime counts against `maxPureRetries`.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Serialize;

use super::{ChatMessage, ModelRequest, ModelResponse, Provider, effective_timeout};
use crate::error::{Error, Result};
use crate::process::{self, Capture, Waited};
use crate::tools::ToolSchema;

/// Most stdout bytes read from the command (a response is far smaller).
const MAX_STDOUT: usize = 32 * 1024 * 1024;
/// Stderr kept for error messages.
const MAX_STDERR: usize = 16 * 1024;

#[derive(Debug, Clone)]
pub struct CommandProvider {
    name: String,
    argv: Vec<String>,
    dir: PathBuf,
    timeout: Duration,
}

#[derive(Serialize)]
struct Request<'a> {
    role: &'a str,
    messages: &'a [ChatMessage],
    tools: &'a [ToolSchema],
    #[serde(skip_serializing_if = "Option::is_none")]
    task: Option<&'a str>,
}

impl CommandProvider {
    pub fn new(name: &str, argv: Vec<String>, dir: PathBuf, timeout: Duration) -> Self {
        CommandProvider {
            name: name.to_string(),
            argv,
            dir,
            timeout,
        }
    }

    /// Names the program only: later argv entries may hold settings the user would rather not
    /// see copied into run records.
    fn what(&self) -> String {
        format!(
            "model command `{}` (provider `{}`)",
            self.argv[0], self.name
        )
    }
}

impl Provider for CommandProvider {
    // Allowed: the operator's configured model command (`kind = "command"`), not an agent's program.
    #[allow(clippy::disallowed_methods)]
    fn complete(&self, request: &ModelRequest, _responses_so_far: usize) -> Result<ModelResponse> {
        let input = serde_json::to_vec(&Request {
            role: request.role,
            messages: request.messages,
            tools: request.tools,
            task: request.task,
        })
        .map_err(|e| Error::failed(format!("cannot serialize the model request: {e}")))?;
        let timeout = effective_timeout(self.timeout, request.timeout);
        let mut command = Command::new(&self.argv[0]);
        command
            .args(&self.argv[1..])
            .current_dir(&self.dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            // The model client gets the environment kxen-agent started with, keys included;
            // the process's own copy has them wiped (`own_env`).
            .env_clear()
            .envs(crate::own_env::vars());
        if let Some(mark) = request.attempt_mark {
            command.env(process::orphans::ATTEMPT_VAR, mark);
        }
        if let Some(mark) = request.call_mark {
            command.env(process::orphans::MODEL_CALL_VAR, mark);
        }
        process::die_with_parent(&mut command);
        let mut child = command.spawn().map_err(|e| {
            Error::external(format!("cannot start {}: {e}", self.what())).with_hint(format!(
                "check `argv` in the model config (it runs in {})",
                self.dir.display()
            ))
        })?;
        let stdout = Capture::start(child.stdout.take().expect("piped"), MAX_STDOUT);
        let stderr = Capture::start(child.stderr.take().expect("piped"), MAX_STDERR);
        let mut stdin = child.stdin.take().expect("piped");
        // A command that exits without reading its input must not block us: write on a thread.
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let waited = process::wait(&mut child, timeout, None)
            .map_err(|e| Error::external(format!("waiting for {} failed: {e}", self.what())))?;
        let out = stdout.finish();
        let err = stderr.finish();
        let stderr_text = String::from_utf8_lossy(&err.bytes);
        let stderr_note = match stderr_text.trim() {
            "" => String::new(),
            s => format!("; stderr: {}", excerpt(s, 500)),
        };
        match waited {
            Waited::Exited(status) if status.success() => {}
            Waited::Exited(status) => {
                return Err(Error::external(format!(
                    "{} failed with {}{stderr_note}",
                    self.what(),
                    process::describe_status(&status)
                )));
            }
            _ => {
                return Err(Error::external(format!(
                    "{} timed out after {} ms and was killed{stderr_note}",
                    self.what(),
                    timeout.as_millis()
                )));
            }
        }
        serde_json::from_slice(&out.bytes).map_err(|e| {
            let printed = String::from_utf8_lossy(&out.bytes);
            Error::external(format!(
                "{} printed no valid response ({e}); it printed: {}",
                self.what(),
                excerpt(printed.trim(), 200)
            ))
            .with_hint(
                r#"the command must print one JSON object {"text":…,"toolCalls":[…],"usage":{…}}"#,
            )
        })
    }
}

/// At most `max` characters of `s`, with `…` when cut.
/// Redacts first ([`crate::redact`]), then cuts: a secret straddling the cut must not survive
/// without its tail.
pub(crate) fn excerpt(s: &str, max: usize) -> String {
    let s = crate::redact::redact(s);
    match s.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigSource;
    use crate::config::ModelConfig;
    use crate::error::ErrorKind;
    use serde_json::json;

    fn setup(script: &str, extra: &str) -> (tempfile::TempDir, Box<dyn Provider>) {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("bridge.sh"), script).unwrap();
        let cfg_path = tmp.path().join("config.toml");
        let text = format!(
            "[providers.bridge]\nkind = \"command\"\nargv = [\"sh\", \"bridge.sh\"]\n{extra}\n[roles]\nexecution = \"bridge\"\n"
        );
        let cfg = ModelConfig::parse(&text, &cfg_path, ConfigSource::Flag).unwrap();
        let p = cfg.provider_for("execution").unwrap();
        (tmp, p)
    }

    #[test]
    fn round_trip_through_a_shell_script() {
        // The script saves its request and answers with a tool call.
        let (tmp, p) = setup(
            r#"cat > request.json
printf '%s\n' '{"text":"thinking","toolCalls":[{"id":"c1","name":"read","arguments":{"path":"a"}}],"usage":{"inputTokens":7,"outputTokens":2}}'
"#,
            "",
        );
        let messages = vec![ChatMessage::user("fix it")];
        let tools = crate::tools::schemas(&["read".to_string()]);
        let req = ModelRequest::plain("execution", &messages, &tools);
        let r = p.complete(&req, 0).unwrap();
        assert_eq!(r.text, "thinking");
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "a"}));
        assert_eq!(r.usage.unwrap().input_tokens, 7);
        let sent: serde_json::Value =
            serde_json::from_slice(&std::fs::read(tmp.path().join("request.json")).unwrap())
                .unwrap();
        assert_eq!(sent["role"], "execution");
        assert_eq!(
            sent["messages"],
            json!([{"role": "user", "content": "fix it"}])
        );
        assert_eq!(sent["tools"][0]["name"], "read");
        assert_eq!(sent["tools"][0]["parameters"]["required"], json!(["path"]));
    }

    #[test]
    fn failures_are_external_errors() {
        let req = ModelRequest::plain("execution", &[], &[]);
        let (_t, p) = setup("echo 'rate limited' >&2; exit 3", "");
        let e = p.complete(&req, 0).unwrap_err();
        assert!(
            !e.message.contains("bridge.sh"),
            "only argv[0] is named: {}",
            e.message
        );
        let e = p.complete(&req, 0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::External);
        assert!(e.message.contains("exit code 3") && e.message.contains("rate limited"));
        let (_t, p) = setup("echo 'I am not JSON'", "");
        let e = p.complete(&req, 0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::External);
        assert!(e.message.contains("I am not JSON"), "{}", e.message);
        let (_t, p) = setup("echo '{\"answer\":1}'", "");
        assert_eq!(p.complete(&req, 0).unwrap_err().kind, ErrorKind::External);
        let (_t, p) = setup("exec sleep 30", "timeout_ms = 200");
        let e = p.complete(&req, 0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::External);
        assert!(e.message.contains("timed out after 200 ms"));
        let cp = CommandProvider::new(
            "x",
            vec!["/nonexistent/bridge".into()],
            PathBuf::from("/"),
            Duration::from_secs(5),
        );
        let e = cp.complete(&req, 0).unwrap_err();
        assert_eq!(e.kind, ErrorKind::External);
        assert!(e.message.contains("cannot start"));
    }

    #[test]
    fn a_command_that_ignores_its_input_still_works() {
        let (_t, p) = setup("echo '{\"text\":\"hi\"}'", "");
        let big = vec![ChatMessage::user("x".repeat(1 << 20))];
        let req = ModelRequest {
            timeout: Some(Duration::from_secs(60)),
            ..ModelRequest::plain("planning", &big, &[])
        };
        assert_eq!(p.complete(&req, 0).unwrap().text, "hi");
    }
}
