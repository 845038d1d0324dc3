//! Worktrees for `session fork --worktree NAME`: `<repo>/.kxen/worktrees/NAME` on a new branch
//! `kxen/NAME`, created with `git worktree add` (see [`super::cli`] for why the CLI).
//!
//! Nothing is ever reused: an existing path or branch is a conflict, because silently binding a
//! fork to someone else's checkout would let two Sessions edit the same files. `.kxen/` is added
//! to the repository's `info/exclude` (local, never committed) so the worktrees do not show up in
//! `git status`; the committed `.gitignore` is never touched.

use std::path::{Path, PathBuf};

use super::{cli, repo};
use crate::error::{Error, Result};
use crate::fsx;

/// The line added to `info/exclude`.
const EXCLUDE_LINE: &str = ".kxen/";

/// Checks a worktree name: `^[A-Za-z0-9_-]{1,64}$` (it becomes a directory and a branch name).
pub fn validate_worktree_name(name: &str) -> Result<()> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(Error::usage(format!(
            "worktree name `{name}` is invalid: use 1 to 64 letters, digits, `_` or `-`"
        )))
    }
}

/// The branch a worktree named `name` gets.
pub fn worktree_branch(name: &str) -> String {
    format!("kxen/{name}")
}

/// Where the worktree `name` of the repository containing `repo_root` lives:
/// `<main working tree>/.kxen/worktrees/NAME` (also for forks of forks made in a worktree).
pub fn worktree_path(repo_root: &Path, name: &str) -> Result<PathBuf> {
    validate_worktree_name(name)?;
    Ok(main_workdir(repo_root)?
        .join(".kxen")
        .join("worktrees")
        .join(name))
}

/// Creates the worktree `name` at commit `at_commit` (a full id) on the new branch `kxen/NAME`
/// and returns its canonical path. Refuses (exit 5) an existing path or branch. If git fails
/// half-way, whatever it created is removed again.
pub fn add_worktree(repo_root: &Path, name: &str, at_commit: &str) -> Result<PathBuf> {
    validate_worktree_name(name)?;
    let repo = repo::open(repo_root)?;
    let base = main_workdir(repo_root)?;
    let path = base.join(".kxen").join("worktrees").join(name);
    let branch = worktree_branch(name);
    if path.symlink_metadata().is_ok() {
        return Err(Error::conflict(format!(
            "worktree path {} already exists; a fork never reuses a checkout",
            path.display()
        ))
        .with_hint(format!(
            "choose another --worktree NAME, or, if it is a leftover nobody uses, remove it with \
             `git worktree remove --force {}` and `git branch -D {branch}`",
            path.display()
        )));
    }
    if repo.has_branch(&branch)? {
        return Err(Error::conflict(format!(
            "branch `{branch}` already exists in {}; a fork never reuses a branch",
            base.display()
        ))
        .with_hint(format!(
            "choose another --worktree NAME, or delete the branch with `git branch -D {branch}` if it is unused"
        )));
    }
    let is_full_id =
        matches!(at_commit.len(), 40 | 64) && at_commit.bytes().all(|b| b.is_ascii_hexdigit());
    if !is_full_id || !repo.has_commit(at_commit) {
        return Err(Error::not_found(format!(
            "commit `{at_commit}` is not in the repository at {}",
            base.display()
        )));
    }
    ensure_excluded(repo.common_dir())?;
    let path_arg = path.to_string_lossy().into_owned();
    if let Err(err) = cli::run(
        &base,
        &["worktree", "add", "-b", &branch, &path_arg, at_commit],
    ) {
        // Both did not exist before, so anything there now is ours to remove.
        let _ = remove_worktree(repo_root, name);
        return Err(err);
    }
    path.canonicalize()
        .map_err(|e| Error::io("resolve the new worktree", &path, e))
}

/// Removes the worktree `name` and its branch `kxen/NAME` (the rollback of [`add_worktree`]).
/// Uncommitted changes in it are discarded. Missing pieces are fine: it removes what is there.
pub fn remove_worktree(repo_root: &Path, name: &str) -> Result<()> {
    validate_worktree_name(name)?;
    let base = main_workdir(repo_root)?;
    let path = base.join(".kxen").join("worktrees").join(name);
    let branch = worktree_branch(name);
    if path.symlink_metadata().is_ok() {
        let path_arg = path.to_string_lossy().into_owned();
        cli::run(
            &base,
            &["worktree", "remove", "--force", "--force", &path_arg],
        )?;
    }
    cli::run(&base, &["worktree", "prune"])?;
    if repo::open(&base)?.has_branch(&branch)? {
        cli::run(&base, &["branch", "-D", &branch])?;
    }
    Ok(())
}

/// Whether the working tree at `repo_root` has changes to tracked files that are not committed
/// (a worktree fork starts at HEAD and does not carry them). Untracked files are not counted.
pub fn has_uncommitted_changes(repo_root: &Path) -> Result<bool> {
    let out = cli::run(
        repo_root,
        &[
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--ignore-submodules",
        ],
    )?;
    Ok(!out.trim().is_empty())
}

/// The main working tree of the repository containing `repo_root` (worktrees always go there).
fn main_workdir(repo_root: &Path) -> Result<PathBuf> {
    let repo = repo::open(repo_root)?;
    let main = repo.main_workdir()?.ok_or_else(|| {
        Error::invalid(format!(
            "{} is a bare repository; a worktree fork needs a working tree",
            repo_root.display()
        ))
    })?;
    main.canonicalize()
        .map_err(|e| Error::io("resolve repository", &main, e))
}

/// Adds `.kxen/` to `<common dir>/info/exclude` unless a line already excludes it.
fn ensure_excluded(common_dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let info = common_dir.join("info");
    let exclude = info.join("exclude");
    let (mut content, mode) = match std::fs::read(&exclude) {
        Ok(bytes) => {
            let mode = std::fs::metadata(&exclude)
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or(0o644);
            (bytes, mode)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), 0o644),
        Err(e) => return Err(Error::io("read", &exclude, e)),
    };
    let present = String::from_utf8_lossy(&content)
        .lines()
        .map(str::trim)
        .any(|l| l == EXCLUDE_LINE || l == "/.kxen/" || l == ".kxen" || l == "/.kxen");
    if present {
        return Ok(());
    }
    if !content.is_empty() && !content.ends_with(b"\n") {
        content.push(b'\n');
    }
    content.extend_from_slice(b"# kxen-agent worktrees (session fork --worktree)\n");
    content.extend_from_slice(EXCLUDE_LINE.as_bytes());
    content.push(b'\n');
    fsx::create_dir_private(&info)?;
    fsx::write_atomic(&exclude, &content, mode)
}
