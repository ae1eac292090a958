//! Double columns: decimal-scaled integers when every value is exactly `m / 10^e`, else
//! Gorilla-style XOR coding, else raw bits. All three keep the exact bit pattern.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use super::bits::{BitReader, BitWriter, Reader};
use super::{int, CodecError};

/// Mode bytes 0..=MAX_SCALE are SCALED with that decimal exponent (one byte for both).
const MODE_XOR: u8 = 0x40;
const MODE_RAW: u8 = 0x41;

/// Largest decimal exponent tried; powers of ten up to 1e22 are exact doubles, and beyond
/// ~1e15 the scaled integers stop being smaller than the raw bits anyway.
const MAX_SCALE: usize = 15;

const POW10: [f64; MAX_SCALE + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
];

/// Integers beyond 2^53 are not all representable, so the scaled form would not be exact.
const MAX_EXACT: f64 = 9_007_199_254_740_992.0;

#[inline]
fn scaled(x: f64, e: usize) -> Option<i64> {
    let p = *POW10.get(e)?;
    let y = x * p;
    if y.is_nan() || y.abs() > MAX_EXACT {
        return None;
    }
    // Round half away from zero without a libm call; an off-by-one near .5 only makes the
    // exactness check below fail, never produces a wrong value.
    let m = (y + 0.5f64.copysign(y)) as i64;
    // Division, not multiplication by 10^-e: m / 10^e is correctly rounded, which is exactly how
    // a decimal literal such as 12.34 became a double in the first place. Checked on the
    // integer actually stored, so -0.0 (whose scaled form is 0) is rejected.
    ((m as f64 / p).to_bits() == x.to_bits()).then_some(m)
}

/// Smallest exponent that represents every value exactly, with the scaled integers.
fn find_scale(vals: &[f64]) -> Option<(u8, Vec<i64>)> {
    let mut e = 0usize;
    let mut ms = Vec::with_capacity(vals.len());
    for (i, &x) in vals.iter().enumerate() {
        let m = loop {
            if let Some(m) = scaled(x, e) {
                break m;
            }
            e += 1;
            if e > MAX_SCALE {
                return None;
            }
            // A larger exponent invalidates the integers so far; recompute them (rare: the
            // exponent settles within the first few values).
            ms.clear();
            for &y in vals.get(..i)? {
                ms.push(scaled(y, e)?);
            }
        };
        ms.push(m);
    }
    Some((e as u8, ms))
}

fn encode_xor(vals: &[f64]) -> Vec<u8> {
    let mut w = BitWriter::default();
    let mut prev = 0u64;
    // (leading zeros, meaningful length) of the current window; length 0 = no window yet.
    let mut win = (0u32, 0u32);
    for (i, x) in vals.iter().enumerate() {
        let bits = x.to_bits();
        if i == 0 {
            w.write(bits, 64);
            prev = bits;
            continue;
        }
        let xor = bits ^ prev;
        prev = bits;
        if xor == 0 {
            w.write(0, 1);
            continue;
        }
        let lz = xor.leading_zeros();
        let tz = xor.trailing_zeros();
        let (wlz, wlen) = win;
        if wlen > 0 && lz >= wlz && tz >= 64 - wlz - wlen {
            w.write(0b01, 2);
            w.write(xor >> (64 - wlz - wlen), wlen);
        } else {
            let len = 64 - lz - tz;
            w.write(0b11, 2);
            w.write(u64::from(lz), 6);
            w.write(u64::from(len - 1), 6);
            w.write(xor >> tz, len);
            win = (lz, len);
        }
    }
    w.finish()
}

fn decode_xor(r: &mut Reader, n: usize) -> Result<Vec<f64>, CodecError> {
    let at = r.offset();
    let data = r.peek_rest();
    let mut br = BitReader::new(data);
    let trunc = || CodecError::new(at, "XOR stream truncated");
    // n values need at least 64 + (n - 1) bits; reject impossible counts before allocating.
    if n > 0 && (n - 1) / 8 + 8 > data.len() {
        return Err(trunc());
    }
    let mut out = Vec::with_capacity(n);
    let mut prev = 0u64;
    let mut win = (0u32, 0u32);
    for i in 0..n {
        if i == 0 {
            prev = br.read(64).ok_or_else(trunc)?;
            out.push(f64::from_bits(prev));
            continue;
        }
        if br.read(1).ok_or_else(trunc)? == 1 {
            if br.read(1).ok_or_else(trunc)? == 1 {
                let lz = br.read(6).ok_or_else(trunc)? as u32;
                let len = br.read(6).ok_or_else(trunc)? as u32 + 1;
                if lz + len > 64 {
                    return Err(CodecError::new(at, "XOR window exceeds 64 bits"));
                }
                win = (lz, len);
            } else if win.1 == 0 {
                return Err(CodecError::new(at, "XOR window reused before defined"));
            }
            let (lz, len) = win;
            prev ^= br.read(len).ok_or_else(trunc)? << (64 - lz - len);
        }
        out.push(f64::from_bits(prev));
    }
    r.bytes(br.bytes_used())?;
    Ok(out)
}

/// Appends a DOUBLE body for `vals`, choosing the smallest mode. `last`: nothing follows the
/// body, so a range-coded stream may run to its end.
pub(crate) fn encode(vals: &[f64], out: &mut Vec<u8>, last: bool) {
    let raw_size = 1 + vals.len() * 8;
    let mut best: Option<Vec<u8>> = None;
    if let Some((e, ms)) = find_scale(vals) {
        let mut c = vec![e];
        if last {
            int::encode_last(&ms, &mut c);
        } else {
            int::encode(&ms, &mut c);
        }
        best = Some(c);
    }
    // Scaled integers beat XOR on anything decimal; only try XOR when scaling failed or is weak.
    if best.as_ref().is_none_or(|b| b.len() > vals.len() * 2) {
        let mut c = vec![MODE_XOR];
        c.extend_from_slice(&encode_xor(vals));
        if best.as_ref().is_none_or(|b| c.len() < b.len()) {
            best = Some(c);
        }
    }
    match best {
        Some(b) if b.len() < raw_size => out.extend_from_slice(&b),
        _ => {
            out.push(MODE_RAW);
            for x in vals {
                out.extend_from_slice(&x.to_bits().to_le_bytes());
            }
        }
    }
}

/// Decodes a DOUBLE body of `n` values.
pub(crate) fn decode(r: &mut Reader, n: usize) -> Result<Vec<f64>, CodecError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let at = r.offset();
    match r.u8()? {
        e if usize::from(e) <= MAX_SCALE => {
            let p = *POW10
                .get(usize::from(e))
                .ok_or_else(|| CodecError::new(at, format!("decimal scale {e} too large")))?;
            let ms = int::decode(r, n)?;
            Ok(ms.into_iter().map(|m| m as f64 / p).collect())
        }
        MODE_XOR => decode_xor(r, n),
        MODE_RAW => {
            let bytes = r.bytes(n.checked_mul(8).ok_or_else(|| r.err("too many values"))?)?;
            Ok(bytes
                .chunks_exact(8)
                .map(|c| {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(c);
                    f64::from_bits(u64::from_le_bytes(a))
                })
                .collect())
        }
        m => Err(CodecError::new(at, format!("unknown double mode {m}"))),
    }
}

#[cfg(test)]
// Tests may panic: a panic is how a test fails.
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn rt(vals: &[f64]) -> Vec<u8> {
        let mut buf = Vec::new();
        encode(vals, &mut buf, true);
        let mut r = Reader::new(&buf, 0);
        let got = decode(&mut r, vals.len()).unwrap_or_default();
        assert!(r.finish().is_ok());
        let a: Vec<u64> = got.iter().map(|x| x.to_bits()).collect();
        let b: Vec<u64> = vals.iter().map(|x| x.to_bits()).collect();
        assert_eq!(a, b);
        buf
    }

    #[test]
    fn two_decimal_values_use_scale_two() {
        let buf = rt(&[12.34, 12.35, 0.01, 99.99, 100.0]);
        assert_eq!(buf.first(), Some(&2));
    }

    #[test]
    fn special_values_fall_back_to_xor_or_raw_exactly() {
        rt(&[
            -0.0,
            0.0,
            f64::NAN,
            f64::from_bits(0x7ff0_0000_0000_0001),
            f64::INFINITY,
        ]);
        rt(&[f64::MIN_POSITIVE, f64::MAX, -f64::MAX, 1e300, 5e-324]);
        rt(&[0.1 + 0.2, std::f64::consts::PI, 1.0 / 3.0]);
        rt(&[1.5]);
    }

    #[test]
    fn xor_handles_repeats_and_window_reuse() {
        let vals: Vec<f64> = (0..200)
            .map(|i| (i / 7) as f64 * std::f64::consts::E)
            .collect();
        let buf = rt(&vals);
        assert!(buf.len() < 200 * 8);
        let mut xb = vec![MODE_XOR];
        xb.extend_from_slice(&encode_xor(&vals));
        let mut r = Reader::new(&xb, 0);
        let got = decode(&mut r, vals.len()).unwrap_or_default();
        assert_eq!(got, vals);
    }
}
