//! The swap of a fast-forwarded task tree, made all-or-nothing with a durable swap record.
//!
//! A pull that fast-forwards a Session and its task children moves several directories
//! (each child placed or exchanged, then the Session itself), and no filesystem moves several
//! names in one step. So the moves are written down first: `swaps/<ses>.json` in the state dir
//! (atomic replace, under the lock file `swaps/<ses>.lock`) lists them, and its rename is the
//! commit point. A kill before it leaves the old tree (the staging directory is removed by the
//! next import); a kill after it leaves a tree that [`finish`] completes before any command
//! reads the state dir (the CLI calls it first), so every reader sees the old complete tree or
//! the new complete one. Each move is recognised as done by the `importId` in the placed
//! directory's `imported.json`, so finishing is idempotent and a kill while finishing is
//! finished again.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fsx::{self, FileLock, failpoint};
use crate::ids::{self, IdKind};
use crate::state::StateDir;

/// Where a staged task child lives inside the root's staging directory until it is moved into
/// `sessions/<child>/`.
pub(super) const TASKS_DIR: &str = ".import-tasks";

/// `swaps/<ses>.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct SwapRecord {
    /// The Session the tree belongs to (its staging directory is `sessions/.staging-<ses>`).
    pub session_id: String,
    /// The `importId` every incoming copy carries in its `imported.json`.
    pub import_id: String,
    /// In order: the children (deepest first), the Session last.
    pub moves: Vec<Move>,
}

/// One directory move: the verified copy at `from` (relative to `sessions/`) takes the name of
/// Session `session`, exchanged with the local copy if there is one.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct Move {
    pub session: String,
    pub from: String,
}

fn swaps_dir(state: &StateDir) -> PathBuf {
    state.root().join("swaps")
}

/// The lock held while a swap record exists and its writer lives.
pub(super) struct Pending {
    record: PathBuf,
    _lock: FileLock,
}

/// Takes the swap lock of `record.session_id` (exit 5 if another process holds it) and writes
/// the record durably: from here on the new tree is the one that counts.
pub(super) fn commit(state: &StateDir, record: &SwapRecord) -> Result<Pending> {
    let dir = swaps_dir(state);
    fsx::create_dir_private(&dir)?;
    let lock_path = dir.join(format!("{}.lock", record.session_id));
    let lock = FileLock::try_exclusive(&lock_path)?.ok_or_else(|| {
        Error::conflict(format!(
            "session {} is being pulled by another process ({})",
            record.session_id,
            lock_path.display()
        ))
        .with_hint("wait for it to finish, then retry")
    })?;
    let path = dir.join(format!("{}.json", record.session_id));
    fsx::write_atomic_json(&path, record, fsx::STATE_FILE_MODE)?;
    Ok(Pending {
        record: path,
        _lock: lock,
    })
}

impl Pending {
    /// The moves are done and durable: the record goes (the lock with it).
    pub(super) fn done(self) -> Result<()> {
        fsx::remove_file(&self.record)
    }
}

/// Whether the directory `dir` is this import's copy.
fn is_ours(dir: &Path, import_id: &str) -> bool {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Imported {
        import_id: Option<String>,
    }
    std::fs::read(dir.join("imported.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Imported>(&b).ok())
        .is_some_and(|r| r.import_id.as_deref() == Some(import_id))
}

/// Makes every move of `record` that is not yet done (the caller holds the swap lock), noting
/// in `done` each one made (its index, and whether it was an exchange).
pub(super) fn apply(
    state: &StateDir,
    record: &SwapRecord,
    done: &mut Vec<(usize, bool)>,
) -> Result<()> {
    let sessions = state.sessions_dir();
    let last = record.moves.len().saturating_sub(1);
    for (i, m) in record.moves.iter().enumerate() {
        let placed = state.session(&m.session).dir;
        if is_ours(&placed, &record.import_id) {
            continue;
        }
        let from = sessions.join(&m.from);
        if i == last {
            // The old copies of exchanged children are in the staged Session's task area.
            fsx::remove_staging_dir(&from.join(TASKS_DIR))?;
            failpoint::hit("pull.before-exchange");
        }
        if placed.symlink_metadata().is_err() {
            fsx::rename_dir_into_place(&from, &placed)?;
            done.push((i, false));
        } else {
            // The local copy's `imported.json` would make the stale copy look like a killed
            // import of its own (whose children a retry takes back): it goes first.
            let old_record = placed.join("imported.json");
            if old_record.is_file() {
                fsx::remove_file(&old_record)?;
            }
            fsx::exchange_dirs(&from, &placed)?;
            done.push((i, true));
        }
        failpoint::hit(if i == last {
            "pull.after-exchange"
        } else {
            "import.after-task-renamed"
        });
    }
    Ok(())
}

/// Completes every swap whose writer died after its commit point: the remaining moves are
/// made, the old copies (at the staging names) removed, the record removed. A swap whose
/// writer still runs is left to it. Costs one `stat` when no swap is pending.
pub fn finish(state: &StateDir) -> Result<()> {
    let dir = swaps_dir(state);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".json") else {
            continue;
        };
        if ids::validate_kind(id, IdKind::Session).is_err() {
            continue;
        }
        let Some(lock) = FileLock::try_exclusive(&dir.join(format!("{id}.lock")))? else {
            continue;
        };
        let path = dir.join(&name);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            // Finished by another process between the listing and the lock.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(Error::io("read", &path, e)),
        };
        let record: SwapRecord = serde_json::from_slice(&bytes).map_err(|e| {
            Error::corrupt(format!("{}: not a swap record: {e}", path.display())).with_hint(
                "a pull was killed while it replaced a Session; move the file aside and pull \
                 the Session again",
            )
        })?;
        let valid = record.session_id == id
            && record.moves.iter().all(|m| {
                ids::validate_kind(&m.session, IdKind::Session).is_ok()
                    && m.from.starts_with(&format!(".staging-{id}"))
                    && !m.from.split('/').any(|c| c == "..")
            });
        if !valid {
            return Err(Error::corrupt(format!(
                "{}: the swap record names paths outside its staging directory",
                path.display()
            ))
            .with_hint("move the file aside and pull the Session again"));
        }
        apply(state, &record, &mut Vec::new())?;
        fsx::remove_staging_dir(&state.sessions_dir().join(format!(".staging-{id}")))?;
        fsx::remove_file(&path)?;
        drop(lock);
    }
    Ok(())
}
