//! A Session snapshot as git objects, and back into the bundle format.
//!
//! One snapshot is one tree holding exactly what a bundle holds (`bundle::select`): the state
//! files under their bundle paths (`session.json`, `messages.jsonl`, `runs/<run>/run.json`,
//! `runs/<run>/journal.jsonl`), the referenced blobs as `blobs/<sha256>`, and
//! `kxen-snapshot.json` with the format, the Session id and the bundle manifest (size and
//! SHA-256 of every file and blob). The append-only files (the message log and the journals) are
//! stored as trees of segments ([`segments`]) whose closed members never change. Git objects are
//! content-addressed, so a push after ten more calls writes and sends only the open segments,
//! the new ones, the new blobs and the trees above them.
//!
//! Formats: `kxen-snapshot/v2` (written) stores append-only files as segments;
//! `kxen-snapshot/v1` (read only, written by the first release of `session push`) stores every
//! file as one blob. A reader takes both, a tree in either layout must be exactly that layout,
//! and a format it does not know is refused (exit 10) naming it.
//!
//! Reading a snapshot back ([`open`], [`Opened::read_into`]) hands `bundle::import_entries` the
//! entries a `session export` of the same Session would have written, with the manifest's
//! checksums, without the bundle's text in between: every check of `session import` applies,
//! and an edited object fails its checksum there. The tree must hold exactly the manifest's
//! entries.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::segments;
use crate::bundle::{BlobSum, Entries, EntryHeader, FileSum, Manifest, Selection};
use crate::error::{Error, Result};
use crate::git::{ObjectStore, TreeEntry};

/// The `format` of `kxen-snapshot.json` this version writes.
pub const FORMAT: &str = "kxen-snapshot/v2";
/// The first format, every file one blob: still read.
pub const FORMAT_V1: &str = "kxen-snapshot/v1";
const HEADER: &str = "kxen-snapshot.json";

/// Whether the file at bundle path `path` is append-only (stored as segments from v2 on).
fn append_only(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    matches!(name, "messages.jsonl" | "journal.jsonl")
}

/// `kxen-snapshot.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Header {
    pub format: String,
    pub session_id: String,
    pub exported_at: String,
    pub exported_by: String,
    /// v2: [`segments::SEGMENT_BYTES`], the segment size the tree was split with (absent in v1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment_bytes: Option<u64>,
    pub manifest: Manifest,
}

/// A written snapshot tree.
#[derive(Debug, Clone)]
pub struct Written {
    pub tree: String,
    pub files: usize,
    pub blobs: usize,
    pub bytes: u64,
}

/// Writes `selection` of Session `session_id` as a tree in `store`. `previous` (the tree of the
/// last snapshot) lets a blob already stored under its SHA-256 be reused without reading it.
pub fn write(
    store: &ObjectStore,
    session_id: &str,
    selection: &Selection,
    previous: Option<&str>,
) -> Result<Written> {
    let known_blobs: BTreeMap<String, String> = match previous {
        Some(tree) => match store
            .tree(tree)?
            .into_iter()
            .find(|e| e.name == "blobs" && e.is_tree)
        {
            Some(blobs) => store
                .tree(&blobs.oid)?
                .into_iter()
                .map(|e| (e.name, e.oid))
                .collect(),
            None => BTreeMap::new(),
        },
        None => BTreeMap::new(),
    };
    // Path → blob id, nested into trees below.
    let mut root = Dir::default();
    let mut sums = Vec::with_capacity(selection.files.len());
    let mut bytes = 0u64;
    for (name, path, len) in &selection.files {
        let content = read_prefix(path, *len)?;
        bytes += *len;
        sums.push(FileSum {
            path: name.clone(),
            bytes: *len,
            sha256: crate::hash::sha256_prefixed(&content),
        });
        if append_only(name) {
            let parts = segments::split(&content);
            let mut entries = Vec::with_capacity(parts.len());
            for (i, range) in parts.into_iter().enumerate() {
                entries.push(TreeEntry {
                    name: segments::name(i),
                    oid: store.write_blob(&content[range])?,
                    is_tree: false,
                });
            }
            root.insert(name, store.write_tree(&entries)?, true);
        } else {
            root.insert(name, store.write_blob(&content)?, false);
        }
    }
    let mut top = root.write_entries(store)?;
    let mut blob_sums = Vec::with_capacity(selection.blobs.len());
    let mut blob_entries = Vec::new();
    for name in &selection.blobs {
        let path = selection.blobs_dir.join(name);
        let size = std::fs::metadata(&path)
            .map_err(|e| Error::io("stat", &path, e))?
            .len();
        bytes += size;
        // The blob was hashed against its name by the verification that selected it.
        let oid = match known_blobs.get(name) {
            Some(oid) => oid.clone(),
            None => {
                let content = std::fs::read(&path).map_err(|e| Error::io("read", &path, e))?;
                store.write_blob(&content)?
            }
        };
        blob_entries.push(TreeEntry {
            name: name.clone(),
            oid,
            is_tree: false,
        });
        blob_sums.push(BlobSum {
            sha256: name.clone(),
            bytes: size,
        });
    }
    if !blob_entries.is_empty() {
        top.push(TreeEntry {
            name: "blobs".into(),
            oid: store.write_tree(&blob_entries)?,
            is_tree: true,
        });
    }
    let header = Header {
        format: FORMAT.into(),
        session_id: session_id.into(),
        exported_at: crate::clock::now_rfc3339(),
        exported_by: concat!("kxen-agent ", env!("CARGO_PKG_VERSION")).into(),
        segment_bytes: Some(segments::SEGMENT_BYTES as u64),
        manifest: Manifest::of(sums, blob_sums),
    };
    let header_json = serde_json::to_vec_pretty(&header)
        .map_err(|e| Error::failed(format!("cannot serialize {HEADER}: {e}")))?;
    top.push(TreeEntry {
        name: HEADER.into(),
        oid: store.write_blob(&header_json)?,
        is_tree: false,
    });
    Ok(Written {
        tree: store.write_tree(&top)?,
        files: selection.files.len(),
        blobs: selection.blobs.len(),
        bytes,
    })
}

/// A directory of the snapshot tree being built.
#[derive(Default)]
struct Dir {
    /// Name → (object id, whether it is a tree: a segmented file).
    files: BTreeMap<String, (String, bool)>,
    dirs: BTreeMap<String, Dir>,
}

impl Dir {
    /// Adds object `oid` (a blob, or a file's segment tree) at the relative path `path` (`a/b/c`).
    fn insert(&mut self, path: &str, oid: String, is_tree: bool) {
        match path.split_once('/') {
            Some((dir, rest)) => self
                .dirs
                .entry(dir.to_string())
                .or_default()
                .insert(rest, oid, is_tree),
            None => {
                self.files.insert(path.to_string(), (oid, is_tree));
            }
        }
    }

    /// Writes the subtrees; returns this directory's entries.
    fn write_entries(&self, store: &ObjectStore) -> Result<Vec<TreeEntry>> {
        let mut entries: Vec<TreeEntry> = self
            .files
            .iter()
            .map(|(name, (oid, is_tree))| TreeEntry {
                name: name.clone(),
                oid: oid.clone(),
                is_tree: *is_tree,
            })
            .collect();
        for (name, dir) in &self.dirs {
            let sub = dir.write_entries(store)?;
            entries.push(TreeEntry {
                name: name.clone(),
                oid: store.write_tree(&sub)?,
                is_tree: true,
            });
        }
        Ok(entries)
    }
}

/// How a file is stored in a snapshot tree.
#[derive(Debug, Clone)]
enum Stored {
    /// One blob (every file in v1; the current-state files in v2).
    Whole(String),
    /// The blob ids of its segments, in order (append-only files in v2).
    Segments(Vec<String>),
}

/// Every file below tree `oid` as (path, how it is stored), paths prefixed with `prefix`. With
/// `segmented` (v2), a subtree at an append-only file's path is that file's segments.
fn walk(
    store: &ObjectStore,
    oid: &str,
    prefix: &str,
    depth: usize,
    segmented: bool,
    out: &mut BTreeMap<String, Stored>,
) -> Result<()> {
    // A Session's deepest path is sessions/<child>/…/runs/<run>/journal.jsonl; task trees are
    // a few levels deep. A deeper tree is not a snapshot.
    if depth > 64 {
        return Err(Error::corrupt(format!(
            "{prefix}: the snapshot tree is too deep"
        )));
    }
    for e in store.tree(oid)? {
        let path = format!("{prefix}{}", e.name);
        match (e.is_tree, segmented && append_only(&path)) {
            (true, true) => {
                out.insert(
                    path.clone(),
                    Stored::Segments(segment_ids(store, &e.oid, &path)?),
                );
            }
            (true, false) => walk(
                store,
                &e.oid,
                &format!("{path}/"),
                depth + 1,
                segmented,
                out,
            )?,
            (false, true) => {
                return Err(Error::corrupt(format!(
                    "{path} is one blob, not a tree of segments"
                )));
            }
            (false, false) => {
                out.insert(path, Stored::Whole(e.oid));
            }
        }
    }
    Ok(())
}

/// The blob ids of the segment tree `oid` of `path`: exactly `000000`, `000001`, … in order.
fn segment_ids(store: &ObjectStore, oid: &str, path: &str) -> Result<Vec<String>> {
    let entries = store.tree(oid)?;
    if entries.is_empty() || entries.len() > segments::MAX_SEGMENTS {
        return Err(Error::corrupt(format!(
            "{path} has {} segments",
            entries.len()
        )));
    }
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        if e.is_tree || e.name != segments::name(i) {
            return Err(Error::corrupt(format!(
                "{path}/{} is not segment {}",
                e.name,
                segments::name(i)
            )));
        }
        out.push(e.oid);
    }
    Ok(out)
}

/// The trees of two snapshots hold the same Session content (their headers aside, which carry
/// the time of the snapshot).
pub fn same_content(store: &ObjectStore, a: &str, b: &str) -> Result<bool> {
    let strip = |tree: &str| -> Result<Vec<TreeEntry>> {
        Ok(store
            .tree(tree)?
            .into_iter()
            .filter(|e| e.name != HEADER)
            .collect())
    };
    Ok(strip(a)? == strip(b)?)
}

/// The first `len` bytes of `path` (a chained file's complete prefix).
fn read_prefix(path: &std::path::Path, len: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| Error::io("read", path, e))?;
    let mut out = Vec::with_capacity(len as usize);
    file.take(len)
        .read_to_end(&mut out)
        .map_err(|e| Error::io("read", path, e))?;
    if (out.len() as u64) < len {
        return Err(Error::conflict(format!(
            "{} shrank while it was being snapshotted",
            path.display()
        )));
    }
    Ok(out)
}

/// A damaged snapshot: exit 10, naming the commit.
pub fn damaged(label: &str, why: impl std::fmt::Display) -> Error {
    Error::corrupt(format!("{label}: the snapshot is damaged: {why}")).with_hint(
        "push the Session again from a runner with an intact copy (`kxen-agent session push`)",
    )
}

/// A snapshot whose tree holds exactly its manifest's entries, ready to be read.
pub struct Opened {
    header: Header,
    files: BTreeMap<String, Stored>,
    blobs: BTreeMap<String, String>,
}

/// Opens the snapshot `commit` of Session `session_id`: refuses (exit 10) a format this version
/// does not read, another Session's snapshot, and a tree that does not hold exactly the
/// manifest's entries.
pub fn open(store: &ObjectStore, commit: &str, session_id: &str, label: &str) -> Result<Opened> {
    let info = store.commit(commit)?;
    let mut top: BTreeMap<String, TreeEntry> = BTreeMap::new();
    for e in store.tree(&info.tree)? {
        top.insert(e.name.clone(), e);
    }
    let header = top
        .get(HEADER)
        .filter(|e| !e.is_tree)
        .ok_or_else(|| damaged(label, format!("it has no {HEADER}")))?;
    let header: Header = serde_json::from_slice(&store.blob(&header.oid)?)
        .map_err(|e| damaged(label, format!("{HEADER} does not parse: {e}")))?;
    let segmented = match (header.format.as_str(), header.segment_bytes) {
        (FORMAT, Some(n)) if n == segments::SEGMENT_BYTES as u64 => true,
        (FORMAT, n) => {
            return Err(damaged(
                label,
                format!(
                    "segmentBytes {n:?} is not {} (the only size {FORMAT} uses)",
                    segments::SEGMENT_BYTES
                ),
            ));
        }
        (FORMAT_V1, None) => false,
        (FORMAT_V1, Some(_)) => {
            return Err(damaged(label, format!("{FORMAT_V1} has no segmentBytes")));
        }
        (other, _) => {
            return Err(damaged(
                label,
                format!(
                    "format {other:?} is not supported (this kxen-agent reads {FORMAT:?} and \
                     {FORMAT_V1:?}); it may be from a newer kxen-agent"
                ),
            )
            .with_hint("pull it with the kxen-agent version that pushed it, or a newer one"));
        }
    };
    if header.session_id != session_id {
        return Err(damaged(
            label,
            format!(
                "it is a snapshot of {}, not of {session_id}",
                header.session_id
            ),
        ));
    }
    // Every path of the tree, to be matched against the manifest (the import then checks
    // that each is a path a Session holds).
    let mut files: BTreeMap<String, Stored> = BTreeMap::new();
    let mut blobs: BTreeMap<String, String> = BTreeMap::new();
    for (name, e) in &top {
        match (name.as_str(), e.is_tree) {
            (HEADER, false) => {}
            ("blobs", true) => {
                for b in store.tree(&e.oid)? {
                    if b.is_tree {
                        return Err(damaged(label, format!("blobs/{} is a directory", b.name)));
                    }
                    blobs.insert(b.name, b.oid);
                }
            }
            (_, true) if segmented && append_only(name) => {
                let ids =
                    segment_ids(store, &e.oid, name).map_err(|why| damaged(label, why.message))?;
                files.insert(name.clone(), Stored::Segments(ids));
            }
            (_, true) => walk(store, &e.oid, &format!("{name}/"), 1, segmented, &mut files)
                .map_err(|why| damaged(label, why.message))?,
            (_, false) if segmented && append_only(name) => {
                return Err(damaged(
                    label,
                    format!("{name} is one blob, not a tree of segments"),
                ));
            }
            (_, false) => {
                files.insert(name.clone(), Stored::Whole(e.oid.clone()));
            }
        }
    }
    let manifest = &header.manifest;
    if manifest.files.len() != files.len()
        || manifest.files.iter().any(|f| !files.contains_key(&f.path))
    {
        return Err(damaged(
            label,
            "its files are not exactly the ones its manifest lists",
        ));
    }
    if manifest.blobs.len() != blobs.len()
        || manifest
            .blobs
            .iter()
            .any(|b| !blobs.contains_key(&b.sha256))
    {
        return Err(damaged(
            label,
            "its blobs are not exactly the ones its manifest lists",
        ));
    }
    Ok(Opened {
        header,
        files,
        blobs,
    })
}

impl Opened {
    /// Where and when the snapshot was taken.
    pub fn entry_header(&self) -> EntryHeader {
        EntryHeader {
            session_id: self.header.session_id.clone(),
            exported_at: self.header.exported_at.clone(),
            exported_by: self.header.exported_by.clone(),
        }
    }

    /// Hands every file (segment by segment, as its blobs are read) and blob to `into`, in
    /// manifest order (so every order rule of a bundle applies to the manifest), then the
    /// manifest: what `session export` of the same Session would have
    /// written, with the manifest's checksums, for the import to check.
    pub fn read_into(self, store: &ObjectStore, label: &str, into: &mut Entries) -> Result<()> {
        for f in &self.header.manifest.files {
            let (parts, segmented) = match &self.files[&f.path] {
                Stored::Whole(oid) => (std::slice::from_ref(oid), false),
                Stored::Segments(ids) => (ids.as_slice(), true),
            };
            let mut file = into.open_file(&f.path)?;
            for (k, oid) in parts.iter().enumerate() {
                let content = store.blob(oid)?;
                if segmented && let Some(why) = segments::check(k, parts.len(), &content) {
                    return Err(damaged(label, format!("{}: {why}", f.path)));
                }
                // A bundle holds text: a file that is not UTF-8 was edited. Segments end at line
                // ends, so each of an intact file is UTF-8 on its own.
                if std::str::from_utf8(&content).is_err() {
                    return Err(damaged(label, format!("{} is not UTF-8 text", f.path)));
                }
                file.write(content)?;
            }
            into.close_file(file, f)?;
        }
        for b in &self.header.manifest.blobs {
            into.blob(&b.sha256, b.bytes, store.blob(&self.blobs[&b.sha256])?)?;
        }
        into.manifest(self.header.manifest);
        Ok(())
    }
}
