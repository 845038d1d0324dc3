//! `session diff SES_A SES_B`: how two Sessions differ — their conversations (one block per
//! message: role, text, tool calls with their outcomes), their locks and their workspace
//! bindings — as unified diffs (`similar`), plus the common prefix of the conversations.
//!
//! Read-only. Messages are compared whole (id included), so two unrelated Sessions share no
//! prefix while a fork and its parent share exactly the fork point.

use serde_json::{Value, json};

use crate::canonical;
use crate::error::Result;
use crate::session::{Message, Role, SessionMeta, messages, store};
use crate::state::StateDir;

/// The difference between two Sessions.
#[derive(Debug, Clone)]
pub struct SessionDiff {
    pub a: String,
    pub b: String,
    /// How many leading messages the two conversations share.
    pub common_prefix: usize,
    /// The messages after the common prefix, per side.
    pub diverging_a: Vec<Message>,
    pub diverging_b: Vec<Message>,
    /// Unified diffs; empty when the two sides are equal.
    pub conversation: String,
    pub lock: String,
    pub workspace: String,
    /// Lineage of each side, for the header.
    pub lineage_a: Value,
    pub lineage_b: Value,
}

/// Compares Sessions `a` and `b` (read-only).
pub fn diff(state: &StateDir, a: &str, b: &str) -> Result<SessionDiff> {
    diff_across(state, a, state, b)
}

/// Compares Session `a` in `state_a` with Session `b` in `state_b` (read-only): e.g. an original
/// and its imported copy on another runner, which share one id.
pub fn diff_across(
    state_a: &StateDir,
    a: &str,
    state_b: &StateDir,
    b: &str,
) -> Result<SessionDiff> {
    let (meta_a, msgs_a) = load(state_a, a)?;
    let (meta_b, msgs_b) = load(state_b, b)?;
    let common_prefix = msgs_a
        .iter()
        .zip(&msgs_b)
        .take_while(|(x, y)| x == y)
        .count();
    let conversation = unified(
        &render_conversation(&msgs_a),
        &render_conversation(&msgs_b),
        a,
        b,
    );
    let lock = unified(
        &render_lock(&to_value(&meta_a.lock)),
        &render_lock(&to_value(&meta_b.lock)),
        a,
        b,
    );
    let workspace = unified(
        &pretty(&to_value(&meta_a.workspace)),
        &pretty(&to_value(&meta_b.workspace)),
        a,
        b,
    );
    Ok(SessionDiff {
        a: a.to_string(),
        b: b.to_string(),
        common_prefix,
        diverging_a: msgs_a[common_prefix..].to_vec(),
        diverging_b: msgs_b[common_prefix..].to_vec(),
        conversation,
        lock,
        workspace,
        lineage_a: lineage(&meta_a),
        lineage_b: lineage(&meta_b),
    })
}

impl SessionDiff {
    /// The `--format json` object.
    pub fn to_json(&self) -> Value {
        json!({
            "type": "sessionDiff",
            "a": self.lineage_a,
            "b": self.lineage_b,
            "commonPrefix": self.common_prefix,
            "divergingA": self.diverging_a,
            "divergingB": self.diverging_b,
            "conversationDiff": self.conversation,
            "lockEqual": self.lock.is_empty(),
            "lockDiff": self.lock,
            "workspaceEqual": self.workspace.is_empty(),
            "workspaceDiff": self.workspace,
        })
    }

    /// The human view: a header, then one unified diff per part.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "session diff {} {}: {} common message(s); {} more in {}, {} more in {}\n",
            self.a,
            self.b,
            self.common_prefix,
            self.diverging_a.len(),
            self.a,
            self.diverging_b.len(),
            self.b
        );
        for (x, y) in [
            (&self.lineage_a, &self.lineage_b),
            (&self.lineage_b, &self.lineage_a),
        ] {
            if y["parentId"] == x["id"] {
                out.push_str(&format!(
                    "{} is a fork of {} at message {} ({}{})\n",
                    y["id"].as_str().unwrap_or("?"),
                    x["id"].as_str().unwrap_or("?"),
                    y["forkPoint"]["index"],
                    y["forkPoint"]["messageId"].as_str().unwrap_or("?"),
                    if y["forkPoint"]["before"] == true {
                        ", excluded"
                    } else {
                        ""
                    },
                ));
            }
        }
        for (what, diff) in [
            ("conversation", &self.conversation),
            ("lock", &self.lock),
            ("workspace", &self.workspace),
        ] {
            if diff.is_empty() {
                out.push_str(&format!("== {what}: identical\n"));
            } else {
                out.push_str(&format!("== {what}\n{diff}"));
                if !diff.ends_with('\n') {
                    out.push('\n');
                }
            }
        }
        out
    }
}

fn load(state: &StateDir, id: &str) -> Result<(SessionMeta, Vec<Message>)> {
    let paths = store::session_paths(state, id)?;
    let meta = SessionMeta::read(&paths, id)?;
    let msgs = messages::read(&paths.messages())?;
    Ok((meta, msgs))
}

fn lineage(meta: &SessionMeta) -> Value {
    json!({
        "id": meta.id,
        "parentId": meta.parent_id,
        "branchRootId": meta.branch_root_id,
        "forkPoint": meta.fork_point,
        "forkKind": meta.fork_kind,
    })
}

fn unified(a: &str, b: &str, name_a: &str, name_b: &str) -> String {
    if a == b {
        return String::new();
    }
    similar::TextDiff::from_lines(a, b)
        .unified_diff()
        .context_radius(3)
        .header(name_a, name_b)
        .to_string()
}

/// One block per message. Assistant blocks list their tool calls with the outcome recorded in
/// the Session (`ok`, `error`, or `no result` when the conversation holds none).
fn render_conversation(msgs: &[Message]) -> String {
    let mut out = String::new();
    for (i, m) in msgs.iter().enumerate() {
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::Compaction => "compaction",
        };
        out.push_str(&format!("#{} {role} {} (run {})\n", i + 1, m.id, m.run_id));
        if let Some(range) = &m.compacts {
            out.push_str(&format!(
                "  replaces {} messages, {} to {}, in later requests\n",
                range.messages, range.from, range.to
            ));
        }
        if m.role == Role::Tool {
            out.push_str(&format!(
                "  result of {} ({})\n",
                m.tool_call_id.as_deref().unwrap_or("?"),
                if m.is_error { "error" } else { "ok" }
            ));
        }
        for line in m.content.lines() {
            out.push_str("  | ");
            out.push_str(line);
            out.push('\n');
        }
        for call in &m.tool_calls {
            let outcome = msgs
                .iter()
                .find(|r| {
                    r.role == Role::Tool
                        && r.reply_to.as_deref() == Some(m.id.as_str())
                        && r.tool_call_id.as_deref() == Some(call.id.as_str())
                })
                .map(|r| if r.is_error { "error" } else { "ok" })
                .unwrap_or("no result");
            out.push_str(&format!(
                "  call {} {} {} -> {outcome}\n",
                call.id,
                call.name,
                canonical::to_compact(&call.arguments)
            ));
        }
    }
    out
}

/// The parts of a lock that decide what an agent may do, then the whole definition.
fn render_lock(lock: &Value) -> String {
    let field = |k: &str| lock.get(k).map(pretty).unwrap_or_else(|| "null".into());
    format!(
        "definitionHash: {}\npolicyHash: {}\ncapabilities: {}\ndefinition:\n{}\n",
        field("definitionHash"),
        field("policyHash"),
        field("capabilities"),
        field("definition"),
    )
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn pretty(value: &Value) -> String {
    let mut s = canonical::to_pretty(value);
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversation_blocks_show_calls_and_outcomes() {
        let user = Message::new("run_1", Role::User, "fix it");
        let mut asst = Message::new("run_1", Role::Assistant, "reading");
        asst.tool_calls = vec![crate::session::CallRecord {
            id: "c1".into(),
            name: "read".into(),
            arguments: json!({"path": "a.txt"}),
        }];
        let mut res = Message::new("run_1", Role::Tool, "1\tx");
        res.reply_to = Some(asst.id.clone());
        res.tool_call_id = Some("c1".into());
        res.is_error = true;
        let text = render_conversation(&[user.clone(), asst.clone(), res]);
        assert!(text.contains("#1 user"), "{text}");
        assert!(
            text.contains(r#"call c1 read {"path":"a.txt"} -> error"#),
            "{text}"
        );
        assert!(text.contains("result of c1 (error)"), "{text}");
        let text = render_conversation(&[user, asst]);
        assert!(text.contains("-> no result"), "{text}");
        assert_eq!(unified("a\n", "a\n", "x", "y"), "");
        let d = unified("a\nb\n", "a\nc\n", "ses_x", "ses_y");
        assert!(
            d.contains("--- ses_x") && d.contains("-b") && d.contains("+c"),
            "{d}"
        );
    }
}
