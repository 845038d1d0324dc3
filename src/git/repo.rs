//! The gix calls the crate makes, behind plain functions that return our [`Error`].
//!
//! gix is pre-1.0 and its API moves; this file is the only one that names gix repository types,
//! so an upgrade touches one place. Repositories are opened *isolated*: only the repository's own
//! config is read (no system, global or environment config), so identity and HEAD never depend on
//! who runs us or on `url.*.insteadOf` rewrites in a user's `~/.gitconfig`.

use std::path::{Path, PathBuf};

use super::layout::{self, Layout};
use crate::error::{Error, Result};

/// An open repository.
pub(crate) struct Repo {
    inner: gix::Repository,
    /// The trusted layout, which gix's own discovery was checked against.
    layout: Layout,
}

/// HEAD as far as a binding cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeadState {
    /// The short branch name (`main`, `kxen/fix`), `None` when HEAD is detached.
    pub branch: Option<String>,
    /// The commit HEAD points at (hex), `None` in a repository without commits (unborn branch).
    pub commit: Option<String>,
}

/// Finds the repository containing `dir` (any subdirectory works), or `None` outside git.
///
/// gix follows `.git` files and `commondir` itself, so what it found is compared with the
/// trusted layout ([`layout::derive`]) and refused (exit 6) when a pointer led it elsewhere.
pub(crate) fn discover(dir: &Path) -> Result<Option<Repo>> {
    discover_bound(dir, None)
}

/// [`discover`] for a Session's directory bound to the working tree `bound_root`
/// ([`layout::derive_bound`]).
pub(crate) fn discover_bound(dir: &Path, bound_root: Option<&Path>) -> Result<Option<Repo>> {
    let trusted = layout::derive_bound(dir, bound_root)?;
    let Some(inner) = discover_gix(dir)? else {
        return Ok(None);
    };
    checked(inner, trusted, dir).map(Some)
}

/// `inner` with the trusted layout `trusted` of `dir`, if gix found the same directories.
fn checked(inner: gix::Repository, trusted: Option<Layout>, dir: &Path) -> Result<Repo> {
    let Some(layout) = trusted else {
        return Err(Error::external(format!(
            "git found a repository at {} for {}, where kxen-agent finds none",
            inner.git_dir().display(),
            dir.display()
        )));
    };
    layout.check_gix(inner.git_dir(), inner.common_dir())?;
    Ok(Repo { inner, layout })
}

fn discover_gix(dir: &Path) -> Result<Option<gix::Repository>> {
    let options = gix::sec::trust::Mapping {
        full: gix::open::Options::isolated(),
        reduced: gix::open::Options::isolated(),
    };
    match gix::ThreadSafeRepository::discover_opts(dir, Default::default(), options) {
        Ok(repo) => Ok(Some(repo.to_thread_local())),
        Err(err) => {
            use gix::discover::upwards::Error as Up;
            match err.downcast_any_ref::<Up>() {
                Some(
                    Up::NoGitRepository { .. }
                    | Up::NoGitRepositoryWithinCeiling { .. }
                    | Up::NoGitRepositoryWithinFs { .. },
                ) => Ok(None),
                _ => Err(Error::external(format!(
                    "cannot open the git repository containing {}: {err}",
                    dir.display()
                ))),
            }
        }
    }
}

/// Opens the repository whose working tree (or git dir) is exactly `dir`.
pub(crate) fn open(dir: &Path) -> Result<Repo> {
    let trusted = layout::derive(dir)?;
    let inner = open_gix(dir)?;
    checked(inner, trusted, dir)
}

/// gix's repository at exactly `dir`, not yet checked against the trusted layout.
pub(crate) fn open_gix(dir: &Path) -> Result<gix::Repository> {
    gix::open_opts(dir, gix::open::Options::isolated()).map_err(|e| {
        Error::external(format!(
            "cannot open the git repository at {}: {e}",
            dir.display()
        ))
    })
}

/// The repository containing `dir`; exit 3 outside git.
pub(crate) fn open_or_discover(dir: &Path) -> Result<Repo> {
    discover(dir)?.ok_or_else(|| {
        Error::not_found(format!("{} is not inside a git repository", dir.display()))
            .with_hint("pass --workspace PATH naming a clone of the Session's repository")
    })
}

impl Repo {
    /// Where the repository's files are, as trusted ([`layout`]).
    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The remote the current branch tracks (`branch.<name>.remote`), if any.
    pub(crate) fn upstream_remote(&self) -> Option<String> {
        let branch = self.head().ok()?.branch?;
        let key = format!("branch.{branch}.remote");
        let value = self.inner.config_snapshot().string(key.as_str())?;
        let value = value.to_string();
        // `.` means "this repository", not a remote.
        (!value.is_empty() && value != ".").then_some(value)
    }

    /// The working tree root, `None` for a bare repository.
    pub(crate) fn workdir(&self) -> Option<&Path> {
        self.inner.workdir()
    }

    /// The git dir of this working tree (`.git`, or `.git/worktrees/NAME` for a linked worktree).
    pub(crate) fn git_dir(&self) -> &Path {
        self.inner.git_dir()
    }

    /// The git dir shared by all working trees (where refs, objects and `info/` live).
    pub(crate) fn common_dir(&self) -> &Path {
        self.inner.common_dir()
    }

    /// Whether history is cut off at a shallow boundary (as `actions/checkout` does by default).
    /// Used for a warning and to explain a failed ancestry check, so an unreadable `shallow`
    /// file counts as "not shallow".
    pub(crate) fn is_shallow(&self) -> bool {
        self.inner.is_shallow().unwrap_or(false)
    }

    /// Remote names in the repository's config, sorted.
    pub(crate) fn remote_names(&self) -> Vec<String> {
        self.inner
            .remote_names()
            .into_iter()
            .map(|n| n.to_string())
            .collect()
    }

    /// The fetch URL of remote `name`, exactly as configured (no `insteadOf` rewriting).
    pub(crate) fn remote_fetch_url(&self, name: &str) -> Option<gix::Url> {
        let remote = self.inner.try_find_remote_without_url_rewrite(name)?.ok()?;
        remote.url(gix::remote::Direction::Fetch).cloned()
    }

    /// The branch and commit HEAD points at.
    pub(crate) fn head(&self) -> Result<HeadState> {
        let head = self.inner.head().map_err(|e| self.err("read HEAD", e))?;
        let branch = head.referent_name().map(|name| name.shorten().to_string());
        let commit = head.id().map(|id| id.to_string());
        Ok(HeadState { branch, commit })
    }

    /// The root commit reached by following first parents from `tip` (hex).
    ///
    /// First parents make the answer unique even when unrelated histories were merged in, and
    /// stable across clones and moves: it only changes if history itself is rewritten.
    pub(crate) fn first_parent_root(&self, tip: &str) -> Result<String> {
        let tip = self.object_id(tip)?;
        let walk = self
            .inner
            .rev_walk([tip])
            .first_parent_only()
            .all()
            .map_err(|e| self.err("walk history", e))?;
        let mut root = tip;
        for info in walk {
            root = info.map_err(|e| self.err("walk history", e))?.id;
        }
        Ok(root.to_string())
    }

    /// Whether commit `id` exists in this repository.
    pub(crate) fn has_commit(&self, id: &str) -> bool {
        match gix::ObjectId::from_hex(id.as_bytes()) {
            Ok(oid) => self
                .inner
                .find_object(oid)
                .map(|o| o.kind == gix::object::Kind::Commit)
                .unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Whether `ancestor` is `descendant` or one of its ancestors.
    pub(crate) fn is_ancestor(&self, ancestor: &str, descendant: &str) -> Result<bool> {
        let a = self.object_id(ancestor)?;
        let d = self.object_id(descendant)?;
        if a == d {
            return Ok(true);
        }
        let base = self
            .inner
            .merge_base(a, d)
            .map_err(|e| self.err("compute a merge base", e))?;
        Ok(base.map(|b| b.detach()) == Some(a))
    }

    /// The working tree of the main repository (differs from [`Repo::workdir`] in a linked
    /// worktree); `None` when the main repository is bare.
    pub(crate) fn main_workdir(&self) -> Result<Option<PathBuf>> {
        let main = self
            .inner
            .main_repo()
            .map_err(|e| self.err("open the main repository", e))?;
        Ok(main.workdir().map(Path::to_path_buf))
    }

    /// Whether local branch `short` (`kxen/NAME`) exists.
    pub(crate) fn has_branch(&self, short: &str) -> Result<bool> {
        let name = format!("refs/heads/{short}");
        self.inner
            .try_find_reference(name.as_str())
            .map(|r| r.is_some())
            .map_err(|e| self.err("look up a branch", e))
    }

    fn object_id(&self, hex: &str) -> Result<gix::ObjectId> {
        gix::ObjectId::from_hex(hex.as_bytes())
            .map_err(|_| Error::invalid(format!("`{hex}` is not a full commit id")))
    }

    fn err(&self, action: &str, e: impl std::fmt::Display) -> Error {
        Error::external(format!(
            "git: cannot {action} in {}: {e}",
            self.location().display()
        ))
    }

    fn location(&self) -> PathBuf {
        self.workdir()
            .unwrap_or_else(|| self.git_dir())
            .to_path_buf()
    }
}
