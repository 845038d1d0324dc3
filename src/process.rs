//! Child processes in their own process group, with a timeout, cancellation and bounded capture.
//!
//! Shared by the `exec` tool and the command model provider. Every child is started as the leader
//! of a new process group so that a timeout or a cancel can signal the whole tree it spawned
//! (`sh -c 'make test'` forks compilers, test binaries, …), not just the shell.

pub mod orphans;

use std::io::Read;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// How long a canceled child gets between SIGTERM and SIGKILL (the cancellation contract).
pub(crate) const CANCEL_GRACE: Duration = Duration::from_secs(2);

/// How long readers may take to see end-of-file after the child and its group are gone. Only a
/// process that left the group (`setsid`) and kept the pipe open makes this expire.
const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// How a waited-for child ended.
#[derive(Debug)]
pub(crate) enum Waited {
    /// It exited on its own.
    Exited(ExitStatus),
    /// The timeout passed; the group was SIGKILLed.
    TimedOut,
    /// Cancel was requested; after SIGTERM the child ended within the grace period with this
    /// status (its outcome is known).
    CanceledExited(ExitStatus),
    /// Cancel was requested and the child had to be SIGKILLed: its outcome is unknown.
    CanceledKilled,
}

/// Sends `signal` to the process group led by `pid`. Errors (group already gone) are ignored:
/// every caller only wants the group not to exist any more.
#[allow(unsafe_code)] // killpg(2): stop a tool's whole process group
pub(crate) fn signal_group(pid: u32, signal: i32) {
    if let Ok(pgid) = i32::try_from(pid)
        && pgid > 0
    {
        // SAFETY: killpg has no memory-safety preconditions; a stale or foreign id only fails.
        unsafe {
            libc::killpg(pgid, signal);
        }
    }
}

/// Starts the child in a new session (`setsid`): it leads its own process group (pgid = pid,
/// which [`signal_group`] relies on) and has no controlling terminal, so it cannot open
/// `/dev/tty` or push keystrokes (`TIOCSTI`) into the terminal the runner was started from.
/// Replaces `Command::process_group(0)`, which would make the later `setsid` fail (a group
/// leader cannot start a session).
#[allow(unsafe_code)] // setsid(2) in pre_exec: no controlling terminal for a tool
pub(crate) fn new_session(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe and touches no memory.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes the child die (SIGKILL) when the thread that spawns it dies, on Linux.
///
/// Why: if kxen-agent itself is SIGKILLed (an OOM kill, a CI runner torn down) while a tool runs,
/// the tool must not go on producing side effects after the journal already says its outcome is
/// unknown — an operator would resolve an operation that is still changing the workspace. The
/// kernel delivers the signal when the spawning *thread* exits, so the caller must spawn and wait
/// on the same thread (both `exec` and the command provider do). The programs the shell started
/// are not covered (the shell itself dies, so the rest of its script never runs); [`orphans`]
/// stops those at the Session's next start.
#[allow(unsafe_code)] // prctl(PR_SET_PDEATHSIG) in pre_exec: a tool dies with its runner
pub(crate) fn die_with_parent(cmd: &mut std::process::Command) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before exec and only calls the
        // async-signal-safe functions prctl, getppid and _exit.
        let parent = unsafe { libc::getpid() };
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died between fork and prctl: then nobody will signal us.
                if libc::getppid() != parent {
                    libc::_exit(137);
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// Waits for `child` (a process-group leader) until it exits, `timeout` passes or `cancel` is set.
///
/// After the child is gone, the rest of its group is SIGKILLed: background jobs a command started
/// do not outlive it (they would otherwise hold the output pipe open forever).
pub(crate) fn wait(
    child: &mut Child,
    timeout: Duration,
    cancel: Option<&AtomicBool>,
) -> std::io::Result<Waited> {
    let pid = child.id();
    let deadline = Instant::now() + timeout;
    let mut nap = Duration::from_millis(2);
    let outcome = loop {
        if let Some(status) = child.try_wait()? {
            break Waited::Exited(status);
        }
        if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
            signal_group(pid, libc::SIGTERM);
            let grace_end = Instant::now() + CANCEL_GRACE;
            break loop {
                if let Some(status) = child.try_wait()? {
                    break Waited::CanceledExited(status);
                }
                if Instant::now() >= grace_end {
                    signal_group(pid, libc::SIGKILL);
                    let _ = child.kill();
                    child.wait()?;
                    break Waited::CanceledKilled;
                }
                thread::sleep(Duration::from_millis(10));
            };
        }
        let now = Instant::now();
        if now >= deadline {
            signal_group(pid, libc::SIGKILL);
            let _ = child.kill();
            child.wait()?;
            break Waited::TimedOut;
        }
        thread::sleep(nap.min(deadline - now));
        nap = (nap * 2).min(Duration::from_millis(25));
    };
    signal_group(pid, libc::SIGKILL);
    Ok(outcome)
}

/// Collects a pipe's bytes on a thread, keeping at most `limit` bytes and counting the rest.
pub(crate) struct Capture {
    shared: Arc<Mutex<Captured>>,
    done: mpsc::Receiver<()>,
}

/// What a [`Capture`] collected.
#[derive(Debug, Default, Clone)]
pub(crate) struct Captured {
    pub bytes: Vec<u8>,
    /// Bytes read beyond the limit and dropped.
    pub dropped: u64,
    /// False when the pipe never reached end-of-file (a detached process still holds it open).
    pub complete: bool,
}

impl Capture {
    pub(crate) fn start(mut source: impl Read + Send + 'static, limit: usize) -> Capture {
        let shared = Arc::new(Mutex::new(Captured::default()));
        let (tx, done) = mpsc::channel();
        let sink = Arc::clone(&shared);
        thread::spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                match source.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let mut c = sink.lock().unwrap_or_else(|p| p.into_inner());
                        let room = limit.saturating_sub(c.bytes.len());
                        let keep = room.min(n);
                        c.bytes.extend_from_slice(&buf[..keep]);
                        c.dropped += (n - keep) as u64;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            sink.lock().unwrap_or_else(|p| p.into_inner()).complete = true;
            let _ = tx.send(());
        });
        Capture { shared, done }
    }

    /// Waits (briefly) for end-of-file and returns what was collected. Call after the child and
    /// its group are gone.
    pub(crate) fn finish(self) -> Captured {
        let _ = self.done.recv_timeout(DRAIN_GRACE);
        self.shared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A human description of an exit status: `exit code 3`, `killed by signal 9`.
pub(crate) fn describe_status(status: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => "unknown exit status".to_string(),
    }
}
