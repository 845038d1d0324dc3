//! `exec {command, timeoutMs?, path?}`: `sh -c` in the workspace.
//!
//! The child runs in its own process group with a filtered environment ([`super::env`]), HOME set
//! to the tool home, stdin closed, and stdout and stderr merged into one pipe (so the model sees
//! them interleaved as a terminal would). Background jobs do not outlive the command: the group is
//! killed once the shell exits.
//!
//! The text ends with `[exit code N]` (or `[killed by signal N]`); a non-zero exit is
//! `is_error: true`, which is still a known outcome.
//!
//! Timeout (default [`DEFAULT_EXEC_TIMEOUT_MS`] = 120 s, at most [`MAX_EXEC_TIMEOUT_MS`]): the
//! group is SIGKILLed and the call is a tool error with a timeout note — a known outcome.
//!
//! Fence ([`crate::sandbox`]): unless the policy says `sandbox: "off"`, the child runs under
//! Landlock (writes only to the workspace, HOME, its own `TMPDIR` and a few devices; `readOnly`:
//! only `TMPDIR`), in an empty network namespace unless `allowNetwork`, with the git directories'
//! programs bound read-only. A fence that cannot be built refuses the call before anything runs.
//!
//! Cancellation contract: `exec` polls `ctx.cancel`. Once set, the group gets SIGTERM and 2 s to
//! exit. If the command ended in that window its real outcome is returned; if it had to be
//! SIGKILLed the output says `interrupted: true` and the runtime records the outcome as UNKNOWN.

use std::ffi::OsString;
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::paths::Workspace;
use super::{ToolContext, ToolOutput, env};
use crate::error::{Error, ErrorKind, Result};
use crate::fsx;
use crate::process::{self, Capture, Waited, orphans};
use crate::sandbox;

/// Timeout when the model gives none: two minutes covers a typical build or test run.
pub const DEFAULT_EXEC_TIMEOUT_MS: u64 = 120_000;
/// The largest `timeoutMs` accepted (one hour).
pub const MAX_EXEC_TIMEOUT_MS: u64 = 3_600_000;
/// Output kept in memory (and in the blob); the model sees at most 64 KiB of it anyway.
const MAX_CAPTURE: usize = 32 * 1024 * 1024;

/// The arguments of `exec`; each field's doc comment is its description in the schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ExecArgs {
    /// Shell command line
    command: String,
    /// Timeout in milliseconds (default 120000)
    #[serde(default)]
    #[schemars(range(min = 1, max = MAX_EXEC_TIMEOUT_MS))]
    timeout_ms: Option<u64>,
    /// Working directory relative to the workspace root (default: the root)
    #[serde(default)]
    path: Option<String>,
}

pub(crate) fn run(ws: &Workspace, args: ExecArgs, ctx: &ToolContext) -> ToolOutput {
    run_with_env(ws, args, ctx, crate::own_env::vars())
}

fn run_with_env(
    ws: &Workspace,
    args: ExecArgs,
    ctx: &ToolContext,
    vars: Vec<(OsString, OsString)>,
) -> ToolOutput {
    if args.command.trim().is_empty() {
        return ToolOutput::error("command is empty");
    }
    let timeout_ms = args.timeout_ms.unwrap_or(DEFAULT_EXEC_TIMEOUT_MS);
    if !(1..=MAX_EXEC_TIMEOUT_MS).contains(&timeout_ms) {
        return ToolOutput::error(format!(
            "timeoutMs must be between 1 and {MAX_EXEC_TIMEOUT_MS}"
        ));
    }
    let dir = match args.path.as_deref() {
        None | Some("") => ws.root().to_path_buf(),
        Some(p) => match ws.resolve(p) {
            Ok(d) if d.is_dir() => d,
            Ok(d) => {
                return ToolOutput::error(format!("`{}` is not a directory", ws.display(&d)));
            }
            Err(e) => return ToolOutput::error(e.message),
        },
    };
    if ctx.cancel.load(Ordering::SeqCst) {
        return ToolOutput::error("canceled before the command started; nothing was run");
    }
    if let Err(e) = fsx::create_dir_private(&ctx.services.tool_home) {
        return ToolOutput::error(format!("cannot prepare the tool home: {e}"));
    }
    let tmp = match OpTempDir::create(ctx) {
        Ok(t) => t,
        Err(e) => return ToolOutput::error(format!("cannot prepare the temp dir: {e}")),
    };
    let (reader, writer) = match std::io::pipe() {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(format!("cannot create a pipe: {e}")),
    };
    let writer2 = match writer.try_clone() {
        Ok(w) => w,
        Err(e) => return ToolOutput::error(format!("cannot create a pipe: {e}")),
    };
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(&args.command)
        .current_dir(&dir)
        .env_clear()
        .envs(env::child_env(
            vars,
            &ctx.services.pass_env,
            &ctx.services.tool_home,
        ))
        .env(orphans::SESSION_VAR, ctx.mark.session_id)
        .env(orphans::RUN_VAR, ctx.mark.run_id)
        .env(orphans::ATTEMPT_VAR, ctx.mark.attempt)
        .env(orphans::OPERATION_VAR, ctx.mark.op_id)
        .env("TMPDIR", &tmp.0)
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer2);
    // Fenced or not, a tool command never keeps the runner's controlling terminal.
    process::new_session(&mut cmd);
    let launch = sandbox::Launch {
        policy: ctx.services.fence.policy(),
        home: &ctx.services.tool_home,
        tmp: &tmp.0,
    };
    let (mut child, fence) = match ctx.services.fence.spawn(launch, cmd) {
        Ok(s) => (s.child, s.fence),
        Err(sandbox::SpawnError::Refused(refusal)) => {
            return ToolOutput::error(refusal.message(ctx.services.fence.policy()));
        }
        Err(sandbox::SpawnError::Io(e)) => {
            return ToolOutput::error(format!("cannot start /bin/sh: {e}"));
        }
    };
    let capture = Capture::start(reader, MAX_CAPTURE);
    let waited = process::wait(
        &mut child,
        Duration::from_millis(timeout_ms),
        Some(ctx.cancel),
    );
    // However the command ended, nothing of it outlives the call: the group is dead, and what
    // left it (`setsid`, a double fork) still carries the operation's mark. A daemon started
    // from `exec` would otherwise go on acting with the workspace's write access after the
    // outcome is recorded (and after the run ends).
    orphans::stop_marked(orphans::OPERATION_VAR, &[ctx.mark.op_id]);
    let captured = capture.finish();
    let mut text = String::from_utf8_lossy(&captured.bytes).into_owned();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if captured.dropped > 0 {
        text.push_str(&format!(
            "[{} more bytes of output were discarded]\n",
            captured.dropped
        ));
    }
    if !captured.complete {
        text.push_str("[output may be incomplete: a detached process still holds it open]\n");
    }
    let mut out = match waited {
        Err(e) => ToolOutput::error(format!("{text}[waiting for the command failed: {e}]")),
        Ok(Waited::Exited(status)) => {
            text.push_str(&format!("[{}]", process::describe_status(&status)));
            ToolOutput {
                is_error: !status.success(),
                ..ToolOutput::ok(text)
            }
        }
        Ok(Waited::TimedOut) => {
            text.push_str(&format!(
                "[timed out after {timeout_ms} ms; the command and its child processes were killed]"
            ));
            ToolOutput::error(text)
        }
        Ok(Waited::CanceledExited(status)) => {
            text.push_str(&format!(
                "[canceled: the command was sent SIGTERM and ended with {}]",
                process::describe_status(&status)
            ));
            ToolOutput {
                is_error: !status.success(),
                ..ToolOutput::ok(text)
            }
        }
        Ok(Waited::CanceledKilled) => {
            text.push_str(
                "[interrupted: canceled, and the command did not stop within 2 s of SIGTERM; it \
                 was killed, so which of its effects happened is unknown]",
            );
            ToolOutput {
                interrupted: true,
                ..ToolOutput::error(text)
            }
        }
    };
    if out.text.is_empty() {
        out.text = "[no output]".into();
    }
    out.fence = fence;
    out
}

/// The operation's own `TMPDIR` (`<state>/tool-tmp/<op>`, 0700), writable inside the fence and
/// removed when the command is over.
struct OpTempDir(std::path::PathBuf);

impl OpTempDir {
    fn create(ctx: &ToolContext) -> Result<OpTempDir> {
        use std::os::unix::fs::DirBuilderExt;
        let base = ctx
            .services
            .tool_home
            .parent()
            .unwrap_or(&ctx.services.tool_home)
            .join("tool-tmp");
        fsx::create_dir_private(&base)?;
        let dir = base.join(ctx.mark.op_id);
        // A leftover of a crashed attempt at the same operation is not reused.
        let _ = std::fs::remove_dir_all(&dir);
        // Scratch space, never durable state: no fsync.
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| {
                let message = format!("{}: {e}", dir.display());
                Error::io_told(message, &dir, e, ErrorKind::Failed)
            })?;
        Ok(OpTempDir(dir))
    }
}

impl Drop for OpTempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::MAX_TEXT;
    use crate::tools::testutil::Fixture;
    use crate::tools::testutil::execute;
    use serde_json::json;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    fn exec(fx: &Fixture, args: serde_json::Value) -> ToolOutput {
        fx.run("exec", args)
    }

    #[test]
    fn runs_in_the_workspace_with_exit_code_and_merged_output() {
        let fx = Fixture::new();
        fx.put("sub/x.txt", "");
        let out = exec(&fx, json!({"command": "pwd; echo err >&2; ls"}));
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(
            out.text,
            format!("{}\nerr\nsub\n[exit code 0]", fx.root.display())
        );
        let out = exec(&fx, json!({"command": "ls; exit 3", "path": "sub"}));
        assert!(out.is_error);
        assert_eq!(out.text, "x.txt\n[exit code 3]");
        assert!(exec(&fx, json!({"command": "true", "path": "../"})).is_error);
        assert!(exec(&fx, json!({"command": "true", "path": "sub/x.txt"})).is_error);
        assert!(exec(&fx, json!({"command": "  "})).is_error);
        assert!(exec(&fx, json!({"command": "true", "timeoutMs": 0})).is_error);
        assert!(exec(&fx, json!({"command": "true", "timeoutMs": -5})).is_error);
    }

    #[test]
    fn filtered_env_and_tool_home() {
        let mut fx = Fixture::new();
        fx.pass_env = vec!["KXEN_CANARY_PASSED_TOKEN".into(), "OPENAI_API_KEY".into()];
        let ws = Workspace::new(&fx.root).unwrap();
        let vars: Vec<(OsString, OsString)> = vec![
            ("PATH".into(), std::env::var_os("PATH").unwrap_or_default()),
            ("KXEN_CANARY_SECRET".into(), "canary-7f3a9".into()),
            ("KXEN_CANARY_PASSED_TOKEN".into(), "passed-1234".into()),
            ("OPENAI_API_KEY".into(), "sk-canary-5555".into()),
            ("HOME".into(), "/home/someone".into()),
            ("PLAIN_SETTING".into(), "visible".into()),
        ];
        let args: ExecArgs =
            serde_json::from_value(json!({"command": "env; echo HOME=$HOME"})).unwrap();
        let out = run_with_env(&ws, args, &fx.ctx(&fx.services()), vars);
        assert!(!out.is_error, "{}", out.text);
        assert!(!out.text.contains("canary-7f3a9"), "{}", out.text);
        assert!(
            !out.text.contains("sk-canary-5555"),
            "provider key never passes"
        );
        assert!(out.text.contains("KXEN_CANARY_PASSED_TOKEN=passed-1234"));
        assert!(out.text.contains("PLAIN_SETTING=visible"));
        assert!(out.text.contains(&format!("HOME={}", fx.home.display())));
        assert!(fx.home.is_dir(), "tool home is created");
    }

    #[test]
    fn filtered_env_through_the_real_process_environment() {
        // SAFETY: the variable name is unique to this test; no other thread reads it.
        #[allow(unsafe_code)] // test: set_var is unsafe since Rust 2024
        unsafe {
            std::env::set_var("KXEN_TEST_EXEC_SECRET", "canary-real-env-42")
        };
        let fx = Fixture::new();
        let out = exec(&fx, json!({"command": "env"}));
        assert!(!out.text.contains("canary-real-env-42"), "{}", out.text);
    }

    fn pid_alive(pid: i32) -> bool {
        // A zombie is dead for our purpose.
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => !stat
                .rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z')),
            Err(_) => false,
        }
    }

    fn wait_dead(pid: i32) -> bool {
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if !pid_alive(pid) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let fx = Fixture::new();
        let out = exec(
            &fx,
            // 2 s leaves a loaded machine ample time to start the shell before the timeout.
            json!({"command": "sleep 60 & echo $! > bg.pid; echo started; wait", "timeoutMs": 2000}),
        );
        assert!(out.is_error);
        assert!(!out.interrupted, "a timeout is a known outcome");
        assert!(out.text.starts_with("started\n"), "{}", out.text);
        assert!(out.text.contains("timed out after 2000 ms"), "{}", out.text);
        let pid: i32 = fx.get("bg.pid").trim().parse().unwrap();
        assert!(
            wait_dead(pid),
            "background sleep {pid} survived the timeout"
        );
    }

    #[test]
    fn background_jobs_do_not_outlive_the_command() {
        let fx = Fixture::new();
        let out = exec(
            &fx,
            json!({"command": "sleep 60 & echo $! > bg.pid; echo done"}),
        );
        assert_eq!(out.text, "done\n[exit code 0]");
        let pid: i32 = fx.get("bg.pid").trim().parse().unwrap();
        assert!(wait_dead(pid));
    }

    /// Sets `cancel` once `marker` exists in the workspace (the command has started).
    fn cancel_when(fx: &Fixture, marker: &str, cancel: &'static AtomicBool) {
        let path = fx.root.join(marker);
        std::thread::spawn(move || {
            let end = Instant::now() + Duration::from_secs(30);
            while !path.exists() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(10));
            }
            cancel.store(true, Ordering::SeqCst);
        });
    }

    fn ctx_with_cancel<'a>(
        fx: &'a Fixture,
        services: &'a super::super::ToolServices,
        cancel: &'a AtomicBool,
    ) -> ToolContext<'a> {
        ToolContext {
            cancel,
            ..fx.ctx(services)
        }
    }

    #[test]
    fn cancel_with_a_cooperative_command_returns_its_real_outcome() {
        static CANCEL: AtomicBool = AtomicBool::new(false);
        let fx = Fixture::new();
        cancel_when(&fx, "started", &CANCEL);
        let out = execute(
            "exec",
            &json!({"command": "touch started; sleep 60"}),
            &ctx_with_cancel(&fx, &fx.services(), &CANCEL),
        );
        assert!(out.is_error);
        assert!(!out.interrupted, "{}", out.text);
        assert!(out.text.contains("canceled"), "{}", out.text);
        assert!(out.text.contains("signal 15"), "{}", out.text);
    }

    #[test]
    fn cancel_with_a_cleanup_handler_returns_its_real_exit() {
        static CANCEL: AtomicBool = AtomicBool::new(false);
        let fx = Fixture::new();
        cancel_when(&fx, "started", &CANCEL);
        let out = execute(
            "exec",
            &json!({"command": "trap 'echo cleaned up; exit 0' TERM; touch started; while :; do sleep 0.05; done"}),
            &ctx_with_cancel(&fx, &fx.services(), &CANCEL),
        );
        assert!(!out.interrupted && !out.is_error, "{}", out.text);
        assert!(out.text.contains("cleaned up\n"), "{}", out.text);
        assert!(
            out.text.ends_with("ended with exit code 0]"),
            "{}",
            out.text
        );
    }

    #[test]
    fn cancel_of_a_command_ignoring_sigterm_is_interrupted() {
        static CANCEL: AtomicBool = AtomicBool::new(false);
        let fx = Fixture::new();
        cancel_when(&fx, "started", &CANCEL);
        let out = execute(
            "exec",
            &json!({"command": "trap '' TERM; sleep 60 & echo $! > bg.pid; touch started; wait"}),
            &ctx_with_cancel(&fx, &fx.services(), &CANCEL),
        );
        assert!(out.is_error);
        assert!(out.interrupted, "{}", out.text);
        assert!(out.text.contains("interrupted"));
        let pid: i32 = fx.get("bg.pid").trim().parse().unwrap();
        assert!(wait_dead(pid));
    }

    #[test]
    fn cancel_before_start_runs_nothing() {
        let fx = Fixture::new();
        fx.cancel.store(true, Ordering::SeqCst);
        let out = exec(&fx, json!({"command": "touch ran"}));
        assert!(out.is_error && !out.interrupted);
        assert!(!fx.root.join("ran").exists());
    }

    #[test]
    fn big_output_goes_to_a_blob() {
        let fx = Fixture::new();
        let out = exec(
            &fx,
            json!({"command": "i=0; while [ $i -lt 5000 ]; do echo \"line $i of the output\"; i=$((i+1)); done"}),
        );
        assert!(!out.is_error);
        assert!(out.text.len() <= MAX_TEXT);
        assert!(out.text.starts_with("line 0 of the output\n"));
        assert!(out.text.ends_with("line 4999 of the output\n[exit code 0]"));
        let blob = out.blob.expect("full output stored");
        let full = String::from_utf8(fx.blobs.get(&blob.sha256).unwrap()).unwrap();
        assert_eq!(full.lines().count(), 5001);
        assert!(full.contains("line 2500 of the output\n"));
        assert!(out.text.contains(&blob.sha256));
    }
}
