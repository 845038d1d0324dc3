//! Which git directory kxen-agent uses for a working tree, derived only from what a fenced
//! command cannot have planted (docs/git-trust.md).
//!
//! git finds a repository's files through pointers: a `.git` *file* (`gitdir: PATH`) names the
//! git directory, a `commondir` file in it names the directory holding config, objects and refs.
//! The `exec` fence binds the pointers that exist read-only, but it cannot bind a file that does
//! not exist, and the git directory itself must stay writable (objects, refs, the index). So a
//! fenced command can *create* a `commondir` in a plain repository's `.git`, or a `.git` file in a
//! subdirectory the Session works in, and send every later git command — ours included, outside
//! the fence — to a directory whose config it wrote (a remote URL whose hooks run as the user).
//!
//! [`derive`] reads the layout from the filesystem with the rules git itself follows, and refuses
//! (exit 6) the pointers only a planted file produces:
//! - a `commondir` is legitimate only in a linked worktree's entry `C/worktrees/NAME` (written by
//!   `git worktree add`, and then bound read-only by the fence), naming `C`; anywhere else it is
//!   refused, naming it;
//! - a `.git` file or symlink that leads into its own working tree is refused (git never makes
//!   one; a command confined to that tree can);
//! - the working-tree root must be the one the Session was bound to ([`derive_bound`]): a `.git`
//!   between the Session's directory and its repository root was not there when it was bound.
//!
//! Every git process we start then gets the result explicitly (`GIT_DIR`, `GIT_COMMON_DIR`,
//! `GIT_WORK_TREE`, see [`Layout::apply`]), so a pointer planted after the check cannot redirect
//! it, and every gix repository we open is compared with it ([`Layout::check_gix`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

/// Where a repository's files are, every path canonical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The working-tree root; `None` for a bare repository.
    pub work_tree: Option<PathBuf>,
    /// This working tree's git directory (`.git`, or `C/worktrees/NAME`).
    pub git_dir: PathBuf,
    /// The directory holding config, objects and refs (the git directory itself, or `C`).
    pub common_dir: PathBuf,
}

impl Layout {
    /// Pins `cmd` (a `git` command) to this layout: no discovery, no pointer file is read.
    pub fn apply(&self, cmd: &mut Command) {
        cmd.env("GIT_DIR", &self.git_dir)
            .env("GIT_COMMON_DIR", &self.common_dir);
        match &self.work_tree {
            Some(w) => cmd.env("GIT_WORK_TREE", w),
            None => cmd.env_remove("GIT_WORK_TREE"),
        };
    }

    /// Refuses a gix repository that followed a pointer this layout does not (opened before or
    /// after a file was planted): gix reads `commondir` itself.
    pub(crate) fn check_gix(&self, git_dir: &Path, common_dir: &Path) -> Result<()> {
        let same = |a: &Path, b: &Path| a.canonicalize().is_ok_and(|a| a == b);
        if !same(git_dir, &self.git_dir) {
            return Err(planted(
                &self.git_dir,
                &format!(
                    "git found the git directory {} instead of {}",
                    git_dir.display(),
                    self.git_dir.display()
                ),
            ));
        }
        if !same(common_dir, &self.common_dir) {
            return Err(planted(
                &self.git_dir.join("commondir"),
                &format!(
                    "git found the common directory {} instead of {}",
                    common_dir.display(),
                    self.common_dir.display()
                ),
            ));
        }
        Ok(())
    }

    /// The directories a local remote must not lie in, as far as this repository knows them.
    pub fn roots(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = self.work_tree.iter().cloned().collect();
        for dir in [&self.git_dir, &self.common_dir] {
            if !out.iter().any(|r| dir.starts_with(r)) {
                out.push(dir.clone());
            }
        }
        out
    }
}

/// The layout of the repository around `dir` (which exists), found as git finds it: the nearest
/// directory at or above `dir` with a `.git` entry, or that is a bare git directory itself.
/// `Ok(None)` outside git; exit 6 naming the file when a pointer could only have been planted.
pub fn derive(dir: &Path) -> Result<Option<Layout>> {
    let dir = dir
        .canonicalize()
        .map_err(|e| Error::io("resolve", dir, e))?;
    for at in dir.ancestors() {
        let dot_git = at.join(".git");
        if dot_git.symlink_metadata().is_ok() {
            return working_tree(at, &dot_git).map(Some);
        }
        if is_git_dir(at) {
            let common = common_dir(at)?;
            return Ok(Some(Layout {
                work_tree: None,
                git_dir: at.to_path_buf(),
                common_dir: common,
            }));
        }
    }
    Ok(None)
}

/// [`derive`] for a Session's directory `dir` bound to the working tree `bound_root`: a `.git`
/// found below `bound_root` (between it and `dir`) is refused, naming it.
pub fn derive_bound(dir: &Path, bound_root: Option<&Path>) -> Result<Option<Layout>> {
    let layout = derive(dir)?;
    if let (
        Some(bound),
        Some(Layout {
            work_tree: Some(found),
            ..
        }),
    ) = (bound_root, &layout)
        && found != bound
        && found.starts_with(bound)
    {
        return Err(planted(
            &found.join(".git"),
            &format!(
                "the Session was bound to the repository at {}, and this `.git` inside it \
                 was not there then",
                bound.display()
            ),
        ));
    }
    Ok(layout)
}

/// The layout of the working tree at `root` whose `.git` entry is `dot_git`.
fn working_tree(root: &Path, dot_git: &Path) -> Result<Layout> {
    let meta = dot_git
        .symlink_metadata()
        .map_err(|e| Error::io("inspect", dot_git, e))?;
    let git_dir = if meta.is_file() {
        gitdir_target(dot_git)?
    } else {
        // A directory, or a symlink to one (resolved: the fence binds its target).
        dot_git.canonicalize().map_err(|e| {
            Error::external(format!("{} cannot be resolved: {e}", dot_git.display()))
        })?
    };
    // A `.git` file or symlink leading back into its own working tree: git never makes one,
    // and the working tree is where a fenced command writes.
    if git_dir.starts_with(root) && git_dir != root.join(".git") {
        return Err(planted(
            dot_git,
            &format!(
                "it leads to {}, inside its own working tree, which git never does",
                git_dir.display()
            ),
        ));
    }
    if !git_dir.is_dir() {
        return Err(Error::external(format!(
            "{} does not lead to a git directory ({} is not one)",
            dot_git.display(),
            git_dir.display()
        )));
    }
    let common_dir = common_dir(&git_dir)?;
    Ok(Layout {
        work_tree: Some(root.to_path_buf()),
        git_dir,
        common_dir,
    })
}

/// The git directory a `gitdir: PATH` file names (relative to the file's directory), canonical.
fn gitdir_target(file: &Path) -> Result<PathBuf> {
    let text = read_small(file)?;
    let Some(rel) = text.trim_end_matches(['\n', '\r']).strip_prefix("gitdir: ") else {
        return Err(Error::external(format!(
            "{} is neither a git directory nor a `gitdir: PATH` file",
            file.display()
        )));
    };
    let base = file.parent().unwrap_or(Path::new("/"));
    let target = base.join(rel);
    target.canonicalize().map_err(|e| {
        Error::external(format!(
            "{} points at {}, which cannot be resolved: {e}",
            file.display(),
            target.display()
        ))
    })
}

/// The common directory of `git_dir`: itself, or — for a linked worktree's entry
/// `C/worktrees/NAME` only — `C` as its `commondir` says. Any other `commondir` is refused.
fn common_dir(git_dir: &Path) -> Result<PathBuf> {
    let pointer = git_dir.join("commondir");
    if pointer.symlink_metadata().is_err() {
        return Ok(git_dir.to_path_buf());
    }
    let entry_of = git_dir
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "worktrees"))
        .and_then(Path::parent);
    let Some(expected) = entry_of else {
        return Err(planted(
            &pointer,
            "only a linked worktree's git directory (`…/worktrees/NAME`) has one, and this is \
             not one",
        ));
    };
    let text = read_small(&pointer)?;
    let named = git_dir.join(text.trim_end_matches(['\n', '\r']));
    match named.canonicalize() {
        Ok(c) if c == expected => Ok(c),
        _ => Err(planted(
            &pointer,
            &format!(
                "it names {}, not the repository {} the worktree belongs to",
                named.display(),
                expected.display()
            ),
        )),
    }
}

/// Whether `dir` is a git directory itself (a bare repository), by git's own test.
fn is_git_dir(dir: &Path) -> bool {
    dir.join("HEAD").is_file()
        && (dir.join("objects").is_dir() || dir.join("commondir").is_file())
        && dir.join("refs").is_dir()
}

fn read_small(path: &Path) -> Result<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(64 * 1024).read_to_string(&mut text))
        .map_err(|e| Error::io("read", path, e))?;
    Ok(text)
}

/// The refusal for a pointer file kxen-agent does not follow.
pub(crate) fn planted(file: &Path, why: &str) -> Error {
    Error::policy(format!(
        "refusing to use the git repository through {}: {why}; a command run in the workspace \
         may have created it to send git (and its remote) elsewhere",
        file.display()
    ))
    .with_hint(format!(
        "inspect {} and remove it if you did not create it (see docs/git-trust.md)",
        file.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn a_plain_repository_and_a_linked_worktree_are_what_git_says() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let repo = root.join("r");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        git(
            &repo,
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "x",
            ],
        );
        std::fs::create_dir(repo.join("sub")).unwrap();
        let plain = derive(&repo.join("sub")).unwrap().unwrap();
        assert_eq!(plain.work_tree.as_deref(), Some(repo.as_path()));
        assert_eq!(plain.git_dir, repo.join(".git"));
        assert_eq!(plain.common_dir, repo.join(".git"));

        git(&repo, &["worktree", "add", "-q", "../wt"]);
        let linked = derive(&root.join("wt")).unwrap().unwrap();
        assert_eq!(linked.git_dir, repo.join(".git/worktrees/wt"));
        assert_eq!(linked.common_dir, repo.join(".git"));
        assert_eq!(derive(tmp.path()).unwrap(), None);
    }

    #[test]
    fn planted_pointers_are_refused_naming_them() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().canonicalize().unwrap().join("r");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);

        // A `commondir` in a plain repository's git directory.
        std::fs::write(repo.join(".git/commondir"), "../elsewhere\n").unwrap();
        let err = derive(&repo).unwrap_err();
        assert_eq!(err.exit_code(), 6);
        assert!(err.message.contains(".git/commondir"), "{}", err.message);
        std::fs::remove_file(repo.join(".git/commondir")).unwrap();

        // A `.git` file in a subdirectory pointing into the subdirectory.
        let sub = repo.join("sub");
        std::fs::create_dir_all(sub.join("evil")).unwrap();
        git(&sub.join("evil"), &["init", "-q", "--bare"]);
        std::fs::write(sub.join(".git"), "gitdir: evil\n").unwrap();
        let err = derive(&sub).unwrap_err();
        assert!(err.message.contains("sub/.git"), "{}", err.message);

        // One pointing outside is found as git finds it, and refused for a bound Session.
        std::fs::write(
            sub.join(".git"),
            format!("gitdir: {}\n", repo.join(".git").display()),
        )
        .unwrap();
        assert!(derive(&sub).is_ok());
        let err = derive_bound(&sub, Some(&repo)).unwrap_err();
        assert_eq!(err.exit_code(), 6);
        assert!(err.message.contains("sub/.git"), "{}", err.message);

        // A `.git` symlink re-pointed into the working tree.
        std::fs::remove_file(sub.join(".git")).unwrap();
        std::os::unix::fs::symlink("evil", sub.join(".git")).unwrap();
        let err = derive(&sub).unwrap_err();
        assert!(err.message.contains("sub/.git"), "{}", err.message);
    }
}
