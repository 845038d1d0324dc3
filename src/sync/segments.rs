//! Append-only files of a snapshot (`messages.jsonl`, every `journal.jsonl`) as segments.
//!
//! A snapshot stores such a file as a tree of blobs named `000000`, `000001`, … whose
//! concatenation is the file. Where a segment ends depends only on the bytes before that end:
//! segment k ends at the first line end at or after [`SEGMENT_BYTES`] bytes into it, and the
//! last segment holds what is left. So appending records never changes a closed segment: the
//! next snapshot repeats its blob id, and git sends only the last (open) segment, the new ones
//! and the trees above them. Segments hold whole lines (records), so `git show` of one reads.
//!
//! The layout is canonical: for given bytes there is exactly one. A reader refuses any other
//! ([`check`]), so a snapshot tree is either the one a push writes or damaged. An empty file is
//! one empty segment.

/// Where a segment may end: the first `\n` at or after this many bytes into it.
pub const SEGMENT_BYTES: usize = 64 * 1024;

/// The most segments one file may have (names are six digits).
pub const MAX_SEGMENTS: usize = 1_000_000;

/// The byte ranges of `content`'s segments, in order (at least one).
pub fn split(content: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::with_capacity(content.len() / SEGMENT_BYTES + 1);
    let mut start = 0;
    while content.len() - start > SEGMENT_BYTES {
        match memchr(&content[start + SEGMENT_BYTES - 1..]) {
            Some(at) => {
                let end = start + SEGMENT_BYTES + at;
                out.push(start..end);
                start = end;
            }
            None => break,
        }
    }
    if start < content.len() || out.is_empty() {
        out.push(start..content.len());
    }
    out
}

/// The tree entry name of segment `index`.
pub fn name(index: usize) -> String {
    format!("{index:06}")
}

/// Why segment `index` of `count` (`bytes`) breaks the layout, if it does.
pub fn check(index: usize, count: usize, bytes: &[u8]) -> Option<String> {
    let last = index + 1 == count;
    if !last {
        // Closed: at least SEGMENT_BYTES long, ending at the first line end from there on.
        let closed = bytes.len() >= SEGMENT_BYTES
            && bytes.last() == Some(&b'\n')
            && memchr(&bytes[SEGMENT_BYTES - 1..bytes.len() - 1]).is_none();
        return (!closed).then(|| {
            format!(
                "segment {} ({} bytes) does not end at the first line end after {SEGMENT_BYTES} bytes",
                name(index),
                bytes.len()
            )
        });
    }
    if bytes.is_empty() && count > 1 {
        return Some(format!("segment {} is empty", name(index)));
    }
    // The last one must not hold a line end where a segment should have closed.
    if bytes.len() > SEGMENT_BYTES && memchr(&bytes[SEGMENT_BYTES - 1..bytes.len() - 1]).is_some() {
        return Some(format!(
            "segment {} ({} bytes) should have been split",
            name(index),
            bytes.len()
        ));
    }
    None
}

/// The offset of the first `\n` in `bytes`.
fn memchr(bytes: &[u8]) -> Option<usize> {
    memchr::memchr(b'\n', bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn lines(sizes: &[usize]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            out.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, n));
            out.push(b'\n');
        }
        out
    }

    #[test]
    fn an_empty_file_is_one_empty_segment() {
        assert_eq!(split(b""), vec![0..0]);
        assert_eq!(check(0, 1, b""), None);
        assert!(check(1, 2, b"").is_some());
    }

    #[test]
    fn segments_end_at_the_first_line_end_past_the_size() {
        let content = lines(&[SEGMENT_BYTES - 1, 10, 20, SEGMENT_BYTES * 2, 5]);
        let parts = split(&content);
        // The first line's `\n` is byte SEGMENT_BYTES: the first segment is exactly that line.
        assert_eq!(parts[0], 0..SEGMENT_BYTES);
        assert_eq!(parts.len(), 3);
        for (i, r) in parts.iter().enumerate() {
            assert_eq!(check(i, parts.len(), &content[r.clone()]), None, "{i}");
        }
        assert_eq!(parts.last().unwrap().end, content.len());
    }

    #[test]
    fn a_non_canonical_layout_is_refused() {
        let content = lines(&[100, 100]);
        assert!(check(0, 2, &content[..101]).is_some(), "closed too early");
        let big = lines(&[SEGMENT_BYTES + 5, 3]);
        assert!(check(0, 1, &big).is_some(), "the last one should be split");
        assert_eq!(check(0, 2, &big[..SEGMENT_BYTES + 6]), None);
    }

    proptest! {
        /// Appending never changes a closed segment, the concatenation is the file, and every
        /// split passes the check.
        #[test]
        fn appending_keeps_closed_segments(
            sizes in proptest::collection::vec(0usize..40_000, 0..12),
            more in proptest::collection::vec(0usize..40_000, 0..6),
        ) {
            let before = lines(&sizes);
            let mut after = before.clone();
            after.extend(lines(&more));
            let (a, b) = (split(&before), split(&after));
            for r in &a[..a.len() - 1] {
                prop_assert!(b.contains(r));
            }
            let joined: Vec<u8> = b.iter().flat_map(|r| after[r.clone()].to_vec()).collect();
            prop_assert_eq!(&joined, &after);
            for (i, r) in b.iter().enumerate() {
                prop_assert_eq!(check(i, b.len(), &after[r.clone()]), None);
            }
        }
    }
}
