//! The fence on the real kernel, through the `exec` tool (Landlock ABI and user namespaces are
//! required on the machines the tests run on).

use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use serde_json::json;

use super::*;
use crate::tools::ToolOutput;
use crate::tools::testutil::Fixture;

fn exec(fx: &Fixture, command: &str) -> ToolOutput {
    fx.run("exec", json!({ "command": command }))
}

/// Writes the fence refused: Landlock's `Permission denied`, or `Read-only file system` where
/// the read-only mount tree answers first (creating or truncating a file outside the roots).
fn denials(text: &str) -> usize {
    text.matches("Permission denied").count() + text.matches("Read-only file system").count()
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args(["-c", "user.name=T", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

#[test]
fn writes_outside_the_workspace_fail_and_inside_and_tmpdir_work() {
    let fx = Fixture::new();
    let other = fx.tmp.path().join("other-checkout");
    std::fs::create_dir_all(&other).unwrap();
    let system_tmp = std::env::temp_dir().join(format!("kxen-fence-{}", fx.op_id));
    let out = exec(
        &fx,
        &format!(
            "echo a > \"$HOME/../x\"; echo b > {sys}; echo c > {other}/f; echo ok > in.txt; \
             mkdir -p sub && echo deep > sub/d.txt; echo t > \"$TMPDIR/t\" && cat \"$TMPDIR/t\"; \
             echo h > \"$HOME/h\" && echo home-ok; echo n > /dev/null && echo null-ok",
            sys = system_tmp.display(),
            other = other.display()
        ),
    );
    assert_eq!(denials(&out.text), 3, "{}", out.text);
    assert!(!fx.tmp.path().join("state/x").exists());
    assert!(!system_tmp.exists());
    assert!(!other.join("f").exists());
    assert_eq!(fx.get("in.txt"), "ok\n");
    assert_eq!(fx.get("sub/d.txt"), "deep\n");
    assert!(out.text.contains("t\nhome-ok\nnull-ok\n"), "{}", out.text);
    let record = out.fence.expect("the fence is recorded");
    assert_eq!(record.sandbox, SandboxMode::WorkspaceWrite);
    assert!(record.landlock_abi >= 1);
    assert_eq!(record.network, "none");
    // TMPDIR is the operation's own and is gone afterwards.
    assert!(
        !fx.tmp
            .path()
            .join("state/tool-tmp")
            .join(&fx.op_id)
            .exists()
    );
}

#[test]
fn read_only_blocks_workspace_and_home_writes_but_not_tmpdir() {
    let mut fx = Fixture::new();
    fx.fence.mode = SandboxMode::ReadOnly;
    fx.put("a.txt", "before\n");
    let out = exec(
        &fx,
        "echo x > a.txt; echo y > new.txt; echo h > \"$HOME/h\"; cat a.txt; \
         echo t > \"$TMPDIR/t\" && echo tmp-ok",
    );
    assert_eq!(denials(&out.text), 3, "{}", out.text);
    assert!(out.text.contains("before\ntmp-ok\n"), "{}", out.text);
    assert_eq!(fx.get("a.txt"), "before\n");
    assert!(!fx.root.join("new.txt").exists());
    assert_eq!(out.fence.unwrap().sandbox, SandboxMode::ReadOnly);
}

#[test]
fn loopback_is_unreachable_without_network_and_reachable_with_it() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let probe = format!(
        "bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}' && echo connected || echo no-connection"
    );
    let mut fx = Fixture::new();
    let out = exec(&fx, &probe);
    assert!(out.text.contains("no-connection"), "{}", out.text);
    assert!(!out.text.contains("\nconnected"), "{}", out.text);
    fx.fence.allow_network = true;
    let out = exec(&fx, &probe);
    assert!(out.text.starts_with("connected\n"), "{}", out.text);
    assert_eq!(out.fence.unwrap().network, "host");
    // `off` is no fence at all.
    fx.fence = FencePolicy {
        mode: SandboxMode::Off,
        allow_network: false,
    };
    let out = exec(&fx, &format!("{probe}; echo x > ../outside"));
    assert!(out.text.starts_with("connected\n"), "{}", out.text);
    assert!(out.fence.is_none());
    assert!(fx.tmp.path().join("outside").exists());
}

#[test]
fn git_commit_works_but_config_hooks_and_info_are_read_only() {
    let fx = Fixture::new();
    git(&fx.root, &["init", "-q", "-b", "main"]);
    fx.put("a.txt", "a\n");
    let hooks = fx.root.join(".git/hooks");
    let before_config = std::fs::read(fx.root.join(".git/config")).unwrap();
    let out = exec(
        &fx,
        "export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null; \
         git -c user.name=A -c user.email=a@example.com add a.txt && \
         git -c user.name=A -c user.email=a@example.com commit -q -m fenced && echo committed; \
         echo evil > .git/hooks/pre-commit; echo '[core] fsmonitor = evil' >> .git/config; \
         git config core.hooksPath /tmp/evil; echo x > .git/info/exclude; \
         mv .git .git-aside; mv .git/hooks .git/hooks-aside; rm -rf .git/info; \
         git log --format=%s",
    );
    assert!(out.text.starts_with("committed\n"), "{}", out.text);
    assert!(out.text.ends_with("fenced\n[exit code 0]"), "{}", out.text);
    assert!(!hooks.join("pre-commit").exists());
    assert_eq!(
        std::fs::read(fx.root.join(".git/config")).unwrap(),
        before_config
    );
    assert!(
        fx.root.join(".git/HEAD").is_file(),
        ".git was not moved aside"
    );
    assert!(hooks.is_dir() && fx.root.join(".git/info").is_dir());
    assert!(!fx.root.join(".git-aside").exists());
    assert!(out.fence.unwrap().read_only_paths >= 3);
}

/// The folder of the plan a run works on is the host's evidence: a command can neither write
/// it (append, truncate, replace, create, chmod, hard-link) nor move it or a directory on the
/// way to it aside and put a forged copy in its place, however it spells the path; the rest of
/// `.dwp/` and the workspace stay writable.
#[test]
fn the_protected_plan_folder_is_read_only_and_cannot_be_moved_aside() {
    let mut fx = Fixture::new();
    let plan = fx.root.join(".dwp/plans/PLAN_a_b");
    std::fs::create_dir_all(plan.join("analysis_results/kxen-agent-meter")).unwrap();
    let journal = "{\"seq\":1}\n{\"seq\":2,\"statement\":\"LIMIT: exhausted tokens\"}\n";
    std::fs::write(plan.join("journal.ndjson"), journal).unwrap();
    std::fs::write(
        plan.join("analysis_results/kxen-agent-meter/m.ndjson"),
        "m\n",
    )
    .unwrap();
    std::fs::create_dir_all(fx.root.join("sub")).unwrap();
    std::os::unix::fs::symlink(".dwp/plans/PLAN_a_b", fx.root.join("plan-link")).unwrap();
    fx.protected = vec![plan.clone()];
    let out = exec(
        &fx,
        "echo forged >> .dwp/plans/PLAN_a_b/journal.ndjson; \
         truncate -s 0 .dwp/plans/PLAN_a_b/journal.ndjson; \
         sed -i /LIMIT/d .dwp/plans/PLAN_a_b/journal.ndjson; \
         echo f >> sub/../.dwp/plans/PLAN_a_b/journal.ndjson; \
         echo f >> plan-link/journal.ndjson; \
         ln -s .dwp/plans/PLAN_a_b/journal.ndjson j && echo f >> j; \
         ln .dwp/plans/PLAN_a_b/journal.ndjson hard && echo f >> hard; \
         echo f > .dwp/plans/PLAN_a_b/analysis_results/kxen-agent-meter/m.ndjson; \
         touch .dwp/plans/PLAN_a_b/analysis_results/new.json; \
         rm -f .dwp/plans/PLAN_a_b/journal.ndjson; \
         chmod 000 .dwp/plans/PLAN_a_b/journal.ndjson; \
         mv .dwp/plans/PLAN_a_b .dwp/plans/aside; mv .dwp/plans .dwp/plans-aside; \
         mv .dwp dwp-aside; rm -rf .dwp; \
         cd .dwp/plans && echo f >> PLAN_a_b/journal.ndjson; cd \"$OLDPWD\"; \
         echo ok > .dwp/config.json && mkdir -p .dwp/plans/PLAN_c_d && \
         echo ok > .dwp/plans/PLAN_c_d/journal.ndjson && echo ok > a.txt && echo wrote-others",
    );
    assert!(out.text.contains("wrote-others"), "{}", out.text);
    assert_eq!(
        std::fs::read_to_string(plan.join("journal.ndjson")).unwrap(),
        journal
    );
    assert_eq!(
        std::fs::read_to_string(plan.join("analysis_results/kxen-agent-meter/m.ndjson")).unwrap(),
        "m\n"
    );
    assert!(!plan.join("analysis_results/new.json").exists());
    let mode = std::fs::metadata(plan.join("journal.ndjson")).unwrap();
    assert_ne!(
        std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
        0
    );
    for aside in [".dwp/plans/aside", ".dwp/plans-aside", "dwp-aside", "hard"] {
        assert!(!fx.root.join(aside).exists(), "{aside}: {}", out.text);
    }
    assert_eq!(fx.get(".dwp/plans/PLAN_c_d/journal.ndjson"), "ok\n");
    assert_eq!(fx.get("a.txt"), "ok\n");
    assert!(out.fence.unwrap().read_only_paths >= 1);
    // A protected folder outside the workspace is Landlock's: read-only already.
    let outside = fx.tmp.path().join("elsewhere/PLAN_e_f");
    std::fs::create_dir_all(&outside).unwrap();
    fx.protected = vec![outside.clone()];
    let out = exec(
        &fx,
        &format!("echo f > {}/journal.ndjson", outside.display()),
    );
    assert_eq!(denials(&out.text), 1, "{}", out.text);
    assert!(!outside.join("journal.ndjson").exists());
}

#[test]
fn a_linked_worktree_can_commit_and_its_pointers_are_read_only() {
    let mut fx = Fixture::new();
    let main = fx.tmp.path().join("main");
    std::fs::create_dir_all(&main).unwrap();
    git(&main, &["init", "-q", "-b", "main"]);
    git(&main, &["commit", "-q", "--allow-empty", "-m", "initial"]);
    let wt = fx.tmp.path().join("wt");
    git(
        &main,
        &["worktree", "add", "-q", "-b", "side", wt.to_str().unwrap()],
    );
    fx.root = wt.canonicalize().unwrap();
    let dot_git = std::fs::read(fx.root.join(".git")).unwrap();
    let out = exec(
        &fx,
        "export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null; echo b > b.txt; \
         git -c user.name=A -c user.email=a@example.com add b.txt && \
         git -c user.name=A -c user.email=a@example.com commit -q -m in-worktree && echo ok; \
         echo 'gitdir: /tmp/evil' > .git; echo evil > \"$(git rev-parse --git-common-dir)/hooks/post-commit\"",
    );
    assert!(out.text.starts_with("ok\n"), "{}", out.text);
    assert_eq!(std::fs::read(fx.root.join(".git")).unwrap(), dot_git);
    assert!(!main.join(".git/hooks/post-commit").exists());
    let log = Command::new("git")
        .args(["log", "-1", "--format=%s", "side"])
        .current_dir(&main)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&log.stdout), "in-worktree\n");
}

#[test]
fn toolchains_keep_working() {
    let fx = Fixture::new();
    let out = exec(
        &fx,
        "cargo --version && python3 -c 'import sys, tempfile; print(\"py\", sys.version_info[0]); tempfile.TemporaryFile()'",
    );
    assert!(!out.is_error, "{}", out.text);
    assert!(out.text.starts_with("cargo "), "{}", out.text);
    assert!(out.text.contains("py 3\n"), "{}", out.text);
}

#[test]
fn a_background_process_stays_fenced() {
    let fx = Fixture::new();
    let out = exec(
        &fx,
        "( sleep 0.1; echo x > ../escaped || echo bg-denied > bg.txt ) & \
         sh -c 'echo y > ../escaped2' 2>/dev/null || echo child-denied; wait",
    );
    assert!(out.text.contains("child-denied"), "{}", out.text);
    assert_eq!(fx.get("bg.txt"), "bg-denied\n");
    assert!(!fx.tmp.path().join("escaped").exists());
    assert!(!fx.tmp.path().join("escaped2").exists());
}

#[test]
fn the_git_paths_of_a_repository_with_a_submodule_are_found() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    let sub_src = root.join("sub-src");
    std::fs::create_dir_all(&sub_src).unwrap();
    git(&sub_src, &["init", "-q", "-b", "main"]);
    git(&sub_src, &["commit", "-q", "--allow-empty", "-m", "s"]);
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(
        &repo,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            sub_src.to_str().unwrap(),
            "libs/sub",
        ],
    );
    let found = git_dirs::discover(&repo);
    let module = repo.join(".git/modules/libs/sub");
    for path in [
        repo.join(".git/config"),
        repo.join(".git/hooks"),
        module.join("config"),
        module.join("hooks"),
        repo.join("libs/sub/.git"),
    ] {
        assert!(found.read_only.contains(&path), "{path:?} in {found:?}");
    }
    for dir in [repo.join(".git"), repo.join(".git/modules"), module.clone()] {
        assert!(found.pinned.contains(&dir), "{dir:?} in {found:?}");
    }
    assert!(found.writable_outside.is_empty());
    assert_eq!(
        git_dirs::discover(tmp.path()),
        git_dirs::Protected::default()
    );
}

#[test]
fn the_refusal_names_what_is_missing_and_the_escape_hatch() {
    let r = Refusal {
        missing: "this kernel does not provide Landlock".into(),
    };
    let text = r.message(FencePolicy::default());
    assert!(text.contains("does not provide Landlock"), "{text}");
    assert!(text.contains("\"sandbox\": \"off\""), "{text}");
    assert!(text.contains("nothing was run"), "{text}");
    assert!(
        Fence::build(&FenceSpec {
            policy: FencePolicy::OFF,
            workspace: Path::new("/"),
            home: Path::new("/"),
            tmp: Path::new("/"),
            protected: &[],
        })
        .unwrap()
        .is_none()
    );
}

#[test]
fn probe_enforces_the_fence_on_this_machine() {
    let abi = probe(FencePolicy::default()).unwrap();
    assert!(abi.unwrap() >= 1);
    assert_eq!(probe(FencePolicy::OFF).unwrap(), None);
}

/// The fence never widens what is writable from files the fenced command itself can write: a
/// rewritten `.git/commondir` must not make `/` (or any directory) writable to the next command,
/// and no `hooks/` or `info/` is created there.
#[test]
fn a_rewritten_commondir_does_not_widen_the_next_fence() {
    let fx = Fixture::new();
    git(&fx.root, &["init", "-q"]);
    let victim = fx.tmp.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    let out = exec(&fx, &format!("echo {} > .git/commondir", victim.display()));
    assert!(!out.is_error, "{}", out.text);
    let out = exec(
        &fx,
        &format!("echo pwned > {}/f && echo wrote", victim.display()),
    );
    assert!(!out.text.contains("wrote"), "{}", out.text);
    assert!(!victim.join("f").exists());
    assert!(!victim.join("hooks").exists() && !victim.join("info").exists());
}

/// A workspace below the repository root (`repo/sub`) that gains a `.git` file naming another
/// directory does not make that directory writable, nor creates `hooks/` or `info/` there.
#[test]
fn a_planted_gitdir_file_does_not_widen_the_next_fence() {
    let mut fx = Fixture::new();
    git(&fx.root, &["init", "-q"]);
    let sub = fx.root.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    fx.root = sub;
    let victim = fx.tmp.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    let out = exec(&fx, &format!("echo 'gitdir: {}' > .git", victim.display()));
    assert!(!out.is_error, "{}", out.text);
    let out = exec(
        &fx,
        &format!("echo pwned > {}/f && echo wrote", victim.display()),
    );
    assert!(!out.text.contains("wrote"), "{}", out.text);
    assert!(!victim.join("f").exists());
    assert!(!victim.join("hooks").exists() && !victim.join("info").exists());
}

/// A `.git/modules` symlink the command planted does not make the next fence create `hooks/`
/// or `info/` in the directory it points to.
#[test]
fn a_planted_modules_symlink_creates_nothing_outside() {
    let fx = Fixture::new();
    git(&fx.root, &["init", "-q"]);
    let victim = fx.tmp.path().join("victim");
    std::fs::create_dir_all(victim.join("m")).unwrap();
    std::fs::write(victim.join("m/HEAD"), "ref: refs/heads/main\n").unwrap();
    let out = exec(&fx, &format!("ln -s {} .git/modules", victim.display()));
    assert!(!out.is_error, "{}", out.text);
    let _ = exec(&fx, "true");
    assert!(!victim.join("m/hooks").exists() && !victim.join("m/info").exists());
}

/// A command (fenced or `off`) leads its own session: it has no controlling terminal, so it
/// cannot push keystrokes (TIOCSTI) into the terminal the runner was started from.
#[test]
fn a_command_has_no_controlling_terminal() {
    let script = "exec python3 -c 'import os, errno\n\
                  print(\"leader\", os.getsid(0) == os.getpid() == os.getpgid(0))\n\
                  try:\n    os.open(\"/dev/tty\", os.O_RDWR)\n    print(\"tty opened\")\n\
                  except OSError as e:\n    print(\"tty\", errno.errorcode[e.errno])'";
    for fence in [FencePolicy::default(), FencePolicy::OFF] {
        let mut fx = Fixture::new();
        fx.fence = fence;
        let out = exec(&fx, script);
        assert!(
            out.text.contains("leader True\ntty ENXIO"),
            "{:?}: {}",
            fence,
            out.text
        );
    }
}

/// The command holds no capability, whoever runs the runtime (root included: CI runs as root),
/// so nothing in it can undo the mount namespace: no `umount` or remount of a read-only bind,
/// no `mknod` of a disk. (Root enters no user namespace; a user namespace's capabilities are
/// dropped the same way.)
#[test]
fn the_command_holds_no_capabilities_and_cannot_undo_the_read_only_binds() {
    let fx = Fixture::new();
    git(&fx.root, &["init", "-q"]);
    let config = std::fs::read(fx.root.join(".git/config")).unwrap();
    let out = exec(
        &fx,
        "grep ^Cap /proc/self/status; \
         umount .git/config 2>/dev/null && echo unmounted; \
         umount -l .git/hooks 2>/dev/null && echo unmounted-hooks; \
         mount -o remount,bind,rw .git/config 2>/dev/null && echo remounted; \
         mount -o remount,rw / 2>/dev/null && echo remounted-root; \
         echo '[core] fsmonitor = evil' >> .git/config; echo x > .git/hooks/pre-commit; \
         mknod disk b 8 0 2>/dev/null && echo mknod; \
         unshare -r true 2>/dev/null && echo unshared; echo end",
    );
    for line in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            out.text.contains(&format!("{line}:\t0000000000000000\n")),
            "{line}: {}",
            out.text
        );
    }
    for escaped in ["unmounted", "remounted", "mknod", "unshared"] {
        assert!(!out.text.contains(escaped), "{escaped}: {}", out.text);
    }
    assert!(out.text.contains("end\n"), "{}", out.text);
    assert_eq!(std::fs::read(fx.root.join(".git/config")).unwrap(), config);
    assert!(!fx.root.join(".git/hooks/pre-commit").exists());
    assert!(!fx.root.join("disk").exists());
}

/// Landlock does not govern a file's metadata: `chmod`, `chown`, `utime` and `setxattr` outside
/// the writable roots fail because the whole mount tree is read-only in the command's mount
/// namespace; inside the workspace they work.
#[test]
fn metadata_changes_outside_the_writable_roots_fail() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let fx = Fixture::new();
    let outside = fx.tmp.path().join("outside.txt");
    std::fs::write(&outside, "keep\n").unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o644)).unwrap();
    fx.put("inside.txt", "in\n");
    let before = std::fs::metadata(&outside).unwrap();
    let o = outside.display();
    let out = exec(
        &fx,
        &format!(
            "chmod 777 {o} || echo chmod-denied; touch -d 2001-01-01 {o} || echo touch-denied; \
             chown 1:1 {o} || echo chown-denied; \
             python3 -c 'import os; os.setxattr(\"{o}\", \"user.k\", b\"v\")' 2>/dev/null \
             || echo xattr-denied; chmod 600 inside.txt && touch -d 2001-01-01 inside.txt \
             && echo inside-ok"
        ),
    );
    for denied in [
        "chmod-denied",
        "touch-denied",
        "chown-denied",
        "xattr-denied",
    ] {
        assert!(out.text.contains(denied), "{denied}: {}", out.text);
    }
    assert!(out.text.contains("inside-ok"), "{}", out.text);
    assert!(out.text.contains("Read-only file system"), "{}", out.text);
    let after = std::fs::metadata(&outside).unwrap();
    assert_eq!(after.mode(), before.mode());
    assert_eq!(after.mtime(), before.mtime());
    assert_eq!((after.uid(), after.gid()), (before.uid(), before.gid()));
    let xattr = Command::new("python3")
        .args(["-c", "import os, sys; print(os.listxattr(sys.argv[1]))"])
        .arg(&outside)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&xattr.stdout), "[]\n");
    let inside = std::fs::metadata(fx.root.join("inside.txt")).unwrap();
    assert_eq!(inside.mode() & 0o777, 0o600);
}

/// A descriptor the runner holds without close-on-exec never reaches the command: the fence
/// only checks opening, so an inherited writable descriptor would be a way past it.
#[test]
#[allow(unsafe_code)] // fcntl/close of the test's own descriptor
fn no_descriptor_of_the_runner_leaks_into_the_command() {
    use std::os::fd::IntoRawFd;
    let fx = Fixture::new();
    let outside = fx.tmp.path().join("leaked.txt");
    let file = std::fs::File::create(&outside).unwrap();
    let fd = file.into_raw_fd();
    // SAFETY: clears close-on-exec on a descriptor we own (closed below).
    unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    let out = exec(
        &fx,
        // Not `>&{fd}`: dash takes only one-digit descriptors, and under a parallel test run
        // the descriptor is often 10 or more.
        &format!(
            "if [ -e /proc/self/fd/{fd} ]; then echo fd-open; else echo fd-closed; fi; \
             ls /proc/self/fd | tr '\\n' ' '"
        ),
    );
    // SAFETY: our own descriptor, closed once.
    unsafe { libc::close(fd) };
    assert!(out.text.contains("fd-closed"), "{}", out.text);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "");
    // 0, 1, 2 and the one `ls` opened to read the directory.
    assert!(out.text.contains("\n0 1 2 3 \n"), "{}", out.text);
}

/// A process that detaches (`setsid`) stays fenced; one still running when the command ends is
/// stopped then (it never outlives the call: tests/it/run_leftovers.rs).
#[test]
fn a_detached_process_stays_fenced_and_is_stopped_with_the_call() {
    let fx = Fixture::new();
    let escaped = fx.tmp.path().join("escaped");
    let victim = fx.tmp.path().join("victim");
    std::fs::write(&victim, "").unwrap();
    let out = exec(
        &fx,
        &format!(
            "setsid sh -c ': > started; sleep 0.5; echo x > {e} 2>/dev/null || echo denied > bg.txt; \
             chmod 777 {v} 2>/dev/null || echo chmod-denied >> bg.txt; echo done >> bg.txt; \
             sleep 0.5; echo late >> bg.txt' </dev/null >bg.log 2>&1 & \
             while ! grep -q done bg.txt 2>/dev/null; do sleep 0.01; done; echo returned",
            e = escaped.display(),
            v = victim.display()
        ),
    );
    assert!(out.text.starts_with("returned\n"), "{}", out.text);
    assert_eq!(fx.get("bg.txt"), "denied\nchmod-denied\ndone\n");
    assert!(!escaped.exists());
    // Stopped when the command ended: it never writes `late`.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(fx.get("bg.txt"), "denied\nchmod-denied\ndone\n");
}

/// Paths that lead outside by indirection: a workspace symlink, `..`, `/proc/self/root`, the
/// runner's and init's `/proc/PID/root`, and the runner's environment through `/proc`.
#[test]
fn symlinks_dotdot_and_proc_paths_do_not_lead_outside() {
    use std::os::unix::fs::PermissionsExt;
    let fx = Fixture::new();
    let outside = fx.tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let victim = outside.join("victim.txt");
    std::fs::write(&victim, "keep\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = outside.display();
    let out = exec(
        &fx,
        &format!(
            "ln -s {o} link && echo a > link/a; echo b > ../b; echo c > sub/../../c; \
             echo d > /proc/self/root{o}/d; echo e > /proc/$PPID/root{o}/e; \
             echo f > /proc/1/root{o}/f; chmod 777 link/victim.txt; \
             chmod 777 /proc/1/root{o}/victim.txt; chmod 777 /proc/$PPID/root{o}/victim.txt; \
             cat /proc/$PPID/environ > env.txt; cat /proc/1/environ >> env.txt; echo end"
        ),
    );
    assert!(out.text.contains("end\n"), "{}", out.text);
    let mut left: Vec<String> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["victim.txt"], "{}", out.text);
    assert!(!fx.tmp.path().join("b").exists() && !fx.tmp.path().join("c").exists());
    assert_eq!(
        std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
        0o644
    );
    assert_eq!(fx.get("env.txt"), "", "{}", out.text);
}

/// From Landlock ABI 6 the command cannot signal a process outside its fence (the runner, the
/// person's shell, another Session's command); its own children it can.
#[test]
fn signals_to_processes_outside_the_fence_fail() {
    if rules::kernel_abi() < 6 {
        eprintln!(
            "\n*** SKIPPED: signal scoping needs Landlock ABI 6; this kernel has an older one"
        );
        return;
    }
    let fx = Fixture::new();
    let mut outside = Command::new("sleep").arg("30").spawn().unwrap();
    let out = exec(
        &fx,
        &format!(
            "kill -TERM {} 2>/dev/null && echo killed-outside; kill -0 $PPID 2>/dev/null && \
             echo signalled-runner; sleep 30 & kill $! && echo killed-own",
            outside.id()
        ),
    );
    let alive = outside.try_wait().unwrap().is_none();
    let _ = outside.kill();
    let _ = outside.wait();
    assert!(alive, "{}", out.text);
    assert!(!out.text.contains("killed-outside"), "{}", out.text);
    assert!(!out.text.contains("signalled-runner"), "{}", out.text);
    assert!(out.text.contains("killed-own"), "{}", out.text);
}

/// A command may still create a user namespace of its own (it then holds every capability
/// there), but the mounts it inherits come from a more privileged namespace and are locked: no
/// umount reveals what a read-only bind covers, no remount makes one writable.
#[test]
fn a_nested_user_namespace_cannot_undo_the_read_only_mounts() {
    let fx = Fixture::new();
    git(&fx.root, &["init", "-q"]);
    let config = std::fs::read(fx.root.join(".git/config")).unwrap();
    let outside = fx.tmp.path().join("outside.txt");
    std::fs::write(&outside, "keep\n").unwrap();
    std::fs::write(
        fx.root.join("nested.py"),
        format!(
            r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def report(what, rc):
    print(what, "ok" if rc == 0 else os.strerror(ctypes.get_errno()))
report("unshare", libc.unshare(0x10000000 | 0x00020000))  # CLONE_NEWUSER | CLONE_NEWNS
for path in [b".git/config", b".git/hooks", b"/"]:
    report("umount", libc.umount2(path, 2))  # MNT_DETACH
    report("remount", libc.mount(None, path, None, 32 | 4096, None))  # MS_REMOUNT | MS_BIND
for path in [".git/config", {outside:?}]:
    try:
        open(path, "a").write("evil")
        print("wrote", path)
    except OSError as e:
        print("denied", e.strerror)
"#
        ),
    )
    .unwrap();
    let out = exec(&fx, "python3 nested.py");
    assert!(out.text.starts_with("unshare ok\n"), "{}", out.text);
    assert_eq!(out.text.matches("umount ").count(), 3, "{}", out.text);
    assert!(!out.text.contains("remount ok"), "{}", out.text);
    assert!(!out.text.contains("umount ok"), "{}", out.text);
    assert!(!out.text.contains("wrote"), "{}", out.text);
    assert_eq!(out.text.matches("denied").count(), 2, "{}", out.text);
    assert_eq!(std::fs::read(fx.root.join(".git/config")).unwrap(), config);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep\n");
}
