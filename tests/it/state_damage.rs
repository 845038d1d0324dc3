//! State files that are damaged in ways a parse alone does not catch: an unknown
//! `formatVersion`, a directory where `lease.lock` should be, a file where a run directory
//! should be. Each is corrupt state (exit 10, naming the path), never an internal error or a
//! silent skip.

use std::path::PathBuf;

use crate::env::{Run, TestEnv};
use crate::run_support::*;

/// A completed Session: its id, its run's id, its directory, its repository and config.
fn session(env: &TestEnv) -> (String, String, PathBuf, PathBuf, PathBuf) {
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = script_config(env, &[answer("done"), answer("again")]);
    let run = run_new(env, &repo, "t", &fixer(env), &config, &[]);
    run.expect(0);
    let fin = finished(&run.jsonl()).clone();
    let ses = fin["sessionId"].as_str().unwrap().to_string();
    let run_id = fin["runId"].as_str().unwrap().to_string();
    let dir = env.state_dir().join("sessions").join(&ses);
    (ses, run_id, dir, repo, config)
}

#[track_caller]
fn corrupt(run: &Run, names: &str) {
    run.expect(10);
    assert!(run.stderr.contains(names), "{}", run.stderr);
}

fn resume(env: &TestEnv, ses: &str, repo: &std::path::Path, config: &std::path::Path) -> Run {
    env.run(
        "kxen-agent",
        &[
            "--resume",
            ses,
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "more",
            "--config",
            config.to_str().unwrap(),
        ],
    )
}

#[test]
fn an_unknown_format_version_is_refused_naming_the_file() {
    let env = TestEnv::new();
    let (ses, run_id, dir, repo, config) = session(&env);
    let session_json = dir.join("session.json");
    let original = std::fs::read_to_string(&session_json).unwrap();
    std::fs::write(
        &session_json,
        original.replace("\"formatVersion\": 1", "\"formatVersion\": 99"),
    )
    .unwrap();
    let show = env.run("kxen-agent", &["session", "show", &ses]);
    corrupt(
        &show,
        "session.json: formatVersion 99 is not one this kxen-agent reads",
    );
    corrupt(&resume(&env, &ses, &repo, &config), "formatVersion 99");
    std::fs::write(&session_json, original).unwrap();

    let run_json = dir.join("runs").join(&run_id).join("run.json");
    let original = std::fs::read_to_string(&run_json).unwrap();
    std::fs::write(
        &run_json,
        original.replace("\"formatVersion\": 1", "\"formatVersion\": \"1\""),
    )
    .unwrap();
    let show = env.run("kxen-agent", &["run", "show", &ses, &run_id]);
    corrupt(&show, "run.json: formatVersion \"1\" is not one");
    corrupt(&resume(&env, &ses, &repo, &config), "run.json");
}

#[test]
fn a_directory_where_the_lease_lock_should_be_is_corrupt_state() {
    let env = TestEnv::new();
    let (ses, _, dir, repo, config) = session(&env);
    let lock = dir.join("lease.lock");
    std::fs::remove_file(&lock).unwrap();
    std::fs::create_dir(&lock).unwrap();
    let hint = "lease.lock is a directory where a lock file should be";
    corrupt(&resume(&env, &ses, &repo, &config), hint);
    let out = env.path().join("s.bundle.json");
    let export = env.run(
        "kxen-agent",
        &["session", "export", &ses, "-o", out.to_str().unwrap()],
    );
    corrupt(&export, hint);
    assert!(!out.exists());
}

#[test]
fn a_file_where_a_run_directory_should_be_is_corrupt_state() {
    let env = TestEnv::new();
    let (ses, run_id, dir, repo, config) = session(&env);
    let run_dir = dir.join("runs").join(&run_id);
    std::fs::remove_dir_all(&run_dir).unwrap();
    std::fs::write(&run_dir, "x").unwrap();
    let names = "should be a run directory but is not a directory";
    corrupt(
        &env.run("kxen-agent", &["run", "show", &ses, &run_id]),
        names,
    );
    corrupt(&env.run("kxen-agent", &["session", "show", &ses]), names);
    // A resume must not start a new run as if the lost one never existed.
    corrupt(&resume(&env, &ses, &repo, &config), names);
    assert!(std::fs::metadata(&run_dir).unwrap().is_file());
    assert_eq!(std::fs::read_dir(dir.join("runs")).unwrap().count(), 1);
}

/// The names in `dir`, sorted.
fn names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// An export killed while writing leaves its temp beside `--output` (nothing can remove it at
/// SIGKILL); the next export to that path removes it, and an export in progress (its temp
/// locked) is never disturbed.
#[cfg(feature = "failpoints")]
#[test]
fn a_killed_exports_temp_is_removed_by_the_next_export() {
    let env = TestEnv::new();
    let (ses, ..) = session(&env);
    let out_dir = env.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("s.bundle.json");
    let export = |env: &TestEnv, failpoint: Option<&str>| {
        let mut cmd = env.cmd("kxen-agent");
        cmd.args(["session", "export", &ses, "-o", out.to_str().unwrap()]);
        if let Some(point) = failpoint {
            cmd.env("KXEN_FAILPOINT", point);
        }
        cmd.output().unwrap().status.code()
    };
    assert_eq!(
        export(&env, Some("export.after-temp-created")),
        None,
        "killed"
    );
    let left = names(&out_dir);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with(".s.bundle.json.kxen-tmp-"), "{left:?}");
    // A temp some live export holds locked stays.
    let busy = out_dir.join(".s.bundle.json.kxen-tmp-busy");
    let held = std::fs::File::create(&busy).unwrap();
    held.lock().unwrap();
    assert_eq!(export(&env, None), Some(0));
    assert_eq!(
        names(&out_dir),
        vec![
            ".s.bundle.json.kxen-tmp-busy".to_string(),
            "s.bundle.json".to_string()
        ]
    );
    drop(held);
    assert_eq!(export(&env, None), Some(0));
    assert_eq!(names(&out_dir), vec!["s.bundle.json".to_string()]);
}

/// A state dir inside the workspace would let the agent's own tools read (and edit) its journal
/// and messages: a new Session there is refused before anything is written (exit 2), and a
/// resume of a Session already kept there warns.
#[test]
fn a_state_dir_inside_the_workspace_is_refused_for_a_new_session() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = script_config(&env, &[answer("done"), answer("again")]);
    let inside = repo.join("sub/.kxen-state");
    let run = run_new(
        &env,
        &repo,
        "t",
        &fixer(&env),
        &config,
        &["--state-dir", inside.to_str().unwrap()],
    );
    run.expect(2);
    assert!(
        run.stderr.contains("is inside the workspace"),
        "{}",
        run.stderr
    );
    assert!(!repo.join("sub").exists(), "nothing was written");

    // A Session whose state dir was moved into its workspace later: resume warns.
    let (ses, _, _, repo, config) = session(&env);
    let moved = repo.join(".kxen-state");
    std::fs::rename(env.state_dir(), &moved).unwrap();
    let run = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            moved.to_str().unwrap(),
            "--resume",
            &ses,
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "more",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    run.expect(0);
    let warned = run.jsonl().into_iter().any(|e| {
        e["type"] == "warning"
            && e["message"]
                .as_str()
                .unwrap()
                .contains("inside the workspace")
    });
    assert!(warned, "{}", run.stdout);
}
