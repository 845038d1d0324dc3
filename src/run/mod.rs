//! Runs: the agent loop that drives them. Their record on disk (`run.json`) is a Session file,
//! [`crate::session::run_record`].

/// The run record's old path, kept so code written before it moved below `session/` builds.
pub use crate::session::run_record as state;

pub use crate::session::run_record::{FailReason, RunResult, RunState, RunStatus};
pub use prepared::Prepared;
pub mod agent_loop;
pub mod approval;
pub mod builder;
pub mod children;
pub mod compaction;
pub mod context;
pub mod contract;
pub mod conversation;
pub mod create;
pub mod entry;
/// The run's events live at the ground floor ([`crate::events`]) so that their consumers (the
/// renderer, telemetry) need not import the run; the old path still names them.
pub use crate::events;
pub mod operator;
pub mod prepared;
pub mod prompt;
pub mod repeat;
pub mod resolve;
pub mod resume;
pub mod services;
pub mod settle;
pub mod verification;

/// Appended to every hint that prints a `--resume` command without knowing this invocation's
/// flags: a resume with different policy flags is refused as drift (exit 6).
pub const SAME_FLAGS: &str = "with the --policy/--allow-shell/--allow-mcp/--pass-env and --config the Session was created with";
