//! `session verify SES`: check a Session end to end.

use serde_json::json;

use crate::cli::output::{self, Format};
use crate::error::Result;
use crate::session::{store, verify};
use crate::state::StateDir;

pub fn verify(state: &StateDir, session_id: &str, format: Format) -> Result<i32> {
    let paths = store::session_paths(state, session_id)?;
    let report = verify::verify(
        &paths,
        session_id,
        &state.blobs_dir(),
        verify::Mode::InPlace,
    )?;
    match format {
        Format::Jsonl => {
            let mut value = json!({"type": "sessionVerified"});
            if let (Some(out), Ok(serde_json::Value::Object(fields))) =
                (value.as_object_mut(), serde_json::to_value(&report))
            {
                out.extend(fields);
            }
            output::json_line(&value);
        }
        Format::Text => {
            output::line(&format!(
                "{session_id}: ok ({} messages, {} runs, {} operations, {} blobs)",
                report.messages,
                report.runs.len(),
                report.operations,
                report.blobs.len()
            ));
            for torn in &report.torn_tails {
                output::line(&format!(
                    "note: {torn} is a torn last line from a crash; it is ignored and repaired by the next run"
                ));
            }
        }
    }
    Ok(0)
}
