//! `insert_bson`: bytes as a batch of raw BSON documents through `insert_many_raw` (and, when
//! they parse, `insert_many`) into a fresh database on `MemFs`. A batch either fails with
//! nothing written, or every document comes back exactly (byte for byte, with its `_id`),
//! before and after a flush to a segment.

use super::{values, Input};
use std::sync::Arc;
use tsbucket::bson::{doc, Bson, DateTime, Document, RawDocumentBuf};
use tsbucket::vfs::MemFs;
use tsbucket::{Collection, Database, DbOptions, TimeseriesOptions};

/// First byte of an input whose rest is BSON documents back to back (any other: generated
/// documents).
pub const RAW: u8 = b'R';

/// Runs one input.
pub fn run(data: &[u8]) {
    let raws = match data.split_first() {
        Some((&RAW, rest)) => split(rest),
        _ => generated(&mut Input::new(data)),
    };
    check(&raws);
}

/// Splits `bytes` at each document's length prefix (the last piece takes what is left).
pub fn split(mut bytes: &[u8]) -> Vec<RawDocumentBuf> {
    let mut out = Vec::new();
    while !bytes.is_empty() && out.len() < 64 {
        let len = bytes
            .get(..4)
            .and_then(|b| b.try_into().ok())
            .map_or(0, |b: [u8; 4]| i32::from_le_bytes(b).max(0) as usize);
        let take = if len >= 5 {
            len.min(bytes.len())
        } else {
            bytes.len()
        };
        let (doc, rest) = bytes.split_at(take);
        bytes = rest;
        if let Ok(d) = RawDocumentBuf::from_bytes(doc.to_vec()) {
            out.push(d);
        }
    }
    out
}

/// Measurements derived from the input, mostly valid. Some repeat the bytes of the one before
/// with a few bytes changed: the same element headers with other values, or damage where the
/// insert path checks only values.
fn generated(inp: &mut Input<'_>) -> Vec<RawDocumentBuf> {
    let mut out: Vec<RawDocumentBuf> = Vec::new();
    for _ in 0..inp.below(8) {
        let again = match out.last() {
            Some(prev) if inp.u8() % 3 == 0 => Some(prev.as_bytes().to_vec()),
            _ => None,
        };
        let made = match again {
            Some(mut bytes) => {
                for _ in 0..inp.below(3) {
                    let at = inp.below(bytes.len());
                    if let Some(b) = bytes.get_mut(at) {
                        *b ^= inp.u8();
                    }
                }
                RawDocumentBuf::from_bytes(bytes).ok()
            }
            None => one_generated(inp),
        };
        out.extend(made);
    }
    out
}

/// One measurement derived from the input, mostly valid.
fn one_generated(inp: &mut Input<'_>) -> Option<RawDocumentBuf> {
    let mut d = Document::new();
    let body = values::document(inp, 2);
    let time = match inp.u8() % 8 {
        0 => None,
        1 => Some(values::any(inp, 1)),
        _ => Some(Bson::DateTime(DateTime::from_millis(
            1_700_000_000_000 + i64::from(inp.u32() as i32) * 1000,
        ))),
    };
    let meta = match inp.u8() % 4 {
        0 => None,
        1 => Some(values::any(inp, 2)),
        _ => Some(Bson::Int32(i32::from(inp.u8() % 4))),
    };
    let at = inp.below(body.len() + 1);
    for (k, (key, v)) in body.into_iter().enumerate() {
        if k == at {
            put(&mut d, &time, &meta);
        }
        d.insert(key, v);
    }
    if at >= d.len() && !d.contains_key("t") {
        put(&mut d, &time, &meta);
    }
    let bytes = d.to_vec().ok()?;
    RawDocumentBuf::from_bytes(bytes).ok()
}

fn put(d: &mut Document, time: &Option<Bson>, meta: &Option<Bson>) {
    if let Some(t) = time {
        d.insert("t", t.clone());
    }
    if let Some(m) = meta {
        d.insert("m", m.clone());
    }
}

/// Every document of the collection as BSON bytes, sorted.
fn contents(c: &Collection) -> Vec<Vec<u8>> {
    let docs = match c
        .find(doc! {})
        .and_then(|cur| cur.collect::<tsbucket::Result<Vec<_>>>())
    {
        Ok(d) => d,
        Err(e) => panic!("reading back the collection failed: {e}"),
    };
    let mut v: Vec<Vec<u8>> = docs
        .iter()
        .map(|d| d.to_vec().unwrap_or_default())
        .collect();
    v.sort();
    v
}

/// What `find` must return for an accepted document: itself, with its `_id` first when it
/// had none.
fn expected(raw: &RawDocumentBuf, id: &Bson) -> Option<Vec<u8>> {
    let d = Document::try_from(raw.as_ref()).ok()?;
    if d.contains_key("_id") {
        return d.to_vec().ok();
    }
    let mut out = doc! {"_id": id.clone()};
    out.extend(d);
    out.to_vec().ok()
}

/// Inserts `raws` (raw, then parsed) and checks the all-or-nothing and read-back rules.
pub fn check(raws: &[RawDocumentBuf]) {
    let mut opts = DbOptions::default().vfs(Arc::new(MemFs::new()));
    opts.ttl_interval = None;
    let Ok(db) = Database::open_with("/db", opts) else {
        return;
    };
    let Ok(c) = db.create_collection("c", TimeseriesOptions::new("t").meta_field("m")) else {
        return;
    };
    let mut want: Vec<Vec<u8>> = Vec::new();
    let mut accept = |r: tsbucket::Result<tsbucket::InsertManyResult>, raws: &[RawDocumentBuf]| {
        if let Ok(r) = r {
            assert_eq!(r.inserted_count as usize, raws.len(), "inserted_count");
            for (raw, id) in raws.iter().zip(&r.inserted_ids) {
                if let Some(e) = expected(raw, id) {
                    want.push(e);
                }
            }
        }
        want.sort();
        want.clone()
    };
    let w = accept(c.insert_many_raw(raws), raws);
    assert_eq!(contents(&c), w, "after insert_many_raw");

    let parsed: Option<Vec<Document>> = raws
        .iter()
        .map(|r| Document::try_from(r.as_ref()).ok())
        .collect();
    if let Some(docs) = parsed {
        let again: Vec<RawDocumentBuf> = docs
            .iter()
            .filter_map(|d| RawDocumentBuf::try_from(d).ok())
            .collect();
        let w = accept(c.insert_many(&docs), &again);
        assert_eq!(contents(&c), w, "after insert_many");
    }
    if db.flush().is_ok() {
        assert_eq!(contents(&c), want, "after flush");
    }
    let _ = db.close();
}
