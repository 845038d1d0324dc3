//! What kxen-agent trusts in a repository (docs/git-trust.md): a fenced `exec` plants a pointer
//! or config file in the workspace's git directory that would send git to a bare repository of
//! its own, with a `pre-receive` hook; `session push`, `session pull` and `--resume --remote`
//! then refuse (exit 6) naming the file, no hook runs, and nothing reaches either repository.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::env::{Run, git};
use crate::run_support::*;
use crate::session_remote::{Machines, machines};

/// What the planted repository's hook leaves when it runs (it would run unfenced, as the user).
fn marker(m: &Machines) -> PathBuf {
    m.env.path().join("hook-ran")
}

/// The shell an `exec` runs to make `evil.git` (a bare repository with a `pre-receive` hook)
/// inside the workspace.
fn evil_remote(m: &Machines) -> String {
    format!(
        "set -e; git init -q --bare evil.git; \
         printf '#!/bin/sh\\ntouch {}\\n' > evil.git/hooks/pre-receive; \
         chmod +x evil.git/hooks/pre-receive; ",
        marker(m).display()
    )
}

/// A first run on machine A in `workspace` whose fenced `exec` runs `script`; the Session id.
fn planted_by_exec(m: &Machines, workspace: &Path, script: &str) -> (PathBuf, String) {
    let config = script_config(
        &m.env,
        &[
            call("c1", "exec", json!({ "command": script })),
            answer("planted"),
            answer("again"),
        ],
    );
    let mut cmd = m.cmd(
        0,
        &[
            "run",
            "--task",
            "Plant it",
            "--allow-shell",
            "--workspace",
            workspace.to_str().unwrap(),
            "--agent",
        ],
    );
    cmd.arg(&m.agent).arg("--config").arg(&config);
    let out = Run::from(cmd.output().unwrap());
    out.expect(0);
    let events = out.jsonl();
    let tool = events
        .iter()
        .find(|e| e["type"] == "toolFinished")
        .expect("the exec ran");
    assert_eq!(
        tool["isError"], false,
        "the fence let the plant through: {tool}"
    );
    let id = finished(&events)["sessionId"].as_str().unwrap().to_string();
    (config, id)
}

/// `session push`, `session pull` and `--resume --remote` on machine A all refuse naming
/// `file`; no hook ran and neither repository got a ref.
fn every_remote_command_refuses(
    m: &Machines,
    workspace: &Path,
    id: &str,
    config: &Path,
    file: &str,
) {
    let ws = workspace.to_str().unwrap();
    let attempts = [
        m.run(0, &["session", "push", id, "--remote", "origin"]),
        m.run(
            0,
            &[
                "session",
                "pull",
                id,
                "--remote",
                "origin",
                "--workspace",
                ws,
            ],
        ),
        Run::from(
            m.cmd(
                0,
                &[
                    "--resume",
                    id,
                    "--remote",
                    "origin",
                    "--workspace",
                    ws,
                    "--task",
                    "Go on",
                    "--config",
                ],
            )
            .arg(config)
            .output()
            .unwrap(),
        ),
    ];
    for run in &attempts {
        let text = format!("{}{}", run.stdout, run.stderr);
        run.expect(6);
        assert!(text.contains(file), "names {file}: {text}");
        assert!(text.contains("refus"), "{text}");
    }
    assert!(!marker(m).exists(), "the planted repository's hook ran");
    assert!(m.remote_refs().is_empty(), "{:?}", m.remote_refs());
    let evil = workspace.join("evil.git");
    let refs = git(&evil, &["for-each-ref", "--format=%(refname)"]);
    assert!(refs.is_empty(), "refs reached {}: {refs}", evil.display());
}

/// A plain `--resume` (no remote) verifies the binding through the same layout: refused too.
fn a_local_resume_refuses(m: &Machines, workspace: &Path, id: &str, config: &Path, file: &str) {
    let mut cmd = m.cmd(
        0,
        &[
            "--resume",
            id,
            "--task",
            "Go on",
            "--allow-shell",
            "--config",
        ],
    );
    cmd.arg(config).arg("--workspace").arg(workspace);
    let run = Run::from(cmd.output().unwrap());
    run.expect(6);
    let text = format!("{}{}", run.stdout, run.stderr);
    assert!(text.contains(file), "names {file}: {text}");
}

#[test]
fn a_planted_commondir_sends_no_push_pull_or_lease_anywhere() {
    let m = machines();
    let script = format!(
        "{}cp -R .git .evil-common; \
         git config -f .evil-common/config remote.origin.url \"$PWD/evil.git\"; \
         printf '%s\\n' \"$PWD/.evil-common\" > .git/commondir",
        evil_remote(&m)
    );
    let (config, id) = planted_by_exec(&m, &m.ws[0], &script);
    assert!(m.ws[0].join(".git/commondir").is_file());
    every_remote_command_refuses(&m, &m.ws[0], &id, &config, ".git/commondir");
    a_local_resume_refuses(&m, &m.ws[0], &id, &config, ".git/commondir");
}

#[test]
fn a_planted_config_worktree_sends_no_push_pull_or_lease_anywhere() {
    let m = machines();
    // The user's own choice, in the config the fence keeps read-only.
    git(&m.ws[0], &["config", "extensions.worktreeConfig", "true"]);
    let script = format!(
        "{}git config -f .git/config.worktree remote.origin.url \"$PWD/evil.git\"",
        evil_remote(&m)
    );
    let (config, id) = planted_by_exec(&m, &m.ws[0], &script);
    assert!(m.ws[0].join(".git/config.worktree").is_file());
    every_remote_command_refuses(&m, &m.ws[0], &id, &config, ".git/config.worktree");
}

#[test]
fn a_planted_gitdir_file_sends_no_push_pull_or_lease_anywhere() {
    let m = machines();
    // The Session works in a subdirectory; the `.git` file is planted there and points at a
    // copy of the git directory (with the planted remote) in the tool HOME, outside the
    // workspace.
    let sub = m.ws[0].join("sub");
    std::fs::create_dir(&sub).unwrap();
    let script = format!(
        "{}cp -R ../.git \"$HOME/evil-dir\"; \
         git config -f \"$HOME/evil-dir/config\" remote.origin.url \"$PWD/evil.git\"; \
         printf 'gitdir: %s\\n' \"$HOME/evil-dir\" > .git",
        evil_remote(&m)
    );
    let (config, id) = planted_by_exec(&m, &sub, &script);
    assert!(sub.join(".git").is_file());
    every_remote_command_refuses(&m, &sub, &id, &config, "sub/.git");
    a_local_resume_refuses(&m, &sub, &id, &config, "sub/.git");
}

#[test]
fn a_local_remote_inside_the_workspace_or_the_state_dir_is_refused() {
    let m = machines();
    let config = script_config(&m.env, &[answer("one"), answer("two")]);
    let id = m.first_run(0, &config, &[]);
    let hooked = |at: &Path| {
        git(
            m.env.path(),
            &["init", "-q", "--bare", at.to_str().unwrap()],
        );
        let hook = at.join("hooks/pre-receive");
        std::fs::write(
            &hook,
            format!("#!/bin/sh\ntouch {}\n", marker(&m).display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    let inside = m.ws[0].join("mirror.git");
    let in_state = m.state[0].join("tool-home").join(&id).join("mirror.git");
    std::fs::create_dir_all(in_state.parent().unwrap()).unwrap();
    for (name, at, url) in [
        ("inside", &inside, inside.to_str().unwrap().to_string()),
        ("relative", &inside, "./mirror.git".to_string()),
        ("state", &in_state, format!("file://{}", in_state.display())),
    ] {
        if !at.exists() {
            hooked(at);
        }
        git(&m.ws[0], &["remote", "add", name, &url]);
        let run = m.run(0, &["session", "push", &id, "--remote", name]);
        run.expect(6);
        let text = format!("{}{}", run.stdout, run.stderr);
        assert!(text.contains(&format!("`{name}`")), "{text}");
        assert!(text.contains("mirror.git"), "{text}");
        let listed = m.run(0, &["session", "list", "--remote", name]);
        listed.expect(6);
    }
    assert!(!marker(&m).exists(), "a hook inside a writable root ran");
    // The user's real remote, outside, still works.
    m.run(0, &["session", "push", &id, "--remote", "origin"])
        .expect(0);
}

#[test]
fn a_pointer_planted_during_a_remote_run_stops_its_final_push() {
    let m = machines();
    let script = format!(
        "{}cp -R .git .evil-common; \
         git config -f .evil-common/config remote.origin.url \"$PWD/evil.git\"; \
         printf '%s\\n' \"$PWD/.evil-common\" > .git/commondir",
        evil_remote(&m)
    );
    let config = script_config(
        &m.env,
        &[
            answer("first"),
            call("c1", "exec", json!({ "command": script })),
            answer("planted"),
        ],
    );
    let id = m.first_run(0, &config, &["--allow-shell"]);
    m.run(0, &["session", "push", &id]).expect(0);
    let before = m.remote_refs();

    // The lease is claimed on the real remote; the run plants the pointer; the final push and
    // the release refuse to follow it.
    let run = Run::from(
        m.remote_resume(0, &id, &config, &["--allow-shell"])
            .output()
            .unwrap(),
    );
    let text = format!("{}{}", run.stdout, run.stderr);
    run.expect(6);
    assert!(text.contains(".git/commondir"), "{text}");
    assert!(!marker(&m).exists(), "the planted repository's hook ran");
    let evil = m.ws[0].join("evil.git");
    let refs = git(&evil, &["for-each-ref", "--format=%(refname)"]);
    assert!(refs.is_empty(), "refs reached {}: {refs}", evil.display());
    // The real remote kept its snapshot (nothing was pushed over it) and the claimed lease,
    // which expires as a killed runner's would.
    let after = m.remote_refs();
    assert!(
        before.iter().all(|r| after.contains(r)),
        "{before:?} {after:?}"
    );
    assert!(
        after.contains(&format!("refs/kxen/leases/{id}")),
        "{after:?}"
    );
}
