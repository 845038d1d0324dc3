//! Runs: their state on disk and the agent loop that drives them.

pub mod state;

pub use state::{FailReason, RunResult, RunState, RunStatus};
pub mod agent_loop;
pub mod builder;
pub mod contract;
pub mod create;
pub mod events;
pub mod prompt;
pub mod resolve;
pub mod resume;
pub mod settle;
