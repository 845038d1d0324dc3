//! `task` children: subagents as nested durable runs (docs/spec.md §9 `task`, issue 15).
//!
//! A `task` call of a parent run is one journal operation of the parent whose `started` record
//! names the child Session and run ([`ChildRef`], ids chosen before the record is written): the
//! child's id is durable in the parent's journal BEFORE the child exists. Then the child
//! Session is created all or nothing (`session::store::create`, `forkKind: "task"`,
//! `taskParent` naming the parent's run and operation) and its first run executes in this
//! process, under its own lease, with its own journal and recovery. Its final text (or its
//! failure) becomes the parent operation's outcome.
//!
//! The child's lock is the parent's locked definition and policy (same policy hash), with:
//! - capabilities never wider than the parent's: the same set, minus `task` once the child is
//!   at the policy's depth limit (`maxTaskDepth`, default 1: [`MergedPolicy::task_depth_limit`]);
//! - budgets carved from what the parent has left when the child starts: `maxTurns` at most
//!   the parent's remaining turns ([`share`] of them when several children start together),
//!   `maxWallClockMs` at most its remaining wall clock. The turns a child takes are the
//!   parent's ([`turns_spent`]), so a parent and its children never make more model calls than
//!   the parent's `maxTurns`. The parent's own wall-clock bound stops the child as a cancel does.
//!
//! Recovery of the parent ([`recover`]) never runs a child twice: a child that finished gives
//! its recorded result; one that is mid-run is resumed (its own recovery, its own UNKNOWNs); a
//! child that needs input keeps the parent's operation UNKNOWN, naming the child's Session, run
//! and operations. Only a child Session that was recorded but never created (a crash between
//! the parent's `started` record and the child's creation) is UNKNOWN for want of evidence.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::agent::DcpAgentLock;
use crate::error::{Error, Result};
use crate::events::Discard;
use crate::fsx::failpoint;
use crate::host::delegation::End;
use crate::ids::{self, IdKind};
use crate::journal::ChildRef;
#[cfg(doc)]
use crate::policy::MergedPolicy;
use crate::provider::{ModelRequest, ModelResponse, Provider};
use crate::run::agent_loop::{self, Ending, Execution};
use crate::session::run_record::{RunState, RunStatus};
use crate::session::store::{self, NewSession};
use crate::session::{ForkKind, Lease, Message, Role, SessionMeta, TaskParent, meta};
use crate::tools::task::{TaskArgs, TaskRunner};
use crate::tools::{self, ToolOutput};

/// The child ids of a `task` call, chosen before its `started` record (`None` for other tools).
pub fn plan(tool: &str) -> Option<ChildRef> {
    (tool == "task").then(|| ChildRef {
        session_id: ids::new_id(IdKind::Session),
        run_id: ids::new_id(IdKind::Run),
    })
}

/// What the parent has left when one of its `task` calls starts.
#[derive(Debug, Clone, Copy)]
pub struct Remaining {
    /// Turns (model responses) the parent may still make.
    pub turns: u64,
    /// Wall clock the parent may still spend (`None`: no limit).
    pub wall_clock: Option<Duration>,
}

/// Runs the child of one `task` operation of the parent execution `parent`.
pub struct Runner<'a, 'b> {
    pub parent: &'a Execution<'b>,
    pub parent_run_id: &'a str,
    pub op_id: &'a str,
    pub child: &'a ChildRef,
    pub remaining: Remaining,
}

impl TaskRunner for Runner<'_, '_> {
    fn run_task(&self, args: &TaskArgs, cancel: &AtomicBool) -> ToolOutput {
        match self.create_and_run(args, cancel) {
            Ok(output) => output,
            Err(e) => ToolOutput::error(format!(
                "the subagent could not be started: {}; no child Session was created",
                e.message
            )),
        }
    }
}

impl Runner<'_, '_> {
    fn create_and_run(&self, args: &TaskArgs, cancel: &AtomicBool) -> Result<ToolOutput> {
        let ex = self.parent;
        let origin = Origin {
            parent_session_id: ex.session_id,
            parent_run_id: self.parent_run_id,
            op_id: self.op_id,
            child: self.child,
            remaining: self.remaining,
        };
        let (meta, lease) = create(ex.state, &origin, args)?;
        failpoint::hit("task.after-child-created");
        // From here on the child exists: whatever happens, its own state says how far it got.
        Ok(match run_child(ex, &meta, lease, cancel) {
            Ok(output) => output,
            Err(e) => unknown_output(
                &meta.id,
                &self.child.run_id,
                &format!("the child run stopped with an error: {}", e.message),
            ),
        })
    }
}

/// Where a new child comes from: the parent's Session, run and `task` operation, the ids
/// recorded in its `started` record, and what the parent has left.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    pub parent_session_id: &'a str,
    pub parent_run_id: &'a str,
    pub op_id: &'a str,
    pub child: &'a ChildRef,
    pub remaining: Remaining,
}

/// The parent's lock with its cost budget (`maxCostUsd`) lowered to what the parent run has
/// left (its own calls and its other children's spent): the most a child may spend. Children
/// started together may each spend up to that; the parent stops before its next model call
/// once the sum passes its budget.
fn with_cost_left(
    state: &crate::state::StateDir,
    parent: &SessionMeta,
    origin: &Origin,
) -> Result<DcpAgentLock> {
    let mut lock = parent.lock.clone();
    let exec = &mut lock.definition.spec.execution;
    let Some(max) = exec.max_cost_usd else {
        return Ok(lock);
    };
    let spent = crate::session::cost::of_session(
        state,
        origin.parent_session_id,
        Some(origin.parent_run_id),
    )?;
    let left = max.0 - spent.usd;
    if spent.unknown().is_some() || left <= 0.0 {
        return Err(Error::failed(format!(
            "the parent run has no cost budget left for a subagent (maxCostUsd {max}, spent {})",
            spent.to_text()
        )));
    }
    exec.max_cost_usd = Some(crate::agent::Usd(left));
    Ok(lock)
}

/// Creates the child Session of a `task` call (all or nothing) and returns it with its lease
/// held; its first run is `queued`.
pub fn create(
    state: &crate::state::StateDir,
    origin: &Origin,
    args: &TaskArgs,
) -> Result<(SessionMeta, Lease)> {
    let parent_paths = state.session(origin.parent_session_id);
    let parent = SessionMeta::read(&parent_paths, origin.parent_session_id)?;
    let depth = parent.task_depth() + 1;
    let lock = child_lock(
        &with_cost_left(state, &parent, origin)?,
        depth,
        origin.remaining,
    )?;
    let child = origin.child;
    let mut task = Message::new(&child.run_id, Role::User, args.prompt.clone());
    task.redact();
    let new = NewSession {
        meta: SessionMeta {
            format_version: meta::FORMAT_VERSION,
            id: child.session_id.clone(),
            created_at: crate::clock::now_rfc3339(),
            workspace: parent.workspace.clone(),
            parent_id: Some(parent.id.clone()),
            branch_root_id: parent.branch_root_id.clone(),
            fork_point: None,
            fork_kind: Some(ForkKind::Task),
            task_parent: Some(TaskParent {
                run_id: origin.parent_run_id.to_string(),
                op_id: origin.op_id.to_string(),
                description: args.description.trim().to_string(),
                depth,
            }),
            lock,
            first_run_id: Some(child.run_id.clone()),
            history: Vec::new(),
        },
        run: RunState::new(&child.session_id, &child.run_id, &task, 1),
        task,
    };
    // All or nothing: before the rename the child does not exist (and recovery calls the
    // parent's operation UNKNOWN: no evidence); after it, recovery resumes the child.
    let lease = store::create(state, &new)?;
    Ok((new.meta, lease))
}

/// The child's lock: see the module doc. The error says why no child can be made.
pub fn child_lock(parent: &DcpAgentLock, depth: u32, remaining: Remaining) -> Result<DcpAgentLock> {
    let mut definition = parent.definition.clone();
    let mut capabilities = parent.capabilities.clone();
    if depth >= parent.policy.task_depth_limit() {
        let caps = &mut definition.spec.capabilities;
        caps.required.retain(|c| c != "task");
        caps.optional.retain(|c| c != "task");
        capabilities.retain(|c| c != "task");
    }
    let exec = &mut definition.spec.execution;
    let turns = u32::try_from(remaining.turns).unwrap_or(u32::MAX);
    if turns == 0 {
        return Err(Error::failed(
            "the parent run has no turns left for a subagent",
        ));
    }
    exec.max_turns = exec.max_turns.min(turns);
    if let Some(left) = remaining.wall_clock {
        let ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
        if ms == 0 {
            return Err(Error::failed(
                "the parent run has no wall clock left for a subagent",
            ));
        }
        exec.max_wall_clock_ms = Some(exec.max_wall_clock_ms.map_or(ms, |m| m.min(ms)));
    }
    definition
        .validate("the subagent's definition")
        .map_err(|e| Error::failed(e.message))?;
    let lock = DcpAgentLock {
        definition_hash: definition.definition_hash(),
        definition,
        capabilities,
        policy: parent.policy.clone(),
        policy_hash: parent.policy_hash.clone(),
        created_at: crate::clock::now_rfc3339(),
        mcp_tools: parent.mcp_tools.clone(),
        mcp_servers: parent.mcp_servers.clone(),
        lsp_servers: parent.lsp_servers.clone(),
        hooks_hash: parent.hooks_hash.clone(),
    };
    lock.verify().map_err(|e| Error::failed(e.message))?;
    Ok(lock)
}

/// Recovery of a parent's `task` operation whose outcome is not recorded (`started`, or
/// `outcomeUnknown` while the child needed input). `Ok(output)`: the child's outcome is known
/// (or it needs input again: `interrupted`); the child is resumed if it was mid-run, never run
/// again if it finished.
pub fn recover(parent: &Execution, child: &ChildRef, cancel: &AtomicBool) -> Result<ToolOutput> {
    let paths = parent.state.session(&child.session_id);
    if !paths.session_json().is_file() {
        return Ok(unknown_output(
            &child.session_id,
            &child.run_id,
            "the child Session was recorded as started but never created (the runtime stopped \
             in between), so there is no evidence of what it did",
        ));
    }
    let lease = Lease::acquire(&paths.dir, &child.session_id)?;
    let meta = SessionMeta::read(&paths, &child.session_id)?;
    meta.lock.verify()?;
    if meta.parent_id.as_deref() != Some(parent.session_id)
        || meta.fork_kind != Some(ForkKind::Task)
    {
        return Err(Error::corrupt(format!(
            "{}: the parent's journal names this Session as a task child of {}, but it is not",
            paths.session_json().display(),
            parent.session_id
        )));
    }
    run_child(parent, &meta, lease, cancel)
}

/// Executes (or continues, or only reads back) the child's run; the lease is held throughout.
fn run_child(
    parent: &Execution,
    meta: &SessionMeta,
    lease: Lease,
    cancel: &AtomicBool,
) -> Result<ToolOutput> {
    let run_id = meta
        .first_run_id
        .clone()
        .ok_or_else(|| Error::corrupt(format!("task child {} has no run", meta.id)))?;
    let paths = parent.state.session(&meta.id);
    let tool_names = meta.lock.tool_names();
    let description = meta
        .task_parent
        .as_ref()
        .map(|t| t.description.clone())
        .unwrap_or_default();
    // The child's turns, and its summaries when it compacts as its parent does, are answered
    // for its task.
    let model = |inner: &Arc<dyn Provider>| -> Arc<dyn Provider> {
        Arc::new(TaskProvider {
            inner: Arc::clone(inner),
            description: description.clone(),
        })
    };
    let services = parent.services.for_child(parent.state, &meta.id, model);
    let execution = parent.for_child(&services, meta, &paths, &tool_names, cancel);
    // In a plan run the child is a delegation of the plan task: `launched` before every
    // execution (recorded once), its end before the parent records the call's outcome.
    let prompt = match parent.plan {
        Some(_) => RunState::read(&paths.run(&run_id), &run_id)?.task,
        None => String::new(),
    };
    let delegated = crate::host::delegation::Child {
        session_id: &meta.id,
        run_id: &run_id,
        prompt: &prompt,
    };
    if let Some(host) = parent.plan {
        agent_loop::lock_host(host).delegation_launched(&delegated)?;
    }
    // A traced parent's child is traced too, under the parent's `task` span. `run` calling up
    // into `telemetry` (which reads run events): the one place a child's sink is chosen.
    let of = crate::telemetry::child::ChildOf {
        parent_run_id: meta.task_parent.as_ref().map_or("", |t| t.run_id.as_str()),
        op_id: meta.task_parent.as_ref().map_or("", |t| t.op_id.as_str()),
        depth: meta.task_parent.as_ref().map_or(1, |t| t.depth),
    };
    let ending = crate::telemetry::child::traced(
        parent.state,
        &of,
        parent.services.provider_info.as_ref(),
        &mut Discard,
        |sink| agent_loop::execute(&execution, &run_id, sink),
    )?;
    failpoint::hit("task.after-child-ended");
    if let (Some(host), Ending::Finished(result)) = (parent.plan, &ending) {
        let end = match result.status {
            RunStatus::Completed => End::Completed,
            RunStatus::Canceled => End::Cancelled,
            _ => End::Failed,
        };
        agent_loop::lock_host(host).delegation_ended(&delegated, end)?;
    }
    drop(lease);
    Ok(match ending {
        Ending::Finished(result) => match result.status {
            // The parent decides what an unchecked claim is worth, so it is told.
            RunStatus::Completed => match &result.unverified {
                Some(unverified) => ToolOutput::ok(format!(
                    "{}\n[kxen-agent runtime] The subagent's run is {}.",
                    result.final_text,
                    unverified.describe()
                )),
                None => ToolOutput::ok(result.final_text),
            },
            status => {
                let why = result
                    .error
                    .map(|e| e.message)
                    .unwrap_or_else(|| "no reason recorded".into());
                ToolOutput::error(format!(
                    "the subagent (Session {}, run {run_id}) ended {}: {why}",
                    meta.id,
                    status.name()
                ))
            }
        },
        Ending::ApprovalRequired(ops) => unknown_output(
            &meta.id,
            &run_id,
            &format!(
                "the child run waits for an operator's decision on {} (`kxen-agent run approve \
                 {} {run_id} OP` or `run deny`)",
                ops.join(", "),
                meta.id
            ),
        ),
        // The child stopped before a model call on the plan's limit: its outcome is not known
        // yet; the parent stops on the same limit (exit 8) and a resume after
        // `dwp resources recover` continues the child.
        Ending::PlanLimitExhausted(stop) => unknown_output(
            &meta.id,
            &run_id,
            &format!(
                "the child run stopped before a model call: plan limit {} is exhausted",
                stop.limit
            ),
        ),
        Ending::InputRequired(ops) => unknown_output(
            &meta.id,
            &run_id,
            &format!(
                "the child run needs input: the outcome of its operation(s) {} is unknown",
                ops.join(", ")
            ),
        ),
    })
}

/// The output of a `task` call whose outcome is not known: the parent records it as UNKNOWN
/// with this text, which says where to look and what to do.
fn unknown_output(session_id: &str, run_id: &str, why: &str) -> ToolOutput {
    let mut out = ToolOutput::error(format!(
        "subagent Session {session_id} run {run_id}: {why}; inspect it with `kxen-agent run show \
         {session_id} {run_id}`, resolve its UNKNOWN operations there (`kxen-agent run resolve \
         {session_id} {run_id} OP --output TEXT`) and resume the parent, which resumes the child \
         and takes its result (or resolve the parent's operation itself)"
    ));
    out.interrupted = true;
    out
}

/// The turns the `task` children of a parent's run took from its budget (`table` is the
/// parent run's journal): a finished child's own model responses, and for one that has not
/// finished all it may still take (its `maxTurns`). With the parent's own responses they never
/// exceed the parent's `maxTurns` (see [`share`]).
pub fn turns_spent(state: &crate::state::StateDir, table: &crate::journal::OpTable) -> Result<u64> {
    let mut spent = 0u64;
    for child in table.ops().iter().filter_map(|op| op.child.as_ref()) {
        let session = state.session(&child.session_id);
        let paths = session.run(&child.run_id);
        if !paths.run_json().is_file() {
            continue; // never created, or not yet: it took nothing
        }
        spent += match RunState::read(&paths, &child.run_id)?.result {
            Some(result) => result.turns,
            None => u64::from(
                SessionMeta::read(&session, &child.session_id)?
                    .lock
                    .definition
                    .spec
                    .execution
                    .max_turns,
            ),
        };
    }
    Ok(spent)
}

/// The turns the `index`-th of `count` `task` calls of one batch may take when the parent has
/// `left`: an even split (the first `left % count` get one more), so children running together
/// never take more than the parent has left between them.
pub fn share(left: u64, index: usize, count: usize) -> u64 {
    let (index, count) = (index as u64, count.max(1) as u64);
    left / count + u64::from(index < left % count)
}

/// A `task` child whose run has not ended: the parent's operation takes its result once it
/// does, so nothing else may settle that operation (an operator's `run resolve` is refused).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub session_id: String,
    pub run_id: String,
    /// The child's operations that wait for an operator's approval.
    pub approvals: Vec<String>,
    /// The child's operations whose outcome is unknown.
    pub unknown: Vec<String>,
}

impl Waiting {
    /// What to run to move the child on, then `then` (e.g. resuming the parent); `bin` is
    /// `kxen-agent` with its global options.
    pub fn next_step(&self, bin: &str, then: &str) -> String {
        let Waiting {
            session_id: s,
            run_id: r,
            approvals,
            unknown,
        } = self;
        let one = |ops: &[String]| match ops {
            [op] => op.clone(),
            _ => "OP".to_string(),
        };
        let mut steps = Vec::new();
        if !approvals.is_empty() {
            let op = one(approvals);
            steps.push(format!(
                "approve the subagent's call {} with `{bin} run approve {s} {r} {op}` (or `{bin} \
                 run deny {s} {r} {op} --reason TEXT`)",
                approvals.join(", ")
            ));
        }
        if !unknown.is_empty() {
            let op = one(unknown);
            steps.push(format!(
                "record the outcome of the subagent's {} with `{bin} run resolve {s} {r} {op} \
                 --output TEXT`",
                unknown.join(", ")
            ));
        }
        if steps.is_empty() {
            steps.push(format!(
                "inspect the subagent with `{bin} run show {s} {r}`"
            ));
        }
        format!("{}, then {then}", steps.join(" and "))
    }
}

/// The child of the parent's operation `op` if it was created and its run has not ended
/// (`None`: not a `task` call, a child never created, or one whose run ended).
pub fn waiting_child(
    state: &crate::state::StateDir,
    op: &crate::journal::OpState,
) -> Result<Option<Waiting>> {
    let Some(child) = &op.child else {
        return Ok(None);
    };
    let paths = state.session(&child.session_id).run(&child.run_id);
    if !paths.run_json().is_file() {
        return Ok(None);
    }
    if RunState::read(&paths, &child.run_id)?.status.is_terminal() {
        return Ok(None);
    }
    let table = crate::journal::read(&paths.journal())?;
    let with = |phase: crate::journal::OpPhase| -> Vec<String> {
        table
            .ops()
            .iter()
            .filter(|o| o.phase == phase)
            .map(|o| o.op_id.clone())
            .collect()
    };
    Ok(Some(Waiting {
        session_id: child.session_id.clone(),
        run_id: child.run_id.clone(),
        approvals: with(crate::journal::OpPhase::AwaitingApproval),
        unknown: with(crate::journal::OpPhase::OutcomeUnknown),
    }))
}

/// The parent's provider, serving a child Session: every request carries the child's `task`
/// description (the script provider selects its lines by it). Nested children keep the
/// innermost description.
#[derive(Debug)]
struct TaskProvider {
    inner: Arc<dyn Provider>,
    description: String,
}

impl Provider for TaskProvider {
    fn complete(&self, request: &ModelRequest, responses_so_far: usize) -> Result<ModelResponse> {
        let mut request = *request;
        if request.task.is_none() {
            request.task = Some(&self.description);
        }
        self.inner.complete(&request, responses_so_far)
    }
}

/// Whether a tool's calls may run concurrently with other such calls of the same turn.
pub fn parallel_safe(tool: &str) -> bool {
    matches!(
        tools::REGISTRY.find(tool).map(|e| e.effect()),
        Some(tools::SideEffect::Read | tools::SideEffect::Delegate)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{PolicyFlags, merge};

    fn lock(caps: &str, allow_shell: bool) -> DcpAgentLock {
        let yaml = format!(
            "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {{name: t}}\nspec:\n  \
             objective: o\n  instructions: [i]\n  capabilities: {{required: [read], optional: \
             [{caps}]}}\n  execution: {{maxTurns: 20, maxWallClockMs: 60000}}\n"
        );
        let definition = crate::agent::parse_definition(yaml.as_bytes(), "t.yaml").unwrap();
        let flags = PolicyFlags {
            allow_shell,
            ..PolicyFlags::default()
        };
        DcpAgentLock::build(&definition, &merge(&flags).unwrap()).unwrap()
    }

    #[test]
    fn a_child_lock_is_never_wider_and_its_budgets_are_carved() {
        let parent = lock("exec, task", true);
        assert_eq!(parent.capabilities, ["exec", "read", "task"]);
        let remaining = Remaining {
            turns: 3,
            wall_clock: Some(Duration::from_millis(5000)),
        };
        let child = child_lock(&parent, 1, remaining).unwrap();
        assert_eq!(
            child.capabilities,
            ["exec", "read"],
            "no task at the depth limit"
        );
        assert_eq!(child.policy_hash, parent.policy_hash);
        let exec = &child.definition.spec.execution;
        assert_eq!(exec.max_turns, 3);
        assert_eq!(exec.max_wall_clock_ms, Some(5000));
        child.verify().unwrap();
        // More left than the definition allows: the definition's own budget stays.
        let roomy = Remaining {
            turns: 100,
            wall_clock: None,
        };
        let child = child_lock(&parent, 1, roomy).unwrap();
        assert_eq!(child.definition.spec.execution.max_turns, 20);
        assert_eq!(
            child.definition.spec.execution.max_wall_clock_ms,
            Some(60000)
        );
        let none_left = Remaining {
            turns: 0,
            wall_clock: None,
        };
        assert!(
            child_lock(&parent, 1, none_left)
                .unwrap_err()
                .message
                .contains("no turns")
        );
    }

    #[test]
    fn the_policys_task_depth_decides_which_children_may_delegate() {
        let yaml = "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: t}\nspec:\n  \
                    objective: o\n  instructions: [i]\n  capabilities: {required: [read], \
                    optional: [task]}\n";
        let definition = crate::agent::parse_definition(yaml.as_bytes(), "t.yaml").unwrap();
        let mut file = crate::policy::PolicyFile {
            allow_shell: true,
            max_task_depth: Some(2),
            ..Default::default()
        };
        let deep = crate::policy::merge_with(file.clone(), &PolicyFlags::default()).unwrap();
        let parent = DcpAgentLock::build(&definition, &deep).unwrap();
        let left = Remaining {
            turns: 10,
            wall_clock: None,
        };
        let child = child_lock(&parent, 1, left).unwrap();
        assert_eq!(
            child.capabilities,
            ["read", "task"],
            "depth 1 of 2 delegates"
        );
        let grandchild = child_lock(&child, 2, left).unwrap();
        assert_eq!(grandchild.capabilities, ["read"], "depth 2 of 2 does not");
        file.max_task_depth = None;
        let shallow = crate::policy::merge_with(file, &PolicyFlags::default()).unwrap();
        let parent = DcpAgentLock::build(&definition, &shallow).unwrap();
        assert_eq!(child_lock(&parent, 1, left).unwrap().capabilities, ["read"]);
    }

    #[test]
    fn children_of_one_batch_split_what_is_left() {
        let shares: Vec<u64> = (0..3).map(|i| share(7, i, 3)).collect();
        assert_eq!(shares, [3, 2, 2]);
        assert_eq!(shares.iter().sum::<u64>(), 7);
        assert_eq!(share(1, 1, 2), 0, "a child past what is left gets nothing");
        assert_eq!(share(5, 0, 1), 5);
        assert_eq!(share(5, 0, 0), 5, "no count is one child");
    }

    #[test]
    fn only_reads_and_children_run_in_parallel() {
        for tool in ["read", "glob", "grep", "task"] {
            assert!(parallel_safe(tool), "{tool}");
        }
        for tool in ["write", "edit", "exec", "mcp__x__y", "nope"] {
            assert!(!parallel_safe(tool), "{tool}");
        }
    }
}
