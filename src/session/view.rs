//! Read-only views of Sessions and runs (`session list`, `session show`, `run show`).
//!
//! They never write anything, not even the state dir, and take no lock, so they work while a run
//! holds the lease; a torn last line written by a live run is simply not shown yet.

use std::path::Path;

use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::git;
use crate::ids::{self, IdKind};
use serde::Serialize;

use crate::journal::{self, OpState};
use crate::session::run_record::RunState;
use crate::session::{SessionMeta, messages, store};
use crate::state::StateDir;

/// What `session list` found: one object per Session, newest first, and the errors of the
/// Sessions it could not read.
#[derive(Debug, Default)]
pub struct Listing {
    /// `{"type":"session",…}` summaries and, at a damaged Session's place in the order,
    /// `{"type":"damagedSession","id","error":{"kind","message","hints"?}}`.
    pub entries: Vec<Value>,
    /// The error of each damaged Session, in listing order.
    pub damaged: Vec<(String, Error)>,
}

/// One summary object per Session, newest first, with its lineage and workspace. With
/// `workspace`, only the Sessions bound to that repository (compared by each Session's own
/// identity rule, as a resume would).
///
/// A Session whose `session.json` or runs cannot be read does not hide the others: it is
/// listed as a `damagedSession` entry with its error (it is kept under `workspace` too, since
/// its binding is unknown). Only errors of the given `workspace` itself end the listing.
pub fn list(state: &StateDir, workspace: Option<&Path>) -> Result<Listing> {
    let mut probe = workspace.map(git::IdentityProbe::new).transpose()?;
    let mut out = Listing::default();
    for id in store::list_ids(state)?.into_iter().rev() {
        let paths = state.session(&id);
        if !paths.session_json().is_file() {
            continue;
        }
        let read = SessionMeta::read(&paths, &id)
            .and_then(|meta| store::list_runs(&paths).map(|runs| (meta, runs)));
        let (meta, runs) = match read {
            Ok(read) => read,
            Err(error) => {
                let mut reported = json!({"kind": error.kind.name(), "message": error.message});
                if !error.hints.is_empty() {
                    reported["hints"] = json!(error.hints);
                }
                out.entries
                    .push(json!({"type": "damagedSession", "id": id, "error": reported}));
                out.damaged.push((id, error));
                continue;
            }
        };
        if let Some(probe) = &mut probe
            && !probe.matches(&meta.workspace)?
        {
            continue;
        }
        let last = runs.last();
        let task = meta.task_parent.as_ref().map(|t| {
            json!({"description": t.description, "runId": t.run_id, "opId": t.op_id,
                   "depth": t.depth})
        });
        out.entries.push(json!({
            "type": "session",
            "id": meta.id,
            "createdAt": meta.created_at,
            "agent": meta.lock.definition.metadata.name,
            "workspace": meta.workspace.root,
            "parentId": meta.parent_id,
            "branchRootId": meta.branch_root_id,
            "forkKind": meta.fork_kind,
            "runs": runs.len(),
            "lastRunId": last.map(|r| r.id.clone()),
            "lastRunStatus": last.map(|r| r.status.name()),
        }));
        if let Some(task) = task {
            out.entries.last_mut().expect("just pushed")["taskParent"] = task;
        }
    }
    nest_task_children(&mut out.entries);
    Ok(out)
}

/// Puts each `task` child right after its parent (children oldest first, depth first) and
/// lists them in the parent's `tasks`; a child whose parent is not listed stays in its place.
fn nest_task_children(entries: &mut Vec<Value>) {
    let is_child_of =
        |e: &Value, parent: &str| e["forkKind"] == "task" && e["parentId"].as_str() == Some(parent);
    let listed: Vec<String> = entries
        .iter()
        .filter_map(|e| e["id"].as_str().map(str::to_string))
        .collect();
    let (children, mut rest): (Vec<Value>, Vec<Value>) =
        std::mem::take(entries).into_iter().partition(|e| {
            e["forkKind"] == "task"
                && e["parentId"]
                    .as_str()
                    .is_some_and(|p| listed.iter().any(|l| l == p))
        });
    // `children` are newest first, like the listing: reversed, they are in creation order.
    let mut children: Vec<Value> = children.into_iter().rev().collect();
    fn place(
        out: &mut Vec<Value>,
        mut entry: Value,
        children: &mut Vec<Value>,
        is_child_of: &dyn Fn(&Value, &str) -> bool,
    ) {
        let id = entry["id"].as_str().unwrap_or_default().to_string();
        let (mine, others): (Vec<Value>, Vec<Value>) = std::mem::take(children)
            .into_iter()
            .partition(|c| is_child_of(c, &id));
        *children = others;
        if !mine.is_empty() {
            entry["tasks"] = Value::from(mine.iter().map(|c| c["id"].clone()).collect::<Vec<_>>());
        }
        out.push(entry);
        for child in mine {
            place(out, child, children, is_child_of);
        }
    }
    let mut out = Vec::with_capacity(rest.len() + children.len());
    for entry in rest.drain(..) {
        place(&mut out, entry, &mut children, &is_child_of);
    }
    out.extend(children); // only a cycle of hand-edited parents is left: keep it listed
    *entries = out;
}

/// A Session: metadata, lock, binding, its runs and its messages.
pub fn show_session(state: &StateDir, session_id: &str) -> Result<Value> {
    let paths = store::session_paths(state, session_id)?;
    let meta = SessionMeta::read(&paths, session_id)?;
    let runs = store::list_runs(&paths)?;
    let messages = messages::read(&paths.messages())?;
    let mut value = json!({"type": "session"});
    if let (Value::Object(out), Ok(Value::Object(fields))) =
        (&mut value, serde_json::to_value(&meta))
    {
        out.extend(fields);
    }
    value["lineage"] = lineage(state, &meta)?;
    value["runs"] = serde_json::to_value(&runs).unwrap_or(Value::Null);
    // Which version of each repository rule file each run gave the model (its task message
    // holds the text).
    let mut total = crate::session::cost::Cost::default();
    for (run, shown) in runs
        .iter()
        .zip(value["runs"].as_array_mut().into_iter().flatten())
    {
        let files = messages
            .iter()
            .find(|m| m.id == run.task_message_id)
            .and_then(|m| m.context.as_ref())
            .map(|c| serde_json::to_value(&c.files).unwrap_or(Value::Null));
        shown["contextFiles"] = files.unwrap_or_else(|| json!([]));
        // What its model calls cost, its `task` children's included.
        let cost = crate::session::cost::of_run(state, session_id, &run.id, &messages)?;
        total.add(&cost);
        shown["cost"] = cost.to_json();
    }
    value["cost"] = total.to_json();
    value["messages"] = serde_json::to_value(&messages).unwrap_or(Value::Null);
    Ok(value)
}

/// Where a Session sits in its fork tree: its ancestors (lineage root first, as far as they are
/// in this state dir — an imported fork may arrive without its parent) and its direct forks.
fn lineage(state: &StateDir, meta: &SessionMeta) -> Result<Value> {
    let mut ancestors = Vec::new();
    let mut next = meta.parent_id.clone();
    while let Some(id) = next.take() {
        if ancestors.contains(&id) || id == meta.id {
            break; // a cycle can only come from hand-edited state; never loop on it
        }
        let paths = state.session(&id);
        next = if paths.session_json().is_file() {
            SessionMeta::read(&paths, &id)?.parent_id
        } else {
            None
        };
        ancestors.push(id);
    }
    ancestors.reverse();
    let mut forks = Vec::new();
    let mut tasks = Vec::new();
    for id in store::list_ids(state)? {
        let paths = state.session(&id);
        if id == meta.id || !paths.session_json().is_file() {
            continue;
        }
        let other = SessionMeta::read(&paths, &id)?;
        if other.parent_id.as_deref() != Some(meta.id.as_str()) {
            continue;
        }
        match &other.task_parent {
            // A task child: with the parent's run and operation, and how far it got.
            Some(t) if other.fork_kind == Some(crate::session::ForkKind::Task) => {
                let status = store::list_runs(&paths)?
                    .last()
                    .map(|r| r.status.name().to_string());
                tasks.push(json!({"sessionId": id, "description": t.description,
                                  "runId": t.run_id, "opId": t.op_id, "status": status}));
            }
            _ => forks.push(id),
        }
    }
    Ok(json!({"ancestors": ancestors, "forks": forks, "tasks": tasks}))
}

/// What `run show` prints: `{"type":"run","run":…,"operations":[…]}`. Serialized straight from
/// the folded journal (no intermediate JSON tree: a long journal is not held twice).
#[derive(Debug, Serialize)]
pub struct RunView {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub run: RunState,
    /// What the run's model calls cost, its `task` children's included
    /// ([`crate::session::cost::Cost::to_json`]).
    pub cost: Value,
    pub operations: Vec<OpState>,
    /// The calls that wait for `run approve` / `run deny` (their policy rule is `ask`).
    #[serde(rename = "pendingApprovals")]
    pub pending_approvals: Vec<PendingApproval>,
    /// The child Sessions of the run's `task` operations, in operation order (absent when
    /// there are none): where to look when the parent waits on one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildView>,
}

/// One `task` child as `run show` of its parent names it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildView {
    pub op_id: String,
    pub session_id: String,
    pub run_id: String,
    /// The child run's status, or `notCreated` (recorded in the parent's journal, but the
    /// Session was never created).
    pub status: String,
    /// The child's UNKNOWN operations (with `inputRequired`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_ops: Vec<String>,
}

/// A call awaiting approval, as `run show` lists it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingApproval {
    pub op_id: String,
    pub tool: String,
    pub arguments: serde_json::Value,
    pub arguments_hash: String,
    pub rule: String,
    pub at: String,
}

/// A run's state plus every journal operation with its phase.
pub fn show_run(state: &StateDir, session_id: &str, run_id: &str) -> Result<RunView> {
    let paths = store::session_paths(state, session_id)?;
    ids::validate_kind(run_id, IdKind::Run)?;
    let run_paths = paths.run(run_id);
    let run = RunState::read(&run_paths, run_id)?;
    let table = journal::read(&run_paths.journal())?;
    let pending_approvals = table
        .ops()
        .iter()
        .filter(|op| op.phase == journal::OpPhase::AwaitingApproval)
        .filter_map(|op| {
            let a = op.approval.as_ref()?;
            Some(PendingApproval {
                op_id: op.op_id.clone(),
                tool: op.tool.clone(),
                arguments: op.arguments.value(),
                arguments_hash: a.arguments_hash.clone(),
                rule: a.rule.clone(),
                at: op.started_at.clone(),
            })
        })
        .collect();
    let mut children = Vec::new();
    for op in table.ops() {
        let Some(child) = &op.child else { continue };
        let child_paths = state.session(&child.session_id).run(&child.run_id);
        let (status, unknown_ops) = if child_paths.run_json().is_file() {
            let child_run = RunState::read(&child_paths, &child.run_id)?;
            (child_run.status.name().to_string(), child_run.unknown_ops)
        } else {
            ("notCreated".to_string(), Vec::new())
        };
        children.push(ChildView {
            op_id: op.op_id.clone(),
            session_id: child.session_id.clone(),
            run_id: child.run_id.clone(),
            status,
            unknown_ops,
        });
    }
    Ok(RunView {
        kind: "run",
        cost: crate::session::cost::of_session(state, session_id, Some(run_id))?.to_json(),
        run,
        operations: table.into_ops(),
        pending_approvals,
        children,
    })
}
