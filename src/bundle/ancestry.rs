//! Whether one copy of a Session is an ancestor of another: "the same records, plus more".
//!
//! A Session's history is its append-only files: the message log and each run's journal. Copy
//! A is an ancestor of copy B when every run of A is in B and each of A's append-only files is a
//! byte prefix of B's (each file's complete prefix: a torn last line is a crash's leftover, not a
//! record). `session.json` and `run.json` are current-state files rewritten in place; they follow
//! the records and are not compared.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};
use crate::session::verify::Verified;
use crate::state::SessionPaths;

/// How a local copy relates to an incoming one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relation {
    /// The same records.
    Same,
    /// The incoming copy holds every local record and more: a fast-forward.
    RemoteAhead,
    /// The local copy holds every incoming record and more (names the first such file).
    LocalAhead(String),
    /// Each holds records the other lacks (names the first file where they differ).
    Diverged(String),
}

/// Compares the local copy (`local`, verified in place) with the incoming one (`incoming`,
/// verified strictly).
pub fn compare(
    local_paths: &SessionPaths,
    local: &Verified,
    incoming_paths: &SessionPaths,
    incoming: &Verified,
) -> Result<Relation> {
    let mut local_more: Option<String> = None;
    let mut incoming_more: Option<String> = None;
    let mut files: Vec<(String, std::path::PathBuf, std::path::PathBuf)> = Vec::new();
    for run in &local.runs {
        if !incoming.runs.contains(run) {
            local_more.get_or_insert_with(|| format!("run {run}"));
            continue;
        }
        files.push((
            format!("run {run}"),
            local_paths.run(run).journal(),
            incoming_paths.run(run).journal(),
        ));
    }
    for run in &incoming.runs {
        if !local.runs.contains(run) {
            incoming_more.get_or_insert_with(|| format!("run {run}"));
        }
    }
    if let (Some(here), Some(there)) = (&local_more, &incoming_more) {
        return Ok(Relation::Diverged(format!(
            "{here} (only here) and {there} (only in the incoming copy)"
        )));
    }
    // Runs first, so a divergence is named by its run; the message log last.
    files.push((
        "the message log".to_string(),
        local_paths.messages(),
        incoming_paths.messages(),
    ));
    for (what, a, b) in files {
        let a_len = local
            .complete_lengths
            .get(&a)
            .copied()
            .unwrap_or_else(|| len(&a));
        let b_len = incoming
            .complete_lengths
            .get(&b)
            .copied()
            .unwrap_or_else(|| len(&b));
        if !same_prefix(&a, &b, a_len.min(b_len))? {
            return Ok(Relation::Diverged(what));
        }
        if a_len > b_len {
            local_more.get_or_insert_with(|| what.clone());
        } else if b_len > a_len {
            incoming_more.get_or_insert(what);
        }
    }
    Ok(match (local_more, incoming_more) {
        (None, None) => Relation::Same,
        (None, Some(_)) => Relation::RemoteAhead,
        (Some(what), None) => Relation::LocalAhead(what),
        (Some(what), Some(_)) => Relation::Diverged(what),
    })
}

/// The length of a file that may not exist (a run without a journal yet).
fn len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// Whether the first `n` bytes of `a` and `b` are equal (a missing file is empty).
fn same_prefix(a: &Path, b: &Path, n: u64) -> Result<bool> {
    if n == 0 {
        return Ok(true);
    }
    let open = |p: &Path| File::open(p).map_err(|e| Error::io("read", p, e));
    let (mut fa, mut fb) = (open(a)?.take(n), open(b)?.take(n));
    let mut ba = vec![0u8; 1 << 16];
    let mut bb = vec![0u8; 1 << 16];
    loop {
        let ra = read_full(&mut fa, &mut ba, a)?;
        let rb = read_full(&mut fb, &mut bb, b)?;
        if ra != rb || ba[..ra] != bb[..rb] {
            return Ok(false);
        }
        if ra == 0 {
            return Ok(true);
        }
    }
}

fn read_full(r: &mut impl Read, buf: &mut [u8], path: &Path) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("read", path, e)),
        }
    }
    Ok(n)
}
