//! Durable compaction (issue #20 item 5): a long scripted run with a small `context_window`
//! compacts several times and keeps every message on disk; crashes at the compaction's durable
//! steps (and a SIGKILL while the summary call is in flight) neither lose messages nor compact
//! twice; the requests stay prefix-stable between compactions and byte-identical after a kill
//! and resume; `session verify`, export/import and forks before and after a compaction point
//! understand the records.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::fake_model::{Reply, completion, serve, tool_call_message};
use crate::run_support::*;

/// Turns of the long scripted run (one `read` each), before its final answer.
const TURNS: usize = 200;

fn file_text(n: usize) -> String {
    format!("file {n}: {}\n", "lorem ipsum dolor sit amet ".repeat(12))
}

/// A repository of `n` files `f000.txt`…, each a few hundred bytes.
fn repo(env: &TestEnv, n: usize) -> PathBuf {
    let files: Vec<(String, String)> = (0..n)
        .map(|i| (format!("f{i:03}.txt"), file_text(i)))
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(p, c)| (p.as_str(), c.as_str()))
        .collect();
    env.git_repo("repo", &refs)
}

/// A reader with room for the long run.
fn reader(env: &TestEnv) -> PathBuf {
    let path = env.path().join("reader.yaml");
    std::fs::write(
        &path,
        "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata:\n  name: reader\nspec:\n  \
         objective: Read every file.\n  instructions:\n    - Read them one by one.\n  \
         successCriteria: []\n  capabilities:\n    required: [read]\n    optional: []\n  \
         execution:\n    maxTurns: 256\n  output: {format: text, requiredFields: []}\n",
    )
    .unwrap();
    path
}

/// The long run's script: `TURNS` reads, the answer, then summaries for compaction calls; a
/// config with `context` lines added to the provider's table.
fn script(env: &TestEnv, context: &str) -> PathBuf {
    let mut lines = Vec::new();
    for n in 0..TURNS {
        lines.push(json!({"text": format!("Reading f{n:03}."), "toolCalls": [
            {"id": format!("call_{n}"), "name": "read", "arguments": {"path": format!("f{n:03}.txt")}}]}));
    }
    lines.push(json!({"text": "Read all 200 files."}));
    for k in 0..100 {
        lines.push(json!({"compaction": true, "text": format!("Summary {k}: the files shown so far were read, each says lorem ipsum."),
                          "usage": {"inputTokens": 900, "outputTokens": 20}}));
    }
    script_with_context(env.path(), &lines, context)
}

/// `root/model/turns.jsonl` holding `lines` and a script config reading it, with `context`
/// lines added to the provider's table (a window, say). Returns the config.
fn script_with_context(root: &Path, lines: &[Value], context: &str) -> PathBuf {
    let dir = root.join("model");
    std::fs::create_dir_all(&dir).unwrap();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("turns.jsonl"), text).unwrap();
    let config = dir.join(format!("config{}.toml", context.len()));
    std::fs::write(
        &config,
        format!(
            "[providers.script]\nkind = \"script\"\npath = \"turns.jsonl\"\n{context}\n\n[roles]\nexecution = \"script\"\n"
        ),
    )
    .unwrap();
    config
}

const SMALL_WINDOW: &str = "context_window = 4000\ncompact_at = 0.8";

fn only_session(env: &TestEnv) -> String {
    let list = env.run("kxen-agent", &["session", "list"]).jsonl();
    assert_eq!(list.len(), 1, "{list:?}");
    list[0]["id"].as_str().unwrap().to_string()
}

fn messages_in(state: &Path, session: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(state.join("sessions").join(session).join("messages.jsonl"))
        .unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn count(messages: &[Value], role: &str) -> usize {
    messages.iter().filter(|m| m["role"] == role).count()
}

/// What a run decided, without ids and times: role, content and tool calls of each message.
fn decisions(messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .map(|m| {
            json!([
                m["role"],
                m["content"],
                m["toolCalls"],
                m["compacts"]["messages"]
            ])
        })
        .collect()
}

#[test]
fn a_200_turn_run_compacts_several_times_keeps_every_message_and_verifies() {
    let env = TestEnv::new();
    let repo = repo(&env, TURNS);
    let agent = reader(&env);
    let config = script(&env, SMALL_WINDOW);
    let run = run_new(&env, &repo, "Read every file", &agent, &config, &[]);
    run.expect(0);
    let events = run.jsonl();
    let done = finished(&events);
    assert_eq!(done["turns"], TURNS as u64 + 1, "compactions are no turns");
    let compacted: Vec<&Value> = events.iter().filter(|e| e["type"] == "compacted").collect();
    assert!(compacted.len() >= 3, "{} compactions", compacted.len());
    for e in &compacted {
        assert!(
            e["estimatedTokens"].as_u64() >= e["threshold"].as_u64(),
            "{e}"
        );
        assert_eq!(e["threshold"], 3200);
    }
    // Every summary call's usage counts in the run's usage.
    assert_eq!(
        done["usage"]["inputTokens"],
        900 * compacted.len() as u64,
        "{done}"
    );

    let session = only_session(&env);
    let messages = messages_in(&env.state_dir(), &session);
    // Nothing was deleted: the task, every turn and result, the answer, and the records.
    assert_eq!(count(&messages, "user"), 1);
    assert_eq!(count(&messages, "assistant"), TURNS + 1);
    assert_eq!(count(&messages, "tool"), TURNS);
    assert_eq!(count(&messages, "compaction"), compacted.len());
    let records: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "compaction")
        .collect();
    let first_from = &records[0]["compacts"]["from"];
    for (k, r) in records.iter().enumerate() {
        assert_eq!(
            r["content"],
            format!("Summary {k}: the files shown so far were read, each says lorem ipsum.")
        );
        // Cumulative: every range starts right after the task.
        assert_eq!(&r["compacts"]["from"], first_from);
        assert_eq!(r["compacts"]["from"], messages[1]["id"]);
        assert_eq!(r["id"], compacted[k]["messageId"]);
    }
    let verify = env.run("kxen-agent", &["session", "verify", &session]);
    assert_eq!(verify.code, 0, "{}", verify.stderr);

    // The same run without a context window: the same turns, no record.
    let plain_env = TestEnv::new();
    let plain_repo = repo_in(&plain_env);
    let plain_config = script(&plain_env, "");
    let plain = run_new(
        &plain_env,
        &plain_repo,
        "Read every file",
        &reader(&plain_env),
        &plain_config,
        &[],
    );
    plain.expect(0);
    let plain_messages = messages_in(&plain_env.state_dir(), &only_session(&plain_env));
    let without: Vec<Value> = messages
        .iter()
        .filter(|m| m["role"] != "compaction")
        .cloned()
        .collect();
    assert_eq!(decisions(&without), decisions(&plain_messages));

    // `session show` names the records in both views; `session diff` shows them.
    let shown = env
        .run("kxen-agent", &["session", "show", &session])
        .jsonl();
    let shown_records = shown[0]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "compaction")
        .count();
    assert_eq!(shown_records, records.len());
    let text = env.run(
        "kxen-agent",
        &["--format", "text", "session", "show", &session],
    );
    text.expect(0);
    assert!(
        text.stdout.contains("[compaction] ") && text.stdout.contains("summarized: Summary 0:"),
        "{}",
        text.stdout
    );

    // Export and import into another state dir: the records travel and verify there.
    let bundle = env.path().join("ses.bundle.json");
    env.run(
        "kxen-agent",
        &[
            "session",
            "export",
            &session,
            "--output",
            bundle.to_str().unwrap(),
        ],
    )
    .expect(0);
    let other = env.path().join("state-b");
    let imported = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            other.to_str().unwrap(),
            "session",
            "import",
            bundle.to_str().unwrap(),
            "--workspace",
            repo.to_str().unwrap(),
        ],
    );
    imported.expect(0);
    assert_eq!(messages_in(&other, &session), messages);
    let verify = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            other.to_str().unwrap(),
            "session",
            "verify",
            &session,
        ],
    );
    assert_eq!(verify.code, 0, "{}", verify.stderr);

    // Forks: at the last message before the first record (its range's end) the fork has the
    // full history and no record; at the last message it has every record.
    let before_at = records[0]["compacts"]["to"].as_str().unwrap();
    let fork = |at: &str| {
        let out = env.run("kxen-agent", &["session", "fork", &session, "--at", at]);
        out.expect(0);
        out.jsonl()[0]["sessionId"].as_str().unwrap().to_string()
    };
    let before = fork(before_at);
    let before_messages = messages_in(&env.state_dir(), &before);
    assert_eq!(count(&before_messages, "compaction"), 0);
    let pos = messages.iter().position(|m| m["id"] == before_at).unwrap();
    assert_eq!(before_messages, messages[..=pos]);
    let last = messages.last().unwrap()["id"].as_str().unwrap();
    let after = fork(last);
    let after_messages = messages_in(&env.state_dir(), &after);
    assert_eq!(count(&after_messages, "compaction"), records.len());
    for id in [&before, &after] {
        let verify = env.run("kxen-agent", &["session", "verify", id]);
        assert_eq!(verify.code, 0, "{id}: {}", verify.stderr);
    }
    let diff = env.run(
        "kxen-agent",
        &["--format", "text", "session", "diff", &before, &after],
    );
    assert!(
        diff.stdout.contains("compaction") && diff.stdout.contains("replaces "),
        "{}",
        diff.stdout
    );
}

fn repo_in(env: &TestEnv) -> PathBuf {
    repo(env, TURNS)
}

/// A crash right after the summary came back (nothing written) and right after the record is
/// durable, at the second compaction: the resumed run ends with exactly the messages of the
/// uninterrupted run — no compaction lost, none done twice. As a power cut too.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_at_each_compaction_step_loses_nothing_and_compacts_once() {
    let reference = {
        let env = TestEnv::new();
        let repo = repo(&env, TURNS);
        let config = script(&env, SMALL_WINDOW);
        run_new(&env, &repo, "Read every file", &reader(&env), &config, &[]).expect(0);
        messages_in(&env.state_dir(), &only_session(&env))
    };
    for point in ["compaction.after-summary", "compaction.after-record"] {
        for power_cut in [false, true] {
            let what = format!("{point} (power cut: {power_cut})");
            let env = TestEnv::new();
            let repo = repo(&env, TURNS);
            let agent = reader(&env);
            let config = script(&env, SMALL_WINDOW);
            let mut cmd = env.cmd("kxen-agent");
            cmd.args(["run", "--workspace", repo.to_str().unwrap()])
                .args([
                    "--task",
                    "Read every file",
                    "--agent",
                    agent.to_str().unwrap(),
                ])
                .args(["--config", config.to_str().unwrap()])
                .env("KXEN_FAILPOINT", point)
                .env("KXEN_FAILPOINT_SKIP", "1");
            if power_cut {
                cmd.env("KXEN_FAILPOINT_POWERCUT", "1");
            }
            let out = cmd.output().unwrap();
            assert_eq!(
                out.status.code(),
                None,
                "{what}: the failpoint was not reached"
            );
            let session = only_session(&env);
            let crashed = messages_in(&env.state_dir(), &session);
            let records = count(&crashed, "compaction");
            assert_eq!(
                records,
                if point == "compaction.after-record" {
                    2
                } else {
                    1
                },
                "{what}: no record, or a complete one"
            );
            let verify = env.run("kxen-agent", &["session", "verify", &session]);
            assert_eq!(verify.code, 0, "{what}: {}", verify.stderr);
            let resumed = env.run(
                "kxen-agent",
                &["--resume", &session, "--config", config.to_str().unwrap()],
            );
            resumed.expect(0);
            assert_eq!(finished(&resumed.jsonl())["turns"], TURNS as u64 + 1);
            let after = messages_in(&env.state_dir(), &session);
            assert_eq!(decisions(&after), decisions(&reference), "{what}");
            let verify = env.run("kxen-agent", &["session", "verify", &session]);
            assert_eq!(verify.code, 0, "{what}: {}", verify.stderr);
        }
    }
}

// ---- Over HTTP: request bytes, SIGKILL during the summary call ----

/// Turns of the HTTP run.
const HTTP_TURNS: usize = 40;
/// Its window: the fake server reports a quarter of the body's bytes as prompt tokens.
const HTTP_WINDOW: u64 = 3000;

#[derive(Clone, Copy, Debug)]
enum Kind {
    OpenAi,
    Anthropic,
}

/// Every text of a request body's messages (message content, text blocks, tool results), in
/// order, with each one's role (`tool` for a result); the system prompt is not among them.
fn texts(body: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or_default().to_string();
        if role == "system" {
            continue; // see [`system`]
        }
        match &m["content"] {
            Value::String(text) => out.push((role, text.clone())),
            Value::Array(blocks) => {
                for b in blocks {
                    match b["type"].as_str() {
                        Some("text") => {
                            out.push((role.clone(), b["text"].as_str().unwrap().into()))
                        }
                        Some("tool_result") => {
                            out.push(("tool".into(), b["content"].as_str().unwrap().into()))
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// The system prompt of a request body.
fn system(body: &Value) -> String {
    match &body["system"] {
        Value::Array(blocks) => blocks[0]["text"].as_str().unwrap().to_string(),
        _ => body["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    }
}

fn is_summary_body(body: &[u8]) -> bool {
    system(&serde_json::from_slice(body).unwrap()).starts_with("You compact")
}

/// What the fake model answers to `request`: a text (a summary, a final answer) or else a
/// `read` of file `next`.
fn decide(request: &crate::fake_model::Request) -> (Option<String>, usize) {
    let texts = texts(&request.json());
    let text = if is_summary_body(&request.body) {
        let transcript = &texts.last().unwrap().1;
        let results = transcript.matches("[tool result").count();
        Some(format!(
            "Read the files up to the {results} results shown; all say lorem ipsum."
        ))
    } else if texts
        .last()
        .is_some_and(|(role, t)| role == "user" && t == "Go on")
    {
        Some("Nothing more to read.".to_string())
    } else {
        None
    };
    let next = texts
        .iter()
        .rev()
        .find(|(role, _)| role == "tool")
        .and_then(|(_, c)| c.split("file ").nth(1))
        .and_then(|c| c.split(':').next())
        .and_then(|n| n.parse::<usize>().ok())
        .map_or(0, |n| n + 1);
    let text = text.or_else(|| (next >= HTTP_TURNS).then(|| "Read them all.".to_string()));
    (text, next)
}

/// The fake model: reads `f{n+1}` after the result of `f{n}` (so the answer depends on the
/// request alone, as after a resume), answers a compaction call with a summary naming how many
/// results it saw, and a new task (`Go on`) with a final answer; reports prompt tokens as a
/// quarter of the body's bytes.
fn http_reply(kind: Kind, request: &crate::fake_model::Request) -> Reply {
    let tokens = request.body.len() as u64 / 4;
    let (text, next) = decide(request);
    let path = format!("f{next:03}.txt");
    match kind {
        Kind::OpenAi => {
            let mut c = match text {
                Some(text) => completion(json!({"role": "assistant", "content": text})),
                None => completion(tool_call_message(
                    &format!("call_{next}"),
                    "read",
                    &json!({"path": path}),
                )),
            };
            c["usage"] = json!({"prompt_tokens": tokens, "completion_tokens": 10});
            Reply::json(&c)
        }
        Kind::Anthropic => {
            let content = match text {
                Some(text) => json!([{"type": "text", "text": text}]),
                None => json!([{"type": "tool_use", "id": format!("toolu_{next}"), "name": "read",
                                "input": {"path": path}}]),
            };
            Reply::json(&json!({"content": content,
                                "usage": {"input_tokens": tokens, "output_tokens": 10}}))
        }
    }
}

fn http_config(env: &TestEnv, kind: Kind, url: &str, window: bool) -> PathBuf {
    let context = if window {
        format!("context_window = {HTTP_WINDOW}\n")
    } else {
        String::new()
    };
    let table = match kind {
        Kind::OpenAi => {
            format!("kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\nseed = 1\n")
        }
        Kind::Anthropic => {
            format!("kind = \"anthropic\"\nbase_url = \"{url}\"\nmodel = \"claude-test\"\n")
        }
    };
    let dir = env.path().join("model");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("http{}.toml", u8::from(window)));
    std::fs::write(
        &path,
        format!("[providers.m]\n{table}{context}\n[roles]\nexecution = \"m\"\n"),
    )
    .unwrap();
    path
}

fn bodies(seen: &crate::fake_model::Seen) -> Vec<Vec<u8>> {
    seen.lock()
        .unwrap()
        .iter()
        .map(|r| r.body.clone())
        .collect()
}

/// `body` without its cache breakpoints (Anthropic's move to the last message each turn).
fn without_breakpoints(body: &[u8]) -> String {
    String::from_utf8(body.to_vec())
        .unwrap()
        .replace(",\"cache_control\":{\"type\":\"ephemeral\"}", "")
}

const SUMMARY_HEADER: &str = "[Summary of the earlier conversation";

#[test]
fn openai_requests_stay_stable_between_compactions_and_identical_after_a_sigkill_in_the_summary_call()
 {
    check_http(Kind::OpenAi);
}

#[test]
fn anthropic_requests_stay_stable_between_compactions_and_identical_after_a_sigkill_in_the_summary_call()
 {
    check_http(Kind::Anthropic);
}

fn check_http(kind: Kind) {
    // Uninterrupted.
    let env = TestEnv::new();
    let workspace = repo(&env, HTTP_TURNS);
    let agent = reader(&env);
    let (url, seen) = serve(move |_, r| http_reply(kind, r));
    let config = http_config(&env, kind, &url, true);
    let run = run_new(&env, &workspace, "Read every file", &agent, &config, &[]);
    run.expect(0);
    let events = run.jsonl();
    let original = only_session(&env);
    assert_eq!(finished(&events)["turns"], HTTP_TURNS as u64 + 1);
    let compactions = events.iter().filter(|e| e["type"] == "compacted").count();
    assert!(compactions >= 2, "{compactions} compactions");
    let a = bodies(&seen);
    assert_eq!(a.iter().filter(|b| is_summary_body(b)).count(), compactions);
    // Every request fits the window (as the server counts tokens).
    for b in &a {
        assert!(
            b.len() as u64 / 4 <= HTTP_WINDOW,
            "a request of {} bytes",
            b.len()
        );
    }
    // Between compactions each request is the one before plus new messages; the first after a
    // compaction keeps everything before the messages, then the task, then the summary.
    let turns: Vec<&Vec<u8>> = a.iter().filter(|b| !is_summary_body(b)).collect();
    let mut restarts = 0;
    for pair in turns.windows(2) {
        let (before, after) = (without_breakpoints(pair[0]), without_breakpoints(pair[1]));
        let open = before.strip_suffix("]}").unwrap();
        if !after.starts_with(open) {
            restarts += 1;
            let head = &before[..before.find("\"messages\":[").unwrap()];
            assert!(after.starts_with(head), "{after}");
            let texts = texts(&serde_json::from_str(&after).unwrap());
            assert_eq!(texts[0].1, "Read every file");
            assert!(texts[1].1.starts_with(SUMMARY_HEADER), "{after}");
        }
    }
    assert_eq!(
        restarts, compactions,
        "only a compaction changes the prefix"
    );

    // Killed (SIGKILL) while the second summary call is in flight, then resumed.
    let env_b = TestEnv::new();
    let repo_b = repo(&env_b, HTTP_TURNS);
    let stalled = Arc::new(AtomicBool::new(false));
    let stall = Arc::clone(&stalled);
    let summaries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (url_b, seen_b) = serve(move |_, r| {
        if is_summary_body(&r.body)
            && summaries.fetch_add(1, Ordering::SeqCst) == 1
            && !stall.swap(true, Ordering::SeqCst)
        {
            return Reply::Chunks {
                content_type: "application/json",
                pieces: vec![(Duration::from_secs(30), String::new())],
                end: false,
            };
        }
        http_reply(kind, r)
    });
    let config_b = http_config(&env_b, kind, &url_b, true);
    let mut child = spawn_new(
        &env_b,
        &repo_b,
        "Read every file",
        &reader(&env_b),
        &config_b,
        &[],
    );
    while !stalled.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let session = only_session(&env_b);
    let crashed = messages_in(&env_b.state_dir(), &session);
    assert_eq!(
        count(&crashed, "compaction"),
        1,
        "the killed summary left no record"
    );
    let resumed = env_b.run(
        "kxen-agent",
        &["--resume", &session, "--config", config_b.to_str().unwrap()],
    );
    resumed.expect(0);
    let mut b = bodies(&seen_b);
    let killed = b
        .iter()
        .enumerate()
        .filter(|(_, body)| is_summary_body(body))
        .nth(1)
        .unwrap()
        .0;
    assert_eq!(
        b[killed],
        b[killed + 1],
        "the summary call was sent again, the same"
    );
    b.remove(killed);
    assert_eq!(a.len(), b.len());
    for (n, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            x == y,
            "{kind:?} request {n} differs after kill and resume:\n{}\n{}",
            String::from_utf8_lossy(x),
            String::from_utf8_lossy(y)
        );
    }
    let verify = env_b.run("kxen-agent", &["session", "verify", &session]);
    assert_eq!(verify.code, 0, "{}", verify.stderr);

    // A fork before the first compaction point continues with the full history, one after it
    // with the summary (the forks resume without a window, so nothing compacts again).
    let messages = messages_in(&env.state_dir(), &original);
    let first = messages.iter().find(|m| m["role"] == "compaction").unwrap();
    let before_at = first["compacts"]["to"].as_str().unwrap().to_string();
    let last = messages.last().unwrap()["id"].as_str().unwrap().to_string();
    let plain = http_config(&env, kind, &url, false);
    for (at, summarized) in [(before_at, false), (last, true)] {
        let out = env.run("kxen-agent", &["session", "fork", &original, "--at", &at]);
        out.expect(0);
        let fork = out.jsonl()[0]["sessionId"].as_str().unwrap().to_string();
        let sent = seen.lock().unwrap().len();
        let go = env.run(
            "kxen-agent",
            &[
                "--resume",
                &fork,
                "--task",
                "Go on",
                "--config",
                plain.to_str().unwrap(),
            ],
        );
        go.expect(0);
        let request = seen.lock().unwrap()[sent].json();
        let sent_texts = texts(&request);
        let has_summary = sent_texts
            .iter()
            .any(|(_, t)| t.starts_with(SUMMARY_HEADER));
        assert_eq!(has_summary, summarized, "fork at {at}");
        let results = sent_texts.iter().filter(|(role, _)| role == "tool").count();
        let copied = messages_in(&env.state_dir(), &fork);
        if summarized {
            assert!(
                results < count(&copied, "tool"),
                "fork at {at}: {results} results sent"
            );
        } else {
            assert_eq!(
                results,
                count(&copied, "tool"),
                "fork at {at}: the full history"
            );
        }
    }
}

/// A compacted Session pushed to a git remote and pulled on another machine arrives with its
/// records, verifies there, and a second run there compacts on from them.
#[test]
fn a_compacted_session_travels_through_a_git_remote() {
    let m = crate::session_remote::machines();
    let agent = m.env.path().join("rereader.yaml");
    std::fs::write(
        &agent,
        "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata:\n  name: rereader\nspec:\n  \
         objective: Read the README again and again.\n  instructions: [Read.]\n  \
         successCriteria: []\n  capabilities:\n    required: [read]\n    optional: []\n  \
         execution:\n    maxTurns: 128\n    maxRepeatedCalls: 0\n  \
         output: {format: text, requiredFields: []}\n",
    )
    .unwrap();
    let mut lines = Vec::new();
    for run in 0..2 {
        for n in 0..30 {
            lines.push(json!({"text": format!("Run {run}, read {n}."), "toolCalls": [
                {"id": format!("call_{run}_{n}"), "name": "read", "arguments": {"path": "README.md"}}]}));
        }
        lines.push(json!({"text": format!("Run {run} done.")}));
    }
    for k in 0..40 {
        lines.push(json!({"compaction": true, "text": format!("Summary {k}: read the README.")}));
    }
    let config = script_with_context(m.env.path(), &lines, "context_window = 1000");
    let mut first = m.cmd(0, &["run", "--task", "Read it", "--agent"]);
    first.arg(&agent).arg("--config").arg(&config);
    let out = crate::env::Run::from(first.output().unwrap());
    out.expect(0);
    let id = finished(&out.jsonl())["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let local = messages_in(&m.state[0], &id);
    let records = count(&local, "compaction");
    assert!(records >= 2, "{records} compactions");
    m.run(0, &["session", "push", &id]).expect(0);
    let ws_b = m.ws[1].to_str().unwrap();
    m.run(1, &["session", "pull", &id, "--workspace", ws_b])
        .expect(0);
    assert_eq!(messages_in(&m.state[1], &id), local);
    m.run(1, &["session", "verify", &id]).expect(0);
    // A second run on B: it compacts the first run whole (everything before its own task),
    // then its own turns from right after its task; its task is never compacted.
    let mut more = m.cmd(1, &["--resume", &id, "--task", "Again", "--config"]);
    more.arg(&config);
    crate::env::Run::from(more.output().unwrap()).expect(0);
    let after = messages_in(&m.state[1], &id);
    assert!(count(&after, "compaction") > records);
    let second_task = after.iter().rposition(|m| m["role"] == "user").unwrap();
    for r in after[second_task..]
        .iter()
        .filter(|r| r["role"] == "compaction")
    {
        let at = |end: &str| {
            after
                .iter()
                .position(|x| x["id"] == r["compacts"][end])
                .unwrap()
        };
        let (from, to) = (at("from"), at("to"));
        assert!(
            (from, to) == (0, second_task - 1) || from == second_task + 1,
            "the second task is never compacted: {from}..={to} around {second_task}"
        );
    }
    assert!(
        after[second_task..]
            .iter()
            .any(|r| r["role"] == "compaction" && r["compacts"]["from"] == after[0]["id"]),
        "the first run was compacted whole"
    );
    m.run(1, &["session", "verify", &id]).expect(0);
}

/// With `stream = true` the summary streams like any answer, but it is no text of the run: no
/// `modelTextDelta` carries it; the record holds it whole.
#[test]
fn a_streamed_summary_is_recorded_not_shown_as_model_text() {
    let env = TestEnv::new();
    let workspace = repo(&env, HTTP_TURNS);
    let (url, _seen) = serve(|_, r| {
        let tokens = r.body.len() / 4;
        let data = |v: Value| format!("data: {v}\n\n");
        let (text, next) = decide(r);
        let mut pieces = Vec::new();
        match text {
            Some(text) if is_summary_body(&r.body) => {
                for part in ["SUMMARY-", "STREAMED ", &text] {
                    pieces.push(data(json!({"choices": [{"index": 0, "delta": {"content": part}}]})));
                }
            }
            Some(text) => {
                pieces.push(data(json!({"choices": [{"index": 0, "delta": {"content": text}}]})))
            }
            None => pieces.push(data(json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
                "index": 0, "id": format!("call_{next}"), "type": "function",
                "function": {"name": "read", "arguments": json!({"path": format!("f{next:03}.txt")}).to_string()}}]}}]}))),
        }
        pieces.push(data(
            json!({"choices": [], "usage": {"prompt_tokens": tokens, "completion_tokens": 5}}),
        ));
        pieces.push("data: [DONE]\n\n".into());
        Reply::Chunks {
            content_type: "text/event-stream",
            pieces: pieces.into_iter().map(|p| (Duration::ZERO, p)).collect(),
            end: true,
        }
    });
    let config = env.path().join("stream.toml");
    std::fs::write(
        &config,
        format!(
            "[providers.m]\nkind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\nstream = true\ncontext_window = {HTTP_WINDOW}\n[roles]\nexecution = \"m\"\n"
        ),
    )
    .unwrap();
    let run = run_new(
        &env,
        &workspace,
        "Read every file",
        &reader(&env),
        &config,
        &[],
    );
    run.expect(0);
    let events = run.jsonl();
    assert!(events.iter().any(|e| e["type"] == "compacted"));
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "modelTextDelta" && e["text"].to_string().contains("SUMMARY")),
        "a summary was shown as model text"
    );
    assert!(
        events.iter().any(|e| e["type"] == "modelTextDelta"),
        "the answer streamed"
    );
    let messages = messages_in(&env.state_dir(), &only_session(&env));
    let record = messages.iter().find(|m| m["role"] == "compaction").unwrap();
    assert!(
        record["content"]
            .as_str()
            .unwrap()
            .starts_with("SUMMARY-STREAMED Read the files"),
        "{record}"
    );
}

/// Reads per run in the multi-run test: one run of them stays under the small window's
/// threshold, two do not.
const READS_PER_RUN: usize = 8;

#[test]
fn a_later_run_compacts_the_earlier_runs_history_but_never_its_own_task() {
    let env = TestEnv::new();
    let (repo, config) = two_run_script(&env);

    let first = run_new(
        &env,
        &repo,
        "Read the first half",
        &reader(&env),
        &config,
        &[],
    );
    first.expect(0);
    assert!(
        !first.jsonl().iter().any(|e| e["type"] == "compacted"),
        "one run of {READS_PER_RUN} reads stays under the threshold"
    );
    let session = only_session(&env);
    let before = messages_in(&env.state_dir(), &session);
    let config_arg = config.to_str().unwrap();
    let second = env.run(
        "kxen-agent",
        &[
            "--resume",
            &session,
            "--task",
            "Read the second half",
            "--config",
            config_arg,
        ],
    );
    second.expect(0);
    let events = second.jsonl();
    assert_eq!(finished(&events)["finalText"], "Read the second half.");
    let messages = messages_in(&env.state_dir(), &session);
    let task = messages
        .iter()
        .position(|m| m["content"] == "Read the second half")
        .unwrap();
    let records: Vec<&Value> = messages
        .iter()
        .filter(|m| m["role"] == "compaction")
        .collect();
    assert!(!records.is_empty(), "the second run compacted");
    // The first compaction replaces the whole first run, its task and answer included...
    assert_eq!(records[0]["compacts"]["from"], before[0]["id"]);
    assert_eq!(records[0]["compacts"]["to"], messages[task - 1]["id"]);
    assert_eq!(records[0]["compacts"]["messages"], before.len());
    // ...and no range ever holds the second run's own task.
    let position = |id: &Value| messages.iter().position(|m| &m["id"] == id).unwrap();
    for r in &records {
        let (from, to) = (
            position(&r["compacts"]["from"]),
            position(&r["compacts"]["to"]),
        );
        assert!(to < task || from > task, "{r}");
    }
    let verify = env.run("kxen-agent", &["session", "verify", &session]);
    assert_eq!(verify.code, 0, "{}", verify.stderr);

    // A copy through a bundle verifies too (the import makes every check verify does).
    let bundle = env.path().join("multi.bundle.json");
    let bundle_arg = bundle.to_str().unwrap();
    env.run(
        "kxen-agent",
        &["session", "export", &session, "--output", bundle_arg],
    )
    .expect(0);
    let other = env.path().join("state-b");
    let other_arg = other.to_str().unwrap();
    let repo_arg = repo.to_str().unwrap();
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            other_arg,
            "session",
            "import",
            bundle_arg,
            "--workspace",
            repo_arg,
        ],
    )
    .expect(0);
    assert_eq!(messages_in(&other, &session), messages);
}

/// The multi-run test's repository and script: two runs of [`READS_PER_RUN`] reads each, then
/// summaries, with the small window.
fn two_run_script(env: &TestEnv) -> (PathBuf, PathBuf) {
    let repo = repo(env, 2 * READS_PER_RUN);
    let mut lines = Vec::new();
    for (run, answer) in [(0, "Read the first half."), (1, "Read the second half.")] {
        for k in 0..READS_PER_RUN {
            let n = run * READS_PER_RUN + k;
            lines.push(json!({"text": format!("Reading f{n:03}."), "toolCalls": [
                {"id": format!("call_{n}"), "name": "read", "arguments": {"path": format!("f{n:03}.txt")}}]}));
        }
        lines.push(json!({"text": answer}));
    }
    for k in 0..10 {
        lines
            .push(json!({"compaction": true, "text": format!("Summary {k}: earlier files read.")}));
    }
    (repo, script_with_context(env.path(), &lines, SMALL_WINDOW))
}

/// A crash while a later run compacts the earlier runs (before or after the record is
/// durable) leaves no record or a complete one; the resumed run ends as the uninterrupted one.
#[test]
fn a_crash_while_compacting_earlier_runs_resumes_to_the_same_log() {
    let second_run = |env: &TestEnv, config: &Path, session: &str, failpoint: Option<&str>| {
        let mut cmd = env.cmd("kxen-agent");
        cmd.args([
            "--resume",
            session,
            "--task",
            "Read the second half",
            "--config",
        ])
        .arg(config);
        if let Some(point) = failpoint {
            cmd.env("KXEN_FAILPOINT", point);
        }
        cmd.output().unwrap()
    };
    let first_run = |env: &TestEnv| {
        let (repo, config) = two_run_script(env);
        run_new(
            env,
            &repo,
            "Read the first half",
            &reader(env),
            &config,
            &[],
        )
        .expect(0);
        (config, only_session(env))
    };
    let reference = {
        let env = TestEnv::new();
        let (config, session) = first_run(&env);
        assert!(second_run(&env, &config, &session, None).status.success());
        messages_in(&env.state_dir(), &session)
    };
    for point in ["compaction.after-summary", "compaction.after-record"] {
        let env = TestEnv::new();
        let (config, session) = first_run(&env);
        let killed = second_run(&env, &config, &session, Some(point));
        assert_eq!(
            killed.status.code(),
            None,
            "{point}: the failpoint was not reached"
        );
        let records = count(&messages_in(&env.state_dir(), &session), "compaction");
        let expected = usize::from(point == "compaction.after-record");
        assert_eq!(records, expected, "{point}: no record, or a complete one");
        let resumed = env.run(
            "kxen-agent",
            &["--resume", &session, "--config", config.to_str().unwrap()],
        );
        resumed.expect(0);
        let after = messages_in(&env.state_dir(), &session);
        assert_eq!(decisions(&after), decisions(&reference), "{point}");
        let verify = env.run("kxen-agent", &["session", "verify", &session]);
        assert_eq!(verify.code, 0, "{point}: {}", verify.stderr);
    }
}
