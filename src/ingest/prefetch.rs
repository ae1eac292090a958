//! Prefetching the documents of a batch ahead of encoding them.
//!
//! A `Document` is a tree of separate heap objects: its entry array, each name, each string
//! value, each embedded document's entry array and so on. A batch built before the insert is
//! cold in cache, and walking it is a chain of dependent misses (the entry holds the name's
//! address, the embedded document's entries hold their names' addresses). Encoding document
//! `i` therefore asks for the entry arrays of a document a few places ahead, for the names,
//! strings and embedded entry arrays of a nearer one (whose entries have arrived by then), and
//! for the embedded names and strings of the next one, so that each level is in cache by the
//! time the encoder gets there.

use crate::prefetch::line;
use bson::{Bson, Document};

/// How far ahead of the document being encoded each level is asked for (measured with
/// `examples/ingest_timing`: 4/2/1 and 12/6/3 did about as well, without the nested level
/// about 3% worse).
const ENTRIES_AHEAD: usize = 8;
const NAMES_AHEAD: usize = 4;
const NESTED_AHEAD: usize = 2;
/// Cache lines of one entry array asked for at most: the start of a large document is enough
/// for the hardware prefetcher to follow.
const MAX_LINES: usize = 64;

/// Asks for the levels of the documents ahead of `docs[i]`.
#[inline]
pub fn ahead(docs: &[Document], i: usize) {
    if let Some(d) = docs.get(i + ENTRIES_AHEAD) {
        entries(d);
    }
    if let Some(d) = docs.get(i + NAMES_AHEAD) {
        names_and_values(d);
    }
    if let Some(d) = docs.get(i + NESTED_AHEAD) {
        for (_, v) in d {
            if let Bson::Document(sub) = v {
                names_and_values(sub);
            }
        }
    }
}

/// The cache lines of a document's entry array (names and values inline).
#[inline]
fn entries(d: &Document) {
    let mut it = d.iter();
    let Some((first, _)) = it.next() else {
        return;
    };
    let start = first as *const String as usize;
    // The distance between two entries' names is the entry size, whatever the map's layout.
    let stride = it.next().map_or(64, |(k, _)| {
        (k as *const String as usize).wrapping_sub(start)
    });
    lines(start, stride.saturating_mul(d.len()));
}

/// Asks for the cache lines of `len` bytes from address `start`, up to [`MAX_LINES`].
#[inline]
fn lines(start: usize, len: usize) {
    let end = start.saturating_add(len.min(MAX_LINES * 64));
    let mut at = start & !63;
    while at < end {
        line(at as *const u8);
        at += 64;
    }
}

/// The names and string values a document's entries point to, and its embedded documents'
/// entry arrays.
#[inline]
fn names_and_values(d: &Document) {
    for (k, v) in d {
        line(k.as_ptr());
        match v {
            Bson::String(s) => line(s.as_ptr()),
            Bson::Document(sub) => entries(sub),
            _ => {}
        }
    }
}

/// How far ahead of the raw document being prepared its bytes are asked for (measured with
/// `examples/prepare_timing`: 1, 4 and 8 did alike, 16 worse).
const RAW_AHEAD: usize = 4;

/// Asks for the bytes of the raw document a few places ahead of `docs[i]`. Each document is
/// its own allocation, so the hardware prefetcher, which follows one stream of addresses, does
/// not find the next one; its lines then arrive one miss at a time as the walk reaches them.
#[inline]
pub fn raw_ahead(docs: &[bson::RawDocumentBuf], i: usize) {
    if let Some(d) = docs.get(i + RAW_AHEAD) {
        lines(d.as_bytes().as_ptr() as usize, d.as_bytes().len());
    }
}
