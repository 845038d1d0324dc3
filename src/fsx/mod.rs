//! The durable file layer: the only code in the crate that writes files.
//!
//! Two ways to change state, and no third:
//! - [`write_atomic`]: temp file in the same directory, write, fsync, rename, fsync the directory.
//!   Readers see the old bytes or the new bytes, never a mix.
//! - [`append_line`]: one `write` of a whole line, then fsync. Readers ([`read_jsonl`]) detect a
//!   torn last line (a crash mid-append) and ignore it; damage anywhere else is corrupt state.
//!
//! Append-only logs that must be verifiable end to end (messages, tool journals) go through
//! [`ChainWriter`]: each line carries the hash of the line before it ([`chain`]).
//!
//! Locks ([`FileLock`]) are OS advisory locks on dedicated lock files that are never deleted, so
//! the kernel releases them when a holder dies.

// The one place that writes files with std::fs (clippy.toml bans it everywhere else).
#![allow(clippy::disallowed_methods)]

mod append;
mod atomic;
pub mod chain;
pub mod failpoint;
mod lock;
mod tree;

pub use append::{
    JsonlFile, TornTail, append_line, append_lines, append_lines_lazy, read_jsonl,
    read_jsonl_values, repair_torn_tail, sync_data, terminate_last_line,
};
pub use atomic::{
    create_dir_private, create_dir_with_mode, create_new, fsync_dir, write_atomic,
    write_atomic_json, write_atomic_stream, write_atomic_stream_owned,
};
pub use chain::{ChainEnd, ChainFile, ChainWriter, read_chain, visit_chain, visit_chain_from};
pub use lock::{FileLock, LockWait};
pub use tree::{
    StagedFile, create_staged_dir, exchange_dirs, remove_empty_dir, remove_file,
    remove_staging_dir, rename_dir_into_place, rename_file, rename_file_unsynced,
    replace_staged_json, sync_staged, write_staged,
};

/// File mode for state files: readable by the owner only (they hold task text and tool output).
pub const STATE_FILE_MODE: u32 = 0o600;
/// Directory mode for the state dir and its children.
pub const STATE_DIR_MODE: u32 = 0o700;
