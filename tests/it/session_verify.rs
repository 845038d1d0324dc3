//! `session verify SES`: hash chains, cross-references and the lock, checked in place.

use std::path::PathBuf;

use serde_json::json;

use crate::env::TestEnv;
use crate::session_builder::{Built, Shape, build};

fn session(env: &TestEnv) -> Built {
    let workspace = env.path().join("w");
    std::fs::create_dir_all(&workspace).unwrap();
    build(
        &env.state_dir(),
        &Shape {
            workspace: &workspace,
            task: "fix the check",
            tool_calls: 4,
            output_bytes: 300,
            blob_every: 2,
        },
    )
}

fn session_dir(env: &TestEnv, b: &Built) -> PathBuf {
    env.state_dir().join("sessions").join(&b.session_id)
}

/// Rewrites line `n` (1-based) of a file with `f`.
fn edit_line(path: &PathBuf, n: usize, f: impl Fn(&str) -> String) {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<String> = text
        .lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == n { f(l) } else { l.to_string() })
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn an_intact_session_verifies_and_reports_what_it_holds() {
    let env = TestEnv::new();
    let b = session(&env);
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(0);
    let out = &run.jsonl()[0];
    assert_eq!(out["type"], "sessionVerified");
    assert_eq!(out["sessionId"], b.session_id.as_str());
    assert_eq!(out["messages"], 1 + 2 * 4 + 1);
    assert_eq!(out["runs"], json!([b.run_id]));
    assert_eq!(out["operations"], 4);
    assert_eq!(out["blobs"].as_array().unwrap().len(), 2);
    // Every chained line names its predecessor.
    let messages = std::fs::read_to_string(session_dir(&env, &b).join("messages.jsonl")).unwrap();
    assert!(
        messages
            .lines()
            .all(|l| l.contains("\"prevHash\":\"sha256:"))
    );
    let text = env.run(
        "kxen-agent",
        &["--format", "text", "session", "verify", &b.session_id],
    );
    text.expect(0);
    assert!(
        text.stdout
            .contains(": ok (10 messages, 1 runs, 4 operations, 2 blobs)"),
        "{}",
        text.stdout
    );
}

#[test]
fn a_changed_tool_output_names_the_first_broken_record() {
    let env = TestEnv::new();
    let b = session(&env);
    let path = session_dir(&env, &b).join("messages.jsonl");
    // Line 3 is the first tool result; line 4 names its old hash.
    edit_line(&path, 3, |l| {
        l.replacen("output of step 0", "output of step X", 1)
    });
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(10);
    assert!(
        run.stderr.contains("messages.jsonl:4: the chain is broken"),
        "{}",
        run.stderr
    );
}

#[test]
fn reordered_journal_lines_and_an_edited_lock_are_corrupt() {
    let env = TestEnv::new();
    let b = session(&env);
    let journal = session_dir(&env, &b)
        .join("runs")
        .join(&b.run_id)
        .join("journal.jsonl");
    let original = std::fs::read_to_string(&journal).unwrap();
    let mut lines: Vec<&str> = original.lines().collect();
    lines.swap(1, 2);
    std::fs::write(&journal, lines.join("\n") + "\n").unwrap();
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(10);
    assert!(run.stderr.contains("journal.jsonl:2:"), "{}", run.stderr);
    std::fs::write(&journal, &original).unwrap();
    env.run("kxen-agent", &["session", "verify", &b.session_id])
        .expect(0);

    let session_json = session_dir(&env, &b).join("session.json");
    let text = std::fs::read_to_string(&session_json).unwrap();
    std::fs::write(
        &session_json,
        text.replace(
            "Complete the supplied repository task",
            "Delete the repository",
        ),
    )
    .unwrap();
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(10);
    assert!(
        run.stderr
            .contains("session.json: the session's agent lock is damaged: definitionHash"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_missing_blob_and_a_dangling_tool_message_are_corrupt() {
    let env = TestEnv::new();
    let b = session(&env);
    let blobs: Vec<_> = std::fs::read_dir(env.state_dir().join("blobs"))
        .unwrap()
        .collect();
    let blob = blobs[0].as_ref().unwrap().path();
    let bytes = std::fs::read(&blob).unwrap();
    std::fs::write(&blob, b"changed").unwrap();
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(10);
    assert!(
        run.stderr.contains("journal.jsonl:")
            && run.stderr.contains("does not match its reference"),
        "{}",
        run.stderr
    );
    std::fs::write(&blob, bytes).unwrap();

    // Drop the journal's last two records (outcome and settlement of the last call): the chain
    // of what is left holds, but the tool message now answers an operation still `started`…
    // which is legal mid-run; removing the whole operation is not.
    let journal = session_dir(&env, &b)
        .join("runs")
        .join(&b.run_id)
        .join("journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let kept: Vec<&str> = text.lines().take(9).collect();
    std::fs::write(&journal, kept.join("\n") + "\n").unwrap();
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(10);
    assert!(
        run.stderr.contains("messages.jsonl:") && run.stderr.contains("does not hold"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_torn_tail_is_reported_not_refused_and_bad_ids_touch_nothing() {
    let env = TestEnv::new();
    let b = session(&env);
    let path = session_dir(&env, &b).join("messages.jsonl");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(b"{\"id\":\"msg_torn");
    std::fs::write(&path, &bytes).unwrap();
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(0);
    assert!(
        run.jsonl()[0]["tornTails"][0]
            .as_str()
            .unwrap()
            .ends_with("messages.jsonl:11")
    );
    // Read-only: the torn tail is still there.
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    env.run("kxen-agent", &["session", "verify", "../x"])
        .expect(4);
    env.run(
        "kxen-agent",
        &["session", "verify", "ses_0000000000aaaaaaaaaaaaaaaa"],
    )
    .expect(3);
}

/// Journal lines for `records`, hash-chained as the runtime writes them.
fn rechain(records: &[serde_json::Value]) -> Vec<String> {
    let mut prev = kxen::fsx::chain::GENESIS.to_string();
    records
        .iter()
        .map(|r| {
            let line = kxen::fsx::chain::chain_line(&r.to_string(), &prev);
            prev = kxen::fsx::chain::line_hash(line.as_bytes());
            line
        })
        .collect()
}

/// Several kinds of damage in one journal: verify reports them in a fixed order — a broken
/// chain, then an illegal sequence, then a dangling cross-reference — whatever their lines.
#[test]
fn journal_damage_is_reported_chain_first_then_sequence_then_references() {
    let env = TestEnv::new();
    let b = session(&env);
    let journal = session_dir(&env, &b)
        .join("runs")
        .join(&b.run_id)
        .join("journal.jsonl");
    let mut records: Vec<serde_json::Value> = std::fs::read_to_string(&journal)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("prevHash");
            v
        })
        .collect();
    assert_eq!(records.len(), 12);
    assert_eq!(records[2]["phase"], "settled");
    let write = |lines: &[String]| std::fs::write(&journal, lines.join("\n") + "\n").unwrap();
    let verify = || {
        let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
        run.expect(10);
        run.stderr
    };

    // Line 3 settles with a message that does not exist: a dangling reference.
    records[2]["turnMessageId"] = json!("msg_nope");
    write(&rechain(&records));
    let err = verify();
    assert!(
        err.contains("journal.jsonl:3: operation")
            && err.contains("which messages.jsonl does not hold"),
        "{err}"
    );

    // Line 13 starts the first operation again: the illegal sequence wins over line 3.
    records.push(records[0].clone());
    write(&rechain(&records));
    let err = verify();
    assert!(
        err.contains("journal.jsonl:13: operation") && err.contains("started twice"),
        "{err}"
    );

    // Line 14 names the wrong predecessor: the broken chain wins over both.
    let mut lines = rechain(&records);
    let mut extra = records[1].clone();
    extra["opId"] = json!("op_extra");
    lines.push(kxen::fsx::chain::chain_line(
        &extra.to_string(),
        kxen::fsx::chain::GENESIS,
    ));
    write(&lines);
    let err = verify();
    assert!(
        err.contains("journal.jsonl:14: the chain is broken"),
        "{err}"
    );
}

/// The last line of a chained file has no successor naming its hash: the run's recorded final
/// text is what protects a final answer there.
#[test]
fn a_changed_final_answer_on_the_last_line_is_damage() {
    let env = TestEnv::new();
    let b = session(&env);
    let messages = session_dir(&env, &b).join("messages.jsonl");
    let last = std::fs::read_to_string(&messages).unwrap().lines().count();
    edit_line(&messages, last, |l| {
        assert!(l.contains("The check passes now."), "{l}");
        l.replace("The check passes now.", "The check FAILS now.  ")
    });
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(10);
    assert!(run.stderr.contains("run.json"), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("messages.jsonl line {last}")),
        "{}",
        run.stderr
    );
}

/// Recomputes every `prevHash` of a chained file, as someone who edits a line and "repairs" the
/// chain after it would.
fn rechain_file(path: &PathBuf) {
    let records: Vec<serde_json::Value> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("prevHash");
            v
        })
        .collect();
    std::fs::write(path, rechain(&records).join("\n") + "\n").unwrap();
}

/// A tool call's arguments in the conversation are what the model sees on resume; the journal's
/// `started` record of that call must agree, even when the chain was re-made after an edit.
#[test]
fn changed_call_arguments_disagree_with_the_journal() {
    let env = TestEnv::new();
    let b = session(&env);
    let messages = session_dir(&env, &b).join("messages.jsonl");
    let text = std::fs::read_to_string(&messages).unwrap();
    let line = text
        .lines()
        .position(|l| l.contains("sh check.sh --step 2"))
        .unwrap()
        + 1;
    edit_line(&messages, line, |l| {
        l.replace("sh check.sh --step 2", "rm -rf ~")
    });
    rechain_file(&messages);
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(10);
    assert!(run.stderr.contains("journal.jsonl:"), "{}", run.stderr);
    assert!(run.stderr.contains("other arguments"), "{}", run.stderr);
}

/// A terminal run's journal must be complete and its status must agree with it: a completed
/// run whose journal lost its last lines, or a settled run edited back to `running`, is damage
/// (issue 12 item 7).
#[test]
fn a_finished_run_with_a_short_journal_or_an_edited_status_is_corrupt() {
    let env = TestEnv::new();
    let b = session(&env);
    let run_dir = session_dir(&env, &b).join("runs").join(&b.run_id);
    let journal = run_dir.join("journal.jsonl");
    let original = std::fs::read_to_string(&journal).unwrap();
    // The last operation's `settled` line is gone: still a valid (shorter) chain.
    let lines: Vec<&str> = original.lines().collect();
    std::fs::write(&journal, lines[..lines.len() - 1].join("\n") + "\n").unwrap();
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(10);
    assert!(
        run.stderr
            .contains("run.json: the run is completed but operation")
            && run.stderr.contains("is outcomeKnown"),
        "{}",
        run.stderr
    );
    // Two records short: the operation is only started.
    std::fs::write(&journal, lines[..lines.len() - 2].join("\n") + "\n").unwrap();
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(10);
    assert!(run.stderr.contains("is started"), "{}", run.stderr);
    std::fs::write(&journal, &original).unwrap();
    env.run("kxen-agent", &["session", "verify", &b.session_id])
        .expect(0);

    let run_json = run_dir.join("run.json");
    let text = std::fs::read_to_string(&run_json).unwrap();
    let edited = text.replacen("\"status\": \"completed\"", "\"status\": \"running\"", 1);
    assert_ne!(edited, text);
    std::fs::write(&run_json, &edited).unwrap();
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(10);
    assert!(
        run.stderr
            .contains("run.json: the run is running but settled"),
        "{}",
        run.stderr
    );
    // Also with the result and `settled` removed: its final answer is in the conversation.
    let mut value: serde_json::Value = serde_json::from_str(&edited).unwrap();
    value.as_object_mut().unwrap().remove("result");
    value["settled"] = json!(false);
    std::fs::write(&run_json, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    let run = env.run("kxen-agent", &["session", "verify", &b.session_id]);
    run.expect(10);
    assert!(
        run.stderr
            .contains("the run is running and does not record final message"),
        "{}",
        run.stderr
    );
}

/// `session verify` while a run writes: it reads a consistent snapshot of the files (each
/// between two writes of the runner), so a healthy Session never reports damage however the
/// reads interleave with the appends (issue 12 item 12).
#[test]
fn verify_during_an_active_run_never_reports_damage_that_is_not_there() {
    use crate::run_support::{call, fixer, script_config, spawn_new};
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = fixer(&env);
    // Distinct arguments: identical calls would end the run `loopDetected` first.
    let mut turns: Vec<serde_json::Value> = (0..300)
        .map(|i| {
            call(
                &format!("c{i}"),
                "read",
                json!({"path": "README", "limit": i + 1}),
            )
        })
        .collect();
    turns.push(crate::run_support::answer("done"));
    let config = script_config(&env, &turns);
    let agent_yaml = std::fs::read_to_string(&agent)
        .unwrap()
        .replace("maxTurns: 16", "maxTurns: 400");
    std::fs::write(&agent, agent_yaml).unwrap();
    let mut child = spawn_new(&env, &repo, "Read", &agent, &config, &[]);
    // Its events are not read here: drain them, or a full pipe would stop the run.
    let drain = |pipe: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            if let Some(mut pipe) = pipe {
                let _ = std::io::copy(&mut pipe, &mut std::io::sink());
            }
        })
    };
    drain(child.stdout.take().map(|p| Box::new(p) as _));
    drain(child.stderr.take().map(|p| Box::new(p) as _));
    let sessions = env.state_dir().join("sessions");
    let session = loop {
        let found = std::fs::read_dir(&sessions).ok().and_then(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .find(|n| n.starts_with("ses_"))
        });
        if let Some(id) = found {
            break id;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let mut verified = 0;
    while child.try_wait().unwrap().is_none() {
        let run = env.run("kxen-agent", &["session", "verify", &session]);
        assert_eq!(
            run.code, 0,
            "verify {verified} during the run\n{}\n{}",
            run.stdout, run.stderr
        );
        verified += 1;
    }
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert!(
        verified > 3,
        "only {verified} verifications overlapped the run"
    );
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(0);
}
