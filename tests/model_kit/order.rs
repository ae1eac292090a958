//! MongoDB's BSON order, written again from the server's rules for the value types the model
//! generates, so the oracle shares no code with the engine it judges.
//!
//! Values of different canonical types order by type alone; numbers of every type compare by
//! exact numeric value (an `Int64` is compared with a `Double` without rounding either).

use std::cmp::Ordering;
use tsbucket::bson::{Bson, Document};

/// The server's `canonicalizeBSONType` for the types the model uses.
pub fn canonical_type(v: &Bson) -> i32 {
    match v {
        Bson::MinKey => -1,
        Bson::Undefined => 0,
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

/// True for Int32, Int64 and Double.
pub fn is_number(v: &Bson) -> bool {
    matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))
}

/// An integer and a double compared exactly: `2^53 + 1` is greater than `2^53` as a double.
fn cmp_int_double(i: i64, f: f64) -> Ordering {
    // NaN sorts below every number.
    if f.is_nan() {
        return Ordering::Greater;
    }
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f >= TWO_63 {
        return Ordering::Less;
    }
    if f < -TWO_63 {
        return Ordering::Greater;
    }
    let whole = f.trunc();
    // In range and integral, so the conversion is exact.
    match i.cmp(&(whole as i64)) {
        Ordering::Equal => 0.0f64.partial_cmp(&(f - whole)).unwrap_or(Ordering::Equal),
        o => o,
    }
}

fn cmp_numbers(a: &Bson, b: &Bson) -> Ordering {
    let int = |v: &Bson| match v {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        _ => None,
    };
    let dbl = |v: &Bson| match v {
        Bson::Double(d) => Some(*d),
        _ => None,
    };
    match (int(a), int(b), dbl(a), dbl(b)) {
        (Some(x), Some(y), _, _) => x.cmp(&y),
        (Some(x), _, _, Some(y)) => cmp_int_double(x, y),
        (_, Some(y), Some(x), _) => cmp_int_double(y, x).reverse(),
        (_, _, Some(x), Some(y)) => match (x.is_nan(), y.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            // -0.0 and 0.0 are equal.
            _ => x.partial_cmp(&y).unwrap_or(Ordering::Equal),
        },
        _ => unreachable!("cmp_numbers on non-numbers {a:?} {b:?}"),
    }
}

/// Documents compare element by element: canonical type, then field name, then value; a
/// prefix sorts first.
pub fn cmp_docs(a: &Document, b: &Document) -> Ordering {
    let mut ia = a.iter();
    let mut ib = b.iter();
    loop {
        match (ia.next(), ib.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((ka, va)), Some((kb, vb))) => {
                let o = canonical_type(va)
                    .cmp(&canonical_type(vb))
                    .then_with(|| ka.as_bytes().cmp(kb.as_bytes()))
                    .then_with(|| cmp(va, vb));
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

/// MongoDB's total order over BSON values.
pub fn cmp(a: &Bson, b: &Bson) -> Ordering {
    let o = canonical_type(a).cmp(&canonical_type(b));
    if o != Ordering::Equal {
        return o;
    }
    match (a, b) {
        _ if is_number(a) => cmp_numbers(a, b),
        (Bson::String(x), Bson::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Bson::Document(x), Bson::Document(y)) => cmp_docs(x, y),
        // An array compares like the document {"0": .., "1": ..}: field names agree position
        // by position, so only types and values decide.
        (Bson::Array(x), Bson::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let o = canonical_type(p)
                    .cmp(&canonical_type(q))
                    .then_with(|| cmp(p, q));
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.timestamp_millis().cmp(&y.timestamp_millis()),
        (Bson::Null, Bson::Null) | (Bson::Undefined, Bson::Undefined) => Ordering::Equal,
        (Bson::MinKey, Bson::MinKey) | (Bson::MaxKey, Bson::MaxKey) => Ordering::Equal,
        _ => unreachable!("the model does not generate {a:?} / {b:?}"),
    }
}

/// Equal in MongoDB's order (`1 == 1.0 == NumberLong(1)`, `-0.0 == 0`).
pub fn equal(a: &Bson, b: &Bson) -> bool {
    cmp(a, b) == Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_integers_and_doubles_compare_exactly() {
        let two53 = 9_007_199_254_740_992i64;
        assert_eq!(
            cmp(&Bson::Int64(two53 + 1), &Bson::Double(two53 as f64)),
            Ordering::Greater
        );
        assert_eq!(
            cmp(
                &Bson::Int64(i64::MAX),
                &Bson::Double(9_223_372_036_854_775_808.0)
            ),
            Ordering::Less
        );
        assert!(equal(
            &Bson::Int64(i64::MIN),
            &Bson::Double(-9_223_372_036_854_775_808.0)
        ));
        assert!(equal(&Bson::Double(-0.0), &Bson::Int32(0)));
        assert_eq!(cmp(&Bson::Int32(-3), &Bson::Double(-2.5)), Ordering::Less);
        assert_eq!(
            cmp(&Bson::Double(-2.5), &Bson::Int64(-3)),
            Ordering::Greater
        );
    }
}
