//! `dwp config …`: show and change the addon registry (dwp-details.md §6.4).

use clap::{Args, Subcommand};

use super::{RepoArgs, print_document, print_warnings};
use crate::cli::output;
use crate::dwp::config::{self, Config, inline_json};
use crate::dwp::{addons, repo};
use crate::error::Result;

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

pub fn run(cmd: ConfigCommand) -> Result<i32> {
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
    }
    Ok(0)
}

fn load(args: &RepoArgs) -> Result<Config> {
    let root = args.root()?;
    Ok(Config::load(root.as_deref(), repo::home_dir().as_deref()))
}
