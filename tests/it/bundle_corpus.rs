//! The damaged-bundle corpus (`fixtures/bundles/`) and a killed import: every damaged bundle is
//! refused (exit 4 or 10, naming what failed) and the target state dir is left exactly as it was.
//!
//! The corpus is derived from a real export of a Session bound to a repository whose identity
//! and HEAD are the same on every machine ([`fixture_repo`]). Regenerate the committed files
//! with `KXEN_WRITE_BUNDLE_FIXTURES=1 cargo test --all-features --test it bundle_corpus`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kxen::fsx::chain;
use serde_json::{Map, Value, json};

use crate::env::{TestEnv, snapshot};
use crate::session_builder::{Shape, build};

/// A repository with a fixed remote, branch and commit: its identity hash and HEAD are the same
/// on every machine, so committed bundles bound to it import anywhere.
pub fn fixture_repo(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("check.sh"), "#!/bin/sh\nexit 0\n").unwrap();
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_AUTHOR_NAME", "Fixture")
            .env("GIT_AUTHOR_EMAIL", "fixture@example.com")
            .env("GIT_COMMITTER_NAME", "Fixture")
            .env("GIT_COMMITTER_EMAIL", "fixture@example.com")
            .env("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q", "-b", "main"]);
    git(&[
        "remote",
        "add",
        "origin",
        "https://example.com/kxen/bundle-fixture.git",
    ]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "fixture"]);
    dir.to_path_buf()
}

/// A fresh export of a Session with tool calls and blobs, bound to the fixture repository.
fn export_good(env: &TestEnv, repo: &Path) -> String {
    let source = env.path().join("source-state");
    let b = build(
        &source,
        &Shape {
            workspace: repo,
            task: "fix the check",
            tool_calls: 3,
            output_bytes: 200,
            blob_every: 2,
        },
    );
    let bundle = env.path().join("good.bundle.json");
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            source.to_str().unwrap(),
            "session",
            "export",
            &b.session_id,
            "--output",
            bundle.to_str().unwrap(),
        ],
    )
    .expect(0);
    std::fs::read_to_string(bundle).unwrap()
}

pub fn file_index(bundle: &Value, suffix: &str) -> usize {
    bundle["files"]
        .as_array()
        .unwrap()
        .iter()
        .position(|f| f["path"].as_str().unwrap().ends_with(suffix))
        .unwrap()
}

/// Replaces a file's content and fixes its size, hash and the manifest, so that deeper checks
/// (chains, cross-references, the lock) are what must catch the change.
pub fn rewrite(bundle: &mut Value, suffix: &str, f: impl Fn(&str) -> String) {
    let i = file_index(bundle, suffix);
    let content = f(bundle["files"][i]["content"].as_str().unwrap());
    let sha = kxen::hash::sha256_prefixed(content.as_bytes());
    bundle["files"][i]["bytes"] = json!(content.len());
    bundle["files"][i]["sha256"] = json!(sha);
    bundle["files"][i]["content"] = json!(content);
    bundle["manifest"]["files"][i]["bytes"] = json!(content.len());
    bundle["manifest"]["files"][i]["sha256"] = json!(sha);
    let files = serde_json::to_string(&bundle["manifest"]["files"]).unwrap();
    bundle["manifest"]["filesSha256"] = json!(kxen::hash::sha256_prefixed(files.as_bytes()));
}

fn map_lines(text: &str, f: impl Fn(Vec<String>) -> Vec<String>) -> String {
    let lines = f(text.lines().map(str::to_string).collect());
    lines.join("\n") + "\n"
}

/// Re-chains JSONL lines (as a forger who knows the format would).
fn rechain(lines: Vec<String>) -> Vec<String> {
    let mut prev = chain::GENESIS.to_string();
    let mut buf = Vec::new();
    lines
        .into_iter()
        .map(|l| {
            chain::split_line(l.as_bytes(), &mut buf).unwrap();
            let line = chain::chain_line(std::str::from_utf8(&buf).unwrap(), &prev);
            prev = chain::line_hash(line.as_bytes());
            line
        })
        .collect()
}

/// (name, damaged bundle text, expected exit code, what the message must name)
fn corpus(good: &str) -> Vec<(&'static str, String, i32, &'static str)> {
    let base: Value = serde_json::from_str(good).unwrap();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut b = base.clone();
        f(&mut b);
        b.to_string()
    };
    vec![
        (
            "truncated",
            good[..good.len() / 2].to_string(),
            4,
            "not a valid bundle",
        ),
        (
            "changed-objective",
            with(&|b| {
                rewrite(b, "session.json", |c| {
                    c.replace(
                        "Complete the supplied repository task",
                        "Delete the repository",
                    )
                })
            }),
            10,
            "definitionHash",
        ),
        (
            "changed-tool-output",
            with(&|b| {
                rewrite(b, "journal.jsonl", |c| {
                    map_lines(c, |mut l| {
                        l[1] = l[1].replacen("output of step 0", "output of step X", 1);
                        l
                    })
                })
            }),
            10,
            "journal.jsonl:3: the chain is broken",
        ),
        (
            "removed-message",
            with(&|b| {
                rewrite(b, "messages.jsonl", |c| {
                    map_lines(c, |mut l| {
                        l.remove(2);
                        l
                    })
                })
            }),
            10,
            "messages.jsonl:3: the chain is broken",
        ),
        (
            "reordered-journal",
            with(&|b| {
                rewrite(b, "journal.jsonl", |c| {
                    map_lines(c, |mut l| {
                        l.swap(0, 1);
                        l
                    })
                })
            }),
            10,
            "journal.jsonl:1: the chain is broken",
        ),
        (
            "duplicated-message-id",
            with(&|b| {
                rewrite(b, "messages.jsonl", |c| {
                    map_lines(c, |mut l| {
                        let d = l[1].clone();
                        l.insert(2, d);
                        rechain(l)
                    })
                })
            }),
            10,
            "appears twice",
        ),
        (
            "forged-compaction",
            with(&|b| {
                rewrite(b, "messages.jsonl", |c| {
                    map_lines(c, |mut l| {
                        // A compaction record that would summarize away the task (line 1).
                        let first: Value = serde_json::from_str(&l[0]).unwrap();
                        let third: Value = serde_json::from_str(&l[2]).unwrap();
                        let record = json!({"id": "msg_00000000000000000000000000", "runId": first["runId"],
                            "role": "compaction", "content": "nothing happened",
                            "compacts": {"from": first["id"], "to": third["id"], "messages": 3},
                            "createdAt": first["createdAt"], "prevHash": chain::GENESIS});
                        l.push(record.to_string());
                        rechain(l)
                    })
                })
            }),
            10,
            "would summarize away user message",
        ),
        (
            "unknown-top-level-field",
            with(&|b| {
                let mut m = Map::new();
                for (k, v) in b.as_object().unwrap() {
                    m.insert(k.clone(), v.clone());
                    if k == "exportedBy" {
                        m.insert("note".into(), json!("hello"));
                    }
                }
                *b = Value::Object(m);
            }),
            4,
            "unknown top-level field \"note\"",
        ),
        (
            "wrong-format-version",
            with(&|b| b["format"] = json!("kxen-bundle/v2")),
            4,
            "format \"kxen-bundle/v2\" is not supported",
        ),
        (
            "session-id-with-dotdot",
            with(&|b| b["sessionId"] = json!("../../etc")),
            4,
            "sessionId",
        ),
        (
            "run-path-with-dotdot",
            with(&|b| {
                let i = file_index(b, "run.json");
                b["files"][i]["path"] = json!("runs/../../../tmp/run.json");
            }),
            4,
            "is not one a Session holds",
        ),
        (
            "checksum-mismatch",
            with(&|b| {
                let i = file_index(b, "messages.jsonl");
                let c = b["files"][i]["content"]
                    .as_str()
                    .unwrap()
                    .replacen("Step 1", "Step 9", 1);
                b["files"][i]["content"] = json!(c);
            }),
            4,
            "checksum mismatch",
        ),
    ]
}

/// Imports `bundle` into a state dir that already holds a Session; asserts the refusal and that
/// nothing changed.
fn assert_refused(env: &TestEnv, repo: &Path, name: &str, bundle: &Path, code: i32, names: &str) {
    let target = env.path().join("target-state");
    let before = snapshot(&target);
    let run = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            target.to_str().unwrap(),
            "session",
            "import",
            bundle.to_str().unwrap(),
            "--workspace",
            repo.to_str().unwrap(),
        ],
    );
    assert_eq!(run.code, code, "{name}: exit code\n{}", run.stderr);
    assert!(
        run.stderr.contains(names),
        "{name}: the message should name {names:?}:\n{}",
        run.stderr
    );
    assert_eq!(
        snapshot(&target),
        before,
        "{name}: the target state dir changed"
    );
}

fn setup() -> (TestEnv, PathBuf) {
    let env = TestEnv::new();
    let repo = fixture_repo(&env.path().join("repo"));
    let other = env.path().join("elsewhere");
    std::fs::create_dir_all(&other).unwrap();
    build(
        &env.path().join("target-state"),
        &Shape {
            workspace: &other,
            task: "already here",
            tool_calls: 1,
            output_bytes: 10,
            blob_every: 1,
        },
    );
    (env, repo)
}

#[test]
fn a_fresh_corpus_is_refused_and_leaves_the_target_unchanged() {
    let (env, repo) = setup();
    let good = export_good(&env, &repo);
    let write = std::env::var_os("KXEN_WRITE_BUNDLE_FIXTURES").is_some();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bundles");
    if write {
        std::fs::create_dir_all(&fixtures).unwrap();
        std::fs::write(fixtures.join("good.bundle.json"), &good).unwrap();
    }
    for (name, text, code, names) in corpus(&good) {
        let path = env.path().join(format!("{name}.bundle.json"));
        std::fs::write(&path, &text).unwrap();
        assert_refused(&env, &repo, name, &path, code, names);
        if write {
            std::fs::write(fixtures.join(format!("{name}.bundle.json")), &text).unwrap();
        }
    }
    // A 50 MB junk string in place of a file's content: read, hashed, refused, nothing written.
    let mut junk: Value = serde_json::from_str(&good).unwrap();
    let i = file_index(&junk, "messages.jsonl");
    junk["files"][i]["content"] = json!("x".repeat(50 * 1024 * 1024));
    let path = env.path().join("junk.bundle.json");
    std::fs::write(&path, junk.to_string()).unwrap();
    assert_refused(
        &env,
        &repo,
        "junk-50mb",
        &path,
        4,
        "messages.jsonl: checksum mismatch",
    );
    // The undamaged bundle imports into the same target (so the refusals above were about the
    // damage, not the workspace).
    let path = env.path().join("good.bundle.json");
    let target = env.path().join("target-state");
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            target.to_str().unwrap(),
            "session",
            "import",
            path.to_str().unwrap(),
            "--workspace",
            repo.to_str().unwrap(),
        ],
    )
    .expect(0);
}

#[test]
fn the_committed_corpus_is_refused_and_the_good_bundle_imports() {
    let (env, repo) = setup();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bundles");
    let good = std::fs::read_to_string(fixtures.join("good.bundle.json")).unwrap();
    for (name, _, code, names) in corpus(&good) {
        assert_refused(
            &env,
            &repo,
            name,
            &fixtures.join(format!("{name}.bundle.json")),
            code,
            names,
        );
    }
    let target = env.path().join("target-state");
    let run = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            target.to_str().unwrap(),
            "session",
            "import",
            fixtures.join("good.bundle.json").to_str().unwrap(),
            "--workspace",
            repo.to_str().unwrap(),
        ],
    );
    run.expect(0);
    let id = run.jsonl()[0]["sessionId"].as_str().unwrap().to_string();
    env.run(
        "kxen-agent",
        &[
            "--state-dir",
            target.to_str().unwrap(),
            "session",
            "verify",
            &id,
        ],
    )
    .expect(0);
}

#[test]
fn a_killed_import_leaves_the_target_unchanged_and_a_retry_succeeds() {
    for point in ["import.after-staging", "import.before-rename"] {
        let (env, repo) = setup();
        let good = export_good(&env, &repo);
        let bundle = env.path().join("good.bundle.json");
        assert_eq!(std::fs::read_to_string(&bundle).unwrap(), good);
        let target = env.path().join("target-state");
        let visible = |t: &Path| -> BTreeMap<String, Option<Vec<u8>>> {
            snapshot(t)
                .into_iter()
                .filter(|(k, _)| !k.contains(".staging-") && !k.starts_with("blobs"))
                .collect()
        };
        let before = visible(&target);
        let blobs_before = snapshot(&target.join("blobs"));
        let out = env
            .cmd("kxen-agent")
            .env("KXEN_FAILPOINT", point)
            .args([
                "--state-dir",
                target.to_str().unwrap(),
                "session",
                "import",
                bundle.to_str().unwrap(),
                "--workspace",
                repo.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            !out.status.success(),
            "{point}: the failpoint was not reached"
        );
        // Nothing new is visible: no Session, no changed file (a staging directory readers
        // ignore may remain; blobs may only have been added, never changed).
        assert_eq!(visible(&target), before, "{point}");
        let blobs_after = snapshot(&target.join("blobs"));
        for (k, v) in &blobs_before {
            assert_eq!(blobs_after.get(k), Some(v), "{point}: blob {k} changed");
        }
        if point == "import.after-staging" {
            assert_eq!(
                blobs_after, blobs_before,
                "{point}: blobs moved before the point"
            );
        }
        let list = env.run(
            "kxen-agent",
            &["--state-dir", target.to_str().unwrap(), "session", "list"],
        );
        assert_eq!(list.jsonl().len(), 1, "{point}: {}", list.stdout);
        // The retry cleans up the stale staging directory and succeeds.
        let run = env.run(
            "kxen-agent",
            &[
                "--state-dir",
                target.to_str().unwrap(),
                "session",
                "import",
                bundle.to_str().unwrap(),
                "--workspace",
                repo.to_str().unwrap(),
            ],
        );
        run.expect(0);
        assert!(
            !snapshot(&target).keys().any(|k| k.contains(".staging-")),
            "{point}"
        );
        let id = run.jsonl()[0]["sessionId"].as_str().unwrap().to_string();
        env.run(
            "kxen-agent",
            &[
                "--state-dir",
                target.to_str().unwrap(),
                "session",
                "verify",
                &id,
            ],
        )
        .expect(0);
    }
}

/// Damage is always reported as damage (exit 4 or 10), never hidden behind the checks against
/// the target: a wrong `--workspace` or a Session id that already exists here (exit 5) is only
/// looked at once the whole bundle has been read and verified.
#[test]
fn damage_is_reported_before_the_workspace_and_existing_session_checks() {
    let (env, repo) = setup();
    let other = env.git_repo("other", &[("b.txt", "b\n")]);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bundles");
    let good = std::fs::read_to_string(fixtures.join("good.bundle.json")).unwrap();
    // An unknown member after the manifest: the last thing in the file.
    let body = good.trim_end().strip_suffix('}').unwrap();
    let after = env.path().join("after-manifest.bundle.json");
    std::fs::write(&after, format!("{body},\"note\":1}}\n")).unwrap();
    let after_names = "unknown top-level field \"note\" after the manifest";

    assert_refused(&env, &other, "after-manifest", &after, 4, after_names);
    for (name, _, code, names) in corpus(&good) {
        let path = fixtures.join(format!("{name}.bundle.json"));
        assert_refused(&env, &other, name, &path, code, names);
    }

    // The same Session, imported for real: damaged copies of it are still damage.
    let target = env.path().join("target-state");
    let import = |bundle: &Path, workspace: &Path| {
        env.run(
            "kxen-agent",
            &[
                "--state-dir",
                target.to_str().unwrap(),
                "session",
                "import",
                bundle.to_str().unwrap(),
                "--workspace",
                workspace.to_str().unwrap(),
            ],
        )
    };
    import(&fixtures.join("good.bundle.json"), &repo).expect(0);
    assert_refused(
        &env,
        &repo,
        "after-manifest, exists",
        &after,
        4,
        after_names,
    );
    for (name, _, code, names) in corpus(&good) {
        let path = fixtures.join(format!("{name}.bundle.json"));
        assert_refused(&env, &repo, name, &path, code, names);
    }
    // The undamaged bundle is then refused for what it is: already here.
    let again = import(&fixtures.join("good.bundle.json"), &repo);
    again.expect(5);
    assert!(again.stderr.contains("already exists"), "{}", again.stderr);
}

/// Entry keys in another order than export writes them (content before path, base64 before the
/// blob's name) are still a valid bundle: such content is held until its entry is complete
/// instead of being streamed, and checked the same way.
#[test]
fn entries_with_keys_in_another_order_import() {
    let (env, repo) = setup();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bundles");
    let good: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("good.bundle.json")).unwrap())
            .unwrap();
    let reorder = |entries: &Value, first: &str| -> Value {
        Value::Array(
            entries
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    let e = e.as_object().unwrap();
                    let mut m = Map::new();
                    m.insert(first.into(), e[first].clone());
                    for (k, v) in e.iter().rev() {
                        m.entry(k.clone()).or_insert_with(|| v.clone());
                    }
                    Value::Object(m)
                })
                .collect(),
        )
    };
    let mut b = good.clone();
    b["files"] = reorder(&good["files"], "content");
    b["blobs"] = reorder(&good["blobs"], "contentBase64");
    assert!(!b["blobs"].as_array().unwrap().is_empty());
    let path = env.path().join("reordered-keys.bundle.json");
    std::fs::write(&path, b.to_string()).unwrap();
    let target = env.path().join("target-state");
    let run = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            target.to_str().unwrap(),
            "session",
            "import",
            path.to_str().unwrap(),
            "--workspace",
            repo.to_str().unwrap(),
        ],
    );
    run.expect(0);
    let id = run.jsonl()[0]["sessionId"].as_str().unwrap().to_string();
    let verified = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            target.to_str().unwrap(),
            "session",
            "verify",
            &id,
        ],
    );
    verified.expect(0);
    assert_eq!(
        verified.jsonl()[0]["blobs"].as_array().unwrap().len(),
        good["blobs"].as_array().unwrap().len()
    );
}

/// Runs `cmd` to its end and returns its exit code and the peak resident set size (KiB) seen
/// in its `/proc/PID/status` (`VmHWM`, the high-water mark of its own memory after exec, so
/// nothing of the test process counts), polled until it exits.
fn exit_and_peak_rss_kib(cmd: &mut Command) -> (i32, u64) {
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = 0;
    loop {
        if let Ok(status) = std::fs::read_to_string(&status_file)
            && let Some(kib) = status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak = peak.max(kib);
        }
        if let Some(exit) = child.try_wait().unwrap() {
            return (exit.code().unwrap_or(-1), peak);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A file entry whose `content` comes before its `path` (legal: keys may come in any order)
/// is streamed to a staging file like any other, never held in memory: importing one with
/// 64 MiB of content stays far below that resident. The entry's checksum is wrong, so the
/// import then refuses it (exit 4) and leaves nothing behind.
#[test]
fn content_before_path_is_streamed_not_held() {
    use std::io::Write;
    let (env, repo) = setup();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bundles");
    let mut b: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("good.bundle.json")).unwrap())
            .unwrap();
    let mut entry = Map::new();
    entry.insert("content".into(), json!("@CONTENT@"));
    entry.insert("path".into(), json!("messages.jsonl"));
    entry.insert("bytes".into(), json!(1));
    entry.insert("sha256".into(), json!("sha256:00"));
    b["files"][1] = Value::Object(entry);
    // Written in pieces, so the test itself never holds the content either.
    let text = b.to_string();
    let (head, tail) = text.split_once("@CONTENT@").unwrap();
    let path = env.path().join("content-first.bundle.json");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    out.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..64 {
        out.write_all(&chunk).unwrap();
    }
    out.write_all(tail.as_bytes()).unwrap();
    out.flush().unwrap();
    drop(out);
    let target = env.path().join("target-state");
    let before = snapshot(&target);
    let (code, peak_kib) = exit_and_peak_rss_kib(env.cmd("kxen-agent").args([
        "--state-dir",
        target.to_str().unwrap(),
        "session",
        "import",
        path.to_str().unwrap(),
        "--workspace",
        repo.to_str().unwrap(),
    ]));
    assert_eq!(code, 4);
    assert!(
        peak_kib < 32 << 10,
        "peak RSS {} MiB: the content was held in memory",
        peak_kib >> 10
    );
    assert_eq!(
        snapshot(&target),
        before,
        "a refused import changed the target"
    );
}

/// The one content held in memory, the first file's (session.json, read before staging exists),
/// is bounded: a huge one is refused as invalid (exit 4) instead of being read whole.
#[test]
fn a_huge_first_file_is_refused_at_the_memory_bound() {
    let (env, repo) = setup();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/bundles");
    let mut b: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("good.bundle.json")).unwrap())
            .unwrap();
    b["files"][0]["content"] = json!("x".repeat(17 << 20));
    let path = env.path().join("huge-session-json.bundle.json");
    std::fs::write(&path, b.to_string()).unwrap();
    let target = env.path().join("target-state");
    let before = snapshot(&target);
    let run = env.run(
        "kxen-agent",
        &[
            "--state-dir",
            target.to_str().unwrap(),
            "session",
            "import",
            path.to_str().unwrap(),
            "--workspace",
            repo.to_str().unwrap(),
        ],
    );
    run.expect(4);
    assert!(
        run.stderr
            .contains("the first file's content is larger than 16777216 bytes"),
        "{}",
        run.stderr
    );
    assert_eq!(snapshot(&target), before);
}
