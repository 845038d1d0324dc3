//! The model config: which provider serves which model role.
//!
//! Found at, in order: `--config FILE`, env `KXEN_AGENT_CONFIG`,
//! `$XDG_CONFIG_HOME/kxen-agent/config.toml`, `~/.config/kxen-agent/config.toml`. An explicitly
//! named file must exist (exit 3 otherwise); a missing default file only becomes an error when a
//! role is resolved (exit 4, naming the path to create). Unknown fields are rejected.
//!
//! ```toml
//! [providers.local]
//! kind = "openai"                      # OpenAI-compatible /chat/completions with tool calling
//! base_url = "http://127.0.0.1:11434/v1"
//! model = "qwen2.5-coder:7b"
//! api_key_env = "OPENAI_API_KEY"       # optional; read from this env var at call time
//! timeout_ms = 300000                  # optional, default 300000
//! temperature = 0.2                    # optional sampling options, sent as given
//! top_p = 0.9
//! max_tokens = 4096                    # optional, default 4096
//! seed = 7
//! extra_body = { cache_prompt = true } # optional, merged into the request body
//! max_transport_retries = 5            # optional: HTTP 408/429/5xx and resets, with backoff
//! context_window = 32768               # optional (tokens): compact the conversation when a
//! compact_at = 0.8                     #   request passes this share of it (default 0.8)
//! [providers.claude]
//! kind = "anthropic"                   # the Messages API (/v1/messages) with tool use
//! model = "claude-sonnet-4-5"
//! api_key_env = "ANTHROPIC_API_KEY"    # sent as x-api-key
//! base_url = "https://api.anthropic.com" # optional (a proxy or gateway)
//! max_tokens = 4096                    # optional, default 4096
//! cache = true                         # optional: prompt-cache breakpoints, default true
//! [providers.bridge]
//! kind = "command"                     # argv; request JSON on stdin, response JSON on stdout
//! argv = ["my-llm-bridge", "--json"]
//! timeout_ms = 120000                  # optional, default 300000
//! [providers.demo]
//! kind = "script"                      # deterministic replay, one response per line
//! path = "turns.jsonl"                 # relative to this config file
//! [roles]
//! execution = "local"
//! planning = "local"
//! compaction = "local"                 # optional: who writes summaries (default: execution's)
//! [tools]
//! parallel = 4                         # read-class and `task` calls of one turn run together
//! [lsp.python]                         # a language server of the `lsp` tool (crate::lsp::config)
//! command = ["/usr/bin/python3", "-m", "pylsp"]
//! extensions = [".py"]
//! ```

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Provider;
use super::anthropic::AnthropicProvider;
use super::command::CommandProvider;
use super::openai::OpenAiProvider;
use super::script::ScriptProvider;
use crate::error::{Error, ErrorKind, Result};

/// Provider timeout when `timeout_ms` is not given: generous, since local models can be slow.
pub const DEFAULT_PROVIDER_TIMEOUT_MS: u64 = 300_000;
/// The smallest `context_window` the config accepts (tokens).
pub const MIN_CONTEXT_WINDOW: u64 = 256;

/// How many calls may run together when the config does not say (`[tools] parallel`; the run's
/// batches: `crate::run::agent_loop`).
pub const DEFAULT_PARALLEL_TOOLS: usize = 4;

/// Where the config path came from (for error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    Flag,
    Env,
    Default,
}

/// The parsed model config.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    path: PathBuf,
    source: ConfigSource,
    /// False when the default file does not exist (nothing is configured).
    exists: bool,
    providers: BTreeMap<String, ProviderConfig>,
    roles: BTreeMap<String, String>,
    /// `[mcp.servers.NAME]`, with relative `cwd`s resolved against the file's directory.
    mcp_servers: BTreeMap<String, crate::mcp::ServerConfig>,
    /// `[lsp.NAME]`: the language servers of the `lsp` tool.
    lsp_servers: BTreeMap<String, crate::lsp::ServerConfig>,
    /// `[tools] parallel`: how many read-class and `task` calls of one turn run together.
    parallel_tools: usize,
    /// `[[hooks.EVENT]]`: programs run around tool calls and runs ([`crate::hooks`]).
    hooks: crate::hooks::HooksConfig,
    /// `context_files`: the repository rule files a run reads ([`crate::run::context`]).
    context_files: Vec<String>,
}

/// The file names of `context_files` when the config does not say.
pub const DEFAULT_CONTEXT_FILES: &[&str] = &["AGENTS.md"];

/// Checks one `context_files` entry: a plain file name, looked for in each directory.
fn check_context_file(name: &str) -> std::result::Result<(), String> {
    let plain =
        !(name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']));
    if plain {
        return Ok(());
    }
    Err(format!(
        "context_files entry {name:?} must be a plain file name (like \"AGENTS.md\"), looked \
         for in each directory from the repository root down to the workspace"
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    /// Repository rule files read at each run's start (default `["AGENTS.md"]`; `[]`: none).
    #[serde(default)]
    context_files: Option<Vec<String>>,
    #[serde(default)]
    providers: BTreeMap<String, ProviderConfig>,
    #[serde(default)]
    roles: BTreeMap<String, String>,
    #[serde(default)]
    mcp: crate::mcp::McpSection,
    #[serde(default)]
    lsp: BTreeMap<String, crate::lsp::ServerConfig>,
    #[serde(default)]
    tools: ToolsSection,
    #[serde(default)]
    hooks: crate::hooks::HooksConfig,
}

/// `[tools]`: how tool calls run.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolsSection {
    /// Calls of one turn that may run together (read-class tools and `task` children);
    /// default 4, 1 runs every call alone.
    parallel: Option<usize>,
}

/// One `[providers.NAME]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ProviderConfig {
    Openai(OpenAiConfig),
    Anthropic(AnthropicConfig),
    Command(CommandConfig),
    Script(ScriptConfig),
}

impl ProviderConfig {
    /// The variable holding the provider's key, if it has one.
    pub fn api_key_env(&self) -> Option<&str> {
        match self {
            ProviderConfig::Openai(o) => o.api_key_env.as_deref(),
            ProviderConfig::Anthropic(a) => a.api_key_env.as_deref(),
            ProviderConfig::Command(_) | ProviderConfig::Script(_) => None,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiConfig {
    pub base_url: String,
    pub model: String,
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Sampling: 0 to 2.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling: above 0, at most 1.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// The output cap of one model call ([`DEFAULT_MAX_TOKENS`] when absent).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    #[serde(default)]
    pub seed: Option<i64>,
    /// Server-specific request fields, merged into the top level of the body.
    #[serde(default)]
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,
    /// Transient failures (HTTP 408/429/5xx, reset connections) one call retries, with backoff
    /// ([`super::http`]); default [`super::http::DEFAULT_MAX_TRANSPORT_RETRIES`].
    #[serde(default)]
    pub max_transport_retries: Option<u32>,
    /// Stream answers: live text (`modelTextDelta`), a read timeout between chunks.
    #[serde(default)]
    pub stream: Option<bool>,
    /// The model's context window in tokens: with it, a run compacts its conversation once a
    /// request would pass `compact_at` of it ([`crate::run::compaction`]).
    #[serde(default)]
    pub context_window: Option<u64>,
    /// The share of `context_window` at which a run compacts (above 0, at most 1; default
    /// [`crate::run::compaction::DEFAULT_COMPACT_AT`]).
    #[serde(default)]
    pub compact_at: Option<f64>,
    #[serde(default)]
    pub price: Option<Price>,
}

/// `[providers.NAME.price]`: what the provider charges per million reported tokens. Only with
/// real rates does a DWP plan run meter spend (`meter_spend`, [`crate::host`]); nothing is ever
/// priced from bytes or estimates.
///
/// Written `price = { input_per_mtok = 3.0, output_per_mtok = 15.0, cache_read_per_mtok = 0.3,
/// cache_write_per_mtok = 3.75 }`; the older names `input_per_million` and `output_per_million`
/// still read. The cache rates default to the input rate (the tokens are part of the input).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    #[serde(rename = "input_per_mtok", alias = "input_per_million")]
    pub input_per_million: f64,
    #[serde(rename = "output_per_mtok", alias = "output_per_million")]
    pub output_per_million: f64,
    #[serde(default)]
    pub cache_read_per_mtok: Option<f64>,
    #[serde(default)]
    pub cache_write_per_mtok: Option<f64>,
    /// Only `USD` (the currency DWP spend limits and `maxCostUsd` are in); the default.
    #[serde(default = "usd")]
    pub currency: String,
}

fn usd() -> String {
    "USD".into()
}

impl Price {
    /// What one call with these reported tokens cost, in US dollars: the cached parts of the
    /// input at their rates, the rest of the input and the output at theirs.
    pub fn cost_usd(&self, input: u64, output: u64, cache_read: u64, cache_write: u64) -> f64 {
        let plain = input.saturating_sub(cache_read.saturating_add(cache_write));
        let read = self.cache_read_per_mtok.unwrap_or(self.input_per_million);
        let write = self.cache_write_per_mtok.unwrap_or(self.input_per_million);
        (plain as f64 * self.input_per_million
            + cache_read as f64 * read
            + cache_write as f64 * write
            + output as f64 * self.output_per_million)
            / 1_000_000.0
    }
}

/// One `[providers.NAME]` table of `kind = "anthropic"` (the Messages API).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnthropicConfig {
    /// The API root (default `https://api.anthropic.com`); a proxy or gateway's address.
    #[serde(default)]
    pub base_url: Option<String>,
    pub model: String,
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// The `anthropic-version` header (default [`super::anthropic::DEFAULT_ANTHROPIC_VERSION`]).
    #[serde(default)]
    pub anthropic_version: Option<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Sampling: 0 to 1.
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    /// The output cap of one call, which the API requires ([`DEFAULT_MAX_TOKENS`] when absent).
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Prompt-cache breakpoints on system + tools and on the last message (default true).
    #[serde(default)]
    pub cache: Option<bool>,
    #[serde(default)]
    pub extra_body: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    pub max_transport_retries: Option<u32>,
    /// Stream answers: live text (`modelTextDelta`), a read timeout between chunks.
    #[serde(default)]
    pub stream: Option<bool>,
    /// The model's context window in tokens: with it, a run compacts its conversation once a
    /// request would pass `compact_at` of it ([`crate::run::compaction`]).
    #[serde(default)]
    pub context_window: Option<u64>,
    /// The share of `context_window` at which a run compacts (above 0, at most 1; default
    /// [`crate::run::compaction::DEFAULT_COMPACT_AT`]).
    #[serde(default)]
    pub compact_at: Option<f64>,
    #[serde(default)]
    pub price: Option<Price>,
}

/// Body fields an `anthropic` provider writes itself, or that change how replies are read.
const ANTHROPIC_OWN_FIELDS: &[&str] = &[
    "model",
    "messages",
    "tools",
    "stream",
    "system",
    "tool_choice",
];

impl AnthropicConfig {
    /// The options every request carries (`max_tokens` always; `seed` does not exist here).
    pub fn options(&self) -> RequestOptions {
        RequestOptions {
            temperature: self.temperature,
            top_p: self.top_p,
            max_tokens: Some(self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
            seed: None,
            extra_body: self.extra_body.clone().unwrap_or_default(),
            cache: Some(self.cache.unwrap_or(true)),
            stream: self.stream.filter(|s| *s),
        }
    }

    fn check(&self, at: &str) -> std::result::Result<(), String> {
        if let Some(url) = &self.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(format!(
                "{at} base_url `{url}` must start with http:// or https://"
            ));
        }
        if self.model.trim().is_empty() {
            return Err(format!("{at} model is empty"));
        }
        if let Some(t) = self.temperature
            && !(t.is_finite() && (0.0..=1.0).contains(&t))
        {
            return Err(format!(
                "{at} temperature must be between 0 and 1, found {t}"
            ));
        }
        if let Some(p) = self.top_p
            && !(p.is_finite() && p > 0.0 && p <= 1.0)
        {
            return Err(format!(
                "{at} top_p must be above 0 and at most 1, found {p}"
            ));
        }
        if self.max_tokens == Some(0) {
            return Err(format!("{at} max_tokens must be at least 1"));
        }
        if let Some(v) = &self.anthropic_version
            && (v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        {
            return Err(format!(
                "{at} anthropic_version `{v}` is not a version (e.g. 2023-06-01)"
            ));
        }
        let typed = [
            ("temperature", self.temperature.is_some()),
            ("top_p", self.top_p.is_some()),
            ("max_tokens", true),
        ];
        for key in self.extra_body.iter().flat_map(|b| b.keys()) {
            if ANTHROPIC_OWN_FIELDS.contains(&key.as_str()) {
                return Err(format!(
                    "{at} extra_body cannot set `{key}`: the runtime writes it or decides it \
                     (extra_body is for server-specific options such as `top_k`)"
                ));
            }
            if typed.iter().any(|(name, set)| *set && name == key) {
                return Err(format!(
                    "{at} extra_body cannot set `{key}`: set it directly (max_tokens = …)"
                ));
            }
        }
        if let Some(body) = &self.extra_body
            && let Some(path) = credential_in(body)
        {
            return Err(format!(
                "{at} extra_body.{path} looks like a credential; a config holds no secret \
                 (it would be recorded in run.json): give the key with api_key_env instead"
            ));
        }
        check_retries(at, self.max_transport_retries)
    }
}

/// `max_tokens` of an `openai` provider that does not set it: enough for a long edit, and a
/// bound on a model that never stops.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Body fields the runtime writes itself; `extra_body` may not replace them.
const OWN_BODY_FIELDS: &[&str] = &["model", "messages", "tools", "stream"];
/// Request fields that change what a reply looks like or when a tool is called, which the
/// runtime's reply reading and turn loop rely on: `n` (several choices; only the first would be
/// read, the others paid for), `tool_choice` (forcing or forbidding tools is the agent's and
/// the runtime's decision), the legacy `functions`/`function_call` (replies would come as
/// `function_call`, which is not read as a tool call) and `stream_options` (only with
/// `stream`, which the runtime owns). `response_format` stays allowed: the reply is still text
/// in `content`.
const REPLY_SHAPE_FIELDS: &[&str] = &[
    "n",
    "tool_choice",
    "functions",
    "function_call",
    "stream_options",
];

/// The request options of an `openai` provider, as sent (and as run records show them).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// `None` only when `extra_body` sets `max_completion_tokens` instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// Prompt-cache breakpoints (`anthropic` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache: Option<bool>,
    /// Shown only when on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
}

impl OpenAiConfig {
    /// The options every request of this provider carries.
    pub fn options(&self) -> RequestOptions {
        let extra_body = self.extra_body.clone().unwrap_or_default();
        let max_tokens = match self.max_tokens {
            Some(n) => Some(n),
            None if extra_body.contains_key("max_completion_tokens") => None,
            None => Some(DEFAULT_MAX_TOKENS),
        };
        RequestOptions {
            temperature: self.temperature,
            top_p: self.top_p,
            max_tokens,
            seed: self.seed,
            extra_body,
            cache: None,
            stream: self.stream.filter(|s| *s),
        }
    }

    /// Why the request options are invalid (`at` names the table).
    fn check_options(&self, at: &str) -> std::result::Result<(), String> {
        if let Some(t) = self.temperature
            && !(t.is_finite() && (0.0..=2.0).contains(&t))
        {
            return Err(format!(
                "{at} temperature must be between 0 and 2, found {t}"
            ));
        }
        if let Some(p) = self.top_p
            && !(p.is_finite() && p > 0.0 && p <= 1.0)
        {
            return Err(format!(
                "{at} top_p must be above 0 and at most 1, found {p}"
            ));
        }
        if self.max_tokens == Some(0) {
            return Err(format!("{at} max_tokens must be at least 1"));
        }
        let typed = [
            ("temperature", self.temperature.is_some()),
            ("top_p", self.top_p.is_some()),
            ("max_tokens", self.max_tokens.is_some()),
            ("seed", self.seed.is_some()),
        ];
        for key in self.extra_body.iter().flat_map(|b| b.keys()) {
            if OWN_BODY_FIELDS.contains(&key.as_str()) {
                return Err(format!(
                    "{at} extra_body cannot set `{key}`: the runtime writes it (extra_body is \
                     for server-specific options such as `cache_prompt` or `top_k`)"
                ));
            }
            if REPLY_SHAPE_FIELDS.contains(&key.as_str()) {
                return Err(format!(
                    "{at} extra_body cannot set `{key}`: it changes how replies are read or \
                     when tools are called, which the runtime decides"
                ));
            }
            if typed.iter().any(|(name, set)| *set && name == key) {
                return Err(format!(
                    "{at} sets `{key}` both directly and in extra_body; keep one"
                ));
            }
            if key == "max_completion_tokens" && self.max_tokens.is_some() {
                return Err(format!(
                    "{at} sets both max_tokens and extra_body.max_completion_tokens; keep one \
                     (with max_completion_tokens, max_tokens is not sent)"
                ));
            }
        }
        if let Some(body) = &self.extra_body
            && let Some(path) = credential_in(body)
        {
            // The value is not shown: it is the secret.
            return Err(format!(
                "{at} extra_body.{path} looks like a credential; a config holds no secret \
                 (it would be recorded in run.json): give the key with api_key_env instead"
            ));
        }
        Ok(())
    }
}

/// The dotted path of the first string in `body` that the `[mcp.servers].env` credential check
/// ([`crate::tools::env::secret_value`], by its key and value) calls a secret.
fn credential_in(body: &serde_json::Map<String, serde_json::Value>) -> Option<String> {
    use serde_json::Value;
    let mut stack: Vec<(String, String, &Value)> = body
        .iter()
        .map(|(k, v)| (k.clone(), k.clone(), v))
        .collect();
    while let Some((path, key, value)) = stack.pop() {
        match value {
            Value::String(text) => {
                // The name rules alone only for values long enough to be a secret: a
                // `stop_token = "</s>"` is no credential.
                let by_name = text.len() >= crate::redact::MIN_SECRET_LEN
                    && crate::tools::env::secret_value(&key, std::ffi::OsStr::new(text));
                if by_name || crate::tools::env::sensitive_value(text) {
                    return Some(path);
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    stack.push((format!("{path}[{i}]"), key.clone(), item));
                }
            }
            Value::Object(map) => {
                for (k, v) in map {
                    stack.push((format!("{path}.{k}"), k.clone(), v));
                }
            }
            _ => {}
        }
    }
    None
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandConfig {
    pub argv: Vec<String>,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// The model's context window in tokens: with it, a run compacts its conversation once a
    /// request would pass `compact_at` of it ([`crate::run::compaction`]).
    #[serde(default)]
    pub context_window: Option<u64>,
    /// The share of `context_window` at which a run compacts (above 0, at most 1; default
    /// [`crate::run::compaction::DEFAULT_COMPACT_AT`]).
    #[serde(default)]
    pub compact_at: Option<f64>,
    #[serde(default)]
    pub price: Option<Price>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptConfig {
    pub path: PathBuf,
    /// The model's context window in tokens: with it, a run compacts its conversation once a
    /// request would pass `compact_at` of it ([`crate::run::compaction`]).
    #[serde(default)]
    pub context_window: Option<u64>,
    /// The share of `context_window` at which a run compacts (above 0, at most 1; default
    /// [`crate::run::compaction::DEFAULT_COMPACT_AT`]).
    #[serde(default)]
    pub compact_at: Option<f64>,
    #[serde(default)]
    pub price: Option<Price>,
}

/// What serves a role, for run records and events (never a credential).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderInfo {
    /// The `[providers.NAME]` name.
    pub name: String,
    /// `openai`, `command` or `script`.
    pub kind: String,
    /// The model name (`openai` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The request options sent with every call (`openai` only): temperature, topP, maxTokens,
    /// seed, extraBody.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<serde_json::Value>,
}

impl ProviderConfig {
    /// `context_window` and `compact_at`, as given.
    pub fn context(&self) -> (Option<u64>, Option<f64>) {
        match self {
            ProviderConfig::Openai(o) => (o.context_window, o.compact_at),
            ProviderConfig::Anthropic(a) => (a.context_window, a.compact_at),
            ProviderConfig::Command(c) => (c.context_window, c.compact_at),
            ProviderConfig::Script(s) => (s.context_window, s.compact_at),
        }
    }

    /// `[providers.NAME.price]`, if given.
    pub fn price(&self) -> Option<&Price> {
        match self {
            ProviderConfig::Openai(o) => o.price.as_ref(),
            ProviderConfig::Anthropic(a) => a.price.as_ref(),
            ProviderConfig::Command(c) => c.price.as_ref(),
            ProviderConfig::Script(s) => s.price.as_ref(),
        }
    }
}

fn default_context_files() -> Vec<String> {
    DEFAULT_CONTEXT_FILES
        .iter()
        .map(|s| s.to_string())
        .collect()
}

impl ModelConfig {
    /// Finds and parses the config (precedence in the module docs).
    pub fn load(explicit: Option<&Path>) -> Result<ModelConfig> {
        Self::load_with(explicit, crate::own_env::var_os)
    }

    /// [`ModelConfig::load`] with an injected environment, for tests.
    pub fn load_with(
        explicit: Option<&Path>,
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<ModelConfig> {
        let (path, source) = match explicit {
            Some(p) => (p.to_path_buf(), ConfigSource::Flag),
            None => Self::default_location_with(env)?,
        };
        let path = std::path::absolute(&path).unwrap_or(path);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound && source == ConfigSource::Default =>
            {
                return Ok(ModelConfig {
                    path,
                    source,
                    exists: false,
                    providers: BTreeMap::new(),
                    roles: BTreeMap::new(),
                    mcp_servers: BTreeMap::new(),
                    lsp_servers: BTreeMap::new(),
                    parallel_tools: DEFAULT_PARALLEL_TOOLS,
                    hooks: Default::default(),
                    context_files: default_context_files(),
                });
            }
            Err(e) => {
                let from = match source {
                    ConfigSource::Flag => " (given with --config)",
                    ConfigSource::Env => " (named by KXEN_AGENT_CONFIG)",
                    ConfigSource::Default => "",
                };
                // A directory where the file should be is the user's mistake (exit 4), as for
                // --agent, --policy and --task-file; other read failures are the system's.
                let is_dir = e.kind() == std::io::ErrorKind::IsADirectory;
                let otherwise = if is_dir {
                    ErrorKind::InvalidInput
                } else {
                    ErrorKind::Failed
                };
                let err = Error::io_told(
                    format!("cannot read the model config {}: {e}{from}", path.display()),
                    &path,
                    e,
                    otherwise,
                );
                return Err(if is_dir {
                    err.with_hint("pass the config file itself (a TOML file), not a directory")
                } else {
                    err
                });
            }
        };
        // Not UTF-8 is a broken file the user wrote (exit 4), not a failure of the system.
        let text = String::from_utf8(bytes).map_err(|e| {
            Error::invalid(format!(
                "invalid model config {}: not UTF-8 text (invalid byte at offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            ))
            .with_hint("save the config as UTF-8 (TOML files are UTF-8)")
        })?;
        Self::parse(&text, &path, source)
    }

    /// Where [`ModelConfig::load`] looks without `--config`: `$KXEN_AGENT_CONFIG`, else
    /// `$XDG_CONFIG_HOME/kxen-agent/config.toml`, else `~/.config/kxen-agent/config.toml` (and
    /// where `kxen-agent config init` writes by default, so that the file it writes is the one
    /// a plain `kxen-agent run` reads).
    pub fn default_location() -> Result<(PathBuf, ConfigSource)> {
        Self::default_location_with(crate::own_env::var_os)
    }

    /// [`ModelConfig::default_location`] with an injected environment, for tests.
    pub fn default_location_with(
        env: impl Fn(&str) -> Option<OsString>,
    ) -> Result<(PathBuf, ConfigSource)> {
        let nonempty = |name: &str| env(name).filter(|v| !v.is_empty());
        if let Some(p) = nonempty("KXEN_AGENT_CONFIG") {
            Ok((PathBuf::from(p), ConfigSource::Env))
        } else if let Some(xdg) = nonempty("XDG_CONFIG_HOME") {
            Ok((
                PathBuf::from(xdg).join("kxen-agent/config.toml"),
                ConfigSource::Default,
            ))
        } else if let Some(home) = nonempty("HOME") {
            Ok((
                PathBuf::from(home).join(".config/kxen-agent/config.toml"),
                ConfigSource::Default,
            ))
        } else {
            Err(Error::invalid(
                "cannot find the model config: neither --config, KXEN_AGENT_CONFIG, \
                 XDG_CONFIG_HOME nor HOME is set",
            )
            .with_hint("pass --config FILE (see docs/models.md)"))
        }
    }

    /// Parses config text that was read from `path` (relative script paths and command
    /// directories are resolved against its directory).
    pub fn parse(text: &str, path: &Path, source: ConfigSource) -> Result<ModelConfig> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| {
            Error::invalid(format!(
                "invalid model config {}: {}",
                path.display(),
                e.to_string().trim_end()
            ))
        })?;
        let parallel_tools = match file.tools.parallel {
            None => DEFAULT_PARALLEL_TOOLS,
            Some(n @ 1..=64) => n,
            Some(n) => {
                return Err(Error::invalid(format!(
                    "invalid model config {}: [tools] parallel = {n} is outside 1..=64",
                    path.display()
                )));
            }
        };
        let context_files = file.context_files.unwrap_or_else(default_context_files);
        for name in &context_files {
            check_context_file(name).map_err(|why| {
                Error::invalid(format!("invalid model config {}: {why}", path.display()))
            })?;
        }
        let config = ModelConfig {
            parallel_tools,
            context_files,
            path: path.to_path_buf(),
            source,
            exists: true,
            providers: file.providers,
            roles: file.roles,
            mcp_servers: {
                let dir = path.parent().unwrap_or(Path::new("."));
                file.mcp
                    .servers
                    .into_iter()
                    .map(|(name, entry)| (name, entry.resolved(dir)))
                    .collect()
            },
            lsp_servers: file.lsp,
            hooks: file.hooks,
        };
        config.validate()?;
        for p in config.providers.values() {
            if let Some(name) = p.api_key_env() {
                crate::tools::register_provider_key_env(name);
                crate::own_env::forget(name)?;
            }
        }
        // A bearer token of an MCP server is a key like a provider's: never in a tool's or a
        // server process's environment, redacted from every message, wiped from our own block.
        for entry in config.mcp_servers.values() {
            if let Some(name) = &entry.bearer_token_env {
                crate::tools::register_provider_key_env(name);
                crate::own_env::forget(name)?;
            }
        }
        Ok(config)
    }

    fn invalid(&self, what: String) -> Error {
        Error::invalid(format!(
            "invalid model config {}: {what}",
            self.path.display()
        ))
    }

    fn validate(&self) -> Result<()> {
        for (name, p) in &self.providers {
            let at = format!("[providers.{name}]");
            if name.trim().is_empty() {
                return Err(self.invalid("a provider name is empty".into()));
            }
            let timeout = match p {
                ProviderConfig::Openai(o) => {
                    if !(o.base_url.starts_with("http://") || o.base_url.starts_with("https://")) {
                        return Err(self.invalid(format!(
                            "{at} base_url `{}` must start with http:// or https://",
                            o.base_url
                        )));
                    }
                    if o.model.trim().is_empty() {
                        return Err(self.invalid(format!("{at} model is empty")));
                    }
                    if let Some(env) = &o.api_key_env
                        && !valid_env_name(env)
                    {
                        // Never echo it: what fails this check is often a pasted key.
                        return Err(self.invalid(format!(
                            "{at} api_key_env ({} characters, not shown) is not an environment \
                             variable name (if it is the key itself, move it to the environment); \
                             name the variable that holds the key, e.g. api_key_env = \"OPENAI_API_KEY\"",
                            env.chars().count()
                        )));
                    }
                    o.check_options(&at).map_err(|why| self.invalid(why))?;
                    check_retries(&at, o.max_transport_retries).map_err(|why| self.invalid(why))?;
                    o.timeout_ms
                }
                ProviderConfig::Anthropic(a) => {
                    if let Some(env) = &a.api_key_env
                        && !valid_env_name(env)
                    {
                        // Never echo it: what fails this check is often a pasted key.
                        return Err(self.invalid(format!(
                            "{at} api_key_env ({} characters, not shown) is not an environment \
                             variable name (if it is the key itself, move it to the environment); \
                             name the variable that holds the key, e.g. api_key_env = \"ANTHROPIC_API_KEY\"",
                            env.chars().count()
                        )));
                    }
                    a.check(&at).map_err(|why| self.invalid(why))?;
                    a.timeout_ms
                }
                ProviderConfig::Command(c) => {
                    if c.argv.first().is_none_or(|a| a.is_empty()) {
                        return Err(self.invalid(format!("{at} argv must name a program")));
                    }
                    c.timeout_ms
                }
                ProviderConfig::Script(s) => {
                    if s.path.as_os_str().is_empty() {
                        return Err(self.invalid(format!("{at} path is empty")));
                    }
                    None
                }
            };
            if timeout == Some(0) {
                return Err(self.invalid(format!("{at} timeout_ms must be at least 1")));
            }
            match p.context() {
                (Some(w), _) if w < MIN_CONTEXT_WINDOW => {
                    return Err(self.invalid(format!(
                        "{at} context_window = {w} is below {} tokens (no model's window is \
                         that small; the value is in tokens, not kilotokens)",
                        MIN_CONTEXT_WINDOW
                    )));
                }
                (None, Some(_)) => {
                    return Err(self.invalid(format!(
                        "{at} sets compact_at without context_window; compact_at is a share of \
                         the window, so give context_window (tokens) too"
                    )));
                }
                (_, Some(f)) if !(f.is_finite() && f > 0.0 && f <= 1.0) => {
                    return Err(self.invalid(format!(
                        "{at} compact_at must be above 0 and at most 1, found {f}"
                    )));
                }
                _ => {}
            }
            if let Some(price) = p.price() {
                let rate_ok = |r: f64| r.is_finite() && r >= 0.0;
                let cache_ok = [price.cache_read_per_mtok, price.cache_write_per_mtok]
                    .into_iter()
                    .all(|r| r.is_none_or(rate_ok));
                if !(rate_ok(price.input_per_million)
                    && rate_ok(price.output_per_million)
                    && cache_ok)
                {
                    return Err(
                        self.invalid(format!("{at} price rates must be finite and at least 0"))
                    );
                }
                if price.currency != "USD" {
                    return Err(self.invalid(format!(
                        "{at} price currency must be \"USD\", found {:?}",
                        price.currency
                    )));
                }
            }
        }
        for (name, entry) in &self.mcp_servers {
            crate::mcp::config::check(name, entry).map_err(|why| self.invalid(why))?;
        }
        crate::lsp::config::check_all(&self.lsp_servers).map_err(|why| self.invalid(why))?;
        if let Some(why) = self.hooks.error() {
            return Err(self.invalid(why));
        }
        for (role, provider) in &self.roles {
            if !self.providers.contains_key(provider) {
                return Err(self.invalid(format!(
                    "[roles] {role} = \"{provider}\" names no provider; define [providers.{provider}]"
                ))
                .with_hint(format!(
                    "defined providers: {}",
                    self.provider_names()
                )));
            }
        }
        Ok(())
    }

    fn provider_names(&self) -> String {
        if self.providers.is_empty() {
            "none".into()
        } else {
            self.providers
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        }
    }

    /// The `price` of the provider that serves `role` (`None`: none configured, or no such
    /// role).
    pub fn price_for(&self, role: &str) -> Option<Price> {
        let (_, provider, _) = self.provider_config(role).ok()?;
        provider.price().cloned()
    }

    /// `context_files` (default [`DEFAULT_CONTEXT_FILES`]).
    pub fn context_files(&self) -> &[String] {
        &self.context_files
    }

    /// `[tools] parallel` (default [`DEFAULT_PARALLEL_TOOLS`]).
    pub fn parallel_tools(&self) -> usize {
        self.parallel_tools
    }

    /// The `[mcp.servers.NAME]` tables.
    pub fn mcp_servers(&self) -> &BTreeMap<String, crate::mcp::ServerConfig> {
        &self.mcp_servers
    }

    /// The `[[hooks.EVENT]]` tables.
    pub fn hooks(&self) -> &crate::hooks::HooksConfig {
        &self.hooks
    }

    /// The `[lsp.NAME]` tables.
    pub fn lsp_servers(&self) -> &BTreeMap<String, crate::lsp::ServerConfig> {
        &self.lsp_servers
    }

    /// The config file's path (it may not exist when it is the default location).
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn source(&self) -> ConfigSource {
        self.source
    }

    /// The provider config serving `role`, with its name, and the directory its relative paths
    /// are resolved against (for [`crate::host`], which inspects what the runtime will call).
    pub fn provider_config(&self, role: &str) -> Result<(&str, &ProviderConfig, PathBuf)> {
        let (name, p) = self.lookup(role)?;
        let dir = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        Ok((name, p, dir))
    }

    /// Every `[providers.NAME.price]`, by provider name (`session report` prices recorded
    /// tokens with them; run records name the provider, never its rates).
    pub fn prices(&self) -> impl Iterator<Item = (&str, &Price)> {
        self.providers
            .iter()
            .filter_map(|(name, p)| p.price().map(|price| (name.as_str(), price)))
    }

    /// The provider name `[roles]` maps `role` to, if it does.
    pub fn role_provider(&self, role: &str) -> Option<&str> {
        self.roles.get(role).map(String::as_str)
    }

    /// Whether `[roles]` maps `role` (an optional role such as `compaction` falls back when not).
    pub fn has_role(&self, role: &str) -> bool {
        self.exists && self.roles.contains_key(role)
    }

    /// The provider config serving `role`, with its name.
    fn lookup(&self, role: &str) -> Result<(&str, &ProviderConfig)> {
        if !self.exists {
            return Err(Error::invalid(format!(
                "no model config: {} does not exist, so model role `{role}` has no provider",
                self.path.display()
            ))
            .with_hint(
                "create it (see docs/models.md), or pass --config FILE or set KXEN_AGENT_CONFIG",
            ));
        }
        let Some(name) = self.roles.get(role) else {
            return Err(Error::invalid(format!(
                "model config {}: role `{role}` is not mapped to a provider",
                self.path.display()
            ))
            .with_hint(format!(
                "add `{role} = \"PROVIDER\"` under [roles] in {} (providers: {})",
                self.path.display(),
                self.provider_names()
            )));
        };
        let provider = self
            .providers
            .get(name)
            .expect("validate() checked that every role names a provider");
        Ok((name, provider))
    }

    /// Describes the provider serving `role` (for run records; holds no credential).
    pub fn provider_info(&self, role: &str) -> Result<ProviderInfo> {
        let (name, p) = self.lookup(role)?;
        let (kind, model, options) = match p {
            ProviderConfig::Openai(o) => (
                "openai",
                Some(o.model.clone()),
                serde_json::to_value(o.options()).ok(),
            ),
            ProviderConfig::Anthropic(a) => (
                "anthropic",
                Some(a.model.clone()),
                serde_json::to_value(a.options()).ok(),
            ),
            ProviderConfig::Command(_) => ("command", None, None),
            ProviderConfig::Script(_) => ("script", None, None),
        };
        Ok(ProviderInfo {
            name: name.to_string(),
            kind: kind.to_string(),
            model,
            options,
        })
    }

    /// Refuses (exit 4) a `passEnv` name that is an `api_key_env` of this config. Provider keys
    /// reach only the model client; the policy cannot know a custom key name, so the check that
    /// refuses `OPENAI_API_KEY` in `passEnv` is repeated here, where the names are known, rather
    /// than letting the filter drop the variable silently.
    pub fn check_pass_env(&self, pass_env: &[String]) -> Result<()> {
        for (name, p) in &self.providers {
            if let Some(key) = p.api_key_env()
                && let Some(listed) = pass_env.iter().find(|n| n.eq_ignore_ascii_case(key))
            {
                return Err(Error::invalid(format!(
                    "passEnv names {listed}, the api_key_env of [providers.{name}] in {}: a \
                     model-provider key reaches only the model client, never a tool",
                    self.path.display()
                ))
                .with_hint(format!(
                    "remove {listed} from --pass-env and from the policy's passEnv"
                )));
            }
        }
        Ok(())
    }

    /// A client for the provider serving `role`.
    pub fn provider_for(&self, role: &str) -> Result<Box<dyn Provider>> {
        let (name, p) = self.lookup(role)?;
        let dir = self
            .path
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let timeout =
            |ms: Option<u64>| Duration::from_millis(ms.unwrap_or(DEFAULT_PROVIDER_TIMEOUT_MS));
        Ok(match p {
            ProviderConfig::Openai(o) => Box::new(
                OpenAiProvider::new(
                    name,
                    &o.base_url,
                    &o.model,
                    o.api_key_env.clone(),
                    timeout(o.timeout_ms),
                )
                .with_options(o.options())
                .with_stream(o.stream.unwrap_or(false))
                .with_max_transport_retries(
                    o.max_transport_retries
                        .unwrap_or(super::http::DEFAULT_MAX_TRANSPORT_RETRIES),
                ),
            ),
            ProviderConfig::Anthropic(a) => Box::new(
                AnthropicProvider::new(
                    name,
                    a.base_url
                        .as_deref()
                        .unwrap_or(super::anthropic::DEFAULT_BASE_URL),
                    &a.model,
                    a.api_key_env.clone(),
                    timeout(a.timeout_ms),
                )
                .with_options(a.options())
                .with_cache(a.cache.unwrap_or(true))
                .with_stream(a.stream.unwrap_or(false))
                .with_version(
                    a.anthropic_version
                        .as_deref()
                        .unwrap_or(super::anthropic::DEFAULT_ANTHROPIC_VERSION),
                )
                .with_max_transport_retries(
                    a.max_transport_retries
                        .unwrap_or(super::http::DEFAULT_MAX_TRANSPORT_RETRIES),
                ),
            ),
            ProviderConfig::Command(c) => Box::new(CommandProvider::new(
                name,
                c.argv.clone(),
                dir,
                timeout(c.timeout_ms),
            )),
            ProviderConfig::Script(s) => Box::new(ScriptProvider::new(dir.join(&s.path))),
        })
    }
}

/// Why `max_transport_retries` is out of range (`at` names the table).
fn check_retries(at: &str, n: Option<u32>) -> std::result::Result<(), String> {
    match n {
        Some(n) if n > super::http::MAX_TRANSPORT_RETRIES => Err(format!(
            "{at} max_transport_retries = {n} is above {}",
            super::http::MAX_TRANSPORT_RETRIES
        )),
        _ => Ok(()),
    }
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    const ISSUE_EXAMPLE: &str = r#"
[providers.local]
kind = "openai"                      # OpenAI-compatible /chat/completions with tool calling
base_url = "http://127.0.0.1:11434/v1"
model = "qwen2.5-coder:7b"
api_key_env = "KXEN_TEST_CONFIG_KEY"
[providers.bridge]
kind = "command"                      # argv; request JSON on stdin, response JSON on stdout
argv = ["my-llm-bridge", "--json"]
timeout_ms = 120000
[providers.demo]
kind = "script"                       # deterministic replay
path = "turns.jsonl"                  # relative to the config file
[roles]
execution = "local"
planning = "local"
demo = "demo"
"#;

    fn parse(text: &str) -> Result<ModelConfig> {
        ModelConfig::parse(text, Path::new("/cfg/config.toml"), ConfigSource::Flag)
    }

    #[test]
    fn context_window_and_compact_at_are_checked_and_the_compaction_role_is_optional() {
        let table = |extra: &str| {
            format!(
                "[providers.s]\nkind = \"script\"\npath = \"t.jsonl\"\n{extra}\n[roles]\nexecution = \"s\"\n"
            )
        };
        for (extra, why) in [
            (
                "context_window = 100",
                "context_window = 100 is below 256 tokens",
            ),
            ("compact_at = 0.5", "sets compact_at without context_window"),
            (
                "context_window = 8000\ncompact_at = 0",
                "compact_at must be above 0",
            ),
            (
                "context_window = 8000\ncompact_at = 1.5",
                "compact_at must be above 0 and at most 1",
            ),
            (
                "context_window = 8000\ncompact_at = nan",
                "compact_at must be above 0",
            ),
        ] {
            let err = parse(&table(extra)).unwrap_err();
            assert_eq!(err.kind, ErrorKind::InvalidInput, "{extra}");
            assert!(err.message.contains(why), "{extra}: {}", err.message);
            assert!(err.message.contains("[providers.s]"), "{}", err.message);
        }
        let c = parse(&table("context_window = 8000")).unwrap();
        let (_, p, _) = c.provider_config("execution").unwrap();
        assert_eq!(p.context(), (Some(8000), None));
        assert!(!c.has_role("compaction"));
        let execution: std::sync::Arc<dyn Provider> =
            std::sync::Arc::from(c.provider_for("execution").unwrap());
        let s = crate::run::compaction::settings(&c, "execution", &execution)
            .unwrap()
            .unwrap();
        assert_eq!(s.threshold(), 6400);
        assert!(
            std::sync::Arc::ptr_eq(&s.provider, &execution),
            "falls back to execution's"
        );
        let mapped = parse(&format!(
            "{}compaction = \"t\"\n[providers.t]\nkind = \"script\"\npath = \"u.jsonl\"\n",
            table("context_window = 8000\ncompact_at = 0.5")
        ))
        .unwrap();
        assert!(mapped.has_role("compaction"));
        let s = crate::run::compaction::settings(&mapped, "execution", &execution)
            .unwrap()
            .unwrap();
        assert_eq!(s.threshold(), 4000);
        assert!(!std::sync::Arc::ptr_eq(&s.provider, &execution));
        let none = parse(&table("")).unwrap();
        assert!(
            crate::run::compaction::settings(&none, "execution", &execution)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn parses_the_documented_example() {
        let c = parse(ISSUE_EXAMPLE).unwrap();
        assert_eq!(
            c.provider_info("execution").unwrap(),
            ProviderInfo {
                name: "local".into(),
                kind: "openai".into(),
                model: Some("qwen2.5-coder:7b".into()),
                options: Some(serde_json::json!({"maxTokens": DEFAULT_MAX_TOKENS})),
            }
        );
        assert_eq!(c.provider_info("demo").unwrap().kind, "script");
        assert!(c.provider_for("planning").is_ok());
        assert!(crate::tools::is_provider_key_env("KXEN_TEST_CONFIG_KEY"));
    }

    #[test]
    fn unknown_fields_and_kinds_are_rejected_naming_the_file() {
        for bad in [
            "[providers.a]\nkind = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\napi_key = \"sk-1\"\n",
            "[providers.a]\nkind = \"telepathy\"\n",
            "[providers.a]\nargv = [\"x\"]\n",
            "[provider.a]\nkind = \"script\"\npath = \"x\"\n",
            "[roles]\nexecution = 3\n",
            "not toml [",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidInput, "{bad}");
            assert!(e.message.contains("/cfg/config.toml"), "{}", e.message);
            assert!(!e.message.contains("sk-1"));
        }
    }

    #[test]
    fn semantic_errors() {
        for (bad, needle) in [
            (
                "[providers.a]\nkind = \"openai\"\nbase_url = \"localhost\"\nmodel = \"m\"\n",
                "base_url",
            ),
            (
                "[providers.a]\nkind = \"openai\"\nbase_url = \"http://x\"\nmodel = \"\"\n",
                "model",
            ),
            (
                "[providers.a]\nkind = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\napi_key_env = \"sk-abc\"\n",
                "api_key_env",
            ),
            (
                "[providers.a]\nkind = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\nextra_body = { api_key = \"sk-abcdefgh12345678\" }\n",
                "extra_body.api_key",
            ),
            (
                "[providers.a]\nkind = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\nextra_body = { headers = { Authorization = \"Bearer sk-abcdefgh12345678\" } }\n",
                "extra_body.headers.Authorization",
            ),
            (
                "[providers.a]\nkind = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\nextra_body = { n = 2 }\n",
                "`n`",
            ),
            (
                "[providers.a]\nkind = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\nextra_body = { tool_choice = \"none\" }\n",
                "tool_choice",
            ),
            (
                "[providers.a]\nkind = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\nextra_body = { functions = [] }\n",
                "functions",
            ),
            (
                "[providers.a]\nkind = \"openai\"\nbase_url = \"http://x\"\nmodel = \"m\"\nextra_body = { function_call = \"auto\" }\n",
                "function_call",
            ),
            ("[providers.a]\nkind = \"command\"\nargv = []\n", "argv"),
            (
                "[providers.a]\nkind = \"command\"\nargv = [\"x\"]\ntimeout_ms = 0\n",
                "timeout_ms",
            ),
            ("[roles]\nexecution = \"ghost\"\n", "ghost"),
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidInput);
            assert!(
                !e.message.contains("sk-abc"),
                "a pasted key is echoed: {}",
                e.message
            );
            assert!(e.message.contains(needle), "{}", e.message);
            assert!(e.message.contains("/cfg/config.toml"));
        }
    }

    #[test]
    fn missing_role_names_the_file_with_exit_4() {
        let c = parse("[providers.d]\nkind = \"script\"\npath = \"t.jsonl\"\n").unwrap();
        let Err(e) = c.provider_for("execution") else {
            panic!("expected an error")
        };
        assert_eq!(e.exit_code(), 4);
        assert!(e.message.contains("role `execution`") && e.message.contains("/cfg/config.toml"));
        assert!(e.hints[0].contains("[roles]"));
    }

    #[test]
    fn precedence_flag_env_xdg_home() {
        let tmp = tempfile::tempdir().unwrap();
        let write = |rel: &str, role: &str| {
            let p = tmp.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(
                &p,
                format!(
                    "[providers.p]\nkind = \"script\"\npath = \"t\"\n[roles]\n{role} = \"p\"\n"
                ),
            )
            .unwrap();
            p
        };
        let flag = write("flag.toml", "flag");
        let env = write("env.toml", "env");
        write("xdg/kxen-agent/config.toml", "xdg");
        write("home/.config/kxen-agent/config.toml", "home");
        let vars = |k: &str| -> Option<OsString> {
            match k {
                "KXEN_AGENT_CONFIG" => Some(env.clone().into()),
                "XDG_CONFIG_HOME" => Some(tmp.path().join("xdg").into()),
                "HOME" => Some(tmp.path().join("home").into()),
                _ => None,
            }
        };
        let has = |c: ModelConfig, role: &str| c.provider_info(role).is_ok();
        assert!(has(
            ModelConfig::load_with(Some(&flag), vars).unwrap(),
            "flag"
        ));
        assert!(has(ModelConfig::load_with(None, vars).unwrap(), "env"));
        let no_env = |k: &str| {
            if k == "KXEN_AGENT_CONFIG" {
                None
            } else {
                vars(k)
            }
        };
        assert!(has(ModelConfig::load_with(None, no_env).unwrap(), "xdg"));
        let home_only = |k: &str| if k == "HOME" { vars(k) } else { None };
        let c = ModelConfig::load_with(None, home_only).unwrap();
        assert_eq!(c.source(), ConfigSource::Default);
        assert!(has(c, "home"));
    }

    #[test]
    fn missing_files() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("nope.toml");
        let e = ModelConfig::load_with(Some(&missing), |_| None).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert!(e.message.contains("nope.toml") && e.message.contains("--config"));
        // A missing default file is fine until a role is needed.
        let home = tmp.path().to_path_buf();
        let c =
            ModelConfig::load_with(None, |k| (k == "HOME").then(|| home.clone().into())).unwrap();
        let Err(e) = c.provider_for("execution") else {
            panic!("expected an error")
        };
        assert_eq!(e.kind, ErrorKind::InvalidInput);
        assert!(e.message.contains(".config/kxen-agent/config.toml"));
    }

    proptest::proptest! {
        /// The config parser never panics, whatever the file holds.
        #[test]
        fn parse_never_panics(text in "(\\[|\\]|providers|roles|kind|=|\"|openai|script|command|base_url|model|argv|path|timeout_ms|[a-z0-9._ ]|\n){0,120}") {
            let _ = parse(&text);
        }
    }
}
