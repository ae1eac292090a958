//! What a filter lets us decide per bucket, from the bucket's statistics alone: the time
//! bounds (for the `_id` index range and `control.min/max` of the time field) and the
//! conjuncts that read only the meta field. [`Plan::verdict`] says whether a bucket can be
//! skipped, must be unpacked and tested row by row, or is known to match in every row.

use super::filter::{Filter, Pred};
use crate::catalog::META_COLUMN;
use bson::{Bson, Document};

/// What a bucket's statistics prove about a filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No row can match: skip the bucket.
    None,
    /// Some rows may match: unpack and test each row.
    Some,
    /// Every row matches: take the bucket whole without testing rows.
    All,
}

/// A bucket's statistics as the planner sees them.
#[derive(Debug, Clone, Copy)]
pub struct BucketStats<'a> {
    /// The bucket's meta value (`None` when its measurements had no meta field).
    pub meta: Option<&'a Bson>,
    /// `control.min`; the time field holds the rounded bucket start, which may be earlier
    /// than the earliest measurement.
    pub min: &'a Document,
    /// `control.max`.
    pub max: &'a Document,
    /// Measurements in the bucket.
    pub count: u32,
}

impl BucketStats<'_> {
    /// True when rows carry meta values that differ from the bucket's (field order only), so
    /// meta conjuncts must be tested per row.
    pub fn meta_varies(&self) -> bool {
        self.max.contains_key(META_COLUMN)
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
    pub(crate) time_field: String,
    pub(crate) meta_field: Option<String>,
}

fn on_meta(f: &Filter, meta: &str) -> bool {
    let mut paths = Vec::new();
    f.paths(&mut paths);
    !paths.is_empty()
        && paths
            .iter()
            .all(|p| p == meta || p.strip_prefix(meta).is_some_and(|r| r.starts_with('.')))
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
                *lo = (*lo).max(t.saturating_add(1));
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
                *hi = (*hi).min(t.saturating_sub(1));
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
        for c in filter.conjuncts() {
            let mut decided = false;
            if let Filter::Field { path, pred } = c {
                if path == time_field {
                    decided = narrow(pred, &mut lo, &mut hi);
                }
            }
            if let Some(m) = meta_field {
                if on_meta(c, m) {
                    meta_conjuncts.push(c.clone());
                    decided = true;
                }
            }
            exact &= decided;
        }
        Plan {
            filter,
            time_lo: lo,
            time_hi: hi,
            meta_conjuncts,
            exact,
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
        let mut d = Document::new();
        if let (Some(f), Some(m)) = (self.meta_field.as_deref(), meta) {
            d.insert(f, m.clone());
        }
        self.meta_conjuncts.iter().all(|c| c.matches(&d))
    }

    /// What a bucket's statistics prove about the filter.
    pub fn verdict(&self, b: &BucketStats<'_>) -> Verdict {
        if self.time_lo > self.time_hi {
            return Verdict::None;
        }
        let (start, end) = (
            time_ms(b.min, &self.time_field),
            time_ms(b.max, &self.time_field),
        );
        if let (Some(start), Some(end)) = (start, end) {
            if end < self.time_lo || start > self.time_hi {
                return Verdict::None;
            }
        }
        let meta_varies = b.meta_varies();
        if !self.meta_conjuncts.is_empty() && !meta_varies && !self.meta_matches(b.meta) {
            return Verdict::None;
        }
        let inside =
            matches!((start, end), (Some(s), Some(e)) if s >= self.time_lo && e <= self.time_hi);
        if self.exact && inside && (self.meta_conjuncts.is_empty() || !meta_varies) {
            Verdict::All
        } else {
            Verdict::Some
        }
    }

    /// False when a bucket with these statistics cannot hold a matching row.
    pub fn bucket_may_match(&self, meta: Option<&Bson>, min: &Document, max: &Document) -> bool {
        let stats = BucketStats {
            meta,
            min,
            max,
            count: 0,
        };
        self.verdict(&stats) != Verdict::None
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

    fn verdict(p: &Plan, meta: Bson, lo: i64, hi: i64) -> Verdict {
        let (min, max) = (doc! {"t": t(lo)}, doc! {"t": t(hi)});
        p.verdict(&BucketStats {
            meta: Some(&meta),
            min: &min,
            max: &max,
            count: 2,
        })
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
    fn measurement_conjuncts_need_rows() {
        let p = plan(doc! {"t": {"$gte": t(100)}, "x": 5});
        assert!(!p.exact);
        let a = Bson::Document(doc! {"h": "a"});
        assert_eq!(verdict(&p, a.clone(), 100, 199), Verdict::Some);
        assert_eq!(verdict(&p, a, 0, 99), Verdict::None);
    }

    #[test]
    fn empty_filter_takes_everything_whole() {
        let p = plan(doc! {});
        assert_eq!(verdict(&p, Bson::Null, 0, 1), Verdict::All);
    }
}
