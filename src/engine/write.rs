//! A collection's inserts: validating and encoding a batch on the caller's thread, then
//! appending it to the log, which returns once it is durable.

use super::Engine;
use crate::error::{Error, Result};
use crate::ingest::{prepare_batch, prepare_raw_batch, Batch, Prepared};
use crate::schema::Schema;
use bson::raw::RawDocumentBuf;
use bson::{Bson, Document};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Result of [`crate::Collection::insert_one`].
#[derive(Debug, Clone, PartialEq)]
pub struct InsertOneResult {
    /// The measurement's `_id` (generated when it had none).
    pub inserted_id: Bson,
}

/// Result of [`crate::Collection::insert_many`].
#[derive(Debug, Clone, PartialEq)]
pub struct InsertManyResult {
    /// Measurements inserted.
    pub inserted_count: u64,
    /// Their `_id`s, in batch order.
    pub inserted_ids: Vec<Bson>,
}

impl Engine {
    /// Read apart from the shared state, so that an insert does not wait for the applier.
    pub(crate) fn coll_schema(&self, id: u32, name: &str) -> Result<Arc<Schema>> {
        self.insert_schema(id)
            .ok_or_else(|| Error::NamespaceNotFound(name.to_string()))
    }

    /// See [`crate::Collection::insert_many`].
    pub(crate) fn insert_many(
        &self,
        id: u32,
        name: &str,
        docs: &[Document],
    ) -> Result<InsertManyResult> {
        self.insert_prepared(id, name, |fields| prepare_batch(id, docs, fields))
    }

    /// See [`crate::Collection::insert_many_raw`].
    pub(crate) fn insert_many_raw(
        &self,
        id: u32,
        name: &str,
        docs: &[RawDocumentBuf],
    ) -> Result<InsertManyResult> {
        self.insert_prepared(id, name, |fields| prepare_raw_batch(id, docs, fields))
    }

    /// Prepares a batch with the collection's fields on the caller's thread, then appends it.
    fn insert_prepared(
        &self,
        id: u32,
        name: &str,
        prepare: impl FnOnce(&Schema) -> Result<(Vec<Prepared>, Vec<u8>, Vec<Bson>)>,
    ) -> Result<InsertManyResult> {
        self.check_writable()?;
        let schema = self.coll_schema(id, name)?;
        let (prepared, payload, inserted_ids) = prepare(&schema)?;
        self.append_prepared(id, prepared, payload, inserted_ids)
    }

    pub(crate) fn append_prepared(
        &self,
        id: u32,
        prepared: Vec<Prepared>,
        payload: Vec<u8>,
        inserted_ids: Vec<Bson>,
    ) -> Result<InsertManyResult> {
        if payload.len() > self.opts.max_batch_bytes {
            return Err(Error::BadValue(format!(
                "the batch encodes to {} bytes, over the limit of {}; split it",
                payload.len(),
                self.opts.max_batch_bytes
            )));
        }
        let n = prepared.len() as u64;
        if n > 0 {
            self.wait_for_flusher();
            let batch = Batch {
                collection_id: id,
                docs: prepared,
            };
            self.append(payload, batch)?;
        }
        Ok(InsertManyResult {
            inserted_count: n,
            inserted_ids,
        })
    }

    /// Bytes of closed buckets past which inserts wait for the flusher: half of
    /// [`crate::DbOptions::catalog_memory_limit`]. The flusher flushes past it too, whatever
    /// `flush_threshold_bytes` says, so that a wait always ends.
    pub(crate) fn closed_cap(&self) -> usize {
        self.opts.catalog_memory_limit / 2
    }

    /// Waits while the closed buckets that no flush has taken pass half of
    /// [`crate::DbOptions::catalog_memory_limit`], asking the flusher to take them: a flusher
    /// slower than the inserts (a slow disk, a busy machine) would otherwise let closed
    /// buckets pile up in memory without bound. Returns at once when the flusher is not
    /// running or the database is closed or refuses writes (the append then says why).
    fn wait_for_flusher(&self) {
        let cap = self.closed_cap();
        if self.closed_gauge.load(Ordering::Relaxed) <= cap {
            return;
        }
        let flusher_runs = || {
            self.flusher
                .lock()
                .as_ref()
                .is_some_and(|h| !h.is_finished())
        };
        loop {
            // Counted again here: a drop or a flush since the last batch may have changed it.
            let unflushed = super::apply::closed_unflushed(&self.state.read());
            self.closed_gauge.store(unflushed, Ordering::Relaxed);
            let go = unflushed <= cap
                || !flusher_runs()
                || self.closed.load(Ordering::Acquire)
                || self.poisoned.lock().is_some();
            if go {
                return;
            }
            if let Some(kick) = &self.flush_kick {
                // A full channel means a flush is already asked for.
                let _ = kick.try_send(());
            }
            std::thread::sleep(FLUSHER_POLL);
        }
    }
}

/// How often an insert waiting for the flusher looks again.
const FLUSHER_POLL: std::time::Duration = std::time::Duration::from_millis(2);
