//! Finding the repository a `dwp` command works on (docs/dwp-spec.md, "Plan folder layout", "Config files and precedence").
//!
//! Order: `--plan DIR` (the parent of the `.dwp` that holds `plans/<DIR>`), else `--repo DIR`,
//! else the git checkout containing the current directory ([`crate::git::checkout_root`]), else
//! the current directory. A plan folder that is not inside `<root>/.dwp/plans/` has no
//! repository, so no repository config file is read for it (that is not an error: the
//! methodology works without a config file).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Resolves the repository root for a command from its `--plan` and `--repo` options.
///
/// `Ok(None)` only for a `--plan` folder that does not live under `<root>/.dwp/plans/`.
pub fn discover(plan: Option<&Path>, repo: Option<&Path>) -> Result<Option<PathBuf>> {
    // A mistyped --plan or --repo is an error, never an empty registry or a new directory.
    if let Some(plan) = plan {
        require_dir(plan, "plan folder", "--plan names .dwp/plans/PLAN_<slug>")?;
        return Ok(plan_root(&absolute(plan)?));
    }
    if let Some(repo) = repo {
        require_dir(
            repo,
            "repository directory",
            "pass --repo with an existing repository root",
        )?;
        return Ok(Some(absolute(repo)?));
    }
    let cwd = std::env::current_dir()
        .map_err(|e| Error::io("read the current directory", Path::new("."), e))?;
    Ok(Some(crate::git::checkout_root(&cwd).unwrap_or(cwd)))
}

fn require_dir(path: &Path, what: &str, hint: &str) -> Result<()> {
    if path.is_dir() {
        Ok(())
    } else {
        Err(
            Error::not_found(format!("{what} {} does not exist", path.display()))
                .with_hint(hint.to_string()),
        )
    }
}

/// The repository root of a plan folder: walks up from `plan` to a directory whose parent is
/// named `plans` and whose grandparent is named `.dwp`; the root is that `.dwp`'s parent.
pub fn plan_root(plan: &Path) -> Option<PathBuf> {
    let mut dir = Some(plan);
    while let Some(d) = dir {
        let parent = d.parent()?;
        let grandparent = parent.parent()?;
        if parent.file_name().is_some_and(|n| n == "plans")
            && grandparent.file_name().is_some_and(|n| n == ".dwp")
        {
            return grandparent.parent().map(Path::to_path_buf);
        }
        dir = d.parent();
    }
    None
}

/// `path` made absolute against the current directory, without resolving symlinks (the writer
/// must see a symlinked `.dwp` as the link it is).
pub fn absolute(path: &Path) -> Result<PathBuf> {
    std::path::absolute(path).map_err(|e| Error::io("resolve", path, e))
}

/// The user's home directory (`$HOME`), where `~/.dwp/config.json` and `~/` detect paths live.
pub fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_root_walks_up_to_the_dwp_parent() {
        let root = Path::new("/r/repo");
        let plan = root.join(".dwp/plans/PLAN_a_b");
        assert_eq!(plan_root(&plan).as_deref(), Some(root));
        assert_eq!(plan_root(&plan.join("contracts")).as_deref(), Some(root));
        assert_eq!(plan_root(Path::new("/r/elsewhere/PLAN_a_b")), None);
        assert_eq!(plan_root(Path::new("/")), None);
    }

    #[test]
    fn plan_beats_repo() {
        let dir = tempfile::tempdir().unwrap();
        let x = dir.path().join("x");
        let y = dir.path().join("y");
        let plan = x.join(".dwp/plans/PLAN_a_b");
        std::fs::create_dir_all(&plan).unwrap();
        std::fs::create_dir_all(&y).unwrap();
        let found = discover(Some(&plan), Some(&y)).unwrap();
        assert_eq!(found.as_deref(), Some(x.as_path()));
        let found = discover(None, Some(&y)).unwrap();
        assert_eq!(found.as_deref(), Some(y.as_path()));
    }

    #[test]
    fn missing_plan_or_repo_is_not_found() {
        let missing = Path::new("/nonexistent/kxen/.dwp/plans/PLAN_a_b");
        let err = discover(Some(missing), None).unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::NotFound);
        let err = discover(None, Some(Path::new("/nonexistent/kxen"))).unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::NotFound);
    }
}
