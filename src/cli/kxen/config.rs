//! `config init`: write a commented model config for one kind of server.
//!
//! The default output is the file a plain `kxen-agent run` reads (`$KXEN_AGENT_CONFIG`, else
//! `$XDG_CONFIG_HOME/kxen-agent/config.toml`, else `~/.config/kxen-agent/config.toml`), as
//! `git config --global` writes where git reads: writing one place and reading another would
//! leave a config nobody uses. An existing file is never touched without `--force` (exit 5);
//! with it, the file is replaced atomically, so a crash leaves the old config or the new one.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::cli::output::{self, Format};
use crate::config::ModelConfig;
use crate::error::{Error, ExitStatus, Result};
use crate::fsx;
use crate::templates::ModelConfigTemplate;

/// Mode of a written config: it holds no secret (only the *names* of key variables).
const CONFIG_MODE: u32 = 0o644;

/// Writes `template` to `output` (default: [`ModelConfig::default_location`]) and reports it.
pub fn init(
    template: ModelConfigTemplate,
    output: Option<&Path>,
    force: bool,
    format: Format,
) -> Result<ExitStatus> {
    let (path, default) = match output {
        Some(p) => (p.to_path_buf(), false),
        None => (default_output()?, true),
    };
    if path == Path::new("-") {
        return Err(Error::usage(
            "--output - is not supported: the config is written to a file, atomically",
        )
        .with_hint("name a file, e.g. --output kxen.toml"));
    }
    let existed = match path.symlink_metadata() {
        Ok(meta) if !meta.file_type().is_file() => {
            // An atomic replace renames over the path itself: a symlink or a directory would
            // be replaced (or refused by the rename), never written through.
            return Err(Error::usage(format!(
                "{} is a directory, a symlink or a special file; config init writes a regular \
                 file, replacing it atomically",
                path.display()
            ))
            .with_path(&path)
            .with_hint("name a new file or a regular one with --output FILE"));
        }
        Ok(_) if !force => {
            return Err(Error::conflict(format!(
                "the model config {} already exists; not overwriting it",
                path.display()
            ))
            .with_path(&path)
            .with_hint("pass --force to replace it, or --output FILE to write another file"));
        }
        Ok(_) => true,
        Err(_) => false,
    };
    if default && let Some(dir) = path.parent() {
        // `~/.config/kxen-agent/` is ours to create, as cargo creates `~/.cargo/`; a directory
        // a user names with --output must exist already (exit 3 otherwise).
        fsx::create_dir_with_mode(dir, 0o755)?;
    }
    let text = template.text().as_bytes();
    if existed {
        fsx::write_atomic(&path, text, CONFIG_MODE)?;
    } else {
        // No-clobber: a file that appeared since the check above is still not replaced.
        fsx::create_new(&path, text, CONFIG_MODE)?;
    }
    report(template, &path, existed, format);
    Ok(ExitStatus::Success)
}

/// Where a plain `kxen-agent run` reads its config.
fn default_output() -> Result<PathBuf> {
    ModelConfig::default_location()
        .map(|(path, _)| std::path::absolute(&path).unwrap_or(path))
        .map_err(|_| {
            Error::usage(
                "config init has nowhere to write: none of KXEN_AGENT_CONFIG, XDG_CONFIG_HOME \
                 and HOME is set",
            )
            .with_hint("name the file with --output FILE")
        })
}

fn report(template: ModelConfigTemplate, path: &Path, replaced: bool, format: Format) {
    match format {
        Format::Jsonl => output::json_line(&json!({
            "type": "fileWritten",
            "path": path.display().to_string(),
            "what": "model config",
            "provider": template.name(),
            "replaced": replaced,
        })),
        Format::Text => {
            let verb = if replaced { "replaced" } else { "wrote" };
            output::line(&format!(
                "{verb} the model config ({}) at {}",
                template.name(),
                path.display()
            ));
            if let Some(var) = template.key_env() {
                output::line(&format!(
                    "it reads the key from ${var} at call time: export {var}=… (never put the key in the file)"
                ));
            }
        }
    }
}

/// The arguments of `kxen-agent config init`.
#[derive(Debug, clap::Args)]
pub struct ConfigInitArgs {
    /// The server the config is for (each is a complete, tested config; docs/models.md).
    #[arg(long, value_enum, default_value_t = super::ProviderTemplate::Openai)]
    pub provider: super::ProviderTemplate,
    /// Where to write it (default: the file `kxen-agent run` reads without --config:
    /// $KXEN_AGENT_CONFIG, else $XDG_CONFIG_HOME/kxen-agent/config.toml, else
    /// ~/.config/kxen-agent/config.toml).
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<std::path::PathBuf>,
    /// Replace an existing file.
    #[arg(long)]
    pub force: bool,
}
