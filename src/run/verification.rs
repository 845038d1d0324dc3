//! Verification before completion (docs/verification.md): what the run changed and checked,
//! read back from its journal, and the one reminder a run gets when it answers with a change no
//! check has seen.
//!
//! Everything here is derived from durable state — the run's journal (its operations, in start
//! order, with their outcomes) and its task text — so a resumed run decides exactly as the
//! crashed one would have, and the reminder's text, once appended to the Session, is replayed
//! from there, never recomputed.
//!
//! What counts:
//! - a **change** is a `write` or `edit` whose outcome is not an error;
//! - a **check** is any `exec` with an outcome (a failing check is still a check: the model saw
//!   the result). An `exec` is never counted as a change: telling a command that edits files
//!   from one that tests them would take a workspace snapshot per call;
//! - a file the run **has seen** is one a `read`, `write` or `edit` of this run succeeded on.

use std::path::Path;

use serde_json::Value;

use crate::journal::{OpPhase, OpState, OpTable};

/// Commands quoted from the task in a reminder, at most.
const NAMED_CHECKS: usize = 3;
/// Changed files named in a reminder, at most.
const NAMED_FILES: usize = 5;

/// The files changed since the run's last check, in the order of their first change since
/// then; empty when every change was followed by a check (or nothing changed).
pub fn unchecked_changes(table: &OpTable) -> Vec<String> {
    let mut changed: Vec<String> = Vec::new();
    for op in table.ops() {
        match op.tool.as_str() {
            "write" | "edit" if succeeded(op) => {
                if let Some(path) = path_of(op)
                    && !changed.contains(&path)
                {
                    changed.push(path);
                }
            }
            // A check that failed is still a check: the model saw its result.
            "exec" if op.output.as_ref().is_some_and(|o| !o.interrupted) => changed.clear(),
            _ => {}
        }
    }
    changed
}

/// The paths (as the model gave them) of every file a `read`, `write` or `edit` of the run
/// succeeded on: the files `write` may replace ([`crate::tools::ToolContext::seen_files`]).
pub fn seen_files(table: &OpTable) -> Vec<String> {
    let mut seen: Vec<String> = Vec::new();
    for op in table.ops().iter().filter(|op| succeeded(op)) {
        if matches!(op.tool.as_str(), "read" | "write" | "edit")
            && let Some(path) = path_of(op)
            && !seen.contains(&path)
        {
            seen.push(path);
        }
    }
    seen
}

/// The user-role message that answers a final answer given with unchecked `changed` files.
/// It names the commands the task quotes that look like checks ([`named_checks`]), or asks for
/// the check the task or the repository names when it quotes none.
pub fn reminder(task: &str, changed: &[String], workspace: &Path) -> String {
    let mut files: Vec<String> = changed
        .iter()
        .take(NAMED_FILES)
        .map(|p| format!("`{p}`"))
        .collect();
    if changed.len() > NAMED_FILES {
        files.push(format!("{} more", changed.len() - NAMED_FILES));
    }
    let checks = named_checks(task, workspace);
    let run = match checks.as_slice() {
        [] => "run the check the task names (or the repository's tests) with exec".to_string(),
        [one] => format!("run the check the task names with exec: `{one}`"),
        many => {
            let quoted: Vec<String> = many.iter().map(|c| format!("`{c}`")).collect();
            format!(
                "run the check the task names with exec (it mentions {})",
                quoted.join(", ")
            )
        }
    };
    format!(
        "[kxen-agent runtime] You changed {} and have not run a check since your last change. \
         Before you answer, {run}. If it fails, fix the cause and run it again. If you cannot \
         run a check, say so plainly in your final answer; do not claim what you did not see.",
        files.join(", ")
    )
}

/// Commands the task quotes in backticks that look like something to run: at least two words,
/// the first a program on `PATH`, or a path with a `/` to a file in the workspace. A quoted
/// file name with an argument (`` `count.sh FILE` ``) or an expression (`` `f(1, 2)` ``) is
/// not one. Read once, when the reminder is written; its text is then durable.
pub fn named_checks(task: &str, workspace: &Path) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for (i, span) in task.split('`').enumerate() {
        // Odd pieces are inside backticks.
        if i % 2 == 0 || span.contains('\n') {
            continue;
        }
        let span = span.trim();
        let mut words = span.split_whitespace();
        let (Some(program), Some(_)) = (words.next(), words.next()) else {
            continue;
        };
        let runnable = if program.contains('/') {
            workspace.join(program).is_file()
        } else {
            program
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._+-".contains(c))
                && on_path(program)
        };
        if runnable && !found.iter().any(|f| f == span) {
            found.push(span.to_string());
        }
        if found.len() == NAMED_CHECKS {
            break;
        }
    }
    found
}

/// Whether `program` is a file in a directory of this process's `PATH`.
fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .any(|dir| !dir.as_os_str().is_empty() && dir.join(program).is_file())
    })
}

/// An operation whose tool returned without an error (an operator's resolution counts too).
fn succeeded(op: &OpState) -> bool {
    matches!(
        op.phase,
        OpPhase::OutcomeKnown | OpPhase::Resolved | OpPhase::Settled
    ) && op.output.as_ref().is_some_and(|o| !o.is_error)
}

/// The `path` argument of a file tool's operation.
fn path_of(op: &OpState) -> Option<String> {
    let args: Value = serde_json::from_str(op.arguments.as_str()).ok()?;
    args.get("path")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_checks_are_commands_not_file_names_or_expressions() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        std::fs::write(dir.path().join("bin/check"), "").unwrap();
        let task = "`count.sh FILE` is wrong: `f(1, 2)` gives 1. Fix `count.sh`; `sh check.sh` \
                    must pass, and `bin/check --all` too. Then `sh check.sh` again.";
        assert_eq!(
            named_checks(task, dir.path()),
            vec!["sh check.sh".to_string(), "bin/check --all".to_string()]
        );
        assert!(named_checks("no quotes at all", dir.path()).is_empty());
    }

    #[test]
    fn the_reminder_names_the_files_and_the_check() {
        let dir = tempfile::tempdir().unwrap();
        let text = reminder("Run `sh check.sh`.", &["a.sh".into()], dir.path());
        assert_eq!(
            text,
            "[kxen-agent runtime] You changed `a.sh` and have not run a check since your last \
             change. Before you answer, run the check the task names with exec: `sh check.sh`. \
             If it fails, fix the cause and run it again. If you cannot run a check, say so \
             plainly in your final answer; do not claim what you did not see."
        );
        let text = reminder("Fix it.", &["a".into(), "b".into()], dir.path());
        assert!(text.contains("You changed `a`, `b` and"), "{text}");
        assert!(text.contains("(or the repository's tests)"), "{text}");
    }
}
