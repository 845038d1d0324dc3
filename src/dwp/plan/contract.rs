//! The plan contract (plan-contract v6/v7, docs/dwp-spec.md, "The contract"): validation and `contract_id`.
//!
//! The contract is kept as the parsed JSON document (`raw`) because the manifest echoes parts of
//! it verbatim and its id is a hash of its canonical bytes; the typed fields below are the parts
//! the derivations need, extracted once validation has passed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::{Map, Number, Value};

use super::check::{self, Check, Problem, problem, py_repr};
use crate::error::{Error, Result};

pub const SCHEMA_V6: &str = "https://deepworkplan.com/schema/plan-contract/v6.json";
pub const SCHEMA_V7: &str = "https://deepworkplan.com/schema/plan-contract/v7.json";

/// The closed grant set of `permissions` (grants are authority, not abilities).
pub const GRANTS: [&str; 9] = [
    "gate_command_exec",
    "fs_write_plan_scope",
    "fs_write_repo_scope",
    "git_operations",
    "network_access",
    "host_adapter_metering",
    "agent_delegation",
    "context_export",
    "model_routing",
];

/// Scheduling defaults when the contract declares none.
pub const DEFAULT_STARVATION_THRESHOLD: i64 = 50;
pub const DEFAULT_MAX_ADAPTATIONS: i64 = 3;
pub const DEFAULT_MAX_RETRIES: i64 = 2;

/// The record generation, decided by the contract's `schema` URL only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    V6,
    V7,
}

impl Generation {
    /// The journal-event schema every event of a plan of this generation carries.
    pub fn journal_schema(self) -> &'static str {
        match self {
            Generation::V6 => "https://deepworkplan.com/schema/journal-event/v6.json",
            Generation::V7 => "https://deepworkplan.com/schema/journal-event/v7.json",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Generation::V6 => "v6",
            Generation::V7 => "v7",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Criterion {
    pub id: String,
    pub accepted_evidence: Vec<String>,
    /// `regression`, `discrimination`, `exempt`, or `None` when no control is declared.
    pub control_kind: Option<String>,
}

impl Criterion {
    /// Controlled criteria close only on an executed discriminating control pair.
    pub fn is_controlled(&self) -> bool {
        matches!(
            self.control_kind.as_deref(),
            Some("regression" | "discrimination")
        )
    }
}

#[derive(Debug, Clone)]
pub struct Invariant {
    pub id: String,
    pub statement: String,
}

#[derive(Debug, Clone)]
pub struct Limit {
    pub id: String,
    /// Kept as the stored number so ints print as ints and floats as Python would.
    pub limit: Number,
    pub unit: String,
    pub enforced: bool,
    pub reserve: Option<Number>,
}

#[derive(Debug, Clone)]
pub struct GateIntent {
    pub criterion: String,
    pub check: String,
}

#[derive(Debug, Clone)]
pub struct Task {
    pub id: String,
    pub title: String,
    pub prerequisites: Vec<String>,
    pub touched_surface: Vec<String>,
    pub gate_intent: Vec<GateIntent>,
    pub parallel_safe: Option<bool>,
}

/// A validated contract.
#[derive(Debug, Clone)]
pub struct Contract {
    /// The document as stored (with its stamped `contract_id`, if any).
    pub raw: Map<String, Value>,
    /// The stamped id, or the computed one when the contract is unstamped.
    pub id: String,
    pub generation: Generation,
    pub plan: String,
    pub revision: i64,
    pub criteria: Vec<Criterion>,
    pub invariants: Vec<Invariant>,
    pub limits: Vec<Limit>,
    pub tasks: Vec<Task>,
    /// The file it was read from.
    pub path: PathBuf,
}

impl Contract {
    pub fn task(&self, id: &str) -> Option<&Task> {
        self.tasks.iter().find(|t| t.id == id)
    }

    pub fn criterion(&self, id: &str) -> Option<&Criterion> {
        self.criteria.iter().find(|c| c.id == id)
    }

    pub fn limit(&self, id: &str) -> Option<&Limit> {
        self.limits.iter().find(|l| l.id == id)
    }

    /// `scheduling.handoff` when declared and non-empty (keys sorted, values as stored).
    pub fn handoff(&self) -> Option<&Map<String, Value>> {
        self.raw
            .get("scheduling")?
            .get("handoff")?
            .as_object()
            .filter(|m| !m.is_empty())
    }

    /// The first task whose `gate_intent` names the criterion owns it.
    pub fn owner_of(&self, criterion: &str) -> Option<&Task> {
        self.tasks
            .iter()
            .find(|t| t.gate_intent.iter().any(|g| g.criterion == criterion))
    }
}

/// `contract_id`: lowercase hex SHA-256 of the compact canonical JSON of the document without
/// its `contract_id` key (docs/dwp-spec.md, "Contract top level and contract_id", "Compact canonical JSON").
pub fn compute_id(doc: &Map<String, Value>) -> String {
    let mut body = doc.clone();
    body.remove("contract_id");
    crate::canonical::hash_hex(&Value::Object(body))
}

/// Reads and validates the contract at `path`.
pub fn read(path: &Path) -> Result<Contract> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("read the contract", path, e))?;
    parse(path, &bytes)
}

/// Parses and validates contract bytes; `path` only names the file in messages.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Contract> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| invalid(path, Problem::whole(format!("not valid JSON ({e})"))))?;
    validate(path, value)
}

fn invalid(path: &Path, problem: Problem) -> Error {
    problem.in_file("contract", path.display()).with_hint(
        "fix the contract file (or restore it from the plan's history); every dwp plan command \
         refuses an invalid contract",
    )
}

/// Validates a parsed contract document (closed objects, ids, references, the reserve rule,
/// v6 vs v7, the stamped id).
pub fn validate(path: &Path, value: Value) -> Result<Contract> {
    let contract = check_contract(&value).map_err(|e| invalid(path, e))?;
    let Value::Object(raw) = value else {
        unreachable!("check_contract accepted a non-object")
    };
    let computed = compute_id(&raw);
    let id = match raw.get("contract_id").and_then(Value::as_str) {
        Some(stamped) if stamped != computed => {
            return Err(invalid(
                path,
                Problem::whole(format!(
                    "contract_id {} does not match the canonical sha256 {computed} of the \
                     contract - a stamped id must be the hash of the document without it",
                    py_repr(stamped)
                )),
            ));
        }
        Some(stamped) => stamped.to_string(),
        None => computed,
    };
    Ok(Contract {
        raw,
        id,
        path: path.to_path_buf(),
        ..contract
    })
}

const TOP_REQUIRED: &[&str] = &[
    "schema",
    "spec_version",
    "plan",
    "revision",
    "created_at",
    "outcome",
    "acceptance",
    "invariants",
    "scope",
    "authorization",
    "permissions",
    "dependencies",
    "resource_envelope",
    "tasks",
];
const TOP_OPTIONAL: &[&str] = &["contract_id", "parent_contract_id", "title", "scheduling"];

fn check_contract(v: &Value) -> Check<Contract> {
    let top = check::object(v, "contract", TOP_REQUIRED, TOP_OPTIONAL)?;
    let generation =
        match check::one_of(&top["schema"], "contract.schema", &[SCHEMA_V6, SCHEMA_V7])? {
            SCHEMA_V6 => Generation::V6,
            _ => Generation::V7,
        };
    check::matching(
        &top["spec_version"],
        "contract.spec_version",
        check::spec_version(),
        "version (X.Y.Z)",
    )?;
    let plan = check::matching(&top["plan"], "contract.plan", check::plan_id(), "plan id")?;
    let revision = check::int(&top["revision"], "contract.revision", 1)?;
    check::rfc3339(&top["created_at"], "contract.created_at")?;
    if let Some(id) = top.get("contract_id") {
        check::matching(
            id,
            "contract.contract_id",
            check::sha256_hex(),
            "sha256 hex id",
        )?;
    }
    match top.get("parent_contract_id") {
        Some(parent) if revision > 1 => {
            check::matching(
                parent,
                "contract.parent_contract_id",
                check::sha256_hex(),
                "sha256 hex id",
            )?;
        }
        Some(_) => {
            return Err(Problem::new(
                "contract.parent_contract_id",
                "revision 1 must not name a parent contract",
            ));
        }
        None if revision > 1 => {
            return Err(problem!(
                "contract",
                "revision {revision} requires parent_contract_id (the id of the \
                 revision it replaces)"
            ));
        }
        None => {}
    }
    if let Some(title) = top.get("title") {
        check::string(title, "contract.title")?;
    }

    let outcome = check::object(
        &top["outcome"],
        "contract.outcome",
        &["statement", "success_definition", "out_of_scope"],
        &[],
    )?;
    check::text(&outcome["statement"], "contract.outcome.statement")?;
    check::text(
        &outcome["success_definition"],
        "contract.outcome.success_definition",
    )?;
    check::strings(
        &outcome["out_of_scope"],
        "contract.outcome.out_of_scope",
        0,
        false,
        true,
    )?;

    let criteria = check_criteria(&top["acceptance"])?;
    let invariants = check_invariants(&top["invariants"])?;
    check_scope(&top["scope"])?;
    check_authorization(&top["authorization"])?;
    check_permissions(&top["permissions"])?;
    check_dependencies(&top["dependencies"])?;
    let limits = check_limits(&top["resource_envelope"])?;
    if let Some(s) = top.get("scheduling") {
        check_scheduling(s)?;
    }
    let tasks = check_tasks(&top["tasks"], generation, &criteria)?;

    Ok(Contract {
        raw: Map::new(),
        id: String::new(),
        generation,
        plan: plan.to_string(),
        revision,
        criteria,
        invariants,
        limits,
        tasks,
        path: PathBuf::new(),
    })
}

fn check_criteria(v: &Value) -> Check<Vec<Criterion>> {
    let acceptance = check::object(v, "contract.acceptance", &["criteria"], &[])?;
    let items = check::list(&acceptance["criteria"], "contract.acceptance.criteria", 1)?;
    let mut out: Vec<Criterion> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("contract.acceptance.criteria[{i}]");
        let c = check::object(
            item,
            &at,
            &["id", "statement", "observable_check", "accepted_evidence"],
            &["control"],
        )?;
        let id = check::matching(
            &c["id"],
            &format!("{at}.id"),
            check::criterion_id(),
            "criterion id",
        )?;
        if out.iter().any(|x| x.id == id) {
            return Err(problem!(
                format!("{at}.id"),
                "duplicate criterion id {}",
                py_repr(id)
            ));
        }
        check::text(&c["statement"], &format!("{at}.statement"))?;
        check::text(&c["observable_check"], &format!("{at}.observable_check"))?;
        let evidence = check::strings(
            &c["accepted_evidence"],
            &format!("{at}.accepted_evidence"),
            1,
            true,
            false,
        )?;
        for (j, e) in evidence.iter().enumerate() {
            check::one_of(
                &c["accepted_evidence"][j],
                &format!("{at}.accepted_evidence[{j}]"),
                &["observed", "imported", "asserted"],
            )
            .map(|_| e)?;
        }
        let control_kind = match c.get("control") {
            Some(control) => {
                let at = format!("{at}.control");
                let control = check::object(control, &at, &["kind", "rationale"], &[])?;
                let kind = check::one_of(
                    &control["kind"],
                    &format!("{at}.kind"),
                    &["regression", "discrimination", "exempt"],
                )?;
                check::text(&control["rationale"], &format!("{at}.rationale"))?;
                Some(kind.to_string())
            }
            None => None,
        };
        out.push(Criterion {
            id: id.to_string(),
            accepted_evidence: evidence.iter().map(|s| s.to_string()).collect(),
            control_kind,
        });
    }
    Ok(out)
}

fn check_invariants(v: &Value) -> Check<Vec<Invariant>> {
    let items = check::list(v, "contract.invariants", 0)?;
    let mut out: Vec<Invariant> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("contract.invariants[{i}]");
        let inv = check::object(item, &at, &["id", "statement"], &[])?;
        let id = check::matching(
            &inv["id"],
            &format!("{at}.id"),
            check::invariant_id(),
            "invariant id",
        )?;
        if out.iter().any(|x| x.id == id) {
            return Err(problem!(
                format!("{at}.id"),
                "duplicate invariant id {}",
                py_repr(id)
            ));
        }
        let statement = check::text(&inv["statement"], &format!("{at}.statement"))?;
        out.push(Invariant {
            id: id.to_string(),
            statement: statement.to_string(),
        });
    }
    Ok(out)
}

fn check_scope(v: &Value) -> Check<()> {
    let scope = check::object(
        v,
        "contract.scope",
        &[
            "allowed_paths",
            "allowed_command_classes",
            "forbidden_operations",
        ],
        &[],
    )?;
    check::strings(
        &scope["allowed_paths"],
        "contract.scope.allowed_paths",
        1,
        false,
        true,
    )?;
    check::strings(
        &scope["allowed_command_classes"],
        "contract.scope.allowed_command_classes",
        1,
        true,
        true,
    )?;
    check::strings(
        &scope["forbidden_operations"],
        "contract.scope.forbidden_operations",
        1,
        false,
        true,
    )?;
    Ok(())
}

fn check_authorization(v: &Value) -> Check<()> {
    let at = "contract.authorization";
    let auth = check::object(
        v,
        at,
        &[
            "mechanism",
            "authority",
            "timestamp",
            "boundaries",
            "consent_checkpoints",
        ],
        &[],
    )?;
    check::one_of(
        &auth["mechanism"],
        &format!("{at}.mechanism"),
        &["plan_authorship", "pre_authorization"],
    )?;
    check::text(&auth["authority"], &format!("{at}.authority"))?;
    check::rfc3339(&auth["timestamp"], &format!("{at}.timestamp"))?;
    // The published schema leaves the shape of `boundaries` to prose: accept a statement or a
    // list of statements.
    let boundaries = &auth["boundaries"];
    if boundaries.is_array() {
        check::strings(boundaries, &format!("{at}.boundaries"), 0, false, false)?;
    } else {
        check::string(boundaries, &format!("{at}.boundaries"))?;
    }
    check::strings(
        &auth["consent_checkpoints"],
        &format!("{at}.consent_checkpoints"),
        0,
        false,
        false,
    )?;
    Ok(())
}

fn check_permissions(v: &Value) -> Check<()> {
    let at = "contract.permissions";
    let perms = check::object(v, at, &["granted", "not_granted"], &[])?;
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for side in ["granted", "not_granted"] {
        let items = check::strings(&perms[side], &format!("{at}.{side}"), 0, true, false)?;
        for (i, item) in items.into_iter().enumerate() {
            if !GRANTS.contains(&item) {
                return Err(problem!(
                    format!("{at}.{side}[{i}]"),
                    "{} is not a grant (closed set: {})",
                    py_repr(item),
                    GRANTS.join(", ")
                ));
            }
            if let Some(other) = seen.insert(item, side)
                && other != side
            {
                return Err(problem!(
                    at,
                    "{} is both granted and not_granted (the two lists are disjoint)",
                    py_repr(item)
                ));
            }
        }
    }
    Ok(())
}

fn check_dependencies(v: &Value) -> Check<()> {
    let items = check::list(v, "contract.dependencies", 0)?;
    for (i, item) in items.iter().enumerate() {
        let at = format!("contract.dependencies[{i}]");
        let dep = check::object(item, &at, &["name", "kind", "detail"], &[])?;
        check::text(&dep["name"], &format!("{at}.name"))?;
        check::one_of(
            &dep["kind"],
            &format!("{at}.kind"),
            &["external_system", "credential", "pinned_input"],
        )?;
        check::string(&dep["detail"], &format!("{at}.detail"))?;
    }
    Ok(())
}

fn check_limits(v: &Value) -> Check<Vec<Limit>> {
    let envelope = check::object(v, "contract.resource_envelope", &["limits"], &[])?;
    let items = check::list(&envelope["limits"], "contract.resource_envelope.limits", 1)?;
    let mut out: Vec<Limit> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("contract.resource_envelope.limits[{i}]");
        let l = check::object(
            item,
            &at,
            &["id", "limit", "unit", "enforcement"],
            &["metering_source", "reserve"],
        )?;
        let id = check::matching(&l["id"], &format!("{at}.id"), check::limit_id(), "limit id")?;
        if out.iter().any(|x| x.id == id) {
            return Err(problem!(
                format!("{at}.id"),
                "duplicate limit id {}",
                py_repr(id)
            ));
        }
        let limit = check::number(&l["limit"], &format!("{at}.limit"), 0.0)?;
        check::text(&l["unit"], &format!("{at}.unit"))?;
        let enforcement = check::one_of(
            &l["enforcement"],
            &format!("{at}.enforcement"),
            &["enforced", "advisory"],
        )?;
        match (enforcement, l.get("metering_source")) {
            ("enforced", None) => {
                return Err(problem!(
                    at,
                    "an enforced limit must name its metering_source (a limit is enforced \
                     only against a real meter)"
                ));
            }
            ("advisory", Some(_)) => {
                return Err(problem!(
                    format!("{at}.metering_source"),
                    "only enforced limits name a metering_source"
                ));
            }
            (_, Some(source)) => {
                check::text(source, &format!("{at}.metering_source"))?;
            }
            _ => {}
        }
        let reserve = match l.get("reserve") {
            Some(r) => {
                let value = check::number(r, &format!("{at}.reserve"), 0.0)?;
                if value > limit {
                    return Err(problem!(
                        format!("{at}.reserve (id {})", py_repr(id)),
                        "reserve {} exceeds the limit {} - a reserve larger than its limit can \
                         never dispatch and is refused at declaration (section 8)",
                        check::number_str(r),
                        check::number_str(&l["limit"])
                    ));
                }
                r.as_number().cloned()
            }
            None => None,
        };
        out.push(Limit {
            id: id.to_string(),
            limit: l["limit"].as_number().cloned().unwrap_or_else(|| 0.into()),
            unit: l["unit"].as_str().unwrap_or_default().to_string(),
            enforced: enforcement == "enforced",
            reserve,
        });
    }
    Ok(out)
}

fn check_scheduling(v: &Value) -> Check<()> {
    let at = "contract.scheduling";
    let s = check::object(
        v,
        at,
        &[],
        &[
            "starvation_threshold_events",
            "max_adaptations_per_task",
            "max_retries_per_gate",
            "handoff",
        ],
    )?;
    if let Some(n) = s.get("starvation_threshold_events") {
        check::int(n, &format!("{at}.starvation_threshold_events"), 1)?;
    }
    for key in ["max_adaptations_per_task", "max_retries_per_gate"] {
        if let Some(n) = s.get(key) {
            check::int(n, &format!("{at}.{key}"), 0)?;
        }
    }
    if let Some(h) = s.get("handoff") {
        let handoff = check::object(
            h,
            &format!("{at}.handoff"),
            &[],
            &["fresh_context", "cross_host_resume"],
        )?;
        for (k, v) in handoff {
            check::string(v, &format!("{at}.handoff.{k}"))?;
        }
    }
    Ok(())
}

fn check_tasks(v: &Value, generation: Generation, criteria: &[Criterion]) -> Check<Vec<Task>> {
    let items = check::list(v, "contract.tasks", 1)?;
    let optional: &[&str] = match generation {
        Generation::V6 => &[],
        Generation::V7 => &["parallel_safe"],
    };
    let mut out: Vec<Task> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("contract.tasks[{i}]");
        if generation == Generation::V6
            && item
                .as_object()
                .is_some_and(|m| m.contains_key("parallel_safe"))
        {
            return Err(problem!(
                at,
                "unknown field 'parallel_safe' (a v7 field; this contract is v6)"
            ));
        }
        let t = check::object(
            item,
            &at,
            &[
                "id",
                "title",
                "prerequisites",
                "touched_surface",
                "gate_intent",
            ],
            optional,
        )?;
        let id = check::matching(&t["id"], &format!("{at}.id"), check::task_id(), "task id")?;
        if out.iter().any(|x| x.id == id) {
            return Err(problem!(
                format!("{at}.id"),
                "duplicate task id {}",
                py_repr(id)
            ));
        }
        let title = check::text(&t["title"], &format!("{at}.title"))?;
        let prerequisites = check::strings(
            &t["prerequisites"],
            &format!("{at}.prerequisites"),
            0,
            true,
            false,
        )?;
        let surface = check::strings(
            &t["touched_surface"],
            &format!("{at}.touched_surface"),
            1,
            false,
            true,
        )?;
        let intents = check::list(&t["gate_intent"], &format!("{at}.gate_intent"), 0)?;
        let mut gate_intent = Vec::new();
        for (j, g) in intents.iter().enumerate() {
            let at = format!("{at}.gate_intent[{j}]");
            let g = check::object(g, &at, &["criterion", "check"], &[])?;
            let criterion = check::string(&g["criterion"], &format!("{at}.criterion"))?;
            if !criteria.iter().any(|c| c.id == criterion) {
                return Err(problem!(
                    format!("{at}.criterion"),
                    "{} is not declared in acceptance.criteria",
                    py_repr(criterion)
                ));
            }
            let check_text = check::text(&g["check"], &format!("{at}.check"))?;
            gate_intent.push(GateIntent {
                criterion: criterion.to_string(),
                check: check_text.to_string(),
            });
        }
        let parallel_safe = match t.get("parallel_safe") {
            Some(p) => Some(check::boolean(p, &format!("{at}.parallel_safe"))?),
            None => None,
        };
        out.push(Task {
            id: id.to_string(),
            title: title.to_string(),
            prerequisites: prerequisites.iter().map(|s| s.to_string()).collect(),
            touched_surface: surface.iter().map(|s| s.to_string()).collect(),
            gate_intent,
            parallel_safe,
        });
    }
    for (i, task) in out.iter().enumerate() {
        for p in &task.prerequisites {
            if !out.iter().any(|t| &t.id == p) {
                return Err(problem!(
                    format!("contract.tasks[{i}].prerequisites"),
                    "{} is not a declared task",
                    py_repr(p)
                ));
            }
        }
    }
    if let Some(cycle) = find_cycle(&out) {
        return Err(problem!(
            "contract.tasks",
            "prerequisites form a cycle through {} (they must be a DAG)",
            cycle.join(" -> ")
        ));
    }
    Ok(out)
}

/// A prerequisite cycle, as the task ids along it, if there is one.
fn find_cycle(tasks: &[Task]) -> Option<Vec<String>> {
    fn visit<'a>(
        id: &'a str,
        tasks: &'a [Task],
        done: &mut BTreeSet<&'a str>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        if done.contains(id) {
            return None;
        }
        if let Some(pos) = stack.iter().position(|s| *s == id) {
            let mut cycle: Vec<String> = stack[pos..].iter().map(|s| s.to_string()).collect();
            cycle.push(id.to_string());
            return Some(cycle);
        }
        stack.push(id);
        let task = tasks.iter().find(|t| t.id == id)?;
        for p in &task.prerequisites {
            if let Some(c) = visit(p, tasks, done, stack) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(id);
        None
    }
    let mut done = BTreeSet::new();
    for t in tasks {
        let mut stack = Vec::new();
        if let Some(c) = visit(&t.id, tasks, &mut done, &mut stack) {
            return Some(c);
        }
    }
    None
}

#[cfg(test)]
mod tests;
