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
    /// It exited with `code`. `cut`: its stdout was longer than the kept part.
    Exited {
        code: i32,
        stdout: String,
        stderr: String,
        cut: bool,
    },
    /// It could not be started, was killed by a signal or passed its timeout: `why`.
    Failed(String),
}

/// Runs `entry` with `input` on stdin, in `fence`'s workspace.
pub fn run(entry: &HookEntry, input: &Value, fence: &RunFence) -> Ended {
    let Some((program, args)) = entry.command.split_first() else {
        return Ended::Failed("its command is empty".into());
    };
    if let Some(why) = writable_by_the_agent(&entry.command, fence) {
        return Ended::Failed(why);
    }
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
    let (out, err) = (stdout.finish(), stderr.finish());
    let cut = out.dropped > 0;
    let text = |bytes: Vec<u8>| String::from_utf8_lossy(&bytes).into_owned();
    let (out, err) = (text(out.bytes), text(err.bytes));
    match waited {
        Ok(Waited::Exited(status)) => match status.code() {
            Some(code) => Ended::Exited {
                code,
                stdout: out,
                stderr: err,
                cut,
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

/// Why the hook must not run: its program, or a file its arguments name, lies where a fenced
/// tool could have written it (the workspace, the state dir). A hook is the operator's guard;
/// the agent must not be able to rewrite it.
fn writable_by_the_agent(argv: &[String], fence: &RunFence) -> Option<String> {
    let workspace = fence.workspace();
    let workspace = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    for arg in argv {
        let path = std::path::Path::new(arg);
        let path = match path.is_absolute() {
            true => path.to_path_buf(),
            false => workspace.join(path),
        };
        let Ok(real) = path.canonicalize() else {
            continue;
        };
        if !real.is_file() {
            continue;
        }
        let inside = std::iter::once(workspace.as_path())
            .chain(fence.protected().iter().map(|p| p.as_path()))
            .find(|root| real.starts_with(root));
        if let Some(root) = inside {
            return Some(format!(
                "it runs {} which lies under {}, where the agent's tools can write; a hook must \
                 live outside the workspace and the state dir",
                real.display(),
                root.display()
            ));
        }
    }
    None
}
