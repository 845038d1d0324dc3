//! The model config file: which provider serves which model role, and the sections of the
//! subsystems that read it. This module owns the file (where it is found, how it is parsed and
//! checked); each section's type belongs to its subsystem: `[providers]` to
//! [`crate::provider::config`], `[mcp]` to [`crate::mcp`], `[lsp]` to [`crate::lsp`], `[hooks]`
//! to [`crate::hooks`].
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
//! [telemetry]                          # trace export (crate::telemetry::config)
//! endpoint = "http://localhost:4318"
//! [lsp.python]                         # a language server of the `lsp` tool (crate::lsp::config)
//! command = ["/usr/bin/python3", "-m", "pylsp"]
//! extensions = [".py"]
//! ```

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::error::{Error, ErrorKind, Result};
use crate::provider::Provider;
use crate::provider::config::{Price, ProviderConfig, ProviderInfo};
use crate::telemetry::config::TelemetryConfig;

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
    /// `[tools]` whole, for the tools that read a table of their own (`tools::ToolsConfig`).
    tools: Arc<crate::tools::ToolsConfig>,
    /// `[[hooks.EVENT]]`: programs run around tool calls and runs ([`crate::hooks`]).
    hooks: crate::hooks::HooksConfig,
    /// `context_files`: the repository rule files a run reads ([`crate::run::context`]).
    context_files: Vec<String>,
    /// `[telemetry]`: trace export ([`crate::telemetry::config`]).
    telemetry: TelemetryConfig,
}

/// The file names of `context_files` when the config does not say.
pub const DEFAULT_CONTEXT_FILES: &[&str] = &["AGENTS.md"];

/// Checks one `context_files` entry: a plain file name, looked for in each directory (an invalid
/// input; the caller names the config file in front).
fn check_context_file(name: &str) -> Result<()> {
    let plain =
        !(name.is_empty() || name == "." || name == ".." || name.contains(['/', '\\', '\0']));
    if plain {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "context_files entry {name:?} must be a plain file name (like \"AGENTS.md\"), looked \
         for in each directory from the repository root down to the workspace"
    )))
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
    tools: crate::tools::ToolsConfig,
    #[serde(default)]
    hooks: crate::hooks::HooksConfig,
    #[serde(default)]
    telemetry: TelemetryConfig,
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
                    tools: Default::default(),
                    hooks: Default::default(),
                    context_files: default_context_files(),
                    telemetry: Default::default(),
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
                let context = format!("invalid model config {}", path.display());
                Error::wrap(ErrorKind::InvalidInput, context, why)
            })?;
        }
        let config = ModelConfig {
            parallel_tools,
            tools: Arc::new(file.tools),
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
            telemetry: file.telemetry,
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
        // A collector header (`[telemetry] headers_env`) is a credential too.
        for name in config.telemetry.secret_vars() {
            crate::tools::register_provider_key_env(name);
            crate::own_env::forget(name)?;
        }
        Ok(config)
    }

    fn invalid(&self, what: String) -> Error {
        Error::invalid(format!(
            "invalid model config {}: {what}",
            self.path.display()
        ))
    }

    /// [`Self::invalid`] for a section's own check, which says what is wrong without the file.
    fn invalid_in(&self, why: Error) -> Error {
        let context = format!("invalid model config {}", self.path.display());
        Error::wrap(ErrorKind::InvalidInput, context, why)
    }

    fn validate(&self) -> Result<()> {
        for (name, p) in &self.providers {
            if name.trim().is_empty() {
                return Err(self.invalid("a provider name is empty".into()));
            }
            p.check(&format!("[providers.{name}]"))
                .map_err(|why| self.invalid_in(why))?;
        }
        for (name, entry) in &self.mcp_servers {
            crate::mcp::config::check(name, entry).map_err(|why| self.invalid_in(why))?;
        }
        crate::lsp::config::check_all(&self.lsp_servers).map_err(|why| self.invalid_in(why))?;
        if let Some(why) = self.hooks.error() {
            return Err(self.invalid(why));
        }
        self.telemetry.check().map_err(|why| self.invalid_in(why))?;
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

    /// `[tools]` whole: what a run's tools read ([`crate::tools::ToolServices::config`]).
    pub fn tools(&self) -> &Arc<crate::tools::ToolsConfig> {
        &self.tools
    }

    /// The `[mcp.servers.NAME]` tables.
    pub fn mcp_servers(&self) -> &BTreeMap<String, crate::mcp::ServerConfig> {
        &self.mcp_servers
    }

    /// The `[[hooks.EVENT]]` tables.
    pub fn hooks(&self) -> &crate::hooks::HooksConfig {
        &self.hooks
    }

    /// The `[telemetry]` table.
    pub fn telemetry(&self) -> &TelemetryConfig {
        &self.telemetry
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
        Ok(p.info(name))
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
        Ok(p.client(name, dir))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::provider::config::DEFAULT_MAX_TOKENS;

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
        let mapped = parse(&format!(
            "{}compaction = \"t\"\n[providers.t]\nkind = \"script\"\npath = \"u.jsonl\"\n",
            table("context_window = 8000\ncompact_at = 0.5")
        ))
        .unwrap();
        assert!(mapped.has_role("compaction"));
        let (_, p, _) = mapped.provider_config("execution").unwrap();
        assert_eq!(p.context(), (Some(8000), Some(0.5)));
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
