//! Python's conventions, which the DWP reference tooling uses in its messages, echoes and
//! checks: `repr()` of a string, one-line JSON with `json.dumps`' default separators, and the
//! truthiness of a JSON value. One home, so every `dwp` message quotes names the same way and
//! every `if value:` of the reference reads the same here.

use serde_json::Value;

/// Python truthiness of a JSON value (the reference's `if value:`): `null`, `false`, `0`, `""`,
/// `[]` and `{}` are false, everything else true.
pub fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

/// Python's `repr` of a string, which the DWP messages use to quote names: single quotes unless
/// the text holds a single quote and no double quote; backslashes and control characters escaped.
pub fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// One-line JSON with sorted keys and Python's default separators (`, `, `: `), as echoed by the
/// writer (`OK: addons.vim = {"enabled": true}`).
pub fn inline_json(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let parts: Vec<String> = entries
                .into_iter()
                .map(|(k, v)| {
                    let mut key = String::new();
                    crate::canonical::write_string(&mut key, k);
                    format!("{key}: {}", inline_json(v))
                })
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(inline_json).collect();
            format!("[{}]", parts.join(", "))
        }
        other => crate::canonical::to_compact(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repr_quotes_like_python() {
        assert_eq!(py_repr("foo"), "'foo'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a'b\"c"), "'a\\'b\"c'");
        assert_eq!(py_repr("a\nb"), "'a\\nb'");
    }

    #[test]
    fn inline_json_uses_python_separators() {
        assert_eq!(
            inline_json(&json!({"version": "v1.2.3", "enabled": true})),
            "{\"enabled\": true, \"version\": \"v1.2.3\"}"
        );
    }

    #[test]
    fn truthiness_is_pythons() {
        for falsy in [
            json!(null),
            json!(false),
            json!(0),
            json!(0.0),
            json!(""),
            json!([]),
            json!({}),
        ] {
            assert!(!truthy(&falsy), "{falsy}");
        }
        for true_ in [
            json!(true),
            json!(1),
            json!(-0.5),
            json!("0"),
            json!([0]),
            json!({"a": 0}),
        ] {
            assert!(truthy(&true_), "{true_}");
        }
    }
}
