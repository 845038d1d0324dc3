//! DCPAgent definitions (docs/spec.md §3): parsing, validation, the canonical form and its hash.
//!
//! [`load_definition`] and [`parse_definition`] are the only ways in. Bad input of any kind
//! (empty, binary, oversized, alias bombs, wrong types, unknown or duplicate keys) ends in one
//! [`Error::invalid`](crate::Error::invalid) (exit 4) whose message starts with
//! `FILE:LINE:COLUMN:` (or `FILE:` when the parser has no position) and names the field path.

mod definition;
pub mod lock;
mod rules;
pub mod schema;

use std::io::Read;
use std::path::Path;

pub use definition::{
    AgentDefinition, Capabilities, DEFAULT_MAX_PURE_RETRIES, DEFAULT_MAX_TURNS, DEFAULT_MODEL_ROLE,
    Execution, Metadata, Output, OutputFormat, Spec, Usd,
};
pub use rules::{
    API_VERSION, KIND, MAX_CAPABILITY_BYTES, MAX_CRITERION_CHARS, MAX_DESCRIPTION_CHARS,
    MAX_INSTRUCTION_CHARS, MAX_ITEMS, MAX_OBJECTIVE_CHARS, MAX_PURE_RETRIES, MAX_TURNS,
    capability_name_error, is_valid_model_role, is_valid_name,
};

pub use lock::{DcpAgentLock, tighten};

use crate::error::{Error, Result};

/// Largest definition file accepted (4 MiB), refused before parsing.
///
/// The longest valid definition (128 instructions of 8000 characters, 128 criteria of 4000, an
/// 8000-character objective) is about 1.6 MB of ASCII, so the cap never refuses a realistic
/// valid file, while a 10 MB file never reaches the YAML parser.
pub const MAX_DEFINITION_BYTES: u64 = 4 * 1024 * 1024;

const HINT: &str = "`kxen-agent agent init --output example.yaml` writes a commented example";

/// Reads and validates the definition at `path`.
///
/// A missing file is `NotFound` (exit 3); a directory, an oversized or an invalid file is
/// `InvalidInput` (exit 4).
pub fn load_definition(path: &Path) -> Result<AgentDefinition> {
    let source = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| Error::io("read", path, e))?;
    let meta = file.metadata().map_err(|e| Error::io("read", path, e))?;
    if meta.is_dir() {
        return Err(Error::invalid(format!(
            "{source}: is a directory, not a DCPAgent definition file"
        )));
    }
    if meta.len() > MAX_DEFINITION_BYTES {
        return Err(too_big(&source, meta.len()));
    }
    // The file may grow between stat and read (or be a pipe); never read past the cap.
    let mut bytes = Vec::new();
    file.take(MAX_DEFINITION_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", path, e))?;
    let mut definition = parse_definition_with(&bytes, &source)?;
    if let Some(serde_json::Value::String(relative)) = &definition.spec.output.schema {
        // Read now and kept in the definition (and so in the lock and its hash): a resume
        // checks against the schema the Session was created with, whatever the file says later.
        let base = path.parent().unwrap_or(Path::new("."));
        let file = base.join(relative);
        let what = format!("{source}: spec.output.schema");
        definition.spec.output.schema = Some(schema::load(&file, &what)?);
    }
    Ok(definition)
}

/// Validates the definition in `bytes`; `source` (a file name) prefixes every message. An
/// `output.schema` must be the schema itself here: only [`load_definition`] knows the directory
/// a path is relative to.
pub fn parse_definition(bytes: &[u8], source: &str) -> Result<AgentDefinition> {
    let definition = parse_definition_with(bytes, source)?;
    if definition
        .spec
        .output
        .schema
        .as_ref()
        .is_some_and(serde_json::Value::is_string)
    {
        return Err(Error::invalid(format!(
            "{source}: spec.output.schema: a path is only read from a definition file; give \
             the schema object itself"
        )));
    }
    Ok(definition)
}

/// [`parse_definition`] that leaves a schema path for [`load_definition`] to read.
fn parse_definition_with(bytes: &[u8], source: &str) -> Result<AgentDefinition> {
    if bytes.len() as u64 > MAX_DEFINITION_BYTES {
        return Err(too_big(source, bytes.len() as u64));
    }
    let body = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::invalid(format!(
            "{source}: the file is empty; a DCPAgent definition needs apiVersion, kind, metadata and spec"
        ))
        .with_hint(HINT));
    }
    if let Some(line) = flow_nesting_beyond(body, MAX_FLOW_NESTING) {
        return Err(Error::invalid(format!(
            "{source}:{line}: `[`/`{{` nested more than {MAX_FLOW_NESTING} levels deep; a DCPAgent definition needs at most 3"
        ))
        .with_hint(HINT));
    }
    serde_norway::from_slice::<AgentDefinition>(body).map_err(|e| yaml_error(source, &e))
}

/// Deepest `[`/`{` nesting accepted, checked before the YAML parser runs.
///
/// libyaml's scanner re-checks every open flow level for each token, so deep flow nesting costs
/// quadratic time (100 000 `[` take over a minute); serde_norway would refuse anything deeper than
/// 128 levels anyway, after the scanner has paid that cost.
const MAX_FLOW_NESTING: usize = 128;

/// The 1-based line where flow nesting first exceeds `limit`, if it does.
///
/// A conservative scan: quoted scalars and comments are skipped (a quote or `#` only counts where
/// YAML allows a token to start), every other bracket counts. Brackets inside plain scalars can
/// only make the estimate higher, never hide real nesting.
fn flow_nesting_beyond(bytes: &[u8], limit: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut line = 1;
    let mut i = 0;
    let token_start = |i: usize| {
        i == 0
            || matches!(
                bytes[i - 1],
                b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b',' | b':'
            )
    };
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => line += 1,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return Some(line);
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'#' if token_start(i) => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            quote @ (b'\'' | b'"') if token_start(i) => {
                i += 1;
                while i < bytes.len() {
                    match bytes[i] {
                        b'\n' => line += 1,
                        b'\\' if quote == b'"' => i += 1,
                        b'\'' if quote == b'\'' && bytes.get(i + 1) == Some(&b'\'') => i += 1,
                        c if c == quote => break,
                        _ => {}
                    }
                    i += 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn too_big(source: &str, len: u64) -> Error {
    Error::invalid(format!(
        "{source}: the file is {len} bytes; DCPAgent definitions are limited to {MAX_DEFINITION_BYTES} bytes (4 MiB)"
    ))
}

/// `FILE:LINE:COLUMN: path: message`, from a serde_norway error.
fn yaml_error(source: &str, err: &serde_norway::Error) -> Error {
    let mut message = err.to_string();
    let prefix = match err.location() {
        Some(loc) => {
            let suffix = format!(" at line {} column {}", loc.line(), loc.column());
            if let Some(stripped) = message.strip_suffix(&suffix) {
                message = stripped.to_string();
            }
            format!("{source}:{}:{}", loc.line(), loc.column())
        }
        None => source.to_string(),
    };
    Error::invalid(format!("{prefix}: {message}")).with_hint(HINT)
}

#[cfg(test)]
mod tests;
