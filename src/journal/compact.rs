//! Compact forms of the parts of an operation's live state that are many and rarely read.
//!
//! A run's journal can hold hundreds of thousands of operations, and `run show` and every
//! resume fold all of them ([`super::OpTable`]). A parsed [`Value`] costs about ten times the
//! bytes of its JSON text (an ordered map per object, a node per value), and a `Vec` per
//! operation for a list of at most six phases costs an allocation each; these types keep the
//! same information, serialize to the same bytes, and cost a fraction of the memory.

use std::fmt;

use serde::{Serialize, Serializer};
use serde_json::Value;

use super::OpPhase;

/// A JSON value kept as its compact text (a tool call's arguments). Serializes exactly as the
/// value it was made from: the text is that value's compact serialization, parsed back when
/// written out (`float_roundtrip` makes the round trip exact).
#[derive(Clone, PartialEq, Eq)]
pub struct JsonText(Box<str>);

impl JsonText {
    pub fn new(value: &Value) -> JsonText {
        JsonText(value.to_string().into_boxed_str())
    }

    /// The compact JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value back. The text was written from a [`Value`], so it always parses.
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

impl From<Value> for JsonText {
    fn from(value: Value) -> JsonText {
        JsonText::new(&value)
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for JsonText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

/// Every phase an operation went through, in order, inline. The state machine allows at most
/// six (`AwaitingApproval → Approved → Started → OutcomeUnknown → Resolved → Settled`), and only
/// ever appends. Serializes as
/// the list of phases.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Phases {
    /// Slots past `len` stay `Started`, so equal histories compare equal.
    list: [OpPhase; 6],
    len: u8,
}

impl Phases {
    /// A history that starts with `first`.
    pub fn new(first: OpPhase) -> Phases {
        let mut list = [OpPhase::Started; 6];
        list[0] = first;
        Phases { list, len: 1 }
    }

    /// Appends `next`. The state machine never takes a seventh phase ([`OpPhase::allows`]); one
    /// past that would be a bug, and is not recorded rather than panicking.
    pub fn push(&mut self, next: OpPhase) {
        debug_assert!(usize::from(self.len) < self.list.len(), "a seventh phase");
        if let Some(slot) = self.list.get_mut(usize::from(self.len)) {
            *slot = next;
            self.len += 1;
        }
    }

    pub fn as_slice(&self) -> &[OpPhase] {
        &self.list[..usize::from(self.len)]
    }
}

impl fmt::Debug for Phases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

impl Serialize for Phases {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.as_slice().serialize(serializer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn phases_serialize_as_the_list() {
        let mut p = Phases::new(OpPhase::Started);
        p.push(OpPhase::OutcomeUnknown);
        p.push(OpPhase::Resolved);
        p.push(OpPhase::Settled);
        assert_eq!(
            serde_json::to_string(&p).unwrap(),
            serde_json::to_string(&vec![
                OpPhase::Started,
                OpPhase::OutcomeUnknown,
                OpPhase::Resolved,
                OpPhase::Settled
            ])
            .unwrap()
        );
        assert_ne!(p, Phases::new(OpPhase::Started));
    }

    #[test]
    fn json_text_serializes_like_its_value() {
        for v in [
            json!({"b": 1, "a": [1.5, -0.0, 1e300, "é\u{1}\"", null, true], "c": {}}),
            json!({"n": 18446744073709551615u64, "m": -9223372036854775808i64, "f": 0.1}),
            json!("x"),
        ] {
            let t = JsonText::new(&v);
            assert_eq!(
                serde_json::to_string(&t).unwrap(),
                serde_json::to_string(&v).unwrap()
            );
            assert_eq!(
                serde_json::to_string_pretty(&t).unwrap(),
                serde_json::to_string_pretty(&v).unwrap()
            );
            assert_eq!(t.value(), v);
        }
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec((".{0,4}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any value kept as text serializes to the same bytes and reads back equal.
        #[test]
        fn json_text_round_trips(v in arb_json()) {
            let t = JsonText::new(&v);
            prop_assert_eq!(serde_json::to_string(&t).unwrap(), serde_json::to_string(&v).unwrap());
            prop_assert_eq!(t.value(), v);
        }
    }
}
