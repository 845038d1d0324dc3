//! `session push`, `session pull`, `session list --remote`.

use std::path::Path;

use serde_json::json;

use crate::cli::output::{self, Format};
use crate::error::{Error, ExitStatus, Result};
use crate::state::StateDir;
use crate::sync::{self, PullMode};

pub fn push(
    state: &StateDir,
    session_id: &str,
    remote: Option<&str>,
    format: Format,
) -> Result<ExitStatus> {
    let done = sync::push(state, session_id, remote, false)?;
    match format {
        Format::Jsonl => output::json_line(&super::bundle::tagged("sessionPushed", &done)),
        Format::Text => output::line(&format!(
            "pushed {} to `{}` as {} ({}; {} files, {} blobs); it holds task text, tool \
             arguments and outputs: the remote's readers can read them",
            done.session_id,
            done.remote,
            &done.snapshot[..12],
            if done.changed {
                "a new snapshot"
            } else {
                "unchanged"
            },
            done.files,
            done.blobs
        )),
    }
    Ok(ExitStatus::Success)
}

pub fn pull(
    state: &StateDir,
    session_id: &str,
    remote: Option<&str>,
    workspace: &Path,
    format: Format,
) -> Result<ExitStatus> {
    let done = sync::pull(state, session_id, remote, workspace, PullMode::Pull)?;
    match format {
        Format::Jsonl => output::json_line(&super::bundle::tagged("sessionPulled", &done)),
        Format::Text => {
            let what = match done.action {
                "imported" => "imported",
                "fastForwarded" => "fast-forwarded",
                _ => "already up to date:",
            };
            output::line(&format!(
                "{what} {} from `{}`; continue with `kxen-agent --resume {} --workspace {}`",
                done.session_id,
                done.remote,
                done.session_id,
                done.workspace.display()
            ));
        }
    }
    Ok(ExitStatus::Success)
}

pub fn list(
    state: &StateDir,
    repository: Option<&Path>,
    remote: &str,
    format: Format,
) -> Result<ExitStatus> {
    let dir = match repository {
        Some(p) => p.to_path_buf(),
        None => std::env::current_dir()
            .map_err(|e| Error::io("read the current directory", Path::new("."), e))?,
    };
    let objects = crate::git::ObjectStore::open(&dir)?;
    let remote =
        crate::git::resolve_remote(objects.dir(), Some(remote), &sync::writable_roots(state))?;
    let sessions = sync::list(objects.dir(), &remote)?;
    match format {
        Format::Jsonl => {
            for s in &sessions {
                let mut v = super::bundle::tagged("remoteSession", s);
                v["remote"] = json!(remote.name());
                output::json_line(&v);
            }
        }
        Format::Text if sessions.is_empty() => {
            output::line(&format!("no sessions on `{remote}`"));
        }
        Format::Text => {
            for s in &sessions {
                output::line(&format!(
                    "{}  {}{}",
                    s.session_id,
                    &s.snapshot[..12.min(s.snapshot.len())],
                    if s.leased {
                        "  leased (a run holds it)"
                    } else {
                        ""
                    }
                ));
            }
        }
    }
    Ok(ExitStatus::Success)
}

/// The arguments of `kxen-agent session push`.
#[derive(Debug, clap::Args)]
pub struct SessionPushArgs {
    /// The Session id (`ses_…`).
    pub session: String,
    /// The git remote (default: the current branch's upstream remote, else `origin`).
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
}

/// The arguments of `kxen-agent session pull`.
#[derive(Debug, clap::Args)]
pub struct SessionPullArgs {
    /// The Session id (`ses_…`).
    pub session: String,
    /// The git remote (default: the current branch's upstream remote, else `origin`).
    #[arg(long, value_name = "NAME")]
    pub remote: Option<String>,
    /// The clone of the Session's repository to bind the Session to.
    #[arg(long, value_name = "PATH")]
    pub workspace: std::path::PathBuf,
}
