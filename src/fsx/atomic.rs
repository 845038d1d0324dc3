//! Atomic replace.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;

use super::failpoint;
use crate::error::{Error, Result};

/// Replaces `path` with `bytes` atomically and durably, with permissions `mode`.
///
/// Invariant: at every instant `path` holds either its old content or exactly `bytes`. The temp
/// file lives in the same directory (so the rename never crosses a filesystem) and is removed on
/// every error path.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let tmp = synced_temp(path, mode, |out| {
        out.write_all(bytes)
            .map_err(|e| Error::io("write", path, e))
    })?;
    tmp.persist(path)
        .map_err(|e| Error::io("rename into place", path, e.error))?;
    fsync_dir(parent_dir(path))
}

/// Like [`write_atomic`], for content produced as a stream (bundles): `fill` writes into a
/// buffered temp file in the same directory, which replaces `path` only if `fill` succeeds. On
/// any error the temp file is removed and `path` keeps its old content (or stays absent).
pub fn write_atomic_stream(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    let tmp = synced_temp(path, mode, fill)?;
    tmp.persist(path)
        .map_err(|e| Error::io("rename into place", path, e.error))?;
    fsync_dir(parent_dir(path))
}

/// [`write_atomic_stream`] for an output a user names (`session export --output`), whose
/// directory is theirs, not ours: the temp file is `.<name>.kxen-tmp-<random>` beside `path`,
/// locked (`flock`) while it is written. A process killed mid-write (SIGKILL, power loss)
/// cannot remove its temp, so every call first removes the temps of the same `path` that no
/// live writer holds locked: the next write to that path cleans up what a killed one left.
pub fn write_atomic_stream_owned(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    let prefix = owned_temp_prefix(path);
    remove_stale_temps(parent_dir(path), &prefix);
    let dir = parent_dir(path);
    let tmp = tempfile::Builder::new()
        .prefix(&prefix)
        .tempfile_in(dir)
        .map_err(|e| Error::io("create a temp file in", dir, e))?;
    // Held until the temp is renamed or removed; a cleaner skips a locked temp.
    tmp.as_file()
        .lock()
        .map_err(|e| Error::io("lock", tmp.path(), e))?;
    failpoint::hit("export.after-temp-created");
    let tmp = fill_and_sync(tmp, path, mode, fill)?;
    tmp.persist(path)
        .map_err(|e| Error::io("rename into place", path, e.error))?;
    fsync_dir(parent_dir(path))
}

/// The name prefix of [`write_atomic_stream_owned`]'s temps for `path`.
fn owned_temp_prefix(path: &Path) -> String {
    let name = path
        .file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy());
    format!(".{name}.kxen-tmp-")
}

/// Removes the regular files in `dir` named `prefix…` that no process holds locked (best
/// effort: a temp that cannot be opened or removed is left).
fn remove_stale_temps(dir: &Path, prefix: &str) {
    use std::os::unix::fs::OpenOptionsExt;
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(prefix)
            || !entry.file_type().is_ok_and(|t| t.is_file())
        {
            continue;
        }
        let path = entry.path();
        let Ok(file) = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
        else {
            continue;
        };
        if file.try_lock().is_ok() {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Creates `path` with `bytes`, refusing (exit 5) if anything exists there already.
///
/// Same durability as [`write_atomic`]; the final step is a no-clobber link, so two racing
/// creators cannot both win and an existing file is never replaced.
pub fn create_new(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    if path.symlink_metadata().is_ok() {
        return Err(exists(path));
    }
    let tmp = synced_temp(path, mode, |out| {
        out.write_all(bytes)
            .map_err(|e| Error::io("write", path, e))
    })?;
    match tmp.persist_noclobber(path) {
        Ok(_) => fsync_dir(parent_dir(path)),
        Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => Err(exists(path)),
        Err(e) => Err(Error::io("create", path, e.error)),
    }
}

/// The part every atomic write shares: a temp file beside `path` (same filesystem, so the final
/// rename or link is atomic), filled through a buffer by `fill`, given `mode`, and fsynced — ready
/// to be moved into place. Dropping it on any error removes it.
fn synced_temp(
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<tempfile::NamedTempFile> {
    let dir = parent_dir(path);
    // Created with `mode` (never wider than the final file, before any byte is written: a
    // token or key is never readable by others, not even for a moment), set again after.
    let tmp = tempfile::Builder::new()
        .prefix(".tmp-")
        .permissions(fs::Permissions::from_mode(mode))
        .tempfile_in(dir)
        .map_err(|e| Error::io("create a temp file in", dir, e))?;
    fill_and_sync(tmp, path, mode, fill)
}

/// Fills `tmp` through a buffer, gives it `mode` and fsyncs it (dropped, so removed, on error).
fn fill_and_sync(
    tmp: tempfile::NamedTempFile,
    path: &Path,
    mode: u32,
    fill: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<tempfile::NamedTempFile> {
    let mut out = std::io::BufWriter::with_capacity(1 << 16, tmp);
    fill(&mut out)?;
    let tmp = out
        .into_inner()
        .map_err(|e| Error::io("write", path, e.into_error()))?;
    tmp.as_file()
        .set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io("set permissions on", tmp.path(), e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| Error::io("fsync", tmp.path(), e))?;
    Ok(tmp)
}

fn exists(path: &Path) -> Error {
    Error::conflict(format!(
        "{} already exists; not overwriting it",
        path.display()
    ))
    .with_hint("choose another path with --output, or remove the file first")
}

/// Serializes `value` as pretty JSON (one trailing newline) and replaces `path` atomically.
pub fn write_atomic_json<T: serde::Serialize>(path: &Path, value: &T, mode: u32) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::failed(format!("cannot serialize {}: {e}", path.display())))?;
    bytes.push(b'\n');
    write_atomic(path, &bytes, mode)
}

/// Fsyncs a directory so that a rename or a file creation in it survives a crash.
pub fn fsync_dir(dir: &Path) -> Result<()> {
    let handle = fs::File::open(dir).map_err(|e| Error::io("open directory", dir, e))?;
    handle
        .sync_all()
        .map_err(|e| Error::io("fsync directory", dir, e))
}

/// Creates `dir` and its missing parents with mode 0700, fsyncing each new entry's parent.
pub fn create_dir_private(dir: &Path) -> Result<()> {
    create_dir_with_mode(dir, super::STATE_DIR_MODE)
}

/// Creates `dir` and its missing parents with `mode` (before umask), fsyncing each new entry's
/// parent. Used for directories that are committed or shared, such as a repository's `.dwp`.
pub fn create_dir_with_mode(dir: &Path, mode: u32) -> Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_with_mode(parent, mode)?;
    }
    match fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => fsync_dir(parent_dir(dir)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(Error::io("create directory", dir, e)),
    }
}

pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_content_and_sets_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write_atomic(&path, b"old", 0o600).unwrap();
        write_atomic(&path, b"new", 0o600).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // No temp file is left behind.
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
    }

    #[test]
    fn failed_write_leaves_old_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing-dir").join("x.json");
        assert!(write_atomic(&path, b"new", 0o600).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn create_new_refuses_to_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.yaml");
        create_new(&path, b"one", 0o644).unwrap();
        let err = create_new(&path, b"two", 0o644).unwrap_err();
        assert_eq!(err.kind, crate::error::ErrorKind::Conflict);
        assert_eq!(fs::read(&path).unwrap(), b"one");
    }

    #[test]
    fn creates_private_dirs() {
        let dir = tempfile::tempdir().unwrap();
        let nested = dir.path().join("a/b/c");
        create_dir_private(&nested).unwrap();
        let mode = fs::metadata(&nested).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        create_dir_private(&nested).unwrap();
    }

    /// Set in the environment of the re-executed test binary: the path the child keeps replacing.
    const CRASH_CHILD_ENV: &str = "KXEN_TEST_ATOMIC_CRASH_CHILD";

    /// One of the two generations the child alternates between: big enough (256 KiB) that a kill
    /// often lands in the middle of writing the temp file.
    fn generation(n: u8) -> Vec<u8> {
        let fill = if n == 0 { "a" } else { "b" };
        format!(
            "{{\"generation\":{n},\"fill\":\"{}\"}}\n",
            fill.repeat(256 * 1024)
        )
        .into_bytes()
    }

    /// The child half of [`atomic_replace_survives_sigkill`]: a no-op in a normal test run; when
    /// re-executed with [`CRASH_CHILD_ENV`] it replaces the file with alternating generations
    /// until it is killed.
    #[test]
    fn crash_child_writer() {
        let Some(path) = std::env::var_os(CRASH_CHILD_ENV) else {
            return;
        };
        let path = std::path::PathBuf::from(path);
        let generations = [generation(0), generation(1)];
        for i in 1usize.. {
            write_atomic(&path, &generations[i % 2], 0o600).unwrap();
        }
    }

    /// Crash simulation: a child process loops `write_atomic` with alternating contents and is
    /// SIGKILLed at an arbitrary point; the target always holds exactly one whole generation,
    /// both while the child runs (concurrent readers) and after the kill.
    #[test]
    fn atomic_replace_survives_sigkill() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        let generations = [generation(0), generation(1)];
        write_atomic(&path, &generations[0], 0o600).unwrap();
        let is_whole = |bytes: &[u8]| generations.iter().any(|g| g.as_slice() == bytes);
        for round in 0..8 {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "fsx::atomic::tests::crash_child_writer",
                    "--test-threads=1",
                ])
                .env(CRASH_CHILD_ENV, &path)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            // Read while the child writes, until it has completed a few replacements (seen as
            // the content changing generation), then kill it wherever it is.
            let mut changes = 0;
            let mut last = fs::read(&path).unwrap();
            while changes < 3 + round {
                if let Some(status) = child.try_wait().unwrap() {
                    let out = child.wait_with_output().unwrap();
                    panic!(
                        "child exited early ({status}): {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                }
                let now = fs::read(&path).unwrap();
                assert!(
                    is_whole(&now),
                    "a reader saw a partial file ({} bytes)",
                    now.len()
                );
                if now != last {
                    changes += 1;
                    last = now;
                }
                std::thread::yield_now();
            }
            // SAFETY: kill(2) on the pid of our own child, which we have not yet reaped.
            #[allow(unsafe_code)] // test: SIGKILL our own child mid-write
            let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
            assert_eq!(rc, 0);
            let status = child.wait().unwrap();
            assert!(!status.success(), "the child must have died by the signal");
            let after = fs::read(&path).unwrap();
            assert!(
                is_whole(&after),
                "after SIGKILL the file holds {} bytes",
                after.len()
            );
            let _: serde_json::Value = serde_json::from_slice(&after).unwrap();
        }
    }
}
