//! The plan journal (journal-event v6/v7, docs/dwp-spec.md, "The journal"): reading and strict validation.
//!
//! Events are read from the rolled archives `journal-archive-NNNNNN-NNNNNN.ndjson` in seq order,
//! then the live `journal.ndjson`. Only the live file may end in a torn line (a crash mid-append):
//! a last line that does not parse, which is ignored. A last line that parses but lacks its
//! newline (another tool or a hand edit wrote it) is an event like any other; the writer adds
//! the newline before appending. Damage anywhere else is corruption. Every event is validated against its type's
//! closed payload before any derivation sees it, so a derivation never guesses.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::check::{self, Check, Problem, problem, py_repr};
use super::contract::{Contract, Generation};
use crate::error::{Error, Result};
use event::{ChunkBuilder, FieldRef, Key, View};

mod event;

pub use event::Event;
pub(super) use event::{Entries, value_parseable};

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
    /// The live file's length when its last line is a complete event without a trailing
    /// newline: the next append must add the newline first.
    pub unterminated: Option<u64>,
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
///
/// Each file is read once into one buffer; each line is indexed in place and validated (see
/// [`event`]). The refusals are the ones a parse of every line into a `Value` followed by
/// validation in order would give: a damaged line anywhere in a file outranks an invalid event
/// earlier in that file, and only the live file may end in a torn line.
pub fn read(dir: &Path, contract: &Contract) -> Result<Journal> {
    let archives = archives(dir)?;
    let mut validator = Validator::new(contract);
    let mut events = Vec::new();
    for archive in &archives {
        let range = |seq: u64| {
            (seq < archive.first_seq || seq > archive.last_seq).then(|| {
                Problem::whole(format!(
                    "seq {seq} lies outside the archive's declared range {}-{}",
                    archive.first_seq, archive.last_seq
                ))
            })
        };
        let file = read_file(&archive.path, &mut validator, &mut events, range)?;
        if let Some(tail) = file.torn_tail {
            return Err(Error::corrupt(format!(
                "{}:{}: damaged record in a rolled archive (archives are complete by \
                 construction; only the live journal may end in a torn line)",
                archive.path.display(),
                tail.line
            )));
        }
        if let Some(err) = file.invalid {
            return Err(err);
        }
    }
    let live = dir.join(LIVE_FILE);
    let floor = archives.iter().map(|a| a.last_seq).max().unwrap_or(0);
    let above = |seq: u64| {
        (seq <= floor).then(|| {
            Problem::whole(format!(
                "seq {seq} is not above the archived seqs (up to {floor})"
            ))
        })
    };
    let file = read_file(&live, &mut validator, &mut events, above)?;
    if let Some(err) = file.invalid {
        return Err(err);
    }
    Ok(Journal {
        events,
        archives,
        torn_tail: file.torn_tail,
        unterminated: file.unterminated,
    })
}

/// What reading one file found besides its events.
struct FileRead {
    torn_tail: Option<crate::fsx::TornTail>,
    /// The file's length when its last line was read as an event although it has no newline.
    unterminated: Option<u64>,
    /// The first invalid event, if any (no events after it were kept).
    invalid: Option<Error>,
}

/// Reads one JSONL file (a missing file reads as empty), validating its events in order into
/// `out`. `seq_rule` adds the file's own seq bound. Line rules are `fsx::read_jsonl`'s: every
/// line but the last must parse (else `Corrupt` naming file and line, with the parser's reason);
/// a last line that does not parse is a torn tail. A last line without a newline that parses is
/// judged as an event (a crash mid-append leaves a prefix of a compact object, which never
/// parses), and reported in `unterminated`.
fn read_file(
    path: &Path,
    validator: &mut Validator,
    out: &mut Vec<Event>,
    seq_rule: impl Fn(u64) -> Option<Problem>,
) -> Result<FileRead> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io("read", path, e)),
    };
    parse_file(path, bytes, validator, out, seq_rule)
}

/// The events appended to the live journal of `journal` since it was read, when the live file
/// is the same one and only grew: its bytes from `from` (the length it had, ending a complete
/// line) up to `to` (its length now) are read and validated after the events already held. `None` when that part is not
/// whole clean lines of valid events (a torn or unterminated tail, a line that does not
/// parse or validate): the caller then reads the journal again, whose read says exactly what
/// is wrong.
pub fn read_appended(
    dir: &Path,
    contract: &Contract,
    journal: &Journal,
    from: u64,
    to: u64,
) -> Result<Option<Vec<Event>>> {
    use std::io::{Read, Seek, SeekFrom};
    let live = dir.join(LIVE_FILE);
    let mut file = std::fs::File::open(&live).map_err(|e| Error::io("open", &live, e))?;
    if from > 0 {
        file.seek(SeekFrom::Start(from - 1))
            .map_err(|e| Error::io("seek", &live, e))?;
    }
    let mut bytes = Vec::new();
    // Exactly up to `to`: what another writer appends meanwhile is read next time.
    let want = to.saturating_sub(from) + u64::from(from > 0);
    file.take(want)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", &live, e))?;
    if bytes.len() as u64 != want {
        return Ok(None);
    }
    if from > 0 {
        // The byte before `from` must end a line, or `from` is not where a line starts.
        if bytes.first() != Some(&b'\n') {
            return Ok(None);
        }
        bytes.remove(0);
    }
    if bytes.is_empty() {
        return Ok(Some(Vec::new()));
    }
    let mut validator = Validator::new(contract);
    validator.resume_after(journal.last_seq());
    let floor = journal
        .archives
        .iter()
        .map(|a| a.last_seq)
        .max()
        .unwrap_or(0);
    let mut events = Vec::new();
    let read = parse_file(&live, bytes, &mut validator, &mut events, |seq| {
        (seq <= floor).then(|| Problem::whole(format!("seq {seq} is not above the archived seqs")))
    });
    Ok(match read {
        Ok(r) if r.invalid.is_none() && r.torn_tail.is_none() && r.unterminated.is_none() => {
            Some(events)
        }
        _ => None,
    })
}

/// [`read_file`] of bytes already read.
fn parse_file(
    path: &Path,
    bytes: Vec<u8>,
    validator: &mut Validator,
    out: &mut Vec<Event>,
    seq_rule: impl Fn(u64) -> Option<Problem>,
) -> Result<FileRead> {
    // The text is the longest prefix of whole valid-UTF-8 lines; a line past it cannot parse
    // (invalid UTF-8 is a parse error), so it is judged by the Value parser below.
    let (text, rest) = match String::from_utf8(bytes) {
        Ok(text) => (text, Vec::new()),
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            let cut = bytes[..valid]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let rest = bytes.split_off(cut);
            (String::from_utf8(bytes).unwrap_or_default(), rest)
        }
    };
    let total = text.len() + rest.len();
    let mut builder = ChunkBuilder::with_capacity(text.len());
    let mut invalid: Option<Error> = None;
    let mut offset = 0usize;
    let mut line_no = 0usize;
    while offset < total {
        line_no += 1;
        let (line, in_text): (&[u8], bool) = if offset < text.len() {
            (&text.as_bytes()[offset..], true)
        } else {
            (&rest[offset - text.len()..], false)
        };
        let (line, complete) = match line.iter().position(|&b| b == b'\n') {
            Some(i) => (&line[..i], true),
            None => (line, false),
        };
        let is_last = offset + line.len() + usize::from(complete) >= total;
        let start = offset;
        offset += line.len() + 1;
        let damaged = |reason: String| -> Result<Option<crate::fsx::TornTail>> {
            if is_last {
                return Ok(Some(crate::fsx::TornTail {
                    offset: start as u64,
                    line: line_no,
                    len: total - start,
                }));
            }
            Err(Error::corrupt(format!(
                "{}:{line_no}: damaged record ({reason})",
                path.display()
            ))
            .with_hint(
                "this is not a torn last line from a crash; restore the file from a backup or \
                 bundle",
            ))
        };
        // Fast path: an indexed line is one the Value parser accepts too.
        let indexed = if in_text {
            builder.index(&text, start, start + line.len())
        } else {
            None
        };
        if invalid.is_some() {
            // After a refused event only damage can still change the verdict.
            if indexed.is_none()
                && let Err(e) = serde_json::from_slice::<Value>(line)
            {
                let torn_tail = damaged(e.to_string())?;
                return Ok(finish(builder, text, out, torn_tail, invalid));
            }
            if let Some(at) = indexed {
                builder.drop_last(at);
            }
            continue;
        }
        let verdict = match indexed {
            Some(at) => {
                let view = builder.view(&text, &at);
                match validator.view(view) {
                    Ok((seq, kind)) => {
                        builder.keep(at, seq, kind);
                        Ok(seq)
                    }
                    Err(problem) => {
                        builder.drop_last(at);
                        Err(problem)
                    }
                }
            }
            None => match serde_json::from_slice::<Value>(line) {
                Err(e) => {
                    let torn_tail = damaged(e.to_string())?;
                    return Ok(finish(builder, text, out, torn_tail, invalid));
                }
                Ok(value) => validator.event(value).map(|event| {
                    let seq = event.seq;
                    builder.keep_own(event);
                    seq
                }),
            },
        };
        let problem = match verdict {
            Ok(seq) => match seq_rule(seq) {
                None => continue,
                Some(problem) => problem,
            },
            Err(problem) => problem,
        };
        invalid = Some(invalid_event(path, line_no, problem));
    }
    let last_byte = rest.last().or(text.as_bytes().last()).copied();
    let mut read = finish(builder, text, out, None, invalid);
    read.unterminated = last_byte
        .is_some_and(|b| b != b'\n')
        .then_some(total as u64);
    Ok(read)
}

fn finish(
    builder: ChunkBuilder,
    text: String,
    out: &mut Vec<Event>,
    torn_tail: Option<crate::fsx::TornTail>,
    invalid: Option<Error>,
) -> FileRead {
    if invalid.is_none() {
        builder.finish(text, out);
    }
    FileRead {
        torn_tail,
        unterminated: None,
        invalid,
    }
}

fn invalid_event(path: &Path, line: usize, problem: Problem) -> Error {
    problem
        .in_file("journal", format_args!("{}:{line}", path.display()))
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

const ENVELOPE_REQUIRED: [Key; 7] = [
    Key::Schema,
    Key::Type,
    Key::Seq,
    Key::Ts,
    Key::Plan,
    Key::ContractId,
    Key::Actor,
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

    /// Validates one event (the next in journal order) given as a parsed value.
    pub fn event(&mut self, value: Value) -> Check<Event> {
        let Value::Object(map) = value else {
            return Err(Problem::whole(format!(
                "expected a JSON object, found {}",
                check::kind_of(&value)
            )));
        };
        // Indexing a serialized Value cannot fail short of a line over 4 GiB.
        let event = Event::from_map(0, EventType::Observation, &map)
            .ok_or_else(|| Problem::whole("the event is too large to index (over 4 GiB)"))?;
        let (seq, kind) = self.view(event.view())?;
        Ok(event.stamped(seq, kind))
    }

    /// Validates one indexed line (the next in journal order).
    fn view(&mut self, v: View) -> Check<(u64, EventType)> {
        let (seq, kind) = self.check(v)?;
        if seq <= self.last_seq {
            return Err(Problem::whole(format!(
                "seq {} does not increase (previous seq {}); seqs are strictly increasing and \
                 never reused",
                seq, self.last_seq
            )));
        }
        self.last_seq = seq;
        Ok((seq, kind))
    }

    fn check(&self, v: View) -> Check<(u64, EventType)> {
        let mut envelope: [FieldRef; 7] = [FieldRef::Json("null"); 7];
        for (slot, key) in envelope.iter_mut().zip(ENVELOPE_REQUIRED) {
            *slot = v.get(key).ok_or_else(|| {
                Problem::whole(format!("missing envelope field {}", py_repr(key.name())))
            })?;
        }
        let [schema_v, type_v, seq_v, ts_v, plan_v, cid_v, actor_v] = envelope;
        let type_name = string(type_v, "type")?;
        let kind = EventType::parse(type_name)
            .ok_or_else(|| problem!("type", "unknown event type {}", py_repr(type_name)))?;
        let generation = self.contract.generation;
        let schema = string(schema_v, "schema")?;
        if schema != generation.journal_schema() {
            let other = [Generation::V6, Generation::V7]
                .into_iter()
                .find(|g| g.journal_schema() == schema);
            return Err(match other {
                Some(g) => problem!(
                    "schema",
                    "a journal-event/{} event in a {} plan (mixing generations is \
                     refused)",
                    g.name(),
                    generation.name()
                ),
                None => problem!(
                    "schema",
                    "{} is not {}",
                    py_repr(schema),
                    generation.journal_schema()
                ),
            });
        }
        if kind == EventType::Delegation && generation == Generation::V6 {
            return Err(Problem::new(
                "type",
                "'delegation' events exist only in journal-event v7",
            ));
        }
        let seq = int(seq_v, "seq", 1)? as u64;
        let ts = string(ts_v, "ts")?;
        if !is_event_ts(ts) {
            return Err(problem!(
                "ts",
                "{} is not a valid timestamp (YYYY-MM-DDTHH:MM:SSZ)",
                py_repr(ts)
            ));
        }
        let plan = string(plan_v, "plan")?;
        if plan != self.contract.plan {
            return Err(problem!(
                "plan",
                "{} is not this plan ({})",
                py_repr(plan),
                self.contract.plan
            ));
        }
        let cid = string(cid_v, "contract_id")?;
        if cid != self.contract.id && !is_sha256_hex(cid) {
            return Err(problem!(
                "contract_id",
                "{} is not a valid contract id",
                py_repr(cid)
            ));
        }
        let live = cid == self.contract.id;
        let actor_kind = actor(&v, actor_v)?;
        if let Some(note) = v.get(Key::Note) {
            let note = string(note, "note")?;
            if note.chars().count() > 500 {
                return Err(Problem::new("note", "longer than 500 characters"));
            }
        }

        let (required, optional) = payload_fields(kind);
        let mut allowed = ENVELOPE_REQUIRED
            .iter()
            .chain(required)
            .chain(optional)
            .fold(Key::Note.bit(), |m, k| m | k.bit());
        if kind.is_evidence() {
            allowed |= Key::Trust.bit() | Key::EvidencePath.bit();
        }
        let nested = Key::ActorKind.bit() | Key::ActorIdentity.bit() | Key::ActorOther.bit();
        if v.mask() & !(allowed | nested) != 0
            && let Some((_, name)) = v.keys().into_iter().find(|(k, _)| allowed & k.bit() == 0)
        {
            return Err(Problem::whole(format!(
                "unknown field {} for a {type_name} event (payloads are closed)",
                py_repr(&name)
            )));
        }
        if let Some(key) = required.iter().find(|k| !v.has(**k)) {
            return Err(problem!(
                type_name,
                "missing required field {}",
                py_repr(key.name())
            ));
        }
        if kind.is_evidence() {
            let trust = one_of(
                v.get(Key::Trust)
                    .ok_or_else(|| problem!(type_name, "missing required field 'trust'"))?,
                "trust",
                &["observed", "imported", "asserted"],
            )?;
            match v.get(Key::EvidencePath) {
                Some(p) => {
                    text(p, "evidence_path")?;
                }
                None if trust != "asserted" => {
                    return Err(problem!(
                        "evidence_path",
                        "{trust} evidence must cite its artifact"
                    ));
                }
                None => {}
            }
            if trust == "observed" && !matches!(&*actor_kind, "helper" | "host_adapter") {
                return Err(problem!(
                    "trust",
                    "'observed' evidence comes only from a helper or host_adapter actor, \
                     not {}",
                    py_repr(&actor_kind)
                ));
            }
            if kind == EventType::ResourceSample
                && trust == "observed"
                && actor_kind != "host_adapter"
            {
                return Err(Problem::new(
                    "trust",
                    "an observed resource_sample comes only from a host_adapter actor",
                ));
            }
        }
        self.payload(kind, &v, live)?;
        Ok((seq, kind))
    }

    fn task_ref(&self, v: FieldRef, at: &str, live: bool) -> Check<()> {
        let task = text(v, at)?;
        if live && self.contract.task(task).is_none() {
            return Err(problem!(
                at,
                "task {} is not declared in the live contract",
                py_repr(task)
            ));
        }
        Ok(())
    }

    fn criterion_ref(&self, v: FieldRef, at: &str, live: bool) -> Check<()> {
        let criterion = text(v, at)?;
        if live && self.contract.criterion(criterion).is_none() {
            return Err(problem!(
                at,
                "criterion {} is not declared in the live contract",
                py_repr(criterion)
            ));
        }
        Ok(())
    }

    fn payload(&self, kind: EventType, v: &View, live: bool) -> Check<()> {
        let opt = |k: Key| v.get(k);
        // Required fields are present (checked before the payload).
        let req = |k: Key| v.get(k).unwrap_or(FieldRef::Json("null"));
        match kind {
            EventType::TaskStart => {
                self.task_ref(req(Key::Task), "task", live)?;
                if let Some(f) = opt(Key::Fingerprint) {
                    fingerprint(&f.value(), "fingerprint")?;
                }
            }
            EventType::Approval => {
                text(req(Key::Authority), "authority")?;
                one_of(
                    req(Key::Mechanism),
                    "mechanism",
                    &["plan_authorship", "pre_authorization"],
                )?;
                string(req(Key::PlanDigest), "plan_digest")?;
            }
            EventType::GateRun => {
                text(req(Key::Command), "command")?;
                string(req(Key::Cwd), "cwd")?;
                if let Some(env) = opt(Key::Env) {
                    let env = env.value();
                    let env = env
                        .as_object()
                        .ok_or_else(|| Problem::new("env", "expected an object of strings"))?;
                    for (k, val) in env {
                        check::string(val, &format!("env.{k}"))?;
                    }
                }
                let t = check::number(&req(Key::TimeoutSeconds).value(), "timeout_seconds", 0.0)?;
                if t <= 0.0 {
                    return Err(Problem::new("timeout_seconds", "must be above 0"));
                }
                int(req(Key::ExitCode), "exit_code", i64::MIN)?;
                self.task_ref(req(Key::Task), "task", live)?;
                self.criterion_ref(req(Key::Criterion), "criterion", live)?;
            }
            EventType::Observation => {
                text(req(Key::Statement), "statement")?;
            }
            EventType::Adaptation => {
                one_of(
                    req(Key::Kind),
                    "kind",
                    &["split", "reorder", "insert", "change_strategy", "retry"],
                )?;
                let trigger = req(Key::TriggerObservation);
                if !trigger.is_null() {
                    int(trigger, "trigger_observation", 1)?;
                }
                opt_string(req(Key::EvidenceArtifact), "evidence_artifact")?;
                for key in [Key::Hypothesis, Key::Action, Key::Rationale, Key::Authority] {
                    string(req(key), key.name())?;
                }
                for key in [
                    Key::AffectedTasks,
                    Key::AffectedCriteria,
                    Key::EvidenceInvalidated,
                    Key::EvidencePreserved,
                ] {
                    strings(req(key), key.name())?;
                }
                if let Some(impact) = opt(Key::ResourceImpact) {
                    let impact = impact.value();
                    let impact =
                        check::object(&impact, "resource_impact", &["declared", "unit"], &[])?;
                    check::number(&impact["declared"], "resource_impact.declared", 0.0)?;
                    check::text(&impact["unit"], "resource_impact.unit")?;
                }
                let decision = one_of(req(Key::Decision), "decision", &["authorized", "refused"])?;
                match opt(Key::Reason) {
                    Some(r) => {
                        string(r, "reason")?;
                    }
                    None if decision == "refused" => {
                        return Err(Problem::new("reason", "a refused adaptation must say why"));
                    }
                    None => {}
                }
            }
            EventType::Amendment => {
                for key in [
                    Key::OriginalCriterion,
                    Key::ObservedFinding,
                    Key::Disposition,
                    Key::Reason,
                    Key::Authority,
                ] {
                    string(req(key), key.name())?;
                }
                opt_string(req(Key::RevisedCriterion), "revised_criterion")?;
                for key in [
                    Key::AffectedTasks,
                    Key::EvidenceInvalidated,
                    Key::EvidencePreserved,
                ] {
                    strings(req(key), key.name())?;
                }
            }
            EventType::Intervention => {
                one_of(
                    req(Key::Category),
                    "category",
                    &[
                        "missing_intent",
                        "new_authority",
                        "environment_repair",
                        "engineering_rescue",
                    ],
                )?;
                string(req(Key::Description), "description")?;
                string(req(Key::Question), "question")?;
                if let Some(r) = opt(Key::Resolution) {
                    opt_string(r, "resolution")?;
                }
            }
            EventType::ResourceSample => {
                text(req(Key::Source), "source")?;
                if let Some(l) = opt(Key::LimitId) {
                    matching(l, "limit_id", check::limit_id(), "limit id")?;
                }
                check::number(&req(Key::Value).value(), "value", 0.0)?;
                text(req(Key::Unit), "unit")?;
            }
            EventType::ControlPair => {
                self.criterion_ref(req(Key::Criterion), "criterion", live)?;
                check::strings(
                    &req(Key::CheckArtifacts).value(),
                    "check_artifacts",
                    1,
                    false,
                    true,
                )?;
                fingerprint(
                    &req(Key::StartingFingerprint).value(),
                    "starting_fingerprint",
                )?;
                let old = req(Key::OldLeg).value();
                let old = check::object(&old, "old_leg", &["available"], &["outcome", "log"])?;
                check::boolean(&old["available"], "old_leg.available")?;
                for key in ["outcome", "log"] {
                    if let Some(x) = old.get(key) {
                        check::opt_string(x, &format!("old_leg.{key}"))?;
                    }
                }
                let new = req(Key::NewLeg).value();
                let new = check::object(&new, "new_leg", &["outcome", "log"], &[])?;
                check::string(&new["outcome"], "new_leg.outcome")?;
                check::opt_string(&new["log"], "new_leg.log")?;
                one_of(
                    req(Key::Verdict),
                    "verdict",
                    &[
                        "discriminating",
                        "non_discriminating",
                        "control_unavailable",
                    ],
                )?;
            }
            EventType::Selection => {
                self.task_ref(req(Key::Task), "task", live)?;
                let boosted = boolean(req(Key::PriorityBoost), "priority_boost")?;
                match opt(Key::Aging) {
                    Some(a) if !a.is_null() => {
                        let a = a.value();
                        let a =
                            check::object(&a, "aging", &["waiting_since_seq", "threshold"], &[])?;
                        check::int(&a["waiting_since_seq"], "aging.waiting_since_seq", 0)?;
                        check::int(&a["threshold"], "aging.threshold", 1)?;
                    }
                    _ if boosted => {
                        return Err(Problem::new(
                            "aging",
                            "a boosted selection must record its aging",
                        ));
                    }
                    _ => {}
                }
            }
            EventType::Refusal => {
                text(req(Key::Subject), "subject")?;
                one_of(
                    req(Key::Stage),
                    "stage",
                    &["task_start", "authorize", "dispatch", "gate"],
                )?;
                string(req(Key::Reason), "reason")?;
                if let Some(p) = opt(Key::Proposal) {
                    opt_string(p, "proposal")?;
                }
            }
            EventType::ViewRender => {
                text(req(Key::View), "view")?;
                string(req(Key::SnapshotDigest), "snapshot_digest")?;
                if let Some(d) = opt(Key::Digests)
                    && !matches!(d, FieldRef::Json(raw) if raw.starts_with('{'))
                    && !d.is_null()
                {
                    return Err(Problem::new("digests", "expected an object"));
                }
            }
            EventType::Reconciliation => {
                for key in [Key::Trigger, Key::Editor, Key::Authority] {
                    string(req(key), key.name())?;
                }
            }
            EventType::JournalRepair => {
                int(req(Key::ByteOffset), "byte_offset", 0)?;
                string(req(Key::Cause), "cause")?;
            }
            EventType::Delegation => self.delegation(v, live)?,
        }
        Ok(())
    }

    fn delegation(&self, v: &View, live: bool) -> Check<()> {
        let req = |k: Key| v.get(k).unwrap_or(FieldRef::Json("null"));
        self.task_ref(req(Key::Task), "task", live)?;
        matching(
            req(Key::DelegationId),
            "delegation_id",
            check::delegation_id(),
            "delegation id",
        )?;
        one_of(
            req(Key::Transport),
            "transport",
            &["headless", "interactive"],
        )?;
        text(req(Key::Via), "via")?;
        let state = one_of(
            req(Key::State),
            "state",
            &["launched", "completed", "failed", "cancelled"],
        )?;
        for key in [Key::Kind, Key::Profile] {
            if let Some(x) = v.get(key) {
                opt_string(x, key.name())?;
            }
        }
        if let Some(t) = v.get(Key::Target)
            && let Some(t) = opt_string(t, "target")?
            && t.chars().count() > 200
        {
            return Err(Problem::new("target", "longer than 200 characters"));
        }
        if let Some(w) = v.get(Key::Worktree) {
            opt_string(w, "worktree")?;
        }
        match v.get(Key::PromptDigest) {
            Some(d) => {
                matching(
                    d,
                    "prompt_digest",
                    check::prefixed_sha256(),
                    "digest (sha256:<64 hex>)",
                )?;
            }
            None if state == "launched" => {
                return Err(Problem::new(
                    "prompt_digest",
                    "required when a delegation is launched",
                ));
            }
            None => {}
        }
        for key in [Key::ResultPath, Key::ResultDigest] {
            if let Some(x) = v.get(key) {
                if !matches!(state, "completed" | "failed") {
                    return Err(Problem::new(
                        key.name(),
                        "only a completed or failed delegation has one",
                    ));
                }
                opt_string(x, key.name())?;
            }
        }
        Ok(())
    }
}

/// `actor`: a closed object of a known `kind` and a non-empty `identity` of at most 100
/// characters. Returns the kind.
fn actor<'a>(v: &View<'a>, actor_v: FieldRef<'a>) -> Check<std::borrow::Cow<'a, str>> {
    let plain =
        matches!(actor_v, FieldRef::Json(raw) if raw.starts_with('{')) && !v.has(Key::ActorOther);
    let (kind, identity) = match (plain, v.get(Key::ActorKind), v.get(Key::ActorIdentity)) {
        (true, Some(FieldRef::Str(kind)), Some(FieldRef::Str(identity))) => {
            let kind = check::member(kind, "actor.kind", ACTOR_KINDS)?;
            let identity = check::nonempty(identity, "actor.identity")?;
            (kind.into(), identity.chars().count())
        }
        _ => {
            // Anything irregular: the checks on the parsed object say what is wrong.
            let value = actor_v.value();
            let actor = check::object(&value, "actor", &["kind", "identity"], &[])?;
            let kind = check::one_of(&actor["kind"], "actor.kind", ACTOR_KINDS)?;
            let identity = check::text(&actor["identity"], "actor.identity")?;
            (kind.to_owned().into(), identity.chars().count())
        }
    };
    if identity > 100 {
        return Err(Problem::new("actor.identity", "longer than 100 characters"));
    }
    Ok(kind)
}

const ACTOR_KINDS: &[&str] = &["helper", "agent", "host_adapter", "human"];

// Field checks over an indexed value: strings are checked in place; anything else is parsed so
// the message is the one `check` gives for that value.

fn string<'a>(f: FieldRef<'a>, at: &str) -> Check<&'a str> {
    match f {
        FieldRef::Str(s) => Ok(s),
        FieldRef::Json(_) => Err(match check::string(&f.value(), at) {
            Err(problem) => problem,
            Ok(_) => problem!(at, "expected a string"),
        }),
    }
}

fn text<'a>(f: FieldRef<'a>, at: &str) -> Check<&'a str> {
    check::nonempty(string(f, at)?, at)
}

fn opt_string<'a>(f: FieldRef<'a>, at: &str) -> Check<Option<&'a str>> {
    if f.is_null() {
        Ok(None)
    } else {
        string(f, at).map(Some)
    }
}

fn one_of<'a>(f: FieldRef<'a>, at: &str, allowed: &[&str]) -> Check<&'a str> {
    check::member(string(f, at)?, at, allowed)
}

fn matching<'a>(f: FieldRef<'a>, at: &str, re: &regex::Regex, what: &str) -> Check<&'a str> {
    check::pattern(string(f, at)?, at, re, what)
}

fn int(f: FieldRef, at: &str, min: i64) -> Check<i64> {
    // A plain JSON integer reads directly; anything else gets the parsed value's message.
    // `-0` is an integer (0) to Python's json, as to the DWP reference, though serde_json makes
    // it a float: it reads as 0 here, and is below a minimum of 1 like any 0.
    if let FieldRef::Json(raw) = f
        && let Ok(n) = raw.parse::<i64>()
    {
        if n >= min {
            return Ok(n);
        }
        if raw == "-0" {
            return Err(problem!(at, "0 is below the minimum {min}"));
        }
    }
    check::int(&f.value(), at, min)
}

fn boolean(f: FieldRef, at: &str) -> Check<bool> {
    match f {
        FieldRef::Json("true") => Ok(true),
        FieldRef::Json("false") => Ok(false),
        _ => check::boolean(&f.value(), at),
    }
}

fn strings(f: FieldRef, at: &str) -> Check<()> {
    check::strings(&f.value(), at, 0, false, false).map(|_| ())
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
fn payload_fields(kind: EventType) -> (&'static [Key], &'static [Key]) {
    match kind {
        EventType::TaskStart => (&[Key::Task], &[Key::Fingerprint]),
        EventType::Approval => (&[Key::Authority, Key::Mechanism, Key::PlanDigest], &[]),
        EventType::GateRun => (
            &[
                Key::Command,
                Key::Cwd,
                Key::TimeoutSeconds,
                Key::ExitCode,
                Key::Task,
                Key::Criterion,
            ],
            &[Key::Env],
        ),
        EventType::Observation => (&[Key::Statement], &[]),
        EventType::Adaptation => (
            &[
                Key::Kind,
                Key::TriggerObservation,
                Key::EvidenceArtifact,
                Key::Hypothesis,
                Key::Action,
                Key::Rationale,
                Key::Authority,
                Key::AffectedTasks,
                Key::AffectedCriteria,
                Key::EvidenceInvalidated,
                Key::EvidencePreserved,
                Key::Decision,
            ],
            &[Key::ResourceImpact, Key::Reason],
        ),
        EventType::Amendment => (
            &[
                Key::OriginalCriterion,
                Key::ObservedFinding,
                Key::Disposition,
                Key::RevisedCriterion,
                Key::Reason,
                Key::Authority,
                Key::AffectedTasks,
                Key::EvidenceInvalidated,
                Key::EvidencePreserved,
            ],
            &[],
        ),
        EventType::Intervention => (
            &[Key::Category, Key::Description, Key::Question],
            &[Key::Resolution],
        ),
        EventType::ResourceSample => (&[Key::Source, Key::Value, Key::Unit], &[Key::LimitId]),
        EventType::ControlPair => (
            &[
                Key::Criterion,
                Key::CheckArtifacts,
                Key::StartingFingerprint,
                Key::OldLeg,
                Key::NewLeg,
                Key::Verdict,
            ],
            &[],
        ),
        EventType::Selection => (&[Key::Task, Key::PriorityBoost], &[Key::Aging]),
        EventType::Refusal => (&[Key::Subject, Key::Stage, Key::Reason], &[Key::Proposal]),
        EventType::ViewRender => (&[Key::View, Key::SnapshotDigest], &[Key::Digests]),
        EventType::Reconciliation => (&[Key::Trigger, Key::Editor, Key::Authority], &[]),
        EventType::JournalRepair => (&[Key::ByteOffset, Key::Cause], &[]),
        EventType::Delegation => (
            &[
                Key::Task,
                Key::DelegationId,
                Key::Transport,
                Key::Via,
                Key::State,
            ],
            &[
                Key::Kind,
                Key::Profile,
                Key::Target,
                Key::Worktree,
                Key::PromptDigest,
                Key::ResultPath,
                Key::ResultDigest,
            ],
        ),
    }
}

#[cfg(test)]
pub(crate) mod tests;
