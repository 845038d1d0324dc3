//! Finding and stopping the processes a tool call or a crashed runtime left behind.
//!
//! Why: `exec` runs `sh -c COMMAND` as the leader of its own process group. The group is killed
//! when the command ends, on timeout and on cancel, and the shell dies with the runtime
//! ([`die_with_parent`](super::die_with_parent)) — but a program that left the group (`setsid`)
//! escapes the group kill, and after a SIGKILL of kxen-agent the programs the shell started go on
//! running. An operation whose outcome is UNKNOWN may then be resolved by an operator, which is
//! only sound if nothing of it still runs.
//!
//! How: every `exec` child carries marks in its environment, inherited by everything it starts:
//! [`ATTEMPT_VAR`] (a random id of the runtime process's attempt at the run, recorded in
//! `run.json`) and [`OPERATION_VAR`] (the tool-journal operation), plus the Session and run ids
//! for the command's own use. A `command` model provider carries the attempt mark too.
//! - When an `exec` command ends (by itself, on timeout or on cancel), every process still
//!   carrying the operation's mark is stopped before the outcome is recorded: a daemon started
//!   from `exec` never outlives its call; `run resolve` does the same
//!   before it records an operator's resolution. A cancel that abandons a `command` model call
//!   stops that call's processes ([`MODEL_CALL_VAR`]).
//! - At the start of every execution, under the Session's run lease, the attempts that crashed
//!   (ended without closing their attempt record) have their leftovers stopped, by attempt mark.
//!   An attempt that ended normally is never scanned for, so a daemon a `command` model provider
//!   started on purpose survives later runs; and a random per-attempt mark never matches the live processes
//!   of a copy of the Session in another state dir (an imported bundle keeps the ids). Only the
//!   leftovers of an attempt that crashed *before* the export can be stopped by the importing side
//!   (on the same machine): they are leftovers there too.
//! - MCP servers carry [`MCP_SERVER_VAR`] and the attempt mark: when a server is stopped (run
//!   over, restart after a crash or timeout) what it detached is stopped by the first; after a
//!   SIGKILL of kxen-agent, by the second at the run's next start.
//!
//! Each kill goes through a pidfd that is re-checked for the mark first, so a pid reused between
//! the scan and the kill is never signaled. The mark survives `setsid` and double forks; only a
//! program that clears or overwrites its environment escapes it. Linux only (it reads `/proc`);
//! on other systems nothing is found.

/// The attempt (one runtime process's work on a run) a child belongs to.
pub const ATTEMPT_VAR: &str = "KXEN_ATTEMPT_ID";
/// One model call of a `command` provider (stopped when a cancel abandons the call).
pub const MODEL_CALL_VAR: &str = "KXEN_MODEL_CALL_ID";
/// The tool-journal operation of an `exec` child.
pub const OPERATION_VAR: &str = "KXEN_OPERATION_ID";
/// One MCP server of one kxen-agent process (`<random>.<server>`): what the server detached is
/// stopped when the server is ([`crate::mcp::servers`]).
pub const MCP_SERVER_VAR: &str = "KXEN_MCP_SERVER_ID";
/// One language server of one kxen-agent process (`<random>.<server>`): what the server
/// detached is stopped when the server is ([`crate::lsp::servers`]).
pub const LSP_SERVER_VAR: &str = "KXEN_LSP_SERVER_ID";
/// The Session of an `exec` child (for the command's own use; never a reason to kill).
pub const SESSION_VAR: &str = "KXEN_SESSION_ID";
/// The run of an `exec` child (for the command's own use; never a reason to kill).
pub const RUN_VAR: &str = "KXEN_RUN_ID";

/// How often the scan repeats while it still stops processes (a leftover may fork between the
/// scan and the kill).
const MAX_ROUNDS: usize = 20;

/// A new random attempt mark.
pub fn new_attempt_mark() -> String {
    crate::hash::hex(&crate::ids::random_bytes::<12>())
}

/// SIGKILLs every process whose environment holds `var=value` for one of `values`, except this
/// process and its ancestors. Returns how many processes were stopped.
pub fn stop_marked(var: &str, values: &[&str]) -> usize {
    if values.is_empty() {
        return 0;
    }
    let marks: Vec<Vec<u8>> = values
        .iter()
        .map(|v| format!("{var}={v}").into_bytes())
        .collect();
    let spared = self_and_ancestors();
    let mut stopped = std::collections::BTreeSet::new();
    for _ in 0..MAX_ROUNDS {
        let mut progress = false;
        for pid in marked_processes(&marks) {
            if !spared.contains(&pid) && kill_if_marked(pid, &marks) {
                stopped.insert(pid);
                progress = true;
            }
        }
        if !progress {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    stopped.len()
}

/// SIGKILLs `pid` if it still carries one of `marks`: through a pidfd taken *before* the check,
/// so a process that exits and whose pid is reused afterwards is never the one signaled.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // pidfd_open/pidfd_send_signal: kill a marked orphan without pid reuse races
fn kill_if_marked(pid: i32, marks: &[Vec<u8>]) -> bool {
    // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1; no memory is passed.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return false;
    }
    let fd = fd as i32;
    let still_marked = carries_mark(pid, marks) && !is_zombie(pid);
    // SAFETY: pidfd_send_signal on the fd we own, with no siginfo; close releases it.
    let sent = still_marked
        && unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd,
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        } == 0;
    unsafe {
        libc::close(fd);
    }
    sent
}

#[cfg(not(target_os = "linux"))]
fn kill_if_marked(_pid: i32, _marks: &[Vec<u8>]) -> bool {
    false
}

fn carries_mark(pid: i32, marks: &[Vec<u8>]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|env| {
        env.split(|b| *b == 0)
            .any(|entry| marks.iter().any(|m| entry == m.as_slice()))
    })
}

/// Every live process whose environment holds one of `marks` (`NAME=value` entries). Processes
/// that vanish or cannot be read (another user's) are skipped.
fn marked_processes(marks: &[Vec<u8>]) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| carries_mark(*pid, marks))
        // A zombie keeps its environ readable until reaped; it runs nothing any more.
        .filter(|pid| !is_zombie(*pid))
        .collect()
}

fn is_zombie(pid: i32) -> bool {
    stat_fields(pid).is_some_and(|(state, _)| state == 'Z')
}

/// This process and every ancestor up to init: never killed, even if a user started kxen-agent
/// from inside an `exec` of the same Session.
fn self_and_ancestors() -> Vec<i32> {
    let mut out = Vec::new();
    let mut pid = std::process::id() as i32;
    while pid > 1 && !out.contains(&pid) {
        out.push(pid);
        match stat_fields(pid) {
            Some((_, parent)) => pid = parent,
            None => break,
        }
    }
    out
}

/// `(state, parent pid)` from `/proc/<pid>/stat`. The command name (field 2) may hold spaces and
/// parentheses, so the fields after it are found from its last `)`.
fn stat_fields(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[test]
    fn marked_leftovers_are_stopped_and_others_spared() {
        let ses = new_attempt_mark();
        let other = new_attempt_mark();
        let spawn = |id: &str| {
            // The shell starts a grandchild in the background and exits: the grandchild is the
            // kind of process a crashed runtime leaves behind.
            let mut child = Command::new("/bin/sh")
                .arg("-c")
                .arg("sleep 30 >/dev/null 2>&1 & echo $!")
                .env(ATTEMPT_VAR, id)
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut out = String::new();
            std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
            child.wait().unwrap();
            out.trim().parse::<i32>().unwrap()
        };
        let mine = spawn(&ses);
        let theirs = spawn(&other);
        let alive = |pid: i32| std::fs::metadata(format!("/proc/{pid}")).is_ok() && !is_zombie(pid);
        assert!(alive(mine) && alive(theirs));

        assert_eq!(stop_marked(ATTEMPT_VAR, &[&ses]), 1);
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(mine) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(mine), "the leftover still runs");
        assert!(alive(theirs), "another Session's process was stopped");
        assert_eq!(stop_marked(ATTEMPT_VAR, &[&ses]), 0);
        assert_eq!(stop_marked(ATTEMPT_VAR, &[]), 0);
        // Another variable with the same value is not the mark.
        assert_eq!(stop_marked(OPERATION_VAR, &[&other]), 0);
        assert_eq!(stop_marked(ATTEMPT_VAR, &[&other]), 1);
    }

    #[test]
    fn this_process_is_never_a_leftover() {
        let ancestors = self_and_ancestors();
        assert_eq!(ancestors[0], std::process::id() as i32);
        assert!(ancestors.len() >= 2, "{ancestors:?}");
    }

    #[test]
    fn stat_fields_survive_odd_command_names() {
        let (state, parent) = stat_fields(std::process::id() as i32).unwrap();
        assert!("RSD".contains(state), "{state}");
        assert!(parent > 0);
    }
}
