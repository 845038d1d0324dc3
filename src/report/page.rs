//! The HTML page: header, verification, chart, task tree, then each run's timeline.
//!
//! No script at all (folding is `<details>`), inline CSS only, and a Content-Security-Policy
//! of `default-src 'none'` so that even a mistake here could not make the page load anything.

use serde_json::Value;

use super::html::Html;
use super::model::{Call, DIFF_LINES, Data, Entry, Outcome, RunData, TreeNode, Turn};

/// Characters of a tool argument list or output shown inline (the rest is counted).
const SHOWN_CHARS: usize = 2000;
/// Characters of a model message shown.
const MESSAGE_CHARS: usize = 4000;

const HEAD: &str = r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:1em 1.5em;color:#1b1f24;background:#fff}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;border-bottom:1px solid #d0d7de;padding-bottom:.2em;margin-top:1.6em}
code,pre,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
pre{background:#f6f8fa;padding:.5em .7em;overflow-x:auto;white-space:pre-wrap;word-break:break-word;margin:.3em 0}
table.meta td{padding:.1em .8em .1em 0;vertical-align:top}table.meta td:first-child{color:#57606a}
.badge{display:inline-block;padding:0 .45em;border-radius:.6em;font-size:12px;font-weight:600;border:1px solid}
.ok{color:#116329;border-color:#4ac26b;background:#dafbe1}.err{color:#82071e;border-color:#ff8182;background:#ffebe9}
.stop{color:#7d4e00;border-color:#d4a72c;background:#fff8c5}.info{color:#0a3069;border-color:#54aeff;background:#ddf4ff}
.timeline{list-style:none;padding-left:0;border-left:3px solid #d0d7de;margin-left:.4em}
.timeline>li{margin:.35em 0 .35em 0;padding-left:.9em;position:relative}
.timeline>li::before{content:"";position:absolute;left:-.5em;top:.45em;width:.6em;height:.6em;border-radius:50%;background:#8c959f}
.timeline>li.attempt::before{background:#0969da}.timeline>li.compaction::before{background:#8250df}.timeline>li.result::before{background:#1a7f37}
.calls{list-style:none;padding-left:1em;margin:.2em 0}.calls>li{margin:.25em 0}
.muted,.clip{color:#57606a}.clip{font-style:italic}
details>summary{cursor:pointer}
.diff .add{color:#116329;background:#e6ffec}.diff .del{color:#82071e;background:#ffebe9}.diff .hunk{color:#8250df}
.tree,.tree ul{list-style:none;padding-left:1.2em}.tree li{margin:.2em 0}
.chart{overflow-x:auto;border:1px solid #d0d7de;padding:.3em}
.legend span{margin-right:1em}.sw{display:inline-block;width:.8em;height:.8em;vertical-align:middle;margin-right:.3em}
</style>
"#;

pub fn render(data: &Data) -> String {
    let mut h = Html::with_capacity(64 * 1024 + data.turns.len() * 1024);
    let s = &data.session;
    let id = str_of(s, "id");
    h.raw(HEAD)
        .raw("<title>kxen-agent session ")
        .text(id)
        .raw("</title></head><body>\n");
    h.raw("<h1>Session <code>").text(id).raw("</code></h1>\n");
    header(&mut h, data);
    verification(&mut h, data);
    chart(&mut h, data);
    tree(&mut h, data);
    h.raw("<h2>Runs</h2>\n");
    if data.runs.is_empty() {
        h.raw("<p class=\"muted\">No run yet.</p>\n");
    }
    for run in &data.runs {
        timeline(&mut h, data, run);
    }
    h.raw("<p class=\"muted\">Written by <code>kxen-agent session report</code> ")
        .text(env!("CARGO_PKG_VERSION"))
        .raw(". Everything above came from the Session's records; text from models and tools is shown as text.</p>\n</body></html>\n");
    h.finish()
}

fn str_of<'v>(v: &'v Value, key: &str) -> &'v str {
    v[key].as_str().unwrap_or("-")
}

fn header(h: &mut Html, data: &Data) {
    let s = &data.session;
    let ws = &s["workspace"];
    let lock = &s["lock"];
    let (usage, cost) = data.totals();
    let (calls, by) = data.call_counts();
    h.raw("<table class=\"meta\">\n");
    row(h, "created", str_of(s, "createdAt"));
    row(
        h,
        "agent",
        lock["definition"]["metadata"]["name"]
            .as_str()
            .unwrap_or("-"),
    );
    row(h, "definition hash", str_of(lock, "definitionHash"));
    h.raw("<tr><td>workspace</td><td><code>")
        .text(str_of(ws, "root"))
        .raw("</code> (branch <code>")
        .text(ws["branch"].as_str().unwrap_or("(detached)"))
        .raw("</code>, head <code>")
        .text(str_of(ws, "head"))
        .raw("</code>)</td></tr>\n");
    if let Some(parent) = s["parentId"].as_str() {
        h.raw("<tr><td>parent</td><td><code>")
            .text(parent)
            .raw("</code> (")
            .text(str_of(s, "forkKind"))
            .raw(" fork)</td></tr>\n");
    }
    h.raw("<tr><td>runs</td><td>")
        .num(data.runs.len())
        .raw("</td></tr>\n");
    h.raw("<tr><td>model calls</td><td>")
        .num(data.turns.len())
        .raw("</td></tr>\n<tr><td>tokens</td><td>")
        .num(usage.input_tokens)
        .raw(" input (")
        .num(usage.cache_read_tokens)
        .raw(" cached), ")
        .num(usage.output_tokens)
        .raw(" output</td></tr>\n<tr><td>cost</td><td>");
    match cost {
        Some(c) => h.raw("$").num(format!("{c:.4}")).raw(" (at the --config rates)"),
        None => h.raw("<span class=\"muted\">unknown (pass <code>--config</code> with a provider price)</span>"),
    };
    h.raw("</td></tr>\n<tr><td>tool calls</td><td>").num(calls);
    for (name, n) in by {
        h.raw(" · ").text(name).raw(" ").num(n);
    }
    h.raw("</td></tr>\n</table>\n");
}

fn row(h: &mut Html, label: &'static str, value: &str) {
    h.raw("<tr><td>")
        .raw(label)
        .raw("</td><td><code>")
        .text(value)
        .raw("</code></td></tr>\n");
}

fn verification(h: &mut Html, data: &Data) {
    h.raw("<h2 id=\"verification\">Verification</h2>\n<p>");
    match &data.verified {
        Ok(v) => {
            h.raw("<span class=\"badge ok\">verified</span> ")
                .num(v.messages)
                .raw(" messages, ")
                .num(v.runs.len())
                .raw(" runs, ")
                .num(v.operations)
                .raw(" operations, ")
                .num(v.blobs.len())
                .raw(" blobs: every hash chain, cross-reference, the lock and every blob hold (<code>session verify</code>).");
            for torn in &v.torn_tails {
                h.raw("<br><span class=\"muted\">torn last line (a crash's leftover, ignored): ")
                    .text(torn)
                    .raw("</span>");
            }
        }
        Err(e) => {
            h.raw("<span class=\"badge err\">verification failed</span> ")
                .text(&e.message);
            for hint in &e.hints {
                h.raw("<br><span class=\"muted\">hint: ")
                    .text(hint)
                    .raw("</span>");
            }
        }
    }
    h.raw("</p>\n");
}

/// Tokens per model call as stacked bars (input, output), with the cumulative cost as a line
/// when prices are known. Each bar has a `<title>` (the browser's tooltip).
fn chart(h: &mut Html, data: &Data) {
    h.raw("<h2 id=\"tokens\">Tokens and cost per model call</h2>\n");
    if data.turns.is_empty() {
        h.raw("<p class=\"muted\">No model call yet.</p>\n");
        return;
    }
    const HEIGHT: f64 = 160.0;
    const BAR: f64 = 8.0;
    let n = data.turns.len();
    let width = (n as f64 * BAR).max(400.0);
    let total = |t: &Turn| t.usage.map_or(0, |u| u.input_tokens + u.output_tokens);
    let max = data.turns.iter().map(total).max().unwrap_or(0).max(1) as f64;
    let (_, total_cost) = data.totals();
    h.raw("<p class=\"legend\"><span><i class=\"sw\" style=\"background:#54aeff\"></i>input tokens</span><span><i class=\"sw\" style=\"background:#fb8f44\"></i>output tokens</span>");
    if data.priced {
        h.raw("<span><i class=\"sw\" style=\"background:#1a7f37\"></i>cumulative cost (top = $")
            .num(format!("{:.4}", total_cost.unwrap_or(0.0)))
            .raw(")</span>");
    }
    h.raw("<span class=\"muted\">highest bar: ")
        .num(max as u64)
        .raw(" tokens</span></p>\n<div class=\"chart\"><svg role=\"img\" aria-label=\"tokens per model call\" width=\"")
        .num(width)
        .raw("\" height=\"")
        .num(HEIGHT + 4.0)
        .raw("\" viewBox=\"0 0 ")
        .num(width)
        .raw(" ")
        .num(HEIGHT + 4.0)
        .raw("\">\n");
    let mut cumulative = 0.0;
    let mut points = String::new();
    for (i, t) in data.turns.iter().enumerate() {
        let x = i as f64 * BAR;
        let (input, output) = t
            .usage
            .map_or((0, 0), |u| (u.input_tokens, u.output_tokens));
        let hi = input as f64 / max * HEIGHT;
        let ho = output as f64 / max * HEIGHT;
        h.raw("<g><title>call ")
            .num(i + 1)
            .raw(" (")
            .text(t.run_id)
            .raw(if t.message.compacts.is_some() {
                ", compaction"
            } else {
                ""
            })
            .raw("): ")
            .num(input)
            .raw(" input, ")
            .num(output)
            .raw(" output tokens");
        if let Some(c) = t.cost {
            h.raw(", $").num(format!("{c:.5}"));
        }
        if t.usage.is_none() {
            h.raw(" (not reported)");
        }
        h.raw("</title><rect x=\"")
            .num(format!("{x:.1}"))
            .raw("\" y=\"")
            .num(format!("{:.1}", HEIGHT + 2.0 - hi))
            .raw("\" width=\"")
            .num(BAR - 2.0)
            .raw("\" height=\"")
            .num(format!("{hi:.1}"))
            .raw(if t.message.compacts.is_some() {
                "\" fill=\"#8250df\"/>"
            } else {
                "\" fill=\"#54aeff\"/>"
            })
            .raw("<rect x=\"")
            .num(format!("{x:.1}"))
            .raw("\" y=\"")
            .num(format!("{:.1}", HEIGHT + 2.0 - hi - ho))
            .raw("\" width=\"")
            .num(BAR - 2.0)
            .raw("\" height=\"")
            .num(format!("{ho:.1}"))
            .raw("\" fill=\"#fb8f44\"/></g>\n");
        if let Some(c) = t.cost {
            cumulative += c;
        }
        if let Some(total) = total_cost.filter(|t| *t > 0.0) {
            let y = HEIGHT + 2.0 - cumulative / total * HEIGHT;
            points.push_str(&format!("{:.1},{y:.1} ", x + BAR / 2.0 - 1.0));
        }
    }
    if data.priced && !points.is_empty() {
        h.raw("<polyline fill=\"none\" stroke=\"#1a7f37\" stroke-width=\"1.5\" points=\"")
            .num(points.trim_end())
            .raw("\"/>\n");
    }
    h.raw("</svg></div>\n");
}

fn tree(h: &mut Html, data: &Data) {
    h.raw("<h2 id=\"tasks\">Task children</h2>\n");
    if data.tree.is_empty() {
        h.raw("<p class=\"muted\">No <code>task</code> child Session.</p>\n");
        return;
    }
    h.raw("<ul class=\"tree\">\n");
    fn node(h: &mut Html, n: &TreeNode) {
        h.raw("<li class=\"child\"><code>")
            .text(&n.session_id)
            .raw("</code> ");
        status_badge(h, &n.status);
        h.raw(" <q>")
            .text_clipped(&n.description, 200)
            .raw("</q> <span class=\"muted\">from <code>")
            .text(&n.parent_run)
            .raw("</code> <code>")
            .text(&n.parent_op)
            .raw("</code></span>");
        if !n.children.is_empty() {
            h.raw("\n<ul>\n");
            for c in &n.children {
                node(h, c);
            }
            h.raw("</ul>");
        }
        h.raw("</li>\n");
    }
    for n in &data.tree {
        node(h, n);
    }
    h.raw("</ul>\n<p class=\"muted\">Each child has its own report: <code>kxen-agent session report SES</code>.</p>\n");
}

fn status_badge(h: &mut Html, status: &str) {
    let class = match status {
        "completed" => "ok",
        "failed" | "canceled" => "err",
        "inputRequired" | "running" | "queued" => "stop",
        _ => "info",
    };
    h.raw("<span class=\"badge ")
        .raw(class)
        .raw("\">")
        .text(status)
        .raw("</span>");
}

fn timeline(h: &mut Html, data: &Data, run: &RunData) {
    let r = &run.view.run;
    h.raw("<section class=\"run\" id=\"")
        .attr(&r.id)
        .raw("\">\n<h3>Run <code>")
        .text(&r.id)
        .raw("</code> ");
    status_badge(h, r.status.name());
    if !r.settled {
        h.raw(" <span class=\"muted\">(not settled)</span>");
    }
    h.raw("</h3>\n<p class=\"muted\">created ")
        .text(&r.created_at)
        .raw(", updated ")
        .text(&r.updated_at)
        .raw("</p>\n<ol class=\"timeline\">\n");
    for entry in &run.entries {
        match entry {
            Entry::Attempt(n, a) => {
                h.raw("<li class=\"attempt\"><span class=\"badge info\">")
                    .raw(if *n == 1 { "start" } else { "resume" })
                    .raw("</span> attempt ")
                    .num(n)
                    .raw(" at ")
                    .text(&a.started_at)
                    .raw(" (pid ")
                    .num(a.pid)
                    .raw(")");
                if let Some(p) = &a.provider {
                    h.raw(" · provider <code>")
                        .text(str_of(p, "name"))
                        .raw("</code> ")
                        .text(p["model"].as_str().unwrap_or(""));
                }
                if a.crashed {
                    h.raw(" · <span class=\"badge err\">crashed</span>");
                }
                if let Some(ms) = a.wall_clock_ms {
                    h.raw(" · ").num(format_ms(ms as i64));
                }
                h.raw("</li>\n");
            }
            Entry::Task(m) => {
                h.raw("<li class=\"task\"><b>task</b> <span class=\"muted\">")
                    .text(&m.created_at)
                    .raw("</span><pre>")
                    .text_clipped(&m.content, MESSAGE_CHARS)
                    .raw("</pre></li>\n");
            }
            Entry::Compaction(i) => {
                let t = &data.turns[*i];
                h.raw("<li class=\"compaction\"><span class=\"badge info\">compaction</span> ");
                if let Some(c) = &t.message.compacts {
                    h.num(c.messages)
                        .raw(" messages (<code>")
                        .text(&c.from)
                        .raw("</code> to <code>")
                        .text(&c.to)
                        .raw("</code>) summarized");
                }
                usage(h, t);
                h.raw("<details><summary>summary</summary><pre>")
                    .text_clipped(&t.message.content, MESSAGE_CHARS)
                    .raw("</pre></details></li>\n");
            }
            Entry::Turn(i, calls) => turn(h, data, run, *i, calls),
        }
    }
    if let Some(result) = &r.result {
        h.raw("<li class=\"result\"><b>result</b> ");
        status_badge(h, result.status.name());
        h.raw(" after ").num(result.turns).raw(" turns");
        if let Some(unverified) = &result.unverified {
            // File names come from the model's calls: escaped like everything else.
            h.raw(" <span class=\"badge stop\">")
                .text(&unverified.describe())
                .raw("</span>");
        }
        if let Some(e) = &result.error {
            h.raw("<pre class=\"err\">")
                .text(&e.kind)
                .raw(": ")
                .text(&e.message)
                .raw("</pre>");
        }
        if !result.final_text.is_empty() {
            h.raw("<pre>")
                .text_clipped(&result.final_text, MESSAGE_CHARS)
                .raw("</pre>");
        }
        h.raw("</li>\n");
    }
    stops(h, run);
    h.raw("</ol>\n</section>\n");
}

/// Where a run waits for a person: pending approvals and UNKNOWN operations, with the commands.
fn stops(h: &mut Html, run: &RunData) {
    let r = &run.view.run;
    for p in &run.view.pending_approvals {
        h.raw("<li class=\"stop\"><span class=\"badge stop\">approval needed</span> <code>")
            .text(&p.op_id)
            .raw("</code> <code>")
            .text(&p.tool)
            .raw("</code> (rule <code>")
            .text(&p.rule)
            .raw("</code>)<pre>kxen-agent run approve ")
            .text(&r.session_id)
            .raw(" ")
            .text(&r.id)
            .raw(" ")
            .text(&p.op_id)
            .raw(" --arguments-hash ")
            .text(&p.arguments_hash)
            .raw("\nkxen-agent run deny ")
            .text(&r.session_id)
            .raw(" ")
            .text(&r.id)
            .raw(" ")
            .text(&p.op_id)
            .raw(" --reason TEXT</pre></li>\n");
    }
    for op in &r.unknown_ops {
        h.raw("<li class=\"stop\"><span class=\"badge stop\">UNKNOWN</span> <code>")
            .text(op)
            .raw("</code>: record what happened, then resume<pre>kxen-agent run resolve ")
            .text(&r.session_id)
            .raw(" ")
            .text(&r.id)
            .raw(" ")
            .text(op)
            .raw(" --output TEXT</pre></li>\n");
    }
}

fn usage(h: &mut Html, t: &Turn) {
    match t.usage {
        Some(u) => {
            h.raw(" <span class=\"muted\">")
                .num(u.input_tokens)
                .raw(" in / ")
                .num(u.output_tokens)
                .raw(" out tokens");
            if let Some(c) = t.cost {
                h.raw(", $").num(format!("{c:.5}"));
            }
            h.raw("</span>");
        }
        None => {
            h.raw(" <span class=\"muted\">tokens not reported</span>");
        }
    }
}

fn turn(h: &mut Html, data: &Data, run: &RunData, i: usize, calls: &[Call]) {
    let t = &data.turns[i];
    let m = t.message;
    h.raw("<li class=\"turn\" id=\"")
        .attr(&m.id)
        .raw("\"><b>model call ")
        .num(i + 1)
        .raw("</b> <span class=\"muted\">")
        .text(&m.created_at)
        .raw("</span>");
    usage(h, t);
    if !m.content.is_empty() {
        h.raw("<pre>")
            .text_clipped(&m.content, MESSAGE_CHARS)
            .raw("</pre>");
    }
    if !calls.is_empty() {
        h.raw("<ul class=\"calls\">\n");
        for c in calls {
            call(h, run, c);
        }
        h.raw("</ul>");
    }
    h.raw("</li>\n");
}

fn call(h: &mut Html, run: &RunData, c: &Call) {
    h.raw("<li class=\"call\"><span class=\"badge ")
        .raw(c.outcome.class())
        .raw("\">")
        .raw(c.outcome.name())
        .raw("</span> <code class=\"tool\">")
        .text(&c.call.name)
        .raw("</code>");
    if let Some(op) = c.op {
        h.raw(" <code class=\"muted\">")
            .text(&op.op_id)
            .raw("</code>");
    }
    if let Some(ms) = c.duration_ms {
        h.raw(" <span class=\"muted\">")
            .num(format_ms(ms))
            .raw("</span>");
    }
    if let Some(child) = c.child {
        h.raw(" → child <code>")
            .text(&child.session_id)
            .raw("</code> <code>")
            .text(&child.run_id)
            .raw("</code> ");
        status_badge(h, &child.status);
    }
    if let Some(reason) = c.op.and_then(|o| o.unknown_reason.as_deref()) {
        h.raw("<div class=\"stop\">unknown: ")
            .text_clipped(reason, SHOWN_CHARS)
            .raw("</div>");
    }
    if let Some(a) = c.op.and_then(|o| o.approval.as_ref()) {
        h.raw(" <span class=\"muted\">(rule <code>")
            .text(&a.rule)
            .raw("</code>: ")
            .raw(match a.decision {
                Some(crate::journal::OpPhase::Approved) => "approved",
                Some(crate::journal::OpPhase::Denied) => "denied",
                _ => "waits for approval",
            })
            .raw(")</span>");
    }
    h.raw("<details><summary>arguments</summary><pre>")
        .text_clipped(&c.call.arguments.to_string(), SHOWN_CHARS)
        .raw("</pre></details>");
    if let Some(d) = &c.diff {
        diff(h, d);
    }
    let output =
        c.op.and_then(|o| o.output.as_ref())
            .map(|o| o.text.as_str())
            .or(c.answer.map(|a| a.content.as_str()));
    if let Some(text) = output {
        h.raw("<details class=\"output\"><summary>")
            .raw(if c.outcome == Outcome::Ok {
                "output"
            } else {
                "output (what the model saw)"
            })
            .raw("</summary><pre>")
            .text_clipped(text, SHOWN_CHARS)
            .raw("</pre></details>");
    }
    let _ = run;
    h.raw("</li>\n");
}

fn diff(h: &mut Html, d: &super::model::Diff) {
    h.raw("<details class=\"diff\" open><summary>diff <code>")
        .text(&d.path)
        .raw("</code>");
    if d.base_unknown {
        h.raw(" <span class=\"muted\">(against an empty file: the earlier content is not in the Session)</span>");
    }
    h.raw("</summary><pre class=\"diff\">");
    let total = d.text.lines().count();
    for line in d.text.lines().take(DIFF_LINES) {
        let class: &'static str = if line.starts_with("+++") || line.starts_with("---") {
            "file"
        } else if line.starts_with('+') {
            "add"
        } else if line.starts_with('-') {
            "del"
        } else if line.starts_with("@@") {
            "hunk"
        } else {
            "ctx"
        };
        h.raw("<span class=\"")
            .raw(class)
            .raw("\">")
            .text(line)
            .raw("</span>\n");
    }
    if total > DIFF_LINES {
        h.raw("<span class=\"clip\">… ")
            .num(total - DIFF_LINES)
            .raw(" more lines</span>");
    }
    h.raw("</pre></details>");
}

fn format_ms(ms: i64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}
