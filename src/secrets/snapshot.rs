//! The runtime's own environment: a snapshot taken at start-up, and the credentials wiped from
//! the original.
//!
//! A tool child gets a filtered environment ([`super::rules`]), but its parent — this
//! process — used to keep every filtered variable in its initial environment block, which
//! `/proc/PID/environ` shows to every process of the same uid (and to root, whatever the uid).
//! So at start-up [`init`]:
//!
//! 1. copies the environment into a snapshot; everything in the crate that needs a variable
//!    reads it from here ([`var_os`], [`vars`]): the model client its key, a `command` provider
//!    its full environment (documented: it is the model client and may need keys), an `exec`
//!    child the filtered copy;
//! 2. overwrites with NUL bytes, in the memory `/proc/self/environ` reads (the original strings
//!    on the initial stack, proc(5) `env_start`..`env_end`), the value of every variable the
//!    tool filter drops and of every model-provider key; [`forget`] does the same for a key
//!    variable the model config names later (`api_key_env`);
//! 3. marks the process non-dumpable (`PR_SET_DUMPABLE 0`), so an unprivileged process of the
//!    same uid can neither open its `/proc` files nor ptrace it.
//!
//! Then it reads `/proc/self/environ` back and refuses to go on (exit 1) if a value it had to
//! wipe is still there: fail closed. Where `/proc` is not mounted there is nothing to read the
//! block through, and the wipe is skipped.
//!
//! Without [`init`] (library use, unit tests) the live process environment is read instead.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::sync::OnceLock;

/// The credentials could not be wiped from the environment block: kxen-agent must not go on
/// (`crate::error::Error` turns it into an internal failure with a hint, exit 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WipeFailed {
    /// The variable whose value is still readable.
    pub name: String,
}

impl std::fmt::Display for WipeFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot remove the value of {} from kxen-agent's own environment \
             (/proc/self/environ); refusing to run tools that could read it",
            self.name
        )
    }
}

type Result<T> = std::result::Result<T, WipeFailed>;

static SNAPSHOT: OnceLock<Vec<(OsString, OsString)>> = OnceLock::new();

/// Every variable of the environment kxen-agent started with (the live environment before
/// [`init`]).
pub(crate) fn vars() -> Vec<(OsString, OsString)> {
    match SNAPSHOT.get() {
        Some(s) => s.clone(),
        None => std::env::vars_os().collect(),
    }
}

/// Whether [`init`] took the snapshot: from then on [`vars`] never changes.
pub(crate) fn is_fixed() -> bool {
    SNAPSHOT.get().is_some()
}

/// One variable of the environment kxen-agent started with.
pub(crate) fn var_os(name: &str) -> Option<OsString> {
    match SNAPSHOT.get() {
        Some(s) => s
            .iter()
            .find(|(n, _)| n.as_os_str() == OsStr::new(name))
            .map(|(_, v)| v.clone()),
        None => std::env::var_os(name),
    }
}

/// Whether the value of `name` must not stay readable in this process's environment block.
fn must_wipe(name: &OsStr, value: &OsStr) -> bool {
    let name = name.to_string_lossy();
    super::rules::is_provider_key_env(&name) || super::rules::looks_sensitive(&name, value)
}

/// Takes the snapshot, wipes credentials from the environment block and makes the process
/// non-dumpable (module docs). Call first thing in `main`, before any thread starts.
#[allow(unsafe_code)] // prctl(PR_SET_DUMPABLE): keep /proc/self/environ and core dumps from others
pub fn init() -> Result<()> {
    SNAPSHOT.get_or_init(|| std::env::vars_os().collect());
    wipe(must_wipe)?;
    // SAFETY: prctl(PR_SET_DUMPABLE, 0) takes no pointers and only changes this process's
    // dumpable flag.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) };
    Ok(())
}

/// Wipes the value of `name` from the environment block: a model-provider key variable the
/// model config named after start-up. Before [`init`] (library use) this does nothing.
pub(crate) fn forget(name: &str) -> Result<()> {
    if SNAPSHOT.get().is_none() {
        return Ok(());
    }
    wipe(|n, _| n == OsStr::new(name))
}

/// The address range of this process's initial environment block (proc(5) fields 50 and 51
/// of `/proc/self/stat`), if `/proc` tells it.
fn environ_block() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after the last ')'.
    let after = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = after.split(' ').collect();
    // fields[0] is field 3.
    let start: usize = fields.get(50 - 3)?.parse().ok()?;
    let end: usize = fields.get(51 - 3)?.parse().ok()?;
    (start != 0 && start < end).then_some((start, end))
}

/// Overwrites with NUL bytes the value of every `NAME=value` entry of the environment block
/// for which `matches` holds, then checks through `/proc/self/environ` that none is left.
#[allow(unsafe_code)] // wipes credentials from the kernel's environment block in place (no std API)
fn wipe(matches: impl Fn(&OsStr, &OsStr) -> bool) -> Result<()> {
    let Some((start, end)) = environ_block() else {
        return Ok(());
    };
    let len = end - start;
    let base = start as *mut u8;
    let mut copy = vec![0u8; len];
    // SAFETY: [start, end) is this process's initial environment block as the kernel reports
    // it: mapped, readable and writable (it lies on the main thread's initial stack) for the
    // life of the process. Nothing in Rust holds a reference into it; libc's `environ` entries
    // point into it as C strings. We copy it out with a plain byte copy …
    unsafe { std::ptr::copy_nonoverlapping(base, copy.as_mut_ptr(), len) };
    let mut to_clear = Vec::new();
    let mut at = 0;
    while at < len {
        let entry_len = copy[at..].iter().position(|&b| b == 0).unwrap_or(len - at);
        let entry = &copy[at..at + entry_len];
        if let Some(eq) = entry.iter().position(|&b| b == b'=') {
            let (name, value) = (OsStr::from_bytes(&entry[..eq]), &entry[eq + 1..]);
            if !value.iter().all(|&b| b == 0) && matches(name, OsStr::from_bytes(value)) {
                to_clear.push((at + eq + 1, at + entry_len));
            }
        }
        at += entry_len + 1;
    }
    for (from, to) in to_clear {
        for offset in from..to {
            // SAFETY: `offset` is inside the block (see above). Only value bytes become NUL, so
            // every `environ` entry stays a valid C string (`NAME=` and an empty value); a
            // concurrent getenv of this very variable could at worst see a shortened value.
            unsafe { base.add(offset).write_volatile(0) };
        }
    }
    verify(&matches)
}

/// Reads `/proc/self/environ` and fails if an entry `matches` still has a value.
fn verify(matches: &impl Fn(&OsStr, &OsStr) -> bool) -> Result<()> {
    let Ok(block) = std::fs::read("/proc/self/environ") else {
        return Ok(());
    };
    for entry in block.split(|&b| b == 0) {
        if let Some(eq) = entry.iter().position(|&b| b == b'=') {
            let (name, value) = (OsStr::from_bytes(&entry[..eq]), &entry[eq + 1..]);
            if !value.is_empty() && matches(name, OsStr::from_bytes(value)) {
                return Err(WipeFailed {
                    name: name.to_string_lossy().into_owned(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_environment_block_is_found() {
        let (start, end) = environ_block().expect("/proc/self/stat has env_start and env_end");
        let shown = std::fs::read("/proc/self/environ").unwrap();
        assert_eq!(end - start, shown.len());
    }
}
