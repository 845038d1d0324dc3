//! `dwp resources …`: the resource frame (docs/dwp-spec.md, "The resource frame"). `capabilities` prints the declared
//! host set; every other verb works on one plan.
//!
//! Every `--plan` verb computes the effective abilities first (their warnings go to stderr even
//! for `hold`, `exhaust`, `recover` and `settle`), then reads the live contract and the full
//! journal. `report`, `routing` and `hold` only read; `exhaust`, `recover` and `settle` append one
//! observation through the plan's one append path, deciding under its writer lock.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use super::output::Diagnostics;
use super::{print_document, print_warnings};
use crate::cli::output;
use crate::dwp::abilities;
use crate::dwp::plan::writer;
use crate::dwp::plan::{Contract, Journal, Plan, journal};
use crate::dwp::resources::{self, Abilities, limits, reservations, routing};
use crate::error::{ErrorKind, ExitStatus, Result};

#[derive(Debug, Subcommand)]
pub enum ResourcesCommand {
    /// Print the eight host abilities: the all-false floor merged with --caps.
    Capabilities {
        /// Host-declared abilities as a JSON object over the closed set.
        #[arg(long, value_name = "JSON", default_value = "{}")]
        caps: String,
    },
    /// Per limit: counter source, effective mode, spent, pending, reserve, dispatch ceiling,
    /// over-ceiling; and the first refusal (JSON).
    Report(PlanArgs),
    /// The model and parallel postures: each needs its contract grant AND the host ability.
    Routing(PlanArgs),
    /// Exit 1 while an enforced limit's latest LIMIT record is an exhaustion.
    Hold(PlanArgs),
    /// Record `LIMIT: exhausted <id>[: <detail>]` (a declared limit only).
    Exhaust(LimitArgs),
    /// Record `LIMIT: recovered <id>[: <detail>]`, which lifts that limit's hold.
    Recover(LimitArgs),
    /// Settle a reservation exactly once, as released or committed.
    Settle(SettleArgs),
}

/// The plan and how to compute its host's abilities.
#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// The plan folder (<repo>/.dwp/plans/PLAN_…).
    #[arg(long, value_name = "DIR")]
    pub plan: PathBuf,
    /// Host-declared abilities, a JSON object over the closed set; wins per ability over the
    /// `host` records of the config files.
    #[arg(long, value_name = "JSON")]
    pub caps: Option<String>,
    /// Ignore the addon registry: only --caps and the host records count.
    #[arg(long)]
    pub host_only: bool,
}

#[derive(Debug, Args)]
pub struct LimitArgs {
    #[command(flatten)]
    pub plan: PlanArgs,
    /// A limit id declared in the contract's resource_envelope.
    #[arg(long, value_name = "ID")]
    pub limit: String,
    /// Free text appended to the record after `: `.
    #[arg(long, value_name = "D")]
    pub detail: Option<String>,
}

#[derive(Debug, Args)]
pub struct SettleArgs {
    #[command(flatten)]
    pub plan: PlanArgs,
    /// The reservation key, `seq-<seq of the authorized adaptation>`.
    #[arg(long, value_name = "K")]
    pub key: String,
    /// released: the cancelled child never consumed the budget; committed: it did.
    #[arg(long, value_enum)]
    pub disposition: Disposition,
    /// Free text appended to the record after `: `.
    #[arg(long, value_name = "D")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Disposition {
    Released,
    Committed,
}

impl Disposition {
    fn as_str(self) -> &'static str {
        match self {
            Disposition::Released => "released",
            Disposition::Committed => "committed",
        }
    }
}

pub fn run(cmd: ResourcesCommand) -> Result<ExitStatus> {
    match cmd {
        ResourcesCommand::Capabilities { caps } => {
            let declared = abilities::declared(&abilities::parse_caps(&caps)?);
            print_document(&serde_json::json!(declared));
            Ok(ExitStatus::Success)
        }
        ResourcesCommand::Report(args) => report(&args),
        ResourcesCommand::Routing(args) => route(&args),
        ResourcesCommand::Hold(args) => hold(&args),
        ResourcesCommand::Exhaust(args) => mark(&args, true),
        ResourcesCommand::Recover(args) => mark(&args, false),
        ResourcesCommand::Settle(args) => settle(&args),
    }
}

/// A plan opened for the resource frame.
struct Opened {
    plan: Plan,
    contract: Contract,
    abilities: Abilities,
}

/// Opens the plan folder, computes the effective abilities (printing their warnings) and reads
/// the live contract.
fn open(args: &PlanArgs) -> Result<Opened> {
    let plan = Plan::open(&args.plan)?;
    let root = crate::dwp::repo::discover(Some(&args.plan), None)?;
    let abilities = effective(root.as_deref(), args.caps.as_deref(), args.host_only)?;
    let contract = plan.contract()?;
    Ok(Opened {
        plan,
        contract,
        abilities,
    })
}

fn read_journal(o: &Opened) -> Result<Journal> {
    journal::read(&o.plan.dir, &o.contract)
}

fn report(args: &PlanArgs) -> Result<ExitStatus> {
    let o = open(args)?;
    let journal = read_journal(&o)?;
    let report = resources::report::build(&o.contract, &journal.events, &o.abilities);
    print_document(&report.to_json());
    // The events of a long journal take longer to free than to use; the process ends here.
    std::mem::forget(journal);
    Ok(ExitStatus::Success)
}

fn route(args: &PlanArgs) -> Result<ExitStatus> {
    let o = open(args)?;
    print_document(&routing::to_json(&o.contract, &o.abilities));
    Ok(ExitStatus::Success)
}

fn hold(args: &PlanArgs) -> Result<ExitStatus> {
    let o = open(args)?;
    let journal = read_journal(&o)?;
    match limits::hold(&o.contract, &journal.events) {
        Some(h) => {
            let detail = h.detail.map(|d| format!(" {d}")).unwrap_or_default();
            output::line(&format!(
                "HOLD: limit {} (via seq {}){detail}",
                h.limit, h.seq
            ));
            Diagnostics::DWP.hint(&format!(
                "dispatch stays held until `dwp resources recover --plan {} --limit {}` \
                 records the recovery",
                args.plan.display(),
                h.limit
            ));
            Ok(ExitStatus::Failure(ErrorKind::Failed))
        }
        None => {
            output::line("OK: no resource hold");
            Ok(ExitStatus::Success)
        }
    }
}

fn mark(args: &LimitArgs, exhausted: bool) -> Result<ExitStatus> {
    let o = open(&args.plan)?;
    // Refused before the lock is taken, so an undeclared limit never touches the plan folder.
    limits::require_declared(&o.contract, &args.limit)?;
    let (event, written) = writer::append_with(&o.plan, &o.contract, waiting, |journal| {
        limits::decide(
            journal,
            &o.contract,
            exhausted,
            &args.limit,
            args.detail.as_deref(),
        )
    })?;
    let what = if exhausted { "exhaustion" } else { "recovery" };
    output::line(&recorded(what, event.seq, written));
    Ok(ExitStatus::Success)
}

fn settle(args: &SettleArgs) -> Result<ExitStatus> {
    let o = open(&args.plan)?;
    let disposition = args.disposition.as_str();
    // The same decision runs first without the lock, so a refused settlement (unknown key,
    // conflict) never creates the lock file or repairs a torn tail; it is re-decided under the
    // lock on the journal as it then stands.
    let journal = read_journal(&o)?;
    reservations::decide(
        &journal,
        &o.contract,
        &args.key,
        disposition,
        args.detail.as_deref(),
    )?;
    let (event, written) = writer::append_with(&o.plan, &o.contract, waiting, |journal| {
        reservations::decide(
            journal,
            &o.contract,
            &args.key,
            disposition,
            args.detail.as_deref(),
        )
    })?;
    output::line(&recorded("settlement", event.seq, written));
    Ok(ExitStatus::Success)
}

fn recorded(what: &str, seq: u64, written: bool) -> String {
    if written {
        format!("OK: {what} recorded at seq {seq}")
    } else {
        format!("OK: {what} already recorded at seq {seq} (identical replay, nothing written)")
    }
}

fn waiting(lock: &std::path::Path) {
    output::note(&format!(
        "Blocking waiting for the plan's writer lock {}",
        lock.display()
    ));
}

/// The effective abilities, from the shared abilities code; prints its warnings once each.
fn effective(
    root: Option<&std::path::Path>,
    caps: Option<&str>,
    host_only: bool,
) -> Result<Abilities> {
    let eff = abilities::effective(root, caps, host_only)?;
    print_warnings(&eff.warnings);
    Ok(Abilities {
        values: eff.abilities,
        sources: eff.sources,
    })
}
