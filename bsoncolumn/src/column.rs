//! The column's control bytes: literals, Simple-8b blocks of deltas, interleaved blocks of
//! objects, and the terminating 0x00.

use std::collections::HashSet;

use bson::oid::ObjectId;
use bson::{Bson, Decimal128, Document, Timestamp};

use crate::element::{self, type_name, BINARY, CODE_WITH_SCOPE};
use crate::encoding::{
    bytes_to_int, int_to_oid, int_to_string, oid_to_int, scale_double, scale_index, string_to_int,
    unscale_double, unzigzag128, unzigzag64, BITS_SCALE,
};
use crate::simple8b::{Cursor, Slot};
use crate::{DecodeError, ErrorKind, Limits};

type Res<T> = Result<T, DecodeError>;

fn malformed(at: usize, message: impl Into<String>) -> DecodeError {
    DecodeError::new(at, ErrorKind::Malformed, message)
}

fn from_pair((at, message): (usize, String)) -> DecodeError {
    malformed(at, message)
}

const INTERLEAVED_LEGACY: u8 = 0xF0;
const INTERLEAVED: u8 = 0xF1;
const INTERLEAVED_ARRAY_ROOT: u8 = 0xF2;

/// A literal control byte is a BSON type: 0x01 to 0x1F, MinKey (0xFF) or MaxKey (0x7F).
fn is_literal(control: u8) -> bool {
    control & 0xE0 == 0 || control == element::MIN_KEY || control == element::MAX_KEY
}

/// What a stream's deltas accumulate into, chosen by the type of its last literal.
#[derive(Clone, Copy, Debug)]
enum Acc {
    /// 64-bit values. Dates, timestamps and ObjectIds store delta-of-deltas: `delta` is the last
    /// delta and `value` the running value; the others add slots to `value` directly. `scale`
    /// is the current block's scale, which only doubles use.
    Narrow {
        value: i64,
        delta: i64,
        delta_of_delta: bool,
        scale: u8,
    },
    /// 128-bit values: strings, JavaScript code, binaries and decimals. A binary keeps its
    /// subtype and length, which deltas do not change.
    Wide {
        value: i128,
        binary: Option<(u8, usize)>,
    },
}

impl Acc {
    fn narrow(value: i64, delta_of_delta: bool) -> Acc {
        Acc::Narrow {
            value,
            delta: 0,
            delta_of_delta,
            scale: BITS_SCALE,
        }
    }
}

/// One sequence of values: the column itself outside interleaved blocks, or one scalar field of
/// an interleaved block's objects.
#[derive(Clone, Debug)]
struct Stream {
    /// The last value given, which a zero delta repeats; `None` before any literal, when every
    /// slot reads as missing.
    last: Option<Bson>,
    /// A rough size of `last` in memory, for the output limit.
    last_size: usize,
    acc: Acc,
    /// The slots left of the current Simple-8b block.
    cursor: Option<Cursor>,
    /// The last slot read, which a run-length word repeats: zero after a literal.
    prev: Slot,
}

impl Stream {
    fn after(last: Option<Bson>, last_size: usize) -> Stream {
        Stream {
            last,
            last_size,
            acc: Acc::narrow(0, false),
            cursor: None,
            prev: Some(0),
        }
    }

    /// A stream whose last value is this element (a literal, or a leaf of a reference object).
    fn from_element(ty: u8, value: &[u8], at: usize, depth: usize) -> Res<Stream> {
        if ty == CODE_WITH_SCOPE {
            return Err(malformed(
                at,
                "code with scope is not a valid value in a column",
            ));
        }
        let text = matches!(ty, element::STRING | element::CODE | element::SYMBOL);
        if text
            && std::str::from_utf8(
                value
                    .get(4..value.len().saturating_sub(1))
                    .unwrap_or_default(),
            )
            .is_err()
        {
            return Err(DecodeError::new(
                at,
                ErrorKind::Unsupported,
                format!(
                    "the {} is not UTF-8, which bson strings cannot hold",
                    type_name(ty)
                ),
            ));
        }
        let bson = element::to_bson(ty, value, at, depth).map_err(from_pair)?;
        let acc = match (&bson, ty) {
            (Bson::String(s), _) | (Bson::JavaScriptCode(s), _) => Acc::Wide {
                value: string_to_int(s.as_bytes()),
                binary: None,
            },
            // The raw bytes, as the old binary subtype keeps an inner length the bson crate drops.
            (Bson::Binary(_), BINARY) => {
                let subtype = value.get(4).copied().unwrap_or(0);
                let raw = value.get(5..).unwrap_or_default();
                Acc::Wide {
                    value: bytes_to_int(raw).unwrap_or(0),
                    binary: Some((subtype, raw.len())),
                }
            }
            (Bson::Decimal128(d), _) => Acc::Wide {
                value: i128::from_le_bytes(d.bytes()),
                binary: None,
            },
            (Bson::ObjectId(o), _) => Acc::narrow(oid_to_int(&o.bytes()), true),
            (Bson::DateTime(d), _) => Acc::narrow(d.timestamp_millis(), true),
            (Bson::Timestamp(t), _) => Acc::narrow(timestamp_to_int(*t), true),
            (Bson::Boolean(b), _) => Acc::narrow(i64::from(*b), false),
            (Bson::Int32(i), _) => Acc::narrow(i64::from(*i), false),
            (Bson::Int64(i), _) => Acc::narrow(*i, false),
            _ => Acc::narrow(0, false),
        };
        Ok(Stream {
            last: Some(bson),
            last_size: value.len() + 16,
            acc,
            cursor: None,
            prev: Some(0),
        })
    }

    fn has_pending(&self) -> bool {
        self.cursor.as_ref().is_some_and(Cursor::has_more)
    }

    /// Starts the Simple-8b block whose control byte is at `at`; returns where it ends.
    fn start_block(&mut self, input: &[u8], control: u8, at: usize) -> Res<usize> {
        let words = usize::from(control & 0x0F) + 1;
        let start = at + 1;
        let end = start + 8 * words;
        if end > input.len() {
            return Err(malformed(
                at,
                format!(
                    "control byte {control:#04x} announces {words} Simple-8b words but only {} \
                     bytes follow",
                    input.len() - start
                ),
            ));
        }
        let scale = scale_index(control).ok_or_else(|| {
            malformed(
                at,
                format!("control byte {control:#04x} is not a known control"),
            )
        })?;
        let wide = match &mut self.acc {
            Acc::Narrow {
                value, scale: s, ..
            } => {
                if let Some(Bson::Double(d)) = &self.last {
                    let d = *d;
                    // Doubles restart from the last value at each block's own scale.
                    *value = scale_double(d, scale).ok_or_else(|| {
                        malformed(
                            at,
                            format!("the previous double {d} has no exact form at scale {scale}"),
                        )
                    })?;
                    *s = scale;
                } else if scale != BITS_SCALE {
                    return Err(malformed(
                        at,
                        format!(
                            "control byte {control:#04x} scales doubles but follows a {} value",
                            self.last.as_ref().map_or("missing", |b| bson_type_name(b))
                        ),
                    ));
                }
                false
            }
            Acc::Wide { .. } => {
                if scale != BITS_SCALE {
                    return Err(malformed(
                        at,
                        format!("control byte {control:#04x} scales doubles but follows a 128-bit value"),
                    ));
                }
                true
            }
        };
        self.cursor = Some(Cursor::new(start, end, wide));
        Ok(end)
    }

    /// The next value of the current block: `None` once it is done, `Some(None)` for a missing
    /// value.
    fn next(&mut self, input: &[u8]) -> Res<Option<Option<Bson>>> {
        let Some(cursor) = &mut self.cursor else {
            return Ok(None);
        };
        let slot = cursor.next_slot(input, &mut self.prev).map_err(from_pair)?;
        let at = cursor.word_at();
        let Some(slot) = slot else {
            self.cursor = None;
            return Ok(None);
        };
        let (Some(raw), Some(last)) = (slot, &self.last) else {
            return Ok(Some(None));
        };
        let value = match &mut self.acc {
            Acc::Narrow {
                value,
                delta,
                delta_of_delta,
                scale,
            } => {
                let d = unzigzag64(raw as u64);
                if *delta_of_delta {
                    *delta = delta.wrapping_add(d);
                    *value = value.wrapping_add(*delta);
                } else if d == 0 {
                    return Ok(Some(Some(last.clone())));
                } else {
                    *value = value.wrapping_add(d);
                }
                narrow_value(last, *value, *scale).map_err(|m| malformed(at, m))?
            }
            Acc::Wide { value, binary } => {
                let d = unzigzag128(raw);
                if d == 0 {
                    return Ok(Some(Some(last.clone())));
                }
                *value = value.wrapping_add(d);
                wide_value(last, *value, *binary, at)?
            }
        };
        self.last_size = 16
            + match &value {
                Bson::String(s) | Bson::JavaScriptCode(s) => s.len(),
                Bson::Binary(b) => b.bytes.len(),
                _ => 0,
            };
        self.last = Some(value.clone());
        Ok(Some(Some(value)))
    }
}

fn timestamp_to_int(t: Timestamp) -> i64 {
    ((u64::from(t.time) << 32) | u64::from(t.increment)) as i64
}

fn bson_type_name(b: &Bson) -> &'static str {
    type_name(b.element_type() as u8)
}

fn narrow_value(last: &Bson, v: i64, scale: u8) -> Result<Bson, String> {
    Ok(match last {
        Bson::Double(_) => Bson::Double(unscale_double(v, scale)),
        // As the reference decoder does, a 64-bit sum keeps its low 32 bits.
        Bson::Int32(_) => Bson::Int32(v as i32),
        Bson::Int64(_) => Bson::Int64(v),
        Bson::DateTime(_) => Bson::DateTime(bson::DateTime::from_millis(v)),
        Bson::Boolean(_) => Bson::Boolean(v != 0),
        Bson::Timestamp(_) => Bson::Timestamp(Timestamp {
            time: ((v as u64) >> 32) as u32,
            increment: v as u32,
        }),
        Bson::ObjectId(o) => Bson::ObjectId(ObjectId::from_bytes(int_to_oid(v, &o.bytes()))),
        other => {
            return Err(format!(
                "a non-zero delta follows a {} value, which only repeats",
                bson_type_name(other)
            ))
        }
    })
}

fn wide_value(last: &Bson, v: i128, binary: Option<(u8, usize)>, at: usize) -> Res<Bson> {
    let text = || {
        String::from_utf8(int_to_string(v)).map_err(|_| {
            DecodeError::new(
                at,
                ErrorKind::Unsupported,
                "a delta gives a string that is not UTF-8, which bson strings cannot hold",
            )
        })
    };
    Ok(match (last, binary) {
        (Bson::String(_), _) => Bson::String(text()?),
        (Bson::JavaScriptCode(_), _) => Bson::JavaScriptCode(text()?),
        (Bson::Decimal128(_), _) => Bson::Decimal128(Decimal128::from_bytes(v.to_le_bytes())),
        (Bson::Binary(_), Some((subtype, len))) => {
            let bytes = v.to_le_bytes();
            let payload = bytes.get(..len).ok_or_else(|| {
                malformed(
                    at,
                    format!("a delta follows a binary of {len} bytes (at most 16)"),
                )
            })?;
            // Through the element parser, which checks the old subtype's inner length.
            let mut value = (len as i32).to_le_bytes().to_vec();
            value.push(subtype);
            value.extend_from_slice(payload);
            element::to_bson(BINARY, &value, at, 0).map_err(from_pair)?
        }
        (other, _) => {
            return Err(malformed(
                at,
                format!(
                    "a non-zero delta follows a {} value, which only repeats",
                    bson_type_name(other)
                ),
            ))
        }
    })
}

/// One step of building an interleaved block's objects.
#[derive(Clone, Debug)]
enum Op {
    /// Opens a sub-object or sub-array. One that gets no field is left out, unless the
    /// reference object had it empty.
    Open {
        name: String,
        array: bool,
        keep_empty: bool,
    },
    /// A scalar field, read from its own stream.
    Field {
        name: String,
        stream: usize,
    },
    Close,
}

/// An interleaved block: the objects' shape (from the reference object) and a stream per
/// scalar field, in the reference object's depth-first order.
struct Interleaved {
    ops: Vec<Op>,
    streams: Vec<Stream>,
}

impl Interleaved {
    fn walk(
        &mut self,
        doc: &[u8],
        doc_at: usize,
        name: String,
        array: bool,
        arrays_nest: bool,
        depth: usize,
    ) -> Res<()> {
        if depth >= element::MAX_DEPTH {
            return Err(malformed(
                doc_at,
                format!(
                    "the reference object nests deeper than {} levels",
                    element::MAX_DEPTH
                ),
            ));
        }
        let elements = element::elements(doc, doc_at).map_err(from_pair)?;
        self.ops.push(Op::Open {
            name,
            array,
            keep_empty: elements.is_empty(),
        });
        let mut names = HashSet::new();
        for e in elements {
            let at = doc_at + e.value_at;
            let name = String::from_utf8(e.name.to_vec())
                .map_err(|_| malformed(at, "a field name of the reference object is not UTF-8"))?;
            if !array && !names.insert(name.clone()) {
                return Err(DecodeError::new(
                    at,
                    ErrorKind::Unsupported,
                    format!("the reference object repeats field '{name}', which a document cannot hold twice"),
                ));
            }
            let nests = e.ty == element::DOCUMENT || (arrays_nest && e.ty == element::ARRAY);
            if nests {
                let is_array = e.ty == element::ARRAY;
                self.walk(e.value, at, name, is_array, arrays_nest, depth + 1)?;
            } else {
                self.streams
                    .push(Stream::from_element(e.ty, e.value, at, depth + 1)?);
                self.ops.push(Op::Field {
                    name,
                    stream: self.streams.len() - 1,
                });
            }
        }
        self.ops.push(Op::Close);
        Ok(())
    }
}

/// A sub-object being built.
struct Frame {
    name: String,
    keep_empty: bool,
    fields: Container,
}

enum Container {
    Doc(Document),
    Array(Vec<Bson>),
}

impl Container {
    fn is_empty(&self) -> bool {
        match self {
            Container::Doc(d) => d.is_empty(),
            Container::Array(a) => a.is_empty(),
        }
    }

    fn add(&mut self, name: &str, value: Bson) {
        match self {
            Container::Doc(d) => {
                d.insert(name, value);
            }
            // Missing elements leave no gap: the rest keep their order.
            Container::Array(a) => a.push(value),
        }
    }

    fn into_bson(self) -> Bson {
        match self {
            Container::Doc(d) => Bson::Document(d),
            Container::Array(a) => Bson::Array(a),
        }
    }
}

pub(crate) struct Decoder<'a> {
    input: &'a [u8],
    pos: usize,
    out: Vec<Option<Bson>>,
    values_left: usize,
    bytes_left: usize,
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(input: &'a [u8], limits: &Limits) -> Decoder<'a> {
        Decoder {
            input,
            pos: 0,
            out: Vec::new(),
            values_left: limits.max_values,
            bytes_left: limits.max_bytes,
        }
    }

    pub(crate) fn run(mut self) -> Res<Vec<Option<Bson>>> {
        if self.input.is_empty() {
            return Err(malformed(
                0,
                "the column is empty: it lacks even its final 0x00",
            ));
        }
        let mut stream = Stream::after(None, 0);
        loop {
            let at = self.pos;
            let control = self.control()?;
            match control {
                0 => {
                    let rest = self.input.len() - at - 1;
                    if rest > 0 {
                        return Err(malformed(
                            at + 1,
                            format!("{rest} bytes follow the column's final 0x00"),
                        ));
                    }
                    return Ok(self.out);
                }
                INTERLEAVED_LEGACY | INTERLEAVED | INTERLEAVED_ARRAY_ROOT => {
                    let (last, size) = self.interleaved(control)?;
                    // What follows the block may repeat its last object.
                    stream = Stream::after(last, size);
                }
                _ => {
                    let first = self.load(&mut stream)?;
                    self.push(first, &stream)?;
                    while let Some(v) = stream.next(self.input)? {
                        self.push(v, &stream)?;
                    }
                }
            }
        }
    }

    fn control(&self) -> Res<u8> {
        self.input
            .get(self.pos)
            .copied()
            .ok_or_else(|| malformed(self.pos, "the column ends without its final 0x00"))
    }

    /// Reads the literal or Simple-8b block at the current position into `stream`; gives its
    /// first value.
    fn load(&mut self, stream: &mut Stream) -> Res<Option<Bson>> {
        let at = self.pos;
        let control = self.control()?;
        if is_literal(control) {
            let e = element::element(self.input, at, self.input.len()).map_err(from_pair)?;
            if !e.name.is_empty() {
                return Err(malformed(
                    at,
                    "a literal has a field name; it must be empty",
                ));
            }
            *stream = Stream::from_element(e.ty, e.value, e.value_at, 0)?;
            self.pos = e.end;
            return Ok(stream.last.clone());
        }
        if matches!(
            control,
            INTERLEAVED_LEGACY | INTERLEAVED | INTERLEAVED_ARRAY_ROOT
        ) {
            return Err(malformed(at, "an interleaved block starts inside another"));
        }
        self.pos = stream.start_block(self.input, control, at)?;
        stream
            .next(self.input)?
            .ok_or_else(|| malformed(at, "a Simple-8b block holds no value"))
    }

    fn count_value(&mut self) -> Res<()> {
        self.values_left = self.values_left.checked_sub(1).ok_or_else(|| {
            DecodeError::new(
                self.pos,
                ErrorKind::TooLarge,
                "the column holds more values than the limit allows",
            )
        })?;
        Ok(())
    }

    fn emit(&mut self, value: Option<Bson>, size: usize) -> Res<()> {
        let size = size.saturating_add(std::mem::size_of::<Option<Bson>>());
        self.bytes_left = self.bytes_left.checked_sub(size).ok_or_else(|| {
            DecodeError::new(
                self.pos,
                ErrorKind::TooLarge,
                "the column's values take more memory than the limit allows",
            )
        })?;
        self.out.push(value);
        Ok(())
    }

    fn push(&mut self, value: Option<Bson>, stream: &Stream) -> Res<()> {
        self.count_value()?;
        let size = if value.is_some() { stream.last_size } else { 0 };
        self.emit(value, size)
    }

    /// Decodes an interleaved block up to and with its final 0x00; gives its last object (and
    /// its size).
    fn interleaved(&mut self, control: u8) -> Res<(Option<Bson>, usize)> {
        let at = self.pos;
        let doc_at = at + 1;
        let len = self
            .input
            .get(doc_at..doc_at + 4)
            .and_then(|b| b.try_into().ok())
            .map(i32::from_le_bytes)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n >= 5)
            .ok_or_else(|| {
                malformed(
                    doc_at,
                    "the reference object's length is cut short or wrong",
                )
            })?;
        let doc = self
            .input
            .get(doc_at..)
            .and_then(|rest| rest.get(..len))
            .ok_or_else(|| malformed(doc_at, "the reference object runs past the column"))?;
        let mut block = Interleaved {
            ops: Vec::new(),
            streams: Vec::new(),
        };
        let arrays_nest = control != INTERLEAVED_LEGACY;
        let root_array = control == INTERLEAVED_ARRAY_ROOT;
        block.walk(doc, doc_at, String::new(), root_array, arrays_nest, 0)?;
        if block.streams.is_empty() {
            return Err(malformed(at, "the reference object has no scalar field"));
        }
        self.pos = doc_at + len;
        if self.control()? == 0 {
            return Err(malformed(self.pos, "the interleaved block holds no object"));
        }
        let mut last_size = 0;
        while let Some((object, size)) = self.object(&mut block)? {
            self.emit(object, size)?;
            last_size = size;
        }
        Ok((self.out.last().cloned().flatten(), last_size))
    }

    /// The next object of an interleaved block, `None` at its end.
    fn object(&mut self, block: &mut Interleaved) -> Res<Option<(Option<Bson>, usize)>> {
        let mut stack: Vec<Frame> = Vec::new();
        let mut size: usize = 0;
        let mut object = None;
        for op in &block.ops {
            match op {
                Op::Open {
                    name,
                    array,
                    keep_empty,
                } => stack.push(Frame {
                    name: name.clone(),
                    keep_empty: *keep_empty,
                    fields: if *array {
                        Container::Array(Vec::new())
                    } else {
                        Container::Doc(Document::new())
                    },
                }),
                Op::Field { name, stream: i } => {
                    let Some(stream) = block.streams.get_mut(*i) else {
                        return Err(malformed(self.pos, "interleaved stream out of range"));
                    };
                    let value = match stream.next(self.input)? {
                        Some(v) => v,
                        None if self.control()? == 0 => {
                            // Only the first field may end the block, and all at once.
                            let at = self.pos;
                            if *i != 0 {
                                return Err(malformed(
                                    at,
                                    "the interleaved block ends in the middle of an object",
                                ));
                            }
                            if block.streams.iter().any(Stream::has_pending) {
                                return Err(malformed(
                                    at,
                                    "the interleaved block ends while a field still has values",
                                ));
                            }
                            self.pos += 1;
                            return Ok(None);
                        }
                        None => self.load(stream)?,
                    };
                    self.count_value()?;
                    if let (Some(v), Some(frame)) = (value, stack.last_mut()) {
                        size = size.saturating_add(stream.last_size.saturating_add(name.len() + 8));
                        frame.fields.add(name, v);
                    }
                }
                Op::Close => {
                    let Some(frame) = stack.pop() else {
                        return Err(malformed(self.pos, "unbalanced interleaved shape"));
                    };
                    let value = (frame.keep_empty || !frame.fields.is_empty())
                        .then(|| frame.fields.into_bson());
                    match (stack.last_mut(), value) {
                        (Some(parent), Some(v)) => parent.fields.add(&frame.name, v),
                        (Some(_), None) => {}
                        (None, v) => object = v,
                    }
                }
            }
        }
        Ok(Some((object, size)))
    }
}

#[cfg(test)]
mod tests {
    //! Columns as MongoDB writes them. Most scenarios are those of the reference
    //! implementation's tests, whose expected binaries its own builder assembles from literals,
    //! control bytes and Simple-8b words; the bytes here are those binaries written out.

    use super::*;
    use crate::{decode, decode_with_limits};
    use bson::{bson, doc, Regex};

    fn rows(bytes: &[u8]) -> Vec<Option<Bson>> {
        match decode(bytes) {
            Ok(rows) => rows,
            Err(e) => panic!("{e}"),
        }
    }

    fn all(values: Vec<Bson>) -> Vec<Option<Bson>> {
        values.into_iter().map(Some).collect()
    }

    fn err(bytes: &[u8]) -> DecodeError {
        decode(bytes).unwrap_err()
    }

    #[test]
    fn int32_and_int64_deltas() {
        // 100, 100, 101: a literal, then deltas 0 and +1 in one selector-13 word.
        const INT32: &[u8] = &[
            0x10, 0x00, 0x64, 0x00, 0x00, 0x00, 0x80, 0x0D, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00,
            0x00, 0x00,
        ];
        const INT64: &[u8] = &[
            0x12, 0x00, 0x64, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x0D, 0x00, 0x00,
            0x00, 0x08, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(rows(INT32), all(vec![bson!(100), bson!(100), bson!(101)]));
        assert_eq!(
            rows(INT64),
            all(vec![bson!(100i64), bson!(100i64), bson!(101i64)])
        );
        // An int32 sum keeps its low 32 bits.
        const INT32_WRAP: &[u8] = &[
            0x10, 0x00, 0xFF, 0xFF, 0xFF, 0x7F, 0x80, 0x2E, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00,
        ];
        assert_eq!(
            rows(INT32_WRAP),
            all(vec![bson!(i32::MAX), bson!(i32::MIN)])
        );
    }

    #[test]
    fn doubles_at_every_scale() {
        // Scale 10⁰ (0x90): 100, 100, 101.
        const SCALE0: &[u8] = &[
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x59, 0x40, 0x90, 0x0D, 0x00, 0x00,
            0x00, 0x08, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(
            rows(SCALE0),
            all(vec![bson!(100.0), bson!(100.0), bson!(101.0)])
        );
        // Scale 10¹ (0xA0): 1.0, 1.1, 1.2, 1.0, 1.5 in a selector-11 word.
        const SCALE1: &[u8] = &[
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF0, 0x3F, 0xA0, 0x2B, 0x00, 0x10,
            0x00, 0x0C, 0x00, 0x14, 0x00, 0x00,
        ];
        let want = [1.0, 1.1, 1.2, 1.0, 1.5];
        assert_eq!(rows(SCALE1), all(want.iter().map(|&f| bson!(f)).collect()));
        // Scale 10² (0xB0): 1.25, 1.5. Scale 10⁴ (0xC0): 2.0001, 2.0002.
        const SCALE2: &[u8] = &[
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF4, 0x3F, 0xB0, 0x2E, 0x03, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(rows(SCALE2), all(vec![bson!(1.25), bson!(1.5)]));
        const SCALE3: &[u8] = &[
            0x01, 0x00, 0x39, 0xD6, 0xC5, 0x6D, 0x34, 0x00, 0x00, 0x40, 0xC0, 0x2E, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(rows(SCALE3), all(vec![bson!(2.0001), bson!(2.0002)]));
        // Scale 10⁸ (0xD0): 2.3, 3.12345678.
        const SCALE4: &[u8] = &[
            0x01, 0x00, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x02, 0x40, 0xD0, 0xCE, 0xD9, 0x0F,
            0x9D, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(rows(SCALE4), all(vec![bson!(2.3), bson!(3.12345678)]));
        // Bits as integers (0x80): 1.0, the next double up, 1.0 again.
        const BITS: &[u8] = &[
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF0, 0x3F, 0x80, 0x2D, 0x00, 0x00,
            0x00, 0x04, 0x00, 0x00, 0x00, 0x00,
        ];
        let up = f64::from_bits(1f64.to_bits() + 1);
        assert_eq!(rows(BITS), all(vec![bson!(1.0), bson!(up), bson!(1.0)]));
        // 1.0, then 2.0 at scale 10¹, then 3.0 at scale 10⁰: each block rescales the last value.
        const RESCALE: &[u8] = &[
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF0, 0x3F, 0xA0, 0x4E, 0x01, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x90, 0x2E, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00,
        ];
        assert_eq!(rows(RESCALE), all(vec![bson!(1.0), bson!(2.0), bson!(3.0)]));
        // 1.5 has no exact form at scale 10⁰.
        const RESCALE_BAD: &[u8] = &[
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF0, 0x3F, 0xA0, 0xAE, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x90, 0x2E, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00,
        ];
        let e = err(RESCALE_BAD);
        assert_eq!((e.offset(), e.kind()), (19, ErrorKind::Malformed));
        assert!(e.message().contains("1.5"), "{e}");
    }

    #[test]
    fn dates_timestamps_and_object_ids_take_delta_of_deltas() {
        // 1000, 2000, 3000, 4000, 6000 ms: delta-of-deltas 1000, 0, 0, 1000.
        const DATES: &[u8] = &[
            0x09, 0x00, 0xE8, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x0B, 0x7D, 0x00,
            0x00, 0x00, 0x00, 0xA0, 0x0F, 0x00,
        ];
        let ms = [1000, 2000, 3000, 4000, 6000];
        let want = ms
            .iter()
            .map(|&m| Bson::DateTime(bson::DateTime::from_millis(m)));
        assert_eq!(rows(DATES), all(want.collect()));
        // (100, 1), (100, 2), (100, 3), (101, 1): two words, the last delta-of-delta wide.
        const TIMESTAMPS: &[u8] = &[
            0x11, 0x00, 0x01, 0x00, 0x00, 0x00, 0x64, 0x00, 0x00, 0x00, 0x81, 0x2D, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0xAE, 0xFF, 0xFF, 0xFF, 0x1F, 0x00, 0x00, 0x00, 0x00,
        ];
        let ts = |time, increment| Bson::Timestamp(Timestamp { time, increment });
        assert_eq!(
            rows(TIMESTAMPS),
            all(vec![ts(100, 1), ts(100, 2), ts(100, 3), ts(101, 1)])
        );
        // 112233445566778899AABBCC twice, then ...CD; the process-unique bytes carry over.
        const OBJECT_IDS: &[u8] = &[
            0x07, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC,
            0x80, 0x0D, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00,
        ];
        let oid = |s: &str| Bson::ObjectId(ObjectId::parse_str(s).unwrap());
        assert_eq!(
            rows(OBJECT_IDS),
            all(vec![
                oid("112233445566778899aabbcc"),
                oid("112233445566778899aabbcc"),
                oid("112233445566778899aabbcd"),
            ])
        );
    }

    #[test]
    fn strings_code_binaries_and_decimals_take_128_bit_deltas() {
        // "hello" then "hellp": the reversed strings differ by one.
        const STRINGS: &[u8] = &[
            0x02, 0x00, 0x06, 0x00, 0x00, 0x00, 0x68, 0x65, 0x6C, 0x6C, 0x6F, 0x00, 0x80, 0x2E,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(rows(STRINGS), all(vec![bson!("hello"), bson!("hellp")]));
        // "mongoisgreat" then "testisagreat": the delta's 42 trailing zeros go in the count of
        // selector 8, extension 7.
        const STRING_EXTENDED: &[u8] = &[
            0x02, 0x00, 0x0D, 0x00, 0x00, 0x00, 0x6D, 0x6F, 0x6E, 0x67, 0x6F, 0x69, 0x73, 0x67,
            0x72, 0x65, 0x61, 0x74, 0x00, 0x80, 0x78, 0xCA, 0x3D, 0x41, 0x9F, 0xA1, 0xC0, 0xDE,
            0x00,
        ];
        assert_eq!(
            rows(STRING_EXTENDED),
            all(vec![bson!("mongoisgreat"), bson!("testisagreat")])
        );
        // JavaScript code "mongo" then "tests".
        const CODE: &[u8] = &[
            0x0D, 0x00, 0x06, 0x00, 0x00, 0x00, 0x6D, 0x6F, 0x6E, 0x67, 0x6F, 0x00, 0x80, 0x8E,
            0xA0, 0xA1, 0xC0, 0xDE, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(
            rows(CODE),
            all(vec![
                Bson::JavaScriptCode("mongo".into()),
                Bson::JavaScriptCode("tests".into())
            ])
        );
        // Binary 01 02 03 04 then 02 02 03 04: subtype and length carry over.
        const BINARIES: &[u8] = &[
            0x05, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04, 0x80, 0x2E, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let bin = |b: &[u8]| {
            Bson::Binary(bson::Binary {
                subtype: bson::spec::BinarySubtype::Generic,
                bytes: b.to_vec(),
            })
        };
        assert_eq!(
            rows(BINARIES),
            all(vec![bin(&[1, 2, 3, 4]), bin(&[2, 2, 3, 4])])
        );
        // Decimal 1 then 2 (the low bits of the coefficient).
        const DECIMALS: &[u8] = &[
            0x13, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x40, 0x30, 0x80, 0x2E, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let got = rows(DECIMALS);
        let text: Vec<String> = got.iter().flatten().map(|d| d.to_string()).collect();
        assert_eq!(text, ["1", "2"]);
    }

    #[test]
    fn booleans_nulls_and_repeats_of_any_type() {
        // true, true, false, true.
        const BOOLS: &[u8] = &[
            0x08, 0x00, 0x01, 0x80, 0x0C, 0x00, 0x00, 0x01, 0x00, 0x20, 0x00, 0x00, 0x00,
        ];
        assert_eq!(
            rows(BOOLS),
            all(vec![bson!(true), bson!(true), bson!(false), bson!(true)])
        );
        const NULLS: &[u8] = &[
            0x0A, 0x00, 0x80, 0x0D, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(rows(NULLS), all(vec![Bson::Null, Bson::Null, Bson::Null]));
        // A null only repeats; a delta of 1 after it is refused at its word.
        const NULL_DELTA: &[u8] = &[
            0x0A, 0x00, 0x80, 0x2E, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let e = err(NULL_DELTA);
        assert_eq!(e.offset(), 3);
        assert!(e.message().contains("null"), "{e}");
        // A reference fuzzer find: false, then "\0" (a string no integer stands for) repeated by
        // 30 zero deltas.
        const NUL_STRING: &[u8] = &[
            0x08, 0x00, 0x00, 0x02, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x02, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let mut want = vec![Some(bson!(false))];
        want.extend(vec![Some(bson!("\0")); 31]);
        assert_eq!(rows(NUL_STRING), want);
    }

    #[test]
    fn skips_are_missing_rows() {
        // Two skips before any literal, 5, a skip, 6.
        const SKIPS: &[u8] = &[
            0x80, 0xFD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x10, 0x00, 0x05, 0x00, 0x00,
            0x00, 0x80, 0xFD, 0xFF, 0xFF, 0xFF, 0x0B, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(
            rows(SKIPS),
            vec![None, None, Some(bson!(5)), None, Some(bson!(6))]
        );
    }

    #[test]
    fn run_length_words_repeat_the_slot_before() {
        // 7, then 60 zero deltas (selector 1) and 240 more (a repeat of count 2).
        const RLE: &[u8] = &[
            0x12, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x81, 0x01, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(rows(RLE), vec![Some(bson!(7i64)); 301]);
        // 1, then 60 skips and a repeat of them: 180 missing rows.
        const RLE_SKIPS: &[u8] = &[
            0x10, 0x00, 0x01, 0x00, 0x00, 0x00, 0x81, 0xF1, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0xFF, 0x0F, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let mut want = vec![Some(bson!(1))];
        want.extend(vec![None; 180]);
        assert_eq!(rows(RLE_SKIPS), want);
        // A repeat first after a literal repeats a zero delta.
        const RLE_FIRST: &[u8] = &[
            0x02, 0x00, 0x02, 0x00, 0x00, 0x00, 0x78, 0x00, 0x80, 0x0F, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(rows(RLE_FIRST), vec![Some(bson!("x")); 121]);
        // A repeat first in a later block repeats the last slot of the block before: +1.
        const RLE_CARRY: &[u8] = &[
            0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x2E, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x80, 0x0F, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(rows(RLE_CARRY), all((0..122).map(|i| bson!(i)).collect()));
    }

    #[test]
    fn literal_only_columns() {
        // {x: 1, y: 2}, [1, 2], MinKey, MaxKey, null, /a+/i.
        const LITERALS: &[u8] = &[
            0x03, 0x00, 0x13, 0x00, 0x00, 0x00, 0x10, 0x78, 0x00, 0x01, 0x00, 0x00, 0x00, 0x10,
            0x79, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x13, 0x00, 0x00, 0x00, 0x10,
            0x30, 0x00, 0x01, 0x00, 0x00, 0x00, 0x10, 0x31, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00,
            0xFF, 0x00, 0x7F, 0x00, 0x0A, 0x00, 0x0B, 0x00, 0x61, 0x2B, 0x00, 0x69, 0x00, 0x00,
        ];
        assert_eq!(
            rows(LITERALS),
            all(vec![
                bson!({"x": 1, "y": 2}),
                bson!([1, 2]),
                Bson::MinKey,
                Bson::MaxKey,
                Bson::Null,
                Bson::RegularExpression(Regex {
                    pattern: "a+".to_string().try_into().unwrap(),
                    options: "i".to_string().try_into().unwrap(),
                }),
            ])
        );
        assert_eq!(rows(&[0x00]), vec![]);
    }

    const INTERLEAVED: &[u8] = &[
        0xF1, 0x13, 0x00, 0x00, 0x00, 0x10, 0x78, 0x00, 0x01, 0x00, 0x00, 0x00, 0x10, 0x79, 0x00,
        0x02, 0x00, 0x00, 0x00, 0x00, 0x80, 0x09, 0x00, 0x00, 0x00, 0xFC, 0xFF, 0x3F, 0x00, 0x80,
        0x09, 0x80, 0x00, 0x00, 0xFC, 0x2F, 0x40, 0x00, 0x00, 0x00,
    ];

    #[test]
    fn interleaved_objects_with_missing_fields_and_rows() {
        // Reference {x: 1, y: 2}; x's deltas 0, 0, 0, skip, skip, 0 and y's 0, +1, 0, skip, +1,
        // -1, each in a selector-9 word; a 0x00 ends the block, another the column.
        let want = vec![
            Some(bson!({"x": 1, "y": 2})),
            Some(bson!({"x": 1, "y": 3})),
            Some(bson!({"x": 1, "y": 3})),
            None,
            Some(bson!({"y": 4})),
            Some(bson!({"x": 1, "y": 3})),
        ];
        assert_eq!(rows(INTERLEAVED), want);
        // The legacy start byte reads the same here.
        let mut legacy = INTERLEAVED.to_vec();
        legacy[0] = 0xF0;
        assert_eq!(rows(&legacy), want);
    }

    #[test]
    fn interleaved_nested_objects_and_arrays() {
        // {root: {x: 1}, y: 2}, {root: {x: 2}, y: 5} twice.
        const LEVELS: &[u8] = &[
            0xF1, 0x1E, 0x00, 0x00, 0x00, 0x03, 0x72, 0x6F, 0x6F, 0x74, 0x00, 0x0C, 0x00, 0x00,
            0x00, 0x10, 0x78, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x10, 0x79, 0x00, 0x02, 0x00,
            0x00, 0x00, 0x00, 0x80, 0x0C, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x80, 0x0C,
            0x00, 0x00, 0x06, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(
            rows(LEVELS),
            all(vec![
                bson!({"root": {"x": 1}, "y": 2}),
                bson!({"root": {"x": 2}, "y": 5}),
                bson!({"root": {"x": 2}, "y": 5}),
            ])
        );
        // {x: [1, 2]}, {x: [2, 3]}: 0xF1 descends into arrays, a stream per element.
        const ARRAY: &[u8] = &[
            0xF1, 0x1B, 0x00, 0x00, 0x00, 0x04, 0x78, 0x00, 0x13, 0x00, 0x00, 0x00, 0x10, 0x30,
            0x00, 0x01, 0x00, 0x00, 0x00, 0x10, 0x31, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x80, 0x0D, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x80, 0x0D, 0x00, 0x00, 0x00,
            0x08, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(
            rows(ARRAY),
            all(vec![bson!({"x": [1, 2]}), bson!({"x": [2, 3]})])
        );
        // 0xF0 takes the array as one scalar, which only repeats.
        const ARRAY_LEGACY: &[u8] = &[
            0xF0, 0x1B, 0x00, 0x00, 0x00, 0x04, 0x78, 0x00, 0x13, 0x00, 0x00, 0x00, 0x10, 0x30,
            0x00, 0x01, 0x00, 0x00, 0x00, 0x10, 0x31, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x80, 0x0D, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(rows(ARRAY_LEGACY), vec![Some(bson!({"x": [1, 2]})); 2]);
        // 0xF2: the rows are arrays, [1, 2] then [2, 3].
        const ARRAY_ROOT: &[u8] = &[
            0xF2, 0x13, 0x00, 0x00, 0x00, 0x10, 0x30, 0x00, 0x01, 0x00, 0x00, 0x00, 0x10, 0x31,
            0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x80, 0x0D, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00,
            0x00, 0x80, 0x0D, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(rows(ARRAY_ROOT), all(vec![bson!([1, 2]), bson!([2, 3])]));
    }

    #[test]
    fn interleaved_doubles_keep_a_scale_per_field() {
        // x at scale 10¹: 1.0, 1.1, 1.2, 1.0, 1.5; y at 10⁰: 2.0, 3.0, 2.0, missing, 2.0.
        const DOUBLES: &[u8] = &[
            0xF1, 0x1B, 0x00, 0x00, 0x00, 0x01, 0x78, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
            0xF0, 0x3F, 0x01, 0x79, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x00,
            0xA0, 0x0A, 0x00, 0x02, 0x20, 0x00, 0x03, 0xA0, 0x00, 0x90, 0x0A, 0x00, 0x02, 0x10,
            0x00, 0xFF, 0x0F, 0x00, 0x00, 0x00,
        ];
        assert_eq!(
            rows(DOUBLES),
            all(vec![
                bson!({"x": 1.0, "y": 2.0}),
                bson!({"x": 1.1, "y": 3.0}),
                bson!({"x": 1.2, "y": 2.0}),
                bson!({"x": 1.0}),
                bson!({"x": 1.5, "y": 2.0}),
            ])
        );
        // x: 1.1, 2.1, 2.2, 2.3 at 10¹, then 3.12345678 in a second block at 10⁸.
        const SCALE_UP: &[u8] = &[
            0xF1, 0x10, 0x00, 0x00, 0x00, 0x01, 0x78, 0x00, 0x9A, 0x99, 0x99, 0x99, 0x99, 0x99,
            0xF1, 0x3F, 0x00, 0xA0, 0x0B, 0x00, 0xA0, 0x00, 0x08, 0x00, 0x04, 0x00, 0xD0, 0xCE,
            0xD9, 0x0F, 0x9D, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let xs = [1.1, 2.1, 2.2, 2.3, 3.12345678];
        assert_eq!(
            rows(SCALE_UP),
            all(xs.iter().map(|&x| bson!({ "x": x })).collect())
        );
    }

    #[test]
    fn interleaved_blocks_in_sequence_and_literals_inside() {
        // {x: 1}, {x: 2}; then a second block for {x: {y: 1, z: 1}}, {x: {y: 2, z: 3}}.
        const TWICE: &[u8] = &[
            0xF1, 0x0C, 0x00, 0x00, 0x00, 0x10, 0x78, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x80,
            0x0D, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0xF1, 0x1B, 0x00, 0x00, 0x00,
            0x03, 0x78, 0x00, 0x13, 0x00, 0x00, 0x00, 0x10, 0x79, 0x00, 0x01, 0x00, 0x00, 0x00,
            0x10, 0x7A, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x0D, 0x00, 0x00, 0x00,
            0x08, 0x00, 0x00, 0x00, 0x80, 0x0D, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00,
            0x00,
        ];
        let want = vec![
            bson!({"x": 1}),
            bson!({"x": 2}),
            bson!({"x": {"y": 1, "z": 1}}),
            bson!({"x": {"y": 2, "z": 3}}),
        ];
        assert_eq!(rows(TWICE), all(want.clone()));
        // The same objects in one block whose x stream continues with literal sub-objects.
        const LITERALS: &[u8] = &[
            0xF1, 0x0C, 0x00, 0x00, 0x00, 0x10, 0x78, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x80,
            0x0D, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x03, 0x00, 0x13, 0x00, 0x00, 0x00,
            0x10, 0x79, 0x00, 0x01, 0x00, 0x00, 0x00, 0x10, 0x7A, 0x00, 0x01, 0x00, 0x00, 0x00,
            0x00, 0x03, 0x00, 0x13, 0x00, 0x00, 0x00, 0x10, 0x79, 0x00, 0x02, 0x00, 0x00, 0x00,
            0x10, 0x7A, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x80, 0x0E, 0x00, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let mut want5 = want;
        want5.push(bson!({"x": {"y": 2, "z": 3}}));
        assert_eq!(rows(LITERALS), all(want5));
        // An int32, then a block of {x: 1, y: 2}, {x: 1, y: 3}, {x: 2, y: 4}.
        const AFTER_SCALAR: &[u8] = &[
            0x10, 0x00, 0x01, 0x00, 0x00, 0x00, 0xF1, 0x13, 0x00, 0x00, 0x00, 0x10, 0x78, 0x00,
            0x01, 0x00, 0x00, 0x00, 0x10, 0x79, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x80, 0x0C,
            0x00, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00, 0x80, 0x0C, 0x00, 0x00, 0x02, 0x00, 0x20,
            0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(
            rows(AFTER_SCALAR),
            all(vec![
                bson!(1),
                bson!({"x": 1, "y": 2}),
                bson!({"x": 1, "y": 3}),
                bson!({"x": 2, "y": 4}),
            ])
        );
        // After a block, zero deltas repeat its last object.
        const THEN_REPEAT: &[u8] = &[
            0xF1, 0x0C, 0x00, 0x00, 0x00, 0x10, 0x78, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x80,
            0x0E, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x0D, 0x00, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(rows(THEN_REPEAT), vec![Some(bson!({"x": 1})); 3]);
    }

    #[test]
    fn interleaved_blocks_that_break_the_format() {
        let reference = &INTERLEAVED[..20];
        let with = |tail: &[u8]| [reference, tail].concat();
        let word = |w: u64| w.to_le_bytes().to_vec();
        let block = |w: u64| [vec![0x80], word(w)].concat();
        // x has two values, y one: y's stream meets the block's end inside the second object.
        let uneven = with(&[block(0xD), block(0xE), vec![0, 0]].concat());
        let e = err(&uneven);
        assert_eq!(e.offset(), 38);
        assert!(e.message().contains("middle"), "{e}");
        // x has one value, y two: the block ends while y holds one more.
        let leftover = with(&[block(0xE), block(0xD), vec![0, 0]].concat());
        assert!(err(&leftover).message().contains("still has values"));
        assert!(err(&INTERLEAVED[..10]).message().contains("runs past"));
        assert!(err(&[reference, reference, &[0, 0]].concat())
            .message()
            .contains("inside another"));
        assert!(err(&with(&[0, 0])).message().contains("no object"));
        // {a: {}} has no scalar to make a stream of.
        let no_scalar = [
            0xF1, 0x0D, 0x00, 0x00, 0x00, 0x03, 0x61, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00,
            0x80, 0x0E, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        assert!(err(&no_scalar).message().contains("no scalar"));
        // A field name twice.
        let mut twice = INTERLEAVED.to_vec();
        twice[13] = b'x';
        let e = err(&twice);
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.message().contains("repeats field 'x'"), "{e}");
    }

    #[test]
    fn broken_columns_say_where() {
        let cases: &[(&[u8], usize, &str)] = &[
            (&[], 0, "empty"),
            (
                &[0x10, 0x00, 0x01, 0x00, 0x00, 0x00],
                6,
                "without its final",
            ),
            (&[0x00, 0x00], 1, "follow the column's final"),
            (&[0x10, 0x00, 0x01], 0, "int32 value runs past"),
            (
                &[0x10, 0x61, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00],
                0,
                "field name",
            ),
            (&[0x14, 0x00, 0x00], 0, "unknown BSON type"),
            (
                &[0x0F, 0x00, 0x0E, 0, 0, 0, 1, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0],
                2,
                "code with scope",
            ),
            (&[0xE0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0, "not a known control"),
            (
                &[0x83, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                0,
                "announces 4 Simple-8b words",
            ),
            (&[0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0], 1, "selector 0"),
            // An int32, then a block scaled for doubles.
            (
                &[0x10, 0, 1, 0, 0, 0, 0x90, 0x0E, 0, 0, 0, 0, 0, 0, 0, 0],
                6,
                "follows a int32",
            ),
        ];
        for &(bytes, offset, what) in cases {
            let e = err(bytes);
            assert_eq!(e.offset(), offset, "{e}");
            assert!(e.message().contains(what), "{e} lacks {what}");
            assert!(e.to_string().starts_with(&format!("at byte {offset}: ")));
        }
        // A delta after a binary of more than 16 bytes.
        let mut long = vec![0x05, 0x00, 17, 0, 0, 0, 0];
        long.extend([7; 17]);
        long.extend([0x80, 0x2E, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(err(&long).message().contains("at most 16"));
        // A string that decodes to bytes that are not UTF-8.
        let bad = [
            0x02, 0x00, 0x02, 0x00, 0x00, 0x00, 0x78, 0x00, 0x80, 0x0E, 0x0F, 0, 0, 0, 0, 0, 0, 0,
        ];
        assert_eq!(err(&bad).kind(), ErrorKind::Unsupported);
    }

    #[test]
    fn limits_bound_what_a_small_input_can_ask_for() {
        // One literal and sixteen run-length words of 1920: 30 721 values from 138 bytes.
        let mut big = vec![0x10, 0x00, 0x01, 0x00, 0x00, 0x00, 0x8F];
        for _ in 0..16 {
            big.extend(0xFFu64.to_le_bytes());
        }
        big.push(0);
        assert_eq!(rows(&big).len(), 1 + 16 * 1920);
        let tight = Limits {
            max_values: 1000,
            max_bytes: usize::MAX,
        };
        let e = decode_with_limits(&big, &tight).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TooLarge);
        // A 2 KB string repeated 30 721 times passes a 16 MB bound.
        let mut wide = vec![0x02, 0x00];
        wide.extend(2049i32.to_le_bytes());
        wide.extend([b'a'; 2048]);
        wide.push(0);
        wide.push(0x8F);
        for _ in 0..16 {
            wide.extend(0xFFu64.to_le_bytes());
        }
        wide.push(0);
        let tight = Limits {
            max_values: usize::MAX,
            max_bytes: 16 << 20,
        };
        let e = decode_with_limits(&wide, &tight).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TooLarge);
    }

    #[test]
    fn reference_fuzzer_finds_decode() {
        // Columns the reference implementation's fuzzers found, which its decoder reads and its
        // builder writes back byte for byte (one per line: hex).
        let cases = [
            "010000090800007300ef090040ffd0d027d4d0d0800af5ffffffffffd000",
            "0100000000000000000091c280b19191ffff0d9191089100080000803a91b1919191919100",
            "0a000100ffffffffffffffff8002010000fbfffff800",
            "0100000000230000001c09002d5dc345320d00008077f71effffffff1c09002df71effffffffbf00",
        ];
        for hex in cases {
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            let got = decode(&bytes);
            assert!(got.is_ok(), "{hex}: {got:?}");
        }
        // JavaScript code whose bytes are not UTF-8, which bson's strings cannot hold.
        let code = [
            0x0D, 0x00, 0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x80, 0xF1, 0xFF,
            0xFF, 0xFE, 0xF8, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x80,
            0xF1, 0xFF, 0xFF, 0xFE, 0xF8, 0xFF, 0x00, 0x00, 0x00,
        ];
        let e = err(&code);
        assert_eq!((e.offset(), e.kind()), (2, ErrorKind::Unsupported));
    }

    #[test]
    fn documents_keep_nesting_within_bounds() {
        let mut d = doc! {"v": 1};
        for _ in 0..element::MAX_DEPTH {
            d = doc! {"a": d};
        }
        let mut col = vec![0x03, 0x00];
        col.extend(d.to_vec().unwrap());
        col.push(0);
        assert!(err(&col).message().contains("deeper"));
    }
}
