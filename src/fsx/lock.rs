//! Cross-process file locks on dedicated lock files.
//!
//! Lock files are created on first use and never deleted: deleting a lock file while another
//! process holds or waits on it would let two processes "hold" the same lock. The lock itself
//! is an OS advisory lock (`flock`), so the kernel releases it when its holder dies — a killed
//! process never leaves a stale lock.

use std::fs::{File, OpenOptions, TryLockError};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// How long a caller is willing to wait for a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockWait {
    /// Fail at once if the lock is held.
    No,
    /// Poll until the deadline, then fail.
    Up(Duration),
}

/// An exclusive lock, held until dropped.
#[derive(Debug)]
pub struct FileLock {
    file: File,
    path: PathBuf,
}

const POLL_INTERVAL: Duration = Duration::from_millis(25);

impl FileLock {
    /// Takes the lock if it is free; `Ok(None)` if another process holds it.
    pub fn try_exclusive(path: &Path) -> Result<Option<FileLock>> {
        try_lock(open_lock_file(path)?, path)
    }

    /// Locks an existing directory itself (`flock` on its descriptor) instead of a lock file.
    ///
    /// For writers inside a user's repository (`.dwp/config.json`), where a lock file of ours
    /// would be a stray, possibly committed, file. Waits as [`FileLock::exclusive`] does.
    pub fn directory(
        dir: &Path,
        wait: LockWait,
        what: &str,
        on_wait: impl FnOnce(&Path),
    ) -> Result<FileLock> {
        acquire(dir, wait, what, on_wait, || {
            let handle = File::open(dir).map_err(|e| Error::io("open directory", dir, e))?;
            try_lock(handle, dir)
        })
    }

    /// Takes the lock, waiting as `wait` allows. Before the first wait `on_wait` is called once
    /// so the caller can say what it waits for (the library itself never prints).
    ///
    /// A held lock after the deadline is a `Conflict` naming the lock file; `what` describes the
    /// lock for that message ("the plan's writer lock").
    pub fn exclusive(
        path: &Path,
        wait: LockWait,
        what: &str,
        on_wait: impl FnOnce(&Path),
    ) -> Result<FileLock> {
        acquire(path, wait, what, on_wait, || Self::try_exclusive(path))
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open lock file (e.g. to keep it alive across a fork of work).
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Closing the file releases the lock as well; unlocking first makes the release prompt
        // even if the handle were duplicated.
        let _ = self.file.unlock();
    }
}

/// Tries `attempt` once, then (if `wait` allows) polls it until the deadline.
fn acquire(
    path: &Path,
    wait: LockWait,
    what: &str,
    on_wait: impl FnOnce(&Path),
    attempt: impl Fn() -> Result<Option<FileLock>>,
) -> Result<FileLock> {
    if let Some(lock) = attempt()? {
        return Ok(lock);
    }
    let deadline = match wait {
        LockWait::No => return Err(held(path, what)),
        LockWait::Up(d) => Instant::now() + d,
    };
    on_wait(path);
    loop {
        std::thread::sleep(POLL_INTERVAL);
        if let Some(lock) = attempt()? {
            return Ok(lock);
        }
        if Instant::now() >= deadline {
            return Err(held(path, what));
        }
    }
}

fn try_lock(file: File, path: &Path) -> Result<Option<FileLock>> {
    match file.try_lock() {
        Ok(()) => Ok(Some(FileLock {
            file,
            path: path.to_path_buf(),
        })),
        Err(TryLockError::WouldBlock) => Ok(None),
        Err(TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
    }
}

fn open_lock_file(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(super::STATE_FILE_MODE)
        .open(path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::IsADirectory {
                // Our lock files are regular files we create; a directory there is damage.
                Error::corrupt(format!(
                    "{} is a directory where a lock file should be",
                    path.display()
                ))
                .with_hint(
                    "if no kxen-agent or dwp process uses it, remove that directory and retry",
                )
            } else {
                Error::io("open lock file", path, e)
            }
        })
}

fn held(path: &Path, what: &str) -> Error {
    Error::conflict(format!(
        "{what} is held by another process ({})",
        path.display()
    ))
    .with_hint("wait for the other process to finish, then retry")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn second_handle_in_same_process_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let first = FileLock::try_exclusive(&path).unwrap().unwrap();
        assert!(FileLock::try_exclusive(&path).unwrap().is_none());
        drop(first);
        assert!(FileLock::try_exclusive(&path).unwrap().is_some());
    }

    #[test]
    fn directories_can_be_locked_without_a_lock_file() {
        let dir = tempfile::tempdir().unwrap();
        let first = FileLock::directory(dir.path(), LockWait::No, "the dir", |_| {}).unwrap();
        let err = FileLock::directory(dir.path(), LockWait::No, "the dir", |_| {}).unwrap_err();
        assert_eq!(err.kind, crate::error::ErrorKind::Conflict);
        drop(first);
        FileLock::directory(dir.path(), LockWait::No, "the dir", |_| {}).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn contention_with_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let ready = dir.path().join("ready");
        // `flock(1)` takes the same kind of lock (flock(2)) that std uses on Linux.
        let mut child = Command::new("flock")
            .arg("-o")
            .arg(&path)
            .arg("sh")
            .arg("-c")
            .arg(format!("touch {}; sleep 1", ready.display()))
            .spawn()
            .expect("flock(1) from util-linux");
        while !ready.exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
        let err = FileLock::exclusive(&path, LockWait::No, "the test lock", |_| {}).unwrap_err();
        assert_eq!(err.kind, crate::error::ErrorKind::Conflict);
        let mut waited = false;
        let lock = FileLock::exclusive(
            &path,
            LockWait::Up(Duration::from_secs(10)),
            "the test lock",
            |_| waited = true,
        )
        .unwrap();
        assert!(waited);
        drop(lock);
        child.wait().unwrap();
    }

    #[test]
    fn killed_holder_releases_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let ready = dir.path().join("ready");
        let mut child = Command::new("flock")
            .arg("-o")
            .arg(&path)
            .arg("sh")
            .arg("-c")
            .arg(format!("touch {}; exec sleep 30", ready.display()))
            .spawn()
            .unwrap();
        while !ready.exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(FileLock::try_exclusive(&path).unwrap().is_none());
        child.kill().unwrap();
        child.wait().unwrap();
        let lock = FileLock::exclusive(
            &path,
            LockWait::Up(Duration::from_secs(5)),
            "the test lock",
            |_| {},
        );
        assert!(lock.is_ok());
    }
}
