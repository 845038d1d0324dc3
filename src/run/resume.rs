//! `kxen-agent --resume SES [--task …]`: continue a Session (docs/spec.md §6).
//!
//! [`prepare`] follows the spec's order, one step a function: take the Session's run lease
//! (`take_lease`); under it check the lock's integrity (exit 10), the policy for drift and the
//! capabilities for availability (exit 6: `check_lock`); verify the workspace binding (§7:
//! `verify_workspace`); open what the config gives for the lock, refusing MCP and LSP drift
//! (`open_services`); then pick the run (`pick_run`) — the unfinished one, or, for `--task` after a
//! terminal one, a new consecutive run (`start_run`) once the last run is settled
//! (`settle_last`).

use std::path::PathBuf;

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::fsx;
use crate::git;
use crate::ids::{self, IdKind};
use crate::policy::{self, MergedPolicy, PolicyFlags};
use crate::run::prepared::Prepared;
use crate::run::services::RunServices;
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
    /// `--output-schema` for that new run (checked already).
    pub output_schema: Option<serde_json::Value>,
    /// The workspace now (default: the bound root).
    pub workspace: Option<PathBuf>,
    /// Accept a moved or copied workspace whose identity and branch check out.
    pub rebind: bool,
    pub policy: PolicyFlags,
    pub config: Option<PathBuf>,
    /// The folder of the DWP plan the run works on (`--plan`): protected by the run's fence.
    pub plan_dir: Option<PathBuf>,
}

/// Checks the Session under its lease and picks (or creates) the run to execute.
pub fn prepare(state: &StateDir, req: &ResumeRequest) -> Result<Prepared> {
    let id = &req.session_id;
    check_request(req)?;
    let paths = store::session_paths(state, id)?;
    let lease = take_lease(state, &paths, id)?;
    let (mut meta, merged) = check_lock(&paths, id, &req.policy)?;
    let workspace = verify_workspace(&mut meta, req)?;
    let services = open_services(state, &meta, &merged, req)?;
    if workspace.rebound {
        // Written only now that every other check passed, so a resume refused for its config,
        // provider or MCP drift leaves session.json as it was.
        fsx::write_atomic_json(&paths.session_json(), &meta, fsx::STATE_FILE_MODE)?;
    }
    let (run_id, new_run) = match pick_run(&paths, &meta, req.task.as_deref())? {
        Pick::Continue(run_id) => (run_id, false),
        Pick::Next { task, last, seq } => {
            if let Some(last) = last {
                settle_last(&paths, *last)?;
            }
            let environment = meta.lock.definition.spec.execution.environment_preamble;
            let context = crate::run::context::read(
                &meta.workspace,
                &services.context_files,
                (environment == Some(true)).then_some(task),
            )?;
            let run = NewRun {
                task,
                context,
                output_schema: req.output_schema.clone(),
            };
            (start_run(&paths, &meta.id, run, seq)?, true)
        }
    };
    let mut prepared = Prepared::new(lease, state, meta, run_id, new_run, merged, services);
    prepared.warnings = workspace.warnings;
    Ok(prepared)
}

/// The request itself: a Session id, and a task (if any) that is not empty.
fn check_request(req: &ResumeRequest) -> Result<()> {
    ids::validate_kind(&req.session_id, IdKind::Session)?;
    if let Some(task) = &req.task
        && task.trim().is_empty()
    {
        return Err(Error::usage("the task is empty")
            .with_hint("give the task with --task TEXT, --task-file FILE or --stdin"));
    }
    if req.output_schema.is_some() && req.task.is_none() {
        return Err(Error::usage(
            "--output-schema applies to a new run: a resumed run keeps the schema it started with",
        )
        .with_hint(format!(
            "give the next task with it: kxen-agent --resume {} --task \"…\" --output-schema FILE",
            req.session_id
        )));
    }
    Ok(())
}

/// Takes the Session's run lease (exit 5 naming its holder). A `task` child is refused first
/// while its parent's run is active (that run resumes it) or once nothing waits for its result.
fn take_lease(state: &StateDir, paths: &SessionPaths, id: &str) -> Result<Lease> {
    // Read before the lease only to see whether this is a task child (read again under it).
    let peek = SessionMeta::read(paths, id)?;
    if let (Some(crate::session::ForkKind::Task), Some(parent)) = (peek.fork_kind, &peek.parent_id)
    {
        check_parent_stopped(state, id, parent)?;
    }
    if let (Some(parent), Some(origin)) = (&peek.parent_id, &peek.task_parent) {
        check_parent_waits(state, id, parent, origin)?;
    }
    Lease::acquire(&paths.dir, id)
}

/// A task child is its parent's to run while the parent's run is active.
fn check_parent_stopped(state: &StateDir, id: &str, parent: &str) -> Result<()> {
    let parent_dir = state.session(parent).dir;
    if ids::validate_kind(parent, IdKind::Session).is_err()
        || !parent_dir.join("lease.lock").is_file()
    {
        return Ok(());
    }
    Lease::check_free(&parent_dir, parent).map_err(|e| {
        Error::conflict(format!(
            "session {id} is a task child of session {parent}, whose run is active: {}",
            e.message
        ))
        .with_hint(format!(
            "the parent's run resumes this child itself; wait for it to stop, then \
             `kxen-agent --resume {parent}` (or resume {id} once {parent} is stopped)"
        ))
    })
}

/// Under the lease: the Session as it is now, its lock intact (exit 10), the policy of this
/// invocation equal to the locked one and every locked capability still implemented (exit 6).
fn check_lock(
    paths: &SessionPaths,
    id: &str,
    flags: &PolicyFlags,
) -> Result<(SessionMeta, MergedPolicy)> {
    let meta = SessionMeta::read(paths, id)?;
    meta.lock.verify()?;
    let merged = policy::merge(flags)?;
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
    Ok((meta, merged))
}

/// The outcome of [`verify_workspace`].
struct Workspace {
    /// `meta.workspace` changed and session.json must be written.
    rebound: bool,
    warnings: Vec<String>,
}

/// The workspace binding (§7): identity and branch match, HEAD did not rewind; a moved or copied
/// workspace only with `--rebind-workspace`. A binding that changed (rebound, or its location
/// re-resolved) is applied to `meta` in memory, a rebind with its `workspaceRebound` entry, for
/// the caller to write in one atomic replace once every other check passed.
fn verify_workspace(meta: &mut SessionMeta, req: &ResumeRequest) -> Result<Workspace> {
    let workspace = req
        .workspace
        .clone()
        .unwrap_or_else(|| meta.workspace.root.clone());
    let verified = git::verify(&meta.workspace, &workspace, req.rebind)?;
    let rebound = verified.binding != meta.workspace;
    if rebound {
        if let Some(from) = &verified.rebound_from {
            meta.history.push(HistoryEntry::WorkspaceRebound {
                from: from.display().to_string(),
                to: verified.binding.root.display().to_string(),
                at: crate::clock::now_rfc3339(),
            });
        }
        meta.workspace = verified.binding;
    }
    Ok(Workspace {
        rebound,
        warnings: verified.warnings,
    })
}

/// What the config gives for the locked definition: the model of its role (with the sensitive
/// variables the policy passes present), the servers of its MCP tools, running and checked
/// against the lock, and its language servers (checked; none started yet).
fn open_services(
    state: &StateDir,
    meta: &SessionMeta,
    merged: &MergedPolicy,
    req: &ResumeRequest,
) -> Result<RunServices> {
    let config = ModelConfig::load(req.config.as_deref())?;
    config.check_pass_env(&merged.all_pass_env())?;
    let fence = crate::sandbox::RunFence::new(
        merged.fence(),
        &meta.workspace.root,
        req.plan_dir.as_deref(),
        Some(state.root()),
    );
    let mut services = RunServices::new(
        &config,
        &meta.lock,
        state,
        &meta.id,
        &merged.pass_env,
        fence,
    )?;
    if !meta.lock.mcp_servers.is_empty() {
        let servers = crate::mcp::Servers::new(
            config.mcp_servers().clone(),
            merged,
            crate::mcp::servers::ServerHomes::of_session(state, &meta.id),
            services.tools.fence.clone(),
        );
        crate::mcp::check_drift(&meta.lock, &servers)?;
        services.tools.mcp = Some(std::sync::Arc::new(servers));
    }
    crate::lsp::check_drift(&meta.lock, config.lsp_servers())?;
    crate::hooks::check_drift(meta.lock.hooks_hash.as_deref(), config.hooks())?;
    Ok(services)
}

/// Which run a resume executes.
enum Pick<'t> {
    /// The unfinished run, or a terminal one that only needs its settlement.
    Continue(String),
    /// A new run for `task`, numbered `seq`, once `last` (terminal but unsettled) is settled.
    Next {
        task: &'t str,
        last: Option<Box<RunState>>,
        seq: u64,
    },
}

/// The unfinished run, or a new run for `task` after a terminal one; a new run only on a
/// Session whose files agree (exit 10 otherwise).
fn pick_run<'t>(
    paths: &SessionPaths,
    meta: &SessionMeta,
    task: Option<&'t str>,
) -> Result<Pick<'t>> {
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
            return Ok(Pick::Continue(last.id.clone()));
        }
        if !last.settled && task.is_none() {
            // Terminal but unsettled: the run finishes its settlement (no model, no tool), after
            // checking its files.
            return Ok(Pick::Continue(last.id.clone()));
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
    let seq = RunState::next_seq(&runs);
    let last = runs.into_iter().last().filter(|r| !r.settled).map(Box::new);
    Ok(Pick::Next { task, last, seq })
}

/// Finishes the settlement of a terminal run (no model, no tool) before a new run follows it.
fn settle_last(paths: &SessionPaths, mut run: RunState) -> Result<()> {
    let mut messages = MessageLog::open(&paths.messages())?;
    let run_paths = paths.run(&run.id);
    settle::finish(&mut run, &run_paths, &mut messages)
}

/// What a new consecutive run starts with.
struct NewRun<'t> {
    task: &'t str,
    /// The repository rules read for it.
    context: Option<crate::session::RunContext>,
    /// `--output-schema`.
    output_schema: Option<serde_json::Value>,
}

/// Creates run number `seq` of Session `session_id` and returns its id.
fn start_run(paths: &SessionPaths, session_id: &str, new: NewRun, seq: u64) -> Result<String> {
    let run_id = ids::new_id(IdKind::Run);
    let mut text = new.task.to_string();
    if let Some(schema) = &new.output_schema {
        text.push_str(&crate::run::prompt::output_schema_note(schema));
    }
    let mut message = Message::new(&run_id, Role::User, text);
    message.context = new.context;
    let mut run = RunState::new(session_id, &run_id, &message, seq);
    run.output_schema = new.output_schema;
    let run_paths = paths.run(&run_id);
    fsx::create_dir_private(&run_paths.dir)?;
    // run.json first: the task message is appended by the run itself if a crash comes between.
    run.save(&run_paths)?;
    MessageLog::open(&paths.messages())?.append(message)?;
    Ok(run_id)
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
