//! Byte layout of segment files: constants, fixed-structure offsets, and the small primitive
//! encoders/decoders (varints, directory values) shared by the writer and the reader.
//!
//! `format-spec/segment.md` is the prose description of everything here. Offsets of the
//! fixed structures are derived from each other (each field starts where the previous one
//! ends), and the unit test `layout_matches_spec_tables` checks them against the spec's
//! tables, so the two cannot drift apart silently.
//!
//! Decoders in this file never panic: indexing, `unwrap` and `expect` are denied, and every
//! length read from a file is checked against the bytes that remain before it is used.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use bson::oid::ObjectId;
use bson::{Bson, DateTime, Decimal128, Document, Timestamp};

// ---------------------------------------------------------------------------------------------
// Whole-file constants
// ---------------------------------------------------------------------------------------------

pub use crate::bucket::BOOKKEEPING_PREFIX;

/// First 8 bytes of every segment file.
pub const HEADER_MAGIC: [u8; 8] = *b"TSBSEGH\x01";
/// Last 8 bytes of every segment file.
pub const FOOTER_MAGIC: [u8; 8] = *b"TSBSEGF\x01";
/// Format version written in the header, the footer and the directory. Readers refuse others.
pub const FORMAT_VERSION: u16 = 1;
/// Version byte at the start of the (decompressed) directory that this build writes.
/// Version 2 added the sums entry of `control.max` (value tag 0x21); version 3 each bucket's
/// BSON size as inserted (a varint ending its entry); version 4 changes no directory byte but
/// marks files whose columns may hold sparse or scaled intseqs (`format-spec/codecs.md`,
/// "intseq: integer sequences"), which older readers would refuse as corrupt rather than as too
/// new; version 5 likewise marks plain Rice codes.
/// Readers accept 1 to 5.
pub const DIRECTORY_VERSION: u8 = 5;
/// Oldest directory version readers accept.
pub const MIN_DIRECTORY_VERSION: u8 = 1;

/// Smallest BSON document (an empty one): a known BSON size of a bucket is at least this
/// many bytes per measurement, so the directory can use 0 for "unknown".
pub const MIN_BSON_BYTES: u64 = 5;

/// Page compression: the stored bytes are the page bytes.
pub const PAGE_RAW: u8 = 0;
/// Page compression: the stored bytes are one zstd frame of the page bytes.
pub const PAGE_ZSTD: u8 = 1;

/// Target size of a page of small buckets before compression.
pub const PAGE_TARGET: usize = 64 * 1024;
/// A bucket whose column data is at least this long gets a page of its own.
pub const LARGE_BUCKET: usize = 32 * 1024;
/// A page is stored compressed only if that saves at least 1/8 of its bytes (else decoding
/// costs time for little gain).
pub const ZSTD_MIN_SAVING_DIVISOR: usize = 8;
/// zstd level for pages and the directory: fast, and most of the gain of higher levels.
pub const ZSTD_LEVEL: i32 = 3;

/// Largest decompressed page a reader accepts (refused before allocating).
pub const MAX_PAGE_RAW_LEN: u32 = 256 << 20;
/// Largest decompressed directory a reader accepts (refused before allocating).
pub const MAX_DIRECTORY_RAW_LEN: u32 = 1 << 30;
/// Largest row count of one bucket (MongoDB's default cap is 1000; this only bounds
/// allocations on damaged or hostile files).
pub const MAX_BUCKET_ROWS: u32 = 100_000;

// ---------------------------------------------------------------------------------------------
// Header: fixed part, then `time_field_len` bytes of UTF-8, then a crc32 of everything before it.
// ---------------------------------------------------------------------------------------------

/// Offset of the header magic.
pub const HDR_MAGIC: usize = 0;
/// Offset of the header's u16 format version.
pub const HDR_VERSION: usize = HDR_MAGIC + HEADER_MAGIC.len();
/// Offset of the u16 flags (must be zero in version 1).
pub const HDR_FLAGS: usize = HDR_VERSION + 2;
/// Offset of the u32 collection id.
pub const HDR_COLLECTION_ID: usize = HDR_FLAGS + 2;
/// Offset of the u16 length of the time field name.
pub const HDR_TIME_FIELD_LEN: usize = HDR_COLLECTION_ID + 4;
/// Offset of two reserved bytes (zero).
pub const HDR_RESERVED: usize = HDR_TIME_FIELD_LEN + 2;
/// Offset of the time field name; also the length of the fixed part of the header.
pub const HDR_TIME_FIELD: usize = HDR_RESERVED + 2;
/// Size of the header crc that follows the time field name.
pub const HDR_CRC_LEN: usize = 4;

/// Total header length for a time field name of `name_len` bytes.
pub const fn header_len(name_len: usize) -> usize {
    HDR_TIME_FIELD + name_len + HDR_CRC_LEN
}

// ---------------------------------------------------------------------------------------------
// Footer: fixed size, at the very end of the file.
// ---------------------------------------------------------------------------------------------

/// Offset (in the footer) of the u64 absolute file offset of the directory.
pub const FTR_DIR_OFFSET: usize = 0;
/// Offset of the u32 stored (compressed) directory length.
pub const FTR_DIR_STORED_LEN: usize = FTR_DIR_OFFSET + 8;
/// Offset of the u32 decompressed directory length.
pub const FTR_DIR_RAW_LEN: usize = FTR_DIR_STORED_LEN + 4;
/// Offset of the u32 crc32 of the stored directory bytes.
pub const FTR_DIR_CRC: usize = FTR_DIR_RAW_LEN + 4;
/// Offset of the u32 bucket count.
pub const FTR_BUCKET_COUNT: usize = FTR_DIR_CRC + 4;
/// Offset of the u32 page count.
pub const FTR_PAGE_COUNT: usize = FTR_BUCKET_COUNT + 4;
/// Offset of the u32 header length (so the header can be cross-checked).
pub const FTR_HEADER_LEN: usize = FTR_PAGE_COUNT + 4;
/// Offset of the u16 format version.
pub const FTR_VERSION: usize = FTR_HEADER_LEN + 4;
/// Offset of two reserved bytes (zero).
pub const FTR_RESERVED: usize = FTR_VERSION + 2;
/// Offset of the u32 crc32 of footer bytes `0..FTR_CRC`.
pub const FTR_CRC: usize = FTR_RESERVED + 2;
/// Offset of the footer magic.
pub const FTR_MAGIC: usize = FTR_CRC + 4;
/// Size of the footer.
pub const FOOTER_LEN: usize = FTR_MAGIC + FOOTER_MAGIC.len();

/// Smallest possible segment file: header with an empty time field name plus the footer.
pub const MIN_FILE_LEN: usize = header_len(0) + FOOTER_LEN;

/// The decoded footer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    /// Absolute offset of the stored directory.
    pub dir_offset: u64,
    /// Length of the stored (zstd) directory.
    pub dir_stored_len: u32,
    /// Length of the decompressed directory.
    pub dir_raw_len: u32,
    /// crc32 of the stored directory bytes.
    pub dir_crc: u32,
    /// Number of buckets.
    pub bucket_count: u32,
    /// Number of pages.
    pub page_count: u32,
    /// Length of the header.
    pub header_len: u32,
}

impl Footer {
    /// Serialises the footer (crc and magic included).
    pub fn encode(&self) -> [u8; FOOTER_LEN] {
        let mut b = Vec::with_capacity(FOOTER_LEN);
        b.extend_from_slice(&self.dir_offset.to_le_bytes());
        b.extend_from_slice(&self.dir_stored_len.to_le_bytes());
        b.extend_from_slice(&self.dir_raw_len.to_le_bytes());
        b.extend_from_slice(&self.dir_crc.to_le_bytes());
        b.extend_from_slice(&self.bucket_count.to_le_bytes());
        b.extend_from_slice(&self.page_count.to_le_bytes());
        b.extend_from_slice(&self.header_len.to_le_bytes());
        b.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        b.extend_from_slice(&FOOTER_MAGIC);
        let mut out = [0u8; FOOTER_LEN];
        // Lengths agree by construction (checked by the layout test); copy what fits.
        for (o, i) in out.iter_mut().zip(b) {
            *o = i;
        }
        out
    }

    /// Parses and checks a footer: magic, crc, version, reserved bytes. Errors are plain
    /// text; the caller attaches path and offset.
    pub fn decode(b: &[u8]) -> Result<Footer, String> {
        if b.len() != FOOTER_LEN {
            return Err(format!(
                "footer is {} bytes, expected {FOOTER_LEN}",
                b.len()
            ));
        }
        if b.get(FTR_MAGIC..) != Some(&FOOTER_MAGIC[..]) {
            return Err("bad footer magic (file truncated or not a segment)".into());
        }
        // Version before checksum: a file from a newer release gets a message that says so
        // (magic and version keep their offsets in every version).
        let version = le_u16(b, FTR_VERSION)?;
        if version != FORMAT_VERSION {
            return Err(format!(
                "unsupported segment format version {version} in footer (this build reads \
                 {FORMAT_VERSION}); the file is newer than this build or damaged"
            ));
        }
        let crc = le_u32(b, FTR_CRC)?;
        let body = b.get(..FTR_CRC).ok_or("footer too short")?;
        if crc32fast::hash(body) != crc {
            return Err("footer checksum mismatch".into());
        }
        if le_u16(b, FTR_RESERVED)? != 0 {
            return Err("reserved footer bytes are not zero".into());
        }
        Ok(Footer {
            dir_offset: le_u64(b, FTR_DIR_OFFSET)?,
            dir_stored_len: le_u32(b, FTR_DIR_STORED_LEN)?,
            dir_raw_len: le_u32(b, FTR_DIR_RAW_LEN)?,
            dir_crc: le_u32(b, FTR_DIR_CRC)?,
            bucket_count: le_u32(b, FTR_BUCKET_COUNT)?,
            page_count: le_u32(b, FTR_PAGE_COUNT)?,
            header_len: le_u32(b, FTR_HEADER_LEN)?,
        })
    }
}

/// Little-endian u16 at `off`.
pub fn le_u16(b: &[u8], off: usize) -> Result<u16, String> {
    let s = b.get(off..off + 2).ok_or("read past end")?;
    let mut a = [0u8; 2];
    a.copy_from_slice(s);
    Ok(u16::from_le_bytes(a))
}

/// Little-endian u32 at `off`.
pub fn le_u32(b: &[u8], off: usize) -> Result<u32, String> {
    let s = b.get(off..off + 4).ok_or("read past end")?;
    let mut a = [0u8; 4];
    a.copy_from_slice(s);
    Ok(u32::from_le_bytes(a))
}

/// Little-endian u64 at `off`.
pub fn le_u64(b: &[u8], off: usize) -> Result<u64, String> {
    let s = b.get(off..off + 8).ok_or("read past end")?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Ok(u64::from_le_bytes(a))
}

// ---------------------------------------------------------------------------------------------
// Varints and the directory cursor
// ---------------------------------------------------------------------------------------------

/// Appends `v` as an unsigned LEB128 varint (1-10 bytes).
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Zigzag-maps a signed value so that small magnitudes give short varints.
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends a signed varint (zigzag LEB128).
pub fn put_svarint(out: &mut Vec<u8>, v: i64) {
    put_varint(out, zigzag(v));
}

/// A bounds-checked reader over a byte slice. Errors carry the position where they occurred.
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// Starts reading at the beginning of `buf`.
    pub fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0 }
    }

    /// Starts reading at byte `pos` of `buf`.
    pub fn at(buf: &'a [u8], pos: usize) -> Cursor<'a> {
        Cursor { buf, pos }
    }

    /// Current position.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// An error message prefixed with the current position.
    pub fn err(&self, detail: impl std::fmt::Display) -> String {
        format!("at directory byte {}: {detail}", self.pos)
    }

    /// Next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.err(format!("{n} bytes needed, {} left", self.remaining())))?;
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| self.err("slice out of range"))?;
        self.pos = end;
        Ok(s)
    }

    /// Next byte.
    pub fn u8(&mut self) -> Result<u8, String> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or_else(|| self.err("unexpected end"))?;
        self.pos += 1;
        Ok(b)
    }

    /// Next fixed-size array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let s = self.bytes(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    /// Next little-endian u32.
    pub fn u32_le(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.array::<4>()?))
    }

    /// Next unsigned varint; rejects overlong (more than 10 bytes) and overflowing encodings.
    pub fn varint(&mut self) -> Result<u64, String> {
        let start = self.pos;
        let mut v: u64 = 0;
        for i in 0..10u32 {
            let b = self.u8()?;
            let bits = u64::from(b & 0x7f);
            if i == 9 && b > 1 {
                self.pos = start;
                return Err(self.err("varint overflows 64 bits"));
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        self.pos = start;
        Err(self.err("varint longer than 10 bytes"))
    }

    /// Next signed (zigzag) varint.
    pub fn svarint(&mut self) -> Result<i64, String> {
        Ok(unzigzag(self.varint()?))
    }

    /// Next varint that must fit in a u32.
    pub fn varint_u32(&mut self) -> Result<u32, String> {
        let v = self.varint()?;
        u32::try_from(v).map_err(|_| self.err(format!("value {v} does not fit in 32 bits")))
    }

    /// Next varint used as a count of items that each take at least one byte: it cannot
    /// exceed the bytes left, which bounds any allocation made from it.
    pub fn count(&mut self) -> Result<usize, String> {
        let v = self.varint()?;
        if v > self.remaining() as u64 {
            return Err(self.err(format!(
                "count {v} exceeds the {} bytes left",
                self.remaining()
            )));
        }
        Ok(v as usize)
    }

    /// Next varint-length-prefixed UTF-8 string.
    pub fn string(&mut self) -> Result<String, String> {
        self.str().map(str::to_owned)
    }

    /// Next length-prefixed UTF-8 string, borrowed from the buffer.
    pub fn str(&mut self) -> Result<&'a str, String> {
        let n = self.count()?;
        let s = self.bytes(n)?;
        std::str::from_utf8(s).map_err(|_| self.err("string is not valid UTF-8"))
    }

    /// Next BSON document (its own little-endian i32 length prefix says how long it is).
    pub fn document(&mut self) -> Result<Document, String> {
        let len_bytes = self
            .buf
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.err("document length past end"))?;
        let mut a = [0u8; 4];
        a.copy_from_slice(len_bytes);
        let len = i32::from_le_bytes(a);
        if len < 5 || len as usize > self.remaining() {
            return Err(self.err(format!("bad document length {len}")));
        }
        let start = self.pos;
        let s = self.bytes(len as usize)?;
        Document::from_reader(s).map_err(|e| format!("at directory byte {start}: bad BSON: {e}"))
    }

    /// True when every byte has been read.
    pub fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }
}

// ---------------------------------------------------------------------------------------------
// Directory values
// ---------------------------------------------------------------------------------------------
//
// A value is a tag byte (the BSON element type) then a payload. Common types get compact
// payloads; ObjectId and DateTime are written as deltas against a reference value that both
// the writer and the reader know from context (see `ValueRefs`). Rare types are wrapped in a
// one-element BSON document `{"": v}`.

/// Tag (in a `control.max` entry) meaning "the same value as `control.min` of this field".
pub const TAG_SAME_AS_MIN: u8 = 0x20;

/// Reference values for delta-encoded types.
#[derive(Debug, Clone, Copy, Default)]
pub struct ValueRefs {
    /// ObjectIds are written as (4-byte time delta, 8-byte tail delta) against this.
    pub oid: [u8; 12],
    /// DateTimes are written as a millisecond delta against this.
    pub millis: i64,
}

/// Splits an ObjectId into its big-endian time and tail parts.
fn oid_parts(b: &[u8; 12]) -> (u32, u64) {
    let mut t = [0u8; 4];
    let mut r = [0u8; 8];
    for (i, x) in b.iter().enumerate() {
        if let Some(slot) = t.get_mut(i) {
            *slot = *x;
        } else if let Some(slot) = r.get_mut(i - 4) {
            *slot = *x;
        }
    }
    (u32::from_be_bytes(t), u64::from_be_bytes(r))
}

/// Joins the parts split by [`oid_parts`].
fn oid_join(t: u32, r: u64) -> [u8; 12] {
    let mut out = [0u8; 12];
    for (o, x) in out
        .iter_mut()
        .zip(t.to_be_bytes().into_iter().chain(r.to_be_bytes()))
    {
        *o = x;
    }
    out
}

/// Appends an ObjectId as deltas against `base`: zigzag(time delta), zigzag(wrapping tail delta).
pub fn put_oid_delta(out: &mut Vec<u8>, base: &[u8; 12], v: &[u8; 12]) {
    let (bt, br) = oid_parts(base);
    let (vt, vr) = oid_parts(v);
    put_svarint(out, i64::from(vt) - i64::from(bt));
    put_svarint(out, vr.wrapping_sub(br) as i64);
}

/// Reads an ObjectId written by [`put_oid_delta`].
pub fn get_oid_delta(c: &mut Cursor<'_>, base: &[u8; 12]) -> Result<[u8; 12], String> {
    let (bt, br) = oid_parts(base);
    let dt = c.svarint()?;
    let t = i64::from(bt)
        .checked_add(dt)
        .and_then(|t| u32::try_from(t).ok())
        .ok_or_else(|| c.err("ObjectId time delta out of range"))?;
    let dr = c.svarint()?;
    Ok(oid_join(t, br.wrapping_add(dr as u64)))
}

/// Errors the writer can hit while encoding a value (a key with a NUL byte, for instance).
pub type EncodeResult = Result<(), String>;

/// Appends one value (tag + payload).
pub fn put_value(out: &mut Vec<u8>, v: &Bson, refs: &ValueRefs) -> EncodeResult {
    out.push(v.element_type() as u8);
    match v {
        Bson::Double(d) => out.extend_from_slice(&d.to_le_bytes()),
        Bson::String(s) => {
            put_varint(out, s.len() as u64);
            out.extend_from_slice(s.as_bytes());
        }
        Bson::Document(d) => d.to_writer(&mut *out).map_err(|e| e.to_string())?,
        Bson::ObjectId(o) => put_oid_delta(out, &refs.oid, &o.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::DateTime(d) => put_svarint(out, d.timestamp_millis().wrapping_sub(refs.millis)),
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => {}
        Bson::Int32(i) => put_svarint(out, i64::from(*i)),
        Bson::Int64(i) => put_svarint(out, *i),
        Bson::Timestamp(t) => {
            put_varint(out, u64::from(t.time));
            put_varint(out, u64::from(t.increment));
        }
        Bson::Decimal128(d) => out.extend_from_slice(&d.bytes()),
        // Arrays and the rare types: a one-element document {"": v}.
        _ => {
            let mut d = Document::new();
            d.insert("", v.clone());
            d.to_writer(&mut *out).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Reads one value whose tag has already been read.
pub fn get_value_with_tag(c: &mut Cursor<'_>, tag: u8, refs: &ValueRefs) -> Result<Bson, String> {
    use bson::spec::ElementType as T;
    let t = T::from(tag).ok_or_else(|| c.err(format!("unknown value tag {tag:#04x}")))?;
    Ok(match t {
        T::Double => Bson::Double(f64::from_le_bytes(c.array::<8>()?)),
        T::String => Bson::String(c.string()?),
        T::EmbeddedDocument => Bson::Document(c.document()?),
        T::ObjectId => Bson::ObjectId(ObjectId::from_bytes(get_oid_delta(c, &refs.oid)?)),
        T::Boolean => match c.u8()? {
            0 => Bson::Boolean(false),
            1 => Bson::Boolean(true),
            b => return Err(c.err(format!("bad boolean byte {b}"))),
        },
        T::DateTime => Bson::DateTime(DateTime::from_millis(
            refs.millis.wrapping_add(c.svarint()?),
        )),
        T::Null => Bson::Null,
        T::Undefined => Bson::Undefined,
        T::MinKey => Bson::MinKey,
        T::MaxKey => Bson::MaxKey,
        T::Int32 => {
            let v = c.svarint()?;
            Bson::Int32(i32::try_from(v).map_err(|_| c.err("Int32 out of range"))?)
        }
        T::Int64 => Bson::Int64(c.svarint()?),
        T::Timestamp => Bson::Timestamp(Timestamp {
            time: c.varint_u32()?,
            increment: c.varint_u32()?,
        }),
        T::Decimal128 => Bson::Decimal128(Decimal128::from_bytes(c.array::<16>()?)),
        _ => {
            let pos = c.pos();
            let d = c.document()?;
            let mut it = d.into_iter();
            match (it.next(), it.next()) {
                (Some((k, v)), None) if k.is_empty() && v.element_type() == t => v,
                _ => {
                    return Err(format!(
                        "at directory byte {pos}: wrapped value of type {tag:#04x} is malformed"
                    ))
                }
            }
        }
    })
}

/// Passes over a value whose tag has been read, with the same checks as
/// [`get_value_with_tag`] but without building it: strings, the values a control decode most
/// often does not need, are checked for UTF-8 in place instead of copied.
pub fn skip_value_with_tag(c: &mut Cursor<'_>, tag: u8, refs: &ValueRefs) -> Result<(), String> {
    if tag == bson::spec::ElementType::String as u8 {
        return c.str().map(drop);
    }
    get_value_with_tag(c, tag, refs).map(drop)
}

/// Reads one value (tag + payload).
pub fn get_value(c: &mut Cursor<'_>, refs: &ValueRefs) -> Result<Bson, String> {
    let tag = c.u8()?;
    get_value_with_tag(c, tag, refs)
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        clippy::indexing_slicing,
        clippy::panic,
        reason = "test code: a panic is a test failure"
    )]
    use super::*;

    /// The `Offset | Size` tables of `format-spec/segment.md`, restated; the constants must
    /// agree with them and be contiguous.
    #[test]
    fn layout_matches_spec_tables() {
        let header = [
            (HDR_MAGIC, 0, 8),
            (HDR_VERSION, 8, 2),
            (HDR_FLAGS, 10, 2),
            (HDR_COLLECTION_ID, 12, 4),
            (HDR_TIME_FIELD_LEN, 16, 2),
            (HDR_RESERVED, 18, 2),
            (HDR_TIME_FIELD, 20, 0),
        ];
        for w in header.windows(2) {
            assert_eq!(w[0].0, w[0].1);
            assert_eq!(w[0].1 + w[0].2, w[1].1, "header fields must be contiguous");
        }
        assert_eq!(HDR_TIME_FIELD, 20);
        assert_eq!(header_len(9), 20 + 9 + 4);
        let footer = [
            (FTR_DIR_OFFSET, 0, 8),
            (FTR_DIR_STORED_LEN, 8, 4),
            (FTR_DIR_RAW_LEN, 12, 4),
            (FTR_DIR_CRC, 16, 4),
            (FTR_BUCKET_COUNT, 20, 4),
            (FTR_PAGE_COUNT, 24, 4),
            (FTR_HEADER_LEN, 28, 4),
            (FTR_VERSION, 32, 2),
            (FTR_RESERVED, 34, 2),
            (FTR_CRC, 36, 4),
            (FTR_MAGIC, 40, 8),
        ];
        for w in footer.windows(2) {
            assert_eq!(w[0].0, w[0].1);
            assert_eq!(w[0].1 + w[0].2, w[1].1, "footer fields must be contiguous");
        }
        assert_eq!(FOOTER_LEN, 48);
        assert_eq!(MIN_FILE_LEN, 24 + 48);
        // The spec's worked example quotes these bytes.
        assert_eq!(&HEADER_MAGIC, b"TSBSEGH\x01");
        assert_eq!(&FOOTER_MAGIC, b"TSBSEGF\x01");
    }

    #[test]
    fn footer_round_trip_and_every_bit_flip_is_caught() {
        let f = Footer {
            dir_offset: 12345,
            dir_stored_len: 77,
            dir_raw_len: 300,
            dir_crc: 0xdead_beef,
            bucket_count: 9,
            page_count: 2,
            header_len: 33,
        };
        let b = f.encode();
        assert_eq!(Footer::decode(&b).unwrap(), f);
        for bit in 0..FOOTER_LEN * 8 {
            let mut c = b;
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(Footer::decode(&c).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn varints_round_trip_and_reject_overflow() {
        let vals = [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX];
        let mut b = Vec::new();
        for v in vals {
            put_varint(&mut b, v);
        }
        let mut c = Cursor::new(&b);
        for v in vals {
            assert_eq!(c.varint().unwrap(), v);
        }
        assert!(c.at_end());
        let bad = [0xffu8; 11];
        assert!(Cursor::new(&bad).varint().is_err());
        let bad = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(Cursor::new(&bad).varint().is_err());
        for v in [0i64, -1, 1, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }

    #[test]
    fn oid_deltas_round_trip() {
        let a = ObjectId::new().bytes();
        let b = ObjectId::new().bytes();
        let mut out = Vec::new();
        put_oid_delta(&mut out, &a, &b);
        assert!(
            out.len() <= 4,
            "consecutive generated ids are close: {out:?}"
        );
        put_oid_delta(&mut out, &[0xff; 12], &[0; 12]);
        let mut c = Cursor::new(&out);
        assert_eq!(get_oid_delta(&mut c, &a).unwrap(), b);
        assert_eq!(get_oid_delta(&mut c, &[0xff; 12]).unwrap(), [0; 12]);
    }

    /// Skipping a value consumes exactly the bytes reading it does and fails where reading
    /// fails: open validates with the one, later reads decode with the other.
    #[test]
    fn skip_agrees_with_get_on_good_and_bad_values() {
        let refs = ValueRefs {
            oid: ObjectId::new().bytes(),
            millis: 1_700_000_000_000,
        };
        let values = [
            Bson::Double(1.5),
            Bson::String("h\u{e9}llo".into()),
            Bson::Document(bson::doc! {"a": 1}),
            Bson::ObjectId(ObjectId::new()),
            Bson::Boolean(true),
            Bson::DateTime(DateTime::from_millis(1_700_000_000_007)),
            Bson::Null,
            Bson::Int32(-7),
            Bson::Int64(1 << 40),
            Bson::Timestamp(Timestamp {
                time: 3,
                increment: 4,
            }),
            Bson::Decimal128(Decimal128::from_bytes([7; 16])),
            Bson::Array(vec![Bson::Int32(1)]),
            Bson::MaxKey,
        ];
        for v in &values {
            let mut enc = Vec::new();
            put_value(&mut enc, v, &refs).unwrap();
            // Every prefix, the whole value, and corruptions of each byte.
            let mut cases: Vec<Vec<u8>> = (0..=enc.len()).map(|n| enc[..n].to_vec()).collect();
            for i in 0..enc.len() {
                for x in [0x01u8, 0x80, 0xff] {
                    let mut b = enc.clone();
                    b[i] ^= x;
                    cases.push(b);
                }
            }
            for b in cases {
                let (mut g, mut s) = (Cursor::new(&b), Cursor::new(&b));
                let got = get_value(&mut g, &refs);
                let tag = s.u8();
                let skipped = tag.and_then(|t| skip_value_with_tag(&mut s, t, &refs));
                assert_eq!(got.is_ok(), skipped.is_ok(), "{v:?} as {b:?}");
                if got.is_ok() {
                    assert_eq!(g.pos(), s.pos(), "{v:?} as {b:?}");
                }
            }
        }
    }
}
