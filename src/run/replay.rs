//! Streamable HTTP MCP calls across a kill -9: the call's stream position goes into the run's
//! journal while it runs ([`Positions`]), and recovery reads the answer of a call a crashed
//! attempt left `started` from the server's replay of that stream ([`Loop::replay_op`]) instead
//! of stopping for a human (docs/mcp.md, "What survives a kill -9").
//!
//! The replayed answer goes through the same path as a live one: the registry's `mcp__*` entry
//! (redaction, the 64 KiB cap and its blob, the call's telemetry span), then `outcomeKnown`.
//!
//! The position is appended *lazily* (written, not fsynced: [`Journal::record_lazy`]), so a
//! call costs no fsync more than the protocol's two: the write survives a kill -9 (the page
//! cache keeps it) and becomes durable with the call's `outcomeKnown`. A power cut may lose it
//! — it is the journal's last line until that outcome — and then the call is UNKNOWN, exactly
//! as without a position: losing it never loses anything a durable line refers to.

use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

use super::boundary::CallScope;
use super::{Loop, outcome};
use crate::error::Result;
use crate::events::EventSink;
use crate::journal::{Journal, JournalRecord, OpPhase};
use crate::mcp::{StreamJournal, StreamMode, StreamPosition};
use crate::session::run_record::RunState;
use crate::tools;

/// The run's journal while a batch of calls runs: each MCP call's position is one more record
/// (`mcpStream`, lazily appended: see the module doc), written from the call's own thread.
pub(super) struct Positions<'j> {
    journal: Mutex<&'j mut Journal>,
}

impl<'j> Positions<'j> {
    pub(super) fn new(journal: &'j mut Journal) -> Positions<'j> {
        Positions {
            journal: Mutex::new(journal),
        }
    }
}

impl StreamJournal for Positions<'_> {
    fn record_position(&self, op_id: &str, position: StreamPosition) {
        let mut journal = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        // A failed append only loses the replay after a crash (the call is then UNKNOWN, as it
        // would be without a position); the call itself goes on.
        let _ = journal.record_lazy(JournalRecord::McpStream {
            op_id: op_id.to_string(),
            at: crate::clock::now_rfc3339(),
            position,
        });
    }
}

impl Loop<'_, '_> {
    /// Recovery of operation `op_id`, `started` by a crashed attempt with a stream position:
    /// its answer read from the server's replay is recorded (`outcomeKnown`) and, when
    /// `settle`, settled. `Ok(None)`: settled (or recorded); `Ok(Some(why))`: the server could
    /// not replay it (nothing recorded: the caller records it UNKNOWN); also `Some` for an
    /// operation without a position.
    pub(super) fn replay_op(
        &mut self,
        run: &RunState,
        op_id: &str,
        settle: bool,
        sink: &mut dyn EventSink,
    ) -> Result<Option<String>> {
        let Some(op) = self.journal.table().get(op_id) else {
            return Ok(Some("the operation is not in the journal".into()));
        };
        let (Some(position), OpPhase::Started) = (op.stream.clone(), op.phase) else {
            return Ok(Some("no stream position was journaled for it".into()));
        };
        let tool = op.tool.clone();
        let arguments = op.arguments.value();
        let admitted = match tools::REGISTRY.admit(&tool, &arguments, self.ex.capabilities) {
            Ok(admitted) => admitted,
            Err(why) => return Ok(Some(why)),
        };
        self.seen.update(self.journal.table());
        let scope = CallScope {
            ex: self.ex,
            run_id: &run.id,
            attempt: &self.attempt_mark,
            seen_files: self.seen.paths(),
            mcp_stream: Some(StreamMode::Replay(&position)),
        };
        let cancel = AtomicBool::new(false);
        let output = admitted.execute(&scope.context(op_id, &cancel, None));
        if output.interrupted {
            return Ok(Some(output.text));
        }
        self.journal.record(JournalRecord::OutcomeKnown {
            op_id: op_id.to_string(),
            at: crate::clock::now_rfc3339(),
            output: outcome(&output),
        })?;
        // After an earlier UNKNOWN call its result waits (the model's order).
        if settle {
            self.settle_op(run, op_id, true, sink)?;
        }
        Ok(None)
    }
}
