//! OpenTelemetry traces of runs, exported over OTLP/HTTP (protobuf, or JSON).
//!
//! Switched on by the standard variables only: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full
//! URL) or `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is appended), `OTEL_EXPORTER_OTLP_HEADERS`
//! (`name=value,…`, values percent-decoded), `OTEL_SERVICE_NAME` (default `kxen-agent`),
//! `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` / `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the
//! default, or `http/json`); `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` switch it
//! off. Without an endpoint nothing is started and nothing is measured.
//!
//! The spans come from the run's events ([`sink::TracingSink`] wraps the event sink), so the
//! loop itself knows nothing of tracing. One trace per run: its id is derived from the run id,
//! so every attempt of a resumed run (another process, maybe another machine) joins the same
//! trace. Spans carry ids, names, outcomes and counts — never a prompt, a tool argument or an
//! output, and never a header value.
//!
//! Export never slows or fails a run: spans go into a bounded queue that a background thread
//! drains; a full queue drops spans (counted); the end of the run waits at most
//! [`export::FLUSH_WAIT`] for the last batch; whatever was dropped or refused is told in one
//! warning.

mod children;
pub mod export;
pub mod otlp;
pub mod sink;
pub mod span;

use std::collections::BTreeMap;

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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Protobuf,
    Json,
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
            crate::tools::register_provider_key_env(name);
            crate::own_env::forget(name)?;
        }
    }
    Ok(())
}

impl Settings {
    /// The settings the environment kxen-agent started with asks for, or `None` (tracing off).
    pub fn from_env() -> Result<Option<Settings>> {
        Settings::from_lookup(|name| {
            crate::own_env::var_os(name).map(|v| v.to_string_lossy().into_owned())
        })
    }

    /// [`Settings::from_env`] over any variable lookup (tests).
    pub fn from_lookup(var: impl Fn(&str) -> Option<String>) -> Result<Option<Settings>> {
        let set = |name: &str| {
            var(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"))
        {
            return Ok(None);
        }
        let endpoint = match (
            set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            set("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(url), _) => url,
            (None, Some(base)) => format!("{}/v1/traces", base.trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(Error::invalid(format!(
                "OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL, not `{endpoint}`"
            ))
            .with_hint(
                "e.g. OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 (an OTLP/HTTP collector)",
            ));
        }
        let protocol = match set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .as_deref()
        {
            None | Some("http/protobuf") => Protocol::Protobuf,
            Some("http/json") => Protocol::Json,
            Some(other) => {
                return Err(Error::invalid(format!(
                    "OTEL_EXPORTER_OTLP_PROTOCOL `{other}` is not supported: kxen-agent exports \
                     over OTLP/HTTP only"
                ))
                .with_hint("use http/protobuf (the default) or http/json"));
            }
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
        Ok(Some(Settings {
            endpoint,
            headers,
            service_name: set("OTEL_SERVICE_NAME").unwrap_or_else(|| "kxen-agent".to_string()),
            protocol,
        }))
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
    fn percent_decoding_keeps_malformed_sequences() {
        assert_eq!(percent_decode("a%20b%2Cc"), "a b,c");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
    }
}
