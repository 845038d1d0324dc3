//! Leftover git lock files.
//!
//! git creates `index.lock`, `HEAD.lock`, `packed-refs.lock` and `refs/**/NAME.lock` while it
//! changes a file and removes them when it is done. One that is still there when no git process
//! runs was left by a crash, and every later git command (including the agent's) fails on it.
//! We report it up front, naming the file; we never delete it, because only the user can tell
//! whether a git process is still running.
//!
//! A lock file also exists for a moment while any git process changes a ref: another
//! kxen-agent of the same clone fetching a snapshot or claiming a lease (`refs/kxen/…`,
//! `packed-refs.lock` on a ref deletion), or the user's editor running `git status`. So a lock
//! counts as left behind only if the same file (same inode, same mtime) is still there after
//! [`SETTLE`]; one that goes away (or is replaced) was a live process's.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Fails with a conflict (exit 5) naming the first leftover lock file found for the working tree
/// whose git dir is `git_dir` in the repository whose common dir is `common_dir`.
pub(crate) fn check(git_dir: &Path, common_dir: &Path) -> Result<()> {
    check_within(git_dir, common_dir, SETTLE)
}

/// How long a lock file must stay unchanged to count as left behind.
pub(crate) const SETTLE: Duration = Duration::from_secs(3);

/// [`check`] with a settle time of `settle`.
pub(crate) fn check_within(git_dir: &Path, common_dir: &Path, settle: Duration) -> Result<()> {
    let identity = |p: &Path| {
        p.symlink_metadata()
            .ok()
            .map(|m| (m.ino(), m.mtime(), m.mtime_nsec()))
    };
    let mut seen: Vec<(PathBuf, (u64, i64, i64))> = find(git_dir, common_dir)
        .into_iter()
        .filter_map(|p| identity(&p).map(|id| (p, id)))
        .collect();
    let deadline = Instant::now() + settle;
    while !seen.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(25));
        seen.retain(|(p, id)| identity(p) == Some(*id));
    }
    match seen.into_iter().next() {
        None => Ok(()),
        Some((lock, _)) => Err(left_behind(&lock)),
    }
}

/// The error for the lock file `lock`, which a git process holds or a killed one left.
pub(crate) fn left_behind(lock: &Path) -> Error {
    Error::conflict(format!(
        "git lock file {} exists: another git process is running, or one crashed and left it behind",
        lock.display()
    ))
    .with_hint(format!(
        "make sure no git process is running for this repository, then remove it yourself: rm {}",
        lock.display()
    ))
}

/// Every leftover lock file, sorted (the working tree's own first, then the shared ones).
pub(crate) fn find(git_dir: &Path, common_dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![git_dir.to_path_buf()];
    if common_dir != git_dir {
        dirs.push(common_dir.to_path_buf());
    }
    for dir in dirs {
        for name in ["index.lock", "HEAD.lock", "packed-refs.lock"] {
            let path = dir.join(name);
            if path.symlink_metadata().is_ok() {
                found.push(path);
            }
        }
        let refs = dir.join("refs");
        let mut in_refs: Vec<PathBuf> = walkdir::WalkDir::new(&refs)
            .follow_links(false)
            .into_iter()
            .filter_map(|entry| entry.ok())
            .filter(|entry| !entry.file_type().is_dir())
            .filter(|entry| entry.file_name().to_string_lossy().ends_with(".lock"))
            .map(|entry| entry.into_path())
            .collect();
        in_refs.sort();
        found.extend(in_refs);
    }
    found
}
