//! Results as the model reads them: one line per item, workspace-relative paths, 1-based lines
//! and character columns, sorted, at most [`MAX_ITEMS`] items with a note when cut (as `grep`
//! does).
//!
//! - diagnostics: `path:line:col severity message (source code)`
//! - definition, references: `path:line:col: the line's text` (a file outside the workspace —
//!   a library, say — is named by its absolute path and not read: `lsp` reads only what `read`
//!   may)
//! - documentSymbols: `line:col kind name`, indented two spaces per nesting level
//! - workspaceSymbols: `path:line:col kind name`
//! - hover: the server's text

use std::collections::HashMap;
use std::path::Path;

use lsp_types::{
    Diagnostic, DiagnosticSeverity, DocumentSymbol, Hover, HoverContents, MarkedString,
    SymbolInformation, SymbolKind,
};

use super::uri;
use super::uri::Encoding;

/// The most items one result lists.
pub const MAX_ITEMS: usize = 500;
/// Characters of a quoted source line.
const LINE_CHARS: usize = 200;
/// Files larger than this are not read to convert a result's column or quote its line.
const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// Resolves result URIs to what the model reads: the path as shown, and the file's text when it
/// is inside the workspace (to convert columns and quote lines).
pub struct Files<'a> {
    root: &'a Path,
    encoding: Encoding,
    /// Texts already known (the documents the server has open: what it answered about).
    known: &'a dyn Fn(&Path) -> Option<String>,
    cache: HashMap<String, (String, Option<String>)>,
}

/// A position in a file, as shown.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place {
    pub shown: String,
    /// 1-based.
    pub line: u32,
    /// 1-based, in characters (in the server's units for a file that was not read).
    pub col: usize,
    /// The line's text (trimmed, cut), for a file inside the workspace.
    pub text: Option<String>,
}

impl<'a> Files<'a> {
    pub fn new(
        root: &'a Path,
        encoding: Encoding,
        known: &'a dyn Fn(&Path) -> Option<String>,
    ) -> Files<'a> {
        Files {
            root,
            encoding,
            known,
            cache: HashMap::new(),
        }
    }

    /// `(shown path, text if inside the workspace)` of `uri`.
    fn file(&mut self, uri_text: &str) -> (String, Option<String>) {
        if let Some(hit) = self.cache.get(uri_text) {
            return hit.clone();
        }
        let entry = match uri::to_path(uri_text) {
            None => (uri_text.to_string(), None),
            Some(path) => match inside(self.root, &path) {
                Some(rel) => {
                    let text = (self.known)(&path).or_else(|| read_small(&path));
                    (rel, text)
                }
                None => (format!("{} (outside the workspace)", path.display()), None),
            },
        };
        self.cache.insert(uri_text.to_string(), entry.clone());
        entry
    }

    /// The place of a server position (0-based line, `character` in the server's units).
    pub fn place(&mut self, uri_text: &str, pos: lsp_types::Position) -> Place {
        let (shown, text) = self.file(uri_text);
        let (col, line_text) = match &text {
            Some(t) => {
                let line = uri::line_of(t, pos.line);
                (
                    uri::from_server(line, pos.character, self.encoding) + 1,
                    Some(cut(line.trim())),
                )
            }
            None => (pos.character as usize + 1, None),
        };
        Place {
            shown,
            line: pos.line + 1,
            col,
            text: line_text,
        }
    }
}

/// `path` relative to `root` (as `/`-separated text), if it is inside; a path the server
/// spelled through a symlink is compared canonically.
fn inside(root: &Path, path: &Path) -> Option<String> {
    let rel = |p: &Path| -> Option<String> {
        let rel = p.strip_prefix(root).ok()?;
        Some(if rel.as_os_str().is_empty() {
            ".".to_string()
        } else {
            rel.to_string_lossy().into_owned()
        })
    };
    rel(path).or_else(|| rel(&path.canonicalize().ok()?))
}

fn read_small(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    std::fs::read(path)
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned())
}

fn cut(line: &str) -> String {
    if line.chars().count() <= LINE_CHARS {
        return line.to_string();
    }
    let mut out: String = line.chars().take(LINE_CHARS).collect();
    out.push('…');
    out
}

/// One line of text for a message that may hold line breaks.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `lines`, at most [`MAX_ITEMS`], with a note naming how many were left out.
fn capped(lines: Vec<String>, what: &str, narrow: &str) -> String {
    let total = lines.len();
    let mut out: Vec<String> = lines.into_iter().take(MAX_ITEMS).collect();
    if total > MAX_ITEMS {
        out.push(format!(
            "[truncated: showing the first {MAX_ITEMS} of {total} {what}; {narrow}]"
        ));
    }
    out.join("\n")
}

fn severity(s: Option<DiagnosticSeverity>) -> &'static str {
    match s {
        Some(DiagnosticSeverity::ERROR) => "error",
        Some(DiagnosticSeverity::WARNING) => "warning",
        Some(DiagnosticSeverity::INFORMATION) => "info",
        Some(DiagnosticSeverity::HINT) => "hint",
        _ => "error", // a missing severity is the client's to interpret: an error
    }
}

/// The diagnostics of `shown`, sorted by position, then severity.
pub fn diagnostics(shown: &str, text: &str, encoding: Encoding, items: &[Diagnostic]) -> String {
    if items.is_empty() {
        return format!("no diagnostics in {shown}");
    }
    let mut rows: Vec<(u32, usize, u8, String)> = items
        .iter()
        .map(|d| {
            let line = uri::line_of(text, d.range.start.line);
            let col = uri::from_server(line, d.range.start.character, encoding) + 1;
            let rank = d.severity.map_or(1, |s| match s {
                DiagnosticSeverity::ERROR => 1,
                DiagnosticSeverity::WARNING => 2,
                DiagnosticSeverity::INFORMATION => 3,
                _ => 4,
            });
            let origin = match (&d.source, &d.code) {
                (Some(s), Some(c)) => format!(" ({s} {})", code(c)),
                (Some(s), None) => format!(" ({s})"),
                (None, Some(c)) => format!(" ({})", code(c)),
                (None, None) => String::new(),
            };
            let row = format!(
                "{shown}:{}:{col} {} {}{origin}",
                d.range.start.line + 1,
                severity(d.severity),
                one_line(&d.message)
            );
            (d.range.start.line, col, rank, row)
        })
        .collect();
    rows.sort();
    rows.dedup_by(|a, b| a.3 == b.3);
    capped(
        rows.into_iter().map(|r| r.3).collect(),
        "diagnostics",
        "fix these first",
    )
}

fn code(c: &lsp_types::NumberOrString) -> String {
    match c {
        lsp_types::NumberOrString::Number(n) => n.to_string(),
        lsp_types::NumberOrString::String(s) => s.clone(),
    }
}

/// Locations (definition, references): `path:line:col: text`, sorted, unique.
pub fn places(mut places: Vec<Place>, none: &str) -> String {
    if places.is_empty() {
        return none.to_string();
    }
    places.sort();
    places.dedup();
    let lines = places
        .into_iter()
        .map(|p| match p.text {
            Some(t) => format!("{}:{}:{}: {t}", p.shown, p.line, p.col),
            None => format!("{}:{}:{}", p.shown, p.line, p.col),
        })
        .collect();
    capped(lines, "locations", "ask about a narrower symbol")
}

pub fn kind(k: SymbolKind) -> String {
    format!("{k:?}").to_ascii_lowercase()
}

/// A document's outline from a nested answer: `line:col kind name`, children indented.
pub fn nested_symbols(files: &mut Files, uri_text: &str, symbols: &[DocumentSymbol]) -> String {
    fn walk(
        files: &mut Files,
        uri_text: &str,
        symbols: &[DocumentSymbol],
        depth: usize,
        out: &mut Vec<String>,
    ) {
        let mut sorted: Vec<&DocumentSymbol> = symbols.iter().collect();
        sorted.sort_by_key(|s| {
            (
                s.selection_range.start.line,
                s.selection_range.start.character,
            )
        });
        for s in sorted {
            let p = files.place(uri_text, s.selection_range.start);
            let detail = s
                .detail
                .as_deref()
                .filter(|d| !d.is_empty())
                .map(|d| format!(" {}", one_line(d)))
                .unwrap_or_default();
            out.push(format!(
                "{}{}:{} {} {}{detail}",
                "  ".repeat(depth),
                p.line,
                p.col,
                kind(s.kind),
                s.name
            ));
            if let Some(children) = &s.children {
                walk(files, uri_text, children, depth + 1, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(files, uri_text, symbols, 0, &mut out);
    if out.is_empty() {
        return "no symbols".to_string();
    }
    capped(out, "symbols", "read the file for the rest")
}

/// Flat symbols: `path:line:col kind name (in container)` (with `with_path`), else without the
/// path.
pub fn flat_symbols(files: &mut Files, symbols: &[SymbolInformation], with_path: bool) -> String {
    let mut rows: Vec<(Place, String)> = symbols
        .iter()
        .map(|s| {
            let p = files.place(s.location.uri.as_str(), s.location.range.start);
            let container = s
                .container_name
                .as_deref()
                .filter(|c| !c.is_empty())
                .map(|c| format!(" (in {c})"))
                .unwrap_or_default();
            let row = if with_path {
                format!(
                    "{}:{}:{} {} {}{container}",
                    p.shown,
                    p.line,
                    p.col,
                    kind(s.kind),
                    s.name
                )
            } else {
                format!(
                    "{}:{} {} {}{container}",
                    p.line,
                    p.col,
                    kind(s.kind),
                    s.name
                )
            };
            (p, row)
        })
        .collect();
    rows.sort();
    rows.dedup_by(|a, b| a.1 == b.1);
    if rows.is_empty() {
        return "no symbols".to_string();
    }
    capped(
        rows.into_iter().map(|r| r.1).collect(),
        "symbols",
        "give a longer query",
    )
}

/// Hover contents as text.
pub fn hover(h: &Hover) -> String {
    let marked = |m: &MarkedString| match m {
        MarkedString::String(s) => s.clone(),
        MarkedString::LanguageString(l) => format!("```{}\n{}\n```", l.language, l.value),
    };
    let text = match &h.contents {
        HoverContents::Scalar(m) => marked(m),
        HoverContents::Array(items) => items.iter().map(marked).collect::<Vec<_>>().join("\n\n"),
        HoverContents::Markup(m) => m.value.clone(),
    };
    text.trim().to_string()
}

#[cfg(test)]
mod tests {
    use lsp_types::{Position, Range};

    use super::*;

    fn diag(line: u32, ch: u32, sev: DiagnosticSeverity, msg: &str) -> Diagnostic {
        Diagnostic {
            range: Range::new(Position::new(line, ch), Position::new(line, ch + 1)),
            severity: Some(sev),
            source: Some("pyflakes".into()),
            message: msg.into(),
            ..Default::default()
        }
    }

    #[test]
    fn diagnostics_are_sorted_one_per_line_and_capped() {
        let text = "import os\nprint(é_undefined)\n";
        let out = diagnostics(
            "a.py",
            text,
            Encoding::Utf16,
            &[
                diag(
                    1,
                    6,
                    DiagnosticSeverity::ERROR,
                    "undefined name\n'é_undefined'",
                ),
                diag(
                    0,
                    0,
                    DiagnosticSeverity::WARNING,
                    "'os' imported but unused",
                ),
            ],
        );
        assert_eq!(
            out,
            "a.py:1:1 warning 'os' imported but unused (pyflakes)\n\
             a.py:2:7 error undefined name 'é_undefined' (pyflakes)"
        );
        assert_eq!(
            diagnostics("a.py", "", Encoding::Utf16, &[]),
            "no diagnostics in a.py"
        );
        let many: Vec<Diagnostic> = (0..600)
            .map(|i| diag(i, 0, DiagnosticSeverity::ERROR, "x"))
            .collect();
        let out = diagnostics("a.py", "", Encoding::Utf16, &many);
        assert_eq!(out.lines().count(), MAX_ITEMS + 1);
        assert!(
            out.ends_with("[truncated: showing the first 500 of 600 diagnostics; fix these first]")
        );
    }

    #[test]
    fn places_name_workspace_files_relative_and_others_absolute() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        std::fs::write(root.join("lib.py"), "def greet():\n    pass\n").unwrap();
        let none = |_: &Path| None;
        let mut files = Files::new(&root, Encoding::Utf16, &none);
        let inside = files.place(&uri::from_path(&root.join("lib.py")), Position::new(0, 4));
        assert_eq!(inside.shown, "lib.py");
        assert_eq!((inside.line, inside.col), (1, 5));
        assert_eq!(inside.text.as_deref(), Some("def greet():"));
        let outside = files.place("file:///usr/lib/python3/os.py", Position::new(9, 2));
        assert_eq!(
            outside.shown,
            "/usr/lib/python3/os.py (outside the workspace)"
        );
        assert_eq!(outside.text, None);
        let out = places(vec![outside, inside.clone(), inside], "none");
        assert_eq!(
            out,
            "/usr/lib/python3/os.py (outside the workspace):10:3\nlib.py:1:5: def greet():"
        );
        assert_eq!(kind(SymbolKind::FUNCTION), "function");
    }
}
