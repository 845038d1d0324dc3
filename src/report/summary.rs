//! The Markdown summary of a report (for `$GITHUB_STEP_SUMMARY`): status, cost, tool calls,
//! and what a person must do next, as exact commands.
//!
//! Only ids, counts, statuses and tool names appear, inside code spans with backticks removed:
//! no model or tool text reaches the summary, where a CI page would render it as Markdown.

use std::fmt::Write as _;

use super::model::Data;

pub fn render(data: &Data) -> String {
    let s = &data.session;
    let id = code(s["id"].as_str().unwrap_or("-"));
    let mut out = format!("### kxen-agent Session {id}\n\n");
    let last = data.runs.last().map(|r| &r.view.run);
    let _ = match last {
        Some(run) => writeln!(
            out,
            "- **status:** {} (run {}, {} run(s) in the Session)",
            code(run.status.name()),
            code(&run.id),
            data.runs.len()
        ),
        None => writeln!(out, "- **status:** no run yet"),
    };
    let (usage, cost) = data.totals();
    let _ = match cost {
        Some(c) => writeln!(
            out,
            "- **cost:** ${c:.4} ({} input + {} output tokens, {} model calls)",
            usage.input_tokens,
            usage.output_tokens,
            data.turns.len()
        ),
        None => writeln!(
            out,
            "- **cost:** unknown, no provider price in the config ({} input + {} output tokens, {} model calls)",
            usage.input_tokens,
            usage.output_tokens,
            data.turns.len()
        ),
    };
    let (calls, by) = data.call_counts();
    let by: Vec<String> = by.iter().map(|(name, n)| format!("{n} {name}")).collect();
    let _ = writeln!(
        out,
        "- **tool calls:** {calls}{}",
        if by.is_empty() {
            String::new()
        } else {
            format!(" ({})", by.join(", "))
        }
    );
    let _ = match &data.verified {
        Ok(_) => writeln!(out, "- **verification:** ok"),
        Err(e) => writeln!(out, "- **verification:** FAILED ({})", code(e.kind.name())),
    };
    let mut next = String::new();
    for run in &data.runs {
        let r = &run.view.run;
        for p in &run.view.pending_approvals {
            let _ = writeln!(
                next,
                "- approve {} ({}): `kxen-agent run approve {} {} {} --arguments-hash {}` (or `kxen-agent run deny {} {} {} --reason TEXT`)",
                code(&p.tool),
                code(&p.op_id),
                plain(&r.session_id),
                plain(&r.id),
                plain(&p.op_id),
                plain(&p.arguments_hash),
                plain(&r.session_id),
                plain(&r.id),
                plain(&p.op_id),
            );
        }
        for op in &r.unknown_ops {
            let _ = writeln!(
                next,
                "- UNKNOWN outcome of {}: check what happened, then `kxen-agent run resolve {} {} {} --output TEXT`",
                code(op),
                plain(&r.session_id),
                plain(&r.id),
                plain(op),
            );
        }
    }
    if !next.is_empty() {
        out.push_str(
            "\n**Pending approvals and UNKNOWN operations** (then resume the Session):\n\n",
        );
        out.push_str(&next);
    }
    let _ = writeln!(
        out,
        "\nThe whole Session (timeline, diffs, tokens per call): `kxen-agent session report {}`",
        plain(s["id"].as_str().unwrap_or("SES"))
    );
    out
}

/// `text` as a Markdown code span.
fn code(text: &str) -> String {
    format!("`{}`", plain(text))
}

/// `text` without backticks, line breaks or other control characters (it goes inside a code
/// span; ids and hashes never hold them, hand-edited files might).
fn plain(text: &str) -> String {
    text.chars()
        .map(|c| if c == '`' || c.is_control() { '?' } else { c })
        .collect()
}
