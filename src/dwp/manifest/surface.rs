//! The task's touched surface (dwp-details.md §2.5): every declared file's sha256, directories
//! expanded to the files beneath them.
//!
//! The manifest reads nothing outside the plan and its repository: an entry that resolves
//! outside the repository root (an absolute path elsewhere, `..`, or a symlink pointing out) is
//! not read and is reported like a missing file (`null`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// `path → sha256 hex` (or `None` when not a regular file inside the repository).
pub fn files(root: &Path, surface: &[String]) -> Result<BTreeMap<String, Option<String>>> {
    let canonical_root = root
        .canonicalize()
        .map_err(|e| Error::io("resolve the repository root", root, e))?;
    let mut out = BTreeMap::new();
    for entry in surface {
        let path = if Path::new(entry).is_absolute() {
            PathBuf::from(entry)
        } else {
            root.join(entry)
        };
        if path.is_dir() && inside(&canonical_root, &path) {
            let mut found: Vec<PathBuf> = walkdir::WalkDir::new(&path)
                .follow_links(false)
                .into_iter()
                .filter_map(|e| e.ok())
                .filter(|e| !e.file_type().is_dir())
                .map(|e| e.into_path())
                .filter(|p| p.is_file())
                .collect();
            found.sort();
            for file in found {
                let key = file
                    .strip_prefix(root)
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_else(|_| file.to_string_lossy().into_owned());
                let hash = hash_inside(&canonical_root, &file)?;
                out.insert(key, hash);
            }
        } else {
            let hash = hash_inside(&canonical_root, &path)?;
            out.insert(entry.clone(), hash);
        }
    }
    Ok(out)
}

fn inside(canonical_root: &Path, path: &Path) -> bool {
    path.canonicalize()
        .is_ok_and(|p| p.starts_with(canonical_root))
}

fn hash_inside(canonical_root: &Path, path: &Path) -> Result<Option<String>> {
    if !path.is_file() || !inside(canonical_root, path) {
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
        let map = files(
            &root,
            &[
                "src".into(),
                "../secret".into(),
                "nope.rs".into(),
                "src/*.rs".into(),
            ],
        )
        .unwrap();
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
    }
}
