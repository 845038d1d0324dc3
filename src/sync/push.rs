//! `session push SES [--remote NAME]`.

use std::path::PathBuf;

use serde::Serialize;

use super::{session_ref, snapshot};
use crate::bundle;
use crate::error::{Error, Result};
use crate::git::{self, ObjectStore, Pushed, RefUpdate};
use crate::session::{SessionMeta, store};
use crate::state::StateDir;

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PushedSnapshot {
    pub session_id: String,
    pub remote: String,
    /// The snapshot commit now at `refs/kxen/sessions/<ses>` on the remote.
    pub snapshot: String,
    /// The snapshot it follows, if any.
    pub parent: Option<String>,
    /// `false` when the Session had not changed since `parent` (nothing new was written).
    pub changed: bool,
    pub files: usize,
    pub blobs: usize,
    /// The workspace repository the snapshot was written to.
    pub repository: PathBuf,
}

/// Pushes a snapshot of Session `session_id` to `remote` (default: the current branch's
/// upstream remote, else `origin`) of the Session's workspace repository.
///
/// Under the Session's run lease (unless `lease_held`: a run pushing its own snapshots already
/// holds it) the Session is verified and selected exactly as for a bundle, written as a
/// snapshot tree and commit whose parent is the last snapshot this clone exchanged, and pushed
/// with that parent as the expected remote value: if the remote moved on (another runner pushed),
/// the push is refused (exit 5) and nothing is forced. The local ref moves only after the remote
/// accepted.
pub fn push(
    state: &StateDir,
    session_id: &str,
    remote: Option<&str>,
    lease_held: bool,
) -> Result<PushedSnapshot> {
    let reference = session_ref(session_id)?;
    let paths = store::session_paths(state, session_id)?;
    // Under the run leases of the Session and its task children, held until the push is done.
    let selection = bundle::select(state, session_id, lease_held)?;
    let meta = SessionMeta::read(&paths, session_id)?;
    let objects = ObjectStore::open_bound(
        &meta.workspace.root,
        meta.workspace.repository_root.as_deref(),
    )?;
    let dir = objects.dir().to_path_buf();
    let remote = git::resolve_remote(&dir, remote, &super::writable_roots(state))?;
    let parent = objects.read_ref(&reference)?;
    let parent_tree = match &parent {
        Some(p) => Some(objects.commit(p)?.tree),
        None => None,
    };
    let written = snapshot::write(&objects, session_id, &selection, parent_tree.as_deref())?;
    let unchanged = match &parent_tree {
        Some(t) => snapshot::same_content(&objects, t, &written.tree)?,
        None => false,
    };
    let commit = match (&parent, unchanged) {
        (Some(p), true) => p.clone(),
        _ => {
            let message = format!(
                "kxen-agent snapshot of {session_id}\n\n{} messages, {} runs, {} blobs\n",
                selection.report().messages,
                selection.report().runs.len(),
                written.blobs
            );
            let parents: Vec<String> = parent.iter().cloned().collect();
            objects.write_commit(
                &written.tree,
                &parents,
                &message,
                crate::clock::now_millis() / 1000,
            )?
        }
    };
    let update = RefUpdate {
        new: Some(commit.clone()),
        dst: reference.clone(),
        expect: Some(parent.clone()),
    };
    // Unchanged and already the remote's value: the push is a no-op git reports as up to date.
    match git::push(&dir, &remote, &[update])? {
        Pushed::Done => {}
        Pushed::Rejected { reason } => {
            return Err(Error::conflict(format!(
                "the remote `{remote}` has a snapshot of {session_id} that this clone has not \
                 seen ({reference}: {reason}); not overwriting it"
            ))
            .with_hint(format!(
                "another runner pushed it: bring it here first with `kxen-agent session pull \
                 {session_id} --remote {remote} --workspace {}`, then push again",
                meta.workspace.root.display()
            )));
        }
    }
    if parent.as_deref() != Some(commit.as_str()) {
        objects.update_ref(&reference, &commit, parent.as_deref())?;
    }
    Ok(PushedSnapshot {
        session_id: session_id.to_string(),
        remote: remote.name().to_string(),
        snapshot: commit,
        parent,
        changed: !unchanged,
        files: written.files,
        blobs: written.blobs,
        repository: dir,
    })
}
