//! An open bucket: measurements kept as raw BSON rows or split into typed columns.

use super::column::{rank_of, to_bson, Data, RunningStats};
use super::control::Schema;
use super::rows::RowRun;
use crate::bucket::{BucketData, Column, EncodedBucket, Shape, META_SLOT};
use crate::codec::{encode_column, encode_column_typed, Typed};
use crate::ingest::Prepared;
use bson::oid::ObjectId;
use bson::raw::{RawBsonRef, RawDocument};
use bson::spec::ElementType;
use bson::{Bson, DateTime, Document};
use std::sync::Arc;

pub use crate::bucket::{IDX_COLUMN, META_COLUMN, SEQ_COLUMN};
pub use crate::doc::{is_hidden, is_hidden_name};

/// Exact identity of two values: same types, same field order (unlike `==` on documents,
/// which ignores order).
pub fn identical(a: &Bson, b: &Bson) -> bool {
    match (a, b) {
        (Bson::Document(x), Bson::Document(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
        }
        (Bson::Array(x), Bson::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| identical(p, q))
        }
        (Bson::Double(x), Bson::Double(y)) => x.to_bits() == y.to_bits(),
        _ => a == b,
    }
}

/// Why a measurement cannot join a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The bucket holds the maximum count.
    Count,
    /// The measurement would take the bucket past its size limit.
    Size,
    /// A field would change type class.
    Schema,
}

/// The limits that decide whether a measurement fits.
#[derive(Debug, Clone, Copy)]
pub struct FitLimits {
    /// Maximum measurements.
    pub max_count: u32,
    /// Maximum bytes of measurement data.
    pub max_size: usize,
    /// Below this count a bucket may exceed `max_size` up to `large_max_size`.
    pub min_count: u32,
    /// Hard cap for large measurements.
    pub large_max_size: usize,
}

impl FitLimits {
    /// The limits a database's options set.
    pub fn of(o: &crate::options::DbOptions) -> FitLimits {
        FitLimits {
            max_count: o.limits.max_count,
            max_size: o.limits.max_size,
            min_count: o.limits.min_count,
            large_max_size: o.limits.large_max_size,
        }
    }
}

#[derive(Clone)]
struct ColumnBuilder {
    name: String,
    data: Data,
    /// Row of each value; `None` while value `i` is at row `i` (no gaps so far).
    rows: Option<Vec<u32>>,
    /// Type class of the column's values (numbers share one).
    class: u8,
    /// Structure of document and array values, for schema-change detection below top level.
    schema: Option<Schema>,
}

impl ColumnBuilder {
    fn push(&mut self, row: u32, v: RawBsonRef<'_>) {
        if self.rows.is_none() && self.data.len() != row as usize {
            self.rows = Some((0..self.data.len() as u32).collect());
        }
        if let Some(r) = &mut self.rows {
            r.push(row);
        }
        if matches!(v, RawBsonRef::Document(_) | RawBsonRef::Array(_)) {
            let b = to_bson(v);
            match &mut self.schema {
                Some(s) => s.absorb(&b),
                None => self.schema = Some(Schema::of(&b)),
            }
        }
        self.data.push(v);
    }

    fn accepts(&self, v: RawBsonRef<'_>, t: ElementType) -> bool {
        if rank_of(t) != self.class {
            return false;
        }
        match (&self.schema, v) {
            (Some(s), RawBsonRef::Document(_) | RawBsonRef::Array(_)) => s.accepts(&to_bson(v)),
            _ => true,
        }
    }

    fn values(&self, rows: usize) -> Vec<Option<Bson>> {
        let mut out = vec![None; rows];
        match &self.rows {
            None => {
                for (i, slot) in out.iter_mut().enumerate().take(self.data.len()) {
                    *slot = Some(self.data.get(i));
                }
            }
            Some(r) => {
                for (i, &row) in r.iter().enumerate() {
                    if let Some(slot) = out.get_mut(row as usize) {
                        *slot = Some(self.data.get(i));
                    }
                }
            }
        }
        out
    }
}

/// Typed columns of the rows split so far, with the field order of each row.
#[derive(Clone, Default)]
struct Columns {
    columns: Vec<ColumnBuilder>,
    shapes: Vec<Shape>,
    row_shapes: Vec<u32>,
    raw_metas: Vec<Option<Bson>>,
    /// Shape of the last row taken.
    scratch: Shape,
    /// Field names of the last row taken, each followed by a NUL: a row with the same names in
    /// the same order maps to the columns of `scratch` without comparing each name with the
    /// column names (which live in as many separate allocations).
    last_names: Vec<u8>,
}

/// What splitting a row into columns needs to know about its bucket.
struct RowContext<'a> {
    meta_field: Option<&'a str>,
    /// The bucket's meta value as an element type and value bytes.
    meta_raw: Option<&'a (u8, Vec<u8>)>,
}

impl Columns {
    fn column_index(&self, name: &str, hint: usize) -> Option<usize> {
        if let Some(c) = self.columns.get(hint) {
            if c.name == name {
                return Some(hint);
            }
        }
        self.columns.iter().position(|c| c.name == name)
    }

    /// Splits a row into the columns, unless a field would change type class; a refused row
    /// leaves the columns untouched. One pass over the raw document: elements are staged while
    /// the schema is checked, then appended.
    fn push(&mut self, doc: &RawDocument, row: u32, cx: &RowContext<'_>) -> Result<(), Refusal> {
        const NEW: u32 = u32::MAX - 1;
        let mut staged: Vec<(u32, &str, RawBsonRef<'_>, ElementType)> = Vec::with_capacity(16);
        let mut hint = 0;
        // While the names match the last row's, `pos` is the offset in `last_names`.
        let mut pos = Some(0usize);
        for el in doc.iter_elements().flatten() {
            let Ok(v) = el.value() else { continue };
            let k = el.key().as_str();
            let t = el.element_type();
            let known = pos.and_then(|p| {
                let end = p + k.len();
                let name = self.last_names.get(p..end)?;
                let slot = *self.scratch.get(staged.len())?;
                (name == k.as_bytes() && self.last_names.get(end) == Some(&0))
                    .then_some((slot, end + 1))
            });
            let slot = match known {
                Some((slot, next)) => {
                    pos = Some(next);
                    slot
                }
                None => {
                    pos = None;
                    if cx.meta_field == Some(k) {
                        META_SLOT
                    } else {
                        self.column_index(k, hint).map_or(NEW, |i| i as u32)
                    }
                }
            };
            if slot != META_SLOT && slot != NEW {
                let i = slot as usize;
                hint = i + 1;
                if !self.columns.get(i).is_none_or(|c| c.accepts(v, t)) {
                    return Err(Refusal::Schema);
                }
            }
            staged.push((slot, k, v, t));
        }
        let same_names = pos == Some(self.last_names.len()) && staged.len() == self.scratch.len();
        if !same_names {
            self.last_names.clear();
        }
        let mut shape = std::mem::take(&mut self.scratch);
        shape.clear();
        for (slot, k, v, t) in staged {
            if !same_names {
                self.last_names.extend_from_slice(k.as_bytes());
                self.last_names.push(0);
            }
            if slot == META_SLOT {
                shape.push(META_SLOT);
                self.note_meta(row, v, cx);
                continue;
            }
            let i = if slot == NEW {
                self.columns.push(ColumnBuilder {
                    name: k.to_string(),
                    data: Data::for_value(v),
                    rows: None,
                    class: rank_of(t),
                    schema: None,
                });
                self.columns.len() - 1
            } else {
                slot as usize
            };
            shape.push(i as u32);
            if let Some(c) = self.columns.get_mut(i) {
                c.push(row, v);
            }
        }
        let last = self.row_shapes.last().copied().unwrap_or(0) as usize;
        let shape_id = if self.shapes.get(last) == Some(&shape) {
            last
        } else if let Some(p) = self.shapes.iter().position(|s| *s == shape) {
            p
        } else {
            self.shapes.push(shape.clone());
            self.shapes.len() - 1
        };
        if shape_id != 0 && self.row_shapes.is_empty() {
            self.row_shapes.resize(row as usize, 0);
        }
        if !self.row_shapes.is_empty() {
            self.row_shapes.push(shape_id as u32);
        }
        self.scratch = shape;
        Ok(())
    }

    /// Records a row's meta value where it is not byte-identical to the bucket's (byte
    /// equality of type and value is [`identical`]: same types, same field order, same bits).
    fn note_meta(&mut self, row: u32, v: RawBsonRef<'_>, cx: &RowContext<'_>) {
        let same = cx
            .meta_raw
            .is_some_and(|(t, bytes)| *t == v.element_type() as u8 && has_value_bytes(v, bytes));
        if !same {
            if self.raw_metas.len() < row as usize {
                self.raw_metas.resize(row as usize, None);
            }
            self.raw_metas.push(Some(to_bson(v)));
        }
    }
}

/// The byte layout that rows waiting unsplit share when they carry the same headers and only
/// fixed-width values outside the meta field (the meta value being the bucket's, byte for
/// byte): each value sits at the same offset in every row, so only the values are kept (about
/// a third of a row of int64 fields named like `usage_user`), and splitting them needs no walk
/// of names.
#[derive(Debug, Clone)]
struct FixedRows {
    /// Length of every such row as a document.
    doc_len: usize,
    /// (offset in the document, length) of each value outside the meta field, in order.
    values: Vec<(usize, usize)>,
    /// Bytes kept per row: the values' lengths added up.
    width: usize,
}

impl FixedRows {
    /// The layout of `doc`, whose meta element (if any) lies at `meta`; `None` when a value
    /// outside it is not of fixed width.
    fn of(doc: &[u8], meta: Option<(usize, usize)>) -> Option<FixedRows> {
        let mut values = Vec::new();
        let mut elements = crate::doc::elements::Elements::new(doc);
        for e in elements.by_ref() {
            if meta.is_some_and(|(start, _)| start == e.start) {
                continue;
            }
            if !fixed_width(e.kind) {
                return None;
            }
            values.push((e.start + e.name.len() + 2, e.value.len()));
        }
        if !elements.finished() || values.is_empty() {
            return None;
        }
        let width = values.iter().map(|v| v.1).sum();
        Some(FixedRows {
            doc_len: doc.len(),
            values,
            width,
        })
    }
}

/// True for the element types rows may wait unsplit with whose values have one length.
fn fixed_width(kind: u8) -> bool {
    matches!(kind, 0x01 | 0x07 | 0x08 | 0x09 | 0x0A | 0x10 | 0x12)
}

/// Columns of rows that wait unsplit: documents back to back in `pending`, each without the
/// meta field and all with the fields of `signature` (`{ type | name | 0 }` per field, meta
/// included where it stood). Written for the one shape such rows share, so no name is looked
/// up and every value goes straight into its typed vector.
fn split_uniform(
    signature: &[u8],
    meta_field: Option<&str>,
    pending: &RowRun,
    fixed: Option<&FixedRows>,
    rows: usize,
) -> Columns {
    let mut cols = uniform_columns(signature, meta_field, rows);
    push_uniform(&mut cols, pending, fixed, 0);
    cols
}

/// Empty columns for rows of `signature` (see [`split_uniform`]), with room for `rows`.
fn uniform_columns(signature: &[u8], meta_field: Option<&str>, rows: usize) -> Columns {
    let mut cols = Columns::default();
    let mut kinds = Vec::new();
    let mut rest = signature;
    while let Some((&kind, tail)) = rest.split_first() {
        let Some(n) = tail.iter().position(|&b| b == 0) else {
            break;
        };
        let name = tail.get(..n).unwrap_or_default();
        rest = tail.get(n + 1..).unwrap_or_default();
        cols.last_names.extend_from_slice(name);
        cols.last_names.push(0);
        if meta_field.map(str::as_bytes) == Some(name) {
            cols.scratch.push(META_SLOT);
            continue;
        }
        cols.scratch.push(cols.columns.len() as u32);
        kinds.push(kind);
        cols.columns.push(ColumnBuilder {
            name: String::from_utf8_lossy(name).into_owned(),
            data: Data::for_kind(kind, rows),
            rows: None,
            class: ElementType::from(kind).map_or(u8::MAX, rank_of),
            schema: None,
        });
    }
    cols.shapes.push(cols.scratch.clone());
    cols
}

/// Appends the values of the pending rows from row `skip` on to columns made by
/// [`uniform_columns`] for their signature.
fn push_uniform(cols: &mut Columns, pending: &RowRun, fixed: Option<&FixedRows>, skip: usize) {
    if let Some(f) = fixed {
        for row in pending.fixed_rows(f.width).skip(skip) {
            let mut at = 0;
            for (c, &(_, len)) in cols.columns.iter_mut().zip(&f.values) {
                let value = row.get(at..at + len).unwrap_or_default();
                let pushed = c.data.push_raw(c.data.kind(), value);
                debug_assert!(pushed, "pending row does not match its layout");
                at += len;
            }
        }
        return;
    }
    for doc in pending.docs().skip(skip) {
        let mut columns = cols.columns.iter_mut();
        for e in crate::doc::elements::Elements::new(doc) {
            // The rows were checked against the signature as they arrived.
            if let Some(c) = columns.next() {
                let pushed = c.data.push_raw(e.kind, e.value);
                debug_assert!(pushed, "pending row does not match its signature");
            }
        }
    }
}

/// True when `bytes` are the bytes of `v` as they follow its name inside a document; the
/// common types are compared in place, without encoding `v` again.
fn has_value_bytes(v: RawBsonRef<'_>, bytes: &[u8]) -> bool {
    match v {
        RawBsonRef::Document(d) => d.as_bytes() == bytes,
        RawBsonRef::Array(a) => a.as_bytes() == bytes,
        RawBsonRef::String(s) => {
            let (len, rest) = bytes.split_at_checked(4).unwrap_or_default();
            len == ((s.len() + 1) as i32).to_le_bytes()
                && rest.split_last() == Some((&0, s.as_bytes()))
        }
        RawBsonRef::Int32(x) => bytes == x.to_le_bytes(),
        RawBsonRef::Int64(x) => bytes == x.to_le_bytes(),
        RawBsonRef::Double(x) => bytes == x.to_le_bytes(),
        RawBsonRef::DateTime(t) => bytes == t.timestamp_millis().to_le_bytes(),
        RawBsonRef::ObjectId(o) => bytes == o.bytes(),
        RawBsonRef::Boolean(b) => bytes == [u8::from(b)],
        other => value_bytes(other) == bytes,
    }
}

/// The bytes of a value as they follow its name inside a document.
fn value_bytes(v: RawBsonRef<'_>) -> Vec<u8> {
    let mut d = Document::new();
    d.insert("", to_bson(v));
    // After the 4-byte length, the type byte and the empty name; before the terminator.
    d.to_vec()
        .ok()
        .and_then(|b| b.get(6..b.len().saturating_sub(1)).map(<[u8]>::to_vec))
        .unwrap_or_default()
}

/// Byte equality of two short slices (field headers) without a library call each: a row has
/// a dozen of them to compare.
#[inline]
fn same_short(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    let words = x.by_ref().zip(y.by_ref()).all(|(p, q)| {
        u64::from_ne_bytes(p.try_into().unwrap_or_default())
            == u64::from_ne_bytes(q.try_into().unwrap_or_default())
    });
    words && x.remainder().iter().zip(y.remainder()).all(|(p, q)| p == q)
}

/// One column of an [`OpenCopy`] held as `Bson` values.
#[derive(Debug, Clone)]
struct CopiedColumn {
    name: String,
    data: Data,
    rows: Option<Vec<u32>>,
}

impl CopiedColumn {
    /// A column from one value per row (`None` where a row lacks the field).
    fn of_values(name: &str, values: Vec<Option<Bson>>) -> CopiedColumn {
        let rows = values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.is_some())
            .map(|(i, _)| i as u32)
            .collect();
        CopiedColumn {
            name: name.to_string(),
            data: Data::Any(values.into_iter().flatten().collect()),
            rows: Some(rows),
        }
    }
}

/// An open bucket's contents as a read sees them ([`BucketBuilder::copy_for_read`]).
#[derive(Clone)]
pub struct OpenCopy {
    /// Statistics, meta value, shapes and counts; `columns` is empty.
    pub head: Arc<BucketData>,
    /// The columns the shapes number, shared with the bucket's later reads.
    cols: Arc<Columns>,
    /// The columns after those: the rows' own meta values, where some row has one (or every
    /// column, for a copy made from `Bson` values).
    extra: Vec<CopiedColumn>,
}

/// One column of an [`OpenCopy`], borrowed.
#[derive(Clone, Copy)]
pub struct ColumnRef<'a> {
    /// The values present, in row order.
    pub data: &'a Data,
    /// The row of each value, ascending; `None` when value `i` lies at row `i` (rows past the
    /// last value lack the field).
    pub rows: Option<&'a [u32]>,
}

impl OpenCopy {
    /// The same contents from a bucket whose values are `Bson` already (the log's
    /// bookkeeping columns left out).
    pub fn of_values(mut b: BucketData) -> OpenCopy {
        let extra = std::mem::take(&mut b.columns)
            .into_iter()
            .filter(|c| c.name != SEQ_COLUMN && c.name != IDX_COLUMN)
            .map(|c| CopiedColumn::of_values(&c.name, c.values))
            .collect();
        OpenCopy {
            head: Arc::new(b),
            cols: Arc::new(Columns::default()),
            extra,
        }
    }

    /// The column names in stored order (what shapes number).
    pub fn names(&self) -> Vec<&str> {
        let typed = self.cols.columns.iter().map(|c| c.name.as_str());
        typed
            .chain(self.extra.iter().map(|c| c.name.as_str()))
            .collect()
    }

    /// The column `name`, if the bucket has one.
    pub fn column(&self, name: &str) -> Option<ColumnRef<'_>> {
        if let Some(c) = self.cols.columns.iter().find(|c| c.name == name) {
            return Some(ColumnRef {
                data: &c.data,
                rows: c.rows.as_deref(),
            });
        }
        self.extra.iter().find(|c| c.name == name).map(|c| ColumnRef {
            data: &c.data,
            rows: c.rows.as_deref(),
        })
    }
}

/// Pending rows split into columns by reads ([`BucketBuilder::copy_for_read`]).
struct ReadSplit {
    /// How many of the pending rows `cols` holds.
    rows: usize,
    /// Shared with the copies of reads still running; extended in place when none is.
    cols: Arc<Columns>,
    /// Each column's bounds and sum, brought up to date with the rows split.
    stats: Vec<RunningStats>,
    /// The statistics a read built, and for how many rows: refreshed in place for a read
    /// after more rows arrived (building them anew was most of such a read).
    head: Option<(Arc<BucketData>, usize)>,
}

/// One open bucket.
///
/// Series arrive interleaved (a batch holds one row of each of a thousand hosts), so splitting
/// each row into typed columns as it arrives touches a cache line per column of a different
/// bucket each time. A bucket whose rows all carry the same fields with the same types, only
/// scalars outside the meta field, and the bucket's meta value byte for byte, instead keeps
/// them as the BSON documents they arrived in, less the meta element (*pending*): taking one is
/// a walk of its bytes, a comparison with the first row's signature and one append. The rows are split into columns
/// when the bucket is read or closed, a bucket at a time, or as soon as a row breaks the
/// pattern, after which the bucket splits every row on arrival.
pub struct BucketBuilder {
    pub(crate) id: ObjectId,
    /// Rounded start, milliseconds since the epoch (`control.min.<time>`).
    pub(crate) start_ms: i64,
    pub(crate) meta: Option<Bson>,
    /// `meta` as an element type and value bytes: rows compare against these without building
    /// a `Bson` value.
    meta_raw: Option<(u8, Vec<u8>)>,
    /// The first row's [`Prepared::meta_id`], once its meta was found to be the bucket's byte
    /// for byte: a later row with the same nonzero id carries it too.
    meta_id: u64,
    /// The first pending row's [`Prepared::shape`]: a later row with the same nonzero id has
    /// the pending rows' signature without its elements being walked.
    shape: u64,
    pub(crate) count: u32,
    /// Measurement bytes (BSON size without the meta field) counted toward the size limit.
    pub(crate) size: usize,
    /// BSON size of the measurements as inserted (meta field and `_id` included).
    pub(crate) bson_bytes: u64,
    pub(crate) max_time_ms: i64,
    pub(crate) min_seq: u64,
    pub(crate) last_touch: u64,
    /// The series' insert count when this bucket last took a measurement.
    pub(crate) last_series_insert: u64,
    pub(crate) kept_open_for_large: bool,
    last_batch: u64,
    time_field: String,
    meta_field: Option<String>,
    cols: Columns,
    /// True while every row is in `pending`.
    deferring: bool,
    /// The rows not split yet, as BSON documents back to back, each without its meta element.
    pending: RowRun,
    /// `{ type: u8 | name | 0 }` per element of each pending row.
    signature: Vec<u8>,
    /// When every pending row has only fixed-width values outside the meta field, they share
    /// one byte layout, and `pending` holds only their values (see [`FixedRows`]).
    fixed: Option<FixedRows>,
    seqs: Vec<u64>,
    idxs: Vec<u32>,
    /// The pending rows as reads split them, kept so that the next read splits only the rows
    /// that arrived since (and closing the bucket none). Reads hold the catalog shared, hence
    /// the lock.
    read_split: parking_lot::Mutex<Option<ReadSplit>>,
}

impl BucketBuilder {
    /// An empty bucket starting at `start_ms`.
    pub fn new(
        id: ObjectId,
        start_ms: i64,
        meta: Option<Bson>,
        time_field: &str,
        meta_field: Option<&str>,
    ) -> BucketBuilder {
        let meta_raw = meta.as_ref().map(|m| {
            let mut d = Document::new();
            d.insert("", m.clone());
            let bytes = d.to_vec().unwrap_or_default();
            // The value's bytes sit after the 4-byte length, type byte and empty name.
            let value = bytes
                .get(6..bytes.len().saturating_sub(1))
                .unwrap_or_default();
            (m.element_type() as u8, value.to_vec())
        });
        BucketBuilder {
            id,
            start_ms,
            meta,
            meta_raw,
            meta_id: 0,
            shape: 0,
            count: 0,
            size: 0,
            bson_bytes: 0,
            max_time_ms: i64::MIN,
            min_seq: u64::MAX,
            last_touch: 0,
            last_series_insert: 0,
            kept_open_for_large: false,
            last_batch: 0,
            time_field: time_field.to_string(),
            meta_field: meta_field.map(str::to_string),
            cols: Columns::default(),
            deferring: true,
            pending: RowRun::default(),
            signature: Vec::new(),
            fixed: None,
            seqs: Vec::new(),
            idxs: Vec::new(),
            read_split: parking_lot::Mutex::new(None),
        }
    }

    /// The same bucket, splitting every row on arrival (tests compare the two paths).
    #[cfg(test)]
    pub(crate) fn splitting_every_row(mut self) -> BucketBuilder {
        self.deferring = false;
        self
    }

    pub(crate) fn last_batch(&self) -> u64 {
        self.last_batch
    }

    pub(crate) fn set_last_batch(&mut self, b: u64) {
        self.last_batch = b;
    }

    /// True when some row's meta differs byte for byte from the bucket's meta value (pending
    /// rows never do).
    pub fn meta_varies(&self) -> bool {
        !self.cols.raw_metas.is_empty()
    }

    /// Approximate memory held, for the catalog's memory limit. Twice the measurements' BSON
    /// size covers the rows (kept as BSON, as values alone, or split into typed vectors) and
    /// the typed copy a read keeps of rows waiting unsplit: a number or date takes eight bytes
    /// there, less than its BSON element; a short string takes a few more than its element.
    pub fn memory(&self) -> usize {
        self.size * 2 + 1024
    }

    /// Bytes of rows waiting unsplit.
    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// Makes room for `bytes` of rows waiting unsplit.
    pub fn reserve_pending(&mut self, bytes: usize) {
        if self.deferring {
            self.pending.reserve(bytes);
        }
    }

    /// True if the bucket's fixed window `[start, start + span)` contains `t_ms`.
    pub fn window_contains(&self, t_ms: i64, span_ms: i64) -> bool {
        // Saturating: a bucket before 1970 and a time far after it are more than any span apart.
        t_ms >= self.start_ms && t_ms.saturating_sub(self.start_ms) < span_ms
    }

    /// Appends a measurement unless the bucket must refuse it (count, size or a type-class
    /// change); a refused measurement leaves the bucket untouched.
    pub fn try_push(
        &mut self,
        doc: &RawDocument,
        m: &Prepared,
        seq: u64,
        idx: u32,
        limits: &FitLimits,
    ) -> Result<(), Refusal> {
        if self.count >= limits.max_count {
            return Err(Refusal::Count);
        }
        // Below the minimum count a bucket may grow past max_size (large measurements).
        let over = self.count > 0 && self.size + m.size > limits.max_size;
        if over && (self.count >= limits.min_count || self.size + m.size > limits.large_max_size) {
            return Err(Refusal::Size);
        }
        let deferred = if self.deferring {
            self.matches_pending(doc.as_bytes(), m)
        } else {
            None
        };
        if let Some(meta) = deferred {
            self.append_pending(doc.as_bytes(), meta);
        } else {
            self.split_pending();
            let cx = RowContext {
                meta_field: self.meta_field.as_deref(),
                meta_raw: self.meta_raw.as_ref(),
            };
            self.cols.push(doc, self.count, &cx)?;
        }
        self.count += 1;
        self.size += m.size;
        self.bson_bytes += m.len as u64;
        self.max_time_ms = self.max_time_ms.max(m.time_ms);
        self.min_seq = self.min_seq.min(seq);
        self.seqs.push(seq);
        self.idxs.push(idx);
        Ok(())
    }

    /// True when the row at `doc` may wait unsplit: only deferrable scalars outside the meta
    /// field, the bucket's meta value byte for byte, and the same types and names in the same
    /// order as the pending rows (the first row sets that signature). `m` is the row as the
    /// insert path prepared it. Returns where the meta element lies, if any.
    #[allow(clippy::type_complexity)]
    fn matches_pending(&mut self, doc: &[u8], m: &Prepared) -> Option<Option<(usize, usize)>> {
        let first = self.count == 0;
        if first {
            self.signature.clear();
            self.fixed = None;
        } else if self.fixed.as_ref().is_some_and(|f| f.doc_len != doc.len()) {
            // Same headers and fixed-width values give the same length: this row differs.
            return None;
        }
        // The first row's meta is compared; a later row with its id needs no comparison.
        let same_meta = !first && m.meta_id != 0 && m.meta_id == self.meta_id;
        let meta_field = self.meta_field.as_deref().map(str::as_bytes);
        if !first && m.shape != 0 && m.shape == self.shape {
            // The shape says the headers are the signature's; only the meta value is left.
            let Some((start, end)) = m.meta_at else {
                // Rows of one shape all have the meta field or all lack it; a row said to lack
                // it in a bucket that has a meta value takes the checked path.
                return self.meta_raw.is_none().then_some(None);
            };
            let value_at = start + meta_field.map_or(0, <[u8]>::len) + 2;
            let same = same_meta
                || self.meta_raw.as_ref().is_some_and(|(t, v)| {
                    doc.get(start) == Some(t) && doc.get(value_at..end) == Some(v.as_slice())
                });
            return same.then_some(Some((start, end)));
        }
        let mut at = 0;
        let mut meta_at = None;
        let mut elements = crate::doc::elements::Elements::new(doc);
        for e in elements.by_ref() {
            if Some(e.name) == meta_field {
                let same = same_meta
                    || self
                        .meta_raw
                        .as_ref()
                        .is_some_and(|(t, v)| *t == e.kind && v.as_slice() == e.value);
                if !same {
                    return None;
                }
                meta_at = Some((e.start, e.end()));
            } else if !crate::ingest::defers(e.kind)
                || (e.kind == 0x02 && !crate::doc::elements::string_ok(e.value))
            {
                // Only values the splitter can take wait unsplit; a damaged string goes to the
                // checked split, which leaves it out of its row.
                return None;
            }
            if first {
                self.signature.push(e.kind);
                self.signature.extend_from_slice(e.name);
                self.signature.push(0);
            } else {
                // The element's header in the row, `{ type | name | 0 }`, is the signature's
                // entry byte for byte.
                let end = at + e.name.len() + 2;
                let header = doc.get(e.start..e.start + e.name.len() + 2);
                match (header, self.signature.get(at..end)) {
                    (Some(h), Some(s)) if same_short(h, s) => at = end,
                    _ => return None,
                }
            }
        }
        let matched = elements.finished() && (first || at == self.signature.len());
        if matched && first {
            self.meta_id = m.meta_id;
            self.shape = m.shape;
        }
        matched.then_some(meta_at)
    }

    /// Appends a row to `pending` without its meta element, which lies at `meta`: only its
    /// values when the rows have a fixed layout.
    fn append_pending(&mut self, doc: &[u8], meta: Option<(usize, usize)>) {
        if self.count == 0 {
            self.fixed = FixedRows::of(doc, meta);
        }
        if let Some(f) = &self.fixed {
            self.pending.push_ranges(doc, &f.values, f.width);
            return;
        }
        let Some((start, end)) = meta else {
            self.pending.push(&[doc]);
            return;
        };
        let len = doc.len() - (end - start);
        self.pending.push(&[
            &(len as i32).to_le_bytes(),
            doc.get(4..start).unwrap_or_default(),
            doc.get(end..).unwrap_or_default(),
        ]);
    }

    /// Splits the pending rows into columns; from then on every row is split on arrival.
    fn split_pending(&mut self) {
        self.deferring = false;
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        let signature = std::mem::take(&mut self.signature);
        let fixed = self.fixed.take();
        // The rows a read split already are not split again.
        self.cols = match self.read_split.get_mut().take() {
            Some(r) => {
                let mut cols = Arc::try_unwrap(r.cols).unwrap_or_else(|c| Columns::clone(&c));
                push_uniform(&mut cols, &pending, fixed.as_ref(), r.rows);
                cols
            }
            None => split_uniform(
                &signature,
                self.meta_field.as_deref(),
                &pending,
                fixed.as_ref(),
                self.count as usize,
            ),
        };
    }

    /// The pending rows split into columns for a read, and their statistics: the rows that
    /// reads split before are kept, and only those that arrived since are split and added to
    /// the bounds and sums now. `None` when the rows are not in time order.
    fn split_for_read(&self) -> Option<(Arc<Columns>, Arc<BucketData>)> {
        let rows = self.count as usize;
        let mut cache = self.read_split.lock();
        let r = cache.get_or_insert_with(|| ReadSplit {
            rows: 0,
            cols: Arc::new(uniform_columns(
                &self.signature,
                self.meta_field.as_deref(),
                rows,
            )),
            stats: Vec::new(),
            head: None,
        });
        if r.rows < rows {
            let cols = Arc::make_mut(&mut r.cols);
            push_uniform(cols, &self.pending, self.fixed.as_ref(), r.rows);
            r.stats.resize_with(cols.columns.len(), RunningStats::default);
            for (s, c) in r.stats.iter_mut().zip(&cols.columns) {
                s.update(&c.data);
            }
            r.rows = rows;
        }
        if !self.time_sorted(&r.cols) {
            return None;
        }
        if let Some((h, n)) = r.head.as_mut() {
            let (cols, stats) = (&r.cols, &r.stats);
            if *n != rows && Arc::get_mut(h).is_some_and(|h| self.refresh_head(h, cols, stats)) {
                *n = rows;
            }
        }
        let head = match &r.head {
            Some((h, n)) if *n == rows => Arc::clone(h),
            _ => {
                let stats = &r.stats;
                let mut head = self.head_with(&r.cols, |i, _| stats.get(i)?.min_max());
                self.set_sums_with(&r.cols, &mut head, |i, c| stats.get(i)?.sum(&c.data));
                let head = Arc::new(head);
                r.head = Some((Arc::clone(&head), rows));
                head
            }
        };
        Some((Arc::clone(&r.cols), head))
    }

    /// Brings statistics that a read built for fewer of the pending rows up to date in place:
    /// the count, each column's bounds and sum, the log positions. False, with `h` to be
    /// built anew, when a column's entry is missing (a column gained its first value).
    fn refresh_head(&self, h: &mut BucketData, cols: &Columns, stats: &[RunningStats]) -> bool {
        h.count = self.count;
        h.bson_bytes = Some(self.bson_bytes);
        for (c, s) in cols.columns.iter().zip(stats) {
            let Some((lo, hi)) = s.min_max() else {
                continue;
            };
            // control.min.<time> stays the rounded bucket start.
            if c.name != self.time_field {
                match h.min.get_mut(&c.name) {
                    Some(v) => *v = lo,
                    None => return false,
                }
            }
            match h.max.get_mut(&c.name) {
                Some(v) => *v = hi,
                None => return false,
            }
        }
        if let (Some(lo), Some(hi)) = (self.seqs.iter().min(), self.seqs.iter().max()) {
            for (d, v) in [(&mut h.min, *lo), (&mut h.max, *hi)] {
                match d.get_mut(SEQ_COLUMN) {
                    Some(x) => *x = Bson::Int64(v as i64),
                    None => return false,
                }
            }
        }
        let Some(Bson::Document(sums)) = h.max.get_mut(crate::sums::SUM_KEY) else {
            // No column had a sum: none has one now, the types being those of the first row.
            return true;
        };
        for (c, s) in cols.columns.iter().zip(stats) {
            if let (Some(v), Some(sum)) = (sums.get_mut(&c.name), s.sum(&c.data)) {
                *v = sum;
            }
        }
        true
    }

    /// The columns of every row: borrowed when no row is pending, else split into a copy.
    fn all_columns(&self) -> std::borrow::Cow<'_, Columns> {
        if self.pending.is_empty() {
            return std::borrow::Cow::Borrowed(&self.cols);
        }
        std::borrow::Cow::Owned(split_uniform(
            &self.signature,
            self.meta_field.as_deref(),
            &self.pending,
            self.fixed.as_ref(),
            self.count as usize,
        ))
    }

    /// A copy of the contents (the bucket stays open), hidden columns included, with rows in
    /// time order (stable, so rows with equal times keep their arrival order). Sorted rows
    /// delta-code better and let readers stop early on time; MongoDB keeps closed buckets
    /// sorted too (bucket version 2).
    pub fn snapshot(&self) -> BucketData {
        let cols = self.all_columns();
        let mut b = self.snapshot_unsorted(&cols);
        if sort_rows_by_time(&mut b, &self.time_field) {
            // Double sums follow the stored row order, which is no longer the arrival order
            // of the typed vectors: add up the sorted columns instead.
            crate::sums::set_bucket_sums(&mut b, &self.time_field);
        } else {
            self.set_typed_sums(&cols, &mut b);
        }
        b
    }

    /// The contents for a read, as [`BucketBuilder::snapshot`] gives them less the log's
    /// bookkeeping columns, but with the values kept in their typed vectors: building a `Bson`
    /// value per row made reads of fresh data tens of times slower than reads of the same data
    /// flushed. Rows that wait unsplit are split once and shared with later reads, which split
    /// only the rows that arrived since. Rows come in time order; where they arrived out of it,
    /// the sorted snapshot's values are carried as they are.
    pub fn copy_for_read(&self) -> OpenCopy {
        if self.pending.is_empty() {
            if !self.time_sorted(&self.cols) {
                return OpenCopy::of_values(self.snapshot());
            }
            let mut head = self.head(&self.cols);
            self.set_typed_sums(&self.cols, &mut head);
            let extra = self
                .raw_meta_values(&self.cols)
                .map(|v| CopiedColumn::of_values(META_COLUMN, v))
                .into_iter()
                .collect();
            return OpenCopy {
                head: Arc::new(head),
                cols: Arc::new(self.cols.clone()),
                extra,
            };
        }
        let Some((cols, head)) = self.split_for_read() else {
            return OpenCopy::of_values(self.snapshot());
        };
        // Rows waiting unsplit carry the bucket's meta value: none has its own.
        OpenCopy {
            head,
            cols,
            extra: Vec::new(),
        }
    }

    /// True when the time column of `cols` is in every row and in order.
    fn time_sorted(&self, cols: &Columns) -> bool {
        cols.columns
            .iter()
            .find(|c| c.name == self.time_field)
            .is_some_and(|t| match &t.data {
                Data::Date(v) => {
                    t.rows.is_none() && v.len() == self.count as usize && v.is_sorted()
                }
                _ => false,
            })
    }

    /// Sets `b`'s sums from the typed column vectors (rows in arrival order = stored order).
    fn set_typed_sums(&self, cols: &Columns, b: &mut BucketData) {
        self.set_sums_with(cols, b, |_, c| c.data.sum());
    }

    /// Sets `b`'s sums, `sum` giving column `i`'s.
    fn set_sums_with(
        &self,
        cols: &Columns,
        b: &mut BucketData,
        sum: impl Fn(usize, &ColumnBuilder) -> Option<Bson>,
    ) {
        let sums: Document = cols
            .columns
            .iter()
            .enumerate()
            .filter(|(_, c)| c.name != self.time_field && !is_hidden(&c.name))
            .filter_map(|(i, c)| Some((c.name.clone(), sum(i, c)?)))
            .collect();
        if !sums.is_empty() {
            b.max.insert(crate::sums::SUM_KEY, sums);
        }
    }

    fn snapshot_unsorted(&self, cols: &Columns) -> BucketData {
        let rows = self.count as usize;
        let mut b = self.head(cols);
        b.columns = cols
            .columns
            .iter()
            .map(|c| Column {
                name: c.name.clone(),
                values: c.values(rows),
            })
            .collect();
        b.columns.push(Column {
            name: SEQ_COLUMN.to_string(),
            values: self
                .seqs
                .iter()
                .map(|&s| Some(Bson::Int64(s as i64)))
                .collect(),
        });
        b.columns.push(Column {
            name: IDX_COLUMN.to_string(),
            values: self
                .idxs
                .iter()
                .map(|&i| Some(Bson::Int32(i as i32)))
                .collect(),
        });
        if let Some(values) = self.raw_meta_values(cols) {
            b.columns.push(Column {
                name: META_COLUMN.to_string(),
                values,
            });
        }
        b
    }

    /// The hidden meta column's values, when some row's meta differs from the bucket's.
    fn raw_meta_values(&self, cols: &Columns) -> Option<Vec<Option<Bson>>> {
        if cols.raw_metas.is_empty() {
            return None;
        }
        let mut values = cols.raw_metas.clone();
        values.resize(self.count as usize, None);
        Some(values)
    }

    /// Everything of the bucket but its columns (`columns` is left empty): `control`, meta,
    /// shapes, counts. Sums are left to the caller, which knows the row order.
    fn head(&self, cols: &Columns) -> BucketData {
        self.head_with(cols, |_, c| c.data.min_max())
    }

    /// [`BucketBuilder::head`], `bounds` giving column `i`'s minimum and maximum.
    fn head_with(
        &self,
        cols: &Columns,
        bounds: impl Fn(usize, &ColumnBuilder) -> Option<(Bson, Bson)>,
    ) -> BucketData {
        let mut min = Document::new();
        let mut max = Document::new();
        for (i, c) in cols.columns.iter().enumerate() {
            if let Some((lo, hi)) = bounds(i, c) {
                if c.name == self.time_field {
                    // control.min.<time> is the rounded bucket start, as in MongoDB.
                    min.insert(
                        c.name.clone(),
                        Bson::DateTime(DateTime::from_millis(self.start_ms)),
                    );
                } else {
                    min.insert(c.name.clone(), lo);
                }
                max.insert(c.name.clone(), hi);
            }
        }
        // The seq range in control lets recovery find buckets that already hold logged rows.
        if let (Some(lo), Some(hi)) = (self.seqs.iter().min(), self.seqs.iter().max()) {
            min.insert(SEQ_COLUMN, Bson::Int64(*lo as i64));
            max.insert(SEQ_COLUMN, Bson::Int64(*hi as i64));
        }
        if !cols.raw_metas.is_empty() {
            // Its presence in control tells readers that whole-document comparisons on the
            // meta must look at rows, not at the bucket's meta value.
            let present: Vec<Bson> = cols.raw_metas.iter().flatten().cloned().collect();
            if let Some((lo, hi)) = Data::Any(present).min_max() {
                min.insert(META_COLUMN, lo);
                max.insert(META_COLUMN, hi);
            }
        }
        BucketData {
            id: self.id,
            meta: self.meta.clone(),
            count: self.count,
            min,
            max,
            columns: Vec::new(),
            shapes: cols.shapes.clone(),
            row_shapes: cols.row_shapes.clone(),
            bson_bytes: Some(self.bson_bytes),
        }
    }

    /// The contents encoded for a segment, typed columns straight from their vectors without
    /// a `Bson` value per row: what the flusher writes, byte for byte what encoding
    /// [`BucketBuilder::snapshot`] would give. `None` when the rows are not in time order
    /// (the caller then encodes a snapshot, which sorts them). The bucket stays readable.
    pub fn encode(&mut self) -> Option<EncodedBucket> {
        self.split_pending();
        let cols = &self.cols;
        let time = cols.columns.iter().find(|c| c.name == self.time_field)?;
        match &time.data {
            Data::Date(t) if time.rows.is_none() && t.is_sorted() => {}
            _ => return None,
        }
        let rows = self.count as usize;
        let mut head = self.head(cols);
        self.set_typed_sums(cols, &mut head);
        let mut out = EncodedBucket {
            head,
            names: Vec::with_capacity(cols.columns.len() + 3),
            body: Vec::new(),
            lens: Vec::with_capacity(cols.columns.len() + 3),
        };
        let mut flags = Vec::new();
        for c in &cols.columns {
            let start = out.body.len();
            // Without a row list the values sit at rows 0.., and later rows lack the field.
            let present = match &c.rows {
                None if c.data.len() == rows => None,
                None => {
                    flags.clear();
                    flags.resize(rows, false);
                    flags.iter_mut().take(c.data.len()).for_each(|f| *f = true);
                    Some(flags.as_slice())
                }
                Some(r) => {
                    flags.clear();
                    flags.resize(rows, false);
                    for &i in r {
                        if let Some(f) = flags.get_mut(i as usize) {
                            *f = true;
                        }
                    }
                    Some(flags.as_slice())
                }
            };
            match c.data.typed() {
                Some(t) => encode_column_typed(t, present, &mut out.body),
                None => encode_column(&c.values(rows), &mut out.body),
            }
            out.names.push(c.name.clone());
            out.lens.push(out.body.len() - start);
        }
        let seqs: Vec<i64> = self.seqs.iter().map(|&s| s as i64).collect();
        let idxs: Vec<i32> = self.idxs.iter().map(|&i| i as i32).collect();
        let hidden = [
            (SEQ_COLUMN, Typed::I64(&seqs)),
            (IDX_COLUMN, Typed::I32(&idxs)),
        ];
        for (name, t) in hidden {
            let start = out.body.len();
            encode_column_typed(t, None, &mut out.body);
            out.names.push(name.to_string());
            out.lens.push(out.body.len() - start);
        }
        if let Some(values) = self.raw_meta_values(cols) {
            let start = out.body.len();
            encode_column(&values, &mut out.body);
            out.names.push(META_COLUMN.to_string());
            out.lens.push(out.body.len() - start);
        }
        Some(out)
    }

    /// Consumes the builder into its final contents.
    pub fn finish(mut self) -> BucketData {
        self.split_pending();
        self.snapshot()
    }
}

/// Reorders every per-row vector of `b` by the time column (stable); a no-op when sorted.
/// Returns true when rows moved.
pub fn sort_rows_by_time(b: &mut BucketData, time_field: &str) -> bool {
    let Some(times) = b.columns.iter().find(|c| c.name == time_field) else {
        return false;
    };
    let t: Vec<i64> = times
        .values
        .iter()
        .map(|v| match v {
            Some(Bson::DateTime(d)) => d.timestamp_millis(),
            _ => i64::MIN,
        })
        .collect();
    if t.is_sorted() {
        return false;
    }
    let mut order: Vec<usize> = (0..t.len()).collect();
    order.sort_by_key(|&i| t.get(i).copied());
    let permute = |v: &mut Vec<Option<Bson>>| {
        let old = std::mem::take(v);
        let mut slots: Vec<Option<Option<Bson>>> = old.into_iter().map(Some).collect();
        *v = order
            .iter()
            .map(|&i| slots.get_mut(i).and_then(Option::take).flatten())
            .collect();
    };
    for c in &mut b.columns {
        permute(&mut c.values);
    }
    if !b.row_shapes.is_empty() {
        b.row_shapes = order
            .iter()
            .map(|&i| b.row_shapes.get(i).copied().unwrap_or(0))
            .collect();
    }
    true
}
