//! `kxen-agent`: the DCPAgent runtime's command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

mod agent;
mod bundle;
mod config;
mod host;
mod init;
mod lineage;
mod mcp;
mod remote;
mod render;
mod report;
mod run;
mod show;
mod signals;
mod status;
mod trace;

pub use run::RunArgs;

use super::output::{self, Format};
use crate::error::{Error, ErrorKind, ExitStatus, Result};
use crate::state::{StateDir, StateEnv};

/// Run coding agents durably next to git: every side effect is journaled, so a crash, a kill or
/// a second process never repeats or loses work.
#[derive(Debug, Parser)]
#[command(
    name = "kxen-agent",
    version,
    after_help = crate::error::kxen_exit_code_table(),
    arg_required_else_help = true
)]
pub struct Cli {
    /// State directory (beats $KXEN_AGENT_STATE_DIR, then $XDG_STATE_HOME/kxen-agent, then
    /// ~/.local/state/kxen-agent).
    #[arg(long, global = true, value_name = "PATH")]
    pub state_dir: Option<PathBuf>,

    /// Output format: one JSON object per line (jsonl), or a human view (text).
    #[arg(long, global = true, value_enum, default_value_t = Format::Jsonl)]
    pub format: Format,

    /// `kxen-agent --task …` is `kxen-agent run --task …` with `run` omitted.
    #[command(flatten)]
    pub run: RunArgs,

    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Work with DCPAgent definitions.
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Work with runtime permission policies.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Sessions: list, show, verify, report and diff (read-only); fork, export and import.
    #[command(subcommand)]
    Session(SessionCommand),
    /// Run an agent on a task in a workspace (a new Session), or inspect runs.
    Run(Box<RunCmd>),
    /// kxen-agent as a DWP host: what it can truthfully declare.
    #[command(subcommand)]
    Host(HostCommand),
    /// The model config: which provider serves which model role.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// OAuth logins of MCP servers: login, logout, status (the per-user token store).
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Write a commented model config for one kind of server (never a key: only the name of
    /// the variable holding it, `api_key_env`). Refuses to overwrite an existing file (exit 5)
    /// unless --force, which replaces it atomically.
    Init(config::ConfigInitArgs),
}

/// `config init --provider`: the templates of [`crate::templates::ModelConfigTemplate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ProviderTemplate {
    /// The OpenAI API (chat-completions, OPENAI_API_KEY).
    Openai,
    /// The Anthropic API (Messages, ANTHROPIC_API_KEY).
    Anthropic,
    /// OpenRouter or another OpenAI-format gateway (OPENROUTER_API_KEY).
    Openrouter,
    /// A local ollama server (OpenAI format, port 11434, no key).
    Ollama,
    /// A vLLM server (OpenAI format, port 8000).
    Vllm,
    /// A llama.cpp llama-server (OpenAI format, port 8080).
    Llamacpp,
}

impl ProviderTemplate {
    fn template(self) -> crate::templates::ModelConfigTemplate {
        use crate::templates::ModelConfigTemplate as T;
        match self {
            ProviderTemplate::Openai => T::Openai,
            ProviderTemplate::Anthropic => T::Anthropic,
            ProviderTemplate::Openrouter => T::Openrouter,
            ProviderTemplate::Ollama => T::Ollama,
            ProviderTemplate::Vllm => T::Vllm,
            ProviderTemplate::Llamacpp => T::Llamacpp,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum HostCommand {
    /// Print the DWP host abilities a Session made with this config, policy (and agent) would
    /// truthfully have: the closed set of eight booleans, as one JSON object that `dwp
    /// abilities --caps` and `dwp resources report --caps` accept. Read-only.
    Abilities(host::HostAbilitiesArgs),
}

/// `kxen-agent run …`: either a new run (flags) or a run subcommand.
#[derive(Debug, clap::Args)]
pub struct RunCmd {
    #[command(flatten)]
    pub args: RunArgs,
    #[command(subcommand)]
    pub action: Option<RunCommand>,
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// List the Sessions in the state dir, newest first, with lineage (parent, fork kind) and
    /// workspace (read-only).
    List(show::SessionListArgs),
    /// Print a Session: metadata, workspace binding, lock, runs and messages (read-only).
    Show(show::SessionShowArgs),
    /// Check a Session in place: every JSON file parses, the hash chains of its messages and
    /// run journals hold, runs and journals agree, the lock's definition hash re-derives and
    /// every referenced blob is intact. Exit 0, or 10 naming the first broken record (read-only).
    Verify(bundle::SessionVerifyArgs),
    /// Write one self-contained HTML page of the Session, readable offline (no script, font or
    /// link to anything outside it): its runs as a timeline (attempts and resumes, model calls,
    /// tool calls with duration and outcome, UNKNOWN and approval stops, compactions), tokens
    /// and cost per model call as a chart, every edit as a diff, the `task` children as a tree,
    /// and what `session verify` says. Read-only; works during a run. Text from models and tools
    /// is escaped. A Session that fails verification still gets its report, then exit 10.
    Report(report::SessionReportArgs),
    /// Write the Session into one self-contained, checksummed bundle (mode 0600, replaced
    /// atomically): its metadata, binding, lock, messages, runs, tool journals and the blobs they
    /// reference. Never a credential, but task text, tool arguments and outputs: private evidence.
    /// Refused (exit 5) while a run holds the Session's lease.
    Export(bundle::SessionExportArgs),
    /// Import a bundle into this state dir, bound to PATH (which must be a clone of the Session's
    /// repository on its branch, exit 5 otherwise). Every checksum, chain and cross-reference
    /// is verified first; a failed import leaves nothing behind. Continue with
    /// `kxen-agent --resume SES --workspace PATH`.
    Import(bundle::SessionImportArgs),
    /// Push the Session to a git remote of its workspace repository: its bundle content (never a
    /// credential) as a snapshot commit at `refs/kxen/sessions/SES`, whose parent is the last
    /// snapshot this clone pushed or pulled. Only new objects are sent. A remote that has a newer
    /// snapshot is never overwritten (exit 5: pull first). Nothing is written to the working
    /// tree, the index or a branch. Refused (exit 5) while a run holds the Session's lease.
    Push(remote::SessionPushArgs),
    /// Fetch the Session's newest snapshot from a git remote and import it, bound to PATH, with
    /// every check `session import` makes (a damaged snapshot is exit 10 and changes nothing).
    /// A Session that exists here is replaced only if it is an ancestor of the snapshot (the same
    /// records, plus more); otherwise exit 5 naming where they differ.
    Pull(remote::SessionPullArgs),
    /// Start a new Session from a Session's conversation up to message MSG (the parent is never
    /// changed). With --worktree NAME the new Session gets its own git worktree
    /// `<repo>/.kxen/worktrees/NAME` on the new branch `kxen/NAME`.
    Fork(lineage::SessionForkArgs),
    /// Compare two Sessions: conversations (one block per message), locks and workspace
    /// bindings as unified diffs; in jsonl format one object with the common prefix length and the
    /// diverging messages (read-only).
    Diff(lineage::SessionDiffArgs),
}

#[derive(Debug, Subcommand)]
pub enum RunCommand {
    /// Record the verified outcome of an operation whose outcome is UNKNOWN; the operation is
    /// never re-executed, and the next --resume gives the model exactly this output. Any process
    /// of the operation still running (Linux) is stopped before the outcome is recorded.
    Resolve(show::RunResolveArgs),
    /// Approve a call that waits for approval (its policy rule is `ask`): the next --resume runs
    /// it through the durable journal. Bound to the operation and the hash of its arguments;
    /// recorded once (a second decision is exit 5).
    Approve(show::RunApproveArgs),
    /// Deny a call that waits for approval: it never runs, and the next --resume gives the model
    /// the denial (with the reason) as the tool's error result. Recorded once (exit 5 after).
    Deny(show::RunDenyArgs),
    /// Print a run's state and every tool-journal operation with its phase, and the calls that
    /// wait for approval (read-only).
    Show(show::RunShowArgs),
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Write a commented starter definition (refuses to overwrite an existing file).
    Init(init::AgentInitArgs),
    /// Check a DCPAgent definition against every rule of the spec and print its canonical form
    /// and definitionHash. Deterministic: never calls a model, never writes anything. Exit 0 if
    /// valid, 4 if not (the message names the file, line:column and field path).
    Validate(agent::AgentValidateArgs),
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Write a starter runtime policy (refuses to overwrite an existing file).
    Init(init::PolicyInitArgs),
    /// Show the merged runtime policy (file plus flags), its hash, the permitted capability
    /// catalog and the `exec` fence with whether this machine can enforce it (checked by starting
    /// `/bin/true` inside it); with --agent, also the capabilities a Session would get, or the
    /// refusal (exit 6). Read-only: writes nothing.
    Check(agent::PolicyCheckArgs),
}

/// The policy options shared by every command that creates or continues a Session.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct PolicyArgs {
    /// Runtime policy JSON (allowed/denied capabilities, allowShell, allowMcp, passEnv, budgets,
    /// sandbox, allowNetwork).
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
    /// Permit shell access (`exec`, `task`); off by default even if the agent asks for it.
    #[arg(long)]
    pub allow_shell: bool,
    /// Permit MCP tools (`mcp__*`); off by default.
    #[arg(long)]
    pub allow_mcp: bool,
    /// Let `exec` children use the network (otherwise they run in an empty network namespace:
    /// no connection to anything, not even 127.0.0.1).
    #[arg(long)]
    pub allow_network: bool,
    /// Let tool subprocesses see this sensitive environment variable (repeatable; never a
    /// model-provider key).
    #[arg(long, value_name = "NAME")]
    pub pass_env: Vec<String>,
}

impl PolicyArgs {
    /// The library's view of these options.
    pub fn flags(&self) -> crate::policy::PolicyFlags {
        crate::policy::PolicyFlags {
            policy_file: self.policy.clone(),
            allow_shell: self.allow_shell,
            allow_mcp: self.allow_mcp,
            allow_network: self.allow_network,
            pass_env: self.pass_env.clone(),
        }
    }
}

/// Entry point of the `kxen-agent` binary; returns the process exit code.
pub fn main() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage_error(err).code(),
    };
    let diagnostics = output::Diagnostics::kxen(cli.format);
    // Before anything reads a credential or starts a thread or a child (see `own_env`).
    let status = match crate::own_env::init()
        .map_err(Error::from)
        .and_then(|()| dispatch(cli))
    {
        Ok(status) => status,
        Err(err) => diagnostics.error(&err),
    };
    status.code()
}

/// Reports a command line clap refused. `--help` and `--version` print as usual (exit 0); a
/// real usage error also gets its `{"type":"error","kind":"usage"}` line on stdout in jsonl mode,
/// like every other error, so log consumers see why nothing ran.
fn usage_error(err: clap::Error) -> ExitStatus {
    use clap::error::ErrorKind as Clap;
    if matches!(
        err.kind(),
        Clap::DisplayHelp | Clap::DisplayVersion | Clap::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        let _ = err.print();
        return if err.use_stderr() {
            ExitStatus::Failure(ErrorKind::Usage)
        } else {
            ExitStatus::Success
        };
    }
    let _ = err.print();
    // The format flag could not be parsed with the rest; look for it by hand.
    let args: Vec<String> = std::env::args().collect();
    let text = args
        .windows(2)
        .any(|w| w[0] == "--format" && w[1] == "text")
        || args.iter().any(|a| a == "--format=text");
    let format = if text { Format::Text } else { Format::Jsonl };
    // clap wrote the stderr lines (with the usage); the JSON line is ours.
    let message = err
        .render()
        .to_string()
        .lines()
        .next()
        .unwrap_or("invalid command line")
        .trim_start_matches("error: ")
        .to_string();
    output::Diagnostics::kxen(format).error_json(&Error::usage(message))
}

/// The state dir every command works on, with any fast-forward swap a killed pull committed
/// completed first (`bundle::finish_swaps`), so no command sees a half-swapped task tree.
pub(crate) fn open_state(flag: Option<&std::path::Path>) -> Result<StateDir> {
    let state = StateDir::resolve(flag, &StateEnv::from_process())?;
    crate::bundle::finish_swaps(&state)?;
    Ok(state)
}

fn dispatch(cli: Cli) -> Result<ExitStatus> {
    let format = cli.format;
    // A run that needs an MCP server authorized shows the URL to a person at a terminal.
    crate::mcp::oauth_code::set_url_sink(output::note);
    let state = || open_state(cli.state_dir.as_deref());
    let Some(command) = cli.command else {
        return run::run(cli.state_dir.as_deref(), cli.run, format);
    };
    // Run flags belong to a run: `kxen-agent --task … session list` is a mistake, not a run.
    // (clap's args_conflicts_with_subcommands would also refuse the global --format/--state-dir.)
    let run_flags_with_subcommand = match &command {
        Command::Run(cmd) => cmd.action.is_some() && !cmd.args.is_empty(),
        _ => false,
    };
    if !cli.run.is_empty() || run_flags_with_subcommand {
        return Err(Error::usage(
            "run options (--task, --workspace, --agent, --resume, …) cannot be combined with a subcommand",
        )
        .with_hint("start a run with `kxen-agent run --task …` (or `kxen-agent --task …`)"));
    }
    match command {
        Command::Session(SessionCommand::List(args)) => match &args.remote {
            Some(remote) => remote::list(&state()?, args.workspace.as_deref(), remote, format),
            None => show::session_list(&state()?, args.workspace.as_deref(), args.strict, format),
        },
        Command::Session(SessionCommand::Push(args)) => {
            remote::push(&state()?, &args.session, args.remote.as_deref(), format)
        }
        Command::Session(SessionCommand::Pull(args)) => remote::pull(
            &state()?,
            &args.session,
            args.remote.as_deref(),
            &args.workspace,
            format,
        ),
        Command::Session(SessionCommand::Fork(args)) => {
            let request = crate::session::fork::ForkRequest {
                parent: args.session,
                at: args.at,
                before: args.before,
                worktree: args.worktree,
            };
            lineage::session_fork(&state()?, &request, format)
        }
        Command::Session(SessionCommand::Diff(args)) => {
            let state_a = state()?;
            let state_b = match &args.other_state_dir {
                Some(dir) => open_state(Some(dir))?,
                None => state_a.clone(),
            };
            lineage::session_diff(&state_a, &args.a, &state_b, &args.b, format)
        }
        Command::Session(SessionCommand::Show(args)) => {
            show::session_show(&state()?, &args.session, format)
        }
        Command::Session(SessionCommand::Verify(args)) => {
            bundle::verify(&state()?, &args.session, format)
        }
        Command::Session(SessionCommand::Report(args)) => report::report(
            &state()?,
            &args.session,
            args.output.as_deref(),
            args.summary.as_deref(),
            args.config.as_deref(),
            format,
        ),
        Command::Session(SessionCommand::Export(args)) => {
            bundle::export(&state()?, &args.session, &args.output, format)
        }
        Command::Session(SessionCommand::Import(args)) => {
            bundle::import(&state()?, args.file, args.workspace, format)
        }
        Command::Run(cmd) => match cmd.action {
            Some(RunCommand::Show(args)) => {
                show::run_show(&state()?, &args.session, &args.run, format)
            }
            Some(RunCommand::Resolve(args)) => {
                let resolution = crate::run::resolve::Resolution {
                    session_id: args.session,
                    run_id: args.run,
                    op_id: args.op,
                    output: args.output,
                    is_error: args.is_error,
                };
                show::run_resolve(&state()?, &resolution, format)
            }
            Some(RunCommand::Approve(args)) => {
                let decision = crate::run::approval::Decision::Approve;
                let ids = [args.session.as_str(), args.run.as_str(), args.op.as_str()];
                let hash = args.arguments_hash.as_deref();
                show::run_decide(&state()?, ids, &decision, hash, format)
            }
            Some(RunCommand::Deny(args)) => {
                let decision = crate::run::approval::Decision::Deny {
                    reason: args.reason,
                };
                let ids = [args.session.as_str(), args.run.as_str(), args.op.as_str()];
                let hash = args.arguments_hash.as_deref();
                show::run_decide(&state()?, ids, &decision, hash, format)
            }
            None => run::run(cli.state_dir.as_deref(), cmd.args, format),
        },
        Command::Agent(AgentCommand::Init(args)) => init::write_starter(
            &args.output,
            crate::templates::AGENT_YAML,
            "agent definition",
            format,
        ),
        Command::Agent(AgentCommand::Validate(args)) => agent::validate(&args.file, format),
        Command::Policy(PolicyCommand::Init(args)) => init::write_starter(
            &args.output,
            crate::templates::POLICY_JSON,
            "policy",
            format,
        ),
        Command::Policy(PolicyCommand::Check(args)) => agent::policy_check(
            &args.policy.flags(),
            args.agent.as_deref(),
            args.config.as_deref(),
            format,
        ),
        Command::Host(HostCommand::Abilities(args)) => host::abilities(
            args.config.as_deref(),
            args.agent.as_deref(),
            &args.policy.flags(),
        ),
        Command::Config(ConfigCommand::Init(args)) => config::init(
            args.provider.template(),
            args.output.as_deref(),
            args.force,
            format,
        ),
        Command::Mcp(command) => mcp::dispatch(command, format),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_config_template_has_its_provider_value() {
        use clap::ValueEnum;
        let names: Vec<String> = ProviderTemplate::value_variants()
            .iter()
            .map(|v| {
                let value = v.to_possible_value().unwrap();
                assert_eq!(value.get_name(), v.template().name());
                value.get_name().to_string()
            })
            .collect();
        let all: Vec<&str> = crate::templates::ModelConfigTemplate::ALL
            .iter()
            .map(|t| t.name())
            .collect();
        assert_eq!(names, all);
    }

    #[test]
    fn help_documents_every_exit_code() {
        let help = Cli::command().render_long_help().to_string();
        for kind in crate::error::ErrorKind::ALL {
            assert!(help.contains(kind.meaning()), "{:?}", kind);
        }
    }
}
