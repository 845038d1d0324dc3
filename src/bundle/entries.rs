//! Importing a Session from entries that arrive already apart (a git snapshot: one blob per file
//! segment), with every check of a bundle import.
//!
//! `session pull` used to turn a snapshot into bundle text (JSON-escaping every file, base64 for
//! blobs) only for the import to parse it straight back: a third of the pull's CPU on a 2-core
//! runner. Here the snapshot reader hands the import each file's path, pieces and checksum
//! itself. What is checked is exactly what [`super::import_stream`] checks, through the same
//! context: the path of each file as it arrives (session.json first, only Session paths, no path
//! twice, children after the exported Session), its size and SHA-256 against the entry, each
//! blob's name and hash, the manifest against the entries, then the whole verification and the
//! checks against the target. Only the bundle's text syntax has nothing to check.

use super::import::{Ctx, Existing, Header, ImportRequest, Outcome, Sink, import_with};
use super::{FileSum, Manifest};
use crate::error::Result;
use crate::ids::{self, IdKind};
use crate::state::StateDir;

/// The Session an entry source holds, and where it was exported from.
#[derive(Debug, Clone)]
pub struct EntryHeader {
    pub session_id: String,
    pub exported_at: String,
    pub exported_by: String,
}

/// Imports the entries `fill` hands over into `state`, as [`super::import_stream`] imports a
/// bundle; `req.bundle` names the source in messages. Every refusal of the content is exit 4
/// (invalid input), as for a bundle file.
pub fn import_entries(
    state: &StateDir,
    req: &ImportRequest,
    existing: Existing,
    header: EntryHeader,
    fill: impl FnOnce(&mut Entries) -> Result<()>,
) -> Result<Outcome> {
    import_with(state, req, existing, |ctx| {
        ids::validate_kind(&header.session_id, IdKind::Session)?;
        ctx.header = Header {
            session_id: header.session_id,
            exported_at: header.exported_at,
            exported_by: header.exported_by,
        };
        fill(&mut Entries { ctx })
    })
}

/// Where the entries go, in bundle order: the files (the exported Session's, then each task
/// child's, each Session's `session.json` first), then the blobs, then the manifest.
pub struct Entries<'c, 'a> {
    ctx: &'c mut Ctx<'a>,
}

/// A file being written: its pieces are hashed and staged as they come.
pub struct OpenFile {
    name: String,
    target: (Option<String>, std::path::PathBuf),
    sink: Sink,
}

impl OpenFile {
    /// The next piece of the file.
    pub fn write(&mut self, piece: Vec<u8>) -> Result<()> {
        self.sink.write_owned(piece)
    }
}

impl Entries<'_, '_> {
    /// Starts the file at bundle path `name` (checked before anything is written).
    pub fn open_file(&mut self, name: &str) -> Result<OpenFile> {
        let target = self.ctx.check_path(name)?;
        let sink = self.ctx.content_sink(Some(&target))?;
        Ok(OpenFile {
            name: name.to_string(),
            target,
            sink,
        })
    }

    /// Ends `file`, whose entry says it has `sum.bytes` bytes hashing to `sum.sha256`.
    pub fn close_file(&mut self, file: OpenFile, sum: &FileSum) -> Result<()> {
        let content = file.sink.finish()?;
        self.ctx.accept_file(
            file.name,
            file.target,
            content,
            sum.bytes,
            sum.sha256.clone(),
        )
    }

    /// The blob named `name` (its SHA-256), whose entry says it has `bytes` bytes.
    pub fn blob(&mut self, name: &str, bytes: u64, content: Vec<u8>) -> Result<()> {
        self.ctx.check_blob_name(name)?;
        let mut sink = self.ctx.blob_sink(Some(name))?;
        sink.write_owned(content)?;
        let content = sink.finish()?;
        self.ctx.accept_blob(name.to_string(), content, bytes)
    }

    /// The manifest, after the last entry.
    pub fn manifest(&mut self, manifest: Manifest) {
        self.ctx.manifest = Some(manifest);
    }
}
