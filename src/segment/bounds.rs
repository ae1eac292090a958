//! Field bounds: one field's `control.min` and `control.max` for every bucket of a segment,
//! side by side.
//!
//! Pruning by statistics asks each bucket for the bounds of the fields a filter reads. Read
//! from the buckets' `control` documents, that is two hash lookups in two documents per bucket,
//! scattered over the heap: on devops data (6,000 buckets, one predicate) it was a third of a
//! query that unpacks a quarter of the buckets. A segment is immutable, so the bounds of a
//! field are gathered once, into one array, and kept with the open segment.

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

/// The bounds of one field for every bucket of a segment, by bucket index.
#[derive(Debug)]
pub struct FieldBounds {
    by_bucket: Vec<Bound>,
}

impl FieldBounds {
    /// Gathers the bounds of `field` from every bucket of `seg`. Each bucket's `control` is
    /// decoded for it and dropped, not kept: a segment holds them encoded.
    pub(crate) fn build(seg: &Segment, field: &str) -> FieldBounds {
        let by_bucket = seg
            .buckets()
            .iter()
            .enumerate()
            .map(|(i, b)| match seg.decode_control(i, b) {
                // Cannot happen (open decoded it); a bound that is not known concludes nothing.
                Err(_) => Bound::Partial,
                Ok(c) => match BoundRef::of(&c.min, &c.max, field) {
                    BoundRef::Absent => Bound::Absent,
                    BoundRef::Range(lo, hi) => Bound::Range(Box::new((lo.clone(), hi.clone()))),
                    BoundRef::Partial => Bound::Partial,
                },
            })
            .collect();
        FieldBounds { by_bucket }
    }

    /// The bounds for bucket `i`; `None` past the last bucket.
    pub fn get(&self, i: usize) -> Option<BoundRef<'_>> {
        Some(match self.by_bucket.get(i)? {
            Bound::Absent => BoundRef::Absent,
            Bound::Range(r) => BoundRef::Range(&r.0, &r.1),
            Bound::Partial => BoundRef::Partial,
        })
    }
}
