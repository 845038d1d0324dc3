//! `dwp config …`: show and change the addon registry (docs/dwp-spec.md, "Config commands").

use clap::{Args, Subcommand};

use super::{RepoArgs, print_document, print_warnings};
use crate::cli::output;
use crate::dwp::config::{self, Config};
use crate::dwp::pyfmt::inline_json;
use crate::dwp::{addons, repo};
use crate::error::{ErrorKind, ExitStatus, Result};

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the resolved registry: {"addons", "benchmark", "host"}.
    Show(RepoArgs),
    /// Print the enabled addon keys, one per line.
    Enabled(RepoArgs),
    /// Record addons.KEY = {enabled: true[, version][, note]} in the repository file.
    Enable(EnableArgs),
    /// Record addons.KEY = {enabled: false} in the repository file.
    Disable {
        /// The addon key (see `dwp config keys`).
        key: String,
        #[command(flatten)]
        repo: RepoArgs,
    },
    /// Record host.ABILITY = true|false in the repository file.
    Host {
        /// One of the closed set of host abilities.
        ability: String,
        /// true or false.
        #[arg(value_parser = ["true", "false"])]
        value: String,
        #[command(flatten)]
        repo: RepoArgs,
    },
    /// Print the addon keys dwp ships, one per line.
    Keys,
    /// Audit the addon descriptors: `OK   KEY` or `FAIL KEY: errors` (exit 1 if any fails).
    Descriptors,
    /// Propose entries for installed but unrecorded addons (repository installs only).
    Backfill {
        /// Record the proposals (default: dry run).
        #[arg(long)]
        write: bool,
        #[command(flatten)]
        repo: RepoArgs,
    },
}

#[derive(Debug, Args)]
pub struct EnableArgs {
    /// The addon key (see `dwp config keys`).
    key: String,
    /// The pinned tag, like v1.2.3 or v1.2.3-beta.1 (informative).
    #[arg(long)]
    version: Option<String>,
    /// One line of 1-200 characters recording the decision.
    #[arg(long)]
    note: Option<String>,
    #[command(flatten)]
    repo: RepoArgs,
}

pub fn run(cmd: ConfigCommand) -> Result<ExitStatus> {
    match cmd {
        ConfigCommand::Show(args) => {
            let cfg = load(&args)?;
            let mut warnings = cfg.warnings.clone();
            let doc = cfg.show(&mut warnings);
            print_warnings(&warnings);
            print_document(&doc);
        }
        ConfigCommand::Enabled(args) => {
            let cfg = load(&args)?;
            let mut warnings = cfg.warnings.clone();
            let keys = cfg.enabled(&mut warnings);
            print_warnings(&warnings);
            for key in keys {
                output::line(&key);
            }
        }
        ConfigCommand::Enable(a) => {
            let root = a.repo.root_for_writing()?;
            let (entry, _) =
                config::enable(&root, &a.key, a.version.as_deref(), a.note.as_deref())?;
            output::line(&format!("OK: addons.{} = {}", a.key, inline_json(&entry)));
        }
        ConfigCommand::Disable { key, repo } => {
            let root = repo.root_for_writing()?;
            let (entry, _) = config::disable(&root, &key)?;
            output::line(&format!("OK: addons.{key} = {}", inline_json(&entry)));
        }
        ConfigCommand::Host {
            ability,
            value,
            repo,
        } => {
            let root = repo.root_for_writing()?;
            let (host, _) = config::set_host(&root, &ability, value == "true")?;
            output::line(&format!("OK: host = {}", inline_json(&host)));
        }
        ConfigCommand::Keys => {
            for key in addons::KEYS {
                output::line(key);
            }
        }
        ConfigCommand::Descriptors => return Ok(descriptors()),
        ConfigCommand::Backfill { write, repo } => backfill(&repo.root_for_writing()?, write)?,
    }
    Ok(ExitStatus::Success)
}

fn descriptors() -> ExitStatus {
    let mut failed = false;
    for key in addons::KEYS {
        match addons::load(key) {
            Ok(_) => output::line(&format!("OK   {key}")),
            Err(errors) => {
                failed = true;
                output::line(&format!("FAIL {key}: {}", errors.join("; ")));
            }
        }
    }
    if failed {
        ExitStatus::Failure(ErrorKind::Failed)
    } else {
        ExitStatus::Success
    }
}

fn backfill(root: &std::path::Path, write: bool) -> Result<()> {
    use crate::dwp::backfill::{self, Item};
    let items = backfill::plan(root)?;
    if write {
        backfill::write(root, &items)?;
    }
    let verb = if write { "WROTE" } else { "WOULD" };
    let mut proposals = 0;
    for item in &items {
        match item {
            Item::Propose { key, version, .. } => {
                proposals += 1;
                let v = version
                    .as_ref()
                    .map(|v| format!(" {v}"))
                    .unwrap_or_default();
                output::line(&format!("{verb} addons.{key} = enabled{v}"));
            }
            Item::MachineOnly { key } => {
                output::line(&format!("SKIP  addons.{key}: present on this machine only"))
            }
            Item::Invalid { key, error } => {
                output::line(&format!("SKIP  addons.{key}: invalid descriptor ({error})"))
            }
        }
    }
    if proposals == 0 {
        output::line("OK: nothing to back-fill (every present addon is already recorded)");
    } else if !write {
        output::line("dry run - re-run with --write to record these");
    }
    Ok(())
}

fn load(args: &RepoArgs) -> Result<Config> {
    let root = args.root()?;
    Ok(Config::load(root.as_deref(), repo::home_dir().as_deref()))
}
