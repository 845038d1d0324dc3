//! Writing bundle JSON as a stream: a file's bytes become one JSON string without ever holding
//! the escaped copy.

use std::io::{Read, Write};
use std::path::Path;

use super::reader::special_mask;
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
    const READ: usize = 1 << 16;
    let mut buf = vec![0u8; READ];
    // Worst case six bytes per byte (`\u00XX`), plus slack for whole-word copies.
    let mut escaped = vec![0u8; READ * 6 + 16];
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
        // Escape into one buffer per chunk so the sink sees one large write. JSON state files
        // are dense with `"` and `\\`, so plain bytes are copied a word at a time up to the
        // next byte that needs escaping, and escapes are written in place.
        let mut i = 0;
        let mut j = 0;
        while i < n {
            if i + 8 <= n {
                let mut word = [0u8; 8];
                word.copy_from_slice(&chunk[i..i + 8]);
                escaped[j..j + 8].copy_from_slice(&word);
                let hit = special_mask(u64::from_le_bytes(word));
                if hit == 0 {
                    i += 8;
                    j += 8;
                    continue;
                }
                let k = (hit.trailing_zeros() / 8) as usize;
                i += k;
                j += k;
            }
            let b = chunk[i];
            i += 1;
            let esc: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0..0x20 => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    escaped[j..j + 6].copy_from_slice(&[
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[usize::from(b >> 4)],
                        HEX[usize::from(b & 0xf)],
                    ]);
                    j += 6;
                    continue;
                }
                _ => {
                    escaped[j] = b;
                    j += 1;
                    continue;
                }
            };
            escaped[j..j + 2].copy_from_slice(esc);
            j += 2;
        }
        out.write_all(&escaped[..j]).map_err(werr)?;
    }
    Ok(hasher.finish_hex())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The escaping every bundle so far was written with, one byte at a time: the fast escaper
    /// must produce exactly these bytes (export output stays byte-for-byte the same).
    fn reference(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in bytes {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0..0x20 => out.extend_from_slice(format!("\\u{:04x}", b).as_bytes()),
                _ => out.push(b),
            }
        }
        out
    }

    proptest! {
        /// Byte-for-byte the reference escaping, for text dense in escapes and long plain runs.
        #[test]
        fn same_bytes_as_the_reference(parts in proptest::collection::vec(
            prop_oneof![Just("\"".to_string()), Just("\\".to_string()), Just("\n\u{1}\u{1f}\t\r".to_string()),
                        Just("é😀".to_string()), "[a-z ]{0,40}"], 0..200)) {
            let text = parts.concat();
            let mut out = Vec::new();
            write_string_body(&mut out, &mut text.as_bytes(), text.len() as u64, Path::new("a"), Path::new("b")).unwrap();
            prop_assert_eq!(out, reference(text.as_bytes()));
        }


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
