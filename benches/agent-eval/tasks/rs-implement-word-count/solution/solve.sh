cat > src/lib.rs <<'RS'
use std::collections::BTreeMap;

/// Counts the words of `text`: words are separated by whitespace, compared in lower case, and
/// lose any leading or trailing ASCII punctuation ("Hello," is "hello"). Empty words are skipped.
pub fn word_counts(text: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for word in text.split_whitespace() {
        let word = word.trim_matches(|c: char| c.is_ascii_punctuation()).to_lowercase();
        if !word.is_empty() {
            *counts.entry(word).or_insert(0) += 1;
        }
    }
    counts
}
RS
