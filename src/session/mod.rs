//! Sessions on disk: metadata, the conversation, the run lease, and creation that is all or
//! nothing.
//!
//! A Session directory appears under `sessions/` only when it is complete: it is built in a
//! staging directory and renamed into place ([`store::create`]). Everything that changes an
//! existing Session happens under its run lease ([`lease::Lease`]).

pub mod diff;
pub mod fork;
pub mod lease;
mod leftovers;
pub mod messages;
pub mod meta;
pub mod run_record;
pub mod store;
pub mod verify;
pub mod view;

pub use lease::{Lease, LeaseRecord, hostname};
pub(crate) use messages::is_zero;
pub use messages::{CallRecord, Compacted, Message, MessageLog, Role, UsageRecord};
pub use meta::{ForkKind, ForkPoint, HistoryEntry, SessionMeta, TaskParent};
