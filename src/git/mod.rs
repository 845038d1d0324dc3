//! All git access of the crate. Nothing outside this module names a gix type or runs `git`.
//!
//! gix is pre-1.0 and changes between releases (STYLE.md); keeping it behind this module means an
//! upgrade touches these files only. What it provides:
//! - [`capture`]: the [`WorkspaceBinding`] a new Session stores (docs/spec.md §7);
//! - [`verify`]: the checks every resume runs against that binding, including `--rebind-workspace`;
//! - [`add_worktree`] / [`remove_worktree`]: worktrees for `session fork --worktree NAME` (§11);
//! - [`normalize_remote`]: the credential-free, transport-independent name of a remote;
//! - [`checkout_root`]: the checkout around a directory, for `dwp`'s repository discovery;
//! - [`ObjectStore`]: Session snapshots and leases as git objects under `refs/kxen/`;
//! - [`push`] / [`fetch`] / [`ls_remote`]: the user's remotes, with the user's credentials;
//! - [`Layout`]: the git directories every git process and gix repository of ours is pinned to,
//!   never a pointer a fenced command planted (docs/git-trust.md).
//!
//! The identity rule is documented for users in `docs/state-format.md`, "Workspace identity".

mod binding;
mod checkout;
pub(crate) mod cli;
mod layout;
mod locks;
mod objects;
mod remote;
mod repo;
mod transport;
mod trust;
mod worktree;

pub use binding::{IdentityKind, IdentityProbe, Verified, WorkspaceBinding, capture, verify};
pub use checkout::{checkout_root, is_tracked};
pub use layout::Layout;
pub use objects::{CommitInfo, ObjectStore, TreeEntry, ZERO_OID};
pub use remote::normalize as normalize_remote;
pub use transport::{Pushed, RefUpdate, Remote, fetch, ls_remote, push, resolve_remote};
pub use worktree::{
    add_worktree, has_uncommitted_changes, remove_worktree, validate_worktree_name,
    worktree_branch, worktree_path,
};

#[cfg(test)]
mod tests;
