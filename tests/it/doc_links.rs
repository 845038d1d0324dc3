//! The docs hold together: every relative link in README.md and docs/**/*.md reaches a file
//! (and its `#anchor` a heading of that file, slugged as GitHub and mdBook slug them), and every
//! `docs/…` path a comment in src/ or tests/ cites exists. Web links are not followed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every markdown file under docs/.
fn markdown_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut dirs = vec![root().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The lines of `text` outside fenced code blocks, with inline code spans blanked out.
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            (None, None) => out.push((i + 1, blank_code_spans(line))),
            _ => {}
        }
    }
    out
}

fn blank_code_spans(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else {
            out.push(if in_code { ' ' } else { c });
        }
    }
    out
}

/// The targets of inline links `[text](target)` and reference definitions `[x]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        targets.push(target.trim_matches(['<', '>']).to_string());
        rest = &after[end..];
    }
    let trimmed = line.trim_start();
    if trimmed.starts_with('[')
        && let Some(pos) = trimmed.find("]: ")
    {
        targets.push(trimmed[pos + 3..].trim().to_string());
    }
    targets
}

/// A heading's anchor as GitHub and mdBook make it: lowercase, letters, digits, `-` and `_`
/// kept, spaces turned into `-`, everything else dropped (after links and emphasis are reduced
/// to their text).
pub fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[text](url)` → `text`
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(close), Some(end)) if close < end => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every anchor a markdown file offers: its headings' slugs (a repeated one also as `slug-1`,
/// `slug-2`, …) and explicit `<a id="…">`/`<a name="…">` anchors.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(m) = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m)) {
            fence = match fence {
                None => Some(m),
                Some(open) if open == m => None,
                keep => keep,
            };
            continue;
        }
        if fence.is_some() {
            continue;
        }
        if let Some(heading) = line.strip_prefix('#') {
            let heading = heading.trim_start_matches('#');
            if heading.starts_with(' ') {
                let base = slug(heading);
                let mut candidate = base.clone();
                let mut n = 0;
                while seen.contains(&candidate) {
                    n += 1;
                    candidate = format!("{base}-{n}");
                }
                seen.insert(candidate);
            }
        }
        for attr in ["<a id=\"", "<a name=\""] {
            let mut rest = line;
            while let Some(at) = rest.find(attr) {
                let after = &rest[at + attr.len()..];
                let end = after.find('"').unwrap_or(after.len());
                seen.insert(after[..end].to_string());
                rest = &after[end..];
            }
        }
    }
    seen
}

fn is_external(target: &str) -> bool {
    target.is_empty()
        || target.contains("://")
        || target.starts_with("mailto:")
        || target.starts_with("//")
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(root()).unwrap().display().to_string();
        for (line_no, line) in prose_lines(&text) {
            for target in link_targets(&line) {
                if is_external(&target) {
                    continue;
                }
                let (path, fragment) = match target.split_once('#') {
                    Some((p, f)) => (p, Some(f)),
                    None => (target.as_str(), None),
                };
                let resolved = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                if !resolved.exists() {
                    broken.push(format!("{shown}:{line_no}: {target}: no such file"));
                    continue;
                }
                let Some(fragment) = fragment else { continue };
                if resolved.extension().is_none_or(|e| e != "md") {
                    continue; // an anchor into source code is a line number GitHub resolves
                }
                let offered = anchors(&std::fs::read_to_string(&resolved).unwrap());
                if !offered.contains(fragment) {
                    broken.push(format!(
                        "{shown}:{line_no}: {target}: no heading with the anchor #{fragment}"
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The docs paths (and README sections) cited in src/, and in comments of tests/ and benches/.
#[test]
fn every_docs_path_a_comment_cites_exists() {
    let mut missing = Vec::new();
    let readme_headings = anchors(&std::fs::read_to_string(root().join("README.md")).unwrap());
    let mut dirs = vec![
        root().join("src"),
        root().join("tests"),
        root().join("benches"),
    ];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with("snapshots") && !path.ends_with("node_modules") {
                    dirs.push(path);
                }
                continue;
            }
            if !path
                .extension()
                .is_some_and(|e| e == "rs" || e == "py" || e == "sh")
            {
                continue;
            }
            // In the library every line counts (its hints name docs pages); in tests and
            // benches only the comment part: a fixture that writes a markdown file under docs/ in a test
            // repository cites nothing.
            let library = path.starts_with(root().join("src"));
            let marker = if path.extension().is_some_and(|e| e == "rs") {
                "//"
            } else {
                "#"
            };
            let text = std::fs::read_to_string(&path).unwrap();
            for (line_no, line) in text.lines().enumerate() {
                let at = if library { Some(0) } else { line.find(marker) };
                let Some(at) = at else { continue };
                let cited = &line[at..];
                if let Some(section) = cited_readme_section(cited)
                    && !readme_headings.contains(&slug(&section))
                {
                    missing.push(format!(
                        "{}:{}: README \"{section}\" (no such README section; cite a docs/ page)",
                        path.strip_prefix(root()).unwrap().display(),
                        line_no + 1
                    ));
                }
                for cited in cited_docs_paths(cited) {
                    if !root().join(&cited).exists() {
                        missing.push(format!(
                            "{}:{}: {cited}",
                            path.strip_prefix(root()).unwrap().display(),
                            line_no + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "cited docs files that do not exist:\n{}",
        missing.join("\n")
    );
}

/// The section a README citation in `line` names (README, then the quoted section), if any.
fn cited_readme_section(line: &str) -> Option<String> {
    let at = line
        .find("README \"")
        .or_else(|| line.find("README \\\""))?;
    let after = line[at + 6..].trim_start().trim_start_matches(['"', '\\']);
    let end = after.find(['"', '\\'])?;
    Some(after[..end].to_string())
}

/// Every markdown path under docs/ in `line` that is not part of a longer path or URL.
fn cited_docs_paths(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let mut from = 0;
    while let Some(at) = line[from..].find("docs/") {
        let start = from + at;
        from = start + 5;
        let before = start.checked_sub(1).map(|i| bytes[i]);
        if before.is_some_and(|b| b.is_ascii_alphanumeric() || b"/._-".contains(&b)) {
            continue; // part of another path (`target/docs/`, `rust-docs/`) or a URL
        }
        let end = line[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || "/._-".contains(c)))
            .map_or(line.len(), |e| start + e);
        let cited = line[start..end].trim_end_matches(['.', '/']);
        if cited.ends_with(".md") {
            out.push(cited.to_string());
        }
    }
    out
}

#[test]
fn slugs_follow_github_and_mdbook() {
    assert_eq!(slug(" Set up"), "set-up");
    assert_eq!(slug(" The `exec` fence"), "the-exec-fence");
    assert_eq!(slug(" Language servers (`lsp`)"), "language-servers-lsp");
    assert_eq!(slug(" dwp: the addon registry"), "dwp-the-addon-registry");
    assert_eq!(
        slug(" OAuth (Streamable HTTP servers)"),
        "oauth-streamable-http-servers"
    );
    assert_eq!(slug(" See [docs](x.md) now"), "see-docs-now");
    assert_eq!(
        cited_docs_paths("// see docs/fence.md, and https://x/docs/a.md"),
        ["docs/fence.md"]
    );
}
