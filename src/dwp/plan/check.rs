//! Small validators over parsed JSON, shared by the contract and journal readers.
//!
//! They return a [`Problem`] (where in the document, and what is wrong); the caller turns the
//! first one into a single user-facing [`crate::Error`] naming the file, with
//! [`Problem::in_file`] or by embedding its `Display`. Validating the parsed `Value` (rather than
//! deserializing into `deny_unknown_fields` structs) keeps the raw document intact for hashing
//! and verbatim output, and lets each message name the exact JSON path.

use std::fmt;
use std::sync::OnceLock;

use regex::Regex;
use serde_json::{Map, Value};

/// What a validator found wrong in one parsed document.
///
/// A problem is not yet an [`crate::Error`]: it does not know the file it came from, nor which
/// exit code its reader gives (an invalid contract or journal is exit 4; a refused append of an
/// event the writer built itself is an external failure). Its `Display` is the words every
/// message embeds, `<where>: <problem>` (or just `<problem>` for the record as a whole); they
/// mirror the DWP reference implementation's wording byte for byte, so tests compare them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The JSON path or field (`contract.tasks[2].id`, `seq`, `actor.kind`); empty when the
    /// problem is the record as a whole ("missing envelope field 'seq'").
    pub at: String,
    /// What is wrong there, in the reference's words.
    pub what: String,
}

impl Problem {
    pub fn new(at: impl Into<String>, what: impl Into<String>) -> Problem {
        Problem {
            at: at.into(),
            what: what.into(),
        }
    }

    /// A problem with the record as a whole rather than one of its fields.
    pub fn whole(what: impl Into<String>) -> Problem {
        Problem::new(String::new(), what)
    }

    /// The single user-facing error for this problem in `path`: `<kind> invalid: <path>:
    /// <problem>` (exit 4), where `kind` names the document ("contract", "journal") and `path`
    /// may carry a line (`journal.jsonl:7`).
    pub fn in_file(&self, kind: &str, path: impl fmt::Display) -> crate::Error {
        crate::Error::invalid(format!("{kind} invalid: {path}: {self}"))
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.at.is_empty() {
            f.write_str(&self.what)
        } else {
            write!(f, "{}: {}", self.at, self.what)
        }
    }
}

impl std::error::Error for Problem {}

/// `problem!(at, "words {x}", …)`: a [`Problem`] at `at` whose words are formatted as by
/// `format!` (so `{at}`-style captures work as there).
macro_rules! problem {
    ($at:expr, $($words:tt)+) => {
        $crate::dwp::plan::check::Problem::new($at, format!($($words)+))
    };
}
pub(crate) use problem;

pub type Check<T> = std::result::Result<T, Problem>;

/// Names in plan-record messages are quoted as the reference quotes them.
pub use crate::dwp::pyfmt::py_repr;

/// A closed object: every key in `required` present, no key outside `required ∪ optional`.
pub fn object<'v>(
    v: &'v Value,
    at: &str,
    required: &[&str],
    optional: &[&str],
) -> Check<&'v Map<String, Value>> {
    let map = v
        .as_object()
        .ok_or_else(|| problem!(at, "expected an object, found {}", kind_of(v)))?;
    if let Some(key) = map
        .keys()
        .find(|k| !required.contains(&k.as_str()) && !optional.contains(&k.as_str()))
    {
        return Err(problem!(
            at,
            "unknown field {} (the object is closed)",
            py_repr(key)
        ));
    }
    if let Some(key) = required.iter().find(|k| !map.contains_key(**k)) {
        return Err(problem!(at, "missing required field {}", py_repr(key)));
    }
    Ok(map)
}

pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Any string (empty allowed).
pub fn string<'v>(v: &'v Value, at: &str) -> Check<&'v str> {
    v.as_str()
        .ok_or_else(|| problem!(at, "expected a string, found {}", kind_of(v)))
}

/// A non-empty string.
pub fn text<'v>(v: &'v Value, at: &str) -> Check<&'v str> {
    nonempty(string(v, at)?, at)
}

/// [`text`] for a string already in hand.
pub fn nonempty<'s>(s: &'s str, at: &str) -> Check<&'s str> {
    if s.is_empty() {
        return Err(problem!(at, "must not be empty"));
    }
    Ok(s)
}

/// A string or null.
pub fn opt_string<'v>(v: &'v Value, at: &str) -> Check<Option<&'v str>> {
    if v.is_null() {
        Ok(None)
    } else {
        string(v, at).map(Some)
    }
}

/// A string from a closed set.
pub fn one_of<'v>(v: &'v Value, at: &str, allowed: &[&str]) -> Check<&'v str> {
    member(string(v, at)?, at, allowed)
}

/// [`one_of`] for a string already in hand.
pub fn member<'s>(s: &'s str, at: &str, allowed: &[&str]) -> Check<&'s str> {
    if !allowed.contains(&s) {
        return Err(problem!(
            at,
            "{} is not one of {}",
            py_repr(s),
            allowed.join(", ")
        ));
    }
    Ok(s)
}

/// A string matching `re` (Python `re.match` + `$` semantics: one trailing newline tolerated).
pub fn matching<'v>(v: &'v Value, at: &str, re: &Regex, what: &str) -> Check<&'v str> {
    pattern(string(v, at)?, at, re, what)
}

/// [`matching`] for a string already in hand.
pub fn pattern<'s>(s: &'s str, at: &str, re: &Regex, what: &str) -> Check<&'s str> {
    if !py_match(re, s) {
        return Err(problem!(at, "{} is not a valid {what}", py_repr(s)));
    }
    Ok(s)
}

/// `re` must be anchored with `^…\z`-style `^…$`; Python's `$` also matches before a final
/// newline, which the reference relies on, so we tolerate exactly that.
pub fn py_match(re: &Regex, s: &str) -> bool {
    re.is_match(s.strip_suffix('\n').unwrap_or(s))
}

/// An integer (JSON booleans and floats rejected) not below `min`.
pub fn int(v: &Value, at: &str, min: i64) -> Check<i64> {
    let n = v
        .as_i64()
        .filter(|_| v.is_number())
        .ok_or_else(|| problem!(at, "expected an integer, found {}", describe(v)))?;
    if n < min {
        return Err(problem!(at, "{n} is below the minimum {min}"));
    }
    Ok(n)
}

/// A number (int or float, booleans rejected) not below `min`.
pub fn number(v: &Value, at: &str, min: f64) -> Check<f64> {
    let n = v
        .as_f64()
        .filter(|_| v.is_number())
        .ok_or_else(|| problem!(at, "expected a number, found {}", describe(v)))?;
    if n < min {
        return Err(problem!(at, "{} is below the minimum {min}", number_str(v)));
    }
    Ok(n)
}

pub fn boolean(v: &Value, at: &str) -> Check<bool> {
    v.as_bool()
        .ok_or_else(|| problem!(at, "expected true or false, found {}", kind_of(v)))
}

/// A list of strings; `min` items at least, optionally unique, optionally non-empty items.
pub fn strings<'v>(
    v: &'v Value,
    at: &str,
    min: usize,
    unique: bool,
    nonempty_items: bool,
) -> Check<Vec<&'v str>> {
    let items = list(v, at, min)?;
    let mut out: Vec<&str> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{at}[{i}]");
        let s = if nonempty_items {
            text(item, &at)?
        } else {
            string(item, &at)?
        };
        if unique && out.contains(&s) {
            return Err(problem!(at, "duplicate item {}", py_repr(s)));
        }
        out.push(s);
    }
    Ok(out)
}

pub fn list<'v>(v: &'v Value, at: &str, min: usize) -> Check<&'v Vec<Value>> {
    let items = v
        .as_array()
        .ok_or_else(|| problem!(at, "expected a list, found {}", kind_of(v)))?;
    if items.len() < min {
        return Err(problem!(at, "needs at least {min} item(s)"));
    }
    Ok(items)
}

/// `v` as Python `str()` would print it in a message (floats via `repr`).
pub fn number_str(v: &Value) -> String {
    match v {
        Value::Number(n) if n.is_f64() => {
            crate::canonical::python_float_repr(n.as_f64().unwrap_or(f64::NAN))
        }
        other => other.to_string(),
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Number(_) => number_str(v),
        other => kind_of(other).to_string(),
    }
}

/// An RFC 3339 timestamp (the contract's `created_at`, `authorization.timestamp`).
pub fn rfc3339<'v>(v: &'v Value, at: &str) -> Check<&'v str> {
    let s = string(v, at)?;
    if crate::clock::parse_rfc3339(s).is_none() {
        return Err(problem!(at, "{} is not an RFC 3339 timestamp", py_repr(s)));
    }
    Ok(s)
}

macro_rules! regexes {
    ($($name:ident = $pattern:expr;)*) => {
        $(pub fn $name() -> &'static Regex {
            static RE: OnceLock<Regex> = OnceLock::new();
            RE.get_or_init(|| Regex::new($pattern).expect("valid built-in regex"))
        })*
    };
}

regexes! {
    plan_id = r"^PLAN_(?:[0-9]{3,}_)?[a-z0-9]+(?:_[a-z0-9]+){1,4}$";
    criterion_id = r"^AC-[a-z0-9]+(?:-[a-z0-9]+)*$";
    invariant_id = r"^INV-[a-z0-9]+(?:-[a-z0-9]+)*$";
    task_id = r"^T-[a-z0-9]+(?:-[a-z0-9]+)*$";
    limit_id = r"^[a-z][a-z0-9_]*$";
    spec_version = r"^\d+\.\d+\.\d+$";
    sha256_hex = r"^[0-9a-f]{64}$";
    delegation_id = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$";
    prefixed_sha256 = r"^sha256:[0-9a-f]{64}$";
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repr_matches_python() {
        assert_eq!(py_repr("abc"), "'abc'");
        assert_eq!(py_repr("it's"), "\"it's\"");
        assert_eq!(py_repr("a'\"b"), "'a\\'\"b'");
        assert_eq!(py_repr("a\\b\n"), "'a\\\\b\\n'");
    }

    #[test]
    fn closed_objects_name_the_field() {
        let err = object(&json!({"a": 1, "zz": 2}), "x", &["a"], &[]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "x: unknown field 'zz' (the object is closed)"
        );
        let err = object(&json!({}), "x", &["a"], &[]).unwrap_err();
        assert_eq!(err.to_string(), "x: missing required field 'a'");
    }

    #[test]
    fn ints_reject_bools_and_floats() {
        assert!(int(&json!(true), "x", 0).is_err());
        assert!(int(&json!(1.0), "x", 0).is_err());
        assert_eq!(int(&json!(3), "x", 1), Ok(3));
        assert!(number(&json!(false), "x", 0.0).is_err());
    }

    #[test]
    fn python_dollar_tolerates_one_trailing_newline() {
        assert!(py_match(plan_id(), "PLAN_fix_login\n"));
        assert!(!py_match(plan_id(), "PLAN_fix_login\n\n"));
        assert!(py_match(plan_id(), "PLAN_001_fix_login"));
        assert!(!py_match(plan_id(), "PLAN_fix"));
        assert!(!py_match(plan_id(), "PLAN_a_b_c_d_e_f"));
    }
}
