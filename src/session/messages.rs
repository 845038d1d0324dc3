//! `messages.jsonl`: the conversation of a Session, one message per line, append-only.
//!
//! Message ids come from [`crate::ids::new_id`], so attempts and resumes never collide; the
//! final message of a run is appended idempotently by checking its id ([`MessageLog::contains`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::fsx;

/// Who wrote a message. The system prompt is not stored: it is rebuilt from the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    /// A task given to a run.
    User,
    /// One model response (text and/or tool calls).
    Assistant,
    /// The result of one tool call, in reply to an assistant message.
    Tool,
}

/// A tool call as the model made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallRecord {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

/// Tokens reported by the provider for one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UsageRecord {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl UsageRecord {
    pub fn add(&mut self, other: UsageRecord) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// One line of `messages.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Message {
    pub id: String,
    pub run_id: String,
    pub role: Role,
    pub content: String,
    /// Assistant messages: the tool calls the model asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<CallRecord>,
    /// Tool messages: the provider's call id this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Tool messages: the assistant message holding the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// Tool messages: the call's position in that assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_index: Option<usize>,
    /// Tool messages: the journal operation (absent when the call was refused unexecuted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_id: Option<String>,
    /// Tool messages: the result is an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Assistant messages: tokens of the model call, when the provider reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageRecord>,
    pub created_at: String,
}

impl Message {
    /// A message with only the common fields set.
    pub fn new(run_id: &str, role: Role, content: impl Into<String>) -> Message {
        Message {
            id: crate::ids::new_id(crate::ids::IdKind::Message),
            run_id: run_id.to_string(),
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            reply_to: None,
            call_index: None,
            op_id: None,
            is_error: false,
            usage: None,
            created_at: crate::clock::now_rfc3339(),
        }
    }
}

/// Reads a Session's messages without changing anything (a torn last line is ignored; the hash
/// chain is checked, see [`fsx::chain`]).
pub fn read(path: &Path) -> Result<Vec<Message>> {
    Ok(fsx::read_chain::<Message>(path)?.records)
}

/// The conversation of a Session open for appending (under the run lease).
#[derive(Debug)]
pub struct MessageLog {
    path: PathBuf,
    /// Appends chain each line to the previous one (`prevHash`).
    writer: fsx::ChainWriter,
    messages: Vec<Message>,
    ids: HashSet<String>,
}

impl MessageLog {
    /// Opens the log, repairing a torn last line left by a crash. Call only under the lease.
    pub fn open(path: &Path) -> Result<MessageLog> {
        let (writer, records) = fsx::ChainWriter::open::<Message>(path)?;
        let mut ids = HashSet::with_capacity(records.len());
        for (i, m) in records.iter().enumerate() {
            if !ids.insert(m.id.clone()) {
                return Err(Error::corrupt(format!(
                    "{}:{}: message id {} appears twice",
                    path.display(),
                    i + 1,
                    m.id
                )));
            }
        }
        Ok(MessageLog {
            path: path.to_path_buf(),
            writer,
            messages: records,
            ids,
        })
    }

    /// Appends `message` durably. Refuses an id already present (callers that may repeat a step
    /// check [`MessageLog::contains`] first).
    pub fn append(&mut self, message: Message) -> Result<()> {
        if self.ids.contains(&message.id) {
            return Err(Error::conflict(format!(
                "message {} is already in {}",
                message.id,
                self.path.display()
            )));
        }
        self.writer.append(&message)?;
        self.ids.insert(message.id.clone());
        self.messages.push(message);
        Ok(())
    }

    pub fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// How many model responses the Session holds (the script provider's position).
    pub fn model_responses(&self) -> usize {
        self.messages
            .iter()
            .filter(|m| m.role == Role::Assistant)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_is_idempotent_by_id_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("messages.jsonl");
        let mut log = MessageLog::open(&path).unwrap();
        let m = Message::new("run_1", Role::User, "fix it");
        log.append(m.clone()).unwrap();
        assert!(log.contains(&m.id));
        assert!(log.append(m.clone()).is_err());
        let mut a = Message::new("run_1", Role::Assistant, "done");
        a.usage = Some(UsageRecord {
            input_tokens: 3,
            output_tokens: 4,
        });
        log.append(a).unwrap();
        assert_eq!(read(&path).unwrap(), log.messages());
        assert_eq!(MessageLog::open(&path).unwrap().model_responses(), 1);
        let line = std::fs::read_to_string(&path).unwrap();
        assert!(line.contains(r#""inputTokens":3"#), "{line}");
        assert!(line.contains(fsx::chain::GENESIS), "{line}");
    }
}
