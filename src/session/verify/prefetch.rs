//! Reading chained files ahead of verification, while a bundle is still being imported.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use super::{
    JournalRead, MessageIndex, Mode, read_journal, read_journal_from, read_messages,
    read_messages_from,
};
use crate::error::Result;
use crate::fsx::ChainEnd;

/// Checks chained files on background threads ahead of [`verify_with`]: import hands it each
/// `messages.jsonl` and `journal.jsonl` as it stages it — its bytes as they are decoded
/// ([`Prefetch::stream`]), or the complete file ([`Prefetch::file`]) — so hashing and parsing
/// the chains overlaps with reading the rest of the bundle, and no file is read back. The bytes
/// must be exactly the file's. Dropping it abandons the work.
///
/// The message log and the journals have a worker each: a pull of a long Session spent its last
/// quarter waiting for one worker to parse the journal after the message log, while the import
/// had nothing left to read (benches/remote.rs).
pub struct Prefetch {
    /// `[message logs, journals]`; one of them alone when only one thread could be started.
    workers: Vec<Worker>,
}

/// One worker thread and its queue.
struct Worker {
    jobs: mpsc::Sender<Job>,
    thread: std::thread::JoinHandle<HashMap<PathBuf, Early>>,
}

/// One file for the worker: its path, whether it is a journal, and where its bytes come from.
struct Job {
    path: PathBuf,
    journal: bool,
    /// `None`: read the complete file.
    bytes: Option<mpsc::Receiver<Vec<u8>>>,
}

/// The bytes of a file being staged, sent to a [`Prefetch`] as they are written. Dropping it
/// ends the file.
pub struct Feed(mpsc::SyncSender<Vec<u8>>);

impl Feed {
    pub fn send(&self, bytes: &[u8]) {
        // A worker that stopped (it panicked) is reported when the prefetch is finished.
        self.send_owned(bytes.to_vec());
    }

    /// [`Feed::send`] of bytes the sender is done with.
    pub fn send_owned(&self, bytes: Vec<u8>) {
        let _ = self.0.send(bytes);
    }
}

/// A [`Read`](std::io::Read) over the chunks of a [`Feed`].
struct FeedReader {
    chunks: mpsc::Receiver<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
}

impl std::io::Read for FeedReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::io::BufRead;
        let chunk = self.fill_buf()?;
        let n = buf.len().min(chunk.len());
        buf[..n].copy_from_slice(&chunk[..n]);
        self.consume(n);
        Ok(n)
    }
}

/// The chunks are the buffer: lines are read out of them without another copy.
impl std::io::BufRead for FeedReader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.at == self.chunk.len() {
            match self.chunks.recv() {
                Ok(chunk) => {
                    self.chunk = chunk;
                    self.at = 0;
                }
                Err(_) => return Ok(&[]),
            }
        }
        Ok(&self.chunk[self.at..])
    }

    fn consume(&mut self, n: usize) {
        self.at += n;
    }
}

/// A file read by a [`Prefetch`].
pub(super) enum Early {
    Messages(Result<(MessageIndex, ChainEnd)>),
    Journal(Result<JournalRead>),
}

impl Prefetch {
    /// A prefetch that reads nothing ahead.
    pub fn none() -> Prefetch {
        Prefetch {
            workers: Vec::new(),
        }
    }

    /// A prefetch with two worker threads, one for the message log and one for the journals,
    /// checking files with `mode` (one thread for both if only one can be started, and
    /// [`Prefetch::none`] if none can).
    pub fn start(mode: Mode) -> Prefetch {
        let workers = (0..2).map_while(|_| Worker::start(mode)).collect();
        Prefetch { workers }
    }

    /// The queue of a message log's (`journal` false) or a journal's worker.
    fn jobs(&self, journal: bool) -> Option<&mpsc::Sender<Job>> {
        let n = self.workers.len();
        (n > 0).then(|| &self.workers[usize::from(journal) % n].jobs)
    }

    /// Queues the complete file at `path` (`journal`: a run journal, else the message log).
    pub fn file(&self, path: &Path, journal: bool) {
        if let Some(jobs) = self.jobs(journal) {
            let _ = jobs.send(Job {
                path: path.to_path_buf(),
                journal,
                bytes: None,
            });
        }
    }

    /// Queues the file being written at `path`; its bytes go through the returned feed, which
    /// must be dropped (ending the file) before the next one is queued. A few chunks are
    /// buffered; beyond that, sending waits for the worker.
    pub fn stream(&self, path: &Path, journal: bool) -> Option<Feed> {
        let jobs = self.jobs(journal)?;
        let (tx, rx) = mpsc::sync_channel(8);
        jobs.send(Job {
            path: path.to_path_buf(),
            journal,
            bytes: Some(rx),
        })
        .ok()?;
        Some(Feed(tx))
    }

    /// Waits for the queued files.
    pub(super) fn finish(self) -> HashMap<PathBuf, Early> {
        let threads: Vec<_> = self
            .workers
            .into_iter()
            .map(|w| {
                drop(w.jobs);
                w.thread
            })
            .collect();
        let mut done = HashMap::new();
        for thread in threads {
            let read = thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            done.extend(read);
        }
        done
    }
}

impl Worker {
    /// A thread checking the files queued to it with `mode`, one after the other; `None` if no
    /// thread can be started.
    fn start(mode: Mode) -> Option<Worker> {
        let (tx, rx) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new().spawn(move || {
            let mut done = HashMap::new();
            for job in rx {
                let early = match (job.bytes, job.journal) {
                    (Some(chunks), journal) => {
                        let source = FeedReader {
                            chunks,
                            chunk: Vec::new(),
                            at: 0,
                        };
                        if journal {
                            Early::Journal(read_journal_from(&job.path, source, mode))
                        } else {
                            Early::Messages(read_messages_from(&job.path, source, mode))
                        }
                    }
                    (None, true) => Early::Journal(read_journal(&job.path, mode)),
                    (None, false) => Early::Messages(read_messages(&job.path, mode)),
                };
                done.insert(job.path, early);
            }
            done
        });
        thread.ok().map(|thread| Worker { jobs: tx, thread })
    }
}
