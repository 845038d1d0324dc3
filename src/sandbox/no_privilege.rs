//! No privilege outlives the fence: a seccomp filter that keeps a fenced command from creating
//! or keeping a setuid or setgid file.
//!
//! Dropping every capability and setting `no_new_privs` stops the command from *using* a
//! privilege, but not from *leaving* one behind: whoever owns a file may `chmod 4755` it, so a
//! command run fenced by root could leave a copy of a shell that is setuid-root, and any local
//! user would be root after the run (a command of `nobody` leaves a setuid-`nobody` one). The
//! kernel keeps a setuid or setgid bit asked for at creation too (`open`/`creat`/`mknod` with
//! mode 04755, or an `O_TMPFILE` linked in later). So every syscall that sets a file's mode from
//! its arguments is refused (`EPERM`) when that mode carries `S_ISUID` or `S_ISGID`:
//!
//! - `chmod`, `fchmod`, `fchmodat`, `fchmodat2`: always (files and directories alike);
//! - `open`, `openat`, `creat`, `mknod`, `mknodat`: when they create (`O_CREAT`, `O_TMPFILE`;
//!   `creat` and `mknod` always do).
//!
//! Syscalls whose mode a filter cannot read (it sits behind a pointer) fail with `ENOSYS`, as if
//! the kernel lacked them, so programs take their fallback: `openat2` (glibc and others fall back
//! to `openat`) and `io_uring_setup` (an `IORING_OP_OPENAT` could create with any mode).
//!
//! What needs no filter, checked on the kernel: `mkdir` drops both bits from the mode it is
//! given; `chown` clears them; writing to a file clears them; `security.capability` (a file
//! capability) needs `CAP_SETFCAP`, which the command no longer holds — the kernel refuses it
//! as root, as an ordinary user, and as root of a user namespace; a `rename` or hard link moves
//! an existing file, it creates no bit (and Landlock's refer right keeps files from outside the
//! writable roots from being linked in).
//!
//! The filter only sees the native syscall table: a syscall of another ABI (i386's `int 0x80`
//! on x86_64, aarch32 on aarch64) kills the process, and x32's numbers fail with `ENOSYS`, so
//! no second table is a way around it.

// Building the filter is plain data; installing it is one prctl in the forked child.
#![allow(unsafe_code)]

use libc::sock_filter;

/// `AUDIT_ARCH_*` of `<linux/audit.h>`: the only architecture whose syscalls are let through.
/// Other architectures have no table here, so their fence cannot be built (a refusal).
#[cfg(target_arch = "x86_64")]
const NATIVE_ARCH: Option<u32> = Some(0xC000_003E);
#[cfg(target_arch = "aarch64")]
const NATIVE_ARCH: Option<u32> = Some(0xC000_00B7);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const NATIVE_ARCH: Option<u32> = None;
/// `fchmodat2` (Linux 6.6) has the same number on every architecture (numbers from 424 on are
/// shared); the libc crate does not name it on every target.
const SYS_FCHMODAT2: libc::c_long = 452;
/// x32 syscalls share x86_64's audit arch and carry this bit in their number.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// The mode bits that hand a privilege to whoever runs the file.
const PRIVILEGE_BITS: u32 = libc::S_ISUID | libc::S_ISGID;
/// `open` flags that create a file (`O_TMPFILE` is `__O_TMPFILE | O_DIRECTORY`; the first is the
/// creating part, and the same value on x86_64 and aarch64).
const CREATING_FLAGS: u32 = (libc::O_CREAT | (libc::O_TMPFILE & !libc::O_DIRECTORY)) as u32;

/// What the filter does with one syscall.
#[derive(Clone, Copy)]
enum Check {
    /// Refuse when argument `mode` has a privilege bit.
    Mode { mode: u32 },
    /// Refuse when argument `flags` creates and argument `mode` has a privilege bit.
    Create { flags: u32, mode: u32 },
    /// Always `ENOSYS`: the mode cannot be inspected.
    Missing,
}

/// The syscalls that set a mode, with where their arguments are.
fn rules() -> Vec<(libc::c_long, Check)> {
    let mut rules = vec![
        (libc::SYS_fchmod, Check::Mode { mode: 1 }),
        (libc::SYS_fchmodat, Check::Mode { mode: 2 }),
        (SYS_FCHMODAT2, Check::Mode { mode: 2 }),
        (libc::SYS_openat, Check::Create { flags: 2, mode: 3 }),
        (libc::SYS_mknodat, Check::Mode { mode: 2 }),
        (libc::SYS_openat2, Check::Missing),
        (libc::SYS_io_uring_setup, Check::Missing),
    ];
    // The older calls only x86_64 still has (aarch64 has only the `*at` forms).
    #[cfg(target_arch = "x86_64")]
    rules.extend([
        (libc::SYS_chmod, Check::Mode { mode: 1 }),
        (libc::SYS_open, Check::Create { flags: 1, mode: 2 }),
        (libc::SYS_creat, Check::Mode { mode: 1 }),
        (libc::SYS_mknod, Check::Mode { mode: 1 }),
    ]);
    rules
}

/// Offsets into `struct seccomp_data` (`nr`, `arch`, then six 64-bit `args`).
const NR: u32 = 0;
const ARCH: u32 = 4;
/// The low 32 bits of argument `i` (modes and flags are 32-bit; the kernel ignores the rest).
fn arg_low(i: u32) -> u32 {
    let low_half = if cfg!(target_endian = "little") { 0 } else { 4 };
    16 + 8 * i + low_half
}

fn stmt(code: u32, k: u32) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u32, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    }
}

const LOAD: u32 = libc::BPF_LD | libc::BPF_W | libc::BPF_ABS;
const JEQ: u32 = libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K;
const JSET: u32 = libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K;
const RET: u32 = libc::BPF_RET | libc::BPF_K;
const ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;

fn errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e as u32 & libc::SECCOMP_RET_DATA)
}

/// The BPF program, built in the parent (the child only installs it).
pub(super) struct Filter {
    program: Vec<sock_filter>,
}

impl Filter {
    /// `Err` on an architecture whose syscall table the filter does not know.
    pub(super) fn new() -> Result<Filter, String> {
        let Some(native_arch) = NATIVE_ARCH else {
            return Err(format!(
                "its seccomp filter against setuid/setgid files knows the syscalls of x86_64 and \
                 aarch64 only, not of {}",
                std::env::consts::ARCH
            ));
        };
        let mut p = vec![
            stmt(LOAD, ARCH),
            jump(JEQ, native_arch, 1, 0),
            stmt(RET, KILL),
            stmt(LOAD, NR),
        ];
        #[cfg(target_arch = "x86_64")]
        p.extend([
            jump(
                libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K,
                X32_SYSCALL_BIT,
                0,
                1,
            ),
            stmt(RET, errno(libc::ENOSYS)),
        ]);
        // One block per syscall: `if nr == N { block } else skip it`. Every block ends in a
        // return, so the accumulator still holds `nr` at the next comparison.
        for (nr, check) in rules() {
            let block = match check {
                Check::Mode { mode } => vec![
                    stmt(LOAD, arg_low(mode)),
                    jump(JSET, PRIVILEGE_BITS, 0, 1),
                    stmt(RET, errno(libc::EPERM)),
                    stmt(RET, ALLOW),
                ],
                Check::Create { flags, mode } => vec![
                    stmt(LOAD, arg_low(flags)),
                    jump(JSET, CREATING_FLAGS, 0, 3),
                    stmt(LOAD, arg_low(mode)),
                    jump(JSET, PRIVILEGE_BITS, 0, 1),
                    stmt(RET, errno(libc::EPERM)),
                    stmt(RET, ALLOW),
                ],
                Check::Missing => vec![stmt(RET, errno(libc::ENOSYS))],
            };
            p.push(jump(JEQ, nr as u32, 0, block.len() as u8));
            p.extend(block);
        }
        p.push(stmt(RET, ALLOW));
        Ok(Filter { program: p })
    }

    /// Installs the filter on the calling thread (in the forked child, after `no_new_privs`,
    /// which an unprivileged process needs for it). Inherited by everything the command starts,
    /// and never removable. Async-signal-safe: one prctl on memory built before the fork.
    pub(super) fn install(&self) -> Result<(), i32> {
        let prog = libc::sock_fprog {
            len: self.program.len() as u16,
            filter: self.program.as_ptr().cast_mut(),
        };
        // SAFETY: the kernel copies the program out of `prog`, which lives for the call.
        let rc = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
                0,
                0,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        }
    }
}

#[cfg(test)]
mod tests {
    //! The filter alone, in a plain forked child (no fence around it): each syscall with and
    //! without a privilege bit.

    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    /// Forks; the child sets `no_new_privs`, installs the filter, runs `body` and exits with its
    /// result. Returns the child's wait status. The child makes only raw syscalls.
    fn in_filtered_child(body: impl FnOnce() -> i32) -> i32 {
        let filter = Filter::new().unwrap();
        // SAFETY: the child makes only syscalls (no allocation, no lock) and leaves by _exit.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                let code = if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                    || filter.install().is_err()
                {
                    100
                } else {
                    body()
                };
                libc::_exit(code);
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            status
        }
    }

    /// The child's exit code (it must have exited, not been killed).
    fn exit_code(status: i32) -> i32 {
        assert!(libc::WIFEXITED(status), "the child was killed: {status:#x}");
        libc::WEXITSTATUS(status)
    }

    fn last_errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    fn mode_of(path: &CString) -> u32 {
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: stat into a zeroed struct of ours.
        assert_eq!(unsafe { libc::stat(path.as_ptr(), &mut st) }, 0);
        st.st_mode & 0o7777
    }

    #[test]
    fn privilege_bits_are_refused_and_plain_modes_pass() {
        let dir = tempfile::tempdir().unwrap();
        let c = |name: &str| CString::new(dir.path().join(name).as_os_str().as_bytes()).unwrap();
        let (file, made, node, sub) = (c("f"), c("made"), c("node"), c("d"));
        std::fs::write(dir.path().join("f"), "x").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        let status = in_filtered_child(|| {
            // 0 when the call succeeded, else its errno, read right after the call.
            let r = |rc: libc::c_long| if rc < 0 { last_errno() } else { 0 };
            let at = libc::AT_FDCWD;
            let (create, tmpfile) = (
                libc::O_CREAT | libc::O_WRONLY,
                libc::O_TMPFILE | libc::O_WRONLY,
            );
            use libc::{SYS_fchmodat as FCHMODAT, SYS_openat as OPENAT, syscall};
            // SAFETY (all): raw syscalls on NUL-terminated paths prepared before the fork.
            let checks = unsafe {
                #[cfg(target_arch = "x86_64")]
                let x32_chmod = (
                    r(syscall(
                        X32_SYSCALL_BIT as libc::c_long | 90,
                        file.as_ptr(),
                        0o4755,
                    )),
                    libc::ENOSYS,
                );
                #[cfg(not(target_arch = "x86_64"))]
                let x32_chmod = (0, 0);
                [
                    (r(syscall(FCHMODAT, at, file.as_ptr(), 0o4755)), libc::EPERM),
                    (r(syscall(FCHMODAT, at, file.as_ptr(), 0o2755)), libc::EPERM),
                    (r(syscall(FCHMODAT, at, sub.as_ptr(), 0o2775)), libc::EPERM),
                    (
                        r(syscall(SYS_FCHMODAT2, at, file.as_ptr(), 0o4700, 0)),
                        libc::EPERM,
                    ),
                    (r(syscall(FCHMODAT, at, file.as_ptr(), 0o1755)), 0),
                    (r(syscall(FCHMODAT, at, file.as_ptr(), 0o755)), 0),
                    (
                        r(syscall(OPENAT, at, made.as_ptr(), create, 0o4755)),
                        libc::EPERM,
                    ),
                    (
                        r(syscall(OPENAT, at, sub.as_ptr(), tmpfile, 0o2755)),
                        libc::EPERM,
                    ),
                    // Without O_CREAT the mode is not looked at (the kernel ignores it too).
                    (
                        r(syscall(OPENAT, at, file.as_ptr(), libc::O_RDONLY, 0o4755)),
                        0,
                    ),
                    (r(syscall(OPENAT, at, made.as_ptr(), create, 0o755)), 0),
                    (
                        r(syscall(
                            libc::SYS_mknodat,
                            at,
                            node.as_ptr(),
                            libc::S_IFREG | 0o4755,
                            0,
                        )),
                        libc::EPERM,
                    ),
                    (
                        r(syscall(
                            libc::SYS_openat2,
                            at,
                            file.as_ptr(),
                            0usize,
                            0usize,
                        )),
                        libc::ENOSYS,
                    ),
                    (
                        r(syscall(libc::SYS_io_uring_setup, 1u32, 0usize)),
                        libc::ENOSYS,
                    ),
                    x32_chmod,
                ]
            };
            match checks.iter().position(|(got, want)| got != want) {
                Some(i) => 1 + i as i32,
                None => 0,
            }
        });
        assert_eq!(
            exit_code(status),
            0,
            "the check numbered here (1-based) failed"
        );
        assert_eq!(mode_of(&file), 0o755);
        assert_eq!(mode_of(&made) & PRIVILEGE_BITS, 0);
        assert!(!dir.path().join("node").exists());
    }

    /// i386's `int 0x80` from a 64-bit process reaches another syscall table (where chmod is 15
    /// and `getpid`, harmless, is 20); the filter kills the process before any of it runs.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_syscall_of_another_abi_kills_the_process() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        let status = in_filtered_child(|| {
            // SAFETY: i386 getpid takes no argument and touches no memory.
            unsafe {
                std::arch::asm!("int 0x80", inlateout("eax") 20 => _);
            }
            0
        });
        assert!(libc::WIFSIGNALED(status), "{status:#x}");
        assert_eq!(libc::WTERMSIG(status), libc::SIGSYS);
    }
}
