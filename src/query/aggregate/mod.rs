//! The columnar path for `[$match*] $group` and `[$match*] $sort {time} $group {$first/$last}`:
//! buckets are aggregated one at a time without building row documents.
//!
//! Takes any `$group` key and accumulator arguments the expression language has. Per bucket,
//! best first:
//! 1. taken whole, key constant over the bucket (it reads only the meta value and time bins
//!    the bucket's times share), every accumulator answerable from `control` (counts,
//!    min/max, pre-computed sums, single-row buckets): no column is decoded (when the key is
//!    one time bin and the accumulators read constants, [`CountLane`] only adds row counts,
//!    including the runs of a bucket whose times span bins);
//! 2. otherwise the needed columns are decoded into typed vectors, rows are tested column-wise
//!    when the bucket needs testing, and consecutive rows of one group feed the accumulators
//!    in one typed loop;
//! 3. a key that reads measurement fields, or meta values that differ by row, finds each
//!    row's group from the row's decoded fields; arguments other than constants, meta paths
//!    and top-level fields are evaluated row by row on them.
//!
//! Buckets are visited in file order (each page is decompressed once) unless `$first`/`$last`
//! need arrival order; rows within a bucket keep theirs. The answers are the document path's,
//! except that doubles summed in another order may differ in the last bits and, among
//! numerically equal `$min`/`$max` candidates of different types, another may be kept; MongoDB
//! fixes neither (its unpacking order is unspecified). After `$sort` on the time field,
//! `$first`/`$last` become picks of the earliest/latest row (ties by stream position, as a
//! stable sort keeps them), buckets are visited latest (or earliest) first, and a bucket whose
//! time range cannot beat what its group already holds is skipped.


pub mod accumulators;
mod bin_counts;
mod bin_runs;
pub(crate) mod bins;
pub mod from_stats;
pub mod key_cache;
pub mod table;

use crate::query::aggregate::accumulators::{Acc, AccOp, Values};
use bin_runs::{Input, Times};
use crate::query::aggregate::bins::{BinGroups, Bins};
use crate::query::columns::{Col, NameIds};
use crate::query::source::{self, Forms, Stored};
use bin_counts::CountLane;
use crate::query::datetrunc::DateTrunc;
use crate::query::expr::{path_in_value, visit_in_value, Expr, Row};
use crate::query::aggregate::from_stats::{Feed, StatArg, StatContext};
use crate::query::aggregate::table::{top_input, GroupDocs, GroupSpec, GroupTable, OwnedRealize};
use crate::query::aggregate::key_cache::KeyCache;
use crate::query::parallel;
use crate::query::pipeline::Stage;
use crate::query::plan::{BucketStats, Plan, SegmentBounds, Verdict};
use crate::query::select::Explain;
use crate::query::row_filter::RowFilter;
use crate::query::source::{Scan, Scans, Source};
use crate::query::slots::Slots;
use crate::bucket::META_COLUMN;
use crate::catalog::is_hidden;
use crate::error::Result;
use crate::order::type_rank;
use crate::segment::{BoundRef, MetaFields};
use crate::query::sort::sort_value;
use bson::{Bson, DateTime, Document};
use std::borrow::Cow;
use std::sync::Arc;

/// Where an accumulator's argument comes from.
enum Arg {
    Const(Bson),
    /// A path below the meta value (`""` for the meta value itself).
    Meta(String),
    /// `columns[i]`, a top-level field.
    Column(usize),
    /// Any other expression of the row (a path below a measurement field, a document or
    /// array of paths, a `$dateTrunc` of a field), evaluated row by row on the decoded
    /// columns.
    Row(Expr),
    /// `$top`/`$bottom` (sortBy paths, then the output; descending keys as bits), fed row by
    /// row; with the columns of its sort keys when they are all top-level fields, which tell
    /// most rows that they cannot win before their input is built.
    Top(Vec<Expr>, u32, Option<Vec<usize>>),
}

/// How many buckets ahead of the one visited its summary is asked for (see
/// [`Scans::prefetch`]).
const SUMMARIES_AHEAD: usize = 8;

/// Accumulator inputs of a bucket the bin lane holds on the stack.
const LANE_INPUTS: usize = 4;

/// The placeholder of an unused input slot.
static NULL: Bson = Bson::Null;

/// A use of the time field in the group key.
enum Leaf {
    Trunc(DateTrunc<Expr>),
    Raw,
}

impl Leaf {
    /// The bin of time `t` as `[start, end)`.
    fn range(&self, t: i64) -> Result<(i64, i64)> {
        match self {
            Leaf::Trunc(d) => d.bin_range(t),
            Leaf::Raw => Ok((t, t.saturating_add(1))),
        }
    }

    /// `(width, origin)` when bins have one width from an origin (see
    /// [`DateTrunc::fixed_bins`]).
    fn fixed_bins(&self) -> Option<(i64, i64)> {
        match self {
            Leaf::Trunc(d) => d.fixed_bins(),
            Leaf::Raw => Some((1, 0)),
        }
    }

    /// The bin of time `t` when `prev` is the bin of an earlier time: the bin after `prev`
    /// when bins have one length and `t` falls in it (times read in order mostly move to the
    /// next bin, and this finds it without the division of [`Leaf::range`]).
    fn range_after(&self, prev: (i64, i64), t: i64) -> Result<(i64, i64)> {
        let width = match self {
            Leaf::Trunc(d) => d.fixed_width(),
            Leaf::Raw => Some(1),
        };
        match width {
            Some(w) if t >= prev.1 => match prev.1.checked_add(w) {
                Some(end) if t < end => Ok((prev.1, end)),
                _ => self.range(t),
            },
            _ => self.range(t),
        }
    }
}

/// A row of a bucket as the key and the accumulators see it: its meta value and time, and
/// for a row read on its own, its decoded columns.
struct BucketRow<'a> {
    time_field: &'a str,
    meta_field: Option<&'a str>,
    meta: Option<Cow<'a, Bson>>,
    time: Option<i64>,
    /// The columns' names, the columns and the row.
    cols: Option<(&'a [String], &'a [Col], usize)>,
}

impl BucketRow<'_> {
    /// The row's value of top-level field `head`, among its columns.
    fn column(&self, head: &str) -> Option<Cow<'_, Bson>> {
        let (names, cols, r) = self.cols?;
        cols.get(names.iter().position(|n| n == head)?)?.value(r)
    }

    /// The value `$sort` sorts the row by on `path` (see [`sort_value`]).
    fn sort_value(&self, path: &str, asc: bool) -> Bson {
        // A top-level field that is not an array sorts by its value: no document to build.
        if !path.contains('.') {
            let (mut out, mut array) = (Bson::Null, false);
            self.visit(path, &mut |v| match v {
                Some(Bson::Array(_)) => array = true,
                Some(v) => out = v.clone(),
                None => {}
            });
            if !array {
                return out;
            }
        }
        let head = path.split('.').next().unwrap_or(path);
        let mut one = Document::new();
        self.visit(head, &mut |v| {
            if let Some(v) = v {
                one.insert(head, v.clone());
            }
        });
        sort_value(&one, path, asc).into_owned()
    }
}

impl Row for BucketRow<'_> {
    fn path(&self, p: &str) -> Option<Bson> {
        let mut out = None;
        self.visit(p, &mut |v| out = v.cloned());
        out
    }

    fn visit(&self, p: &str, f: &mut dyn FnMut(Option<&Bson>)) {
        if let (true, Some(t)) = (p == self.time_field, self.time) {
            return f(Some(&Bson::DateTime(DateTime::from_millis(t))));
        }
        if let Some(rest) = self.meta_field.and_then(|m| meta_rest(p, m)) {
            return match &self.meta {
                Some(m) => visit_in_value(m, rest, f),
                None => f(None),
            };
        }
        let (head, rest) = p.split_once('.').unwrap_or((p, ""));
        match self.column(head) {
            Some(v) => visit_in_value(&v, rest, f),
            None => f(None),
        }
    }
}

/// The part of `p` below the meta field `m` (`""` for `m` itself).
fn meta_rest<'a>(p: &'a str, m: &str) -> Option<&'a str> {
    if p == m {
        return Some("");
    }
    p.strip_prefix(m)?.strip_prefix('.')
}

/// The columnar plan of a group.
pub(crate) struct FastGroup {
    spec: GroupSpec,
    args: Vec<Arg>,
    /// Per accumulator `(latest time wins, later position wins)` after a time sort.
    picks: Option<Vec<(bool, bool)>>,
    leaves: Vec<Leaf>,
    /// The key or an argument reads the meta value.
    reads_meta: bool,
    /// The key reads measurement fields: each row's group is found from its own values.
    by_rows: bool,
    /// `columns[i]` when the key is that top-level field alone.
    key_col: Option<usize>,
    /// The meta fields the key reads.
    key_meta: MetaFields,
    /// Columns to decode.
    columns: Vec<String>,
    /// Per column: read by the group (else only by the filter).
    group_cols: Vec<bool>,
    time_col: Option<usize>,
    /// Positions in `columns` of the row filter's columns.
    filter_cols: Vec<usize>,
    row_filter: RowFilter,
    time_field: String,
    meta_field: Option<String>,
}

fn column_index(columns: &mut Vec<String>, name: &str) -> usize {
    match columns.iter().position(|c| c == name) {
        Some(i) => i,
        None => {
            columns.push(name.to_string());
            columns.len() - 1
        }
    }
}

/// Collects the time leaves of a key expression; false when the key reads anything but the
/// meta field and the time field (through `$dateTrunc` or as is).
fn key_ok(
    e: &Expr,
    time: &str,
    meta: Option<&str>,
    leaves: &mut Vec<Leaf>,
    meta_read: &mut Vec<String>,
) -> bool {
    match e {
        Expr::Const(_) => true,
        Expr::Path(p) if p == time => {
            leaves.push(Leaf::Raw);
            true
        }
        Expr::Path(p) => match meta.and_then(|m| meta_rest(p, m)) {
            Some(rest) => {
                meta_read.push(rest.to_string());
                true
            }
            None => false,
        },
        Expr::Doc(fields) => fields
            .iter()
            .all(|(_, e)| key_ok(e, time, meta, leaves, meta_read)),
        Expr::Array(items) => items
            .iter()
            .all(|e| key_ok(e, time, meta, leaves, meta_read)),
        Expr::DateTrunc(d) => match &d.date {
            Expr::Path(p) if p == time => {
                leaves.push(Leaf::Trunc((**d).clone()));
                true
            }
            other => {
                let before = leaves.len();
                key_ok(other, time, meta, leaves, meta_read) && leaves.len() == before
            }
        },
    }
}

/// What a part of a run learned beyond its groups: buckets that turned out to need nothing
/// (counted as examined by the selection), and buckets answered from their statistics.
#[derive(Default)]
struct Tally {
    pruned_whole: u64,
    pruned_unpacked: u64,
    from_stats: u64,
}

impl Tally {
    fn prune(&mut self, whole: bool) {
        match whole {
            true => self.pruned_whole += 1,
            false => self.pruned_unpacked += 1,
        }
    }

    fn apply(&self, ex: &mut Explain) {
        let pruned = self.pruned_whole + self.pruned_unpacked;
        ex.buckets_pruned_by_stats += pruned;
        ex.buckets_taken_whole = ex.buckets_taken_whole.saturating_sub(self.pruned_whole);
        ex.buckets_unpacked = ex.buckets_unpacked.saturating_sub(self.pruned_unpacked);
        ex.buckets_examined = ex.buckets_examined.saturating_sub(pruned);
        ex.buckets_from_stats += self.from_stats;
    }
}

/// What a thread keeps across the stretches of buckets it visits: its group table, and the
/// caches and lanes that refer to that table's groups.
struct Visitor<'a> {
    table: GroupTable,
    tally: Tally,
    cache: KeyCache,
    bounds: SegmentBounds,
    lane: Option<CountLane>,
    lane_consts: Option<Vec<&'a Bson>>,
    bin_lane: Option<BinGroups>,
    /// The bin lane's columns of one bucket, reused from bucket to bucket.
    lane_cols: (Vec<Option<Stored>>, NameIds),
    feeds: Vec<Feed>,
    bins: Vec<i64>,
    /// Per-row groups and counts of the buckets grouped row by row, reused.
    rows: RowGroups,
    /// Where each stretch's groups begin: (part, groups in the table before it).
    starts: Vec<(usize, usize)>,
}

/// Where each group of a table first appeared in the visit: `(part << 32) + place` for the
/// groups from `starts` (part, groups before it), in order, up to `len` groups.
fn first_seen(starts: &[(usize, usize)], len: usize) -> Vec<u64> {
    let mut rank = Vec::with_capacity(len);
    for (i, &(part, from)) in starts.iter().enumerate() {
        let to = starts.get(i + 1).map_or(len, |s| s.1);
        rank.extend((0..to.saturating_sub(from)).map(|j| ((part as u64) << 32) + j as u64));
    }
    rank
}

/// Fewest buckets per thread of a columnar group: below it, starting a thread costs more than
/// it saves (most buckets are answered from their statistics in well under a microsecond).
const BUCKETS_PER_WORKER: usize = 1024;

/// Whether row `r`, whose `$top`/`$bottom` sort values are in the columns `cols[q[k]]`, may
/// replace what `acc` holds: false only when every value is a plain one (an array sorts by an
/// element) and loses. `keys` is scratch space.
fn top_may_take(acc: &Acc, q: &[usize], cols: &[Col], r: usize, keys: &mut Vec<Bson>) -> bool {
    // Typed values are compared as they are; the rest are built.
    let typed = |k: usize, kept: &Bson| cols.get(*q.get(k)?)?.cmp_typed(r, kept);
    if let Some(takes) = acc.top_takes_by(typed) {
        return takes;
    }
    keys.clear();
    for &c in q {
        match cols.get(c).and_then(|col| col.value(r)) {
            None => keys.push(Bson::Null),
            Some(v) if matches!(*v, Bson::Array(_)) => return true,
            Some(v) => keys.push(v.into_owned()),
        }
    }
    acc.top_takes(keys)
}

/// The row among `rows` kept by a pick: (latest or earliest time, later or earlier row).
fn best_row(times: &[Option<i64>], rows: &[u32], max_time: bool, late: bool) -> u32 {
    let t = |r: u32| times.get(r as usize).copied().flatten().unwrap_or(i64::MIN);
    let mut best = rows.first().copied().unwrap_or(0);
    for &r in rows.iter().skip(1) {
        let (a, b) = (t(r), t(best));
        if (a != b && (a > b) == max_time) || (a == b && late) {
            best = r;
        }
    }
    best
}

impl FastGroup {
    /// The columnar plan for `stages` (which follow the pushed-down filter of `plan`), and how
    /// many stages it covers; otherwise why the pipeline does not have the supported shape,
    /// for `explain`.
    pub(crate) fn analyse(
        plan: &Plan,
        stages: &[Stage],
    ) -> std::result::Result<(FastGroup, usize), String> {
        let time = plan.time_field();
        let meta = plan.meta_field();
        let (sort, spec, consumed) = match stages {
            [Stage::Sort(keys), Stage::Group(g), ..] => match keys.as_slice() {
                [(k, asc)] if k == time => (Some(*asc), g, 2),
                _ => {
                    return Err(format!(
                        "the $sort before the $group is on other keys than '{time}' alone"
                    ))
                }
            },
            [Stage::Group(g), ..] => (None, g, 1),
            _ => {
                return Err(format!(
                    "the pipeline does not start with a $group, or a $sort on '{time}' and a \
                     $group, after its $match"
                ))
            }
        };
        let picks = match sort {
            None => None,
            Some(asc) => Some(
                spec.accs
                    .iter()
                    .map(|a| match a.op {
                        // (latest time wins, later position wins among equal times)
                        AccOp::First => Ok((!asc, false)),
                        AccOp::Last => Ok((asc, true)),
                        _ => Err(format!(
                            "after a $sort, '{}' is not $first or $last",
                            a.name
                        )),
                    })
                    .collect::<std::result::Result<Vec<_>, _>>()?,
            ),
        };
        let mut leaves = Vec::new();
        let mut key_paths = Vec::new();
        let mut columns = Vec::new();
        // The columns a row-wise expression reads (bookkeeping columns are not fields of the
        // measurements); true when it reads the meta value.
        let row_reads = |e: &Expr, columns: &mut Vec<String>| {
            let mut paths = Vec::new();
            e.paths(&mut paths);
            let mut reads_meta = false;
            for p in paths {
                match meta.and_then(|m| meta_rest(p, m)) {
                    Some(_) => reads_meta = true,
                    None => {
                        let head = p.split('.').next().unwrap_or(p);
                        if !is_hidden(head) {
                            column_index(columns, head);
                        }
                    }
                }
            }
            reads_meta
        };
        // A key of measurement fields is found row by row.
        let by_rows = !key_ok(&spec.id, time, meta, &mut leaves, &mut key_paths);
        let mut reads_meta = match by_rows {
            true => {
                leaves.clear();
                key_paths.clear();
                row_reads(&spec.id, &mut columns)
            }
            false => !key_paths.is_empty(),
        };
        let key_col = match &spec.id {
            Expr::Path(p) if by_rows => columns.iter().position(|c| c == p),
            _ => None,
        };
        let key_meta = MetaFields::of_paths(key_paths.iter().map(String::as_str));
        let mut args = Vec::with_capacity(spec.accs.len());
        for a in &spec.accs {
            // The part below the meta field of an argument that is a meta path.
            let in_meta = match &a.arg {
                Expr::Path(p) => meta.and_then(|m| meta_rest(p, m)),
                _ => None,
            };
            args.push(match (&a.arg, a.op) {
                (Expr::Array(items), AccOp::Top { descending, .. }) => {
                    reads_meta |= row_reads(&a.arg, &mut columns);
                    let keys = items.split_last().map_or(&[][..], |(_, k)| k);
                    let quick = keys
                        .iter()
                        .map(|k| match k {
                            Expr::Path(p) => columns.iter().position(|c| c == p),
                            _ => None,
                        })
                        .collect();
                    Arg::Top(items.clone(), descending, quick)
                }
                (Expr::Const(v), _) => Arg::Const(v.clone()),
                (Expr::Path(_), _) if in_meta.is_some() => {
                    reads_meta = true;
                    Arg::Meta(in_meta.unwrap_or_default().to_string())
                }
                (Expr::Path(p), _) if !p.contains('.') && !is_hidden(p) => {
                    Arg::Column(column_index(&mut columns, p))
                }
                (e, _) => {
                    reads_meta |= row_reads(e, &mut columns);
                    Arg::Row(e.clone())
                }
            });
        }
        let time_col = match !leaves.is_empty() || picks.is_some() {
            true => Some(column_index(&mut columns, time)),
            false => columns.iter().position(|c| c == time),
        };
        let group_cols = vec![true; columns.len()];
        let row_filter = RowFilter::new(&plan.filter, meta);
        let filter_cols = row_filter
            .columns
            .iter()
            .map(|c| column_index(&mut columns, c))
            .collect();
        let fg = FastGroup {
            spec: spec.clone(),
            args,
            picks,
            leaves,
            reads_meta,
            by_rows,
            key_col,
            key_meta,
            group_cols,
            columns,
            time_col,
            filter_cols,
            row_filter,
            time_field: time.to_string(),
            meta_field: meta.map(str::to_string),
        };
        Ok((fg, consumed))
    }

    fn row<'a>(&'a self, meta: Option<&'a Bson>, time: Option<i64>) -> BucketRow<'a> {
        BucketRow {
            time_field: &self.time_field,
            meta_field: self.meta_field.as_deref(),
            meta: meta.map(Cow::Borrowed),
            time,
            cols: None,
        }
    }

    /// `control.min` of the time field (the rounded bucket start), without a document lookup
    /// when the segment read it at open.
    fn time_lo(&self, st: &BucketStats<'_>) -> Option<i64> {
        st.time_range(&self.time_field).0
    }

    /// `control.max` of the time field (the latest time).
    fn time_hi(&self, st: &BucketStats<'_>) -> Option<i64> {
        st.time_range(&self.time_field).1
    }

    /// The bins of the key's time leaves when every row of the bucket shares them (judged from
    /// `control` times: the minimum is the rounded bucket start, a lower bound).
    fn const_bins(&self, st: &BucketStats<'_>, hi: Option<i64>, out: &mut Vec<i64>) -> bool {
        out.clear();
        if self.leaves.is_empty() {
            return true;
        }
        let Some(hi) = hi else { return false };
        let lo = if st.count == 1 {
            Some(hi)
        } else {
            self.time_lo(st)
        };
        let Some(lo) = lo else { return false };
        for leaf in &self.leaves {
            match leaf.range(hi) {
                Ok(r) if lo >= r.0 => out.push(r.0),
                _ => return false,
            }
        }
        true
    }

    /// How every accumulator would be fed from the bucket's statistics alone, or `None`.
    fn stat_feeds(
        &self,
        st: &BucketStats<'_>,
        t_max: Option<i64>,
        scan: &Scan,
        out: &mut Vec<Feed>,
    ) -> Option<()> {
        out.clear();
        let ctx = StatContext {
            st,
            t_max,
            src: &scan.src,
            time_field: &self.time_field,
            picks: self.picks.is_some(),
        };
        for (a, arg) in self.spec.accs.iter().zip(&self.args) {
            let arg = match arg {
                Arg::Column(c) => StatArg::Column(self.columns.get(*c)?),
                Arg::Const(v) => StatArg::Const(v),
                Arg::Meta(m) => StatArg::Meta(m),
                Arg::Row(_) | Arg::Top(..) => return None,
            };
            out.push(ctx.feed(a.op, &arg)?);
        }
        Some(())
    }

    /// The group of the key on (`meta`, `t`), whose time leaves fall in bins starting at
    /// `starts`: from the cache when `part` (the key's meta-dependent part) is known, else
    /// found in (or, when `create`, added to) the table and remembered.
    #[allow(clippy::too_many_arguments)]
    fn group_of(
        &self,
        table: &mut GroupTable,
        cache: &mut KeyCache,
        part: Option<u32>,
        starts: &[i64],
        meta: Option<&Bson>,
        t: Option<i64>,
        create: bool,
    ) -> Result<Option<u32>> {
        if let Some(g) = part.and_then(|p| cache.get(p, starts)) {
            return Ok(Some(g));
        }
        // The part's template gives the key without reading the meta value again.
        let mut key = Vec::new();
        if let Some(p) = part.filter(|&p| cache.key_bytes(p, starts, &mut key)) {
            let g = match table.find_key(&key) {
                Some(g) => Some(g),
                None if !create => return Ok(None),
                // The `_id` is built at the end, only for the groups that are output.
                None if cache.builds_id(p, starts.len()) => {
                    table.insert_key_template(&key, p, starts).or_else(|| {
                        cache
                            .id_value(p, &self.spec.id, &self.time_field, starts)
                            .map(|id| table.insert_key(&key, id))
                    })
                }
                None => None,
            };
            if let Some(g) = g {
                cache.put(p, starts, g);
                return Ok(Some(g));
            }
        }
        let row = self.row(meta, t);
        let g = if create {
            Some(table.slot_expr(&self.spec.id, &row)?)
        } else {
            table.find_expr(&self.spec.id, &row)?
        };
        if let (Some(p), Some(g)) = (part, g) {
            cache.put(p, starts, g);
        }
        Ok(g)
    }

    /// The meta-dependent part of the key for a bucket with this meta value (see
    /// [`KeyCache::part`]).
    fn key_part(
        &self,
        cache: &mut KeyCache,
        src: &Source,
        meta: Option<&Bson>,
        t: Option<i64>,
    ) -> Result<Option<u32>> {
        if t.is_none() && !self.leaves.is_empty() {
            return Ok(None);
        }
        // A segment's buckets whose meta values agree in the fields the key reads share the
        // part (the time bytes are zeroed in it, so which date `t` is does not matter).
        let source = match src {
            Source::Seg(seg, i) if self.reads_meta => {
                seg.buckets().get(*i as usize).and_then(|s| {
                    let at = Arc::as_ptr(seg) as usize;
                    let id =
                        cache.projected(at, s.meta_ref(), || seg.meta_projection(&self.key_meta));
                    (id != u32::MAX).then_some((at, id))
                })
            }
            _ => None,
        };
        if let Some(p) = source.and_then(|k| cache.remembered(k)) {
            return Ok(Some(p));
        }
        let part = cache.part(
            &self.spec.id,
            &self.row(meta, t),
            &self.time_field,
            self.reads_meta,
        )?;
        if let (Some(k), Some(p)) = (source, part) {
            cache.remember(k, p);
        }
        Ok(part)
    }

    /// The accumulators' constants when every bucket taken whole within one bin can be
    /// answered by [`CountLane`]: a key of at most one time leaf and no meta value, and
    /// accumulators of constants that give the same answer fed in one go.
    fn lane_consts(&self) -> Option<Vec<&Bson>> {
        if self.reads_meta || self.by_rows || self.picks.is_some() || self.leaves.len() > 1 {
            return None;
        }
        self.spec
            .accs
            .iter()
            .zip(&self.args)
            .map(|(a, arg)| match arg {
                Arg::Const(v) if bin_counts::order_free(a.op, v) => Some(v),
                _ => None,
            })
            .collect()
    }

    /// Offers bucket `scan` to the lane; true when it took it.
    fn lane_take(
        &self,
        lane: &mut CountLane,
        scan: &Scan,
        table: &mut GroupTable,
        cache: &mut KeyCache,
    ) -> Result<bool> {
        let (Source::Seg(seg, i), Verdict::All) = (&scan.src, scan.verdict) else {
            return Ok(false);
        };
        let Some(s) = seg.buckets().get(*i as usize) else {
            return Ok(false);
        };
        let (lo, hi) = s.time_range();
        // A stand-in for a bucket whose `control` held no date.
        if hi == i64::MAX {
            return Ok(false);
        }
        let lo = if s.count == 1 { hi } else { lo };
        let range = |t| {
            self.leaves
                .first()
                .map_or(Ok((i64::MIN, i64::MAX)), |l| l.range(t))
        };
        let bins = match self.leaves.first() {
            None => Bins::One,
            Some(leaf) => match leaf.fixed_bins() {
                Some((width, origin)) => Bins::Fixed {
                    width,
                    origin,
                    range: &range,
                },
                None => Bins::Other(&range),
            },
        };
        let meta = seg.meta_of(s);
        // A time of the bin, for a key built from a row: the bin's start is one.
        let mut group = |start: i64| {
            let t = if self.leaves.is_empty() { hi } else { start };
            let part = self.key_part(cache, &scan.src, meta, Some(t))?;
            let starts = [start];
            let starts = starts.get(..self.leaves.len()).unwrap_or(&starts);
            let g = self.group_of(table, cache, part, starts, meta, Some(t), true)?;
            Ok(g.unwrap_or(0))
        };
        if lane.take((lo, hi), s.count, &bins, &mut group)? {
            return Ok(true);
        }
        // The times, read once: as runs where they are stored so, else decoded (here, since
        // the column path would try the runs again before decoding them).
        let Some(name) = self.time_col.and_then(|c| self.columns.get(c)) else {
            return Ok(false);
        };
        let forms = Forms {
            runs: true,
            ..Forms::default()
        };
        match source::load_one(&scan.src, name, forms)? {
            Stored::Runs(runs) => lane.take_runs(&runs, &bins, group).map(|()| true),
            other => {
                let col = other.into_col(s.count as usize);
                let taken = match &col {
                    Col::Date(Slots::Dense(ts)) if ts.len() == s.count as usize => {
                        lane.take_times(ts, &bins, group).map(|()| true)
                    }
                    _ => Ok(false),
                };
                // The decoded vector goes back for the next decode, taken or not.
                col.recycle();
                taken
            }
        }
    }

    /// True when buckets taken whole can be fed by [`bin_runs`]: a key of one time leaf that
    /// reads no meta value, and no picks.
    fn bin_lane(&self) -> bool {
        !self.reads_meta
            && !self.by_rows
            && self.picks.is_none()
            && self.leaves.len() == 1
            && self.time_col.is_some()
    }

    /// Feeds a bucket taken whole, whose key varies, through [`bin_runs`]; false, having fed
    /// nothing, when its times are not a date in every row.
    fn bin_lane_take(
        &self,
        (table, cache, groups): &mut (&mut GroupTable, &mut KeyCache, &mut BinGroups),
        (loaded, ids): &mut (Vec<Option<Stored>>, NameIds),
        scan: &Scan,
        st: &BucketStats<'_>,
        (names, slots): (&[&str], &[usize]),
    ) -> Result<bool> {
        let (Some(leaf), Some(time_col)) = (self.leaves.first(), self.time_col) else {
            return Ok(false);
        };
        // Regular dates come back as (first, step), the rest decoded, in one read.
        let forms = Forms {
            steps: true,
            bound: true,
            ..Forms::default()
        };
        source::load_stored(&scan.src, names, ids, forms, loaded)?;
        let taken = self.bin_lane_feed(
            table, cache, groups, loaded, scan, st, slots, leaf, time_col,
        );
        // Decoded vectors go back for the next bucket's columns, whatever happened.
        for c in loaded.drain(..) {
            if let Some(Stored::Col(c, _)) = c {
                c.recycle();
            }
        }
        taken
    }

    /// Feeds a bucket whose lane columns are `loaded` to its bins (see
    /// [`FastGroup::bin_lane_take`]); the columns stay in `loaded`, regular times as the
    /// column they stand for, or [`Col::Missing`] where nothing reads them.
    #[allow(clippy::too_many_arguments)]
    fn bin_lane_feed(
        &self,
        table: &mut GroupTable,
        cache: &mut KeyCache,
        groups: &mut BinGroups,
        loaded: &mut [Option<Stored>],
        scan: &Scan,
        st: &BucketStats<'_>,
        slots: &[usize],
        leaf: &Leaf,
        time_col: usize,
    ) -> Result<bool> {
        // Regular times are not decoded, unless an accumulator reads them: each bin's rows
        // follow from its bounds.
        let n = st.count as usize;
        let time_at = slots.iter().position(|&s| s == time_col);
        let times_read = (self.args.iter()).any(|a| matches!(a, Arg::Column(c) if *c == time_col));
        let mut progression = None;
        // Each column with its bound, in place.
        for (k, c) in loaded.iter_mut().enumerate() {
            let stored = c.take().unwrap_or(Stored::Col(Col::Missing, None));
            *c = Some(match stored {
                Stored::Col(..) => stored,
                Stored::Steps(first, step) if Some(k) == time_at => {
                    progression = Times::progression(first, step, n);
                    match progression.is_some() && !times_read {
                        true => Stored::Col(Col::Missing, None),
                        false => Stored::Col(stored.into_col(n), None),
                    }
                }
                other => Stored::Col(other.into_col(n), None),
            });
        }
        let at = |c: usize| match slots
            .iter()
            .position(|&s| s == c)
            .and_then(|k| loaded.get(k))
        {
            Some(Some(Stored::Col(col, bound))) => Some((col, *bound)),
            _ => None,
        };
        let col = |c: usize| at(c).map(|(col, _)| col);
        let times = match (progression, col(time_col)) {
            (Some(p), _) => p,
            (None, Some(Col::Date(Slots::Dense(ts)))) if ts.len() == n => Times::Values(ts),
            _ => return Ok(false),
        };
        // On the stack for the usual few accumulators: this runs once per bucket.
        let mut held: [Input<'_>; LANE_INPUTS] = std::array::from_fn(|_| Input::Const(&NULL));
        let mut spilled = Vec::new();
        for (k, (arg, a)) in self.args.iter().zip(&self.spec.accs).enumerate() {
            let input = match arg {
                Arg::Const(v) => Input::Const(v),
                Arg::Column(c) => Input::bounded(
                    a.op,
                    col(*c).map_or(Values::Missing, Col::values),
                    at(*c).and_then(|(_, bound)| bound),
                ),
                Arg::Meta(_) | Arg::Row(_) | Arg::Top(..) => return Ok(false),
            };
            match held.get_mut(k) {
                Some(slot) if self.args.len() <= LANE_INPUTS => *slot = input,
                _ => spilled.push(input),
            }
        }
        let inputs = match self.args.len() <= LANE_INPUTS {
            true => held.get(..self.args.len()).unwrap_or_default(),
            false => &spilled[..],
        };
        let range = |t| leaf.range(t);
        let bins = match leaf.fixed_bins() {
            Some((width, origin)) => Bins::Fixed {
                width,
                origin,
                range: &range,
            },
            None => Bins::Other(&range),
        };
        let meta = st.meta;
        bin_runs::feed_bucket(groups, table, &bins, times, inputs, |table, start| {
            let part = self.key_part(cache, &scan.src, meta, Some(start))?;
            let g = self.group_of(table, cache, part, &[start], meta, Some(start), true)?;
            Ok(g.unwrap_or(0))
        })?;
        Ok(true)
    }

    /// True when the answer depends on the order of the buckets (`$first`/`$last`, with or
    /// without a time sort before the group).
    pub(crate) fn arrival_order(&self) -> bool {
        self.picks.is_some()
            || self
                .spec
                .accs
                .iter()
                .any(|a| matches!(a.op, AccOp::First | AccOp::Last | AccOp::Top { .. }))
    }

    /// The order in which to visit `scans` (indexes into it). Reading buckets in file order
    /// decompresses each page once, where `_id` order would jump between pages; it is used
    /// unless an accumulator depends on arrival order (`$first`/`$last`). Picks visit the
    /// buckets likeliest to win first, so that later ones are skipped, and ties in file order.
    fn visit_order(&self, scans: &Scans) -> Result<Vec<usize>> {
        // Segments by number: in the order their first bucket was chosen.
        let place = |k: usize| match scans.place(k) {
            Some((seg, i)) => (0, seg as usize, i as usize),
            None => (1, 0, k),
        };
        let mut order: Vec<usize> = (0..scans.len()).collect();
        match self.picks.as_ref().and_then(|p| p.first()) {
            Some(&(max_time, _)) => {
                let mut keys = Vec::with_capacity(scans.len());
                for s in scans.iter() {
                    let st = source::stats(&s.src)?;
                    let bound = if max_time {
                        // `!t` is `-t - 1`: it orders latest first as `-t` would, but `-t`
                        // overflows for a bucket whose latest time is the earliest date.
                        self.time_hi(&st).map_or(i64::MAX, |t| !t)
                    } else {
                        self.time_lo(&st).unwrap_or(i64::MAX)
                    };
                    keys.push((bound, place(keys.len())));
                }
                order.sort_unstable_by_key(|&i| keys.get(i).copied());
            }
            None => {
                if !self.arrival_order() {
                    match file_order(scans) {
                        Some(o) => order = o,
                        None => order.sort_unstable_by_key(|&i| place(i)),
                    }
                }
            }
        }
        Ok(order)
    }

    /// Runs the group over the selected buckets on up to `threads` threads; returns its
    /// output documents, built as they are read. Fails with `Error::MemoryLimit` when the
    /// groups grow past `memory_limit` bytes.
    pub(crate) fn run(
        &self,
        scans: Scans,
        mut ex: Explain,
        threads: usize,
        memory_limit: usize,
    ) -> Result<(GroupDocs, Explain)> {
        let order = self.visit_order(&scans)?;
        let threads = match self.arrival_order() {
            true => 1,
            false => parallel::workers(scans.len(), BUCKETS_PER_WORKER, threads),
        };
        let row_args = (self.args.iter()).any(|a| matches!(a, Arg::Row(_) | Arg::Top(..)));
        let rows = match (self.by_rows, row_args) {
            (true, _) => ", each row's group found from its decoded fields",
            (false, true) => ", expressions evaluated row by row on the decoded fields",
            _ => "",
        };
        ex.operators.push(format!(
            "$group: hash aggregate on typed columns{rows}, {} ({} thread{}); buckets whose \
             statistics answer the group are not decoded",
            match (&self.picks, self.arrival_order()) {
                (Some(_), _) => "$first/$last kept by time, buckets read likeliest winner first \
                                 and skipped once they cannot win",
                (None, true) if self.tops_only() => {
                    "buckets read in _id order for $top/$bottom, skipped by the bounds of their \
                     first sort key once they cannot win"
                }
                (None, true) => "buckets read in _id order for $first/$last/$top/$bottom",
                (None, false) => "buckets read in file order",
            },
            threads,
            if threads == 1 { "" } else { "s" }
        ));
        let parts = parallel::split_by_page(&scans, &order, parallel::parts_for(threads));
        let done = parallel::run_claimed(
            &parts,
            threads,
            || self.visitor(),
            |v, k, part| {
                v.starts.push((k, v.table.len()));
                self.visit_into(v, &scans, part)?;
                // Each thread holds its own table; together they stay within the limit.
                v.table.check_memory(memory_limit / threads.max(1))
            },
        )?;
        // A thread takes its parts in increasing order, so its groups are in order of first
        // appearance within its parts; a group's rank (part, place in it) orders it among all.
        // One thread's table is in order already: ranks are for merging.
        let merging = done.len() > 1;
        // The first table and its ranks; the key caches that build the `_id`s of each table's
        // templates, by the table's number in the merge.
        let mut out: Option<(GroupTable, Vec<u64>)> = None;
        let mut caches: Vec<KeyCache> = Vec::with_capacity(done.len());
        for v in done {
            let (t, tally, starts, cache) = self.finish(v);
            tally.apply(&mut ex);
            let r = match merging {
                true => first_seen(&starts, t.len()),
                false => Vec::new(),
            };
            let origin = u16::try_from(caches.len()).map_err(|_| {
                crate::Error::BadValue("a $group ran on more than 65,535 threads".into())
            })?;
            out = Some(match out {
                None => (t, r),
                Some((mut table, mut rank)) => {
                    // The first table's groups are found through its key cache, by part
                    // and bins, where looking each key up in the table missed the cache.
                    let mut parts = Vec::new();
                    let mut first = caches.first_mut();
                    table.merge_known(&mut rank, t, &r, origin, |part, starts| {
                        first.as_mut()?.get_other(&cache, part, starts, &mut parts)
                    });
                    (table, rank)
                }
            });
            caches.push(cache);
        }
        let (table, rank) = out.unwrap_or_else(|| (self.empty_part().0, Vec::new()));
        let (id, time_field) = (self.spec.id.clone(), self.time_field.clone());
        let realize: OwnedRealize = Box::new(move |origin, part, starts| {
            caches
                .get(usize::from(origin))?
                .id_value(part, &id, &time_field, starts)
        });
        Ok((table.into_docs_ranked(&rank, realize), ex))
    }

    /// A fresh group table and an empty tally.
    fn empty_part(&self) -> (GroupTable, Tally) {
        let names = self.spec.accs.iter().map(|a| a.name.clone()).collect();
        let fresh = match &self.picks {
            Some(p) => p.iter().map(|&(m, l)| Acc::new_pick(m, l)).collect(),
            None => self.spec.accs.iter().map(|a| Acc::new(a.op)).collect(),
        };
        (GroupTable::new(names, fresh), Tally::default())
    }

    /// A thread's state for [`FastGroup::visit_into`].
    fn visitor(&self) -> Visitor<'_> {
        let (table, tally) = self.empty_part();
        let lane_consts = self.lane_consts();
        let mut cache = KeyCache::default();
        if let ([leaf], true) = (self.leaves.as_slice(), self.reads_meta) {
            if let Some((width, origin)) = leaf.fixed_bins() {
                cache.number_bins(width, origin);
            }
        }
        Visitor {
            table,
            tally,
            cache,
            // The fields whose statistics a bucket may be judged or answered from, and their
            // bounds and sums per segment, gathered in one pass over each segment's directory.
            bounds: SegmentBounds::new(
                self.args
                    .iter()
                    .filter_map(|a| match a {
                        Arg::Column(c) => Some(*c),
                        // What `FastGroup::tops_settled` judges a bucket by.
                        Arg::Top(_, _, Some(q)) => q.first().copied(),
                        _ => None,
                    })
                    .chain(self.filter_cols.iter().copied())
                    .filter_map(|c| self.columns.get(c).cloned())
                    .collect(),
            ),
            lane: lane_consts.as_ref().map(|_| CountLane::default()),
            lane_consts,
            bin_lane: self.bin_lane().then(BinGroups::default),
            lane_cols: Default::default(),
            feeds: Vec::new(),
            bins: Vec::new(),
            rows: RowGroups::default(),
            starts: Vec::new(),
        }
    }

    /// The visitor's table and tally, once it has visited its buckets.
    fn finish(&self, v: Visitor<'_>) -> (GroupTable, Tally, Vec<(usize, usize)>, KeyCache) {
        let (mut table, mut tally) = (v.table, v.tally);
        if let Some(mut groups) = v.bin_lane {
            groups.flush_sums(&mut table);
        }
        if let (Some(lane), Some(consts)) = (v.lane, v.lane_consts) {
            lane.finish(&mut table, &consts);
            tally.from_stats += lane.buckets;
        }
        (table, tally, v.starts, v.cache)
    }

    /// Groups the buckets `scans[i]` for `i` in `order`, in that order, into the visitor's
    /// table.
    fn visit_into(&self, v: &mut Visitor<'_>, scans: &Scans, order: &[usize]) -> Result<()> {
        let col_names: Vec<&str> = self.columns.iter().map(String::as_str).collect();
        // The columns the bin lane reads, and their positions among `col_names`.
        let (mut lane_names, mut lane_slots) = (Vec::new(), Vec::new());
        for (c, name) in col_names.iter().enumerate() {
            if self.group_cols.get(c).copied().unwrap_or(false) {
                lane_names.push(*name);
                lane_slots.push(c);
            }
        }
        let Visitor {
            table,
            tally,
            cache,
            bounds,
            lane,
            bin_lane,
            lane_cols,
            feeds,
            bins,
            rows,
            ..
        } = v;
        for (at, &idx) in order.iter().enumerate() {
            if let Some(&ahead) = order.get(at + SUMMARIES_AHEAD) {
                scans.prefetch(ahead);
            }
            let Some(scan) = scans.get(idx) else { continue };
            let scan = &scan;
            if let Some(lane) = lane.as_mut() {
                if self.lane_take(lane, scan, table, cache)? {
                    continue;
                }
            }
            let mut st = source::stats(&scan.src)?;
            let whole = scan.verdict == Verdict::All;
            // Reading `control` is the cost of a bucket answered from it: look each entry up
            // once.
            let meta_varies = (self.reads_meta || self.row_filter.reads_meta()) && st.meta_varies();
            let meta_ok = !(self.reads_meta && meta_varies);
            let hi = self.time_hi(&st);
            // The key's bins when the key is constant over the bucket.
            let key_const = meta_ok && !self.by_rows && self.const_bins(&st, hi, bins);
            // The gathered bounds serve the filter's judgements and the answers from
            // statistics; a whole bucket whose key varies uses neither, and gathering a
            // segment's bounds costs a pass over its directory.
            if !whole || key_const {
                if let Some(g) = match &scan.src {
                    Source::Seg(seg, i) => bounds.of(seg, *i as usize),
                    Source::Mem(_) => None,
                } {
                    st = st.with_bounds(g);
                }
            }
            if !whole && !self.row_filter.may_match(&st) {
                tally.prune(whole);
                continue;
            }
            let part = match key_const {
                true => self.key_part(cache, &scan.src, st.meta, hi)?,
                false => None,
            };
            if let (Some(_), true) = (&self.picks, key_const) {
                let lo = self.time_lo(&st);
                let g = self.group_of(table, cache, part, bins, st.meta, hi, false)?;
                let settled = g.is_some_and(|g| {
                    table.accs(g).iter().all(|a| match a {
                        Acc::Pick { max_time: true, .. } => {
                            hi.is_some_and(|t| !a.pick_may_change(t))
                        }
                        Acc::Pick { .. } => lo.is_some_and(|t| !a.pick_may_change(t)),
                        _ => false,
                    })
                });
                if settled {
                    tally.prune(whole);
                    continue;
                }
            }
            if whole && key_const && self.stat_feeds(&st, hi, scan, feeds).is_some() {
                let g = self
                    .group_of(table, cache, part, bins, st.meta, hi, true)?
                    .unwrap_or(0);
                let pos = (idx as u64) << 32;
                for (acc, f) in table.accs(g).iter_mut().zip(feeds.drain(..)) {
                    match f {
                        Feed::N(v, n) => acc.feed_n(v.as_ref(), n),
                        Feed::Sum(s, n) => acc.feed_sum_stat(&s, n),
                        Feed::Pick(t, v) => acc.pick(t, pos, || v),
                    }
                }
                tally.from_stats += 1;
                continue;
            }
            if let (Some(groups), true) = (bin_lane.as_mut(), whole && !key_const) {
                let mut sink = (&mut *table, &mut *cache, groups);
                let lane = (&lane_names[..], &lane_slots[..]);
                if self.bin_lane_take(&mut sink, lane_cols, scan, &st, lane)? {
                    continue;
                }
            }
            let key = key_const.then_some((hi, part, bins.as_slice()));
            if self.tops_settled(table, cache, scan, &st, key)? {
                tally.prune(whole);
                continue;
            }
            let mut sink = (&mut *table, &mut *cache, &mut *rows);
            self.feed_columns(&mut sink, scan, &st, idx, whole, key, &col_names)?;
        }
        Ok(())
    }

    /// Feeds a bucket from its decoded columns.
    #[allow(clippy::too_many_arguments)]
    fn feed_columns(
        &self,
        (table, cache, scratch): &mut (&mut GroupTable, &mut KeyCache, &mut RowGroups),
        scan: &Scan,
        st: &BucketStats<'_>,
        idx: usize,
        whole: bool,
        key: Option<(Option<i64>, Option<u32>, &[i64])>,
        col_names: &[&str],
    ) -> Result<()> {
        let n = st.count as usize;
        // Runs of equal times give every row the bucket's meta value: not for rows with their
        // own when the key or an accumulator reads it.
        let own_metas = self.reads_meta && st.meta_varies();
        if whole && key.is_none() && self.picks.is_none() && !own_metas {
            if let Some(runs) = self.time_runs(scan)? {
                return self.feed_runs(table, cache, scan, st, &runs);
            }
        }
        let settled = match whole {
            true => 0,
            false => self.row_filter.settled(st, &self.time_field),
        };
        // Decode only what the group reads and what the filter still has to test.
        let mut names = Vec::with_capacity(col_names.len());
        let mut slots = Vec::with_capacity(col_names.len());
        for (c, name) in col_names.iter().enumerate() {
            let for_filter = !whole
                && self
                    .filter_cols
                    .iter()
                    .enumerate()
                    .any(|(f, &x)| x == c && self.row_filter.reads_column(f, settled));
            if for_filter || self.group_cols.get(c).copied().unwrap_or(false) {
                names.push(*name);
                slots.push(c);
            }
        }
        let mut cols: Vec<Col> = (0..col_names.len()).map(|_| Col::Missing).collect();
        for (c, col) in slots.into_iter().zip(source::load(&scan.src, &names)?) {
            if let Some(x) = cols.get_mut(c) {
                *x = col;
            }
        }
        // The rows' own meta values, where they have them and the filter, the key or an
        // accumulator reads them.
        let meta_read = self.reads_meta || (!whole && self.row_filter.reads_meta());
        let own_meta = match meta_read && st.meta_varies() {
            true => source::load(&scan.src, &[META_COLUMN])?.pop(),
            false => None,
        };
        let sel: Vec<u32> = if whole {
            (0..n as u32).collect()
        } else {
            let fcols: Vec<&Col> = self
                .filter_cols
                .iter()
                .map(|&c| cols.get(c).unwrap_or(&Col::Missing))
                .collect();
            self.row_filter
                .select(st.meta, own_meta.as_ref(), &fcols, n, settled)
        };
        if sel.is_empty() {
            return Ok(());
        }
        let time_col = self.time_col.and_then(|c| cols.get(c));
        // A whole bucket whose every row has a time, grouped by one time leaf: its runs are
        // found on the times themselves (see `dense_time_runs`).
        let dense_times = match time_col {
            Some(Col::Date(Slots::Dense(ts)))
                if whole && key.is_none() && self.picks.is_none() && self.leaves.len() == 1 =>
            {
                ts.get(..n)
            }
            _ => None,
        };
        let times = match (dense_times, time_col) {
            (None, Some(c)) => c.dates(n),
            _ => Default::default(),
        };
        let time = |r: u32| times.get(r as usize).copied().flatten();
        // Rows read on their own: their meta values and their columns as the key and the
        // accumulators see them.
        let own_meta = own_meta.filter(|_| self.reads_meta);
        let meta_at = |r: u32| match own_meta.as_ref().and_then(|c| c.value(r as usize)) {
            Some(m) => Some(m),
            None => st.meta.map(Cow::Borrowed),
        };
        let row_at = |r: u32| BucketRow {
            time_field: &self.time_field,
            meta_field: self.meta_field.as_deref(),
            meta: meta_at(r),
            time: time(r),
            cols: Some((&self.columns, &cols, r as usize)),
        };
        // Runs of consecutive selected rows in one group: (group, range of `sel`).
        let mut runs: Vec<(u32, std::ops::Range<usize>)> = Vec::new();
        match (key, dense_times) {
            // The key reads what differs by row: each row's group is found from its values.
            _ if self.by_rows || own_meta.is_some() => {
                let key_col = self.key_col.and_then(|c| cols.get(c));
                let RowGroups {
                    groups,
                    counts,
                    touched,
                } = &mut **scratch;
                let mut new_group = |r: u32| table.slot_expr(&self.spec.id, &row_at(r));
                // Arguments with one value over the bucket are fed once per group with the
                // group's count of rows: rows of one group seldom follow each other here.
                let bucket_constant = self.picks.is_none()
                    && self.args.iter().all(|a| match a {
                        Arg::Const(_) => true,
                        Arg::Meta(_) => own_meta.is_none(),
                        _ => false,
                    });
                if bucket_constant {
                    touched.clear();
                    let count = |g: u32| count_group(counts, touched, g);
                    key_groups(key_col, &sel, cache, &mut new_group, count)?;
                    let metas = self.meta_args(st);
                    for &g in touched.iter() {
                        let n = counts.get_mut(g as usize).map_or(0, std::mem::take);
                        for ((acc, arg), meta) in table.accs(g).iter_mut().zip(&self.args).zip(&metas)
                        {
                            match arg {
                                Arg::Const(v) => acc.feed_n(Some(v), u64::from(n)),
                                _ => acc.feed_n(meta.as_ref(), u64::from(n)),
                            }
                        }
                    }
                    cols.into_iter().for_each(Col::recycle);
                    return Ok(());
                }
                groups.clear();
                key_groups(key_col, &sel, cache, &mut new_group, |g| groups.push(g))?;
                for (k, &g) in groups.iter().enumerate() {
                    match runs.last_mut() {
                        Some((last, range)) if *last == g => range.end = k + 1,
                        _ => runs.push((g, k..k + 1)),
                    }
                }
            }
            (Some((hi, part, starts)), _) => {
                let g = self.group_of(table, cache, part, starts, st.meta, hi, true)?;
                runs.push((g.unwrap_or(0), 0..sel.len()));
            }
            (None, Some(ts)) => self.dense_time_runs(table, cache, scan, st, ts, &mut runs)?,
            (None, None) => {
                let mut bins: Vec<(i64, i64)> = Vec::with_capacity(self.leaves.len());
                let mut starts: Vec<i64> = Vec::with_capacity(self.leaves.len());
                let mut start = 0;
                let mut cur: Option<(u32, Option<i64>)> = None;
                // The key's meta-dependent part, from the first row with a time.
                let mut part: Option<Option<u32>> = None;
                for (k, &r) in sel.iter().enumerate() {
                    let t = time(r);
                    let same = match (cur, t) {
                        (Some((_, Some(_))), Some(t)) => {
                            bins.iter().all(|&(lo, hi)| lo <= t && t < hi)
                        }
                        (Some((_, None)), None) => true,
                        _ => false,
                    };
                    if same {
                        continue;
                    }
                    match t {
                        Some(t) => {
                            self.next_bins(t, &mut bins, &mut starts)?;
                            if part.is_none() {
                                part = Some(self.key_part(cache, &scan.src, st.meta, Some(t))?);
                            }
                        }
                        None => {
                            bins.clear();
                            starts.clear();
                        }
                    }
                    let p = if t.is_some() { part.flatten() } else { None };
                    let g = self
                        .group_of(table, cache, p, &starts, st.meta, t, true)?
                        .unwrap_or(0);
                    match cur {
                        Some((cg, _)) if cg == g => {}
                        Some((cg, _)) => {
                            runs.push((cg, start..k));
                            start = k;
                        }
                        None => start = k,
                    }
                    cur = Some((g, t));
                }
                if let Some((g, _)) = cur {
                    runs.push((g, start..sel.len()));
                }
            }
        }
        let metas = self.meta_args(st);
        let mut keys = Vec::new();
        let row_meta = |rest: &str, r: u32| meta_at(r).and_then(|m| path_in_value(&m, rest));
        let value_at = |arg: &Arg, meta: &Option<Bson>, r: u32| -> Option<Bson> {
            match arg {
                Arg::Const(v) => Some(v.clone()),
                Arg::Meta(rest) if own_meta.is_some() => row_meta(rest, r),
                Arg::Meta(_) => meta.clone(),
                Arg::Column(c) => cols.get(*c).and_then(|c| c.values().get(r as usize)),
                // Evaluated before the pick (it may fail).
                Arg::Row(_) | Arg::Top(..) => None,
            }
        };
        for (g, range) in runs {
            let Some(rows) = sel.get(range) else { continue };
            let accs = table.accs(g);
            match &self.picks {
                None => {
                    for ((acc, arg), meta) in accs.iter_mut().zip(&self.args).zip(&metas) {
                        match arg {
                            Arg::Const(v) => acc.feed_n(Some(v), rows.len() as u64),
                            Arg::Meta(rest) if own_meta.is_some() => {
                                for &r in rows {
                                    acc.feed(row_meta(rest, r).as_ref());
                                }
                            }
                            Arg::Meta(_) => acc.feed_n(meta.as_ref(), rows.len() as u64),
                            Arg::Column(c) => {
                                let vals = cols.get(*c).map_or(Col::Missing.values(), Col::values);
                                acc.feed_rows(&vals, rows);
                            }
                            Arg::Row(e) => {
                                for &r in rows {
                                    acc.feed(e.eval(&row_at(r))?.as_ref());
                                }
                            }
                            Arg::Top(items, desc, quick) => {
                                for &r in rows {
                                    if let Some(q) = quick {
                                        if !top_may_take(acc, q, &cols, r as usize, &mut keys) {
                                            continue;
                                        }
                                    }
                                    let row = row_at(r);
                                    let sort = |p: &str, asc| row.sort_value(p, asc);
                                    acc.feed(Some(&top_input(items, *desc, &row, sort)?));
                                }
                            }
                        }
                    }
                }
                Some(picks) => {
                    let mut best: [Option<u32>; 4] = [None; 4];
                    for (((acc, arg), meta), &(max_time, late)) in
                        accs.iter_mut().zip(&self.args).zip(&metas).zip(picks)
                    {
                        let slot = usize::from(max_time) * 2 + usize::from(late);
                        let r = match best.get(slot).copied().flatten() {
                            Some(r) => r,
                            None => {
                                let r = best_row(&times, rows, max_time, late);
                                if let Some(b) = best.get_mut(slot) {
                                    *b = Some(r);
                                }
                                r
                            }
                        };
                        let pos = ((idx as u64) << 32) | u64::from(r);
                        let t = time(r).unwrap_or(i64::MIN);
                        let eager = match arg {
                            Arg::Row(e) => Some(e.eval(&row_at(r))?),
                            _ => None,
                        };
                        acc.pick(t, pos, || eager.unwrap_or_else(|| value_at(arg, meta, r)));
                    }
                }
            }
        }
        cols.into_iter().for_each(Col::recycle);
        Ok(())
    }

    /// True when every accumulator is a `$top`/`$bottom` whose sort keys are top-level
    /// fields: what [`FastGroup::tops_settled`] can pass buckets over for.
    fn tops_only(&self) -> bool {
        self.picks.is_none()
            && !self.args.is_empty()
            && (self.args.iter()).all(|a| matches!(a, Arg::Top(_, _, Some(_))))
    }

    /// True when no row of the bucket can change its group, whose key is constant over it
    /// (`key`): every accumulator is a `$top`/`$bottom` holding a row whose first sort value
    /// beats every value the bucket's statistics allow. A bucket never mixes type classes in
    /// one field, so bounds of one scalar class bound every present value; a row without
    /// the field sorts as null, which counts unless every row has it.
    fn tops_settled(
        &self,
        table: &mut GroupTable,
        cache: &mut KeyCache,
        scan: &Scan,
        st: &BucketStats<'_>,
        key: Option<(Option<i64>, Option<u32>, &[i64])>,
    ) -> Result<bool> {
        let (Some((hi, part, starts)), true) = (key, self.tops_only()) else {
            return Ok(false);
        };
        let Some(g) = self.group_of(table, cache, part, starts, st.meta, hi, false)? else {
            return Ok(false);
        };
        for (acc, arg) in table.accs(g).iter().zip(&self.args) {
            let Arg::Top(_, _, Some(q)) = arg else {
                return Ok(false);
            };
            let Some(name) = q.first().and_then(|&c| self.columns.get(c)) else {
                return Ok(false);
            };
            let BoundRef::Range(lo, hi) = st.bound(name) else {
                return Ok(false);
            };
            let scalar = |v: &Bson| !matches!(v, Bson::Array(_) | Bson::Document(_));
            if !(scalar(lo) && scalar(hi) && type_rank(lo) == type_rank(hi)) {
                return Ok(false);
            }
            let lo = match source::in_every_row(&scan.src, name) {
                true => lo,
                false => &NULL,
            };
            if acc.top_may_take_within(lo, hi) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The runs of a whole bucket (rows = `sel` = `0..ts.len()`) whose rows all have a time,
    /// `ts`, for a key with one time leaf: each run is found by a scan of the times for the end
    /// of its bin, and its group looked up once.
    fn dense_time_runs(
        &self,
        table: &mut GroupTable,
        cache: &mut KeyCache,
        scan: &Scan,
        st: &BucketStats<'_>,
        ts: &[i64],
        runs: &mut Vec<(u32, std::ops::Range<usize>)>,
    ) -> Result<()> {
        let Some(leaf) = self.leaves.first() else {
            return Ok(());
        };
        let mut bin: Option<(i64, i64)> = None;
        let mut part: Option<Option<u32>> = None;
        let mut k = 0;
        while let Some(&t) = ts.get(k) {
            let (lo, hi) = match bin {
                Some(prev) => leaf.range_after(prev, t)?,
                None => leaf.range(t)?,
            };
            bin = Some((lo, hi));
            let len = Times::Values(ts).run(k, t, (lo, hi), 0);
            let p = *match &mut part {
                Some(p) => p,
                slot => slot.insert(self.key_part(cache, &scan.src, st.meta, Some(t))?),
            };
            let g = self
                .group_of(table, cache, p, &[lo], st.meta, Some(t), true)?
                .unwrap_or(0);
            match runs.last_mut() {
                Some((last, range)) if *last == g => range.end = k + len,
                _ => runs.push((g, k..k + len)),
            }
            k += len;
        }
        Ok(())
    }

    /// Appends the bin of time `t` for each of the key's time leaves, and the bins' starts.
    fn bins_at(&self, t: i64, bins: &mut Vec<(i64, i64)>, starts: &mut Vec<i64>) -> Result<()> {
        for leaf in &self.leaves {
            let b = leaf.range(t)?;
            bins.push(b);
            starts.push(b.0);
        }
        Ok(())
    }

    /// Replaces `bins` (the bins of an earlier time of the bucket, or none) by the bins of
    /// time `t`, and `starts` by their starts.
    fn next_bins(&self, t: i64, bins: &mut Vec<(i64, i64)>, starts: &mut Vec<i64>) -> Result<()> {
        starts.clear();
        if bins.len() != self.leaves.len() || bins.is_empty() {
            bins.clear();
            return self.bins_at(t, bins, starts);
        }
        for (leaf, b) in self.leaves.iter().zip(bins.iter_mut()) {
            *b = leaf.range_after(*b, t)?;
            starts.push(b.0);
        }
        Ok(())
    }

    /// Per accumulator, the meta value it reads in this bucket (`None` for the others).
    fn meta_args(&self, st: &BucketStats<'_>) -> Vec<Option<Bson>> {
        self.args
            .iter()
            .map(|a| match a {
                Arg::Meta(rest) => st.meta.and_then(|m| path_in_value(m, rest)),
                _ => None,
            })
            .collect()
    }

    /// The bucket's times as runs of equal times, when they are all the columns the group
    /// reads (counts, constants and meta values per time bin) and are stored as runs.
    fn time_runs(&self, scan: &Scan) -> Result<Option<Vec<(i64, u32)>>> {
        let per_row = |a: &Arg| matches!(a, Arg::Column(_) | Arg::Row(_) | Arg::Top(..));
        if self.leaves.is_empty() || self.by_rows || self.args.iter().any(per_row) {
            return Ok(None);
        }
        let Some(name) = self.time_col.and_then(|c| self.columns.get(c)) else {
            return Ok(None);
        };
        let forms = Forms {
            runs: true,
            no_values: true,
            ..Forms::default()
        };
        Ok(match source::load_one(&scan.src, name, forms)? {
            Stored::Runs(runs) => Some(runs),
            _ => None,
        })
    }

    /// Feeds a whole bucket from runs of equal times: one step per run, and one feed per
    /// stretch of runs in the same group.
    fn feed_runs(
        &self,
        table: &mut GroupTable,
        cache: &mut KeyCache,
        scan: &Scan,
        st: &BucketStats<'_>,
        runs: &[(i64, u32)],
    ) -> Result<()> {
        let metas = self.meta_args(st);
        let feed = |table: &mut GroupTable, g: u32, rows: u64| {
            for ((acc, arg), meta) in table.accs(g).iter_mut().zip(&self.args).zip(&metas) {
                match arg {
                    Arg::Const(v) => acc.feed_n(Some(v), rows),
                    Arg::Meta(_) => acc.feed_n(meta.as_ref(), rows),
                    Arg::Column(_) | Arg::Row(_) | Arg::Top(..) => {}
                }
            }
        };
        let mut bins: Vec<(i64, i64)> = Vec::with_capacity(self.leaves.len());
        let mut starts: Vec<i64> = Vec::with_capacity(self.leaves.len());
        let mut part: Option<Option<u32>> = None;
        // The current group and the rows gathered for it.
        let mut cur: Option<(u32, u64)> = None;
        for &(t, len) in runs {
            let same = !bins.is_empty() && bins.iter().all(|&(lo, hi)| lo <= t && t < hi);
            if !same {
                self.next_bins(t, &mut bins, &mut starts)?;
                if part.is_none() {
                    part = Some(self.key_part(cache, &scan.src, st.meta, Some(t))?);
                }
                let g = self
                    .group_of(
                        table,
                        cache,
                        part.flatten(),
                        &starts,
                        st.meta,
                        Some(t),
                        true,
                    )?
                    .unwrap_or(0);
                match cur {
                    Some((cg, _)) if cg == g => {}
                    Some((cg, rows)) => {
                        feed(table, cg, rows);
                        cur = Some((g, 0));
                    }
                    None => cur = Some((g, 0)),
                }
            }
            if let Some((_, rows)) = cur.as_mut() {
                *rows += u64::from(len);
            }
        }
        if let Some((g, rows)) = cur {
            feed(table, g, rows);
        }
        Ok(())
    }
}

/// The indexes of `scans` with segment buckets in file order, segment by segment (segments in
/// the order of their first bucket in `scans`, so that scans already in file order keep
/// theirs), then the others in arrival order: a counting sort, linear where a comparison sort of a whole collection's
/// buckets was a tenth of a grouped count. `None` when the scans cover too small a part of
/// their segments for that to pay, or list a bucket twice.
/// Scratch of the buckets grouped row by row, kept from bucket to bucket: each selected row's
/// group, and rows per group with the groups counted.
#[derive(Default)]
struct RowGroups {
    groups: Vec<u32>,
    /// Rows per group, by group; zero between buckets.
    counts: Vec<u32>,
    /// The groups with a count, in the order they first came.
    touched: Vec<u32>,
}

/// The group of each row of `sel`, given to `emit` in order, for a key that reads what
/// differs by row. When the key is one typed column (`key_col`), a row's group is found by
/// its value's type and bits, and `new_group` (the key evaluated on the row) runs once per
/// value; otherwise, or where the row has no typed value, for the row.
fn key_groups(
    key_col: Option<&Col>,
    sel: &[u32],
    cache: &mut KeyCache,
    new_group: impl FnMut(u32) -> Result<u32>,
    emit: impl FnMut(u32),
) -> Result<()> {
    // One loop per representation, so that reading a value is an index, not a match.
    match key_col {
        Some(Col::Double(Slots::Dense(v))) => {
            let bits = |r: usize| v.get(r).map(|x| (3, x.to_bits()));
            groups_by_value(sel, bits, cache, new_group, emit)
        }
        Some(Col::Int64(Slots::Dense(v))) => {
            let bits = |r: usize| v.get(r).map(|&x| (2, x as u64));
            groups_by_value(sel, bits, cache, new_group, emit)
        }
        Some(Col::Int32(Slots::Dense(v))) => {
            let bits = |r: usize| v.get(r).map(|&x| (1, x as u64));
            groups_by_value(sel, bits, cache, new_group, emit)
        }
        Some(Col::Date(Slots::Dense(v))) => {
            let bits = |r: usize| v.get(r).map(|&x| (4, x as u64));
            groups_by_value(sel, bits, cache, new_group, emit)
        }
        Some(c) => groups_by_value(sel, |r| c.typed_bits(r), cache, new_group, emit),
        None => groups_by_value(sel, |_| None, cache, new_group, emit),
    }
}

/// [`key_groups`] with `bits` giving a row's typed value (see [`Col::typed_bits`]).
#[inline(always)]
fn groups_by_value(
    sel: &[u32],
    bits: impl Fn(usize) -> Option<(u8, u64)>,
    cache: &mut KeyCache,
    mut new_group: impl FnMut(u32) -> Result<u32>,
    mut emit: impl FnMut(u32),
) -> Result<()> {
    for &r in sel {
        let g = match bits(r as usize) {
            Some(v) => match cache.by_value(v) {
                Some(g) => g,
                None => {
                    let g = new_group(r)?;
                    cache.put_value(v, g);
                    g
                }
            },
            None => new_group(r)?,
        };
        emit(g);
    }
    Ok(())
}

/// Counts a row of group `g` in `counts` (by group; zero between buckets), listing in
/// `touched` the groups counted, in the order they first came.
#[inline(always)]
fn count_group(counts: &mut Vec<u32>, touched: &mut Vec<u32>, g: u32) {
    let at = g as usize;
    if at >= counts.len() {
        counts.resize(at + 1, 0);
    }
    if let Some(c) = counts.get_mut(at) {
        if *c == 0 {
            touched.push(g);
        }
        *c += 1;
    }
}

fn file_order(scans: &Scans) -> Option<Vec<usize>> {
    if in_file_order((0..scans.len()).map(|k| scans.place(k))) {
        return Some((0..scans.len()).collect());
    }
    // A slot per bucket of each segment touched, by segment number: segments are numbered in
    // the order their first bucket was chosen.
    let mut segs: Vec<Vec<u32>> = vec![Vec::new(); scans.segment_count()];
    let mut rest = Vec::new();
    let mut slots = 0usize;
    for k in 0..scans.len() {
        let Some((n, i)) = scans.place(k) else {
            rest.push(k);
            continue;
        };
        let v = segs.get_mut(n as usize)?;
        if v.is_empty() {
            let len = scans.segment(n)?.buckets().len();
            slots += len;
            if slots > scans.len().saturating_mul(4) {
                return None;
            }
            *v = vec![u32::MAX; len];
        }
        let slot = v.get_mut(i as usize)?;
        if *slot != u32::MAX {
            return None;
        }
        *slot = u32::try_from(k).ok()?;
    }
    let mut out = Vec::with_capacity(scans.len());
    for v in segs {
        out.extend(v.into_iter().filter(|&k| k != u32::MAX).map(|k| k as usize));
    }
    out.extend(rest);
    Some(out)
}

/// True when scans at `places` (segment number and bucket, `None` in memory) are in the order
/// [`file_order`] gives them already, as a walk of the files lists them: each segment's
/// buckets together and ascending, buckets in memory last. Checking is a tenth of the cost of
/// sorting.
fn in_file_order(places: impl Iterator<Item = Option<(u32, u32)>>) -> bool {
    let mut seen: Vec<u32> = Vec::new();
    let mut last: Option<(u32, u32)> = None;
    let mut in_memory = false;
    for place in places {
        let Some((key, i)) = place else {
            in_memory = true;
            continue;
        };
        match last {
            _ if in_memory => return false,
            Some((k, j)) if k == key => {
                if i <= j {
                    return false;
                }
            }
            _ => {
                if seen.contains(&key) {
                    return false;
                }
                seen.push(key);
            }
        }
        last = Some((key, i));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;
    use proptest::prelude::*;

    fn leaf(unit: &str, bin: i64, sow: &str) -> Leaf {
        let arg =
            Bson::Document(doc! {"date": "$t", "unit": unit, "binSize": bin, "startOfWeek": sow});
        Leaf::Trunc(DateTrunc::parse(&arg, Expr::parse).unwrap())
    }

    proptest! {
        /// The bin found from the previous one is the bin computed afresh, in and out of
        /// order, next to the bin before and far from it, at the ends of the date range.
        #[test]
        fn bins_after_a_bin_are_the_bins_of_the_time(
            unit in prop::sample::select(vec![
                "millisecond", "second", "minute", "hour", "day", "week", "month", "quarter", "year",
            ]),
            bin in 1i64..5,
            sow in prop::sample::select(vec!["monday", "sunday", "wed"]),
            start in prop_oneof![
                -5_000_000_000_000i64..5_000_000_000_000,
                Just(i64::MAX - 1000),
                Just(i64::MIN + 1000),
            ],
            // (step, or with `true` the number of bin lengths past the end of the last bin,
            // give or take the step's sign: bin boundaries are where mistakes hide)
            steps in prop::collection::vec(
                (prop_oneof![0i64..200_000, -100_000i64..100_000, 0i64..40_000_000_000, -1i64..=1], any::<bool>()),
                1..30,
            ),
        ) {
            for l in [leaf(unit, bin, sow), Leaf::Raw] {
                let mut t = start;
                let mut prev = l.range(t);
                for &(s, snap) in &steps {
                    t = match (snap, &prev) {
                        (true, Ok((lo, hi))) => hi
                            .saturating_add((s.rem_euclid(3)).saturating_mul(hi.saturating_sub(*lo)))
                            .saturating_add(s.signum()),
                        _ => t.saturating_add(s),
                    };
                    let fresh = l.range(t);
                    if let Ok(p) = prev {
                        let after = l.range_after(p, t);
                        prop_assert_eq!(format!("{after:?}"), format!("{fresh:?}"), "{} at {}", unit, t);
                    }
                    prev = fresh;
                }
            }
        }
    }

    #[test]
    fn best_rows_follow_stable_sort_ties() {
        let times = [Some(5), Some(9), Some(9), Some(1), Some(1)];
        let rows = [0, 1, 2, 3, 4];
        assert_eq!(best_row(&times, &rows, true, true), 2);
        assert_eq!(best_row(&times, &rows, true, false), 1);
        assert_eq!(best_row(&times, &rows, false, true), 4);
        assert_eq!(best_row(&times, &rows, false, false), 3);
    }

    proptest! {
        /// The check agrees with sorting: scans are in file order exactly when sorting them
        /// by segment (in order of first appearance) and bucket, buckets in memory last, moves
        /// none of them.
        #[test]
        fn scans_are_in_file_order_when_sorting_moves_none(
            places in prop::collection::vec(prop::option::weighted(0.9, (0u32..3, 0u32..6)), 0..12),
        ) {
            let mut first: Vec<u32> = Vec::new();
            for (seg, _) in places.iter().flatten() {
                if !first.contains(seg) {
                    first.push(*seg);
                }
            }
            let rank = |p: &Option<(u32, u32)>| match p {
                Some((seg, i)) => (0, first.iter().position(|s| s == seg), *i),
                None => (1, None, 0),
            };
            let mut sorted: Vec<usize> = (0..places.len()).collect();
            sorted.sort_by_key(|&k| rank(&places[k]));
            let unique = places.iter().flatten().collect::<std::collections::HashSet<_>>().len()
                == places.iter().flatten().count();
            let identity = sorted.iter().enumerate().all(|(i, &k)| i == k);
            prop_assert_eq!(in_file_order(places.iter().copied()), identity && unique);
        }
    }
}
