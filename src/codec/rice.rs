//! Plain Rice codes: the low `k` bits of every residual `z`, bit-packed, then every quotient
//! `z >> k` in unary (that many zero bits, then a one), LSB-first.
//!
//! Why beside the adaptive Rice model of [`super::rc`]: that model range-codes the quotients,
//! a binary decision per unary bit, and reads at ~10 ns per value. Here the low bits unpack
//! like PACK, and the quotients are the gaps between the one bits of the unary stream, found
//! with a trailing-zero count and a clear-lowest-bit per value whose dependency chain is one
//! instruction long. On devops integer walks the codes are ~3% larger than the adaptive model's
//! (which learns the quotient distribution that unary only approximates), on wide residuals
//! (scaled doubles) ~0.2%; the encoder keeps them when within a small allowance of the smallest
//! form (`int.rs`).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use super::bits::{self, BitWriter};

/// Largest quotient: readers refuse longer runs of zeros, so garbage cannot make them count
/// far, and `q << k` cannot overflow.
pub(crate) const MAX_Q: u64 = 255;

/// Largest Rice parameter.
pub(crate) const MAX_K: u32 = 56;

/// Bytes of `vals` coded with parameter `k`; `None` when a quotient exceeds [`MAX_Q`].
fn code_size(vals: &[u64], k: u32) -> Option<usize> {
    let mut unary = 0u64;
    for &v in vals {
        let q = v >> k;
        if q > MAX_Q {
            return None;
        }
        unary += q + 1;
    }
    Some(low_len(vals.len(), k)? + unary.div_ceil(8) as usize)
}

/// Bytes of the low bits of `n` residuals.
fn low_len(n: usize, k: u32) -> Option<usize> {
    Some(n.checked_mul(k as usize)?.div_ceil(8))
}

/// The parameter near `around` (the adaptive model's choice) that codes `vals` in the fewest
/// bytes, and that size; `None` when no candidate keeps every quotient within [`MAX_Q`].
pub(crate) fn choose(vals: &[u64], around: u32) -> Option<(u32, usize)> {
    let lo = around.saturating_sub(1).min(MAX_K);
    let hi = (around + 2).min(MAX_K);
    (lo..=hi)
        .filter_map(|k| Some((k, code_size(vals, k)?)))
        .min_by_key(|&(k, size)| (size, k))
}

/// Appends the codes of `vals` (quotients within [`MAX_Q`] under `k`, as [`choose`] ensures).
pub(crate) fn encode(vals: &[u64], k: u32, out: &mut Vec<u8>) {
    let mut low = BitWriter::default();
    let mut unary = BitWriter::default();
    for &v in vals {
        low.write(v, k);
        let mut q = (v >> k) as u32;
        while q >= 64 {
            unary.write(0, 64);
            q -= 64;
        }
        unary.write(1u64 << q, q + 1);
    }
    out.extend_from_slice(&low.finish());
    out.extend_from_slice(&unary.finish());
}

/// Decodes `out.len()` residuals from the start of `data`; returns the bytes the codes took,
/// or `None` when `k` is out of range, a quotient is too large or the data ends first.
pub(crate) fn decode(data: &[u8], k: u32, out: &mut [u64]) -> Option<usize> {
    if k > MAX_K {
        return None;
    }
    let n_low = low_len(out.len(), k)?;
    bits::unpack(data.get(..n_low)?, k, out)?;
    let unary = data.get(n_low..)?;
    let mut slots = out.iter_mut();
    let Some(mut slot) = slots.next() else {
        return Some(n_low);
    };
    // Zero bits of the current code seen in earlier words.
    let mut carried = 0u64;
    for (wi, chunk) in unary.chunks(8).enumerate() {
        let mut w = match <[u8; 8]>::try_from(chunk) {
            Ok(a) => u64::from_le_bytes(a),
            // The last, short chunk (a variable-length copy is a `memcpy` call).
            Err(_) => {
                let mut a = [0u8; 8];
                if let Some(dst) = a.get_mut(..chunk.len()) {
                    dst.copy_from_slice(chunk);
                }
                u64::from_le_bytes(a)
            }
        };
        // Bit index just past the previous one bit in this word.
        let mut from = 0u64;
        while w != 0 {
            let t = u64::from(w.trailing_zeros());
            let q = carried + t - from;
            if q > MAX_Q {
                return None;
            }
            *slot |= q << k;
            carried = 0;
            from = t + 1;
            w &= w - 1;
            match slots.next() {
                Some(s) => slot = s,
                None => return Some(n_low + (wi * 64 + from as usize).div_ceil(8)),
            }
        }
        carried += 64 - from;
        if carried > MAX_Q {
            return None;
        }
    }
    None
}

/// The decoder as first written, one bit at a time: the reference [`decode`] is checked
/// against.
#[cfg(test)]
pub(crate) fn reference_decode(data: &[u8], k: u32, out: &mut [u64]) -> Option<usize> {
    use super::bits::BitReader;
    if k > MAX_K {
        return None;
    }
    let n_low = low_len(out.len(), k)?;
    let mut low = BitReader::new(data.get(..n_low)?);
    for slot in out.iter_mut() {
        *slot = low.read(k)?;
    }
    let mut r = BitReader::new(data.get(n_low..)?);
    for slot in out.iter_mut() {
        let mut q = 0u64;
        while r.read(1)? == 0 {
            q += 1;
            if q > MAX_Q {
                return None;
            }
        }
        *slot |= q << k;
    }
    Some(n_low + r.bytes_used())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;

    #[test]
    fn codes_round_trip_for_every_parameter() {
        let vals: Vec<u64> = (0..300u64).map(|i| (i * 7919) % 97).collect();
        for k in 0..=MAX_K {
            let Some(size) = code_size(&vals, k) else {
                continue;
            };
            let mut buf = Vec::new();
            encode(&vals, k, &mut buf);
            assert_eq!(buf.len(), size, "k={k}");
            let mut got = vec![0; vals.len()];
            assert_eq!(decode(&buf, k, &mut got), Some(buf.len()), "k={k}");
            assert_eq!(got, vals, "k={k}");
            assert_eq!(reference_decode(&buf, k, &mut got), Some(buf.len()));
        }
    }

    #[test]
    fn the_chosen_parameter_is_the_smallest_nearby() {
        let vals = vec![0, 1, 2, 1, 0, 3, 1, 2, 0, 1];
        let (k, size) = choose(&vals, 1).unwrap();
        for other in 0..=3 {
            assert!(code_size(&vals, other).unwrap() >= size);
        }
        assert!(k <= 3);
        // A residual too large for any nearby parameter rules the codes out.
        assert_eq!(choose(&[0, 1 << 60], 0), None);
    }

    #[test]
    fn damaged_streams_are_refused_never_misread() {
        let vals = vec![5u64, 0, 9, 2, 2, 7];
        let mut buf = Vec::new();
        encode(&vals, 1, &mut buf);
        for cut in 0..buf.len() {
            let mut got = vec![0; vals.len()];
            assert_eq!(decode(&buf[..cut], 1, &mut got), None, "cut at {cut}");
        }
        let mut got = vec![0; 1];
        assert_eq!(decode(&[0; 40], 0, &mut got), None, "quotient too large");
        assert_eq!(reference_decode(&[0; 40], 0, &mut got), None);
        assert_eq!(decode(&[0xff], MAX_K + 1, &mut got), None);
    }
}
