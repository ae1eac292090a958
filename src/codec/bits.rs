//! Byte and bit level I/O shared by all codecs: varints, zigzag, a bounds-checked reader that
//! reports offsets, and an LSB-first bit writer/reader.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use super::CodecError;

/// Maps signed to unsigned so that small magnitudes get small codes.
#[inline]
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends `v` as an unsigned LEB128 varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Size in bytes of `v` as a varint, for size estimates without writing.
pub(crate) fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Appends `v` zigzag-encoded as a varint.
pub(crate) fn put_svarint(out: &mut Vec<u8>, v: i64) {
    put_varint(out, zigzag(v));
}

/// Bounds-checked cursor over an encoded column. `base` is the offset of `data` inside the
/// whole column so that errors point at the right byte.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `data`, which starts at byte `base` of the column.
    pub(crate) fn new(data: &'a [u8], base: usize) -> Reader<'a> {
        Reader { data, pos: 0, base }
    }

    /// Absolute offset of the next byte.
    pub(crate) fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Bytes not yet consumed.
    pub(crate) fn remaining(&self) -> usize {
        self.data.len().saturating_sub(self.pos)
    }

    /// An error located at the next unread byte.
    pub(crate) fn err(&self, detail: impl Into<String>) -> CodecError {
        CodecError::new(self.offset(), detail)
    }

    /// Reads one byte.
    pub(crate) fn u8(&mut self) -> Result<u8, CodecError> {
        let b = *self
            .data
            .get(self.pos)
            .ok_or_else(|| self.err("unexpected end of column"))?;
        self.pos += 1;
        Ok(b)
    }

    /// Reads `n` bytes.
    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| self.err(format!("need {n} bytes, {} left", self.remaining())))?;
        let s = self
            .data
            .get(self.pos..end)
            .ok_or_else(|| self.err("unexpected end of column"))?;
        self.pos = end;
        Ok(s)
    }

    /// Reads a fixed-size array.
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let s = self.bytes(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// Reads an unsigned LEB128 varint of at most 10 bytes.
    pub(crate) fn varint(&mut self) -> Result<u64, CodecError> {
        let start = self.offset();
        let mut v: u64 = 0;
        for i in 0..10u32 {
            let b = self.u8()?;
            let part = u64::from(b & 0x7f);
            if i == 9 && part > 1 {
                return Err(CodecError::new(start, "varint overflows 64 bits"));
            }
            v |= part << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(CodecError::new(start, "varint longer than 10 bytes"))
    }

    /// Reads a varint that must not exceed `max` (a count or length).
    pub(crate) fn len(&mut self, max: usize, what: &str) -> Result<usize, CodecError> {
        let start = self.offset();
        let v = self.varint()?;
        if v > max as u64 {
            return Err(CodecError::new(
                start,
                format!("{what} {v} exceeds limit {max}"),
            ));
        }
        Ok(v as usize)
    }

    /// Reads a zigzag varint.
    pub(crate) fn svarint(&mut self) -> Result<i64, CodecError> {
        Ok(unzigzag(self.varint()?))
    }

    /// Everything left, without consuming it.
    pub(crate) fn peek_rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or(&[])
    }

    /// Consumes and returns everything left.
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let s = self.data.get(self.pos..).unwrap_or(&[]);
        self.pos = self.data.len();
        s
    }

    /// Fails unless every byte was consumed; trailing bytes mean corruption or a format mismatch.
    pub(crate) fn finish(&self) -> Result<(), CodecError> {
        if self.remaining() != 0 {
            return Err(self.err(format!("{} trailing bytes", self.remaining())));
        }
        Ok(())
    }
}

/// LSB-first bit writer.
#[derive(Default)]
pub(crate) struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    nbits: u32,
}

impl BitWriter {
    /// Appends the low `n` bits of `v` (`n <= 64`).
    #[inline]
    pub(crate) fn write(&mut self, v: u64, n: u32) {
        if n == 0 {
            return;
        }
        let v = if n == 64 { v } else { v & ((1u64 << n) - 1) };
        // Invariant: nbits < 64, so the shift is in range.
        self.acc |= v << self.nbits;
        let total = self.nbits + n;
        if total >= 64 {
            self.out.extend_from_slice(&self.acc.to_le_bytes());
            let consumed = 64 - self.nbits;
            self.acc = if consumed == 64 { 0 } else { v >> consumed };
            self.nbits = total - 64;
        } else {
            self.nbits = total;
        }
    }

    /// Flushes partial bytes and returns the buffer.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        let nbytes = self.nbits.div_ceil(8) as usize;
        self.out
            .extend(self.acc.to_le_bytes().iter().take(nbytes).copied());
        self.out
    }
}

/// LSB-first bit reader over a slice; reading past the end is an error.
pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    bitpos: usize,
}

impl<'a> BitReader<'a> {
    /// A reader at bit 0 of `data`.
    pub(crate) fn new(data: &'a [u8]) -> BitReader<'a> {
        BitReader { data, bitpos: 0 }
    }

    /// Reads `n <= 64` bits, or `None` past the end.
    #[inline]
    pub(crate) fn read(&mut self, n: u32) -> Option<u64> {
        if n == 0 {
            return Some(0);
        }
        let end = self.bitpos.checked_add(n as usize)?;
        if end > self.data.len() * 8 {
            return None;
        }
        let byte = self.bitpos / 8;
        let shift = (self.bitpos % 8) as u32;
        let mut buf = [0u8; 16];
        let src = self.data.get(byte..)?;
        let take = src.len().min(16);
        buf.get_mut(..take)?.copy_from_slice(src.get(..take)?);
        let w = u128::from_le_bytes(buf) >> shift;
        self.bitpos = end;
        let mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        Some((w as u64) & mask)
    }

    /// Bytes touched so far (partial last byte included).
    pub(crate) fn bytes_used(&self) -> usize {
        self.bitpos.div_ceil(8)
    }
}

/// Reads `out.len()` consecutive `w`-bit fields (LSB first, as [`BitWriter`] wrote them) from
/// the start of `data`; `None` if `data` is too short or `w > 64`. Same result as
/// [`BitReader::read`] in a loop, with one unaligned 8-byte load per field where possible.
pub(crate) fn unpack(data: &[u8], w: u32, out: &mut [u64]) -> Option<()> {
    if w > 64 || data.len().checked_mul(8)? < out.len().checked_mul(w as usize)? {
        return None;
    }
    if w == 0 {
        out.fill(0);
        return Some(());
    }
    let mask = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
    if w > 56 {
        // shift + w may pass 64: two words per field.
        let mut bitpos = 0usize;
        for slot in out.iter_mut() {
            *slot = (load_u128(data, bitpos >> 3) >> (bitpos & 7)) as u64 & mask;
            bitpos += w as usize;
        }
        return Some(());
    }
    // Fields whose 8-byte load would run past the end read from a zero-padded copy of the
    // last bytes, made once: a short sequence (a bucket of a few rows) has most of its fields
    // there, and copying each one's bytes separately called `memcpy` per field.
    let tail_start = data.len().saturating_sub(8);
    let mut tail = [0u8; 16];
    if let (Some(dst), Some(src)) = (
        tail.get_mut(..data.len() - tail_start),
        data.get(tail_start..),
    ) {
        dst.copy_from_slice(src);
    }
    let mut bitpos = 0usize;
    for slot in out.iter_mut() {
        let byte = bitpos >> 3;
        let word = match data.get(byte..byte + 8) {
            Some(b) => b.try_into().ok(),
            None => byte
                .checked_sub(tail_start)
                .and_then(|o| tail.get(o..o + 8))
                .and_then(|b| b.try_into().ok()),
        };
        *slot = (u64::from_le_bytes(word.unwrap_or([0; 8])) >> (bitpos & 7)) & mask;
        bitpos += w as usize;
    }
    Some(())
}

/// The 16 bytes from `at` as a little-endian number, zeros past the end of `data`.
fn load_u128(data: &[u8], at: usize) -> u128 {
    let mut a = [0u8; 16];
    let tail = data.get(at..).unwrap_or(&[]);
    let take = tail.len().min(16);
    if let (Some(dst), Some(src)) = (a.get_mut(..take), tail.get(..take)) {
        dst.copy_from_slice(src);
    }
    u128::from_le_bytes(a)
}

#[cfg(test)]
// Tests may panic: a panic is how a test fails.
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn zigzag_round_trips_extremes() {
        for v in [0, 1, -1, i64::MAX, i64::MIN, 12345, -98765] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn varint_round_trips_and_rejects_overflow() {
        let mut out = Vec::new();
        for v in [0u64, 127, 128, u64::MAX, 1 << 63] {
            out.clear();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            let mut r = Reader::new(&out, 0);
            assert_eq!(r.varint().ok(), Some(v));
        }
        let bad = [0xffu8; 11];
        assert!(Reader::new(&bad, 0).varint().is_err());
        let bad = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(Reader::new(&bad, 0).varint().is_err());
    }

    #[test]
    fn bits_round_trip_all_widths() {
        let mut w = BitWriter::default();
        let mut expect = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..500u32 {
            let n = i % 65;
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = if n == 64 { x } else { x & ((1u64 << n) - 1) };
            w.write(v, n);
            expect.push((v, n));
        }
        let buf = w.finish();
        let mut r = BitReader::new(&buf);
        for (v, n) in expect {
            assert_eq!(r.read(n), Some(v));
        }
        assert_eq!(r.read(9), None);
    }

    #[test]
    fn unpack_matches_the_bit_reader_for_every_width() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for w in 0..=64u32 {
            // Short counts put every field in the last eight bytes.
            for count in [0usize, 1, 2, 3, 5, 7, 8, 9, 128, 129] {
                let mut bw = BitWriter::default();
                let mut want = Vec::new();
                for _ in 0..count {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let v = if w == 64 { x } else { x & ((1u64 << w) - 1) };
                    bw.write(v, w);
                    want.push(v);
                }
                let buf = bw.finish();
                let mut got = vec![0; count];
                assert_eq!(unpack(&buf, w, &mut got), Some(()), "w={w} n={count}");
                assert_eq!(got, want, "w={w} n={count}");
                // Bytes after the fields (the next part of a column) are not read into them.
                let mut longer = buf.clone();
                longer.extend_from_slice(&[0xff; 3]);
                got.fill(0);
                assert_eq!(unpack(&longer, w, &mut got), Some(()));
                assert_eq!(got, want, "w={w} n={count}, more bytes after");
                if count > 0 && w > 0 {
                    let short = &buf[..(count * w as usize).div_ceil(8) - 1];
                    assert_eq!(unpack(short, w, &mut got), None);
                }
            }
        }
        assert_eq!(unpack(&[0; 16], 65, &mut [0]), None);
    }
}
