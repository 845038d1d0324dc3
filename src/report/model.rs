//! What the page shows, derived once from the records: turns with their tokens and cost, each
//! tool call with its operation, outcome and duration, each edit's diff, the task tree.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use super::Pricing;
use crate::error::{Error, Result};
use crate::journal::{OpPhase, OpState};
use crate::session::run_record::{Attempt, RunState};
use crate::session::verify::Verified;
use crate::session::view::{self, ChildView, RunView};
use crate::session::{CallRecord, Message, Role, UsageRecord};
use crate::state::StateDir;

/// Everything the page and the summary are rendered from.
pub struct Data<'a> {
    /// `session show`'s object, without its messages.
    pub session: Value,
    pub runs: Vec<RunData<'a>>,
    /// Every model call of the Session (assistant messages and compaction summaries), in log
    /// order, numbered from 1.
    pub turns: Vec<Turn<'a>>,
    pub verified: std::result::Result<Verified, Error>,
    pub tree: Vec<TreeNode>,
    /// Whether any price was known (otherwise only tokens are shown).
    pub priced: bool,
}

pub struct RunData<'a> {
    pub view: &'a RunView,
    pub entries: Vec<Entry<'a>>,
}

/// One line of a run's timeline, in the order it happened.
pub enum Entry<'a> {
    /// Attempt `n` (from 1) of the run started: a second one is a resume.
    Attempt(usize, &'a Attempt),
    /// The user message holding the task.
    Task(&'a Message),
    /// A model call (index into [`Data::turns`]) and the tool calls it made.
    Turn(usize, Vec<Call<'a>>),
    /// A compaction summary (index into [`Data::turns`]).
    Compaction(usize),
}

/// One model call.
pub struct Turn<'a> {
    pub run_id: &'a str,
    pub message: &'a Message,
    pub usage: Option<UsageRecord>,
    pub cost: Option<f64>,
}

/// One tool call the model made, and what became of it.
pub struct Call<'a> {
    pub call: &'a CallRecord,
    pub op: Option<&'a OpState>,
    /// The tool message answering the call (its content is what the model saw).
    pub answer: Option<&'a Message>,
    pub outcome: Outcome,
    pub duration_ms: Option<i64>,
    pub child: Option<&'a ChildView>,
    pub diff: Option<Diff>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Error,
    Interrupted,
    /// Ran, outcome recorded by an operator (`run resolve`).
    Resolved,
    /// The process died while it ran: `run resolve` must say what happened.
    Unknown,
    AwaitingApproval,
    Denied,
    /// Started, no outcome yet (a live run, or one that stopped here).
    Running,
    /// Answered without running (a refusal, an unknown tool, a cancel).
    NotRun,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Error => "error",
            Outcome::Interrupted => "interrupted",
            Outcome::Resolved => "resolved",
            Outcome::Unknown => "UNKNOWN",
            Outcome::AwaitingApproval => "awaiting approval",
            Outcome::Denied => "denied",
            Outcome::Running => "running",
            Outcome::NotRun => "not run",
        }
    }

    /// The CSS class of its badge.
    pub fn class(self) -> &'static str {
        match self {
            Outcome::Ok | Outcome::Resolved => "ok",
            Outcome::Error | Outcome::Interrupted | Outcome::Denied | Outcome::NotRun => "err",
            Outcome::Unknown | Outcome::AwaitingApproval | Outcome::Running => "stop",
        }
    }
}

/// An edit as a unified diff.
pub struct Diff {
    pub path: String,
    /// The unified diff text (`---`/`+++` headers, hunks).
    pub text: String,
    /// The file's content before the edit was not in the Session (a `write` over a file the
    /// Session never wrote): the diff is against an empty file.
    pub base_unknown: bool,
}

/// A `task` child Session and its own children.
pub struct TreeNode {
    pub session_id: String,
    pub description: String,
    pub parent_run: String,
    pub parent_op: String,
    pub status: String,
    pub children: Vec<TreeNode>,
}

/// The longest diff shown per edit, in lines (the rest is counted).
pub const DIFF_LINES: usize = 400;

impl<'a> Data<'a> {
    pub fn new(
        session: Value,
        messages: &'a [Message],
        runs: &'a [RunView],
        verified: std::result::Result<Verified, Error>,
        tree: Vec<TreeNode>,
        pricing: &Pricing,
    ) -> Data<'a> {
        let ended: HashMap<&str, &Message> = messages
            .iter()
            .filter(|m| m.role == Role::Tool)
            .map(|m| (m.id.as_str(), m))
            .collect();
        // Answers by (assistant message, call index), for calls that never got an operation.
        let answers: HashMap<(&str, usize), &Message> = messages
            .iter()
            .filter_map(|m| Some(((m.reply_to.as_deref()?, m.call_index?), m)))
            .collect();
        let mut files = KnownFiles::default();
        let mut turns = Vec::new();
        let mut out_runs = Vec::new();
        for view in runs {
            let run = &view.run;
            let ops: HashMap<(&str, usize), &OpState> = view
                .operations
                .iter()
                .map(|op| ((op.message_id.as_str(), op.call_index), op))
                .collect();
            let children: HashMap<&str, &ChildView> = view
                .children
                .iter()
                .map(|c| (c.op_id.as_str(), c))
                .collect();
            let mut entries = Vec::new();
            let mut attempts = run.attempts.iter().enumerate().peekable();
            for m in messages.iter().filter(|m| m.run_id == run.id) {
                // Attempts interleave with the messages by time: a resume shows where it began.
                while let Some((n, a)) =
                    attempts.next_if(|(_, a)| !later(&a.started_at, &m.created_at))
                {
                    entries.push(Entry::Attempt(n + 1, a));
                }
                match m.role {
                    Role::User => entries.push(Entry::Task(m)),
                    Role::Tool => {}
                    Role::Compaction | Role::Assistant => {
                        let provider = if m.role == Role::Compaction {
                            pricing.compaction.as_deref().or(provider_at(run, m))
                        } else {
                            provider_at(run, m)
                        };
                        let cost = m
                            .usage
                            .and_then(|u| pricing.cost(provider, u.input_tokens, u.output_tokens));
                        turns.push(Turn {
                            run_id: &run.id,
                            message: m,
                            usage: m.usage,
                            cost,
                        });
                        let turn = turns.len() - 1;
                        if m.role == Role::Compaction {
                            entries.push(Entry::Compaction(turn));
                            continue;
                        }
                        let calls = m
                            .tool_calls
                            .iter()
                            .enumerate()
                            .map(|(i, call)| {
                                let op = ops.get(&(m.id.as_str(), i)).copied();
                                let answer = match op.and_then(|o| o.turn_message_id.as_deref()) {
                                    Some(id) => ended.get(id).copied(),
                                    None => answers.get(&(m.id.as_str(), i)).copied(),
                                };
                                let outcome = outcome(op, answer);
                                let duration_ms = op.zip(answer).and_then(|(op, answer)| {
                                    let start = crate::clock::parse_rfc3339(&op.started_at)?;
                                    let end = crate::clock::parse_rfc3339(&answer.created_at)?;
                                    Some((end - start).max(0))
                                });
                                let diff = files.diff(call, outcome);
                                Call {
                                    call,
                                    op,
                                    answer,
                                    outcome,
                                    duration_ms,
                                    child: op.and_then(|o| children.get(o.op_id.as_str()).copied()),
                                    diff,
                                }
                            })
                            .collect();
                        entries.push(Entry::Turn(turn, calls));
                    }
                }
            }
            entries.extend(attempts.map(|(n, a)| Entry::Attempt(n + 1, a)));
            out_runs.push(RunData { view, entries });
        }
        let priced = turns.iter().any(|t| t.cost.is_some());
        Data {
            session,
            runs: out_runs,
            turns,
            verified,
            tree,
            priced,
        }
    }

    /// Tool calls in the whole Session, and how many had each outcome.
    pub fn call_counts(&self) -> (usize, BTreeSet<(&'static str, usize)>) {
        let mut by: HashMap<&'static str, usize> = HashMap::new();
        let mut total = 0;
        for call in self.calls() {
            total += 1;
            *by.entry(call.outcome.name()).or_default() += 1;
        }
        (total, by.into_iter().collect())
    }

    pub fn calls(&self) -> impl Iterator<Item = &Call<'a>> {
        self.runs
            .iter()
            .flat_map(|r| r.entries.iter())
            .flat_map(|e| match e {
                Entry::Turn(_, calls) => calls.as_slice(),
                _ => &[],
            })
    }

    /// Total tokens and, when every priced turn had a price, the total cost.
    pub fn totals(&self) -> (UsageRecord, Option<f64>) {
        let mut usage = UsageRecord::default();
        let mut cost = None;
        for t in &self.turns {
            if let Some(u) = t.usage {
                usage.add(u);
            }
            if let Some(c) = t.cost {
                *cost.get_or_insert(0.0) += c;
            }
        }
        (usage, cost)
    }
}

/// Whether stamp `a` is after stamp `b` (unparseable stamps compare as text).
fn later(a: &str, b: &str) -> bool {
    match (
        crate::clock::parse_rfc3339(a),
        crate::clock::parse_rfc3339(b),
    ) {
        (Some(a), Some(b)) => a > b,
        _ => a > b,
    }
}

/// The provider name of the attempt that was running when `m` was written.
fn provider_at<'r>(run: &'r RunState, m: &Message) -> Option<&'r str> {
    run.attempts
        .iter()
        .rev()
        .find(|a| !later(&a.started_at, &m.created_at))
        .or(run.attempts.first())
        .and_then(|a| a.provider.as_ref()?["name"].as_str())
}

fn outcome(op: Option<&OpState>, answer: Option<&Message>) -> Outcome {
    let Some(op) = op else {
        return if answer.is_some() {
            Outcome::NotRun
        } else {
            Outcome::Running
        };
    };
    let history = op.history.as_slice();
    match op.phase {
        OpPhase::AwaitingApproval | OpPhase::Approved => Outcome::AwaitingApproval,
        OpPhase::Denied => Outcome::Denied,
        OpPhase::OutcomeUnknown => Outcome::Unknown,
        OpPhase::Started => Outcome::Running,
        _ if history.contains(&OpPhase::Denied) => Outcome::Denied,
        _ if history.contains(&OpPhase::Resolved) => Outcome::Resolved,
        _ => match &op.output {
            Some(o) if o.interrupted => Outcome::Interrupted,
            Some(o) if o.is_error => Outcome::Error,
            _ => Outcome::Ok,
        },
    }
}

/// File contents the Session itself established (by `write`, then `edit`s applied to them), so
/// a later `write` or `edit` of the same path diffs against the whole file.
#[derive(Default)]
struct KnownFiles {
    files: HashMap<String, String>,
}

impl KnownFiles {
    fn diff(&mut self, call: &CallRecord, outcome: Outcome) -> Option<Diff> {
        let args = &call.arguments;
        let path = args["path"].as_str()?.to_string();
        let (before, after, base_unknown) = match call.name.as_str() {
            "write" => {
                let content = args["content"].as_str()?;
                let before = self.files.get(&path).cloned();
                (
                    before.clone().unwrap_or_default(),
                    content.to_string(),
                    before.is_none(),
                )
            }
            "edit" => {
                let old = args["oldString"].as_str()?;
                let new = args["newString"].as_str()?;
                match self.files.get(&path) {
                    Some(known) if outcome == Outcome::Ok => {
                        let after = if args["replaceAll"] == Value::Bool(true) {
                            known.replace(old, new)
                        } else {
                            known.replacen(old, new, 1)
                        };
                        (known.clone(), after, false)
                    }
                    // Only the replaced text is known: diff it alone.
                    _ => (old.to_string(), new.to_string(), false),
                }
            }
            _ => return None,
        };
        if outcome == Outcome::Ok && (call.name == "write" || self.files.contains_key(&path)) {
            self.files.insert(path.clone(), after.clone());
        }
        // A pathological pair of large files must not stall the page: past the deadline
        // `similar` falls back to a coarser (still correct) diff.
        let text = similar::TextDiff::configure()
            .timeout(std::time::Duration::from_millis(200))
            .diff_lines(&before, &after)
            .unified_diff()
            .context_radius(3)
            .header(&format!("a/{path}"), &format!("b/{path}"))
            .to_string();
        Some(Diff {
            path,
            text,
            base_unknown,
        })
    }
}

/// The `task` children of `session_id`, recursively, from the listing `session list` makes.
pub fn task_tree(state: &StateDir, session_id: &str) -> Result<Vec<TreeNode>> {
    let listing = view::list(state, None)?;
    let mut by_parent: HashMap<String, Vec<&Value>> = HashMap::new();
    for e in &listing.entries {
        if e["forkKind"] == "task"
            && let Some(parent) = e["parentId"].as_str()
        {
            by_parent.entry(parent.to_string()).or_default().push(e);
        }
    }
    fn nodes(
        id: &str,
        by_parent: &HashMap<String, Vec<&Value>>,
        seen: &mut BTreeSet<String>,
    ) -> Vec<TreeNode> {
        if !seen.insert(id.to_string()) {
            return Vec::new(); // a cycle of hand-edited parents
        }
        let mut out = Vec::new();
        for e in by_parent.get(id).into_iter().flatten() {
            let child = e["id"].as_str().unwrap_or_default();
            let t = &e["taskParent"];
            let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
            out.push(TreeNode {
                session_id: child.to_string(),
                description: text(&t["description"]),
                parent_run: text(&t["runId"]),
                parent_op: text(&t["opId"]),
                status: e["lastRunStatus"]
                    .as_str()
                    .unwrap_or("notStarted")
                    .to_string(),
                children: nodes(child, by_parent, seen),
            });
        }
        out
    }
    Ok(nodes(session_id, &by_parent, &mut BTreeSet::new()))
}
