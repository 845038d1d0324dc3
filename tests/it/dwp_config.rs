//! `dwp config …`: precedence, fail-closed warnings (each exactly once), writer refusals that
//! leave the file byte-for-byte unchanged, and byte-identical writes of files other tooling wrote.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::env::{Run, TestEnv};

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/dwp/config")
        .join(name)
}

pub fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

pub fn warnings(run: &Run) -> Vec<&str> {
    run.stderr
        .lines()
        .filter(|l| l.starts_with("WARNING: "))
        .collect()
}

fn show(env: &TestEnv, repo: &Path) -> (Value, Run) {
    let run = env.run("dwp", &["config", "show", "--repo", repo.to_str().unwrap()]);
    run.expect(0);
    (serde_json::from_str(&run.stdout).unwrap(), run)
}

#[test]
fn addons_resolve_per_key_repository_first() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    write(
        &repo.join(".dwp/config.json"),
        br#"{"addons": {"vim": {"enabled": true, "version": "v0.4.0"}}}"#,
    );
    write(
        &env.home().join(".dwp/config.json"),
        br#"{"addons": {"vim": {"enabled": false}, "herdr": {"enabled": true, "note": "mine"}}}"#,
    );
    let (doc, run) = show(&env, &repo);
    assert!(warnings(&run).is_empty(), "{}", run.stderr);
    assert_eq!(
        doc["addons"]["vim"],
        json!({"enabled": true, "source": ".dwp/config.json", "version": "v0.4.0"})
    );
    assert_eq!(
        doc["addons"]["herdr"],
        json!({"enabled": true, "note": "mine", "source": "~/.dwp/config.json", "version": null})
    );
    assert_eq!(
        doc["addons"]["agentkit"],
        json!({"enabled": false, "source": null, "version": null})
    );
    let run = env.run(
        "dwp",
        &["config", "enabled", "--repo", repo.to_str().unwrap()],
    );
    assert_eq!(run.expect(0).stdout, "herdr\nvim\n");
}

#[test]
fn a_malformed_entry_decides_its_key_without_fall_through() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    write(
        &repo.join(".dwp/config.json"),
        br#"{"addons": {"vim": {"enabled": 1}}}"#,
    );
    write(
        &env.home().join(".dwp/config.json"),
        br#"{"addons": {"vim": {"enabled": true}}}"#,
    );
    let (doc, run) = show(&env, &repo);
    assert_eq!(
        doc["addons"]["vim"],
        json!({"enabled": false, "source": ".dwp/config.json", "version": null})
    );
    assert_eq!(
        warnings(&run),
        vec![
            "WARNING: addons: .dwp/config.json key 'vim' \"enabled\" is not a boolean; not enabled"
        ]
    );
}

#[test]
fn benchmark_resolves_as_a_whole() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    write(
        &repo.join(".dwp/config.json"),
        br#"{"benchmark": {"enabled": true}}"#,
    );
    write(
        &env.home().join(".dwp/config.json"),
        br#"{"benchmark": {"enabled": true, "learnings": true}}"#,
    );
    let (doc, _) = show(&env, &repo);
    assert_eq!(
        doc["benchmark"],
        json!({"enabled": true, "learnings": false})
    );
    // Without a repository benchmark the user's decides both flags.
    write(&repo.join(".dwp/config.json"), b"{}");
    let (doc, _) = show(&env, &repo);
    assert_eq!(
        doc["benchmark"],
        json!({"enabled": true, "learnings": true})
    );
}

#[test]
fn host_resolves_per_ability_repository_first() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    write(
        &repo.join(".dwp/config.json"),
        br#"{"host": {"subagents": true}}"#,
    );
    write(
        &env.home().join(".dwp/config.json"),
        br#"{"host": {"subagents": false, "telemetry": true}}"#,
    );
    let (doc, _) = show(&env, &repo);
    assert_eq!(
        doc["host"],
        json!({
            "subagents": {"source": ".dwp/config.json", "value": true},
            "telemetry": {"source": "~/.dwp/config.json", "value": true},
        })
    );
}

#[test]
fn every_bad_file_gives_exactly_one_warning_and_never_aborts() {
    let cases: &[(&str, &str)] = &[
        ("empty.json", "unreadable (EOF while parsing"),
        ("not-json.json", "unreadable (key must be a string"),
        ("array.json", "is not a JSON object; treating as absent"),
        ("null.json", "is not a JSON object; treating as absent"),
        ("bom.json", "byte-order mark"),
        (
            "enabled-1.json",
            "key 'vim' \"enabled\" is not a boolean; not enabled",
        ),
        (
            "version-short.json",
            "key 'vim' \"version\" is not a tag like v1.2.3",
        ),
        (
            "note-300.json",
            "key 'vim' \"note\" is not a one-line string",
        ),
        (
            "note-newline.json",
            "key 'vim' \"note\" is not a one-line string",
        ),
        (
            "unknown-addon-key.json",
            "key 'emacs' is not an addon dwp ships; ignored",
        ),
        (
            "unknown-entry-field.json",
            "key 'vim' carries unknown field(s) pinned; not enabled",
        ),
        (
            "unknown-host-ability.json",
            "ability 'teleport' is not in the closed set (stop_agent, meter_spend",
        ),
        (
            "host-not-bool.json",
            "ability 'subagents' is not a boolean; ignored",
        ),
        ("addons-not-object.json", "\"addons\" is not an object"),
        (
            "benchmark-not-object.json",
            "\"benchmark\" is not an object",
        ),
    ];
    for (name, expected) in cases {
        for in_home in [false, true] {
            let env = TestEnv::new();
            let repo = env.git_repo("repo", &[]);
            let target = if in_home {
                env.home().join(".dwp/config.json")
            } else {
                repo.join(".dwp/config.json")
            };
            write(
                &target,
                &std::fs::read(fixture(&format!("bad/{name}"))).unwrap(),
            );
            let (doc, run) = show(&env, &repo);
            let w = warnings(&run);
            assert_eq!(w.len(), 1, "{name}: {}", run.stderr);
            assert!(w[0].contains(expected), "{name}: {}", w[0]);
            for (_, view) in doc["addons"].as_object().unwrap() {
                assert_eq!(view["enabled"], json!(false), "{name}");
            }
            assert_eq!(doc["host"], json!({}), "{name}");
            // `enabled` reads the same files and warns at most once too.
            let run = env.run(
                "dwp",
                &["config", "enabled", "--repo", repo.to_str().unwrap()],
            );
            run.expect(0);
            assert!(warnings(&run).len() <= 1, "{name}: {}", run.stderr);
            assert_eq!(run.stdout, "");
        }
    }
}

#[test]
fn duplicate_keys_resolve_last_wins_like_python() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    write(
        &repo.join(".dwp/config.json"),
        br#"{"addons": {"vim": {"enabled": false}, "vim": {"enabled": true}}}"#,
    );
    let (doc, run) = show(&env, &repo);
    assert!(warnings(&run).is_empty());
    assert_eq!(doc["addons"]["vim"]["enabled"], json!(true));
}

#[test]
fn writer_keeps_every_other_key_and_formats_like_other_dwp_tooling() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let file = repo.join(".dwp/config.json");
    write(
        &file,
        &std::fs::read(fixture("python-written.json")).unwrap(),
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let r = repo.to_str().unwrap();
    let run = env.run(
        "dwp",
        &["config", "host", "stop_agent", "true", "--repo", r],
    );
    assert_eq!(
        run.expect(0).stdout,
        "OK: host = {\"meter_wall_clock\": true, \"stop_agent\": true}\n"
    );
    let run = env.run(
        "dwp",
        &[
            "config",
            "enable",
            "agentkit",
            "--version",
            "v0.1.1",
            "--repo",
            r,
        ],
    );
    assert_eq!(
        run.expect(0).stdout,
        "OK: addons.agentkit = {\"enabled\": true, \"version\": \"v0.1.1\"}\n"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        std::fs::read_to_string(fixture("python-written.after.json")).unwrap()
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640, "the writer keeps the file's mode");
}

#[test]
fn writer_creates_a_new_file_0644_and_disable_drops_version_and_note() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let r = repo.to_str().unwrap();
    let run = env.run(
        "dwp",
        &[
            "config",
            "enable",
            "herdr",
            "--version",
            "v0.1.0-beta.1",
            "--note",
            "team decision",
            "--repo",
            r,
        ],
    );
    run.expect(0);
    let file = repo.join(".dwp/config.json");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "{\n  \"addons\": {\n    \"herdr\": {\n      \"enabled\": true,\n      \"note\": \"team decision\",\n      \"version\": \"v0.1.0-beta.1\"\n    }\n  }\n}\n"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    let run = env.run("dwp", &["config", "disable", "herdr", "--repo", r]);
    assert_eq!(
        run.expect(0).stdout,
        "OK: addons.herdr = {\"enabled\": false}\n"
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(doc, json!({"addons": {"herdr": {"enabled": false}}}));
    // No temp file is left in .dwp.
    let names: Vec<_> = std::fs::read_dir(repo.join(".dwp"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["config.json"]);
}

/// Runs a writer against `.dwp/config.json` holding `before` and checks the refusal: exit 2,
/// an `ERROR:` naming `needle`, and the file byte-for-byte unchanged.
fn assert_refused(args: &[&str], before: Option<&[u8]>, needle: &str) {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let file = repo.join(".dwp/config.json");
    if let Some(bytes) = before {
        write(&file, bytes);
    }
    let mut full: Vec<&str> = vec!["config"];
    full.extend_from_slice(args);
    let r = repo.to_str().unwrap().to_string();
    full.extend_from_slice(&["--repo", &r]);
    let run = env.run("dwp", &full);
    run.expect(2);
    assert!(run.stderr.starts_with("ERROR: "), "{}", run.stderr);
    assert!(run.stderr.contains(needle), "{args:?}: {}", run.stderr);
    match before {
        Some(bytes) => assert_eq!(std::fs::read(&file).unwrap(), bytes, "{args:?}"),
        None => assert!(!file.exists(), "{args:?}"),
    }
}

#[test]
fn writer_refusals_leave_the_file_unchanged() {
    let valid: &[u8] = b"{\"addons\": {\"vim\": {\"enabled\": true}}}";
    assert_refused(
        &["enable", "emacs"],
        Some(valid),
        "'emacs' is not an addon dwp ships (agentkit, ai-diff-reviewer",
    );
    assert_refused(
        &["enable", "vim", "--version", "v1.2"],
        Some(valid),
        "version 'v1.2' is not a tag like v1.2.3",
    );
    let long = "x".repeat(300);
    assert_refused(
        &["enable", "vim", "--note", &long],
        Some(valid),
        "note must be one line of 1-200 characters",
    );
    assert_refused(
        &["enable", "vim", "--note", "a\nb"],
        Some(valid),
        "note must be one line",
    );
    assert_refused(
        &["enable", "vim", "--note", ""],
        None,
        "note must be one line",
    );
    assert_refused(
        &["host", "teleport", "true"],
        Some(valid),
        "'teleport' is not a host ability (stop_agent, meter_spend",
    );
    for bad in [
        "empty.json",
        "not-json.json",
        "array.json",
        "null.json",
        "bom.json",
    ] {
        let bytes = std::fs::read(fixture(&format!("bad/{bad}"))).unwrap();
        for args in [
            &["enable", "vim"][..],
            &["disable", "vim"],
            &["host", "subagents", "true"],
        ] {
            assert_refused(args, Some(&bytes), "never overwrites a file it cannot read");
        }
    }
    assert_refused(
        &["enable", "vim"],
        Some(b"{\"addons\": null}"),
        "\"addons\" is not an object — refusing to replace it",
    );
    assert_refused(
        &["disable", "vim"],
        Some(b"{\"addons\": [1]}\n"),
        "\"addons\" is not an object",
    );
    assert_refused(
        &["host", "subagents", "false"],
        Some(b"{\"host\": null}"),
        "\"host\" is not an object — refusing to replace it",
    );
    assert_refused(
        &["host", "subagents", "false"],
        Some(b"{\"host\": \"all\"}"),
        "\"host\" is not an object",
    );
}

#[test]
fn writer_refuses_symlinks() {
    // The file is a link.
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let target = env.path().join("elsewhere.json");
    write(&target, b"{}");
    std::fs::create_dir_all(repo.join(".dwp")).unwrap();
    std::os::unix::fs::symlink(&target, repo.join(".dwp/config.json")).unwrap();
    let run = env.run(
        "dwp",
        &["config", "enable", "vim", "--repo", repo.to_str().unwrap()],
    );
    run.expect(2);
    assert!(run.stderr.contains("symbolic link"), "{}", run.stderr);
    assert_eq!(std::fs::read(&target).unwrap(), b"{}");

    // The .dwp directory is a link.
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let real = env.path().join("real-dwp");
    write(&real.join("config.json"), b"{}");
    std::os::unix::fs::symlink(&real, repo.join(".dwp")).unwrap();
    let run = env.run(
        "dwp",
        &[
            "config",
            "host",
            "subagents",
            "true",
            "--repo",
            repo.to_str().unwrap(),
        ],
    );
    run.expect(2);
    assert!(run.stderr.contains("symbolic link"), "{}", run.stderr);
    assert_eq!(std::fs::read(real.join("config.json")).unwrap(), b"{}");
    assert_eq!(std::fs::read_dir(&real).unwrap().count(), 1);
}

#[test]
fn repository_is_found_from_plan_then_repo_then_git_then_cwd() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    write(
        &repo.join(".dwp/config.json"),
        br#"{"addons": {"vim": {"enabled": true}}}"#,
    );
    std::fs::create_dir_all(repo.join(".dwp/plans/PLAN_a_b/contracts")).unwrap();
    std::fs::create_dir_all(repo.join("src/deep")).unwrap();
    // --plan
    let plan = repo.join(".dwp/plans/PLAN_a_b");
    let run = env.run(
        "dwp",
        &["config", "enabled", "--plan", plan.to_str().unwrap()],
    );
    assert_eq!(run.expect(0).stdout, "vim\n");
    // --plan beats --repo
    let other = env.git_repo("other", &[]);
    let run = env.run(
        "dwp",
        &[
            "config",
            "enabled",
            "--plan",
            plan.to_str().unwrap(),
            "--repo",
            other.to_str().unwrap(),
        ],
    );
    assert_eq!(run.expect(0).stdout, "vim\n");
    // The git repository containing the current directory.
    let out = env
        .cmd("dwp")
        .args(["config", "enabled"])
        .current_dir(repo.join("src/deep"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "vim\n");
    // A plan folder outside any .dwp/plans has no repository file.
    let loose = env.path().join("PLAN_a_b");
    std::fs::create_dir_all(&loose).unwrap();
    let run = env.run(
        "dwp",
        &["config", "enabled", "--plan", loose.to_str().unwrap()],
    );
    assert_eq!(run.expect(0).stdout, "");
}

#[test]
fn keys_lists_the_eight_addons() {
    let env = TestEnv::new();
    let run = env.run("dwp", &["config", "keys"]);
    assert_eq!(
        run.expect(0).stdout,
        "agentkit\nai-diff-reviewer\ndailybot\ndependency-upgrade\ndesign-system\ndevcontainer\nherdr\nvim\n"
    );
}

#[test]
fn writers_never_create_a_missing_repository() {
    let env = TestEnv::new();
    let missing = env.path().join("typo");
    for args in [
        vec!["config", "enable", "vim"],
        vec!["config", "host", "subagents", "true"],
        vec!["onboard"],
    ] {
        let mut full = args.clone();
        full.extend_from_slice(&["--repo", missing.to_str().unwrap()]);
        let run = env.run("dwp", &full);
        run.expect(3);
        assert!(run.stderr.contains("does not exist"), "{}", run.stderr);
        assert!(!missing.exists());
    }
}
