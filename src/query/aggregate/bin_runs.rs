//! Groups whose key is one time bin and reads no meta value, over buckets taken whole whose
//! accumulators read columns, such as a `$sum` of a field per minute over every series, where
//! no bucket can be answered from its statistics because each spans many bins. A bucket's rows
//! are walked in runs of one bin, and each run feeds its group's accumulators one slice per
//! column. The group of a run is found in [`BinGroups`] rather than through the key's cache: an
//! hour's bucket at 10 s steps has sixty runs of six rows, so the work per run, not per row,
//! sets the speed.
//!
//! The answers are those of the general column path: runs are fed in row order, consecutive
//! runs of one group as one, exactly as that path feeds them.

use crate::query::aggregate::accumulators::{exact_sum, AccOp, Values};
use crate::query::aggregate::bins::{BinGroups, Bins};
use crate::query::aggregate::table::GroupTable;
use crate::query::slots::SlotsRef;
use crate::error::Result;
use bson::Bson;
use std::ops::Range;

/// What one accumulator reads in a bucket.
pub(crate) enum Input<'a> {
    /// A constant.
    Const(&'a Bson),
    /// A column's values.
    Column(Values<'a>),
    /// A column of integers in every row (`true`: int64), for a sum or an average: the
    /// common case, added without going through [`Values`]; with a bound on the values'
    /// magnitude when one is known.
    IntSum(&'a [i64], bool, Option<u64>),
}

impl<'a> Input<'a> {
    /// The input of an accumulator `op` reading column values `vals`, known to lie within
    /// `bound` in magnitude when it is `Some`.
    pub fn bounded(op: AccOp, vals: Values<'a>, bound: Option<u64>) -> Input<'a> {
        let sum = matches!(op, AccOp::Sum | AccOp::Avg);
        match vals {
            Values::Int32(SlotsRef::Dense(s)) if sum => Input::IntSum(s, false, bound),
            Values::Int64(SlotsRef::Dense(s)) if sum => Input::IntSum(s, true, bound),
            _ => Input::Column(vals),
        }
    }
}

/// A bucket's times, one per row.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Times<'a> {
    /// Decoded.
    Values(&'a [i64]),
    /// Regular times: row `i` at `first + i * step`.
    Progression { first: i64, step: i64, rows: usize },
}

impl<'a> Times<'a> {
    /// `rows` regular times, when the last one is a time (the decoder wraps; this does not).
    pub fn progression(first: i64, step: i64, rows: usize) -> Option<Times<'a>> {
        let last =
            i128::from(first) + i128::from(step) * i128::try_from(rows).ok()?.checked_sub(1)?;
        i64::try_from(last).ok()?;
        Some(Times::Progression { first, step, rows })
    }

    fn len(&self) -> usize {
        match *self {
            Times::Values(ts) => ts.len(),
            Times::Progression { rows, .. } => rows,
        }
    }

    #[inline]
    fn at(&self, k: usize) -> Option<i64> {
        match *self {
            Times::Values(ts) => ts.get(k).copied(),
            Times::Progression { first, step, rows } => {
                (k < rows).then(|| first.wrapping_add(step.wrapping_mul(k as i64)))
            }
        }
    }

    /// The rows from row `k`, whose time `t` lies in bin `[lo, hi)`, up to the first row
    /// outside the bin. This engine sorts a bucket's rows by time at close, but the segment
    /// format does not require it: a run ends at the first row outside its bin either way.
    /// `hint` is a guess (the previous run's length), checked before any division.
    #[inline]
    pub fn run(&self, k: usize, t: i64, (lo, hi): (i64, i64), hint: usize) -> usize {
        let rest = self.len().saturating_sub(k);
        match *self {
            Times::Values(ts) => ts
                .get(k + 1..)
                .unwrap_or_default()
                .iter()
                .position(|&x| x < lo || x >= hi)
                .map_or(rest, |p| p + 1),
            Times::Progression { step, .. } => {
                // Row `k + j` is in the bin while `j * |step| < dist`: up to the bin's end, or
                // (times going back) down to its start.
                let (dist, s) = match step {
                    0 => return rest,
                    s if s > 0 => (i128::from(hi) - i128::from(t), i128::from(s)),
                    s => (i128::from(t) - i128::from(lo) + 1, -i128::from(s)),
                };
                // That is `dist / |step|` rounded up: mostly the hint (bins of one width hold
                // as many regular times each), which two products confirm.
                let h = hint as i128;
                let fit = if h > 0 && (h - 1) * s < dist && h * s >= dist {
                    h
                } else {
                    match (i64::try_from(dist), i64::try_from(s)) {
                        (Ok(d), Ok(s)) => i128::from((d - 1) / s + 1),
                        _ => (dist - 1) / s + 1,
                    }
                };
                usize::try_from(fit).map_or(rest, |f| f.clamp(1, rest.max(1)))
            }
        }
    }
}

/// Feeds rows `rows` to group `g`: accumulator `i` reads `inputs[i]`. Inlined into
/// [`feed_bucket`]'s loop, whose runs are a few rows each: a call cost as much as the sum.
#[inline(always)]
fn feed(table: &mut GroupTable, g: u32, rows: Range<usize>, inputs: &[Input<'_>]) {
    for (acc, input) in table.accs(g).iter_mut().zip(inputs) {
        match input {
            Input::Const(v) => acc.feed_n(Some(v), rows.len() as u64),
            Input::Column(vals) => acc.feed_span(vals, rows.clone()),
            Input::IntSum(s, wide, _) => {
                // Rows past the end of the values have none.
                let s = s.get(rows.start.min(s.len())..rows.end.min(s.len()));
                let s = s.unwrap_or_default();
                acc.add_ints(exact_sum(s), s.len() as u64, *wide);
            }
        }
    }
}

/// Feeds the rows of a bucket whose times are `times` to the groups of their bins:
/// accumulator `i` of a group reads `inputs[i]`. `create` makes the group of a bin start the
/// first time the bin is seen.
pub(crate) fn feed_bucket(
    groups: &mut BinGroups,
    table: &mut GroupTable,
    bins: &Bins<'_>,
    times: Times<'_>,
    inputs: &[Input<'_>],
    mut create: impl FnMut(&mut GroupTable, i64) -> Result<u32>,
) -> Result<()> {
    if let (Times::Progression { first, step, rows }, Bins::Fixed { width, .. }) = (times, bins) {
        let regular = Regular {
            first,
            step,
            rows,
            width: *width,
        };
        if step > 0 && regular.feed(groups, table, bins, inputs, &mut create)? {
            return Ok(());
        }
    }
    // The group of the rows gathered so far, and their first row.
    let mut cur: Option<(u32, usize)> = None;
    let (mut k, mut len) = (0, 0);
    while let Some(t) = times.at(k) {
        let (bin, g) = groups.find(bins, t, |start| create(table, start))?;
        match cur {
            Some((cg, _)) if cg == g => {}
            Some((cg, from)) => {
                feed(table, cg, from..k, inputs);
                cur = Some((g, k));
            }
            None => cur = Some((g, k)),
        }
        len = times.run(k, t, bin, len);
        k += len;
    }
    if let Some((g, from)) = cur {
        feed(table, g, from..times.len(), inputs);
    }
    Ok(())
}

/// Rising regular times under bins of one width: a bucket's runs are its consecutive bins,
/// taken by bin number, each run's length found from the last one's ([`Times::run`]).
struct Regular {
    first: i64,
    step: i64,
    rows: usize,
    width: i64,
}

impl Regular {
    /// Feeds the rows; false, having fed nothing, when the first time's bin is not the
    /// arithmetic one (near the ends of time, where [`Bins::of`] falls back).
    #[inline(always)]
    fn feed(
        &self,
        groups: &mut BinGroups,
        table: &mut GroupTable,
        bins: &Bins<'_>,
        inputs: &[Input<'_>],
        create: &mut impl FnMut(&mut GroupTable, i64) -> Result<u32>,
    ) -> Result<bool> {
        let Regular {
            first,
            step,
            rows,
            width,
        } = *self;
        let (mut lo, mut hi) = bins.of(first)?;
        // Bins are numbered only where they are whole arithmetic ones: the last bin before
        // the end of time, cut short, is found by its start.
        let mut n = bins.number((lo, hi));
        if n.is_none() {
            return Ok(false);
        }
        let times = Times::Progression { first, step, rows };
        // A lone integer sum over bins of a whole number of steps: from the first row of a
        // bin on, every bin holds `per_bin` rows, summed in one tight loop.
        let lone = match inputs {
            [Input::IntSum(vals, wide, bound)] => Some((*vals, *wide, *bound)),
            _ => None,
        };
        let per_bin = (width % step == 0)
            .then(|| (width / step) as usize)
            .filter(|&l| l > 0);
        let (mut k, mut t, mut run) = (0usize, first, 0usize);
        while k < rows {
            if let (Some((vals, wide, bound)), Some(l), Some(bin_n)) = (lone, per_bin, n) {
                let whole = rows.min(vals.len()).saturating_sub(k) / l;
                if t - lo < step && whole > 1 {
                    let vals = vals.get(k..k + whole * l).unwrap_or_default();
                    let sums = (wide, bound);
                    whole_bins(groups, table, vals, l, sums, (bin_n, lo, width), create)?;
                    k += whole * l;
                    if k >= rows {
                        break;
                    }
                    // Row `k` is the first of the next bin (see above).
                    t = first + step * k as i64;
                    lo += whole as i64 * width;
                    hi = lo.saturating_add(width);
                    n = Some(bin_n + whole as i64);
                    run = l;
                }
            }
            // The rows in `[t, hi)`, from the last run's length (see `Times::run`).
            run = times.run(k, t, (lo, hi), run);
            let g = match n {
                Some(n) => groups.numbered(n, (lo, hi), |start| create(table, start))?,
                None => groups.group((lo, hi), |start| create(table, start))?,
            };
            match inputs {
                [Input::IntSum(vals, wide, _)] => {
                    let s = vals.get(k.min(vals.len())..(k + run).min(vals.len()));
                    groups.add_run(g, s.unwrap_or_default(), *wide);
                }
                _ => feed(table, g, k..k + run, inputs),
            }
            k += run;
            if k >= rows {
                break;
            }
            t = first + step * k as i64;
            if t < hi.saturating_add(width) {
                lo = hi;
                hi = hi.saturating_add(width);
                n = n.and_then(|n| n.checked_add(1));
            } else {
                // A gap of whole bins (a step wider than a bin).
                (lo, hi) = bins.of(t)?;
                n = bins.number((lo, hi));
            }
        }
        Ok(true)
    }
}

/// Adds `vals`, runs of `per_bin` rows in consecutive whole bins from bin number `n` (whose
/// start is `lo`), to the pending sums of the bins' groups. `(wide, bound)`: int64 values,
/// and a bound on their magnitude when known.
#[inline(always)]
fn whole_bins(
    groups: &mut BinGroups,
    table: &mut GroupTable,
    vals: &[i64],
    per_bin: usize,
    (wide, bound): (bool, Option<u64>),
    (mut n, mut lo, width): (i64, i64, i64),
    create: &mut impl FnMut(&mut GroupTable, i64) -> Result<u32>,
) -> Result<()> {
    if groups.add_runs_numbered(n, vals, per_bin, (wide, bound)) {
        return Ok(());
    }
    for run in vals.chunks_exact(per_bin) {
        let g = groups.numbered(n, (lo, lo.saturating_add(width)), |start| {
            create(table, start)
        })?;
        groups.add_run(g, run, wide);
        n += 1;
        lo = lo.wrapping_add(width);
    }
    Ok(())
}

#[cfg(test)]
// Tests may panic: a panic is how a test fails.
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;
    use crate::query::aggregate::accumulators::Acc;
    use crate::query::aggregate::bins::tests::{each_bins, minute};

    fn table() -> GroupTable {
        GroupTable::new(
            vec!["s".into(), "n".into(), "m".into(), "f".into()],
            vec![
                Acc::new(AccOp::Sum),
                Acc::new(AccOp::Sum),
                Acc::new(AccOp::Max),
                Acc::new(AccOp::First),
            ],
        )
    }

    /// The same rows fed one at a time to the groups of their minutes.
    fn by_rows(ts: &[i64], vals: &[i64]) -> GroupTable {
        let mut t = table();
        let one = Bson::Int32(1);
        for (&ti, &v) in ts.iter().zip(vals) {
            let g = t.slot(&Bson::Int64(minute(ti).unwrap().0));
            let accs = t.accs(g);
            accs[0].feed(Some(&Bson::Int64(v)));
            accs[1].feed(Some(&one));
            accs[2].feed(Some(&Bson::Int64(v)));
            accs[3].feed(Some(&Bson::Int64(v)));
        }
        t
    }

    /// The runs `times` splits into under bins of `width` ms: (start row, length). Each run's
    /// hint is the previous run's length plus `skew` (a wrong guess must not matter).
    fn runs_of(times: Times<'_>, width: i64, skew: usize) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut k = 0;
        while let Some(t) = times.at(k) {
            let lo = t - t.rem_euclid(width);
            let hint = out.last().map_or(0, |r: &(usize, usize)| r.1 + skew);
            let len = times.run(k, t, (lo, lo + width), hint);
            out.push((k, len));
            k += len;
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn regular_times_split_into_the_runs_of_their_values(
            first in -10_000_000i64..10_000_000,
            step in -70_000i64..70_000,
            rows in 1usize..400,
            width in 1i64..200_000,
            skew in 0usize..3,
        ) {
            let values: Vec<i64> = (0..rows as i64).map(|i| first + i * step).collect();
            let p = Times::progression(first, step, rows).unwrap();
            proptest::prop_assert_eq!(runs_of(p, width, skew), runs_of(Times::Values(&values), width, 0));
        }

        /// Steps that divide the bins, times that land on their edges: the common case, and
        /// where an off-by-one shows.
        #[test]
        fn times_on_bin_edges_split_into_the_runs_of_their_values(
            width in proptest::sample::select(vec![1000i64, 60_000, 3_600_000]),
            per_bin in 1i64..13,
            back in proptest::bool::ANY,
            offset in 0i64..12,
            bins_from in -5i64..5,
            rows in 1usize..100,
            skew in 0usize..3,
        ) {
            let step = width / per_bin * if back { -1 } else { 1 };
            let first = bins_from * width + offset * step.abs();
            let values: Vec<i64> = (0..rows as i64).map(|i| first + i * step).collect();
            let p = Times::progression(first, step, rows).unwrap();
            proptest::prop_assert_eq!(runs_of(p, width, skew), runs_of(Times::Values(&values), width, 0));
        }
    }

    /// Feeds buckets of regular times given as progressions and as decoded values, in the
    /// same order into fresh tables, and returns both tables' documents. With `one`, the
    /// table has that one accumulator over the values (int32 and int64 buckets in turn, some
    /// near the ends of i64); without, four over several inputs.
    fn both_ways(
        buckets: &[(i64, i64, usize)],
        width: i64,
        origin: i64,
        one: Option<AccOp>,
    ) -> (Vec<bson::Document>, Vec<bson::Document>) {
        let range = |t: i64| {
            let s = t - (t - origin).rem_euclid(width);
            Ok((s, s.saturating_add(width)))
        };
        let bins = Bins::Fixed {
            width,
            origin,
            range: &range,
        };
        let c = Bson::Int32(1);
        let mut out = Vec::new();
        for regular in [true, false] {
            let mut t = match one {
                Some(op) => GroupTable::new(vec!["s".into()], vec![Acc::new(op)]),
                None => table(),
            };
            let mut groups = BinGroups::default();
            for (b, &(first, step, rows)) in buckets.iter().enumerate() {
                let vals: Vec<i64> = match b % 3 {
                    2 if one.is_some() => (0..rows as i64).map(|i| i64::MAX - i).collect(),
                    _ => (0..rows as i64).map(|i| i * 7 - b as i64).collect(),
                };
                let v = match b % 2 {
                    0 if one.is_some() => Values::Int32(SlotsRef::Dense(&vals)),
                    _ => Values::Int64(SlotsRef::Dense(&vals)),
                };
                // The regular times' lone sum is told the values' bound (the decoder's is
                // looser): runs whose sums fit are added in 64 bits, the others in 128.
                let bound = Some(vals.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0))
                    .filter(|_| regular);
                let several = [
                    Input::bounded(AccOp::Sum, Values::Int64(SlotsRef::Dense(&vals)), None),
                    Input::Const(&c),
                    Input::Column(Values::Int64(SlotsRef::Dense(&vals))),
                    Input::Column(Values::Int64(SlotsRef::Dense(&vals))),
                ];
                let single = one.map(|op| [Input::bounded(op, v, bound)]);
                let inputs = match &single {
                    Some(s) => &s[..],
                    None => &several[..],
                };
                let ts: Vec<i64> = (0..rows as i64).map(|i| first + i * step).collect();
                let times = match regular {
                    true => Times::progression(first, step, rows).unwrap(),
                    false => Times::Values(&ts),
                };
                feed_bucket(&mut groups, &mut t, &bins, times, inputs, |t, s| {
                    Ok(t.slot(&Bson::Int64(s)))
                })
                .unwrap();
            }
            groups.flush_sums(&mut t);
            out.push(t.into_docs().unwrap());
        }
        let values = out.pop().unwrap();
        (out.pop().unwrap(), values)
    }

    proptest::proptest! {
        /// Rising regular times walk their bins by number; the answers are those of the same
        /// times walked one run at a time: steps within, across and wider than bins, buckets
        /// revisiting earlier bins, bins on either side of zero.
        #[test]
        fn regular_times_feed_the_groups_their_values_would(
            buckets in proptest::collection::vec(
                (-5_000_000i64..5_000_000, 1i64..200_000, 1usize..200), 1..6),
            width in proptest::sample::select(vec![1i64, 7, 1000, 60_000, 3_600_000]),
            origin in -100_000i64..100_000,
            one in proptest::sample::select(vec![None, Some(AccOp::Sum), Some(AccOp::Avg)]),
        ) {
            let (regular, values) = both_ways(&buckets, width, origin, one);
            proptest::prop_assert_eq!(regular, values);
        }

        /// Steps that divide the bins, as 10 s steps do minutes: a lone sum takes the runs
        /// of whole bins in one loop, and from the second bucket over the same bins finds
        /// their groups by number alone. Buckets start at, inside and past a bin's first
        /// step, and hold from part of a bin to many bins.
        #[test]
        fn regular_times_in_whole_bins_feed_the_groups_their_values_would(
            buckets in proptest::collection::vec(
                (-4i64..4, 0i64..15, 1usize..150, 1i64..13), 1..6),
            width in proptest::sample::select(vec![1i64, 12, 1000, 60_000, 3_600_000]),
            origin in -100_000i64..100_000,
            one in proptest::sample::select(vec![Some(AccOp::Sum), Some(AccOp::Avg), None]),
        ) {
            let buckets: Vec<(i64, i64, usize)> = buckets
                .iter()
                .map(|&(bin, offset, rows, per_bin)| {
                    let step = (width / per_bin).max(1);
                    (origin + bin * width + offset * step, step, rows)
                })
                .collect();
            let (regular, values) = both_ways(&buckets, width, origin, one);
            proptest::prop_assert_eq!(regular, values);
        }
    }

    #[test]
    fn regular_times_near_the_end_of_time_feed_their_bins() {
        // The last bin is cut short at the end of time: found by its start, not its number,
        // whether a bucket steps into it or starts in it.
        let width = 3_600_000;
        let first = i64::MAX - 5 * width / 2;
        let buckets = [
            (first, width / 3, 7),
            (first, 1000, 3),
            (i64::MAX - 10, 1, 5),
            (first, width / 2, 6),
        ];
        for one in [None, Some(AccOp::Sum)] {
            let (regular, values) = both_ways(&buckets, width, 0, one);
            assert_eq!(regular, values);
            assert_eq!(regular.len(), 4);
        }
        // Whole bins of a lone sum, up to the last one.
        let step = width / 4;
        let first = i64::MAX - i64::MAX.rem_euclid(width) - 3 * width;
        // Thirteen rows reach the start of the last bin, cut short.
        let buckets = [
            (first, step, 13),
            (first + step, step, 12),
            (first, step, 13),
        ];
        let (regular, values) = both_ways(&buckets, width, 0, Some(AccOp::Sum));
        assert_eq!(regular, values);
        assert_eq!(regular.len(), 4);
    }

    #[test]
    fn bin_numbers_grow_both_ways_up_to_their_limit() {
        let bins = Bins::Fixed {
            width: 10,
            origin: 3,
            range: &|t| Ok((t, t)),
        };
        assert_eq!(bins.number((13, 23)), Some(1));
        assert_eq!(bins.number((-7, 3)), Some(-1));
        assert_eq!(bins.number((14, 24)), None);
        assert_eq!(bins.number((13, 22)), None);
        let mut groups = BinGroups::default();
        let mut made = Vec::new();
        let mut find = |groups: &mut BinGroups, n: i64| {
            groups
                .numbered(n, (n * 10 + 3, n * 10 + 13), |s| {
                    made.push(s);
                    Ok(made.len() as u32 - 1)
                })
                .unwrap()
        };
        assert_eq!(find(&mut groups, 5), 0);
        assert_eq!(find(&mut groups, 2), 1);
        assert_eq!(find(&mut groups, 5), 0);
        assert_eq!(find(&mut groups, 2), 1);
        // Far beyond the numbered range: kept by start only, and still found.
        assert_eq!(find(&mut groups, 1 << 40), 2);
        assert_eq!(find(&mut groups, 1 << 40), 2);
        assert_eq!(find(&mut groups, 3), 3);
        assert_eq!(made, vec![53, 23, (1i64 << 40) * 10 + 3, 33]);
    }

    #[test]
    fn progressions_past_the_ends_of_time_are_refused() {
        assert!(Times::progression(i64::MAX - 10, 6, 3).is_none());
        assert!(Times::progression(i64::MIN + 10, -6, 3).is_none());
        let p = Times::progression(i64::MAX - 10, 5, 2).unwrap();
        // One bin reaching the end of time holds both rows.
        assert_eq!(p.run(0, i64::MAX - 10, (i64::MIN, i64::MAX), 0), 2);
        assert_eq!(p.run(0, i64::MAX - 10, (i64::MIN, i64::MAX), 1), 2);
        let p = Times::progression(i64::MIN + 10, -5, 2).unwrap();
        assert_eq!(p.run(0, i64::MIN + 10, (i64::MIN, i64::MAX), 7), 2);
    }

    #[test]
    fn runs_feed_the_groups_their_rows_would() {
        each_bins(|bins| {
            // In order, back into an earlier minute, a lone row, and two buckets sharing bins.
            let buckets: [&[i64]; 3] = [
                &[0, 10, 59_999, 60_000, 70_000, 5, 180_000],
                &[61_000],
                &[120_000, 179_999, 0, 1],
            ];
            let mut t = table();
            let mut groups = BinGroups::default();
            let one = Bson::Int32(1);
            let (mut all_ts, mut all_vals) = (Vec::new(), Vec::new());
            for (b, ts) in buckets.iter().enumerate() {
                let vals: Vec<i64> = (0..ts.len() as i64).map(|i| i * 7 - b as i64).collect();
                let inputs = [
                    Input::Column(Values::Int64(SlotsRef::Dense(&vals))),
                    Input::Const(&one),
                    Input::Column(Values::Int64(SlotsRef::Dense(&vals))),
                    Input::Column(Values::Int64(SlotsRef::Dense(&vals))),
                ];
                feed_bucket(
                    &mut groups,
                    &mut t,
                    bins,
                    Times::Values(ts),
                    &inputs,
                    |t, s| Ok(t.slot(&Bson::Int64(s))),
                )
                .unwrap();
                all_ts.extend_from_slice(ts);
                all_vals.extend(vals);
            }
            assert_eq!(
                t.into_docs().unwrap(),
                by_rows(&all_ts, &all_vals).into_docs().unwrap()
            );
        });
    }
}
