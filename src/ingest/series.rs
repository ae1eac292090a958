//! Series keys: the identity of a series (collection-wide), derived from its meta value.
//!
//! Two meta values are one series exactly when they are equal after normalisation (fields of
//! embedded documents sorted by name; array order kept). The key is computed on the inserting
//! thread, with its hash, and documents of one series share one allocation of it, so the
//! catalog's lookup, on the single thread that applies batches, compares a pointer rather than
//! a few hundred bytes.

use crate::doc::meta::normalize;
use crate::doc::to_bson;
use bson::raw::RawBsonRef;
use bson::{Bson, Document};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// A series key: a type byte and bytes that are equal exactly when two meta values are equal
/// after normalisation, with its hash. Empty when the document has no meta field; a present
/// meta always yields a non-empty key, so it never collides with a missing one.
#[derive(Clone)]
pub struct SeriesKey {
    hash: u64,
    bytes: Arc<[u8]>,
}

impl SeriesKey {
    /// The key with these bytes.
    pub fn new(bytes: &[u8]) -> SeriesKey {
        SeriesKey {
            hash: foldhash::fast::FixedState::default().hash_one(bytes),
            bytes: Arc::from(bytes),
        }
    }

    /// The key of documents without a meta field.
    pub fn none() -> SeriesKey {
        static NONE: OnceLock<SeriesKey> = OnceLock::new();
        NONE.get_or_init(|| SeriesKey::new(&[])).clone()
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Length of the key in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True for the key of documents without a meta field.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl Hash for SeriesKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl PartialEq for SeriesKey {
    fn eq(&self, other: &SeriesKey) -> bool {
        Arc::ptr_eq(&self.bytes, &other.bytes)
            || (self.hash == other.hash && self.bytes == other.bytes)
    }
}

impl Eq for SeriesKey {}

impl std::fmt::Debug for SeriesKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SeriesKey({} bytes, {:016x})",
            self.bytes.len(),
            self.hash
        )
    }
}

/// Identifies the exact bytes of a document or array meta value: two values with the same
/// nonzero id are byte for byte the same (ids are unique across threads and never reused), so
/// the catalog can skip comparing them; zero means unknown.
pub type MetaId = u64;

fn next_meta_id() -> MetaId {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The series key of a meta value, with the [`MetaId`] of its bytes.
pub fn series_key(v: RawBsonRef<'_>) -> (SeriesKey, MetaId) {
    match v {
        RawBsonRef::Document(d) => nested_key(v, d.as_bytes()),
        RawBsonRef::Array(a) => nested_key(v, a.as_bytes()),
        _ => (SeriesKey::new(&scalar_key(v)), 0),
    }
}

/// The key bytes of a meta value that is neither a document nor an array.
fn scalar_key(v: RawBsonRef<'_>) -> Vec<u8> {
    let mut k = vec![1u8, v.element_type() as u8];
    match v {
        RawBsonRef::String(s) => k.extend_from_slice(s.as_bytes()),
        RawBsonRef::Int32(i) => k.extend_from_slice(&i.to_le_bytes()),
        RawBsonRef::Int64(i) => k.extend_from_slice(&i.to_le_bytes()),
        RawBsonRef::Double(f) => k.extend_from_slice(&f.to_le_bytes()),
        RawBsonRef::ObjectId(o) => k.extend_from_slice(&o.bytes()),
        RawBsonRef::Boolean(b) => k.push(u8::from(b)),
        RawBsonRef::DateTime(t) => k.extend_from_slice(&t.timestamp_millis().to_le_bytes()),
        RawBsonRef::Null | RawBsonRef::Undefined | RawBsonRef::MinKey | RawBsonRef::MaxKey => {}
        other => {
            let mut d = Document::new();
            d.insert("", to_bson(other));
            k.extend_from_slice(&d.to_vec().unwrap_or_default());
        }
    }
    k
}

fn raw_is_normalized(v: RawBsonRef<'_>) -> bool {
    match v {
        RawBsonRef::Document(d) => {
            let mut prev: Option<&str> = None;
            for e in d.iter() {
                let Ok((k, v)) = e else { return false };
                let k = k.as_str();
                if prev.is_some_and(|p| p.as_bytes() >= k.as_bytes()) || !raw_is_normalized(v) {
                    return false;
                }
                prev = Some(k);
            }
            true
        }
        RawBsonRef::Array(a) => a.into_iter().all(|e| e.is_ok_and(raw_is_normalized)),
        _ => true,
    }
}

/// Most series send their meta in the same field order every time; remembering the key of
/// recent raw meta values saves walking, normalising and re-encoding it per document.
const KEY_CACHE_ENTRIES: usize = 65_536;
/// Bytes of meta values the cache of one element type holds at most: meta values may be up
/// to 64 KiB each, so the entry count alone would let one inserting thread keep gigabytes.
const KEY_CACHE_BYTES: usize = 32 << 20;

/// Recent meta values and their keys, with the bytes of the values it holds.
type Cache = (foldhash::HashMap<Vec<u8>, (SeriesKey, MetaId)>, usize);

thread_local! {
    // One cache per element type: a document and an array can have the same bytes.
    static KEYS: std::cell::RefCell<[Cache; 2]> = std::cell::RefCell::new(Default::default());
}

/// The series key of a document or array meta value whose bytes are `raw`.
fn nested_key(v: RawBsonRef<'_>, raw: &[u8]) -> (SeriesKey, MetaId) {
    let which = usize::from(matches!(v, RawBsonRef::Array(_)));
    let hit = KEYS.with(|c| c.borrow().get(which).and_then(|(m, _)| m.get(raw)).cloned());
    if let Some(hit) = hit {
        return hit;
    }
    let mut k = vec![1u8, v.element_type() as u8];
    if raw_is_normalized(v) {
        k.extend_from_slice(raw);
    } else if !write_normalized(raw, which == 1, &mut k, 0) {
        k.truncate(2);
        k.extend_from_slice(&doc_bytes(&normalize(&to_bson(v))));
    }
    // The entry's bytes are `raw`, so its id names exactly these bytes.
    let key = (SeriesKey::new(&k), next_meta_id());
    KEYS.with(|c| {
        if let Some((m, bytes)) = c.borrow_mut().get_mut(which) {
            if m.len() >= KEY_CACHE_ENTRIES || *bytes + raw.len() > KEY_CACHE_BYTES {
                m.clear();
                *bytes = 0;
            }
            *bytes += raw.len();
            m.insert(raw.to_vec(), key.clone());
        }
    });
    key
}

/// Rows of a batch whose meta values [`series_key_at`] remembers, and the longest value it
/// remembers: at most 4 MiB per inserting thread.
const ROWS_REMEMBERED: usize = 4096;
const BYTES_REMEMBERED: usize = 1024;

/// A meta value's bytes, whether it is an array, and its key.
type Remembered = (Vec<u8>, bool, (SeriesKey, MetaId));

thread_local! {
    // The meta value of each row of the batches this thread prepared last, by row.
    static BY_ROW: std::cell::RefCell<Vec<Remembered>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`series_key`] for the meta value of row `row` of a batch. Applications tend to send the
/// same series in the same order batch after batch (all hosts at one time, then all at the
/// next), so the value is first compared with the one row `row` of this thread's last batch
/// had: when they are the same bytes the key is that row's, without hashing the value or
/// probing the cache of recent keys.
pub fn series_key_at(v: RawBsonRef<'_>, row: usize) -> (SeriesKey, MetaId) {
    let (raw, array) = match v {
        RawBsonRef::Document(d) => (d.as_bytes(), false),
        RawBsonRef::Array(a) => (a.as_bytes(), true),
        _ => return series_key(v),
    };
    if row >= ROWS_REMEMBERED || raw.len() > BYTES_REMEMBERED {
        return series_key(v);
    }
    let hit = BY_ROW.with(|m| {
        m.borrow()
            .get(row)
            .filter(|(bytes, was_array, _)| *was_array == array && bytes.as_slice() == raw)
            .map(|(_, _, key)| key.clone())
    });
    if let Some(key) = hit {
        return key;
    }
    let key = nested_key(v, raw);
    BY_ROW.with(|m| {
        let mut m = m.borrow_mut();
        if m.len() <= row {
            m.resize_with(row + 1, || (Vec::new(), false, (SeriesKey::none(), 0)));
        }
        if let Some(slot) = m.get_mut(row) {
            slot.0.clear();
            slot.0.extend_from_slice(raw);
            (slot.1, slot.2) = (array, key.clone());
        }
    });
    key
}

/// Nesting beyond which [`write_normalized`] leaves a value to the `Bson` path.
const RAW_NORMAL_DEPTH: usize = 32;

/// Appends the normal form of the document (or, with `array`, the array) whose bytes are
/// `raw` to `out`, straight from the bytes: the fields of every embedded document sorted by
/// name, array elements renumbered in order. The bytes are those [`doc_bytes`] gives for
/// [`normalize`] of the value, which defines the form; walking, sorting and re-encoding `Bson`
/// cost tens of thousands of instructions per meta value, once per series and inserting
/// thread. False, having written part of the form, for what this does not rewrite (names
/// repeated within a document, types other than the common scalars, deep nesting,
/// malformed bytes): the caller then takes the `Bson` path.
fn write_normalized(raw: &[u8], array: bool, out: &mut Vec<u8>, depth: usize) -> bool {
    use crate::doc::elements::{string_ok, utf8_ok, Elements};
    if depth > RAW_NORMAL_DEPTH {
        return false;
    }
    let mut elements = Elements::new(raw);
    let mut fields: Vec<_> = elements.by_ref().collect();
    if !elements.finished() || fields.iter().any(|e| !utf8_ok(e.name)) {
        return false;
    }
    if !array {
        // Stable, as `normalize` sorts; a repeated name becomes one field there.
        fields.sort_by(|a, b| a.name.cmp(b.name));
        if fields
            .windows(2)
            .any(|w| w.first().map(|e| e.name) == w.get(1).map(|e| e.name))
        {
            return false;
        }
    }
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    for (i, e) in fields.iter().enumerate() {
        out.push(e.kind);
        match array {
            true => out.extend_from_slice(i.to_string().as_bytes()),
            false => out.extend_from_slice(e.name),
        }
        out.push(0);
        let copied = match e.kind {
            0x03 => write_normalized(e.value, false, out, depth + 1),
            0x04 => write_normalized(e.value, true, out, depth + 1),
            0x02 => string_ok(e.value),
            0x08 => matches!(e.value, [0] | [1]),
            // Double, ObjectId, date, null, int32, timestamp, int64: `Bson` keeps their bytes.
            0x01 | 0x07 | 0x09 | 0x0A | 0x10 | 0x11 | 0x12 => true,
            _ => false,
        };
        if !copied {
            return false;
        }
        if !matches!(e.kind, 0x03 | 0x04) {
            out.extend_from_slice(e.value);
        }
    }
    out.push(0);
    let Ok(len) = i32::try_from(out.len() - start) else {
        return false;
    };
    match out.get_mut(start..start + 4) {
        Some(prefix) => prefix.copy_from_slice(&len.to_le_bytes()),
        None => return false,
    }
    true
}

fn doc_bytes(v: &Bson) -> Vec<u8> {
    let d = match v {
        Bson::Document(d) => d.clone(),
        Bson::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, x)| (i.to_string(), x.clone()))
            .collect(),
        _ => Document::new(),
    };
    d.to_vec().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, RawDocumentBuf};

    fn key_of(d: Document) -> (SeriesKey, MetaId) {
        let raw = RawDocumentBuf::try_from(&d).unwrap();
        let v = raw.get("m").unwrap().unwrap();
        series_key(v)
    }

    #[test]
    fn meta_ids_name_exact_bytes() {
        let (a, id_a) = key_of(doc! {"m": {"a": 1, "b": 2}});
        let raw = RawDocumentBuf::try_from(&doc! {"a": 1, "b": 2}).unwrap();
        assert_eq!(&a.as_bytes()[2..], raw.as_bytes());
        let (b, id_b) = key_of(doc! {"m": {"b": 2, "a": 1}});
        assert_eq!(a, b);
        assert_ne!(id_a, id_b);
        assert_ne!(id_a, 0);
        assert_eq!(key_of(doc! {"m": {"b": 2, "a": 1}}).1, id_b);
        // Another thread has its own cache, hence other ids for the same bytes.
        let there = std::thread::spawn(|| key_of(doc! {"m": {"b": 2, "a": 1}}).1);
        assert_ne!(there.join().unwrap(), id_b);
        assert_eq!(key_of(doc! {"m": "host"}).1, 0);
    }

    /// The normal form through `Bson`, which defines it.
    fn by_bson(v: RawBsonRef<'_>) -> Vec<u8> {
        doc_bytes(&normalize(&to_bson(v)))
    }

    /// The raw path's form of the value of field `m`, when it takes the value.
    fn by_raw(d: &Document) -> Option<Vec<u8>> {
        let raw = RawDocumentBuf::try_from(d).unwrap();
        let (bytes, array) = match raw.get("m").unwrap().unwrap() {
            RawBsonRef::Document(x) => (x.as_bytes().to_vec(), false),
            RawBsonRef::Array(x) => (x.as_bytes().to_vec(), true),
            _ => return None,
        };
        let mut out = Vec::new();
        write_normalized(&bytes, array, &mut out, 0).then_some(out)
    }

    #[test]
    fn raw_normal_forms_are_the_bson_ones() {
        let cases = [
            doc! {"m": {"hostname": "h1", "region": "eu", "arch": "x86", "rack": 3}},
            doc! {"m": {"b": {"y": 1.5, "x": null}, "a": [{"q": 1, "p": 2}, true, 7i64]}},
            doc! {"m": [{"b": 1, "a": 2}, "s", [3, {"d": 1, "c": 0}]]},
            doc! {"m": {}},
            doc! {"m": []},
        ];
        for d in &cases {
            let raw = RawDocumentBuf::try_from(d).unwrap();
            let want = by_bson(raw.get("m").unwrap().unwrap());
            assert_eq!(by_raw(d).as_ref(), Some(&want), "{d}");
        }
        // Types the raw path leaves to `Bson`.
        let bin = bson::Binary {
            subtype: bson::spec::BinarySubtype::Generic,
            bytes: vec![1, 2],
        };
        assert_eq!(by_raw(&doc! {"m": {"b": 1, "a": bin}}), None);
        assert_eq!(by_raw(&doc! {"m": {"a": bson::Bson::Undefined}}), None);
    }

    #[test]
    fn repeated_names_and_array_keys_go_through_bson() {
        // `{b: 1, a: 2, b: 3}` as raw bytes (a `Document` cannot hold the repeat).
        let mut d = vec![0u8; 4];
        for (k, v) in [(b'b', 1i32), (b'a', 2), (b'b', 3)] {
            d.extend_from_slice(&[0x10, k, 0]);
            d.extend_from_slice(&v.to_le_bytes());
        }
        d.push(0);
        let len = d.len() as i32;
        d[..4].copy_from_slice(&len.to_le_bytes());
        assert!(!write_normalized(&d, false, &mut Vec::new(), 0));
        // An array whose keys are not 0, 1, ...: renumbered, as `Bson` does.
        let mut a = vec![0u8; 4];
        for (k, v) in [(b'7', 5i32), (b'3', 6)] {
            a.extend_from_slice(&[0x10, k, 0]);
            a.extend_from_slice(&v.to_le_bytes());
        }
        a.push(0);
        let len = a.len() as i32;
        a[..4].copy_from_slice(&len.to_le_bytes());
        let mut out = Vec::new();
        assert!(write_normalized(&a, true, &mut out, 0));
        // The same array as the value of a document's field `m`, to read it through `bson`.
        let mut d = vec![0u8; 4];
        d.extend_from_slice(&[0x04, b'm', 0]);
        d.extend_from_slice(&a);
        d.push(0);
        let len = d.len() as i32;
        d[..4].copy_from_slice(&len.to_le_bytes());
        let doc = bson::RawDocument::from_bytes(&d).unwrap();
        assert_eq!(out, by_bson(doc.get("m").unwrap().unwrap()));
    }

    proptest::proptest! {
        #[test]
        fn raw_normal_forms_match_the_bson_path_on_any_meta(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
        ) {
            let mut inp = tsbucket_testkit::Input::new(&data);
            let m = match inp.u8() % 3 {
                0 => Bson::Document(tsbucket_testkit::values::document(&mut inp, 3)),
                1 => Bson::Array((0..inp.below(5)).map(|_| tsbucket_testkit::values::any(&mut inp, 3)).collect()),
                _ => tsbucket_testkit::values::any(&mut inp, 3),
            };
            let d = doc! {"m": m};
            let raw = RawDocumentBuf::try_from(&d).unwrap();
            let v = raw.get("m").unwrap().unwrap();
            if matches!(v, RawBsonRef::Document(_) | RawBsonRef::Array(_)) {
                if let Some(got) = by_raw(&d) {
                    proptest::prop_assert_eq!(got, by_bson(v));
                }
            }
        }
    }

    #[test]
    fn equal_bytes_are_equal_keys_without_sharing() {
        let a = SeriesKey::new(b"\x01\x02xyz");
        let b = SeriesKey::new(b"\x01\x02xyz");
        assert_eq!(a, b);
        assert_ne!(a, SeriesKey::new(b"\x01\x02xy"));
        assert_ne!(SeriesKey::none(), SeriesKey::new(b"\x01\x0a"));
        assert!(SeriesKey::none().is_empty());
    }

    proptest::proptest! {
        /// The key a row's remembered meta value gives is the key of the value it has now,
        /// whatever the rows before at that place held: the same bytes, others, the same bytes
        /// as an array instead of a document, values too long to remember.
        #[test]
        fn keys_by_row_are_the_keys_of_the_values(
            rows in proptest::collection::vec((0..4u8, 0..6usize), 1..40),
        ) {
            for (kind, row) in rows {
                let m = match kind {
                    0 => Bson::Document(doc! {"h": format!("x{row}"), "a": 1}),
                    1 => Bson::Document(doc! {"a": 1, "h": format!("x{row}")}),
                    // An empty document and an empty array have the same bytes.
                    2 => Bson::Document(doc! {}),
                    _ => Bson::Array(vec![]),
                };
                let m = if row == 5 { Bson::Document(doc! {"long": "y".repeat(2000)}) } else { m };
                let d = RawDocumentBuf::try_from(&doc! {"m": m}).unwrap();
                let v = d.get("m").unwrap().unwrap();
                let (key, id) = series_key_at(v, row);
                let (want, want_id) = series_key(v);
                proptest::prop_assert_eq!(key, want);
                proptest::prop_assert_ne!(id, 0);
                // Ids name bytes: the row's answer and the cache's name the same bytes.
                proptest::prop_assert_eq!(id, want_id);
            }
        }
    }

    #[test]
    fn the_key_cache_holds_a_bounded_number_of_bytes() {
        let big = |i: usize| {
            RawDocumentBuf::try_from(&doc! {"m": {"h": i as i64, "pad": "p".repeat(60_000)}})
                .unwrap()
        };
        let first = big(0);
        let (k0, _) = series_key(first.get("m").unwrap().unwrap());
        // Over 36 MB of distinct meta values.
        for i in 1..600 {
            let d = big(i);
            let (k, _) = series_key(d.get("m").unwrap().unwrap());
            assert_ne!(k, k0);
            let held = KEYS.with(|c| c.borrow()[0].1);
            assert!(held <= KEY_CACHE_BYTES, "{held}");
            assert!(KEYS.with(|c| c.borrow()[0].0.len()) * 60_000 <= KEY_CACHE_BYTES + 60_000);
        }
        // Forgotten or not, the first value still has its key.
        assert_eq!(series_key(first.get("m").unwrap().unwrap()).0, k0);
    }
}
