//! The `exec` fence end to end: what the model sees, `run show`'s record, `policy check`, drift
//! on resume and the refusal on a machine without the kernel features (simulated).

use serde_json::{Value, json};

use crate::env::TestEnv;
use crate::run_support::*;

fn tool_outputs(events: &[Value]) -> Vec<(bool, String)> {
    events
        .iter()
        .filter(|e| e["type"] == "toolFinished")
        .map(|e| {
            (
                e["isError"] == true,
                e["output"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// A write the fence refused, as the shell reports it: Landlock's `Permission denied`, or
/// `Read-only file system` where the read-only mount tree answers first.
fn denied(text: &str) -> bool {
    text.contains("Permission denied") || text.contains("Read-only file system")
}

#[test]
fn a_fenced_run_reports_denied_writes_to_the_model_and_the_abi_in_run_show() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let outside = env.path().join("outside.txt");
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": format!("echo x > {}", outside.display())}),
            ),
            call("c2", "exec", json!({"command": "echo y > inside.txt"})),
            answer("done"),
        ],
    );
    let run = run_new(&env, &repo, "t", &fixer(&env), &config, &["--allow-shell"]);
    run.expect(0);
    let outputs = tool_outputs(&run.jsonl());
    assert!(outputs[0].0, "{outputs:?}");
    assert!(denied(&outputs[0].1), "{outputs:?}");
    assert!(!outside.exists());
    assert!(!outputs[1].0, "{outputs:?}");
    assert_eq!(
        std::fs::read_to_string(repo.join("inside.txt")).unwrap(),
        "y\n"
    );

    let fin = finished(&run.jsonl()).clone();
    let (session, run_id) = (
        fin["sessionId"].as_str().unwrap(),
        fin["runId"].as_str().unwrap(),
    );
    let show = env.run("kxen-agent", &["run", "show", session, run_id]);
    show.expect(0);
    let ops = show.jsonl()[0]["operations"].as_array().unwrap().clone();
    let fence = &ops[0]["output"]["fence"];
    assert_eq!(fence["sandbox"], "workspaceWrite", "{}", ops[0]);
    assert!(fence["landlockAbi"].as_u64().unwrap() >= 1, "{fence}");
    assert_eq!(fence["network"], "none");
    let text = env.run(
        "kxen-agent",
        &["--format", "text", "run", "show", session, run_id],
    );
    assert!(
        text.stdout.contains("fence: workspaceWrite, Landlock ABI "),
        "{}",
        text.stdout
    );
}

#[test]
fn resume_with_a_different_sandbox_or_network_is_drift() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let config = script_config(&env, &[answer("first"), answer("second")]);
    let run = run_new(&env, &repo, "t", &fixer(&env), &config, &["--allow-shell"]);
    run.expect(0);
    let session = finished(&run.jsonl())["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(env.path().join("off.json"), r#"{"sandbox": "off"}"#).unwrap();
    let resume = |extra: &[&str]| {
        let mut args = vec![
            "--resume",
            &session,
            "--task",
            "again",
            "--config",
            config.to_str().unwrap(),
            "--allow-shell",
        ];
        args.extend_from_slice(extra);
        env.run("kxen-agent", &args)
    };
    let drift = resume(&["--policy", "off.json"]);
    drift.expect(6);
    assert!(drift.stdout.contains("policy drift"), "{}", drift.stdout);
    assert!(drift.stdout.contains("sandbox"), "{}", drift.stdout);
    let drift = resume(&["--allow-network"]);
    drift.expect(6);
    assert!(drift.stdout.contains("allowNetwork"), "{}", drift.stdout);
    resume(&[]).expect(0);
}

#[test]
fn policy_check_prints_the_fence_and_whether_it_is_enforceable() {
    let env = TestEnv::new();
    let run = env.run("kxen-agent", &["policy", "check"]);
    run.expect(0);
    let v = &run.jsonl()[0];
    // A policy that leaves the fence at its defaults keeps the hash it had before the fence.
    assert_eq!(
        v["policyHash"],
        "sha256:ade4dc00f3cefea6fce8a0b2b2d86c75838d5413d192b97633cc99b7542414b4"
    );
    assert_eq!(v["fence"]["sandbox"], "workspaceWrite");
    assert_eq!(v["fence"]["allowNetwork"], false);
    assert_eq!(v["fence"]["enforceable"], true, "{v}");
    assert!(v["fence"]["landlockAbi"].as_u64().unwrap() >= 1);

    let net = env.run("kxen-agent", &["policy", "check", "--allow-network"]);
    let net = &net.jsonl()[0];
    assert_eq!(net["policy"]["allowNetwork"], true);
    assert_ne!(net["policyHash"], v["policyHash"]);

    std::fs::write(env.path().join("ro.json"), r#"{"sandbox": "readOnly"}"#).unwrap();
    let ro = env.run(
        "kxen-agent",
        &["--format", "text", "policy", "check", "--policy", "ro.json"],
    );
    ro.expect(0);
    assert!(ro.stdout.contains("exec fence: readOnly"), "{}", ro.stdout);
    assert!(ro.stdout.contains("enforceable: yes"), "{}", ro.stdout);

    std::fs::write(env.path().join("bad.json"), r#"{"sandbox": "none"}"#).unwrap();
    let bad = env.run("kxen-agent", &["policy", "check", "--policy", "bad.json"]);
    bad.expect(4);
    assert!(bad.stderr.contains("sandbox") || bad.stdout.contains("sandbox"));

    let missing = env
        .cmd("kxen-agent")
        .args(["policy", "check"])
        .env("KXEN_TEST_FENCE_MISSING", "landlock")
        .output()
        .unwrap();
    let missing: Value = serde_json::from_slice(&missing.stdout).unwrap();
    assert_eq!(missing["fence"]["enforceable"], false);
    assert!(
        missing["fence"]["missing"]
            .as_str()
            .unwrap()
            .contains("Landlock")
    );
}

#[test]
fn without_the_kernel_features_exec_is_refused_before_running() {
    for (feature, expected) in [
        ("landlock", "does not provide Landlock"),
        ("namespaces", "namespaces"),
    ] {
        let env = TestEnv::new();
        let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
        let config = script_config(
            &env,
            &[
                call("c1", "exec", json!({"command": "echo ran > ran.txt"})),
                answer("done"),
            ],
        );
        let out = env
            .cmd("kxen-agent")
            .args(["run", "--workspace", repo.to_str().unwrap(), "--task", "t"])
            .args(["--agent", fixer(&env).to_str().unwrap()])
            .args(["--config", config.to_str().unwrap(), "--allow-shell"])
            .env("KXEN_TEST_FENCE_MISSING", feature)
            .output()
            .unwrap();
        let run = crate::env::Run::from(out);
        run.expect(0);
        let outputs = tool_outputs(&run.jsonl());
        assert!(outputs[0].0, "{feature}: {outputs:?}");
        let text = &outputs[0].1;
        assert!(text.contains("exec refused before running"), "{text}");
        assert!(text.contains(expected), "{feature}: {text}");
        assert!(text.contains("\"sandbox\": \"off\""), "{text}");
        assert!(!repo.join("ran.txt").exists(), "{feature}: the command ran");

        // The escape hatch: with `sandbox: off` the same command runs.
        std::fs::write(env.path().join("off.json"), r#"{"sandbox": "off"}"#).unwrap();
        let config = script_config(
            &env,
            &[
                call("c1", "exec", json!({"command": "echo ran > ran.txt"})),
                answer("done"),
            ],
        );
        let out = env
            .cmd("kxen-agent")
            .args(["run", "--workspace", repo.to_str().unwrap(), "--task", "t"])
            .args(["--agent", fixer(&env).to_str().unwrap()])
            .args(["--config", config.to_str().unwrap(), "--allow-shell"])
            .args(["--policy", "off.json"])
            .env("KXEN_TEST_FENCE_MISSING", feature)
            .output()
            .unwrap();
        crate::env::Run::from(out).expect(0);
        assert!(repo.join("ran.txt").exists(), "{feature}");
    }
}

/// Root creates the namespaces directly; everyone else needs a user namespace of their own
/// (and, the runtime being non-dumpable, a brief dumpable window to write its id maps). When the
/// tests run as root (CI), this runs the same fenced `exec` as `nobody` through `setpriv`.
#[test]
fn an_unprivileged_user_is_fenced_too() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Not root: every other fence test already takes the user-namespace path.
        return;
    }
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let outside = env.path().join("outside.txt");
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": format!(
                    "id -u; echo in > inside.txt; echo x > {}; echo evil > .git/hooks/pre-commit",
                    outside.display()
                )}),
            ),
            answer("done"),
        ],
    );
    let run = run_as_nobody(&env, &repo, &config);
    run.expect(0);
    let outputs = tool_outputs(&run.jsonl());
    let text = &outputs[0].1;
    assert!(text.starts_with("65534\n"), "{text}");
    assert_eq!(
        text.matches("Permission denied").count() + text.matches("Read-only file system").count(),
        2,
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(repo.join("inside.txt")).unwrap(),
        "in\n"
    );
    assert!(!outside.exists());
    assert!(!repo.join(".git/hooks/pre-commit").exists());
}

/// Runs `kxen-agent run` in `repo` with `config` as `nobody` (uid and gid 65534, through
/// `setpriv`; the tests run as root): a copy of the binary and every file of `env` are opened
/// up to everyone first, so that user can read and write them.
fn run_as_nobody(
    env: &TestEnv,
    repo: &std::path::Path,
    config: &std::path::Path,
) -> crate::env::Run {
    use std::os::unix::fs::PermissionsExt;
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("setpriv (util-linux) is needed to test the unprivileged fence as root");
    }
    let agent = fixer(env);
    let bin = env.path().join("kxen-agent");
    std::fs::copy(env!("CARGO_BIN_EXE_kxen-agent"), &bin).unwrap();
    for entry in walkdir::WalkDir::new(env.path()) {
        let entry = entry.unwrap();
        let mode = if entry.file_type().is_dir() || entry.path() == bin {
            0o777
        } else {
            0o666
        };
        std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["--state-dir", env.state_dir().to_str().unwrap()])
        .args(["run", "--workspace", repo.to_str().unwrap(), "--task", "t"])
        .args(["--agent", agent.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap(), "--allow-shell"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", env.home())
        .current_dir(env.path())
        .output()
        .unwrap();
    crate::env::Run::from(out)
}

#[test]
fn a_loopback_listener_is_reachable_only_with_allow_network() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = format!(
        "bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' 2>/dev/null && echo connected || echo refused"
    );
    for (flags, expected) in [
        (&["--allow-shell"][..], "refused\n"),
        (&["--allow-shell", "--allow-network"][..], "connected\n"),
    ] {
        let env = TestEnv::new();
        let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
        let config = script_config(
            &env,
            &[
                call("c1", "exec", json!({"command": probe})),
                answer("done"),
            ],
        );
        let run = run_new(&env, &repo, "t", &fixer(&env), &config, flags);
        run.expect(0);
        let outputs = tool_outputs(&run.jsonl());
        assert!(outputs[0].1.starts_with(expected), "{flags:?}: {outputs:?}");
    }
}

/// A fenced command may write its HOME, so a HOME shared by the Sessions of a state dir would let
/// one Session's agent plant a `.gitconfig` (say, an fsmonitor) that runs in another Session's
/// commands. Each Session gets a HOME of its own.
#[test]
fn each_session_has_a_tool_home_of_its_own() {
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let plant = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "echo planted > \"$HOME/.gitconfig\" && echo ok"}),
            ),
            answer("planted"),
        ],
    );
    let first = run_new(&env, &repo, "t", &fixer(&env), &plant, &["--allow-shell"]);
    first.expect(0);
    assert!(!tool_outputs(&first.jsonl())[0].0, "{:?}", first.jsonl());

    let look = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "cat \"$HOME/.gitconfig\" || echo absent; echo \"$HOME\""}),
            ),
            answer("looked"),
        ],
    );
    let second = run_new(&env, &repo, "t", &fixer(&env), &look, &["--allow-shell"]);
    second.expect(0);
    let outputs = tool_outputs(&second.jsonl());
    assert!(outputs[0].1.contains("absent"), "{outputs:?}");
    assert!(!outputs[0].1.contains("planted"), "{outputs:?}");
    let second_id = finished(&second.jsonl())["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(outputs[0].1.contains(&second_id), "{outputs:?}");
}

/// A secret in the runner's environment never reaches a fenced command, not even through
/// `/proc`: not the command's own environment, not the runner's (`/proc/$PPID/environ`: the
/// runtime wiped its environment block and Landlock denies ptrace-class access to processes
/// outside the fence), not init's.
#[test]
fn a_canary_secret_never_reaches_the_command_through_proc() {
    const CANARY: &str = "sk-canary-fence-6d2b9e";
    let env = TestEnv::new();
    let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
    let config = script_config(
        &env,
        &[
            call(
                "c1",
                "exec",
                json!({"command": "env; for p in self $PPID 1; do echo \"== $p\"; \
                    tr '\\0' '\\n' < /proc/$p/environ; done; echo end"}),
            ),
            answer("done"),
        ],
    );
    let out = env
        .cmd("kxen-agent")
        .args(["run", "--workspace", repo.to_str().unwrap(), "--task", "t"])
        .args(["--agent", fixer(&env).to_str().unwrap()])
        .args(["--config", config.to_str().unwrap(), "--allow-shell"])
        .env("KXEN_TEST_FENCE_CANARY_TOKEN", CANARY)
        .output()
        .unwrap();
    let run = crate::env::Run::from(out);
    run.expect(0);
    let outputs = tool_outputs(&run.jsonl());
    let text = &outputs[0].1;
    assert!(text.contains("== 1\n") && text.contains("end\n"), "{text}");
    assert!(!text.contains(CANARY), "{text}");
    assert!(!text.contains("KXEN_TEST_FENCE_CANARY_TOKEN"), "{text}");
}

/// No privilege outlives the fence: whatever a fenced command tries, it leaves no setuid or
/// setgid file or directory and no file capability behind — as root (where a setuid copy of a
/// shell would make every local user root) and as `nobody`. Every way is tried in one run, and
/// the files the commands made are then checked from outside.
#[test]
fn no_setuid_setgid_or_file_capability_survives_a_fenced_run() {
    use std::os::unix::fs::PermissionsExt;
    // SAFETY: geteuid has no preconditions.
    let as_root = unsafe { libc::geteuid() } == 0;
    // Prepared outside the fence, readable by everyone: a setuid file and an archive holding it.
    let fixtures = tempfile::tempdir().unwrap();
    let fx = fixtures.path();
    std::fs::set_permissions(fx, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::copy("/bin/sh", fx.join("suid")).unwrap();
    std::fs::set_permissions(fx.join("suid"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    let tar = std::process::Command::new("tar")
        .args(["-cf", "suid.tar", "suid"])
        .current_dir(fx)
        .output()
        .unwrap();
    assert!(tar.status.success(), "{tar:?}");
    let python = [
        "import os",
        "open('plain', 'w').close()",
        "cap = bytes.fromhex('0100000200200000000000000000000000000000')",
        "for name, f in [",
        "    ('setxattr', lambda: os.setxattr('plain', 'security.capability', cap)),",
        "    ('open', lambda: os.close(os.open('created', os.O_CREAT | os.O_WRONLY, 0o4755))),",
        "    ('mknod', lambda: os.mknod('node', 0o102755)),",
        "]:",
        "    try:",
        "        f()",
        "        print(name, 'succeeded')",
        "    except OSError as e:",
        "        print(name, e.strerror)",
    ]
    .join("\n");
    let commands = [
        "cp /bin/sh chmod-u && chmod u+s chmod-u".to_string(),
        "cp /bin/sh chmod-g && chmod g+s chmod-g".to_string(),
        "mkdir dir-g && chmod g+s dir-g".to_string(),
        "install -m 4755 /bin/sh installed".to_string(),
        format!("cp --preserve=mode {} copied", fx.join("suid").display()),
        format!(
            "mkdir untarred && tar -xpf {} -C untarred",
            fx.join("suid.tar").display()
        ),
        "cp /bin/sh capped && PATH=\"$PATH:/usr/sbin:/sbin\" setcap cap_net_raw+ep capped"
            .to_string(),
        format!("python3 -c \"{python}\""),
        // Capabilities again in a nested user namespace: no uid map can be written there, so
        // CAP_SETFCAP covers no file.
        "touch nested && unshare -U python3 -c \"import os; os.setxattr('nested', \
         'security.capability', bytes.fromhex('0100000200200000000000000000000000000000'))\""
            .to_string(),
        "cp /bin/sh \"$HOME/h\" && chmod 6755 \"$HOME/h\"".to_string(),
    ];
    let mut turns: Vec<Value> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| call(&format!("c{i}"), "exec", json!({ "command": c })))
        .collect();
    turns.push(answer("done"));
    // As root, then as an ordinary user; a run that is not root is that ordinary user.
    for nobody in if as_root {
        vec![false, true]
    } else {
        vec![false]
    } {
        let env = TestEnv::new();
        let repo = env.git_repo("repo", &[("a.txt", "a\n")]);
        let config = script_config(&env, &turns);
        let run = if nobody {
            run_as_nobody(&env, &repo, &config)
        } else {
            run_new(&env, &repo, "t", &fixer(&env), &config, &["--allow-shell"])
        };
        run.expect(0);
        let outputs = tool_outputs(&run.jsonl());
        assert_eq!(outputs.len(), commands.len(), "{outputs:?}");
        // Each attempt is refused with an error the model can read.
        for (i, (_, text)) in outputs.iter().enumerate() {
            assert!(
                text.contains("Operation not permitted"),
                "nobody={nobody}: `{}` was not refused: {text}",
                commands[i]
            );
        }
        let python_out = &outputs[7].1;
        for name in ["setxattr", "open", "mknod"] {
            assert!(
                python_out.contains(&format!("{name} Operation not permitted")),
                "nobody={nobody}: {python_out}"
            );
        }
        // The commands did run (their plain copies are there) ...
        for made in [
            "chmod-u",
            "chmod-g",
            "dir-g",
            "copied",
            "untarred/suid",
            "capped",
        ] {
            assert!(repo.join(made).exists(), "nobody={nobody}: no {made}");
        }
        // ... and nothing they left anywhere in the env (workspace, tool HOME, state) carries a
        // privilege.
        let mut privileged = Vec::new();
        for entry in walkdir::WalkDir::new(env.path()) {
            let entry = entry.unwrap();
            if entry.path_is_symlink() {
                continue;
            }
            let mode = entry.metadata().unwrap().permissions().mode();
            if mode & 0o6000 != 0 || has_file_capability(entry.path()) {
                privileged.push(format!("{} {mode:o}", entry.path().display()));
            }
        }
        assert!(privileged.is_empty(), "nobody={nobody}: {privileged:#?}");
    }
}

/// Whether `path` carries a `security.capability` extended attribute.
fn has_file_capability(path: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: a size query (null buffer, size 0) on a NUL-terminated path.
    let n = unsafe {
        libc::lgetxattr(
            c.as_ptr(),
            c"security.capability".as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    n >= 0
}
