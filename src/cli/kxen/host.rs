//! `kxen-agent host abilities`: the DWP ability map this runtime can truthfully declare.

use std::path::Path;

use crate::agent::{self, DcpAgentLock};
use crate::cli::output;
use crate::config::ModelConfig;
use crate::error::{ExitStatus, Result};
use crate::host::abilities::{self, HostInputs};
use crate::policy::{self, PolicyFlags};

/// Prints the map as one JSON line (the same in both formats: it is meant for `--caps`).
pub fn abilities(
    config: Option<&Path>,
    agent: Option<&Path>,
    flags: &PolicyFlags,
) -> Result<ExitStatus> {
    let merged = policy::merge(flags)?;
    let config = ModelConfig::load(config)?;
    let (role, task_permitted, built) = match agent {
        Some(path) => {
            let definition = agent::load_definition(path)?;
            let lock = DcpAgentLock::build(&definition, &merged)?;
            let task = lock.capabilities.iter().any(|c| c == "task");
            (definition.spec.execution.model_role.clone(), task, false)
        }
        // The Builder may give the agent any permitted tool; it serves the `execution` role.
        None => (
            crate::agent::DEFAULT_MODEL_ROLE.to_string(),
            merged.refusal("task").is_none(),
            true,
        ),
    };
    let map = abilities::host_abilities(&HostInputs {
        config: &config,
        execution_role: &role,
        built,
        task_permitted,
    })?;
    output::line(&abilities::caps_json(&map));
    Ok(ExitStatus::Success)
}

/// The arguments of `kxen-agent host abilities`.
#[derive(Debug, clap::Args)]
pub struct HostAbilitiesArgs {
    /// The model config (TOML); default as for `run`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// The DCPAgent definition the Session would run (default: one the Builder writes,
    /// served by the `execution` role).
    #[arg(long, value_name = "FILE")]
    pub agent: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub policy: super::PolicyArgs,
}
