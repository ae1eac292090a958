//! MongoDB's total order over BSON values: canonical type rank first, then the value.
//!
//! Used for `control.min/max`, sorting and comparison operators. Numbers of every type compare
//! by numeric value (`1 == 1.0 == NumberLong(1)`); NaN sorts below every other number.

use bson::{Bson, Document};
use std::cmp::Ordering;

/// MongoDB's canonical type rank (`canonicalizeBSONType`): values of different ranks compare by
/// rank alone. All numeric types share one rank; string and symbol share one.
pub fn type_rank(v: &Bson) -> u8 {
    match v {
        Bson::MinKey => 0,
        Bson::Undefined => 1,
        Bson::Null => 5,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 10,
        Bson::String(_) | Bson::Symbol(_) => 15,
        Bson::Document(_) => 20,
        Bson::Array(_) => 25,
        Bson::Binary(_) => 30,
        Bson::ObjectId(_) => 35,
        Bson::Boolean(_) => 40,
        Bson::DateTime(_) => 45,
        Bson::Timestamp(_) => 47,
        Bson::RegularExpression(_) => 50,
        Bson::DbPointer(_) => 55,
        Bson::JavaScriptCode(_) => 60,
        Bson::JavaScriptCodeWithScope(_) => 65,
        Bson::MaxKey => 127,
    }
}

/// A number as `f64` for comparison (Decimal128 through its string form).
pub fn as_f64(v: &Bson) -> Option<f64> {
    match v {
        Bson::Int32(i) => Some(f64::from(*i)),
        #[allow(
            clippy::cast_precision_loss,
            reason = "integers meet doubles in cmp_int_double, which is exact"
        )]
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(d) => Some(*d),
        Bson::Decimal128(d) => d.to_string().parse::<f64>().ok().or(Some(f64::NAN)),
        _ => None,
    }
}

/// An integer against a double, exactly: `2^53 + 1` is greater than the double `2^53`, and
/// `i64::MAX` is less than the double `2^63` (converting the integer would make both equal).
/// Exact order of an integer against a double (NaN lowest), without rounding the integer.
pub fn cmp_int_double(i: i64, d: f64) -> Ordering {
    // 2^63 as a double; every double in [-2^63, 2^63) truncates to an exact i64.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if d.is_nan() {
        return Ordering::Greater;
    }
    if d >= TWO_63 {
        return Ordering::Less;
    }
    if d < -TWO_63 {
        return Ordering::Greater;
    }
    let whole = d.trunc();
    #[allow(
        clippy::cast_possible_truncation,
        reason = "whole is integral and within i64's range"
    )]
    let w = whole as i64;
    i.cmp(&w).then_with(|| {
        // Equal integer parts: the double's fraction decides.
        0.0f64.partial_cmp(&(d - whole)).unwrap_or(Ordering::Equal)
    })
}

fn cmp_numbers(a: &Bson, b: &Bson) -> Ordering {
    let int = |v: &Bson| match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        _ => None,
    };
    match (a, b, int(a), int(b)) {
        (_, _, Some(x), Some(y)) => return x.cmp(&y),
        (_, Bson::Double(y), Some(x), None) => return cmp_int_double(x, *y),
        (Bson::Double(x), _, None, Some(y)) => return cmp_int_double(y, *x).reverse(),
        _ => {}
    }
    cmp_f64(
        as_f64(a).unwrap_or(f64::NAN),
        as_f64(b).unwrap_or(f64::NAN),
    )
}

/// Two doubles in BSON order: NaN below every number and equal to itself.
pub fn cmp_f64(x: f64, y: f64) -> Ordering {
    match (x.is_nan(), y.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
    }
}

/// Compares two documents as MongoDB does: element by element (type rank, field name, value),
/// the shorter document first when one is a prefix of the other.
pub fn cmp_documents(a: &Document, b: &Document) -> Ordering {
    let mut ia = a.iter();
    let mut ib = b.iter();
    loop {
        match (ia.next(), ib.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((ka, va)), Some((kb, vb))) => {
                let o = type_rank(va)
                    .cmp(&type_rank(vb))
                    .then_with(|| ka.as_bytes().cmp(kb.as_bytes()))
                    .then_with(|| cmp_bson(va, vb));
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

fn cmp_arrays(a: &[Bson], b: &[Bson]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = type_rank(x).cmp(&type_rank(y)).then_with(|| cmp_bson(x, y));
        if o != Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

/// MongoDB's total order over BSON values.
pub fn cmp_bson(a: &Bson, b: &Bson) -> Ordering {
    let ra = type_rank(a);
    let rb = type_rank(b);
    if ra != rb {
        return ra.cmp(&rb);
    }
    match (a, b) {
        (Bson::String(x) | Bson::Symbol(x), Bson::String(y) | Bson::Symbol(y)) => {
            x.as_bytes().cmp(y.as_bytes())
        }
        (Bson::Document(x), Bson::Document(y)) => cmp_documents(x, y),
        (Bson::Array(x), Bson::Array(y)) => cmp_arrays(x, y),
        (Bson::Binary(x), Bson::Binary(y)) => x
            .bytes
            .len()
            .cmp(&y.bytes.len())
            .then_with(|| u8::from(x.subtype).cmp(&u8::from(y.subtype)))
            .then_with(|| x.bytes.cmp(&y.bytes)),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Timestamp(x), Bson::Timestamp(y)) => {
            (x.time, x.increment).cmp(&(y.time, y.increment))
        }
        (Bson::RegularExpression(x), Bson::RegularExpression(y)) => x
            .pattern
            .as_str()
            .cmp(y.pattern.as_str())
            .then_with(|| x.options.as_str().cmp(y.options.as_str())),
        (Bson::JavaScriptCode(x), Bson::JavaScriptCode(y)) => x.cmp(y),
        (Bson::JavaScriptCodeWithScope(x), Bson::JavaScriptCodeWithScope(y)) => x
            .code
            .cmp(&y.code)
            .then_with(|| cmp_documents(&x.scope, &y.scope)),
        _ if ra == 10 => cmp_numbers(a, b),
        // MinKey, MaxKey, Null, Undefined, DbPointer: equal within their rank.
        _ => Ordering::Equal,
    }
}

/// Equality in MongoDB's sense (`1 == 1.0`), consistent with [`cmp_bson`].
pub fn eq_bson(a: &Bson, b: &Bson) -> bool {
    cmp_bson(a, b) == Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, oid::ObjectId, DateTime};

    #[test]
    fn numbers_compare_across_types() {
        assert_eq!(
            cmp_bson(&Bson::Int32(1), &Bson::Double(1.0)),
            Ordering::Equal
        );
        assert_eq!(
            cmp_bson(&Bson::Int64(2), &Bson::Double(1.5)),
            Ordering::Greater
        );
        assert_eq!(
            cmp_bson(&Bson::Double(f64::NAN), &Bson::Int32(-5)),
            Ordering::Less
        );
        assert_eq!(
            cmp_bson(&Bson::Int64(i64::MAX), &Bson::Int64(i64::MAX - 1)),
            Ordering::Greater
        );
    }

    /// Integers were converted to doubles before comparing with one, so `2^53 + 1` equalled
    /// the double `2^53` and `i64::MAX` the double `2^63`: filters matched values they should
    /// not have, and sorts tied values that differ.
    #[test]
    fn large_integers_compare_exactly_with_doubles() {
        let two53 = 9_007_199_254_740_992_i64;
        let cases = [
            (
                Bson::Int64(two53 + 1),
                Bson::Double(two53 as f64),
                Ordering::Greater,
            ),
            (
                Bson::Int64(two53),
                Bson::Double(two53 as f64),
                Ordering::Equal,
            ),
            (
                Bson::Int64(i64::MAX),
                Bson::Double(9_223_372_036_854_775_808.0),
                Ordering::Less,
            ),
            (
                Bson::Int64(i64::MIN),
                Bson::Double(-9_223_372_036_854_775_808.0),
                Ordering::Equal,
            ),
            (
                Bson::Int64(i64::MIN),
                Bson::Double(-1e300),
                Ordering::Greater,
            ),
            (Bson::Int32(-3), Bson::Double(-2.5), Ordering::Less),
            (Bson::Int32(2), Bson::Double(2.5), Ordering::Less),
            (Bson::Int32(0), Bson::Double(-0.0), Ordering::Equal),
            (Bson::Int32(0), Bson::Double(f64::NAN), Ordering::Greater),
        ];
        for (i, d, want) in cases {
            assert_eq!(cmp_bson(&i, &d), want, "{i:?} vs {d:?}");
            assert_eq!(cmp_bson(&d, &i), want.reverse(), "{d:?} vs {i:?}");
        }
    }

    #[test]
    fn type_rank_orders_mixed_types() {
        let ordered = [
            Bson::MinKey,
            Bson::Null,
            Bson::Int32(5),
            Bson::String("a".into()),
            Bson::Document(doc! {}),
            Bson::Array(vec![]),
            Bson::ObjectId(ObjectId::from_bytes([0; 12])),
            Bson::Boolean(false),
            Bson::DateTime(DateTime::from_millis(0)),
            Bson::MaxKey,
        ];
        for w in ordered.windows(2) {
            assert_eq!(
                cmp_bson(&w[0], &w[1]),
                Ordering::Less,
                "{:?} < {:?}",
                w[0],
                w[1]
            );
        }
    }

    #[test]
    fn documents_compare_field_by_field() {
        let a = Bson::Document(doc! {"a": 1, "b": 2});
        let b = Bson::Document(doc! {"a": 1, "b": 3});
        let c = Bson::Document(doc! {"a": 1});
        assert_eq!(cmp_bson(&a, &b), Ordering::Less);
        assert_eq!(cmp_bson(&c, &a), Ordering::Less);
        assert_eq!(
            cmp_bson(
                &Bson::Array(vec![1.into()]),
                &Bson::Array(vec![1.into(), 0.into()])
            ),
            Ordering::Less
        );
    }
}
