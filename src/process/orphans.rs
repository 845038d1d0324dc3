//! Finding and stopping the processes a crashed runtime left behind.
//!
//! Why: `exec` runs `sh -c COMMAND` as the leader of its own process group, and the shell dies
//! with the runtime ([`die_with_parent`](super::die_with_parent)), but the programs the shell
//! started (`python3 …`, `make` and its compilers) do not: after a SIGKILL of kxen-agent they may
//! go on changing the workspace. The operation is recorded as UNKNOWN at the next start, and an
//! operator may then resolve it — which is only sound if nothing of it still runs.
//!
//! How: every `exec` child carries [`SESSION_VAR`]`=<session id>` (and the run and operation ids)
//! in its environment, which its descendants inherit; so does a `command` model provider. At the start of every execution, under the
//! Session's run lease — so no live runtime of this Session exists — every process carrying the
//! Session's mark is a leftover and is SIGKILLed. The mark survives `setsid` and double forks;
//! only a program that clears its environment escapes it. Linux only (it reads `/proc`); on other
//! systems nothing is found.

/// Names the Session an `exec` child belongs to (inherited by everything it starts).
pub const SESSION_VAR: &str = "KXEN_SESSION_ID";
/// Names the run of that `exec` child.
pub const RUN_VAR: &str = "KXEN_RUN_ID";
/// Names the tool-journal operation of that `exec` child.
pub const OPERATION_VAR: &str = "KXEN_OPERATION_ID";

/// How often the scan repeats while it still finds processes (a leftover may fork between the
/// scan and the kill).
const MAX_ROUNDS: usize = 20;

/// SIGKILLs every process that carries `KXEN_SESSION_ID=<session_id>`, except this process and
/// its ancestors. Returns how many processes were stopped. The caller must hold the Session's
/// run lease.
pub fn stop_leftovers(session_id: &str) -> usize {
    let mark = format!("{SESSION_VAR}={session_id}");
    let spared = self_and_ancestors();
    let mut stopped = std::collections::BTreeSet::new();
    for _ in 0..MAX_ROUNDS {
        let found: Vec<i32> = marked_processes(mark.as_bytes())
            .into_iter()
            .filter(|pid| !spared.contains(pid))
            .collect();
        if found.is_empty() {
            break;
        }
        for pid in found {
            // SAFETY: kill has no memory-safety preconditions; a pid that is gone only fails.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            stopped.insert(pid);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    stopped.len()
}

/// Every live process whose environment holds exactly the entry `mark` (`NAME=value`).
/// Processes that vanish or cannot be read (another user's) are skipped.
fn marked_processes(mark: &[u8]) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|entry| entry == mark))
        })
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
    fn leftovers_of_one_session_are_stopped_and_others_spared() {
        let ses = crate::ids::new_id(crate::ids::IdKind::Session);
        let other = crate::ids::new_id(crate::ids::IdKind::Session);
        let spawn = |id: &str| {
            // The shell starts a grandchild in the background and exits: the grandchild is the
            // kind of process a crashed runtime leaves behind.
            let mut child = Command::new("/bin/sh")
                .arg("-c")
                .arg("sleep 30 >/dev/null 2>&1 & echo $!")
                .env(SESSION_VAR, id)
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

        assert_eq!(stop_leftovers(&ses), 1);
        let deadline = Instant::now() + Duration::from_secs(5);
        while alive(mine) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!alive(mine), "the leftover still runs");
        assert!(alive(theirs), "another Session's process was stopped");
        assert_eq!(stop_leftovers(&ses), 0);
        assert_eq!(stop_leftovers(&other), 1);
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
