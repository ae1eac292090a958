//! `$group` accumulator states with MongoDB's value semantics, fed one document value at a time,
//! from typed column slices, or from a bucket's statistics.
//!
//! - `$sum` ignores non-numbers; the result has the widest input type (int32 < int64 < double),
//!   an int32 total that overflows becomes int64 and an int64 total that overflows becomes
//!   double. Integers are summed exactly; doubles with MongoDB's double-double summation.
//! - `$avg` ignores non-numbers, is a double, and null when no number was seen.
//! - `$min`/`$max` ignore missing, null and undefined (null when nothing else was seen) and
//!   compare across types in BSON order; among equal values the first seen stays.
//! - `$first`/`$last` take the value of the first/last document (missing becomes null).
//! - `$top`/`$bottom` take the output of the first/last document of a stable sort of the
//!   input by their `sortBy` (sort keys compared as `$sort` compares them).

use crate::query::expr::Expr;
use crate::query::slots::SlotsRef;
use crate::error::{Error, Result};
use crate::order::cmp_bson;
use bson::{Bson, DateTime};
use std::cmp::Ordering;

/// Accumulator operators (`$count: {}` is `$sum: 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccOp {
    /// `$sum`
    Sum,
    /// `$avg`
    Avg,
    /// `$min`
    Min,
    /// `$max`
    Max,
    /// `$first`
    First,
    /// `$last`
    Last,
    /// `$top` (`bottom: false`) or `$bottom`. The argument is an array expression: the sort
    /// keys' paths in order, then the output; bit `i` of `descending` is set when sort key `i`
    /// is descending. The state is fed `[sort values..., output]`, the sort values read as
    /// `$sort` reads them (`GroupTable::feed_doc`).
    Top {
        /// Descending keys, as bits.
        descending: u32,
        /// `$bottom`.
        bottom: bool,
    },
}

/// One output field of a `$group`.
#[derive(Debug, Clone, PartialEq)]
pub struct AccSpec {
    /// Output field name.
    pub name: String,
    /// The operator.
    pub op: AccOp,
    /// Its argument.
    pub arg: Expr,
}

/// A column's values at each row of a bucket, borrowed in typed form.
#[derive(Debug, Clone, Copy)]
pub enum Values<'a> {
    /// The bucket has no such field.
    Missing,
    /// Int32 values (widened).
    Int32(SlotsRef<'a, i64>),
    /// Int64 values.
    Int64(SlotsRef<'a, i64>),
    /// Double values.
    Double(SlotsRef<'a, f64>),
    /// Dates as epoch milliseconds.
    Date(SlotsRef<'a, i64>),
    /// Anything else.
    Bson(&'a [Option<Bson>]),
}

impl Values<'_> {
    /// The value at row `r` (`None` = missing).
    pub fn get(&self, r: usize) -> Option<Bson> {
        match self {
            Values::Missing => None,
            Values::Int32(v) => v.get(r).map(|x| Bson::Int32(x as i32)),
            Values::Int64(v) => v.get(r).map(Bson::Int64),
            Values::Double(v) => v.get(r).map(Bson::Double),
            Values::Date(v) => v.get(r).map(|x| Bson::DateTime(DateTime::from_millis(x))),
            Values::Bson(v) => v.get(r).cloned().flatten(),
        }
    }
}

/// MongoDB's `DoubleDoubleSummation`: an unevaluated sum of two doubles, so that long series
/// of doubles lose almost no precision.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct DoubleDouble {
    sum: f64,
    addend: f64,
    /// Plain sum, returned when the compensated one turned into NaN through infinities.
    special: f64,
}

impl DoubleDouble {
    fn add(&mut self, x: f64) {
        self.special += x;
        // Fast2Sum of x and the addend, then 2Sum into the running sum.
        let s = x + self.addend;
        let z = s - x;
        self.addend -= z;
        let x = s;
        let t = self.sum + x;
        let a = t - x;
        let b = t - a;
        let err = (self.sum - a) + (x - b);
        self.sum = t;
        self.addend += err;
    }

    /// Adds an exact integer in parts that doubles hold exactly.
    fn add_int(&mut self, x: i128) {
        let lo = (x & 0xFFFF_FFFF) as f64;
        let mid = ((x >> 32) & 0xFFFF_FFFF) as f64 * 4_294_967_296.0;
        let hi = (x >> 64) as f64 * 18_446_744_073_709_551_616.0;
        for part in [lo, mid, hi] {
            if part != 0.0 {
                self.add(part);
            }
        }
    }

    /// Adds both parts of `other`; the plain sums add up.
    fn merge(&mut self, other: &DoubleDouble) {
        let special = self.special + other.special;
        self.add(other.sum);
        self.add(other.addend);
        self.special = special;
    }

    fn get(&self) -> f64 {
        if self.sum.is_nan() {
            self.special
        } else if self.sum.is_infinite() {
            // An infinity leaves NaN in the addend (inf - inf); the sum is the infinity, as
            // MongoDB answers.
            self.sum
        } else {
            // The value is the unevaluated sum of both parts: `sum` alone loses what cancelled.
            self.sum + self.addend
        }
    }
}

/// The widest numeric type seen by a sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
enum Widest {
    #[default]
    Int32,
    Int64,
    Double,
}

/// The running total of `$sum` and `$avg`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sum {
    /// Exact total of the integer inputs.
    ints: i128,
    /// Total of the double inputs.
    dd: DoubleDouble,
    widest: Widest,
    /// A Decimal128 input was seen: not supported (MongoDB would answer in decimal).
    decimal: bool,
}

impl Sum {
    /// Adds one value; returns true when it was a number.
    fn add(&mut self, v: &Bson) -> bool {
        match v {
            Bson::Int32(x) => self.ints += i128::from(*x),
            Bson::Int64(x) => {
                self.ints += i128::from(*x);
                self.widest = self.widest.max(Widest::Int64);
            }
            Bson::Double(x) => {
                self.dd.add(*x);
                self.widest = Widest::Double;
            }
            Bson::Decimal128(_) => self.decimal = true,
            _ => return false,
        }
        true
    }

    /// Adds the total of `other`.
    fn merge(&mut self, other: &Sum) {
        self.ints += other.ints;
        if other.dd != DoubleDouble::default() {
            self.dd.merge(&other.dd);
        }
        self.widest = self.widest.max(other.widest);
        self.decimal |= other.decimal;
    }

    fn total_f64(&self) -> f64 {
        if self.dd == DoubleDouble::default() {
            // Integers only: one rounding of the exact sum.
            return self.ints as f64;
        }
        let mut dd = self.dd;
        dd.add_int(self.ints);
        dd.get()
    }

    fn check(&self, op: &str) -> Result<()> {
        if self.decimal {
            return Err(Error::BadValue(format!(
                "{op} over Decimal128 values is not supported"
            )));
        }
        Ok(())
    }

    fn value(&self) -> Result<Bson> {
        self.check("$sum")?;
        Ok(match self.widest {
            Widest::Double => Bson::Double(self.total_f64()),
            w => match (i32::try_from(self.ints), i64::try_from(self.ints)) {
                (Ok(x), _) if w == Widest::Int32 => Bson::Int32(x),
                (_, Ok(x)) => Bson::Int64(x),
                _ => Bson::Double(self.total_f64()),
            },
        })
    }
}

/// A value an accumulator holds: numbers, dates and the like in place, anything else boxed.
/// A `Bson` in place would make every state, a sum's too, three times the 64 bytes of a cache
/// line, and a query with many groups reads and writes each group's states once per bucket;
/// boxing every value cost an allocation per group and field for `$last` of scalars.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Held {
    /// Nothing held yet.
    #[default]
    Nothing,
    /// `null`
    Null,
    /// An int32.
    Int32(i32),
    /// An int64.
    Int64(i64),
    /// A double.
    Double(f64),
    /// A date, in epoch milliseconds.
    Date(i64),
    /// A boolean.
    Bool(bool),
    /// Any other value.
    Other(Box<Bson>),
}

impl Held {
    fn is_nothing(&self) -> bool {
        matches!(self, Held::Nothing)
    }

    /// Holds `v`, in the box already held when it is boxed too.
    fn set(&mut self, v: Bson) {
        *self = match v {
            Bson::Null => Held::Null,
            Bson::Int32(x) => Held::Int32(x),
            Bson::Int64(x) => Held::Int64(x),
            Bson::Double(x) => Held::Double(x),
            Bson::DateTime(d) => Held::Date(d.timestamp_millis()),
            Bson::Boolean(b) => Held::Bool(b),
            v => match self {
                Held::Other(b) => {
                    **b = v;
                    return;
                }
                _ => Held::Other(Box::new(v)),
            },
        }
    }

    /// The value held.
    fn get(&self) -> Option<Bson> {
        Some(match self {
            Held::Nothing => return None,
            Held::Null => Bson::Null,
            Held::Int32(x) => Bson::Int32(*x),
            Held::Int64(x) => Bson::Int64(*x),
            Held::Double(x) => Bson::Double(*x),
            Held::Date(x) => Bson::DateTime(DateTime::from_millis(*x)),
            Held::Bool(b) => Bson::Boolean(*b),
            Held::Other(b) => (**b).clone(),
        })
    }

    /// `f` of the value held, without copying a boxed one.
    fn with<R>(&self, f: impl FnOnce(Option<&Bson>) -> R) -> R {
        match self {
            Held::Other(b) => f(Some(b)),
            h => f(h.get().as_ref()),
        }
    }
}

/// The state of one accumulator in one group.
#[derive(Debug, Clone, PartialEq)]
pub enum Acc {
    /// `$sum`
    Sum(Sum),
    /// `$avg`: the total and the count of numbers.
    Avg(Sum, u64),
    /// `$min`
    Min(Held),
    /// `$max`
    Max(Held),
    /// `$first`: `None` until a document was seen.
    First(Held),
    /// `$last`
    Last(Held),
    /// `$first`/`$last` after a `$sort` on the time field: the value of the best row by
    /// (time, stream position), so that rows need not be sorted.
    Pick {
        /// (time, position) of the row kept.
        best: Option<(i64, u64)>,
        /// Its value (`None`: null).
        value: Held,
        /// Latest time wins (else earliest).
        max_time: bool,
        /// Among equal times the later stream position wins (else the earlier).
        late: bool,
    },
    /// `$top`/`$bottom`: the sort keys and output of the document kept.
    Top {
        /// Descending keys, as bits.
        descending: u32,
        /// `$bottom`: a later document wins among equal keys.
        bottom: bool,
        /// The keys and output kept.
        best: Option<Box<(Vec<Bson>, Bson)>>,
    },
}

fn nullish(v: &Bson) -> bool {
    matches!(v, Bson::Null | Bson::Undefined)
}

/// True when `a` beats `b` for an extreme in direction `want` (NaN below every number, first
/// seen kept among equals, as BSON order does).
fn beats_f64(a: f64, b: f64, want: Ordering) -> bool {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => false,
        (true, false) => want == Ordering::Less,
        (false, true) => want == Ordering::Greater,
        _ => a.partial_cmp(&b) == Some(want),
    }
}

/// The exact sum of `s`: in an `i64` while it fits (an add and a branch never taken per
/// value), in an `i128` from the first overflow on.
pub fn exact_sum(s: &[i64]) -> i128 {
    let mut total = 0i64;
    for (k, &x) in s.iter().enumerate() {
        match total.checked_add(x) {
            Some(t) => total = t,
            None => {
                let rest = s.get(k..).unwrap_or_default();
                return i128::from(total) + rest.iter().map(|&x| i128::from(x)).sum::<i128>();
            }
        }
    }
    i128::from(total)
}

impl Acc {
    /// A fresh state for `op`.
    pub fn new(op: AccOp) -> Acc {
        match op {
            AccOp::Sum => Acc::Sum(Sum::default()),
            AccOp::Avg => Acc::Avg(Sum::default(), 0),
            AccOp::Min => Acc::Min(Held::Nothing),
            AccOp::Max => Acc::Max(Held::Nothing),
            AccOp::First => Acc::First(Held::Nothing),
            AccOp::Last => Acc::Last(Held::Nothing),
            AccOp::Top { descending, bottom } => Acc::Top {
                descending,
                bottom,
                best: None,
            },
        }
    }

    /// A fresh `$first`/`$last` state that picks by time instead of arrival order.
    pub fn new_pick(max_time: bool, late: bool) -> Acc {
        Acc::Pick {
            best: None,
            value: Held::Nothing,
            max_time,
            late,
        }
    }

    /// Feeds the value of one document (`None` = missing).
    pub fn feed(&mut self, v: Option<&Bson>) {
        self.feed_n(v, 1);
    }

    /// Feeds `n` documents that all have value `v`.
    pub fn feed_n(&mut self, v: Option<&Bson>, n: u64) {
        if n == 0 {
            return;
        }
        match self {
            Acc::Sum(s) => {
                if let Some(v) = v {
                    add_n(s, v, n);
                }
            }
            Acc::Avg(s, c) => {
                if let Some(v) = v {
                    if add_n(s, v, n) {
                        *c += n;
                    }
                }
            }
            Acc::Min(cur) => fold(cur, v, Ordering::Less),
            Acc::Max(cur) => fold(cur, v, Ordering::Greater),
            Acc::First(cur) => {
                if cur.is_nothing() {
                    cur.set(v.cloned().unwrap_or(Bson::Null));
                }
            }
            Acc::Last(cur) => cur.set(v.cloned().unwrap_or(Bson::Null)),
            // Picks need a time and position: see `pick`.
            Acc::Pick { .. } => {}
            Acc::Top {
                descending,
                bottom,
                best,
            } => {
                // The argument evaluates to [key, ..., output].
                let Some(Bson::Array(items)) = v else {
                    return;
                };
                let Some((out, keys)) = items.split_last() else {
                    return;
                };
                // The keys are the values the documents sort by (see `GroupTable::feed_doc`).
                let keys = keys.to_vec();
                let wins = match best.as_deref() {
                    None => true,
                    Some((b, _)) => match cmp_keys(&keys, b, *descending) {
                        Ordering::Less => !*bottom,
                        Ordering::Equal => *bottom,
                        Ordering::Greater => *bottom,
                    },
                };
                if wins {
                    *best = Some(Box::new((keys, out.clone())));
                }
            }
        }
    }

    /// Whether a row whose `$top`/`$bottom` sort values are `keys` would replace the one the
    /// accumulator holds (true for other accumulators): a caller skips building the input of
    /// a row that cannot win.
    pub fn top_takes(&self, keys: &[Bson]) -> bool {
        self.top_takes_by(|i, kept| Some(cmp_bson(keys.get(i)?, kept)))
            .unwrap_or(true)
    }

    /// [`Acc::top_takes`] with the row's sort values compared by `cmp`, given a key's place and
    /// the kept row's value of it, so that a caller can compare typed values without building
    /// them; `None` when `cmp` could not compare one.
    pub fn top_takes_by(&self, cmp: impl Fn(usize, &Bson) -> Option<Ordering>) -> Option<bool> {
        let Some((descending, bottom, keys)) = self.top_kept() else {
            return Some(true);
        };
        let mut o = Ordering::Equal;
        for (i, kept) in keys.iter().enumerate() {
            let c = cmp(i, kept)?;
            o = if i < 32 && descending & (1 << i) != 0 {
                c.reverse()
            } else {
                c
            };
            if o != Ordering::Equal {
                break;
            }
        }
        Some(match o {
            Ordering::Less => !bottom,
            Ordering::Equal | Ordering::Greater => bottom,
        })
    }

    /// A `$top`/`$bottom` holding a row: its descending keys, whether it is `$bottom`, and the
    /// row's sort values.
    fn top_kept(&self) -> Option<(u32, bool, &[Bson])> {
        match self {
            Acc::Top {
                descending,
                bottom,
                best: Some(b),
            } => Some((*descending, *bottom, &b.0)),
            _ => None,
        }
    }

    /// Whether a row whose first sort value lies between `lo` and `hi` (in BSON order) could
    /// replace the row a `$top`/`$bottom` holds (true for other accumulators and an empty
    /// one): a row whose first value is strictly worse never does, whatever its other keys.
    pub fn top_may_take_within(&self, lo: &Bson, hi: &Bson) -> bool {
        let Some((descending, bottom, [kept, ..])) = self.top_kept() else {
            return true;
        };
        let desc = descending & 1 != 0;
        // `$top` keeps the first row in sort order, `$bottom` the last: the bucket's value
        // furthest toward that end.
        let extreme = if bottom == desc { lo } else { hi };
        let o = cmp_bson(extreme, kept);
        let o = if desc { o.reverse() } else { o };
        match bottom {
            false => o != Ordering::Greater,
            true => o != Ordering::Less,
        }
    }

    /// Offers the value of the row at (`time`, `pos`) to a pick; `value` is only evaluated when
    /// the row wins.
    pub fn pick(&mut self, time: i64, pos: u64, value: impl FnOnce() -> Option<Bson>) {
        if let Acc::Pick {
            best,
            value: kept,
            max_time,
            late,
        } = self
        {
            if pick_beats((time, pos), *best, *max_time, *late) {
                *best = Some((time, pos));
                kept.set(value().unwrap_or(Bson::Null));
            }
        }
    }

    /// True when a row no later/earlier than `bound` could still replace the pick's row: the
    /// bucket's time bound in the pick's direction.
    pub fn pick_may_change(&self, bound: i64) -> bool {
        match self {
            Acc::Pick {
                best: Some((t, _)),
                max_time,
                ..
            } => {
                if *max_time {
                    bound >= *t
                } else {
                    bound <= *t
                }
            }
            _ => true,
        }
    }

    /// Feeds the rows `rows` of a column (in stream order).
    pub fn feed_rows(&mut self, vals: &Values<'_>, rows: &[u32]) {
        let (Some(&first), Some(&last)) = (rows.first(), rows.last()) else {
            return;
        };
        // Rows in stream order that are as many as their span are consecutive (a bucket taken
        // whole): read them as one slice rather than through their indexes.
        if (last.wrapping_sub(first) as usize).wrapping_add(1) == rows.len() {
            return self.feed_span(vals, first as usize..last as usize + 1);
        }
        if self.feed_ends(vals, first as usize, last as usize) {
            return;
        }
        let at = |r: &u32| *r as usize;
        match vals {
            Values::Missing => {}
            Values::Int32(v) | Values::Int64(v) => {
                let wide = matches!(vals, Values::Int64(_));
                self.feed_ints(rows.iter().filter_map(|r| v.get(at(r))), wide)
            }
            Values::Double(v) => self.feed_doubles(rows.iter().filter_map(|r| v.get(at(r)))),
            Values::Date(v) => self.feed_dates(rows.iter().filter_map(|r| v.get(at(r)))),
            Values::Bson(v) => {
                for r in rows {
                    self.feed(v.get(at(r)).and_then(Option::as_ref));
                }
            }
        }
    }

    /// Feeds the consecutive rows `rows` of a column.
    pub fn feed_span(&mut self, vals: &Values<'_>, rows: std::ops::Range<usize>) {
        if rows.is_empty() || self.feed_ends(vals, rows.start, rows.end - 1) {
            return;
        }
        // Rows past the end of the values have none.
        let clamp = |len: usize| rows.start.min(len)..rows.end.min(len);
        match vals {
            Values::Missing => {}
            Values::Int32(v) | Values::Int64(v) => {
                let wide = matches!(vals, Values::Int64(_));
                match v.slice(clamp(v.len())) {
                    Some(SlotsRef::Dense(s)) => self.feed_int_slice(s, wide),
                    Some(SlotsRef::Rows(s)) => self.feed_ints(s.iter().flatten().copied(), wide),
                    None => {}
                }
            }
            Values::Double(v) => match v.slice(clamp(v.len())) {
                Some(SlotsRef::Dense(s)) => self.feed_doubles(s.iter().copied()),
                Some(SlotsRef::Rows(s)) => self.feed_doubles(s.iter().flatten().copied()),
                None => {}
            },
            Values::Date(v) => self.feed_dates(rows.filter_map(|r| v.get(r))),
            Values::Bson(v) => {
                for r in rows {
                    self.feed(v.get(r).and_then(Option::as_ref));
                }
            }
        }
    }

    /// Feeds `$first` the value at row `first` and `$last` the one at row `last`; true when
    /// the accumulator is one of them or a pick (which rows do not feed), and so is done.
    #[inline]
    fn feed_ends(&mut self, vals: &Values<'_>, first: usize, last: usize) -> bool {
        match self {
            Acc::First(cur) => {
                if cur.is_nothing() {
                    cur.set(vals.get(first).unwrap_or(Bson::Null));
                }
            }
            Acc::Last(cur) => cur.set(vals.get(last).unwrap_or(Bson::Null)),
            Acc::Pick { .. } => {}
            _ => return false,
        }
        true
    }

    /// Feeds dates (epoch milliseconds): only minima and maxima read them, since sums ignore
    /// what is not a number.
    fn feed_dates(&mut self, it: impl Iterator<Item = i64>) {
        let ext = match self {
            Acc::Min(_) => it.min(),
            Acc::Max(_) => it.max(),
            _ => return,
        };
        if let Some(x) = ext {
            self.feed(Some(&Bson::DateTime(DateTime::from_millis(x))));
        }
    }

    /// Adds `total`, the exact sum of `n` integers, to a sum or average; the other
    /// accumulators ignore it.
    #[inline]
    pub fn add_ints(&mut self, total: i128, n: u64, wide: bool) {
        if let Acc::Sum(s) | Acc::Avg(s, _) = self {
            if n > 0 {
                s.ints += total;
                if wide {
                    s.widest = s.widest.max(Widest::Int64);
                }
            }
        }
        if let Acc::Avg(_, c) = self {
            *c += n;
        }
    }

    /// [`Acc::feed_ints`] over a slice: sums take [`exact_sum`].
    fn feed_int_slice(&mut self, s: &[i64], wide: bool) {
        match self {
            Acc::Sum(_) | Acc::Avg(..) => self.add_ints(exact_sum(s), s.len() as u64, wide),
            _ => self.feed_ints(s.iter().copied(), wide),
        }
    }

    fn feed_ints(&mut self, it: impl Iterator<Item = i64>, wide: bool) {
        let as_bson = |x: i64| {
            if wide {
                Bson::Int64(x)
            } else {
                Bson::Int32(x as i32)
            }
        };
        match self {
            Acc::Sum(_) | Acc::Avg(..) => {
                let (mut total, mut n) = (0i128, 0u64);
                for x in it {
                    total += i128::from(x);
                    n += 1;
                }
                self.add_ints(total, n, wide);
            }
            Acc::Min(_) => {
                if let Some(x) = it.min() {
                    self.feed(Some(&as_bson(x)));
                }
            }
            Acc::Max(_) => {
                if let Some(x) = it.max() {
                    self.feed(Some(&as_bson(x)));
                }
            }
            _ => {}
        }
    }

    fn feed_doubles(&mut self, it: impl Iterator<Item = f64>) {
        let want = match self {
            Acc::Sum(s) | Acc::Avg(s, _) => {
                let mut n = 0u64;
                for x in it {
                    s.dd.add(x);
                    n += 1;
                }
                if n > 0 {
                    s.widest = Widest::Double;
                }
                if let Acc::Avg(_, c) = self {
                    *c += n;
                }
                return;
            }
            Acc::Min(_) => Ordering::Less,
            Acc::Max(_) => Ordering::Greater,
            _ => return,
        };
        let mut ext: Option<f64> = None;
        for x in it {
            if ext.is_none_or(|e| beats_f64(x, e, want)) {
                ext = Some(x);
            }
        }
        if let Some(x) = ext {
            self.feed(Some(&Bson::Double(x)));
        }
    }

    /// Merges the state of the same accumulator over input that follows this state's:
    /// `$first` keeps this state's value, `$last` takes `later`'s, picks keep the better row.
    pub fn merge(&mut self, later: Acc) {
        match (self, later) {
            (Acc::Sum(s), Acc::Sum(o)) => s.merge(&o),
            (Acc::Avg(s, c), Acc::Avg(o, oc)) => {
                s.merge(&o);
                *c += oc;
            }
            (Acc::Min(cur), Acc::Min(o)) => o.with(|o| fold(cur, o, Ordering::Less)),
            (Acc::Max(cur), Acc::Max(o)) => o.with(|o| fold(cur, o, Ordering::Greater)),
            (Acc::First(cur @ Held::Nothing), Acc::First(o)) => *cur = o,
            (Acc::Last(cur), Acc::Last(o)) if !o.is_nothing() => *cur = o,
            (
                Acc::Pick {
                    best,
                    value,
                    max_time,
                    late,
                },
                Acc::Pick {
                    best: Some(ob),
                    value: ov,
                    ..
                },
            ) if pick_beats(ob, *best, *max_time, *late) => {
                *best = Some(ob);
                *value = ov;
            }
            (
                Acc::Top {
                    descending,
                    bottom,
                    best,
                },
                Acc::Top { best: Some(o), .. },
            ) => {
                // The later input wins ties for `$bottom` only.
                let wins = best.as_deref().is_none_or(|b| {
                    match cmp_keys(&o.0, &b.0, *descending) {
                        Ordering::Less => !*bottom,
                        Ordering::Equal | Ordering::Greater => *bottom,
                    }
                });
                if wins {
                    *best = Some(o);
                }
            }
            // The other pairs change nothing (different operators never meet: both states
            // come from one group spec).
            _ => {}
        }
    }

    /// Feeds a bucket's pre-computed sum of a field over its `count` numeric values.
    pub fn feed_sum_stat(&mut self, sum: &Bson, count: u64) {
        let (s, c) = match self {
            Acc::Sum(s) => (s, None),
            Acc::Avg(s, c) => (s, Some(c)),
            _ => return,
        };
        if s.add(sum) {
            if let Some(c) = c {
                *c += count;
            }
        }
    }

    /// The accumulated result.
    pub fn value(&self) -> Result<Bson> {
        Ok(match self {
            Acc::Sum(s) => s.value()?,
            Acc::Avg(s, c) => {
                s.check("$avg")?;
                if *c == 0 {
                    Bson::Null
                } else {
                    Bson::Double(s.total_f64() / *c as f64)
                }
            }
            Acc::Min(v)
            | Acc::Max(v)
            | Acc::First(v)
            | Acc::Last(v)
            | Acc::Pick { value: v, .. } => v.get().unwrap_or(Bson::Null),
            Acc::Top { best, .. } => best.as_deref().map_or(Bson::Null, |b| b.1.clone()),
        })
    }
}

/// `a` against `b` in sort order: keys compared in BSON order, descending ones reversed.
fn cmp_keys(a: &[Bson], b: &[Bson], descending: u32) -> Ordering {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let o = cmp_bson(x, y);
        let o = if i < 32 && descending & (1 << i) != 0 {
            o.reverse()
        } else {
            o
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    Ordering::Equal
}

/// True when the row at `key` replaces the pick `best`.
fn pick_beats(key: (i64, u64), best: Option<(i64, u64)>, max_time: bool, late: bool) -> bool {
    let Some((bt, bp)) = best else {
        return true;
    };
    let (t, p) = key;
    if t != bt {
        return (t > bt) == max_time;
    }
    (p > bp) == late
}

/// Adds `v` `n` times; true when it is a number.
fn add_n(s: &mut Sum, v: &Bson, n: u64) -> bool {
    match v {
        Bson::Int32(x) => {
            s.ints += i128::from(*x) * i128::from(n);
            true
        }
        Bson::Int64(x) => {
            s.ints += i128::from(*x) * i128::from(n);
            s.widest = s.widest.max(Widest::Int64);
            true
        }
        _ => {
            // Doubles are added one at a time so the rounding matches row-by-row feeding.
            let mut num = false;
            for _ in 0..n {
                num = s.add(v);
                if !num {
                    break;
                }
            }
            num
        }
    }
}

fn fold(cur: &mut Held, v: Option<&Bson>, want: Ordering) {
    let Some(v) = v else { return };
    if nullish(v) {
        return;
    }
    if cur.with(|c| c.is_some_and(|c| cmp_bson(v, c) != want)) {
        return;
    }
    cur.set(v.clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn exact_sums_are_the_i128_sums(v in proptest::collection::vec(proptest::num::i64::ANY, 0..300)) {
            proptest::prop_assert_eq!(exact_sum(&v), v.iter().map(|&x| i128::from(x)).sum::<i128>());
        }
    }

    /// `$top`/`$bottom` over `[keys..., output]` values fed in order, and over the same
    /// values fed to two states merged.
    fn top(descending: u32, bottom: bool, rows: &[Vec<Bson>]) -> (Bson, Bson) {
        let op = AccOp::Top { descending, bottom };
        let mut one = Acc::new(op);
        for r in rows {
            one.feed(Some(&Bson::Array(r.clone())));
        }
        let (a, b) = rows.split_at(rows.len() / 2);
        let (mut x, mut y) = (Acc::new(op), Acc::new(op));
        a.iter().for_each(|r| x.feed(Some(&Bson::Array(r.clone()))));
        b.iter().for_each(|r| y.feed(Some(&Bson::Array(r.clone()))));
        x.merge(y);
        (one.value().unwrap(), x.value().unwrap())
    }

    #[test]
    fn tops_keep_the_first_and_bottoms_the_last_of_a_stable_sort() {
        let r = |k: Bson, out: &str| vec![k, Bson::String(out.into())];
        let rows = vec![
            r(Bson::Int32(2), "a"),
            r(Bson::Int32(5), "b"),
            r(Bson::Double(5.0), "c"),
            r(Bson::Null, "d"),
            r(Bson::Int64(1), "e"),
        ];
        let s = |x: &str| Bson::String(x.into());
        // Ascending: null sorts first; among the equal 5s, b came first.
        assert_eq!(top(0, false, &rows), (s("d"), s("d")));
        assert_eq!(top(0, true, &rows), (s("c"), s("c")));
        // Descending: the first 5 is the top, the null the bottom.
        assert_eq!(top(1, false, &rows), (s("b"), s("b")));
        assert_eq!(top(1, true, &rows), (s("d"), s("d")));
        // A second key breaks ties of the first, each in its own direction.
        let two = vec![
            vec![Bson::Int32(1), Bson::Int32(1), s("p")],
            vec![Bson::Int32(1), Bson::Int32(2), s("q")],
        ];
        assert_eq!(top(0b10, false, &two).0, s("q"));
        assert_eq!(top(0b00, false, &two).0, s("p"));
    }

    #[test]
    fn a_range_that_cannot_win_holds_no_row_that_wins() {
        let i = |x: i64| Bson::Int64(x);
        for descending in 0..4u32 {
            for bottom in [false, true] {
                for kept in -2..=2 {
                    let mut acc = Acc::new(AccOp::Top { descending, bottom });
                    acc.feed(Some(&Bson::Array(vec![i(kept), i(0), i(99)])));
                    for lo in -3..=3 {
                        for hi in lo..=3 {
                            // Every row within the bounds, with second keys on both sides.
                            let some_wins = (lo..=hi).any(|v| {
                                [-1, 0, 1].iter().any(|&w| acc.top_takes(&[i(v), i(w)]))
                            });
                            let may = acc.top_may_take_within(&i(lo), &i(hi));
                            assert!(may || !some_wins, "{descending} {bottom} {kept} {lo} {hi}");
                            // And the bounds are tight: a range that can win has a row that does.
                            assert_eq!(may, some_wins, "{descending} {bottom} {kept} {lo} {hi}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn held_values_come_back_as_they_went_in() {
        let mut h = Held::default();
        assert_eq!(h.get(), None);
        for v in [
            Bson::String("s".into()),
            Bson::Null,
            Bson::Int32(-3),
            Bson::Int64(i64::MIN),
            Bson::Double(-0.0),
            Bson::DateTime(DateTime::from_millis(-62_135_596_800_001)),
            Bson::Boolean(true),
            Bson::Document(bson::doc! {"a": [1, "b"]}),
            Bson::String("t".into()),
            Bson::Decimal128(bson::Decimal128::from_bytes([7; 16])),
        ] {
            h.set(v.clone());
            assert_eq!(h.get(), Some(v.clone()));
            assert_eq!(h.with(|x| x.cloned()), Some(v));
        }
    }

    #[test]
    fn a_state_fits_a_cache_line_and_holds_any_value() {
        assert!(std::mem::size_of::<Acc>() <= 64);
        assert!(std::mem::size_of::<Held>() <= 16);
        let mut max = Acc::new(AccOp::Max);
        for v in [3, 9, 4] {
            max.feed(Some(&Bson::Int32(v)));
        }
        let mut last = Acc::new(AccOp::Last);
        last.feed(Some(&Bson::String("a".into())));
        last.feed(None);
        let mut pick = Acc::new_pick(true, true);
        assert_eq!(pick.value().unwrap(), Bson::Null);
        pick.pick(5, 0, || Some(Bson::Int64(7)));
        pick.pick(4, 1, || Some(Bson::Int64(8)));
        assert_eq!(
            [max, last, pick].map(|a| a.value().unwrap()),
            [Bson::Int32(9), Bson::Null, Bson::Int64(7)]
        );
    }

    #[test]
    fn exact_sums_hold_at_the_ends_of_i64() {
        for v in [
            vec![i64::MAX; 1000],
            vec![i64::MIN; 1000],
            vec![i64::MIN, i64::MAX, -1, 0],
        ] {
            assert_eq!(
                exact_sum(&v),
                v.iter().map(|&x| i128::from(x)).sum::<i128>()
            );
        }
    }

    #[test]
    fn negative_integers_average_exactly() {
        // Regression: the compensation term was dropped, so the split of -1 into 32-bit parts
        // (2^32 - 1, 2^64 - 2^32, -2^64) averaged to 0.
        assert_eq!(
            run(AccOp::Avg, &[Some(Bson::Int32(-1))]),
            Bson::Double(-1.0)
        );
        let mut a = Acc::new(AccOp::Avg);
        a.feed_sum_stat(&Bson::Int64(-7), 2);
        a.feed(Some(&Bson::Double(0.5)));
        assert_eq!(a.value().unwrap(), Bson::Double(-6.5 / 3.0));
    }

    fn run(op: AccOp, vals: &[Option<Bson>]) -> Bson {
        let mut a = Acc::new(op);
        for v in vals {
            a.feed(v.as_ref());
        }
        a.value().unwrap()
    }

    #[test]
    fn sum_widens_and_ignores_non_numbers() {
        let s = |v: Vec<Bson>| run(AccOp::Sum, &v.into_iter().map(Some).collect::<Vec<_>>());
        assert_eq!(s(vec![]), Bson::Int32(0));
        assert_eq!(
            s(vec![Bson::Int32(1), "x".into(), Bson::Null]),
            Bson::Int32(1)
        );
        assert_eq!(
            s(vec![Bson::Int32(i32::MAX), Bson::Int32(1)]),
            Bson::Int64(i64::from(i32::MAX) + 1)
        );
        assert_eq!(s(vec![Bson::Int32(1), Bson::Int64(2)]), Bson::Int64(3));
        assert_eq!(
            s(vec![Bson::Int64(i64::MAX), Bson::Int64(1)]),
            Bson::Double(9.223_372_036_854_776e18)
        );
        assert_eq!(
            s(vec![Bson::Int32(1), Bson::Double(0.5)]),
            Bson::Double(1.5)
        );
        // Compensated: 1e16 + 1 + 1 - 1e16 is 2, not 0.
        assert_eq!(
            s(vec![
                Bson::Double(1e16),
                Bson::Double(1.0),
                Bson::Double(1.0),
                Bson::Double(-1e16)
            ]),
            Bson::Double(2.0)
        );
        let mut a = Acc::new(AccOp::Sum);
        a.feed(Some(&Bson::Decimal128(bson::Decimal128::from_bytes(
            [0; 16],
        ))));
        assert_eq!(a.value().unwrap_err().code(), Some(2));
    }

    #[test]
    fn avg_is_double_or_null() {
        assert_eq!(run(AccOp::Avg, &[None, Some("a".into())]), Bson::Null);
        assert_eq!(
            run(
                AccOp::Avg,
                &[Some(Bson::Int32(1)), Some(Bson::Int64(2)), None]
            ),
            Bson::Double(1.5)
        );
    }

    #[test]
    fn min_max_skip_nullish_and_use_bson_order() {
        let vals = [
            None,
            Some(Bson::Null),
            Some(Bson::Int32(5)),
            Some("a".into()),
            Some(Bson::Double(5.0)),
            Some(Bson::Double(f64::NAN)),
        ];
        assert!(matches!(run(AccOp::Min, &vals), Bson::Double(x) if x.is_nan()));
        assert_eq!(run(AccOp::Max, &vals), Bson::String("a".into()));
        assert_eq!(run(AccOp::Min, &[None, Some(Bson::Null)]), Bson::Null);
        // Equal values: the first seen stays.
        assert_eq!(
            run(AccOp::Max, &[Some(Bson::Int32(5)), Some(Bson::Double(5.0))]),
            Bson::Int32(5)
        );
    }

    #[test]
    fn first_last_turn_missing_into_null() {
        let vals = [None, Some(Bson::Int32(1)), None];
        assert_eq!(run(AccOp::First, &vals), Bson::Null);
        assert_eq!(run(AccOp::Last, &vals), Bson::Null);
        assert_eq!(run(AccOp::Last, &vals[..2]), Bson::Int32(1));
    }

    #[test]
    fn typed_feeding_matches_value_feeding() {
        let ints = [Some(3), None, Some(-7), Some(9)];
        let doubles = [Some(0.1), Some(f64::NAN), None, Some(-2.5)];
        let rows = [0u32, 1, 2, 3];
        // Consecutive rows are read as one slice, others one by one: both as the values say.
        for op in [AccOp::Sum, AccOp::Min, AccOp::Max] {
            for (picked, want) in [(&[1u32, 3][..], 9), (&[2, 3][..], 2), (&[0, 2, 3][..], 5)] {
                let mut a = Acc::new(op);
                a.feed_rows(&Values::Int64(SlotsRef::Rows(&ints)), picked);
                let got = a.value().unwrap();
                if op == AccOp::Sum {
                    assert_eq!(got, Bson::Int64(want), "{picked:?}");
                }
                let mut one = Acc::new(op);
                for &r in picked {
                    one.feed(
                        Values::Int64(SlotsRef::Rows(&ints))
                            .get(r as usize)
                            .as_ref(),
                    );
                }
                assert_eq!(got, one.value().unwrap(), "{op:?} {picked:?}");
            }
        }
        for op in [
            AccOp::Sum,
            AccOp::Avg,
            AccOp::Min,
            AccOp::Max,
            AccOp::First,
            AccOp::Last,
        ] {
            let dense_ints = [3i64, 0, -7, 9];
            let dense_doubles = [0.1, f64::NAN, 0.0, -2.5];
            for vals in [
                Values::Int32(SlotsRef::Rows(&ints)),
                Values::Int64(SlotsRef::Rows(&ints)),
                Values::Double(SlotsRef::Rows(&doubles)),
                Values::Date(SlotsRef::Rows(&ints)),
                Values::Int32(SlotsRef::Dense(&dense_ints)),
                Values::Int64(SlotsRef::Dense(&dense_ints)),
                Values::Double(SlotsRef::Dense(&dense_doubles)),
                Values::Date(SlotsRef::Dense(&dense_ints)),
            ] {
                let mut typed = Acc::new(op);
                typed.feed_rows(&vals, &rows[..2]);
                typed.feed_rows(&vals, &rows[2..]);
                let mut one = Acc::new(op);
                for r in rows {
                    one.feed(vals.get(r as usize).as_ref());
                }
                let (a, b) = (typed.value().unwrap(), one.value().unwrap());
                assert_eq!(format!("{a:?}"), format!("{b:?}"), "{op:?} {vals:?}");
            }
        }
    }

    #[test]
    fn picks_follow_sorted_stream_order() {
        // $last after an ascending sort: latest time, later position among ties.
        let mut last = Acc::new_pick(true, true);
        for (t, p, v) in [(5, 0, 1), (7, 1, 2), (7, 2, 3), (6, 3, 4)] {
            last.pick(t, p, || Some(Bson::Int32(v)));
        }
        assert_eq!(last.value().unwrap(), Bson::Int32(3));
        assert!(!last.pick_may_change(6));
        assert!(last.pick_may_change(7));
        // $first after an ascending sort: earliest time, earlier position among ties.
        let mut first = Acc::new_pick(false, false);
        for (t, p, v) in [(5, 0, 1), (4, 1, 2), (4, 2, 3)] {
            first.pick(t, p, || Some(Bson::Int32(v)));
        }
        assert_eq!(first.value().unwrap(), Bson::Int32(2));
    }
    fn value_strategy() -> impl proptest::strategy::Strategy<Value = Option<Bson>> {
        use proptest::prelude::*;
        prop_oneof![
            Just(None),
            Just(Some(Bson::Null)),
            any::<i32>().prop_map(|x| Some(Bson::Int32(x))),
            any::<i64>().prop_map(|x| Some(Bson::Int64(x))),
            (-1e6f64..1e6).prop_map(|x| Some(Bson::Double(x))),
            prop_oneof![Just(f64::INFINITY), Just(f64::NEG_INFINITY), Just(f64::NAN)]
                .prop_map(|x| Some(Bson::Double(x))),
            "[a-c]{0,2}".prop_map(|x| Some(Bson::String(x))),
        ]
    }

    proptest::proptest! {
        /// Feeding a stream in two parts and merging the states gives what feeding it whole
        /// gives (sums of doubles to rounding, as any change of summation order).
        #[test]
        fn merged_halves_equal_the_whole(
            vals in proptest::collection::vec(value_strategy(), 0..40),
            cut in 0usize..40,
        ) {
            let cut = cut.min(vals.len());
            for op in [AccOp::Sum, AccOp::Avg, AccOp::Min, AccOp::Max, AccOp::First, AccOp::Last] {
                let whole = run(op, &vals);
                let mut a = Acc::new(op);
                let mut b = Acc::new(op);
                for v in &vals[..cut] {
                    a.feed(v.as_ref());
                }
                for v in &vals[cut..] {
                    b.feed(v.as_ref());
                }
                a.merge(b);
                let merged = a.value().unwrap();
                match (&whole, &merged) {
                    (Bson::Double(x), Bson::Double(y)) => proptest::prop_assert!(
                        x.to_bits() == y.to_bits()
                            || (x.is_nan() && y.is_nan())
                            || (x - y).abs() <= 1e-9 * x.abs().max(1.0),
                        "{op:?} {vals:?} cut {cut}: {x} vs {y}"
                    ),
                    _ => proptest::prop_assert_eq!(
                        format!("{whole:?}"),
                        format!("{merged:?}"),
                        "{:?} {:?} cut {}", op, vals, cut
                    ),
                }
            }
        }
    }

    #[test]
    fn sums_of_infinities_are_infinite() {
        let d = |xs: &[f64]| {
            xs.iter()
                .map(|&x| Some(Bson::Double(x)))
                .collect::<Vec<_>>()
        };
        let inf = f64::INFINITY;
        assert_eq!(run(AccOp::Sum, &d(&[inf])), Bson::Double(inf));
        assert_eq!(run(AccOp::Sum, &d(&[1.5, inf, 2.0])), Bson::Double(inf));
        assert_eq!(run(AccOp::Sum, &d(&[-inf, 3.0])), Bson::Double(-inf));
        assert_eq!(run(AccOp::Avg, &d(&[inf, 1.0])), Bson::Double(inf));
        let mixed = run(AccOp::Sum, &d(&[inf, -inf]));
        assert!(matches!(mixed, Bson::Double(x) if x.is_nan()), "{mixed:?}");
        let mut ints_then_inf = Acc::new(AccOp::Sum);
        ints_then_inf.feed(Some(&Bson::Int64(5)));
        ints_then_inf.feed(Some(&Bson::Double(inf)));
        assert_eq!(ints_then_inf.value().unwrap(), Bson::Double(inf));
    }

    #[test]
    fn merged_picks_keep_the_better_row() {
        let mut a = Acc::new_pick(true, true);
        a.pick(5, 1, || Some(Bson::Int32(1)));
        let mut b = Acc::new_pick(true, true);
        b.pick(5, 9, || Some(Bson::Int32(2)));
        a.merge(b);
        assert_eq!(
            a.value().unwrap(),
            Bson::Int32(2),
            "a later row among equal times"
        );
        let mut c = Acc::new_pick(true, true);
        c.pick(4, 20, || Some(Bson::Int32(3)));
        a.merge(c);
        assert_eq!(a.value().unwrap(), Bson::Int32(2), "an earlier time loses");
        a.merge(Acc::new_pick(true, true));
        assert_eq!(
            a.value().unwrap(),
            Bson::Int32(2),
            "an empty pick changes nothing"
        );
    }
}
