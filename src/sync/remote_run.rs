//! `--resume SES --remote NAME`: a run under the Session's remote lease.
//!
//! Order (each step durable before the next): claim the remote lease (exit 5 naming the holder
//! when another runner has it) → pull the newest snapshot (a local copy ahead of it is kept: a
//! run of this machine that ended before its push) → renew in the background while the run
//! runs → push the result → release the lease. A runner killed anywhere leaves the lease to
//! expire; `--take-expired-lease` then takes it over and the usual crash recovery of the pulled
//! copy applies (a call started but not finished is UNKNOWN, never re-run).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::lease::{self, RemoteLease};
use super::{PullMode, Pulled, PushedSnapshot};
use crate::error::Result;
use crate::fsx::failpoint;
use crate::git::{self, ObjectStore};
use crate::state::StateDir;

/// What `--resume SES --remote NAME` asks for.
#[derive(Debug, Clone)]
pub struct RemoteRunRequest {
    pub session_id: String,
    pub remote: String,
    /// The clone the run works in (its repository holds the snapshot refs).
    pub workspace: PathBuf,
    pub ttl: Duration,
    pub take_expired: bool,
}

/// A claimed, pulled Session whose run may start.
pub struct RemoteRun {
    lease: RemoteLease,
    pub remote: git::Remote,
    pub pulled: Pulled,
    session_id: String,
}

impl RemoteRun {
    /// Claims the lease and pulls the newest snapshot; on a failed pull the lease is released
    /// again. Renewal starts here and stops at [`RemoteRun::finish`]; a lost lease sets
    /// `cancel`.
    pub fn begin(
        state: &StateDir,
        req: &RemoteRunRequest,
        cancel: &'static AtomicBool,
    ) -> Result<RemoteRun> {
        let objects = ObjectStore::open_bound(
            &req.workspace,
            super::bound_root(state, &req.session_id, &req.workspace).as_deref(),
        )?;
        let dir = objects.dir().to_path_buf();
        let remote = git::resolve_remote(&dir, Some(&req.remote), &super::writable_roots(state))?;
        let mut lease = lease::claim(&dir, &remote, &req.session_id, req.ttl, req.take_expired)?;
        failpoint::hit("remote.after-claim");
        let pulled = match super::pull(
            state,
            &req.session_id,
            Some(remote.name()),
            &req.workspace,
            PullMode::Resume,
        ) {
            Ok(p) => p,
            Err(e) => {
                let _ = lease.release();
                return Err(e);
            }
        };
        failpoint::hit("remote.after-pull");
        lease.start_renewal(cancel);
        Ok(RemoteRun {
            lease,
            remote,
            pulled,
            session_id: req.session_id.clone(),
        })
    }

    /// The holder named in the lease this run took over, if it was taken over.
    pub fn took_over_from(&self) -> Option<&lease::LeaseRecord> {
        self.lease.took_over_from.as_ref()
    }

    /// A snapshot while the run holds the Session's local lease (`--push-every`).
    pub fn push_during(&self, state: &StateDir) -> Result<PushedSnapshot> {
        super::push(state, &self.session_id, Some(self.remote.name()), true)
    }

    /// After the run (its local lease released): pushes the result and releases the remote
    /// lease. The lease is released even when the push fails; the first error is returned.
    pub fn finish(self, state: &StateDir) -> Result<PushedSnapshot> {
        if self.lease.lost().is_some() {
            // Someone else holds it now: their snapshot wins, ours is not pushed over it;
            // release() says so (and releases nothing).
            return match self.lease.release() {
                Err(e) => Err(e),
                Ok(()) => Err(crate::error::Error::failed(
                    "internal: a lost lease was released",
                )),
            };
        }
        let pushed = super::push(state, &self.session_id, Some(self.remote.name()), false);
        failpoint::hit("remote.after-push");
        let released = self.lease.release();
        let pushed = pushed?;
        released?;
        Ok(pushed)
    }

    /// Releases the lease without pushing (the run never started).
    pub fn abandon(self) -> Result<()> {
        self.lease.release()
    }
}

/// The workspace a remote run uses: `--workspace`, else the current directory.
pub fn workspace_or_cwd(workspace: Option<&Path>) -> Result<PathBuf> {
    match workspace {
        Some(w) => Ok(w.to_path_buf()),
        None => std::env::current_dir()
            .map_err(|e| crate::error::Error::io("read the current directory", Path::new("."), e)),
    }
}
