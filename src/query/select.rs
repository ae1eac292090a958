//! Running reads: which buckets can hold matches (the `_id` index range, then each bucket's
//! [`Verdict`]), counting without unpacking what the statistics decide.

use super::columns::Col;
use super::source;
pub use super::cursor::Cursor;
use super::keyset::KeySet;
use super::parallel::{self, on_threads};
use super::plan::SegmentBounds;
pub use super::plan::{BucketStats, Plan, Verdict};
use crate::query::row_filter::RowFilter;
use crate::query::source::Place;
pub use crate::query::source::{MemBucket, Scan, Scans, Source};
use crate::bucket::{BucketData, META_COLUMN};
use crate::collstate::CollState;
use crate::error::Result;
use crate::index::id::BucketLoc;
use crate::index::meta::Lookup;
use crate::segment::{MetaProjection, Segment};
use bson::{Bson, Document};
use std::cell::Cell;
use std::sync::Arc;

/// How a read was carried out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Explain {
    /// Buckets in the collection (segments and memory).
    pub buckets_total: u64,
    /// Buckets skipped by the `_id` index range: their start (the `_id`'s time prefix) lies
    /// outside the filter's time bounds with the lower bound widened by the bucket span. Buckets
    /// still in memory are counted the same way.
    pub buckets_pruned_by_id: u64,
    /// Buckets in the `_id` range skipped because their `control.min/max`, the fields their
    /// rows have, or their meta value prove that no row matches.
    pub buckets_pruned_by_stats: u64,
    /// Buckets not pruned: `buckets_taken_whole + buckets_unpacked`.
    pub buckets_examined: u64,
    /// Buckets whose statistics prove that every row matches: rows are not tested, and
    /// counting reads nothing but `control.count`.
    pub buckets_taken_whole: u64,
    /// Buckets unpacked and tested row by row.
    pub buckets_unpacked: u64,
    /// Aggregation only: buckets answered from their statistics without decoding any column.
    pub buckets_from_stats: u64,
    /// Inclusive time bounds derived from the filter (milliseconds), if any.
    pub time_bounds: Option<(i64, i64)>,
    /// The meta index that chose the flushed buckets to consider, if one applied (an equality
    /// or `$in` on its leading meta path); otherwise they came from the meta lookup (see
    /// `meta_lookup`) or the `_id` index.
    pub index_used: Option<String>,
    /// The path below the meta field ("" for the meta field itself) whose values chose the
    /// flushed buckets to consider when no index applied: a path that queries keep asking for
    /// an equality or `$in` on (the second time) is mapped like an index's, in memory only.
    pub meta_lookup: Option<String>,
    /// Flushed buckets the meta index or lookup yielded (before the `_id` range and
    /// statistics).
    pub buckets_from_index: u64,
    /// Flushed buckets the meta index or lookup left out: their meta value cannot match.
    pub buckets_pruned_by_index: u64,
    /// Aggregation only: the rewrites applied to the pipeline before it ran, one line each
    /// (a `$match` pushed down, `$sort` keys a `$group` makes redundant, ...).
    pub rewrites: Vec<String>,
    /// Aggregation only: the operators that give the output, first to last, one line each:
    /// how the buckets are read and the rows selected, and how each stage after that runs.
    /// Where a `$group` runs over documents, the line says why the columnar operator did not
    /// take it.
    pub operators: Vec<String>,
}

/// Bucket start (`control.min` of the time field, else the `_id`'s time prefix), milliseconds.
fn start_of(min: &Document, time_field: &str, id: &bson::oid::ObjectId) -> i64 {
    match min.get(time_field) {
        Some(Bson::DateTime(t)) => t.timestamp_millis(),
        _ => id.timestamp().timestamp_millis(),
    }
}

/// Picks the buckets of `c` that may match, reading the state under its lock, each with its
/// verdict. Every bucket, flushed or in memory, is first checked against the `_id` range (its
/// start against the time bounds widened by the span), then judged by its statistics. Open
/// buckets are copied, so the result is a consistent snapshot that later writes do not change.
pub(crate) fn select(c: &CollState, plan: &Plan) -> (Scans, Explain) {
    select_in(c, plan, Order::Id, 1)
}

/// The order in which [`select_in`] returns flushed buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// `_id` order: bucket start, then `_id`.
    Id,
    /// File order, segment by segment, when neither a time bound nor a meta index narrows the
    /// buckets (else `_id` order). For callers that do not depend on the order: summaries and
    /// pages are then read front to back, where `_id` order jumps between segments and costs
    /// a cache miss per bucket.
    File,
}

/// The live buckets of every segment in file order, or `None` when their number disagrees
/// with the `_id` index (which then decides what is live).
fn file_walk(c: &CollState) -> Option<Vec<BucketLoc>> {
    let live: usize = c
        .segments
        .iter()
        .map(|(id, seg)| {
            let gone = c.entry.expired.get(id).map_or(0, |s| s.len());
            seg.buckets().len().saturating_sub(gone)
        })
        .sum();
    if live != c.index.len() {
        return None;
    }
    let mut out = Vec::with_capacity(live);
    for (&segment, seg) in &c.segments {
        let n = u32::try_from(seg.buckets().len()).ok()?;
        // The segment's expired buckets looked up once, not once per bucket.
        let expired = c.entry.expired.get(&segment);
        out.extend(
            (0..n)
                .filter(|i| expired.is_none_or(|e| !e.contains(i)))
                .map(|index| BucketLoc { segment, index }),
        );
    }
    (out.len() == live).then_some(out)
}

/// Hits and misses of the verdicts shared across segments by projected meta value in
/// [`judge_flushed`]. They pay when values repeat across segments (a long-lived series, such as
/// one host's metrics, has buckets in every segment), but one-off meta values never repeat,
/// and where most values are one-offs, probing and growing a table of them took half the
/// planning: once they have mostly missed, they are left alone.
#[derive(Default)]
struct Memo {
    hits: u64,
    misses: u64,
}

/// Lookups before [`Memo`] judges its hit rate.
const MEMO_TRIAL: u64 = 4096;

impl Memo {
    fn worth_it(&self) -> bool {
        self.misses < MEMO_TRIAL || self.hits >= self.misses / 4
    }

    fn count(&mut self, hit: bool) {
        match hit {
            true => self.hits += 1,
            false => self.misses += 1,
        }
    }
}

/// [`select`] returning flushed buckets in `order`.
pub(crate) fn select_in(
    c: &CollState,
    plan: &Plan,
    order: Order,
    threads: usize,
) -> (Scans, Explain) {
    let mut ex = Explain {
        time_bounds: (plan.time_lo != i64::MIN || plan.time_hi != i64::MAX)
            .then_some((plan.time_lo, plan.time_hi)),
        ..Explain::default()
    };
    let span = c.schema().span_ms;
    let range = plan.start_range(span);
    let in_range = |start: i64| range.is_some_and(|(lo, hi)| (lo..=hi).contains(&start));
    let total_seg = c.index.len() as u64;
    let mut seg_in_range = 0u64;
    let by_index = range.and_then(|(lo, hi)| {
        crate::index::meta::candidates(
            &c.meta_cache,
            &c.entry.indexes,
            &c.entry.options,
            &c.segments,
            &c.schema()
                .meta()
                .map_or_else(Vec::new, |m| plan.meta_wants(m)),
            |limit| {
                c.index
                    .range((lo, [0; 12])..=(hi, [0xFF; 12]))
                    .take(limit)
                    .count()
            },
        )
        .map(|(name, mut found)| {
            // Buckets the TTL sweeper deleted stay in their files until the whole file goes;
            // the `_id` index leaves them out, and so must the meta index's answer.
            found.retain(|(_, loc)| !c.entry.is_expired(loc.segment, loc.index));
            (name, found)
        })
    });
    let walked = match (order, &by_index, range) {
        (Order::File, None, Some((i64::MIN, i64::MAX))) => file_walk(c),
        _ => None,
    };
    // A walk of every file lists every bucket: the list is as long.
    let mut out = Scans {
        segments: Vec::new(),
        list: Vec::with_capacity(walked.as_ref().map_or(0, Vec::len)),
    };
    let mut keep = |ex: &mut Explain, place: Place, verdict: Verdict| match verdict {
        Verdict::None => ex.buckets_pruned_by_stats += 1,
        Verdict::All => {
            ex.buckets_taken_whole += 1;
            out.list.push((place, verdict));
        }
        Verdict::Some => {
            ex.buckets_unpacked += 1;
            out.list.push((place, verdict));
        }
    };
    // Each segment once, numbered as it is first kept.
    let mut segments: Vec<Arc<Segment>> = Vec::new();
    let mut numbered: foldhash::HashMap<u64, u32> = Default::default();
    // The segment numbered last, with its number and bucket count.
    let mut last: Option<(u64, u32, usize)> = None;
    let locs: Box<dyn Iterator<Item = &BucketLoc>> = match (&by_index, range) {
        _ if walked.is_some() => Box::new(walked.iter().flatten()),
        (Some((how, found)), _) => {
            match how {
                Lookup::Index(name) => ex.index_used = Some(name.clone()),
                Lookup::Auto(path) => ex.meta_lookup = Some(path.clone()),
            }
            ex.buckets_from_index = found.len() as u64;
            ex.buckets_pruned_by_index = total_seg - found.len() as u64;
            Box::new(
                found
                    .iter()
                    .filter(|(k, _)| in_range(k.0))
                    .map(|(_, loc)| loc),
            )
        }
        (None, Some((lo, hi))) => Box::new(
            c.index
                .range((lo, [0; 12])..=(hi, [0xFF; 12]))
                .map(|(_, loc)| loc),
        ),
        (None, None) => Box::new(std::iter::empty()),
    };
    // A segment's number and bucket count, looked up once per run of its buckets.
    let mut number = |seg: u64| match last {
        Some((id, number, len)) if id == seg => Some((number, len)),
        _ => {
            let s = c.segments.get(&seg)?;
            let number = *numbered.entry(seg).or_insert_with(|| {
                segments.push(s.clone());
                segments.len() as u32 - 1
            });
            last = Some((seg, number, s.buckets().len()));
            Some((number, s.buckets().len()))
        }
    };
    if plan.takes_everything() {
        // Nothing to judge, not even the buckets' summaries to read: in `_id` order they lie
        // scattered over memory, and touching each was a cache miss per bucket.
        for loc in locs {
            seg_in_range += 1;
            match number(loc.segment) {
                Some((n, len)) if (loc.index as usize) < len => {
                    keep(&mut ex, Place::Seg(n, loc.index), Verdict::All)
                }
                _ => {}
            }
        }
    } else {
        // Judged in stretches, one per thread, kept in order: the segments numbered as each
        // is first kept.
        let locs: Vec<&BucketLoc> = locs.collect();
        seg_in_range += locs.len() as u64;
        let threads = parallel::workers(locs.len(), JUDGED_PER_WORKER, threads);
        let per = locs.len().div_ceil(threads).max(1);
        for (judged, pruned) in on_threads(locs.chunks(per), |part| judge_flushed(c, plan, part)) {
            ex.buckets_pruned_by_stats += pruned;
            for (seg, index, verdict) in judged {
                if let Some((n, _)) = number(seg) {
                    keep(&mut ex, Place::Seg(n, index), verdict);
                }
            }
        }
    }
    ex.buckets_pruned_by_id = total_seg - ex.buckets_pruned_by_index - seg_in_range;
    let time_field = plan.time_field();
    let frozen = c.flushing.iter().chain(c.catalog.closed().iter());
    for b in frozen {
        let b = b.data();
        ex.buckets_total += 1;
        if !in_range(start_of(&b.min, time_field, &b.id)) {
            ex.buckets_pruned_by_id += 1;
            continue;
        }
        let m = MemBucket::closed(b.clone());
        let dense = |f: &str| m.dense(f);
        let stats = BucketStats::new(b.meta.as_ref(), &b.min, &b.max, b.count);
        let v = plan.verdict(&stats.with_dense(&dense));
        keep(&mut ex, Place::Mem(Arc::new(m)), v);
    }
    // Open buckets are pruned before they are copied: a copy is the expensive part.
    let (by_id, by_stats) = (Cell::new(0u64), Cell::new(0u64));
    let open = c.catalog.copy_open_where(|b| {
        if !in_range(b.start_ms) {
            by_id.set(by_id.get() + 1);
            return false;
        }
        let ok =
            plan.open_bucket_may_match(b.meta.as_ref(), b.start_ms, b.max_time_ms, b.meta_varies());
        if !ok {
            by_stats.set(by_stats.get() + 1);
        }
        ok
    });
    ex.buckets_pruned_by_id += by_id.get();
    ex.buckets_pruned_by_stats += by_stats.get();
    for b in open {
        // The copy's statistics are complete: judge it like any closed bucket.
        let b = MemBucket::open(b);
        let dense = |f: &str| b.dense(f);
        let h = b.head();
        let stats = BucketStats::new(h.meta.as_ref(), &h.min, &h.max, h.count);
        let v = plan.verdict(&stats.with_dense(&dense));
        keep(&mut ex, Place::Mem(Arc::new(b)), v);
    }
    ex.buckets_total += total_seg + c.catalog.open_buckets() as u64;
    ex.buckets_examined = ex.buckets_taken_whole + ex.buckets_unpacked;
    out.segments = segments;
    (out, ex)
}

/// Flushed buckets per worker thread of [`select_in`], at least: a bucket judged from its
/// statistics costs tens of nanoseconds, and starting a thread tens of microseconds.
const JUDGED_PER_WORKER: usize = 4096;

/// The flushed buckets among `locs` that may match, in order, as (segment, index, verdict),
/// and how many were pruned.
fn judge_flushed(
    c: &CollState,
    plan: &Plan,
    locs: &[&BucketLoc],
) -> (Vec<(u64, u32, Verdict)>, u64) {
    // The meta conjuncts' verdict per (segment, values of the fields they read, meta
    // varies): a series has many buckets, and many series share the values of the fields a
    // filter reads; judging each bucket's meta value again was most of the planning.
    // Indexed by segment, then by projected meta value and whether the meta varies.
    let mut by_meta: foldhash::HashMap<u64, (Arc<MetaProjection>, Vec<Option<Verdict>>)> =
        Default::default();
    // The same verdicts by projected value, across segments: a series has buckets in
    // many segments, and a segment of long-lived series holds one bucket per series.
    // Keys in one arena: where series are short-lived, most of tens of thousands of values are
    // one-offs.
    let mut values = KeySet::default();
    let mut by_value: Vec<[Option<Verdict>; 2]> = Vec::new();
    let mut memo = Memo::default();
    let meta_fields = plan.meta_fields();
    // The bounds of the fields the other conjuncts read, gathered per segment (see
    // `FieldBounds`): in the same order as `stat_fields`.
    let mut bounds = SegmentBounds::new(plan.stat_fields());
    // Consecutive buckets mostly share a segment: look it up once per run of them.
    let mut last: Option<(u64, &Arc<Segment>)> = None;
    let mut out = Vec::new();
    let mut pruned = 0;
    for &loc in locs {
        let seg = match last {
            Some((id, seg)) if id == loc.segment => seg,
            _ => {
                let Some(seg) = c.segments.get(&loc.segment) else {
                    continue;
                };
                last = Some((loc.segment, seg));
                seg
            }
        };
        let Some(s) = seg.buckets().get(loc.index as usize) else {
            continue;
        };
        let dense = |f: &str| seg.column_in_every_row(loc.index as usize, f);
        let gathered = bounds.of(seg, loc.index as usize);
        let stats = BucketStats::planned(seg, loc.index as usize, s, &dense, gathered);
        let verdict = plan.verdict_with_meta(&stats, || {
            let (proj, seen) = by_meta.entry(loc.segment).or_insert_with(|| {
                let proj = seg.meta_projection(meta_fields);
                // Growing the map value by value was a fifth of the planning of a query
                // over a thousand long-lived series.
                values.reserve(proj.distinct() as usize, 0);
                by_value.reserve(proj.distinct() as usize);
                (proj, Vec::new())
            });
            let id = proj.id(s.meta_ref());
            if id == u32::MAX {
                return plan.meta_verdict(&stats);
            }
            let k = id as usize * 2 + usize::from(s.meta_varies());
            if let Some(Some(v)) = seen.get(k) {
                return *v;
            }
            let varies = usize::from(s.meta_varies());
            let key = proj.key(id).filter(|_| memo.worth_it());
            let found = key.map(|b| values.find(b));
            let known = found.and_then(|(_, k)| *by_value.get(k? as usize)?.get(varies)?);
            if found.is_some() {
                memo.count(known.is_some());
            }
            let v = known.unwrap_or_else(|| match proj.value(id) {
                Some(cut) => plan.meta_verdict(&stats.with_meta(cut)),
                None => plan.meta_verdict(&stats),
            });
            if let (None, Some(b), Some((h, k))) = (known, key, found) {
                let at = k.unwrap_or_else(|| values.insert_hashed(h, b)) as usize;
                if by_value.len() <= at {
                    by_value.resize(at + 1, [None; 2]);
                }
                if let Some(slot) = by_value.get_mut(at).and_then(|s| s.get_mut(varies)) {
                    *slot = Some(v);
                }
            }
            if seen.len() <= k {
                seen.resize(k + 1, None);
            }
            if let Some(slot) = seen.get_mut(k) {
                *slot = Some(v);
            }
            v
        });
        match verdict {
            Verdict::None => pruned += 1,
            v => out.push((loc.segment, loc.index, v)),
        }
    }
    (out, pruned)
}

/// Loads a bucket's data from wherever it lives.
pub fn load(src: &Source) -> Result<Arc<BucketData>> {
    match src {
        Source::Mem(b) => Ok(b.to_data()),
        Source::Seg(seg, i) => Ok(Arc::new(seg.read_bucket(*i as usize)?)),
    }
}

/// Number of measurements in the bucket at `src`, from its statistics.
pub fn count_of(src: &Source) -> u64 {
    match src {
        Source::Mem(b) => u64::from(b.head().count),
        Source::Seg(seg, i) => seg
            .buckets()
            .get(*i as usize)
            .map_or(0, |s| u64::from(s.count)),
    }
}

/// Counts the rows of `scans` that match `plan`: buckets taken whole count by their statistics
/// without being read; the others decode only the columns the filter reads.
pub(crate) fn count(scans: &Scans, plan: &Plan, threads: usize) -> Result<u64> {
    // Conjuncts on top-level fields are tested on typed columns, as aggregation's `$match`
    // does; the others row by row on the columns they read.
    let rf = RowFilter::new(&plan.filter, plan.meta_field());
    let mut n = 0;
    let mut tested = Vec::new();
    for (i, s) in scans.iter().enumerate() {
        match s.verdict {
            Verdict::All => n += count_of(&s.src),
            _ => tested.push(i),
        }
    }
    let workers = parallel::workers(tested.len(), TESTED_PER_WORKER, threads);
    let parts = parallel::split_by_page(scans, &tested, parallel::parts_for(workers));
    let counts = parallel::run_claimed(
        &parts,
        workers,
        || 0,
        |n, _, part| -> Result<()> {
            *n += count_tested(scans, part, plan, &rf)?;
            Ok(())
        },
    )?;
    Ok(n + counts.iter().sum::<u64>())
}

/// Fewest buckets to test per thread when counting: each decodes at least one column.
const TESTED_PER_WORKER: usize = 256;

/// Matching rows of the buckets `scans[i]` for `i` in `which`.
fn count_tested(scans: &Scans, which: &[usize], plan: &Plan, rf: &RowFilter) -> Result<u64> {
    let mut n = 0;
    for s in which.iter().filter_map(|&i| scans.get(i)) {
        let st = source::stats(&s.src)?;
        n += count_columns(rf, &s.src, &st, plan.time_field())?;
    }
    Ok(n)
}

/// Matching rows of one bucket, from the columns the filter's unsettled conjuncts read.
fn count_columns(rf: &RowFilter, src: &Source, st: &BucketStats<'_>, time: &str) -> Result<u64> {
    let settled = rf.settled(st, time);
    let read: Vec<usize> = (0..rf.columns.len())
        .filter(|&c| rf.reads_column(c, settled))
        .collect();
    let mut names: Vec<&str> = read
        .iter()
        .filter_map(|&c| rf.columns.get(c).map(String::as_str))
        .collect();
    // The rows' own meta values, where they have them and the filter reads them, decoded
    // with the columns.
    let own = rf.reads_meta() && st.meta_varies();
    if own {
        names.push(META_COLUMN);
    }
    let mut loaded = source::load(src, &names)?;
    let own_meta = if own { loaded.pop() } else { None };
    let mut cols: Vec<Col> = (0..rf.columns.len()).map(|_| Col::Missing).collect();
    for (c, col) in read.into_iter().zip(loaded) {
        if let Some(x) = cols.get_mut(c) {
            *x = col;
        }
    }
    let refs: Vec<&Col> = cols.iter().collect();
    let n = rf.count(st.meta, own_meta.as_ref(), &refs, st.count as usize, settled) as u64;
    drop(refs);
    cols.into_iter().for_each(Col::recycle);
    Ok(n)
}
