//! `session import FILE --workspace PATH`.
//!
//! The bundle is read as a stream (one file's content in memory at a time) straight into
//! `sessions/.staging-<ses>/` — the name readers already ignore and Session creation uses — under
//! that staging directory's run lease. Order of checks: the format version, the Session id, the
//! workspace identity and branch of PATH against the bundle's binding and that no Session with
//! this id exists (all before anything is written); then, per entry, path safety (every id
//! validated before a path is built), size and SHA-256; then the manifest and its section
//! hashes; then the staged Session is verified end to end (chains, cross-references, lock,
//! blobs). Only then are blobs moved into `blobs/` and the Session renamed into place. Any
//! failure removes the staging directory (and a state dir this import created), so the target
//! is left as it was.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::{BlobSum, FORMAT, FileSum, Manifest, is_run_file};
use crate::error::{Error, ErrorKind, Result};
use crate::fsx::{self, failpoint};
use crate::git;
use crate::hash;
use crate::ids::{self, IdKind};
use crate::session::verify::{self, Mode};
use crate::session::{Lease, SessionMeta};
use crate::state::{SessionPaths, StateDir};

/// What to import, and where.
#[derive(Debug, Clone)]
pub struct ImportRequest {
    pub bundle: PathBuf,
    pub workspace: PathBuf,
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Imported {
    pub session_id: String,
    /// The canonical root the Session is now bound to (PATH).
    pub workspace: PathBuf,
    /// The root it was bound to on the exporting runner.
    pub previous_workspace: PathBuf,
    pub files: usize,
    pub blobs: usize,
    pub messages: usize,
    pub runs: usize,
}

/// `imported.json`, written into the imported Session: where it came from.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct ImportRecord<'a> {
    imported_at: String,
    exported_at: &'a str,
    exported_by: &'a str,
    previous_workspace: &'a Path,
    workspace: &'a Path,
}

/// The top-level members of a bundle, in the only order they may appear.
const MEMBERS: [&str; 7] = [
    "format",
    "sessionId",
    "exportedAt",
    "exportedBy",
    "files",
    "blobs",
    "manifest",
];

/// Imports a bundle into `state`. See the module docs for the order of checks.
pub fn import(state: &StateDir, req: &ImportRequest) -> Result<Imported> {
    let file = File::open(&req.bundle).map_err(|e| Error::io("read", &req.bundle, e))?;
    if file
        .metadata()
        .map_err(|e| Error::io("stat", &req.bundle, e))?
        .is_dir()
    {
        return Err(Error::invalid(format!(
            "{} is a directory, not a bundle",
            req.bundle.display()
        )));
    }
    let mut ctx = Ctx {
        state,
        req,
        header: Header::default(),
        staging: None,
        paths_seen: HashSet::new(),
        files: Vec::new(),
        blobs: Vec::new(),
        blob_names: HashSet::new(),
        manifest: None,
        binding: None,
        failure: None,
    };
    let result = read_and_install(&mut ctx, file);
    if result.is_err()
        && let Some(staging) = &ctx.staging
    {
        let _ = fsx::remove_staging_dir(&staging.dir);
        for dir in staging.created.iter().rev() {
            fsx::remove_empty_dir(dir);
        }
    }
    result
}

fn read_and_install(ctx: &mut Ctx, file: File) -> Result<Imported> {
    let reader = BufReader::with_capacity(1 << 20, file);
    let mut de = serde_json::Deserializer::from_reader(reader);
    let parsed = BundleSeed { ctx: &mut *ctx }
        .deserialize(&mut de)
        .and_then(|()| de.end());
    if let Err(e) = parsed {
        return Err(ctx.failure.take().unwrap_or_else(|| {
            let where_ = if e.line() > 0 {
                format!(":{}:{}", e.line(), e.column())
            } else {
                String::new()
            };
            invalid(
                ctx.req,
                format!(
                    "{}{where_}: not a valid bundle: {e}",
                    ctx.req.bundle.display()
                ),
            )
        }));
    }
    let Some(staging) = ctx.staging.take() else {
        return Err(invalid(ctx.req, "the bundle holds no files".into()));
    };
    let result = install(ctx, &staging);
    ctx.staging = Some(staging);
    result
}

/// Everything after the last byte was read: manifest, verification, moving into place.
fn install(ctx: &mut Ctx, staging: &Staging) -> Result<Imported> {
    let manifest = ctx
        .manifest
        .take()
        .ok_or_else(|| invalid(ctx.req, "the bundle has no manifest".into()))?;
    let expected = Manifest::of(ctx.files.clone(), ctx.blobs.clone());
    if manifest.files != expected.files {
        return Err(invalid(
            ctx.req,
            "manifest.files does not list exactly the bundle's files (an entry was added, removed, reordered or changed)".into(),
        ));
    }
    if manifest.blobs != expected.blobs {
        return Err(invalid(
            ctx.req,
            "manifest.blobs does not list exactly the bundle's blobs".into(),
        ));
    }
    if manifest.files_sha256 != expected.files_sha256
        || manifest.blobs_sha256 != expected.blobs_sha256
    {
        return Err(invalid(
            ctx.req,
            "a manifest section hash does not match its section".into(),
        ));
    }
    let id = ctx.header.session_id.clone();
    let paths = SessionPaths {
        dir: staging.dir.clone(),
    };
    // Every staged blob was hashed against its name as it arrived (`accept_blob`).
    let hashed: HashMap<String, u64> = ctx
        .blobs
        .iter()
        .map(|b| (b.sha256.clone(), b.bytes))
        .collect();
    let report =
        verify::verify_with(&paths, &id, &staging.blobs, Mode::Strict, &hashed).map_err(|e| {
            // Name the file as the bundle knows it, not by its staging path.
            let prefix = format!("{}/", staging.dir.display());
            let mut err = Error::new(
                e.kind,
                format!(
                    "{}: {}",
                    ctx.req.bundle.display(),
                    e.message.replace(&prefix, "")
                ),
            );
            err.hints = vec!["the bundle is damaged; export it again from the original".into()];
            err
        })?;
    if let Some(extra) = ctx.blob_names.iter().find(|b| !report.blobs.contains(*b)) {
        return Err(invalid(
            ctx.req,
            format!("blob {extra} is not referenced by any journal"),
        ));
    }

    // Bind the Session to PATH: identity and branch were checked when session.json arrived.
    let mut meta: SessionMeta = SessionMeta::read(&paths, &id)?;
    let (binding, previous) = ctx.binding.take().expect("checked with session.json");
    meta.workspace = binding;
    fsx::write_atomic_json(&paths.session_json(), &meta, fsx::STATE_FILE_MODE)?;
    let record = ImportRecord {
        imported_at: crate::clock::now_rfc3339(),
        exported_at: &ctx.header.exported_at,
        exported_by: &ctx.header.exported_by,
        previous_workspace: &previous,
        workspace: &meta.workspace.root,
    };
    fsx::write_atomic_json(
        &paths.dir.join("imported.json"),
        &record,
        fsx::STATE_FILE_MODE,
    )?;
    failpoint::hit("import.after-staging");

    // Blobs are content-addressed: one already present is the same bytes.
    let blobs_dir = ctx.state.blobs_dir();
    if !ctx.blob_names.is_empty() {
        fsx::create_dir_private(&blobs_dir)?;
    }
    // One sync makes every staged file and directory durable before any of them is moved.
    fsx::sync_staged(&staging.dir)?;
    for name in &ctx.blob_names {
        let to = blobs_dir.join(name);
        if to.is_file() {
            continue;
        }
        fsx::rename_file_unsynced(&staging.blobs.join(name), &to)?;
    }
    if !ctx.blob_names.is_empty() {
        fsx::fsync_dir(&blobs_dir)?;
    }
    fsx::remove_staging_dir(&staging.blobs)?;
    failpoint::hit("import.before-rename");
    fsx::rename_dir_into_place(&staging.dir, &ctx.state.session(&id).dir)?;
    Ok(Imported {
        session_id: id,
        workspace: meta.workspace.root.clone(),
        previous_workspace: previous,
        files: ctx.files.len(),
        blobs: ctx.blobs.len(),
        messages: report.messages,
        runs: report.runs.len(),
    })
}

#[derive(Debug, Default)]
struct Header {
    session_id: String,
    exported_at: String,
    exported_by: String,
}

/// The staging directory, its lease, and the directories this import created.
struct Staging {
    dir: PathBuf,
    blobs: PathBuf,
    _lease: Lease,
    /// Created by this import (outermost first); removed again, if empty, on failure.
    created: Vec<PathBuf>,
}

struct Ctx<'a> {
    state: &'a StateDir,
    req: &'a ImportRequest,
    header: Header,
    staging: Option<Staging>,
    paths_seen: HashSet<String>,
    files: Vec<FileSum>,
    blobs: Vec<BlobSum>,
    blob_names: HashSet<String>,
    manifest: Option<Manifest>,
    /// The binding at PATH and the bundle's original root.
    binding: Option<(git::WorkspaceBinding, PathBuf)>,
    /// The real error behind a serde error raised from inside the stream.
    failure: Option<Error>,
}

fn invalid(req: &ImportRequest, why: String) -> Error {
    let message = if why.starts_with(&req.bundle.display().to_string()) {
        why
    } else {
        format!("{}: {why}", req.bundle.display())
    };
    Error::invalid(message).with_hint(
        "the bundle is damaged or not a kxen-agent bundle; export it again from the original",
    )
}

impl Ctx<'_> {
    fn fail<E: de::Error>(&mut self, err: Error) -> E {
        let text = err.message.clone();
        self.failure = Some(err);
        E::custom(text)
    }

    /// The first file: checks the Session id, PATH's identity and branch, and that the id is
    /// free, then creates the staging directory.
    fn begin(&mut self, content: &str) -> Result<()> {
        let id = self.header.session_id.clone();
        let meta: SessionMeta = serde_json::from_str(content)
            .map_err(|e| invalid(self.req, format!("session.json does not parse: {e}")))?;
        if meta.id != id {
            return Err(invalid(
                self.req,
                format!(
                    "session.json names session {} but the bundle is for {id}",
                    meta.id
                ),
            ));
        }
        let target = self.state.session(&id);
        if target.dir.symlink_metadata().is_ok() {
            return Err(Error::conflict(format!(
                "session {id} already exists in {}",
                self.state.root().display()
            ))
            .with_hint(format!(
                "it was imported (or created) here before: continue it with \
                 `kxen-agent --resume {id}`, {}",
                crate::run::SAME_FLAGS
            )));
        }
        let verified = git::verify(&meta.workspace, &self.req.workspace, true).map_err(|e| {
            if e.kind == ErrorKind::Conflict {
                let mut err = Error::conflict(format!(
                    "cannot import session {id} into workspace {}: {}",
                    self.req.workspace.display(),
                    e.message
                ));
                err.hints = vec![
                    "import into a clone of the Session's repository, on the Session's branch"
                        .into(),
                ];
                err
            } else {
                e
            }
        })?;
        self.binding = Some((verified.binding, meta.workspace.root.clone()));

        let mut created = Vec::new();
        for dir in [self.state.root().to_path_buf(), self.state.sessions_dir()] {
            if !dir.exists() {
                created.push(dir);
            }
        }
        self.state.ensure()?;
        let dir = self.state.sessions_dir().join(format!(".staging-{id}"));
        if dir.exists() {
            // A killed import or creation left it; its lease tells whether it is still alive.
            drop(Lease::acquire(&dir, &id).map_err(|_| {
                Error::conflict(format!(
                    "session {id} is being imported or created by another process ({})",
                    dir.display()
                ))
                .with_hint("wait for it to finish, then retry")
            })?);
            fsx::remove_staging_dir(&dir)?;
        }
        fsx::create_dir_private(&dir)?;
        let lease = match Lease::acquire(&dir, &id) {
            Ok(l) => l,
            Err(e) => {
                let _ = fsx::remove_staging_dir(&dir);
                return Err(e);
            }
        };
        let blobs = dir.join(".import-blobs");
        self.staging = Some(Staging {
            dir,
            blobs,
            _lease: lease,
            created,
        });
        Ok(())
    }

    fn accept_file(&mut self, entry: FileEntry) -> Result<()> {
        let first = self.files.is_empty();
        if first != (entry.path == "session.json") {
            return Err(invalid(
                self.req,
                format!(
                    "file {:?}: session.json must be the first file, and only the first",
                    entry.path
                ),
            ));
        }
        let rel = safe_path(&entry.path).ok_or_else(|| {
            invalid(
                self.req,
                format!(
                    "file path {:?} is not one a Session holds (session.json, messages.jsonl, runs/<run id>/run.json or journal.jsonl)",
                    entry.path
                ),
            )
        })?;
        if !self.paths_seen.insert(entry.path.clone()) {
            return Err(invalid(
                self.req,
                format!("file {} appears twice", entry.path),
            ));
        }
        let actual = hash::sha256_prefixed(entry.content.as_bytes());
        if entry.bytes != entry.content.len() as u64 || entry.sha256 != actual {
            return Err(invalid(
                self.req,
                format!(
                    "file {}: checksum mismatch (the bundle says {} bytes, {}; the content has {} bytes, {actual})",
                    entry.path,
                    entry.bytes,
                    entry.sha256,
                    entry.content.len()
                ),
            ));
        }
        if first {
            self.begin(&entry.content)?;
        }
        let staging = self.staging.as_ref().expect("created by begin");
        let path = staging.dir.join(&rel);
        if let Some(parent) = path.parent() {
            fsx::create_staged_dir(parent)?;
        }
        fsx::write_staged(&path, entry.content.as_bytes(), fsx::STATE_FILE_MODE)?;
        self.files.push(FileSum {
            path: entry.path,
            bytes: entry.bytes,
            sha256: entry.sha256,
        });
        Ok(())
    }

    fn accept_blob(&mut self, entry: BlobEntry) -> Result<()> {
        let name = &entry.sha256;
        if name.len() != 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(invalid(
                self.req,
                format!("blob id {name:?} is not 64 lowercase hex digits"),
            ));
        }
        if !self.blob_names.insert(name.clone()) {
            return Err(invalid(self.req, format!("blob {name} appears twice")));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(entry.content_base64.as_bytes())
            .map_err(|e| invalid(self.req, format!("blob {name}: not base64 ({e})")))?;
        if bytes.len() as u64 != entry.bytes || hash::sha256_hex(&bytes) != *name {
            return Err(invalid(
                self.req,
                format!("blob {name}: checksum mismatch (its content does not hash to its name)"),
            ));
        }
        let Some(staging) = &self.staging else {
            return Err(invalid(self.req, "blobs come after the files".into()));
        };
        fsx::create_staged_dir(&staging.blobs)?;
        fsx::write_staged(&staging.blobs.join(name), &bytes, fsx::STATE_FILE_MODE)?;
        self.blobs.push(BlobSum {
            sha256: entry.sha256,
            bytes: entry.bytes,
        });
        Ok(())
    }
}

/// The relative path for a bundle file name, or `None` if a Session never holds it. The run id
/// is validated before it becomes part of a path.
fn safe_path(name: &str) -> Option<PathBuf> {
    match name {
        "session.json" | "messages.jsonl" => Some(PathBuf::from(name)),
        _ => {
            let mut parts = name.split('/');
            let (Some("runs"), Some(run), Some(file), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return None;
            };
            if ids::validate_kind(run, IdKind::Run).is_err() || !is_run_file(file) {
                return None;
            }
            Some(Path::new("runs").join(run).join(file))
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileEntry {
    path: String,
    content: String,
    bytes: u64,
    sha256: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BlobEntry {
    sha256: String,
    bytes: u64,
    content_base64: String,
}

struct BundleSeed<'c, 'a> {
    ctx: &'c mut Ctx<'a>,
}

impl<'de> DeserializeSeed<'de> for BundleSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for BundleSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a kxen-agent bundle (a JSON object starting with \"format\")")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<(), A::Error> {
        let ctx = self.ctx;
        let mut next = 0;
        while let Some(key) = map.next_key::<String>()? {
            let Some(&expected) = MEMBERS.get(next) else {
                return Err(ctx.fail(invalid(
                    ctx.req,
                    format!("unknown top-level field {key:?} after the manifest"),
                )));
            };
            if key != expected {
                let why = if MEMBERS.contains(&key.as_str()) {
                    format!("top-level field {key:?} is out of order (expected {expected:?})")
                } else {
                    format!("unknown top-level field {key:?} (expected {expected:?})")
                };
                return Err(ctx.fail(invalid(ctx.req, why)));
            }
            next += 1;
            match expected {
                "format" => {
                    let format: String = map.next_value()?;
                    if format != FORMAT {
                        return Err(ctx.fail(invalid(
                            ctx.req,
                            format!(
                                "format {format:?} is not supported (this kxen-agent reads {FORMAT:?})"
                            ),
                        )));
                    }
                }
                "sessionId" => {
                    let id: String = map.next_value()?;
                    if let Err(e) = ids::validate_kind(&id, IdKind::Session) {
                        return Err(ctx.fail(invalid(ctx.req, format!("sessionId: {}", e.message))));
                    }
                    ctx.header.session_id = id;
                }
                "exportedAt" => ctx.header.exported_at = map.next_value()?,
                "exportedBy" => ctx.header.exported_by = map.next_value()?,
                "files" => map.next_value_seed(Entries {
                    ctx: &mut *ctx,
                    blobs: false,
                })?,
                "blobs" => map.next_value_seed(Entries {
                    ctx: &mut *ctx,
                    blobs: true,
                })?,
                _ => ctx.manifest = Some(map.next_value()?),
            }
        }
        if next < MEMBERS.len() {
            return Err(ctx.fail(invalid(
                ctx.req,
                format!("the bundle ends before {:?} (truncated?)", MEMBERS[next]),
            )));
        }
        Ok(())
    }
}

/// The `files` or `blobs` array, each entry checked and staged as it arrives.
struct Entries<'c, 'a> {
    ctx: &'c mut Ctx<'a>,
    blobs: bool,
}

impl<'de> DeserializeSeed<'de> for Entries<'_, '_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> std::result::Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Entries<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<(), A::Error> {
        if self.blobs {
            while let Some(entry) = seq.next_element::<BlobEntry>()? {
                if let Err(e) = self.ctx.accept_blob(entry) {
                    return Err(self.ctx.fail(e));
                }
            }
        } else {
            while let Some(entry) = seq.next_element::<FileEntry>()? {
                if let Err(e) = self.ctx.accept_file(entry) {
                    return Err(self.ctx.fail(e));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_session_paths_with_valid_ids_are_accepted() {
        let run = crate::ids::new_id(IdKind::Run);
        assert!(safe_path("session.json").is_some());
        assert!(safe_path("messages.jsonl").is_some());
        assert!(safe_path(&format!("runs/{run}/run.json")).is_some());
        assert!(safe_path(&format!("runs/{run}/journal.jsonl")).is_some());
        for bad in [
            "../session.json".to_string(),
            "/etc/passwd".into(),
            "runs/../../x/run.json".into(),
            format!("runs/{run}/../run.json"),
            format!("runs/{run}/lease.json"),
            format!("runs/{run}/run.json/x"),
            "runs/run_../run.json".into(),
            "lease.json".into(),
            "".into(),
        ] {
            assert!(safe_path(&bad).is_none(), "{bad}");
        }
    }
}
