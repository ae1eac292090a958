//! MongoDB's canonical BSON sort order, in the small form `Segment::verify` needs.
//!
//! TEMPORARY: this is private to the segment module and exists only so that `verify` can check
//! `control.min/max` against the column data. Replace it with the shared comparator from
//! `src/query` once that exists; nothing else should start depending on it.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use bson::Bson;
use std::cmp::Ordering;

/// Rank of a value's type in MongoDB's canonical order (lower sorts first). Numbers share one
/// rank, as do String and Symbol, and Null and Undefined.
fn type_rank(v: &Bson) -> u8 {
    match v {
        Bson::MinKey => 0,
        Bson::Null | Bson::Undefined => 1,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 2,
        Bson::String(_) | Bson::Symbol(_) => 3,
        Bson::Document(_) => 4,
        Bson::Array(_) => 5,
        Bson::Binary(_) => 6,
        Bson::ObjectId(_) => 7,
        Bson::Boolean(_) => 8,
        Bson::DateTime(_) => 9,
        Bson::Timestamp(_) => 10,
        Bson::RegularExpression(_) => 11,
        Bson::DbPointer(_) => 12,
        Bson::JavaScriptCode(_) => 13,
        Bson::JavaScriptCodeWithScope(_) => 14,
        Bson::MaxKey => 15,
    }
}

/// A number as f64 (exact for Double and for integers up to 2^53; Decimal128 goes through its
/// decimal string). NaN stays NaN.
fn as_f64(v: &Bson) -> f64 {
    match v {
        Bson::Int32(i) => f64::from(*i),
        Bson::Int64(i) => *i as f64,
        Bson::Double(d) => *d,
        Bson::Decimal128(d) => d.to_string().parse::<f64>().unwrap_or(f64::NAN),
        _ => f64::NAN,
    }
}

/// Compares two numbers by value; NaN is smaller than every other number and equal to NaN.
fn compare_numbers(a: &Bson, b: &Bson) -> Ordering {
    if let (Some(x), Some(y)) = (as_i64(a), as_i64(b)) {
        return x.cmp(&y);
    }
    let (x, y) = (as_f64(a), as_f64(b));
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
    }
}

/// Integers exactly, so that large Int64 values are not rounded through f64.
fn as_i64(v: &Bson) -> Option<i64> {
    match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        _ => None,
    }
}

/// Compares two BSON values in MongoDB's canonical order. Exact for scalars; documents and
/// arrays are only ordered by type here (field-wise order is not needed by `verify`, which skips
/// exact checks on such columns).
pub(crate) fn compare_bson(a: &Bson, b: &Bson) -> Ordering {
    let (ra, rb) = (type_rank(a), type_rank(b));
    if ra != rb {
        return ra.cmp(&rb);
    }
    match (a, b) {
        _ if ra == 2 => compare_numbers(a, b),
        (Bson::String(x) | Bson::Symbol(x), Bson::String(y) | Bson::Symbol(y)) => {
            x.as_bytes().cmp(y.as_bytes())
        }
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then(u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then(x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.cmp(y),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => {
            (x.time, x.increment).cmp(&(y.time, y.increment))
        }
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => x
            .pattern
            .as_str()
            .cmp(y.pattern.as_str())
            .then(x.options.as_str().cmp(y.options.as_str())),
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.cmp(y),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => x.code.cmp(&y.code),
        _ => Ordering::Equal,
    }
}

/// True for values whose `control.min/max` MongoDB computes field by field (not checked
/// exactly by `verify`).
pub(crate) fn is_composite(v: &Bson) -> bool {
    matches!(v, Bson::Document(_) | Bson::Array(_))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::oid::ObjectId;
    use bson::{DateTime, Decimal128};

    #[test]
    fn canonical_type_order() {
        let ordered = [
            Bson::MinKey,
            Bson::Null,
            Bson::Double(f64::NAN),
            Bson::Int32(-5),
            Bson::Double(0.5),
            Bson::Int64(1),
            Bson::String("a".into()),
            Bson::Document(Default::default()),
            Bson::Array(vec![]),
            Bson::ObjectId(ObjectId::from_bytes([0; 12])),
            Bson::Boolean(false),
            Bson::Boolean(true),
            Bson::DateTime(DateTime::from_millis(0)),
            Bson::MaxKey,
        ];
        for w in ordered.windows(2) {
            if let [a, b] = w {
                assert_eq!(compare_bson(a, b), Ordering::Less, "{a:?} < {b:?}");
                assert_eq!(compare_bson(b, a), Ordering::Greater);
            }
        }
    }

    #[test]
    fn numbers_compare_by_value_across_types() {
        let d: Decimal128 = "2.5"
            .parse()
            .unwrap_or_else(|_| Decimal128::from_bytes([0; 16]));
        assert_eq!(
            compare_bson(&Bson::Int32(1), &Bson::Double(1.0)),
            Ordering::Equal
        );
        assert_eq!(
            compare_bson(&Bson::Decimal128(d), &Bson::Int64(2)),
            Ordering::Greater
        );
        assert_eq!(
            compare_bson(&Bson::Int64(i64::MAX), &Bson::Int64(i64::MAX - 1)),
            Ordering::Greater
        );
        assert_eq!(compare_bson(&Bson::Null, &Bson::Undefined), Ordering::Equal);
    }
}
