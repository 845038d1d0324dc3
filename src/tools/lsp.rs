//! `lsp {operation, path, line?, character?, query?}`: ask the workspace's language server
//! ([`crate::lsp`]). `path` is confined exactly as `read`'s; the server is the one whose
//! `[lsp.NAME]` entry serves the file's extension.

use schemars::JsonSchema;
use serde::Deserialize;

use super::paths::Workspace;
use super::{ToolContext, ToolOutput};
use crate::lsp::{Operation, Query};

/// The arguments of `lsp`; each field's doc comment is its description in the schema.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct LspArgs {
    /// What to ask (definition, references and hover need line and character; workspaceSymbols needs query)
    operation: Operation,
    /// File path relative to the workspace root
    path: String,
    /// Line of the symbol (1-based; definition, references, hover)
    #[serde(default)]
    #[schemars(range(min = 1))]
    line: Option<u32>,
    /// Column of the symbol (1-based, in characters; definition, references, hover)
    #[serde(default)]
    #[schemars(range(min = 1))]
    character: Option<u32>,
    /// Name or part of a name to search for (workspaceSymbols)
    #[serde(default)]
    query: Option<String>,
}

pub(crate) fn run(ws: &Workspace, args: LspArgs, ctx: &ToolContext) -> ToolOutput {
    let Some(servers) = ctx.services.lsp.as_deref() else {
        return ToolOutput::error(
            "`lsp` cannot run: this execution has no language servers (no [lsp.NAME] in the \
             runtime config); the call was not run",
        );
    };
    let path = match ws.resolve(&args.path) {
        Ok(p) => p,
        Err(e) => return ToolOutput::error(e.message),
    };
    let op = args.operation;
    let position = match (op.at_position(), args.line, args.character) {
        (false, _, _) => None,
        (true, Some(line @ 1..), Some(character @ 1..)) => Some((line, character)),
        (true, _, _) => {
            return ToolOutput::error(format!(
                "`{}` needs `line` and `character` (both 1-based) of the symbol; the call was \
                 not run",
                op.name()
            ));
        }
    };
    let query = args.query.as_deref().map(str::trim);
    if op == Operation::WorkspaceSymbols && query.is_none_or(str::is_empty) {
        return ToolOutput::error(
            "`workspaceSymbols` needs `query` (a name or part of one); the call was not run",
        );
    }
    servers.run(
        &Query {
            operation: op,
            path: &path,
            position,
            query,
        },
        ctx.cancel,
        ctx.mark.attempt,
    )
}

/// After an `edit` or `write` (`path_arg` as the call gave it): the language servers see the
/// new text, and with `diagnostics_after_edit` the file's diagnostics follow the result.
pub(crate) fn after_write(
    ws: &Workspace,
    path_arg: &str,
    mut out: ToolOutput,
    ctx: &ToolContext,
) -> ToolOutput {
    let Some(servers) = ctx.services.lsp.as_deref() else {
        return out;
    };
    if out.is_error {
        return out;
    }
    let Ok(path) = ws.resolve(path_arg) else {
        return out;
    };
    if let Some(more) = servers.file_written(&path, ctx.cancel, ctx.mark.attempt) {
        out.text.push_str(&more);
    }
    out
}
