use std::collections::BTreeMap;

/// Counts the words of `text`: words are separated by whitespace, compared in lower case, and
/// lose any leading or trailing ASCII punctuation ("Hello," is "hello"). Empty words are skipped.
pub fn word_counts(text: &str) -> BTreeMap<String, usize> {
    todo!()
}
