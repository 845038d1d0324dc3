//! Runs one hook program: through the run's fence, with the filtered environment `exec` gets
//! (no credential, no `passEnv`), its own HOME and TMPDIR, the event as one JSON object on
//! stdin, and a timeout after which its process group is killed.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use super::config::HookEntry;
use crate::process::{self, Capture, Waited};
use crate::sandbox::{Launch, RunFence, SpawnError};

/// How much of a hook's stdout and stderr is kept (a decision or a note is short).
const MAX_CAPTURE: usize = 64 * 1024;

/// How a hook ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// It exited with `code`.
    Exited {
        code: i32,
        stdout: String,
        stderr: String,
    },
    /// It could not be started, was killed by a signal or passed its timeout: `why`.
    Failed(String),
}

/// Runs `entry` with `input` on stdin, in `fence`'s workspace.
pub fn run(entry: &HookEntry, input: &Value, fence: &RunFence) -> Ended {
    let Some((program, args)) = entry.command.split_first() else {
        return Ended::Failed("its command is empty".into());
    };
    let tmp = match tempfile::Builder::new().prefix("kxen-hook-").tempdir() {
        Ok(t) => t,
        Err(e) => return Ended::Failed(format!("its TMPDIR could not be created: {e}")),
    };
    let home = tmp.path().join("home");
    if let Err(e) = crate::fsx::create_dir_private(&home) {
        return Ended::Failed(format!("its HOME could not be created: {e}"));
    }
    let mut env = crate::tools::child_env(crate::own_env::vars(), &[], &home);
    env.retain(|(name, _)| name != "TMPDIR");
    env.push(("TMPDIR".into(), tmp.path().into()));
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(fence.workspace())
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    process::new_session(&mut cmd);
    let launch = Launch {
        policy: entry.fence(),
        home: &home,
        tmp: tmp.path(),
    };
    let mut child = match fence.spawn(launch, cmd) {
        Ok(spawned) => spawned.child,
        Err(SpawnError::Refused(refusal)) => {
            return Ended::Failed(format!("its fence cannot be built: {}", refusal.missing));
        }
        Err(SpawnError::Io(e)) => return Ended::Failed(format!("`{program}` cannot start: {e}")),
    };
    let stdout = Capture::start(child.stdout.take().expect("piped"), MAX_CAPTURE);
    let stderr = Capture::start(child.stderr.take().expect("piped"), MAX_CAPTURE);
    if let Some(mut stdin) = child.stdin.take() {
        let bytes = input.to_string().into_bytes();
        // On a thread: a hook that never reads its stdin must not block the run past its
        // timeout (the pipe closes when the hook is killed, which ends the write).
        std::thread::spawn(move || {
            let _ = stdin.write_all(&bytes);
        });
    }
    let waited = process::wait(&mut child, Duration::from_millis(entry.timeout_ms()), None);
    let text = |c: Capture| String::from_utf8_lossy(&c.finish().bytes).into_owned();
    let (out, err) = (text(stdout), text(stderr));
    match waited {
        Ok(Waited::Exited(status)) => match status.code() {
            Some(code) => Ended::Exited {
                code,
                stdout: out,
                stderr: err,
            },
            None => Ended::Failed(format!("it was {}", process::describe_status(&status))),
        },
        Ok(Waited::TimedOut) => Ended::Failed(format!(
            "it did not finish within {} ms and was killed",
            entry.timeout_ms()
        )),
        Ok(_) => Ended::Failed("it was canceled".into()),
        Err(e) => Ended::Failed(format!("waiting for it failed: {e}")),
    }
}
