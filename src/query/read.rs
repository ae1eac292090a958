//! Running reads: which buckets can hold matches (the `_id` index range, then each bucket's
//! [`Verdict`]), and a cursor that unpacks one bucket at a time.

use super::filter::Filter;
pub use super::plan::{BucketStats, Plan, Verdict};
use super::unpack::row_document;
use crate::bucket::BucketData;
use crate::db::{CollState, IdKey};
use crate::error::{Error, Result};
use crate::segment::Segment;
use bson::Document;
use std::collections::VecDeque;
use std::sync::Arc;

/// Where a bucket to scan lives.
#[derive(Clone)]
pub enum Source {
    /// In memory (open, closed or being flushed).
    Mem(Arc<BucketData>),
    /// In a segment, by position.
    Seg(Arc<Segment>, u32),
}

/// A bucket chosen by [`select`] and what its statistics proved.
#[derive(Clone)]
pub struct Scan {
    /// Where the bucket lives.
    pub src: Source,
    /// [`Verdict::All`] or [`Verdict::Some`] (pruned buckets are not returned).
    pub verdict: Verdict,
}

/// How a read was carried out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Explain {
    /// Buckets in the collection (segments and memory).
    pub buckets_total: u64,
    /// Buckets skipped by the `_id` index range (time prefix).
    pub buckets_pruned_by_id: u64,
    /// Buckets skipped by their `control` statistics or meta value.
    pub buckets_pruned_by_stats: u64,
    /// Buckets not pruned: `buckets_taken_whole + buckets_unpacked`.
    pub buckets_examined: u64,
    /// Buckets whose statistics prove that every row matches: rows are not tested.
    pub buckets_taken_whole: u64,
    /// Buckets unpacked and tested row by row.
    pub buckets_unpacked: u64,
    /// Aggregation only: buckets answered from their statistics without decoding any column.
    pub buckets_from_stats: u64,
    /// Inclusive time bounds derived from the filter (milliseconds), if any.
    pub time_bounds: Option<(i64, i64)>,
}

/// Picks the buckets of `c` that may match, reading the state under its lock, each with its
/// verdict. Open buckets are copied, so the result is a consistent snapshot that later writes
/// do not change.
pub(crate) fn select(c: &CollState, plan: &Plan) -> (Vec<Scan>, Explain) {
    let mut ex = Explain {
        time_bounds: (plan.time_lo != i64::MIN || plan.time_hi != i64::MAX)
            .then_some((plan.time_lo, plan.time_hi)),
        ..Explain::default()
    };
    let mut out = Vec::new();
    let mut keep = |ex: &mut Explain, src: Source, verdict: Verdict| match verdict {
        Verdict::None => ex.buckets_pruned_by_stats += 1,
        Verdict::All => {
            ex.buckets_taken_whole += 1;
            out.push(Scan { src, verdict });
        }
        Verdict::Some => {
            ex.buckets_unpacked += 1;
            out.push(Scan { src, verdict });
        }
    };
    let span = i64::from(c.entry.options.bucket_max_span_seconds()) * 1000;
    let total_seg = c.index.len() as u64;
    // A bucket holds times in [start, start + span): starts before `lo - span` cannot match.
    let lo_key: IdKey = (plan.time_lo.saturating_sub(span), [0; 12]);
    let hi_key: IdKey = (plan.time_hi, [0xFF; 12]);
    let mut in_range = 0u64;
    if lo_key <= hi_key {
        for (_, loc) in c.index.range(lo_key..=hi_key) {
            in_range += 1;
            let Some(seg) = c.segments.get(&loc.segment) else {
                continue;
            };
            let Some(s) = seg.buckets().get(loc.index as usize) else {
                continue;
            };
            let v = plan.verdict(&BucketStats {
                meta: s.meta.as_ref(),
                min: &s.min,
                max: &s.max,
                count: s.count,
            });
            keep(&mut ex, Source::Seg(seg.clone(), loc.index), v);
        }
    }
    ex.buckets_pruned_by_id = total_seg - in_range;
    let frozen: Vec<Arc<BucketData>> = c
        .flushing
        .iter()
        .cloned()
        .chain(c.catalog.closed().iter().cloned())
        .collect();
    ex.buckets_total = total_seg + frozen.len() as u64 + c.catalog.open_buckets() as u64;
    for b in frozen {
        let v = plan.verdict(&BucketStats {
            meta: b.meta.as_ref(),
            min: &b.min,
            max: &b.max,
            count: b.count,
        });
        keep(&mut ex, Source::Mem(b), v);
    }
    // Open buckets are pruned before they are copied: a copy is the expensive part.
    let open = c.catalog.snapshot_open_where(|b| {
        plan.open_bucket_may_match(b.meta.as_ref(), b.start_ms, b.max_time_ms, b.meta_varies())
    });
    ex.buckets_pruned_by_stats += c.catalog.open_buckets() as u64 - open.len() as u64;
    for b in open {
        // The copy's statistics are complete: judge it like any closed bucket.
        let v = plan.verdict(&BucketStats {
            meta: b.meta.as_ref(),
            min: &b.min,
            max: &b.max,
            count: b.count,
        });
        keep(&mut ex, Source::Mem(Arc::new(b)), v);
    }
    ex.buckets_examined = ex.buckets_taken_whole + ex.buckets_unpacked;
    (out, ex)
}

/// Loads a bucket's data from wherever it lives.
pub fn load(src: &Source) -> Result<Arc<BucketData>> {
    match src {
        Source::Mem(b) => Ok(b.clone()),
        Source::Seg(seg, i) => Ok(Arc::new(seg.read_bucket(*i as usize)?)),
    }
}

/// Unpacks every row of `b` that matches `filter`.
pub fn matching_rows(
    b: &BucketData,
    filter: &Filter,
    meta_field: Option<&str>,
    out: &mut VecDeque<Document>,
) -> Result<()> {
    for row in 0..b.count as usize {
        let d = row_document(b, row, meta_field).ok_or_else(|| {
            Error::corruption(
                "<bucket>",
                0,
                format!("bucket {} row {row} does not match its column layout", b.id),
            )
        })?;
        if filter.matches(&d) {
            out.push_back(d);
        }
    }
    Ok(())
}

/// Streams matching measurements, unpacking one bucket at a time.
pub struct Cursor {
    sources: std::vec::IntoIter<Scan>,
    filter: Filter,
    meta_field: Option<String>,
    ready: VecDeque<Document>,
    failed: bool,
}

impl Cursor {
    pub(crate) fn new(sources: Vec<Scan>, plan: Plan) -> Cursor {
        Cursor {
            sources: sources.into_iter(),
            meta_field: plan.meta_field.clone(),
            filter: plan.filter,
            ready: VecDeque::new(),
            failed: false,
        }
    }

    pub(crate) fn from_docs(docs: Vec<Document>) -> Cursor {
        Cursor {
            sources: Vec::new().into_iter(),
            filter: Filter::True,
            meta_field: None,
            ready: docs.into(),
            failed: false,
        }
    }
}

impl Iterator for Cursor {
    type Item = Result<Document>;

    fn next(&mut self) -> Option<Result<Document>> {
        loop {
            if let Some(d) = self.ready.pop_front() {
                return Some(Ok(d));
            }
            if self.failed {
                return None;
            }
            let scan = self.sources.next()?;
            let filter = match scan.verdict {
                Verdict::All => &Filter::True,
                _ => &self.filter,
            };
            let r = load(&scan.src).and_then(|b| {
                matching_rows(&b, filter, self.meta_field.as_deref(), &mut self.ready)
            });
            if let Err(e) = r {
                self.failed = true;
                return Some(Err(e));
            }
        }
    }
}
