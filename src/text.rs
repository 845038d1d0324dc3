//! Short forms of text that may be long or hostile (a tool's output, a server's line, a model's
//! argument), for messages and events.

/// The first `max` characters of `text`, with a note when cut.
pub fn preview(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!("{}… [{} more bytes]", &text[..cut], text.len() - cut),
    }
}
