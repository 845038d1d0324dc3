//! The agent loop's view of a Session's conversation, built in one pass as `messages.jsonl` is
//! read ([`MessageLog::open_visit`]) and kept in step with every append.
//!
//! The model's history is the only copy of the conversation an execution holds: each message is
//! moved into it, and what recovery and budgets need besides (this run's turns and tool calls,
//! which calls have a result, which operation a result belongs to) is indexed by id. A resume of
//! a long Session therefore costs the conversation once, not once for the log and again for the
//! model.
//!
//! A `compaction` record ([`crate::run::compaction`]) does not join the history: it replaces
//! its range in the model's *view* ([`Conversation::history`]), which is the history itself
//! until the first compaction and a separate, shorter list after it.
//!
//! [`MessageLog::open_visit`]: crate::session::MessageLog::open_visit

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use crate::provider::{ChatMessage, ToolCall};
use crate::run::compaction;
use crate::session::{Compacted, Message, Role, UsageRecord};

/// What the conversation keeps of each history entry besides the model's message.
#[derive(Debug)]
struct Entry {
    id: String,
    role: Option<Role>,
    /// Tool messages: the assistant message holding the call.
    reply_to: Option<String>,
}

/// A compaction in effect: history positions `from..=to` are replaced with `summary`.
#[derive(Debug, Clone)]
struct Active {
    from: usize,
    to: usize,
    summary: ChatMessage,
}

/// The part of the conversation a compaction would replace now ([`Conversation::compaction_span`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// The range, as the record names it.
    pub range: Compacted,
    /// What the model sees of it now (an earlier summary included): what is summarized.
    pub view: Vec<ChatMessage>,
}

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
    /// What this run's model calls cost (its own; its `task` children's are read when needed).
    cost: crate::session::cost::Cost,
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
    /// Parallel to `history`: each entry's id and links (the system prompt's id is empty).
    entries: Vec<Entry>,
    /// Compactions in effect, by position, not overlapping.
    active: Vec<Active>,
    /// What the model sees once a compaction is in effect (`None`: the history itself).
    view: Option<Arc<Vec<ChatMessage>>>,
    /// [`compaction::message_bytes`] of the view.
    view_bytes: u64,
    /// The tokens the latest model response since the last compaction reported (input plus
    /// output), and `view_bytes` just after it.
    reported: Option<(u64, u64)>,
    /// Compaction records in the log (the script provider's position for compaction calls).
    compactions: usize,
    /// User messages of this run after its task: the runtime's reminders
    /// ([`crate::run::verification`]); nothing else appends one.
    reminders: usize,
}

impl Conversation {
    /// An empty conversation for run `run_id` (whose task is message `task_message_id`), whose
    /// history starts with the system prompt.
    pub fn new(run_id: &str, task_message_id: &str, system_prompt: String) -> Conversation {
        let system = ChatMessage::system(system_prompt);
        Conversation {
            view_bytes: compaction::message_bytes(&system),
            entries: vec![Entry {
                id: String::new(),
                role: None,
                reply_to: None,
            }],
            active: Vec::new(),
            view: None,
            reported: None,
            compactions: 0,
            reminders: 0,
            run_id: run_id.to_string(),
            task_message_id: task_message_id.to_string(),
            history: Arc::new(vec![system]),
            turns: 0,
            usage: UsageRecord::default(),
            cost: Default::default(),
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
            self.cost.add_message(&m);
        }
        if m.id == self.task_message_id {
            self.task = Some(m.content.clone());
        } else if this_run && m.role == Role::User {
            self.reminders += 1;
        }
        if m.role == Role::Compaction {
            self.compactions += 1;
            if this_run && let Some(u) = m.usage {
                self.usage.add(u);
            }
            if let Some(range) = &m.compacts {
                self.apply(range, &m.content);
            }
            return;
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
        let reported = (m.role == Role::Assistant)
            .then_some(m.usage)
            .flatten()
            .map(|u| u.input_tokens.saturating_add(u.output_tokens));
        self.entries.push(Entry {
            id: m.id.clone(),
            role: Some(m.role),
            reply_to: m.reply_to.clone(),
        });
        let chat = into_chat(m);
        self.view_bytes += compaction::message_bytes(&chat);
        if let Some(view) = &mut self.view {
            Arc::make_mut(view).push(chat.clone());
        }
        Arc::make_mut(&mut self.history).push(chat);
        if let Some(tokens) = reported {
            self.reported = Some((tokens, self.view_bytes));
        }
    }

    /// What the model sees: the system prompt and every message, with each compacted range
    /// replaced by its summary. Shared with a model call.
    pub fn history(&self) -> &Arc<Vec<ChatMessage>> {
        self.view.as_ref().unwrap_or(&self.history)
    }

    /// Every message as the model would see it without compaction (the system prompt first).
    pub fn full_history(&self) -> &Arc<Vec<ChatMessage>> {
        &self.history
    }

    /// What this run's model calls so far cost (all attempts; not its children).
    pub fn cost(&self) -> crate::session::cost::Cost {
        self.cost
    }

    /// Compaction records in the log.
    pub fn compactions(&self) -> usize {
        self.compactions
    }

    /// The estimated size in tokens of the next request, `fixed_bytes` (the tool schemas) aside
    /// from the messages (see [`crate::run::compaction`] for how it is estimated).
    pub fn estimated_tokens(&self, fixed_bytes: u64) -> u64 {
        match self.reported {
            Some((tokens, at)) => tokens.saturating_add(compaction::estimate_tokens(
                self.view_bytes.saturating_sub(at),
            )),
            None => compaction::estimate_tokens(self.view_bytes + fixed_bytes),
        }
    }

    /// Puts a compaction record of `range` with `summary` into effect: earlier compactions
    /// inside the range are replaced with it. A range the history does not hold (which
    /// `session verify`'s checks refuse before any run reads the log) changes nothing.
    fn apply(&mut self, range: &Compacted, summary: &str) {
        let from = self.entries.iter().position(|e| e.id == range.from);
        let to = self.entries.iter().rposition(|e| e.id == range.to);
        let (Some(from), Some(to)) = (from, to) else {
            return;
        };
        if from == 0 || from > to {
            return;
        }
        self.active.retain(|a| !(a.from >= from && a.to <= to));
        if self.active.iter().any(|a| a.to >= from && a.from <= to) {
            return; // a partial overlap: refused by verify, ignored here
        }
        let at = self.active.partition_point(|a| a.from < from);
        self.active.insert(
            at,
            Active {
                from,
                to,
                summary: compaction::summary_message(summary),
            },
        );
        let mut view = Vec::with_capacity(self.history.len());
        let mut next = 0;
        for a in &self.active {
            view.extend_from_slice(&self.history[next..a.from]);
            view.push(a.summary.clone());
            next = a.to + 1;
        }
        view.extend_from_slice(&self.history[next..]);
        self.view_bytes = view.iter().map(compaction::message_bytes).sum();
        self.view = Some(Arc::new(view));
        // The last report measured a request that is no longer the one sent.
        self.reported = None;
    }

    /// The range a compaction would replace now, with the part of the view it covers; `None`
    /// when nothing can be compacted.
    ///
    /// Earlier runs of the Session come first: everything before this run's task (their tasks
    /// and answers included: they are history now, not the task at hand) is one range, until a
    /// compaction covers it whole. Then the range runs from the first message after this run's
    /// task (or the start of this run's earlier compaction, so summaries are cumulative) to the
    /// message before the latest assistant message. Either range must hold something no
    /// compaction covers yet, no `user` message of this run, and every tool exchange in it
    /// whole. Without the first, a Session of many runs that each stay under the threshold
    /// would outgrow the window with nothing left to compact.
    pub fn compaction_span(&self) -> Option<Span> {
        let task = self
            .entries
            .iter()
            .position(|e| e.id == self.task_message_id)?;
        if task > 1
            && let Some(span) = self.span(1, task - 1)
        {
            return Some(span);
        }
        let last_turn = self
            .entries
            .iter()
            .rposition(|e| e.role == Some(Role::Assistant))?;
        let start = self
            .active
            .iter()
            .find(|a| a.from > task)
            .map_or(task + 1, |a| a.from);
        if last_turn <= start {
            return None;
        }
        self.span(start, last_turn - 1)
    }

    /// History positions `start..=end` as a compaction range, if they may be one (see
    /// [`Conversation::compaction_span`]); the caller keeps this run's task outside.
    fn span(&self, start: usize, end: usize) -> Option<Span> {
        let covered = self
            .active
            .iter()
            .filter(|a| a.from >= start)
            .map(|a| a.to)
            .max();
        if covered.is_some_and(|to| to >= end) {
            return None;
        }
        let ids: HashSet<&str> = self.entries[start..=end]
            .iter()
            .map(|e| e.id.as_str())
            .collect();
        let inside = |id: &str| ids.contains(id);
        // `session verify` refuses a range holding any user message of the compacting run: its
        // task, or a reminder after it (which only this run's part, after its task, can hold).
        let task = self
            .entries
            .iter()
            .position(|e| e.id == self.task_message_id);
        for (i, e) in self.entries.iter().enumerate().skip(start) {
            match e.role {
                Some(Role::User) if i <= end && e.id == self.task_message_id => return None,
                Some(Role::User) if i <= end && task.is_some_and(|t| i > t) => return None,
                Some(Role::Tool) => {
                    let asked_inside = e.reply_to.as_deref().is_some_and(inside);
                    if asked_inside != (i <= end) {
                        return None;
                    }
                }
                Some(Role::Assistant) if i <= end => {
                    let calls = self.history[i].tool_calls.len();
                    if (0..calls).any(|c| !self.answered.contains(&(e.id.clone(), c))) {
                        return None;
                    }
                }
                _ => {}
            }
        }
        // The view of the range: its messages, an earlier summary in place of its own range.
        let mut view = Vec::new();
        let mut next = start;
        for a in self
            .active
            .iter()
            .filter(|a| a.from >= start && a.to <= end)
        {
            view.extend_from_slice(&self.history[next..a.from]);
            view.push(a.summary.clone());
            next = a.to + 1;
        }
        view.extend_from_slice(&self.history[next..=end]);
        Some(Span {
            range: Compacted {
                from: self.entries[start].id.clone(),
                to: self.entries[end].id.clone(),
                messages: end + 1 - start,
            },
            view,
        })
    }

    /// Model responses of this run in the log (all attempts).
    pub fn turns(&self) -> u64 {
        self.turns
    }

    /// Tokens reported by this run's model responses in the log.
    pub fn usage(&self) -> UsageRecord {
        self.usage
    }

    /// How many reminders the runtime appended to this run ([`crate::run::verification`]).
    pub fn reminders(&self) -> usize {
        self.reminders
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
        // The rules recorded with a run's task come first, exactly as that run's first turn sent them.
        Role::User => match m.context {
            Some(context) => ChatMessage::user(context.text + &m.content),
            None => ChatMessage::user(m.content),
        },
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
        Role::Compaction => compaction::summary_message(&m.content),
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

    fn compaction(run: &str, range: &Span, summary: &str) -> Message {
        let mut m = Message::new(run, Role::Compaction, summary);
        m.compacts = Some(range.range.clone());
        m.usage = Some(UsageRecord {
            input_tokens: 100,
            output_tokens: 7,
            ..UsageRecord::default()
        });
        m
    }

    /// A run of `turns` one-call turns after its task, each answered.
    fn turns(conv: &mut Conversation, run: &str, from: usize, turns: usize) {
        for n in from..from + turns {
            let id = format!("msg_a{n}");
            let mut a = ask(run, &id, 1);
            a.usage = None;
            conv.push(a);
            conv.push(answer(run, &id, 0, Some(&format!("op_{n}"))));
        }
    }

    #[test]
    fn a_compaction_replaces_its_range_in_the_view_and_keeps_task_and_last_turn() {
        let mut task = Message::new("run_b", Role::User, "do it");
        task.id = "msg_task".into();
        let mut conv = Conversation::new("run_b", "msg_task", "system".into());
        conv.push(task);
        assert_eq!(conv.compaction_span(), None, "nothing to compact yet");
        turns(&mut conv, "run_b", 0, 1);
        assert_eq!(conv.compaction_span(), None, "only the last turn");
        turns(&mut conv, "run_b", 1, 3);
        let before = conv.estimated_tokens(0);
        let span = conv.compaction_span().unwrap();
        // From the first message after the task to the one before the last turn.
        assert_eq!(span.range.from, "msg_a0");
        assert_eq!(span.range.to, conv.entries[conv.entries.len() - 3].id);
        assert_eq!(span.range.messages, 6);
        assert_eq!(span.view.len(), 6);
        conv.push(compaction("run_b", &span, "first summary"));
        let view = conv.history().clone();
        // system, task, summary, last assistant, its result.
        assert_eq!(view.len(), 5, "{view:?}");
        assert_eq!(view[1].content, "do it");
        assert!(view[2].content.ends_with("first summary"));
        assert!(view[2].content.starts_with(compaction::SUMMARY_HEADER));
        assert_eq!(view[3].tool_calls.len(), 1);
        assert_eq!(
            conv.full_history().len(),
            10,
            "the history keeps everything"
        );
        assert_eq!(conv.compactions(), 1);
        assert_eq!(conv.usage().input_tokens, 100, "the call's usage counts");
        assert_eq!(conv.turns(), 4, "but it is no turn");
        assert!(conv.estimated_tokens(0) < before);
        assert_eq!(conv.compaction_span(), None, "nothing new to compact");
        // New turns append to the view; the next compaction is cumulative.
        turns(&mut conv, "run_b", 4, 2);
        assert_eq!(conv.history().len(), 9);
        let span = conv.compaction_span().unwrap();
        assert_eq!(span.range.from, "msg_a0", "starts where the first did");
        assert_eq!(span.range.messages, 10);
        assert!(span.view[0].content.ends_with("first summary"));
        assert_eq!(span.view.len(), 5, "summary, then two turns and a half");
        conv.push(compaction("run_b", &span, "second summary"));
        let view = conv.history();
        assert_eq!(view.len(), 5);
        assert!(view[2].content.ends_with("second summary"));
        assert!(!view.iter().any(|m| m.content.ends_with("first summary")));
        // Calls and results are still indexed over the whole history.
        assert_eq!(conv.calls().count(), 6);
        assert!(conv.unanswered_calls().is_empty());
    }

    #[test]
    fn a_range_that_would_split_an_exchange_is_not_offered() {
        let mut task = Message::new("run_b", Role::User, "do it");
        task.id = "msg_task".into();
        let mut conv = Conversation::new("run_b", "msg_task", "system".into());
        conv.push(task);
        // Two calls, one answered: the earlier turn may not be compacted.
        conv.push(ask("run_b", "msg_x", 2));
        conv.push(answer("run_b", "msg_x", 0, Some("op_x")));
        turns(&mut conv, "run_b", 0, 1);
        assert_eq!(conv.compaction_span(), None);
        // A reported usage is the estimate's base, plus what came after it.
        let mut conv = Conversation::new("run_b", "msg_task", "s".repeat(3000));
        assert_eq!(conv.estimated_tokens(300), 1000 + 100 + 11);
        let mut a = ask("run_b", "msg_r", 0);
        a.usage = Some(UsageRecord {
            input_tokens: 40,
            output_tokens: 2,
            ..UsageRecord::default()
        });
        conv.push(a);
        assert_eq!(conv.estimated_tokens(300), 42);
        conv.push(Message::new("run_b", Role::User, "x".repeat(268)));
        assert_eq!(conv.estimated_tokens(300), 42 + 100);
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
