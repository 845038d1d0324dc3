//! Writing bundle JSON as a stream: a file's bytes become one JSON string without ever holding
//! the escaped copy.

use std::io::{Read, Write};
use std::path::Path;

use crate::error::{Error, Result};
use crate::hash::Sha256Stream;

/// Writes the first `len` bytes of `reader` as the body of a JSON string (without the quotes),
/// escaping `"`, `\` and control characters. Returns the SHA-256 hex of the raw bytes.
///
/// The bytes must be UTF-8 (every state file is JSON written by serde_json and was parsed by
/// `verify` before export); multi-byte sequences are copied unchanged, so chunk boundaries do not
/// matter.
pub fn write_string_body(
    out: &mut dyn Write,
    reader: &mut dyn Read,
    len: u64,
    source: &Path,
    sink: &Path,
) -> Result<String> {
    let mut hasher = Sha256Stream::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut escaped = Vec::with_capacity(2 << 16);
    let mut left = len;
    let werr = |e| Error::io("write", sink, e);
    while left > 0 {
        let want = buf.len().min(left as usize);
        let n = reader
            .read(&mut buf[..want])
            .map_err(|e| Error::io("read", source, e))?;
        if n == 0 {
            return Err(Error::conflict(format!(
                "{} shrank while it was being exported",
                source.display()
            )));
        }
        left -= n as u64;
        let chunk = &buf[..n];
        hasher.update(chunk);
        // Escape into one buffer per chunk so the sink sees one large write, not one per run of
        // plain bytes (JSON state files are dense with `"` and `\\`).
        escaped.clear();
        let mut start = 0;
        for (i, &b) in chunk.iter().enumerate() {
            if b >= 0x20 && b != b'"' && b != b'\\' {
                continue;
            }
            escaped.extend_from_slice(&chunk[start..i]);
            match b {
                b'"' => escaped.extend_from_slice(b"\\\""),
                b'\\' => escaped.extend_from_slice(b"\\\\"),
                b'\n' => escaped.extend_from_slice(b"\\n"),
                b'\r' => escaped.extend_from_slice(b"\\r"),
                b'\t' => escaped.extend_from_slice(b"\\t"),
                _ => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    escaped.extend_from_slice(b"\\u00");
                    escaped.push(HEX[usize::from(b >> 4)]);
                    escaped.push(HEX[usize::from(b & 0xf)]);
                }
            }
            start = i + 1;
        }
        escaped.extend_from_slice(&chunk[start..]);
        out.write_all(&escaped).map_err(werr)?;
    }
    Ok(hasher.finish_hex())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any UTF-8 text round-trips through the escaper and serde_json.
        #[test]
        fn escaped_text_parses_back(text in any::<String>()) {
            let mut out = b"\"".to_vec();
            let hex = write_string_body(&mut out, &mut text.as_bytes(), text.len() as u64, Path::new("a"), Path::new("b")).unwrap();
            out.push(b'"');
            prop_assert_eq!(serde_json::from_slice::<String>(&out).unwrap(), text.clone());
            prop_assert_eq!(hex, crate::hash::sha256_hex(text.as_bytes()));
        }
    }
}
