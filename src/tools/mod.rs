//! The tools an agent can touch (docs/spec.md §9): `read`, `glob`, `grep`, `lsp`, `write`,
//! `edit`, `exec`, `task`, all listed in [`REGISTRY`] and nowhere else.
//!
//! A tool's capability name is its tool name. Running a call is two steps: [`Registry::admit`]
//! checks it (a known tool, in the Session's capabilities, arguments a JSON object) before the
//! runtime records that it started, and [`Admitted::execute`] parses the arguments (camelCase,
//! unknown fields rejected), runs the tool confined to the workspace root, and caps what the
//! model sees at [`MAX_TEXT`] bytes, storing the full output as a blob when it is longer. Neither
//! panics nor returns an error of the runtime: every failure is a tool error the model reads
//! (`is_error: true`), and the run goes on.
//!
//! Adding a tool is one module and one registry entry:
//! 1. a module here with its argument struct (`Deserialize` + `JsonSchema`,
//!    `deny_unknown_fields`, camelCase, each field's doc comment is its description for the
//!    model) and its `fn(&Workspace, Args, &ToolContext) -> ToolOutput`;
//! 2. an [`Entry`] in [`REGISTRY`] (`registry.rs`): name, description, side-effect class, gate,
//!    executor;
//! 3. only if it takes settings: its `[tools.NAME]` table, a field of [`ToolsConfig`]
//!    (`config.rs`) typed in its module, which it reads as `ctx.services.config.NAME`.
//!
//! The policy's permitted catalog, the lock's capability check, the Builder's catalog, the
//! refusal of a call and the schemas sent to the model all follow from the entry.

mod config;
mod exec;
mod file;
mod hints;
mod lsp;
mod paths;
mod read;
mod registry;
mod schema;
mod search;
pub mod task;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::blobs::{BlobRef, BlobStore};

pub use crate::secrets::rules as env;
pub use crate::secrets::{child_env, is_provider_key_env, register_provider_key_env};
pub use config::ToolsConfig;
pub use exec::{DEFAULT_EXEC_TIMEOUT_MS, MAX_EXEC_TIMEOUT_MS};
pub use registry::{Admitted, Entry, Gate, REGISTRY, Registry, SideEffect, ToolName};

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

/// What the tools of one execution share, built once with the run's services
/// (`crate::run::services::RunServices`) and borrowed by every call's [`ToolContext`].
///
/// Its own type in this layer, so that a tool sees only what tools use (never the provider or
/// the run's prices) and this module needs nothing from `run` above it.
pub struct ToolServices {
    /// HOME for `exec` children (a directory in the state dir, created 0700 on first use).
    pub tool_home: PathBuf,
    /// Where outputs over [`MAX_TEXT`] are stored in full.
    pub blobs: BlobStore,
    /// Sensitive environment variables `exec` children may see anyway (never a provider key).
    pub pass_env: Vec<String>,
    /// The run's one fence ([`crate::sandbox::RunFence`]): the only way a tool starts a
    /// process; it holds the run's policy and the directories no tool may change.
    pub fence: crate::sandbox::RunFence,
    /// The execution's MCP servers (`None`: no MCP tool is locked). Shared (not copied) with the
    /// run's `task` children, which call the same servers. Up to `mcp` (a floor above, as in
    /// [`Registry::schemas`]): an `mcp__…` call is a tool call like any other, so the registry
    /// sends it to the servers, which in turn start their processes through the fence below.
    pub mcp: Option<Arc<crate::mcp::Servers>>,
    /// The execution's language servers (`None`: `lsp` is not granted); shared like `mcp`.
    pub lsp: Option<Arc<crate::lsp::Servers>>,
    /// `[tools]` of the config, whole: a tool with a table of its own reads it here.
    pub config: Arc<ToolsConfig>,
}

impl ToolServices {
    /// Services for tool calls outside a Session's run (a bench, a test): no pass-env, no MCP or
    /// language servers, the default `[tools]`. A run's are built by
    /// `crate::run::services::RunServices::new` from its config and lock.
    pub fn new(tool_home: PathBuf, blobs: BlobStore, fence: crate::sandbox::RunFence) -> Self {
        ToolServices {
            tool_home,
            blobs,
            pass_env: Vec::new(),
            fence,
            mcp: None,
            lsp: None,
            config: Arc::default(),
        }
    }
}

/// Everything a tool call may use: the execution's [`ToolServices`], borrowed, and what belongs
/// to this one call. Built by the runtime per call.
pub struct ToolContext<'a> {
    /// The Session's workspace root; every path is confined to it.
    pub workspace_root: &'a Path,
    /// What every call of the execution shares (tool home, blobs, pass-env, fence, servers).
    pub services: &'a ToolServices,
    /// Set by the runtime to cancel; `exec` polls it (see [`exec`](self) cancellation contract).
    pub cancel: &'a AtomicBool,
    /// Marks every `exec` child (and what it starts) as this operation's, in its environment, so
    /// that leftovers of a crashed runtime can be found ([`crate::process::orphans`]).
    pub mark: OperationMark<'a>,
    /// Runs the child Session of a `task` call (`None` for every other call).
    pub task: Option<&'a dyn task::TaskRunner>,
    /// The files (paths as the model gave them) this run has read, written or edited, from its
    /// journal: `write` refuses to replace any other existing file. `None`: the caller keeps no
    /// such record (a tool run outside a run), and `write` replaces any file.
    pub seen_files: Option<&'a [String]>,
    /// The tools the run holds (its lock's capabilities). A tool never shows what another tool
    /// the run was denied would have shown: `write`/`edit` quote a file only with `read`, and
    /// name other files only with `glob`. `None`: no such limit (a tool run outside a run).
    pub granted: Option<&'a [String]>,
    /// `mcp__…` calls: where a Streamable HTTP call's stream position is journaled, or the
    /// position a recovered call's answer is replayed from (`None`: neither).
    pub mcp_stream: Option<crate::mcp::StreamMode<'a>>,
}

impl ToolContext<'_> {
    /// Whether the run holds tool `name` (always, outside a run).
    pub fn holds(&self, name: &str) -> bool {
        self.granted.is_none_or(|g| g.iter().any(|c| c == name))
    }
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

/// The schemas of the tools whose capability is in `capabilities`, in catalog order.
pub fn schemas(capabilities: &[String]) -> Vec<ToolSchema> {
    REGISTRY.schemas(capabilities, &[])
}

impl Admitted<'_> {
    /// Runs the admitted call. Never panics; every failure is a tool error.
    pub fn execute(&self, ctx: &ToolContext) -> ToolOutput {
        let name = self.name();
        let run = || match paths::Workspace::new(ctx.workspace_root)
            .map(|ws| ws.with_protected(ctx.services.fence.protected()))
        {
            Ok(ws) => cap(redacted(self.run(&ws, ctx)), &ctx.services.blobs),
            Err(e) => ToolOutput::error(e.message),
        };
        // The call's span (when its run is traced) is current while it runs: the MCP and LSP
        // requests it makes go under it (`crate::telemetry::current`).
        crate::telemetry::current::within(ctx.mark.run_id, ctx.mark.op_id, || {
            catch_unwind(AssertUnwindSafe(run)).unwrap_or_else(|_| {
                ToolOutput::error(format!(
                    "internal error: the `{name}` tool failed unexpectedly (a bug in kxen-agent); \
                     nothing more is known"
                ))
            })
        })
    }
}

/// `out` with every credential in its text replaced ([`crate::redact`]) — before [`cap`], so a
/// secret straddling the cut goes whole and the blob holds none either; the model, the journal
/// and the Session all get this text.
fn redacted(mut out: ToolOutput) -> ToolOutput {
    crate::redact::redact_in_place(&mut out.text);
    out
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

    /// The capability name of every tool of the catalog (no pattern entry), in catalog order.
    pub(crate) fn all_capabilities() -> Vec<String> {
        REGISTRY
            .entries()
            .iter()
            .filter_map(|e| match e.name() {
                ToolName::Exact(name) => Some(name.to_string()),
                ToolName::Pattern(_) => None,
            })
            .collect()
    }

    /// Admits and runs one call under every capability, as the runtime does: a refused call is
    /// the tool error the model would read.
    pub(crate) fn execute(name: &str, arguments: &Value, ctx: &ToolContext) -> ToolOutput {
        execute_with(name, arguments, &all_capabilities(), ctx)
    }

    fn execute_with(
        name: &str,
        arguments: &Value,
        capabilities: &[String],
        ctx: &ToolContext,
    ) -> ToolOutput {
        match REGISTRY.admit(name, arguments, capabilities) {
            Ok(call) => call.execute(ctx),
            Err(why) => ToolOutput::error(why),
        }
    }

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
        /// Directories the tools must not change (a plan folder).
        pub protected: Vec<std::path::PathBuf>,
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
                caps: all_capabilities(),
                pass_env: Vec::new(),
                cancel: AtomicBool::new(false),
                op_id: crate::ids::new_id(crate::ids::IdKind::Operation),
                attempt: crate::process::orphans::new_attempt_mark(),
                fence: crate::sandbox::FencePolicy::default(),
                protected: Vec::new(),
            }
        }

        /// The fixture's tool services as its fields say now (tests change the fence first).
        pub(crate) fn services(&self) -> ToolServices {
            ToolServices {
                pass_env: self.pass_env.clone(),
                ..ToolServices::new(
                    self.home.clone(),
                    self.blobs.clone(),
                    crate::sandbox::RunFence::with_protected(
                        self.fence,
                        &self.root,
                        self.protected.clone(),
                    ),
                )
            }
        }

        pub(crate) fn ctx<'a>(&'a self, services: &'a ToolServices) -> ToolContext<'a> {
            ToolContext {
                workspace_root: &self.root,
                services,
                cancel: &self.cancel,
                mark: OperationMark {
                    session_id: "ses_test",
                    run_id: "run_test",
                    attempt: &self.attempt,
                    op_id: &self.op_id,
                },
                task: None,
                seen_files: None,
                granted: None,
                mcp_stream: None,
            }
        }

        pub(crate) fn run(&self, name: &str, args: Value) -> ToolOutput {
            execute_with(name, &args, &self.caps, &self.ctx(&self.services()))
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
    use super::testutil::{Fixture, all_capabilities};
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// The exact bytes of every schema the model is sent. The argument schemas are derived from
    /// the argument structs; this pins them to what the hand-written schemas were, so a change of
    /// derive attributes or of the schema crate never silently changes what the model sees.
    #[test]
    fn model_schemas_are_pinned() {
        let all = all_capabilities();
        let mut ours = serde_json::to_string_pretty(&schemas(&all)).unwrap();
        ours.push('\n');
        assert_eq!(ours, include_str!("testdata/model_schemas.json"));
    }

    #[test]
    fn schemas_follow_capabilities_in_catalog_order() {
        let caps: Vec<String> = ["exec", "read", "browser", "grep"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let names: Vec<String> = schemas(&caps).into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["read", "grep", "exec"]);
        for s in schemas(&all_capabilities()) {
            assert_eq!(s.parameters["type"], "object");
            assert_eq!(s.parameters["additionalProperties"], false);
            assert!(!s.description.is_empty());
        }
        assert!(schemas(&[]).is_empty());
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
            let _ = registry::parse::<exec::ExecArgs>("exec", &args);
        }
    }
}
