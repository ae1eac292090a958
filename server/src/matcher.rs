//! Matching, ordering and projecting for the documents the server lists itself
//! (`listCollections`, `listDatabases`, raw buckets): equality on dotted paths, `$eq $ne $in
//! $nin $exists`, `$and $or $nor`; sorts on paths; projections of paths. Measurements are
//! never handled here; the engine does that.

use crate::error::{CmdResult, CommandError, BAD_VALUE};
use bson::{Bson, Document};

/// Whether `doc` matches `filter`.
pub fn matches(filter: &Document, doc: &Document) -> CmdResult<bool> {
    for (k, cond) in filter {
        let ok = match k.as_str() {
            "$and" | "$or" | "$nor" => {
                let Bson::Array(parts) = cond else {
                    return Err(CommandError::new(
                        BAD_VALUE,
                        format!("{k} must be an array"),
                    ));
                };
                let mut results = Vec::with_capacity(parts.len());
                for p in parts {
                    let Bson::Document(p) = p else {
                        return Err(CommandError::new(
                            BAD_VALUE,
                            format!("{k} entries must be objects"),
                        ));
                    };
                    results.push(matches(p, doc)?);
                }
                match k.as_str() {
                    "$and" => results.iter().all(|r| *r),
                    "$or" => results.iter().any(|r| *r),
                    _ => !results.iter().any(|r| *r),
                }
            }
            path => field_matches(lookup(doc, path), cond)?,
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

fn lookup<'a>(doc: &'a Document, path: &str) -> Option<&'a Bson> {
    let mut cur = doc;
    let mut parts = path.split('.').peekable();
    while let Some(p) = parts.next() {
        let v = cur.get(p)?;
        if parts.peek().is_none() {
            return Some(v);
        }
        match v {
            Bson::Document(d) => cur = d,
            _ => return None,
        }
    }
    None
}

fn is_operator_doc(d: &Document) -> bool {
    d.keys().next().is_some_and(|k| k.starts_with('$'))
}

fn field_matches(v: Option<&Bson>, cond: &Bson) -> CmdResult<bool> {
    let Bson::Document(ops) = cond else {
        return Ok(equals(v, cond));
    };
    if !is_operator_doc(ops) {
        return Ok(equals(v, cond));
    }
    for (op, arg) in ops {
        let ok = match op.as_str() {
            "$eq" => equals(v, arg),
            "$ne" => !equals(v, arg),
            "$in" | "$nin" => {
                let Bson::Array(list) = arg else {
                    return Err(CommandError::new(BAD_VALUE, format!("{op} needs an array")));
                };
                let found = list.iter().any(|a| equals(v, a));
                if op == "$in" {
                    found
                } else {
                    !found
                }
            }
            "$exists" => {
                let want = !matches!(
                    arg,
                    Bson::Boolean(false) | Bson::Int32(0) | Bson::Int64(0) | Bson::Null
                );
                v.is_some() == want
            }
            other => {
                return Err(CommandError::new(
                    BAD_VALUE,
                    format!("{other} is not supported in this listing's filter"),
                ))
            }
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

fn equals(v: Option<&Bson>, want: &Bson) -> bool {
    match (v, want) {
        (None, Bson::Null) => true,
        (None, _) => false,
        (Some(Bson::Array(items)), w) if !matches!(w, Bson::Array(_)) => {
            items.iter().any(|i| same(i, w))
        }
        (Some(v), w) => same(v, w),
    }
}

fn same(a: &Bson, b: &Bson) -> bool {
    let num = |x: &Bson| match x {
        Bson::Int32(i) => Some(f64::from(*i)),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(d) => Some(*d),
        _ => None,
    };
    match (num(a), num(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// MongoDB's order of values, close enough for listings: by type bracket, then by value.
pub fn compare(a: &Bson, b: &Bson) -> std::cmp::Ordering {
    let num = |x: &Bson| match x {
        Bson::Int32(i) => Some(f64::from(*i)),
        Bson::Int64(i) => Some(*i as f64),
        Bson::Double(d) => Some(*d),
        _ => None,
    };
    if let (Some(x), Some(y)) = (num(a), num(b)) {
        return x.total_cmp(&y);
    }
    let bracket = |x: &Bson| match x {
        Bson::Null => 1,
        Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_) | Bson::Decimal128(_) => 2,
        Bson::String(_) | Bson::Symbol(_) => 3,
        Bson::Document(_) => 4,
        Bson::Array(_) => 5,
        Bson::Binary(_) => 6,
        Bson::ObjectId(_) => 7,
        Bson::Boolean(_) => 8,
        Bson::DateTime(_) => 9,
        Bson::Timestamp(_) => 10,
        Bson::RegularExpression(_) => 11,
        _ => 12,
    };
    bracket(a).cmp(&bracket(b)).then_with(|| match (a, b) {
        (Bson::String(x), Bson::String(y)) => x.cmp(y),
        (Bson::ObjectId(x), Bson::ObjectId(y)) => x.bytes().cmp(&y.bytes()),
        (Bson::Boolean(x), Bson::Boolean(y)) => x.cmp(y),
        (Bson::DateTime(x), Bson::DateTime(y)) => x.cmp(y),
        _ => a.to_string().cmp(&b.to_string()),
    })
}

/// Sorts `docs` by a sort specification (`{path: 1 | -1, ...}`); missing values sort first,
/// as nulls do in MongoDB.
pub fn sort_documents(docs: &mut [Document], spec: &Document) -> CmdResult<()> {
    let mut keys = Vec::with_capacity(spec.len());
    for (path, dir) in spec {
        let desc = match dir {
            Bson::Int32(1) | Bson::Int64(1) => false,
            Bson::Int32(-1) | Bson::Int64(-1) => true,
            Bson::Double(d) if *d == 1.0 => false,
            Bson::Double(d) if *d == -1.0 => true,
            _ => return Err(CommandError::new(BAD_VALUE, format!("$sort key ordering must be 1 (for ascending) or -1 (for descending), not {dir} for {path}"))),
        };
        keys.push((path.as_str(), desc));
    }
    docs.sort_by(|a, b| {
        for (path, desc) in &keys {
            let va = lookup(a, path).unwrap_or(&Bson::Null);
            let vb = lookup(b, path).unwrap_or(&Bson::Null);
            let o = compare(va, vb);
            let o = if *desc { o.reverse() } else { o };
            if o.is_ne() {
                return o;
            }
        }
        std::cmp::Ordering::Equal
    });
    Ok(())
}

/// Applies an inclusion (`{a: 1, "b.c": 1}`) or exclusion (`{a: 0}`) projection of paths;
/// `_id` is kept unless excluded, as in MongoDB.
pub fn project(doc: &Document, spec: &Document) -> CmdResult<Document> {
    let mut include = None;
    let mut keep_id = true;
    let mut paths = Vec::new();
    for (k, v) in spec {
        let on = match v {
            Bson::Boolean(b) => *b,
            Bson::Int32(i) => *i != 0,
            Bson::Int64(i) => *i != 0,
            Bson::Double(d) => *d != 0.0,
            _ => {
                return Err(CommandError::new(
                    BAD_VALUE,
                    format!("projection of {k}: only paths with 1/0 or true/false are served here"),
                ))
            }
        };
        if k == "_id" {
            keep_id = on;
            continue;
        }
        if *include.get_or_insert(on) != on {
            return Err(CommandError::new(
                31254,
                format!("Cannot do exclusion on field {k} in inclusion projection"),
            ));
        }
        paths.push(k.as_str());
    }
    let mut out = match include {
        Some(true) => {
            let mut out = Document::new();
            for (k, v) in doc {
                if k == "_id" {
                    continue;
                }
                if let Some(v) = included(k, v, &paths) {
                    out.insert(k.clone(), v);
                }
            }
            out
        }
        _ => {
            let mut out = doc.clone();
            out.remove("_id");
            for p in &paths {
                remove_path(&mut out, p);
            }
            out
        }
    };
    if keep_id {
        if let Some(id) = doc.get("_id") {
            let mut with_id = bson::doc! {"_id": id.clone()};
            with_id.extend(std::mem::take(&mut out));
            out = with_id;
        }
    }
    Ok(out)
}

/// The part of field `k` (value `v`) that the inclusion `paths` keep.
fn included(k: &str, v: &Bson, paths: &[&str]) -> Option<Bson> {
    if paths.contains(&k) {
        return Some(v.clone());
    }
    let prefix = format!("{k}.");
    let sub: Vec<&str> = paths
        .iter()
        .filter_map(|p| p.strip_prefix(prefix.as_str()))
        .collect();
    if sub.is_empty() {
        return None;
    }
    match v {
        Bson::Document(d) => {
            let mut out = Document::new();
            for (k2, v2) in d {
                if let Some(x) = included(k2, v2, &sub) {
                    out.insert(k2.clone(), x);
                }
            }
            Some(Bson::Document(out))
        }
        _ => None,
    }
}

fn remove_path(d: &mut Document, path: &str) {
    match path.split_once('.') {
        None => {
            d.remove(path);
        }
        Some((head, rest)) => {
            if let Some(Bson::Document(inner)) = d.get_mut(head) {
                remove_path(inner, rest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn listing_filters_match_as_mongodb_does() {
        let d = doc! {"name": "weather", "type": "timeseries", "options": {"timeseries": {"timeField": "t"}}};
        assert!(matches(&doc! {}, &d).unwrap());
        assert!(matches(&doc! {"name": "weather"}, &d).unwrap());
        assert!(!matches(&doc! {"name": "other"}, &d).unwrap());
        assert!(matches(&doc! {"options.timeseries.timeField": "t"}, &d).unwrap());
        assert!(matches(&doc! {"name": {"$in": ["a", "weather"]}}, &d).unwrap());
        assert!(matches(&doc! {"type": {"$ne": "collection"}}, &d).unwrap());
        assert!(matches(&doc! {"$or": [{"name": "x"}, {"type": "timeseries"}]}, &d).unwrap());
        assert!(!matches(&doc! {"missing": {"$exists": true}}, &d).unwrap());
        assert!(matches(&doc! {"missing": null}, &d).unwrap());
        assert!(matches(&doc! {"name": {"$regex": "w"}}, &d).is_err());
    }

    #[test]
    fn projections_and_sorts_of_paths() {
        let d = doc! {"_id": 1, "control": {"min": {"t": 1}, "max": {"t": 2}}, "meta": 5, "data": {"x": [1]}};
        assert_eq!(
            project(&d, &doc! {"meta": 1}).unwrap(),
            doc! {"_id": 1, "meta": 5}
        );
        assert_eq!(
            project(&d, &doc! {"control.max": 1, "_id": 0}).unwrap(),
            doc! {"control": {"max": {"t": 2}}}
        );
        assert_eq!(
            project(&d, &doc! {"data": 0, "control.min": 0}).unwrap(),
            doc! {"_id": 1, "control": {"max": {"t": 2}}, "meta": 5}
        );
        assert_eq!(
            project(&d, &doc! {"meta": 1, "data": 0}).unwrap_err().code,
            31254
        );
        let mut docs = vec![
            doc! {"m": {"s": 2}},
            doc! {"m": {"s": 10}},
            doc! {"x": 1},
            doc! {"m": {"s": 2.5}},
        ];
        sort_documents(&mut docs, &doc! {"m.s": -1}).unwrap();
        assert_eq!(docs[0], doc! {"m": {"s": 10}});
        assert_eq!(docs[1], doc! {"m": {"s": 2.5}});
        assert_eq!(docs[3], doc! {"x": 1});
    }
}
