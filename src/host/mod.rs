//! kxen-agent as a DWP 7 host (docs/dwp-spec.md, "kxen-agent as a DWP host" and "Host
//! abilities"): the abilities
//! it can truthfully declare ([`abilities`]), runs bound to a plan task with the task's context
//! manifest as their first input ([`binding`]), the host meter and limit check of such runs
//! ([`meter`]) and the `delegation` records of their `task` children ([`delegation`]). The
//! plan's records are read and written only through [`crate::dwp`].
//!
//! What the meter counts: the provider tokens of the **Session tree** on the plan task — the
//! Session's runs bound to it and every `task` child (and grandchild) those runs started. A
//! subagent's model calls are the plan task's spending as much as its parent's, so its usage is
//! in the same cumulative samples, and its calls are checked against the same limits.

pub mod abilities;
pub mod binding;
pub mod delegation;
pub mod meter;

use std::collections::BTreeMap;

pub use binding::PlanBinding;
pub use meter::{Exhausted, PlanHost};

use crate::agent::DcpAgentLock;
use crate::config::ModelConfig;
use crate::error::Result;
use crate::state::{SessionPaths, StateDir};
use crate::usage::UsageRecord;

/// The plan host of a run on `binding`, for a Session with this lock and config. `base` is what
/// the Session's earlier runs on the same plan task used ([`session_base`]), `tree` what the
/// run's own `task` children used so far ([`children_usage`]).
pub fn open_run_host(
    binding: PlanBinding,
    config: &ModelConfig,
    lock: &DcpAgentLock,
    built: bool,
    base: UsageRecord,
    tree: BTreeMap<String, UsageRecord>,
) -> Result<PlanHost> {
    let role = &lock.definition.spec.execution.model_role;
    let abilities = abilities::host_abilities(&abilities::HostInputs {
        config,
        execution_role: role,
        built,
        task_permitted: lock.capabilities.iter().any(|c| c == "task"),
    })?;
    let metering = abilities::metering(config, role)?;
    let mut host = PlanHost::open(binding, &abilities, metering, base)?;
    for (run, usage) in tree {
        host.set_usage(&run, usage);
    }
    Ok(host)
}

/// The tokens the Session's other runs on the same plan task used, their `task` children's
/// included (their results' usage; only the last run of a Session can be unfinished, and that
/// is the one being run).
pub fn session_base(
    state: &StateDir,
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
            for usage in children_usage(state, paths, &run.id)?.into_values() {
                base.add(usage);
            }
        }
    }
    Ok(base)
}

/// What every `task` child (and grandchild…) of run `run_id` used so far, by child run id: a
/// finished child's result, an unfinished one's recorded model responses. Read when a host
/// opens; a child that runs again reports its own usage from then on.
pub fn children_usage(
    state: &StateDir,
    paths: &SessionPaths,
    run_id: &str,
) -> Result<BTreeMap<String, UsageRecord>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![(paths.clone(), run_id.to_string())];
    // Bounded by the policy's task depth; the guard only stops a damaged, cyclic state.
    while let Some((paths, run)) = todo.pop() {
        if out.len() > 10_000 {
            break;
        }
        let table = crate::journal::read(&paths.run(&run).journal())?;
        for child in table.ops().iter().filter_map(|op| op.child.as_ref()) {
            let session = state.session(&child.session_id);
            let run_paths = session.run(&child.run_id);
            if !run_paths.run_json().is_file() || out.contains_key(&child.run_id) {
                continue;
            }
            let usage = match crate::session::run_record::RunState::read(&run_paths, &child.run_id)?
                .result
            {
                Some(result) => result.usage,
                None => {
                    let mut sum = UsageRecord::default();
                    for m in crate::session::messages::read(&session.messages())? {
                        if m.run_id == child.run_id
                            && let Some(u) = m.usage
                        {
                            sum.add(u);
                        }
                    }
                    sum
                }
            };
            out.insert(child.run_id.clone(), usage);
            todo.push((session, child.run_id.clone()));
        }
    }
    Ok(out)
}
