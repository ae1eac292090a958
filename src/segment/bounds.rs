//! Field bounds: one field's `control.min` and `control.max` for every bucket of a segment,
//! side by side.
//!
//! Pruning by statistics asks each bucket for the bounds of the fields a filter reads. Read
//! from the buckets' `control` documents, that is two hash lookups in two documents per bucket,
//! scattered over the heap: over 6,000 buckets of a thousand series and one predicate, it was a
//! third of a query that unpacks a quarter of the buckets. A segment is immutable, so the
//! bounds of a field are gathered once, into one array, and kept with the open segment.

use super::control::{find, ControlEntries, Keep};
use super::Segment;
use bson::{Bson, Document};

/// What a bucket's `control` documents say about one top-level field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BoundRef<'a> {
    /// In neither `control.min` nor `control.max`: no row has the field.
    Absent,
    /// `control.min` and `control.max` of the field.
    Range(&'a Bson, &'a Bson),
    /// In only one of them (not written so by this engine): nothing can be concluded.
    Partial,
}

impl<'a> BoundRef<'a> {
    /// The bounds of `field` in `min` and `max`.
    pub fn of(min: &'a Document, max: &'a Document, field: &str) -> BoundRef<'a> {
        match (min.get(field), max.get(field)) {
            (Some(lo), Some(hi)) => BoundRef::Range(lo, hi),
            (None, None) => BoundRef::Absent,
            _ => BoundRef::Partial,
        }
    }
}

/// Boxed: a `Bson` is over 100 bytes, and most entries in a scan are read only to be passed
/// over; a small array keeps more of them in cache.
#[derive(Debug)]
enum Bound {
    Absent,
    Range(Box<(Bson, Bson)>),
    Partial,
}

/// The sum of a field over a bucket's rows, as stored in its statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Sum {
    None,
    Int32(i32),
    Int64(i64),
    Double(f64),
}

/// The bounds and sums of one field for every bucket of a segment, by bucket index.
#[derive(Debug, Default)]
pub struct FieldBounds {
    by_bucket: Vec<Bound>,
    sums: Vec<Sum>,
}

impl FieldBounds {
    /// Gathers the bounds and sums of each of `fields` from every bucket of `seg`, decoding
    /// only those fields of each bucket's `control` (and the numbers its sums are stored
    /// against): a segment holds them encoded.
    pub(crate) fn build(seg: &Segment, fields: &[&str]) -> Vec<FieldBounds> {
        if fields.is_empty() {
            return Vec::new();
        }
        let n = seg.buckets().len();
        let idx: Vec<Option<u32>> = fields.iter().map(|f| seg.name_index(f)).collect();
        let wanted: Vec<u32> = idx.iter().flatten().copied().collect();
        let mut out: Vec<FieldBounds> = fields
            .iter()
            .map(|_| FieldBounds {
                by_bucket: Vec::with_capacity(n),
                sums: Vec::with_capacity(n),
            })
            .collect();
        let mut e = ControlEntries::default();
        for b in seg.buckets() {
            // An error cannot happen (open checked every entry); a bound that is not known
            // concludes nothing.
            let ok = seg
                .read_control_entries(b, &mut e, Keep::Only(&wanted))
                .is_ok();
            for (k, fb) in idx.iter().zip(out.iter_mut()) {
                let (bound, sum) = match (ok, k) {
                    (false, _) => (Bound::Partial, Sum::None),
                    // No bucket of the segment has the field.
                    (true, None) => (Bound::Absent, Sum::None),
                    (true, Some(k)) => (bound_of(&e, *k), sum_of(&e, *k)),
                };
                fb.by_bucket.push(bound);
                fb.sums.push(sum);
            }
        }
        out
    }

    /// The bounds for bucket `i`; `None` past the last bucket.
    pub fn get(&self, i: usize) -> Option<BoundRef<'_>> {
        Some(match self.by_bucket.get(i)? {
            Bound::Absent => BoundRef::Absent,
            Bound::Range(r) => BoundRef::Range(&r.0, &r.1),
            Bound::Partial => BoundRef::Partial,
        })
    }

    /// The sum of the field over bucket `i`'s rows from its statistics (see
    /// [`crate::sums`]); `None` when they hold none, or past the last bucket.
    pub fn sum(&self, i: usize) -> Option<Bson> {
        match self.sums.get(i)? {
            Sum::None => None,
            Sum::Int32(x) => Some(Bson::Int32(*x)),
            Sum::Int64(x) => Some(Bson::Int64(*x)),
            Sum::Double(x) => Some(Bson::Double(*x)),
        }
    }
}

fn bound_of(e: &ControlEntries, k: u32) -> Bound {
    match (find(&e.min, k), find(&e.max, k)) {
        (Some(Some(lo)), Some(Some(hi))) => Bound::Range(Box::new((lo.clone(), hi.clone()))),
        (None, None) => Bound::Absent,
        _ => Bound::Partial,
    }
}

fn sum_of(e: &ControlEntries, k: u32) -> Sum {
    match e.sums.iter().find(|(n, _)| *n == k).map(|(_, v)| v) {
        Some(Bson::Int32(x)) => Sum::Int32(*x),
        Some(Bson::Int64(x)) => Sum::Int64(*x),
        Some(Bson::Double(x)) => Sum::Double(*x),
        _ => Sum::None,
    }
}
