//! Adaptive binary range coder (LZMA-style carry handling) and the model used to code streams
//! of unsigned residuals (zigzagged deltas).
//!
//! Why a range coder: metric columns that follow random walks (CPU usage sampled every 10 s)
//! have residual entropies of ~2 bits (ints) and ~8.7 bits (2-decimal doubles). Bit-packing
//! wastes ~1 bit per value on the first and Rice codes fit Gaussian residuals poorly; an
//! adaptive binary coder over an Elias-gamma-like binarisation lands within a few percent of
//! the order-0 entropy with no table to transmit, which matters for 360-row buckets.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use super::bits::BitWriter;

/// Probabilities are 16-bit (probability of a 0 bit), `TOP` is the normalisation threshold.
const TOP: u32 = 1 << 24;

/// Adaptation stops speeding down at rate 1/(LIMIT+2): a count-based (Krichevsky-Trofimov like)
/// start learns a 360-value bucket quickly, the floor keeps tracking drift.
const LIMIT: u8 = 30;

/// Reciprocal table for the count-based adaptation rate: `RATE[n] = 65536 / (min(n, LIMIT) + 2)`.
/// 256 entries so a `u8` count indexes it without a bounds check.
// Indexing is in bounds: the loop runs over the table's own length.
#[allow(clippy::indexing_slicing)]
const RATE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let n = if i < LIMIT as usize {
            i
        } else {
            LIMIT as usize
        };
        t[i] = 65536 / (n as u32 + 2);
        i += 1;
    }
    t
};

/// One adaptive binary context.
#[derive(Clone, Copy)]
pub(crate) struct Prob {
    p: u16,
    n: u8,
}

impl Default for Prob {
    fn default() -> Prob {
        Prob { p: 32768, n: 0 }
    }
}

impl Prob {
    /// True once the adaptation rate has reached its floor (see [`Prob::update_settled`]).
    #[inline(always)]
    fn settled(&self) -> bool {
        self.n >= LIMIT
    }

    /// [`Prob::update`] for a settled context: the rate is 2048/65536 = 1/32, so the multiply
    /// is a shift and the count no longer moves.
    #[inline(always)]
    fn update_settled(&mut self, bit: u32) {
        let p = u32::from(self.p);
        let np = if bit == 0 {
            p + ((65536 - p) >> 5)
        } else {
            p - (p >> 5)
        };
        self.p = np as u16;
    }

    #[inline]
    fn update(&mut self, bit: u32) {
        let rate = RATE.get(usize::from(self.n)).copied().unwrap_or(2048);
        let p = u32::from(self.p);
        // p stays in [1, 65535]: rate <= 1/2, so a step covers at most half the distance to 0 or
        // 65536 and the floor never reaches either end.
        let np = if bit == 0 {
            p + (((65536 - p) * rate) >> 16)
        } else {
            p - ((p * rate) >> 16)
        };
        self.p = np as u16;
        self.n += u8::from(self.n < LIMIT);
    }
}

/// Range encoder writing to an owned buffer.
pub(crate) struct Encoder {
    low: u64,
    range: u32,
    cache: u8,
    cache_size: u64,
    out: Vec<u8>,
    first: bool,
}

impl Default for Encoder {
    fn default() -> Encoder {
        Encoder {
            low: 0,
            range: u32::MAX,
            cache: 0,
            cache_size: 1,
            out: Vec::new(),
            first: true,
        }
    }
}

impl Encoder {
    fn shift_low(&mut self) {
        if (self.low as u32) < 0xFF00_0000 || (self.low >> 32) != 0 {
            let carry = (self.low >> 32) as u8;
            let mut temp = self.cache;
            loop {
                // The very first byte is the integer part of the code value, always 0: omitted.
                if self.first {
                    self.first = false;
                } else {
                    self.out.push(temp.wrapping_add(carry));
                }
                temp = 0xFF;
                self.cache_size -= 1;
                if self.cache_size == 0 {
                    break;
                }
            }
            self.cache = ((self.low >> 24) & 0xFF) as u8;
        }
        self.cache_size += 1;
        self.low = (self.low & 0x00FF_FFFF) << 8;
    }

    #[inline]
    fn normalize(&mut self) {
        while self.range < TOP {
            self.range <<= 8;
            self.shift_low();
        }
    }

    /// Codes one bit with an adaptive context.
    #[inline]
    pub(crate) fn bit(&mut self, prob: &mut Prob, bit: u32) {
        let bound = (self.range >> 16) * u32::from(prob.p);
        if bit == 0 {
            self.range = bound;
        } else {
            self.low += u64::from(bound);
            self.range -= bound;
        }
        prob.update(bit);
        self.normalize();
    }

    /// Codes the low `n` bits of `v` at probability 1/2, in chunks of up to 16 bits (high chunk
    /// first) so wide residuals cost one step per chunk rather than per bit.
    #[inline]
    pub(crate) fn direct(&mut self, v: u64, n: u32) {
        let mut left = n;
        while left > 0 {
            let c = left.min(16);
            left -= c;
            let chunk = (v >> left) & ((1u64 << c) - 1);
            self.range >>= c;
            self.low += chunk * u64::from(self.range);
            self.normalize();
        }
    }

    /// Finishes the stream. The decoder pads with zero bytes, so we pick the value in the final
    /// interval with the most trailing zero bits and drop the trailing zero bytes.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        let hi = self.low + u64::from(self.range) - 1;
        let mut k = 40;
        loop {
            let c = (hi >> k) << k;
            if c >= self.low || k == 0 {
                self.low = c;
                break;
            }
            k -= 1;
        }
        for _ in 0..5 {
            self.shift_low();
        }
        while self.out.last() == Some(&0) {
            self.out.pop();
        }
        self.out
    }
}

/// Range decoder; reading past the end yields zero bytes (see [`Encoder::finish`]). A valid
/// stream may rely on any number of trimmed trailing zeros, so over-reading is not an error;
/// the value count bounds the work.
pub(crate) struct Decoder<'a> {
    data: &'a [u8],
    pos: usize,
    range: u32,
    code: u32,
}

impl<'a> Decoder<'a> {
    /// Starts decoding `data`.
    pub(crate) fn new(data: &'a [u8]) -> Decoder<'a> {
        let mut d = Decoder {
            data,
            pos: 0,
            range: u32::MAX,
            code: 0,
        };
        for _ in 0..4 {
            d.code = (d.code << 8) | u32::from(d.next());
        }
        d
    }

    #[inline]
    fn next(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        b
    }

    #[inline]
    fn normalize(&mut self) {
        while self.range < TOP {
            self.range <<= 8;
            self.code = (self.code << 8) | u32::from(self.next());
        }
    }

    /// Decodes one bit with an adaptive context.
    #[inline]
    pub(crate) fn bit(&mut self, prob: &mut Prob) -> u32 {
        let bit = self.bit_raw(prob);
        prob.update(bit);
        self.normalize();
        bit
    }

    /// [`Decoder::bit`], with the fixed-rate update when the caller knows the context settled.
    #[inline(always)]
    fn bit_as<const SETTLED: bool>(&mut self, prob: &mut Prob) -> u32 {
        let bit = self.bit_raw(prob);
        if SETTLED {
            prob.update_settled(bit);
        } else {
            prob.update(bit);
        }
        self.normalize();
        bit
    }

    /// The decision alone, without adapting the context.
    #[inline(always)]
    fn bit_raw(&mut self, prob: &Prob) -> u32 {
        let bound = (self.range >> 16) * u32::from(prob.p);
        if self.code < bound {
            self.range = bound;
            0
        } else {
            self.code -= bound;
            self.range -= bound;
            1
        }
    }

    /// Decodes `n` equiprobable bits (see [`Encoder::direct`]).
    #[inline]
    pub(crate) fn direct(&mut self, n: u32) -> u64 {
        let mut v = 0u64;
        let mut left = n;
        while left > 0 {
            let c = left.min(16);
            left -= c;
            self.range >>= c;
            // range >= 2^8 here (>= 2^24 before the shift). Garbage can put code beyond the
            // interval; clamping keeps the arithmetic in range, the result is garbage anyway.
            let chunk = (self.code / self.range).min((1u32 << c) - 1);
            self.code -= chunk * self.range;
            v = (v << c) | u64::from(chunk);
            self.normalize();
        }
        v
    }
}

/// Number of modelled bits under the leading one; the rest are sent directly.
const MANT_BITS: u32 = 2;

/// Context model for a stream of `u64` residuals: the bit length ("class", 0..=64) through a
/// 7-level bit tree, then the top mantissa bits per class, then raw bits.
pub(crate) struct ResidualModel {
    class: [Prob; 128],
    mant: [[Prob; 1 << MANT_BITS]; 65],
}

impl Default for ResidualModel {
    fn default() -> ResidualModel {
        ResidualModel {
            class: [Prob::default(); 128],
            mant: [[Prob::default(); 1 << MANT_BITS]; 65],
        }
    }
}

impl ResidualModel {
    /// Codes one residual.
    #[inline]
    pub(crate) fn encode(&mut self, enc: &mut Encoder, v: u64) {
        let class = 64 - v.leading_zeros();
        let mut node = 1usize;
        for i in (0..7).rev() {
            let b = (class >> i) & 1;
            if let Some(p) = self.class.get_mut(node) {
                enc.bit(p, b);
            }
            node = (node << 1) | b as usize;
        }
        if class >= 2 {
            let below = class - 1;
            let modelled = below.min(MANT_BITS);
            let raw = below - modelled;
            let top = (v >> raw) & ((1u64 << modelled) - 1);
            let mut node = 1usize;
            if let Some(ctx) = self.mant.get_mut(class as usize) {
                for i in (0..modelled).rev() {
                    let b = ((top >> i) & 1) as u32;
                    if let Some(p) = ctx.get_mut(node) {
                        enc.bit(p, b);
                    }
                    node = (node << 1) | b as usize;
                }
            }
            enc.direct(v, raw);
        }
    }

    /// Decodes one residual; `None` for an impossible class (garbage input).
    #[inline]
    pub(crate) fn decode(&mut self, dec: &mut Decoder) -> Option<u64> {
        let mut node = 1usize;
        for _ in 0..7 {
            let p = self.class.get_mut(node)?;
            node = (node << 1) | dec.bit(p) as usize;
        }
        let class = (node - 128) as u32;
        if class > 64 {
            return None;
        }
        if class < 2 {
            return Some(u64::from(class));
        }
        let below = class - 1;
        let modelled = below.min(MANT_BITS);
        let raw = below - modelled;
        let ctx = self.mant.get_mut(class as usize)?;
        let mut node = 1usize;
        for _ in 0..modelled {
            let p = ctx.get_mut(node)?;
            node = (node << 1) | dec.bit(p) as usize;
        }
        let top = (node as u64) - (1u64 << modelled);
        let lead = 1u64 << below;
        Some(lead | (top << raw) | dec.direct(raw))
    }
}

/// Unary positions with their own context before escaping to the bit-length model.
pub(crate) const Q_MAX: usize = 24;

/// Adaptive Rice model for the quotient `v >> k`: unary with one context per position (an exact
/// adaptive model of the quotient distribution with only a handful of parameters to learn).
/// Fewer contexts than [`ResidualModel`] means a cheaper learning phase, which dominates on
/// 360-value buckets. The low `k` bits are uniform and live outside the range coder, in a
/// plain bit-packed array, so decoding them is off the coder's serial dependency chain.
pub(crate) struct RiceModel {
    k: u32,
    /// Largest quotient whose shift by `k` fits 64 bits.
    max_q: u64,
    q: [Prob; Q_MAX],
    /// The escape model: ~1.5 KiB of contexts that most columns never touch, so it is built
    /// on first use rather than with every column.
    esc: Option<Box<ResidualModel>>,
}

impl RiceModel {
    /// A model with Rice parameter `k` (< 64).
    pub(crate) fn new(k: u32) -> RiceModel {
        let k = k.min(63);
        RiceModel {
            k,
            max_q: u64::MAX >> k,
            q: [Prob::default(); Q_MAX],
            esc: None,
        }
    }

    fn esc(&mut self) -> &mut ResidualModel {
        self.esc.get_or_insert_with(Box::default)
    }

    /// Codes one residual.
    #[inline]
    pub(crate) fn encode(&mut self, enc: &mut Encoder, v: u64) {
        let q = v >> self.k;
        for (i, p) in self.q.iter_mut().enumerate() {
            if (i as u64) < q {
                enc.bit(p, 1);
            } else {
                enc.bit(p, 0);
                break;
            }
        }
        if q >= Q_MAX as u64 {
            self.esc().encode(enc, q - Q_MAX as u64);
        }
    }

    /// Decodes one quotient; `None` when garbage overflows 64 bits.
    #[cfg(test)]
    pub(crate) fn decode(&mut self, dec: &mut Decoder) -> Option<u64> {
        self.decode_from(dec, 0)
    }

    /// Decodes one quotient whose first `start` unary bits were ones (decoded by the caller).
    #[inline(always)]
    fn decode_from(&mut self, dec: &mut Decoder, start: usize) -> Option<u64> {
        let mut q = start as u64;
        for p in self.q.iter_mut().skip(start) {
            if dec.bit(p) == 0 {
                break;
            }
            q += 1;
        }
        if q == Q_MAX as u64 {
            q = q.checked_add(self.esc().decode(dec)?)?;
        }
        if q > self.max_q {
            return None;
        }
        Some(q << self.k)
    }

    /// One quotient, its first three unary contexts passed in (see [`RiceModel::decode_all`]);
    /// `S01`/`S2`: whether the first two / the third have settled.
    #[inline(always)]
    fn quotient<const S01: bool, const S2: bool>(
        &mut self,
        dec: &mut Decoder,
        [p0, p1, p2]: [&mut Prob; 3],
        two: Option<u64>,
    ) -> Option<u64> {
        Some(if dec.bit_as::<S01>(p0) == 0 {
            0
        } else if dec.bit_as::<S01>(p1) == 0 {
            1u64 << self.k
        } else if dec.bit_as::<S2>(p2) == 0 {
            two?
        } else {
            self.decode_from(dec, 3)?
        })
    }

    /// Decodes `out.len()` quotients, then ORs in `low(i)` (the low bits of value `i`).
    ///
    /// The first two unary contexts live in locals rather than the array: every value starts
    /// with the first (and most with the second), and the next value's first bit needs its
    /// updated probability, a dependency that would otherwise go through a store and a load.
    #[inline(always)]
    fn decode_all(
        &mut self,
        dec: &mut Decoder,
        out: &mut [u64],
        mut low: impl FnMut() -> u64,
    ) -> Option<()> {
        let [mut p0, mut p1, mut p2, ..] = self.q;
        // Quotient 2 overflows when k = 63 (garbage); 1 never does.
        let two = (self.max_q >= 2).then_some(2u64 << self.k);
        let mut slots = out.iter_mut();
        // Three phases, so that settled contexts take the cheaper fixed-rate update: the
        // first two settle after a few dozen values, the third later or (small residuals
        // relative to k) never.
        while !(p0.settled() && p1.settled()) {
            let Some(slot) = slots.next() else { break };
            *slot = self.quotient::<false, false>(dec, [&mut p0, &mut p1, &mut p2], two)? | low();
        }
        while !p2.settled() {
            let Some(slot) = slots.next() else { break };
            *slot = self.quotient::<true, false>(dec, [&mut p0, &mut p1, &mut p2], two)? | low();
        }
        for slot in slots {
            *slot = self.quotient::<true, true>(dec, [&mut p0, &mut p1, &mut p2], two)? | low();
        }
        let [q0, q1, q2, ..] = &mut self.q;
        (*q0, *q1, *q2) = (p0, p1, p2);
        Some(())
    }
}

/// Estimated coded size in bits of `vals` under Rice parameter `k`: order-0 entropy of the
/// quotients, the raw bits, and ~0.5*log2(n) bits of learning per quotient value seen.
fn rice_cost(vals: &[u64], k: u32) -> f64 {
    let mut hist = [0u32; Q_MAX + 1];
    let mut extra = 0f64;
    for &v in vals {
        let q = (v >> k) as usize;
        if let Some(h) = hist.get_mut(q.min(Q_MAX)) {
            *h += 1;
        }
        if q >= Q_MAX {
            extra += 2.0 * f64::from(64 - ((q - Q_MAX) as u64).leading_zeros()) + 2.0;
        }
    }
    let n = vals.len() as f64;
    let learn = 0.5 * n.max(2.0).log2();
    let mut bits = n * f64::from(k) + extra;
    for &h in &hist {
        if h > 0 {
            let h = f64::from(h);
            bits += -h * (h / n).log2() + learn;
        }
    }
    bits
}

/// Picks the Rice parameter by estimated size; returns it with the estimated size in bits of
/// [`encode_rice`]'s output under it (both parts), within a few percent of the real size for
/// sequences of a hundred values or more.
pub(crate) fn choose_k_cost(vals: &[u64]) -> (u32, f64) {
    let mean = vals.iter().map(|&v| v as f64).sum::<f64>() / vals.len().max(1) as f64;
    let m = (mean + 1.0).log2().floor() as i64;
    // The optimum sits at or just below log2(mean) for geometric-to-Gaussian residuals; three
    // candidates keep the estimate cheap.
    let lo = (m - 2).clamp(0, 63) as u32;
    let hi = m.clamp(0, 63) as u32;
    (lo..=hi)
        .map(|k| (k, rice_cost(vals, k)))
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .unwrap_or((0, 0.0))
}

/// Codes a residual stream with the adaptive Rice model: (range-coded quotients, bit-packed
/// low `k` bits of every residual).
pub(crate) fn encode_rice(vals: &[u64], k: u32) -> (Vec<u8>, Vec<u8>) {
    let mut enc = Encoder::default();
    let mut m = RiceModel::new(k);
    let mut low = BitWriter::default();
    for &v in vals {
        m.encode(&mut enc, v);
        low.write(v, m.k);
    }
    (enc.finish(), low.finish())
}

/// Size of the bit-packed low part of [`encode_rice`] for `n` residuals.
pub(crate) fn rice_low_len(n: usize, k: u32) -> Option<usize> {
    Some(n.checked_mul(k as usize)?.div_ceil(8))
}

/// Sequential reader of `k`-bit fields; the caller guarantees `data` holds all of them.
struct LowBits<'a> {
    data: &'a [u8],
    k: u32,
    mask: u64,
    bitpos: usize,
}

impl LowBits<'_> {
    #[inline]
    fn next(&mut self) -> u64 {
        if self.k == 0 {
            return 0;
        }
        let byte = self.bitpos >> 3;
        let shift = (self.bitpos & 7) as u32;
        self.bitpos += self.k as usize;
        // Fast path: one unaligned 8-byte load covers shift + k <= 63 bits.
        if self.k <= 56 {
            if let Some(w) = self.data.get(byte..byte + 8) {
                let mut a = [0u8; 8];
                a.copy_from_slice(w);
                return (u64::from_le_bytes(a) >> shift) & self.mask;
            }
        }
        let mut a = [0u8; 16];
        let tail = self.data.get(byte..).unwrap_or(&[]);
        let take = tail.len().min(16);
        if let (Some(dst), Some(src)) = (a.get_mut(..take), tail.get(..take)) {
            dst.copy_from_slice(src);
        }
        ((u128::from_le_bytes(a) >> shift) as u64) & self.mask
    }
}

/// Decodes residuals coded by [`encode_rice`] into `out`, one per slot; `low` must hold
/// `rice_low_len(out.len(), k)` bytes. The loop only decodes: undoing zigzag and differencing
/// is left to a second pass, so the range coder's state stays in registers.
pub(crate) fn decode_rice(data: &[u8], low: &[u8], k: u32, out: &mut [u64]) -> Option<()> {
    let mut dec = Decoder::new(data);
    let mut m = RiceModel::new(k);
    if m.k == 0 {
        return m.decode_all(&mut dec, out, || 0);
    }
    let mut lb = LowBits {
        data: low,
        k: m.k,
        mask: (1u64 << m.k) - 1,
        bitpos: 0,
    };
    m.decode_all(&mut dec, out, || lb.next())
}

/// Range-codes a residual stream.
pub(crate) fn encode_residuals(vals: &[u64]) -> Vec<u8> {
    let mut enc = Encoder::default();
    let mut m = ResidualModel::default();
    for &v in vals {
        m.encode(&mut enc, v);
    }
    enc.finish()
}

/// Decodes residuals coded by [`encode_residuals`] into `out`; `None` on garbage.
pub(crate) fn decode_residuals(data: &[u8], out: &mut [u64]) -> Option<()> {
    let mut dec = Decoder::new(data);
    let mut m = ResidualModel::default();
    for slot in out.iter_mut() {
        *slot = m.decode(&mut dec)?;
    }
    Some(())
}

/// The decoders as they were first written (one value at a time, through a callback): the
/// reference the faster ones are checked against, on valid and damaged input alike.
#[cfg(test)]
pub(crate) mod reference {
    use super::{Decoder, LowBits, ResidualModel, RiceModel};

    /// Decodes `n` residuals coded by `encode_rice`.
    pub(crate) fn decode_rice(
        data: &[u8],
        low: &[u8],
        k: u32,
        n: usize,
        mut sink: impl FnMut(u64),
    ) -> Option<()> {
        let mut dec = Decoder::new(data);
        let mut m = RiceModel::new(k);
        let mut lb = LowBits {
            data: low,
            k: m.k,
            mask: if m.k >= 64 {
                u64::MAX
            } else {
                (1u64 << m.k) - 1
            },
            bitpos: 0,
        };
        for _ in 0..n {
            let q = m.decode(&mut dec)?;
            sink(q | lb.next());
        }
        Some(())
    }

    /// Decodes `n` residuals coded by `encode_residuals`.
    pub(crate) fn decode_residuals(data: &[u8], n: usize, mut sink: impl FnMut(u64)) -> Option<()> {
        let mut dec = Decoder::new(data);
        let mut m = ResidualModel::default();
        for _ in 0..n {
            sink(m.decode(&mut dec)?);
        }
        Some(())
    }
}

#[cfg(test)]
// Tests may panic: a panic is how a test fails.
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn residuals_round_trip_including_extremes() {
        let mut vals = vec![0u64, 1, 2, 3, 4, 5, 1000, u64::MAX, 1 << 63, 7];
        let mut x = 1u64;
        for _ in 0..5000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            vals.push(x >> (x % 64));
        }
        let buf = encode_residuals(&vals);
        let mut got = vec![0; vals.len()];
        assert!(decode_residuals(&buf, &mut got).is_some());
        assert_eq!(got, vals);
    }

    #[test]
    fn streams_ending_in_long_zero_runs_decode() {
        let vals: Vec<u64> = (0..300)
            .map(|i| if i % 7 == 0 { 40000 } else { 0 })
            .collect();
        for k in [0, 14, 19] {
            let (buf, low) = encode_rice(&vals, k);
            assert_eq!(Some(low.len()), rice_low_len(vals.len(), k));
            let mut got = vec![0; vals.len()];
            assert!(decode_rice(&buf, &low, k, &mut got).is_some());
            assert_eq!(got, vals);
        }
    }

    #[test]
    fn rice_round_trips_for_every_k_including_escapes() {
        let mut vals = vec![0u64, 1, u64::MAX, 1 << 63, 1 << 40, 3];
        let mut x = 5u64;
        for _ in 0..3000 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            vals.push((x >> 40) >> (x % 24));
        }
        for k in [0, 1, 5, 13, 40, 63] {
            let (buf, low) = encode_rice(&vals, k);
            let mut got = vec![0; vals.len()];
            assert!(decode_rice(&buf, &low, k, &mut got).is_some());
            assert_eq!(got, vals, "k={k}");
        }
        assert!(choose_k_cost(&vals).0 < 64);
    }

    #[test]
    fn a_quotient_that_overflows_64_bits_is_garbage() {
        // With k = 63 only quotients 0 and 1 fit; unary 1, 1, 0 says 2.
        let mut enc = Encoder::default();
        let mut q = [Prob::default(); 3];
        for (p, b) in q.iter_mut().zip([1, 1, 0]) {
            enc.bit(p, b);
        }
        let data = enc.finish();
        let low = vec![0u8; rice_low_len(1, 63).unwrap()];
        assert!(decode_rice(&data, &low, 63, &mut [0]).is_none());
        assert!(reference::decode_rice(&data, &low, 63, 1, |_| {}).is_none());
        // k = 62 leaves room for it.
        let low = vec![0u8; rice_low_len(1, 62).unwrap()];
        let mut out = [0];
        assert!(decode_rice(&data, &low, 62, &mut out).is_some());
        assert_eq!(out, [2 << 62]);
    }

    #[test]
    fn all_zero_residuals_cost_almost_nothing() {
        let buf = encode_residuals(&[0u64; 1000]);
        assert!(buf.len() < 12, "{}", buf.len());
    }
}
