//! Update and delete statements in the shape of MongoDB's `update` and `delete` commands
//! (`{q, u, multi, upsert}`, `{q, limit}`), so that what a driver may send — a non-multi
//! write, an upsert, a pipeline update — can be expressed and is refused exactly as MongoDB's
//! legacy time-series rules refuse it, before anything is touched.

use super::rules::require_meta;
use crate::error::{Error, Result};
use bson::{Bson, Document};

/// A checked update statement: the filter and the operator document, both still to be
/// checked against the meta field by the rules of `update_many`.
#[derive(Debug, Clone)]
pub struct UpdateStatement {
    pub filter: Document,
    pub update: Document,
}

/// Parses `{q, u, multi, upsert}`. `multi` defaults to false as in MongoDB, so it must be
/// given as true; `upsert`, a pipeline `u` and unknown fields are refused.
pub fn parse_update(stmt: &Document, meta_field: Option<&str>) -> Result<UpdateStatement> {
    for (k, _) in stmt {
        if !matches!(
            k.as_str(),
            "q" | "u" | "multi" | "upsert" | "collation" | "hint" | "arrayFilters"
        ) {
            return Err(Error::BadValue(format!(
                "BSON field 'update.updates.{k}' is an unknown field."
            )));
        }
    }
    if !flag(stmt, "multi")? {
        return Err(Error::InvalidOptions(
            "Cannot perform a non-multi update on a time-series collection".into(),
        ));
    }
    if flag(stmt, "upsert")? {
        return Err(Error::InvalidOptions(
            "Cannot perform an upsert on a time-series collection".into(),
        ));
    }
    let meta = require_meta(meta_field)?;
    let filter = filter_of(stmt)?;
    let update = match stmt.get("u") {
        Some(Bson::Document(u)) => u.clone(),
        // A pipeline may compute anything from any field: not a meta-only update.
        Some(Bson::Array(_)) => return Err(super::rules::not_meta_update(meta)),
        Some(other) => {
            return Err(Error::BadValue(format!(
                "BSON field 'update.updates.u' is the wrong type '{:?}', expected type 'object' \
                 or 'array'",
                other.element_type()
            )))
        }
        None => {
            return Err(Error::BadValue(
                "BSON field 'update.updates.u' is missing but a required field".into(),
            ))
        }
    };
    if stmt.contains_key("arrayFilters") {
        return Err(Error::BadValue(
            "arrayFilters are not supported by meta-only updates on a time-series collection"
                .into(),
        ));
    }
    Ok(UpdateStatement { filter, update })
}

/// Parses `{q, limit}` and returns the filter. `limit` must be 0 (all matching): a limit of 1
/// is MongoDB's IllegalOperation (20), anything else `BadValue`.
pub fn parse_delete(stmt: &Document) -> Result<Document> {
    for (k, _) in stmt {
        if !matches!(k.as_str(), "q" | "limit" | "collation" | "hint") {
            return Err(Error::BadValue(format!(
                "BSON field 'delete.deletes.{k}' is an unknown field."
            )));
        }
    }
    let limit = match stmt.get("limit") {
        Some(Bson::Int32(n)) => i64::from(*n),
        Some(Bson::Int64(n)) => *n,
        Some(Bson::Double(d)) if d.fract() == 0.0 => *d as i64,
        Some(other) => {
            return Err(Error::BadValue(format!(
                "The limit field in delete objects must be 0 or 1. Got {other}"
            )))
        }
        None => {
            return Err(Error::BadValue(
                "BSON field 'delete.deletes.limit' is missing but a required field".into(),
            ))
        }
    };
    match limit {
        0 => filter_of(stmt),
        1 => Err(Error::Unsupported(
            "Cannot perform a non-multi delete on a time-series collection".into(),
        )),
        n => Err(Error::BadValue(format!(
            "The limit field in delete objects must be 0 or 1. Got {n}"
        ))),
    }
}

fn filter_of(stmt: &Document) -> Result<Document> {
    match stmt.get("q") {
        Some(Bson::Document(q)) => Ok(q.clone()),
        Some(other) => Err(Error::BadValue(format!(
            "BSON field 'q' is the wrong type '{:?}', expected type 'object'",
            other.element_type()
        ))),
        None => Err(Error::BadValue(
            "BSON field 'q' is missing but a required field".into(),
        )),
    }
}

fn flag(stmt: &Document, name: &str) -> Result<bool> {
    match stmt.get(name) {
        None | Some(Bson::Null) => Ok(false),
        Some(Bson::Boolean(b)) => Ok(*b),
        Some(other) => Err(Error::BadValue(format!(
            "BSON field '{name}' is the wrong type '{:?}', expected type 'bool'",
            other.element_type()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn update_refusals_in_mongodb_order() {
        let m = Some("tag");
        let code = |d: Document| parse_update(&d, m).unwrap_err().code();
        let u = doc! {"$set": {"tag.a": 1}};
        assert_eq!(code(doc! {"q": {}, "u": u.clone()}), Some(72));
        assert_eq!(
            code(doc! {"q": {}, "u": u.clone(), "multi": false}),
            Some(72)
        );
        assert_eq!(
            code(doc! {"q": {}, "u": u.clone(), "multi": true, "upsert": true}),
            Some(72)
        );
        assert_eq!(
            code(doc! {"q": {}, "u": [{"$set": {"tag": 1}}], "multi": true}),
            Some(72)
        );
        assert_eq!(
            code(doc! {"q": {}, "u": u.clone(), "multi": 1}),
            Some(2),
            "multi must be a bool"
        );
        assert_eq!(code(doc! {"q": {}, "u": u.clone(), "x": 1}), Some(2));
        let e = parse_update(&doc! {"q": {}, "u": u.clone(), "multi": true}, None).unwrap_err();
        assert!(e.to_string().contains("does not have a metaField"));
        let s = parse_update(&doc! {"q": {"tag.a": 2}, "u": u.clone(), "multi": true}, m).unwrap();
        assert_eq!(s.filter, doc! {"tag.a": 2});
        assert_eq!(s.update, u);
    }

    #[test]
    fn delete_limit_rules() {
        let e = parse_delete(&doc! {"q": {}, "limit": 1}).unwrap_err();
        assert_eq!(e.code(), Some(20));
        assert!(e.to_string().contains("non-multi delete"));
        assert_eq!(
            parse_delete(&doc! {"q": {}, "limit": 2})
                .unwrap_err()
                .code(),
            Some(2)
        );
        assert_eq!(parse_delete(&doc! {"q": {}}).unwrap_err().code(), Some(2));
        assert_eq!(
            parse_delete(&doc! {"q": {"tag": 1}, "limit": 0i64}).unwrap(),
            doc! {"tag": 1}
        );
    }
}
