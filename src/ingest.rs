//! The insert path before the log: validate a batch, assign `_id`s, normalise meta, and encode
//! the batch as one log record. Nothing here touches the disk, so a bad batch writes nothing.

use crate::catalog::meta::{is_normalized, normalize, series_key};
use crate::catalog::Prepared;
use crate::error::{Error, Result};
use bson::oid::ObjectId;
use bson::{Bson, Document};

/// Largest measurement accepted (MongoDB's limit for time-series measurements).
pub const MAX_MEASUREMENT_BYTES: usize = 4 * 1024 * 1024;
/// Largest meta value accepted, encoded.
pub const MAX_META_BYTES: usize = 64 * 1024;

/// Log record kinds.
pub const RECORD_INSERT: u8 = 1;

/// Field layout of a collection, as the insert path needs it.
#[derive(Debug, Clone)]
pub struct Fields<'a> {
    /// The time field.
    pub time: &'a str,
    /// The meta field.
    pub meta: Option<&'a str>,
}

/// Validates one measurement and fills what the catalog needs. `index` is its position in the
/// batch, for the error message.
/// The returned `size` is filled in by [`prepare_batch`], which encodes the document anyway.
pub fn prepare(
    doc: &Document,
    index: usize,
    fields: &Fields<'_>,
    add_id: bool,
) -> Result<Prepared> {
    let bad = |message: String| Error::InvalidDocument { index, message };
    let time_ms = match doc.get(fields.time) {
        Some(Bson::DateTime(t)) => t.timestamp_millis(),
        Some(other) => {
            return Err(bad(format!(
                "'{}' must be present and contain a valid BSON UTC datetime value, found {:?}",
                fields.time,
                other.element_type()
            )))
        }
        None => {
            return Err(bad(format!(
                "'{}' must be present and contain a valid BSON UTC datetime value",
                fields.time
            )))
        }
    };
    if let Some(k) = doc.keys().find(|k| crate::catalog::is_hidden(k)) {
        return Err(bad(format!(
            "field name {k:?} starts with \\u0001, which is reserved for the engine"
        )));
    }
    let out = if add_id && !doc.contains_key("_id") {
        // A generated `_id` goes first, where MongoDB puts it.
        let mut d = Document::new();
        d.insert("_id", ObjectId::new());
        for (k, v) in doc {
            d.insert(k.clone(), v.clone());
        }
        d
    } else {
        doc.clone()
    };
    let meta = match fields.meta.and_then(|m| out.get(m)) {
        Some(v) => {
            let n = if is_normalized(v) {
                v.clone()
            } else {
                normalize(v)
            };
            Some(n)
        }
        None => None,
    };
    let key = series_key(meta.as_ref());
    if key.len() > MAX_META_BYTES {
        return Err(bad(format!(
            "the meta field '{}' is {} bytes; the limit is {MAX_META_BYTES}",
            fields.meta.unwrap_or_default(),
            key.len()
        )));
    }
    let size = 0;
    Ok(Prepared {
        doc: out,
        time_ms,
        size,
        meta,
        key,
    })
}

/// Validates and prepares a whole batch and encodes it as one log record payload, in one pass
/// over the documents. Any bad document fails the whole batch before anything is written.
///
/// Payload format: `{ kind: u8 = 1 | collection_id: u32 | count: u32 | count × BSON document }`.
pub fn prepare_batch(
    collection_id: u32,
    docs: &[Document],
    fields: &Fields<'_>,
) -> Result<(Vec<Prepared>, Vec<u8>)> {
    let mut out = Vec::with_capacity(9 + docs.len() * 256);
    out.push(RECORD_INSERT);
    out.extend_from_slice(&collection_id.to_le_bytes());
    out.extend_from_slice(&(docs.len() as u32).to_le_bytes());
    let mut prepared = Vec::with_capacity(docs.len());
    for (index, doc) in docs.iter().enumerate() {
        let mut p = prepare(doc, index, fields, true)?;
        let start = out.len();
        p.doc
            .to_writer(&mut out)
            .map_err(|e| Error::InvalidDocument {
                index,
                message: format!("cannot be encoded as BSON: {e}"),
            })?;
        let total = out.len() - start;
        if total > MAX_MEASUREMENT_BYTES {
            return Err(Error::InvalidDocument {
                index,
                message: format!(
                    "the measurement is {total} bytes; the limit is {MAX_MEASUREMENT_BYTES}"
                ),
            });
        }
        p.size = total.saturating_sub(p.key.len());
        prepared.push(p);
    }
    Ok((prepared, out))
}

/// Re-prepares the documents of a replayed insert record. They were validated before they were
/// logged, so a failure here means the log is damaged.
pub fn prepare_replayed(docs: Vec<Document>, fields: &Fields<'_>) -> Result<Vec<Prepared>> {
    let mut out = Vec::with_capacity(docs.len());
    for (index, doc) in docs.into_iter().enumerate() {
        let mut p = prepare(&doc, index, fields, false)?;
        let mut buf = Vec::new();
        p.doc
            .to_writer(&mut buf)
            .map_err(|e| Error::InvalidDocument {
                index,
                message: format!("cannot be encoded as BSON: {e}"),
            })?;
        p.size = buf.len().saturating_sub(p.key.len());
        out.push(p);
    }
    Ok(out)
}

/// A decoded insert record.
pub struct InsertRecord {
    /// Target collection.
    pub collection_id: u32,
    /// The measurements, `_id`s included.
    pub docs: Vec<Document>,
}

/// Decodes an insert record payload; `None` if the payload is not an insert record.
pub fn decode_insert(payload: &[u8]) -> std::result::Result<Option<InsertRecord>, String> {
    let Some((&kind, rest)) = payload.split_first() else {
        return Err("empty record".into());
    };
    if kind != RECORD_INSERT {
        return Ok(None);
    }
    let (coll, rest) = take_u32(rest).ok_or("truncated insert header")?;
    let (count, mut rest) = take_u32(rest).ok_or("truncated insert header")?;
    let mut docs = Vec::with_capacity((count as usize).min(rest.len() / 5));
    for i in 0..count {
        let (len, _) = take_u32(rest).ok_or_else(|| format!("document {i} truncated"))?;
        let len = len as usize;
        if len < 5 || len > rest.len() {
            return Err(format!("document {i} has bad length {len}"));
        }
        let (body, tail) = rest.split_at(len);
        let d = Document::from_reader(body).map_err(|e| format!("document {i}: {e}"))?;
        docs.push(d);
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(format!("{} trailing bytes after the documents", rest.len()));
    }
    Ok(Some(InsertRecord {
        collection_id: coll,
        docs,
    }))
}

fn take_u32(b: &[u8]) -> Option<(u32, &[u8])> {
    let (h, t) = b.split_at_checked(4)?;
    Some((u32::from_le_bytes(h.try_into().ok()?), t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::{doc, DateTime};

    const F: Fields<'static> = Fields {
        time: "t",
        meta: Some("m"),
    };

    #[test]
    fn missing_or_wrong_time_is_rejected_with_index() {
        let e = prepare(&doc! {"m": 1}, 3, &F, true).unwrap_err();
        assert!(matches!(e, Error::InvalidDocument { index: 3, .. }), "{e}");
        assert!(e.to_string().contains("'t' must be present"));
        let e = prepare(&doc! {"t": "2020"}, 0, &F, true).unwrap_err();
        assert_eq!(e.code(), Some(2));
    }

    #[test]
    fn generated_id_comes_first_and_meta_is_normalised() {
        let p = prepare(
            &doc! {"t": DateTime::from_millis(5), "m": {"b": 1, "a": 2}, "x": 1},
            0,
            &F,
            true,
        )
        .unwrap();
        assert_eq!(p.doc.keys().next().map(String::as_str), Some("_id"));
        assert_eq!(p.meta, Some(Bson::Document(doc! {"a": 2, "b": 1})));
        assert_eq!(p.doc.get_document("m").unwrap(), &doc! {"b": 1, "a": 2});
        assert_eq!(p.time_ms, 5);
    }

    #[test]
    fn insert_record_round_trips() {
        let d = doc! {"t": DateTime::from_millis(5), "x": 1};
        let (p, rec) = prepare_batch(7, &[d.clone(), d], &F).unwrap();
        let back = decode_insert(&rec).unwrap().unwrap();
        assert_eq!(back.collection_id, 7);
        assert_eq!(back.docs, vec![p[0].doc.clone(), p[1].doc.clone()]);
        assert!(p[0].size > 0);
        for cut in 0..rec.len() {
            assert!(decode_insert(&rec[..cut]).is_err() || cut == 0);
        }
    }
}
