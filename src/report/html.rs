//! A tiny HTML writer whose only way to add text from a Session is to escape it.
//!
//! Every byte a model or a tool produced (task text, messages, tool arguments and outputs, file
//! paths, even ids read back from files) goes through [`Html::text`] or [`Html::attr`]; markup
//! can only come from `&'static str` ([`Html::raw`]) or from numbers we format ourselves. So a
//! tool output holding `</script>` or `<img src=…>` is shown as those characters, never parsed
//! as markup.

use std::fmt::Write as _;

/// An HTML document being written.
#[derive(Debug, Default)]
pub struct Html {
    out: String,
}

impl Html {
    pub fn with_capacity(bytes: usize) -> Html {
        Html {
            out: String::with_capacity(bytes),
        }
    }

    /// Markup written by this module's callers themselves (never data).
    pub fn raw(&mut self, markup: &'static str) -> &mut Html {
        self.out.push_str(markup);
        self
    }

    /// Text content, escaped.
    pub fn text(&mut self, text: &str) -> &mut Html {
        escape_into(&mut self.out, text);
        self
    }

    /// Text content cut to `max` characters, with a note saying how many were left out.
    pub fn text_clipped(&mut self, text: &str, max: usize) -> &mut Html {
        match text.char_indices().nth(max) {
            None => self.text(text),
            Some((cut, _)) => {
                let left = text[cut..].chars().count();
                self.text(&text[..cut]);
                self.raw("<span class=\"clip\">… ");
                self.num(left as u64);
                self.raw(" more characters (the full text: <code>run show</code>)</span>")
            }
        }
    }

    /// An attribute value (the caller writes the quotes), escaped like text.
    pub fn attr(&mut self, value: &str) -> &mut Html {
        self.text(value)
    }

    /// A number we formatted ourselves.
    pub fn num(&mut self, n: impl std::fmt::Display) -> &mut Html {
        let _ = write!(self.out, "{n}");
        self
    }

    pub fn finish(self) -> String {
        self.out
    }
}

/// Appends `text` with `& < > " '` replaced by character references, and every control
/// character but line feed and tab (an escape sequence, a NUL) replaced by U+FFFD, which HTML
/// would otherwise reject or a terminal-minded reader misread.
pub fn escape_into(out: &mut String, text: &str) {
    let mut rest = text;
    while let Some(at) = rest
        .bytes()
        .position(|b| matches!(b, b'&' | b'<' | b'>' | b'"' | b'\'') || needs_check(b))
    {
        out.push_str(&rest[..at]);
        let c = rest[at..].chars().next().unwrap_or('\u{FFFD}');
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\n' | '\t' => out.push(c),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
        rest = &rest[at + c.len_utf8()..];
    }
    out.push_str(rest);
}

/// A byte that may start a control character: ASCII controls, DEL, and the lead byte 0xC2 of
/// the C1 controls U+0080..U+009F.
fn needs_check(b: u8) -> bool {
    b < 0x20 || b == 0x7f || b == 0xc2
}

/// `text` escaped, as a new string.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    escape_into(&mut out, text);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_and_controls_are_escaped() {
        assert_eq!(
            escape("</script><img src=x onerror='a()'>&\"x\""),
            "&lt;/script&gt;&lt;img src=x onerror=&#39;a()&#39;&gt;&amp;&quot;x&quot;"
        );
        assert_eq!(
            escape("a\nb\tc\u{1b}[31m\u{0}\u{85}é"),
            "a\nb\tc\u{FFFD}[31m\u{FFFD}\u{FFFD}é"
        );
        assert_eq!(escape("plain ünïcode ✓"), "plain ünïcode ✓");
    }

    #[test]
    fn clipped_text_says_how_much_is_left_out() {
        let mut h = Html::default();
        h.text_clipped("ab<cd", 3);
        assert_eq!(
            h.finish(),
            "ab&lt;<span class=\"clip\">… 2 more characters (the full text: <code>run show</code>)</span>"
        );
        let mut h = Html::default();
        h.text_clipped("éé", 2);
        assert_eq!(h.finish(), "éé");
    }
}
