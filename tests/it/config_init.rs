//! `kxen-agent config init`: every template it writes is a config a real run accepts — each one
//! is written by the binary, pointed at a loopback server of its wire format (only the scheme
//! and host of `base_url` change), and run to completion through a tool call; the default
//! output is the file a plain `run` reads; an existing file is never replaced without --force.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::fake_model::{Reply, Request, completion, serve, tool_call_message};
use crate::run_support::*;

const KEY: &str = "sk-init-canary-0a1b2c3d4e5f";

/// What each template must say: (provider, wire path below base_url, key variable, model).
const TEMPLATES: &[(&str, &str, Option<&str>, &str)] = &[
    (
        "openai",
        "/v1/chat/completions",
        Some("OPENAI_API_KEY"),
        "gpt-4o-mini",
    ),
    (
        "anthropic",
        "/v1/messages",
        Some("ANTHROPIC_API_KEY"),
        "claude-sonnet-4-5",
    ),
    (
        "openrouter",
        "/api/v1/chat/completions",
        Some("OPENROUTER_API_KEY"),
        "anthropic/claude-sonnet-4.5",
    ),
    ("ollama", "/v1/chat/completions", None, "qwen2.5-coder:7b"),
    (
        "vllm",
        "/v1/chat/completions",
        None,
        "Qwen/Qwen2.5-Coder-7B-Instruct",
    ),
    ("llamacpp", "/v1/chat/completions", None, "local"),
];

fn sse(pieces: Vec<String>) -> Reply {
    Reply::Chunks {
        content_type: "text/event-stream",
        pieces: pieces.into_iter().map(|p| (Duration::ZERO, p)).collect(),
        end: true,
    }
}

fn data(v: Value) -> String {
    format!("data: {v}\n\n")
}

fn event(name: &str, v: Value) -> String {
    format!("event: {name}\ndata: {v}\n\n")
}

/// Turn 0 reads `a.txt`, turn 1 answers — in whichever of the four formats the request asks for.
fn reply(n: usize, request: &Request) -> Reply {
    let body = request.json();
    let streamed = body["stream"] == true;
    let anthropic = request.path.ends_with("/messages");
    let read = json!({"path": "a.txt"});
    match (anthropic, streamed, n) {
        (false, false, 0) => Reply::json(&completion(tool_call_message("call_1", "read", &read))),
        (false, false, _) => Reply::json(&completion(
            json!({"role": "assistant", "content": "It says alpha."}),
        )),
        (false, true, 0) => sse(vec![
            data(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
                "id": "call_1", "type": "function",
                "function": {"name": "read", "arguments": read.to_string()}}]}}]}),
            ),
            data(json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 2}})),
            "data: [DONE]\n\n".into(),
        ]),
        (false, true, _) => sse(vec![
            data(json!({"choices": [{"index": 0, "delta": {"content": "It says "}}]})),
            data(json!({"choices": [{"index": 0, "delta": {"content": "alpha."}}]})),
            "data: [DONE]\n\n".into(),
        ]),
        (true, false, 0) => Reply::json(&json!({"id": "m", "type": "message", "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": read}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 9, "output_tokens": 2}})),
        (true, false, _) => Reply::json(&json!({"id": "m", "type": "message", "role": "assistant",
            "content": [{"type": "text", "text": "It says alpha."}],
            "stop_reason": "end_turn", "usage": {"input_tokens": 9, "output_tokens": 2}})),
        (true, true, n) => {
            let block = if n == 0 {
                vec![
                    event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": 0, "content_block":
                        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}}),
                    ),
                    event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": 0, "delta":
                        {"type": "input_json_delta", "partial_json": read.to_string()}}),
                    ),
                ]
            } else {
                vec![
                    event(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": 0,
                        "content_block": {"type": "text", "text": ""}}),
                    ),
                    event(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": 0,
                        "delta": {"type": "text_delta", "text": "It says alpha."}}),
                    ),
                ]
            };
            let mut pieces = vec![event(
                "message_start",
                json!({"type": "message_start", "message":
                {"usage": {"input_tokens": 9, "output_tokens": 1}}}),
            )];
            pieces.extend(block);
            pieces.push(event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ));
            pieces.push(event(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 2}}),
            ));
            pieces.push(event("message_stop", json!({"type": "message_stop"})));
            sse(pieces)
        }
    }
}

/// `text` with the scheme and host of its `base_url` replaced by `url` (the path stays).
fn pointed_at(text: &str, url: &str) -> String {
    let mut found = false;
    let out: Vec<String> = text
        .lines()
        .map(|line| {
            let Some(rest) = line.strip_prefix("base_url = \"") else {
                return line.to_string();
            };
            found = true;
            let (value, tail) = rest.split_once('"').unwrap();
            let after_scheme = value.split_once("://").unwrap().1;
            let path = after_scheme.find('/').map_or("", |i| &after_scheme[i..]);
            format!("base_url = \"{url}{path}\"{tail}")
        })
        .collect();
    assert!(found, "no base_url line in\n{text}");
    out.join("\n") + "\n"
}

fn init(env: &TestEnv, args: &[&str]) -> crate::env::Run {
    let mut all = vec!["config", "init"];
    all.extend_from_slice(args);
    env.run("kxen-agent", &all)
}

#[test]
fn every_template_runs_a_tool_call_against_its_wire_format() {
    for &(provider, path, key_env, model) in TEMPLATES {
        let env = TestEnv::new();
        let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
        let file = env.path().join(format!("{provider}.toml"));
        let out = init(
            &env,
            &["--provider", provider, "--output", file.to_str().unwrap()],
        );
        out.expect(0);
        let line = &out.jsonl()[0];
        assert_eq!(line["type"], "fileWritten", "{provider}");
        assert_eq!(line["provider"], provider);
        let written = std::fs::read_to_string(&file).unwrap();
        assert!(written.contains(&format!("[providers.{provider}]")));
        let (url, seen) = serve(reply);
        std::fs::write(&file, pointed_at(&written, &url)).unwrap();

        let agent = fixer(&env);
        let mut cmd = env.cmd("kxen-agent");
        if let Some(var) = key_env {
            cmd.env(var, KEY);
        }
        let run = crate::env::Run::from(
            cmd.args(["run", "--workspace", repo.to_str().unwrap()])
                .args(["--task", "What does a.txt say?", "--agent"])
                .arg(&agent)
                .arg("--config")
                .arg(&file)
                .output()
                .unwrap(),
        );
        run.expect(0);
        let events = run.jsonl();
        assert_eq!(finished(&events)["status"], "completed", "{provider}");
        assert!(
            events
                .iter()
                .any(|e| e["type"] == "toolFinished" && e["tool"] == "read"),
            "{provider}: {}",
            run.stdout
        );
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2, "{provider}");
        // Streaming is the default; a template turns it off only with `stream = false`.
        let streams = !written.contains("\nstream = false");
        for request in seen.iter() {
            assert_eq!(request.path, path, "{provider}");
            let body = request.json();
            assert_eq!(body["model"], model, "{provider}");
            assert_eq!(body["stream"], streams, "{provider}");
            match (key_env, provider) {
                (Some(_), "anthropic") => {
                    assert_eq!(request.header("x-api-key"), Some(KEY));
                    assert!(request.header("anthropic-version").is_some());
                }
                (Some(_), _) => {
                    assert_eq!(
                        request.header("authorization"),
                        Some(format!("Bearer {KEY}").as_str())
                    )
                }
                (None, _) => assert!(request.header("authorization").is_none()),
            }
        }
        // The tool's output went back to the model in the second request.
        assert!(
            String::from_utf8_lossy(&seen[1].body).contains("alpha"),
            "{provider}"
        );
        if provider == "llamacpp" {
            assert_eq!(seen[0].json()["cache_prompt"], true);
        }
        // The key reached the server, and nothing else.
        assert!(!run.stdout.contains(KEY) && !run.stderr.contains(KEY));
        for f in files_under(&env.state_dir()) {
            let text = String::from_utf8_lossy(&std::fs::read(&f).unwrap()).into_owned();
            assert!(!text.contains("init-canary"), "{}", f.display());
        }
        assert!(!std::fs::read_to_string(&file).unwrap().contains("canary"));
    }
}

#[test]
fn the_default_output_is_the_file_a_plain_run_reads() {
    let env = TestEnv::new();
    let out = init(&env, &["--provider", "ollama", "--format", "text"]);
    out.expect(0);
    // TestEnv sets XDG_CONFIG_HOME: the directory is created.
    let default = env.path().join("xdg-config/kxen-agent/config.toml");
    assert!(out.stdout.contains("wrote the model config (ollama)"));
    assert!(
        out.stdout.contains(default.to_str().unwrap()),
        "{}",
        out.stdout
    );
    let text = std::fs::read_to_string(&default).unwrap();
    let (url, seen) = serve(reply);
    std::fs::write(&default, pointed_at(&text, &url)).unwrap();
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let agent = fixer(&env);
    let run = env.run(
        "kxen-agent",
        &[
            "run",
            "--workspace",
            repo.to_str().unwrap(),
            "--task",
            "What does a.txt say?",
            "--agent",
            agent.to_str().unwrap(),
        ],
    );
    run.expect(0);
    assert_eq!(seen.lock().unwrap().len(), 2);

    // KXEN_AGENT_CONFIG names the file a run reads, so it is where init writes.
    let named = env.path().join("named.toml");
    let out = env
        .cmd("kxen-agent")
        .env("KXEN_AGENT_CONFIG", &named)
        .args(["config", "init", "--provider", "vllm"])
        .output()
        .unwrap();
    crate::env::Run::from(out).expect(0);
    assert!(
        std::fs::read_to_string(&named)
            .unwrap()
            .contains("[providers.vllm]")
    );

    // Without HOME or XDG_CONFIG_HOME there is nowhere to write: a usage error naming --output.
    let out = env
        .cmd("kxen-agent")
        .env_remove("HOME")
        .env_remove("XDG_CONFIG_HOME")
        .args(["config", "init"])
        .output()
        .unwrap();
    let run = crate::env::Run::from(out);
    run.expect(2);
    assert!(run.stderr.contains("--output FILE"), "{}", run.stderr);
}

#[test]
fn an_existing_file_is_replaced_only_with_force() {
    let env = TestEnv::new();
    let file = env.path().join("c.toml");
    std::fs::write(&file, "mine = 1\n").unwrap();
    let run = init(&env, &["--output", "c.toml", "--provider", "anthropic"]);
    run.expect(5);
    assert_eq!(run.jsonl()[0]["kind"], "conflict");
    assert!(run.stderr.contains("already exists"), "{}", run.stderr);
    assert!(run.stderr.contains("--force"), "{}", run.stderr);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine = 1\n");

    let run = init(
        &env,
        &["--output", "c.toml", "--provider", "anthropic", "--force"],
    );
    run.expect(0);
    assert_eq!(run.jsonl()[0]["replaced"], true);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("kind = \"anthropic\""));
    // No temp file is left beside it.
    let names: Vec<_> = std::fs::read_dir(env.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with(".tmp"))
        .collect();
    assert!(names.is_empty(), "{names:?}");

    // A symlink or a directory is refused even with --force (it would be replaced, not
    // written through); the link and its target stay.
    std::os::unix::fs::symlink(&file, env.path().join("link.toml")).unwrap();
    let run = init(&env, &["--output", "link.toml", "--force"]);
    run.expect(2);
    assert!(run.stderr.contains("symlink"), "{}", run.stderr);
    assert!(
        env.path()
            .join("link.toml")
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink()
    );
    std::fs::create_dir(env.path().join("d")).unwrap();
    init(&env, &["--output", "d", "--force"]).expect(2);
    // A missing directory is not created for a named output.
    let run = init(&env, &["--output", "no/such/dir/c.toml"]);
    run.expect(3);
    assert!(!Path::new(&env.path().join("no")).exists());
    // An unknown provider is a usage error listing the known ones.
    let run = init(&env, &["--provider", "bard", "--output", "x.toml"]);
    run.expect(2);
    assert!(run.stderr.contains("llamacpp"), "{}", run.stderr);
}

/// A TOML line without its comment (no template puts `#` inside a string).
fn uncommented(line: &str) -> &str {
    line.split(" #").next().unwrap().trim()
}

#[test]
fn the_models_page_shows_what_each_template_sets() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/models.md")).unwrap();
    let section = &readme[readme.find("### Tested configs").unwrap()..];
    let shown: Vec<&str> = section.lines().map(uncommented).collect();
    for &(provider, _, _, _) in TEMPLATES {
        let env = TestEnv::new();
        init(&env, &["--provider", provider, "--output", "c.toml"]).expect(0);
        let text = std::fs::read_to_string(env.path().join("c.toml")).unwrap();
        let table = text.split("[roles]").next().unwrap();
        let mut lines = table
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(uncommented)
            .peekable();
        let header = lines.next().unwrap();
        assert_eq!(header, format!("[providers.{provider}]"));
        // The docs/models.md block lists the table's lines in the file's order, right after its header.
        let at = shown
            .iter()
            .position(|l| *l == header)
            .unwrap_or_else(|| panic!("docs/models.md has no {header}"));
        let mut readme_lines = shown[at + 1..]
            .iter()
            .filter(|l| !l.is_empty() && !l.starts_with('#'));
        for line in lines {
            assert_eq!(readme_lines.next(), Some(&line), "{provider}");
        }
    }
}
