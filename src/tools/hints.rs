//! What a file tool may add to its answer beyond its own effect: the names of same-named
//! files (a guessed path) and, with [`Sight`], whether the run may be shown them at all.

use std::path::Path;

use super::paths::Workspace;

/// What a file tool may show beyond its own change: a file's contents (a refused `write`, an
/// `edit` miss) only when the run holds `read`, other files' names only when it holds `glob`, so
/// a policy that denies them is not undone through `write` or `edit`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sight {
    pub contents: bool,
    pub names: bool,
}

impl Sight {
    pub(crate) fn of(ctx: &super::ToolContext) -> Sight {
        Sight {
            contents: ctx.holds("read"),
            names: ctx.holds("glob"),
        }
    }
}

/// Other files of the workspace with `path`'s file name (at most [`SAME_NAMED_SHOWN`], sorted),
/// found by a bounded walk that skips `.git`, `target` and `node_modules`.
pub(crate) fn same_named(ws: &Workspace, path: &Path) -> Vec<String> {
    let Some(name) = path.file_name() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut stack = vec![ws.root().to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > SAME_NAMED_MAX_ENTRIES {
                break;
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let entry_path = entry.path();
            if kind.is_dir() {
                if !matches!(
                    entry.file_name().to_str(),
                    Some(".git" | "target" | "node_modules")
                ) {
                    stack.push(entry_path);
                }
            } else if kind.is_file() && entry.file_name() == name && entry_path != path {
                found.push(ws.display(&entry_path));
            }
        }
    }
    found.sort();
    found.truncate(SAME_NAMED_SHOWN);
    found
}

/// Same-named files named in a message.
const SAME_NAMED_SHOWN: usize = 3;
/// Directory entries looked at before giving up (a huge workspace gets no suggestion).
const SAME_NAMED_MAX_ENTRIES: usize = 20_000;

/// `a`, `a` or `b`, …
pub(crate) fn quoted(paths: &[String]) -> String {
    let quoted: Vec<String> = paths.iter().map(|p| format!("`{p}`")).collect();
    quoted.join(" or ")
}
