//! A Session ready to execute one run: what [`crate::run::create::create`] and
//! [`crate::run::resume::prepare`] both hand back, and the one place an [`Execution`] is made.
//!
//! A new Session and a resumed one differ only in how they got here (written from a checked
//! draft, or checked again under the lease); from here on they run the same way, so the CLI, the
//! benches and `task` children all get their [`Execution`] from these functions and nothing else
//! lists its fields.

use std::sync::atomic::AtomicBool;

#[cfg(doc)]
use crate::agent::DcpAgentLock;
use crate::policy::MergedPolicy;
use crate::run::agent_loop::Execution;
use crate::run::services::RunServices;
use crate::session::{Lease, SessionMeta};
use crate::state::{SessionPaths, StateDir};

/// A Session with its run lease held, the run to execute, and the services executing it uses.
///
/// Dropping it releases the lease first, then stops the servers: fields drop in declaration
/// order, `lease` is the first and `services` (which owns the MCP and language servers, or their
/// last share once every `task` child is done) the last. Keep `lease` first and `services` last.
pub struct Prepared {
    pub lease: Lease,
    pub state: StateDir,
    pub paths: SessionPaths,
    /// The Session as it is on disk (its lock is the tightened definition and capabilities).
    pub meta: SessionMeta,
    /// The run to execute.
    pub run_id: String,
    /// The run was created by this invocation (a new Session, or `--resume … --task`).
    pub new_run: bool,
    pub merged: MergedPolicy,
    /// What preparing found that the user should read before the run starts (a new Session's
    /// warnings are shown before it is written, so it has none here).
    pub warnings: Vec<String>,
    /// [`DcpAgentLock::tool_names`] of the lock, held for the execution to borrow.
    tool_names: Vec<String>,
    /// The provider, prices, hooks, fence, servers … of the run, built once
    /// ([`RunServices::new`]). Last: see the drop order above.
    pub services: RunServices,
}

impl Prepared {
    /// Puts the pieces together; `meta.lock` says which tools the model gets.
    pub fn new(
        lease: Lease,
        state: &StateDir,
        meta: SessionMeta,
        run_id: String,
        new_run: bool,
        merged: MergedPolicy,
        services: RunServices,
    ) -> Prepared {
        Prepared {
            lease,
            state: state.clone(),
            paths: state.session(&meta.id),
            tool_names: meta.lock.tool_names(),
            meta,
            run_id,
            new_run,
            merged,
            warnings: Vec::new(),
            services,
        }
    }

    /// The execution of the prepared run, stopped by `cancel`. Without a DWP plan: a plan run
    /// sets `plan` on the result (`Execution { plan, ..prepared.execution(…) }`).
    pub fn execution<'a>(&'a self, cancel: &'a AtomicBool) -> Execution<'a> {
        Execution {
            services: &self.services,
            state: &self.state,
            session_id: &self.meta.id,
            paths: &self.paths,
            definition: &self.meta.lock.definition,
            capabilities: &self.tool_names,
            mcp_tools: &self.meta.lock.mcp_tools,
            tool_rules: &self.merged.mcp_tools,
            workspace_root: &self.meta.workspace.root,
            cancel,
            plan: None,
        }
    }
}

impl<'a> Execution<'a> {
    /// The execution of the run of `task` child `meta` (its tools: `tool_names`, the lock's
    /// [`DcpAgentLock::tool_names`]; its services: `services`, from
    /// [`RunServices::for_child`] of this execution's): the child's own Session, definition and
    /// tools, on this parent's policy, workspace, state dir and DWP plan.
    pub fn for_child<'c>(
        &self,
        services: &'c RunServices,
        meta: &'c SessionMeta,
        paths: &'c SessionPaths,
        tool_names: &'c [String],
        cancel: &'c AtomicBool,
    ) -> Execution<'c>
    where
        'a: 'c,
    {
        Execution {
            services,
            state: self.state,
            session_id: &meta.id,
            paths,
            definition: &meta.lock.definition,
            capabilities: tool_names,
            mcp_tools: &meta.lock.mcp_tools,
            tool_rules: self.tool_rules,
            workspace_root: self.workspace_root,
            cancel,
            // The child's model calls are the plan task's too: metered into the same samples,
            // checked against the same limits (see `crate::host`).
            plan: self.plan,
        }
    }
}
