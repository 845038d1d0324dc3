//! The Builder (kxen-agent.md §4): without `--agent`, one tool-less, time-limited call to the
//! `planning` model role turns the task into a DCPAgent definition.
//!
//! The Builder cannot run tools, grant permissions or pick a provider: its only output is text
//! that must pass the same validator as a file, and it may only choose capabilities from the
//! permitted catalog. Nothing is written here; the caller builds the lock from the result.

use std::time::Duration;

use crate::agent::{self, AgentDefinition};
use crate::error::{Error, ErrorKind, Result};
use crate::provider::{ChatMessage, ModelConfig, ModelRequest};
use crate::run::contract::strip_fence;

/// The model role the Builder calls.
pub const PLANNING_ROLE: &str = "planning";

/// The Builder's time limit.
pub const BUILDER_TIMEOUT: Duration = Duration::from_secs(120);

/// How the Builder's output is named in validation messages.
const SOURCE: &str = "the Builder's definition";

/// Asks the planning model for a definition for `task`, choosing only from `catalog`.
pub fn build_definition(
    config: &ModelConfig,
    task: &str,
    catalog: &[String],
) -> Result<AgentDefinition> {
    let provider = config.provider_for(PLANNING_ROLE)?;
    let messages = [
        ChatMessage::system(builder_prompt(catalog)),
        ChatMessage::user(task.to_string()),
    ];
    let request = ModelRequest {
        role: PLANNING_ROLE,
        messages: &messages,
        tools: &[],
        timeout: Some(BUILDER_TIMEOUT),
        attempt_mark: None,
        call_mark: None,
        task: None,
        observer: None,
        cancel: None,
    };
    let response = provider.complete(&request, 0).map_err(|e| {
        let kind = if e.kind == ErrorKind::InvalidInput {
            ErrorKind::InvalidInput
        } else {
            ErrorKind::External
        };
        let mut err = Error::wrap(kind, "the Builder's model call (role `planning`) failed", e);
        err.hints.clear();
        err.with_hint(
            "pass --agent FILE to use a definition you wrote, or fix the planning provider",
        )
    })?;
    let text = response.text.trim();
    let body = strip_fence(text).unwrap_or(text);
    let definition = agent::parse_definition(body.as_bytes(), SOURCE).map_err(|e| {
        let mut err = Error::wrap(
            ErrorKind::InvalidInput,
            "the Builder returned an invalid definition",
            e,
        );
        err.hints.clear();
        err.with_hint(
            "pass --agent FILE to use a definition you wrote (`kxen-agent agent init` writes one)",
        )
    })?;
    let caps = &definition.spec.capabilities;
    let outside: Vec<&String> = caps
        .required
        .iter()
        .chain(&caps.optional)
        .filter(|c| !catalog.contains(c))
        .collect();
    if !outside.is_empty() {
        return Err(Error::invalid(format!(
            "the Builder chose capabilities outside the permitted catalog: {} (permitted: {})",
            outside.iter().map(|c| c.as_str()).collect::<Vec<_>>().join(", "),
            catalog.join(", ")
        ))
        .with_hint("pass --agent FILE, or widen the policy (--policy FILE, --allow-shell) if that is intended"));
    }
    Ok(definition)
}

/// The Builder's instructions: the schema, the catalog and the limits.
fn builder_prompt(catalog: &[String]) -> String {
    format!(
        "You write DCPAgent definitions for the kxen-agent runtime. The user message is a task for \
a coding agent working in a repository. Reply with ONE definition in YAML and nothing else \
(no prose; a single ```yaml fence is tolerated).\n\n\
Schema (no other fields are allowed):\n\
apiVersion: kxen.ai/v1alpha1\n\
kind: DCPAgent\n\
metadata:\n  name: short_name_with_letters_digits_underscores\n  description: one sentence\n\
spec:\n  objective: the agent's stable duty (the task itself is given separately)\n\
  instructions: [non-empty list of short, distinct steps]\n\
  successCriteria: [list of checkable criteria]\n\
  capabilities: {{required: [...], optional: [...]}}\n\
  execution: {{modelRole: execution, maxTurns: 32, maxPureRetries: 1}}\n\
  output: {{format: text, requiredFields: []}}\n\n\
Rules:\n\
- Choose capabilities ONLY from this permitted catalog: [{}]. Require only what the task cannot do \
without; put the rest under optional. Never list a capability twice.\n\
- Do not name a model, provider, account, key or any platform (GitHub, issues, pull requests).\n\
- The definition cannot grant permissions; the runtime policy decides them.",
        catalog.join(", ")
    )
}
