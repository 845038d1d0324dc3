//! Repeated-call detection: a model that makes the same tool call again while nothing could
//! have changed its result is answered from the record instead of running the tool again, and
//! a run that keeps doing so ends `failed` with reason `loopDetected`.
//!
//! The rules (docs/running-agents.md, "Repeated calls"):
//! - Two calls are *the same* when their tool names and canonical arguments
//!   ([`crate::canonical::to_compact`]) are equal.
//! - A call is a *repeat* when the same call was already made (it ran and its outcome is
//!   recorded) and no call that could change the workspace or the world ran since: any tool
//!   whose registry [`SideEffect`] is not `Read` (`write`, `edit`, `exec`, `task`, MCP tools, any
//!   later tool of those classes) starts a new window. A repeat of the side-effecting call itself
//!   is still a repeat: nothing ran in between that could make it return something else. So an
//!   `exec` test command after an `edit` runs; the same `exec` twice in a row does not.
//! - A repeat is not run: the model gets a tool error saying so and what the call returned (no
//!   journal operation, like any call refused before it starts).
//! - When one call has been repeated `maxRepeatedCalls` times (default 3, `0` turns detection
//!   off) in a window, that repeat is answered too and the run ends `loopDetected`; the calls
//!   after it in the same response are answered as not run.
//!
//! - A stop for a human (a call that waited for approval, an UNKNOWN outcome resolved by an
//!   operator) starts a new window too: the workspace may have been edited by hand meanwhile.
//!
//! Nothing here is durable state of its own: the guard of an execution is rebuilt from the run's
//! conversation and journal ([`RepeatGuard::from_history`]), so a kill and a resume in the middle
//! of a loop keep the count.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use serde_json::Value;

use crate::journal::{OpPhase, OpTable, ToolOutcome};
use crate::provider::ToolCall;
use crate::run::conversation::Conversation;
use crate::tools::{self, SideEffect};

/// `spec.execution.maxRepeatedCalls` when the definition does not set it.
pub const DEFAULT_MAX_REPEATED_CALLS: u32 = 3;

/// How much of the earlier result a repeat's answer quotes (the full text is earlier in the
/// conversation).
const QUOTE_CHARS: usize = 1500;

/// The calls made in the current window and how often each was repeated; see the module doc.
#[derive(Debug)]
pub struct RepeatGuard {
    /// `0`: detection is off.
    limit: u32,
    /// Call key → what it returned, for every call made since the last side-effecting one.
    made: HashMap<String, Made>,
    /// Why the run ends, once a call reached the limit.
    tripped: Option<String>,
}

#[derive(Debug)]
struct Made {
    text: String,
    is_error: bool,
    repeats: u32,
}

impl RepeatGuard {
    /// A guard with nothing made yet; `limit` is the definition's `maxRepeatedCalls`.
    pub fn new(limit: Option<u32>) -> RepeatGuard {
        RepeatGuard {
            limit: limit.unwrap_or(DEFAULT_MAX_REPEATED_CALLS),
            made: HashMap::new(),
            tripped: None,
        }
    }

    /// The guard as this run's recorded history leaves it: every call of the run, in log order,
    /// is replayed — a call whose journal operation started was made; one answered without
    /// starting (no operation, or one an approval decision closed: denied, or approved and then
    /// not run) was refused, and counts as a repeat if it was one. Calls that neither started
    /// nor are answered are left to recovery, which runs them through [`RepeatGuard::check`].
    pub fn from_history(limit: Option<u32>, conv: &Conversation, journal: &OpTable) -> Self {
        let mut guard = RepeatGuard::new(limit);
        if guard.limit == 0 {
            return guard; // detection is off: nothing to replay
        }
        let ops: HashMap<(&str, usize), &crate::journal::OpState> = journal
            .ops()
            .iter()
            .map(|op| ((op.message_id.as_str(), op.call_index), op))
            .collect();
        for (message_id, index, call, answered) in conv.calls() {
            let op = ops.get(&(message_id, index));
            if op.is_some_and(|op| {
                let phases = op.history.as_slice();
                phases.contains(&OpPhase::AwaitingApproval) || phases.contains(&OpPhase::Resolved)
            }) {
                // The run stopped for a human here (an approval, a resolved UNKNOWN), who may
                // have changed the workspace by hand: nothing made before is a repeat any more.
                guard.made.clear();
            }
            match op.filter(|op| op.history.as_slice().contains(&OpPhase::Started)) {
                Some(op) => guard.made(&call.name, &call.arguments, op.output.as_ref()),
                None if answered => {
                    guard.check(call);
                }
                None => {}
            }
        }
        guard
    }

    /// Before an admitted call starts: `Some(answer)` if it must not run (a repeat, or the run
    /// already ended in a loop), with the tool error the model gets.
    pub fn check(&mut self, call: &ToolCall) -> Option<String> {
        if self.limit == 0 {
            return None;
        }
        if let Some(why) = &self.tripped {
            return Some(format!("not run: the run ends, {why}"));
        }
        let made = self.made.get_mut(&key(&call.name, &call.arguments))?;
        made.repeats += 1;
        let returned = if made.is_error {
            "It returned an error"
        } else {
            "It returned"
        };
        let mut answer = format!(
            "not run again: this exact `{}` call (same arguments) was already made and nothing has \
             changed since, so it would return the same. {returned}:\n{}\n",
            call.name,
            quote(&made.text)
        );
        if made.repeats >= self.limit {
            let why = format!(
                "loop detected: the model repeated the same `{}` call {} time{} with nothing \
                 changed in between (maxRepeatedCalls {})",
                call.name,
                made.repeats,
                if made.repeats == 1 { "" } else { "s" },
                self.limit
            );
            answer.push_str(&format!("The run ends here: {why}."));
            self.tripped = Some(why);
        } else {
            answer.push_str(
                "Do not repeat it: use that result and take a different step, or give your final \
                 answer if the task is done.",
            );
        }
        Some(answer)
    }

    /// Call `name`/`arguments` ran; `output` is its recorded outcome (`None`: unknown).
    pub fn made(&mut self, name: &str, arguments: &Value, output: Option<&ToolOutcome>) {
        let effect = tools::REGISTRY
            .find(name)
            .map_or(SideEffect::External, |e| e.effect());
        if effect != SideEffect::Read {
            // It may have changed what every earlier call would return now.
            self.made.clear();
        }
        // An unknown outcome cannot be quoted back; the next identical call runs.
        let Some(output) = output else {
            return;
        };
        // A call made again (a resume replays every call of a long run) reuses its entry's
        // text buffer rather than allocating a copy of the same result.
        match self.made.entry(key(name, arguments)) {
            Entry::Occupied(mut entry) => {
                let made = entry.get_mut();
                made.text.clone_from(&output.text);
                made.is_error = output.is_error;
                made.repeats = 0;
            }
            Entry::Vacant(entry) => {
                entry.insert(Made {
                    text: output.text.clone(),
                    is_error: output.is_error,
                    repeats: 0,
                });
            }
        }
    }

    /// Why the run must end, once a call was repeated `maxRepeatedCalls` times.
    pub fn loop_detected(&self) -> Option<&str> {
        self.tripped.as_deref()
    }
}

fn key(name: &str, arguments: &Value) -> String {
    format!("{name}\n{}", crate::canonical::to_compact(arguments))
}

fn quote(text: &str) -> String {
    if text.chars().count() <= QUOTE_CHARS {
        return text.to_string();
    }
    let head: String = text.chars().take(QUOTE_CHARS).collect();
    format!("{head}\n[… cut; the full result is earlier in the conversation]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: args,
        }
    }

    fn out(text: &str) -> ToolOutcome {
        ToolOutcome {
            text: text.into(),
            is_error: false,
            blob: None,
            interrupted: false,
            fence: None,
        }
    }

    #[test]
    fn a_repeat_is_answered_and_the_limit_ends_the_run() {
        let mut g = RepeatGuard::new(None);
        let write = call("write", json!({"path": "a", "content": "x"}));
        assert_eq!(g.check(&write), None, "first call runs");
        g.made("write", &write.arguments, Some(&out("wrote a")));
        // Key order does not matter (canonical arguments).
        let same = call("write", json!({"content": "x", "path": "a"}));
        let first = g.check(&same).unwrap();
        assert!(
            first.contains("already made") && first.contains("wrote a"),
            "{first}"
        );
        assert!(g.loop_detected().is_none());
        assert!(g.check(&same).is_some());
        assert!(g.loop_detected().is_none());
        let third = g.check(&same).unwrap();
        assert!(third.contains("The run ends here"), "{third}");
        assert!(g.loop_detected().unwrap().contains("3 times"));
        // Anything after the trip is not run.
        let other = g.check(&call("read", json!({"path": "b"}))).unwrap();
        assert!(other.starts_with("not run: the run ends"), "{other}");
    }

    #[test]
    fn a_side_effecting_call_in_between_starts_a_new_window() {
        let mut g = RepeatGuard::new(None);
        let test = call("exec", json!({"command": "cargo test"}));
        g.made("exec", &test.arguments, Some(&out("1 failed")));
        let read = call("read", json!({"path": "src/lib.rs"}));
        g.made("read", &read.arguments, Some(&out("code")));
        // Reads do not change anything: both are still repeats.
        assert!(g.check(&read).is_some());
        assert!(g.check(&test).is_some());
        let edit = json!({"path": "src/lib.rs", "oldString": "a", "newString": "b"});
        g.made("edit", &edit, Some(&out("edited")));
        assert_eq!(g.check(&test), None, "after an edit the test runs again");
        assert_eq!(g.check(&read), None);
        // An MCP tool is external too.
        g.made("exec", &test.arguments, Some(&out("ok")));
        g.made("mcp__srv__do", &json!({}), Some(&out("done")));
        assert_eq!(g.check(&test), None);
    }

    #[test]
    fn an_unknown_outcome_is_not_quoted_and_zero_turns_it_off() {
        let mut g = RepeatGuard::new(None);
        let test = call("exec", json!({"command": "make"}));
        g.made("exec", &test.arguments, None);
        assert_eq!(g.check(&test), None);
        let mut off = RepeatGuard::new(Some(0));
        off.made("read", &json!({"path": "a"}), Some(&out("x")));
        for _ in 0..5 {
            assert_eq!(off.check(&call("read", json!({"path": "a"}))), None);
        }
        assert!(off.loop_detected().is_none());
    }

    #[test]
    fn a_long_result_is_cut_in_the_answer() {
        let mut g = RepeatGuard::new(None);
        let read = call("read", json!({"path": "big"}));
        g.made("read", &read.arguments, Some(&out(&"y".repeat(10_000))));
        let answer = g.check(&read).unwrap();
        assert!(
            answer.len() < 2000 && answer.contains("[… cut"),
            "{}",
            answer.len()
        );
    }
}
