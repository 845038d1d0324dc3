//! The argument schema a tool is advertised with, derived from the serde struct that parses its
//! arguments (`schemars`), so the two cannot disagree.
//!
//! `schemars` writes full JSON Schema 2020-12; the model is sent the plain subset that function
//! calling APIs document, in the shape the first (hand-written) schemas had, so the bytes sent to
//! the model did not change when the schemas became derived (`testdata/model_schemas.json` pins
//! them):
//! - no `$schema`, `title` or top-level `description` (the tool's description is the registry
//!   entry's), no `format` (`uint64` is no format the APIs know) and no `default` (a field's
//!   default is said in its description);
//! - an optional field is one the model leaves out, so its type is the plain type, not
//!   `[type, "null"]` (the parser still takes `null` for it);
//! - keys in a fixed order: `type`, `properties`, `required` first, `additionalProperties` and
//!   `description` last, the rest (`minimum`, `maximum`, …) in between as `schemars` wrote them.

use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{Map, Value};

/// Keywords that mean nothing to the model or are said elsewhere (see the module doc).
const DROPPED: &[&str] = &["$schema", "title", "format", "default"];
/// Keywords that lead an object, in this order.
const FIRST: &[&str] = &["type", "properties", "required"];
/// Keywords that close an object, in this order.
const LAST: &[&str] = &["additionalProperties", "description"];

/// The model-facing JSON Schema of the arguments `A` (a struct: always an object schema).
pub(crate) fn parameters<A: JsonSchema>() -> Value {
    let mut schema = SchemaGenerator::default()
        .into_root_schema_for::<A>()
        .to_value();
    if let Value::Object(map) = &mut schema {
        map.remove("description");
    }
    model_dialect(schema)
}

/// Rewrites one schema (and the schemas of its properties) into the model dialect.
fn model_dialect(schema: Value) -> Value {
    let Value::Object(mut map) = schema else {
        return schema;
    };
    for key in DROPPED {
        map.remove(*key);
    }
    if let Some(Value::Array(types)) = map.get("type") {
        let not_null: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
        if let [only] = not_null[..] {
            let only = only.clone();
            map.insert("type".into(), only);
        }
    }
    if let Some(Value::Object(properties)) = map.remove("properties") {
        let properties = properties
            .into_iter()
            .map(|(name, schema)| (name, model_dialect(schema)))
            .collect();
        map.insert("properties".into(), Value::Object(properties));
    }
    Value::Object(ordered(map))
}

/// `map` with [`FIRST`] keys first and [`LAST`] keys last.
fn ordered(mut map: Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for key in FIRST {
        if let Some(v) = map.remove(*key) {
            out.insert((*key).into(), v);
        }
    }
    let last: Vec<(&str, Value)> = LAST
        .iter()
        .filter_map(|key| map.remove(*key).map(|v| (*key, v)))
        .collect();
    out.extend(map);
    out.extend(last.into_iter().map(|(k, v)| (k.to_string(), v)));
    out
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    /// Doc comments of the struct are not the tool's description.
    #[derive(Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Args {
        /// The name
        name: String,
        /// How many (default 3)
        #[serde(default)]
        #[schemars(range(min = 1, max = 9))]
        max_count: Option<u32>,
        /// Everything
        #[serde(default)]
        all: bool,
        /// Which ones
        #[serde(default)]
        tags: Vec<String>,
    }

    #[test]
    fn the_model_dialect_is_plain_json_schema_in_a_fixed_key_order() {
        let schema = parameters::<Args>();
        assert_eq!(
            serde_json::to_string(&schema).unwrap(),
            serde_json::to_string(&json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The name"},
                    "maxCount": {"type": "integer", "minimum": 1, "maximum": 9, "description": "How many (default 3)"},
                    "all": {"type": "boolean", "description": "Everything"},
                    "tags": {"type": "array", "items": {"type": "string"}, "description": "Which ones"}
                },
                "required": ["name"],
                "additionalProperties": false
            }))
            .unwrap()
        );
    }

    #[test]
    fn what_the_parser_accepts_matches_the_schema() {
        let ok: Args = serde_json::from_value(json!({"name": "a", "maxCount": 2})).unwrap();
        assert_eq!(ok.max_count, Some(2));
        // Unknown fields: `additionalProperties: false` and `deny_unknown_fields` agree.
        assert!(serde_json::from_value::<Args>(json!({"name": "a", "other": 1})).is_err());
        // A required field.
        assert!(serde_json::from_value::<Args>(json!({"maxCount": 2})).is_err());
    }
}
