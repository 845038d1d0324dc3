//! The library's two ways into a run: [`start`] (a new Session and its first run) and
//! [`resume`] (a Session's unfinished run, or a new run after a finished one, here or under a
//! git remote's lease).
//!
//! Every rule that guards a run is applied here, not by the caller: the state dir inside the
//! workspace is refused for a new Session (warned about for an existing one), the plan task is
//! bound or checked against the run's record, the Session's lease is taken by `create` /
//! `resume::prepare`, and a remote resume claims the remote lease first and pushes and releases
//! it at the end. A library caller therefore gets the same guarantees as `kxen-agent run`;
//! the CLI only turns flags into a request and an [`Ended`] into an exit status
//! (docs/architecture.md).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde_json::Value;

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::events::{Event, EventSink};
use crate::host::PlanHost;
use crate::host::binding::{self, Bound};
use crate::policy::PolicyFlags;
use crate::run::agent_loop::{self, Ending, Execution};
use crate::run::create::{self, NewRunRequest};
use crate::run::resume::{self as resume_run, ResumeRequest};
use crate::run::{Prepared, RunState};
use crate::state::StateDir;
use crate::sync::PushedSnapshot;
use crate::sync::lease::LeaseRecord;
use crate::sync::remote_run::{RemoteRun, RemoteRunRequest, workspace_or_cwd};
use crate::telemetry::config::TelemetryConfig;

/// A DWP plan task a run works on (`--plan DIR --plan-task T`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanTask {
    /// The plan folder (or a path inside it).
    pub dir: PathBuf,
    /// The task id of the plan's contract (`T-…`).
    pub task: String,
}

/// A new Session and its first run.
#[derive(Debug, Clone)]
pub struct StartRequest {
    pub workspace: PathBuf,
    /// The task text; with a plan task it may be absent (the plan's task text is the input).
    pub task: Option<String>,
    /// A DCPAgent definition file; without one the Builder writes the definition.
    pub agent: Option<PathBuf>,
    pub policy: PolicyFlags,
    /// The model config file; `None`: the default search (`ModelConfig::load`).
    pub config: Option<PathBuf>,
    /// A JSON Schema the final answer must match (already read and checked).
    pub output_schema: Option<Value>,
    pub plan: Option<PlanTask>,
}

/// Continue a Session.
#[derive(Debug, Clone)]
pub struct ContinueRequest {
    pub session_id: String,
    /// A new run's task, after a finished run; `None` continues the unfinished run.
    pub task: Option<String>,
    /// The workspace to check (or, with `rebind`, to move the Session to).
    pub workspace: Option<PathBuf>,
    pub rebind: bool,
    pub policy: PolicyFlags,
    pub config: Option<PathBuf>,
    pub output_schema: Option<Value>,
    /// A continued run must name the plan task it started on; a new run is bound to it.
    pub plan: Option<PlanTask>,
    /// Run under the Session's lease on a git remote of the workspace repository.
    pub remote: Option<RemoteOptions>,
}

/// `--remote NAME` and its companions.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// The git remote of the workspace repository.
    pub name: String,
    /// The lease's time to live (renewed every third of it).
    pub ttl: Duration,
    /// Take over a lease whose holder stopped renewing it.
    pub take_expired: bool,
    /// Also push a snapshot before every Nth tool call runs.
    pub push_every: Option<u64>,
}

/// How a run ended, and where.
#[derive(Debug)]
pub struct Ended {
    pub session_id: String,
    pub run_id: String,
    pub ending: Ending,
    /// With a remote: the snapshot pushed at the end (the lease then released).
    pub pushed: Option<PushedSnapshot>,
}

/// What the caller's [`Observe`] learns of the run it wraps.
#[derive(Clone, Copy)]
pub struct RunFacts<'a> {
    pub state: &'a StateDir,
    /// The provider serving the run (its name and model: a span's `gen_ai.*` attributes).
    pub provider_info: Option<&'a Value>,
    /// The config's `[telemetry]` table.
    pub telemetry: &'a TelemetryConfig,
}

/// What a caller may wrap around the run's execution: the sink it gets is the one the run
/// emits to (the CLI adds telemetry this way).
pub trait Observe {
    fn observe(
        &mut self,
        facts: RunFacts,
        sink: &mut dyn EventSink,
        execute: &mut dyn FnMut(&mut dyn EventSink) -> Result<Ending>,
    ) -> Result<Ending>;
}

/// Runs the execution as it is.
pub struct Plain;

impl Observe for Plain {
    fn observe(
        &mut self,
        _facts: RunFacts,
        sink: &mut dyn EventSink,
        execute: &mut dyn FnMut(&mut dyn EventSink) -> Result<Ending>,
    ) -> Result<Ending> {
        execute(sink)
    }
}

/// Creates a new Session in `state` and runs its first run to its end.
///
/// Everything is checked before anything is written: a failure before the `sessionCreated`
/// event leaves the state dir as it was.
pub fn start(
    state: &StateDir,
    request: StartRequest,
    sink: &mut dyn EventSink,
    observe: &mut dyn Observe,
    cancel: &AtomicBool,
) -> Result<Ended> {
    // Before any tool or MCP server starts: a collector token is a credential.
    crate::telemetry::protect_env()?;
    let bound = request
        .plan
        .as_ref()
        .map(|p| binding::bind(&p.dir, &p.task, request.task.as_deref()))
        .transpose()?;
    let task = match &bound {
        Some(b) => b.first_input.clone(),
        None => request.task.clone().ok_or_else(|| {
            Error::usage(
                "no task given: pass exactly one of --task TEXT, --task-file FILE or --stdin",
            )
            .with_hint("kxen-agent run --workspace . --task \"Fix the failing check\"")
        })?,
    };
    let new_run = NewRunRequest {
        workspace: request.workspace,
        task,
        output_schema: request.output_schema,
        agent: request.agent,
        policy: request.policy,
        config: request.config.clone(),
        plan_dir: bound.as_ref().map(|b| b.binding.dir.clone()),
    };
    let mut draft = create::prepare(state, &new_run)?;
    refuse_state_inside(state, &draft.binding.root)?;
    let host = match bound {
        Some(b) => {
            draft.new.run.plan = Some(b.binding.clone());
            let config = ModelConfig::load(request.config.as_deref())?;
            Some(Mutex::new(crate::host::open_run_host(
                b.binding,
                &config,
                &draft.lock,
                draft.built,
                Default::default(),
                Default::default(),
            )?))
        }
        None => None,
    };
    create::grant_mcp(&mut draft, state)?;
    for warning in &draft.warnings {
        sink.emit(Event::Warning {
            message: warning.clone(),
        });
    }
    let (prepared, created) = create::create(state, draft)?;
    sink.emit(created);
    let ending = execute(&prepared, host.as_ref(), sink, observe, cancel)?;
    Ok(Ended {
        session_id: prepared.meta.id.clone(),
        run_id: prepared.run_id.clone(),
        ending,
        pushed: None,
    })
}

/// Continues Session `request.session_id` under its lease (and, with `remote`, under the
/// remote's lease: claimed and pulled first, pushed and released at the end, also when the run
/// needs input or fails). `cancel` is process-wide (a signal handler's flag): the thread that
/// renews a remote lease watches it too.
pub fn resume(
    state: &StateDir,
    request: ContinueRequest,
    sink: &mut dyn EventSink,
    observe: &mut dyn Observe,
    cancel: &'static AtomicBool,
) -> Result<Ended> {
    // Before any tool or MCP server starts: a collector token is a credential.
    crate::telemetry::protect_env()?;
    let Some(options) = request.remote.clone() else {
        return resume_here(state, &request, sink, observe, cancel, None);
    };
    let claim = RemoteRunRequest {
        session_id: request.session_id.clone(),
        remote: options.name.clone(),
        workspace: workspace_or_cwd(request.workspace.as_deref())?,
        ttl: options.ttl,
        take_expired: options.take_expired,
    };
    let claimed = RemoteRun::begin(state, &claim, cancel)?;
    if let Some(holder) = claimed.took_over_from() {
        sink.emit(Event::Warning {
            message: took_over(&claim.session_id, holder),
        });
    }
    let ran = resume_here(state, &request, sink, observe, cancel, Some(&claimed));
    match (claimed.finish(state), ran) {
        (Ok(pushed), Ok(mut ended)) => {
            ended.pushed = Some(pushed);
            Ok(ended)
        }
        // The run's own error comes first; a failed push or release is then only reported.
        (Err(e), Err(ran)) => {
            sink.emit(Event::Warning { message: e.message });
            Err(ran)
        }
        (Ok(_), Err(ran)) => Err(ran),
        (Err(e), Ok(_)) => Err(e),
    }
}

/// The warning of a remote takeover: whose lease, from which host and attempt.
fn took_over(session_id: &str, holder: &LeaseRecord) -> String {
    format!(
        "took over the expired remote lease of {session_id} (host {} pid {}, attempt {}, expired {})",
        holder.host, holder.pid, holder.attempt_id, holder.expires_at
    )
}

/// The run of a resume once the Session is here (and, with a remote, claimed and pulled).
fn resume_here(
    state: &StateDir,
    request: &ContinueRequest,
    sink: &mut dyn EventSink,
    observe: &mut dyn Observe,
    cancel: &AtomicBool,
    remote: Option<&RemoteRun>,
) -> Result<Ended> {
    // A new run after a finished one starts on the plan task like any new run.
    let bound = match (&request.plan, &request.task) {
        (Some(p), Some(text)) => Some(binding::bind(&p.dir, &p.task, Some(text))?),
        _ => None,
    };
    let task = bound
        .as_ref()
        .map(|b| b.first_input.clone())
        .or(request.task.clone());
    let prepare = ResumeRequest {
        session_id: request.session_id.clone(),
        output_schema: request.output_schema.clone(),
        task,
        workspace: request.workspace.clone(),
        rebind: request.rebind,
        policy: request.policy.clone(),
        config: request.config.clone(),
        plan_dir: request.plan.as_ref().map(|p| binding::plan_dir(&p.dir)),
    };
    let resumed = resume_run::prepare(state, &prepare)?;
    let given = request
        .plan
        .as_ref()
        .map(|p| (p.dir.as_path(), p.task.as_str()));
    let host = resume_host(state, &resumed, bound, given, request.config.as_deref())?;
    if state.is_within(&resumed.meta.workspace.root) {
        // The Session already lives there; refusing would strand it, so say what it means.
        sink.emit(Event::Warning {
            message: format!(
                "the state dir {} is inside the workspace {}: the agent can read and edit its \
                 own journal and messages; move the state dir outside the workspace",
                state.root().display(),
                resumed.meta.workspace.root.display()
            ),
        });
    }
    for warning in &resumed.warnings {
        sink.emit(Event::Warning {
            message: warning.clone(),
        });
    }
    sink.emit(Event::SessionResumed {
        session_id: resumed.meta.id.clone(),
        run_id: resumed.run_id.clone(),
        new_run: resumed.new_run,
    });
    let every = request.remote.as_ref().and_then(|r| r.push_every);
    let ending = match (remote, every) {
        (Some(remote), Some(every)) => {
            let mut pushing = PushEvery {
                inner: sink,
                remote,
                state,
                every,
                calls: 0,
            };
            execute(&resumed, host.as_ref(), &mut pushing, observe, cancel)?
        }
        _ => execute(&resumed, host.as_ref(), sink, observe, cancel)?,
    };
    Ok(Ended {
        session_id: resumed.meta.id.clone(),
        run_id: resumed.run_id.clone(),
        ending,
        pushed: None,
    })
}

/// Runs a prepared run to its end through `observe`.
fn execute(
    prepared: &Prepared,
    plan: Option<&Mutex<PlanHost>>,
    sink: &mut dyn EventSink,
    observe: &mut dyn Observe,
    cancel: &AtomicBool,
) -> Result<Ending> {
    let execution = Execution {
        plan,
        ..prepared.execution(cancel)
    };
    let facts = RunFacts {
        state: &prepared.state,
        provider_info: prepared.services.provider_info.as_ref(),
        telemetry: &prepared.services.telemetry,
    };
    observe.observe(facts, sink, &mut |sink| {
        agent_loop::execute(&execution, &prepared.run_id, sink)
    })
}

/// A new Session whose state dir lies inside its workspace is refused: the agent's own tools
/// could read and edit its journal and messages there (fail closed).
fn refuse_state_inside(state: &StateDir, workspace: &Path) -> Result<()> {
    if !state.is_within(workspace) {
        return Ok(());
    }
    Err(Error::usage(format!(
        "the state dir {} is inside the workspace {}: the agent could read and edit its own \
         journal and messages there",
        state.root().display(),
        workspace.display()
    ))
    .with_hint(
        "keep the state dir outside the workspace (--state-dir PATH or KXEN_AGENT_STATE_DIR)",
    ))
}

/// `push_every`: the sink, plus a snapshot pushed when every Nth tool call is about to run (its
/// `started` record is durable and goes with it). A failed push is a warning: the run goes on,
/// and its end pushes again.
struct PushEvery<'a> {
    inner: &'a mut dyn EventSink,
    remote: &'a RemoteRun,
    state: &'a StateDir,
    every: u64,
    calls: u64,
}

impl EventSink for PushEvery<'_> {
    fn emit(&mut self, event: Event) {
        if matches!(event, Event::ToolStarted { .. }) {
            self.calls += 1;
            if self.calls.is_multiple_of(self.every)
                && let Err(e) = self.remote.push_during(self.state)
            {
                self.inner.emit(Event::Warning {
                    message: format!("the snapshot push before this call failed: {}", e.message),
                });
            }
        }
        self.inner.emit(event);
    }

    fn progress(&mut self, progress: &crate::events::Progress) {
        self.inner.progress(progress);
    }
}

/// The plan host of a resumed run: a new run records its binding; a continued one must name the
/// plan task it was started on (exit 6 otherwise).
fn resume_host(
    state: &StateDir,
    resumed: &Prepared,
    bound: Option<Bound>,
    given: Option<(&Path, &str)>,
    config: Option<&Path>,
) -> Result<Option<Mutex<PlanHost>>> {
    let run_paths = resumed.paths.run(&resumed.run_id);
    let mut run = RunState::read(&run_paths, &resumed.run_id)?;
    match bound {
        Some(b) if resumed.new_run => {
            run.plan = Some(b.binding);
            run.save(&run_paths)?;
        }
        _ => binding::check_resume(run.plan.as_ref(), given, &run.id)?,
    }
    let Some(binding) = run.plan else {
        return Ok(None);
    };
    let config = ModelConfig::load(config)?;
    let base = crate::host::session_base(state, &resumed.paths, &binding, &run.id)?;
    let tree = crate::host::children_usage(state, &resumed.paths, &run.id)?;
    let host = crate::host::open_run_host(binding, &config, &resumed.meta.lock, false, base, tree)?;
    Ok(Some(Mutex::new(host)))
}
