//! `dwp onboard`: consent on the command line, the `.gitignore` rules exactly once, idempotence,
//! and refusals that write nothing.

use serde_json::{Value, json};

use crate::env::{TestEnv, git};

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn onboarding_creates_the_registry_and_enables_only_what_is_named() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[(".gitignore", "target/\n# keep me\n")]);
    let r = repo.to_str().unwrap();
    let run = env.run("dwp", &["onboard", "--repo", r]);
    run.expect(0);
    assert!(
        run.stdout.contains("created .dwp/config.json"),
        "{}",
        run.stdout
    );
    assert!(run.stdout.contains("git -C"), "{}", run.stdout);
    let doc: Value = serde_json::from_str(&read(&repo.join(".dwp/config.json"))).unwrap();
    assert_eq!(
        doc,
        json!({"schema": "https://deepworkplan.com/schema/dwp-config/v1.json"}),
        "nothing is enabled by default"
    );
    assert_eq!(
        read(&repo.join(".gitignore")),
        "target/\n# keep me\n.dwp/*\n!.dwp/config.json\n"
    );

    let run = env.run(
        "dwp",
        &[
            "onboard",
            "--repo",
            r,
            "--enable",
            "agentkit@v0.1.1",
            "--enable",
            "herdr",
        ],
    );
    run.expect(0);
    assert!(
        run.stdout
            .contains("enabled addons.agentkit = {\"enabled\": true, \"version\": \"v0.1.1\"}")
    );
    let doc: Value = serde_json::from_str(&read(&repo.join(".dwp/config.json"))).unwrap();
    assert_eq!(
        doc["addons"],
        json!({"agentkit": {"enabled": true, "version": "v0.1.1"}, "herdr": {"enabled": true}})
    );
    let run = env.run("dwp", &["config", "enabled", "--repo", r]);
    assert_eq!(run.expect(0).stdout, "agentkit\nherdr\n");
}

#[test]
fn onboarding_twice_changes_nothing() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let r = repo.to_str().unwrap();
    env.run("dwp", &["onboard", "--repo", r, "--enable", "vim@v0.4.0"])
        .expect(0);
    let config = read(&repo.join(".dwp/config.json"));
    let ignore = read(&repo.join(".gitignore"));
    let mtime = std::fs::metadata(repo.join(".dwp/config.json"))
        .unwrap()
        .modified()
        .unwrap();
    let run = env.run("dwp", &["onboard", "--repo", r, "--enable", "vim@v0.4.0"]);
    run.expect(0);
    assert!(run.stdout.contains("nothing to change"), "{}", run.stdout);
    assert!(
        run.stdout.contains("already enabled: addons.vim"),
        "{}",
        run.stdout
    );
    assert_eq!(read(&repo.join(".dwp/config.json")), config);
    assert_eq!(read(&repo.join(".gitignore")), ignore);
    assert_eq!(ignore.matches(".dwp/*").count(), 1);
    assert_eq!(ignore.matches("!.dwp/config.json").count(), 1);
    assert_eq!(
        std::fs::metadata(repo.join(".dwp/config.json"))
            .unwrap()
            .modified()
            .unwrap(),
        mtime,
        "the file was not rewritten"
    );
    // Plans stay ignored, the registry is not.
    std::fs::create_dir_all(repo.join(".dwp/plans/PLAN_a_b")).unwrap();
    std::fs::write(repo.join(".dwp/plans/PLAN_a_b/manifest.json"), "{}").unwrap();
    git(&repo, &["add", "-A"]);
    let listed = git(&repo, &["ls-files"]);
    assert!(listed.contains(".dwp/config.json"), "{listed}");
    assert!(!listed.contains("PLAN_a_b"), "{listed}");
    let run = env.run("dwp", &["onboard", "--repo", r]);
    assert!(
        run.expect(0)
            .stdout
            .contains(".dwp/config.json is tracked by git")
    );
}

#[test]
fn an_existing_negation_gets_its_rule_inserted_before_it() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[(".gitignore", "a\n!.dwp/config.json\nb\n")]);
    env.run("dwp", &["onboard", "--repo", repo.to_str().unwrap()])
        .expect(0);
    assert_eq!(
        read(&repo.join(".gitignore")),
        "a\n.dwp/*\n!.dwp/config.json\nb\n"
    );
}

#[test]
fn refusals_write_nothing() {
    // A symlinked .gitignore.
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    let real = env.path().join("real-ignore");
    std::fs::write(&real, "x\n").unwrap();
    std::os::unix::fs::symlink(&real, repo.join(".gitignore")).unwrap();
    let run = env.run(
        "dwp",
        &[
            "onboard",
            "--repo",
            repo.to_str().unwrap(),
            "--enable",
            "vim",
        ],
    );
    run.expect(2);
    assert!(run.stderr.contains("symbolic link"), "{}", run.stderr);
    assert_eq!(read(&real), "x\n");
    assert!(!repo.join(".dwp").exists());

    // An unknown key or a bad version: refused before anything is written.
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[]);
    for spec in ["emacs", "vim@v1.2", "vim@"] {
        let run = env.run(
            "dwp",
            &[
                "onboard",
                "--repo",
                repo.to_str().unwrap(),
                "--enable",
                spec,
            ],
        );
        run.expect(2);
        assert!(run.stderr.starts_with("ERROR: --enable"), "{}", run.stderr);
        assert!(!repo.join(".dwp").exists());
        assert!(!repo.join(".gitignore").exists());
    }

    // An unparsable registry is never overwritten, and .gitignore is not touched either.
    std::fs::create_dir_all(repo.join(".dwp")).unwrap();
    std::fs::write(repo.join(".dwp/config.json"), "{oops").unwrap();
    let run = env.run(
        "dwp",
        &[
            "onboard",
            "--repo",
            repo.to_str().unwrap(),
            "--enable",
            "vim",
        ],
    );
    run.expect(2);
    assert_eq!(read(&repo.join(".dwp/config.json")), "{oops");
    assert!(!repo.join(".gitignore").exists());
}

#[test]
fn a_missing_repository_is_refused_and_never_created() {
    let env = TestEnv::new();
    let missing = env.path().join("does-not-exist");
    let run = env.run("dwp", &["onboard", "--repo", missing.to_str().unwrap()]);
    run.expect(3);
    assert!(run.stderr.contains("does not exist"), "{}", run.stderr);
    assert!(!missing.exists());
    let run = env.run("dwp", &["abilities", "--plan", missing.to_str().unwrap()]);
    run.expect(3);
}

#[test]
fn a_dot_dwp_file_is_a_refusal_that_changes_nothing() {
    let env = TestEnv::new();
    let repo = env.git_repo("r", &[("README", "x")]);
    std::fs::write(repo.join(".dwp"), "not a dir").unwrap();
    let run = env.run(
        "dwp",
        &["config", "enable", "vim", "--repo", repo.to_str().unwrap()],
    );
    run.expect(2);
    assert!(run.stderr.contains("not a directory"), "{}", run.stderr);
    assert_eq!(read(&repo.join(".dwp")), "not a dir");
}
