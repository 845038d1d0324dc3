//! Operator hooks: programs the operator's model config runs around tool calls and runs, in the
//! shape Claude Code's hooks read, so existing scripts port.
//!
//! - **`pre_tool_use`**, in the one call boundary ([`crate::run`]'s gate), before a call starts:
//!   exit 0 allows; exit 2 denies (stderr is the reason the model reads); stdout
//!   `{"decision": "allow"|"deny"|"ask", "reason": "…"}` decides explicitly (`ask` joins the
//!   approval flow). Any other exit, a crash, a timeout or a hook that cannot start **denies**
//!   (fail closed) and says so. The hooks matching a call run in config order; a deny stops the
//!   rest and wins, an `ask` wins over allows.
//! - **`post_tool_use`**, after a call ran and before its outcome is recorded: stdout
//!   `{"additionalContext": "…"}` is appended to the result the model reads (and so is durable
//!   with it); a failing post hook changes nothing and is reported as a warning.
//! - **`run_start`** and **`run_end`** see the run (and its outcome) and never change it.
//!
//! Every hook starts through the run's one fence ([`crate::sandbox::RunFence`]; `readOnly`
//! unless its entry says otherwise) with the filtered environment `exec` gets — never a
//! credential — and its own HOME and TMPDIR. Decisions are journaled with the operation (a deny
//! as `awaitingApproval` + `denied`, an `ask` as `awaitingApproval`, both naming the hook; an
//! allow by the `started` record that follows), so resume never asks a hook again about an
//! operation it decided. The hooks' config is part of the Session's lock: a resume with other
//! hooks is drift (exit 6).

pub mod config;
mod runner;

use serde_json::{Value, json};

pub use config::{HookEntry, HooksConfig};
pub use runner::Ended;

use crate::error::{Error, Result};
use crate::sandbox::RunFence;

/// The most a post hook's note adds to a result (the result itself is capped before).
const MAX_NOTE_CHARS: usize = 4000;

/// What a tool call's hooks are told about it.
#[derive(Debug, Clone, Copy)]
pub struct CallFacts<'a> {
    pub session_id: &'a str,
    pub run_id: &'a str,
    pub op_id: &'a str,
    pub tool: &'a str,
    pub arguments: &'a Value,
}

/// What the `pre_tool_use` hooks decided about a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No hook matched, or every matching hook allowed it.
    Allow,
    /// A hook denied it: `hook` names the hook, `reason` is what the model reads.
    Deny { hook: String, reason: String },
    /// A hook asked a human to decide.
    Ask { hook: String, reason: String },
}

/// The `pre_tool_use` hooks about tool `tool`, named as `run show` names a hook (joined with
/// ", "); empty when none matches, and then no hook runs and nothing is journaled for them.
pub fn matching_pre_hooks(config: &HooksConfig, tool: &str) -> String {
    config
        .pre_tool_use
        .iter()
        .filter(|e| e.matches(tool))
        .map(|e| e.describe("pre_tool_use"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs the `pre_tool_use` hooks of `config` matching the call (see the module doc).
pub fn pre_tool_use(config: &HooksConfig, fence: &RunFence, call: CallFacts) -> Verdict {
    let mut verdict = Verdict::Allow;
    for entry in config.pre_tool_use.iter().filter(|e| e.matches(call.tool)) {
        let hook = entry.describe("pre_tool_use");
        let input = call_input("PreToolUse", fence, call, None);
        match decide(runner::run(entry, &input, fence)) {
            Decision::Allow => {}
            Decision::Deny(reason) => return Verdict::Deny { hook, reason },
            Decision::Ask(reason) => verdict = Verdict::Ask { hook, reason },
        }
    }
    verdict
}

/// Runs the `post_tool_use` hooks matching the call, which ended with `output` (`is_error`).
/// Returns what to append to the result the model reads, and a warning per failed hook.
pub fn post_tool_use(
    config: &HooksConfig,
    fence: &RunFence,
    call: CallFacts,
    output: &str,
    is_error: bool,
) -> (Vec<String>, Vec<String>) {
    let (mut notes, mut warnings) = (Vec::new(), Vec::new());
    for entry in config.post_tool_use.iter().filter(|e| e.matches(call.tool)) {
        let input = call_input("PostToolUse", fence, call, Some((output, is_error)));
        match runner::run(entry, &input, fence) {
            Ended::Exited {
                code: 0, stdout, ..
            } => {
                if let Some(note) = parse_object(&stdout)
                    .and_then(|o| o.get("additionalContext")?.as_str().map(str::to_string))
                    .filter(|n| !n.trim().is_empty())
                {
                    notes.push(crate::text::preview(&note, MAX_NOTE_CHARS));
                }
            }
            Ended::Exited { code, stderr, .. } => warnings.push(format!(
                "{} exited with code {code} for operation {}; the result is unchanged ({})",
                entry.describe("post_tool_use"),
                call.op_id,
                crate::text::preview(stderr.trim(), 200)
            )),
            Ended::Failed(why) => warnings.push(format!(
                "{} failed for operation {}: {why}; the result is unchanged",
                entry.describe("post_tool_use"),
                call.op_id
            )),
        }
    }
    (notes, warnings)
}

/// Runs the `run_start` (`ending` = `None`) or `run_end` hooks. They never change the run;
/// returns a warning per failed hook.
pub fn run_event(
    config: &HooksConfig,
    fence: &RunFence,
    session_id: &str,
    run_id: &str,
    ending: Option<&Value>,
) -> Vec<String> {
    let (entries, event, name) = match ending {
        None => (&config.run_start, "RunStart", "run_start"),
        Some(_) => (&config.run_end, "RunEnd", "run_end"),
    };
    let mut input = json!({
        "hook_event_name": event,
        "session_id": session_id,
        "run_id": run_id,
        "cwd": fence.workspace(),
    });
    if let Some(ending) = ending {
        input["outcome"] = ending.clone();
    }
    let mut warnings = Vec::new();
    for entry in entries {
        match runner::run(entry, &input, fence) {
            Ended::Exited { code: 0, .. } => {}
            Ended::Exited { code, .. } => warnings.push(format!(
                "{} exited with code {code}; the run is unchanged",
                entry.describe(name)
            )),
            Ended::Failed(why) => warnings.push(format!(
                "{} failed: {why}; the run is unchanged",
                entry.describe(name)
            )),
        }
    }
    warnings
}

/// A resume whose hooks differ from the ones the Session was created with is drift (exit 6).
pub fn check_drift(locked: Option<&str>, now: &HooksConfig) -> Result<()> {
    let now = now.hash();
    if locked == now.as_deref() {
        return Ok(());
    }
    let show = |h: Option<&str>| h.map_or("none".to_string(), str::to_string);
    Err(Error::policy(format!(
        "hooks drift: the [[hooks.*]] tables of the runtime config changed since the session \
         was created (locked {}, now {})",
        show(locked),
        show(now.as_deref())
    ))
    .with_hint(
        "resume with the --config whose hooks the session was created with, or start a new \
         session",
    ))
}

/// What one pre hook said.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Allow,
    Deny(String),
    Ask(String),
}

fn decide(ended: Ended) -> Decision {
    match ended {
        Ended::Exited {
            code: 0, cut: true, ..
        } => Decision::Deny(
            "the hook wrote more than its output limit, so its decision cannot be read (denied: \
             hooks fail closed)"
                .into(),
        ),
        Ended::Exited {
            code: 0, stdout, ..
        } => {
            let Some(object) = parse_object(&stdout) else {
                // Plain text allows (as exit 0 does); a JSON object that does not parse is a
                // decision we cannot read.
                if stdout.trim_start().starts_with('{') {
                    return Decision::Deny(
                        "the hook printed a JSON object that does not parse (denied: hooks fail \
                         closed)"
                            .into(),
                    );
                }
                return Decision::Allow;
            };
            let reason = object
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            match object.get("decision").and_then(Value::as_str) {
                None | Some("allow") => Decision::Allow,
                Some("deny") => Decision::Deny(or_default(reason, "the hook denied the call")),
                Some("ask") => Decision::Ask(or_default(reason, "the hook asks a human")),
                Some(other) => Decision::Deny(format!(
                    "the hook answered an unknown decision {other:?} (denied: hooks fail closed)"
                )),
            }
        }
        Ended::Exited {
            code: 2, stderr, ..
        } => Decision::Deny(or_default(
            stderr.trim().to_string(),
            "the hook exited with code 2",
        )),
        Ended::Exited { code, stderr, .. } => Decision::Deny(format!(
            "the hook exited with code {code} (denied: hooks fail closed){}",
            match stderr.trim() {
                "" => String::new(),
                err => format!(": {}", crate::text::preview(err, 500)),
            }
        )),
        Ended::Failed(why) => Decision::Deny(format!("{why} (denied: hooks fail closed)")),
    }
}

fn or_default(text: String, default: &str) -> String {
    if text.trim().is_empty() {
        default.to_string()
    } else {
        text
    }
}

/// A JSON object on a hook's stdout (surrounding whitespace allowed), else `None`.
fn parse_object(stdout: &str) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_str(stdout.trim()) {
        Ok(Value::Object(map)) => Some(map),
        _ => None,
    }
}

fn call_input(
    event: &str,
    fence: &RunFence,
    call: CallFacts,
    response: Option<(&str, bool)>,
) -> Value {
    let mut input = json!({
        "hook_event_name": event,
        "session_id": call.session_id,
        "run_id": call.run_id,
        "op_id": call.op_id,
        "tool_name": call.tool,
        "tool_input": call.arguments,
        "cwd": fence.workspace(),
    });
    if let Some((output, is_error)) = response {
        input["tool_response"] = json!(output);
        input["is_error"] = json!(is_error);
    }
    input
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exited(code: i32, stdout: &str, stderr: &str) -> Ended {
        Ended::Exited {
            code,
            stdout: stdout.into(),
            stderr: stderr.into(),
            cut: false,
        }
    }

    #[test]
    fn exit_codes_and_json_decide_and_everything_else_fails_closed() {
        assert_eq!(decide(exited(0, "", "")), Decision::Allow);
        assert_eq!(decide(exited(0, "not json", "")), Decision::Allow);
        assert_eq!(
            decide(exited(0, r#"{"decision":"allow"}"#, "")),
            Decision::Allow
        );
        assert_eq!(
            decide(exited(0, r#" {"decision":"deny","reason":"no rm"} "#, "")),
            Decision::Deny("no rm".into())
        );
        assert_eq!(
            decide(exited(0, r#"{"decision":"ask"}"#, "")),
            Decision::Ask("the hook asks a human".into())
        );
        assert!(
            matches!(decide(exited(0, r#"{"decision":"maybe"}"#, "")), Decision::Deny(r) if r.contains("maybe"))
        );
        assert_eq!(
            decide(exited(2, "", "too risky\n")),
            Decision::Deny("too risky".into())
        );
        assert!(
            matches!(decide(exited(1, "", "boom")), Decision::Deny(r) if r.contains("code 1") && r.contains("boom"))
        );
        assert!(
            matches!(decide(Ended::Failed("it timed out".into())), Decision::Deny(r) if r.contains("fail closed"))
        );
        // A decision that cannot be read denies: a cut output, a broken object.
        let cut = Ended::Exited {
            code: 0,
            stdout: r#"{"decision":"deny","reason":"rm xxxx"#.into(),
            stderr: String::new(),
            cut: true,
        };
        assert!(matches!(decide(cut), Decision::Deny(r) if r.contains("output limit")));
        let broken = exited(0, r#"{"decision":"deny""#, "");
        assert!(matches!(decide(broken), Decision::Deny(r) if r.contains("does not parse")));
    }

    #[test]
    fn drift_is_a_changed_hash_either_way() {
        let none = HooksConfig::default();
        assert!(check_drift(None, &none).is_ok());
        let some: HooksConfig = toml::from_str("[[run_end]]\ncommand = [\"x\"]\n").unwrap();
        let hash = some.hash();
        assert!(check_drift(hash.as_deref(), &some).is_ok());
        assert_eq!(check_drift(None, &some).unwrap_err().exit_code(), 6);
        assert_eq!(
            check_drift(hash.as_deref(), &none).unwrap_err().exit_code(),
            6
        );
    }
}
