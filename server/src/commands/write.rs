//! `insert`, `update` and `delete`, with MongoDB's per-statement `writeErrors`.

use crate::error::{CmdResult, CommandError, NAMESPACE_NOT_FOUND};
use crate::reply::ok;
use crate::request::{collection_name, opt_bool, Request};
use crate::Shared;
use bson::{doc, Bson, Document, RawDocumentBuf};

/// Measurements handed to the engine at once: well under its largest batch, so that a
/// driver's batch of up to 48 MB goes in as several.
const INSERT_CHUNK_BYTES: usize = 8 * 1024 * 1024;

/// The documents of `key`: a document sequence, or an array in the body.
fn documents(req: &Request<'_>, key: &str) -> CmdResult<Vec<RawDocumentBuf>> {
    let mut out = Vec::new();
    for (name, docs) in &req.sequences {
        if name == key {
            out.extend(docs.iter().cloned());
        }
    }
    if let Ok(arr) = req.raw.get_array(key) {
        for v in arr {
            let v = v.map_err(|e| CommandError::bad_value(e.to_string()))?;
            match v.as_document() {
                Some(d) => out.push(d.to_owned()),
                None => {
                    return Err(CommandError::type_mismatch(format!(
                        "each of '{key}' must be a document"
                    )))
                }
            }
        }
    } else if req.raw.get(key).ok().flatten().is_some() {
        return Err(CommandError::type_mismatch(format!(
            "'{key}' must be an array of documents"
        )));
    }
    Ok(out)
}

fn write_error(index: usize, e: &CommandError) -> Bson {
    Bson::Document(doc! {"index": index as i32, "code": e.code, "errmsg": e.message.clone()})
}

pub fn insert(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let ordered = opt_bool(&req.body, "ordered")?.unwrap_or(true);
    let docs = documents(req, "documents")?;
    let missing = || {
        CommandError::new(
            NAMESPACE_NOT_FOUND,
            format!(
                "{}.{name} does not exist: tsbucket stores only time-series collections, so create it first with timeseries options",
                req.db
            ),
        )
    };
    let db = shared.dbs.get(req.db)?.ok_or_else(missing)?;
    let coll = db.collection(&name).map_err(|_| missing())?;
    let mut n = 0u64;
    let mut errors = Vec::new();
    let mut offset = 0; // of `chunk` in `docs`
    let mut rest = docs.as_slice();
    'chunks: while !rest.is_empty() {
        // The next chunk by bytes, at least one document.
        let mut take = 0;
        let mut bytes = 0;
        for d in rest {
            let len = d.as_bytes().len();
            if take > 0 && bytes + len > INSERT_CHUNK_BYTES {
                break;
            }
            bytes += len;
            take += 1;
        }
        let (chunk, after) = rest.split_at(take);
        rest = after;
        let mut from = 0;
        while let Some(part) = chunk.get(from..).filter(|p| !p.is_empty()) {
            match coll.insert_many_raw(part) {
                Ok(r) => {
                    n += r.inserted_count;
                    break;
                }
                Err(tsbucket::Error::InvalidDocument { index, message }) => {
                    if index > 0 {
                        match coll.insert_many_raw(part.get(..index).unwrap_or_default()) {
                            Ok(r) => n += r.inserted_count,
                            Err(e) => {
                                errors.push(write_error(offset + from, &CommandError::from(e)));
                                break 'chunks;
                            }
                        }
                    }
                    errors.push(write_error(
                        offset + from + index,
                        &CommandError::bad_value(message),
                    ));
                    if ordered {
                        break 'chunks;
                    }
                    from += index + 1;
                }
                Err(e) => {
                    // Not one document's fault (a full disk, a closed database): the rest of
                    // the batch is not written, whatever `ordered` says.
                    errors.push(write_error(offset + from, &CommandError::from(e)));
                    break 'chunks;
                }
            }
        }
        offset += take;
    }
    let mut reply = doc! {"n": count(n as i64)};
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    ok(reply)
}

/// A count as MongoDB sends it: an int32 while it fits.
fn count(n: i64) -> Bson {
    i32::try_from(n).map_or(Bson::Int64(n), Bson::Int32)
}

fn statements(req: &Request<'_>, key: &str) -> CmdResult<Vec<Document>> {
    documents(req, key)?
        .iter()
        .map(|d| Document::try_from(d.as_ref()).map_err(|e| CommandError::bad_value(e.to_string())))
        .collect()
}

pub fn update(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let ordered = opt_bool(&req.body, "ordered")?.unwrap_or(true);
    let stmts = statements(req, "updates")?;
    let coll = shared
        .dbs
        .get(req.db)?
        .and_then(|db| db.collection(&name).ok());
    let (mut n, mut modified) = (0i64, 0i64);
    let mut errors = Vec::new();
    for (i, s) in stmts.into_iter().enumerate() {
        let Some(coll) = &coll else {
            if s.get_bool("upsert").unwrap_or(false) {
                errors.push(write_error(
                    i,
                    &CommandError::new(
                        NAMESPACE_NOT_FOUND,
                        format!("{}.{name} does not exist", req.db),
                    ),
                ));
                if ordered {
                    break;
                }
            }
            continue;
        };
        match coll.update(s) {
            Ok(r) => {
                n += r.matched_count as i64;
                modified += r.modified_count as i64;
            }
            Err(e) => {
                errors.push(write_error(i, &CommandError::from(e)));
                if ordered {
                    break;
                }
            }
        }
    }
    let mut reply = doc! {"n": count(n), "nModified": count(modified)};
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    ok(reply)
}

pub fn delete(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let ordered = opt_bool(&req.body, "ordered")?.unwrap_or(true);
    let stmts = statements(req, "deletes")?;
    let coll = shared
        .dbs
        .get(req.db)?
        .and_then(|db| db.collection(&name).ok());
    let mut n = 0i64;
    let mut errors = Vec::new();
    if let Some(coll) = coll {
        for (i, s) in stmts.into_iter().enumerate() {
            match coll.delete(s) {
                Ok(r) => n += r.deleted_count as i64,
                Err(e) => {
                    errors.push(write_error(i, &CommandError::from(e)));
                    if ordered {
                        break;
                    }
                }
            }
        }
    }
    let mut reply = doc! {"n": count(n)};
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    ok(reply)
}
