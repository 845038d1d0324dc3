//! Running the git CLI, for the one operation our gix features do not cover (worktrees).
//!
//! The design card allows `git worktree add` as the fallback for gix's `worktree-mutation`
//! feature; we keep gix's features minimal and take the fallback. git runs with a controlled
//! environment so the outcome does not depend on who runs us: an empty environment except `PATH`,
//! no system or global config (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`), no hooks
//! (`core.hooksPath=/dev/null`), no prompts, the C locale, and a fixed identity for reflogs. The
//! repository's own config still applies. Consequence worth knowing: filters configured only in a
//! user's global config (git-lfs, for example) do not run when the worktree is checked out.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::error::{Error, Result};

/// Runs `git ARGS…` in `dir`; returns stdout, or an `External` error (exit 9) with git's stderr.
pub(crate) fn run(dir: &Path, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new("git");
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .env("GIT_AUTHOR_NAME", "kxen-agent")
        .env("GIT_AUTHOR_EMAIL", "kxen-agent@localhost")
        .env("GIT_COMMITTER_NAME", "kxen-agent")
        .env("GIT_COMMITTER_EMAIL", "kxen-agent@localhost")
        .args(["-c", "core.hooksPath=/dev/null"])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null());
    let shown = format!("git {}", args.join(" "));
    let output = cmd.output().map_err(|e| {
        Error::external(format!("cannot run `{shown}` in {}: {e}", dir.display()))
            .with_hint("install git and make sure it is on PATH")
    })?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(Error::external(format!(
            "`{shown}` failed in {}: {}",
            dir.display(),
            stderr.trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}
