//! The output contract (kxen-agent.md §6): with `format: json` the final output MUST be one JSON
//! object holding every required field, or the run fails naming what is missing.

use serde_json::{Map, Value};

use crate::agent::{Output, OutputFormat};

/// Checks `final_text` against `output`. The error names what is wrong (missing fields first).
pub fn check(output: &Output, final_text: &str) -> Result<(), String> {
    if output.format == OutputFormat::Text {
        return Ok(());
    }
    let object = parse_object(final_text)?;
    let missing: Vec<&str> = output
        .required_fields
        .iter()
        .filter(|f| !object.contains_key(f.as_str()))
        .map(String::as_str)
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the final output is missing required field{} {} (output.format is json)",
            if missing.len() == 1 { "" } else { "s" },
            missing
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

/// The final output as it is recorded: with `format: json`, an answer that is exactly one fenced
/// code block holding a JSON object is recorded as the object's text (fence and surrounding
/// blank space removed), so `finalText` can be piped straight into `jq`. Anything else is kept
/// as the model wrote it (and [`check`] decides whether it passes).
pub fn normalize(output: &Output, final_text: String) -> String {
    if output.format == OutputFormat::Text {
        return final_text;
    }
    let trimmed = final_text.trim();
    match strip_fence(trimmed) {
        Some(body) if matches!(serde_json::from_str::<Value>(body), Ok(Value::Object(_))) => {
            body.to_string()
        }
        _ => final_text,
    }
}

/// One JSON object, alone or inside a single ```json fence.
fn parse_object(text: &str) -> Result<Map<String, Value>, String> {
    let trimmed = text.trim();
    let body = strip_fence(trimmed).unwrap_or(trimmed);
    match serde_json::from_str::<Value>(body) {
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
        let err = check(&out, r#"{"summary":"ok"}"#).unwrap_err();
        assert!(
            err.contains("`passed`") && !err.contains("`summary`"),
            "{err}"
        );
        let err = check(&out, "all good").unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
        let err = check(&out, "[1]").unwrap_err();
        assert!(err.contains("array"), "{err}");
        assert!(check(&out, "{\"summary\":1} {\"passed\":2}").is_err());
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
