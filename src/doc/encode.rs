//! BSON encoding of documents and values straight into a buffer: the insert path's log
//! records, and the documents a read returns as bytes.
//!
//! `Document::to_writer` builds a separate `RawDocumentBuf` per document and copies it, and a
//! generated `_id` then has to be spliced in front of it. Writing the elements directly lets the
//! insert path put the `_id` first, note the time and meta fields and check field names in the
//! same pass. The common value types are written here; the others go through the `bson` crate,
//! so the bytes are always the crate's encoding.

use crate::depth::{too_deep, MAX_NESTING};
use bson::spec::ElementType;
use bson::{Bson, Document};

/// Appends the element header: type byte and key as a C string.
#[inline(always)]
pub fn write_key(out: &mut Vec<u8>, t: ElementType, key: &str) -> Result<(), String> {
    if has_nul(key.as_bytes()) {
        return Err(format!("field name {key:?} contains a NUL byte"));
    }
    write_checked_key(out, t, key);
    Ok(())
}

/// [`write_key`] for a name known to hold no NUL byte.
#[inline(always)]
pub fn write_checked_key(out: &mut Vec<u8>, t: ElementType, key: &str) {
    out.push(t as u8);
    out.extend_from_slice(key.as_bytes());
    out.push(0);
}

/// True if `b` holds a zero byte.
#[inline]
fn has_nul(b: &[u8]) -> bool {
    crate::doc::elements::find_nul(b).is_some()
}

/// Appends `doc` as a BSON document whose elements sit `level` levels deep (a measurement's
/// own fields at level 1).
pub fn write_document(doc: &Document, out: &mut Vec<u8>, level: usize) -> Result<(), String> {
    if level > MAX_NESTING && !doc.is_empty() {
        return Err(too_deep());
    }
    let start = begin(out);
    for (k, v) in doc {
        write_key(out, v.element_type(), k)?;
        write_value(v, out, level)?;
    }
    end(out, start)
}

/// Reserves the length prefix of a document; returns where it starts.
pub fn begin(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    start
}

/// Terminates the document begun at `start` and fills in its length.
pub fn end(out: &mut Vec<u8>, start: usize) -> Result<(), String> {
    out.push(0);
    let len = i32::try_from(out.len() - start).map_err(|_| "document too large".to_string())?;
    if let Some(prefix) = out.get_mut(start..start + 4) {
        prefix.copy_from_slice(&len.to_le_bytes());
    }
    Ok(())
}

#[inline(always)]
fn write_str(s: &str, out: &mut Vec<u8>) -> Result<(), String> {
    let len = i32::try_from(s.len() + 1).map_err(|_| "string too large".to_string())?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(s.as_bytes());
    out.push(0);
    Ok(())
}

/// Appends the value bytes of `v` (what follows the element's key), the value of an element
/// `level` levels deep.
///
/// Inlined into the loops over a document's elements, with the rare types out of line: as one
/// function with every arm, each call of it paid about 40 instructions of register saves and
/// dispatch, a sixth of the encoding of a measurement of ten string tags and ten numbers.
#[inline(always)]
pub fn write_value(v: &Bson, out: &mut Vec<u8>, level: usize) -> Result<(), String> {
    match v {
        Bson::Double(x) => out.extend_from_slice(&x.to_le_bytes()),
        Bson::String(s) => write_str(s, out)?,
        Bson::DateTime(t) => out.extend_from_slice(&t.timestamp_millis().to_le_bytes()),
        Bson::Int32(x) => out.extend_from_slice(&x.to_le_bytes()),
        Bson::Int64(x) => out.extend_from_slice(&x.to_le_bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::ObjectId(o) => out.extend_from_slice(&o.bytes()),
        Bson::Null | Bson::Undefined | Bson::MinKey | Bson::MaxKey => {}
        other => write_other(other, out, level)?,
    }
    Ok(())
}

/// [`write_value`] for embedded documents, arrays and the rare types.
#[inline(never)]
fn write_other(v: &Bson, out: &mut Vec<u8>, level: usize) -> Result<(), String> {
    // What a document, array or scope holds sits one level below it.
    let inner = level + 1;
    match v {
        Bson::Document(d) => write_document(d, out, inner)?,
        Bson::Array(a) => {
            if inner > MAX_NESTING && !a.is_empty() {
                return Err(too_deep());
            }
            let start = begin(out);
            let mut key = String::new();
            for (i, x) in a.iter().enumerate() {
                key.clear();
                use std::fmt::Write;
                let _ = write!(key, "{i}");
                write_key(out, x.element_type(), &key)?;
                write_value(x, out, inner)?;
            }
            end(out, start)?;
        }
        // The crate encodes a scope by recursion: its depth is checked first.
        Bson::JavaScriptCodeWithScope(c) if !crate::depth::fits(&c.scope, inner, MAX_NESTING) => {
            return Err(too_deep());
        }
        other => {
            // Rare types: take the crate's bytes of a one-field document `{"": v}`, whose value
            // starts after the length, the type byte and the empty key.
            let mut d = Document::new();
            d.insert("", other.clone());
            let bytes = d.to_vec().map_err(|e| e.to_string())?;
            let value = bytes
                .get(6..bytes.len().saturating_sub(1))
                .ok_or("value encodes to malformed BSON")?;
            out.extend_from_slice(value);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsbucket_testkit::{values, Input};
    use proptest::prelude::*;

    fn ours(d: &Document) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        write_document(d, &mut out, 1)?;
        Ok(out)
    }

    proptest! {
        #[test]
        fn same_bytes_as_the_bson_crate(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let d = values::document(&mut Input::new(&data), 3);
            prop_assert_eq!(ours(&d).ok(), d.to_vec().ok());
        }
    }

    #[test]
    fn every_value_type_and_bad_names() {
        let mut data = Vec::new();
        for i in 0..2000u32 {
            data.extend_from_slice(&i.wrapping_mul(2_654_435_761).to_le_bytes());
        }
        let mut inp = Input::new(&data);
        for _ in 0..200 {
            let d = values::document(&mut inp, 3);
            assert_eq!(ours(&d).unwrap(), d.to_vec().unwrap());
        }
        let mut d = Document::new();
        d.insert("a\0b", 1);
        assert!(ours(&d).is_err());
        // A NUL in every position of names around the word size.
        for len in 1..=20 {
            for at in 0..len {
                let mut name = vec![b'k'; len];
                name[at] = 0;
                let name = String::from_utf8(name).unwrap();
                assert!(has_nul(name.as_bytes()), "{name:?}");
                let mut d = Document::new();
                d.insert(name, 1);
                assert!(ours(&d).is_err());
            }
            assert!(!has_nul("\u{1}\u{7f}\u{80}é".repeat(len).as_bytes()));
        }
        d = Document::new();
        d.insert("x", bson::doc! {"k\0": 1});
        assert!(ours(&d).is_err());
    }
}
