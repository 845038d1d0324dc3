//! A Session snapshot as git objects, and back into the bundle format.
//!
//! One snapshot is one tree holding exactly what a bundle holds (`bundle::select`): the state
//! files under their bundle paths (`session.json`, `messages.jsonl`, `runs/<run>/run.json`,
//! `runs/<run>/journal.jsonl`), the referenced blobs as `blobs/<sha256>`, and
//! `kxen-snapshot.json` with the format, the Session id and the bundle manifest (size and
//! SHA-256 of every file and blob). Git objects are content-addressed, so a push after ten more
//! calls writes and sends only the grown files, the new blobs and the trees above them.
//!
//! Reading a snapshot back ([`stream_bundle`]) produces the bundle a `session export` of the
//! same Session would have produced, with the manifest's checksums, and `session pull` imports
//! that with `bundle::import_stream`: every check of `session import` applies, and an edited
//! object fails its checksum there. The tree must hold exactly the manifest's entries.

use std::collections::BTreeMap;
use std::io::Write;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::bundle::{self, BlobSum, FileSum, Manifest, Selection};
use crate::error::{Error, Result};
use crate::git::{ObjectStore, TreeEntry};

/// The `format` of `kxen-snapshot.json`.
pub const FORMAT: &str = "kxen-snapshot/v1";
const HEADER: &str = "kxen-snapshot.json";

/// `kxen-snapshot.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Header {
    pub format: String,
    pub session_id: String,
    pub exported_at: String,
    pub exported_by: String,
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
        let oid = store.write_blob(&content)?;
        root.insert(name, oid);
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
    files: BTreeMap<String, String>,
    dirs: BTreeMap<String, Dir>,
}

impl Dir {
    /// Adds blob `oid` at the relative path `path` (`a/b/c`).
    fn insert(&mut self, path: &str, oid: String) {
        match path.split_once('/') {
            Some((dir, rest)) => self
                .dirs
                .entry(dir.to_string())
                .or_default()
                .insert(rest, oid),
            None => {
                self.files.insert(path.to_string(), oid);
            }
        }
    }

    /// Writes the subtrees; returns this directory's entries.
    fn write_entries(&self, store: &ObjectStore) -> Result<Vec<TreeEntry>> {
        let mut entries: Vec<TreeEntry> = self
            .files
            .iter()
            .map(|(name, oid)| TreeEntry {
                name: name.clone(),
                oid: oid.clone(),
                is_tree: false,
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

/// Every blob below tree `oid` as (path, blob id), paths prefixed with `prefix`.
fn walk(
    store: &ObjectStore,
    oid: &str,
    prefix: &str,
    depth: usize,
    out: &mut BTreeMap<String, String>,
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
        if e.is_tree {
            walk(store, &e.oid, &format!("{path}/"), depth + 1, out)?;
        } else {
            out.insert(path, e.oid);
        }
    }
    Ok(())
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

/// Writes the snapshot `commit` of Session `session_id` to `out` in bundle format (what
/// `session export` writes), with the checksums of its manifest. Refuses (exit 10) a tree that
/// does not hold exactly the manifest's entries, or another Session's snapshot.
pub fn stream_bundle(
    store: &ObjectStore,
    commit: &str,
    session_id: &str,
    label: &str,
    out: &mut dyn Write,
) -> Result<()> {
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
    if header.format != FORMAT {
        return Err(damaged(
            label,
            format!(
                "format {:?} is not supported (this kxen-agent reads {FORMAT:?})",
                header.format
            ),
        ));
    }
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
    let mut files: BTreeMap<String, String> = BTreeMap::new();
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
            (_, true) => walk(store, &e.oid, &format!("{name}/"), 1, &mut files)
                .map_err(|why| damaged(label, why.message))?,
            (_, false) => {
                files.insert(name.clone(), e.oid.clone());
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
    let sink = std::path::Path::new(label);
    let w = |out: &mut dyn Write, s: &str| {
        out.write_all(s.as_bytes())
            .map_err(|e| Error::io("write", sink, e))
    };
    let head = serde_json::json!({
        "format": bundle::FORMAT,
        "sessionId": session_id,
        "exportedAt": header.exported_at,
        "exportedBy": header.exported_by,
    })
    .to_string();
    w(out, &head[..head.len() - 1])?;
    w(out, ",\n\"files\":[")?;
    for (i, f) in manifest.files.iter().enumerate() {
        let content = store.blob(&files[&f.path])?;
        w(out, if i == 0 { "\n" } else { ",\n" })?;
        w(
            out,
            &format!("{{\"path\":{},\"content\":\"", json_str(&f.path)),
        )?;
        // Not UTF-8 means edited: the import would refuse it, but the escaper needs text.
        if std::str::from_utf8(&content).is_err() {
            return Err(damaged(label, format!("{} is not UTF-8 text", f.path)));
        }
        crate::bundle::write_string_body(
            out,
            &mut content.as_slice(),
            content.len() as u64,
            sink,
            sink,
        )?;
        w(
            out,
            &format!(
                "\",\"bytes\":{},\"sha256\":{}}}",
                f.bytes,
                json_str(&f.sha256)
            ),
        )?;
    }
    w(out, "],\n\"blobs\":[")?;
    for (i, b) in manifest.blobs.iter().enumerate() {
        let content = store.blob(&blobs[&b.sha256])?;
        w(out, if i == 0 { "\n" } else { ",\n" })?;
        w(
            out,
            &format!(
                "{{\"sha256\":{},\"bytes\":{},\"contentBase64\":\"",
                json_str(&b.sha256),
                b.bytes
            ),
        )?;
        w(
            out,
            &base64::engine::general_purpose::STANDARD.encode(&content),
        )?;
        w(out, "\"}")?;
    }
    let manifest = serde_json::to_string(manifest)
        .map_err(|e| Error::failed(format!("cannot serialize the manifest: {e}")))?;
    w(out, "],\n\"manifest\":")?;
    w(out, &manifest)?;
    w(out, "}\n")
}

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}
