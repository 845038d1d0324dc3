//! Workspace confinement: every path a tool touches must resolve inside the workspace root.
//!
//! Refused: any `..` component, absolute paths outside the root, and paths that leave the root
//! through a symlink (checked by canonicalizing the deepest existing ancestor). The resolved path
//! is the canonical target, so a write through an in-workspace symlink updates the file it points
//! at instead of replacing the link.
//!
//! Writes ([`Workspace::resolve_for_write`]) are further refused anywhere inside a git
//! directory: git runs what a repository's config, hooks and attributes name (`core.fsmonitor`,
//! a smudge filter, a hook) on later git commands — ours (`session fork --worktree`) or a
//! person's — so a model that can write there can run code without `exec`. Refused: any path
//! with a component named `.git` (any case: the repository's own, a submodule's `.git` file, a
//! nested repository), and any path below a directory that is a git directory by its contents
//! (`HEAD` plus `objects/` or `commondir`: where a `.git` file points, a worktree's or a
//! submodule's git directory, a bare repository), checked on the canonical path so a symlink
//! does not get around it. Reading stays allowed.
//!
//! Writes are also refused inside the protected directories ([`Workspace::with_protected`]):
//! the folder of the DWP plan a run works on, whose journal and meter artifacts are the host's
//! own evidence (a model that could edit them could forge usage samples or remove a `LIMIT`
//! record and escape the plan's limits). Compared on the canonical path, so neither a symlink
//! into the folder nor a spelling of it gets around the check.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

/// The canonical workspace root, and path resolution against it.
#[derive(Debug, Clone)]
pub(crate) struct Workspace {
    root: PathBuf,
    /// Canonical directories no write may touch (see the module docs).
    protected: Vec<PathBuf>,
}

impl Workspace {
    pub(crate) fn new(root: &Path) -> Result<Workspace> {
        let root = root.canonicalize().map_err(|e| {
            let message = format!("workspace root {} is not accessible: {e}", root.display());
            Error::io_told(message, root, e, ErrorKind::Failed)
        })?;
        if !root.is_dir() {
            return Err(Error::invalid(format!(
                "workspace root {} is not a directory",
                root.display()
            )));
        }
        Ok(Workspace {
            root,
            protected: Vec::new(),
        })
    }

    /// The same workspace, refusing writes inside `dirs` too (each canonicalized; a directory
    /// that does not exist is kept as given, so a later one at that place is still refused).
    pub(crate) fn with_protected(mut self, dirs: &[PathBuf]) -> Workspace {
        self.protected = dirs
            .iter()
            .map(|d| canonical_or_ancestor(d).unwrap_or_else(|| d.clone()))
            .collect();
        self
    }

    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Resolves a tool's `path` argument to a canonical path inside the root. The target need not
    /// exist (for `write`), but its deepest existing ancestor must resolve inside the root.
    ///
    /// A refusal is the crate's [`Error`]: malformed input is [`ErrorKind::InvalidInput`], a path
    /// that would leave the workspace is [`ErrorKind::Policy`]. The tools hand its message to the
    /// model as the call's error.
    pub(crate) fn resolve(&self, input: &str) -> Result<PathBuf> {
        if input.is_empty() {
            return Err(Error::invalid(
                "path is empty; give a path relative to the workspace root",
            ));
        }
        if input.contains('\0') {
            return Err(Error::invalid("path contains a NUL byte"));
        }
        let raw = Path::new(input);
        if raw.components().any(|c| c == Component::ParentDir) {
            return Err(Error::policy(format!(
                "path `{input}` contains `..`; paths must stay inside the workspace (use a path relative to its root)"
            )));
        }
        let joined = if raw.is_absolute() {
            raw.to_path_buf()
        } else {
            self.root.join(raw)
        };
        // Normalize `.` components away so the ancestor walk below sees real names only.
        let joined: PathBuf = joined
            .components()
            .filter(|c| *c != Component::CurDir)
            .collect();
        if raw.is_absolute() && !joined.starts_with(&self.root) {
            // Absolute paths are accepted only inside the root; also compare canonically in case
            // the caller spelled the root through a symlink.
            if !canonical_or_ancestor(&joined).is_some_and(|c| c.starts_with(&self.root)) {
                return Err(Error::policy(format!(
                    "path `{input}` is outside the workspace root {}",
                    self.root.display()
                )));
            }
        }
        let resolved = canonical_or_ancestor(&joined).ok_or_else(|| {
            Error::invalid(format!(
                "path `{input}` cannot be resolved (a dangling or looping symlink?)"
            ))
        })?;
        if !resolved.starts_with(&self.root) {
            return Err(Error::policy(format!(
                "path `{input}` resolves outside the workspace root {} (through a symlink); refused",
                self.root.display()
            )));
        }
        Ok(resolved)
    }

    /// [`Workspace::resolve`] for a tool that writes: also refuses every path inside a git
    /// directory (module docs).
    pub(crate) fn resolve_for_write(&self, input: &str) -> Result<PathBuf> {
        let resolved = self.resolve(input)?;
        let refuse = || {
            Err(Error::policy(format!(
                "path `{input}` is inside a git directory; tools never write there (git runs \
                 the programs its config, hooks and attributes name)"
            )))
        };
        let is_dot_git = |c: Component| matches!(c, Component::Normal(n) if n.to_string_lossy().eq_ignore_ascii_case(".git"));
        if Path::new(input).components().any(is_dot_git) {
            return refuse();
        }
        let rel = resolved.strip_prefix(&self.root).unwrap_or(&resolved);
        if rel.components().any(is_dot_git) {
            return refuse();
        }
        // The root itself and every existing directory down to the target.
        let mut dir = self.root.clone();
        let mut dirs = vec![dir.clone()];
        for c in rel.components() {
            dir.push(c);
            dirs.push(dir.clone());
        }
        if dirs.iter().any(|d| looks_like_git_dir(d)) {
            return refuse();
        }
        if let Some(dir) = self.protected.iter().find(|p| resolved.starts_with(p)) {
            return Err(Error::policy(format!(
                "path `{input}` is inside the DWP plan folder {} this run works on; tools never \
                 write there (its journal and meter records are the runtime's evidence, written \
                 only by kxen-agent and `dwp`)",
                self.display(dir)
            )));
        }
        Ok(resolved)
    }

    /// A path inside the root as the model should see it: relative, `/`-separated, `.` for the root.
    pub(crate) fn display(&self, path: &Path) -> String {
        match path.strip_prefix(&self.root) {
            Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }
}

/// Whether `dir` is a git directory by its contents: `HEAD` and `objects/` (a repository) or
/// `HEAD` and `commondir` (a linked worktree's).
fn looks_like_git_dir(dir: &Path) -> bool {
    dir.join("HEAD").is_file() && (dir.join("objects").is_dir() || dir.join("commondir").is_file())
}

/// Canonicalizes the deepest existing ancestor of `path` and re-appends the missing tail.
/// `None` when an existing entry cannot be canonicalized (dangling symlink, loop, permissions).
fn canonical_or_ancestor(path: &Path) -> Option<PathBuf> {
    let mut tail: Vec<&std::ffi::OsStr> = Vec::new();
    let mut current = path;
    loop {
        if current.symlink_metadata().is_ok() {
            let mut base = current.canonicalize().ok()?;
            for name in tail.iter().rev() {
                base.push(name);
            }
            return Some(base);
        }
        tail.push(current.file_name()?);
        current = current.parent()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/lib.rs"), "x").unwrap();
        std::fs::write(tmp.path().join("secret.txt"), "s").unwrap();
        let ws = Workspace::new(&root).unwrap();
        (tmp, ws)
    }

    #[test]
    fn relative_and_absolute_inside_are_accepted() {
        let (_tmp, ws) = setup();
        let p = ws.resolve("src/lib.rs").unwrap();
        assert_eq!(p, ws.root().join("src/lib.rs"));
        assert_eq!(ws.resolve("./src/./lib.rs").unwrap(), p);
        let abs = ws.root().join("src/lib.rs");
        assert_eq!(ws.resolve(abs.to_str().unwrap()).unwrap(), p);
        assert_eq!(ws.resolve(".").unwrap(), ws.root());
        assert_eq!(ws.display(&p), "src/lib.rs");
        assert_eq!(ws.display(ws.root()), ".");
        // Not-yet-existing targets resolve under their existing ancestor.
        assert_eq!(
            ws.resolve("new/dir/file.txt").unwrap(),
            ws.root().join("new/dir/file.txt")
        );
    }

    #[test]
    fn dotdot_absolute_outside_and_empty_are_refused() {
        let (tmp, ws) = setup();
        assert!(
            ws.resolve("../secret.txt")
                .unwrap_err()
                .message
                .contains("..")
        );
        assert!(ws.resolve("src/../../secret.txt").is_err());
        assert!(ws.resolve("src/../lib.rs").is_err(), "any `..` is refused");
        let outside = tmp.path().join("secret.txt");
        assert!(
            ws.resolve(outside.to_str().unwrap())
                .unwrap_err()
                .message
                .contains("outside")
        );
        assert!(ws.resolve("/etc/passwd").is_err());
        assert!(ws.resolve("").is_err());
        assert!(ws.resolve("a\0b").is_err());
    }

    #[test]
    fn symlink_escapes_are_refused_but_inner_links_resolve() {
        let (tmp, ws) = setup();
        symlink(tmp.path(), ws.root().join("up")).unwrap();
        symlink(tmp.path().join("secret.txt"), ws.root().join("leak")).unwrap();
        symlink(ws.root().join("src/lib.rs"), ws.root().join("alias")).unwrap();
        symlink("/nonexistent/target", ws.root().join("dangling")).unwrap();
        assert!(
            ws.resolve("up/secret.txt")
                .unwrap_err()
                .message
                .contains("symlink")
        );
        assert!(
            ws.resolve("up/new-file").is_err(),
            "new file under an escaping dir"
        );
        assert!(ws.resolve("leak").is_err());
        assert!(ws.resolve("dangling").is_err());
        assert_eq!(
            ws.resolve("alias").unwrap(),
            ws.root().join("src/lib.rs"),
            "writes through an inner link go to its target"
        );
    }
}
