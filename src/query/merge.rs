//! Rows in time order across buckets without sorting the collection: MongoDB's bounded sort.
//!
//! Buckets are visited in order of their start (ascending) or their latest time (descending).
//! A row can be returned once no bucket still to visit can hold an earlier (later) row: its
//! time is at or before the next bucket's start (at or after the next bucket's latest time).
//! Rows within a bucket need not be in order; they wait in a heap.

use super::materialise::{RowOutput, Selected};
use crate::query::select::Verdict;
use crate::query::source::{Scans, Source};
use crate::error::Result;
use bson::{Bson, Document};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::Arc;

/// A row waiting to be returned.
struct Pending {
    /// The time, bit-inverted for ascending order so the max-heap pops the earliest first.
    key: i64,
    /// Position in the scan (bucket as selected, then row): equal times come out in this
    /// order, as a stable sort of the rows read bucket by bucket gives them.
    seq: u64,
    rows: Arc<Selected>,
    row: u32,
}

impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> Ordering {
        self.key.cmp(&o.key).then_with(|| o.seq.cmp(&self.seq))
    }
}

/// What the merge needs to read buckets.
pub(crate) struct MergeSpec {
    /// Which rows, and what of them: its times must be at hand ([`RowOutput::with_times`]).
    pub output: RowOutput,
    /// The time field.
    pub time_field: String,
    /// Ascending time order.
    pub asc: bool,
}

/// Matching rows of a set of buckets in time order.
pub(crate) struct TimeMerge {
    spec: MergeSpec,
    scans: Scans,
    /// Buckets in visiting order, each with its bound (start or latest time), by index into
    /// `scans`.
    order: Vec<(i64, usize)>,
    next: usize,
    heap: BinaryHeap<Pending>,
    /// Buckets read so far.
    pub buckets_read: u64,
}

fn time_of(d: &Document, field: &str) -> Option<i64> {
    match d.get(field) {
        Some(Bson::DateTime(t)) => Some(t.timestamp_millis()),
        _ => None,
    }
}

/// The bucket's start (`asc`) or latest time, from its statistics.
fn bound(src: &Source, time_field: &str, asc: bool) -> i64 {
    let (min, max) = match src {
        Source::Mem(b) => {
            let b = b.head();
            (time_of(&b.min, time_field), time_of(&b.max, time_field))
        }
        Source::Seg(seg, i) => match seg.buckets().get(*i as usize) {
            Some(s) => (Some(s.time_range().0), Some(s.time_range().1)),
            None => (None, None),
        },
    };
    // Without statistics the bucket is visited first, which is always safe.
    if asc {
        min.unwrap_or(i64::MIN)
    } else {
        max.unwrap_or(i64::MAX)
    }
}

impl TimeMerge {
    /// A merge over `scans` (as [`crate::query::select::select`] returned them).
    pub fn new(scans: Scans, spec: MergeSpec) -> TimeMerge {
        let mut order: Vec<(i64, usize)> = (scans.iter().enumerate())
            .map(|(k, s)| (bound(&s.src, &spec.time_field, spec.asc), k))
            .collect();
        if spec.asc {
            order.sort_by_key(|s| s.0);
        } else {
            order.sort_by_key(|s| std::cmp::Reverse(s.0));
        }
        TimeMerge {
            spec,
            scans,
            order,
            next: 0,
            heap: BinaryHeap::new(),
            buckets_read: 0,
        }
    }

    /// True when the pending row `p` comes before every row of the buckets not read yet.
    fn ready(&self, p: &Pending) -> bool {
        match self.order.get(self.next) {
            None => true,
            Some(&(b, k)) => {
                let t = if self.spec.asc { !p.key } else { p.key };
                let before = if self.spec.asc { t < b } else { t > b };
                // A row whose time equals the next bucket's bound still comes first when its
                // bucket was selected earlier: equal times keep the order of selection, and
                // buckets of equal bounds are read in that order. Waiting instead read every
                // bucket of the newest hour (all hosts end at the same time) for ten rows.
                before || (t == b && (p.seq >> 32) < k as u64)
            }
        }
    }

    /// The next row in time order, as its bucket and row index.
    pub fn next_row(&mut self) -> Option<Result<(Arc<Selected>, u32)>> {
        loop {
            if let Some(top) = self.heap.peek() {
                if self.ready(top) {
                    let p = self.heap.pop()?;
                    return Some(Ok((p.rows, p.row)));
                }
            }
            let &(_, k) = self.order.get(self.next)?;
            let scan = self.scans.get(k)?;
            self.next += 1;
            let whole = scan.verdict == Verdict::All;
            let rows = match self.spec.output.select(&scan.src, whole) {
                Ok(r) => Arc::new(r),
                Err(e) => return Some(Err(e)),
            };
            self.buckets_read += 1;
            for &r in rows.rows() {
                let t = rows.time_ms(r).unwrap_or(i64::MIN);
                self.heap.push(Pending {
                    key: if self.spec.asc { !t } else { t },
                    seq: ((k as u64) << 32) | u64::from(r),
                    rows: rows.clone(),
                    row: r,
                });
            }
        }
    }

    /// What the merge returns of each row.
    pub fn output(&self) -> &RowOutput {
        &self.spec.output
    }
}
