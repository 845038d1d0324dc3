//! The run lease: one active run per Session across processes (kxen-agent.md §11).
//!
//! The lease is an OS lock on `lease.lock` (the kernel drops it when the holder dies, so a killed
//! process never leaves a stale lease) plus `lease.json` naming the holder, written after the lock
//! is taken so a second process can say who holds it.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fsx::{self, FileLock};

/// `lease.json`: who holds (or last held) the lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaseRecord {
    pub pid: u32,
    pub host: String,
    pub since: String,
}

/// A held run lease; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct Lease {
    _lock: FileLock,
}

impl Lease {
    /// Takes the lease of the Session in `dir` without waiting. If another process holds it, the
    /// error (exit 5) names its pid, host and start time.
    ///
    /// Taking a placed Session's lease (not a staging directory's) also removes the staging
    /// directories its `task` children left when a process was killed creating them
    /// ([`super::leftovers`] says why no live process can be creating one then).
    pub fn acquire(dir: &Path, session_id: &str) -> Result<Lease> {
        let lease = Lease::acquire_writing(dir, session_id, |path, record| {
            fsx::write_atomic_json(path, record, fsx::STATE_FILE_MODE)
        })?;
        if dir.file_name().is_some_and(|n| n == session_id)
            && let Some(sessions) = dir.parent()
        {
            super::leftovers::remove_child_stagings(sessions, session_id);
        }
        Ok(lease)
    }

    /// [`Lease::acquire`] of a directory being staged (an import's): `lease.json` is replaced
    /// without an fsync, as every file there is until the one sync of the staged tree before it
    /// is moved into place. Other processes see it at once either way; the lock is the same.
    pub fn acquire_staged(dir: &Path, session_id: &str) -> Result<Lease> {
        Lease::acquire_writing(dir, session_id, |path, record| {
            fsx::replace_staged_json(path, record, fsx::STATE_FILE_MODE)
        })
    }

    fn acquire_writing(
        dir: &Path,
        session_id: &str,
        write: impl FnOnce(&Path, &LeaseRecord) -> Result<()>,
    ) -> Result<Lease> {
        let lock_path = dir.join("lease.lock");
        let record_path = dir.join("lease.json");
        match try_lock(&lock_path, &record_path)? {
            Some(lock) => {
                let record = LeaseRecord {
                    pid: std::process::id(),
                    host: hostname(),
                    since: crate::clock::now_rfc3339(),
                };
                write(&record_path, &record)?;
                Ok(Lease { _lock: lock })
            }
            None => Err(held(session_id, &record_path)),
        }
    }

    /// Fails (exit 5, naming the holder) while another process holds the lease of the Session
    /// in `dir`; takes nothing and writes nothing.
    pub fn check_free(dir: &Path, session_id: &str) -> Result<()> {
        match try_lock(&dir.join("lease.lock"), &dir.join("lease.json"))? {
            Some(lock) => {
                drop(lock);
                Ok(())
            }
            None => Err(held(session_id, &dir.join("lease.json"))),
        }
    }
}

/// How long a lease whose recorded holder is dead may stay locked before we call it held.
///
/// Why there is such a lease: a runner forks to start a tool or server, and the child holds a
/// copy of every descriptor, the lease lock's included, until it execs (close-on-exec) or dies.
/// A runner SIGKILLed in that window leaves the lock to a child that dies (`PR_SET_PDEATHSIG`,
/// or its own check of its parent) a moment later — on a loaded machine, after the next
/// command already looked. That child is never ours to wait on, so we poll the lock.
const DEAD_HOLDER_GRACE: Duration = Duration::from_secs(5);

/// Takes the lock if free; if held by a process that `lease.json` says is gone, polls for up to
/// [`DEAD_HOLDER_GRACE`] (see there). `Ok(None)`: held.
fn try_lock(lock_path: &Path, record_path: &Path) -> Result<Option<FileLock>> {
    if let Some(lock) = FileLock::try_exclusive(lock_path)? {
        return Ok(Some(lock));
    }
    let holder_gone = read_record(record_path).is_some_and(|r| !holder_alive(&r));
    if !holder_gone {
        return Ok(None);
    }
    let until = Instant::now() + DEAD_HOLDER_GRACE;
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
        if let Some(lock) = FileLock::try_exclusive(lock_path)? {
            return Ok(Some(lock));
        }
    }
    Ok(None)
}

fn read_record(record_path: &Path) -> Option<LeaseRecord> {
    std::fs::read(record_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<LeaseRecord>(&b).ok())
}

/// Whether the recorded holder may still be running: on another host we cannot tell (yes);
/// here, whether its pid exists and is not a zombie.
fn holder_alive(record: &LeaseRecord) -> bool {
    if record.host != hostname() {
        return true;
    }
    if record.pid == std::process::id() {
        return true;
    }
    match std::fs::read_to_string(format!("/proc/{}/stat", record.pid)) {
        // The state is the field after the parenthesised command name: `Z` is a zombie
        // (exited; its descriptors are closed).
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_none_or(|state| state != "Z" && state != "X"),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

fn held(session_id: &str, record_path: &Path) -> Error {
    let holder = read_record(record_path);
    let who = match holder {
        Some(r) if !holder_alive(&r) => format!(
            "pid {} on {} since {} (no longer running: a process it started still holds the lock)",
            r.pid, r.host, r.since
        ),
        Some(r) => format!("pid {} on {} since {}", r.pid, r.host, r.since),
        None => "another process".to_string(),
    };
    Error::conflict(format!(
        "session {session_id} is in use: its run lease is held by {who}"
    ))
    .with_hint("wait for that run to finish (or stop it), then retry")
}

/// This machine's host name (best effort).
#[allow(unsafe_code)] // gethostname(2) for the lease record
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "unknown".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_names_the_holder() {
        let dir = tempfile::tempdir().unwrap();
        let lease = Lease::acquire(dir.path(), "ses_x").unwrap();
        let err = Lease::acquire(dir.path(), "ses_x").unwrap_err();
        assert_eq!(err.kind, crate::error::ErrorKind::Conflict);
        assert!(
            err.message.contains(&format!("pid {}", std::process::id())),
            "{}",
            err.message
        );
        drop(lease);
        Lease::acquire(dir.path(), "ses_x").unwrap();
    }

    /// A runner killed between a fork and its child's exec leaves the lock to that child for a
    /// moment: the next command waits it out instead of calling the Session in use.
    #[test]
    fn a_lock_left_to_a_dead_holders_child_is_waited_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = gone.id();
        gone.wait().unwrap();
        let record = LeaseRecord {
            pid: dead_pid,
            host: hostname(),
            since: "2026-01-01T00:00:00Z".into(),
        };
        fsx::write_atomic_json(
            &dir.path().join("lease.json"),
            &record,
            fsx::STATE_FILE_MODE,
        )
        .unwrap();
        // Another open file description of lease.lock stands for the child's inherited copy.
        let inherited = FileLock::try_exclusive(&dir.path().join("lease.lock"))
            .unwrap()
            .unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(inherited);
        });
        let started = Instant::now();
        Lease::acquire(dir.path(), "ses_x").unwrap();
        assert!(started.elapsed() >= Duration::from_millis(250));
        release.join().unwrap();
    }

    #[test]
    fn a_live_holder_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let _lease = Lease::acquire(dir.path(), "ses_x").unwrap();
        let started = Instant::now();
        let err = Lease::check_free(dir.path(), "ses_x").unwrap_err();
        assert_eq!(err.kind, crate::error::ErrorKind::Conflict);
        assert!(started.elapsed() < Duration::from_secs(1));
    }
}
