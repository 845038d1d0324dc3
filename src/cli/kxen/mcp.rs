//! `kxen-agent mcp login|logout|status`: the OAuth tokens of the runtime config's MCP servers
//! in the per-user token store ([`crate::mcp::oauth_store`], docs/mcp.md "Logins and the token
//! store").
//!
//! - `login NAME` authorizes now, as a run would when the server asks (the authorization-code
//!   grant: `$BROWSER URL`, else the URL on stderr; `client_credentials` needs nobody), and
//!   stores the tokens; a stored registration is reused, stored tokens are replaced.
//! - `logout NAME` deletes the entry and says whether there was one.
//! - `status` lists every `url` server that may use OAuth: whether it holds tokens, their
//!   scopes and expiry, whether they can be refreshed. Never a token.

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::json;

use crate::cli::output::{self, Format};
use crate::config::ModelConfig;
use crate::error::{Error, ExitStatus, Result};
use crate::mcp::oauth_store::{Entry, Slot, Store};
use crate::mcp::{ServerConfig, servers};

#[derive(Debug, Subcommand)]
pub enum McpCommand {
    /// Authorize kxen-agent with an OAuth-protected MCP server now and keep its tokens in the
    /// per-user token store (opens $BROWSER on the authorization URL, else prints it on stderr,
    /// and waits for the redirect to 127.0.0.1).
    Login(LoginArgs),
    /// Delete the stored tokens of an MCP server (says whether there were any).
    Logout(LogoutArgs),
    /// Which configured MCP servers hold tokens: scopes, expiry, refreshable. Never a token.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// The server: `[mcp.servers.NAME]` of the model config.
    pub name: String,
    /// The model config (TOML); default as for `run`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// A scope to ask for instead of the entry's `oauth.scopes` (repeatable).
    #[arg(long = "scope", value_name = "S")]
    pub scopes: Vec<String>,
}

#[derive(Debug, Args)]
pub struct LogoutArgs {
    /// The server: `[mcp.servers.NAME]` of the model config.
    pub name: String,
    /// The model config (TOML); default as for `run`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The model config (TOML); default as for `run`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

pub fn dispatch(command: McpCommand, format: Format) -> Result<ExitStatus> {
    match command {
        McpCommand::Login(args) => login(&args, format),
        McpCommand::Logout(args) => logout(&args, format),
        McpCommand::Status(args) => status(args.config.as_deref(), format),
    }
}

/// The server `name` of the config, which must be a `url` server that may use OAuth.
fn oauth_server(config: &ModelConfig, name: &str) -> Result<(ServerConfig, String)> {
    let Some(entry) = config.mcp_servers().get(name) else {
        let known: Vec<&str> = config.mcp_servers().keys().map(String::as_str).collect();
        return Err(Error::not_found(format!(
            "the model config {} defines no [mcp.servers.{name}]",
            config.path().display()
        ))
        .with_hint(if known.is_empty() {
            "add the server's table to the config (docs/mcp.md), or name the config with --config"
                .to_string()
        } else {
            format!("configured servers: {}", known.join(", "))
        }));
    };
    let Some(url) = entry.url.clone() else {
        return Err(Error::invalid(format!(
            "MCP server `{name}` is a `command` server; only `url` servers use OAuth"
        )));
    };
    if entry.bearer_token_env.is_some() {
        return Err(Error::invalid(format!(
            "MCP server `{name}` uses a static token (bearer_token_env); it never uses OAuth"
        ))
        .with_hint(format!(
            "remove bearer_token_env from [mcp.servers.{name}] to authorize with OAuth"
        )));
    }
    Ok((entry.clone(), url))
}

/// The store slot of `entry` (server `name` at `url`).
fn slot_of(store: &Store, name: &str, url: &str, entry: &ServerConfig) -> Slot {
    let client_id = entry.oauth.as_ref().and_then(|o| o.store_client());
    store.slot(name, url, client_id)
}

fn login(args: &LoginArgs, format: Format) -> Result<ExitStatus> {
    let config = ModelConfig::load(args.config.as_deref())?;
    let (entry, url) = oauth_server(&config, &args.name)?;
    if let Some(scope) = args.scopes.iter().find(|s| s.is_empty() || s.contains(' ')) {
        return Err(Error::usage(format!(
            "--scope {scope:?}: give one scope per --scope, without spaces"
        )));
    }
    let store = Store::locate()?;
    let slot = slot_of(&store, &args.name, &url, &entry);
    let how = servers::Authorize {
        person: crate::mcp::oauth_code::Person::AtHand,
        login: true,
        scopes: args.scopes.clone(),
        store: Some(store),
    };
    let client = servers::login(&args.name, &entry, &how)?;
    if !client.is_authorized() {
        // Nothing to log in to: said on stderr, and `stored: false` in the result.
        output::note(&format!(
            "note: MCP server `{}` answered without asking for authorization; nothing was stored",
            args.name
        ));
    }
    drop(client);
    let stored = slot.load()?;
    let view = view(&args.name, &url, &slot, stored.as_ref());
    match format {
        Format::Jsonl => output::json_line(&json!({"type": "mcpLogin", "server": view})),
        Format::Text => output::line(&format!("logged in: {}", text_line(&view))),
    }
    Ok(ExitStatus::Success)
}

fn logout(args: &LogoutArgs, format: Format) -> Result<ExitStatus> {
    let config = ModelConfig::load(args.config.as_deref())?;
    let (entry, url) = oauth_server(&config, &args.name)?;
    let store = Store::locate()?;
    let slot = slot_of(&store, &args.name, &url, &entry);
    let removed = slot.remove()?;
    match format {
        Format::Jsonl => output::json_line(&json!({
            "type": "mcpLogout",
            "server": args.name,
            "removed": removed,
        })),
        Format::Text if removed => {
            output::line(&format!("removed the stored tokens of `{}`", args.name))
        }
        Format::Text => output::line(&format!(
            "`{}` held no stored tokens; nothing to remove",
            args.name
        )),
    }
    Ok(ExitStatus::Success)
}

fn status(config: Option<&Path>, format: Format) -> Result<ExitStatus> {
    let config = ModelConfig::load(config)?;
    let store = Store::locate()?;
    let mut refused = None;
    let mut lines = Vec::new();
    for (name, entry) in config.mcp_servers() {
        let Some(url) = entry
            .url
            .as_deref()
            .filter(|_| entry.bearer_token_env.is_none())
        else {
            continue; // a stdio server or a static token: never OAuth
        };
        let slot = slot_of(&store, name, url, entry);
        let mut view = match slot.load() {
            Ok(stored) => view(name, url, &slot, stored.as_ref()),
            Err(e) => {
                let mut v = view(name, url, &slot, None);
                v["error"] = json!(e.message);
                refused.get_or_insert(e);
                v
            }
        };
        if format == Format::Jsonl {
            view["type"] = json!("mcpToken");
        }
        lines.push(view);
    }
    match format {
        Format::Jsonl => lines.iter().for_each(output::json_line),
        Format::Text if lines.is_empty() => {
            output::line("no `url` MCP server in the model config may use OAuth")
        }
        Format::Text => lines.iter().for_each(|v| output::line(&text_line(v))),
    }
    match refused {
        // Listed with the others, then one clear error (exit 4) naming the file and `logout`.
        Some(e) => Err(e),
        None => Ok(ExitStatus::Success),
    }
}

/// What status shows of one server (never a token).
fn view(name: &str, url: &str, slot: &Slot, stored: Option<&Entry>) -> serde_json::Value {
    let mut v = json!({
        "name": name,
        "url": url,
        "stored": stored.is_some(),
        "file": slot.path.display().to_string(),
    });
    if let Some(e) = stored {
        v["grant"] = json!(e.grant);
        v["scope"] = json!(e.scope);
        v["expiresAt"] = json!(e.expires_at.map(crate::clock::format_seconds));
        v["expired"] = json!(!e.is_fresh());
        v["refreshable"] = json!(e.refresh_token.is_some());
        v["issuer"] = json!(e.issuer);
        v["obtainedAt"] = json!(e.obtained_at);
    }
    v
}

fn text_line(v: &serde_json::Value) -> String {
    let name = v["name"].as_str().unwrap_or_default();
    if let Some(error) = v["error"].as_str() {
        return output::terminal_safe(&format!("{name}: refused: {error}"));
    }
    if v["stored"] != true {
        return format!("{name}: no stored tokens");
    }
    let scope = v["scope"].as_str().unwrap_or("(none named)");
    let expiry = match v["expiresAt"].as_str() {
        Some(at) if v["expired"] == true => format!("expired {at}"),
        Some(at) => format!("expires {at}"),
        None => "no expiry given".into(),
    };
    let refresh = if v["refreshable"] == true {
        "refreshable"
    } else {
        "not refreshable"
    };
    // The scope and the error come from the authorization server: never raw to a terminal.
    output::terminal_safe(&format!("{name}: scope {scope}; {expiry}; {refresh}"))
}
