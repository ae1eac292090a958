//! Typed column vectors of an open bucket: values are appended straight from raw BSON without
//! building `Bson` values for the common scalar types, and turned into `Bson` only when the
//! bucket is read or flushed.

use super::control::fold_extreme;
pub use crate::doc::to_bson;
use crate::order::{cmp_bson, type_rank};
use crate::sums::SumFold;
use bson::oid::ObjectId;
use bson::raw::RawBsonRef;
use bson::spec::ElementType;
use bson::{Bson, DateTime};
use std::cmp::Ordering;

/// Values of one column, typed while all share one BSON type.
#[derive(Debug, Clone)]
pub enum Data {
    /// All Int32.
    I32(Vec<i32>),
    /// All Int64.
    I64(Vec<i64>),
    /// All Double.
    F64(Vec<f64>),
    /// All DateTime (milliseconds).
    Date(Vec<i64>),
    /// All String.
    Str(Vec<String>),
    /// All ObjectId.
    Oid(Vec<ObjectId>),
    /// All Boolean.
    Bool(Vec<bool>),
    /// Anything else, or a mix of types.
    Any(Vec<Bson>),
}

/// Canonical type rank of a raw element type (see [`crate::order::type_rank`]).
pub fn rank_of(t: ElementType) -> u8 {
    match t {
        ElementType::MinKey => 0,
        ElementType::Undefined => 1,
        ElementType::Null => 5,
        ElementType::Int32 | ElementType::Int64 | ElementType::Double | ElementType::Decimal128 => {
            10
        }
        ElementType::String | ElementType::Symbol => 15,
        ElementType::EmbeddedDocument => 20,
        ElementType::Array => 25,
        ElementType::Binary => 30,
        ElementType::ObjectId => 35,
        ElementType::Boolean => 40,
        ElementType::DateTime => 45,
        ElementType::Timestamp => 47,
        ElementType::RegularExpression => 50,
        ElementType::DbPointer => 55,
        ElementType::JavaScriptCode => 60,
        ElementType::JavaScriptCodeWithScope => 65,
        ElementType::MaxKey => 127,
    }
}

impl Data {
    /// An empty column typed for its first value.
    pub fn for_value(v: RawBsonRef<'_>) -> Data {
        match v {
            RawBsonRef::Int32(_) => Data::I32(Vec::new()),
            RawBsonRef::Int64(_) => Data::I64(Vec::new()),
            RawBsonRef::Double(_) => Data::F64(Vec::new()),
            RawBsonRef::DateTime(_) => Data::Date(Vec::new()),
            RawBsonRef::String(_) => Data::Str(Vec::new()),
            RawBsonRef::ObjectId(_) => Data::Oid(Vec::new()),
            RawBsonRef::Boolean(_) => Data::Bool(Vec::new()),
            _ => Data::Any(Vec::new()),
        }
    }

    /// An empty column for values of BSON element type `kind`, with room for `n`.
    pub fn for_kind(kind: u8, n: usize) -> Data {
        match kind {
            0x10 => Data::I32(Vec::with_capacity(n)),
            0x12 => Data::I64(Vec::with_capacity(n)),
            0x01 => Data::F64(Vec::with_capacity(n)),
            0x09 => Data::Date(Vec::with_capacity(n)),
            0x02 => Data::Str(Vec::with_capacity(n)),
            0x07 => Data::Oid(Vec::with_capacity(n)),
            0x08 => Data::Bool(Vec::with_capacity(n)),
            _ => Data::Any(Vec::with_capacity(n)),
        }
    }

    /// The element type [`Data::for_kind`] makes this column for (null for [`Data::Any`]).
    pub fn kind(&self) -> u8 {
        match self {
            Data::I32(_) => 0x10,
            Data::I64(_) => 0x12,
            Data::F64(_) => 0x01,
            Data::Date(_) => 0x09,
            Data::Str(_) => 0x02,
            Data::Oid(_) => 0x07,
            Data::Bool(_) => 0x08,
            Data::Any(_) => 0x0A,
        }
    }

    /// Appends the value of element type `kind` whose bytes are `value`, for the scalar types
    /// [`Data::for_kind`] types (and null). False, with nothing appended, when the bytes are
    /// not such a value or the column holds another type.
    pub fn push_raw(&mut self, kind: u8, value: &[u8]) -> bool {
        fn le<const N: usize>(b: &[u8]) -> Option<[u8; N]> {
            b.get(..N)?.try_into().ok()
        }
        let ok = match (&mut *self, kind) {
            (Data::I32(c), 0x10) => le(value).map(|b| c.push(i32::from_le_bytes(b))),
            (Data::I64(c), 0x12) => le(value).map(|b| c.push(i64::from_le_bytes(b))),
            (Data::F64(c), 0x01) => le(value).map(|b| c.push(f64::from_le_bytes(b))),
            (Data::Date(c), 0x09) => le(value).map(|b| c.push(i64::from_le_bytes(b))),
            (Data::Oid(c), 0x07) => le(value).map(|b| c.push(ObjectId::from_bytes(b))),
            (Data::Bool(c), 0x08) => value.first().map(|&b| c.push(b != 0)),
            (Data::Str(c), 0x02) => {
                crate::doc::elements::string_value(value).map(|s| c.push(s.to_string()))
            }
            (Data::Any(c), 0x0A) => {
                c.push(Bson::Null);
                Some(())
            }
            _ => None,
        };
        ok.is_some()
    }

    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Data::I32(v) => v.len(),
            Data::I64(v) | Data::Date(v) => v.len(),
            Data::F64(v) => v.len(),
            Data::Str(v) => v.len(),
            Data::Oid(v) => v.len(),
            Data::Bool(v) => v.len(),
            Data::Any(v) => v.len(),
        }
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a value, widening the column to `Any` when its type differs.
    pub fn push(&mut self, v: RawBsonRef<'_>) {
        match (&mut *self, v) {
            (Data::I32(c), RawBsonRef::Int32(x)) => c.push(x),
            (Data::I64(c), RawBsonRef::Int64(x)) => c.push(x),
            (Data::F64(c), RawBsonRef::Double(x)) => c.push(x),
            (Data::Date(c), RawBsonRef::DateTime(x)) => c.push(x.timestamp_millis()),
            (Data::Str(c), RawBsonRef::String(x)) => c.push(x.to_string()),
            (Data::Oid(c), RawBsonRef::ObjectId(x)) => c.push(x),
            (Data::Bool(c), RawBsonRef::Boolean(x)) => c.push(x),
            (Data::Any(c), v) => c.push(to_bson(v)),
            (_, v) => {
                self.widen();
                if let Data::Any(c) = self {
                    c.push(to_bson(v));
                }
            }
        }
    }

    fn widen(&mut self) {
        let n = self.len();
        let all: Vec<Bson> = (0..n).map(|i| self.get(i)).collect();
        *self = Data::Any(all);
    }

    /// The values as a typed slice for the column codecs; `None` for [`Data::Any`].
    pub fn typed(&self) -> Option<crate::codec::Typed<'_>> {
        use crate::codec::Typed;
        Some(match self {
            Data::I32(v) => Typed::I32(v),
            Data::I64(v) => Typed::I64(v),
            Data::F64(v) => Typed::F64(v),
            Data::Date(v) => Typed::Date(v),
            Data::Str(v) => Typed::Str(v),
            Data::Oid(v) => Typed::Oid(v),
            Data::Bool(v) => Typed::Bool(v),
            Data::Any(_) => return None,
        })
    }

    /// Value `i` as `Bson` (`Null` past the end, which callers never ask for).
    pub fn get(&self, i: usize) -> Bson {
        let g = |o: Option<Bson>| o.unwrap_or(Bson::Null);
        match self {
            Data::I32(v) => g(v.get(i).map(|&x| Bson::Int32(x))),
            Data::I64(v) => g(v.get(i).map(|&x| Bson::Int64(x))),
            Data::F64(v) => g(v.get(i).map(|&x| Bson::Double(x))),
            Data::Date(v) => g(v.get(i).map(|&x| Bson::DateTime(DateTime::from_millis(x)))),
            Data::Str(v) => g(v.get(i).map(|x| Bson::String(x.clone()))),
            Data::Oid(v) => g(v.get(i).map(|&x| Bson::ObjectId(x))),
            Data::Bool(v) => g(v.get(i).map(|&x| Bson::Boolean(x))),
            Data::Any(v) => g(v.get(i).cloned()),
        }
    }

    /// The sum of the values in stored order under [`crate::sums`]' rules, `None` when the
    /// column has a non-numeric value. Typed columns add without building `Bson` values.
    pub fn sum(&self) -> Option<Bson> {
        match self {
            Data::I32(v) if !v.is_empty() => {
                Some(exact(v.iter().map(|&x| i128::from(x)).sum(), true))
            }
            Data::I64(v) if !v.is_empty() => {
                Some(exact(v.iter().map(|&x| i128::from(x)).sum(), false))
            }
            Data::F64(v) => {
                let (&first, rest) = v.split_first()?;
                Some(Bson::Double(rest.iter().fold(first, |a, &x| a + x)))
            }
            Data::Any(v) => {
                let mut f = SumFold::default();
                v.iter().for_each(|x| f.add(x));
                f.finish()
            }
            _ => None,
        }
    }

    /// Minimum and maximum under MongoDB's order (element-wise for documents and arrays).
    pub fn min_max(&self) -> Option<(Bson, Bson)> {
        self.min_max_from(0)
    }

    /// [`Data::min_max`] of the values from position `from` on.
    fn min_max_from(&self, from: usize) -> Option<(Bson, Bson)> {
        fn mm<T: Copy>(v: &[T], lt: impl Fn(T, T) -> bool) -> Option<(T, T)> {
            let (&first, rest) = v.split_first()?;
            let mut lo = first;
            let mut hi = first;
            for &x in rest {
                if lt(x, lo) {
                    lo = x;
                }
                if lt(hi, x) {
                    hi = x;
                }
            }
            Some((lo, hi))
        }
        // NaN sorts below every other number in MongoDB's order.
        let flt = |a: f64, b: f64| match (a.is_nan(), b.is_nan()) {
            (true, false) => true,
            (false, false) => a < b,
            _ => false,
        };
        fn tail<T>(v: &[T], from: usize) -> &[T] {
            v.get(from..).unwrap_or_default()
        }
        match self {
            Data::I32(v) => {
                mm(tail(v, from), |a, b| a < b).map(|(a, b)| (Bson::Int32(a), Bson::Int32(b)))
            }
            Data::I64(v) => {
                mm(tail(v, from), |a, b| a < b).map(|(a, b)| (Bson::Int64(a), Bson::Int64(b)))
            }
            Data::F64(v) => mm(tail(v, from), flt).map(|(a, b)| (Bson::Double(a), Bson::Double(b))),
            Data::Date(v) => mm(tail(v, from), |a, b| a < b).map(|(a, b)| {
                (
                    Bson::DateTime(DateTime::from_millis(a)),
                    Bson::DateTime(DateTime::from_millis(b)),
                )
            }),
            Data::Oid(v) => mm(tail(v, from), |a, b| a.bytes() < b.bytes())
                .map(|(a, b)| (Bson::ObjectId(a), Bson::ObjectId(b))),
            Data::Bool(v) => {
                mm(tail(v, from), |a, b| !a & b).map(|(a, b)| (Bson::Boolean(a), Bson::Boolean(b)))
            }
            Data::Str(v) => {
                let v = tail(v, from);
                let lo = v.iter().min_by(|a, b| a.as_bytes().cmp(b.as_bytes()))?;
                let hi = v.iter().max_by(|a, b| a.as_bytes().cmp(b.as_bytes()))?;
                Some((Bson::String(lo.clone()), Bson::String(hi.clone())))
            }
            Data::Any(v) => {
                let (first, rest) = tail(v, from).split_first()?;
                let mut lo = first.clone();
                let mut hi = first.clone();
                for x in rest {
                    fold_extreme(&mut lo, x, Ordering::Less);
                    fold_extreme(&mut hi, x, Ordering::Greater);
                }
                Some((lo, hi))
            }
        }
    }
}

/// An exact integer sum as [`Data::sum`] gives it: Int32 for a column of Int32 whose sum fits,
/// else Int64 where it fits, else the nearest Double.
fn exact(s: i128, all_i32: bool) -> Bson {
    if let (true, Ok(x)) = (all_i32, i32::try_from(s)) {
        Bson::Int32(x)
    } else if let Ok(x) = i64::try_from(s) {
        Bson::Int64(x)
    } else {
        Bson::Double(s as f64)
    }
}

/// [`Data::min_max`] and [`Data::sum`] of a column that only grows, kept up to date: each
/// [`RunningStats::update`] reads only the values appended since the one before, and the
/// answers are those of reading every value.
#[derive(Debug, Clone, Default)]
pub struct RunningStats {
    seen: usize,
    bounds: Option<(Bson, Bson)>,
    int: i128,
    dbl: Option<f64>,
    fold: SumFold,
}

impl RunningStats {
    /// Takes in the values of `d` past those seen before. `d` must be the column seen before
    /// with values appended, of the same type.
    pub fn update(&mut self, d: &Data) {
        let from = self.seen;
        self.seen = d.len();
        if let Some((lo, hi)) = d.min_max_from(from) {
            // The earliest extreme wins ties, as in one pass over every value.
            match &mut self.bounds {
                Some((l, h)) => {
                    if cmp_bson(&lo, l) == Ordering::Less {
                        *l = lo;
                    }
                    if cmp_bson(&hi, h) == Ordering::Greater {
                        *h = hi;
                    }
                }
                None => self.bounds = Some((lo, hi)),
            }
        }
        match d {
            Data::I32(v) => self.int += v.iter().skip(from).map(|&x| i128::from(x)).sum::<i128>(),
            Data::I64(v) => self.int += v.iter().skip(from).map(|&x| i128::from(x)).sum::<i128>(),
            Data::F64(v) => {
                for &x in v.iter().skip(from) {
                    self.dbl = Some(self.dbl.map_or(x, |a| a + x));
                }
            }
            Data::Any(v) => v.iter().skip(from).for_each(|x| self.fold.add(x)),
            _ => {}
        }
    }

    /// [`Data::min_max`] of the values taken in.
    pub fn min_max(&self) -> Option<(Bson, Bson)> {
        self.bounds.clone()
    }

    /// [`Data::sum`] of `d`, the column last taken in.
    pub fn sum(&self, d: &Data) -> Option<Bson> {
        match d {
            Data::I32(v) if !v.is_empty() => Some(exact(self.int, true)),
            Data::I64(v) if !v.is_empty() => Some(exact(self.int, false)),
            Data::F64(_) => self.dbl.map(Bson::Double),
            Data::Any(_) => self.fold.finish(),
            _ => None,
        }
    }
}

/// True when `a` and `b` have the same canonical type (schema class).
pub fn same_class(a: &Bson, t: ElementType) -> bool {
    type_rank(a) == rank_of(t)
}

/// Compares two values under MongoDB's order (re-exported for the builder's tests).
pub fn cmp(a: &Bson, b: &Bson) -> Ordering {
    cmp_bson(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widening_keeps_values_and_types() {
        let mut d = Data::for_value(RawBsonRef::Int32(1));
        d.push(RawBsonRef::Int32(1));
        d.push(RawBsonRef::Int64(2));
        d.push(RawBsonRef::Double(0.5));
        assert_eq!(d.len(), 3);
        assert_eq!(d.get(0), Bson::Int32(1));
        assert_eq!(d.get(1), Bson::Int64(2));
        let (lo, hi) = d.min_max().unwrap();
        assert_eq!(lo, Bson::Double(0.5));
        assert_eq!(hi, Bson::Int64(2));
    }

    #[test]
    fn typed_sums_agree_with_the_generic_fold() {
        let cases: Vec<Vec<RawBsonRef<'_>>> = vec![
            vec![RawBsonRef::Int32(i32::MAX), RawBsonRef::Int32(1)],
            vec![RawBsonRef::Int32(-4), RawBsonRef::Int32(9)],
            vec![RawBsonRef::Int64(i64::MAX), RawBsonRef::Int64(i64::MAX)],
            vec![RawBsonRef::Int64(-3), RawBsonRef::Int64(7)],
            vec![RawBsonRef::Double(-0.0)],
            vec![
                RawBsonRef::Double(0.1),
                RawBsonRef::Double(0.2),
                RawBsonRef::Double(0.3),
            ],
            vec![
                RawBsonRef::Int32(1),
                RawBsonRef::Double(0.5),
                RawBsonRef::Int64(2),
            ],
            vec![RawBsonRef::Int32(1), RawBsonRef::String("x")],
            vec![RawBsonRef::Boolean(true)],
        ];
        for vals in cases {
            let mut d = Data::for_value(vals[0]);
            for &v in &vals {
                d.push(v);
            }
            let generic: Vec<Option<Bson>> = (0..d.len()).map(|i| Some(d.get(i))).collect();
            let (a, b) = (d.sum(), crate::sums::column_sum(&generic));
            let same = match (&a, &b) {
                (Some(Bson::Double(x)), Some(Bson::Double(y))) => x.to_bits() == y.to_bits(),
                _ => a == b,
            };
            assert!(same, "{vals:?}: {a:?} vs {b:?}");
        }
    }

    #[test]
    fn raw_pushes_match_typed_pushes() {
        let d = bson::doc! {
            "i": 7, "l": -9i64, "f": 2.5, "s": "héllo", "t": bson::DateTime::from_millis(-3),
            "o": ObjectId::from_bytes([7; 12]), "b": true, "n": Bson::Null,
        };
        let raw = bson::RawDocumentBuf::try_from(&d).unwrap();
        for e in crate::doc::elements::Elements::new(raw.as_bytes()) {
            let v = raw
                .get(std::str::from_utf8(e.name).unwrap())
                .unwrap()
                .unwrap();
            let mut typed = Data::for_value(v);
            typed.push(v);
            let mut from_raw = Data::for_kind(e.kind, 1);
            assert!(from_raw.push_raw(e.kind, e.value), "{:?}", e.name);
            assert_eq!(from_raw.get(0), typed.get(0));
            if e.kind != 0x0A {
                // Null has no bytes; every other type needs some.
                assert!(!from_raw.push_raw(e.kind, &[]));
                assert_eq!(from_raw.len(), 1);
            }
        }
    }

    #[test]
    fn nan_is_the_smallest_double() {
        let mut d = Data::for_value(RawBsonRef::Double(1.0));
        for x in [1.0, f64::NAN, -5.0] {
            d.push(RawBsonRef::Double(x));
        }
        let (lo, hi) = d.min_max().unwrap();
        assert!(matches!(lo, Bson::Double(x) if x.is_nan()));
        assert_eq!(hi, Bson::Double(1.0));
    }
}
