//! The tool catalog the runtime implements (kxen-agent.md §9): `read`, `glob`, `grep`, `write`,
//! `edit`, `exec`.
//!
//! A tool's capability name is its tool name. [`execute`] is the single entry point: it checks
//! the capability, parses the arguments (camelCase, unknown fields rejected), runs the tool
//! confined to the workspace root, and caps what the model sees at [`MAX_TEXT`] bytes, storing
//! the full output as a blob when it is longer. It never panics and never returns `Err`: every
//! failure is a tool error the model reads (`is_error: true`), and the run goes on.

pub(crate) mod env;
mod exec;
mod file;
mod paths;
mod read;
mod search;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::blobs::{BlobRef, BlobStore};

pub use env::{child_env, is_provider_key_env, register_provider_key_env};
pub use exec::{DEFAULT_EXEC_TIMEOUT_MS, MAX_EXEC_TIMEOUT_MS};

/// Every capability this runtime implements a tool for, in catalog order. The permitted catalog
/// of a Session is this list filtered by the runtime policy; never advertise anything else.
pub const IMPLEMENTED: &[&str] = &["read", "glob", "grep", "write", "edit", "exec"];

/// The largest tool output (bytes of UTF-8) the model sees. Longer outputs are stored in full as
/// a blob and the model gets the head, the tail and a note naming the blob.
pub const MAX_TEXT: usize = 64 * 1024;

/// A tool as advertised to the model: name, description and a JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolSchema {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// Everything a tool call may use. Built by the runtime per call.
pub struct ToolContext<'a> {
    /// The Session's workspace root; every path is confined to it.
    pub workspace_root: &'a Path,
    /// HOME for `exec` children (a directory in the state dir, created 0700 on first use).
    pub tool_home: &'a Path,
    /// Where outputs over [`MAX_TEXT`] are stored in full.
    pub blobs: &'a BlobStore,
    /// Sensitive environment variables `exec` children may see anyway (never a provider key).
    pub pass_env: &'a [String],
    /// The Session's effective capability set; a tool outside it is refused.
    pub capabilities: &'a [String],
    /// Set by the runtime to cancel; `exec` polls it (see [`exec`](self) cancellation contract).
    pub cancel: &'a AtomicBool,
    /// Marks every `exec` child (and what it starts) as this operation's, in its environment, so
    /// that leftovers of a crashed runtime can be found ([`crate::process::orphans`]).
    pub mark: OperationMark<'a>,
    /// The fence around every `exec` child (the locked policy's `sandbox` and `allowNetwork`).
    pub fence: crate::sandbox::FencePolicy,
}

/// The Session, run, attempt and operation a tool call belongs to.
#[derive(Debug, Clone, Copy, Default)]
pub struct OperationMark<'a> {
    pub session_id: &'a str,
    pub run_id: &'a str,
    /// The random mark of the runtime process's attempt at the run (see `run.json` attempts).
    pub attempt: &'a str,
    pub op_id: &'a str,
}

/// The result of one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolOutput {
    /// What the model sees; at most [`MAX_TEXT`] bytes.
    pub text: String,
    pub is_error: bool,
    /// The full output when it was longer than [`MAX_TEXT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<BlobRef>,
    /// `exec` only: canceled and SIGKILLed after the grace period, so whether its side effects
    /// happened is unknown. The runtime records the outcome as UNKNOWN.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// `exec` only: the fence the command ran in (absent: unfenced, or not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<crate::sandbox::FenceRecord>,
}

impl ToolOutput {
    pub(crate) fn ok(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            is_error: false,
            blob: None,
            interrupted: false,
            fence: None,
        }
    }

    pub(crate) fn error(text: impl Into<String>) -> ToolOutput {
        ToolOutput {
            text: text.into(),
            is_error: true,
            blob: None,
            interrupted: false,
            fence: None,
        }
    }
}

/// The schemas of the catalog tools whose capability is in `capabilities`, in catalog order.
pub fn schemas(capabilities: &[String]) -> Vec<ToolSchema> {
    IMPLEMENTED
        .iter()
        .filter(|name| capabilities.iter().any(|c| c == *name))
        .map(|name| schema(name))
        .collect()
}

fn schema(name: &str) -> ToolSchema {
    let (description, parameters) = match name {
        "read" => (
            "Read a text file in the workspace. Returns numbered lines (`cat -n` style). \
             Use offset (1-based first line) and limit (line count, default 2000) for long files.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path relative to the workspace root"},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to show (1-based)"},
                    "limit": {"type": "integer", "minimum": 1, "description": "Number of lines to show (default 2000)"}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        ),
        "glob" => (
            "List files matching a glob pattern, sorted, respecting .gitignore. A pattern without \
             `/` matches file names at any depth (`*.rs`); with `/` it matches the path relative \
             to `path` (`src/**/*.rs`).",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Glob pattern, e.g. `**/*.py` or `*.md`"},
                    "path": {"type": "string", "description": "Directory to search, relative to the workspace root (default: the root)"}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        ),
        "grep" => (
            "Search file contents with a regular expression (Rust regex syntax), respecting \
             .gitignore. Returns `path:line:text` lines sorted by path and line.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression"},
                    "path": {"type": "string", "description": "File or directory to search (default: the workspace root)"},
                    "glob": {"type": "string", "description": "Only search files matching this glob, e.g. `*.rs`"}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        ),
        "write" => (
            "Create or overwrite a file with the given content (parent directories are created).",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path relative to the workspace root"},
                    "content": {"type": "string", "description": "The complete new file content"}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        ),
        "edit" => (
            "Replace an exact string in a file. Fails if oldString is not found, or occurs more \
             than once unless replaceAll is true; include surrounding lines to make it unique.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path relative to the workspace root"},
                    "oldString": {"type": "string", "description": "Exact text to replace"},
                    "newString": {"type": "string", "description": "Replacement text"},
                    "replaceAll": {"type": "boolean", "description": "Replace every occurrence (default false)"}
                },
                "required": ["path", "oldString", "newString"],
                "additionalProperties": false
            }),
        ),
        "exec" => (
            "Run a shell command (`sh -c`) in the workspace and return its combined stdout and \
             stderr and exit code. Default timeout 120000 ms. Credentials are not in its \
             environment. Usually fenced: writes outside the workspace, HOME and $TMPDIR fail, \
             and without network permission there is no network.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "Shell command line"},
                    "timeoutMs": {"type": "integer", "minimum": 1, "maximum": MAX_EXEC_TIMEOUT_MS, "description": "Timeout in milliseconds (default 120000)"},
                    "path": {"type": "string", "description": "Working directory relative to the workspace root (default: the root)"}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        ),
        _ => unreachable!("schema() is only called with IMPLEMENTED names"),
    };
    ToolSchema {
        name: name.to_string(),
        description: description.to_string(),
        parameters,
    }
}

/// Runs tool `name` with `arguments`. Never panics; every failure is a tool error.
pub fn execute(name: &str, arguments: &Value, ctx: &ToolContext) -> ToolOutput {
    match catch_unwind(AssertUnwindSafe(|| execute_inner(name, arguments, ctx))) {
        Ok(out) => out,
        Err(_) => ToolOutput::error(format!(
            "internal error: the `{name}` tool failed unexpectedly (a bug in kxen-agent); nothing \
             more is known"
        )),
    }
}

fn execute_inner(name: &str, arguments: &Value, ctx: &ToolContext) -> ToolOutput {
    if !IMPLEMENTED.contains(&name) {
        return ToolOutput::error(format!(
            "unknown tool `{name}`; available tools: {}",
            available(ctx.capabilities)
        ));
    }
    if !ctx.capabilities.iter().any(|c| c == name) {
        return ToolOutput::error(format!(
            "tool `{name}` is not allowed in this session; available tools: {}",
            available(ctx.capabilities)
        ));
    }
    if !arguments.is_object() {
        return ToolOutput::error(format!(
            "arguments for `{name}` must be a JSON object, got {}",
            kind_of(arguments)
        ));
    }
    let ws = match paths::Workspace::new(ctx.workspace_root) {
        Ok(ws) => ws,
        Err(e) => return ToolOutput::error(e),
    };
    let out = match name {
        "read" => parse(name, arguments).map(|a| read::run(&ws, a)),
        "glob" => parse(name, arguments).map(|a| search::glob(&ws, a)),
        "grep" => parse(name, arguments).map(|a| search::grep(&ws, a)),
        "write" => parse(name, arguments).map(|a| file::write(&ws, a)),
        "edit" => parse(name, arguments).map(|a| file::edit(&ws, a)),
        "exec" => parse(name, arguments).map(|a| exec::run(&ws, a, ctx)),
        _ => unreachable!("checked against IMPLEMENTED above"),
    };
    let out = out.unwrap_or_else(ToolOutput::error);
    cap(out, ctx.blobs)
}

fn parse<T: serde::de::DeserializeOwned>(tool: &str, arguments: &Value) -> Result<T, String> {
    T::deserialize(arguments)
        .map_err(|e| format!("invalid arguments for `{tool}`: {e}; see the tool's schema"))
}

fn available(capabilities: &[String]) -> String {
    let names: Vec<&str> = IMPLEMENTED
        .iter()
        .copied()
        .filter(|n| capabilities.iter().any(|c| c == n))
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Keeps `out.text` within [`MAX_TEXT`]: the full text goes to a blob and the model gets the
/// head, the tail (where exit codes and final errors are) and a note naming the blob.
fn cap(mut out: ToolOutput, blobs: &BlobStore) -> ToolOutput {
    if out.text.len() <= MAX_TEXT {
        return out;
    }
    let total = out.text.len();
    let stored = blobs.put(out.text.as_bytes());
    let head_end = floor_char_boundary(&out.text, 40 * 1024);
    let tail_start = ceil_char_boundary(&out.text, total - 20 * 1024);
    let omitted = tail_start - head_end;
    let note = match &stored {
        Ok(r) => format!(
            "\n[… {omitted} bytes omitted; the full output ({total} bytes) is stored as blob sha256:{}]\n",
            r.sha256
        ),
        Err(e) => format!(
            "\n[… {omitted} bytes omitted; the full output ({total} bytes) could not be stored: {e}]\n"
        ),
    };
    out.text = format!("{}{note}{}", &out.text[..head_end], &out.text[tail_start..]);
    out.blob = stored.ok();
    out
}

pub(crate) fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

pub(crate) fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    if i >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;

    /// A workspace, a tool home and a blob store in one temp dir, with every capability.
    pub(crate) struct Fixture {
        pub tmp: tempfile::TempDir,
        pub root: std::path::PathBuf,
        pub home: std::path::PathBuf,
        pub blobs: BlobStore,
        pub caps: Vec<String>,
        pub pass_env: Vec<String>,
        pub cancel: AtomicBool,
        /// Unique per fixture: a killed command's leftovers are stopped by operation id, which
        /// must never match a command of a test running in parallel.
        pub op_id: String,
        pub attempt: String,
        /// The default fence (`workspaceWrite`, no network): tests run commands fenced.
        pub fence: crate::sandbox::FencePolicy,
    }

    impl Fixture {
        pub(crate) fn new() -> Fixture {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().join("ws");
            std::fs::create_dir_all(&root).unwrap();
            let root = root.canonicalize().unwrap();
            let home = tmp.path().join("state/tool-home");
            let blobs = BlobStore::new(tmp.path().join("state/blobs"));
            Fixture {
                tmp,
                root,
                home,
                blobs,
                caps: IMPLEMENTED.iter().map(|s| s.to_string()).collect(),
                pass_env: Vec::new(),
                cancel: AtomicBool::new(false),
                op_id: crate::ids::new_id(crate::ids::IdKind::Operation),
                attempt: crate::process::orphans::new_attempt_mark(),
                fence: crate::sandbox::FencePolicy::default(),
            }
        }

        pub(crate) fn ctx(&self) -> ToolContext<'_> {
            ToolContext {
                workspace_root: &self.root,
                tool_home: &self.home,
                blobs: &self.blobs,
                pass_env: &self.pass_env,
                capabilities: &self.caps,
                cancel: &self.cancel,
                mark: OperationMark {
                    session_id: "ses_test",
                    run_id: "run_test",
                    attempt: &self.attempt,
                    op_id: &self.op_id,
                },
                fence: self.fence,
            }
        }

        pub(crate) fn run(&self, name: &str, args: Value) -> ToolOutput {
            execute(name, &args, &self.ctx())
        }

        pub(crate) fn put(&self, rel: &str, content: &str) {
            let p = self.root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, content).unwrap();
        }

        pub(crate) fn get(&self, rel: &str) -> String {
            std::fs::read_to_string(self.root.join(rel)).unwrap()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::Fixture;
    use super::*;
    use proptest::prelude::*;

    /// The exact bytes of every schema the model is sent. The argument schemas are derived from
    /// the argument structs; this pins them to what the hand-written schemas were, so a change of
    /// derive attributes or of the schema crate never silently changes what the model sees.
    #[test]
    fn model_schemas_are_pinned() {
        let all: Vec<String> = IMPLEMENTED.iter().map(|s| s.to_string()).collect();
        let mut ours = serde_json::to_string_pretty(&schemas(&all)).unwrap();
        ours.push('\n');
        assert_eq!(ours, include_str!("testdata/model_schemas.json"));
    }

    #[test]
    fn schemas_follow_capabilities_in_catalog_order() {
        let caps: Vec<String> = ["exec", "read", "lsp", "grep"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let names: Vec<String> = schemas(&caps).into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["read", "grep", "exec"]);
        for s in schemas(
            &IMPLEMENTED
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        ) {
            assert_eq!(s.parameters["type"], "object");
            assert_eq!(s.parameters["additionalProperties"], false);
            assert!(!s.description.is_empty());
        }
        assert!(schemas(&[]).is_empty());
    }

    #[test]
    fn catalog_matches_the_policy_catalog() {
        let mut ours: Vec<&str> = IMPLEMENTED.to_vec();
        let mut policy: Vec<&str> = crate::policy::IMPLEMENTED_CAPABILITIES.to_vec();
        ours.sort();
        policy.sort();
        assert_eq!(
            ours, policy,
            "never advertise a capability without a working tool"
        );
    }

    #[test]
    fn unknown_tool_disallowed_tool_and_bad_arguments_are_tool_errors() {
        let mut fx = Fixture::new();
        let out = fx.run("teleport", json!({}));
        assert!(out.is_error && out.text.contains("unknown tool `teleport`"));
        fx.caps = vec!["read".into()];
        let out = fx.run("write", json!({"path": "a", "content": "x"}));
        assert!(
            out.is_error && out.text.contains("not allowed"),
            "{}",
            out.text
        );
        assert!(!fx.root.join("a").exists(), "a refused tool never runs");
        let out = fx.run("read", json!("a.txt"));
        assert!(out.is_error && out.text.contains("must be a JSON object"));
        let out = fx.run("read", json!({"file": "a.txt"}));
        assert!(out.is_error && out.text.contains("invalid arguments for `read`"));
        let out = fx.run("read", json!({"path": 7}));
        assert!(out.is_error, "{}", out.text);
    }

    #[test]
    fn long_output_is_capped_and_stored_as_a_blob() {
        let fx = Fixture::new();
        let line = "é".repeat(50) + "\n";
        let body = line.repeat(2000);
        let out = cap(ToolOutput::ok(body.clone()), &fx.blobs);
        assert!(out.text.len() <= MAX_TEXT);
        let blob = out.blob.clone().expect("blob");
        assert_eq!(blob.bytes, body.len() as u64);
        assert_eq!(fx.blobs.get(&blob.sha256).unwrap(), body.as_bytes());
        assert!(out.text.contains(&blob.sha256));
        assert!(out.text.starts_with(&line));
        assert!(out.text.ends_with(&line));
        let small = cap(ToolOutput::ok("hi"), &fx.blobs);
        assert_eq!(small.text, "hi");
        assert!(small.blob.is_none());
    }

    #[test]
    fn tool_output_serde_is_camel_case() {
        let mut out = ToolOutput::error("x");
        out.interrupted = true;
        let v = serde_json::to_value(&out).unwrap();
        assert_eq!(
            v,
            json!({"text": "x", "isError": true, "interrupted": true})
        );
        let back: ToolOutput = serde_json::from_value(v).unwrap();
        assert_eq!(back, out);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|f| json!(f)),
            "[a-z./ ]{0,8}".prop_map(Value::String),
            prop_oneof![
                Just("path"),
                Just("pattern"),
                Just("content"),
                Just("oldString"),
                Just("newString"),
                Just("offset"),
                Just("limit"),
                Just("glob"),
                Just("replaceAll"),
                Just("timeoutMs"),
                Just("command")
            ]
            .prop_map(|s| Value::String(s.into())),
        ];
        leaf.prop_recursive(3, 24, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("path".to_string()),
                        Just("pattern".to_string()),
                        Just("content".to_string()),
                        Just("oldString".to_string()),
                        Just("newString".to_string()),
                        Just("offset".to_string()),
                        Just("limit".to_string()),
                        Just("glob".to_string()),
                        Just("replaceAll".to_string()),
                        "[a-z]{1,6}",
                    ],
                    inner,
                    0..5
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// Arbitrary JSON never panics any tool. `exec` is excluded from the capability set so
        /// random strings are never run as shell commands; its parser is covered by a separate
        /// property below.
        #[test]
        fn arbitrary_arguments_never_panic(
            tool in prop_oneof![Just("read"), Just("glob"), Just("grep"), Just("write"), Just("edit"), Just("exec"), Just("nope")],
            args in arb_json(),
        ) {
            let mut fx = Fixture::new();
            fx.caps.retain(|c| c != "exec");
            fx.put("a.txt", "one\ntwo\n");
            let out = fx.run(tool, args);
            prop_assert!(out.text.len() <= MAX_TEXT);
        }

        #[test]
        fn exec_argument_parsing_never_panics(args in arb_json()) {
            let _ = parse::<exec::ExecArgs>("exec", &args);
        }
    }
}
