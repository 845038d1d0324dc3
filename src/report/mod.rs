//! `session report`: one self-contained HTML page of a Session, for a person who did not start
//! the run (and a short Markdown summary of it for a CI job page).
//!
//! The page is built from exactly what `session show`, `run show` and `session verify` read
//! ([`crate::session::view`], [`crate::session::verify`]): read-only, no lock, so it works while
//! a run is active (a torn last line being written is simply not shown yet). It holds no script,
//! no font, no image and no link to anything outside itself, and a Content-Security-Policy that
//! forbids loading anything, so it is readable offline and safe to attach to a CI run. Every byte
//! that came from a model or a tool is escaped ([`html`]).
//!
//! What it shows: the Session's runs as a timeline (attempts — a resume is a new attempt —,
//! turns, tool calls with their duration and outcome, UNKNOWN operations, approval stops,
//! compaction points, the result), tokens (and cost, when a price is known) per turn as an
//! inline SVG chart, every `edit`/`write` as a unified diff, the `task` children as a tree, and
//! what `session verify` says.

mod html;
mod model;
mod page;
mod summary;

use std::collections::BTreeMap;

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::provider::config::Price;
use crate::session::verify;
use crate::session::{store, view};
use crate::state::StateDir;

pub use html::escape;

/// Rates per provider name, from a model config's `[providers.NAME.price]` tables. Runs record
/// which provider served them (`attempts[].provider.name`), never its rates, so a report can
/// only price tokens with the rates a config gives now.
#[derive(Debug, Clone, Default)]
pub struct Pricing {
    rates: BTreeMap<String, Price>,
    /// The provider `[roles] compaction` names (compaction records are priced with it).
    compaction: Option<String>,
}

impl Pricing {
    pub fn from_config(config: &ModelConfig) -> Pricing {
        Pricing {
            rates: config
                .prices()
                .map(|(name, price)| (name.to_string(), price.clone()))
                .collect(),
            compaction: config.role_provider("compaction").map(str::to_string),
        }
    }

    /// The cost in USD of `input` and `output` tokens served by `provider`, if it has a price.
    fn cost(&self, provider: Option<&str>, input: u64, output: u64) -> Option<f64> {
        let price = self.rates.get(provider?)?;
        Some(
            input as f64 * price.input_per_million / 1e6
                + output as f64 * price.output_per_million / 1e6,
        )
    }

    pub fn is_empty(&self) -> bool {
        self.rates.is_empty()
    }
}

/// A rendered report.
#[derive(Debug)]
pub struct Report {
    pub session_id: String,
    /// The HTML page (redacted: no credential the redactor knows of survives in it).
    pub html: String,
    /// The Markdown summary: status, cost, tool calls, pending approvals and UNKNOWN operations
    /// with the exact commands that continue the run.
    pub summary: String,
    /// What `session verify` found wrong, if anything (the page shows it too).
    pub verify_error: Option<Error>,
}

/// Reads Session `session_id` (read-only) and renders its report.
///
/// Errors: an invalid id (exit 4), an unknown Session (exit 3), a Session whose records cannot
/// be read at all (exit 10). A Session that reads but fails verification still gets its report,
/// with the failure shown and returned in [`Report::verify_error`].
pub fn build(state: &StateDir, session_id: &str, pricing: &Pricing) -> Result<Report> {
    let paths = store::session_paths(state, session_id)?;
    let mut session = view::show_session(state, session_id)?;
    let messages: Vec<crate::session::Message> = serde_json::from_value(session["messages"].take())
        .map_err(|e| {
            Error::corrupt(format!(
                "the messages of {session_id} do not read back: {e}"
            ))
        })?;
    let mut runs = Vec::new();
    for run in session["runs"].as_array().into_iter().flatten() {
        let Some(run_id) = run["id"].as_str() else {
            continue;
        };
        runs.push(view::show_run(state, session_id, run_id)?);
    }
    let verified = verify::verify(
        &paths,
        session_id,
        &state.blobs_dir(),
        verify::Mode::InPlace,
    );
    let tree = model::task_tree(state, session_id)?;
    let data = model::Data::new(session, &messages, &runs, verified, tree, pricing);
    let html = crate::redact::redact(&page::render(&data));
    let summary = crate::redact::redact(&summary::render(&data));
    Ok(Report {
        session_id: session_id.to_string(),
        html,
        summary,
        verify_error: data.verified.err(),
    })
}
