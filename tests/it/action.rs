//! The GitHub Action's script (`.ci/github-action.sh`, which `action.yml` runs), run locally as
//! GitHub would: INPUT_* variables, and GITHUB_OUTPUT, GITHUB_STEP_SUMMARY and GITHUB_ENV
//! pointed at temp files; kxen-agent is the binary under test, the model the script provider.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::json;

use crate::env::{Run, TestEnv, git};
use crate::run_support::*;
use crate::session_remote::machines;

/// What one job left: its outputs, summary and env file.
struct Job {
    run: Run,
    outputs: BTreeMap<String, String>,
    summary: String,
    env_file: String,
}

/// Runs `github-action.sh run` in `dir` with `inputs`, as one job on a fresh runner whose temp
/// dir is `runner` (the state dir and the report go there).
fn job(env: &TestEnv, dir: &Path, runner: &Path, inputs: &[(&str, &str)]) -> Job {
    std::fs::create_dir_all(runner).unwrap();
    let files = |name: &str| runner.join(name);
    for name in ["output", "summary.md", "env"] {
        std::fs::write(files(name), "").unwrap();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/github-action.sh");
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_kxen-agent"));
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .arg("run")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.home())
        .env("XDG_CONFIG_HOME", env.path().join("xdg-config"))
        .env("KXEN_AGENT_BIN", &bin)
        .env("RUNNER_TEMP", runner)
        .env("GITHUB_WORKSPACE", dir)
        .env("GITHUB_OUTPUT", files("output"))
        .env("GITHUB_STEP_SUMMARY", files("summary.md"))
        .env("GITHUB_ENV", files("env"))
        .current_dir(dir);
    for (name, value) in inputs {
        cmd.env(
            format!("INPUT_{}", name.to_uppercase().replace('-', "_")),
            value,
        );
    }
    let run = Run::from(cmd.output().unwrap());
    let outputs = std::fs::read_to_string(files("output"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Job {
        run,
        outputs,
        summary: std::fs::read_to_string(files("summary.md")).unwrap(),
        env_file: std::fs::read_to_string(files("env")).unwrap(),
    }
}

#[test]
fn action_runs_a_new_session_and_writes_outputs_summary_and_report() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("README", "x\n")]);
    let config = script_config(
        &env,
        &[
            call("c1", "write", json!({"path": "a.txt", "content": "a\n"})),
            answer("written"),
        ],
    );
    let agent = fixer(&env);
    let runner = env.path().join("runner");
    let done = job(
        &env,
        &repo,
        &runner,
        &[
            ("task", "write a.txt"),
            ("agent", agent.to_str().unwrap()),
            ("config", config.to_str().unwrap()),
            ("allow-shell", "false"),
        ],
    );
    done.run.expect(0);
    let ses = done.outputs["session-id"].clone();
    assert!(ses.starts_with("ses_"), "{:?}", done.outputs);
    assert_eq!(done.outputs["status"], "completed");
    assert_eq!(done.outputs["exit-code"], "0");
    let page = std::fs::read_to_string(&done.outputs["report-path"]).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(
        page.contains("<span class=\"add\">+a</span>"),
        "the write's diff"
    );
    assert!(
        done.summary
            .contains(&format!("### kxen-agent Session `{ses}`")),
        "{}",
        done.summary
    );
    assert!(
        done.summary.contains("**status:** `completed`"),
        "{}",
        done.summary
    );
    assert!(
        done.summary.contains("**tool calls:** 1 (1 ok)"),
        "{}",
        done.summary
    );
    assert!(
        done.summary.contains("**exit code:** 0"),
        "{}",
        done.summary
    );
    assert_eq!(done.env_file, format!("KXEN_SESSION_ID={ses}\n"));
    // The run's own events are the step's log.
    assert!(done.run.stdout.contains("\"type\":\"runFinished\""));
    assert!(runner.join("kxen-state/sessions").join(&ses).is_dir());

    // Misuse is refused before anything runs.
    let both = job(
        &env,
        &repo,
        &env.path().join("r2"),
        &[("task", "a"), ("task-file", "b")],
    );
    both.run.expect(2);
    assert!(both.run.stderr.contains("not both"), "{}", both.run.stderr);
    let shell = job(
        &env,
        &repo,
        &env.path().join("r3"),
        &[("task", "a"), ("allow-shell", "yes")],
    );
    shell.run.expect(2);
    // A failure before any Session exists still gives outputs and a summary.
    let refused = job(
        &env,
        &repo,
        &env.path().join("r4"),
        &[
            ("task", "a"),
            ("agent", "/no/such/agent.yaml"),
            ("config", config.to_str().unwrap()),
        ],
    );
    assert_ne!(refused.run.code, 0);
    assert_eq!(refused.outputs["status"], "error");
    assert_eq!(refused.outputs["session-id"], "");
    assert_eq!(refused.outputs["exit-code"], refused.run.code.to_string());
    assert!(
        refused.summary.contains("no Session"),
        "{}",
        refused.summary
    );
}

/// Job 1 stops for approval and pushes the Session; a person approves; job 2, on a fresh runner,
/// resumes it through the remote (under the remote lease) and completes it.
#[test]
fn action_stops_for_approval_then_a_second_job_resumes_through_the_remote() {
    let m = machines();
    let env = &m.env;
    let policy = env.path().join("policy.json");
    std::fs::write(
        &policy,
        r#"{"allowShell": true, "mcpTools": {"exec": "ask"}}"#,
    )
    .unwrap();
    let config = script_config(
        env,
        &[
            call("c1", "exec", json!({"command": "echo hi"})),
            answer("said hi"),
        ],
    );
    let (config, policy) = (config.to_str().unwrap(), policy.to_str().unwrap());
    let common = [("config", config), ("policy", policy), ("remote", "origin")];
    let mut first_inputs = common.to_vec();
    first_inputs.extend([("task", "say hi"), ("agent", m.agent.to_str().unwrap())]);
    let runner_a = env.path().join("runner-a");
    let first = job(env, &m.ws[0], &runner_a, &first_inputs);
    first.run.expect(7);
    let ses = first.outputs["session-id"].clone();
    assert_eq!(first.outputs["status"], "inputRequired");
    assert_eq!(first.outputs["exit-code"], "7");
    assert!(Path::new(&first.outputs["report-path"]).is_file());
    assert!(
        first.summary.contains("kxen-agent run approve"),
        "{}",
        first.summary
    );
    // The Session is on the remote.
    let refs = git(&m.ws[0], &["ls-remote", "origin", "refs/kxen/*"]);
    assert!(
        refs.contains(&format!("refs/kxen/sessions/{ses}")),
        "{refs}"
    );

    // The approval, by a person, on the first runner's copy; pushed for the next job.
    let state_a = runner_a.join("kxen-state");
    let kxen = |args: &[&str]| {
        let mut cmd = env.cmd("kxen-agent");
        cmd.arg("--state-dir")
            .arg(&state_a)
            .args(args)
            .current_dir(&m.ws[0]);
        Run::from(cmd.output().unwrap())
    };
    let shown = kxen(&["session", "show", &ses]).jsonl().remove(0);
    let run_id = shown["runs"][0]["id"].as_str().unwrap().to_string();
    let op = kxen(&["run", "show", &ses, &run_id]).jsonl()[0]["pendingApprovals"][0]["opId"]
        .as_str()
        .unwrap()
        .to_string();
    // The exact command the summary names.
    assert!(first.summary.contains(&format!(
        "kxen-agent run approve {ses} {run_id} {op} --arguments-hash"
    )));
    kxen(&["run", "approve", &ses, &run_id, &op]).expect(0);
    kxen(&["session", "push", &ses, "--remote", "origin"]).expect(0);

    // Job 2: a fresh runner and clone; no task: the unfinished run continues.
    let second = job(env, &m.ws[1], &env.path().join("runner-b"), &common);
    second.run.expect(0);
    assert!(
        second
            .run
            .stderr
            .contains(&format!("resuming {ses} through remote origin")),
        "{}",
        second.run.stderr
    );
    assert_eq!(second.outputs["session-id"], ses);
    assert_eq!(second.outputs["status"], "completed");
    assert!(
        second.summary.contains("**status:** `completed`"),
        "{}",
        second.summary
    );
    assert!(
        !second.summary.contains("run approve"),
        "{}",
        second.summary
    );
    let page = std::fs::read_to_string(&second.outputs["report-path"]).unwrap();
    assert!(
        page.contains("resume</span> attempt 2"),
        "the resumed attempt"
    );
    // The lease was released and the result pushed.
    let refs = git(&m.ws[1], &["ls-remote", "origin", "refs/kxen/*"]);
    assert!(!refs.contains("refs/kxen/leases/"), "{refs}");
}

#[test]
fn action_install_step_installs_from_the_actions_checkout() {
    let env = TestEnv::new();
    // A `cargo` that records its arguments: the step's command line, not a 10-minute build.
    let bin = env.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = env.path().join("cargo.log");
    std::fs::write(
        bin.join("cargo"),
        format!("#!/bin/sh\necho \"$@\" > {}\n", log.display()),
    )
    .unwrap();
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(bin.join("cargo"))
        .status()
        .unwrap();
    let action = Path::new(env!("CARGO_MANIFEST_DIR"));
    let run = Run::from(
        Command::new("bash")
            .arg(action.join(".ci/github-action.sh"))
            .arg("install")
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .env("GITHUB_ACTION_PATH", action)
            .output()
            .unwrap(),
    );
    run.expect(0);
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        format!(
            "install --locked --path {} --bin kxen-agent\n",
            action.display()
        )
    );
    // action.yml runs exactly this script for both steps, and declares the inputs and outputs.
    let yml = std::fs::read_to_string(action.join("action.yml")).unwrap();
    assert!(yml.contains("run: bash \"$GITHUB_ACTION_PATH/.ci/github-action.sh\" install"));
    assert!(yml.contains("run: bash \"$GITHUB_ACTION_PATH/.ci/github-action.sh\" run"));
    for name in [
        "task",
        "task-file",
        "agent",
        "policy",
        "config",
        "allow-shell",
        "remote",
    ] {
        assert!(yml.contains(&format!("\n  {name}:\n")), "input {name}");
    }
    for name in ["session-id", "status", "exit-code"] {
        assert!(yml.contains(&format!("\n  {name}:\n")), "output {name}");
    }
    assert!(yml.contains("uses: actions/upload-artifact@v4"));
}
