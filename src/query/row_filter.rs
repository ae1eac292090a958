//! Testing a bucket's rows against a filter on decoded columns instead of row documents.
//!
//! Conjuncts on top-level measurement fields (the time field included) are tested column by
//! column, with plain comparisons when column and operand are numbers or dates; meta conjuncts
//! once per bucket, or per row where rows carry their own meta values; anything else (`$or`,
//! dotted measurement paths, bookkeeping fields) row by row on the columns it reads, without
//! building documents. The answers are those of [`Filter::matches`] on the unpacked
//! measurements.

use super::columns::Col;
use super::filter::{Fields, Filter, Pred};
use super::plan::BucketStats;
use super::slots::SlotsRef;
use crate::catalog::is_hidden;
use crate::order::{cmp_bson, cmp_int_double, type_rank};
use crate::segment::BoundRef;
use bson::{Bson, Document};
use std::borrow::Cow;
use std::cmp::Ordering;

enum Conj {
    /// Reads only the meta field.
    Meta(Filter),
    /// A predicate on a top-level measurement field: `columns[col]`.
    Column { col: usize, pred: Pred },
    /// Anything else, tested row by row on the columns it reads (`columns[c]` for each `c`)
    /// and the meta value.
    Rows { filter: Filter, cols: Vec<usize> },
}

/// A filter split for column-wise testing.
pub struct RowFilter {
    conjuncts: Vec<Conj>,
    /// Columns the conjuncts read.
    pub columns: Vec<String>,
    /// Some conjunct is tested row by row ([`Conj::Rows`]).
    pub needs_rows: bool,
    /// Some conjunct reads the meta field (see [`RowFilter::reads_meta`]).
    reads_meta: bool,
    meta_field: Option<String>,
}

/// One row of a bucket's decoded columns, as [`Filter::matches_row`] reads it.
struct ColRow<'a> {
    names: &'a [String],
    meta_field: Option<&'a str>,
    meta: Option<Cow<'a, Bson>>,
    /// The row's value of each of `names` that the conjunct reads.
    values: Vec<Option<Cow<'a, Bson>>>,
}

impl Fields for ColRow<'_> {
    fn field(&self, name: &str) -> Option<&Bson> {
        if self.meta_field == Some(name) {
            return self.meta.as_deref();
        }
        let i = self.names.iter().position(|n| n == name)?;
        self.values.get(i)?.as_deref()
    }
}

fn under(path: &str, field: &str) -> bool {
    path == field || path.strip_prefix(field).is_some_and(|r| r.starts_with('.'))
}

impl RowFilter {
    /// Splits `filter` for a collection with this meta field.
    pub fn new(filter: &Filter, meta_field: Option<&str>) -> RowFilter {
        let mut rf = RowFilter {
            conjuncts: Vec::new(),
            columns: Vec::new(),
            needs_rows: false,
            reads_meta: false,
            meta_field: meta_field.map(str::to_string),
        };
        for c in filter.conjuncts() {
            let mut paths = Vec::new();
            c.paths(&mut paths);
            if let Some(m) = meta_field {
                rf.reads_meta |= paths.iter().any(|p| under(p, m));
                if !paths.is_empty() && paths.iter().all(|p| under(p, m)) {
                    rf.conjuncts.push(Conj::Meta(c.clone()));
                    continue;
                }
            }
            match c {
                Filter::Field { path, pred }
                    if !path.contains('.')
                        && !is_hidden(path)
                        && meta_field.is_none_or(|m| !under(path, m)) =>
                {
                    let col = rf.column(path);
                    rf.conjuncts.push(Conj::Column {
                        col,
                        pred: pred.clone(),
                    });
                }
                _ => {
                    // The measurement fields it reads; bookkeeping columns are no fields of
                    // the measurements, and read as missing.
                    let mut cols = Vec::new();
                    for p in &paths {
                        let head = p.split('.').next().unwrap_or(p);
                        if meta_field != Some(head) && !is_hidden(head) {
                            let col = rf.column(head);
                            if !cols.contains(&col) {
                                cols.push(col);
                            }
                        }
                    }
                    rf.needs_rows = true;
                    rf.conjuncts.push(Conj::Rows {
                        filter: c.clone(),
                        cols,
                    });
                }
            }
        }
        rf
    }

    /// The position of column `name` in [`RowFilter::columns`], added if new.
    fn column(&mut self, name: &str) -> usize {
        match self.columns.iter().position(|x| x == name) {
            Some(i) => i,
            None => {
                self.columns.push(name.to_string());
                self.columns.len() - 1
            }
        }
    }

    /// True when the conjuncts read the meta field: buckets whose rows carry their own meta
    /// values then need them ([`RowFilter::select`]'s `row_meta`).
    pub fn reads_meta(&self) -> bool {
        self.reads_meta
    }


    /// False when the bucket's `control.min/max` prove that no row satisfies some column
    /// conjunct (the field is absent from every row, or its range misses the operand).
    pub fn may_match(&self, st: &BucketStats<'_>) -> bool {
        self.conjuncts.iter().all(|c| match c {
            Conj::Column { col, pred } => {
                self.columns.get(*col).is_none_or(|f| match st.bound(f) {
                    BoundRef::Range(lo, hi) => range_may_match(pred, Some(lo), Some(hi)),
                    BoundRef::Absent => range_may_match(pred, None, None),
                    BoundRef::Partial => true,
                })
            }
            Conj::Meta(_) | Conj::Rows { .. } => true,
        })
    }

    /// Bit `i` set when conjunct `i` holds in every row of a bucket with these statistics:
    /// a conjunct on the time field (which every row has) whose bounds hold the bucket's time
    /// range (`control.min` is a lower bound).
    pub fn settled(&self, st: &BucketStats<'_>, time_field: &str) -> u64 {
        let mut bits = 0u64;
        let mut range: Option<(Option<Bson>, Option<Bson>)> = None;
        for (i, c) in self.conjuncts.iter().enumerate().take(64) {
            let Conj::Column { col, pred } = c else {
                continue;
            };
            if self.columns.get(*col).is_none_or(|f| f != time_field) {
                continue;
            }
            // The time range the summary read at open, else from `control`.
            let (lo, hi) = range.get_or_insert_with(|| match st.time_range(time_field) {
                (Some(lo), Some(hi)) => (
                    Some(Bson::DateTime(bson::DateTime::from_millis(lo))),
                    Some(Bson::DateTime(bson::DateTime::from_millis(hi))),
                ),
                _ => (
                    st.min_of(time_field).cloned(),
                    st.max_of(time_field).cloned(),
                ),
            });
            if range_holds(pred, lo.as_ref(), hi.as_ref()) {
                bits |= 1 << i;
            }
        }
        bits
    }

    /// True when some conjunct not in `settled` reads column `col`.
    pub fn reads_column(&self, col: usize, settled: u64) -> bool {
        self.conjuncts.iter().enumerate().any(|(i, c)| {
            let reads = match c {
                Conj::Column { col: x, .. } => *x == col,
                Conj::Rows { cols, .. } => cols.contains(&col),
                Conj::Meta(_) => false,
            };
            reads && (i >= 64 || settled & (1 << i) == 0)
        })
    }

    /// How many rows [`RowFilter::select`] would return. When all that is left to test is one
    /// comparison of integers or dates, they are counted in one pass over the column instead
    /// of being listed and then filtered.
    pub fn count(
        &self,
        meta: Option<&Bson>,
        row_meta: Option<&Col>,
        cols: &[&Col],
        rows: usize,
        settled: u64,
    ) -> usize {
        let mut left = self
            .conjuncts
            .iter()
            .enumerate()
            .filter(|(i, _)| *i >= 64 || settled & (1 << i) == 0);
        if let (Some((_, Conj::Column { col, pred })), None) = (left.next(), left.next()) {
            let col = cols.get(*col).copied().unwrap_or(&Col::Missing);
            let ne = matches!(pred, Pred::Ne(_));
            let exact = match (col, simple(pred).map(|s| s.1)) {
                (Col::Int32(v) | Col::Int64(v), Some(Bson::Int32(x))) => {
                    Some((v.view(), i64::from(*x)))
                }
                (Col::Int32(v) | Col::Int64(v), Some(Bson::Int64(x))) => Some((v.view(), *x)),
                (Col::Date(v), Some(Bson::DateTime(x))) => Some((v.view(), x.timestamp_millis())),
                _ => None,
            };
            if let Some(n) = exact.and_then(|(v, x)| count_ordered(v, rows, x, pred, ne)) {
                return n;
            }
        }
        self.select(meta, row_meta, cols, rows, settled).len()
    }

    /// The rows (in order) of a bucket of `rows` rows that match, from its meta value, the
    /// rows' own meta values where they have them (`row_meta`, the bucket's bookkeeping
    /// column of them, when [`RowFilter::reads_meta`]), and the decoded `cols` (aligned
    /// with [`RowFilter::columns`]); conjuncts in `settled` are known to hold and not tested.
    pub fn select(
        &self,
        meta: Option<&Bson>,
        row_meta: Option<&Col>,
        cols: &[&Col],
        rows: usize,
        settled: u64,
    ) -> Vec<u32> {
        // Row `r`'s meta value: its own where it has one, else the bucket's.
        let meta_of = |r: u32| -> Option<Cow<'_, Bson>> {
            row_meta
                .and_then(|c| c.value(r as usize))
                .or(meta.map(Cow::Borrowed))
        };
        let mut sel: Vec<u32> = (0..rows as u32).collect();
        for (i, c) in self.conjuncts.iter().enumerate() {
            if i < 64 && settled & (1 << i) != 0 {
                continue;
            }
            match c {
                Conj::Meta(f) if row_meta.is_some() => sel.retain(|&r| {
                    let row = ColRow {
                        names: &[],
                        meta_field: self.meta_field.as_deref(),
                        meta: meta_of(r),
                        values: Vec::new(),
                    };
                    f.matches_row(&row)
                }),
                Conj::Meta(f) => {
                    let mut d = Document::new();
                    if let (Some(m), Some(v)) = (&self.meta_field, meta) {
                        d.insert(m.clone(), v.clone());
                    }
                    if !f.matches(&d) {
                        sel.clear();
                    }
                }
                Conj::Rows { filter, cols: read } => {
                    let mut row = ColRow {
                        names: &self.columns,
                        meta_field: self.meta_field.as_deref(),
                        meta: None,
                        values: Vec::new(),
                    };
                    sel.retain(|&r| {
                        row.meta = meta_of(r);
                        row.values.clear();
                        row.values.resize(self.columns.len(), None);
                        for &k in read {
                            if let (Some(slot), Some(col)) = (row.values.get_mut(k), cols.get(k)) {
                                *slot = col.value(r as usize);
                            }
                        }
                        filter.matches_row(&row)
                    });
                }
                Conj::Column { col, pred } => {
                    let col = cols.get(*col).copied().unwrap_or(&Col::Missing);
                    retain(&mut sel, col, pred);
                }
            }
            if sel.is_empty() {
                break;
            }
        }
        sel
    }
}

/// `Some(body)` with `f` bound to the test of an `i64` against `x` that comparison `pred`
/// makes; `None` when `pred` is not a comparison. One expansion per operator, so that the
/// comparison is inlined in each loop rather than called through a pointer for every row.
macro_rules! with_comparison {
    ($pred:expr, $x:expr, |$f:ident| $body:expr) => {{
        let x: i64 = $x;
        match $pred {
            Pred::Eq(_) => {
                let $f = |a: i64| a == x;
                Some($body)
            }
            Pred::Ne(_) => {
                let $f = |a: i64| a != x;
                Some($body)
            }
            Pred::Gt(_) => {
                let $f = |a: i64| a > x;
                Some($body)
            }
            Pred::Gte(_) => {
                let $f = |a: i64| a >= x;
                Some($body)
            }
            Pred::Lt(_) => {
                let $f = |a: i64| a < x;
                Some($body)
            }
            Pred::Lte(_) => {
                let $f = |a: i64| a <= x;
                Some($body)
            }
            _ => None,
        }
    }};
}

/// The rows of `v` (a bucket of `rows` rows) whose value compares with `x` as `pred` asks,
/// a missing value counting when `ne`; `None` when `pred` is not a comparison.
fn count_ordered(
    v: SlotsRef<'_, i64>,
    rows: usize,
    x: i64,
    pred: &Pred,
    ne: bool,
) -> Option<usize> {
    fn count(v: SlotsRef<'_, i64>, rows: usize, ne: bool, f: impl Fn(i64) -> bool) -> usize {
        let v = v.slice(0..rows).unwrap_or(v);
        let hits = match v {
            SlotsRef::Dense(d) => d.iter().filter(|&&a| f(a)).count(),
            SlotsRef::Rows(o) => o.iter().filter(|a| a.map_or(ne, &f)).count(),
        };
        // Rows past the column's end have no value.
        hits + if ne { rows - v.len() } else { 0 }
    }
    with_comparison!(pred, x, |f| count(v, rows, ne, f))
}

/// A comparison operator and operand that plain number or date comparisons can test.
/// Which orderings of value against operand satisfy a comparison.
type Accept = fn(Ordering) -> bool;

fn simple(pred: &Pred) -> Option<(Accept, &Bson)> {
    let (op, x): (Accept, &Bson) = match pred {
        Pred::Eq(x) => (|o| o == Ordering::Equal, x),
        Pred::Ne(x) => (|o| o != Ordering::Equal, x),
        Pred::Gt(x) => (|o| o == Ordering::Greater, x),
        Pred::Gte(x) => (|o| o != Ordering::Less, x),
        Pred::Lt(x) => (|o| o == Ordering::Less, x),
        Pred::Lte(x) => (|o| o != Ordering::Greater, x),
        _ => return None,
    };
    let ok = match x {
        Bson::Int32(_) | Bson::Int64(_) | Bson::DateTime(_) => true,
        Bson::Double(d) => !d.is_nan(),
        _ => false,
    };
    ok.then_some((op, x))
}

/// BSON order between numbers with NaN lowest, as `cmp_bson` does for `f64` pairs.
fn cmp_f64(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

fn retain(sel: &mut Vec<u32>, col: &Col, pred: &Pred) {
    if let Pred::All(ps) = pred {
        for p in ps {
            retain(sel, col, p);
        }
        return;
    }
    // A missing value satisfies only $ne (and the generic predicates below decide the rest).
    let ne = matches!(pred, Pred::Ne(_));
    if let Some((op, x)) = simple(pred) {
        let int_x = match x {
            Bson::Int32(i) => Some(i64::from(*i)),
            Bson::Int64(i) => Some(*i),
            _ => None,
        };
        // Integers and dates against an operand of their kind: exact comparisons.
        let exact = match (col, x) {
            (Col::Int32(v) | Col::Int64(v), _) => int_x.map(|x| (v.view(), x)),
            (Col::Date(v), Bson::DateTime(x)) => Some((v.view(), x.timestamp_millis())),
            _ => None,
        };
        if let Some((v, x)) = exact {
            if retain_ordered(sel, v, x, pred, ne) {
                return;
            }
        }
        match (col, x) {
            (Col::Int32(v) | Col::Int64(v), Bson::Double(x)) => {
                sel.retain(|&r| v.get(r as usize).map_or(ne, |a| op(cmp_int_double(a, *x))));
                return;
            }
            (Col::Double(v), _) if type_rank(x) == 10 => {
                // MongoDB: a NaN value satisfies no comparison with a number but `$ne`.
                let ord = |a: f64| match (x, int_x) {
                    (Bson::Double(d), _) => cmp_f64(a, *d),
                    (_, Some(i)) => cmp_int_double(i, a).reverse(),
                    _ => Ordering::Equal,
                };
                sel.retain(|&r| {
                    v.get(r as usize)
                        .map_or(ne, |a| if a.is_nan() { ne } else { op(ord(a)) })
                });
                return;
            }
            _ => {}
        }
    }
    let vals = col.values();
    sel.retain(|&r| match vals.get(r as usize) {
        Some(v) => pred.matches(&[&v]),
        None => pred.matches(&[]),
    });
}

/// Keeps the rows of `sel` whose value in `v` compares with `x` as `pred` (a comparison)
/// asks; a missing value is kept when `ne`. False (and `sel` unchanged) when `pred` is not a
/// comparison.
fn retain_ordered(sel: &mut Vec<u32>, v: SlotsRef<'_, i64>, x: i64, pred: &Pred, ne: bool) -> bool {
    fn keep(sel: &mut Vec<u32>, v: SlotsRef<'_, i64>, ne: bool, f: impl Fn(i64) -> bool) {
        match v {
            SlotsRef::Dense(d) => sel.retain(|&r| d.get(r as usize).copied().map_or(ne, &f)),
            SlotsRef::Rows(o) => {
                sel.retain(|&r| o.get(r as usize).copied().flatten().map_or(ne, &f))
            }
        }
    }
    with_comparison!(pred, x, |f| keep(sel, v, ne, f)).is_some()
}

/// True when every date in `[min, max]` satisfies `pred` (comparisons with a date operand).
fn range_holds(pred: &Pred, min: Option<&Bson>, max: Option<&Bson>) -> bool {
    let (Some(Bson::DateTime(lo)), Some(Bson::DateTime(hi))) = (min, max) else {
        return false;
    };
    let ok = |p: &Pred| {
        let (lo, hi) = (lo.timestamp_millis(), hi.timestamp_millis());
        match p {
            Pred::Gt(Bson::DateTime(x)) => lo > x.timestamp_millis(),
            Pred::Gte(Bson::DateTime(x)) => lo >= x.timestamp_millis(),
            Pred::Lt(Bson::DateTime(x)) => hi < x.timestamp_millis(),
            Pred::Lte(Bson::DateTime(x)) => hi <= x.timestamp_millis(),
            _ => false,
        }
    };
    match pred {
        Pred::All(ps) => ps.iter().all(ok),
        p => ok(p),
    }
}

/// False when no value in `[min, max]` (scalars of one type class) satisfies `pred`, or the
/// field is absent (`min`/`max` missing) and `pred` needs a value.
fn range_may_match(pred: &Pred, min: Option<&Bson>, max: Option<&Bson>) -> bool {
    if let Pred::All(ps) = pred {
        return ps.iter().all(|p| range_may_match(p, min, max));
    }
    if matches!(pred, Pred::Ne(_)) {
        return true;
    }
    let Some((_, x)) = simple(pred) else {
        return true;
    };
    let (Some(lo), Some(hi)) = (min, max) else {
        // No row has the field: a comparison with a number or date fails everywhere.
        return false;
    };
    if matches!(lo, Bson::Document(_) | Bson::Array(_))
        || matches!(hi, Bson::Document(_) | Bson::Array(_))
    {
        return true;
    }
    if type_rank(lo) != type_rank(x) || type_rank(hi) != type_rank(x) {
        return false;
    }
    let (below, above) = (cmp_bson(hi, x), cmp_bson(lo, x));
    match pred {
        Pred::Eq(_) => below != Ordering::Less && above != Ordering::Greater,
        Pred::Gt(_) => below == Ordering::Greater,
        Pred::Gte(_) => below != Ordering::Less,
        Pred::Lt(_) => above == Ordering::Less,
        Pred::Lte(_) => above != Ordering::Greater,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::slots::Slots;
    use bson::{doc, DateTime};

    fn docs_for(col: &Col, rows: usize, name: &str) -> Vec<Document> {
        (0..rows)
            .map(|r| {
                let mut d = Document::new();
                if let Some(v) = col.values().get(r) {
                    d.insert(name, v);
                }
                d
            })
            .collect()
    }

    #[test]
    fn column_tests_agree_with_document_matching() {
        let cols = [
            Col::Int32(vec![Some(1), None, Some(90), Some(91), Some(-5)].into()),
            Col::Int64(vec![Some(1), None, Some(90), Some(91), Some(-5)].into()),
            Col::Int32(Slots::Dense(vec![1, 89, 90, 91, -5])),
            Col::Int64(Slots::Dense(vec![1, 89, 90, 91, -5])),
            Col::Double(vec![Some(90.5), Some(f64::NAN), None, Some(90.0), Some(-0.0)].into()),
            Col::Double(Slots::Dense(vec![90.5, f64::NAN, 89.0, 90.0, -0.0])),
            Col::Date(vec![Some(5), Some(90), None, Some(91_000), Some(-1)].into()),
            Col::Date(Slots::Dense(vec![5, 90, 89, 91_000, -1])),
            Col::Bson(vec![
                Some("x".into()),
                Some(Bson::Array(vec![Bson::Int32(95)])),
                None,
                Some(Bson::Null),
                Some(Bson::Int32(90)),
            ]),
        ];
        let operands = [
            Bson::Int32(90),
            Bson::Int64(90),
            Bson::Double(90.0),
            Bson::Double(90.5),
            Bson::DateTime(DateTime::from_millis(90)),
            Bson::Null,
            Bson::String("x".into()),
        ];
        for col in &cols {
            // 7 rows: the last two are past the column's end, and have no value.
            let docs = docs_for(col, 7, "f");
            for x in &operands {
                for op in ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"] {
                    let f = Filter::parse(&doc! {"f": {op: x.clone()}}).unwrap();
                    let rf = RowFilter::new(&f, Some("m"));
                    assert!(!rf.needs_rows);
                    for rows in [5, 7] {
                        let got = rf.select(None, None, &[col], rows, 0);
                        let want: Vec<u32> = (0..rows as u32)
                            .filter(|&r| f.matches(&docs[r as usize]))
                            .collect();
                        assert_eq!(got, want, "{col:?} {op} {x} {rows}");
                        let n = rf.count(None, None, &[col], rows, 0);
                        assert_eq!(n, want.len(), "count {col:?} {op} {x} {rows}");
                    }
                }
            }
        }
    }

    #[test]
    fn rows_with_their_own_meta_values_are_tested_on_them() {
        // The bucket's meta value, and rows 1 and 2 with their own (the fields in the other
        // order, which equality tells apart).
        let bucket = Bson::Document(doc! {"h": "a", "r": 1});
        let own = Col::Bson(vec![
            None,
            Some(Bson::Document(doc! {"r": 1, "h": "a"})),
            Some(Bson::Document(doc! {"r": 1, "h": "a"})),
            None,
        ]);
        let x = Col::Int32(Slots::Dense(vec![1, 2, 9, 9]));
        // Row by row: `$or` of the meta value and a column.
        let f = Filter::parse(&doc! {"$or": [{"m": {"r": 1, "h": "a"}}, {"x": {"$gt": 5}}]})
            .unwrap();
        let rf = RowFilter::new(&f, Some("m"));
        assert!(rf.needs_rows && rf.reads_meta());
        assert_eq!(rf.columns, vec!["x".to_string()]);
        assert_eq!(rf.select(Some(&bucket), Some(&own), &[&x], 4, 0), vec![1, 2, 3]);
        assert_eq!(rf.select(Some(&bucket), None, &[&x], 4, 0), vec![2, 3]);
        // A meta conjunct alone: per row when rows have their own values.
        let f = Filter::parse(&doc! {"m": {"h": "a", "r": 1}}).unwrap();
        let rf = RowFilter::new(&f, Some("m"));
        assert_eq!(rf.select(Some(&bucket), Some(&own), &[], 4, 0), vec![0, 3]);
        assert_eq!(rf.count(Some(&bucket), Some(&own), &[], 4, 0), 2);
        // A bookkeeping column is no field of the measurements: it reads as missing.
        let hidden = crate::bucket::META_COLUMN;
        let f = Filter::parse(&doc! {"$or": [{hidden: {"$exists": true}}, {"x": 2}]}).unwrap();
        let rf = RowFilter::new(&f, Some("m"));
        assert_eq!(rf.columns, vec!["x".to_string()]);
        assert_eq!(rf.select(Some(&bucket), Some(&own), &[&x], 4, 0), vec![1]);
    }

    #[test]
    fn meta_conjuncts_are_decided_per_bucket_and_or_needs_rows() {
        let f = Filter::parse(&doc! {"m.h": "a", "f": {"$gt": 1}}).unwrap();
        let rf = RowFilter::new(&f, Some("m"));
        assert!(rf.reads_meta() && !rf.needs_rows);
        assert_eq!(rf.columns, vec!["f".to_string()]);
        let c = Col::Int64(Slots::Dense(vec![1, 2]));
        let col = [&c];
        let a = Bson::Document(doc! {"h": "a"});
        let b = Bson::Document(doc! {"h": "b"});
        assert_eq!(rf.select(Some(&a), None, &col, 2, 0), vec![1]);
        assert!(rf.select(Some(&b), None, &col, 2, 0).is_empty());
        // Two conjuncts left: counted from the listed rows; the meta one settled: in one pass.
        assert_eq!(rf.count(Some(&b), None, &col, 2, 0), 0);
        let meta_bit = rf
            .conjuncts
            .iter()
            .position(|c| matches!(c, Conj::Meta(_)))
            .unwrap();
        assert_eq!(rf.count(Some(&b), None, &col, 2, 1 << meta_bit), 1);
        let f = Filter::parse(&doc! {"$or": [{"f": 1}, {"g": 2}]}).unwrap();
        assert!(RowFilter::new(&f, Some("m")).needs_rows);
    }

    #[test]
    fn time_windows_holding_a_bucket_need_no_test() {
        let t = |ms: i64| Bson::DateTime(DateTime::from_millis(ms));
        let f = Filter::parse(&doc! {"t": {"$gte": t(100), "$lt": t(200)}, "x": 1}).unwrap();
        let rf = RowFilter::new(&f, None);
        let st = |lo: i64, hi: i64| {
            let (min, max) = (doc! {"t": t(lo)}, doc! {"t": t(hi)});
            rf.settled(&BucketStats::new(None, &min, &max, 2), "t")
        };
        assert_eq!(st(100, 199), 1);
        assert_eq!(st(99, 150), 0);
        assert_eq!(st(150, 200), 0);
        let time_col = rf.columns.iter().position(|c| c == "t").unwrap();
        assert!(!rf.reads_column(time_col, 1));
        assert!(rf.reads_column(time_col, 0));
    }

    #[test]
    fn statistics_rule_out_buckets() {
        let f = Filter::parse(&doc! {"f": {"$gt": 90}}).unwrap();
        let rf = RowFilter::new(&f, None);
        let st = |min: Document, max: Document| {
            let (min, max) = (Box::leak(Box::new(min)), Box::leak(Box::new(max)));
            rf.may_match(&BucketStats::new(None, min, max, 2))
        };
        assert!(!st(doc! {"f": 1}, doc! {"f": 90}));
        assert!(st(doc! {"f": 1}, doc! {"f": 90.5}));
        assert!(!st(doc! {}, doc! {}));
        assert!(!st(doc! {"f": "a"}, doc! {"f": "z"}));
        assert!(st(doc! {"f": [1]}, doc! {"f": [100]}));
        let f = Filter::parse(&doc! {"f": {"$gte": 2, "$lt": 5}}).unwrap();
        let rf = RowFilter::new(&f, None);
        let (min, max) = (doc! {"f": 5}, doc! {"f": 9});
        assert!(!rf.may_match(&BucketStats::new(None, &min, &max, 2)));
    }
}
