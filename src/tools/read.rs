//! `read {path, offset?, limit?}`: numbered lines of a text file.

use schemars::JsonSchema;
use serde::Deserialize;

use super::ToolOutput;
use super::paths::Workspace;

/// Lines shown when the model gives no `limit`.
const DEFAULT_LIMIT: u64 = 2000;
/// Longer lines are cut (minified files would otherwise flood the context).
const MAX_LINE_CHARS: usize = 2000;
/// Files larger than this are refused; `grep` or `exec` suit them better.
const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// The arguments of `read`; each field's doc comment is its description in the schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct ReadArgs {
    /// File path relative to the workspace root
    path: String,
    /// First line to show (1-based)
    #[serde(default)]
    #[schemars(range(min = 1))]
    offset: Option<u64>,
    /// Number of lines to show (default 2000)
    #[serde(default)]
    #[schemars(range(min = 1))]
    limit: Option<u64>,
}

pub(crate) fn run(ws: &Workspace, args: ReadArgs, sight: super::hints::Sight) -> ToolOutput {
    let path = match ws.resolve(&args.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e.message),
    };
    let shown = ws.display(&path);
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A guessed path (`src/x.py` for `x.py`): name the file the model most likely meant.
            let others = match sight.names {
                true => super::hints::same_named(ws, &path),
                false => Vec::new(),
            };
            return ToolOutput::error(if others.is_empty() {
                format!("file `{shown}` does not exist")
            } else {
                format!(
                    "file `{shown}` does not exist, but {} does: read that path",
                    super::hints::quoted(&others)
                )
            });
        }
        Err(e) => return ToolOutput::error(format!("cannot read `{shown}`: {e}")),
    };
    if meta.is_dir() {
        return ToolOutput::error(format!("`{shown}` is a directory; use glob to list files"));
    }
    if !meta.is_file() {
        // A FIFO or device would block or never end.
        return ToolOutput::error(format!("`{shown}` is not a regular file"));
    }
    if meta.len() > MAX_FILE_BYTES {
        return ToolOutput::error(format!(
            "`{shown}` is too large to read ({} bytes); use grep, or exec with head/sed",
            meta.len()
        ));
    }
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => return ToolOutput::error(format!("cannot read `{shown}`: {e}")),
    };
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return ToolOutput::error(format!(
            "`{shown}` looks like a binary file ({} bytes); not shown",
            bytes.len()
        ));
    }
    if args.limit == Some(0) {
        return ToolOutput::error("limit must be at least 1");
    }
    let text = String::from_utf8_lossy(&bytes);
    if text.is_empty() {
        return ToolOutput::ok(format!("[`{shown}` is empty]"));
    }
    let lines: Vec<&str> = text
        .strip_suffix('\n')
        .unwrap_or(&text)
        .split('\n')
        .collect();
    let total = lines.len() as u64;
    // Models often count from 0; treat 0 as the first line.
    let first = args.offset.unwrap_or(1).max(1);
    if first > total {
        return ToolOutput::error(format!(
            "offset {first} is past the end of `{shown}` ({total} lines)"
        ));
    }
    let limit = args.limit.unwrap_or(DEFAULT_LIMIT);
    let last = first.saturating_add(limit - 1).min(total);
    let mut out = String::new();
    for (i, line) in lines[(first - 1) as usize..last as usize]
        .iter()
        .enumerate()
    {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let number = first + i as u64;
        match line.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => out.push_str(&format!(
                "{number:>6}\t{}… [line cut at {MAX_LINE_CHARS} characters]\n",
                &line[..cut]
            )),
            None => out.push_str(&format!("{number:>6}\t{line}\n")),
        }
    }
    if first > 1 || last < total {
        out.push_str(&format!("[lines {first}-{last} of {total}"));
        if last < total {
            out.push_str(&format!("; continue with offset {}", last + 1));
        }
        out.push_str("]\n");
    }
    ToolOutput::ok(out)
}

/// The first `limit` lines of the file at `path` as `read` shows them (or why they cannot be
/// shown): what a refused `write` quotes, so the refusal itself is the read it asks for.
pub(crate) fn show(ws: &Workspace, path: &str, limit: u64) -> ToolOutput {
    run(
        ws,
        ReadArgs {
            path: path.to_string(),
            offset: None,
            limit: Some(limit.max(1)),
        },
        super::hints::Sight {
            contents: true,
            names: false,
        },
    )
}

#[cfg(test)]
mod tests {
    use crate::tools::testutil::Fixture;
    use serde_json::json;

    #[test]
    fn numbered_lines_with_offset_and_limit() {
        let fx = Fixture::new();
        fx.put("src/a.txt", "alpha\nbeta\r\ngamma\ndelta\n");
        let out = fx.run("read", json!({"path": "src/a.txt"}));
        assert!(!out.is_error);
        assert_eq!(
            out.text,
            "     1\talpha\n     2\tbeta\n     3\tgamma\n     4\tdelta\n"
        );
        let out = fx.run(
            "read",
            json!({"path": "src/a.txt", "offset": 2, "limit": 2}),
        );
        assert_eq!(
            out.text,
            "     2\tbeta\n     3\tgamma\n[lines 2-3 of 4; continue with offset 4]\n"
        );
        let out = fx.run(
            "read",
            json!({"path": "src/a.txt", "offset": 0, "limit": 1}),
        );
        assert!(out.text.starts_with("     1\talpha\n"));
        let out = fx.run("read", json!({"path": "src/a.txt", "offset": 9}));
        assert!(out.is_error && out.text.contains("past the end"));
        let out = fx.run("read", json!({"path": "src/a.txt", "limit": 0}));
        assert!(out.is_error);
    }

    #[test]
    fn missing_directory_binary_empty_and_escape() {
        let fx = Fixture::new();
        fx.put("empty.txt", "");
        std::fs::write(fx.root.join("bin.dat"), b"ab\0cd").unwrap();
        std::fs::write(fx.tmp.path().join("outside.txt"), "secret").unwrap();
        assert!(
            fx.run("read", json!({"path": "nope.txt"}))
                .text
                .contains("does not exist")
        );
        assert!(
            fx.run("read", json!({"path": "."}))
                .text
                .contains("directory")
        );
        assert!(
            fx.run("read", json!({"path": "bin.dat"}))
                .text
                .contains("binary")
        );
        assert!(
            fx.run("read", json!({"path": "empty.txt"}))
                .text
                .contains("empty")
        );
        let out = fx.run("read", json!({"path": "../outside.txt"}));
        assert!(out.is_error && !out.text.contains("secret"));
        std::os::unix::fs::symlink(fx.tmp.path().join("outside.txt"), fx.root.join("link"))
            .unwrap();
        let out = fx.run("read", json!({"path": "link"}));
        assert!(out.is_error && !out.text.contains("secret"), "{}", out.text);
    }

    #[test]
    fn long_lines_are_cut() {
        let fx = Fixture::new();
        fx.put("min.js", &"x".repeat(5000));
        let out = fx.run("read", json!({"path": "min.js"}));
        assert!(out.text.contains("line cut at 2000"));
        assert!(out.text.len() < 2100);
    }
}
