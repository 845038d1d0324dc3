//! The ground floor of credentials: which environment variables are secrets, the one snapshot of
//! the environment kxen-agent started with (credentials wiped from the process), the filtered
//! environment every child process gets, and redaction of secret values from everything that is
//! written or shown.
//!
//! Uses nothing of the crate above it (not even `error`: [`snapshot::WipeFailed`] is its own
//! error), so that the error type, the config, the fence and the tools can all rely on it.
//!
//! - [`names`]: the model-provider key names and the rules for a `passEnv` entry;
//! - [`rules`]: what makes a variable sensitive, and the filtered environment of a child;
//! - [`snapshot`]: the start-up snapshot and the wipe of `/proc/self/environ`;
//! - [`redact`]: replacing every secret value (and URL userinfo) in text.

pub mod names;
pub mod redact;
pub mod rules;
pub mod snapshot;

pub use names::{check_pass_env, is_provider_credential, is_valid_env_name};
pub use rules::{child_env, is_provider_key_env, register_provider_key_env};
