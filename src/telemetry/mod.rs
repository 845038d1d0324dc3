//! OpenTelemetry traces of runs, exported over OTLP/HTTP (protobuf, or JSON).
//!
//! Switched on by the standard variables — `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL)
//! or `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is appended), `OTEL_EXPORTER_OTLP_HEADERS`
//! (`name=value,…`, values percent-decoded), `OTEL_SERVICE_NAME` (default `kxen-agent`),
//! `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the
//! default, or `http/json`); `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` switch it
//! off — or by the model config's `[telemetry]` table ([`config`]), whose settings win over the
//! variables ([`Settings::resolve`]). Without an endpoint nothing is started and nothing is
//! measured.
//!
//! The spans come from the run's events ([`sink::TracingSink`] wraps the event sink), so the
//! loop itself knows nothing of tracing; MCP and LSP requests and `task` children find the tool
//! call they belong to through [`current`]. One trace per run: its id is derived from the run
//! id, so every attempt of a resumed run (another process, maybe another machine) joins the
//! same trace. Spans carry ids, names, outcomes and counts — a prompt, a tool argument or an
//! output only when the table opts in (`content = true`, redacted and truncated), and never a
//! header value.
//!
//! Export never slows or fails a run: spans go into a bounded queue that a background thread
//! drains; a full queue drops spans (counted); the end of the run waits at most
//! [`export::FLUSH_WAIT`] for the last batch; whatever was dropped or refused is told in one
//! warning.

pub mod child;
pub mod config;
pub mod current;
pub mod export;
pub mod otlp;
pub mod sink;
pub mod span;

use std::collections::BTreeMap;

pub use config::TelemetryConfig;

use crate::error::{Error, Result};

/// Where and how to export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The traces URL (`…/v1/traces`).
    pub endpoint: String,
    /// Extra request headers (e.g. an authorization header of the collector).
    pub headers: BTreeMap<String, String>,
    pub service_name: String,
    pub protocol: Protocol,
    /// Prompts, tool arguments and outputs go into span attributes (`[telemetry] content`).
    pub content: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Protobuf,
    Json,
}

impl Protocol {
    /// `http/protobuf` or `http/json`.
    pub fn parse(name: &str) -> Option<Protocol> {
        match name {
            "http/protobuf" => Some(Protocol::Protobuf),
            "http/json" => Some(Protocol::Json),
            _ => None,
        }
    }
}

/// The variables that may carry a collector credential (an authorization header).
const HEADER_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
];

/// Treats the header variables like a model-provider key, whether or not tracing is on: never
/// passed to a tool process (not even through `passEnv`), their values redacted from every
/// message and output, and wiped from this process's environment block. Call before anything
/// starts a tool or server.
pub fn protect_env() -> Result<()> {
    for name in HEADER_VARS {
        if crate::own_env::var_os(name).is_some() {
            crate::secrets::register_provider_key_env(name);
            crate::own_env::forget(name)?;
        }
    }
    Ok(())
}

impl Settings {
    /// The settings the environment kxen-agent started with and the config's `[telemetry]`
    /// table ask for, or `None` (tracing off).
    pub fn from_env(config: &TelemetryConfig) -> Result<Option<Settings>> {
        Settings::resolve(config, |name| {
            crate::own_env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })
    }

    /// [`Settings::from_env`] with only the variables (no table).
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Option<Settings>> {
        Settings::resolve(&TelemetryConfig::default(), var)
    }

    /// The table over the variables: the OpenTelemetry rule that the variables are defaults and
    /// explicit configuration wins. Each setting the table gives beats its variable (an endpoint
    /// in the table, either key, beats both endpoint variables; a `headers_env` header beats a
    /// header of the same name in `OTEL_EXPORTER_OTLP_HEADERS`, other headers of the variable
    /// are kept). Switching off wins from either side: `enabled = false`, `OTEL_SDK_DISABLED=true`
    /// or `OTEL_TRACES_EXPORTER=none`. `content` is the table's only.
    pub fn resolve(
        config: &TelemetryConfig,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Settings>> {
        let set = |name: &str| {
            var(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if config.enabled == Some(false)
            || set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
        {
            return Ok(None);
        }
        let base = |url: String| format!("{}/v1/traces", url.trim_end_matches('/'));
        let endpoint = match (
            config.traces_endpoint.clone(),
            config.endpoint.clone(),
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            set("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), ..) => url,
            (None, Some(url), ..) => base(url),
            (None, None, Some(url), _) => url,
            (None, None, None, Some(url)) => base(url),
            (None, None, None, None) if config.enabled == Some(true) => {
                return Err(Error::invalid(
                    "[telemetry] enabled = true, but neither the table nor \
                     OTEL_EXPORTER_OTLP_ENDPOINT names a collector",
                )
                .with_hint("add endpoint = \"http://localhost:4318\" to [telemetry]"));
            }
            (None, None, None, None) => return Ok(None),
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(Error::invalid(format!(
                "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL, not `{endpoint}`"
            ))
            .with_hint(
                "e.g. OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 (an OTLP/HTTP collector)",
            ));
        }
        let protocol = match config
            .protocol
            .clone()
            .or_else(|| set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
            .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
        {
            None => Protocol::Protobuf,
            Some(name) => Protocol::parse(&name).ok_or_else(|| {
                Error::invalid(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL `{name}` is not supported: kxen-agent exports \
                     over OTLP/HTTP only"
                ))
                .with_hint("use http/protobuf (the default) or http/json")
            })?,
        };
        let mut headers = BTreeMap::new();
        for pair in set(HEADER_VARS[1])
            .or_else(|| set(HEADER_VARS[0]))
            .unwrap_or_default()
            .split(',')
            .filter(|p| !p.trim().is_empty())
        {
            let Some((name, value)) = pair.split_once('=') else {
                // The value may be a credential: never quote it.
                return Err(Error::invalid(
                    "OTEL_EXPORTER_OTLP_HEADERS must be a list of name=value pairs separated by commas",
                ));
            };
            headers.insert(name.trim().to_string(), percent_decode(value.trim()));
        }
        for (name, env) in &config.headers_env {
            // The variable's value is the header's, as given (never quoted in a message).
            let value = var(env).filter(|v| !v.is_empty()).ok_or_else(|| {
                Error::invalid(format!(
                    "[telemetry] headers_env.{name} names {env}, which is not set"
                ))
                .with_hint(format!("export {env}=… (the value of the `{name}` header)"))
            })?;
            headers.insert(name.clone(), value);
        }
        Ok(Some(Settings {
            endpoint,
            headers,
            service_name: config
                .service_name
                .clone()
                .or_else(|| set("OTEL_SERVICE_NAME"))
                .unwrap_or_else(|| "kxen-agent".to_string()),
            protocol,
            content: config.content,
        }))
    }
}

/// A traced command: the exporter, installed as the process's tracer ([`current`]) so that
/// `task` children, MCP and LSP requests join the run's trace.
pub struct Tracing {
    exporter: export::Exporter,
    content: bool,
}

impl Tracing {
    /// Starts the exporter and installs it.
    pub fn start(settings: Settings) -> Tracing {
        let content = settings.content;
        let exporter = export::Exporter::start(settings);
        current::install(exporter.queue(), content);
        Tracing { exporter, content }
    }

    /// A sink that turns `inner`'s events into spans of the top-level run.
    pub fn sink<'a>(
        &self,
        inner: &'a mut dyn crate::events::EventSink,
        provider_info: Option<&serde_json::Value>,
        state: &crate::state::StateDir,
    ) -> sink::TracingSink<'a> {
        sink::TracingSink::new(
            inner,
            self.exporter.queue(),
            provider_info,
            state,
            self.content,
        )
    }

    /// Uninstalls the tracer and sends what is queued (at most [`export::FLUSH_WAIT`]); the
    /// warning to show when spans were lost. Every sink must be finished first.
    pub fn finish(self) -> Option<String> {
        current::uninstall();
        self.exporter.finish()
    }
}

/// `%XX` sequences decoded (the OTLP exporter spec's header value encoding); anything malformed
/// is kept as written.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &[(&str, &str)]) -> Result<Option<Settings>> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_lookup(|name| map.get(name).cloned())
    }

    #[test]
    fn the_standard_variables_switch_tracing_on() {
        assert_eq!(lookup(&[]).unwrap(), None);
        let s = lookup(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")])
            .unwrap()
            .unwrap();
        assert_eq!(s.endpoint, "http://c:4318/v1/traces");
        assert_eq!(s.service_name, "kxen-agent");
        assert_eq!(s.protocol, Protocol::Protobuf);
        let s = lookup(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:1/x"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "authorization=Bearer%20abc, x-team = a=b",
            ),
            ("OTEL_SERVICE_NAME", "ci-agent"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint, "http://t:1/x");
        assert_eq!(s.headers["authorization"], "Bearer abc");
        assert_eq!(s.headers["x-team"], "a=b");
        assert_eq!(s.service_name, "ci-agent");
        assert_eq!(s.protocol, Protocol::Json);
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(
                lookup(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"), off]).unwrap(),
                None
            );
        }
        let bad = lookup(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4318")]).unwrap_err();
        assert_eq!(bad.kind, crate::error::ErrorKind::InvalidInput);
        let bad = lookup(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ])
        .unwrap_err();
        assert!(bad.message.contains("grpc"));
        let bad = lookup(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "secret-without-name"),
        ])
        .unwrap_err();
        assert!(!bad.message.contains("secret-without-name"));
    }

    #[test]
    fn the_table_wins_over_the_variables_and_off_wins_from_either_side() {
        let table: TelemetryConfig = toml::from_str(
            "endpoint = \"http://table:4318\"\nservice_name = \"from-table\"\n\
             headers_env = { authorization = \"COLLECTOR_AUTH\" }\ncontent = true",
        )
        .unwrap();
        let vars: BTreeMap<&str, &str> = [
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://env:1/v1/traces",
            ),
            ("OTEL_SERVICE_NAME", "from-env"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=env,x-team=a"),
            ("COLLECTOR_AUTH", "Bearer t"),
        ]
        .into_iter()
        .collect();
        let get = |name: &str| vars.get(name).map(|v| v.to_string());
        let s = Settings::resolve(&table, get).unwrap().unwrap();
        assert_eq!(s.endpoint, "http://table:4318/v1/traces");
        assert_eq!(s.service_name, "from-table");
        assert_eq!(s.headers["authorization"], "Bearer t");
        assert_eq!(s.headers["x-team"], "a");
        assert!(s.content);
        // The table alone.
        let s = Settings::resolve(&table, |n| (n == "COLLECTOR_AUTH").then(|| "t".into()))
            .unwrap()
            .unwrap();
        assert_eq!(s.endpoint, "http://table:4318/v1/traces");
        // A header variable that is not set: named, never a value.
        let e = Settings::resolve(&table, |_| None).unwrap_err();
        assert!(e.message.contains("COLLECTOR_AUTH"), "{}", e.message);
        // Off from either side.
        let off = TelemetryConfig {
            enabled: Some(false),
            ..table.clone()
        };
        assert_eq!(Settings::resolve(&off, get).unwrap(), None);
        let killed = |n: &str| match n {
            "OTEL_SDK_DISABLED" => Some("true".to_string()),
            _ => get(n),
        };
        assert_eq!(Settings::resolve(&table, killed).unwrap(), None);
        // `enabled = true` without any endpoint is said, not silently ignored.
        let on = TelemetryConfig {
            enabled: Some(true),
            ..TelemetryConfig::default()
        };
        assert!(Settings::resolve(&on, |_| None).is_err());
    }

    #[test]
    fn percent_decoding_keeps_malformed_sequences() {
        assert_eq!(percent_decode("a%20b%2Cc"), "a b,c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
