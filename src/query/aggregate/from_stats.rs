//! What a bucket's statistics answer for an accumulator without decoding a column, for a
//! bucket taken whole whose group key is constant over it.
//!
//! `control.min/max` of a field hold real values when they are scalars (a bucket never mixes
//! type classes in one field; documents and arrays are folded element-wise, so theirs are
//! not values). A single-row bucket's row is `control.max`. The time field's `control.min` is
//! the rounded bucket start, not a value. Sums come from `control.max["\u{1}sum"]` when the
//! bucket's statistics carry them.

use crate::query::aggregate::accumulators::AccOp;
use crate::query::source::in_every_row;
use crate::query::expr::path_in_value;
use crate::query::plan::BucketStats;
use crate::query::source::Source;
use crate::order::type_rank;
use crate::segment::BoundRef;
use bson::Bson;

/// An accumulator's argument as statistics can see it.
pub enum StatArg<'a> {
    /// A constant.
    Const(&'a Bson),
    /// A path below the meta value (`""` for the meta value itself).
    Meta(&'a str),
    /// A top-level field.
    Column(&'a str),
}

/// How one accumulator is fed from statistics.
#[derive(Debug, Clone, PartialEq)]
pub enum Feed {
    /// `n` documents with this value (`None` = missing).
    N(Option<Bson>, u64),
    /// A pre-computed sum over `n` numbers.
    Sum(Bson, u64),
    /// The single row, at this time, for a pick after a time sort.
    Pick(i64, Option<Bson>),
}

/// One bucket's statistics and what the group needs to know to read them.
pub struct StatContext<'a> {
    /// The bucket's statistics.
    pub st: &'a BucketStats<'a>,
    /// Its latest time (`control.max` of the time field).
    pub t_max: Option<i64>,
    /// Where it lives (to tell whether a field is in every row).
    pub src: &'a Source<'a>,
    /// The collection's time field.
    pub time_field: &'a str,
    /// `$first`/`$last` are picks by time (after a `$sort` on the time field).
    pub picks: bool,
}

fn composite(v: Option<&Bson>) -> bool {
    matches!(v, Some(Bson::Document(_) | Bson::Array(_)))
}

impl StatContext<'_> {
    /// How `op` over `arg` is fed from the statistics, or `None` when they cannot tell.
    pub fn feed(&self, op: AccOp, arg: &StatArg<'_>) -> Option<Feed> {
        let st = self.st;
        let n = u64::from(st.count);
        let constant = |v: Option<Bson>| match self.picks {
            true if n == 1 => Some(Feed::Pick(self.t_max?, v)),
            true => None,
            false => Some(Feed::N(v, n)),
        };
        let f = match arg {
            StatArg::Const(v) => return constant(Some((*v).clone())),
            StatArg::Meta(rest) => return constant(st.meta.and_then(|m| path_in_value(m, rest))),
            StatArg::Column(f) => *f,
        };
        let numeric_op = matches!(op, AccOp::Sum | AccOp::Avg);
        // control.min and control.max of the field; unknown bounds tell nothing.
        let (lo, hi) = match st.bound(f) {
            BoundRef::Range(lo, hi) => (Some(lo), Some(hi)),
            BoundRef::Absent => (None, None),
            BoundRef::Partial => return None,
        };
        if n == 1 {
            let v = hi;
            // Sums ignore documents and arrays whatever they hold; other operators need them.
            if composite(v) && (!numeric_op || self.picks) {
                return None;
            }
            return Some(match self.picks {
                true => Feed::Pick(self.t_max?, v.cloned()),
                false if composite(v) => Feed::N(None, 1),
                false => Feed::N(v.cloned(), 1),
            });
        }
        if self.picks {
            return None;
        }
        match op {
            AccOp::Max if f == self.time_field => Some(Feed::N(hi.cloned(), 1)),
            AccOp::Min | AccOp::Max if f != self.time_field => {
                let v = if op == AccOp::Min { lo } else { hi };
                (!composite(v)).then(|| Feed::N(v.cloned(), 1))
            }
            AccOp::Sum | AccOp::Avg => match hi {
                // No row has it, or its type class is not numbers: nothing to add.
                None => Some(Feed::N(None, 0)),
                Some(v) if type_rank(v) != 10 => Some(Feed::N(None, 0)),
                Some(_) => {
                    let s = st.sum_of(f).filter(|s| type_rank(s) == 10)?;
                    // An average also needs the count of numbers: every row's, if all have it.
                    if op == AccOp::Avg && !in_every_row(self.src, f) {
                        return None;
                    }
                    Some(Feed::Sum(s, n))
                }
            },
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::BucketData;
    use bson::{doc, oid::ObjectId, DateTime, Document};
    use std::sync::Arc;

    fn t(ms: i64) -> Bson {
        Bson::DateTime(DateTime::from_millis(ms))
    }

    fn feed(min: Document, max: Document, count: u32, op: AccOp, arg: StatArg<'_>) -> Option<Feed> {
        let b = Arc::new(BucketData {
            id: ObjectId::new(),
            meta: None,
            count,
            min: min.clone(),
            max: max.clone(),
            columns: Vec::new(),
            shapes: Vec::new(),
            row_shapes: Vec::new(),
            bson_bytes: None,
        });
        let b = Arc::new(crate::query::source::MemBucket::closed(b));
        let src = Source::Mem(&b);
        let st = BucketStats::new(None, &min, &max, count);
        StatContext {
            st: &st,
            t_max: Some(60),
            src: &src,
            time_field: "t",
            picks: false,
        }
        .feed(op, &arg)
    }

    #[test]
    fn statistics_answer_what_they_hold() {
        let (min, max) = (
            doc! {"t": t(0), "x": 1, "s": "a"},
            doc! {"t": t(60), "x": 9, "s": "z"},
        );
        let f = |op, arg| feed(min.clone(), max.clone(), 5, op, arg);
        assert_eq!(
            f(AccOp::Max, StatArg::Column("x")),
            Some(Feed::N(Some(Bson::Int32(9)), 1))
        );
        assert_eq!(
            f(AccOp::Min, StatArg::Column("s")),
            Some(Feed::N(Some("a".into()), 1))
        );
        assert_eq!(
            f(AccOp::Max, StatArg::Column("t")),
            Some(Feed::N(Some(t(60)), 1))
        );
        // The time field's minimum is the rounded bucket start, not a value.
        assert_eq!(f(AccOp::Min, StatArg::Column("t")), None);
        assert_eq!(
            f(AccOp::Sum, StatArg::Const(&Bson::Int32(1))),
            Some(Feed::N(Some(Bson::Int32(1)), 5))
        );
        assert_eq!(f(AccOp::Sum, StatArg::Column("s")), Some(Feed::N(None, 0)));
        assert_eq!(
            f(AccOp::Sum, StatArg::Column("nope")),
            Some(Feed::N(None, 0))
        );
        // Numbers without a pre-computed sum need their column.
        assert_eq!(f(AccOp::Sum, StatArg::Column("x")), None);
        assert_eq!(f(AccOp::First, StatArg::Column("x")), None);
    }

    #[test]
    fn sums_come_from_hidden_statistics() {
        let min = doc! {"t": t(0), "x": 1};
        let max = doc! {"t": t(60), "x": 9, "\u{1}sum": {"x": 30_i64}};
        assert_eq!(
            feed(
                min.clone(),
                max.clone(),
                5,
                AccOp::Sum,
                StatArg::Column("x")
            ),
            Some(Feed::Sum(Bson::Int64(30), 5))
        );
        // The bucket's field order says nothing about "x" in every row: no average.
        assert_eq!(feed(min, max, 5, AccOp::Avg, StatArg::Column("x")), None);
    }

    #[test]
    fn single_rows_are_their_control_max() {
        let (min, max) = (
            doc! {"t": t(0), "x": 4.5, "d": {"a": 1}},
            doc! {"t": t(60), "x": 4.5, "d": {"a": 1}},
        );
        let f = |op, arg| feed(min.clone(), max.clone(), 1, op, arg);
        assert_eq!(
            f(AccOp::First, StatArg::Column("x")),
            Some(Feed::N(Some(Bson::Double(4.5)), 1))
        );
        assert_eq!(
            f(AccOp::Last, StatArg::Column("nope")),
            Some(Feed::N(None, 1))
        );
        assert_eq!(
            f(AccOp::Min, StatArg::Column("t")),
            Some(Feed::N(Some(t(60)), 1))
        );
        assert_eq!(f(AccOp::Sum, StatArg::Column("d")), Some(Feed::N(None, 1)));
        assert_eq!(f(AccOp::Max, StatArg::Column("d")), None);
    }
}
