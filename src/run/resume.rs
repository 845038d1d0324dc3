//! `kxen-agent --resume SES [--task …]`: continue a Session (kxen-agent.md §6).
//!
//! Everything happens under the Session's run lease, taken first: lock integrity (exit 10),
//! policy drift and capability availability (exit 6), the workspace binding (§7), then the choice
//! of run — the unfinished one, or a new consecutive run for `--task` after a terminal one.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::Value;

use crate::error::{Error, Result};
use crate::fsx;
use crate::git;
use crate::ids::{self, IdKind};
use crate::policy::{self, MergedPolicy, PolicyFlags};
use crate::provider::{ModelConfig, Provider};
use crate::run::settle;
use crate::session::run_record::RunState;
use crate::session::{HistoryEntry, Lease, Message, MessageLog, Role, SessionMeta, store, verify};
use crate::state::{SessionPaths, StateDir};
use crate::tools;

/// What the user asked for.
#[derive(Debug, Clone)]
pub struct ResumeRequest {
    pub session_id: String,
    /// A task for a new consecutive run (only after a terminal run).
    pub task: Option<String>,
    /// The workspace now (default: the bound root).
    pub workspace: Option<PathBuf>,
    /// Accept a moved or copied workspace whose identity and branch check out.
    pub rebind: bool,
    pub policy: PolicyFlags,
    pub config: Option<PathBuf>,
}

/// A Session ready to execute one run, with its lease held.
pub struct Resumed {
    pub lease: Lease,
    pub paths: SessionPaths,
    pub meta: SessionMeta,
    pub merged: MergedPolicy,
    pub provider: Arc<dyn Provider>,
    pub provider_info: Option<Value>,
    /// `[tools] parallel` of the config.
    pub parallel_tools: usize,
    /// When the conversation is compacted (the execution provider's `context_window`).
    pub compaction: Option<crate::run::compaction::Settings>,
    pub run_id: String,
    /// The run was created by this resume (from `--task`).
    pub new_run: bool,
    pub warnings: Vec<String>,
    /// The servers of the locked MCP tools, running and checked against the lock.
    pub mcp: Option<crate::mcp::Servers>,
    /// The language servers of `lsp` (checked against the lock; none started yet).
    pub lsp: Option<crate::lsp::Servers>,
}

/// Checks the Session under its lease and picks (or creates) the run to execute.
pub fn prepare(state: &StateDir, req: &ResumeRequest) -> Result<Resumed> {
    let id = &req.session_id;
    ids::validate_kind(id, IdKind::Session)?;
    if let Some(task) = &req.task
        && task.trim().is_empty()
    {
        return Err(Error::usage("the task is empty")
            .with_hint("give the task with --task TEXT, --task-file FILE or --stdin"));
    }
    let paths = store::session_paths(state, id)?;
    // Read before the lease only to see whether this is a task child (read again below).
    let peek = SessionMeta::read(&paths, id)?;
    if let (Some(crate::session::ForkKind::Task), Some(parent)) = (peek.fork_kind, &peek.parent_id)
    {
        // A task child is its parent's to run while the parent's run is active.
        let parent_dir = state.session(parent).dir;
        if ids::validate_kind(parent, IdKind::Session).is_ok()
            && parent_dir.join("lease.lock").is_file()
        {
            crate::session::Lease::check_free(&parent_dir, parent).map_err(|e| {
                Error::conflict(format!(
                    "session {id} is a task child of session {parent}, whose run is active: {}",
                    e.message
                ))
                .with_hint(format!(
                    "the parent's run resumes this child itself; wait for it to stop, then \
                     `kxen-agent --resume {parent}` (or resume {id} once {parent} is stopped)"
                ))
            })?;
        }
    }
    if let (Some(parent), Some(origin)) = (&peek.parent_id, &peek.task_parent) {
        check_parent_waits(state, id, parent, origin)?;
    }
    let lease = Lease::acquire(&paths.dir, id)?;
    let mut meta = SessionMeta::read(&paths, id)?;
    meta.lock.verify()?;
    let merged = policy::merge(&req.policy)?;
    meta.lock.check_drift(&merged)?;
    if let Some(missing) = meta
        .lock
        .capabilities
        .iter()
        .find(|c| !tools::REGISTRY.implements(c))
    {
        return Err(Error::policy(format!(
            "the session's locked capability `{missing}` is no longer available in this runtime"
        ))
        .with_hint("use the kxen-agent version that created the session, or start a new session"));
    }
    let workspace = req
        .workspace
        .clone()
        .unwrap_or_else(|| meta.workspace.root.clone());
    let verified = git::verify(&meta.workspace, &workspace, req.rebind)?;
    // The workspace was rebound (or its location re-resolved): the binding records where it is
    // now, and a rebind leaves a `workspaceRebound` entry in the same atomic replace. Applied in
    // memory here and written only after every other check passed, so a resume refused for its
    // config, provider or MCP drift leaves session.json as it was.
    let rebound = verified.binding != meta.workspace;
    if rebound {
        if let Some(from) = &verified.rebound_from {
            meta.history.push(HistoryEntry::WorkspaceRebound {
                from: from.display().to_string(),
                to: verified.binding.root.display().to_string(),
                at: crate::clock::now_rfc3339(),
            });
        }
        meta.workspace = verified.binding.clone();
    }
    let role = &meta.lock.definition.spec.execution.model_role;
    let config = ModelConfig::load(req.config.as_deref())?;
    config.check_pass_env(&merged.all_pass_env())?;
    let provider: Arc<dyn Provider> = Arc::from(config.provider_for(role)?);
    let compaction = crate::run::compaction::settings(&config, role, &provider)?;
    let provider_info = config
        .provider_info(role)
        .ok()
        .and_then(|info| serde_json::to_value(info).ok());
    let mcp = if meta.lock.mcp_servers.is_empty() {
        None
    } else {
        let servers = crate::mcp::Servers::new(
            config.mcp_servers().clone(),
            &merged,
            crate::mcp::servers::ServerHomes::of_session(state, &meta.id),
            meta.workspace.root.clone(),
        );
        crate::mcp::check_drift(&meta.lock, &servers)?;
        Some(servers)
    };
    crate::lsp::check_drift(&meta.lock, config.lsp_servers())?;
    let lsp = meta
        .lock
        .capabilities
        .iter()
        .any(|c| c == crate::lsp::CAPABILITY)
        .then(|| {
            crate::lsp::Servers::new(config.lsp_servers().clone(), meta.workspace.root.clone())
        });
    if rebound {
        fsx::write_atomic_json(&paths.session_json(), &meta, fsx::STATE_FILE_MODE)?;
    }
    let (run_id, new_run) = pick_run(&paths, &meta, req.task.as_deref())?;
    Ok(Resumed {
        lease,
        paths,
        meta,
        merged,
        provider,
        provider_info,
        parallel_tools: config.parallel_tools(),
        compaction,
        run_id,
        new_run,
        warnings: verified.warnings,
        mcp,
        lsp,
    })
}

/// The unfinished run, or a new run for `task` after a terminal one.
fn pick_run(
    paths: &SessionPaths,
    meta: &SessionMeta,
    task: Option<&str>,
) -> Result<(String, bool)> {
    let runs = store::list_runs(paths)?;
    if let Some(last) = runs.last() {
        if !last.status.is_terminal() {
            if task.is_some() {
                // An unfinished run whose files were edited (say, a finished run's status set
                // back to `running`) is corrupt state (exit 10), not a usage error.
                verify::check_consistency(paths, &meta.id, None)?;
                return Err(Error::usage(format!(
                    "run {} of session {} is unfinished ({}); continue it before giving a new task",
                    last.id,
                    meta.id,
                    last.status.name()
                ))
                .with_hint(format!(
                    "kxen-agent --resume {}, {}",
                    meta.id,
                    super::SAME_FLAGS
                )));
            }
            return Ok((last.id.clone(), false));
        }
        if !last.settled && task.is_none() {
            // Terminal but unsettled: the run finishes its settlement (no model, no tool), after
            // checking its files.
            return Ok((last.id.clone(), false));
        }
    }
    let Some(task) = task else {
        let last = runs.last().map_or(String::from("none"), |r| {
            format!("{} is {}", r.id, r.status.name())
        });
        return Err(Error::usage(format!(
            "nothing to resume in session {}: no run is unfinished (last run: {last})",
            meta.id
        ))
        .with_hint(format!(
            "give the next task: kxen-agent --resume {} --task \"…\"",
            meta.id
        )));
    };
    // A new run builds on the whole Session: any run whose record, journal and messages do not
    // agree (a message log cut mid-file, a journal that lost lines, an edited status) is corrupt
    // state (exit 10, naming the file), exactly as `session verify` reports it, never something
    // to build on — checked before anything is written, torn tails included.
    verify::check_consistency(paths, &meta.id, None)?;
    if let Some(last) = runs.last()
        && !last.settled
    {
        // Terminal but unsettled: finish its settlement (no model, no tool) first.
        let mut run = last.clone();
        let mut messages = MessageLog::open(&paths.messages())?;
        let run_paths = paths.run(&run.id);
        settle::finish(&mut run, &run_paths, &mut messages)?;
    }
    let run_id = ids::new_id(IdKind::Run);
    let message = Message::new(&run_id, Role::User, task.to_string());
    let mut run = RunState::new(&meta.id, &run_id, &message, RunState::next_seq(&runs));
    let run_paths = paths.run(&run_id);
    fsx::create_dir_private(&run_paths.dir)?;
    // run.json first: the task message is appended by the run itself if a crash comes between.
    run.save(&run_paths)?;
    MessageLog::open(&paths.messages())?.append(message)?;
    Ok((run_id, true))
}

/// A task child runs only for a parent operation that still waits for its result: once that
/// operation has an outcome (recorded by the child, or by an operator), nothing would take what
/// the child does next, so it does not run again.
fn check_parent_waits(
    state: &StateDir,
    id: &str,
    parent: &str,
    origin: &crate::session::TaskParent,
) -> Result<()> {
    use crate::journal::OpPhase;
    if ids::validate_kind(parent, IdKind::Session).is_err()
        || ids::validate_kind(&origin.run_id, IdKind::Run).is_err()
    {
        return Ok(());
    }
    let journal = state.session(parent).run(&origin.run_id).journal();
    if !journal.is_file() {
        return Ok(());
    }
    let table = crate::journal::read(&journal)?;
    let Some(op) = table.get(&origin.op_id) else {
        return Ok(());
    };
    if matches!(op.phase, OpPhase::Started | OpPhase::OutcomeUnknown) {
        return Ok(());
    }
    Err(Error::conflict(format!(
        "session {id} is the subagent of task call {} of run {} of session {parent}, whose \
         outcome is already recorded ({}): nothing would take this subagent's result",
        origin.op_id,
        origin.run_id,
        op.phase.name()
    ))
    .with_id(id)
    .with_hint(format!(
        "see what it did with `kxen-agent session show {id}`; continue the parent with \
         `kxen-agent --resume {parent}`, or start a new Session for more work"
    )))
}
