//! A two-level cache in front of the group table for keys computed from a bucket's meta
//! value and the bins of its times (`{host: "$tags.hostname", t: {$dateTrunc: ...}}`).
//!
//! The columnar path looks a key up once per bucket and time bin. Encoding the whole key and
//! probing a table of every group each time is the expensive part when there are many groups;
//! here the meta-dependent part is encoded once per distinct meta value (the key with its time
//! bytes zeroed) and numbered, and (part number, bin starts) finds the group.

use super::expr::{Expr, Row};
use super::group::key_template;
use crate::error::Result;

/// Bin starts of up to two time leaves (keys with more are not cached).
type Starts = [i64; 2];

fn starts_key(starts: &[i64]) -> Option<Starts> {
    match *starts {
        [] => Some([0, 0]),
        [a] => Some([a, 0]),
        [a, b] => Some([a, b]),
        _ => None,
    }
}

/// Groups by (meta-dependent part of the key, bin starts).
#[derive(Default)]
pub struct KeyCache {
    parts: foldhash::HashMap<Box<[u8]>, u32>,
    /// Parts by where a bucket's meta value came from (see [`KeyCache::remembered`]): per
    /// source, by index, `u32::MAX` when unknown.
    by_source: foldhash::HashMap<usize, Vec<u32>>,
    /// Groups by (part, bin starts) in one table: one map per part scattered small tables
    /// over the heap, and a probe was a cache miss more.
    bins: foldhash::HashMap<(u32, Starts), u32>,
    /// Parts handed out so far (part 0 is the key that does not read meta).
    parts_made: u32,
    buf: Vec<u8>,
    at: Vec<usize>,
}

impl KeyCache {
    /// The part of key `e` on `row` that does not depend on `time_field` (`row` must hold a
    /// time); `None` when the key cannot be split so (some use of the time gave no date).
    /// A key that does not read the meta value has one part.
    pub fn part(
        &mut self,
        e: &Expr,
        row: &dyn Row,
        time_field: &str,
        reads_meta: bool,
    ) -> Result<Option<u32>> {
        if !reads_meta {
            return Ok(Some(0));
        }
        if !key_template(e, row, time_field, &mut self.buf, &mut self.at)? {
            return Ok(None);
        }
        for &off in &self.at {
            if let Some(b) = self.buf.get_mut(off..off + 8) {
                b.fill(0);
            }
        }
        if let Some(&p) = self.parts.get(self.buf.as_slice()) {
            return Ok(Some(p));
        }
        // Part 0 belongs to keys that do not read meta; parts start at 1.
        self.parts_made += 1;
        let p = self.parts_made;
        self.parts.insert(self.buf.as_slice().into(), p);
        Ok(Some(p))
    }

    /// The part remembered for meta values from `source`: a caller's name for one meta
    /// value (such as a segment and its reference to the value), so that the key is encoded
    /// once per distinct value rather than once per bucket.
    pub fn remembered(&self, (source, i): (usize, u32)) -> Option<u32> {
        let p = *self.by_source.get(&source)?.get(i as usize)?;
        (p != u32::MAX).then_some(p)
    }

    /// Remembers `part` for meta values from `source`.
    pub fn remember(&mut self, (source, i): (usize, u32), part: u32) {
        let parts = self.by_source.entry(source).or_default();
        let i = i as usize;
        if parts.len() <= i {
            parts.resize(i + 1, u32::MAX);
        }
        if let Some(p) = parts.get_mut(i) {
            *p = part;
        }
    }

    /// The group remembered for `part` and bin starts `starts`.
    pub fn get(&self, part: u32, starts: &[i64]) -> Option<u32> {
        self.bins.get(&(part, starts_key(starts)?)).copied()
    }

    /// Remembers group `g` for `part` and `starts`.
    pub fn put(&mut self, part: u32, starts: &[i64], g: u32) {
        if let Some(k) = starts_key(starts) {
            self.bins.insert((part, k), g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Bson, DateTime};

    #[test]
    fn parts_separate_meta_values_and_ignore_times() {
        let e = Expr::parse(&Bson::Document(doc! {
            "h": "$m.h",
            "t": {"$dateTrunc": {"date": "$t", "unit": "minute"}},
        }))
        .unwrap();
        let row = |h: &str, t: i64| doc! {"m": {"h": h}, "t": DateTime::from_millis(t)};
        let mut c = KeyCache::default();
        let a = c.part(&e, &row("a", 0), "t", true).unwrap().unwrap();
        let a2 = c
            .part(&e, &row("a", 3_600_000), "t", true)
            .unwrap()
            .unwrap();
        let b = c.part(&e, &row("b", 0), "t", true).unwrap().unwrap();
        assert_eq!(a, a2);
        assert_ne!(a, b);
        c.put(a, &[60_000], 7);
        assert_eq!(c.get(a, &[60_000]), Some(7));
        assert_eq!(c.get(b, &[60_000]), None);
        assert_eq!(
            c.part(&e, &doc! {"m": {"h": "a"}}, "t", true).unwrap(),
            None
        );
    }

    #[test]
    fn parts_are_remembered_per_source_and_index() {
        let mut c = KeyCache::default();
        assert_eq!(c.remembered((1, 3)), None);
        c.remember((1, 3), 7);
        c.remember((2, 0), 8);
        assert_eq!(c.remembered((1, 3)), Some(7));
        assert_eq!(c.remembered((1, 2)), None);
        assert_eq!(c.remembered((2, 0)), Some(8));
        assert_eq!(c.remembered((3, 0)), None);
    }
}
