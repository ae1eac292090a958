//! The meta index: for an index whose leading key is the meta field (or a path below it), a map
//! from the normalised value at that path to the flushed buckets holding it, so an equality or
//! `$in` on that path finds a series' buckets without judging every bucket's meta.
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

use crate::db::{BucketLoc, IdKey};
use crate::query::filter::{split_path, Filter, Pred};
use crate::query::Plan;
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
    by_key: HashMap<Key, Vec<u32>>,
    /// Buckets returned for every lookup (arrays or decimals at the path).
    always: Vec<u32>,
}

/// A segment's map for one indexed path, with the segment it was built from (to recognise a
/// different segment under a reused id).
type Slot = (Weak<Segment>, Arc<SegKeys>);

/// Per-segment meta maps, built on demand.
#[derive(Default)]
pub(crate) struct MetaCache {
    maps: Mutex<HashMap<(String, u64), Slot>>,
}

impl std::fmt::Debug for MetaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaCache")
            .field("maps", &self.maps.lock().len())
            .finish()
    }
}

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

/// The key of a value without arrays or decimals.
fn key_of(v: &Bson) -> Key {
    let mut d = Document::new();
    d.insert("", normalise(v));
    let mut out = Vec::new();
    // A document built from BSON values always serialises.
    let _ = d.to_writer(&mut out);
    out
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
    for (i, b) in seg.buckets().iter().enumerate() {
        match value_at(seg.meta_of(b), path) {
            At::Missing => {}
            At::Always => k.always.push(i as u32),
            At::Value(v) => k.by_key.entry(key_of(v)).or_default().push(i as u32),
        }
    }
    k
}

/// Values an equality or `$in` conjunct on the meta path `path` requires, when the index can
/// answer it: values that are null, arrays, regexes or decimals are left to a full scan.
fn wanted(f: &Filter, meta_field: &str, path: &str) -> Option<Vec<Key>> {
    let Filter::Field { path: p, pred } = f else {
        return None;
    };
    let (head, rest) = split_path(p);
    if head != meta_field || rest.unwrap_or("") != path {
        return None;
    }
    let usable = |v: &Bson| {
        !matches!(
            v,
            Bson::Null | Bson::Undefined | Bson::RegularExpression(_) | Bson::MinKey | Bson::MaxKey
        ) && !has_array_or_decimal(v)
    };
    let from_pred = |pred: &Pred| match pred {
        Pred::Eq(v) if usable(v) => Some(vec![key_of(v)]),
        Pred::In(vs) if vs.iter().all(usable) => Some(vs.iter().map(key_of).collect()),
        _ => None,
    };
    match pred {
        Pred::All(ps) => ps.iter().find_map(from_pred),
        p => from_pred(p),
    }
}

/// Flushed buckets a meta index yields for `plan`, in `_id` index order, with the name of the
/// index used; `None` when no index applies (the read then walks the `_id` index).
pub(crate) fn candidates(
    cache: &MetaCache,
    indexes: &[crate::index::IndexDef],
    opts: &crate::options::TimeseriesOptions,
    segments: &BTreeMap<u64, Arc<Segment>>,
    plan: &Plan,
) -> Option<(String, Vec<(IdKey, BucketLoc)>)> {
    let meta_field = opts.get_meta_field()?;
    let (name, path, keys) = indexes.iter().find_map(|ix| {
        let path = ix.meta_path(opts)?;
        let keys = plan
            .meta_conjuncts
            .iter()
            .find_map(|c| wanted(c, meta_field, &path))?;
        Some((ix.name.clone(), path, keys))
    })?;
    let mut out = Vec::new();
    let mut maps = cache.maps.lock();
    for (&sid, seg) in segments {
        let slot = maps.get(&(path.clone(), sid));
        let sk = match slot {
            Some((w, k)) if std::ptr::eq(w.as_ptr(), Arc::as_ptr(seg)) => k.clone(),
            _ => {
                let k = Arc::new(build(seg, &path));
                maps.insert((path.clone(), sid), (Arc::downgrade(seg), k.clone()));
                k
            }
        };
        let mut idx: Vec<u32> = keys
            .iter()
            .filter_map(|k| sk.by_key.get(k))
            .flatten()
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
    if maps.len() > 2 * segments.len() * indexes.len().max(1) + 16 {
        maps.retain(|(p, sid), (w, _)| {
            w.strong_count() > 0
                && segments.contains_key(sid)
                && indexes
                    .iter()
                    .any(|ix| ix.meta_path(opts).as_deref() == Some(p))
        });
    }
    out.sort_unstable_by_key(|e| e.0);
    Some((name, out))
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
