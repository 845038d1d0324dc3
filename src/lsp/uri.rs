//! `file://` URIs of paths and back, and `character` offsets in a server's encoding.
//!
//! Positions the model gives and reads are 1-based lines and 1-based columns counted in
//! characters (Unicode scalar values, what `read` shows); a server counts columns in UTF-16 code
//! units unless it chose UTF-8 or UTF-32 at `initialize`.

use std::path::{Path, PathBuf};

/// How a server counts `character` in positions (negotiated at `initialize`); the position
/// conversions here are what it decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Utf8,
    Utf16,
    Utf32,
}

/// The `file://` URI of absolute path `path` (percent-encoded as `url` does it).
pub fn from_path(path: &Path) -> String {
    url::Url::from_file_path(path)
        .map(String::from)
        .unwrap_or_else(|()| format!("file://{}", path.display()))
}

/// The path of a `file://` URI; `None` for another scheme.
pub fn to_path(uri: &str) -> Option<PathBuf> {
    url::Url::parse(uri).ok()?.to_file_path().ok()
}

/// The server's `character` for the 0-based character column `column` of `line`.
pub fn to_server(line: &str, column: usize, encoding: Encoding) -> u32 {
    let prefix: String = line.chars().take(column).collect();
    let units = match encoding {
        Encoding::Utf8 => prefix.len(),
        Encoding::Utf16 => prefix.encode_utf16().count(),
        Encoding::Utf32 => prefix.chars().count(),
    };
    // A column past the end of the line counts the missing characters as one unit each.
    let missing = column.saturating_sub(line.chars().count());
    u32::try_from(units + missing).unwrap_or(u32::MAX)
}

/// The 0-based character column of the server's `character` in `line`.
pub fn from_server(line: &str, character: u32, encoding: Encoding) -> usize {
    let target = character as usize;
    let mut units = 0;
    for (i, c) in line.chars().enumerate() {
        if units >= target {
            return i;
        }
        units += match encoding {
            Encoding::Utf8 => c.len_utf8(),
            Encoding::Utf16 => c.len_utf16(),
            Encoding::Utf32 => 1,
        };
    }
    line.chars().count() + target.saturating_sub(units)
}

/// Line `n` (0-based) of `text`, without its line ending.
pub fn line_of(text: &str, n: u32) -> &str {
    text.split('\n')
        .nth(n as usize)
        .map_or("", |l| l.strip_suffix('\r').unwrap_or(l))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_round_trip_in_every_encoding() {
        let line = "é𝄞x = 1";
        for enc in [Encoding::Utf8, Encoding::Utf16, Encoding::Utf32] {
            for col in 0..=line.chars().count() + 2 {
                assert_eq!(
                    from_server(line, to_server(line, col, enc), enc),
                    col,
                    "{enc:?} {col}"
                );
            }
        }
        assert_eq!(to_server(line, 2, Encoding::Utf16), 3);
        assert_eq!(to_server(line, 2, Encoding::Utf8), 6);
        assert_eq!(to_server(line, 2, Encoding::Utf32), 2);
    }

    #[test]
    fn uris_round_trip() {
        let p = Path::new("/tmp/a b/ü.py");
        let uri = from_path(p);
        assert_eq!(uri, "file:///tmp/a%20b/%C3%BC.py");
        assert_eq!(to_path(&uri).unwrap(), p);
        assert_eq!(to_path("untitled:1"), None);
        assert_eq!(line_of("a\r\nb\n", 0), "a");
        assert_eq!(line_of("a\r\nb\n", 1), "b");
        assert_eq!(line_of("a\n", 5), "");
    }
}
