//! The write-ahead log: every insert batch is appended here and made durable; only then is it
//! acknowledged and applied to the in-memory state, in sequence order. Reads wait for the
//! applier to reach every acknowledged record ([`Applied::wait`]).
//!
//! One WAL per database: a directory of files `<first seq, 20 digits>.log`, each a 32-byte
//! header followed by framed, checksummed records with consecutive sequence numbers. The byte
//! format and the recovery rules are specified in `format-spec/wal.md`; the crash guarantees in
//! `format-spec/crash-model.md`.
//!
//! - [`record`]: framing (encode/decode of the file header and of records).
//! - [`reader`]: recovery (which damage is a torn tail, which is corruption).
//! - [`writer`]: the writer thread (group commit, rotation, reclaim, poisoning).
//! - [`spare`]: reclaimed files kept for reuse, so that records need no zeros written ahead.
//! - [`codec`]: records stored compacted, by a compactor and an expander the engine supplies.

pub mod codec;
pub mod reader;
pub mod record;
mod spare;
mod writer;

#[cfg(test)]
mod codec_tests;
#[cfg(test)]
mod tests;

use crate::vfs::Vfs;
use crate::{Error, Result};
use codec::{Compact, Expand};
use crossbeam_channel::Sender;
use reader::TailFix;
pub use reader::{DroppedTail, TailKind};
use record::encode_file_header;
use spare::Spares;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use writer::{start_file, Msg, Shared, Writer};

pub use crate::options::{SyncMode, WalRecovery};

/// What a log writer has done since its log was opened, and how long it took: where the time
/// of an insert under [`SyncMode::Always`] goes, beside the caller's own encoding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Commit groups written (one write, and one sync under `Always`, for each).
    pub groups: u64,
    /// Records written (one per insert call).
    pub records: u64,
    /// Bytes of those records as appended, headers included.
    pub record_bytes: u64,
    /// Bytes of those records as stored, headers included: less than `record_bytes` where
    /// records were compacted.
    pub stored_bytes: u64,
    /// Time spent writing records to the file (into the OS's cache).
    pub write_nanos: u64,
    /// `fdatasync` calls that made records durable, and the time they took.
    pub syncs: u64,
    /// See [`LogStats::syncs`].
    pub sync_nanos: u64,
    /// Zeros written and synced ahead of the records (`Always` only), and the time that took.
    pub zero_bytes: u64,
    /// See [`LogStats::zero_bytes`].
    pub zero_nanos: u64,
}

/// Options of a [`Wal`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalOptions {
    /// When records are made durable (default [`SyncMode::Always`]).
    pub sync: SyncMode,
    /// Largest payload accepted by `append` and by recovery (default 64 MiB, at most `u32::MAX`).
    pub max_record_bytes: usize,
    /// A file that reached this size is closed and a new one started (default 64 MiB).
    pub rotate_bytes: u64,
    /// Reclaimed files kept for new files to reuse (default 4; 0 deletes them). Files shorter
    /// than a quarter of `rotate_bytes` are always deleted.
    pub spare_files: usize,
    /// CPU priority of the applier thread (default `Normal`).
    pub applier_priority: crate::options::BackgroundPriority,
    /// What recovery does with a torn tail (default [`WalRecovery::TolerateTornTail`]).
    pub recovery: WalRecovery,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            sync: SyncMode::Always,
            max_record_bytes: 64 << 20,
            rotate_bytes: 64 << 20,
            spare_files: 4,
            applier_priority: crate::options::BackgroundPriority::Normal,
            recovery: WalRecovery::TolerateTornTail,
        }
    }
}

/// The write-ahead log. `Send + Sync`: share it between inserting threads; their records are
/// committed in groups (one write and one fsync per group).
///
/// `T` is whatever the engine wants handed to `apply` with each record (for instance the
/// decoded batch), so the writer thread can apply records in seq order without decoding again.
pub struct Wal<T: Send + 'static> {
    tx: Option<Sender<Msg<T>>>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    dir: PathBuf,
    max_record_bytes: usize,
}

/// Stops a [`Wal`]'s writes of its own accord (see [`Wal::quiet`]).
#[derive(Clone)]
pub struct Quiet(Arc<Shared>);

impl Quiet {
    /// A handle for a database without a log writer (one opened read-only): nothing to stop.
    pub fn idle() -> Quiet {
        Quiet(Arc::default())
    }

    /// From now on the writer writes only what it is asked to; returns once no write of its
    /// own is under way. For a database that refuses writes after a failure and must not
    /// touch the disk again.
    pub fn stop(&self) {
        *self.0.quiet.lock() = true;
    }
}

/// Waits for the applier of a [`Wal`] (see [`Wal::applied`]).
#[derive(Clone)]
pub struct Applied(Arc<Shared>);

impl Applied {
    /// A handle for a database without a log writer (one opened read-only): nothing is ever
    /// waited for.
    pub fn idle() -> Applied {
        Applied(Arc::default())
    }

    /// Waits until every record acknowledged before the call is applied. Returns at once when
    /// it already is, and early when the log is poisoned: a panicked applier never gets there.
    pub fn wait(&self) {
        self.0.wait_applied()
    }
}

impl<T: Send + 'static> std::fmt::Debug for Wal<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.dir)
            .field("last_seq", &self.last_seq())
            .finish()
    }
}

fn writer_gone() -> Error {
    Error::Poisoned("the WAL writer thread has stopped".into())
}

impl<T: Send + 'static> Wal<T> {
    /// Opens (creating the directory if missing), recovers, and starts the writer thread.
    ///
    /// `replay(seq, payload)` is called in seq order for every valid record with
    /// seq > `checkpoint`, before `open` returns and only after the whole log was validated; an
    /// `Err` from `replay` aborts open (and nothing on disk was changed). `apply(seq, item, payload)` is
    /// later called on the writer thread for every appended record, in seq order, after the
    /// record is durable (per [`SyncMode`]) and before its `append` returns.
    ///
    /// A torn tail of the last file is cut off (and the cut synced); damage anywhere else is
    /// `Error::Corruption` naming the file and the offset of the bad record.
    pub fn open(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        opts: WalOptions,
        checkpoint: u64,
        replay: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
        apply: Box<dyn FnMut(u64, T, Vec<u8>) + Send>,
    ) -> Result<Wal<T>> {
        Self::open_with_codec(vfs, dir, opts, checkpoint, replay, apply, None)
    }

    /// [`Wal::open`] with a codec: `compact` stores records compacted where it can, and
    /// `expand` turns compacted records back into payloads for `replay` (see [`codec`]). A log
    /// that holds compacted records cannot be opened without the expander.
    pub fn open_with_codec(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        opts: WalOptions,
        checkpoint: u64,
        replay: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
        apply: Box<dyn FnMut(u64, T, Vec<u8>) + Send>,
        codec: Option<(Box<dyn Compact<T>>, &mut dyn Expand)>,
    ) -> Result<Wal<T>> {
        let (compact, expand) = match codec {
            Some((c, e)) => (Some(c), Some(e)),
            None => (None, None),
        };
        RecoveredLog::recover(vfs, dir, opts, checkpoint, replay, expand)?.start(apply, compact)
    }

    /// Appends one record (one insert batch). Concurrent callers' records share one write and
    /// one fsync (group commit). Returns the record's seq once it is durable; it is applied
    /// soon after, in seq order, and [`Applied::wait`] waits for that.
    ///
    /// A payload over `max_record_bytes` is refused with `Error::BadValue` before anything is
    /// written. After any write or sync failure every caller of the failing group gets `Err`
    /// (the record may or may not be on disk) and the log is poisoned: all later appends return
    /// `Error::Poisoned` without touching the disk, until the database is reopened.
    pub fn append(&self, payload: Vec<u8>, item: T) -> Result<u64> {
        self.shared.check()?;
        if payload.len() > self.max_record_bytes {
            return Err(Error::BadValue(format!(
                "WAL record of {} bytes exceeds max_record_bytes {}",
                payload.len(),
                self.max_record_bytes
            )));
        }
        let (reply, answer) = crossbeam_channel::bounded(1);
        let tx = self.tx.as_ref().ok_or(Error::Closed)?;
        tx.send(Msg::Append {
            payload,
            item,
            reply,
        })
        .map_err(|_| writer_gone())?;
        answer.recv().unwrap_or_else(|_| Err(self.stopped()))
    }

    /// Seq of the last record appended and applied (or recovered; the checkpoint if higher).
    pub fn last_seq(&self) -> u64 {
        self.shared.last_seq.load(Ordering::SeqCst)
    }

    /// A handle that stops the writer's writes of its own accord (the zeros it writes ahead).
    pub fn quiet(&self) -> Quiet {
        Quiet(self.shared.clone())
    }

    /// A handle that waits for the applier; it outlives the log's threads.
    pub fn applied(&self) -> Applied {
        Applied(self.shared.clone())
    }

    /// Starts a new file at the next record (if the current one holds any record `<= upto`) and
    /// deletes every file whose records all have seq `<= upto`, then syncs the directory. Call
    /// it once segments and a manifest covering seq `<= upto` are durable.
    pub fn reclaim(&self, upto: u64) -> Result<()> {
        let (reply, answer) = crossbeam_channel::bounded(1);
        let tx = self.tx.as_ref().ok_or(Error::Closed)?;
        tx.send(Msg::Reclaim { upto, reply })
            .map_err(|_| writer_gone())?;
        answer.recv().unwrap_or_else(|_| Err(self.stopped()))
    }

    /// What the writer has done since the log was opened.
    pub fn stats(&self) -> LogStats {
        let c = &self.shared.counters;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        LogStats {
            groups: get(&c.groups),
            records: get(&c.records),
            record_bytes: get(&c.record_bytes),
            stored_bytes: get(&c.stored_bytes),
            write_nanos: get(&c.write_nanos),
            syncs: get(&c.syncs),
            sync_nanos: get(&c.sync_nanos),
            zero_bytes: get(&c.zero_bytes),
            zero_nanos: get(&c.zero_nanos),
        }
    }

    /// Bytes of the log's records, file headers included: what reclaiming can free.
    pub fn log_bytes(&self) -> u64 {
        self.shared.bytes.load(Ordering::SeqCst)
    }

    /// Bytes on disk kept for reuse, not records: zeros written ahead, old records past the
    /// end of a reused file, spare files.
    pub fn spare_bytes(&self) -> u64 {
        self.shared.spare_bytes.load(Ordering::SeqCst)
    }

    /// Bytes of all WAL files: [`Wal::log_bytes`] plus [`Wal::spare_bytes`].
    pub fn size_on_disk(&self) -> u64 {
        self.log_bytes() + self.spare_bytes()
    }

    /// Stops the writer thread after the appends already queued, and syncs. Returns the error
    /// that poisoned the log, if it is poisoned.
    pub fn close(mut self) -> Result<()> {
        self.shutdown()
    }

    fn stopped(&self) -> Error {
        match self.shared.check() {
            Err(e) => e,
            Ok(()) => writer_gone(),
        }
    }

    fn shutdown(&mut self) -> Result<()> {
        let Some(tx) = self.tx.take() else {
            return Ok(());
        };
        let (reply, answer) = crossbeam_channel::bounded(1);
        let result = match tx.send(Msg::Close { reply }) {
            Ok(()) => answer.recv().unwrap_or_else(|_| Err(self.stopped())),
            Err(_) => Err(self.stopped()),
        };
        drop(tx);
        if let Some(t) = self.thread.take() {
            // A panic in `apply` already poisoned the log; the join result adds nothing.
            let _ = t.join();
        }
        result
    }
}

/// A log that recovery read and validated, and whose records were replayed, before anything
/// on disk is changed: the caller decides whether to go on ([`RecoveredLog::start`]) or to
/// give up, leaving every file as it was.
pub struct RecoveredLog {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    opts: WalOptions,
    checkpoint: u64,
    rec: reader::Recovery,
}

impl std::fmt::Debug for RecoveredLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoveredLog")
            .field("dir", &self.dir)
            .field("checkpoint", &self.checkpoint)
            .field("last_seq", &self.rec.last_seq)
            .finish()
    }
}

impl RecoveredLog {
    /// Reads and validates the log in `dir` and calls `replay(seq, payload)` in seq order for
    /// every record with seq > `checkpoint`, only once the whole log was validated (see
    /// [`Wal::open`]). Changes nothing on disk; a missing directory is an empty log.
    pub fn recover(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        opts: WalOptions,
        checkpoint: u64,
        replay: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
        expand: Option<&mut dyn Expand>,
    ) -> Result<RecoveredLog> {
        if opts.max_record_bytes > u32::MAX as usize {
            return Err(Error::InvalidOptions(format!(
                "max_record_bytes {} exceeds the format's limit {}",
                opts.max_record_bytes,
                u32::MAX
            )));
        }
        if opts.rotate_bytes == 0 {
            return Err(Error::InvalidOptions(
                "the log file size (DbOptions::wal_file_bytes) must be > 0".into(),
            ));
        }
        let strict = opts.recovery == WalRecovery::AbsoluteConsistency;
        let rec = reader::recover(
            &*vfs,
            dir,
            opts.max_record_bytes,
            checkpoint,
            strict,
            replay,
            expand,
        )?;
        Ok(RecoveredLog {
            vfs,
            dir: dir.to_path_buf(),
            opts,
            checkpoint,
            rec,
        })
    }

    /// Seq of the last intact record (the checkpoint when the log ends below it or is empty).
    pub fn last_seq(&self) -> u64 {
        self.rec.last_seq.max(self.checkpoint)
    }

    /// Records handed to `replay`.
    pub fn replayed(&self) -> u64 {
        self.rec.replayed
    }

    /// Log files found, reclaimable ones included.
    pub fn files(&self) -> usize {
        self.rec.files.len()
    }

    /// What the torn-tail rule will cut from the last file when the log starts, if anything.
    pub fn dropped(&self) -> Option<&DroppedTail> {
        self.rec.dropped.as_ref()
    }

    /// Makes the recovered state the log's: cuts the last file's torn tail (or rewrites its
    /// torn header) and syncs it, creates the directory or a first file where there is none,
    /// and starts the writer. `apply` and `compact` are as for [`Wal::open_with_codec`].
    pub fn start<T: Send + 'static>(
        self,
        apply: Box<dyn FnMut(u64, T, Vec<u8>) + Send>,
        compact: Option<Box<dyn Compact<T>>>,
    ) -> Result<Wal<T>> {
        let RecoveredLog {
            vfs,
            dir,
            opts,
            checkpoint,
            rec,
        } = self;
        let dir = dir.as_path();
        if !vfs.exists(dir) {
            vfs.create_dir_all(dir)?;
            // The new directory's own entry must be durable before files in it matter.
            let parent = match dir.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            vfs.sync_dir(parent)?;
        }
        let mut cur_compacts = rec.last_version >= 3;
        let mut spares = Spares::open(&*vfs, dir, opts.spare_files)?;
        let mut salt = rec.last_salt;
        let mut files = rec.files;
        let mut cur = match files.last() {
            None => None,
            Some(last) => {
                let mut f = vfs.open_append(&last.path, false)?;
                match rec.tail {
                    TailFix::None => {}
                    TailFix::Truncate(len) => {
                        f.truncate(len)?;
                        f.sync_data()?;
                    }
                    TailFix::RewriteHeader => {
                        f.truncate(0)?;
                        f.append(&encode_file_header(last.first_seq, 0))?;
                        f.sync_data()?;
                    }
                }
                Some(f)
            }
        };
        // Entries found by listing may not be durable yet (the crash left them in the
        // directory without a dir sync); make them so before appending to them.
        vfs.sync_dir(dir)?;
        // Records may end below the checkpoint (unsynced records lost under a weaker sync mode,
        // or every file reclaimed): continue at checkpoint + 1 in a new file, so seqs in each
        // file stay contiguous.
        let last_seq = rec.last_seq.max(checkpoint);
        let mut end = cur.as_ref().map_or(0, |c| c.len());
        if cur.is_none() || rec.last_seq < checkpoint {
            let (file, handle, s, e) = start_file(&*vfs, dir, last_seq + 1, &mut spares)?;
            files.push(file);
            cur = Some(handle);
            salt = s;
            end = e;
            cur_compacts = true;
        }
        let Some(cur) = cur else {
            return Err(writer_gone());
        };
        let older_bytes: u64 = files
            .iter()
            .take(files.len().saturating_sub(1))
            .map(|f| vfs.file_len(&f.path).unwrap_or(0))
            .sum();
        let shared = Arc::new(Shared::default());
        shared.last_seq.store(last_seq, Ordering::SeqCst);
        shared.acked.store(last_seq, Ordering::SeqCst);
        writer::publish_size(&shared, older_bytes, end, cur.len(), &spares);
        let (tx, rx) = crossbeam_channel::unbounded();
        let (durable_tx, durable_rx) = crossbeam_channel::bounded(writer::APPLIER_QUEUE);
        let applier_shared = shared.clone();
        let applier_priority = opts.applier_priority;
        let applier_thread = std::thread::Builder::new()
            .name("tsbucket-apply".into())
            .spawn(move || {
                crate::priority::apply_to_this_thread(applier_priority);
                writer::run_applier(durable_rx, apply, applier_shared)
            })?;
        let writer = Writer {
            vfs,
            dir: dir.to_path_buf(),
            sync: opts.sync,
            rotate_bytes: opts.rotate_bytes,
            files,
            spare_tail: cur.len() > end,
            end,
            salt,
            spares,
            cur,
            next_seq: last_seq + 1,
            dirty: false,
            last_sync: Instant::now(),
            applier: Some(durable_tx),
            applier_thread: Some(applier_thread),
            buf: Vec::new(),
            older_bytes,
            compact,
            cur_compacts,
            compacted: Vec::new(),
            shared: shared.clone(),
            rx,
        };
        let thread = std::thread::Builder::new()
            .name("tsbucket-wal".into())
            .spawn(move || writer.run())?;
        Ok(Wal {
            tx: Some(tx),
            shared,
            thread: Some(thread),
            dir: dir.to_path_buf(),
            max_record_bytes: opts.max_record_bytes,
        })
    }
}

impl<T: Send + 'static> Drop for Wal<T> {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
