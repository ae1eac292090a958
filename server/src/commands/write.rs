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
    with_errors(doc! {"n": count(n as i64)}, errors)
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

/// Runs each statement of `key` in order, each failure becoming a `writeErrors` entry with
/// its index; an ordered command stops at the first.
fn each_statement(
    req: &Request<'_>,
    key: &str,
    mut run: impl FnMut(Document) -> CmdResult<()>,
) -> CmdResult<Vec<Bson>> {
    let ordered = opt_bool(&req.body, "ordered")?.unwrap_or(true);
    let mut errors = Vec::new();
    for (i, s) in statements(req, key)?.into_iter().enumerate() {
        if let Err(e) = run(s) {
            errors.push(write_error(i, &e));
            if ordered {
                break;
            }
        }
    }
    Ok(errors)
}

/// `reply` with its `writeErrors`, if there are any.
fn with_errors(mut reply: Document, errors: Vec<Bson>) -> CmdResult<Vec<u8>> {
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    ok(reply)
}

/// The collection a write names, or `None` when it does not exist.
fn target(
    shared: &Shared,
    req: &Request<'_>,
    name: &str,
) -> CmdResult<Option<tsbucket::Collection>> {
    Ok(shared
        .dbs
        .get(req.db)?
        .and_then(|db| db.collection(name).ok()))
}

pub fn update(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let coll = target(shared, req, &name)?;
    let (mut n, mut modified) = (0i64, 0i64);
    let errors = each_statement(req, "updates", |s| match &coll {
        Some(c) => {
            let r = c.update(s)?;
            n += r.matched_count as i64;
            modified += r.modified_count as i64;
            Ok(())
        }
        // Nothing to update; only an upsert would have needed the collection.
        None if s.get_bool("upsert").unwrap_or(false) => Err(CommandError::new(
            NAMESPACE_NOT_FOUND,
            format!("{}.{name} does not exist", req.db),
        )),
        None => Ok(()),
    })?;
    with_errors(doc! {"n": count(n), "nModified": count(modified)}, errors)
}

pub fn delete(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let coll = target(shared, req, &name)?;
    let mut n = 0i64;
    let errors = each_statement(req, "deletes", |s| {
        if let Some(c) = &coll {
            n += c.delete(s)?.deleted_count as i64;
        }
        Ok(())
    })?;
    with_errors(doc! {"n": count(n)}, errors)
}
