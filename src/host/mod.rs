//! kxen-agent as a DWP 7 host (spec README "How the two halves meet", dwp.md §6): the abilities
//! it can truthfully declare ([`abilities`]), runs bound to a plan task with the task's context
//! manifest as their first input ([`binding`]), and the host meter and limit check of such runs
//! ([`meter`]). The plan's records are read and written only through [`crate::dwp`].

pub mod abilities;
pub mod binding;
pub mod meter;

pub use binding::PlanBinding;
pub use meter::{Exhausted, PlanHost};

use crate::agent::DcpAgentLock;
use crate::error::Result;
use crate::provider::ModelConfig;
use crate::session::UsageRecord;
use crate::state::SessionPaths;

/// The plan host of a run on `binding`, for a Session with this lock and config. `base` is what
/// the Session's earlier runs on the same plan task reported ([`session_base`]).
pub fn open_run_host(
    binding: PlanBinding,
    config: &ModelConfig,
    lock: &DcpAgentLock,
    built: bool,
    base: UsageRecord,
) -> Result<PlanHost> {
    let role = &lock.definition.spec.execution.model_role;
    let abilities = abilities::host_abilities(&abilities::HostInputs {
        config,
        execution_role: role,
        built,
        task_permitted: lock.capabilities.iter().any(|c| c == "task"),
    })?;
    let metering = abilities::metering(config, role)?;
    PlanHost::open(binding, &abilities, metering, base)
}

/// The tokens the Session's other runs on the same plan task reported (their results' usage;
/// only the last run of a Session can be unfinished, and that is the one being run).
pub fn session_base(
    paths: &SessionPaths,
    binding: &PlanBinding,
    run_id: &str,
) -> Result<UsageRecord> {
    let mut base = UsageRecord::default();
    for run in crate::session::store::list_runs(paths)? {
        let same = run
            .plan
            .as_ref()
            .is_some_and(|b| b.dir == binding.dir && b.task == binding.task);
        if same
            && run.id != run_id
            && let Some(result) = &run.result
        {
            base.add(result.usage);
        }
    }
    Ok(base)
}
