//! The `[providers.NAME]` tables of the model config ([`crate::config`] reads the file): the
//! settings of each kind of provider, their checks, and the client built from them.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

use super::Provider;
use super::anthropic::AnthropicProvider;
use super::command::CommandProvider;
use super::openai::OpenAiProvider;
use super::script::ScriptProvider;

/// Provider timeout when `timeout_ms` is not given: generous, since local models can be slow.
pub const DEFAULT_PROVIDER_TIMEOUT_MS: u64 = 300_000;
/// The smallest `context_window` the config accepts (tokens).
pub const MIN_CONTEXT_WINDOW: u64 = 256;

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
    /// Stream answers (default true; `false` asks for one JSON body): live text
    /// (`modelTextDelta`), a read timeout between chunks. A server that answers a streaming
    /// request with a JSON body anyway is read by its Content-Type ([`super::http::is_json`]).
    #[serde(default)]
    pub stream: Option<bool>,
    /// The model's context window in tokens: with it, a run compacts its conversation once a
    /// request would pass `compact_at` of it ([`crate::run::compaction`]).
    #[serde(default)]
    pub context_window: Option<u64>,
    /// Read tool calls the model wrote into its text (a ```` ```json ```` fence or a
    /// `<tool_call>` block naming an offered tool) when the server returned none
    /// ([`super::text_calls`]): for small local models behind a chat template the server cannot
    /// parse calls out of. Off by default.
    #[serde(default)]
    pub tool_calls_in_text: Option<bool>,
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
    /// Stream answers (default true; `false` asks for one JSON body): live text
    /// (`modelTextDelta`), a read timeout between chunks. A server that answers a streaming
    /// request with a JSON body anyway is read by its Content-Type ([`super::http::is_json`]).
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
            stream: self.stream.filter(|s| !*s),
            tool_calls_in_text: None,
        }
    }

    fn check(&self, at: &str) -> Result<()> {
        if let Some(url) = &self.base_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return Err(Error::invalid(format!(
                "{at} base_url `{url}` must start with http:// or https://"
            )));
        }
        if self.model.trim().is_empty() {
            return Err(Error::invalid(format!("{at} model is empty")));
        }
        if let Some(t) = self.temperature
            && !(t.is_finite() && (0.0..=1.0).contains(&t))
        {
            return Err(Error::invalid(format!(
                "{at} temperature must be between 0 and 1, found {t}"
            )));
        }
        if let Some(p) = self.top_p
            && !(p.is_finite() && p > 0.0 && p <= 1.0)
        {
            return Err(Error::invalid(format!(
                "{at} top_p must be above 0 and at most 1, found {p}"
            )));
        }
        if self.max_tokens == Some(0) {
            return Err(Error::invalid(format!(
                "{at} max_tokens must be at least 1"
            )));
        }
        if let Some(v) = &self.anthropic_version
            && (v.is_empty() || !v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
        {
            return Err(Error::invalid(format!(
                "{at} anthropic_version `{v}` is not a version (e.g. 2023-06-01)"
            )));
        }
        let typed = [
            ("temperature", self.temperature.is_some()),
            ("top_p", self.top_p.is_some()),
            ("max_tokens", true),
        ];
        for key in self.extra_body.iter().flat_map(|b| b.keys()) {
            if ANTHROPIC_OWN_FIELDS.contains(&key.as_str()) {
                return Err(Error::invalid(format!(
                    "{at} extra_body cannot set `{key}`: the runtime writes it or decides it \
                     (extra_body is for server-specific options such as `top_k`)"
                )));
            }
            if typed.iter().any(|(name, set)| *set && name == key) {
                return Err(Error::invalid(format!(
                    "{at} extra_body cannot set `{key}`: set it directly (max_tokens = …)"
                )));
            }
        }
        if let Some(body) = &self.extra_body
            && let Some(path) = credential_in(body)
        {
            return Err(Error::invalid(format!(
                "{at} extra_body.{path} looks like a credential; a config holds no secret \
                 (it would be recorded in run.json): give the key with api_key_env instead"
            )));
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
    /// Shown only when off (`stream = false`): streaming is the default, so a run record of a
    /// config that does not mention it reads as it did before streaming became the default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Shown only when on: calls written into the text are read as calls
    /// ([`super::text_calls`]). Not sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls_in_text: Option<bool>,
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
            stream: self.stream.filter(|s| !*s),
            tool_calls_in_text: self.tool_calls_in_text.filter(|on| *on),
        }
    }

    /// Why the request options are invalid (`at` names the table).
    fn check_options(&self, at: &str) -> Result<()> {
        if let Some(t) = self.temperature
            && !(t.is_finite() && (0.0..=2.0).contains(&t))
        {
            return Err(Error::invalid(format!(
                "{at} temperature must be between 0 and 2, found {t}"
            )));
        }
        if let Some(p) = self.top_p
            && !(p.is_finite() && p > 0.0 && p <= 1.0)
        {
            return Err(Error::invalid(format!(
                "{at} top_p must be above 0 and at most 1, found {p}"
            )));
        }
        if self.max_tokens == Some(0) {
            return Err(Error::invalid(format!(
                "{at} max_tokens must be at least 1"
            )));
        }
        let typed = [
            ("temperature", self.temperature.is_some()),
            ("top_p", self.top_p.is_some()),
            ("max_tokens", self.max_tokens.is_some()),
            ("seed", self.seed.is_some()),
        ];
        for key in self.extra_body.iter().flat_map(|b| b.keys()) {
            if OWN_BODY_FIELDS.contains(&key.as_str()) {
                return Err(Error::invalid(format!(
                    "{at} extra_body cannot set `{key}`: the runtime writes it (extra_body is \
                     for server-specific options such as `cache_prompt` or `top_k`)"
                )));
            }
            if REPLY_SHAPE_FIELDS.contains(&key.as_str()) {
                return Err(Error::invalid(format!(
                    "{at} extra_body cannot set `{key}`: it changes how replies are read or \
                     when tools are called, which the runtime decides"
                )));
            }
            if typed.iter().any(|(name, set)| *set && name == key) {
                return Err(Error::invalid(format!(
                    "{at} sets `{key}` both directly and in extra_body; keep one"
                )));
            }
            if key == "max_completion_tokens" && self.max_tokens.is_some() {
                return Err(Error::invalid(format!(
                    "{at} sets both max_tokens and extra_body.max_completion_tokens; keep one \
                     (with max_completion_tokens, max_tokens is not sent)"
                )));
            }
        }
        if let Some(body) = &self.extra_body
            && let Some(path) = credential_in(body)
        {
            // The value is not shown: it is the secret.
            return Err(Error::invalid(format!(
                "{at} extra_body.{path} looks like a credential; a config holds no secret \
                 (it would be recorded in run.json): give the key with api_key_env instead"
            )));
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

impl ProviderConfig {
    /// Why the table cannot be used (`at` names it, e.g. `[providers.local]`); the caller adds
    /// the file.
    pub fn check(&self, at: &str) -> Result<()> {
        let timeout = match self {
            ProviderConfig::Openai(o) => {
                if !(o.base_url.starts_with("http://") || o.base_url.starts_with("https://")) {
                    return Err(Error::invalid(format!(
                        "{at} base_url `{}` must start with http:// or https://",
                        o.base_url
                    )));
                }
                if o.model.trim().is_empty() {
                    return Err(Error::invalid(format!("{at} model is empty")));
                }
                if let Some(env) = &o.api_key_env
                    && !valid_env_name(env)
                {
                    // Never echo it: what fails this check is often a pasted key.
                    return Err(Error::invalid(format!(
                        "{at} api_key_env ({} characters, not shown) is not an environment \
                         variable name (if it is the key itself, move it to the environment); \
                         name the variable that holds the key, e.g. api_key_env = \"OPENAI_API_KEY\"",
                        env.chars().count()
                    )));
                }
                o.check_options(at)?;
                check_retries(at, o.max_transport_retries)?;
                o.timeout_ms
            }
            ProviderConfig::Anthropic(a) => {
                if let Some(env) = &a.api_key_env
                    && !valid_env_name(env)
                {
                    // Never echo it: what fails this check is often a pasted key.
                    return Err(Error::invalid(format!(
                        "{at} api_key_env ({} characters, not shown) is not an environment \
                         variable name (if it is the key itself, move it to the environment); \
                         name the variable that holds the key, e.g. api_key_env = \"ANTHROPIC_API_KEY\"",
                        env.chars().count()
                    )));
                }
                a.check(at)?;
                a.timeout_ms
            }
            ProviderConfig::Command(c) => {
                if c.argv.first().is_none_or(|a| a.is_empty()) {
                    return Err(Error::invalid(format!("{at} argv must name a program")));
                }
                c.timeout_ms
            }
            ProviderConfig::Script(s) => {
                if s.path.as_os_str().is_empty() {
                    return Err(Error::invalid(format!("{at} path is empty")));
                }
                None
            }
        };
        if timeout == Some(0) {
            return Err(Error::invalid(format!(
                "{at} timeout_ms must be at least 1"
            )));
        }
        match self.context() {
            (Some(w), _) if w < MIN_CONTEXT_WINDOW => {
                return Err(Error::invalid(format!(
                    "{at} context_window = {w} is below {} tokens (no model's window is \
                     that small; the value is in tokens, not kilotokens)",
                    MIN_CONTEXT_WINDOW
                )));
            }
            (None, Some(_)) => {
                return Err(Error::invalid(format!(
                    "{at} sets compact_at without context_window; compact_at is a share of \
                     the window, so give context_window (tokens) too"
                )));
            }
            (_, Some(f)) if !(f.is_finite() && f > 0.0 && f <= 1.0) => {
                return Err(Error::invalid(format!(
                    "{at} compact_at must be above 0 and at most 1, found {f}"
                )));
            }
            _ => {}
        }
        if let Some(price) = self.price() {
            let rate_ok = |r: f64| r.is_finite() && r >= 0.0;
            let cache_ok = [price.cache_read_per_mtok, price.cache_write_per_mtok]
                .into_iter()
                .all(|r| r.is_none_or(rate_ok));
            if !(rate_ok(price.input_per_million) && rate_ok(price.output_per_million) && cache_ok)
            {
                return Err(Error::invalid(format!(
                    "{at} price rates must be finite and at least 0"
                )));
            }
            if price.currency != "USD" {
                return Err(Error::invalid(format!(
                    "{at} price currency must be \"USD\", found {:?}",
                    price.currency
                )));
            }
        }
        Ok(())
    }

    /// Describes the provider (for run records; holds no credential).
    pub fn info(&self, name: &str) -> ProviderInfo {
        let (kind, model, options) = match self {
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
        ProviderInfo {
            name: name.to_string(),
            kind: kind.to_string(),
            model,
            options,
        }
    }

    /// A client for this provider, named `name`; relative paths resolve against `dir` (the
    /// config file's directory).
    pub fn client(&self, name: &str, dir: PathBuf) -> Box<dyn Provider> {
        let timeout =
            |ms: Option<u64>| Duration::from_millis(ms.unwrap_or(DEFAULT_PROVIDER_TIMEOUT_MS));
        match self {
            ProviderConfig::Openai(o) => Box::new(
                OpenAiProvider::new(
                    name,
                    &o.base_url,
                    &o.model,
                    o.api_key_env.clone(),
                    timeout(o.timeout_ms),
                )
                .with_options(o.options())
                .with_stream(o.stream.unwrap_or(true))
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
                .with_stream(a.stream.unwrap_or(true))
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
        }
    }
}

/// Why `max_transport_retries` is out of range (`at` names the table).
fn check_retries(at: &str, n: Option<u32>) -> Result<()> {
    match n {
        Some(n) if n > super::http::MAX_TRANSPORT_RETRIES => Err(Error::invalid(format!(
            "{at} max_transport_retries = {n} is above {}",
            super::http::MAX_TRANSPORT_RETRIES
        ))),
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
