//! Raw BSON elements inside a column: literals (a type byte, an empty name, a value) and the
//! elements of an interleaved block's reference object.

use bson::raw::RawDocument;
use bson::Bson;

/// Nesting deeper than this is refused before the bson crate converts a value, as its
/// conversion recurses. MongoDB's own default limit is lower.
pub(crate) const MAX_DEPTH: usize = 200;

pub(crate) const DOUBLE: u8 = 0x01;
pub(crate) const STRING: u8 = 0x02;
pub(crate) const DOCUMENT: u8 = 0x03;
pub(crate) const ARRAY: u8 = 0x04;
pub(crate) const BINARY: u8 = 0x05;
pub(crate) const CODE: u8 = 0x0D;
pub(crate) const SYMBOL: u8 = 0x0E;
pub(crate) const CODE_WITH_SCOPE: u8 = 0x0F;
pub(crate) const DECIMAL128: u8 = 0x13;
pub(crate) const MIN_KEY: u8 = 0xFF;
pub(crate) const MAX_KEY: u8 = 0x7F;

/// An element's parts, as offsets into the buffer it was read from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Element<'a> {
    pub ty: u8,
    pub name: &'a [u8],
    /// The value's bytes, and their offset in the buffer.
    pub value: &'a [u8],
    pub value_at: usize,
    /// Offset just past the element.
    pub end: usize,
}

type Res<T> = Result<T, (usize, String)>;

/// The element starting at `at`; `limit` is where its enclosing document's elements must end.
pub(crate) fn element(buf: &[u8], at: usize, limit: usize) -> Res<Element<'_>> {
    let area = buf
        .get(..limit)
        .ok_or_else(|| (at, "element runs past its buffer".to_string()))?;
    let ty = *area
        .get(at)
        .ok_or_else(|| (at, "element cut short".to_string()))?;
    if type_name(ty) == UNKNOWN {
        return Err((at, format!("unknown BSON type {ty:#04x}")));
    }
    let name_at = at + 1;
    let name_len = area
        .get(name_at..)
        .and_then(|rest| rest.iter().position(|&b| b == 0))
        .ok_or_else(|| (name_at, "field name not terminated".to_string()))?;
    let value_at = name_at + name_len + 1;
    let size = value_size(area, ty, value_at)?;
    let end = value_at
        .checked_add(size)
        .filter(|&e| e <= area.len())
        .ok_or_else(|| (at, format!("{} value runs past its end", type_name(ty))))?;
    Ok(Element {
        ty,
        name: area.get(name_at..name_at + name_len).unwrap_or_default(),
        value: area.get(value_at..end).unwrap_or_default(),
        value_at,
        end,
    })
}

fn read_i32(buf: &[u8], at: usize) -> Res<i32> {
    buf.get(at..at + 4)
        .and_then(|b| b.try_into().ok())
        .map(i32::from_le_bytes)
        .ok_or_else(|| (at, "length cut short".to_string()))
}

/// A length prefix that must be at least `min`.
fn length(buf: &[u8], at: usize, min: i32, what: &str) -> Res<usize> {
    let n = read_i32(buf, at)?;
    if n < min {
        return Err((at, format!("{what} length {n} is below {min}")));
    }
    Ok(n as usize)
}

fn value_size(buf: &[u8], ty: u8, at: usize) -> Res<usize> {
    Ok(match ty {
        0x06 | 0x0A | MIN_KEY | MAX_KEY => 0,
        0x08 => 1,
        0x10 => 4,
        DOUBLE | 0x09 | 0x11 | 0x12 => 8,
        0x07 => 12,
        DECIMAL128 => 16,
        STRING | CODE | SYMBOL => 4 + length(buf, at, 1, "string")?,
        DOCUMENT | ARRAY => length(buf, at, 5, "document")?,
        BINARY => 5 + length(buf, at, 0, "binary")?,
        0x0C => 4 + length(buf, at, 1, "string")? + 12,
        CODE_WITH_SCOPE => length(buf, at, 14, "code with scope")?,
        0x0B => {
            let rest = buf.get(at..).unwrap_or_default();
            let mut nuls = rest.iter().enumerate().filter(|(_, &b)| b == 0);
            match (nuls.next(), nuls.next()) {
                (Some(_), Some((second, _))) => second + 1,
                _ => return Err((at, "regular expression not terminated".into())),
            }
        }
        _ => return Err((at, format!("unknown BSON type {ty:#04x}"))),
    })
}

const UNKNOWN: &str = "unknown type";

pub(crate) fn type_name(ty: u8) -> &'static str {
    match ty {
        0x01 => "double",
        0x02 => "string",
        0x03 => "document",
        0x04 => "array",
        0x05 => "binary",
        0x06 => "undefined",
        0x07 => "ObjectId",
        0x08 => "boolean",
        0x09 => "date",
        0x0A => "null",
        0x0B => "regular expression",
        0x0C => "DBPointer",
        0x0D => "JavaScript code",
        0x0E => "symbol",
        0x0F => "code with scope",
        0x10 => "int32",
        0x11 => "timestamp",
        0x12 => "int64",
        0x13 => "decimal128",
        0xFF => "MinKey",
        0x7F => "MaxKey",
        _ => UNKNOWN,
    }
}

/// The elements of the document `doc` (its whole bytes), each with the offset of the document
/// in the column added to its error offsets.
pub(crate) fn elements(doc: &[u8], base: usize) -> Res<Vec<Element<'_>>> {
    let len = length(doc, 0, 5, "document").map_err(|(o, e)| (base + o, e))?;
    if len != doc.len() || doc.last() != Some(&0) {
        return Err((base, "document length or terminator is wrong".into()));
    }
    let mut at = 4;
    let mut out = Vec::new();
    while at < len - 1 {
        let e = element(doc, at, len - 1).map_err(|(o, m)| (base + o, m))?;
        at = e.end;
        out.push(e);
    }
    Ok(out)
}

/// Fails if documents nest (through documents, arrays and code scopes) deeper than `MAX_DEPTH`,
/// counting from `depth`.
fn check_depth(ty: u8, value: &[u8], base: usize, depth: usize) -> Res<()> {
    let doc = match ty {
        DOCUMENT | ARRAY => value,
        CODE_WITH_SCOPE => {
            let code_len = length(value, 4, 1, "string").map_err(|(o, m)| (base + o, m))?;
            value.get(8 + code_len..).unwrap_or_default()
        }
        _ => return Ok(()),
    };
    if depth >= MAX_DEPTH {
        return Err((
            base,
            format!("documents nest deeper than {MAX_DEPTH} levels"),
        ));
    }
    let doc_at = base + (value.len() - doc.len());
    for e in elements(doc, doc_at)? {
        check_depth(e.ty, e.value, doc_at + e.value_at, depth + 1)?;
    }
    Ok(())
}

/// The value of an element as a `Bson`, converted (and checked) by the bson crate.
pub(crate) fn to_bson(ty: u8, value: &[u8], at: usize, depth: usize) -> Res<Bson> {
    check_depth(ty, value, at, depth)?;
    let mut doc = Vec::with_capacity(value.len() + 7);
    let total = i32::try_from(value.len() + 7)
        .map_err(|_| (at, "value larger than a BSON document can hold".to_string()))?;
    doc.extend_from_slice(&total.to_le_bytes());
    doc.push(ty);
    doc.push(0);
    doc.extend_from_slice(value);
    doc.push(0);
    let bad = |e: bson::error::Error| (at, format!("invalid {} value: {e}", type_name(ty)));
    let raw = RawDocument::from_bytes(&doc).map_err(bad)?;
    match raw.iter().next() {
        Some(Ok((_, v))) => Bson::try_from(v).map_err(bad),
        Some(Err(e)) => Err(bad(e)),
        None => Err((at, "empty value".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    fn lit(ty: u8, value: &[u8]) -> Vec<u8> {
        let mut v = vec![ty, 0];
        v.extend_from_slice(value);
        v
    }

    #[test]
    fn literal_sizes() {
        let s = lit(STRING, b"\x03\0\0\0ab\0");
        let e = element(&s, 0, s.len()).unwrap();
        assert_eq!(
            (e.ty, e.name, e.value.len(), e.end),
            (STRING, &b""[..], 7, 9)
        );
        assert_eq!(
            to_bson(e.ty, e.value, 0, 0).unwrap(),
            Bson::String("ab".into())
        );
        let r = lit(0x0B, b"a+\0i\0");
        assert_eq!(element(&r, 0, r.len()).unwrap().end, 7);
        let m = lit(MIN_KEY, b"");
        assert_eq!(element(&m, 0, 2).unwrap().end, 2);
        assert!(element(&lit(0x14, b""), 0, 2)
            .unwrap_err()
            .1
            .contains("unknown"));
        assert!(element(&lit(STRING, b"\x09\0\0\0ab\0"), 0, 9).is_err());
        assert!(element(&lit(STRING, b"\0\0\0\0"), 0, 6).is_err());
        assert!(element(&lit(DOCUMENT, b"\x05\0\0"), 0, 5).is_err());
        let bad_utf8 = lit(STRING, b"\x02\0\0\0\xFF\0");
        let e = element(&bad_utf8, 0, bad_utf8.len()).unwrap();
        assert!(to_bson(e.ty, e.value, 0, 0).is_err());
    }

    #[test]
    fn nesting_is_bounded() {
        let mut d = doc! {};
        for _ in 0..MAX_DEPTH + 1 {
            d = doc! {"a": d};
        }
        let bytes = d.to_vec().unwrap();
        let e = to_bson(DOCUMENT, &bytes, 0, 0).unwrap_err();
        assert!(e.1.contains("deeper"), "{}", e.1);
        let mut d = doc! {};
        for _ in 0..MAX_DEPTH - 1 {
            d = doc! {"a": d};
        }
        let bytes = d.to_vec().unwrap();
        assert_eq!(to_bson(DOCUMENT, &bytes, 0, 0).unwrap(), Bson::Document(d));
    }
}
