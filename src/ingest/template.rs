//! Raw documents that repeat the element headers of a recent document.
//!
//! A series sends the same fields in the same order every time, and so, in practice, do the
//! many series of one batch. Once a raw document has passed the full scan, a later one whose
//! element headers (`{ type | name | 0 }`, at the top level and inside a meta value that is a
//! document) are the same bytes has names already proven UTF-8, unique and not reserved, and
//! has the same shape: only its values need checking, and the places of `_id`, time and meta
//! are known. [`Template::scan`] does that in one walk and gives up at the first difference,
//! leaving the document to the full scan, so it never decides anything the full scan would
//! decide otherwise: it only accepts. [`Templates`] keeps two of them.

use super::series::{series_key, series_key_at, SeriesKey};
use super::shape::ShapeId;
use super::validate;
use super::{MetaAt, Scanned};
use crate::schema::Schema;
use crate::doc::elements::{utf8_ok, value_len, Elements};
use crate::doc::to_bson;
use bson::oid::ObjectId;
use bson::raw::{RawBsonRef, RawDocument};

/// Learning waits for at most this many documents that miss every template.
const MAX_WAIT: u32 = 63;
/// What a match adds to [`Templates::score`] and a miss takes away (trying pays off while
/// about half the documents match: a miss may pay for two failed walks and a learn), and the
/// most it holds.
const MATCH_SCORE: u32 = 3;
const MISS_SCORE: u32 = 3;
const MAX_SCORE: u32 = 64;
/// At a score of 0, one document in this many is tried.
const PROBE_EVERY: u32 = 16;

/// The last two templates learnt, the one matched last tried first, so that a batch whose rows
/// take turns between two shapes matches too.
///
/// A document that matches neither has paid for the walks that failed, so where rows rarely
/// repeat a shape the templates step aside: each match raises a score by 3 and each miss
/// lowers it by as much, and at 0 only one document in 16 is tried. Learning backs off too: each
/// learn waits for twice as many misses as the one before, up to [`MAX_WAIT`], and each match
/// shortens that wait by one.
pub struct Templates {
    slots: [Template; 2],
    /// The slot matched or learnt last.
    recent: usize,
    /// Documents that missed both since the last learn, and how many to let pass before the
    /// next one.
    misses: u32,
    wait: u32,
    /// How well matching has been going (see above).
    score: u32,
    /// Documents seen, for the tries at a score of 0.
    seen: u32,
}

impl Default for Templates {
    fn default() -> Self {
        Templates {
            slots: Default::default(),
            recent: 0,
            misses: 0,
            wait: 0,
            score: MAX_SCORE,
            seen: 0,
        }
    }
}

impl Templates {
    /// [`Template::scan`] with the slot matched last, then the other (or neither, while
    /// matching rarely succeeds).
    /// `row` is the document's place in its batch.
    pub fn scan(
        &mut self,
        doc: &[u8],
        row: usize,
        schema: &Schema,
    ) -> Option<(Scanned, MetaAt, ShapeId)> {
        self.seen = self.seen.wrapping_add(1);
        if self.score == 0 && self.seen % PROBE_EVERY != 0 {
            return None;
        }
        for k in [self.recent, 1 - self.recent] {
            if let Some(found) = self.slots.get(k).and_then(|t| t.scan(doc, row, schema)) {
                (self.recent, self.misses) = (k, 0);
                self.wait = self.wait.saturating_sub(1);
                self.score = (self.score + MATCH_SCORE).min(MAX_SCORE);
                return Some(found);
            }
        }
        self.score = self.score.saturating_sub(MISS_SCORE);
        None
    }

    /// A document that matched no template and passed the full scan, with the shape it was
    /// given: learnt in place of the template matched longest ago, unless documents have
    /// kept missing.
    pub fn offer(&mut self, doc: &[u8], schema: &Schema, shape: ShapeId) {
        self.misses += 1;
        if self.misses <= self.wait {
            return;
        }
        let k = 1 - self.recent;
        if let Some(t) = self.slots.get_mut(k) {
            t.learn(doc, schema, shape);
        }
        self.recent = k;
        self.misses = 0;
        self.wait = (self.wait * 2 + 1).min(MAX_WAIT);
    }
}

/// The element headers of a raw document that passed the full scan.
#[derive(Default)]
pub struct Template {
    /// Its top-level element headers.
    top: Headers,
    /// The element headers of its meta value, when that is a document.
    meta: Headers,
    /// The shape the full scan named for it (a generated `_id` included when it had none).
    shape: ShapeId,
    /// False until a document was learnt.
    ready: bool,
}

/// What the insert path takes from an element besides checking it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Plain,
    Id,
    Time,
    Meta,
}

/// Element headers back to back, and per element where its header ends and its role.
#[derive(Default)]
struct Headers {
    bytes: Vec<u8>,
    steps: Vec<(usize, Role)>,
}

impl Headers {
    fn clear(&mut self) {
        self.bytes.clear();
        self.steps.clear();
    }

    fn push(&mut self, kind: u8, name: &[u8], role: Role) {
        self.bytes.push(kind);
        self.bytes.extend_from_slice(name);
        self.bytes.push(0);
        self.steps.push((self.bytes.len(), role));
    }

    /// Walks the elements of `doc` (one whole document, `depth` documents deep), which must
    /// have exactly these headers, checking each value as [`validate::value`] does and calling
    /// `each(role, (start, end), kind, value)` for each element with a role; false at the first
    /// difference, at bytes that do not frame or are not well formed, or when `each` says
    /// false. `inner` gives the headers expected inside the meta value when it is a document; a
    /// value without them gets the general check.
    #[inline]
    fn walk<'d>(
        &self,
        doc: &'d [u8],
        depth: usize,
        inner: Option<&Headers>,
        mut each: impl FnMut(Role, (usize, usize), u8, &'d [u8]) -> bool,
    ) -> bool {
        if !validate::framed(doc) {
            return false;
        }
        let (mut pos, mut from) = (4, 0);
        for &(to, role) in &self.steps {
            let Some(header) = self.bytes.get(from..to) else {
                return false;
            };
            from = to;
            let after = pos + header.len();
            if !doc.get(pos..after).is_some_and(|h| same(h, header)) {
                return false;
            }
            let (Some(&kind), Some(rest)) = (header.first(), doc.get(after..)) else {
                return false;
            };
            let value = match inner {
                Some(headers) if role == Role::Meta && kind == 0x03 => {
                    // A document with the inner headers needs only its values checked.
                    value_len(kind, rest)
                        .and_then(|n| rest.get(..n))
                        .filter(|v| {
                            headers.walk(v, depth + 1, None, accept)
                                || validate::value(kind, v, depth)
                        })
                }
                _ => checked_value(kind, rest, depth),
            };
            let Some(value) = value else {
                return false;
            };
            let end = after + value.len();
            if role != Role::Plain && !each(role, (pos, end), kind, value) {
                return false;
            }
            pos = end;
        }
        // The terminator, and nothing after it.
        pos + 1 == doc.len() && doc.get(pos) == Some(&0)
    }
}

impl Template {
    /// Remembers a document that passed the full scan and the shape it was given.
    pub fn learn(&mut self, doc: &[u8], schema: &Schema, shape: ShapeId) {
        let meta = schema.meta().map(str::as_bytes);
        self.top.clear();
        self.meta.clear();
        for e in Elements::new(doc) {
            let role = if e.name == b"_id" {
                Role::Id
            } else if e.name == schema.time().as_bytes() {
                Role::Time
            } else if Some(e.name) == meta {
                Role::Meta
            } else {
                Role::Plain
            };
            if role == Role::Meta && e.kind == 0x03 {
                for inner in Elements::new(e.value) {
                    self.meta.push(inner.kind, inner.name, Role::Plain);
                }
            }
            self.top.push(e.kind, e.name, role);
        }
        self.shape = shape;
        self.ready = true;
    }

    /// What the full scan would find in `doc`, when its headers are the template's and its
    /// values are well formed; `None` otherwise, which says nothing either way.
    pub fn scan(
        &self,
        doc: &[u8],
        row: usize,
        schema: &Schema,
    ) -> Option<(Scanned, MetaAt, ShapeId)> {
        if !self.ready {
            return None;
        }
        // Values are only noted during the walk: a walk that fails later must not have paid
        // for a series key or an `_id` conversion.
        let (mut id, mut time, mut meta) = (None, None, None);
        let walked = self
            .top
            .walk(doc, 0, Some(&self.meta), |role, span, kind, value| {
                match role {
                    Role::Meta => meta = Some((span, kind, value)),
                    Role::Time => time = Some((kind, value)),
                    Role::Id => id = Some((kind, value)),
                    Role::Plain => {}
                }
                true
            });
        if !walked {
            return None;
        }
        let time_ms = match time {
            Some((0x09, v)) => Some(i64::from_le_bytes(v.try_into().ok()?)),
            _ => None,
        };
        let id = match id {
            Some((0x07, v)) => Some(bson::Bson::ObjectId(ObjectId::from_bytes(
                v.try_into().ok()?,
            ))),
            Some(_) => Some(to_bson(raw_get(doc, "_id")?)),
            None => None,
        };
        let (key, meta_at) = match meta {
            Some((span, 0x03, v)) => {
                let d = RawDocument::from_bytes(v).ok()?;
                (series_key_at(RawBsonRef::Document(d), row), Some(span))
            }
            Some((span, _, _)) => (series_key(raw_get(doc, schema.meta()?)?), Some(span)),
            None => ((SeriesKey::none(), 0), None),
        };
        Some(((id, time_ms, key), meta_at, self.shape))
    }
}

/// The value named `name` in a document already walked, through the `bson` crate.
fn raw_get<'a>(doc: &'a [u8], name: &str) -> Option<RawBsonRef<'a>> {
    RawDocument::from_bytes(doc).ok()?.get(name).ok()?
}

/// A walk's callback that asks nothing more.
fn accept(_: Role, _: (usize, usize), _: u8, _: &[u8]) -> bool {
    true
}

/// The value of type `kind` at the start of `rest`, `depth` documents deep, when it frames and
/// [`validate::value`] finds it well formed. The types a row usually holds are framed here,
/// inline; the rest go to the general functions.
#[inline(always)]
fn checked_value(kind: u8, rest: &[u8], depth: usize) -> Option<&[u8]> {
    let n = match kind {
        0x01 | 0x09 | 0x11 | 0x12 => 8,
        0x07 => 12,
        0x10 => 4,
        0x02 => {
            // `string_ok`, inline: a length of at least 1, that counts a terminating NUL.
            let len = i32::from_le_bytes(rest.get(..4)?.try_into().ok()?);
            let v = rest.get(..usize::try_from(len).ok()?.checked_add(4)?)?;
            let (&last, body) = v.get(4..)?.split_last()?;
            return (last == 0 && utf8_ok(body)).then_some(v);
        }
        _ => {
            let v = rest.get(..value_len(kind, rest)?)?;
            return validate::value(kind, v, depth).then_some(v);
        }
    };
    rest.get(..n)
}

/// `a == b`, for the short slices of element headers: with no call, in words that overlap
/// where the length is not a multiple of theirs.
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let w4 = |s: &[u8], at: usize| {
        s.get(at..at + 4)
            .and_then(|w| w.try_into().ok())
            .map(u32::from_ne_bytes)
    };
    let w8 = |s: &[u8], at: usize| {
        s.get(at..at + 8)
            .and_then(|w| w.try_into().ok())
            .map(u64::from_ne_bytes)
    };
    match n {
        0..=3 => a == b,
        4..=7 => w4(a, 0) == w4(b, 0) && w4(a, n - 4) == w4(b, n - 4),
        _ => {
            let mut at = 0;
            while at + 8 < n {
                if w8(a, at) != w8(b, at) {
                    return false;
                }
                at += 8;
            }
            w8(a, n - 8) == w8(b, n - 8)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{prepare_raw_batch, Prepared};
    use super::*;
    use crate::error::Error;
    use bson::{doc, Bson, DateTime, Document, RawDocumentBuf};
    use proptest::prelude::*;

    fn f() -> Schema {
        Schema::new("t", Some("m"), 3600, 60)
    }

    /// Rows from a few names, types and meta values, so that most repeat the headers of the
    /// row before and some differ from it in one place.
    fn rows() -> impl Strategy<Value = Vec<Document>> {
        let row = (0..4u8, 0..4u8, 0..3u8, any::<bool>(), 0..3u8);
        proptest::collection::vec(row, 1..10).prop_map(|rows| {
            rows.into_iter()
                .enumerate()
                .map(|(i, (meta, a, b, own_id, order))| {
                    let mut d = Document::new();
                    if own_id {
                        d.insert("_id", bson::oid::ObjectId::new());
                    }
                    let meta = match meta {
                        0 => Bson::Document(doc! {"host": format!("h{i}"), "rack": "r1", "n": 1}),
                        1 => Bson::Document(doc! {"rack": "r1", "host": "h0", "n": 1}),
                        2 => Bson::String(format!("s{}", i % 2)),
                        _ => Bson::Document(doc! {"host": {"dc": "x"}, "tags": ["a", "b"]}),
                    };
                    let a = match a {
                        0 => Bson::Int64(i as i64),
                        1 => Bson::Double(0.5),
                        2 => Bson::String("é".repeat(i)),
                        _ => Bson::Boolean(i % 2 == 0),
                    };
                    let schema = [
                        ("t", Bson::DateTime(DateTime::from_millis(i as i64))),
                        ("m", meta),
                        ("a", a),
                    ];
                    // Rotate the fields now and then, so that headers move.
                    for k in 0..3 {
                        let (name, value) = schema[(k + usize::from(order)) % 3].clone();
                        d.insert(name, value);
                    }
                    if b > 0 {
                        d.insert("b", b as i32);
                    }
                    d
                })
                .collect()
        })
    }

    fn raw(docs: &[Document]) -> Vec<RawDocumentBuf> {
        docs.iter()
            .map(|d| RawDocumentBuf::try_from(d).unwrap())
            .collect()
    }

    /// What a prepared row says about its document, `_id` aside.
    fn facts(p: &Prepared) -> impl PartialEq + std::fmt::Debug + '_ {
        (p.time_ms, p.size, &p.key, p.shape, p.meta_at, p.len)
    }

    /// A row prepared alone, with nothing learnt before it.
    fn alone(doc: &RawDocumentBuf) -> super::super::Result<Prepared> {
        prepare_raw_batch(1, std::slice::from_ref(doc), &f()).map(|(mut p, _, _)| p.remove(0))
    }

    fn message(e: &Error) -> String {
        match e {
            Error::InvalidDocument { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }

    proptest! {
        /// A row prepared after rows whose headers it may repeat is prepared as it is alone.
        #[test]
        fn rows_are_prepared_as_they_are_alone(docs in rows()) {
            let docs = raw(&docs);
            let (prepared, payload, ids) = prepare_raw_batch(1, &docs, &f()).unwrap();
            for ((p, doc), id) in prepared.iter().zip(&docs).zip(&ids) {
                let one = alone(doc).unwrap();
                prop_assert_eq!(facts(p), facts(&one));
                let logged = Document::try_from(p.raw(&payload).unwrap()).unwrap();
                prop_assert_eq!(logged.get("_id"), Some(id));
            }
        }

        /// Damage to a row whose headers repeat the row before is found as it is in the row
        /// alone: the same error, or the same row when the damage leaves it well formed.
        #[test]
        fn damage_after_a_repeated_row_is_found_as_alone(
            docs in rows(),
            flips in proptest::collection::vec((any::<u16>(), 1..=255u8), 1..4),
        ) {
            let mut docs = raw(&docs);
            let Some(last) = docs.last().cloned() else { return Ok(()) };
            // The row before has the same headers: the damaged row meets the template.
            docs.push(last.clone());
            let mut bytes = last.as_bytes().to_vec();
            for (at, x) in flips {
                let i = usize::from(at) % bytes.len();
                bytes[i] ^= x;
            }
            // The crate checks only the frame here, as for what callers pass in.
            let Ok(damaged) = RawDocumentBuf::from_bytes(bytes) else { return Ok(()) };
            let n = docs.len() - 1;
            docs[n] = damaged.clone();
            match (prepare_raw_batch(1, &docs, &f()), alone(&damaged)) {
                (Ok((p, _, _)), Ok(one)) => prop_assert_eq!(facts(&p[n]), facts(&one)),
                (Err(e), Err(one)) => {
                    let index = match e {
                        Error::InvalidDocument { index, .. } => Some(index),
                        _ => None,
                    };
                    prop_assert_eq!(index, Some(n));
                    prop_assert_eq!(message(&e), message(&one));
                }
                (batch, one) => prop_assert!(false, "{:?} against {:?}", batch.err(), one.err()),
            }
        }
    }

    /// How many of `docs` the templates match, offering each miss as the insert path does.
    fn matches(docs: &[Document]) -> usize {
        let mut t = Templates::default();
        let mut n = 0;
        for (i, d) in docs.iter().enumerate() {
            let raw = RawDocumentBuf::try_from(d).unwrap();
            match t.scan(raw.as_bytes(), 0, &f()) {
                Some(_) => n += 1,
                None => t.offer(raw.as_bytes(), &f(), i as ShapeId + 1),
            }
        }
        n
    }

    #[test]
    fn two_shapes_in_turn_both_match_and_ever_new_shapes_stop_being_tried() {
        let t = |i: i64| DateTime::from_millis(i);
        let same: Vec<Document> = (0..100).map(|i| doc! {"t": t(i), "x": i}).collect();
        assert_eq!(matches(&same), 99);
        let turns: Vec<Document> = (0..100)
            .map(|i| match i % 2 {
                0 => doc! {"t": t(i), "x": i},
                _ => doc! {"t": t(i), "y": 1.5},
            })
            .collect();
        // Rows 0, 1 and 3 miss (row 1 is not learnt: learning waits a miss after row 0's),
        // then every row matches one of the two.
        assert_eq!(matches(&turns), 97);
        // Every row of a new shape: after a few tries only one row in 16 is tried, and
        // learning backs off, so misses cost little.
        let mut ts = Templates::default();
        let mut tried_late = 0;
        for i in 0..1000 {
            let mut d = doc! {"t": t(i)};
            d.insert(format!("f{i}"), 1);
            let raw = RawDocumentBuf::try_from(&d).unwrap();
            if ts.score > 0 || ts.seen.wrapping_add(1) % PROBE_EVERY == 0 {
                tried_late += usize::from(i >= 500);
            }
            assert!(ts.scan(raw.as_bytes(), 0, &f()).is_none());
            ts.offer(raw.as_bytes(), &f(), 1);
        }
        assert!(tried_late <= 500 / PROBE_EVERY as usize + 1, "{tried_late}");
        assert_eq!(ts.wait, MAX_WAIT);
    }

    #[test]
    fn repeated_headers_take_the_fast_walk() {
        let d = |host: &str| doc! {"t": DateTime::from_millis(1), "m": {"host": host}, "x": 1.5};
        let mut t = Template::default();
        let first = RawDocumentBuf::try_from(&d("a")).unwrap();
        assert!(t.scan(first.as_bytes(), 0, &f()).is_none());
        t.learn(first.as_bytes(), &f(), 7);
        let next = RawDocumentBuf::try_from(&d("bb")).unwrap();
        let ((id, time, key), meta_at, shape) = t.scan(next.as_bytes(), 0, &f()).unwrap();
        assert_eq!((id, time, shape), (None, Some(1), 7));
        assert_eq!(key.0, alone(&next).unwrap().key);
        // The prepared row has a generated `_id` in front.
        let shifted = meta_at.map(|(s, e)| (s + 17, e + 17));
        assert_eq!(shifted, alone(&next).unwrap().meta_at);
        // Another name, another type or another field order all leave the template.
        for other in [
            doc! {"t": DateTime::from_millis(1), "m": {"host": "a"}, "y": 1.5},
            doc! {"t": DateTime::from_millis(1), "m": {"host": "a"}, "x": 1},
            doc! {"m": {"host": "a"}, "t": DateTime::from_millis(1), "x": 1.5},
            doc! {"t": DateTime::from_millis(1), "m": {"host": "a"}, "x": 1.5, "z": 1},
        ] {
            let b = RawDocumentBuf::try_from(&other).unwrap();
            assert!(t.scan(b.as_bytes(), 0, &f()).is_none(), "{other}");
        }
        // A meta document with other names is checked in full, and still taken.
        let b = RawDocumentBuf::try_from(
            &doc! {"t": DateTime::from_millis(1), "m": {"rack": 3}, "x": 1.5},
        )
        .unwrap();
        assert!(t.scan(b.as_bytes(), 0, &f()).is_some());
    }
}
