//! The repository's own programs a fenced command must not change: in every git directory of
//! the workspace (its own, the common one of a linked worktree, every worktree's and every
//! submodule's) `config`, `config.worktree`, `hooks/`, `info/`, `commondir` and `gitdir`, and the
//! `.git` files that point a working tree at its git directory.
//!
//! Git runs what these name (hooks, filters, `core.fsmonitor`, `core.sshCommand`, aliases…) on a
//! person's machine later, outside any fence. Landlock's rules are hierarchical (a writable
//! workspace makes everything below it writable), so the fence binds these paths read-only in
//! the command's mount namespace instead, and pins each git directory (binds it onto itself) so
//! it cannot be renamed away and replaced by a writable copy. Objects, refs, the index, `HEAD`
//! and logs stay writable: `git add` and `git commit` work.
//!
//! Read from the filesystem only (no git process, no gix): this runs before every `exec`.

use std::path::{Path, PathBuf};

/// Nested submodules deeper than this are not searched (git's own default recursion is far
/// shallower in practice).
const MAX_DEPTH: usize = 8;

/// What to protect, every path canonical.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Protected {
    /// Git directories (and the directories leading to nested ones), parents first.
    pub pinned: Vec<PathBuf>,
    /// Files and directories bound read-only.
    pub read_only: Vec<PathBuf>,
    /// Git directories outside the workspace a commit must write: a linked worktree's, and only
    /// when git's records outside the workspace confirm it (see [`discover`]).
    pub writable_outside: Vec<PathBuf>,
}

/// Finds the git directories of `workspace` (nothing if it is not a git working tree).
///
/// Fail-closed: every pointer (`.git` file or symlink, `commondir`) lives where the previous
/// command could write it, so none of them widens the fence by itself. A git directory inside
/// the workspace is used as is (its `commondir` is ignored: only a linked worktree has one). A
/// git directory outside the workspace is trusted only when it is a linked worktree's entry
/// `C/worktrees/NAME` whose `gitdir` file (outside the workspace, written by git) points back at
/// this workspace's `.git` and whose `commondir` names `C`; anything else is ignored (the
/// command runs fenced to the workspace, and git then fails inside the fence, not outside).
pub(super) fn discover(workspace: &Path) -> Protected {
    let mut out = Protected::default();
    let Ok(workspace) = workspace.canonicalize() else {
        return out;
    };
    let Some(git_dir) = working_tree_git_dir(&workspace, &mut out) else {
        return out;
    };
    let common = if git_dir.starts_with(&workspace) {
        git_dir.clone()
    } else {
        let Some(common) = linked_worktree_common_dir(&workspace, &git_dir) else {
            return out;
        };
        for dir in [&common, &git_dir] {
            push_unique(&mut out.writable_outside, dir.clone());
        }
        common
    };
    protect_repository(&common, &common, &mut out, 0);
    if git_dir != common {
        protect_git_dir(&git_dir, &mut out);
    }
    out
}

/// The common directory of the linked worktree whose git directory is `git_dir` (outside
/// `workspace`), when git's own records outside the workspace confirm it; `None` otherwise.
fn linked_worktree_common_dir(workspace: &Path, git_dir: &Path) -> Option<PathBuf> {
    let worktrees = git_dir.parent()?;
    if worktrees.file_name()? != "worktrees" {
        return None;
    }
    let common = worktrees.parent()?.to_path_buf();
    let back = read_small(&git_dir.join("gitdir"))?;
    let back = PathBuf::from(back.trim_end_matches(['\n', '\r']))
        .canonicalize()
        .ok()?;
    if back != workspace.join(".git") || common_dir(git_dir)? != common {
        return None;
    }
    common.join("HEAD").is_file().then_some(common)
}

/// The git directory of the working tree at `root`: `root/.git` itself, or where the `.git`
/// file points (which is then protected too).
fn working_tree_git_dir(root: &Path, out: &mut Protected) -> Option<PathBuf> {
    let dot_git = root.join(".git");
    let meta = std::fs::symlink_metadata(&dot_git).ok()?;
    if meta.is_dir() {
        // `root` is canonical and `.git` is no symlink: already canonical.
        return Some(dot_git);
    }
    if meta.file_type().is_symlink() {
        // A `.git` symlink to a directory elsewhere: that directory is protected (the link
        // itself cannot be bound, mount follows it).
        return dot_git.canonicalize().ok().filter(|d| d.is_dir());
    }
    if !meta.is_file() {
        return None;
    }
    let target = gitdir_file_target(&dot_git)?;
    push_unique(&mut out.read_only, dot_git);
    Some(target)
}

/// The directory a `gitdir: PATH` file names (relative to the file's directory).
fn gitdir_file_target(file: &Path) -> Option<PathBuf> {
    let text = read_small(file)?;
    let rel = text
        .trim_end_matches(['\n', '\r'])
        .strip_prefix("gitdir: ")?;
    let base = file.parent()?;
    base.join(rel).canonicalize().ok()
}

/// A linked worktree's (or a submodule worktree's) common directory, from `commondir`.
fn common_dir(git_dir: &Path) -> Option<PathBuf> {
    let text = read_small(&git_dir.join("commondir"))?;
    git_dir
        .join(text.trim_end_matches(['\n', '\r']))
        .canonicalize()
        .ok()
}

/// A repository's common git directory with its worktrees and submodules. `common` is trusted
/// (see [`discover`]): only there are `hooks/` and `info/` created.
fn protect_repository(trusted: &Path, common: &Path, out: &mut Protected, depth: usize) {
    // A missing hooks/ or info/ could be created and filled by the command: make them exist
    // (empty, as `git init` leaves them) so that they can be bound read-only. Never through a
    // symlink out of the trusted directory (`modules` may be one the command planted).
    let inside = common.canonicalize().is_ok_and(|c| c.starts_with(trusted));
    for sub in ["hooks", "info"] {
        let dir = common.join(sub);
        if inside && std::fs::symlink_metadata(&dir).is_err() {
            let _ = std::fs::create_dir(&dir);
        }
    }
    protect_git_dir(common, out);
    if depth >= MAX_DEPTH {
        return;
    }
    let worktrees = common.join("worktrees");
    if worktrees.is_dir() {
        push_unique(&mut out.pinned, worktrees.clone());
        for entry in subdirs(&worktrees) {
            protect_git_dir(&entry, out);
            // The worktree's `.git` file, found through the `gitdir` file git keeps here.
            if let Some(dot_git) = read_small(&entry.join("gitdir"))
                .map(|t| PathBuf::from(t.trim_end_matches(['\n', '\r'])))
                && dot_git.is_file()
                && let Ok(dot_git) = dot_git.canonicalize()
            {
                push_unique(&mut out.read_only, dot_git);
            }
        }
    }
    let modules = common.join("modules");
    if modules.is_dir() {
        protect_modules(trusted, &modules, out, depth + 1);
    }
}

/// `modules/` holds submodule git directories, named by submodule name (which may contain `/`).
fn protect_modules(trusted: &Path, dir: &Path, out: &mut Protected, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    push_unique(&mut out.pinned, dir.to_path_buf());
    for entry in subdirs(dir) {
        if entry.join("HEAD").is_file() {
            protect_repository(trusted, &entry, out, depth);
            // The submodule's working tree `.git` file (core.worktree, relative to the git dir).
            if let Some(worktree) = core_worktree(&entry)
                && let Ok(dot_git) = entry.join(worktree).join(".git").canonicalize()
                && dot_git.is_file()
            {
                push_unique(&mut out.read_only, dot_git);
            }
        } else {
            protect_modules(trusted, &entry, out, depth + 1);
        }
    }
}

/// Pins `dir` and binds its programs read-only.
fn protect_git_dir(dir: &Path, out: &mut Protected) {
    push_unique(&mut out.pinned, dir.to_path_buf());
    for name in [
        "config",
        "config.worktree",
        "hooks",
        "info",
        "commondir",
        "gitdir",
    ] {
        let path = dir.join(name);
        // `dir` is canonical, so only a symlink needs resolving: it is bound where it points
        // (mount follows it). One lstat per name keeps this cheap before every `exec`.
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(real) = path.canonicalize() {
                    push_unique(&mut out.read_only, real);
                }
            }
            Ok(_) => push_unique(&mut out.read_only, path),
            Err(_) => {}
        }
    }
}

/// `core.worktree` of the config in `git_dir`, by a plain line scan (git writes it as
/// `\tworktree = PATH` under `[core]`).
fn core_worktree(git_dir: &Path) -> Option<String> {
    let text = read_small(&git_dir.join("config"))?;
    let mut in_core = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_core = line.eq_ignore_ascii_case("[core]");
            continue;
        }
        if in_core
            && let Some((key, value)) = line.split_once('=')
            && key.trim().eq_ignore_ascii_case("worktree")
        {
            return Some(value.trim().trim_matches('"').to_string());
        }
    }
    None
}

fn subdirs(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

/// A small text file (a pointer or a config), or `None`.
fn read_small(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(64 * 1024)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

fn push_unique(list: &mut Vec<PathBuf>, path: PathBuf) {
    if !list.contains(&path) {
        list.push(path);
    }
}
