//! Time bins of a group key, and the groups of bins seen so far. A bucket's rows mostly step
//! from one bin to the next, and each bin was usually seen in an earlier bucket: the next bin
//! is found without a division, and its group in a small direct-mapped cache before a hash
//! map, so that a step costs a few nanoseconds where building and looking up the key costs a
//! hundred.

use crate::query::aggregate::table::GroupTable;
use crate::error::Result;

/// How the key bins a time.
pub(crate) enum Bins<'a> {
    /// The key has no time leaf: one bin.
    One,
    /// Bins `[origin + k * width, origin + (k + 1) * width)`; `range` bins the times where
    /// that arithmetic overflows (it reports the error the key's evaluation would).
    Fixed {
        width: i64,
        origin: i64,
        range: &'a dyn Fn(i64) -> Result<(i64, i64)>,
    },
    /// Any other bins, as `[start, end)`.
    Other(&'a dyn Fn(i64) -> Result<(i64, i64)>),
}

impl Bins<'_> {
    /// The bin of time `t`.
    #[inline]
    pub(crate) fn of(&self, t: i64) -> Result<(i64, i64)> {
        match *self {
            Bins::One => Ok((i64::MIN, i64::MAX)),
            Bins::Fixed {
                width,
                origin,
                range,
            } => match t
                .checked_sub(origin)
                .and_then(|d| t.checked_sub(d.rem_euclid(width)))
            {
                Some(start) => Ok((start, start.saturating_add(width))),
                None => range(t),
            },
            Bins::Other(range) => range(t),
        }
    }

    /// The bin of time `t` given `prev`, the bin of an earlier time: the next bin when bins
    /// have one width and `t` falls in it, without the division of [`Bins::of`] (times read
    /// in order mostly step to the next bin).
    #[inline]
    pub(crate) fn after(&self, prev: Option<(i64, i64)>, t: i64) -> Result<(i64, i64)> {
        if let (Bins::Fixed { width, .. }, Some((_, end))) = (self, prev) {
            if t >= end {
                if let Some(next) = end.checked_add(*width).filter(|&n| t < n) {
                    return Ok((end, next));
                }
            }
        }
        self.of(t)
    }

    /// The number `k` of `bin` when the bins have one width and it is the whole bin
    /// `[origin + k * width, origin + (k + 1) * width)`.
    pub(crate) fn number(&self, (lo, hi): (i64, i64)) -> Option<i64> {
        let Bins::Fixed { width, origin, .. } = *self else {
            return None;
        };
        let off = i128::from(lo) - i128::from(origin);
        let whole = width > 0
            && hi.checked_sub(lo) == Some(width)
            && off.rem_euclid(i128::from(width)) == 0;
        whole
            .then(|| i64::try_from(off / i128::from(width)).ok())
            .flatten()
    }
}

/// Slots of the direct-mapped cache of groups by bin start.
const RECENT: usize = 512;

/// Places bins of one width in the recent cache by their number, so that up to [`RECENT`]
/// consecutive bins never share a slot. A multiplicative hash of the start put a few hundred
/// minutes on fewer slots than there were minutes (multiples of a width are far from random)
/// and one lookup in ten missed.
///
/// For width `w = 2^s * o` (`o` odd), bin `n` starts at `origin + n * w`, so
/// `(start * o⁻¹) >> s = c + n` modulo `2^(64 - s)`, where `o⁻¹` is `o`'s inverse modulo
/// 2^64 and `c` depends only on the origin: consecutive bins take consecutive slots, with no
/// division and whatever the origin.
#[derive(Clone, Copy)]
struct Slotting {
    width: u64,
    inverse: u64,
    shift: u32,
}

impl Slotting {
    fn new(width: u64) -> Slotting {
        let shift = width.trailing_zeros().min(63);
        let odd = (width >> shift) | 1;
        // Newton's iteration doubles the correct low bits from the 3 that `odd` gets right.
        let mut inverse = odd;
        for _ in 0..5 {
            inverse = inverse.wrapping_mul(2u64.wrapping_sub(odd.wrapping_mul(inverse)));
        }
        Slotting {
            width,
            inverse,
            shift,
        }
    }

    #[inline(always)]
    fn slot(&mut self, (start, end): (i64, i64)) -> usize {
        let width = end.wrapping_sub(start) as u64;
        if width != self.width {
            *self = Slotting::new(width);
        }
        ((start as u64).wrapping_mul(self.inverse) >> self.shift) as usize % RECENT
    }
}

/// Groups by bin number, from bin `from`; `u32::MAX` where the bin has no group here. Bins
/// that do not fit stay with the caller's hash map.
#[derive(Default)]
pub(crate) struct ByNumber {
    from: i64,
    groups: Vec<u32>,
    /// Groups held.
    held: usize,
    /// `d` while every bin `n` held has group `n + d`: groups made as time goes on, one per
    /// new bin, as a scan's first series makes them. Then consecutive bins have
    /// consecutive groups, taken as one slice (see [`BinGroups::add_runs_numbered`]).
    shift: Option<i64>,
}

impl ByNumber {
    /// The first of the groups of bins `n .. n + len`, when every one of those bins has a
    /// group here and those are consecutive.
    #[inline]
    pub fn consecutive(&self, n: i64, len: usize) -> Option<u32> {
        let d = self.shift?;
        // No bin without a group in the whole range, so none in this part of it.
        if self.held != self.groups.len() {
            return None;
        }
        self.run(n, len).filter(|r| r.len() == len)?;
        u32::try_from(n.checked_add(d)?).ok()
    }

    /// The group of bin `n`.
    #[inline]
    pub fn get(&self, n: i64) -> Option<u32> {
        let at = usize::try_from(n.wrapping_sub(self.from) as u64).ok()?;
        let g = *self.groups.get(at)?;
        (g != u32::MAX).then_some(g)
    }

    /// The slots of bins `n .. n + len` (`u32::MAX` where a bin has no group), when all lie
    /// in the numbered range.
    #[inline]
    pub fn run(&self, n: i64, len: usize) -> Option<&[u32]> {
        let at = usize::try_from(n.wrapping_sub(self.from) as u64).ok()?;
        self.groups.get(at..at.saturating_add(len))
    }

    /// Groups held.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Holds group `g` for bin `n`, growing the slots (and taking them from `room`) while
    /// they span at most `span` bins. False when `n` is not held.
    pub fn set(&mut self, n: i64, g: u32, span: usize, room: &mut usize) -> bool {
        if self.groups.is_empty() {
            self.from = n;
        }
        let len = self.groups.len() as i128;
        let (from, n128) = (i128::from(self.from), i128::from(n));
        let lo = from.min(n128);
        let hi = (from + len).max(n128 + 1);
        let grow = hi - lo - len;
        if grow > 0 {
            let limit = span as i128;
            if hi - lo > limit || grow > *room as i128 {
                return false;
            }
            if n128 < from {
                // Room on the left for the bins before this one too: buckets of a series
                // read newest first step down one bin at a time.
                let slack = (len / 2)
                    .min(limit - (hi - lo))
                    .min(*room as i128 - grow)
                    .max(0);
                let Ok(new_from) = i64::try_from(lo - slack) else {
                    return false;
                };
                let added = (from - i128::from(new_from)) as usize;
                let mut groups = vec![u32::MAX; added];
                groups.extend_from_slice(&self.groups);
                self.groups = groups;
                self.from = new_from;
                *room -= added;
            } else {
                self.groups.resize((hi - from) as usize, u32::MAX);
                *room -= grow as usize;
            }
        }
        let at = (n128 - i128::from(self.from)) as usize;
        match self.groups.get_mut(at) {
            Some(slot) => {
                if *slot == u32::MAX {
                    self.held += 1;
                }
                *slot = g;
                let d = i64::from(g).checked_sub(n);
                self.shift = match self.held {
                    1 => d,
                    _ => self.shift.filter(|&s| Some(s) == d),
                };
                true
            }
            None => false,
        }
    }
}

/// Groups by bin start, within one group table.
pub(crate) struct BinGroups {
    /// The last bin found, `[start, end)`, and its group.
    last: Option<((i64, i64), u32)>,
    /// The recent groups by bin start, in front of `groups`.
    recent: Box<[(i64, u32); RECENT]>,
    /// Where a bin goes in `recent`.
    slotting: Slotting,
    groups: foldhash::HashMap<i64, u32>,
    /// Groups of fixed-width bins by bin number. A bucket of regular times steps through
    /// consecutive bin numbers, so its runs find their groups here with no hashing.
    numbered: ByNumber,
    /// Integer sums not yet added to their groups, by group: (total, rows, an int64 seen).
    /// See [`BinGroups::add_run`].
    pending: Vec<(i128, u64, bool)>,
    /// More of the pending sums, by group: (total, rows) of runs of consecutive groups added
    /// in 64 bits (see [`BinGroups::add_runs_numbered`]), folded into `pending` before those
    /// are read or these could leave an i64.
    narrow: Vec<(i64, u64)>,
    /// How far the totals in `narrow` can still move, whatever their groups, without leaving
    /// an i64: `i64::MAX` less the bounds of the values added since the last fold.
    narrow_room: u64,
}

/// Most bin numbers kept in [`BinGroups::numbered`] (1 MiB): bins beyond go to the hash map.
const MAX_NUMBERED: usize = 1 << 18;

/// Adds a run's values to a pending integer sum (see [`BinGroups::add_run`]): an exact
/// 128-bit total, the row count, whether an int64 was among them. `NARROW`: the run is known
/// to sum within an i64, and is added in 64 bits, about a third of the work of 128.
#[inline(always)]
fn pend<const NARROW: bool>(p: &mut (i128, u64, bool), run: &[i64], wide: bool) {
    p.0 += match NARROW {
        true => i128::from(run.iter().fold(0i64, |a, &x| a.wrapping_add(x))),
        false => run.iter().map(|&x| i128::from(x)).sum::<i128>(),
    };
    p.1 += run.len() as u64;
    p.2 |= wide;
}

/// [`pend`] of each run of `per_bin` values in `vals` to the group in `groups` at its place.
/// The short runs of common bin widths (six ten-second steps in a minute, ...) get a loop of
/// their own length, which sums a run without the vector loop's setup and remainder: the
/// general loop spent as long on those as on the adding.
#[inline(always)]
fn pend_runs<const NARROW: bool>(
    pending: &mut [(i128, u64, bool)],
    vals: &[i64],
    per_bin: usize,
    groups: &[u32],
    wide: bool,
) {
    match per_bin {
        2 => pend_fixed::<NARROW, 2>(pending, vals, groups, wide),
        3 => pend_fixed::<NARROW, 3>(pending, vals, groups, wide),
        4 => pend_fixed::<NARROW, 4>(pending, vals, groups, wide),
        5 => pend_fixed::<NARROW, 5>(pending, vals, groups, wide),
        6 => pend_fixed::<NARROW, 6>(pending, vals, groups, wide),
        10 => pend_fixed::<NARROW, 10>(pending, vals, groups, wide),
        12 => pend_fixed::<NARROW, 12>(pending, vals, groups, wide),
        _ => {
            for (run, &g) in vals.chunks_exact(per_bin).zip(groups) {
                if let Some(p) = pending.get_mut(g as usize) {
                    pend::<NARROW>(p, run, wide);
                }
            }
        }
    }
}

/// [`pend_runs`] of runs of `N` values.
#[inline(always)]
fn pend_fixed<const NARROW: bool, const N: usize>(
    pending: &mut [(i128, u64, bool)],
    vals: &[i64],
    groups: &[u32],
    wide: bool,
) {
    for (run, &g) in vals.chunks_exact(N).zip(groups) {
        if let Some(p) = pending.get_mut(g as usize) {
            pend::<NARROW>(p, run, wide);
        }
    }
}

/// The runs of [`BinGroups::add_consecutive`], `N` values each, added to `totals` in turn.
#[inline(always)]
fn add_consecutive_fixed<const N: usize>(totals: &mut [(i64, u64)], vals: &[i64]) {
    for (t, run) in totals.iter_mut().zip(vals.chunks_exact(N)) {
        t.0 = t.0.wrapping_add(run.iter().fold(0i64, |a, &x| a.wrapping_add(x)));
        t.1 += N as u64;
    }
}

impl Default for BinGroups {
    fn default() -> Self {
        BinGroups {
            last: None,
            recent: Box::new([(0, u32::MAX); RECENT]),
            slotting: Slotting::new(1),
            groups: Default::default(),
            numbered: ByNumber::default(),
            pending: Vec::new(),
            narrow: Vec::new(),
            narrow_room: i64::MAX as u64,
        }
    }
}

impl BinGroups {
    /// The group of the last bin found, when `[lo, hi]` lies in that bin.
    #[inline]
    pub fn last_holds(&self, lo: i64, hi: i64) -> Option<u32> {
        match self.last {
            Some(((s, e), g)) if lo >= s && hi < e => Some(g),
            _ => None,
        }
    }

    /// The bin of `t`, found from the last bin when it is the next one.
    #[inline]
    pub fn bin_after_last(&self, bins: &Bins<'_>, t: i64) -> Result<(i64, i64)> {
        bins.after(self.last.map(|l| l.0), t)
    }

    /// The group of `bin`; `create` makes it (given the bin's start) the first time the bin is
    /// seen. The bin becomes the last one.
    #[inline(always)]
    pub fn group(
        &mut self,
        bin: (i64, i64),
        create: impl FnOnce(i64) -> Result<u32>,
    ) -> Result<u32> {
        let slot = self.slotting.slot(bin);
        let g = match self.recent.get(slot) {
            Some(&(s, g)) if s == bin.0 && g != u32::MAX => g,
            _ => self.group_missed(bin.0, slot, create)?,
        };
        self.last = Some((bin, g));
        Ok(g)
    }

    /// [`BinGroups::group`] of a bin start not in the recent cache: inlined, the hash map
    /// lookup made the caller's loop (a step per run of equal times) spill and call.
    #[inline(never)]
    fn group_missed(
        &mut self,
        start: i64,
        slot: usize,
        create: impl FnOnce(i64) -> Result<u32>,
    ) -> Result<u32> {
        let g = match self.groups.get(&start) {
            Some(&g) => g,
            None => {
                let g = create(start)?;
                self.groups.insert(start, g);
                g
            }
        };
        if let Some(r) = self.recent.get_mut(slot) {
            *r = (start, g);
        }
        Ok(g)
    }

    /// The group of fixed-width bin number `n`, which is `bin`: as [`BinGroups::group`], but
    /// found by number where it can be (and then the last bin is left as it was).
    #[inline]
    pub fn numbered(
        &mut self,
        n: i64,
        bin: (i64, i64),
        create: impl FnOnce(i64) -> Result<u32>,
    ) -> Result<u32> {
        if let Some(g) = self.numbered.get(n) {
            return Ok(g);
        }
        let g = self.group(bin, create)?;
        // Bounded by the span alone: one table's bins.
        let mut room = usize::MAX;
        self.numbered.set(n, g, MAX_NUMBERED, &mut room);
        Ok(g)
    }

    /// Adds the values of one run (`wide`: int64 values) to group `g`'s integer sum, to be fed
    /// to its one accumulator by [`BinGroups::flush_sums`]. Integer sums are exact whatever
    /// their order, so gathering them per group first gives the same answer as feeding each
    /// run, without reaching the group's accumulator once per run.
    #[inline]
    pub fn add_run(&mut self, g: u32, run: &[i64], wide: bool) {
        let g = g as usize;
        if self.pending.len() <= g {
            self.pending.resize(g + 1, (0, 0, false));
        }
        if let Some(p) = self.pending.get_mut(g) {
            pend::<false>(p, run, wide);
        }
    }

    /// [`BinGroups::add_run`] of each run of `per_bin` values in `vals` to the group of bin
    /// number `n`, `n + 1`, ...; false, having added nothing, unless every one of those bins
    /// already has its group here by number. One loop over the runs with nothing to look up but
    /// the groups' numbers: an hour's bucket at 10 s steps is sixty runs of six rows.
    /// `(wide, bound)`: int64 values, and a bound on their magnitude when known.
    #[inline(never)]
    pub fn add_runs_numbered(
        &mut self,
        n: i64,
        vals: &[i64],
        per_bin: usize,
        (wide, bound): (bool, Option<u64>),
    ) -> bool {
        if per_bin == 0 {
            return false;
        }
        let runs = vals.len() / per_bin;
        if let Some(g) = self.numbered.consecutive(n, runs) {
            if self.add_consecutive(g as usize, vals, per_bin, (wide, bound)) {
                return true;
            }
        }
        let Some(groups) = self.numbered.run(n, runs) else {
            return false;
        };
        // A bin without a group is `u32::MAX`, above every group.
        let top = groups.iter().fold(0, |top, &g| top.max(g));
        if top == u32::MAX {
            return false;
        }
        if self.pending.len() <= top as usize {
            self.pending.resize(top as usize + 1, (0, 0, false));
        }
        // A run of values under the bound sums within an i64 when `per_bin` times the bound
        // does.
        match bound.is_some_and(|b| u128::from(b) * per_bin as u128 <= i64::MAX as u128) {
            true => pend_runs::<true>(&mut self.pending, vals, per_bin, groups, wide),
            false => pend_runs::<false>(&mut self.pending, vals, per_bin, groups, wide),
        }
        true
    }

    /// [`BinGroups::add_runs_numbered`] of runs whose groups are consecutive from group `g`,
    /// when a bound on the values keeps their totals within an i64: a run is added with no
    /// group to look up and check, to the 64-bit total and the rows of the next group in
    /// turn. False, having added nothing, otherwise.
    ///
    /// Values under the bound move any total by at most the bound times their count: while
    /// the room left holds that, the narrow totals cannot leave an i64.
    #[inline(always)]
    fn add_consecutive(
        &mut self,
        g: usize,
        vals: &[i64],
        per_bin: usize,
        (wide, bound): (bool, Option<u64>),
    ) -> bool {
        let runs = vals.len() / per_bin;
        let Some(used) = bound
            .and_then(|b| b.checked_mul(vals.len() as u64))
            .filter(|&u| u <= i64::MAX as u64)
        else {
            return false;
        };
        if used > self.narrow_room {
            self.fold_narrow();
        }
        self.narrow_room -= used;
        let end = g + runs;
        if self.narrow.len() < end {
            self.narrow.resize(end, (0, 0));
        }
        if self.pending.len() < end {
            self.pending.resize(end, (0, 0, false));
        }
        if wide {
            for p in self.pending.get_mut(g..end).unwrap_or_default() {
                p.2 = true;
            }
        }
        let totals = self.narrow.get_mut(g..end).unwrap_or_default();
        match per_bin {
            2 => add_consecutive_fixed::<2>(totals, vals),
            3 => add_consecutive_fixed::<3>(totals, vals),
            4 => add_consecutive_fixed::<4>(totals, vals),
            5 => add_consecutive_fixed::<5>(totals, vals),
            6 => add_consecutive_fixed::<6>(totals, vals),
            10 => add_consecutive_fixed::<10>(totals, vals),
            12 => add_consecutive_fixed::<12>(totals, vals),
            _ => {
                for (t, run) in totals.iter_mut().zip(vals.chunks_exact(per_bin)) {
                    t.0 = t.0.wrapping_add(run.iter().fold(0i64, |a, &x| a.wrapping_add(x)));
                    t.1 += per_bin as u64;
                }
            }
        }
        true
    }

    /// Adds the narrow totals to the pending sums and empties them, which gives back all
    /// their room.
    fn fold_narrow(&mut self) {
        if self.pending.len() < self.narrow.len() {
            self.pending.resize(self.narrow.len(), (0, 0, false));
        }
        for (p, t) in self.pending.iter_mut().zip(self.narrow.iter_mut()) {
            p.0 += i128::from(t.0);
            p.1 += t.1;
            *t = (0, 0);
        }
        self.narrow_room = i64::MAX as u64;
    }

    /// Feeds the sums gathered by [`BinGroups::add_run`] to the first accumulator of their
    /// groups in `table`.
    pub fn flush_sums(&mut self, table: &mut GroupTable) {
        self.fold_narrow();
        self.narrow.clear();
        for (g, (total, rows, wide)) in self.pending.drain(..).enumerate() {
            if rows > 0 {
                if let Some(acc) = table.accs(g as u32).first_mut() {
                    acc.add_ints(total, rows, wide);
                }
            }
        }
    }

    /// The bin of `t` and its group (see [`BinGroups::group`]).
    #[inline]
    pub fn find(
        &mut self,
        bins: &Bins<'_>,
        t: i64,
        create: impl FnOnce(i64) -> Result<u32>,
    ) -> Result<((i64, i64), u32)> {
        if let Some((bin, g)) = self.last.filter(|&((s, e), _)| s <= t && t < e) {
            return Ok((bin, g));
        }
        let bin = self.bin_after_last(bins, t)?;
        Ok((bin, self.group(bin, create)?))
    }
}

#[cfg(test)]
// Tests may panic: a panic is how a test fails.
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn bin_numbers_agree_with_exact_arithmetic_at_the_ends_of_time() {
        let exact = |origin: i64, width: i64, (lo, hi): (i64, i64)| {
            let off = i128::from(lo) - i128::from(origin);
            let w = i128::from(width);
            (i128::from(hi) - i128::from(lo) == w && off.rem_euclid(w) == 0)
                .then(|| i64::try_from(off.div_euclid(w)).ok())
                .flatten()
        };
        for origin in [0, 7, -3, i64::MAX - 5, i64::MIN + 5] {
            for width in [1, 10, 60_000, i64::MAX] {
                let bins = Bins::Fixed {
                    width,
                    origin,
                    range: &|t| Ok((t, t)),
                };
                let mut bins_at = vec![0, 17, -60_000, i64::MIN, i64::MIN + 1, i64::MAX - width];
                // Whole bins before the origin, some of them too far for 64 bits.
                bins_at.extend(
                    [1, 2, 1 << 40].map(|k: i64| origin.wrapping_sub(k.wrapping_mul(width))),
                );
                for lo in bins_at {
                    for hi in [lo.saturating_add(width), lo.saturating_add(width - 1)] {
                        let want = exact(origin, width, (lo, hi));
                        assert_eq!(bins.number((lo, hi)), want, "{origin} {width} {lo} {hi}");
                    }
                }
            }
        }
    }

    pub(crate) fn minute(t: i64) -> Result<(i64, i64)> {
        let s = t - t.rem_euclid(60_000);
        Ok((s, s + 60_000))
    }

    /// Runs `f` on minute bins given as any bins and as fixed ones.
    pub(crate) fn each_bins(f: impl Fn(&Bins<'_>)) {
        f(&Bins::Other(&minute));
        f(&Bins::Fixed {
            width: 60_000,
            origin: 120_000,
            range: &minute,
        });
    }

    #[test]
    fn fixed_bins_near_the_ends_of_time_fall_back_to_the_range() {
        let fallback = |t: i64| Ok((t, t));
        let bins = Bins::Fixed {
            width: 60_000,
            origin: 1000,
            range: &fallback,
        };
        assert_eq!(bins.of(i64::MIN + 5).unwrap(), (i64::MIN + 5, i64::MIN + 5));
        let t = i128::from(i64::MAX);
        let s = (t - (t - 1000).rem_euclid(60_000)) as i64;
        assert_eq!(bins.of(i64::MAX).unwrap(), (s, i64::MAX));
        assert_eq!(bins.of(61_000).unwrap(), (61_000, 121_000));
        assert_eq!(bins.of(60_999).unwrap(), (1000, 61_000));
    }

    #[test]
    fn the_next_bin_is_found_as_binning_finds_it() {
        let bins = Bins::Fixed {
            width: 60_000,
            origin: 30_000,
            range: &minute,
        };
        let mut prev = None;
        for t in [
            0,
            29_999,
            30_000,
            95_000,
            89_999,
            150_000,
            400_000,
            400_001,
            -1,
            i64::MAX,
        ] {
            let got = bins.after(prev, t).unwrap();
            assert_eq!(got, bins.of(t).unwrap(), "{t} after {prev:?}");
            prev = Some(got);
        }
    }

    #[test]
    fn consecutive_bins_of_one_width_take_distinct_recent_slots() {
        for width in [
            1i64,
            2,
            7,
            1000,
            60_000,
            3_600_000,
            86_400_000,
            1 << 40,
            i64::MAX / 4,
        ] {
            for origin in [0i64, 13, -1_000_003, 1_451_606_400_000] {
                let mut slotting = Slotting::new(1);
                let first = origin.wrapping_add(width.wrapping_mul(-100));
                let slots: std::collections::HashSet<usize> = (0..RECENT as i64)
                    .map(|n| {
                        let start = first.wrapping_add(width.wrapping_mul(n));
                        slotting.slot((start, start.wrapping_add(width)))
                    })
                    .collect();
                assert_eq!(slots.len(), RECENT, "width {width}, origin {origin}");
            }
        }
        // Bins of other widths (calendar months) still get a slot in range.
        let mut slotting = Slotting::new(1);
        for (start, end) in [(0, 31), (31, 59), (59, 90), (i64::MIN, i64::MAX)] {
            assert!(slotting.slot((start, end)) < RECENT);
        }
    }

    #[test]
    fn runs_of_every_length_add_up_to_the_sums_of_their_values() {
        // The lengths with a loop of their own, the ones around them, and values near the
        // ends of i64 (summed in 128 bits unless narrow).
        for per_bin in 1..=13usize {
            for narrow in [false, true] {
                let runs = 7;
                let vals: Vec<i64> = (0..runs * per_bin + per_bin / 2)
                    .map(|i| match narrow {
                        true => (i as i64 * 37) % 101 - 50,
                        false => i64::MAX - (i as i64 % 3),
                    })
                    .collect();
                // Runs go to groups out of order, two of them to one group.
                let groups: Vec<u32> = [3u32, 0, 5, 0, 1, 4, 2].to_vec();
                let mut pending = vec![(0i128, 0u64, false); 6];
                match narrow {
                    true => pend_runs::<true>(&mut pending, &vals, per_bin, &groups, true),
                    false => pend_runs::<false>(&mut pending, &vals, per_bin, &groups, false),
                }
                let mut want = vec![(0i128, 0u64, false); 6];
                for (run, &g) in vals.chunks_exact(per_bin).zip(&groups) {
                    let w = &mut want[g as usize];
                    w.0 += run.iter().map(|&x| i128::from(x)).sum::<i128>();
                    w.1 += per_bin as u64;
                    w.2 |= narrow;
                }
                assert_eq!(pending, want, "runs of {per_bin}, narrow {narrow}");
            }
        }
    }

    proptest::proptest! {
        /// Runs of bins taken by number add up to the exact sums of their values: in 64 bits
        /// over consecutive groups while the bounds allow, else per group in 128 bits.
        /// Bounds near the limit fold the 64-bit totals often, values at the bound push them
        /// to it, int64 runs mark their groups; groups made in reverse are not consecutive,
        /// and a bin without a group leaves the groups around it to the general path.
        #[test]
        fn numbered_runs_add_up_to_their_exact_sums(
            calls in proptest::collection::vec(
                (0i64..8, 1usize..8, 1usize..13, 0u32..6, proptest::bool::ANY, proptest::bool::ANY),
                1..30,
            ),
            reverse in proptest::bool::ANY,
            hole in proptest::option::of(0i64..20),
        ) {
            let mut g = BinGroups::default();
            let mut made = 0u32;
            let order: Vec<i64> = match reverse {
                true => (0..20).rev().collect(),
                false => (0..20).collect(),
            };
            let mut group_of = [u32::MAX; 20];
            for &n in order.iter().filter(|&&n| Some(n) != hole) {
                group_of[n as usize] = g
                    .numbered(n, (n * 10, n * 10 + 10), |_| {
                        made += 1;
                        Ok(made - 1)
                    })
                    .unwrap();
            }
            proptest::prop_assert_eq!(
                g.numbered.consecutive(0, 5).is_some(),
                // A missing last bin is no hole: the slots end before it.
                !reverse && hole.is_none_or(|h| h == 19)
            );
            let mut want = vec![(0i128, 0u64, false); 20];
            for (c, &(from, runs, per_bin, scale, wide, at_bound)) in calls.iter().enumerate() {
                // Bounds from small to a run's worth of i64, and none.
                let bound = match scale {
                    0 => Some(100u64),
                    1 => Some(1 << 40),
                    2 => Some(i64::MAX as u64 / (runs * per_bin) as u64),
                    3 => Some(i64::MAX as u64 / per_bin as u64),
                    4 => Some(i64::MAX as u64),
                    _ => None,
                };
                let top = bound.unwrap_or(i64::MAX as u64);
                let vals: Vec<i64> = (0..runs * per_bin)
                    .map(|i| {
                        let v = match at_bound {
                            true => top as i64,
                            false => (top / 3) as i64 - i as i64,
                        };
                        if (i + c) % 3 == 0 { -v } else { v }
                    })
                    .collect();
                let bins = from as usize..from as usize + runs;
                let all_held = bins.clone().all(|b| group_of[b] != u32::MAX);
                let added = g.add_runs_numbered(from, &vals, per_bin, (wide, bound));
                proptest::prop_assert_eq!(added, all_held);
                if !added {
                    continue;
                }
                for (b, run) in bins.zip(vals.chunks_exact(per_bin)) {
                    let w = &mut want[group_of[b] as usize];
                    w.0 += run.iter().map(|&x| i128::from(x)).sum::<i128>();
                    w.1 += per_bin as u64;
                    w.2 |= wide;
                }
            }
            g.fold_narrow();
            g.pending.resize(20, (0, 0, false));
            proptest::prop_assert_eq!(&g.pending, &want);
        }
    }

    #[test]
    fn groups_are_made_once_per_bin_and_found_from_any_bin() {
        each_bins(|bins| {
            let mut g = BinGroups::default();
            let mut made = Vec::new();
            for t in [5, 59_999, 60_000, 3, 1_000_000, 60_001, 3_000_000_000] {
                let (bin, id) = g
                    .find(bins, t, |s| {
                        made.push(s);
                        Ok(made.len() as u32 - 1)
                    })
                    .unwrap();
                assert_eq!(bin, minute(t).unwrap());
                assert_eq!(made[id as usize], bin.0);
                assert_eq!(g.last_holds(t, t), Some(id));
            }
            assert_eq!(made, [0, 60_000, 960_000, 3_000_000_000]);
        });
    }
}
