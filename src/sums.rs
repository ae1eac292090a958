//! Per-field sums in a bucket's statistics, so `$sum` and `$avg` over whole buckets need no
//! decoding.
//!
//! `control.max` holds a hidden entry [`SUM_KEY`] whose value is a sub-document mapping each
//! top-level measurement field to the sum of its values in the bucket, for every field whose
//! values are all Int32, Int64 or Double (rows that lack the field are skipped; one value of
//! another type and the field has no sum). The time field, the meta field and the engine's
//! hidden columns have no sum. The result type follows MongoDB's `$sum`: Int32 when every value
//! is an Int32 and the sum fits, Int64 when every value is an integer and the sum fits in 64
//! bits, Double otherwise.
//!
//! Doubles are added in the bucket's row order as plain `f64` additions (`v1 + v2 + ... + vn`,
//! starting from the first value, so a one-row sum is the value itself, `-0.0` included).
//! Integer-only sums are exact; one that overflows 64 bits becomes the Double nearest to the
//! exact sum. Adding up bucket sums therefore may differ in the last bits from adding the same
//! rows one by one (MongoDB's own `$sum` uses compensated summation, which differs again).
//!
//! How to read them: [`bucket_sum`]. A field that `control.max` lacks has no value in the
//! bucket (it contributes nothing). A field that `control.max` has but the sums lack holds a
//! non-numeric value, or the bucket was written before sums existed: decode it.

use crate::bucket::BucketData;
use crate::bucket::BOOKKEEPING_PREFIX;
use bson::{Bson, Document};

/// Key of the sums sub-document in `control.max` (hidden: it starts with U+0001).
pub const SUM_KEY: &str = "\u{1}sum";

/// The sum of `field`'s values in a bucket whose `control.max` is `max`, if it is known.
pub fn bucket_sum<'a>(max: &'a Document, field: &str) -> Option<&'a Bson> {
    match max.get(SUM_KEY)? {
        Bson::Document(d) => d.get(field),
        _ => None,
    }
}

/// Running sum of one field under the rules of this module; feed values in row order.
#[derive(Debug, Clone, Copy, Default)]
pub struct SumFold {
    /// Exact sum of the integer values: 100,000 rows of i64 cannot overflow it.
    int: i128,
    /// Row-order `f64` sum of every value, ints converted (the Double result).
    dbl: f64,
    values: u32,
    saw_i64: bool,
    saw_double: bool,
    /// A value that is not a number: the field has no sum.
    spoiled: bool,
}

impl SumFold {
    /// Adds any value; a non-numeric one spoils the sum.
    #[inline]
    pub fn add(&mut self, v: &Bson) {
        match v {
            Bson::Int32(x) => self.add_i32(*x),
            Bson::Int64(x) => self.add_i64(*x),
            Bson::Double(x) => self.add_f64(*x),
            _ => self.spoiled = true,
        }
    }

    /// Adds an Int32.
    #[inline]
    pub fn add_i32(&mut self, x: i32) {
        self.int += i128::from(x);
        self.add_float(f64::from(x));
    }

    /// Adds an Int64.
    #[inline]
    pub fn add_i64(&mut self, x: i64) {
        self.int += i128::from(x);
        self.saw_i64 = true;
        self.add_float(x as f64);
    }

    /// Adds a Double.
    #[inline]
    pub fn add_f64(&mut self, x: f64) {
        self.saw_double = true;
        self.add_float(x);
    }

    #[inline]
    fn add_float(&mut self, x: f64) {
        // Starting from the first value rather than 0.0 keeps a lone -0.0 (0.0 + -0.0 = 0.0).
        self.dbl = if self.values == 0 { x } else { self.dbl + x };
        self.values += 1;
    }

    /// The sum, or `None` when no value was added or one was not a number.
    pub fn finish(&self) -> Option<Bson> {
        if self.spoiled || self.values == 0 {
            return None;
        }
        Some(if self.saw_double {
            Bson::Double(self.dbl)
        } else if let (false, Ok(x)) = (self.saw_i64, i32::try_from(self.int)) {
            Bson::Int32(x)
        } else if let Ok(x) = i64::try_from(self.int) {
            Bson::Int64(x)
        } else {
            Bson::Double(self.int as f64)
        })
    }
}

/// The sum of a column's present values, `None` if it has none or one is not a number.
pub fn column_sum(values: &[Option<Bson>]) -> Option<Bson> {
    let mut f = SumFold::default();
    for v in values.iter().flatten() {
        f.add(v);
        if f.spoiled {
            return None;
        }
    }
    f.finish()
}

/// True for columns that never get a sum.
pub(crate) fn excluded(name: &str, time_field: &str) -> bool {
    name == time_field || name.starts_with(BOOKKEEPING_PREFIX)
}

/// The sums sub-document of a bucket (empty when no field qualifies), fields in column order.
pub fn bucket_sums(b: &BucketData, time_field: &str) -> Document {
    b.columns
        .iter()
        .filter(|c| !excluded(&c.name, time_field))
        .filter_map(|c| Some((c.name.clone(), column_sum(&c.values)?)))
        .collect()
}

/// Sets a bucket's sums entry from its columns (removes it when no field qualifies).
pub fn set_bucket_sums(b: &mut BucketData, time_field: &str) {
    let sums = bucket_sums(b, time_field);
    if sums.is_empty() {
        b.max.remove(SUM_KEY);
    } else {
        b.max.insert(SUM_KEY, sums);
    }
}

/// The sums that a one-row bucket's `control.max` implies: each numeric value is its own sum.
/// Writers may leave them out of one-row buckets; readers put them back with this.
pub fn one_row_sums(max: &Document, time_field: &str) -> Document {
    max.iter()
        .filter(|(k, v)| {
            !excluded(k, time_field)
                && matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Checks a bucket's stored sums against its decoded columns. No entry is valid (buckets
/// written before sums existed); an entry must list exactly the qualifying fields, integers
/// equal with the right type, doubles within the error bound of row-order summation (another
/// writer may have added in another order). Returns what is wrong.
pub fn check_sums(b: &BucketData, time_field: &str) -> Result<(), String> {
    let stored = match b.max.get(SUM_KEY) {
        None => return Ok(()),
        Some(Bson::Document(d)) => d,
        Some(other) => {
            return Err(format!(
                "control.max.{SUM_KEY:?} is not a document: {other}"
            ))
        }
    };
    let expected = bucket_sums(b, time_field);
    for (k, want) in &expected {
        let Some(got) = stored.get(k) else {
            return Err(format!("no sum for numeric field {k:?}"));
        };
        let ok = match (got, want) {
            (Bson::Double(g), Bson::Double(w)) => {
                let col = b.columns.iter().find(|c| &c.name == k);
                let (n, abs) = col.map_or((0.0, 0.0), |c| {
                    c.values
                        .iter()
                        .flatten()
                        .fold((0.0, 0.0), |(n, a), v| (n + 1.0, a + as_f64(v).abs()))
                });
                doubles_agree(*g, *w, n, abs)
            }
            _ => got == want,
        };
        if !ok {
            return Err(format!(
                "sum of {k:?} is {got} but the data adds up to {want}"
            ));
        }
    }
    if let Some(k) = stored.keys().find(|k| !expected.contains_key(k.as_str())) {
        return Err(format!("sum for {k:?}, which has no numeric values"));
    }
    Ok(())
}

fn as_f64(v: &Bson) -> f64 {
    match v {
        Bson::Int32(x) => f64::from(*x),
        Bson::Int64(x) => *x as f64,
        Bson::Double(x) => *x,
        _ => 0.0,
    }
}

/// Two sums of the same `n` values whose magnitudes add up to `abs` agree when they differ by
/// no more than any order of `n - 1` rounded additions can make them (`(n-1) * 2^-53 * abs`,
/// doubled for headroom); infinities and NaN must match exactly.
fn doubles_agree(a: f64, b: f64, n: f64, abs: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() || !abs.is_finite() {
        return a == b || !abs.is_finite();
    }
    (a - b).abs() <= (n - 1.0).max(0.0) * abs * f64::EPSILON
}

#[cfg(test)]
#[allow(clippy::unwrap_used, reason = "test code: a panic is a test failure")]
mod tests {
    use super::*;
    use crate::bucket::Column;
    use bson::{doc, oid::ObjectId, DateTime};
    use proptest::prelude::*;

    fn sum(vals: &[Bson]) -> Option<Bson> {
        column_sum(&vals.iter().cloned().map(Some).collect::<Vec<_>>())
    }

    #[test]
    fn int32_sums_stay_int32_until_they_overflow() {
        assert_eq!(sum(&[Bson::Int32(1), Bson::Int32(2)]), Some(Bson::Int32(3)));
        assert_eq!(
            sum(&[Bson::Int32(i32::MAX), Bson::Int32(1)]),
            Some(Bson::Int64(i64::from(i32::MAX) + 1))
        );
        assert_eq!(
            sum(&[Bson::Int32(i32::MIN), Bson::Int32(-1)]),
            Some(Bson::Int64(i64::from(i32::MIN) - 1))
        );
    }

    #[test]
    fn one_int64_makes_the_sum_int64() {
        assert_eq!(sum(&[Bson::Int32(1), Bson::Int64(2)]), Some(Bson::Int64(3)));
    }

    #[test]
    fn int64_overflow_gives_the_nearest_double() {
        let s = sum(&[Bson::Int64(i64::MAX), Bson::Int64(i64::MAX), Bson::Int32(2)]);
        assert_eq!(s, Some(Bson::Double(2.0 * i64::MAX as f64)));
        // Overflow that comes back within range is exact.
        let s = sum(&[Bson::Int64(i64::MAX), Bson::Int64(1), Bson::Int64(-2)]);
        assert_eq!(s, Some(Bson::Int64(i64::MAX - 1)));
    }

    #[test]
    fn any_double_makes_a_row_order_double_sum() {
        let s = sum(&[Bson::Int32(1), Bson::Double(0.5), Bson::Int64(2)]);
        assert_eq!(s, Some(Bson::Double(3.5)));
        let s = sum(&[Bson::Double(0.1), Bson::Double(0.2), Bson::Double(0.3)]);
        assert_eq!(s, Some(Bson::Double(0.1 + 0.2 + 0.3)));
        match sum(&[Bson::Double(-0.0)]) {
            Some(Bson::Double(x)) => assert!(x == 0.0 && x.is_sign_negative()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn missing_rows_are_skipped_and_non_numbers_spoil() {
        let vals = vec![None, Some(Bson::Int32(4)), None, Some(Bson::Int32(5))];
        assert_eq!(column_sum(&vals), Some(Bson::Int32(9)));
        assert_eq!(column_sum(&[None, None]), None);
        assert_eq!(sum(&[Bson::Int32(1), Bson::String("2".into())]), None);
        assert_eq!(sum(&[Bson::Int32(1), Bson::Null]), None);
        let d: bson::Decimal128 = "1".parse().unwrap();
        assert_eq!(sum(&[Bson::Decimal128(d)]), None);
    }

    fn bucket(cols: Vec<(&str, Vec<Option<Bson>>)>) -> BucketData {
        let count = cols.first().map_or(0, |c| c.1.len()) as u32;
        BucketData {
            id: ObjectId::new(),
            meta: None,
            count,
            min: Document::new(),
            max: Document::new(),
            columns: cols
                .into_iter()
                .map(|(n, values)| Column {
                    name: n.into(),
                    values,
                })
                .collect(),
            shapes: vec![],
            row_shapes: vec![],
            bson_bytes: None,
        }
    }

    #[test]
    fn time_and_hidden_columns_get_no_sum() {
        let t = Some(Bson::DateTime(DateTime::from_millis(5)));
        let b = bucket(vec![
            ("t", vec![t.clone(), t]),
            ("\u{1}seq", vec![Some(Bson::Int64(1)), Some(Bson::Int64(2))]),
            ("v", vec![Some(Bson::Int32(1)), Some(Bson::Int32(2))]),
            ("s", vec![Some(Bson::String("x".into())), None]),
        ]);
        assert_eq!(bucket_sums(&b, "t"), doc! {"v": 3});
    }

    #[test]
    fn check_sums_catches_wrong_values_types_and_fields() {
        let mut b = bucket(vec![
            ("i", vec![Some(Bson::Int32(1)), Some(Bson::Int32(2))]),
            ("d", vec![Some(Bson::Double(0.25)), Some(Bson::Double(0.5))]),
        ]);
        assert!(check_sums(&b, "t").is_ok(), "no entry is valid");
        set_bucket_sums(&mut b, "t");
        assert!(check_sums(&b, "t").is_ok());
        for bad in [
            doc! {"i": 4, "d": 0.75},
            doc! {"i": 3_i64, "d": 0.75},
            doc! {"i": 3, "d": 0.76},
            doc! {"i": 3},
            doc! {"i": 3, "d": 0.75, "x": 1},
        ] {
            b.max.insert(SUM_KEY, bad.clone());
            assert!(check_sums(&b, "t").is_err(), "{bad}");
        }
        // Another summation order is within the tolerance.
        b.max
            .insert(SUM_KEY, doc! {"i": 3, "d": 0.75 + f64::EPSILON * 0.5});
        assert!(check_sums(&b, "t").is_ok());
    }

    #[test]
    fn one_row_sums_are_the_numeric_maxima() {
        let max =
            doc! {"t": DateTime::from_millis(1), "a": 1.5, "b": "x", "c": 7_i64, "\u{1}seq": 3_i64};
        assert_eq!(one_row_sums(&max, "t"), doc! {"a": 1.5, "c": 7_i64});
    }

    /// The definition, restated naively: exact integers, row-order doubles.
    fn brute(vals: &[Option<Bson>]) -> Option<Bson> {
        let present: Vec<&Bson> = vals.iter().flatten().collect();
        if present.is_empty() {
            return None;
        }
        let mut exact: i128 = 0;
        let mut all_i32 = true;
        let mut any_double = false;
        let mut acc: Option<f64> = None;
        for v in &present {
            let x = match v {
                Bson::Int32(x) => {
                    exact += i128::from(*x);
                    f64::from(*x)
                }
                Bson::Int64(x) => {
                    all_i32 = false;
                    exact += i128::from(*x);
                    *x as f64
                }
                Bson::Double(x) => {
                    any_double = true;
                    *x
                }
                _ => return None,
            };
            acc = Some(acc.map_or(x, |a| a + x));
        }
        Some(if any_double {
            Bson::Double(acc.unwrap())
        } else if all_i32 && i32::try_from(exact).is_ok() {
            Bson::Int32(exact as i32)
        } else if let Ok(x) = i64::try_from(exact) {
            Bson::Int64(x)
        } else {
            Bson::Double(exact as f64)
        })
    }

    fn value() -> impl Strategy<Value = Option<Bson>> {
        prop_oneof![
            2 => Just(None),
            4 => any::<i32>().prop_map(|x| Some(Bson::Int32(x))),
            2 => (-1000i32..1000).prop_map(|x| Some(Bson::Int32(x))),
            3 => any::<i64>().prop_map(|x| Some(Bson::Int64(x))),
            3 => (-1e6f64..1e6).prop_map(|x| Some(Bson::Double(x))),
            1 => Just(Some(Bson::Double(f64::NAN))),
            1 => Just(Some(Bson::String("s".into()))),
        ]
    }

    fn same(a: &Option<Bson>, b: &Option<Bson>) -> bool {
        match (a, b) {
            (Some(Bson::Double(x)), Some(Bson::Double(y))) => x.to_bits() == y.to_bits(),
            _ => a == b,
        }
    }

    proptest! {
        #[test]
        fn sum_equals_the_brute_force_sum(vals in prop::collection::vec(value(), 0..60)) {
            let got = column_sum(&vals);
            let want = brute(&vals);
            prop_assert!(same(&got, &want), "{:?} vs {:?}", got, want);
        }

        #[test]
        fn bucket_sums_check_against_their_own_rows(
            a in prop::collection::vec(value(), 1..40),
            seed in any::<u64>(),
        ) {
            let n = a.len();
            let b_col: Vec<Option<Bson>> = (0..n)
                .map(|i| Some(Bson::Int64((seed.rotate_left(i as u32) % 1000) as i64)))
                .collect();
            let mut b = bucket(vec![("a", a.clone()), ("b", b_col.clone())]);
            set_bucket_sums(&mut b, "t");
            prop_assert!(check_sums(&b, "t").is_ok());
            prop_assert!(same(&bucket_sum(&b.max, "a").cloned(), &brute(&a)));
            prop_assert!(same(&bucket_sum(&b.max, "b").cloned(), &brute(&b_col)));
        }
    }
}
