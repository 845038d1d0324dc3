//! `session pull SES [--remote NAME] --workspace W`.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{scratch_ref, session_ref, snapshot};
use crate::bundle::{self, Existing, ImportRequest, Outcome};
use crate::error::{Error, ErrorKind, Result};
use crate::git::{self, ObjectStore};
use crate::state::StateDir;

/// What a local copy that holds more than the snapshot means to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullMode {
    /// `session pull`: only a fast-forward (or nothing to do) succeeds; a local copy with records
    /// the remote lacks is exit 5.
    Pull,
    /// `--resume --remote`: a local copy ahead of the remote is kept (its run continues here and
    /// its snapshot is pushed at the end); a missing remote snapshot is fine when the Session
    /// exists locally.
    Resume,
}

/// What a pull did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pulled {
    pub session_id: String,
    pub remote: String,
    /// The remote snapshot, `None` when the remote has none (Resume mode only).
    pub snapshot: Option<String>,
    /// `imported` (new here), `fastForwarded`, `upToDate`, `localAhead`, `noRemoteSnapshot`.
    pub action: &'static str,
    pub workspace: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<usize>,
}

/// Fetches the newest snapshot of `session_id` from `remote` of the repository at `workspace`
/// and imports it into `state` with every check of `session import` (and, for a Session that
/// exists here, only as a fast-forward). A damaged snapshot is exit 10 and changes nothing here.
pub fn pull(
    state: &StateDir,
    session_id: &str,
    remote: Option<&str>,
    workspace: &Path,
    mode: PullMode,
) -> Result<Pulled> {
    let reference = session_ref(session_id)?;
    let objects = ObjectStore::open_bound(
        workspace,
        super::bound_root(state, session_id, workspace).as_deref(),
    )?;
    let dir = objects.dir().to_path_buf();
    let remote = git::resolve_remote(&dir, remote, &super::writable_roots(state))?;
    let local_ref = objects.read_ref(&reference)?;
    let scratch = scratch_ref("sessions", session_id);
    let found = git::fetch(&dir, &remote, &reference, &scratch)?;
    let fetched = if found {
        objects.read_ref(&scratch)?
    } else {
        None
    };
    if let Some(oid) = &fetched {
        let _ = objects.delete_scratch_ref(&scratch, oid);
    }
    let Some(commit) = fetched else {
        if mode == PullMode::Resume && state.session(session_id).session_json().is_file() {
            return Ok(Pulled {
                session_id: session_id.into(),
                remote: remote.name().to_string(),
                snapshot: None,
                action: "noRemoteSnapshot",
                workspace: workspace.to_path_buf(),
                messages: None,
                runs: None,
            });
        }
        return Err(Error::not_found(format!(
            "the remote `{remote}` has no snapshot of session {session_id} ({reference})"
        ))
        .with_hint(format!(
            "list the Sessions it holds with `kxen-agent session list --remote {remote}`; push \
             one with `kxen-agent session push SES --remote {remote}`"
        )));
    };
    let label = format!("{remote}:{reference}@{}", &commit[..12]);
    let outcome = import_snapshot(state, &objects, &commit, session_id, &label, workspace)?;
    let (action, done) = match outcome {
        Outcome::Imported(d) => ("imported", Some(d)),
        Outcome::FastForwarded(d) => ("fastForwarded", Some(d)),
        Outcome::UpToDate => ("upToDate", None),
        Outcome::LocalAhead { what } => {
            // The local copy extends the snapshot: the next push may follow it.
            record_local(&objects, &reference, &commit, local_ref.as_deref())?;
            if mode == PullMode::Pull {
                return Err(Error::conflict(format!(
                    "the local copy of session {session_id} holds records the snapshot on \
                     `{remote}` lacks ({what}); it was not changed"
                ))
                .with_hint(format!(
                    "publish them with `kxen-agent session push {session_id} --remote {remote}`"
                )));
            }
            ("localAhead", None)
        }
    };
    record_local(&objects, &reference, &commit, local_ref.as_deref())?;
    Ok(Pulled {
        session_id: session_id.into(),
        remote: remote.name().to_string(),
        snapshot: Some(commit),
        action,
        workspace: workspace.to_path_buf(),
        messages: done.as_ref().map(|d| d.messages),
        runs: done.as_ref().map(|d| d.runs),
    })
}

/// Moves the local snapshot ref to the fetched commit (the parent of the next push).
fn record_local(
    objects: &ObjectStore,
    reference: &str,
    commit: &str,
    before: Option<&str>,
) -> Result<()> {
    if before == Some(commit) {
        return Ok(());
    }
    objects.update_ref(reference, commit, before)
}

/// Imports the snapshot with `bundle::import_entries`: its blobs are read and handed to the
/// import one segment at a time, so it is never held whole. Any refusal of its content is the
/// snapshot's damage: exit 10.
fn import_snapshot(
    state: &StateDir,
    objects: &ObjectStore,
    commit: &str,
    session_id: &str,
    label: &str,
    workspace: &Path,
) -> Result<Outcome> {
    let opened = snapshot::open(objects, commit, session_id, label)?;
    let request = ImportRequest {
        bundle: PathBuf::from(label),
        workspace: workspace.to_path_buf(),
    };
    let header = opened.entry_header();
    let imported = bundle::import_entries(state, &request, Existing::FastForward, header, |into| {
        opened.read_into(objects, label, into)
    });
    imported.map_err(|e| match e.kind {
        ErrorKind::InvalidInput => {
            let mut err = Error::wrap(
                ErrorKind::Corrupt,
                "the snapshot is damaged",
                e,
            );
            err.hints.clear();
            err.with_hint(
                "push the Session again from a runner with an intact copy (`kxen-agent session push`)",
            )
        }
        _ => e,
    })
}
