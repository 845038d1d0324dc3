//! `evidence.jsonl`: the gate-run reuse cache, seq → run fingerprint.
//!
//! It is a sidecar, not authoritative: a line that does not parse or lacks a seq and a
//! fingerprint is skipped, and a later line for the same seq overrides an earlier one
//! (docs/dwp-spec.md, "Manifest inputs"). The fingerprint is read from `run_fingerprint`, or `fingerprint` as
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
        let entry = match std::str::from_utf8(line) {
            Ok(text) => match fast_entry(text) {
                Fast::Entry(entry) => entry,
                Fast::Skip => None,
                Fast::Unsure => value_entry(line),
            },
            Err(_) => value_entry(line),
        };
        if let Some((seq, fp)) = entry {
            out.insert(seq, fp);
        }
    }
    out
}

enum Fast {
    Entry(Option<(u64, String)>),
    Skip,
    /// Only a `Value` parse can tell (duplicate keys, values the raw scan cannot vouch for).
    Unsure,
}

/// One line read in place: the same verdict as [`value_entry`] without building a map.
fn fast_entry(line: &str) -> Fast {
    let Ok(entries) = serde_json::from_str::<super::journal::Entries>(line) else {
        // Not a JSON object (or not JSON): a Value parse would not give an object either.
        return Fast::Skip;
    };
    let (mut seq, mut run_fp, mut fp) = (None, None, None);
    for (i, (name, raw)) in entries.0.iter().enumerate() {
        if entries.0[..i].iter().any(|(n, _)| **n == **name)
            || !super::journal::value_parseable(raw.get())
        {
            return Fast::Unsure;
        }
        match &**name {
            "seq" => seq = Some(raw.get()),
            "run_fingerprint" => run_fp = Some(raw.get()),
            "fingerprint" => fp = Some(raw.get()),
            _ => {}
        }
    }
    // `is_u64`: a JSON integer that fits u64 (a float, a sign or an overflow is not).
    let seq = seq.and_then(|s| s.parse::<u64>().ok());
    let fp = run_fp
        .or(fp)
        .filter(|f| f.starts_with('"'))
        .and_then(|f| serde_json::from_str::<String>(f).ok());
    Fast::Entry(seq.zip(fp))
}

fn value_entry(line: &[u8]) -> Option<(u64, String)> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(line) else {
        return None;
    };
    let seq = map
        .get("seq")
        .filter(|s| s.is_u64())
        .and_then(Value::as_u64);
    let fp = map
        .get("run_fingerprint")
        .or_else(|| map.get("fingerprint"))
        .and_then(Value::as_str);
    seq.zip(fp.map(str::to_string))
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

        /// Reading a line in place gives the Value parse's verdict.
        #[test]
        fn in_place_read_agrees_with_a_value_parse(
            entries in proptest::collection::vec((
                prop_oneof![Just("seq"), Just("run_fingerprint"), Just("fingerprint"), Just("x")],
                prop_oneof![
                    Just("3"), Just("-1"), Just("1.5"), Just("1e400"), Just("18446744073709551616"),
                    Just("\"a\""), Just("\"\\u00e9\\n\""), Just("\"\\ud800\""), Just("null"),
                    Just("[1,{\"k\":2}]"), Just("{}"), Just("true"),
                ],
            ), 0..5),
        ) {
            let body: Vec<String> =
                entries.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            let line = format!("{{{}}}", body.join(","));
            let slow = value_entry(line.as_bytes());
            match fast_entry(&line) {
                Fast::Entry(fast) => prop_assert_eq!(fast, slow, "{}", line),
                Fast::Skip => prop_assert_eq!(None, slow, "{}", line),
                Fast::Unsure => {}
            }
        }
    }
}
