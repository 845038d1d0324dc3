//! Plan records: the folder, the live contract, the journal and the evidence sidecar.
//!
//! Plans written by other DWP tooling (v6 and v7) must read unchanged, so every format here
//! mirrors the published schemas exactly (docs/dwp-spec.md, "Files and the plan folder", "The contract", "The journal") and everything hashed goes through
//! [`crate::canonical`].

mod check;
pub mod contract;
pub mod evidence;
pub mod folder;
pub mod journal;
pub mod writer;

pub use contract::{Contract, Generation};
pub use folder::Plan;
pub use journal::{Event, EventType, Journal};
