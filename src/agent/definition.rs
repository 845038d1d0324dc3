//! The DCPAgent definition (docs/spec.md §3) as serde types.
//!
//! Deserializing *is* validating: every rule of §3 runs inside the visitors of [`super::rules`],
//! so a value of [`AgentDefinition`] is always valid, whether it came from YAML, from a lock in
//! `session.json` or from the Builder. Running the rules inside the visitors (rather than after
//! parsing) is what lets `serde_norway` attach the field path and the line/column of the
//! offending value to each message.
//!
//! Serialization is the canonical form: fields in schema order, every default filled in, the
//! optional `description` and `maxWallClockMs` omitted when absent (see
//! [`AgentDefinition::canonical_json`]).

use serde::{Deserialize, Deserializer, Serialize};

use super::rules;
pub use crate::policy::Usd;
/// `execution.modelRole` when the definition does not name one.
pub const DEFAULT_MODEL_ROLE: &str = "execution";
/// `execution.maxTurns` when the definition does not set it.
pub const DEFAULT_MAX_TURNS: u32 = 32;
/// `execution.maxPureRetries` when the definition does not set it.
pub const DEFAULT_MAX_PURE_RETRIES: u32 = 1;

/// A validated DCPAgent definition, every default filled in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentDefinition {
    #[serde(deserialize_with = "rules::api_version")]
    pub api_version: String,
    #[serde(deserialize_with = "rules::kind")]
    pub kind: String,
    pub metadata: Metadata,
    pub spec: Spec,
}

/// `metadata`: the definition's name (not a provider, account or platform identity).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Metadata {
    #[serde(deserialize_with = "rules::name")]
    pub name: String,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "rules::description"
    )]
    pub description: Option<String>,
}

/// `spec`: the agent's stable duty and what it may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Spec {
    /// The stable duty; each run's task is a separate user input.
    #[serde(deserialize_with = "rules::objective")]
    pub objective: String,
    #[serde(deserialize_with = "rules::instructions")]
    pub instructions: Vec<String>,
    #[serde(default, deserialize_with = "rules::success_criteria")]
    pub success_criteria: Vec<String>,
    pub capabilities: Capabilities,
    #[serde(default)]
    pub execution: Execution,
    #[serde(default)]
    pub output: Output,
}

/// `spec.capabilities`: names only; which of them a session gets is decided by the policy.
///
/// Deserialized through [`RawCapabilities`] and [`rules::capability_lists`] (at least one
/// capability, none listed in both lists).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// Session creation fails unless every one of these is permitted.
    pub required: Vec<String>,
    /// Granted where permitted, silently dropped otherwise.
    pub optional: Vec<String>,
}

/// `spec.execution`: the model role and the budgets (a policy may only lower them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Execution {
    #[serde(default = "default_model_role", deserialize_with = "rules::model_role")]
    pub model_role: String,
    #[serde(default = "default_max_turns", deserialize_with = "rules::max_turns")]
    pub max_turns: u32,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "rules::max_wall_clock_ms"
    )]
    pub max_wall_clock_ms: Option<u64>,
    #[serde(
        default = "default_max_pure_retries",
        deserialize_with = "rules::max_pure_retries"
    )]
    pub max_pure_retries: u32,
    /// **(beyond the spec)** How often the same tool call may be repeated with nothing changed
    /// in between before the run ends `loopDetected` ([`crate::run::repeat`]); absent: 3, `0`:
    /// off. Omitted from the canonical JSON when absent, so existing definitions hash as before.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "rules::max_repeated_calls"
    )]
    pub max_repeated_calls: Option<u32>,
    /// **(beyond the spec)** The most the run may spend on model calls, in US dollars, from the
    /// provider's reported usage and the config's `price` (its `task` children included); the
    /// run ends `budgetExhausted` before a model call once it is spent. Omitted from the
    /// canonical JSON when absent, so existing definitions hash as before.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "rules::max_cost_usd"
    )]
    pub max_cost_usd: Option<Usd>,
    /// **(beyond the spec)** Verification before completion ([`crate::run::verification`]):
    /// `true` answers a final answer given after a `write`/`edit` that no `exec` followed, once,
    /// with a reminder to run the check the task names. Absent or `false`: off. Omitted from the
    /// canonical JSON when absent, so existing definitions hash (and run) as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_before_completion: Option<bool>,
    /// **(beyond the spec)** The environment preamble ([`crate::run::context`]): `true` gives
    /// the first turn a short description of the workspace (a bounded file listing, `git
    /// status --short`, the check the task quotes), computed once and recorded with the task
    /// message. Absent or `false`: off. Omitted from the canonical JSON when absent, so existing
    /// definitions hash (and run) as before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_preamble: Option<bool>,
}

impl Default for Execution {
    fn default() -> Self {
        Execution {
            model_role: default_model_role(),
            max_turns: DEFAULT_MAX_TURNS,
            max_wall_clock_ms: None,
            max_pure_retries: DEFAULT_MAX_PURE_RETRIES,
            max_repeated_calls: None,
            max_cost_usd: None,
            verify_before_completion: None,
            environment_preamble: None,
        }
    }
}

fn default_model_role() -> String {
    DEFAULT_MODEL_ROLE.to_string()
}
fn default_max_turns() -> u32 {
    DEFAULT_MAX_TURNS
}
fn default_max_pure_retries() -> u32 {
    DEFAULT_MAX_PURE_RETRIES
}

/// `spec.output`: the contract the final output must meet.
///
/// Deserialized through [`RawOutput`] and [`rules::output_fields`] (`format: json` needs
/// required fields).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Output {
    pub format: OutputFormat,
    /// With `format: json`, the final output must be one JSON object holding all of these.
    pub required_fields: Vec<String>,
    /// **(beyond the spec)** With `format: json`, a JSON Schema the final object must match
    /// ([`super::schema`]). A definition file may name a file instead (a path relative to it):
    /// [`super::load_definition`] puts the file's schema here, so a lock always holds the
    /// object itself. Omitted from the canonical JSON when absent, so existing definitions hash
    /// as before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<serde_json::Value>,
}

/// `spec.output.format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    #[default]
    Text,
    Json,
}

/// `spec.capabilities` as written, before the cross-list rules.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCapabilities {
    #[serde(default, deserialize_with = "rules::capability_list")]
    required: Vec<String>,
    #[serde(default, deserialize_with = "rules::capability_list")]
    optional: Vec<String>,
}

/// `spec.output` as written, before the cross-field rule.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawOutput {
    #[serde(default)]
    format: OutputFormat,
    #[serde(default, deserialize_with = "rules::required_fields")]
    required_fields: Vec<String>,
    #[serde(default)]
    schema: Option<serde_json::Value>,
}

impl<'de> Deserialize<'de> for Capabilities {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(rules::Checked::new(
            "a mapping with `required` and `optional` lists",
            |raw: RawCapabilities| {
                rules::capability_lists(&raw.required, &raw.optional)?;
                Ok(Capabilities {
                    required: raw.required,
                    optional: raw.optional,
                })
            },
        ))
    }
}

impl<'de> Deserialize<'de> for Output {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(rules::Checked::new(
            "a mapping with `format`, `requiredFields` and `schema`",
            |raw: RawOutput| {
                let json = raw.format == OutputFormat::Json;
                rules::output_fields(json, &raw.required_fields, raw.schema.as_ref())?;
                Ok(Output {
                    format: raw.format,
                    required_fields: raw.required_fields,
                    schema: raw.schema,
                })
            },
        ))
    }
}

impl AgentDefinition {
    /// The canonical bytes that are hashed: compact JSON (no whitespace), keys in schema order
    /// (`apiVersion, kind, metadata{name, description?}, spec{objective, instructions,
    /// successCriteria, capabilities{required, optional}, execution{modelRole, maxTurns,
    /// maxWallClockMs?, maxPureRetries}, output{format, requiredFields}}`), every default filled
    /// in (empty lists are written as `[]`), `description`/`maxWallClockMs` omitted when absent,
    /// strings as serde_json writes them (UTF-8, only `"`, `\` and control characters escaped).
    ///
    /// The minimal definition hashes to
    /// `sha256:b0f8eed214bd25b7c59fd33f16974631b683a8c6ea7a68fe0b727074ad13ab4b`, the vector
    /// shared with other DCPAgent tooling.
    pub fn canonical_json(&self) -> String {
        // Serializing plain strings, integers and lists cannot fail.
        serde_json::to_string(self).expect("a definition always serializes")
    }

    /// `sha256:` + lowercase hex SHA-256 of [`canonical_json`](Self::canonical_json).
    pub fn definition_hash(&self) -> String {
        crate::hash::sha256_prefixed(self.canonical_json().as_bytes())
    }

    /// The definition as a JSON value in canonical (schema) order.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a definition always serializes")
    }

    /// Re-checks every rule of §3 on a definition built or changed in memory (for instance after
    /// tightening), by running it through the same parser as a file. `source` names it in
    /// messages.
    pub fn validate(&self, source: &str) -> crate::Result<()> {
        super::parse_definition(self.canonical_json().as_bytes(), source).map(|_| ())
    }
}
