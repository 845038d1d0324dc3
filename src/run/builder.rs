//! The Builder (docs/spec.md §4): without `--agent`, one tool-less, time-limited call to the
//! `planning` model role turns the task into a DCPAgent definition.
//!
//! The Builder cannot run tools, grant permissions or pick a provider: its only output is text
//! that must pass the same validator as a file, and it may only choose capabilities from the
//! permitted catalog. Nothing is written here; the caller builds the lock from the result.

use std::time::Duration;

use crate::agent::{self, AgentDefinition};
use crate::config::ModelConfig;
use crate::error::{Error, ErrorKind, Result};
use crate::provider::{ChatMessage, ModelRequest};
use crate::run::contract::strip_fence;

/// The model role the Builder calls.
pub const PLANNING_ROLE: &str = "planning";

/// The Builder's time limit.
pub const BUILDER_TIMEOUT: Duration = Duration::from_secs(120);

/// How much of an invalid reply the error quotes: enough to see a stray line of prose.
const REPLY_PREVIEW_CHARS: usize = 80;

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
        timeout: Some(BUILDER_TIMEOUT),
        ..ModelRequest::plain(PLANNING_ROLE, &messages, &[])
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
    let body = definition_text(text);
    let definition = agent::parse_definition(body.as_bytes(), SOURCE).map_err(|e| {
        let mut err = Error::wrap(
            ErrorKind::InvalidInput,
            format!(
                "the Builder returned an invalid definition (its reply began: {:?})",
                crate::text::preview(text, REPLY_PREVIEW_CHARS)
            ),
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

/// The YAML of a reply: the reply itself, or the body of its one fenced block. Real models
/// (llama.cpp's small coders, for one) wrap the definition in prose or leave the closing fence
/// off when they run out of tokens; one block is unambiguous, two or more are not, and then the
/// reply is parsed whole so the error names what the model sent.
fn definition_text(reply: &str) -> &str {
    if let Some(body) = strip_fence(reply) {
        return body;
    }
    let fences: Vec<usize> = line_starts(reply)
        .filter(|&at| reply[at..].starts_with("```"))
        .collect();
    let body_after = |open: usize| reply[open..].find('\n').map(|nl| open + nl + 1);
    match fences.as_slice() {
        [open, close] => match body_after(*open) {
            Some(start) if start <= *close => reply[start..*close].trim(),
            _ => reply,
        },
        [open] if *open == 0 => body_after(0).map_or(reply, |start| reply[start..].trim()),
        _ => reply,
    }
}

/// The byte offset of every line of `text`.
fn line_starts(text: &str) -> impl Iterator<Item = usize> + '_ {
    std::iter::once(0).chain(text.match_indices('\n').map(|(at, _)| at + 1))
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

#[cfg(test)]
mod tests {
    use super::definition_text;

    #[test]
    fn a_bare_reply_is_parsed_whole() {
        assert_eq!(definition_text("kind: DCPAgent"), "kind: DCPAgent");
    }

    #[test]
    fn a_reply_that_is_one_fence_gives_its_body() {
        assert_eq!(definition_text("```yaml\nkind: A\n```"), "kind: A");
    }

    #[test]
    fn prose_around_one_fenced_block_is_dropped() {
        let reply = "Here it is:\n```yaml\nkind: A\nspec: {}\n```\nThis agent fixes it.";
        assert_eq!(definition_text(reply), "kind: A\nspec: {}");
    }

    #[test]
    fn an_unclosed_opening_fence_gives_the_rest() {
        assert_eq!(definition_text("```yaml\nkind: A\n"), "kind: A");
    }

    #[test]
    fn two_blocks_are_ambiguous_and_parsed_whole() {
        let reply = "```yaml\nkind: A\n```\nor\n```yaml\nkind: B\n```";
        assert_eq!(definition_text(reply), reply);
    }

    #[test]
    fn hostile_fences_never_panic() {
        for reply in [
            "```",
            "```\n```",
            "x\n```",
            "```é\n",
            "\n```\n```\n```",
            "````\n",
        ] {
            let _ = definition_text(reply);
        }
    }
}
