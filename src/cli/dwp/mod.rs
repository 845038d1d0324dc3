//! `dwp`: the Deep Work Plan 7 resources-and-abilities command line.
//!
//! Documents go to stdout (sorted-key, two-space JSON or plain lines); warnings go to stderr as
//! `WARNING: …`, each exactly once; errors as `ERROR: …` plus `hint: …` lines.

use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};

mod abilities;
mod config;
mod onboard;
mod plan;
mod resources;

use super::output::{self, Diagnostics};
use crate::error::{Error, ErrorKind, ExitStatus, Result};

/// What each exit code means for `dwp` (the codes are [`ErrorKind`]'s); `None`: never used.
fn exit_meaning(kind: ErrorKind) -> Option<&'static str> {
    Some(match kind {
        ErrorKind::Failed => {
            "failed (a descriptor audit found a FAIL, a stale summary, a resource hold, or an \
             internal\n      error)"
        }
        ErrorKind::Usage => {
            "usage error, or a refused config write (the file is left unchanged); a --sections \
             list\n      without a mandatory section or naming an unknown section"
        }
        ErrorKind::NotFound => {
            "not found (plan folder, contract, task, an undeclared limit, an unknown reservation \
             key)"
        }
        ErrorKind::InvalidInput => {
            "invalid input (unknown ability in --caps, bad JSON, an invalid contract or journal \
             event)"
        }
        ErrorKind::Conflict => {
            "conflict (another writer holds the plan's lock; a reservation already settled \
             otherwise)"
        }
        ErrorKind::Corrupt => "corrupt (a journal damaged mid-file)",
        ErrorKind::Policy
        | ErrorKind::InputRequired
        | ErrorKind::Budget
        | ErrorKind::External
        | ErrorKind::Canceled => return None,
    })
}

/// The `dwp --help` exit-code table.
pub fn exit_code_table() -> String {
    crate::error::exit_code_table("success", exit_meaning)
}

/// Deep Work Plan 7: the committed addon registry, effective abilities, plan manifests,
/// accounting and the resource frame.
#[derive(Debug, Parser)]
#[command(name = "dwp", version, after_help = exit_code_table())]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Read and change the addon registry (.dwp/config.json, ~/.dwp/config.json).
    #[command(subcommand)]
    Config(config::ConfigCommand),
    /// Create .dwp/config.json, add the .gitignore rules and enable the addons you name.
    Onboard(onboard::OnboardArgs),
    /// Derive the per-task context manifest (JSON, or Markdown with --md) from the plan records.
    Manifest(plan::ManifestArgs),
    /// Check a summary's inputs_fingerprint against the task's current one (stale: exit 1).
    Freshness(plan::FreshnessArgs),
    /// Report the four separate quantities: instruction bytes, provider tokens, cost, wall clock.
    Accounting(plan::AccountingArgs),
    /// Print the effective abilities, their sources, each enabled addon's verdict and the
    /// deferred addons. Read-only.
    Abilities(abilities::AbilitiesArgs),
    /// The resource frame: capabilities, and per plan report, routing, hold, exhaust, recover,
    /// settle.
    #[command(subcommand)]
    Resources(resources::ResourcesCommand),
}

/// Where a command finds its repository: `--plan`, else `--repo`, else the git repository
/// containing the current directory, else the current directory.
#[derive(Debug, Clone, Args)]
pub struct RepoArgs {
    /// A plan folder (<repo>/.dwp/plans/PLAN_…); its repository is the parent of `.dwp`.
    #[arg(long, value_name = "DIR")]
    pub plan: Option<PathBuf>,
    /// The repository root.
    #[arg(long, value_name = "DIR")]
    pub repo: Option<PathBuf>,
}

impl RepoArgs {
    /// The repository root, or `None` for a plan folder outside `<repo>/.dwp/plans/`.
    pub fn root(&self) -> Result<Option<PathBuf>> {
        crate::dwp::repo::discover(self.plan.as_deref(), self.repo.as_deref())
    }

    /// The repository root a writer needs; a plan outside a repository is a usage error.
    pub fn root_for_writing(&self) -> Result<PathBuf> {
        self.root()?.ok_or_else(|| {
            Error::usage(format!(
                "{} is not inside <repo>/.dwp/plans/, so there is no repository file to write",
                self.plan.as_deref().unwrap_or(Path::new(".")).display()
            ))
            .with_hint("pass --repo DIR instead")
        })
    }
}

/// Entry point of the `dwp` binary; returns the process exit code.
pub fn main() -> i32 {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(status) => status,
        Err(err) => Diagnostics::DWP.error(&err),
    }
    .code()
}

fn dispatch(cli: Cli) -> Result<ExitStatus> {
    match cli.command {
        Command::Config(cmd) => config::run(cmd),
        Command::Onboard(args) => onboard::run(args),
        Command::Manifest(args) => plan::manifest(args),
        Command::Freshness(args) => plan::freshness(args),
        Command::Accounting(args) => plan::accounting(args),
        Command::Abilities(args) => abilities::run(args),
        Command::Resources(cmd) => resources::run(cmd),
    }
}

/// Prints each warning once, in order, as `WARNING: <text>` on stderr.
pub fn print_warnings(warnings: &[String]) {
    Diagnostics::DWP.warnings(warnings);
}

/// Prints a JSON document as sorted-key, two-space JSON with one trailing newline.
pub fn print_document(value: &serde_json::Value) {
    output::line(&crate::canonical::to_pretty(value));
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }
}
