//! `dwp onboard`: make a repository ready for a committed registry (docs/dwp-spec.md,
//! "Configuration and the addon registry" and "Onboarding and deferral").
//!
//! Consent is the command line: nothing is enabled unless the developer names it. The steps are
//! idempotent — a second run with the same arguments changes nothing — and every check runs
//! before the first write, so a refusal leaves the repository as it was.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::Value;

use super::addons::KEYS;
use super::config;
use super::pyfmt::py_repr;
use crate::error::{Error, Result};

/// The `.gitignore` rules that ignore plans and benchmark records but keep the registry tracked.
/// Order matters: the negation must come after the rule it carves out of.
pub const GITIGNORE_RULES: [&str; 2] = [".dwp/*", "!.dwp/config.json"];

/// What onboarding did.
#[derive(Debug, Clone, PartialEq)]
pub struct Onboarding {
    pub created_config: bool,
    /// Rules written to `.gitignore` (empty when they were there already).
    pub gitignore_added: Vec<String>,
    /// A plain `.dwp/` rule was found: it keeps the registry untracked despite the negation.
    pub plain_dwp_rule: bool,
    /// Per `--enable`: the key, the entry now recorded, and whether this run wrote it.
    pub enabled: Vec<(String, Value, bool)>,
    pub tracked: Tracked,
}

/// Whether `.dwp/config.json` is in the git index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tracked {
    Yes,
    No,
    /// Not a git repository, or git could not be run.
    NotGit,
}

/// Parses one `--enable KEY[@vX.Y.Z]`.
pub fn parse_enable(spec: &str) -> Result<(String, Option<String>)> {
    let (key, version) = match spec.split_once('@') {
        Some((k, v)) => (k, Some(v)),
        None => (spec, None),
    };
    if !KEYS.contains(&key) {
        return Err(Error::usage(format!(
            "--enable {}: {} is not an addon dwp ships ({})",
            spec,
            py_repr(key),
            KEYS.join(", ")
        )));
    }
    if let Some(v) = version
        && !config::is_version(v)
    {
        return Err(Error::usage(format!(
            "--enable {spec}: version {} is not a tag like v1.2.3",
            py_repr(v)
        )));
    }
    Ok((key.to_string(), version.map(str::to_string)))
}

/// Onboards the repository at `root`, enabling exactly `enables` (already parsed).
pub fn onboard(root: &Path, enables: &[(String, Option<String>)]) -> Result<Onboarding> {
    let gitignore = root.join(".gitignore");
    let (old_text, mode) = read_gitignore(&gitignore)?;
    let (new_text, added) = with_rules(&old_text);
    let created_config = config::ensure_file(root)?;
    if !added.is_empty() {
        crate::fsx::write_atomic(&gitignore, new_text.as_bytes(), mode)?;
    }
    let mut enabled = Vec::new();
    for (key, version) in enables {
        let existing = config::repo_entry(root, key);
        let already = existing.as_ref().is_some_and(|e| {
            e.get("enabled") == Some(&Value::Bool(true))
                && (version.is_none()
                    || e.get("version").and_then(Value::as_str) == version.as_deref())
        });
        if already {
            enabled.push((key.clone(), existing.unwrap_or_default(), false));
            continue;
        }
        // Keep a recorded decision note; only the state and the pin change.
        let note = existing
            .as_ref()
            .and_then(|e| e.get("note"))
            .and_then(Value::as_str)
            .filter(|n| config::is_note(n))
            .map(str::to_string);
        let (entry, changed) = config::enable(root, key, version.as_deref(), note.as_deref())?;
        enabled.push((key.clone(), entry, changed));
    }
    Ok(Onboarding {
        created_config,
        gitignore_added: added,
        plain_dwp_rule: old_text
            .lines()
            .any(|l| matches!(l.trim(), ".dwp/" | ".dwp" | "/.dwp/" | "/.dwp")),
        enabled,
        tracked: tracked(root),
    })
}

/// Reads `.gitignore` (empty when absent) and the mode to keep; refuses a symlink or a
/// non-file, before anything is written.
fn read_gitignore(path: &Path) -> Result<(String, u32)> {
    match path.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((String::new(), 0o644)),
        Err(e) => Err(Error::io("inspect", path, e)),
        Ok(m) if m.file_type().is_symlink() => Err(Error::usage(format!(
            "{} is a symbolic link — dwp refuses to write through a link",
            path.display()
        ))
        .with_hint(format!(
            "add the lines {} and {} to the real file by hand, or replace the link with a file",
            GITIGNORE_RULES[0], GITIGNORE_RULES[1]
        ))),
        Ok(m) if !m.is_file() => Err(Error::usage(format!(
            "{} is not a regular file",
            path.display()
        ))),
        Ok(m) => {
            let bytes = fs::read(path).map_err(|e| Error::io("read", path, e))?;
            let text = String::from_utf8(bytes).map_err(|_| {
                Error::invalid(format!(
                    "{} is not UTF-8 text; not editing it",
                    path.display()
                ))
            })?;
            Ok((text, m.permissions().mode() & 0o7777))
        }
    }
}

/// `.gitignore` text with both rules present exactly once and in order, keeping every other line.
/// Returns the new text and the rules it added.
pub fn with_rules(text: &str) -> (String, Vec<String>) {
    let [star, keep] = GITIGNORE_RULES;
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let find = |lines: &[String], rule: &str| lines.iter().position(|l| l.trim_end() == rule);
    let mut added = Vec::new();
    match (find(&lines, star), find(&lines, keep)) {
        (Some(s), Some(k)) if s < k => return (text.to_string(), added),
        (Some(_), Some(k)) => {
            // The negation comes first and has no effect there: move it after the rule.
            let line = lines.remove(k);
            let s = find(&lines, star).unwrap_or(lines.len());
            lines.insert(s + 1, line);
            added.push(keep.to_string());
        }
        (Some(_), None) => {
            lines.push(keep.to_string());
            added.push(keep.to_string());
        }
        (None, Some(k)) => {
            lines.insert(k, star.to_string());
            added.push(star.to_string());
        }
        (None, None) => {
            lines.push(star.to_string());
            lines.push(keep.to_string());
            added.extend([star.to_string(), keep.to_string()]);
        }
    }
    let mut out = lines.join("\n");
    out.push('\n');
    (out, added)
}

/// Whether `.dwp/config.json` is in the git index (read-only).
fn tracked(root: &Path) -> Tracked {
    match crate::git::is_tracked(root, ".dwp/config.json") {
        Some(true) => Tracked::Yes,
        Some(false) => Tracked::No,
        None => Tracked::NotGit,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_are_added_once_and_in_order() {
        let (t, a) = with_rules("");
        assert_eq!(t, ".dwp/*\n!.dwp/config.json\n");
        assert_eq!(a.len(), 2);
        let (t2, a2) = with_rules(&t);
        assert_eq!(t2, t);
        assert!(a2.is_empty());
        let (t, a) = with_rules("target/\n.dwp/*");
        assert_eq!(t, "target/\n.dwp/*\n!.dwp/config.json\n");
        assert_eq!(a, vec!["!.dwp/config.json"]);
        let (t, _) = with_rules("a\n!.dwp/config.json\nb\n");
        assert_eq!(t, "a\n.dwp/*\n!.dwp/config.json\nb\n");
        let (t, _) = with_rules("!.dwp/config.json\nx\n.dwp/*\n");
        assert_eq!(t, "x\n.dwp/*\n!.dwp/config.json\n");
    }

    #[test]
    fn enable_specs() {
        assert_eq!(parse_enable("vim").unwrap(), ("vim".into(), None));
        assert_eq!(
            parse_enable("agentkit@v0.1.1").unwrap(),
            ("agentkit".into(), Some("v0.1.1".into()))
        );
        assert!(parse_enable("emacs").is_err());
        assert!(parse_enable("vim@1.2").is_err());
    }
}
