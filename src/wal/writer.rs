//! The writer thread: group commit, rotation, reclaim.
//!
//! One thread owns the open WAL file. Callers hand it records through a channel and wait for a
//! reply. The thread takes everything queued (up to [`MAX_GROUP_BYTES`]), assigns consecutive
//! seqs, writes the group with one `append` and makes it durable with one `sync_data`. It then
//! hands the group to a second thread, the applier, which applies the records in seq order, and
//! answers each caller: a reply of `Ok(seq)` means the record is durable (under
//! `SyncMode::Always`) and will be applied. A caller does not wait for the applier: its next
//! batch is prepared while this one is applied, and the fsync of one group overlaps applying
//! the group before it. Reads instead wait for the applier to catch up with every record
//! acknowledged so far ([`Shared::wait_applied`]), so an insert that returned is visible to any
//! read that starts after it.
//!
//! After a failed write or sync the on-disk state is unknown: after a failed fsync the kernel
//! may already have dropped the dirty pages, so a retry could "succeed" without the data
//! (PostgreSQL's fsyncgate). The thread therefore never retries; it poisons the log, and every
//! later request is refused without touching the disk. Reopening recovers from what is on disk.

use super::codec::Compact;
use super::reader::{file_name, WalFile};
use super::record::{
    encode_file_header, encode_record_header, encode_record_of, FORMAT_VERSION, KIND_BATCH,
    KIND_COMPACT, RECORD_HEADER_LEN,
};
use super::spare::{self, Spares};
use super::SyncMode;
use crate::vfs::{Vfs, WritableFile};
use crate::{Error, Result};
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use parking_lot::{Condvar, Mutex};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Payloads of at least this many bytes are written where they lie, after their header,
/// instead of being copied into the group's buffer first.
pub const UNCOPIED_PAYLOAD: usize = 64 << 10;

/// Upper bound of the payload bytes of one commit group (at least one record is always taken).
pub const MAX_GROUP_BYTES: usize = 4 << 20;

/// Under `SyncMode::Always` the writer keeps at least this many zero bytes, written and
/// synced, past the end of the records, adding [`ZERO_STEP`] at a time after a commit when
/// nothing waits. A record written over them changes neither the file's size nor its
/// allocated blocks, so the `fdatasync` that acknowledges it has only data to write, not
/// file-system metadata (measured on ext4: about 0.34 instead of 0.59 ms for 700 KB).
pub const ZERO_AHEAD: u64 = 1 << 20;
/// Zero bytes added at a time (see [`ZERO_AHEAD`]).
pub const ZERO_STEP: usize = 1 << 20;

/// A request to the writer thread.
pub enum Msg<T> {
    /// Append one record; the reply carries its seq.
    Append {
        payload: Vec<u8>,
        item: T,
        reply: Sender<Result<u64>>,
    },
    /// Rotate and delete files whose records are all `<= upto`.
    Reclaim {
        upto: u64,
        reply: Sender<Result<()>>,
    },
    /// Finish pending work, sync, stop.
    Close { reply: Sender<Result<()>> },
}

/// State shared between the `Wal` handle and its thread.
#[derive(Default)]
pub struct Shared {
    /// Seq of the last record appended and applied (or recovered).
    pub last_seq: AtomicU64,
    /// Seq of the last record acknowledged to its caller (or recovered): durable, and applied
    /// once `last_seq` reaches it.
    pub acked: AtomicU64,
    /// Held while the applier announces progress, so that a reader that found `last_seq`
    /// behind cannot miss the wake-up.
    applied_lock: Mutex<()>,
    applied: Condvar,
    /// Why the log refuses writes, once it does.
    pub poisoned: Mutex<Option<String>>,
    /// Bytes of the log's records (file headers included), kept by the writer so that asking
    /// costs no file-system calls.
    pub bytes: AtomicU64,
    /// Bytes on disk beyond the records: zeros written ahead, old records past the end of a
    /// reused file, and spare files.
    pub spare_bytes: AtomicU64,
    /// True once the writer may no longer write of its own accord (zeros ahead); held while
    /// it does, so that whoever sets it knows no such write is under way.
    pub quiet: Mutex<bool>,
    /// What the writer has done and how long it took (see [`super::LogStats`]).
    pub counters: Counters,
}

/// The writer's running totals, read by [`super::Wal::stats`].
#[derive(Default)]
pub struct Counters {
    pub groups: AtomicU64,
    pub records: AtomicU64,
    pub record_bytes: AtomicU64,
    pub stored_bytes: AtomicU64,
    pub write_nanos: AtomicU64,
    pub syncs: AtomicU64,
    pub sync_nanos: AtomicU64,
    pub zero_bytes: AtomicU64,
    pub zero_nanos: AtomicU64,
}

/// Adds the time since `t0` to `total`.
fn add_since(total: &AtomicU64, t0: Instant) {
    let ns = u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX);
    total.fetch_add(ns, Ordering::Relaxed);
}

impl Shared {
    /// The refusal every request gets once the log is poisoned.
    pub fn check(&self) -> Result<()> {
        match &*self.poisoned.lock() {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }
    fn poison(&self, why: String) {
        {
            let mut p = self.poisoned.lock();
            if p.is_none() {
                *p = Some(why);
            }
        }
        // A poisoned log may never apply what it acknowledged: waiting readers stop waiting.
        self.announce();
    }

    /// Records that every record up to `seq` is applied.
    fn set_applied(&self, seq: u64) {
        self.last_seq.store(seq, Ordering::SeqCst);
        self.announce();
    }

    fn announce(&self) {
        let _held = self.applied_lock.lock();
        self.applied.notify_all();
    }

    /// Waits until every record acknowledged before the call is applied. Returns early once
    /// the log is poisoned: a panicked applier never gets there, and the caller then reads
    /// what was applied (the database refuses writes, and reopening replays the rest).
    pub fn wait_applied(&self) {
        let target = self.acked.load(Ordering::SeqCst);
        if self.last_seq.load(Ordering::SeqCst) >= target {
            return;
        }
        let mut held = self.applied_lock.lock();
        while self.last_seq.load(Ordering::SeqCst) < target && self.poisoned.lock().is_none() {
            self.applied.wait(&mut held);
        }
    }
}

/// Marks the log poisoned if the writer thread unwinds, so
/// callers get `Poisoned` instead of waiting on a thread that is gone.
struct PoisonOnPanic(Arc<Shared>);
impl Drop for PoisonOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.poison("the WAL writer thread panicked".into());
        }
    }
}

/// An I/O error rebuilt for each caller of a failed group (io::Error is not Clone).
fn io_copy(e: &io::Error, what: &str) -> Error {
    match e.raw_os_error() {
        Some(code) => Error::Io(io::Error::from_raw_os_error(code)),
        None => Error::Io(io::Error::new(e.kind(), format!("WAL {what} failed: {e}"))),
    }
}

/// Creates WAL file `first_seq` in `dir`: header written and synced, then the directory synced,
/// so the file exists durably before any record is written into it.
pub fn create_file(
    vfs: &dyn Vfs,
    dir: &Path,
    first_seq: u64,
) -> io::Result<(WalFile, Box<dyn WritableFile>)> {
    let path = dir.join(file_name(first_seq));
    let mut f = vfs.open_append(&path, true)?;
    f.append(&encode_file_header(first_seq, 0))?;
    f.sync_data()?;
    vfs.sync_dir(dir)?;
    Ok((WalFile { first_seq, path }, f))
}

/// Starts log file `first_seq` in a spare file if there is one, else in a new file. Returns
/// the file, its handle, its salt and the end of its header (a reused file is longer).
pub fn start_file(
    vfs: &dyn Vfs,
    dir: &Path,
    first_seq: u64,
    spares: &mut Spares,
) -> io::Result<(WalFile, Box<dyn WritableFile>, u32, u64)> {
    if let Some(s) = spares.take() {
        return match spare::reuse(vfs, dir, &s, first_seq) {
            Ok((file, handle, salt)) => {
                Ok((file, handle, salt, super::record::FILE_HEADER_LEN as u64))
            }
            Err(e) => {
                spares.put_back(s);
                Err(e)
            }
        };
    }
    let (file, handle) = create_file(vfs, dir, first_seq)?;
    let end = handle.len();
    Ok((file, handle, 0, end))
}

/// Publishes the log's sizes: `older` bytes of earlier files, `end` of the records and `len`
/// of the current file, and the spare files.
pub fn publish_size(shared: &Shared, older: u64, end: u64, len: u64, spares: &Spares) {
    shared.bytes.store(older + end, Ordering::SeqCst);
    shared
        .spare_bytes
        .store(len.saturating_sub(end) + spares.bytes(), Ordering::SeqCst);
}

type Item<T> = (Vec<u8>, T, Sender<Result<u64>>);

/// A durable group on its way to the applier: the seq of its first record and its records.
pub type Durable<T> = (u64, Vec<(Vec<u8>, T)>);

/// Durable groups the writer may hand on before it waits for the applier: bounds the memory
/// of records acknowledged but not yet applied.
pub const APPLIER_QUEUE: usize = 4;

/// The applier thread's main loop: applies each durable group in seq order. A panic in
/// `apply` poisons the log, so no later append is written after it.
pub fn run_applier<T>(
    rx: Receiver<Durable<T>>,
    mut apply: Box<dyn FnMut(u64, T, Vec<u8>) + Send>,
    shared: Arc<Shared>,
) {
    for (first, group) in rx {
        let mut last = None;
        for (seq, (payload, item)) in (first..).zip(group) {
            let applied = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                apply(seq, item, payload)
            }));
            if applied.is_err() {
                if let Some(done) = last {
                    shared.set_applied(done);
                }
                shared.poison("the WAL applier panicked".into());
                return;
            }
            last = Some(seq);
        }
        if let Some(done) = last {
            shared.set_applied(done);
        }
    }
}

/// The writer thread's state.
pub struct Writer<T> {
    pub vfs: Arc<dyn Vfs>,
    pub dir: PathBuf,
    pub sync: SyncMode,
    pub rotate_bytes: u64,
    /// All WAL files, oldest first; the last one is `cur`.
    pub files: Vec<WalFile>,
    pub cur: Box<dyn WritableFile>,
    /// End of the last record in `cur`; zeros written ahead, or old records of a reused file,
    /// may follow it.
    pub end: u64,
    /// Bytes that are not records may lie past `end` in `cur`.
    pub spare_tail: bool,
    /// The salt of `cur`'s records.
    pub salt: u32,
    /// Files kept for reuse.
    pub spares: Spares,
    /// Seq the next record gets.
    pub next_seq: u64,
    /// Bytes were written since the last sync.
    pub dirty: bool,
    pub last_sync: Instant,
    /// Durable groups go to the applier thread; `None` once it was told to stop.
    pub applier: Option<Sender<Durable<T>>>,
    pub applier_thread: Option<std::thread::JoinHandle<()>>,
    /// Encoding buffer reused across groups: a fresh multi-megabyte buffer per group costs
    /// page faults and zeroing on every commit.
    pub buf: Vec<u8>,
    /// Bytes of the files before `cur`.
    pub older_bytes: u64,
    /// Stores records compacted, in files of a version that allows it.
    pub compact: Option<Box<dyn Compact<T>>>,
    /// `cur` may hold compacted records (its version is 3 or later).
    pub cur_compacts: bool,
    /// Buffer the compact form of a record is built in, reused.
    pub compacted: Vec<u8>,
    pub shared: Arc<Shared>,
    pub rx: Receiver<Msg<T>>,
}

impl<T: Send + 'static> Writer<T> {
    /// The thread's main loop.
    pub fn run(mut self) {
        let _guard = PoisonOnPanic(self.shared.clone());
        let mut held: Option<Msg<T>> = None;
        loop {
            let msg = match held.take() {
                Some(m) => m,
                None => match self.next_msg() {
                    Some(m) => m,
                    None => {
                        // Every handle is gone without a Close: still leave the log synced.
                        let _ = self.finish();
                        self.stop_applier();
                        return;
                    }
                },
            };
            match msg {
                Msg::Append {
                    payload,
                    item,
                    reply,
                } => {
                    let mut bytes = payload.len();
                    let mut group = vec![(payload, item, reply)];
                    while bytes < MAX_GROUP_BYTES {
                        match self.rx.try_recv() {
                            Ok(Msg::Append {
                                payload,
                                item,
                                reply,
                            }) if bytes + payload.len() <= MAX_GROUP_BYTES => {
                                bytes += payload.len();
                                group.push((payload, item, reply));
                            }
                            Ok(other) => {
                                held = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    self.commit(group);
                    if held.is_none() {
                        self.zero_ahead();
                    }
                }
                Msg::Reclaim { upto, reply } => {
                    let _ = reply.send(self.reclaim(upto));
                }
                Msg::Close { reply } => {
                    let r = self.finish();
                    // Every record acknowledged before the close is applied when it returns.
                    self.stop_applier();
                    let _ = reply.send(r.and_then(|()| self.shared.check()));
                    return;
                }
            }
        }
    }

    /// Waits for the next request; under `Periodic`, syncs when the interval elapses meanwhile.
    fn next_msg(&mut self) -> Option<Msg<T>> {
        loop {
            let deadline = match self.sync {
                SyncMode::Periodic(every) if self.dirty => self.last_sync + every,
                _ => return self.rx.recv().ok(),
            };
            let wait = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(wait) {
                Ok(m) => return Some(m),
                Err(RecvTimeoutError::Timeout) => self.periodic_sync(),
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    fn periodic_sync(&mut self) {
        if self.shared.check().is_err() || !self.dirty {
            return;
        }
        match self.cur.sync_data() {
            Ok(()) => {
                self.dirty = false;
                self.last_sync = Instant::now();
            }
            Err(e) => self.shared.poison(format!("WAL sync failed: {e}")),
        }
    }

    /// Writes, syncs, applies and answers one group.
    fn commit(&mut self, group: Vec<Item<T>>) {
        if let Err(e) = self.shared.check() {
            for (_, _, reply) in group {
                let _ = reply.send(Err(Error::Poisoned(e.to_string())));
            }
            return;
        }
        match self.write_group(&group) {
            Ok(()) => {}
            Err((e, what)) => {
                self.shared.poison(format!("WAL {what} failed: {e}"));
                for (_, _, reply) in group {
                    let _ = reply.send(Err(io_copy(&e, what)));
                }
                return;
            }
        }
        let first = self.next_seq;
        self.next_seq += group.len() as u64;
        let Some(applier) = &self.applier else {
            return;
        };
        let (records, replies): (Vec<_>, Vec<_>) = group
            .into_iter()
            .map(|(payload, item, reply)| ((payload, item), reply))
            .unzip();
        if applier.send((first, records)).is_err() {
            // The applier is gone (it panicked): the group is on disk but cannot be applied.
            self.shared
                .poison("the WAL applier thread has stopped".into());
            for reply in replies {
                let _ = reply.send(Err(Error::Poisoned(
                    "the WAL applier thread has stopped".into(),
                )));
            }
            return;
        }
        // Published before any reply: a read that starts after an insert returned waits for
        // at least this seq to be applied.
        self.shared
            .acked
            .store(first + replies.len() as u64 - 1, Ordering::SeqCst);
        for (seq, reply) in (first..).zip(replies) {
            let _ = reply.send(Ok(seq));
        }
    }

    /// Lets the applier finish the groups handed to it, then waits for it to stop.
    fn stop_applier(&mut self) {
        self.applier = None;
        if let Some(t) = self.applier_thread.take() {
            // A panic in `apply` was caught there and poisoned the log.
            let _ = t.join();
        }
    }

    /// Encodes and writes the group (rotating where the file is full) and syncs per the mode.
    /// Does not advance `next_seq`: that happens once the whole group is written.
    fn write_group(
        &mut self,
        group: &[Item<T>],
    ) -> std::result::Result<(), (io::Error, &'static str)> {
        let total: usize = group
            .iter()
            .map(|(p, _, _)| p.len() + RECORD_HEADER_LEN)
            .sum();
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.reserve(total);
        let r = self.encode_and_write(group, &mut buf);
        if r.is_ok() {
            let c = &self.shared.counters;
            c.groups.fetch_add(1, Ordering::Relaxed);
            c.records.fetch_add(group.len() as u64, Ordering::Relaxed);
            c.record_bytes.fetch_add(total as u64, Ordering::Relaxed);
        }
        self.publish_size();
        // Keep the buffer for the next group unless one huge record inflated it.
        if buf.capacity() <= 2 * MAX_GROUP_BYTES {
            self.buf = buf;
        }
        r
    }

    fn encode_and_write(
        &mut self,
        group: &[Item<T>],
        buf: &mut Vec<u8>,
    ) -> std::result::Result<(), (io::Error, &'static str)> {
        let mut stored_bytes = 0;
        for (seq, (payload, item, _)) in (self.next_seq..).zip(group) {
            // Rotate once the file has reached its size, but never leave a file without records.
            let has_records = seq > self.cur_first_seq();
            if has_records && self.end + buf.len() as u64 >= self.rotate_bytes {
                if !buf.is_empty() {
                    self.write_records(buf).map_err(|e| (e, "write"))?;
                    buf.clear();
                }
                self.rotate(seq).map_err(|e| (e, "rotation"))?;
            }
            // After any rotation: a compacted record refers only to its own file.
            let mut compacted = std::mem::take(&mut self.compacted);
            compacted.clear();
            let is_compact = self.cur_compacts
                && self
                    .compact
                    .as_mut()
                    .is_some_and(|c| c.compact(payload, item, &mut compacted));
            let (kind, stored) = if is_compact {
                (KIND_COMPACT, compacted.as_slice())
            } else {
                (KIND_BATCH, payload.as_slice())
            };
            stored_bytes += stored.len() + RECORD_HEADER_LEN;
            let written = if stored.len() < UNCOPIED_PAYLOAD {
                encode_record_of(buf, seq, self.salt, kind, stored);
                Ok(())
            } else {
                // Written from where it lies: copying it first would cost as much again.
                encode_record_header(buf, seq, self.salt, kind, stored);
                let r = self
                    .write_records(buf)
                    .and_then(|()| self.write_records(stored));
                buf.clear();
                r
            };
            self.compacted = compacted;
            written.map_err(|e| (e, "write"))?;
        }
        self.shared
            .counters
            .stored_bytes
            .fetch_add(stored_bytes as u64, Ordering::Relaxed);
        if !buf.is_empty() {
            self.write_records(buf).map_err(|e| (e, "write"))?;
        }
        match self.sync {
            SyncMode::Always => self.sync_now().map_err(|e| (e, "sync"))?,
            SyncMode::Periodic(every) if self.last_sync.elapsed() >= every => {
                self.sync_now().map_err(|e| (e, "sync"))?
            }
            SyncMode::Periodic(_) | SyncMode::Never => {}
        }
        Ok(())
    }

    /// Writes encoded records at the end of the records, over the zeros written ahead.
    fn write_records(&mut self, buf: &[u8]) -> io::Result<()> {
        self.dirty = true;
        let t0 = Instant::now();
        self.cur.write_at(self.end, buf)?;
        add_since(&self.shared.counters.write_nanos, t0);
        self.end += buf.len() as u64;
        Ok(())
    }

    /// Adds zeros past the records when fewer than [`ZERO_AHEAD`] remain, nothing waits to be
    /// written and the zeros stay below the rotation size (see [`ZERO_AHEAD`]); when a spare
    /// file is waiting, starts the next file in it instead, which needs no zeros. A failure
    /// poisons the log like any failed write: the next request is refused naming it.
    fn zero_ahead(&mut self) {
        if self.sync != SyncMode::Always
            || self.dirty
            || !self.rx.is_empty()
            || self.cur.len() + ZERO_STEP as u64 > self.rotate_bytes
            || self.cur.len().saturating_sub(self.end) >= ZERO_AHEAD
            || self.shared.check().is_err()
        {
            return;
        }
        static ZEROS: [u8; ZERO_STEP] = [0; ZERO_STEP];
        let shared = self.shared.clone();
        let quiet = shared.quiet.lock();
        if *quiet {
            return;
        }
        // A file must hold a record before it has a successor (the successor is named for the
        // next seq).
        if !self.spares.is_empty() && self.next_seq > self.cur_first_seq() {
            if let Err(e) = self.rotate(self.next_seq) {
                self.shared.poison(format!("WAL rotation failed: {e}"));
            }
            return;
        }
        self.spare_tail = true;
        let t0 = Instant::now();
        let r = self.cur.append(&ZEROS).and_then(|()| self.cur.sync_data());
        match r {
            Ok(()) => {
                let c = &self.shared.counters;
                add_since(&c.zero_nanos, t0);
                c.zero_bytes.fetch_add(ZERO_STEP as u64, Ordering::Relaxed);
                self.publish_size();
            }
            // As after any failed write or sync, the file's state is unknown.
            Err(e) => self.shared.poison(format!("WAL write ahead failed: {e}")),
        }
    }

    /// Cuts what follows the records (zeros written ahead, old records of a reused file) off the
    /// current file, durably.
    fn cut_tail(&mut self) -> io::Result<()> {
        // Also when the file's own length says nothing follows: a failed write may have left
        // bytes past it.
        if self.spare_tail {
            // Durable at once (with everything before it), so nothing is left dirty.
            self.cur.truncate(self.end)?;
            self.spare_tail = false;
            self.dirty = false;
            self.publish_size();
        }
        Ok(())
    }

    fn sync_now(&mut self) -> io::Result<()> {
        let t0 = Instant::now();
        self.cur.sync_data()?;
        let c = &self.shared.counters;
        add_since(&c.sync_nanos, t0);
        c.syncs.fetch_add(1, Ordering::Relaxed);
        self.dirty = false;
        self.last_sync = Instant::now();
        Ok(())
    }

    fn publish_size(&self) {
        publish_size(
            &self.shared,
            self.older_bytes,
            self.end,
            self.cur.len(),
            &self.spares,
        );
    }

    fn cur_first_seq(&self) -> u64 {
        self.files.last().map_or(self.next_seq, |f| f.first_seq)
    }

    /// Starts file `first_seq`. The old file is cut back to its last record and synced first
    /// (whatever the sync mode) so that a file with a successor is always complete: the reader
    /// treats damage there as corruption.
    fn rotate(&mut self, first_seq: u64) -> io::Result<()> {
        // A file with a successor must end with its last record: recovery takes anything
        // after it for damage.
        self.cut_tail()?;
        if self.dirty {
            self.sync_now()?;
        }
        let (file, handle, salt, end) =
            start_file(&*self.vfs, &self.dir, first_seq, &mut self.spares)?;
        self.files.push(file);
        self.older_bytes += self.cur.len();
        // Every new file is of the current version, and its records refer to no other file.
        self.cur_compacts = FORMAT_VERSION >= 3;
        if let Some(c) = &mut self.compact {
            c.reset();
        }
        self.spare_tail = handle.len() > end;
        self.end = end;
        self.salt = salt;
        self.cur = handle;
        self.publish_size();
        Ok(())
    }

    fn reclaim(&mut self, upto: u64) -> Result<()> {
        self.shared.check()?;
        // The older files go first, so that a new file can start in one of them.
        let mut retired = self.retire_covered(upto)?;
        // If the current file holds any record <= upto, start a new one so it can go too.
        if upto >= self.cur_first_seq() && self.next_seq > self.cur_first_seq() {
            if let Err(e) = self.rotate(self.next_seq) {
                self.shared.poison(format!("WAL rotation failed: {e}"));
                return Err(io_copy(&e, "rotation"));
            }
            retired |= self.retire_covered(upto)?;
        }
        if retired {
            self.vfs.sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// Deletes, or keeps as spares, the files before the current one whose records are all
    /// `<= upto`; returns whether there were any. The caller syncs the directory.
    fn retire_covered(&mut self, upto: u64) -> Result<bool> {
        // Oldest first, so an interrupted reclaim leaves a contiguous suffix of files.
        let mut retired = false;
        while let Some(next) = self.files.get(1) {
            if next.first_seq.saturating_sub(1) > upto {
                break;
            }
            let victim = self.files.remove(0);
            let min_len = self.spare_min_len();
            let r = match self.vfs.file_len(&victim.path) {
                Ok(len) => self.spares.retire(&*self.vfs, &victim, len, min_len),
                // Already gone: nothing to keep or delete.
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            };
            if let Err(e) = r {
                self.files.insert(0, victim);
                return Err(e.into());
            }
            retired = true;
        }
        if retired {
            self.older_bytes = self
                .files
                .iter()
                .take(self.files.len().saturating_sub(1))
                .map(|f| self.vfs.file_len(&f.path).unwrap_or(0))
                .sum();
            self.publish_size();
        }
        Ok(retired)
    }

    /// Files shorter than this are deleted rather than kept for reuse: a file cut short by a
    /// reclaim saves too little writing to be worth its disk space.
    fn spare_min_len(&self) -> u64 {
        self.rotate_bytes / 4
    }

    /// Final sync at close, leaving the file to end with its last record. A poisoned log is not
    /// touched.
    fn finish(&mut self) -> Result<()> {
        self.shared.check()?;
        // Quiet (the database refuses writes): the zeros stay, and recovery cuts them.
        let quiet = *self.shared.quiet.lock();
        if let Err(e) = if quiet { Ok(()) } else { self.cut_tail() } {
            self.shared
                .poison(format!("WAL truncation at close failed: {e}"));
            return Err(io_copy(&e, "truncation"));
        }
        if self.dirty {
            if let Err(e) = self.sync_now() {
                self.shared.poison(format!("WAL sync at close failed: {e}"));
                return Err(io_copy(&e, "sync"));
            }
        }
        Ok(())
    }
}
