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
    /// A summary that replaces a range of earlier messages in what the model sees
    /// ([`Compacted`]); the messages themselves stay in the log.
    Compaction,
}

/// The range of messages a `compaction` record replaces, by id, both ends included: every line
/// of the log from `from` to `to` (earlier compaction records among them are replaced with
/// them). `messages` counts those lines. See [`crate::run::compaction`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Compacted {
    pub from: String,
    pub to: String,
    pub messages: usize,
}

/// A tool call as the model made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CallRecord {
    pub id: String,
    pub name: String,
    pub arguments: Value,
}

pub use crate::usage::{UsageRecord, is_zero};

/// The repository rules a run's first turn carried (`AGENTS.md` and the like, see
/// `docs/context.md`), kept with the run's task message: a resume, a fork or an imported bundle
/// sends the model exactly these bytes, whatever the files say now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunContext {
    /// The files read, repository root first, the nearest to the workspace last.
    pub files: Vec<ContextFile>,
    /// The framed text the model reads before the task (the task follows it directly).
    pub text: String,
}

/// One context file as a run read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextFile {
    /// Relative to the repository root (the workspace outside git), `/`-separated.
    pub path: String,
    /// `sha256:…` of the whole file as read (before any cut).
    pub sha256: String,
    /// The file's size.
    pub bytes: u64,
    /// Only the first part of the file was given to the model (the cap).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
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
    /// Compaction records: the range their summary (`content`) replaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compacts: Option<Compacted>,
    /// Assistant messages and compaction records: tokens of the model call, when the provider
    /// reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageRecord>,
    /// Assistant messages and compaction records: what the call cost in US dollars, from its
    /// `usage` and the provider's `price` when the call was made (absent: no usage reported,
    /// or no price configured; see [`crate::session::cost`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// A run's task message: the repository rules given before the task ([`RunContext`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<RunContext>,
    pub created_at: String,
}

impl Message {
    /// Replaces every credential in the text and the call arguments ([`crate::redact`]); run
    /// on every message before it is written ([`MessageLog::append`]), and by a caller that
    /// keeps its own copy, so the copy and the Session agree. Idempotent.
    pub fn redact(&mut self) {
        crate::redact::redact_in_place(&mut self.content);
        if let Some(context) = &mut self.context {
            crate::redact::redact_in_place(&mut context.text);
        }
        for call in &mut self.tool_calls {
            crate::redact::redact_json(&mut call.arguments);
        }
    }

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
            compacts: None,
            usage: None,
            cost_usd: None,
            context: None,
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
    /// Every message, when opened with [`MessageLog::open`]. Empty when opened with
    /// [`MessageLog::open_visit`]: that caller keeps what it needs of each message itself.
    messages: Vec<Message>,
    keep: bool,
    ids: HashSet<String>,
    /// How many assistant messages the log holds.
    assistant_messages: usize,
}

impl MessageLog {
    /// Opens the log, repairing a torn last line left by a crash. Call only under the lease.
    pub fn open(path: &Path) -> Result<MessageLog> {
        let mut messages = Vec::new();
        let mut log = MessageLog::open_visit(path, |m| messages.push(m))?;
        log.messages = messages;
        log.keep = true;
        Ok(log)
    }

    /// [`MessageLog::open`] handing each message to `visit`, in log order, instead of holding
    /// them: the agent loop builds the model's history from them, so a long conversation is
    /// held once. [`MessageLog::messages`] is then empty, also after appends.
    ///
    /// A repeated id is reported after the whole file checked out (its chain), exactly as when
    /// the file was read before checking ids; a file that is refused is left as it was.
    pub fn open_visit(path: &Path, visit: impl FnMut(Message)) -> Result<MessageLog> {
        let mut log = MessageLog::open_deferred(path, visit)?;
        log.repair()?;
        Ok(log)
    }

    /// [`MessageLog::open_visit`] that leaves a torn last line in place until
    /// [`MessageLog::repair`] or the first append: the agent loop checks the log against the
    /// run's other files before it cuts anything off.
    pub fn open_deferred(path: &Path, mut visit: impl FnMut(Message)) -> Result<MessageLog> {
        let mut ids = HashSet::new();
        let mut assistant_messages = 0;
        let mut line = 0usize;
        let mut twice: Option<(usize, String)> = None;
        let writer = fsx::ChainWriter::open_deferred(path, |m: Message| {
            line += 1;
            if twice.is_some() {
                return;
            }
            if !ids.insert(m.id.clone()) {
                twice = Some((line, m.id));
                return;
            }
            if m.role == Role::Assistant {
                assistant_messages += 1;
            }
            visit(m);
        })?;
        if let Some((line, id)) = twice {
            return Err(Error::corrupt(format!(
                "{}:{line}: message id {id} appears twice",
                path.display(),
            )));
        }
        Ok(MessageLog {
            path: path.to_path_buf(),
            writer,
            messages: Vec::new(),
            keep: false,
            ids,
            assistant_messages,
        })
    }

    /// Truncates a torn last line left by a crash (see [`MessageLog::open_deferred`]).
    pub fn repair(&mut self) -> Result<()> {
        self.writer.repair()
    }

    /// Appends `message` durably (with every message appended lazily before it). Refuses an id
    /// already present (callers that may repeat a step check [`MessageLog::contains`] first).
    pub fn append(&mut self, message: Message) -> Result<()> {
        self.append_as(message, true)
    }

    /// [`MessageLog::append`] without the fsync: the message is durable only with the next
    /// durable append or [`MessageLog::sync`]. Only for a message the journal can re-derive if
    /// a power cut loses it (see `journal`'s module docs).
    pub fn append_lazy(&mut self, message: Message) -> Result<()> {
        self.append_as(message, false)
    }

    /// Makes lazily appended messages durable (nothing to do when there are none).
    pub fn sync(&mut self) -> Result<()> {
        self.writer.sync()
    }

    /// Whether lazily appended messages are not durable yet.
    pub fn is_dirty(&self) -> bool {
        self.writer.is_dirty()
    }

    /// Appends `messages` durably with one write and one fsync: a crash leaves all of them or
    /// none (a model's answer and the runtime's reply to it, [`crate::run::verification`]).
    pub fn append_all(&mut self, mut messages: Vec<Message>) -> Result<()> {
        for message in &mut messages {
            message.redact();
            if self.ids.contains(&message.id) {
                return Err(Error::conflict(format!(
                    "message {} is already in {}",
                    message.id,
                    self.path.display()
                )));
            }
        }
        self.writer.append_all(&messages)?;
        for message in messages {
            self.remember(message);
        }
        Ok(())
    }

    /// Counts `message`, now in the file, as the log's: its id, and the message itself when the
    /// log keeps them.
    fn remember(&mut self, message: Message) {
        self.ids.insert(message.id.clone());
        if message.role == Role::Assistant {
            self.assistant_messages += 1;
        }
        if self.keep {
            self.messages.push(message);
        }
    }

    fn append_as(&mut self, mut message: Message, durable: bool) -> Result<()> {
        // The one step every message passes before it is durable: no credential in the file.
        message.redact();
        if self.ids.contains(&message.id) {
            return Err(Error::conflict(format!(
                "message {} is already in {}",
                message.id,
                self.path.display()
            )));
        }
        if durable {
            self.writer.append(&message)?;
        } else {
            self.writer.append_lazy(&message)?;
        }
        self.remember(message);
        Ok(())
    }

    pub fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    /// Every message (empty for a log opened with [`MessageLog::open_visit`]).
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// How many model responses the Session holds (the script provider's position).
    pub fn model_responses(&self) -> usize {
        self.assistant_messages
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
            ..UsageRecord::default()
        });
        log.append(a).unwrap();
        assert_eq!(read(&path).unwrap(), log.messages());
        assert_eq!(MessageLog::open(&path).unwrap().model_responses(), 1);
        let line = std::fs::read_to_string(&path).unwrap();
        assert!(line.contains(r#""inputTokens":3"#), "{line}");
        assert!(line.contains(fsx::chain::GENESIS), "{line}");
    }

    /// Chained lines for `messages`, as the writer would append them.
    fn chained(messages: &[Message]) -> String {
        let mut prev = fsx::chain::GENESIS.to_string();
        let mut text = String::new();
        for m in messages {
            let line = fsx::chain::chain_line(&serde_json::to_string(m).unwrap(), &prev);
            prev = fsx::chain::line_hash(line.as_bytes());
            text.push_str(&line);
            text.push('\n');
        }
        text
    }

    #[test]
    fn open_visit_sees_what_open_holds_and_refuses_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("messages.jsonl");
        let a = Message::new("run_1", Role::User, "task");
        let b = Message::new("run_1", Role::Assistant, "answer");
        std::fs::write(&path, chained(&[a.clone(), b.clone()])).unwrap();
        let mut seen = Vec::new();
        let mut log = MessageLog::open_visit(&path, |m| seen.push(m)).unwrap();
        assert_eq!(seen, MessageLog::open(&path).unwrap().messages());
        assert!(log.messages().is_empty());
        assert_eq!(log.model_responses(), 1);
        log.append(Message::new("run_1", Role::Assistant, "more"))
            .unwrap();
        assert!(
            log.messages().is_empty(),
            "a visiting log holds no messages"
        );
        assert_eq!(log.model_responses(), 2);
        assert!(log.contains(&a.id) && log.contains(&b.id));

        // A repeated id: the same error from both, naming the line.
        let text = chained(&[a.clone(), b.clone(), a.clone()]);
        std::fs::write(&path, &text).unwrap();
        let full = MessageLog::open(&path).unwrap_err();
        let visiting = MessageLog::open_visit(&path, |_| {}).unwrap_err();
        assert_eq!(full.message, visiting.message);
        assert!(
            full.message.ends_with(&format!(
                "messages.jsonl:3: message id {} appears twice",
                a.id
            )),
            "{}",
            full.message
        );

        // A broken chain after the repeated id is reported first, as when the file was read
        // before ids were checked.
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        lines.push(lines[1].clone());
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        for err in [
            MessageLog::open(&path).unwrap_err(),
            MessageLog::open_visit(&path, |_| {}).unwrap_err(),
        ] {
            assert!(
                err.message
                    .contains("messages.jsonl:4: the chain is broken"),
                "{}",
                err.message
            );
        }

        // A torn tail after a repeated id: refused, and left as it was (a writer cuts a torn
        // tail only off a file it goes on to append to).
        std::fs::write(&path, text.clone() + "{\"id\":").unwrap();
        let err = MessageLog::open_visit(&path, |_| {}).unwrap_err();
        assert!(err.message.contains("messages.jsonl:3:"), "{}", err.message);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text + "{\"id\":");
    }
}
