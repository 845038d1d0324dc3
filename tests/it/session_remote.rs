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
    let diverged = m.run(
        0,
        &[
            "session",
            "pull",
            &id,
            "--workspace",
            m.ws[0].to_str().unwrap(),
        ],
    );
    diverged.expect(5);
    assert!(
        diverged.stderr.contains("diverged at run run_"),
        "{}",
        diverged.stderr
    );
    assert!(session_files(&dir_a) == kept, "A's copy changed");

    // B's copy is behind nothing: pulling is up to date.
    let up = m.run(
        1,
        &[
            "session",
            "pull",
            &id,
            "--workspace",
            m.ws[1].to_str().unwrap(),
        ],
    );
    up.expect(0);
    assert_eq!(up.jsonl()[0]["action"], "upToDate");
}

#[test]
fn a_pull_fast_forwards_an_ancestor_copy() {
    let m = machines();
    let config = config_of(&m.env, 4);
    let id = m.first_run(0, &config, &[]);
    m.run(0, &["session", "push", &id]).expect(0);
    let ws_b = m.ws[1].to_str().unwrap();
    m.run(1, &["session", "pull", &id, "--workspace", ws_b])
        .expect(0);
    // A runs on and pushes; B fast-forwards.
    let mut more = m.cmd(0, &["--resume", &id, "--task", "More", "--config"]);
    more.arg(&config);
    Run::from(more.output().unwrap()).expect(0);
    m.run(0, &["session", "push", &id]).expect(0);
    let ff = m.run(1, &["session", "pull", &id, "--workspace", ws_b]);
    ff.expect(0);
    assert_eq!(ff.jsonl()[0]["action"], "fastForwarded");
    assert_eq!(ff.jsonl()[0]["runs"], 2);
    m.run(1, &["session", "verify", &id]).expect(0);
    let shown = m.run(1, &["session", "show", &id]);
    shown.expect(0);
    assert_eq!(shown.jsonl()[0]["runs"].as_array().unwrap().len(), 2);
}

/// Rewrites the snapshot on the remote with one journal blob edited (manifest unchanged), as an
/// attacker with push access could, fast-forward.
fn tamper(m: &Machines, id: &str) {
    let scratch = m.env.path().join("tamper");
    git(
        m.env.path(),
        &["clone", "-q", m.remote.to_str().unwrap(), "tamper"],
    );
    let reference = format!("refs/kxen/sessions/{id}");
    git(
        &scratch,
        &["fetch", "-q", "origin", &format!("{reference}:refs/t")],
    );
    let listing = git(&scratch, &["ls-tree", "-r", "--name-only", "refs/t"]);
    let journal = listing
        .lines()
        .find(|l| l.ends_with("journal.jsonl"))
        .unwrap()
        .to_string();
    let content = git(
        &scratch,
        &["cat-file", "blob", &format!("refs/t:{journal}")],
    );
    assert!(content.contains("hello remote"), "{content}");
    let edited = content.replace("hello remote", "HELLO REMOTE") + "\n";
    let index = scratch.join("tamper.index");
    let with_index = |args: &[&str], stdin: Option<&str>| -> String {
        let mut cmd = Command::new("git");
        cmd.args(args)
            .current_dir(&scratch)
            .env("GIT_INDEX_FILE", &index)
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
                input.write_all(s.as_bytes()).unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    with_index(&["read-tree", "refs/t"], None);
    let blob = with_index(&["hash-object", "-w", "--stdin"], Some(&edited));
    with_index(
        &["update-index", "--index-info"],
        Some(&format!("100644 {blob}\t{journal}\n")),
    );
    let tree = with_index(&["write-tree"], None);
    let commit = with_index(
        &["commit-tree", &tree, "-p", "refs/t", "-m", "edited"],
        None,
    );
    git(
        &scratch,
        &["push", "-q", "origin", &format!("{commit}:{reference}")],
    );
}

#[test]
fn a_tampered_snapshot_is_refused_and_nothing_local_changes() {
    let m = machines();
    let config = config_of(&m.env, 4);
    let id = m.first_run(0, &config, &[]);
    m.run(0, &["session", "push", &id]).expect(0);
    tamper(&m, &id);
    let ws_b = m.ws[1].to_str().unwrap();
    // Into an empty state dir: refused, nothing created.
    let refs_before = git(&m.ws[1], &["for-each-ref"]);
    let refused = m.run(1, &["session", "pull", &id, "--workspace", ws_b]);
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
    let over = m.run(
        0,
        &[
            "session",
            "pull",
            &id,
            "--workspace",
            m.ws[0].to_str().unwrap(),
        ],
    );
    over.expect(10);
    assert!(session_files(&dir_a) == kept, "A's copy changed");
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
    let ws_b = m.ws[1].to_str().unwrap();
    let pulled = m.run(1, &["session", "pull", &id, "--workspace", ws_b]);
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
    assert!(
        taken.stderr.contains("took over the expired remote lease"),
        "{}",
        taken.stderr
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
