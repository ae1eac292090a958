//! Decompressed pages shared by a database's segments, within a byte budget.
//!
//! A segment keeps its last few pages itself, which serves one scan in file order; a query run
//! again decompressed every zstd page it touched again. A count per period over many small
//! buckets spent about an eighth of its time so. Segments are immutable, so a page decompressed
//! (and checked against its crc) once stays good for as long as its segment is open: this cache
//! keeps pages across queries, the least recently used leaving first when the budget is
//! exceeded, and a segment's pages leaving with it.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Numbers segments for the cache: never reused, so a page of a dropped segment can never
/// be mistaken for one of a later segment.
static NEXT_SEGMENT: AtomicU64 = AtomicU64::new(1);

/// A number no other segment opened in this process has.
pub(crate) fn segment_number() -> u64 {
    NEXT_SEGMENT.fetch_add(1, Ordering::Relaxed)
}

struct Entry {
    data: Arc<Vec<u8>>,
    /// When it was last used.
    tick: u64,
}

#[derive(Default)]
struct Inner {
    pages: HashMap<(u64, u32), Entry>,
    bytes: usize,
    tick: u64,
}

/// Decompressed pages by (segment number, page), at most `budget` bytes of them.
pub struct PageCache {
    budget: usize,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for PageCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (pages, bytes) = self.usage();
        f.debug_struct("PageCache")
            .field("budget", &self.budget)
            .field("pages", &pages)
            .field("bytes", &bytes)
            .finish()
    }
}

impl PageCache {
    /// A cache of at most `budget` bytes of pages; 0 keeps none.
    pub fn new(budget: usize) -> PageCache {
        PageCache {
            budget,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, Inner> {
        self.inner.lock()
    }

    /// Page `page` of segment `segment`, when kept.
    pub fn get(&self, segment: u64, page: u32) -> Option<Arc<Vec<u8>>> {
        if self.budget == 0 {
            return None;
        }
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        let e = inner.pages.get_mut(&(segment, page))?;
        e.tick = tick;
        Some(e.data.clone())
    }

    /// Keeps page `page` of segment `segment`, dropping the least recently used pages while
    /// the budget is exceeded. A page larger than the whole budget is not kept.
    pub fn put(&self, segment: u64, page: u32, data: Arc<Vec<u8>>) {
        let len = data.len();
        if len > self.budget {
            return;
        }
        let mut inner = self.lock();
        inner.tick += 1;
        let tick = inner.tick;
        if let Some(old) = inner.pages.insert((segment, page), Entry { data, tick }) {
            inner.bytes -= old.data.len();
        }
        inner.bytes += len;
        while inner.bytes > self.budget {
            // Eviction scans every kept page: pages are tens of KiB, so a budget holds a few
            // thousand of them, and a full cache evicts once per page it decompresses.
            let Some((&key, _)) = inner.pages.iter().min_by_key(|(_, e)| e.tick) else {
                break;
            };
            if let Some(e) = inner.pages.remove(&key) {
                inner.bytes -= e.data.len();
            }
        }
    }

    /// Drops every page of segment `segment` (closed or deleted).
    pub fn forget(&self, segment: u64) {
        let mut inner = self.lock();
        let mut freed = 0;
        inner.pages.retain(|&(s, _), e| {
            let keep = s != segment;
            if !keep {
                freed += e.data.len();
            }
            keep
        });
        inner.bytes -= freed;
    }

    /// Pages kept and their bytes.
    pub fn usage(&self) -> (usize, usize) {
        let inner = self.lock();
        (inner.pages.len(), inner.bytes)
    }
}

#[cfg(test)]
// Tests may panic: a panic is how a test fails.
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;

    fn page(n: usize, byte: u8) -> Arc<Vec<u8>> {
        Arc::new(vec![byte; n])
    }

    #[test]
    fn the_least_recently_used_pages_leave_first() {
        let c = PageCache::new(300);
        c.put(1, 0, page(100, 0));
        c.put(1, 1, page(100, 1));
        c.put(2, 0, page(100, 2));
        assert_eq!(c.usage(), (3, 300));
        // Using page (1, 0) makes (1, 1) the oldest.
        assert_eq!(c.get(1, 0).unwrap()[0], 0);
        c.put(2, 1, page(150, 3));
        assert!(c.get(1, 1).is_none());
        assert!(c.get(2, 0).is_none());
        assert_eq!(c.get(1, 0).unwrap().len(), 100);
        assert_eq!(c.get(2, 1).unwrap()[0], 3);
        assert_eq!(c.usage(), (2, 250));
    }

    #[test]
    fn a_segment_takes_its_pages_with_it() {
        let c = PageCache::new(1000);
        c.put(7, 0, page(10, 0));
        c.put(7, 3, page(20, 0));
        c.put(8, 0, page(30, 0));
        c.forget(7);
        assert_eq!(c.usage(), (1, 30));
        assert!(c.get(7, 3).is_none());
        // Putting a page again replaces it.
        c.put(8, 0, page(5, 9));
        assert_eq!(c.usage(), (1, 5));
    }

    #[test]
    fn a_zero_budget_or_an_oversized_page_keeps_nothing() {
        let c = PageCache::new(0);
        c.put(1, 0, page(1, 0));
        assert!(c.get(1, 0).is_none());
        let c = PageCache::new(10);
        c.put(1, 0, page(11, 0));
        assert_eq!(c.usage(), (0, 0));
    }

    #[test]
    fn segment_numbers_are_not_reused() {
        let a = segment_number();
        let b = segment_number();
        assert_ne!(a, b);
    }
}
