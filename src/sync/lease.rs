//! The cross-machine run lease: `refs/kxen/leases/<ses>` on the remote (kxen-agent.md §11).
//!
//! The local run lease (`session::Lease`) is an OS lock: it cannot see a runner on another
//! machine. The remote's refs can: `git push` sends the value it expects a ref to have, and the
//! receiving side updates the ref under its lock only if it still has that value — a
//! compare-and-swap, whatever the transport (`file://`, ssh, https). So:
//! - **claim**: push a lease commit to a ref that must not exist (`--force-with-lease=REF:`);
//!   of any number of runners claiming at once, exactly one succeeds, the others are told who
//!   holds it (one more fetch) and exit 5. One round trip when the lease is free.
//! - **renew**: a background thread pushes a new lease commit (parent: the current one) with the
//!   current one as the expected value, every third of the TTL, so a live holder's lease never
//!   looks expired. It stops when the run ends; if the CAS fails someone took the lease over
//!   (we stalled past the TTL), and the run is canceled.
//! - **release**: delete the ref, expecting our last lease commit. One round trip.
//! - **take over** (`--take-expired-lease`): fetch the lease; if its `expiresAt` has passed,
//!   push ours with the dead holder's commit as parent and expected value. Two round trips.
//!
//! Expiry compares the holder's clock (`expiresAt`) with ours: machines sharing a remote need
//! clocks closer than the TTL. The lease commit names the holder: host, pid, attempt id, start.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{lease_ref, scratch_ref};
use crate::error::{Error, Result};
use crate::git::{self, ObjectStore, Pushed, RefUpdate, Remote, TreeEntry};

/// The `format` of `lease.json`.
pub const FORMAT: &str = "kxen-lease/v1";
/// The TTL when `--lease-ttl` is not given.
pub const DEFAULT_TTL: Duration = Duration::from_secs(300);

/// `lease.json` in a lease commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaseRecord {
    pub format: String,
    pub session_id: String,
    pub host: String,
    pub pid: u32,
    /// Unique per claim: tells two claims by one pid apart.
    pub attempt_id: String,
    pub started_at: String,
    pub renewed_at: String,
    pub ttl_seconds: u64,
    pub expires_at: String,
}

impl LeaseRecord {
    fn expired(&self) -> bool {
        match crate::clock::parse_rfc3339(&self.expires_at) {
            Some(at) => crate::clock::now_millis() > at,
            // An unreadable expiry names no live holder.
            None => true,
        }
    }

    fn describe(&self) -> String {
        format!(
            "host {} pid {} (attempt {}) since {}, renewed {}, expires {}",
            self.host, self.pid, self.attempt_id, self.started_at, self.renewed_at, self.expires_at
        )
    }
}

/// What the renewal thread and the holder share.
struct Shared {
    state: Mutex<Held>,
    wake: Condvar,
}

struct Held {
    /// Our newest lease commit on the remote.
    current: String,
    record: LeaseRecord,
    stop: bool,
    /// Set when a renewal found the lease taken over.
    lost: Option<String>,
}

/// A claimed remote lease. Release it with [`RemoteLease::release`]; dropping it without
/// releasing leaves the lease to expire (what a killed runner leaves).
pub struct RemoteLease {
    dir: PathBuf,
    remote: Remote,
    reference: String,
    ttl: Duration,
    shared: Arc<Shared>,
    renewer: Option<std::thread::JoinHandle<()>>,
    /// Whether the lease was taken over from an expired holder (and whose it was).
    pub took_over_from: Option<LeaseRecord>,
}

/// Claims the remote lease of `session_id` on `remote` of the repository at `dir`.
pub fn claim(
    dir: &Path,
    remote: &Remote,
    session_id: &str,
    ttl: Duration,
    take_expired: bool,
) -> Result<RemoteLease> {
    let reference = lease_ref(session_id)?;
    let objects = ObjectStore::open(dir)?;
    let (expected, previous) = if take_expired {
        match fetch_lease(dir, &objects, remote, &reference)? {
            None => (None, None),
            Some((oid, record)) => {
                if !record.expired() {
                    return Err(held(session_id, remote, &record, true));
                }
                (Some(oid), Some(record))
            }
        }
    } else {
        (None, None)
    };
    let now = crate::clock::now_millis();
    let attempt = crate::hash::hex(&crate::ids::random_bytes::<8>());
    let record = LeaseRecord {
        format: FORMAT.into(),
        session_id: session_id.into(),
        host: crate::session::hostname(),
        pid: std::process::id(),
        attempt_id: format!("att_{attempt}"),
        started_at: crate::clock::format_millis(now),
        renewed_at: crate::clock::format_millis(now),
        ttl_seconds: ttl.as_secs().max(1),
        expires_at: crate::clock::format_millis(now + ttl.as_millis() as i64),
    };
    let parents: Vec<String> = expected.iter().cloned().collect();
    let commit = lease_commit(&objects, &record, &parents)?;
    let update = RefUpdate {
        new: Some(commit.clone()),
        dst: reference.clone(),
        expect: Some(expected.clone()),
    };
    match git::push(dir, remote, &[update])? {
        Pushed::Done => {}
        Pushed::Rejected { .. } => {
            // Someone else holds it (or took it over first): name them.
            return Err(match fetch_lease(dir, &objects, remote, &reference)? {
                Some((_, holder)) => held(session_id, remote, &holder, take_expired),
                None => Error::conflict(format!(
                    "session {session_id} was claimed on `{remote}` by another runner a moment \
                     ago (its lease is already released)"
                ))
                .with_hint("retry once that run's snapshot is pushed"),
            });
        }
    }
    Ok(RemoteLease {
        dir: dir.to_path_buf(),
        remote: remote.clone(),
        reference,
        ttl,
        shared: Arc::new(Shared {
            state: Mutex::new(Held {
                current: commit,
                record,
                stop: false,
                lost: None,
            }),
            wake: Condvar::new(),
        }),
        renewer: None,
        took_over_from: previous,
    })
}

fn held(session_id: &str, remote: &Remote, holder: &LeaseRecord, asked_to_take: bool) -> Error {
    let err = Error::conflict(format!(
        "session {session_id} is leased on `{remote}` by another runner: {}",
        holder.describe()
    ));
    if asked_to_take {
        err.with_hint(format!(
            "the lease has not expired; wait for that run to end, or until {} if that runner \
             died, then retry with --take-expired-lease",
            holder.expires_at
        ))
    } else {
        err.with_hint(format!(
            "wait for that run to end; if that runner died, retry after {} with \
             --take-expired-lease",
            holder.expires_at
        ))
    }
}

/// Writes a lease commit holding `lease.json`.
fn lease_commit(objects: &ObjectStore, record: &LeaseRecord, parents: &[String]) -> Result<String> {
    let json = serde_json::to_vec_pretty(record)
        .map_err(|e| Error::failed(format!("cannot serialize the lease: {e}")))?;
    let blob = objects.write_blob(&json)?;
    let tree = objects.write_tree(&[TreeEntry {
        name: "lease.json".into(),
        oid: blob,
        is_tree: false,
    }])?;
    let message = format!(
        "kxen-agent lease of {} by {} pid {} ({})\n",
        record.session_id, record.host, record.pid, record.attempt_id
    );
    objects.write_commit(&tree, parents, &message, crate::clock::now_millis() / 1000)
}

/// The remote's lease of this ref, if any: its commit and record. An unreadable lease commit
/// counts as expired (it names no holder), with a placeholder record.
fn fetch_lease(
    dir: &Path,
    objects: &ObjectStore,
    remote: &Remote,
    reference: &str,
) -> Result<Option<(String, LeaseRecord)>> {
    let session_id = reference.rsplit('/').next().unwrap_or("");
    let scratch = scratch_ref("leases", session_id);
    if !git::fetch(dir, remote, reference, &scratch)? {
        return Ok(None);
    }
    let Some(oid) = objects.read_ref(&scratch)? else {
        return Ok(None);
    };
    let _ = objects.delete_scratch_ref(&scratch, &oid);
    let record = objects
        .commit(&oid)
        .and_then(|c| objects.tree(&c.tree))
        .ok()
        .and_then(|entries| entries.into_iter().find(|e| e.name == "lease.json"))
        .and_then(|e| objects.blob(&e.oid).ok())
        .and_then(|bytes| serde_json::from_slice::<LeaseRecord>(&bytes).ok())
        .unwrap_or_else(|| LeaseRecord {
            format: FORMAT.into(),
            session_id: session_id.into(),
            host: "(unreadable lease)".into(),
            pid: 0,
            attempt_id: "?".into(),
            started_at: "?".into(),
            renewed_at: "?".into(),
            ttl_seconds: 0,
            expires_at: "?".into(),
        });
    Ok(Some((oid, record)))
}

impl RemoteLease {
    /// This claim's record.
    pub fn record(&self) -> LeaseRecord {
        self.lock().record.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts renewing the lease every third of its TTL (before half of it has passed) until
    /// [`RemoteLease::release`]. If a renewal finds the lease taken over, `cancel` is set so the
    /// run stops at its next safe point.
    pub fn start_renewal(&mut self, cancel: &'static AtomicBool) {
        let shared = Arc::clone(&self.shared);
        let (dir, remote, reference) = (
            self.dir.clone(),
            self.remote.clone(),
            self.reference.clone(),
        );
        let ttl = self.ttl;
        let every = (ttl / 3).max(Duration::from_millis(200));
        self.renewer = Some(std::thread::spawn(move || {
            let mut held = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                let (guard, _) = shared
                    .wake
                    .wait_timeout(held, every)
                    .unwrap_or_else(|p| p.into_inner());
                held = guard;
                if held.stop {
                    return;
                }
                let now = crate::clock::now_millis();
                let mut record = held.record.clone();
                record.renewed_at = crate::clock::format_millis(now);
                record.expires_at = crate::clock::format_millis(now + ttl.as_millis() as i64);
                let current = held.current.clone();
                // Push without holding the lock, so release() is never blocked by the network.
                drop(held);
                let outcome = ObjectStore::open(&dir).and_then(|objects| {
                    let commit = lease_commit(&objects, &record, std::slice::from_ref(&current))?;
                    let update = RefUpdate {
                        new: Some(commit.clone()),
                        dst: reference.clone(),
                        expect: Some(Some(current.clone())),
                    };
                    Ok((git::push(&dir, &remote, &[update])?, commit))
                });
                held = shared.state.lock().unwrap_or_else(|p| p.into_inner());
                match outcome {
                    Ok((Pushed::Done, commit)) => {
                        held.current = commit;
                        held.record = record;
                    }
                    Ok((Pushed::Rejected { reason }, _)) => {
                        held.lost = Some(reason);
                        cancel.store(true, Ordering::SeqCst);
                        return;
                    }
                    // The remote is unreachable for now: try again at the next interval.
                    Err(_) => {}
                }
            }
        }));
    }

    /// Why the lease was lost during the run, if it was.
    pub fn lost(&self) -> Option<String> {
        self.lock().lost.clone()
    }

    /// Stops renewing and deletes the remote lease if it is still ours (compare-and-swap).
    pub fn release(mut self) -> Result<()> {
        self.lock().stop = true;
        self.shared.wake.notify_all();
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
        let (current, lost) = {
            let held = self.lock();
            (held.current.clone(), held.lost.clone())
        };
        if let Some(reason) = lost {
            return Err(Error::conflict(format!(
                "the lease of {} on `{}` was taken over by another runner during the run ({reason})",
                self.reference, self.remote
            ))
            .with_hint("the run was stopped; its snapshot was not pushed over the new holder's"));
        }
        let update = RefUpdate {
            new: None,
            dst: self.reference.clone(),
            expect: Some(Some(current)),
        };
        match git::push(&self.dir, &self.remote, &[update])? {
            Pushed::Done => Ok(()),
            Pushed::Rejected { reason } => Err(Error::conflict(format!(
                "the lease {} on `{}` is no longer ours ({reason}); not releasing it",
                self.reference, self.remote
            ))),
        }
    }
}
