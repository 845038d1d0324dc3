//! Whether a Session gets `lsp` (creation), and whether its servers are still the locked ones
//! (resume).
//!
//! `lsp` is granted only when the runtime config defines at least one `[lsp.NAME]`: the
//! registry never advertises a tool that cannot work. The lock then records every configured
//! server by name and entry hash ([`ServerConfig::entry_hash`]: argv, extensions, options,
//! fence); on resume any added, removed or changed server is drift (exit 6).

use std::collections::BTreeMap;

use super::{CAPABILITY, ServerConfig};
// Up to `agent` (a floor above): granting `lsp` is writing it into the Session's lock, whose
// type `agent` owns; the lock in turn knows nothing of language servers.
use crate::agent::DcpAgentLock;
use crate::error::{Error, Result};

/// Grants or drops `lsp` in `lock` given the configured servers; returns warnings. A required
/// `lsp` without a server is exit 6 (nothing is written).
pub fn grant(
    lock: &mut DcpAgentLock,
    configs: &BTreeMap<String, ServerConfig>,
) -> Result<Vec<String>> {
    if !lock.capabilities.iter().any(|c| c == CAPABILITY) {
        return Ok(Vec::new());
    }
    if configs.is_empty() {
        let why = "`lsp` needs a language server, and the runtime config defines none";
        if lock
            .definition
            .spec
            .capabilities
            .required
            .iter()
            .any(|c| c == CAPABILITY)
        {
            return Err(
                Error::policy(format!("{why}; no session was created")).with_hint(
                    "add an [lsp.NAME] table with its command and extensions to the runtime config \
                 (see docs/lsp.md), or make `lsp` optional",
                ),
            );
        }
        lock.capabilities.retain(|c| c != CAPABILITY);
        return Ok(vec![format!("{why}; the optional capability is dropped")]);
    }
    lock.lsp_servers = locked(configs);
    Ok(Vec::new())
}

/// Name → entry hash of every configured server.
pub fn locked(configs: &BTreeMap<String, ServerConfig>) -> BTreeMap<String, String> {
    configs
        .iter()
        .map(|(n, c)| (n.clone(), c.entry_hash()))
        .collect()
}

/// Refuses (exit 6, with a diff) unless the configured servers are exactly the locked ones.
/// Sessions without `lsp` never drift.
pub fn check_drift(lock: &DcpAgentLock, configs: &BTreeMap<String, ServerConfig>) -> Result<()> {
    if !lock.capabilities.iter().any(|c| c == CAPABILITY) {
        return Ok(());
    }
    let now = locked(configs);
    let mut diff = Vec::new();
    for (name, hash) in &lock.lsp_servers {
        match now.get(name) {
            None => diff.push(format!(
                "- [lsp.{name}] (locked {hash}; gone from the runtime config)"
            )),
            Some(h) if h != hash => {
                diff.push(format!("~ [lsp.{name}] changed: locked {hash}, now {h}"))
            }
            Some(_) => {}
        }
    }
    for (name, hash) in &now {
        if !lock.lsp_servers.contains_key(name) {
            diff.push(format!(
                "+ [lsp.{name}] ({hash}; added to the runtime config, not locked)"
            ));
        }
    }
    if diff.is_empty() {
        return Ok(());
    }
    Err(Error::policy(format!(
        "LSP drift: the language servers locked when the session was created changed\n{}",
        diff.join("\n")
    ))
    .with_hint("restore the [lsp.…] tables as they were; a session's tools never change")
    .with_hint("to use the changed servers, start a new session"))
}
