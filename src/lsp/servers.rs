//! The language servers of one execution.
//!
//! A server starts on the first `lsp` call (or `diagnostics_after_edit` write) for a file it
//! serves, once per execution, rooted at the workspace. Every call first brings the server's
//! view up to date with the disk: the file asked about is opened (`didOpen`) or, if its text
//! changed since it was last sent, replaced (`didChange`, whole text); every other open file
//! is re-read the same way (closed when it is gone), so an edit by `exec` is seen too. An
//! `edit` or `write` sends its file's new text to every server that has it open right away.
//!
//! **Diagnostics wait.** A server publishes diagnostics when it likes (pylsp 0.5 s after a
//! change, some servers an empty list first). A publish counts if it arrived after the file's
//! last sync and, when it carries a version (we announce `versionSupport`), is for the synced
//! version; an unversioned one counts once no newer publish came for
//! [`client::UNVERSIONED_SETTLE`]. The wait is bounded by `diagnostics_timeout_ms`; if nothing
//! came, the result says so. When the file did not change since a counted publish, that publish
//! answers at once.
//!
//! **Where a server runs.** Its own HOME and working directory, a fresh directory inside its
//! own `TMPDIR` (removed when it stops): never the workspace and never `exec`'s HOME, so a
//! start-up file the model plants (`usercustomize.py`, `.npmrc`) is never picked up. The
//! environment is `exec`'s filtered one with no sensitive variable at all (a language server
//! needs none), plus `PYTHONSAFEPATH=1` and `PYTHONNOUSERSITE=1`, then the entry's literal `env`,
//! then the marks ([`orphans::LSP_SERVER_VAR`], [`orphans::ATTEMPT_VAR`]): what a server
//! detached is stopped when the server is, and after a kill -9 of kxen-agent by the crashed
//! attempt's mark at the run's next start. The fence is the entry's (`readOnly` by default).
//!
//! **Failures.** A server that cannot start, crashes, stops answering (`timeout_ms`) or writes
//! something that is not LSP makes the call a tool error naming it (the run goes on); it is
//! started again on the next call.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use lsp_types::{
    DocumentSymbolResponse, GotoDefinitionResponse, Hover, HoverProviderCapability, Location,
    OneOf, WorkspaceSymbolResponse,
};
use serde_json::{Value, json};

use super::client::{Client, Failure, Launcher, Spawn};
use super::config::{ServerConfig, language_id};
use super::render::{self, Files};
use super::{Operation, Query, uri};
use crate::error::{Error, ErrorKind, Result};
use crate::process::orphans;
// Up to `tools` (a floor above): a server's answer is rendered straight into the `lsp` tool's
// output (capped and redacted like every tool's), not into a type of ours the tool converts.
use crate::tools::ToolOutput;

/// Files larger than this are not sent to a server (as `read` refuses them).
const MAX_FILE_BYTES: u64 = 32 * 1024 * 1024;

/// Environment every server gets (an entry's `env` may override it).
const SERVER_DEFAULTS: [(&str, &str); 2] = [("PYTHONSAFEPATH", "1"), ("PYTHONNOUSERSITE", "1")];

/// A file the server has open, as last sent.
struct Doc {
    uri: String,
    version: i32,
    text: String,
    /// The publish counter when it was last sent: a later publish is about this text.
    synced_seq: u64,
}

/// One started server and the files it has open.
struct Running {
    client: Client,
    open: BTreeMap<PathBuf, Doc>,
}

/// The configured servers and the running ones.
pub struct Servers {
    configs: BTreeMap<String, ServerConfig>,
    root: PathBuf,
    /// The run's fence: every server starts through it (the plan folder and the state dir
    /// stay read-only for the server, whatever its own `sandbox`).
    fence: crate::sandbox::RunFence,
    slots: BTreeMap<String, Mutex<Option<Running>>>,
    launcher: Launcher,
    /// Random; server `NAME`'s processes carry `KXEN_LSP_SERVER_ID=<mark>.NAME`.
    mark: String,
}

impl Servers {
    /// The servers of `configs` for the workspace of `fence`; none is started yet.
    pub fn new(
        configs: BTreeMap<String, ServerConfig>,
        fence: crate::sandbox::RunFence,
    ) -> Servers {
        let root = fence.workspace().to_path_buf();
        let root = root.canonicalize().unwrap_or(root);
        Servers {
            slots: configs
                .keys()
                .map(|n| (n.clone(), Mutex::new(None)))
                .collect(),
            configs,
            root,
            fence,
            launcher: Launcher::new(),
            mark: orphans::new_attempt_mark(),
        }
    }

    pub fn configs(&self) -> &BTreeMap<String, ServerConfig> {
        &self.configs
    }

    /// The server serving `path` (none: not found, a message for the model).
    fn server_for(&self, path: &Path) -> Result<(&str, &ServerConfig)> {
        if let Some((name, config)) = self.configs.iter().find(|(_, c)| c.serves(path)) {
            return Ok((name, config));
        }
        let served: Vec<String> = self
            .configs
            .iter()
            .map(|(n, c)| format!("`{n}` serves {}", c.all_extensions().join(", ")))
            .collect();
        Err(Error::not_found(format!(
            "no language server is configured for `{}` ({}); the call was not run",
            self.shown(path),
            served.join("; ")
        )))
    }

    fn shown(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .map_or_else(|_| path.display().to_string(), |p| p.display().to_string())
    }

    fn server_mark(&self, server: &str) -> String {
        format!("{}.{server}", self.mark)
    }

    /// The pids of the running servers (for tests and `run show`-style inspection).
    pub fn pids(&self) -> Vec<(String, u32)> {
        self.slots
            .iter()
            .filter_map(|(name, slot)| {
                let slot = slot.lock().unwrap_or_else(|p| p.into_inner());
                Some((name.clone(), slot.as_ref()?.client.pid()))
            })
            .collect()
    }

    /// Runs one `lsp` call. Every failure is a tool error naming the server.
    pub fn run(&self, q: &Query, cancel: &AtomicBool, attempt: &str) -> ToolOutput {
        let (name, config) = match self.server_for(q.path) {
            Ok(found) => found,
            Err(why) => return ToolOutput::error(why.message),
        };
        let mut slot = self.slots[name].lock().unwrap_or_else(|p| p.into_inner());
        let running = match self.ensure(&mut slot, name, config, cancel, attempt) {
            Ok(r) => r,
            Err(why) => {
                return ToolOutput::error(format!(
                    "language server `{name}` could not be started, so the call was not run: \
                     {why}. It is tried again on the next call."
                ));
            }
        };
        let result = self.operate(running, config, q, cancel);
        match result {
            Ok(text) => ToolOutput::ok(text),
            Err(Failure::Rpc(why)) => ToolOutput::error(format!("language server `{name}`: {why}")),
            Err(Failure::Canceled) => ToolOutput::error(format!(
                "the run was canceled while language server `{name}` worked on `{}`",
                q.operation.name()
            )),
            Err(failure) => {
                self.retire(&mut slot, name);
                ToolOutput::error(format!(
                    "language server `{name}` failed: {failure}. It is restarted on the next call."
                ))
            }
        }
    }

    /// After `edit`/`write` of `path`: sends its new text to every server that has it open and,
    /// when its server's entry sets `diagnostics_after_edit`, returns the text to append to the
    /// tool's result (the file's diagnostics, or why there are none).
    pub fn file_written(&self, path: &Path, cancel: &AtomicBool, attempt: &str) -> Option<String> {
        for (name, slot) in &self.slots {
            let mut slot = slot.lock().unwrap_or_else(|p| p.into_inner());
            let broken = match slot.as_mut() {
                Some(running) if running.open.contains_key(path) => {
                    running.client.broken().is_some() || self.sync(running, name, path).is_err()
                }
                _ => false,
            };
            if broken {
                self.retire(&mut slot, name);
            }
        }
        let (name, config) = self.server_for(path).ok()?;
        if !config.diagnostics_after_edit {
            return None;
        }
        let q = Query {
            operation: Operation::Diagnostics,
            path,
            position: None,
            query: None,
        };
        let out = self.run(&q, cancel, attempt);
        Some(if out.is_error {
            format!("\n\n[diagnostics from `{name}` unavailable: {}]", out.text)
        } else {
            format!("\n\nDiagnostics from `{name}`:\n{}", out.text)
        })
    }

    /// The running server of `slot`, started if needed (a dead one is retired first).
    fn ensure<'s>(
        &self,
        slot: &'s mut Option<Running>,
        name: &str,
        config: &ServerConfig,
        cancel: &AtomicBool,
        attempt: &str,
    ) -> Result<&'s mut Running> {
        if slot.as_mut().is_some_and(|r| r.client.broken().is_some()) {
            self.retire(slot, name);
        }
        if slot.is_none() {
            let client = self.spawn(name, config, cancel, attempt)?;
            *slot = Some(Running {
                client,
                open: BTreeMap::new(),
            });
        }
        Ok(slot.as_mut().expect("set above"))
    }

    /// Stops the server of `slot` (its process group) and whatever it detached.
    fn retire(&self, slot: &mut Option<Running>, name: &str) {
        if let Some(running) = slot.take() {
            drop(running.client);
            orphans::stop_marked(orphans::LSP_SERVER_VAR, &[&self.server_mark(name)]);
        }
    }

    fn spawn(
        &self,
        name: &str,
        config: &ServerConfig,
        cancel: &AtomicBool,
        attempt: &str,
    ) -> Result<Client> {
        let tmp = tempfile::Builder::new()
            .prefix(&format!("kxen-lsp-{name}-"))
            .tempdir()
            .map_err(|e| Error::failed(format!("cannot create its TMPDIR: {e}")).with_source(e))?;
        let home = tmp.path().join("home");
        crate::fsx::create_dir_private(&home)
            .map_err(|e| Error::wrap(ErrorKind::Failed, "cannot create its HOME", e))?;
        let mut env = crate::tools::child_env(crate::own_env::vars(), &[], &home);
        let mut set = |name: &str, value: std::ffi::OsString| {
            env.retain(|(n, _)| n != name);
            env.push((name.into(), value));
        };
        set("TMPDIR", tmp.path().into());
        for (n, v) in SERVER_DEFAULTS {
            set(n, v.into());
        }
        for (n, v) in &config.env {
            set(n, v.into());
        }
        // The marks come last: no entry overrides them.
        set(orphans::LSP_SERVER_VAR, self.server_mark(name).into());
        set(orphans::ATTEMPT_VAR, attempt.into());
        Client::start(
            Spawn {
                server: name,
                argv: &config.command,
                cwd: home.clone(),
                env,
                fence: config.fence(),
                run_fence: &self.fence,
                workspace: &self.root,
                home,
                tmp,
                timeout: Duration::from_millis(config.timeout_ms()),
                initialization_options: config.initialization_options.clone().map(Value::Object),
            },
            &self.launcher,
            cancel,
        )
    }

    /// Sends `path`'s text as it is on disk if the server has not seen it (`didOpen`) or saw
    /// another text (`didChange`); a file that is gone is closed. Errors: the file cannot be
    /// read (a message for the model).
    fn sync(&self, running: &mut Running, name: &str, path: &Path) -> Result<()> {
        let text = match read_text(path, &self.shown(path)) {
            Ok(t) => t,
            Err(why) => {
                if let Some(doc) = running.open.remove(path) {
                    running.client.notify(
                        "textDocument/didClose",
                        json!({"textDocument": {"uri": doc.uri}}),
                    );
                }
                return Err(why);
            }
        };
        let seq = running.client.publish_seq();
        match running.open.get_mut(path) {
            Some(doc) if doc.text == text => {}
            Some(doc) => {
                doc.version += 1;
                doc.synced_seq = seq;
                running.client.notify(
                    "textDocument/didChange",
                    json!({
                        "textDocument": {"uri": doc.uri, "version": doc.version},
                        "contentChanges": [{"text": text}],
                    }),
                );
                doc.text = text;
            }
            None => {
                let uri = uri::from_path(path);
                running.client.notify(
                    "textDocument/didOpen",
                    json!({"textDocument": {
                        "uri": uri,
                        "languageId": language_id(&self.configs[name], path),
                        "version": 1,
                        "text": text,
                    }}),
                );
                running.open.insert(
                    path.to_path_buf(),
                    Doc {
                        uri,
                        version: 1,
                        text,
                        synced_seq: seq,
                    },
                );
            }
        }
        Ok(())
    }

    fn operate(
        &self,
        running: &mut Running,
        config: &ServerConfig,
        q: &Query,
        cancel: &AtomicBool,
    ) -> Result<String, Failure> {
        let name = running.client.server().to_string();
        // Every other open file as it is on disk now (an `exec` may have changed it).
        let others: Vec<PathBuf> = running
            .open
            .keys()
            .filter(|p| p.as_path() != q.path)
            .cloned()
            .collect();
        for other in others {
            let _ = self.sync(running, &name, &other);
        }
        self.sync(running, &name, q.path)
            .map_err(|e| Failure::Rpc(e.message))?;
        let shown = self.shown(q.path);
        let doc = &running.open[q.path];
        let (doc_uri, version, synced_seq) = (doc.uri.clone(), doc.version, doc.synced_seq);
        let caps = running.client.capabilities.clone();
        let encoding = running.client.encoding;
        let unsupported = |what: &str| {
            Failure::Rpc(format!(
                "the server does not support {what} (it did not announce it at initialize)"
            ))
        };
        let position = |doc: &Doc| {
            let (line, character) = q.position.unwrap_or((1, 1));
            let line0 = line.saturating_sub(1);
            let text = uri::line_of(&doc.text, line0);
            json!({
                "textDocument": {"uri": doc.uri},
                "position": {
                    "line": line0,
                    "character": uri::to_server(text, character.saturating_sub(1) as usize, encoding),
                },
            })
        };
        let open = &running.open;
        let known = |p: &Path| open.get(p).map(|d| d.text.clone());
        let result = match q.operation {
            Operation::Diagnostics => {
                let timeout = Duration::from_millis(config.diagnostics_timeout_ms());
                let published = running
                    .client
                    .wait_diagnostics(&doc_uri, synced_seq, version, timeout, cancel)?;
                let text = &running.open[q.path].text;
                return Ok(match published {
                    Some(p) => render::diagnostics(&shown, text, encoding, &p.diagnostics),
                    None => format!(
                        "language server `{name}` published no diagnostics for {shown} within {} ms \
                         (diagnostics_timeout_ms); nothing is known about its errors",
                        timeout.as_millis()
                    ),
                });
            }
            Operation::Definition => {
                if !enabled_oneof(&caps.definition_provider) {
                    return Err(unsupported("definition"));
                }
                let params = position(&open[q.path]);
                let v = running
                    .client
                    .request("textDocument/definition", params, cancel)?;
                let places = match parse::<Option<GotoDefinitionResponse>>(v)? {
                    None => Vec::new(),
                    Some(GotoDefinitionResponse::Scalar(l)) => vec![l],
                    Some(GotoDefinitionResponse::Array(ls)) => ls,
                    Some(GotoDefinitionResponse::Link(links)) => links
                        .into_iter()
                        .map(|l| Location {
                            uri: l.target_uri,
                            range: l.target_selection_range,
                        })
                        .collect(),
                };
                let open = &running.open;
                let known = |p: &Path| open.get(p).map(|d| d.text.clone());
                let mut files = Files::new(&self.root, encoding, &known);
                render::places(
                    locations(&mut files, &places),
                    &format!("no definition found at {}", at(&shown, q)),
                )
            }
            Operation::References => {
                if !enabled_oneof(&caps.references_provider) {
                    return Err(unsupported("references"));
                }
                let mut params = position(&open[q.path]);
                params["context"] = json!({"includeDeclaration": true});
                let v = running
                    .client
                    .request("textDocument/references", params, cancel)?;
                let found = parse::<Option<Vec<Location>>>(v)?.unwrap_or_default();
                let open = &running.open;
                let known = |p: &Path| open.get(p).map(|d| d.text.clone());
                let mut files = Files::new(&self.root, encoding, &known);
                render::places(
                    locations(&mut files, &found),
                    &format!("no references found at {}", at(&shown, q)),
                )
            }
            Operation::Hover => {
                let supported = match &caps.hover_provider {
                    Some(HoverProviderCapability::Simple(b)) => *b,
                    Some(HoverProviderCapability::Options(_)) => true,
                    None => false,
                };
                if !supported {
                    return Err(unsupported("hover"));
                }
                let params = position(&open[q.path]);
                let v = running
                    .client
                    .request("textDocument/hover", params, cancel)?;
                match parse::<Option<Hover>>(v)? {
                    Some(h) if !render::hover(&h).is_empty() => render::hover(&h),
                    _ => format!("no hover information at {}", at(&shown, q)),
                }
            }
            Operation::DocumentSymbols => {
                if !enabled_oneof(&caps.document_symbol_provider) {
                    return Err(unsupported("documentSymbols"));
                }
                let v = running.client.request(
                    "textDocument/documentSymbol",
                    json!({"textDocument": {"uri": doc_uri}}),
                    cancel,
                )?;
                let mut files = Files::new(&self.root, encoding, &known);
                match parse::<Option<DocumentSymbolResponse>>(v)? {
                    None => format!("no symbols in {shown}"),
                    Some(DocumentSymbolResponse::Nested(s)) => {
                        render::nested_symbols(&mut files, &doc_uri, &s)
                    }
                    Some(DocumentSymbolResponse::Flat(s)) => {
                        render::flat_symbols(&mut files, &s, false)
                    }
                }
            }
            Operation::WorkspaceSymbols => {
                if !enabled_oneof(&caps.workspace_symbol_provider) {
                    return Err(unsupported("workspaceSymbols"));
                }
                let v = running.client.request(
                    "workspace/symbol",
                    json!({"query": q.query.unwrap_or_default()}),
                    cancel,
                )?;
                let mut files = Files::new(&self.root, encoding, &known);
                match parse::<Option<WorkspaceSymbolResponse>>(v)? {
                    None => "no symbols".to_string(),
                    Some(WorkspaceSymbolResponse::Flat(s)) => {
                        render::flat_symbols(&mut files, &s, true)
                    }
                    Some(WorkspaceSymbolResponse::Nested(s)) => {
                        // A symbol whose location is only a file counts as its first line.
                        let flat: Vec<lsp_types::SymbolInformation> = s
                            .into_iter()
                            .map(|w| {
                                let location = match w.location {
                                    OneOf::Left(l) => l,
                                    OneOf::Right(f) => Location {
                                        uri: f.uri,
                                        range: Default::default(),
                                    },
                                };
                                #[allow(deprecated)] // `deprecated` is a required field
                                lsp_types::SymbolInformation {
                                    name: w.name,
                                    kind: w.kind,
                                    tags: w.tags,
                                    deprecated: None,
                                    location,
                                    container_name: w.container_name,
                                }
                            })
                            .collect();
                        render::flat_symbols(&mut files, &flat, true)
                    }
                }
            }
        };
        Ok(result)
    }
}

/// `path:line:col` of the call's position.
fn at(shown: &str, q: &Query) -> String {
    let (line, col) = q.position.unwrap_or((1, 1));
    format!("{shown}:{line}:{col}")
}

fn locations(files: &mut Files, found: &[Location]) -> Vec<render::Place> {
    found
        .iter()
        .map(|l| files.place(l.uri.as_str(), l.range.start))
        .collect()
}

fn enabled_oneof<T>(cap: &Option<OneOf<bool, T>>) -> bool {
    matches!(cap, Some(OneOf::Left(true)) | Some(OneOf::Right(_)))
}

fn parse<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, Failure> {
    serde_json::from_value(v).map_err(|e| {
        Failure::Rpc(format!(
            "its answer does not have the shape the protocol gives it: {e}"
        ))
    })
}

/// The text of `path` (lossy UTF-8), refused when it is not a regular file or too large. The
/// errors are the crate's, their messages for the model name the file as `shown`.
fn read_text(path: &Path, shown: &str) -> Result<String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::not_found(format!("file `{shown}` does not exist")));
        }
        Err(e) => {
            let message = format!("cannot read `{shown}`: {e}");
            return Err(Error::io_told(message, path, e, ErrorKind::Failed));
        }
    };
    if !meta.is_file() {
        return Err(Error::invalid(format!("`{shown}` is not a regular file")));
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(Error::invalid(format!(
            "`{shown}` is too large for a language server ({} bytes)",
            meta.len()
        )));
    }
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .map_err(|e| {
            let message = format!("cannot read `{shown}`: {e}");
            Error::io_told(message, path, e, ErrorKind::Failed)
        })
}

impl Drop for Servers {
    /// Shuts every running server down (`shutdown`, `exit`, then a kill of its process group),
    /// stops what they detached, then ends the launcher thread.
    fn drop(&mut self) {
        let mut marks = Vec::new();
        for (name, slot) in &mut self.slots {
            let running = slot.get_mut().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(running) = running {
                running.client.shutdown();
                marks.push(format!("{}.{name}", self.mark));
            }
        }
        let marks: Vec<&str> = marks.iter().map(String::as_str).collect();
        orphans::stop_marked(orphans::LSP_SERVER_VAR, &marks);
        self.launcher.stop();
    }
}
