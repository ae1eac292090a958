//! A decoder of BSONColumn, the binary (BSON binary subtype 7) in which MongoDB's compressed
//! time-series buckets (`control.version` 2 and 3) store each `data.<field>` column.
//!
//! A column is a sequence of control bytes, each followed by its payload, ending with 0x00:
//!
//! - a BSON type byte starts a literal: a BSON element with an empty name, the next value;
//! - a byte whose high nibble is 0x8 to 0xD starts a block of 1 to 16 (low nibble + 1)
//!   Simple-8b words of zigzag-encoded deltas from the value before (delta-of-deltas for
//!   dates, timestamps and ObjectIds). The high nibble also picks the power of ten doubles are
//!   scaled by (0x9 to 0xD: 1, 10, 100, 10⁴, 10⁸) or, with 0x8, that their bits are taken as
//!   an integer; other types only take 0x8. Strings (of up to 16 bytes), JavaScript code,
//!   binaries (of up to 16 bytes) and decimals take 128-bit deltas. A zero delta repeats the
//!   value before, whatever its type; a missing slot is a row that lacks the value;
//! - 0xF0, 0xF1 or 0xF2 starts an interleaved block of objects (0xF2: of arrays): a reference
//!   object, then one sub-stream of literals and blocks per scalar field of it, in depth-first
//!   order, whose control bytes come in the order the objects need them; a 0x00 ends the
//!   block. 0xF0 blocks treat arrays as scalars, the others descend into them.
//!
//! [`decode`] gives every row: `Some(value)`, or `None` where the row lacks the value.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod column;
mod element;
mod encoding;
#[cfg(test)]
mod roundtrip_tests;
mod simple8b;

use std::fmt;

pub use bson::Bson;

/// Bounds on what one column may decode to, so that a small input cannot ask for unbounded
/// memory (a run-length word alone stands for up to 1920 values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Values read, counting missing ones and each field of an interleaved object.
    pub max_values: usize,
    /// A rough count of the bytes the decoded rows take in memory.
    pub max_bytes: usize,
}

impl Default for Limits {
    /// 16 Mi values and 256 MiB: far above what a bucket (at most a few thousand
    /// measurements within 16 MB of BSON) holds.
    fn default() -> Limits {
        Limits {
            max_values: 16 << 20,
            max_bytes: 256 << 20,
        }
    }
}

/// What is wrong with a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The bytes break the format.
    Malformed,
    /// The bytes are valid but give what the bson crate cannot hold (a string that is not
    /// UTF-8, an object with a field twice).
    Unsupported,
    /// Decoding would pass the [`Limits`].
    TooLarge,
}

/// Why a column does not decode, and the byte (from the column's start) where it went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    offset: usize,
    kind: ErrorKind,
    message: String,
}

impl DecodeError {
    pub(crate) fn new(offset: usize, kind: ErrorKind, message: impl Into<String>) -> DecodeError {
        DecodeError {
            offset,
            kind,
            message: message.into(),
        }
    }

    /// The byte offset in the column where decoding failed.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// What kind of failure it is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What is wrong, without the offset.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for DecodeError {}

/// Decodes a column (the bytes of a binary of subtype 7) into its rows, `None` for a row that
/// lacks the value, within the default [`Limits`].
pub fn decode(bytes: &[u8]) -> Result<Vec<Option<Bson>>, DecodeError> {
    decode_with_limits(bytes, &Limits::default())
}

/// [`decode`] within the given limits.
pub fn decode_with_limits(bytes: &[u8], limits: &Limits) -> Result<Vec<Option<Bson>>, DecodeError> {
    column::Decoder::new(bytes, limits).run()
}
