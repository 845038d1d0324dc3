//! Sessions through git remotes (kxen-agent.md §11): `session push`, `session pull`,
//! `session list --remote`, and the cross-machine lease of `--resume SES --remote NAME`.
//!
//! The repository's remote already is a replicated, authenticated store with compare-and-swap on
//! refs, so a Session travels as git objects under refs of its own, never under `refs/heads`:
//! - `refs/kxen/sessions/<ses>`: the snapshot history, one commit per push whose parent is the
//!   previous snapshot ([`snapshot`]); pushing is fast-forward only, never forced;
//! - `refs/kxen/leases/<ses>`: the remote lease of a run ([`lease`]), moved only by pushes that
//!   carry the expected old value.
//!
//! The local ref `refs/kxen/sessions/<ses>` of the workspace repository records the last
//! snapshot this clone exchanged with a remote: the parent of the next push. Nothing here writes
//! the working tree, the index, HEAD or a branch.

pub mod lease;
pub mod pull;
pub mod push;
pub mod remote_run;
pub mod segments;
pub mod snapshot;

use crate::error::Result;
use crate::ids::{self, IdKind};

/// The snapshot ref of Session `session_id` (validated first).
pub fn session_ref(session_id: &str) -> Result<String> {
    ids::validate_kind(session_id, IdKind::Session)?;
    Ok(format!("refs/kxen/sessions/{session_id}"))
}

/// The lease ref of Session `session_id` (validated first).
pub fn lease_ref(session_id: &str) -> Result<String> {
    ids::validate_kind(session_id, IdKind::Session)?;
    Ok(format!("refs/kxen/leases/{session_id}"))
}

/// A private local ref to fetch into: unique per process and call, so concurrent pulls and
/// claims of one clone never contend for a ref lock. Removed after use.
fn scratch_ref(kind: &str, session_id: &str) -> String {
    let tag = crate::hash::hex(&ids::random_bytes::<8>());
    format!(
        "refs/kxen/fetch/{}-{tag}/{kind}/{session_id}",
        std::process::id()
    )
}

/// The directories of kxen-agent's own a fenced command can write (the tool homes and temp
/// dirs live in the state dir): no local remote may lie there (docs/git-trust.md). The
/// repository's own directories are added by [`crate::git::resolve_remote`].
pub fn writable_roots(state: &crate::state::StateDir) -> Vec<std::path::PathBuf> {
    vec![state.root().to_path_buf()]
}

/// The repository root Session `session_id` is bound to, when it exists here and is bound to
/// `workspace`: a `.git` planted between the two is then refused ([`crate::git::Layout`]).
fn bound_root(
    state: &crate::state::StateDir,
    session_id: &str,
    workspace: &std::path::Path,
) -> Option<std::path::PathBuf> {
    let paths = state.session(session_id);
    let meta = crate::session::SessionMeta::read(&paths, session_id).ok()?;
    let here = workspace.canonicalize().ok()?;
    (here == meta.workspace.root)
        .then_some(meta.workspace.repository_root)
        .flatten()
}

pub use pull::{PullMode, Pulled, pull};
pub use push::{PushedSnapshot, push};

/// One Session stored on a remote (`session list --remote`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteSession {
    pub session_id: String,
    /// The newest snapshot commit.
    pub snapshot: String,
    /// Whether a run holds the Session's remote lease.
    pub leased: bool,
}

/// The Sessions stored on `remote` (one `ls-remote` of `refs/kxen/*`), sorted by id.
pub fn list(dir: &std::path::Path, remote: &crate::git::Remote) -> Result<Vec<RemoteSession>> {
    let refs = crate::git::ls_remote(dir, remote, "refs/kxen/*")?;
    let leased: Vec<&str> = refs
        .iter()
        .filter_map(|(_, r)| r.strip_prefix("refs/kxen/leases/"))
        .collect();
    let mut out: Vec<RemoteSession> = refs
        .iter()
        .filter_map(|(oid, r)| {
            let id = r.strip_prefix("refs/kxen/sessions/")?;
            ids::validate_kind(id, IdKind::Session).ok()?;
            Some(RemoteSession {
                session_id: id.to_string(),
                snapshot: oid.clone(),
                leased: leased.contains(&id),
            })
        })
        .collect();
    out.sort_by(|a, b| a.session_id.cmp(&b.session_id));
    Ok(out)
}
