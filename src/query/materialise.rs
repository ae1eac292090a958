//! Measurements rebuilt at the edge of a read: the rows of one bucket that a filter selected,
//! with the projection folded in, as `Document`s or straight into BSON bytes.
//!
//! A row's fields are those of its row shape, in the order they were inserted. What the
//! projection does to each field is decided once per shape and bucket, not per document, and
//! the meta value (the same in every row of most buckets) is projected and encoded once per
//! bucket. Numbers and dates come from typed columns, so a document's bytes are its shape's
//! keys with the values copied between them: no `Bson` value per cell and one allocation per
//! document, or none when documents are appended to one buffer.

use super::columns::Col;
use super::source;
use super::filter::Filter;
use super::options::{Fate, Projection};
use crate::query::row_filter::RowFilter;
use crate::query::source::Source;
use crate::bucket::META_SLOT;
use crate::catalog::{is_hidden, META_COLUMN};
use crate::error::{Error, Result};
use crate::doc::encode::{begin, end, write_value};
use bson::spec::ElementType;
use bson::{Bson, Document};
use crate::segment::Segment;
use bson::oid::ObjectId;
use std::sync::{Arc, OnceLock};

/// What a read returns of each selected row, and how it selects them: shared by the buckets
/// of one read.
pub struct RowOutput {
    row_filter: RowFilter,
    projection: Option<Projection>,
    time_field: String,
    meta_field: Option<String>,
    /// Whether each row's time is wanted apart from the output (a merge in time order).
    times: bool,
}

impl RowOutput {
    /// Rows that match `filter`, returned with `projection` applied.
    pub fn new(
        filter: Filter,
        projection: Option<Projection>,
        time_field: &str,
        meta_field: Option<&str>,
    ) -> RowOutput {
        RowOutput {
            row_filter: RowFilter::new(&filter, meta_field),
            projection,
            time_field: time_field.to_string(),
            meta_field: meta_field.map(str::to_string),
            times: false,
        }
    }

    /// The same, with each selected row's time at hand ([`Selected::time_ms`]) whatever the
    /// projection keeps.
    pub fn with_times(mut self) -> RowOutput {
        self.times = true;
        self
    }

    fn fate(&self, name: &str) -> Fate {
        self.projection.as_ref().map_or(Fate::Keep, |p| p.fate(name))
    }

    /// The matching rows of the bucket at `src`; every row when `whole` (its statistics
    /// proved they all match).
    pub fn select(&self, src: &Source, whole: bool) -> Result<Selected> {
        let names: Vec<String> = match src {
            Source::Mem(b) => b.names().into_iter().map(str::to_string).collect(),
            Source::Seg(seg, i) => seg
                .column_names(*i as usize)?
                .into_iter()
                .map(str::to_string)
                .collect(),
        };
        let st = source::stats(src)?;
        let rows = st.count as usize;
        // Rows carry their own meta values when they differ (in field order, say) from the
        // bucket's.
        let meta_varies = names.iter().any(|n| n == META_COLUMN);
        let meta_fate = self.meta_field.as_deref().map_or(Fate::Drop, |m| self.fate(m));
        // Columns the output reads, by stored position.
        let mut load: Vec<usize> = (0..names.len())
            .filter(|&k| {
                names.get(k).is_some_and(|n| {
                    if is_hidden(n) {
                        n == META_COLUMN && meta_varies && meta_fate != Fate::Drop
                    } else {
                        self.fate(n) != Fate::Drop
                    }
                })
            })
            .collect();
        let time_at = names.iter().position(|n| *n == self.time_field);
        if let Some(k) = time_at.filter(|k| self.times && !load.contains(k)) {
            load.push(k);
        }
        let rf = &self.row_filter;
        let settled = if whole {
            0
        } else {
            rf.settled(&st, &self.time_field)
        };
        // The filter's columns join the output's, so that a column both test and return is
        // decoded once; so do the rows' own meta values when the filter reads them.
        let meta_at = names.iter().position(|n| n == META_COLUMN);
        let mut filter_at: Vec<Option<usize>> = Vec::new();
        if !whole {
            for (c, name) in rf.columns.iter().enumerate() {
                let at = names.iter().position(|n| n == name);
                if let Some(k) = at.filter(|_| rf.reads_column(c, settled)) {
                    if !load.contains(&k) {
                        load.push(k);
                    }
                }
                filter_at.push(at);
            }
            if let Some(k) = meta_at.filter(|k| rf.reads_meta() && !load.contains(k)) {
                load.push(k);
            }
        }
        let load_names: Vec<&str> = load
            .iter()
            .filter_map(|&k| names.get(k).map(String::as_str))
            .collect();
        let mut cols: Vec<Option<Col>> = (0..names.len()).map(|_| None).collect();
        for (&k, col) in load.iter().zip(source::load(src, &load_names)?) {
            if let Some(slot) = cols.get_mut(k) {
                *slot = Some(col);
            }
        }
        let selected: Vec<u32> = if whole {
            (0..rows as u32).collect()
        } else {
            let missing = Col::Missing;
            let refs: Vec<&Col> = filter_at
                .iter()
                .map(|at| {
                    at.and_then(|k| cols.get(k))
                        .and_then(Option::as_ref)
                        .unwrap_or(&missing)
                })
                .collect();
            let own_meta = meta_at
                .filter(|_| rf.reads_meta())
                .and_then(|k| cols.get(k))
                .and_then(Option::as_ref);
            rf.select(st.meta, own_meta, &refs, rows, settled)
        };
        let (shapes, row_shapes) = match src {
            Source::Mem(b) => (b.head().shapes.clone(), b.head().row_shapes.clone()),
            Source::Seg(seg, i) => {
                let (shapes, row_shapes) = seg.shapes_of(*i as usize)?;
                (
                    shapes.into_iter().map(<[u32]>::to_vec).collect(),
                    row_shapes.to_vec(),
                )
            }
        };
        // Only a meta value the output shows is returned per row.
        let meta_at = meta_at.filter(|_| meta_varies && meta_fate != Fate::Drop);
        let row_meta = match meta_at.and_then(|k| cols.get_mut(k)).and_then(Option::take) {
            Some(Col::Bson(v)) => Some(v),
            Some(other) => Some((0..rows).map(|r| cell(&other, r)).collect()),
            None => None,
        };
        // The bucket's meta value as every row without its own shows it, projected once.
        let meta = match (self.meta_field.as_deref(), st.meta, meta_fate) {
            (Some(_), _, Fate::Drop) | (None, _, _) | (_, None, _) => None,
            (Some(_), Some(v), Fate::Keep) => Some(v.clone()),
            (Some(m), Some(v), Fate::Reshape) => self.projection.as_ref().and_then(|p| p.apply_field(m, v)),
        };
        let meta_bytes = match &meta {
            Some(v) => Some(encode(v)?),
            None => None,
        };
        let (id, origin) = match src {
            Source::Mem(b) => (Some(b.head().id), None),
            Source::Seg(seg, i) => (
                seg.buckets().get(*i as usize).map(|s| s.id),
                Some((Arc::clone(seg), *i)),
            ),
        };
        Ok(Selected {
            time_at: time_at.filter(|_| self.times),
            plans: (0..shapes.len()).map(|_| OnceLock::new()).collect(),
            names,
            cols,
            row_meta,
            meta,
            meta_bytes,
            meta_fate,
            shapes,
            row_shapes,
            rows: selected,
            origin,
            id,
        })
    }
}

/// The value bytes of `v` and its element type.
fn encode(v: &Bson) -> Result<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    write_value(v, &mut out, 1).map_err(Error::Internal)?;
    Ok((v.element_type() as u8, out))
}

/// One bucket's selected rows, ready to be returned.
pub struct Selected {
    /// The bucket's column names in stored order (what shapes refer to).
    names: Vec<String>,
    /// The decoded columns, by stored position; `None` where not needed.
    cols: Vec<Option<Col>>,
    /// Each row's own meta value, for a bucket whose rows carry them.
    row_meta: Option<Vec<Option<Bson>>>,
    /// The bucket's meta value, projected; `None` when the output leaves it out.
    meta: Option<Bson>,
    meta_bytes: Option<(u8, Vec<u8>)>,
    meta_fate: Fate,
    shapes: Vec<Vec<u32>>,
    row_shapes: Vec<u32>,
    /// The selected rows, ascending.
    rows: Vec<u32>,
    /// Per shape, built on first use.
    plans: Vec<OnceLock<Option<ShapePlan>>>,
    /// The segment and bucket position, for the error a damaged row gets (taken per
    /// bucket as they are; the message is built only if a row is damaged).
    origin: Option<(Arc<Segment>, u32)>,
    id: Option<ObjectId>,
    /// The time column's stored position, when times were asked for.
    time_at: Option<usize>,
}

/// A row shape's output fields in order.
struct ShapePlan {
    fields: Vec<Field>,
    /// The document with its values unset, when every field of the shape is in every
    /// document: a document is then a copy with values put in place, where inserting field
    /// by field hashed every name and grew the map several times.
    template: Option<Document>,
}

struct Field {
    name: String,
    /// The name as a C string, as BSON keys are written.
    key: Vec<u8>,
    from: From,
}

#[derive(Clone, Copy)]
enum From {
    /// The column at this stored position, kept as it is.
    Column(usize),
    /// The column at this stored position, with the projection applied to each value.
    Reshaped(usize),
    /// The meta field.
    Meta,
}

impl Selected {
    /// The selected rows, ascending.
    pub fn rows(&self) -> &[u32] {
        &self.rows
    }

    /// The decoded column of top-level field `name`; `None` when the bucket has no such
    /// column or it was not decoded.
    pub(crate) fn column(&self, name: &str) -> Option<&Col> {
        let k = self.names.iter().position(|n| n == name)?;
        self.cols.get(k)?.as_ref()
    }

    /// True when the bucket holds a column named `name`.
    pub(crate) fn has_column(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// The bucket's meta value as the output shows it, when no row carries its own: the
    /// same in every row.
    pub(crate) fn shared_meta(&self) -> Option<Option<&Bson>> {
        self.row_meta.is_none().then_some(self.meta.as_ref())
    }

    /// Row `row`'s time in milliseconds, when times were asked for ([`RowOutput::with_times`])
    /// and the row has one.
    pub fn time_ms(&self, row: u32) -> Option<i64> {
        match self.cols.get(self.time_at?)?.as_ref()? {
            Col::Date(v) => v.get(row as usize),
            other => match cell(other, row as usize)? {
                Bson::DateTime(t) => Some(t.timestamp_millis()),
                _ => None,
            },
        }
    }

    /// The error for a row that does not fit the bucket's columns: damage the checks did not
    /// catch in a segment, a bug in a bucket in memory.
    fn mismatch(&self, row: u32) -> Error {
        let id = self.id.map_or_else(String::new, |id| id.to_hex());
        let what = format!("bucket {id} row {row} does not match its column layout");
        match &self.origin {
            Some((seg, i)) => Error::corruption(seg.path(), 0, format!("{what} (bucket {i})")),
            None => Error::Internal(format!("{what} (an open bucket)")),
        }
    }

    fn plan(&self, out: &RowOutput, row: u32) -> Result<&ShapePlan> {
        let shape = if self.row_shapes.is_empty() {
            0
        } else {
            self.row_shapes
                .get(row as usize)
                .map_or(usize::MAX, |&s| s as usize)
        };
        self.plans
            .get(shape)
            .and_then(|p| p.get_or_init(|| self.plan_of(out, shape)).as_ref())
            .ok_or_else(|| self.mismatch(row))
    }

    /// The output fields of shape `shape`; `None` when it names a column the bucket lacks.
    fn plan_of(&self, out: &RowOutput, shape: usize) -> Option<ShapePlan> {
        let mut fields = Vec::new();
        let mut vanishing = false;
        for &slot in self.shapes.get(shape)? {
            let (name, from) = if slot == META_SLOT {
                let Some(m) = out.meta_field.as_deref() else {
                    continue;
                };
                let own = self.row_meta.is_some();
                if self.meta_fate == Fate::Drop || (!own && self.meta.is_none()) {
                    continue;
                }
                // A row's own meta value, projected, may leave nothing, and a row without
                // one shows the bucket's, which may be absent.
                vanishing |= own;
                (m.to_string(), From::Meta)
            } else {
                let k = slot as usize;
                let name = self.names.get(k)?;
                if is_hidden(name) || self.cols.get(k)?.is_none() {
                    continue;
                }
                match out.fate(name) {
                    Fate::Drop => continue,
                    Fate::Keep => (name.clone(), From::Column(k)),
                    Fate::Reshape => {
                        vanishing = true;
                        (name.clone(), From::Reshaped(k))
                    }
                }
            };
            let mut key = Vec::with_capacity(name.len() + 1);
            key.extend_from_slice(name.as_bytes());
            key.push(0);
            fields.push(Field { name, key, from });
        }
        let template = if vanishing {
            None
        } else {
            let mut d = Document::new();
            for f in &fields {
                d.insert(f.name.clone(), Bson::Null);
            }
            // A name twice would leave one entry for two sources.
            (d.len() == fields.len()).then_some(d)
        };
        Some(ShapePlan { fields, template })
    }

    /// Row `row`'s meta value as returned; `None` when the projection leaves nothing of it.
    fn meta_of(&self, out: &RowOutput, row: u32) -> Result<Option<Bson>> {
        // A row has its own meta value only where it differs from the bucket's.
        let own = self
            .row_meta
            .as_ref()
            .and_then(|v| v.get(row as usize))
            .and_then(Option::as_ref);
        let Some(v) = own else {
            return Ok(self.meta.clone());
        };
        Ok(match (self.meta_fate, &out.projection, out.meta_field.as_deref()) {
            (Fate::Reshape, Some(p), Some(m)) => p.apply_field(m, v),
            _ => Some(v.clone()),
        })
    }

    /// The value of field `f` in row `row`; `None` when the projection leaves nothing of it.
    fn value(&self, out: &RowOutput, f: &Field, row: u32) -> Result<Option<Bson>> {
        let (k, reshape) = match f.from {
            From::Meta => return self.meta_of(out, row),
            From::Column(k) => (k, false),
            From::Reshaped(k) => (k, true),
        };
        let v = self
            .cols
            .get(k)
            .and_then(Option::as_ref)
            .and_then(|c| cell(c, row as usize))
            .ok_or_else(|| self.mismatch(row))?;
        Ok(match (&out.projection, reshape) {
            (Some(p), true) => p.apply_field(&f.name, &v),
            _ => Some(v),
        })
    }

    /// Row `row` as a document.
    pub fn document(&self, out: &RowOutput, row: u32) -> Result<Document> {
        let plan = self.plan(out, row)?;
        if let Some(t) = &plan.template {
            let mut d = t.clone();
            for ((_, v), f) in d.iter_mut().zip(&plan.fields) {
                *v = self.value(out, f, row)?.ok_or_else(|| self.mismatch(row))?;
            }
            return Ok(d);
        }
        let mut d = Document::new();
        for f in &plan.fields {
            if let Some(v) = self.value(out, f, row)? {
                d.insert(f.name.clone(), v);
            }
        }
        Ok(d)
    }

    /// Appends row `row` to `buf` as a BSON document.
    pub fn write(&self, out: &RowOutput, row: u32, buf: &mut Vec<u8>) -> Result<()> {
        let plan = self.plan(out, row)?;
        let start = begin(buf);
        let r = row as usize;
        for f in &plan.fields {
            let written = match f.from {
                From::Column(k) => match self.cols.get(k).and_then(Option::as_ref) {
                    Some(c) => write_cell(c, r, &f.key, buf)?,
                    None => false,
                },
                From::Meta if self.row_meta.is_none() => match &self.meta_bytes {
                    Some((t, bytes)) => {
                        buf.push(*t);
                        buf.extend_from_slice(&f.key);
                        buf.extend_from_slice(bytes);
                        true
                    }
                    None => false,
                },
                From::Meta | From::Reshaped(_) => {
                    if let Some(v) = self.value(out, f, row)? {
                        buf.push(v.element_type() as u8);
                        buf.extend_from_slice(&f.key);
                        write_value(&v, buf, 1).map_err(Error::Internal)?;
                    }
                    true
                }
            };
            if !written {
                return Err(self.mismatch(row));
            }
        }
        end(buf, start).map_err(Error::Internal)
    }
}

/// Row `r` of a decoded column as a value.
fn cell(c: &Col, r: usize) -> Option<Bson> {
    c.value(r).map(std::borrow::Cow::into_owned)
}

/// Appends row `r` of column `c` as an element named by the C string `key`; false when the
/// row has no value there.
#[inline]
fn write_cell(c: &Col, r: usize, key: &[u8], buf: &mut Vec<u8>) -> Result<bool> {
    // Typed columns: the element type and the value's little-endian bytes.
    let (t, bytes): (ElementType, [u8; 8]) = match c {
        Col::Missing => return Ok(false),
        Col::Int32(v) => match v.get(r).and_then(|x| i32::try_from(x).ok()) {
            Some(x) => {
                buf.push(ElementType::Int32 as u8);
                buf.extend_from_slice(key);
                buf.extend_from_slice(&x.to_le_bytes());
                return Ok(true);
            }
            None => return Ok(false),
        },
        Col::Int64(v) => match v.get(r) {
            Some(x) => (ElementType::Int64, x.to_le_bytes()),
            None => return Ok(false),
        },
        Col::Date(v) => match v.get(r) {
            Some(x) => (ElementType::DateTime, x.to_le_bytes()),
            None => return Ok(false),
        },
        Col::Double(v) => match v.get(r) {
            Some(x) => (ElementType::Double, x.to_le_bytes()),
            None => return Ok(false),
        },
        Col::Bson(v) => {
            let Some(x) = v.get(r).and_then(Option::as_ref) else {
                return Ok(false);
            };
            buf.push(x.element_type() as u8);
            buf.extend_from_slice(key);
            write_value(x, buf, 1).map_err(Error::Internal)?;
            return Ok(true);
        }
    };
    buf.push(t as u8);
    buf.extend_from_slice(key);
    buf.extend_from_slice(&bytes);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::source::MemBucket;
    use crate::bucket::{BucketData, Column};
    use bson::{doc, DateTime};

    /// Three rows of two shapes; row 1 carries its own meta value (fields reversed) and has
    /// no `x`.
    fn bucket() -> (Arc<BucketData>, Vec<Document>) {
        let ids: Vec<ObjectId> = (0..3).map(|_| ObjectId::new()).collect();
        let t = |ms: i64| Bson::DateTime(DateTime::from_millis(ms));
        let col = |name: &str, values: Vec<Option<Bson>>| Column {
            name: name.to_string(),
            values,
        };
        let meta = doc! {"h": "a", "z": 1};
        let own = doc! {"z": 1, "h": "a"};
        let b = BucketData {
            id: ObjectId::new(),
            meta: Some(Bson::Document(meta.clone())),
            count: 3,
            min: doc! {"t": t(0)},
            max: doc! {"t": t(2000)},
            columns: vec![
                col("_id", ids.iter().map(|i| Some(Bson::ObjectId(*i))).collect()),
                col("t", vec![Some(t(0)), Some(t(1000)), Some(t(2000))]),
                col("x", vec![Some(Bson::Int32(-4)), None, Some(Bson::Int32(9))]),
                col(
                    "s",
                    vec![
                        Some(Bson::Document(doc! {"p": 1, "q": 2})),
                        Some(Bson::Document(doc! {"q": 3})),
                        Some(Bson::Double(0.5)),
                    ],
                ),
                col(META_COLUMN, vec![None, Some(Bson::Document(own.clone())), None]),
            ],
            shapes: vec![vec![0, 1, META_SLOT, 2, 3], vec![0, 1, META_SLOT, 3]],
            row_shapes: vec![0, 1, 0],
            bson_bytes: None,
        };
        let want = vec![
            doc! {"_id": ids[0], "t": t(0), "m": meta.clone(), "x": -4, "s": {"p": 1, "q": 2}},
            doc! {"_id": ids[1], "t": t(1000), "m": own, "s": {"q": 3}},
            doc! {"_id": ids[2], "t": t(2000), "m": meta, "x": 9, "s": 0.5},
        ];
        (Arc::new(b), want)
    }

    /// Every row of the bucket through `output`, as documents and as bytes.
    fn both(b: &Arc<BucketData>, output: &RowOutput) -> (Vec<Document>, Vec<Document>) {
        let b = Arc::new(MemBucket::closed(Arc::clone(b)));
        let sel = output.select(&Source::Mem(&b), false).unwrap();
        let docs = sel
            .rows()
            .iter()
            .map(|&r| sel.document(output, r).unwrap())
            .collect();
        let raw = sel
            .rows()
            .iter()
            .map(|&r| {
                let mut buf = Vec::new();
                sel.write(output, r, &mut buf).unwrap();
                Document::from_reader(&mut buf.as_slice()).unwrap()
            })
            .collect();
        (docs, raw)
    }

    #[test]
    fn rows_come_back_as_inserted_and_as_projected() {
        let (b, full) = bucket();
        for spec in [
            None,
            Some(doc! {"x": 1, "m.h": 1, "_id": 0}),
            Some(doc! {"s.p": 0, "m.z": 0}),
            Some(doc! {"m": 0, "_id": 0}),
            Some(doc! {"s.q": 1, "t": 1}),
            Some(doc! {"_id": 1}),
        ] {
            let p = spec.as_ref().map(|s| Projection::parse(s).unwrap());
            let want: Vec<Document> = full
                .iter()
                .map(|d| match &p {
                    Some(p) => p.apply(d.clone()),
                    None => d.clone(),
                })
                .collect();
            let output = RowOutput::new(Filter::True, p, "t", Some("m"));
            let (docs, raw) = both(&b, &output);
            assert_eq!(docs, want, "{spec:?}");
            assert_eq!(raw, want, "{spec:?} as bytes");
        }
    }

    #[test]
    fn filters_select_rows_on_columns_and_on_row_values() {
        let (b, full) = bucket();
        for (filter, rows) in [
            (doc! {"x": {"$gt": 0}}, vec![2]),
            (doc! {"x": {"$exists": false}}, vec![1]),
            (doc! {"s.q": 3}, vec![1]),
            (doc! {"m.h": "a", "t": {"$lt": DateTime::from_millis(1500)}}, vec![0, 1]),
        ] {
            let f = Filter::parse(&filter).unwrap();
            let output = RowOutput::new(f, None, "t", Some("m"));
            let want: Vec<Document> = rows.iter().map(|&r| full[r].clone()).collect();
            let (docs, raw) = both(&b, &output);
            assert_eq!(docs, want, "{filter}");
            assert_eq!(raw, want, "{filter} as bytes");
        }
    }

    #[test]
    fn a_row_its_columns_do_not_hold_is_an_error() {
        let (b, _) = bucket();
        let mut broken = (*b).clone();
        // Row 0's shape names `x`, which now has no value there.
        if let Some(c) = broken.columns.get_mut(2) {
            c.values[0] = None;
        }
        let b = Arc::new(MemBucket::closed(Arc::new(broken)));
        let output = RowOutput::new(Filter::True, None, "t", Some("m"));
        let sel = output.select(&Source::Mem(&b), false).unwrap();
        assert!(matches!(sel.document(&output, 0), Err(Error::Internal(_))));
        assert!(matches!(
            sel.write(&output, 0, &mut Vec::new()),
            Err(Error::Internal(_))
        ));
    }
}
