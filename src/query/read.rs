//! Planning and running reads: which buckets can hold matches (pruning by the `_id` index,
//! `control` time bounds and the meta value), and a cursor that unpacks one bucket at a time.

use super::filter::{Filter, Pred};
use super::unpack::row_document;
use crate::bucket::BucketData;
use crate::catalog::META_COLUMN;
use crate::db::{CollState, IdKey};
use crate::error::{Error, Result};
use crate::segment::Segment;
use bson::{Bson, Document};
use std::collections::VecDeque;
use std::sync::Arc;

/// What a filter lets us decide per bucket.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The whole filter, applied to every unpacked row.
    pub filter: Filter,
    /// Inclusive lower bound on the time field, milliseconds.
    pub time_lo: i64,
    /// Inclusive upper bound on the time field, milliseconds.
    pub time_hi: i64,
    /// Conjuncts that read only the meta field: decided once per bucket.
    pub meta_conjuncts: Vec<Filter>,
    time_field: String,
    meta_field: Option<String>,
}

fn on_meta(f: &Filter, meta: &str) -> bool {
    let mut paths = Vec::new();
    f.paths(&mut paths);
    !paths.is_empty()
        && paths
            .iter()
            .all(|p| p == meta || p.strip_prefix(meta).is_some_and(|r| r.starts_with('.')))
}

fn narrow(pred: &Pred, lo: &mut i64, hi: &mut i64) {
    let ms = |v: &Bson| match v {
        Bson::DateTime(t) => Some(t.timestamp_millis()),
        _ => None,
    };
    match pred {
        Pred::Eq(v) => {
            if let Some(t) = ms(v) {
                *lo = (*lo).max(t);
                *hi = (*hi).min(t);
            }
        }
        Pred::Gt(v) => {
            if let Some(t) = ms(v) {
                *lo = (*lo).max(t.saturating_add(1));
            }
        }
        Pred::Gte(v) => {
            if let Some(t) = ms(v) {
                *lo = (*lo).max(t);
            }
        }
        Pred::Lt(v) => {
            if let Some(t) = ms(v) {
                *hi = (*hi).min(t.saturating_sub(1));
            }
        }
        Pred::Lte(v) => {
            if let Some(t) = ms(v) {
                *hi = (*hi).min(t);
            }
        }
        Pred::In(vs) => {
            let ts: Option<Vec<i64>> = vs.iter().map(ms).collect();
            if let Some(ts) = ts {
                if let (Some(a), Some(b)) = (ts.iter().min(), ts.iter().max()) {
                    *lo = (*lo).max(*a);
                    *hi = (*hi).min(*b);
                }
            }
        }
        Pred::All(ps) => ps.iter().for_each(|p| narrow(p, lo, hi)),
        _ => {}
    }
}

impl Plan {
    /// Analyses `filter` for a collection with these fields.
    pub fn new(filter: Filter, time_field: &str, meta_field: Option<&str>) -> Plan {
        let mut lo = i64::MIN;
        let mut hi = i64::MAX;
        let mut meta_conjuncts = Vec::new();
        for c in filter.conjuncts() {
            if let Filter::Field { path, pred } = c {
                if path == time_field {
                    narrow(pred, &mut lo, &mut hi);
                }
            }
            if let Some(m) = meta_field {
                if on_meta(c, m) {
                    meta_conjuncts.push(c.clone());
                }
            }
        }
        Plan {
            filter,
            time_lo: lo,
            time_hi: hi,
            meta_conjuncts,
            time_field: time_field.to_string(),
            meta_field: meta_field.map(str::to_string),
        }
    }

    /// [`Plan::bucket_may_match`] for an open bucket, from its start, latest time and meta.
    pub fn open_bucket_may_match(
        &self,
        meta: Option<&Bson>,
        start_ms: i64,
        max_time_ms: i64,
        meta_varies: bool,
    ) -> bool {
        if max_time_ms < self.time_lo || start_ms > self.time_hi || self.time_lo > self.time_hi {
            return false;
        }
        if self.meta_conjuncts.is_empty() || meta_varies {
            return true;
        }
        self.meta_matches(meta)
    }

    fn meta_matches(&self, meta: Option<&Bson>) -> bool {
        let mut d = Document::new();
        if let (Some(f), Some(m)) = (self.meta_field.as_deref(), meta) {
            d.insert(f, m.clone());
        }
        self.meta_conjuncts.iter().all(|c| c.matches(&d))
    }

    /// False when a bucket with these statistics cannot hold a matching row.
    pub fn bucket_may_match(&self, meta: Option<&Bson>, min: &Document, max: &Document) -> bool {
        let t = |d: &Document| match d.get(&self.time_field) {
            Some(Bson::DateTime(t)) => Some(t.timestamp_millis()),
            _ => None,
        };
        if let (Some(start), Some(end)) = (t(min), t(max)) {
            if end < self.time_lo || start > self.time_hi {
                return false;
            }
        }
        if self.time_lo > self.time_hi {
            return false;
        }
        if self.meta_conjuncts.is_empty() || max.contains_key(META_COLUMN) {
            return true;
        }
        self.meta_matches(meta)
    }
}

/// Where a bucket to scan lives.
#[derive(Clone)]
pub enum Source {
    /// In memory (open, closed or being flushed).
    Mem(Arc<BucketData>),
    /// In a segment, by position.
    Seg(Arc<Segment>, u32),
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
    /// Buckets unpacked and tested row by row.
    pub buckets_examined: u64,
    /// Inclusive time bounds derived from the filter (milliseconds), if any.
    pub time_bounds: Option<(i64, i64)>,
}

/// Picks the buckets of `c` that may match, reading the state under its lock. Open buckets are
/// copied, so the result is a consistent snapshot that later writes do not change.
pub(crate) fn select(c: &CollState, plan: &Plan) -> (Vec<Source>, Explain) {
    let mut ex = Explain {
        time_bounds: (plan.time_lo != i64::MIN || plan.time_hi != i64::MAX)
            .then_some((plan.time_lo, plan.time_hi)),
        ..Explain::default()
    };
    let mut out = Vec::new();
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
            if plan.bucket_may_match(s.meta.as_ref(), &s.min, &s.max) {
                out.push(Source::Seg(seg.clone(), loc.index));
            } else {
                ex.buckets_pruned_by_stats += 1;
            }
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
        if plan.bucket_may_match(b.meta.as_ref(), &b.min, &b.max) {
            out.push(Source::Mem(b));
        } else {
            ex.buckets_pruned_by_stats += 1;
        }
    }
    // Open buckets are pruned before they are copied: a copy is the expensive part.
    let open = c.catalog.snapshot_open_where(|b| {
        plan.open_bucket_may_match(b.meta.as_ref(), b.start_ms, b.max_time_ms, b.meta_varies())
    });
    ex.buckets_pruned_by_stats += c.catalog.open_buckets() as u64 - open.len() as u64;
    out.extend(open.into_iter().map(|b| Source::Mem(Arc::new(b))));
    ex.buckets_examined = out.len() as u64;
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
    sources: std::vec::IntoIter<Source>,
    filter: Filter,
    meta_field: Option<String>,
    ready: VecDeque<Document>,
    failed: bool,
}

impl Cursor {
    pub(crate) fn new(sources: Vec<Source>, plan: Plan) -> Cursor {
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
            let src = self.sources.next()?;
            let r = load(&src).and_then(|b| {
                matching_rows(
                    &b,
                    &self.filter,
                    self.meta_field.as_deref(),
                    &mut self.ready,
                )
            });
            if let Err(e) = r {
                self.failed = true;
                return Some(Err(e));
            }
        }
    }
}
