//! `dwp abilities`, `dwp resources capabilities`, `dwp config descriptors|backfill`: detection by
//! command (fake executables on PATH), by paths and legacy paths, interface majors, timeouts,
//! the deferred report, precedence of `--caps` over the host records, and read-only-ness.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use crate::dwp_config::{warnings, write};
use crate::env::{Run, TestEnv};

/// Writes an executable shell script `name` into `dir`.
fn fake(dir: &Path, name: &str, body: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A command with the fake bin dir first on PATH.
fn dwp(env: &TestEnv, bin: &Path, args: &[&str]) -> Command {
    let mut cmd = env.cmd("dwp");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    cmd.env("PATH", path).args(args);
    cmd
}

fn run(mut cmd: Command) -> Run {
    let out = cmd.output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `dwp abilities --repo REPO extra…`, checks exit 0 and that the stderr warnings are
/// exactly the document's warnings, each once.
fn abilities(
    env: &TestEnv,
    bin: &Path,
    repo: &Path,
    extra: &[&str],
    tweak: impl FnOnce(&mut Command),
) -> Value {
    let mut args = vec!["abilities", "--repo", repo.to_str().unwrap()];
    args.extend_from_slice(extra);
    let mut cmd = dwp(env, bin, &args);
    tweak(&mut cmd);
    let r = run(cmd);
    r.expect(0);
    let doc: Value = serde_json::from_str(&r.stdout).unwrap();
    let in_doc: Vec<String> = doc["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| format!("WARNING: {}", w.as_str().unwrap()))
        .collect();
    assert_eq!(
        warnings(&r),
        in_doc,
        "stderr warnings = document warnings, once each"
    );
    assert_eq!(doc["persisted"], json!(false));
    doc
}

fn enable(repo: &Path, entries: Value) {
    write(
        &repo.join(".dwp/config.json"),
        serde_json::to_string(&json!({"addons": entries}))
            .unwrap()
            .as_bytes(),
    );
}

/// A copy of the shipped descriptors in a temp dir, for `DWP_ADDONS_DIR`.
fn addons_dir(env: &TestEnv) -> PathBuf {
    let dir = env.path().join("addons");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/addons");
    for entry in std::fs::read_dir(src).unwrap() {
        let entry = entry.unwrap();
        let to = dir.join(entry.file_name());
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(entry.path().join("addon.json"), to.join("addon.json")).unwrap();
    }
    dir
}

#[test]
fn detection_by_command_with_a_json_interface() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let bin = env.path().join("bin");
    fake(
        &bin,
        "ak",
        r#"echo '{"interface": 1, "version": "0.1.1", "ok": true}'"#,
    );
    fake(&bin, "herdr-peers", "echo 'herdr-peers 0.1.0 (protocol 1)'");
    enable(
        &repo,
        json!({"agentkit": {"enabled": true}, "herdr": {"enabled": true}}),
    );
    let doc = abilities(&env, &bin, &repo, &[], |_| {});
    assert_eq!(
        doc["addons"]["agentkit"],
        json!({
            "compatible": true, "descriptor_ok": true, "detected": true, "interface": 1,
            "provides": ["subagents", "cancel_children", "model_routing"],
            "reason": null, "version": "v0.1.1"
        })
    );
    assert_eq!(
        doc["sources"]["subagents"],
        json!(["addon:agentkit", "addon:herdr"])
    );
    assert_eq!(doc["sources"]["model_routing"], json!(["addon:agentkit"]));
    assert_eq!(doc["abilities"]["cancel_children"], json!(true));
    assert_eq!(doc["abilities"]["telemetry"], json!(false));
    assert_eq!(doc["warnings"], json!([]));

    // Disabling agentkit removes exactly its contribution.
    enable(
        &repo,
        json!({"agentkit": {"enabled": false}, "herdr": {"enabled": true}}),
    );
    let doc = abilities(&env, &bin, &repo, &[], |_| {});
    assert_eq!(doc["sources"]["subagents"], json!(["addon:herdr"]));
    assert_eq!(doc["abilities"]["model_routing"], json!(false));
    assert!(doc["addons"].get("agentkit").is_none());
}

#[test]
fn a_wrong_interface_major_contributes_nothing_with_one_warning() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let bin = env.path().join("bin");
    fake(&bin, "ak", r#"echo '{"interface": 2}'"#);
    fake(
        &bin,
        "dck",
        r#"echo '{"interface": 3, "version": "v0.2.0"}'"#,
    );
    enable(
        &repo,
        json!({"agentkit": {"enabled": true}, "devcontainer": {"enabled": true}}),
    );
    let doc = abilities(&env, &bin, &repo, &[], |_| {});
    assert_eq!(doc["addons"]["agentkit"]["compatible"], json!(false));
    assert_eq!(doc["addons"]["agentkit"]["detected"], json!(true));
    assert_eq!(doc["addons"]["agentkit"]["interface"], json!(2));
    assert_eq!(doc["abilities"]["subagents"], json!(false));
    assert_eq!(
        doc["warnings"],
        json!([
            "addon agentkit: enabled but contributes nothing — unknown interface major 2 (pinned 1); treated as not available",
            "addon devcontainer: unknown interface major 3 (pinned 2); treated as not available",
        ])
    );
}

#[test]
fn failing_commands_give_one_reason_each() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let bin = env.path().join("bin");
    // Exits non-zero.
    fake(&bin, "ak", "echo '{\"interface\": 1}'; exit 3");
    // Prints 10 MB and no parsable interface: detected, interface unreadable, no hang.
    fake(
        &bin,
        "herdr-peers",
        "head -c 10000000 /dev/zero | tr '\\0' x; exit 0",
    );
    enable(
        &repo,
        json!({"agentkit": {"enabled": true}, "herdr": {"enabled": true}}),
    );
    let doc = abilities(&env, &bin, &repo, &[], |_| {});
    assert_eq!(
        doc["addons"]["agentkit"]["reason"],
        json!("detect exited 3")
    );
    assert_eq!(doc["addons"]["agentkit"]["detected"], json!(false));
    assert_eq!(doc["addons"]["herdr"]["detected"], json!(true));
    assert_eq!(
        doc["addons"]["herdr"]["reason"],
        json!("interface unreadable; treated as not available")
    );
    assert_eq!(doc["warnings"].as_array().unwrap().len(), 2);

    // Not installed at all (an empty bin dir and a PATH without ak).
    let empty = env.path().join("empty-bin");
    std::fs::create_dir_all(&empty).unwrap();
    let doc = abilities(&env, &empty, &repo, &[], |c| {
        c.env("PATH", &empty);
    });
    assert_eq!(
        doc["addons"]["agentkit"]["reason"],
        json!("ak not installed")
    );
    assert_eq!(
        doc["warnings"][0],
        json!("addon agentkit: enabled but contributes nothing — ak not installed")
    );
}

#[test]
fn a_relative_path_entry_is_refused_and_nothing_runs() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let marker = env.path().join("ran");
    fake(
        &repo.join("bin"),
        "ak",
        &format!("touch {}; echo '{{\"interface\": 1}}'", marker.display()),
    );
    enable(&repo, json!({"agentkit": {"enabled": true}}));
    let doc = abilities(&env, Path::new("bin"), &repo, &[], |c| {
        c.current_dir(&repo);
    });
    assert_eq!(
        doc["addons"]["agentkit"]["reason"],
        json!("ak resolved through a relative PATH entry; refused")
    );
    assert!(!marker.exists());
}

#[test]
fn a_hanging_command_times_out_and_its_process_group_is_killed() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let bin = env.path().join("bin");
    let pidfile = env.path().join("child.pid");
    fake(
        &bin,
        "ak",
        &format!("sleep 60 &\necho $! > {}\nwait", pidfile.display()),
    );
    enable(&repo, json!({"agentkit": {"enabled": true}}));
    let doc = abilities(&env, &bin, &repo, &[], |c| {
        c.env("DWP_DETECT_TIMEOUT_MS", "2500");
    });
    assert_eq!(
        doc["addons"]["agentkit"]["reason"],
        json!("detect timed out after 2500ms")
    );
    assert_eq!(doc["abilities"]["subagents"], json!(false));
    // The grandchild (`sleep 60`) was in the killed process group: it is gone or a zombie. (On a
    // badly overloaded machine the script may not have reached `sleep` before the timeout; then
    // there is no grandchild to check.)
    if let Ok(pid) = std::fs::read_to_string(&pidfile) {
        let pid = pid.trim();
        // SIGKILL is delivered asynchronously: a loaded machine may need a moment to run the exit.
        let dead = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat.rsplit(") ").next().unwrap_or("").chars().next();
            stat.is_empty() || state == Some('Z')
        };
        let mut waited = 0;
        while !dead() && waited < 100 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            waited += 1;
        }
        assert!(dead(), "sleep {pid} still running 5 s after dwp returned");
    }
}

#[test]
fn a_disabled_addon_is_never_consulted() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let bin = env.path().join("bin");
    let marker = env.path().join("ak-ran");
    fake(
        &bin,
        "ak",
        &format!("touch {}; echo '{{\"interface\": 1}}'", marker.display()),
    );
    fake(&bin, "herdr-peers", "echo '(protocol 1)'");
    // agentkit's descriptor is broken: if it were opened, a warning would name it.
    let dir = addons_dir(&env);
    std::fs::write(dir.join("agentkit/addon.json"), "{broken").unwrap();
    for registry in [
        json!({"herdr": {"enabled": true}}),
        json!({"herdr": {"enabled": true}, "agentkit": {"enabled": false}}),
    ] {
        enable(&repo, registry);
        let doc = abilities(&env, &bin, &repo, &[], |c| {
            c.env("DWP_ADDONS_DIR", &dir);
        });
        assert!(!marker.exists(), "a disabled addon's detect command ran");
        assert_eq!(doc["warnings"], json!([]));
        assert_eq!(
            doc["addons"]
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            vec!["herdr"]
        );
    }
    // --host-only ignores the registry entirely.
    enable(&repo, json!({"agentkit": {"enabled": true}}));
    let doc = abilities(&env, &bin, &repo, &["--host-only"], |_| {});
    assert!(!marker.exists());
    assert_eq!(doc["addons"], json!({}));
    // Enabled, the same command does run (the marker test can fail).
    abilities(&env, &bin, &repo, &[], |_| {});
    assert!(marker.exists());
}

#[test]
fn detection_by_paths_and_legacy_paths() {
    let env = TestEnv::new();
    let repo = env.git_repo(
        "repo",
        &[
            (
                ".agents/skills/ai-diff-reviewer/SKILL.md",
                "---\nname: ai-diff-reviewer\nversion: \"3.2.3\"\n---\nbody\n",
            ),
            ("docs/DESIGN.md", "# design\n"),
        ],
    );
    let bin = env.path().join("bin");
    write(
        &env.home().join(".agents/skills/dailybot/SKILL.md"),
        b"---\nversion: 3.23.3\n---\n",
    );
    write(
        &env.home().join(".config/nvim/install.lua"),
        b"-- old install\n",
    );
    enable(
        &repo,
        json!({
            "ai-diff-reviewer": {"enabled": true}, "design-system": {"enabled": true},
            "dailybot": {"enabled": true}, "vim": {"enabled": true}
        }),
    );
    let doc = abilities(&env, &bin, &repo, &[], |_| {});
    assert_eq!(doc["addons"]["ai-diff-reviewer"]["detected"], json!(true));
    assert_eq!(
        doc["addons"]["ai-diff-reviewer"]["version"],
        json!("v3.2.3")
    );
    assert_eq!(doc["addons"]["design-system"]["compatible"], json!(true));
    assert_eq!(doc["addons"]["dailybot"]["version"], json!("v3.23.3"));
    assert_eq!(doc["sources"]["telemetry"], json!(["addon:dailybot"]));
    // vim: only a legacy file — installed without its interface surface, one warning.
    assert_eq!(doc["addons"]["vim"]["detected"], json!(true));
    assert_eq!(doc["addons"]["vim"]["compatible"], json!(false));
    assert_eq!(doc["warnings"].as_array().unwrap().len(), 1);
    assert!(
        doc["warnings"][0]
            .as_str()
            .unwrap()
            .starts_with("addon vim: installed without its interface surface")
    );

    // The surface file with the pinned major: compatible, interface read through file-json.
    write(
        &env.home().join(".config/nvim/addon/surface.json"),
        br#"{"interface": 1}"#,
    );
    let doc = abilities(&env, &bin, &repo, &[], |_| {});
    assert_eq!(doc["addons"]["vim"]["compatible"], json!(true));
    assert_eq!(doc["addons"]["vim"]["interface"], json!(1));
    assert_eq!(doc["warnings"], json!([]));
    write(
        &env.home().join(".config/nvim/addon/surface.json"),
        br#"{"interface": 2}"#,
    );
    let doc = abilities(&env, &bin, &repo, &[], |_| {});
    assert_eq!(
        doc["warnings"],
        json!(["addon vim: unknown interface major 2 (pinned 1); treated as not available"])
    );
}

#[test]
fn an_enabled_undetected_addon_with_a_note_is_deferred() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let bin = env.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    enable(
        &repo,
        json!({"dailybot": {"enabled": true, "note": "accepted; machine-level install deferred"}}),
    );
    let doc = abilities(&env, &bin, &repo, &[], |c| {
        c.env("PATH", &bin);
    });
    assert_eq!(
        doc["deferred"],
        json!({"dailybot": "accepted; machine-level install deferred"})
    );
    assert_eq!(doc["warnings"], json!([]));
    assert_eq!(doc["addons"]["dailybot"]["detected"], json!(false));
    // Without the note it is a warning instead.
    enable(&repo, json!({"dailybot": {"enabled": true}}));
    let doc = abilities(&env, &bin, &repo, &[], |_| {});
    assert_eq!(doc["deferred"], json!({}));
    assert!(doc["warnings"][0].as_str().unwrap().starts_with(
        "addon dailybot: enabled but contributes nothing — none of .agents/skills/dailybot/SKILL.md"
    ));
}

#[test]
fn caps_win_over_records_per_ability() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let bin = env.path().join("bin");
    write(
        &repo.join(".dwp/config.json"),
        br#"{"host": {"subagents": true, "telemetry": true}}"#,
    );
    write(
        &env.home().join(".dwp/config.json"),
        br#"{"host": {"stop_agent": true, "telemetry": false}}"#,
    );
    let doc = abilities(
        &env,
        &bin,
        &repo,
        &["--caps", r#"{"subagents": false, "meter_tokens": 1}"#],
        |_| {},
    );
    assert_eq!(
        doc["abilities"],
        json!({
            "cancel_children": false, "meter_spend": false, "meter_tokens": true,
            "meter_wall_clock": false, "model_routing": false, "stop_agent": true,
            "subagents": false, "telemetry": true
        })
    );
    assert_eq!(doc["sources"]["meter_tokens"], json!(["host"]));
    assert_eq!(
        doc["sources"]["telemetry"],
        json!(["record:.dwp/config.json"])
    );
    assert_eq!(
        doc["sources"]["stop_agent"],
        json!(["record:~/.dwp/config.json"])
    );
    assert_eq!(doc["sources"]["subagents"], json!([]));
}

#[test]
fn bad_caps_are_refused_naming_the_closed_set() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    for caps in [r#"{"teleport": true}"#, "[]", "not json", "null"] {
        for cmd in [
            vec![
                "abilities",
                "--repo",
                repo.to_str().unwrap(),
                "--caps",
                caps,
            ],
            vec!["resources", "capabilities", "--caps", caps],
        ] {
            let r = env.run("dwp", &cmd);
            r.expect(4);
            assert!(r.stderr.starts_with("ERROR: "), "{}", r.stderr);
            assert_eq!(r.stdout, "");
        }
    }
    let r = env.run("dwp", &["abilities", "--caps", r#"{"teleport": true}"#]);
    assert!(r.stderr.contains("stop_agent/meter_spend/meter_tokens/meter_wall_clock/cancel_children/model_routing/subagents/telemetry"));
    let r = env.run(
        "dwp",
        &[
            "resources",
            "capabilities",
            "--caps",
            r#"{"subagents": 1, "telemetry": false}"#,
        ],
    );
    let doc: Value = serde_json::from_str(&r.expect(0).stdout).unwrap();
    assert_eq!(doc.as_object().unwrap().len(), 8);
    assert_eq!(doc["subagents"], json!(true));
    assert_eq!(doc["stop_agent"], json!(false));
}

#[test]
fn abilities_writes_nothing() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let bin = env.path().join("bin");
    fake(&bin, "ak", r#"echo '{"interface": 1}'"#);
    enable(
        &repo,
        json!({"agentkit": {"enabled": true}, "emacs": {"enabled": true}}),
    );
    let snapshot = |dir: &Path| -> Vec<(PathBuf, Vec<u8>)> {
        let mut files: Vec<_> = walk(dir)
            .into_iter()
            .map(|p| {
                let b = std::fs::read(&p).unwrap_or_default();
                (p, b)
            })
            .collect();
        files.sort();
        files
    };
    let before = (snapshot(&repo), snapshot(&env.home()));
    let doc = abilities(&env, &bin, &repo, &[], |_| {});
    assert_eq!(
        doc["warnings"],
        json!(["addons: .dwp/config.json key 'emacs' is not an addon dwp ships; ignored"])
    );
    assert_eq!((snapshot(&repo), snapshot(&env.home())), before);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            }
            out.push(p);
        }
    }
    out
}

#[test]
fn invalid_descriptors_are_reported_by_abilities_and_the_audit() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let bin = env.path().join("bin");
    let marker = env.path().join("ran");
    fake(&bin, "ak", &format!("touch {}", marker.display()));
    let dir = addons_dir(&env);
    // Shell metacharacters in the command, an unknown ability, a wrong key.
    std::fs::write(
        dir.join("agentkit/addon.json"),
        r#"{"schema": "https://deepworkplan.com/schema/addon-descriptor/v1.json", "key": "agentkit",
            "detect": {"command": "ak doctor; touch /tmp/x"}, "provides_abilities": ["teleport"],
            "requires_grants": []}"#,
    )
    .unwrap();
    std::fs::write(dir.join("vim/addon.json"), "[]").unwrap();
    std::fs::remove_file(dir.join("herdr/addon.json")).unwrap();
    enable(
        &repo,
        json!({"agentkit": {"enabled": true}, "vim": {"enabled": true}}),
    );
    let doc = abilities(&env, &bin, &repo, &[], |c| {
        c.env("DWP_ADDONS_DIR", &dir);
    });
    assert!(!marker.exists());
    assert_eq!(
        doc["addons"]["agentkit"],
        json!({
            "compatible": false, "descriptor_ok": false, "detected": false, "interface": null,
            "provides": [], "reason": "invalid descriptor (detect.command is not a plain argv line)",
            "version": null
        })
    );
    assert_eq!(
        doc["warnings"],
        json!([
            "addon agentkit: invalid descriptor (detect.command is not a plain argv line)",
            "addon vim: invalid descriptor (descriptor is not an object)",
        ])
    );

    let mut cmd = env.cmd("dwp");
    cmd.args(["config", "descriptors"])
        .env("DWP_ADDONS_DIR", &dir);
    let r = run(cmd);
    r.expect(1);
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        lines[0],
        "FAIL agentkit: detect.command is not a plain argv line; provides_abilities holds an unknown or repeated value (the closed set is stop_agent, meter_spend, meter_tokens, meter_wall_clock, cancel_children, model_routing, subagents, telemetry)"
    );
    assert_eq!(lines[1], "OK   ai-diff-reviewer");
    assert!(
        lines[6].starts_with("FAIL herdr: ") && lines[6].contains("herdr/addon.json unreadable ("),
        "{}",
        lines[6]
    );
    assert_eq!(lines[7], "FAIL vim: descriptor is not an object");
    // The shipped descriptors all pass.
    let r = env.run("dwp", &["config", "descriptors"]);
    assert_eq!(
        r.expect(0)
            .stdout
            .lines()
            .filter(|l| l.starts_with("OK   "))
            .count(),
        8
    );
}

#[test]
fn backfill_records_repository_installs_only() {
    let env = TestEnv::new();
    let repo = env.git_repo(
        "repo",
        &[
            (
                ".agents/skills/ai-diff-reviewer/SKILL.md",
                "---\nversion: 3.2.3\n---\n",
            ),
            ("docs/DESIGN.md", "x"),
        ],
    );
    let bin = env.path().join("bin");
    fake(&bin, "ak", r#"echo '{"interface": 1, "version": "0.1.1"}'"#);
    // design-system is already decided (disabled): never touched.
    enable(&repo, json!({"design-system": {"enabled": false}}));
    let r = repo.to_str().unwrap();
    let out = run(dwp(&env, &bin, &["config", "backfill", "--repo", r]));
    assert_eq!(
        out.expect(0).stdout,
        "SKIP  addons.agentkit: present on this machine only\nWOULD addons.ai-diff-reviewer = enabled v3.2.3\ndry run - re-run with --write to record these\n"
    );
    let before = std::fs::read(repo.join(".dwp/config.json")).unwrap();
    assert_eq!(
        std::fs::read(repo.join(".dwp/config.json")).unwrap(),
        before
    );
    let out = run(dwp(
        &env,
        &bin,
        &["config", "backfill", "--repo", r, "--write"],
    ));
    assert!(
        out.expect(0)
            .stdout
            .contains("WROTE addons.ai-diff-reviewer = enabled v3.2.3")
    );
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(repo.join(".dwp/config.json")).unwrap())
            .unwrap();
    assert_eq!(
        doc["addons"],
        json!({
            "ai-diff-reviewer": {"enabled": true, "version": "v3.2.3", "note": "back-filled on upgrade: already installed (detected v3.2.3)"},
            "design-system": {"enabled": false}
        })
    );
    let out = run(dwp(&env, &bin, &["config", "backfill", "--repo", r]));
    assert!(
        out.expect(0)
            .stdout
            .ends_with("OK: nothing to back-fill (every present addon is already recorded)\n")
    );
    // An unreadable repository file is refused.
    write(&repo.join(".dwp/config.json"), b"[");
    let out = run(dwp(&env, &bin, &["config", "backfill", "--repo", r]));
    out.expect(2);
    assert!(out.stderr.contains("fix it before back-filling"));
}

#[test]
fn an_unreadable_registry_gives_one_warning_in_abilities() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let bin = env.path().join("bin");
    for bad in ["empty.json", "not-json.json", "array.json", "bom.json"] {
        let bytes = std::fs::read(crate::dwp_config::fixture(&format!("bad/{bad}"))).unwrap();
        write(&repo.join(".dwp/config.json"), &bytes);
        write(
            &env.home().join(".dwp/config.json"),
            br#"{"host": {"subagents": true}}"#,
        );
        let doc = abilities(&env, &bin, &repo, &[], |_| {});
        assert_eq!(doc["warnings"].as_array().unwrap().len(), 1, "{bad}: {doc}");
        assert!(
            doc["warnings"][0]
                .as_str()
                .unwrap()
                .contains(".dwp/config.json")
        );
        // The user file still counts.
        assert_eq!(
            doc["sources"]["subagents"],
            json!(["record:~/.dwp/config.json"])
        );
    }
}
