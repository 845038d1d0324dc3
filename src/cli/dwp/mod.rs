//! `dwp`: the Deep Work Plan 7 resources-and-abilities command line.

use clap::Parser;

/// Deep Work Plan 7: the committed addon registry, effective abilities, plan manifests,
/// accounting and the resource frame.
#[derive(Debug, Parser)]
#[command(name = "dwp", version)]
pub struct Cli {}

/// Entry point of the `dwp` binary; returns the process exit code.
pub fn main() -> i32 {
    let _cli = Cli::parse();
    0
}
