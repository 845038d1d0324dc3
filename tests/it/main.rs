//! The one integration-test binary: every CLI test runs the real binaries against a hermetic
//! [`env::TestEnv`] (temp HOME, state dir, git repositories built with the git CLI).

// Test and bench fixtures write with plain std::fs (clippy.toml bans it in the library).
#![allow(clippy::disallowed_methods)]

mod action;
mod agent_eval;
mod agent_validate;
mod approval;
mod boundary;
mod bundle_corpus;
mod cli_hints;
mod cli_reference;
mod config_init;
mod doc_links;
mod dwp_abilities;
mod dwp_config;
mod dwp_fixtures;
mod dwp_host;
mod dwp_manifest;
mod dwp_onboard;
mod dwp_resources;
#[allow(dead_code)] // helpers used by some test modules only
mod env;
#[allow(dead_code)] // helpers used by some test modules only
mod fake_model;
mod fence;
mod git_trust;
mod help_exit_codes;
mod hooks;
mod init;
mod library_entry;
mod lineage;
mod lsp;
mod mcp;
mod mcp_conformance;
mod mcp_fence;
mod mcp_hostile;
mod mcp_http;
mod mcp_login;
mod mcp_npm;
mod needs;
mod policy_check;
mod report;
mod run_anthropic;
mod run_bad_input;
mod run_cache_stable;
mod run_canary;
mod run_compaction;
mod run_context;
mod run_cost;
mod run_leftovers;
mod run_loop;
mod run_provider_options;
mod run_recovery;
mod run_repeat;
mod run_schema;
mod run_secrets;
mod run_show;
mod run_sigkill;
mod run_status;
mod run_stream;
mod run_support;
mod run_transient;
mod run_verify;
#[allow(dead_code)] // shared with benches/bundle.rs
mod session_builder;
mod session_bundle;
mod session_remote;
mod session_remote_crash;
mod session_remote_ssh;
mod session_verify;
mod snapshots;
mod state_damage;
mod task;
mod task_bundle;
mod task_leftovers;
mod telemetry;
mod workspace_resume;
