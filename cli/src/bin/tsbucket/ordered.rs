//! Work done on every core whose results come back in the order it was handed out: the
//! parsing of an import's chunks and the formatting of an export's documents.
//!
//! The channels are bounded, so a slow consumer holds up the producer rather than letting
//! results pile up; when either end is dropped, the workers stop at their next hand-over.

use crossbeam_channel::{bounded, Receiver, Sender};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Threads to work on: one per core.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Hands work to the workers, numbering it.
pub struct Feed<I> {
    tx: Sender<(u64, I)>,
    next: u64,
}

impl<I> Feed<I> {
    /// Hands over `item`; false when the results are no longer wanted.
    pub fn send(&mut self, item: I) -> bool {
        let seq = self.next;
        self.next += 1;
        self.tx.send((seq, item)).is_ok()
    }
}

/// Starts `workers` threads that apply `f` to what the [`Feed`] hands over; the results come
/// out of the [`InOrder`] in the order handed over, and it ends once the feed is dropped and
/// every result has come out.
pub fn ordered<I: Send + 'static, O: Send + 'static>(
    workers: usize,
    f: Arc<dyn Fn(I) -> O + Send + Sync>,
) -> (Feed<I>, InOrder<O>) {
    let workers = workers.max(1);
    let (tx, jobs) = bounded::<(u64, I)>(workers);
    let (done, results) = bounded::<(u64, O)>(workers * 2);
    for _ in 0..workers {
        let (jobs, done, f) = (jobs.clone(), done.clone(), f.clone());
        std::thread::spawn(move || {
            for (seq, item) in jobs {
                if done.send((seq, f(item))).is_err() {
                    return;
                }
            }
        });
    }
    let feed = Feed { tx, next: 0 };
    let out = InOrder {
        results,
        next: 0,
        early: BTreeMap::new(),
    };
    (feed, out)
}

/// The workers' results in the order their work was handed over.
pub struct InOrder<O> {
    results: Receiver<(u64, O)>,
    next: u64,
    early: BTreeMap<u64, O>,
}

impl<O> Iterator for InOrder<O> {
    type Item = O;

    fn next(&mut self) -> Option<O> {
        loop {
            if let Some(o) = self.early.remove(&self.next) {
                self.next += 1;
                return Some(o);
            }
            // Every worker gone: the feed was dropped and every result came out.
            let (seq, o) = self.results.recv().ok()?;
            self.early.insert(seq, o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_the_order_handed_over() {
        // Uneven work, so that later items finish first.
        let f: Arc<dyn Fn(u64) -> u64 + Send + Sync> = Arc::new(|i| {
            if i % 7 == 0 {
                std::thread::yield_now();
            }
            (0..(i % 13) * 1000).fold(i, |a, x| a ^ x)
                ^ ((0..(i % 13) * 1000).fold(0, |a, x| a ^ x))
        });
        let (mut feed, out) = ordered(3, f);
        let producer = std::thread::spawn(move || {
            for i in 0..2000 {
                assert!(feed.send(i));
            }
        });
        let got: Vec<u64> = out.collect();
        producer.join().unwrap();
        assert_eq!(got, (0..2000).collect::<Vec<_>>());
    }

    #[test]
    fn dropping_the_results_stops_the_feed() {
        let (mut feed, out) = ordered(2, Arc::new(|i: u32| i));
        drop(out);
        // The workers exit at their first hand-over; the feed then finds no one to take work.
        let mut refused = false;
        for i in 0..100 {
            if !feed.send(i) {
                refused = true;
                break;
            }
        }
        assert!(refused);
    }
}
