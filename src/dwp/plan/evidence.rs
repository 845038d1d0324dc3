//! `evidence.jsonl`: the gate-run reuse cache, seq → run fingerprint.
//!
//! It is a sidecar, not authoritative: a line that does not parse or lacks a seq and a
//! fingerprint is skipped, and a later line for the same seq overrides an earlier one
//! (dwp-details.md §2.1). The fingerprint is read from `run_fingerprint`, or `fingerprint` as
//! older ledgers named it.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

pub const FILE: &str = "evidence.jsonl";

/// Reads the plan's evidence sidecar (missing file = empty map).
pub fn read(dir: &Path) -> Result<HashMap<u64, String>> {
    let path = dir.join(FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(Error::io("read", &path, e)),
    };
    Ok(parse(&bytes))
}

/// Parses sidecar bytes, skipping anything that is not a `{seq, run_fingerprint}` line.
pub fn parse(bytes: &[u8]) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    for line in bytes.split(|b| *b == b'\n') {
        let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        let seq = map
            .get("seq")
            .filter(|s| s.is_u64())
            .and_then(Value::as_u64);
        let fp = map
            .get("run_fingerprint")
            .or_else(|| map.get("fingerprint"))
            .and_then(Value::as_str);
        if let (Some(seq), Some(fp)) = (seq, fp) {
            out.insert(seq, fp.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn later_lines_override_and_junk_is_skipped() {
        let map = parse(
            b"{\"seq\":3,\"run_fingerprint\":\"a\"}\nnot json\n{\"seq\":3,\"run_fingerprint\":\"b\"}\n{\"seq\":4}\n{\"seq\":5,\"fingerprint\":\"c\"}",
        );
        assert_eq!(map.get(&3).map(String::as_str), Some("b"));
        assert_eq!(map.get(&5).map(String::as_str), Some("c"));
        assert_eq!(map.len(), 2);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse(&bytes);
        }
    }
}
