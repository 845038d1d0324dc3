//! Repository rules (`AGENTS.md`, `context_files`): read from the repository root down to the
//! workspace, given to the model before the task, recorded with the run's task message and
//! replayed from there (never re-read) by every later request of the Session.

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::fake_model::{Reply, completion, config, serve};
use crate::run_support::*;

/// The user messages of a recorded request, in order.
fn user_texts(request: &crate::fake_model::Request) -> Vec<String> {
    request.json()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// A model that answers "Done." to every request, and the config that points at it.
fn answering_done(env: &TestEnv) -> (std::path::PathBuf, crate::fake_model::Seen) {
    let (url, seen) = serve(|_, _| {
        Reply::json(&completion(
            json!({"role": "assistant", "content": "Done."}),
        ))
    });
    let config = config(
        env,
        &format!("kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\""),
    );
    (config, seen)
}

fn session_of(env: &TestEnv) -> String {
    let list = env.run("kxen-agent", &["session", "list"]);
    list.jsonl()[0]["id"].as_str().unwrap().to_string()
}

#[test]
fn rules_reach_the_first_request_root_first_and_a_later_run_replays_what_was_recorded() {
    let env = TestEnv::new();
    let repo = env.git_repo(
        "repo",
        &[
            ("AGENTS.md", "ROOT RULE: run the tests with make check.\n"),
            ("pkg/AGENTS.md", "PKG RULE: keep functions short.\n"),
            ("pkg/lib.txt", "x\n"),
        ],
    );
    let (config, seen) = answering_done(&env);
    let run = run_new(
        &env,
        &repo.join("pkg"),
        "Fix it",
        &fixer(&env),
        &config,
        &[],
    );
    run.expect(0);
    let first = user_texts(&seen.lock().unwrap()[0]);
    assert_eq!(first.len(), 1);
    let text = &first[0];
    let root = text.find("ROOT RULE").expect("the root AGENTS.md is sent");
    let pkg = text
        .find("PKG RULE")
        .expect("the nearest AGENTS.md is sent");
    let task = text.find("Fix it").unwrap();
    assert!(
        root < pkg && pkg < task,
        "root first, nearest last, task after: {text}"
    );
    assert!(
        text.contains("repository content"),
        "framed as repository content: {text}"
    );
    // The system prompt (the cached prefix) carries none of it.
    let system = &seen.lock().unwrap()[0].json()["messages"][0];
    assert_eq!(system["role"], "system");
    assert!(!system["content"].as_str().unwrap().contains("ROOT RULE"));

    // The file changes; the next run reads the new text, and replays the first run's old one.
    std::fs::write(repo.join("AGENTS.md"), "ROOT RULE v2: use cargo.\n").unwrap();
    let session = session_of(&env);
    let config_s = config.to_str().unwrap();
    let next = env.run(
        "kxen-agent",
        &[
            "--resume", &session, "--task", "Now this", "--config", config_s,
        ],
    );
    next.expect(0);
    let second = user_texts(&seen.lock().unwrap()[1]);
    assert_eq!(second.len(), 2);
    assert_eq!(
        &second[0], text,
        "the first run's turn is replayed byte for byte"
    );
    assert!(second[1].contains("ROOT RULE v2") && !second[1].contains("make check"));

    // `session show` names the version each run used.
    let shown = env.run("kxen-agent", &["session", "show", &session]);
    shown.expect(0);
    let v = &shown.jsonl()[0];
    let files = |i: usize| v["runs"][i]["contextFiles"].as_array().unwrap().clone();
    let paths: Vec<Value> = files(0).iter().map(|f| f["path"].clone()).collect();
    assert_eq!(paths, [json!("AGENTS.md"), json!("pkg/AGENTS.md")]);
    assert_ne!(files(0)[0]["sha256"], files(1)[0]["sha256"]);
    assert_eq!(files(0)[1]["sha256"], files(1)[1]["sha256"]);
    let text_view = env.run(
        "kxen-agent",
        &["session", "show", &session, "--format", "text"],
    );
    let out = &text_view.stdout;
    assert!(out.contains("rules pkg/AGENTS.md  sha256:"), "{out}");
}

#[test]
fn context_files_picks_the_files_and_an_empty_list_sends_none() {
    let env = TestEnv::new();
    let repo = env.git_repo(
        "repo",
        &[
            ("AGENTS.md", "AGENTS TEXT\n"),
            ("CLAUDE.md", "CLAUDE TEXT\n"),
        ],
    );
    let (url, seen) = serve(|_, _| {
        Reply::json(&completion(
            json!({"role": "assistant", "content": "Done."}),
        ))
    });
    let provider = format!("kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"");
    for (list, want) in [
        (
            "[\"AGENTS.md\", \"CLAUDE.md\"]",
            &["AGENTS TEXT", "CLAUDE TEXT"][..],
        ),
        ("[]", &[][..]),
    ] {
        let path = env.path().join("c.toml");
        std::fs::write(
            &path,
            format!(
                "context_files = {list}\n[providers.p]\n{provider}\n[roles]\nexecution = \"p\"\n"
            ),
        )
        .unwrap();
        seen.lock().unwrap().clear();
        run_new(&env, &repo, "Go", &fixer(&env), &path, &[]).expect(0);
        let text = user_texts(&seen.lock().unwrap()[0]).remove(0);
        for w in want {
            assert!(text.contains(w), "{list}: {text}");
        }
        if want.is_empty() {
            assert_eq!(text, "Go");
        }
    }
    // Not a plain file name: refused before anything runs (exit 4).
    let bad = env.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "context_files = [\"../x.md\"]\n[providers.p]\n{provider}\n[roles]\nexecution = \"p\"\n"
        ),
    )
    .unwrap();
    let run = run_new(&env, &repo, "Go", &fixer(&env), &bad, &[]);
    run.expect(4);
}

#[test]
fn an_imported_bundle_replays_the_recorded_rules_not_the_file() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("AGENTS.md", "ORIGINAL RULE\n")]);
    let (config, seen) = answering_done(&env);
    run_new(&env, &repo, "First", &fixer(&env), &config, &[]).expect(0);
    let session = session_of(&env);
    let bundle = env.path().join("b.json");
    let b = bundle.to_str().unwrap();
    env.run(
        "kxen-agent",
        &["session", "export", &session, "--output", b],
    )
    .expect(0);
    let other = env.path().join("other-state");
    let o = other.to_str().unwrap();
    let r = repo.to_str().unwrap();
    env.run(
        "kxen-agent",
        &["--state-dir", o, "session", "import", b, "--workspace", r],
    )
    .expect(0);
    std::fs::write(repo.join("AGENTS.md"), "CHANGED RULE\n").unwrap();
    let c = config.to_str().unwrap();
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            o,
            "--resume",
            &session,
            "--task",
            "Second",
            "--config",
            c,
        ],
    )
    .expect(0);
    let texts = user_texts(&seen.lock().unwrap()[1]);
    assert!(texts[0].contains("ORIGINAL RULE") && !texts[0].contains("CHANGED"));
    assert!(texts[1].contains("CHANGED RULE"), "{}", texts[1]);
}

/// The fixer with the definition's `environmentPreamble` on.
fn fixer_with_preamble(env: &TestEnv) -> std::path::PathBuf {
    let path = fixer(env);
    let yaml = std::fs::read_to_string(&path).unwrap();
    let yaml = yaml.replace(
        "maxTurns: 16",
        "maxTurns: 16\n    environmentPreamble: true",
    );
    assert!(yaml.contains("environmentPreamble"), "{yaml}");
    std::fs::write(&path, yaml).unwrap();
    path
}

#[test]
fn the_environment_preamble_is_computed_once_and_replayed_byte_for_byte() {
    let env = TestEnv::new();
    let repo = env.git_repo(
        "repo",
        &[
            ("merge.py", "def deep_merge(a, b):\n    pass\n"),
            ("tests/test_merge.py", "import merge\n"),
        ],
    );
    // The first turn writes a new file (the workspace changes), the second answers.
    let (url, seen) = serve(|n, _| {
        let message = if n == 0 {
            crate::fake_model::tool_call_message(
                "c1",
                "write",
                &json!({"path": "notes.txt", "content": "new\n"}),
            )
        } else {
            json!({"role": "assistant", "content": "Done."})
        };
        Reply::json(&completion(message))
    });
    let config = config(
        &env,
        &format!("kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\""),
    );
    let task = "Implement deep_merge. Check it with `python3 -m doctest merge.py`.";
    let agent = fixer_with_preamble(&env);
    let run = run_new(&env, &repo, task, &agent, &config, &[]);
    run.expect(0);
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    let first = &user_texts(&requests[0])[0];
    let listing = "Files (2, tracked by git first):\n  merge.py\n  tests/test_merge.py\n";
    assert!(first.contains(listing), "{first}");
    assert!(first.contains("`git status --short`: clean"), "{first}");
    assert!(
        first.contains("The task's check: `python3 -m doctest merge.py`"),
        "{first}"
    );
    assert!(first.ends_with(&format!("\nTask:\n{task}")), "{first}");
    // The second turn sends the first turn's bytes again, though notes.txt exists now.
    assert_eq!(&user_texts(&requests[1])[0], first);
    assert!(repo.join("notes.txt").is_file());

    // A later run describes the workspace as it is then, and replays the first run's text.
    let session = session_of(&env);
    let next = env.run(
        "kxen-agent",
        &[
            "--resume",
            &session,
            "--task",
            "Now this",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    next.expect(0);
    let third = user_texts(&seen.lock().unwrap()[2]);
    assert_eq!(&third[0], first);
    let later = third.last().unwrap();
    assert!(
        later.contains("Files (3, tracked by git first):"),
        "{later}"
    );
    assert!(later.contains("?? notes.txt"), "{later}");
    assert!(!later.contains("The task's check"), "{later}");
}

#[test]
fn without_the_preamble_the_first_turn_has_no_workspace_description() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "x\n")]);
    let (config, seen) = answering_done(&env);
    run_new(&env, &repo, "Fix it", &fixer(&env), &config, &[]).expect(0);
    let first = user_texts(&seen.lock().unwrap()[0]);
    assert_eq!(first, ["Fix it"]);
}
