//! Turning a bucket's columns back into the measurements that were inserted, and into the raw
//! bucket document MongoDB's bucket collection would hold.

use crate::bucket::{BucketData, META_SLOT};
use crate::catalog::{is_hidden, META_COLUMN, SEQ_COLUMN};
use crate::doc::meta::normalize;
use bson::{doc, Bson, Document};

/// Rebuilds row `row` of `b` exactly as it was inserted (field order, types, meta as written).
/// `None` when the bucket's shape information is inconsistent with its columns.
pub fn row_document(b: &BucketData, row: usize, meta_field: Option<&str>) -> Option<Document> {
    let shape_id = b.row_shapes.get(row).copied().unwrap_or(0) as usize;
    let shape = b.shapes.get(shape_id)?;
    let mut d = Document::new();
    for &slot in shape {
        if slot == META_SLOT {
            let raw = b
                .columns
                .iter()
                .find(|c| c.name == META_COLUMN)
                .and_then(|c| c.values.get(row))
                .and_then(Option::as_ref);
            let v = raw.or(b.meta.as_ref())?;
            d.insert(meta_field?, v.clone());
        } else {
            let c = b.columns.get(slot as usize)?;
            let v = c.values.get(row)?.as_ref()?;
            d.insert(c.name.clone(), v.clone());
        }
    }
    Some(d)
}

/// True when the bucket's rows are in non-decreasing time order.
pub fn is_time_sorted(b: &BucketData, time_field: &str) -> bool {
    let Some(c) = b.columns.iter().find(|c| c.name == time_field) else {
        return true;
    };
    let mut prev = i64::MIN;
    for v in &c.values {
        if let Some(Bson::DateTime(t)) = v {
            let t = t.timestamp_millis();
            if t < prev {
                return false;
            }
            prev = t;
        }
    }
    true
}

/// Strips the engine's hidden bookkeeping fields from a control document.
pub fn visible_control(d: &Document) -> Document {
    d.iter()
        .filter(|(k, _)| !is_hidden(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// The raw bucket in MongoDB's schema:
/// `{_id, control: {version, min, max, count}, meta, data: {field: {"0": v, ...}}}`.
/// `version` is 2 when rows are in time order and 3 otherwise, as in MongoDB 8.
pub fn raw_bucket(b: &BucketData, time_field: &str) -> Document {
    let version = if is_time_sorted(b, time_field) { 2 } else { 3 };
    let mut data = Document::new();
    for c in b.columns.iter().filter(|c| !is_hidden(&c.name)) {
        let mut col = Document::new();
        for (i, v) in c.values.iter().enumerate() {
            if let Some(v) = v {
                col.insert(i.to_string(), v.clone());
            }
        }
        data.insert(c.name.clone(), col);
    }
    let mut d = doc! {
        "_id": b.id,
        "control": {
            "version": version,
            "min": visible_control(&b.min),
            "max": visible_control(&b.max),
            "count": i64::from(b.count),
        },
    };
    if let Some(m) = &b.meta {
        d.insert("meta", normalize(m));
    }
    d.insert("data", data);
    d
}

/// Largest log sequence number of a bucket's rows, from its control document.
pub fn max_seq(max: &Document) -> u64 {
    match max.get(SEQ_COLUMN) {
        Some(Bson::Int64(s)) => *s as u64,
        _ => 0,
    }
}
