//! Read-only detection of an addon (docs/dwp-spec.md, "Detection and interface").
//!
//! A detect command runs without a shell (argv split on spaces — the descriptor rule leaves no
//! quoting to interpret), resolved on PATH (a relative PATH entry is refused, so a checkout can
//! never plant a binary that runs), with stdin closed, in its own process group so that a timeout
//! kills everything it started, with output captured and capped. Nothing it prints is executed.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use regex::Regex;
use serde_json::Value;

use super::validate::{Descriptor, DetectSpec, InterfaceFrom};

/// Default detect-command timeout (the specification's 10 seconds).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Test hook: `DWP_DETECT_TIMEOUT_MS` shortens the timeout so tests need not wait 10 seconds.
pub const TIMEOUT_ENV: &str = "DWP_DETECT_TIMEOUT_MS";
/// At most this much of a detect command's stdout is kept; the rest is read and dropped so a
/// chatty command cannot block on a full pipe or exhaust memory.
pub const MAX_OUTPUT: usize = 1 << 20;

/// The detect-command timeout: `DWP_DETECT_TIMEOUT_MS` when set to a positive integer (tests),
/// else 10 seconds.
pub fn detect_timeout() -> Duration {
    std::env::var(TIMEOUT_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_TIMEOUT)
}

/// What detection looks at: the repository root (or the cwd), the home directory and PATH.
#[derive(Debug, Clone)]
pub struct DetectEnv {
    pub root: PathBuf,
    pub home: Option<PathBuf>,
    pub path_var: OsString,
    pub timeout: Duration,
}

impl DetectEnv {
    /// The environment of this process, for a repository root (`None`: the current directory).
    pub fn current(root: Option<&Path>) -> DetectEnv {
        DetectEnv {
            root: root
                .map(Path::to_path_buf)
                .or_else(|| std::env::current_dir().ok())
                .unwrap_or_else(|| PathBuf::from(".")),
            home: crate::dwp::repo::home_dir(),
            path_var: std::env::var_os("PATH").unwrap_or_default(),
            timeout: detect_timeout(),
        }
    }
}

/// The outcome of detecting one addon.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Detection {
    pub detected: bool,
    /// Detected through a command on PATH or a `~/` path (a machine-level install), rather than
    /// a repository-relative path. Back-fill never records machine-level installs.
    pub machine_level: bool,
    /// Only `legacy_paths` matched: installed without its interface surface.
    pub legacy_only: bool,
    /// The observed version (`vX.Y.Z`), informative only.
    pub version: Option<String>,
    /// The interface major read, when the descriptor pins one and it could be read.
    pub interface: Option<i64>,
    pub compatible: bool,
    /// Why it is not detected or not compatible.
    pub reason: Option<String>,
}

/// Detects one addon described by a valid descriptor.
pub fn detect(desc: &Descriptor, env: &DetectEnv) -> Detection {
    let mut d = Detection::default();
    let mut stdout = String::new();
    match &desc.detect {
        DetectSpec::Command(line) => {
            d.machine_level = true;
            match run_command(line, env) {
                Ok(out) => {
                    d.detected = true;
                    stdout = out;
                    d.version = find_version(&stdout);
                }
                Err(failure) => d.reason = Some(failure.to_string()),
            }
        }
        DetectSpec::Paths { paths, legacy } => {
            let found = paths
                .iter()
                .find(|p| resolve(p, env).is_some_and(|f| f.is_file()));
            match found {
                Some(p) => {
                    d.detected = true;
                    d.machine_level = p.starts_with("~/");
                    d.version = skill_version(paths, env);
                }
                None => match legacy
                    .iter()
                    .find(|p| resolve(p, env).is_some_and(|f| f.is_file()))
                {
                    Some(p) => {
                        d.detected = true;
                        d.legacy_only = true;
                        d.machine_level = p.starts_with("~/");
                        d.reason = Some(format!(
                            "installed without its interface surface (found {p}; none of {} present)",
                            paths.join(", ")
                        ));
                        return d;
                    }
                    None => {
                        d.reason = Some(format!("none of {} present", paths.join(", ")));
                    }
                },
            }
        }
    }
    if !d.detected {
        return d;
    }
    let Some(pin) = desc.interface_pin else {
        d.compatible = true;
        return d;
    };
    let found = desc
        .interface_from
        .as_ref()
        .and_then(|from| read_interface(from, &stdout, env));
    match found {
        None => d.reason = Some("interface unreadable; treated as not available".into()),
        Some(major) if major != pin => {
            d.interface = Some(major);
            d.reason = Some(format!(
                "unknown interface major {major} (pinned {pin}); treated as not available"
            ));
        }
        Some(major) => {
            d.interface = Some(major);
            d.compatible = true;
        }
    }
    d
}

/// A descriptor path on disk: `~/…` under the home directory, anything else under the root.
fn resolve(path: &str, env: &DetectEnv) -> Option<PathBuf> {
    match path.strip_prefix("~/") {
        Some(rest) => env.home.as_ref().map(|h| h.join(rest)),
        None => Some(env.root.join(path)),
    }
}

/// Why a detect command gave no answer. Not an error of `dwp`: its `Display` becomes the
/// detection's `reason` (the addon is reported as not detected), in the reference's words.
#[derive(Debug)]
enum DetectFailure {
    /// The command line holds no word.
    Empty,
    /// `argv0` names a path (`sub/tool`) rather than a command looked up on PATH.
    PathArgv0(String),
    /// `argv0` was found only through a relative PATH entry (`.`, `bin`, the empty entry).
    RelativePathEntry(String),
    /// `argv0` (or the resolved file, gone before it started) is not there.
    NotInstalled(String),
    Start(std::io::Error),
    TimedOut(Duration),
    Exited(i32),
    Signalled,
    Wait(std::io::Error),
    NoStatus,
}

impl std::fmt::Display for DetectFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DetectFailure::Empty => f.write_str("detect command unparsable (empty)"),
            DetectFailure::PathArgv0(argv0) => {
                write!(
                    f,
                    "{argv0} is a relative path, not a command on PATH; refused"
                )
            }
            DetectFailure::RelativePathEntry(argv0) => {
                write!(f, "{argv0} resolved through a relative PATH entry; refused")
            }
            DetectFailure::NotInstalled(what) => write!(f, "{what} not installed"),
            DetectFailure::Start(e) => write!(f, "detect failed to start ({e})"),
            DetectFailure::TimedOut(after) => write!(f, "detect timed out after {}", human(*after)),
            DetectFailure::Exited(code) => write!(f, "detect exited {code}"),
            DetectFailure::Signalled => f.write_str("detect was killed by a signal"),
            DetectFailure::Wait(e) => write!(f, "detect failed ({e})"),
            DetectFailure::NoStatus => f.write_str("detect failed (no exit status)"),
        }
    }
}

/// Resolves `argv0` on PATH: the first entry holding an executable regular file. A hit in a
/// relative entry (`.`, `bin`, or the empty entry, which means the current directory) is refused.
fn which(argv0: &str, path_var: &OsString) -> Result<PathBuf, DetectFailure> {
    if argv0.contains('/') {
        return Err(DetectFailure::PathArgv0(argv0.to_string()));
    }
    for entry in std::env::split_paths(path_var) {
        let candidate = entry.join(argv0);
        let executable = std::fs::metadata(&candidate)
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if executable {
            if entry.is_relative() || entry.as_os_str().is_empty() {
                return Err(DetectFailure::RelativePathEntry(argv0.to_string()));
            }
            return Ok(candidate);
        }
    }
    Err(DetectFailure::NotInstalled(argv0.to_string()))
}

enum Event {
    Stdout(Vec<u8>),
    Exit(std::io::Result<std::process::ExitStatus>),
}

/// Runs a detect command line and returns its stdout when it exits 0, else the reason.
#[allow(unsafe_code)]
// kill(2) of a timed-out detect command's process group
// Allowed: the operator's addon detection commands (`dwp abilities`), not the agent's: run unfenced as the operator's shell would.
#[allow(clippy::disallowed_methods)]
fn run_command(line: &str, env: &DetectEnv) -> Result<String, DetectFailure> {
    let argv: Vec<&str> = line.split(' ').filter(|s| !s.is_empty()).collect();
    let Some((argv0, args)) = argv.split_first() else {
        return Err(DetectFailure::Empty);
    };
    let resolved = which(argv0, &env.path_var)?;
    let mut child = Command::new(&resolved)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                DetectFailure::NotInstalled(resolved.display().to_string())
            }
            _ => DetectFailure::Start(e),
        })?;
    let pid = child.id() as libc::pid_t;
    let (tx, rx) = mpsc::channel();
    if let Some(mut out) = child.stdout.take() {
        let tx = tx.clone();
        std::thread::spawn(move || {
            let _ = tx.send(Event::Stdout(read_capped(&mut out)));
        });
    }
    if let Some(mut err) = child.stderr.take() {
        std::thread::spawn(move || {
            let _ = read_capped(&mut err);
        });
    }
    std::thread::spawn(move || {
        let _ = tx.send(Event::Exit(child.wait()));
    });
    let deadline = Instant::now() + env.timeout;
    let (mut stdout, mut status) = (None, None);
    while stdout.is_none() || status.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Event::Stdout(bytes)) => stdout = Some(bytes),
            Ok(Event::Exit(s)) => status = Some(s),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // SAFETY: kill(2) on our own child's process group; no memory is involved.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                }
                return Err(DetectFailure::TimedOut(env.timeout));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    match status {
        Some(Ok(s)) if s.success() => {
            Ok(String::from_utf8_lossy(&stdout.unwrap_or_default()).into_owned())
        }
        Some(Ok(s)) => Err(match s.code() {
            Some(code) => DetectFailure::Exited(code),
            None => DetectFailure::Signalled,
        }),
        Some(Err(e)) => Err(DetectFailure::Wait(e)),
        None => Err(DetectFailure::NoStatus),
    }
}

fn read_capped(reader: &mut impl Read) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The first version-like token: `v` + `X.Y.Z[-pre]`.
fn find_version(text: &str) -> Option<String> {
    let re =
        Regex::new(r"\bv?([0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.]+)?)\b").expect("static regex");
    re.captures(text).map(|c| format!("v{}", &c[1]))
}

/// The `version:` frontmatter value of the first existing `*SKILL.md` path (first 4096 chars).
fn skill_version(paths: &[String], env: &DetectEnv) -> Option<String> {
    let file = paths
        .iter()
        .filter(|p| p.ends_with("SKILL.md"))
        .filter_map(|p| resolve(p, env))
        .find(|f| f.is_file())?;
    let text = std::fs::read(&file).ok()?;
    let text = String::from_utf8_lossy(&text);
    let head: String = text.chars().take(4096).collect();
    let mut lines = head.lines();
    if lines.next()?.trim() != "---" {
        return None;
    }
    lines
        .take_while(|l| l.trim() != "---")
        .find_map(|l| l.strip_prefix("version:"))
        .and_then(|v| find_version(v.trim().trim_matches(['"', '\''])))
}

/// Reads the interface major; `None` when it cannot be read.
fn read_interface(from: &InterfaceFrom, stdout: &str, env: &DetectEnv) -> Option<i64> {
    match from {
        InterfaceFrom::Json(field) => {
            let v: Value = serde_json::from_str(stdout.trim()).ok()?;
            to_major(v.as_object()?.get(field)?)
        }
        InterfaceFrom::Regex(pattern) => {
            let re = Regex::new(pattern).ok()?;
            let caps = re.captures(stdout)?;
            to_major(&Value::String(caps.get(1)?.as_str().to_string()))
        }
        InterfaceFrom::FileJson { path, field } => {
            let file = resolve(path, env)?;
            let bytes = std::fs::read(file).ok()?;
            let v: Value = serde_json::from_slice(&bytes).ok()?;
            to_major(v.as_object()?.get(field)?)
        }
    }
}

/// Python's `int()` on a JSON value, booleans refused: `"1"` → 1, `1.9` → 1.
fn to_major(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && f.abs() < 9.0e18)
                .map(|f| f.trunc() as i64)
        }),
        Value::String(s) => s.trim().replace('_', "").parse::<i64>().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn majors_convert_like_python_int() {
        assert_eq!(to_major(&json!(1)), Some(1));
        assert_eq!(to_major(&json!("2")), Some(2));
        assert_eq!(to_major(&json!(1.9)), Some(1));
        assert_eq!(to_major(&json!(true)), None);
        assert_eq!(to_major(&json!("x")), None);
        assert_eq!(to_major(&json!(null)), None);
    }

    #[test]
    fn versions_are_found() {
        assert_eq!(
            find_version("ak 0.1.1 (protocol 1)").as_deref(),
            Some("v0.1.1")
        );
        assert_eq!(
            find_version("v2.0.0-beta.1\n").as_deref(),
            Some("v2.0.0-beta.1")
        );
        assert_eq!(find_version("no version"), None);
    }

    #[test]
    fn relative_path_entries_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("tool");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let abs = OsString::from(dir.path());
        assert_eq!(which("tool", &abs).unwrap(), bin);
        assert!(
            which("missing-tool", &abs)
                .unwrap_err()
                .to_string()
                .ends_with("not installed")
        );
        assert!(
            which("sub/tool", &abs)
                .unwrap_err()
                .to_string()
                .contains("refused")
        );
        let cwd = std::env::current_dir().unwrap();
        let rel = pathdiff(dir.path(), &cwd);
        let err = which("tool", &OsString::from(rel)).unwrap_err().to_string();
        assert!(err.contains("relative PATH entry"), "{err}");
    }

    fn pathdiff(target: &Path, from: &Path) -> PathBuf {
        let up: PathBuf = from.components().skip(1).map(|_| "..").collect();
        up.join(target.strip_prefix("/").unwrap())
    }
}
