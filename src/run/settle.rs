//! Final output settlement, two-phase (docs/spec.md §6): persist the terminal result, then append
//! the final message idempotently (by id), then mark the run settled. A crash between the steps
//! is finished by [`finish`] without calling the model or any tool.

use crate::error::Result;
use crate::fsx::failpoint;
use crate::session::run_record::{RunResult, RunState};
use crate::session::{Message, MessageLog, Role};
use crate::state::RunPaths;

/// Ends the current attempt: records when it ended and how long it took.
pub fn close_attempt(run: &mut RunState, elapsed_ms: u64) {
    if let Some(attempt) = run.attempts.last_mut()
        && attempt.ended_at.is_none()
    {
        attempt.ended_at = Some(crate::clock::now_rfc3339());
        attempt.wall_clock_ms = Some(elapsed_ms);
    }
}

/// Phase 1: the terminal result is durable in run.json; then the rest via [`finish`].
pub fn settle(
    run: &mut RunState,
    paths: &RunPaths,
    messages: &mut MessageLog,
    result: RunResult,
) -> Result<()> {
    persist_result(run, paths, result)?;
    finish(run, paths, messages)
}

/// Phase 1 alone: what happens between it and [`finish`] (a plan run's last meter sample) is
/// redone by the [`finish`] of a resume, since the run stays unsettled until then.
pub fn persist_result(run: &mut RunState, paths: &RunPaths, result: RunResult) -> Result<()> {
    run.status = result.status;
    run.result = Some(result);
    run.settled = false;
    run.save(paths)?;
    failpoint::hit("settle.after-result");
    Ok(())
}

/// Phases 2 and 3: the final message (if the result names one and it is not there yet), then
/// `settled`. Idempotent: calling it again after a crash at any point completes the same state.
pub fn finish(run: &mut RunState, paths: &RunPaths, messages: &mut MessageLog) -> Result<()> {
    if run.settled {
        return Ok(());
    }
    if let Some(result) = &run.result
        && let Some(id) = &result.final_message_id
        && !messages.contains(id)
    {
        let mut message = Message::new(&run.id, Role::Assistant, result.final_text.clone());
        message.id = id.clone();
        message.usage = result.final_usage;
        message.cost_usd = result.final_cost_usd;
        message.created_at = result.at.clone();
        messages.append(message)?;
        failpoint::hit("settle.after-final-message");
    }
    run.settled = true;
    run.save(paths)?;
    failpoint::hit("settle.after-settled");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::run_record::RunStatus;
    use crate::usage::UsageRecord;

    #[test]
    fn finish_is_idempotent_and_appends_the_final_message_once() {
        let dir = tempfile::tempdir().unwrap();
        let paths = RunPaths {
            dir: dir.path().to_path_buf(),
        };
        let log_path = dir.path().join("messages.jsonl");
        let mut messages = MessageLog::open(&log_path).unwrap();
        let task = Message::new("run_1", Role::User, "t");
        let mut run = RunState::new("ses_1", "run_1", &task, 1);
        let result = RunResult {
            final_cost_usd: None,
            unverified: None,
            status: RunStatus::Completed,
            reason: None,
            final_text: "done".into(),
            error: None,
            final_message_id: Some("msg_final".into()),
            final_usage: Some(UsageRecord {
                input_tokens: 1,
                output_tokens: 2,
                ..UsageRecord::default()
            }),
            turns: 1,
            usage: UsageRecord::default(),
            at: "t".into(),
        };
        // A crash after phase 1: run.json holds the result, the message is missing.
        run.status = result.status;
        run.result = Some(result);
        run.save(&paths).unwrap();
        let mut reread = RunState::read(&paths, "run_1").unwrap();
        finish(&mut reread, &paths, &mut messages).unwrap();
        // A crash after the append but before `settled`: finishing again adds nothing.
        reread.settled = false;
        finish(&mut reread, &paths, &mut messages).unwrap();
        let all = crate::session::messages::read(&log_path).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].id, "msg_final");
        assert_eq!(all[0].content, "done");
        assert!(RunState::read(&paths, "run_1").unwrap().settled);
    }
}
