//! Tool calls a model wrote into its text, read back as tool calls (`tool_calls_in_text = true`
//! of an `openai` provider).
//!
//! Small local models served through a chat template the server cannot parse tool calls out of
//! (llama.cpp's `llama-server` with the model's own template, for Qwen2.5-Coder 1.5B) answer a
//! tool request with the call as JSON in their text — a ```` ```json ```` fence or Qwen's
//! `<tool_call>…</tool_call>` — and the server returns it as text with no `tool_calls`. Without
//! this the run takes that text for the final answer and ends after one turn. After a turn or
//! two the same model often drops the fence and answers with the bare object alone
//! (`{"name": "exec", "arguments": {…}}`, measured in round 5 of docs/eval.md), so that form
//! counts too when it ends the answer.
//!
//! What counts as a call, so that an answer that merely *shows* JSON is not run: a fenced block
//! (or tagged block) whose whole content is one JSON object, or a list of them, each with a
//! `name` that is one of the tools offered in this request and `arguments` (or `parameters`)
//! that are an object or a string holding one. When at least one block qualifies, every
//! qualifying block becomes a call in the order written, and the text keeps only what is
//! outside them. With no qualifying block, the same object (or list) unfenced qualifies when it
//! starts a line and runs to the end of the answer; the lines before it stay the text. Anything
//! else is left untouched: an answer is never made into a call of a tool the request did not
//! offer.
//!
//! The calls get the same ids the provider gives calls of servers that send none
//! (`call_<response>_<n>`), so the answer read back is the same on every read of the same
//! text; what the run records is the converted answer (calls, not text), so a resume replays
//! calls and the next request's prefix is what the journal holds.

use serde_json::{Map, Value};

use super::{ModelResponse, ToolCall};
use crate::tools::ToolSchema;

/// Moves the calls written in `response.text` into `response.tool_calls` (see the module
/// documentation); `responses_so_far` numbers the ids. A response that already carries calls is
/// left alone.
pub fn extract(response: &mut ModelResponse, tools: &[ToolSchema], responses_so_far: usize) {
    if !response.tool_calls.is_empty() || tools.is_empty() {
        return;
    }
    let offered = |name: &str| tools.iter().any(|t| t.name == name);
    let mut calls = Vec::new();
    let mut kept = String::new();
    let mut rest = response.text.as_str();
    while let Some(block) = next_block(rest) {
        let found = parse_calls(block.body, &offered);
        kept.push_str(&rest[..block.start]);
        match found {
            Some(found) => calls.extend(found),
            None => kept.push_str(&rest[block.start..block.end]),
        }
        rest = &rest[block.end..];
    }
    kept.push_str(rest);
    if calls.is_empty() {
        match trailing_calls(&response.text, &offered) {
            Some((prose, found)) => {
                kept = prose.to_string();
                calls = found;
            }
            None => return,
        }
    }
    response.text = kept.trim().to_string();
    response.tool_calls = calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, arguments))| ToolCall {
            id: format!("call_{}_{}", responses_so_far + 1, i + 1),
            name,
            arguments,
        })
        .collect();
}

/// One fenced or tagged block of a text: where it starts and ends, and its content.
struct Block<'t> {
    start: usize,
    end: usize,
    body: &'t str,
}

/// The first ```` ``` ```` fence or `<tool_call>` block of `text` that is closed.
fn next_block(text: &str) -> Option<Block<'_>> {
    let fence = text.find("```").map(|at| (at, true));
    let tag = text.find("<tool_call>").map(|at| (at, false));
    let (start, is_fence) = match (fence, tag) {
        (Some(f), Some(t)) => {
            if f.0 <= t.0 {
                f
            } else {
                t
            }
        }
        (f, t) => f.or(t)?,
    };
    if is_fence {
        // The info string (`json`, `tool_call`, nothing) ends the opening line.
        let open_end = start + 3;
        let body_start = open_end + text[open_end..].find('\n')? + 1;
        let close = body_start + text[body_start..].find("```")?;
        Some(Block {
            start,
            end: close + 3,
            body: &text[body_start..close],
        })
    } else {
        let body_start = start + "<tool_call>".len();
        let close = body_start + text[body_start..].find("</tool_call>")?;
        Some(Block {
            start,
            end: close + "</tool_call>".len(),
            body: &text[body_start..close],
        })
    }
}

/// An unfenced call object (or list) that starts a line of `text` and runs to its end: the
/// text before it and the calls. The earliest such line wins, so a call is read whole.
fn trailing_calls<'t>(
    text: &'t str,
    offered: &dyn Fn(&str) -> bool,
) -> Option<(&'t str, Vec<(String, Value)>)> {
    let line_starts = std::iter::once(0).chain(text.match_indices('\n').map(|(at, _)| at + 1));
    line_starts
        .filter(|&at| {
            let line = text[at..].trim_start_matches([' ', '\t']);
            line.starts_with('{') || line.starts_with('[')
        })
        .find_map(|at| parse_calls(&text[at..], offered).map(|calls| (&text[..at], calls)))
}

/// The calls `body` holds: one call object or a list of them, every one of an offered tool.
fn parse_calls(body: &str, offered: &dyn Fn(&str) -> bool) -> Option<Vec<(String, Value)>> {
    let value: Value = serde_json::from_str(body.trim()).ok()?;
    let items = match value {
        Value::Array(items) if !items.is_empty() => items,
        Value::Object(_) => vec![value],
        _ => return None,
    };
    items
        .into_iter()
        .map(|item| call_of(item, offered))
        .collect()
}

/// One call object: `{"name": TOOL, "arguments": {…}}` (or `parameters`, or the arguments as a
/// JSON string).
fn call_of(item: Value, offered: &dyn Fn(&str) -> bool) -> Option<(String, Value)> {
    let Value::Object(mut map) = item else {
        return None;
    };
    let name = match map.remove("name") {
        Some(Value::String(name)) if offered(&name) => name,
        _ => return None,
    };
    let arguments = match map.remove("arguments").or_else(|| map.remove("parameters")) {
        Some(Value::Object(arguments)) => Value::Object(arguments),
        Some(Value::String(text)) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(arguments)) => Value::Object(arguments),
            _ => return None,
        },
        None => Value::Object(Map::new()),
        Some(_) => return None,
    };
    Some((name, arguments))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schemas(names: &[&str]) -> Vec<ToolSchema> {
        names
            .iter()
            .map(|n| ToolSchema {
                name: (*n).to_string(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            })
            .collect()
    }

    fn response(text: &str) -> ModelResponse {
        ModelResponse {
            text: text.to_string(),
            tool_calls: Vec::new(),
            usage: None,
        }
    }

    fn read_back(text: &str) -> ModelResponse {
        let mut r = response(text);
        extract(&mut r, &schemas(&["read", "write"]), 2);
        r
    }

    #[test]
    fn a_fenced_call_of_an_offered_tool_becomes_a_call() {
        let r = read_back(
            "I will read it.\n```json\n{\"name\": \"read\", \"arguments\": {\"path\": \"a.py\"}}\n```",
        );
        assert_eq!(r.text, "I will read it.");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].id, "call_3_1");
        assert_eq!(r.tool_calls[0].name, "read");
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "a.py"}));
    }

    #[test]
    fn tagged_calls_lists_and_string_arguments_are_read_in_order() {
        let r = read_back(
            "<tool_call>\n{\"name\": \"read\", \"arguments\": \"{\\\"path\\\": \\\"a\\\"}\"}\n</tool_call>\n\
             ```\n[{\"name\": \"write\", \"parameters\": {\"path\": \"b\", \"content\": \"x\"}}]\n```",
        );
        assert_eq!(r.text, "");
        let names: Vec<&str> = r.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["read", "write"]);
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "a"}));
        assert_eq!(r.tool_calls[1].id, "call_3_2");
    }

    #[test]
    fn a_bare_call_ending_the_answer_becomes_a_call() {
        let r = read_back("{\"name\": \"read\", \"arguments\": {\"path\": \"a.js\"}}\n");
        assert_eq!(r.text, "");
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.tool_calls[0].arguments, json!({"path": "a.js"}));
        let r = read_back(
            "Now the check.\n  [{\"name\": \"write\", \"arguments\": {\"path\": \"b\", \"content\": \"{\\n}\"}}]",
        );
        assert_eq!(r.text, "Now the check.");
        assert_eq!(r.tool_calls[0].name, "write");
        assert_eq!(r.tool_calls[0].arguments["content"], "{\n}");
    }

    #[test]
    fn bare_json_that_is_not_a_whole_trailing_call_stays_an_answer() {
        for text in [
            "{\"name\": \"app\", \"version\": 2}",
            "{\"name\": \"rm\", \"arguments\": {}}",
            "{\"name\": \"read\", \"arguments\": {\"path\": \"a\"}}\nand then I stopped.",
            "Run {\"name\": \"read\", \"arguments\": {}} yourself.",
            "{\"name\": \"read\", \"arguments\": {\"path\": \"a\"}",
        ] {
            let r = read_back(text);
            assert!(r.tool_calls.is_empty(), "{text}");
            assert_eq!(r.text, text);
        }
    }

    #[test]
    fn an_answer_that_only_shows_json_stays_an_answer() {
        for text in [
            "Done. The config is:\n```json\n{\"name\": \"app\", \"version\": 2}\n```",
            "```json\n{\"name\": \"delete_everything\", \"arguments\": {}}\n```",
            "```python\nprint('hi')\n```",
            "```json\n{\"name\": \"read\", \"arguments\": 5}\n```",
            "```json\n{\"name\": \"read\", \"arguments\": {\"path\": \"a\"}",
            "```json\n[]\n```",
            "no block at all",
            "<tool_call>{\"name\": \"read\"",
        ] {
            let r = read_back(text);
            assert!(r.tool_calls.is_empty(), "{text}");
            assert_eq!(r.text, text);
        }
    }

    #[test]
    fn a_block_that_is_not_a_call_stays_in_the_text_beside_one_that_is() {
        let r = read_back(
            "Example:\n```sh\nls\n```\nNow:\n```json\n{\"name\": \"read\", \"arguments\": {\"path\": \"a\"}}\n```\nthanks",
        );
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.text, "Example:\n```sh\nls\n```\nNow:\n\nthanks");
    }

    #[test]
    fn calls_the_server_sent_and_tool_less_requests_are_left_alone() {
        let mut r = response("```json\n{\"name\": \"read\", \"arguments\": {}}\n```");
        extract(&mut r, &[], 0);
        assert!(r.tool_calls.is_empty());
        let mut r = response("```json\n{\"name\": \"write\", \"arguments\": {}}\n```");
        r.tool_calls.push(ToolCall {
            id: "c".into(),
            name: "read".into(),
            arguments: json!({}),
        });
        extract(&mut r, &schemas(&["read", "write"]), 0);
        assert_eq!(r.tool_calls.len(), 1);
        assert!(r.text.starts_with("```json"));
    }

    #[test]
    fn hostile_text_never_panics() {
        for text in [
            "```",
            "```\n",
            "``````",
            "<tool_call>",
            "</tool_call><tool_call>",
            "```é\n```",
            "\u{1F600}```json\n{}\n```\u{1F600}",
        ] {
            let _ = read_back(text);
        }
    }
}
