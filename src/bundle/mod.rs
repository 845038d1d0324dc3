//! Session bundles: one self-contained, credential-free JSON file that moves a Session between
//! runners (docs/spec.md §11; format in `docs/state-format.md`, "Bundles").
//!
//! A bundle is "these files, checksummed": the exact text of the Session's state files
//! (`session.json`, `messages.jsonl`, each `runs/<run>/run.json` and `journal.jsonl`), the blobs
//! its journals reference, and a manifest. A Session's `task` children travel with it, their
//! files under `sessions/<child>/` ([`tree`]). It never holds what a Session does not hold (no auth
//! store, provider key, CLI token, process or OS credential), nor the lease files.
//!
//! - [`export`] runs under the Session's run lease, verifies the Session first and streams the
//!   bundle into an atomically replaced file (memory: one read buffer, never the whole bundle).
//! - [`import`] streams a bundle into a staging directory inside the state dir, checks every
//!   checksum, chain and cross-reference and the workspace identity, and renames the Session into
//!   place only when all of it holds.

mod ancestry;
mod entries;
mod export;
mod import;
mod json;
mod reader;
mod swap;
mod tree;

pub use entries::{Entries, EntryHeader, OpenFile, import_entries};
pub use export::{Exported, Selection, export, select};
pub use import::{Existing, ImportRequest, Imported, Outcome, import, import_stream};
pub use swap::finish as finish_swaps;

use serde::{Deserialize, Serialize};

/// The `format` of every bundle this version writes and the only one it reads.
pub const FORMAT: &str = "kxen-bundle/v1";

/// One entry of `manifest.files`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileSum {
    pub path: String,
    pub bytes: u64,
    /// `sha256:<hex>` of the file's exact bytes.
    pub sha256: String,
}

/// One entry of `manifest.blobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlobSum {
    /// Lowercase hex, no prefix: the blob's name in `blobs/`.
    pub sha256: String,
    pub bytes: u64,
}

/// The last member of a bundle: what it holds, with a SHA-256 per section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    pub files: Vec<FileSum>,
    pub blobs: Vec<BlobSum>,
    /// `sha256:` of the compact JSON of `files` (the files section).
    pub files_sha256: String,
    /// `sha256:` of the compact JSON of `blobs` (the blobs section).
    pub blobs_sha256: String,
}

impl Manifest {
    /// Builds the manifest of these entries, with both section hashes.
    pub fn of(files: Vec<FileSum>, blobs: Vec<BlobSum>) -> Manifest {
        let files_sha256 = section_hash(&files);
        let blobs_sha256 = section_hash(&blobs);
        Manifest {
            files,
            blobs,
            files_sha256,
            blobs_sha256,
        }
    }
}

fn section_hash<T: Serialize>(entries: &[T]) -> String {
    // Plain strings and integers always serialize.
    let json = serde_json::to_string(entries).unwrap_or_default();
    crate::hash::sha256_prefixed(json.as_bytes())
}

/// The relative paths a bundle may carry, in the order export writes them. Anything else (and
/// any id that is not a valid run id) is refused before a path is built.
pub(crate) fn is_run_file(name: &str) -> bool {
    matches!(name, "run.json" | "journal.jsonl")
}
