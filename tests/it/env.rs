//! A hermetic environment for CLI tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A temp HOME, a state dir and helpers to run the binaries with a cleared environment.
pub struct TestEnv {
    pub root: tempfile::TempDir,
    /// `Some`: [`TestEnv::deterministic`] — the commands run so far (each gets a later fixed
    /// clock and its own id seed).
    commands: Option<std::sync::atomic::AtomicU64>,
}

/// The fixed clock of a deterministic env starts here (2026-01-01T00:00:00Z) …
const FIXED_EPOCH_MS: u64 = 1_767_225_600_000;
/// … and each command starts this much later than the one before (1 minute).
const FIXED_STEP_MS: u64 = 60_000;
/// The author and committer date of every commit a deterministic env makes.
const FIXED_GIT_DATE: &str = "2026-01-01T00:00:00Z";

/// What a command did: exit code, stdout, stderr.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn from(output: Output) -> Run {
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Every stdout line parsed as JSON (panics with the line if one is not JSON).
    pub fn jsonl(&self) -> Vec<serde_json::Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }

    /// Asserts the exit code, showing both streams when it differs.
    #[track_caller]
    pub fn expect(&self, code: i32) -> &Run {
        assert_eq!(
            self.code, code,
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

impl TestEnv {
    pub fn new() -> TestEnv {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("home")).unwrap();
        TestEnv {
            root,
            commands: None,
        }
    }

    /// An env whose outputs can be compared whole: every command gets a fixed, advancing clock
    /// (`KXEN_TEST_CLOCK_MS`, one minute later per command, 1 ms per reading within it) and its
    /// own id seed (`KXEN_TEST_ID_SEED`), and its repositories get fixed commit dates — so ids,
    /// stamps and commit ids are the same on every run; [`TestEnv::normalize`] hides the temp
    /// path. Both variables are read only by builds with the `failpoints` feature.
    pub fn deterministic() -> TestEnv {
        TestEnv {
            commands: Some(std::sync::atomic::AtomicU64::new(0)),
            ..TestEnv::new()
        }
    }

    /// `text` with this env's temp root (as given and canonical) replaced by `[ENV]`.
    pub fn normalize(&self, text: &str) -> String {
        let mut out = text.to_string();
        let canonical = self.path().canonicalize().unwrap();
        for root in [canonical.as_path(), self.path()] {
            out = out.replace(root.to_str().unwrap(), "[ENV]");
        }
        out
    }

    pub fn path(&self) -> &Path {
        self.root.path()
    }

    pub fn home(&self) -> PathBuf {
        self.root.path().join("home")
    }

    pub fn state_dir(&self) -> PathBuf {
        self.root.path().join("state")
    }

    /// A command for one of the binaries, with a cleared environment (PATH kept) and HOME,
    /// XDG dirs and the state dir inside this env. Runs in the env's root directory.
    pub fn cmd(&self, bin: &str) -> Command {
        let exe = match bin {
            "kxen-agent" => env!("CARGO_BIN_EXE_kxen-agent"),
            "dwp" => env!("CARGO_BIN_EXE_dwp"),
            other => panic!("unknown binary {other}"),
        };
        let mut cmd = Command::new(exe);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("XDG_STATE_HOME", self.root.path().join("xdg-state"))
            .env("XDG_CONFIG_HOME", self.root.path().join("xdg-config"))
            .env("KXEN_AGENT_STATE_DIR", self.state_dir())
            .current_dir(self.root.path());
        if let Some(commands) = &self.commands {
            let n = commands.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            cmd.env(
                "KXEN_TEST_CLOCK_MS",
                (FIXED_EPOCH_MS + n * FIXED_STEP_MS).to_string(),
            )
            .env("KXEN_TEST_ID_SEED", n.to_string())
            .env("GIT_AUTHOR_DATE", FIXED_GIT_DATE)
            .env("GIT_COMMITTER_DATE", FIXED_GIT_DATE);
        }
        cmd
    }

    /// Runs `bin args…` and captures the result.
    pub fn run(&self, bin: &str, args: &[&str]) -> Run {
        Run::from(self.cmd(bin).args(args).output().unwrap())
    }

    /// Creates a git repository at `name` with one commit of `files` (path, content).
    pub fn git_repo(&self, name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = self.root.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let date = self.commands.as_ref().map(|_| FIXED_GIT_DATE);
        git_dated(&dir, &["init", "-q", "-b", "main"], date);
        for (path, content) in files {
            let file = dir.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, content).unwrap();
        }
        git_dated(&dir, &["add", "-A"], date);
        git_dated(
            &dir,
            &["commit", "-q", "--allow-empty", "-m", "initial"],
            date,
        );
        dir
    }
}

/// Runs git in `dir` with a fixed identity and no user or system config; panics on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    git_dated(dir, args, None)
}

/// [`git`], with `date` (if any) as author and committer date.
pub fn git_dated(dir: &Path, args: &[&str], date: Option<&str>) -> String {
    let mut cmd = Command::new("git");
    if let Some(date) = date {
        cmd.env("GIT_AUTHOR_DATE", date)
            .env("GIT_COMMITTER_DATE", date);
    }
    let out = cmd
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Every file and directory under `dir` (relative path → content, `None` for a directory): a
/// recursive listing to prove a command changed nothing. A missing `dir` is an empty listing.
pub fn snapshot(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    if !dir.exists() {
        return out;
    }
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.unwrap();
        let rel = entry
            .path()
            .strip_prefix(dir)
            .unwrap()
            .display()
            .to_string();
        let content = entry
            .file_type()
            .is_file()
            .then(|| std::fs::read(entry.path()).unwrap());
        out.insert(rel, content);
    }
    out
}
