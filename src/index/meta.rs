//! The meta index: for an index whose leading key is the meta field (or a path below it), a map
//! from the normalised value at that path to the flushed buckets holding it, so an equality or
//! `$in` on that path finds a series' buckets without judging every bucket's meta. The same
//! map serves a meta path that has no index once queries have asked for it twice (the meta
//! lookup; see [`candidates`]): only the decision to keep it differs.
//!
//! The map is kept per segment and built from the segment's bucket summaries the first time a
//! query needs it. Segments are immutable, so a segment's map never goes stale; a map whose
//! segment left the collection (dropped, rewritten) is never consulted again because lookups go
//! through the collection's live segments, and it is evicted. The index is therefore always
//! derived from the same state reads use, whoever adds or removes segments.
//!
//! The lookup returns a superset of the buckets that can match: values are normalised so that
//! everything MongoDB's equality calls equal gets one key (numbers by value, documents with
//! fields sorted), and a bucket whose value at the path holds an array (which equality may match
//! element-wise) or a decimal is returned for every lookup. The usual per-bucket verdict still
//! runs on what the index returns.

use super::id::{BucketLoc, IdKey};
use crate::segment::Segment;
use bson::{Bson, Document};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};

/// Normalised value at an indexed path, as bytes.
type Key = Vec<u8>;

/// One segment's map for one path.
#[derive(Debug, Default)]
struct SegKeys {
    /// Each key's place in `lists`.
    by_key: HashMap<Key, u32>,
    /// Buckets per key, ascending.
    lists: Vec<Vec<u32>>,
    /// Buckets returned for every lookup (arrays or decimals at the path).
    always: Vec<u32>,
}

impl SegKeys {
    fn get(&self, k: &[u8]) -> &[u32] {
        self.by_key
            .get(k)
            .and_then(|&i| self.lists.get(i as usize))
            .map_or(&[], Vec::as_slice)
    }
}

/// A segment's map for one indexed path, with the segment it was built from (to recognise a
/// different segment under a reused id).
type Slot = (Weak<Segment>, Arc<SegKeys>);

fn has_array_or_decimal(v: &Bson) -> bool {
    match v {
        Bson::Array(_) | Bson::Decimal128(_) => true,
        Bson::Document(d) => d.values().any(has_array_or_decimal),
        _ => false,
    }
}

fn normalise(v: &Bson) -> Bson {
    match v {
        Bson::Int32(i) => Bson::Int64(i64::from(*i)),
        Bson::Double(d)
            if d.fract() == 0.0
                && *d >= -9.223_372_036_854_776e18
                && *d < 9.223_372_036_854_776e18 =>
        {
            Bson::Int64(*d as i64)
        }
        Bson::Double(d) if d.is_nan() => Bson::Double(f64::NAN),
        Bson::Document(d) => {
            let mut fields: Vec<(&String, &Bson)> = d.iter().collect();
            fields.sort_by(|a, b| a.0.cmp(b.0));
            let mut out = Document::new();
            for (k, v) in fields {
                out.insert(k.clone(), normalise(v));
            }
            Bson::Document(out)
        }
        other => other.clone(),
    }
}

/// The key of a value without arrays or decimals. Strings and numbers, what meta paths mostly
/// hold, are written directly (a BSON type byte, then the value); anything else is a zero
/// byte followed by the normalised value serialised as a BSON document, so no two kinds of key
/// can collide.
fn key_of(v: &Bson) -> Key {
    let mut out = Vec::new();
    match normalise_number(v) {
        Some(Bson::Int64(i)) => {
            out.push(0x12);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Some(Bson::Double(d)) => {
            out.push(0x01);
            out.extend_from_slice(&d.to_bits().to_le_bytes());
        }
        _ => match v {
            Bson::String(s) => {
                out.push(0x02);
                out.extend_from_slice(s.as_bytes());
            }
            _ => {
                out.push(0);
                let mut d = Document::new();
                d.insert("", normalise(v));
                // A document built from BSON values always serialises.
                let _ = d.to_writer(&mut out);
            }
        },
    }
    out
}

/// A number as [`normalise`] writes it, or `None` for anything else.
fn normalise_number(v: &Bson) -> Option<Bson> {
    match v {
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) => Some(normalise(v)),
        _ => None,
    }
}

/// What a bucket's meta holds at `path` ("" for the whole value).
enum At<'a> {
    Missing,
    Value(&'a Bson),
    Always,
}

fn value_at<'a>(meta: Option<&'a Bson>, path: &str) -> At<'a> {
    let Some(mut v) = meta else {
        return At::Missing;
    };
    if !path.is_empty() {
        for part in path.split('.') {
            match v {
                Bson::Document(d) => match d.get(part) {
                    Some(x) => v = x,
                    None => return At::Missing,
                },
                Bson::Array(_) => return At::Always,
                _ => return At::Missing,
            }
        }
    }
    if has_array_or_decimal(v) {
        At::Always
    } else {
        At::Value(v)
    }
}

fn build(seg: &Segment, path: &str) -> SegKeys {
    let mut k = SegKeys::default();
    // A segment stores each distinct meta value once and its buckets refer to it: a value's
    // key is worked out once, however many buckets share it.
    const MISSING: Option<u32> = None;
    const ALWAYS: Option<u32> = Some(u32::MAX);
    let at: Vec<Option<u32>> = seg
        .metas()
        .iter()
        .map(|m| match value_at(Some(m), path) {
            At::Missing => MISSING,
            At::Always => ALWAYS,
            At::Value(v) => {
                let next = k.lists.len() as u32;
                let i = *k.by_key.entry(key_of(v)).or_insert(next);
                if i == next {
                    k.lists.push(Vec::new());
                }
                Some(i)
            }
        })
        .collect();
    for (i, b) in seg.buckets().iter().enumerate() {
        let slot = match b.meta_ref() {
            0 => MISSING,
            r => at.get(r as usize - 1).copied().flatten(),
        };
        match slot {
            None => {}
            Some(u32::MAX) => k.always.push(i as u32),
            Some(l) => {
                if let Some(list) = k.lists.get_mut(l as usize) {
                    list.push(i as u32);
                }
            }
        }
    }
    k
}

/// Whether the index can answer an equality with `v`: values that are null, arrays, regexes or
/// decimals are left to a full scan.
pub(crate) fn usable(v: &Bson) -> bool {
    !matches!(
        v,
        Bson::Null | Bson::Undefined | Bson::RegularExpression(_) | Bson::MinKey | Bson::MaxKey
    ) && !has_array_or_decimal(v)
}

/// What one conjunct of a filter asks of a meta path: that the value at `path` below the meta
/// field ("" for the meta field itself) equals one of `keys`.
#[derive(Debug, Clone)]
pub(crate) struct MetaWant {
    pub path: String,
    pub keys: Vec<Key>,
}

impl MetaWant {
    /// The want of an equality or `$in` over `values`, when every value is [`usable`].
    pub(crate) fn of<'a>(
        path: &str,
        values: impl IntoIterator<Item = &'a Bson>,
    ) -> Option<MetaWant> {
        let mut keys = Vec::new();
        for v in values {
            if !usable(v) {
                return None;
            }
            keys.push(key_of(v));
        }
        Some(MetaWant {
            path: path.to_string(),
            keys,
        })
    }
}

/// A meta path looked up without an index is mapped once it has been asked for this many
/// times: a one-off query would pay for building the maps (several times its planning) and
/// never use them again.
const AUTO_AFTER: u32 = 2;
/// Meta paths mapped without an index, at most: each holds a map per segment in memory.
const AUTO_PATHS: usize = 4;
/// Paths counted while not yet mapped, at most (queries on ever new paths must not grow it).
const ASKED_PATHS: usize = 64;
/// A lookup that yields more than this many buckets gives way to the `_id` walk when the time
/// range holds under a quarter as many: judging fewer buckets then beats sorting more.
const LARGE_LOOKUP: usize = 1024;

/// Per-segment meta maps, built on demand, and how often each unindexed meta path was asked.
#[derive(Default)]
pub(crate) struct MetaCache {
    state: Mutex<CacheState>,
}

#[derive(Default)]
struct CacheState {
    maps: HashMap<(String, u64), Slot>,
    /// Unindexed meta paths asked for, with their count; a path reaching [`AUTO_AFTER`] moves
    /// to `auto`.
    asked: HashMap<String, u32>,
    /// Unindexed meta paths that are mapped.
    auto: Vec<String>,
}

impl std::fmt::Debug for MetaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock();
        f.debug_struct("MetaCache")
            .field("maps", &st.maps.len())
            .field("auto", &st.auto)
            .finish()
    }
}

/// How flushed buckets were looked up by meta value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Through the user's index of this name.
    Index(String),
    /// Through the map of this meta path kept without an index.
    Auto(String),
}

/// Flushed buckets a meta lookup yields for `wants` (the meta conjuncts of a filter that an
/// equality lookup can answer, in the filter's order), in `_id` index order, with how they were
/// looked up; `None` when no lookup applies (the read then walks the `_id` index).
///
/// An index led by the meta field or a meta path answers an equality or `$in` on that path.
/// Without one, the same map is kept for a meta path that queries keep asking for (see
/// [`AUTO_AFTER`]), as time-series stores keep their tags indexed: finding one series among
/// thousands then costs a hash lookup per segment instead of a verdict per bucket.
/// `in_range` counts, up to a limit, the buckets the `_id` walk would judge instead.
pub(crate) fn candidates(
    cache: &MetaCache,
    indexes: &[crate::manifest::IndexDef],
    opts: &crate::options::TimeseriesOptions,
    segments: &BTreeMap<u64, Arc<Segment>>,
    wants: &[MetaWant],
    in_range: impl FnOnce(usize) -> usize,
) -> Option<(Lookup, Vec<(IdKey, BucketLoc)>)> {
    opts.get_meta_field()?;
    let mut st = cache.state.lock();
    let indexed = indexes.iter().find_map(|ix| {
        let path = ix.meta_path(opts)?;
        let keys = wants.iter().find(|w| w.path == path)?.keys.clone();
        Some((Lookup::Index(ix.name.clone()), path, keys))
    });
    let (how, path, keys) = match indexed {
        Some(found) => found,
        None => {
            let MetaWant { path, keys } = wants.first()?.clone();
            if !st.auto.contains(&path) {
                if st.auto.len() >= AUTO_PATHS {
                    return None;
                }
                if st.asked.len() >= ASKED_PATHS && !st.asked.contains_key(&path) {
                    st.asked.clear();
                }
                let n = st.asked.entry(path.clone()).or_insert(0);
                *n += 1;
                if *n < AUTO_AFTER {
                    return None;
                }
                st.asked.remove(&path);
                st.auto.push(path.clone());
            }
            (Lookup::Auto(path.clone()), path, keys)
        }
    };
    let mut out = Vec::new();
    for (&sid, seg) in segments {
        let slot = st.maps.get(&(path.clone(), sid));
        let sk = match slot {
            Some((w, k)) if std::ptr::eq(w.as_ptr(), Arc::as_ptr(seg)) => k.clone(),
            _ => {
                let k = Arc::new(build(seg, &path));
                st.maps
                    .insert((path.clone(), sid), (Arc::downgrade(seg), k.clone()));
                k
            }
        };
        let mut idx: Vec<u32> = keys
            .iter()
            .flat_map(|k| sk.get(k))
            .chain(sk.always.iter())
            .copied()
            .collect();
        idx.sort_unstable();
        idx.dedup();
        for i in idx {
            let Some(b) = seg.buckets().get(i as usize) else {
                continue;
            };
            let start = b.time_range().0;
            out.push((
                (start, b.id.bytes()),
                BucketLoc {
                    segment: sid,
                    index: i,
                },
            ));
        }
    }
    // Maps of segments that left the collection (or of dropped indexes) are never consulted
    // again; drop them once they could outnumber the live ones.
    let paths = indexes.len() + st.auto.len();
    if st.maps.len() > 2 * segments.len() * paths.max(1) + 16 {
        let CacheState { maps, auto, .. } = &mut *st;
        maps.retain(|(p, sid), (w, _)| {
            w.strong_count() > 0
                && segments.contains_key(sid)
                && (auto.contains(p)
                    || indexes
                        .iter()
                        .any(|ix| ix.meta_path(opts).as_deref() == Some(p)))
        });
    }
    drop(st);
    if out.len() > LARGE_LOOKUP && in_range(out.len() / 4 + 1) <= out.len() / 4 {
        return None;
    }
    out.sort_unstable_by_key(|e| e.0);
    Some((how, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn equal_values_share_a_key() {
        assert_eq!(key_of(&Bson::Int32(5)), key_of(&Bson::Int64(5)));
        assert_eq!(key_of(&Bson::Int32(5)), key_of(&Bson::Double(5.0)));
        assert_eq!(key_of(&Bson::Double(-0.0)), key_of(&Bson::Int32(0)));
        assert_ne!(key_of(&Bson::Double(5.5)), key_of(&Bson::Int32(5)));
        assert_ne!(key_of(&Bson::String("5".into())), key_of(&Bson::Int32(5)));
        assert_eq!(
            key_of(&Bson::Document(doc! {"a": 1, "b": 2.0})),
            key_of(&Bson::Document(doc! {"b": 2, "a": 1}))
        );
    }

    #[test]
    fn keys_of_different_kinds_differ() {
        let values = [
            Bson::String("5".into()),
            Bson::String(String::new()),
            Bson::String("\0\u{12}".into()),
            Bson::Int32(5),
            Bson::Double(5.5),
            Bson::Double(f64::INFINITY),
            Bson::Null,
            Bson::Boolean(true),
            Bson::Symbol("5".into()),
            Bson::Document(doc! {"": "5"}),
            Bson::DateTime(bson::DateTime::from_millis(5)),
        ];
        for (i, a) in values.iter().enumerate() {
            for (j, b) in values.iter().enumerate() {
                assert_eq!(key_of(a) == key_of(b), i == j, "{a:?} {b:?}");
            }
        }
        assert_eq!(
            key_of(&Bson::Double(f64::NAN)),
            key_of(&Bson::Double(-f64::NAN))
        );
        assert_eq!(
            key_of(&Bson::Int64(1 << 60)),
            key_of(&Bson::Double((1u64 << 60) as f64))
        );
    }

    #[test]
    fn paths_through_arrays_are_always_candidates() {
        let m = Bson::Document(doc! {"a": [{"b": 1}], "c": {"d": 2}});
        assert!(matches!(value_at(Some(&m), "a.b"), At::Always));
        assert!(matches!(value_at(Some(&m), "a"), At::Always));
        assert!(matches!(
            value_at(Some(&m), "c.d"),
            At::Value(Bson::Int32(2))
        ));
        assert!(matches!(value_at(Some(&m), "c.x"), At::Missing));
        assert!(matches!(value_at(Some(&m), ""), At::Always));
        assert!(matches!(value_at(None, ""), At::Missing));
    }
}
