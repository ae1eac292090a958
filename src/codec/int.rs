//! Integer sequences ("intseq"): the shared back end for Int32/Int64/DateTime columns, scaled
//! doubles, string dictionary indices and the parts of ObjectIds and Timestamps.
//!
//! A sequence is differenced `order` times (0, 1 or 2: plain, delta, delta-of-delta) with
//! wrapping arithmetic so every i64 round-trips, residuals are zigzagged and stored as all-zero
//! (nothing), bit-packed blocks (fast to decode) or range-coded (smallest). Residuals that are
//! mostly zero (runs of equal times: several rows per period) are stored sparse instead, as the
//! positions and values of the others: as small as range coding them and decoded at memory
//! speed. Residuals sharing a factor (times on whole seconds or minutes, in milliseconds) are
//! stored divided by it.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use super::bits::{self, put_svarint, put_varint, unzigzag, varint_len, zigzag, Reader};
use super::rc;
use super::rice;
use super::CodecError;

/// Residual storage kinds (high bits of the mode byte).
const KIND_ZERO: u8 = 0;
const KIND_PACK: u8 = 1;
const KIND_RC: u8 = 2;
const KIND_RICE: u8 = 3;

/// Mode bit: the range-coded stream runs to the end of the enclosing body, so its length is
/// not stored. Saves 1-2 bytes per column; only valid when nothing follows the sequence.
const TO_END_MODE: u8 = 0x10;
/// [`TO_END_MODE`] as seen in `kind` before shifting into the mode byte.
const TO_END: u8 = TO_END_MODE >> 2;

/// Mode bit: the residuals are sparse, stored as the gaps between the nonzero ones and their
/// values (two nested intseqs, neither of them sparse). Segment directory version 4 and later.
const SPARSE_MODE: u8 = 0x20;

/// A sparse body is kept when it is at most 1/`SPARSE_SLACK` larger than the densest form
/// (plus a byte per 128 rows for very sparse sequences of at least [`SPARSE_LONG`] values).
const SPARSE_SLACK: usize = 8;

/// [`SPARSE_SLACK`] against range-coded bodies (1/2 larger), which are slow to read.
const SPARSE_SLACK_CODED: usize = 2;

/// See [`SPARSE_SLACK`]: long enough for the allowance to matter, longer than an hour's bucket
/// at 10 s steps (360 rows), whose near-constant `_id` seconds would otherwise pay for it.
const SPARSE_LONG: usize = 512;

/// Mode bit: the residuals are stored divided by a common factor, `scale:varint` (≥ 2) after
/// the heads. Top-level sequences only; segment directory version 4 and later.
const SCALED_MODE: u8 = 0x40;

/// Mode bit, with [`KIND_RICE`] and without `to_end`: the residuals are plain Rice codes
/// ([`rice`]) instead of the adaptive model's. Segment directory version 5 and later.
const PLAIN_MODE: u8 = 0x80;

/// Plain Rice codes are kept when at most 1/`PLAIN_SLACK` larger than the smallest form: they
/// read several times faster than the range-coded forms, which is worth a few percent.
const PLAIN_SLACK: usize = 8;

/// [`PLAIN_SLACK`] for dates: a collection's time column is read by nearly every query (to
/// judge time ranges, to bin by time), and times stamped a few rows per period range-code to a
/// byte or two per ten rows, so reading speed is worth a third more of very little.
const PLAIN_SLACK_DATES: usize = 2;

/// Sparse storage is tried when at most one residual in this many is nonzero (and kept as
/// [`SPARSE_SLACK`] says).
const SPARSE_SHARE: usize = 2;

/// Values per bit-packing block: small enough to adapt the width, large enough that the width
/// byte is negligible.
const PACK_BLOCK: usize = 128;

#[cfg(test)]
thread_local! {
    /// Encode as directory-version-4 writers did, without plain Rice codes (tests pin those
    /// encodings: files written then must still read the same).
    pub(crate) static PLAIN_OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
thread_local! {
    /// Always size the adaptive coder's output before choosing plain Rice codes (tests check
    /// that the shortcut picks the same).
    pub(crate) static SURE_PLAIN_OFF: std::cell::Cell<bool> =
        const { std::cell::Cell::new(false) };
}

fn sure_plain_off() -> bool {
    #[cfg(test)]
    return SURE_PLAIN_OFF.with(std::cell::Cell::get);
    #[cfg(not(test))]
    false
}

fn plain_off() -> bool {
    #[cfg(test)]
    return PLAIN_OFF.with(std::cell::Cell::get);
    #[cfg(not(test))]
    false
}

/// Residuals of `vals` for a differencing order, plus the heads needed to undo it.
fn residuals(vals: &[i64], order: u8) -> (Vec<i64>, Vec<u64>) {
    let mut heads = Vec::new();
    let mut res = Vec::with_capacity(vals.len());
    let mut prev = 0i64;
    let mut prev_d = 0i64;
    for (i, &v) in vals.iter().enumerate() {
        let d = v.wrapping_sub(prev);
        match (order, i) {
            (0, _) => res.push(zigzag(v)),
            (1, 0) | (2, 0) => heads.push(v),
            (1, _) => res.push(zigzag(d)),
            (2, 1) => heads.push(d),
            _ => res.push(zigzag(d.wrapping_sub(prev_d))),
        }
        prev = v;
        prev_d = d;
    }
    (heads, res)
}

/// Exact size of the PACK representation of `res`.
fn pack_size(res: &[u64]) -> usize {
    res.chunks(PACK_BLOCK)
        .map(|c| {
            let w = c.iter().map(|&v| 64 - v.leading_zeros()).max().unwrap_or(0) as usize;
            1 + (c.len() * w).div_ceil(8)
        })
        .sum()
}

fn write_pack(out: &mut Vec<u8>, res: &[u64]) {
    for c in res.chunks(PACK_BLOCK) {
        let w = c.iter().map(|&v| 64 - v.leading_zeros()).max().unwrap_or(0);
        out.push(w as u8);
        let mut bw = super::bits::BitWriter::default();
        for &v in c {
            bw.write(v, w);
        }
        out.extend_from_slice(&bw.finish());
    }
}

/// Appends the intseq encoding of `vals`. `n` is not stored: the reader knows it.
pub(crate) fn encode(vals: &[i64], out: &mut Vec<u8>) {
    encode_with(vals, out, false, true, PLAIN_SLACK);
}

/// Like [`encode`], for a sequence that ends the body: a range-coded stream then runs to the
/// end and its length is omitted.
pub(crate) fn encode_last(vals: &[i64], out: &mut Vec<u8>) {
    encode_with(vals, out, true, true, PLAIN_SLACK);
}

/// The sparse body of `res` (see [`SPARSE_MODE`]), when few enough residuals are nonzero.
fn sparse_body(res: &[u64], last: bool, slack: usize) -> Option<Vec<u8>> {
    let nz = res.iter().filter(|&&z| z != 0).count();
    if nz == 0 || nz * SPARSE_SHARE > res.len() {
        return None;
    }
    let mut gaps = Vec::with_capacity(nz);
    let mut vals = Vec::with_capacity(nz);
    let mut next = 0usize;
    for (i, &z) in res.iter().enumerate() {
        if z != 0 {
            gaps.push((i - next) as i64);
            vals.push(unzigzag(z));
            next = i + 1;
        }
    }
    let mut body = Vec::new();
    put_varint(&mut body, nz as u64);
    encode_with(&gaps, &mut body, false, false, slack);
    encode_with(&vals, &mut body, last, false, slack);
    Some(body)
}

/// [`encode`] or [`encode_last`] for dates: plain Rice codes within [`PLAIN_SLACK_DATES`].
pub(crate) fn encode_dates(vals: &[i64], out: &mut Vec<u8>, last: bool) {
    encode_with(vals, out, last, true, PLAIN_SLACK_DATES);
}

/// `top`: a sequence of its own, which may be sparse or scaled (the sequences inside a sparse
/// body are neither).
fn encode_with(vals: &[i64], out: &mut Vec<u8>, last: bool, top: bool, slack: usize) {
    if vals.is_empty() {
        return;
    }
    // Pick the order by the total significant bits of the residuals, a cheap proxy for every
    // back end; ties go to the lower order (cheaper to decode). One pass, no allocation.
    let bits = |e: i64| u64::from(64 - zigzag(e).leading_zeros()) + 1;
    let mut cost = [0u64; 3];
    let (mut prev, mut prev_d) = (0i64, 0i64);
    for (i, &v) in vals.iter().enumerate() {
        let d = v.wrapping_sub(prev);
        cost[0] += bits(v);
        cost[1] += if i == 0 {
            8 * varint_len(zigzag(v)) as u64
        } else {
            bits(d)
        };
        cost[2] += match i {
            0 => 8 * varint_len(zigzag(v)) as u64,
            1 => 8 * varint_len(zigzag(d)) as u64,
            _ => bits(d.wrapping_sub(prev_d)),
        };
        prev = v;
        prev_d = d;
    }
    let (mut order, mut best) = (0u8, cost[0]);
    for (o, &c) in cost.iter().enumerate().skip(1) {
        if o < vals.len() && c < best {
            (order, best) = (o as u8, c);
        }
    }
    let (heads, res) = residuals(vals, order);
    let (mut mode, mut body) = residual_body(&res, last, top, slack);
    // Residuals sharing a factor (times on whole seconds or minutes, stored in ms) are stored
    // divided by it when that is smaller.
    if let Some(g) = top.then(|| common_factor(&res)).flatten() {
        let scaled: Vec<u64> = res
            .iter()
            .map(|&z| zigzag(unzigzag(z) / g as i64))
            .collect();
        let (m, b) = residual_body(&scaled, last, top, slack);
        if varint_len(g) + b.len() < body.len() {
            mode = SCALED_MODE | m;
            body = Vec::with_capacity(varint_len(g) + b.len());
            put_varint(&mut body, g);
            body.extend_from_slice(&b);
        }
    }
    out.push(mode | order);
    for h in heads {
        put_svarint(out, h);
    }
    out.extend_from_slice(&body);
}

/// The largest factor (at least 2) that every residual is a multiple of, if any: `None` when
/// they are all zero or share none.
fn common_factor(res: &[u64]) -> Option<u64> {
    let mut g = 0u64;
    for &z in res {
        let e = unzigzag(z).unsigned_abs();
        if e != 0 {
            g = gcd(g, e);
            if g == 1 {
                return None;
            }
        }
    }
    // A factor beyond i64::MAX (only residuals of i64::MIN) cannot divide as a signed value.
    (g >= 2 && g <= i64::MAX as u64).then_some(g)
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The mode bits other than the order, and the residual bytes of `res`: all-zero, bit-packed,
/// range coded, Rice coded or (for `top` sequences) sparse, whichever is smallest, with sparse
/// kept within [`SPARSE_SLACK`] of the others.
fn residual_body(res: &[u64], last: bool, top: bool, plain_slack: usize) -> (u8, Vec<u8>) {
    let mut body = Vec::new();
    let mut plain_mode = 0;
    let kind = if res.iter().all(|&v| v == 0) {
        KIND_ZERO
    } else {
        let (k, estimate_bits) = rc::choose_k_cost(res);
        // The bit-length model only pays off on heavy tails (quotients escaping the unary
        // range); trying it everywhere would double the encode time for ~0.05% on metric walks.
        let heavy_tail = res.iter().any(|&v| (v >> k) >= rc::Q_MAX as u64);
        let pack = pack_size(res);
        let sure = (!heavy_tail)
            .then(|| sure_plain(res, k, estimate_bits, pack, last, plain_slack))
            .flatten();
        if let Some(pk) = sure {
            body.push(pk as u8);
            rice::encode(res, pk, &mut body);
            plain_mode = PLAIN_MODE;
            KIND_RICE
        } else {
            let (rice, low) = rc::encode_rice(res, k);
            let len_size = |l: usize| if last { 0 } else { varint_len(l as u64) };
            let rice_size = 1 + rice.len() + len_size(rice.len()) + low.len();
            let rcbuf = if heavy_tail {
                rc::encode_residuals(res)
            } else {
                Vec::new()
            };
            let rc_size = rcbuf.len() + len_size(rcbuf.len());
            let flag = if last { TO_END } else { 0 };
            let smallest = pack
                .min(rice_size)
                .min(if heavy_tail { rc_size } else { usize::MAX });
            let plain = rice::choose(res, k).filter(|&(_, size)| {
                if plain_off() {
                    return false;
                }
                // The body is the `k` byte and the codes. Against PACK, which reads as fast,
                // only when smaller.
                let body = 1 + size;
                if smallest == pack {
                    body < pack
                } else {
                    body <= smallest + smallest / plain_slack
                }
            });
            if let Some((k, _)) = plain {
                body.push(k as u8);
                rice::encode(res, k, &mut body);
                plain_mode = PLAIN_MODE;
                KIND_RICE
            } else if heavy_tail && rc_size < rice_size && rc_size < pack {
                if !last {
                    put_varint(&mut body, rcbuf.len() as u64);
                }
                body.extend_from_slice(&rcbuf);
                KIND_RC | flag
            } else if rice_size < pack {
                body.push(k as u8);
                body.extend_from_slice(&low);
                if !last {
                    put_varint(&mut body, rice.len() as u64);
                }
                body.extend_from_slice(&rice);
                KIND_RICE | flag
            } else {
                write_pack(&mut body, res);
                KIND_PACK
            }
        }
    };
    // `kind` may carry TO_END in bit 2, which lands on mode bit 4 after the shift.
    let mut mode = kind << 2 | plain_mode;
    if let Some(sp) = top.then(|| sparse_body(res, last, plain_slack)).flatten() {
        // Within a little of the smallest form is good enough: sparse bodies decode at
        // memory speed and can be read as runs without expanding them. Long, very sparse
        // sequences get a byte per 128 rows more, since a range coder squeezes long runs of
        // zeros into a few bytes that no other form matches exactly.
        let nz = res.iter().filter(|&&z| z != 0).count();
        let long = res.len() >= SPARSE_LONG && nz * 16 <= res.len();
        // Range-coded bodies cost a binary decision per residual to read: against them,
        // sparse gets a larger allowance.
        let coded = matches!(kind & 3, KIND_RC | KIND_RICE) && plain_mode == 0;
        let slack = if coded {
            SPARSE_SLACK_CODED
        } else {
            SPARSE_SLACK
        };
        let allowance = body.len() / slack + if long { res.len() / 128 } else { 0 };
        if sp.len() <= body.len() + allowance {
            body = sp;
            mode = SPARSE_MODE;
        }
    }
    (mode, body)
}

/// The plain Rice parameter when plain codes are sure to be chosen without running the
/// adaptive coder to size its output, which costs more than everything else the choice does:
/// when the plain body is smaller than PACK and within 1/16 of the adaptive coder's estimated
/// size. The estimate is within 2% of the real size on typical sequences of a hundred values or
/// more (it errs high only when an adaptive model beats a static one), so plain is then within
/// `plain_slack` of the real one too and the full comparison would pick it as well. Shorter
/// sequences, heavy tails and slack tighter than 1/16 take the full comparison.
/// `k` and `bits` are the adaptive model's parameter and estimated size ([`rc::choose_k_cost`]),
/// `pack` the PACK size; `res` has no escaping quotient under `k`.
fn sure_plain(
    res: &[u64],
    k: u32,
    bits: f64,
    pack: usize,
    last: bool,
    plain_slack: usize,
) -> Option<u32> {
    if res.len() < SURE_PLAIN_MIN || plain_slack > 8 || plain_off() || sure_plain_off() {
        return None;
    }
    let (pk, size) = rice::choose(res, k)?;
    let body = 1 + size;
    let coded = (bits / 8.0).ceil() as usize;
    let estimate = 1 + coded + if last { 0 } else { varint_len(coded as u64) };
    (body < pack && body <= estimate + estimate / 16).then_some(pk)
}

/// Shortest sequence [`sure_plain`] judges by the estimate.
const SURE_PLAIN_MIN: usize = 100;

/// Decodes `n` values. The output never exceeds `n` entries, and `n` is bounded by the caller.
///
/// Two passes: the back end writes the zigzagged residuals into the output, then one
/// specialised loop per differencing order turns them into values in place. Separating them
/// keeps each loop small (the range coder's state stays in registers).
pub(crate) fn decode(r: &mut Reader, n: usize) -> Result<Vec<i64>, CodecError> {
    decode_with(r, n, true)
}

/// A bound on the magnitude of every value of the `n`-value sequence at the start of `r`,
/// read from its header alone, when it is stored as plain unscaled Rice codes; `None` for
/// any other mode. It holds for a sequence that decodes: the decoder refuses a quotient over
/// [`rice::MAX_Q`], so each zigzagged residual is under `2^(k + 8)` and its magnitude at most
/// `2^(k + 7)`, and the values lie within the heads plus `n` such steps (of steps, for order
/// 2). Where that bound stays below `2^63` the wrapping arithmetic never wrapped.
pub(crate) fn magnitude_bound(r: &mut Reader, n: usize) -> Option<u64> {
    if n == 0 {
        return Some(0);
    }
    let mode = r.u8().ok()?;
    let order = mode & 3;
    if mode & !3 != PLAIN_MODE | (KIND_RICE << 2) || order > 2 {
        return None;
    }
    let nheads = (order as usize).min(n);
    let mut heads = [0u128; 2];
    for h in heads.iter_mut().take(nheads) {
        *h = u128::from(r.svarint().ok()?.unsigned_abs());
    }
    let k = u32::from(r.u8().ok()?);
    if k > rice::MAX_K {
        return None;
    }
    let step = 1u128 << (k + 7);
    let n = n as u128;
    let bound = match order {
        0 => step,
        1 => heads[0].checked_add((n - 1).checked_mul(step)?)?,
        _ => {
            let diff = heads[1].checked_add(n.saturating_sub(2).checked_mul(step)?)?;
            heads[0].checked_add((n - 1).checked_mul(diff)?)?
        }
    };
    u64::try_from(bound).ok().filter(|&b| b <= i64::MAX as u64)
}

/// [`decode`], refusing the sparse and scaled modes when `top` is false (inside a sparse body).
fn decode_with(r: &mut Reader, n: usize, top: bool) -> Result<Vec<i64>, CodecError> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let mode_at = r.offset();
    let mode = r.u8()?;
    let order = mode & 3;
    let kind = (mode >> 2) & 3;
    let to_end = mode & TO_END_MODE != 0;
    let is_sparse = mode & SPARSE_MODE != 0;
    let scaled = mode & SCALED_MODE != 0;
    let plain = mode & PLAIN_MODE != 0;
    let bad = order > 2
        || (plain && (kind != KIND_RICE || to_end))
        || (!top && (is_sparse || scaled))
        || (is_sparse && (kind != KIND_ZERO || to_end))
        || (scaled && !is_sparse && kind == KIND_ZERO)
        || (to_end && kind < KIND_RC);
    if bad {
        return Err(CodecError::new(
            mode_at,
            format!("bad intseq mode {mode:#04x}"),
        ));
    }
    if is_sparse {
        return decode_sparse(r, n, order, scaled);
    }
    let nheads = (order as usize).min(n);
    if kind == KIND_ZERO {
        // Constant or arithmetic progression (regular timestamps): no residuals to undo.
        let first = if nheads >= 1 { r.svarint()? } else { 0 };
        let step = if nheads >= 2 { r.svarint()? } else { 0 };
        return Ok(match order {
            0 => vec![0; n],
            1 => vec![first; n],
            _ => (0..n as i64)
                .map(|i| first.wrapping_add(step.wrapping_mul(i)))
                .collect(),
        });
    }
    // Heads first, then the residuals; the differencing is undone in place, on the bits of
    // the output vector. Plain unscaled Rice codes write every residual (the low bits, even
    // when they are zero bits wide) before anything reads them; the other kinds are given
    // zeros.
    let mut out = match plain && !scaled {
        true => super::spare::reused(n),
        false => super::spare::zeroed(n),
    };
    let buf: &mut [u64] = bytemuck::cast_slice_mut(&mut out);
    let (heads, res) = buf.split_at_mut(nheads);
    for h in heads.iter_mut() {
        *h = r.svarint()? as u64;
    }
    let scale = if scaled { Some(read_scale(r)?) } else { None };
    match kind {
        KIND_PACK => {
            for block in res.chunks_mut(PACK_BLOCK) {
                let w_at = r.offset();
                let w = u32::from(r.u8()?);
                if w > 64 {
                    return Err(CodecError::new(w_at, format!("bit width {w} > 64")));
                }
                let bytes = r.bytes((block.len() * w as usize).div_ceil(8))?;
                bits::unpack(bytes, w, block)
                    .ok_or_else(|| CodecError::new(w_at, "bit-packed block truncated"))?;
            }
        }
        KIND_RC => {
            let len_at = r.offset();
            let data = if to_end {
                r.rest()
            } else {
                let len = r.len(r.remaining(), "range-coded length")?;
                r.bytes(len)?
            };
            rc::decode_residuals(data, res)
                .ok_or_else(|| CodecError::new(len_at, "corrupt range-coded residuals"))?;
        }
        _ if plain => {
            let k_at = r.offset();
            let k = u32::from(r.u8()?);
            let corrupt = || CodecError::new(k_at, "corrupt Rice codes");
            if scale.is_none() {
                // The quotients join the low bits in the differencing pass. Without low bits
                // the quotients are the codes, and the residual slots (stale, see above) are
                // only written.
                let used = rice::with_quotient_buffer(res.len(), |q| {
                    let res = buf.get_mut(nheads..)?;
                    if k == 0 {
                        let used = rice::decode_quotients(r.peek_rest(), res.len(), q)?;
                        undo_differencing_bytes(order, buf, q);
                        return Some(used);
                    }
                    let used = rice::decode_split(r.peek_rest(), k, res, q)?;
                    let high = q.iter().map(|&qi| u64::from(qi) << k);
                    undo_differencing_joining(order, buf, high);
                    Some(used)
                })
                .ok_or_else(corrupt)?;
                r.bytes(used)?;
                return Ok(out);
            }
            let used = rice::decode(r.peek_rest(), k, res).ok_or_else(corrupt)?;
            r.bytes(used)?;
        }
        _ => {
            let k_at = r.offset();
            let k = u32::from(r.u8()?);
            if k > 63 {
                return Err(CodecError::new(k_at, format!("Rice parameter {k} > 63")));
            }
            let low_len = rc::rice_low_len(res.len(), k)
                .ok_or_else(|| CodecError::new(k_at, "too many residuals"))?;
            let low = r.bytes(low_len)?;
            let data = if to_end {
                r.rest()
            } else {
                let len = r.len(r.remaining(), "range-coded length")?;
                r.bytes(len)?
            };
            rc::decode_rice(data, low, k, res)
                .ok_or_else(|| CodecError::new(k_at, "corrupt range-coded residuals"))?;
        }
    }
    if let Some(g) = scale {
        unscale(res, g);
    }
    undo_differencing(order, buf);
    Ok(out)
}

/// `(first, step)` when the `n` values are stored as an arithmetic progression, value `i`
/// being `first + i * step` (wrapping, as [`decode`] computes it): order 2 without residuals
/// (regular timestamps), or a constant. `Ok(None)` for every other form and for no values.
pub(crate) fn decode_progression(
    r: &mut Reader,
    n: usize,
) -> Result<Option<(i64, i64)>, CodecError> {
    if n == 0 {
        return Ok(None);
    }
    Ok(match r.u8()? {
        // Order 0, all zero: every value is 0.
        0 => Some((0, 0)),
        // Order 1, all zero: a constant.
        1 => Some((r.svarint()?, 0)),
        // Order 2, all zero: the heads are the first value and, given a second, the step.
        2 => {
            let first = r.svarint()?;
            let step = if n >= 2 { r.svarint()? } else { 0 };
            Some((first, step))
        }
        _ => None,
    })
}

/// Decodes `n` values as runs of equal values `(value, length)` without expanding them, when
/// the sequence stores them so: sparse (possibly scaled) or all-zero residuals of order 1 (a
/// run per stored residual), or a constant. `Ok(None)` for every other form (the caller decodes values
/// instead). Checks what [`decode`] checks; runs need not be maximal (a stored residual of 0
/// splits one).
pub(crate) fn decode_runs(r: &mut Reader, n: usize) -> Result<Option<Vec<(i64, u32)>>, CodecError> {
    let Ok(n32) = u32::try_from(n) else {
        return Ok(None);
    };
    if n == 0 {
        return Ok(Some(Vec::new()));
    }
    let mode = r.u8()?;
    let first = |r: &mut Reader| r.svarint();
    match mode {
        // Order 0, all zero: every value is 0.
        0 => Ok(Some(vec![(0, n32)])),
        // Order 1, all zero: a constant.
        1 => Ok(Some(vec![(first(r)?, n32)])),
        m if m & !SCALED_MODE == SPARSE_MODE | 1 => {
            let mut v = first(r)?;
            let scale = match m & SCALED_MODE {
                0 => 1,
                _ => read_scale(r)?,
            };
            let nz_at = r.offset();
            let nz = r.len(n - 1, "sparse residual count")?;
            let gaps = decode_with(r, nz, false)?;
            let vals = decode_with(r, nz, false)?;
            let mut runs = Vec::with_capacity(nz + 1);
            // Residual `i` (0-based) is the step from row `i` to row `i + 1`.
            let (mut start, mut next) = (0usize, 0usize);
            for (&g, &e) in gaps.iter().zip(&vals) {
                let at = usize::try_from(g)
                    .ok()
                    .and_then(|g| next.checked_add(g))
                    .filter(|&i| i < n - 1);
                let Some(i) = at else {
                    return Err(CodecError::new(
                        nz_at,
                        "sparse residual position out of range",
                    ));
                };
                runs.push((v, (i + 1 - start) as u32));
                v = v.wrapping_add(e.wrapping_mul(scale));
                start = i + 1;
                next = i + 1;
            }
            runs.push((v, (n - start) as u32));
            super::spare::give_back(gaps);
            super::spare::give_back(vals);
            Ok(Some(runs))
        }
        _ => Ok(None),
    }
}

/// The rest of a sparse intseq, after its mode byte: heads, the nonzero residuals scattered
/// into zeros, then the differencing undone.
fn decode_sparse(
    r: &mut Reader,
    n: usize,
    order: u8,
    scaled: bool,
) -> Result<Vec<i64>, CodecError> {
    let nheads = (order as usize).min(n);
    let mut out = super::spare::zeroed(n);
    let buf: &mut [u64] = bytemuck::cast_slice_mut(&mut out);
    let (heads, res) = buf.split_at_mut(nheads);
    for h in heads.iter_mut() {
        *h = r.svarint()? as u64;
    }
    let scale = if scaled { Some(read_scale(r)?) } else { None };
    let nz_at = r.offset();
    let nz = r.len(res.len(), "sparse residual count")?;
    let gaps = decode_with(r, nz, false)?;
    let vals = decode_with(r, nz, false)?;
    let mut next = 0usize;
    for (&g, &v) in gaps.iter().zip(&vals) {
        let slot = usize::try_from(g)
            .ok()
            .and_then(|g| next.checked_add(g))
            .and_then(|i| res.get_mut(i).map(|z| (i, z)));
        let Some((i, z)) = slot else {
            return Err(CodecError::new(
                nz_at,
                "sparse residual position out of range",
            ));
        };
        *z = zigzag(v);
        next = i + 1;
    }
    super::spare::give_back(gaps);
    super::spare::give_back(vals);
    if let Some(g) = scale {
        unscale(res, g);
    }
    undo_differencing(order, buf);
    Ok(out)
}

/// Reads the common factor of a scaled sequence: at least 2 and a positive i64.
fn read_scale(r: &mut Reader) -> Result<i64, CodecError> {
    let at = r.offset();
    match r.varint()? {
        g @ 2..=0x7FFF_FFFF_FFFF_FFFF => Ok(g as i64),
        g => Err(CodecError::new(
            at,
            format!("residual scale {g} out of range"),
        )),
    }
}

/// Multiplies zigzagged residuals by their common factor, with the wrapping arithmetic the
/// differencing uses.
fn unscale(res: &mut [u64], g: i64) {
    for z in res.iter_mut() {
        *z = zigzag(unzigzag(*z).wrapping_mul(g));
    }
}

/// Turns `buf` (heads, then zigzagged residuals) into the values, in place and as bits, with
/// the wrapping arithmetic [`residuals`] differenced them with; one loop per order.
fn undo_differencing(order: u8, buf: &mut [u64]) {
    undo_differencing_joining(order, buf, std::iter::repeat(0));
}

/// Each byte's zigzag decoding: a residual under Rice parameter 0 is its quotient, one byte,
/// and a load from this table replaces the shifts and masks of [`unzigzag`].
// `b` stays below the table's length.
#[allow(clippy::indexing_slicing)]
static UNZIGZAG_BYTE: [i64; 256] = {
    let mut t = [0i64; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = ((b >> 1) as i64) ^ -((b & 1) as i64);
        b += 1;
    }
    t
};

/// [`undo_differencing`] of residuals that are whole bytes (Rice codes without low bits):
/// `buf` holds the heads, then slots written without being read, and `q` the residuals.
fn undo_differencing_bytes(order: u8, buf: &mut [u64], q: &[u8]) {
    // A byte always indexes the table: the check compiles away.
    let d = |x: u8| UNZIGZAG_BYTE.get(usize::from(x)).copied().unwrap_or(0);
    if order == 1 {
        if let Some((first, res)) = buf.split_first_mut() {
            let m = res.len().min(q.len());
            let (res, q) = (res.get_mut(..m).unwrap_or_default(), q.get(..m).unwrap_or_default());
            let prev = undo_first_order_bytes(*first as i64, res, q, d);
            // The last few, one at a time.
            let done = m - m % 8;
            let (res, q) = (res.get_mut(done..).unwrap_or_default(), q.get(done..).unwrap_or_default());
            let mut prev = prev;
            for (z, &x) in res.iter_mut().zip(q) {
                prev = prev.wrapping_add(d(x));
                *z = prev as u64;
            }
        }
        return;
    }
    undo_differencing_by(order, buf, q.iter(), |_, x| d(*x));
}

/// First-order [`undo_differencing_bytes`] of the whole chunks of 8 residuals in `q` into
/// `res` (as long), from the value `prev` before them; returns the last value. Each chunk's
/// running sums are taken apart from `prev`, which then joins each with one add: the chain
/// from one value to the next, one add a value in the plain loop, is one add a chunk, and
/// the chunk's fixed length unrolls it.
#[inline(always)]
fn undo_first_order_bytes(
    mut prev: i64,
    res: &mut [u64],
    q: &[u8],
    d: impl Fn(u8) -> i64,
) -> i64 {
    for (out, chunk) in res.chunks_exact_mut(8).zip(q.chunks_exact(8)) {
        let mut sums = [0i64; 8];
        let mut acc = 0i64;
        for (s, &x) in sums.iter_mut().zip(chunk) {
            acc = acc.wrapping_add(d(x));
            *s = acc;
        }
        for (z, s) in out.iter_mut().zip(sums) {
            *z = prev.wrapping_add(s) as u64;
        }
        prev = prev.wrapping_add(acc);
    }
    prev
}

/// [`undo_differencing`] of residuals stored in halves: `buf` holds the heads, then the low
/// bits of each residual, and `high` gives the rest of each residual's bits in turn (the
/// Rice quotients [`rice::decode_split`] left apart, shifted into place), ORed in on the way.
/// Residuals without low bits take [`undo_differencing_bytes`].
fn undo_differencing_joining(order: u8, buf: &mut [u64], high: impl Iterator<Item = u64>) {
    undo_differencing_by(order, buf, high, |z, h| unzigzag(z | h));
}

/// Turns `buf` (heads, then a slot per residual) into the values, in place, one loop per
/// order: the residual of each slot is `residual(slot, item)`, the items taken in turn.
#[inline(always)]
fn undo_differencing_by<I>(
    order: u8,
    buf: &mut [u64],
    items: impl Iterator<Item = I>,
    residual: impl Fn(u64, I) -> i64,
) {
    match order {
        0 => {
            for (z, h) in buf.iter_mut().zip(items) {
                *z = residual(*z, h) as u64;
            }
        }
        1 => {
            let Some((first, res)) = buf.split_first_mut() else {
                return;
            };
            let mut prev = *first as i64;
            for (z, h) in res.iter_mut().zip(items) {
                prev = prev.wrapping_add(residual(*z, h));
                *z = prev as u64;
            }
        }
        _ => {
            let [first, second, res @ ..] = buf else {
                // One value: just its head.
                return;
            };
            let mut prev_d = *second as i64;
            let mut prev = (*first as i64).wrapping_add(prev_d);
            *second = prev as u64;
            for (z, h) in res.iter_mut().zip(items) {
                prev_d = prev_d.wrapping_add(residual(*z, h));
                prev = prev.wrapping_add(prev_d);
                *z = prev as u64;
            }
        }
    }
}

#[cfg(test)]
// Tests may panic: a panic is how a test fails.
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::super::bits::BitReader;
    use super::*;

    /// `decode` as first written, on the reference back ends.
    fn reference_decode(r: &mut Reader, n: usize) -> Result<Vec<i64>, CodecError> {
        reference_decode_with(r, n, true)
    }

    fn reference_decode_with(
        r: &mut Reader,
        n: usize,
        sparse: bool,
    ) -> Result<Vec<i64>, CodecError> {
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return Ok(out);
        }
        let mode_at = r.offset();
        let mode = r.u8()?;
        let order = mode & 3;
        let kind = (mode >> 2) & 3;
        let to_end = mode & TO_END_MODE != 0;
        let top = sparse;
        let sparse = mode & SPARSE_MODE != 0;
        let scaled = mode & SCALED_MODE != 0;
        let plain = mode & PLAIN_MODE != 0;
        let bad_sparse = sparse && (kind != 0 || to_end);
        if order > 2
            || (plain && (kind != KIND_RICE || to_end))
            || (!top && (sparse || scaled))
            || bad_sparse
            || (scaled && !sparse && kind == KIND_ZERO)
            || (to_end && kind < KIND_RC)
        {
            return Err(CodecError::new(
                mode_at,
                format!("bad intseq mode {mode:#04x}"),
            ));
        }
        let nheads = (order as usize).min(n);
        let mut prev = 0i64;
        let mut prev_d = 0i64;
        if nheads >= 1 {
            prev = r.svarint()?;
            out.push(prev);
        }
        if nheads >= 2 {
            prev_d = r.svarint()?;
            prev = prev.wrapping_add(prev_d);
            out.push(prev);
        }
        let nres = n - nheads;
        let scale = if scaled {
            let at = r.offset();
            let g = r.varint()?;
            if !(2..=i64::MAX as u64).contains(&g) {
                return Err(CodecError::new(at, "bad scale"));
            }
            g as i64
        } else {
            1
        };
        // Undo the differencing; one closure so every back end shares the exact arithmetic.
        let mut push = |z: u64| {
            let e = unzigzag(z).wrapping_mul(scale);
            match order {
                0 => out.push(e),
                1 => {
                    prev = prev.wrapping_add(e);
                    out.push(prev);
                }
                _ => {
                    prev_d = prev_d.wrapping_add(e);
                    prev = prev.wrapping_add(prev_d);
                    out.push(prev);
                }
            }
        };
        match kind {
            _ if sparse => {
                let nz_at = r.offset();
                let nz = r.len(nres, "sparse residual count")?;
                let gaps = reference_decode_with(r, nz, false)?;
                let vals = reference_decode_with(r, nz, false)?;
                let mut at = 0i64;
                for (g, v) in gaps.into_iter().zip(vals) {
                    if g < 0 || at.checked_add(g).is_none_or(|e| e >= nres as i64) {
                        return Err(CodecError::new(nz_at, "sparse position out of range"));
                    }
                    for _ in 0..g {
                        push(0);
                    }
                    push(zigzag(v));
                    at += g + 1;
                }
                for _ in at..nres as i64 {
                    push(0);
                }
            }
            KIND_ZERO => {
                for _ in 0..nres {
                    push(0);
                }
            }
            KIND_PACK => {
                let mut left = nres;
                while left > 0 {
                    let cnt = left.min(PACK_BLOCK);
                    let w_at = r.offset();
                    let w = u32::from(r.u8()?);
                    if w > 64 {
                        return Err(CodecError::new(w_at, format!("bit width {w} > 64")));
                    }
                    let bytes = r.bytes((cnt * w as usize).div_ceil(8))?;
                    let mut br = BitReader::new(bytes);
                    for _ in 0..cnt {
                        let v = br
                            .read(w)
                            .ok_or_else(|| CodecError::new(w_at, "bit-packed block truncated"))?;
                        push(v);
                    }
                    left -= cnt;
                }
            }
            KIND_RC => {
                let len_at = r.offset();
                let data = if to_end {
                    r.rest()
                } else {
                    let len = r.len(r.remaining(), "range-coded length")?;
                    r.bytes(len)?
                };
                rc::reference::decode_residuals(data, nres, push)
                    .ok_or_else(|| CodecError::new(len_at, "corrupt range-coded residuals"))?;
            }
            _ if plain => {
                let k_at = r.offset();
                let k = u32::from(r.u8()?);
                let mut res = vec![0u64; nres];
                let used = rice::reference_decode(r.peek_rest(), k, &mut res)
                    .ok_or_else(|| CodecError::new(k_at, "corrupt Rice codes"))?;
                r.bytes(used)?;
                res.into_iter().for_each(&mut push);
            }
            _ => {
                let k_at = r.offset();
                let k = u32::from(r.u8()?);
                if k > 63 {
                    return Err(CodecError::new(k_at, format!("Rice parameter {k} > 63")));
                }
                let low_len = rc::rice_low_len(nres, k)
                    .ok_or_else(|| CodecError::new(k_at, "too many residuals"))?;
                let low = r.bytes(low_len)?;
                let data = if to_end {
                    r.rest()
                } else {
                    let len = r.len(r.remaining(), "range-coded length")?;
                    r.bytes(len)?
                };
                rc::reference::decode_rice(data, low, k, nres, push)
                    .ok_or_else(|| CodecError::new(k_at, "corrupt range-coded residuals"))?;
            }
        }
        Ok(out)
    }

    /// Decodes with both implementations and requires the same outcome: the same values and
    /// position, or an error from both.
    fn same_as_reference(buf: &[u8], n: usize) {
        // Decoders given a recycled vector must not read what its last column left.
        super::super::spare::give_back(vec![0x5A5A_5A5A_5A5A_5A5A; n + 9]);
        let mut a = Reader::new(buf, 0);
        let mut b = Reader::new(buf, 0);
        match (decode(&mut a, n), reference_decode(&mut b, n)) {
            (Ok(x), Ok(y)) => {
                assert_eq!(x, y);
                assert_eq!(a.offset(), b.offset());
            }
            (Err(_), Err(_)) => {}
            (x, y) => panic!("{x:?} vs reference {y:?} for {buf:?}"),
        }
    }

    fn sequence(kind: u8, seed: u64, n: usize) -> Vec<i64> {
        let mut x = seed | 1;
        let mut acc = 0i64;
        (0..n)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let r = (x >> 33) as i64;
                match kind % 7 {
                    0 => 1_451_606_400_000 + i as i64 * 10_000,
                    1 => {
                        acc += r % 5 - 2;
                        acc
                    }
                    2 => {
                        acc += r % 401 - 200;
                        acc
                    }
                    3 => r % 7,
                    4 => x as i64,
                    // Several rows per period: runs of one time, then a step.
                    5 => {
                        if r % 9 == 0 {
                            acc += 60_000;
                        }
                        1_428_777_120_000 + acc
                    }
                    _ => {
                        if r % 50 == 0 {
                            r << 20
                        } else {
                            r % 3
                        }
                    }
                }
            })
            .collect()
    }

    proptest::proptest! {
        #[test]
        fn the_plain_shortcut_picks_what_sizing_every_form_picks(
            kind in 0u8..7,
            seed in proptest::prelude::any::<u64>(),
            n in 1usize..1200,
            last in proptest::prelude::any::<bool>(),
            dates in proptest::prelude::any::<bool>(),
        ) {
            let vals = sequence(kind, seed, n);
            let enc = |full: bool| {
                SURE_PLAIN_OFF.with(|off| off.set(full));
                let mut buf = Vec::new();
                match (dates, last) {
                    (true, _) => encode_dates(&vals, &mut buf, last),
                    (false, true) => encode_last(&vals, &mut buf),
                    (false, false) => encode(&vals, &mut buf),
                }
                SURE_PLAIN_OFF.with(|off| off.set(false));
                buf
            };
            proptest::prop_assert_eq!(enc(false), enc(true));
        }

        #[test]
        fn fast_decoder_matches_the_reference_on_valid_and_damaged_input(
            kind in 0u8..7,
            seed in proptest::prelude::any::<u64>(),
            n in 1usize..700,
            last in proptest::prelude::any::<bool>(),
            cut in proptest::prelude::any::<proptest::sample::Index>(),
            flip in proptest::prelude::any::<proptest::sample::Index>(),
            bit in 0u8..8,
        ) {
            let vals = sequence(kind, seed, n);
            let mut buf = Vec::new();
            if last {
                encode_last(&vals, &mut buf);
            } else {
                encode(&vals, &mut buf);
            }
            let mut r = Reader::new(&buf, 0);
            proptest::prop_assert_eq!(decode(&mut r, n).ok(), Some(vals));
            same_as_reference(&buf, n);
            same_as_reference(&buf[..cut.index(buf.len())], n);
            let mut flipped = buf.clone();
            flipped[flip.index(buf.len())] ^= 1 << bit;
            same_as_reference(&flipped, n);
            same_as_reference(&flipped, n + 5);
        }

        #[test]
        fn fast_decoder_matches_the_reference_on_garbage(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..300),
            n in 1usize..400,
        ) {
            same_as_reference(&data, n);
        }

        /// The bound read from a header holds for every value decoded after it, and is found
        /// for small walks stored as plain Rice codes, like sampled CPU metrics.
        #[test]
        fn magnitude_bounds_hold_for_the_decoded_values(
            kind in 0u8..7,
            seed in proptest::prelude::any::<u64>(),
            n in 1usize..700,
        ) {
            let vals = sequence(kind, seed, n);
            let mut buf = Vec::new();
            encode(&vals, &mut buf);
            let bound = magnitude_bound(&mut Reader::new(&buf, 0), n);
            if let Some(b) = bound {
                let top = vals.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0);
                proptest::prop_assert!(top <= b, "{top} > {b}");
            }
            // Plain Rice codes of a small walk always have one.
            let plain_rice = buf[0] & !3 == PLAIN_MODE | (KIND_RICE << 2);
            if plain_rice && kind == 1 {
                proptest::prop_assert!(bound.is_some());
            }
        }
    }

    #[test]
    fn magnitude_bounds_cover_every_order_to_the_limit() {
        // Residuals at the largest quotient, for each order: the bound is reached or passed.
        for order in 0..=2u8 {
            for k in [0u32, 3, 20] {
                let n = 50usize;
                let mut vals = vec![0u64; n];
                // Heads large enough that a bound leaving one out falls short.
                let heads = [(-(1i64 << 41)) as u64, 1 << 40];
                let nheads = (order as usize).min(n);
                vals[..nheads].copy_from_slice(&heads[..nheads]);
                // The zigzag code of -2^(k+7) is 2^(k+8) - 1: quotient 255, low bits all ones.
                for z in vals.iter_mut().skip(nheads) {
                    *z = (1u64 << (k + 8)) - 1;
                }
                let mut buf = vec![PLAIN_MODE | (KIND_RICE << 2) | order];
                for &h in &heads[..nheads] {
                    put_svarint(&mut buf, h as i64);
                }
                buf.push(k as u8);
                let mut codes = Vec::new();
                rice::encode(&vals[nheads..], k, &mut codes);
                buf.extend_from_slice(&codes);
                let b = magnitude_bound(&mut Reader::new(&buf, 0), n).unwrap();
                let got = decode(&mut Reader::new(&buf, 0), n).unwrap();
                let top = got.iter().map(|v| v.unsigned_abs()).max().unwrap();
                assert!(top <= b, "order {order}, k {k}: {top} > {b}");
                // Order 2 reaches about half its bound (a sum of steps growing by one).
                assert!(top * 3 > b, "order {order}, k {k}: {top} far under {b}");
            }
        }
        // Other modes have no bound; a bound at or past 2^63 is none.
        let mut buf = Vec::new();
        encode(&[i64::MAX, i64::MIN, 0, 5], &mut buf);
        assert_eq!(magnitude_bound(&mut Reader::new(&buf, 0), 4), None);
        assert_eq!(magnitude_bound(&mut Reader::new(&[], 0), 0), Some(0));
    }

    fn rt(vals: &[i64]) -> usize {
        let mut buf = Vec::new();
        encode(vals, &mut buf);
        buf.push(0x5a);
        let mut r = Reader::new(&buf, 0);
        assert_eq!(decode(&mut r, vals.len()).ok().as_deref(), Some(vals));
        assert_eq!(r.u8().ok(), Some(0x5a), "sequence must be self-delimiting");
        let mut last = Vec::new();
        encode_last(vals, &mut last);
        let mut r = Reader::new(&last, 0);
        assert_eq!(decode(&mut r, vals.len()).ok().as_deref(), Some(vals));
        assert!(r.finish().is_ok());
        last.len()
    }

    #[test]
    fn sequences_longer_than_the_stack_buffer_match_the_reference() {
        for kind in 0..7 {
            let vals = sequence(kind, 42, rice::STACK_Q * 2 + 3);
            rt(&vals);
            let mut buf = Vec::new();
            encode(&vals, &mut buf);
            same_as_reference(&buf, vals.len());
            same_as_reference(&buf[..buf.len() / 2], vals.len());
        }
    }

    proptest::proptest! {
        /// The chunked first-order loop of [`undo_differencing_bytes`] gives what the plain
        /// one does: any bytes, lengths around its chunks of 8, a quotient buffer longer or
        /// shorter than the residual slots, and heads near the ends of i64 (the sums wrap).
        #[test]
        fn chunked_byte_differencing_matches_the_plain_loop(
            q in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..60),
            slots in 0usize..60,
            head in proptest::sample::select(vec![0i64, -7, 1 << 40, i64::MAX, i64::MIN]),
        ) {
            let mut got = vec![0u64; slots + 1];
            got[0] = head as u64;
            let mut want = got.clone();
            undo_differencing_bytes(1, &mut got, &q);
            undo_differencing_by(1, &mut want, q.iter(), |_, x| {
                UNZIGZAG_BYTE[usize::from(*x)]
            });
            proptest::prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn byte_residuals_of_every_order_decode_as_the_reference_does() {
        // Residuals of a unit or two under each order, so that plain Rice codes without low
        // bits are chosen (the decoder's byte path): order 0 (small values), 1 (a walk), 2 (a walk of the steps).
        let mut x = 7u64;
        let mut small = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Zigzag codes z with odds 2^-(z+1), for which unary codes are the best there
            // are: no other form is smaller.
            match (x >> 33) % 16 {
                0..=7 => 0,
                8..=11 => -1,
                12..=13 => 1,
                14 => -2,
                _ => 2,
            }
        };
        let (mut v, mut w, mut step) = (1_000_000i64, 1_000_000_000i64, 5_000i64);
        let mut orders = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..400 {
            orders[0].push(small());
            v += small();
            orders[1].push(v);
            step += small();
            w += step;
            orders[2].push(w);
        }
        for (order, vals) in orders.iter().enumerate() {
            for n in [1, 2, 3, 40, vals.len()] {
                let vals = &vals[..n];
                let mut buf = Vec::new();
                encode(vals, &mut buf);
                if n >= 40 {
                    let mode = buf[0];
                    assert_eq!((mode & 3) as usize, order, "order of {n} values");
                    let plain = PLAIN_MODE | (KIND_RICE << 2);
                    assert_eq!(mode & (PLAIN_MODE | 0x3C), plain, "mode of order {order}");
                    let mut r = Reader::new(&buf[1..], 0);
                    for _ in 0..order {
                        r.svarint().unwrap();
                    }
                    assert_eq!(r.u8().unwrap(), 0, "Rice parameter of order {order}");
                }
                same_as_reference(&buf, n);
                rt(vals);
            }
        }
    }

    #[test]
    fn regular_series_costs_only_the_heads() {
        let vals: Vec<i64> = (0..360).map(|i| 1_451_606_400_000 + i * 10_000).collect();
        assert!(rt(&vals) <= 10);
    }

    #[test]
    fn extremes_round_trip_with_wrapping() {
        rt(&[i64::MIN, i64::MAX, 0, -1, i64::MIN, 5]);
        rt(&[i64::MAX]);
        rt(&[i64::MIN, i64::MAX]);
        rt(&[]);
    }

    #[test]
    fn noisy_values_round_trip_through_both_back_ends() {
        let mut x = 7u64;
        let vals: Vec<i64> = (0..1000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 50) as i64 - 8000
            })
            .collect();
        rt(&vals);
        let mut res = Vec::new();
        write_pack(
            &mut res,
            &vals.iter().map(|&v| zigzag(v)).collect::<Vec<_>>(),
        );
        let mut buf = vec![(KIND_PACK << 2)];
        buf.extend_from_slice(&res);
        let mut r = Reader::new(&buf, 0);
        assert_eq!(decode(&mut r, vals.len()).ok(), Some(vals));
    }

    #[test]
    fn runs_of_equal_times_are_stored_sparse_and_small() {
        // 1000 rows over 6 periods of a minute, a few hundred rows each.
        let vals: Vec<i64> = (0..1000)
            .map(|i| 1_428_777_120_000 + (i / 170) * 60_000)
            .collect();
        let mut buf = Vec::new();
        encode(&vals, &mut buf);
        assert_eq!(buf[0], SPARSE_MODE | 1);
        assert!(buf.len() <= 16, "{} bytes", buf.len());
        assert!(rt(&vals) <= 16);
        same_as_reference(&buf, vals.len());
    }

    #[test]
    fn a_sparse_body_inside_a_sparse_body_is_refused() {
        let vals: Vec<i64> = (0..1000).map(|i| i64::from(i % 100 == 5)).collect();
        let mut buf = Vec::new();
        encode(&vals, &mut buf);
        assert_eq!(buf[0], SPARSE_MODE);
        // Mark the nested gaps sequence sparse as well.
        let mut bad = buf.clone();
        bad[2] |= SPARSE_MODE;
        assert!(decode(&mut Reader::new(&bad, 0), vals.len()).is_err());
        same_as_reference(&bad, vals.len());
        // A position past the end is refused too.
        assert!(decode(&mut Reader::new(&buf, 0), 8).is_err());
        same_as_reference(&buf, 8);
    }

    #[test]
    fn residuals_with_a_common_factor_are_stored_divided_by_it() {
        // Irregular times on whole seconds, in milliseconds.
        let mut t = 1_700_000_000_000i64;
        let mut x = 5u64;
        let vals: Vec<i64> = (0..500)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                t += 1000 * (1 + (x >> 60) as i64);
                t
            })
            .collect();
        let mut buf = Vec::new();
        encode(&vals, &mut buf);
        assert_ne!(buf[0] & SCALED_MODE, 0, "mode {:#04x}", buf[0]);
        // About 5 bits a value (zigzagged steps of 1 to 16) instead of 15.
        assert!(buf.len() < 500 * 6 / 8, "{} bytes", buf.len());
        rt(&vals);
        same_as_reference(&buf, vals.len());
        // A scale below 2 is refused.
        let mut bad = buf.clone();
        let at = 1 + bits::varint_len(zigzag(vals[0]));
        bad[at] = 1;
        assert!(decode(&mut Reader::new(&bad, 0), vals.len()).is_err());
        same_as_reference(&bad, vals.len());
        // Extremes keep their wrapping arithmetic.
        rt(&[i64::MIN, 0, i64::MIN, 0]);
        rt(&[0, i64::MIN, i64::MAX - 1, 2]);
    }
}
