//! **(beyond the spec)** A JSON Schema for the final answer: `spec.output.schema` (inline, or a
//! path relative to the definition file) and `run --output-schema FILE`.
//!
//! A schema is checked once, when the definition (or the flag's file) is read: it must be an
//! object, valid against its draft's meta-schema, and self-contained (the validator is built
//! without HTTP or file resolvers, so a remote `$ref` is an invalid schema, never a network
//! request). A final answer is then checked against it and each violation is named by the JSON
//! pointer of the part of the answer that breaks it.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

/// Largest schema file accepted (1 MiB).
pub const MAX_SCHEMA_BYTES: u64 = 1024 * 1024;

/// How many violations a failed check names.
pub const MAX_VIOLATIONS: usize = 5;

/// Why `schema` cannot be used as a JSON Schema for a final answer (`None`: it can).
pub fn problem(schema: &Value) -> Option<String> {
    if !schema.is_object() {
        return Some("must be a JSON Schema object".into());
    }
    if let Some(e) = jsonschema::meta::validate(schema)
        .err()
        .map(|e| located(e.instance_path().as_str(), &e.to_string()))
    {
        return Some(format!("is not a valid JSON Schema: {e}"));
    }
    jsonschema::validator_for(schema)
        .err()
        .map(|e| format!("is not a usable JSON Schema: {e}"))
}

/// Reads and checks the schema file `path` (`what` names it in messages: `--output-schema`,
/// `spec.output.schema`). A missing file is exit 3, anything wrong with it exit 4.
pub fn load(path: &Path, what: &str) -> Result<Value> {
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| Error::io("read", path, e))?;
    let mut bytes = Vec::new();
    file.take(MAX_SCHEMA_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", path, e))?;
    if bytes.len() as u64 > MAX_SCHEMA_BYTES {
        return Err(Error::invalid(format!(
            "{what} {shown}: the file is over {MAX_SCHEMA_BYTES} bytes"
        )));
    }
    let schema: Value = serde_json::from_slice(&bytes).map_err(|e| {
        Error::invalid(format!("{what} {shown}: not valid JSON: {e}"))
            .with_hint("a JSON Schema file is one JSON object, like {\"type\": \"object\"}")
    })?;
    match problem(&schema) {
        Some(why) => Err(Error::invalid(format!("{what} {shown}: {why}"))),
        None => Ok(schema),
    }
}

/// The first [`MAX_VIOLATIONS`] ways `answer` breaks `schema`, each as "`POINTER`: what"
/// (the root is `/`); empty when it fits.
pub fn violations(schema: &Value, answer: &Value) -> Vec<String> {
    let validator = match jsonschema::validator_for(schema) {
        Ok(v) => v,
        // Checked when it was read; a schema that no longer compiles fails every answer.
        Err(e) => return vec![format!("the schema cannot be used: {e}")],
    };
    validator
        .iter_errors(answer)
        .take(MAX_VIOLATIONS)
        .map(|e| located(e.instance_path().as_str(), &e.to_string()))
        .collect()
}

/// "`POINTER`: message", the root written `/`.
fn located(pointer: &str, message: &str) -> String {
    let pointer = if pointer.is_empty() { "/" } else { pointer };
    format!("`{pointer}`: {message}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_schema_is_an_object_valid_against_its_meta_schema() {
        assert!(problem(&json!({"type": "object", "required": ["ok"]})).is_none());
        assert!(problem(&json!(true)).is_some());
        let why = problem(&json!({"type": "objekt"})).unwrap();
        assert!(why.contains("not a valid JSON Schema"), "{why}");
        let remote = json!({"$ref": "https://example.com/s.json"});
        assert!(problem(&remote).is_some(), "a remote $ref is never fetched");
    }

    #[test]
    fn violations_are_named_by_pointer() {
        let schema = json!({"type": "object", "required": ["ok"],
            "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}}});
        assert!(violations(&schema, &json!({"ok": true, "n": 1})).is_empty());
        let found = violations(&schema, &json!({"ok": "yes", "n": 1.5}));
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.iter().any(|v| v.starts_with("`/ok`")), "{found:?}");
        assert!(found.iter().any(|v| v.starts_with("`/n`")), "{found:?}");
        let root = violations(&schema, &json!({}));
        assert!(root[0].starts_with("`/`"), "{root:?}");
    }
}
