//! A single-pass check of caller-supplied BSON bytes (`insert_many_raw`).
//!
//! The `bson` crate's element iterator checks every name, parses every value into a typed
//! reference and, for the nested documents the insert path walks again, does it twice; for a
//! batch whose meta values are documents of ten tags, that is most of the inserting thread.
//! This check reads each byte once. It only ever says "well formed" for documents made of the
//! common types, checked as strictly as the crate checks them, so that every value it passes
//! also converts through the crate later; anything else (another type, deeper nesting, or bytes
//! it finds wrong) goes to the crate's checks unchanged, which also keeps their error messages.
//! So do embedded documents that name a field twice: stored, they become `Document`s, which
//! would keep only one of them.

use crate::doc::elements::{string_ok, utf8_ok, Elements};

/// Nesting beyond this is left to the checked path.
const MAX_DEPTH: usize = 100;

/// True when `doc` (one whole document, length prefix to terminator) is well formed BSON made
/// only of doubles, strings, documents, arrays, ObjectIds, booleans, datetimes, nulls, int32s,
/// timestamps, int64s and decimal128s, with no name repeated within an embedded document (the
/// top level's names are the caller's to check). False says nothing either way.
///
/// The insert path applies it in pieces, [`framed`] and then [`element_ok`] per element, within
/// its own walk over the elements.
#[cfg(test)]
pub fn surely_well_formed(doc: &[u8]) -> bool {
    document(doc, 0, false)
}

/// True when `doc` is framed as one document: at least 5 bytes, the length prefix equal to its
/// length, a terminating NUL. Its elements are for [`element_ok`] (and the walk over them
/// must reach that terminator).
pub fn framed(doc: &[u8]) -> bool {
    let declared = doc
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_le_bytes);
    doc.len() >= 5 && doc.last() == Some(&0) && declared == i32::try_from(doc.len()).ok()
}

/// True when a top-level element of a [`framed`] document is surely well formed: a UTF-8 name
/// and a value of the common types, checked all the way down.
#[inline]
pub fn element_ok(kind: u8, name: &[u8], value_bytes: &[u8]) -> bool {
    utf8_ok(name) && value(kind, value_bytes, 0)
}

/// Whether `doc`, `depth` documents deep, is surely well formed; with `unique`, also that no
/// name in it repeats (an array's names are its indexes, which nothing keeps).
fn document(doc: &[u8], depth: usize, unique: bool) -> bool {
    if depth > MAX_DEPTH || !framed(doc) {
        return false;
    }
    let mut names = Names::default();
    let mut elements = Elements::new(doc);
    for e in elements.by_ref() {
        if !utf8_ok(e.name) || !value(e.kind, e.value, depth) || (unique && !names.first(e.name)) {
            return false;
        }
    }
    elements.finished()
}

/// The names of one document seen so far, to find one that repeats: on the stack while few,
/// as they are in nearly every document (this runs for every embedded document of every
/// measurement), then in a set.
#[derive(Default)]
pub struct Names<'a> {
    few: [&'a [u8]; 32],
    count: usize,
    many: Option<foldhash::HashSet<&'a [u8]>>,
}

impl<'a> Names<'a> {
    /// Notes `name`; false when it was noted before.
    #[inline]
    pub fn first(&mut self, name: &'a [u8]) -> bool {
        let n = self.count;
        self.count += 1;
        if let Some(set) = &mut self.many {
            return set.insert(name);
        }
        // A linear search beats hashing a few names.
        if self.few.get(..n).is_some_and(|seen| seen.contains(&name)) {
            return false;
        }
        match self.few.get_mut(n) {
            Some(slot) => {
                *slot = name;
                true
            }
            None => {
                let mut set: foldhash::HashSet<&[u8]> = self.few.iter().copied().collect();
                let fresh = set.insert(name);
                self.many = Some(set);
                fresh
            }
        }
    }
}

/// True when a value of type `kind` whose bytes are `v` (as framed), `depth` documents deep,
/// is surely well formed (see [`element_ok`]).
pub fn value(kind: u8, v: &[u8], depth: usize) -> bool {
    match kind {
        // Fixed sizes: the walker framed exactly that many bytes.
        0x01 | 0x07 | 0x09 | 0x0A | 0x10 | 0x11 | 0x12 | 0x13 => true,
        0x08 => matches!(v, [0] | [1]),
        0x02 => string_ok(v),
        0x03 => document(v, depth + 1, true),
        0x04 => document(v, depth + 1, false),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsbucket_testkit::{values, Input};
    use bson::{doc, Bson, Document, RawDocument, RawDocumentBuf};
    use proptest::prelude::*;

    /// Everything the insert path later asks of the `bson` crate: a full walk at every depth
    /// and a conversion to `Document`.
    fn crate_accepts(bytes: &[u8]) -> bool {
        fn walk(d: &RawDocument) -> bool {
            d.iter().all(|e| match e {
                Ok((_, bson::RawBsonRef::Document(inner))) => walk(inner),
                Ok((_, bson::RawBsonRef::Array(a))) => a.into_iter().all(|x| match x {
                    Ok(bson::RawBsonRef::Document(inner)) => walk(inner),
                    Ok(_) => true,
                    Err(_) => false,
                }),
                Ok(_) => true,
                Err(_) => false,
            })
        }
        RawDocument::from_bytes(bytes).is_ok_and(|d| walk(d) && Document::try_from(d).is_ok())
    }

    fn common(d: &Document) -> bool {
        fn ok(v: &Bson) -> bool {
            match v {
                Bson::Document(d) => d.values().all(ok),
                Bson::Array(a) => a.iter().all(ok),
                Bson::Double(_)
                | Bson::String(_)
                | Bson::ObjectId(_)
                | Bson::Boolean(_)
                | Bson::DateTime(_)
                | Bson::Null
                | Bson::Int32(_)
                | Bson::Timestamp(_)
                | Bson::Int64(_)
                | Bson::Decimal128(_) => true,
                _ => false,
            }
        }
        d.values().all(ok)
    }

    #[test]
    fn common_documents_pass_and_others_are_left_to_the_crate() {
        let d = doc! {
            "t": bson::DateTime::from_millis(1), "m": {"host": "h", "tags": ["a", 1, 2.5]},
            "b": true, "n": Bson::Null, "s": "ünïcode\u{0}inside", "i": 3, "l": 4i64,
            "ts": bson::Timestamp { time: 1, increment: 2 }, "o": bson::oid::ObjectId::new(),
        };
        assert!(surely_well_formed(
            RawDocumentBuf::try_from(&d).unwrap().as_bytes()
        ));
        let other = doc! {"r": bson::Regex {
            pattern: "a".to_string().try_into().unwrap(),
            options: "".to_string().try_into().unwrap(),
        }};
        assert!(!surely_well_formed(
            RawDocumentBuf::try_from(&other).unwrap().as_bytes()
        ));
    }

    #[test]
    fn nesting_beyond_the_limit_is_left_to_the_crate() {
        let mut d = doc! {"x": 1};
        for _ in 0..MAX_DEPTH {
            d = doc! {"d": d};
        }
        assert!(surely_well_formed(
            RawDocumentBuf::try_from(&d).unwrap().as_bytes()
        ));
        let d = doc! {"d": d};
        assert!(!surely_well_formed(
            RawDocumentBuf::try_from(&d).unwrap().as_bytes()
        ));
    }

    #[test]
    fn a_name_repeated_in_an_embedded_document_is_left_to_the_crate() {
        let ok = |d: Document| surely_well_formed(RawDocumentBuf::try_from(&d).unwrap().as_bytes());
        let wide: Document = (0..40).map(|i| (format!("f{i}"), Bson::Int32(i))).collect();
        assert!(ok(
            doc! {"x": {"a": 1, "b": 2}, "y": [1, 2], "w": wide.clone()}
        ));
        for d in [
            doc! {"x": {"a": 1, "b": 2}},
            doc! {"x": [{"a": 1, "b": 2}]},
            doc! {"x": {"y": {"a": 1, "b": 2}}},
            doc! {"x": {"a": 1, "b": 2}, "w": wide},
        ] {
            let mut bytes = RawDocumentBuf::try_from(&d).unwrap().into_bytes();
            let b = bytes.windows(2).position(|w| w == b"b\0").unwrap();
            bytes[b] = b'a';
            assert!(!surely_well_formed(&bytes), "{d}");
        }
        // The names of the top level are the caller's to check.
        let mut bytes = RawDocumentBuf::try_from(&doc! {"a": 1, "b": 2})
            .unwrap()
            .into_bytes();
        let b = bytes.windows(2).position(|w| w == b"b\0").unwrap();
        bytes[b] = b'a';
        assert!(surely_well_formed(&bytes));
    }

    #[test]
    fn each_rule_of_the_crate_is_kept() {
        let raw = RawDocumentBuf::try_from(&doc! {"k": "ab", "b": true}).unwrap();
        let good = raw.as_bytes().to_vec();
        assert!(surely_well_formed(&good));
        // Offsets: 4 length | 0x02 'k' 0 | len(4) 'a' 'b' 0 | 0x08 'b' 0 | 1 | 0.
        let broken = |at: usize, byte: u8| {
            let mut b = good.clone();
            b[at] = byte;
            b
        };
        for bad in [
            broken(5, 0xff),  // name not UTF-8
            broken(11, 0xff), // string not UTF-8
            broken(13, 1),    // string not NUL-terminated
            broken(7, 0),     // string length 0
            broken(7, 4),     // string length past its bytes
            broken(17, 2),    // boolean neither 0 nor 1
            broken(0, 17),    // document length wrong
            broken(18, 1),    // document not NUL-terminated
        ] {
            assert!(!surely_well_formed(&bad), "{bad:?}");
            assert!(!crate_accepts(&bad) || bad == good, "{bad:?}");
        }
    }

    proptest! {
        /// Documents of the common types pass; whatever passes, the crate accepts too.
        #[test]
        fn what_passes_the_crate_accepts(
            data in proptest::collection::vec(any::<u8>(), 0..512),
            flips in proptest::collection::vec((any::<u16>(), any::<u8>()), 0..4),
        ) {
            let d = values::document(&mut Input::new(&data), 4);
            let Ok(raw) = RawDocumentBuf::try_from(&d) else { return Ok(()) };
            let mut bytes = raw.as_bytes().to_vec();
            if common(&d) {
                prop_assert!(surely_well_formed(&bytes));
            }
            for (at, x) in flips {
                if !bytes.is_empty() {
                    let i = usize::from(at) % bytes.len();
                    bytes[i] ^= x;
                }
            }
            if surely_well_formed(&bytes) {
                prop_assert!(crate_accepts(&bytes), "{:?}", bytes);
            }
        }
    }
}
