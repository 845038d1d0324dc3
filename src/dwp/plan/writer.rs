//! The one way an event enters a plan journal.
//!
//! [`append_with`] takes the plan's writer lock, reads and validates the whole journal, lets the
//! caller decide on that exact state (dedup, conflicts), stamps the next seq, validates the new
//! event like any read event, writes one compact canonical line and fsyncs it
//! (`fsx::append_line`). A live file whose last event lacks its newline gets one first; one
//! whose last line does not parse (torn) is truncated and a `journal_repair` recorded. Deciding under the lock is what makes "settle exactly once" hold
//! between two concurrent `dwp` processes.
//!
//! Locking and the reference tooling: the Python ledger serializes writers with a *directory*
//! lock, `<plan>/.ledger.lock/` holding `owner.json`. We take an OS file lock on
//! `<plan>/.dwp-writer.lock` (released by the kernel when a process dies, so it never goes
//! stale) and, while holding it, refuse to write when a `.ledger.lock/` directory exists: a
//! foreign writer is at work (or died holding it, which its owner.json explains). What we do not
//! do is create `.ledger.lock/` ourselves, so a reference writer that starts after our check is
//! not excluded by us; running both tools' writers on one plan at the same moment is unsupported.

use std::path::Path;
use std::time::Duration;

use serde_json::{Map, Value};

use super::contract::Contract;
use super::folder::Plan;
use super::journal::{self, Event, Journal, Validator};
use crate::error::{Error, Result};
use crate::fsx::failpoint;
use crate::fsx::{FileLock, LockWait};

/// Our writer lock file inside the plan folder.
pub const LOCK_FILE: &str = ".dwp-writer.lock";
/// The reference tooling's directory lock.
pub const FOREIGN_LOCK_DIR: &str = ".ledger.lock";

/// How long an append waits for another `dwp` writer of the same plan.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// An event to append, without envelope fields the writer owns (`schema`, `seq`, `plan`,
/// `contract_id`).
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub kind: String,
    pub actor_kind: String,
    pub actor_identity: String,
    pub ts: String,
    pub payload: Map<String, Value>,
}

/// What the caller decided after seeing the journal under the lock.
pub enum Decision {
    /// Append this event.
    Append(NewEvent),
    /// Append nothing; report this existing event instead (an identical replay).
    Existing(Event),
}

/// Appends one event. Returns the written event (with its seq).
pub fn append(plan: &Plan, contract: &Contract, event: NewEvent) -> Result<Event> {
    append_with(plan, contract, |_| {}, |_| Ok(Decision::Append(event))).map(|(e, _)| e)
}

/// Appends the event `decide` returns for the journal as it stands under the writer lock.
/// Returns the event and whether it was newly written. `on_wait` is told (once) when another
/// writer holds the lock, so the CLI can say what it waits for.
pub fn append_with(
    plan: &Plan,
    contract: &Contract,
    on_wait: impl FnOnce(&Path),
    decide: impl FnOnce(&Journal) -> Result<Decision>,
) -> Result<(Event, bool)> {
    let _lock = lock(plan, on_wait)?;
    let live = plan.dir.join(journal::LIVE_FILE);
    let journal = read_for_append(plan, contract, &live)?;
    match decide(&journal)? {
        Decision::Existing(event) => Ok((event, false)),
        Decision::Append(new) => write(&live, contract, &journal, new).map(|e| (e, true)),
    }
}

/// Takes the plan's writer lock and refuses a foreign writer's lock directory.
fn lock(plan: &Plan, on_wait: impl FnOnce(&Path)) -> Result<FileLock> {
    let lock_path = plan.dir.join(LOCK_FILE);
    let lock = FileLock::exclusive(
        &lock_path,
        LockWait::Up(LOCK_WAIT),
        "the plan's writer lock",
        on_wait,
    )?;
    refuse_foreign_writer(&plan.dir)?;
    Ok(lock)
}

/// Reads and validates the whole journal under the writer lock and makes its end appendable: a
/// missing last newline is added, a torn last line truncated (and a `journal_repair` recorded).
fn read_for_append(plan: &Plan, contract: &Contract, live: &Path) -> Result<Journal> {
    let mut journal = journal::read(&plan.dir, contract)?;
    if let Some(len) = journal.unterminated.take() {
        // A complete last event without its newline is kept: end its line, as the reference
        // writer does, so the next line is not glued to it. Only an unparsable tail is torn.
        crate::fsx::terminate_last_line(live, len)?;
        failpoint::hit("dwp.append.after-newline");
    }
    if let Some(tail) = journal.torn_tail.take() {
        // Appending after a torn line would bury it mid-file, where it is corruption.
        crate::fsx::repair_torn_tail(live, &tail)?;
        let mut payload = Map::new();
        payload.insert("byte_offset".into(), Value::from(tail.offset));
        payload.insert(
            "cause".into(),
            Value::from("torn last line from an interrupted append, truncated before writing"),
        );
        let repair = NewEvent {
            kind: "journal_repair".into(),
            actor_kind: "helper".into(),
            actor_identity: "dwp".into(),
            ts: crate::clock::format_seconds(crate::clock::now_millis().div_euclid(1000)),
            payload,
        };
        let event = write(live, contract, &journal, repair)?;
        journal.events.push(event);
    }
    Ok(journal)
}

/// A plan journal read once and kept in step with the appends made through it, for a writer
/// that appends many times (the kxen-agent host meter: one append per model call on a journal
/// of any length). When the live file changed since this process last read or wrote it, only
/// what was appended since is read, if the file is the same one and merely grew by whole valid
/// lines (another writer's appends); anything else (a roll, a replaced or repaired file, a torn
/// tail) reads the whole journal again. Otherwise the events in memory are the journal, because
/// every writer holds the lock.
pub struct Tracked {
    pub journal: Journal,
    /// The live file as this process last saw it; `None` forces a re-read.
    stamp: Option<Stamp>,
    /// How many times the whole journal was read (1 after [`Tracked::read`]): a consumer that
    /// folds the events incrementally starts over when this changes.
    pub full_reads: u64,
}

/// What tells a live file changed: length, identity and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    dev: u64,
    ino: u64,
    mtime_ns: i128,
}

fn stamp(live: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(live).ok()?;
    Some(Stamp {
        len: m.len(),
        dev: m.dev(),
        ino: m.ino(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    })
}

impl Tracked {
    /// Reads and validates the whole journal (no lock: readers never need one).
    pub fn read(plan: &Plan, contract: &Contract) -> Result<Tracked> {
        let mut tracked = Tracked {
            journal: Journal::default(),
            stamp: None,
            full_reads: 0,
        };
        tracked.read_all(plan, contract)?;
        Ok(tracked)
    }

    fn read_all(&mut self, plan: &Plan, contract: &Contract) -> Result<()> {
        let live = plan.dir.join(journal::LIVE_FILE);
        let before = stamp(&live);
        let journal = journal::read(&plan.dir, contract)?;
        // A write between the two looks means the events may miss it: read again next time.
        let after = stamp(&live);
        let clean = journal.torn_tail.is_none() && journal.unterminated.is_none();
        self.journal = journal;
        self.stamp = (before == after && clean).then_some(after).flatten();
        self.full_reads += 1;
        Ok(())
    }

    /// Brings the events up to the live file: nothing when it did not change, the appended
    /// lines when it only grew, else a whole read. True if it changed.
    pub fn refresh(&mut self, plan: &Plan, contract: &Contract) -> Result<bool> {
        let live = plan.dir.join(journal::LIVE_FILE);
        let now = stamp(&live);
        if self.stamp.is_some() && self.stamp == now {
            return Ok(false);
        }
        if !self.read_grown(plan, contract, now)? {
            self.read_all(plan, contract)?;
        }
        Ok(true)
    }

    /// Reads only what was appended to the same live file since the stamp; false when that is
    /// not possible (no stamp, another file, a shorter one, or not whole valid lines).
    fn read_grown(&mut self, plan: &Plan, contract: &Contract, now: Option<Stamp>) -> Result<bool> {
        let (Some(was), Some(now)) = (self.stamp, now) else {
            return Ok(false);
        };
        if (was.dev, was.ino) != (now.dev, now.ino) || now.len <= was.len {
            return Ok(false);
        }
        match journal::read_appended(&plan.dir, contract, &self.journal, was.len, now.len)? {
            Some(events) => {
                self.journal.events.extend(events);
                self.stamp = Some(now);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Appends the events `decide` returns for the journal as it stands under the writer lock, all
/// with one write and one fsync (a group commit: a crash leaves a prefix of them, the last one
/// possibly torn, which the next append repairs). Returns the events written (none when `decide`
/// returns none). `tracked` is re-read under the lock only when the live file changed since
/// this process last saw it, and then holds the appended events too.
pub fn append_tracked(
    plan: &Plan,
    contract: &Contract,
    tracked: &mut Tracked,
    on_wait: impl FnOnce(&Path),
    decide: impl FnOnce(&Journal) -> Result<Vec<NewEvent>>,
) -> Result<Vec<Event>> {
    let _lock = lock(plan, on_wait)?;
    let live = plan.dir.join(journal::LIVE_FILE);
    let now = stamp(&live);
    if (tracked.stamp.is_none() || tracked.stamp != now)
        && !tracked.read_grown(plan, contract, now)?
    {
        tracked.journal = read_for_append(plan, contract, &live)?;
        tracked.stamp = stamp(&live);
        tracked.full_reads += 1;
    }
    let news = decide(&tracked.journal)?;
    if news.is_empty() {
        return Ok(Vec::new());
    }
    let mut validator = Validator::new(contract);
    validator.resume_after(tracked.journal.events.last().map_or(0, |e| e.seq));
    let mut lines = Vec::with_capacity(news.len());
    let mut events = Vec::with_capacity(news.len());
    for (seq, new) in (tracked.journal.next_seq()..).zip(news) {
        let (line, event) = stamped(&live, contract, &mut validator, seq, new)?;
        lines.push(line);
        events.push(event);
    }
    failpoint::hit("dwp.append.before-write");
    // Whatever happens now, the next append looks at the file again.
    tracked.stamp = None;
    crate::fsx::append_lines(&live, &lines)?;
    failpoint::hit("dwp.append.after-write");
    tracked.journal.events.extend(events.iter().cloned());
    tracked.stamp = stamp(&live);
    Ok(events)
}

fn refuse_foreign_writer(dir: &Path) -> Result<()> {
    let foreign = dir.join(FOREIGN_LOCK_DIR);
    if foreign.is_dir() {
        let owner = std::fs::read_to_string(foreign.join("owner.json")).unwrap_or_default();
        return Err(Error::conflict(format!(
            "another DWP writer holds {} (owner: {})",
            foreign.display(),
            if owner.trim().is_empty() {
                "unknown"
            } else {
                owner.trim()
            }
        ))
        .with_hint(
            "wait for the DWP ledger to finish; if its process is gone, remove the .ledger.lock \
             directory after checking owner.json",
        ));
    }
    Ok(())
}

fn write(live: &Path, contract: &Contract, journal: &Journal, new: NewEvent) -> Result<Event> {
    let mut validator = Validator::new(contract);
    validator.resume_after(journal.events.last().map_or(0, |e| e.seq));
    let (line, event) = stamped(live, contract, &mut validator, journal.next_seq(), new)?;
    failpoint::hit("dwp.append.before-write");
    crate::fsx::append_line(live, &line)?;
    failpoint::hit("dwp.append.after-write");
    Ok(event)
}

/// The canonical line of `new` as event `seq`, validated like any read event.
fn stamped(
    live: &Path,
    contract: &Contract,
    validator: &mut Validator,
    seq: u64,
    new: NewEvent,
) -> Result<(String, Event)> {
    let mut map = Map::new();
    map.insert(
        "schema".into(),
        Value::from(contract.generation.journal_schema()),
    );
    map.insert("type".into(), Value::from(new.kind.as_str()));
    map.insert("seq".into(), Value::from(seq));
    map.insert("ts".into(), Value::from(new.ts.as_str()));
    map.insert("plan".into(), Value::from(contract.plan.as_str()));
    map.insert("contract_id".into(), Value::from(contract.id.as_str()));
    let mut actor = Map::new();
    actor.insert("kind".into(), Value::from(new.actor_kind.as_str()));
    actor.insert("identity".into(), Value::from(new.actor_identity.as_str()));
    map.insert("actor".into(), Value::Object(actor));
    for (k, v) in new.payload {
        map.insert(k, v);
    }
    let value = Value::Object(map);
    let line = crate::canonical::to_compact(&value);
    let event = validator.event(value).map_err(|problem| {
        Error::failed(format!(
            "refusing to append an invalid {} event to {}: {problem}",
            new.kind,
            live.display()
        ))
    })?;
    Ok((line, event))
}

#[cfg(test)]
mod tests;
