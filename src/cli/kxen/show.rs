//! `session list`, `session show SES`, `run show SES RUN`: read-only views — one JSON object per
//! line (jsonl), or a human summary (`--format text`).

use std::path::Path;

use serde_json::Value;

use super::render::Renderer;
use crate::cli::output::{self, Format};
use crate::error::{Error, ExitStatus, Result};
use crate::events::{Event, EventSink};
use crate::session::view;
use crate::state::StateDir;

/// `session list`: every readable Session, and each damaged one as a `damagedSession` entry
/// plus a warning. Exit 0 unless `strict`, where any damaged Session makes it exit 10 (after
/// listing everything), so a script can choose between "list what works" and "fail on damage".
pub fn session_list(
    state: &StateDir,
    workspace: Option<&Path>,
    strict: bool,
    format: Format,
) -> Result<ExitStatus> {
    let listing = view::list(state, workspace)?;
    let sessions = &listing.entries;
    match format {
        Format::Jsonl => sessions.iter().for_each(output::json_line),
        Format::Text if sessions.is_empty() => output::line("no sessions"),
        Format::Text => {
            for s in sessions {
                let id = s["id"].as_str().unwrap_or("");
                if s["type"] == "damagedSession" {
                    let message = s["error"]["message"].as_str().unwrap_or("");
                    output::line(&output::terminal_safe(&format!("{id}  DAMAGED: {message}")));
                    continue;
                }
                let depth = s["taskParent"]["depth"].as_u64().unwrap_or(0) as usize;
                let lineage = match (s["parentId"].as_str(), s["forkKind"].as_str()) {
                    (Some(parent), Some("task")) => format!(
                        "  (task `{}` of {parent})",
                        clip(s["taskParent"]["description"].as_str().unwrap_or(""), 60)
                    ),
                    (Some(parent), Some(kind)) => format!("  ({kind} fork of {parent})"),
                    _ => String::new(),
                };
                let indent = "  ".repeat(depth);
                output::line(&format!(
                    "{indent}{id}  {}  {}  {}  runs: {} (last: {}){lineage}",
                    s["createdAt"].as_str().unwrap_or(""),
                    s["agent"].as_str().unwrap_or("-"),
                    s["workspace"].as_str().unwrap_or("-"),
                    s["runs"],
                    s["lastRunStatus"].as_str().unwrap_or("-"),
                ));
            }
        }
    }
    for (id, error) in &listing.damaged {
        output::Diagnostics::kxen(format).warning(&format!(
            "session {id} cannot be read and is listed as damaged: {}",
            error.message
        ));
    }
    if let Some((id, _)) = listing.damaged.first()
        && strict
    {
        return Err(Error::corrupt(format!(
            "{} Session(s) in {} cannot be read (the first: {id})",
            listing.damaged.len(),
            state.root().display()
        ))
        .with_hint(format!(
            "run `kxen-agent session verify {id}` for the details; restore the Session from a \
             bundle or remove its directory"
        )));
    }
    Ok(ExitStatus::Success)
}

pub fn session_show(state: &StateDir, session_id: &str, format: Format) -> Result<ExitStatus> {
    let shown = view::show_session(state, session_id)?;
    match format {
        Format::Jsonl => print(&shown),
        Format::Text => output::raw(&session_text(&to_value(&shown))),
    }
    Ok(ExitStatus::Success)
}

pub fn run_show(
    state: &StateDir,
    session_id: &str,
    run_id: &str,
    format: Format,
) -> Result<ExitStatus> {
    let shown = view::show_run(state, session_id, run_id)?;
    match format {
        Format::Jsonl => output::serialize_line(&shown),
        Format::Text => output::raw(&run_text(&shown)),
    }
    Ok(ExitStatus::Success)
}

fn to_value<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("-")
}

/// `text` on one line, at most `max` characters: line breaks and tabs become spaces, other
/// control characters (escape sequences a tool or model wrote) `?`, so none reaches the terminal.
fn clip(text: &str, max: usize) -> String {
    let one_line: String = text
        .chars()
        .map(|c| match c {
            '\n' | '\t' | '\r' => ' ',
            c if c.is_control() => '?',
            c => c,
        })
        .collect();
    if one_line.chars().count() <= max {
        one_line
    } else {
        let cut: String = one_line.chars().take(max).collect();
        format!("{cut}…")
    }
}

/// A cost as `session show`/`run show` give it: `$0.0123`, or `unknown (why)`.
fn cost_text(cost: &Value) -> String {
    match cost["usd"].as_f64() {
        Some(usd) => format!("${usd:.4}"),
        None => format!(
            "unknown ({})",
            cost["unknown"].as_str().unwrap_or("not recorded")
        ),
    }
}

/// The human view of a Session: identity, binding, lock, runs, then the conversation.
fn session_text(s: &Value) -> String {
    let mut out = format!(
        "session {}  created {}\n",
        str_of(s, "id"),
        str_of(s, "createdAt")
    );
    let ws = &s["workspace"];
    out.push_str(&format!(
        "workspace {}  ({} identity, branch {}, head {})\n",
        str_of(ws, "root"),
        str_of(ws, "identityKind"),
        ws["branch"].as_str().unwrap_or("(detached)"),
        str_of(ws, "head"),
    ));
    let lock = &s["lock"];
    out.push_str(&format!(
        "agent {}  {}  capabilities: {}\n",
        lock["definition"]["metadata"]["name"]
            .as_str()
            .unwrap_or("-"),
        str_of(lock, "definitionHash"),
        lock["capabilities"]
            .as_array()
            .map(|c| c
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_default(),
    ));
    for tool in lock["mcpTools"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "mcp tool {}  (server {}, tool {}, schema {})\n",
            str_of(tool, "name"),
            str_of(tool, "server"),
            str_of(tool, "tool"),
            str_of(tool, "schemaHash"),
        ));
    }
    if let Some(parent) = s["parentId"].as_str() {
        out.push_str(&format!(
            "fork of {parent} ({}) at {}\n",
            str_of(s, "forkKind"),
            s["forkPoint"]["messageId"].as_str().unwrap_or("-")
        ));
    }
    out.push_str(&format!("cost {}\n", cost_text(&s["cost"])));
    for run in s["runs"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "run {}  {}{}  task: {}\n",
            str_of(run, "id"),
            str_of(run, "status"),
            if run["settled"] == Value::Bool(true) {
                ""
            } else {
                " (unsettled)"
            },
            clip(str_of(run, "task"), 60),
        ));
        let last = run["attempts"].as_array().and_then(|a| a.last());
        if let Some(provider) = last.map(|a| &a["provider"]).filter(|p| p.is_object()) {
            out.push_str(&format!("  provider {}\n", provider_text(provider)));
        }
        out.push_str(&format!("  cost {}\n", cost_text(&run["cost"])));
        for file in run["contextFiles"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  rules {}  {}  {} bytes{}\n",
                clip(str_of(file, "path"), 80),
                str_of(file, "sha256"),
                file["bytes"].as_u64().unwrap_or_default(),
                if file["truncated"] == Value::Bool(true) {
                    " (cut at 32 KiB)"
                } else {
                    ""
                }
            ));
        }
        out.push_str(&plan_text(run, "  "));
    }
    out.push('\n');
    for m in s["messages"].as_array().into_iter().flatten() {
        if let Some(range) = m["compacts"].as_object() {
            // What later requests carry in place of the range (the messages stay above).
            out.push_str(&format!(
                "[compaction] {} messages, {} to {}, summarized: ",
                range.get("messages").and_then(Value::as_u64).unwrap_or(0),
                range.get("from").and_then(Value::as_str).unwrap_or("-"),
                range.get("to").and_then(Value::as_str).unwrap_or("-"),
            ));
            out.push_str(&clip(str_of(m, "content"), 100));
            out.push('\n');
            continue;
        }
        out.push_str(&format!(
            "[{}] {}",
            str_of(m, "role"),
            clip(str_of(m, "content"), 100)
        ));
        for call in m["toolCalls"].as_array().into_iter().flatten() {
            out.push_str(&format!(
                "  -> {} {}",
                clip(str_of(call, "name"), 40),
                clip(&call["arguments"].to_string(), 60)
            ));
        }
        out.push('\n');
    }
    out
}

/// The DWP plan task a run works on and its manifest's fingerprint (and the limit holding it).
fn plan_text(run: &Value, indent: &str) -> String {
    let plan = &run["plan"];
    if !plan.is_object() {
        return String::new();
    }
    let mut out = format!(
        "{indent}plan {} task {} ({})  inputs_fingerprint {}\n",
        str_of(plan, "plan"),
        str_of(plan, "task"),
        clip(str_of(plan, "dir"), 100),
        str_of(plan, "inputsFingerprint"),
    );
    if let Some(limit) = run["planHold"].as_str() {
        out.push_str(&format!(
            "{indent}stopped: plan limit {} exhausted (`dwp resources recover` lifts the hold)\n",
            clip(limit, 60)
        ));
    }
    out
}

/// `NAME (KIND MODEL, option value, …)`: the provider an attempt used, as run.json records it
/// (it holds no credential).
fn provider_text(p: &Value) -> String {
    let mut parts = vec![str_of(p, "kind").to_string()];
    if let Some(model) = p["model"].as_str() {
        parts[0].push_str(&format!(" {}", clip(model, 60)));
    }
    for (key, label) in [
        ("temperature", "temperature"),
        ("topP", "top_p"),
        ("maxTokens", "max_tokens"),
        ("seed", "seed"),
        ("extraBody", "extra_body"),
    ] {
        let value = &p["options"][key];
        if !value.is_null() {
            parts.push(format!("{label} {}", clip(&value.to_string(), 80)));
        }
    }
    format!("{} ({})", clip(str_of(p, "name"), 60), parts.join(", "))
}

/// The human view of a run: status, result, attempts, then every journal operation (read from
/// the folded operations themselves: a long run's operations are not converted to a JSON tree).
fn run_text(shown: &view::RunView) -> String {
    let run = &to_value(&shown.run);
    let mut out = format!(
        "run {}  {}  of session {}\ntask: {}\n",
        str_of(run, "id"),
        str_of(run, "status"),
        str_of(run, "sessionId"),
        clip(str_of(run, "task"), 100),
    );
    out.push_str(&plan_text(run, ""));
    if let Some(result) = run["result"].as_object() {
        let final_text = result
            .get("finalText")
            .and_then(Value::as_str)
            .unwrap_or("");
        out.push_str(&format!("result: {}\n", clip(final_text, 100)));
        if let Some(unverified) = result
            .get("unverified")
            .and_then(|u| serde_json::from_value::<crate::events::Unverified>(u.clone()).ok())
        {
            out.push_str(&format!("{}\n", clip(&unverified.describe(), 300)));
        }
        if let Some(error) = result
            .get("error")
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
        {
            out.push_str(&format!("error: {}\n", clip(error, 200)));
        }
    }
    let attempts = run["attempts"].as_array().map_or(0, Vec::len);
    out.push_str(&format!("attempts: {attempts}\n"));
    out.push_str(&format!("cost: {}\n", cost_text(&shown.cost)));
    for op in &shown.operations {
        out.push_str(&format!(
            "{}  {:<14} {} {}\n",
            op.op_id,
            op.phase.name(),
            clip(&op.tool, 40),
            clip(op.arguments.as_str(), 60),
        ));
        if let Some(approval) = &op.approval {
            let decided = approval
                .decision
                .map_or("waits for approval".to_string(), |d| d.name().to_string());
            out.push_str(&format!(
                "    ask (rule {}): {decided}  arguments {}\n",
                approval.rule, approval.arguments_hash
            ));
        }
        // What an operator needs before `run resolve`: why the outcome is unknown.
        if let Some(reason) = &op.unknown_reason {
            out.push_str(&format!("    unknown: {}\n", clip(reason, 400)));
        }
        if let Some(output) = &op.output {
            let what = if output.is_error { "error" } else { "output" };
            out.push_str(&format!("    {what}: {}\n", clip(&output.text, 100)));
            if let Some(fence) = &output.fence {
                out.push_str(&format!("    fence: {}\n", fence.summary()));
            }
        }
    }
    for op in &shown.pending_approvals {
        out.push_str(&format!(
            "needs approval: {} {} {}\n  approve with `kxen-agent run approve {} {} {}` or deny with `kxen-agent run deny {} {} {} --reason TEXT`\n",
            op.op_id,
            clip(&op.tool, 40),
            clip(&op.arguments.to_string(), 200),
            str_of(run, "sessionId"),
            str_of(run, "id"),
            op.op_id,
            str_of(run, "sessionId"),
            str_of(run, "id"),
            op.op_id,
        ));
    }
    if !shown.run.unknown_ops.is_empty() {
        let op = match shown.run.unknown_ops.as_slice() {
            [one] => one.as_str(),
            _ => "OP",
        };
        out.push_str(&format!(
            "needs input: record what happened with `kxen-agent run resolve {} {} {op} --output TEXT`\n",
            str_of(run, "sessionId"),
            str_of(run, "id"),
        ));
    }
    out
}

/// `run resolve`: not read-only; takes the Session's lease.
pub fn run_resolve(
    state: &StateDir,
    resolution: &crate::run::resolve::Resolution,
    format: Format,
) -> Result<ExitStatus> {
    crate::run::resolve::resolve(state, resolution)?;
    let event = Event::OperationResolved {
        session_id: resolution.session_id.clone(),
        run_id: resolution.run_id.clone(),
        op_id: resolution.op_id.clone(),
        is_error: resolution.is_error,
    };
    Renderer::new(format).emit(event);
    Ok(ExitStatus::Success)
}

/// `run approve` / `run deny`: not read-only; takes the Session's lease.
pub fn run_decide(
    state: &StateDir,
    [session_id, run_id, op_id]: [&str; 3],
    decision: &crate::run::approval::Decision,
    expected_hash: Option<&str>,
    format: Format,
) -> Result<ExitStatus> {
    let arguments_hash =
        crate::run::approval::decide(state, session_id, run_id, op_id, decision, expected_hash)?;
    let decision = match decision {
        crate::run::approval::Decision::Approve => "approved",
        crate::run::approval::Decision::Deny { .. } => "denied",
    };
    Renderer::new(format).emit(Event::OperationDecided {
        session_id: session_id.to_string(),
        run_id: run_id.to_string(),
        op_id: op_id.to_string(),
        decision: decision.to_string(),
        arguments_hash,
    });
    Ok(ExitStatus::Success)
}

fn print<T: serde::Serialize>(value: &T) {
    output::line(&serde_json::to_string(value).unwrap_or_else(|_| "{}".into()));
}

#[cfg(test)]
mod tests {
    use super::clip;

    #[test]
    fn clip_keeps_one_line_and_no_control_characters() {
        assert_eq!(clip("a\nb", 10), "a b");
        assert_eq!(clip("     1\tx\r\n", 20), "     1 x  ");
        assert_eq!(clip("red \u{1b}[31mX\u{7}", 20), "red ?[31mX?");
        assert_eq!(clip("abcdef", 3), "abc…");
        assert_eq!(clip("ééé", 3), "ééé");
    }
}

/// The arguments of `kxen-agent session list`.
#[derive(Debug, clap::Args)]
pub struct SessionListArgs {
    /// Only the Sessions bound to the repository at PATH (same identity rule as a resume).
    #[arg(long, value_name = "PATH")]
    pub workspace: Option<std::path::PathBuf>,
    /// Exit 10 when a Session cannot be read (it is still listed as `damagedSession`).
    /// Without it, damage is reported as an entry and a warning, and the exit is 0.
    #[arg(long)]
    pub strict: bool,
    /// List the Sessions stored on git remote NAME instead (`refs/kxen/sessions/*`, and
    /// whether a run holds a remote lease), of the repository at --workspace PATH (default:
    /// the current directory).
    #[arg(long, value_name = "NAME", conflicts_with = "strict")]
    pub remote: Option<String>,
}

/// The arguments of `kxen-agent session show`.
#[derive(Debug, clap::Args)]
pub struct SessionShowArgs {
    /// The Session id (`ses_…`).
    pub session: String,
}

/// The arguments of `kxen-agent run resolve`.
#[derive(Debug, clap::Args)]
pub struct RunResolveArgs {
    /// The Session id (`ses_…`).
    pub session: String,
    /// The run id (`run_…`).
    pub run: String,
    /// The operation id (`op_…`), from `run show`.
    pub op: String,
    /// What the tool's output was (what the model will see).
    #[arg(long, value_name = "TEXT")]
    pub output: String,
    /// The tool failed.
    #[arg(long)]
    pub is_error: bool,
}

/// The arguments of `kxen-agent run approve`.
#[derive(Debug, clap::Args)]
pub struct RunApproveArgs {
    /// The Session id (`ses_…`).
    pub session: String,
    /// The run id (`run_…`).
    pub run: String,
    /// The operation id (`op_…`), from `run show` or the `runApprovalRequired` event.
    pub op: String,
    /// Refuse (exit 5) unless the call's arguments hash to this (`argumentsHash` in `run show`).
    #[arg(long, value_name = "HASH")]
    pub arguments_hash: Option<String>,
}

/// The arguments of `kxen-agent run deny`.
#[derive(Debug, clap::Args)]
pub struct RunDenyArgs {
    /// The Session id (`ses_…`).
    pub session: String,
    /// The run id (`run_…`).
    pub run: String,
    /// The operation id (`op_…`).
    pub op: String,
    /// Why (the model reads it).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Refuse (exit 5) unless the call's arguments hash to this.
    #[arg(long, value_name = "HASH")]
    pub arguments_hash: Option<String>,
}

/// The arguments of `kxen-agent run show`.
#[derive(Debug, clap::Args)]
pub struct RunShowArgs {
    /// The Session id (`ses_…`).
    pub session: String,
    /// The run id (`run_…`).
    pub run: String,
}
