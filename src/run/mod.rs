//! Runs: their state on disk and the agent loop that drives them.

pub mod state;

pub use state::{FailReason, RunResult, RunState, RunStatus};
pub mod events;
