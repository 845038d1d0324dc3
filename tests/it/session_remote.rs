//! Sessions through git remotes: a bare repository on disk is the remote, two clones with their
//! own state dirs are two machines. Push, pull, stale pushes, the remote lease (concurrent
//! claims, a killed holder, take-over), a tampered snapshot and the canary.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::env::{Run, TestEnv, git, snapshot};
use crate::run_support::*;

const CANARY: &str = "sk-canary-remote-7f31c9";

/// The remote and two machines.
pub struct Machines {
    pub env: TestEnv,
    pub remote: PathBuf,
    pub ws: [PathBuf; 2],
    pub state: [PathBuf; 2],
    pub agent: PathBuf,
}

pub fn machines() -> Machines {
    let env = TestEnv::new();
    let origin = env.git_repo("origin", &[("README.md", "hello remote\n")]);
    let remote = env.path().join("remote.git");
    git(
        env.path(),
        &[
            "clone",
            "-q",
            "--bare",
            origin.to_str().unwrap(),
            remote.to_str().unwrap(),
        ],
    );
    for clone in ["a", "b"] {
        git(
            env.path(),
            &["clone", "-q", remote.to_str().unwrap(), clone],
        );
    }
    let ws = [env.path().join("a"), env.path().join("b")];
    let state = [env.path().join("state-a"), env.path().join("state-b")];
    let agent = fixer(&env);
    Machines {
        env,
        remote,
        ws,
        state,
        agent,
    }
}

impl Machines {
    /// `kxen-agent --state-dir <machine's> ARGS…`, in the machine's clone.
    pub fn cmd(&self, m: usize, args: &[&str]) -> Command {
        let mut cmd = self.env.cmd("kxen-agent");
        cmd.arg("--state-dir")
            .arg(&self.state[m])
            .args(args)
            .current_dir(&self.ws[m]);
        cmd
    }

    pub fn run(&self, m: usize, args: &[&str]) -> Run {
        Run::from(self.cmd(m, args).output().unwrap())
    }

    /// `session pull ID --workspace <machine's clone>` on machine `m`.
    pub fn pull_cmd(&self, m: usize, id: &str) -> Command {
        self.cmd(
            m,
            &[
                "session",
                "pull",
                id,
                "--workspace",
                self.ws[m].to_str().unwrap(),
            ],
        )
    }

    pub fn pull(&self, m: usize, id: &str) -> Run {
        Run::from(self.pull_cmd(m, id).output().unwrap())
    }

    /// A task tree (a delegator, two children one after the other) whose run on machine 0
    /// dies after the first child's first call. Returns the config and the parent's Session id.
    pub fn killed_task_tree(&self) -> (PathBuf, String) {
        let agent = crate::task::delegator(&self.env, 8);
        let config = crate::task::two_children_script(&self.env);
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str("\n[tools]\nparallel = 1\n");
        std::fs::write(&config, text).unwrap();
        let mut crashed = self.cmd(
            0,
            &["run", "--task", "Check both", "--allow-shell", "--agent"],
        );
        crashed
            .arg(&agent)
            .arg("--config")
            .arg(&config)
            .env("KXEN_FAILPOINT", "tool.after-outcome-known");
        assert_eq!(crashed.output().unwrap().status.code(), None);
        let listed = self.run(0, &["session", "list"]).jsonl();
        let parent = listed.iter().find(|s| s["parentId"].is_null()).unwrap()["id"]
            .as_str()
            .unwrap()
            .to_string();
        (config, parent)
    }

    /// The dot-named entries (staging and swap leftovers) in machine `m`'s `sessions/`.
    pub fn leftovers(&self, m: usize) -> Vec<String> {
        std::fs::read_dir(self.state[m].join("sessions"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect()
    }

    /// A first run on machine `m` with `config`; returns the Session id.
    pub fn first_run(&self, m: usize, config: &Path, extra: &[&str]) -> String {
        let mut cmd = self.cmd(m, &["run", "--task", "Read the README", "--agent"]);
        cmd.arg(&self.agent).arg("--config").arg(config).args(extra);
        let out = Run::from(cmd.output().unwrap());
        out.expect(0);
        finished(&out.jsonl())["sessionId"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// `--resume SES --remote origin --task TEXT` on machine `m`.
    pub fn remote_resume(&self, m: usize, id: &str, config: &Path, extra: &[&str]) -> Command {
        let mut cmd = self.cmd(
            m,
            &[
                "--resume", id, "--remote", "origin", "--task", "Go on", "--config",
            ],
        );
        cmd.arg(config).args(extra);
        cmd
    }

    /// The refs of the bare remote under `refs/kxen/`.
    pub fn remote_refs(&self) -> Vec<String> {
        let out = git(
            &self.remote,
            &["for-each-ref", "--format=%(refname)", "refs/kxen/"],
        );
        out.lines().map(str::to_string).collect()
    }
}

/// A Session directory's files, without the run lease's holder record (which taking the lease
/// rewrites, as every command that takes it does).
fn session_files(dir: &Path) -> std::collections::BTreeMap<String, Option<Vec<u8>>> {
    let mut files = snapshot(dir);
    files.remove("lease.json");
    files
}

fn config_of(env: &TestEnv, answers: usize) -> PathBuf {
    let mut turns = vec![call("call_1", "read", json!({"path": "README.md"}))];
    for i in 0..answers {
        turns.push(answer(&format!("answer {i}")));
    }
    script_config(env, &turns)
}

/// A first run on machine A (4 answers), pushed: its config and Session id.
fn pushed_first_run(m: &Machines) -> (PathBuf, String) {
    let config = config_of(&m.env, 4);
    let id = m.first_run(0, &config, &[]);
    m.run(0, &["session", "push", &id]).expect(0);
    (config, id)
}

/// Machine A resumes `id` for one more task and pushes the new snapshot.
fn run_on_and_push(m: &Machines, config: &Path, id: &str) {
    let mut more = m.cmd(0, &["--resume", id, "--task", "More", "--config"]);
    more.arg(config);
    Run::from(more.output().unwrap()).expect(0);
    m.run(0, &["session", "push", id]).expect(0);
}

#[test]
fn a_session_moves_between_machines_through_the_remote_and_a_stale_push_is_refused() {
    let m = machines();
    let config = config_of(&m.env, 4);
    let id = m.first_run(0, &config, &[]);

    // A pushes; nothing of the clone's working tree, index or branches changes.
    let before = git(&m.ws[0], &["status", "--porcelain", "--ignored"]);
    let heads = git(&m.ws[0], &["for-each-ref", "refs/heads", "refs/remotes"]);
    let pushed = m.run(0, &["session", "push", &id]);
    pushed.expect(0);
    let line = &pushed.jsonl()[0];
    assert_eq!(line["type"], "sessionPushed");
    assert_eq!(line["remote"], "origin");
    let first = line["snapshot"].as_str().unwrap().to_string();
    assert_eq!(
        git(&m.ws[0], &["status", "--porcelain", "--ignored"]),
        before
    );
    assert_eq!(
        git(&m.ws[0], &["for-each-ref", "refs/heads", "refs/remotes"]),
        heads
    );
    assert_eq!(
        m.remote_refs(),
        vec![format!("refs/kxen/sessions/{id}")],
        "only the snapshot ref, outside refs/heads"
    );
    // Pushing again without a change sends nothing new.
    let again = m.run(0, &["session", "push", &id]);
    again.expect(0);
    assert_eq!(again.jsonl()[0]["snapshot"], first.as_str());
    assert_eq!(again.jsonl()[0]["changed"], false);

    // The remote lists it.
    let listed = m.run(1, &["session", "list", "--remote", "origin"]);
    listed.expect(0);
    assert_eq!(listed.jsonl()[0]["sessionId"], id.as_str());
    assert_eq!(listed.jsonl()[0]["leased"], false);

    // B resumes it through the remote: claim, pull (import), run, push, release.
    let resumed = Run::from(m.remote_resume(1, &id, &config, &[]).output().unwrap());
    resumed.expect(0);
    let events = resumed.jsonl();
    assert_eq!(finished(&events)["status"], "completed");
    let pushed_b = events
        .iter()
        .find(|e| e["type"] == "sessionPushed")
        .expect("the run's end pushed a snapshot");
    let second = pushed_b["snapshot"].as_str().unwrap().to_string();
    assert_eq!(
        git(&m.remote, &["rev-parse", &format!("{second}^")]),
        first,
        "one commit per push, parent = the previous snapshot"
    );
    assert_eq!(
        m.remote_refs(),
        vec![format!("refs/kxen/sessions/{id}")],
        "the lease is released"
    );
    m.run(1, &["session", "verify", &id]).expect(0);

    // A runs on from its stale copy, then tries to push: refused, never forced.
    let mut local = m.cmd(0, &["--resume", &id, "--task", "Stale", "--config"]);
    local.arg(&config);
    Run::from(local.output().unwrap()).expect(0);
    let stale = m.run(0, &["session", "push", &id]);
    stale.expect(5);
    assert!(stale.stderr.contains("session pull"), "{}", stale.stderr);
    assert_eq!(
        git(
            &m.remote,
            &["rev-parse", &format!("refs/kxen/sessions/{id}")]
        ),
        second
    );
    // And pulling names the diverging run; A's copy is unchanged.
    let dir_a = m.state[0].join("sessions").join(&id);
    let kept = session_files(&dir_a);
    let diverged = m.pull(0, &id);
    diverged.expect(5);
    assert!(
        diverged.stderr.contains("diverged at run run_"),
        "{}",
        diverged.stderr
    );
    assert!(session_files(&dir_a) == kept, "A's copy changed");

    // B's copy is behind nothing: pulling is up to date.
    let up = m.pull(1, &id);
    up.expect(0);
    assert_eq!(up.jsonl()[0]["action"], "upToDate");
}

#[test]
fn a_pull_fast_forwards_an_ancestor_copy() {
    let m = machines();
    let (config, id) = pushed_first_run(&m);
    m.pull(1, &id).expect(0);
    // A runs on and pushes; B fast-forwards.
    run_on_and_push(&m, &config, &id);
    let ff = m.pull(1, &id);
    ff.expect(0);
    assert_eq!(ff.jsonl()[0]["action"], "fastForwarded");
    assert_eq!(ff.jsonl()[0]["runs"], 2);
    m.run(1, &["session", "verify", &id]).expect(0);
    let shown = m.run(1, &["session", "show", &id]);
    shown.expect(0);
    assert_eq!(shown.jsonl()[0]["runs"].as_array().unwrap().len(), 2);
}

#[test]
fn a_pull_leaves_no_scratch_ref_and_a_lock_file_left_behind_is_named() {
    let m = machines();
    let (config, id) = pushed_first_run(&m);
    m.pull(1, &id).expect(0);
    let git_dir = m.ws[1].join(".git");
    assert!(
        !git_dir.join("refs/kxen/fetch").exists(),
        "a scratch ref is left"
    );
    // As a process killed in a ref deletion leaves it: a pull with nothing to move still works
    // (its scratch ref is removed without packed-refs.lock).
    std::fs::write(git_dir.join("packed-refs.lock"), "").unwrap();
    let again = m.pull(1, &id);
    again.expect(0);
    assert_eq!(again.jsonl()[0]["action"], "upToDate");
    assert!(
        !git_dir.join("refs/kxen/fetch").exists(),
        "a scratch ref is left"
    );
    // One that changes the Session here refuses up front naming the lock file (the workspace
    // check every import makes), and nothing moves.
    run_on_and_push(&m, &config, &id);
    let dir_b = m.state[1].join("sessions").join(&id);
    let kept = session_files(&dir_b);
    let blocked = m.pull(1, &id);
    blocked.expect(5);
    assert!(session_files(&dir_b) == kept, "B's copy changed");
    assert!(
        blocked.stderr.contains("packed-refs.lock"),
        "{}",
        blocked.stderr
    );
    std::fs::remove_file(git_dir.join("packed-refs.lock")).unwrap();
    m.pull(1, &id).expect(0);
}

/// The Sessions of machine `m`'s state dir (`session list`).
fn sessions_of(m: &Machines, machine: usize) -> Vec<Value> {
    let out = m.run(machine, &["session", "list"]);
    out.expect(0);
    out.jsonl()
}

#[test]
fn a_pull_fast_forwards_task_children_that_exist_here() {
    let m = machines();
    // One child after the other; A dies after the first child's first call.
    let (config, parent) = m.killed_task_tree();
    let listed = sessions_of(&m, 0);
    let first_child = listed.iter().find(|s| s["forkKind"] == "task").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    m.run(0, &["session", "push", &parent]).expect(0);
    let pulled = m.pull(1, &parent);
    pulled.expect(0);
    assert_eq!(pulled.jsonl()[0]["action"], "imported");
    assert_eq!(sessions_of(&m, 1).len(), 2);

    // A recovers and finishes the tree (the first child runs on, a second one is made), pushes.
    let mut resumed = m.cmd(0, &["--resume", &parent, "--allow-shell", "--config"]);
    resumed.arg(&config);
    Run::from(resumed.output().unwrap()).expect(0);
    m.run(0, &["session", "push", &parent]).expect(0);
    assert_eq!(sessions_of(&m, 0).len(), 3);

    // B's parent and first child are ancestors of the remote's: both fast-forward, the second
    // child arrives.
    let ff = m.pull(1, &parent);
    ff.expect(0);
    assert_eq!(ff.jsonl()[0]["action"], "fastForwarded");
    let there = sessions_of(&m, 1);
    assert_eq!(there.len(), 3, "{there:?}");
    for s in &there {
        let sid = s["id"].as_str().unwrap();
        m.run(1, &["session", "verify", sid]).expect(0);
        let files = |machine: usize| {
            let mut f = session_files(&m.state[machine].join("sessions").join(sid));
            f.retain(|k, _| k.ends_with(".jsonl"));
            f
        };
        assert!(files(0) == files(1), "{sid} differs from A's copy");
    }
    let child_dir = m.state[1].join("sessions").join(&first_child);
    assert!(child_dir.join("session.json").is_file());
    // Nothing left over in B's state dir, and a second pull has nothing to do.
    let leftovers = m.leftovers(1);
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let again = m.pull(1, &parent);
    again.expect(0);
    assert_eq!(again.jsonl()[0]["action"], "upToDate");
}

/// A scratch clone of the remote with the snapshot of `id` at `refs/t` and a private index:
/// rewrites the snapshot as an attacker with push access (or an older kxen-agent) could.
struct Rewriter {
    dir: PathBuf,
    index: PathBuf,
    reference: String,
}

impl Rewriter {
    fn new(m: &Machines, id: &str) -> Rewriter {
        let dir = m.env.path().join("rewrite");
        if !dir.exists() {
            git(
                m.env.path(),
                &["clone", "-q", m.remote.to_str().unwrap(), "rewrite"],
            );
        }
        let reference = format!("refs/kxen/sessions/{id}");
        git(
            &dir,
            &["fetch", "-q", "origin", &format!("+{reference}:refs/t")],
        );
        let r = Rewriter {
            index: dir.join("rewrite.index"),
            dir,
            reference,
        };
        r.git(&["read-tree", "refs/t"], None);
        r
    }

    /// `git ARGS` with the private index, `stdin` fed in.
    fn git(&self, args: &[&str], stdin: Option<&[u8]>) -> String {
        let mut cmd = Command::new("git");
        cmd.args(args)
            .current_dir(&self.dir)
            .env("GIT_INDEX_FILE", &self.index)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "x")
            .env("GIT_AUTHOR_EMAIL", "x@x")
            .env("GIT_COMMITTER_NAME", "x")
            .env("GIT_COMMITTER_EMAIL", "x@x")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        {
            use std::io::Write;
            let mut input = child.stdin.take().unwrap();
            if let Some(s) = stdin {
                input.write_all(s).unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// The paths of the snapshot's blobs.
    fn paths(&self) -> Vec<String> {
        self.git(&["ls-tree", "-r", "--name-only", "refs/t"], None)
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn read(&self, path: &str) -> Vec<u8> {
        let out = Command::new("git")
            .args(["cat-file", "blob", &format!("refs/t:{path}")])
            .current_dir(&self.dir)
            .output()
            .unwrap();
        assert!(out.status.success());
        out.stdout
    }

    /// Sets `path` to `content` (a new blob).
    fn put(&self, path: &str, content: &[u8]) {
        let blob = self.git(&["hash-object", "-w", "--stdin"], Some(content));
        self.git(
            &["update-index", "--add", "--index-info"],
            Some(format!("100644 {blob}\t{path}\n").as_bytes()),
        );
    }

    fn remove(&self, path: &str) {
        self.git(&["update-index", "--force-remove", path], None);
    }

    /// Commits the index on top of the snapshot and pushes it (a fast-forward).
    fn push(&self) {
        let tree = self.git(&["write-tree"], None);
        let commit = self.git(
            &["commit-tree", &tree, "-p", "refs/t", "-m", "edited"],
            None,
        );
        git(
            &self.dir,
            &[
                "push",
                "-q",
                "origin",
                &format!("{commit}:{}", self.reference),
            ],
        );
    }
}

/// Rewrites the snapshot on the remote with one journal segment edited (manifest unchanged), as
/// an attacker with push access could, fast-forward.
fn tamper(m: &Machines, id: &str) {
    let r = Rewriter::new(m, id);
    let segment = r
        .paths()
        .into_iter()
        .find(|l| l.contains("/journal.jsonl/"))
        .unwrap();
    let content = String::from_utf8(r.read(&segment)).unwrap();
    assert!(content.contains("hello remote"), "{content}");
    r.put(
        &segment,
        content.replace("hello remote", "HELLO REMOTE").as_bytes(),
    );
    r.push();
}

#[test]
fn a_tampered_snapshot_is_refused_and_nothing_local_changes() {
    let m = machines();
    let (_, id) = pushed_first_run(&m);
    tamper(&m, &id);
    // Into an empty state dir: refused, nothing created.
    let refs_before = git(&m.ws[1], &["for-each-ref"]);
    let refused = m.pull(1, &id);
    refused.expect(10);
    assert!(refused.stderr.contains("damaged"), "{}", refused.stderr);
    assert!(
        !m.state[1].join("sessions").join(&id).exists(),
        "nothing imported"
    );
    let left: Vec<String> = snapshot(&m.state[1].join("sessions"))
        .into_keys()
        .filter(|k| !k.is_empty())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert_eq!(git(&m.ws[1], &["for-each-ref"]), refs_before);

    // Over an existing copy (A's own, an ancestor of the tampered one): refused, unchanged.
    let dir_a = m.state[0].join("sessions").join(&id);
    let kept = session_files(&dir_a);
    let over = m.pull(0, &id);
    over.expect(10);
    assert!(session_files(&dir_a) == kept, "A's copy changed");
}

/// The snapshot's segmented files: file path → its segment paths, in order.
fn segmented(paths: &[String]) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for p in paths {
        if let Some((file, _)) = p.rsplit_once('/')
            && (file.ends_with("/journal.jsonl") || file == "messages.jsonl")
        {
            out.entry(file.to_string()).or_default().push(p.clone());
        }
    }
    out
}

#[test]
fn a_v1_snapshot_of_the_first_release_still_pulls() {
    let m = machines();
    let (config, id) = pushed_first_run(&m);
    // Rewrite it in the first release's layout: every file one blob, format v1.
    let r = Rewriter::new(&m, &id);
    let files = segmented(&r.paths());
    assert!(files.contains_key("messages.jsonl"), "{files:?}");
    let mut whole = Vec::new();
    for (file, parts) in &files {
        let content: Vec<u8> = parts.iter().flat_map(|p| r.read(p)).collect();
        for p in parts {
            r.remove(p);
        }
        whole.push((file.clone(), content));
    }
    for (file, content) in &whole {
        r.put(file, content);
    }
    let mut header: Value = serde_json::from_slice(&r.read("kxen-snapshot.json")).unwrap();
    assert_eq!(header["format"], "kxen-snapshot/v2");
    header["format"] = json!("kxen-snapshot/v1");
    header.as_object_mut().unwrap().remove("segmentBytes");
    r.put(
        "kxen-snapshot.json",
        &serde_json::to_vec_pretty(&header).unwrap(),
    );
    r.push();

    let pulled = m.pull(1, &id);
    pulled.expect(0);
    assert_eq!(pulled.jsonl()[0]["action"], "imported");
    m.run(1, &["session", "verify", &id]).expect(0);
    let a = m.state[0].join("sessions").join(&id).join("messages.jsonl");
    let b = m.state[1].join("sessions").join(&id).join("messages.jsonl");
    assert_eq!(std::fs::read(a).unwrap(), std::fs::read(b).unwrap());

    // A's next push (v2 again) follows the v1 snapshot as its parent.
    let mut more = m.cmd(1, &["--resume", &id, "--task", "More", "--config"]);
    more.arg(&config);
    Run::from(more.output().unwrap()).expect(0);
    m.run(1, &["session", "push", &id]).expect(0);
}

#[test]
fn a_snapshot_in_another_layout_or_an_unknown_format_is_refused() {
    let m = machines();
    let (_, id) = pushed_first_run(&m);

    // The journal split at its first line end: the same bytes (every checksum holds), but not
    // the one layout a push writes.
    let r = Rewriter::new(&m, &id);
    let (_, parts) = segmented(&r.paths())
        .into_iter()
        .find(|(f, _)| f.ends_with("journal.jsonl"))
        .unwrap();
    assert_eq!(parts.len(), 1, "{parts:?}");
    let content = r.read(&parts[0]);
    let cut = content.iter().position(|&b| b == b'\n').unwrap() + 1;
    assert!(cut < content.len());
    let dir = parts[0].rsplit_once('/').unwrap().0;
    r.put(&format!("{dir}/000000"), &content[..cut]);
    r.put(&format!("{dir}/000001"), &content[cut..]);
    r.push();
    pull_refused_as_damaged(&m, &id, "does not end at the first line end");

    // A format from the future: named, exit 10.
    let r = Rewriter::new(&m, &id);
    let mut header: Value = serde_json::from_slice(&r.read("kxen-snapshot.json")).unwrap();
    header["format"] = json!("kxen-snapshot/v9");
    r.put(
        "kxen-snapshot.json",
        &serde_json::to_vec_pretty(&header).unwrap(),
    );
    r.push();
    let refused = m.pull(1, &id);
    refused.expect(10);
    assert!(
        refused
            .stderr
            .contains("\"kxen-snapshot/v9\" is not supported"),
        "{}",
        refused.stderr
    );
}

/// Machine B's pull of `id` is refused as damage (exit 10) for `why`, and imports nothing.
fn pull_refused_as_damaged(m: &Machines, id: &str, why: &str) {
    let refused = m.pull(1, id);
    refused.expect(10);
    assert!(refused.stderr.contains(why), "{}", refused.stderr);
    assert!(!m.state[1].join("sessions").join(id).exists());
}

/// Rewrites the snapshot's manifest after `edit` changed its file list, with every size and
/// checksum recomputed: a snapshot only its content can refuse.
fn rewrite_manifest(r: &Rewriter, edit: impl FnOnce(&mut Vec<Value>)) {
    let mut header: Value = serde_json::from_slice(&r.read("kxen-snapshot.json")).unwrap();
    let mut files: Vec<Value> = header["manifest"]["files"].as_array().unwrap().clone();
    edit(&mut files);
    let compact = serde_json::to_string(&files).unwrap();
    header["manifest"]["filesSha256"] = json!(kxen::hash::sha256_prefixed(compact.as_bytes()));
    header["manifest"]["files"] = json!(files);
    r.put(
        "kxen-snapshot.json",
        &serde_json::to_vec_pretty(&header).unwrap(),
    );
}

#[test]
fn a_consistent_snapshot_with_a_foreign_file_or_binary_text_is_refused() {
    let m = machines();
    let (_, id) = pushed_first_run(&m);

    // A file no Session holds, listed in the manifest with its true size and checksum.
    let r = Rewriter::new(&m, &id);
    let planted = b"#!/bin/sh\necho planted\n";
    r.put("hooks.sh", planted);
    rewrite_manifest(&r, |files| {
        files.push(json!({
            "path": "hooks.sh",
            "bytes": planted.len(),
            "sha256": kxen::hash::sha256_prefixed(planted),
        }))
    });
    r.push();
    pull_refused_as_damaged(&m, &id, "\"hooks.sh\" is not one a Session holds");
    let left: Vec<String> = snapshot(&m.state[1].join("sessions"))
        .into_keys()
        .filter(|k| !k.is_empty())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");

    // The journal with a byte that is not UTF-8, its manifest entry recomputed.
    let r = Rewriter::new(&m, &id);
    r.remove("hooks.sh");
    let (file, parts) = segmented(&r.paths())
        .into_iter()
        .find(|(f, _)| f.ends_with("journal.jsonl"))
        .unwrap();
    let mut content = r.read(&parts[0]);
    let at = content.windows(5).position(|w| w == b"hello").unwrap();
    content[at] = 0xff;
    r.put(&parts[0], &content);
    let whole: Vec<u8> = parts.iter().flat_map(|p| r.read(p)).collect();
    rewrite_manifest(&r, |files| {
        files.retain(|f| f["path"] != "hooks.sh");
        let entry = files
            .iter_mut()
            .find(|f| f["path"] == file.as_str())
            .unwrap();
        entry["sha256"] = json!(kxen::hash::sha256_prefixed(&whole));
    });
    r.push();
    pull_refused_as_damaged(&m, &id, "is not UTF-8 text");

    // The manifest's order is the bundle's, and its rules hold: session.json first, and only
    // first (refused before any content is read).
    let r = Rewriter::new(&m, &id);
    rewrite_manifest(&r, |files| {
        let first = files.remove(0);
        files.push(first);
    });
    r.push();
    pull_refused_as_damaged(&m, &id, "session.json must be the first file");
}

/// Bytes each push sends to the remote (`remote.origin.receivepack` in the test HOME's global
/// config points at a wrapper that copies its input, one file per connection).
fn record_pushes(m: &Machines) -> PathBuf {
    let dir = m.env.path().join("received");
    std::fs::create_dir_all(&dir).unwrap();
    let wrapper = m.env.path().join("receive-wrapper");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ntee \"{}/$(date +%s%N)\" | git receive-pack \"$@\"\n",
            dir.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let gitconfig = m.env.home().join(".gitconfig");
    let mut config = std::fs::read_to_string(&gitconfig).unwrap_or_default();
    config.push_str(&format!(
        "[remote \"origin\"]\n\treceivepack = {}\n",
        wrapper.display()
    ));
    std::fs::write(&gitconfig, config).unwrap();
    dir
}

/// The sizes of the recorded pushes, oldest first, and forgets them.
fn pushed_bytes(dir: &Path) -> Vec<u64> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let n = e.metadata().unwrap().len();
            let name = e.file_name().to_string_lossy().into_owned();
            std::fs::remove_file(e.path()).unwrap();
            (name, n)
        })
        .collect();
    files.sort();
    files.into_iter().map(|(_, n)| n).collect()
}

#[test]
fn a_second_push_sends_only_new_segments() {
    let m = machines();
    // Enough calls for a journal and a message log of several segments, then ten more.
    let agent = m.env.path().join("many.yaml");
    std::fs::write(
        &agent,
        "apiVersion: kxen.ai/v1alpha1\nkind: DCPAgent\nmetadata: {name: many}\nspec:\n  \
         objective: Read a file many times.\n  instructions: [Read.]\n  successCriteria: []\n  \
         capabilities: {required: [read], optional: []}\n  \
         execution: {maxTurns: 1024, maxRepeatedCalls: 0}\n  \
         output: {format: text, requiredFields: []}\n",
    )
    .unwrap();
    let read = |i: usize| call(&format!("call_{i}"), "read", json!({"path": "README.md"}));
    let mut turns: Vec<Value> = (0..300).map(read).collect();
    turns.push(answer("Done."));
    turns.extend((300..310).map(read));
    turns.push(answer("Done again."));
    let config = script_config(&m.env, &turns);
    let received = record_pushes(&m);
    let mut first = m.cmd(0, &["run", "--task", "Read it often", "--agent"]);
    first.arg(&agent).arg("--config").arg(&config);
    let out = Run::from(first.output().unwrap());
    out.expect(0);
    let id = finished(&out.jsonl())["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    m.run(0, &["session", "push", &id]).expect(0);
    let reference = format!("refs/kxen/sessions/{id}");
    let s1 = git(&m.ws[0], &["rev-parse", &reference]);
    let tree = |commit: &str| -> std::collections::BTreeMap<String, String> {
        git(&m.ws[0], &["ls-tree", "-r", commit])
            .lines()
            .map(|l| {
                let (meta, path) = l.split_once('\t').unwrap();
                (
                    path.to_string(),
                    meta.rsplit(' ').next().unwrap().to_string(),
                )
            })
            .collect()
    };
    let before = tree(&s1);
    let files_before = segmented(&before.keys().cloned().collect::<Vec<_>>());
    let max_segments = files_before.values().map(Vec::len).max().unwrap();
    assert!(max_segments >= 3, "{files_before:?}");

    let mut more = m.cmd(0, &["--resume", &id, "--task", "Ten more", "--config"]);
    more.arg(&config);
    Run::from(more.output().unwrap()).expect(0);
    m.run(0, &["session", "push", &id]).expect(0);
    let s2 = git(&m.ws[0], &["rev-parse", &reference]);
    let after = tree(&s2);
    // Every closed segment of the first snapshot is the same blob in the second.
    for parts in files_before.values() {
        for p in &parts[..parts.len() - 1] {
            assert_eq!(before[p], after[p], "{p} changed");
        }
    }
    // The second push's new blobs are open or new segments and the current-state files only.
    let new: Vec<String> = git(&m.ws[0], &["rev-list", "--objects", &s2, &format!("^{s1}")])
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(_, p)| p.to_string()))
        .filter(|p| after.contains_key(p))
        .collect();
    for p in &new {
        let closed = files_before
            .values()
            .any(|parts| parts[..parts.len() - 1].contains(p));
        assert!(!closed, "{p} was sent again");
    }
    let sent = pushed_bytes(&received);
    assert_eq!(sent.len(), 2, "{sent:?}");
    eprintln!(
        "bytes sent: first push {}, second push {}",
        sent[0], sent[1]
    );
    assert!(sent[1] * 3 < sent[0], "the second push sent {sent:?}");
}

#[test]
fn no_canary_reaches_a_pushed_object() {
    let m = machines();
    let config = script_config(
        &m.env,
        &[
            call("call_1", "exec", json!({"command": "env; echo PROBE-DONE"})),
            answer("Done."),
            answer("Done again."),
        ],
    );
    let mut first = m.cmd(0, &["run", "--task", "Probe", "--allow-shell", "--agent"]);
    first
        .arg(&m.agent)
        .arg("--config")
        .arg(&config)
        .env("OPENAI_API_KEY", CANARY)
        .env("KXEN_TEST_CANARY_KEY", CANARY)
        .env("GITHUB_TOKEN", CANARY);
    let out = Run::from(first.output().unwrap());
    out.expect(0);
    assert!(out.stdout.contains("PROBE-DONE"));
    let id = finished(&out.jsonl())["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let mut push = m.cmd(0, &["session", "push", &id]);
    push.env("OPENAI_API_KEY", CANARY)
        .env("GITHUB_TOKEN", CANARY);
    Run::from(push.output().unwrap()).expect(0);
    let mut resumed = m.remote_resume(1, &id, &config, &["--allow-shell", "--push-every", "1"]);
    resumed
        .env("OPENAI_API_KEY", CANARY)
        .env("KXEN_TEST_CANARY_KEY", CANARY)
        .env("GITHUB_TOKEN", CANARY);
    Run::from(resumed.output().unwrap()).expect(0);
    for repo in [&m.remote, &m.ws[0].join(".git"), &m.ws[1].join(".git")] {
        let out = Command::new("git")
            .args(["cat-file", "--batch-all-objects", "--batch"])
            .current_dir(repo)
            .output()
            .unwrap();
        assert!(out.status.success());
        let all = String::from_utf8_lossy(&out.stdout);
        assert!(all.contains("PROBE-DONE"), "the tool output was pushed");
        assert!(
            !all.contains(CANARY),
            "the canary reached a git object in {}",
            repo.display()
        );
    }
}

/// Starts 6 claimers (3 per machine) at once; returns their exit codes and stderr.
fn claim_race(m: &Machines, id: &str, config: &Path) -> Vec<(i32, String)> {
    let children: Vec<_> = (0..6)
        .map(|i| {
            m.remote_resume(i % 2, id, config, &[])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            (
                out.status.code().unwrap_or(-1),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )
        })
        .collect()
}

#[test]
fn six_claimers_on_two_machines_one_runs_fifty_times() {
    const TRIALS: usize = 50;
    let m = machines();
    // One call, then one answer per trial (every trial's winner adds one run).
    let config = config_of(&m.env, TRIALS + 2);
    let id = m.first_run(0, &config, &[]);
    m.run(0, &["session", "push", &id]).expect(0);
    for trial in 0..TRIALS {
        let results = claim_race(&m, &id, &config);
        let winners = results.iter().filter(|(c, _)| *c == 0).count();
        assert_eq!(winners, 1, "trial {trial}: {results:#?}");
        for (code, stderr) in results.iter().filter(|(c, _)| *c != 0) {
            assert_eq!(*code, 5, "trial {trial}: {stderr}");
            assert!(
                stderr.contains("leased on `origin` by another runner")
                    || stderr.contains("claimed on `origin` by another runner"),
                "trial {trial}: {stderr}"
            );
        }
        assert_eq!(
            m.remote_refs(),
            vec![format!("refs/kxen/sessions/{id}")],
            "trial {trial}: the lease is released"
        );
    }
    // Every trial's run is in the remote's snapshot, in one linear history.
    let pulled = m.pull(1, &id);
    assert!(pulled.code == 0, "{}", pulled.stderr);
    let shown = m.run(1, &["session", "show", &id]);
    shown.expect(0);
    assert_eq!(
        shown.jsonl()[0]["runs"].as_array().unwrap().len(),
        TRIALS + 1
    );
}

#[test]
fn a_killed_holder_keeps_the_lease_until_its_ttl_then_a_taker_recovers_without_rerunning() {
    let m = machines();
    let marker = "ran.txt";
    let config = script_config(
        &m.env,
        &[
            answer("First."),
            call(
                "call_1",
                "exec",
                json!({"command": format!("echo ran >> {marker}; sleep 60")}),
            ),
            answer("Recovered."),
            answer("Done."),
        ],
    );
    let mut first = m.cmd(0, &["run", "--task", "Start", "--allow-shell", "--agent"]);
    first.arg(&m.agent).arg("--config").arg(&config);
    let out = Run::from(first.output().unwrap());
    out.expect(0);
    let id = finished(&out.jsonl())["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    m.run(0, &["session", "push", &id]).expect(0);

    // A holds the lease (TTL 3 s), pushes the call's start before it runs, and is killed.
    let mut holder = m
        .remote_resume(
            0,
            &id,
            &config,
            &["--allow-shell", "--push-every", "1", "--lease-ttl", "3"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let ran = m.ws[0].join(marker);
    let start = Instant::now();
    while !ran.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the call never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Renewals keep it alive past its TTL while the holder lives.
    std::thread::sleep(Duration::from_millis(3500));
    let alive = Run::from(
        m.remote_resume(1, &id, &config, &["--take-expired-lease", "--allow-shell"])
            .output()
            .unwrap(),
    );
    alive.expect(5);
    assert!(alive.stderr.contains("has not expired"), "{}", alive.stderr);
    holder.kill().unwrap();
    holder.wait().unwrap();
    let killed_at = Instant::now();

    // Until the TTL passes, B is refused (with and without --take-expired-lease).
    let refused = Run::from(
        m.remote_resume(1, &id, &config, &["--allow-shell"])
            .output()
            .unwrap(),
    );
    refused.expect(5);
    assert!(
        refused
            .stderr
            .contains("leased on `origin` by another runner"),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("--take-expired-lease"),
        "{}",
        refused.stderr
    );
    if killed_at.elapsed() < Duration::from_secs(2) {
        let early = Run::from(
            m.remote_resume(1, &id, &config, &["--take-expired-lease", "--allow-shell"])
                .output()
                .unwrap(),
        );
        early.expect(5);
    }
    std::thread::sleep(
        Duration::from_secs(3).saturating_sub(killed_at.elapsed()) + Duration::from_millis(500),
    );

    // B takes the expired lease over: the call A started is UNKNOWN, not run again.
    let mut taken = m.cmd(1, &["--resume", &id, "--remote", "origin", "--config"]);
    taken
        .arg(&config)
        .args(["--take-expired-lease", "--allow-shell"]);
    let taken = Run::from(taken.output().unwrap());
    taken.expect(7);
    // A warning event of the run (stdout, JSONL when piped).
    assert!(
        taken.stdout.contains("took over the expired remote lease"),
        "{}",
        taken.stdout
    );
    assert!(taken.stderr.contains("is unknown"), "{}", taken.stderr);
    assert!(!m.ws[1].join(marker).exists(), "the call ran again on B");
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "ran\n");
    assert_eq!(m.remote_refs(), vec![format!("refs/kxen/sessions/{id}")]);

    // Resolved, the run completes on B; the call still ran once.
    let list = m.run(1, &["session", "show", &id]);
    let shown: Value = list.jsonl().remove(0);
    let run = shown["runs"].as_array().unwrap().last().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let show = m.run(1, &["run", "show", &id, &run]);
    let op = show.jsonl()[0]["operations"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["phase"] == "outcomeUnknown")
        .unwrap()["opId"]
        .as_str()
        .unwrap()
        .to_string();
    m.run(
        1,
        &["run", "resolve", &id, &run, &op, "--output", "it ran on A"],
    )
    .expect(0);
    let mut done = m.cmd(1, &["--resume", &id, "--remote", "origin", "--config"]);
    done.arg(&config).arg("--allow-shell");
    let done = Run::from(done.output().unwrap());
    done.expect(0);
    assert!(!m.ws[1].join(marker).exists());
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "ran\n");
}
