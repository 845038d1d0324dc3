//! A pull that fast-forwards a Session and its task children, killed (abort, as SIGKILL leaves
//! it) at each durable step of the swap: afterwards the local tree is the old complete tree or
//! the new complete one, `session verify` passes for every Session of it, and a re-run of the
//! pull completes with the remote's records.

use std::collections::BTreeMap;
use std::path::Path;

use crate::env::{Run, git, snapshot};
use crate::session_remote::{Machines, machines};

/// The journals and message logs of every Session in `state` (id → relative path → bytes):
/// the records a tree holds, without the files a lease or an import rewrites.
fn records(state: &Path) -> Tree {
    let mut all = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir(state.join("sessions")) else {
        return all;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let files: BTreeMap<String, Vec<u8>> = snapshot(&e.path())
            .into_iter()
            .filter(|(k, _)| k.ends_with(".jsonl"))
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
        all.insert(name, files);
    }
    all
}

type Tree = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

/// A tree's Sessions and files with their sizes (for a failure message).
fn names(tree: &Tree) -> Vec<(String, Vec<(String, usize)>)> {
    tree.iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.iter().map(|(f, b)| (f.clone(), b.len())).collect(),
            )
        })
        .collect()
}

fn sessions(m: &Machines, machine: usize) -> Vec<String> {
    let out = m.run(machine, &["session", "list"]);
    out.expect(0);
    out.jsonl()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    let out = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_pull_killed_at_each_step_of_the_child_swap_leaves_the_old_or_the_new_tree() {
    let m = machines();
    // A dies after the first child's first call; pushes; B pulls the parent and that child.
    let (config, parent) = m.killed_task_tree();
    m.run(0, &["session", "push", &parent]).expect(0);
    m.pull(1, &parent).expect(0);
    // A finishes the tree (the first child runs on, a second one is made) and pushes.
    let mut resumed = m.cmd(0, &["--resume", &parent, "--allow-shell", "--config"]);
    resumed.arg(&config);
    Run::from(resumed.output().unwrap()).expect(0);
    m.run(0, &["session", "push", &parent]).expect(0);

    let old = records(&m.state[1]);
    let new = records(&m.state[0]);
    assert_eq!(old.len(), 2);
    assert_eq!(new.len(), 3);
    assert_ne!(old, new);
    let saved = m.env.path().join("state-b-saved");
    copy_dir(&m.state[1], &saved);
    let reference = format!("refs/kxen/sessions/{parent}");
    let saved_ref = git(&m.ws[1], &["rev-parse", &reference]);

    // Every durable step of a fast-forward of a parent with one child fast-forwarded and one
    // new: staged; blobs moved; the swap record committed; each child placed (new child, then the exchanged one); the
    // parent's copies about to be swapped; swapped.
    let points: &[(&str, usize)] = &[
        ("import.after-staging", 0),
        ("import.before-rename", 0),
        ("pull.after-swap-record", 0),
        ("import.after-task-renamed", 0),
        ("import.after-task-renamed", 1),
        ("pull.before-exchange", 0),
        ("pull.after-exchange", 0),
    ];
    for &(point, skip) in points {
        let what = format!("{point} (pass {skip})");
        std::fs::remove_dir_all(&m.state[1]).unwrap();
        copy_dir(&saved, &m.state[1]);
        git(&m.ws[1], &["update-ref", &reference, &saved_ref]);

        let mut killed = m.pull_cmd(1, &parent);
        killed
            .env("KXEN_FAILPOINT", point)
            .env("KXEN_FAILPOINT_SKIP", skip.to_string());
        let out = killed.output().unwrap();
        assert_eq!(
            out.status.code(),
            None,
            "{what}: the pull was not killed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // What any command sees: it first completes a swap the killed pull committed.
        let listed = sessions(&m, 1);
        let after = records(&m.state[1]);
        assert!(
            after == old || after == new,
            "{what}: the local tree is neither the old nor the new one: {:?}",
            names(&after)
        );
        assert_eq!(listed.len(), after.len(), "{what}");
        for sid in listed {
            let verified = m.run(1, &["session", "verify", &sid]);
            assert_eq!(
                verified.code, 0,
                "{what}: session verify {sid}: {}",
                verified.stderr
            );
        }
        let again = m.pull(1, &parent);
        assert_eq!(again.code, 0, "{what}: re-run: {}", again.stderr);
        let action = again.jsonl()[0]["action"].as_str().unwrap().to_string();
        let expected = if after == new {
            "upToDate"
        } else {
            "fastForwarded"
        };
        assert_eq!(action, expected, "{what}");
        let rerun = records(&m.state[1]);
        assert!(
            rerun == new,
            "{what}: after the re-run: {:?}",
            names(&rerun)
        );
        for sid in sessions(&m, 1) {
            m.run(1, &["session", "verify", &sid]).expect(0);
        }
        let leftovers = m.leftovers(1);
        assert!(leftovers.is_empty(), "{what}: left over: {leftovers:?}");
    }
}
