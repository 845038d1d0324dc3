//! `[telemetry]` of the model config: the operator's trace settings, in the file beside the
//! providers, so a team's config switches tracing on for every run without a variable.
//!
//! ```toml
//! [telemetry]
//! endpoint = "http://collector:4318"          # the collector's base URL (/v1/traces appended)
//! traces_endpoint = "http://collector:4318/v1/traces"  # or the full URL (beats `endpoint`)
//! service_name = "ci-agent"                   # resource `service.name` (default kxen-agent)
//! protocol = "http/protobuf"                  # or "http/json"
//! headers_env = { authorization = "COLLECTOR_AUTH" }  # header name -> variable holding its value
//! content = false                             # true: prompts, arguments, outputs in spans
//! enabled = true                              # false: never trace, whatever OTEL_* say
//! ```
//!
//! No header value is ever written in the file: `headers_env` names the environment variable
//! that holds each value (a collector token is a credential). Those variables are treated like a
//! provider's `api_key_env`: never passed to a tool or server, redacted everywhere, wiped from
//! the process's environment block. How the table combines with the `OTEL_*` variables:
//! [`super::Settings::resolve`].

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::{Error, Result};

/// The `[telemetry]` table (all optional).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `false` switches tracing off even when `OTEL_*` variables are set.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The collector's base URL; `/v1/traces` is appended.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// The full traces URL (beats `endpoint`).
    #[serde(default)]
    pub traces_endpoint: Option<String>,
    #[serde(default)]
    pub service_name: Option<String>,
    /// `http/protobuf` or `http/json`.
    #[serde(default)]
    pub protocol: Option<String>,
    /// Request header name -> the environment variable holding its value.
    #[serde(default)]
    pub headers_env: BTreeMap<String, String>,
    /// Prompts, tool arguments and tool outputs go into span attributes (redacted, truncated).
    #[serde(default)]
    pub content: bool,
}

impl TelemetryConfig {
    /// What is wrong with the table, said as the config's other errors are (`[telemetry] …`).
    pub fn check(&self) -> Result<()> {
        for (key, url) in [
            ("endpoint", &self.endpoint),
            ("traces_endpoint", &self.traces_endpoint),
        ] {
            if let Some(url) = url
                && !(url.starts_with("http://") || url.starts_with("https://"))
            {
                return Err(Error::invalid(format!(
                    "[telemetry] {key} `{url}` must be an http:// or https:// URL (an OTLP/HTTP \
                     collector, e.g. http://localhost:4318)"
                )));
            }
        }
        if self
            .service_name
            .as_deref()
            .is_some_and(|s| s.trim().is_empty())
        {
            return Err(Error::invalid("[telemetry] service_name is empty"));
        }
        if let Some(p) = &self.protocol
            && super::Protocol::parse(p).is_none()
        {
            return Err(Error::invalid(format!(
                "[telemetry] protocol `{p}` is not supported: use \"http/protobuf\" or \
                 \"http/json\" (gRPC is not supported)"
            )));
        }
        for (header, var) in &self.headers_env {
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if header.is_empty() || !header.chars().all(token) {
                return Err(Error::invalid(format!(
                    "[telemetry] headers_env: `{header}` is not an HTTP header name"
                )));
            }
            if !crate::secrets::is_valid_env_name(var) {
                // Never echo it: what fails this check is often a pasted token.
                return Err(Error::invalid(format!(
                    "[telemetry] headers_env.{header} ({} characters, not shown) is not an \
                     environment variable name; name the variable that holds the header's value \
                     (a header value never goes in the file), e.g. {header} = \"COLLECTOR_AUTH\"",
                    var.chars().count()
                )));
            }
        }
        Ok(())
    }

    /// The variables whose values are header values (credentials).
    pub fn secret_vars(&self) -> impl Iterator<Item = &str> {
        self.headers_env.values().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> TelemetryConfig {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn the_table_is_checked() {
        assert!(TelemetryConfig::default().check().is_ok());
        let ok = parse(
            "endpoint = \"http://c:4318\"\nheaders_env = { authorization = \"COLLECTOR_AUTH\" }\n\
             content = true\nprotocol = \"http/json\"",
        );
        assert!(ok.check().is_ok());
        assert!(ok.content);
        let bad = parse("endpoint = \"c:4318\"").check().unwrap_err().message;
        assert!(bad.contains("endpoint"), "{bad}");
        let bad = parse("protocol = \"grpc\"").check().unwrap_err().message;
        assert!(bad.contains("grpc"), "{bad}");
        let bad = parse("headers_env = { authorization = \"Bearer sk-123\" }")
            .check()
            .unwrap_err()
            .message;
        assert!(!bad.contains("sk-123"), "{bad}");
        let bad = parse("headers_env = { \"a b\" = \"X\" }")
            .check()
            .unwrap_err()
            .message;
        assert!(bad.contains("header name"), "{bad}");
        assert!(toml::from_str::<TelemetryConfig>("headers = { a = \"b\" }").is_err());
    }
}
