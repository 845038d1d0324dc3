//! The child side of the fence: the syscalls made between `fork` and `exec`.
//!
//! Only async-signal-safe work happens there (the parent may have other threads holding the
//! allocator's lock): every path is a prepared `CString`, every buffer is built before the fork,
//! and each step is one syscall. A failing step writes `[step, index, errno]` to the report pipe
//! (close-on-exec: it reads end-of-file when the command started) and fails the spawn, so the
//! parent can say exactly what could not be built.

// The forked child's setup before exec (namespaces, rlimits, Landlock, seccomp) is libc calls
// from a pre_exec hook: every function here is unsafe by nature, each block says its SAFETY.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// The steps, as reported.
const STEP_UNSHARE: u8 = 1;
const STEP_USERNS: u8 = 2;
const STEP_ID_MAP: u8 = 3;
const STEP_PRIVATE: u8 = 4;
const STEP_PIN: u8 = 5;
const STEP_READ_ONLY: u8 = 6;
const STEP_NO_NEW_PRIVS: u8 = 7;
const STEP_LANDLOCK: u8 = 8;
const STEP_READ_ONLY_ROOT: u8 = 9;
const STEP_WRITABLE: u8 = 10;
const STEP_CHDIR: u8 = 11;
const STEP_CAPS: u8 = 12;
const STEP_NO_PRIVILEGE: u8 = 13;

/// `struct mount_attr` of mount_setattr(2).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}
const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// `struct __user_cap_header_struct` / `__user_cap_data_struct` of capset(2), version 3.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Everything the child needs, prepared in the parent.
pub(super) struct Plan {
    ruleset: OwnedFd,
    report: std::io::PipeWriter,
    /// `CLONE_NEWNS`, and `CLONE_NEWNET` without the network.
    namespaces: libc::c_int,
    /// Bound onto themselves and made writable again after the whole tree was made read-only.
    writable: Vec<CString>,
    /// The command's working directory, entered again once the mounts are in place (the one
    /// `Command` entered before is on the read-only tree below a writable bind).
    cwd: Option<CString>,
    /// The highest capability number of this kernel (`/proc/sys/kernel/cap_last_cap`).
    last_cap: libc::c_ulong,
    /// Not root: the namespaces need a user namespace of our own (root tries without first).
    user_namespace_first: bool,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    /// Bound onto themselves (read-write): a mount point cannot be renamed or removed, so a
    /// command cannot move `.git` aside and put a writable copy in its place.
    pinned: Vec<CString>,
    read_only: Vec<CString>,
    /// The seccomp filter that keeps setuid/setgid bits out ([`super::no_privilege`]).
    no_privilege: super::no_privilege::Filter,
    /// Test builds: behave as if the kernel refused new namespaces.
    simulate_no_namespaces: bool,
}

fn c_path(p: &std::path::Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| format!("the path {} contains a NUL byte", p.display()))
}

impl Plan {
    pub(super) fn new(
        ruleset: OwnedFd,
        no_network: bool,
        writable: &[PathBuf],
        pinned: &[PathBuf],
        read_only: &[PathBuf],
    ) -> Result<(std::io::PipeReader, Plan), String> {
        let (reader, report) =
            std::io::pipe().map_err(|e| format!("a report pipe could not be created ({e})"))?;
        // Non-blocking: a spawn that failed for another reason leaves the pipe empty, and our
        // own copy of the write end may still be open when the report is read.
        // SAFETY: fcntl on a descriptor we own.
        unsafe {
            let fd = reader.as_raw_fd();
            let flags = libc::fcntl(fd, libc::F_GETFL);
            libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
        }
        // Always a mount namespace: the whole tree is read-only in it (see `bind_mounts`).
        let mut namespaces = libc::CLONE_NEWNS;
        if no_network {
            namespaces |= libc::CLONE_NEWNET;
        }
        let last_cap = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(63);
        // SAFETY: these getters have no preconditions.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        Ok((
            reader,
            Plan {
                ruleset,
                report,
                namespaces,
                writable: writable
                    .iter()
                    .map(|p| c_path(p))
                    .collect::<Result<_, _>>()?,
                cwd: None,
                last_cap,
                user_namespace_first: euid != 0,
                uid_map: format!("{euid} {euid} 1\n").into_bytes(),
                gid_map: format!("{egid} {egid} 1\n").into_bytes(),
                pinned: pinned.iter().map(|p| c_path(p)).collect::<Result<_, _>>()?,
                read_only: read_only
                    .iter()
                    .map(|p| c_path(p))
                    .collect::<Result<_, _>>()?,
                no_privilege: super::no_privilege::Filter::new()?,
                simulate_no_namespaces: super::simulated_missing("namespaces"),
            },
        ))
    }

    pub(super) fn install(mut self, cmd: &mut Command) {
        let cwd = match cmd.get_current_dir() {
            Some(dir) if dir.is_absolute() => Some(dir.to_path_buf()),
            Some(dir) => std::env::current_dir().ok().map(|c| c.join(dir)),
            None => std::env::current_dir().ok(),
        };
        self.cwd = cwd.and_then(|c| c_path(&c).ok());
        // SAFETY: `enter` makes only async-signal-safe syscalls on memory prepared before the
        // fork (see the module docs); it allocates nothing and takes no lock.
        unsafe {
            cmd.pre_exec(move || self.enter());
        }
    }

    /// Runs in the forked child.
    fn enter(&self) -> std::io::Result<()> {
        self.enter_namespaces()?;
        self.bind_mounts()?;
        if let Some(cwd) = &self.cwd {
            // SAFETY: chdir of a NUL-terminated path owned by `self`.
            if unsafe { libc::chdir(cwd.as_ptr()) } != 0 {
                return self.fail(STEP_CHDIR, 0);
            }
        }
        self.drop_capabilities()?;
        self.close_inherited_fds()?;
        // SAFETY (both): plain syscalls on integers.
        if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
            return self.fail(STEP_NO_NEW_PRIVS, 0);
        }
        let fd = self.ruleset.as_raw_fd();
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) } != 0 {
            return self.fail(STEP_LANDLOCK, 0);
        }
        // Last: from here on no syscall may set a setuid or setgid bit (the remaining steps of
        // the spawn, `execve` included, set none).
        if let Err(errno) = self.no_privilege.install() {
            return self.fail_with(STEP_NO_PRIVILEGE, 0, errno);
        }
        Ok(())
    }

    fn enter_namespaces(&self) -> std::io::Result<()> {
        if self.namespaces == 0 {
            return Ok(());
        }
        if self.simulate_no_namespaces {
            return self.fail_with(STEP_UNSHARE, 0, libc::EPERM);
        }
        // SAFETY: unshare only changes this (single-threaded, forked) process's namespaces.
        if !self.user_namespace_first && unsafe { libc::unshare(self.namespaces) } == 0 {
            return Ok(());
        }
        if unsafe { libc::unshare(libc::CLONE_NEWUSER | self.namespaces) } != 0 {
            return self.fail(STEP_USERNS, 0);
        }
        // Map our own ids so files keep their owner; setgroups must be denied before gid_map.
        // The runtime is non-dumpable (`own_env`), which makes /proc/self/* root's files that an
        // unprivileged process cannot open: dumpable only for these three writes, then back
        // (execve resets it for the command anyway). The window exposes no credential: the
        // environment block is already wiped, and reading memory needs ptrace rights.
        // SAFETY (prctl): plain integers.
        let was_dumpable = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) } == 1;
        if !was_dumpable {
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
        }
        let _ = write_file(c"/proc/self/setgroups", b"deny");
        let uid = write_file(c"/proc/self/uid_map", &self.uid_map);
        let gid = uid.and_then(|()| write_file(c"/proc/self/gid_map", &self.gid_map));
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        if !was_dumpable {
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        }
        if uid.is_err() {
            return self.fail_with(STEP_ID_MAP, 0, errno);
        }
        if gid.is_err() {
            return self.fail_with(STEP_ID_MAP, 1, errno);
        }
        Ok(())
    }

    /// No capability survives into the command, whether the runner is root (no user namespace:
    /// the capabilities of the initial one) or not (the full set a new user namespace grants):
    /// the bounding and ambient sets are emptied, then effective, permitted and inheritable.
    /// With `no_new_privs` nothing can bring one back (setuid binaries and file capabilities
    /// grant nothing), so no `umount` or remount can undo the read-only binds, no `mknod` can
    /// reach a disk, and root's DAC override is gone.
    fn drop_capabilities(&self) -> std::io::Result<()> {
        for cap in 0..=self.last_cap {
            // SAFETY (every call): prctl/capset on integers and stack buffers of this frame.
            if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
                let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                // EINVAL: a number past this kernel's last capability.
                if errno != libc::EINVAL {
                    return self.fail_with(STEP_CAPS, cap as u16, errno);
                }
            }
        }
        if unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            )
        } != 0
        {
            return self.fail(STEP_CAPS, 100);
        }
        let mut header = CapHeader {
            version: LINUX_CAPABILITY_VERSION_3,
            pid: 0,
        };
        let data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        if unsafe {
            libc::syscall(
                libc::SYS_capset,
                &mut header as *mut CapHeader,
                data.as_ptr(),
            )
        } != 0
        {
            return self.fail(STEP_CAPS, 101);
        }
        Ok(())
    }

    /// Every descriptor above stderr is closed at `exec`: a descriptor the runner (or a library
    /// of it) opened without close-on-exec would otherwise be a way to write past the fence,
    /// which only checks opening. Ours (the report pipe, the ruleset) are close-on-exec already.
    fn close_inherited_fds(&self) -> std::io::Result<()> {
        // SAFETY: close_range only sets flags on this process's descriptors.
        let done =
            unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, CLOSE_RANGE_CLOEXEC) }
                == 0;
        if !done {
            // Kernels before 5.11: one fcntl per possible descriptor.
            let max = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) };
            let max = if max <= 0 { 1024 } else { max.min(65_536) } as libc::c_int;
            for fd in 3..max {
                // SAFETY: fcntl on an integer; EBADF for descriptors not open is fine.
                unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
            }
        }
        Ok(())
    }

    /// The mount namespace: private; the whole tree read-only (so `chmod`, `chown`, `utime`
    /// and `setxattr`, which Landlock does not govern, fail outside the writable roots); the
    /// writable roots bound onto themselves and writable again; the git directories pinned;
    /// their programs bound read-only.
    fn bind_mounts(&self) -> std::io::Result<()> {
        let null = std::ptr::null::<libc::c_char>();
        // SAFETY (every mount call): the paths are NUL-terminated strings owned by `self`, the
        // other pointers null; mount only changes this process's (new, private) namespace.
        // Private first: nothing bound below may propagate back to the runner's namespace.
        if unsafe {
            libc::mount(
                null,
                c"/".as_ptr(),
                null,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            )
        } != 0
        {
            return self.fail(STEP_PRIVATE, 0);
        }
        let read_only = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        let writable = MountAttr {
            attr_set: 0,
            attr_clr: MOUNT_ATTR_RDONLY,
            propagation: 0,
            userns_fd: 0,
        };
        let setattr = |path: &std::ffi::CStr, flags: libc::c_uint, attr: &MountAttr| unsafe {
            // SAFETY: `attr` lives on the caller's frame for the call; its size is passed.
            libc::syscall(
                libc::SYS_mount_setattr,
                libc::AT_FDCWD,
                path.as_ptr(),
                flags,
                attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        };
        if setattr(c"/", AT_RECURSIVE, &read_only) != 0 {
            return self.fail(STEP_READ_ONLY_ROOT, 0);
        }
        for (i, p) in self.writable.iter().enumerate() {
            // Recursive, so mounts below a writable root stay visible (they stay read-only).
            let flags = libc::MS_BIND | libc::MS_REC;
            if unsafe { libc::mount(p.as_ptr(), p.as_ptr(), null, flags, std::ptr::null()) } != 0
                || setattr(p, 0, &writable) != 0
            {
                return self.fail(STEP_WRITABLE, i as u16);
            }
        }
        for (i, p) in self.pinned.iter().enumerate() {
            let flags = libc::MS_BIND | libc::MS_REC;
            if unsafe { libc::mount(p.as_ptr(), p.as_ptr(), null, flags, std::ptr::null()) } != 0 {
                return self.fail(STEP_PIN, i as u16);
            }
        }
        for (i, p) in self.read_only.iter().enumerate() {
            let bound = unsafe {
                libc::mount(
                    p.as_ptr(),
                    p.as_ptr(),
                    null,
                    libc::MS_BIND,
                    std::ptr::null(),
                )
            };
            // mount_setattr sets only the read-only bit, keeping the flags a user namespace may
            // not clear (nosuid, nodev, …) as they are.
            if bound != 0 || setattr(p, 0, &read_only) != 0 {
                return self.fail(STEP_READ_ONLY, i as u16);
            }
        }
        Ok(())
    }

    fn fail(&self, step: u8, index: u16) -> std::io::Result<()> {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        self.fail_with(step, index, errno)
    }

    fn fail_with(&self, step: u8, index: u16, errno: i32) -> std::io::Result<()> {
        let mut msg = [0u8; 7];
        msg[0] = step;
        msg[1..3].copy_from_slice(&index.to_le_bytes());
        msg[3..7].copy_from_slice(&errno.to_le_bytes());
        // SAFETY: write(2) of a stack buffer to our pipe; 7 bytes are written atomically.
        unsafe {
            libc::write(self.report.as_raw_fd(), msg.as_ptr().cast(), msg.len());
        }
        Err(std::io::Error::from_raw_os_error(errno))
    }
}

/// open, write, close: the async-signal-safe way to write a /proc file.
fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> Result<(), ()> {
    // SAFETY: plain syscalls on a NUL-terminated path and a borrowed buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(());
        }
        let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        libc::close(fd);
        if n == bytes.len() as isize {
            Ok(())
        } else {
            Err(())
        }
    }
}

/// The parent's reading of a failed spawn: which step failed, in words. Call after the spawn
/// returned its error (the child has exited, so the pipe holds its whole report).
pub(super) fn read_report(
    mut reader: std::io::PipeReader,
    plan_paths: (&[PathBuf], &[PathBuf], &[PathBuf]),
) -> Option<super::Refusal> {
    let mut msg = [0u8; 7];
    reader.read_exact(&mut msg).ok()?;
    let index = u16::from_le_bytes([msg[1], msg[2]]) as usize;
    let errno = i32::from_le_bytes([msg[3], msg[4], msg[5], msg[6]]);
    let cause = std::io::Error::from_raw_os_error(errno);
    let path = |list: &[PathBuf]| {
        list.get(index)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "?".into())
    };
    let missing = match msg[0] {
        STEP_UNSHARE => format!(
            "this machine does not let it create namespaces ({cause}); the fence needs a new \
             network and/or mount namespace (unprivileged user namespaces: \
             kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0, and no seccomp or \
             AppArmor rule denying unshare)"
        ),
        STEP_USERNS => format!(
            "this machine does not let it create a user namespace ({cause}); the fence needs one \
             for its network and mount namespaces (unprivileged user namespaces: \
             kernel.unprivileged_userns_clone=1, user.max_user_namespaces>0, and no seccomp or \
             AppArmor rule denying unshare)"
        ),
        STEP_ID_MAP => format!("writing the user namespace's id map failed ({cause})"),
        STEP_PRIVATE => format!("making the mount namespace private failed ({cause})"),
        STEP_PIN => format!(
            "binding {} in its mount namespace failed ({cause})",
            path(plan_paths.0)
        ),
        STEP_READ_ONLY => format!("binding {} read-only failed ({cause})", path(plan_paths.1)),
        STEP_READ_ONLY_ROOT => format!(
            "making the mount tree read-only in its mount namespace failed ({cause}; \
             mount_setattr needs Linux 5.12 or later)"
        ),
        STEP_WRITABLE => format!(
            "binding the writable directory {} in its mount namespace failed ({cause})",
            path(plan_paths.2)
        ),
        STEP_CHDIR => format!("entering the working directory again failed ({cause})"),
        STEP_CAPS => format!("dropping every capability failed ({cause})"),
        STEP_NO_NEW_PRIVS => format!("setting no_new_privs failed ({cause})"),
        STEP_LANDLOCK => format!("entering the Landlock domain failed ({cause})"),
        STEP_NO_PRIVILEGE => format!(
            "installing its seccomp filter against setuid/setgid files failed ({cause}; the \
             kernel needs CONFIG_SECCOMP_FILTER)"
        ),
        _ => return None,
    };
    Some(super::Refusal { missing })
}
