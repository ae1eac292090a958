//! BSON values derived from fuzz input, biased toward what the codecs and the query engine
//! treat specially (delta-friendly sequences, NaN payloads, -0.0, repeated strings, ...).

use super::Input;
use tsbucket::bson::oid::ObjectId;
use tsbucket::bson::spec::BinarySubtype;
use tsbucket::bson::{Binary, Bson, DateTime, Decimal128, Document, Regex, Timestamp};

/// Doubles that codecs must keep bit for bit.
const SPECIAL_DOUBLES: [f64; 10] = [
    0.0,
    -0.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::MIN_POSITIVE,
    f64::MAX,
    f64::MIN,
    f64::EPSILON,
    5e-324,
];

const WORDS: [&str; 8] = ["", "a", "cpu", "host_1", "us-east-1", "é", "\u{0}x", "temp"];

/// A double: a special value, a short decimal, a neighbour of `prev`, or arbitrary bits.
pub fn double(inp: &mut Input<'_>, prev: f64) -> f64 {
    match inp.u8() % 6 {
        0 => SPECIAL_DOUBLES[inp.below(SPECIAL_DOUBLES.len())],
        1 => f64::from(inp.u16() as i16) / [1.0, 10.0, 100.0, 1000.0][inp.below(4)],
        2 => prev,
        3 => prev + f64::from(inp.u8() as i8) / 100.0,
        4 => f64::from_bits(0x7ff0_0000_0000_0000 | inp.u64()),
        _ => f64::from_bits(inp.u64()),
    }
}

/// An integer: a step from `prev`, an extreme, or arbitrary bits.
pub fn int64(inp: &mut Input<'_>, prev: i64) -> i64 {
    match inp.u8() % 6 {
        0 => prev,
        1 => prev.wrapping_add(i64::from(inp.u8() as i8)),
        2 => prev.wrapping_add(i64::from(inp.u32() as i32)),
        3 => [i64::MIN, i64::MAX, 0, -1, 1, i64::from(i32::MIN)][inp.below(6)],
        _ => inp.u64() as i64,
    }
}

/// A string, often one of a few repeated words.
pub fn string(inp: &mut Input<'_>) -> String {
    if inp.one_in(2) {
        WORDS[inp.below(WORDS.len())].to_string()
    } else {
        String::from_utf8_lossy(inp.short_bytes()).into_owned()
    }
}

/// A field name (no NUL, which BSON keys cannot hold).
pub fn key(inp: &mut Input<'_>) -> String {
    string(inp).replace('\0', "")
}

/// An ObjectId, often close to `prev` (as generated ids are).
pub fn object_id(inp: &mut Input<'_>, prev: ObjectId) -> ObjectId {
    let mut b = prev.bytes();
    match inp.u8() % 3 {
        0 => {
            let c = u32::from_be_bytes([0, b[9], b[10], b[11]]).wrapping_add(u32::from(inp.u8()));
            b[9..12].copy_from_slice(&c.to_be_bytes()[1..]);
        }
        1 => b[..4].copy_from_slice(&inp.u32().to_be_bytes()),
        _ => {
            for x in &mut b {
                *x = inp.u8();
            }
        }
    }
    ObjectId::from_bytes(b)
}

/// A timestamp.
pub fn timestamp(inp: &mut Input<'_>) -> Timestamp {
    Timestamp {
        time: inp.u32(),
        increment: inp.u32(),
    }
}

/// Any BSON value; `depth` bounds nesting.
pub fn any(inp: &mut Input<'_>, depth: u8) -> Bson {
    match inp.u8() % 20 {
        0 => Bson::Double(double(inp, 0.0)),
        1 => Bson::String(string(inp)),
        2 if depth > 0 => Bson::Document(document(inp, depth - 1)),
        3 if depth > 0 => {
            let n = inp.below(4);
            Bson::Array((0..n).map(|_| any(inp, depth - 1)).collect())
        }
        4 => Bson::Binary(Binary {
            subtype: match inp.u8() % 3 {
                0 => BinarySubtype::Generic,
                1 => BinarySubtype::Uuid,
                _ => BinarySubtype::UserDefined(0x80 | inp.u8()),
            },
            bytes: inp.short_bytes().to_vec(),
        }),
        5 => Bson::Undefined,
        6 => Bson::ObjectId(object_id(inp, ObjectId::from_bytes([0; 12]))),
        7 => Bson::Boolean(inp.one_in(2)),
        8 => Bson::DateTime(DateTime::from_millis(int64(inp, 1_700_000_000_000))),
        9 => Bson::Null,
        10 => {
            let pattern = key(inp).try_into();
            let options = ["", "i", "ms"][inp.below(3)].try_into();
            match (pattern, options) {
                (Ok(pattern), Ok(options)) => Bson::RegularExpression(Regex { pattern, options }),
                _ => Bson::Null,
            }
        }
        11 => Bson::JavaScriptCode(string(inp)),
        12 => Bson::Symbol(string(inp)),
        13 => Bson::Int32(inp.u32() as i32),
        14 => Bson::Timestamp(timestamp(inp)),
        15 => Bson::Int64(int64(inp, 0)),
        16 => {
            let mut b = [0u8; 16];
            for x in &mut b {
                *x = inp.u8();
            }
            Bson::Decimal128(Decimal128::from_bytes(b))
        }
        17 => Bson::MinKey,
        18 => Bson::MaxKey,
        _ => Bson::Int32(i32::from(inp.u8() as i8)),
    }
}

/// A document of up to 4 fields.
pub fn document(inp: &mut Input<'_>, depth: u8) -> Document {
    let mut d = Document::new();
    for _ in 0..inp.below(5) {
        let k = key(inp);
        d.insert(k, any(inp, depth));
    }
    d
}

/// The BSON bytes of `v` inside a one-field document: equal bytes mean equal values, bit for
/// bit (unlike `==`, for which NaN differs from itself and -0.0 equals 0.0).
pub fn value_bytes(v: &Bson) -> Vec<u8> {
    let mut d = Document::new();
    d.insert("", v.clone());
    d.to_vec().unwrap_or_default()
}

/// Bitwise equality of optional values.
pub fn same(a: &Option<Bson>, b: &Option<Bson>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => value_bytes(a) == value_bytes(b),
        _ => false,
    }
}
