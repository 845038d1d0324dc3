//! Starter files shipped inside the binary (from `templates/`).

/// A commented starter DCPAgent definition (`kxen-agent agent init`).
pub const AGENT_YAML: &str = include_str!("../templates/agent.yaml");

/// A starter runtime policy (`kxen-agent policy init`).
pub const POLICY_JSON: &str = include_str!("../templates/policy.json");

/// The model configs `kxen-agent config init --provider NAME` writes: one per kind of server a
/// user is likely to have, each a complete, commented file that loads as it is (the tests run a
/// loopback server of each wire format through every one of them). They name the variable that
/// holds a key (`api_key_env`), never a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelConfigTemplate {
    Openai,
    Anthropic,
    Openrouter,
    Ollama,
    Vllm,
    Llamacpp,
}

impl ModelConfigTemplate {
    /// Every template, in the order `--help` lists them.
    pub const ALL: [ModelConfigTemplate; 6] = [
        ModelConfigTemplate::Openai,
        ModelConfigTemplate::Anthropic,
        ModelConfigTemplate::Openrouter,
        ModelConfigTemplate::Ollama,
        ModelConfigTemplate::Vllm,
        ModelConfigTemplate::Llamacpp,
    ];

    /// The `--provider` value, which is also the `[providers.NAME]` name in the file.
    pub fn name(self) -> &'static str {
        match self {
            ModelConfigTemplate::Openai => "openai",
            ModelConfigTemplate::Anthropic => "anthropic",
            ModelConfigTemplate::Openrouter => "openrouter",
            ModelConfigTemplate::Ollama => "ollama",
            ModelConfigTemplate::Vllm => "vllm",
            ModelConfigTemplate::Llamacpp => "llamacpp",
        }
    }

    /// The file's text.
    pub fn text(self) -> &'static str {
        match self {
            ModelConfigTemplate::Openai => include_str!("../templates/config/openai.toml"),
            ModelConfigTemplate::Anthropic => include_str!("../templates/config/anthropic.toml"),
            ModelConfigTemplate::Openrouter => include_str!("../templates/config/openrouter.toml"),
            ModelConfigTemplate::Ollama => include_str!("../templates/config/ollama.toml"),
            ModelConfigTemplate::Vllm => include_str!("../templates/config/vllm.toml"),
            ModelConfigTemplate::Llamacpp => include_str!("../templates/config/llamacpp.toml"),
        }
    }

    /// The variable the file's `api_key_env` names, if the server needs a key.
    pub fn key_env(self) -> Option<&'static str> {
        match self {
            ModelConfigTemplate::Openai => Some("OPENAI_API_KEY"),
            ModelConfigTemplate::Anthropic => Some("ANTHROPIC_API_KEY"),
            ModelConfigTemplate::Openrouter => Some("OPENROUTER_API_KEY"),
            ModelConfigTemplate::Ollama | ModelConfigTemplate::Vllm => None,
            ModelConfigTemplate::Llamacpp => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigSource;
    use crate::config::ModelConfig;
    use std::path::Path;

    fn load(text: &str) -> ModelConfig {
        ModelConfig::parse(text, Path::new("/cfg/config.toml"), ConfigSource::Flag)
            .unwrap_or_else(|e| panic!("{}\n{text}", e.message))
    }

    /// The text with every commented-out option (`# key = value`, `# [table]`) switched on.
    fn uncommented(text: &str) -> String {
        text.lines()
            .map(|line| match line.strip_prefix("# ") {
                Some(rest)
                    if rest.starts_with('[')
                        || rest.split_once(" = ").is_some_and(|(k, _)| {
                            !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                        }) =>
                {
                    rest.to_string()
                }
                _ => line.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn every_model_config_loads_as_written_and_with_every_option_on() {
        for t in ModelConfigTemplate::ALL {
            let config = load(t.text());
            let (name, provider, _) = config.provider_config("execution").unwrap();
            assert_eq!(name, t.name());
            assert_eq!(config.provider_config("planning").unwrap().0, t.name());
            assert_eq!(provider.api_key_env(), t.key_env(), "{}", t.name());
            // What the comments offer is valid too: uncommenting an option never breaks the file.
            let all_on = uncommented(t.text());
            assert_ne!(all_on, t.text(), "{} offers no option", t.name());
            load(&all_on);
        }
    }

    #[test]
    fn no_model_config_holds_a_secret() {
        for t in ModelConfigTemplate::ALL {
            for line in t.text().lines() {
                let Some((key, value)) = line.trim_start_matches("# ").split_once(" = ") else {
                    continue;
                };
                let value = value.split('#').next().unwrap().trim().trim_matches('"');
                // Key-shaped values, user info in a URL, connection-string secrets.
                assert!(
                    !crate::tools::env::sensitive_value(value),
                    "{}: {key} = {value}",
                    t.name()
                );
            }
        }
    }
}
