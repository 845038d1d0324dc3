//! The Landlock ruleset of a fence, built in the parent: read and execute everywhere, write
//! beneath the writable roots and to a few devices.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};

/// The newest Landlock ABI whose filesystem rights this code handles (V5 added device ioctls;
/// V6 and V7 added no filesystem right). An older kernel enforces the subset it knows
/// (best effort, as the crate intends); the record names the kernel's ABI.
const TESTED_ABI: ABI = ABI::V5;
/// The scopes (ABI 6): no signal to a process outside the fence (the runner, your shell, other
/// Sessions' commands) and no connection to an abstract Unix socket created outside it. Older
/// kernels: not enforced (best effort; the recorded ABI says which).
const SCOPE_ABI: ABI = ABI::V6;

/// Devices every command may write (and `/dev/pts`, `/dev/ptmx` for programs that open a
/// pseudo-terminal, `/dev/shm` for POSIX shared memory and semaphores).
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

/// POSIX shared memory and semaphores: writable (bound writable over the read-only tree too).
pub(super) const SHARED_MEMORY: &str = "/dev/shm";

/// The kernel's Landlock ABI version (0: none). One syscall, no side effect.
#[allow(unsafe_code)] // landlock_create_ruleset(2) version query
pub(super) fn kernel_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attribute, size 0 and the VERSION flag the syscall only returns the
    // ABI version (or an error); it touches no memory of ours.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).unwrap_or(0)
}

/// The ruleset's file descriptor, ready for `landlock_restrict_self` in the child. `Err` says
/// what is missing.
pub(super) fn build(writable: &[PathBuf]) -> Result<OwnedFd, String> {
    let fail = |e: &dyn std::fmt::Display| format!("building the Landlock ruleset failed ({e})");
    let all = AccessFs::from_all(TESTED_ABI);
    let read = AccessFs::from_read(TESTED_ABI);
    // No device nodes in a writable root: a disk's node would be a way past every rule (the
    // command holds no CAP_MKNOD either; this is the second lock).
    let write = all & !(AccessFs::MakeChar | AccessFs::MakeBlock);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(|e| fail(&e))?
        .scope(Scope::from_all(SCOPE_ABI))
        .map_err(|e| fail(&e))?
        .create()
        .map_err(|e| fail(&e))?;
    let root = PathFd::new("/").map_err(|e| fail(&e))?;
    ruleset = ruleset
        .add_rule(PathBeneath::new(root, read))
        .map_err(|e| fail(&e))?;
    for dir in writable {
        let fd = PathFd::new(dir).map_err(|e| {
            format!(
                "the writable directory {} cannot be opened ({e})",
                dir.display()
            )
        })?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, write))
            .map_err(|e| fail(&e))?;
    }
    for device in DEVICES {
        let path = Path::new(device);
        let Ok(meta) = std::fs::metadata(path) else {
            continue;
        };
        let Ok(fd) = PathFd::new(path) else { continue };
        let mut access = if meta.is_dir() {
            write
        } else {
            AccessFs::from_file(TESTED_ABI)
        };
        // No ioctls on terminals: TIOCSTI could type into the runner's shell (the command has
        // no controlling terminal, but a root runner's CAP_SYS_ADMIN allows TIOCSTI on any).
        if *device == "/dev/tty" || *device == "/dev/pts" {
            access &= !AccessFs::IoctlDev;
        }
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, access))
            .map_err(|e| fail(&e))?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| "this kernel does not provide Landlock".to_string())
}
