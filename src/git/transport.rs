//! `git push`, `git fetch` and `git ls-remote` against the user's remotes: the user's own
//! credential helpers, SSH config and agent must work, the repository's config must not run
//! anything.
//!
//! The local commands of [`super::cli`] run with an empty environment and no system or global
//! config. A transport cannot: credentials live in `~/.gitconfig` (`credential.helper`), in
//! `~/.ssh/config` and in the SSH agent. So a transport command gets, on top of `cli`'s fixed
//! environment:
//! - the variables a transport needs and nothing else ([`PASSED`]: `HOME`, `SSH_AUTH_SOCK`,
//!   `GIT_SSH_COMMAND`, proxies, CA bundles, …; never a provider key or other secret of ours);
//! - the system and global config (the user's own, trusted as the user's shell trusts them).
//!
//! The repository's own config (scopes `local` and `worktree`, where an agent with write access
//! to the workspace could plant a key) is still neutralized exactly as in `cli`: every key that
//! names a program is overridden with a value that runs nothing, followed by the trusted values
//! of the same key (so a global `credential.helper` still runs, a repository one does not), and
//! the command is refused (exit 6) if the result still holds an untrusted program. Hooks never
//! run (`core.hooksPath=/dev/null`, `--no-verify`), and only the `https`, `http`, `ssh`, `git`
//! and `file` transports are allowed (`protocol.allow=never` otherwise: no `ext::` commands, no
//! remote helpers picked by a planted URL).
//!
//! Where the transport goes is decided by trusted files only (docs/git-trust.md): every command
//! is pinned to the repository's trusted layout ([`super::layout`]), the keys that steer it must
//! come from the repository's `config` or the user's own, and a local remote inside a directory
//! a fenced command can write is refused ([`super::trust`]).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::cli::neutral_value;
use super::layout::{self, Layout};
use super::trust::{self, Entry};
use crate::error::{Error, Result};

/// Environment variables a transport may need, passed through when set.
const PASSED: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "XDG_CONFIG_HOME",
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_SSH_VARIANT",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "all_proxy",
    "ALL_PROXY",
    "no_proxy",
    "NO_PROXY",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

/// Overrides of every transport command.
const FIXED: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=",
    "submodule.recurse=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "protocol.allow=never",
    "protocol.https.allow=always",
    "protocol.http.allow=always",
    "protocol.ssh.allow=always",
    "protocol.git.allow=always",
    "protocol.file.allow=always",
];

/// Scopes whose config an agent could have written (the repository's own files).
fn untrusted(scope: &str) -> bool {
    matches!(scope, "local" | "worktree")
}

fn base(dir: &Path, layout: &Layout, overrides: &[String]) -> Command {
    let mut cmd = Command::new("git");
    cmd.env_clear()
        .env("PATH", crate::own_env::var_os("PATH").unwrap_or_default())
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("LC_ALL", "C")
        .env("GIT_AUTHOR_NAME", "kxen-agent")
        .env("GIT_AUTHOR_EMAIL", "kxen-agent@localhost")
        .env("GIT_COMMITTER_NAME", "kxen-agent")
        .env("GIT_COMMITTER_EMAIL", "kxen-agent@localhost");
    for name in PASSED {
        if let Some(v) = crate::own_env::var_os(name) {
            cmd.env(name, v);
        }
    }
    layout.apply(&mut cmd);
    cmd.arg("--no-pager");
    for o in FIXED
        .iter()
        .copied()
        .chain(overrides.iter().map(String::as_str))
    {
        cmd.args(["-c", o]);
    }
    cmd.current_dir(dir).stdin(Stdio::null());
    cmd
}

/// The effective config with scope and origin, in git's order.
// Allowed: kxen-agent's own git transport, with the repository's program-running keys neutralized (module doc); never an agent's program.
#[allow(clippy::disallowed_methods)]
fn scoped_config(dir: &Path, layout: &Layout, overrides: &[String]) -> Result<Vec<Entry>> {
    let output = base(dir, layout, overrides)
        .args(["config", "--list", "--show-scope", "--show-origin", "-z"])
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
    let mut out = Vec::new();
    let mut parts = output.stdout.split(|&b| b == 0);
    while let (Some(scope), Some(origin), Some(entry)) = (parts.next(), parts.next(), parts.next())
    {
        let entry = String::from_utf8_lossy(entry);
        let (key, value) = match entry.split_once('\n') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (entry.into_owned(), "true".to_string()),
        };
        out.push(Entry {
            scope: String::from_utf8_lossy(scope).into_owned(),
            origin: String::from_utf8_lossy(origin).into_owned(),
            key,
            value,
        });
    }
    Ok(out)
}

/// The overrides that neutralize every program named by the repository's own config while
/// keeping the trusted values of the same keys; refuses (exit 6) when one cannot be neutralized,
/// when a key that steers the transport comes from a file a fenced command could write, or when
/// `remote` is a local repository inside a writable root ([`super::trust`]).
fn overrides(dir: &Path, layout: &Layout, remote: &Remote) -> Result<Vec<String>> {
    let config = scoped_config(dir, layout, &[])?;
    trust::check_origins(&config, layout, dir)?;
    trust::check_local_remote(&config, &remote.name, dir, &remote.roots)?;
    let mut keys: Vec<String> = Vec::new();
    for e in &config {
        if untrusted(&e.scope) && neutral_value(&e.key).is_some() && !keys.contains(&e.key) {
            keys.push(e.key.clone());
        }
    }
    let mut out = Vec::new();
    for key in &keys {
        let neutral = neutral_value(key).unwrap_or("");
        out.push(format!("{key}={neutral}"));
        for e in &config {
            if e.key == *key && !untrusted(&e.scope) && e.scope != "command" {
                out.push(format!("{key}={}", e.value));
            }
        }
    }
    // What git now sees: the last value of each program key is neutral or a trusted one.
    let trusted: Vec<(String, String)> = config
        .iter()
        .filter(|e| !untrusted(&e.scope))
        .map(|e| (e.key.to_ascii_lowercase(), e.value.clone()))
        .collect();
    let mut last: Vec<(String, String)> = Vec::new();
    // With nothing to neutralize the second read would be the first one again (same command
    // line): check the first.
    let after = if out.is_empty() {
        config
    } else {
        scoped_config(dir, layout, &out)?
    };
    for e in after {
        match last.iter_mut().find(|(k, _)| *k == e.key) {
            Some(entry) => entry.1 = e.value,
            None => last.push((e.key, e.value)),
        }
    }
    for (key, value) in last {
        let Some(neutral) = neutral_value(&key) else {
            continue;
        };
        let lower = key.to_ascii_lowercase();
        if value != neutral && !trusted.iter().any(|(k, v)| *k == lower && *v == value) {
            return Err(Error::policy(format!(
                "the git config of {} sets `{key}`, which names a program git would run, and \
                 kxen-agent cannot override it; refusing to push or fetch there",
                dir.display()
            ))
            .with_hint(format!(
                "inspect it with `git config --show-origin --get-all '{key}'`; a credential \
                 helper or ssh command belongs in ~/.gitconfig"
            )));
        }
    }
    Ok(out)
}

/// Runs a transport command `git ARGS…` in `dir`; returns its output whatever the exit status
/// (the caller reads rejections from it), or exit 9 if git cannot be started.
pub(crate) fn run(dir: &Path, remote: &Remote, args: &[&str]) -> Result<Output> {
    run_with(dir, remote, &[], args)
}

/// [`run`] with `extra` (`key=value`) set for this command, after the neutralizing overrides.
// Allowed: kxen-agent's own git transport, with the repository's program-running keys neutralized (module doc); never an agent's program.
#[allow(clippy::disallowed_methods)]
fn run_with(dir: &Path, remote: &Remote, extra: &[&str], args: &[&str]) -> Result<Output> {
    // Fail closed: a transport of ours always runs in a repository whose layout is known.
    let layout = layout::derive(dir)?.ok_or_else(|| {
        Error::not_found(format!("{} is not inside a git repository", dir.display()))
    })?;
    let overrides = overrides(dir, &layout, remote)?;
    let mut cmd = base(dir, &layout, &overrides);
    for e in extra {
        cmd.args(["-c", e]);
    }
    cmd.args(args);
    cmd.output().map_err(|e| {
        Error::external(format!(
            "cannot run `git {}` in {}: {e}",
            args.join(" "),
            dir.display()
        ))
        .with_hint("install git and make sure it is on PATH")
    })
}

/// A configured remote every transport command of ours goes to by name, with the directories
/// it must not lie in ([`super::trust::check_local_remote`], checked by every command on the
/// config that command reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    name: String,
    roots: Vec<PathBuf>,
}

impl Remote {
    /// The remote's name in the repository's config.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl std::fmt::Display for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)
    }
}

/// The remote to use: `name` if given, else the upstream remote of the current branch, else
/// `origin`. It must be configured in the repository (exit 3 otherwise). `writable` are the
/// directories a fenced command can write besides the repository itself (kxen-agent's state
/// dir): a local remote inside them, or inside the repository's working tree or git
/// directories, is refused by every transport command.
pub fn resolve_remote(dir: &Path, name: Option<&str>, writable: &[PathBuf]) -> Result<Remote> {
    let repo = super::repo::open_or_discover(dir)?;
    let names = repo.remote_names();
    let chosen = match name {
        Some(n) => n.to_string(),
        None => repo
            .upstream_remote()
            .unwrap_or_else(|| "origin".to_string()),
    };
    if !names.contains(&chosen) {
        let known = if names.is_empty() {
            "none".to_string()
        } else {
            names.join(", ")
        };
        return Err(Error::not_found(format!(
            "git remote `{chosen}` is not configured in {} (remotes: {known})",
            dir.display()
        ))
        .with_hint("name a configured remote with --remote NAME (see `git remote -v`)"));
    }
    let mut roots = repo.layout().roots();
    roots.extend(writable.iter().cloned());
    Ok(Remote {
        name: chosen,
        roots,
    })
}

/// One ref update of a push.
#[derive(Debug, Clone)]
pub struct RefUpdate {
    /// The commit to set, `None` to delete the ref.
    pub new: Option<String>,
    pub dst: String,
    /// Compare-and-swap: the value the remote ref must still have (`Some(None)`: must not
    /// exist); `None`: an ordinary push (fast-forwards only).
    pub expect: Option<Option<String>>,
}

/// How a push ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pushed {
    Done,
    /// The remote refused: not a fast-forward, or the ref no longer had the expected value.
    Rejected {
        reason: String,
    },
}

/// Pushes `updates` to `remote` in one atomic transaction (one connection).
pub fn push(dir: &Path, remote: &Remote, updates: &[RefUpdate]) -> Result<Pushed> {
    let mut args: Vec<String> = [
        "push",
        "--porcelain",
        "--no-verify",
        "--no-recurse-submodules",
        "--atomic",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for u in updates {
        if let Some(expect) = &u.expect {
            args.push(format!(
                "--force-with-lease={}:{}",
                u.dst,
                expect.as_deref().unwrap_or("")
            ));
        }
    }
    args.push(remote.name.clone());
    for u in updates {
        args.push(format!("{}:{}", u.new.as_deref().unwrap_or(""), u.dst));
    }
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(dir, remote, &argv)?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() {
        return Ok(Pushed::Done);
    }
    // Porcelain: `<flag>\t<src>:<dst>\t<summary>`; `!` is a rejected ref.
    for line in stdout.lines() {
        let mut parts = line.split('\t');
        if let (Some("!"), Some(_), Some(summary)) = (parts.next(), parts.next(), parts.next()) {
            return Ok(Pushed::Rejected {
                reason: summary.to_string(),
            });
        }
    }
    Err(Error::external(format!(
        "`git push {remote}` failed in {}: {}",
        dir.display(),
        stderr.trim()
    ))
    .with_hint("check the remote's URL and your credentials for it (`git remote -v`, `git push`)"))
}

/// Fetches `src` from `remote` into the local ref `dst` (replacing it); `false` when the remote
/// has no `src`.
///
/// The fetched pack is kept as it came (`fetch.unpackLimit=1`), never exploded into loose
/// objects: git's default for fewer than 100 objects, and a snapshot is a few dozen large blobs,
/// so the default re-compressed every segment of the Session into a file of its own. Keeping the
/// pack halved the fetch of a 1,000-call Session (58 to 32 ms, benches/remote.rs); the pull
/// reads each blob once, from the pack. Packs a pull leaves are gathered by the repository's
/// next `git gc --auto`, as after any large fetch.
///
/// A fetch whose connectivity check fails ("did not send all necessary objects") is sent once
/// more. It was seen once, in a run of six claimers across two clones (50 trials), naming a
/// scratch ref of the fetch itself. The likely cause (not proven): git's check walks every ref
/// of the clone while the other claimers in it fetch into their own scratch refs, and one git
/// can meet a ref whose new objects it has not rescanned yet. The second fetch sees them;
/// damage that is really there fails it again.
pub fn fetch(dir: &Path, remote: &Remote, src: &str, dst: &str) -> Result<bool> {
    let spec = format!("+{src}:{dst}");
    let args = [
        "fetch",
        "--quiet",
        "--no-tags",
        "--no-write-fetch-head",
        "--no-recurse-submodules",
        &remote.name,
        &spec,
    ];
    let keep_pack = ["fetch.unpackLimit=1"];
    let mut out = run_with(dir, remote, &keep_pack, &args)?;
    if !out.status.success()
        && String::from_utf8_lossy(&out.stderr).contains("did not send all necessary objects")
    {
        out = run_with(dir, remote, &keep_pack, &args)?;
    }
    if out.status.success() {
        return Ok(true);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("couldn't find remote ref") {
        return Ok(false);
    }
    Err(Error::external(format!(
        "`git fetch {remote} {src}` failed in {}: {}",
        dir.display(),
        stderr.trim()
    ))
    .with_hint("check the remote's URL and your credentials for it (`git remote -v`, `git fetch`)"))
}

/// `(oid, ref)` of the remote refs matching `pattern` (`refs/kxen/sessions/*`).
pub fn ls_remote(dir: &Path, remote: &Remote, pattern: &str) -> Result<Vec<(String, String)>> {
    let out = run(dir, remote, &["ls-remote", "--refs", &remote.name, pattern])?;
    if !out.status.success() {
        return Err(Error::external(format!(
            "`git ls-remote {remote}` failed in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
        .with_hint("check the remote's URL and your credentials for it (`git remote -v`)"));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (oid, name) = l.split_once('\t')?;
            Some((oid.to_string(), name.to_string()))
        })
        .collect())
}
