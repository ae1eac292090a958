//! The directory encoding of a bucket's sums (`control.max` key [`SUM_KEY`], see
//! [`crate::sums`]): one compact value instead of a document, since a sum per numeric field
//! per bucket is paid in every bucket of every segment.
//!
//! Format: `0x21 | kinds: 2 bits per candidate field | one value per kind != 0`.
//!
//! The candidate fields are the keys of `control.max` stored before this entry that are
//! neither the time field nor hidden and hold an Int32, Int64 or Double: only those can have a
//! sum (a column never mixes type classes, so a field with a numeric maximum holds only
//! numbers). Kinds, LSB first, zero-padded to whole bytes: 0 no sum, 1 Int32, 2 Int64,
//! 3 Double. An integer sum is stored as `svarint(sum - count * mid)` (wrapping), where `mid` is
//! the floored midpoint of the field's `control.min` and `control.max`: the sum of `count`
//! values between min and max lies within `count * (max - min) / 2` of that, 2 bytes instead
//! of 3 for an hour of 10 s samples of a percentage that wanders slowly.
//!
//! A Double sum is a byte `h`: `h = 0` and its 8 bytes, little-endian; or, for a sum that is
//! (within a few ulps) a decimal `m / 10^e` (sums of prices, percentages, durations with few
//! decimals), `h = e + 1` (`e <= 9`), `svarint(m - round(count * mid * 10^e))` with `mid =
//! (min + max) / 2` as doubles, and `svarint(d)`, where the sum's bits are those of the double
//! nearest to `m / 10^e` plus `d` (as i64). Writers pick the smallest of the eleven forms:
//! 5 bytes instead of 8 for the sum of such a percentage with 2 decimals.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use super::format::{put_svarint, Cursor};
use bson::{Bson, Document};

/// Value tag of the sums entry (only under the key [`SUM_KEY`] of `control.max`).
pub const TAG_SUMS: u8 = 0x21;

pub use crate::sums::SUM_KEY;

const KIND_NONE: u8 = 0;
const KIND_INT32: u8 = 1;
const KIND_INT64: u8 = 2;
const KIND_DOUBLE: u8 = 3;

/// A field that may have a sum: one stored before the sums entry in `control.max` that is
/// neither the time field nor hidden and holds an Int32, Int64 or Double there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate<'a> {
    pub name: &'a str,
    /// Its `control.min`, if any.
    pub min: Option<&'a Bson>,
    /// Its `control.max`.
    pub max: &'a Bson,
}

/// True when a `control.max` entry `name: v` is a [`Candidate`].
pub(crate) fn is_candidate(name: &str, v: &Bson, time_field: &str) -> bool {
    !crate::sums::excluded(name, time_field)
        && matches!(v, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))
}

/// The candidates of documents `min` and `max`, in order.
fn candidates<'a>(min: &'a Document, max: &'a Document, time_field: &str) -> Vec<Candidate<'a>> {
    max.iter()
        .filter(|(k, v)| is_candidate(k, v, time_field))
        .map(|(k, v)| Candidate {
            name: k,
            min: min.get(k),
            max: v,
        })
        .collect()
}

/// The value an integer sum of `c` is stored against: `count * mid(min, max)`, wrapping.
fn int_base(c: &Candidate<'_>, count: u32) -> Result<i64, String> {
    let int = |v: Option<&Bson>| match v {
        Some(Bson::Int32(x)) => Some(i64::from(*x)),
        Some(Bson::Int64(x)) => Some(*x),
        _ => None,
    };
    let (Some(lo), Some(hi)) = (int(c.min), int(Some(c.max))) else {
        return Err(format!(
            "integer sum of {:?}, whose control.min/max are not both integers",
            c.name
        ));
    };
    // The floored midpoint of two i64 always fits an i64.
    let mid = ((i128::from(lo) + i128::from(hi)) >> 1) as i64;
    Ok(mid.wrapping_mul(i64::from(count)))
}

/// Largest decimal exponent of the decimal form of a Double sum.
const MAX_EXP: u32 = 9;

/// `10^e` for `e <= MAX_EXP`, exact (from a table: `powi` need not be exact).
fn pow10(e: u32) -> f64 {
    const P: [f64; MAX_EXP as usize + 1] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];
    P.get(e as usize).copied().unwrap_or(1.0)
}

/// `(min + max) / 2` of a field as doubles: the centre a Double sum is predicted from.
fn float_mid(c: &Candidate<'_>) -> Result<f64, String> {
    let num = |v: Option<&Bson>| match v {
        Some(Bson::Int32(x)) => Some(f64::from(*x)),
        Some(Bson::Int64(x)) => Some(*x as f64),
        Some(Bson::Double(x)) => Some(*x),
        _ => None,
    };
    match (num(c.min), num(Some(c.max))) {
        (Some(lo), Some(hi)) => Ok(lo / 2.0 + hi / 2.0),
        _ => Err(format!(
            "sum of {:?}, whose control.min/max are not both numbers",
            c.name
        )),
    }
}

/// The scaled integer that `count` values averaging `mid` would sum to: `m` is stored against
/// it. Every step is IEEE-exact or correctly rounded, so writer and reader agree; `as`
/// saturates, and the wrapping difference undoes it.
fn predicted(mid: f64, count: u32, scale: f64) -> i64 {
    (f64::from(count) * mid * scale).round() as i64
}

/// The double nearest to `m / 10^e` (both operands exact, so the division rounds once).
fn decimal(m: i64, scale: f64) -> f64 {
    m as f64 / scale
}

fn svarint_len(v: i64) -> usize {
    let z = ((v << 1) ^ (v >> 63)) as u64;
    (64 - (z | 1).leading_zeros() as usize).div_ceil(7)
}

/// Appends a Double sum in its smallest form.
fn put_double(out: &mut Vec<u8>, s: f64, mid: f64, count: u32) {
    let mut best: Option<(usize, u32, i64, i64)> = None;
    if s.is_finite() {
        for e in 0..=MAX_EXP {
            let scale = pow10(e);
            let m = (s * scale).round();
            // Beyond 2^53 a scaled value is no longer an exact integer in a double.
            if m.abs() >= 9_007_199_254_740_992.0 || !mid.is_finite() {
                break;
            }
            let m = m as i64;
            let d = (s.to_bits() as i64).wrapping_sub(decimal(m, scale).to_bits() as i64);
            let delta = m.wrapping_sub(predicted(mid, count, scale));
            let len = 1 + svarint_len(delta) + svarint_len(d);
            if len < best.map_or(9, |b| b.0) {
                best = Some((len, e, delta, d));
            }
        }
    }
    match best {
        Some((_, e, delta, d)) => {
            out.push(e as u8 + 1);
            put_svarint(out, delta);
            put_svarint(out, d);
        }
        None => {
            out.push(0);
            out.extend_from_slice(&s.to_le_bytes());
        }
    }
}

/// Reads a Double sum written by [`put_double`].
fn get_double(c: &mut Cursor<'_>, mid: f64, count: u32) -> Result<f64, String> {
    let h = c.u8()?;
    if h == 0 {
        return Ok(f64::from_le_bytes(c.array::<8>()?));
    }
    let e = u32::from(h) - 1;
    if e > MAX_EXP || !mid.is_finite() {
        return Err(c.err(format!("sums: bad Double form {h}")));
    }
    let scale = pow10(e);
    let m = predicted(mid, count, scale).wrapping_add(c.svarint()?);
    let d = c.svarint()?;
    Ok(f64::from_bits(
        (decimal(m, scale).to_bits() as i64).wrapping_add(d) as u64,
    ))
}

/// Appends the sums entry's value (tag included). Every key of `sums` must be a candidate.
pub(crate) fn put_sums(
    out: &mut Vec<u8>,
    sums: &Document,
    min: &Document,
    max: &Document,
    count: u32,
    time_field: &str,
) -> Result<(), String> {
    let cands = candidates(min, max, time_field);
    // A set for wide buckets, where a search of the list per field would be quadratic.
    let unknown = match cands.len() > 32 {
        true => {
            let known: foldhash::HashSet<&str> = cands.iter().map(|c| c.name).collect();
            sums.keys().find(|k| !known.contains(k.as_str()))
        }
        false => sums
            .keys()
            .find(|k| !cands.iter().any(|c| c.name == k.as_str())),
    };
    if let Some(k) = unknown {
        return Err(format!(
            "sum of {k:?}, which has no numeric control.max (or is the time field or hidden)"
        ));
    }
    let mut kinds = vec![0u8; (2 * cands.len()).div_ceil(8)];
    let mut vals = Vec::with_capacity(3 * sums.len());
    for (i, k) in cands.iter().enumerate() {
        let kind = match sums.get(k.name) {
            None => KIND_NONE,
            Some(Bson::Int32(s)) => {
                put_svarint(&mut vals, i64::from(*s).wrapping_sub(int_base(k, count)?));
                KIND_INT32
            }
            Some(Bson::Int64(s)) => {
                put_svarint(&mut vals, s.wrapping_sub(int_base(k, count)?));
                KIND_INT64
            }
            Some(Bson::Double(d)) => {
                put_double(&mut vals, *d, float_mid(k)?, count);
                KIND_DOUBLE
            }
            Some(v) => return Err(format!("sum of {:?} is not a number: {v}", k.name)),
        };
        if let Some(b) = kinds.get_mut(i / 4) {
            *b |= kind << (2 * (i % 4));
        }
    }
    out.push(TAG_SUMS);
    out.extend_from_slice(&kinds);
    out.extend_from_slice(&vals);
    Ok(())
}

/// Reads the sums entry's value (its tag already read) for a bucket of `count` rows whose
/// `n` candidate fields are `cand(0..n)`: the sum of each candidate that has one, by its
/// index.
pub(crate) fn get_sums_of<'a>(
    c: &mut Cursor<'_>,
    n: usize,
    cand: impl Fn(usize) -> Option<Candidate<'a>>,
    count: u32,
    out: &mut Vec<(usize, Bson)>,
) -> Result<(), String> {
    let kinds = c.bytes((2 * n).div_ceil(8))?;
    let pad = (2 * n) % 8;
    if pad != 0 && kinds.last().is_some_and(|b| b >> pad != 0) {
        return Err(c.err("sums: padding bits are not zero"));
    }
    for i in 0..n {
        let kind = kinds.get(i / 4).map_or(0, |b| (b >> (2 * (i % 4))) & 3);
        if kind == KIND_NONE {
            continue;
        }
        let k = &cand(i).ok_or_else(|| c.err(format!("sums: no candidate {i}")))?;
        let v = match kind {
            KIND_INT32 | KIND_INT64 => {
                let base = int_base(k, count).map_err(|e| c.err(e))?;
                let s = base.wrapping_add(c.svarint()?);
                if kind == KIND_INT64 {
                    Bson::Int64(s)
                } else {
                    Bson::Int32(i32::try_from(s).map_err(|_| c.err("Int32 sum out of range"))?)
                }
            }
            _ => {
                let mid = float_mid(k).map_err(|e| c.err(e))?;
                Bson::Double(get_double(c, mid, count)?)
            }
        };
        out.push((i, v));
    }
    Ok(())
}

/// [`get_sums_of`] for a `control.min` and the `control.max` entries before the sums entry,
/// as documents.
#[cfg(test)]
fn get_sums(
    c: &mut Cursor<'_>,
    min: &Document,
    max: &Document,
    count: u32,
    time_field: &str,
) -> Result<Document, String> {
    let cands = candidates(min, max, time_field);
    let mut sums = Vec::new();
    get_sums_of(c, cands.len(), |i| cands.get(i).copied(), count, &mut sums)?;
    Ok(sums
        .into_iter()
        .filter_map(|(i, v)| Some((cands.get(i)?.name.to_string(), v)))
        .collect())
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::indexing_slicing,
    reason = "test code: a panic is a test failure"
)]
mod tests {
    use super::*;
    use bson::{doc, DateTime};

    fn round_trip(sums: &Document, min: &Document, max: &Document, count: u32) -> Vec<u8> {
        let mut out = Vec::new();
        put_sums(&mut out, sums, min, max, count, "t").unwrap();
        let mut c = Cursor::new(&out);
        assert_eq!(c.u8().unwrap(), TAG_SUMS);
        let got = get_sums(&mut c, min, max, count, "t").unwrap();
        assert!(c.at_end());
        assert_eq!(&got, sums);
        out
    }

    #[test]
    fn every_kind_and_extreme_round_trips() {
        let t = DateTime::from_millis(0);
        let min = doc! {"t": t, "a": i32::MIN, "b": i64::MIN, "c": -1.5, "s": "x", "d": 0, "\u{1}seq": 1_i64};
        let max = doc! {"t": t, "a": i32::MAX, "b": i64::MAX, "c": 2.5, "s": "y", "d": 5, "\u{1}seq": 9_i64};
        let sums = doc! {"a": i32::MAX, "b": i64::MIN, "c": f64::NAN.abs()};
        let mut out = Vec::new();
        put_sums(&mut out, &sums, &min, &max, 100_000, "t").unwrap();
        let mut c = Cursor::new(&out);
        c.u8().unwrap();
        let got = get_sums(&mut c, &min, &max, 100_000, "t").unwrap();
        assert_eq!(got.get("a"), sums.get("a"));
        assert_eq!(got.get("b"), sums.get("b"));
        assert!(got.get_f64("c").unwrap().is_nan());
        assert!(!got.contains_key("d"), "d has no sum: kind 0");
        round_trip(&doc! {"a": -5, "b": 7_i64, "d": 1.0}, &min, &max, 3);
    }

    #[test]
    fn devops_sized_integer_sums_take_two_bytes() {
        let min = doc! {"u": 40_i64};
        let max = doc! {"u": 70_i64};
        // 360 values averaging 57: 20520, 2 bytes away from 360 * 55.
        let out = round_trip(&doc! {"u": 20_520_i64}, &min, &max, 360);
        assert_eq!(out.len(), 1 + 1 + 2);
    }

    #[test]
    fn decimal_double_sums_are_short_and_exact() {
        let min = doc! {"u": 12.5};
        let max = doc! {"u": 87.25};
        // 360 two-decimal values added in row order: a few ulps off the decimal sum.
        let vals: Vec<f64> = (0..360)
            .map(|i| f64::from((i * 7919) % 7476 + 1250) / 100.0)
            .collect();
        let s = vals.iter().skip(1).fold(vals[0], |a, &v| a + v);
        let out = round_trip(&doc! {"u": s}, &min, &max, 360);
        assert!(out.len() <= 2 + 5, "{} bytes", out.len());
        for odd in [
            -0.0,
            0.0,
            f64::INFINITY,
            f64::MIN_POSITIVE,
            1e300,
            -123.456,
            0.1 + 0.2,
        ] {
            round_trip(&doc! {"u": odd}, &min, &max, 360);
        }
    }

    proptest::proptest! {
        #[test]
        fn any_double_sum_round_trips_bit_exactly(
            s in proptest::num::f64::ANY,
            lo in -1e6f64..1e6,
            hi in -1e6f64..1e6,
            count in 2u32..100_000,
            decimals in 0u32..6,
        ) {
            let min = doc! {"u": lo};
            let max = doc! {"u": hi};
            for s in [s, (s * pow10(decimals)).round() / pow10(decimals)] {
                let mut out = Vec::new();
                put_sums(&mut out, &doc! {"u": s}, &min, &max, count, "t").unwrap();
                let mut c = Cursor::new(&out);
                c.u8().unwrap();
                let got = get_sums(&mut c, &min, &max, count, "t").unwrap();
                proptest::prop_assert!(c.at_end());
                proptest::prop_assert_eq!(got.get_f64("u").unwrap().to_bits(), s.to_bits());
            }
        }
    }

    #[test]
    fn sums_of_non_candidates_and_bad_types_are_refused() {
        let min = doc! {"t": 1, "s": "a", "d": 1.5};
        let max = doc! {"t": 2, "s": "b", "d": 2.5};
        let mut out = Vec::new();
        for bad in [
            doc! {"s": 1},
            doc! {"t": 3},
            doc! {"x": 1},
            doc! {"d": 4},
            doc! {"d": "4"},
        ] {
            assert!(
                put_sums(&mut out, &bad, &min, &max, 2, "t").is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let min = doc! {"a": 1, "b": 2.0};
        let max = doc! {"a": 9, "b": 3.0};
        for bytes in [
            &[][..],
            &[0xff][..],
            &[0x01][..],
            &[
                0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ][..],
            &[0x0d, 0x02, 0, 1, 2, 3][..],
            &[0x0d, 0x02, 11, 0, 0][..],
        ] {
            let mut c = Cursor::new(bytes);
            assert!(get_sums(&mut c, &min, &max, 2, "t").is_err(), "{bytes:?}");
        }
    }
}
