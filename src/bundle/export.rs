//! `session export SES --output FILE`.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::json::write_string_body;
use super::{BlobSum, FORMAT, FileSum, Manifest, tree};
use crate::error::{Error, Result};
use crate::fsx;
use crate::session::verify::{self, Mode};
use crate::session::{Lease, SessionMeta, store};
use crate::state::SessionPaths;
use crate::state::StateDir;

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Exported {
    pub session_id: String,
    pub output: PathBuf,
    pub files: usize,
    pub blobs: usize,
    pub messages: usize,
    pub runs: usize,
    /// The exported Session's `task` children (recursively) in the bundle with it.
    pub tasks: Vec<String>,
    /// Torn last lines left by a crash that the bundle leaves out.
    pub torn_tails: Vec<String>,
}

/// Refuses an `--output` that cannot name a new bundle file, before the lease is taken: a
/// directory, `-` (a bundle is a file, never a stream on stdout, so it can be replaced
/// atomically), or a path whose directory does not exist.
fn check_output(output: &Path, session_id: &str) -> Result<()> {
    let example = format!("--output {session_id}.bundle.json");
    if output.is_dir() {
        return Err(Error::usage(format!(
            "--output {} is a directory; export writes one bundle file",
            output.display()
        ))
        .with_hint(format!(
            "name a file, e.g. --output {}/{session_id}.bundle.json",
            output.display()
        )));
    }
    // An atomic replace renames over the path itself: a symlink (`/dev/stdout`, a link to a
    // shared file) or a device would be replaced by the bundle, not written through.
    if let Ok(meta) = output.symlink_metadata()
        && !meta.file_type().is_file()
    {
        return Err(Error::usage(format!(
            "--output {} is a symlink or a special file; export replaces its target path \
             atomically, so it writes only to a regular file or a new path",
            output.display()
        ))
        .with_hint(format!("name a file, e.g. {example}")));
    }
    if output == Path::new("-") {
        return Err(Error::usage(
            "--output - is not supported: a bundle is written to a file, atomically",
        )
        .with_hint(format!("name a file, e.g. {example}")));
    }
    let dir = match output.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if dir.exists() && !dir.is_dir() {
        return Err(Error::usage(format!(
            "{} in --output {} is not a directory",
            dir.display(),
            output.display()
        ))
        .with_hint(format!("name a file, e.g. {example}")));
    }
    if !dir.is_dir() {
        return Err(Error::not_found(format!(
            "the directory {} of --output {} does not exist",
            dir.display(),
            output.display()
        ))
        .with_hint(format!(
            "create it first (mkdir -p {}), or choose another --output",
            dir.display()
        )));
    }
    Ok(())
}

/// Exports Session `session_id` to `output` (mode 0600, atomically replaced).
///
/// Under the Session's run lease (a Session in use is refused, exit 5, naming the holder), the
/// Session is verified end to end first (a damaged Session is not exported: exit 10), then its
/// files and referenced blobs are streamed into the bundle. A torn last line (a crash's
/// leftover) is not part of the bundle.
pub fn export(state: &StateDir, session_id: &str, output: &Path) -> Result<Exported> {
    check_output(output, session_id)?;
    let selection = select(state, session_id, false)?;
    let tree = &selection.tree;
    let report = &tree[0].report;
    let files = &selection.files;
    let blob_names = &selection.blobs;
    let blobs_dir = &selection.blobs_dir;
    let full = |p: &Path| -> Result<u64> {
        Ok(std::fs::metadata(p)
            .map_err(|e| Error::io("stat", p, e))?
            .len())
    };

    fsx::write_atomic_stream_owned(output, fsx::STATE_FILE_MODE, |out| {
        let w = |out: &mut dyn Write, s: &str| {
            out.write_all(s.as_bytes())
                .map_err(|e| Error::io("write", output, e))
        };
        let header = serde_json::json!({
            "format": FORMAT,
            "sessionId": session_id,
            "exportedAt": crate::clock::now_rfc3339(),
            "exportedBy": concat!("kxen-agent ", env!("CARGO_PKG_VERSION")),
        });
        let header = header.to_string();
        w(out, &header[..header.len() - 1])?;
        w(out, ",\n\"files\":[")?;
        let mut sums = Vec::with_capacity(files.len());
        for (i, (name, path, len)) in files.iter().enumerate() {
            w(out, if i == 0 { "\n" } else { ",\n" })?;
            w(
                out,
                &format!("{{\"path\":{},\"content\":\"", json_str(name)),
            )?;
            let mut file = File::open(path).map_err(|e| Error::io("read", path, e))?;
            let hex = write_string_body(out, &mut file, *len, path, output)?;
            let sum = FileSum {
                path: name.clone(),
                bytes: *len,
                sha256: format!("sha256:{hex}"),
            };
            w(
                out,
                &format!("\",\"bytes\":{},\"sha256\":\"{}\"}}", sum.bytes, sum.sha256),
            )?;
            sums.push(sum);
        }
        w(out, "],\n\"blobs\":[")?;
        let mut blob_sums = Vec::with_capacity(blob_names.len());
        for (i, name) in blob_names.iter().enumerate() {
            let path = blobs_dir.join(name);
            let bytes = full(&path)?;
            w(out, if i == 0 { "\n" } else { ",\n" })?;
            w(
                out,
                &format!("{{\"sha256\":\"{name}\",\"bytes\":{bytes},\"contentBase64\":\""),
            )?;
            let mut file = File::open(&path).map_err(|e| Error::io("read", &path, e))?;
            {
                let mut enc = base64::write::EncoderWriter::new(
                    &mut *out,
                    &base64::engine::general_purpose::STANDARD,
                );
                std::io::copy(&mut file, &mut enc).map_err(|e| Error::io("read", &path, e))?;
                enc.finish().map_err(|e| Error::io("write", output, e))?;
            }
            w(out, "\"}")?;
            blob_sums.push(BlobSum {
                sha256: name.clone(),
                bytes,
            });
        }
        let manifest = Manifest::of(sums, blob_sums);
        let manifest = serde_json::to_string(&manifest)
            .map_err(|e| Error::failed(format!("cannot serialize the manifest: {e}")))?;
        w(out, "],\n\"manifest\":")?;
        w(out, &manifest)?;
        w(out, "}\n")
    })?;

    Ok(Exported {
        session_id: session_id.to_string(),
        output: output.to_path_buf(),
        files: files.len(),
        blobs: blob_names.len(),
        messages: report.messages,
        runs: report.runs.len(),
        tasks: tree[1..]
            .iter()
            .map(|m| m.report.session_id.clone())
            .collect(),
        torn_tails: tree
            .iter()
            .flat_map(|m| m.report.torn_tails.iter().cloned())
            .collect(),
    })
}

/// What a bundle (or a git snapshot) of a Session holds: the state files of the Session and of
/// its `task` children, each with the number of bytes to copy (a chained file's complete
/// prefix: a torn last line is a crash's leftover, not part of the Session), and the blobs their
/// journals reference. The run leases of the tree are held while it lives.
pub struct Selection {
    /// (path in the bundle, file on disk, bytes to copy), in bundle order.
    pub files: Vec<(String, PathBuf, u64)>,
    /// Every referenced blob (lowercase hex SHA-256), sorted.
    pub blobs: std::collections::BTreeSet<String>,
    pub blobs_dir: PathBuf,
    tree: Vec<Member>,
}

impl Selection {
    /// The verification report of the selected Session itself.
    pub fn report(&self) -> &verify::Verified {
        &self.tree[0].report
    }
}

/// Verifies Session `session_id` and its task children end to end (exit 10 if damaged) under
/// their run leases (exit 5 if one is in use; with `lease_held` the caller — a run pushing its
/// own snapshots — already holds the Session's own lease) and selects what a bundle holds.
pub fn select(state: &StateDir, session_id: &str, lease_held: bool) -> Result<Selection> {
    let blobs_dir = state.blobs_dir();
    let tree = collect(state, session_id, &blobs_dir, lease_held)?;
    // (path in the bundle, file on disk, bytes to copy)
    let mut files: Vec<(String, PathBuf, u64)> = Vec::new();
    let full = |p: &Path| -> Result<u64> {
        Ok(std::fs::metadata(p)
            .map_err(|e| Error::io("stat", p, e))?
            .len())
    };
    let mut blob_names = std::collections::BTreeSet::new();
    for member in &tree {
        let (paths, report) = (&member.paths, &member.report);
        let prefix = if member.report.session_id == session_id {
            String::new()
        } else {
            tree::child_prefix(&member.report.session_id)
        };
        let complete = |p: &Path| report.complete_lengths.get(p).copied().unwrap_or(0);
        files.push((
            format!("{prefix}session.json"),
            paths.session_json(),
            full(&paths.session_json())?,
        ));
        files.push((
            format!("{prefix}messages.jsonl"),
            paths.messages(),
            complete(&paths.messages()),
        ));
        for run_id in &report.runs {
            let run = paths.run(run_id);
            files.push((
                format!("{prefix}runs/{run_id}/run.json"),
                run.run_json(),
                full(&run.run_json())?,
            ));
            if run.journal().exists() {
                files.push((
                    format!("{prefix}runs/{run_id}/journal.jsonl"),
                    run.journal(),
                    complete(&run.journal()),
                ));
            }
        }
        blob_names.extend(report.blobs.iter().cloned());
    }

    Ok(Selection {
        files,
        blobs: blob_names,
        blobs_dir,
        tree,
    })
}

/// One Session of an export, verified, with its lease held until the bundle is written.
struct Member {
    paths: SessionPaths,
    report: verify::Verified,
    _lease: Option<Lease>,
}

/// The exported Session and its `task` children, recursively (parents before their children),
/// each under its run lease (one in use: exit 5 naming the holder) and verified end to end (exit
/// 10). A child named by a journal but never created (a crash in between) is not part of the
/// tree; one that exists must name its parent back (exit 10 otherwise).
fn collect(
    state: &StateDir,
    session_id: &str,
    blobs_dir: &Path,
    lease_held: bool,
) -> Result<Vec<Member>> {
    let mut tree: Vec<Member> = Vec::new();
    let mut seen = std::collections::HashSet::from([session_id.to_string()]);
    let mut pending = vec![session_id.to_string()];
    while let Some(id) = pending.pop() {
        let paths = store::session_paths(state, &id)?;
        let lease = if lease_held && id == session_id {
            None
        } else {
            Some(Lease::acquire(&paths.dir, &id).map_err(|e| {
                if id == session_id {
                    e
                } else {
                    let mut e = Error::wrap(
                        e.kind,
                        format!(
                            "cannot export session {session_id}: its task child {id} is in use"
                        ),
                        e,
                    );
                    e.hints.clear();
                    e.with_hint("wait for the run to stop, then export again")
                }
            })?)
        };
        let report = verify::verify(&paths, &id, blobs_dir, Mode::InPlace)?;
        let named = tree::named_from(&report);
        let mut children = Vec::new();
        for n in named {
            let child = state.session(&n.child.session_id);
            if !child.session_json().is_file() {
                continue;
            }
            let meta = SessionMeta::read(&child, &n.child.session_id)?;
            if meta.parent_id.as_deref() != Some(id.as_str()) || !seen.insert(meta.id.clone()) {
                return Err(Error::corrupt(format!(
                    "{}: session {id}'s journal names {} as its task child, but that Session \
                     does not name {id} as its parent (or appears twice in the tree)",
                    child.session_json().display(),
                    meta.id
                ))
                .with_hint("check it with `kxen-agent session verify`; restore it from a bundle"));
            }
            children.push(meta.id);
        }
        // Depth first, in journal order.
        pending.extend(children.into_iter().rev());
        tree.push(Member {
            paths,
            report,
            _lease: lease,
        });
    }
    Ok(tree)
}

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}
