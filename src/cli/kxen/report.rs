//! `session report SES [--output FILE] [--summary FILE] [--config FILE]`: the offline HTML
//! report of a Session (see `crate::report`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use serde_json::json;

use crate::cli::output::{self, Format};
use crate::error::{Error, ExitStatus, Result};
use crate::fsx;
use crate::report::{self, Pricing};
use crate::state::StateDir;

/// Where the page goes.
enum Target {
    Stdout,
    File(PathBuf),
}

/// `--output` absent: stdout when it is not a terminal (a pipe, a redirect), otherwise
/// `SES.html` in the current directory (HTML on a terminal helps nobody).
fn target(output: Option<&Path>, session_id: &str) -> Target {
    match output {
        Some(p) if p == Path::new("-") => Target::Stdout,
        Some(p) => Target::File(p.to_path_buf()),
        None if std::io::stdout().is_terminal() => {
            Target::File(PathBuf::from(format!("{session_id}.html")))
        }
        None => Target::Stdout,
    }
}

pub fn report(
    state: &StateDir,
    session_id: &str,
    output: Option<&Path>,
    summary: Option<&Path>,
    config: Option<&Path>,
    format: Format,
) -> Result<ExitStatus> {
    let target = target(output, session_id);
    if let Target::File(path) = &target {
        check_file("--output", path)?;
    }
    if let Some(path) = summary {
        check_file("--summary", path)?;
    }
    let pricing = match config {
        Some(path) => Pricing::from_config(&crate::config::ModelConfig::load(Some(path))?),
        None => Pricing::default(),
    };
    let built = report::build(state, session_id, &pricing)?;
    if let Some(path) = summary {
        fsx::write_atomic(path, built.summary.as_bytes(), fsx::STATE_FILE_MODE)?;
    }
    match &target {
        Target::Stdout => output::raw(&built.html),
        Target::File(path) => {
            fsx::write_atomic(path, built.html.as_bytes(), fsx::STATE_FILE_MODE)?;
            let verified = built.verify_error.is_none();
            match format {
                Format::Jsonl => output::json_line(&json!({
                    "type": "sessionReport",
                    "sessionId": built.session_id,
                    "path": path,
                    "bytes": built.html.len(),
                    "summary": summary,
                    "verified": verified,
                })),
                Format::Text => output::line(&format!(
                    "wrote the report of {} to {} ({} bytes){}",
                    built.session_id,
                    path.display(),
                    built.html.len(),
                    if verified {
                        ""
                    } else {
                        "; the Session FAILED verification"
                    }
                )),
            }
        }
    }
    match built.verify_error {
        // The report is written (it shows the failure); the exit says it too.
        Some(err) => Err(err.with_hint(format!(
            "the report shows what `kxen-agent session verify {session_id}` found"
        ))),
        None => Ok(ExitStatus::Success),
    }
}

/// Refuses a path the page or summary cannot replace atomically, before anything is read: a
/// directory, a symlink or device (the rename would replace the link, not write through it), a
/// path whose directory does not exist.
fn check_file(flag: &str, path: &Path) -> Result<()> {
    if path.is_dir() {
        return Err(Error::usage(format!(
            "{flag} {} is a directory; name a file",
            path.display()
        ))
        .with_hint(format!("e.g. {flag} {}/report.html", path.display())));
    }
    if let Ok(meta) = path.symlink_metadata()
        && !meta.file_type().is_file()
    {
        return Err(Error::usage(format!(
            "{flag} {} is a symlink or a special file; the report replaces files atomically, so \
             it writes only to a regular file or a new path",
            path.display()
        ))
        .with_hint("name a regular file (for the page, `--output -` writes it to stdout)"));
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(Error::not_found(format!(
            "the directory {} of {flag} {} does not exist",
            dir.display(),
            path.display()
        ))
        .with_hint(format!("create it first (mkdir -p {})", dir.display())));
    }
    Ok(())
}

/// The arguments of `kxen-agent session report`.
#[derive(Debug, clap::Args)]
pub struct SessionReportArgs {
    /// The Session id (`ses_…`).
    pub session: String,
    /// Where to write the page (mode 0600, replaced atomically); `-` is stdout. Default:
    /// stdout when it is not a terminal, otherwise `SES.html` in the current directory.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Also write a short Markdown summary (status, cost, tool calls, the exact `run
    /// approve` / `run resolve` commands of what waits), e.g. for $GITHUB_STEP_SUMMARY.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<std::path::PathBuf>,
    /// A model config whose `[providers.NAME.price]` rates price the recorded tokens (runs
    /// record the provider's name, not its rates). Without it, only tokens are shown.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}
