//! Plain Rice codes: the low `k` bits of every residual `z`, bit-packed, then every quotient
//! `z >> k` in unary (that many zero bits, then a one), LSB-first.
//!
//! Why beside the adaptive Rice model of [`super::rc`]: that model range-codes the quotients,
//! a binary decision per unary bit, and reads at ~10 ns per value. Here the low bits unpack
//! like PACK, and the quotients are the gaps between the one bits of the unary stream, read a
//! byte at a time from a table of every byte's gaps (see [`decode_split`]). On integer metric
//! walks the codes are ~3% larger than the adaptive model's (which learns the quotient
//! distribution that unary only approximates), on wide residuals
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

/// What one byte of the unary stream holds: `gaps` packs, a byte each from the low end, the
/// zero bits before each of its one bits (counted from the byte's start for the first, from
/// the previous one bit for the others), `ones` counts its one bits and `tail` the zero bits
/// after the last one (8 when it has none).
#[derive(Clone, Copy)]
struct ByteCodes {
    gaps: u64,
    ones: u8,
    tail: u8,
    /// All ones when the byte has no one bit (its zeros add to the code's earlier ones),
    /// else zero: lets [`decode_words`] carry the zero count without a branch.
    keep: u64,
}

/// The codes of a zero byte, as a stand-in the table never needs.
const NO_CODES: ByteCodes = ByteCodes {
    gaps: 0,
    ones: 0,
    tail: 8,
    keep: u64::MAX,
};

/// [`ByteCodes`] of every byte value.
// Indexing is in bounds: the loop runs over the table's own length.
#[allow(clippy::indexing_slicing)]
const BYTE_CODES: [ByteCodes; 256] = {
    let mut t = [ByteCodes {
        gaps: 0,
        ones: 0,
        tail: 0,
        keep: 0,
    }; 256];
    let mut b = 0;
    while b < 256 {
        let (mut gaps, mut ones, mut zeros) = (0u64, 0u8, 0u8);
        let mut bit = 0;
        while bit < 8 {
            if (b >> bit) & 1 == 1 {
                gaps |= (zeros as u64) << (8 * ones as u64);
                ones += 1;
                zeros = 0;
            } else {
                zeros += 1;
            }
            bit += 1;
        }
        t[b] = ByteCodes {
            gaps,
            ones,
            tail: zeros,
            keep: if ones == 0 { u64::MAX } else { 0 },
        };
        b += 1;
    }
    t
};

/// Most codes whose quotients [`with_quotient_buffer`] keeps on the stack (a bucket's column
/// is at most a few thousand values); longer sequences get a heap buffer.
pub(crate) const STACK_Q: usize = 2048;

/// Bytes of quotient buffer [`decode_split`] needs for `n` codes: one per code and room for
/// the stores of a word of the unary stream that starts before the last code (see
/// [`decode_words`]).
pub(crate) fn quotient_room(n: usize) -> usize {
    n + WORD_ROOM
}

/// Bytes that [`decode_words`] may store from the first code of a word on: 7 bytes of at most
/// 8 codes each, then the 8-byte store of the last.
const WORD_ROOM: usize = 72;

/// Decodes `out.len()` residuals from the start of `data`; returns the bytes the codes took,
/// or `None` when `k` is out of range, a quotient is too large or the data ends first.
pub(crate) fn decode(data: &[u8], k: u32, out: &mut [u64]) -> Option<usize> {
    with_quotient_buffer(out.len(), |q| {
        let used = decode_split(data, k, out, q)?;
        for (slot, &qi) in out.iter_mut().zip(q.iter()) {
            *slot |= u64::from(qi) << k;
        }
        Some(used)
    })
}

/// Calls `f` with a quotient buffer of [`quotient_room`]`(n)` bytes: on the stack, in the
/// smallest of a few sizes that holds it (a buffer is zeroed before use, and most sequences
/// are short: nested run lengths, buckets of a few rows), else on the heap.
pub(crate) fn with_quotient_buffer<R>(n: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let room = quotient_room(n);
    if room <= 128 {
        let mut b = [0u8; 128];
        f(b.get_mut(..room).unwrap_or_default())
    } else if room <= 512 {
        let mut b = [0u8; 512];
        f(b.get_mut(..room).unwrap_or_default())
    } else if room <= STACK_Q + WORD_ROOM {
        let mut b = [0u8; STACK_Q + WORD_ROOM];
        f(b.get_mut(..room).unwrap_or_default())
    } else {
        f(&mut vec![0u8; room])
    }
}

/// [`decode`] with the two halves of each code left apart: the low bits in `low` (one per
/// code, `low.len()` codes) and the quotients in `q`, a byte each (quotients never exceed
/// [`MAX_Q`] = 255; `q` has at least [`quotient_room`] bytes). A caller that transforms the
/// residuals anyway joins them in its own pass (`low | q << k`) instead of a pass here.
///
/// The low bits unpack like PACK. The unary stream is read a byte at a time through
/// [`BYTE_CODES`]: one lookup gives every quotient ending in the byte, written with one
/// 8-byte store, so the loop's dependency chain is per byte, not per code.
pub(crate) fn decode_split(data: &[u8], k: u32, low: &mut [u64], q: &mut [u8]) -> Option<usize> {
    if k > MAX_K {
        return None;
    }
    let n = low.len();
    if q.len() < quotient_room(n) {
        return None;
    }
    let n_low = low_len(n, k)?;
    bits::unpack(data.get(..n_low)?, k, low)?;
    Some(n_low + decode_quotients(data.get(n_low..)?, n, q)?)
}

/// The quotients of [`decode_split`] alone: `n` of them from the unary stream at the start of
/// `unary`, a byte each into `q` (at least [`quotient_room`]`(n)` bytes); returns the bytes
/// they took. With `k = 0` they are the whole codes.
pub(crate) fn decode_quotients(unary: &[u8], n: usize, q: &mut [u8]) -> Option<usize> {
    if q.len() < quotient_room(n) {
        return None;
    }
    if n == 0 {
        return Some(0);
    }
    // Codes found so far, and zero bits of the current code seen in earlier bytes.
    let (start, mut held, mut carry) = decode_words(unary, n, q);
    for (bi, &byte) in unary.iter().enumerate().skip(start) {
        let e = BYTE_CODES.get(usize::from(byte))?;
        if e.ones == 0 {
            carry += 8;
            if carry > MAX_Q {
                return None;
            }
            continue;
        }
        let first = carry + (e.gaps & 0xFF);
        if first > MAX_Q {
            return None;
        }
        let packed = (e.gaps & !0xFF) | first;
        q.get_mut(held..held + 8)?
            .copy_from_slice(&packed.to_le_bytes());
        held += usize::from(e.ones);
        carry = u64::from(e.tail);
        if held >= n {
            return Some(bi + 1);
        }
    }
    None
}

/// The bulk of [`decode_quotients`], 8 bytes of the unary stream at a time: returns the bytes
/// read, the codes found and the zero bits of the code under way, for the byte loop to go on
/// from. A word in which the last code ends is left to the byte loop, which finds the byte it
/// ends in.
///
/// The byte loop checks every byte for the end of the codes, a zero byte and an overlong
/// quotient, about 30 instructions a byte. Here a word's bytes take a branch-free step each
/// (one table lookup, one store, the zero bits carried through a mask). An all-zero word is
/// left to the byte loop too: without one, a run of zero bytes spans at most the end of one
/// word and the start of the next, 14 bytes, so no quotient here exceeds 7 + 14 * 8 = 119,
/// within [`MAX_Q`], and the carry added to a byte's first gap stays within that byte.
#[inline(always)]
fn decode_words(unary: &[u8], n: usize, q: &mut [u8]) -> (usize, usize, u64) {
    let (mut bi, mut held, mut carry) = (0usize, 0usize, 0u64);
    // A word starts with fewer than `n` codes found, so its stores stay within the
    // [`quotient_room`] of `q`.
    while let Some(word) = unary
        .get(bi..bi + 8)
        .and_then(|w| <[u8; 8]>::try_from(w).ok())
        .filter(|&w| w != [0; 8])
    {
        let Some(window) = q
            .get_mut(held..held + WORD_ROOM)
            .and_then(|w| <&mut [u8; WORD_ROOM]>::try_from(w).ok())
        else {
            break;
        };
        let (mut at, mut c) = (0usize, carry);
        for byte in word {
            // A byte always indexes the table: the fallback compiles away.
            let e = BYTE_CODES.get(usize::from(byte)).copied().unwrap_or(NO_CODES);
            // `at` is below 57 (7 bytes of at most 8 codes): the mask only shows it.
            let off = at & 63;
            if let Some(slot) = window.get_mut(off..off + 8) {
                slot.copy_from_slice(&e.gaps.wrapping_add(c).to_le_bytes());
            }
            at += usize::from(e.ones);
            c = u64::from(e.tail).wrapping_add(c & e.keep);
        }
        if held + at >= n {
            break;
        }
        held += at;
        carry = c;
        bi += 8;
    }
    (bi, held, carry)
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

    /// The decoder and the bit-at-a-time reference agree, codes and bytes used, on whole,
    /// cut and bit-flipped streams: quotients up to and past [`MAX_Q`], streams longer than
    /// a block of quotients, runs of zero bits across bytes.
    fn agrees_with_the_reference(buf: &[u8], k: u32, n: usize) {
        let (mut got, mut want) = (vec![0; n], vec![0; n]);
        let used = decode(buf, k, &mut got);
        assert_eq!(used, reference_decode(buf, k, &mut want), "k={k} n={n}");
        if used.is_some() {
            assert_eq!(got, want, "k={k} n={n}");
        }
    }

    /// `vals` encode and decode back, and their stream cut at `cut`, or with bit `bit` of byte
    /// `flip` flipped, decodes as the reference does; returns the stream.
    fn round_trip_and_damage(
        vals: &[u64],
        k: u32,
        cut: proptest::sample::Index,
        flip: proptest::sample::Index,
        bit: u8,
    ) -> Vec<u8> {
        let mut buf = Vec::new();
        encode(vals, k, &mut buf);
        let mut got = vec![0; vals.len()];
        assert_eq!(decode(&buf, k, &mut got), Some(buf.len()));
        assert_eq!(got, vals);
        if !buf.is_empty() {
            agrees_with_the_reference(&buf[..cut.index(buf.len())], k, vals.len());
            let mut flipped = buf.clone();
            flipped[flip.index(buf.len())] ^= 1 << bit;
            agrees_with_the_reference(&flipped, k, vals.len());
        }
        buf
    }

    proptest::proptest! {
        #[test]
        fn the_decoder_matches_the_reference(
            vals in proptest::collection::vec(0u64..4096, 0..1200),
            k in 0u32..12,
            cut in proptest::prelude::any::<proptest::sample::Index>(),
            flip in proptest::prelude::any::<proptest::sample::Index>(),
            bit in 0u8..8,
        ) {
            if code_size(&vals, k).is_none() {
                return Ok(());
            }
            round_trip_and_damage(&vals, k, cut, flip, bit);
        }
    }

    proptest::proptest! {
        /// Codes short enough for the word loop of [`decode_quotients`] (a few bits each, as
        /// metric walks give), now and then a long one whose zeros fill whole words, and
        /// lengths around the 64 codes the word loop leaves to the byte loop: whole, cut and
        /// bit-flipped streams decode as the reference does.
        #[test]
        fn the_word_loop_matches_the_reference(
            picks in proptest::collection::vec((0u64..8, 0u8..40), 0..700),
            k in 0u32..3,
            cut in proptest::prelude::any::<proptest::sample::Index>(),
            flip in proptest::prelude::any::<proptest::sample::Index>(),
            bit in 0u8..8,
        ) {
            let vals: Vec<u64> = picks
                .iter()
                .map(|&(v, pick)| match pick {
                    0 => (MAX_Q << k) | v,
                    1 => (120 + v * 16) << k,
                    _ => v,
                })
                .collect();
            let mut zeroed = round_trip_and_damage(&vals, k, cut, flip, bit);
            if !zeroed.is_empty() {
                // Zero bytes in place of some codes make quotients past the limit.
                let at = flip.index(zeroed.len());
                let end = (at + 40).min(zeroed.len());
                zeroed[at..end].fill(0);
                agrees_with_the_reference(&zeroed, k, vals.len());
            }
        }
    }

    #[test]
    fn long_sequences_decode_through_a_heap_buffer() {
        let vals: Vec<u64> = (0..3 * STACK_Q as u64).map(|i| (i * 7919) % 13).collect();
        let (k, size) = choose(&vals, 2).unwrap();
        let mut buf = Vec::new();
        encode(&vals, k, &mut buf);
        let mut got = vec![0; vals.len()];
        assert_eq!(decode(&buf, k, &mut got), Some(size));
        assert_eq!(got, vals);
        // Split, with a quotient buffer one byte short, then long enough.
        let mut low = vec![0; vals.len()];
        let mut q = vec![0; quotient_room(vals.len()) - 1];
        assert_eq!(decode_split(&buf, k, &mut low, &mut q), None);
        q.push(0);
        assert_eq!(decode_split(&buf, k, &mut low, &mut q), Some(size));
        let joined: Vec<u64> = low
            .iter()
            .zip(&q)
            .map(|(&l, &h)| l | u64::from(h) << k)
            .collect();
        assert_eq!(joined, vals);
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
