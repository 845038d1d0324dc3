//! The environment preamble: what the workspace looks like when a run starts, told to the model
//! once, ahead of its task, so it does not have to guess paths.
//!
//! Deterministic for a given workspace and task (sorted listings, fixed caps) and computed only
//! when the run's task message is written; the text is then recorded with that message
//! ([`super::read`]), so later turns and resumes send the same bytes even after the files change.
//! Nothing here can fail a run: a listing git cannot give falls back to a directory walk, and a
//! status git cannot give is left out.

use std::path::Path;

/// The most files listed; the rest are counted ("… and N more").
pub const MAX_FILES: usize = 60;

/// The most `git status --short` lines shown.
pub const MAX_STATUS_LINES: usize = 20;

/// The longest path shown (longer ones are cut with `…`).
const MAX_PATH_CHARS: usize = 160;

/// How far the walk of a workspace outside git goes, and how many entries it looks at.
const WALK_DEPTH: usize = 4;
const WALK_ENTRIES: usize = 2_000;

/// The text for `root` and the run's `task`, starting with a blank line.
pub fn describe(root: &Path, task: &str) -> String {
    let mut text = String::from(
        "\nWorkspace: the state when this run started (paths are relative to the workspace \
         directory, where `exec` runs).\n",
    );
    let (files, tracked) = listing(root);
    let shown = files.len().min(MAX_FILES);
    let order = if tracked {
        "tracked by git first"
    } else {
        "not a git checkout"
    };
    text.push_str(&format!("Files ({}, {order}):\n", files.len()));
    for path in &files[..shown] {
        text.push_str(&format!("  {}\n", cut(path)));
    }
    if files.len() > shown {
        text.push_str(&format!(
            "  … and {} more (use glob to see them)\n",
            files.len() - shown
        ));
    }
    if files.is_empty() {
        text.push_str("  (none)\n");
    }
    if let Some(status) = status(root) {
        let lines: Vec<&str> = status.lines().filter(|l| !l.trim().is_empty()).collect();
        if lines.is_empty() {
            text.push_str("`git status --short`: clean (nothing changed since the last commit)\n");
        } else {
            text.push_str("`git status --short`:\n");
            for line in lines.iter().take(MAX_STATUS_LINES) {
                text.push_str(&format!("  {}\n", cut(line)));
            }
            if lines.len() > MAX_STATUS_LINES {
                text.push_str(&format!(
                    "  … and {} more\n",
                    lines.len() - MAX_STATUS_LINES
                ));
            }
        }
    }
    let checks = crate::run::verification::named_checks(task, root);
    if !checks.is_empty() {
        let quoted: Vec<String> = checks.iter().map(|c| format!("`{c}`")).collect();
        text.push_str(&format!(
            "The task's check: {} (run it with exec)\n",
            quoted.join(", ")
        ));
    }
    text
}

/// The workspace's files: git's tracked files, then its untracked ones that are not ignored;
/// outside git (or when git cannot list them) a bounded, sorted walk that skips hidden entries.
/// The flag says whether git listed them.
fn listing(root: &Path) -> (Vec<String>, bool) {
    let git = |args: &[&str]| crate::git::cli::run(root, args).ok();
    if let Some(tracked) = git(&["ls-files", "-z"]) {
        let mut files: Vec<String> = split_z(&tracked);
        let others = git(&["ls-files", "-z", "--others", "--exclude-standard"]).unwrap_or_default();
        files.extend(split_z(&others));
        return (files, true);
    }
    let mut files = Vec::new();
    let walk = walkdir::WalkDir::new(root)
        .min_depth(1)
        .max_depth(WALK_DEPTH)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .take(WALK_ENTRIES);
    for entry in walk.flatten() {
        if entry.file_type().is_file()
            && let Ok(rel) = entry.path().strip_prefix(root)
        {
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            files.push(parts.join("/"));
        }
    }
    (files, false)
}

/// `git status --short` in `root`, or `None` outside git.
fn status(root: &Path) -> Option<String> {
    crate::git::cli::run(root, &["status", "--short"]).ok()
}

fn split_z(out: &str) -> Vec<String> {
    out.split('\0')
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// `s` without control characters (a file name can hold a newline), at most
/// [`MAX_PATH_CHARS`] characters.
fn cut(s: &str) -> String {
    let clean: String = s
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if clean.chars().count() <= MAX_PATH_CHARS {
        return clean;
    }
    let mut short: String = clean.chars().take(MAX_PATH_CHARS - 1).collect();
    short.push('…');
    short
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let ok = std::process::Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    }

    #[test]
    fn a_git_workspace_lists_tracked_then_untracked_and_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        crate::fsx::write_atomic(&root.join("merge.py"), b"x = 1\n", 0o644).unwrap();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        crate::fsx::write_atomic(&root.join("tests/t.sh"), b"true\n", 0o644).unwrap();
        git(root, &["init", "-q"]);
        git(root, &["add", "."]);
        git(root, &["commit", "-qm", "one"]);
        crate::fsx::write_atomic(&root.join("merge.py"), b"x = 2\n", 0o644).unwrap();
        crate::fsx::write_atomic(&root.join("new.txt"), b"n\n", 0o644).unwrap();
        let text = describe(root, "Fix it. Check with `sh tests/t.sh`.");
        assert!(text.starts_with("\nWorkspace: "), "{text}");
        let listed = "Files (3, tracked by git first):\n  merge.py\n  tests/t.sh\n  new.txt\n";
        assert!(text.contains(listed), "{text}");
        assert!(
            text.contains("`git status --short`:\n   M merge.py\n  ?? new.txt\n"),
            "{text}"
        );
        assert!(text.contains("The task's check: `sh tests/t.sh`"), "{text}");
        // The same workspace gives the same bytes.
        assert_eq!(text, describe(root, "Fix it. Check with `sh tests/t.sh`."));
    }

    #[test]
    fn a_long_listing_is_capped_and_a_plain_directory_is_walked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for i in 0..MAX_FILES + 5 {
            let name = format!("f{i:03}.txt");
            crate::fsx::write_atomic(&root.join(name), b"", 0o644).unwrap();
        }
        std::fs::create_dir_all(root.join(".hidden")).unwrap();
        crate::fsx::write_atomic(&root.join(".hidden/x"), b"", 0o644).unwrap();
        let text = describe(root, "no check here");
        assert!(text.contains(&format!("Files ({}, not a git checkout):", MAX_FILES + 5)));
        assert!(
            text.contains("  f000.txt\n") && !text.contains("f060.txt"),
            "{text}"
        );
        assert!(
            text.contains("… and 5 more (use glob to see them)"),
            "{text}"
        );
        assert!(
            !text.contains(".hidden") && !text.contains("git status"),
            "{text}"
        );
        assert!(!text.contains("The task's check"), "{text}");
    }

    #[test]
    fn control_characters_and_long_names_are_tamed() {
        assert_eq!(cut("a\nb"), "a?b");
        let long = "x".repeat(500);
        assert_eq!(cut(&long).chars().count(), MAX_PATH_CHARS);
    }
}
