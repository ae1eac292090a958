//! Reading buckets on several threads: how many, and where to cut the list of buckets.
//!
//! A read whose answer does not depend on the order of its buckets (counts, and groups
//! without `$first`/`$last`) is cut into stretches of similar length, one per thread, each
//! cut where the list passes from one page of a segment to another so that no page is
//! decompressed twice; the stretches' answers are then combined in order.

use super::read::{Scan, Source};
use std::sync::Arc;

/// Most threads a read uses when [`crate::DbOptions::query_threads`] leaves it to the engine.
const MAX_AUTO_THREADS: usize = 4;

/// The threads a read may use under the `query_threads` option (0: one per core, at most
/// [`MAX_AUTO_THREADS`]).
pub(crate) fn allowed(query_threads: usize) -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    match query_threads {
        0 => (*CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get())))
            .min(MAX_AUTO_THREADS),
        n => n,
    }
}

/// Worker threads for `buckets` buckets of which each thread should have at least
/// `per_worker`, with at most `allowed` threads.
pub(crate) fn workers(buckets: usize, per_worker: usize, allowed: usize) -> usize {
    allowed.min(buckets / per_worker.max(1)).max(1)
}

/// Cuts `order` into at most `n` stretches of similar length, each cut where the visit passes
/// from one page of a segment to another (so that no page is decompressed by two threads).
pub(crate) fn split_by_page<'a>(scans: &[Scan], order: &'a [usize], n: usize) -> Vec<&'a [usize]> {
    let page_of = |k: usize| match order.get(k).and_then(|&i| scans.get(i)).map(|s| &s.src) {
        Some(Source::Seg(seg, i)) => Some((Arc::as_ptr(seg) as usize, seg.page_of(*i as usize))),
        _ => None,
    };
    // Buckets in memory share no page.
    let same_page = |k: usize| {
        let here = page_of(k);
        here.is_some() && here == page_of(k - 1)
    };
    let mut parts = Vec::with_capacity(n);
    let mut from = 0;
    for p in 1..n {
        let mut cut = (order.len() * p / n).max(from);
        while cut < order.len() && cut > 0 && same_page(cut) {
            cut += 1;
        }
        if cut > from && cut < order.len() {
            parts.extend(order.get(from..cut));
            from = cut;
        }
    }
    parts.extend(order.get(from..));
    parts
}

/// Runs `f` on every part, the first on this thread and the others on threads of their own,
/// and returns the answers in the order of the parts.
pub(crate) fn run_parts<'a, R: Send>(
    parts: &[&'a [usize]],
    f: impl Fn(&'a [usize]) -> R + Sync,
) -> Vec<R> {
    match parts {
        [] => Vec::new(),
        [only] => vec![f(only)],
        [first, rest @ ..] => std::thread::scope(|s| {
            let f = &f;
            let handles: Vec<_> = rest
                .iter()
                .map(|&part| {
                    let h = std::thread::Builder::new().spawn_scoped(s, move || f(part));
                    (part, h)
                })
                .collect();
            let mut out = Vec::with_capacity(parts.len());
            out.push(f(first));
            for (part, h) in handles {
                out.push(match h {
                    // A worker that panicked is a bug here: let the panic through.
                    Ok(h) => h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)),
                    // The system refused a thread: this thread does the part.
                    Err(_) => f(part),
                });
            }
            out
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_consecutive_and_cover_everything() {
        let order: Vec<usize> = (0..10).collect();
        // Buckets in memory share no page: any place is a cut.
        let scans: Vec<Scan> = Vec::new();
        for n in 1..=4 {
            let parts = split_by_page(&scans, &order, n);
            assert_eq!(parts.concat(), order, "{n} parts");
            assert!(parts.len() <= n && !parts.is_empty());
        }
        let sums = run_parts(&[&order[..3], &order[3..]], |p| p.iter().sum::<usize>());
        assert_eq!(sums, vec![3, 42]);
        assert_eq!(workers(10, 1024, 4), 1);
        assert_eq!(workers(0, 0, 4), 1);
        assert_eq!(workers(5000, 1024, 2), 2);
        assert_eq!(workers(5000, 1024, 8), 4);
        assert_eq!(allowed(3), 3);
        assert!((1..=MAX_AUTO_THREADS).contains(&allowed(0)));
    }
}
