//! Meta projections: for a set of top-level fields of the meta value, a dense number per meta
//! reference of a segment such that references with equal numbers hold equal values (same
//! types, same bytes) in those fields.
//!
//! A decision that reads only some meta fields — a filter on `tags.region`, the meta part of a
//! group key on `tags.region` — then costs one evaluation per distinct value of those fields
//! instead of one per distinct meta value. That matters when most series hold only a few
//! buckets (tens of thousands of meta values, say, but a few hundred values of the field a
//! filter reads). Segments are immutable, so a projection is built once per set of fields and
//! kept with the open segment.

use super::format::{put_value, ValueRefs};
use super::BucketSummary;
use bson::Bson;

/// Which part of the meta value a decision reads.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MetaFields {
    /// The whole value (a path that is the meta field itself, or anything not split by field).
    Whole,
    /// These top-level fields of a document meta value, sorted and without duplicates.
    Fields(Vec<String>),
}

impl MetaFields {
    /// The fields read by paths relative to the meta value (`""` for the value itself,
    /// `"a.b"` reads field `a`).
    pub fn of_paths<'a>(paths: impl IntoIterator<Item = &'a str>) -> MetaFields {
        let mut fields = Vec::new();
        for p in paths {
            let head = p.split('.').next().unwrap_or_default();
            if head.is_empty() {
                return MetaFields::Whole;
            }
            fields.push(head.to_string());
        }
        fields.sort_unstable();
        fields.dedup();
        MetaFields::Fields(fields)
    }
}

/// A number per meta reference of one segment; see the module documentation.
#[derive(Debug, Default)]
pub struct MetaProjection {
    /// By meta reference; references no bucket uses keep `u32::MAX`.
    ids: Vec<u32>,
    distinct: u32,
    /// By number, for a projection on fields: the meta value cut down to those fields (`None`
    /// for buckets without a meta value). Judging these small values, built together, costs
    /// a fraction of judging the buckets' full meta documents, which lie scattered over
    /// memory (such as ten tags per series, one bucket per series in a segment).
    values: Vec<Option<Bson>>,
    /// By number: where its exact encoding lies in `keys`, `None` for a value the encoder
    /// refused. Equal encodings mean equal projected values in any segment, so decisions can
    /// be shared across segments (a series has buckets in many).
    key_spans: Vec<Option<(u32, u32)>>,
    keys: Vec<u8>,
}

impl MetaProjection {
    /// Numbers the meta references of `buckets` by their values in `fields`; reference `k > 0`
    /// is `metas[k - 1]`.
    pub(crate) fn build(
        buckets: &[BucketSummary],
        metas: &[Bson],
        fields: &MetaFields,
    ) -> MetaProjection {
        let mut ids: Vec<u32> = Vec::new();
        let mut seen: foldhash::HashMap<Vec<u8>, u32> = Default::default();
        let mut distinct = 0u32;
        let mut values = Vec::new();
        let (mut keys, mut key_spans) = (Vec::new(), Vec::new());
        let mut key = Vec::new();
        for b in buckets {
            let r = b.meta_ref() as usize;
            if ids.get(r).is_some_and(|&id| id != u32::MAX) {
                continue;
            }
            if ids.len() <= r {
                ids.resize(r + 1, u32::MAX);
            }
            key.clear();
            let meta = r.checked_sub(1).and_then(|k| metas.get(k));
            let encoded = encode(meta, fields, &mut key);
            let (id, new) = if encoded {
                let next = distinct;
                let id = *seen.entry(key.clone()).or_insert(next);
                (id, id == next)
            } else {
                // A value the encoder refuses shares its number with nothing.
                (distinct, true)
            };
            if new {
                distinct += 1;
                let start = u32::try_from(keys.len()).ok();
                if encoded {
                    keys.extend_from_slice(&key);
                }
                let end = u32::try_from(keys.len()).ok();
                key_spans.push(match (encoded, start, end) {
                    (true, Some(s), Some(e)) => Some((s, e)),
                    _ => None,
                });
                if let MetaFields::Fields(fs) = fields {
                    values.push(cut(meta, fs));
                }
            }
            if let Some(slot) = ids.get_mut(r) {
                *slot = id;
            }
        }
        MetaProjection {
            ids,
            distinct,
            values,
            key_spans,
            keys,
        }
    }

    /// The number of meta reference `meta_ref` (`u32::MAX` for a reference no bucket uses).
    pub fn id(&self, meta_ref: u32) -> u32 {
        self.ids.get(meta_ref as usize).copied().unwrap_or(u32::MAX)
    }

    /// How many distinct numbers there are.
    pub fn distinct(&self) -> u32 {
        self.distinct
    }

    /// The exact encoding of number `id`'s projected value: equal in two segments' projections
    /// on the same fields exactly when the values are. `None` for a value that could not be
    /// encoded (it equals no other) or a number out of range.
    pub fn key(&self, id: u32) -> Option<&[u8]> {
        let (start, end) = (*self.key_spans.get(id as usize)?)?;
        self.keys.get(start as usize..end as usize)
    }

    /// For a projection on fields, the meta value of number `id` cut down to them: paths
    /// into those fields read the same from it as from the full value. `None` for a
    /// projection of whole values (use the bucket's own), or a number out of range.
    pub fn value(&self, id: u32) -> Option<Option<&Bson>> {
        self.values.get(id as usize).map(Option::as_ref)
    }
}

/// `meta` with only the top-level fields `fs` of a document; any other value whole.
fn cut(meta: Option<&Bson>, fs: &[String]) -> Option<Bson> {
    match meta? {
        Bson::Document(d) => {
            let mut out = bson::Document::new();
            for f in fs {
                if let Some(v) = d.get(f) {
                    out.insert(f.clone(), v.clone());
                }
            }
            Some(Bson::Document(out))
        }
        v => Some(v.clone()),
    }
}

/// Appends the exact encoding of the projected part of `meta`; false when a value cannot be
/// encoded.
fn encode(meta: Option<&Bson>, fields: &MetaFields, out: &mut Vec<u8>) -> bool {
    let refs = ValueRefs::default();
    match (meta, fields) {
        (None, _) => {
            out.push(0);
            true
        }
        (Some(Bson::Document(d)), MetaFields::Fields(fs)) => {
            out.push(1);
            for f in fs {
                match d.get(f) {
                    None => out.push(0),
                    Some(v) => {
                        out.push(1);
                        if put_value(out, v, &refs).is_err() {
                            return false;
                        }
                    }
                }
            }
            true
        }
        // Not split by field: the whole value (a scalar meta value has no fields, and every
        // path below it reads nothing, but its identity is cheap to keep exact).
        (Some(v), _) => {
            out.push(2);
            put_value(out, v, &refs).is_ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_come_from_path_heads() {
        assert_eq!(
            MetaFields::of_paths(["b.x", "a", "b"]),
            MetaFields::Fields(vec!["a".into(), "b".into()])
        );
        assert_eq!(MetaFields::of_paths(["a", ""]), MetaFields::Whole);
        assert_eq!(MetaFields::of_paths([]), MetaFields::Fields(vec![]));
    }

    #[test]
    fn encodings_tell_types_and_absence_apart() {
        let f = MetaFields::Fields(vec!["a".into()]);
        let enc = |m: Option<Bson>| {
            let mut out = Vec::new();
            assert!(encode(m.as_ref(), &f, &mut out));
            out
        };
        let d = |v: Bson| Some(Bson::Document(bson::doc! {"a": v, "z": 1}));
        assert_eq!(
            enc(d(Bson::Int32(1))),
            enc(Some(Bson::Document(bson::doc! {"a": 1, "z": 2})))
        );
        assert_ne!(enc(d(Bson::Int32(1))), enc(d(Bson::Int64(1))));
        assert_ne!(enc(d(Bson::Int32(1))), enc(d(Bson::Double(1.0))));
        assert_ne!(enc(d(Bson::Null)), enc(Some(Bson::Document(bson::doc! {}))));
        assert_ne!(enc(None), enc(Some(Bson::Document(bson::doc! {}))));
        assert_ne!(enc(Some(Bson::Int32(1))), enc(Some(Bson::Int32(2))));
    }
}
