//! kxen: the library behind the `kxen-agent` and `dwp` binaries.
//!
//! `kxen-agent` runs DCPAgents durably next to git (spec: `docs/spec.md`); `dwp` is the Deep Work
//! Plan 7 resources-and-abilities layer (spec: `docs/dwp-spec.md`). Everything but argument parsing and
//! rendering lives here; only the [`cli`] module prints.

// Unsafe code only where libc is needed, each place with its own narrow, commented `allow`.
#![deny(unsafe_code)]
// Test code builds its fixtures with plain std::fs writes; the library itself writes through fsx
// (clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod agent;
pub mod blobs;
pub mod bundle;
pub mod canonical;
pub mod cli;
pub mod clock;
pub mod config;
pub mod dwp;
pub mod error;
pub mod events;
pub mod fsx;
pub mod git;
pub mod hash;
pub mod hooks;
pub mod host;
pub mod ids;
pub mod journal;
pub mod lsp;
pub mod mcp;
pub mod net;
pub mod policy;
mod process;
pub mod provider;
pub mod report;
pub mod run;
pub mod sandbox;
pub mod secrets;
pub mod session;
pub mod state;
pub mod sync;
pub mod telemetry;
pub mod templates;
pub mod text;
pub mod tools;
pub mod usage;

pub use error::{Error, ErrorKind, Result};

// The credential modules' earlier paths, kept so callers written before they moved into
// `secrets` build unchanged.
pub use secrets::redact;
pub use secrets::snapshot as own_env;
