//! The output contract (docs/spec.md §6): with `format: json` the final output MUST be one JSON
//! object holding every required field, or the run fails naming what is missing. Beyond the
//! spec, it must also match the definition's `output.schema` and the run's `--output-schema`
//! ([`crate::agent::schema`]), or the run fails naming the first violations by JSON pointer.

use serde_json::{Map, Value};

use crate::agent::{Output, OutputFormat};
use crate::error::Error;

/// Why a final answer breaks the output contract. Not a failure of the command: the run records
/// it as its `outputContract` error and ends `failed`, so it is a value of its own, converted into
/// the crate's [`Error`] (invalid input) only where a caller needs one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation(pub String);

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Violation {}

impl From<Violation> for Error {
    fn from(why: Violation) -> Error {
        Error::invalid(why.0)
    }
}

/// Checks `final_text` against `output`. The error names what is wrong (missing fields first).
pub fn check(output: &Output, final_text: &str) -> Result<(), Violation> {
    if output.format == OutputFormat::Text {
        return Ok(());
    }
    let object = parse_object(final_text).map_err(Violation)?;
    let missing: Vec<&str> = output
        .required_fields
        .iter()
        .filter(|f| !object.contains_key(f.as_str()))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Violation(format!(
            "the final output is missing required field{} {} (output.format is json)",
            if missing.len() == 1 { "" } else { "s" },
            missing
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        )))
    }
}

/// [`check`], then the definition's `output.schema` and the run's `--output-schema`
/// (`run_schema`), in that order.
pub fn check_answer(
    output: &Output,
    run_schema: Option<&Value>,
    final_text: &str,
) -> Result<(), Violation> {
    check(output, final_text)?;
    let schemas = [
        (output.schema.as_ref(), "spec.output.schema"),
        (run_schema, "the run's --output-schema"),
    ];
    for (schema, what) in schemas {
        let Some(schema) = schema else { continue };
        let trimmed = final_text.trim();
        let answer = parse_unique(strip_fence(trimmed).unwrap_or(trimmed)).map_err(|e| {
            Violation(format!("the final output must be one JSON value matching {what}, but it is not valid JSON: {e}"))
        })?;
        let found = crate::agent::schema::violations(schema, &answer);
        if !found.is_empty() {
            return Err(Violation(format!(
                "the final output does not match {what}: {}",
                found.join("; ")
            )));
        }
    }
    Ok(())
}

/// The final output as it is recorded: with `format: json`, an answer that is exactly one fenced
/// code block holding a JSON object is recorded as the object's text (fence and surrounding
/// blank space removed), so `finalText` can be piped straight into `jq`. Anything else is kept
/// as the model wrote it (and [`check`] decides whether it passes).
pub fn normalize(output: &Output, final_text: String) -> String {
    if output.format == OutputFormat::Text {
        return final_text;
    }
    unfence(final_text, Value::is_object)
}

/// [`normalize`] for a text definition's run with `--output-schema`: any JSON value alone in
/// one fence is recorded without it.
pub fn normalize_json(final_text: String) -> String {
    unfence(final_text, |_| true)
}

/// `final_text` without its fence when it is exactly one fenced JSON value that `keep` takes.
fn unfence(final_text: String, keep: fn(&Value) -> bool) -> String {
    let trimmed = final_text.trim();
    match strip_fence(trimmed) {
        Some(body) if parse_unique(body).is_ok_and(|v| keep(&v)) => body.to_string(),
        _ => final_text,
    }
}

/// One JSON object, alone or inside a single ```json fence.
fn parse_object(text: &str) -> Result<Map<String, Value>, String> {
    let trimmed = text.trim();
    let body = strip_fence(trimmed).unwrap_or(trimmed);
    match parse_unique(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(format!(
            "the final output must be one JSON object (output.format is json), got a JSON {}",
            match other {
                Value::Array(_) => "array",
                Value::String(_) => "string",
                Value::Number(_) => "number",
                Value::Bool(_) => "boolean",
                _ => "null",
            }
        )),
        Err(e) => Err(format!(
            "the final output must be one JSON object (output.format is json), but it is not valid JSON: {e}"
        )),
    }
}

/// Parses JSON like `serde_json::from_str::<Value>`, but refuses an object that holds a key
/// twice (at any depth): a plain parse keeps the last one silently, so a consumer that keeps
/// the first would read a different answer than the one checked.
fn parse_unique(text: &str) -> serde_json::Result<Value> {
    serde_json::from_str::<Unique>(text).map(|u| u.0)
}

/// A JSON value whose objects have distinct keys.
struct Unique(Value);

impl<'de> serde::Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!("duplicate key `{key}`")));
            }
            let Unique(value) = map.next_value()?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// The content of a text that is exactly one fenced code block.
pub fn strip_fence(text: &str) -> Option<&str> {
    let rest = text.strip_prefix("```")?;
    let body_start = rest.find('\n')? + 1;
    let body = rest[body_start..].strip_suffix("```")?;
    if body.contains("```") {
        return None;
    }
    Some(body.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_output(fields: &[&str]) -> Output {
        Output {
            format: OutputFormat::Json,
            required_fields: fields.iter().map(|s| s.to_string()).collect(),
            schema: None,
        }
    }

    #[test]
    fn text_always_passes() {
        assert!(check(&Output::default(), "anything").is_ok());
    }

    #[test]
    fn json_needs_every_required_field() {
        let out = json_output(&["summary", "passed"]);
        assert!(check(&out, r#"{"summary":"ok","passed":true}"#).is_ok());
        assert!(check(&out, "```json\n{\"summary\":\"ok\",\"passed\":true}\n```").is_ok());
        let err = check(&out, r#"{"summary":"ok"}"#).unwrap_err().0;
        assert!(
            err.contains("`passed`") && !err.contains("`summary`"),
            "{err}"
        );
        let err = check(&out, "all good").unwrap_err().0;
        assert!(err.contains("not valid JSON"), "{err}");
        let err = check(&out, "[1]").unwrap_err().0;
        assert!(err.contains("array"), "{err}");
        assert!(check(&out, "{\"summary\":1} {\"passed\":2}").is_err());
    }

    #[test]
    fn duplicate_keys_make_an_invalid_final_answer_at_any_depth() {
        let out = json_output(&["ok"]);
        for answer in [
            r#"{"ok":true,"ok":false}"#,
            r#"{"ok":true,"detail":{"a":1,"a":2}}"#,
            "```json\n{\"ok\":1,\"x\":[{\"b\":1,\"b\":1}]}\n```",
        ] {
            let err = check(&out, answer).unwrap_err().0;
            assert!(
                err.contains("not valid JSON") && err.contains("duplicate key"),
                "{answer}: {err}"
            );
        }
        // Equal keys in different objects are fine; values keep their types.
        assert!(check(&out, r#"{"ok":1.5,"a":{"ok":null},"b":[{"ok":-1}]}"#).is_ok());
        assert_eq!(
            parse_unique(r#"{"n":-1,"f":1.5,"s":"x","a":[true,null]}"#).unwrap(),
            serde_json::json!({"n":-1,"f":1.5,"s":"x","a":[true,null]})
        );
        // A fenced answer with a duplicate key is recorded as written (and then refused).
        let fenced = "```json\n{\"ok\":1,\"ok\":2}\n```".to_string();
        assert_eq!(normalize(&out, fenced.clone()), fenced);
    }

    #[test]
    fn schemas_of_the_definition_and_the_run_both_apply() {
        let mut out = json_output(&["ok"]);
        out.schema = Some(serde_json::json!({"properties": {"ok": {"type": "boolean"}}}));
        let run = serde_json::json!({"properties": {"n": {"maximum": 3}}});
        assert!(check_answer(&out, Some(&run), r#"{"ok":true,"n":2}"#).is_ok());
        let err = check_answer(&out, Some(&run), r#"{"ok":1,"n":2}"#)
            .unwrap_err()
            .0;
        assert!(
            err.contains("spec.output.schema") && err.contains("`/ok`"),
            "{err}"
        );
        let err = check_answer(&out, Some(&run), r#"{"ok":true,"n":9}"#)
            .unwrap_err()
            .0;
        assert!(
            err.contains("--output-schema") && err.contains("`/n`"),
            "{err}"
        );
        // A text definition with a run schema: the answer must be JSON.
        let text = Output::default();
        let err = check_answer(&text, Some(&run), "fine").unwrap_err().0;
        assert!(err.contains("not valid JSON"), "{err}");
        assert!(check_answer(&text, Some(&run), "```json\n{\"n\":1}\n```").is_ok());
    }

    #[test]
    fn a_fenced_json_answer_is_recorded_without_its_fence() {
        let out = json_output(&["ok"]);
        let fenced = "\n```json\n{\"ok\": true}\n```\n".to_string();
        assert_eq!(normalize(&out, fenced), "{\"ok\": true}");
        // Not one object in one fence: kept as written.
        let two = "```json\n{}\n```\n```json\n{}\n```".to_string();
        assert_eq!(normalize(&out, two.clone()), two);
        let array = "```json\n[1]\n```".to_string();
        assert_eq!(normalize(&out, array.clone()), array);
        // Text output is never touched.
        let text = "```json\n{}\n```".to_string();
        assert_eq!(normalize(&Output::default(), text.clone()), text);
    }
}
