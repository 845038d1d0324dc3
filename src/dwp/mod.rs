//! Deep Work Plan 7: the committed addon registry, addon descriptors, read-only detection and
//! effective abilities (spec: `dwp.md` §6–§8, `dwp-details.md` §4–§7); plan records, the
//! per-task context manifest and accounting (`dwp.md` §1–§5, `dwp-details.md` §1–§3).

pub mod abilities;
pub mod accounting;
pub mod addons;
pub mod backfill;
pub mod config;
pub mod manifest;
pub mod onboard;
pub mod plan;
pub mod pyfmt;
pub mod repo;
pub mod resources;
