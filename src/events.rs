//! What a run reports while it works. The library emits [`Event`]s into a sink; the CLI renders
//! them (one JSON object per line, or the text view). Events never carry credentials.

use serde::Serialize;
use serde_json::Value;

use crate::usage::UsageRecord;

/// One event. Serialized with a `type` field in camelCase (`{"type":"toolStarted",…}`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Event {
    /// A new Session exists on disk.
    SessionCreated {
        session_id: String,
        workspace: Value,
        agent: String,
        definition_hash: String,
        policy_hash: String,
        capabilities: Vec<String>,
        /// The definition came from the Builder (no `--agent`).
        built: bool,
    },
    /// `--resume` picked a run to execute (`newRun`: created for the given task).
    SessionResumed {
        session_id: String,
        run_id: String,
        new_run: bool,
    },
    /// An operator recorded the outcome of an UNKNOWN operation (`run resolve`).
    OperationResolved {
        session_id: String,
        run_id: String,
        op_id: String,
        is_error: bool,
    },
    /// An operator approved or denied a call that waited for approval (`run approve` /
    /// `run deny`); `decision` is `approved` or `denied`.
    OperationDecided {
        session_id: String,
        run_id: String,
        op_id: String,
        decision: String,
        arguments_hash: String,
    },
    /// A call whose policy rule is `ask` waits for a human; nothing of it has run. The run stops
    /// `inputRequired` after these events (then `runInputRequired`).
    RunApprovalRequired {
        session_id: String,
        run_id: String,
        op_id: String,
        tool: String,
        /// As the model sent them, redacted like every event.
        arguments: Value,
        /// What `run approve` / `run deny` bind the decision to.
        arguments_hash: String,
        /// The `mcpTools` pattern whose rule is `ask`.
        rule: String,
    },
    /// Something worth knowing that does not stop the run (e.g. a workspace warning).
    Warning { message: String },
    /// A run starts (or continues) executing.
    RunStarted {
        session_id: String,
        run_id: String,
        task: String,
    },
    /// The model said something.
    ModelText {
        run_id: String,
        message_id: String,
        text: String,
    },
    /// A model call failed in a transient way (HTTP 408/429/5xx, a reset connection) and is
    /// sent again after `waitMs`: retry `attempt` of at most `maxAttempts`
    /// (`max_transport_retries`). These retries are not `maxPureRetries`. Text streamed by the
    /// failed attempt is void.
    ModelRetry {
        run_id: String,
        attempt: u32,
        max_attempts: u32,
        wait_ms: u64,
        reason: String,
    },
    /// A piece of the model's text as it streams in (streaming providers). Nothing of it is
    /// durable: the whole response is recorded once complete (then `modelText`).
    ModelTextDelta { run_id: String, text: String },
    /// The conversation was compacted ([`crate::run::compaction`]): the durable `compaction`
    /// record `messageId` stands for messages `from`..`to` (`messages` of them) in the model's
    /// later requests; the messages stay in the Session. `estimatedTokens` passed `threshold`.
    Compacted {
        run_id: String,
        message_id: String,
        from: String,
        to: String,
        messages: usize,
        estimated_tokens: u64,
        threshold: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<UsageRecord>,
    },
    /// A tool call is about to run (its `Started` record is durable).
    ToolStarted {
        run_id: String,
        op_id: String,
        tool: String,
        arguments: Value,
    },
    /// A tool call finished, or was refused without running (`opId` absent).
    ToolFinished {
        run_id: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        op_id: Option<String>,
        tool: String,
        is_error: bool,
        /// The start of the output (the whole output is in the Session).
        output: String,
    },
    /// The run stopped because tool outcomes are unknown; a human must resolve them.
    RunInputRequired {
        session_id: String,
        run_id: String,
        op_ids: Vec<String>,
    },
    /// The run stopped before a model call and stays resumable: `planLimitExhausted` — a limit
    /// of its DWP plan passed its dispatch ceiling or is held (`LIMIT: exhausted`, seq `seq`).
    RunStopped {
        session_id: String,
        run_id: String,
        reason: String,
        limit: String,
        detail: String,
        seq: u64,
    },
    /// The run reached a terminal status.
    RunFinished {
        session_id: String,
        run_id: String,
        status: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        final_text: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// The run ended with changes no check ran after (`verifyBeforeCompletion`).
        #[serde(skip_serializing_if = "Option::is_none")]
        unverified: Option<Unverified>,
        turns: u64,
        usage: UsageRecord,
    },
}

/// What a run that asked for verification before completion (`verifyBeforeCompletion`) ended
/// without checking: its answer came after changes no `exec` ran after, even after the one
/// reminder (docs/verification.md). Recorded in the run's result and its `runFinished` event,
/// so that whoever reads the ending sees that a claim of success in the final answer is the
/// model's, not something the run saw. Plain data here, at the ground, because both the run
/// record and the events carry it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Unverified {
    /// Files a `write` or `edit` changed after the run's last check.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed: Vec<String>,
    /// Files whose latest `write` or `edit` failed, with no check after it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
}

impl Unverified {
    /// One line for people: `` `a.py` changed, `b.py` failed to change, and no check ran after ``.
    pub fn describe(&self) -> String {
        let quote = |paths: &[String]| {
            paths
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut parts = Vec::new();
        if !self.changed.is_empty() {
            parts.push(format!("{} changed", quote(&self.changed)));
        }
        if !self.failed.is_empty() {
            parts.push(format!("a change to {} failed", quote(&self.failed)));
        }
        format!("not verified: {} and no check ran after", parts.join("; "))
    }
}

/// Where a run stands, for a live display such as the terminal's status line. Not an event:
/// nothing serializes it, so the JSON-lines output is the same with or without it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// The turn under way or just made (from 1), and the run's budget of them (`maxTurns`).
    pub turn: u64,
    pub max_turns: u64,
    /// Tokens the run's model calls reported so far.
    pub usage: UsageRecord,
    /// What those calls cost in US dollars; `None` when some call's cost is unknown (no usage
    /// reported, or no price configured): never an estimate.
    pub cost_usd: Option<f64>,
}

/// Where events go.
pub trait EventSink {
    fn emit(&mut self, event: Event);

    /// Where the run stands (before each model call and after it answered). Most sinks ignore
    /// it; a sink that wraps another passes it on.
    fn progress(&mut self, _progress: &Progress) {}
}

impl<F: FnMut(Event)> EventSink for F {
    fn emit(&mut self, event: Event) {
        self(event)
    }
}

/// A sink that drops everything (benchmarks, tests).
pub struct Discard;

impl EventSink for Discard {
    fn emit(&mut self, _event: Event) {}
}

pub use crate::text::preview;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_have_a_camel_case_type() {
        let e = Event::ToolFinished {
            run_id: "run_1".into(),
            op_id: None,
            tool: "read".into(),
            is_error: true,
            output: "no".into(),
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "toolFinished");
        assert_eq!(v["isError"], true);
        assert!(v.get("opId").is_none());
        assert_eq!(preview("héllo", 2), "hé… [3 more bytes]");
        assert_eq!(preview("hi", 2), "hi");
    }
}
