//! Token counts a provider reports for a model call: recorded with each message, summed per run
//! and Session, shown in events and spans. Plain data at the ground floor, so every layer that
//! counts tokens can name it.

use serde::{Deserialize, Serialize};

/// Tokens reported by the provider for one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UsageRecord {
    /// Every prompt token of the call, cached ones included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of `input_tokens`, those read from the provider's prompt cache (absent when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Of `input_tokens`, those written to the provider's prompt cache (absent when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
}

/// serde's `skip_serializing_if` for a count that is absent when 0.
pub fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl UsageRecord {
    pub fn add(&mut self, other: UsageRecord) {
        // Saturating: a provider's (or a hand-edited file's) absurd count must not wrap or panic.
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
    }
}
