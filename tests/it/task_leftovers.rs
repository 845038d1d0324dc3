//! A `task` child killed while being created leaves `sessions/.staging-<child>/` (with the
//! prompt the parent wrote); the next command that takes the parent's lease removes it.

use crate::env::TestEnv;
use crate::task::{delegator, session_list, two_children_script};

/// The dot-named entries of the state dir's `sessions/`.
fn stagings(env: &TestEnv) -> Vec<String> {
    std::fs::read_dir(env.state_dir().join("sessions"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".staging-"))
        .collect()
}

#[test]
fn a_child_killed_while_being_created_leaves_no_staging_once_the_parent_is_taken_again() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let agent = delegator(&env, 8);
    let config = two_children_script(&env);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[tools]\nparallel = 1\n");
    std::fs::write(&config, text).unwrap();
    // The first pass of the point is the parent's own creation; the second, the first child's.
    let out = env
        .cmd("kxen-agent")
        .args([
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "Check both",
        ])
        .args([
            "--agent",
            agent.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ])
        .arg("--allow-shell")
        .env("KXEN_FAILPOINT", "session.create.before-rename")
        .env("KXEN_FAILPOINT_SKIP", "1")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        None,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let left = stagings(&env);
    assert_eq!(left.len(), 1, "{left:?}");
    let staged = env.state_dir().join("sessions").join(&left[0]);
    let messages = std::fs::read_to_string(staged.join("messages.jsonl")).unwrap();
    assert!(messages.contains("Check a, then say a-ok"), "{messages}");

    // Reading the parent takes no lease and removes nothing.
    let parent = session_list(&env)
        .into_iter()
        .find(|s| s["parentId"].is_null())
        .unwrap();
    let id = parent["id"].as_str().unwrap().to_string();
    env.run("kxen-agent", &["session", "show", &id]).expect(0);
    assert_eq!(stagings(&env), left);

    // The resume owns the parent: the leftover goes, whatever the run then needs.
    let resumed = crate::run_support::resume(&env, &id, &config, &["--allow-shell"]);
    assert!(
        matches!(resumed.code, 0 | 7),
        "{}\n{}",
        resumed.stdout,
        resumed.stderr
    );
    assert!(stagings(&env).is_empty(), "{:?}", stagings(&env));
    assert!(!staged.exists());
}
