//! Deep Work Plan 7: the committed addon registry, addon descriptors, read-only detection and
//! effective abilities (spec: `docs/dwp-spec.md`, "Host abilities" through "Addon descriptors and detection"); plan records, the
//! per-task context manifest and accounting (`docs/dwp-spec.md`, "Files and the plan folder" through "Four-quantity accounting").

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
