//! `dwp abilities`: the effective abilities and where each comes from (read-only).

use clap::Args;

use super::{RepoArgs, print_document, print_warnings};
use crate::dwp::abilities;
use crate::error::{ExitStatus, Result};

#[derive(Debug, Args)]
pub struct AbilitiesArgs {
    #[command(flatten)]
    repo: RepoArgs,
    /// Host-declared abilities as a JSON object over the closed set; wins over the host records.
    #[arg(long, value_name = "JSON")]
    caps: Option<String>,
    /// Ignore the addon registry (repository and user files); only host-declared abilities count.
    #[arg(long)]
    host_only: bool,
}

pub fn run(args: AbilitiesArgs) -> Result<ExitStatus> {
    let root = args.repo.root()?;
    let eff = abilities::effective(root.as_deref(), args.caps.as_deref(), args.host_only)?;
    print_warnings(&eff.warnings);
    print_document(&eff.to_json());
    Ok(ExitStatus::Success)
}
