//! A two-level cache in front of the group table for keys computed from a bucket's meta
//! value and the bins of its times (`{host: "$tags.hostname", t: {$dateTrunc: ...}}`).
//!
//! The columnar path looks a key up once per bucket and time bin. Encoding the whole key and
//! probing a table of every group each time is the expensive part when there are many groups;
//! here the meta-dependent part is encoded once per distinct meta value (the key with its time
//! bytes zeroed) and numbered, and (part number, bin starts) finds the group.

use crate::query::aggregate::bins::ByNumber;
use crate::query::expr::{Expr, Row};
use crate::query::aggregate::table::key_template;
use crate::error::Result;
use crate::segment::MetaProjection;
use bson::Bson;
use std::sync::Arc;

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

/// Slots (a power of two) of the direct-mapped cache in front of [`KeyCache`]'s table of
/// groups.
const RECENT_SLOTS: usize = 1 << 12;

/// A slot of the direct-mapped cache: a group and its (part, bin starts); `part == u32::MAX`
/// when empty.
#[derive(Clone, Copy)]
struct Recent {
    part: u32,
    group: u32,
    starts: Starts,
}

const EMPTY: Recent = Recent {
    part: u32::MAX,
    group: 0,
    starts: [0, 0],
};

/// The direct-mapped slot of (part, starts): a multiplicative hash, top bits.
fn recent_slot(part: u32, s: &Starts) -> usize {
    let h = (s[0] as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (s[1] as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F)
        ^ u64::from(part).wrapping_mul(0x1656_67B1_9E37_79F9);
    (h >> (64 - RECENT_SLOTS.trailing_zeros())) as usize
}

/// Most slots of [`KeyCache::numbered`] over all parts (16 MiB).
const NUMBERED_ROOM: usize = 1 << 22;

/// Parts numbered in [`KeyCache::numbered`]; parts after them keep their bins in the map.
const NUMBERED_PARTS: usize = 1 << 18;

/// What a part knows of its keys: the encoding with the times zeroed, where the times go, and
/// the `_id` value of one of its keys (whose times are replaced for another).
struct Template {
    key: Box<[u8]>,
    at: Vec<usize>,
    id: Bson,
    /// `id` takes bin starts for its time leaves (the number in `at`): whether it does
    /// depends on the shapes of the key and the value only, not on the starts.
    builds: bool,
}

/// Groups by (meta-dependent part of the key, bin starts).
#[derive(Default)]
pub struct KeyCache {
    parts: foldhash::HashMap<Box<[u8]>, u32>,
    /// By part, from part 1.
    templates: Vec<Template>,
    /// Parts by where a bucket's meta value came from (see [`KeyCache::remembered`]): per
    /// source, by index, `u32::MAX` when unknown.
    by_source: foldhash::HashMap<usize, Vec<u32>>,
    /// Groups by (part, bin starts) in one table: one map per part scattered small tables
    /// over the heap, and a probe was a cache miss more.
    bins: foldhash::HashMap<(u32, Starts), u32>,
    /// A direct-mapped cache in front of `bins` (allocated on first use): a bucket's runs
    /// look up one group per time bin, and the few bins a query touches at a time stay in
    /// it, where a probe of `bins` was a branchy search of a table of every group.
    recent: Vec<Recent>,
    /// Groups by part and bin number, when the key has one time leaf whose bins have one
    /// width (see [`KeyCache::number_bins`]): in front of `bins`, and in its place while
    /// room lasts. The groups of one part over consecutive bins lie side by side, where
    /// `bins` scattered them over a table of every group that did not fit in a cache.
    numbered: Vec<ByNumber>,
    /// `(width, origin)` of the bins numbered in `numbered`.
    numbering: Option<(i64, i64)>,
    /// Slots `numbered` may still add.
    numbered_room: usize,
    /// Meta projections by source (see [`KeyCache::projected`]).
    projections: foldhash::HashMap<usize, Arc<MetaProjection>>,
    /// Groups of a key that is one typed column, by the value's type and bits (see
    /// [`crate::query::columns::Col::typed_bits`]): numerically equal values of two types
    /// are two entries of one group.
    by_value: ValueIds,
    /// Parts handed out so far (part 0 is the key that does not read meta).
    parts_made: u32,
    buf: Vec<u8>,
    at: Vec<usize>,
}

/// Groups by a typed value's (type, bits): open addressing with linear probing in one array.
/// A key of one measurement field looks a group up for nearly every row, and a general hash
/// map's probe cost more than the rest of the row's work.
///
/// Integers of one type near the first one seen (status codes, percentages, small counts)
/// are found by their offset in a direct table instead, without a hash or a probe.
#[derive(Default)]
struct ValueIds {
    /// `(bits, type, group)`; type 0 is an empty slot (typed values have types 1 to 4).
    slots: Vec<(u64, u8, u32)>,
    len: usize,
    /// Groups of the integers `base..base + DIRECT` of type `direct_ty`, `u32::MAX` where
    /// unknown; empty until an integer comes.
    direct: Vec<u32>,
    direct_ty: u8,
    base: u64,
}

/// Entries of [`ValueIds::direct`]: 16 KiB, which stays in the first-level cache.
const DIRECT: usize = 4096;

impl ValueIds {
    /// The place of `v` in the direct table, when it has one.
    #[inline]
    fn direct_at(&self, (ty, bits): (u8, u64)) -> Option<usize> {
        let at = bits.wrapping_sub(self.base) as usize;
        (ty == self.direct_ty && at < self.direct.len()).then_some(at)
    }

    #[inline]
    fn home(&self, (ty, bits): (u8, u64)) -> usize {
        // Fibonacci hashing: the high bits of the product spread values that differ only
        // in their low bits (consecutive integers, doubles with one exponent).
        let h = (bits ^ u64::from(ty).rotate_right(8)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        (h >> 32) as usize & (self.slots.len().wrapping_sub(1))
    }

    #[inline]
    fn get(&self, v: (u8, u64)) -> Option<u32> {
        if let Some(at) = self.direct_at(v) {
            return self.direct.get(at).copied().filter(|&g| g != u32::MAX);
        }
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut at = self.home(v);
        loop {
            let &(bits, ty, g) = self.slots.get(at)?;
            if ty == 0 {
                return None;
            }
            if (ty, bits) == v {
                return Some(g);
            }
            at = (at + 1) & mask;
        }
    }

    fn insert(&mut self, v: (u8, u64), g: u32) {
        // Int32 and Int64 (types 1 and 2): the table centres on the first one.
        if self.direct.is_empty() && matches!(v.0, 1 | 2) {
            self.direct = vec![u32::MAX; DIRECT];
            self.direct_ty = v.0;
            self.base = v.1.wrapping_sub(DIRECT as u64 / 2);
        }
        if let Some(at) = self.direct_at(v) {
            if let Some(slot) = self.direct.get_mut(at) {
                *slot = g;
            }
            return;
        }
        // At most half full, so that a probe ends soon at an empty slot.
        if (self.len + 1) * 2 > self.slots.len() {
            let room = (self.slots.len() * 2).max(64);
            let old = std::mem::replace(&mut self.slots, vec![(0, 0, 0); room]);
            self.len = 0;
            for (bits, ty, g) in old.into_iter().filter(|e| e.1 != 0) {
                self.insert((ty, bits), g);
            }
        }
        let mask = self.slots.len() - 1;
        let mut at = self.home(v);
        while let Some(slot) = self.slots.get_mut(at) {
            if slot.1 == 0 || (slot.1, slot.0) == v {
                if slot.1 == 0 {
                    self.len += 1;
                }
                *slot = (v.1, v.0, g);
                return;
            }
            at = (at + 1) & mask;
        }
    }
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
        let id = e.eval(row)?.unwrap_or(Bson::Null);
        let builds = {
            let zeros = vec![0; self.at.len()];
            let mut probe = id.clone();
            let mut next = zeros.iter();
            set_leaves(e, &mut probe, time_field, &mut next) && next.next().is_none()
        };
        self.templates.push(Template {
            key: self.buf.as_slice().into(),
            at: self.at.clone(),
            id,
            builds,
        });
        Ok(Some(p))
    }

    /// True when [`KeyCache::id_value`] builds the `_id` of `part` with `n` bin starts.
    pub fn builds_id(&self, part: u32, n: usize) -> bool {
        (part as usize)
            .checked_sub(1)
            .and_then(|i| self.templates.get(i))
            .is_some_and(|t| t.builds && t.at.len() == n)
    }

    /// Writes to `out` the encoding of the key of `part` whose time leaves fall in bins
    /// starting at `starts` (what [`crate::query::aggregate::table::GroupTable`] hashes), built without
    /// evaluating the key; false for part 0 or a key with another number of time leaves.
    pub fn key_bytes(&self, part: u32, starts: &[i64], out: &mut Vec<u8>) -> bool {
        let Some(t) = (part as usize)
            .checked_sub(1)
            .and_then(|i| self.templates.get(i))
        else {
            return false;
        };
        if t.at.len() != starts.len() {
            return false;
        }
        out.clear();
        out.extend_from_slice(&t.key);
        t.at.iter().zip(starts).all(|(&off, s)| {
            out.get_mut(off..off + 8)
                .map(|b| b.copy_from_slice(&s.to_le_bytes()))
                .is_some()
        })
    }

    /// The `_id` value of the key of `part` whose time leaves (in `e`) fall in bins starting
    /// at `starts`, from the part's template; `None` when `e` and the template disagree.
    pub fn id_value(&self, part: u32, e: &Expr, time_field: &str, starts: &[i64]) -> Option<Bson> {
        let t = self.templates.get((part as usize).checked_sub(1)?)?;
        let mut id = t.id.clone();
        let mut next = starts.iter();
        set_leaves(e, &mut id, time_field, &mut next).then_some(())?;
        next.next().is_none().then_some(id)
    }

    /// The part remembered for meta values from `source`: a caller's name for one meta
    /// value (such as a segment and its reference to the value), so that the key is encoded
    /// once per distinct value rather than once per bucket.
    pub fn remembered(&self, (source, i): (usize, u32)) -> Option<u32> {
        let p = *self.by_source.get(&source)?.get(i as usize)?;
        (p != u32::MAX).then_some(p)
    }

    /// The number of meta reference `meta_ref` of `source` in its projection on the fields
    /// the key reads (`make` builds the projection, once per source): sources' references
    /// with one number share the key's part.
    pub fn projected(
        &mut self,
        source: usize,
        meta_ref: u32,
        make: impl FnOnce() -> Arc<MetaProjection>,
    ) -> u32 {
        self.projections
            .entry(source)
            .or_insert_with(make)
            .id(meta_ref)
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

    /// The group of a key that is one typed column, by the value (see `by_value`).
    #[inline]
    pub fn by_value(&self, v: (u8, u64)) -> Option<u32> {
        self.by_value.get(v)
    }

    /// Remembers the group of a typed column's value.
    pub fn put_value(&mut self, v: (u8, u64), g: u32) {
        self.by_value.insert(v, g);
    }

    /// Numbers the bins of a key of one time leaf: bins `[origin + k * width, origin + (k +
    /// 1) * width)` are remembered by part and `k`.
    pub fn number_bins(&mut self, width: i64, origin: i64) {
        if width > 0 {
            self.numbering = Some((width, origin));
            self.numbered_room = NUMBERED_ROOM;
        }
    }

    /// The number of the bin starting at `starts`, when bins are numbered and it is one.
    #[inline]
    fn bin_number(&self, starts: &[i64]) -> Option<i64> {
        let ((width, origin), &[s]) = (self.numbering?, starts) else {
            return None;
        };
        let off = s.checked_sub(origin)?;
        (off % width == 0).then_some(off / width)
    }

    /// The group remembered for `part` and bin starts `starts`.
    pub fn get(&mut self, part: u32, starts: &[i64]) -> Option<u32> {
        if let Some(n) = self.bin_number(starts) {
            let held = self.numbered.get(part as usize).and_then(|p| p.get(n));
            return match held {
                Some(g) => Some(g),
                // Bins that did not fit are in the map.
                None if self.bins.is_empty() => None,
                None => starts_key(starts).and_then(|k| self.bins.get(&(part, k)).copied()),
            };
        }
        let k = starts_key(starts)?;
        let slot = recent_slot(part, &k);
        if let Some(r) = self.recent.get(slot) {
            if r.part == part && r.starts == k {
                return Some(r.group);
            }
        }
        let g = self.bins.get(&(part, k)).copied()?;
        self.keep_recent(slot, part, k, g);
        Some(g)
    }

    /// The group this cache remembers for `other`'s part `part` and bin starts `starts`: the
    /// part with the same key here, when there is one. `map` keeps, by `other`'s part, the
    /// part here (`u32::MAX`: not looked up yet; `0`: none), so that each is looked up once.
    pub fn get_other(
        &mut self,
        other: &KeyCache,
        part: u32,
        starts: &[i64],
        map: &mut Vec<u32>,
    ) -> Option<u32> {
        let i = part as usize;
        if map.len() <= i {
            map.resize(i + 1, u32::MAX);
        }
        let here = match map.get(i).copied() {
            Some(u32::MAX) => {
                let key = i.checked_sub(1).and_then(|t| other.templates.get(t));
                let p = key.and_then(|t| self.parts.get(&t.key).copied());
                let p = p.unwrap_or(0);
                if let Some(slot) = map.get_mut(i) {
                    *slot = p;
                }
                p
            }
            p => p.unwrap_or(0),
        };
        // Part 0 (keys that read no meta) is the same in every cache, but has no template
        // to compare.
        (here != 0).then(|| self.get(here, starts)).flatten()
    }

    /// Remembers group `g` for `part` and `starts`.
    pub fn put(&mut self, part: u32, starts: &[i64], g: u32) {
        if let Some(n) = self.bin_number(starts) {
            let p = part as usize;
            if self.numbered.len() <= p && p < NUMBERED_PARTS {
                self.numbered.resize_with(p + 1, ByNumber::default);
            }
            if let Some(bins) = self.numbered.get_mut(p) {
                // Dense enough, or the part's few bins far apart stay in the map.
                let span = 1024 + 16 * (bins.held() + 1);
                if bins.set(n, g, span, &mut self.numbered_room) {
                    return;
                }
            }
            if let Some(k) = starts_key(starts) {
                self.bins.insert((part, k), g);
            }
            return;
        }
        if let Some(k) = starts_key(starts) {
            self.bins.insert((part, k), g);
            self.keep_recent(recent_slot(part, &k), part, k, g);
        }
    }

    fn keep_recent(&mut self, slot: usize, part: u32, starts: Starts, group: u32) {
        if part == u32::MAX {
            return;
        }
        if self.recent.is_empty() {
            self.recent = vec![EMPTY; RECENT_SLOTS];
        }
        if let Some(r) = self.recent.get_mut(slot) {
            *r = Recent {
                part,
                group,
                starts,
            };
        }
    }
}

/// True when `e` is a use of the time field that the key encodes as a date.
fn is_leaf(e: &Expr, time_field: &str) -> bool {
    match e {
        Expr::Path(p) => p == time_field,
        Expr::DateTrunc(d) => matches!(&d.date, Expr::Path(p) if p == time_field),
        _ => false,
    }
}

fn has_leaf(e: &Expr, time_field: &str) -> bool {
    match e {
        Expr::Doc(fields) => fields.iter().any(|(_, e)| has_leaf(e, time_field)),
        Expr::Array(items) => items.iter().any(|e| has_leaf(e, time_field)),
        e => is_leaf(e, time_field),
    }
}

/// Replaces, in `v` (a value of `e`), the values of `e`'s time leaves by the next dates of
/// `starts`, in expression order; false when `v` does not have `e`'s shape.
fn set_leaves(
    e: &Expr,
    v: &mut Bson,
    time_field: &str,
    starts: &mut std::slice::Iter<'_, i64>,
) -> bool {
    if is_leaf(e, time_field) {
        return match starts.next() {
            Some(&s) => {
                *v = Bson::DateTime(bson::DateTime::from_millis(s));
                true
            }
            None => false,
        };
    }
    match (e, v) {
        (Expr::Doc(fields), Bson::Document(d)) => {
            fields.iter().all(|(name, sub)| match d.get_mut(name) {
                Some(x) => set_leaves(sub, x, time_field, starts),
                None => !has_leaf(sub, time_field),
            })
        }
        (Expr::Array(items), Bson::Array(a)) => {
            items.len() == a.len()
                && items
                    .iter()
                    .zip(a.iter_mut())
                    .all(|(sub, x)| set_leaves(sub, x, time_field, starts))
        }
        (e, _) => !has_leaf(e, time_field),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, Bson, DateTime};

    #[test]
    fn value_ids_find_what_a_map_finds() {
        let mut ids = ValueIds::default();
        let mut map = std::collections::HashMap::new();
        assert_eq!(ids.get((3, 0)), None);
        // Values that share their low or high bits, of every type, and one value twice.
        let mut x: u64 = 1;
        for i in 0..5000u64 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let v = match i % 4 {
                0 => (1, i),
                1 => (2, i << 40),
                2 => (3, (i as f64).to_bits()),
                _ => (4, x),
            };
            let g = (i % 777) as u32;
            ids.insert(v, g);
            map.insert(v, g);
        }
        ids.insert((1, 7), 9);
        map.insert((1, 7), 9);
        // Negative integers below the direct table's start, and within it.
        for (k, x) in [-5i64, -2047, -2048, -2049, 2047, 2048, i64::MIN].into_iter().enumerate() {
            ids.insert((1, x as u64), 5000 + k as u32);
            map.insert((1, x as u64), 5000 + k as u32);
        }
        for (&v, &g) in &map {
            assert_eq!(ids.get(v), Some(g), "{v:?}");
        }
        let direct = ids.direct.iter().filter(|&&g| g != u32::MAX).count();
        assert_eq!(ids.len + direct, map.len());
        for v in [(1, 1 << 40), (2, 1), (3, 0.5f64.to_bits()), (4, 0)] {
            assert_eq!(ids.get(v), map.get(&v).copied(), "{v:?}");
        }
    }

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
    fn templates_give_the_key_and_id_of_any_bins() {
        let e = Expr::parse(&Bson::Document(doc! {
            "h": "$m.h",
            "d": {"day": {"$dateTrunc": {"date": "$t", "unit": "day"}}, "raw": "$t"},
            "c": 3,
        }))
        .unwrap();
        let mut c = KeyCache::default();
        let first = doc! {"m": {"h": "a"}, "t": DateTime::from_millis(90_000_000)};
        let p = c.part(&e, &first, "t", true).unwrap().unwrap();
        let later = doc! {"m": {"h": "a"}, "t": DateTime::from_millis(200_000_123)};
        let starts = [172_800_000, 200_000_123];
        let mut want = Vec::new();
        let mut at = Vec::new();
        assert!(key_template(&e, &later, "t", &mut want, &mut at).unwrap());
        let mut got = Vec::new();
        assert!(c.key_bytes(p, &starts, &mut got));
        assert_eq!(got, want);
        assert_eq!(
            c.id_value(p, &e, "t", &starts),
            e.eval(&later).unwrap(),
            "the id is the evaluated key"
        );
        // The wrong number of bins, or part 0, is refused rather than guessed.
        assert!(!c.key_bytes(p, &starts[..1], &mut got));
        assert!(!c.key_bytes(0, &starts, &mut got));
        assert_eq!(c.id_value(p, &e, "t", &starts[..1]), None);
        assert_eq!(c.id_value(p, &e, "t", &[1, 2, 3]), None);
    }

    #[test]
    fn groups_survive_eviction_from_the_recent_slots() {
        let mut c = KeyCache::default();
        // More (part, bin) pairs than slots: every one is still found, most from `bins`.
        let n = RECENT_SLOTS as i64 * 3;
        for b in 0..n {
            c.put((b % 5) as u32, &[b * 60_000], b as u32);
        }
        for b in (0..n).rev() {
            assert_eq!(c.get((b % 5) as u32, &[b * 60_000]), Some(b as u32));
            assert_eq!(c.get((b % 5 + 1) as u32, &[b * 60_000, 1]), None);
        }
        c.put(2, &[7, 8], 9);
        assert_eq!(c.get(2, &[7, 8]), Some(9));
        assert_eq!(c.get(2, &[8, 7]), None);
        assert_eq!(c.get(2, &[7, 8, 9]), None, "three bins are never cached");
    }

    #[test]
    fn numbered_bins_find_every_group_in_any_order_and_at_any_distance() {
        let (width, origin) = (60_000, 7);
        let mut c = KeyCache::default();
        c.number_bins(width, origin);
        let start = |n: i64| origin + n * width;
        // Parts visited newest bin first, oldest first, and in a scatter; a part whose two
        // bins lie far apart, which stays in the map; starts that are no bin's start.
        let mut want = Vec::new();
        let mut put = |c: &mut KeyCache, part: u32, starts: &[i64]| {
            let g = want.len() as u32;
            c.put(part, starts, g);
            want.push((part, starts.to_vec(), g));
        };
        for n in (0..3000).rev() {
            put(&mut c, 1, &[start(n)]);
        }
        for n in 0..3000 {
            put(&mut c, 2, &[start(n - 1500)]);
        }
        for n in [5, -3, 400, 17, -900, 2] {
            put(&mut c, 3, &[start(n)]);
        }
        put(&mut c, 4, &[start(0)]);
        put(&mut c, 4, &[start(100_000)]);
        put(&mut c, 8, &[start(0)]);
        put(&mut c, 8, &[start(1 << 40)]);
        put(&mut c, 5, &[start(3) + 1]);
        put(&mut c, 5, &[start(3), start(4)]);
        put(&mut c, 1 << 20, &[start(9)]);
        // Bins past the end of time are still numbered.
        put(&mut c, 6, &[origin + (i64::MAX - origin) / width * width]);
        // A part with few bins far apart keeps them in the map, not in 100,000 slots.
        assert!(c.bins.contains_key(&(4, [start(100_000), 0])));
        assert!(c.bins.contains_key(&(8, [start(1 << 40), 0])));
        for (part, starts, g) in &want {
            assert_eq!(c.get(*part, starts), Some(*g), "{part} {starts:?}");
        }
        for (part, starts) in [
            (1, start(3000)),
            (2, start(-1501)),
            (3, start(6)),
            (4, start(1)),
        ] {
            assert_eq!(c.get(part, &[starts]), None);
        }
        assert_eq!(c.get(7, &[start(0)]), None);
        assert_eq!(c.get(5, &[start(3)]), None);
    }

    #[test]
    fn another_cache_s_parts_are_matched_by_key() {
        let e = Expr::parse(&Bson::Document(doc! {
            "h": "$m.h",
            "t": {"$dateTrunc": {"date": "$t", "unit": "minute"}},
        }))
        .unwrap();
        let row = |h: &str| doc! {"m": {"h": h}, "t": DateTime::from_millis(0)};
        let (mut a, mut b) = (KeyCache::default(), KeyCache::default());
        let a_x = a.part(&e, &row("x"), "t", true).unwrap().unwrap();
        let a_y = a.part(&e, &row("y"), "t", true).unwrap().unwrap();
        // `b` numbers its parts in another order, and has one `a` lacks.
        let b_z = b.part(&e, &row("z"), "t", true).unwrap().unwrap();
        let b_y = b.part(&e, &row("y"), "t", true).unwrap().unwrap();
        let b_x = b.part(&e, &row("x"), "t", true).unwrap().unwrap();
        a.put(a_x, &[60_000], 4);
        a.put(a_y, &[60_000], 5);
        let mut map = Vec::new();
        assert_eq!(a.get_other(&b, b_x, &[60_000], &mut map), Some(4));
        assert_eq!(a.get_other(&b, b_y, &[60_000], &mut map), Some(5));
        assert_eq!(a.get_other(&b, b_y, &[120_000], &mut map), None);
        assert_eq!(a.get_other(&b, b_z, &[60_000], &mut map), None);
        assert_eq!(a.get_other(&b, 0, &[60_000], &mut map), None);
        assert_eq!(a.get_other(&b, 9, &[60_000], &mut map), None);
    }

    #[test]
    fn numbered_bins_stop_growing_when_room_runs_out() {
        let mut c = KeyCache::default();
        c.number_bins(1, 0);
        c.numbered_room = 100;
        for n in 0..500 {
            c.put(1, &[n], n as u32);
        }
        assert_eq!(c.numbered_room, 0);
        assert_eq!(c.bins.len(), 400, "the bins past the room are in the map");
        for n in 0..500 {
            assert_eq!(c.get(1, &[n]), Some(n as u32));
        }
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
