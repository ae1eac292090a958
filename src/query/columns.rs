//! A bucket's column decoded for the columnar operators: segment columns are decoded straight
//! into typed vectors (no `Bson` per value for numbers and dates). Where a column comes from
//! is [`crate::query::source`]'s business.

use crate::query::aggregate::accumulators::Values;
use super::slots::Slots;
use crate::codec::{
    column_codec, decode_column, decode_f64_dense, decode_i64_dense, ids,
    CodecError,
};

use crate::segment::Segment;
use bson::Bson;
use std::sync::Arc;

/// One column of a bucket, decoded for aggregation.
#[derive(Debug, Clone, PartialEq)]
pub enum Col {
    /// The bucket has no such field.
    Missing,
    /// Int32 values (widened).
    Int32(Slots<i64>),
    /// Int64 values.
    Int64(Slots<i64>),
    /// Doubles.
    Double(Slots<f64>),
    /// Dates, epoch milliseconds.
    Date(Slots<i64>),
    /// Anything else (mixed types, strings, documents, ...).
    Bson(Vec<Option<Bson>>),
}

impl Col {
    /// Hands a decoded integer or date column's vector back for the next decode on this
    /// thread (see [`crate::codec::spare`]); a reader calls it when done with a bucket.
    pub fn recycle(self) {
        match self {
            Col::Int32(Slots::Dense(v)) | Col::Int64(Slots::Dense(v)) | Col::Date(Slots::Dense(v)) => {
                crate::codec::spare::give_back(v)
            }
            // Decimal doubles are decoded in an integer vector; the pass back to one keeps its
            // allocation, and costs less than a fresh zeroed vector for the next column.
            Col::Double(Slots::Dense(v)) => {
                crate::codec::spare::give_back(v.into_iter().map(|x| x.to_bits() as i64).collect())
            }
            _ => {}
        }
    }

    /// The values in borrowed form for accumulators.
    pub fn values(&self) -> Values<'_> {
        match self {
            Col::Missing => Values::Missing,
            Col::Int32(v) => Values::Int32(v.view()),
            Col::Int64(v) => Values::Int64(v.view()),
            Col::Double(v) => Values::Double(v.view()),
            Col::Date(v) => Values::Date(v.view()),
            Col::Bson(v) => Values::Bson(v),
        }
    }

    /// The value of row `r` (`None` where missing), borrowed where the column holds `Bson`.
    pub fn value(&self, r: usize) -> Option<std::borrow::Cow<'_, Bson>> {
        use std::borrow::Cow;
        Some(match self {
            Col::Missing => return None,
            Col::Int32(v) => Cow::Owned(Bson::Int32(i32::try_from(v.get(r)?).ok()?)),
            Col::Int64(v) => Cow::Owned(Bson::Int64(v.get(r)?)),
            Col::Double(v) => Cow::Owned(Bson::Double(v.get(r)?)),
            Col::Date(v) => Cow::Owned(Bson::DateTime(bson::DateTime::from_millis(v.get(r)?))),
            Col::Bson(v) => Cow::Borrowed(v.get(r)?.as_ref()?),
        })
    }

    /// The value of row `r` of a typed column as its type and bits (`None` where missing or
    /// not typed): equal pairs are identical values.
    #[inline]
    pub fn typed_bits(&self, r: usize) -> Option<(u8, u64)> {
        match self {
            Col::Int32(v) => Some((1, v.get(r)? as u64)),
            Col::Int64(v) => Some((2, v.get(r)? as u64)),
            Col::Double(v) => Some((3, v.get(r)?.to_bits())),
            Col::Date(v) => Some((4, v.get(r)? as u64)),
            Col::Missing | Col::Bson(_) => None,
        }
    }

    /// Row `r`'s value against `b` in BSON order, without building it: `None` when the row has
    /// no typed value or `b` is not a number or date of a kind compared here.
    pub fn cmp_typed(&self, r: usize, b: &Bson) -> Option<std::cmp::Ordering> {
        use crate::order::{cmp_f64, cmp_int_double};
        Some(match (self, b) {
            (Col::Int32(v) | Col::Int64(v), Bson::Int32(y)) => v.get(r)?.cmp(&i64::from(*y)),
            (Col::Int32(v) | Col::Int64(v), Bson::Int64(y)) => v.get(r)?.cmp(y),
            (Col::Int32(v) | Col::Int64(v), Bson::Double(y)) => cmp_int_double(v.get(r)?, *y),
            (Col::Double(v), Bson::Int32(y)) => cmp_int_double(i64::from(*y), v.get(r)?).reverse(),
            (Col::Double(v), Bson::Int64(y)) => cmp_int_double(*y, v.get(r)?).reverse(),
            (Col::Double(v), Bson::Double(y)) => cmp_f64(v.get(r)?, *y),
            (Col::Date(v), Bson::DateTime(y)) => v.get(r)?.cmp(&y.timestamp_millis()),
            _ => return None,
        })
    }

    /// Dates as milliseconds per row (`None` where missing or not a date).
    pub fn dates(&self, rows: usize) -> std::borrow::Cow<'_, [Option<i64>]> {
        match self {
            Col::Date(Slots::Rows(v)) => std::borrow::Cow::Borrowed(v),
            Col::Date(v) => v.view().to_rows().into(),
            other => (0..rows)
                .map(|r| match other.values().get(r) {
                    Some(Bson::DateTime(d)) => Some(d.timestamp_millis()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .into(),
        }
    }

    /// A typed column when every present value has one of the typed BSON types.
    pub fn from_bson(values: Vec<Option<Bson>>) -> Col {
        let kind = values.iter().flatten().next().map(std::mem::discriminant);
        let uniform = kind.is_some_and(|k| {
            values
                .iter()
                .flatten()
                .all(|v| std::mem::discriminant(v) == k)
        });
        if !uniform {
            return if kind.is_none() {
                Col::Missing
            } else {
                Col::Bson(values)
            };
        }
        let ints = |f: fn(&Bson) -> Option<i64>| -> Slots<i64> {
            Slots::from_rows(values.iter().map(|v| v.as_ref().and_then(f)).collect())
        };
        match values.iter().flatten().next() {
            Some(Bson::Int32(_)) => Col::Int32(ints(|v| match v {
                Bson::Int32(x) => Some(i64::from(*x)),
                _ => None,
            })),
            Some(Bson::Int64(_)) => Col::Int64(ints(|v| match v {
                Bson::Int64(x) => Some(*x),
                _ => None,
            })),
            Some(Bson::DateTime(_)) => Col::Date(ints(|v| match v {
                Bson::DateTime(x) => Some(x.timestamp_millis()),
                _ => None,
            })),
            Some(Bson::Double(_)) => Col::Double(Slots::from_rows(
                values
                    .iter()
                    .map(|v| match v {
                        Some(Bson::Double(x)) => Some(*x),
                        _ => None,
                    })
                    .collect(),
            )),
            _ => Col::Bson(values),
        }
    }

    /// Decodes an encoded column, typed when its codec holds one numeric or date type.
    pub fn decode(data: &[u8], rows: usize) -> std::result::Result<Col, CodecError> {
        let typed = match column_codec(data) {
            Some(ids::INT32) => decode_i64_dense(data, rows)?.map(|d| Col::Int32(d.into())),
            Some(ids::INT64) => decode_i64_dense(data, rows)?.map(|d| Col::Int64(d.into())),
            Some(ids::DATETIME) => decode_i64_dense(data, rows)?.map(|d| Col::Date(d.into())),
            Some(ids::DOUBLE) => decode_f64_dense(data, rows)?.map(|d| Col::Double(d.into())),
            _ => None,
        };
        match typed {
            Some(c) => Ok(c),
            None => Ok(Col::from_bson(decode_column(data, rows)?)),
        }
    }
}

/// The same column names, matched to each segment's table of names once (see
/// [`crate::segment::Segment::name_ids`]), for a reader of bucket after bucket.
#[derive(Default)]
pub struct NameIds {
    seg: Option<Arc<Segment>>,
    ids: Vec<Option<u32>>,
}

impl NameIds {
    /// `names` in `seg`'s table; `names` must be the same on every call.
    pub fn of(&mut self, seg: &Arc<Segment>, names: &[&str]) -> &[Option<u32>] {
        if !self.seg.as_ref().is_some_and(|s| Arc::ptr_eq(s, seg)) {
            self.ids = seg.name_ids(names);
            self.seg = Some(seg.clone());
        }
        &self.ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::encode_column;
    use bson::DateTime;

    proptest::proptest! {
        /// A typed value compared where it lies agrees with the built value compared in BSON
        /// order, wherever the typed comparison answers.
        #[test]
        fn typed_comparisons_agree_with_bson_order(
            ints in proptest::collection::vec(proptest::prelude::any::<i64>(), 1..8),
            doubles in proptest::collection::vec(proptest::prelude::any::<f64>(), 1..8),
            small in -3i64..3,
        ) {
            let nan_and_edges = [f64::NAN, -0.0, 0.0, 9.007_199_254_740_993e15, -1e300];
            let doubles: Vec<f64> = doubles.into_iter().chain(nan_and_edges).collect();
            let ints: Vec<i64> = ints.into_iter().chain([small, i64::MIN, i64::MAX]).collect();
            let cols = [
                Col::Int64(Slots::Dense(ints.clone())),
                Col::Int32(Slots::Dense(ints.iter().map(|&x| i64::from(x as i32)).collect())),
                Col::Double(Slots::Dense(doubles.clone())),
                Col::Date(Slots::Dense(ints.clone())),
            ];
            let mut others: Vec<Bson> = vec![Bson::Int32(small as i32), Bson::String("x".into())];
            others.extend(ints.iter().map(|&x| Bson::Int64(x)));
            others.extend(doubles.iter().map(|&x| Bson::Double(x)));
            others.extend(ints.iter().map(|&x| Bson::DateTime(DateTime::from_millis(x))));
            for col in &cols {
                let rows = match col {
                    Col::Double(Slots::Dense(v)) => v.len(),
                    Col::Int32(Slots::Dense(v)) | Col::Int64(Slots::Dense(v)) | Col::Date(Slots::Dense(v)) => v.len(),
                    _ => 0,
                };
                for r in 0..rows {
                    let Some(v) = col.value(r) else { continue };
                    for b in &others {
                        if let Some(o) = col.cmp_typed(r, b) {
                            proptest::prop_assert_eq!(o, crate::order::cmp_bson(&v, b), "{:?} {:?}", v, b);
                        }
                    }
                }
            }
        }
    }

    fn round(values: Vec<Option<Bson>>) -> Col {
        let mut buf = Vec::new();
        encode_column(&values, &mut buf);
        Col::decode(&buf, values.len()).unwrap()
    }

    #[test]
    fn encoded_columns_decode_typed() {
        let n = |v: Vec<Option<Bson>>| v;
        assert_eq!(
            round(n(vec![Some(Bson::Int32(1)), None, Some(Bson::Int32(-4))])),
            Col::Int32(vec![Some(1), None, Some(-4)].into())
        );
        assert_eq!(
            round(n(vec![Some(Bson::Int64(1)), Some(Bson::Int64(7))])),
            Col::Int64(Slots::Dense(vec![1, 7]))
        );
        assert_eq!(
            round(n(vec![Some(Bson::Double(0.5)), None])),
            Col::Double(vec![Some(0.5), None].into())
        );
        assert_eq!(
            round(n(vec![Some(Bson::DateTime(DateTime::from_millis(5)))])),
            Col::Date(Slots::Dense(vec![5]))
        );
        // A constant column still comes back typed.
        assert_eq!(
            round(n(vec![Some(Bson::Int64(100)); 20])),
            Col::Int64(Slots::Dense(vec![100; 20]))
        );
        let mixed = n(vec![Some(Bson::Int32(1)), Some(Bson::Double(2.5))]);
        assert_eq!(round(mixed.clone()), Col::Bson(mixed));
        assert_eq!(round(n(vec![None, None])), Col::Missing);
    }
}
