//! `write {path, content}` and `edit {path, oldString, newString, replaceAll?}`.
//!
//! Both replace the file atomically (temp file in the same directory, fsync, rename), so an
//! interrupted tool call leaves the old file or the new one, never half of it. An existing file
//! keeps its permission bits.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use schemars::JsonSchema;
use serde::Deserialize;

use super::ToolOutput;
use super::hints::{Sight, quoted, same_named};
use super::paths::Workspace;
use crate::fsx;

/// Lines of an existing file a refused `write` shows.
const SHOWN_ON_REFUSAL: u64 = 200;
/// Mode of files `write` creates (what a default umask gives).
const NEW_FILE_MODE: u32 = 0o644;

/// A written file this small is quoted whole in the result (so a model sees it is done);
/// a larger one by its first [`HEAD_LINES`] lines.
const QUOTE_LINES: usize = 30;
const QUOTE_BYTES: usize = 2000;
const HEAD_LINES: usize = 10;
/// `edit` shows at most this many changed places, with this many lines of context each.
const SHOWN_PLACES: usize = 3;
const CONTEXT_LINES: usize = 1;
/// Lines of one shown place beyond which it is cut.
const PLACE_LINES: usize = 20;
/// Characters of one quoted line (like `read`).
const LINE_CHARS: usize = 500;

/// The arguments of `write`; each field's doc comment is its description in the schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct WriteArgs {
    /// File path relative to the workspace root
    pub(super) path: String,
    /// The complete new file content
    content: String,
}

/// The arguments of `edit`; each field's doc comment is its description in the schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct EditArgs {
    /// File path relative to the workspace root
    pub(super) path: String,
    /// Exact text to replace
    old_string: String,
    /// Replacement text
    new_string: String,
    /// Replace every occurrence (default false)
    #[serde(default)]
    replace_all: bool,
}

/// `seen`: the files the run has read, written or edited (`None`: not tracked); an existing
/// file outside it is not replaced. A small model's usual failure is a `write` of a guess over a
/// file it never looked at (the stub's docstring, the other functions: gone), so the refusal
/// sends it to `read` first.
pub(crate) fn write(
    ws: &Workspace,
    args: WriteArgs,
    seen: Option<&[String]>,
    sight: Sight,
) -> ToolOutput {
    let path = match ws.resolve_for_write(&args.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e.message),
    };
    let shown = ws.display(&path);
    if path == ws.root() || path.is_dir() {
        return ToolOutput::error(format!("`{shown}` is a directory; give a file path"));
    }
    let existed = path.exists();
    if existed
        && let Some(seen) = seen
        && !seen
            .iter()
            .any(|p| ws.resolve_for_write(p).is_ok_and(|p| p == path))
    {
        // The refusal shows the file, so it is the read it asks for: the next `write` of it is
        // allowed ([`crate::run::verification::seen_files`] counts a refused write as seen).
        if !sight.contents {
            return ToolOutput::error(format!(
                "`{shown}` exists and this run had not seen it, so it was not replaced; call \
                 write again to replace it whole"
            ));
        }
        let now = super::read::show(ws, &args.path, SHOWN_ON_REFUSAL);
        return ToolOutput::error(format!(
            "`{shown}` exists and this run had not read it, so it was not replaced. It holds \
             this now (as read shows it); change it with edit, or call write again to replace \
             it whole:\n{}",
            now.text
        ));
    }
    let mode = existing_mode(&path).unwrap_or(NEW_FILE_MODE);
    if let Some(parent) = path.parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        return ToolOutput::error(format!(
            "cannot create the directory `{}`: {e}",
            ws.display(parent)
        ));
    }
    // A new file named like one that exists elsewhere is usually a guessed path (`src/x.py` for
    // `x.py`): say so, or the model "fixes" a copy the checks never load.
    let others = if existed || !sight.names {
        Vec::new()
    } else {
        same_named(ws, &path)
    };
    match fsx::write_atomic(&path, args.content.as_bytes(), mode) {
        Ok(()) => ToolOutput::ok(format!(
            "{} `{shown}` ({}){}{}",
            if existed { "overwrote" } else { "created" },
            size(&args.content),
            holds(&args.content),
            if others.is_empty() {
                String::new()
            } else {
                format!(
                    "note: this is a new file, and {} already exists; if you meant to change \
                     that one, read it and edit it there\n",
                    quoted(&others)
                )
            }
        )),
        Err(e) => ToolOutput::error(format!("cannot write `{shown}`: {e}")),
    }
}

pub(crate) fn edit(ws: &Workspace, args: EditArgs, sight: Sight) -> ToolOutput {
    let path = match ws.resolve_for_write(&args.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e.message),
    };
    let shown = ws.display(&path);
    if args.old_string.is_empty() {
        return ToolOutput::error(
            "oldString is empty; use write to create or replace a whole file",
        );
    }
    if args.old_string == args.new_string {
        return ToolOutput::error("oldString and newString are identical; nothing to change");
    }
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return ToolOutput::error(format!("`{shown}` is not a regular file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let others = match sight.names {
                true => same_named(ws, &path),
                false => Vec::new(),
            };
            return ToolOutput::error(if others.is_empty() {
                format!("file `{shown}` does not exist; use write to create it")
            } else {
                format!(
                    "file `{shown}` does not exist, but {} does: read it and edit that path",
                    quoted(&others)
                )
            });
        }
        Err(e) => return ToolOutput::error(format!("cannot read `{shown}`: {e}")),
    }
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => return ToolOutput::error(format!("cannot read `{shown}`: {e}")),
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return ToolOutput::error(format!(
            "`{shown}` is not UTF-8 text; edit refuses to change it"
        ));
    };
    let count = text.matches(&args.old_string).count();
    if count == 0 {
        let nearest = match sight.contents {
            true => nearest_lines(&text, &args.old_string),
            false => String::new(),
        };
        return ToolOutput::error(format!("oldString was not found in `{shown}`{nearest}"));
    }
    if count > 1 && !args.replace_all {
        return ToolOutput::error(format!(
            "oldString occurs {count} times in `{shown}`; include more surrounding lines to make it unique, or set replaceAll"
        ));
    }
    let updated = if args.replace_all {
        text.replace(&args.old_string, &args.new_string)
    } else {
        text.replacen(&args.old_string, &args.new_string, 1)
    };
    let mode = existing_mode(&path).unwrap_or(NEW_FILE_MODE);
    match fsx::write_atomic(&path, updated.as_bytes(), mode) {
        Ok(()) => ToolOutput::ok(format!(
            "replaced {count} occurrence{} in `{shown}` (now {}){}",
            if count == 1 { "" } else { "s" },
            size(&updated),
            changed_lines(&text, &updated, &args)
        )),
        Err(e) => ToolOutput::error(format!("cannot write `{shown}`: {e}")),
    }
}

/// `N bytes, M lines` of a file's new content.
fn size(content: &str) -> String {
    let lines = lines(content).len();
    format!(
        "{} byte{}, {lines} line{}",
        content.len(),
        if content.len() == 1 { "" } else { "s" },
        if lines == 1 { "" } else { "s" }
    )
}

/// The lines of `content` (a final newline ends the last line rather than starting one).
fn lines(content: &str) -> Vec<&str> {
    if content.is_empty() {
        return Vec::new();
    }
    content
        .strip_suffix('\n')
        .unwrap_or(content)
        .split('\n')
        .collect()
}

/// `read`-style numbered lines `first..=last` (1-based) of `all`.
fn numbered(all: &[&str], first: usize, last: usize) -> String {
    let mut out = String::new();
    for (i, line) in all[first - 1..last].iter().enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let line = match line.char_indices().nth(LINE_CHARS) {
            Some((cut, _)) => format!("{}… [line cut]", &line[..cut]),
            None => line.to_string(),
        };
        out.push_str(&format!("{:>6}\t{line}\n", first + i));
    }
    out
}

/// What `write` tells the model the file now holds: all of a small file, the head of a big one.
fn holds(content: &str) -> String {
    let all = lines(content);
    if all.is_empty() {
        return "; it is now empty".into();
    }
    if all.len() <= QUOTE_LINES && content.len() <= QUOTE_BYTES {
        return format!("; it now holds:\n{}", numbered(&all, 1, all.len()));
    }
    format!(
        "; its first {HEAD_LINES} lines now read:\n{}[… {} more lines]\n",
        numbered(&all, 1, HEAD_LINES.min(all.len())),
        all.len().saturating_sub(HEAD_LINES)
    )
}

/// The lines of the edited file that hold each replacement, with a line of context around.
fn changed_lines(before: &str, after: &str, args: &EditArgs) -> String {
    let all = lines(after);
    if all.is_empty() {
        return "; the file is now empty".into();
    }
    let delta = args.new_string.len() as isize - args.old_string.len() as isize;
    let places: Vec<usize> = before
        .match_indices(&args.old_string)
        .take(if args.replace_all { usize::MAX } else { 1 })
        .enumerate()
        .map(|(i, (at, _))| (at as isize + i as isize * delta) as usize)
        .collect();
    let line_of = |offset: usize| after[..offset.min(after.len())].matches('\n').count() + 1;
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for start in &places {
        let end = start + args.new_string.len().saturating_sub(1);
        let first = line_of(*start).saturating_sub(CONTEXT_LINES).max(1);
        let last = (line_of(end) + CONTEXT_LINES).min(all.len());
        match ranges.last_mut() {
            Some((_, prev_last)) if first <= *prev_last + 1 => *prev_last = last.max(*prev_last),
            _ => ranges.push((first, last)),
        }
    }
    let mut out = String::from("; the changed lines now read:\n");
    for (i, (first, last)) in ranges.iter().take(SHOWN_PLACES).enumerate() {
        if i > 0 {
            out.push_str("…\n");
        }
        let cut = (*last).min(first + PLACE_LINES - 1);
        out.push_str(&numbered(&all, *first, cut));
        if cut < *last {
            out.push_str(&format!("[… {} more lines]\n", last - cut));
        }
    }
    if ranges.len() > SHOWN_PLACES {
        out.push_str(&format!(
            "[… {} more changed places]\n",
            ranges.len() - SHOWN_PLACES
        ));
    }
    out
}

/// Where an `edit` that missed most likely meant: the window of the file's lines that looks most
/// like `old` (line by line, ignoring indentation), quoted `read`-style so the model can copy the
/// exact text instead of guessing again or giving up. A small model's usual miss is a line it
/// remembered with other whitespace or a slightly different word; naming the place turns that
/// into one more edit.
fn nearest_lines(text: &str, old: &str) -> String {
    const GENERIC: &str = "; read the file and copy the exact text (whitespace included)";
    let all = lines(text);
    let wanted: Vec<&str> = lines(old).into_iter().take(NEAREST_LINES).collect();
    let Some(first) = wanted.iter().position(|l| !l.trim().is_empty()) else {
        return GENERIC.into();
    };
    // Too big to compare line by line within a tool call's budget: the plain hint.
    if all.len() > NEAREST_MAX_FILE_LINES {
        return GENERIC.into();
    }
    let wanted = &wanted[first..];
    let mut best: Option<(f64, usize)> = None;
    for start in 0..all.len() {
        let score: f64 = wanted
            .iter()
            .enumerate()
            .map(|(i, w)| {
                all.get(start + i)
                    .map_or(0.0, |l| similarity(w.trim(), l.trim()))
            })
            .sum::<f64>()
            / wanted.len() as f64;
        if best.is_none_or(|(b, _)| score > b) {
            best = Some((score, start));
        }
    }
    match best {
        Some((score, start)) if score >= NEAREST_MIN_SCORE => {
            let first = start.saturating_sub(CONTEXT_LINES) + 1;
            let last = (start + wanted.len() + CONTEXT_LINES).min(all.len());
            format!(
                "; the closest lines are these (copy the exact text from them, whitespace \
                 included, or read the file):\n{}",
                numbered(&all, first, last)
            )
        }
        _ => format!("; no line of the file looks like it{GENERIC}"),
    }
}

/// Lines of oldString compared when looking for the nearest lines.
const NEAREST_LINES: usize = 8;
/// Files longer than this get the plain hint (the comparison is lines × oldString lines).
const NEAREST_MAX_FILE_LINES: usize = 20_000;
/// The mean line similarity (0..=1) below which no place is offered as "closest".
const NEAREST_MIN_SCORE: f64 = 0.5;

/// Dice coefficient of the two strings' character bigrams (1.0: same bigrams; 0.0: none shared).
fn similarity(a: &str, b: &str) -> f64 {
    if a == b {
        return 1.0;
    }
    let bigrams = |s: &str| {
        let chars: Vec<char> = s.chars().collect();
        let mut v: Vec<(char, char)> = chars.windows(2).map(|w| (w[0], w[1])).collect();
        v.sort_unstable();
        v
    };
    let (x, y) = (bigrams(a), bigrams(b));
    if x.is_empty() || y.is_empty() {
        return 0.0;
    }
    // Count the shared bigrams (with multiplicity) by merging the two sorted lists.
    let (mut i, mut j, mut shared) = (0, 0, 0usize);
    while i < x.len() && j < y.len() {
        match x[i].cmp(&y[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    2.0 * shared as f64 / (x.len() + y.len()) as f64
}

fn existing_mode(path: &Path) -> Option<u32> {
    std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o7777)
}

#[cfg(test)]
mod tests {
    use crate::tools::testutil::Fixture;
    use serde_json::json;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn write_creates_parents_and_overwrites() {
        let fx = Fixture::new();
        let out = fx.run("write", json!({"path": "a/b/c.txt", "content": "hello\n"}));
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(
            out.text,
            "created `a/b/c.txt` (6 bytes, 1 line); it now holds:\n     1\thello\n"
        );
        assert_eq!(fx.get("a/b/c.txt"), "hello\n");
        let out = fx.run("write", json!({"path": "a/b/c.txt", "content": "bye"}));
        assert_eq!(
            out.text,
            "overwrote `a/b/c.txt` (3 bytes, 1 line); it now holds:\n     1\tbye\n"
        );
        assert_eq!(fx.get("a/b/c.txt"), "bye");
        let names: Vec<_> = std::fs::read_dir(fx.root.join("a/b")).unwrap().collect();
        assert_eq!(names.len(), 1, "no temp file left behind");
        assert!(
            fx.run("write", json!({"path": "a", "content": "x"}))
                .is_error
        );
    }

    #[test]
    fn write_refuses_escapes() {
        let fx = Fixture::new();
        let outside = fx.tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, fx.root.join("out")).unwrap();
        for path in ["../x.txt", "out/x.txt", "/tmp/kxen-escape-test.txt"] {
            let out = fx.run("write", json!({"path": path, "content": "x"}));
            assert!(out.is_error, "{path}: {}", out.text);
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        assert!(!fx.tmp.path().join("x.txt").exists());
    }

    /// Planting `core.fsmonitor` or a smudge filter would give an agent without `exec` code
    /// execution through the next git command.
    #[test]
    fn write_and_edit_refuse_every_git_directory() {
        let fx = Fixture::new();
        let git = |dir: &std::path::Path, args: &[&str]| {
            let ok = std::process::Command::new("git")
                .args(args)
                .current_dir(dir)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "git {args:?}");
        };
        git(&fx.root, &["init", "-q"]);
        // A nested repository's git directory moved elsewhere, behind a `.git` file.
        git(
            &fx.root,
            &["init", "-q", "--separate-git-dir", "store", "nested"],
        );
        std::os::unix::fs::symlink(fx.root.join(".git"), fx.root.join("gitlink")).unwrap();
        std::fs::write(fx.root.join(".git/info/attributes"), "* text\n").unwrap();
        for path in [
            ".git/config",
            ".git/info/attributes",
            ".git/hooks/post-checkout",
            ".GIT/config",
            "./.git/new-file",
            "nested/.git",
            "store/config",
            "store/hooks/pre-commit",
            "gitlink/config",
            "sub/.git",
        ] {
            let out = fx.run(
                "write",
                json!({"path": path, "content": "[core]\n\tfsmonitor = touch pwned\n"}),
            );
            assert!(out.is_error, "{path}: {}", out.text);
            assert!(out.text.contains("git directory"), "{path}: {}", out.text);
        }
        let out = fx.run(
            "edit",
            json!({"path": ".git/info/attributes", "oldString": "* text", "newString": "* filter=x"}),
        );
        assert!(
            out.is_error && out.text.contains("git directory"),
            "{}",
            out.text
        );
        assert_eq!(
            std::fs::read_to_string(fx.root.join(".git/info/attributes")).unwrap(),
            "* text\n"
        );
        assert!(!fx.root.join("sub").exists());
        // Ordinary files next to them are fine, and a file merely named like git's is too.
        for path in ["src/config", "gitignore.txt", ".gitattributes", "HEAD"] {
            let out = fx.run("write", json!({"path": path, "content": "x"}));
            assert!(!out.is_error, "{path}: {}", out.text);
        }
    }

    /// A plan run's folder holds the host's evidence (samples, meter records, LIMIT lines): a
    /// model that could write there could forge its own usage. No spelling gets in.
    #[test]
    fn write_and_edit_refuse_the_protected_plan_folder() {
        let mut fx = Fixture::new();
        let plan = fx.root.join(".dwp/plans/PLAN_a_b");
        std::fs::create_dir_all(plan.join("analysis_results")).unwrap();
        let journal = "{\"seq\":1}\n";
        std::fs::write(plan.join("journal.ndjson"), journal).unwrap();
        std::fs::create_dir_all(fx.root.join("sub")).unwrap();
        std::os::unix::fs::symlink(&plan, fx.root.join("plan-link")).unwrap();
        std::os::unix::fs::symlink(fx.root.join(".dwp"), fx.root.join("dwp-link")).unwrap();
        std::os::unix::fs::symlink(plan.join("journal.ndjson"), fx.root.join("j")).unwrap();
        // Protected as the runtime records it, spelled through a symlink of the parent.
        fx.protected = vec![fx.root.join("dwp-link/plans/PLAN_a_b")];
        let abs = plan.join("journal.ndjson");
        for path in [
            ".dwp/plans/PLAN_a_b/journal.ndjson",
            "./.dwp/plans/PLAN_a_b/journal.ndjson",
            ".dwp/./plans/PLAN_a_b/analysis_results/forged.json",
            ".dwp/plans/PLAN_a_b/analysis_results/new/dir/forged.json",
            ".dwp/plans/PLAN_a_b/contracts/9.json",
            "plan-link/journal.ndjson",
            "dwp-link/plans/PLAN_a_b/state.json",
            "j",
            abs.to_str().unwrap(),
        ] {
            let out = fx.run("write", json!({"path": path, "content": "forged\n"}));
            assert!(out.is_error, "{path}: {}", out.text);
            assert!(out.text.contains("DWP plan folder"), "{path}: {}", out.text);
        }
        let out = fx.run(
            "write",
            json!({"path": "sub/../.dwp/plans/PLAN_a_b/x", "content": ""}),
        );
        assert!(out.is_error && out.text.contains(".."), "{}", out.text);
        for path in [
            ".dwp/plans/PLAN_a_b/journal.ndjson",
            "j",
            "plan-link/journal.ndjson",
        ] {
            let out = fx.run(
                "edit",
                json!({"path": path, "oldString": "1", "newString": "2"}),
            );
            assert!(
                out.is_error && out.text.contains("DWP plan folder"),
                "{path}: {}",
                out.text
            );
        }
        assert_eq!(std::fs::read_to_string(&abs).unwrap(), journal);
        let entries = |d: &std::path::Path| std::fs::read_dir(d).unwrap().count();
        assert_eq!(entries(&plan), 2, "nothing new in the plan folder");
        assert_eq!(entries(&plan.join("analysis_results")), 0);
        // Next to it everything stays writable: another plan, the .dwp folder, the repo.
        for path in [
            ".dwp/plans/PLAN_c_d/journal.ndjson",
            ".dwp/config.json",
            "src/a.rs",
        ] {
            let out = fx.run("write", json!({"path": path, "content": "x"}));
            assert!(!out.is_error, "{path}: {}", out.text);
        }
    }

    #[test]
    fn edit_replaces_unique_string_and_keeps_mode() {
        let fx = Fixture::new();
        fx.put("run.sh", "echo one\necho two\n");
        let p = fx.root.join("run.sh");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        let out = fx.run(
            "edit",
            json!({"path": "run.sh", "oldString": "one", "newString": "uno"}),
        );
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(fx.get("run.sh"), "echo uno\necho two\n");
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o755
        );
    }

    #[test]
    fn a_big_write_shows_its_head_and_an_empty_one_says_so() {
        let fx = Fixture::new();
        let content: String = (1..=100).map(|i| format!("line {i}\n")).collect();
        let out = fx.run("write", json!({"path": "big.txt", "content": content}));
        assert!(
            out.text.starts_with("created `big.txt` (792 bytes, 100 lines); its first 10 lines now read:\n     1\tline 1\n"),
            "{}",
            out.text
        );
        assert!(
            out.text.ends_with("    10\tline 10\n[… 90 more lines]\n"),
            "{}",
            out.text
        );
        let out = fx.run("write", json!({"path": "e.txt", "content": ""}));
        assert_eq!(
            out.text,
            "created `e.txt` (0 bytes, 0 lines); it is now empty"
        );
    }

    #[test]
    fn edit_shows_the_changed_lines_with_context() {
        let fx = Fixture::new();
        let code: String = (1..=20).map(|i| format!("l{i}\n")).collect();
        fx.put("c.py", &format!("def add(a, b):\n    return a - b\n{code}"));
        let out = fx.run(
            "edit",
            json!({"path": "c.py", "oldString": "return a - b", "newString": "return a + b"}),
        );
        assert_eq!(
            out.text,
            "replaced 1 occurrence in `c.py` (now 103 bytes, 22 lines); the changed lines now \
             read:\n     1\tdef add(a, b):\n     2\t    return a + b\n     3\tl1\n"
        );
        // A multi-line replacement in the middle, numbered as the file now is.
        let out = fx.run(
            "edit",
            json!({"path": "c.py", "oldString": "l10\n", "newString": "l10a\nl10b\n"}),
        );
        assert!(
            out.text
                .ends_with("read:\n    11\tl9\n    12\tl10a\n    13\tl10b\n    14\tl11\n"),
            "{}",
            out.text
        );
        // replaceAll in many places: three are shown, the rest counted.
        fx.put("m.txt", &"x\ny\ny\ny\n".repeat(5));
        let out = fx.run(
            "edit",
            json!({"path": "m.txt", "oldString": "x", "newString": "z", "replaceAll": true}),
        );
        assert_eq!(out.text.matches("\tz").count(), 3, "{}", out.text);
        assert!(
            out.text.ends_with("[… 2 more changed places]\n"),
            "{}",
            out.text
        );
        // Deleting the last line.
        fx.put("d.txt", "keep\ndrop\n");
        let out = fx.run(
            "edit",
            json!({"path": "d.txt", "oldString": "drop\n", "newString": ""}),
        );
        assert!(out.text.ends_with("read:\n     1\tkeep\n"), "{}", out.text);
        fx.put("o.txt", "only");
        let out = fx.run(
            "edit",
            json!({"path": "o.txt", "oldString": "only", "newString": ""}),
        );
        assert!(
            out.text.ends_with("; the file is now empty"),
            "{}",
            out.text
        );
    }

    #[test]
    fn edit_missing_ambiguous_and_replace_all() {
        let fx = Fixture::new();
        fx.put("a.txt", "x = 1\nx = 1\n");
        let out = fx.run(
            "edit",
            json!({"path": "a.txt", "oldString": "y", "newString": "z"}),
        );
        assert_eq!(
            out.text,
            "oldString was not found in `a.txt`; no line of the file looks like it; read the \
             file and copy the exact text (whitespace included)"
        );
        let out = fx.run(
            "edit",
            json!({"path": "a.txt", "oldString": "x = 1", "newString": "x = 2"}),
        );
        assert!(
            out.is_error && out.text.contains("occurs 2 times"),
            "{}",
            out.text
        );
        assert_eq!(
            fx.get("a.txt"),
            "x = 1\nx = 1\n",
            "ambiguous edit changes nothing"
        );
        let out = fx.run(
            "edit",
            json!({"path": "a.txt", "oldString": "x = 1", "newString": "x = 2", "replaceAll": true}),
        );
        assert_eq!(
            out.text,
            "replaced 2 occurrences in `a.txt` (now 12 bytes, 2 lines); the changed lines now \
             read:\n     1\tx = 2\n     2\tx = 2\n"
        );
        assert_eq!(fx.get("a.txt"), "x = 2\nx = 2\n");
        let out = fx.run(
            "edit",
            json!({"path": "nope", "oldString": "a", "newString": "b"}),
        );
        assert!(out.is_error && out.text.contains("does not exist"));
        let out = fx.run(
            "edit",
            json!({"path": "a.txt", "oldString": "", "newString": "b"}),
        );
        assert!(out.is_error);
        let out = fx.run(
            "edit",
            json!({"path": "a.txt", "oldString": "x", "newString": "x"}),
        );
        assert!(out.is_error);
    }

    /// A guessed path (`src/x.py` for `x.py`) is named as such, by edit and by write.
    #[test]
    fn a_guessed_path_points_to_the_same_named_file() {
        let fx = Fixture::new();
        fx.put("mathx.py", "x = 1\n");
        let out = fx.run(
            "edit",
            json!({"path": "src/mathx.py", "oldString": "x = 1", "newString": "x = 2"}),
        );
        assert!(out.is_error);
        assert_eq!(
            out.text,
            "file `src/mathx.py` does not exist, but `mathx.py` does: read it and edit that path"
        );
        let out = fx.run("write", json!({"path": "src/mathx.py", "content": "y\n"}));
        assert!(!out.is_error);
        assert!(
            out.text.ends_with(
                "note: this is a new file, and `mathx.py` already exists; if you meant to \
                 change that one, read it and edit it there\n"
            ),
            "{}",
            out.text
        );
        // Overwriting a file, or a name nothing else has, says nothing more.
        let out = fx.run("write", json!({"path": "src/mathx.py", "content": "z\n"}));
        assert!(!out.text.contains("note:"), "{}", out.text);
        let out = fx.run("write", json!({"path": "other.py", "content": "z\n"}));
        assert!(!out.text.contains("note:"), "{}", out.text);
    }

    /// `read` of a guessed path names the same-named file too.
    #[test]
    fn a_read_of_a_guessed_path_names_the_same_named_file() {
        let fx = Fixture::new();
        fx.put("mathx.py", "x = 1\n");
        let out = fx.run("read", json!({"path": "src/mathx.py"}));
        assert!(out.is_error);
        assert_eq!(
            out.text,
            "file `src/mathx.py` does not exist, but `mathx.py` does: read that path"
        );
    }

    /// With a run's record of seen files, `write` replaces only a file the run has seen, and
    /// creates any new one.
    #[test]
    fn without_read_a_refused_write_or_an_edit_miss_shows_nothing_of_the_file() {
        let fx = Fixture::new();
        fx.put("notes.txt", "SECRET-LINE-1\nline2\n");
        fx.put("sub/other.txt", "x\n");
        let ws = super::Workspace::new(&fx.root).unwrap();
        let blind = super::super::hints::Sight {
            contents: false,
            names: false,
        };
        let args = serde_json::from_value(json!({"path": "notes.txt", "content": "n\n"})).unwrap();
        let out = super::write(&ws, args, Some(&[]), blind);
        assert!(out.is_error && !out.text.contains("SECRET"), "{}", out.text);
        let args = serde_json::from_value(
            json!({"path": "notes.txt", "oldString": "SECRET-LINE-2", "newString": "y"}),
        )
        .unwrap();
        let out = super::edit(&ws, args, blind);
        assert!(
            out.is_error && !out.text.contains("SECRET-LINE-1"),
            "{}",
            out.text
        );
        let args = serde_json::from_value(
            json!({"path": "other.txt", "oldString": "x", "newString": "y"}),
        )
        .unwrap();
        let out = super::edit(&ws, args, blind);
        assert!(out.is_error && !out.text.contains("sub/"), "{}", out.text);
    }

    #[test]
    fn write_refuses_to_replace_a_file_the_run_has_not_read() {
        let fx = Fixture::new();
        fx.put("a.py", "keep\n");
        let ws = super::Workspace::new(&fx.root).unwrap();
        let write = |path: &str, seen: &[String]| {
            let args = serde_json::from_value(json!({"path": path, "content": "new\n"})).unwrap();
            super::write(
                &ws,
                args,
                Some(seen),
                super::super::hints::Sight {
                    contents: true,
                    names: true,
                },
            )
        };
        let out = write("a.py", &[]);
        assert!(out.is_error);
        assert_eq!(
            out.text,
            "`a.py` exists and this run had not read it, so it was not replaced. It holds this \
             now (as read shows it); change it with edit, or call write again to replace it \
             whole:\n     1\tkeep\n"
        );
        assert_eq!(fx.get("a.py"), "keep\n");
        // The same file under another spelling of its path counts as seen.
        let out = write("a.py", &["./a.py".to_string()]);
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(fx.get("a.py"), "new\n");
        let out = write("b.py", &[]);
        assert!(!out.is_error, "{}", out.text);
    }

    /// A miss quotes the place the model most likely meant, so the next edit can copy it.
    #[test]
    fn an_edit_miss_shows_the_nearest_lines() {
        let fx = Fixture::new();
        fx.put(
            "m.py",
            "import os\n\ndef total(n):\n    s = 0\n    for i in range(1, n):\n        s += i\n    return s\n",
        );
        let out = fx.run(
            "edit",
            json!({"path": "m.py", "oldString": "for i in range(1,n):\n    s += i", "newString": "x"}),
        );
        assert!(out.is_error);
        assert_eq!(
            out.text,
            "oldString was not found in `m.py`; the closest lines are these (copy the exact text \
             from them, whitespace included, or read the file):\n     4\t    s = 0\n     5\t    \
             for i in range(1, n):\n     6\t        s += i\n     7\t    return s\n"
        );
        assert_eq!(fx.get("m.py").lines().count(), 7, "a miss changes nothing");
        // A blank oldString line first, and a window at the very start of the file.
        let out = fx.run(
            "edit",
            json!({"path": "m.py", "oldString": "\nimport  os", "newString": "x"}),
        );
        assert!(
            out.text.ends_with(":\n     1\timport os\n     2\t\n"),
            "{}",
            out.text
        );
    }

    #[test]
    fn edit_through_inner_symlink_keeps_the_link() {
        let fx = Fixture::new();
        fx.put("real.txt", "old");
        std::os::unix::fs::symlink(fx.root.join("real.txt"), fx.root.join("link.txt")).unwrap();
        let out = fx.run(
            "edit",
            json!({"path": "link.txt", "oldString": "old", "newString": "new"}),
        );
        assert!(!out.is_error, "{}", out.text);
        assert_eq!(fx.get("real.txt"), "new");
        assert!(
            fx.root
                .join("link.txt")
                .symlink_metadata()
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}
