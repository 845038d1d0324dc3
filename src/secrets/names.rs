//! `passEnv` names: valid environment variable names that are never a model-provider credential.
//!
//! Provider keys reach only the model client (docs/spec.md §10); a policy that tried to hand one
//! to tool subprocesses is refused outright (exit 4) rather than filtered, so the mistake is seen.

/// Model-provider credential variables, upper case. Checked case-insensitively, together with
/// the provider-word rule in [`is_provider_credential`].
const PROVIDER_CREDENTIALS: &[&str] = &[
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_API_KEY",
    "XAI_API_KEY",
    "GROK_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GOOGLE_GENERATIVE_AI_API_KEY",
    "VERTEX_API_KEY",
    "MISTRAL_API_KEY",
    "CODESTRAL_API_KEY",
    "GROQ_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "AZURE_API_KEY",
    "COHERE_API_KEY",
    "CO_API_KEY",
    "TOGETHER_API_KEY",
    "TOGETHERAI_API_KEY",
    "FIREWORKS_API_KEY",
    "PERPLEXITY_API_KEY",
    "PPLX_API_KEY",
    "HUGGINGFACE_API_KEY",
    "HUGGINGFACEHUB_API_TOKEN",
    "HF_TOKEN",
    "REPLICATE_API_TOKEN",
    "CEREBRAS_API_KEY",
    "MOONSHOT_API_KEY",
    "DASHSCOPE_API_KEY",
    "ZHIPUAI_API_KEY",
    "VOYAGE_API_KEY",
    "AI21_API_KEY",
    "NVIDIA_API_KEY",
    "AWS_BEARER_TOKEN_BEDROCK",
];

/// Words that make an `…_API_KEY` / `…_TOKEN` name a provider credential even when it is not in
/// the list above (`OPENAI_API_KEY_2`, `MY_ANTHROPIC_TOKEN`).
const PROVIDER_WORDS: &[&str] = &[
    "OPENAI",
    "ANTHROPIC",
    "CLAUDE",
    "XAI",
    "GROK",
    "GEMINI",
    "GOOGLE",
    "VERTEX",
    "MISTRAL",
    "GROQ",
    "DEEPSEEK",
    "OPENROUTER",
    "COHERE",
    "TOGETHER",
    "FIREWORKS",
    "PERPLEXITY",
    "HUGGINGFACE",
    "REPLICATE",
    "CEREBRAS",
    "MOONSHOT",
    "DASHSCOPE",
    "ZHIPU",
    "VOYAGE",
    "BEDROCK",
];

/// `^[A-Za-z_][A-Za-z0-9_]*$`, at most 256 bytes.
pub fn is_valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && name.len() <= 256
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Whether `name` (any case) is a model-provider credential.
pub fn is_provider_credential(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    if PROVIDER_CREDENTIALS.contains(&upper.as_str()) {
        return true;
    }
    let secretish =
        upper.contains("API_KEY") || upper.contains("TOKEN") || upper.contains("SECRET");
    secretish && upper.split('_').any(|part| PROVIDER_WORDS.contains(&part))
}

/// Why a name may not be in `passEnv`. A type of this module, not the crate's `Error`: `secrets`
/// stands at the ground floor, below `error` (which redacts with it), so it imports nothing above
/// it; `error` converts this into an invalid input (exit 4), which the caller puts behind the
/// field or flag that named it (`Error::wrap`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassEnvRefused(pub String);

impl std::fmt::Display for PassEnvRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PassEnvRefused {}

/// Why `name` may not be in `passEnv`, if it may not.
pub fn check_pass_env(name: &str) -> Result<(), PassEnvRefused> {
    if !is_valid_env_name(name) {
        return Err(PassEnvRefused(format!(
            "{name:?} is not an environment variable name (letters, digits and _, not starting with a digit)"
        )));
    }
    if is_provider_credential(name) {
        return Err(PassEnvRefused(format!(
            "{name} is a model-provider credential; it reaches only the model client, never a tool"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names() {
        for ok in ["PATH", "_X", "GITHUB_TOKEN", "npm_config_cache", "A1"] {
            assert!(is_valid_env_name(ok), "{ok}");
        }
        for bad in ["", "1A", "A-B", "A B", "A=B", "Ä", &"A".repeat(257)] {
            assert!(!is_valid_env_name(bad), "{bad}");
        }
    }

    #[test]
    fn provider_credentials_in_any_case() {
        for key in [
            "OPENAI_API_KEY",
            "openai_api_key",
            "Anthropic_Api_Key",
            "XAI_API_KEY",
            "GEMINI_API_KEY",
            "google_api_key",
            "MISTRAL_API_KEY",
            "GROQ_API_KEY",
            "DEEPSEEK_API_KEY",
            "OPENROUTER_API_KEY",
            "AZURE_OPENAI_API_KEY",
            "OPENAI_API_KEY_2",
            "MY_ANTHROPIC_TOKEN",
            "hf_token",
        ] {
            assert!(is_provider_credential(key), "{key}");
            assert!(check_pass_env(key).unwrap_err().0.contains("credential"));
        }
        for other in [
            "GITHUB_TOKEN",
            "NPM_TOKEN",
            "PATH",
            "GOOGLE_CLOUD_PROJECT",
            "CARGO_HOME",
        ] {
            assert!(!is_provider_credential(other), "{other}");
            check_pass_env(other).unwrap();
        }
    }
}
