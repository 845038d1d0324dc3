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

/// Creates `dir` (and missing parents) with mode 0700 inside a staging directory, without
/// fsyncing: a staging directory is made durable as a whole by [`sync_staged`] before it is
/// renamed into place, and is removed if anything fails, so per-entry fsyncs would only cost
/// one journal commit each.
pub fn create_staged_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(super::STATE_DIR_MODE)
        .create(dir)
        .map_err(|e| Error::io("create directory", dir, e))
}

/// Writes a new file inside a staging directory (refusing to overwrite one), without fsyncing;
/// see [`create_staged_dir`]. A partly written file is removed with its staging directory.
pub fn write_staged(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| Error::io("create", path, e))?;
    file.write_all(bytes)
        .map_err(|e| Error::io("write", path, e))
}

/// Replaces (or creates) `path` inside a staging directory with `value` as pretty JSON, without
/// fsyncing: the staging directory is made durable as a whole by [`sync_staged`] before it is
/// moved into place, and a crash before that discards it. Written beside it and renamed, so the
/// file is never seen half-written by this process's own later reads.
pub fn replace_staged_json<T: serde::Serialize>(path: &Path, value: &T, mode: u32) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::failed(format!("cannot serialize {}: {e}", path.display())))?;
    bytes.push(b'\n');
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = super::atomic::parent_dir(path).join(format!(".tmp-staged-{name}"));
    let _ = fs::remove_file(&temp);
    write_staged(&temp, &bytes, mode)?;
    fs::rename(&temp, path).map_err(|e| Error::io("replace", path, e))
}

/// A new file inside a staging directory written in pieces (an import streams a file's content
/// from the bundle into it), in large writes and without fsyncing; see
/// [`create_staged_dir`] and [`sync_staged`]. Refuses to overwrite a file.
pub struct StagedFile {
    path: std::path::PathBuf,
    out: std::io::BufWriter<fs::File>,
}

impl StagedFile {
    pub fn create(path: &Path, mode: u32) -> Result<StagedFile> {
        use std::os::unix::fs::OpenOptionsExt;
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(path)
            .map_err(|e| Error::io("create", path, e))?;
        Ok(StagedFile {
            path: path.to_path_buf(),
            // Writes of 64 KiB and more (import hands over 256 KiB) go straight to the file;
            // smaller ones are gathered.
            out: std::io::BufWriter::with_capacity(1 << 16, file),
        })
    }

    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io("write", &self.path, e))
    }

    /// Writes out what is buffered and starts (does not wait for) writing the file to disk, so
    /// that the final [`sync_staged`] finds little left to do while the import goes on.
    #[allow(unsafe_code)] // sync_file_range(2): start writeback of a staged file early
    pub fn finish(mut self) -> Result<()> {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        self.out
            .flush()
            .map_err(|e| Error::io("write", &self.path, e))?;
        // SAFETY: the descriptor is open for the duration of the call. A failure only means no
        // early start; `sync_staged` still makes the file durable.
        unsafe {
            libc::sync_file_range(
                self.out.get_ref().as_raw_fd(),
                0,
                0,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
        Ok(())
    }
}

/// A staged tree of at most this many files and directories is made durable one fsync each;
/// a larger one with one `syncfs`.
const FSYNC_EACH_MAX: usize = 32;

/// Makes everything written under the staging directory `dir` durable. A small tree (a Session
/// with no blobs: a handful of files) gets one fsync per file and directory: its writes were
/// started early ([`StagedFile::write`]), so each fsync mostly waits for its own, and a
/// `syncfs` would also flush every other file written on the filesystem meanwhile (the objects
/// `git fetch` just wrote, unsynced, before a pull; 4–7 ms of a 100 ms pull in
/// benches/remote.rs). A large tree (many blobs, task children) gets one `syncfs` of its
/// filesystem: one journal commit instead of hundreds of fsyncs.
pub fn sync_staged(dir: &Path) -> Result<()> {
    let mut entries = Vec::new();
    for entry in walkdir::WalkDir::new(dir).contents_first(true) {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(dir).to_path_buf();
            Error::io("read directory", &path, e.into())
        })?;
        entries.push(entry.into_path());
        if entries.len() > FSYNC_EACH_MAX {
            return sync_filesystem(dir);
        }
    }
    for path in &entries {
        let file = fs::File::open(path).map_err(|e| Error::io("open", path, e))?;
        file.sync_all().map_err(|e| Error::io("sync", path, e))?;
    }
    // The staging directory's own name, as the `syncfs` made it durable too: a fast-forward's
    // swap record (`bundle::swap`) names it before the swap that moves it.
    super::fsync_dir(super::atomic::parent_dir(dir))
}

/// One `syncfs` of the filesystem holding `dir`.
#[allow(unsafe_code)] // syncfs(2): one durable commit for a staged tree
fn sync_filesystem(dir: &Path) -> Result<()> {
    use std::os::fd::AsRawFd;
    let handle = fs::File::open(dir).map_err(|e| Error::io("open directory", dir, e))?;
    // SAFETY: `handle` is an open descriptor for the duration of the call.
    let rc = unsafe { libc::syncfs(handle.as_raw_fd()) };
    if rc != 0 {
        return Err(Error::io("sync", dir, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Moves the file `from` to `to` (same filesystem) without fsyncing `to`'s directory; the caller
/// fsyncs it once after moving a batch ([`super::fsync_dir`]).
pub fn rename_file_unsynced(from: &Path, to: &Path) -> Result<()> {
    fs::rename(from, to).map_err(|e| Error::io("move into place", to, e))
}

/// Removes `dir` if it exists and is empty (a directory a failed command created and must not
/// leave behind). A non-empty or missing directory is left alone.
pub fn remove_empty_dir(dir: &Path) {
    let _ = fs::remove_dir(dir);
}

/// Removes the file `path` and fsyncs its directory (a missing file is fine).
pub fn remove_file(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Ok(()) => super::fsync_dir(super::atomic::parent_dir(path)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("remove", path, e)),
    }
}

/// Swaps the directories `a` and `b` (same filesystem) in one step (`renameat2` with
/// `RENAME_EXCHANGE`), then fsyncs their parent: a reader sees one or the other at each name,
/// never neither. Used to fast-forward a Session to a verified staged copy; the old copy ends up
/// at the staging name, where the next import or creation removes it if this process does not.
/// A filesystem without the exchange is refused (exit 9) rather than replaced in two steps.
#[allow(unsafe_code)] // renameat2(RENAME_EXCHANGE): swap two directories in one step (no std API)
pub fn exchange_dirs(a: &Path, b: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|_| Error::invalid(format!("{} contains a NUL byte", p.display())))
    };
    let (ca, cb) = (c(a)?, c(b)?);
    // SAFETY: both are valid NUL-terminated paths; AT_FDCWD resolves them like rename(2).
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        return Err(Error::io("exchange with", b, e).with_hint(
            "the state dir's filesystem must support renameat2(RENAME_EXCHANGE) (ext4, xfs, \
             btrfs, tmpfs do) to fast-forward a Session in place",
        ));
    }
    super::fsync_dir(super::atomic::parent_dir(b))
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
