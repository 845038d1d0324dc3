//! `dwp manifest`, `dwp freshness`, `dwp accounting`: read-only views of one plan's records
//! (docs/dwp-spec.md, "The context manifest", "Four-quantity accounting"). None of them takes a lock; only `manifest --out` writes a file.

use std::path::PathBuf;

use clap::Args;
use serde_json::{Value, json};

use super::print_document;
use crate::cli::output;
use crate::dwp::manifest::{self, Records};
use crate::dwp::pyfmt::truthy;
use crate::error::{Error, ErrorKind, ExitStatus, Result};

#[derive(Debug, Args)]
pub struct ManifestArgs {
    /// The plan folder (<repo>/.dwp/plans/PLAN_…).
    #[arg(long, value_name = "DIR")]
    plan: PathBuf,
    /// The task whose context to derive (a T-… id declared in the contract).
    #[arg(long, value_name = "T")]
    task: String,
    /// Comma-separated sections to include; must name authorization, repository_rules and
    /// acceptance. history_triggers is the only optional one; an unknown name is refused.
    #[arg(long, value_name = "A,B,…")]
    sections: Option<String>,
    /// Also write the output to FILE (replaced atomically; parent directories are created).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Render Markdown for a prompt instead of JSON.
    #[arg(long)]
    md: bool,
}

#[derive(Debug, Args)]
pub struct FreshnessArgs {
    /// The plan folder.
    #[arg(long, value_name = "DIR")]
    plan: PathBuf,
    /// The task the summary was derived for.
    #[arg(long, value_name = "T")]
    task: String,
    /// A JSON summary carrying the `inputs_fingerprint` it was derived from.
    #[arg(long, value_name = "FILE")]
    summary: PathBuf,
}

#[derive(Debug, Args)]
pub struct AccountingArgs {
    /// The plan folder.
    #[arg(long, value_name = "DIR")]
    plan: PathBuf,
    /// An instruction bundle file whose size counts (repeatable).
    #[arg(long, value_name = "PATH")]
    bundle: Vec<String>,
}

pub fn manifest(args: ManifestArgs) -> Result<ExitStatus> {
    let sections = manifest::parse_sections(args.sections.as_deref())?;
    let records = Records::load(&args.plan)?;
    let doc = manifest::derive(&records, &args.task, sections.as_deref())?;
    let body = if args.md {
        manifest::markdown::render(&doc)
    } else {
        manifest::to_bytes(&doc)
    };
    if let Some(out) = &args.out {
        if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
            crate::fsx::create_dir_private(parent)?;
        }
        crate::fsx::write_atomic(out, body.as_bytes(), 0o644)?;
    }
    output::raw(&body);
    // The records of a long journal take longer to free than to use; the process ends here.
    std::mem::forget(records);
    Ok(ExitStatus::Success)
}

pub fn freshness(args: FreshnessArgs) -> Result<ExitStatus> {
    let records = Records::load(&args.plan)?;
    let doc = manifest::derive(&records, &args.task, None)?;
    let current = doc["freshness"]["inputs_fingerprint"].clone();
    std::mem::forget(records);
    let text = std::fs::read(&args.summary)
        .map_err(|e| Error::io("read the summary", &args.summary, e))?;
    let summary: Value = serde_json::from_slice(&text).map_err(|e| {
        Error::invalid(format!(
            "summary {} is not JSON ({e})",
            args.summary.display()
        ))
        .with_hint("pass the JSON summary that carries the manifest's inputs_fingerprint")
    })?;
    let stored = summary
        .get("inputs_fingerprint")
        .cloned()
        .unwrap_or(Value::Null);
    let (verdict, reason) = if !truthy(&stored) {
        (
            "stale",
            "the summary carries no inputs_fingerprint - an unattributable summary is stale by \
             construction",
        )
    } else if stored == current {
        ("fresh", "")
    } else {
        (
            "stale",
            "inputs changed since the summary was derived - the summary is invalidated, never \
             silently inherited",
        )
    };
    print_document(&json!({
        "current": current,
        "reason": reason,
        "stored": stored,
        "verdict": verdict,
    }));
    Ok(if verdict == "fresh" {
        ExitStatus::Success
    } else {
        ExitStatus::Failure(ErrorKind::Failed)
    })
}

pub fn accounting(args: AccountingArgs) -> Result<ExitStatus> {
    let records = Records::load(&args.plan)?;
    let doc = crate::dwp::accounting::account(&records, &args.bundle)?;
    print_document(&doc);
    std::mem::forget(records);
    Ok(ExitStatus::Success)
}
