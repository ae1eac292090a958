//! Compact self-describing element format for any BSON value: used by the GENERIC codec (one
//! element per present row), the CONST codec (one element for all rows) and nested values.
//!
//! It is BSON's element layout minus the field name, with varint lengths and zigzag varint
//! integers, so small values cost 2-3 bytes instead of BSON's 6-12.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

use bson::spec::BinarySubtype;
use bson::{
    Binary, Bson, DateTime, Decimal128, Document, JavaScriptCodeWithScope, Regex, Timestamp,
};

use super::bits::{put_svarint, put_varint, Reader};
use super::CodecError;

/// Nesting limit for documents and arrays; deeper input is rejected on decode rather than
/// risking a stack overflow on garbage. MongoDB itself stops at 180 levels.
pub(crate) const MAX_DEPTH: usize = 200;

/// BSON element type code of a value.
pub(crate) fn type_code(v: &Bson) -> u8 {
    v.element_type() as u8
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_doc(out: &mut Vec<u8>, d: &Document) {
    put_varint(out, d.len() as u64);
    for (k, v) in d {
        put_str(out, k);
        put_elem(out, v);
    }
}

/// Appends the compact element (type code + value) for `v`.
pub(crate) fn put_elem(out: &mut Vec<u8>, v: &Bson) {
    out.push(type_code(v));
    put_value(out, v);
}

/// Appends the value part only (the type is known from context).
pub(crate) fn put_value(out: &mut Vec<u8>, v: &Bson) {
    match v {
        Bson::Double(f) => out.extend_from_slice(&f.to_bits().to_le_bytes()),
        Bson::String(s) | Bson::JavaScriptCode(s) | Bson::Symbol(s) => put_str(out, s),
        Bson::Document(d) => put_doc(out, d),
        Bson::Array(a) => {
            put_varint(out, a.len() as u64);
            for x in a {
                put_elem(out, x);
            }
        }
        Bson::Binary(b) => {
            out.push(u8::from(b.subtype));
            put_varint(out, b.bytes.len() as u64);
            out.extend_from_slice(&b.bytes);
        }
        Bson::Undefined | Bson::Null | Bson::MinKey | Bson::MaxKey => {}
        Bson::ObjectId(o) => out.extend_from_slice(&o.bytes()),
        Bson::Boolean(b) => out.push(u8::from(*b)),
        Bson::DateTime(d) => put_svarint(out, d.timestamp_millis()),
        Bson::RegularExpression(r) => {
            put_str(out, r.pattern.as_str());
            put_str(out, r.options.as_str());
        }
        Bson::JavaScriptCodeWithScope(c) => {
            put_str(out, &c.code);
            put_doc(out, &c.scope);
        }
        Bson::Int32(i) => put_svarint(out, i64::from(*i)),
        Bson::Timestamp(t) => {
            put_varint(out, u64::from(t.time));
            put_varint(out, u64::from(t.increment));
        }
        Bson::Int64(i) => put_svarint(out, *i),
        Bson::Decimal128(d) => out.extend_from_slice(&d.bytes()),
        Bson::DbPointer(_) => {
            // DbPointer's fields are private in the bson crate; its own serializer is the only
            // way in and out. A value that cannot be serialised has no BSON form at all, so an
            // empty wrapper is written and decoding reports it.
            let mut d = Document::new();
            d.insert("", v.clone());
            let mut buf = Vec::new();
            let _ = d.to_writer(&mut buf);
            put_varint(out, buf.len() as u64);
            out.extend_from_slice(&buf);
        }
    }
}

fn get_string(r: &mut Reader) -> Result<String, CodecError> {
    let at = r.offset();
    let len = r.len(r.remaining(), "string length")?;
    let bytes = r.bytes(len)?;
    String::from_utf8(bytes.to_vec()).map_err(|_| CodecError::new(at, "string is not UTF-8"))
}

fn get_doc(r: &mut Reader, depth: usize) -> Result<Document, CodecError> {
    // Each field needs at least 2 bytes (key length + type), which bounds the count.
    let n = r.len(r.remaining() / 2, "document field count")?;
    let mut d = Document::new();
    for _ in 0..n {
        let k = get_string(r)?;
        let v = get_elem(r, depth + 1)?;
        d.insert(k, v);
    }
    Ok(d)
}

/// Reads one compact element.
pub(crate) fn get_elem(r: &mut Reader, depth: usize) -> Result<Bson, CodecError> {
    let at = r.offset();
    let t = r.u8()?;
    get_value(r, t, depth).map_err(|e| {
        if e.offset == at + 1 && e.detail.starts_with("unknown") {
            CodecError::new(at, e.detail)
        } else {
            e
        }
    })
}

/// Reads the value part of an element of type `t`.
pub(crate) fn get_value(r: &mut Reader, t: u8, depth: usize) -> Result<Bson, CodecError> {
    if depth > MAX_DEPTH {
        return Err(r.err("values nested too deeply"));
    }
    let at = r.offset();
    Ok(match t {
        0x01 => Bson::Double(f64::from_bits(u64::from_le_bytes(r.array()?))),
        0x02 => Bson::String(get_string(r)?),
        0x03 => Bson::Document(get_doc(r, depth)?),
        0x04 => {
            let n = r.len(r.remaining(), "array length")?;
            let mut a = Vec::with_capacity(n);
            for _ in 0..n {
                a.push(get_elem(r, depth + 1)?);
            }
            Bson::Array(a)
        }
        0x05 => {
            let subtype = BinarySubtype::from(r.u8()?);
            let len = r.len(r.remaining(), "binary length")?;
            Bson::Binary(Binary {
                subtype,
                bytes: r.bytes(len)?.to_vec(),
            })
        }
        0x06 => Bson::Undefined,
        0x07 => Bson::ObjectId(bson::oid::ObjectId::from_bytes(r.array()?)),
        0x08 => match r.u8()? {
            0 => Bson::Boolean(false),
            1 => Bson::Boolean(true),
            b => return Err(CodecError::new(at, format!("bad boolean byte {b}"))),
        },
        0x09 => Bson::DateTime(DateTime::from_millis(r.svarint()?)),
        0x0A => Bson::Null,
        0x0B => {
            let pattern = get_string(r)?;
            let options = get_string(r)?;
            let bad = |_| CodecError::new(at, "regex contains a NUL byte");
            Bson::RegularExpression(Regex {
                pattern: pattern.try_into().map_err(bad)?,
                options: options.try_into().map_err(bad)?,
            })
        }
        0x0C => {
            let len = r.len(r.remaining(), "db pointer length")?;
            let bytes = r.bytes(len)?;
            let d = Document::from_reader(bytes)
                .map_err(|e| CodecError::new(at, format!("bad db pointer: {e}")))?;
            match d.into_iter().next() {
                Some((_, v @ Bson::DbPointer(_))) => v,
                _ => return Err(CodecError::new(at, "bad db pointer")),
            }
        }
        0x0D => Bson::JavaScriptCode(get_string(r)?),
        0x0E => Bson::Symbol(get_string(r)?),
        0x0F => {
            let code = get_string(r)?;
            let scope = get_doc(r, depth)?;
            Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope { code, scope })
        }
        0x10 => {
            let v = r.svarint()?;
            Bson::Int32(i32::try_from(v).map_err(|_| CodecError::new(at, "int32 out of range"))?)
        }
        0x11 => {
            let time = u32::try_from(r.varint()?)
                .map_err(|_| CodecError::new(at, "timestamp time out of range"))?;
            let increment = u32::try_from(r.varint()?)
                .map_err(|_| CodecError::new(at, "timestamp increment out of range"))?;
            Bson::Timestamp(Timestamp { time, increment })
        }
        0x12 => Bson::Int64(r.svarint()?),
        0x13 => Bson::Decimal128(Decimal128::from_bytes(r.array()?)),
        0xFF => Bson::MinKey,
        0x7F => Bson::MaxKey,
        _ => {
            return Err(CodecError::new(
                at.saturating_sub(1),
                format!("unknown element type {t:#04x}"),
            ))
        }
    })
}

/// GENERIC body: one element per value.
pub(crate) fn encode_generic(vals: &[&Bson], out: &mut Vec<u8>) {
    for v in vals {
        put_elem(out, v);
    }
}

/// Decodes a GENERIC body of `n` values.
pub(crate) fn decode_generic(r: &mut Reader, n: usize) -> Result<Vec<Bson>, CodecError> {
    // Every element takes at least one byte, so `n` beyond the data is corruption.
    if n > r.remaining() {
        return Err(r.err(format!(
            "{n} elements cannot fit in {} bytes",
            r.remaining()
        )));
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(get_elem(r, 0)?);
    }
    Ok(out)
}

/// Returns the CONST body if every value has the same encoding (bitwise, so -0.0 != 0.0).
pub(crate) fn encode_const(vals: &[&Bson]) -> Option<Vec<u8>> {
    let (first, rest) = vals.split_first()?;
    let mut a = Vec::new();
    put_elem(&mut a, first);
    let mut b = Vec::new();
    for v in rest {
        b.clear();
        put_elem(&mut b, v);
        if a != b {
            return None;
        }
    }
    Some(a)
}

/// Decodes a CONST body into `n` copies.
pub(crate) fn decode_const(r: &mut Reader, n: usize) -> Result<Vec<Bson>, CodecError> {
    let v = get_elem(r, 0)?;
    Ok(vec![v; n])
}

#[cfg(test)]
// Tests may panic: a panic is how a test fails.
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn every_type_round_trips_through_elements() {
        let vals = vec![
            Bson::Double(-0.0),
            Bson::Double(f64::from_bits(0x7ff8_0000_dead_beef)),
            Bson::String("héllo\0".into()),
            Bson::Document(doc! {"b": 1, "a": {"x": [1, "y"]}, "": null}),
            Bson::Array(vec![Bson::Int32(1), Bson::Int64(1), Bson::Double(1.0)]),
            Bson::Binary(Binary {
                subtype: BinarySubtype::UserDefined(0x85),
                bytes: vec![1, 2, 3],
            }),
            Bson::Undefined,
            Bson::ObjectId(bson::oid::ObjectId::from_bytes([7; 12])),
            Bson::Boolean(true),
            Bson::DateTime(DateTime::from_millis(-5)),
            Bson::Null,
            Bson::RegularExpression(Regex {
                pattern: "a.*b".to_string().try_into().unwrap(),
                options: "im".to_string().try_into().unwrap(),
            }),
            Bson::JavaScriptCode("f()".into()),
            Bson::Symbol("sym".into()),
            Bson::JavaScriptCodeWithScope(JavaScriptCodeWithScope {
                code: "g()".into(),
                scope: doc! {"k": 2},
            }),
            Bson::Int32(i32::MIN),
            Bson::Timestamp(Timestamp {
                time: u32::MAX,
                increment: 3,
            }),
            Bson::Int64(i64::MIN),
            Bson::Decimal128(Decimal128::from_bytes([9; 16])),
            Bson::MinKey,
            Bson::MaxKey,
        ];
        let refs: Vec<&Bson> = vals.iter().collect();
        let mut buf = Vec::new();
        encode_generic(&refs, &mut buf);
        let mut r = Reader::new(&buf, 0);
        let got = decode_generic(&mut r, vals.len()).ok();
        assert!(r.finish().is_ok());
        let got = got.unwrap_or_default();
        assert_eq!(got.len(), vals.len());
        for (a, b) in got.iter().zip(&vals) {
            let (mut x, mut y) = (Vec::new(), Vec::new());
            put_elem(&mut x, a);
            put_elem(&mut y, b);
            assert_eq!(x, y);
        }
    }

    #[test]
    fn deep_nesting_is_rejected_not_overflowed() {
        let mut buf = Vec::new();
        for _ in 0..100_000 {
            buf.extend_from_slice(&[0x04, 1]);
        }
        let mut r = Reader::new(&buf, 0);
        assert!(get_elem(&mut r, 0).is_err());
    }
}
