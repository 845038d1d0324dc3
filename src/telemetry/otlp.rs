//! The OTLP `ExportTraceServiceRequest` of a batch of spans, as protobuf (written by hand: the
//! dozen fields used here do not justify a code generator) and as OTLP/JSON.
//!
//! Field numbers from opentelemetry-proto (`collector/trace/v1/trace_service.proto`,
//! `trace/v1/trace.proto`, `common/v1/common.proto`, `resource/v1/resource.proto`); the tests
//! decode both encodings with the official Python definitions (tests/it/telemetry.rs).

use serde_json::{Value as Json, json};

use super::span::{Span, Value};

/// What the resource and the instrumentation scope say about every span.
pub struct Origin<'a> {
    pub service_name: &'a str,
}

pub fn protobuf(origin: &Origin, spans: &[Span]) -> Vec<u8> {
    let mut resource = Vec::new();
    key_value(
        &mut resource,
        1,
        "service.name",
        &Value::from(origin.service_name),
    );
    key_value(
        &mut resource,
        1,
        "service.version",
        &Value::from(env!("CARGO_PKG_VERSION")),
    );
    let mut scope = Vec::new();
    string(&mut scope, 1, "kxen-agent");
    string(&mut scope, 2, env!("CARGO_PKG_VERSION"));
    let mut scope_spans = Vec::new();
    message(&mut scope_spans, 1, &scope);
    for span in spans {
        message(&mut scope_spans, 2, &span_bytes(span));
    }
    let mut resource_spans = Vec::new();
    message(&mut resource_spans, 1, &resource);
    message(&mut resource_spans, 2, &scope_spans);
    let mut request = Vec::new();
    message(&mut request, 1, &resource_spans);
    request
}

fn span_bytes(s: &Span) -> Vec<u8> {
    let mut out = Vec::new();
    bytes(&mut out, 1, &s.trace_id);
    bytes(&mut out, 2, &s.span_id);
    if let Some(parent) = &s.parent {
        bytes(&mut out, 4, parent);
    }
    string(&mut out, 5, &s.name);
    varint_field(&mut out, 6, s.kind as u64);
    fixed64(&mut out, 7, s.start_ns);
    fixed64(&mut out, 8, s.end_ns.max(s.start_ns));
    for (key, value) in &s.attributes {
        key_value(&mut out, 9, key, value);
    }
    let mut status = Vec::new();
    if !s.status_message.is_empty() {
        string(&mut status, 2, &s.status_message);
    }
    if s.status as u64 != 0 {
        varint_field(&mut status, 3, s.status as u64);
    }
    message(&mut out, 15, &status);
    out
}

fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: &Value) {
    let mut any = Vec::new();
    match value {
        Value::Str(s) => string(&mut any, 1, s),
        Value::Bool(b) => varint_field(&mut any, 2, u64::from(*b)),
        // int64 is a plain varint of the two's complement.
        Value::Int(n) => varint_field(&mut any, 3, *n as u64),
    }
    let mut kv = Vec::new();
    string(&mut kv, 1, key);
    message(&mut kv, 2, &any);
    message(out, field, &kv);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, (u64::from(field) << 3) | u64::from(wire));
}

fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn varint_field(out: &mut Vec<u8>, field: u32, n: u64) {
    tag(out, field, 0);
    varint(out, n);
}

fn fixed64(out: &mut Vec<u8>, field: u32, n: u64) {
    tag(out, field, 1);
    out.extend_from_slice(&n.to_le_bytes());
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, 2);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn string(out: &mut Vec<u8>, field: u32, s: &str) {
    bytes(out, field, s.as_bytes());
}

fn message(out: &mut Vec<u8>, field: u32, m: &[u8]) {
    bytes(out, field, m);
}

/// OTLP/JSON: ids as lowercase hex, 64-bit integers as decimal strings, enums as numbers.
pub fn json(origin: &Origin, spans: &[Span]) -> Json {
    let spans: Vec<Json> = spans
        .iter()
        .map(|s| {
            let mut span = json!({
                "traceId": crate::hash::hex(&s.trace_id),
                "spanId": crate::hash::hex(&s.span_id),
                "name": s.name,
                "kind": s.kind as u8,
                "startTimeUnixNano": s.start_ns.to_string(),
                "endTimeUnixNano": s.end_ns.max(s.start_ns).to_string(),
                "attributes": s.attributes.iter().map(|(k, v)| kv_json(k, v)).collect::<Vec<_>>(),
                "status": {"code": s.status as u8, "message": s.status_message},
            });
            if let Some(parent) = &s.parent {
                span["parentSpanId"] = json!(crate::hash::hex(parent));
            }
            span
        })
        .collect();
    json!({"resourceSpans": [{
        "resource": {"attributes": [
            kv_json("service.name", &Value::from(origin.service_name)),
            kv_json("service.version", &Value::from(env!("CARGO_PKG_VERSION"))),
        ]},
        "scopeSpans": [{
            "scope": {"name": "kxen-agent", "version": env!("CARGO_PKG_VERSION")},
            "spans": spans,
        }],
    }]})
}

fn kv_json(key: &str, value: &Value) -> Json {
    let value = match value {
        Value::Str(s) => json!({"stringValue": s}),
        Value::Bool(b) => json!({"boolValue": b}),
        Value::Int(n) => json!({"intValue": n.to_string()}),
    };
    json!({"key": key, "value": value})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::span::{Kind, Status};

    #[test]
    fn varints_and_a_span_encode_as_protobuf_does() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        let span = Span {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent: None,
            name: "r".into(),
            kind: Kind::Internal,
            start_ns: 1,
            end_ns: 2,
            attributes: vec![("n", Value::Int(-1))],
            status: Status::Unset,
            status_message: String::new(),
        };
        let b = span_bytes(&span);
        // trace_id: field 1, wire 2, 16 bytes.
        assert_eq!(&b[..2], &[0x0a, 16]);
        // int64 -1 is ten bytes of varint.
        assert!(
            b.windows(11)
                .any(|w| w[0] == 0x18 && w[1..10].iter().all(|&x| x == 0xff) && w[10] == 0x01)
        );
    }
}
