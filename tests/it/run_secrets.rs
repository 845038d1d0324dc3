//! Credentials in kxen-agent's own environment: no `exec` child can read them from any
//! `/proc/*/environ` (tests run as root here, so non-dumpable alone would not do), a `command`
//! provider still gets them, and none reaches state, events, stderr or a bundle through a
//! provider failure.

use serde_json::json;

use crate::env::{Run, TestEnv};
use crate::run_support::*;

const OPENAI_CANARY: &str = "sk-canary-openai-1f2e3d4c5b";
const TOKEN_CANARY: &str = "ghp_canarytoken9a8b7c6d5e";
const CUSTOM_CANARY: &str = "custom-bridge-canary-42x9";
/// Not a credential: the control that shows the probe can see environments at all.
const PLAIN_CANARY: &str = "plain-visible-canary-77q";

/// Every file under the state dir, stdout and stderr: none may hold `needle`.
#[track_caller]
fn assert_nowhere(env: &TestEnv, run: &Run, needle: &str) {
    assert!(!run.stdout.contains(needle), "stdout: {}", run.stdout);
    assert!(!run.stderr.contains(needle), "stderr: {}", run.stderr);
    for file in files_under(&env.state_dir()) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(needle),
            "{needle} leaked into {}",
            file.display()
        );
    }
}

/// Exports `session` to a bundle file and returns its text.
fn export(env: &TestEnv, session: &str) -> String {
    let out = env.path().join(format!("{session}.bundle"));
    env.run(
        "kxen-agent",
        &[
            "session",
            "export",
            session,
            "--output",
            out.to_str().unwrap(),
        ],
    )
    .expect(0);
    std::fs::read_to_string(out).unwrap()
}

fn session_id(run: &Run) -> String {
    run.jsonl()
        .iter()
        .find(|e| e["type"] == "sessionCreated")
        .expect("sessionCreated")["sessionId"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn exec_finds_no_credential_in_any_proc_environ_or_cmdline() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    // The patterns live outside the workspace and never appear in a command line (grep's own
    // cmdline would match them otherwise).
    let secrets = env.path().join("secrets.txt");
    std::fs::write(
        &secrets,
        format!("{OPENAI_CANARY}\n{TOKEN_CANARY}\n{CUSTOM_CANARY}\n"),
    )
    .unwrap();
    let plain = env.path().join("plain.txt");
    std::fs::write(&plain, format!("{PLAIN_CANARY}\n")).unwrap();
    let probe = format!(
        "for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do \
           if tr '\\0' '\\n' < $f 2>/dev/null | grep -qF -f {s}; then echo $f; fi; \
         done > secret-hits.txt; \
         for f in /proc/[0-9]*/environ; do \
           if tr '\\0' '\\n' < $f 2>/dev/null | grep -qF -f {p}; then echo $f; fi; \
         done > plain-hits.txt; \
         echo PPID=$PPID > parent.txt",
        s = secrets.display(),
        p = plain.display()
    );
    let dir = env.path().join("model");
    std::fs::create_dir_all(&dir).unwrap();
    let turns = [
        call("c1", "exec", json!({"command": probe})),
        answer("probed"),
    ];
    let lines: String = turns.iter().map(|t| format!("{t}\n")).collect();
    std::fs::write(dir.join("turns.jsonl"), lines).unwrap();
    let config = dir.join("config.toml");
    // An openai provider that is never called still registers its `api_key_env`.
    std::fs::write(
        &config,
        "[providers.script]\nkind = \"script\"\npath = \"turns.jsonl\"\n\n\
         [providers.hosted]\nkind = \"openai\"\nbase_url = \"https://api.example.com/v1\"\n\
         model = \"m\"\napi_key_env = \"KXEN_BRIDGE_LLM\"\n\n\
         [roles]\nexecution = \"script\"\nplanning = \"hosted\"\n",
    )
    .unwrap();
    let agent = fixer(&env);
    // Unfenced: this test is about the runtime's own environment block, which a fenced command
    // cannot read at all (tests/it/fence.rs `a_canary_secret_never_reaches_the_command_through_proc`).
    let off = env.path().join("off.json");
    std::fs::write(&off, r#"{"sandbox": "off"}"#).unwrap();
    let out = env
        .cmd("kxen-agent")
        .env("OPENAI_API_KEY", OPENAI_CANARY)
        .env("GITHUB_TOKEN", TOKEN_CANARY)
        .env("KXEN_BRIDGE_LLM", CUSTOM_CANARY)
        .env("KXEN_PLAIN_SETTING", PLAIN_CANARY)
        .args([
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "probe",
        ])
        .args(["--agent", agent.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap(), "--allow-shell"])
        .args(["--policy", off.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |name: &str| std::fs::read_to_string(repo.join(name)).unwrap();
    let parent = read("parent.txt");
    let ppid = parent.trim().strip_prefix("PPID=").unwrap();
    // The probe works: it sees the plain variable in the shell's and in kxen-agent's environ.
    let plain_hits = read("plain-hits.txt");
    assert!(
        plain_hits.contains(&format!("/proc/{ppid}/environ")),
        "the probe could not read kxen-agent's environ: {plain_hits}"
    );
    assert_eq!(read("secret-hits.txt"), "", "a credential is readable");
}

#[test]
fn a_command_provider_still_gets_the_keys() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let config = command_config(
        &env,
        "printf '%s' \"$OPENAI_API_KEY\" > key.txt\ncat >/dev/null\necho '{\"text\":\"done\"}'\n",
    );
    let agent = fixer(&env);
    let out = env
        .cmd("kxen-agent")
        .env("OPENAI_API_KEY", OPENAI_CANARY)
        .args(["run", "--workspace", repo.to_str().unwrap(), "--task", "hi"])
        .args(["--agent", agent.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = std::fs::read_to_string(env.path().join("model/key.txt")).unwrap();
    assert_eq!(key, OPENAI_CANARY);
}

/// A bridge that traces its HTTP call to stderr and fails: the key straddles the 500-character
/// excerpt, another credential sits inside it, and a URL carries user info.
#[test]
fn a_failing_command_providers_stderr_is_redacted_everywhere() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let padding = "x".repeat(480);
    let script = format!(
        "cat >/dev/null\n\
         echo \"> GET https://bob:hunter2pass@proxy.example/v1 token=$GITHUB_TOKEN\" >&2\n\
         printf '%s' '{padding}' >&2\n\
         echo \"Authorization: Bearer $OPENAI_API_KEY\" >&2\n\
         exit 3\n"
    );
    let config = command_config(&env, &script);
    let agent = fixer(&env);
    let out = env
        .cmd("kxen-agent")
        .env("OPENAI_API_KEY", OPENAI_CANARY)
        .env("GITHUB_TOKEN", TOKEN_CANARY)
        .args(["run", "--workspace", repo.to_str().unwrap(), "--task", "hi"])
        .args(["--agent", agent.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    run.expect(9);
    assert!(run.stdout.contains("exit code 3"), "{}", run.stdout);
    assert!(run.stdout.contains("[redacted]"), "{}", run.stdout);
    let session = session_id(&run);
    let bundle = export(&env, &session);
    // Neither the whole key nor the head the cut would have left.
    for needle in [&OPENAI_CANARY[..12], TOKEN_CANARY, "hunter2pass"] {
        assert_nowhere(&env, &run, needle);
        assert!(!bundle.contains(needle), "{needle} in the bundle");
    }
}

#[test]
fn a_base_url_with_user_info_is_not_stored_on_failure() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let config = env.path().join("config.toml");
    // Port 9 on loopback: nothing listens, the connection is refused at once.
    std::fs::write(
        &config,
        "[providers.hosted]\nkind = \"openai\"\n\
         base_url = \"http://alice:s3cr3t-in-url@127.0.0.1:9/v1\"\nmodel = \"m\"\n\
         [roles]\nexecution = \"hosted\"\n",
    )
    .unwrap();
    let agent = fixer(&env);
    let run = run_new(&env, &repo, "hi", &agent, &config, &[]);
    run.expect(9);
    assert!(run.stdout.contains("127.0.0.1:9"), "{}", run.stdout);
    let session = session_id(&run);
    let bundle = export(&env, &session);
    for needle in ["s3cr3t-in-url", "alice:"] {
        assert_nowhere(&env, &run, needle);
        assert!(!bundle.contains(needle), "{needle} in the bundle");
    }
}

/// A custom `api_key_env` named in `--pass-env` is refused like `OPENAI_API_KEY` is (exit 4),
/// not silently dropped; no Session is created.
#[test]
fn pass_env_naming_a_custom_api_key_env_is_refused() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let config = env.path().join("config.toml");
    std::fs::write(
        &config,
        "[providers.hosted]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         model = \"m\"\napi_key_env = \"KXEN_BRIDGE_LLM\"\n[roles]\nexecution = \"hosted\"\n",
    )
    .unwrap();
    let agent = fixer(&env);
    let run = run_new(
        &env,
        &repo,
        "hi",
        &agent,
        &config,
        &["--pass-env", "KXEN_BRIDGE_LLM"],
    );
    run.expect(4);
    assert!(run.stderr.contains("KXEN_BRIDGE_LLM"), "{}", run.stderr);
    assert!(run.stderr.contains("[providers.hosted]"), "{}", run.stderr);
    assert!(
        !env.state_dir().join("sessions").exists()
            || files_under(&env.state_dir().join("sessions")).is_empty()
    );
}

/// A tool output and the model's own text that hold a credential's value: the model sees
/// `[redacted]`, and no file of the state dir nor an exported bundle holds the value, while
/// the Session still verifies (the Session and the journal hold the same redacted text).
#[test]
fn a_credential_in_tool_output_and_model_text_never_reaches_state_or_a_bundle() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    // Written after the commit: a file the agent finds in its workspace, as a leaked .env.
    std::fs::write(
        repo.join("dot-env"),
        format!("OPENAI_API_KEY={OPENAI_CANARY}\n"),
    )
    .unwrap();
    let turns = [
        call("c1", "exec", json!({"command": "cat dot-env"})),
        call("c2", "read", json!({"path": "dot-env"})),
        call(
            "c3",
            "exec",
            json!({"command": format!("echo {OPENAI_CANARY} > echoed.txt")}),
        ),
        answer(&format!("the key is {OPENAI_CANARY}")),
    ];
    let config = script_config(&env, &turns);
    let agent = fixer(&env);
    let out = env
        .cmd("kxen-agent")
        .env("OPENAI_API_KEY", OPENAI_CANARY)
        .args(["run", "--workspace", repo.to_str().unwrap()])
        .args(["--task", &format!("find {OPENAI_CANARY}")])
        .args(["--agent", agent.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap(), "--allow-shell"])
        .output()
        .unwrap();
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    run.expect(0);
    let session = session_id(&run);
    let bundle = export(&env, &session);
    assert_nowhere(&env, &run, OPENAI_CANARY);
    assert!(!bundle.contains(OPENAI_CANARY), "the key is in the bundle");
    // What the model was given (the tool messages) and what it said carry the mark instead.
    let messages: String = files_under(&env.state_dir())
        .into_iter()
        .filter(|f| f.ends_with("messages.jsonl"))
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect();
    assert!(
        messages.contains("OPENAI_API_KEY=[redacted]"),
        "the tool outputs: {messages}"
    );
    assert!(messages.contains("the key is [redacted]"), "{messages}");
    // The arguments the tool ran with were redacted too.
    let echoed = std::fs::read_to_string(repo.join("echoed.txt")).unwrap();
    assert_eq!(echoed, "[redacted]\n");
    env.run("kxen-agent", &["session", "verify", &session])
        .expect(0);
}
