//! The plan journal (journal-event v6/v7, dwp-details.md §1.4): reading and strict validation.
//!
//! Events are read from the rolled archives `journal-archive-NNNNNN-NNNNNN.ndjson` in seq order,
//! then the live `journal.ndjson`. Only the live file may end in a torn line (a crash mid-append);
//! it is ignored. Damage anywhere else is corruption. Every event is validated against its type's
//! closed payload before any derivation sees it, so a derivation never guesses.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::check::{self, Check, py_repr};
use super::contract::{Contract, Generation};
use crate::error::{Error, Result};

pub const LIVE_FILE: &str = "journal.ndjson";

/// The closed set of event types (v6: 14; v7 adds `delegation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    TaskStart,
    Approval,
    GateRun,
    Observation,
    Adaptation,
    Amendment,
    Intervention,
    ResourceSample,
    ControlPair,
    Selection,
    Refusal,
    ViewRender,
    Reconciliation,
    JournalRepair,
    Delegation,
}

impl EventType {
    pub fn parse(s: &str) -> Option<EventType> {
        Some(match s {
            "task_start" => EventType::TaskStart,
            "approval" => EventType::Approval,
            "gate_run" => EventType::GateRun,
            "observation" => EventType::Observation,
            "adaptation" => EventType::Adaptation,
            "amendment" => EventType::Amendment,
            "intervention" => EventType::Intervention,
            "resource_sample" => EventType::ResourceSample,
            "control_pair" => EventType::ControlPair,
            "selection" => EventType::Selection,
            "refusal" => EventType::Refusal,
            "view_render" => EventType::ViewRender,
            "reconciliation" => EventType::Reconciliation,
            "journal_repair" => EventType::JournalRepair,
            "delegation" => EventType::Delegation,
            _ => return None,
        })
    }

    /// Evidence types carry `trust`.
    pub fn is_evidence(self) -> bool {
        matches!(
            self,
            EventType::GateRun
                | EventType::Observation
                | EventType::ResourceSample
                | EventType::ControlPair
        )
    }
}

/// One validated journal event. `raw` is the line's object exactly as stored.
#[derive(Debug, Clone)]
pub struct Event {
    pub seq: u64,
    pub kind: EventType,
    pub raw: Map<String, Value>,
}

impl Event {
    pub fn str(&self, key: &str) -> Option<&str> {
        self.raw.get(key).and_then(Value::as_str)
    }

    pub fn ts(&self) -> &str {
        self.str("ts").unwrap_or_default()
    }

    pub fn contract_id(&self) -> &str {
        self.str("contract_id").unwrap_or_default()
    }

    pub fn trust(&self) -> Option<&str> {
        self.str("trust")
    }

    pub fn actor_kind(&self) -> &str {
        self.raw
            .get("actor")
            .and_then(|a| a.get("kind"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    pub fn actor_identity(&self) -> &str {
        self.raw
            .get("actor")
            .and_then(|a| a.get("identity"))
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// A list-of-strings payload field (empty when absent).
    pub fn list(&self, key: &str) -> Vec<&str> {
        self.raw
            .get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }
}

/// A rolled archive segment and the seq range its name declares.
#[derive(Debug, Clone)]
pub struct Archive {
    pub path: PathBuf,
    pub first_seq: u64,
    pub last_seq: u64,
}

/// Every event of a plan, archives first, in seq order.
#[derive(Debug, Clone, Default)]
pub struct Journal {
    pub events: Vec<Event>,
    pub archives: Vec<Archive>,
    /// Byte offset of an ignored torn last line of the live file.
    pub torn_tail: Option<crate::fsx::TornTail>,
}

impl Journal {
    /// The seq the next appended event gets: one above every seq seen, archived or live, and
    /// above every archive's declared last seq (gaps are legal after a roll).
    pub fn next_seq(&self) -> u64 {
        let events = self.events.last().map_or(0, |e| e.seq);
        let archived = self.archives.iter().map(|a| a.last_seq).max().unwrap_or(0);
        events.max(archived) + 1
    }

    pub fn last_seq(&self) -> u64 {
        self.events.iter().map(|e| e.seq).max().unwrap_or(0)
    }
}

/// Lists the archive segments of a plan folder, sorted by their first seq.
pub fn archives(dir: &Path) -> Result<Vec<Archive>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return Err(Error::io("list", dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("list", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(range) = name
            .strip_prefix("journal-archive-")
            .and_then(|r| r.strip_suffix(".ndjson"))
        else {
            continue;
        };
        let parsed = range.split_once('-').and_then(|(a, b)| {
            let digits = |s: &str| s.len() >= 6 && s.bytes().all(|c| c.is_ascii_digit());
            if digits(a) && digits(b) {
                Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?))
            } else {
                None
            }
        });
        match parsed {
            Some((first, last)) if first <= last => out.push(Archive {
                path: entry.path(),
                first_seq: first,
                last_seq: last,
            }),
            _ => {
                return Err(Error::invalid(format!(
                    "journal archive {} has a malformed name (expected \
                     journal-archive-NNNNNN-NNNNNN.ndjson with first <= last seq)",
                    entry.path().display()
                )));
            }
        }
    }
    out.sort_by_key(|a| (a.first_seq, a.last_seq));
    Ok(out)
}

/// Reads and validates the whole journal of a plan against its live contract.
pub fn read(dir: &Path, contract: &Contract) -> Result<Journal> {
    let archives = archives(dir)?;
    let mut validator = Validator::new(contract);
    let mut events = Vec::new();
    for archive in &archives {
        let file = crate::fsx::read_jsonl_values(&archive.path)?;
        if let Some(tail) = file.torn_tail {
            return Err(Error::corrupt(format!(
                "{}:{}: damaged record in a rolled archive (archives are complete by \
                 construction; only the live journal may end in a torn line)",
                archive.path.display(),
                tail.line
            )));
        }
        events.reserve(file.records.len());
        for (i, value) in file.records.into_iter().enumerate() {
            let event = validator
                .event(value)
                .map_err(|e| invalid_event(&archive.path, i + 1, e))?;
            if event.seq < archive.first_seq || event.seq > archive.last_seq {
                return Err(invalid_event(
                    &archive.path,
                    i + 1,
                    format!(
                        "seq {} lies outside the archive's declared range {}-{}",
                        event.seq, archive.first_seq, archive.last_seq
                    ),
                ));
            }
            events.push(event);
        }
    }
    let live = dir.join(LIVE_FILE);
    let file = crate::fsx::read_jsonl_values(&live)?;
    let floor = archives.iter().map(|a| a.last_seq).max().unwrap_or(0);
    events.reserve(file.records.len());
    for (i, value) in file.records.into_iter().enumerate() {
        let event = validator
            .event(value)
            .map_err(|e| invalid_event(&live, i + 1, e))?;
        if event.seq <= floor {
            return Err(invalid_event(
                &live,
                i + 1,
                format!(
                    "seq {} is not above the archived seqs (up to {floor})",
                    event.seq
                ),
            ));
        }
        events.push(event);
    }
    Ok(Journal {
        events,
        archives,
        torn_tail: file.torn_tail,
    })
}

fn invalid_event(path: &Path, line: usize, problem: String) -> Error {
    Error::invalid(format!(
        "journal invalid: {}:{line}: {problem}",
        path.display()
    ))
    .with_hint(
        "journal lines are never edited; restore the file from a backup or bundle, or repair it \
         with the DWP ledger",
    )
}

/// Validates events in journal order against the live contract (seq strictly increasing, one
/// schema generation, the type's closed payload, trust rules, references of events citing the
/// live contract).
pub struct Validator<'c> {
    contract: &'c Contract,
    last_seq: u64,
}

const ENVELOPE_REQUIRED: [&str; 7] = [
    "schema",
    "type",
    "seq",
    "ts",
    "plan",
    "contract_id",
    "actor",
];

impl<'c> Validator<'c> {
    pub fn new(contract: &'c Contract) -> Validator<'c> {
        Validator {
            contract,
            last_seq: 0,
        }
    }

    /// Continues validation after an already validated journal ending at `seq`.
    pub fn resume_after(&mut self, seq: u64) {
        self.last_seq = seq;
    }

    /// Validates one event (the next in journal order).
    pub fn event(&mut self, value: Value) -> Check<Event> {
        let Value::Object(map) = value else {
            return Err(format!(
                "expected a JSON object, found {}",
                check::kind_of(&value)
            ));
        };
        let event = self.check(map)?;
        if event.seq <= self.last_seq {
            return Err(format!(
                "seq {} does not increase (previous seq {}); seqs are strictly increasing and \
                 never reused",
                event.seq, self.last_seq
            ));
        }
        self.last_seq = event.seq;
        Ok(event)
    }

    fn check(&self, map: Map<String, Value>) -> Check<Event> {
        let v = &map;
        // One pass over the entries fills the envelope slots and `note` (cheaper than a hashed
        // lookup per field: this runs for every event of every read). Errors keep their order.
        let mut slots: [Option<&Value>; 7] = [None; 7];
        let mut note_v = None;
        for (key, value) in v {
            match envelope_slot(key) {
                Some(i) => slots[i] = Some(value),
                None if key == "note" => note_v = Some(value),
                None => {}
            }
        }
        let mut envelope: [&Value; 7] = [&Value::Null; 7];
        for ((slot, found), key) in envelope.iter_mut().zip(slots).zip(ENVELOPE_REQUIRED) {
            *slot = found.ok_or_else(|| format!("missing envelope field {}", py_repr(key)))?;
        }
        let [schema_v, type_v, seq_v, ts_v, plan_v, cid_v, actor_v] = envelope;
        let type_name = check::string(type_v, "type")?;
        let kind = EventType::parse(type_name)
            .ok_or_else(|| format!("type: unknown event type {}", py_repr(type_name)))?;
        let generation = self.contract.generation;
        let schema = check::string(schema_v, "schema")?;
        if schema != generation.journal_schema() {
            let other = [Generation::V6, Generation::V7]
                .into_iter()
                .find(|g| g.journal_schema() == schema);
            return Err(match other {
                Some(g) => format!(
                    "schema: a journal-event/{} event in a {} plan (mixing generations is \
                     refused)",
                    g.name(),
                    generation.name()
                ),
                None => format!(
                    "schema: {} is not {}",
                    py_repr(schema),
                    generation.journal_schema()
                ),
            });
        }
        if kind == EventType::Delegation && generation == Generation::V6 {
            return Err("type: 'delegation' events exist only in journal-event v7".into());
        }
        let seq = check::int(seq_v, "seq", 1)? as u64;
        let ts = check::string(ts_v, "ts")?;
        if !is_event_ts(ts) {
            return Err(format!(
                "ts: {} is not a valid timestamp (YYYY-MM-DDTHH:MM:SSZ)",
                py_repr(ts)
            ));
        }
        let plan = check::string(plan_v, "plan")?;
        if plan != self.contract.plan {
            return Err(format!(
                "plan: {} is not this plan ({})",
                py_repr(plan),
                self.contract.plan
            ));
        }
        let cid = check::string(cid_v, "contract_id")?;
        if cid != self.contract.id && !is_sha256_hex(cid) {
            return Err(format!(
                "contract_id: {} is not a valid contract id",
                py_repr(cid)
            ));
        }
        let live = cid == self.contract.id;
        let actor = check::object(actor_v, "actor", &["kind", "identity"], &[])?;
        let actor_kind = check::one_of(
            &actor["kind"],
            "actor.kind",
            &["helper", "agent", "host_adapter", "human"],
        )?;
        let identity = check::text(&actor["identity"], "actor.identity")?;
        if identity.chars().count() > 100 {
            return Err("actor.identity: longer than 100 characters".into());
        }
        if let Some(note) = note_v {
            let note = check::string(note, "note")?;
            if note.chars().count() > 500 {
                return Err("note: longer than 500 characters".into());
            }
        }

        let (required, optional) = payload_fields(kind);
        let allowed = |k: &str| {
            ENVELOPE_REQUIRED.contains(&k)
                || k == "note"
                || required.contains(&k)
                || optional.contains(&k)
                || (kind.is_evidence() && (k == "trust" || k == "evidence_path"))
        };
        if let Some(key) = v.keys().find(|k| !allowed(k)) {
            return Err(format!(
                "unknown field {} for a {type_name} event (payloads are closed)",
                py_repr(key)
            ));
        }
        // Keys are unique, so counting the required ones present proves them all present
        // without a hashed lookup each; only a miss pays for finding which one (in order).
        let present = v.keys().filter(|k| required.contains(&k.as_str())).count();
        if present != required.len()
            && let Some(key) = required.iter().find(|k| !v.contains_key(**k))
        {
            return Err(format!(
                "{type_name}: missing required field {}",
                py_repr(key)
            ));
        }
        if kind.is_evidence() {
            let trust = check::one_of(
                v.get("trust")
                    .ok_or_else(|| format!("{type_name}: missing required field 'trust'"))?,
                "trust",
                &["observed", "imported", "asserted"],
            )?;
            match v.get("evidence_path") {
                Some(p) => {
                    check::text(p, "evidence_path")?;
                }
                None if trust != "asserted" => {
                    return Err(format!(
                        "evidence_path: {trust} evidence must cite its artifact"
                    ));
                }
                None => {}
            }
            if trust == "observed" && !matches!(actor_kind, "helper" | "host_adapter") {
                return Err(format!(
                    "trust: 'observed' evidence comes only from a helper or host_adapter actor, \
                     not {}",
                    py_repr(actor_kind)
                ));
            }
            if kind == EventType::ResourceSample
                && trust == "observed"
                && actor_kind != "host_adapter"
            {
                return Err(
                    "trust: an observed resource_sample comes only from a host_adapter actor"
                        .into(),
                );
            }
        }
        self.payload(kind, v, live)?;
        Ok(Event {
            seq,
            kind,
            raw: map,
        })
    }

    fn task_ref(&self, v: &Value, at: &str, live: bool) -> Check<()> {
        let task = check::text(v, at)?;
        if live && self.contract.task(task).is_none() {
            return Err(format!(
                "{at}: task {} is not declared in the live contract",
                py_repr(task)
            ));
        }
        Ok(())
    }

    fn criterion_ref(&self, v: &Value, at: &str, live: bool) -> Check<()> {
        let criterion = check::text(v, at)?;
        if live && self.contract.criterion(criterion).is_none() {
            return Err(format!(
                "{at}: criterion {} is not declared in the live contract",
                py_repr(criterion)
            ));
        }
        Ok(())
    }

    fn payload(&self, kind: EventType, v: &Map<String, Value>, live: bool) -> Check<()> {
        let opt = |k: &str| v.get(k);
        match kind {
            EventType::TaskStart => {
                self.task_ref(&v["task"], "task", live)?;
                if let Some(f) = opt("fingerprint") {
                    fingerprint(f, "fingerprint")?;
                }
            }
            EventType::Approval => {
                check::text(&v["authority"], "authority")?;
                check::one_of(
                    &v["mechanism"],
                    "mechanism",
                    &["plan_authorship", "pre_authorization"],
                )?;
                check::string(&v["plan_digest"], "plan_digest")?;
            }
            EventType::GateRun => {
                check::text(&v["command"], "command")?;
                check::string(&v["cwd"], "cwd")?;
                if let Some(env) = opt("env") {
                    let env = env
                        .as_object()
                        .ok_or("env: expected an object of strings")?;
                    for (k, val) in env {
                        check::string(val, &format!("env.{k}"))?;
                    }
                }
                let t = check::number(&v["timeout_seconds"], "timeout_seconds", 0.0)?;
                if t <= 0.0 {
                    return Err("timeout_seconds: must be above 0".into());
                }
                check::int(&v["exit_code"], "exit_code", i64::MIN)?;
                self.task_ref(&v["task"], "task", live)?;
                self.criterion_ref(&v["criterion"], "criterion", live)?;
            }
            EventType::Observation => {
                check::text(&v["statement"], "statement")?;
            }
            EventType::Adaptation => {
                check::one_of(
                    &v["kind"],
                    "kind",
                    &["split", "reorder", "insert", "change_strategy", "retry"],
                )?;
                if !v["trigger_observation"].is_null() {
                    check::int(&v["trigger_observation"], "trigger_observation", 1)?;
                }
                check::opt_string(&v["evidence_artifact"], "evidence_artifact")?;
                for key in ["hypothesis", "action", "rationale", "authority"] {
                    check::string(&v[key], key)?;
                }
                for key in [
                    "affected_tasks",
                    "affected_criteria",
                    "evidence_invalidated",
                    "evidence_preserved",
                ] {
                    check::strings(&v[key], key, 0, false, false)?;
                }
                if let Some(impact) = opt("resource_impact") {
                    let impact =
                        check::object(impact, "resource_impact", &["declared", "unit"], &[])?;
                    check::number(&impact["declared"], "resource_impact.declared", 0.0)?;
                    check::text(&impact["unit"], "resource_impact.unit")?;
                }
                let decision =
                    check::one_of(&v["decision"], "decision", &["authorized", "refused"])?;
                match opt("reason") {
                    Some(r) => {
                        check::string(r, "reason")?;
                    }
                    None if decision == "refused" => {
                        return Err("reason: a refused adaptation must say why".into());
                    }
                    None => {}
                }
            }
            EventType::Amendment => {
                for key in [
                    "original_criterion",
                    "observed_finding",
                    "disposition",
                    "reason",
                    "authority",
                ] {
                    check::string(&v[key], key)?;
                }
                check::opt_string(&v["revised_criterion"], "revised_criterion")?;
                for key in [
                    "affected_tasks",
                    "evidence_invalidated",
                    "evidence_preserved",
                ] {
                    check::strings(&v[key], key, 0, false, false)?;
                }
            }
            EventType::Intervention => {
                check::one_of(
                    &v["category"],
                    "category",
                    &[
                        "missing_intent",
                        "new_authority",
                        "environment_repair",
                        "engineering_rescue",
                    ],
                )?;
                check::string(&v["description"], "description")?;
                check::string(&v["question"], "question")?;
                if let Some(r) = opt("resolution") {
                    check::opt_string(r, "resolution")?;
                }
            }
            EventType::ResourceSample => {
                check::text(&v["source"], "source")?;
                if let Some(l) = opt("limit_id") {
                    check::matching(l, "limit_id", check::limit_id(), "limit id")?;
                }
                check::number(&v["value"], "value", 0.0)?;
                check::text(&v["unit"], "unit")?;
            }
            EventType::ControlPair => {
                self.criterion_ref(&v["criterion"], "criterion", live)?;
                check::strings(&v["check_artifacts"], "check_artifacts", 1, false, true)?;
                fingerprint(&v["starting_fingerprint"], "starting_fingerprint")?;
                let old = check::object(
                    &v["old_leg"],
                    "old_leg",
                    &["available"],
                    &["outcome", "log"],
                )?;
                check::boolean(&old["available"], "old_leg.available")?;
                for key in ["outcome", "log"] {
                    if let Some(x) = old.get(key) {
                        check::opt_string(x, &format!("old_leg.{key}"))?;
                    }
                }
                let new = check::object(&v["new_leg"], "new_leg", &["outcome", "log"], &[])?;
                check::string(&new["outcome"], "new_leg.outcome")?;
                check::opt_string(&new["log"], "new_leg.log")?;
                check::one_of(
                    &v["verdict"],
                    "verdict",
                    &[
                        "discriminating",
                        "non_discriminating",
                        "control_unavailable",
                    ],
                )?;
            }
            EventType::Selection => {
                self.task_ref(&v["task"], "task", live)?;
                let boosted = check::boolean(&v["priority_boost"], "priority_boost")?;
                match opt("aging") {
                    Some(a) if !a.is_null() => {
                        let a =
                            check::object(a, "aging", &["waiting_since_seq", "threshold"], &[])?;
                        check::int(&a["waiting_since_seq"], "aging.waiting_since_seq", 0)?;
                        check::int(&a["threshold"], "aging.threshold", 1)?;
                    }
                    _ if boosted => {
                        return Err("aging: a boosted selection must record its aging".into());
                    }
                    _ => {}
                }
            }
            EventType::Refusal => {
                check::text(&v["subject"], "subject")?;
                check::one_of(
                    &v["stage"],
                    "stage",
                    &["task_start", "authorize", "dispatch", "gate"],
                )?;
                check::string(&v["reason"], "reason")?;
                if let Some(p) = opt("proposal") {
                    check::opt_string(p, "proposal")?;
                }
            }
            EventType::ViewRender => {
                check::text(&v["view"], "view")?;
                check::string(&v["snapshot_digest"], "snapshot_digest")?;
                if let Some(d) = opt("digests")
                    && !d.is_object()
                    && !d.is_null()
                {
                    return Err("digests: expected an object".into());
                }
            }
            EventType::Reconciliation => {
                for key in ["trigger", "editor", "authority"] {
                    check::string(&v[key], key)?;
                }
            }
            EventType::JournalRepair => {
                check::int(&v["byte_offset"], "byte_offset", 0)?;
                check::string(&v["cause"], "cause")?;
            }
            EventType::Delegation => self.delegation(v, live)?,
        }
        Ok(())
    }

    fn delegation(&self, v: &Map<String, Value>, live: bool) -> Check<()> {
        self.task_ref(&v["task"], "task", live)?;
        check::matching(
            &v["delegation_id"],
            "delegation_id",
            check::delegation_id(),
            "delegation id",
        )?;
        check::one_of(&v["transport"], "transport", &["headless", "interactive"])?;
        check::text(&v["via"], "via")?;
        let state = check::one_of(
            &v["state"],
            "state",
            &["launched", "completed", "failed", "cancelled"],
        )?;
        for key in ["kind", "profile"] {
            if let Some(x) = v.get(key) {
                check::opt_string(x, key)?;
            }
        }
        if let Some(t) = v.get("target")
            && let Some(t) = check::opt_string(t, "target")?
            && t.chars().count() > 200
        {
            return Err("target: longer than 200 characters".into());
        }
        if let Some(w) = v.get("worktree") {
            check::opt_string(w, "worktree")?;
        }
        match v.get("prompt_digest") {
            Some(d) => {
                check::matching(
                    d,
                    "prompt_digest",
                    check::prefixed_sha256(),
                    "digest (sha256:<64 hex>)",
                )?;
            }
            None if state == "launched" => {
                return Err("prompt_digest: required when a delegation is launched".into());
            }
            None => {}
        }
        for key in ["result_path", "result_digest"] {
            if let Some(x) = v.get(key) {
                if !matches!(state, "completed" | "failed") {
                    return Err(format!(
                        "{key}: only a completed or failed delegation has one"
                    ));
                }
                check::opt_string(x, key)?;
            }
        }
        Ok(())
    }
}

/// The index of `key` in [`ENVELOPE_REQUIRED`], if it is an envelope field.
fn envelope_slot(key: &str) -> Option<usize> {
    Some(match key {
        "schema" => 0,
        "type" => 1,
        "seq" => 2,
        "ts" => 3,
        "plan" => 4,
        "contract_id" => 5,
        "actor" => 6,
        _ => return None,
    })
}

/// `YYYY-MM-DDTHH:MM:SSZ` (byte checks: this runs once per event; Python's `$` tolerance for
/// one trailing newline kept, as in [`check::py_match`]).
fn is_event_ts(s: &str) -> bool {
    let b = s.strip_suffix('\n').unwrap_or(s).as_bytes();
    b.len() == 20
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

fn is_sha256_hex(s: &str) -> bool {
    let b = s.strip_suffix('\n').unwrap_or(s).as_bytes();
    b.len() == 64 && b.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

fn fingerprint(v: &Value, at: &str) -> Check<()> {
    let f = check::object(v, at, &["revision", "dirty"], &[])?;
    check::string(&f["revision"], &format!("{at}.revision"))?;
    check::string(&f["dirty"], &format!("{at}.dirty"))?;
    Ok(())
}

/// Required and optional payload fields per type (besides the envelope and, for evidence types,
/// `trust`/`evidence_path`).
fn payload_fields(kind: EventType) -> (&'static [&'static str], &'static [&'static str]) {
    match kind {
        EventType::TaskStart => (&["task"], &["fingerprint"]),
        EventType::Approval => (&["authority", "mechanism", "plan_digest"], &[]),
        EventType::GateRun => (
            &[
                "command",
                "cwd",
                "timeout_seconds",
                "exit_code",
                "task",
                "criterion",
            ],
            &["env"],
        ),
        EventType::Observation => (&["statement"], &[]),
        EventType::Adaptation => (
            &[
                "kind",
                "trigger_observation",
                "evidence_artifact",
                "hypothesis",
                "action",
                "rationale",
                "authority",
                "affected_tasks",
                "affected_criteria",
                "evidence_invalidated",
                "evidence_preserved",
                "decision",
            ],
            &["resource_impact", "reason"],
        ),
        EventType::Amendment => (
            &[
                "original_criterion",
                "observed_finding",
                "disposition",
                "revised_criterion",
                "reason",
                "authority",
                "affected_tasks",
                "evidence_invalidated",
                "evidence_preserved",
            ],
            &[],
        ),
        EventType::Intervention => (&["category", "description", "question"], &["resolution"]),
        EventType::ResourceSample => (&["source", "value", "unit"], &["limit_id"]),
        EventType::ControlPair => (
            &[
                "criterion",
                "check_artifacts",
                "starting_fingerprint",
                "old_leg",
                "new_leg",
                "verdict",
            ],
            &[],
        ),
        EventType::Selection => (&["task", "priority_boost"], &["aging"]),
        EventType::Refusal => (&["subject", "stage", "reason"], &["proposal"]),
        EventType::ViewRender => (&["view", "snapshot_digest"], &["digests"]),
        EventType::Reconciliation => (&["trigger", "editor", "authority"], &[]),
        EventType::JournalRepair => (&["byte_offset", "cause"], &[]),
        EventType::Delegation => (
            &["task", "delegation_id", "transport", "via", "state"],
            &[
                "kind",
                "profile",
                "target",
                "worktree",
                "prompt_digest",
                "result_path",
                "result_digest",
            ],
        ),
    }
}

#[cfg(test)]
pub(crate) mod tests;
