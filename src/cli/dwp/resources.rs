//! `dwp resources …`: the resource frame. `capabilities` prints the declared host set.

use clap::Subcommand;

use super::print_document;
use crate::dwp::abilities;
use crate::error::Result;

#[derive(Debug, Subcommand)]
pub enum ResourcesCommand {
    /// Print the eight host abilities: the all-false floor merged with --caps.
    Capabilities {
        /// Host-declared abilities as a JSON object over the closed set.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        caps: String,
    },
}

pub fn run(cmd: ResourcesCommand) -> Result<i32> {
    match cmd {
        ResourcesCommand::Capabilities { caps } => {
            let declared = abilities::declared(&abilities::parse_caps(&caps)?);
            print_document(&serde_json::json!(declared));
            Ok(0)
        }
    }
}
