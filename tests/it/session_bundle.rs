//! `session export` / `session import`: round trip between two state dirs and two clones, the
//! canary, refusals, the damaged-bundle corpus (`fixtures/bundles/`) and a killed import.

use std::path::Path;

use serde_json::{Value, json};

use crate::env::{TestEnv, git, snapshot};
use crate::run_support::*;
use crate::session_builder::{Shape, build};

const CANARY: &str = "sk-canary-bundle-51d2e8";

fn session_id(run: &crate::env::Run) -> String {
    finished(&run.jsonl())["sessionId"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `session show` without the parts that legitimately differ between runners.
fn shown(env: &TestEnv, state: &Path, id: &str) -> Value {
    let out = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            state.to_str().unwrap(),
            "session",
            "show",
            id,
        ],
    );
    out.expect(0);
    let mut v = out.jsonl().remove(0);
    for key in ["root", "repositoryRoot"] {
        v["workspace"].as_object_mut().unwrap().remove(key);
    }
    v
}

#[test]
fn round_trip_between_two_runners_and_resume_on_the_second() {
    let env = TestEnv::new();
    let origin = env.git_repo("origin", &[("README.md", "hello\n")]);
    for clone in ["a", "b"] {
        git(
            env.path(),
            &["clone", "-q", origin.to_str().unwrap(), clone],
        );
    }
    let (ws_a, ws_b) = (env.path().join("a"), env.path().join("b"));
    let (state_a, state_b) = (env.path().join("state-a"), env.path().join("state-b"));
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call("call_1", "read", json!({"path": "README.md"})),
            call("call_2", "exec", json!({"command": "env; echo PROBE-DONE"})),
            answer("Read it."),
            answer("Second task done."),
        ],
    );
    let first = env
        .cmd("kxen-agent")
        .env("OPENAI_API_KEY", CANARY)
        .env("KXEN_TEST_CANARY_KEY", CANARY)
        .args([
            "--state-dir",
            state_a.to_str().unwrap(),
            "run",
            "--workspace",
        ])
        .arg(&ws_a)
        .args(["--task", "Read the README", "--agent"])
        .arg(&agent)
        .arg("--config")
        .arg(&config)
        .arg("--allow-shell")
        .output()
        .unwrap();
    let first = crate::env::Run {
        code: first.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&first.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&first.stderr).into_owned(),
    };
    first.expect(0);
    assert!(first.stdout.contains("PROBE-DONE"), "{}", first.stdout);
    let id = session_id(&first);

    let bundle = env.path().join("ses.bundle.json");
    let exported = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            state_a.to_str().unwrap(),
            "session",
            "export",
            &id,
            "--output",
            bundle.to_str().unwrap(),
        ],
    );
    exported.expect(0);
    assert_eq!(exported.jsonl()[0]["type"], "sessionExported");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&bundle).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&bundle).unwrap();
    assert!(
        !text.contains(CANARY),
        "the provider key leaked into the bundle"
    );
    assert!(
        text.contains("PROBE-DONE"),
        "the tool output is in the bundle"
    );
    let parsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed["format"], "kxen-bundle/v1");
    let paths: Vec<&str> = parsed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths[..2], ["session.json", "messages.jsonl"]);
    assert!(paths.iter().all(|p| !p.contains("lease")), "{paths:?}");
    // "These files, checksummed": each entry is the exact file.
    let dir_a = state_a.join("sessions").join(&id);
    for f in parsed["files"].as_array().unwrap() {
        let on_disk = std::fs::read_to_string(dir_a.join(f["path"].as_str().unwrap())).unwrap();
        assert_eq!(f["content"].as_str().unwrap(), on_disk);
        assert_eq!(
            f["sha256"].as_str().unwrap(),
            kxen::hash::sha256_prefixed(on_disk.as_bytes())
        );
    }

    // Import into an empty state dir on the second clone.
    let imported = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            state_b.to_str().unwrap(),
            "session",
            "import",
            bundle.to_str().unwrap(),
            "--workspace",
            ws_b.to_str().unwrap(),
        ],
    );
    imported.expect(0);
    let ev = &imported.jsonl()[0];
    assert_eq!(ev["type"], "sessionImported");
    assert_eq!(ev["sessionId"], id.as_str());
    let canonical_b = std::fs::canonicalize(&ws_b).unwrap();
    assert_eq!(ev["workspace"], canonical_b.to_str().unwrap());
    assert_eq!(shown(&env, &state_a, &id), shown(&env, &state_b, &id));
    let full_b = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            state_b.to_str().unwrap(),
            "session",
            "show",
            &id,
        ],
    );
    assert_eq!(
        full_b.jsonl()[0]["workspace"]["root"],
        canonical_b.to_str().unwrap()
    );
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            state_b.to_str().unwrap(),
            "session",
            "verify",
            &id,
        ],
    )
    .expect(0);
    assert!(!snapshot(&state_b).keys().any(|k| k.contains(".staging")));

    // `session diff` across the two state dirs: the same conversation and lock; only the
    // workspace binding's root differs (B's clone).
    let diffed = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            state_a.to_str().unwrap(),
            "session",
            "diff",
            &id,
            &id,
            "--other-state-dir",
            state_b.to_str().unwrap(),
        ],
    );
    diffed.expect(0);
    let d = diffed.jsonl().remove(0);
    assert_eq!(d["conversationDiff"], "", "{d}");
    assert_eq!(d["divergingA"], json!([]));
    assert_eq!(d["divergingB"], json!([]));
    assert_eq!(d["lockEqual"], true);

    // The same Session again: refused, nothing changes.
    let before = snapshot(&state_b);
    let again = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            state_b.to_str().unwrap(),
            "session",
            "import",
            bundle.to_str().unwrap(),
            "--workspace",
            ws_b.to_str().unwrap(),
        ],
    );
    again.expect(5);
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
    assert_eq!(snapshot(&state_b), before);

    // Resume on B: the next consecutive run continues the imported conversation.
    let resumed = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            state_b.to_str().unwrap(),
            "--resume",
            &id,
            "--workspace",
            ws_b.to_str().unwrap(),
            "--task",
            "Now the second task",
            "--config",
            config.to_str().unwrap(),
            "--allow-shell",
        ],
    );
    resumed.expect(0);
    assert_eq!(finished(&resumed.jsonl())["finalText"], "Second task done.");
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            state_b.to_str().unwrap(),
            "session",
            "verify",
            &id,
        ],
    )
    .expect(0);
    // A continues to exist unchanged by B's work.
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            state_a.to_str().unwrap(),
            "session",
            "verify",
            &id,
        ],
    )
    .expect(0);
}

#[test]
fn a_different_repository_or_branch_is_refused_and_nothing_is_written() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let b = build(
        &env.state_dir(),
        &Shape {
            workspace: &repo,
            task: "t",
            tool_calls: 2,
            output_bytes: 100,
            blob_every: 0,
        },
    );
    let bundle = env.path().join("s.bundle.json");
    env.run(
        "kxen-agent",
        &[
            "session",
            "export",
            &b.session_id,
            "-o",
            bundle.to_str().unwrap(),
        ],
    )
    .expect(0);
    let target = env.path().join("target");
    let other = env.git_repo("other", &[("b.txt", "different\n")]);
    let run = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            target.to_str().unwrap(),
            "session",
            "import",
            bundle.to_str().unwrap(),
            "--workspace",
            other.to_str().unwrap(),
        ],
    );
    run.expect(5);
    assert!(
        run.stderr.contains("not the Session's repository"),
        "{}",
        run.stderr
    );
    assert!(!target.exists(), "a refused import created the state dir");
    // Same repository, other branch.
    let clone = env.path().join("clone");
    git(
        env.path(),
        &["clone", "-q", repo.to_str().unwrap(), "clone"],
    );
    git(&clone, &["checkout", "-q", "-b", "feature"]);
    let run = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            target.to_str().unwrap(),
            "session",
            "import",
            bundle.to_str().unwrap(),
            "--workspace",
            clone.to_str().unwrap(),
        ],
    );
    run.expect(5);
    assert!(run.stderr.contains("branch"), "{}", run.stderr);
    assert!(!target.exists());
    git(&clone, &["checkout", "-q", "main"]);
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            target.to_str().unwrap(),
            "session",
            "import",
            bundle.to_str().unwrap(),
            "--workspace",
            clone.to_str().unwrap(),
        ],
    )
    .expect(0);
}

#[test]
fn export_is_refused_while_the_lease_is_held() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let b = build(
        &env.state_dir(),
        &Shape {
            workspace: &repo,
            task: "t",
            tool_calls: 1,
            output_bytes: 10,
            blob_every: 0,
        },
    );
    let dir = env.state_dir().join("sessions").join(&b.session_id);
    let lease = kxen::session::Lease::acquire(&dir, &b.session_id).unwrap();
    let bundle = env.path().join("s.bundle.json");
    let run = env.run(
        "kxen-agent",
        &[
            "session",
            "export",
            &b.session_id,
            "--output",
            bundle.to_str().unwrap(),
        ],
    );
    run.expect(5);
    assert!(
        run.stderr.contains(&format!("pid {}", std::process::id())),
        "{}",
        run.stderr
    );
    assert!(!bundle.exists());
    drop(lease);
    env.run(
        "kxen-agent",
        &[
            "session",
            "export",
            &b.session_id,
            "--output",
            bundle.to_str().unwrap(),
        ],
    )
    .expect(0);
    // A directory as --output is a usage error that names it, not an internal failure.
    let run = env.run(
        "kxen-agent",
        &[
            "session",
            "export",
            &b.session_id,
            "--output",
            env.path().to_str().unwrap(),
        ],
    );
    run.expect(2);
    assert!(run.stderr.contains("is a directory"), "{}", run.stderr);
}

#[test]
fn an_unknown_operation_travels_and_is_resolved_on_the_second_runner() {
    let env = TestEnv::new();
    let origin = env.git_repo("origin", &[("README.md", "hello\n")]);
    for clone in ["a", "b"] {
        git(
            env.path(),
            &["clone", "-q", origin.to_str().unwrap(), clone],
        );
    }
    let (ws_a, ws_b) = (env.path().join("a"), env.path().join("b"));
    let (state_a, state_b) = (env.path().join("state-a"), env.path().join("state-b"));
    let (sa, sb) = (state_a.to_str().unwrap(), state_b.to_str().unwrap());
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call("c1", "exec", json!({"command": "echo ran >> counter.txt"})),
            answer("done"),
        ],
    );
    let cfg = config.to_str().unwrap();
    // Runner A crashes right after the side effect, before its outcome is durable.
    let crashed = env
        .cmd("kxen-agent")
        .env("KXEN_FAILPOINT", "tool.after-side-effect")
        .args([
            "--state-dir",
            sa,
            "run",
            "--workspace",
            ws_a.to_str().unwrap(),
        ])
        .args([
            "--task",
            "Count",
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            cfg,
            "--allow-shell",
        ])
        .output()
        .unwrap();
    assert!(!crashed.status.success());
    let list = env.run("kxen-agent", &["--state-dir", sa, "session", "list"]);
    let id = list.jsonl()[0]["id"].as_str().unwrap().to_string();
    let stopped = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            sa,
            "--resume",
            &id,
            "--config",
            cfg,
            "--allow-shell",
        ],
    );
    stopped.expect(7);
    let event = stopped
        .jsonl()
        .into_iter()
        .find(|e| e["type"] == "runInputRequired")
        .unwrap();
    let run = event["runId"].as_str().unwrap().to_string();
    let op = event["opIds"][0].as_str().unwrap().to_string();

    // The UNKNOWN operation travels in the bundle…
    let bundle = env.path().join("s.bundle.json");
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            sa,
            "session",
            "export",
            &id,
            "-o",
            bundle.to_str().unwrap(),
        ],
    )
    .expect(0);
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            sb,
            "session",
            "import",
            bundle.to_str().unwrap(),
            "--workspace",
            ws_b.to_str().unwrap(),
        ],
    )
    .expect(0);
    let shown = env.run("kxen-agent", &["--state-dir", sb, "run", "show", &id, &run]);
    assert_eq!(shown.jsonl()[0]["run"]["status"], "inputRequired");
    assert_eq!(shown.jsonl()[0]["operations"][0]["phase"], "outcomeUnknown");
    // …is resolved on B, never re-executed, and the run completes there.
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            sb,
            "run",
            "resolve",
            &id,
            &run,
            &op,
            "--output",
            "it ran once on runner A",
        ],
    )
    .expect(0);
    let done = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            sb,
            "--resume",
            &id,
            "--workspace",
            ws_b.to_str().unwrap(),
            "--config",
            cfg,
            "--allow-shell",
        ],
    );
    done.expect(0);
    assert_eq!(finished(&done.jsonl())["finalText"], "done");
    assert!(
        !ws_b.join("counter.txt").exists(),
        "the operation ran again on B"
    );
    let shown = env.run("kxen-agent", &["--state-dir", sb, "session", "show", &id]);
    let messages = shown.jsonl()[0]["messages"].as_array().unwrap().clone();
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "tool" && m["content"] == "it ran once on runner A"),
        "{messages:?}"
    );
    env.run("kxen-agent", &["--state-dir", sb, "session", "verify", &id])
        .expect(0);
}

/// The README's CI recipe on a shallow checkout: the branch advanced between two jobs, so the
/// Session's HEAD is not in the second job's depth-1 clone. Import says why and what to run;
/// after `git fetch --unshallow` it succeeds.
#[test]
fn a_shallow_clone_that_lacks_the_sessions_head_says_so() {
    let env = TestEnv::new();
    let origin = env.git_repo("origin", &[("a.txt", "a\n")]);
    let url = format!("file://{}", origin.display());
    // Each job's checkout is a depth-1 clone whose origin names a network repository (the
    // identity rule of a CI checkout); no command here contacts it.
    let network = "https://git.example.invalid/o/r.git";
    git(env.path(), &["clone", "-q", "--depth", "1", &url, "job1"]);
    git(
        &env.path().join("job1"),
        &["remote", "set-url", "origin", network],
    );
    let config = script_config(&env, &[answer("done")]);
    let run = run_new(
        &env,
        &env.path().join("job1"),
        "t",
        &fixer(&env),
        &config,
        &[],
    );
    run.expect(0);
    let id = session_id(&run);
    let bundle = env.path().join("s.bundle.json");
    let exported = ["session", "export", &id, "-o", bundle.to_str().unwrap()];
    env.run("kxen-agent", &exported).expect(0);
    std::fs::write(origin.join("b.txt"), "b\n").unwrap();
    git(&origin, &["add", "-A"]);
    git(&origin, &["commit", "-q", "-m", "advance"]);
    git(env.path(), &["clone", "-q", "--depth", "1", &url, "job2"]);
    git(
        &env.path().join("job2"),
        &["remote", "set-url", "origin", network],
    );
    let target = env.path().join("target");
    let import = |env: &TestEnv| {
        env.run(
            "kxen-agent",
            &[
                "--state-dir",
                target.to_str().unwrap(),
                "session",
                "import",
                bundle.to_str().unwrap(),
                "--workspace",
                env.path().join("job2").to_str().unwrap(),
            ],
        )
    };
    let run = import(&env);
    run.expect(5);
    assert!(
        run.stderr
            .contains("shallow clone: cannot verify that HEAD descends from"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("git fetch --unshallow"),
        "{}",
        run.stderr
    );
    assert!(!target.exists());
    git(
        &env.path().join("job2"),
        &["fetch", "-q", "--unshallow", &url],
    );
    import(&env).expect(0);
}
