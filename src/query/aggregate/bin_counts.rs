//! Groups whose key reads nothing but one time bin, and whose accumulators read only constants
//! (`$count`, `$sum: 1`, ...): a bucket taken whole whose times fall in one bin adds its row
//! count to that bin's group and nothing else. Over many small buckets (one to three rows of one
//! period each, as many short-lived series make) a count per period answers about nine buckets
//! in ten this way, so this loop sets its speed: it reads the times the segment decoded at
//! open, keeps the last bin at hand, and feeds the accumulators once per group at the end
//! instead of once per bucket. A bucket whose times span bins adds the runs of equal times
//! its time column is stored as, one step per run, or else its decoded times.

use crate::query::aggregate::accumulators::{Acc, AccOp};
use crate::query::aggregate::bins::{BinGroups, Bins};
use crate::query::aggregate::table::GroupTable;
use crate::error::Result;
use bson::Bson;

/// Row counts by group for the buckets answered from their count alone.
#[derive(Default)]
pub(crate) struct CountLane {
    groups: BinGroups,
    /// Rows per group, by group number.
    rows: Vec<u64>,
    /// Buckets taken.
    pub buckets: u64,
}

/// Whether an accumulator over constant `v` gets the same answer fed once with the total row
/// count as fed bucket by bucket: integer sums are exact while they fit (a 32-bit constant
/// times any realistic row count does), and a minimum or maximum of one value is that value.
/// A sum of doubles is not: its rounding depends on how it is split.
pub(crate) fn order_free(op: AccOp, v: &Bson) -> bool {
    match op {
        AccOp::Sum | AccOp::Avg => match v {
            Bson::Int32(_) => true,
            Bson::Int64(x) => i32::try_from(*x).is_ok(),
            _ => false,
        },
        AccOp::Min | AccOp::Max => true,
        AccOp::First | AccOp::Last | AccOp::Top { .. } => false,
    }
}

impl CountLane {
    /// Takes a bucket of `count` rows whose times lie in `span` (`[lo, hi]`) when they fall in
    /// one of `bins`. `group` finds or creates the group of a bin start the first time the
    /// bin is seen. Returns false, having taken nothing, when the times span bins.
    pub fn take(
        &mut self,
        span: (i64, i64),
        count: u32,
        bins: &Bins<'_>,
        group: impl FnOnce(i64) -> Result<u32>,
    ) -> Result<bool> {
        let taken = self.add(span, count, bins, group)?;
        self.buckets += u64::from(taken);
        Ok(taken)
    }

    /// Takes the rows of a bucket given as runs of equal times `(ms, rows)`.
    pub fn take_runs(
        &mut self,
        runs: &[(i64, u32)],
        bins: &Bins<'_>,
        mut group: impl FnMut(i64) -> Result<u32>,
    ) -> Result<()> {
        for &(t, n) in runs {
            self.add((t, t), n, bins, &mut group)?;
        }
        Ok(())
    }

    /// Takes the rows of a bucket given by their times.
    pub fn take_times(
        &mut self,
        times: &[i64],
        bins: &Bins<'_>,
        mut group: impl FnMut(i64) -> Result<u32>,
    ) -> Result<()> {
        for &t in times {
            self.add((t, t), 1, bins, &mut group)?;
        }
        Ok(())
    }

    #[inline(always)]
    fn add(
        &mut self,
        (lo, hi): (i64, i64),
        count: u32,
        bins: &Bins<'_>,
        group: impl FnOnce(i64) -> Result<u32>,
    ) -> Result<bool> {
        let g = match self.groups.last_holds(lo, hi) {
            Some(g) => g,
            None => {
                let bin = self.groups.bin_after_last(bins, hi)?;
                if lo < bin.0 {
                    return Ok(false);
                }
                self.groups.group(bin, group)?
            }
        };
        let slot = g as usize;
        if self.rows.len() <= slot {
            self.rows.resize(slot + 1, 0);
        }
        if let Some(n) = self.rows.get_mut(slot) {
            *n += u64::from(count);
        }
        Ok(true)
    }

    /// Feeds each group its rows: accumulator `i` reads constant `consts[i]`.
    pub fn finish(&self, table: &mut GroupTable, consts: &[&Bson]) {
        for (g, &n) in self.rows.iter().enumerate() {
            if n == 0 {
                continue;
            }
            for (acc, v) in table.accs(g as u32).iter_mut().zip(consts) {
                Acc::feed_n(acc, Some(v), n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::aggregate::bins::tests::{each_bins, minute};

    #[test]
    fn buckets_within_one_bin_add_their_rows_and_spanning_ones_are_left() {
        each_bins(buckets_within_one_bin);
    }

    fn buckets_within_one_bin(bins: &Bins<'_>) {
        let mut lane = CountLane::default();
        let mut made = Vec::new();
        let mut take = |lane: &mut CountLane, lo, hi, n| {
            lane.take((lo, hi), n, bins, |b| {
                made.push(b);
                Ok(made.len() as u32 - 1)
            })
            .unwrap()
        };
        assert!(take(&mut lane, 0, 59_999, 3));
        assert!(take(&mut lane, 60_000, 61_000, 2));
        assert!(take(&mut lane, 10, 20, 4));
        assert!(!take(&mut lane, 59_000, 60_000, 7));
        assert!(take(&mut lane, 120_000, 120_000, 1));
        assert_eq!(lane.rows, vec![7, 2, 1]);
        assert_eq!(lane.buckets, 4);
        assert_eq!(made, vec![0, 60_000, 120_000]);
    }

    #[test]
    fn runs_add_their_rows_to_their_bins() {
        each_bins(runs_add_rows);
    }

    fn runs_add_rows(bins: &Bins<'_>) {
        let mut lane = CountLane::default();
        let runs = [(5, 2), (70_000, 3), (119_999, 1), (10, 4), (180_000, 5)];
        let mut made = Vec::new();
        lane.take_runs(&runs, bins, |b| {
            made.push(b);
            Ok(made.len() as u32 - 1)
        })
        .unwrap();
        assert_eq!(made, vec![0, 60_000, 180_000]);
        assert_eq!(lane.rows, vec![6, 4, 5]);
        assert_eq!(lane.buckets, 0);
        lane.take_times(&[60_001, 3, 200_000], bins, |_| unreachable!())
            .unwrap();
        assert_eq!(lane.rows, vec![7, 5, 6]);
    }

    #[test]
    fn a_key_without_time_is_one_group() {
        let mut lane = CountLane::default();
        for (lo, hi) in [(i64::MIN, 5), (7, i64::MAX - 1), (0, 0)] {
            assert!(lane.take((lo, hi), 2, &Bins::One, |_| Ok(0)).unwrap());
        }
        assert_eq!(lane.rows, vec![6]);
    }

    #[test]
    fn many_bins_keep_their_groups_past_the_recent_cache() {
        let mut lane = CountLane::default();
        let bins = Bins::Other(&minute);
        let mut made = 0;
        for round in 0..3 {
            for k in 0..2000i64 {
                let t = k * 60_000;
                assert!(lane
                    .take((t, t + 1), 1, &bins, |b| {
                        assert_eq!(round, 0);
                        assert_eq!(b, t);
                        made += 1;
                        Ok(made - 1)
                    })
                    .unwrap());
            }
        }
        assert_eq!(lane.rows, vec![3; 2000]);
    }

    #[test]
    fn only_sums_that_split_exactly_are_order_free() {
        assert!(order_free(AccOp::Sum, &Bson::Int32(1)));
        assert!(order_free(AccOp::Avg, &Bson::Int64(-5)));
        assert!(!order_free(AccOp::Sum, &Bson::Int64(1 << 40)));
        assert!(!order_free(AccOp::Sum, &Bson::Double(0.1)));
        assert!(order_free(AccOp::Max, &Bson::Double(0.1)));
        assert!(!order_free(AccOp::First, &Bson::Int32(1)));
    }
}
