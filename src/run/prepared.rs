//! A Session ready to execute one run: what [`crate::run::create::create`] and
//! [`crate::run::resume::prepare`] both hand back, and the one place an [`Execution`] is made.
//!
//! A new Session and a resumed one differ only in how they got here (written from a checked
//! draft, or checked again under the lease); from here on they run the same way, so the CLI, the
//! benches and `task` children all get their [`Execution`] from these functions and nothing else
//! lists its fields.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::Value;

use crate::agent::DcpAgentLock;
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::policy::MergedPolicy;
use crate::provider::Provider;
use crate::run::agent_loop::Execution;
use crate::session::{Lease, SessionMeta};
use crate::state::{SessionPaths, StateDir};

/// A Session with its run lease held, the run to execute, and what executing it needs.
///
/// Dropping it releases the lease (first: fields drop in order), then stops the servers.
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
    pub provider: Arc<dyn Provider>,
    /// Describes the provider in run.json (no credential).
    pub provider_info: Option<Value>,
    /// `[tools] parallel` of the config.
    pub parallel_tools: usize,
    /// When the conversation is compacted (the execution provider's `context_window`).
    pub compaction: Option<crate::run::compaction::Settings>,
    /// What preparing found that the user should read before the run starts (a new Session's
    /// warnings are shown before it is written, so it has none here).
    pub warnings: Vec<String>,
    /// The servers of the locked MCP tools, running (`None` when there are none).
    pub mcp: Option<crate::mcp::Servers>,
    /// The language servers of `lsp`, when it is granted (none started yet).
    pub lsp: Option<crate::lsp::Servers>,
    /// The run's one fence (policy, workspace, protected plan folder and state dir).
    pub fence: crate::sandbox::RunFence,
    /// The runtime config's hooks (locked by hash).
    pub hooks: crate::hooks::HooksConfig,
    /// The config's `context_files` (a run created by a resume reads them: [`crate::run::context`]).
    pub context_files: Vec<String>,
    /// The `price`s of the execution and compaction models.
    pub prices: Prices,
    /// `[telemetry]` of the config.
    pub telemetry: crate::telemetry::TelemetryConfig,
    /// [`DcpAgentLock::tool_names`] of the lock, held for the execution to borrow.
    tool_names: Vec<String>,
}

/// The parts of a [`Prepared`] that the model config gives for a lock ([`Runtime::new`]).
pub struct Runtime {
    pub provider: Arc<dyn Provider>,
    pub provider_info: Option<Value>,
    pub parallel_tools: usize,
    pub compaction: Option<crate::run::compaction::Settings>,
    pub mcp: Option<crate::mcp::Servers>,
    pub lsp: Option<crate::lsp::Servers>,
    /// The run's one fence: the servers above start through it, and so does every `exec`.
    pub fence: crate::sandbox::RunFence,
    /// `[[hooks.*]]` of the config.
    pub hooks: crate::hooks::HooksConfig,
    /// The config's `context_files`.
    pub context_files: Vec<String>,
    pub prices: Prices,
    /// `[telemetry]` of the config (the command's tracing: `crate::telemetry`).
    pub telemetry: crate::telemetry::TelemetryConfig,
}

/// What the models of a run charge (`None`: no `price` configured for that provider): each
/// call's cost is recorded with it ([`crate::session::cost`]).
#[derive(Debug, Clone, Default)]
pub struct Prices {
    pub execution: Option<crate::provider::config::Price>,
    /// Summaries (the `compaction` role's provider, else the execution one's).
    pub compaction: Option<crate::provider::config::Price>,
}

impl Runtime {
    /// What `config` gives for `lock` in workspace `root`: the model of the definition's role
    /// (and its description for run.json, no credential), when to compact, `[tools] parallel`,
    /// and the language servers of `lsp` when the lock grants it (none started yet). No MCP
    /// servers: a new Session starts them to grant their tools, a resumed one to check them.
    pub fn new(
        config: &ModelConfig,
        lock: &DcpAgentLock,
        fence: crate::sandbox::RunFence,
    ) -> Result<Runtime> {
        let role = &lock.definition.spec.execution.model_role;
        let provider: Arc<dyn Provider> = Arc::from(config.provider_for(role)?);
        let compaction = crate::run::compaction::settings(config, role, &provider)?;
        let provider_info = config
            .provider_info(role)
            .ok()
            .and_then(|info| serde_json::to_value(info).ok());
        let execution = config.price_for(role);
        if let Some(max) = lock.definition.spec.execution.max_cost_usd
            && execution.is_none()
        {
            let name = config
                .provider_config(role)
                .map(|(n, _, _)| n.to_string())?;
            return Err(Error::invalid(format!(
                "the run has a cost budget (maxCostUsd {max}) but provider `{name}` (role \
                 `{role}`) has no price, so its cost could never be known"
            ))
            .with_hint(format!(
                "add price = {{ input_per_mtok = …, output_per_mtok = … }} to [providers.{name}] \
                 in {}",
                config.path().display()
            )));
        }
        let prices = Prices {
            compaction: if config.has_role(crate::provider::COMPACTION_ROLE) {
                config.price_for(crate::provider::COMPACTION_ROLE)
            } else {
                execution.clone()
            },
            execution,
        };
        let lsp = lock
            .capabilities
            .iter()
            .any(|c| c == crate::lsp::CAPABILITY)
            .then(|| crate::lsp::Servers::new(config.lsp_servers().clone(), fence.clone()));
        Ok(Runtime {
            provider,
            provider_info,
            parallel_tools: config.parallel_tools(),
            compaction,
            mcp: None,
            lsp,
            fence,
            hooks: config.hooks().clone(),
            context_files: config.context_files().to_vec(),
            prices,
            telemetry: config.telemetry().clone(),
        })
    }
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
        runtime: Runtime,
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
            provider: runtime.provider,
            provider_info: runtime.provider_info,
            parallel_tools: runtime.parallel_tools,
            compaction: runtime.compaction,
            warnings: Vec::new(),
            mcp: runtime.mcp,
            lsp: runtime.lsp,
            fence: runtime.fence,
            hooks: runtime.hooks,
            context_files: runtime.context_files,
            prices: runtime.prices,
            telemetry: runtime.telemetry,
        }
    }

    /// The execution of the prepared run, stopped by `cancel`. Without a DWP plan: a plan run
    /// sets `plan` and `protected` on the result (`Execution { plan, ..prepared.execution(…) }`).
    pub fn execution<'a>(&'a self, cancel: &'a AtomicBool) -> Execution<'a> {
        Execution {
            state: &self.state,
            session_id: &self.meta.id,
            paths: &self.paths,
            definition: &self.meta.lock.definition,
            capabilities: &self.tool_names,
            mcp_tools: &self.meta.lock.mcp_tools,
            mcp: self.mcp.as_ref(),
            lsp: self.lsp.as_ref(),
            pass_env: &self.merged.pass_env,
            tool_rules: &self.merged.mcp_tools,
            parallel_tools: self.parallel_tools,
            fence: &self.fence,
            hooks: &self.hooks,
            workspace_root: &self.meta.workspace.root,
            provider: Arc::clone(&self.provider),
            provider_info: self.provider_info.clone(),
            cancel,
            plan: None,
            compaction: self.compaction.clone(),
            context_files: &self.context_files,
            prices: &self.prices,
        }
    }
}

impl<'a> Execution<'a> {
    /// The execution of the run of `task` child `meta` (its tools: `tool_names`, the lock's
    /// [`DcpAgentLock::tool_names`]): the child's own Session, definition and tools, on this
    /// parent's servers, policy, workspace, state dir and DWP plan; its models, for its turns and its
    /// summaries, are this parent's seen through `model` (which wraps one).
    pub fn for_child<'c>(
        &self,
        meta: &'c SessionMeta,
        paths: &'c SessionPaths,
        tool_names: &'c [String],
        model: impl Fn(&Arc<dyn Provider>) -> Arc<dyn Provider>,
        cancel: &'c AtomicBool,
    ) -> Execution<'c>
    where
        'a: 'c,
    {
        Execution {
            state: self.state,
            session_id: &meta.id,
            paths,
            definition: &meta.lock.definition,
            capabilities: tool_names,
            mcp_tools: &meta.lock.mcp_tools,
            mcp: self.mcp,
            lsp: self.lsp,
            pass_env: self.pass_env,
            tool_rules: self.tool_rules,
            parallel_tools: self.parallel_tools,
            fence: self.fence,
            hooks: self.hooks,
            workspace_root: self.workspace_root,
            provider: model(&self.provider),
            provider_info: self.provider_info.clone(),
            cancel,
            // The child's model calls are the plan task's too: metered into the same samples,
            // checked against the same limits (see `crate::host`).
            plan: self.plan,
            compaction: self
                .compaction
                .as_ref()
                .map(|c| c.with_provider(model(&c.provider))),
            // A child's task is its parent's words (the parent read the rules): none again.
            context_files: &[],
            // The parent's models, so the parent's prices.
            prices: self.prices,
        }
    }
}
