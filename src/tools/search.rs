//! `glob {pattern, path?}` and `grep {pattern, path?, glob?}`: gitignore-aware, sorted, capped.
//!
//! Walking uses the `ignore` crate as ripgrep does: `.gitignore` (also outside a git repository),
//! `.ignore` and `.git/info/exclude` are honoured, hidden files are included, `.git/` itself is
//! never listed and symlinks are not followed (they could lead out of the workspace). The user's
//! global git excludes are not read, so results do not depend on who runs the agent.

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use regex::Regex;
use schemars::JsonSchema;
use serde::Deserialize;

use super::ToolOutput;
use super::paths::Workspace;
use crate::error::{Error, Result};

/// Most paths `glob` lists.
const MAX_GLOB_RESULTS: usize = 1000;
/// Most matching lines `grep` shows.
const MAX_GREP_MATCHES: usize = 500;
/// Longer matching lines are cut.
const MAX_GREP_LINE_CHARS: usize = 500;
/// Larger files are skipped by `grep` (and counted in a note).
const MAX_GREP_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The arguments of `glob`; each field's doc comment is its description in the schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GlobArgs {
    /// Glob pattern, e.g. `**/*.py` or `*.md`
    pattern: String,
    /// Directory to search, relative to the workspace root (default: the root)
    #[serde(default)]
    path: Option<String>,
}

/// The arguments of `grep`; each field's doc comment is its description in the schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct GrepArgs {
    /// Regular expression
    pattern: String,
    /// File or directory to search (default: the workspace root)
    #[serde(default)]
    path: Option<String>,
    /// Only search files matching this glob, e.g. `*.rs`
    #[serde(default)]
    glob: Option<String>,
}

/// A compiled file pattern. Without `/` it matches the file name at any depth (as in
/// `.gitignore`); with `/` it matches the whole path relative to the search directory.
struct FilePattern {
    matcher: GlobMatcher,
    by_name: bool,
}

impl FilePattern {
    fn new(pattern: &str) -> Result<FilePattern> {
        let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
        if pattern.is_empty() {
            return Err(Error::invalid("glob pattern is empty"));
        }
        let glob = GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| Error::invalid(format!("invalid glob pattern `{pattern}`: {e}")))?;
        Ok(FilePattern {
            matcher: glob.compile_matcher(),
            by_name: !pattern.contains('/'),
        })
    }

    fn matches(&self, rel: &Path) -> bool {
        if self.by_name {
            rel.file_name()
                .is_some_and(|name| self.matcher.is_match(Path::new(name)))
        } else {
            self.matcher.is_match(rel)
        }
    }
}

/// Resolves the optional `path` argument (default: the workspace root).
/// Refusals are the crate's [`Error`] (the path's own, or not found); the tools give the model
/// its message.
fn base(ws: &Workspace, path: Option<&str>) -> Result<PathBuf> {
    let base = match path {
        None | Some("") => ws.root().to_path_buf(),
        Some(p) => ws.resolve(p)?,
    };
    if !base.exists() {
        return Err(Error::not_found(format!(
            "`{}` does not exist",
            ws.display(&base)
        )));
    }
    Ok(base)
}

/// Every regular file under `base` (or `base` itself if it is a file), gitignore-aware, sorted.
fn walk(base: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ignore::WalkBuilder::new(base)
        .hidden(false)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .filter_entry(|e| e.file_name() != ".git")
        .build()
        .filter_map(|entry| entry.ok())
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .map(|e| e.into_path())
        .collect();
    files.sort();
    files
}

/// `file` relative to the search base; its file name when the base is the file itself.
fn relative<'a>(file: &'a Path, base: &Path) -> &'a Path {
    match file.strip_prefix(base) {
        Ok(rel) if !rel.as_os_str().is_empty() => rel,
        _ => Path::new(file.file_name().unwrap_or_default()),
    }
}

pub(crate) fn glob(ws: &Workspace, args: GlobArgs) -> ToolOutput {
    let pattern = match FilePattern::new(&args.pattern) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e.message),
    };
    let base = match base(ws, args.path.as_deref()) {
        Ok(b) => b,
        Err(e) => return ToolOutput::error(e.message),
    };
    let matches: Vec<String> = walk(&base)
        .into_iter()
        .filter(|p| pattern.matches(relative(p, &base)))
        .map(|p| ws.display(&p))
        .collect();
    if matches.is_empty() {
        return ToolOutput::ok(format!(
            "no files match `{}` in `{}`",
            args.pattern,
            ws.display(&base)
        ));
    }
    let total = matches.len();
    let mut out = String::new();
    for m in matches.iter().take(MAX_GLOB_RESULTS) {
        out.push_str(m);
        out.push('\n');
    }
    if total > MAX_GLOB_RESULTS {
        out.push_str(&format!(
            "[truncated: showing the first {MAX_GLOB_RESULTS} of {total} files; narrow the pattern or path]\n"
        ));
    }
    ToolOutput::ok(out)
}

pub(crate) fn grep(ws: &Workspace, args: GrepArgs) -> ToolOutput {
    let regex = match Regex::new(&args.pattern) {
        Ok(r) => r,
        Err(e) => return ToolOutput::error(format!("invalid regular expression: {e}")),
    };
    let filter = match args.glob.as_deref().map(FilePattern::new).transpose() {
        Ok(f) => f,
        Err(e) => return ToolOutput::error(e.message),
    };
    let base = match base(ws, args.path.as_deref()) {
        Ok(b) => b,
        Err(e) => return ToolOutput::error(e.message),
    };
    let mut out = String::new();
    let mut shown = 0usize;
    let mut total = 0usize;
    let mut skipped_large = 0usize;
    for file in walk(&base) {
        let rel = relative(&file, &base);
        if filter.as_ref().is_some_and(|f| !f.matches(rel)) {
            continue;
        }
        if std::fs::metadata(&file).is_ok_and(|m| m.len() > MAX_GREP_FILE_BYTES) {
            skipped_large += 1;
            continue;
        }
        let Ok(bytes) = std::fs::read(&file) else {
            continue;
        };
        if bytes[..bytes.len().min(8192)].contains(&0) {
            continue; // binary
        }
        let text = String::from_utf8_lossy(&bytes);
        let display = ws.display(&file);
        for (i, line) in text.lines().enumerate() {
            if !regex.is_match(line) {
                continue;
            }
            total += 1;
            if shown < MAX_GREP_MATCHES {
                shown += 1;
                let line = match line.char_indices().nth(MAX_GREP_LINE_CHARS) {
                    Some((cut, _)) => format!("{}…", &line[..cut]),
                    None => line.to_string(),
                };
                out.push_str(&format!("{display}:{}:{line}\n", i + 1));
            }
        }
    }
    if total == 0 {
        out.push_str(&format!(
            "no matches for `{}` in `{}`\n",
            args.pattern,
            ws.display(&base)
        ));
    }
    if total > shown {
        out.push_str(&format!(
            "[truncated: showing the first {shown} of {total} matching lines; narrow the pattern, path or glob]\n"
        ));
    }
    if skipped_large > 0 {
        out.push_str(&format!(
            "[skipped {skipped_large} file(s) over {MAX_GREP_FILE_BYTES} bytes]\n"
        ));
    }
    ToolOutput::ok(out)
}

#[cfg(test)]
mod tests {
    use crate::tools::testutil::Fixture;
    use serde_json::json;

    fn tree() -> Fixture {
        let fx = Fixture::new();
        fx.put(".gitignore", "target/\n*.log\n");
        fx.put("src/main.rs", "fn main() {\n    helper();\n}\n");
        fx.put("src/util/helper.rs", "pub fn helper() {}\n");
        fx.put("b.rs", "// helper at top\n");
        fx.put("target/debug/gen.rs", "fn helper() {}\n");
        fx.put("run.log", "helper\n");
        fx.put(".github/ci.yml", "helper: yes\n");
        fx.put(".git/config", "helper\n");
        fx
    }

    #[test]
    fn glob_is_sorted_and_gitignore_aware() {
        let fx = tree();
        let out = fx.run("glob", json!({"pattern": "*.rs"}));
        assert!(!out.is_error);
        assert_eq!(out.text, "b.rs\nsrc/main.rs\nsrc/util/helper.rs\n");
        let out = fx.run("glob", json!({"pattern": "src/**/*.rs"}));
        assert_eq!(out.text, "src/main.rs\nsrc/util/helper.rs\n");
        let out = fx.run("glob", json!({"pattern": "*.rs", "path": "src/util"}));
        assert_eq!(out.text, "src/util/helper.rs\n");
        let out = fx.run("glob", json!({"pattern": "*.rs", "path": "b.rs"}));
        assert_eq!(out.text, "b.rs\n", "a file path matches itself");
        let out = fx.run("glob", json!({"pattern": "*.yml"}));
        assert_eq!(out.text, ".github/ci.yml\n", "hidden files are listed");
        let out = fx.run("glob", json!({"pattern": "config"}));
        assert!(
            out.text.starts_with("no files match"),
            ".git is never listed"
        );
        assert!(
            fx.run("glob", json!({"pattern": "a[", "path": "."}))
                .is_error
        );
        assert!(
            fx.run("glob", json!({"pattern": "*", "path": "../"}))
                .is_error
        );
        assert!(
            fx.run("glob", json!({"pattern": "*", "path": "nope"}))
                .is_error
        );
    }

    #[test]
    fn glob_truncates_with_a_note() {
        let fx = Fixture::new();
        for i in 0..1005 {
            fx.put(&format!("f/{i:04}.txt"), "");
        }
        let out = fx.run("glob", json!({"pattern": "*.txt"}));
        let lines: Vec<&str> = out.text.lines().collect();
        assert_eq!(lines.len(), 1001);
        assert_eq!(lines[0], "f/0000.txt");
        assert_eq!(lines[999], "f/0999.txt");
        assert!(lines[1000].contains("first 1000 of 1005"));
    }

    #[test]
    fn grep_is_sorted_gitignore_aware_and_filtered() {
        let fx = tree();
        let out = fx.run("grep", json!({"pattern": "helper"}));
        assert_eq!(
            out.text,
            ".github/ci.yml:1:helper: yes\nb.rs:1:// helper at top\nsrc/main.rs:2:    helper();\nsrc/util/helper.rs:1:pub fn helper() {}\n"
        );
        let out = fx.run(
            "grep",
            json!({"pattern": "fn \\w+", "glob": "*.rs", "path": "src"}),
        );
        assert_eq!(
            out.text,
            "src/main.rs:1:fn main() {\nsrc/util/helper.rs:1:pub fn helper() {}\n"
        );
        let out = fx.run("grep", json!({"pattern": "helper", "path": "src/main.rs"}));
        assert_eq!(out.text, "src/main.rs:2:    helper();\n");
        let out = fx.run("grep", json!({"pattern": "zzz"}));
        assert!(!out.is_error && out.text.starts_with("no matches"));
        assert!(fx.run("grep", json!({"pattern": "("})).is_error);
    }

    #[test]
    fn grep_truncates_with_a_note_and_skips_binary() {
        let fx = Fixture::new();
        fx.put("many.txt", &"hit\n".repeat(600));
        std::fs::write(fx.root.join("bin"), b"hit\0hit").unwrap();
        let out = fx.run("grep", json!({"pattern": "hit"}));
        let lines: Vec<&str> = out.text.lines().collect();
        assert_eq!(lines.len(), 501);
        assert_eq!(lines[0], "many.txt:1:hit");
        assert!(lines[500].contains("first 500 of 600"));
        assert!(!out.text.contains("bin:"));
    }

    #[test]
    fn grep_does_not_follow_symlinks_out() {
        let fx = Fixture::new();
        let outside = fx.tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("s.txt"), "secret-token").unwrap();
        std::os::unix::fs::symlink(&outside, fx.root.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.join("s.txt"), fx.root.join("s.txt")).unwrap();
        let out = fx.run("grep", json!({"pattern": "secret"}));
        assert!(out.text.starts_with("no matches"), "{}", out.text);
        assert!(
            fx.run("grep", json!({"pattern": "secret", "path": "out"}))
                .is_error
        );
    }
}
