//! One finished span, as the exporter sends it.

use std::time::{SystemTime, UNIX_EPOCH};

/// An attribute value (the OTLP `AnyValue` kinds kxen-agent uses).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Bool(bool),
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Str(s.to_string())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Str(s)
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Value {
        Value::Int(i64::try_from(n).unwrap_or(i64::MAX))
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Bool(b)
    }
}

/// OTLP `Span.SpanKind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Client = 3,
}

/// OTLP `Status.StatusCode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Unset = 0,
    Ok = 1,
    Error = 2,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub kind: Kind,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: Vec<(&'static str, Value)>,
    pub status: Status,
    pub status_message: String,
}

/// The trace of run `run_id`: the first 16 bytes of SHA-256 over a fixed prefix and the id, so
/// every attempt of the run, in any process, lands in the same trace.
pub fn trace_id(run_id: &str) -> [u8; 16] {
    let digest = crate::hash::sha256(format!("kxen-agent trace {run_id}").as_bytes());
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

/// A fresh span id: never all zero, unique in this process, unpredictable across processes.
///
/// Not one `getrandom` call per span (a system call on the run's thread for every span): one
/// random 64-bit seed per process, and the n-th id is SplitMix64's output mixer over
/// `seed + n·γ`. γ is odd, so `n ↦ seed + n·γ` is one-to-one, and the mixer is a bijection of
/// 64-bit words: no two spans of the process share an id; another process (a resumed attempt
/// in the same trace) starts from another random seed.
pub fn span_id() -> [u8; 8] {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;
    static SEED: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| u64::from_le_bytes(crate::ids::random_bytes::<8>()));
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let mut z = seed.wrapping_add(n.wrapping_mul(GAMMA));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    // The one input that maps to zero (once in 2^64 ids) takes 1 instead.
    z.max(1).to_be_bytes()
}

/// Now, in nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_runs_trace_id_depends_on_the_run_only() {
        assert_eq!(super::trace_id("run_a"), super::trace_id("run_a"));
        assert_ne!(super::trace_id("run_a"), super::trace_id("run_b"));
        assert_ne!(super::span_id(), [0; 8]);
        let ids: std::collections::HashSet<[u8; 8]> =
            (0..10_000).map(|_| super::span_id()).collect();
        assert_eq!(ids.len(), 10_000);
    }
}
