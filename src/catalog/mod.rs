//! The bucket catalog: open buckets per series, the rules that close them, and their counters.
//!
//! Each series (collection + normalised meta) has one *current* bucket that takes in-order
//! measurements, plus buckets set aside when a measurement jumped forward past their span or
//! back before their start. A set-aside bucket stays in memory and is *reopened* when a late
//! measurement falls in its window, so out-of-order data joins the bucket it belongs to instead
//! of fragmenting the series (MongoDB 5.0 closed them; this follows 6.3's reopening without a
//! query). Closed buckets wait in `closed` until the flusher writes them to a segment.

pub mod builder;
pub mod closed;
pub mod column;
pub mod control;
pub mod rows;
pub mod stats;

pub use builder::{
    identical, is_hidden, is_hidden_name, BucketBuilder, ColumnRef, FitLimits, OpenCopy,
    Refusal, IDX_COLUMN, META_COLUMN, SEQ_COLUMN,
};
pub use closed::ClosedBucket;
pub use stats::CatalogStats;

use crate::bucket::BucketData;
use crate::schema::Schema;
use bson::oid::ObjectId;
use bson::raw::RawDocument;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Rounds `t_ms` down to a multiple of `rounding_ms` (also for times before 1970). Times
/// within one rounding of the earliest BSON datetime, whose multiple lies below what an `i64`
/// holds, round to that earliest datetime.
pub fn round_down(t_ms: i64, rounding_ms: i64) -> i64 {
    t_ms.checked_sub(t_ms.rem_euclid(rounding_ms.max(1)))
        .unwrap_or(i64::MIN)
}

fn oid_counter() -> &'static AtomicU64 {
    static COUNTER: OnceLock<AtomicU64> = OnceLock::new();
    COUNTER.get_or_init(|| {
        // Seeded randomly per process like MongoDB's, so buckets of different runs do not collide.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ (u64::from(std::process::id()) << 32);
        AtomicU64::new(splitmix(seed))
    })
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A bucket `_id`: 4-byte big-endian start seconds, then an 8-byte big-endian counter that
/// grows by one per bucket. Starts outside the 32-bit range wrap (MongoDB's "extended range");
/// the engine never relies on the `_id` alone for such times.
pub fn bucket_oid(start_ms: i64) -> ObjectId {
    let secs = start_ms.div_euclid(1000) as u32;
    let counter = oid_counter().fetch_add(1, Ordering::Relaxed);
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&secs.to_be_bytes());
    b[4..].copy_from_slice(&counter.to_be_bytes());
    ObjectId::from_bytes(b)
}

pub use crate::ingest::{Prepared, SeriesKey};

struct Series {
    open: Vec<BucketBuilder>,
    current: Option<usize>,
    /// Measurements the series has received (drives closing of idle set-aside buckets).
    inserts: u64,
    /// Bytes of unsplit rows the series' last full bucket held: a new bucket reserves as much.
    pending_hint: usize,
}

/// A set-aside bucket closes once its series has received this many measurements without
/// touching it: late data for it is then unlikely, and holding it costs memory, pins the log
/// and keeps its rows from the flusher. A series that alternates between time ranges touches
/// each of its buckets every few measurements and keeps them all. (A series that moves on in
/// time, like a host reporting every 10 s, would otherwise hold a whole second span of data.)
pub const SET_ASIDE_IDLE_INSERTS: u64 = 64;

/// The catalog of one collection.
pub struct CollCatalog {
    schema: Schema,
    limits: FitLimits,
    series: foldhash::HashMap<SeriesKey, Series>,
    closed: Vec<Arc<ClosedBucket>>,
    closed_bytes: usize,
    open_count: usize,
    open_bytes: usize,
    stats: CatalogStats,
    tick: u64,
    batch: u64,
}

impl CollCatalog {
    /// An empty catalog.
    pub fn new(schema: Schema, limits: FitLimits) -> CollCatalog {
        CollCatalog {
            schema,
            limits,
            series: foldhash::HashMap::default(),
            closed: Vec::new(),
            closed_bytes: 0,
            open_count: 0,
            open_bytes: 0,
            stats: CatalogStats::default(),
            tick: 0,
            batch: 0,
        }
    }

    /// The fields and bucketing in force.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// Counters so far.
    pub fn stats(&self) -> &CatalogStats {
        &self.stats
    }

    /// Changes span/rounding (collMod): open buckets keep their start but use the new span.
    pub fn set_schema(&mut self, schema: Schema) {
        self.schema = schema;
    }

    /// Number of open (current or set-aside) buckets.
    pub fn open_buckets(&self) -> usize {
        self.open_count
    }

    /// Open buckets that are not their series' current bucket: set aside when time moved
    /// past them and kept for late measurements (MongoDB's archived buckets).
    pub fn archived_buckets(&self) -> usize {
        self.series
            .values()
            .map(|s| s.open.len() - usize::from(s.current.is_some()).min(s.open.len()))
            .sum()
    }

    /// Bytes of measurements in closed buckets awaiting a flush.
    pub fn closed_bytes(&self) -> usize {
        self.closed_bytes
    }

    /// Approximate memory of open buckets (decoded values take about twice their BSON size).
    pub fn memory(&self) -> usize {
        self.open_bytes * 2 + self.open_count * 1024
    }

    /// Smallest log sequence number still held only in memory (open or closed-unflushed).
    pub fn min_seq(&self) -> Option<u64> {
        let open = self
            .series
            .values()
            .flat_map(|s| s.open.iter())
            .map(|b| b.min_seq);
        let closed = self.closed.iter().map(|b| b.min_seq());
        open.chain(closed).min()
    }

    /// Starts a new insert batch (for the commit counters).
    pub fn begin_batch(&mut self) {
        self.batch += 1;
    }

    /// Routes one measurement to its bucket, applying MongoDB's rollover rules in order.
    pub fn insert(&mut self, m: &Prepared, doc: &RawDocument, seq: u64, idx: u32) {
        self.tick += 1;
        let tick = self.tick;
        let batch = self.batch;
        let span = self.schema.span_ms;
        let limits = self.limits;
        // One lookup for a known series (its key is a few hundred bytes to hash and compare).
        let (series, is_new_series) = match self.series.get_mut(&m.key) {
            Some(s) => (s, false),
            None => (
                self.series.entry(m.key.clone()).or_insert(Series {
                    open: Vec::new(),
                    current: None,
                    inserts: 0,
                    pending_hint: 0,
                }),
                true,
            ),
        };

        let mut target: Option<usize> = None;
        if let Some(c) = series.current {
            if let Some(b) = series.open.get_mut(c) {
                if m.time_ms >= b.start_ms && m.time_ms.saturating_sub(b.start_ms) >= span {
                    self.stats.num_buckets_closed_due_to_time_forward += 1;
                    series.current = None;
                } else if m.time_ms < b.start_ms {
                    self.stats.num_buckets_closed_due_to_time_backward += 1;
                    series.current = None;
                } else {
                    match b.try_push(doc, m, seq, idx, &limits) {
                        Ok(()) => target = Some(c),
                        Err(r) => {
                            count_refusal(&mut self.stats, r);
                            let done = series.open.swap_remove(c);
                            series.pending_hint = done.pending_bytes();
                            series.current = None;
                            self.open_count -= 1;
                            self.open_bytes -= done.size;
                            push_closed(&mut self.closed, &mut self.closed_bytes, done);
                        }
                    }
                }
            }
        }
        if target.is_none() {
            // A set-aside bucket whose window holds the measurement takes it back.
            let mut i = 0;
            while i < series.open.len() {
                let Some(b) = series.open.get_mut(i) else {
                    break;
                };
                if b.window_contains(m.time_ms, span) {
                    match b.try_push(doc, m, seq, idx, &limits) {
                        Ok(()) => {
                            target = Some(i);
                            self.stats.num_buckets_reopened += 1;
                            break;
                        }
                        Err(Refusal::Schema) => {}
                        Err(r) => {
                            // Full: it can never take anything again.
                            count_refusal(&mut self.stats, r);
                            let done = series.open.swap_remove(i);
                            self.open_count -= 1;
                            self.open_bytes -= done.size;
                            push_closed(&mut self.closed, &mut self.closed_bytes, done);
                            continue;
                        }
                    }
                }
                i += 1;
            }
        }
        let t = match target {
            Some(t) => t,
            None => {
                if is_new_series {
                    self.stats.num_buckets_opened_due_to_metadata += 1;
                }
                let start = round_down(m.time_ms, self.schema.rounding_ms);
                let mut b = BucketBuilder::new(
                    bucket_oid(start),
                    start,
                    // The bucket keeps the first measurement's meta as written; rows whose
                    // meta differs only in field order record theirs in a hidden column.
                    self.schema
                        .meta()
                        .and_then(|f| doc.get(f).ok().flatten())
                        .map(column::to_bson),
                    self.schema.time(),
                    self.schema.meta(),
                );
                // An empty bucket refuses nothing (no count, no size, no schema yet).
                // The series' other buckets tell how much room its rows will need: growing
                // the buffer by doubling would copy it and touch its memory twice.
                let hint = series.open.iter().map(BucketBuilder::pending_bytes).max();
                b.reserve_pending(hint.unwrap_or(series.pending_hint));
                let _ = b.try_push(doc, m, seq, idx, &limits);
                series.open.push(b);
                self.open_count += 1;
                series.open.len() - 1
            }
        };
        series.current = Some(t);
        self.open_bytes += m.size;
        if let Some(b) = series.open.get_mut(t) {
            if b.last_batch() != batch {
                if b.count == 1 {
                    self.stats.num_bucket_inserts += 1;
                } else {
                    self.stats.num_bucket_updates += 1;
                }
                self.stats.num_commits += 1;
                b.set_last_batch(batch);
            }
            // try_push let it in below the minimum count although it is over the size limit.
            if b.count > 1 && b.size > limits.max_size && !b.kept_open_for_large {
                b.kept_open_for_large = true;
                self.stats.num_buckets_kept_open_due_to_large_measurements += 1;
            }
            b.last_touch = tick;
        }
        series.inserts += 1;
        if let Some(b) = series.open.get_mut(t) {
            b.last_series_insert = series.inserts;
        }
        // Close set-aside buckets the series has left behind.
        let now = series.inserts;
        let mut i = 0;
        while i < series.open.len() {
            let idle = series
                .open
                .get(i)
                .is_some_and(|b| now - b.last_series_insert >= SET_ASIDE_IDLE_INSERTS);
            if idle && Some(i) != series.current {
                let done = series.open.swap_remove(i);
                if series.current == Some(series.open.len()) {
                    series.current = Some(i);
                }
                self.open_count -= 1;
                self.open_bytes -= done.size;
                push_closed(&mut self.closed, &mut self.closed_bytes, done);
            } else {
                i += 1;
            }
        }
        self.stats.num_measurements_committed += 1;
    }

    /// Closes idle buckets (least recently touched first) until memory is under `limit`.
    /// Returns how many were closed.
    pub fn close_idle(&mut self, limit: usize) -> usize {
        if self.memory() <= limit {
            return 0;
        }
        let mut all: Vec<(u64, SeriesKey, ObjectId)> = self
            .series
            .iter()
            .flat_map(|(k, s)| s.open.iter().map(move |b| (b.last_touch, k.clone(), b.id)))
            .collect();
        all.sort_by_key(|x| x.0);
        let mut closed = 0;
        for (_, key, id) in all {
            if self.memory() <= limit {
                break;
            }
            if let Some(b) = self.remove_open(&key, id) {
                self.stats.num_buckets_closed_due_to_memory_threshold += 1;
                push_closed(&mut self.closed, &mut self.closed_bytes, b);
                closed += 1;
            }
        }
        closed
    }

    /// Closes every open bucket holding a measurement with sequence number `<= upto`, so the
    /// log up to there can be reclaimed once they are flushed.
    pub fn close_older_than(&mut self, upto: u64) -> usize {
        let victims: Vec<(SeriesKey, ObjectId)> = self
            .series
            .iter()
            .flat_map(|(k, s)| {
                s.open
                    .iter()
                    .filter(|b| b.min_seq <= upto)
                    .map(move |b| (k.clone(), b.id))
            })
            .collect();
        let n = victims.len();
        for (key, id) in victims {
            if let Some(b) = self.remove_open(&key, id) {
                self.stats.num_buckets_closed_due_to_wal_limit += 1;
                push_closed(&mut self.closed, &mut self.closed_bytes, b);
            }
        }
        n
    }

    /// Closes the open buckets whose latest measurement is older than `cutoff_ms` (the TTL
    /// sweeper deletes them once they are in a segment). Returns how many were closed.
    pub fn close_expired(&mut self, cutoff_ms: i64) -> usize {
        let victims: Vec<(SeriesKey, ObjectId)> = self
            .series
            .iter()
            .flat_map(|(k, s)| {
                s.open
                    .iter()
                    .filter(|b| b.max_time_ms < cutoff_ms)
                    .map(move |b| (k.clone(), b.id))
            })
            .collect();
        let n = victims.len();
        for (key, id) in victims {
            if let Some(b) = self.remove_open(&key, id) {
                push_closed(&mut self.closed, &mut self.closed_bytes, b);
            }
        }
        n
    }

    /// Closes every open bucket (explicit flush, collection change).
    pub fn close_all(&mut self) {
        for (_, s) in self.series.drain() {
            for b in s.open {
                self.stats.num_buckets_closed_due_to_flush += 1;
                push_closed(&mut self.closed, &mut self.closed_bytes, b);
            }
        }
        self.open_count = 0;
        self.open_bytes = 0;
    }

    fn remove_open(&mut self, key: &SeriesKey, id: ObjectId) -> Option<BucketBuilder> {
        let series = self.series.get_mut(key)?;
        let pos = series.open.iter().position(|b| b.id == id)?;
        let b = series.open.swap_remove(pos);
        // swap_remove moved the last bucket into `pos`; keep `current` pointing at it.
        series.current = match series.current {
            Some(c) if c == pos => None,
            Some(c) if c == series.open.len() => Some(pos),
            other => other,
        };
        if series.open.is_empty() {
            self.series.remove(key);
        }
        self.open_count -= 1;
        self.open_bytes -= b.size;
        Some(b)
    }

    /// Takes the closed buckets for flushing.
    pub fn take_closed(&mut self) -> Vec<Arc<ClosedBucket>> {
        self.closed_bytes = 0;
        std::mem::take(&mut self.closed)
    }

    /// Closed, not yet flushed buckets.
    pub fn closed(&self) -> &[Arc<ClosedBucket>] {
        &self.closed
    }

    /// Copies of the open buckets that `keep` selects (it sees the builder, so callers can
    /// prune on start, latest time and meta before paying for a copy), in `_id` order: the
    /// series map's order changes each time the database opens, and reads that follow arrival
    /// order (a `$group`'s groups, a `find` without a sort) would change with it.
    pub fn snapshot_open_where(&self, keep: impl Fn(&BucketBuilder) -> bool) -> Vec<BucketData> {
        self.open_where(keep)
            .into_iter()
            .map(BucketBuilder::snapshot)
            .collect()
    }

    /// The open buckets that `keep` selects, copied for a read with their values typed (see
    /// [`BucketBuilder::copy_for_read`]), in `_id` order as [`CollCatalog::snapshot_open_where`]
    /// gives them.
    pub fn copy_open_where(&self, keep: impl Fn(&BucketBuilder) -> bool) -> Vec<OpenCopy> {
        self.open_where(keep)
            .into_iter()
            .map(BucketBuilder::copy_for_read)
            .collect()
    }

    fn open_where(&self, keep: impl Fn(&BucketBuilder) -> bool) -> Vec<&BucketBuilder> {
        let mut open: Vec<&BucketBuilder> = (self.series.values())
            .flat_map(|s| s.open.iter())
            .filter(|b| keep(b))
            .collect();
        open.sort_unstable_by_key(|b| b.id.bytes());
        open
    }

    /// Measurements in open buckets.
    pub fn open_measurements(&self) -> u64 {
        self.series
            .values()
            .flat_map(|s| s.open.iter())
            .map(|b| u64::from(b.count))
            .sum()
    }

    /// BSON size, as inserted, of the measurements in open buckets.
    pub fn open_bson_bytes(&self) -> u64 {
        self.series
            .values()
            .flat_map(|s| s.open.iter())
            .map(|b| b.bson_bytes)
            .sum()
    }

    /// Copies of every open bucket, in `_id` order (see [`CollCatalog::snapshot_open_where`]).
    pub fn snapshot_open(&self) -> Vec<BucketData> {
        self.snapshot_open_where(|_| true)
    }
}

fn count_refusal(stats: &mut CatalogStats, r: Refusal) {
    match r {
        Refusal::Count => stats.num_buckets_closed_due_to_count += 1,
        Refusal::Size => stats.num_buckets_closed_due_to_size += 1,
        Refusal::Schema => stats.num_buckets_closed_due_to_schema_change += 1,
    }
}

fn push_closed(closed: &mut Vec<Arc<ClosedBucket>>, bytes: &mut usize, b: BucketBuilder) {
    *bytes += b.size;
    closed.push(Arc::new(ClosedBucket::new(b)));
}

#[cfg(test)]
mod tests;
