//! Where a bucket to scan lives, in memory or in a segment, and the one way operators read
//! either: its statistics ([`stats`]) and the columns asked for, typed as [`Col`]s whichever
//! it is ([`load`]) or in the form their bytes store ([`load_stored`]). The buckets a read
//! chose ([`Scans`]).

use super::columns::Col;
use super::plan::{BucketStats, Verdict};
use super::slots::Slots;
use crate::bucket::{BucketData, Column};
use super::columns::NameIds;
use crate::codec::{decode_date_progression, decode_date_runs, int_magnitude_bound};
use crate::error::{Error, Result};
use crate::catalog::column::Data;
use crate::catalog::{ColumnRef, OpenCopy};
use crate::segment::Segment;
use bson::Bson;
use std::sync::Arc;

/// A bucket in memory as a read sees it: an open bucket's contents with its values in typed
/// vectors, or a closed bucket waiting to be flushed, whose values are `Bson` already.
pub struct MemBucket {
    /// Statistics, meta value and field orders; for a closed bucket, its values too.
    data: Arc<BucketData>,
    /// An open bucket's columns.
    open: Option<OpenCopy>,
}

impl MemBucket {
    /// A closed bucket, shared with the catalog.
    pub fn closed(data: Arc<BucketData>) -> MemBucket {
        MemBucket { data, open: None }
    }

    /// An open bucket's contents ([`crate::catalog::BucketBuilder::copy_for_read`]).
    pub fn open(copy: OpenCopy) -> MemBucket {
        MemBucket {
            data: Arc::clone(&copy.head),
            open: Some(copy),
        }
    }

    /// Statistics, meta value, field orders and counts (`columns` is empty for an open
    /// bucket: see [`MemBucket::names`] and [`MemBucket::column`]).
    pub fn head(&self) -> &BucketData {
        &self.data
    }

    /// The column names by stored position.
    pub fn names(&self) -> Vec<&str> {
        match &self.open {
            Some(o) => o.names(),
            None => self.data.columns.iter().map(|c| c.name.as_str()).collect(),
        }
    }

    /// The column `name`, typed where its values share a numeric or date type
    /// ([`Col::Missing`] when the bucket has none).
    pub fn column(&self, name: &str) -> Col {
        let rows = self.data.count as usize;
        if let Some(o) = &self.open {
            return o.column(name).map_or(Col::Missing, |c| col_of(c, rows));
        }
        match self.data.columns.iter().find(|c| c.name == name) {
            Some(c) => Col::from_bson(c.values.clone()),
            None => Col::Missing,
        }
    }

    /// True when every row has field `name`.
    pub fn dense(&self, name: &str) -> bool {
        let rows = self.data.count as usize;
        if let Some(o) = &self.open {
            return o.column(name).is_some_and(|c| match c.rows {
                None => c.data.len() == rows,
                Some(at) => at.len() == rows,
            });
        }
        self.data
            .columns
            .iter()
            .any(|c| c.name == name && c.values.iter().all(Option::is_some))
    }

    /// The whole bucket with its values as `Bson`, for the readers that unpack documents.
    pub fn to_data(&self) -> Arc<BucketData> {
        let Some(o) = &self.open else {
            return Arc::clone(&self.data);
        };
        let rows = self.data.count as usize;
        let mut b = BucketData::clone(&self.data);
        b.columns = o
            .names()
            .into_iter()
            .map(|name| {
                let c = self.column(name);
                Column {
                    name: name.to_string(),
                    values: (0..rows).map(|r| c.value(r).map(|v| v.into_owned())).collect(),
                }
            })
            .collect();
        Arc::new(b)
    }
}

/// An open bucket's column as a [`Col`] of `rows` rows: numbers and dates are copied as they
/// lie, the other values built as `Bson`.
fn col_of(c: ColumnRef<'_>, rows: usize) -> Col {
    fn slots<T: Copy>(v: Vec<T>, at: Option<&[u32]>, rows: usize) -> Slots<T> {
        match at {
            None if v.len() == rows => Slots::Dense(v),
            None => {
                let mut out: Vec<Option<T>> = v.into_iter().map(Some).collect();
                out.resize(rows, None);
                Slots::Rows(out)
            }
            Some(at) => {
                let mut out = vec![None; rows];
                for (x, &r) in v.into_iter().zip(at) {
                    if let Some(slot) = out.get_mut(r as usize) {
                        *slot = Some(x);
                    }
                }
                Slots::Rows(out)
            }
        }
    }
    match c.data {
        Data::I32(v) => Col::Int32(slots(v.iter().map(|&x| i64::from(x)).collect(), c.rows, rows)),
        Data::I64(v) => Col::Int64(slots(v.clone(), c.rows, rows)),
        Data::F64(v) => Col::Double(slots(v.clone(), c.rows, rows)),
        Data::Date(v) => Col::Date(slots(v.clone(), c.rows, rows)),
        other => {
            let mut out: Vec<Option<Bson>> = vec![None; rows];
            for i in 0..other.len() {
                let r = c.rows.map_or(Some(i), |at| at.get(i).map(|&r| r as usize));
                if let Some(slot) = r.and_then(|r| out.get_mut(r)) {
                    *slot = Some(other.get(i));
                }
            }
            Col::from_bson(out)
        }
    }
}

fn missing_bucket(i: u32) -> Error {
    Error::BadValue(format!(
        "bucket {i} vanished from its segment during a read"
    ))
}

/// A bucket's statistics, read without loading its data.
pub fn stats<'a>(src: &Source<'a>) -> Result<BucketStats<'a>> {
    Ok(match *src {
        Source::Mem(m) => {
            let b = m.head();
            BucketStats::new(b.meta.as_ref(), &b.min, &b.max, b.count)
        }
        Source::Seg(seg, i) => {
            let s = seg
                .buckets()
                .get(i as usize)
                .ok_or_else(|| missing_bucket(i))?;
            BucketStats::of_segment(seg, i as usize, s)
        }
    })
}

/// True when every row of the bucket has field `name`.
pub fn in_every_row(src: &Source, name: &str) -> bool {
    match src {
        Source::Seg(seg, i) => seg.column_in_every_row(*i as usize, name),
        Source::Mem(b) => {
            let Some(col) = b.names().iter().position(|n| *n == name) else {
                return false;
            };
            let shapes = &b.head().shapes;
            !shapes.is_empty() && shapes.iter().all(|s| s.contains(&(col as u32)))
        }
    }
}

/// Decodes the named columns of a bucket (`Col::Missing` where it has none).
pub fn load(src: &Source, names: &[&str]) -> Result<Vec<Col>> {
    match src {
        Source::Seg(seg, i) => Ok(seg
            .read_columns_with(*i as usize, names, Col::decode)?
            .into_iter()
            .map(|c| c.unwrap_or(Col::Missing))
            .collect()),
        Source::Mem(b) => Ok(names.iter().map(|n| b.column(n)).collect()),
    }
}

/// A column as its bucket stores it, for an operator that answers from the stored form
/// without a value per row: dates as runs of equal times or as a regular progression, any
/// other column decoded.
pub enum Stored {
    /// Runs of equal dates `(ms, rows)`.
    Runs(Vec<(i64, u32)>),
    /// Dates at `first + i * step` for row `i`: `(first, step)`.
    Steps(i64, i64),
    /// Decoded ([`Col::Missing`] when the bucket has none), with a bound on its integers'
    /// magnitude when the column's header gives one.
    Col(Col, Option<u64>),
}

impl Stored {
    /// The column of `rows` rows as [`Col::decode`] gives it for the same bytes.
    pub fn into_col(self, rows: usize) -> Col {
        match self {
            Stored::Col(c, _) => c,
            Stored::Steps(first, step) => Col::Date(Slots::Dense(
                (0..rows as i64)
                    .map(|i| first.wrapping_add(step.wrapping_mul(i)))
                    .collect(),
            )),
            Stored::Runs(runs) => Col::Date(Slots::Dense(
                runs.iter()
                    .flat_map(|&(t, n)| std::iter::repeat_n(t, n as usize))
                    .collect(),
            )),
        }
    }
}

/// Which stored forms a reader of [`load_stored`] takes besides decoded values.
#[derive(Clone, Copy, Default)]
pub struct Forms {
    /// Dates as runs of equal times.
    pub runs: bool,
    /// Dates as a regular progression.
    pub steps: bool,
    /// Integers with a bound on their magnitude.
    pub bound: bool,
    /// A column in none of the other forms is not decoded: [`Col::Missing`] stands for it.
    pub no_values: bool,
}

/// The columns `names` of a bucket into `out` (cleared first), each in the first of `forms`
/// its bytes hold, else decoded; `ids` matches the names to each segment's table once.
/// Columns of buckets in memory come decoded.
pub fn load_stored(
    src: &Source,
    names: &[&str],
    ids: &mut NameIds,
    forms: Forms,
    out: &mut Vec<Option<Stored>>,
) -> Result<()> {
    match src {
        Source::Seg(seg, i) => seg.read_ids_into(*i as usize, ids.of(seg, names), out, |data, rows| {
            if forms.runs {
                if let Some(runs) = decode_date_runs(data, rows)? {
                    return Ok(Stored::Runs(runs));
                }
            }
            if forms.steps {
                if let Some((first, step)) = decode_date_progression(data, rows)? {
                    return Ok(Stored::Steps(first, step));
                }
            }
            if forms.no_values {
                return Ok(Stored::Col(Col::Missing, None));
            }
            let bound = forms.bound.then(|| int_magnitude_bound(data, rows)).flatten();
            Ok(Stored::Col(Col::decode(data, rows)?, bound))
        }),
        Source::Mem(_) => {
            out.clear();
            match forms.no_values {
                true => out.extend(names.iter().map(|_| Some(Stored::Col(Col::Missing, None)))),
                false => out.extend(load(src, names)?.into_iter().map(|c| Some(Stored::Col(c, None)))),
            }
            Ok(())
        }
    }
}

/// The column `name` of a bucket as [`load_stored`] gives it ([`Col::Missing`] when the
/// bucket has none).
pub fn load_one(src: &Source, name: &str, forms: Forms) -> Result<Stored> {
    let mut out = Vec::with_capacity(1);
    load_stored(src, &[name], &mut NameIds::default(), forms, &mut out)?;
    Ok(out.pop().flatten().unwrap_or(Stored::Col(Col::Missing, None)))
}

/// Where a bucket to scan lives, borrowed from the [`Scans`] that hold it.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// In memory (open, closed or being flushed).
    Mem(&'a Arc<MemBucket>),
    /// In a segment, by position.
    Seg(&'a Arc<Segment>, u32),
}

/// A bucket chosen by [`crate::query::select::select`] and what its statistics proved, as [`Scans::get`] gives it.
#[derive(Clone, Copy)]
pub struct Scan<'a> {
    /// Where the bucket lives.
    pub src: Source<'a>,
    /// [`Verdict::All`] or [`Verdict::Some`] (pruned buckets are not returned).
    pub verdict: Verdict,
}

/// Where a chosen bucket lives: memory, or a segment of [`Scans`] by number and a position.
#[derive(Clone)]
pub(super) enum Place {
    Mem(Arc<MemBucket>),
    Seg(u32, u32),
}

/// The buckets [`crate::query::select::select`] chose, in order, holding each segment they lie in once:
/// an `Arc` taken and released per bucket cost a sixth of a grouped count over tens of
/// thousands of buckets of one to three rows, all of it on one thread.
#[derive(Clone, Default)]
pub struct Scans {
    pub(super) segments: Vec<Arc<Segment>>,
    pub(super) list: Vec<(Place, Verdict)>,
}

impl Scans {
    /// How many buckets were chosen.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// True when no bucket was chosen.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Chosen bucket `k`.
    pub fn get(&self, k: usize) -> Option<Scan<'_>> {
        let (place, verdict) = self.list.get(k)?;
        let src = match place {
            Place::Mem(b) => Source::Mem(b),
            Place::Seg(seg, i) => Source::Seg(self.segments.get(*seg as usize)?, *i),
        };
        Some(Scan {
            src,
            verdict: *verdict,
        })
    }

    /// The chosen buckets in order.
    pub fn iter(&self) -> impl Iterator<Item = Scan<'_>> {
        (0..self.len()).filter_map(|k| self.get(k))
    }

    /// Asks for the summary of chosen bucket `k` ahead of its use: a scan that answers most
    /// buckets from their summaries alone waits on each one's cache lines otherwise.
    #[inline]
    pub fn prefetch(&self, k: usize) {
        if let Some((Place::Seg(seg, i), _)) = self.list.get(k) {
            if let Some(s) = self
                .segments
                .get(*seg as usize)
                .and_then(|seg| seg.buckets().get(*i as usize))
            {
                let p = std::ptr::from_ref(s).cast::<u8>();
                crate::prefetch::line(p);
                crate::prefetch::line(p.wrapping_add(64));
            }
        }
    }

    /// Where chosen bucket `k` lies: the number of its segment, segments being numbered in
    /// the order their first bucket was chosen, and its position there; `None` for a bucket in
    /// memory (or no bucket `k`).
    pub fn place(&self, k: usize) -> Option<(u32, u32)> {
        match self.list.get(k)? {
            (Place::Seg(seg, i), _) => Some((*seg, *i)),
            (Place::Mem(_), _) => None,
        }
    }

    /// How many segments the chosen buckets lie in.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Segment number `n` (see [`Scans::place`]).
    pub fn segment(&self, n: u32) -> Option<&Arc<Segment>> {
        self.segments.get(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{BucketBuilder, FitLimits};
    use crate::ingest::prepare_batch;
    use crate::schema::Schema;
    use bson::oid::ObjectId;
    use bson::{doc, DateTime, Document};

    fn builder(docs: &[Document]) -> BucketBuilder {
        let schema = Schema::new("t", Some("m"), 3600, 60);
        let (prepared, payload, _) = prepare_batch(1, docs, &schema).unwrap();
        let meta = Some(Bson::Document(doc! {"host": "h1"}));
        let mut b = BucketBuilder::new(ObjectId::from_bytes([1; 12]), 0, meta, "t", Some("m"));
        let limits = FitLimits {
            max_count: 1000,
            max_size: 1 << 20,
            min_count: 10,
            large_max_size: 12 << 20,
        };
        for (i, p) in prepared.iter().enumerate() {
            let raw = p.raw(&payload).unwrap();
            b.try_push(raw, p, 1, i as u32, &limits).unwrap();
        }
        b
    }

    #[test]
    fn an_open_buckets_copy_reads_as_its_snapshot_with_numbers_typed() {
        let t = |s: i64| DateTime::from_millis(s * 1000);
        let m = doc! {"host": "h1"};
        for in_order in [true, false] {
            let at = |i: i64| if in_order { t(i) } else { t(10 - i) };
            let docs = vec![
                doc! {"t": at(0), "m": m.clone(), "a": 1_i64, "b": 1.5, "c": 7_i32, "s": "x"},
                doc! {"t": at(1), "m": m.clone(), "a": 2_i64, "c": 8_i32, "s": "y"},
                // Another field order and the meta in another order: the row keeps its own.
                doc! {"m": {"host": "h1", "dc": "eu"}, "t": at(2), "b": 2.5, "a": 3_i64},
                doc! {"t": at(3), "m": m.clone(), "a": 4_i64, "b": 3.5, "c": 9.5, "d": t(9)},
            ];
            let b = builder(&docs);
            let mem = MemBucket::open(b.copy_for_read());
            let mut want = b.snapshot();
            want.columns
                .retain(|c| c.name != crate::bucket::SEQ_COLUMN && c.name != crate::bucket::IDX_COLUMN);
            assert_eq!(*mem.to_data(), want, "in order: {in_order}");
            assert!(mem.dense("a"));
            assert!(!mem.dense("b"));
            assert_eq!(mem.column("nothing"), Col::Missing);
            let a = mem.column("a");
            let want: Vec<i64> = if in_order { vec![1, 2, 3, 4] } else { vec![4, 3, 2, 1] };
            assert_eq!(a, Col::Int64(Slots::Dense(want)), "in order: {in_order}");
            assert!(matches!(mem.column("b"), Col::Double(Slots::Rows(_))));
            assert!(matches!(mem.column("c"), Col::Bson(_)));
        }
    }
}
