//! The flusher: writes closed buckets into segment files, commits them and the new log
//! checkpoint to the manifest, and lets the log reclaim what segments now hold.

use super::state::checkpoint_of;
use super::Engine;
use crate::bucket::EncodedBucket;
use crate::catalog::ClosedBucket;
use crate::error::{Error, Result};
use crate::manifest::{segment_path, Manifest};
use crate::segment::{write_encoded_segment, Segment, SegmentHeaderInfo};
use crossbeam_channel::Receiver;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Fewest buckets per thread worth a thread of their own.
const BUCKETS_PER_THREAD: usize = 64;
/// Most threads a flush encodes on.
const MAX_ENCODE_THREADS: usize = 4;

/// The buckets encoded for a segment, in order; with `spread`, on up to one thread per core.
/// The buckets are independent, and a flush that closes every bucket (the one that ends a bulk
/// load, or a close) encodes all the catalog holds while nothing else is left to run. A flush
/// during ingest stays on its thread: the cores are busy inserting, and spreading it measured
/// no faster.
fn encode_all(buckets: &[Arc<ClosedBucket>], spread: bool) -> Vec<EncodedBucket> {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cores = match spread {
        true => *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        false => 1,
    };
    let threads = cores
        .min(MAX_ENCODE_THREADS)
        .min(buckets.len() / BUCKETS_PER_THREAD)
        .max(1);
    if threads == 1 {
        return buckets.iter().map(|b| b.encoded()).collect();
    }
    let per = buckets.len().div_ceil(threads);
    std::thread::scope(|s| {
        let parts: Vec<_> = buckets
            .chunks(per)
            .map(|part| s.spawn(move || part.iter().map(|b| b.encoded()).collect::<Vec<_>>()))
            .collect();
        let mut all = Vec::with_capacity(buckets.len());
        for p in parts {
            match p.join() {
                Ok(part) => all.extend(part),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    })
}

impl Engine {
    /// Writes closed buckets to segments, records them and the new log checkpoint in the
    /// manifest, then lets the log drop what is no longer needed. With `close_all`, every open
    /// bucket is closed first.
    pub(crate) fn flush(&self, close_all: bool) -> Result<()> {
        let mut man = self.manifest.lock();
        self.flush_locked(&mut man, close_all)
    }

    /// [`Engine::flush`] for a caller that already holds the manifest lock.
    pub(crate) fn flush_locked(&self, man: &mut Manifest, close_all: bool) -> Result<()> {
        {
            let mut st = self.state.write();
            if close_all {
                for c in st.colls.values_mut() {
                    c.catalog.close_all();
                }
            } else if self.wal_log_bytes() > self.opts.wal_limit_bytes {
                // Buckets holding the oldest half of the unflushed log pin it: close them.
                let lo = checkpoint_of(&st);
                let upto = lo + (st.applied_seq.saturating_sub(lo)) / 2;
                for c in st.colls.values_mut() {
                    c.catalog.close_older_than(upto.max(lo + 1));
                }
            }
        }
        let work: Vec<(u32, String, Vec<Arc<ClosedBucket>>)> = {
            let mut st = self.state.write();
            let work = st
                .colls
                .values_mut()
                .filter_map(|c| {
                    let b = c.catalog.take_closed();
                    if b.is_empty() {
                        return None;
                    }
                    c.flushing.extend(b.iter().cloned());
                    Some((c.entry.id, c.schema().time().to_string(), b))
                })
                .collect();
            // Taken: inserts waiting for the flusher may go on.
            self.closed_gauge
                .store(super::apply::closed_unflushed(&st), Ordering::Relaxed);
            work
        };
        let mut written = Vec::new();
        let mut next_id = man.next_segment_id;
        for (cid, time_field, buckets) in &work {
            let sid = next_id;
            next_id += 1;
            let sp = segment_path(&self.path, sid);
            // Finishing closed buckets happens here, off the thread that applies batches.
            let encoded = encode_all(buckets, close_all);
            let refs: Vec<&EncodedBucket> = encoded.iter().collect();
            let info = SegmentHeaderInfo {
                collection_id: *cid,
                time_field: time_field.clone(),
            };
            let seg = write_encoded_segment(self.vfs.as_ref(), &sp, &info, &refs)
                .and_then(|_| Segment::open(self.vfs.as_ref(), &sp))
                .map(|s| s.with_page_cache(self.page_cache.clone()))
                .inspect_err(|e| self.poison(e))?;
            written.push((*cid, sid, Arc::new(seg), buckets.len()));
        }
        let generation = man.generation;
        self.commit(man, |next| {
            next.next_segment_id = next_id;
            let mut st = self.state.write();
            for (cid, sid, seg, n) in written {
                if let Some(c) = st.colls.get_mut(&cid) {
                    c.add_segment(sid, seg);
                    c.flushing.drain(..n.min(c.flushing.len()));
                    c.entry.segments.push(sid);
                    if let Some(e) = next.collections.iter_mut().find(|e| e.id == cid) {
                        e.segments.push(sid);
                    }
                }
            }
            next.wal_checkpoint = checkpoint_of(&st);
            Ok(())
        })?;
        // Committed: the log may drop what the checkpoint now covers.
        if man.generation != generation {
            if let Some(w) = self.wal.read().as_ref() {
                w.reclaim(man.wal_checkpoint)
                    .inspect_err(|e| self.poison(e))?;
            }
        }
        Ok(())
    }
}

pub(super) fn spawn_flusher(
    inner: std::sync::Weak<Engine>,
    rx: Receiver<()>,
    stop: Receiver<()>,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("tsbucket-flush".into())
        .spawn(move || {
            if let Some(db) = inner.upgrade() {
                crate::priority::apply_to_this_thread(db.opts.background_priority);
            }
            let tick = std::time::Duration::from_secs(1);
            loop {
                crossbeam_channel::select! {
                    recv(stop) -> _ => return,
                    recv(rx) -> msg => if msg.is_err() { return },
                    default(tick) => {}
                }
                let Some(db) = inner.upgrade() else { return };
                if db.closed.load(Ordering::Acquire) || db.poisoned.lock().is_some() {
                    continue;
                }
                let need = {
                    let st = db.state.read();
                    // Inserts wait past the cap, however the bytes spread over collections.
                    st.colls
                        .values()
                        .any(|c| c.catalog.closed_bytes() >= db.opts.flush_threshold_bytes)
                        || super::apply::closed_unflushed(&st) > db.closed_cap()
                } || db.wal_log_bytes() > db.opts.wal_limit_bytes;
                if need {
                    // Failures poison the database; the next write reports them.
                    let _ = db.flush(false);
                }
            }
        })
        .map_err(Error::Io)
}
