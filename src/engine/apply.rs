//! The applier: the log's thread that puts each durable batch into the bucket catalog, in
//! sequence order, and asks the flusher to run when closed buckets pile up.

use super::state::Shared;
use crate::error::Error;
use crate::ingest::Batch;
use crate::options::DbOptions;
use crate::wal::codec::Compact;
use crossbeam_channel::Sender;
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Stores every record as it is (`DbOptions::wal_compact` off).
pub(super) struct Verbatim;

impl Compact<Batch> for Verbatim {
    fn reset(&mut self) {}
    fn compact(&mut self, _: &[u8], _: &Batch, _: &mut Vec<u8>) -> bool {
        false
    }
}

pub(super) fn make_apply(
    state: Arc<RwLock<Shared>>,
    opts: &DbOptions,
    (flush_tx, closed_gauge): (Sender<()>, Arc<AtomicUsize>),
    poisoned: Arc<Mutex<Option<String>>>,
) -> Box<dyn FnMut(u64, Batch, Vec<u8>) + Send> {
    let mem_limit = opts.catalog_memory_limit;
    let flush_bytes = opts.flush_threshold_bytes;
    Box::new(move |seq, batch: Batch, payload: Vec<u8>| {
        let mut st = state.write();
        st.applied_seq = seq;
        let mut want_flush = false;
        if let Some(c) = st.colls.get_mut(&batch.collection_id) {
            c.catalog.begin_batch();
            for (i, p) in batch.docs.iter().enumerate() {
                // The bytes were produced by prepare_batch from valid documents. A row that
                // does not read back is a bug; the record is durable, so the database stops
                // taking writes rather than answer without the row.
                match p.raw(&payload) {
                    Some(raw) => c.catalog.insert(p, raw, seq, i as u32),
                    None => {
                        let e = Error::Internal(format!(
                            "log record {seq} row {i} does not read back as prepared"
                        ));
                        poisoned.lock().get_or_insert_with(|| e.to_string());
                    }
                }
            }
            if c.catalog.memory() > mem_limit {
                c.catalog.close_idle(mem_limit / 10 * 9);
            }
            want_flush = c.catalog.closed_bytes() >= flush_bytes;
        }
        closed_gauge.store(closed_unflushed(&st), Ordering::Relaxed);
        drop(st);
        crate::ingest::buffers::give_back(payload);
        if want_flush {
            // A full channel means a flush is already requested.
            let _ = flush_tx.try_send(());
        }
    })
}

/// Bytes of closed buckets that no flush has taken yet, over all collections.
pub(super) fn closed_unflushed(st: &Shared) -> usize {
    st.colls.values().map(|c| c.catalog.closed_bytes()).sum()
}
