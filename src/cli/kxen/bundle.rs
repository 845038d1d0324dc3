//! `session verify SES`, `session export SES --output FILE`, `session import FILE --workspace PATH`.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::bundle::{self, ImportRequest};
use crate::cli::output::{self, Format};
use crate::error::{ExitStatus, Result};
use crate::session::{store, verify};
use crate::state::StateDir;

pub fn verify(state: &StateDir, session_id: &str, format: Format) -> Result<ExitStatus> {
    let paths = store::session_paths(state, session_id)?;
    let report = verify::verify(
        &paths,
        session_id,
        &state.blobs_dir(),
        verify::Mode::InPlace,
    )?;
    match format {
        Format::Jsonl => {
            let mut value = json!({"type": "sessionVerified"});
            if let (Some(out), Ok(serde_json::Value::Object(fields))) =
                (value.as_object_mut(), serde_json::to_value(&report))
            {
                out.extend(fields);
            }
            output::json_line(&value);
        }
        Format::Text => {
            output::line(&format!(
                "{session_id}: ok ({} messages, {} runs, {} operations, {} blobs)",
                report.messages,
                report.runs.len(),
                report.operations,
                report.blobs.len()
            ));
            for torn in &report.torn_tails {
                output::line(&format!(
                    "note: {torn} is a torn last line from a crash; it is ignored and repaired by the next run"
                ));
            }
        }
    }
    Ok(ExitStatus::Success)
}

pub fn export(
    state: &StateDir,
    session_id: &str,
    output: &Path,
    format: Format,
) -> Result<ExitStatus> {
    let done = bundle::export(state, session_id, output)?;
    match format {
        Format::Jsonl => output::json_line(&tagged("sessionExported", &done)),
        Format::Text => output::line(&format!(
            "exported {}{} to {} ({} files, {} blobs); it holds task text, tool arguments and outputs: keep it private",
            done.session_id,
            with_tasks(&done.tasks),
            done.output.display(),
            done.files,
            done.blobs
        )),
    }
    Ok(ExitStatus::Success)
}

pub fn import(
    state: &StateDir,
    file: PathBuf,
    workspace: PathBuf,
    format: Format,
) -> Result<ExitStatus> {
    let done = bundle::import(
        state,
        &ImportRequest {
            bundle: file,
            workspace,
        },
    )?;
    match format {
        Format::Jsonl => output::json_line(&tagged("sessionImported", &done)),
        Format::Text => output::line(&format!(
            "imported {} ({} messages, {} runs){}, bound to {}; continue with `kxen-agent --resume {} --workspace {}`",
            done.session_id,
            done.messages,
            done.runs,
            with_tasks(&done.tasks),
            done.workspace.display(),
            done.session_id,
            done.workspace.display()
        )),
    }
    Ok(ExitStatus::Success)
}

/// ` with its N task children`, or nothing.
fn with_tasks(tasks: &[String]) -> String {
    match tasks.len() {
        0 => String::new(),
        1 => " with its task child".into(),
        n => format!(" with its {n} task children"),
    }
}

pub(super) fn tagged<T: serde::Serialize>(kind: &str, value: &T) -> serde_json::Value {
    let mut out = json!({"type": kind});
    if let (Some(map), Ok(serde_json::Value::Object(fields))) =
        (out.as_object_mut(), serde_json::to_value(value))
    {
        map.extend(fields);
    }
    out
}

/// The arguments of `kxen-agent session verify`.
#[derive(Debug, clap::Args)]
pub struct SessionVerifyArgs {
    /// The Session id (`ses_…`).
    pub session: String,
}

/// The arguments of `kxen-agent session export`.
#[derive(Debug, clap::Args)]
pub struct SessionExportArgs {
    /// The Session id (`ses_…`).
    pub session: String,
    /// The bundle to write (`*.bundle.json`): a new path or a regular file (it is replaced
    /// atomically, so not `-`, a symlink or a device).
    #[arg(long, short, value_name = "FILE")]
    pub output: std::path::PathBuf,
}

/// The arguments of `kxen-agent session import`.
#[derive(Debug, clap::Args)]
pub struct SessionImportArgs {
    /// The bundle (`*.bundle.json`).
    pub file: std::path::PathBuf,
    /// The workspace to bind the imported Session to.
    #[arg(long, value_name = "PATH")]
    pub workspace: std::path::PathBuf,
}
