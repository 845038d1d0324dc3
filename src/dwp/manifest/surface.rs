//! The task's touched surface (docs/dwp-spec.md, "Touched surface"): every declared file's sha256, directories
//! expanded to the files beneath them.
//!
//! §2.5 hashes an absolute entry like a relative one, but the manifest reads nothing outside the
//! plan and its repository (docs/dwp-spec.md, "The context manifest"): an absolute entry inside the repository is hashed; an
//! entry that resolves outside the repository root (an absolute path elsewhere, `..`, or a
//! symlink pointing out) is not read, stays `null` like a missing file, and is reported as
//! outside the repository rather than as missing on disk.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// The surface as the manifest reports it.
#[derive(Debug, Default)]
pub struct Surface {
    /// `path → sha256 hex` (None when not a regular file inside the repository).
    pub files: BTreeMap<String, Option<String>>,
    /// The keys of `files` that resolve outside the repository (never read).
    pub outside: BTreeSet<String>,
}

pub fn files(root: &Path, surface: &[String]) -> Result<Surface> {
    let canonical_root = root
        .canonicalize()
        .map_err(|e| Error::io("resolve the repository root", root, e))?;
    let mut out = Surface::default();
    for entry in surface {
        let path = if Path::new(entry).is_absolute() {
            PathBuf::from(entry)
        } else {
            root.join(entry)
        };
        if !inside(root, &canonical_root, &path) {
            out.files.insert(entry.clone(), None);
            out.outside.insert(entry.clone());
        } else if path.is_dir() {
            let mut found: Vec<PathBuf> = walkdir::WalkDir::new(&path)
                .follow_links(false)
                .into_iter()
                .filter_map(|e| e.ok())
                .filter(|e| !e.file_type().is_dir())
                .map(|e| e.into_path())
                .collect();
            found.sort();
            for file in found {
                let key = file
                    .strip_prefix(root)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| file.to_string_lossy().into_owned());
                if inside(root, &canonical_root, &file) {
                    out.files.insert(key, hash(&file)?);
                } else {
                    out.files.insert(key.clone(), None);
                    out.outside.insert(key);
                }
            }
        } else {
            out.files.insert(entry.clone(), hash(&path)?);
        }
    }
    Ok(out)
}

/// Whether `path` resolves inside the repository: by its real path when it exists (symlinks
/// followed), else lexically (`..` applied) against the root as given or canonical.
fn inside(root: &Path, canonical_root: &Path, path: &Path) -> bool {
    match path.canonicalize() {
        Ok(real) => real.starts_with(canonical_root),
        Err(_) => {
            let mut lexical = PathBuf::new();
            for component in path.components() {
                match component {
                    Component::ParentDir => {
                        lexical.pop();
                    }
                    Component::CurDir => {}
                    other => lexical.push(other),
                }
            }
            lexical.starts_with(root) || lexical.starts_with(canonical_root)
        }
    }
}

/// The sha256 of a regular file (None for anything else, or nothing there).
fn hash(path: &Path) -> Result<Option<String>> {
    if !path.is_file() {
        return Ok(None);
    }
    let bytes = std::fs::read(path).map_err(|e| Error::io("read", path, e))?;
    Ok(Some(crate::hash::sha256_hex(&bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_expand_and_outside_paths_are_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        std::fs::create_dir_all(root.join("src/a")).unwrap();
        std::fs::write(root.join("src/a/x.rs"), "x").unwrap();
        std::fs::write(root.join("src/y.rs"), "y").unwrap();
        std::fs::write(tmp.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("secret"), root.join("src/link")).unwrap();
        let surface = files(
            &root,
            &[
                "src".into(),
                "../secret".into(),
                "nope.rs".into(),
                "src/*.rs".into(),
            ],
        )
        .unwrap();
        let map = &surface.files;
        assert_eq!(
            map.get("src/a/x.rs").unwrap().as_deref(),
            Some(crate::hash::sha256_hex(b"x").as_str())
        );
        assert!(map.contains_key("src/y.rs"));
        assert_eq!(
            map.get("src/link"),
            Some(&None),
            "a symlink out of the repo is not read"
        );
        assert_eq!(map.get("../secret"), Some(&None));
        assert_eq!(map.get("nope.rs"), Some(&None));
        assert_eq!(map.get("src/*.rs"), Some(&None));
        let outside: Vec<&str> = surface.outside.iter().map(String::as_str).collect();
        assert_eq!(outside, ["../secret", "src/link"]);
    }

    #[test]
    fn absolute_entries_are_hashed_inside_and_not_read_outside() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::write(root.join("src/y.rs"), "y").unwrap();
        std::fs::write(tmp.path().join("secret"), "s").unwrap();
        let inside_abs = root.join("src/y.rs").display().to_string();
        let outside_abs = tmp.path().join("secret").display().to_string();
        let gone_abs = tmp.path().join("gone/x.rs").display().to_string();
        let gone_in = root.join("src/gone.rs").display().to_string();
        let surface = files(
            &root,
            &[
                inside_abs.clone(),
                outside_abs.clone(),
                gone_abs.clone(),
                gone_in.clone(),
            ],
        )
        .unwrap();
        assert_eq!(
            surface.files[&inside_abs].as_deref(),
            Some(crate::hash::sha256_hex(b"y").as_str())
        );
        assert_eq!(surface.files[&outside_abs], None);
        assert_eq!(surface.files[&gone_in], None);
        let outside: Vec<&String> = surface.outside.iter().collect();
        assert_eq!(outside, [&gone_abs, &outside_abs]);
    }
}
