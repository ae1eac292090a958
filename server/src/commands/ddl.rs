//! Databases, collections and indexes: what exists and how it is set up.

use crate::cursors::{Docs, Open};
use crate::databases::check_name;
use crate::error::{CmdResult, CommandError, INVALID_OPTIONS, NAMESPACE_NOT_FOUND};
use crate::matcher::matches;
use crate::reply::ok;
use crate::request::{buckets_of, collection_name, opt_bool, opt_doc, opt_i64, Request};
use crate::Shared;
use bson::{doc, Bson, Document, RawDocumentBuf};
use tsbucket::{CollMod, Granularity, TimeseriesOptions};

pub fn list_databases(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name_only = opt_bool(&req.body, "nameOnly")?.unwrap_or(false);
    let filter = opt_doc(&req.body, "filter")?.unwrap_or_default();
    let mut dbs = Vec::new();
    let mut total = 0i64;
    for name in shared.dbs.names()? {
        let size = dir_size(&shared.dbs.dir().join(&name)) as i64;
        let entry = if name_only {
            doc! {"name": name}
        } else {
            let empty = match shared.dbs.get(&name)? {
                Some(db) => db.list_collections()?.is_empty(),
                None => true,
            };
            doc! {"name": name, "sizeOnDisk": size, "empty": empty}
        };
        if matches(&filter, &entry)? {
            total += size;
            dbs.push(Bson::Document(entry));
        }
    }
    if name_only {
        return ok(doc! {"databases": dbs});
    }
    ok(doc! {"databases": dbs, "totalSize": total, "totalSizeMb": total / (1024 * 1024)})
}

fn dir_size(p: &std::path::Path) -> u64 {
    let mut n = 0;
    if let Ok(entries) = std::fs::read_dir(p) {
        for e in entries.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => n += dir_size(&e.path()),
                Ok(_) => n += e.metadata().map(|m| m.len()).unwrap_or(0),
                Err(_) => {}
            }
        }
    }
    n
}

pub fn drop_database(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let dropped = shared.dbs.drop_database(req.db)?;
    if dropped {
        ok(doc! {"dropped": req.db})
    } else {
        ok(Document::new())
    }
}

/// Parses `create`'s options into tsbucket's, refusing what tsbucket does not store.
fn create_options(body: &Document) -> CmdResult<TimeseriesOptions> {
    let Some(ts) = opt_doc(body, "timeseries")? else {
        return Err(CommandError::new(
            INVALID_OPTIONS,
            "tsbucket stores only time-series collections: give timeseries: {timeField: ...}",
        ));
    };
    for (k, _) in body.iter().skip(1) {
        match k.as_str() {
            "timeseries" | "expireAfterSeconds" | "writeConcern" | "comment" | "lsid" | "$db" | "$clusterTime" | "$readPreference" | "apiVersion" | "apiStrict" | "apiDeprecationErrors" => {}
            other => {
                return Err(CommandError::new(
                    INVALID_OPTIONS,
                    format!("the create option '{other}' is not supported for time-series collections in tsbucket"),
                ))
            }
        }
    }
    let time_field = match ts.get("timeField") {
        Some(Bson::String(s)) => s.clone(),
        Some(_) => {
            return Err(CommandError::type_mismatch(
                "timeseries.timeField must be a string",
            ))
        }
        None => {
            return Err(CommandError::new(
                40414,
                "BSON field 'timeseries.timeField' is missing but a required field",
            ))
        }
    };
    let mut o = TimeseriesOptions::new(time_field);
    for (k, v) in &ts {
        match k.as_str() {
            "timeField" => {}
            "metaField" => match v {
                Bson::String(s) => o = o.meta_field(s.clone()),
                _ => {
                    return Err(CommandError::type_mismatch(
                        "timeseries.metaField must be a string",
                    ))
                }
            },
            "granularity" => match v {
                Bson::String(s) => {
                    o = o.granularity(
                        Granularity::parse(s)
                            .map_err(|e| CommandError::new(INVALID_OPTIONS, e.to_string()))?,
                    )
                }
                _ => {
                    return Err(CommandError::type_mismatch(
                        "timeseries.granularity must be a string",
                    ))
                }
            },
            "bucketMaxSpanSeconds" | "bucketRoundingSeconds" => {}
            other => {
                return Err(CommandError::new(
                    40415,
                    format!("BSON field 'timeseries.{other}' is an unknown field."),
                ))
            }
        }
    }
    let span = seconds(&ts, "bucketMaxSpanSeconds")?;
    let rounding = seconds(&ts, "bucketRoundingSeconds")?;
    match (span, rounding) {
        (None, None) => {}
        (Some(s), Some(r)) => {
            if ts.contains_key("granularity") {
                return Err(CommandError::new(
                    INVALID_OPTIONS,
                    "Time-series 'bucketMaxSpanSeconds' and 'bucketRoundingSeconds' cannot be set with 'granularity'",
                ));
            }
            o = o.bucket_span(s, r);
        }
        _ => return Err(CommandError::new(
            INVALID_OPTIONS,
            "Time-series 'bucketMaxSpanSeconds' and 'bucketRoundingSeconds' must be given together",
        )),
    }
    if let Some(secs) = opt_i64(body, "expireAfterSeconds")? {
        let secs = u64::try_from(secs).map_err(|_| {
            CommandError::new(INVALID_OPTIONS, "TTL index 'expireAfterSeconds' option must be within an acceptable range, cannot be less than 0")
        })?;
        o = o.expire_after_seconds(secs);
    }
    o.validate()?;
    Ok(o)
}

fn seconds(d: &Document, key: &str) -> CmdResult<Option<u32>> {
    match opt_i64(d, key)? {
        None => Ok(None),
        Some(v) => u32::try_from(v).map(Some).map_err(|_| {
            CommandError::new(
                INVALID_OPTIONS,
                format!("timeseries.{key} must be between 1 and 31536000"),
            )
        }),
    }
}

pub fn create(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    if name.starts_with("system.") {
        return Err(CommandError::new(
            crate::error::INVALID_NAMESPACE,
            format!("cannot create a collection in the system namespace: {name}"),
        ));
    }
    let options = create_options(&req.body)?;
    check_name(req.db)?;
    let db = shared.dbs.get_or_create(req.db)?;
    db.create_collection(&name, options)?;
    ok(Document::new())
}

/// `{timeseries: {...}, expireAfterSeconds}` as `listCollections` reports them.
fn options_document(o: &TimeseriesOptions) -> Document {
    let mut ts = doc! {"timeField": o.get_time_field()};
    if let Some(m) = o.get_meta_field() {
        ts.insert("metaField", m);
    }
    match o.get_granularity() {
        Some(g) => {
            ts.insert("granularity", g.as_str());
        }
        None => {
            ts.insert("bucketRoundingSeconds", o.bucket_rounding_seconds() as i32);
        }
    }
    ts.insert("bucketMaxSpanSeconds", o.bucket_max_span_seconds() as i32);
    let mut d = doc! {"timeseries": ts};
    if let Some(secs) = o.get_expire_after_seconds() {
        d.insert("expireAfterSeconds", secs as i64);
    }
    d
}

pub fn list_collections(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name_only = opt_bool(&req.body, "nameOnly")?.unwrap_or(false);
    let filter = opt_doc(&req.body, "filter")?.unwrap_or_default();
    let mut out = Vec::new();
    if let Some(db) = shared.dbs.get(req.db)? {
        let mut infos = db.list_collections()?;
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        for info in infos {
            let options = options_document(&info.options);
            let buckets_name = format!("system.buckets.{}", info.name);
            let entries = [
                doc! {"name": info.name.clone(), "type": "timeseries", "options": options.clone(), "info": {"readOnly": false}},
                doc! {
                    "name": buckets_name,
                    "type": "collection",
                    "options": {"validator": {"$jsonSchema": {"bsonType": "object", "required": ["_id", "control", "data"]}}, "clusteredIndex": true, "timeseries": options.get("timeseries").cloned().unwrap_or(Bson::Null)},
                    "info": {"readOnly": false},
                },
            ];
            for e in entries {
                // The filter sees the full entry, as in MongoDB, even when only names return.
                if !matches(&filter, &e)? {
                    continue;
                }
                let e = if name_only {
                    doc! {"name": e.get("name").cloned().unwrap_or(Bson::Null), "type": e.get("type").cloned().unwrap_or(Bson::Null)}
                } else {
                    e
                };
                out.push(
                    RawDocumentBuf::try_from(&e)
                        .map_err(|e| CommandError::bad_value(e.to_string()))?,
                );
            }
        }
    }
    let ns = format!("{}.$cmd.listCollections", req.db);
    super::read::first_batch(
        shared,
        req,
        Open::new(Docs::List(out.into_iter()), ns, None),
    )
}

pub fn drop(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let name = buckets_of(&name).map(str::to_string).unwrap_or(name);
    let ns = format!("{}.{}", req.db, name);
    let Some(db) = shared.dbs.get(req.db)? else {
        return ok(Document::new());
    };
    let indexes = match db.collection(&name) {
        Ok(c) => c.list_indexes()?.len() as i32,
        Err(_) => return ok(Document::new()),
    };
    db.drop_collection(&name)?;
    ok(doc! {"ns": ns, "nIndexesWas": indexes})
}

pub fn coll_mod(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let db = shared.dbs.get(req.db)?.ok_or_else(|| {
        CommandError::new(
            NAMESPACE_NOT_FOUND,
            format!("ns does not exist: {}.{name}", req.db),
        )
    })?;
    let mut m = CollMod::default();
    for (k, v) in req.body.iter().skip(1) {
        match k.as_str() {
            "timeseries" => {
                let Bson::Document(ts) = v else {
                    return Err(CommandError::type_mismatch(
                        "collMod's timeseries must be a document",
                    ));
                };
                for (tk, tv) in ts {
                    match (tk.as_str(), tv) {
                        ("granularity", Bson::String(s)) => {
                            m =
                                m.granularity(Granularity::parse(s).map_err(|e| {
                                    CommandError::new(INVALID_OPTIONS, e.to_string())
                                })?)
                        }
                        ("bucketMaxSpanSeconds", _) => {
                            m = m.bucket_max_span_seconds(
                                seconds(ts, "bucketMaxSpanSeconds")?.unwrap_or(0),
                            )
                        }
                        ("bucketRoundingSeconds", _) => {
                            m = m.bucket_rounding_seconds(
                                seconds(ts, "bucketRoundingSeconds")?.unwrap_or(0),
                            )
                        }
                        (other, _) => {
                            return Err(CommandError::new(
                                40415,
                                format!(
                                    "BSON field 'collMod.timeseries.{other}' is an unknown field."
                                ),
                            ))
                        }
                    }
                }
            }
            "expireAfterSeconds" => match v {
                Bson::String(s) if s == "off" => m = m.expire_after_seconds(None),
                _ => {
                    let secs = opt_i64(&req.body, "expireAfterSeconds")?.unwrap_or(0);
                    let secs = u64::try_from(secs).map_err(|_| {
                        CommandError::new(
                            INVALID_OPTIONS,
                            "expireAfterSeconds must be a number >= 0 or \"off\"",
                        )
                    })?;
                    m = m.expire_after_seconds(Some(secs));
                }
            },
            "writeConcern" | "comment" | "lsid" | "$db" | "$clusterTime" | "$readPreference" => {}
            other => {
                return Err(CommandError::new(
                    INVALID_OPTIONS,
                    format!("collMod option '{other}' is not supported by tsbucket"),
                ))
            }
        }
    }
    db.coll_mod(&name, m)?;
    ok(Document::new())
}

fn collection(shared: &Shared, req: &Request<'_>, name: &str) -> CmdResult<tsbucket::Collection> {
    let db = shared.dbs.get(req.db)?.ok_or_else(|| {
        CommandError::new(
            NAMESPACE_NOT_FOUND,
            format!("ns does not exist: {}.{name}", req.db),
        )
    })?;
    Ok(db.collection(name)?)
}

pub fn create_indexes(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let coll = collection(shared, req, &name)?;
    let Some(Bson::Array(specs)) = req.body.get("indexes") else {
        return Err(CommandError::type_mismatch(
            "createIndexes needs an array 'indexes'",
        ));
    };
    let before = coll.list_indexes()?.len() as i32;
    for spec in specs {
        let Bson::Document(spec) = spec else {
            return Err(CommandError::type_mismatch(
                "each index specification must be a document",
            ));
        };
        let keys = opt_doc(spec, "key")?.ok_or_else(|| {
            CommandError::new(FAILED_TO_PARSE, "index specification has no 'key'")
        })?;
        let mut options = spec.clone();
        options.remove("key");
        options.remove("v");
        coll.create_index_with(keys, options)?;
    }
    let after = coll.list_indexes()?.len() as i32;
    let mut d = doc! {"numIndexesBefore": before, "numIndexesAfter": after, "createdCollectionAutomatically": false};
    if before == after {
        d.insert("note", "all indexes already exist");
    }
    ok(d)
}

use crate::error::FAILED_TO_PARSE;

pub fn list_indexes(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let (coll, raw) = match buckets_of(&name) {
        Some(base) => (collection(shared, req, base)?, true),
        None => (collection(shared, req, &name)?, false),
    };
    let list = if raw {
        coll.list_bucket_indexes()?
    } else {
        coll.list_indexes()?
    };
    let docs = super::read::raw_list(list)?;
    let ns = format!("{}.{name}", req.db);
    super::read::first_batch(
        shared,
        req,
        Open::new(Docs::List(docs.into_iter()), ns, None),
    )
}

pub fn drop_indexes(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let coll = collection(shared, req, &name)?;
    let indexes = coll.list_indexes()?;
    let was = indexes.len() as i32;
    let name_of_key = |keys: &Document| -> CmdResult<String> {
        indexes
            .iter()
            .find(|i| i.get_document("key").map(|k| k == keys).unwrap_or(false))
            .and_then(|i| i.get_str("name").ok().map(str::to_string))
            .ok_or_else(|| CommandError::new(27, format!("can't find index with key: {keys}")))
    };
    let targets: Vec<String> = match req.body.get("index") {
        Some(Bson::String(s)) if s == "*" => indexes
            .iter()
            .filter_map(|i| i.get_str("name").ok().map(str::to_string))
            .collect(),
        Some(Bson::String(s)) => vec![s.clone()],
        Some(Bson::Array(a)) => a
            .iter()
            .map(|v| match v {
                Bson::String(s) => Ok(s.clone()),
                _ => Err(CommandError::type_mismatch("dropIndexes takes index names")),
            })
            .collect::<CmdResult<_>>()?,
        Some(Bson::Document(keys)) => vec![name_of_key(keys)?],
        _ => {
            return Err(CommandError::type_mismatch(
                "dropIndexes needs 'index': a name, names, a key pattern or \"*\"",
            ))
        }
    };
    for t in targets {
        coll.drop_index(&t)?;
    }
    ok(doc! {"nIndexesWas": was})
}
