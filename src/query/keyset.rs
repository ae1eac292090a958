//! A set of byte strings, numbered densely in order of arrival and kept in one arena: tens of
//! thousands of short keys (group keys, encoded meta values) cost a few allocations to build
//! and to drop instead of one each.

use std::hash::BuildHasher;

const NONE: u32 = u32::MAX;

/// Byte strings by number; see the module documentation.
#[derive(Default)]
pub(crate) struct KeySet {
    /// Key hash -> latest key with that hash; earlier ones chain through `next`.
    heads: foldhash::HashMap<u64, u32>,
    hasher: foldhash::fast::FixedState,
    next: Vec<u32>,
    /// Each key as a range of `bytes`.
    spans: Vec<(usize, usize)>,
    bytes: Vec<u8>,
}

impl KeySet {
    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// The hash [`KeySet::find`] and [`KeySet::insert_hashed`] take.
    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The number of `key`, if it is in the set, and its hash.
    pub fn find(&self, key: &[u8]) -> (u64, Option<u32>) {
        let h = self.hash(key);
        let mut k = self.heads.get(&h).copied().unwrap_or(NONE);
        while k != NONE {
            if self.get(k) == Some(key) {
                return (h, Some(k));
            }
            k = self.next.get(k as usize).copied().unwrap_or(NONE);
        }
        (h, None)
    }

    /// Adds `key`, whose hash is `h` and which is not in the set; returns its number.
    pub fn insert_hashed(&mut self, h: u64, key: &[u8]) -> u32 {
        let k = self.spans.len() as u32;
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        self.spans.push((start, self.bytes.len()));
        self.next.push(self.heads.insert(h, k).unwrap_or(NONE));
        k
    }

    /// Key number `k`.
    pub fn get(&self, k: u32) -> Option<&[u8]> {
        let &(a, b) = self.spans.get(k as usize)?;
        self.bytes.get(a..b)
    }

    /// Makes room for `n` more keys of `bytes` bytes in all.
    pub fn reserve(&mut self, n: usize, bytes: usize) {
        self.heads.reserve(n);
        self.next.reserve(n);
        self.spans.reserve(n);
        self.bytes.reserve(bytes);
    }

    /// Removes every key, keeping the room of the arena and the spans. Not the hash heads':
    /// a few keys spread over a table sized for tens of thousands miss the cache on every
    /// probe, where a table grown to the keys stays in it.
    pub fn clear(&mut self) {
        self.heads = Default::default();
        self.next.clear();
        self.spans.clear();
        self.bytes.clear();
    }

    /// Bytes the keys take (their bytes and their entries), not counting spare room.
    pub fn bytes_used(&self) -> usize {
        self.bytes.len()
            + self.spans.len()
                * (std::mem::size_of::<(usize, usize)>() + std::mem::size_of::<u32>() + 16)
    }

    /// Bytes of room held.
    pub fn room(&self) -> usize {
        self.next.capacity() * std::mem::size_of::<u32>()
            + self.spans.capacity() * std::mem::size_of::<(usize, usize)>()
            + self.bytes.capacity()
    }

    /// The keys in order of their numbers.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.len() as u32).filter_map(|k| self.get(k))
    }
}

#[cfg(test)]
// Tests may panic: a panic is how a test fails.
#[allow(clippy::unwrap_used, clippy::indexing_slicing, clippy::panic)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn intern(set: &mut KeySet, key: &[u8]) -> u32 {
        match set.find(key) {
            (_, Some(k)) => k,
            (h, None) => set.insert_hashed(h, key),
        }
    }

    proptest! {
        /// Keys get numbers in order of first arrival, equal keys one number, and read back.
        #[test]
        fn keys_are_numbered_in_order_of_arrival(
            keys in prop::collection::vec(prop::collection::vec(0u8..4, 0..4), 0..60),
        ) {
            let mut set = KeySet::default();
            let mut want: Vec<Vec<u8>> = Vec::new();
            for k in &keys {
                let n = intern(&mut set, k);
                let at = want.iter().position(|w| w == k).unwrap_or_else(|| {
                    want.push(k.clone());
                    want.len() - 1
                });
                prop_assert_eq!(n as usize, at);
            }
            prop_assert_eq!(set.len(), want.len());
            prop_assert_eq!(set.iter().collect::<Vec<_>>(), want.iter().map(Vec::as_slice).collect::<Vec<_>>());
            prop_assert_eq!(set.find(b"absent, longer than any").1, None);
        }
    }

    #[test]
    fn a_cleared_set_keeps_its_room_and_numbers_from_zero() {
        let mut set = KeySet::default();
        for k in 0..1000u32 {
            intern(&mut set, &k.to_le_bytes());
        }
        let room = set.room();
        set.clear();
        assert_eq!((set.len(), set.room()), (0, room));
        assert_eq!(set.find(&7u32.to_le_bytes()).1, None);
        assert_eq!(intern(&mut set, b"x"), 0);
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![b"x".as_slice()]);
    }

    #[test]
    fn keys_sharing_a_hash_are_told_apart() {
        let mut set = KeySet::default();
        let (a, b) = (set.insert_hashed(7, b"a"), set.insert_hashed(7, b"b"));
        // Found through the chain of hash 7 only when looked up by that hash.
        let chain = |set: &KeySet, key: &[u8]| {
            let mut k = set.heads.get(&7).copied().unwrap_or(NONE);
            while k != NONE && set.get(k) != Some(key) {
                k = set.next[k as usize];
            }
            (k != NONE).then_some(k)
        };
        assert_eq!(chain(&set, b"a"), Some(a));
        assert_eq!(chain(&set, b"b"), Some(b));
        assert_eq!(chain(&set, b"c"), None);
        assert_eq!(set.get(2), None);
    }
}
