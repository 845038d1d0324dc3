//! Where a transport may go, decided only from config a fenced command cannot write
//! (docs/git-trust.md).
//!
//! Two checks run on the config a transport command reads anyway (`git config --list
//! --show-scope --show-origin`, so they cost no process of their own):
//! - [`check_origins`]: every key that decides where a transport goes or how it talks to the
//!   remote (`remote.*`, `url.*`, `branch.*`, `http.*`, `credential.*`, `protocol.*`, includes)
//!   must come from the user's own config (system, global) or from the repository's `config` in
//!   its common directory, which the fence binds read-only. The same keys in `config.worktree`
//!   (a file a fenced command can create when it does not exist), or in a file the repository
//!   config includes from elsewhere, are refused (exit 6) naming the file.
//! - [`check_local_remote`]: a local remote (a path or `file://`) inside a directory a fenced
//!   command can write (the workspace's repository, kxen-agent's state dir with the tool homes)
//!   is refused (exit 6) naming it: git's local transport runs the remote's `receive-pack` as the
//!   user, and with it that repository's hooks, which such a command could have written.

use std::path::{Path, PathBuf};

use super::layout::Layout;
use crate::error::{Error, Result};

/// One entry of `git config --list --show-scope --show-origin -z`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub scope: String,
    /// `file:PATH`, `command line:`, `blob:…`.
    pub origin: String,
    /// As git prints it: section and variable lower-cased, subsection as written.
    pub key: String,
    pub value: String,
}

/// Sections whose keys steer a transport: where it connects, what it rewrites, what it sends.
const STEERING: &[&str] = &[
    "remote",
    "url",
    "branch",
    "http",
    "credential",
    "include",
    "includeif",
    // `protocol.<name>.allow` beats our `-c protocol.allow=never` default.
    "protocol",
];

fn steers(key: &str) -> bool {
    let section = key.split('.').next().unwrap_or("").to_ascii_lowercase();
    STEERING.contains(&section.as_str())
}

/// Refuses a steering key from a repository config file other than `<common dir>/config`.
/// `dir` is where git ran (relative origins are relative to it).
pub(super) fn check_origins(entries: &[Entry], layout: &Layout, dir: &Path) -> Result<()> {
    let trusted = layout.common_dir.join("config");
    let mut checked: Vec<&str> = Vec::new();
    for e in entries {
        if !matches!(e.scope.as_str(), "local" | "worktree") || !steers(&e.key) {
            continue;
        }
        if checked.contains(&e.origin.as_str()) {
            continue;
        }
        let file = e.origin.strip_prefix("file:").map(|p| dir.join(p));
        let ok = e.scope == "local"
            && file
                .as_ref()
                .and_then(|f| f.canonicalize().ok())
                .is_some_and(|f| f == trusted);
        if !ok {
            let shown = file
                .map(|f| f.display().to_string())
                .unwrap_or_else(|| e.origin.clone());
            return Err(Error::policy(format!(
                "refusing to push or fetch: `{}` is set in {shown}, which a command run in the \
                 workspace could have written; kxen-agent takes a remote's settings only from \
                 {} or your own ~/.gitconfig",
                e.key,
                trusted.display()
            ))
            .with_hint(format!(
                "inspect {shown} and remove it if you did not write it; put remote settings in \
                 {} (`git config {} …`) (see docs/git-trust.md)",
                trusted.display(),
                e.key
            )));
        }
        checked.push(&e.origin);
    }
    Ok(())
}

/// Every URL the remote `name` may connect to: its `url`s and `pushurl`s, each also as
/// rewritten by the longest matching `url.<base>.insteadOf` and `pushInsteadOf`.
pub(super) fn remote_urls(entries: &[Entry], name: &str) -> Vec<String> {
    let wanted = [
        format!("remote.{name}.url"),
        format!("remote.{name}.pushurl"),
    ];
    let configured: Vec<&str> = entries
        .iter()
        .filter(|e| wanted.contains(&e.key))
        .map(|e| e.value.as_str())
        .collect();
    let mut out: Vec<String> = Vec::new();
    for url in configured {
        let mut candidates = vec![url.to_string()];
        for suffix in [".insteadof", ".pushinsteadof"] {
            let best = entries
                .iter()
                .filter_map(|e| {
                    let base = e.key.strip_prefix("url.")?.strip_suffix(suffix)?;
                    url.starts_with(e.value.as_str())
                        .then_some((e.value.len(), base))
                })
                .max_by_key(|(len, _)| *len);
            if let Some((len, base)) = best {
                candidates.push(format!("{base}{}", &url[len..]));
            }
        }
        for c in candidates {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    out
}

/// The path a local remote URL names (relative ones against `dir`, where git runs), or `None`
/// for a network URL. git's rule: `file://`, or no `://`, no `transport::` helper and no colon
/// before the first slash (`host:path` is ssh).
pub(super) fn local_path(url: &str, dir: &Path) -> Option<PathBuf> {
    if let Some(rest) = url.strip_prefix("file://") {
        // `file://localhost/p` and `file:///p` both name `/p`.
        let path = rest.strip_prefix("localhost").unwrap_or(rest);
        return Some(dir.join(path));
    }
    if url.contains("://") || url.contains("::") {
        return None;
    }
    match (url.find(':'), url.find('/')) {
        (Some(colon), Some(slash)) if slash < colon => Some(dir.join(url)),
        (Some(_), _) => None,
        _ => Some(dir.join(url)),
    }
}

/// `path` with its longest existing ancestor resolved (symlinks and `..` included), so a
/// remote that does not exist yet is still placed where it would be created.
fn resolve(path: &Path) -> PathBuf {
    let mut tail: Vec<&std::ffi::OsStr> = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = at.canonicalize() {
            return tail.iter().rev().fold(real, |acc, part| acc.join(part));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name);
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Refuses the remote `name` when one of its URLs is a local repository inside one of
/// `roots` (directories a fenced command can write).
pub(super) fn check_local_remote(
    entries: &[Entry],
    name: &str,
    dir: &Path,
    roots: &[PathBuf],
) -> Result<()> {
    for url in remote_urls(entries, name) {
        let Some(path) = local_path(&url, dir) else {
            continue;
        };
        let real = resolve(&path);
        let inside = roots.iter().find(|root| {
            root.canonicalize()
                .map(|r| real.starts_with(r))
                .unwrap_or_else(|_| real.starts_with(root))
        });
        if let Some(root) = inside {
            return Err(Error::policy(format!(
                "refusing to push or fetch: the remote `{name}` is the local repository {}, \
                 inside {}, where a command run by the agent can write; git would run that \
                 repository's hooks as you",
                real.display(),
                root.display()
            ))
            .with_hint(format!(
                "use a remote outside the workspace and kxen-agent's state dir (`git remote \
                 set-url {name} URL`) (see docs/git-trust.md)"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(scope: &str, origin: &str, key: &str, value: &str) -> Entry {
        Entry {
            scope: scope.into(),
            origin: origin.into(),
            key: key.into(),
            value: value.into(),
        }
    }

    #[test]
    fn local_urls_are_told_from_network_ones() {
        let dir = Path::new("/w");
        for (url, want) in [
            ("/srv/r.git", Some("/srv/r.git")),
            ("../r", Some("/w/../r")),
            ("file:///srv/r", Some("/srv/r")),
            ("file://localhost/srv/r", Some("/srv/r")),
            ("./a:b", Some("/w/./a:b")),
            ("git@github.com:o/r.git", None),
            ("host:r", None),
            ("ssh://h/r", None),
            ("https://h/r", None),
            ("ext::sh -c x", None),
        ] {
            assert_eq!(
                local_path(url, dir).as_deref(),
                want.map(Path::new),
                "{url}"
            );
        }
    }

    #[test]
    fn urls_include_their_rewrites() {
        let e = [
            entry(
                "global",
                "file:/h/.gitconfig",
                "url./evil/.insteadof",
                "gh:",
            ),
            entry("global", "file:/h/.gitconfig", "url./e/.insteadof", "g"),
            entry("local", "file:.git/config", "remote.origin.url", "gh:o/r"),
            entry("local", "file:.git/config", "remote.Other.url", "x"),
        ];
        assert_eq!(remote_urls(&e, "origin"), vec!["gh:o/r", "/evil/o/r"]);
        assert_eq!(remote_urls(&e, "Other"), vec!["x"]);
        assert!(remote_urls(&e, "other").is_empty());
    }

    #[test]
    fn steering_keys_only_from_the_common_config() {
        let tmp = tempfile::tempdir().unwrap();
        let common = tmp.path().canonicalize().unwrap().join(".git");
        std::fs::create_dir(&common).unwrap();
        std::fs::write(common.join("config"), "").unwrap();
        std::fs::write(common.join("config.worktree"), "").unwrap();
        let layout = Layout {
            work_tree: Some(tmp.path().to_path_buf()),
            git_dir: common.clone(),
            common_dir: common.clone(),
        };
        let ok = [
            entry("global", "file:/h/.gitconfig", "remote.origin.url", "a"),
            entry("local", "file:.git/config", "remote.origin.url", "b"),
            entry(
                "worktree",
                "file:.git/config.worktree",
                "core.sparsecheckout",
                "true",
            ),
        ];
        check_origins(&ok, &layout, tmp.path()).unwrap();
        let bad = entry(
            "worktree",
            "file:.git/config.worktree",
            "remote.origin.url",
            "c",
        );
        let err = check_origins(&[bad], &layout, tmp.path()).unwrap_err();
        assert_eq!(err.exit_code(), 6);
        assert!(err.message.contains("config.worktree"), "{}", err.message);
    }
}
