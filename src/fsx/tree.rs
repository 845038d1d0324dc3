//! Whole-directory moves: how a new Session directory appears complete or not at all.

use std::fs;
use std::path::Path;

use crate::error::{Error, Result};

/// Renames the fully written directory `from` to `to` (same filesystem), refusing if `to`
/// exists, then fsyncs the parent of `to` so the new name survives a crash.
pub fn rename_dir_into_place(from: &Path, to: &Path) -> Result<()> {
    if to.symlink_metadata().is_ok() {
        return Err(Error::conflict(format!(
            "{} already exists; not replacing it",
            to.display()
        )));
    }
    fs::rename(from, to).map_err(|e| Error::io("rename into place", to, e))?;
    super::fsync_dir(super::atomic::parent_dir(to))
}

/// Removes a staging directory that will never be renamed into place (a failed creation).
/// A missing directory is fine.
pub fn remove_staging_dir(dir: &Path) -> Result<()> {
    match fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", dir, e)),
    }
}

/// Moves the file `from` to `to` (same filesystem) and fsyncs `to`'s directory. Used to move
/// verified, content-addressed blobs out of an import's staging directory.
pub fn rename_file(from: &Path, to: &Path) -> Result<()> {
    fs::rename(from, to).map_err(|e| Error::io("move into place", to, e))?;
    super::fsync_dir(super::atomic::parent_dir(to))
}

/// Removes `dir` if it exists and is empty (a directory a failed command created and must not
/// leave behind). A non-empty or missing directory is left alone.
pub fn remove_empty_dir(dir: &Path) {
    let _ = fs::remove_dir(dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rename_refuses_an_existing_target() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        fs::create_dir(&a).unwrap();
        fs::create_dir(&b).unwrap();
        assert!(rename_dir_into_place(&a, &b).is_err());
        fs::remove_dir(&b).unwrap();
        rename_dir_into_place(&a, &b).unwrap();
        assert!(b.is_dir() && !a.exists());
        remove_staging_dir(&b).unwrap();
        remove_staging_dir(&b).unwrap();
    }
}
