//! Running the git CLI, for the operations our gix features do not cover (worktrees, status).
//!
//! The design card allows `git worktree add` as the fallback for gix's `worktree-mutation`
//! feature; we keep gix's features minimal and take the fallback. git runs with a controlled
//! environment so the outcome does not depend on who runs us: an empty environment except `PATH`,
//! no system or global config (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`), no prompts,
//! no pager, the C locale, and a fixed identity for reflogs.
//!
//! The repository's own config still applies, and it can name programs git would run for us —
//! planted by an agent, or by whoever made the repository: `core.fsmonitor`, hooks, filter
//! drivers (`smudge`/`clean`/`process`, selected by attributes), `core.sshCommand`, pagers,
//! editors, credential helpers, diff and merge drivers. None of them may run: before every git
//! command we read the effective config (`git config --list`, includes expanded) and override
//! every key that names a program with a value that runs nothing (`-c KEY=` — empty —, `false`
//! for `core.fsmonitor`, `pager.*` and `filter.*.required`, `/dev/null` for `core.hooksPath`), forbid every transport
//! (`protocol.allow=never`) and submodule recursion. Then we read the config again with the
//! overrides and **refuse** (exit 6) if any such key still has a value (a key `-c` cannot spell,
//! say): fail closed. Every command is pinned to the repository's trusted layout
//! ([`super::layout`]: `GIT_DIR`, `GIT_COMMON_DIR`, `GIT_WORK_TREE`), so a pointer file planted
//! in the workspace cannot send it to another git directory and its config. Consequences worth knowing: filters do not run when a worktree is checked
//! out (git-lfs files stay pointers), and `git status` compares content without clean filters.

use std::path::Path;
use std::process::{Command, Stdio};

use super::layout::{self, Layout};
use crate::error::{Error, Result};

/// Overrides passed to every git command, whatever the repository's config says.
const FIXED: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=",
    "core.sshCommand=",
    "core.askPass=",
    "credential.helper=",
    "protocol.allow=never",
    "submodule.recurse=false",
];

/// Last name segments (lower case) of config keys that name a program git may run.
const PROGRAM_NAMES: &[&str] = &[
    "fsmonitor",
    "hookspath",
    "sshcommand",
    "pager",
    "editor",
    "askpass",
    "gitproxy",
    "smudge",
    "clean",
    "process",
    "textconv",
    "command",
    "cmd",
    "external",
    "driver",
    "program",
    "helper",
    "packobjectshook",
    "alternaterefscommand",
    "uploadpack",
    "receivepack",
];

/// The value that makes `key` (as `git config --list` prints it) run nothing, if it names a
/// program at all.
pub(super) fn neutral_value(key: &str) -> Option<&'static str> {
    let lower = key.to_ascii_lowercase();
    let section = lower.split('.').next().unwrap_or("");
    let name = lower.rsplit('.').next().unwrap_or("");
    if section == "pager" {
        return Some("false");
    }
    match (section, name) {
        ("core", "hookspath") => Some("/dev/null"),
        ("core", "fsmonitor") => Some("false"),
        // A required filter whose commands are emptied would make git fail instead.
        ("filter", "required") => Some("false"),
        _ if PROGRAM_NAMES.contains(&name) => Some(""),
        _ => None,
    }
}

/// `git` with the controlled environment and `overrides` as `-c` options, in `dir`, pinned to
/// `layout` (no pointer file is followed; see [`super::layout`]).
fn base_command(dir: &Path, layout: Option<&Layout>, overrides: &[String]) -> Command {
    let mut cmd = Command::new("git");
    cmd.env_clear()
        .env("PATH", crate::own_env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .env("GIT_AUTHOR_NAME", "kxen-agent")
        .env("GIT_AUTHOR_EMAIL", "kxen-agent@localhost")
        .env("GIT_COMMITTER_NAME", "kxen-agent")
        .env("GIT_COMMITTER_EMAIL", "kxen-agent@localhost")
        .arg("--no-pager");
    for o in FIXED
        .iter()
        .copied()
        .chain(overrides.iter().map(String::as_str))
    {
        cmd.args(["-c", o]);
    }
    if let Some(layout) = layout {
        layout.apply(&mut cmd);
    }
    cmd.current_dir(dir).stdin(Stdio::null());
    cmd
}

/// The effective config in `dir` with `overrides`, as `(key, value)` in git's order.
// Allowed: kxen-agent's own git, with a cleared environment and every program-running key neutralized (module doc); never an agent's program.
#[allow(clippy::disallowed_methods)]
fn config_list(
    dir: &Path,
    layout: Option<&Layout>,
    overrides: &[String],
) -> Result<Vec<(String, String)>> {
    let output = base_command(dir, layout, overrides)
        .args(["config", "--list", "-z"])
        .output()
        .map_err(|e| {
            Error::external(format!(
                "cannot run `git config --list` in {}: {e}",
                dir.display()
            ))
            .with_hint("install git and make sure it is on PATH")
        })?;
    if !output.status.success() {
        return Err(Error::external(format!(
            "`git config --list` failed in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(output
        .stdout
        .split(|&b| b == 0)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let entry = String::from_utf8_lossy(entry);
            // `key\nvalue`, or a bare `key` (a boolean true).
            match entry.split_once('\n') {
                Some((k, v)) => (k.to_string(), v.to_string()),
                None => (entry.into_owned(), "true".to_string()),
            }
        })
        .collect())
}

/// The `-c` overrides that neutralize every program the config in `dir` names; refuses (exit
/// 6) when one cannot be neutralized.
fn neutralizing_overrides(dir: &Path, layout: Option<&Layout>) -> Result<Vec<String>> {
    let mut overrides: Vec<String> = Vec::new();
    for (key, value) in config_list(dir, layout, &[])? {
        if let Some(neutral) = neutral_value(&key)
            && value != neutral
        {
            let o = format!("{key}={neutral}");
            if !overrides.contains(&o) {
                overrides.push(o);
            }
        }
    }
    // Check what git now sees: the last value of every program key must be neutral.
    let mut last: Vec<(String, String)> = Vec::new();
    for (key, value) in config_list(dir, layout, &overrides)? {
        match last.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => last.push((key, value)),
        }
    }
    for (key, value) in last {
        if let Some(neutral) = neutral_value(&key)
            && value != neutral
        {
            return Err(Error::policy(format!(
                "the git config of {} sets `{key}`, which names a program git would run, and \
                 kxen-agent cannot override it; refusing to run git there",
                dir.display()
            ))
            .with_hint(format!(
                "inspect it with `git config --show-origin --get-all '{key}'` and remove it if \
                 you did not put it there"
            )));
        }
    }
    Ok(overrides)
}

/// Runs `git ARGS…` in `dir` with every repository-configured program neutralized (module
/// docs); returns stdout, or an `External` error (exit 9) with git's stderr.
// Allowed: kxen-agent's own git, with a cleared environment and every program-running key neutralized (module doc); never an agent's program.
#[allow(clippy::disallowed_methods)]
pub(crate) fn run(dir: &Path, args: &[&str]) -> Result<String> {
    let layout = layout::derive(dir)?;
    let overrides = neutralizing_overrides(dir, layout.as_ref())?;
    let mut cmd = base_command(dir, layout.as_ref(), &overrides);
    cmd.args(args);
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

/// [`run`]'s command for callers that only need the exit status (`git ls-files
/// --error-unmatch`): the same environment and neutralizing overrides.
pub(crate) fn command(dir: &Path, args: &[&str]) -> Result<Command> {
    let layout = layout::derive(dir)?;
    let overrides = neutralizing_overrides(dir, layout.as_ref())?;
    let mut cmd = base_command(dir, layout.as_ref(), &overrides);
    cmd.args(args);
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn program_keys_get_a_neutral_value() {
        for (key, want) in [
            ("core.fsmonitor", Some("false")),
            ("core.hooksPath", Some("/dev/null")),
            ("filter.lfs.smudge", Some("")),
            ("filter.evil.process", Some("")),
            ("filter.My.Driver.clean", Some("")),
            ("core.sshcommand", Some("")),
            ("pager.log", Some("false")),
            ("credential.https://example.com.helper", Some("")),
            ("diff.pdf.textconv", Some("")),
            ("merge.ours.driver", Some("")),
            ("gpg.program", Some("")),
            ("core.bare", None),
            ("user.name", None),
            ("filter.lfs.required", Some("false")),
            ("remote.origin.url", None),
        ] {
            assert_eq!(neutral_value(key), want, "{key}");
        }
    }
}
