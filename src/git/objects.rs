//! Git objects and refs of our own in a workspace repository: Session snapshots and remote
//! leases (`refs/kxen/…`, never under `refs/heads`).
//!
//! Objects are written in-process by gix into the repository's object database (content
//! addressed: an object already present is not written again, so an unchanged blob costs a hash).
//! Nothing here touches the working tree, the index or HEAD. Refs are moved by gix ref
//! transactions (git's lock-file protocol) with the expected old value, so two processes of one
//! clone (ours or git's) cannot lose each other's update.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The object id every git writes for "this ref must not exist yet".
pub const ZERO_OID: &str = "0000000000000000000000000000000000000000";

/// One entry of a tree to write: a blob or a subtree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    pub name: String,
    /// Hex object id.
    pub oid: String,
    pub is_tree: bool,
}

/// A commit as far as snapshots and leases care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    pub tree: String,
    pub parents: Vec<String>,
    pub message: String,
}

/// The object database and refs of the repository around a workspace.
pub struct ObjectStore {
    repo: gix::Repository,
    /// Where `git` runs for ref updates (the working tree, or the git dir of a bare repository).
    dir: PathBuf,
}

impl ObjectStore {
    /// The repository containing `workspace`; exit 3 outside git, exit 6 when a planted pointer
    /// file would lead elsewhere ([`super::layout`]).
    pub fn open(workspace: &Path) -> Result<ObjectStore> {
        Self::open_bound(workspace, None)
    }

    /// [`ObjectStore::open`] for a Session's workspace bound to the working tree `bound_root`
    /// (its binding's repository root): a `.git` that appeared in between is refused.
    pub fn open_bound(workspace: &Path, bound_root: Option<&Path>) -> Result<ObjectStore> {
        let Some(repo) = super::repo::discover_bound(workspace, bound_root)? else {
            return Err(Error::not_found(format!(
                "{} is not inside a git repository: Session snapshots live in the workspace's \
                 repository",
                workspace.display()
            ))
            .with_hint("pass --workspace PATH naming a clone of the Session's repository"));
        };
        let dir = repo
            .workdir()
            .unwrap_or_else(|| repo.git_dir())
            .to_path_buf();
        // Opened again at the directory git runs in, and checked again: a pointer planted since
        // the discovery is refused rather than followed.
        let opened = super::repo::open_gix(&dir)?;
        repo.layout()
            .check_gix(opened.git_dir(), opened.common_dir())?;
        Ok(ObjectStore { repo: opened, dir })
    }

    /// Where `git` commands for this repository run.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn err(&self, action: &str, e: impl std::fmt::Display) -> Error {
        Error::external(format!(
            "git: cannot {action} in {}: {e}",
            self.dir.display()
        ))
    }

    fn oid(hex: &str) -> Result<gix::ObjectId> {
        gix::ObjectId::from_hex(hex.as_bytes())
            .map_err(|_| Error::invalid(format!("`{hex}` is not a full object id")))
    }

    /// Writes `bytes` as a blob; returns its id.
    pub fn write_blob(&self, bytes: &[u8]) -> Result<String> {
        self.repo
            .write_blob(bytes)
            .map(|id| id.to_string())
            .map_err(|e| self.err("write a blob", e))
    }

    /// Writes a tree of `entries` (any order; git's order is applied); returns its id.
    pub fn write_tree(&self, entries: &[TreeEntry]) -> Result<String> {
        let mut tree = gix::objs::Tree::empty();
        for e in entries {
            let kind = if e.is_tree {
                gix::objs::tree::EntryKind::Tree
            } else {
                gix::objs::tree::EntryKind::Blob
            };
            tree.entries.push(gix::objs::tree::Entry {
                mode: kind.into(),
                filename: e.name.as_str().into(),
                oid: Self::oid(&e.oid)?,
            });
        }
        tree.entries.sort();
        self.repo
            .write_object(&tree)
            .map(|id| id.to_string())
            .map_err(|e| self.err("write a tree", e))
    }

    /// Writes a commit of `tree` with `parents` and `message`, by `kxen-agent <kxen-agent@localhost>`
    /// at `seconds` (UTC); returns its id.
    pub fn write_commit(
        &self,
        tree: &str,
        parents: &[String],
        message: &str,
        seconds: i64,
    ) -> Result<String> {
        let sig = gix::actor::Signature {
            name: "kxen-agent".into(),
            email: "kxen-agent@localhost".into(),
            time: gix::date::Time { seconds, offset: 0 },
        };
        let commit = gix::objs::Commit {
            tree: Self::oid(tree)?,
            parents: parents
                .iter()
                .map(|p| Self::oid(p))
                .collect::<Result<_>>()?,
            author: sig.clone(),
            committer: sig,
            encoding: None,
            message: message.into(),
            extra_headers: Vec::new(),
        };
        self.repo
            .write_object(&commit)
            .map(|id| id.to_string())
            .map_err(|e| self.err("write a commit", e))
    }

    /// The commit `oid`: its tree, parents and message.
    pub fn commit(&self, oid: &str) -> Result<CommitInfo> {
        let commit = self
            .repo
            .find_commit(Self::oid(oid)?)
            .map_err(|e| self.err(&format!("read commit {oid}"), e))?;
        let decoded = commit
            .decode()
            .map_err(|e| self.err(&format!("decode commit {oid}"), e))?;
        Ok(CommitInfo {
            tree: decoded.tree().to_string(),
            parents: decoded.parents().map(|p| p.to_string()).collect(),
            message: decoded.message.to_string(),
        })
    }

    /// The entries of tree `oid`, in the tree's order.
    pub fn tree(&self, oid: &str) -> Result<Vec<TreeEntry>> {
        let tree = self
            .repo
            .find_tree(Self::oid(oid)?)
            .map_err(|e| self.err(&format!("read tree {oid}"), e))?;
        let decoded = tree
            .decode()
            .map_err(|e| self.err(&format!("decode tree {oid}"), e))?;
        Ok(decoded
            .entries
            .iter()
            .map(|e| TreeEntry {
                name: e.filename.to_string(),
                oid: e.oid.to_string(),
                is_tree: e.mode.is_tree(),
            })
            .collect())
    }

    /// The bytes of blob `oid`.
    pub fn blob(&self, oid: &str) -> Result<Vec<u8>> {
        let blob = self
            .repo
            .find_blob(Self::oid(oid)?)
            .map_err(|e| self.err(&format!("read blob {oid}"), e))?;
        Ok(blob.detach().data)
    }

    /// The commit ref `name` points at, `None` when it does not exist.
    pub fn read_ref(&self, name: &str) -> Result<Option<String>> {
        match self.repo.try_find_reference(name) {
            Ok(Some(mut r)) => {
                let id = r
                    .peel_to_id()
                    .map_err(|e| self.err(&format!("read {name}"), e))?;
                Ok(Some(id.to_string()))
            }
            Ok(None) => Ok(None),
            Err(e) => Err(self.err(&format!("read {name}"), e)),
        }
    }

    /// Moves ref `name` to `new` if it is still at `expected` (`None`: must not exist);
    /// exit 5 when another process moved it first.
    pub fn update_ref(&self, name: &str, new: &str, expected: Option<&str>) -> Result<()> {
        use gix::refs::transaction::{Change, LogChange, PreviousValue, RefLog};
        let expected = match expected {
            Some(old) => {
                PreviousValue::MustExistAndMatch(gix::refs::Target::Object(Self::oid(old)?))
            }
            None => PreviousValue::MustNotExist,
        };
        self.edit_ref(
            name,
            Change::Update {
                log: LogChange {
                    mode: RefLog::AndReference,
                    force_create_reflog: false,
                    message: "kxen-agent".into(),
                },
                expected,
                new: gix::refs::Target::Object(Self::oid(new)?),
            },
        )
    }

    /// Deletes ref `name` if it is still at `expected`.
    pub fn delete_ref(&self, name: &str, expected: &str) -> Result<()> {
        use gix::refs::transaction::{Change, PreviousValue, RefLog};
        self.edit_ref(
            name,
            Change::Delete {
                expected: PreviousValue::MustExistAndMatch(gix::refs::Target::Object(Self::oid(
                    expected,
                )?)),
                log: RefLog::AndReference,
            },
        )
    }

    /// One ref transaction in-process (git's lock-file protocol and its lock timeouts, the
    /// expected old value checked under the lock): no git process, no config read per update.
    fn edit_ref(&self, name: &str, change: gix::refs::transaction::Change) -> Result<()> {
        let full: gix::refs::FullName = name
            .try_into()
            .map_err(|e| Error::invalid(format!("{name} is not a valid ref name: {e}")))?;
        let sig = gix::actor::Signature {
            name: "kxen-agent".into(),
            email: "kxen-agent@localhost".into(),
            time: gix::date::Time::now_utc(),
        };
        let mut time = gix::date::parse::TimeBuf::default();
        self.repo
            .edit_references_as(
                [gix::refs::transaction::RefEdit {
                    change,
                    name: full,
                    deref: false,
                }],
                Some(sig.to_ref(&mut time)),
            )
            .map(|_| ())
            .map_err(|e| {
                // A lock this edit could not take, after gix waited for it: most likely left by
                // a killed process, and every later git command fails on it too. Only the ref's
                // own lock and packed-refs' are named (a compare-and-swap that lost is not a
                // lock, and another file's lock is not this edit's).
                if e.to_string().to_ascii_lowercase().contains("lock") {
                    let common = self.repo.common_dir();
                    let mine = [
                        common.join(format!("{name}.lock")),
                        common.join("packed-refs.lock"),
                    ];
                    if let Some(lock) = mine.iter().find(|p| p.symlink_metadata().is_ok()) {
                        return super::locks::left_behind(lock);
                    }
                }
                Error::conflict(format!(
                    "{name} in {} was changed by another process: {e}",
                    self.dir.display()
                ))
                .with_hint("retry the command")
            })
    }

    /// Deletes the scratch ref `name` that a fetch of this process just wrote (loose, its name
    /// holding our pid and a random tag, so no other process touches it) if it still points at
    /// `expected`: its file is removed, with the empty directories above it up to `refs/kxen`.
    /// Unlike a ref transaction this never takes `packed-refs.lock`: a deletion takes it, and a
    /// pull killed while holding it left every later git command of the clone failing (found by
    /// killing pulls at random points). A scratch ref packed meanwhile by a `git pack-refs` is
    /// deleted by a transaction instead.
    pub fn delete_scratch_ref(&self, name: &str, expected: &str) -> Result<()> {
        let refs_root = self.repo.common_dir().join("refs").join("kxen");
        let path = self.repo.common_dir().join(name);
        if !name.starts_with("refs/kxen/fetch/") || name.split('/').any(|c| c == "..") {
            return Err(Error::invalid(format!("{name} is not a scratch ref")));
        }
        match std::fs::read_to_string(&path) {
            Ok(text) if text.trim() == expected => {
                // Not synced: a scratch ref that comes back after a power loss is as harmless
                // as one a killed pull leaves.
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io("remove", &path, e)),
                }
                let mut dir = path.parent();
                while let Some(d) = dir {
                    if d == refs_root || !d.starts_with(&refs_root) {
                        break;
                    }
                    crate::fsx::remove_empty_dir(d);
                    dir = d.parent();
                }
                // Also packed (a `git pack-refs --no-prune`, or one that had not pruned yet):
                // the packed entry shows now, and goes by a transaction.
                match self.read_ref(name)? {
                    Some(oid) => self.delete_ref(name, &oid),
                    None => Ok(()),
                }
            }
            _ => self.delete_ref(name, expected),
        }
    }
}
