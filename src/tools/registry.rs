//! [`REGISTRY`]: the one list of what an agent can touch (docs/spec.md §9).
//!
//! Every tool is one [`Entry`]: its name (its capability name, or a [`ToolName::Pattern`] such
//! as `mcp__<server>__*` for a family of tools), its description, its argument schema, its
//! [`SideEffect`] class, the policy [`Gate`] that must be open before it is permitted, and its
//! executor. Whatever names tools reads this list and nothing else:
//! - the permitted catalog and a capability's refusal (`policy::permitted_catalog`,
//!   `MergedPolicy::refusal`: what the Builder may choose from and what a lock may hold);
//! - the schemas the model is offered ([`Registry::schemas`]);
//! - the refusal of a call the model made ([`Registry::admit`]).
//!
//! An executor is typed by the serde struct that parses the tool's arguments; the schema is
//! derived from that same struct ([`super::schema`]), so what the model is told and what the
//! parser accepts come from one type.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::hints::Sight;
use super::paths::Workspace;
use super::{ToolContext, ToolOutput, ToolSchema, exec, file, lsp, read, schema, search, task};
use crate::error::{Error, Result};

/// Every tool this runtime implements, in the order the model is offered them.
pub static REGISTRY: Registry = Registry {
    entries: &[
        Entry {
            name: ToolName::Exact("read"),
            description: "Read a text file in the workspace. Returns numbered lines (`cat -n` \
                style). Use offset (1-based first line) and limit (line count, default 2000) for \
                long files.",
            effect: SideEffect::Read,
            gate: None,
            executor: &Typed::<read::ReadArgs>(|ws, args, ctx| read::run(ws, args, Sight::of(ctx))),
        },
        Entry {
            name: ToolName::Exact("glob"),
            description: "List files matching a glob pattern, sorted, respecting .gitignore. A \
                pattern without `/` matches file names at any depth (`*.rs`); with `/` it matches \
                the path relative to `path` (`src/**/*.rs`).",
            effect: SideEffect::Read,
            gate: None,
            executor: &Typed::<search::GlobArgs>(|ws, args, _| search::glob(ws, args)),
        },
        Entry {
            name: ToolName::Exact("grep"),
            description: "Search file contents with a regular expression (Rust regex syntax), \
                respecting .gitignore. Returns `path:line:text` lines sorted by path and line.",
            effect: SideEffect::Read,
            gate: None,
            executor: &Typed::<search::GrepArgs>(|ws, args, _| search::grep(ws, args)),
        },
        Entry {
            name: ToolName::Exact("lsp"),
            description: "Ask the workspace's language server about a file: `diagnostics` \
                (errors and warnings of the file as it is on disk now), `definition`, \
                `references` or `hover` of the symbol at `line`/`character` (1-based), \
                `documentSymbols` (the file's outline) or `workspaceSymbols` (symbols matching \
                `query`). Results are `path:line:col …` lines.",
            effect: SideEffect::Read,
            gate: None,
            executor: &Typed::<lsp::LspArgs>(lsp::run),
        },
        Entry {
            name: ToolName::Exact("write"),
            description: "Create or overwrite a file with the given content (parent directories \
                are created).",
            effect: SideEffect::WorkspaceWrite,
            gate: None,
            executor: &Typed::<file::WriteArgs>(|ws, args, ctx| {
                let path = args.path.clone();
                let out = file::write(ws, args, ctx.seen_files, Sight::of(ctx));
                lsp::after_write(ws, &path, out, ctx)
            }),
        },
        Entry {
            name: ToolName::Exact("edit"),
            description: "Replace an exact string in a file. Fails if oldString is not found, or \
                occurs more than once unless replaceAll is true; include surrounding lines to make \
                it unique.",
            effect: SideEffect::WorkspaceWrite,
            gate: None,
            executor: &Typed::<file::EditArgs>(|ws, args, ctx| {
                let path = args.path.clone();
                lsp::after_write(ws, &path, file::edit(ws, args, Sight::of(ctx)), ctx)
            }),
        },
        Entry {
            name: ToolName::Exact("exec"),
            description: "Run a shell command (`sh -c`) in the workspace and return its combined \
                stdout and stderr and exit code. Default timeout 120000 ms. Credentials are not in \
                its environment. Usually fenced: writes outside the workspace, HOME and $TMPDIR \
                fail, and without network permission there is no network.",
            effect: SideEffect::External,
            gate: Some(Gate::Shell),
            executor: &Typed::<exec::ExecArgs>(exec::run),
        },
        Entry {
            name: ToolName::Exact("task"),
            description: "Delegate a self-contained subtask to a subagent: a child session with \
                this agent's tools (fewer at the depth limit) in the same workspace, starting \
                from `prompt` alone. Returns the subagent's final answer.",
            effect: SideEffect::Delegate,
            gate: Some(Gate::Shell),
            executor: &Typed::<task::TaskArgs>(task::run),
        },
        Entry {
            name: ToolName::Pattern("mcp__*"),
            description: "A tool of an MCP server (its description and schema come from the \
                server and are fixed by the Session's lock).",
            effect: SideEffect::External,
            gate: Some(Gate::Mcp),
            executor: &McpCall,
        },
    ],
};

/// Sends the call to its MCP server ([`crate::mcp::Servers::call`]).
struct McpCall;

impl Executor for McpCall {
    fn parameters(&self) -> Value {
        serde_json::json!({"type": "object"})
    }

    fn run(&self, name: &str, _ws: &Workspace, arguments: &Value, ctx: &ToolContext) -> ToolOutput {
        match ctx.services.mcp.as_deref() {
            Some(servers) => match ctx.mcp_stream {
                Some(crate::mcp::StreamMode::Replay(position)) => {
                    servers.replay(name, position, ctx.cancel)
                }
                Some(crate::mcp::StreamMode::Journal(journal)) => {
                    servers.call(name, arguments, ctx.cancel, Some((journal, ctx.mark.op_id)))
                }
                None => servers.call(name, arguments, ctx.cancel, None),
            },
            None => ToolOutput::error(format!(
                "`{name}` cannot run: this execution has no MCP servers; the call was not run"
            )),
        }
    }
}

/// The list of tools: see the module doc.
pub struct Registry {
    entries: &'static [Entry],
}

/// One tool (or one family of tools, for a pattern name).
pub struct Entry {
    name: ToolName,
    description: &'static str,
    effect: SideEffect,
    gate: Option<Gate>,
    executor: &'static dyn Executor,
}

/// The capability name(s) an entry stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolName {
    /// One tool, whose capability name this is.
    Exact(&'static str),
    /// A family of tools whose capability names start with what comes before the final `*`,
    /// followed by at least one more character (`mcp__github__*` covers `mcp__github__search`).
    Pattern(&'static str),
}

/// What a tool's call can change: used to decide what needs a sandbox or an approval, and what
/// may run in parallel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideEffect {
    /// Reads the workspace, changes nothing.
    Read,
    /// Changes files inside the workspace only.
    WorkspaceWrite,
    /// Can change anything the process can reach (a shell command, a remote service).
    External,
    /// Runs a child Session (`task`): its effects are its own tools' calls, each through the
    /// child's own journal.
    Delegate,
}

/// The policy switch that must be on before a tool is permitted (docs/spec.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// `allowShell` / `--allow-shell`.
    Shell,
    /// `allowMcp` / `--allow-mcp`.
    Mcp,
}

impl ToolName {
    /// Whether capability `name` is this tool (or one of this family).
    pub fn matches(&self, name: &str) -> bool {
        match self {
            ToolName::Exact(exact) => name == *exact,
            ToolName::Pattern(pattern) => {
                let prefix = pattern.strip_suffix('*').unwrap_or(pattern);
                name.len() > prefix.len() && name.starts_with(prefix)
            }
        }
    }

    /// The name, or the pattern, as written in the registry.
    pub fn as_str(&self) -> &'static str {
        match self {
            ToolName::Exact(s) | ToolName::Pattern(s) => s,
        }
    }
}

impl Entry {
    pub fn name(&self) -> ToolName {
        self.name
    }

    pub fn description(&self) -> &'static str {
        self.description
    }

    pub fn effect(&self) -> SideEffect {
        self.effect
    }

    pub fn gate(&self) -> Option<Gate> {
        self.gate
    }

    /// The JSON Schema of the tool's arguments, as the model is sent it.
    pub fn parameters(&self) -> Value {
        self.executor.parameters()
    }
}

impl Registry {
    /// Every entry, in catalog order.
    pub fn entries(&self) -> &'static [Entry] {
        self.entries
    }

    /// The entry that implements capability `name`.
    pub fn find(&self, name: &str) -> Option<&'static Entry> {
        self.entries.iter().find(|e| e.name.matches(name))
    }

    /// Whether a tool implements capability `name`.
    pub fn implements(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    /// The schemas of the tools whose capability is in `capabilities`, in catalog order. A
    /// pattern entry is offered once for each capability of its family that `mcp` (the lock's
    /// MCP tools) describes, with the server's description and schema.
    pub fn schemas(
        &self,
        capabilities: &[String],
        mcp: &[crate::mcp::LockedTool],
    ) -> Vec<ToolSchema> {
        let mut out = Vec::new();
        for entry in self.entries {
            let names: Vec<&str> = match entry.name {
                ToolName::Exact(name) => capabilities
                    .iter()
                    .any(|c| c == name)
                    .then_some(name)
                    .into_iter()
                    .collect(),
                ToolName::Pattern(_) => {
                    let mut names: Vec<&str> = capabilities
                        .iter()
                        .map(String::as_str)
                        .filter(|c| entry.name.matches(c))
                        .collect();
                    names.dedup();
                    names
                }
            };
            if names.is_empty() {
                continue;
            }
            if let ToolName::Pattern(_) = entry.name {
                out.extend(names.into_iter().filter_map(|name| {
                    let tool = mcp.iter().find(|t| t.name == name)?;
                    Some(ToolSchema {
                        name: name.to_string(),
                        description: if tool.description.is_empty() {
                            format!("Tool `{}` of MCP server `{}`.", tool.tool, tool.server)
                        } else {
                            tool.description.clone()
                        },
                        parameters: tool.input_schema.clone(),
                    })
                }));
                continue;
            }
            let parameters = entry.parameters();
            out.extend(names.into_iter().map(|name| ToolSchema {
                name: name.to_string(),
                description: entry.description.to_string(),
                parameters: parameters.clone(),
            }));
        }
        out
    }

    /// Admits a call of tool `name` with `arguments` in a Session whose capability set is
    /// `capabilities`, or says why it must not run (the tool error the model reads; the call is
    /// then never started).
    pub fn admit<'a>(
        &self,
        name: &'a str,
        arguments: &'a Value,
        capabilities: &[String],
    ) -> Result<Admitted<'a>, String> {
        let available = capabilities.join(", ");
        let Some(entry) = self.find(name) else {
            return Err(format!(
                "unknown tool `{name}`; the call was not run. Available tools: {available}"
            ));
        };
        if !capabilities.iter().any(|c| c == name) {
            return Err(format!(
                "tool `{name}` is not allowed in this session (not in the agent's lock); the call \
                 was not run. Available tools: {available}"
            ));
        }
        if !arguments.is_object() {
            return Err(format!(
                "arguments for `{name}` must be a JSON object, got {}; the call was not run",
                json_kind(arguments)
            ));
        }
        Ok(Admitted {
            entry,
            name,
            arguments,
        })
    }
}

/// A call [`Registry::admit`] let through: a known tool, in the Session's capabilities, with a
/// JSON object for arguments. Only an admitted call can be executed.
pub struct Admitted<'a> {
    entry: &'static Entry,
    name: &'a str,
    arguments: &'a Value,
}

impl Admitted<'_> {
    pub fn entry(&self) -> &'static Entry {
        self.entry
    }

    /// The tool name the call gave (one of the family, for a pattern entry).
    pub fn name(&self) -> &str {
        self.name
    }

    /// Parses the arguments and runs the tool (the caller confines, catches and caps).
    pub(super) fn run(&self, ws: &Workspace, ctx: &ToolContext) -> ToolOutput {
        self.entry.executor.run(self.name, ws, self.arguments, ctx)
    }
}

/// Parses a call's arguments and runs the tool; also gives the arguments' schema, from the same
/// type the parser uses.
trait Executor: Sync {
    fn parameters(&self) -> Value;
    fn run(&self, name: &str, ws: &Workspace, arguments: &Value, ctx: &ToolContext) -> ToolOutput;
}

/// An executor whose arguments are the serde struct `A`.
struct Typed<A>(fn(&Workspace, A, &ToolContext) -> ToolOutput);

impl<A: DeserializeOwned + schemars::JsonSchema> Executor for Typed<A> {
    fn parameters(&self) -> Value {
        schema::parameters::<A>()
    }

    fn run(&self, name: &str, ws: &Workspace, arguments: &Value, ctx: &ToolContext) -> ToolOutput {
        match parse::<A>(name, arguments) {
            Ok(args) => (self.0)(ws, args, ctx),
            Err(e) => ToolOutput::error(e.message),
        }
    }
}

/// A tool's arguments as its type; arguments that do not fit are invalid input (the model's),
/// whose message the tool call returns.
pub(super) fn parse<T: DeserializeOwned>(tool: &str, arguments: &Value) -> Result<T> {
    T::deserialize(arguments).map_err(|e| {
        Error::invalid(format!(
            "invalid arguments for `{tool}`: {e}; see the tool's schema"
        ))
        .with_source(e)
    })
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::policy::MergedPolicy;
    use crate::tools::DEFAULT_EXEC_TIMEOUT_MS;

    fn caps(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_entry_is_a_valid_unique_capability() {
        let mut seen = Vec::new();
        for entry in REGISTRY.entries() {
            let name = entry.name().as_str();
            match entry.name() {
                ToolName::Exact(_) => {
                    assert_eq!(crate::agent::capability_name_error(name), None, "{name}");
                    assert!(!name.contains('*'), "{name}");
                }
                ToolName::Pattern(p) => assert!(p.ends_with('*'), "{p}"),
            }
            assert!(!seen.contains(&name), "`{name}` is listed twice");
            seen.push(name);
            assert!(!entry.description().is_empty(), "{name}");
            assert_eq!(entry.parameters()["type"], "object", "{name}");
            if let ToolName::Exact(_) = entry.name() {
                assert_eq!(entry.parameters()["additionalProperties"], false, "{name}");
            }
        }
        assert_eq!(
            seen,
            [
                "read", "glob", "grep", "lsp", "write", "edit", "exec", "task", "mcp__*"
            ]
        );
    }

    #[test]
    fn side_effects_and_gates() {
        let entry = |n| REGISTRY.find(n).unwrap();
        for read_only in ["read", "glob", "grep", "lsp"] {
            assert_eq!(entry(read_only).effect(), SideEffect::Read);
            assert_eq!(entry(read_only).gate(), None);
        }
        for writer in ["write", "edit"] {
            assert_eq!(entry(writer).effect(), SideEffect::WorkspaceWrite);
            assert_eq!(entry(writer).gate(), None);
        }
        assert_eq!(entry("exec").effect(), SideEffect::External);
        assert_eq!(entry("exec").gate(), Some(Gate::Shell));
        assert_eq!(entry("task").effect(), SideEffect::Delegate);
        assert_eq!(entry("task").gate(), Some(Gate::Shell));
        assert!(!REGISTRY.implements("browser"));
        assert_eq!(entry("mcp__github__search").effect(), SideEffect::External);
        assert_eq!(entry("mcp__github__search").gate(), Some(Gate::Mcp));
        assert!(!REGISTRY.implements("mcp__"));
    }

    /// The words the model reads for a refused call (they were the run loop's own before the
    /// registry; the journal never records such a call).
    #[test]
    fn a_refused_call_says_why_and_that_it_was_not_run() {
        let session = caps(&["grep", "read"]);
        let refusal = |name: &str, args: Value| REGISTRY.admit(name, &args, &session).err();
        assert_eq!(
            refusal("rm_rf", json!({})).as_deref(),
            Some("unknown tool `rm_rf`; the call was not run. Available tools: grep, read")
        );
        assert_eq!(
            refusal("write", json!({"path": "a", "content": "x"})).as_deref(),
            Some(
                "tool `write` is not allowed in this session (not in the agent's lock); the call \
                 was not run. Available tools: grep, read"
            )
        );
        assert_eq!(
            refusal("read", json!(["a.txt"])).as_deref(),
            Some("arguments for `read` must be a JSON object, got an array; the call was not run")
        );
        let args = json!({"path": "a.txt"});
        let admitted = REGISTRY.admit("read", &args, &session).unwrap();
        assert_eq!(admitted.name(), "read");
        assert_eq!(admitted.entry().effect(), SideEffect::Read);
    }

    /// The policy's words for a capability without a tool list the registry in catalog order.
    #[test]
    fn the_policy_refusal_of_an_unimplemented_capability_lists_the_registry() {
        assert_eq!(
            MergedPolicy::default().refusal("browser").as_deref(),
            Some(
                "this runtime has no tool for it (it implements read, glob, grep, lsp, write, \
                 edit, exec, task, mcp__*)"
            )
        );
    }

    #[test]
    fn described_defaults_are_the_real_ones() {
        let exec = REGISTRY.find("exec").unwrap();
        let default = DEFAULT_EXEC_TIMEOUT_MS.to_string();
        assert!(exec.description().contains(&format!("{default} ms")));
        let timeout = &exec.parameters()["properties"]["timeoutMs"];
        assert!(timeout["description"].as_str().unwrap().contains(&default));
        assert_eq!(timeout["maximum"], crate::tools::MAX_EXEC_TIMEOUT_MS);
    }

    /// A family entry (as MCP servers will have) covers its members and only them, is offered
    /// once per member capability, and admits a member in the Session's capability set.
    #[test]
    fn a_pattern_entry_covers_its_family() {
        static FAMILY: Registry = Registry {
            entries: &[Entry {
                name: ToolName::Pattern("mcp__docs__*"),
                description: "A documentation server's tool.",
                effect: SideEffect::External,
                gate: Some(Gate::Mcp),
                executor: &Typed::<read::ReadArgs>(|_, _, _| ToolOutput::ok("from the server")),
            }],
        };
        let name = ToolName::Pattern("mcp__docs__*");
        assert!(name.matches("mcp__docs__search"));
        assert!(
            !name.matches("mcp__docs__"),
            "a member has a name of its own"
        );
        assert!(!name.matches("mcp__other__search"));
        assert!(!ToolName::Exact("read").matches("reader"));

        let session = caps(&[
            "mcp__docs__fetch",
            "mcp__docs__search",
            "mcp__web__get",
            "read",
        ]);
        let locked = |tool: &str| crate::mcp::LockedTool {
            name: crate::mcp::capability("docs", tool),
            server: "docs".into(),
            tool: tool.into(),
            description: String::new(),
            input_schema: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
            schema_hash: String::new(),
        };
        let mcp = [locked("fetch"), locked("search")];
        let offered = FAMILY.schemas(&session, &mcp);
        let names: Vec<&str> = offered.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["mcp__docs__fetch", "mcp__docs__search"]);
        assert_eq!(
            offered[1].parameters, mcp[1].input_schema,
            "the server's schema"
        );
        assert_eq!(
            offered[1].description,
            "Tool `search` of MCP server `docs`."
        );
        let args = json!({"path": "x"});
        let admitted = FAMILY.admit("mcp__docs__search", &args, &session).unwrap();
        assert_eq!(admitted.name(), "mcp__docs__search");
        assert!(FAMILY.admit("mcp__docs__list", &args, &session).is_err());
        let unknown = FAMILY.admit("read", &args, &session).err().unwrap();
        assert!(unknown.contains("unknown tool"), "{unknown}");
    }
}
