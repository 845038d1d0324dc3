//! `session list`, `session show SES`, `run show SES RUN`: read-only JSON views.

use std::path::Path;

use super::render::Renderer;
use crate::cli::output::{self, Format};
use crate::error::Result;
use crate::run::events::{Event, EventSink};
use crate::session::view;
use crate::state::StateDir;

pub fn session_list(state: &StateDir, workspace: Option<&Path>, format: Format) -> Result<i32> {
    let sessions = view::list(state, workspace)?;
    match format {
        Format::Jsonl => sessions.iter().for_each(output::json_line),
        Format::Text if sessions.is_empty() => output::line("no sessions"),
        Format::Text => {
            for s in &sessions {
                let lineage = match (s["parentId"].as_str(), s["forkKind"].as_str()) {
                    (Some(parent), Some(kind)) => format!("  ({kind} fork of {parent})"),
                    _ => String::new(),
                };
                output::line(&format!(
                    "{}  {}  {}  {}  runs: {} (last: {}){lineage}",
                    s["id"].as_str().unwrap_or(""),
                    s["createdAt"].as_str().unwrap_or(""),
                    s["agent"].as_str().unwrap_or("-"),
                    s["workspace"].as_str().unwrap_or("-"),
                    s["runs"],
                    s["lastRunStatus"].as_str().unwrap_or("-"),
                ));
            }
        }
    }
    Ok(0)
}

pub fn session_show(state: &StateDir, session_id: &str, format: Format) -> Result<i32> {
    print(&view::show_session(state, session_id)?, format);
    Ok(0)
}

pub fn run_show(state: &StateDir, session_id: &str, run_id: &str, format: Format) -> Result<i32> {
    print(&view::show_run(state, session_id, run_id)?, format);
    Ok(0)
}

/// `run resolve`: not read-only; takes the Session's lease.
pub fn run_resolve(
    state: &StateDir,
    session_id: &str,
    run_id: &str,
    op_id: &str,
    output: String,
    is_error: bool,
    format: Format,
) -> Result<i32> {
    crate::run::resolve::resolve(state, session_id, run_id, op_id, output, is_error)?;
    let event = Event::OperationResolved {
        session_id: session_id.to_string(),
        run_id: run_id.to_string(),
        op_id: op_id.to_string(),
        is_error,
    };
    Renderer::new(format).emit(event);
    Ok(0)
}

fn print<T: serde::Serialize>(value: &T, format: Format) {
    let text = match format {
        Format::Jsonl => serde_json::to_string(value),
        Format::Text => serde_json::to_string_pretty(value),
    };
    output::line(&text.unwrap_or_else(|_| "{}".into()));
}
