//! `find`, `aggregate` and the cursor commands, `count`, `distinct`, `explain` and the
//! statistics commands.

use crate::cursors::{Docs, Open, DEFAULT_FIRST_BATCH};
use crate::error::{CmdResult, CommandError, BAD_VALUE, NAMESPACE_NOT_FOUND, NOT_IMPLEMENTED};
use crate::matcher::{compare, project, sort_documents};
use crate::reply::{cursor_reply, RawDoc};
use crate::reply::{ok, raw_ok};
use crate::request::{
    buckets_of, collection_name, non_negative, opt_bool, opt_doc, opt_i64, Request,
};
use crate::Shared;
use bson::{doc, Bson, Document, RawDocumentBuf};
use tsbucket::{Collection, FindOptions};

/// The collection a read names, or `None` when it (or its database) does not exist: reads of
/// a missing collection return nothing, as in MongoDB.
fn existing(shared: &Shared, req: &Request<'_>, name: &str) -> CmdResult<Option<Collection>> {
    let Some(db) = shared.dbs.get(req.db)? else {
        return Ok(None);
    };
    match db.collection(name) {
        Ok(c) => Ok(Some(c)),
        Err(tsbucket::Error::NamespaceNotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn batch_size(d: &Document) -> CmdResult<Option<usize>> {
    Ok(non_negative("batchSize", opt_i64(d, "batchSize")?)?.map(|n| n as usize))
}

/// Sends the first batch of `cursor` and keeps the cursor open if more follows.
pub fn first_batch(shared: &Shared, req: &Request<'_>, cursor: Open) -> CmdResult<Vec<u8>> {
    let size = match opt_doc(&req.body, "cursor")? {
        Some(c) => batch_size(&c)?,
        None => batch_size(&req.body)?,
    };
    reply_first(shared, cursor, size.unwrap_or(usize::MAX), false)
}

fn reply_first(
    shared: &Shared,
    mut cursor: Open,
    max_docs: usize,
    single: bool,
) -> CmdResult<Vec<u8>> {
    let ns = cursor.ns().to_string();
    cursor_reply("firstBatch", &ns, |array| {
        let done = cursor.fill(array, max_docs)?;
        if done || single {
            Ok(0)
        } else {
            shared.cursors.register(cursor)
        }
    })
}

pub fn find(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let ns = format!("{}.{name}", req.db);
    let body = &req.body;
    let filter = opt_doc(body, "filter")?.unwrap_or_default();
    let limit = opt_i64(body, "limit")?;
    // A negative limit is the legacy form of a single batch of that many.
    let single = opt_bool(body, "singleBatch")?.unwrap_or(false) || limit.is_some_and(|l| l < 0);
    let limit = limit.map(|l| l.unsigned_abs()).filter(|&l| l > 0);
    let skip = non_negative("skip", opt_i64(body, "skip")?)?;
    let size = batch_size(body)?.unwrap_or(DEFAULT_FIRST_BATCH);
    let size = if single {
        limit.map(|l| l as usize).unwrap_or(size).max(size)
    } else {
        size
    };
    if let Some(base) = buckets_of(&name) {
        let mut docs = match existing(shared, req, base)? {
            Some(c) => c.buckets(filter)?,
            None => Vec::new(),
        };
        if let Some(s) = opt_doc(body, "sort")?.filter(|s| !s.is_empty()) {
            sort_documents(&mut docs, &s)?;
        }
        let mut docs: Vec<_> = docs.into_iter().skip(skip.unwrap_or(0) as usize).collect();
        if let Some(l) = limit {
            docs.truncate(l as usize);
        }
        if let Some(p) = opt_doc(body, "projection")?.filter(|p| !p.is_empty()) {
            docs = docs
                .iter()
                .map(|d| project(d, &p))
                .collect::<CmdResult<_>>()?;
        }
        let docs = raw_list(docs)?;
        return reply_first(
            shared,
            Open::new(Docs::List(docs.into_iter()), ns, None),
            size,
            single,
        );
    }
    let Some(coll) = existing(shared, req, &name)? else {
        return reply_first(
            shared,
            Open::new(Docs::List(Vec::new().into_iter()), ns, None),
            size,
            single,
        );
    };
    let options = FindOptions {
        projection: opt_doc(body, "projection")?.filter(|p| !p.is_empty()),
        sort: opt_doc(body, "sort")?.filter(|s| !s.is_empty()),
        skip,
        limit: limit.map(|l| l as i64),
    };
    let cursor = coll.find_with(filter, options)?;
    reply_first(
        shared,
        Open::new(Docs::Engine(cursor), ns, limit),
        size,
        single,
    )
}

/// Documents as BSON bytes, for a cursor over a list.
pub fn raw_list(docs: Vec<Document>) -> CmdResult<Vec<RawDocumentBuf>> {
    docs.iter()
        .map(|d| RawDocumentBuf::try_from(d).map_err(|e| CommandError::bad_value(e.to_string())))
        .collect()
}

pub fn get_more(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let id = match req.body.get("getMore") {
        Some(Bson::Int64(id)) => *id,
        Some(other) => {
            return Err(CommandError::type_mismatch(format!(
                "BSON field 'getMore.getMore' is the wrong type '{:?}', expected type 'long'",
                other.element_type()
            )))
        }
        None => return Err(CommandError::bad_value("getMore needs a cursor id")),
    };
    let coll = match req.body.get("collection") {
        Some(Bson::String(s)) => s.clone(),
        _ => {
            return Err(CommandError::type_mismatch(
                "BSON field 'getMore.collection' must be a string",
            ))
        }
    };
    let ns = format!("{}.{coll}", req.db);
    let size = batch_size(&req.body)?
        .filter(|&n| n > 0)
        .unwrap_or(usize::MAX);
    let mut cursor = shared.cursors.take(id, &ns)?;
    let ns = cursor.ns().to_string();
    cursor_reply("nextBatch", &ns, |array| match cursor.fill(array, size) {
        Ok(true) => Ok(0),
        Ok(false) => {
            shared.cursors.put(id, cursor);
            Ok(id)
        }
        // A cursor that failed is closed: the error is final.
        Err(e) => Err(e),
    })
}

pub fn kill_cursors(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let Some(Bson::Array(ids)) = req.body.get("cursors") else {
        return Err(CommandError::type_mismatch(
            "killCursors needs an array 'cursors'",
        ));
    };
    let (mut killed, mut not_found) = (Vec::new(), Vec::new());
    for id in ids {
        let Bson::Int64(id) = id else {
            return Err(CommandError::type_mismatch("cursor ids are longs"));
        };
        if shared.cursors.kill(*id) {
            killed.push(Bson::Int64(*id));
        } else {
            not_found.push(Bson::Int64(*id));
        }
    }
    ok(
        doc! {"cursorsKilled": killed, "cursorsNotFound": not_found, "cursorsAlive": [], "cursorsUnknown": []},
    )
}

fn pipeline(body: &Document) -> CmdResult<Vec<Document>> {
    let Some(Bson::Array(stages)) = body.get("pipeline") else {
        return Err(CommandError::new(
            crate::error::FAILED_TO_PARSE,
            "'pipeline' option must be specified as an array",
        ));
    };
    stages
        .iter()
        .map(|s| match s {
            Bson::Document(d) => Ok(d.clone()),
            _ => Err(CommandError::type_mismatch(
                "each pipeline stage must be an object",
            )),
        })
        .collect()
}

pub fn aggregate(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = match req.body.iter().next() {
        Some((_, Bson::String(s))) => s.clone(),
        _ => return Err(CommandError::new(
            NOT_IMPLEMENTED,
            "aggregate on a database (aggregate: 1) is not served by tsbucket; name a collection",
        )),
    };
    let stages = pipeline(&req.body)?;
    if opt_doc(&req.body, "cursor")?.is_none() && !opt_bool(&req.body, "explain")?.unwrap_or(false)
    {
        return Err(CommandError::new(
            crate::error::FAILED_TO_PARSE,
            "The 'cursor' option is required, except for aggregate with the explain argument",
        ));
    }
    let ns = format!("{}.{name}", req.db);
    if opt_bool(&req.body, "explain")?.unwrap_or(false) {
        let coll = existing(shared, req, &name)?.ok_or_else(|| {
            CommandError::new(NAMESPACE_NOT_FOUND, format!("ns does not exist: {ns}"))
        })?;
        return ok(explain_document(
            &ns,
            coll.explain_aggregate(stages)?,
            "aggregate",
        ));
    }
    if stages.first().is_some_and(|s| s.contains_key("$collStats")) {
        let docs = coll_stats_stage(shared, req, &name, &stages)?;
        return first_batch(
            shared,
            req,
            Open::new(Docs::List(docs.into_iter()), ns, None),
        );
    }
    if let Some(base) = buckets_of(&name) {
        let docs = match existing(shared, req, base)? {
            Some(c) => bucket_pipeline(&c, &stages)?,
            None => Vec::new(),
        };
        return first_batch(
            shared,
            req,
            Open::new(Docs::List(docs.into_iter()), ns, None),
        );
    }
    let docs = match existing(shared, req, &name)? {
        Some(c) => Docs::Engine(c.aggregate(stages)?),
        None => Docs::List(Vec::new().into_iter()),
    };
    first_batch(shared, req, Open::new(docs, ns, None))
}

/// A pipeline over the raw buckets: leading `$match` stages filter the buckets in the engine,
/// then `$sort`, `$skip`, `$limit`, `$project` of paths, `$count` and a `$group` that counts
/// (drivers' `count_documents`) apply in order.
fn bucket_pipeline(c: &Collection, stages: &[Document]) -> CmdResult<Vec<RawDocumentBuf>> {
    let mut filter = Document::new();
    let mut rest = stages;
    let mut ands = Vec::new();
    while let Some((first, tail)) = rest.split_first() {
        match first.get("$match") {
            Some(Bson::Document(m)) => ands.push(Bson::Document(m.clone())),
            _ => break,
        }
        rest = tail;
    }
    if ands.len() == 1 {
        if let Some(Bson::Document(m)) = ands.pop() {
            filter = m;
        }
    } else if !ands.is_empty() {
        filter.insert("$and", ands);
    }
    let mut docs = c.buckets(filter)?;
    for stage in rest {
        let (op, arg) = stage
            .iter()
            .next()
            .ok_or_else(|| CommandError::bad_value("an empty pipeline stage"))?;
        let n = || match arg {
            Bson::Int32(n) if *n >= 0 => Ok(*n as usize),
            Bson::Int64(n) if *n >= 0 => Ok(*n as usize),
            Bson::Double(n) if *n >= 0.0 && n.fract() == 0.0 => Ok(*n as usize),
            _ => Err(CommandError::bad_value(format!(
                "{op} needs a non-negative integer"
            ))),
        };
        match op.as_str() {
            "$skip" => {
                let k = n()?.min(docs.len());
                docs.drain(..k);
            }
            "$limit" => docs.truncate(n()?),
            "$sort" => {
                let Bson::Document(spec) = arg else {
                    return Err(CommandError::bad_value("$sort needs a document"));
                };
                sort_documents(&mut docs, spec)?;
            }
            "$project" => {
                let Bson::Document(spec) = arg else {
                    return Err(CommandError::bad_value("$project needs a document"));
                };
                docs = docs.iter().map(|d| project(d, spec)).collect::<CmdResult<_>>()?;
            }
            "$group" => docs = count_group(arg, docs.len())?,
            "$count" => {
                let Bson::String(field) = arg else {
                    return Err(CommandError::bad_value("$count needs a field name"));
                };
                let total = docs.len() as i32;
                docs = if total == 0 { Vec::new() } else { vec![doc! {field.clone(): total}] };
            }
            other => {
                return Err(CommandError::new(
                    NOT_IMPLEMENTED,
                    format!("{other} is not served on raw buckets; the stages there are $match (first), $sort, $skip, $limit, $project (paths), $count and $group counting under a constant _id"),
                ))
            }
        }
    }
    raw_list(docs)
}

/// `{$group: {_id: <constant>, n: {$sum: <number>}}}`, the form drivers count with.
fn count_group(arg: &Bson, n: usize) -> CmdResult<Vec<Document>> {
    let refuse = || {
        CommandError::new(
            NOT_IMPLEMENTED,
            "on raw buckets $group is served only with a constant _id and {$sum: <number>} fields",
        )
    };
    let Bson::Document(spec) = arg else {
        return Err(refuse());
    };
    let mut out = Document::new();
    for (k, v) in spec {
        if k == "_id" {
            if matches!(v, Bson::String(s) if s.starts_with('$'))
                || matches!(v, Bson::Document(_) | Bson::Array(_))
            {
                return Err(refuse());
            }
            out.insert("_id", v.clone());
            continue;
        }
        let total = match v {
            Bson::Document(acc) if acc.len() == 1 => match acc.get("$sum") {
                Some(Bson::Int32(k)) => Bson::Int64(i64::from(*k) * n as i64),
                Some(Bson::Int64(k)) => Bson::Int64(k.saturating_mul(n as i64)),
                Some(Bson::Double(k)) => Bson::Double(k * n as f64),
                _ => return Err(refuse()),
            },
            _ => return Err(refuse()),
        };
        // MongoDB sums int32 constants into an int32 while they fit.
        let total = match total {
            Bson::Int64(t) => i32::try_from(t).map(Bson::Int32).unwrap_or(Bson::Int64(t)),
            t => t,
        };
        out.insert(k.clone(), total);
    }
    if !out.contains_key("_id") {
        return Err(CommandError::new(
            crate::error::FAILED_TO_PARSE,
            "a group specification must include an _id",
        ));
    }
    Ok(if n == 0 { Vec::new() } else { vec![out] })
}

pub fn count(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let filter = opt_doc(&req.body, "query")?.unwrap_or_default();
    let skip = non_negative("skip", opt_i64(&req.body, "skip")?)?.unwrap_or(0);
    let limit = opt_i64(&req.body, "limit")?
        .map(|l| l.unsigned_abs())
        .filter(|&l| l > 0);
    let n = if let Some(base) = buckets_of(&name) {
        match existing(shared, req, base)? {
            Some(c) => c.buckets(filter)?.len() as u64,
            None => 0,
        }
    } else {
        match existing(shared, req, &name)? {
            Some(c) => c.count_documents(filter)?,
            None => 0,
        }
    };
    let n = n.saturating_sub(skip);
    let n = limit.map_or(n, |l| n.min(l)) as i64;
    // An int32 while it fits, as MongoDB sends it.
    ok(doc! {"n": i32::try_from(n).map_or(Bson::Int64(n), Bson::Int32)})
}

pub fn distinct(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let key = match req.body.get("key") {
        Some(Bson::String(k)) if !k.is_empty() && !k.starts_with('$') => k.clone(),
        _ => {
            return Err(CommandError::type_mismatch(
                "distinct needs 'key', a field path",
            ))
        }
    };
    let filter = opt_doc(&req.body, "query")?.unwrap_or_default();
    let Some(coll) = existing(shared, req, &name)? else {
        return ok(doc! {"values": []});
    };
    let mut stages = Vec::new();
    if !filter.is_empty() {
        stages.push(doc! {"$match": filter});
    }
    stages.push(doc! {"$group": {"_id": format!("${key}")}});
    let mut values: Vec<Bson> = Vec::new();
    for d in coll.aggregate(stages)? {
        let d = d?;
        match d.get("_id") {
            // As MongoDB's distinct: array values count element by element, and documents
            // without the field are not a value.
            Some(Bson::Array(items)) => values.extend(items.iter().cloned()),
            Some(Bson::Null) | None => {}
            Some(v) => values.push(v.clone()),
        }
    }
    values.sort_by(compare);
    values.dedup_by(|a, b| compare(a, b) == std::cmp::Ordering::Equal);
    ok(doc! {"values": values})
}

fn explain_document(ns: &str, e: tsbucket::Explain, command: &str) -> Document {
    // An open side is the extreme i64, a date no driver can decode: leave it out.
    let bounds = match e.time_bounds {
        Some((lo, hi)) => {
            let mut b = Document::new();
            if lo != i64::MIN {
                b.insert("min", bson::DateTime::from_millis(lo));
            }
            if hi != i64::MAX {
                b.insert("max", bson::DateTime::from_millis(hi));
            }
            Bson::Document(b)
        }
        None => Bson::Null,
    };
    doc! {
        "queryPlanner": {
            "namespace": ns,
            "command": command,
            "winningPlan": {
                "stage": "TSBUCKET_PLAN",
                "operators": e.operators.clone(),
                "rewrites": e.rewrites.clone(),
                "timeBounds": bounds,
                "indexUsed": e.index_used.clone().map_or(Bson::Null, Bson::String),
                "metaLookup": e.meta_lookup.clone().map_or(Bson::Null, Bson::String),
            },
            "rejectedPlans": [],
        },
        "executionStats": {
            "bucketsTotal": e.buckets_total as i64,
            "bucketsPrunedById": e.buckets_pruned_by_id as i64,
            "bucketsPrunedByStats": e.buckets_pruned_by_stats as i64,
            "bucketsPrunedByIndex": e.buckets_pruned_by_index as i64,
            "bucketsFromIndex": e.buckets_from_index as i64,
            "bucketsExamined": e.buckets_examined as i64,
            "bucketsTakenWhole": e.buckets_taken_whole as i64,
            "bucketsUnpacked": e.buckets_unpacked as i64,
            "bucketsFromStats": e.buckets_from_stats as i64,
        },
        "serverInfo": {"host": "localhost", "version": crate::wire::MONGODB_VERSION},
    }
}

pub fn explain(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let inner = opt_doc(&req.body, "explain")?
        .ok_or_else(|| CommandError::bad_value("explain needs the command to explain"))?;
    let (cmd, target) = inner
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
        .ok_or_else(|| CommandError::bad_value("explain of an empty command"))?;
    let Bson::String(name) = target else {
        return Err(CommandError::type_mismatch(
            "explain needs a command on a named collection",
        ));
    };
    let ns = format!("{}.{name}", req.db);
    let missing = || CommandError::new(NAMESPACE_NOT_FOUND, format!("ns does not exist: {ns}"));
    let coll = existing(shared, req, &name)?.ok_or_else(missing)?;
    let e = match cmd.as_str() {
        "find" => {
            // The engine explains a filter; sort, skip and limit follow it in the same order.
            let mut stages = vec![doc! {"$match": opt_doc(&inner, "filter")?.unwrap_or_default()}];
            if let Some(s) = opt_doc(&inner, "sort")?.filter(|s| !s.is_empty()) {
                stages.push(doc! {"$sort": s});
            }
            if let Some(s) = opt_i64(&inner, "skip")?.filter(|&s| s > 0) {
                stages.push(doc! {"$skip": s});
            }
            if let Some(l) = opt_i64(&inner, "limit")?.filter(|&l| l != 0) {
                stages.push(doc! {"$limit": l.abs()});
            }
            if let Some(p) = opt_doc(&inner, "projection")?.filter(|p| !p.is_empty()) {
                stages.push(doc! {"$project": p});
            }
            coll.explain_aggregate(stages)?
        }
        "aggregate" => coll.explain_aggregate(pipeline(&inner)?)?,
        "count" => coll.explain(opt_doc(&inner, "query")?.unwrap_or_default())?,
        "distinct" => coll.explain(opt_doc(&inner, "query")?.unwrap_or_default())?,
        other => {
            return Err(CommandError::new(
                BAD_VALUE,
                format!(
                    "explain of {other} is not served; find, aggregate, count and distinct are"
                ),
            ))
        }
    };
    ok(explain_document(&ns, e, &cmd))
}

fn stats_of(ns: &str, c: &Collection) -> CmdResult<Document> {
    let s = c.stats()?;
    let mut ts = doc! {
        "bucketsNs": ns.replacen('.', ".system.buckets.", 1),
        "bucketCount": s.buckets as i64,
        "avgBucketSize": s.avg_bucket_bytes as i64,
    };
    for (k, v) in s.catalog.named() {
        ts.insert(k, v as i64);
    }
    Ok(doc! {
        "ns": ns,
        "count": s.measurements as i64,
        "size": s.bson_bytes as i64,
        "storageSize": s.segment_bytes as i64,
        "totalSize": s.bytes_on_disk as i64,
        "nindexes": c.list_indexes()?.len() as i32,
        "timeseries": ts,
    })
}

pub fn coll_stats(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let name = collection_name(req)?;
    let ns = format!("{}.{name}", req.db);
    let coll = existing(shared, req, &name)?.ok_or_else(|| {
        CommandError::new(NAMESPACE_NOT_FOUND, format!("Collection [{ns}] not found."))
    })?;
    ok(stats_of(&ns, &coll)?)
}

fn coll_stats_stage(
    shared: &Shared,
    req: &Request<'_>,
    name: &str,
    stages: &[Document],
) -> CmdResult<Vec<RawDocumentBuf>> {
    if stages.len() > 1 {
        return Err(CommandError::new(
            NOT_IMPLEMENTED,
            "$collStats is served only as the whole pipeline",
        ));
    }
    let ns = format!("{}.{name}", req.db);
    let coll = existing(shared, req, name)?.ok_or_else(|| {
        CommandError::new(NAMESPACE_NOT_FOUND, format!("Collection [{ns}] not found."))
    })?;
    let mut s = stats_of(&ns, &coll)?;
    s.remove("ns");
    let out =
        doc! {"ns": ns, "host": "localhost", "localTime": bson::DateTime::now(), "storageStats": s};
    raw_list(vec![out])
}

pub fn db_stats(shared: &Shared, req: &Request<'_>) -> CmdResult<Vec<u8>> {
    let mut r = RawDoc::new();
    r.str("db", req.db);
    let (mut colls, mut objects, mut size, mut storage) = (0i64, 0i64, 0i64, 0i64);
    if let Some(db) = shared.dbs.get(req.db)? {
        for info in db.list_collections()? {
            let s = db.collection(&info.name)?.stats()?;
            colls += 1;
            objects += s.measurements as i64;
            size += s.bson_bytes as i64;
            storage += s.bytes_on_disk as i64;
        }
    }
    r.i64("collections", colls);
    r.i64("views", 0);
    r.i64("objects", objects);
    r.i64("dataSize", size);
    r.i64("storageSize", storage);
    raw_ok(r)
}
