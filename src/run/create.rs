//! Starting a new Session and its first run (`kxen-agent run …`).
//!
//! [`prepare`] builds and checks everything in memory — task, definition (file or Builder),
//! merged policy, lock, provider, workspace binding — and writes nothing, so any failure leaves
//! the state dir untouched (not even created). [`create`] then writes the Session in one
//! all-or-nothing step and hands it back [`Prepared`] to execute, its lease held.

use std::path::PathBuf;

use serde_json::Value;

use crate::agent::DcpAgentLock;
use crate::agent::{self, AgentDefinition};
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::events::Event;
use crate::git::{self, WorkspaceBinding};
use crate::ids::{self, IdKind};
use crate::policy::{self, MergedPolicy, PolicyFlags};
use crate::run::builder;
use crate::run::prepared::Prepared;
use crate::run::services::RunServices;
use crate::session::run_record::RunState;
use crate::session::store::{self, NewSession};
use crate::session::{Message, Role, SessionMeta, meta};
use crate::state::StateDir;

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct NewRunRequest {
    pub workspace: PathBuf,
    pub task: String,
    /// `--output-schema`: a JSON Schema the run's final answer must match (checked already).
    pub output_schema: Option<Value>,
    pub agent: Option<PathBuf>,
    pub policy: PolicyFlags,
    pub config: Option<PathBuf>,
    /// The folder of the DWP plan the run works on (`--plan`): protected by the run's fence.
    pub plan_dir: Option<PathBuf>,
}

/// A checked, not yet written Session plus what running it needs.
pub struct Draft {
    pub new: NewSession,
    pub lock: DcpAgentLock,
    pub merged: MergedPolicy,
    pub binding: WorkspaceBinding,
    /// The provider, servers and the rest the run uses; its `tools.mcp` is set by [`grant_mcp`].
    pub services: RunServices,
    /// Warnings from capturing the workspace binding and granting tools.
    pub warnings: Vec<String>,
    /// The definition came from the Builder.
    pub built: bool,
    /// The runtime config's MCP servers, kept for [`grant_mcp`].
    pub mcp_configs: std::collections::BTreeMap<String, crate::mcp::ServerConfig>,
}

/// Checks everything and builds the Session in memory. Writes nothing.
pub fn prepare(state: &StateDir, req: &NewRunRequest) -> Result<Draft> {
    if req.task.trim().is_empty() {
        return Err(Error::usage("the task is empty")
            .with_hint("give the task with --task TEXT, --task-file FILE or --stdin"));
    }
    let (binding, mut warnings) = git::capture(&req.workspace)?;
    let merged = policy::merge(&req.policy)?;
    let config = ModelConfig::load(req.config.as_deref())?;
    config.check_pass_env(&merged.all_pass_env())?;
    let (definition, built): (AgentDefinition, bool) = match &req.agent {
        Some(path) => (agent::load_definition(path)?, false),
        None => {
            let mut catalog = policy::permitted_catalog(&merged);
            if config.lsp_servers().is_empty() {
                // Never offer the Builder a tool that cannot work here.
                catalog.retain(|c| c != crate::lsp::CAPABILITY);
            }
            (
                builder::build_definition(&config, &req.task, &catalog)?,
                true,
            )
        }
    };
    let mut lock = DcpAgentLock::build(&definition, &merged)
        .map_err(|e| e.with_consequence("no session was created"))?;
    warnings.extend(crate::lsp::grant(&mut lock, config.lsp_servers())?);
    lock.hooks_hash = config.hooks().hash();
    if lock.capabilities.is_empty() {
        // Legal (a pure question-answering agent), but usually an optional `exec` or the like
        // that the policy did not permit: say so before the model works blind.
        let asked = &lock.definition.spec.capabilities.optional;
        warnings.push(format!(
            "agent `{}` gets no tools: none of its optional capabilities ({}) is permitted by \
             the runtime policy, so the model can only answer from the task text",
            lock.definition.metadata.name,
            if asked.is_empty() {
                "none listed".to_string()
            } else {
                asked.join(", ")
            }
        ));
    }
    let fence = crate::sandbox::RunFence::new(
        merged.fence(),
        &binding.root,
        req.plan_dir.as_deref(),
        Some(state.root()),
    );
    let session_id = ids::new_id(IdKind::Session);
    let services = RunServices::new(&config, &lock, state, &session_id, &merged.pass_env, fence)?;
    let run_id = ids::new_id(IdKind::Run);
    let mut text = req.task.clone();
    if let Some(schema) = &req.output_schema {
        text.push_str(&crate::run::prompt::output_schema_note(schema));
    }
    let mut task = Message::new(&run_id, Role::User, text);
    let environment = definition.spec.execution.environment_preamble == Some(true);
    task.context = crate::run::context::read(
        &binding,
        config.context_files(),
        environment.then_some(req.task.as_str()),
    )?;
    // run.json takes its task from this message: both hold the redacted text.
    task.redact();
    let new = NewSession {
        meta: SessionMeta {
            format_version: meta::FORMAT_VERSION,
            id: session_id.clone(),
            created_at: crate::clock::now_rfc3339(),
            workspace: binding.clone(),
            parent_id: None,
            branch_root_id: session_id.clone(),
            fork_point: None,
            fork_kind: None,
            task_parent: None,
            lock: lock.clone(),
            first_run_id: Some(run_id.clone()),
            history: Vec::new(),
        },
        run: RunState {
            output_schema: req.output_schema.clone(),
            ..RunState::new(&session_id, &run_id, &task, 1)
        },
        task,
    };
    Ok(Draft {
        new,
        lock,
        merged,
        binding,
        services,
        warnings,
        built,
        mcp_configs: config.mcp_servers().clone(),
    })
}

/// Starts the MCP servers the lock's `mcp__…` capabilities name and grants their tools (see
/// [`crate::mcp::grant`]); still writes nothing. `state` gives the servers' HOMEs
/// (`mcp-home/<ses>/<server>`; not created here: these servers get throwaway ones).
pub fn grant_mcp(draft: &mut Draft, state: &StateDir) -> Result<()> {
    if !draft
        .lock
        .capabilities
        .iter()
        .any(|c| c.starts_with(crate::mcp::PREFIX))
    {
        return Ok(());
    }
    let servers = crate::mcp::Servers::new(
        draft.mcp_configs.clone(),
        &draft.merged,
        crate::mcp::servers::ServerHomes::of_session(state, &draft.new.meta.id),
        draft.services.tools.fence.clone(),
    );
    let warnings = crate::mcp::grant(&mut draft.lock, &servers)?;
    draft.warnings.extend(warnings);
    draft.new.meta.lock = draft.lock.clone();
    draft.services.tools.mcp = Some(std::sync::Arc::new(servers));
    Ok(())
}

/// Writes the drafted Session (all or nothing) and returns it prepared to execute its first
/// run, with its lease held, and the `sessionCreated` event. The draft's warnings are the
/// caller's to show (before this call: they also concern a Session that fails to be written).
pub fn create(state: &StateDir, draft: Draft) -> Result<(Prepared, Event)> {
    let lease = store::create(state, &draft.new)?;
    let event = Event::SessionCreated {
        session_id: draft.new.meta.id.clone(),
        workspace: to_value(&draft.binding)?,
        agent: draft.lock.definition.metadata.name.clone(),
        definition_hash: draft.lock.definition_hash.clone(),
        policy_hash: draft.lock.policy_hash.clone(),
        capabilities: draft.lock.capabilities.clone(),
        built: draft.built,
    };
    let NewSession { meta, run, .. } = draft.new;
    let prepared = Prepared::new(
        lease,
        state,
        meta,
        run.id,
        true,
        draft.merged,
        draft.services,
    );
    Ok((prepared, event))
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value> {
    serde_json::to_value(value)
        .map_err(|e| Error::failed(format!("cannot serialize session metadata: {e}")))
}
