//! The run lease: one active run per Session across processes (kxen-agent.md §11).
//!
//! The lease is an OS lock on `lease.lock` (the kernel drops it when the holder dies, so a killed
//! process never leaves a stale lease) plus `lease.json` naming the holder, written after the lock
//! is taken so a second process can say who holds it.

use std::path::{Path, PathBuf};

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
    pub fn acquire(dir: &Path, session_id: &str) -> Result<Lease> {
        let lock_path = dir.join("lease.lock");
        let record_path = dir.join("lease.json");
        match FileLock::try_exclusive(&lock_path)? {
            Some(lock) => {
                let record = LeaseRecord {
                    pid: std::process::id(),
                    host: hostname(),
                    since: crate::clock::now_rfc3339(),
                };
                fsx::write_atomic_json(&record_path, &record, fsx::STATE_FILE_MODE)?;
                Ok(Lease { _lock: lock })
            }
            None => Err(held(session_id, &record_path)),
        }
    }

    /// Fails (exit 5, naming the holder) while another process holds the lease of the Session
    /// in `dir`; takes nothing and writes nothing.
    pub fn check_free(dir: &Path, session_id: &str) -> Result<()> {
        match FileLock::try_exclusive(&dir.join("lease.lock"))? {
            Some(lock) => {
                drop(lock);
                Ok(())
            }
            None => Err(held(session_id, &dir.join("lease.json"))),
        }
    }
}

fn held(session_id: &str, record_path: &PathBuf) -> Error {
    let holder = std::fs::read(record_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<LeaseRecord>(&b).ok());
    let who = match holder {
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
}
