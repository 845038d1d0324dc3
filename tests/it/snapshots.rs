//! Whole-output snapshots (`insta`) of the human views and `--help` texts, made in a
//! [`TestEnv::deterministic`] env: fixed clock, seeded ids and commit dates, so ids and stamps
//! are the same on every run and nothing needs masking but the temp path. Update with
//! `INSTA_UPDATE=always cargo test --all-features --test it -- snapshots` and review the diff
//! (`git diff tests/it/snapshots/`): a new command or flag changes the `--help` snapshots.

/// Shown with a failing snapshot: how to accept an intended change.
const UPDATE: &str = "intended change? INSTA_UPDATE=always cargo test --all-features --test it \
                      -- snapshots, then review git diff tests/it/snapshots/";

macro_rules! snapshot {
    ($name:expr, $value:expr) => {
        insta::with_settings!({description => UPDATE}, {
            insta::assert_snapshot!($name, $value);
        })
    };
}

use serde_json::json;

use crate::env::TestEnv;
use crate::run_support::*;

/// A finished scripted run (a glob, an edit, an answer) in a deterministic env, and its ids.
fn finished_session() -> (TestEnv, String, String) {
    let env = TestEnv::deterministic();
    let repo = env.git_repo("repo", &[("code.txt", "broken\n")]);
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call("c1", "glob", json!({"pattern": "*"})),
            call(
                "c2",
                "edit",
                json!({"path": "code.txt", "oldString": "broken", "newString": "fixed"}),
            ),
            answer("Fixed code.txt."),
        ],
    );
    let run = run_new(&env, &repo, "Fix code.txt", &agent, &config, &[]);
    run.expect(0);
    let fin = finished(&run.jsonl()).clone();
    let session = fin["sessionId"].as_str().unwrap().to_string();
    let run_id = fin["runId"].as_str().unwrap().to_string();
    (env, session, run_id)
}

#[test]
fn two_deterministic_envs_mint_the_same_ids_and_stamps() {
    let (a, sa, ra) = finished_session();
    let (b, sb, rb) = finished_session();
    assert_eq!((&sa, &ra), (&sb, &rb));
    // Everything but what belongs to the process itself: its pid, its liveness mark (random on
    // purpose: it tells a live attempt from a dead one) and its measured wall clock.
    let show = |env: &TestEnv, s: &str| {
        let out = env.run("kxen-agent", &["session", "show", s]);
        out.expect(0);
        let mut value: serde_json::Value =
            serde_json::from_str(&env.normalize(&out.stdout)).unwrap();
        for run in value["runs"].as_array_mut().unwrap() {
            for attempt in run["attempts"].as_array_mut().unwrap() {
                for key in ["pid", "mark", "wallClockMs"] {
                    attempt[key] = json!("[process]");
                }
            }
        }
        value
    };
    assert_eq!(show(&a, &sa), show(&b, &sb));
}

#[test]
fn human_views_of_a_finished_run() {
    let (env, session, run) = finished_session();
    let text = |args: &[&str]| {
        let mut all = vec!["--format", "text"];
        all.extend_from_slice(args);
        let out = env.run("kxen-agent", &all);
        out.expect(0);
        env.normalize(&out.stdout)
    };
    snapshot!("session_list_text", text(&["session", "list"]));
    snapshot!("session_show_text", text(&["session", "show", &session]));
    snapshot!("run_show_text", text(&["run", "show", &session, &run]));
}

#[test]
fn help_texts() {
    let env = TestEnv::deterministic();
    for (bin, args, name) in [
        ("kxen-agent", &["--help"][..], "kxen_agent_help"),
        ("kxen-agent", &["run", "--help"][..], "kxen_agent_run_help"),
        (
            "kxen-agent",
            &["session", "--help"][..],
            "kxen_agent_session_help",
        ),
        (
            "kxen-agent",
            &["config", "init", "--help"][..],
            "kxen_agent_config_init_help",
        ),
        ("dwp", &["--help"][..], "dwp_help"),
    ] {
        let out = env.run(bin, args);
        out.expect(0);
        snapshot!(name, out.stdout);
    }
}
