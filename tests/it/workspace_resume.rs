//! Workspace verification on `--resume` (docs/spec.md §7) with real repositories: HEAD may
//! advance but not rewind or switch branch; a moved workspace needs `--rebind-workspace`, which
//! only accepts the same repository and records a `workspaceRebound` history entry.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::env::{TestEnv, git};
use crate::run_support::{answer, call, fixer, run_new, script_config};

struct Setup {
    env: TestEnv,
    config: PathBuf,
    session: String,
    repo: PathBuf,
}

/// A remote-less repository and a completed Session in it; the script has answers for later runs.
fn setup() -> Setup {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "second"]);
    let agent = fixer(&env);
    let mut turns = vec![
        call("call_1", "glob", json!({"pattern": "*"})),
        answer("first"),
    ];
    turns.extend((0..6).map(|i| answer(&format!("again {i}"))));
    let config = script_config(&env, &turns);
    let run = run_new(&env, &repo, "look", &agent, &config, &[]);
    run.expect(0);
    let session = run
        .jsonl()
        .iter()
        .find(|e| e["type"] == "sessionCreated")
        .unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    Setup {
        env,
        config,
        session,
        repo,
    }
}

impl Setup {
    /// `--resume SES --task …` with optional `--workspace PATH [--rebind-workspace]`.
    fn resume(&self, workspace: Option<&Path>, rebind: bool) -> crate::env::Run {
        let mut args = vec![
            "--resume".to_string(),
            self.session.clone(),
            "--task".into(),
            "next".into(),
            "--config".into(),
            self.config.to_str().unwrap().into(),
        ];
        if let Some(w) = workspace {
            args.push("--workspace".into());
            args.push(w.to_str().unwrap().into());
        }
        if rebind {
            args.push("--rebind-workspace".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.env.run("kxen-agent", &args)
    }

    fn session_json(&self) -> Value {
        let path = self
            .env
            .state_dir()
            .join("sessions")
            .join(&self.session)
            .join("session.json");
        serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
    }
}

#[test]
fn head_may_advance_but_a_branch_switch_or_rewind_is_refused() {
    let s = setup();
    let recorded = git(&s.repo, &["rev-parse", "HEAD"]);
    git(
        &s.repo,
        &["commit", "-q", "--allow-empty", "-m", "agent work"],
    );
    s.resume(None, false).expect(0);
    assert_eq!(s.session_json()["workspace"]["head"], recorded.as_str());

    git(&s.repo, &["switch", "-q", "-c", "elsewhere"]);
    let run = s.resume(None, false);
    run.expect(5);
    assert!(
        run.stderr.contains("`elsewhere`") && run.stderr.contains("`main`"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("git switch main"), "{}", run.stderr);
    assert_eq!(run.jsonl().last().unwrap()["kind"], "conflict");

    // Rewound past the recorded HEAD, then diverged from it.
    git(&s.repo, &["switch", "-q", "main"]);
    git(&s.repo, &["reset", "-q", "--hard", "HEAD~2"]);
    let rewound = git(&s.repo, &["rev-parse", "HEAD"]);
    let run = s.resume(None, false);
    run.expect(5);
    assert!(
        run.stderr.contains(&recorded) && run.stderr.contains(&rewound),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("rewound or diverged"), "{}", run.stderr);
    git(
        &s.repo,
        &["commit", "-q", "--allow-empty", "-m", "diverged"],
    );
    let diverged = git(&s.repo, &["rev-parse", "HEAD"]);
    let run = s.resume(None, false);
    run.expect(5);
    assert!(run.stderr.contains(&diverged), "{}", run.stderr);

    // A leftover lock is named, and kept.
    git(&s.repo, &["reset", "-q", "--hard", &recorded]);
    std::fs::write(s.repo.join(".git/index.lock"), "").unwrap();
    let run = s.resume(None, false);
    run.expect(5);
    assert!(run.stderr.contains(".git/index.lock"), "{}", run.stderr);
    assert!(s.repo.join(".git/index.lock").exists());
    std::fs::remove_file(s.repo.join(".git/index.lock")).unwrap();
    s.resume(None, false).expect(0);
}

#[test]
fn a_moved_remote_less_repository_can_be_rebound_and_another_cannot() {
    let s = setup();
    let clone = s.env.path().join("moved");
    git(
        s.env.path(),
        &[
            "clone",
            "-q",
            s.repo.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    let old_root = s.repo.canonicalize().unwrap();
    let new_root = clone.canonicalize().unwrap();

    // A plain path change is refused.
    let run = s.resume(Some(&clone), false);
    run.expect(5);
    assert!(run.stderr.contains("--rebind-workspace"), "{}", run.stderr);

    // Another repository is refused even with the flag, and nothing changes.
    let other = s.env.git_repo("other", &[("b.txt", "b\n")]);
    let before = s.session_json();
    let run = s.resume(Some(&other), true);
    run.expect(5);
    assert!(
        run.stderr.contains("not the Session's repository"),
        "{}",
        run.stderr
    );
    assert_eq!(s.session_json(), before);

    // The clone is the same repository (same root commit): rebound, with a history entry.
    s.resume(Some(&clone), true).expect(0);
    let meta = s.session_json();
    assert_eq!(meta["workspace"]["root"], new_root.to_str().unwrap());
    assert_eq!(
        meta["workspace"]["identityHash"],
        before["workspace"]["identityHash"]
    );
    let history = meta["history"].as_array().unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(history[0]["type"], "workspaceRebound");
    assert_eq!(history[0]["from"], old_root.to_str().unwrap());
    assert_eq!(history[0]["to"], new_root.to_str().unwrap());
    assert!(history[0]["at"].as_str().unwrap().ends_with('Z'));

    // From now on the new root is the workspace; the old one needs a rebind back.
    s.resume(None, false).expect(0);
    s.resume(Some(&s.repo), false).expect(5);
}

/// A rebind is written only once the whole resume checked out: a resume refused later (here for
/// a config file that does not parse) leaves session.json byte for byte as it was.
#[test]
fn a_rebind_refused_for_a_later_reason_changes_nothing() {
    let s = setup();
    let clone = s.env.path().join("moved");
    git(
        s.env.path(),
        &[
            "clone",
            "-q",
            s.repo.to_str().unwrap(),
            clone.to_str().unwrap(),
        ],
    );
    let session_json = s
        .env
        .state_dir()
        .join("sessions")
        .join(&s.session)
        .join("session.json");
    let before = std::fs::read_to_string(&session_json).unwrap();
    let bad_config = s.env.path().join("bad.toml");
    std::fs::write(&bad_config, "[providers.x\n").unwrap();
    let run = s.env.run(
        "kxen-agent",
        &[
            "--resume",
            &s.session,
            "--task",
            "next",
            "--config",
            bad_config.to_str().unwrap(),
            "--workspace",
            clone.to_str().unwrap(),
            "--rebind-workspace",
        ],
    );
    run.expect(4);
    assert_eq!(std::fs::read_to_string(&session_json).unwrap(), before);
    // With a good config the same rebind goes through.
    s.resume(Some(&clone), true).expect(0);
    assert_ne!(std::fs::read_to_string(&session_json).unwrap(), before);
}

#[test]
fn a_vanished_workspace_is_not_found_naming_the_stored_path() {
    let s = setup();
    let root = s.repo.canonicalize().unwrap();
    std::fs::remove_dir_all(&s.repo).unwrap();
    let run = s.resume(None, false);
    run.expect(3);
    assert!(
        run.stderr.contains(root.to_str().unwrap()),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("--rebind-workspace"), "{}", run.stderr);
}

#[test]
fn a_fork_resumes_in_its_worktree() {
    let s = setup();
    let shown = s.env.run("kxen-agent", &["session", "show", &s.session]);
    let last = shown.jsonl()[0]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let run = s.env.run(
        "kxen-agent",
        &[
            "session",
            "fork",
            &s.session,
            "--at",
            &last,
            "--worktree",
            "w1",
        ],
    );
    run.expect(0);
    let fork = run.jsonl()[0]["sessionId"].as_str().unwrap().to_string();
    let run = s.env.run(
        "kxen-agent",
        &[
            "--resume",
            &fork,
            "--task",
            "continue",
            "--config",
            s.config.to_str().unwrap(),
        ],
    );
    run.expect(0);
    let created = run.jsonl();
    assert!(
        created.iter().any(|e| e["type"] == "runFinished"),
        "{created:?}"
    );
    // The parent's Session is untouched by the fork's run; the fork's run is its first.
    let fork_show = s
        .env
        .run("kxen-agent", &["session", "show", &fork])
        .jsonl()
        .remove(0);
    assert_eq!(fork_show["runs"].as_array().unwrap().len(), 1);
    assert_eq!(fork_show["workspace"]["branch"], "kxen/w1");
    s.env
        .run("kxen-agent", &["session", "verify", &fork])
        .expect(0);
}

/// A Session created on `REPO/sub` and bound to a clone stays confined to `sub/` of the clone:
/// after `--rebind-workspace CLONE` (and after `session import … --workspace CLONE`) its root is
/// `CLONE/sub`, never the clone's root; a clone without `sub/` is refused.
#[test]
fn a_subdirectory_session_keeps_its_subdirectory_on_rebind_and_import() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("top.txt", "top\n"), ("sub/a.txt", "a\n")]);
    let agent = fixer(&env);
    let mut turns = vec![
        call("call_1", "glob", json!({"pattern": "*"})),
        answer("first"),
    ];
    turns.extend((0..4).map(|i| answer(&format!("again {i}"))));
    let config = script_config(&env, &turns);
    let run = run_new(&env, &repo.join("sub"), "look", &agent, &config, &[]);
    run.expect(0);
    let session = run
        .jsonl()
        .iter()
        .find(|e| e["type"] == "sessionCreated")
        .unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let clone = |name: &str| {
        let dir = env.path().join(name);
        git(
            env.path(),
            &["clone", "-q", repo.to_str().unwrap(), dir.to_str().unwrap()],
        );
        dir
    };
    let resume = |state: &Path, workspace: &Path| {
        env.run(
            "kxen-agent",
            &[
                "--state-dir",
                state.to_str().unwrap(),
                "--resume",
                &session,
                "--task",
                "next",
                "--config",
                config.to_str().unwrap(),
                "--workspace",
                workspace.to_str().unwrap(),
                "--rebind-workspace",
            ],
        )
    };
    let root_of = |state: &Path| -> String {
        let path = state.join("sessions").join(&session).join("session.json");
        let meta: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
        meta["workspace"]["root"].as_str().unwrap().to_string()
    };
    let state_a = env.state_dir();

    // Export before any rebind, for the import below.
    let bundle = env.path().join("s.bundle");
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

    // A clone without the subdirectory: refused (exit 3), nothing rebound.
    let bare = clone("no-sub");
    std::fs::remove_dir_all(bare.join("sub")).unwrap();
    let run = resume(&state_a, &bare);
    run.expect(3);
    assert!(run.stderr.contains("sub"), "{}", run.stderr);
    assert_eq!(
        root_of(&state_a),
        repo.join("sub").canonicalize().unwrap().to_str().unwrap()
    );

    // Rebinding onto the clone's root binds the clone's `sub/`.
    let moved = clone("moved");
    resume(&state_a, &moved).expect(0);
    let want = moved.join("sub").canonicalize().unwrap();
    assert_eq!(root_of(&state_a), want.to_str().unwrap());

    // Importing onto another clone's root binds its `sub/` too.
    let other = clone("other");
    let state_b = env.path().join("state-b");
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            state_b.to_str().unwrap(),
            "session",
            "import",
            bundle.to_str().unwrap(),
            "--workspace",
            other.to_str().unwrap(),
        ],
    )
    .expect(0);
    let want = other.join("sub").canonicalize().unwrap();
    assert_eq!(root_of(&state_b), want.to_str().unwrap());
    // And its next run sees `sub/` only.
    let run = resume(&state_b, &other);
    run.expect(0);
    assert_eq!(root_of(&state_b), want.to_str().unwrap());
}
