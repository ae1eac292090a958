//! Optional zstd layer over a codec body, used only when it shrinks the body.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use std::cell::RefCell;

use super::bits::{put_varint, varint_len, Reader};
use super::{ids, CodecError};

/// The decompressed size may be at most this multiple of the frame size (plus a little), so a
/// corrupt length cannot make the decoder allocate more than O(data.len()). The encoder skips
/// zstd when the real ratio is higher.
const MAX_RATIO: usize = 128;
const SLACK: usize = 256;

/// Bodies smaller than this are not worth a zstd frame (~9 bytes of header).
const MIN_BODY: usize = 48;

const LEVEL: i32 = 3;

thread_local! {
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

fn compress(body: &[u8]) -> Option<Vec<u8>> {
    COMPRESSOR.with(|c| {
        let mut c = c.try_borrow_mut().ok()?;
        if c.is_none() {
            let mut z = zstd::bulk::Compressor::new(LEVEL).ok()?;
            // We store the length ourselves and the segment has its own checksums.
            z.set_parameter(zstd::stream::raw::CParameter::ChecksumFlag(false))
                .ok()?;
            z.set_parameter(zstd::stream::raw::CParameter::ContentSizeFlag(false))
                .ok()?;
            z.set_parameter(zstd::stream::raw::CParameter::DictIdFlag(false))
                .ok()?;
            *c = Some(z);
        }
        c.as_mut()?.compress(body).ok()
    })
}

/// Returns the zstd-wrapped body when it is smaller than `body`.
pub(crate) fn maybe_compress(id: u8, body: &[u8]) -> Option<Vec<u8>> {
    // Entropy-coded numeric bodies never shrink under zstd; skip them to keep flushes fast.
    let numeric = matches!(
        id,
        ids::INT32 | ids::INT64 | ids::DATETIME | ids::OBJECTID | ids::TIMESTAMP | ids::BOOL
    ) || (id == ids::DOUBLE && body.first().is_some_and(|&m| m < 0x40));
    if numeric || body.len() < MIN_BODY {
        return None;
    }
    let frame = compress(body)?;
    if body.len() > frame.len() * MAX_RATIO + SLACK {
        return None;
    }
    let mut out = Vec::with_capacity(frame.len() + 5);
    put_varint(&mut out, body.len() as u64);
    out.extend_from_slice(&frame);
    (out.len() < body.len() && varint_len(body.len() as u64) < 10).then_some(out)
}

/// Reads the rest of `r` as a zstd-wrapped body and returns the decompressed bytes.
pub(crate) fn decompress(r: &mut Reader) -> Result<Vec<u8>, CodecError> {
    let at = r.offset();
    let len = r.varint()?;
    let frame_at = r.offset();
    let frame = r.rest();
    let limit = frame.len().saturating_mul(MAX_RATIO).saturating_add(SLACK);
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= limit)
        .ok_or_else(|| CodecError::new(at, format!("zstd length {len} exceeds limit {limit}")))?;
    match decompress_frame(frame, len) {
        Some(v) if v.len() == len => Ok(v),
        _ => Err(CodecError::new(frame_at, "corrupt zstd frame")),
    }
}

/// Decompresses one zstd frame of at most `capacity` bytes with this thread's decompressor:
/// a fresh context per call allocates and initialises ~100 KB of tables, which dominated
/// reading small pages.
pub(crate) fn decompress_frame(frame: &[u8], capacity: usize) -> Option<Vec<u8>> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.try_borrow_mut().ok()?;
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new().ok()?);
        }
        d.as_mut()?.decompress(frame, capacity).ok()
    })
}
