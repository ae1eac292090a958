//! Reading buckets on several threads: how many, and where to cut the list of buckets.
//!
//! A read whose answer does not depend on the order of its buckets (counts, and groups
//! without `$first`/`$last`) is cut into stretches of similar length, several per thread, each
//! cut where the list passes from one page of a segment to another so that no page is
//! decompressed twice. Threads take the stretches as they come free, in order, and their
//! answers are then combined.

use crate::query::source::{Scans, Source};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
pub(crate) fn split_by_page<'a>(scans: &Scans, order: &'a [usize], n: usize) -> Vec<&'a [usize]> {
    let page_of = |k: usize| match order.get(k).and_then(|&i| scans.get(i)).map(|s| s.src) {
        Some(Source::Seg(seg, i)) => Some((Arc::as_ptr(seg) as usize, seg.page_of(i as usize))),
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

/// Parts per thread for [`run_claimed`]: enough that the last part taken is a small share of
/// the work, so that threads finish together however the cost lies along the list.
pub(crate) const PARTS_PER_THREAD: usize = 8;

/// How many stretches to cut a read into for `threads` threads (see [`run_claimed`]).
pub(crate) fn parts_for(threads: usize) -> usize {
    match threads {
        0 | 1 => 1,
        n => n * PARTS_PER_THREAD,
    }
}

/// Runs `f` over every part on up to `threads` threads, this one among them, each with a state
/// of its own made by `init`. A thread takes the next part nobody has taken yet, so that a
/// thread whose parts turn out cheap takes more of them (a bucket answered from its statistics
/// costs a hundredth of one decoded row by row, and such buckets lie together in the files),
/// and each thread takes its parts in increasing order. `f` is given a part's index. Returns
/// the states, one per thread that ran, or the first error; after an error, threads take no
/// more parts.
pub(crate) fn run_claimed<P: Copy + Sync, S: Send, E: Send>(
    parts: &[P],
    threads: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, usize, P) -> Result<(), E> + Sync,
) -> Result<Vec<S>, E> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let work = || {
        let mut state = init();
        while !failed.load(Ordering::Relaxed) {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let Some(&part) = parts.get(k) else { break };
            if let Err(e) = f(&mut state, k, part) {
                failed.store(true, Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(state)
    };
    let threads = threads.clamp(1, parts.len().max(1));
    if threads == 1 {
        return work().map(|s| vec![s]);
    }
    std::thread::scope(|s| {
        let work = &work;
        let handles: Vec<_> = (1..threads)
            .map(|_| std::thread::Builder::new().spawn_scoped(s, work))
            .collect();
        let mut states = vec![work()?];
        // A thread the system refused took no part: the others took them all.
        for h in handles.into_iter().flatten() {
            // A worker that panicked is a bug here: let the panic through.
            states.push(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))?);
        }
        Ok(states)
    })
}

/// `f` of each of `parts`, in order, each part on a thread of its own (the first on this
/// one), through [`run_claimed`].
pub(crate) fn on_threads<P: Copy + Sync, R: Send>(
    parts: impl Iterator<Item = P>,
    f: impl Fn(P) -> R + Sync,
) -> Vec<R> {
    let parts: Vec<P> = parts.collect();
    let done = run_claimed(&parts, parts.len(), Vec::new, |out, k, p| {
        out.push((k, f(p)));
        Ok::<(), std::convert::Infallible>(())
    });
    let mut done: Vec<(usize, R)> = match done {
        Ok(states) => states.into_iter().flatten().collect(),
        Err(never) => match never {},
    };
    done.sort_unstable_by_key(|&(k, _)| k);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Work items `0..n` done by worker threads at most `window` items ahead of the reader, and
/// handed to it in order: for a reader that takes the results one by one and may stop early
/// (a cursor), where [`run_claimed`] suits a reader that wants them all.
///
/// The reader hands out tickets for items, `window` at first and one more for each result it
/// takes, so that at most `window` results are ever held, whatever order the workers finish
/// in. Dropping the reader closes the ticket channel: the workers finish the item they hold and
/// stop.
pub(crate) struct InOrder<T> {
    tickets: Option<crossbeam_channel::Sender<usize>>,
    /// Results by item; `None` for an item whose work panicked.
    done: crossbeam_channel::Receiver<(usize, Option<T>)>,
    /// Results that came before their turn.
    early: std::collections::BTreeMap<usize, Option<T>>,
    /// The next item the reader takes.
    next: usize,
    /// Items ticketed so far.
    issued: usize,
    n: usize,
}

impl<T: Send + 'static> InOrder<T> {
    /// Starts `threads` workers (at least one) running `work` on items `0..n`; `None` when the
    /// system gives no thread, so that the caller does the work itself.
    pub(crate) fn start(
        n: usize,
        threads: usize,
        window: usize,
        work: impl Fn(usize) -> T + Send + Sync + 'static,
    ) -> Option<InOrder<T>> {
        let window = window.max(1);
        let (tickets, ticket_rx) = crossbeam_channel::bounded::<usize>(window);
        let (done_tx, done) = crossbeam_channel::bounded(window);
        let work = Arc::new(work);
        let mut started = 0;
        for _ in 0..threads.max(1) {
            let (rx, tx, work) = (ticket_rx.clone(), done_tx.clone(), Arc::clone(&work));
            let spawned = std::thread::Builder::new()
                .name("tsbucket-read".into())
                .spawn(move || {
                    for k in rx {
                        // A panic (a bug) is handed on as a missing result, so that the
                        // reader fails rather than waits for it.
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(k)));
                        let failed = r.is_err();
                        // The reader has gone.
                        if tx.send((k, r.ok())).is_err() || failed {
                            break;
                        }
                    }
                });
            started += usize::from(spawned.is_ok());
        }
        if started == 0 {
            return None;
        }
        let mut me = InOrder {
            tickets: Some(tickets),
            done,
            early: std::collections::BTreeMap::new(),
            next: 0,
            issued: 0,
            n,
        };
        for _ in 0..window {
            me.issue();
        }
        Some(me)
    }

    /// Tickets the next item, and lets the workers go once every item is ticketed.
    fn issue(&mut self) {
        if self.issued < self.n {
            if let Some(t) = &self.tickets {
                // The channel holds `window` tickets and at most `window` are out.
                let _ = t.send(self.issued);
            }
            self.issued += 1;
        }
        if self.issued >= self.n {
            self.tickets = None;
        }
    }

    /// The result of the next item; `None` after the last. An error when its work panicked or
    /// the workers stopped before giving it: the reader must not take a short answer for the
    /// whole.
    pub(crate) fn next(&mut self) -> Option<crate::error::Result<T>> {
        if self.next >= self.n {
            return None;
        }
        let r = loop {
            if let Some(r) = self.early.remove(&self.next) {
                break r;
            }
            let Ok((k, r)) = self.done.recv() else {
                break None;
            };
            if k == self.next {
                break r;
            }
            self.early.insert(k, r);
        };
        let Some(r) = r else {
            self.next = self.n;
            return Some(Err(crate::error::Error::Internal(
                "a worker thread of the read failed before the end".into(),
            )));
        };
        self.next += 1;
        self.issue();
        Some(Ok(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_on_threads_comes_back_in_order() {
        let items: Vec<u32> = (0..100).collect();
        for n in 1..=5 {
            let per = items.len().div_ceil(n);
            let sums = on_threads(items.chunks(per), |c| (c[0], c.iter().sum::<u32>()));
            assert_eq!(sums.len(), n);
            assert!(
                sums.windows(2).all(|w| w[0].0 < w[1].0),
                "{n} parts in order"
            );
            assert_eq!(sums.iter().map(|s| s.1).sum::<u32>(), 4950);
        }
        assert!(on_threads(items[..0].chunks(1), |c: &[u32]| c.len()).is_empty());
    }

    #[test]
    fn parts_are_consecutive_and_cover_everything() {
        let order: Vec<usize> = (0..10).collect();
        // Buckets in memory share no page: any place is a cut.
        let scans = Scans::default();
        for n in 1..=4 {
            let parts = split_by_page(&scans, &order, n);
            assert_eq!(parts.concat(), order, "{n} parts");
            assert!(parts.len() <= n && !parts.is_empty());
        }
        assert_eq!(workers(10, 1024, 4), 1);
        assert_eq!(workers(0, 0, 4), 1);
        assert_eq!(workers(5000, 1024, 2), 2);
        assert_eq!(workers(5000, 1024, 8), 4);
        assert_eq!(allowed(3), 3);
        assert_eq!(parts_for(1), 1);
        assert_eq!(parts_for(3), 3 * PARTS_PER_THREAD);
        assert!((1..=MAX_AUTO_THREADS).contains(&allowed(0)));
    }

    #[test]
    fn threads_take_every_part_once_in_increasing_order() {
        let order: Vec<usize> = (0..100).collect();
        let parts: Vec<&[usize]> = order.chunks(7).collect();
        for threads in [1, 2, 3, 40] {
            let states = run_claimed(
                &parts,
                threads,
                Vec::new,
                |taken: &mut Vec<(usize, usize)>, k, p| {
                    // Uneven costs, so that threads take parts out of turn.
                    if k % 3 == 0 {
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    taken.push((k, p[0]));
                    Ok::<(), ()>(())
                },
            )
            .unwrap();
            assert!(!states.is_empty() && states.len() <= threads.min(parts.len()));
            for taken in &states {
                assert!(taken.windows(2).all(|w| w[0].0 < w[1].0), "{taken:?}");
                assert!(taken.iter().all(|&(k, first)| first == k * 7));
            }
            let mut all: Vec<usize> = states.iter().flatten().map(|t| t.0).collect();
            all.sort_unstable();
            assert_eq!(
                all,
                (0..parts.len()).collect::<Vec<_>>(),
                "{threads} threads"
            );
        }
        // An error stops the threads taking parts, and is returned.
        let r = run_claimed(
            &parts,
            2,
            || 0,
            |n: &mut usize, k, _| {
                *n += 1;
                if k == 3 {
                    Err(k)
                } else {
                    Ok(())
                }
            },
        );
        assert_eq!(r.err(), Some(3));
        assert!(
            run_claimed(&[], 2, || 0, |_: &mut i32, _, _: &[usize]| Ok::<(), ()>(()))
                .unwrap()
                .iter()
                .all(|&s| s == 0)
        );
    }

    #[test]
    fn in_order_results_come_in_order_within_the_window() {
        let held = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (h, m) = (Arc::clone(&held), Arc::clone(&most));
        let mut r = InOrder::start(50, 3, 4, move |k| {
            // Uneven costs, so that workers finish out of turn.
            if k % 3 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            let now = h.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            k * 10
        })
        .unwrap();
        let mut got = Vec::new();
        while let Some(x) = r.next() {
            held.fetch_sub(1, Ordering::SeqCst);
            got.push(x.unwrap());
        }
        assert_eq!(got, (0..50).map(|k| k * 10).collect::<Vec<_>>());
        // The window, and the result the reader has just taken.
        assert!(most.load(Ordering::SeqCst) <= 5, "results held past the window");
        // A reader that stops early lets the workers go.
        let mut r = InOrder::start(1_000_000, 2, 2, |k| k).unwrap();
        assert_eq!(r.next().map(Result::unwrap), Some(0));
        drop(r);
        assert!(InOrder::start(0, 2, 2, |k| k).unwrap().next().is_none());
        // Work that panics (a bug) gives an error, not a short answer nor a wait.
        let mut r = InOrder::start(10, 2, 2, |k| {
            assert!(k != 3, "item 3 fails");
            k
        })
        .unwrap();
        let got: Vec<_> = std::iter::from_fn(|| r.next()).collect();
        assert!(got.last().is_some_and(Result::is_err), "{got:?}");
        assert!(got.len() <= 4 && got.iter().rev().skip(1).all(Result::is_ok));
    }
}
