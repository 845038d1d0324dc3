//! `kxen-agent run` (and `kxen-agent --task …`): create a Session and execute its first run.

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::Args;

use super::PolicyArgs;
use super::render::Renderer;
use super::signals;
use crate::cli::output::{Diagnostics, Format};
use crate::error::{Error, ErrorKind, ExitStatus, Result};
use crate::events::EventSink;
use crate::run::agent_loop::Ending;
use crate::run::entry::{
    self, ContinueRequest, Observe, PlanTask, RemoteOptions, RunFacts, StartRequest,
};
use crate::run::{FailReason, RunResult, RunStatus};
use crate::state::StateDir;

/// Flags of a new run (exactly one task source), or of `--resume SES` (at most one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Args)]
pub struct RunArgs {
    /// Continue Session SES: its unfinished run, or (with a task) a new run after a finished one.
    #[arg(long, value_name = "SES")]
    pub resume: Option<String>,
    /// With --resume and --workspace: accept a moved or copied workspace whose identity and
    /// branch still match.
    #[arg(long, requires = "resume")]
    pub rebind_workspace: bool,
    /// The repository (or directory) the agent works in. Default: the current directory.
    #[arg(long, value_name = "PATH")]
    pub workspace: Option<PathBuf>,
    /// The task, as text.
    #[arg(long, value_name = "TEXT", group = "task_source")]
    pub task: Option<String>,
    /// Read the task from a file.
    #[arg(long, value_name = "FILE", group = "task_source")]
    pub task_file: Option<PathBuf>,
    /// Read the task from standard input.
    #[arg(long, group = "task_source")]
    pub stdin: bool,
    /// A DCPAgent definition (YAML). Without it, the Builder asks the `planning` model role to
    /// write one for the task.
    #[arg(long, value_name = "FILE")]
    pub agent: Option<PathBuf>,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The model config (TOML). Default: $KXEN_AGENT_CONFIG, then
    /// $XDG_CONFIG_HOME/kxen-agent/config.toml, then ~/.config/kxen-agent/config.toml.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// With --resume: run under the Session's lease on git remote NAME of the workspace
    /// repository (`refs/kxen/leases/SES`, claimed by compare-and-swap; exit 5 naming the holder
    /// when another runner has it), pull its newest snapshot first, push the result at the end
    /// (also when the run needs input) and release the lease.
    #[arg(long, value_name = "NAME", requires = "resume")]
    pub remote: Option<String>,
    /// With --remote: take over a remote lease whose holder stopped renewing it (past its
    /// expiry). The pulled copy is recovered as after a crash: a call the holder started and
    /// did not finish is UNKNOWN, never run again.
    #[arg(long, requires = "remote")]
    pub take_expired_lease: bool,
    /// With --remote: also push a snapshot before every Nth tool call runs (its journaled start
    /// included), so a runner taking over after a crash elsewhere sees that call as UNKNOWN.
    #[arg(long, value_name = "N", requires = "remote", value_parser = clap::value_parser!(u64).range(1..))]
    pub push_every: Option<u64>,
    /// With --remote: the lease's time to live in seconds (default 300); it is renewed every
    /// third of it while the run runs.
    #[arg(long, value_name = "SECS", requires = "remote", value_parser = clap::value_parser!(u64).range(1..))]
    pub lease_ttl: Option<u64>,
    /// Work on a task of the DWP plan folder DIR (with --plan-task): the task's context manifest
    /// follows the task text as the run's first input, token and spend samples go to the plan's
    /// journal, and its enforced limits stop the run (exit 8). A resume must name it again.
    #[arg(long, value_name = "DIR", requires = "plan_task")]
    pub plan: Option<PathBuf>,
    /// The plan task (a T-… id of the plan's contract); with --plan.
    #[arg(long, value_name = "T", requires = "plan")]
    pub plan_task: Option<String>,
    /// A JSON Schema (a JSON file) this run's final answer must match, beside the definition's
    /// own output contract: an answer that does not is a failed run (exit 1) naming the first
    /// violations by JSON pointer. Only for a new run (a new Session, or --resume with a task).
    #[arg(long, value_name = "FILE")]
    pub output_schema: Option<PathBuf>,
}

impl RunArgs {
    /// No run option was given.
    pub fn is_empty(&self) -> bool {
        *self == RunArgs::default()
    }
}

/// Runs a new Session's first run (or, with `--resume`, continues one); the exit code follows
/// how the run ended. Everything that guards the run happens in [`entry`]; this only maps the
/// flags to a request and the ending to an exit status.
pub fn run(state_flag: Option<&Path>, args: RunArgs, format: Format) -> Result<ExitStatus> {
    if args.resume.is_some() {
        return resume(state_flag, args, format);
    }
    let request = StartRequest {
        task: read_task(&args)?,
        output_schema: read_output_schema(&args)?,
        workspace: match &args.workspace {
            Some(w) => w.clone(),
            None => std::env::current_dir()
                .map_err(|e| Error::io("read the current directory", Path::new("."), e))?,
        },
        agent: args.agent.clone(),
        policy: args.policy.flags(),
        config: args.config.clone(),
        plan: plan_of(&args),
    };
    let state = super::open_state(state_flag)?;
    let mut renderer = Renderer::new(format);
    let mut traced = Traced { format };
    let ended = entry::start(
        &state,
        request,
        &mut renderer,
        &mut traced,
        signals::cancel_flag(),
    )?;
    let hints = Hints::new(&state, state_flag.is_some(), resume_flags(&args));
    Ok(exit_status(
        &ended.session_id,
        &ended.run_id,
        &ended.ending,
        &hints,
    ))
}

/// `--resume SES [--task …]`: continue the Session under its lease.
fn resume(state_flag: Option<&Path>, args: RunArgs, format: Format) -> Result<ExitStatus> {
    if args.agent.is_some() {
        return Err(Error::usage(
            "--agent cannot be used with --resume: a Session keeps the agent it was created with",
        )
        .with_hint("drop --agent, or start a new Session with `kxen-agent run --agent FILE …`"));
    }
    let request = ContinueRequest {
        session_id: args.resume.clone().unwrap_or_default(),
        task: read_task(&args)?,
        output_schema: read_output_schema(&args)?,
        workspace: args.workspace.clone(),
        rebind: args.rebind_workspace,
        policy: args.policy.flags(),
        config: args.config.clone(),
        plan: plan_of(&args),
        remote: args.remote.clone().map(|name| RemoteOptions {
            name,
            ttl: args
                .lease_ttl
                .map(std::time::Duration::from_secs)
                .unwrap_or(crate::sync::lease::DEFAULT_TTL),
            take_expired: args.take_expired_lease,
            push_every: args.push_every,
        }),
    };
    let state = super::open_state(state_flag)?;
    let mut renderer = Renderer::new(format);
    let mut traced = Traced { format };
    let ended = entry::resume(
        &state,
        request,
        &mut renderer,
        &mut traced,
        signals::cancel_flag(),
    )?;
    if let Some(pushed) = &ended.pushed {
        match format {
            Format::Text => crate::cli::output::note(&format!(
                "pushed {} to `{}` as {}; remote lease released",
                pushed.session_id,
                pushed.remote,
                &pushed.snapshot[..12]
            )),
            Format::Jsonl => {
                let mut line = serde_json::json!({"type": "sessionPushed"});
                if let (Some(map), Ok(serde_json::Value::Object(fields))) =
                    (line.as_object_mut(), serde_json::to_value(pushed))
                {
                    map.extend(fields);
                }
                crate::cli::output::json_line(&line);
            }
        }
    }
    let hints = Hints::new(&state, state_flag.is_some(), resume_flags(&args));
    Ok(exit_status(
        &ended.session_id,
        &ended.run_id,
        &ended.ending,
        &hints,
    ))
}

/// The run's events through the OpenTelemetry exporter when the environment asks for it
/// ([`super::trace::traced`]).
struct Traced {
    format: Format,
}

impl Observe for Traced {
    fn observe(
        &mut self,
        facts: RunFacts,
        sink: &mut dyn EventSink,
        execute: &mut dyn FnMut(&mut dyn EventSink) -> Result<Ending>,
    ) -> Result<Ending> {
        let RunFacts {
            state,
            provider_info,
            telemetry,
        } = facts;
        super::trace::traced(state, provider_info, telemetry, sink, self.format, execute)
    }
}

/// `--output-schema FILE`, read and checked (exit 3 when missing, exit 4 when it is no usable
/// JSON Schema).
fn read_output_schema(args: &RunArgs) -> Result<Option<serde_json::Value>> {
    args.output_schema
        .as_deref()
        .map(|path| crate::agent::schema::load(path, "--output-schema"))
        .transpose()
}

/// `--plan DIR --plan-task T` (clap makes each require the other).
fn plan_of(args: &RunArgs) -> Option<PlanTask> {
    Some(PlanTask {
        dir: args.plan.clone()?,
        task: args.plan_task.clone()?,
    })
}

/// The options a later `--resume` of this Session must repeat, as they were given here: the
/// policy flags (a difference is refused as drift), `--config` and `--workspace`. Shown in the
/// hints so that the printed command works when pasted.
fn resume_flags(args: &RunArgs) -> String {
    let mut out = String::new();
    let mut push = |flag: &str, value: Option<&std::ffi::OsStr>| {
        out.push(' ');
        out.push_str(flag);
        if let Some(v) = value {
            out.push(' ');
            out.push_str(&shell_word(&v.to_string_lossy()));
        }
    };
    if let Some(w) = &args.workspace {
        push("--workspace", Some(w.as_os_str()));
    }
    if let Some(p) = &args.policy.policy {
        push("--policy", Some(p.as_os_str()));
    }
    if args.policy.allow_shell {
        push("--allow-shell", None);
    }
    if args.policy.allow_mcp {
        push("--allow-mcp", None);
    }
    if args.policy.allow_network {
        push("--allow-network", None);
    }
    for name in &args.policy.pass_env {
        push("--pass-env", Some(std::ffi::OsStr::new(name)));
    }
    if let Some(c) = &args.config {
        push("--config", Some(c.as_os_str()));
    }
    if let Some(r) = &args.remote {
        push("--remote", Some(std::ffi::OsStr::new(r)));
    }
    if let Some(t) = &args.lease_ttl {
        push("--lease-ttl", Some(std::ffi::OsStr::new(&t.to_string())));
    }
    if let Some(n) = &args.push_every {
        push("--push-every", Some(std::ffi::OsStr::new(&n.to_string())));
    }
    if let Some(plan) = plan_of(args) {
        push("--plan", Some(plan.dir.as_os_str()));
        push("--plan-task", Some(std::ffi::OsStr::new(&plan.task)));
    }
    out
}

/// `word` quoted for a POSIX shell when it needs it.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@%+,".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// What the commands printed in hints must repeat to work when pasted: `--state-dir` when it was
/// given on the command line (as an absolute path), and the flags of [`resume_flags`].
pub struct Hints {
    /// `kxen-agent` with the global options.
    bin: String,
    resume_flags: String,
    /// Where the run's `task` children are looked up (their commands are the next step).
    state: StateDir,
}

impl Hints {
    fn new(state: &StateDir, explicit_state: bool, resume_flags: String) -> Hints {
        let root = state.root();
        let bin = match explicit_state.then_some(root) {
            Some(dir) => format!(
                "kxen-agent --state-dir {}",
                shell_word(&dir.to_string_lossy())
            ),
            None => "kxen-agent".to_string(),
        };
        Hints {
            bin,
            resume_flags,
            state: state.clone(),
        }
    }
}

/// The exit status of a run's ending (success only for `completed`), with the error line on
/// stderr; the hints name commands that work when pasted (see [`Hints`]).
pub fn exit_status(session_id: &str, run_id: &str, ending: &Ending, hints: &Hints) -> ExitStatus {
    let Hints {
        bin,
        resume_flags,
        state,
    } = hints;
    let inspect = format!("{bin} run show {session_id} {run_id}");
    let err = match ending {
        Ending::InputRequired(ops) => {
            // With one unknown operation the command names it; with several, OP stands for each.
            let op = match ops.as_slice() {
                [one] => one.as_str(),
                _ => "OP",
            };
            let children = waiting_children(state, session_id, run_id, ops);
            // A task call waiting for a subagent is not an unknown side effect: its child's
            // durable state says how far it got; name the child, not "may have had its effect".
            let message = if !children.is_empty() && children.len() == ops.len() {
                let waiting: Vec<String> = children
                    .iter()
                    .map(|(op, child)| format!("{op} (subagent session {})", child.session_id))
                    .collect();
                format!(
                    "run {run_id} needs input: task call{} {} wait{} for a subagent that needs input",
                    if ops.len() == 1 { "" } else { "s" },
                    waiting.join(", "),
                    if ops.len() == 1 { "s" } else { "" },
                )
            } else {
                format!(
                    "run {run_id} needs input: the outcome of {} is unknown (the tool may have had its effect)",
                    ops.join(", ")
                )
            };
            Error::input_required(message)
            .with_id(run_id)
            .with_hint(match children.as_slice() {
                // A task call waits for its subagent: the child's command is the next step, and
                // resuming the parent then takes the child's result.
                [(op, child), ..] => format!(
                    "{op} is a task call whose subagent has not ended: {}",
                    child.next_step(
                        bin,
                        &format!(
                            "continue with `{bin} --resume {session_id}{resume_flags}`, which resumes the subagent and takes its result"
                        )
                    )
                ),
                [] => format!(
                    "inspect with `{inspect}`, then record what happened with `{bin} run resolve {session_id} {run_id} {op} --output TEXT` and continue with `{bin} --resume {session_id}{resume_flags}`"
                ),
            })
        }
        Ending::ApprovalRequired(ops) => {
            let op = match ops.as_slice() {
                [one] => one.as_str(),
                _ => "OP",
            };
            Error::input_required(format!(
                "run {run_id} needs input: {} wait{} for approval (the policy's mcpTools rule is \"ask\"); nothing of {} has run",
                ops.join(", "),
                if ops.len() == 1 { "s" } else { "" },
                if ops.len() == 1 { "it" } else { "them" },
            ))
            .with_id(run_id)
            .with_hint(format!(
                "inspect the call with `{inspect}`, then `{bin} run approve {session_id} {run_id} {op}` or `{bin} run deny {session_id} {run_id} {op} --reason TEXT`, and continue with `{bin} --resume {session_id}{resume_flags}`"
            ))
        }
        Ending::PlanLimitExhausted(stop) => {
            let dir = shell_word(&stop.plan_dir.to_string_lossy());
            Error::new(
                ErrorKind::Budget,
                format!(
                    "run {run_id} stopped (planLimitExhausted): plan limit {} is exhausted (LIMIT \
                     record seq {}): {}",
                    stop.limit, stop.seq, stop.detail
                ),
            )
            .with_id(run_id)
            .with_hint(format!(
                "see `dwp resources report --plan {dir}`; once more budget is granted, `dwp \
                 resources recover --plan {dir} --limit {}` lifts the hold, then continue with \
                 `{bin} --resume {session_id}{resume_flags}`",
                stop.limit
            ))
        }
        Ending::Finished(result) => match finished_error(result) {
            None => return ExitStatus::Success,
            Some(err) => err
                .with_id(run_id)
                .with_hint(format!("inspect the run with `{inspect}`")),
        },
    };
    // The run's own events already told a JSON reader how it ended: stderr only.
    Diagnostics::kxen(Format::Text).error_lines(&err)
}

/// The operations among `ops` (of run `run_id`) that are `task` calls whose child has not
/// ended, with that child (unreadable state: none; the hint then names `run resolve`, which
/// refuses with the reason).
fn waiting_children(
    state: &StateDir,
    session_id: &str,
    run_id: &str,
    ops: &[String],
) -> Vec<(String, crate::run::children::Waiting)> {
    let journal = state.session(session_id).run(run_id).journal();
    let Ok(table) = crate::journal::read(&journal) else {
        return Vec::new();
    };
    ops.iter()
        .filter_map(|id| {
            let op = table.get(id)?;
            let child = crate::run::children::waiting_child(state, op).ok()??;
            Some((id.clone(), child))
        })
        .collect()
}

/// Why a finished run is not a success, as the error of its exit status (`None`: completed).
fn finished_error(result: &RunResult) -> Option<Error> {
    let kind = match (result.status, result.reason) {
        (RunStatus::Completed, _) => return None,
        (RunStatus::Canceled, _) => ErrorKind::Canceled,
        (_, Some(FailReason::BudgetExhausted)) => ErrorKind::Budget,
        (_, Some(FailReason::ProviderFailed)) => ErrorKind::External,
        _ => ErrorKind::Failed,
    };
    let why = result
        .error
        .as_ref()
        .map(|e| e.message.as_str())
        .unwrap_or("no reason recorded");
    Some(Error::new(
        kind,
        format!("run {}: {why}", result.status.name()),
    ))
}

/// The task from the one given source of `--task`, `--task-file`, `--stdin` (`None` if none).
fn read_task(args: &RunArgs) -> Result<Option<String>> {
    let text = if let Some(task) = &args.task {
        task.clone()
    } else if let Some(path) = &args.task_file {
        std::fs::read_to_string(path).map_err(|e| {
            // A task file that exists but cannot be read (a directory, not UTF-8) is the
            // user's mistake (exit 4), a missing one is not found (exit 3).
            Error::io_or("read the task file", path, e, ErrorKind::InvalidInput)
        })?
    } else if args.stdin {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).map_err(|e| {
            Error::invalid(format!("cannot read the task from standard input: {e}"))
        })?;
        text
    } else {
        return Ok(None);
    };
    if text.trim().is_empty() {
        return Err(Error::usage("the task is empty")
            .with_hint("give the task with --task TEXT, --task-file FILE or --stdin"));
    }
    Ok(Some(text))
}
