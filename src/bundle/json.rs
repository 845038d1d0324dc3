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
        let mut start = 0;
        for (i, &b) in chunk.iter().enumerate() {
            let escaped: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0..=0x1f => b"",
                _ => continue,
            };
            out.write_all(&chunk[start..i]).map_err(werr)?;
            if escaped.is_empty() {
                write!(out, "\\u{:04x}", b).map_err(werr)?;
            } else {
                out.write_all(escaped).map_err(werr)?;
            }
            start = i + 1;
        }
        out.write_all(&chunk[start..]).map_err(werr)?;
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
