//! The resource frame (docs/dwp-spec.md, "Host abilities", "The resource frame"): what a plan's declared limits have used,
//! what is reserved, whether dispatch must be refused or held, and which routing postures the
//! grants and abilities allow.
//!
//! Everything here is derived from the plan's own records (contract + journal, read through
//! [`crate::dwp::plan`]) and the effective abilities the caller computed
//! ([`crate::dwp::abilities`]); abilities are never written into a plan. The only writes are the
//! `LIMIT:` and `RESERVATION:` observations, and they go through the plan's one append path
//! ([`crate::dwp::plan::writer`]).

pub mod counters;
pub mod fold;
pub mod limits;
mod num;
mod records;
pub mod report;
pub mod reservations;
pub mod routing;

pub use num::Num;

use std::collections::BTreeMap;

/// The effective abilities as the resource frame sees them: the eight booleans and, for each,
/// where a `true` comes from (`host`, `record:…`, `addon:<key>`).
#[derive(Debug, Clone, Default)]
pub struct Abilities {
    pub values: BTreeMap<String, bool>,
    pub sources: BTreeMap<String, Vec<String>>,
}

impl Abilities {
    pub fn has(&self, ability: &str) -> bool {
        self.values.get(ability).copied().unwrap_or(false)
    }
}

/// The actor identity of every `LIMIT:` and `RESERVATION:` observation (docs/dwp-spec.md, "The journal"):
/// the reference tooling's helper identity, kept so content deduplication and readers agree
/// across tools.
pub const HELPER_IDENTITY: &str = "dwp resources.py";
