//! Byte layout of WAL files: the file header and the record frame (see `format-spec/wal.md`).
//!
//! Decoding works on a borrowed buffer holding a whole file and never allocates: a record's
//! payload is returned as a slice of that buffer, and a length field is trusted only after the
//! header checksum that covers it has been verified and the bytes it claims are present.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

/// First 8 bytes of every WAL file. The CR LF pair catches text-mode transfers (as in PNG).
pub const FILE_MAGIC: [u8; 8] = *b"TSBWAL\r\n";
/// Version of the file format described here. Version 3 added compacted records
/// ([`KIND_COMPACT`]); a file of version 1 or 2 never holds one.
pub const FORMAT_VERSION: u32 = 3;
/// Size of the file header in bytes.
pub const FILE_HEADER_LEN: usize = 32;
/// Size of a record header in bytes.
pub const RECORD_HEADER_LEN: usize = 24;
/// Record kind of a payload stored as it is.
pub const KIND_BATCH: u8 = 1;
/// Record kind of a payload stored compacted: only the engine's expander, fed every earlier
/// record of the same file in order, turns it back into the payload (version 3 files only).
pub const KIND_COMPACT: u8 = 2;

/// Reads a little-endian u32 at `at`, or `None` past the end.
fn u32_at(buf: &[u8], at: usize) -> Option<u32> {
    let b: [u8; 4] = buf.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

/// Reads a little-endian u64 at `at`, or `None` past the end.
fn u64_at(buf: &[u8], at: usize) -> Option<u64> {
    let b: [u8; 8] = buf.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

/// Largest salt: a salt is 24 bits, the three bytes after a record's kind byte.
pub const MAX_SALT: u32 = 0xFF_FFFF;

/// What a valid file header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// Seq of the file's first record.
    pub first_seq: u64,
    /// The salt every record of the file carries: 0 in a file created empty (and in every
    /// version 1 file), a random nonzero value in a file that reuses an older file's space,
    /// so that the older records left in it never pass for records of this file.
    pub salt: u32,
    /// The file's format version (1 to [`FORMAT_VERSION`]).
    pub version: u32,
}

/// The 32-byte header at the start of every WAL file (`salt <= MAX_SALT`).
pub fn encode_file_header(first_seq: u64, salt: u32) -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    let mut w = Vec::with_capacity(FILE_HEADER_LEN);
    w.extend_from_slice(&FILE_MAGIC);
    w.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    w.extend_from_slice(&(FILE_HEADER_LEN as u32).to_le_bytes());
    w.extend_from_slice(&first_seq.to_le_bytes());
    w.extend_from_slice(&(salt & MAX_SALT).to_le_bytes());
    let crc = crc32fast::hash(&w);
    w.extend_from_slice(&crc.to_le_bytes());
    h.copy_from_slice(&w);
    h
}

/// Why a file header is unusable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderError {
    /// The file is shorter than a header.
    Short(usize),
    /// The magic bytes are wrong (not a WAL file, or damaged).
    Magic,
    /// The checksum does not match.
    Checksum,
    /// A version this build cannot read.
    Version(u32),
    /// The header-length field is not 32.
    Length(u32),
    /// A salt wider than 24 bits.
    Salt(u32),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::Short(n) => write!(f, "file header incomplete ({n} of 32 bytes)"),
            HeaderError::Magic => write!(f, "bad file magic (not a tsbucket WAL file)"),
            HeaderError::Checksum => write!(f, "file header checksum mismatch"),
            HeaderError::Version(v) => write!(
                f,
                "WAL format version {v} is not supported (this build reads versions 1 to {FORMAT_VERSION})"
            ),
            HeaderError::Length(n) => write!(f, "file header length {n}, expected 32"),
            HeaderError::Salt(s) => write!(f, "file salt {s:#x} is wider than 24 bits"),
        }
    }
}

/// Parses a file header.
pub fn decode_file_header(buf: &[u8]) -> Result<FileHeader, HeaderError> {
    let h = buf
        .get(..FILE_HEADER_LEN)
        .ok_or(HeaderError::Short(buf.len()))?;
    if h.get(..8) != Some(&FILE_MAGIC[..]) {
        return Err(HeaderError::Magic);
    }
    let stored = u32_at(h, 28).ok_or(HeaderError::Short(buf.len()))?;
    if crc32fast::hash(h.get(..28).unwrap_or_default()) != stored {
        return Err(HeaderError::Checksum);
    }
    // The checksum is right, so a wrong version is a real newer file, not damage.
    let version = u32_at(h, 8).ok_or(HeaderError::Short(buf.len()))?;
    if !(1..=FORMAT_VERSION).contains(&version) {
        return Err(HeaderError::Version(version));
    }
    let len = u32_at(h, 12).ok_or(HeaderError::Short(buf.len()))?;
    if len as usize != FILE_HEADER_LEN {
        return Err(HeaderError::Length(len));
    }
    let first_seq = u64_at(h, 16).ok_or(HeaderError::Short(buf.len()))?;
    // Version 1 has no salt: its records carry zeros where version 2 has the salt.
    let salt = match version {
        1 => 0,
        _ => u32_at(h, 24).ok_or(HeaderError::Short(buf.len()))?,
    };
    if salt > MAX_SALT {
        return Err(HeaderError::Salt(salt));
    }
    Ok(FileHeader {
        first_seq,
        salt,
        version,
    })
}

/// The four bytes at offset 16 of a record header: the kind, then the salt's three bytes.
fn kind_word(kind: u8, salt: u32) -> [u8; 4] {
    let s = salt.to_le_bytes();
    [kind, s[0], s[1], s[2]]
}

/// Appends one framed record of kind [`KIND_BATCH`] to `out`.
///
/// The caller guarantees `payload.len() <= u32::MAX` (the WAL checks `max_record_bytes`, which
/// is capped at `u32::MAX`, before it encodes anything).
pub fn encode_record(out: &mut Vec<u8>, seq: u64, salt: u32, payload: &[u8]) {
    encode_record_of(out, seq, salt, KIND_BATCH, payload);
}

/// Appends one framed record of `kind` to `out` (see [`encode_record`]).
pub fn encode_record_of(out: &mut Vec<u8>, seq: u64, salt: u32, kind: u8, payload: &[u8]) {
    encode_record_header(out, seq, salt, kind, payload);
    out.extend_from_slice(payload);
}

/// Appends the 24-byte header of the record [`encode_record`] would append, without the
/// payload: a large payload can then be written from where it is, uncopied.
pub fn encode_record_header(out: &mut Vec<u8>, seq: u64, salt: u32, kind: u8, payload: &[u8]) {
    let start = out.len();
    out.extend_from_slice(&[0u8; 4]); // header crc, filled below
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&kind_word(kind, salt));
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    let hcrc = crc32fast::hash(out.get(start + 4..).unwrap_or_default());
    if let Some(slot) = out.get_mut(start..start + 4) {
        slot.copy_from_slice(&hcrc.to_le_bytes());
    }
}

/// Why no valid record starts at an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadRecord {
    /// Fewer than 24 bytes remain.
    ShortHeader(usize),
    /// The header checksum does not match (torn, zeroed or damaged header).
    HeaderChecksum,
    /// The header is intact but of an unknown kind.
    Kind(u8),
    /// The header is intact but carries another salt than its file's: a record left from an
    /// earlier use of the file's space.
    Salt {
        /// The record's salt.
        found: u32,
        /// The file's salt.
        expected: u32,
    },
    /// The header is intact but claims more bytes than the file holds.
    Incomplete {
        /// Payload length the header claims.
        len: u32,
        /// Bytes present after the header.
        available: usize,
    },
    /// The payload checksum does not match.
    PayloadChecksum,
    /// An intact, complete record larger than `max_record_bytes`. Unlike the other cases this is
    /// a real record, so it is never discarded as a torn tail.
    Oversize {
        /// Payload length.
        len: u32,
        /// The configured limit.
        max: usize,
    },
}

impl std::fmt::Display for BadRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadRecord::ShortHeader(n) => write!(f, "record header incomplete ({n} of 24 bytes)"),
            BadRecord::HeaderChecksum => write!(f, "record header checksum mismatch"),
            BadRecord::Kind(k) => write!(f, "unknown record kind {k}"),
            BadRecord::Salt { found, expected } => write!(
                f,
                "record salt {found:#x} is not the file's ({expected:#x}): left from an earlier use of the file"
            ),
            BadRecord::Incomplete { len, available } => write!(
                f,
                "record claims {len} payload bytes but only {available} remain"
            ),
            BadRecord::PayloadChecksum => write!(f, "record payload checksum mismatch"),
            BadRecord::Oversize { len, max } => write!(
                f,
                "record of {len} bytes exceeds max_record_bytes {max}; reopen with a larger limit"
            ),
        }
    }
}

/// A record decoded in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Sequence number.
    pub seq: u64,
    /// [`KIND_BATCH`] or [`KIND_COMPACT`].
    pub kind: u8,
    /// The payload, borrowed from the file buffer.
    pub payload: &'a [u8],
    /// Offset just past the record.
    pub end: usize,
}

/// Decodes the record at `pos` of `buf`, checking both checksums, the salt and the size limit.
/// `salt` is the file's; `None` accepts any (for a file whose header is unreadable).
pub fn decode_record(
    buf: &[u8],
    pos: usize,
    salt: Option<u32>,
    max_record_bytes: usize,
) -> Result<Record<'_>, BadRecord> {
    let rest = buf.get(pos..).unwrap_or_default();
    let Some(h) = rest.get(..RECORD_HEADER_LEN) else {
        return Err(BadRecord::ShortHeader(rest.len()));
    };
    let hcrc = u32_at(h, 0).ok_or(BadRecord::ShortHeader(rest.len()))?;
    if crc32fast::hash(h.get(4..).unwrap_or_default()) != hcrc {
        return Err(BadRecord::HeaderChecksum);
    }
    let len = u32_at(h, 4).ok_or(BadRecord::ShortHeader(rest.len()))?;
    let seq = u64_at(h, 8).ok_or(BadRecord::ShortHeader(rest.len()))?;
    let word = u32_at(h, 16).ok_or(BadRecord::ShortHeader(rest.len()))?;
    let kind = word as u8;
    if kind != KIND_BATCH && kind != KIND_COMPACT {
        return Err(BadRecord::Kind(kind));
    }
    let found = word >> 8;
    if let Some(expected) = salt.filter(|&s| s != found) {
        return Err(BadRecord::Salt { found, expected });
    }
    let dcrc = u32_at(h, 20).ok_or(BadRecord::ShortHeader(rest.len()))?;
    let available = rest.len() - RECORD_HEADER_LEN;
    let Some(payload) = rest.get(RECORD_HEADER_LEN..RECORD_HEADER_LEN + len as usize) else {
        return Err(BadRecord::Incomplete { len, available });
    };
    if crc32fast::hash(payload) != dcrc {
        return Err(BadRecord::PayloadChecksum);
    }
    if len as usize > max_record_bytes {
        return Err(BadRecord::Oversize {
            len,
            max: max_record_bytes,
        });
    }
    Ok(Record {
        seq,
        kind,
        payload,
        end: pos + RECORD_HEADER_LEN + len as usize,
    })
}

/// Cheap pre-check used when scanning byte by byte for a record: the kind byte, and the salt
/// when known, must be right before a checksum is worth computing.
pub fn may_start_record(buf: &[u8], pos: usize, salt: Option<u32>) -> bool {
    let at = pos.saturating_add(16);
    let kind_ok = matches!(buf.get(at), Some(&KIND_BATCH) | Some(&KIND_COMPACT));
    match salt {
        Some(s) => kind_ok && buf.get(at + 1..at.saturating_add(4)) == kind_word(0, s).get(1..),
        None => kind_ok,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing, reason = "test code")]
    use super::*;

    #[test]
    fn file_header_round_trips_and_detects_damage() {
        let h = encode_file_header(42, 0xAB_CDEF);
        assert_eq!(
            decode_file_header(&h),
            Ok(FileHeader {
                first_seq: 42,
                salt: 0xAB_CDEF,
                version: FORMAT_VERSION
            })
        );
        assert_eq!(decode_file_header(&h[..31]), Err(HeaderError::Short(31)));
        for bit in 0..FILE_HEADER_LEN * 8 {
            let mut b = h;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_file_header(&b).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn record_round_trips() {
        let mut buf = vec![9u8; 3];
        encode_record(&mut buf, 7, 0, b"hello");
        encode_record(&mut buf, 8, 0, b"");
        let r = decode_record(&buf, 3, Some(0), 100).unwrap();
        assert_eq!((r.seq, r.payload, r.end), (7, &b"hello"[..], 3 + 24 + 5));
        let r2 = decode_record(&buf, r.end, Some(0), 100).unwrap();
        assert_eq!((r2.seq, r2.payload, r2.end), (8, &b""[..], buf.len()));
        assert_eq!(
            decode_record(&buf, buf.len(), Some(0), 100),
            Err(BadRecord::ShortHeader(0))
        );
    }

    #[test]
    fn every_header_bit_flip_is_detected() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 1, 0x12_3456, b"payload");
        for bit in 0..RECORD_HEADER_LEN * 8 {
            let mut b = buf.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(
                decode_record(&b, 0, Some(0x12_3456), 100).is_err(),
                "bit {bit}"
            );
        }
    }

    #[test]
    fn zeros_and_huge_lengths_are_rejected_without_allocation() {
        assert_eq!(
            decode_record(&[0u8; 64], 0, Some(0), 100),
            Err(BadRecord::HeaderChecksum)
        );
        // A well-formed header claiming 4 GiB: reported incomplete, nothing allocated.
        let mut h = Vec::new();
        encode_record(&mut h, 1, 0, b"");
        h[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        let crc = crc32fast::hash(&h[4..24]);
        h[0..4].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode_record(&h, 0, Some(0), 100),
            Err(BadRecord::Incomplete {
                len: u32::MAX,
                available: 0
            })
        ));
    }

    #[test]
    fn complete_oversize_record_is_reported_as_such() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 1, 0, &[1u8; 50]);
        assert_eq!(
            decode_record(&buf, 0, Some(0), 10),
            Err(BadRecord::Oversize { len: 50, max: 10 })
        );
    }

    #[test]
    fn a_record_of_another_salt_is_not_the_files() {
        let mut buf = Vec::new();
        encode_record(&mut buf, 5, 0x00_0102, b"old");
        assert_eq!(
            decode_record(&buf, 0, Some(0x00_0103), 100),
            Err(BadRecord::Salt {
                found: 0x102,
                expected: 0x103
            })
        );
        assert!(!may_start_record(&buf, 0, Some(0x103)));
        assert!(may_start_record(&buf, 0, Some(0x102)));
        // A file whose header is unreadable takes a record of any salt as intact.
        assert!(may_start_record(&buf, 0, None));
        assert_eq!(decode_record(&buf, 0, None, 100).unwrap().seq, 5);
    }

    #[test]
    fn version_1_headers_are_read_with_salt_0() {
        let mut h = encode_file_header(9, 0);
        h[8] = 1;
        // A version 1 writer left its reserved field zero; its records carry zeros there too.
        h[24..28].copy_from_slice(&0u32.to_le_bytes());
        let crc = crc32fast::hash(&h[..28]);
        h[28..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode_file_header(&h),
            Ok(FileHeader {
                first_seq: 9,
                salt: 0,
                version: 1
            })
        );
        let mut wide = encode_file_header(9, 0);
        wide[24..28].copy_from_slice(&0x100_0000u32.to_le_bytes());
        let crc = crc32fast::hash(&wide[..28]);
        wide[28..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode_file_header(&wide),
            Err(HeaderError::Salt(0x100_0000))
        );
        let mut v4 = encode_file_header(9, 0);
        v4[8] = 4;
        let crc = crc32fast::hash(&v4[..28]);
        v4[28..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(decode_file_header(&v4), Err(HeaderError::Version(4)));
    }
}
