//! Helpers for the run tests: agent definitions, script configs and state-dir inspection.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::env::{Run, TestEnv};

/// Writes an agent definition with `output` (a YAML flow mapping) and returns its path.
pub fn agent(env: &TestEnv, name: &str, required: &str, optional: &str, output: &str) -> PathBuf {
    let path = env.path().join(format!("{name}.yaml"));
    let yaml = format!(
        "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata:\n  name: {name}\nspec:\n  \
         objective: Complete the supplied repository task with evidence.\n  instructions:\n    \
         - Inspect the repository first.\n  successCriteria: []\n  capabilities:\n    \
         required: [{required}]\n    optional: [{optional}]\n  execution:\n    maxTurns: 16\n  \
         output: {output}\n"
    );
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The usual agent: reads, searches, edits, writes and executes; text output.
pub fn fixer(env: &TestEnv) -> PathBuf {
    agent(
        env,
        "fixer",
        "read, glob, grep",
        "edit, write, exec",
        "{format: text, requiredFields: []}",
    )
}

/// Writes a config whose `execution` (and `planning`) roles replay `turns`; returns its path.
pub fn script_config(env: &TestEnv, turns: &[Value]) -> PathBuf {
    let dir = env.path().join("model");
    std::fs::create_dir_all(&dir).unwrap();
    let lines: String = turns.iter().map(|t| format!("{t}\n")).collect();
    std::fs::write(dir.join("turns.jsonl"), lines).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[providers.script]\nkind = \"script\"\npath = \"turns.jsonl\"\n\n[roles]\nexecution = \"script\"\nplanning = \"script\"\n",
    )
    .unwrap();
    config
}

/// A model turn calling one tool.
pub fn call(id: &str, tool: &str, arguments: Value) -> Value {
    json!({"text": "", "toolCalls": [{"id": id, "name": tool, "arguments": arguments}],
           "usage": {"inputTokens": 10, "outputTokens": 2}})
}

/// A final model turn.
pub fn answer(text: &str) -> Value {
    json!({"text": text, "usage": {"inputTokens": 20, "outputTokens": 5}})
}

/// Every file under `dir`, recursively (empty if it does not exist).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    if !dir.exists() {
        return Vec::new();
    }
    walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.into_path())
        .collect()
}

/// The `runFinished` event of a run's stdout.
pub fn finished(events: &[Value]) -> &Value {
    events
        .iter()
        .find(|e| e["type"] == "runFinished")
        .expect("a runFinished event")
}

/// `kxen-agent run --workspace W --task T --agent A --config C EXTRA…`: a new Session's first run.
pub fn run_new(
    env: &TestEnv,
    workspace: &Path,
    task: &str,
    agent: &Path,
    config: &Path,
    extra: &[&str],
) -> Run {
    let mut args = vec![
        "run",
        "--workspace",
        workspace.to_str().unwrap(),
        "--task",
        task,
        "--agent",
        agent.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    env.run("kxen-agent", &args)
}

/// Waits until `path` exists (a marker file a test's command writes once it runs).
pub fn wait_for(path: &Path) {
    while !path.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// [`run_new`] in the background, with stdout and stderr piped: for tests that signal or kill
/// the run while it works.
pub fn spawn_new(
    env: &TestEnv,
    workspace: &Path,
    task: &str,
    agent: &Path,
    config: &Path,
    extra: &[&str],
) -> std::process::Child {
    env.cmd("kxen-agent")
        .args([
            "run",
            "--workspace",
            workspace.to_str().unwrap(),
            "--task",
            task,
        ])
        .args(["--agent", agent.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap()])
        .args(extra)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// Writes `model/model.sh` with `script` and a config whose `execution` role runs it as a
/// `command` provider (`sh model.sh`, in `model/`); returns the config's path. `model/` is where
/// the script's marker files land.
pub fn command_config(env: &TestEnv, script: &str) -> PathBuf {
    let dir = env.path().join("model");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("model.sh"), script).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "[providers.cmd]\nkind = \"command\"\nargv = [\"sh\", \"model.sh\"]\n\n[roles]\nexecution = \"cmd\"\n",
    )
    .unwrap();
    config
}

/// Sends SIGINT to a spawned run (as Ctrl-C does).
pub fn interrupt(child: &std::process::Child) {
    let kill = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
}

/// `kxen-agent --resume SESSION --config CONFIG EXTRA…`: continues a Session, as a user does
/// after a crash or a stop.
pub fn resume(env: &TestEnv, session: &str, config: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["--resume", session, "--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    env.run("kxen-agent", &args)
}
