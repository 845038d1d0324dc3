//! Tests of the git layer against real repositories built with the git CLI.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::error::ErrorKind;

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A repository at `base/name` with one commit on `main`. The content names the repository:
/// two repositories made in the same second with the same content would share their root commit
/// (commit ids are content hashes), and then they *are* one repository by our identity rule.
fn repo(base: &Path, name: &str) -> PathBuf {
    let dir = base.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("a.txt"), format!("{name}\n")).unwrap();
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-q", "-m", "initial"]);
    dir
}

fn commit(dir: &Path, msg: &str) -> String {
    git(dir, &["commit", "-q", "--allow-empty", "-m", msg]);
    git(dir, &["rev-parse", "HEAD"])
}

#[track_caller]
fn expect_err<T: std::fmt::Debug>(r: crate::Result<T>, kind: ErrorKind) -> crate::Error {
    let err = r.unwrap_err();
    assert_eq!(err.kind, kind, "{err:?}");
    err
}

#[test]
fn one_remote_in_every_form_is_one_identity_and_never_stores_a_token() {
    let tmp = tempfile::tempdir().unwrap();
    let forms = [
        "https://ghp_SECRETTOKEN123@github.com/o/r.git",
        "git@github.com:o/r.git",
        "ssh://git@github.com/o/r",
        "ssh://git@GitHub.com:22/o/r/",
    ];
    let mut identities = Vec::new();
    for (i, url) in forms.iter().enumerate() {
        let dir = repo(tmp.path(), &format!("r{i}"));
        git(&dir, &["remote", "add", "origin", url]);
        let (binding, warnings) = capture(&dir).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(binding.identity_kind, IdentityKind::Remote);
        assert_eq!(
            binding.remote_hash.as_deref(),
            Some(crate::hash::sha256_prefixed(b"github.com/o/r").as_str())
        );
        let json = serde_json::to_string(&binding).unwrap();
        assert!(!json.contains("SECRET"), "{json}");
        assert!(
            !json.contains("github"),
            "the remote is stored only as a hash: {json}"
        );
        identities.push(binding.identity_hash);
    }
    identities.dedup();
    assert_eq!(identities.len(), 1);
}

#[test]
fn origin_wins_else_first_remote_by_name_and_local_remotes_do_not_count() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = repo(tmp.path(), "r");
    git(
        &dir,
        &["remote", "add", "zeta", "https://example.org/z/z.git"],
    );
    git(
        &dir,
        &["remote", "add", "alpha", "https://example.org/a/a.git"],
    );
    let (b, _) = capture(&dir).unwrap();
    assert_eq!(
        b.remote_hash,
        Some(crate::hash::sha256_prefixed(b"example.org/a/a"))
    );
    git(&dir, &["remote", "add", "origin", "/some/local/path.git"]);
    let (b, warnings) = capture(&dir).unwrap();
    assert_eq!(
        b.remote_hash,
        Some(crate::hash::sha256_prefixed(b"example.org/a/a"))
    );
    assert!(
        warnings[0].contains("`origin` is a local path"),
        "{warnings:?}"
    );
    git(
        &dir,
        &["remote", "set-url", "origin", "git@example.org:o/main.git"],
    );
    let (b, _) = capture(&dir).unwrap();
    assert_eq!(
        b.remote_hash,
        Some(crate::hash::sha256_prefixed(b"example.org/o/main"))
    );
}

#[test]
fn remote_less_repo_is_identified_by_its_root_commit_across_clones() {
    let tmp = tempfile::tempdir().unwrap();
    let a = repo(tmp.path(), "a");
    let root = git(&a, &["rev-parse", "HEAD"]);
    commit(&a, "second");
    let (ba, warnings) = capture(&a).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(ba.identity_kind, IdentityKind::RootCommit);
    assert_eq!(
        ba.identity_hash,
        crate::hash::sha256_prefixed(format!("rootCommit:{root}").as_bytes())
    );
    // A clone elsewhere: origin is a local path, so identity falls back to the root commit.
    git(tmp.path(), &["clone", "-q", a.to_str().unwrap(), "b"]);
    let (bb, warnings) = capture(&tmp.path().join("b")).unwrap();
    assert_eq!(bb.identity_kind, IdentityKind::RootCommit);
    assert_eq!(bb.identity_hash, ba.identity_hash);
    assert!(warnings.iter().any(|w| w.contains("local path")));
    // A merge of an unrelated history does not change it (first parents only).
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    git(&other, &["init", "-q", "-b", "main"]);
    std::fs::write(other.join("b.txt"), "b\n").unwrap();
    git(&other, &["add", "-A"]);
    git(&other, &["commit", "-q", "-m", "unrelated"]);
    git(&a, &["fetch", "-q", other.to_str().unwrap(), "main:other"]);
    git(
        &a,
        &[
            "merge",
            "-q",
            "--allow-unrelated-histories",
            "-m",
            "merge",
            "other",
        ],
    );
    assert_eq!(capture(&a).unwrap().0.identity_hash, ba.identity_hash);
}

#[test]
fn subdirectory_discovery_and_canonical_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = repo(tmp.path(), "r");
    std::fs::create_dir_all(dir.join("sub/deeper")).unwrap();
    let via = dir.join("sub/../sub/deeper");
    let (b, _) = capture(&via).unwrap();
    let canonical = dir.canonicalize().unwrap();
    assert_eq!(b.root, canonical.join("sub/deeper"));
    assert_eq!(b.repository_root.as_deref(), Some(canonical.as_path()));
    assert_eq!(b.identity_hash, capture(&dir).unwrap().0.identity_hash);
    assert_eq!(b.branch.as_deref(), Some("main"));
    assert_eq!(b.head, Some(git(&dir, &["rev-parse", "HEAD"])));
}

#[test]
fn empty_repository_is_bound_to_its_path_with_a_warning() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("empty");
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "trunk"]);
    let (b, warnings) = capture(&dir).unwrap();
    assert_eq!(b.identity_kind, IdentityKind::Path);
    assert_eq!(b.branch.as_deref(), Some("trunk"));
    assert_eq!(b.head, None);
    assert_eq!(warnings.len(), 1);
    assert!(warnings[0].contains("cannot be moved"), "{warnings:?}");
    // The agent's first commit does not change which repository this is.
    commit(&dir, "first");
    let v = verify(&b, &dir, false).unwrap();
    assert_eq!(v.binding.identity_hash, b.identity_hash);
    assert!(v.current_head.is_some());
}

#[test]
fn outside_git_is_the_canonical_path_and_survives_git_init() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("plain");
    std::fs::create_dir_all(&dir).unwrap();
    let (b, warnings) = capture(&dir).unwrap();
    assert!(warnings.is_empty());
    assert_eq!(b.identity_kind, IdentityKind::Path);
    assert_eq!(b.repository_root, None);
    assert_eq!(b.branch, None);
    let canonical = dir.canonicalize().unwrap();
    assert_eq!(
        b.identity_hash,
        crate::hash::sha256_prefixed(format!("path:{}", canonical.display()).as_bytes())
    );
    let json = serde_json::to_value(&b).unwrap();
    assert_eq!(json["identityKind"], "path");
    assert!(json.get("branch").is_none());
    verify(&b, &dir, false).unwrap();
    git(&dir, &["init", "-q"]);
    verify(&b, &dir, false).unwrap();
}

#[test]
fn missing_workspace_and_file_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope");
    let err = expect_err(capture(&missing), ErrorKind::NotFound);
    assert!(err.message.contains("nope"), "{err:?}");
    let file = tmp.path().join("file.txt");
    std::fs::write(&file, "x").unwrap();
    let err = expect_err(capture(&file), ErrorKind::InvalidInput);
    assert!(err.message.contains("file.txt"), "{err:?}");
}

#[test]
fn binding_round_trips_through_json() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = repo(tmp.path(), "r");
    let (b, _) = capture(&dir).unwrap();
    let json = serde_json::to_value(&b).unwrap();
    for key in [
        "root",
        "identityHash",
        "identityKind",
        "repositoryRoot",
        "branch",
        "head",
    ] {
        assert!(json.get(key).is_some(), "{key} missing in {json}");
    }
    assert_eq!(json["identityKind"], "rootCommit");
    assert!(
        json["identityHash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    let back: WorkspaceBinding = serde_json::from_value(json).unwrap();
    assert_eq!(back, b);
}

#[test]
fn head_may_advance_but_not_rewind_diverge_or_switch_branch() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = repo(tmp.path(), "r");
    let start = commit(&dir, "second");
    let (b, _) = capture(&dir).unwrap();
    let v = verify(&b, &dir, false).unwrap();
    assert_eq!(v.rebound_from, None);
    assert_eq!(v.binding, b);

    let advanced = commit(&dir, "third");
    let v = verify(&b, &dir, false).unwrap();
    assert_eq!(v.binding, b, "the recorded HEAD is kept");
    assert_eq!(v.current_head.as_deref(), Some(advanced.as_str()));

    git(&dir, &["reset", "-q", "--hard", "HEAD~2"]);
    let err = expect_err(verify(&b, &dir, false), ErrorKind::Conflict);
    let now = git(&dir, &["rev-parse", "HEAD"]);
    assert!(
        err.message.contains(&start) && err.message.contains(&now),
        "{err:?}"
    );
    assert!(err.message.contains("rewound or diverged"));
    assert!(!err.hints.is_empty());

    commit(&dir, "diverged");
    expect_err(verify(&b, &dir, false), ErrorKind::Conflict);

    git(&dir, &["reset", "-q", "--hard", &advanced]);
    verify(&b, &dir, false).unwrap();
    git(&dir, &["switch", "-q", "-c", "other"]);
    let err = expect_err(verify(&b, &dir, false), ErrorKind::Conflict);
    assert!(
        err.message.contains("`other`") && err.message.contains("`main`"),
        "{err:?}"
    );
    git(&dir, &["switch", "-q", "--detach", "main"]);
    let err = expect_err(verify(&b, &dir, false), ErrorKind::Conflict);
    assert!(err.message.contains("detached"), "{err:?}");
}

#[test]
fn detached_session_accepts_any_detached_head_that_contains_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = repo(tmp.path(), "r");
    git(&dir, &["switch", "-q", "--detach", "HEAD"]);
    let (b, _) = capture(&dir).unwrap();
    assert_eq!(b.branch, None);
    commit(&dir, "on detached");
    verify(&b, &dir, false).unwrap();
    git(&dir, &["switch", "-q", "main"]);
    expect_err(verify(&b, &dir, false), ErrorKind::Conflict);
}

#[test]
fn rebind_needs_the_flag_and_the_same_repository() {
    let tmp = tempfile::tempdir().unwrap();
    let a = repo(tmp.path(), "a");
    let (b, _) = capture(&a).unwrap();
    git(tmp.path(), &["clone", "-q", a.to_str().unwrap(), "moved"]);
    let moved = tmp.path().join("moved");

    let err = expect_err(verify(&b, &moved, false), ErrorKind::Conflict);
    assert!(err.hints[0].contains("--rebind-workspace"), "{err:?}");

    let v = verify(&b, &moved, true).unwrap();
    assert_eq!(v.rebound_from.as_deref(), Some(b.root.as_path()));
    assert_eq!(v.binding.root, moved.canonicalize().unwrap());
    assert_eq!(v.binding.identity_hash, b.identity_hash);

    let other = repo(tmp.path(), "other");
    let err = expect_err(verify(&b, &other, true), ErrorKind::Conflict);
    assert!(
        err.message.contains("not the Session's repository"),
        "{err:?}"
    );

    // The same repository on another branch is refused even with the flag.
    git(&moved, &["switch", "-q", "-c", "feature"]);
    expect_err(verify(&b, &moved, true), ErrorKind::Conflict);

    // A plain directory is not the repository either.
    let plain = tmp.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    expect_err(verify(&b, &plain, true), ErrorKind::Conflict);
}

#[test]
fn rebind_of_a_copy_missing_the_recorded_head_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let a = repo(tmp.path(), "a");
    git(tmp.path(), &["clone", "-q", a.to_str().unwrap(), "copy"]);
    let ahead = commit(&a, "only in a");
    let (b, _) = capture(&a).unwrap();
    assert_eq!(b.head.as_deref(), Some(ahead.as_str()));
    let err = expect_err(
        verify(&b, &tmp.path().join("copy"), true),
        ErrorKind::Conflict,
    );
    assert!(err.message.contains(&ahead), "{err:?}");
}

#[test]
fn vanished_workspace_names_the_stored_path() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = repo(tmp.path(), "gone");
    let (b, _) = capture(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let err = expect_err(verify(&b, &b.root, false), ErrorKind::NotFound);
    assert!(
        err.message.contains(&b.root.display().to_string()),
        "{err:?}"
    );
}

#[test]
fn leftover_lock_files_are_reported_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = repo(tmp.path(), "r");
    let (b, _) = capture(&dir).unwrap();
    for lock in [
        ".git/index.lock",
        ".git/HEAD.lock",
        ".git/refs/heads/main.lock",
    ] {
        let path = dir.join(lock);
        std::fs::write(&path, "").unwrap();
        let err = expect_err(capture(&dir), ErrorKind::Conflict);
        assert!(err.message.contains(lock), "{err:?}");
        assert!(err.hints[0].contains("no git process"), "{err:?}");
        expect_err(verify(&b, &dir, false), ErrorKind::Conflict);
        assert!(path.exists(), "never deleted");
        std::fs::remove_file(&path).unwrap();
    }
    capture(&dir).unwrap();
}

#[test]
fn worktree_add_and_rollback() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = repo(tmp.path(), "r");
    std::fs::write(dir.join(".gitignore"), "target/\n").unwrap();
    git(&dir, &["add", ".gitignore"]);
    let head = commit(&dir, "ignore");
    let wt = add_worktree(&dir, "fix-1", &head).unwrap();
    let canonical = dir.canonicalize().unwrap();
    assert_eq!(wt, canonical.join(".kxen/worktrees/fix-1"));
    assert!(git(&dir, &["worktree", "list"]).contains("[kxen/fix-1]"));
    assert_eq!(git(&wt, &["rev-parse", "HEAD"]), head);
    // .kxen/ is excluded locally, the committed .gitignore untouched, the status clean.
    let exclude = std::fs::read_to_string(dir.join(".git/info/exclude")).unwrap();
    assert_eq!(exclude.lines().filter(|l| *l == ".kxen/").count(), 1);
    assert_eq!(
        std::fs::read_to_string(dir.join(".gitignore")).unwrap(),
        "target/\n"
    );
    assert_eq!(git(&dir, &["status", "--porcelain"]), "");
    // The fork's binding: same identity, branch kxen/fix-1, from any worktree.
    let (main_b, _) = capture(&dir).unwrap();
    let (wt_b, _) = capture(&wt).unwrap();
    assert_eq!(wt_b.identity_hash, main_b.identity_hash);
    assert_eq!(wt_b.branch.as_deref(), Some("kxen/fix-1"));
    assert_eq!(wt_b.repository_root.as_deref(), Some(wt.as_path()));

    // Never reused: the path exists, or the branch exists.
    let err = expect_err(add_worktree(&dir, "fix-1", &head), ErrorKind::Conflict);
    assert!(err.message.contains("already exists"), "{err:?}");
    git(&dir, &["branch", "kxen/taken"]);
    let err = expect_err(add_worktree(&dir, "taken", &head), ErrorKind::Conflict);
    assert!(err.message.contains("kxen/taken"), "{err:?}");
    assert!(!dir.join(".kxen/worktrees/taken").exists());

    // A fork of the fork: made from inside the worktree, lands beside it.
    let nested = add_worktree(&wt, "fix-2", &head).unwrap();
    assert_eq!(nested, canonical.join(".kxen/worktrees/fix-2"));

    remove_worktree(&dir, "fix-1").unwrap();
    remove_worktree(&dir, "fix-2").unwrap();
    assert!(!wt.exists());
    let list = git(&dir, &["worktree", "list"]);
    assert!(!list.contains("kxen/"), "{list}");
    assert_eq!(git(&dir, &["branch", "--list", "kxen/fix-*"]), "");
    // Excluded once, even after a second add.
    add_worktree(&dir, "again", &head).unwrap();
    let exclude = std::fs::read_to_string(dir.join(".git/info/exclude")).unwrap();
    assert_eq!(exclude.lines().filter(|l| *l == ".kxen/").count(), 1);
}

#[test]
fn worktree_bad_input() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = repo(tmp.path(), "r");
    let head = git(&dir, &["rev-parse", "HEAD"]);
    for bad in ["", "a/b", "..", "a b", "ü", "a.b", &"x".repeat(65)] {
        expect_err(add_worktree(&dir, bad, &head), ErrorKind::Usage);
    }
    validate_worktree_name(&"x".repeat(64)).unwrap();
    validate_worktree_name("A-z_09").unwrap();
    expect_err(add_worktree(&dir, "ok", "HEAD"), ErrorKind::NotFound);
    expect_err(
        add_worktree(&dir, "ok", &"0".repeat(40)),
        ErrorKind::NotFound,
    );
    assert!(!dir.join(".kxen/worktrees/ok").exists());
    assert_eq!(git(&dir, &["branch", "--list", "kxen/*"]), "");
}

#[test]
fn failed_worktree_add_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = repo(tmp.path(), "r");
    let head = git(&dir, &["rev-parse", "HEAD"]);
    // A branch named `kxen` makes `kxen/NAME` impossible to create: git fails half-way.
    git(&dir, &["branch", "kxen"]);
    let err = expect_err(add_worktree(&dir, "x", &head), ErrorKind::External);
    assert!(err.message.contains("git worktree add"), "{err:?}");
    assert!(!dir.join(".kxen/worktrees/x").exists());
    assert!(!git(&dir, &["worktree", "list"]).contains(".kxen"));
}

#[test]
fn identity_probe_matches_by_the_stored_rule() {
    let tmp = tempfile::tempdir().unwrap();
    let a = repo(tmp.path(), "a");
    let (ba, _) = capture(&a).unwrap();
    git(tmp.path(), &["clone", "-q", a.to_str().unwrap(), "clone"]);
    let other = repo(tmp.path(), "other");
    let (bo, _) = capture(&other).unwrap();
    let plain = tmp.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    let (bp, _) = capture(&plain).unwrap();

    let mut probe = IdentityProbe::new(&tmp.path().join("clone")).unwrap();
    assert!(probe.matches(&ba).unwrap());
    assert!(!probe.matches(&bo).unwrap());
    assert!(!probe.matches(&bp).unwrap());
    let mut probe = IdentityProbe::new(&plain).unwrap();
    assert!(probe.matches(&bp).unwrap());
    assert!(!probe.matches(&ba).unwrap());
    // Read-only: a leftover lock does not stop a probe.
    std::fs::write(a.join(".git/index.lock"), "").unwrap();
    assert!(IdentityProbe::new(&a).unwrap().matches(&ba).unwrap());
}

#[test]
fn is_tracked_asks_the_index() {
    let tmp = tempfile::tempdir().unwrap();
    let plain = tmp.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    assert_eq!(super::is_tracked(&plain, "a.txt"), None);
    let dir = repo(tmp.path(), "tracked");
    std::fs::write(dir.join("new.txt"), "n\n").unwrap();
    assert_eq!(super::is_tracked(&dir, "a.txt"), Some(true));
    assert_eq!(super::is_tracked(&dir, "new.txt"), Some(false));
}

#[test]
fn a_lock_file_that_goes_away_was_a_live_git_process() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = repo(tmp.path(), "r");
    let git_dir = dir.join(".git");
    let lock = git_dir.join("packed-refs.lock");
    std::fs::write(&lock, "").unwrap();
    let remover = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(150));
            std::fs::remove_file(lock).unwrap();
        })
    };
    super::locks::check_within(&git_dir, &git_dir, std::time::Duration::from_secs(5)).unwrap();
    remover.join().unwrap();
    // One that stays is named.
    std::fs::write(&lock, "").unwrap();
    let err = super::locks::check_within(&git_dir, &git_dir, std::time::Duration::from_millis(200))
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Conflict);
    assert!(err.message.contains("packed-refs.lock"), "{err:?}");
}

#[test]
fn a_scratch_ref_is_deleted_without_packed_refs_lock_and_only_a_scratch_ref() {
    let base = tempfile::tempdir().unwrap();
    let dir = repo(base.path(), "scratch");
    let head = git(&dir, &["rev-parse", "HEAD"]);
    git(&dir, &["pack-refs", "--all"]);
    let store = ObjectStore::open(&dir).unwrap();
    let name = "refs/kxen/fetch/1-ab/sessions/ses_x";
    store.update_ref(name, &head, None).unwrap();
    // A lock a killed process left: a loose scratch ref is deleted all the same, with the
    // directories above it.
    std::fs::write(dir.join(".git/packed-refs.lock"), "").unwrap();
    store.delete_scratch_ref(name, &head).unwrap();
    assert_eq!(store.read_ref(name).unwrap(), None);
    assert!(!dir.join(".git/refs/kxen").join("fetch").exists());
    std::fs::remove_file(dir.join(".git/packed-refs.lock")).unwrap();
    // One that `git pack-refs` packed meanwhile goes through a ref transaction.
    store.update_ref(name, &head, None).unwrap();
    git(&dir, &["pack-refs", "--all"]);
    store.delete_scratch_ref(name, &head).unwrap();
    assert_eq!(store.read_ref(name).unwrap(), None);
    assert!(!git(&dir, &["for-each-ref"]).contains("refs/kxen/"));
    // Packed and still loose (a `pack-refs` that has not pruned): both go.
    store.update_ref(name, &head, None).unwrap();
    git(&dir, &["pack-refs", "--all", "--no-prune"]);
    store.delete_scratch_ref(name, &head).unwrap();
    assert!(!git(&dir, &["for-each-ref"]).contains("refs/kxen/"));
    // A compare-and-swap that lost is a conflict of its own, not another file's lock.
    std::fs::write(dir.join(".git/index.lock"), "").unwrap();
    store.update_ref(name, &head, None).unwrap();
    let err = expect_err(
        store.update_ref(name, &head, Some(&"1".repeat(40))),
        ErrorKind::Conflict,
    );
    assert!(
        err.message.contains("changed by another process") && !err.message.contains("index.lock"),
        "{err:?}"
    );
    std::fs::remove_file(dir.join(".git/index.lock")).unwrap();
    store.delete_scratch_ref(name, &head).unwrap();
    // Nothing but a scratch ref, and no way out of refs/kxen/fetch.
    for other in ["refs/heads/main", "refs/kxen/fetch/../../heads/main"] {
        expect_err(
            store.delete_scratch_ref(other, &head),
            ErrorKind::InvalidInput,
        );
    }
    assert_eq!(git(&dir, &["rev-parse", "refs/heads/main"]), head);
}
