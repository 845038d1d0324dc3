//! `session import FILE --workspace PATH`.
//!
//! The bundle is read as a stream ([`super::reader`]): each file's and blob's content is decoded
//! and hashed straight into `sessions/.staging-<ses>/` — the name readers already ignore and
//! Session creation uses — under that staging directory's run lease, so no content is held whole,
//! whatever the order of an entry's keys (session.json, needed before the staging directory
//! exists, is the exception, and is held only up to [`MAX_HELD_BYTES`]). Order of
//! checks: the format version and the Session id, then, per entry as it arrives, path safety
//! (every id validated before a path is built), size and SHA-256; then the manifest and its
//! section hashes; then the staged Session is verified end to end (chains, cross-references,
//! lock, blobs; each chained file is read ahead on a worker thread as soon as it is staged,
//! one for the message log and one for the journals).
//! Only once the whole bundle has passed (exit 4 or 10 otherwise) come the checks against the
//! target: no Session with this id exists, and PATH has the bundle's workspace identity and
//! branch (exit 5). Then blobs are moved into `blobs/` and the Session renamed into place. A
//! task tree's children are staged in `.import-tasks/<child>/` of the staging directory, verified
//! the same way, their links checked ([`super::tree::check`]), and moved into place before the
//! exported Session (a killed import's children are taken back by its retry). Any
//! failure removes the staging directory (and a state dir this import created), so the target
//! is left as it was.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Serialize;

use super::reader::{ReadError, ReadResult, Reader};
use super::{BlobSum, FORMAT, FileSum, Manifest, is_run_file, tree};
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
    /// The `task` children (recursively) imported with it, ids unchanged.
    pub tasks: Vec<String>,
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
    /// Random, shared by every Session of one import: a retry of a killed import recognises the
    /// task children that import had already moved into place (and only those).
    import_id: &'a str,
    /// The imported Session's `task` children (recursively) imported with it; in the root's
    /// record only.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    tasks: &'a [String],
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
    match import_stream(state, req, file, Existing::Refuse)? {
        Outcome::Imported(done) | Outcome::FastForwarded(done) => Ok(done),
        // Refuse never compares with a local copy.
        Outcome::UpToDate | Outcome::LocalAhead { .. } => Err(Error::failed(
            "internal: an import that refuses an existing Session compared with one",
        )),
    }
}

/// What to do when the Session already exists in the state dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Refuse (exit 5): `session import`.
    Refuse,
    /// Replace it by the incoming copy only if the local copy is an ancestor of it (the same
    /// records, and more in the incoming one); a diverged copy is refused (exit 5, naming the
    /// run or the message log that diverges): `session pull`. Its task children follow the same
    /// rule: one missing here is placed, one whose local copy is an ancestor is exchanged for the
    /// incoming copy, one up to date is kept; the tree fast-forwards only if no Session of it
    /// holds records here that the incoming copy lacks.
    FastForward,
}

/// What an import from a stream did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new Session.
    Imported(Imported),
    /// The local copy was an ancestor and has been replaced by the incoming one.
    FastForwarded(Imported),
    /// The local copy holds exactly the incoming records; nothing changed.
    UpToDate,
    /// The local copy holds every incoming record and more (`what`: the first file with more,
    /// e.g. `run run_…`); nothing changed.
    LocalAhead { what: String },
}

/// [`import`] from any stream in bundle format (`session pull` streams a git snapshot as one);
/// `req.bundle` names the source in messages. Every check of [`import`] applies; with
/// [`Existing::FastForward`] an existing Session is compared with the incoming one under its
/// run lease and replaced in one step (`fsx::exchange_dirs`) when it is an ancestor.
pub fn import_stream<R: Read>(
    state: &StateDir,
    req: &ImportRequest,
    input: R,
    existing: Existing,
) -> Result<Outcome> {
    import_with(state, req, existing, |ctx| read_from(ctx, input))
}

/// The import around `read`, which hands every entry to the context (the checks as each
/// arrives, the staging): then the manifest, verification and moving into place; on any
/// failure the staging directory is removed again.
pub(super) fn import_with(
    state: &StateDir,
    req: &ImportRequest,
    existing: Existing,
    read: impl FnOnce(&mut Ctx) -> Result<()>,
) -> Result<Outcome> {
    let mut ctx = Ctx {
        state,
        req,
        header: Header::default(),
        staging: None,
        paths_seen: HashSet::new(),
        children: Vec::new(),
        files: Vec::new(),
        blobs: Vec::new(),
        blob_names: HashSet::new(),
        manifest: None,
        early: verify::Prefetch::start(Mode::Strict),
        existing,
    };
    let result = read(&mut ctx).and_then(|()| install_staged(&mut ctx));
    let installed = matches!(
        result,
        Ok(Outcome::Imported(_)) | Ok(Outcome::FastForwarded(_))
    );
    if !installed && let Some(staging) = &ctx.staging {
        let _ = fsx::remove_staging_dir(&staging.dir);
        if result.is_err() {
            for dir in staging.created.iter().rev() {
                fsx::remove_empty_dir(dir);
            }
        }
    }
    result
}

/// Reads the bundle text `input` into `ctx`.
fn read_from<R: Read>(ctx: &mut Ctx, input: R) -> Result<()> {
    let mut reader = Reader::new(input);
    if let Err(e) = read_bundle(ctx, &mut reader) {
        return Err(match e {
            ReadError::Syntax { line, col, why } => Error::invalid(format!(
                "{}:{line}:{col}: not a valid bundle: {why}",
                ctx.req.bundle.display()
            ))
            .with_path(&ctx.req.bundle)
            .with_hint(DAMAGED_HINT),
            ReadError::Io(e) => Error::io("read", &ctx.req.bundle, e),
            ReadError::Sink(e) => e,
        });
    }
    Ok(())
}

/// Everything after the last entry.
fn install_staged(ctx: &mut Ctx) -> Result<Outcome> {
    let Some(staging) = ctx.staging.take() else {
        return Err(invalid(ctx.req, "the bundle holds no files".into()));
    };
    let result = install(ctx, &staging);
    ctx.staging = Some(staging);
    result
}

/// Everything after the last byte was read: manifest, verification, moving into place.
fn install(ctx: &mut Ctx, staging: &Staging) -> Result<Outcome> {
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
    let early = std::mem::replace(&mut ctx.early, verify::Prefetch::none());
    let staged_name = |e: Error, dir: &Path, prefix: &str| {
        // Name the file as the bundle knows it, not by its staging path; the check's hints
        // (restore from a bundle) do not apply to a bundle, re-exporting does.
        let mut e = e;
        if !prefix.is_empty() {
            e.message = e.message.replace(&format!("{}/", dir.display()), prefix);
        }
        let kind = e.kind;
        let inner = e.relative_to(dir);
        let mut err = Error::wrap(kind, ctx.req.bundle.display().to_string(), inner);
        err.hints.clear();
        err.with_hint("the bundle is damaged; export it again from the original")
    };
    let report = verify::verify_with(&paths, &id, &staging.blobs, Mode::Strict, &hashed, early)
        .map_err(|e| staged_name(e, &staging.dir, ""))?;
    // Every task child, verified exactly as the exported Session is.
    let mut sessions = vec![(id.clone(), paths, report.runs.clone())];
    let mut referenced = report.blobs.clone();
    let mut child_reports = Vec::with_capacity(ctx.children.len());
    for child in &ctx.children {
        let paths = SessionPaths {
            dir: staging.child(child),
        };
        let prefix = tree::child_prefix(child);
        let child_report = verify::verify_with(
            &paths,
            child,
            &staging.blobs,
            Mode::Strict,
            &hashed,
            verify::Prefetch::none(),
        )
        .map_err(|e| staged_name(e, &paths.dir, &prefix))?;
        referenced.extend(child_report.blobs.iter().cloned());
        sessions.push((child.clone(), paths, child_report.runs.clone()));
        child_reports.push(child_report);
    }
    if let Some(extra) = ctx.blob_names.iter().find(|b| !referenced.contains(*b)) {
        return Err(invalid(
            ctx.req,
            format!("blob {extra} is not referenced by any journal"),
        ));
    }
    let mut metas = Vec::with_capacity(sessions.len());
    let mut named = Vec::with_capacity(sessions.len());
    // The children each journal names, from its verification (not read a second time).
    for (i, (sid, paths, _)) in sessions.iter().enumerate() {
        metas.push(SessionMeta::read(paths, sid)?);
        let verified = if i == 0 {
            &report
        } else {
            &child_reports[i - 1]
        };
        named.push(tree::named_from(verified));
    }
    let members: Vec<(&str, tree::Member)> = sessions
        .iter()
        .zip(metas.iter().zip(&named))
        .map(|((sid, _, _), (meta, named))| (sid.as_str(), tree::Member { meta, named }))
        .collect();
    tree::check(&id, &members).map_err(|why| tree::broken(&ctx.req.bundle, why))?;
    drop(members);

    // Only now, with the whole bundle read and verified, the checks against this state dir and
    // PATH (every Session of the tree: none exists here, each has PATH's identity); then bind
    // each Session to PATH.
    // With FastForward and a local copy: its lease, held until the copies are swapped, and the
    // same for each of its task children that exists here.
    let target = ctx.state.session(&id);
    let mut local_lease = None;
    let mut placing: Vec<Placing> = ctx.children.iter().map(|_| Placing::New).collect();
    if ctx.existing == Existing::FastForward && target.dir.symlink_metadata().is_ok() {
        let lease = Lease::acquire(&target.dir, &id)?;
        let local = verify::verify(&target, &id, &ctx.state.blobs_dir(), Mode::InPlace)?;
        let mut relation = Relations::default();
        relation.add(
            &format!("session {id}"),
            super::ancestry::compare(&target, &local, &sessions[0].1, &report)?,
        );
        for (i, child) in ctx.children.iter().enumerate() {
            let placed = ctx.state.session(child);
            if placed.dir.symlink_metadata().is_err() {
                relation.add(
                    &format!("task child {child}"),
                    super::ancestry::Relation::RemoteAhead,
                );
                continue;
            }
            let child_lease = Lease::acquire(&placed.dir, child)?;
            let local = verify::verify(&placed, child, &ctx.state.blobs_dir(), Mode::InPlace)?;
            let rel =
                super::ancestry::compare(&placed, &local, &sessions[i + 1].1, &child_reports[i])?;
            placing[i] = match rel {
                super::ancestry::Relation::Same => Placing::Keep {
                    _lease: child_lease,
                },
                _ => Placing::Replace {
                    _lease: child_lease,
                },
            };
            relation.add(&format!("task child {child}"), rel);
        }
        match relation.overall() {
            super::ancestry::Relation::Same => return Ok(Outcome::UpToDate),
            super::ancestry::Relation::LocalAhead(what) => {
                return Ok(Outcome::LocalAhead { what });
            }
            super::ancestry::Relation::Diverged(what) => {
                return Err(Error::conflict(format!(
                    "the local copy of session {id} and {} have diverged at {what}: each holds \
                     records the other lacks",
                    ctx.req.bundle.display()
                ))
                .with_hint(format!(
                    "keep one of them: fork the local copy (`kxen-agent session fork {id} --at \
                     MSG`) or move it to another state dir, then pull again"
                )));
            }
            super::ancestry::Relation::RemoteAhead => {}
        }
        local_lease = Some(lease);
    }
    let mut bindings = Vec::with_capacity(metas.len());
    for (i, ((sid, _, _), meta)) in sessions.iter().zip(&metas).enumerate() {
        let replacing = match i {
            0 => local_lease.is_some(),
            _ => !matches!(placing[i - 1], Placing::New),
        };
        bindings.push(ctx.check_target(sid, meta, replacing)?);
    }
    // What a retry of a killed import takes back: the children placed new. A child that was
    // fast-forwarded stays (it is a later copy of the same records, as if it had run on here).
    let new_children: Vec<String> = ctx
        .children
        .iter()
        .zip(&placing)
        .filter(|(_, p)| matches!(p, Placing::New))
        .map(|(c, _)| c.clone())
        .collect();
    let import_id = hash::hex(&ids::random_bytes::<16>());
    let mut previous_root = PathBuf::new();
    let mut root_workspace = PathBuf::new();
    for (i, (((_, paths, _), meta), binding)) in sessions
        .iter()
        .zip(metas.iter_mut())
        .zip(bindings)
        .enumerate()
    {
        let previous = std::mem::replace(&mut meta.workspace, binding).root;
        // Staged: made durable by the one sync below, before anything is moved into place.
        fsx::replace_staged_json(&paths.session_json(), &*meta, fsx::STATE_FILE_MODE)?;
        let record = ImportRecord {
            imported_at: crate::clock::now_rfc3339(),
            exported_at: &ctx.header.exported_at,
            exported_by: &ctx.header.exported_by,
            previous_workspace: &previous,
            workspace: &meta.workspace.root,
            import_id: &import_id,
            tasks: if i == 0 { &new_children } else { &[] },
        };
        fsx::replace_staged_json(
            &paths.dir.join("imported.json"),
            &record,
            fsx::STATE_FILE_MODE,
        )?;
        if i == 0 {
            previous_root = previous;
            root_workspace = meta.workspace.root.clone();
        }
    }
    // Each child's lease is held from its staging directory on (the lock follows the inode), so
    // nothing runs a child that is in place before the rest of its tree is.
    let mut child_leases = Vec::with_capacity(ctx.children.len());
    for (sid, paths, _) in &sessions[1..] {
        child_leases.push(Lease::acquire_staged(&paths.dir, sid)?);
    }
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
    let replacing = local_lease.is_some();
    if replacing {
        swap_into_place(ctx, staging, &id, &sessions, &placing, &import_id)?;
    } else {
        place_new(ctx, staging, &target, &sessions)?;
    }
    drop(child_leases);
    drop(placing);
    if replacing {
        drop(local_lease);
        let _ = fsx::remove_staging_dir(&staging.dir);
    }
    let done = Imported {
        session_id: id,
        workspace: root_workspace,
        previous_workspace: previous_root,
        files: ctx.files.len(),
        blobs: ctx.blobs.len(),
        messages: report.messages,
        runs: report.runs.len(),
        tasks: ctx.children.clone(),
    };
    Ok(if replacing {
        Outcome::FastForwarded(done)
    } else {
        Outcome::Imported(done)
    })
}

/// A new tree: the children first (deepest first), the exported Session last, so a visible
/// Session's children are always in place. A kill in between leaves children whose parent is
/// not (yet) here; they carry this import's id, and the retried import takes them back (see
/// `begin`). Any other failure puts the children moved so far back, leaving nothing.
fn place_new(
    ctx: &Ctx,
    staging: &Staging,
    target: &SessionPaths,
    sessions: &[(String, SessionPaths, Vec<String>)],
) -> Result<()> {
    let mut moved: Vec<&(String, SessionPaths, Vec<String>)> = Vec::new();
    let placed = sessions[1..].iter().rev().try_for_each(|session| {
        fsx::rename_dir_into_place(&session.1.dir, &ctx.state.session(&session.0).dir)?;
        moved.push(session);
        failpoint::hit("import.after-task-renamed");
        Ok::<(), Error>(())
    });
    let placed = placed.and_then(|()| {
        fsx::remove_staging_dir(&staging.dir.join(super::swap::TASKS_DIR))?;
        fsx::rename_dir_into_place(&staging.dir, &target.dir)
    });
    if let Err(e) = placed {
        let _ = fsx::create_staged_dir(&staging.dir.join(super::swap::TASKS_DIR));
        for (sid, paths, _) in moved {
            let _ = fsx::rename_file_unsynced(&ctx.state.session(sid).dir, &paths.dir);
        }
        let _ = fsx::fsync_dir(&ctx.state.sessions_dir());
        return Err(e);
    }
    Ok(())
}

/// A fast-forward of a tree that exists here: each child missing here is placed, each child
/// whose local copy is an ancestor exchanged for the incoming copy, then the Session itself is
/// exchanged (the local copies end up under the staging name, removed afterwards). The moves
/// are committed first as a swap record ([`super::swap`]), so a kill at any step leaves the old
/// tree (before the record) or a tree the next command completes (after it). A failure that is
/// not a crash undoes the moves made so far and drops the record, leaving nothing changed.
fn swap_into_place(
    ctx: &Ctx,
    staging: &Staging,
    id: &str,
    sessions: &[(String, SessionPaths, Vec<String>)],
    placing: &[Placing],
    import_id: &str,
) -> Result<()> {
    let sessions_dir = ctx.state.sessions_dir();
    let rel = |dir: &Path| -> Result<String> {
        dir.strip_prefix(&sessions_dir)
            .ok()
            .and_then(|p| p.to_str())
            .map(str::to_string)
            .ok_or_else(|| Error::failed(format!("internal: {} is not staged", dir.display())))
    };
    let mut moves = Vec::new();
    for (session, how) in sessions[1..].iter().zip(placing).rev() {
        if !matches!(how, Placing::Keep { .. }) {
            moves.push(super::swap::Move {
                session: session.0.clone(),
                from: rel(&session.1.dir)?,
            });
        }
    }
    moves.push(super::swap::Move {
        session: id.to_string(),
        from: rel(&staging.dir)?,
    });
    let record = super::swap::SwapRecord {
        session_id: id.to_string(),
        import_id: import_id.to_string(),
        moves,
    };
    let pending = super::swap::commit(ctx.state, &record)?;
    failpoint::hit("pull.after-swap-record");
    let mut done = Vec::new();
    if let Err(e) = super::swap::apply(ctx.state, &record, &mut done) {
        // Not a crash: undo the moves made so far (latest first), then drop the record.
        for (i, exchanged) in done.into_iter().rev() {
            let m = &record.moves[i];
            let (from, placed) = (
                sessions_dir.join(&m.from),
                ctx.state.session(&m.session).dir,
            );
            let _ = if exchanged {
                fsx::exchange_dirs(&from, &placed)
            } else {
                fsx::rename_file_unsynced(&placed, &from)
            };
        }
        let _ = fsx::fsync_dir(&sessions_dir);
        let _ = pending.done();
        return Err(e);
    }
    fsx::remove_staging_dir(&staging.dir)?;
    pending.done()
}

/// How a task child of a pulled tree gets into place.
enum Placing {
    /// It does not exist here: renamed into place.
    New,
    /// Its local copy (lease held until the import ends) is an ancestor of the incoming one:
    /// exchanged for it.
    Replace { _lease: Lease },
    /// Its local copy (lease held until the import ends) holds exactly the incoming records:
    /// kept.
    Keep { _lease: Lease },
}

/// The relations of every Session of a tree to its local copy, folded into one: a fast-forward
/// only if no Session holds records the other side lacks.
#[derive(Default)]
struct Relations {
    here: Option<String>,
    there: Option<String>,
    diverged: Option<String>,
}

impl Relations {
    fn add(&mut self, who: &str, rel: super::ancestry::Relation) {
        use super::ancestry::Relation;
        // The root's own messages keep their established form ("run run_…").
        let name = |what: String| {
            if who.starts_with("session ") {
                what
            } else {
                format!("{who}, {what}")
            }
        };
        match rel {
            Relation::Same => {}
            Relation::RemoteAhead => {
                self.there.get_or_insert_with(|| who.to_string());
            }
            Relation::LocalAhead(what) => {
                self.here.get_or_insert_with(|| name(what));
            }
            Relation::Diverged(what) => {
                self.diverged.get_or_insert_with(|| name(what));
            }
        }
    }

    fn overall(self) -> super::ancestry::Relation {
        use super::ancestry::Relation;
        match (self.diverged, self.here, self.there) {
            (Some(what), _, _) => Relation::Diverged(what),
            (None, Some(here), Some(there)) => Relation::Diverged(format!(
                "{here} (more here) and {there} (more in the incoming copy)"
            )),
            (None, Some(here), None) => Relation::LocalAhead(here),
            (None, None, Some(_)) => Relation::RemoteAhead,
            (None, None, None) => Relation::Same,
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct Header {
    pub(super) session_id: String,
    pub(super) exported_at: String,
    pub(super) exported_by: String,
}

/// The staging directory, its lease, and the directories this import created.
struct Staging {
    dir: PathBuf,
    blobs: PathBuf,
    _lease: Lease,
    /// Created by this import (outermost first); removed again, if empty, on failure.
    created: Vec<PathBuf>,
}

impl Staging {
    /// Where the task child `id` is staged.
    fn child(&self, id: &str) -> PathBuf {
        self.dir.join(super::swap::TASKS_DIR).join(id)
    }

    /// Where the file `rel` of the bundle's Session `member` (`None`: the exported Session) is
    /// staged.
    fn file(&self, member: Option<&str>, rel: &Path) -> PathBuf {
        match member {
            None => self.dir.join(rel),
            Some(id) => self.child(id).join(rel),
        }
    }
}

pub(super) struct Ctx<'a> {
    state: &'a StateDir,
    req: &'a ImportRequest,
    pub(super) header: Header,
    staging: Option<Staging>,
    paths_seen: HashSet<String>,
    /// The task children in the bundle, in the order their files appear.
    children: Vec<String>,
    files: Vec<FileSum>,
    blobs: Vec<BlobSum>,
    blob_names: HashSet<String>,
    pub(super) manifest: Option<Manifest>,
    /// Chained files already staged, being read ahead of the final verification.
    early: verify::Prefetch,
    existing: Existing,
}

/// Undoes what a killed import of a task tree left visible: the children it had already moved
/// into `sessions/` (its root's staged `imported.json` lists them; each carries the same
/// `importId`, so a Session that merely has the same id is never touched) are moved back into
/// the stale staging directory `dir`, which is then removed with them. A child in use (someone
/// resumed it meanwhile) is refused, exit 5, and nothing is taken back.
fn take_back_children(state: &StateDir, dir: &Path) -> Result<()> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Record {
        import_id: Option<String>,
        #[serde(default)]
        tasks: Vec<String>,
    }
    let read =
        |path: &Path| -> Option<Record> { serde_json::from_slice(&std::fs::read(path).ok()?).ok() };
    let Some(Record {
        import_id: Some(import_id),
        tasks,
    }) = read(&dir.join("imported.json"))
    else {
        return Ok(());
    };
    let back = dir.join(super::swap::TASKS_DIR);
    let mut leases = Vec::new();
    let mut ours = Vec::new();
    for child in tasks {
        if ids::validate_kind(&child, IdKind::Session).is_err() {
            continue;
        }
        let placed = state.session(&child);
        let mine = read(&placed.dir.join("imported.json"))
            .is_some_and(|r| r.import_id.as_deref() == Some(import_id.as_str()));
        if mine {
            leases.push(Lease::acquire(&placed.dir, &child)?);
            ours.push((child, placed.dir));
        }
    }
    if ours.is_empty() {
        return Ok(());
    }
    fsx::create_staged_dir(&back)?;
    for (child, placed) in &ours {
        fsx::rename_file_unsynced(placed, &back.join(child))?;
    }
    fsx::fsync_dir(&state.sessions_dir())
}

/// [`invalid`] for a failed check of the bundle's `what` (the check's error is the source).
fn invalid_because(req: &ImportRequest, what: &str, inner: Error) -> Error {
    let mut err = Error::wrap(
        ErrorKind::InvalidInput,
        format!("{}: {what}", req.bundle.display()),
        inner,
    );
    err.hints.clear();
    err.with_hint(DAMAGED_HINT)
}

const DAMAGED_HINT: &str =
    "the bundle is damaged or not a kxen-agent bundle; export it again from the original";

/// `<bundle>: why`, invalid input, with the re-export hint.
fn invalid(req: &ImportRequest, why: String) -> Error {
    Error::invalid(format!("{}: {why}", req.bundle.display()))
        .with_path(&req.bundle)
        .with_hint(DAMAGED_HINT)
}

impl Ctx<'_> {
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
        let mut created = Vec::new();
        for dir in [self.state.root().to_path_buf(), self.state.sessions_dir()] {
            if !dir.exists() {
                created.push(dir);
            }
        }
        self.state.ensure()?;
        // A pull killed after its swap record: its tree is completed before anything is staged.
        super::swap::finish(self.state)?;
        let dir = self.state.sessions_dir().join(format!(".staging-{id}"));
        if dir.exists() {
            // A killed import or creation left it; its lease tells whether it is still alive.
            let stale = Lease::acquire(&dir, &id).map_err(|_| {
                Error::conflict(format!(
                    "session {id} is being imported or created by another process ({})",
                    dir.display()
                ))
                .with_hint("wait for it to finish, then retry")
            })?;
            take_back_children(self.state, &dir)?;
            drop(stale);
            fsx::remove_staging_dir(&dir)?;
        }
        // Not synced: nothing in it counts until the whole staged tree is synced and renamed.
        fsx::create_staged_dir(&dir)?;
        let lease = match Lease::acquire_staged(&dir, &id) {
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

    /// The checks against this state dir and PATH, made only once the whole bundle has been
    /// read and verified (so damaged input is always exit 4 or 10, whatever PATH is): no Session
    /// with this id exists here, and PATH has the Session's workspace identity and branch.
    /// Returns the binding at PATH.
    fn check_target(
        &self,
        id: &str,
        meta: &SessionMeta,
        replacing: bool,
    ) -> Result<git::WorkspaceBinding> {
        let target = self.state.session(id);
        if !replacing && target.dir.symlink_metadata().is_ok() {
            return Err(Error::conflict(format!(
                "session {id} already exists in {}",
                self.state.root().display()
            ))
            .with_hint(format!(
                "it was imported (or created) here before: continue it with \
                 `kxen-agent --resume {id}`, {}",
                // Up to `run` (a floor above): the flags a resume re-checks are listed once,
                // where the resume checks them, so this hint can never name a different set.
                crate::run::SAME_FLAGS
            )));
        }
        let verified = git::verify(&meta.workspace, &self.req.workspace, true).map_err(|e| {
            if e.kind == ErrorKind::Conflict {
                // The check's own hints (what to fetch, what to restore) come first.
                Error::wrap(
                    ErrorKind::Conflict,
                    format!(
                        "cannot import session {id} into workspace {}",
                        self.req.workspace.display()
                    ),
                    e,
                )
                .with_hint(
                    "import into a clone of the Session's repository, on the Session's branch",
                )
            } else {
                e
            }
        })?;
        Ok(verified.binding)
    }

    /// Checks a file entry's path as soon as it is read: session.json first (and only first),
    /// a path a Session holds (ids validated before a path is built), no path twice; a task
    /// child's files after the exported Session's, together, its `session.json` first, its id
    /// not the exported Session's.
    pub(super) fn check_path(&mut self, name: &str) -> Result<Target> {
        let first = self.files.is_empty();
        if first != (name == "session.json") {
            return Err(invalid(
                self.req,
                format!("file {name:?}: session.json must be the first file, and only the first"),
            ));
        }
        let (member, rel) = safe_path(name).ok_or_else(|| {
            invalid(
                self.req,
                format!(
                    "file path {name:?} is not one a Session holds (session.json, messages.jsonl, runs/<run id>/run.json or journal.jsonl, each optionally under sessions/<task child's session id>/)"
                ),
            )
        })?;
        if !self.paths_seen.insert(name.to_string()) {
            return Err(invalid(self.req, format!("file {name} appears twice")));
        }
        let current = self.children.last();
        match &member {
            None if current.is_some() => {
                return Err(invalid(
                    self.req,
                    format!(
                        "file {name}: the exported Session's files come before its task children's"
                    ),
                ));
            }
            Some(id) if current != Some(id) => {
                let why = if *id == self.header.session_id {
                    Some("names the exported Session itself as a task child")
                } else if self.children.contains(id) {
                    Some("a task child's files must be together")
                } else if rel != Path::new("session.json") {
                    Some("a task child's session.json must be its first file")
                } else {
                    None
                };
                if let Some(why) = why {
                    return Err(invalid(self.req, format!("file {name}: {why}")));
                }
                self.children.push(id.clone());
            }
            _ => {}
        }
        Ok((member, rel))
    }

    /// Where a file's content goes while it is decoded: straight into its staging file once the
    /// path is known and staging exists (every file after session.json, in export's key order);
    /// into a pending file in the staging directory when the content comes before the path
    /// (moved into place once the entry is complete); into memory only before staging exists
    /// (the first file, session.json), and then at most [`MAX_HELD_BYTES`].
    pub(super) fn content_sink(&self, target: Option<&Target>) -> Result<Sink> {
        match (target, &self.staging) {
            (Some((member, rel)), Some(staging)) => {
                let path = staging.file(member.as_deref(), rel);
                if let Some(parent) = path.parent() {
                    fsx::create_staged_dir(parent)?;
                }
                let mut sink = Sink::staged(fsx::StagedFile::create(&path, fsx::STATE_FILE_MODE)?);
                // A chained file's bytes also go to the chain check as they are written (the
                // exported Session's; its children's are read when they are verified).
                if member.is_none() {
                    sink.feed = chained(rel).and_then(|journal| self.early.stream(&path, journal));
                }
                Ok(sink)
            }
            (None, Some(staging)) => Sink::pending(staging.dir.join(PENDING_FILE)),
            (_, None) => Ok(Sink::memory(&self.req.bundle)),
        }
    }

    /// A complete file entry: size and SHA-256 against the content, then (session.json) the
    /// Session id, PATH and staging, then the content into place if it was held in memory.
    pub(super) fn accept_file(
        &mut self,
        name: String,
        (member, rel): Target,
        content: Sunk,
        bytes: u64,
        sha256: String,
    ) -> Result<()> {
        let actual = format!("sha256:{}", content.sha256_hex);
        if bytes != content.len || sha256 != actual {
            return Err(invalid(
                self.req,
                format!(
                    "file {name}: checksum mismatch (the bundle says {bytes} bytes, {sha256}; the content has {} bytes, {actual})",
                    content.len
                ),
            ));
        }
        if let Some(pending) = content.pending {
            let staging = self
                .staging
                .as_ref()
                .expect("a pending file lives in staging");
            let path = staging.file(member.as_deref(), &rel);
            if let Some(parent) = path.parent() {
                fsx::create_staged_dir(parent)?;
            }
            fsx::rename_file_unsynced(&pending, &path)?;
            if let (None, Some(journal)) = (&member, chained(&rel)) {
                self.early.file(&path, journal);
            }
        }
        if let Some(held) = content.held {
            if self.files.is_empty() {
                let text = std::str::from_utf8(&held)
                    .map_err(|_| invalid(self.req, "session.json is not UTF-8".into()))?;
                self.begin(text)?;
            }
            let staging = self.staging.as_ref().expect("created by begin");
            let path = staging.file(member.as_deref(), &rel);
            if let Some(parent) = path.parent() {
                fsx::create_staged_dir(parent)?;
            }
            fsx::write_staged(&path, &held, fsx::STATE_FILE_MODE)?;
            // Complete on disk: its chain can be checked while the rest arrives.
            if let (None, Some(journal)) = (&member, chained(&rel)) {
                self.early.file(&path, journal);
            }
        }
        self.files.push(FileSum {
            path: name,
            bytes,
            sha256,
        });
        Ok(())
    }

    /// Checks a blob's name as soon as it is read: 64 lowercase hex digits, not seen before.
    pub(super) fn check_blob_name(&mut self, name: &str) -> Result<()> {
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
        if !self.blob_names.insert(name.to_string()) {
            return Err(invalid(self.req, format!("blob {name} appears twice")));
        }
        Ok(())
    }

    /// Where a blob's decoded bytes go: its staging file once its name is known and staging
    /// exists, a pending file in the staging directory when the bytes come before the name,
    /// else (no staging: a blob before any file, refused once complete) bounded memory.
    pub(super) fn blob_sink(&self, name: Option<&str>) -> Result<Sink> {
        match (name, &self.staging) {
            (Some(name), Some(staging)) => {
                fsx::create_staged_dir(&staging.blobs)?;
                Ok(Sink::staged(fsx::StagedFile::create(
                    &staging.blobs.join(name),
                    fsx::STATE_FILE_MODE,
                )?))
            }
            (None, Some(staging)) => Sink::pending(staging.dir.join(PENDING_FILE)),
            (_, None) => Ok(Sink::memory(&self.req.bundle)),
        }
    }

    /// A complete blob entry: its bytes hash to its name and have its size.
    pub(super) fn accept_blob(&mut self, name: String, content: Sunk, bytes: u64) -> Result<()> {
        if content.len != bytes || content.sha256_hex != name {
            return Err(invalid(
                self.req,
                format!("blob {name}: checksum mismatch (its content does not hash to its name)"),
            ));
        }
        if let Some(pending) = content.pending {
            let staging = self
                .staging
                .as_ref()
                .expect("a pending file lives in staging");
            fsx::create_staged_dir(&staging.blobs)?;
            fsx::rename_file_unsynced(&pending, &staging.blobs.join(&name))?;
        }
        if let Some(held) = content.held {
            let Some(staging) = &self.staging else {
                return Err(invalid(self.req, "blobs come after the files".into()));
            };
            fsx::create_staged_dir(&staging.blobs)?;
            fsx::write_staged(&staging.blobs.join(&name), &held, fsx::STATE_FILE_MODE)?;
        }
        self.blobs.push(BlobSum {
            sha256: name,
            bytes,
        });
        Ok(())
    }
}

/// The most content held in memory: only the first file (session.json, which must be read
/// before the staging directory exists) is, and a real one is a few KiB. A larger one is
/// refused rather than allowed to exhaust memory.
pub const MAX_HELD_BYTES: u64 = 16 << 20;

/// The staging file an entry's content is written to while its path (or a blob's name) is not
/// known yet. Not a name a Session holds, and renamed away when the entry completes, so at most
/// one exists; a failed import removes it with the staging directory.
const PENDING_FILE: &str = ".pending-entry";

/// Decoded content on its way to a staging file (or memory), hashed as it passes.
pub(super) struct Sink {
    hasher: hash::Sha256Stream,
    len: u64,
    file: Option<fsx::StagedFile>,
    /// Where `file` is when it is a [`PENDING_FILE`], to be moved into place.
    pending: Option<PathBuf>,
    held: Vec<u8>,
    /// The bundle (for the error when held content exceeds [`MAX_HELD_BYTES`]).
    bundle: Option<PathBuf>,
    /// The early chain check of this file, if it is chained.
    feed: Option<verify::Feed>,
}

/// A [`Sink`] after its last byte.
pub(super) struct Sunk {
    sha256_hex: String,
    len: u64,
    /// The content, if it was held in memory rather than written.
    held: Option<Vec<u8>>,
    /// The staging file holding the content when it came before its entry's path or name.
    pending: Option<PathBuf>,
}

impl Sink {
    fn staged(file: fsx::StagedFile) -> Sink {
        Sink {
            hasher: hash::Sha256Stream::new(),
            len: 0,
            file: Some(file),
            pending: None,
            held: Vec::new(),
            bundle: None,
            feed: None,
        }
    }

    fn pending(path: PathBuf) -> Result<Sink> {
        let mut sink = Sink::staged(fsx::StagedFile::create(&path, fsx::STATE_FILE_MODE)?);
        sink.pending = Some(path);
        Ok(sink)
    }

    fn memory(bundle: &Path) -> Sink {
        Sink {
            hasher: hash::Sha256Stream::new(),
            len: 0,
            file: None,
            pending: None,
            held: Vec::new(),
            bundle: Some(bundle.to_path_buf()),
            feed: None,
        }
    }

    pub(super) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some(feed) = &self.feed {
            feed.send(bytes);
        }
        self.store(bytes)
    }

    /// [`Sink::write`] of a piece the caller is done with: the chain check takes it as it is,
    /// without a copy.
    pub(super) fn write_owned(&mut self, bytes: Vec<u8>) -> Result<()> {
        self.store(&bytes)?;
        if let Some(feed) = &self.feed {
            feed.send_owned(bytes);
        }
        Ok(())
    }

    /// Hashes, counts and writes (or holds) `bytes`.
    fn store(&mut self, bytes: &[u8]) -> Result<()> {
        self.hasher.update(bytes);
        self.len += bytes.len() as u64;
        match &mut self.file {
            Some(f) => f.write(bytes),
            None if self.len > MAX_HELD_BYTES => {
                let bundle = self.bundle.as_deref().unwrap_or(Path::new("the bundle"));
                Err(Error::invalid(format!(
                    "{}: the first file's content is larger than {MAX_HELD_BYTES} bytes \
                     (session.json is a few KiB)",
                    bundle.display()
                ))
                .with_hint(DAMAGED_HINT))
            }
            None => {
                self.held.extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    pub(super) fn finish(self) -> Result<Sunk> {
        let held = match self.file {
            Some(f) => {
                f.finish()?;
                None
            }
            None => Some(self.held),
        };
        Ok(Sunk {
            sha256_hex: self.hasher.finish_hex(),
            len: self.len,
            held,
            pending: self.pending,
        })
    }
}

/// Decodes base64 text arriving in pieces: whole quads are decoded as they arrive, the last
/// (possibly padded) one at the end, so the result equals decoding the whole text at once.
struct Base64Stream {
    pending: Vec<u8>,
    decoded: Vec<u8>,
    /// Base64 characters already decoded (for error offsets).
    done: usize,
}

impl Base64Stream {
    fn new() -> Base64Stream {
        Base64Stream {
            pending: Vec::new(),
            decoded: Vec::new(),
            done: 0,
        }
    }

    /// Adds text; hands every complete, non-final run of quads to `out`.
    fn feed(&mut self, text: &[u8], out: &mut Sink) -> std::result::Result<Result<()>, String> {
        self.pending.extend_from_slice(text);
        if self.pending.len() <= 4 {
            return Ok(Ok(()));
        }
        // Keep 1..=4 characters back: the final quad may carry padding.
        let n = (self.pending.len() - 1) / 4 * 4;
        // Padding is only valid at the very end; a run decoded on its own would accept it.
        if let Some(at) = self.pending[..n].iter().position(|&b| b == b'=') {
            return Err(shift(base64::DecodeError::InvalidByte(at, b'='), self.done));
        }
        self.decode(n, out)
    }

    fn finish(mut self, out: &mut Sink) -> std::result::Result<Result<()>, String> {
        let n = self.pending.len();
        self.decode(n, out)
    }

    fn decode(&mut self, n: usize, out: &mut Sink) -> std::result::Result<Result<()>, String> {
        self.decoded.clear();
        base64::engine::general_purpose::STANDARD
            .decode_vec(&self.pending[..n], &mut self.decoded)
            .map_err(|e| shift(e, self.done))?;
        self.done += n;
        self.pending.drain(..n);
        Ok(out.write(&self.decoded))
    }
}

/// A base64 error with its offset counted from the start of the whole text.
fn shift(e: base64::DecodeError, by: usize) -> String {
    use base64::DecodeError as D;
    match e {
        D::InvalidByte(at, b) => D::InvalidByte(at + by, b).to_string(),
        D::InvalidLength(len) => D::InvalidLength(len + by).to_string(),
        D::InvalidLastSymbol { offset, symbol, .. } => {
            format!("Invalid last symbol {symbol}, offset {}.", offset + by)
        }
        other => other.to_string(),
    }
}

/// Reads the whole bundle: header members, each file and blob staged as it arrives, the
/// manifest. Stops at the first problem.
fn read_bundle<R: Read>(ctx: &mut Ctx, r: &mut Reader<R>) -> ReadResult<()> {
    let sink_err = |e: Error| ReadError::Sink(e);
    match r.peek()? {
        Some(b'{') => r.expect(b'{', "", "")?,
        Some(_) => {
            return r
                .error("expected a kxen-agent bundle (a JSON object starting with \"format\")");
        }
        None => return r.error("EOF while parsing a value"),
    }
    let mut next = 0;
    let mut first = true;
    while r.next_member(first)? {
        first = false;
        let key = r.key()?;
        let Some(&expected) = MEMBERS.get(next) else {
            return Err(sink_err(invalid(
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
            return Err(sink_err(invalid(ctx.req, why)));
        }
        next += 1;
        match expected {
            "format" => {
                let format = small_string(r)?;
                if format != FORMAT {
                    return Err(sink_err(invalid(
                        ctx.req,
                        format!(
                            "format {format:?} is not supported (this kxen-agent reads {FORMAT:?})"
                        ),
                    )));
                }
            }
            "sessionId" => {
                let id = small_string(r)?;
                if let Err(e) = ids::validate_kind(&id, IdKind::Session) {
                    return Err(sink_err(invalid_because(ctx.req, "sessionId", e)));
                }
                ctx.header.session_id = id;
            }
            "exportedAt" => ctx.header.exported_at = small_string(r)?,
            "exportedBy" => ctx.header.exported_by = small_string(r)?,
            "files" => entries(ctx, r, false)?,
            "blobs" => entries(ctx, r, true)?,
            _ => ctx.manifest = Some(r.value()?),
        }
    }
    if next < MEMBERS.len() {
        return Err(sink_err(invalid(
            ctx.req,
            format!("the bundle ends before {:?} (truncated?)", MEMBERS[next]),
        )));
    }
    r.end()
}

/// A string field of an entry or the header, decoded whole.
fn small_string<R: Read>(r: &mut Reader<R>) -> ReadResult<String> {
    if r.peek()? != Some(b'"') {
        // serde_json names the type it found.
        return r.value::<String>();
    }
    let bytes = r.string_to_vec()?;
    String::from_utf8(bytes).or_else(|_| r.error("invalid unicode code point"))
}

/// The `files` or `blobs` array, each entry checked and staged as it arrives.
fn entries<R: Read>(ctx: &mut Ctx, r: &mut Reader<R>, blobs: bool) -> ReadResult<()> {
    match r.peek()? {
        Some(b'[') => r.expect(b'[', "", "")?,
        Some(_) => return r.error("invalid type: expected an array of entries"),
        None => return r.error("EOF while parsing a value"),
    }
    let mut first = true;
    while r.next_element(first)? {
        first = false;
        if blobs {
            blob_entry(ctx, r)?;
        } else {
            file_entry(ctx, r)?;
        }
    }
    Ok(())
}

fn open_entry<R: Read>(r: &mut Reader<R>, what: &str) -> ReadResult<()> {
    match r.peek()? {
        Some(b'{') => r.expect(b'{', "", ""),
        Some(_) => r.error(format!("invalid type: expected struct {what}")),
        None => r.error("EOF while parsing a value"),
    }
}

fn once<T, R: Read>(r: &Reader<R>, slot: &Option<T>, field: &str) -> ReadResult<()> {
    match slot {
        Some(_) => r.error(format!("duplicate field `{field}`")),
        None => Ok(()),
    }
}

fn required<T, R: Read>(r: &Reader<R>, slot: Option<T>, field: &str) -> ReadResult<T> {
    match slot {
        Some(v) => Ok(v),
        None => r.error(format!("missing field `{field}`")),
    }
}

/// `{"path", "content", "bytes", "sha256"}` (any order; `path` before `content`, as export
/// writes it, lets the content stream straight into its staging file; otherwise it streams into
/// a pending staging file that is moved into place once the entry is complete).
fn file_entry<R: Read>(ctx: &mut Ctx, r: &mut Reader<R>) -> ReadResult<()> {
    open_entry(r, "FileEntry")?;
    let mut path: Option<(String, Target)> = None;
    let mut content: Option<Sunk> = None;
    let mut bytes: Option<u64> = None;
    let mut sha256: Option<String> = None;
    let mut first = true;
    while r.next_member(first)? {
        first = false;
        match r.key()?.as_str() {
            "path" => {
                once(r, &path, "path")?;
                let name = small_string(r)?;
                let target = ctx.check_path(&name).map_err(ReadError::Sink)?;
                path = Some((name, target));
            }
            "content" => {
                once(r, &content, "content")?;
                if r.peek()? != Some(b'"') {
                    r.value::<String>()?;
                }
                let mut sink = ctx
                    .content_sink(path.as_ref().map(|(_, target)| target))
                    .map_err(ReadError::Sink)?;
                r.string(&mut |chunk| sink.write(chunk))?;
                content = Some(sink.finish().map_err(ReadError::Sink)?);
            }
            "bytes" => {
                once(r, &bytes, "bytes")?;
                bytes = Some(r.value()?);
            }
            "sha256" => {
                once(r, &sha256, "sha256")?;
                sha256 = Some(small_string(r)?);
            }
            other => {
                return r.error(format!(
                    "unknown field `{other}`, expected one of `path`, `content`, `bytes`, `sha256`"
                ));
            }
        }
    }
    let (name, target) = required(r, path, "path")?;
    let content = required(r, content, "content")?;
    let bytes = required(r, bytes, "bytes")?;
    let sha256 = required(r, sha256, "sha256")?;
    ctx.accept_file(name, target, content, bytes, sha256)
        .map_err(ReadError::Sink)
}

/// `{"sha256", "bytes", "contentBase64"}` (any order; `sha256` first, as export writes it,
/// lets the decoded bytes stream straight into the staged blob; otherwise they stream into a
/// pending staging file, moved into place once the entry is complete).
fn blob_entry<R: Read>(ctx: &mut Ctx, r: &mut Reader<R>) -> ReadResult<()> {
    open_entry(r, "BlobEntry")?;
    let mut name: Option<String> = None;
    let mut content: Option<Sunk> = None;
    let mut bytes: Option<u64> = None;
    let mut first = true;
    while r.next_member(first)? {
        first = false;
        match r.key()?.as_str() {
            "sha256" => {
                once(r, &name, "sha256")?;
                let n = small_string(r)?;
                ctx.check_blob_name(&n).map_err(ReadError::Sink)?;
                name = Some(n);
            }
            "contentBase64" => {
                once(r, &content, "contentBase64")?;
                if r.peek()? != Some(b'"') {
                    r.value::<String>()?;
                }
                let mut sink = ctx.blob_sink(name.as_deref()).map_err(ReadError::Sink)?;
                let mut text = Base64Stream::new();
                let ctx_ = &*ctx;
                let named = name.as_deref();
                r.string(&mut |chunk| {
                    text.feed(chunk, &mut sink)
                        .unwrap_or_else(|why| Err(not_base64(ctx_, named, &why)))
                })?;
                match text.finish(&mut sink) {
                    Ok(done) => done.map_err(ReadError::Sink)?,
                    Err(why) => {
                        return Err(ReadError::Sink(not_base64(ctx, name.as_deref(), &why)));
                    }
                }
                content = Some(sink.finish().map_err(ReadError::Sink)?);
            }
            "bytes" => {
                once(r, &bytes, "bytes")?;
                bytes = Some(r.value()?);
            }
            other => {
                return r.error(format!(
                    "unknown field `{other}`, expected one of `sha256`, `bytes`, `contentBase64`"
                ));
            }
        }
    }
    let name = required(r, name, "sha256")?;
    let content = required(r, content, "contentBase64")?;
    let bytes = required(r, bytes, "bytes")?;
    ctx.accept_blob(name, content, bytes)
        .map_err(ReadError::Sink)
}

fn not_base64(ctx: &Ctx, name: Option<&str>, why: &str) -> Error {
    invalid(
        ctx.req,
        format!(
            "blob {}: not base64 ({why})",
            name.unwrap_or("(name not yet read)")
        ),
    )
}

/// For a staged file's relative path: `Some(true)` for a run journal, `Some(false)` for the
/// message log, `None` for a file without a chain.
fn chained(rel: &Path) -> Option<bool> {
    if rel == Path::new("messages.jsonl") {
        Some(false)
    } else if rel.ends_with("journal.jsonl") {
        Some(true)
    } else {
        None
    }
}

/// A file entry's Session (`None`: the exported one; else a task child's id) and its path
/// inside that Session.
type Target = (Option<String>, PathBuf);

/// The Session and relative path for a bundle file name, or `None` if a Session never holds it:
/// a Session's path, or `sessions/<child id>/` and a Session's path. Every id is validated
/// before it becomes part of a path.
fn safe_path(name: &str) -> Option<Target> {
    if let Some(rest) = name.strip_prefix("sessions/") {
        let (id, inner) = rest.split_once('/')?;
        ids::validate_kind(id, IdKind::Session).ok()?;
        return Some((Some(id.to_string()), session_path(inner)?));
    }
    Some((None, session_path(name)?))
}

/// The relative path for a file name inside one Session, or `None` if a Session never holds it.
fn session_path(name: &str) -> Option<PathBuf> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Streamed decoding accepts exactly what decoding the whole text accepts, wherever the
    /// pieces break: padding followed by more text is refused even when a piece ends right
    /// after it.
    #[test]
    fn base64_padding_mid_text_is_refused_wherever_the_pieces_break() {
        use base64::Engine;
        let whole = b"QQ==Qg==";
        assert!(
            base64::engine::general_purpose::STANDARD
                .decode(whole)
                .is_err()
        );
        for cut in 0..=whole.len() {
            let mut sink = Sink::memory(Path::new("t.bundle.json"));
            let mut stream = Base64Stream::new();
            let fed = stream
                .feed(&whole[..cut], &mut sink)
                .and_then(|_| stream.feed(&whole[cut..], &mut sink));
            let result = fed.and_then(|_| stream.finish(&mut sink));
            assert!(result.is_err(), "accepted with a cut at {cut}");
        }
        // Valid text still decodes, whatever the pieces.
        let text = base64::engine::general_purpose::STANDARD.encode(b"hello, world!");
        for cut in 0..=text.len() {
            let mut sink = Sink::memory(Path::new("t.bundle.json"));
            let mut stream = Base64Stream::new();
            stream
                .feed(&text.as_bytes()[..cut], &mut sink)
                .unwrap()
                .unwrap();
            stream
                .feed(&text.as_bytes()[cut..], &mut sink)
                .unwrap()
                .unwrap();
            stream.finish(&mut sink).unwrap().unwrap();
            assert_eq!(sink.finish().unwrap().held.unwrap(), b"hello, world!");
        }
    }

    #[test]
    fn only_session_paths_with_valid_ids_are_accepted() {
        let run = crate::ids::new_id(IdKind::Run);
        assert!(safe_path("session.json").is_some());
        assert!(safe_path("messages.jsonl").is_some());
        assert!(safe_path(&format!("runs/{run}/run.json")).is_some());
        assert!(safe_path(&format!("runs/{run}/journal.jsonl")).is_some());
        let child = crate::ids::new_id(IdKind::Session);
        assert_eq!(
            safe_path(&format!("sessions/{child}/runs/{run}/run.json")),
            Some((
                Some(child.clone()),
                Path::new("runs").join(&run).join("run.json")
            ))
        );
        assert_eq!(
            safe_path("session.json"),
            Some((None, "session.json".into()))
        );
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
            "sessions/../session.json".into(),
            format!("sessions/{child}/../../session.json"),
            format!("sessions/{child}/sessions/{child}/session.json"),
            format!("/sessions/{child}/session.json"),
            format!("sessions/{child}"),
            format!("sessions/{child}/"),
            format!("sessions/{run}/session.json"),
        ] {
            assert!(safe_path(&bad).is_none(), "{bad}");
        }
    }
}
