//! The validation rules of docs/spec.md §3, run inside serde visitors.
//!
//! Why visitors: `serde_norway` attaches the field path (`spec.instructions[2]`) and the
//! line/column of the value being deserialized to any error raised *while* that value is visited.
//! An error raised after a whole struct is built would only point at the enclosing mapping. So
//! each field rule is a plain function (`fn(&str) -> Result<()>`) wrapped in a small
//! visitor, list rules see each item with the items before it (duplicates and the item cap are
//! reported at the offending item), and the cross-field rules of `capabilities` and `output` run
//! in [`Checked::visit_map`], inside the mapping they concern.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::error::{Error, Result};

/// The only accepted `apiVersion`.
pub const API_VERSION: &str = "kxen.ai/v1alpha1";
/// The only accepted `kind`.
pub const KIND: &str = "DCPAgent";
/// Longest `spec.objective`, in characters.
pub const MAX_OBJECTIVE_CHARS: usize = 8000;
/// Longest instruction, in characters.
pub const MAX_INSTRUCTION_CHARS: usize = 8000;
/// Longest success criterion, in characters.
pub const MAX_CRITERION_CHARS: usize = 4000;
/// Longest `metadata.description`, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 2000;
/// Most items in `instructions` and `successCriteria`.
pub const MAX_ITEMS: usize = 128;
/// Longest capability name, in bytes.
pub const MAX_CAPABILITY_BYTES: usize = 256;
/// Longest `metadata.name`, in characters of `[A-Za-z0-9_-]`.
pub const MAX_NAME_CHARS: usize = 128;
/// Longest model role name.
pub const MAX_ROLE_CHARS: usize = 64;
/// Largest `maxTurns`.
pub const MAX_TURNS: u64 = 1024;
/// Largest `maxPureRetries`.
pub const MAX_PURE_RETRIES: u64 = 255;

type StrRule = fn(&str) -> Result<()>;
type IntRule = fn(u64) -> Result<()>;

// ---------------------------------------------------------------------------------------------
// The rules themselves: plain functions, reusable outside serde. Each says what is wrong with
// one value of the user's file, so its failure is an invalid input (exit 4) of the crate's
// `Error`; the message is a fragment (`must be …`) that serde puts behind the field's path.

fn rule_api_version(v: &str) -> Result<()> {
    if v == API_VERSION {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "must be `{API_VERSION}`, found {v:?}"
        )))
    }
}

fn rule_kind(v: &str) -> Result<()> {
    if v == KIND {
        Ok(())
    } else {
        Err(Error::invalid(format!("must be `{KIND}`, found {v:?}")))
    }
}

/// `metadata.name`: `^[A-Za-z0-9_-]{1,128}$`.
pub fn is_valid_name(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_NAME_CHARS
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn rule_name(v: &str) -> Result<()> {
    if is_valid_name(v) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{v:?} is not a valid name: use 1-{MAX_NAME_CHARS} characters of A-Z a-z 0-9 _ -"
        )))
    }
}

/// A model role names an entry of the runtime's role map: `^[A-Za-z0-9_-]{1,64}$`.
pub fn is_valid_model_role(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_ROLE_CHARS
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn rule_model_role(v: &str) -> Result<()> {
    if is_valid_model_role(v) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{v:?} is not a valid model role: use 1-{MAX_ROLE_CHARS} characters of A-Z a-z 0-9 _ - \
             (the runtime's config maps roles to models; the default is `execution`)"
        )))
    }
}

fn max_chars(v: &str, max: usize) -> Result<()> {
    let n = v.chars().count();
    if n > max {
        Err(Error::invalid(format!(
            "is {n} characters long; the limit is {max}"
        )))
    } else {
        Ok(())
    }
}

fn non_empty_text(v: &str, max: usize) -> Result<()> {
    if v.trim().is_empty() {
        return Err(Error::invalid("must not be empty"));
    }
    max_chars(v, max)
}

fn rule_description(v: &str) -> Result<()> {
    max_chars(v, MAX_DESCRIPTION_CHARS)
}
fn rule_objective(v: &str) -> Result<()> {
    non_empty_text(v, MAX_OBJECTIVE_CHARS)
}
fn rule_instruction(v: &str) -> Result<()> {
    non_empty_text(v, MAX_INSTRUCTION_CHARS)
}
fn rule_criterion(v: &str) -> Result<()> {
    non_empty_text(v, MAX_CRITERION_CHARS)
}

/// A capability name: non-empty, at most 256 bytes, no whitespace or control characters.
pub fn capability_name_error(v: &str) -> Option<String> {
    if v.is_empty() {
        Some("a capability name must not be empty".into())
    } else if v.len() > MAX_CAPABILITY_BYTES {
        Some(format!(
            "a capability name is at most {MAX_CAPABILITY_BYTES} bytes; this one has {}",
            v.len()
        ))
    } else if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        Some(format!(
            "{v:?} is not a valid capability name: no whitespace or control characters"
        ))
    } else {
        crate::mcp::capability_error(v)
    }
}

fn rule_capability(v: &str) -> Result<()> {
    capability_name_error(v).map_or(Ok(()), |why| Err(Error::invalid(why)))
}

fn rule_required_field(v: &str) -> Result<()> {
    if v.is_empty() {
        Err(Error::invalid("a required field name must not be empty"))
    } else {
        Ok(())
    }
}

fn rule_max_turns(v: u64) -> Result<()> {
    if (1..=MAX_TURNS).contains(&v) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "must be between 1 and {MAX_TURNS}, found {v}"
        )))
    }
}

fn rule_max_wall_clock_ms(v: u64) -> Result<()> {
    if v == 0 {
        Err(Error::invalid(
            "must be at least 1 (omit it for no wall-clock limit)",
        ))
    } else {
        Ok(())
    }
}

fn rule_max_pure_retries(v: u64) -> Result<()> {
    if v <= MAX_PURE_RETRIES {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "must be between 0 and {MAX_PURE_RETRIES}, found {v}"
        )))
    }
}

/// Largest `maxRepeatedCalls` (a loop detector that waits longer is not one).
const MAX_REPEATED_CALLS: u64 = 100;

fn rule_max_repeated_calls(v: u64) -> Result<()> {
    if v <= MAX_REPEATED_CALLS {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "must be between 0 (off) and {MAX_REPEATED_CALLS}, found {v}"
        )))
    }
}

// ---------------------------------------------------------------------------------------------
// `deserialize_with` entry points.

pub fn api_version<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_option(NotNull("`apiVersion`", Text(rule_api_version)))
}
pub fn kind<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_option(NotNull("`kind`", Text(rule_kind)))
}
pub fn name<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_option(NotNull("`name`", Text(rule_name)))
}
/// `description: ~` (YAML null) is the same as no description.
pub fn description<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    d.deserialize_option(Nullable(Text(rule_description)))
}
pub fn objective<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_option(NotNull("`objective`", Text(rule_objective)))
}
pub fn model_role<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_option(NotNull("`modelRole`", Text(rule_model_role)))
}
pub fn instructions<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_option(List {
        item: rule_instruction,
        max_items: Some(MAX_ITEMS),
        min_items: 1,
        what: "instruction",
    })
}
pub fn success_criteria<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_option(List {
        item: rule_criterion,
        max_items: Some(MAX_ITEMS),
        min_items: 0,
        what: "criterion",
    })
}
pub fn capability_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_option(List {
        item: rule_capability,
        max_items: None,
        min_items: 0,
        what: "capability",
    })
}
pub fn required_fields<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_option(List {
        item: rule_required_field,
        max_items: None,
        min_items: 0,
        what: "required field",
    })
}
pub fn max_turns<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    // The rule bounds the value to 1..=1024, so it fits.
    d.deserialize_u64(Int(rule_max_turns)).map(|v| v as u32)
}
/// `maxWallClockMs: ~` (YAML null) is the same as no wall-clock limit.
pub fn max_wall_clock_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    d.deserialize_option(Nullable(Int(rule_max_wall_clock_ms)))
}
/// `maxCostUsd`: a finite amount above 0 (`~`: no limit).
pub fn max_cost_usd<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<crate::policy::Usd>, D::Error> {
    let value = Option::<f64>::deserialize(d)?;
    match value {
        Some(v) => crate::policy::check_usd(v)
            .map(|()| Some(crate::policy::Usd(v)))
            .map_err(serde::de::Error::custom),
        None => Ok(None),
    }
}

/// `maxRepeatedCalls: ~` is the same as leaving it out (the default, 3).
pub fn max_repeated_calls<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    d.deserialize_option(Nullable(Int(rule_max_repeated_calls)))
        .map(|v| v.map(|v| v as u32))
}
pub fn max_pure_retries<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    d.deserialize_u64(Int(rule_max_pure_retries))
        .map(|v| v as u32)
}

// ---------------------------------------------------------------------------------------------
// Cross-field rules, run inside their mapping.

/// `spec.capabilities`: at least one capability, and none listed in both `required` and
/// `optional`.
pub fn capability_lists(required: &[String], optional: &[String]) -> Result<()> {
    if required.is_empty() && optional.is_empty() {
        return Err(Error::invalid(
            "lists no capability at all: name at least one in `required` or `optional` \
                    (for example `required: [read]`)",
        ));
    }
    if let Some(both) = optional.iter().find(|c| required.contains(c)) {
        return Err(Error::invalid(format!(
            "capability {both:?} is listed in both `required` and `optional`; keep one"
        )));
    }
    Ok(())
}

/// `spec.output`: `format: json` (`json_format`) needs at least one required field.
pub fn output_fields(
    json_format: bool,
    required_fields: &[String],
    schema: Option<&serde_json::Value>,
) -> Result<()> {
    if let Some(schema) = schema {
        if !json_format {
            return Err(Error::invalid(
                "`schema` needs `format: json` (it checks the final JSON object)",
            ));
        }
        // A path is read by `load_definition`, relative to the file; an object is checked here.
        if !schema.is_string()
            && let Some(why) = super::schema::problem(schema)
        {
            return Err(Error::invalid(format!("`schema` {why}")));
        }
        return Ok(());
    }
    if json_format && required_fields.is_empty() {
        return Err(Error::invalid(
            "`format: json` needs at least one entry in `requiredFields` (the keys the final \
             JSON object must hold), or a `schema`",
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Visitors.

/// A string checked by a rule.
struct Text(StrRule);

impl<'de> Visitor<'de> for Text {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        (self.0)(v).map_err(E::custom)?;
        Ok(v.to_owned())
    }
}

/// A value that must be there: YAML's plain `~`/`null` would otherwise read as the text "~".
/// The inner visitor reads a string or an integer; the label names the value in the message,
/// because serde_norway reports a null at the enclosing mapping or list, not at the field.
struct NotNull<V>(&'static str, V);

impl<'de, V: Scalar<'de>> Visitor<'de> for NotNull<V> {
    type Value = V::Value;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.1.expecting(f)
    }
    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        Err(E::custom(format!(
            "{} must not be null (write a value; quote it if you mean the text `~` or `null`)",
            self.0
        )))
    }
    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.visit_none()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        self.1.read(d)
    }
}

/// An optional value: null means absent.
struct Nullable<V>(V);

impl<'de, V: Scalar<'de>> Visitor<'de> for Nullable<V> {
    type Value = Option<V::Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.read(d).map(Some)
    }
}

/// How a scalar visitor asks the deserializer for its value once null is ruled out. Asking for
/// an integer lets a YAML reader parse `32` as a number; asking for a string keeps `123` as the
/// text "123".
trait Scalar<'de>: Visitor<'de> {
    fn read<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error>;
}

impl<'de> Scalar<'de> for Text {
    fn read<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Scalar<'de> for Int {
    fn read<D: Deserializer<'de>>(self, d: D) -> Result<u64, D::Error> {
        d.deserialize_u64(self)
    }
}

impl<'de> Scalar<'de> for Item<'_> {
    fn read<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

/// A non-negative integer checked by a rule.
struct Int(IntRule);

impl<'de> Visitor<'de> for Int {
    type Value = u64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a non-negative integer")
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        (self.0)(v).map_err(E::custom)?;
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        match u64::try_from(v) {
            Ok(v) => self.visit_u64(v),
            Err(_) => Err(E::custom(format!("must not be negative, found {v}"))),
        }
    }
}

/// A list of strings: each item checked by a rule, no duplicates, optionally capped.
struct List {
    item: StrRule,
    max_items: Option<usize>,
    min_items: usize,
    what: &'static str,
}

/// Lists are read through `deserialize_option`: a YAML null (`successCriteria: ~`) is an empty
/// list, like an empty value (`successCriteria:`) already is, and then meets the same
/// minimum-length rule.
impl<'de> Visitor<'de> for List {
    type Value = Vec<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a list of {} strings", self.what)
    }
    fn visit_none<E: de::Error>(self) -> Result<Vec<String>, E> {
        self.finish(Vec::new()).map_err(E::custom)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Vec<String>, E> {
        self.visit_none()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
        d.deserialize_seq(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        let mut items: Vec<String> = Vec::new();
        while let Some(item) = seq.next_element_seed(Item {
            list: &self,
            seen: &items,
        })? {
            items.push(item);
        }
        self.finish(items).map_err(de::Error::custom)
    }
}

impl List {
    fn finish(&self, items: Vec<String>) -> Result<Vec<String>> {
        if items.len() < self.min_items {
            return Err(Error::invalid(format!(
                "must list at least one {}",
                self.what
            )));
        }
        Ok(items)
    }
}

/// One list item; sees the items before it, so a duplicate is reported where it occurs.
struct Item<'a> {
    list: &'a List,
    seen: &'a [String],
}

impl<'de> DeserializeSeed<'de> for Item<'_> {
    type Value = String;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        let label = match self.list.what {
            "instruction" => "an instruction",
            "criterion" => "a criterion",
            "capability" => "a capability",
            _ => "a required field",
        };
        d.deserialize_option(NotNull(label, self))
    }
}

impl<'de> Visitor<'de> for Item<'_> {
    type Value = String;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a {} string", self.list.what)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<String, E> {
        if let Some(max) = self.list.max_items
            && self.seen.len() >= max
        {
            return Err(E::custom(format!(
                "more than {max} {} items; the limit is {max}",
                self.list.what
            )));
        }
        (self.list.item)(v).map_err(E::custom)?;
        if let Some(first) = self.seen.iter().position(|s| s == v) {
            return Err(E::custom(format!(
                "duplicate {} {v:?} (first listed as item {first})",
                self.list.what
            )));
        }
        Ok(v.to_owned())
    }
}

/// A mapping deserialized as `R` (which rejects unknown fields and duplicate keys), then
/// converted by a cross-field rule — inside the mapping, so errors point at it.
pub struct Checked<R, T> {
    expecting: &'static str,
    convert: fn(R) -> Result<T>,
    _raw: PhantomData<fn() -> R>,
}

impl<R, T> Checked<R, T> {
    pub fn new(expecting: &'static str, convert: fn(R) -> Result<T>) -> Self {
        Checked {
            expecting,
            convert,
            _raw: PhantomData,
        }
    }
}

impl<'de, R: Deserialize<'de>, T> Visitor<'de> for Checked<R, T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.expecting)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
        let raw = R::deserialize(MapAccessDeserializer::new(map))?;
        (self.convert)(raw).map_err(de::Error::custom)
    }
}
