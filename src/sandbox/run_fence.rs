//! The one fence of a run (issue 30 item 2): built once, from the policy, the workspace, the
//! DWP plan binding and the state dir, and the only way to start a process on the agent's
//! behalf — `exec` commands, stdio MCP servers, language servers and the processes of `task`
//! children (which share their parent's value).
//!
//! What a launcher used to pass per call site lives in this value, so a launcher cannot forget
//! it: the workspace and the **protected directories** (the plan folder of a plan run, so that
//! no tool or server can forge the host's samples or drop a `LIMIT` record, and the state dir,
//! so that none can edit the Session's journal). The repository's own programs (`.git/config`,
//! `hooks/`, `info/`, `commondir`, `gitdir`, `.git` files) are found again at every start
//! ([`super::git_dirs`]), since a command may have created them since the last one.
//!
//! A launch names only what differs per program: its fence policy (`exec`'s is the run's
//! policy; a server entry has its own `sandbox`), its HOME and its TMPDIR. The module-level
//! `spawn` and the fence's `install` are private to [`crate::sandbox`], and clippy's
//! `disallowed-methods` refuses `std::process::Command::spawn`, `output` and `status` anywhere
//! else in the library (the few programs of the runtime's own — git on its own terms, the
//! operator's provider command — carry a reasoned `allow`): a process started around this value
//! does not build.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use super::{FencePolicy, FenceSpec, SpawnError, Spawned};

/// The fence of one run; cheap to clone (one shared value).
#[derive(Debug, Clone)]
pub struct RunFence(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    policy: FencePolicy,
    workspace: PathBuf,
    protected: Vec<PathBuf>,
}

/// What differs from one started program to the next.
#[derive(Debug, Clone, Copy)]
pub struct Launch<'a> {
    /// The program's fence: [`RunFence::policy`] for `exec`, a server entry's own otherwise.
    pub policy: FencePolicy,
    /// Its HOME: writable under `workspaceWrite` if it exists.
    pub home: &'a Path,
    /// Its TMPDIR: always writable.
    pub tmp: &'a Path,
}

impl RunFence {
    /// The fence of a run on `workspace` under `policy` (the merged policy's `sandbox` and
    /// `allowNetwork`), protecting `plan_dir` (a plan run's folder) and `state_dir`.
    ///
    /// Protected paths are canonical; one that does not exist yet is kept as given (it is only
    /// enforced once it exists, and canonicalization happens again at every start).
    pub fn new(
        policy: FencePolicy,
        workspace: &Path,
        plan_dir: Option<&Path>,
        state_dir: Option<&Path>,
    ) -> RunFence {
        let mut protected: Vec<PathBuf> = Vec::new();
        for dir in plan_dir.into_iter().chain(state_dir) {
            let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
            if !protected.contains(&dir) {
                protected.push(dir);
            }
        }
        RunFence(Arc::new(Inner {
            policy,
            workspace: workspace.to_path_buf(),
            protected,
        }))
    }

    /// The run's own fence policy (the one `exec` commands run under).
    pub fn policy(&self) -> FencePolicy {
        self.0.policy
    }

    /// The workspace every started program works on.
    pub fn workspace(&self) -> &Path {
        &self.0.workspace
    }

    /// Directories no tool and no started program may change (canonical): `write`/`edit`
    /// refuse paths inside them, every fenced program sees them read-only.
    pub fn protected(&self) -> &[PathBuf] {
        &self.0.protected
    }

    /// Starts `cmd` inside this fence with `launch`'s policy, HOME and TMPDIR: the one launcher
    /// of every program the runtime starts on the agent's behalf.
    ///
    /// `pre_exec` steps the caller registered run before the fence is entered (a `setsid`,
    /// say); the launcher adds the parent-death signal after it. `cmd` is dropped once the
    /// child is started, so the parent's copies of the child's pipe ends close.
    pub fn spawn(&self, launch: Launch, cmd: Command) -> Result<Spawned, SpawnError> {
        let spec = FenceSpec {
            policy: launch.policy,
            workspace: &self.0.workspace,
            home: launch.home,
            tmp: launch.tmp,
            protected: &self.0.protected,
        };
        super::spawn(&spec, cmd)
    }
}

#[cfg(test)]
impl RunFence {
    /// A fence protecting exactly `protected` (tool tests).
    pub(crate) fn with_protected(
        policy: FencePolicy,
        workspace: &Path,
        protected: Vec<PathBuf>,
    ) -> RunFence {
        RunFence(Arc::new(Inner {
            policy,
            workspace: workspace.to_path_buf(),
            protected,
        }))
    }
}
