//! Deep Work Plan 7: the committed addon registry, addon descriptors, read-only detection and
//! effective abilities (spec: `dwp.md` §6–§8, `dwp-details.md` §4–§7).

pub mod abilities;
pub mod addons;
pub mod config;
pub mod onboard;
pub mod repo;
