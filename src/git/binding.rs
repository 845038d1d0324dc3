//! The workspace binding a Session stores, how it is captured and how a resume verifies it
//! (kxen-agent.md §7).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::repo::{self, HeadState, Repo};
use super::{locks, remote};
use crate::error::{Error, Result};
use crate::hash::sha256_prefixed;

/// Which rule produced a binding's identity hash (see `docs/state-format.md`, "Workspace
/// identity").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum IdentityKind {
    /// `sha256("remote:" + normalized remote)`: the repository's network remote.
    Remote,
    /// `sha256("rootCommit:" + id)`: a repository without a network remote.
    RootCommit,
    /// `sha256("path:" + canonical path)`: outside git, or a repository without commits.
    Path,
}

impl IdentityKind {
    fn describe(self) -> &'static str {
        match self {
            IdentityKind::Remote => "its remote",
            IdentityKind::RootCommit => "its root commit",
            IdentityKind::Path => "its path",
        }
    }
}

/// Where a Session works and which repository that is, as stored in `session.json`.
///
/// Never holds a credential: remotes appear only as hashes of their normalized form, which is
/// built from host and path alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceBinding {
    /// The canonical workspace directory (may be a subdirectory of the repository).
    pub root: PathBuf,
    /// `sha256:…` of the identity (see [`IdentityKind`]).
    pub identity_hash: String,
    pub identity_kind: IdentityKind,
    /// The canonical working-tree root, when the workspace is in git.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository_root: Option<PathBuf>,
    /// `sha256:…` of the normalized network remote the identity used, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_hash: Option<String>,
    /// The branch at capture; `None` when HEAD was detached (or outside git).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The commit HEAD pointed at; `None` outside git or in a repository without commits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
}

/// The outcome of a successful [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The binding to keep: the stored identity, branch and recorded HEAD, at the current
    /// location (root and repository root change on a rebind). Equal to the stored binding when
    /// nothing moved.
    pub binding: WorkspaceBinding,
    /// The commit HEAD points at now (it may have advanced past the recorded one).
    pub current_head: Option<String>,
    /// `Some(old root)` when the workspace was rebound to a new root: the session layer records
    /// a `workspaceRebound` history entry (old root, new root, time).
    pub rebound_from: Option<PathBuf>,
    /// Things the user should know that do not stop the resume.
    pub warnings: Vec<String>,
}

/// Captures the binding of `workspace` for a new Session. Returns warnings separately (for
/// example: an empty repository is identified by its path and cannot be moved).
///
/// A missing workspace is `NotFound` (exit 3), a file is `InvalidInput` (exit 4), a leftover git
/// lock file is `Conflict` (exit 5).
pub fn capture(workspace: &Path) -> Result<(WorkspaceBinding, Vec<String>)> {
    let seen = Observed::of(workspace)?;
    seen.check_locks()?;
    let mut warnings = Vec::new();
    let Some(git) = &seen.git else {
        let binding = WorkspaceBinding {
            identity_hash: path_identity(&seen.root),
            identity_kind: IdentityKind::Path,
            root: seen.root,
            repository_root: None,
            remote_hash: None,
            branch: None,
            head: None,
        };
        return Ok((binding, warnings));
    };
    let (remote, remote_warnings) = git.network_remote();
    warnings.extend(remote_warnings);
    let (identity_kind, identity_hash) = match (&remote, &git.head.commit) {
        (Some(normalized), _) => (IdentityKind::Remote, remote_identity(normalized)),
        (None, Some(head)) => {
            if git.repo.is_shallow() {
                warnings.push(format!(
                    "{} is a shallow clone without a network remote: its identity is the oldest \
                     commit present, which changes if the clone is deepened",
                    git.repository_root.display()
                ));
            }
            (
                IdentityKind::RootCommit,
                root_commit_identity(&git.repo.first_parent_root(head)?),
            )
        }
        (None, None) => {
            warnings.push(format!(
                "{} has no commit yet, so the Session is bound to its path and cannot be moved \
                 or rebound; commit once (or add a remote) before creating a Session to avoid this",
                git.repository_root.display()
            ));
            (IdentityKind::Path, path_identity(&git.repository_root))
        }
    };
    let binding = WorkspaceBinding {
        root: seen.root.clone(),
        identity_hash,
        identity_kind,
        repository_root: Some(git.repository_root.clone()),
        remote_hash: remote.as_deref().map(remote_hash),
        branch: git.head.branch.clone(),
        head: git.head.commit.clone(),
    };
    Ok((binding, warnings))
}

/// Verifies that `workspace` is still the Session's workspace before a resume (kxen-agent.md §7).
///
/// - the identity must match, computed by the rule the Session was created with (so a
///   repository that gained a remote or its first commit later is still recognized);
/// - the branch must match (a Session created on a detached HEAD accepts any detached HEAD);
/// - the recorded HEAD must be the current HEAD or one of its ancestors;
/// - a different root is refused unless `rebind`, and a rebind still needs all of the above.
///
/// Every mismatch is a `Conflict` (exit 5). A workspace that vanished is `NotFound` (exit 3). A
/// pointer file a fenced command could have planted (a `commondir`, a `.git` between the
/// Session's directory and its repository root) is `Policy` (exit 6, docs/git-trust.md).
pub fn verify(stored: &WorkspaceBinding, workspace: &Path, rebind: bool) -> Result<Verified> {
    if !workspace.exists() {
        if workspace == stored.root {
            return Err(Error::not_found(format!(
                "the Session's workspace {} no longer exists",
                stored.root.display()
            ))
            .with_hint(
                "restore it, or bind a moved copy with `--workspace NEW_PATH --rebind-workspace`",
            ));
        }
        return Err(Error::not_found(format!(
            "workspace {} does not exist (the Session's workspace is {})",
            workspace.display(),
            stored.root.display()
        )));
    }
    // At the bound place, a `.git` that appeared between the Session's directory and its
    // repository root is refused (exit 6) rather than taken for another repository.
    let at_bound = workspace
        .canonicalize()
        .is_ok_and(|w| w == stored.root)
        .then_some(stored.repository_root.as_deref())
        .flatten();
    let seen = Observed::of_bound(workspace, at_bound)?;
    seen.check_locks()?;
    let mut warnings = Vec::new();
    let root = bound_root(stored, &seen, &mut warnings)?;
    let rebound_from = (root != stored.root).then(|| stored.root.clone());
    if (rebound_from.is_some() || seen.root != stored.root) && !rebind {
        return Err(Error::conflict(format!(
            "workspace {} is not the Session's workspace {}",
            seen.root.display(),
            stored.root.display()
        ))
        .with_hint(format!(
            "if it is the same repository moved or copied, pass `--workspace {} --rebind-workspace`",
            seen.root.display()
        )));
    }
    let current = seen.identity_as(stored, &mut warnings)?;
    if current.as_deref() != Some(stored.identity_hash.as_str()) {
        let found = match &current {
            Some(hash) => format!("found {}", short(hash)),
            None => "found none".to_string(),
        };
        return Err(Error::conflict(format!(
            "workspace {} is not the Session's repository: the Session is bound to {} ({}), {found}",
            seen.root.display(),
            stored.identity_kind.describe(),
            short(&stored.identity_hash),
        ))
        .with_hint(
            "a Session stays bound to one repository; start a new Session for this one with \
             `kxen-agent run --workspace PATH --task …`",
        ));
    }
    let head = seen
        .git
        .as_ref()
        .map(|g| g.head.clone())
        .unwrap_or(HeadState {
            branch: None,
            commit: None,
        });
    if stored.repository_root.is_some() && head.branch != stored.branch {
        let name = |b: &Option<String>| match b {
            Some(b) => format!("branch `{b}`"),
            None => "a detached HEAD".to_string(),
        };
        let fix = match &stored.branch {
            Some(b) => format!("run `git switch {b}` in {}", seen.root.display()),
            None => format!(
                "detach HEAD again (`git switch --detach {}`)",
                stored.head.as_deref().unwrap_or("COMMIT")
            ),
        };
        return Err(Error::conflict(format!(
            "workspace {} is on {}, but the Session works on {}",
            seen.root.display(),
            name(&head.branch),
            name(&stored.branch)
        ))
        .with_hint(format!("{fix}, then resume")));
    }
    if let (Some(recorded), Some(git)) = (&stored.head, &seen.git) {
        check_head_advanced(recorded, head.commit.as_deref(), git, &seen.root)?;
    }
    let (remote, _) = match &seen.git {
        Some(git) => git.network_remote(),
        None => (None, Vec::new()),
    };
    // The identity, branch and recorded HEAD stay as they were at creation (HEAD only has to
    // be contained in the current one); the location is where the workspace is now.
    let binding = WorkspaceBinding {
        root,
        repository_root: seen.git.as_ref().map(|g| g.repository_root.clone()),
        remote_hash: remote
            .as_deref()
            .map(remote_hash)
            .or(stored.remote_hash.clone()),
        ..stored.clone()
    };
    Ok(Verified {
        binding,
        current_head: head.commit,
        rebound_from,
        warnings,
    })
}

/// Where the Session is bound at `seen`: the same subdirectory of the repository as at capture.
///
/// A Session created on `REPO/sub` is confined to `sub/`; bound to a clone (`--rebind-workspace`,
/// `session import`) it must be confined to `CLONE/sub`, whatever path inside the clone was
/// given — never to the clone's root, which would widen what its tools reach. A clone without
/// `sub` is `NotFound` (exit 3); a `sub` that leaves the clone through a symlink, or a stored
/// root that is not inside its stored repository root (a hand-edited or hostile bundle), is a
/// `Conflict` (exit 5). A Session on a repository root, or outside git, is bound where `seen` is.
fn bound_root(
    stored: &WorkspaceBinding,
    seen: &Observed,
    warnings: &mut Vec<String>,
) -> Result<PathBuf> {
    let (Some(stored_repo), Some(git)) = (&stored.repository_root, &seen.git) else {
        return Ok(seen.root.clone());
    };
    let sub = stored.root.strip_prefix(stored_repo).map_err(|_| {
        Error::conflict(format!(
            "the Session's workspace {} is not inside its repository root {}; refusing to bind it \
             anywhere",
            stored.root.display(),
            stored_repo.display()
        ))
    })?;
    if sub.as_os_str().is_empty() {
        return Ok(seen.root.clone());
    }
    if !sub
        .components()
        .all(|c| matches!(c, std::path::Component::Normal(_)))
    {
        return Err(Error::conflict(format!(
            "the Session's subdirectory `{}` of its repository is not a plain relative path",
            sub.display()
        )));
    }
    let wanted = git.repository_root.join(sub);
    let canonical = match wanted.canonicalize() {
        Ok(c) if c.is_dir() => c,
        _ => {
            return Err(Error::not_found(format!(
                "the Session works in `{}` of its repository, and {} does not exist (or is not \
                 a directory) in {}",
                sub.display(),
                wanted.display(),
                git.repository_root.display()
            ))
            .with_hint(format!(
                "check out a commit that has `{}`, or start a new Session for this workspace",
                sub.display()
            )));
        }
    };
    if !canonical.starts_with(&git.repository_root) {
        return Err(Error::conflict(format!(
            "{} resolves to {}, outside the repository {}; refusing to bind the Session there",
            wanted.display(),
            canonical.display(),
            git.repository_root.display()
        )));
    }
    if canonical != seen.root {
        warnings.push(format!(
            "bound to {}: the Session works in `{}` of its repository (given {})",
            canonical.display(),
            sub.display(),
            seen.root.display()
        ));
    }
    Ok(canonical)
}

/// A workspace looked at once and compared with many stored bindings (`session list
/// --workspace PATH`). Read-only: no lock-file check, nothing written.
pub struct IdentityProbe {
    seen: Observed,
    cache: Vec<((IdentityKind, bool), Option<String>)>,
}

impl IdentityProbe {
    /// Looks at `workspace` (which must exist).
    pub fn new(workspace: &Path) -> Result<IdentityProbe> {
        Ok(IdentityProbe {
            seen: Observed::of(workspace)?,
            cache: Vec::new(),
        })
    }

    /// Whether the probed workspace is the repository `stored` is bound to, by the rule `stored`
    /// was created with (the same comparison [`verify`] makes).
    pub fn matches(&mut self, stored: &WorkspaceBinding) -> Result<bool> {
        let key = (stored.identity_kind, stored.repository_root.is_some());
        let identity = match self.cache.iter().find(|(k, _)| *k == key) {
            Some((_, identity)) => identity.clone(),
            None => {
                let identity = self.seen.identity_as(stored, &mut Vec::new())?;
                self.cache.push((key, identity.clone()));
                identity
            }
        };
        Ok(identity.as_deref() == Some(stored.identity_hash.as_str()))
    }
}

/// HEAD may advance, never rewind or diverge: the Session's history refers to the recorded
/// commit and the changes built on it.
fn check_head_advanced(
    recorded: &str,
    current: Option<&str>,
    git: &GitState,
    root: &Path,
) -> Result<()> {
    let hint = format!(
        "the Session's history builds on commit {recorded}; make HEAD contain it again \
         (`git log {recorded}` shows it) or start a new Session"
    );
    let Some(current) = current else {
        return Err(Error::conflict(format!(
            "workspace {} has no commit on its branch, but the Session recorded HEAD {recorded}",
            root.display()
        ))
        .with_hint(hint));
    };
    if current == recorded {
        return Ok(());
    }
    if git.repo.is_shallow() {
        // Past the shallow cut a missing commit or a failed walk proves nothing: say why and
        // what to fetch instead of calling the history rewound.
        let descends = git.repo.has_commit(recorded)
            && git.repo.is_ancestor(recorded, current).unwrap_or(false);
        if descends {
            return Ok(());
        }
        return Err(Error::conflict(format!(
            "shallow clone: cannot verify that HEAD descends from {recorded} (the Session's \
             HEAD); {} is a shallow clone at {current}; fetch more history (`git fetch \
             --unshallow`)",
            git.repository_root.display()
        ))
        .with_hint(format!(
            "run `git -C {} fetch --unshallow` (in CI: check out with `fetch-depth: 0`), then \
             retry",
            git.repository_root.display()
        )));
    }
    if !git.repo.has_commit(recorded) {
        return Err(Error::conflict(format!(
            "the Session's HEAD {recorded} is not in the repository at {} (its HEAD is {current})",
            git.repository_root.display()
        ))
        .with_hint(hint));
    }
    if !git.repo.is_ancestor(recorded, current)? {
        return Err(Error::conflict(format!(
            "HEAD of {} was rewound or diverged: the Session recorded {recorded}, HEAD is now \
             {current}, which does not contain it",
            root.display()
        ))
        .with_hint(hint));
    }
    Ok(())
}

/// What is at a workspace path right now.
struct Observed {
    /// Canonical workspace directory.
    root: PathBuf,
    git: Option<GitState>,
}

struct GitState {
    repo: Repo,
    /// Canonical working-tree root.
    repository_root: PathBuf,
    head: HeadState,
}

impl Observed {
    fn of(workspace: &Path) -> Result<Observed> {
        Self::of_bound(workspace, None)
    }

    /// [`Observed::of`] for a workspace bound to the repository root `bound` (see
    /// `layout::derive_bound`).
    fn of_bound(workspace: &Path, bound: Option<&Path>) -> Result<Observed> {
        let meta =
            std::fs::metadata(workspace).map_err(|e| Error::io("open workspace", workspace, e))?;
        if !meta.is_dir() {
            return Err(Error::invalid(format!(
                "workspace {} is not a directory",
                workspace.display()
            )));
        }
        let root = canonical(workspace)?;
        let Some(repo) = repo::discover_bound(&root, bound)? else {
            return Ok(Observed { root, git: None });
        };
        let Some(workdir) = repo.workdir() else {
            return Err(Error::invalid(format!(
                "workspace {} is inside a bare repository or a git directory, not a working tree",
                root.display()
            )));
        };
        let repository_root = canonical(workdir)?;
        let head = repo.head()?;
        Ok(Observed {
            root,
            git: Some(GitState {
                repo,
                repository_root,
                head,
            }),
        })
    }

    /// Fails naming a leftover git lock file, if there is one.
    fn check_locks(&self) -> Result<()> {
        match &self.git {
            Some(git) => locks::check(git.repo.git_dir(), git.repo.common_dir()),
            None => Ok(()),
        }
    }

    /// This workspace's identity hash under the rule `stored` was created with; `None` when that
    /// rule does not apply here (no network remote, no commit, not in git).
    fn identity_as(
        &self,
        stored: &WorkspaceBinding,
        warnings: &mut Vec<String>,
    ) -> Result<Option<String>> {
        Ok(match (stored.identity_kind, &self.git) {
            // Created outside git: the path, even if `git init` ran there since.
            (IdentityKind::Path, _) if stored.repository_root.is_none() => {
                Some(path_identity(&self.root))
            }
            // Created in a repository without commits: the repository root.
            (IdentityKind::Path, Some(git)) => Some(path_identity(&git.repository_root)),
            (_, None) => None,
            (IdentityKind::Remote, Some(git)) => {
                let (remote, w) = git.network_remote();
                warnings.extend(w);
                remote.as_deref().map(remote_identity)
            }
            (IdentityKind::RootCommit, Some(git)) => match &git.head.commit {
                Some(head) => Some(root_commit_identity(&git.repo.first_parent_root(head)?)),
                None => None,
            },
        })
    }
}

impl GitState {
    /// The normalized form of the remote that identifies the repository: `origin` if it is a
    /// network remote, else the first network remote by name. Local-path remotes are skipped
    /// (with a warning), since they name a place on this machine, not a repository.
    fn network_remote(&self) -> (Option<String>, Vec<String>) {
        let mut warnings = Vec::new();
        let mut names = self.repo.remote_names();
        if let Some(i) = names.iter().position(|n| n == "origin") {
            let origin = names.remove(i);
            names.insert(0, origin);
        }
        for name in names {
            let Some(url) = self.repo.remote_fetch_url(&name) else {
                continue;
            };
            match remote::normalize_parsed(&url) {
                Some(normalized) => return (Some(normalized), warnings),
                // The URL is never echoed: it may carry a token.
                None => warnings.push(format!(
                    "remote `{name}` is a local path, not a network repository; it does not \
                     count for the workspace identity"
                )),
            }
        }
        (None, warnings)
    }
}

fn canonical(path: &Path) -> Result<PathBuf> {
    let canonical = path
        .canonicalize()
        .map_err(|e| Error::io("resolve workspace", path, e))?;
    if canonical.to_str().is_none() {
        return Err(Error::invalid(format!(
            "workspace {} is not valid UTF-8; session state stores paths as JSON strings",
            canonical.display()
        )));
    }
    Ok(canonical)
}

fn remote_identity(normalized: &str) -> String {
    sha256_prefixed(format!("remote:{normalized}").as_bytes())
}

fn remote_hash(normalized: &str) -> String {
    sha256_prefixed(normalized.as_bytes())
}

fn root_commit_identity(id: &str) -> String {
    sha256_prefixed(format!("rootCommit:{id}").as_bytes())
}

fn path_identity(path: &Path) -> String {
    sha256_prefixed(format!("path:{}", path.display()).as_bytes())
}

/// `sha256:` plus 12 hex digits, enough to tell two identities apart in a message.
fn short(hash: &str) -> &str {
    &hash[..hash.len().min("sha256:".len() + 12)]
}
