//! Generated `_id`s: ObjectIds laid out as MongoDB's drivers make them (4-byte seconds,
//! 5 bytes unique to the process, a 3-byte counter), with the counter values of a batch taken
//! as one block.
//!
//! Why not `ObjectId::new()` per document: with several inserting threads each id takes the
//! next value of one shared counter, so the ids of a series' measurements interleave with
//! other threads' and their deltas turn irregular, which the `_id` column then pays for in
//! bytes. A block per batch keeps the ids of each batch consecutive: a series that has one
//! measurement per batch gets ids that advance by a steady step, which delta-of-delta coding
//! stores in almost nothing.

use bson::oid::ObjectId;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The process-unique bytes and the counter, seeded from the `bson` crate's own random
/// ObjectId so that two processes do not share them. The process bytes are that ObjectId's
/// with some bits flipped: `ObjectId::new()` keeps counting from the same counter value in
/// this process (an application may use it for its own `_id`s), and with equal process bytes
/// the two counters would hand out equal ids within the same second.
fn state() -> &'static ([u8; 5], AtomicU32) {
    static STATE: OnceLock<([u8; 5], AtomicU32)> = OnceLock::new();
    STATE.get_or_init(|| {
        let b = ObjectId::new().bytes();
        let mut process = [0u8; 5];
        for (p, (x, flip)) in process.iter_mut().zip(b[4..9].iter().zip(PROCESS_FLIP)) {
            *p = x ^ flip;
        }
        let counter = u32::from_be_bytes([0, b[9], b[10], b[11]]);
        (process, AtomicU32::new(counter))
    })
}

/// XORed into the `bson` crate's process bytes (any non-zero value keeps the two apart).
const PROCESS_FLIP: [u8; 5] = [0x74, 0x73, 0x62, 0x6b, 0x74];

/// `_id`s for one batch: up to the reserved number of consecutive counter values.
pub struct IdBlock {
    secs: [u8; 4],
    next: u32,
}

impl IdBlock {
    /// Reserves `n` counter values (one atomic step for the whole batch).
    pub fn reserve(n: usize) -> IdBlock {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as u32);
        let n = u32::try_from(n).unwrap_or(u32::MAX);
        IdBlock {
            secs: secs.to_be_bytes(),
            next: state().1.fetch_add(n, Ordering::Relaxed),
        }
    }

    /// The next id of the block. The counter wraps at 2^24 as MongoDB's does; ids stay unique
    /// unless one process generates more than 16,777,216 within one second.
    pub fn next_id(&mut self) -> ObjectId {
        let mut b = [0u8; 12];
        b[..4].copy_from_slice(&self.secs);
        b[4..9].copy_from_slice(&state().0);
        b[9..].copy_from_slice(&self.next.to_be_bytes()[1..]);
        self.next = self.next.wrapping_add(1);
        ObjectId::from_bytes(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn blocks_are_consecutive_and_unique_across_threads() {
        let blocks: Vec<Vec<ObjectId>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        (0..50)
                            .flat_map(|_| {
                                let mut b = IdBlock::reserve(100);
                                (0..100).map(move |_| b.next_id())
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let all: HashSet<ObjectId> = blocks.iter().flatten().copied().collect();
        assert_eq!(all.len(), 4 * 50 * 100, "every id is unique");
        let counter =
            |o: &ObjectId| u32::from_be_bytes([0, o.bytes()[9], o.bytes()[10], o.bytes()[11]]);
        for ids in &blocks {
            for chunk in ids.chunks(100) {
                for w in chunk.windows(2) {
                    assert_eq!(counter(&w[1]), (counter(&w[0]) + 1) & 0xFF_FFFF);
                    assert_eq!(w[0].bytes()[4..9], w[1].bytes()[4..9]);
                }
            }
        }
        // Never the process bytes of `ObjectId::new()`, whose counter runs alongside ours.
        let theirs = ObjectId::new().bytes();
        assert_ne!(theirs[4..9], blocks[0][0].bytes()[4..9]);
        // The time prefix is now, as MongoDB's is.
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let t = i64::from(u32::from_be_bytes(
            blocks[0][0].bytes()[..4].try_into().unwrap(),
        ));
        assert!((now - t).abs() <= 5);
    }
}
