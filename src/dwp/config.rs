//! `dwp-config/v1`: the one reader and the one writer of `.dwp/config.json` and
//! `~/.dwp/config.json` (docs/dwp-spec.md, "Configuration and the addon registry").
//!
//! The reader is fail-closed and never aborts: a file that cannot be read, or a value that is
//! malformed, contributes nothing and yields exactly one warning naming the file, the key and the
//! reason. Warnings are returned as values; the CLI prints each once as `WARNING: …`.
//!
//! The writer reconciles one key of the repository file atomically and keeps every other key. It
//! refuses (file left byte-for-byte unchanged) to write through a symlink, to overwrite a file it
//! cannot parse, or to replace an `addons`/`host` value that is not an object. The refusals exit 2,
//! the exit code other DWP tooling uses for a refused config write (docs/dwp-spec.md, "Config commands").

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use regex::Regex;
use serde_json::{Map, Value, json};

use super::pyfmt::py_repr;
use crate::error::{Error, Result};

/// The registry keys: the addon directories `dwp` ships, sorted by code point (`addons::KEYS`).
/// They live here, with the other closed vocabularies of a config file, because the reader
/// refuses any other key in a file's `addons`, and `addons` itself reads this module (its
/// descriptors name [`ABILITIES`] and versions): defined in `addons`, the two modules would
/// import each other. `addons` checks that its shipped descriptors are exactly these.
pub const ADDON_KEYS: [&str; 8] = [
    "agentkit",
    "ai-diff-reviewer",
    "dailybot",
    "dependency-upgrade",
    "design-system",
    "devcontainer",
    "herdr",
    "vim",
];

/// The closed set of host abilities, in canonical order. It lives with the registry reader
/// because the `host` records name them; the addon descriptors, `dwp abilities` and the resource
/// frame use the same set.
pub const ABILITIES: [&str; 8] = [
    "stop_agent",
    "meter_spend",
    "meter_tokens",
    "meter_wall_clock",
    "cancel_children",
    "model_routing",
    "subagents",
    "telemetry",
];

/// The optional `schema` value of a config file; onboarding writes it into a new file.
pub const SCHEMA_URL: &str = "https://deepworkplan.com/schema/dwp-config/v1.json";
/// How messages and sources name the repository file.
pub const REPO_LABEL: &str = ".dwp/config.json";
/// How messages and sources name the user's file.
pub const USER_LABEL: &str = "~/.dwp/config.json";
/// Mode of a config file the writer creates (it keeps the mode of an existing one).
pub const NEW_FILE_MODE: u32 = 0o644;
/// Mode of a `.dwp` directory the writer creates: it is committed, like any source directory.
pub const DWP_DIR_MODE: u32 = 0o755;

/// The repository file of `root`.
pub fn repo_file(root: &Path) -> PathBuf {
    root.join(".dwp").join("config.json")
}

/// The user's file under `home`.
pub fn user_file(home: &Path) -> PathBuf {
    home.join(".dwp").join("config.json")
}

/// One config file as read: its label, path, and its top-level object when it has one.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    pub label: &'static str,
    pub path: PathBuf,
    /// `None` when the file is absent, unreadable or not an object (it contributes nothing).
    pub doc: Option<Map<String, Value>>,
}

/// Both files, repository first, plus the file-level warnings produced while reading them.
#[derive(Debug, Clone)]
pub struct Config {
    pub files: Vec<ConfigFile>,
    pub warnings: Vec<String>,
}

/// The resolved registry entry of one addon key (`dwp config show`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddonView {
    pub enabled: bool,
    /// The label of the file that decided this key; `None` when no file names it.
    pub source: Option<&'static str>,
    pub version: Option<String>,
    pub note: Option<String>,
}

impl AddonView {
    pub fn to_json(&self) -> Value {
        let mut v =
            json!({"enabled": self.enabled, "source": self.source, "version": self.version});
        if let Some(note) = &self.note {
            v["note"] = json!(note);
        }
        v
    }
}

/// The resolved `benchmark` section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Benchmark {
    pub enabled: bool,
    pub learnings: bool,
}

/// One resolved host ability record: its value and the file that decided it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostRecord {
    pub value: bool,
    pub source: &'static str,
}

impl Config {
    /// Reads the repository file of `repo_root` (if any) and the user file under `home` (if any).
    /// Never fails: what cannot be read becomes one warning.
    pub fn load(repo_root: Option<&Path>, home: Option<&Path>) -> Config {
        let mut files = Vec::new();
        let mut warnings = Vec::new();
        let candidates = [
            repo_root.map(|r| (REPO_LABEL, repo_file(r))),
            home.map(|h| (USER_LABEL, user_file(h))),
        ];
        for (label, path) in candidates.into_iter().flatten() {
            let doc = match read_object(&path) {
                Ok(doc) => doc,
                Err(reason) => {
                    warnings.push(format!("config: {} {reason}", path.display()));
                    None
                }
            };
            files.push(ConfigFile { label, path, doc });
        }
        Config { files, warnings }
    }

    /// The files that parsed to an object, repository first.
    fn with_docs(&self) -> impl Iterator<Item = (&ConfigFile, &Map<String, Value>)> {
        self.files
            .iter()
            .filter_map(|f| f.doc.as_ref().map(|d| (f, d)))
    }

    /// `addons`, resolved per key: the first file (repository, then user) whose `addons` object
    /// names a key decides it, even when that entry is malformed.
    pub fn addons(&self, warnings: &mut Vec<String>) -> BTreeMap<String, AddonView> {
        let mut maps: Vec<(&'static str, &Map<String, Value>)> = Vec::new();
        for (file, doc) in self.with_docs() {
            match doc.get("addons") {
                None => {}
                Some(Value::Object(map)) => {
                    for k in map.keys().filter(|k| !ADDON_KEYS.contains(&k.as_str())) {
                        warnings.push(format!(
                            "addons: {} key {} is not an addon dwp ships; ignored",
                            file.label,
                            py_repr(k)
                        ));
                    }
                    maps.push((file.label, map));
                }
                Some(_) => warnings.push(format!(
                    "addons: {} \"addons\" is not an object; no addon enabled from this file",
                    file.label
                )),
            }
        }
        let mut out = BTreeMap::new();
        for key in ADDON_KEYS {
            let decided = maps
                .iter()
                .find_map(|(label, map)| map.get(key).map(|entry| (*label, entry)));
            let view = match decided {
                None => AddonView {
                    enabled: false,
                    source: None,
                    version: None,
                    note: None,
                },
                Some((label, entry)) => match entry_problem(entry) {
                    Some(problem) => {
                        warnings.push(format!(
                            "addons: {label} key {} {problem}; not enabled",
                            py_repr(key)
                        ));
                        AddonView {
                            enabled: false,
                            source: Some(label),
                            version: None,
                            note: None,
                        }
                    }
                    None => AddonView {
                        enabled: entry["enabled"] == Value::Bool(true),
                        source: Some(label),
                        version: entry.get("version").and_then(Value::as_str).map(Into::into),
                        note: entry.get("note").and_then(Value::as_str).map(Into::into),
                    },
                },
            };
            out.insert(key.to_string(), view);
        }
        out
    }

    /// The keys the registry enables, sorted.
    pub fn enabled(&self, warnings: &mut Vec<String>) -> Vec<String> {
        self.addons(warnings)
            .into_iter()
            .filter(|(_, v)| v.enabled)
            .map(|(k, _)| k)
            .collect()
    }

    /// `benchmark`, resolved as a whole: the first file that has the key decides both flags.
    pub fn benchmark(&self, warnings: &mut Vec<String>) -> Benchmark {
        let Some((file, value)) = self
            .with_docs()
            .find_map(|(f, d)| d.get("benchmark").map(|v| (f, v)))
        else {
            return Benchmark::default();
        };
        let Some(obj) = value.as_object() else {
            warnings.push(format!(
                "benchmark: {} \"benchmark\" is not an object; benchmark disabled",
                file.label
            ));
            return Benchmark::default();
        };
        let Some(enabled) = obj.get("enabled").and_then(Value::as_bool) else {
            warnings.push(format!(
                "benchmark: {} \"benchmark.enabled\" is not a boolean; benchmark disabled",
                file.label
            ));
            return Benchmark::default();
        };
        let learnings = match obj.get("learnings") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) if enabled => {
                warnings.push(format!(
                    "benchmark: {} \"benchmark.learnings\" is not a boolean; learnings disabled (metrics unaffected)",
                    file.label
                ));
                false
            }
            Some(_) => false,
        };
        Benchmark {
            enabled,
            learnings: enabled && learnings,
        }
    }

    /// `host`, resolved per ability: the repository file beats the user file (docs/dwp-spec.md,
    /// "Where dwp departs from the reference", item 1). An ability outside the closed set, or a non-boolean value, is dropped with a warning.
    pub fn host(&self, warnings: &mut Vec<String>) -> BTreeMap<String, HostRecord> {
        let mut out = BTreeMap::new();
        for (file, doc) in self.with_docs() {
            let Some(value) = doc.get("host") else {
                continue;
            };
            let Some(map) = value.as_object() else {
                warnings.push(format!(
                    "host: {} \"host\" is not an object; ignored",
                    file.label
                ));
                continue;
            };
            let mut names: Vec<&String> = map.keys().collect();
            names.sort();
            for name in names {
                if !ABILITIES.contains(&name.as_str()) {
                    warnings.push(format!(
                        "host: {} ability {} is not in the closed set ({}); ignored",
                        file.label,
                        py_repr(name),
                        ABILITIES.join(", ")
                    ));
                    continue;
                }
                let Some(b) = map[name].as_bool() else {
                    warnings.push(format!(
                        "host: {} ability {} is not a boolean; ignored",
                        file.label,
                        py_repr(name)
                    ));
                    continue;
                };
                out.entry(name.clone()).or_insert(HostRecord {
                    value: b,
                    source: file.label,
                });
            }
        }
        out
    }

    /// The document of `dwp config show`: `{"addons", "benchmark", "host"}`. Warnings come in
    /// the order benchmark, addons, host.
    pub fn show(&self, warnings: &mut Vec<String>) -> Value {
        let benchmark = self.benchmark(warnings);
        let addons: Map<String, Value> = self
            .addons(warnings)
            .into_iter()
            .map(|(k, v)| (k, v.to_json()))
            .collect();
        let host: Map<String, Value> = self
            .host(warnings)
            .into_iter()
            .map(|(k, r)| (k, json!({"source": r.source, "value": r.value})))
            .collect();
        json!({
            "addons": addons,
            "benchmark": {"enabled": benchmark.enabled, "learnings": benchmark.learnings},
            "host": host,
        })
    }
}

/// Reads one config file. `Ok(None)`: not a regular file (absent, a directory), which is silent.
/// `Err(reason)`: the file is there but contributes nothing; the reason ends the warning.
pub fn read_object(path: &Path) -> Result<Option<Map<String, Value>>, String> {
    match fs::metadata(path) {
        Ok(m) if m.is_file() => {}
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("unreadable ({e}); treating as absent")),
    }
    let bytes = fs::read(path).map_err(|e| format!("unreadable ({e}); treating as absent"))?;
    parse_object(&bytes).map(Some)
}

/// Parses config bytes into a top-level object, or says why not.
pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, String> {
    if bytes.starts_with(b"\xef\xbb\xbf") {
        return Err(
            "unreadable (starts with a UTF-8 byte-order mark); treating as absent".to_string(),
        );
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| format!("unreadable (not UTF-8: {e}); treating as absent"))?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("is not a JSON object; treating as absent".to_string()),
        Err(e) => Err(format!("unreadable ({e}); treating as absent")),
    }
}

fn version_re() -> Regex {
    Regex::new(r"^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$").expect("static regex")
}

/// Whether `v` is a tag like `v1.2.3` or `v1.2.3-beta.1`.
pub fn is_version(v: &str) -> bool {
    version_re().is_match(v)
}

/// Whether `note` is one line of 1–200 characters (code points).
pub fn is_note(note: &str) -> bool {
    let n = note.chars().count();
    (1..=200).contains(&n) && !note.contains(['\n', '\r'])
}

/// What is wrong with one registry entry, first problem only (docs/dwp-spec.md, "Reading a config file").
fn entry_problem(entry: &Value) -> Option<String> {
    let Some(obj) = entry.as_object() else {
        return Some("entry is not an object".into());
    };
    let mut unknown: Vec<&str> = obj
        .keys()
        .map(String::as_str)
        .filter(|k| !["enabled", "version", "note"].contains(k))
        .collect();
    if !unknown.is_empty() {
        unknown.sort();
        return Some(format!("carries unknown field(s) {}", unknown.join(", ")));
    }
    match obj.get("enabled") {
        None => return Some("\"enabled\" is missing".into()),
        Some(Value::Bool(_)) => {}
        Some(_) => return Some("\"enabled\" is not a boolean".into()),
    }
    if let Some(v) = obj.get("version")
        && !v.as_str().is_some_and(is_version)
    {
        return Some("\"version\" is not a tag like v1.2.3 or v1.2.3-beta.1".into());
    }
    if let Some(n) = obj.get("note")
        && !n.as_str().is_some_and(is_note)
    {
        return Some("\"note\" is not a one-line string of 1-200 characters".into());
    }
    None
}

// ---------------------------------------------------------------------------------------------
// The writer.

/// Records `addons.<key> = {enabled: true[, version][, note]}` in the repository file of `root`.
/// Returns the entry written and whether the file changed.
pub fn enable(
    root: &Path,
    key: &str,
    version: Option<&str>,
    note: Option<&str>,
) -> Result<(Value, bool)> {
    check_key(key)?;
    if let Some(v) = version
        && !is_version(v)
    {
        return Err(
            refusal(format!("version {} is not a tag like v1.2.3", py_repr(v)))
                .with_hint("use a tag such as v1.2.3 or v1.2.3-beta.1"),
        );
    }
    if let Some(n) = note
        && !is_note(n)
    {
        return Err(refusal("note must be one line of 1-200 characters"));
    }
    let mut entry = json!({"enabled": true});
    if let Some(v) = version {
        entry["version"] = json!(v);
    }
    if let Some(n) = note {
        entry["note"] = json!(n);
    }
    let changed = set_addon(root, key, entry.clone())?;
    Ok((entry, changed))
}

/// Records `addons.<key> = {"enabled": false}` (dropping any version and note).
pub fn disable(root: &Path, key: &str) -> Result<(Value, bool)> {
    check_key(key)?;
    let entry = json!({"enabled": false});
    let changed = set_addon(root, key, entry.clone())?;
    Ok((entry, changed))
}

/// Records `host.<ability> = value`. Returns the whole `host` record and whether the file changed.
pub fn set_host(root: &Path, ability: &str, value: bool) -> Result<(Value, bool)> {
    if !ABILITIES.contains(&ability) {
        return Err(refusal(format!(
            "{} is not a host ability ({})",
            py_repr(ability),
            ABILITIES.join(", ")
        )));
    }
    let path = repo_file(root);
    let mut host = Value::Null;
    let changed = update(root, |doc| {
        let slot = doc
            .entry("host")
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(map) = slot.as_object_mut() else {
            return Err(not_an_object(&path, "host"));
        };
        map.insert(ability.to_string(), Value::Bool(value));
        host = slot.clone();
        Ok(())
    })?;
    Ok((host, changed))
}

/// Creates the repository file with just the `schema` URL when there is none. Returns whether it
/// created the file. An existing file is left as it is (after the same safety checks).
pub fn ensure_file(root: &Path) -> Result<bool> {
    let existed = repo_file(root).symlink_metadata().is_ok();
    update(root, |doc| {
        if !existed {
            doc.insert("schema".into(), json!(SCHEMA_URL));
        }
        Ok(())
    })?;
    Ok(!existed)
}

/// The raw entry the repository file records for `key`, if it parses and names it.
pub fn repo_entry(root: &Path, key: &str) -> Option<Value> {
    read_object(&repo_file(root))
        .ok()
        .flatten()?
        .get("addons")?
        .as_object()?
        .get(key)
        .cloned()
}

fn set_addon(root: &Path, key: &str, entry: Value) -> Result<bool> {
    let path = repo_file(root);
    update(root, |doc| {
        let slot = doc
            .entry("addons")
            .or_insert_with(|| Value::Object(Map::new()));
        let Some(map) = slot.as_object_mut() else {
            return Err(not_an_object(&path, "addons"));
        };
        map.insert(key.to_string(), entry);
        Ok(())
    })
}

fn check_key(key: &str) -> Result<()> {
    if ADDON_KEYS.contains(&key) {
        Ok(())
    } else {
        Err(refusal(format!(
            "{} is not an addon dwp ships ({})",
            py_repr(key),
            ADDON_KEYS.join(", ")
        ))
        .with_hint("run `dwp config keys` to list them"))
    }
}

/// A refused write: exit 2 as in the other DWP tooling; the file is untouched.
fn refusal(message: impl Into<String>) -> Error {
    Error::usage(message)
}

fn not_an_object(path: &Path, key: &str) -> Error {
    refusal(format!(
        "{} \"{key}\" is not an object — refusing to replace it",
        path.display()
    ))
    .with_hint(format!(
        "edit {} by hand so that \"{key}\" is an object (or remove the key)",
        path.display()
    ))
}

/// Loads the whole repository document, lets `change` edit it, and writes it back atomically with
/// sorted keys, two-space indentation and a trailing newline, keeping the file's mode. Nothing is
/// written when a check refuses or when the document did not change. Returns whether it wrote.
fn update(root: &Path, change: impl FnOnce(&mut Map<String, Value>) -> Result<()>) -> Result<bool> {
    let dir = root.join(".dwp");
    let path = dir.join("config.json");
    // A mistyped --repo must not grow a new directory tree.
    if !root.is_dir() {
        return Err(Error::not_found(format!(
            "repository directory {} does not exist",
            root.display()
        ))
        .with_hint("pass --repo with an existing repository root"));
    }
    // Read-modify-write under a lock on the repository directory itself, so two concurrent
    // writers (`dwp config enable` in two terminals, onboarding in CI) never lose an update. The
    // lock needs no file of ours in the user's repository.
    let _writer = crate::fsx::FileLock::directory(
        root,
        crate::fsx::LockWait::Up(std::time::Duration::from_secs(10)),
        "another dwp config writer",
        |_| {},
    )?;
    let is_link = |p: &Path| {
        p.symlink_metadata()
            .is_ok_and(|m| m.file_type().is_symlink())
    };
    if is_link(&dir) || is_link(&path) {
        return Err(refusal(format!(
            "{} or its .dwp directory is a symbolic link — dwp refuses to write through a link",
            path.display()
        ))
        .with_hint("replace the link with a real directory and file, then run the command again"));
    }
    if dir.symlink_metadata().is_ok_and(|m| !m.is_dir()) {
        return Err(refusal(format!(
            "{} is not a directory, so {} cannot be written",
            dir.display(),
            path.display()
        ))
        .with_hint("move the file named .dwp aside, then run the command again"));
    }
    let (doc, mode, existed) = match path.symlink_metadata() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Map::new(), NEW_FILE_MODE, false),
        Err(e) => return Err(Error::io("inspect", &path, e)),
        Ok(meta) => {
            let parsed = if meta.is_file() {
                fs::read(&path)
                    .map_err(|e| format!("unreadable ({e})"))
                    .and_then(|bytes| parse_object(&bytes))
            } else {
                Err("is not a regular file".to_string())
            };
            match parsed {
                Ok(doc) => (doc, meta.permissions().mode() & 0o7777, true),
                Err(reason) => {
                    let reason = reason.trim_end_matches("; treating as absent");
                    return Err(refusal(format!(
                        "{} {reason} — fix or remove it by hand; dwp never overwrites a file it cannot read",
                        path.display()
                    )));
                }
            }
        }
    };
    finish(&dir, &path, doc, mode, existed, change)
}

fn finish(
    dir: &Path,
    path: &Path,
    mut doc: Map<String, Value>,
    mode: u32,
    existed: bool,
    change: impl FnOnce(&mut Map<String, Value>) -> Result<()>,
) -> Result<bool> {
    let before = doc.clone();
    change(&mut doc)?;
    if existed && before == doc {
        return Ok(false);
    }
    crate::fsx::create_dir_with_mode(dir, DWP_DIR_MODE)?;
    let mut text = crate::canonical::to_pretty(&Value::Object(doc));
    text.push('\n');
    crate::fsx::write_atomic(path, text.as_bytes(), mode)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_writers_never_lose_an_update() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let threads: Vec<_> = ADDON_KEYS
            .iter()
            .map(|key| {
                let root = root.clone();
                std::thread::spawn(move || enable(&root, key, None, None).unwrap())
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let doc = read_object(&repo_file(&root)).unwrap().unwrap();
        let addons = doc["addons"].as_object().unwrap();
        assert_eq!(addons.len(), ADDON_KEYS.len(), "{addons:?}");
        // The lock is on the directory itself: no lock file appears in the repository.
        let names: Vec<_> = fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(".dwp")]);
    }

    #[test]
    fn entry_problems_in_order() {
        let p = |v: Value| entry_problem(&v);
        assert_eq!(p(json!(true)).unwrap(), "entry is not an object");
        assert_eq!(
            p(json!({"enabled": true, "z": 1, "a": 2})).unwrap(),
            "carries unknown field(s) a, z"
        );
        assert_eq!(p(json!({})).unwrap(), "\"enabled\" is missing");
        assert_eq!(
            p(json!({"enabled": 1})).unwrap(),
            "\"enabled\" is not a boolean"
        );
        assert!(
            p(json!({"enabled": true, "version": "v1.2"}))
                .unwrap()
                .contains("version")
        );
        assert!(
            p(json!({"enabled": true, "note": "a\nb"}))
                .unwrap()
                .contains("note")
        );
        assert!(p(json!({"enabled": true, "note": "x".repeat(201)})).is_some());
        assert!(
            p(json!({"enabled": true, "note": "é".repeat(200), "version": "v1.2.3-rc.1"}))
                .is_none()
        );
    }

    #[test]
    fn parse_rejects_what_python_rejects() {
        assert!(parse_object(b"").is_err());
        assert!(
            parse_object(b"[]")
                .unwrap_err()
                .contains("not a JSON object")
        );
        assert!(
            parse_object(b"null")
                .unwrap_err()
                .contains("not a JSON object")
        );
        assert!(
            parse_object(b"\xef\xbb\xbf{}")
                .unwrap_err()
                .contains("byte-order mark")
        );
        // Duplicate keys: the last one wins, as in Python.
        let doc = parse_object(br#"{"a": 1, "a": 2}"#).unwrap();
        assert_eq!(doc["a"], json!(2));
    }

    proptest::proptest! {
        #[test]
        fn reader_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            if let Ok(doc) = parse_object(&bytes) {
                let dir = tempfile::tempdir().unwrap();
                let path = repo_file(dir.path());
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, crate::canonical::to_pretty(&Value::Object(doc))).unwrap();
                let config = Config::load(Some(dir.path()), None);
                let mut w = Vec::new();
                let _ = config.show(&mut w);
            }
        }

        #[test]
        fn resolver_never_panics(text in "\\{(\"(addons|host|benchmark|schema)\": ?(null|1|\\[\\]|\\{(\"[a-z_-]{1,12}\": ?(true|1|\\{\"enabled\": ?(true|false|1)(, ?\"(version|note|x)\": ?\"[ -~]{0,8}\")?\\}),? ?){0,3}\\}),? ?){0,4}\\}") {
            let dir = tempfile::tempdir().unwrap();
            let path = repo_file(dir.path());
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &text).unwrap();
            let config = Config::load(Some(dir.path()), None);
            let mut w = Vec::new();
            let _ = config.show(&mut w);
        }
    }
}
