//! `dwp onboard`: create the registry, write the `.gitignore` rules, enable what the developer
//! names, and say what changed.

use std::path::PathBuf;

use clap::Args;

use crate::cli::output;
use crate::dwp::onboard::{self, Tracked};
use crate::dwp::pyfmt::inline_json;
use crate::error::{ExitStatus, Result};

#[derive(Debug, Args)]
pub struct OnboardArgs {
    /// The repository root (default: the git repository containing the current directory).
    #[arg(long, value_name = "DIR")]
    repo: Option<PathBuf>,
    /// Enable this addon (repeatable); KEY or KEY@vX.Y.Z. Nothing is enabled by default.
    #[arg(long = "enable", value_name = "KEY[@vX.Y.Z]")]
    enable: Vec<String>,
}

pub fn run(args: OnboardArgs) -> Result<ExitStatus> {
    let enables = args
        .enable
        .iter()
        .map(|s| onboard::parse_enable(s))
        .collect::<Result<Vec<_>>>()?;
    let root = crate::dwp::repo::discover(None, args.repo.as_deref())?
        .expect("without --plan a root is always found");
    let done = onboard::onboard(&root, &enables)?;
    let mut changed = false;
    if done.created_config {
        output::line("created .dwp/config.json");
        changed = true;
    }
    for rule in &done.gitignore_added {
        output::line(&format!("added to .gitignore: {rule}"));
        changed = true;
    }
    for (key, entry, wrote) in &done.enabled {
        if *wrote {
            output::line(&format!("enabled addons.{key} = {}", inline_json(entry)));
            changed = true;
        } else {
            output::line(&format!(
                "already enabled: addons.{key} = {}",
                inline_json(entry)
            ));
        }
    }
    if !changed {
        output::line("nothing to change: .dwp/config.json and the .gitignore rules are in place");
    }
    if done.plain_dwp_rule {
        output::note(
            "note: .gitignore also ignores .dwp/ as a whole, which keeps .dwp/config.json local; \
             remove that line to commit the registry",
        );
    }
    match done.tracked {
        Tracked::Yes => output::line(".dwp/config.json is tracked by git"),
        Tracked::No => output::line(&format!(
            ".dwp/config.json is not tracked by git yet; run: git -C {} add .gitignore .dwp/config.json",
            root.display()
        )),
        Tracked::NotGit => output::line(&format!(
            "{} is not a git repository; .dwp/config.json is not tracked",
            root.display()
        )),
    }
    Ok(ExitStatus::Success)
}
