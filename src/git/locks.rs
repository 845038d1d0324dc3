//! Leftover git lock files.
//!
//! git creates `index.lock`, `HEAD.lock`, `packed-refs.lock` and `refs/**/NAME.lock` while it
//! changes a file and removes them when it is done. One that is still there when no git process
//! runs was left by a crash, and every later git command (including the agent's) fails on it.
//! We report it up front, naming the file; we never delete it, because only the user can tell
//! whether a git process is still running.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Fails with a conflict (exit 5) naming the first leftover lock file found for the working tree
/// whose git dir is `git_dir` in the repository whose common dir is `common_dir`.
pub(crate) fn check(git_dir: &Path, common_dir: &Path) -> Result<()> {
    match find(git_dir, common_dir).into_iter().next() {
        None => Ok(()),
        Some(lock) => Err(Error::conflict(format!(
            "git lock file {} exists: another git process is running, or one crashed and left it behind",
            lock.display()
        ))
        .with_hint(format!(
            "make sure no git process is running for this repository, then remove it yourself: rm {}",
            lock.display()
        ))),
    }
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
