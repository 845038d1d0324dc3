//! Staging directories of `task` children that a killed process left behind.
//!
//! A `task` child is written into `sessions/.staging-<child>/` (its `session.json`, then its
//! task — the prompt the parent wrote — and its first run) and renamed into place
//! ([`super::store::create`]). A process killed in between leaves the staging directory, which
//! no reader takes for a Session and no later creation reuses (a new child gets a new id), so
//! the prompt would stay on disk for good. [`remove_child_stagings`] removes such leftovers once
//! the parent's run lease is taken.
//!
//! Why that moment is safe: a child of Session P is created only by the process running one of
//! P's runs (`run::children`), and that process holds P's run lease from before the child's id
//! is journaled until the child is renamed into place (or its staging directory removed after
//! a failure). So while we hold P's lease no live process is creating a child of P, and a
//! staging directory whose `session.json` names P as its task parent is a dead process's.
//! Nothing else is touched: a staging directory without a readable `session.json` (killed
//! before it was written: it holds no prompt), one naming another parent, one that is not a
//! `task` child (an import or fork stages under its own id, under that staging directory's own
//! lease), and — belt and braces — one whose lease lock is held by a live process.

use std::path::Path;

use crate::fsx::{self, FileLock};
use crate::ids::{self, IdKind};
use crate::state::SessionPaths;

use super::SessionMeta;

/// Removes the leftover staging directories of `parent_id`'s `task` children from the
/// `sessions/` directory `sessions`. The caller holds `parent_id`'s run lease. Best effort: a
/// leftover that cannot be read or removed stays as it was (it is invisible to every reader).
pub(crate) fn remove_child_stagings(sessions: &Path, parent_id: &str) {
    let Ok(entries) = std::fs::read_dir(sessions) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(child) = name.to_str().and_then(|n| n.strip_prefix(".staging-")) else {
            continue;
        };
        if ids::validate_kind(child, IdKind::Session).is_err() {
            continue;
        }
        let dir = entry.path();
        let paths = SessionPaths { dir: dir.clone() };
        let Ok(meta) = SessionMeta::read(&paths, child) else {
            continue;
        };
        if meta.task_parent.is_none() || meta.parent_id.as_deref() != Some(parent_id) {
            continue;
        }
        // Held while the directory is removed: a live holder keeps it.
        let Ok(Some(_lock)) = FileLock::try_exclusive(&paths.lease_lock()) else {
            continue;
        };
        let _ = fsx::remove_staging_dir(&dir);
    }
}
