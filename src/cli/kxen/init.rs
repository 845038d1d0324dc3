//! `agent init` and `policy init`: write a starter file, never over an existing one.

use std::path::Path;

use serde_json::json;

use crate::cli::output::{self, Format};
use crate::error::{ExitStatus, Result};
use crate::fsx;

/// Writes `content` to `path` (refusing to overwrite) and reports it.
pub fn write_starter(path: &Path, content: &str, what: &str, format: Format) -> Result<ExitStatus> {
    fsx::create_new(path, content.as_bytes(), 0o644)?;
    match format {
        Format::Jsonl => output::json_line(&json!({
            "type": "fileWritten", "path": path.display().to_string(), "what": what
        })),
        Format::Text => output::line(&format!("wrote {what} to {}", path.display())),
    }
    Ok(ExitStatus::Success)
}

/// The arguments of `kxen-agent agent init`.
#[derive(Debug, clap::Args)]
pub struct AgentInitArgs {
    /// Where to write it.
    #[arg(long, short, default_value = "agent.yaml")]
    pub output: std::path::PathBuf,
}

/// The arguments of `kxen-agent policy init`.
#[derive(Debug, clap::Args)]
pub struct PolicyInitArgs {
    /// Where to write it.
    #[arg(long, short, default_value = "policy.json")]
    pub output: std::path::PathBuf,
}
