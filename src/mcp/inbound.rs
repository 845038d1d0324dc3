//! Requests a server sends to kxen-agent while one of ours is running (server-to-client
//! requests), and the answer each gets. Both transports read them wherever they arrive (stdio
//! lines, the SSE stream of a POST, a resumed stream) and send the answer at once: a server
//! that waits on us must never turn a call into UNKNOWN by waiting until its timeout.
//!
//! - `ping`: an empty result.
//! - `elicitation/create` (the server asks the user for input): runs are unattended, so no
//!   person is asked; the policy's `mcpElicitation` decides ([`McpElicitation`]). Every such
//!   exchange is also recorded, so the call's journaled outcome says what was asked and what
//!   the server got.
//! - `roots/list`: the workspace root, when the client declared `roots` (stdio servers only: a
//!   local process may act on the workspace; a remote server learns nothing of our paths).
//! - `sampling/createMessage` and anything else: a JSON-RPC error ("method not found"); the
//!   server's model calls are not ours to make.

use serde_json::{Map, Value, json};

use crate::policy::McpElicitation;

/// The longest excerpt of a server's elicitation message or schema kept in a record.
const RECORD_EXCERPT: usize = 400;

/// What kxen-agent offers a server, and how it answers its requests.
#[derive(Debug, Clone)]
pub struct Answerer {
    pub elicitation: McpElicitation,
    /// The `roots/list` answer; `None`: `roots` is not declared (and the request is refused).
    pub roots: Option<Vec<Value>>,
}

/// One answered request.
pub struct Answered {
    /// The JSON-RPC response to send.
    pub reply: Value,
    /// For an elicitation: what was asked and answered, for the call's outcome.
    pub record: Option<String>,
}

impl Answerer {
    /// A server not told about roots, answering elicitations as `elicitation` says.
    pub fn new(elicitation: McpElicitation) -> Answerer {
        Answerer {
            elicitation,
            roots: None,
        }
    }

    /// Roots: `workspace` as a `file://` URI (when it is absolute, as a workspace always is).
    pub fn with_root(mut self, workspace: &std::path::Path) -> Answerer {
        self.roots = url::Url::from_directory_path(workspace)
            .ok()
            .map(|uri| vec![json!({"uri": uri.as_str(), "name": "workspace"})]);
        self
    }

    /// The `capabilities` of our `initialize` request. Elicitation is declared (form mode)
    /// whatever the policy says: a declined request is an answer, where an undeclared one
    /// leaves a server to guess.
    pub fn capabilities(&self) -> Value {
        let mut caps = json!({"elicitation": {}});
        if self.roots.is_some() {
            caps["roots"] = json!({"listChanged": false});
        }
        caps
    }

    /// The answer to `request` (a message with `method` and `id`).
    pub fn answer(&self, request: &Value) -> Answered {
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        let method = request["method"].as_str().unwrap_or_default();
        let params = request.get("params").unwrap_or(&Value::Null);
        let result = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
        let refuse = |why: String| json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": why}});
        match method {
            "ping" => Answered {
                reply: result(json!({})),
                record: None,
            },
            "roots/list" => match &self.roots {
                Some(roots) => Answered {
                    reply: result(json!({"roots": roots})),
                    record: None,
                },
                None => Answered {
                    reply: refuse("kxen-agent declared no roots to this server".into()),
                    record: None,
                },
            },
            "elicitation/create" => {
                let (action, content) = self.elicit(params);
                let mut answer = json!({"action": action});
                if let Some(content) = &content {
                    answer["content"] = Value::Object(content.clone());
                }
                let record = record(params, self.elicitation, action, content.as_ref());
                Answered {
                    reply: result(answer),
                    record: Some(record),
                }
            }
            "sampling/createMessage" => Answered {
                reply: refuse("kxen-agent does not offer sampling to MCP servers".into()),
                record: None,
            },
            other => Answered {
                reply: refuse(format!(
                    "kxen-agent does not support {}",
                    crate::text::preview(other, 80)
                )),
                record: None,
            },
        }
    }

    /// The action and content for an elicitation with `params`.
    fn elicit(&self, params: &Value) -> (&'static str, Option<Map<String, Value>>) {
        if self.elicitation != McpElicitation::AcceptDefaults {
            return ("decline", None);
        }
        // URL mode (2025-11-25) sends the user to a page: nothing to accept unattended.
        if params.get("mode").and_then(Value::as_str).unwrap_or("form") != "form" {
            return ("decline", None);
        }
        match defaults(&params["requestedSchema"]) {
            Some(content) => ("accept", Some(content)),
            None => ("decline", None),
        }
    }
}

/// Every field's default of a form schema, or `None` when a required field has none (or the
/// schema is not an object schema).
fn defaults(schema: &Value) -> Option<Map<String, Value>> {
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return None;
    }
    let empty = Map::new();
    let properties = match schema.get("properties") {
        None => &empty,
        Some(p) => p.as_object()?,
    };
    let required = match schema.get("required") {
        None => Vec::new(),
        Some(r) => r
            .as_array()?
            .iter()
            .map(Value::as_str)
            .collect::<Option<Vec<_>>>()?,
    };
    if required.iter().any(|name| {
        properties
            .get(*name)
            .and_then(|p| p.get("default"))
            .is_none()
    }) {
        return None;
    }
    Some(
        properties
            .iter()
            .filter_map(|(name, p)| Some((name.clone(), p.get("default")?.clone())))
            .collect(),
    )
}

/// One line saying what the server asked and what it got (redacted: a server may put anything
/// in its message).
fn record(
    params: &Value,
    policy: McpElicitation,
    action: &str,
    content: Option<&Map<String, Value>>,
) -> String {
    let message = params["message"].as_str().unwrap_or_default();
    let schema = params
        .get("requestedSchema")
        .map(|s| s.to_string())
        .unwrap_or_else(|| format!("url {}", params["url"]));
    let answer = match content {
        Some(content) => format!("{action} with {}", Value::Object(content.clone())),
        None => action.to_string(),
    };
    crate::redact::redact(&format!(
        "[MCP elicitation] the server asked {:?} (requested: {}); answered {} (policy \
         mcpElicitation {:?})",
        crate::text::preview(message, RECORD_EXCERPT),
        crate::text::preview(&schema, RECORD_EXCERPT),
        crate::text::preview(&answer, RECORD_EXCERPT),
        policy.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elicit(policy: McpElicitation, schema: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "id": 7, "method": "elicitation/create",
            "params": {"message": "Who?", "requestedSchema": schema}});
        let answered = Answerer::new(policy).answer(&request);
        assert!(answered.record.is_some());
        assert_eq!(answered.reply["id"], 7);
        answered.reply["result"].clone()
    }

    #[test]
    fn elicitations_are_declined_or_accepted_with_every_default() {
        let all = json!({"type": "object", "properties": {
            "name": {"type": "string", "default": "Ada"},
            "age": {"type": "integer", "default": 30},
            "note": {"type": "string"}}, "required": ["name"]});
        assert_eq!(
            elicit(McpElicitation::Decline, all.clone()),
            json!({"action": "decline"})
        );
        assert_eq!(
            elicit(McpElicitation::AcceptDefaults, all),
            json!({"action": "accept", "content": {"name": "Ada", "age": 30}})
        );
        let missing = json!({"type": "object", "properties": {
            "name": {"type": "string"}}, "required": ["name"]});
        assert_eq!(
            elicit(McpElicitation::AcceptDefaults, missing),
            json!({"action": "decline"})
        );
        assert_eq!(
            elicit(McpElicitation::AcceptDefaults, json!({"type": "object"})),
            json!({"action": "accept", "content": {}})
        );
        assert_eq!(
            elicit(McpElicitation::AcceptDefaults, json!("nonsense")),
            json!({"action": "decline"})
        );
    }

    #[test]
    fn other_requests_get_a_result_or_an_error() {
        let ask = |answerer: &Answerer, method: &str| {
            answerer
                .answer(&json!({"jsonrpc": "2.0", "id": "x", "method": method}))
                .reply
        };
        let plain = Answerer::new(McpElicitation::Decline);
        assert_eq!(ask(&plain, "ping")["result"], json!({}));
        assert_eq!(ask(&plain, "roots/list")["error"]["code"], -32601);
        assert_eq!(
            ask(&plain, "sampling/createMessage")["error"]["code"],
            -32601
        );
        assert_eq!(ask(&plain, "whatever/else")["error"]["code"], -32601);
        assert!(plain.capabilities().get("roots").is_none());
        let rooted = plain.with_root(std::path::Path::new("/work/repo"));
        assert_eq!(
            ask(&rooted, "roots/list")["result"],
            json!({"roots": [{"uri": "file:///work/repo/", "name": "workspace"}]})
        );
        assert_eq!(
            rooted.capabilities()["roots"],
            json!({"listChanged": false})
        );
    }
}
