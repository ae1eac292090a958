//! What a predicate does over a range of scalar values: the per-field half of bucket pruning.
//!
//! A bucket never mixes type classes in one path, so when `control.min/max` of a field are
//! scalars, every row either lacks the field or holds one scalar of that class between them.
//! [`over_range`] says whether a predicate holds for every such value, for none, or maybe;
//! the caller combines that with whether rows may lack the field.

use super::filter::{cmp_matches, is_nan, Cmp, Pred};
use crate::order::{cmp_bson, type_rank};
use bson::Bson;
use std::cmp::Ordering;

/// What a predicate does for every value of a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tri {
    /// Holds for every value.
    Always,
    /// Holds for no value.
    Never,
    /// Depends on the value.
    Maybe,
}

impl Tri {
    fn not(self) -> Tri {
        match self {
            Tri::Always => Tri::Never,
            Tri::Never => Tri::Always,
            Tri::Maybe => Tri::Maybe,
        }
    }

    fn of(b: bool) -> Tri {
        if b {
            Tri::Always
        } else {
            Tri::Never
        }
    }
}

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

impl Verdict {
    pub(crate) fn of(b: bool) -> Verdict {
        if b {
            Verdict::All
        } else {
            Verdict::None
        }
    }

    pub(crate) fn not(self) -> Verdict {
        match self {
            Verdict::None => Verdict::All,
            Verdict::All => Verdict::None,
            Verdict::Some => Verdict::Some,
        }
    }
}

/// The verdict for a bucket whose rows hold values of `tri` where present; `dense` says
/// whether every row has the field (asked only when it matters), `missing` is what the
/// predicate says for a row that lacks it.
pub fn field_verdict(tri: Tri, dense: impl FnOnce() -> bool, missing: bool) -> Verdict {
    let decided = match tri {
        Tri::Always => Verdict::All,
        Tri::Never => Verdict::None,
        Tri::Maybe => return Verdict::Some,
    };
    // Rows without the field decide the same way, or there are none.
    if missing == (tri == Tri::Always) || dense() {
        decided
    } else {
        Verdict::Some
    }
}

/// What `pred` does for single scalar values `v` with `lo <= v <= hi` in `lo`'s type class
/// (the values a row holds when `control.min/max` are the scalars `lo` and `hi`).
pub fn over_range(pred: &Pred, lo: &Bson, hi: &Bson) -> Tri {
    match native_over(pred, lo, hi) {
        Some(t) => t,
        None => bson_over(pred, lo, hi),
    }
}

/// [`over_range`] of a comparison whose operand and bounds are all integers, or all doubles
/// other than NaN, compared natively: the general path compares `Bson`s three or four times,
/// the bulk of planning a filter judged from bounds. `None` for anything else.
fn native_over(pred: &Pred, lo: &Bson, hi: &Bson) -> Option<Tri> {
    let (op, x) = match pred {
        Pred::Gt(x) => (Cmp::Gt, x),
        Pred::Gte(x) => (Cmp::Gte, x),
        Pred::Lt(x) => (Cmp::Lt, x),
        Pred::Lte(x) => (Cmp::Lte, x),
        _ => return None,
    };
    let int = |v: &Bson| match *v {
        Bson::Int32(i) => Some(i64::from(i)),
        Bson::Int64(i) => Some(i),
        _ => None,
    };
    let double = |v: &Bson| match *v {
        Bson::Double(d) if !d.is_nan() => Some(d),
        _ => None,
    };
    let against = |v: &Bson| match (int(v), int(x)) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        _ => double(v)?.partial_cmp(&double(x)?),
    };
    let (lo_ok, hi_ok) = (op.accepts(against(lo)?), op.accepts(against(hi)?));
    // Comparisons are monotone over `lo <= v <= hi` (one value when they are equal).
    Some(match op {
        Cmp::Gt | Cmp::Gte if !hi_ok => Tri::Never,
        Cmp::Gt | Cmp::Gte if lo_ok => Tri::Always,
        Cmp::Lt | Cmp::Lte if !lo_ok => Tri::Never,
        Cmp::Lt | Cmp::Lte if hi_ok => Tri::Always,
        _ => Tri::Maybe,
    })
}

/// [`over_range`] by comparing `Bson` values.
fn bson_over(pred: &Pred, lo: &Bson, hi: &Bson) -> Tri {
    // Every value equal to one value: the matcher, which only ever compares, decides exactly.
    if cmp_bson(lo, hi) == Ordering::Equal {
        return Tri::of(pred.matches(&[lo]));
    }
    let class = type_rank(lo);
    // Null and undefined have a single value each, so a range never holds them.
    match pred {
        Pred::Eq(x) => eq_over(x, lo, hi, class),
        Pred::Ne(x) => eq_over(x, lo, hi, class).not(),
        Pred::In(xs) => any(xs.iter().map(|x| eq_over(x, lo, hi, class))),
        Pred::Nin(xs) => any(xs.iter().map(|x| eq_over(x, lo, hi, class))).not(),
        Pred::Gt(x) => cmp_over(x, Cmp::Gt, lo, hi, class),
        Pred::Gte(x) => cmp_over(x, Cmp::Gte, lo, hi, class),
        Pred::Lt(x) => cmp_over(x, Cmp::Lt, lo, hi, class),
        Pred::Lte(x) => cmp_over(x, Cmp::Lte, lo, hi, class),
        Pred::Exists(e) => Tri::of(*e),
        Pred::Not(p) => over_range(p, lo, hi).not(),
        Pred::All(ps) => all(ps.iter().map(|p| over_range(p, lo, hi))),
    }
}

fn any(it: impl Iterator<Item = Tri>) -> Tri {
    let mut out = Tri::Never;
    for t in it {
        match t {
            Tri::Always => return Tri::Always,
            Tri::Maybe => out = Tri::Maybe,
            Tri::Never => {}
        }
    }
    out
}

fn all(it: impl Iterator<Item = Tri>) -> Tri {
    let mut out = Tri::Always;
    for t in it {
        match t {
            Tri::Never => return Tri::Never,
            Tri::Maybe => out = Tri::Maybe,
            Tri::Always => {}
        }
    }
    out
}

fn eq_over(x: &Bson, lo: &Bson, hi: &Bson, class: u8) -> Tri {
    // Other brackets never compare equal (MinKey and MaxKey only equal themselves), and null
    // matches only null and undefined, which a range of distinct values cannot hold.
    if type_rank(x) != class {
        return Tri::Never;
    }
    if is_nan(x) {
        // NaN sorts below every number: a range holds it only if it starts there.
        return if is_nan(lo) { Tri::Maybe } else { Tri::Never };
    }
    if cmp_bson(x, lo) == Ordering::Less || cmp_bson(x, hi) == Ordering::Greater {
        Tri::Never
    } else {
        Tri::Maybe
    }
}

fn cmp_over(x: &Bson, op: Cmp, lo: &Bson, hi: &Bson, class: u8) -> Tri {
    if type_rank(x) != class {
        // MinKey and MaxKey bracket every other type; anything else never compares.
        return match x {
            Bson::MinKey | Bson::MaxKey => Tri::of(cmp_matches(lo, x, op)),
            _ => Tri::Never,
        };
    }
    if is_nan(x) {
        return Tri::Maybe;
    }
    // A NaN in the range (it would be `lo`) fails every comparison with a number: no Always.
    let nan_low = is_nan(lo);
    let (lo_ok, hi_ok) = (cmp_matches(lo, x, op), cmp_matches(hi, x, op));
    match op {
        // Monotone upward: `hi` failing means every value fails; `lo` passing means all pass.
        Cmp::Gt | Cmp::Gte => {
            if !hi_ok {
                Tri::Never
            } else if lo_ok && !nan_low {
                Tri::Always
            } else {
                Tri::Maybe
            }
        }
        Cmp::Lt | Cmp::Lte => {
            if !lo_ok && !nan_low {
                Tri::Never
            } else if hi_ok && !nan_low {
                Tri::Always
            } else {
                Tri::Maybe
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::filter::Filter;
    use bson::{doc, Document};

    fn pred(f: Document) -> Pred {
        match Filter::parse(&f).unwrap() {
            Filter::Field { pred, .. } => pred,
            other => panic!("{other:?}"),
        }
    }

    fn tri(f: Document, lo: impl Into<Bson>, hi: impl Into<Bson>) -> Tri {
        over_range(&pred(f), &lo.into(), &hi.into())
    }

    fn number() -> impl proptest::strategy::Strategy<Value = Bson> {
        use proptest::prelude::*;
        prop_oneof![
            (-3i32..4).prop_map(Bson::Int32),
            (-3i64..4).prop_map(Bson::Int64),
            prop_oneof![
                Just(i64::MIN),
                Just(i64::MAX),
                Just(1 << 53),
                Just((1 << 53) + 1)
            ]
            .prop_map(Bson::Int64),
            prop_oneof![
                Just(-2.5),
                Just(0.0),
                Just(-0.0),
                Just(1.0),
                Just(3.5),
                Just(f64::NAN),
                Just(f64::INFINITY),
                Just(9007199254740993.0)
            ]
            .prop_map(Bson::Double),
        ]
    }

    proptest::proptest! {
        /// Native comparisons decide every range exactly as comparing `Bson`s does.
        #[test]
        fn native_comparisons_agree_with_bson_ones(a in number(), b in number(), x in number(), op in 0..4usize) {
            let (lo, hi) = match cmp_bson(&a, &b) {
                Ordering::Greater => (b, a),
                _ => (a, b),
            };
            // Bounds of one bucket share a type class (numbers always do).
            let p = [Pred::Gt, Pred::Gte, Pred::Lt, Pred::Lte][op](x);
            if let Some(t) = native_over(&p, &lo, &hi) {
                proptest::prop_assert_eq!(t, bson_over(&p, &lo, &hi), "{:?} over {} ..= {}", p, lo, hi);
            }
        }
    }

    #[test]
    fn comparisons_over_numeric_ranges() {
        assert_eq!(tri(doc! {"x": {"$gt": 90}}, 10, 90), Tri::Never);
        assert_eq!(tri(doc! {"x": {"$gt": 90}}, 10, 91.5), Tri::Maybe);
        assert_eq!(tri(doc! {"x": {"$gt": 9}}, 10i64, 91.5), Tri::Always);
        assert_eq!(tri(doc! {"x": {"$lte": 10}}, 10, 20), Tri::Maybe);
        assert_eq!(tri(doc! {"x": {"$lt": 10}}, 10, 20), Tri::Never);
        assert_eq!(tri(doc! {"x": {"$lt": 21}}, 10, 20), Tri::Always);
        assert_eq!(tri(doc! {"x": 5}, 10, 20), Tri::Never);
        assert_eq!(tri(doc! {"x": {"$ne": 5}}, 10, 20), Tri::Always);
        assert_eq!(tri(doc! {"x": {"$in": [1, 15]}}, 10, 20), Tri::Maybe);
        assert_eq!(tri(doc! {"x": {"$nin": [1, 25]}}, 10, 20), Tri::Always);
        assert_eq!(tri(doc! {"x": {"$gt": 1, "$lt": 5}}, 10, 20), Tri::Never);
        assert_eq!(tri(doc! {"x": {"$not": {"$gt": 30}}}, 10, 20), Tri::Always);
    }

    #[test]
    fn other_brackets_never_match_except_min_and_max_key() {
        assert_eq!(tri(doc! {"x": {"$gt": "a"}}, 10, 20), Tri::Never);
        assert_eq!(tri(doc! {"x": {"$ne": "a"}}, 10, 20), Tri::Always);
        assert_eq!(tri(doc! {"x": {"$lt": Bson::MaxKey}}, 10, 20), Tri::Always);
        assert_eq!(tri(doc! {"x": {"$gte": Bson::MaxKey}}, 10, 20), Tri::Never);
        assert_eq!(
            tri(doc! {"x": {"$gt": Bson::MinKey}}, "a", "b"),
            Tri::Always
        );
        assert_eq!(tri(doc! {"x": null}, 10, 20), Tri::Never);
        assert_eq!(tri(doc! {"x": {"$gte": null}}, 10, 20), Tri::Never);
    }

    #[test]
    fn nan_in_range_or_operand_is_never_always() {
        assert_eq!(tri(doc! {"x": {"$lt": 30}}, f64::NAN, 20.0), Tri::Maybe);
        assert_eq!(tri(doc! {"x": {"$gt": 30}}, f64::NAN, 20.0), Tri::Never);
        assert_eq!(tri(doc! {"x": {"$gt": f64::NAN}}, 1.0, 20.0), Tri::Maybe);
        assert_eq!(tri(doc! {"x": f64::NAN}, 1.0, 20.0), Tri::Never);
        assert_eq!(tri(doc! {"x": f64::NAN}, f64::NAN, 20.0), Tri::Maybe);
        assert_eq!(tri(doc! {"x": {"$lte": 5}}, f64::NAN, f64::NAN), Tri::Never);
    }

    #[test]
    fn single_value_ranges_are_decided_exactly() {
        assert_eq!(tri(doc! {"x": null}, Bson::Null, Bson::Null), Tri::Always);
        assert_eq!(tri(doc! {"x": 3}, 3.0, 3i64), Tri::Always);
        assert_eq!(tri(doc! {"x": {"$gte": 3}}, 3, 3), Tri::Always);
    }

    #[test]
    fn missing_rows_weigh_in_unless_dense() {
        let (yes, no) = (|| true, || false);
        assert_eq!(field_verdict(Tri::Always, no, false), Verdict::Some);
        assert_eq!(field_verdict(Tri::Always, yes, false), Verdict::All);
        assert_eq!(field_verdict(Tri::Always, no, true), Verdict::All);
        assert_eq!(field_verdict(Tri::Never, no, true), Verdict::Some);
        assert_eq!(field_verdict(Tri::Never, no, false), Verdict::None);
        assert_eq!(field_verdict(Tri::Maybe, yes, true), Verdict::Some);
    }
}
