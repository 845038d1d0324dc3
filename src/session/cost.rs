//! What model calls cost: the dollars recorded with each call (`costUsd` of its message, from
//! the provider's reported usage and the config's `price` at the time), summed per run, across
//! its attempts and resumes and its `task` children, and per Session.
//!
//! Never an estimate: a call that reported no usage, or was made with no price configured, has
//! no cost, and a sum that holds one is "unknown" with that reason (its known part kept apart).

use std::path::Path;

use serde_json::{Value, json};

use crate::error::Result;
use crate::session::{Message, Role};
use crate::state::StateDir;

/// A sum of model-call costs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cost {
    /// Dollars of the calls whose cost is known.
    pub usd: f64,
    /// Model calls counted.
    pub calls: u64,
    /// Calls whose provider reported no usage.
    pub without_usage: u64,
    /// Calls that reported usage with no price configured.
    pub without_price: u64,
}

impl Cost {
    /// Counts `m` if it records a model call (an assistant message or a compaction record).
    pub fn add_message(&mut self, m: &Message) {
        if !matches!(m.role, Role::Assistant | Role::Compaction) {
            return;
        }
        self.add_call(m.usage.is_some(), m.cost_usd);
    }

    /// Counts one model call: whether it reported usage, and its cost if known.
    pub fn add_call(&mut self, reported_usage: bool, cost_usd: Option<f64>) {
        self.calls += 1;
        match (reported_usage, cost_usd) {
            (false, _) => self.without_usage += 1,
            (true, None) => self.without_price += 1,
            (true, Some(usd)) => self.usd += usd,
        }
    }

    pub fn add(&mut self, other: &Cost) {
        self.usd += other.usd;
        self.calls += other.calls;
        self.without_usage += other.without_usage;
        self.without_price += other.without_price;
    }

    /// Why the sum is not the whole cost (`None`: it is).
    pub fn unknown(&self) -> Option<String> {
        let mut why = Vec::new();
        if self.without_usage > 0 {
            why.push(format!(
                "{} model call(s) reported no token usage",
                self.without_usage
            ));
        }
        if self.without_price > 0 {
            why.push(format!(
                "{} model call(s) were made with no price configured for their provider",
                self.without_price
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }

    /// `{"usd": 0.0123, "calls": 4}`, or `{"usd": null, "unknown": why, "knownUsd": …}`.
    pub fn to_json(&self) -> Value {
        match self.unknown() {
            None => json!({"usd": self.usd, "calls": self.calls}),
            Some(why) => json!({"usd": null, "unknown": why, "knownUsd": self.usd,
                                "calls": self.calls}),
        }
    }

    /// `$0.0123`, or `unknown (why)`.
    pub fn to_text(&self) -> String {
        match self.unknown() {
            None => format!("${:.4}", self.usd),
            Some(why) => format!("unknown ({why})"),
        }
    }
}

/// The cost of the runs of Session `session_id` (all of them with `run_id` `None`), each with
/// its `task` children's, from the files as they are (read-only; a torn last line is not
/// counted yet).
pub fn of_session(state: &StateDir, session_id: &str, run_id: Option<&str>) -> Result<Cost> {
    let paths = state.session(session_id);
    let messages = read_messages(&paths.messages())?;
    let runs: Vec<String> = match run_id {
        Some(r) => vec![r.to_string()],
        None => crate::session::store::list_runs(&paths)?
            .into_iter()
            .map(|r| r.id)
            .collect(),
    };
    let mut cost = Cost::default();
    for run in runs {
        cost.add(&of_run(state, session_id, &run, &messages)?);
    }
    Ok(cost)
}

/// The cost of run `run_id` of Session `session_id`, whose messages (all of the Session's, or
/// at least the run's) the caller has read: its calls, and its `task` children's.
pub fn of_run(
    state: &StateDir,
    session_id: &str,
    run_id: &str,
    messages: &[Message],
) -> Result<Cost> {
    let mut cost = Cost::default();
    for m in messages.iter().filter(|m| m.run_id == run_id) {
        cost.add_message(m);
    }
    let journal = state.session(session_id).run(run_id).journal();
    if journal.is_file() {
        cost.add(&of_children(state, &crate::journal::read(&journal)?, 0)?);
    }
    Ok(cost)
}

/// The cost of the `task` children a run's journal (`table`) names, theirs included.
pub fn children(state: &StateDir, table: &crate::journal::OpTable) -> Result<Cost> {
    of_children(state, table, 0)
}

fn of_children(state: &StateDir, table: &crate::journal::OpTable, depth: u32) -> Result<Cost> {
    let mut cost = Cost::default();
    if depth > 16 {
        return Ok(cost); // only hand-edited state nests deeper than any policy allows
    }
    for child in table.ops().iter().filter_map(|op| op.child.as_ref()) {
        let paths = state.session(&child.session_id);
        if !paths.messages().is_file() {
            continue; // never created: it cost nothing
        }
        for m in read_messages(&paths.messages())? {
            if m.run_id == child.run_id {
                cost.add_message(&m);
            }
        }
        let journal = paths.run(&child.run_id).journal();
        if journal.is_file() {
            cost.add(&of_children(
                state,
                &crate::journal::read(&journal)?,
                depth + 1,
            )?);
        }
    }
    Ok(cost)
}

fn read_messages(path: &Path) -> Result<Vec<Message>> {
    if !path.is_file() {
        return Ok(Vec::new());
    }
    crate::session::messages::read(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::UsageRecord;

    #[test]
    fn a_call_without_usage_or_price_makes_the_sum_unknown() {
        let usage = UsageRecord {
            input_tokens: 10,
            output_tokens: 1,
            ..Default::default()
        };
        let mut priced = Message::new("run_1", Role::Assistant, "x");
        priced.usage = Some(usage);
        priced.cost_usd = Some(0.5);
        let mut cost = Cost::default();
        cost.add_message(&priced);
        cost.add_message(&Message::new("run_1", Role::User, "task"));
        assert_eq!((cost.usd, cost.calls, cost.unknown()), (0.5, 1, None));
        assert_eq!(cost.to_text(), "$0.5000");
        let mut unpriced = priced.clone();
        unpriced.cost_usd = None;
        cost.add_message(&unpriced);
        cost.add_message(&Message::new("run_1", Role::Assistant, "no usage"));
        let why = cost.unknown().unwrap();
        assert!(
            why.contains("no token usage") && why.contains("no price"),
            "{why}"
        );
        assert_eq!(cost.to_json()["usd"], Value::Null);
        assert_eq!(cost.to_json()["knownUsd"], 0.5);
    }
}
