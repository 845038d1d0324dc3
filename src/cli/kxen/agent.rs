//! `agent validate` and `policy check`: read-only views of a definition and of the merged policy.

use std::path::Path;

use serde_json::json;

use crate::agent::{self, AgentDefinition, DcpAgentLock};
use crate::cli::output::{self, Format};
use crate::error::{Error, ExitStatus, Result};
use crate::policy::{self, PolicyFlags};

/// Validates `file`; prints `agentValid` (jsonl) or a short summary (text). Writes nothing.
pub fn validate(file: &Path, format: Format) -> Result<ExitStatus> {
    let definition = agent::load_definition(file)?;
    let hash = definition.definition_hash();
    match format {
        Format::Jsonl => output::json_line(&json!({
            "type": "agentValid",
            "definitionHash": hash,
            "definition": definition.to_json(),
        })),
        Format::Text => output::raw(&summary(file, &definition, &hash)),
    }
    Ok(ExitStatus::Success)
}

fn summary(file: &Path, d: &AgentDefinition, hash: &str) -> String {
    let spec = &d.spec;
    let list = |items: &[String]| {
        if items.is_empty() {
            "-".to_string()
        } else {
            items.join(", ")
        }
    };
    let wall = spec
        .execution
        .max_wall_clock_ms
        .map_or("none".to_string(), |ms| ms.to_string());
    let format = match spec.output.format {
        agent::OutputFormat::Text => "text".to_string(),
        agent::OutputFormat::Json => {
            format!(
                "json (required fields: {}{})",
                list(&spec.output.required_fields),
                if spec.output.schema.is_some() {
                    "; a JSON Schema"
                } else {
                    ""
                }
            )
        }
    };
    // Beyond the spec: shown only when set, so the usual summary reads as it always did.
    let cost = spec
        .execution
        .max_cost_usd
        .map_or(String::new(), |max| format!(", maxCostUsd {max}"));
    format!(
        "{file}: valid DCPAgent `{name}`\n\
         definitionHash: {hash}\n\
         objective: {objective}\n\
         instructions: {ni}, success criteria: {nc}\n\
         capabilities: required [{req}], optional [{opt}]\n\
         execution: modelRole {role}, maxTurns {turns}, maxWallClockMs {wall}, maxPureRetries {retries}{cost}\n\
         output: {format}\n",
        file = file.display(),
        name = d.metadata.name,
        objective = first_line(&spec.objective),
        ni = spec.instructions.len(),
        nc = spec.success_criteria.len(),
        req = list(&spec.capabilities.required),
        opt = list(&spec.capabilities.optional),
        role = spec.execution.model_role,
        turns = spec.execution.max_turns,
        retries = spec.execution.max_pure_retries,
    )
}

/// The first line of a text, shortened to 100 characters for a one-line summary.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    let mut short: String = line.chars().take(100).collect();
    if short.len() < text.trim_end().len() {
        short.push('…');
    }
    short
}

/// `policy check`: the merged policy, its hash, the permitted catalog and, with an agent, the
/// effective capabilities (or the exit-6 refusal a Session creation would meet).
pub fn policy_check(
    flags: &PolicyFlags,
    agent: Option<&Path>,
    config: Option<&Path>,
    format: Format,
) -> Result<ExitStatus> {
    let merged = policy::merge(flags)?;
    let mcp = match config {
        Some(path) => Some(mcp_catalog(path, &merged)?),
        None => None,
    };
    // `lsp` works only with a language server of the config (as at Session creation).
    let lsp_servers = match config {
        Some(path) => crate::config::ModelConfig::load(Some(path))?
            .lsp_servers()
            .clone(),
        None => Default::default(),
    };
    let mut permitted = policy::permitted_catalog(&merged);
    if lsp_servers.is_empty() {
        permitted.retain(|c| c != crate::lsp::CAPABILITY);
    }
    let lock = match agent {
        Some(file) => {
            let mut lock = DcpAgentLock::build(&agent::load_definition(file)?, &merged)?;
            crate::lsp::grant(&mut lock, &lsp_servers)?;
            Some(lock)
        }
        None => None,
    };
    let fence = merged.fence();
    let enforced = crate::sandbox::probe(fence);
    match format {
        Format::Jsonl => {
            let mut fence_view = json!({
                "sandbox": fence.mode,
                "allowNetwork": fence.allow_network || !fence.is_fenced(),
                "description": fence.describe(),
                "enforceable": enforced.is_ok(),
            });
            match &enforced {
                Ok(Some(abi)) => fence_view["landlockAbi"] = json!(abi),
                Ok(None) => {}
                Err(refusal) => fence_view["missing"] = json!(refusal.missing),
            }
            let mut value = json!({
                "type": "policy",
                "policyHash": merged.policy_hash(),
                "policy": merged,
                "permittedCapabilities": permitted,
                "fence": fence_view,
            });
            if let Some(lock) = &lock {
                value["capabilities"] = json!(lock.capabilities);
                value["definitionHash"] = json!(lock.definition_hash);
                value["execution"] = json!(lock.definition.spec.execution);
            }
            if let Some(servers) = &mcp {
                value["mcpServers"] = json!(servers);
            }
            if !lsp_servers.is_empty() {
                value["lspServers"] = json!(crate::lsp::grant::locked(&lsp_servers));
            }
            output::json_line(&value);
        }
        Format::Text => {
            let enforceable = match &enforced {
                Ok(Some(abi)) => format!("yes, on this machine (Landlock ABI {abi})"),
                Ok(None) => "nothing to enforce".into(),
                Err(refusal) => format!(
                    "NO: {}; every exec call would be refused (set \"sandbox\": \"off\" to run \
                     commands unfenced)",
                    refusal.missing
                ),
            };
            let mut text = format!(
                "policyHash: {}\npermitted capabilities: {}\nexec fence: {}\nenforceable: {}\n{}",
                merged.policy_hash(),
                permitted.join(", "),
                fence.describe(),
                enforceable,
                merged.to_pretty()
            );
            if let Some(lock) = &lock {
                text.push_str(&format!(
                    "agent `{}` would get: {} (definitionHash {})\n",
                    lock.definition.metadata.name,
                    lock.capabilities.join(", "),
                    lock.definition_hash
                ));
            }
            for (name, entry) in &lsp_servers {
                text.push_str(&format!(
                    "language server {name}: {} ({})\n",
                    entry.command.join(" "),
                    entry.all_extensions().join(", ")
                ));
            }
            for server in mcp.iter().flatten() {
                text.push_str(&format!("MCP server {}:", server.name));
                match &server.error {
                    Some(error) => text.push_str(&format!(" ERROR: {error}\n")),
                    None if server.tools.is_empty() => text.push_str(" no tools\n"),
                    None => text.push('\n'),
                }
                for tool in &server.tools {
                    let why = match (&tool.refused, &tool.pattern) {
                        (Some(why), _) => format!(" ({why})"),
                        (None, Some(pattern)) => format!(" (mcpTools {pattern:?})"),
                        (None, None) => " (no rule)".to_string(),
                    };
                    text.push_str(&format!("  {:<7} {}{why}\n", tool.rule, tool.capability));
                }
            }
            output::raw(&output::terminal_safe(&text));
        }
    }
    if let Some(failed) = mcp.iter().flatten().find(|s| s.error.is_some()) {
        return Err(Error::external(format!(
            "MCP server `{}` could not be listed: {}",
            failed.name,
            failed.error.as_deref().unwrap_or_default()
        ))
        .with_hint(format!(
            "check [mcp.servers.{}] in the config: run its command by hand",
            failed.name
        )));
    }
    Ok(ExitStatus::Success)
}

/// Every server of the config at `path`, started with a throwaway HOME and working directory
/// (nothing is written to the state dir; the current directory stands for the workspace of its
/// fence), and what `policy` does with each tool.
fn mcp_catalog(path: &Path, merged: &policy::MergedPolicy) -> Result<Vec<crate::mcp::ServerView>> {
    let config = crate::config::ModelConfig::load(Some(path))?;
    let cwd = std::env::current_dir()
        .map_err(|e| Error::io("read the current directory", Path::new("."), e))?;
    let home = tempfile::tempdir()
        .map_err(|e| Error::io("create a temporary HOME", &std::env::temp_dir(), e))?;
    let servers = crate::mcp::Servers::new(
        config.mcp_servers().clone(),
        merged,
        crate::mcp::servers::ServerHomes {
            root: home.path().to_path_buf(),
            once_exists: home.path().to_path_buf(),
        },
        crate::sandbox::RunFence::new(merged.fence(), &cwd, None, None),
    );
    Ok(crate::mcp::catalog(&servers, merged))
}

/// The arguments of `kxen-agent agent validate`.
#[derive(Debug, clap::Args)]
pub struct AgentValidateArgs {
    /// The DCPAgent YAML file.
    pub file: std::path::PathBuf,
}

/// The arguments of `kxen-agent policy check`.
#[derive(Debug, clap::Args)]
pub struct PolicyCheckArgs {
    #[command(flatten)]
    pub policy: super::PolicyArgs,
    /// A DCPAgent definition to intersect with the permitted catalog.
    #[arg(long, value_name = "FILE")]
    pub agent: Option<std::path::PathBuf>,
    /// A model config: start each of its `[mcp.servers.NAME]` (in the current directory),
    /// list their tools and show the rule each gets (allow, ask, deny, or refused and why). A
    /// server that cannot start or answer is shown with its error, and the exit is 9.
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
}
