//! Git-native workspaces from the command line: `session fork` (conversation and worktree),
//! `session diff`, `session list` lineage and `--workspace` filtering, with real repositories.
//!
//! Sessions are made by real runs (`kxen-agent run` with the script provider: one glob, then an
//! answer); every command under test runs as the real binary.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::env::{Run, TestEnv, git};
use crate::run_support::{answer, call, fixer, run_new, script_config};

/// Runs an agent in `workspace` to completion. Its conversation: task, assistant (one glob call),
/// the call's result, the final answer. Returns the Session id and the message ids in order.
fn seed(env: &TestEnv, workspace: &Path) -> (String, Vec<String>) {
    let agent = fixer(env);
    let config = script_config(
        env,
        &[
            call("call_1", "glob", json!({"pattern": "*"})),
            answer("all good"),
        ],
    );
    let run = run_new(env, workspace, "look around", &agent, &config, &[]);
    run.expect(0);
    let id = run
        .jsonl()
        .iter()
        .find(|e| e["type"] == "sessionCreated")
        .unwrap()["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let ids: Vec<String> = show(env, &id)["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 4, "{:#}", show(env, &id)["messages"]);
    (id, ids)
}

/// Every file under `dir` with its bytes, to prove a command changed nothing.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<_> = walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file() && e.file_name() != "lease.json")
        .map(|e| (e.path().to_path_buf(), std::fs::read(e.path()).unwrap()))
        .collect();
    files.sort();
    files
}

/// `kxen-agent session fork PARENT --at MSG EXTRA…`.
fn fork(env: &TestEnv, parent: &str, at: &str, extra: &[&str]) -> Run {
    let mut args = vec!["session", "fork", parent, "--at", at];
    args.extend_from_slice(extra);
    env.run("kxen-agent", &args)
}

fn show(env: &TestEnv, id: &str) -> Value {
    let run = env.run("kxen-agent", &["session", "show", id]);
    run.expect(0);
    run.jsonl().remove(0)
}

fn list(env: &TestEnv, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["session", "list"];
    all.extend_from_slice(args);
    let run = env.run("kxen-agent", &all);
    run.expect(0);
    run.jsonl()
}

#[test]
fn conversation_fork_copies_the_prefix_and_never_touches_the_parent() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let (parent, msgs) = seed(&env, &repo);
    let before = snapshot(&env.state_dir().join("sessions").join(&parent));

    let run = fork(&env, &parent, &msgs[2], &[]);
    run.expect(0);
    let event = &run.jsonl()[0];
    assert_eq!(event["type"], "sessionForked");
    assert_eq!(event["messages"], 3);
    let child = event["sessionId"].as_str().unwrap().to_string();

    let shown = show(&env, &child);
    assert_eq!(shown["parentId"], parent.as_str());
    assert_eq!(shown["branchRootId"], parent.as_str());
    assert_eq!(
        shown["forkPoint"],
        json!({"messageId": msgs[2], "index": 3})
    );
    assert_eq!(shown["forkKind"], "conversation");
    assert_eq!(shown["runs"], json!([]));
    let copied: Vec<&str> = shown["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        copied,
        msgs[..3].iter().map(String::as_str).collect::<Vec<_>>()
    );
    let parent_shown = show(&env, &parent);
    assert_eq!(shown["lock"], parent_shown["lock"]);
    assert_eq!(
        shown["workspace"], parent_shown["workspace"],
        "same workspace"
    );
    assert_eq!(
        snapshot(&env.state_dir().join("sessions").join(&parent)),
        before,
        "the parent was modified"
    );

    // The fork passes the integrity check: its copy is hash chained like any log.
    env.run("kxen-agent", &["session", "verify", &child])
        .expect(0);
    env.run("kxen-agent", &["session", "verify", &parent])
        .expect(0);

    // --before, and a fork of the fork keeps the lineage root.
    let run = fork(&env, &child, &msgs[1], &["--before"]);
    run.expect(0);
    let grandchild = run.jsonl()[0]["sessionId"].as_str().unwrap().to_string();
    let shown = show(&env, &grandchild);
    assert_eq!(shown["parentId"], child.as_str());
    assert_eq!(shown["branchRootId"], parent.as_str());
    assert_eq!(shown["forkPoint"]["before"], true);
    assert_eq!(shown["messages"].as_array().unwrap().len(), 1);

    // `session show` shows the lineage both ways.
    let shown = show(&env, &grandchild);
    assert_eq!(shown["lineage"]["ancestors"], json!([parent, child]));
    assert_eq!(shown["lineage"]["forks"], json!([]));
    let shown = show(&env, &parent);
    assert_eq!(shown["lineage"]["ancestors"], json!([]));
    assert_eq!(shown["lineage"]["forks"], json!([child]));

    // Lineage in the list, newest first.
    let listed = list(&env, &[]);
    let ids: Vec<&str> = listed.iter().map(|s| s["id"].as_str().unwrap()).collect();
    let mut sorted = ids.clone();
    sorted.sort();
    sorted.reverse();
    assert_eq!(ids, sorted);
    let entry = listed
        .iter()
        .find(|s| s["id"] == grandchild.as_str())
        .unwrap();
    assert_eq!(entry["parentId"], child.as_str());
    assert_eq!(entry["forkKind"], "conversation");
    assert_eq!(
        entry["workspace"],
        repo.canonicalize().unwrap().to_str().unwrap()
    );
    let text = env.run("kxen-agent", &["--format", "text", "session", "list"]);
    assert!(
        text.stdout
            .contains(&format!("(conversation fork of {child})")),
        "{}",
        text.stdout
    );
}

#[test]
fn fork_bad_input() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let (parent, msgs) = seed(&env, &repo);
    let count = || {
        std::fs::read_dir(env.state_dir().join("sessions"))
            .unwrap()
            .count()
    };
    let sessions = count();

    let missing = kxen::ids::new_id(kxen::ids::IdKind::Message);
    let run = fork(&env, &parent, &missing, &[]);
    run.expect(3);
    assert!(run.stderr.contains(&missing), "{}", run.stderr);
    assert!(run.stderr.contains("session show"), "{}", run.stderr);

    for bad in ["a/b", "", "x y", &"n".repeat(65)] {
        let run = fork(&env, &parent, &msgs[3], &["--worktree", bad]);
        run.expect(2);
        assert!(run.stderr.contains("worktree name"), "{}", run.stderr);
    }

    // Keeping the tool call without its result is refused, naming the message to use.
    let run = fork(&env, &parent, &msgs[1], &[]);
    run.expect(4);
    assert!(run.stderr.contains(&msgs[2]), "{}", run.stderr);

    let run = fork(&env, "ses_0000000000aaaaaaaaaaaaaaaa", &msgs[0], &[]);
    run.expect(3);
    assert_eq!(count(), sessions, "a failed fork wrote a Session");
    assert_eq!(git(&repo, &["branch", "--list", "kxen/*"]), "");
}

#[test]
fn worktree_fork_gets_its_own_branch_and_checkout() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let (parent, msgs) = seed(&env, &repo);
    // The parent's HEAD advanced since its creation: the worktree starts from the current HEAD.
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "later"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    // Uncommitted changes stay behind, with a warning.
    std::fs::write(repo.join("a.txt"), "changed\n").unwrap();

    let run = fork(&env, &parent, &msgs[3], &["--worktree", "try-1"]);
    run.expect(0);
    let warning = &run.jsonl()[0];
    assert_eq!(warning["type"], "warning");
    assert!(
        warning["message"]
            .as_str()
            .unwrap()
            .contains("uncommitted changes"),
        "{warning}"
    );
    let event = &run.jsonl()[1];
    let child = event["sessionId"].as_str().unwrap().to_string();
    let wt = repo.canonicalize().unwrap().join(".kxen/worktrees/try-1");
    assert_eq!(event["worktree"], wt.to_str().unwrap());
    assert_eq!(event["branch"], "kxen/try-1");

    let list = git(&repo, &["worktree", "list"]);
    assert!(list.contains("[kxen/try-1]"), "{list}");
    assert_eq!(git(&wt, &["rev-parse", "HEAD"]), head);
    assert_eq!(std::fs::read_to_string(wt.join("a.txt")).unwrap(), "a\n");
    git(&repo, &["checkout", "--", "a.txt"]);
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        "",
        ".kxen/ must be excluded"
    );
    assert!(
        std::fs::read_to_string(repo.join(".git/info/exclude"))
            .unwrap()
            .contains(".kxen/")
    );

    let shown = show(&env, &child);
    assert_eq!(shown["forkKind"], "worktree");
    assert_eq!(shown["workspace"]["root"], wt.to_str().unwrap());
    assert_eq!(shown["workspace"]["branch"], "kxen/try-1");
    assert_eq!(shown["workspace"]["head"], head.as_str());
    let parent_shown = show(&env, &parent);
    assert_eq!(
        shown["workspace"]["identityHash"],
        parent_shown["workspace"]["identityHash"]
    );

    // Never reused: the same name again (path and branch exist), or a taken branch.
    let sessions = std::fs::read_dir(env.state_dir().join("sessions"))
        .unwrap()
        .count();
    let run = fork(&env, &parent, &msgs[3], &["--worktree", "try-1"]);
    run.expect(5);
    assert!(run.stderr.contains("already exists"), "{}", run.stderr);
    git(&repo, &["branch", "kxen/taken"]);
    let run = fork(&env, &parent, &msgs[3], &["--worktree", "taken"]);
    run.expect(5);
    assert!(run.stderr.contains("kxen/taken"), "{}", run.stderr);
    assert!(!repo.join(".kxen/worktrees/taken").exists());
    assert_eq!(
        std::fs::read_dir(env.state_dir().join("sessions"))
            .unwrap()
            .count(),
        sessions
    );

    // A worktree fork of a worktree fork lands beside it and keeps the lineage root.
    let run = fork(&env, &child, &msgs[3], &["--worktree", "try-2"]);
    run.expect(0);
    let grandchild = run.jsonl()[0]["sessionId"].as_str().unwrap().to_string();
    let shown = show(&env, &grandchild);
    assert_eq!(shown["branchRootId"], parent.as_str());
    assert!(repo.join(".kxen/worktrees/try-2").is_dir());
}

#[test]
fn a_failed_worktree_fork_leaves_no_worktree_branch_or_session() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    // The Session works in a subdirectory that is not committed: the new worktree cannot have
    // it, so the fork fails after the worktree was created and must roll it back.
    std::fs::create_dir_all(repo.join("scratch")).unwrap();
    let (parent, msgs) = seed(&env, &repo.join("scratch"));
    let sessions = std::fs::read_dir(env.state_dir().join("sessions"))
        .unwrap()
        .count();

    let run = fork(&env, &parent, &msgs[3], &["--worktree", "doomed"]);
    run.expect(3);
    assert!(run.stderr.contains("scratch"), "{}", run.stderr);
    assert!(!git(&repo, &["worktree", "list"]).contains("doomed"));
    assert_eq!(git(&repo, &["branch", "--list", "kxen/*"]), "");
    assert!(!repo.join(".kxen/worktrees/doomed").exists());
    assert_eq!(
        std::fs::read_dir(env.state_dir().join("sessions"))
            .unwrap()
            .count(),
        sessions
    );

    // A committed subdirectory works, and the fork is bound to the same subdirectory.
    std::fs::write(repo.join("scratch/keep.txt"), "k\n").unwrap();
    git(&repo, &["add", "scratch"]);
    git(&repo, &["commit", "-q", "-m", "scratch"]);
    let run = fork(&env, &parent, &msgs[3], &["--worktree", "doomed"]);
    run.expect(0);
    let child = run.jsonl()[0]["sessionId"].as_str().unwrap().to_string();
    let root = repo
        .canonicalize()
        .unwrap()
        .join(".kxen/worktrees/doomed/scratch");
    assert_eq!(
        show(&env, &child)["workspace"]["root"],
        root.to_str().unwrap()
    );
}

#[test]
fn worktree_fork_outside_git_is_refused() {
    let env = TestEnv::new();
    let plain = env.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let (parent, msgs) = seed(&env, &plain);
    let run = fork(&env, &parent, &msgs[3], &["--worktree", "x"]);
    run.expect(4);
    assert!(
        run.stderr.contains("not a git repository"),
        "{}",
        run.stderr
    );
}

#[test]
fn diff_of_a_fork_and_its_parent_shows_the_fork_point() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let (parent, msgs) = seed(&env, &repo);
    let run = fork(&env, &parent, &msgs[2], &[]);
    let child = run.jsonl()[0]["sessionId"].as_str().unwrap().to_string();

    let run = env.run(
        "kxen-agent",
        &["--format", "json", "session", "diff", &parent, &child],
    );
    run.expect(0);
    let d = &run.jsonl()[0];
    assert_eq!(d["type"], "sessionDiff");
    assert_eq!(d["commonPrefix"], 3);
    assert_eq!(d["b"]["forkPoint"]["index"], 3);
    assert_eq!(d["divergingA"].as_array().unwrap().len(), 1);
    assert_eq!(d["divergingA"][0]["id"], msgs[3].as_str());
    assert_eq!(d["divergingB"], json!([]));
    assert_eq!(d["lockEqual"], true);
    assert_eq!(d["workspaceEqual"], true);

    let text = env.run(
        "kxen-agent",
        &["--format", "text", "session", "diff", &parent, &child],
    );
    text.expect(0);
    assert!(
        text.stdout.contains("3 common message(s)"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains(&format!("-#4 assistant {}", msgs[3])),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("-  | all good"), "{}", text.stdout);
    assert!(
        text.stdout.contains(&format!(
            "{child} is a fork of {parent} at message 3 ({})",
            msgs[2]
        )),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("== lock: identical"),
        "{}",
        text.stdout
    );

    // Unrelated Sessions share nothing; their bindings differ.
    let other = env.git_repo("other", &[("b.txt", "b\n")]);
    let (unrelated, _) = seed(&env, &other);
    let run = env.run("kxen-agent", &["session", "diff", &parent, &unrelated]);
    run.expect(0);
    let d = &run.jsonl()[0];
    assert_eq!(d["commonPrefix"], 0);
    assert_eq!(d["workspaceEqual"], false);
    assert!(
        d["workspaceDiff"]
            .as_str()
            .unwrap()
            .contains("identityHash")
    );

    // Read-only, and unknown ids are exit 3.
    let before = snapshot(&env.state_dir());
    env.run(
        "kxen-agent",
        &["session", "diff", &parent, "ses_0000000000aaaaaaaaaaaaaaaa"],
    )
    .expect(3);
    assert_eq!(snapshot(&env.state_dir()), before);
}

#[test]
fn list_filters_by_repository_identity_across_remote_forms_and_stores_no_token() {
    let env = TestEnv::new();
    let forms = [
        "https://x-access-token:ghp_TOPSECRET42@github.com/acme/widget.git",
        "git@github.com:acme/widget.git",
        "ssh://git@github.com/acme/widget",
    ];
    let mut same = Vec::new();
    for (i, url) in forms.iter().enumerate() {
        let repo = env.git_repo(&format!("clone{i}"), &[("f.txt", &format!("{i}\n"))]);
        git(&repo, &["remote", "add", "origin", url]);
        same.push(seed(&env, &repo).0);
    }
    let other = env.git_repo("other", &[("g.txt", "g\n")]);
    git(
        &other,
        &["remote", "add", "origin", "git@github.com:acme/gadget.git"],
    );
    let (different, _) = seed(&env, &other);

    // Filtering from a subdirectory of one clone finds all three forms and nothing else.
    let sub = env.path().join("clone2/deep");
    std::fs::create_dir_all(&sub).unwrap();
    let found = list(&env, &["--workspace", sub.to_str().unwrap()]);
    let mut ids: Vec<String> = found
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    let mut expected = same.clone();
    expected.sort();
    assert_eq!(ids, expected);
    let found = list(&env, &["--workspace", other.to_str().unwrap()]);
    assert_eq!(found.len(), 1);
    assert_eq!(found[0]["id"], different.as_str());

    let run = env.run(
        "kxen-agent",
        &["session", "list", "--workspace", "/nonexistent/x"],
    );
    run.expect(3);
    assert!(run.stderr.contains("/nonexistent/x"), "{}", run.stderr);

    // No token anywhere in the state dir.
    for (path, bytes) in snapshot(&env.state_dir()) {
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains("TOPSECRET"), "token in {}", path.display());
        assert!(
            !text.contains("x-access-token"),
            "userinfo in {}",
            path.display()
        );
    }
}

/// A repository whose config names programs (fsmonitor, a filter driver selected by the
/// committed attributes, a hooks path): `session fork --worktree` runs git there, and git must
/// run none of them.
#[test]
fn worktree_fork_runs_no_program_the_repository_config_names() {
    let env = TestEnv::new();
    let repo = env.git_repo(
        "repo",
        &[("a.txt", "a\n"), (".gitattributes", "* filter=evil\n")],
    );
    let (parent, msgs) = seed(&env, &repo);
    let canaries = env.path().join("canaries");
    std::fs::create_dir_all(&canaries).unwrap();
    let hooks = env.path().join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let c = canaries.display();
    for hook in ["post-checkout", "reference-transaction"] {
        let path = hooks.join(hook);
        std::fs::write(&path, format!("#!/bin/sh\ntouch {c}/hook-{hook}\n")).unwrap();
        let mut perms = std::fs::metadata(&path).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
        std::fs::set_permissions(&path, perms).unwrap();
    }
    // Appended by hand: a git command here would run the planted programs itself.
    let mut config = std::fs::read_to_string(repo.join(".git/config")).unwrap();
    config.push_str(&format!(
        "[core]\n\tfsmonitor = \"touch {c}/fsmonitor; false\"\n\thooksPath = {h}\n\
         \tpager = \"touch {c}/pager; cat\"\n\
         [filter \"evil\"]\n\tsmudge = \"touch {c}/smudge; cat\"\n\tclean = \"touch {c}/clean; cat\"\n\
         \tprocess = \"touch {c}/process\"\n\trequired = true\n",
        h = hooks.display()
    ));
    std::fs::write(repo.join(".git/config"), config).unwrap();
    // A tracked file changed, so status has something to compare (through clean, if it ran).
    std::fs::write(repo.join("a.txt"), "changed\n").unwrap();

    let run = fork(&env, &parent, &msgs[3], &["--worktree", "safe"]);
    run.expect(0);
    let ran: Vec<_> = std::fs::read_dir(&canaries)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(ran.is_empty(), "git ran repository programs: {ran:?}");
    assert_eq!(
        std::fs::read_to_string(repo.join(".kxen/worktrees/safe/a.txt")).unwrap(),
        "a\n"
    );
}

/// A key `-c` cannot override (its subsection holds `=`) is refused, not run.
#[test]
fn worktree_fork_refuses_a_program_it_cannot_neutralize() {
    let env = TestEnv::new();
    let repo = env.git_repo(
        "repo",
        &[("a.txt", "a\n"), (".gitattributes", "* filter=a=b\n")],
    );
    let (parent, msgs) = seed(&env, &repo);
    let canary = env.path().join("canary");
    let mut config = std::fs::read_to_string(repo.join(".git/config")).unwrap();
    config.push_str(&format!(
        "[filter \"a=b\"]\n\tsmudge = \"touch {}; cat\"\n",
        canary.display()
    ));
    std::fs::write(repo.join(".git/config"), config).unwrap();
    let run = fork(&env, &parent, &msgs[3], &["--worktree", "nope"]);
    run.expect(6);
    assert!(run.stderr.contains("filter.a=b.smudge"), "{}", run.stderr);
    assert!(!canary.exists());
    assert!(!repo.join(".kxen/worktrees/nope").exists());
}

/// An agent without `exec` cannot plant a program for git through `write` or `edit`.
#[test]
fn write_and_edit_cannot_plant_git_programs() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let before = std::fs::read_to_string(repo.join(".git/config")).unwrap();
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "write",
                json!({"path": ".git/config", "content": "[core]\n\tfsmonitor = touch pwned\n"}),
            ),
            call(
                "c2",
                "write",
                json!({"path": ".git/info/attributes", "content": "* filter=evil\n"}),
            ),
            call(
                "c3",
                "edit",
                json!({"path": ".git/config", "oldString": "[core]", "newString": "[core]\n\tfsmonitor = touch pwned"}),
            ),
            answer("tried"),
        ],
    );
    let run = run_new(&env, &repo, "plant", &agent, &config, &[]);
    run.expect(0);
    let results: Vec<Value> = run
        .jsonl()
        .into_iter()
        .filter(|e| e["type"] == "toolFinished")
        .collect();
    assert_eq!(results.len(), 3, "{}", run.stdout);
    for r in &results {
        assert_eq!(r["isError"], true, "{r}");
        assert!(
            r["output"]
                .as_str()
                .unwrap()
                .contains("inside a git directory"),
            "{r}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(repo.join(".git/config")).unwrap(),
        before
    );
    assert!(!repo.join(".git/info/attributes").exists());
}
