//! The library's entry points (`kxen::run::entry`) apply the same guards as `kxen-agent run`:
//! a library caller cannot skip the state-dir refusal, and a run started and continued through
//! them ends as the CLI's would (docs/architecture.md).

use std::sync::atomic::AtomicBool;

use kxen::run::RunStatus;
use kxen::run::agent_loop::Ending;
use kxen::run::entry::{self, ContinueRequest, Plain, StartRequest};
use kxen::run::events::{Event, EventSink};
use kxen::state::StateDir;

use crate::env::TestEnv;
use crate::run_support::{answer, fixer, script_config};

/// Collects the run's events.
#[derive(Default)]
struct Events(Vec<Event>);

impl EventSink for Events {
    fn emit(&mut self, event: Event) {
        self.0.push(event);
    }
}

static NEVER: AtomicBool = AtomicBool::new(false);

fn request(env: &TestEnv, repo: &std::path::Path, task: &str) -> StartRequest {
    StartRequest {
        workspace: repo.to_path_buf(),
        task: Some(task.to_string()),
        agent: Some(fixer(env)),
        policy: Default::default(),
        config: Some(script_config(env, &[answer("done"), answer("again")])),
        output_schema: None,
        plan: None,
    }
}

#[test]
fn a_library_caller_cannot_put_the_state_dir_inside_the_workspace() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let state = StateDir::at(repo.join("sub/.kxen-state"));
    let mut events = Events::default();
    let err = entry::start(
        &state,
        request(&env, &repo, "t"),
        &mut events,
        &mut Plain,
        &NEVER,
    )
    .expect_err("refused");
    assert!(
        err.message.contains("is inside the workspace"),
        "{}",
        err.message
    );
    assert!(
        events.0.is_empty(),
        "nothing was emitted: {:?}",
        events.0.len()
    );
    assert!(!repo.join("sub").exists(), "nothing was written");
}

#[test]
fn a_run_started_and_continued_through_the_library_ends_completed() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let state = StateDir::at(env.state_dir());
    let config = script_config(&env, &[answer("done"), answer("again")]);
    let mut events = Events::default();
    let started = entry::start(
        &state,
        StartRequest {
            config: Some(config.clone()),
            ..request(&env, &repo, "first")
        },
        &mut events,
        &mut Plain,
        &NEVER,
    )
    .unwrap();
    let Ending::Finished(result) = &started.ending else {
        panic!("not finished: {:?}", started.ending);
    };
    assert_eq!(result.status, RunStatus::Completed);
    assert!(
        events
            .0
            .iter()
            .any(|e| matches!(e, Event::SessionCreated { .. })),
        "the Session's creation is an event"
    );

    let mut later = Events::default();
    let continued = entry::resume(
        &state,
        ContinueRequest {
            session_id: started.session_id.clone(),
            task: Some("second".into()),
            workspace: Some(repo.clone()),
            rebind: false,
            policy: Default::default(),
            config: Some(config),
            output_schema: None,
            plan: None,
            remote: None,
        },
        &mut later,
        &mut Plain,
        &NEVER,
    )
    .unwrap();
    assert_eq!(continued.session_id, started.session_id);
    assert_ne!(
        continued.run_id, started.run_id,
        "a new run after a finished one"
    );
    assert!(matches!(&continued.ending, Ending::Finished(r) if r.status == RunStatus::Completed));
}
