//! The services of one execution, built once: what the config, the lock and the state dir give a
//! run (its model, prices, compaction, hooks, context files, telemetry) and what its tools share
//! ([`ToolServices`]: tool home, blobs, pass-env, fence, MCP and language servers).
//!
//! [`RunServices::new`] is the one place they are made for a Session's run (a new Session in
//! [`crate::run::create`], a resumed one in [`crate::run::resume`]); a `task` child gets its own
//! from [`RunServices::for_child`], which shares the parent's servers and copies its fence, env
//! rules and hooks, so a child never runs with more than its parent. [`crate::run::Prepared`]
//! owns the value; an [`Execution`](crate::run::agent_loop::Execution) and each call's
//! [`crate::tools::ToolContext`] borrow it, so adding a service is one field here and one line in
//! the builder, not a field in every struct of the relay.

use std::sync::Arc;

use serde_json::Value;

use crate::agent::DcpAgentLock;
use crate::blobs::BlobStore;
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::provider::Provider;
use crate::state::StateDir;
use crate::tools::ToolServices;

/// Everything an execution of a Session's run uses that is not the run's own data (see the
/// module doc). Built by [`RunServices::new`] or [`RunServices::for_child`] only.
pub struct RunServices {
    /// The model of the definition's role; shared with the thread of an in-flight model call,
    /// which a cancel abandons.
    pub provider: Arc<dyn Provider>,
    /// Describes the provider in run.json (no credential).
    pub provider_info: Option<Value>,
    /// What the run's models charge: each call's cost is recorded with it.
    pub prices: Prices,
    /// When and by whom the conversation is compacted (`None`: the provider has no
    /// `context_window`, the conversation grows as it is).
    pub compaction: Option<crate::run::compaction::Settings>,
    /// How many consecutive read-class and `task` calls of one turn run together
    /// (`[tools] parallel` of the config; 1: every call alone).
    pub parallel_tools: usize,
    /// The operator's hooks around tool calls and the run ([`crate::hooks`]; locked by hash).
    pub hooks: crate::hooks::HooksConfig,
    /// The config's `context_files`: read only when the run's task message is still to be
    /// written ([`crate::run::context`]).
    pub context_files: Vec<String>,
    /// `[telemetry]` of the config (the command's tracing: `crate::telemetry`).
    pub telemetry: crate::telemetry::TelemetryConfig,
    /// What every tool call shares, the fence among them: the servers start through it, and so
    /// does every `exec`.
    pub tools: ToolServices,
}

/// What the models of a run charge (`None`: no `price` configured for that provider): each
/// call's cost is recorded with it ([`crate::session::cost`]).
#[derive(Debug, Clone, Default)]
pub struct Prices {
    pub execution: Option<crate::provider::config::Price>,
    /// Summaries (the `compaction` role's provider, else the execution one's).
    pub compaction: Option<crate::provider::config::Price>,
}

impl RunServices {
    /// What `config` gives for `lock` of Session `session_id`: the model of the definition's
    /// role (and its description for run.json, no credential), prices, when to compact,
    /// `[tools] parallel`, hooks, context files, telemetry, and for its tools the Session's tool
    /// home, the state dir's blobs, `pass_env` (the merged policy's), `fence`, and the language
    /// servers of `lsp` when the lock grants it (none started yet). No MCP servers: a new Session
    /// starts them to grant their tools, a resumed one to check them, and each sets
    /// `tools.mcp` then.
    pub fn new(
        config: &ModelConfig,
        lock: &DcpAgentLock,
        state: &StateDir,
        session_id: &str,
        pass_env: &[String],
        fence: crate::sandbox::RunFence,
    ) -> Result<RunServices> {
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
            .then(|| {
                Arc::new(crate::lsp::Servers::new(
                    config.lsp_servers().clone(),
                    fence.clone(),
                ))
            });
        Ok(RunServices {
            provider,
            provider_info,
            prices,
            compaction,
            parallel_tools: config.parallel_tools(),
            hooks: config.hooks().clone(),
            context_files: config.context_files().to_vec(),
            telemetry: config.telemetry().clone(),
            tools: ToolServices {
                tool_home: state.tool_home(session_id),
                blobs: BlobStore::new(state.blobs_dir()),
                pass_env: pass_env.to_vec(),
                fence,
                mcp: None,
                lsp,
                config: Arc::clone(config.tools()),
            },
        })
    }

    /// The services of `task` child Session `session_id` of this execution: its own tool home;
    /// this parent's servers (shared), fence, pass-env, hooks, blobs, prices and parallelism
    /// (copied, so never wider); its models, for its turns and its summaries, are this parent's
    /// seen through `model` (which wraps one); and no context files (a child's task is its
    /// parent's words, and the parent read the rules).
    pub fn for_child(
        &self,
        state: &StateDir,
        session_id: &str,
        model: impl Fn(&Arc<dyn Provider>) -> Arc<dyn Provider>,
    ) -> RunServices {
        RunServices {
            provider: model(&self.provider),
            provider_info: self.provider_info.clone(),
            // The parent's models, so the parent's prices.
            prices: self.prices.clone(),
            compaction: self
                .compaction
                .as_ref()
                .map(|c| c.with_provider(model(&c.provider))),
            parallel_tools: self.parallel_tools,
            hooks: self.hooks.clone(),
            context_files: Vec::new(),
            telemetry: self.telemetry.clone(),
            tools: ToolServices {
                tool_home: state.tool_home(session_id),
                blobs: self.tools.blobs.clone(),
                pass_env: self.tools.pass_env.clone(),
                fence: self.tools.fence.clone(),
                mcp: self.tools.mcp.clone(),
                lsp: self.tools.lsp.clone(),
                config: Arc::clone(&self.tools.config),
            },
        }
    }
}
