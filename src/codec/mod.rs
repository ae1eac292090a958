//! Column codecs: turn one column of a bucket (a value or a gap per row) into bytes and back.
//!
//! Layout of an encoded column (see `format-spec/codecs.md` for the byte-level spec):
//! a tag byte (codec id + presence/zstd flags), the presence section when some rows lack the
//! field, then the codec body for the present values only, optionally zstd-compressed.
//! The codec is chosen per column by trying the candidates that fit its types and keeping the
//! smallest, because size is the headline figure of the engine.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic
)]

mod bits;
mod float;
mod generic;
mod int;
mod oid;
mod presence;
mod rc;
mod rice;
pub mod spare;
mod string;
mod zstd_body;

pub(crate) use zstd_body::decompress_frame;

#[cfg(test)]
mod devops;
#[cfg(test)]
mod tests;

use bson::{Bson, DateTime};

use bits::Reader;
use presence::Layout;

/// Stable codec ids (low 5 bits of the tag byte). Never renumber: they are on disk.
pub mod ids {
    /// Any values: one compact element each.
    pub const GENERIC: u8 = 0;
    /// One compact element standing for every present row.
    pub const CONST: u8 = 1;
    /// Booleans as runs or a bitmap.
    pub const BOOL: u8 = 2;
    /// Int32 through an integer sequence.
    pub const INT32: u8 = 3;
    /// Int64 through an integer sequence.
    pub const INT64: u8 = 4;
    /// DateTime (milliseconds) through an integer sequence.
    pub const DATETIME: u8 = 5;
    /// Double: decimal-scaled integers, XOR or raw.
    pub const DOUBLE: u8 = 6;
    /// String: dictionary + indices, or raw.
    pub const STRING: u8 = 7;
    /// ObjectId split into seconds, process part and counter.
    pub const OBJECTID: u8 = 8;
    /// Timestamp split into seconds and increment.
    pub const TIMESTAMP: u8 = 9;
    /// Several BSON types: a type index per value, then one sub-column per type.
    pub const MIXED: u8 = 10;

    /// The name of codec `id` as `format-spec/codecs.md` spells it; `None` for an unknown id.
    pub fn name(id: u8) -> Option<&'static str> {
        Some(match id {
            GENERIC => "GENERIC",
            CONST => "CONST",
            BOOL => "BOOL",
            INT32 => "INT32",
            INT64 => "INT64",
            DATETIME => "DATETIME",
            DOUBLE => "DOUBLE",
            STRING => "STRING",
            OBJECTID => "OBJECTID",
            TIMESTAMP => "TIMESTAMP",
            MIXED => "MIXED",
            _ => return None,
        })
    }
}

/// Tag bits above the codec id.
const ID_MASK: u8 = 0x1f;
const FLAG_BITMAP: u8 = 0x20;
const FLAG_RUNS: u8 = 0x40;
const FLAG_ZSTD: u8 = 0x80;

/// A decoding failure, with the offset inside the encoded column where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError {
    /// Byte offset within the encoded column.
    pub offset: usize,
    /// What was wrong.
    pub detail: String,
}

impl CodecError {
    /// Builds an error at `offset`.
    pub fn new(offset: usize, detail: impl Into<String>) -> CodecError {
        CodecError {
            offset,
            detail: detail.into(),
        }
    }
}

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "corrupt column at byte {}: {}", self.offset, self.detail)
    }
}

impl std::error::Error for CodecError {}

/// Decoded present values, kept typed so the numeric fast paths never build `Bson`.
enum Vals {
    Bson(Vec<Bson>),
    I32(Vec<i64>),
    I64(Vec<i64>),
    Date(Vec<i64>),
    F64(Vec<f64>),
    /// Type index per value plus one decoded part per type.
    Mixed(Vec<u8>, Vec<Vals>),
}

impl Vals {
    fn into_bson(self) -> Vec<Bson> {
        match self {
            Vals::Bson(v) => v,
            Vals::I32(v) => v.into_iter().map(|x| Bson::Int32(x as i32)).collect(),
            Vals::I64(v) => v.into_iter().map(Bson::Int64).collect(),
            Vals::Date(v) => v
                .into_iter()
                .map(|x| Bson::DateTime(DateTime::from_millis(x)))
                .collect(),
            Vals::F64(v) => v.into_iter().map(Bson::Double).collect(),
            Vals::Mixed(idx, parts) => merge(&idx, parts.into_iter().map(Vals::into_bson)),
        }
    }

    fn into_f64(self) -> Option<Vec<f64>> {
        match self {
            Vals::I32(v) | Vals::I64(v) => Some(v.into_iter().map(|x| x as f64).collect()),
            Vals::F64(v) => Some(v),
            Vals::Date(_) => None,
            Vals::Bson(v) => v
                .into_iter()
                .map(|b| match b {
                    Bson::Int32(x) => Some(f64::from(x)),
                    Bson::Int64(x) => Some(x as f64),
                    Bson::Double(x) => Some(x),
                    _ => None,
                })
                .collect(),
            Vals::Mixed(idx, parts) => {
                let parts: Option<Vec<Vec<f64>>> = parts.into_iter().map(Vals::into_f64).collect();
                Some(merge(&idx, parts?.into_iter()))
            }
        }
    }

    fn into_i64(self) -> Option<Vec<i64>> {
        match self {
            Vals::I32(v) | Vals::I64(v) | Vals::Date(v) => Some(v),
            Vals::F64(_) => None,
            Vals::Bson(v) => v
                .into_iter()
                .map(|b| match b {
                    Bson::Int32(x) => Some(i64::from(x)),
                    Bson::Int64(x) => Some(x),
                    Bson::DateTime(d) => Some(d.timestamp_millis()),
                    _ => None,
                })
                .collect(),
            Vals::Mixed(idx, parts) => {
                let parts: Option<Vec<Vec<i64>>> = parts.into_iter().map(Vals::into_i64).collect();
                Some(merge(&idx, parts?.into_iter()))
            }
        }
    }
}

/// Interleaves per-type parts back into row order. The part sizes were derived from `idx`, so
/// every pull succeeds; a missing value could only come from a bug and is skipped.
fn merge<T>(idx: &[u8], parts: impl Iterator<Item = Vec<T>>) -> Vec<T> {
    let mut iters: Vec<std::vec::IntoIter<T>> = parts.map(Vec::into_iter).collect();
    idx.iter()
        .filter_map(|&i| iters.get_mut(i as usize).and_then(Iterator::next))
        .collect()
}

/// Encodes values that all have the same BSON type; returns (codec id, body). `last`: nothing
/// follows the body (it ends the column or the MIXED parts), so length prefixes can go.
fn encode_typed(vals: &[&Bson], last: bool) -> (u8, Vec<u8>) {
    let mut cands: Vec<(u8, Vec<u8>)> = Vec::new();
    let ints = |f: fn(&Bson) -> i64| -> Vec<u8> {
        let v: Vec<i64> = vals.iter().map(|b| f(b)).collect();
        let mut out = Vec::new();
        if last {
            int::encode_last(&v, &mut out);
        } else {
            int::encode(&v, &mut out);
        }
        out
    };
    match vals.first() {
        Some(Bson::Int32(_)) => cands.push((
            ids::INT32,
            ints(|b| match b {
                Bson::Int32(x) => i64::from(*x),
                _ => 0,
            }),
        )),
        Some(Bson::Int64(_)) => cands.push((
            ids::INT64,
            ints(|b| match b {
                Bson::Int64(x) => *x,
                _ => 0,
            }),
        )),
        Some(Bson::DateTime(_)) => {
            let v: Vec<i64> = (vals.iter())
                .map(|b| match b {
                    Bson::DateTime(x) => x.timestamp_millis(),
                    _ => 0,
                })
                .collect();
            let mut out = Vec::new();
            int::encode_dates(&v, &mut out, last);
            cands.push((ids::DATETIME, out));
        }
        Some(Bson::Double(_)) => {
            let v: Vec<f64> = vals
                .iter()
                .map(|b| match b {
                    Bson::Double(x) => *x,
                    _ => 0.0,
                })
                .collect();
            let mut out = Vec::new();
            float::encode(&v, &mut out, last);
            cands.push((ids::DOUBLE, out));
        }
        Some(Bson::String(_)) => {
            let v: Vec<&str> = vals
                .iter()
                .map(|b| match b {
                    Bson::String(s) => s.as_str(),
                    _ => "",
                })
                .collect();
            let mut out = Vec::new();
            string::encode(&v, &mut out, last);
            cands.push((ids::STRING, out));
        }
        Some(Bson::ObjectId(_)) => {
            let v: Vec<_> = vals
                .iter()
                .filter_map(|b| match b {
                    Bson::ObjectId(o) => Some(*o),
                    _ => None,
                })
                .collect();
            let mut out = Vec::new();
            oid::encode(&v, &mut out, last);
            cands.push((ids::OBJECTID, out));
        }
        Some(Bson::Timestamp(_)) => {
            let v: Vec<_> = vals
                .iter()
                .filter_map(|b| match b {
                    Bson::Timestamp(t) => Some(*t),
                    _ => None,
                })
                .collect();
            let mut out = Vec::new();
            oid::encode_ts(&v, &mut out, last);
            cands.push((ids::TIMESTAMP, out));
        }
        Some(Bson::Boolean(_)) => {
            let v: Vec<bool> = vals
                .iter()
                .map(|b| matches!(b, Bson::Boolean(true)))
                .collect();
            let mut out = vec![0];
            if presence::encode(&v, &mut out) == Layout::Bitmap {
                if let Some(first) = out.first_mut() {
                    *first = 1;
                }
            }
            cands.push((ids::BOOL, out));
        }
        _ => {}
    }
    // CONST pays off for untyped repeats (null, documents...) and for single values, where it
    // skips the typed codec's mode bytes.
    if cands.is_empty() || vals.len() == 1 {
        if let Some(c) = generic::encode_const(vals) {
            cands.push((ids::CONST, c));
        }
    }
    if cands.is_empty() {
        let mut out = Vec::new();
        generic::encode_generic(vals, &mut out);
        cands.push((ids::GENERIC, out));
    }
    cands
        .into_iter()
        .min_by_key(|c| c.1.len())
        .unwrap_or((ids::GENERIC, Vec::new()))
}

/// MIXED body: type count, type index sequence, then one (id, body) sub-column per type.
fn encode_mixed(vals: &[&Bson]) -> Vec<u8> {
    let mut types: Vec<u8> = Vec::new();
    let mut groups: Vec<Vec<&Bson>> = Vec::new();
    let mut idx: Vec<i64> = Vec::with_capacity(vals.len());
    for v in vals {
        let t = generic::type_code(v);
        let i = match types.iter().position(|&x| x == t) {
            Some(i) => i,
            None => {
                types.push(t);
                groups.push(Vec::new());
                types.len() - 1
            }
        };
        if let Some(g) = groups.get_mut(i) {
            g.push(v);
        }
        idx.push(i as i64);
    }
    let mut out = vec![types.len() as u8];
    int::encode(&idx, &mut out);
    for (j, g) in groups.iter().enumerate() {
        let (id, body) = encode_typed(g, j + 1 == groups.len());
        out.push(id);
        out.extend_from_slice(&body);
    }
    out
}

/// Chooses the codec for the present values; returns (codec id, body).
fn encode_values(vals: &[&Bson]) -> (u8, Vec<u8>) {
    let Some(first) = vals.first() else {
        return (ids::GENERIC, Vec::new());
    };
    let t = generic::type_code(first);
    if vals.iter().all(|v| generic::type_code(v) == t) {
        return encode_typed(vals, true);
    }
    let mixed = encode_mixed(vals);
    let mut generic_body = Vec::new();
    generic::encode_generic(vals, &mut generic_body);
    if mixed.len() < generic_body.len() {
        (ids::MIXED, mixed)
    } else {
        (ids::GENERIC, generic_body)
    }
}

/// Encodes a column (one entry per row, `None` = field absent at that row), appending to `out`.
pub fn encode_column(values: &[Option<Bson>], out: &mut Vec<u8>) {
    let present: Vec<&Bson> = values.iter().flatten().collect();
    let (id, body) = encode_values(&present);
    let flags: Option<Vec<bool>> =
        (present.len() != values.len()).then(|| values.iter().map(Option::is_some).collect());
    finish_column(id, body, flags.as_deref(), out);
}

/// The present values of a column that all have one of the common scalar types, as the
/// bucket catalog holds them: what [`encode_column_typed`] encodes without building `Bson`.
#[derive(Debug, Clone, Copy)]
pub enum Typed<'a> {
    /// Int32 values.
    I32(&'a [i32]),
    /// Int64 values.
    I64(&'a [i64]),
    /// Double values.
    F64(&'a [f64]),
    /// DateTime values (milliseconds).
    Date(&'a [i64]),
    /// String values.
    Str(&'a [String]),
    /// ObjectId values.
    Oid(&'a [bson::oid::ObjectId]),
    /// Boolean values.
    Bool(&'a [bool]),
}

impl Typed<'_> {
    /// Number of values.
    pub fn len(&self) -> usize {
        match self {
            Typed::I32(v) => v.len(),
            Typed::I64(v) | Typed::Date(v) => v.len(),
            Typed::F64(v) => v.len(),
            Typed::Str(v) => v.len(),
            Typed::Oid(v) => v.len(),
            Typed::Bool(v) => v.len(),
        }
    }

    /// True when there are no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get(&self, i: usize) -> Option<Bson> {
        Some(match self {
            Typed::I32(v) => Bson::Int32(*v.get(i)?),
            Typed::I64(v) => Bson::Int64(*v.get(i)?),
            Typed::F64(v) => Bson::Double(*v.get(i)?),
            Typed::Date(v) => Bson::DateTime(DateTime::from_millis(*v.get(i)?)),
            Typed::Str(v) => Bson::String(v.get(i)?.clone()),
            Typed::Oid(v) => Bson::ObjectId(*v.get(i)?),
            Typed::Bool(v) => Bson::Boolean(*v.get(i)?),
        })
    }
}

/// Encodes a column given its present values and, when some rows lack the field, a flag per
/// row (`vals.len()` of them true). The bytes are exactly those [`encode_column`] writes for
/// the same values as `Bson`: this only skips building them.
pub fn encode_column_typed(vals: Typed<'_>, present: Option<&[bool]>, out: &mut Vec<u8>) {
    if vals.len() < 2 {
        // One value may be cheaper as CONST, which needs the `Bson` value anyway.
        let mut next = 0;
        let mut take = || {
            next += 1;
            vals.get(next - 1)
        };
        let values: Vec<Option<Bson>> = match present {
            None => (0..vals.len()).map(|_| take()).collect(),
            Some(f) => f.iter().map(|&p| if p { take() } else { None }).collect(),
        };
        return encode_column(&values, out);
    }
    let mut body = Vec::new();
    let id = match vals {
        Typed::I32(v) => {
            let wide: Vec<i64> = v.iter().map(|&x| i64::from(x)).collect();
            int::encode_last(&wide, &mut body);
            ids::INT32
        }
        Typed::I64(v) => {
            int::encode_last(v, &mut body);
            ids::INT64
        }
        Typed::Date(v) => {
            int::encode_dates(v, &mut body, true);
            ids::DATETIME
        }
        Typed::F64(v) => {
            float::encode(v, &mut body, true);
            ids::DOUBLE
        }
        Typed::Str(v) => {
            let strs: Vec<&str> = v.iter().map(String::as_str).collect();
            string::encode(&strs, &mut body, true);
            ids::STRING
        }
        Typed::Oid(v) => {
            oid::encode(v, &mut body, true);
            ids::OBJECTID
        }
        Typed::Bool(v) => {
            body.push(0);
            if presence::encode(v, &mut body) == Layout::Bitmap {
                if let Some(first) = body.first_mut() {
                    *first = 1;
                }
            }
            ids::BOOL
        }
    };
    let present = present.filter(|f| f.len() != vals.len());
    finish_column(id, body, present, out);
}

/// Writes the tag, the presence section (when `flags` is given) and the body, compressed when
/// that pays.
fn finish_column(id: u8, body: Vec<u8>, flags: Option<&[bool]>, out: &mut Vec<u8>) {
    let mut tag = id;
    let mut pres = Vec::new();
    if let Some(flags) = flags {
        tag |= match presence::encode(flags, &mut pres) {
            Layout::Bitmap => FLAG_BITMAP,
            Layout::Runs => FLAG_RUNS,
        };
    }
    let body = match zstd_body::maybe_compress(id, &body) {
        Some(z) => {
            tag |= FLAG_ZSTD;
            z
        }
        None => body,
    };
    out.push(tag);
    out.extend_from_slice(&pres);
    out.extend_from_slice(&body);
}

/// Decodes the body of codec `id` holding `n` values.
fn decode_body(
    id: u8,
    id_at: usize,
    r: &mut Reader,
    n: usize,
    nested: bool,
) -> Result<Vals, CodecError> {
    let at = r.offset();
    Ok(match id {
        ids::GENERIC => Vals::Bson(generic::decode_generic(r, n)?),
        ids::CONST => {
            if n == 0 {
                return Err(CodecError::new(at, "CONST column without values"));
            }
            Vals::Bson(generic::decode_const(r, n)?)
        }
        ids::BOOL => {
            let layout = match r.u8()? {
                0 => Layout::Runs,
                1 => Layout::Bitmap,
                l => return Err(CodecError::new(at, format!("unknown bool layout {l}"))),
            };
            let f = presence::decode(r, layout, n)?;
            Vals::Bson(f.into_iter().map(Bson::Boolean).collect())
        }
        ids::INT32 => {
            let v = int::decode(r, n)?;
            if v.iter().any(|&x| i32::try_from(x).is_err()) {
                return Err(CodecError::new(at, "int32 value out of range"));
            }
            Vals::I32(v)
        }
        ids::INT64 => Vals::I64(int::decode(r, n)?),
        ids::DATETIME => Vals::Date(int::decode(r, n)?),
        ids::DOUBLE => Vals::F64(float::decode(r, n)?),
        ids::STRING => Vals::Bson(
            string::decode(r, n)?
                .into_iter()
                .map(Bson::String)
                .collect(),
        ),
        ids::OBJECTID => Vals::Bson(oid::decode(r, n)?.into_iter().map(Bson::ObjectId).collect()),
        ids::TIMESTAMP => Vals::Bson(
            oid::decode_ts(r, n)?
                .into_iter()
                .map(Bson::Timestamp)
                .collect(),
        ),
        ids::MIXED if !nested => {
            let k = usize::from(r.u8()?);
            if k == 0 || k > n {
                return Err(CodecError::new(at, format!("bad type count {k}")));
            }
            let idx_at = r.offset();
            let idx = int::decode(r, n)?;
            let mut counts = vec![0usize; k];
            let mut small = Vec::with_capacity(n);
            for &i in &idx {
                let c = usize::try_from(i)
                    .ok()
                    .and_then(|i| counts.get_mut(i))
                    .ok_or_else(|| {
                        CodecError::new(idx_at, format!("type index {i} out of range"))
                    })?;
                *c += 1;
                small.push(i as u8);
            }
            let mut parts = Vec::with_capacity(k);
            for c in counts {
                let id_at = r.offset();
                let sub = r.u8()?;
                if sub & !ID_MASK != 0 {
                    return Err(CodecError::new(id_at, "flags inside a MIXED part"));
                }
                parts.push(decode_body(sub, id_at, r, c, true)?);
            }
            Vals::Mixed(small, parts)
        }
        _ => return Err(CodecError::new(id_at, format!("unknown codec id {id}"))),
    })
}

/// Parses the tag, presence and body: (presence flags if any rows are absent, present values).
fn decode_parts(data: &[u8], rows: usize) -> Result<(Option<Vec<bool>>, Vals), CodecError> {
    let mut r = Reader::new(data, 0);
    let tag = r.u8()?;
    let id = tag & ID_MASK;
    let flags = match (tag & FLAG_BITMAP != 0, tag & FLAG_RUNS != 0) {
        (false, false) => None,
        (true, false) => Some(presence::decode(&mut r, Layout::Bitmap, rows)?),
        (false, true) => Some(presence::decode(&mut r, Layout::Runs, rows)?),
        (true, true) => return Err(CodecError::new(0, "both presence layouts flagged")),
    };
    let n = flags
        .as_ref()
        .map_or(rows, |f| f.iter().filter(|&&b| b).count());
    let vals = if tag & FLAG_ZSTD != 0 {
        let at = r.offset();
        let buf = zstd_body::decompress(&mut r)?;
        let mut inner = Reader::new(&buf, 0);
        let wrap = |e: CodecError| {
            CodecError::new(
                at,
                format!("at byte {} of the zstd body: {}", e.offset, e.detail),
            )
        };
        let vals = decode_body(id, 0, &mut inner, n, false).map_err(wrap)?;
        inner.finish().map_err(wrap)?;
        vals
    } else {
        decode_body(id, 0, &mut r, n, false)?
    };
    r.finish()?;
    Ok((flags, vals))
}

/// A numeric column decoded without `Bson` values or per-row `Option`s: what aggregation
/// wants (a sum needs only `values`; row-aligned work zips `present` with them).
#[derive(Debug, Clone, PartialEq)]
pub struct Dense<T> {
    /// The values of the rows that have one, in row order.
    pub values: Vec<T>,
    /// Per row, whether it has a value; `None` when every row has one (then `values` has
    /// one entry per row).
    pub present: Option<Vec<bool>>,
}

impl<T> Dense<T> {
    /// One entry per row, `None` where the row has no value.
    pub fn into_rows(self) -> Vec<Option<T>> {
        match self.present {
            None => self.values.into_iter().map(Some).collect(),
            Some(flags) => {
                let mut it = self.values.into_iter();
                flags
                    .into_iter()
                    .map(|f| if f { it.next() } else { None })
                    .collect()
            }
        }
    }
}

/// Decodes a DateTime column with a value in every row as runs of equal times `(ms, rows)`,
/// when its encoding stores them so (sparse or constant steps of order 1: several rows per
/// timestamp); `Ok(None)` for other encodings, which [`decode_i64`] reads. Counting rows per
/// time bin then takes a step per run instead of per row.
pub fn decode_date_runs(data: &[u8], rows: usize) -> Result<Option<Vec<(i64, u32)>>, CodecError> {
    let mut r = Reader::new(data, 0);
    let tag = r.u8()?;
    if tag & (FLAG_BITMAP | FLAG_RUNS) != 0 || tag & ID_MASK != ids::DATETIME {
        return Ok(None);
    }
    if tag & FLAG_ZSTD == 0 {
        let runs = int::decode_runs(&mut r, rows)?;
        if runs.is_some() {
            r.finish()?;
        }
        return Ok(runs);
    }
    let at = r.offset();
    let buf = zstd_body::decompress(&mut r)?;
    r.finish()?;
    let mut inner = Reader::new(&buf, 0);
    let wrap = |e: CodecError| {
        CodecError::new(
            at,
            format!("at byte {} of the zstd body: {}", e.offset, e.detail),
        )
    };
    let runs = int::decode_runs(&mut inner, rows).map_err(wrap)?;
    if runs.is_some() {
        inner.finish().map_err(wrap)?;
    }
    Ok(runs)
}

/// Decodes a DateTime column with a value in every row as `(first, step)` when it is stored
/// as an arithmetic progression (regular timestamps: row `i` holds `first + i * step`);
/// `Ok(None)` for other encodings, which [`decode_i64`] reads. The rows of a time bin then
/// follow from the bin's bounds, with no time decoded.
pub fn decode_date_progression(data: &[u8], rows: usize) -> Result<Option<(i64, i64)>, CodecError> {
    let mut r = Reader::new(data, 0);
    let tag = r.u8()?;
    // A progression is a few bytes: zstd never stores one.
    if tag & (FLAG_BITMAP | FLAG_RUNS | FLAG_ZSTD) != 0 || tag & ID_MASK != ids::DATETIME {
        return Ok(None);
    }
    let p = int::decode_progression(&mut r, rows)?;
    if p.is_some() {
        r.finish()?;
    }
    Ok(p)
}

/// A bound on the magnitude of every value of an Int32 or Int64 column with a value in every
/// row, read from the column's header without decoding it; `None` unless the column is stored
/// as plain Rice codes, the usual form of a metric that moves by small steps. It holds for a
/// column that decodes. A sum of `n` values under it fits in an `i64` when `n` times it does.
pub fn int_magnitude_bound(data: &[u8], rows: usize) -> Option<u64> {
    let mut r = Reader::new(data, 0);
    // Flags (presence, zstd) are the tag's high bits: none here.
    match r.u8().ok()? {
        ids::INT32 | ids::INT64 => int::magnitude_bound(&mut r, rows),
        _ => None,
    }
}

/// The codec id (see [`ids`]) of an encoded column, from its tag byte; `None` when empty.
pub fn column_codec(data: &[u8]) -> Option<u8> {
    data.first().map(|t| t & ID_MASK)
}

/// Decodes a column as doubles, present values only (see [`Dense`]). `Ok(None)` when some
/// present value is neither Int32, Int64 nor Double. Int64 values beyond 2^53 are rounded.
pub fn decode_f64_dense(data: &[u8], rows: usize) -> Result<Option<Dense<f64>>, CodecError> {
    let (present, vals) = decode_parts(data, rows)?;
    Ok(vals.into_f64().map(|values| Dense { values, present }))
}

/// Decodes a column of Int32, Int64 or DateTime (as epoch milliseconds) values, present values
/// only (see [`Dense`]). `Ok(None)` when some present value has another type.
pub fn decode_i64_dense(data: &[u8], rows: usize) -> Result<Option<Dense<i64>>, CodecError> {
    let (present, vals) = decode_parts(data, rows)?;
    Ok(vals.into_i64().map(|values| Dense { values, present }))
}

/// Decodes a column of exactly `rows` entries.
pub fn decode_column(data: &[u8], rows: usize) -> Result<Vec<Option<Bson>>, CodecError> {
    let (flags, vals) = decode_parts(data, rows)?;
    Ok(Dense {
        values: vals.into_bson(),
        present: flags,
    }
    .into_rows())
}

/// Decodes a column as doubles without building `Bson` values. `Ok(None)` when some present
/// value is neither Int32, Int64 nor Double. Int64 values beyond 2^53 are rounded.
pub fn decode_f64(data: &[u8], rows: usize) -> Result<Option<Vec<Option<f64>>>, CodecError> {
    Ok(decode_f64_dense(data, rows)?.map(Dense::into_rows))
}

/// Decodes a column of Int32, Int64 or DateTime (as epoch milliseconds) values without building
/// `Bson` values. `Ok(None)` when some present value has another type.
pub fn decode_i64(data: &[u8], rows: usize) -> Result<Option<Vec<Option<i64>>>, CodecError> {
    Ok(decode_i64_dense(data, rows)?.map(Dense::into_rows))
}
