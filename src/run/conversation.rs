//! The agent loop's view of a Session's conversation, built in one pass as `messages.jsonl` is
//! read ([`MessageLog::open_visit`]) and kept in step with every append.
//!
//! The model's history is the only copy of the conversation an execution holds: each message is
//! moved into it, and what recovery and budgets need besides (this run's turns and tool calls,
//! which calls have a result, which operation a result belongs to) is indexed by id. A resume of
//! a long Session therefore costs the conversation once, not once for the log and again for the
//! model.
//!
//! [`MessageLog::open_visit`]: crate::session::MessageLog::open_visit

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::provider::{ChatMessage, ToolCall};
use crate::session::{Message, Role, UsageRecord};

/// One run's view of the conversation. Feed it every message of the log in order ([`push`]).
///
/// [`push`]: Conversation::push
#[derive(Debug)]
pub struct Conversation {
    run_id: String,
    task_message_id: String,
    /// What the model sees: the system prompt, then every message. Shared (not copied) with a
    /// model call's thread.
    history: Arc<Vec<ChatMessage>>,
    /// This run's assistant messages so far, and the tokens they reported.
    turns: u64,
    usage: UsageRecord,
    /// The text of this run's task message, once seen.
    task: Option<String>,
    /// `createdAt` of this run's latest message.
    last_activity: Option<String>,
    /// `(assistant message id, call index)` of every tool result message.
    answered: HashSet<(String, usize)>,
    /// This run's tool calls in log order: assistant message id, call index, and where that
    /// message sits in `history` (its calls are read from there, not kept twice).
    calls: Vec<(String, usize, usize)>,
    /// Operation id → the id of the latest message recording that operation's result.
    op_results: HashMap<String, String>,
}

impl Conversation {
    /// An empty conversation for run `run_id` (whose task is message `task_message_id`), whose
    /// history starts with the system prompt.
    pub fn new(run_id: &str, task_message_id: &str, system_prompt: String) -> Conversation {
        Conversation {
            run_id: run_id.to_string(),
            task_message_id: task_message_id.to_string(),
            history: Arc::new(vec![ChatMessage::system(system_prompt)]),
            turns: 0,
            usage: UsageRecord::default(),
            task: None,
            last_activity: None,
            answered: HashSet::new(),
            calls: Vec::new(),
            op_results: HashMap::new(),
        }
    }

    /// Takes the next message of the log (read back or just appended).
    pub fn push(&mut self, m: Message) {
        let this_run = m.run_id == self.run_id;
        if this_run {
            self.last_activity = Some(m.created_at.clone());
        }
        if m.id == self.task_message_id {
            self.task = Some(m.content.clone());
        }
        if let Some(op_id) = &m.op_id {
            self.op_results.insert(op_id.clone(), m.id.clone());
        }
        let position = self.history.len();
        match m.role {
            Role::Assistant if this_run => {
                self.turns += 1;
                if let Some(u) = m.usage {
                    self.usage.add(u);
                }
                self.calls
                    .extend((0..m.tool_calls.len()).map(|i| (m.id.clone(), i, position)));
            }
            Role::Tool => {
                if let (Some(reply_to), Some(index)) = (&m.reply_to, m.call_index) {
                    self.answered.insert((reply_to.clone(), index));
                }
            }
            _ => {}
        }
        Arc::make_mut(&mut self.history).push(into_chat(m));
    }

    /// The model's history, to share with a model call.
    pub fn history(&self) -> &Arc<Vec<ChatMessage>> {
        &self.history
    }

    /// Model responses of this run in the log (all attempts).
    pub fn turns(&self) -> u64 {
        self.turns
    }

    /// Tokens reported by this run's model responses in the log.
    pub fn usage(&self) -> UsageRecord {
        self.usage
    }

    /// The text of this run's task message, if the log holds it.
    pub fn task(&self) -> Option<&str> {
        self.task.as_deref()
    }

    /// `createdAt` of this run's latest message.
    pub fn last_activity(&self) -> Option<&str> {
        self.last_activity.as_deref()
    }

    /// The message recording the result of operation `op_id`, if any.
    pub fn result_of(&self, op_id: &str) -> Option<&str> {
        self.op_results.get(op_id).map(String::as_str)
    }

    /// This run's tool calls in log order: `(assistant message id, call index, the call,
    /// whether a result message answers it)`.
    pub fn calls(&self) -> impl Iterator<Item = (&str, usize, &ToolCall, bool)> {
        self.calls.iter().filter_map(|(id, i, at)| {
            let call = self.history.get(*at)?.tool_calls.get(*i)?;
            let answered = self.answered.contains(&(id.clone(), *i));
            Some((id.as_str(), *i, call, answered))
        })
    }

    /// This run's tool calls that have no result message yet, in log order:
    /// `(assistant message id, call index, the call)`.
    pub fn unanswered_calls(&self) -> Vec<(String, usize, ToolCall)> {
        self.calls
            .iter()
            .filter(|(id, i, _)| !self.answered.contains(&(id.clone(), *i)))
            .filter_map(|(id, i, at)| {
                let call = self.history.get(*at)?.tool_calls.get(*i)?.clone();
                Some((id.clone(), *i, call))
            })
            .collect()
    }
}

/// A stored message as the model sees it (moved, not copied).
fn into_chat(m: Message) -> ChatMessage {
    match m.role {
        Role::User => ChatMessage::user(m.content),
        Role::Assistant => ChatMessage::assistant(
            m.content,
            m.tool_calls
                .into_iter()
                .map(|c| ToolCall {
                    id: c.id,
                    name: c.name,
                    arguments: c.arguments,
                })
                .collect(),
        ),
        Role::Tool => ChatMessage::tool(m.tool_call_id.unwrap_or_default(), m.content),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::CallRecord;
    use serde_json::json;

    fn ask(run: &str, id: &str, calls: usize) -> Message {
        let mut m = Message::new(run, Role::Assistant, "asking");
        m.id = id.into();
        m.usage = Some(UsageRecord {
            input_tokens: 10,
            output_tokens: 1,
            ..UsageRecord::default()
        });
        m.tool_calls = (0..calls)
            .map(|i| CallRecord {
                id: format!("call_{id}_{i}"),
                name: "read".into(),
                arguments: json!({"path": format!("f{i}")}),
            })
            .collect();
        m
    }

    fn answer(run: &str, to: &str, index: usize, op: Option<&str>) -> Message {
        let mut m = Message::new(run, Role::Tool, "result");
        m.tool_call_id = Some(format!("call_{to}_{index}"));
        m.reply_to = Some(to.into());
        m.call_index = Some(index);
        m.op_id = op.map(str::to_string);
        m
    }

    #[test]
    fn indexes_this_runs_calls_turns_and_results() {
        let mut task = Message::new("run_b", Role::User, "do it");
        task.id = "msg_task".into();
        let log = vec![
            ask("run_a", "msg_old", 1),
            answer("run_a", "msg_old", 0, Some("op_old")),
            task,
            ask("run_b", "msg_1", 2),
            answer("run_b", "msg_1", 1, Some("op_2")),
            answer("run_b", "msg_1", 1, Some("op_2b")),
        ];
        let last = log.last().unwrap().created_at.clone();
        let mut conv = Conversation::new("run_b", "msg_task", "system".into());
        for m in log.clone() {
            conv.push(m);
        }
        assert_eq!(conv.turns(), 1, "only run_b's assistant messages count");
        assert_eq!(conv.usage().input_tokens, 10);
        assert_eq!(conv.task(), Some("do it"));
        assert_eq!(conv.last_activity(), Some(last.as_str()));
        assert_eq!(conv.result_of("op_old"), Some(log[1].id.as_str()));
        assert_eq!(conv.result_of("op_2"), Some(log[4].id.as_str()));
        assert_eq!(conv.result_of("op_x"), None);
        let open = conv.unanswered_calls();
        assert_eq!(open.len(), 1);
        assert_eq!((open[0].0.as_str(), open[0].1), ("msg_1", 0));
        assert_eq!(open[0].2.arguments, json!({"path": "f0"}));
        // The history is the system prompt and every message, in order, moved not copied.
        let history = conv.history();
        assert_eq!(history.len(), log.len() + 1);
        assert_eq!(history[0].content, "system");
        assert_eq!(history[4].tool_calls.len(), 2);
        assert_eq!(history[5].tool_call_id.as_deref(), Some("call_msg_1_1"));
        // An appended answer closes the call.
        conv.push(answer("run_b", "msg_1", 0, Some("op_1")));
        assert!(conv.unanswered_calls().is_empty());
        assert_eq!(conv.history().len(), log.len() + 2);
    }

    /// What the loop computed from the whole message list before the conversation was indexed
    /// while reading; the index must agree with it on any log.
    fn old_view(log: &[Message], run: &str, task_id: &str) -> OldView {
        let mine = log
            .iter()
            .filter(|m| m.run_id == run && m.role == Role::Assistant);
        let turns = mine.clone().count() as u64;
        let input: u64 = mine
            .clone()
            .filter_map(|m| m.usage)
            .map(|u| u.input_tokens)
            .sum();
        let task = log
            .iter()
            .find(|m| m.id == task_id)
            .map(|m| m.content.clone());
        let last = log
            .iter()
            .rev()
            .find(|m| m.run_id == run)
            .map(|m| m.created_at.clone());
        let answered: HashSet<(String, usize)> = log
            .iter()
            .filter(|m| m.role == Role::Tool)
            .filter_map(|m| Some((m.reply_to.clone()?, m.call_index?)))
            .collect();
        let pending = mine
            .flat_map(|m| {
                m.tool_calls.iter().enumerate().map(move |(i, c)| {
                    let call = ToolCall {
                        id: c.id.clone(),
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                    };
                    (m.id.clone(), i, call)
                })
            })
            .filter(|(id, i, _)| !answered.contains(&(id.clone(), *i)))
            .collect();
        OldView {
            turns,
            input,
            task,
            last,
            pending,
        }
    }

    struct OldView {
        turns: u64,
        input: u64,
        task: Option<String>,
        last: Option<String>,
        pending: Vec<(String, usize, ToolCall)>,
    }

    proptest::proptest! {
        /// Random logs of two runs (asks with 0–2 calls, answers to any ask id, users): the
        /// index gives what the old whole-list computation gave, and the history is every
        /// message in order.
        #[test]
        fn the_index_agrees_with_the_whole_list(
            steps in proptest::collection::vec((0u8..3, proptest::bool::ANY, 0usize..6, 0usize..3, 0usize..4), 0..30),
        ) {
            let mut log = Vec::new();
            for (n, (kind, run_b, target, calls, op)) in steps.into_iter().enumerate() {
                let run = if run_b { "run_b" } else { "run_a" };
                let mut m = match kind {
                    0 => ask(run, &format!("msg_{n}"), calls),
                    1 => answer(run, &format!("msg_{target}"), calls % 2, (op > 0).then(|| format!("op_{op}")).as_deref()),
                    _ => Message::new(run, Role::User, format!("task {n}")),
                };
                if kind != 0 {
                    m.id = format!("msg_{n}");
                }
                m.created_at = format!("2026-11-30T00:00:{n:02}.000Z");
                log.push(m);
            }
            let task_id = "msg_2";
            let mut conv = Conversation::new("run_b", task_id, "system".into());
            for m in log.clone() {
                conv.push(m);
            }
            let OldView { turns, input, task, last, pending } = old_view(&log, "run_b", task_id);
            proptest::prop_assert_eq!(conv.turns(), turns);
            proptest::prop_assert_eq!(conv.usage().input_tokens, input);
            proptest::prop_assert_eq!(conv.task().map(str::to_string), task);
            proptest::prop_assert_eq!(conv.last_activity().map(str::to_string), last);
            proptest::prop_assert_eq!(conv.unanswered_calls(), pending);
            for op in 1..4 {
                let op = format!("op_{op}");
                let old = log.iter().rev().find(|m| m.op_id.as_deref() == Some(op.as_str())).map(|m| m.id.as_str());
                proptest::prop_assert_eq!(conv.result_of(&op), old);
            }
            proptest::prop_assert_eq!(conv.history().len(), log.len() + 1);
            for (chat, m) in conv.history()[1..].iter().zip(&log) {
                proptest::prop_assert_eq!(&chat.content, &m.content);
                proptest::prop_assert_eq!(chat.tool_calls.len(), m.tool_calls.len());
            }
        }
    }
}
