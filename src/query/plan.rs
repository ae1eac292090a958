//! What a filter lets us decide per bucket, from the bucket's statistics alone: the time
//! bounds (for the `_id` index range), predicates on the meta field (decided once per bucket
//! against its meta value) and predicates on measurement fields and the time field (decided
//! from `control.min/max`, MongoDB's bucket-level rewrite, plus which fields every row has).
//! [`Plan::verdict`] says whether a bucket can be skipped, must be unpacked and tested row by
//! row, or is known to match in every row.

use super::filter::{resolve_plain, split_path, Filter, Pred, Reach};
use super::prune::{field_verdict, over_range};
use crate::bucket::META_COLUMN;
use crate::doc::is_hidden;
use crate::index::meta::MetaWant;
use crate::order::type_rank;
use crate::segment::{BoundRef, BucketSummary, FieldBounds, MetaFields, Segment};
use bson::{Bson, Document};
use std::sync::Arc;

pub use super::prune::Verdict;

/// A bucket's statistics as the planner sees them.
#[derive(Clone, Copy)]
pub struct BucketStats<'a> {
    /// The bucket's meta value (`None` when its measurements had no meta field).
    pub meta: Option<&'a Bson>,
    /// `control.min/max`, at hand or to be decoded from a segment when first needed.
    control: ControlSource<'a>,
    /// Measurements in the bucket.
    pub count: u32,
    /// Whether every row has a given top-level field. Without it only the time field is known
    /// to be in every row, and predicates on other fields never take a bucket whole.
    pub dense: Option<&'a dyn Fn(&str) -> bool>,
    /// The bucket's start and latest time in milliseconds when the caller has them at hand
    /// (else they are read from `min` and `max`).
    pub time: Option<(i64, i64)>,
    /// [`BucketStats::meta_varies`] when the caller read it beforehand.
    pub varies: Option<bool>,
    /// The bounds of a top-level field when the caller has them gathered (else, or on `None`,
    /// they are read from `min` and `max`); see [`crate::segment::FieldBounds`].
    pub bounds: Option<Gathered<'a>>,
}

/// Where a bucket's `control.min/max` come from.
#[derive(Clone, Copy)]
enum ControlSource<'a> {
    /// At hand (an open bucket, or a test).
    Docs(&'a Document, &'a Document),
    /// Bucket `i` of a segment, which decodes them on first use.
    Segment(&'a Segment, usize),
}

/// Field bounds a caller gathered for one bucket: `bounds[i]` holds those of `fields[i]`.
#[derive(Clone, Copy)]
pub struct Gathered<'a> {
    /// Top-level field names.
    pub fields: &'a [String],
    /// Their bounds in the bucket's segment.
    pub bounds: &'a [Arc<FieldBounds>],
    /// The bucket's index in its segment.
    pub index: usize,
}

impl<'a> Gathered<'a> {
    fn get(&self, field: &str) -> Option<BoundRef<'a>> {
        self.of(field)?.get(self.index)
    }

    /// The bucket's sum of `field`: `None` when the field was not gathered, `Some(None)` when
    /// the statistics hold no sum.
    fn sum(&self, field: &str) -> Option<Option<Bson>> {
        let b = self.of(field)?;
        b.get(self.index)?;
        Some(b.sum(self.index))
    }

    fn of(&self, field: &str) -> Option<&'a FieldBounds> {
        let at = self.fields.iter().position(|f| f == field)?;
        self.bounds.get(at).map(|b| &**b)
    }
}

/// The bounds of a fixed list of top-level fields, gathered once per segment a read visits
/// (see [`Segment::fields_bounds`]), for [`BucketStats::with_bounds`].
pub(crate) struct SegmentBounds {
    fields: Vec<String>,
    /// The bounds of each segment visited, with its address.
    by_segment: Vec<(usize, Vec<Arc<FieldBounds>>)>,
    /// Places in `by_segment` by address.
    places: foldhash::HashMap<usize, usize>,
    /// The place of the segment visited last: buckets come in runs of one segment, and a
    /// hash lookup per bucket was a tenth of planning a filter judged from bounds.
    last: usize,
}

impl SegmentBounds {
    /// Bounds of `fields` (none gathered when the list is empty).
    pub(crate) fn new(fields: Vec<String>) -> SegmentBounds {
        SegmentBounds {
            fields,
            by_segment: Vec::new(),
            places: Default::default(),
            last: 0,
        }
    }

    /// The gathered bounds of bucket `index` of `seg`; `None` when there are no fields.
    #[inline]
    pub(crate) fn of(&mut self, seg: &Arc<Segment>, index: usize) -> Option<Gathered<'_>> {
        if self.fields.is_empty() {
            return None;
        }
        let key = Arc::as_ptr(seg) as usize;
        if self
            .by_segment
            .get(self.last)
            .is_none_or(|(k, _)| *k != key)
        {
            self.last = match self.places.get(&key) {
                Some(&at) => at,
                None => {
                    let refs: Vec<&str> = self.fields.iter().map(String::as_str).collect();
                    self.by_segment.push((key, seg.fields_bounds(&refs)));
                    self.places.insert(key, self.by_segment.len() - 1);
                    self.by_segment.len() - 1
                }
            };
        }
        let (_, bounds) = self.by_segment.get(self.last)?;
        Some(Gathered {
            fields: &self.fields,
            bounds,
            index,
        })
    }
}

impl std::fmt::Debug for BucketStats<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketStats")
            .field("meta", &self.meta)
            .field("control", &self.control())
            .field("count", &self.count)
            .field("dense", &self.dense.is_some())
            .field("time", &self.time)
            .field("varies", &self.varies)
            .finish()
    }
}

impl<'a> BucketStats<'a> {
    /// Statistics without knowledge of which fields every row has.
    ///
    /// `min` is `control.min`, whose time field holds the rounded bucket start (which may be
    /// earlier than the earliest measurement), and `max` is `control.max`.
    pub fn new(
        meta: Option<&'a Bson>,
        min: &'a Document,
        max: &'a Document,
        count: u32,
    ) -> BucketStats<'a> {
        BucketStats {
            meta,
            control: ControlSource::Docs(min, max),
            count,
            dense: None,
            time: None,
            varies: None,
            bounds: None,
        }
    }

    /// Statistics of bucket `i` of `seg` (summary `s`), with its time range and whether its
    /// rows carry their own meta values; `control.min/max` are decoded only if asked for.
    pub fn of_segment(seg: &'a Segment, i: usize, s: &'a BucketSummary) -> BucketStats<'a> {
        BucketStats {
            meta: seg.meta_of(s),
            control: ControlSource::Segment(seg, i),
            count: s.count,
            dense: None,
            // The times read at open, unless `control` lacked a date (then the summary holds
            // stand-ins that are not values).
            time: match s.time_range() {
                (_, i64::MAX) => None,
                t => Some(t),
            },
            varies: Some(s.meta_varies()),
            bounds: None,
        }
    }

    /// These statistics with another meta value: one that reads the same along the paths
    /// the caller judges (a [`crate::segment::MetaProjection`]'s cut value).
    pub fn with_meta(self, meta: Option<&'a Bson>) -> BucketStats<'a> {
        BucketStats { meta, ..self }
    }

    /// `control.min` and `control.max`; `None` when a segment's directory fails to decode
    /// them (it decoded them at open, so only a fault in memory could cause it), and then
    /// every judgement from statistics must be "cannot tell".
    pub fn control(&self) -> Option<(&'a Document, &'a Document)> {
        match self.control {
            ControlSource::Docs(min, max) => Some((min, max)),
            ControlSource::Segment(seg, i) => seg.control(i).ok().map(|c| (&c.min, &c.max)),
        }
    }

    /// The sum of top-level field `field` over the bucket's rows from its statistics (see
    /// [`crate::sums`]); `None` when they hold none.
    pub fn sum_of(&self, field: &str) -> Option<Bson> {
        match self.bounds.and_then(|g| g.sum(field)) {
            Some(sum) => sum,
            None => crate::sums::bucket_sum(self.control()?.1, field).cloned(),
        }
    }

    /// `control.min` of top-level field `field`.
    pub fn min_of(&self, field: &str) -> Option<&'a Bson> {
        self.control()?.0.get(field)
    }

    /// `control.max` of top-level field `field`.
    pub fn max_of(&self, field: &str) -> Option<&'a Bson> {
        self.control()?.1.get(field)
    }

    /// The bucket's start (`control.min` of the time field, the rounded start) and latest
    /// time in milliseconds, when known.
    pub fn time_range(&self, time_field: &str) -> (Option<i64>, Option<i64>) {
        match self.time {
            Some((lo, hi)) => (Some(lo), Some(hi)),
            None => match self.control() {
                Some((min, max)) => (time_ms(min, time_field), time_ms(max, time_field)),
                None => (None, None),
            },
        }
    }

    /// Adds where the bounds of fields can be read without looking into `min` and `max`.
    pub fn with_bounds(self, bounds: Gathered<'a>) -> BucketStats<'a> {
        BucketStats {
            bounds: Some(bounds),
            ..self
        }
    }

    /// The bounds of top-level field `field`.
    pub fn bound(&self, field: &str) -> BoundRef<'a> {
        if let Some(b) = self.bounds.and_then(|g| g.get(field)) {
            return b;
        }
        match self.control() {
            Some((min, max)) => BoundRef::of(min, max, field),
            None => BoundRef::Partial,
        }
    }

    /// Adds whether some rows carry their own meta value (see [`BucketStats::meta_varies`]).
    pub fn with_meta_varies(self, varies: bool) -> BucketStats<'a> {
        BucketStats {
            varies: Some(varies),
            ..self
        }
    }

    /// [`BucketStats::of_segment`] for planning, built in one go: its times as read at open
    /// (a bucket whose `control` held no date starts at its `_id`'s time and never ends),
    /// `dense`, and the gathered `bounds`. Built with the `with_` methods, the statistics
    /// were copied from one to the next, a tenth of planning a filter judged from bounds.
    pub fn planned(
        seg: &'a Segment,
        i: usize,
        s: &'a BucketSummary,
        dense: &'a dyn Fn(&str) -> bool,
        bounds: Option<Gathered<'a>>,
    ) -> BucketStats<'a> {
        BucketStats {
            meta: seg.meta_of(s),
            control: ControlSource::Segment(seg, i),
            count: s.count,
            dense: Some(dense),
            time: Some(s.time_range()),
            varies: Some(s.meta_varies()),
            bounds,
        }
    }

    /// Adds the bucket's start and latest time, milliseconds.
    pub fn with_time(self, start_ms: i64, end_ms: i64) -> BucketStats<'a> {
        BucketStats {
            time: Some((start_ms, end_ms)),
            ..self
        }
    }

    /// Adds which top-level fields every row has.
    pub fn with_dense(self, dense: &'a dyn Fn(&str) -> bool) -> BucketStats<'a> {
        BucketStats {
            dense: Some(dense),
            ..self
        }
    }

    /// True when rows carry meta values that differ from the bucket's (field order only), so
    /// meta conjuncts must be tested per row.
    pub fn meta_varies(&self) -> bool {
        self.varies.unwrap_or_else(|| {
            self.control()
                .is_none_or(|(_, max)| max.contains_key(META_COLUMN))
        })
    }

    fn is_dense(&self, field: &str) -> bool {
        self.dense.is_some_and(|d| d(field))
    }
}

/// A filter analysed for one collection.
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
    /// True when every conjunct is either a meta conjunct or a time conjunct that
    /// `time_lo..=time_hi` states exactly; then a bucket inside the bounds with a matching meta
    /// matches in every row.
    pub exact: bool,
    /// The conjuncts judged per bucket, meta field first; time conjuncts that the bounds state
    /// exactly are left to the bounds.
    ordered: Vec<Filter>,
    /// The meta fields the meta conjuncts read: buckets whose meta values agree in them
    /// share the meta conjuncts' verdict.
    meta_fields: MetaFields,
    pub(crate) time_field: String,
    pub(crate) meta_field: Option<String>,
}

fn on_meta(f: &Filter, meta: &str) -> bool {
    let mut paths = Vec::new();
    f.paths(&mut paths);
    !paths.is_empty() && paths.iter().all(|p| split_path(p).0 == meta)
}

/// Narrows `lo..=hi` by a predicate on the time field; returns true when the predicate is
/// exactly "time within the narrowed bounds" for a field that always holds a date.
fn narrow(pred: &Pred, lo: &mut i64, hi: &mut i64) -> bool {
    let ms = |v: &Bson| match v {
        Bson::DateTime(t) => Some(t.timestamp_millis()),
        _ => None,
    };
    match pred {
        Pred::Eq(v) => match ms(v) {
            Some(t) => {
                *lo = (*lo).max(t);
                *hi = (*hi).min(t);
                true
            }
            None => false,
        },
        Pred::Gt(v) => match ms(v) {
            Some(t) => {
                match t.checked_add(1) {
                    Some(after) => *lo = (*lo).max(after),
                    // No date is later than the latest one.
                    None => empty(lo, hi),
                }
                true
            }
            None => false,
        },
        Pred::Gte(v) => match ms(v) {
            Some(t) => {
                *lo = (*lo).max(t);
                true
            }
            None => false,
        },
        Pred::Lt(v) => match ms(v) {
            Some(t) => {
                match t.checked_sub(1) {
                    Some(before) => *hi = (*hi).min(before),
                    // No date is earlier than the earliest one.
                    None => empty(lo, hi),
                }
                true
            }
            None => false,
        },
        Pred::Lte(v) => match ms(v) {
            Some(t) => {
                *hi = (*hi).min(t);
                true
            }
            None => false,
        },
        Pred::In(vs) => {
            let ts: Option<Vec<i64>> = vs.iter().map(ms).collect();
            if let Some(ts) = ts {
                if let (Some(a), Some(b)) = (ts.iter().min(), ts.iter().max()) {
                    *lo = (*lo).max(*a);
                    *hi = (*hi).min(*b);
                }
                // A bucket inside [min, max] may hold times between the listed values.
                return ts.len() == 1;
            }
            false
        }
        Pred::All(ps) => {
            // Every predicate must narrow the bounds, even after one that is not exact.
            let mut exact = true;
            for p in ps {
                exact &= narrow(p, lo, hi);
            }
            exact
        }
        _ => false,
    }
}

/// Makes `lo..=hi` empty. Bounds only ever narrow afterwards, so it stays empty: a bound just
/// past either end of the date range must not be clamped onto that end, where a date exists.
fn empty(lo: &mut i64, hi: &mut i64) {
    *lo = i64::MAX;
    *hi = i64::MIN;
}

/// True when `v` holds no embedded document, so field order cannot change how it compares.
fn order_free(v: &Bson) -> bool {
    match v {
        Bson::Document(_) => false,
        Bson::Array(a) => a.iter().all(order_free),
        _ => true,
    }
}

/// A predicate on the meta field (at `rest` below it) against the bucket's meta value. Rows
/// carry that value, except that some may order the fields of embedded documents differently
/// (`meta_varies`): that only matters when the predicate sees a document.
fn judge_meta(pred: &Pred, rest: Option<&str>, b: &BucketStats<'_>) -> Verdict {
    let at = match (b.meta, rest) {
        (None, _) => Reach::Missing,
        (Some(m), None) => Reach::Value(m),
        (Some(m), Some(r)) => resolve_plain(m, r),
    };
    let same_in_every_row = match at {
        Reach::Value(v) => order_free(v),
        Reach::Missing => true,
        Reach::ThroughArray => false,
    };
    if !same_in_every_row && b.meta_varies() {
        return Verdict::Some;
    }
    Verdict::of(match at {
        Reach::Value(v) => pred.matches(&[v]),
        Reach::Missing => pred.matches(&[]),
        Reach::ThroughArray => pred.matches_at(b.meta, rest),
    })
}

fn time_ms(d: &Document, field: &str) -> Option<i64> {
    match d.get(field) {
        Some(Bson::DateTime(t)) => Some(t.timestamp_millis()),
        _ => None,
    }
}

impl Plan {
    /// Analyses `filter` for a collection with these fields.
    pub fn new(filter: Filter, time_field: &str, meta_field: Option<&str>) -> Plan {
        let mut lo = i64::MIN;
        let mut hi = i64::MAX;
        let mut meta_conjuncts = Vec::new();
        let mut exact = true;
        let (mut meta, mut rest) = (Vec::new(), Vec::new());
        for c in filter.conjuncts() {
            let mut decided = false;
            if let Filter::Field { path, pred } = c {
                if path == time_field {
                    decided = narrow(pred, &mut lo, &mut hi);
                }
            }
            let bounded = decided;
            if let Some(m) = meta_field {
                if on_meta(c, m) {
                    meta_conjuncts.push(c.clone());
                    meta.push(c.clone());
                    decided = true;
                }
            }
            if !bounded && !meta_field.is_some_and(|m| on_meta(c, m)) {
                rest.push(c.clone());
            }
            exact &= decided;
        }
        meta.append(&mut rest);
        let mut paths = Vec::new();
        meta_conjuncts.iter().for_each(|c| c.paths(&mut paths));
        let meta_fields = MetaFields::of_paths(paths.iter().map(|p| split_path(p).1.unwrap_or("")));
        Plan {
            filter,
            time_lo: lo,
            time_hi: hi,
            meta_conjuncts,
            exact,
            ordered: meta,
            meta_fields,
            time_field: time_field.to_string(),
            meta_field: meta_field.map(str::to_string),
        }
    }

    /// The time field's name.
    pub fn time_field(&self) -> &str {
        &self.time_field
    }

    /// The meta field's name, if the collection has one.
    pub fn meta_field(&self) -> Option<&str> {
        self.meta_field.as_deref()
    }

    /// The inclusive range of bucket starts (`control.min` of the time field, the `_id`'s time
    /// prefix) that can hold a matching row, for buckets spanning at most `span_ms`; `None`
    /// when no bucket can. A bucket starting at `s` holds times in `[s, s + span)`, so the
    /// lower bound is widened by the span, as MongoDB does for its `_id` index scan.
    pub fn start_range(&self, span_ms: i64) -> Option<(i64, i64)> {
        if self.time_lo > self.time_hi {
            return None;
        }
        // In i128: near the earliest date `time_lo - span + 1` lies below what an `i64` holds
        // (every start qualifies), and saturating the subtraction before adding one moved the
        // bound past the start of the earliest bucket.
        let lo = i128::from(self.time_lo) - i128::from(span_ms.max(1)) + 1;
        Some((i64::try_from(lo).unwrap_or(i64::MIN), self.time_hi))
    }

    /// [`Plan::verdict`]'s pruning half for an open bucket, from its start, latest time and
    /// meta (open buckets have no complete statistics to prove more).
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

    /// True when the bucket meta value satisfies every meta conjunct.
    pub fn meta_matches(&self, meta: Option<&Bson>) -> bool {
        self.meta_conjuncts.iter().all(|c| self.meta_holds(c, meta))
    }

    /// Matches a filter that reads only the meta field against a meta value directly: paths
    /// are taken relative to the value, so no document is built per bucket.
    fn meta_holds(&self, f: &Filter, meta: Option<&Bson>) -> bool {
        match f {
            Filter::True => true,
            Filter::And(v) => v.iter().all(|f| self.meta_holds(f, meta)),
            Filter::Or(v) => v.iter().any(|f| self.meta_holds(f, meta)),
            Filter::Nor(v) => !v.iter().any(|f| self.meta_holds(f, meta)),
            Filter::Field { path, pred } => pred.matches_at(meta, split_path(path).1),
        }
    }

    /// What a bucket's statistics prove about the filter.
    pub fn verdict(&self, b: &BucketStats<'_>) -> Verdict {
        self.verdict_with_meta(b, || self.meta_verdict(b))
    }

    /// What the meta conjuncts alone prove about a bucket. It depends on nothing but the
    /// bucket's values in [`Plan::meta_fields`] and [`BucketStats::meta_varies`], so buckets
    /// sharing both can share it.
    pub fn meta_verdict(&self, b: &BucketStats<'_>) -> Verdict {
        let mut out = Verdict::All;
        for c in &self.meta_conjuncts {
            match self.judge(c, b) {
                Verdict::None => return Verdict::None,
                Verdict::Some => out = Verdict::Some,
                Verdict::All => {}
            }
        }
        out
    }

    /// The meta fields the meta conjuncts read (see [`Plan::meta_verdict`]).
    pub fn meta_fields(&self) -> &MetaFields {
        &self.meta_fields
    }

    /// The top-level measurement fields whose bounds the verdict reads (time and meta fields
    /// aside), each once.
    pub fn stat_fields(&self) -> Vec<String> {
        let mut paths = Vec::new();
        for c in self
            .ordered
            .get(self.meta_conjuncts.len()..)
            .unwrap_or_default()
        {
            c.paths(&mut paths);
        }
        let mut heads: Vec<String> = Vec::new();
        for p in &paths {
            let head = split_path(p).0;
            let skip = head == self.time_field
                || self.meta_field.as_deref() == Some(head)
                || is_hidden(head);
            if !skip && !heads.iter().any(|h| h == head) {
                heads.push(head.to_string());
            }
        }
        heads
    }

    /// True when every bucket matches in every row, whatever its statistics: no time bounds
    /// and nothing else to decide.
    pub fn takes_everything(&self) -> bool {
        self.time_lo == i64::MIN
            && self.time_hi == i64::MAX
            && self.ordered.iter().all(|c| matches!(c, Filter::True))
    }

    /// True when the filter has conjuncts on the meta field.
    pub fn has_meta_conjuncts(&self) -> bool {
        !self.meta_conjuncts.is_empty()
    }

    /// The meta conjuncts that a lookup by value can answer (an equality or `$in` on the meta
    /// field or a path below it, on values the meta index keys), in the filter's order.
    pub(crate) fn meta_wants(&self, meta_field: &str) -> Vec<MetaWant> {
        self.meta_conjuncts
            .iter()
            .filter_map(|f| {
                let Filter::Field { path, pred } = f else {
                    return None;
                };
                let (head, rest) = split_path(path);
                if head != meta_field {
                    return None;
                }
                let path = rest.unwrap_or("");
                let of = |pred: &Pred| match pred {
                    Pred::Eq(v) => MetaWant::of(path, [v]),
                    Pred::In(vs) => MetaWant::of(path, vs),
                    _ => None,
                };
                match pred {
                    Pred::All(ps) => ps.iter().find_map(of),
                    p => of(p),
                }
            })
            .collect()
    }

    /// [`Plan::verdict`] with the meta conjuncts' verdict given by `meta` (asked at most once,
    /// after the time bounds), e.g. remembered from a bucket with the same meta value.
    pub fn verdict_with_meta(
        &self,
        b: &BucketStats<'_>,
        meta: impl FnOnce() -> Verdict,
    ) -> Verdict {
        if self.time_lo > self.time_hi {
            return Verdict::None;
        }
        let mut out = Verdict::All;
        if self.time_lo != i64::MIN || self.time_hi != i64::MAX {
            let (start, end) = b.time_range(&self.time_field);
            let (start, end) = (start.unwrap_or(i64::MIN), end.unwrap_or(i64::MAX));
            if end < self.time_lo || start > self.time_hi {
                return Verdict::None;
            }
            // Rows lie in [start, end]: inside the bounds, the time conjuncts hold for all.
            if start < self.time_lo || end > self.time_hi {
                out = Verdict::Some;
            }
        }
        if !self.meta_conjuncts.is_empty() {
            match meta() {
                Verdict::None => return Verdict::None,
                Verdict::Some => out = Verdict::Some,
                Verdict::All => {}
            }
        }
        // `ordered` starts with the meta conjuncts.
        let rest = self
            .ordered
            .get(self.meta_conjuncts.len()..)
            .unwrap_or_default();
        for c in rest {
            match self.judge(c, b) {
                Verdict::None => return Verdict::None,
                Verdict::Some => out = Verdict::Some,
                Verdict::All => {}
            }
        }
        out
    }

    fn judge(&self, f: &Filter, b: &BucketStats<'_>) -> Verdict {
        match f {
            Filter::True => Verdict::All,
            Filter::And(v) => {
                let mut out = Verdict::All;
                for f in v {
                    match self.judge(f, b) {
                        Verdict::None => return Verdict::None,
                        Verdict::Some => out = Verdict::Some,
                        Verdict::All => {}
                    }
                }
                out
            }
            Filter::Or(v) => self.judge_any(v, b),
            Filter::Nor(v) => self.judge_any(v, b).not(),
            Filter::Field { path, pred } => self.judge_field(path, pred, b),
        }
    }

    fn judge_any(&self, v: &[Filter], b: &BucketStats<'_>) -> Verdict {
        let mut out = Verdict::None;
        for f in v {
            match self.judge(f, b) {
                Verdict::All => return Verdict::All,
                Verdict::Some => out = Verdict::Some,
                Verdict::None => {}
            }
        }
        out
    }

    fn judge_field(&self, path: &str, pred: &Pred, b: &BucketStats<'_>) -> Verdict {
        let (head, rest) = split_path(path);
        if self.meta_field.as_deref() == Some(head) {
            return judge_meta(pred, rest, b);
        }
        // Rows never show bookkeeping fields.
        if is_hidden(head) {
            return Verdict::of(pred.matches(&[]));
        }
        let (lo, hi) = match b.bound(head) {
            BoundRef::Range(lo, hi) => (lo, hi),
            // control holds every field some row has: no row has this one.
            BoundRef::Absent => return Verdict::of(pred.matches(&[])),
            BoundRef::Partial => return Verdict::Some,
        };
        // Bounds of documents and arrays are taken element-wise: they bound no single value.
        let composite = |v: &Bson| matches!(v, Bson::Document(_) | Bson::Array(_));
        if composite(lo) || composite(hi) || type_rank(lo) != type_rank(hi) {
            return Verdict::Some;
        }
        if rest.is_some() {
            // Scalars have no sub-fields: every row has nothing at the path.
            return Verdict::of(pred.matches(&[]));
        }
        let dense = || head == self.time_field || b.is_dense(head);
        field_verdict(over_range(pred, lo, hi), dense, pred.matches(&[]))
    }

    /// False when a bucket with these statistics cannot hold a matching row.
    pub fn bucket_may_match(&self, meta: Option<&Bson>, min: &Document, max: &Document) -> bool {
        self.verdict(&BucketStats::new(meta, min, max, 0)) != Verdict::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, DateTime};

    fn t(ms: i64) -> Bson {
        Bson::DateTime(DateTime::from_millis(ms))
    }

    fn plan(f: Document) -> Plan {
        Plan::new(Filter::parse(&f).unwrap(), "t", Some("m"))
    }

    #[test]
    fn stat_fields_are_the_measurement_fields_read() {
        let p = plan(doc! {
            "a": {"$gt": 5},
            "m.x": 1,
            "t": {"$gte": t(0)},
            "$or": [{"b": 1}, {"c.d": 2}, {"a": 3}],
        });
        assert_eq!(p.stat_fields(), vec!["a", "b", "c"]);
        assert!(plan(doc! {"m": 1}).stat_fields().is_empty());
    }

    fn verdict(p: &Plan, meta: Bson, lo: i64, hi: i64) -> Verdict {
        let (min, max) = (doc! {"t": t(lo)}, doc! {"t": t(hi)});
        p.verdict(&BucketStats::new(Some(&meta), &min, &max, 2))
    }

    /// A bucket with control `min`/`max` where `dense` fields are in every row.
    fn judge(p: &Plan, min: Document, max: Document, dense: &[&str]) -> Verdict {
        let meta = Bson::Document(doc! {"h": "a"});
        let d = |f: &str| dense.contains(&f);
        p.verdict(&BucketStats::new(Some(&meta), &min, &max, 3).with_dense(&d))
    }

    #[test]
    fn time_and_meta_conjuncts_take_buckets_whole() {
        let p = plan(doc! {"t": {"$gte": t(100), "$lt": t(200)}, "m.h": "a"});
        assert!(p.exact);
        let a = Bson::Document(doc! {"h": "a"});
        let b = Bson::Document(doc! {"h": "b"});
        assert_eq!(verdict(&p, a.clone(), 100, 199), Verdict::All);
        assert_eq!(verdict(&p, a.clone(), 150, 250), Verdict::Some);
        assert_eq!(verdict(&p, a, 200, 250), Verdict::None);
        assert_eq!(verdict(&p, b, 100, 199), Verdict::None);
    }

    #[test]
    fn measurement_conjuncts_prune_by_control() {
        let p = plan(doc! {"t": {"$gte": t(100)}, "x": {"$gt": 5}});
        assert!(!p.exact);
        let lo = doc! {"t": t(100), "x": 1};
        let hi = |x: i32| doc! {"t": t(199), "x": x};
        assert_eq!(judge(&p, lo.clone(), hi(5), &["x"]), Verdict::None);
        assert_eq!(judge(&p, lo.clone(), hi(9), &["x"]), Verdict::Some);
        let lo6 = doc! {"t": t(100), "x": 6.5};
        assert_eq!(judge(&p, lo6.clone(), hi(9), &["x"]), Verdict::All);
        // Some row may lack x: it would not match.
        assert_eq!(judge(&p, lo6, hi(9), &[]), Verdict::Some);
        // Before the time bound.
        assert_eq!(
            judge(
                &p,
                doc! {"t": t(0), "x": 6},
                doc! {"t": t(99), "x": 9},
                &["x"]
            ),
            Verdict::None
        );
    }

    #[test]
    fn a_field_no_row_has_decides_every_row_alike() {
        let (min, max) = (doc! {"t": t(0), "y": 1}, doc! {"t": t(9), "y": 2});
        for (f, want) in [
            (doc! {"x": {"$gt": 5}}, Verdict::None),
            (doc! {"x": null}, Verdict::All),
            (doc! {"x": {"$exists": false}}, Verdict::All),
            (doc! {"x": {"$ne": 5}}, Verdict::All),
            (doc! {"x": {"$lt": Bson::MaxKey}}, Verdict::All),
            (doc! {"x.a": 1}, Verdict::None),
        ] {
            assert_eq!(
                judge(&plan(f.clone()), min.clone(), max.clone(), &[]),
                want,
                "{f}"
            );
        }
    }

    #[test]
    fn composite_bounds_and_hidden_fields_do_not_prune() {
        let min = doc! {"t": t(0), "a": [1, 2], "d": {"v": 1}, "\u{1}sum": {"a": 3}};
        let max = doc! {"t": t(9), "a": [5, 9], "d": {"v": 4}, "\u{1}sum": {"a": 3}};
        for f in [
            doc! {"a": 3},
            doc! {"a": {"$gt": 100}},
            doc! {"d.v": 9},
            doc! {"d": {"$gt": {"v": 100}}},
        ] {
            assert_eq!(
                judge(&plan(f.clone()), min.clone(), max.clone(), &["a", "d"]),
                Verdict::Some,
                "{f}"
            );
        }
        let hidden = plan(doc! {"\u{1}sum": {"$exists": true}});
        assert_eq!(judge(&hidden, min, max, &[]), Verdict::None);
    }

    #[test]
    fn time_field_operators_are_sound() {
        let (min, max) = (doc! {"t": t(100)}, doc! {"t": t(199)});
        for (f, want) in [
            (doc! {"t": {"$gt": t(99)}}, Verdict::All),
            (doc! {"t": {"$gt": t(100)}}, Verdict::Some),
            (doc! {"t": {"$ne": t(150)}}, Verdict::Some),
            (doc! {"t": {"$ne": t(250)}}, Verdict::All),
            (doc! {"t": {"$nin": [t(50), t(250)]}}, Verdict::All),
            (doc! {"t": {"$in": [t(50), t(250)]}}, Verdict::None),
            (doc! {"t": {"$exists": true}}, Verdict::All),
            (doc! {"t": {"$exists": false}}, Verdict::None),
            (doc! {"t": {"$gt": 5}}, Verdict::None),
            (
                doc! {"$or": [{"t": {"$lt": t(50)}}, {"t": {"$gt": t(300)}}]},
                Verdict::None,
            ),
            (
                doc! {"$or": [{"t": {"$lt": t(150)}}, {"t": {"$gte": t(150)}}]},
                Verdict::Some,
            ),
            (doc! {"$nor": [{"t": {"$lt": t(50)}}]}, Verdict::All),
        ] {
            assert_eq!(
                judge(&plan(f.clone()), min.clone(), max.clone(), &[]),
                want,
                "{f}"
            );
        }
    }

    #[test]
    fn meta_conjuncts_match_the_meta_value_in_place() {
        let p = plan(doc! {"m.h": {"$in": ["a", "c"]}, "m": {"$exists": true}});
        assert!(p.meta_matches(Some(&Bson::Document(doc! {"h": "a"}))));
        assert!(!p.meta_matches(Some(&Bson::Document(doc! {"h": "b"}))));
        assert!(!p.meta_matches(None));
        let arr = plan(doc! {"m.h": "b"});
        let meta = Bson::Document(doc! {"h": ["a", "b"]});
        assert!(arr.meta_matches(Some(&meta)));
        let nested = Bson::Array(vec![Bson::Document(doc! {"h": "b"})]);
        assert!(arr.meta_matches(Some(&nested)));
    }

    #[test]
    fn start_range_widens_the_lower_bound_by_the_span() {
        let p = plan(doc! {"t": {"$gte": t(10_000), "$lte": t(20_000)}});
        assert_eq!(p.start_range(3_000), Some((7_001, 20_000)));
        assert_eq!(plan(doc! {}).start_range(3_000), Some((i64::MIN, i64::MAX)));
        let empty = plan(doc! {"t": {"$gt": t(5), "$lt": t(3)}});
        assert_eq!(empty.start_range(3_000), None);
    }

    #[test]
    fn start_ranges_at_the_ends_of_the_date_range_neither_clamp_nor_wrap() {
        let hour = 3_600_000;
        let earliest = plan(doc! {"t": t(i64::MIN + 1)});
        assert_eq!(earliest.start_range(hour), Some((i64::MIN, i64::MIN + 1)));
        let latest = plan(doc! {"t": {"$gte": t(i64::MAX)}});
        assert_eq!(
            latest.start_range(hour),
            Some((i64::MAX - hour + 1, i64::MAX))
        );
        assert_eq!(
            plan(doc! {"t": {"$gt": t(i64::MAX)}}).start_range(hour),
            None
        );
        assert_eq!(
            plan(doc! {"t": {"$lt": t(i64::MIN)}}).start_range(hour),
            None
        );
        let before_all = plan(doc! {"t": {"$lt": t(i64::MIN)}});
        assert_eq!(
            verdict(&before_all, Bson::Null, i64::MIN, i64::MIN),
            Verdict::None
        );
    }

    #[test]
    fn a_remembered_meta_verdict_gives_the_same_verdict() {
        let p = plan(doc! {"t": {"$gte": t(100)}, "m.h": "a", "x": {"$gt": 5}});
        assert!(p.has_meta_conjuncts());
        let (min, max) = (doc! {"t": t(100), "x": 6}, doc! {"t": t(199), "x": 9});
        for h in ["a", "b"] {
            let meta = Bson::Document(doc! {"h": h});
            let d = |_: &str| true;
            let b = BucketStats::new(Some(&meta), &min, &max, 3).with_dense(&d);
            let mv = p.meta_verdict(&b);
            assert_eq!(p.verdict_with_meta(&b, || mv), p.verdict(&b));
        }
        let meta = Bson::Document(doc! {"h": "a"});
        let b = BucketStats::new(Some(&meta), &min, &max, 3);
        assert_eq!(p.verdict_with_meta(&b, || Verdict::None), Verdict::None);
        // Outside the time bounds the meta verdict is not asked for.
        let late = plan(doc! {"t": {"$gte": t(500)}, "m.h": "a"});
        assert_eq!(late.verdict_with_meta(&b, || unreachable!()), Verdict::None);
    }

    #[test]
    fn empty_filter_takes_everything_whole() {
        let p = plan(doc! {});
        assert_eq!(verdict(&p, Bson::Null, 0, 1), Verdict::All);
    }
}
