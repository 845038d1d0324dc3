//! The fence around agent commands (`exec`): Landlock filesystem rules, an empty network
//! namespace unless the policy allows the network, and read-only bind mounts over the
//! repository's own programs (`.git/config`, `.git/hooks/`, `.git/info/`) and over the folder
//! of the DWP plan a run works on ([`FenceSpec::protected`]).
//!
//! Everything is prepared in the parent ([`Fence::build`]: the Landlock ruleset with its rules,
//! the paths to bind, the id maps, a report pipe); the forked child then only makes syscalls
//! ([`child`]), in this order: new namespaces (a user namespace unless root), private mount
//! propagation, the whole tree read-only, the writable roots bound writable again, the git
//! binds, the working directory entered again, every capability dropped, close-on-exec on every
//! descriptor above stderr, `no_new_privs`, `landlock_restrict_self`. What the child
//! starts inherits all of it, so a background job or a `task` child's `exec` stays fenced.
//!
//! Never silently unfenced: a fence that cannot be built (no Landlock, no namespaces) is a
//! [`Refusal`] before anything runs, naming what is missing and the `"sandbox": "off"` escape
//! hatch. Every program the runtime starts for the agent (`exec`, stdio MCP servers, language
//! servers, `task` children's commands) starts through the run's one [`RunFence`], which holds
//! the protected paths so that no launcher can leave them out.

#[cfg(target_os = "linux")]
mod child;
mod git_dirs;
#[cfg(target_os = "linux")]
mod rules;
mod run_fence;

pub use run_fence::{Launch, RunFence};

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// How far `exec` children may write (the policy's `sandbox` field).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SandboxMode {
    /// Write the workspace, the tool HOME, a per-operation temp dir and `/dev/null`-style
    /// devices; read and execute anywhere the runner can.
    #[default]
    WorkspaceWrite,
    /// Write only the per-operation temp dir (and the devices).
    ReadOnly,
    /// No fence at all (network included): the escape hatch for machines without Landlock or
    /// user namespaces.
    Off,
}

impl SandboxMode {
    pub fn is_default(&self) -> bool {
        *self == SandboxMode::WorkspaceWrite
    }

    /// The name as written in a policy file.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxMode::WorkspaceWrite => "workspaceWrite",
            SandboxMode::ReadOnly => "readOnly",
            SandboxMode::Off => "off",
        }
    }
}

/// The fence a policy asks for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FencePolicy {
    pub mode: SandboxMode,
    pub allow_network: bool,
}

impl FencePolicy {
    /// No fence at all: `sandbox: "off"`.
    pub const OFF: FencePolicy = FencePolicy {
        mode: SandboxMode::Off,
        allow_network: true,
    };

    /// Whether commands run fenced.
    pub fn is_fenced(&self) -> bool {
        self.mode != SandboxMode::Off
    }

    /// One line for humans: what the fence lets a command do.
    pub fn describe(&self) -> String {
        let network = if self.allow_network {
            "network allowed"
        } else {
            "no network"
        };
        match self.mode {
            SandboxMode::WorkspaceWrite => format!(
                "workspaceWrite: writes only to the workspace, the tool HOME, a per-operation \
                 TMPDIR and /dev/null-style devices (.git/config, .git/hooks/ and .git/info/ \
                 read-only; everything else read-only, metadata included); no capabilities; \
                 {network}"
            ),
            SandboxMode::ReadOnly => format!(
                "readOnly: writes only to a per-operation TMPDIR and /dev/null-style devices \
                 (everything else read-only, metadata included); no capabilities; {network}"
            ),
            SandboxMode::Off => {
                "off: commands run unfenced (the runner's whole filesystem and network)".into()
            }
        }
    }
}

/// Where one fenced command may write.
#[derive(Debug, Clone)]
pub struct FenceSpec<'a> {
    pub policy: FencePolicy,
    /// The workspace (a git checkout): writable under `workspaceWrite`; its git directories'
    /// programs are bound read-only.
    pub workspace: &'a Path,
    /// The command's HOME: writable under `workspaceWrite` if it exists when the fence is built
    /// (`exec` creates it first; an MCP server started while its Session is being created
    /// finds none).
    pub home: &'a Path,
    /// The per-operation temp dir (`TMPDIR`): always writable.
    pub tmp: &'a Path,
    /// Directories inside the writable workspace the command must not change (the folder of
    /// the DWP plan the run works on): bound read-only, with every directory from the workspace
    /// down to each pinned, so none can be renamed away and replaced by a writable copy.
    pub protected: &'a [PathBuf],
}

/// What was enforced, for the operation's record (`run show`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FenceRecord {
    pub sandbox: SandboxMode,
    /// The kernel's Landlock ABI version the rules were built for (0: no fence).
    pub landlock_abi: u32,
    /// `none` (an empty network namespace) or `host`.
    pub network: String,
    /// How many paths were bound read-only (git's programs, a protected plan folder).
    pub read_only_paths: u32,
}

impl FenceRecord {
    /// One line for `run show`'s text view.
    pub fn summary(&self) -> String {
        format!(
            "{}, Landlock ABI {}, network {}, {} read-only path{}",
            self.sandbox.as_str(),
            self.landlock_abi,
            self.network,
            self.read_only_paths,
            if self.read_only_paths == 1 { "" } else { "s" }
        )
    }
}

/// A fence that cannot be built: what is missing. The command must not run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub missing: String,
}

impl Refusal {
    /// The tool error the model (and the operator, in `run show`) reads.
    pub fn message(&self, policy: FencePolicy) -> String {
        format!(
            "exec refused before running: the policy fences commands (sandbox \"{}\"{}) but {}; \
             nothing was run. A fence that cannot be built is never skipped. To run commands \
             unfenced on this machine, the caller can start a new Session whose policy sets \
             \"sandbox\": \"off\".",
            policy.mode.as_str(),
            network_words(policy),
            self.missing
        )
    }

    /// The refusal for another program than `exec` (an MCP server, say): `what` names it,
    /// `escape` says where its `off` switch is.
    pub fn message_for(&self, what: &str, policy: FencePolicy, escape: &str) -> String {
        format!(
            "{what} was not started: its fence (sandbox \"{}\"{}) cannot be built because {}. \
             A fence that cannot be built is never skipped; to run it unfenced on this machine, \
             set {escape}.",
            policy.mode.as_str(),
            network_words(policy),
            self.missing
        )
    }
}

fn network_words(policy: FencePolicy) -> &'static str {
    if policy.allow_network {
        ", network allowed"
    } else {
        ", no network"
    }
}

/// A fence ready to install on a `Command` (Linux).
pub struct Fence {
    #[cfg(target_os = "linux")]
    plan: child::Plan,
    report: SpawnReport,
    record: FenceRecord,
}

/// Reads what the fenced child reported when its spawn failed.
pub struct SpawnReport {
    #[cfg(target_os = "linux")]
    reader: std::io::PipeReader,
    pinned: Vec<PathBuf>,
    read_only: Vec<PathBuf>,
    writable: Vec<PathBuf>,
}

impl SpawnReport {
    /// Why the fence could not be entered, from the child's report; `None` when the spawn
    /// failed for another reason (the fence was not what failed).
    pub fn explain(self) -> Option<Refusal> {
        #[cfg(target_os = "linux")]
        {
            child::read_report(self.reader, (&self.pinned, &self.read_only, &self.writable))
        }
        #[cfg(not(target_os = "linux"))]
        None
    }
}

impl Fence {
    /// Prepares the fence of `spec` (`None` when the policy is `off`).
    ///
    /// Everything that allocates or reads the filesystem happens here, before the fork.
    pub fn build(spec: &FenceSpec) -> Result<Option<Fence>, Refusal> {
        if !spec.policy.is_fenced() {
            return Ok(None);
        }
        Self::build_fenced(spec).map(Some)
    }

    #[cfg(target_os = "linux")]
    fn build_fenced(spec: &FenceSpec) -> Result<Fence, Refusal> {
        let abi = landlock_abi();
        if abi == 0 {
            return Err(Refusal {
                missing: "this kernel does not provide Landlock (Linux 5.13 or later with \
                          `landlock` in the LSM list, e.g. lsm=landlock,… on the kernel command \
                          line)"
                    .into(),
            });
        }
        let mut writable: Vec<PathBuf> = vec![spec.tmp.to_path_buf()];
        let mut git = git_dirs::Protected::default();
        if spec.policy.mode == SandboxMode::WorkspaceWrite {
            writable.push(spec.workspace.to_path_buf());
            if spec.home.is_dir() {
                writable.push(spec.home.to_path_buf());
            }
            git = git_dirs::discover(spec.workspace);
            writable.extend(git.writable_outside.iter().cloned());
            protect_dirs(spec.workspace, spec.protected, &mut git);
        }
        let ruleset = rules::build(&writable).map_err(|missing| Refusal { missing })?;
        // The directories bound writable over the read-only mount tree: the writable roots
        // (once each, and not those on a read-only filesystem, which no bind makes writable)
        // and POSIX shared memory.
        let mut binds: Vec<PathBuf> = Vec::with_capacity(writable.len() + 1);
        for dir in writable
            .iter()
            .map(PathBuf::as_path)
            .chain([Path::new(rules::SHARED_MEMORY)])
        {
            if !binds.iter().any(|b| b == dir) && !on_read_only_fs(dir) && dir.is_dir() {
                binds.push(dir.to_path_buf());
            }
        }
        let (reader, plan) = child::Plan::new(
            ruleset,
            !spec.policy.allow_network,
            &binds,
            &git.pinned,
            &git.read_only,
        )
        .map_err(|missing| Refusal { missing })?;
        let record = FenceRecord {
            sandbox: spec.policy.mode,
            landlock_abi: abi,
            network: if spec.policy.allow_network {
                "host".into()
            } else {
                "none".into()
            },
            read_only_paths: git.read_only.len() as u32,
        };
        Ok(Fence {
            plan,
            report: SpawnReport {
                reader,
                pinned: git.pinned,
                read_only: git.read_only,
                writable: binds,
            },
            record,
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn build_fenced(_spec: &FenceSpec) -> Result<Fence, Refusal> {
        Err(Refusal {
            missing: "the fence needs Linux (Landlock and namespaces); this platform has neither"
                .into(),
        })
    }

    /// What this fence enforces, for the operation's record.
    pub fn record(&self) -> &FenceRecord {
        &self.record
    }

    /// Registers the fence as a `pre_exec` step of `cmd`. Register the parent-death signal
    /// after it (entering the namespaces changes the credentials, which clears that signal);
    /// [`spawn`] does all of this.
    fn install(self, cmd: &mut Command) -> (FenceRecord, SpawnReport) {
        #[cfg(target_os = "linux")]
        self.plan.install(cmd);
        #[cfg(not(target_os = "linux"))]
        let _ = cmd;
        (self.record, self.report)
    }
}

/// Adds the protected directories that lie inside the (writable) workspace to the read-only
/// binds, and pins every directory between the workspace and each of them. A protected
/// directory elsewhere needs nothing: Landlock keeps it read-only already (it is under no
/// writable root but the workspace's own, the tool HOME's or the temp dir's, which never hold
/// a plan folder). Canonical paths, so a symlink in the workspace does not redirect the binds.
#[cfg(target_os = "linux")]
fn protect_dirs(workspace: &Path, protected: &[PathBuf], out: &mut git_dirs::Protected) {
    let Ok(workspace) = workspace.canonicalize() else {
        return;
    };
    for dir in protected {
        let Ok(dir) = dir.canonicalize() else {
            continue;
        };
        let Ok(rel) = dir.strip_prefix(&workspace) else {
            continue;
        };
        let mut at = workspace.clone();
        let mut parts = rel.components().peekable();
        while let Some(part) = parts.next() {
            at.push(part);
            if parts.peek().is_some() && !out.pinned.contains(&at) {
                out.pinned.push(at.clone());
            }
        }
        if !out.read_only.contains(&dir) {
            out.read_only.push(dir);
        }
    }
}

/// Whether `dir` is on a filesystem mounted read-only (one `statvfs`).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // statvfs(2) of one path
fn on_read_only_fs(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statvfs writes into the zeroed struct on our stack; the path is NUL-terminated.
    unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        libc::statvfs(c.as_ptr(), &mut st) == 0 && st.f_flag & libc::ST_RDONLY != 0
    }
}

/// A program started by [`spawn`].
pub struct Spawned {
    pub child: std::process::Child,
    /// What the fence enforces (`None`: the policy is `off`).
    pub fence: Option<FenceRecord>,
}

/// Why [`spawn`] started nothing.
#[derive(Debug)]
pub enum SpawnError {
    /// The fence could not be built or entered: nothing ran.
    Refused(Refusal),
    /// The program itself could not be started (not found, not executable, …).
    Io(std::io::Error),
}

/// Starts `cmd` inside the fence of `spec`. Private: outside this module a program starts
/// through [`RunFence::spawn`], which supplies the protected paths.
///
/// `pre_exec` steps the caller registered run before the fence is entered (a `setsid`, say);
/// the launcher adds the parent-death signal after the fence (entering namespaces changes the
/// credentials, which clears it). `cmd` is dropped once the child is started, so the parent's
/// copies of the child's pipe ends close and a reader sees end-of-file when the child exits.
#[allow(clippy::disallowed_methods)] // the one place a process starts (see `RunFence`)
fn spawn(spec: &FenceSpec, mut cmd: Command) -> Result<Spawned, SpawnError> {
    let fence = Fence::build(spec).map_err(SpawnError::Refused)?;
    let (fence, report) = match fence.map(|f| f.install(&mut cmd)) {
        Some((record, report)) => (Some(record), Some(report)),
        None => (None, None),
    };
    crate::process::die_with_parent(&mut cmd);
    let spawned = cmd.spawn();
    drop(cmd);
    match spawned {
        Ok(child) => Ok(Spawned { child, fence }),
        Err(e) => Err(match report.and_then(SpawnReport::explain) {
            Some(refusal) => SpawnError::Refused(refusal),
            None => SpawnError::Io(e),
        }),
    }
}

/// The kernel's Landlock ABI version, 0 without Landlock. Test builds can pretend it is missing
/// (`KXEN_TEST_FENCE_MISSING=landlock`).
pub fn landlock_abi() -> u32 {
    if simulated_missing("landlock") {
        return 0;
    }
    #[cfg(target_os = "linux")]
    {
        rules::kernel_abi()
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// Test builds only: `KXEN_TEST_FENCE_MISSING` names a kernel feature (`landlock`,
/// `namespaces`) to treat as absent, so the refusal path runs on a machine that has it.
pub(crate) fn simulated_missing(feature: &str) -> bool {
    #[cfg(any(test, feature = "failpoints"))]
    {
        std::env::var("KXEN_TEST_FENCE_MISSING")
            .is_ok_and(|v| v.split(',').any(|f| f.trim() == feature))
    }
    #[cfg(not(any(test, feature = "failpoints")))]
    {
        let _ = feature;
        false
    }
}

/// Whether this machine can enforce `policy`: builds the fence around a scratch directory and
/// starts `/bin/true` inside it. `Ok` carries the Landlock ABI; `Err` the refusal an `exec`
/// would meet.
pub fn probe(policy: FencePolicy) -> Result<Option<u32>, Refusal> {
    if !policy.is_fenced() {
        return Ok(None);
    }
    let scratch = tempfile::tempdir().map_err(|e| Refusal {
        missing: format!("a scratch directory for the probe could not be created ({e})"),
    })?;
    let dir = scratch.path();
    let spec = FenceSpec {
        policy,
        workspace: dir,
        home: dir,
        tmp: dir,
        protected: &[],
    };
    let mut cmd = Command::new("/bin/true");
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    match spawn(&spec, cmd) {
        Ok(mut spawned) => {
            let _ = spawned.child.wait();
            Ok(spawned.fence.map(|f| f.landlock_abi))
        }
        Err(SpawnError::Refused(refusal)) => Err(refusal),
        Err(SpawnError::Io(e)) => Err(Refusal {
            missing: format!("starting a fenced process failed ({e})"),
        }),
    }
}

#[cfg(test)]
mod tests;
