//! Where kxen-agent keeps its state, and the names of every file in it.
//!
//! Resolution order (docs/spec.md §2): `--state-dir` > `$KXEN_AGENT_STATE_DIR` >
//! `$XDG_STATE_HOME/kxen-agent` > `~/.local/state/kxen-agent`. Resolving never touches the disk:
//! read-only commands must not create the directory; commands that write call
//! [`StateDir::ensure`] first. The layout is documented in `docs/state-format.md`.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fsx;

/// The resolved state directory (it may not exist yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

/// The environment variables state-dir resolution reads, injected so tests stay hermetic.
#[derive(Debug, Clone, Default)]
pub struct StateEnv {
    pub kxen_agent_state_dir: Option<PathBuf>,
    pub xdg_state_home: Option<PathBuf>,
    pub home: Option<PathBuf>,
}

impl StateEnv {
    /// The values of this process's environment.
    pub fn from_process() -> StateEnv {
        let get = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        StateEnv {
            kxen_agent_state_dir: get("KXEN_AGENT_STATE_DIR"),
            xdg_state_home: get("XDG_STATE_HOME"),
            home: get("HOME"),
        }
    }
}

/// `path` made absolute, with its longest existing ancestor resolved (symlinks followed) and the
/// rest appended as written.
fn resolved(path: &Path) -> PathBuf {
    let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut existing = path.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            return rest
                .iter()
                .rev()
                .fold(real, |acc: PathBuf, part| acc.join(part));
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => return path,
        }
    }
}

/// Refuses a state file whose `formatVersion` is not `supported` (exit 10, naming the file),
/// before its fields are read: a file from a newer kxen-agent (or edited by hand) must not be
/// read as if it had this build's meaning. Text that is not a JSON object, or has no
/// `formatVersion`, is left to the caller's full parse, which reports it.
pub fn check_format_version(bytes: &[u8], supported: u32, path: &Path) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Versioned {
        #[serde(rename = "formatVersion")]
        format_version: Option<serde_json::Value>,
    }
    let Ok(Versioned {
        format_version: Some(found),
    }) = serde_json::from_slice::<Versioned>(bytes)
    else {
        return Ok(());
    };
    if found.as_u64() == Some(u64::from(supported)) {
        return Ok(());
    }
    Err(Error::corrupt(format!(
        "{}: formatVersion {found} is not one this kxen-agent reads (it reads {supported})",
        path.display()
    ))
    .with_hint(
        "a newer kxen-agent wrote it, or it was edited: use the kxen-agent that wrote it, or \
         restore the Session from a backup or bundle",
    ))
}

impl StateDir {
    /// Resolves the state directory from the `--state-dir` flag and the environment.
    pub fn resolve(flag: Option<&Path>, env: &StateEnv) -> Result<StateDir> {
        let root = if let Some(dir) = flag {
            dir.to_path_buf()
        } else if let Some(dir) = &env.kxen_agent_state_dir {
            dir.clone()
        } else if let Some(xdg) = &env.xdg_state_home {
            xdg.join("kxen-agent")
        } else if let Some(home) = &env.home {
            home.join(".local/state/kxen-agent")
        } else {
            return Err(
                Error::usage("cannot find a state directory: HOME is not set")
                    .with_hint("pass --state-dir PATH or set KXEN_AGENT_STATE_DIR"),
            );
        };
        // Absolute from here on: tools run in the workspace with HOME under the state dir, so a
        // relative `--state-dir st` would otherwise put the tool home inside the workspace.
        // `absolute` only reads the current directory; it never touches the state dir itself.
        let root = std::path::absolute(&root).map_err(|e| Error::io("resolve", &root, e))?;
        Ok(StateDir { root })
    }

    /// A state dir at an explicit path (tests, benchmarks).
    pub fn at(root: impl Into<PathBuf>) -> StateDir {
        StateDir { root: root.into() }
    }

    /// Whether the state dir is `dir` or lies inside it, comparing resolved paths (symlinks
    /// followed as far as the state dir exists: it may not exist yet). A state dir inside a
    /// workspace is readable by the agent's own tools there: its journal, messages and leases.
    pub fn is_within(&self, dir: &Path) -> bool {
        let Ok(dir) = dir.canonicalize() else {
            return false;
        };
        resolved(&self.root).starts_with(dir)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates the state dir and `sessions/` (mode 0700) if missing. Only writers call this.
    pub fn ensure(&self) -> Result<()> {
        fsx::create_dir_private(&self.sessions_dir())
    }

    /// `sessions/`: one directory per Session.
    pub fn sessions_dir(&self) -> PathBuf {
        self.root.join("sessions")
    }

    /// `sessions/<ses>/`. The id must have been validated by the caller.
    pub fn session(&self, session_id: &str) -> SessionPaths {
        SessionPaths {
            dir: self.sessions_dir().join(session_id),
        }
    }

    /// `blobs/`: content-addressed large tool outputs, shared by all Sessions.
    pub fn blobs_dir(&self) -> PathBuf {
        self.root.join("blobs")
    }

    /// `tool-home/<ses>/`: the HOME the tool subprocesses of one Session see (never the user's
    /// real HOME). One per Session: a fenced command may write its HOME, so a shared one would let
    /// a `.gitconfig` or shell start-up file planted by one Session's agent run in another
    /// Session's commands (perhaps one with `sandbox: "off"`).
    pub fn tool_home(&self, session_id: &str) -> PathBuf {
        self.root.join("tool-home").join(session_id)
    }

    /// `mcp-home/<ses>/`: the HOMEs of one Session's MCP servers, one directory per server
    /// ([`crate::mcp::servers`]). Outside `tool-home/`, so `exec`'s fence cannot write them.
    pub fn mcp_home(&self, session_id: &str) -> PathBuf {
        self.root.join("mcp-home").join(session_id)
    }
}

/// The files of one Session directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPaths {
    pub dir: PathBuf,
}

impl SessionPaths {
    /// Session metadata, workspace binding, lineage and lock (atomic replace).
    pub fn session_json(&self) -> PathBuf {
        self.dir.join("session.json")
    }
    /// The conversation (append-only JSONL).
    pub fn messages(&self) -> PathBuf {
        self.dir.join("messages.jsonl")
    }
    /// The run lease's lock file (never deleted).
    pub fn lease_lock(&self) -> PathBuf {
        self.dir.join("lease.lock")
    }
    /// Who holds the lease: `{pid, host, since}` (atomic replace).
    pub fn lease_json(&self) -> PathBuf {
        self.dir.join("lease.json")
    }
    /// `runs/`.
    pub fn runs_dir(&self) -> PathBuf {
        self.dir.join("runs")
    }
    /// `runs/<run>/`.
    pub fn run(&self, run_id: &str) -> RunPaths {
        RunPaths {
            dir: self.runs_dir().join(run_id),
        }
    }
}

/// The files of one run directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPaths {
    pub dir: PathBuf,
}

impl RunPaths {
    /// Run state (atomic replace).
    pub fn run_json(&self) -> PathBuf {
        self.dir.join("run.json")
    }
    /// The tool journal (append-only JSONL).
    pub fn journal(&self) -> PathBuf {
        self.dir.join("journal.jsonl")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: Option<&str>, x: Option<&str>, h: Option<&str>) -> StateEnv {
        StateEnv {
            kxen_agent_state_dir: k.map(PathBuf::from),
            xdg_state_home: x.map(PathBuf::from),
            home: h.map(PathBuf::from),
        }
    }

    #[test]
    fn resolution_order() {
        let all = env(Some("/k"), Some("/x"), Some("/h"));
        let flag = Path::new("/f");
        assert_eq!(StateDir::resolve(Some(flag), &all).unwrap().root(), flag);
        assert_eq!(
            StateDir::resolve(None, &all).unwrap().root(),
            Path::new("/k")
        );
        let no_k = env(None, Some("/x"), Some("/h"));
        assert_eq!(
            StateDir::resolve(None, &no_k).unwrap().root(),
            Path::new("/x/kxen-agent")
        );
        let home_only = env(None, None, Some("/h"));
        assert_eq!(
            StateDir::resolve(None, &home_only).unwrap().root(),
            Path::new("/h/.local/state/kxen-agent")
        );
        assert!(StateDir::resolve(None, &env(None, None, None)).is_err());
    }

    #[test]
    fn a_relative_state_dir_becomes_absolute() {
        let resolved = StateDir::resolve(Some(Path::new("rel")), &env(None, None, None)).unwrap();
        assert!(resolved.root().is_absolute());
        assert!(resolved.root().ends_with("rel"));
    }

    #[test]
    fn ensure_creates_private_dirs() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let state = StateDir::at(tmp.path().join("s"));
        state.ensure().unwrap();
        for dir in [state.root().to_path_buf(), state.sessions_dir()] {
            let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}", dir.display());
        }
    }
}
