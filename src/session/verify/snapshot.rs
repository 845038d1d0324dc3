//! A consistent snapshot of a Session that a run may be writing while it is read.
//!
//! The runner changes a Session one durable step at a time (an append to `messages.jsonl` or a
//! journal, an atomic replace of a `run.json`), and the state between any two steps is one a
//! crash could leave, which verification accepts. Reading the files one after the other while
//! the runner writes could combine a message log from before a step with a journal from after
//! it — a tool message whose operation seems missing — and report damage that is not there.
//!
//! So verification first captures every file's extent: the length of each append-only file
//! and the bytes of each `run.json` (small, replaced whole). It captures twice and keeps the
//! capture only if both agree: append-only files only grow and a replace changes the bytes, so
//! nothing changed in between, and at an instant between the two captures the files were
//! exactly as captured. The chained files are then read only up to their captured length
//! (whatever the runner appends meanwhile is not looked at; a line being appended at that
//! instant is a torn tail, which is ignored). No lock is taken: the runner is never held up.

use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::state::SessionPaths;

/// The extent of every file of a Session at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Snapshot {
    /// Length of `messages.jsonl` (`None`: absent).
    pub messages: Option<u64>,
    /// The run directories (as [`super::run_ids`] lists them), or `None` when listing them
    /// failed (the error is reported in its turn, after the messages).
    pub runs: Option<Vec<RunExtent>>,
}

/// One run at the instant of the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RunExtent {
    pub id: String,
    /// The bytes of `run.json` (`None`: absent).
    pub run_json: Option<Vec<u8>>,
    /// Length of `journal.jsonl` (`None`: absent).
    pub journal: Option<u64>,
}

/// How many pairs of captures to try before giving up.
const ATTEMPTS: u32 = 400;

/// Captures a snapshot that two consecutive captures agree on.
pub(super) fn stable(paths: &SessionPaths) -> Result<Snapshot> {
    let mut last = capture(paths)?;
    for attempt in 0..ATTEMPTS {
        let next = capture(paths)?;
        if next == last {
            return Ok(next);
        }
        last = next;
        // A runner writes in bursts (a tool call's records); back off a little between tries.
        std::thread::sleep(Duration::from_micros(200 * u64::from(attempt.min(25))));
    }
    Err(Error::conflict(format!(
        "{} changed during every attempt to read it consistently (a run is writing to it)",
        paths.dir.display()
    ))
    .with_hint("retry, or verify once the run has finished"))
}

fn capture(paths: &SessionPaths) -> Result<Snapshot> {
    let messages = length(&paths.messages())?;
    let runs = match super::run_ids(paths) {
        Ok(ids) => {
            let mut runs = Vec::with_capacity(ids.len());
            for id in ids {
                let run = paths.run(&id);
                runs.push(RunExtent {
                    run_json: bytes(&run.run_json())?,
                    journal: length(&run.journal())?,
                    id,
                });
            }
            Some(runs)
        }
        Err(_) => None,
    };
    Ok(Snapshot { messages, runs })
}

fn length(path: &Path) -> Result<Option<u64>> {
    match std::fs::metadata(path) {
        Ok(meta) => Ok(Some(meta.len())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", path, e)),
    }
}

fn bytes(path: &Path) -> Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io("read", path, e)),
    }
}
