//! The on-disk records of the tool journal (`runs/<run>/journal.jsonl`), one line per phase
//! transition of one tool operation.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One line of the journal. Lines are only ever appended; the live state of an operation is the
/// fold of its records ([`super::fold`]).
///
/// Serialized with serde's internally tagged form (`phase` first). Deserialized by [`Flat`]: the
/// derived internally tagged decoder buffers every field into an intermediate tree before
/// decoding it, which made reading a large journal several times slower than parsing its JSON
/// (issue 4); [`Flat`] decodes each field once, straight into its type, and accepts exactly the
/// same lines.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "phase",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum JournalRecord {
    /// Durable BEFORE the side effect runs: the tool call about to execute.
    Started {
        op_id: String,
        at: String,
        /// The tool's name as the model called it.
        tool: String,
        /// The arguments as the model sent them (always a JSON object).
        arguments: Value,
        /// The assistant message that asked for this call.
        message_id: String,
        /// The provider's id of the call (echoed in the tool result message).
        tool_call_id: String,
        /// Position of the call in that assistant message.
        call_index: usize,
        /// `task` calls: the child Session (and its first run) this operation creates, chosen
        /// before the record is written, so the child's id is durable in the parent's journal
        /// before the child exists. Absent for every other tool.
        #[serde(skip_serializing_if = "Option::is_none")]
        child: Option<ChildRef>,
        /// The assistant message itself, in the first `started` record of its calls when it
        /// was appended to `messages.jsonl` without an fsync: this record makes it durable (the
        /// message log may lose it in a power cut; recovery appends it again from here).
        /// Up to `session` (a floor above) on purpose: the record carries the message in the
        /// exact form of `messages.jsonl`, so recovery appends it back byte for byte.
        #[serde(skip_serializing_if = "Option::is_none")]
        assistant: Option<Box<crate::session::Message>>,
    },
    /// Durable after the tool returned: what it produced.
    OutcomeKnown {
        op_id: String,
        at: String,
        output: ToolOutcome,
    },
    /// The tool result message `turn_message_id` is in the Session: nothing is pending.
    Settled {
        op_id: String,
        at: String,
        turn_message_id: String,
    },
    /// `Started` without an outcome was found by recovery: the side effect may or may not have
    /// happened, so a human must say what it did (`run resolve`).
    OutcomeUnknown {
        op_id: String,
        at: String,
        reason: String,
    },
    /// An operator recorded the verified outcome of an `OutcomeUnknown` operation.
    Resolved {
        op_id: String,
        at: String,
        output: ToolOutcome,
    },
    /// A call whose policy rule is `ask`, recorded INSTEAD of running it: nothing has run. The
    /// first record of its operation (a phase before `Started`); the run stops `inputRequired`
    /// until a human decides ([`crate::run::approval`]).
    AwaitingApproval {
        op_id: String,
        at: String,
        tool: String,
        arguments: Value,
        message_id: String,
        tool_call_id: String,
        call_index: usize,
        /// The `mcpTools` pattern whose rule is `ask`.
        rule: String,
        /// [`crate::run::approval::arguments_hash`] of `arguments`: what a decision is bound to.
        arguments_hash: String,
    },
    /// A human approved the call (`run approve`); it runs next through the normal durable path
    /// (`Started` with the same call, whose arguments must hash to `arguments_hash`).
    Approved {
        op_id: String,
        at: String,
        arguments_hash: String,
    },
    /// A human denied the call (`run deny`): it never runs; `output` (an error) is what the
    /// model gets as the tool's result.
    Denied {
        op_id: String,
        at: String,
        arguments_hash: String,
        output: ToolOutcome,
    },
    /// Where the answer of a `started` Streamable HTTP MCP call can be read again: appended
    /// once, when the server's event stream gave its first event id, while the call runs. Not
    /// a phase (the operation stays `started`): after a crash, recovery asks the server to
    /// replay the stream from here ([`crate::mcp::StreamPosition`]) before calling the
    /// operation UNKNOWN. Never carries a credential (the token is not part of a position).
    McpStream {
        op_id: String,
        at: String,
        position: crate::mcp::StreamPosition,
    },
}

impl JournalRecord {
    /// Replaces every credential in the texts the record carries ([`crate::redact`]): run by
    /// [`crate::journal::Journal::record`] before the record is durable. The runtime redacts
    /// arguments and outputs at their source already, so the Session's copies agree; this is
    /// the last step before the file. Idempotent.
    pub fn redact(&mut self) {
        match self {
            JournalRecord::Started {
                arguments,
                assistant,
                ..
            } => {
                crate::redact::redact_json(arguments);
                if let Some(message) = assistant {
                    message.redact();
                }
            }
            JournalRecord::AwaitingApproval { arguments, .. } => {
                crate::redact::redact_json(arguments)
            }
            JournalRecord::OutcomeKnown { output, .. }
            | JournalRecord::Resolved { output, .. }
            | JournalRecord::Denied { output, .. } => {
                crate::redact::redact_in_place(&mut output.text)
            }
            JournalRecord::OutcomeUnknown { reason, .. } => crate::redact::redact_in_place(reason),
            JournalRecord::Settled { .. }
            | JournalRecord::Approved { .. }
            | JournalRecord::McpStream { .. } => {}
        }
    }

    /// The operation this record belongs to.
    pub fn op_id(&self) -> &str {
        match self {
            JournalRecord::Started { op_id, .. }
            | JournalRecord::OutcomeKnown { op_id, .. }
            | JournalRecord::Settled { op_id, .. }
            | JournalRecord::OutcomeUnknown { op_id, .. }
            | JournalRecord::Resolved { op_id, .. }
            | JournalRecord::AwaitingApproval { op_id, .. }
            | JournalRecord::Approved { op_id, .. }
            | JournalRecord::Denied { op_id, .. }
            | JournalRecord::McpStream { op_id, .. } => op_id,
        }
    }

    /// The phase an operation is in right after this record.
    pub fn phase(&self) -> OpPhase {
        match self {
            JournalRecord::Started { .. } => OpPhase::Started,
            JournalRecord::OutcomeKnown { .. } => OpPhase::OutcomeKnown,
            JournalRecord::Settled { .. } => OpPhase::Settled,
            JournalRecord::OutcomeUnknown { .. } => OpPhase::OutcomeUnknown,
            JournalRecord::Resolved { .. } => OpPhase::Resolved,
            JournalRecord::AwaitingApproval { .. } => OpPhase::AwaitingApproval,
            JournalRecord::Approved { .. } => OpPhase::Approved,
            JournalRecord::Denied { .. } => OpPhase::Denied,
            JournalRecord::McpStream { .. } => OpPhase::McpStream,
        }
    }
}

/// Every key any record may carry, decoded in one pass; [`Flat::into_record`] then requires
/// exactly the keys of the record's phase (as the derived tagged decoder with
/// `deny_unknown_fields` did). A present key must hold a value of its type (`null` is refused
/// where the field is not nullable, see [`present`]).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Flat {
    phase: OpPhase,
    #[serde(default, deserialize_with = "present")]
    op_id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    at: Option<String>,
    #[serde(default, deserialize_with = "present")]
    tool: Option<String>,
    #[serde(default, deserialize_with = "present")]
    arguments: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    message_id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    tool_call_id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    call_index: Option<usize>,
    #[serde(default, deserialize_with = "present")]
    child: Option<ChildRef>,
    #[serde(default, deserialize_with = "present")]
    assistant: Option<Box<crate::session::Message>>,
    #[serde(default, deserialize_with = "present")]
    output: Option<ToolOutcome>,
    #[serde(default, deserialize_with = "present")]
    turn_message_id: Option<String>,
    #[serde(default, deserialize_with = "present")]
    reason: Option<String>,
    #[serde(default, deserialize_with = "present")]
    rule: Option<String>,
    #[serde(default, deserialize_with = "present")]
    arguments_hash: Option<String>,
    #[serde(default, deserialize_with = "present")]
    position: Option<crate::mcp::StreamPosition>,
}

/// A key that is present: its value decoded as `T` (so `null` is refused unless `T` takes it).
fn present<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> std::result::Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

impl Flat {
    fn into_record<E: serde::de::Error>(self) -> std::result::Result<JournalRecord, E> {
        use OpPhase as P;
        /// Keys each phase carries besides `phase`.
        const STARTED: &[&str] = &[
            "opId",
            "at",
            "tool",
            "arguments",
            "messageId",
            "toolCallId",
            "callIndex",
            "child",
            "assistant",
        ];
        const OUTCOME: &[&str] = &["opId", "at", "output"];
        const SETTLED: &[&str] = &["opId", "at", "turnMessageId"];
        const UNKNOWN: &[&str] = &["opId", "at", "reason"];
        const AWAITING: &[&str] = &[
            "opId",
            "at",
            "tool",
            "arguments",
            "messageId",
            "toolCallId",
            "callIndex",
            "rule",
            "argumentsHash",
        ];
        const APPROVED: &[&str] = &["opId", "at", "argumentsHash"];
        const DENIED: &[&str] = &["opId", "at", "argumentsHash", "output"];
        const STREAM: &[&str] = &["opId", "at", "position"];
        let allowed = match self.phase {
            P::Started => STARTED,
            P::OutcomeKnown | P::Resolved => OUTCOME,
            P::Settled => SETTLED,
            P::OutcomeUnknown => UNKNOWN,
            P::AwaitingApproval => AWAITING,
            P::Approved => APPROVED,
            P::Denied => DENIED,
            P::McpStream => STREAM,
        };
        let present = [
            ("tool", self.tool.is_some()),
            ("arguments", self.arguments.is_some()),
            ("messageId", self.message_id.is_some()),
            ("toolCallId", self.tool_call_id.is_some()),
            ("callIndex", self.call_index.is_some()),
            ("child", self.child.is_some()),
            ("assistant", self.assistant.is_some()),
            ("output", self.output.is_some()),
            ("turnMessageId", self.turn_message_id.is_some()),
            ("reason", self.reason.is_some()),
            ("rule", self.rule.is_some()),
            ("argumentsHash", self.arguments_hash.is_some()),
            ("position", self.position.is_some()),
        ];
        if let Some((key, _)) = present
            .iter()
            .find(|(key, here)| *here && !allowed.contains(key))
        {
            return Err(E::unknown_field(key, allowed));
        }
        fn need<T, E: serde::de::Error>(
            v: Option<T>,
            key: &'static str,
        ) -> std::result::Result<T, E> {
            v.ok_or_else(|| E::missing_field(key))
        }
        let op_id = need(self.op_id, "opId")?;
        let at = need(self.at, "at")?;
        Ok(match self.phase {
            P::Started => JournalRecord::Started {
                op_id,
                at,
                tool: need(self.tool, "tool")?,
                arguments: need(self.arguments, "arguments")?,
                message_id: need(self.message_id, "messageId")?,
                tool_call_id: need(self.tool_call_id, "toolCallId")?,
                call_index: need(self.call_index, "callIndex")?,
                child: self.child,
                assistant: self.assistant,
            },
            P::OutcomeKnown => JournalRecord::OutcomeKnown {
                op_id,
                at,
                output: need(self.output, "output")?,
            },
            P::Resolved => JournalRecord::Resolved {
                op_id,
                at,
                output: need(self.output, "output")?,
            },
            P::Settled => JournalRecord::Settled {
                op_id,
                at,
                turn_message_id: need(self.turn_message_id, "turnMessageId")?,
            },
            P::OutcomeUnknown => JournalRecord::OutcomeUnknown {
                op_id,
                at,
                reason: need(self.reason, "reason")?,
            },
            P::AwaitingApproval => JournalRecord::AwaitingApproval {
                op_id,
                at,
                tool: need(self.tool, "tool")?,
                arguments: need(self.arguments, "arguments")?,
                message_id: need(self.message_id, "messageId")?,
                tool_call_id: need(self.tool_call_id, "toolCallId")?,
                call_index: need(self.call_index, "callIndex")?,
                rule: need(self.rule, "rule")?,
                arguments_hash: need(self.arguments_hash, "argumentsHash")?,
            },
            P::Approved => JournalRecord::Approved {
                op_id,
                at,
                arguments_hash: need(self.arguments_hash, "argumentsHash")?,
            },
            P::Denied => JournalRecord::Denied {
                op_id,
                at,
                arguments_hash: need(self.arguments_hash, "argumentsHash")?,
                output: need(self.output, "output")?,
            },
            P::McpStream => JournalRecord::McpStream {
                op_id,
                at,
                position: need(self.position, "position")?,
            },
        })
    }
}

impl<'de> Deserialize<'de> for JournalRecord {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        Flat::deserialize(d)?.into_record()
    }
}

/// What a tool call produced, as recorded (and as the model sees it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolOutcome {
    /// The text given to the model. Outputs over 64 KiB are capped here (head, tail and a note)
    /// and kept whole in `blob`.
    pub text: String,
    pub is_error: bool,
    /// The full output in the content-addressed blob store, when it was too large to inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<BlobPointer>,
    /// The tool was stopped before it finished (cancel, timeout).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// `exec`: the fence the command ran in (sandbox mode, the kernel's Landlock ABI, network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<crate::sandbox::FenceRecord>,
}

/// The child Session a `task` operation runs (docs/spec.md §9, `task`): both ids are chosen
/// before `Started` is written; the child is created after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChildRef {
    pub session_id: String,
    pub run_id: String,
}

/// A reference to a blob: `blobs/<sha256>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlobPointer {
    pub sha256: String,
    pub bytes: u64,
}

/// The phase of one operation (`Started → OutcomeKnown → Settled`, or
/// `Started → OutcomeUnknown → Resolved → Settled`; a call whose rule is `ask` first goes
/// `AwaitingApproval → Approved → Started …` or `AwaitingApproval → Denied → Settled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum OpPhase {
    Started,
    OutcomeKnown,
    OutcomeUnknown,
    Resolved,
    Settled,
    AwaitingApproval,
    Approved,
    Denied,
    /// The tag of a [`JournalRecord::McpStream`] record: never the phase of an operation (the
    /// record leaves its operation `started`), and no phase allows it as the next one.
    McpStream,
}

impl OpPhase {
    /// Whether `next` may follow `self`. Anything else is never written, and reading it is
    /// corrupt state.
    pub fn allows(self, next: OpPhase) -> bool {
        use OpPhase::*;
        matches!(
            (self, next),
            (Started, OutcomeKnown)
                | (Started, OutcomeUnknown)
                | (OutcomeUnknown, Resolved)
                | (OutcomeKnown, Settled)
                | (Resolved, Settled)
                | (AwaitingApproval, Approved)
                | (AwaitingApproval, Denied)
                | (Denied, Settled)
                | (Approved, Started)
                // An approved call that could not run any more (a cancel, the wall-clock
                // budget): its outcome is known — it did not run.
                | (Approved, OutcomeKnown)
        )
    }

    /// No record may follow: the operation is finished for good.
    pub fn is_terminal(self) -> bool {
        self == OpPhase::Settled
    }

    pub fn name(self) -> &'static str {
        match self {
            OpPhase::Started => "started",
            OpPhase::OutcomeKnown => "outcomeKnown",
            OpPhase::OutcomeUnknown => "outcomeUnknown",
            OpPhase::Resolved => "resolved",
            OpPhase::Settled => "settled",
            OpPhase::AwaitingApproval => "awaitingApproval",
            OpPhase::Approved => "approved",
            OpPhase::Denied => "denied",
            OpPhase::McpStream => "mcpStream",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_round_trip_in_camel_case() {
        let rec = JournalRecord::Started {
            op_id: "op_1".into(),
            at: "t".into(),
            tool: "read".into(),
            arguments: json!({"path": "a"}),
            message_id: "msg_1".into(),
            tool_call_id: "call_1".into(),
            call_index: 0,
            child: None,
            assistant: None,
        };
        let line = serde_json::to_string(&rec).unwrap();
        assert!(
            line.starts_with(r#"{"phase":"started","opId":"op_1""#),
            "{line}"
        );
        assert!(line.contains(r#""toolCallId":"call_1""#));
        assert_eq!(serde_json::from_str::<JournalRecord>(&line).unwrap(), rec);
        let bad = r#"{"phase":"settled","opId":"op_1","at":"t","turnMessageId":"m","x":1}"#;
        assert!(serde_json::from_str::<JournalRecord>(bad).is_err());
    }

    #[test]
    fn settled_is_the_only_terminal_phase() {
        use OpPhase::*;
        let all = [
            Started,
            OutcomeKnown,
            OutcomeUnknown,
            Resolved,
            Settled,
            AwaitingApproval,
            Approved,
            Denied,
        ];
        for p in all {
            for q in all {
                if p.is_terminal() {
                    assert!(!p.allows(q));
                }
                assert!(
                    !q.allows(AwaitingApproval),
                    "nothing precedes AwaitingApproval"
                );
                if q != Approved {
                    assert!(!q.allows(Started), "only an approval precedes Started");
                }
            }
        }
    }

    #[test]
    fn approval_records_round_trip() {
        let rec = JournalRecord::AwaitingApproval {
            op_id: "op_1".into(),
            at: "t".into(),
            tool: "exec".into(),
            arguments: json!({"command": "git push"}),
            message_id: "msg_1".into(),
            tool_call_id: "c1".into(),
            call_index: 0,
            rule: "exec".into(),
            arguments_hash: "sha256:ab".into(),
        };
        let line = serde_json::to_string(&rec).unwrap();
        assert!(
            line.starts_with(r#"{"phase":"awaitingApproval","opId":"op_1""#),
            "{line}"
        );
        assert_eq!(serde_json::from_str::<JournalRecord>(&line).unwrap(), rec);
        let denied = JournalRecord::Denied {
            op_id: "op_1".into(),
            at: "t".into(),
            arguments_hash: "sha256:ab".into(),
            output: ToolOutcome {
                text: "no".into(),
                is_error: true,
                blob: None,
                interrupted: false,
                fence: None,
            },
        };
        let line = serde_json::to_string(&denied).unwrap();
        assert_eq!(
            serde_json::from_str::<JournalRecord>(&line).unwrap(),
            denied
        );
        let bad = r#"{"phase":"approved","opId":"op_1","at":"t","argumentsHash":"h","rule":"x"}"#;
        assert!(serde_json::from_str::<JournalRecord>(bad).is_err());
        let missing = r#"{"phase":"approved","opId":"op_1","at":"t"}"#;
        assert!(serde_json::from_str::<JournalRecord>(missing).is_err());
    }
}
