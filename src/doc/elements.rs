//! The top-level elements of a BSON document, read straight from its bytes.
//!
//! The catalog reads documents the insert path has already checked (or that come back from a
//! checksummed log record), so it does not need the `bson` crate's iterator, which checks every
//! name for UTF-8 and builds a typed value per element. This walker only frames elements: type
//! byte, name, value bytes. It never panics and never reads out of bounds; bytes it cannot
//! frame end the walk, and [`Elements::finished`] then says the document was not read to its
//! end, so callers fall back to the checked path.

/// One element: its BSON type byte, its name and its value's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Element<'a> {
    /// Offset of the element's type byte in the document.
    pub start: usize,
    /// BSON element type.
    pub kind: u8,
    /// Field name, without its terminating NUL.
    pub name: &'a [u8],
    /// The value's bytes (what follows the name).
    pub value: &'a [u8],
}

/// Iterator over the top-level elements of one BSON document.
pub struct Elements<'a> {
    doc: &'a [u8],
    pos: usize,
    finished: bool,
}

impl<'a> Elements<'a> {
    /// The elements of `doc`, the bytes of one whole document (length prefix to terminator).
    pub fn new(doc: &'a [u8]) -> Elements<'a> {
        Elements {
            doc,
            pos: 4,
            finished: false,
        }
    }

    /// True once the walk reached the document's terminating NUL at its last byte.
    pub fn finished(&self) -> bool {
        self.finished
    }
}

impl Element<'_> {
    /// Offset just past the element in the document.
    pub fn end(&self) -> usize {
        self.start + 1 + self.name.len() + 1 + self.value.len()
    }
}

impl<'a> Iterator for Elements<'a> {
    type Item = Element<'a>;

    #[inline]
    fn next(&mut self) -> Option<Element<'a>> {
        let start = self.pos;
        // Each step splits what is left, so no offset is checked against the document twice.
        let (&kind, rest) = self.doc.get(start..)?.split_first()?;
        if kind == 0 {
            self.finished = rest.is_empty();
            return None;
        }
        let name_len = find_nul(rest)?;
        let (name, after) = rest.split_at_checked(name_len)?;
        // `after` starts with the name's NUL.
        let values = after.get(1..)?;
        let value_len = value_len(kind, values)?;
        let value = values.get(..value_len)?;
        self.pos = start + 2 + name_len + value_len;
        Some(Element {
            start,
            kind,
            name,
            value,
        })
    }
}

/// The text of a BSON string value (`{ length: i32 | UTF-8 | 0 }`, the length counting the
/// terminating NUL and at least 1), checked as the `bson` crate checks it.
pub fn string_value(value: &[u8]) -> Option<&str> {
    std::str::from_utf8(string_body(value)?).ok()
}

/// True when [`string_value`] would find a string in `value`, found without building it.
pub fn string_ok(value: &[u8]) -> bool {
    string_body(value).is_some_and(utf8_ok)
}

fn string_body(value: &[u8]) -> Option<&[u8]> {
    let (len, rest) = value.split_at_checked(4)?;
    let len = i32::from_le_bytes(len.try_into().ok()?);
    let (&last, body) = rest.split_last()?;
    (last == 0 && len >= 1 && body.len() + 1 == len as usize).then_some(body)
}

/// True when `b` is UTF-8. Names and string values are short and nearly always ASCII, which
/// is tested a word at a time; the full check runs only for the rest.
#[inline]
pub fn utf8_ok(b: &[u8]) -> bool {
    short_ascii(b).unwrap_or_else(|| b.is_ascii()) || std::str::from_utf8(b).is_ok()
}

/// Whether `b` is ASCII, for up to 16 bytes (`None` beyond): the high bits of two words that
/// overlap, or of two halves, with no call and no loop.
#[inline(always)]
fn short_ascii(b: &[u8]) -> Option<bool> {
    let n = b.len();
    let (x, y) = match n {
        0 => return Some(true),
        1..=3 => {
            let (first, last) = (b.first()?, b.last()?);
            (
                u64::from(*first | *last | b.get(n / 2).copied().unwrap_or(0)),
                0,
            )
        }
        4..=7 => (
            u64::from(u32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
            u64::from(u32::from_le_bytes(b.get(n - 4..)?.try_into().ok()?)),
        ),
        8..=16 => (
            u64::from_le_bytes(b.get(..8)?.try_into().ok()?),
            u64::from_le_bytes(b.get(n - 8..)?.try_into().ok()?),
        ),
        _ => return None,
    };
    Some((x | y) & 0x8080_8080_8080_8080 == 0)
}

/// Position of the first zero byte of `b`. Field names are short, where a byte-by-byte search
/// is the cost of framing an element; this tests eight bytes at a time: in
/// `(x - 0x01..01) & !x & 0x80..80` the lowest set bit marks the first zero byte (bits above
/// it may be false alarms, never bits below).
#[inline]
pub fn find_nul(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut words = b.chunks_exact(8);
    let mut at = 0;
    for w in words.by_ref() {
        let x = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        let t = x.wrapping_sub(ONES) & !x & HIGHS;
        if t != 0 {
            return Some(at + (t.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&c| c == 0)
        .map(|i| at + i)
}

fn le_len(b: &[u8]) -> Option<usize> {
    let n = i32::from_le_bytes(b.get(..4)?.try_into().ok()?);
    usize::try_from(n).ok()
}

/// Bytes taken by a value of type `kind` at the start of `b`; `None` for an unknown type or a
/// length that does not fit.
pub fn value_len(kind: u8, b: &[u8]) -> Option<usize> {
    let n = match kind {
        0x01 | 0x09 | 0x11 | 0x12 => 8,
        // String, JavaScript code, symbol: length-prefixed, NUL included in the length.
        0x02 | 0x0D | 0x0E => le_len(b)?.checked_add(4)?,
        // Document, array, code with scope: the length covers itself.
        0x03 | 0x04 | 0x0F => le_len(b)?,
        0x05 => le_len(b)?.checked_add(5)?,
        0x06 | 0x0A | 0x7F | 0xFF => 0,
        0x07 => 12,
        0x08 => 1,
        0x0B => {
            let pattern = b.iter().position(|&c| c == 0)? + 1;
            let options = b.get(pattern..)?.iter().position(|&c| c == 0)? + 1;
            pattern + options
        }
        0x0C => le_len(b)?.checked_add(4 + 12)?,
        0x10 => 4,
        0x13 => 16,
        _ => return None,
    };
    (n <= b.len()).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsbucket_testkit::{values, Input};
    use bson::{doc, RawDocumentBuf};
    use proptest::prelude::*;

    fn frames_like_the_bson_crate(raw: &RawDocumentBuf) {
        let mut ours = Elements::new(raw.as_bytes());
        for el in raw.iter_elements() {
            let el = el.unwrap();
            let e = ours.next().unwrap();
            assert_eq!(e.kind, el.element_type() as u8);
            assert_eq!(e.name, el.key().as_str().as_bytes());
            assert_eq!(raw.as_bytes().get(e.start), Some(&e.kind));
            assert!(e.end() < raw.as_bytes().len());
        }
        assert!(ours.next().is_none());
        assert!(ours.finished());
    }

    proptest! {
        #[test]
        fn word_searches_agree_with_the_byte_by_byte_ones(
            b in proptest::collection::vec(prop_oneof![Just(0u8), Just(b'a'), Just(0x80u8), Just(0xC3u8), Just(0xA9u8), Just(1u8), Just(0xFFu8)], 0..40)
        ) {
            prop_assert_eq!(find_nul(&b), b.iter().position(|&c| c == 0));
            prop_assert_eq!(utf8_ok(&b), std::str::from_utf8(&b).is_ok());
        }
    }

    #[test]
    fn a_high_byte_is_found_at_every_position_of_a_short_string() {
        for len in 0..=20 {
            let ascii = vec![b'a'; len];
            assert_eq!(short_ascii(&ascii), (len <= 16).then_some(true));
            for at in 0..len {
                let mut b = ascii.clone();
                b[at] = 0x80;
                assert_eq!(short_ascii(&b), (len <= 16).then_some(false), "{b:?}");
                assert!(!utf8_ok(&b));
            }
        }
    }

    #[test]
    fn zero_bytes_are_found_at_every_position() {
        for len in 0..=24 {
            assert_eq!(find_nul(&vec![0x80; len]), None);
            for at in 0..len {
                let mut b = vec![0x01; len];
                b[at] = 0;
                // A zero after the first must not hide it.
                if at + 1 < len {
                    b[len - 1] = 0;
                }
                assert_eq!(find_nul(&b), Some(at), "{b:?}");
            }
        }
    }

    #[test]
    fn every_type_is_framed() {
        let d = doc! {
            "d": 1.5, "s": "x", "o": {"a": 1}, "a": [1, "b"], "b": bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic, bytes: vec![1, 2]
            },
            "u": bson::Bson::Undefined, "i": bson::oid::ObjectId::new(), "t": true,
            "dt": bson::DateTime::from_millis(3), "n": bson::Bson::Null,
            "r": bson::Regex {
                pattern: "a+".to_string().try_into().unwrap(),
                options: "i".to_string().try_into().unwrap(),
            },
            "j": bson::Bson::JavaScriptCode("f()".into()), "i32": 1, "ts": bson::Timestamp {
                time: 1, increment: 2
            },
            "i64": 2i64, "dec": bson::Decimal128::from_bytes([0; 16]),
            "min": bson::Bson::MinKey, "max": bson::Bson::MaxKey,
        };
        frames_like_the_bson_crate(&RawDocumentBuf::try_from(&d).unwrap());
    }

    #[test]
    fn damaged_bytes_end_the_walk_unfinished() {
        let raw = RawDocumentBuf::try_from(&doc! {"a": "xyz", "b": 1}).unwrap();
        let bytes = raw.as_bytes();
        for cut in 0..bytes.len() {
            let mut w = Elements::new(&bytes[..cut]);
            while w.next().is_some() {}
            assert!(!w.finished(), "cut at {cut}");
        }
        // A string length pointing past the end.
        let mut bad = bytes.to_vec();
        bad[7] = 0x7f;
        let mut w = Elements::new(&bad);
        while w.next().is_some() {}
        assert!(!w.finished());
    }

    proptest! {
        #[test]
        fn any_document_is_framed_like_the_bson_crate(
            data in proptest::collection::vec(any::<u8>(), 0..512)
        ) {
            let d = values::document(&mut Input::new(&data), 3);
            if let Ok(raw) = RawDocumentBuf::try_from(&d) {
                frames_like_the_bson_crate(&raw);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..256)) {
            let mut w = Elements::new(&data);
            while w.next().is_some() {}
        }
    }
}
