//! A run's events through the OpenTelemetry exporter, when the environment or the config's
//! `[telemetry]` table switches it on (`crate::telemetry`): the run itself is the same either way.

use serde_json::Value;

use crate::cli::output::{Diagnostics, Format};
use crate::error::Result;
use crate::events::EventSink;
use crate::state::StateDir;
use crate::telemetry::{Settings, TelemetryConfig, Tracing};

/// Runs `execute` with `sink`, wrapped in a tracing sink when `OTEL_EXPORTER_OTLP_*` or
/// `[telemetry]` ask for traces. Tracing never fails the run: bad settings and lost spans are
/// warnings.
pub fn traced<T>(
    state: &StateDir,
    provider_info: Option<&Value>,
    config: &TelemetryConfig,
    sink: &mut dyn EventSink,
    format: Format,
    execute: impl FnOnce(&mut dyn EventSink) -> Result<T>,
) -> Result<T> {
    let settings = match Settings::from_env(config) {
        Ok(Some(s)) => s,
        Ok(None) => return execute(sink),
        Err(e) => {
            Diagnostics::kxen(format).warning(&format!("telemetry is off: {}", e.message));
            return execute(sink);
        }
    };
    let tracing = Tracing::start(settings);
    let mut traced = tracing.sink(sink, provider_info, state);
    let result = execute(&mut traced);
    traced.finish();
    if let Some(warning) = tracing.finish() {
        Diagnostics::kxen(format).warning(&warning);
    }
    result
}
