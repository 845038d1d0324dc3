//! Content-addressed blobs for tool outputs too large for the journal.
//!
//! A tool output over 64 KiB is stored here in full and the journal keeps only its [`BlobRef`]
//! (hash and size) plus the capped text the model saw. Blobs are named by the lowercase hex
//! SHA-256 of their bytes, so writing the same output twice is a no-op and a blob can never be
//! half-written under its final name (it is written with [`fsx::write_atomic`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::{fsx, hash};

/// A pointer to a stored blob: its SHA-256 (lowercase hex, no prefix) and its size in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlobRef {
    pub sha256: String,
    pub bytes: u64,
}

/// A directory of content-addressed blobs (`<dir>/<sha256 hex>`, mode 0600).
///
/// The directory is created (0700) on the first `put`, so read-only commands never create it.
#[derive(Debug, Clone)]
pub struct BlobStore {
    dir: PathBuf,
}

impl BlobStore {
    pub fn new(dir: PathBuf) -> Self {
        BlobStore { dir }
    }

    /// The directory holding the blobs.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Stores `bytes` and returns their reference. Skips the write when the blob exists already
    /// (same name ⇒ same content, since the name is the hash).
    pub fn put(&self, bytes: &[u8]) -> Result<BlobRef> {
        let sha256 = hash::sha256_hex(bytes);
        let path = self.dir.join(&sha256);
        if !path.is_file() {
            fsx::create_dir_private(&self.dir)?;
            fsx::write_atomic(&path, bytes, fsx::STATE_FILE_MODE)?;
        }
        Ok(BlobRef {
            sha256,
            bytes: bytes.len() as u64,
        })
    }

    /// Reads the blob named `sha256` (lowercase hex, an optional `sha256:` prefix is accepted) and
    /// verifies its content against the name: a mismatch is corrupt state (exit 10).
    pub fn get(&self, sha256: &str) -> Result<Vec<u8>> {
        let name = sha256.strip_prefix("sha256:").unwrap_or(sha256);
        if name.len() != 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(Error::invalid(format!(
                "`{sha256}` is not a blob id (expected 64 lowercase hex digits)"
            )));
        }
        let path = self.dir.join(name);
        let bytes = std::fs::read(&path).map_err(|e| Error::io("read blob", &path, e))?;
        if hash::sha256_hex(&bytes) != name {
            return Err(Error::corrupt(format!(
                "blob {} does not match its hash (damaged on disk)",
                path.display()
            )));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn put_get_round_trip_and_dedup() {
        let tmp = tempfile::tempdir().unwrap();
        let store = BlobStore::new(tmp.path().join("blobs"));
        assert!(!store.dir().exists(), "created lazily");
        let r = store.put(b"hello").unwrap();
        assert_eq!(
            r.sha256,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
        );
        assert_eq!(r.bytes, 5);
        let path = store.dir().join(&r.sha256);
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(store.dir()).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(store.put(b"hello").unwrap(), r);
        assert_eq!(store.get(&r.sha256).unwrap(), b"hello");
        assert_eq!(
            store.get(&format!("sha256:{}", r.sha256)).unwrap(),
            b"hello"
        );
        assert_eq!(std::fs::read_dir(store.dir()).unwrap().count(), 1);
    }

    #[test]
    fn serde_is_camel_case() {
        let r = BlobRef {
            sha256: "ab".into(),
            bytes: 3,
        };
        assert_eq!(
            serde_json::to_string(&r).unwrap(),
            r#"{"sha256":"ab","bytes":3}"#
        );
    }

    #[test]
    fn bad_ids_missing_and_damaged_blobs() {
        let tmp = tempfile::tempdir().unwrap();
        let store = BlobStore::new(tmp.path().to_path_buf());
        assert_eq!(store.get("../x").unwrap_err().kind, ErrorKind::InvalidInput);
        let missing = "0".repeat(64);
        assert_eq!(store.get(&missing).unwrap_err().kind, ErrorKind::NotFound);
        let r = store.put(b"data").unwrap();
        std::fs::write(store.dir().join(&r.sha256), b"tampered").unwrap();
        assert_eq!(store.get(&r.sha256).unwrap_err().kind, ErrorKind::Corrupt);
    }
}
