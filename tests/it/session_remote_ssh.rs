//! Sessions through a git remote over a real ssh transport: an OpenSSH server started by the
//! test on a loopback port (generated host key, one authorized key), the remote a bare
//! repository behind it, two clones as two machines. Push, `--resume --remote` (lease claim and
//! release over ssh) and a refused stale push. Without `sshd` (`.ci/deps` installs it) the test
//! fails, unless `KXEN_TEST_SKIP` names `sshd` (tests/it/needs.rs).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::env::{Run, TestEnv, git};
use crate::run_support::*;

const SSHD: &str = "/usr/sbin/sshd";

/// An sshd on 127.0.0.1, killed on drop.
struct Sshd {
    child: Child,
    port: u16,
    log: PathBuf,
    /// `GIT_SSH_COMMAND` for a client that trusts exactly this server's host key.
    ssh_command: String,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) {
    let out = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn user() -> String {
    let out = Command::new("id").arg("-un").output().unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn start_sshd(dir: &Path) -> Sshd {
    std::fs::create_dir_all(dir).unwrap();
    let (host_key, user_key) = (dir.join("host_key"), dir.join("user_key"));
    keygen(&host_key);
    keygen(&user_key);
    let authorized = dir.join("authorized_keys");
    std::fs::copy(dir.join("user_key.pub"), &authorized).unwrap();
    // sshd started as root chroots its unprivileged child into this directory, which the
    // Debian package's service creates at start-up (there is no service here).
    let is_root = user() == "root";
    if is_root && !Path::new("/run/sshd").is_dir() {
        std::fs::create_dir_all("/run/sshd").unwrap();
    }
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let config = dir.join("sshd_config");
    std::fs::write(
        &config,
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
             PidFile {}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n",
            host_key.display(),
            authorized.display(),
            dir.join("sshd.pid").display()
        ),
    )
    .unwrap();
    let log = dir.join("sshd.log");
    let child = Command::new(SSHD)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let known = dir.join("known_hosts");
    let host_pub = std::fs::read_to_string(dir.join("host_key.pub")).unwrap();
    let key: Vec<&str> = host_pub.split_whitespace().take(2).collect();
    std::fs::write(&known, format!("[127.0.0.1]:{port} {}\n", key.join(" "))).unwrap();
    let ssh_command = format!(
        "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o BatchMode=yes \
         -o StrictHostKeyChecking=yes -o UserKnownHostsFile={}",
        user_key.display(),
        known.display()
    );
    let sshd = Sshd {
        child,
        port,
        log,
        ssh_command,
    };
    let start = Instant::now();
    while !std::fs::read_to_string(&sshd.log)
        .unwrap_or_default()
        .contains("Server listening")
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "sshd did not start: {}",
            std::fs::read_to_string(&sshd.log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    sshd
}

/// `git ARGS` in `dir` through the test's ssh client.
fn git_ssh(dir: &Path, sshd: &Sshd, args: &[&str]) {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_SSH_COMMAND", &sshd.ssh_command)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_session_moves_between_machines_over_ssh() {
    let found = crate::needs::needs("sshd", || {
        Path::new(SSHD)
            .is_file()
            .then_some(())
            .ok_or_else(|| format!("{SSHD} is missing"))
    });
    if found.is_none() {
        return;
    }
    let env = TestEnv::new();
    let sshd = start_sshd(&env.path().join("sshd"));
    let origin = env.git_repo("origin", &[("README.md", "hello ssh\n")]);
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
    let url = format!(
        "ssh://{}@127.0.0.1:{}{}",
        user(),
        sshd.port,
        remote.display()
    );
    for clone in ["a", "b"] {
        git_ssh(env.path(), &sshd, &["clone", "-q", &url, clone]);
    }
    let ws = [env.path().join("a"), env.path().join("b")];
    let state = [env.path().join("state-a"), env.path().join("state-b")];
    let agent = fixer(&env);
    let config = script_config(
        &env,
        &[
            call("call_1", "read", json!({"path": "README.md"})),
            answer("First."),
            answer("Second."),
            answer("Third."),
        ],
    );
    let kxen = |m: usize, args: &[&str]| -> Run {
        let mut cmd = env.cmd("kxen-agent");
        cmd.arg("--state-dir")
            .arg(&state[m])
            .args(args)
            .current_dir(&ws[m])
            .env("GIT_SSH_COMMAND", &sshd.ssh_command);
        Run::from(cmd.output().unwrap())
    };
    let (agent, config) = (agent.to_str().unwrap(), config.to_str().unwrap());
    let first = kxen(
        0,
        &[
            "run", "--task", "Read", "--agent", agent, "--config", config,
        ],
    );
    first.expect(0);
    let id = finished(&first.jsonl())["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let pushed = kxen(0, &["session", "push", &id]);
    pushed.expect(0);
    let snapshot = pushed.jsonl()[0]["snapshot"].as_str().unwrap().to_string();
    let reference = format!("refs/kxen/sessions/{id}");
    assert_eq!(git(&remote, &["rev-parse", &reference]), snapshot);

    // B: claim the lease, pull, run, push and release, all over ssh.
    let resumed = kxen(
        1,
        &[
            "--resume", &id, "--remote", "origin", "--task", "Go on", "--config", config,
        ],
    );
    resumed.expect(0);
    let listed = kxen(1, &["session", "list", "--remote", "origin"]);
    listed.expect(0);
    assert_eq!(listed.jsonl()[0]["leased"], false);
    let second = git(&remote, &["rev-parse", &reference]);
    assert_eq!(
        git(&remote, &["rev-parse", &format!("{second}^")]),
        snapshot
    );
    assert_eq!(
        git(
            &remote,
            &["for-each-ref", "--format=%(refname)", "refs/kxen/"]
        ),
        reference,
        "the lease was released"
    );

    // A's stale copy runs on and its push is refused by the remote (compare-and-swap).
    kxen(0, &["--resume", &id, "--task", "Stale", "--config", config]).expect(0);
    kxen(0, &["session", "push", &id]).expect(5);
    assert_eq!(git(&remote, &["rev-parse", &reference]), second);
    let log = std::fs::read_to_string(&sshd.log).unwrap();
    assert!(
        log.matches("Accepted publickey").count() >= 6,
        "the commands went through sshd: {log}"
    );
}
