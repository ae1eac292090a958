//! The engine: the state every handle of a database shares, and everything that changes it.
//!
//! Data path of an insert: the caller's thread validates and encodes the batch
//! ([`crate::ingest`]); the log's writer thread makes it durable and acknowledges it; its
//! applier thread ([`apply`]) puts it in the bucket catalog in sequence order, so the catalog
//! never holds an unlogged measurement (reads wait for it, see [`state::StateLock`]); the
//! flusher ([`flush`]) writes closed buckets into segments and advances the manifest's log
//! checkpoint. Every manifest change goes through [`commit`].
//!
//! Where each part lives:
//! - [`open`]: opening for writing or reading; [`recover`]: the reading phase of an open
//!   (manifest, segments, log replay) and the leftovers a successful one removes;
//! - [`apply`], [`flush`]: the applier and the flusher;
//! - [`commit`]: the one path by which the manifest changes;
//! - [`ddl`]: collections and indexes; [`rewrite`]: meta updates and deletes; [`ttl`]: expiry;
//! - [`read`] and [`write`]: a collection's reads and inserts; [`verify`]: the check of a
//!   whole database.

pub(crate) mod apply;
pub(crate) mod commit;
pub(crate) mod ddl;
pub(crate) mod flush;
pub(crate) mod open;
pub(crate) mod read;
pub(crate) mod recover;
pub(crate) mod rewrite;
pub(crate) mod state;
pub(crate) mod ttl;
pub(crate) mod verify;
pub(crate) mod write;

use crate::engine::recover::RecoveryReport;
use crate::engine::state::StateLock;
use crate::error::{Error, Result};
use crate::ingest::Batch;
use crate::manifest::Manifest;
use crate::options::DbOptions;
use crate::schema::Schema;
use crate::segment::PageCache;
use crate::vfs::{LockGuard, Vfs};
use crate::wal::Wal;
use crossbeam_channel::Sender;
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// The engine behind a [`crate::Database`] and its collections: the state every handle
/// shares, the log, the manifest and the background threads. Only this module's files take its
/// locks.
pub(crate) struct Engine {
    path: PathBuf,
    opts: DbOptions,
    vfs: Arc<dyn Vfs>,
    state: StateLock,
    /// What an insert reads of each collection, kept apart from `state`, whose lock the
    /// applier holds while it applies a batch: preparing a batch never waits for the last one.
    inserting: RwLock<BTreeMap<u32, Arc<Schema>>>,
    /// Decompressed pages kept across reads (`DbOptions::page_cache_bytes`).
    page_cache: Arc<PageCache>,
    wal: RwLock<Option<Wal<Batch>>>,
    /// Stops the log's writes of its own accord once the database refuses writes.
    log_quiet: crate::wal::Quiet,
    /// The manifest as last written; its lock also serialises flushes and DDL.
    manifest: Mutex<Manifest>,
    /// Why writes are refused, once they are; shared with the applier, which poisons the
    /// database when a durable row cannot be applied.
    poisoned: Arc<Mutex<Option<String>>>,
    closed: AtomicBool,
    /// Bytes of closed buckets no flush has taken yet, over all collections: kept by the
    /// applier and the flusher, read by inserts without the state lock (see
    /// [`Engine::wait_for_flusher`]).
    closed_gauge: Arc<AtomicUsize>,
    /// Asks the flusher for a flush; `None` read-only.
    flush_kick: Option<Sender<()>>,
    /// Dropping it tells the flusher and the TTL sweeper to stop.
    stop_tx: Mutex<Option<Sender<()>>>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    /// The background TTL sweeper, when `DbOptions::ttl_interval` is set.
    ttl_sweeper: Mutex<Option<JoinHandle<()>>>,
    lock: Mutex<Option<Box<dyn LockGuard>>>,
    /// What the open (or, read-only, the last refresh) found and did.
    recovery: Mutex<RecoveryReport>,
    /// Opened with [`crate::Database::open_read_only`]: no log writer, no lock, no background work.
    read_only: bool,
}

impl Engine {
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.read_only {
            return Err(Error::ReadOnly(self.path.clone()));
        }
        if let Some(p) = self.poisoned.lock().as_ref() {
            return Err(Error::Poisoned(p.clone()));
        }
        Ok(())
    }

    pub(crate) fn poison(&self, e: &Error) {
        {
            let mut p = self.poisoned.lock();
            if p.is_none() {
                *p = Some(e.to_string());
            }
        }
        // Nothing may reach the disk after a failure, not even the log's zeros ahead.
        self.log_quiet.stop();
    }

    /// The schema an insert into collection `id` reads; `None` once it is dropped.
    pub(crate) fn insert_schema(&self, id: u32) -> Option<Arc<Schema>> {
        self.inserting.read().get(&id).cloned()
    }

    /// Directory of the database.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// True when opened read-only.
    pub(crate) fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// What the open (or, read-only, the last refresh) found and did.
    pub(crate) fn recovery_report(&self) -> RecoveryReport {
        self.recovery.lock().clone()
    }

    /// Appends a batch to the log; returns once it is durable. Reads through `state` see it.
    pub(crate) fn append(&self, payload: Vec<u8>, batch: Batch) -> Result<u64> {
        self.check_writable()?;
        let guard = self.wal.read();
        let wal = guard.as_ref().ok_or(Error::Closed)?;
        wal.append(payload, batch).inspect_err(|e| {
            if !matches!(e, Error::BadValue(_)) {
                self.poison(e)
            }
        })
    }

    /// See [`crate::Database::log_stats`].
    pub(crate) fn log_stats(&self) -> Result<crate::wal::LogStats> {
        self.wal
            .read()
            .as_ref()
            .map(|w| w.stats())
            .ok_or(Error::Closed)
    }

    /// Bytes the log keeps on disk for reuse (see [`crate::CollStats::wal_spare_bytes`]).
    pub(crate) fn wal_spare_bytes(&self) -> u64 {
        self.wal.read().as_ref().map_or(0, |w| w.spare_bytes())
    }

    /// Bytes of the log's records: what [`DbOptions::wal_limit_bytes`] bounds.
    pub(crate) fn wal_log_bytes(&self) -> u64 {
        self.wal.read().as_ref().map_or(0, |w| w.log_bytes())
    }

    /// Stops background work, syncs the log and releases the directory lock; later calls
    /// answer `Error::Closed`.
    pub(crate) fn shutdown(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_tx.lock().take();
        let threads = [self.flusher.lock().take(), self.ttl_sweeper.lock().take()];
        for h in threads.into_iter().flatten() {
            // A background thread may drop the last handle; it cannot wait for itself.
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        let wal = self.wal.write().take();
        let r = match wal {
            Some(w) => w.close(),
            None => Ok(()),
        };
        self.lock.lock().take();
        r
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
