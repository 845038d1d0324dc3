//! Back-fill on upgrade (docs/dwp-spec.md, "Back-fill"): propose registry entries for addons that are
//! already installed but not yet recorded.
//!
//! A recorded decision (enabled or disabled) is never touched. This is an explicit request, so it
//! opens descriptors and runs detect commands even for addons that are not enabled. Only installs
//! found through a repository-relative path are recorded: a machine-level install (a command on
//! PATH, a `~/` path) belongs to one machine, not to the committed file (§9.3).

use std::path::Path;

use serde_json::Value;

use super::addons::{self, DetectEnv, KEYS};
use super::config::{self, read_object, repo_file};
use crate::error::{Error, Result};

/// One line of the back-fill report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// Detected through a repository path: record `enabled: true` with this version and note.
    Propose {
        key: String,
        version: Option<String>,
        note: String,
    },
    /// Present on this machine only; never written.
    MachineOnly { key: String },
    /// The descriptor is invalid; nothing can be detected.
    Invalid { key: String, error: String },
}

/// Computes the back-fill for the repository at `root`, without writing.
pub fn plan(root: &Path) -> Result<Vec<Item>> {
    let path = repo_file(root);
    let doc = read_object(&path).map_err(|reason| {
        Error::usage(format!(
            "{} {} - fix it before back-filling",
            path.display(),
            reason.trim_end_matches("; treating as absent")
        ))
    })?;
    let named: Vec<String> = doc
        .as_ref()
        .and_then(|d| d.get("addons"))
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    let keys: Vec<String> = KEYS
        .iter()
        .filter(|k| !named.iter().any(|n| n == *k))
        .map(|k| k.to_string())
        .collect();
    let env = DetectEnv::current(Some(root));
    let mut items = Vec::new();
    for (key, outcome) in addons::detect_all(&keys, &env) {
        match outcome {
            Err(errors) => items.push(Item::Invalid {
                key,
                error: errors.first().cloned().unwrap_or_default(),
            }),
            Ok((_, det)) if !det.detected => {}
            Ok((_, det)) if det.machine_level => items.push(Item::MachineOnly { key }),
            Ok((_, det)) => {
                let seen = det.version.clone().unwrap_or_else(|| "present".into());
                items.push(Item::Propose {
                    key,
                    version: det.version,
                    note: format!("back-filled on upgrade: already installed (detected {seen})"),
                });
            }
        }
    }
    Ok(items)
}

/// Records every proposal through the one writer.
pub fn write(root: &Path, items: &[Item]) -> Result<()> {
    for item in items {
        if let Item::Propose { key, version, note } = item {
            config::enable(root, key, version.as_deref(), Some(note))?;
        }
    }
    Ok(())
}
