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
//! - a file the run **has seen** is one a `read` or `edit` of this run succeeded on, or a
//!   `write` of it returned (it wrote the file, or its refusal showed the file's lines).

use std::path::Path;

use serde_json::Value;

use crate::journal::{OpPhase, OpState, OpTable};

/// Commands quoted from the task in a reminder, at most.
const NAMED_CHECKS: usize = 3;
/// Changed files named in a reminder, at most.
const NAMED_FILES: usize = 5;

/// What the run changed, or tried to, since its last check.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Unchecked {
    /// Files a `write` or `edit` changed, in the order of their first change since the check.
    pub changed: Vec<String>,
    /// Files whose latest `write` or `edit` failed (and that no later one changed): a claim of
    /// success after such a call is the same unverified guess.
    pub failed: Vec<String>,
}

impl Unchecked {
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.failed.is_empty()
    }
}

/// The files changed (or tried) since the run's last check; empty when every attempt was
/// followed by a check (or there was none).
pub fn unchecked_changes(table: &OpTable) -> Unchecked {
    let mut out = Unchecked::default();
    for op in table.ops() {
        let ran = op.output.as_ref().is_some_and(|o| !o.interrupted);
        match op.tool.as_str() {
            "write" | "edit" if ran => {
                let Some(path) = path_of(op) else { continue };
                if succeeded(op) {
                    out.failed.retain(|p| *p != path);
                    if !out.changed.contains(&path) {
                        out.changed.push(path);
                    }
                } else if !out.changed.contains(&path) && !out.failed.contains(&path) {
                    out.failed.push(path);
                }
            }
            // A check that failed is still a check: the model saw its result.
            "exec" if ran => out = Unchecked::default(),
            _ => {}
        }
    }
    out
}

/// The paths (as the model gave them) of every file a `read` or `edit` of the run succeeded
/// on, or a `write` returned from (it wrote the file, or its refusal showed it): the files
/// `write` may replace ([`crate::tools::ToolContext::seen_files`]).
pub fn seen_files(table: &OpTable) -> Vec<String> {
    let mut seen = SeenFiles::default();
    seen.update(table);
    seen.paths
}

/// [`seen_files`] kept up to date as the journal grows: each operation is looked at once, when
/// its outcome is final, so a run of n calls parses n arguments, not n² (the loop asks before
/// every batch).
#[derive(Debug, Default)]
pub struct SeenFiles {
    paths: Vec<String>,
    known: std::collections::HashSet<String>,
    /// Operations before this index are counted; the one at it has no final outcome yet.
    upto: usize,
}

impl SeenFiles {
    /// Takes in the operations whose outcome became final since the last call.
    pub fn update(&mut self, table: &OpTable) {
        let ops = table.ops();
        while let Some(op) = ops.get(self.upto) {
            let last = matches!(
                op.phase,
                OpPhase::OutcomeKnown | OpPhase::Resolved | OpPhase::Settled | OpPhase::Denied
            );
            if !last {
                // Started, UNKNOWN or held: its outcome may still change what it shows.
                break;
            }
            let shown = match op.tool.as_str() {
                "read" | "edit" => succeeded(op),
                "write" => op.output.as_ref().is_some_and(|o| !o.interrupted),
                _ => false,
            };
            if shown
                && let Some(path) = path_of(op)
                && self.known.insert(path.clone())
            {
                self.paths.push(path);
            }
            self.upto += 1;
        }
    }

    /// The paths seen so far.
    pub fn paths(&self) -> &[String] {
        &self.paths
    }
}

/// The user-role message that answers a final answer given with `unchecked` files. It names
/// the commands the task quotes that look like checks ([`named_checks`]), or asks for the check
/// the task or the repository names when it quotes none.
pub fn reminder(task: &str, unchecked: &Unchecked, workspace: &Path) -> String {
    let what = match (
        quote_files(&unchecked.changed),
        quote_files(&unchecked.failed),
    ) {
        (Some(c), None) => format!("You changed {c} and have not run a check since"),
        (None, Some(f)) => format!(
            "Your change to {f} failed (see the tool's error) and you have not run a check \
             since"
        ),
        (Some(c), Some(f)) => format!(
            "You changed {c}, your change to {f} failed (see the tool's error), and you have \
             not run a check since"
        ),
        (None, None) => "You have not run a check since your last change".to_string(),
    };
    let checks = named_checks(task, workspace);
    let run = match checks.as_slice() {
        [] => "run the check the task names (or the repository's tests) with exec".to_string(),
        [one] => format!("call exec with {}", serde_json::json!({ "command": one })),
        many => {
            let quoted: Vec<String> = many.iter().map(|c| format!("`{c}`")).collect();
            format!(
                "run the check the task names with exec (it mentions {})",
                quoted.join(", ")
            )
        }
    };
    // The step comes first: a small model acts on the first sentence and parrots the rest.
    format!(
        "Not done yet: {run} now. {what}. If the check fails, fix the cause and run it again. \
         If you cannot run a check, say so plainly in your final answer; do not claim what you \
         did not see. [kxen-agent runtime]"
    )
}

/// `a`, `b`, 3 more (`None` for none).
fn quote_files(paths: &[String]) -> Option<String> {
    if paths.is_empty() {
        return None;
    }
    let mut files: Vec<String> = paths
        .iter()
        .take(NAMED_FILES)
        .map(|p| format!("`{p}`"))
        .collect();
    if paths.len() > NAMED_FILES {
        files.push(format!("{} more", paths.len() - NAMED_FILES));
    }
    Some(files.join(", "))
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
        let changed = |c: &[&str], f: &[&str]| Unchecked {
            changed: c.iter().map(|s| s.to_string()).collect(),
            failed: f.iter().map(|s| s.to_string()).collect(),
        };
        let text = reminder("Run `sh check.sh`.", &changed(&["a.sh"], &[]), dir.path());
        assert_eq!(
            text,
            "Not done yet: call exec with {\"command\":\"sh check.sh\"} now. You changed `a.sh` \
             and have not run a check since. If the check fails, fix the cause and run it again. \
             If you cannot run a check, say so plainly in your final answer; do not claim what \
             you did not see. [kxen-agent runtime]"
        );
        let text = reminder("Fix it.", &changed(&["a", "b"], &[]), dir.path());
        assert!(text.contains("You changed `a`, `b` and"), "{text}");
        assert!(text.contains("(or the repository's tests)"), "{text}");
        let text = reminder("Fix it.", &changed(&[], &["m.py"]), dir.path());
        assert!(
            text.contains("Your change to `m.py` failed (see the tool's error) and you have"),
            "{text}"
        );
    }
}
