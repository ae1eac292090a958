//! The insert path before the log: validate a batch, assign `_id`s, and encode the batch as one
//! log record; then, from the record's raw bytes, derive what the catalog needs (time, series
//! key, size). The second step is shared with recovery, which replays the same bytes. Nothing
//! here touches the disk, so a bad batch writes nothing.

pub mod buffers;
pub mod compact;
mod ids;
mod prefetch;
mod series;
mod shape;
mod template;
mod validate;

use crate::doc::encode;
pub use series::{series_key, series_key_at, MetaId, SeriesKey};
pub use shape::{defers, ShapeId};

use shape::{LastRow, ShapeBuilder};

use ids::IdBlock;
use template::Templates;

use crate::depth::{too_deep, MAX_NESTING};
use crate::doc::to_bson;
use crate::doc::{is_hidden, is_hidden_name};
use crate::error::{Error, Result};
use crate::schema::Schema;
use bson::raw::{RawBsonRef, RawDocument, RawDocumentBuf};
use bson::{Bson, Document};
use std::sync::atomic::{AtomicUsize, Ordering};

/// An insert batch on its way through the log to the catalog: where each document lies in the
/// record's bytes, which the log hands back once they are durable.
pub struct Batch {
    /// The collection the batch goes into.
    pub collection_id: u32,
    /// Where each document lies in the record's bytes.
    pub docs: Vec<Prepared>,
}

/// Largest measurement accepted, as logged (a generated `_id` included): MongoDB's limit for
/// time-series measurements.
pub const MAX_MEASUREMENT_BYTES: usize = 4 * 1024 * 1024;
/// Largest meta value accepted: the bytes of its BSON value, without the field name.
pub const MAX_META_BYTES: usize = 64 * 1024;
/// Log record kind of an insert batch.
pub const RECORD_INSERT: u8 = 1;
/// Bytes before the first document of an insert record.
pub const INSERT_HEADER: usize = 9;

/// A measurement ready for the catalog; its bytes live in the batch payload.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// Value of the time field.
    pub time_ms: i64,
    /// BSON size without the meta field (what counts toward the bucket size limit).
    pub size: usize,
    /// Series key: equal exactly when the normalised meta values are equal; empty when the
    /// document has no meta field.
    pub key: SeriesKey,
    /// Names the exact bytes of the meta value when nonzero: documents with the same id have
    /// byte-identical meta values.
    pub meta_id: MetaId,
    /// Offset of the document in the payload.
    pub start: usize,
    /// Length of the document.
    pub len: usize,
    /// The document's top-level field names and types, named (0 when unknown).
    pub shape: ShapeId,
    /// Where the meta element lies in the document, from its type byte to its end, when the
    /// document has one; it may be unknown (`None`) when `shape` is zero, the only case in
    /// which the catalog does not read it.
    pub meta_at: Option<(usize, usize)>,
}

impl Prepared {
    /// The document's raw bytes within `payload`.
    pub fn raw<'a>(&self, payload: &'a [u8]) -> Option<&'a RawDocument> {
        let bytes = payload.get(self.start..self.start + self.len)?;
        RawDocument::from_bytes(bytes).ok()
    }
}

fn write_insert_header(out: &mut Vec<u8>, collection_id: u32, count: usize) {
    out.push(RECORD_INSERT);
    out.extend_from_slice(&collection_id.to_le_bytes());
    out.extend_from_slice(&(count as u32).to_le_bytes());
}

/// Validates and encodes a whole batch as one log record payload, and prepares each
/// document for the catalog. Any bad document fails the whole batch before anything is
/// written. Returns the prepared documents, the payload and the `_id` of each document.
///
/// Payload format: `{ kind: u8 = 1 | collection_id: u32 | count: u32 | count × BSON document }`.
pub fn prepare_batch(
    collection_id: u32,
    docs: &[Document],
    schema: &Schema,
) -> Result<(Vec<Prepared>, Vec<u8>, Vec<Bson>)> {
    // Sized from the last batch's documents: growing a buffer of a few hundred kilobytes
    // mid-batch copies it and touches fresh pages.
    let per_doc = DOC_BYTES_HINT.load(Ordering::Relaxed);
    let mut out = buffers::take(INSERT_HEADER + docs.len() * per_doc);
    write_insert_header(&mut out, collection_id, docs.len());
    let mut prepared = Vec::with_capacity(docs.len());
    let mut ids = Vec::with_capacity(docs.len());
    let mut block = IdBlock::reserve(docs.len());
    let mut shape = ShapeBuilder::default();
    let mut last = LastRow::default();
    for (index, doc) in docs.iter().enumerate() {
        prefetch::ahead(docs, index);
        let (p, id) = encode_one(
            doc,
            &mut out,
            index,
            schema,
            &mut block,
            (&mut shape, &mut last),
        )?;
        prepared.push(p);
        ids.push(id);
    }
    if let Some(avg) = (out.len() - INSERT_HEADER).checked_div(docs.len()) {
        DOC_BYTES_HINT.store(avg + avg / 16 + 16, Ordering::Relaxed);
    }
    Ok((prepared, out, ids))
}

/// Expected encoded bytes per document of the next batch (see [`prepare_batch`]).
static DOC_BYTES_HINT: AtomicUsize = AtomicUsize::new(320);

/// Encodes one document into `out` (a generated `_id` first, where MongoDB puts it, when it
/// has none) while checking it, in one pass over its fields; returns it prepared and its `_id`.
/// `last` holds the fields of the row before, whose names need no second check.
fn encode_one(
    doc: &Document,
    out: &mut Vec<u8>,
    index: usize,
    schema: &Schema,
    block: &mut IdBlock,
    (shape, last): (&mut ShapeBuilder, &mut LastRow),
) -> Result<(Prepared, Bson)> {
    let bad = |message: String| Error::InvalidDocument { index, message };
    let start = encode::begin(out);
    shape.begin();
    // Fields so far, and whether they repeat the last row's one for one; until they stop, the
    // shape builder is left alone.
    let (mut field, mut repeating) = (0, true);
    // A scan of the names (which the encoding reads next anyway) is cheaper than hashing.
    let given = doc
        .iter()
        .find(|(k, _)| k.as_str() == "_id")
        .map(|(_, v)| v);
    let id = match given {
        Some(id) => id.clone(),
        None => {
            let oid = block.next_id();
            out.push(0x07);
            out.extend_from_slice(b"_id\0");
            out.extend_from_slice(&oid.bytes());
            if !last.repeats(field, 0x07, b"_id") {
                repeating = false;
                shape.push(0x07, b"_id", false);
            }
            field += 1;
            Bson::ObjectId(oid)
        }
    };
    let mut time_ms = None;
    let mut meta_at = None;
    for (k, v) in doc {
        let kind = v.element_type();
        let element_at = out.len();
        let is_meta = schema.meta() == Some(k.as_str());
        if repeating && last.repeats(field, kind as u8, k.as_bytes()) {
            encode::write_checked_key(out, kind, k);
        } else {
            if is_hidden(k) {
                return Err(bad(reserved_name(k)));
            }
            if std::mem::replace(&mut repeating, false) {
                last.replay(field, shape, schema.meta());
            }
            let encoding = |e: String| bad(format!("cannot be encoded as BSON: {e}"));
            encode::write_key(out, kind, k).map_err(encoding)?;
            shape.push(kind as u8, k.as_bytes(), is_meta);
        }
        field += 1;
        if k == schema.time() {
            match v {
                Bson::DateTime(t) => time_ms = Some(t.timestamp_millis()),
                other => {
                    return Err(bad(format!(
                    "'{}' must be present and contain a valid BSON UTC datetime value, found {:?}",
                    schema.time(),
                    other.element_type()
                )))
                }
            }
        }
        let value_at = out.len();
        encode::write_value(v, out, 1)
            .map_err(|e| bad(format!("cannot be encoded as BSON: {e}")))?;
        if is_meta {
            meta_at = Some((v, value_at, (element_at - start, out.len() - start)));
        }
    }
    encode::end(out, start).map_err(|e| bad(format!("cannot be encoded as BSON: {e}")))?;
    let Some(time_ms) = time_ms else {
        return Err(bad(no_time(schema)));
    };
    let len = out.len() - start;
    let key = match meta_at {
        Some((v, at, _)) => {
            let bytes = out.get(at..).unwrap_or_default();
            series_key_of_encoded(v, bytes, index)
                .map_err(|e| bad(format!("malformed BSON: {e}")))?
        }
        None => (SeriesKey::none(), 0),
    };
    let meta_len = meta_at.map_or(0, |(_, value_at, (_, end))| start + end - value_at);
    check_sizes(len, meta_len, index, schema)?;
    let mut p = finish(time_ms, key, start, len);
    p.shape = if repeating && field == last.len() {
        last.id()
    } else {
        if repeating {
            // A prefix of the last row's fields: the builder has not seen them yet.
            last.replay(field, shape, schema.meta());
        }
        let id = shape.finish();
        last.remember(shape, id);
        id
    };
    p.meta_at = meta_at.map(|(_, _, span)| span);
    Ok((p, id))
}

/// The series key of a meta value just encoded at the start of `bytes`.
fn series_key_of_encoded(
    v: &Bson,
    bytes: &[u8],
    row: usize,
) -> std::result::Result<(SeriesKey, MetaId), String> {
    match v {
        Bson::Document(_) => {
            let len = bytes
                .get(..4)
                .and_then(|b| b.try_into().ok())
                .map_or(0, |b| i32::from_le_bytes(b).max(0) as usize);
            let body = bytes.get(..len).ok_or("meta value truncated")?;
            let raw = RawDocument::from_bytes(body).map_err(|e| e.to_string())?;
            Ok(series_key_at(RawBsonRef::Document(raw), row))
        }
        // Other meta types are rarer; the raw form keeps one definition of the key.
        other => {
            let mut d = Document::new();
            d.insert("", other.clone());
            let b = d.to_vec().map_err(|e| e.to_string())?;
            let raw = RawDocument::from_bytes(&b).map_err(|e| e.to_string())?;
            match raw.get("") {
                Ok(Some(r)) => Ok(series_key(r)),
                _ => Err("meta value does not decode".into()),
            }
        }
    }
}

/// [`prepare_batch`] for documents that are already BSON bytes: each is validated in full
/// (well-formed BSON, the time field a datetime, no reserved field names), copied into the
/// record with a generated `_id` first where it has none, and prepared from those bytes.
pub fn prepare_raw_batch(
    collection_id: u32,
    docs: &[RawDocumentBuf],
    schema: &Schema,
) -> Result<(Vec<Prepared>, Vec<u8>, Vec<Bson>)> {
    let total: usize = docs.iter().map(|d| d.as_bytes().len() + 17).sum();
    let mut out = buffers::take(INSERT_HEADER + total);
    write_insert_header(&mut out, collection_id, docs.len());
    let mut prepared = Vec::with_capacity(docs.len());
    let mut ids = Vec::with_capacity(docs.len());
    // One set for the batch, cleared per document: this loop runs once per measurement.
    let mut seen: foldhash::HashSet<&str> = foldhash::HashSet::default();
    let mut block = IdBlock::reserve(docs.len());
    let mut shape = ShapeBuilder::default();
    let mut unique = Vec::new();
    let mut templates = Templates::default();
    for (index, doc) in docs.iter().enumerate() {
        prefetch::raw_ahead(docs, index);
        let bad = |message: String| Error::InvalidDocument { index, message };
        // `Some` once the document is known to have a template's shape.
        let mut known = None;
        let mut learn = false;
        let ((mut id, time_ms, key), mut meta_at) =
            match templates.scan(doc.as_bytes(), index, schema) {
                Some((found, meta_at, shape)) => {
                    known = Some(shape);
                    (found, meta_at)
                }
                None => {
                    shape.begin();
                    match scan_common(doc, index, schema, &mut shape, &mut unique) {
                        Some(found) => {
                            learn = true;
                            found.map_err(bad)?
                        }
                        None => {
                            shape.spoil();
                            let found = scan_checked(doc, schema, &mut seen).map_err(bad)?;
                            // Proven well formed, so a walk of its elements finds the meta element.
                            (found, meta_span(doc.as_bytes(), schema))
                        }
                    }
                }
            };
        let meta_len = meta_at.map_or(0, |(at, end)| {
            end.saturating_sub(at + schema.meta().map_or(0, str::len) + 2)
        });
        let Some(time_ms) = time_ms else {
            return Err(bad(no_time(schema)));
        };
        let start = out.len();
        let bytes = doc.as_bytes();
        if id.is_none() {
            let oid = block.next_id();
            if known.is_none() {
                shape.prepend_id();
            }
            meta_at = meta_at.map(|(s, e)| (s + GENERATED_ID_BYTES, e + GENERATED_ID_BYTES));
            let len = (bytes.len() + GENERATED_ID_BYTES) as i32;
            out.extend_from_slice(&len.to_le_bytes());
            out.push(0x07);
            out.extend_from_slice(b"_id\0");
            out.extend_from_slice(&oid.bytes());
            out.extend_from_slice(bytes.get(4..).unwrap_or_default());
            id = Some(Bson::ObjectId(oid));
        } else {
            out.extend_from_slice(bytes);
        }
        ids.push(id.unwrap_or(Bson::Null));
        check_sizes(out.len() - start, meta_len, index, schema)?;
        let mut p = finish(time_ms, key, start, out.len() - start);
        p.shape = match known {
            Some(shape) => shape,
            None => shape.finish(),
        };
        if learn {
            templates.offer(bytes, schema, p.shape);
        }
        p.meta_at = meta_at;
        prepared.push(p);
    }
    Ok((prepared, out, ids))
}

/// Bytes of a generated `_id` element: type byte, `_id\0` and 12 bytes of ObjectId.
const GENERATED_ID_BYTES: usize = 17;

/// What the insert path takes from a raw document: its `_id` if it has one, its time and its
/// series key.
type Scanned = (Option<Bson>, Option<i64>, (SeriesKey, MetaId));

/// Scans a raw document made of the common types (those `validate::surely_well_formed`
/// accepts) by reading its top-level elements straight from the bytes; `None` leaves the
/// document to [`scan_checked`]. The findings and messages are [`scan_checked`]'s.
/// Also collects the document's shape into `shape` and returns where its meta element lies.
/// `unique` holds the element headers of the last document scanned, whose names were found
/// unique: names that repeat its headers need no search for repeats.
fn scan_common(
    doc: &RawDocumentBuf,
    row: usize,
    schema: &Schema,
    shape: &mut ShapeBuilder,
    unique: &mut Vec<u8>,
) -> Option<std::result::Result<(Scanned, MetaAt), String>> {
    let bytes = doc.as_bytes();
    // Checked element by element in the walk below, which also reads them: one walk, not two.
    if !validate::framed(bytes) {
        return None;
    }
    // On the stack: this runs once per measurement.
    let mut names: [&[u8]; 32] = [&[]; 32];
    let (mut id, mut time_ms, mut key) = (None, None, (SeriesKey::none(), 0));
    let mut meta_at = None;
    let meta = schema.meta().map(str::as_bytes);
    // Where this document's headers, so far equal to the start of `unique`, continue in it.
    let mut on_unique = Some(0);
    let mut elements = crate::doc::elements::Elements::new(bytes);
    for (count, e) in elements.by_ref().enumerate() {
        // Before anything is read from it. Names are then UTF-8, and compared as bytes.
        if !validate::element_ok(e.kind, e.name, e.value) {
            return None;
        }
        *names.get_mut(count)? = e.name;
        on_unique = on_unique.and_then(|at: usize| {
            let end = at + e.name.len() + 2;
            let same = unique.get(at) == Some(&e.kind)
                && unique.get(at + 1..end - 1) == Some(e.name)
                && unique.get(end - 1) == Some(&0);
            same.then_some(end)
        });
        // A linear search beats hashing a few names.
        if on_unique.is_none() && names.get(..count)?.contains(&e.name) {
            return Some(Err(repeated_name(&String::from_utf8_lossy(e.name))));
        }
        if is_hidden_name(e.name) {
            return Some(Err(reserved_name(&String::from_utf8_lossy(e.name))));
        }
        let is_meta = Some(e.name) == meta;
        shape.push(e.kind, e.name, is_meta);
        if is_meta {
            meta_at = Some((e.start, e.end()));
        }
        if e.name == b"_id" {
            id = Some(match <[u8; 12]>::try_from(e.value) {
                Ok(b) if e.kind == 0x07 => Bson::ObjectId(bson::oid::ObjectId::from_bytes(b)),
                _ => to_bson(doc.get("_id").ok()??),
            });
        } else if e.name == schema.time().as_bytes() {
            if e.kind == 0x09 {
                time_ms = Some(i64::from_le_bytes(e.value.try_into().ok()?));
            }
        } else if is_meta {
            key = match e.kind {
                0x03 => series_key_at(
                    RawBsonRef::Document(RawDocument::from_bytes(e.value).ok()?),
                    row,
                ),
                _ => series_key(doc.get(schema.meta()?).ok()??),
            };
        }
    }
    if !elements.finished() {
        return None;
    }
    if on_unique.is_none_or(|at| at != unique.len()) {
        unique.clear();
        unique.extend_from_slice(shape.headers());
    }
    Some(Ok(((id, time_ms, key), meta_at)))
}

/// Where a meta element lies in its document: type byte to end.
type MetaAt = Option<(usize, usize)>;

/// Scans a raw document through the `bson` crate, which checks every byte and says what is
/// wrong: one walk of every element proves the bytes well formed all the way down and finds
/// the time and meta values (names are unique, so the first is the only one).
fn scan_checked<'a>(
    doc: &'a RawDocumentBuf,
    schema: &Schema,
    seen: &mut foldhash::HashSet<&'a str>,
) -> std::result::Result<Scanned, String> {
    let mut id = None;
    let (mut time_ms, mut key) = (None, (SeriesKey::none(), 0));
    seen.clear();
    for el in doc.iter() {
        let (k, v) = el.map_err(|e| format!("malformed BSON: {e}"))?;
        let k = k.as_str();
        // Each top-level field becomes one column; BSON allows repeats, columns cannot.
        if !seen.insert(k) {
            return Err(repeated_name(k));
        }
        if is_hidden(k) {
            return Err(reserved_name(k));
        }
        if k == "_id" {
            id = Some(to_bson(v));
        } else if k == schema.time() {
            if let RawBsonRef::DateTime(t) = v {
                time_ms = Some(t.timestamp_millis());
            }
        } else if Some(k) == schema.meta() {
            key = series_key(v);
        }
        check_nested(v, 1).map_err(|e| e.message(k))?;
    }
    Ok((id, time_ms, key))
}

/// Walks embedded documents, arrays and the scopes of code so that malformed bytes anywhere
/// inside are found now, not when the record is replayed; `v` is the value of an element
/// `level` levels deep. The depth is bounded before the walk goes deeper, so hostile nesting
/// cannot exhaust the stack. A name repeated within a document is refused too: stored, the
/// document becomes a `Document`, which would keep one of the two values and drop the other.
fn check_nested(v: RawBsonRef<'_>, level: usize) -> std::result::Result<(), Nested> {
    let malformed = |e: bson::error::Error| Nested::Bad(format!("malformed BSON: {e}"));
    // `x` sits one level below `v`, under the name or index `at`.
    let inner = |x: RawBsonRef<'_>, at: &dyn std::fmt::Display| match level >= MAX_NESTING {
        true => Err(Nested::Bad(too_deep())),
        false => check_nested(x, level + 1).map_err(|e| e.under(at)),
    };
    let fields = |d: &RawDocument| {
        let mut names = validate::Names::default();
        for el in d.iter() {
            let (k, x) = el.map_err(malformed)?;
            if !names.first(k.as_str().as_bytes()) {
                return Err(Nested::Repeated(vec![k.as_str().to_string()]));
            }
            inner(x, &k.as_str())?;
        }
        Ok(())
    };
    match v {
        RawBsonRef::Document(d) => fields(d)?,
        RawBsonRef::Array(a) => {
            for (i, el) in a.into_iter().enumerate() {
                inner(el.map_err(malformed)?, &i)?;
            }
        }
        // A scope is a document like any other, and is converted like one.
        RawBsonRef::JavaScriptCodeWithScope(c) => fields(c.scope)?,
        _ => {}
    }
    Ok(())
}

/// Why [`check_nested`] refused a value.
enum Nested {
    /// The message says it all.
    Bad(String),
    /// A name repeats; the path to it from the value walked, innermost first.
    Repeated(Vec<String>),
}

impl Nested {
    /// The same refusal, found under `at` (a name or an array index).
    fn under(self, at: &dyn std::fmt::Display) -> Nested {
        match self {
            Nested::Repeated(mut path) => {
                path.push(at.to_string());
                Nested::Repeated(path)
            }
            bad => bad,
        }
    }

    /// The message for a refusal of the value of top-level field `k`.
    fn message(self, k: &str) -> String {
        match self {
            Nested::Bad(message) => message,
            Nested::Repeated(path) => {
                let inner: Vec<&str> = path.iter().rev().map(String::as_str).collect();
                repeated_name(&format!("{k}.{}", inner.join(".")))
            }
        }
    }
}

/// Derives time, series key, size and shape from a document's raw bytes; `shape` is reused
/// from document to document.
fn prepare_raw(
    raw: &RawDocument,
    (start, len): (usize, usize),
    index: usize,
    schema: &Schema,
    shape: &mut ShapeBuilder,
) -> Result<Prepared> {
    let bad = |message: String| Error::InvalidDocument { index, message };
    let time_ms = match raw.get(schema.time()) {
        Ok(Some(RawBsonRef::DateTime(t))) => t.timestamp_millis(),
        _ => return Err(bad(no_time(schema))),
    };
    let key = match schema.meta() {
        Some(m) => match raw.get(m) {
            Ok(Some(v)) => series_key(v),
            Ok(None) => (SeriesKey::none(), 0),
            Err(e) => return Err(bad(format!("malformed BSON: {e}"))),
        },
        None => (SeriesKey::none(), 0),
    };
    // Not the size limits: what was logged is replayed whatever they were when it was.
    let mut p = finish(time_ms, key, start, len);
    p.meta_at = shape_of(raw.as_bytes(), schema, shape);
    p.shape = shape.finish();
    Ok(p)
}

/// Collects the shape of a document's bytes, checking what the insert path checked before it
/// named a shape (well-framed elements, well-formed strings); returns where its meta element
/// lies.
fn shape_of(doc: &[u8], schema: &Schema, shape: &mut ShapeBuilder) -> MetaAt {
    shape.begin();
    let meta = schema.meta().map(str::as_bytes);
    let mut meta_at = None;
    let mut elements = crate::doc::elements::Elements::new(doc);
    for e in elements.by_ref() {
        let is_meta = Some(e.name) == meta;
        if is_meta {
            meta_at = Some((e.start, e.end()));
        } else if e.kind == 0x02 && !crate::doc::elements::string_ok(e.value) {
            shape.spoil();
        }
        shape.push(e.kind, e.name, is_meta);
    }
    if !elements.finished() {
        shape.spoil();
    }
    meta_at
}

/// The message for a top-level field name that the engine keeps for its own columns.
fn reserved_name(k: &str) -> String {
    format!("field name {k:?} starts with \\u0001, which is reserved for the engine")
}

/// The message for a top-level field name that appears twice (each becomes one column).
fn repeated_name(k: &str) -> String {
    format!("field name {k:?} appears more than once")
}

/// MongoDB's message for a time field that is missing or not a datetime.
fn no_time(schema: &Schema) -> String {
    format!(
        "'{}' must be present and contain a valid BSON UTC datetime value",
        schema.time()
    )
}

/// Applies the size limits to a measurement of `len` bytes (as logged, `_id` included) whose
/// meta value is `meta_len` bytes of BSON (the value alone, without the field's name).
fn check_sizes(len: usize, meta_len: usize, index: usize, schema: &Schema) -> Result<()> {
    let bad = |message: String| Error::InvalidDocument { index, message };
    if len > MAX_MEASUREMENT_BYTES {
        return Err(bad(format!(
            "the measurement is {len} bytes; the limit is {MAX_MEASUREMENT_BYTES}"
        )));
    }
    if meta_len > MAX_META_BYTES {
        return Err(bad(format!(
            "the meta field '{}' is {meta_len} bytes; the limit is {MAX_META_BYTES}",
            schema.meta().unwrap_or_default(),
        )));
    }
    Ok(())
}

/// Assembles the prepared measurement.
fn finish(time_ms: i64, (key, meta_id): (SeriesKey, MetaId), start: usize, len: usize) -> Prepared {
    Prepared {
        time_ms,
        size: len.saturating_sub(key.len()),
        key,
        meta_id,
        start,
        len,
        shape: 0,
        meta_at: None,
    }
}

/// Where the meta element of a well-formed document lies.
fn meta_span(doc: &[u8], schema: &Schema) -> MetaAt {
    let meta = schema.meta()?.as_bytes();
    crate::doc::elements::Elements::new(doc)
        .find(|e| e.name == meta)
        .map(|e| (e.start, e.end()))
}

/// A decoded insert record: the collection and each document's place in the payload.
pub struct InsertRecord {
    /// Target collection.
    pub collection_id: u32,
    /// `(start, len)` of each document in the payload.
    pub docs: Vec<(usize, usize)>,
}

/// Decodes an insert record payload; `Ok(None)` if the payload is not an insert record.
pub fn decode_insert(payload: &[u8]) -> std::result::Result<Option<InsertRecord>, String> {
    let Some((&kind, rest)) = payload.split_first() else {
        return Err("empty record".into());
    };
    if kind != RECORD_INSERT {
        return Ok(None);
    }
    let (coll, rest) = take_u32(rest).ok_or("truncated insert header")?;
    let (count, _) = take_u32(rest).ok_or("truncated insert header")?;
    let mut pos = INSERT_HEADER;
    let mut docs = Vec::with_capacity((count as usize).min(payload.len() / 5));
    for i in 0..count {
        let len = payload
            .get(pos..)
            .and_then(take_u32)
            .ok_or_else(|| format!("document {i} truncated"))?
            .0 as usize;
        let body = payload
            .get(pos..pos.saturating_add(len))
            .filter(|_| len >= 5)
            .ok_or_else(|| format!("document {i} has bad length {len}"))?;
        RawDocument::from_bytes(body).map_err(|e| format!("document {i}: {e}"))?;
        docs.push((pos, len));
        pos += len;
    }
    if pos != payload.len() {
        return Err(format!(
            "{} trailing bytes after the documents",
            payload.len() - pos
        ));
    }
    Ok(Some(InsertRecord {
        collection_id: coll,
        docs,
    }))
}

/// Prepares the documents of a replayed insert record. They were validated before they were
/// logged, so a failure here means the log is damaged.
pub fn prepare_replayed(
    payload: &[u8],
    rec: &InsertRecord,
    schema: &Schema,
) -> Result<Vec<Prepared>> {
    let mut shape = ShapeBuilder::default();
    rec.docs
        .iter()
        .enumerate()
        .map(|(index, &(start, len))| {
            let raw = payload
                .get(start..start + len)
                .and_then(|b| RawDocument::from_bytes(b).ok())
                .ok_or_else(|| Error::InvalidDocument {
                    index,
                    message: "malformed BSON".into(),
                })?;
            prepare_raw(raw, (start, len), index, schema, &mut shape)
        })
        .collect()
}

fn take_u32(b: &[u8]) -> Option<(u32, &[u8])> {
    let (h, t) = b.split_at_checked(4)?;
    Some((u32::from_le_bytes(h.try_into().ok()?), t))
}

#[cfg(test)]
mod tests {

    use super::*;
    use bson::{doc, DateTime};

    fn f() -> Schema {
        Schema::new("t", Some("m"), 3600, 60)
    }

    fn one(d: Document) -> Result<(Prepared, Vec<u8>)> {
        let (mut p, payload, _) = prepare_batch(1, &[d], &f())?;
        Ok((p.remove(0), payload))
    }

    #[test]
    fn missing_or_wrong_time_is_rejected_with_index() {
        let good = doc! {"t": DateTime::from_millis(1)};
        let e = prepare_batch(1, &[good.clone(), good, doc! {"m": 1}], &f()).unwrap_err();
        assert!(matches!(e, Error::InvalidDocument { index: 2, .. }), "{e}");
        assert!(e.to_string().contains("'t' must be present"));
        let e = one(doc! {"t": "2020"}).unwrap_err();
        assert_eq!(e.code(), Some(2));
        let e = one(doc! {"t": DateTime::from_millis(1), "\u{1}x": 1}).unwrap_err();
        assert!(e.to_string().contains("reserved"));
    }

    #[test]
    fn generated_id_comes_first() {
        let (p, payload) =
            one(doc! {"t": DateTime::from_millis(5), "m": {"b": 1, "a": 2}, "x": 1}).unwrap();
        let raw = p.raw(&payload).unwrap();
        let d = Document::try_from(raw).unwrap();
        assert_eq!(d.keys().next().map(String::as_str), Some("_id"));
        assert_eq!(d.get_document("m").unwrap(), &doc! {"b": 1, "a": 2});
        assert_eq!(p.time_ms, 5);
        let (p2, _) = one(doc! {"_id": 7, "t": DateTime::from_millis(5), "x": 1}).unwrap();
        assert_eq!(
            p2.len,
            doc! {"_id": 7, "t": DateTime::from_millis(5), "x": 1}
                .to_vec()
                .unwrap()
                .len()
        );
    }

    #[test]
    fn series_key_ignores_field_order_only() {
        let key = |d: Document| one(d).unwrap().0.key;
        let t = DateTime::from_millis(0);
        assert_eq!(
            key(doc! {"t": t, "m": {"a": 1, "b": {"c": 1, "d": 2}}}),
            key(doc! {"t": t, "m": {"b": {"d": 2, "c": 1}, "a": 1}})
        );
        assert_ne!(
            key(doc! {"t": t, "m": [1, 2]}),
            key(doc! {"t": t, "m": [2, 1]})
        );
        assert_eq!(
            key(doc! {"t": t, "m": [{"b": 1, "c": 0}]}),
            key(doc! {"t": t, "m": [{"c": 0, "b": 1}]})
        );
        assert_ne!(key(doc! {"t": t, "m": Bson::Null}), key(doc! {"t": t}));
        assert_ne!(key(doc! {"t": t, "m": 1}), key(doc! {"t": t, "m": 1i64}));
        assert!(key(doc! {"t": t}).is_empty());
    }

    #[test]
    fn insert_record_round_trips() {
        let d = doc! {"t": DateTime::from_millis(5), "x": 1};
        let (p, rec, _) = prepare_batch(7, &[d.clone(), d], &f()).unwrap();
        let back = decode_insert(&rec).unwrap().unwrap();
        assert_eq!(back.collection_id, 7);
        assert_eq!(
            back.docs,
            vec![(p[0].start, p[0].len), (p[1].start, p[1].len)]
        );
        for cut in 1..rec.len() {
            assert!(decode_insert(&rec[..cut]).is_err());
        }
    }

    /// Rows built from a few names and types, so that rows repeat, extend, shorten and reorder
    /// the fields of the row before.
    fn rows() -> impl proptest::strategy::Strategy<Value = Vec<Document>> {
        use proptest::prelude::*;
        let field = (0..5usize, 0..4u8);
        let row = (proptest::collection::vec(field, 0..5), any::<bool>());
        proptest::collection::vec(row, 1..12).prop_map(|rows| {
            rows.into_iter()
                .enumerate()
                .map(|(i, (fields, own_id))| {
                    let mut d = Document::new();
                    if own_id {
                        d.insert("_id", i as i32);
                    }
                    for (name, kind) in fields {
                        let name = ["a", "b", "m", "t", "long_field_name"][name];
                        let value = match kind {
                            0 => Bson::Int32(1),
                            1 => Bson::String("s".into()),
                            2 => Bson::Document(doc! {"k": 1}),
                            _ => Bson::Double(0.5),
                        };
                        d.insert(name, value);
                    }
                    d.insert("t", DateTime::from_millis(i as i64));
                    d
                })
                .collect()
        })
    }

    proptest::proptest! {
        /// The insert path names shapes while it encodes, skipping what a repeated row needs
        /// no more; recovery names them from the bytes. Both must agree row for row.
        #[test]
        fn shapes_named_while_encoding_match_those_named_from_the_bytes(docs in rows()) {
            let (prepared, payload, _) = prepare_batch(3, &docs, &f()).unwrap();
            let rec = decode_insert(&payload).unwrap().unwrap();
            let replayed = prepare_replayed(&payload, &rec, &f()).unwrap();
            for (p, r) in prepared.iter().zip(&replayed) {
                proptest::prop_assert_eq!(p.shape, r.shape);
                proptest::prop_assert_eq!(p.meta_at, r.meta_at);
                proptest::prop_assert_eq!(&p.key, &r.key);
            }
        }
    }

    #[test]
    fn names_that_follow_a_repeated_row_are_still_checked() {
        let t = DateTime::from_millis(1);
        let good = doc! {"t": t, "a": 1, "m": {"h": "x"}};
        let mut nul = good.clone();
        nul.insert("a\0b", 2);
        let mut hidden = good.clone();
        hidden.insert("\u{1}x", 2);
        // The bad name sits after fields that repeat the row before, at the position of a
        // field of that row, and (for the NUL) starts with that field's name.
        let mut swapped = Document::new();
        swapped.insert("t", t);
        swapped.insert("a\0m", 1);
        for (bad, what) in [(nul, "NUL"), (hidden, "reserved"), (swapped, "NUL")] {
            let e = prepare_batch(1, &[good.clone(), good.clone(), bad], &f()).unwrap_err();
            assert!(matches!(e, Error::InvalidDocument { index: 2, .. }), "{e}");
            assert!(e.to_string().contains(what), "{e}");
        }
    }

    #[test]
    fn raw_documents_are_checked_in_the_order_of_their_fields() {
        // A reserved name, then a string whose length runs past its document.
        let name_first = doc! {"t": DateTime::from_millis(1), "\u{1}x": 1, "s": "abc"};
        let mut bytes = name_first.to_vec().unwrap();
        let at = bytes.len() - 1 - 4 - 4;
        bytes[at..at + 4].copy_from_slice(&100i32.to_le_bytes());
        let raw = RawDocumentBuf::from_bytes(bytes).unwrap();
        let good = RawDocumentBuf::try_from(&doc! {"t": DateTime::from_millis(1)}).unwrap();
        let e = prepare_raw_batch(1, &[good.clone(), raw], &f()).unwrap_err();
        assert!(matches!(e, Error::InvalidDocument { index: 1, .. }), "{e}");
        assert!(e.to_string().contains("reserved"), "{e}");
        // The same damage before the reserved name is reported as damage.
        let damage_first = doc! {"t": DateTime::from_millis(1), "s": "abc", "\u{1}x": 1};
        let mut bytes = damage_first.to_vec().unwrap();
        let at = bytes.iter().position(|&b| b == b's').unwrap() + 2;
        bytes[at..at + 4].copy_from_slice(&100i32.to_le_bytes());
        let raw = RawDocumentBuf::from_bytes(bytes).unwrap();
        let e = prepare_raw_batch(1, &[good, raw], &f()).unwrap_err();
        assert!(matches!(e, Error::InvalidDocument { index: 1, .. }), "{e}");
        assert!(!e.to_string().contains("reserved"), "{e}");
    }
}
