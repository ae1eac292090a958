//! The in-memory form of one bucket's contents, shared by the catalog (which builds it), the
//! segment writer (which encodes it) and the segment reader (which decodes it back).

use bson::oid::ObjectId;
use bson::{Bson, Document};

/// Columns whose name starts with this character are the writer's bookkeeping (row positions
/// in the log, per-row meta variants): they are not listed in shapes, so rebuilt measurements
/// do not contain them. BSON field names from users never start with it (the engine refuses
/// such names).
pub const BOOKKEEPING_PREFIX: char = '\u{1}';
/// Name of the hidden column holding each row's log sequence number.
pub const SEQ_COLUMN: &str = "\u{1}seq";
/// Name of the hidden column holding each row's position in its insert batch.
pub const IDX_COLUMN: &str = "\u{1}idx";
/// Name of the hidden column holding a row's meta value where it differs from the bucket's
/// (same series, other field order): reads return the meta exactly as it was inserted.
pub const META_COLUMN: &str = "\u{1}meta";

/// Marker used in a [`Shape`] for the position of the meta field.
pub const META_SLOT: u32 = u32::MAX;

/// One column of a bucket: a field's value at each row, `None` where the measurement lacked it.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    /// Top-level field name of the measurement.
    pub name: String,
    /// `values.len()` equals the bucket's row count.
    pub values: Vec<Option<Bson>>,
}

/// The order in which a measurement's fields were inserted: column indexes, with [`META_SLOT`]
/// where the meta field stood. Reads rebuild documents in this order, so a measurement comes
/// back exactly as it went in.
pub type Shape = Vec<u32>;

/// A bucket's full contents in column form.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketData {
    /// Bucket `_id`: 4-byte big-endian start seconds, then an 8-byte counter.
    pub id: ObjectId,
    /// The normalised meta value; `None` when measurements had no meta field.
    pub meta: Option<Bson>,
    /// Number of measurements (rows).
    pub count: u32,
    /// `control.min`: per-field minimum (the time field holds the rounded bucket start).
    pub min: Document,
    /// `control.max`: per-field maximum.
    pub max: Document,
    /// Columns in order of first appearance.
    pub columns: Vec<Column>,
    /// Distinct field orders seen in this bucket.
    pub shapes: Vec<Shape>,
    /// Per-row index into `shapes`; empty when every row has shape 0.
    pub row_shapes: Vec<u32>,
    /// Total BSON size in bytes of the bucket's measurements as they were inserted (each
    /// document's length as stored in the log, with the `_id` the engine adds to a document
    /// that has none); `None` when unknown (buckets of segments written before directory
    /// version 3). Carried as is when a bucket is read and written again.
    pub bson_bytes: Option<u64>,
}

/// A bucket ready for the segment writer: everything its directory entry needs, and its
/// columns already encoded (`format-spec/codecs.md`). The flusher builds it straight from the
/// catalog's typed column vectors, which is cheaper than going through [`BucketData`]'s
/// `Bson` values; the bytes are the same.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodedBucket {
    /// Everything but the columns: `columns` is empty.
    pub head: BucketData,
    /// Column names, in the order of `lens`.
    pub names: Vec<String>,
    /// The encoded columns back to back.
    pub body: Vec<u8>,
    /// Length in bytes of each encoded column in `body`.
    pub lens: Vec<usize>,
}

impl EncodedBucket {
    /// Encodes the columns of `b`.
    pub fn from_data(b: &BucketData) -> EncodedBucket {
        let mut out = EncodedBucket {
            head: b.clone_head(),
            names: b.columns.iter().map(|c| c.name.clone()).collect(),
            body: Vec::new(),
            lens: Vec::with_capacity(b.columns.len()),
        };
        b.encode_columns(&mut out.body, &mut out.lens);
        out
    }
}

impl BucketData {
    /// Appends the encoded columns to `out` and their lengths to `lens`.
    pub fn encode_columns(&self, out: &mut Vec<u8>, lens: &mut Vec<usize>) {
        for c in &self.columns {
            let start = out.len();
            crate::codec::encode_column(&c.values, out);
            lens.push(out.len() - start);
        }
    }

    /// A copy without the columns.
    fn clone_head(&self) -> BucketData {
        BucketData {
            id: self.id,
            meta: self.meta.clone(),
            count: self.count,
            min: self.min.clone(),
            max: self.max.clone(),
            columns: Vec::new(),
            shapes: self.shapes.clone(),
            row_shapes: self.row_shapes.clone(),
            bson_bytes: self.bson_bytes,
        }
    }
}
