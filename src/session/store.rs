//! Creating, listing and reading Sessions.
//!
//! Creation is all or nothing: the Session is written into `sessions/.staging-<ses>/` and renamed
//! to `sessions/<ses>/` only when complete, so a crash or a failure leaves no half Session
//! (readers skip names starting with `.`). Reading never writes, not even the state dir.

use std::path::Path;

use crate::error::{Error, Result};
use crate::fsx::{self, failpoint};
use crate::ids::{self, IdKind};
use crate::session::run_record::RunState;
use crate::session::{Lease, Message, MessageLog, SessionMeta};
use crate::state::{SessionPaths, StateDir};

/// Everything a new Session starts with, built in memory before anything is written.
#[derive(Debug, Clone)]
pub struct NewSession {
    pub meta: SessionMeta,
    /// The first run's task (a user message).
    pub task: Message,
    /// The first run, `queued`.
    pub run: RunState,
}

/// Writes a new Session and returns its run lease, already held.
pub fn create(state: &StateDir, new: &NewSession) -> Result<Lease> {
    create_staged(state, &new.meta.id, |staging| write_staged(staging, new))
}

/// Writes a forked Session — its metadata and the copied messages, no runs — all or nothing,
/// and returns its run lease, already held.
pub fn create_fork(state: &StateDir, meta: &SessionMeta, messages: &[Message]) -> Result<Lease> {
    create_staged(state, &meta.id, |staging| {
        let lease = Lease::acquire(staging, &meta.id)?;
        let paths = SessionPaths {
            dir: staging.to_path_buf(),
        };
        fsx::write_atomic_json(&paths.session_json(), meta, fsx::STATE_FILE_MODE)?;
        // One write for the whole copy (the file is new and invisible until the rename), hash
        // chained from the start exactly as appends chain it.
        let mut jsonl = String::new();
        let mut prev = fsx::chain::GENESIS.to_string();
        for message in messages {
            let record = serde_json::to_string(message)
                .map_err(|e| Error::failed(format!("cannot serialize a message: {e}")))?;
            let line = fsx::chain::chain_line(&record, &prev);
            prev = fsx::chain::line_hash(line.as_bytes());
            jsonl.push_str(&line);
            jsonl.push('\n');
        }
        fsx::write_atomic(&paths.messages(), jsonl.as_bytes(), fsx::STATE_FILE_MODE)?;
        fsx::create_dir_private(&paths.runs_dir())?;
        Ok(lease)
    })
}

/// Builds a Session in `sessions/.staging-<id>/` with `write` and renames it into place.
fn create_staged(
    state: &StateDir,
    id: &str,
    write: impl FnOnce(&Path) -> Result<Lease>,
) -> Result<Lease> {
    ids::validate_kind(id, IdKind::Session)?;
    state.ensure()?;
    let staging = state.sessions_dir().join(format!(".staging-{id}"));
    let target = state.session(id);
    fsx::create_dir_private(&staging)?;
    let result = write(&staging).and_then(|lease| {
        failpoint::hit("session.create.before-rename");
        fsx::rename_dir_into_place(&staging, &target.dir)?;
        failpoint::hit("session.create.after-rename");
        Ok(lease)
    });
    if result.is_err() {
        let _ = fsx::remove_staging_dir(&staging);
    }
    result
}

fn write_staged(staging: &Path, new: &NewSession) -> Result<Lease> {
    // The lock follows the inode, so the lease stays held across the rename.
    let lease = Lease::acquire(staging, &new.meta.id)?;
    let paths = SessionPaths {
        dir: staging.to_path_buf(),
    };
    fsx::write_atomic_json(&paths.session_json(), &new.meta, fsx::STATE_FILE_MODE)?;
    // The lock is durable but the Session is not complete: a crash here must leave nothing
    // visible (the staging directory is skipped by every reader).
    failpoint::hit("session.create.after-lock");
    MessageLog::open(&paths.messages())?.append(new.task.clone())?;
    let run_paths = paths.run(&new.run.id);
    fsx::create_dir_private(&run_paths.dir)?;
    let mut run = new.run.clone();
    run.save(&run_paths)?;
    Ok(lease)
}

/// The ids of all Sessions in the state dir, oldest first. A missing state dir has none.
pub fn list_ids(state: &StateDir) -> Result<Vec<String>> {
    list_dir_ids(&state.sessions_dir(), IdKind::Session)
}

/// The runs of a Session in the order they were created — by their `seq`, never by id or time
/// ([`RunState::order_key`]). Directories without a `run.json` (a crash while creating one) are
/// skipped.
pub fn list_runs(paths: &SessionPaths) -> Result<Vec<RunState>> {
    let mut runs = Vec::new();
    for run_id in list_dir_ids(&paths.runs_dir(), IdKind::Run)? {
        let run_paths = paths.run(&run_id);
        if run_paths.run_json().exists() {
            runs.push(RunState::read(&run_paths, &run_id)?);
        }
    }
    runs.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
    Ok(runs)
}

fn list_dir_ids(dir: &Path, kind: IdKind) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    let mut ids = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || ids::validate_kind(&name, kind).is_err() {
            continue;
        }
        if entry.path().is_dir() {
            ids.push(name);
        } else if kind == IdKind::Run {
            // A run's name that is not a directory: the run's record is gone, and skipping it
            // would let a resume or a new run carry on as if it never existed.
            return Err(Error::corrupt(format!(
                "{} should be a run directory but is not a directory",
                entry.path().display()
            ))
            .with_hint("restore the Session from a backup or bundle"));
        }
    }
    ids.sort();
    Ok(ids)
}

/// Resolves a Session id given on the command line to its directory (validated, must exist).
pub fn session_paths(state: &StateDir, session_id: &str) -> Result<SessionPaths> {
    ids::validate_kind(session_id, IdKind::Session)?;
    let paths = state.session(session_id);
    if !paths.session_json().is_file() {
        return Err(Error::not_found(format!(
            "no session {session_id} in {}",
            state.root().display()
        ))
        .with_hint("run `kxen-agent session list` to see the sessions in this state dir"));
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{DcpAgentLock, parse_definition};
    use crate::git::WorkspaceBinding;
    use crate::policy::{PolicyFlags, merge};
    use crate::session::Role;

    pub(crate) fn sample(id: &str) -> NewSession {
        let run_id = ids::new_id(IdKind::Run);
        let task = Message::new(&run_id, Role::User, "fix the check");
        NewSession {
            meta: SessionMeta {
                format_version: crate::session::meta::FORMAT_VERSION,
                id: id.to_string(),
                created_at: crate::clock::now_rfc3339(),
                workspace: WorkspaceBinding {
                    root: "/w".into(),
                    identity_hash: "sha256:00".into(),
                    identity_kind: crate::git::IdentityKind::Path,
                    repository_root: None,
                    remote_hash: None,
                    branch: None,
                    head: None,
                },
                parent_id: None,
                branch_root_id: id.to_string(),
                fork_point: None,
                fork_kind: None,
                task_parent: None,
                lock: sample_lock(),
                first_run_id: Some(run_id.clone()),
                history: Vec::new(),
            },
            run: RunState::new(id, &run_id, &task, 1),
            task,
        }
    }

    fn sample_lock() -> DcpAgentLock {
        let yaml = "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: t}\nspec:\n  objective: o\n  instructions: [i]\n  capabilities: {required: [read]}\n";
        let definition = parse_definition(yaml.as_bytes(), "t.yaml").unwrap();
        DcpAgentLock::build(&definition, &merge(&PolicyFlags::default()).unwrap()).unwrap()
    }

    #[test]
    fn create_list_and_read_back() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path().join("state"));
        assert!(list_ids(&state).unwrap().is_empty());
        assert!(
            !state.root().exists(),
            "listing must not create the state dir"
        );
        let id = ids::new_id(IdKind::Session);
        let new = sample(&id);
        let lease = create(&state, &new).unwrap();
        assert_eq!(list_ids(&state).unwrap(), vec![id.clone()]);
        let paths = session_paths(&state, &id).unwrap();
        assert_eq!(SessionMeta::read(&paths, &id).unwrap(), new.meta);
        let runs = list_runs(&paths).unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].id, new.run.id);
        assert_eq!(runs[0].task_message_id, new.task.id);
        assert_eq!(
            crate::session::messages::read(&paths.messages()).unwrap(),
            vec![new.task.clone()]
        );
        // The lease taken in staging is held under the final name.
        assert!(Lease::acquire(&paths.dir, &id).is_err());
        drop(lease);
        // No staging directory is left behind.
        let names: Vec<_> = std::fs::read_dir(state.sessions_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn unknown_and_bad_ids() {
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path());
        let err = session_paths(&state, "ses_nope").unwrap_err();
        assert_eq!(err.kind, crate::error::ErrorKind::NotFound);
        let err = session_paths(&state, "../x").unwrap_err();
        assert_eq!(err.kind, crate::error::ErrorKind::InvalidInput);
    }
}
