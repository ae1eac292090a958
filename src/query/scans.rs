//! The buckets a read chose to scan, and where each lives: in memory or in a segment.

use super::plan::Verdict;
use crate::bucket::BucketData;
use crate::segment::Segment;
use std::sync::Arc;

/// Where a bucket to scan lives, borrowed from the [`Scans`] that hold it.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    /// In memory (open, closed or being flushed).
    Mem(&'a Arc<BucketData>),
    /// In a segment, by position.
    Seg(&'a Arc<Segment>, u32),
}

/// A bucket chosen by [`super::read::select`] and what its statistics proved, as [`Scans::get`] gives it.
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
    Mem(Arc<BucketData>),
    Seg(u32, u32),
}

/// The buckets [`super::read::select`] chose, in order, holding each segment they lie in once:
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
