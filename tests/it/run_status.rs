//! The live status line of `--format text` (src/cli/kxen/status.rs), seen for real: the run
//! writes to a pseudo terminal, the test reads every byte the terminal got and replays them
//! the way a terminal would (`\r`, `ESC [ K`, newlines). The raw bytes hold the status
//! updates; the final screen holds only the normal text view. Piped, or on a terminal that
//! asks for none (`TERM=dumb`, `NO_COLOR`), nothing of it is written.

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::fake_model::{Reply, config, serve};
use crate::run_support::*;

fn data(v: Value) -> String {
    format!("data: {v}\n\n")
}

/// A streamed chat-completions answer: `text` in two deltas, a `read` call if `call`, usage.
fn stream(text: &str, call: bool) -> Reply {
    let (a, b) = text.split_at(text.len() / 2);
    let mut pieces: Vec<String> = [a, b]
        .iter()
        .map(|t| data(json!({"choices": [{"index": 0, "delta": {"content": t}}]})))
        .collect();
    if call {
        pieces.push(data(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
            "id": "call_1", "type": "function",
            "function": {"name": "read", "arguments": "{\"path\":\"a.txt\"}"}}]}}]}),
        ));
    }
    pieces.push(data(
        json!({"choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 20}}),
    ));
    pieces.push("data: [DONE]\n\n".into());
    Reply::Chunks {
        content_type: "text/event-stream",
        pieces: pieces
            .into_iter()
            .map(|p| (Duration::from_millis(30), p))
            .collect(),
        end: true,
    }
}

/// A workspace, a streaming model that reads `a.txt` then answers, and the run's command
/// in `format` (the provider priced so that the line shows a cost).
fn text_run(env: &TestEnv, format: &str) -> Command {
    let repo = env.git_repo("repo", &[("a.txt", "alpha\n")]);
    let (url, _seen) = serve(|n, _| match n {
        0 => stream("Reading a.txt.", true),
        _ => stream("It says alpha.", false),
    });
    let config = config(
        env,
        &format!(
            "kind = \"openai\"\nbase_url = \"{url}/v1\"\nmodel = \"m\"\n\
             price = {{ input_per_mtok = 3.0, output_per_mtok = 15.0 }}"
        ),
    );
    let agent = fixer(env);
    let mut cmd = env.cmd("kxen-agent");
    cmd.args(["run", "--format", format, "--workspace"])
        .arg(&repo)
        .args(["--task", "What does a.txt say?", "--agent"])
        .arg(&agent)
        .arg("--config")
        .arg(&config);
    cmd
}

/// Runs `cmd` with stdin, stdout and stderr on a new pseudo terminal; returns every byte the
/// terminal received (the line discipline turns `\n` into `\r\n`) and the exit code.
fn on_terminal(mut cmd: Command) -> (Vec<u8>, i32) {
    // SAFETY: plain libc calls on a descriptor this function owns; checked for failure.
    #[allow(unsafe_code)]
    let master = unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert_eq!(libc::grantpt(fd), 0);
        assert_eq!(libc::unlockpt(fd), 0);
        OwnedFd::from_raw_fd(fd)
    };
    let mut name = [0 as libc::c_char; 256];
    // SAFETY: `name` is a writable buffer of the length given.
    #[allow(unsafe_code)]
    let named = unsafe { libc::ptsname_r(master.as_raw_fd(), name.as_mut_ptr(), name.len()) };
    assert_eq!(named, 0);
    // SAFETY: ptsname_r wrote a NUL-terminated path into `name`.
    #[allow(unsafe_code)]
    let path = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }
        .to_str()
        .unwrap()
        .to_string();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    cmd.stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    let mut child = cmd.spawn().unwrap();
    // The parent's copies of the terminal's end must go, or reading never sees its close.
    drop(cmd);
    let mut master = std::fs::File::from(master);
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    // Until every writer is gone: Linux then answers EIO.
    while let Ok(n) = master.read(&mut buf) {
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&buf[..n]);
    }
    let code = child.wait().unwrap().code().unwrap_or(-1);
    (bytes, code)
}

/// The screen after `bytes`, as a terminal shows it: `\r` goes to the line's start, `\n` to
/// the next line, `ESC [ K` clears to the end of the line, text overwrites.
fn screen(bytes: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines: Vec<Vec<char>> = vec![Vec::new()];
    let mut col = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let line = lines.last_mut().unwrap();
        match c {
            '\r' => col = 0,
            '\n' => {
                lines.push(Vec::new());
                col = 0;
            }
            '\u{1b}' => {
                let mut seq = String::new();
                for n in chars.by_ref() {
                    seq.push(n);
                    if n.is_ascii_alphabetic() {
                        break;
                    }
                }
                assert_eq!(seq, "[K", "the only escape sequence written");
                line.truncate(col);
            }
            c => {
                if col < line.len() {
                    line[col] = c;
                } else {
                    line.push(c);
                }
                col += 1;
            }
        }
    }
    lines.into_iter().map(|l| l.into_iter().collect()).collect()
}

#[test]
fn on_a_terminal_the_status_line_updates_in_place_and_leaves_nothing_behind() {
    let env = TestEnv::new();
    let mut cmd = text_run(&env, "text");
    cmd.env("TERM", "xterm-256color");
    let (bytes, code) = on_terminal(cmd);
    let raw = String::from_utf8_lossy(&bytes).to_string();
    assert_eq!(code, 0, "{raw}");
    // Updates: each turn's line, drawn in place, with the tokens and cost reported so far.
    assert!(
        raw.contains("\rturn 1/16 · in 0 tok · out 0 tok · $0.0000 · "),
        "{raw:?}"
    );
    assert!(
        raw.contains("\rturn 1/16 · in 1000 tok · out 20 tok · $0.0033 · "),
        "{raw:?}"
    );
    assert!(
        raw.contains("\rturn 2/16 · in 2000 tok · out 40 tok · $0.0066 · "),
        "{raw:?}"
    );
    assert!(raw.contains("\x1b[K"), "{raw:?}");
    // The screen holds the normal text view only: no status line left, the streamed text
    // once and whole (the status line never wrote over it).
    let shown = screen(&bytes);
    let all = shown.join("\n");
    assert!(!all.contains("tok ·"), "{all}");
    assert_eq!(all.matches("Reading a.txt.").count(), 1, "{all}");
    assert!(shown.iter().any(|l| l == "Reading a.txt."), "{all}");
    assert!(shown.iter().any(|l| l == "It says alpha."), "{all}");
    assert!(shown.iter().any(|l| l.starts_with("  [read] ")), "{all}");
    assert!(
        shown
            .iter()
            .any(|l| l.starts_with("run ") && l.ends_with(" completed after 2 turns")),
        "{all}"
    );
}

#[test]
fn a_terminal_that_asks_for_none_and_jsonl_get_no_status_line() {
    for (var, value, format) in [
        ("TERM", "dumb", "text"),
        ("NO_COLOR", "1", "text"),
        ("TERM", "xterm", "jsonl"),
    ] {
        let env = TestEnv::new();
        let mut cmd = text_run(&env, format);
        cmd.env("TERM", "xterm").env(var, value);
        let (bytes, code) = on_terminal(cmd);
        let raw = String::from_utf8_lossy(&bytes).to_string();
        assert_eq!(code, 0, "{raw}");
        assert!(!raw.contains(" tok · "), "{var}={value} {format}: {raw:?}");
        assert!(!raw.contains('\u{1b}'), "{var}={value} {format}: {raw:?}");
    }
}

#[test]
fn piped_text_output_has_no_carriage_return() {
    let env = TestEnv::new();
    let mut cmd = text_run(&env, "text");
    cmd.env("TERM", "xterm-256color");
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    for (what, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        assert!(
            !bytes.contains(&b'\r'),
            "{what}: {:?}",
            String::from_utf8_lossy(bytes)
        );
        assert!(!bytes.contains(&0x1b), "{what}");
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("It says alpha."), "{stdout}");
}
