//! The MCP servers of one command: started when first needed, one process each, restarted for
//! the next call after a crash, all killed when this value is dropped (the run ends).
//!
//! Where a server runs: never in the workspace, never with `exec`'s HOME. Its HOME, and its
//! working directory unless its entry gives `cwd`, is its own directory
//! `<state>/mcp-home/<ses>/<server>/` (0700), which `exec`'s fence cannot write: a file the model
//! writes into the workspace, or a start-up file (`usercustomize.py`, `.npmrc`, …) a command
//! plants in its HOME, is never picked up by a server program. A server started while its
//! Session is being created (to list its tools, before anything of the Session is written) gets
//! a throwaway HOME inside its own `TMPDIR` instead. Servers also get `PYTHONSAFEPATH=1` (Python
//! puts neither the working directory nor the script's directory first on `sys.path`) and
//! `PYTHONNOUSERSITE=1` (no user site-packages); an entry's `env` may override both. A server
//! program must not resolve its code from the workspace (no `command = ["python3",
//! "server.py"]` relative to a checkout the agent edits).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine as _;
use serde_json::Value;

use super::client::{Client, Failure, Spawn};
use super::config::ServerConfig;
use super::http::{Connect, HttpClient};
use crate::error::{Error, Result};
use crate::process::orphans;
use crate::tools::ToolOutput;

/// One running server: a child process speaking stdio, or a Streamable HTTP endpoint.
enum Peer {
    Stdio(Client),
    Http(HttpClient),
}

impl Peer {
    fn list_tools(&mut self) -> std::result::Result<Vec<Value>, String> {
        match self {
            Peer::Stdio(c) => c.list_tools(),
            Peer::Http(c) => c.list_tools(),
        }
    }

    /// `seen`: an HTTP call's stream position (stdio has none to resume).
    fn call_tool(
        &mut self,
        tool: &str,
        arguments: &Value,
        cancel: &AtomicBool,
        seen: Option<&dyn Fn(super::StreamPosition)>,
    ) -> std::result::Result<Value, Failure> {
        match self {
            Peer::Stdio(c) => c.call_tool(tool, arguments, cancel),
            Peer::Http(c) => c.call_tool(tool, arguments, cancel, seen),
        }
    }

    fn is_dead(&self) -> bool {
        match self {
            Peer::Stdio(c) => c.is_dead(),
            Peer::Http(c) => c.is_dead(),
        }
    }

    fn last_request_id(&self) -> u64 {
        match self {
            Peer::Stdio(c) => c.last_request_id(),
            Peer::Http(c) => c.last_request_id(),
        }
    }

    /// `network.transport` of the OTel conventions: stdio is a pipe, Streamable HTTP is TCP.
    fn transport(&self) -> &'static str {
        match self {
            Peer::Stdio(_) => "pipe",
            Peer::Http(_) => "tcp",
        }
    }

    fn take_exchanges(&mut self) -> Vec<String> {
        match self {
            Peer::Stdio(c) => c.take_exchanges(),
            Peer::Http(c) => c.take_exchanges(),
        }
    }
}

/// Why a server could not be started or connected to.
struct StartFailure {
    why: String,
    /// The runtime's own set-up is wrong (a `bearer_token_env` that is not set): exit 4, not 9.
    setup: Option<String>,
}

impl From<String> for StartFailure {
    fn from(why: String) -> StartFailure {
        StartFailure { why, setup: None }
    }
}

/// A connect or start failure of the protocol layer: its message (the caller names the server
/// and gives the hint, see [`failed`]).
impl From<Error> for StartFailure {
    fn from(e: Error) -> StartFailure {
        StartFailure {
            why: e.message,
            setup: None,
        }
    }
}

/// Where the servers of one Session keep their HOMEs.
#[derive(Debug, Clone)]
pub struct ServerHomes {
    /// `<state>/mcp-home/<ses>/`: server `NAME` gets `NAME/` inside.
    pub root: PathBuf,
    /// The homes are created only once this path exists (the Session's directory): a server
    /// started before that gets a throwaway HOME, so a failed Session creation writes nothing.
    pub once_exists: PathBuf,
}

impl ServerHomes {
    /// The homes of Session `session_id` in `state`.
    pub fn of_session(state: &crate::state::StateDir, session_id: &str) -> ServerHomes {
        ServerHomes {
            root: state.mcp_home(session_id),
            once_exists: state.session(session_id).dir,
        }
    }
}

/// The configured servers and the running ones.
pub struct Servers {
    configs: BTreeMap<String, ServerConfig>,
    /// Per server, the sensitive names the policy passes it (`passEnv` and its `mcpPassEnv`
    /// entry): a server gets a sensitive variable only if its entry's `passEnv` lists it too.
    policy_pass_env: BTreeMap<String, Vec<String>>,
    homes: ServerHomes,
    /// The run's fence: every stdio server starts through it (the plan folder and the state
    /// dir stay read-only for the server, whatever its own `sandbox`).
    fence: crate::sandbox::RunFence,
    /// The policy's `mcpElicitation`: how servers asking for user input are answered.
    elicitation: crate::policy::McpElicitation,
    running: Mutex<BTreeMap<String, Peer>>,
    /// Random; server `NAME`'s processes carry `KXEN_MCP_SERVER_ID=<mark>.NAME`
    /// ([`orphans::MCP_SERVER_VAR`]) and `KXEN_ATTEMPT_ID=<mark>`.
    mark: String,
    /// Whether an attempt at a run took [`mark`](Self::mark) as its attempt mark.
    mark_claimed: AtomicBool,
}

impl Servers {
    pub fn new(
        configs: BTreeMap<String, ServerConfig>,
        policy: &crate::policy::MergedPolicy,
        homes: ServerHomes,
        fence: crate::sandbox::RunFence,
    ) -> Servers {
        Servers {
            policy_pass_env: configs
                .keys()
                .map(|name| (name.clone(), policy.server_pass_env(name)))
                .collect(),
            configs,
            homes,
            fence,
            elicitation: policy.mcp_elicitation,
            running: Mutex::new(BTreeMap::new()),
            mark: orphans::new_attempt_mark(),
            mark_claimed: AtomicBool::new(false),
        }
    }

    /// The attempt mark the first attempt at a run in this process records (`run.json`): the
    /// servers' processes carry it as `KXEN_ATTEMPT_ID`, so if kxen-agent is killed, the next
    /// start of the run stops what they left behind. Later callers (a `task` child sharing the
    /// servers) get `None` and make their own.
    pub fn claim_attempt_mark(&self) -> Option<String> {
        (!self.mark_claimed.swap(true, Ordering::SeqCst)).then(|| self.mark.clone())
    }

    fn server_mark(&self, server: &str) -> String {
        format!("{}.{server}", self.mark)
    }

    /// Stops server `server` (its process group, through the client's drop) and every process
    /// still carrying its mark (what it detached with `setsid`).
    fn retire(&self, running: &mut BTreeMap<String, Peer>, server: &str) {
        if let Some(client) = running.remove(server) {
            drop(client);
            orphans::stop_marked(orphans::MCP_SERVER_VAR, &[&self.server_mark(server)]);
        }
    }

    pub fn config(&self, server: &str) -> Option<&ServerConfig> {
        self.configs.get(server)
    }

    pub fn configs(&self) -> &BTreeMap<String, ServerConfig> {
        &self.configs
    }

    /// Starts `server` (if it is not running) and lists its tools. A failure is one message
    /// naming the server (exit 9).
    pub fn list_tools(&self, server: &str) -> Result<Vec<Value>> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let config = self.configs.get(server);
        let client = self
            .ensure(&mut running, server)
            .map_err(|f| match f.setup {
                Some(hint) => {
                    Error::invalid(format!("MCP server `{server}`: {}", f.why)).with_hint(hint)
                }
                None => failed(server, config, f.why),
            })?;
        let listed = client
            .list_tools()
            .map_err(|why| failed(server, config, why));
        if listed.is_err() {
            self.retire(&mut running, server);
        }
        listed
    }

    /// Runs `tools/call` of capability `name` (`mcp__<server>__<tool>`). An answer is a known
    /// outcome (the tool's own error included); a call that was sent and got no answer — the
    /// server crashed, timed out or was killed on cancel — is `interrupted` (UNKNOWN), and the
    /// server is restarted for the next call. `journal` (with the call's operation id) makes a
    /// Streamable HTTP call's stream position durable as soon as the server gives one.
    pub fn call(
        &self,
        name: &str,
        arguments: &Value,
        cancel: &AtomicBool,
        journal: Option<(&dyn super::StreamJournal, &str)>,
    ) -> ToolOutput {
        let Some((server, tool)) = super::split_capability(name) else {
            return ToolOutput::error(format!("`{name}` is not an MCP tool name"));
        };
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let client = match self.ensure(&mut running, server) {
            Ok(c) => c,
            Err(f) => {
                return ToolOutput::error(format!(
                    "MCP server `{server}` could not be started, so the call was not sent: {}",
                    f.why
                ));
            }
        };
        let traced = crate::telemetry::current::client_call();
        let seen = journal.map(|(journal, op_id)| {
            move |position: super::StreamPosition| {
                journal.record_position(op_id, position);
                crate::fsx::failpoint::hit("mcp.after-stream-position");
            }
        });
        let seen = seen.as_ref().map(|f| f as &dyn Fn(super::StreamPosition));
        let result = client.call_tool(tool, arguments, cancel, seen);
        if let Some(call) = traced {
            trace_call(call, server, tool, client, &result);
        }
        // What the server asked of us during the call goes into the outcome (journaled with
        // it), whatever the outcome is.
        let exchanges = client.take_exchanges();
        let mut out = self.outcome(&mut running, server, name, result);
        for line in exchanges {
            out.text
                .push_str(if out.text.is_empty() { "" } else { "\n" });
            out.text.push_str(&line);
        }
        out
    }

    /// Recovery of a `tools/call` of `name` a crashed attempt sent and journaled `position`
    /// for: the answer read from the server's replay ([`HttpClient::replay_call`]) — nothing
    /// is sent again. The output of a known answer is what [`Servers::call`] would have made
    /// of it; a server that cannot replay leaves it `interrupted` (UNKNOWN), saying why.
    pub fn replay(
        &self,
        name: &str,
        position: &super::StreamPosition,
        cancel: &AtomicBool,
    ) -> ToolOutput {
        let _ = cancel; // bounded by the entry's `timeout_ms`, as one request is
        let unknown = |why: String| {
            let mut out = ToolOutput::error(format!(
                "the answer to `{name}` could not be read again from its MCP server ({why});                  the call may have acted"
            ));
            out.interrupted = true;
            out
        };
        let Some((server, tool)) = super::split_capability(name) else {
            return unknown(format!("`{name}` is not an MCP tool name"));
        };
        let config = self
            .configs
            .get(server)
            .filter(|_| position.server == server);
        let Some((config, url)) = config.and_then(|c| Some((c, c.url.as_deref()?))) else {
            return unknown(format!(
                "the runtime config has no Streamable HTTP server `{server}` any more"
            ));
        };
        let answerer = super::inbound::Answerer::new(self.elicitation);
        let how = Authorize::for_run();
        let mut client = match connect(server, url, config, answerer, &how, Some(position)) {
            Ok(client) => client,
            Err(f) => return unknown(f.why),
        };
        let traced = crate::telemetry::current::client_call();
        let result = client.replay_call(position);
        let peer = Peer::Http(client);
        if let Some(call) = traced {
            trace_call(call, server, tool, &peer, &result);
        }
        match result {
            Ok(result) => convert(&result),
            Err(Failure::Rpc(why)) => {
                ToolOutput::error(format!("MCP server `{server}` refused the call: {why}"))
            }
            Err(failure) => unknown(failure.to_string()),
        }
    }

    /// The tool output of `tools/call` `result` of `name` on `server`.
    fn outcome(
        &self,
        running: &mut BTreeMap<String, Peer>,
        server: &str,
        name: &str,
        result: std::result::Result<Value, Failure>,
    ) -> ToolOutput {
        match result {
            Ok(result) => convert(&result),
            Err(Failure::Rpc(why)) => {
                ToolOutput::error(format!("MCP server `{server}` refused the call: {why}"))
            }
            Err(Failure::NotSent(why)) => {
                self.retire(running, server);
                ToolOutput::error(format!(
                    "MCP server `{server}` did not get the call, so it was not run (not sent): \
                     {why}"
                ))
            }
            Err(failure) => {
                self.retire(running, server);
                let mut out = ToolOutput::error(format!(
                    "MCP server `{server}` gave no answer to `{name}` ({failure}); the call may \
                     have acted. The server is restarted for later calls."
                ));
                out.interrupted = true;
                out
            }
        }
    }

    fn ensure<'m>(
        &self,
        running: &'m mut BTreeMap<String, Peer>,
        server: &str,
    ) -> std::result::Result<&'m mut Peer, StartFailure> {
        if running.get(server).is_some_and(Peer::is_dead) {
            self.retire(running, server);
        }
        if !running.contains_key(server) {
            let client = self.spawn(server)?;
            running.insert(server.to_string(), client);
        }
        Ok(running.get_mut(server).expect("inserted above"))
    }

    fn spawn(&self, server: &str) -> std::result::Result<Peer, StartFailure> {
        let Some(config) = self.configs.get(server) else {
            return Err(format!("the runtime config defines no [mcp.servers.{server}]").into());
        };
        let answerer = super::inbound::Answerer::new(self.elicitation);
        if let Some(url) = &config.url {
            return connect(server, url, config, answerer, &Authorize::for_run(), None)
                .map(Peer::Http);
        }
        let Some(argv) = config.command.as_deref().filter(|a| !a.is_empty()) else {
            return Err(String::from("its entry has neither `command` nor `url`").into());
        };
        let pass_env: Vec<String> = config
            .pass_env
            .iter()
            .filter(|n| {
                self.policy_pass_env
                    .get(server)
                    .is_some_and(|p| p.contains(n))
            })
            .cloned()
            .collect();
        // The server's own TMPDIR, in the system temp dir (see the module doc for its HOME).
        let tmp = tempfile::Builder::new()
            .prefix(&format!("kxen-mcp-{server}-"))
            .tempdir()
            .map_err(|e| format!("cannot create its TMPDIR: {e}"))?;
        let home = if self.homes.once_exists.is_dir() {
            let home = self.homes.root.join(server);
            crate::fsx::create_dir_private(&home)
                .map_err(|e| format!("cannot create its HOME: {e}"))?;
            home
        } else {
            let home = tmp.path().join("home");
            crate::fsx::create_dir_private(&home)
                .map_err(|e| format!("cannot create its HOME: {e}"))?;
            home
        };
        let mut env = crate::tools::child_env(crate::own_env::vars(), &pass_env, &home);
        env.retain(|(name, _)| name != "TMPDIR");
        env.push(("TMPDIR".into(), tmp.path().into()));
        for (name, value) in SERVER_DEFAULTS {
            env.retain(|(n, _)| n != name);
            env.push((name.into(), value.into()));
        }
        for (k, v) in &config.env {
            env.retain(|(name, _)| name != k.as_str());
            env.push((k.into(), v.into()));
        }
        // The marks come last: no entry overrides them.
        let marks = [
            (orphans::MCP_SERVER_VAR, self.server_mark(server)),
            (orphans::ATTEMPT_VAR, self.mark.clone()),
        ];
        for (name, value) in marks {
            env.retain(|(n, _)| n != name);
            env.push((name.into(), value.into()));
        }
        let cwd = config.cwd.clone().unwrap_or_else(|| home.clone());
        let client = Client::start(Spawn {
            server,
            argv,
            cwd: &cwd,
            env,
            timeout: Duration::from_millis(config.timeout_ms()),
            fence: config.fence(),
            run_fence: &self.fence,
            home: &home,
            tmp,
            answerer: answerer.with_root(self.fence.workspace()),
        })?;
        Ok(Peer::Stdio(client))
    }
}

/// The `tools/call {tool}` span of one call (the OTel MCP conventions: kind CLIENT,
/// `mcp.method.name`, `jsonrpc.request.id`, `network.transport`, `gen_ai.tool.name`,
/// `error.type` when it failed), with the server's config name and the outcome: `ok`, `error`
/// (the tool's own error), `refused` (a JSON-RPC error), `notSent`, or `unknown` (sent, no
/// answer: the call may have acted).
fn trace_call(
    call: crate::telemetry::current::ClientCall,
    server: &str,
    tool: &str,
    peer: &Peer,
    result: &std::result::Result<Value, Failure>,
) {
    use crate::telemetry::span::{Status, Value as Attr};
    let (outcome, error, message) = match result {
        Ok(r) if r["isError"] == true => ("error", Some("tool_error"), String::new()),
        Ok(_) => ("ok", None, String::new()),
        Err(Failure::Rpc(why)) => ("refused", Some("jsonrpc_error"), why.clone()),
        Err(Failure::NotSent(why)) => ("notSent", Some("not_sent"), why.clone()),
        Err(other) => ("unknown", Some("no_answer"), other.to_string()),
    };
    let mut attributes = vec![
        ("mcp.method.name", Attr::from("tools/call")),
        ("gen_ai.operation.name", Attr::from("execute_tool")),
        ("gen_ai.tool.name", Attr::from(tool)),
        (
            "jsonrpc.request.id",
            Attr::from(peer.last_request_id().to_string()),
        ),
        ("network.transport", Attr::from(peer.transport())),
        ("kxen.mcp.server", Attr::from(server)),
        ("kxen.mcp.outcome", Attr::from(outcome)),
    ];
    if let Peer::Http(_) = peer {
        attributes.push(("network.protocol.name", Attr::from("http")));
    }
    let status = match error {
        Some(kind) => {
            attributes.push(("error.type", Attr::from(kind)));
            Status::Error
        }
        None => Status::Unset,
    };
    call.end(format!("tools/call {tool}"), attributes, status, &message);
}

/// How a connect may authorize: a run's, or `kxen-agent mcp login`'s.
pub struct Authorize {
    pub person: super::oauth_code::Person,
    /// `mcp login`: ask for a new authorization (a stored registration is reused).
    pub login: bool,
    /// Scopes asked for instead of the entry's (`mcp login --scope`).
    pub scopes: Vec<String>,
    /// Where tokens are kept (`None`: in memory only, when no place for the store is known).
    pub store: Option<super::oauth_store::Store>,
}

impl Authorize {
    /// A run's: a person when `BROWSER` is set or stdin is a terminal; the user's store.
    pub fn for_run() -> Authorize {
        Authorize {
            person: super::oauth_code::Person::for_run(),
            login: false,
            scopes: Vec::new(),
            store: super::oauth_store::Store::locate().ok(),
        }
    }
}

/// Connects `server` of the runtime config for `kxen-agent mcp login`: the HTTP client after a
/// successful handshake (authorized, the tokens stored, if the server asked for it).
pub fn login(server: &str, config: &ServerConfig, how: &Authorize) -> Result<HttpClient> {
    let Some(url) = &config.url else {
        return Err(Error::invalid(format!(
            "MCP server `{server}` is a `command` server; only `url` servers use OAuth"
        )));
    };
    let answerer = super::inbound::Answerer::new(crate::policy::McpElicitation::default());
    connect(server, url, config, answerer, how, None).map_err(|f| match f.setup {
        Some(hint) => Error::invalid(format!("MCP server `{server}`: {}", f.why)).with_hint(hint),
        None => failed(server, Some(config), f.why),
    })
}

/// Connects to the Streamable HTTP server `url` of entry `config`; its bearer token is read
/// from the environment kxen-agent started with, now (never stored); an OAuth token comes from
/// the token store ([`super::oauth_store`]) or an authorization (`how`).
fn connect(
    server: &str,
    url: &str,
    config: &ServerConfig,
    answerer: super::inbound::Answerer,
    how: &Authorize,
    attach: Option<&super::StreamPosition>,
) -> std::result::Result<HttpClient, StartFailure> {
    let token = match &config.bearer_token_env {
        None => None,
        Some(var) => match crate::own_env::var_os(var).and_then(|v| v.into_string().ok()) {
            Some(token) if !token.is_empty() => Some(token),
            _ => {
                return Err(StartFailure {
                    why: format!("the environment variable {var} (bearer_token_env) is not set"),
                    setup: Some(format!(
                        "export {var}=… before running, or remove bearer_token_env from \
                         [mcp.servers.{server}]"
                    )),
                });
            }
        },
    };
    // Without a table (and without a static token), a server that asks for OAuth gets the
    // authorization-code grant with dynamic registration, when a person is at hand.
    let default_oauth = super::oauth::OAuthConfig::default();
    let table = match (&config.oauth, &config.bearer_token_env) {
        (Some(oauth), _) => Some(oauth),
        (None, None) => Some(&default_oauth),
        (None, Some(_)) => None,
    };
    let oauth = match table {
        None => None,
        Some(oauth) => {
            let secret = match &oauth.client_secret_env {
                None => None,
                Some(var) => match crate::own_env::var_os(var).and_then(|v| v.into_string().ok()) {
                    Some(secret) if !secret.is_empty() => Some(secret),
                    _ => {
                        return Err(StartFailure {
                            why: format!(
                                "the environment variable {var} (oauth.client_secret_env) is not set"
                            ),
                            setup: Some(format!(
                                "export {var}=… (the client secret) before running, or remove \
                                 client_secret_env from [mcp.servers.{server}.oauth]"
                            )),
                        });
                    }
                },
            };
            let private_key =
                match &oauth.private_key_file {
                    None => None,
                    Some(path) => Some(super::oauth::read_private_key(path).map_err(|why| {
                        StartFailure {
                            why,
                            setup: Some(format!(
                                "fix private_key_file in [mcp.servers.{server}.oauth] (a PKCS#8 \
                             PEM P-256 key)"
                            )),
                        }
                    })?),
                };
            let mut oauth = oauth.clone();
            if !how.scopes.is_empty() {
                oauth.scopes = how.scopes.clone();
            }
            let slot = how
                .store
                .as_ref()
                .map(|store| store.slot(server, url, oauth.store_client()));
            Some(super::oauth::Client {
                config: oauth,
                secret,
                server: server.to_string(),
                person: how.person,
                store: slot,
                approval_wait: how.login.then_some(super::oauth_code::LOGIN_WAIT),
                private_key,
            })
        }
    };
    let stored = match oauth.as_ref().and_then(|o| o.store.as_ref()) {
        None => None,
        Some(slot) => slot.load().map_err(|e| StartFailure {
            why: e.message.clone(),
            setup: Some(e.hints.join("; ")),
        })?,
    };
    let client = HttpClient::connect(Connect {
        server,
        url,
        token,
        timeout: Duration::from_millis(config.timeout_ms()),
        answerer,
        oauth,
        stored,
        login: how.login,
        attach,
    })?;
    Ok(client)
}

/// Environment every server gets (an entry's `env` may override it): Python resolves no code
/// from the working directory, the script's directory or the user site.
const SERVER_DEFAULTS: [(&str, &str); 2] = [("PYTHONSAFEPATH", "1"), ("PYTHONNOUSERSITE", "1")];

impl Drop for Servers {
    /// Kills every server's process group (the clients' drop), then whatever they detached.
    fn drop(&mut self) {
        let running = std::mem::take(self.running.get_mut().unwrap_or_else(|p| p.into_inner()));
        if running.is_empty() {
            return;
        }
        let marks: Vec<String> = running.keys().map(|s| self.server_mark(s)).collect();
        drop(running);
        let marks: Vec<&str> = marks.iter().map(String::as_str).collect();
        orphans::stop_marked(orphans::MCP_SERVER_VAR, &marks);
    }
}

fn failed(server: &str, config: Option<&ServerConfig>, why: String) -> Error {
    let hint = match config.and_then(|c| c.url.as_deref()) {
        // The server answered; its authorization failed (the message says which step).
        Some(_) if why.contains("OAuth authorization failed") => format!(
            "when a person can approve in a browser, run `kxen-agent mcp login {server}`; \
             `kxen-agent mcp status` shows the tokens kept for each server"
        ),
        Some(url) => format!(
            "check [mcp.servers.{server}] in the runtime config: is a server running at {url}, \
             and does it speak MCP over Streamable HTTP?"
        ),
        None => format!(
            "check [mcp.servers.{server}] in the runtime config: run its command by hand and see \
             that it speaks MCP over stdio"
        ),
    };
    Error::external(format!("MCP server `{server}`: {why}")).with_hint(hint)
}

/// A `tools/call` result as the model reads it: the text blocks; images, audio and resources
/// summarized with their MIME type and size; `structuredContent` when there is no text.
pub fn convert(result: &Value) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    for block in result["content"].as_array().into_iter().flatten() {
        let mime = block["mimeType"].as_str().unwrap_or("unknown type");
        match block["type"].as_str() {
            Some("text") => parts.push(block["text"].as_str().unwrap_or_default().to_string()),
            Some(kind @ ("image" | "audio")) => {
                let bytes = decoded_len(block["data"].as_str().unwrap_or_default());
                parts.push(format!("[{kind}: {mime}, {bytes} bytes]"));
            }
            Some("resource") => {
                let r = &block["resource"];
                let uri = r["uri"].as_str().unwrap_or("?");
                let mime = r["mimeType"].as_str().unwrap_or("unknown type");
                match (r["text"].as_str(), r["blob"].as_str()) {
                    (Some(text), _) => parts.push(format!("[resource {uri} ({mime})]\n{text}")),
                    (None, Some(blob)) => parts.push(format!(
                        "[resource {uri}: {mime}, {} bytes]",
                        decoded_len(blob)
                    )),
                    (None, None) => parts.push(format!("[resource {uri} ({mime})]")),
                }
            }
            Some("resource_link") => {
                let uri = block["uri"].as_str().unwrap_or("?");
                parts.push(format!("[resource link {uri} ({mime})]"));
            }
            other => parts.push(format!("[content of type {}]", other.unwrap_or("?"))),
        }
    }
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent")
    {
        parts.push(structured.to_string());
    }
    let text = parts.join("\n");
    if result["isError"].as_bool() == Some(true) {
        ToolOutput::error(text)
    } else {
        ToolOutput::ok(text)
    }
}

fn decoded_len(b64: &str) -> usize {
    base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .map_or(b64.len() / 4 * 3, |d| d.len())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn results_become_tool_outputs() {
        let out = convert(&json!({"content": [{"type": "text", "text": "hi"}], "isError": false}));
        assert_eq!((out.text.as_str(), out.is_error), ("hi", false));
        let out = convert(&json!({"content": [{"type": "text", "text": "bad"}], "isError": true}));
        assert!(out.is_error);
        let out = convert(&json!({"content": [
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a", "blob": "AAAA", "mimeType": "application/zip"}}
        ]}));
        assert_eq!(
            out.text,
            "[image: image/png, 5 bytes]\n[resource file:///a: application/zip, 3 bytes]"
        );
        let out = convert(&json!({"content": [], "structuredContent": {"n": 1}}));
        assert_eq!(out.text, "{\"n\":1}");
    }
}
