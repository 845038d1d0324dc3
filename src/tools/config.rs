//! `[tools]` of the config file: how tool calls run, and the tables of tools that take settings
//! (`[tools.NAME]`).
//!
//! The section's type lives here, beside the tools, as every subsystem owns its section's type;
//! `config` parses the file into it and keeps it whole behind an `Arc`, and a run's tools read it
//! through [`super::ToolServices::config`]. So a tool's own table is a field here (its type in the
//! tool's module) and nothing between the file and the tool changes: not `config`, not the run's
//! services, not a caller that builds [`super::ToolServices`].

use serde::Deserialize;

/// `[tools]` as written (closed: an unknown key or table is refused when the file is read).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsConfig {
    /// Calls of one turn that may run together (read-class tools and `task` children); default
    /// 4, 1 runs every call alone. Checked (1..=64) and read by `config`, since the run's loop
    /// (not a tool) batches the calls.
    pub parallel: Option<usize>,
    // A tool that takes settings adds its table here, typed in its module:
    //     #[serde(default)]
    //     pub NAME: NAME::Config,
}
