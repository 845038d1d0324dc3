//! One journal event kept as its stored text plus an index of where each field's value lies.
//!
//! Why not a `serde_json::Value` map per event: with `preserve_order` every map is an `IndexMap`
//! with a hashed table, a `String` per key and per string value — building, probing and freeing
//! those cost more than everything a derivation does with the journal. Here a line is scanned
//! once with each field borrowed as `&RawValue` from the file's one text buffer; the index keeps
//! a byte span per field, a string without escapes is read in place, and any other value is
//! parsed only when a check or a derivation asks for it.
//!
//! Invariant: a line is indexed only if `serde_json::from_slice::<Value>` would accept it too
//! (the raw scan checks syntax only, so numbers, escaped strings and nested values are checked
//! here the way a `Value` parse would). A line the index cannot vouch for goes through the
//! `Value` parser, whose verdict (and error text) is the old reader's.

use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::EventType;

macro_rules! keys {
    ($($name:ident = $text:literal,)*) => {
        /// Every field name a journal event may carry (the union of the closed payloads), plus
        /// the `actor` members and `Unknown` for anything else. Declared in code-point order of
        /// the names, so the fields of a canonical (sorted-key) line are indexed already sorted;
        /// `ActorOther` flags an `actor` holding more than string `kind`/`identity`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[repr(u8)]
        pub enum Key {
            $($name,)*
            Unknown,
        }

        impl Key {
            pub fn from_name(s: &str) -> Option<Key> {
                let key = match s {
                    $($text => Key::$name,)*
                    _ => return None,
                };
                (!key.nested()).then_some(key)
            }

            /// The field name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Key::$name => $text,)*
                    Key::Unknown => "?",
                }
            }
        }
    };
}

keys! {
    Action = "action",
    Actor = "actor",
    ActorIdentity = "actor.identity",
    ActorKind = "actor.kind",
    ActorOther = "actor.other",
    AffectedCriteria = "affected_criteria",
    AffectedTasks = "affected_tasks",
    Aging = "aging",
    Authority = "authority",
    ByteOffset = "byte_offset",
    Category = "category",
    Cause = "cause",
    CheckArtifacts = "check_artifacts",
    Command = "command",
    ContractId = "contract_id",
    Criterion = "criterion",
    Cwd = "cwd",
    Decision = "decision",
    DelegationId = "delegation_id",
    Description = "description",
    Digests = "digests",
    Disposition = "disposition",
    Editor = "editor",
    Env = "env",
    EvidenceArtifact = "evidence_artifact",
    EvidenceInvalidated = "evidence_invalidated",
    EvidencePath = "evidence_path",
    EvidencePreserved = "evidence_preserved",
    ExitCode = "exit_code",
    Fingerprint = "fingerprint",
    Hypothesis = "hypothesis",
    Kind = "kind",
    LimitId = "limit_id",
    Mechanism = "mechanism",
    NewLeg = "new_leg",
    Note = "note",
    ObservedFinding = "observed_finding",
    OldLeg = "old_leg",
    OriginalCriterion = "original_criterion",
    Plan = "plan",
    PlanDigest = "plan_digest",
    PriorityBoost = "priority_boost",
    Profile = "profile",
    PromptDigest = "prompt_digest",
    Proposal = "proposal",
    Question = "question",
    Rationale = "rationale",
    Reason = "reason",
    Resolution = "resolution",
    ResourceImpact = "resource_impact",
    ResultDigest = "result_digest",
    ResultPath = "result_path",
    RevisedCriterion = "revised_criterion",
    Schema = "schema",
    Seq = "seq",
    SnapshotDigest = "snapshot_digest",
    Source = "source",
    Stage = "stage",
    StartingFingerprint = "starting_fingerprint",
    State = "state",
    Statement = "statement",
    Subject = "subject",
    Target = "target",
    Task = "task",
    TimeoutSeconds = "timeout_seconds",
    Transport = "transport",
    Trigger = "trigger",
    TriggerObservation = "trigger_observation",
    Trust = "trust",
    Ts = "ts",
    Type = "type",
    Unit = "unit",
    Value = "value",
    Verdict = "verdict",
    Via = "via",
    View = "view",
    Worktree = "worktree",
}

// Every key has a bit in a u128 mask.
const _: () = assert!((Key::Unknown as u8) < 128);

impl Key {
    pub fn bit(self) -> u128 {
        1u128 << (self as u8)
    }

    /// A member of `actor` rather than a top-level field.
    fn nested(self) -> bool {
        matches!(self, Key::ActorKind | Key::ActorIdentity | Key::ActorOther)
    }
}

/// How a field's span is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    /// A string without escapes: the span is its text inside the quotes.
    Str,
    /// A string with escapes: `start` indexes the chunk's decoded strings.
    Decoded,
    /// Any other JSON value: the span is its raw text.
    Json,
    /// An unknown field: the span (or decoded index) is its name; its value is not kept.
    UnknownName,
    UnknownDecodedName,
}

#[derive(Debug, Clone, Copy)]
struct Field {
    key: Key,
    tag: Tag,
    /// Relative to the line start (or an index into `decoded`).
    start: u32,
    end: u32,
}

/// The text a file's events share, their field index and their unescaped strings.
#[derive(Debug, Default)]
pub(super) struct Chunk {
    text: String,
    fields: Vec<Field>,
    decoded: Vec<Box<str>>,
}

/// A field's value as stored: a string (read in place) or raw JSON text.
#[derive(Debug, Clone, Copy)]
pub(super) enum FieldRef<'a> {
    Str(&'a str),
    Json(&'a str),
}

impl<'a> FieldRef<'a> {
    pub fn as_str(self) -> Option<&'a str> {
        match self {
            FieldRef::Str(s) => Some(s),
            FieldRef::Json(_) => None,
        }
    }

    pub fn is_null(self) -> bool {
        matches!(self, FieldRef::Json("null"))
    }

    /// The value parsed (cannot fail: indexed lines are `Value`-parseable by construction).
    pub fn value(self) -> Value {
        match self {
            FieldRef::Str(s) => Value::String(s.to_owned()),
            FieldRef::Json(raw) => serde_json::from_str(raw).unwrap_or(Value::Null),
        }
    }
}

/// A borrowed view of one indexed line.
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    line: &'a str,
    /// Sorted by key; each key at most once except `Unknown`, which sorts last.
    fields: &'a [Field],
    decoded: &'a [Box<str>],
    /// One bit per key present: a field's position is the count of present keys below it.
    mask: u128,
}

impl<'a> View<'a> {
    pub fn get(&self, key: Key) -> Option<FieldRef<'a>> {
        let bit = key.bit();
        if self.mask & bit == 0 {
            return None;
        }
        let f = &self.fields[(self.mask & (bit - 1)).count_ones() as usize];
        Some(self.resolve(f))
    }

    /// The keys present, one bit each ([`Key::bit`]).
    pub fn mask(&self) -> u128 {
        self.mask
    }

    fn resolve(&self, f: &Field) -> FieldRef<'a> {
        let span = || &self.line[f.start as usize..f.end as usize];
        match f.tag {
            Tag::Str => FieldRef::Str(span()),
            Tag::Decoded => FieldRef::Str(&self.decoded[f.start as usize]),
            _ => FieldRef::Json(span()),
        }
    }

    /// Top-level field keys in document order, with the name of each (for messages: the index
    /// is sorted by key, so the line is indexed again in its own order).
    pub fn keys(&self) -> Vec<(Key, String)> {
        let mut fields = Vec::new();
        let mut decoded = Vec::new();
        if index_line(self.line, &mut fields, &mut decoded, true, false).is_none() {
            return Vec::new();
        }
        fields
            .iter()
            .filter(|f| !f.key.nested())
            .map(|f| match f.tag {
                Tag::UnknownName => (f.key, self.line[f.start as usize..f.end as usize].into()),
                Tag::UnknownDecodedName => (f.key, decoded[f.start as usize].to_string()),
                _ => (f.key, f.key.name().into()),
            })
            .collect()
    }

    pub fn has(&self, key: Key) -> bool {
        self.mask & key.bit() != 0
    }
}

/// One validated journal event: its seq and type, and its line as stored.
#[derive(Clone)]
pub struct Event {
    pub seq: u64,
    pub kind: EventType,
    chunk: Arc<Chunk>,
    line: (usize, usize),
    fields: (u32, u32),
    mask: u128,
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("seq", &self.seq)
            .field("kind", &self.kind)
            .field("line", &self.line_text())
            .finish()
    }
}

impl Event {
    pub(super) fn view(&self) -> View<'_> {
        View {
            line: &self.chunk.text[self.line.0..self.line.1],
            fields: &self.chunk.fields[self.fields.0 as usize..self.fields.1 as usize],
            decoded: &self.chunk.decoded,
            mask: self.mask,
        }
    }

    fn field(&self, key: &str) -> Option<FieldRef<'_>> {
        self.view().get(Key::from_name(key)?)
    }

    /// The line's JSON text (as stored, or re-serialized when it needed the `Value` parser).
    pub fn line_text(&self) -> &str {
        &self.chunk.text[self.line.0..self.line.1]
    }

    /// A string field (None when absent or not a string).
    pub fn str(&self, key: &str) -> Option<&str> {
        self.field(key)?.as_str()
    }

    /// Any field, parsed.
    pub fn value(&self, key: &str) -> Option<Value> {
        self.field(key).map(FieldRef::value)
    }

    /// An integer field.
    pub fn i64(&self, key: &str) -> Option<i64> {
        match self.field(key)? {
            // `-0` reads as 0, as in Python's json (see `journal::int`).
            FieldRef::Json(raw) => match raw.parse::<i64>() {
                Ok(n) => Some(n),
                Err(_) => serde_json::from_str::<Value>(raw).ok()?.as_i64(),
            },
            FieldRef::Str(_) => None,
        }
    }

    pub fn has(&self, key: &str) -> bool {
        Key::from_name(key).is_some_and(|k| self.view().has(k))
    }

    /// The whole event as a JSON object.
    pub fn to_map(&self) -> Map<String, Value> {
        match serde_json::from_str(self.line_text()) {
            Ok(Value::Object(map)) => map,
            _ => Map::new(),
        }
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
        self.view()
            .get(Key::ActorKind)
            .and_then(FieldRef::as_str)
            .unwrap_or_default()
    }

    pub fn actor_identity(&self) -> &str {
        self.view()
            .get(Key::ActorIdentity)
            .and_then(FieldRef::as_str)
            .unwrap_or_default()
    }

    /// A list-of-strings payload field (empty when absent; non-strings skipped).
    pub fn list(&self, key: &str) -> Vec<String> {
        match self.value(key) {
            Some(Value::Array(items)) => items
                .into_iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(s),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The same event under its validated seq and type.
    pub(super) fn stamped(self, seq: u64, kind: EventType) -> Event {
        Event { seq, kind, ..self }
    }

    /// An event from a JSON object that was not read from a journal (tests, and the writer's
    /// freshly validated event). `None` only for a line too long to index.
    pub fn from_map(seq: u64, kind: EventType, map: &Map<String, Value>) -> Option<Event> {
        let text = serde_json::to_string(map).ok()?;
        let mut chunk = Chunk::default();
        let (fields, mask) = index_line(&text, &mut chunk.fields, &mut chunk.decoded, true, true)?;
        let len = text.len();
        chunk.text = text;
        Some(Event {
            seq,
            kind,
            chunk: Arc::new(chunk),
            line: (0, len),
            fields,
            mask,
        })
    }
}

/// Builds events over one file's text: lines are indexed while the text is borrowed, and the
/// events are made once the text is shared.
#[derive(Default)]
pub(super) struct ChunkBuilder {
    fields: Vec<Field>,
    decoded: Vec<Box<str>>,
    pending: Vec<Pending>,
}

enum Pending {
    InChunk {
        seq: u64,
        kind: EventType,
        line: (usize, usize),
        fields: (u32, u32),
        mask: u128,
    },
    Own(Event),
}

/// An indexed line not yet turned into an event (rolled back if the line is refused).
pub(super) struct Indexed {
    line: (usize, usize),
    fields: (u32, u32),
    mask: u128,
}

impl ChunkBuilder {
    /// Indexes the line at `text[start..end]`, or None when only the `Value` parser can judge it.
    /// Sizes the index for a file of `len` bytes (about one field per 24 bytes of JSON and one
    /// event per 256), so a long journal's index is not copied while it grows.
    pub fn with_capacity(len: usize) -> ChunkBuilder {
        ChunkBuilder {
            fields: Vec::with_capacity(len / 24),
            decoded: Vec::new(),
            pending: Vec::with_capacity(len / 256),
        }
    }

    pub fn index(&mut self, text: &str, start: usize, end: usize) -> Option<Indexed> {
        let mark = (self.fields.len(), self.decoded.len());
        match index_line(
            &text[start..end],
            &mut self.fields,
            &mut self.decoded,
            false,
            true,
        ) {
            Some((fields, mask)) => Some(Indexed {
                line: (start, end),
                fields,
                mask,
            }),
            None => {
                self.fields.truncate(mark.0);
                self.decoded.truncate(mark.1);
                None
            }
        }
    }

    pub fn view<'a>(&'a self, text: &'a str, at: &Indexed) -> View<'a> {
        View {
            line: &text[at.line.0..at.line.1],
            fields: &self.fields[at.fields.0 as usize..at.fields.1 as usize],
            decoded: &self.decoded,
            mask: at.mask,
        }
    }

    /// Forgets a refused line's index.
    pub fn drop_last(&mut self, at: Indexed) {
        self.fields.truncate(at.fields.0 as usize);
    }

    pub fn keep(&mut self, at: Indexed, seq: u64, kind: EventType) {
        self.pending.push(Pending::InChunk {
            seq,
            kind,
            line: at.line,
            fields: at.fields,
            mask: at.mask,
        });
    }

    pub fn keep_own(&mut self, event: Event) {
        self.pending.push(Pending::Own(event));
    }

    /// The events, in the order kept, sharing `text`.
    pub fn finish(self, text: String, out: &mut Vec<Event>) {
        let chunk = Arc::new(Chunk {
            text,
            fields: self.fields,
            decoded: self.decoded,
        });
        out.reserve(self.pending.len());
        out.extend(self.pending.into_iter().map(|p| match p {
            Pending::InChunk {
                seq,
                kind,
                line,
                fields,
                mask,
            } => Event {
                seq,
                kind,
                chunk: Arc::clone(&chunk),
                line,
                fields,
                mask,
            },
            Pending::Own(event) => event,
        }));
    }
}

/// Indexes one line (an object) into `fields`; returns the range of its fields and the mask of
/// keys present. `trusted` lines come from serializing a `Value`, so their values need no
/// `Value`-parseability checks. `sort` orders the fields by key for [`View::get`] (otherwise they
/// stay in document order).
fn index_line(
    line: &str,
    fields: &mut Vec<Field>,
    decoded: &mut Vec<Box<str>>,
    trusted: bool,
    sort: bool,
) -> Option<((u32, u32), u128)> {
    u32::try_from(line.len()).ok()?;
    let first = fields.len();
    let mut de = serde_json::Deserializer::from_str(line);
    let entries = <Entries<'_> as Deserialize>::deserialize(&mut de).ok()?;
    de.end().ok()?;
    let mut seen = 0u128;
    let mut unknown: Vec<String> = Vec::new();
    let base = line.as_ptr() as usize;
    let span = |s: &str| -> (u32, u32) {
        let start = s.as_ptr() as usize - base;
        (start as u32, (start + s.len()) as u32)
    };
    for (name, raw) in entries.0 {
        let key = Key::from_name(&name).unwrap_or(Key::Unknown);
        if key == Key::Unknown {
            // Only refused events carry one, so its bookkeeping may allocate.
            if unknown.iter().any(|u| **u == *name) {
                return None; // duplicate keys: the Value parser decides
            }
            unknown.push(name.to_string());
            let (tag, start, end) = match name {
                Name::Borrowed(s) => {
                    let (a, b) = span(s);
                    (Tag::UnknownName, a, b)
                }
                Name::Owned(s) => {
                    decoded.push(s.into_boxed_str());
                    (Tag::UnknownDecodedName, (decoded.len() - 1) as u32, 0)
                }
            };
            fields.push(Field {
                key,
                tag,
                start,
                end,
            });
            // Its value must still be one a Value parse accepts.
            if !trusted && !value_parseable(raw.get()) {
                return None;
            }
            continue;
        }
        if seen & key.bit() != 0 {
            return None;
        }
        seen |= key.bit();
        let object = raw.get().starts_with('{');
        if key == Key::Actor && object {
            // index_actor checks what it holds, so the object needs no second walk.
            push_value(key, raw.get(), &span, fields, decoded, true)?;
            index_actor(raw.get(), &span, fields, decoded, trusted)?;
        } else {
            push_value(key, raw.get(), &span, fields, decoded, trusted)?;
        }
    }
    let own = &mut fields[first..];
    let mut mask = 0u128;
    for f in own.iter() {
        mask |= f.key.bit();
    }
    // Canonical lines have sorted keys, so this is usually only a check.
    if sort && !own.is_sorted_by_key(|f| f.key as u8) {
        own.sort_by_key(|f| f.key as u8);
    }
    Some(((first as u32, fields.len() as u32), mask))
}

fn push_value(
    key: Key,
    raw: &str,
    span: &impl Fn(&str) -> (u32, u32),
    fields: &mut Vec<Field>,
    decoded: &mut Vec<Box<str>>,
    checked: bool,
) -> Option<()> {
    let field = if raw.starts_with('"') {
        if raw.contains('\\') {
            // Decoding also checks what the raw scan does not (lone surrogates).
            let s: String = serde_json::from_str(raw).ok()?;
            decoded.push(s.into_boxed_str());
            Field {
                key,
                tag: Tag::Decoded,
                start: (decoded.len() - 1) as u32,
                end: 0,
            }
        } else {
            let (a, b) = span(raw);
            Field {
                key,
                tag: Tag::Str,
                start: a + 1,
                end: b - 1,
            }
        }
    } else {
        if !checked && !value_parseable(raw) {
            return None;
        }
        let (a, b) = span(raw);
        Field {
            key,
            tag: Tag::Json,
            start: a,
            end: b,
        }
    };
    fields.push(field);
    Some(())
}

/// Indexes `actor`'s string `kind` and `identity`; anything else there is flagged `ActorOther`.
fn index_actor(
    raw: &str,
    span: &impl Fn(&str) -> (u32, u32),
    fields: &mut Vec<Field>,
    decoded: &mut Vec<Box<str>>,
    trusted: bool,
) -> Option<()> {
    let entries: Entries<'_> = serde_json::from_str(raw).ok()?;
    let mut seen = 0u8;
    let mut other = false;
    for (name, value) in entries.0 {
        let (key, bit) = match &*name {
            "kind" => (Key::ActorKind, 1),
            "identity" => (Key::ActorIdentity, 2),
            _ => {
                if !trusted && !value_parseable(value.get()) {
                    return None;
                }
                other = true;
                continue;
            }
        };
        if seen & bit != 0 {
            return None;
        }
        seen |= bit;
        if !value.get().starts_with('"') {
            other = true;
        }
        push_value(key, value.get(), span, fields, decoded, trusted)?;
    }
    if other {
        fields.push(Field {
            key: Key::ActorOther,
            tag: Tag::Json,
            start: 0,
            end: 0,
        });
    }
    Some(())
}

/// Whether `serde_json::from_str::<Value>` accepts `raw` (a value the raw scan accepted): the
/// scan does not check number ranges, escapes or nesting depth. Deep nesting is left to the
/// `Value` parser, whose depth count starts one level further out.
pub(in crate::dwp::plan) fn value_parseable(raw: &str) -> bool {
    match raw.as_bytes().first() {
        Some(b't' | b'f' | b'n') => true,
        Some(b'[' | b'{') => {
            raw.bytes().filter(|b| matches!(b, b'[' | b'{')).count() <= 100
                && serde_json::from_str::<Checked>(raw).is_ok()
        }
        _ => serde_json::from_str::<Checked>(raw).is_ok(),
    }
}

/// A field name, borrowed from the line unless it had escapes.
pub(in crate::dwp::plan) enum Name<'a> {
    Borrowed(&'a str),
    Owned(String),
}

impl std::ops::Deref for Name<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        match self {
            Name::Borrowed(s) => s,
            Name::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name::Borrowed(s))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name::Owned(s.to_owned()))
            }
        }
        d.deserialize_str(V)
    }
}

/// An object's entries in document order, values unparsed.
pub(in crate::dwp::plan) struct Entries<'a>(pub Vec<(Name<'a>, &'a RawValue)>);

impl<'de> Deserialize<'de> for Entries<'de> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Entries<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries<'de>, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(16));
                while let Some(name) = map.next_key::<Name<'de>>()? {
                    out.push((name, map.next_value::<&'de RawValue>()?));
                }
                Ok(Entries(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// Walks a value the way a `Value` parse does (numbers converted, escapes decoded, depth
/// counted) without building anything.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Checked;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_unit<E>(self) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
                while seq.next_element::<Checked>()?.is_some() {}
                Ok(Checked)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
                while map.next_entry::<Checked, Checked>()?.is_some() {}
                Ok(Checked)
            }
        }
        d.deserialize_any(V)
    }
}
