//! An open bucket: measurements appended column by column.

use super::control::{fold_into, Schema};
use crate::bucket::{BucketData, Column, Shape, META_SLOT};
use bson::oid::ObjectId;
use bson::{Bson, DateTime, Document};
use std::cmp::Ordering;

/// Prefix of the engine's hidden bookkeeping columns. Inserts refuse top-level fields that start
/// with it, so hidden columns cannot collide with user fields.
pub const HIDDEN_PREFIX: char = '\u{1}';
/// Name of the hidden column holding each row's log sequence number.
pub const SEQ_COLUMN: &str = "\u{1}seq";
/// Name of the hidden column holding each row's position in its insert batch.
pub const IDX_COLUMN: &str = "\u{1}idx";
/// Name of the hidden column holding a row's meta value where it differs from the bucket's
/// (same series, other field order): reads return the meta exactly as it was inserted.
pub const META_COLUMN: &str = "\u{1}meta";
/// Marker in `control.max` of a bucket whose rows do not all share the bucket's meta value
/// byte for byte; whole-document meta comparisons must then look at rows.
pub const META_VARIES: &str = "\u{1}metavar";

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

/// True for the engine's hidden bookkeeping columns.
pub fn is_hidden(name: &str) -> bool {
    name.starts_with(HIDDEN_PREFIX)
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

struct ColumnBuilder {
    name: String,
    values: Vec<Option<Bson>>,
    schema: Option<Schema>,
}

impl ColumnBuilder {
    fn push(&mut self, row: usize, v: Bson) {
        if self.values.len() < row {
            self.values.resize(row, None);
        }
        self.values.push(Some(v));
    }
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

/// One open bucket.
pub struct BucketBuilder {
    pub(crate) id: ObjectId,
    /// Rounded start, milliseconds since the epoch (`control.min.<time>`).
    pub(crate) start_ms: i64,
    pub(crate) meta: Option<Bson>,
    pub(crate) count: u32,
    /// Measurement bytes (BSON size without the meta field) counted toward the size limit.
    pub(crate) size: usize,
    pub(crate) max_time_ms: i64,
    pub(crate) min_seq: u64,
    pub(crate) last_touch: u64,
    pub(crate) kept_open_for_large: bool,
    last_batch: u64,
    time_field: String,
    meta_field: Option<String>,
    columns: Vec<ColumnBuilder>,
    min: Document,
    max: Document,
    shapes: Vec<Shape>,
    row_shapes: Vec<u32>,
    seqs: Vec<u64>,
    idxs: Vec<u32>,
    raw_metas: Vec<Option<Bson>>,
    scratch: Shape,
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
        let mut min = Document::new();
        min.insert(time_field, Bson::DateTime(DateTime::from_millis(start_ms)));
        BucketBuilder {
            id,
            start_ms,
            meta,
            count: 0,
            size: 0,
            max_time_ms: i64::MIN,
            min_seq: u64::MAX,
            last_touch: 0,
            kept_open_for_large: false,
            last_batch: 0,
            time_field: time_field.to_string(),
            meta_field: meta_field.map(str::to_string),
            columns: Vec::new(),
            min,
            max: Document::new(),
            shapes: Vec::new(),
            row_shapes: Vec::new(),
            seqs: Vec::new(),
            idxs: Vec::new(),
            raw_metas: Vec::new(),
            scratch: Vec::new(),
        }
    }

    pub(crate) fn last_batch(&self) -> u64 {
        self.last_batch
    }

    pub(crate) fn set_last_batch(&mut self, b: u64) {
        self.last_batch = b;
    }

    /// Approximate memory held, for the catalog's memory limit.
    pub fn memory(&self) -> usize {
        // Decoded values take roughly twice their BSON size plus per-value slots.
        self.size * 2 + self.count as usize * (self.columns.len() * 8 + 16) + 512
    }

    /// Whether `doc` (of BSON size `size`) may join; `None` means it fits.
    pub fn refusal(&self, doc: &Document, size: usize, limits: &FitLimits) -> Option<Refusal> {
        if self.count >= limits.max_count {
            return Some(Refusal::Count);
        }
        if self.count > 0
            && self.size + size > limits.max_size
            && (self.count >= limits.min_count || self.size + size > limits.large_max_size)
        {
            return Some(Refusal::Size);
        }
        if !self.schema_accepts(doc) {
            return Some(Refusal::Schema);
        }
        None
    }

    fn column_index(&self, name: &str, hint: usize) -> Option<usize> {
        if let Some(c) = self.columns.get(hint) {
            if c.name == name {
                return Some(hint);
            }
        }
        self.columns.iter().position(|c| c.name == name)
    }

    fn schema_accepts(&self, doc: &Document) -> bool {
        let mut hint = 0;
        for (k, v) in doc {
            if self.meta_field.as_deref() == Some(k.as_str()) {
                continue;
            }
            if let Some(i) = self.column_index(k, hint) {
                hint = i + 1;
                if let Some(s) = self.columns.get(i).and_then(|c| c.schema.as_ref()) {
                    let ok = match s.is_scalar_class(v) {
                        Some(ok) => ok,
                        None => s.accepts(v),
                    };
                    if !ok {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// True if the bucket's fixed window `[start, start + span)` contains `t_ms`.
    pub fn window_contains(&self, t_ms: i64, span_ms: i64) -> bool {
        t_ms >= self.start_ms && t_ms - self.start_ms < span_ms
    }

    /// Appends a measurement the caller checked with [`BucketBuilder::refusal`].
    pub fn push(&mut self, doc: &Document, time_ms: i64, size: usize, seq: u64, idx: u32) {
        let row = self.count as usize;
        let mut shape = std::mem::take(&mut self.scratch);
        shape.clear();
        let mut hint = 0;
        for (k, v) in doc {
            if self.meta_field.as_deref() == Some(k.as_str()) {
                shape.push(META_SLOT);
                let same = self.meta.as_ref().is_some_and(|m| identical(m, v));
                if !same {
                    if self.raw_metas.len() < row {
                        self.raw_metas.resize(row, None);
                    }
                    self.raw_metas.push(Some(v.clone()));
                }
                continue;
            }
            let i = match self.column_index(k, hint) {
                Some(i) => i,
                None => {
                    self.columns.push(ColumnBuilder {
                        name: k.clone(),
                        values: Vec::new(),
                        schema: None,
                    });
                    self.columns.len() - 1
                }
            };
            hint = i + 1;
            shape.push(i as u32);
            if let Some(c) = self.columns.get_mut(i) {
                match &mut c.schema {
                    Some(s) => s.absorb(v),
                    None => c.schema = Some(Schema::of(v)),
                }
                c.push(row, v.clone());
            }
            if k != &self.time_field {
                fold_into(&mut self.min, k, v, Ordering::Less);
            }
            fold_into(&mut self.max, k, v, Ordering::Greater);
        }
        let shape_id = match self.shapes.iter().position(|s| *s == shape) {
            Some(p) => p,
            None => {
                self.shapes.push(shape.clone());
                self.shapes.len() - 1
            }
        };
        if shape_id != 0 && self.row_shapes.is_empty() {
            self.row_shapes.resize(row, 0);
        }
        if !self.row_shapes.is_empty() {
            self.row_shapes.push(shape_id as u32);
        }
        self.scratch = shape;
        self.count += 1;
        self.size += size;
        self.max_time_ms = self.max_time_ms.max(time_ms);
        self.min_seq = self.min_seq.min(seq);
        self.seqs.push(seq);
        self.idxs.push(idx);
        // The seq range in control lets recovery find buckets that already hold logged rows.
        let s = Bson::Int64(seq as i64);
        fold_into(&mut self.min, SEQ_COLUMN, &s, Ordering::Less);
        fold_into(&mut self.max, SEQ_COLUMN, &s, Ordering::Greater);
    }

    /// A copy of the contents (the bucket stays open), hidden columns included.
    pub fn snapshot(&self) -> BucketData {
        let rows = self.count as usize;
        let mut columns: Vec<Column> = self
            .columns
            .iter()
            .map(|c| {
                let mut values = c.values.clone();
                values.resize(rows, None);
                Column {
                    name: c.name.clone(),
                    values,
                }
            })
            .collect();
        columns.push(Column {
            name: SEQ_COLUMN.to_string(),
            values: self
                .seqs
                .iter()
                .map(|&s| Some(Bson::Int64(s as i64)))
                .collect(),
        });
        columns.push(Column {
            name: IDX_COLUMN.to_string(),
            values: self
                .idxs
                .iter()
                .map(|&i| Some(Bson::Int32(i as i32)))
                .collect(),
        });
        if !self.raw_metas.is_empty() {
            let mut values = self.raw_metas.clone();
            values.resize(rows, None);
            columns.push(Column {
                name: META_COLUMN.to_string(),
                values,
            });
        }
        let mut max = self.max.clone();
        if !self.raw_metas.is_empty() {
            max.insert(META_VARIES, true);
        }
        BucketData {
            id: self.id,
            meta: self.meta.clone(),
            count: self.count,
            min: self.min.clone(),
            max,
            columns,
            shapes: self.shapes.clone(),
            row_shapes: self.row_shapes.clone(),
        }
    }

    /// Consumes the builder into its final contents.
    pub fn finish(self) -> BucketData {
        self.snapshot()
    }
}
