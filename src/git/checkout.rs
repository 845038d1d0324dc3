//! Where the git checkout around a directory is, found the way git itself starts looking: the
//! nearest directory at or above it that holds a `.git` entry. No repository is opened and no
//! `git` runs, so this is cheap and never fails; `dwp` uses it to find the repository a command
//! works on.

use std::path::{Path, PathBuf};

/// The nearest directory at or above `start` that holds a `.git` entry (a directory in a normal
/// checkout, a file in a linked worktree or submodule).
pub fn checkout_root(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .find(|d| d.join(".git").symlink_metadata().is_ok())
        .map(Path::to_path_buf)
}

/// Whether `path` (relative to `root`) is in the git index of the checkout at `root`:
/// `None` when `root` is not in a checkout or git cannot be run. Read-only (`git ls-files`), with
/// the repository's programs neutralized as for every git we start.
// Allowed: kxen-agent's own `git ls-files`, through the neutralized environment of crate::git::cli; never an agent's program.
#[allow(clippy::disallowed_methods)]
pub fn is_tracked(root: &Path, path: &str) -> Option<bool> {
    checkout_root(root)?;
    let mut command =
        super::cli::command(root, &["ls-files", "--error-unmatch", "--", path]).ok()?;
    let status = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    Some(status.success())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkout_root_finds_the_enclosing_checkout() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".git")).unwrap();
        std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        assert_eq!(
            checkout_root(&dir.path().join("a/b")).as_deref(),
            Some(dir.path())
        );
        // A linked worktree or submodule has a `.git` file.
        let linked = dir.path().join("a/linked");
        std::fs::create_dir_all(&linked).unwrap();
        std::fs::write(linked.join(".git"), "gitdir: elsewhere\n").unwrap();
        assert_eq!(checkout_root(&linked).as_deref(), Some(linked.as_path()));
    }
}
