//! Measurements as a Parquet file, for DuckDB, pandas, Polars and Spark.
//!
//! Parquet fixes its columns before the first row, and a collection's documents need not
//! share theirs, so the export reads the query's results twice: once to learn the columns
//! (every dotted path to a value that is not a document, in the order first seen) and each
//! column's type, then to write them. Both reads see the same snapshot of the database.
//!
//! A column's type is the one its values share: booleans, 32-bit or 64-bit integers, doubles
//! or dates (a UTC timestamp in milliseconds). Integers beside doubles are written as doubles,
//! 32-bit beside 64-bit integers as 64-bit; strings, ObjectIds (as hex) and every other value,
//! or values of mixed types, as text (other values as relaxed Extended JSON). Nulls and
//! missing fields are Parquet nulls. Rows go in groups of [`ROW_GROUP`], compressed with zstd.

use crate::common::CliResult;
use parquet::basic::{LogicalType, Repetition, TimeUnit, Type as Physical};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type;
use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;
use tsbucket::bson::oid::ObjectId;
use tsbucket::bson::{Bson, DateTime, RawBsonRef, RawDocument};

/// Rows per row group: as DuckDB writes them, small enough to bound the memory an export
/// holds, large enough for the columns to compress.
pub const ROW_GROUP: usize = 122_880;

/// What a column holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// Only nulls seen so far: written as text.
    Nothing,
    Bool,
    Int32,
    Int64,
    Double,
    Date,
    Text,
}

impl Kind {
    /// The kind of a value that is not a document, or `None` for null.
    fn of(v: &RawBsonRef<'_>) -> Option<Kind> {
        Some(match v {
            RawBsonRef::Null | RawBsonRef::Undefined => return None,
            RawBsonRef::Boolean(_) => Kind::Bool,
            RawBsonRef::Int32(_) => Kind::Int32,
            RawBsonRef::Int64(_) => Kind::Int64,
            RawBsonRef::Double(_) => Kind::Double,
            RawBsonRef::DateTime(_) => Kind::Date,
            _ => Kind::Text,
        })
    }

    /// The kind that holds the values of both.
    fn join(self, other: Kind) -> Kind {
        use Kind::*;
        match (self, other) {
            (a, b) if a == b => a,
            (Nothing, k) | (k, Nothing) => k,
            (Int32, Int64) | (Int64, Int32) => Int64,
            (Int32 | Int64, Double) | (Double, Int32 | Int64) => Double,
            _ => Text,
        }
    }
}

/// The columns of an export: dotted paths and their kinds.
#[derive(Default, Debug)]
pub struct Columns {
    paths: Vec<String>,
    kinds: Vec<Kind>,
    index: HashMap<Vec<u8>, usize, foldhash::fast::RandomState>,
    /// Only these paths are taken (`--fields`); every other is passed over.
    fixed: bool,
    /// The dotted path being walked, kept between documents for its allocation.
    path: Vec<u8>,
    /// The columns of the last document's values, in its order: the documents of a
    /// collection mostly share their layout, so a value's column is looked up only where the
    /// layout differs.
    layout: Vec<usize>,
}

impl Columns {
    /// Columns learned from the documents, or, given `fields`, exactly those.
    pub fn new(fields: &[String]) -> Columns {
        let mut c = Columns::default();
        for f in fields {
            c.add(f);
        }
        c.fixed = !fields.is_empty();
        c
    }

    fn add(&mut self, path: &str) -> usize {
        let at = self.paths.len();
        self.paths.push(path.to_string());
        self.kinds.push(Kind::Nothing);
        self.index.insert(path.as_bytes().to_vec(), at);
        at
    }

    /// Learns the columns and kinds of one document.
    pub fn survey(&mut self, doc: &RawDocument) -> Result<(), String> {
        self.walk(doc, &mut |c, at, v| {
            if let (Some(k), Some(kind)) = (Kind::of(&v), c.kinds.get_mut(at)) {
                *kind = kind.join(k);
            }
            Ok(())
        })
    }

    /// Calls `each` with the column of every value in `doc` that is not a document (adding
    /// columns unless they are fixed).
    fn walk(
        &mut self,
        doc: &RawDocument,
        each: &mut dyn FnMut(&mut Columns, usize, RawBsonRef<'_>) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut path = std::mem::take(&mut self.path);
        path.clear();
        let mut seen = 0;
        let mut rare = Vec::new();
        let r = self.walk_at(doc.as_bytes(), &mut path, &mut seen, &mut rare, each);
        self.layout.truncate(seen);
        self.path = path;
        r
    }

    /// Walks the bytes of a document (its length and terminator included) itself, rather
    /// than through the `bson` crate's iterator, which checks every key's UTF-8 and was most of
    /// an export's time: a path is checked once, when it becomes a column.
    fn walk_at(
        &mut self,
        b: &[u8],
        path: &mut Vec<u8>,
        seen: &mut usize,
        rare: &mut Vec<u8>,
        each: &mut dyn FnMut(&mut Columns, usize, RawBsonRef<'_>) -> Result<(), String>,
    ) -> Result<(), String> {
        let bad = || "a returned document is not well-formed BSON".to_string();
        let len = path.len();
        let mut at = 4;
        loop {
            let t = *b.get(at).ok_or_else(bad)?;
            if t == 0 {
                break;
            }
            let rest = b.get(at + 1..).ok_or_else(bad)?;
            let key = rest.get(..rest.iter().position(|&c| c == 0).ok_or_else(bad)?);
            let key = key.ok_or_else(bad)?;
            path.truncate(len);
            if len > 0 {
                path.push(b'.');
            }
            path.extend_from_slice(key);
            let v = at + 1 + key.len() + 1;
            let fixed = |n: usize| b.get(v..v + n).ok_or_else(bad);
            let int4 = || -> Result<i32, String> {
                Ok(i32::from_le_bytes(fixed(4)?.try_into().map_err(|_| bad())?))
            };
            let int8 = || -> Result<[u8; 8], String> { fixed(8)?.try_into().map_err(|_| bad()) };
            let sized = || usize::try_from(int4()?).map_err(|_| bad());
            let (value, size) = match t {
                0x03 => {
                    let n = sized()?;
                    let sub = b.get(v..v + n).filter(|d| d.len() >= 5).ok_or_else(bad)?;
                    self.walk_at(sub, path, seen, rare, each)?;
                    at = v + n;
                    continue;
                }
                0x01 => (RawBsonRef::Double(f64::from_le_bytes(int8()?)), 8),
                0x02 => {
                    let n = sized()?;
                    let s = b.get(v + 4..v + 4 + n.saturating_sub(1)).ok_or_else(bad)?;
                    let s = std::str::from_utf8(s).map_err(|_| bad())?;
                    (RawBsonRef::String(s), 4 + n)
                }
                0x07 => {
                    let id: [u8; 12] = fixed(12)?.try_into().map_err(|_| bad())?;
                    (RawBsonRef::ObjectId(ObjectId::from_bytes(id)), 12)
                }
                0x08 => (RawBsonRef::Boolean(fixed(1)? != [0]), 1),
                0x09 => {
                    let ms = i64::from_le_bytes(int8()?);
                    (RawBsonRef::DateTime(DateTime::from_millis(ms)), 8)
                }
                0x0A => (RawBsonRef::Null, 0),
                0x10 => (RawBsonRef::Int32(int4()?), 4),
                0x12 => (RawBsonRef::Int64(i64::from_le_bytes(int8()?)), 8),
                _ => {
                    // Any other type: the bytes from here to the end of this document, behind
                    // an empty key, parsed by the `bson` crate, which knows every size.
                    rare.clear();
                    let n = i32::try_from(6 + b.len().saturating_sub(v)).map_err(|_| bad())?;
                    rare.extend_from_slice(&n.to_le_bytes());
                    rare.extend_from_slice(&[t, 0]);
                    rare.extend_from_slice(b.get(v..).ok_or_else(bad)?);
                    let doc = RawDocument::from_bytes(rare.as_slice()).map_err(|_| bad())?;
                    let mut it = doc.iter_elements();
                    let el = it.next().ok_or_else(bad)?.map_err(|_| bad())?;
                    let size = el.size();
                    let value = el.value().map_err(|_| bad())?;
                    self.found(path, seen, value, each)?;
                    at = v + size;
                    continue;
                }
            };
            self.found(path, seen, value, each)?;
            at = v + size;
        }
        path.truncate(len);
        Ok(())
    }

    /// A value at `path`: finds its column and calls `each`.
    fn found(
        &mut self,
        path: &[u8],
        seen: &mut usize,
        v: RawBsonRef<'_>,
        each: &mut dyn FnMut(&mut Columns, usize, RawBsonRef<'_>) -> Result<(), String>,
    ) -> Result<(), String> {
        let expected = self.layout.get(*seen).copied();
        let at = match expected {
            Some(at) if self.paths.get(at).is_some_and(|p| p.as_bytes() == path) => at,
            _ => {
                let at = match self.index.get(path) {
                    Some(&at) => at,
                    None if self.fixed => return Ok(()),
                    None => {
                        let p = std::str::from_utf8(path)
                            .map_err(|_| "a returned field name is not UTF-8".to_string())?;
                        self.add(p)
                    }
                };
                self.layout.truncate(*seen);
                self.layout.push(at);
                at
            }
        };
        *seen += 1;
        each(self, at, v)
    }

    /// The Parquet schema of the columns.
    fn schema(&self) -> Result<Type, parquet::errors::ParquetError> {
        let mut fields = Vec::with_capacity(self.paths.len());
        for (path, kind) in self.paths.iter().zip(&self.kinds) {
            let (physical, logical) = match kind {
                Kind::Bool => (Physical::BOOLEAN, None),
                Kind::Int32 => (Physical::INT32, None),
                Kind::Int64 => (Physical::INT64, None),
                Kind::Double => (Physical::DOUBLE, None),
                Kind::Date => (
                    Physical::INT64,
                    Some(LogicalType::timestamp(true, TimeUnit::MILLIS)),
                ),
                Kind::Text | Kind::Nothing => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
            };
            let field = Type::primitive_type_builder(path, physical)
                .with_repetition(Repetition::OPTIONAL)
                .with_logical_type(logical)
                .build()?;
            fields.push(Arc::new(field));
        }
        Type::group_type_builder("measurements")
            .with_fields(fields)
            .build()
    }
}

/// One column's values in the row group being filled.
enum Values {
    Bool(Vec<bool>),
    Int32(Vec<i32>),
    Int64(Vec<i64>),
    Double(Vec<f64>),
    Text(Texts),
}

/// A text column's values: their bytes one after another, and where each lies. A value equal
/// to the one before (a tag, row after row) takes the same bytes again. The row group's
/// values become slices of one shared buffer, not an allocation each.
#[derive(Default)]
struct Texts {
    bytes: Vec<u8>,
    spans: Vec<(usize, usize)>,
    scratch: String,
}

impl Texts {
    fn push(&mut self, v: &[u8]) {
        if let Some(&(from, to)) = self.spans.last() {
            if self.bytes.get(from..to) == Some(v) {
                self.spans.push((from, to));
                return;
            }
        }
        let from = self.bytes.len();
        self.bytes.extend_from_slice(v);
        self.spans.push((from, self.bytes.len()));
    }

    fn take(&mut self) -> Vec<ByteArray> {
        let all = bytes::Bytes::from(std::mem::take(&mut self.bytes));
        let values = self
            .spans
            .iter()
            .map(|&(from, to)| ByteArray::from(all.slice(from..to)))
            .collect();
        self.spans.clear();
        values
    }
}

struct Column {
    values: Values,
    /// 1 where the row has a value, 0 where it is null or missing.
    defined: Vec<i16>,
}

/// Writes documents to a Parquet file with the columns a [`Columns`] learned.
pub struct ParquetWriter<W: Write + Send> {
    columns: Columns,
    buffers: Vec<Column>,
    rows: usize,
    file: SerializedFileWriter<W>,
}

impl<W: Write + Send> ParquetWriter<W> {
    /// Starts the file on `out`.
    pub fn new(columns: Columns, out: W) -> CliResult<Self> {
        let schema = columns
            .schema()
            .map_err(|e| format!("parquet schema: {e}"))?;
        let props = WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .set_created_by(format!("tsbucket {}", env!("CARGO_PKG_VERSION")))
            .build();
        let file = SerializedFileWriter::new(out, Arc::new(schema), Arc::new(props))
            .map_err(parquet_error)?;
        let buffers = columns
            .kinds
            .iter()
            .map(|k| Column {
                values: match k {
                    Kind::Bool => Values::Bool(Vec::new()),
                    Kind::Int32 => Values::Int32(Vec::new()),
                    Kind::Int64 | Kind::Date => Values::Int64(Vec::new()),
                    Kind::Double => Values::Double(Vec::new()),
                    Kind::Text | Kind::Nothing => Values::Text(Texts::default()),
                },
                defined: Vec::new(),
            })
            .collect();
        Ok(ParquetWriter {
            columns,
            buffers,
            rows: 0,
            file,
        })
    }

    /// Adds one document as a row.
    pub fn push(&mut self, doc: &RawDocument) -> CliResult {
        let row = self.rows;
        let buffers = &mut self.buffers;
        self.columns.walk(doc, &mut |c, at, v| {
            let (Some(col), Some(&kind)) = (buffers.get_mut(at), c.kinds.get(at)) else {
                return Err(format!(
                    "the field {} appeared between the export's two reads of the data",
                    c.paths.get(at).map_or("?", |p| p.as_str())
                ));
            };
            // A field repeated in a document: the first value is the row's.
            if col.defined.len() > row {
                return Ok(());
            }
            match v {
                RawBsonRef::Null | RawBsonRef::Undefined => col.defined.push(0),
                v => {
                    put(&mut col.values, kind, v)?;
                    col.defined.push(1);
                }
            }
            Ok(())
        })?;
        self.rows += 1;
        for col in &mut self.buffers {
            col.defined.resize(self.rows, 0);
        }
        if self.rows == ROW_GROUP {
            self.write_group()?;
        }
        Ok(())
    }

    fn write_group(&mut self) -> CliResult {
        if self.rows == 0 {
            return Ok(());
        }
        let pq = parquet_error;
        let mut group = self.file.next_row_group().map_err(pq)?;
        for col in &mut self.buffers {
            let Some(mut w) = group.next_column().map_err(pq)? else {
                return Err("parquet: fewer columns than the schema".into());
            };
            let defs = Some(col.defined.as_slice());
            match &mut col.values {
                Values::Bool(v) => {
                    w.typed::<BoolType>()
                        .write_batch(v, defs, None)
                        .map_err(pq)?;
                    v.clear();
                }
                Values::Int32(v) => {
                    w.typed::<Int32Type>()
                        .write_batch(v, defs, None)
                        .map_err(pq)?;
                    v.clear();
                }
                Values::Int64(v) => {
                    w.typed::<Int64Type>()
                        .write_batch(v, defs, None)
                        .map_err(pq)?;
                    v.clear();
                }
                Values::Double(v) => {
                    w.typed::<DoubleType>()
                        .write_batch(v, defs, None)
                        .map_err(pq)?;
                    v.clear();
                }
                Values::Text(v) => {
                    w.typed::<ByteArrayType>()
                        .write_batch(&v.take(), defs, None)
                        .map_err(pq)?;
                }
            }
            w.close().map_err(pq)?;
            col.defined.clear();
        }
        group.close().map_err(pq)?;
        self.rows = 0;
        Ok(())
    }

    /// Writes the last row group and the footer.
    pub fn finish(mut self) -> CliResult<W> {
        self.write_group()?;
        self.file.into_inner().map_err(parquet_error)
    }
}

/// A Parquet error; a failed write stays an `io::Error`, so that a closed pipe is known as one.
fn parquet_error(e: ParquetError) -> Box<dyn std::error::Error> {
    match e {
        ParquetError::External(inner) => match inner.downcast::<std::io::Error>() {
            Ok(io) => io,
            Err(other) => format!("parquet: {other}").into(),
        },
        e => format!("parquet: {e}").into(),
    }
}

/// Appends `v` to a column of kind `kind` (which the survey made wide enough for it).
fn put(values: &mut Values, kind: Kind, v: RawBsonRef<'_>) -> Result<(), String> {
    match (values, v) {
        (Values::Bool(out), RawBsonRef::Boolean(b)) => out.push(b),
        (Values::Int32(out), RawBsonRef::Int32(i)) => out.push(i),
        (Values::Int64(out), RawBsonRef::Int64(i)) if kind == Kind::Int64 => out.push(i),
        (Values::Int64(out), RawBsonRef::Int32(i)) if kind == Kind::Int64 => out.push(i.into()),
        (Values::Int64(out), RawBsonRef::DateTime(t)) if kind == Kind::Date => {
            out.push(t.timestamp_millis())
        }
        (Values::Double(out), RawBsonRef::Double(f)) => out.push(f),
        (Values::Double(out), RawBsonRef::Int32(i)) => out.push(i.into()),
        (Values::Double(out), RawBsonRef::Int64(i)) => out.push(i as f64),
        (Values::Text(out), RawBsonRef::String(s)) => out.push(s.as_bytes()),
        (Values::Text(out), RawBsonRef::ObjectId(o)) => {
            let mut hex = [0u8; 24];
            let digit = |d: u8| if d < 10 { b'0' + d } else { b'a' + d - 10 };
            for (pair, b) in hex.chunks_exact_mut(2).zip(o.bytes()) {
                pair.copy_from_slice(&[digit(b >> 4), digit(b & 15)]);
            }
            out.push(&hex)
        }
        (Values::Text(out), v) => {
            let owned = Bson::try_from(v).map_err(|e| format!("a returned value: {e}"))?;
            let mut text = std::mem::take(&mut out.scratch);
            text.clear();
            use std::fmt::Write as _;
            let _ = write!(text, "{}", crate::extjson::relaxed(owned));
            out.push(text.as_bytes());
            out.scratch = text;
        }
        (_, v) => {
            return Err(format!(
                "a {:?} value where the export's first read saw only {kind:?}",
                v.element_type()
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;
    use tsbucket::bson::{doc, oid::ObjectId, DateTime, RawDocumentBuf};

    fn raw(d: tsbucket::bson::Document) -> RawDocumentBuf {
        RawDocumentBuf::try_from(&d).unwrap()
    }

    #[test]
    fn kinds_widen_to_what_holds_every_value() {
        use Kind::*;
        assert_eq!(Int32.join(Int64), Int64);
        assert_eq!(Int64.join(Double), Double);
        assert_eq!(Nothing.join(Date), Date);
        assert_eq!(Date.join(Int64), Text);
        assert_eq!(Bool.join(Int32), Text);
        assert_eq!(Text.join(Nothing), Text);
    }

    #[test]
    fn documents_write_as_rows_that_read_back() {
        let docs = [
            doc! {"t": DateTime::from_millis(1_000), "m": {"host": "a"}, "x": 1, "y": 1.5,
            "ok": true, "o": ObjectId::from_bytes([1; 12]), "arr": [1, 2]},
            doc! {"t": DateTime::from_millis(2_000), "m": {"host": "b", "rack": 7}, "x": 2_i64,
            "y": 2, "ok": tsbucket::bson::Bson::Null, "mixed": "s"},
            doc! {"t": DateTime::from_millis(3_000), "x": 3, "mixed": 4},
        ]
        .map(raw);
        let mut cols = Columns::new(&[]);
        for d in &docs {
            cols.survey(d).unwrap();
        }
        assert_eq!(
            cols.paths,
            ["t", "m.host", "x", "y", "ok", "o", "arr", "m.rack", "mixed"]
        );
        let mut w = ParquetWriter::new(cols, tempfile::tempfile().unwrap()).unwrap();
        for d in &docs {
            w.push(d).unwrap();
        }
        let reader = SerializedFileReader::new(w.finish().unwrap()).unwrap();
        assert_eq!(reader.metadata().file_metadata().num_rows(), 3);
        let rows: Vec<Vec<(String, Field)>> = reader
            .get_row_iter(None)
            .unwrap()
            .map(|r| r.unwrap().into_columns())
            .collect();
        let get = |row: usize, name: &str| {
            rows[row]
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert_eq!(get(0, "t"), Field::TimestampMillis(1_000));
        assert_eq!(get(1, "m.host"), Field::Str("b".into()));
        assert_eq!(get(0, "m.rack"), Field::Null);
        assert_eq!(get(1, "m.rack"), Field::Int(7));
        assert_eq!(get(1, "x"), Field::Long(2));
        assert_eq!(get(1, "y"), Field::Double(2.0));
        assert_eq!(get(1, "ok"), Field::Null);
        assert_eq!(get(0, "o"), Field::Str("01".repeat(12)));
        assert_eq!(get(0, "arr"), Field::Str("[1,2]".into()));
        assert_eq!(get(2, "mixed"), Field::Str("4".into()));
        assert_eq!(get(2, "y"), Field::Null);
    }

    #[test]
    fn chosen_fields_are_the_columns_in_their_order() {
        let d = raw(doc! {"a": 1, "b": {"c": "x"}, "d": 2});
        let mut cols = Columns::new(&["d".to_string(), "b.c".to_string(), "zz".to_string()]);
        cols.survey(&d).unwrap();
        assert_eq!(cols.paths, ["d", "b.c", "zz"]);
        assert_eq!(cols.kinds, [Kind::Int32, Kind::Text, Kind::Nothing]);
        let mut w = ParquetWriter::new(cols, tempfile::tempfile().unwrap()).unwrap();
        w.push(&d).unwrap();
        let reader = SerializedFileReader::new(w.finish().unwrap()).unwrap();
        let row = reader.get_row_iter(None).unwrap().next().unwrap().unwrap();
        assert_eq!(
            row.into_columns(),
            vec![
                ("d".to_string(), Field::Int(2)),
                ("b.c".to_string(), Field::Str("x".into())),
                ("zz".to_string(), Field::Null),
            ]
        );
    }
}
