//! `runs/<run>/run.json`: the record of one run, a Session file beside `session.json` and the
//! journal (so `session/` never reaches up into `run/`), replaced atomically at each status
//! change.
//!
//! Turns are not counted here per turn (that would cost an atomic replace per model call): the
//! durable record of a turn is its assistant message in `messages.jsonl`, and run.json stores the
//! count only in the terminal result.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fsx;
use crate::session::{Message, UsageRecord};
use crate::state::RunPaths;

pub const FORMAT_VERSION: u32 = 1;

/// docs/spec.md §6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RunStatus {
    Queued,
    Running,
    InputRequired,
    Completed,
    Failed,
    Canceled,
}

impl RunStatus {
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunStatus::Completed | RunStatus::Failed | RunStatus::Canceled
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::InputRequired => "inputRequired",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Canceled => "canceled",
        }
    }
}

/// Why a run failed, when the reason has its own exit code or meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FailReason {
    /// `maxTurns` or `maxWallClockMs` reached (exit 8).
    BudgetExhausted,
    /// The final output broke the output contract (exit 1).
    OutputContract,
    /// The model provider kept failing past `maxPureRetries` (exit 9).
    ProviderFailed,
    /// The model repeated the same call `maxRepeatedCalls` times with nothing changed in
    /// between ([`crate::run::repeat`]; exit 1).
    LoopDetected,
}

/// One process's work on a run; budgets count the total over all attempts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Attempt {
    pub started_at: String,
    pub pid: u32,
    /// The random mark this attempt's tool and model-command processes carry in their
    /// environment (`KXEN_ATTEMPT_ID`), so that what a crashed attempt left running can be found
    /// and stopped ([`crate::process::orphans`]). Absent in runs written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mark: Option<String>,
    /// The provider that served the model role in this attempt (name, kind, model; no secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// The process died without ending the attempt; `wallClockMs` then counts up to the run's
    /// last durable activity.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub crashed: bool,
    /// Wall-clock time this attempt spent, known once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_clock_ms: Option<u64>,
}

/// An error as recorded in a run result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunError {
    pub kind: String,
    pub message: String,
}

/// The terminal result, persisted before the final message is appended (two-phase settlement).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunResult {
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<FailReason>,
    pub final_text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// The id the final assistant message has (or gets) in `messages.jsonl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_message_id: Option<String>,
    /// Tokens of the model call that produced the final message (restored with it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_usage: Option<UsageRecord>,
    /// What that call cost (restored with the final message; see [`crate::session::cost`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_cost_usd: Option<f64>,
    /// The run's answer came after changes no check ran after, though the definition asked
    /// for verification before completion (docs/verification.md); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unverified: Option<crate::events::Unverified>,
    pub turns: u64,
    pub usage: UsageRecord,
    pub at: String,
}

/// The content of `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunState {
    pub format_version: u32,
    pub id: String,
    pub session_id: String,
    /// The run's position in its Session (1, 2, …), fixed when it is created: runs are ordered
    /// by it, never by id or time (a runner whose clock is behind mints ids that sort before
    /// earlier runs). Absent in runs written before it existed; see [`RunState::order_key`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    pub status: RunStatus,
    /// The user message holding this run's task. It is written after run.json, so a run whose
    /// task message is missing (a crash in between) gets it appended, from `task`, when it runs.
    pub task_message_id: String,
    /// The task text.
    pub task: String,
    pub created_at: String,
    pub updated_at: String,
    #[serde(default)]
    pub attempts: Vec<Attempt>,
    /// Operations waiting for `run resolve` (status `inputRequired`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown_ops: Vec<String>,
    /// Operations waiting for `run approve` / `run deny` (status `inputRequired`; a policy rule
    /// `ask` held them before they started).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approval_ops: Vec<String>,
    /// The DWP plan task this run works on (`run --plan DIR --plan-task T`): a resume must
    /// name the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<PlanBinding>,
    /// The plan limit whose exhaustion stopped the run (status `inputRequired`, nothing
    /// pending) until `dwp resources recover` lifts the hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_hold: Option<String>,
    /// `run --output-schema FILE`: a JSON Schema this run's final answer must match, beside
    /// the definition's own contract (read once, when the run was created).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<RunResult>,
    /// The final message is in the Session: nothing about this run is pending.
    pub settled: bool,
}

impl RunState {
    /// A queued run for `task_message_id`, the `seq`-th run of its Session.
    pub fn new(session_id: &str, run_id: &str, task: &Message, seq: u64) -> RunState {
        let now = crate::clock::now_rfc3339();
        RunState {
            format_version: FORMAT_VERSION,
            id: run_id.to_string(),
            session_id: session_id.to_string(),
            seq: Some(seq),
            status: RunStatus::Queued,
            task_message_id: task.id.clone(),
            task: task.content.clone(),
            created_at: now.clone(),
            updated_at: now,
            attempts: Vec::new(),
            unknown_ops: Vec::new(),
            approval_ops: Vec::new(),
            plan: None,
            plan_hold: None,
            output_schema: None,
            result: None,
            settled: false,
        }
    }

    /// Reads `run.json` (read-only).
    pub fn read(paths: &RunPaths, run_id: &str) -> Result<RunState> {
        let path = paths.run_json();
        let bytes = std::fs::read(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                // The run directory is `sessions/<SES>/runs/<RUN>`.
                let session = paths
                    .dir
                    .parent()
                    .and_then(Path::parent)
                    .and_then(Path::file_name)
                    .map_or("SES".into(), |n| n.to_string_lossy());
                Error::not_found(format!("no run {run_id} ({})", path.display())).with_hint(
                    format!("run `kxen-agent session show {session}` to list the session's runs"),
                )
            } else if e.kind() == std::io::ErrorKind::NotADirectory {
                Error::corrupt(format!(
                    "{} should be a run directory but is not a directory",
                    paths.dir.display()
                ))
                .with_hint("restore the Session from a backup or bundle")
            } else {
                Error::io("read", &path, e)
            }
        })?;
        crate::state::check_format_version(&bytes, FORMAT_VERSION, &path)?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Error::corrupt(format!("{}: {e}", path.display())))
    }

    /// Replaces `run.json` atomically.
    pub fn save(&mut self, paths: &RunPaths) -> Result<()> {
        self.updated_at = crate::clock::now_rfc3339();
        fsx::write_atomic_json(&paths.run_json(), self, fsx::STATE_FILE_MODE)
    }

    /// The key runs of one Session sort by: `seq`; runs without one (written before it existed,
    /// so created before any run that has one) come first, in id order among themselves.
    pub fn order_key(&self) -> (bool, u64, &str) {
        (self.seq.is_some(), self.seq.unwrap_or(0), &self.id)
    }

    /// The `seq` of the next run after `runs` (all runs of a Session): one more than the highest
    /// position taken, counting runs without a `seq` by their number.
    pub fn next_seq(runs: &[RunState]) -> u64 {
        let highest = runs.iter().filter_map(|r| r.seq).max().unwrap_or(0);
        highest.max(runs.len() as u64).saturating_add(1)
    }

    /// Wall-clock time spent by earlier, finished attempts.
    pub fn spent_wall_clock_ms(&self) -> u64 {
        self.attempts
            .iter()
            .filter_map(|a| a.wall_clock_ms)
            .fold(0u64, u64::saturating_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_json_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let paths = RunPaths {
            dir: dir.path().to_path_buf(),
        };
        let task = Message::new("run_1", crate::session::Role::User, "t");
        let mut run = RunState::new("ses_1", "run_1", &task, 1);
        run.result = Some(RunResult {
            final_cost_usd: None,
            unverified: None,
            status: RunStatus::Failed,
            reason: Some(FailReason::BudgetExhausted),
            final_text: String::new(),
            error: None,
            final_message_id: None,
            final_usage: None,
            turns: 3,
            usage: UsageRecord::default(),
            at: "t".into(),
        });
        run.save(&paths).unwrap();
        let text = std::fs::read_to_string(paths.run_json()).unwrap();
        assert!(text.contains(r#""reason": "budgetExhausted""#), "{text}");
        assert_eq!(RunState::read(&paths, "run_1").unwrap(), run);
        assert!(text.contains(r#""seq": 1"#), "{text}");
    }

    #[test]
    fn runs_order_by_seq_with_legacy_runs_first_by_id() {
        let task = Message::new("run_x", crate::session::Role::User, "t");
        let at = |id: &str, seq: Option<u64>| {
            let mut run = RunState::new("ses_1", id, &task, 0);
            run.seq = seq;
            run
        };
        // run_0… has the smallest id (a clock behind) but the highest seq.
        let mut runs = vec![
            at("run_0001", Some(4)),
            at("run_0300", None),
            at("run_0400", Some(3)),
            at("run_0200", None),
        ];
        runs.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
        let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["run_0200", "run_0300", "run_0400", "run_0001"]);
        assert_eq!(RunState::next_seq(&runs), 5);
        assert_eq!(
            RunState::next_seq(&runs[..2]),
            3,
            "legacy runs count by number"
        );
        assert_eq!(RunState::next_seq(&[]), 1);
    }
}

/// The DWP plan task a run works on, as recorded in its `run.json` (bound by
/// `crate::host::binding`; a Session type, so the record needs nothing from the host).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanBinding {
    /// The plan folder, canonical (`crate::host::binding::plan_dir`).
    pub dir: std::path::PathBuf,
    /// The plan id (`PLAN_…`).
    pub plan: String,
    /// The task id (`T-…`).
    pub task: String,
    /// The live contract's id when the run was bound.
    pub contract_id: String,
    /// The manifest's `freshness.inputs_fingerprint` when the run was bound.
    pub inputs_fingerprint: String,
}
