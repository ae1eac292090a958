//! Sorting documents by `$sort` keys in MongoDB's order.
//!
//! Each document's sort values are read once and encoded as normalised bytes: a string of bytes
//! per document whose byte order is MongoDB's order of the values (type bracket, then value;
//! a descending key's bytes inverted). Rows are sorted by those bytes, their first eight held
//! as an integer so that most comparisons are one integer comparison, then by position, which
//! makes the sort stable. Where the encoding stopped at a value it does not encode exactly
//! (Decimal128, integers beyond 2^53, code), rows whose bytes agree up to there are compared
//! by their values.

use super::filter::collect_doc;
use crate::error::{Error, Result};
use crate::order::{as_f64, cmp_bson, type_rank};
use bson::raw::{RawBsonRef, RawDocument};
use bson::{Bson, Document};
use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::Arc;

/// Sorts documents by the keys, stably (equal documents keep their order).
pub fn sort_docs(docs: &mut [Document], keys: &[(String, bool)]) {
    if docs.len() < 2 || keys.is_empty() {
        return;
    }
    let mut encoded = Keys::default();
    for d in docs.iter() {
        encoded.push(d, keys);
    }
    let order = encoded.order(keys, |i| docs.get(i as usize));
    permute(docs, order);
}

/// Puts `docs` in `order` (positions of the documents, first to last).
fn permute(docs: &mut [Document], order: Vec<u32>) {
    let mut taken: Vec<Document> = docs.iter_mut().map(std::mem::take).collect();
    for (slot, i) in docs.iter_mut().zip(order) {
        if let Some(d) = taken.get_mut(i as usize) {
            *slot = std::mem::take(d);
        }
    }
}

/// The first `n` documents of `docs` in sort order, keeping at most about `2n` in memory
/// while they arrive (ties keep arrival order).
pub fn top_sorted<E>(
    docs: impl Iterator<Item = std::result::Result<Document, E>>,
    keys: &[(String, bool)],
    n: usize,
) -> std::result::Result<Vec<Document>, E> {
    let mut out: Vec<Document> = Vec::new();
    let cap = n.saturating_mul(2).max(1024);
    for d in docs {
        out.push(d?);
        if out.len() >= cap && out.len() > n {
            sort_docs(&mut out, keys);
            out.truncate(n);
        }
    }
    sort_docs(&mut out, keys);
    out.truncate(n);
    Ok(out)
}

/// The first `n` rows offered, in the order of their normalised keys and then of their
/// places, kept as key bytes alone: a row is offered with its key written from wherever its
/// values are (columns, a bucket's meta value), and one that sorts after the `n`th kept at
/// the last cut is turned away at once. For keys that encode exactly; a row whose key does not
/// is refused, and the caller orders by values instead.
pub(crate) struct TopKeys {
    n: usize,
    /// The kept rows' key bytes past their first eight, each row's followed by its place
    /// (8 + 4 bytes, big-endian) so that ties go to the earlier place.
    arena: Vec<u8>,
    /// The kept rows: their first eight bytes as a number, which decides most comparisons
    /// without reading the arena, and where the rest lies in it.
    rows: Vec<KeptRow>,
    /// The `n`th row's bytes (the last cut's, or a smaller one from [`TopKeys::bar`]).
    nth: Option<(u64, Vec<u8>)>,
    scratch: Vec<u8>,
    /// The arena a cut writes the rows it keeps into, kept for the next cut.
    spare: Vec<u8>,
}

/// A kept row of [`TopKeys`].
#[derive(Clone, Copy)]
struct KeptRow {
    head: u64,
    start: u32,
    len: u32,
}

impl KeptRow {
    /// The bytes past the first eight in `arena`.
    fn rest<'a>(&self, arena: &'a [u8]) -> &'a [u8] {
        arena.get(self.start as usize..(self.start + self.len) as usize).unwrap_or_default()
    }

    /// The order of two kept rows' bytes.
    fn cmp_in(&self, other: &KeptRow, arena: &[u8]) -> std::cmp::Ordering {
        self.head.cmp(&other.head).then_with(|| self.rest(arena).cmp(other.rest(arena)))
    }
}

/// A row's bytes as the first eight as a number and the rest: the pair orders as the bytes
/// do, since a row's bytes are longer than eight (the place alone is twelve). Shorter bytes (a
/// bucket's best key without a place) are padded with zeros, which still orders them against
/// any row's as their bytes are ordered.
fn split_head(row: &[u8]) -> (u64, &[u8]) {
    let mut head = [0u8; 8];
    head.iter_mut().zip(row).for_each(|(h, b)| *h = *b);
    (u64::from_be_bytes(head), row.get(8..).unwrap_or_default())
}

impl TopKeys {
    /// Keeps the first `n`.
    pub(crate) fn new(n: usize) -> TopKeys {
        TopKeys {
            n,
            arena: Vec::new(),
            rows: Vec::new(),
            nth: None,
            scratch: Vec::new(),
            spare: Vec::new(),
        }
    }

    /// Offers the row at `place` (bucket in scan order, row): `write(k, out)` appends the
    /// normalised bytes of its value of key `k` ([`put_value`] writes them) and says whether
    /// they are exact. False when a key was not exact: nothing is kept of the row.
    pub(crate) fn offer(
        &mut self,
        keys: &[(String, bool)],
        place: (usize, u32),
        mut write: impl FnMut(usize, &mut Vec<u8>) -> bool,
    ) -> bool {
        let mut row = std::mem::take(&mut self.scratch);
        row.clear();
        let mut exact = true;
        for (k, (_, asc)) in keys.iter().enumerate() {
            let from = row.len();
            if !write(k, &mut row) {
                exact = false;
                break;
            }
            if !*asc {
                invert(row.get_mut(from..).unwrap_or_default());
            }
        }
        if exact {
            put_place(place, &mut row);
            exact = self.keep(&row);
        }
        self.scratch = row;
        exact
    }

    /// Keeps a row's bytes (key, then place) unless they sort after the `n`th; false when the
    /// arena would pass what its offsets address.
    fn keep(&mut self, row: &[u8]) -> bool {
        if self.n == 0 {
            return true;
        }
        let (head, rest) = split_head(row);
        // Places differ, so no row ties with the `n`th: one after it cannot be kept.
        if let Some((h, r)) = &self.nth {
            if (head, rest) > (*h, r.as_slice()) {
                return true;
            }
        }
        let (Ok(start), Ok(len)) = (u32::try_from(self.arena.len()), u32::try_from(rest.len())) else {
            return false;
        };
        // Room for the rows up to the next cut, sized by this row's length, and no more: a
        // vector that doubled would hold up to twice what the rows need.
        let cut_at = self.cut_at();
        let rows_left = cut_at.saturating_sub(self.rows.len()).max(1);
        if self.rows.len() == self.rows.capacity() {
            self.rows.reserve_exact(rows_left);
        }
        if self.arena.capacity() - self.arena.len() < rest.len() {
            self.arena.reserve_exact(rest.len().saturating_mul(rows_left));
        }
        self.arena.extend_from_slice(rest);
        self.rows.push(KeptRow { head, start, len });
        if self.rows.len() >= cut_at {
            self.cut();
        }
        true
    }

    /// How many rows are kept before a cut.
    fn cut_at(&self) -> usize {
        self.n.saturating_add((self.n / 2).max(1024))
    }

    /// About how many bytes `threads` keepers of the first `n` of rows with `keys` hold at
    /// the most, for a caller choosing how many to run within a memory limit.
    pub(crate) fn estimate(n: usize, keys: usize, threads: usize) -> usize {
        // A kept row, and its bytes past the first eight in the arena and in the spare: a
        // number's key is a type byte and eight bytes, the place twelve.
        let row = std::mem::size_of::<KeptRow>() + 2 * (9 * keys + 4);
        n.saturating_add(n / 2).saturating_mul(row).saturating_mul(threads)
    }

    /// Takes `bar`, the `n`th row of another keeper of the same rows' keys, as its own when it
    /// sorts first: no row after it is among the first `n` of all of them.
    pub(crate) fn bar(&mut self, bar: &[u8]) {
        let (head, rest) = split_head(bar);
        if self.nth.as_ref().is_none_or(|(h, r)| (head, rest) < (*h, r.as_slice())) {
            self.nth = Some((head, rest.to_vec()));
        }
    }

    /// Takes the rows `other` kept, as [`TopKeys::finish_from`] of both would give them; false as
    /// for [`TopKeys::offer`].
    pub(crate) fn absorb(&mut self, other: &TopKeys) -> bool {
        if let Some(t) = other.nth() {
            self.bar(&t);
        }
        let mut row = Vec::new();
        other.rows.iter().all(|&r| {
            row.clear();
            other.bytes_of(r, &mut row);
            self.keep(&row)
        })
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.arena.capacity() + self.spare.capacity() + self.rows.capacity() * std::mem::size_of::<KeptRow>()
    }

    /// Rows kept so far.
    pub(crate) fn len(&self) -> usize {
        self.rows.len()
    }

    /// Keeps the first `n` of the rows kept so far, in no order, and takes the `n`th as the
    /// bar for the rows offered after.
    pub(crate) fn cut(&mut self) {
        let arena = &self.arena;
        let by_bytes = |a: &KeptRow, b: &KeptRow| a.cmp_in(b, arena);
        if self.n == 0 || self.rows.len() < self.n {
            return;
        }
        // The `n`th goes to its place with the first `n - 1` before it: sorting them waits
        // for the end.
        self.rows.select_nth_unstable_by(self.n - 1, by_bytes);
        self.rows.truncate(self.n);
        let mut fresh = std::mem::take(&mut self.spare);
        fresh.clear();
        // Room for the kept rows and, at their mean length, for those up to the next cut: the
        // arena then never grows by a copy of itself.
        let kept: usize = self.rows.iter().map(|r| r.len as usize).sum();
        let mean = kept / self.rows.len().max(1) + 1;
        fresh.reserve_exact(kept + mean * (self.cut_at() - self.n));
        for r in self.rows.iter_mut() {
            let start = fresh.len() as u32;
            fresh.extend_from_slice(r.rest(&self.arena));
            r.start = start;
        }
        self.spare = std::mem::replace(&mut self.arena, fresh);
        if self.rows.len() == self.n {
            if let Some(&last) = self.rows.last() {
                let mut b = Vec::new();
                self.bytes_of(last, &mut b);
                self.bar(&b);
            }
        }
    }

    /// The `n`th kept row's bytes (key, then place), once `n` were kept.
    pub(crate) fn nth(&self) -> Option<Vec<u8>> {
        self.nth.as_ref().map(|(h, r)| {
            let mut b = h.to_be_bytes().to_vec();
            b.extend_from_slice(r);
            b
        })
    }

    /// Whether an `n`th is known: `n` rows were kept, or another keeper's `n`th barred this one.
    pub(crate) fn has_nth(&self) -> bool {
        self.nth.is_some()
    }

    /// Whether the `n`th kept row sorts before `bytes`: no row at or after them is kept.
    pub(crate) fn nth_before(&self, bytes: &[u8]) -> bool {
        let (head, rest) = split_head(bytes);
        self.nth.as_ref().is_some_and(|(h, r)| (*h, r.as_slice()) < (head, rest))
    }

    /// The places of the first `n` rows past the first `from`, first to last: only those are
    /// sorted.
    pub(crate) fn finish_from(mut self, from: usize) -> Vec<(usize, u32)> {
        self.cut();
        let arena = &self.arena;
        if from >= self.rows.len() {
            return Vec::new();
        }
        if from > 0 {
            self.rows.select_nth_unstable_by(from, |a, b| a.cmp_in(b, arena));
            self.rows.drain(..from);
        }
        self.rows.sort_unstable_by(|a, b| a.cmp_in(b, arena));
        self.rows
            .iter()
            .map(|&r| {
                // The place closes the row's bytes.
                let mut b = Vec::new();
                self.bytes_of(r, &mut b);
                let tail = b.get(b.len().saturating_sub(12)..).unwrap_or_default();
                let mut k = [0u8; 8];
                let mut i = [0u8; 4];
                k.iter_mut().zip(tail).for_each(|(o, x)| *o = *x);
                i.iter_mut().zip(tail.iter().skip(8)).for_each(|(o, x)| *o = *x);
                (u64::from_be_bytes(k) as usize, u32::from_be_bytes(i))
            })
            .collect()
    }

    /// Appends a kept row's whole bytes to `out`.
    fn bytes_of(&self, r: KeptRow, out: &mut Vec<u8>) {
        out.extend_from_slice(&r.head.to_be_bytes());
        out.extend_from_slice(r.rest(&self.arena));
    }
}

/// Appends `v`'s normalised bytes (ascending); false where they are not exact.
pub(crate) fn put_value(v: &Bson, out: &mut Vec<u8>) -> bool {
    put(v, out)
}

/// Appends the normalised bytes of a typed column's value given as its type and bits
/// ([`crate::query::columns::Col::typed_bits`]: 1 int32, 2 int64, 3 double, 4 date), as
/// [`put_value`] writes the value, without building it; false where they are not exact.
pub(crate) fn put_typed((kind, bits): (u8, u64), out: &mut Vec<u8>) -> bool {
    let f = match kind {
        1 | 2 => bits as i64 as f64,
        3 => f64::from_bits(bits),
        _ => {
            out.push(type_rank(&Bson::DateTime(bson::DateTime::MIN)) + 1);
            out.extend_from_slice(&(bits ^ (1 << 63)).to_be_bytes());
            return true;
        }
    };
    out.push(type_rank(&Bson::Double(0.0)) + 1);
    // Below 2^53 every integer converts exactly, so only equal numbers share a double.
    if !(f.is_nan() || f.abs() < norm::EXACT) {
        return false;
    }
    out.extend_from_slice(&ordered_f64(f).to_be_bytes());
    true
}

/// Appends `v`'s normalised bytes as a key in direction `asc` orders them (a descending key's
/// inverted); false where they are not exact.
pub(crate) fn put_key(v: &Bson, asc: bool, out: &mut Vec<u8>) -> bool {
    let from = out.len();
    let exact = put(v, out);
    if !asc {
        invert(out.get_mut(from..).unwrap_or_default());
    }
    exact
}

/// Appends a row's place (bucket in scan order, row) as [`TopKeys`] closes a key with it:
/// 8 + 4 bytes, big-endian, so that byte order is place order.
pub(crate) fn put_place((bucket, row): (usize, u32), out: &mut Vec<u8>) {
    out.extend_from_slice(&(bucket as u64).to_be_bytes());
    out.extend_from_slice(&row.to_be_bytes());
}

/// Inverts key bytes: a descending key's order.
fn invert(bytes: &mut [u8]) {
    bytes.iter_mut().for_each(|b| *b = !*b);
}

/// How much a sort may hold in memory, and where it writes what does not fit.
#[derive(Debug, Clone)]
pub struct SortMemory {
    /// Estimated bytes of documents held before a sorted run is written out.
    pub limit: usize,
    /// Directory for the runs (unnamed temporary files, gone when the sort ends or the
    /// process dies); `None` for the system's temporary directory.
    pub dir: Option<PathBuf>,
}

impl Default for SortMemory {
    fn default() -> Self {
        SortMemory {
            limit: 100 * 1024 * 1024,
            dir: None,
        }
    }
}

/// The largest limit kept by a top-k sort (which holds up to twice as many documents); a
/// sort with a larger one sorts within its memory limit.
pub(crate) const TOP_K_MAX: u64 = 10_000;

/// Rows put in `$sort` order by normalised keys that the caller writes, for rows that are not
/// documents (a group table's keys): the same bytes and order as a sort of documents.
pub(crate) struct KeyOrder {
    keys: Keys,
}

impl KeyOrder {
    /// Room for `rows` rows.
    pub(crate) fn with_capacity(rows: usize) -> KeyOrder {
        let mut keys = Keys::default();
        keys.keyed.reserve(rows);
        KeyOrder { keys }
    }

    /// Adds the next row: `write(k, out)` appends the normalised bytes of its value of key `k`
    /// ([`norm`]'s functions write them) and returns false where it cannot encode the value
    /// exactly. Returns false then too: such rows need their values compared, which only a
    /// sort of documents does.
    pub(crate) fn push(
        &mut self,
        keys: &[(String, bool)],
        write: impl FnMut(usize, &mut Vec<u8>) -> bool,
    ) -> bool {
        self.keys.push_with(keys, write)
    }

    /// The rows in order (stable: equal keys keep the order they were added in).
    pub(crate) fn order(self) -> Vec<u32> {
        self.keys.order_exact()
    }
}

/// Pieces of the normalised encoding (see [`put`]) for callers that write keys from other
/// representations than `Bson` values.
pub(crate) mod norm {
    pub(crate) use super::{ordered_f64, put_str};

    /// The byte that starts a value of canonical type rank `rank` ([`crate::order::type_rank`]).
    pub(crate) fn bracket(rank: u8) -> u8 {
        rank + 1
    }

    /// The largest magnitude below which every integer and double is encoded exactly.
    pub(crate) const EXACT: f64 = 9_007_199_254_740_992.0;
}

/// Sorted documents as they are read.
pub type SortedDocs = Box<dyn Iterator<Item = Result<Document>> + Send>;

/// Sorts a stream of documents within `memory`: while the documents fit they are sorted in
/// memory; past the limit each full batch is sorted and written to a temporary file as a run,
/// and the runs are merged as the output is read (stable: a run holds earlier documents than
/// the runs after it, and ties go to the earlier run). Also says whether runs were written.
pub fn sort_within(
    input: impl Iterator<Item = Result<Document>>,
    keys: &[(String, bool)],
    memory: &SortMemory,
) -> Result<(SortedDocs, bool)> {
    // Room for what the input says it holds (a group's output knows its length), up to what
    // the memory limit lets a batch hold: growing by doubling copied the documents and faulted
    // in fresh pages several times over.
    let room = input
        .size_hint()
        .0
        .min(memory.limit / std::mem::size_of::<Document>().max(1) / 4);
    let mut batch: Vec<Document> = Vec::with_capacity(room);
    // Each document's key is encoded as it arrives, while the document is still in cache.
    let mut encoded = Keys::default();
    encoded.keyed.reserve(room);
    let mut bytes = 0usize;
    let mut runs: Vec<Run> = Vec::new();
    for d in input {
        let d = d?;
        bytes = bytes.saturating_add(approx_bytes(&d));
        encoded.push(&d, keys);
        batch.push(d);
        if bytes > memory.limit {
            let order = std::mem::take(&mut encoded).order(keys, |i| batch.get(i as usize));
            permute(&mut batch, order);
            runs.push(Run::write(&mut batch, memory)?);
            bytes = 0;
        }
    }
    let order = encoded.order(keys, |i| batch.get(i as usize));
    permute(&mut batch, order);
    if runs.is_empty() {
        return Ok((Box::new(batch.into_iter().map(Ok)), false));
    }
    // The last batch stays in memory as the last run.
    let keys: Arc<[(String, bool)]> = keys.into();
    let mut heads = BinaryHeap::new();
    let mut sources: Vec<Source> = runs.into_iter().map(Source::File).collect();
    sources.push(Source::Memory(batch.into_iter()));
    for (i, src) in sources.iter_mut().enumerate() {
        if let Some(d) = src.next()? {
            heads.push(Head::new(d, i, &keys));
        }
    }
    let mut failed = false;
    let merged = std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let head = heads.pop()?;
        let next = sources.get_mut(head.run).map(Source::next);
        match next {
            Some(Ok(Some(d))) => heads.push(Head::new(d, head.run, &keys)),
            Some(Err(e)) => {
                failed = true;
                return Some(Err(e));
            }
            _ => {}
        }
        Some(Ok(head.row))
    });
    Ok((Box::new(merged), true))
}

/// Documents as BSON bytes put in sort order within `memory` ([`sort_raw_within`]): from
/// memory, or merged from sorted runs in temporary files as they are read.
pub(crate) struct SortedRaw {
    keys: Arc<[(String, bool)]>,
    /// The last batch: its documents one after another, where each ends, and their order.
    arena: Vec<u8>,
    ends: Vec<usize>,
    order: std::vec::IntoIter<u32>,
    /// The runs written to files, with the batch in memory as the last run; empty when every
    /// document fitted in memory.
    runs: Vec<RawRun>,
    heads: BinaryHeap<Head<Vec<u8>>>,
    /// Every row's key encoded exactly: the runs' heads compare by key bytes alone.
    exact: bool,
}

/// A run of documents as BSON bytes, one after another, in sort order.
enum RawRun {
    File(Run),
    Memory,
}

/// Sorts the documents `next` appends to its buffer as BSON bytes (false when none is left)
/// by `keys`, stably, within `memory`: each document's key is encoded as it arrives; past the
/// limit the batch is sorted and its bytes written to a temporary file as a run, and the runs
/// are merged as the output is read. Rows stay bytes throughout: no document is built. Also
/// says whether runs were written.
pub(crate) fn sort_raw_within(
    mut next: impl FnMut(&mut Vec<u8>) -> Result<bool>,
    keys: &[(String, bool)],
    memory: &SortMemory,
) -> Result<(SortedRaw, bool)> {
    // Room for a whole batch from the start: growing by doubling copied the bytes several
    // times over. Pages are only touched as rows are written.
    let mut arena: Vec<u8> = Vec::with_capacity(memory.limit.min(1 << 28));
    let mut ends: Vec<usize> = Vec::new();
    let mut encoded = Keys::default();
    let mut runs: Vec<RawRun> = Vec::new();
    let mut exact = true;
    loop {
        let start = arena.len();
        if !next(&mut arena)? {
            break;
        }
        let raw = arena
            .get(start..)
            .and_then(|b| RawDocument::from_bytes(b).ok())
            .ok_or_else(|| Error::Internal("a sorted row is not BSON".into()))?;
        exact &= encoded.push_with(keys, |k, out| {
            keys.get(k)
                .is_some_and(|(path, asc)| put_raw_key(raw, path, *asc, out))
        });
        ends.push(arena.len());
        let held = arena.len()
            + encoded.arena.len()
            + encoded.keyed.len() * (std::mem::size_of::<Keyed>() + std::mem::size_of::<usize>());
        if held > memory.limit {
            let order = std::mem::take(&mut encoded)
                .order_by(keys, |i| raw_values(&arena, &ends, i, keys));
            runs.push(RawRun::File(Run::write_raw(&arena, &ends, &order, memory)?));
            arena.clear();
            ends.clear();
        }
    }
    let order = encoded.order_by(keys, |i| raw_values(&arena, &ends, i, keys));
    let spilled = !runs.is_empty();
    let mut sorted = SortedRaw {
        keys: keys.into(),
        arena,
        ends,
        order: order.into_iter(),
        runs,
        heads: BinaryHeap::new(),
        exact,
    };
    if spilled {
        sorted.runs.push(RawRun::Memory);
        for run in 0..sorted.runs.len() {
            sorted.refill(run, Vec::new())?;
        }
    }
    Ok((sorted, spilled))
}

/// Row `i`'s sort values, read from its bytes.
fn raw_values<'d>(
    arena: &[u8],
    ends: &[usize],
    i: u32,
    keys: &[(String, bool)],
) -> Vec<Cow<'d, Bson>> {
    let row = raw_row(arena, ends, i as usize).and_then(|b| RawDocument::from_bytes(b).ok());
    let Some(raw) = row else {
        return Vec::new();
    };
    keys.iter()
        .map(|(path, asc)| Cow::Owned(raw_sort_value(raw, path, *asc)))
        .collect()
}

/// The bytes of row `i` of a batch.
fn raw_row<'a>(arena: &'a [u8], ends: &[usize], i: usize) -> Option<&'a [u8]> {
    let start = match i.checked_sub(1) {
        Some(p) => *ends.get(p)?,
        None => 0,
    };
    arena.get(start..*ends.get(i)?)
}

/// Appends the normalised bytes of the sort value of `path` in the row `raw` (ascending);
/// false where they are not exact.
fn put_raw_key(raw: &RawDocument, path: &str, asc: bool, out: &mut Vec<u8>) -> bool {
    match put_raw_scalar(raw.as_bytes(), path, out) {
        Some(exact) => exact,
        None => put(&raw_sort_value(raw, path, asc), out),
    }
}

/// Appends the normalised bytes of top-level field `path` of the document `doc` (its bytes)
/// when it is a number, a date or null, or absent (null), without building a value: `Some`
/// with whether they are exact. `None` for a dotted path, any other value, or bytes the walk
/// cannot frame; [`raw_sort_value`] decides those.
fn put_raw_scalar(doc: &[u8], path: &str, out: &mut Vec<u8>) -> Option<bool> {
    if path.contains('.') {
        return None;
    }
    let mut elements = crate::doc::elements::Elements::new(doc);
    let found = elements.by_ref().find(|e| e.name == path.as_bytes());
    let Some(e) = found else {
        return elements.finished().then(|| put(&Bson::Null, out));
    };
    let word = |n: usize| -> Option<u64> {
        let mut b = [0u8; 8];
        b.get_mut(..n)?.copy_from_slice(e.value.get(..n)?);
        Some(u64::from_le_bytes(b))
    };
    let typed = match e.kind {
        0x01 => (3, word(8)?),
        0x09 => (4, word(8)?),
        0x10 => (1, word(4)? as u32 as i32 as i64 as u64),
        0x12 => (2, word(8)?),
        0x0A => return Some(put(&Bson::Null, out)),
        _ => return None,
    };
    Some(put_typed(typed, out))
}

/// [`sort_value`] of a document given as bytes: a top-level value that is not an array or a
/// document is read as it is; anything else through a document of the path's first field.
fn raw_sort_value(raw: &RawDocument, path: &str, asc: bool) -> Bson {
    let head = path.split('.').next().unwrap_or(path);
    let v = match raw.get(head) {
        Ok(Some(v)) => v,
        _ => return Bson::Null,
    };
    if head.len() == path.len() && !matches!(v, RawBsonRef::Array(_) | RawBsonRef::Document(_)) {
        return crate::doc::to_bson(v);
    }
    let mut one = Document::new();
    one.insert(head, crate::doc::to_bson(v));
    sort_value(&one, path, asc).into_owned()
}

impl SortedRaw {
    /// Appends the next document's bytes to `buf`; false when none is left.
    pub(crate) fn next_into(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        if self.runs.is_empty() {
            let Some(i) = self.order.next() else {
                return Ok(false);
            };
            let row = raw_row(&self.arena, &self.ends, i as usize)
                .ok_or_else(|| Error::Internal("a sorted row past its batch".into()))?;
            buf.extend_from_slice(row);
            return Ok(true);
        }
        let Some(head) = self.heads.pop() else {
            return Ok(false);
        };
        buf.extend_from_slice(&head.row);
        // The next head of the same run takes the row's allocation.
        let mut spare = head.row;
        spare.clear();
        self.refill(head.run, spare)?;
        Ok(true)
    }

    /// Puts run `run`'s next document among the heads, if it has one, read into `row` (an
    /// emptied allocation to reuse).
    fn refill(&mut self, run: usize, mut row: Vec<u8>) -> Result<()> {
        let got = match self.runs.get_mut(run) {
            Some(RawRun::File(r)) => r.next_raw(&mut row)?,
            Some(RawRun::Memory) => match self.order.next() {
                Some(i) => match raw_row(&self.arena, &self.ends, i as usize) {
                    Some(b) => {
                        row.extend_from_slice(b);
                        true
                    }
                    None => false,
                },
                None => false,
            },
            None => false,
        };
        if got {
            let raw = RawDocument::from_bytes(&row)
                .map_err(|e| Error::Internal(format!("reading back a sorted run: {e}")))?;
            let (mut values, mut bytes) = (Vec::new(), None);
            if self.exact {
                let mut b = Vec::new();
                for (k, asc) in self.keys.iter() {
                    let from = b.len();
                    put_raw_key(raw, k, *asc, &mut b);
                    if !*asc {
                        invert(b.get_mut(from..).unwrap_or_default());
                    }
                }
                bytes = Some(b);
            } else {
                values = (self.keys.iter())
                    .map(|(k, asc)| raw_sort_value(raw, k, *asc))
                    .collect();
            }
            self.heads.push(Head {
                values,
                bytes,
                keys: Arc::clone(&self.keys),
                run,
                row,
            });
        }
        Ok(())
    }
}

/// A sorted run written to a temporary file.
struct Run {
    file: BufReader<File>,
    left: usize,
}

impl Run {
    /// Writes `batch`, already sorted, and empties it.
    fn write(batch: &mut Vec<Document>, memory: &SortMemory) -> Result<Run> {
        let file = match &memory.dir {
            Some(dir) => tempfile::tempfile_in(dir).or_else(|_| tempfile::tempfile())?,
            None => tempfile::tempfile()?,
        };
        let mut w = BufWriter::with_capacity(1 << 20, file);
        for d in batch.iter() {
            d.to_writer(&mut w)
                .map_err(|e| Error::Internal(format!("writing a sorted run: {e}")))?;
        }
        w.flush()?;
        let mut file = w.into_inner().map_err(|e| Error::Io(e.into_error()))?;
        file.seek(SeekFrom::Start(0))?;
        let left = batch.len();
        batch.clear();
        Ok(Run {
            file: BufReader::with_capacity(1 << 20, file),
            left,
        })
    }

    /// Writes the documents of a batch given as bytes, in `order`.
    fn write_raw(arena: &[u8], ends: &[usize], order: &[u32], memory: &SortMemory) -> Result<Run> {
        let file = match &memory.dir {
            Some(dir) => tempfile::tempfile_in(dir).or_else(|_| tempfile::tempfile())?,
            None => tempfile::tempfile()?,
        };
        let mut w = BufWriter::with_capacity(1 << 20, file);
        for &i in order {
            let row = raw_row(arena, ends, i as usize)
                .ok_or_else(|| Error::Internal("a sorted row past its batch".into()))?;
            w.write_all(row)?;
        }
        w.flush()?;
        let mut file = w.into_inner().map_err(|e| Error::Io(e.into_error()))?;
        file.seek(SeekFrom::Start(0))?;
        Ok(Run {
            file: BufReader::with_capacity(1 << 20, file),
            left: order.len(),
        })
    }

    /// Reads the run's next document's bytes into `row`; false when none is left.
    fn next_raw(&mut self, row: &mut Vec<u8>) -> Result<bool> {
        if self.left == 0 {
            return Ok(false);
        }
        self.left -= 1;
        let mut len = [0u8; 4];
        self.file.read_exact(&mut len)?;
        let n = u32::from_le_bytes(len) as usize;
        if n < 5 {
            return Err(Error::Internal(format!(
                "a sorted run holds a document of {n} bytes"
            )));
        }
        row.extend_from_slice(&len);
        let at = row.len();
        row.resize(at + n - 4, 0);
        self.file.read_exact(row.get_mut(at..).unwrap_or_default())?;
        Ok(true)
    }
}

enum Source {
    File(Run),
    Memory(std::vec::IntoIter<Document>),
}

impl Source {
    fn next(&mut self) -> Result<Option<Document>> {
        match self {
            Source::Memory(it) => Ok(it.next()),
            Source::File(run) if run.left == 0 => Ok(None),
            Source::File(run) => {
                run.left -= 1;
                Document::from_reader(&mut run.file)
                    .map(Some)
                    .map_err(|e| Error::Internal(format!("reading back a sorted run: {e}")))
            }
        }
    }
}

/// The smallest row of one run, ordered for a max-heap so that the smallest (then the
/// earliest run) comes out first.
struct Head<T> {
    values: Vec<Bson>,
    /// The key's normalised bytes, in place of `values`, when every head's key was encoded
    /// exactly.
    bytes: Option<Vec<u8>>,
    keys: Arc<[(String, bool)]>,
    run: usize,
    row: T,
}

impl Head<Document> {
    fn new(doc: Document, run: usize, keys: &Arc<[(String, bool)]>) -> Head<Document> {
        let values = keys
            .iter()
            .map(|(k, asc)| sort_value(&doc, k, *asc).into_owned())
            .collect();
        Head {
            values,
            bytes: None,
            keys: Arc::clone(keys),
            run,
            row: doc,
        }
    }
}

impl<T> Ord for Head<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        if let (Some(a), Some(b)) = (&self.bytes, &other.bytes) {
            return a.cmp(b).then(self.run.cmp(&other.run)).reverse();
        }
        let mut o = Ordering::Equal;
        for ((x, y), (_, asc)) in self.values.iter().zip(&other.values).zip(self.keys.iter()) {
            let c = cmp_bson(x, y);
            o = if *asc { c } else { c.reverse() };
            if o != Ordering::Equal {
                break;
            }
        }
        o.then(self.run.cmp(&other.run)).reverse()
    }
}

impl<T> PartialOrd for Head<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> PartialEq for Head<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl<T> Eq for Head<T> {}

/// About the bytes a document takes in memory: its map's entries, names and values.
pub fn approx_bytes(d: &Document) -> usize {
    fn value(v: &Bson) -> usize {
        match v {
            Bson::String(s) | Bson::Symbol(s) | Bson::JavaScriptCode(s) => 32 + s.len(),
            Bson::Document(d) => approx_bytes(d),
            Bson::Array(a) => 32 + a.iter().map(value).sum::<usize>(),
            Bson::Binary(b) => 48 + b.bytes.len(),
            _ => 24,
        }
    }
    64 + d
        .iter()
        .map(|(k, v)| 48 + k.len() + value(v))
        .sum::<usize>()
}

/// A row's normalised key: where its bytes lie in the arena, how many of them decide the
/// order (all, unless the encoding stopped at a value it cannot encode), and its first 24
/// bytes as integers, which settle most comparisons without a look into the arena.
struct Keyed {
    head: [u64; 3],
    start: u32,
    len: u32,
    trust: u32,
    /// Every value was encoded: equal bytes mean equal values.
    exact: bool,
    row: u32,
}

/// Rows' normalised keys, pushed one row at a time.
#[derive(Default)]
struct Keys {
    arena: Vec<u8>,
    keyed: Vec<Keyed>,
}

impl Keys {
    /// Encodes the sort values of `d` as the next row.
    fn push(&mut self, d: &Document, keys: &[(String, bool)]) {
        self.push_with(keys, |k, out| {
            keys.get(k)
                .is_some_and(|(path, asc)| put(&sort_value(d, path, *asc), out))
        });
    }

    /// Encodes the next row's key: `write(k, out)` appends key `k`'s normalised bytes (see
    /// [`put`]) and says whether they are exact; a descending key's bytes are inverted here.
    /// Returns false when a key was not encoded exactly: rows are then told apart by their
    /// bytes only up to it.
    fn push_with(
        &mut self,
        keys: &[(String, bool)],
        mut write: impl FnMut(usize, &mut Vec<u8>) -> bool,
    ) -> bool {
        let arena = &mut self.arena;
        let start = arena.len();
        let mut trust = None;
        for (k, (_, asc)) in keys.iter().enumerate() {
            let from = arena.len();
            let exact = write(k, arena);
            if !*asc {
                invert(arena.get_mut(from..).unwrap_or_default());
            }
            if !exact {
                // Later keys' bytes would order rows that this value does not tell apart.
                trust = Some(arena.len() - start);
                break;
            }
        }
        let len = arena.len() - start;
        let mut head = [0u8; 24];
        for (h, b) in head.iter_mut().zip(arena.get(start..).unwrap_or_default()) {
            *h = *b;
        }
        let word = |w: usize| {
            let mut x = [0u8; 8];
            for (o, b) in x.iter_mut().zip(head.iter().skip(w * 8)) {
                *o = *b;
            }
            u64::from_be_bytes(x)
        };
        let row = self.keyed.len() as u32;
        self.keyed.push(Keyed {
            head: [word(0), word(1), word(2)],
            start: start as u32,
            len: len as u32,
            trust: trust.unwrap_or(len) as u32,
            exact: trust.is_none(),
            row,
        });
        trust.is_none()
    }

    fn bytes(&self, x: &Keyed) -> &[u8] {
        self.arena
            .get(x.start as usize..(x.start + x.len) as usize)
            .unwrap_or_default()
    }

    /// The rows in sort order, documents given by `doc` (see [`Keys::order_by`]).
    fn order<'d>(self, keys: &[(String, bool)], doc: impl Fn(u32) -> Option<&'d Document>) -> Vec<u32> {
        self.order_by(keys, |i| match doc(i) {
            Some(d) => keys.iter().map(|(k, asc)| sort_value(d, k, *asc)).collect(),
            None => Vec::new(),
        })
    }

    /// The rows in sort order; `values` gives a row's sort values, read only where the bytes
    /// cannot decide.
    fn order_by<'d>(
        self,
        keys: &[(String, bool)],
        values: impl Fn(u32) -> Vec<Cow<'d, Bson>>,
    ) -> Vec<u32> {
        if self.keyed.iter().all(|x| x.exact) {
            return self.order_exact();
        }
        let mut keyed = self.keyed;
        let arena = self.arena;
        let bytes = |x: &Keyed| {
            arena
                .get(x.start as usize..(x.start + x.len) as usize)
                .unwrap_or_default()
        };
        keyed.sort_unstable_by(|a, b| {
            let trusted = a.trust.min(b.trust) as usize;
            let differ = a.head.iter().zip(&b.head).position(|(x, y)| x != y);
            let first_difference = if let Some(w) = differ {
                let (x, y) = (a.head.get(w).copied(), b.head.get(w).copied());
                let byte = (x.unwrap_or(0) ^ y.unwrap_or(0)).leading_zeros() / 8;
                if w * 8 + (byte as usize) < trusted {
                    return x.cmp(&y).then(a.row.cmp(&b.row));
                }
                Some(w * 8 + byte as usize)
            } else if a.len <= 24 && b.len <= 24 {
                // The whole keys are in the heads, zero-padded: equal heads, equal lengths.
                (a.len != b.len).then_some(a.len.min(b.len) as usize)
            } else {
                let (x, y) = (bytes(a), bytes(b));
                x.iter()
                    .zip(y)
                    .position(|(p, q)| p != q)
                    .or((x.len() != y.len()).then_some(x.len().min(y.len())))
            };
            match first_difference {
                Some(p) if p < trusted => {
                    let (x, y) = (bytes(a), bytes(b));
                    x.get(p).cmp(&y.get(p))
                }
                // Equal bytes that were all encoded: equal values.
                None if a.exact && b.exact => Ordering::Equal,
                _ => cmp_rows(&values(a.row), &values(b.row), keys),
            }
            .then(a.row.cmp(&b.row))
        });
        keyed.into_iter().map(|x| x.row).collect()
    }

    /// The order when every key was encoded in full: the heads and positions sorted as
    /// integers, then runs of equal heads whose keys go on past the head by the rest of their
    /// bytes.
    fn order_exact(&self) -> Vec<u32> {
        let mut heads: Vec<([u64; 3], u32)> = self.keyed.iter().map(|x| (x.head, x.row)).collect();
        heads.sort_unstable();
        let mut start = 0;
        while start < heads.len() {
            let Some(&(h, _)) = heads.get(start) else {
                break;
            };
            let len = heads
                .get(start..)
                .unwrap_or_default()
                .iter()
                .take_while(|(g, _)| *g == h)
                .count()
                .max(1);
            if let Some(run) = heads.get_mut(start..start + len) {
                let long = |r: u32| self.keyed.get(r as usize).is_some_and(|x| x.len > 24);
                if len > 1 && run.iter().any(|(_, r)| long(*r)) {
                    let rest = |r: u32| {
                        self.keyed
                            .get(r as usize)
                            .map_or(&[][..], |x| self.bytes(x).get(24..).unwrap_or_default())
                    };
                    run.sort_unstable_by(|(_, a), (_, b)| rest(*a).cmp(rest(*b)).then(a.cmp(b)));
                }
            }
            start += len;
        }
        heads.into_iter().map(|(_, r)| r).collect()
    }
}

/// Appends a value's normalised bytes: its type bracket, then its content, such that the bytes
/// of two values compare as MongoDB compares the values, and no value's bytes are a prefix of
/// another's. Returns false where it stopped after the type bracket, at a value it does not
/// encode exactly (Decimal128, integers beyond 2^53, code).
fn put(v: &Bson, out: &mut Vec<u8>) -> bool {
    out.push(type_rank(v) + 1);
    content(v, out)
}

pub(crate) fn put_str(s: &[u8], out: &mut Vec<u8>) {
    // Zero bytes escaped, then a terminator that sorts below every byte: a shorter string
    // sorts first, as in the byte order.
    for &c in s {
        out.push(c);
        if c == 0 {
            out.push(0xFF);
        }
    }
    out.extend_from_slice(&[0, 0]);
}

fn content(v: &Bson, out: &mut Vec<u8>) -> bool {
    match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) => {
            let f = as_f64(v).unwrap_or(f64::NAN);
            // Below 2^53 every integer converts exactly, so only equal numbers share a double.
            if !(f.is_nan() || f.abs() < norm::EXACT) {
                return false;
            }
            out.extend_from_slice(&ordered_f64(f).to_be_bytes());
        }
        Bson::String(s) | Bson::Symbol(s) => put_str(s.as_bytes(), out),
        Bson::Document(d) => {
            for (name, x) in d {
                // Element by element: type bracket, name, value; the shorter document first.
                out.push(type_rank(x) + 1);
                put_str(name.as_bytes(), out);
                if !content(x, out) {
                    return false;
                }
            }
            out.push(0);
        }
        Bson::Array(a) => {
            for x in a {
                if !put(x, out) {
                    return false;
                }
            }
            out.push(0);
        }
        Bson::Binary(b) => {
            out.extend_from_slice(&(b.bytes.len() as u32).to_be_bytes());
            out.push(u8::from(b.subtype));
            out.extend_from_slice(&b.bytes);
        }
        Bson::ObjectId(o) => out.extend_from_slice(&o.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::DateTime(d) => {
            out.extend_from_slice(&((d.timestamp_millis() as u64) ^ (1 << 63)).to_be_bytes())
        }
        Bson::Timestamp(t) => {
            out.extend_from_slice(&((u64::from(t.time) << 32) | u64::from(t.increment)).to_be_bytes())
        }
        Bson::RegularExpression(r) => {
            put_str(r.pattern.as_str().as_bytes(), out);
            put_str(r.options.as_str().as_bytes(), out);
        }
        Bson::MinKey | Bson::MaxKey | Bson::Null | Bson::Undefined => {}
        _ => return false,
    }
    true
}

fn cmp_rows(a: &[Cow<'_, Bson>], b: &[Cow<'_, Bson>], keys: &[(String, bool)]) -> Ordering {
    for ((x, y), (_, asc)) in a.iter().zip(b).zip(keys) {
        let o = cmp_bson(x, y);
        let o = if *asc { o } else { o.reverse() };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// A double's bits, ordered as MongoDB orders numbers: NaN below everything, `-0.0` equal to
/// `0.0`.
pub(crate) fn ordered_f64(f: f64) -> u64 {
    if f.is_nan() {
        return 0;
    }
    let bits = (if f == 0.0 { 0.0f64 } else { f }).to_bits();
    if bits >> 63 == 1 {
        !bits
    } else {
        bits | (1 << 63)
    }
}

/// The value a document sorts by at `path`: missing sorts as null; for arrays, the smallest
/// element ascending and the largest descending; an empty array sorts before null, as
/// `undefined` (MongoDB's rules). Borrowed unless the path meets an array.
pub(crate) fn sort_value<'a>(d: &'a Document, path: &str, asc: bool) -> Cow<'a, Bson> {
    // The common case: a path through documents to a value that is not an array.
    let mut cur = d;
    let mut parts = path.split('.').peekable();
    while let Some(p) = parts.next() {
        match (cur.get(p), parts.peek().is_some()) {
            (None, _) => return Cow::Owned(Bson::Null),
            (Some(Bson::Document(sub)), true) => cur = sub,
            (Some(Bson::Array(_)), _) => break,
            (Some(v), false) => return Cow::Borrowed(v),
            // A scalar with more path below it: nothing there.
            (Some(_), true) => return Cow::Owned(Bson::Null),
        }
    }
    let mut vals = Vec::new();
    collect_doc(d, path, &mut vals);
    let mut flat: Vec<&Bson> = Vec::new();
    for v in vals {
        match v {
            Bson::Array(a) if a.is_empty() => flat.push(&Bson::Undefined),
            Bson::Array(a) => flat.extend(a.iter()),
            other => flat.push(other),
        }
    }
    let pick = if asc {
        flat.into_iter().min_by(|a, b| cmp_bson(a, b))
    } else {
        flat.into_iter().max_by(|a, b| cmp_bson(a, b))
    };
    Cow::Owned(pick.cloned().unwrap_or(Bson::Null))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::query::options::parse_sort;
    use bson::oid::ObjectId;
    use bson::{doc, DateTime, Decimal128, Timestamp};
    use proptest::prelude::*;

    fn keys(d: Document) -> Vec<(String, bool)> {
        parse_sort(&d).unwrap()
    }

    /// The value at `path` by MongoDB's rules, read the long way.
    fn slow_value(d: &Document, path: &str, asc: bool) -> Cow<'static, Bson> {
        let mut vals = Vec::new();
        collect_doc(d, path, &mut vals);
        let flat = vals.into_iter().flat_map(|v| match v {
            Bson::Array(a) if a.is_empty() => vec![&Bson::Undefined],
            Bson::Array(a) => a.iter().collect(),
            other => vec![other],
        });
        let pick = if asc {
            flat.min_by(|a, b| cmp_bson(a, b))
        } else {
            flat.max_by(|a, b| cmp_bson(a, b))
        };
        Cow::Owned(pick.cloned().unwrap_or(Bson::Null))
    }

    /// The order the full comparison alone gives, stable.
    fn reference(docs: &[Document], keys: &[(String, bool)]) -> Vec<Document> {
        let mut v = docs.to_vec();
        v.sort_by(|a, b| {
            let ra: Vec<_> = keys.iter().map(|(k, asc)| slow_value(a, k, *asc)).collect();
            let rb: Vec<_> = keys.iter().map(|(k, asc)| slow_value(b, k, *asc)).collect();
            cmp_rows(&ra, &rb, keys)
        });
        v
    }

    #[test]
    fn top_sorted_keeps_the_first_n_in_order() {
        let docs = (0..5000i64).map(|i| Ok::<_, ()>(doc! {"a": (i * 7919) % 5000}));
        let top = top_sorted(docs, &keys(doc! {"a": -1}), 3).unwrap();
        assert_eq!(
            top,
            vec![
                doc! {"a": 4999i64},
                doc! {"a": 4998i64},
                doc! {"a": 4997i64}
            ]
        );
    }

    #[test]
    fn empty_arrays_sort_below_null() {
        let mut v = vec![doc! {"a": null}, doc! {"a": []}, doc! {"a": [3, 1]}];
        sort_docs(&mut v, &keys(doc! {"a": 1}));
        assert_eq!(
            v,
            vec![doc! {"a": []}, doc! {"a": null}, doc! {"a": [3, 1]}]
        );
    }

    #[test]
    fn sort_orders_missing_first_ascending() {
        let mut v = vec![doc! {"a": 2}, doc! {}, doc! {"a": 1}];
        sort_docs(&mut v, &keys(doc! {"a": 1}));
        assert_eq!(v, vec![doc! {}, doc! {"a": 1}, doc! {"a": 2}]);
        sort_docs(&mut v, &keys(doc! {"a": -1}));
        assert_eq!(v, vec![doc! {"a": 2}, doc! {"a": 1}, doc! {}]);
    }

    /// An empty array sorts before null and missing fields in both directions' order (last
    /// when descending).
    #[test]
    fn empty_array_sorts_before_missing() {
        let mut v = vec![doc! {"a": 1}, doc! {}, doc! {"a": []}, doc! {"a": [0, 7]}];
        sort_docs(&mut v, &keys(doc! {"a": 1}));
        assert_eq!(
            v,
            vec![doc! {"a": []}, doc! {}, doc! {"a": [0, 7]}, doc! {"a": 1}]
        );
        sort_docs(&mut v, &keys(doc! {"a": -1}));
        assert_eq!(
            v,
            vec![doc! {"a": [0, 7]}, doc! {"a": 1}, doc! {}, doc! {"a": []}]
        );
    }

    #[test]
    fn prefixes_that_cannot_decide_fall_back_to_the_full_order() {
        let big = 1i64 << 60;
        let mut v = vec![
            doc! {"a": big + 1},
            doc! {"a": big as f64},
            doc! {"a": big},
            doc! {"a": "abcdefghZ"},
            doc! {"a": "abcdefghA"},
            doc! {"a": "ab\u{0}"},
            doc! {"a": "ab"},
            doc! {"a": -0.0},
            doc! {"a": 0},
            doc! {"a": f64::NAN},
            doc! {"a": Decimal128::from_bytes([0; 16])},
        ];
        for k in [doc! {"a": 1}, doc! {"a": -1}] {
            let want = reference(&v, &keys(k.clone()));
            sort_docs(&mut v, &keys(k));
            assert_eq!(format!("{v:?}"), format!("{want:?}"));
        }
    }

    pub(crate) fn value() -> impl Strategy<Value = Bson> {
        prop_oneof![
            Just(Bson::Null),
            any::<i32>().prop_map(|i| Bson::Int32(i % 5)),
            any::<i64>().prop_map(|i| Bson::Int64(if i % 3 == 0 { i } else { i % 7 })),
            prop_oneof![
                any::<f64>(),
                Just(f64::NAN),
                Just(-0.0),
                Just(2.5),
                Just(9_007_199_254_740_993.0)
            ]
            .prop_map(Bson::Double),
            "[ab\\x00]{0,10}".prop_map(Bson::String),
            any::<i64>().prop_map(|t| Bson::DateTime(DateTime::from_millis(t % 1000))),
            any::<bool>().prop_map(Bson::Boolean),
            (0u32..3, 0u32..3).prop_map(|(time, increment)| Bson::Timestamp(Timestamp {
                time,
                increment
            })),
            any::<[u8; 12]>().prop_map(|b| Bson::ObjectId(ObjectId::from_bytes(b))),
            Just(Bson::MinKey),
            Just(Bson::MaxKey),
            prop::collection::vec(0i32..3, 0..3)
                .prop_map(|a| Bson::Array(a.into_iter().map(Bson::Int32).collect())),
            (0i32..3).prop_map(|x| Bson::Document(doc! {"x": x})),
            ("[ab]{0,2}", 0i64..3).prop_map(|(n, x)| {
                let mut d = doc! {"x": x};
                if !n.is_empty() {
                    d.insert(n, vec![Bson::Int64(x), Bson::String("a".into())]);
                }
                Bson::Document(d)
            }),
            prop::collection::vec(0u8..3, 0..3).prop_map(|bytes| Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes
            })),
            ("[ab]{0,2}", "[im]{0,1}").prop_map(|(p, o)| Bson::RegularExpression(
                bson::Regex {
                    pattern: p.try_into().unwrap(),
                    options: o.try_into().unwrap(),
                }
            )),
            Just(Bson::Decimal128(Decimal128::from_bytes([0; 16]))),
        ]
    }

    #[test]
    fn sorts_past_the_memory_limit_through_runs_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let docs: Vec<Document> = (0..3000i64)
            .map(|i| doc! {"k": (i * 7919) % 1000, "i": i, "pad": "x".repeat(50)})
            .collect();
        let k = keys(doc! {"k": -1});
        let want = reference(&docs, &k);
        for limit in [1usize, 10_000, 200_000, usize::MAX] {
            let memory = SortMemory {
                limit,
                dir: Some(dir.path().to_path_buf()),
            };
            let (sorted, spilled) =
                sort_within(docs.clone().into_iter().map(Ok), &k, &memory).unwrap();
            let got: Vec<Document> = sorted.collect::<Result<_>>().unwrap();
            assert_eq!(got, want, "limit {limit}");
            assert_eq!(spilled, limit < 1_000_000, "limit {limit}");
        }
        // Nothing is left behind in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_error_in_the_input_ends_the_sort() {
        let input = vec![Ok(doc! {"k": 1}), Err(Error::BadValue("x".into()))];
        let k = keys(doc! {"k": 1});
        assert!(sort_within(input.into_iter(), &k, &SortMemory::default()).is_err());
    }

    proptest! {
        /// A top-level field read from a document's bytes gives the bytes of its sort value,
        /// and is exact where that is, for every kind the walk takes itself.
        #[test]
        fn raw_scalars_write_the_bytes_of_their_sort_values(
            a in value(),
            b in value(),
            asc in any::<bool>(),
        ) {
            let d = doc! {"x": b.clone(), "a": a, "z": [b]};
            let mut bytes = Vec::new();
            d.to_writer(&mut bytes).unwrap();
            let raw = RawDocument::from_bytes(&bytes).unwrap();
            for path in ["a", "x", "missing"] {
                let mut fast = Vec::new();
                if let Some(exact) = put_raw_scalar(&bytes, path, &mut fast) {
                    let mut slow = Vec::new();
                    prop_assert_eq!(exact, put(&raw_sort_value(raw, path, asc), &mut slow));
                    if exact {
                        prop_assert_eq!(fast, slow, "{}", path);
                    }
                }
            }
            // Arrays and dotted paths are left to the value.
            prop_assert!(put_raw_scalar(&bytes, "z", &mut Vec::new()).is_none());
            prop_assert!(put_raw_scalar(&bytes, "a.b", &mut Vec::new()).is_none());
        }
    }

    proptest! {
        /// A typed column's value written from its type and bits gives the bytes the value
        /// gives, and is exact where it is.
        #[test]
        fn typed_values_write_the_bytes_their_values_write(
            x in any::<i64>(),
            f in prop_oneof![any::<f64>(), Just(f64::NAN), Just(-0.0), Just(f64::INFINITY)],
            small in -1i64 << 54..1i64 << 54,
        ) {
            for v in [
                Bson::Int32(x as i32),
                Bson::Int64(x),
                Bson::Int64(small),
                Bson::Double(f),
                Bson::DateTime(bson::DateTime::from_millis(x)),
            ] {
                let col = crate::query::columns::Col::from_bson(vec![Some(v.clone())]);
                let typed = col.typed_bits(0).unwrap();
                let (mut a, mut b) = (Vec::new(), Vec::new());
                prop_assert_eq!(put_typed(typed, &mut a), put_value(&v, &mut b), "{:?}", v);
                prop_assert_eq!(a, b, "{:?}", v);
            }
        }
    }

    proptest! {
        /// Rows offered to several keepers, each barred now and then by another's `n`th (as
        /// the threads of a top are), then merged, give the first `n` one keeper of all the
        /// rows gives, ties in place order.
        #[test]
        fn keepers_barred_by_each_other_and_merged_keep_the_first_n(
            rows in prop::collection::vec((0i32..6, any::<bool>(), 0usize..3, 0u8..4), 0..400),
            n in 0usize..60,
            from in 0usize..70,
        ) {
            let keys = vec![("a".to_string(), false), ("b".to_string(), true)];
            let write = |(a, b): (i32, bool)| move |k: usize, out: &mut Vec<u8>| match k {
                0 => put_value(&Bson::Int32(a), out),
                _ => put_value(&Bson::Boolean(b), out),
            };
            let mut one = TopKeys::new(n);
            let mut parts = [TopKeys::new(n), TopKeys::new(n), TopKeys::new(n)];
            for (i, &(a, b, part, bar)) in rows.iter().enumerate() {
                let place = (i / 7, (i % 7) as u32);
                prop_assert!(one.offer(&keys, place, write((a, b))));
                let [p0, p1, p2] = &mut parts;
                let (mine, others) = match part {
                    0 => (p0, [p1, p2]),
                    1 => (p1, [p0, p2]),
                    _ => (p2, [p0, p1]),
                };
                prop_assert!(mine.offer(&keys, place, write((a, b))));
                if bar == 0 {
                    mine.cut();
                    for o in others {
                        if let Some(t) = mine.nth() {
                            o.bar(&t);
                        }
                    }
                }
            }
            let [mut merged, p1, p2] = parts;
            prop_assert!(merged.absorb(&p1));
            prop_assert!(merged.absorb(&p2));
            let all = one.finish_from(0);
            prop_assert_eq!(all.len(), n.min(rows.len()));
            prop_assert_eq!(merged.finish_from(from), all.get(from..).unwrap_or_default().to_vec());
        }

        /// The prefix never changes the order the full comparison gives, ties included.
        #[test]
        fn same_order_as_the_full_comparison(
            rows in prop::collection::vec((value(), value(), value(), 0u8..3), 0..60),
            dirs in (any::<bool>(), any::<bool>(), any::<bool>()),
            nkeys in 1usize..4,
            spill in any::<bool>(),
        ) {
            let docs: Vec<Document> = rows
                .into_iter()
                .enumerate()
                .map(|(i, (a, b, c, shape))| match shape {
                    0 => doc! {"a": a, "b": {"c": b}, "d": c, "i": i as i32},
                    1 => doc! {"a": a, "i": i as i32},
                    _ => doc! {"b": [{"c": b}], "d": c, "i": i as i32},
                })
                .collect();
            let all = [("a", dirs.0), ("b.c", dirs.1), ("d", dirs.2)];
            let k: Vec<(String, bool)> =
                all.iter().take(nkeys).map(|(p, asc)| (p.to_string(), *asc)).collect();
            let want = reference(&docs, &k);
            // As bytes, within a memory limit a few rows pass (runs on disk), or in memory.
            let memory = SortMemory {
                limit: if spill { 600 } else { usize::MAX },
                dir: None,
            };
            let mut input = docs.iter();
            let (mut raw, spilled) = sort_raw_within(
                |buf| Ok(input.next().map(|d| d.to_writer(buf).unwrap()).is_some()),
                &k,
                &memory,
            )
            .unwrap();
            let mut buf = Vec::new();
            let mut bytes_sorted = Vec::new();
            while raw.next_into(&mut buf).unwrap() {
                bytes_sorted.push(Document::from_reader(buf.as_slice()).unwrap());
                buf.clear();
            }
            prop_assert!(!spilled || spill);
            prop_assert_eq!(format!("{bytes_sorted:?}"), format!("{want:?}"));
            let mut got = docs;
            sort_docs(&mut got, &k);
            prop_assert_eq!(format!("{got:?}"), format!("{want:?}"));
        }
    }
}
