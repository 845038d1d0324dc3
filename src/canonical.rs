//! Canonical JSON: the one serializer whose bytes are hashed or compared across tools.
//!
//! It reproduces Python's `json.dumps(value, sort_keys=True, ensure_ascii=True)` exactly, because
//! DWP contract ids, journal lines and manifest bytes written by other DWP tooling are defined by
//! it (docs/dwp-spec.md, "Output conventions"):
//! - keys sorted by code point (UTF-8 byte order is code point order);
//! - non-ASCII escaped as `\uXXXX` in lowercase hex, surrogate pairs above U+FFFF;
//! - integers as integers; floats in Python's `repr`: shortest round-trip digits, fixed notation
//!   for decimal exponents -4..16 (always with a fractional part, `5.0`), otherwise an exponent
//!   with a sign and at least two digits (`1e-07`, `1e+16`). serde_json formats floats differently,
//!   which is why this module exists.
//!
//! DCPAgent definition hashes are *not* made here: they use compact JSON in schema order
//! (docs/spec.md §3), which is serde_json's own output for the ordered definition struct.

use serde_json::Value;

/// Compact canonical form: separators `,` and `:`, no whitespace.
pub fn to_compact(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, None, 0);
    out
}

/// Pretty canonical form: `json.dumps(v, sort_keys=True, indent=2)` (no trailing newline).
pub fn to_pretty(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, Some(2), 0);
    out
}

/// SHA-256 hex of the compact canonical form.
pub fn hash_hex(value: &Value) -> String {
    crate::hash::sha256_hex(to_compact(value).as_bytes())
}

fn write_value(out: &mut String, value: &Value, indent: Option<usize>, depth: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else {
                out.push_str(&python_float_repr(n.as_f64().unwrap_or(f64::NAN)));
            }
        }
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, depth + 1);
                write_value(out, item, indent, depth + 1);
            }
            newline(out, indent, depth);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, indent, depth + 1);
                write_string(out, key);
                out.push_str(if indent.is_some() { ": " } else { ":" });
                write_value(out, item, indent, depth + 1);
            }
            newline(out, indent, depth);
            out.push('}');
        }
    }
}

fn newline(out: &mut String, indent: Option<usize>, depth: usize) {
    if let Some(width) = indent {
        out.push('\n');
        for _ in 0..width * depth {
            out.push(' ');
        }
    }
}

/// Writes a JSON string the way Python's `ensure_ascii=True` does.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e && (c as u32) != 0x7f => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`.
pub fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-7", "1e16", "0e0".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::from(sign);
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.push_str(&"0".repeat(int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.push_str(&"0".repeat((-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        out.push_str(&format!("{:02}", exp.abs()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn compact_vector() {
        let v: Value = serde_json::from_str(
            r#"{"b":1,"a":[1.0,1e-7,1e16,"é😀",-0.0,0.5,123.456,1.5e300,0.0001,0.00001],"A":{"z":null,"y":true}}"#,
        )
        .unwrap();
        assert_eq!(
            to_compact(&v),
            r#"{"A":{"y":true,"z":null},"a":[1.0,1e-07,1e+16,"\u00e9\ud83d\ude00",-0.0,0.5,123.456,1.5e+300,0.0001,1e-05],"b":1}"#
        );
    }

    #[test]
    fn pretty_vector() {
        let v = json!({"b": [], "a": {"x": [1, {}]}, "c": "\n\u{7f}\u{1}"});
        assert_eq!(
            to_pretty(&v),
            "{\n  \"a\": {\n    \"x\": [\n      1,\n      {}\n    ]\n  },\n  \"b\": [],\n  \"c\": \"\\n\u{7f}\\u0001\"\n}"
        );
    }

    #[test]
    fn float_repr_matches_python() {
        for (f, s) in [
            (5.0, "5.0"),
            (1e-7, "1e-07"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (12345678901234567890.0, "1.2345678901234567e+19"),
            (0.1, "0.1"),
            (1.0 / 3.0, "0.3333333333333333"),
            (2.5e-5, "2.5e-05"),
            (-3.75, "-3.75"),
            (100.0, "100.0"),
        ] {
            assert_eq!(python_float_repr(f), s, "{f}");
        }
    }

    #[test]
    fn hash_is_of_compact_bytes() {
        assert_eq!(hash_hex(&json!({})), crate::hash::sha256_hex(b"{}"));
    }

    proptest! {
        /// Canonical output is valid JSON that parses back to the same value.
        #[test]
        fn round_trips(s in ".*", i in any::<i64>(), f in -1e300f64..1e300) {
            let v = json!({"s": s, "i": i, "f": f});
            let back: Value = serde_json::from_str(&to_compact(&v)).unwrap();
            prop_assert_eq!(&back, &v);
            let back: Value = serde_json::from_str(&to_pretty(&v)).unwrap();
            prop_assert_eq!(back, v);
        }
    }
}
