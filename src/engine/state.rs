//! The state every handle shares, behind a lock that first waits for the log's applier.
//!
//! An insert returns once its batch is durable, before the applier has put it in the bucket
//! catalog (so the caller prepares its next batch meanwhile). Everything that reads or changes
//! the shared state therefore goes through [`StateLock`], which waits until every insert
//! acknowledged so far is applied: an insert is visible to any read that starts after it
//! returned, in its own thread or another. The applier itself takes the lock directly.

use crate::collstate::CollState;
use crate::wal::Applied;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The shared state, reached only after every acknowledged insert is applied.
pub(crate) struct StateLock {
    lock: Arc<RwLock<Shared>>,
    applied: Applied,
}

impl StateLock {
    pub fn new(lock: Arc<RwLock<Shared>>, applied: Applied) -> StateLock {
        StateLock { lock, applied }
    }

    /// Reads the state once every insert acknowledged before the call is applied.
    pub fn read(&self) -> RwLockReadGuard<'_, Shared> {
        self.applied.wait();
        self.lock.read()
    }

    /// Changes the state once every insert acknowledged before the call is applied.
    pub fn write(&self) -> RwLockWriteGuard<'_, Shared> {
        self.applied.wait();
        self.lock.write()
    }
}

/// Everything readers and writers share, behind one lock held only for short, CPU-only work.
pub(crate) struct Shared {
    pub colls: BTreeMap<u32, CollState>,
    pub names: BTreeMap<String, u32>,
    /// Sequence number of the last log record applied to the catalog.
    pub applied_seq: u64,
}

/// The highest sequence number such that every record up to it is wholly in segments.
pub(crate) fn checkpoint_of(st: &Shared) -> u64 {
    let min_mem = st
        .colls
        .values()
        .flat_map(|c| {
            c.catalog
                .min_seq()
                .into_iter()
                .chain(c.flushing.iter().map(|b| b.min_seq()))
        })
        .min();
    match min_mem {
        Some(s) => s.saturating_sub(1),
        None => st.applied_seq,
    }
}
