//! mongodump of a MongoDB time-series collection: `system.buckets.<name>.bson` (the buckets)
//! beside `<name>.metadata.json` (the collection's options), as mongodump writes them since
//! MongoDB 5.0. Each bucket is unpacked into its measurements: the time and every other
//! field from the bucket's `data` columns (`{"0": v, "1": v, ...}`, a missing index a field
//! the measurement lacks), the meta field from the bucket's `meta`.
//!
//! Buckets of version 1 (uncompressed) are read. Compressed buckets (versions 2 and 3, whose
//! columns are MongoDB's BSONColumn binary) are refused by their document number.

use std::path::{Path, PathBuf};
use tsbucket::bson::{Bson, Document};
use tsbucket::{Granularity, TimeseriesOptions};

/// The collection name of a buckets dump file (`system.buckets.weather.bson` is `weather`).
pub fn buckets_of(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    let coll = name
        .strip_prefix("system.buckets.")?
        .strip_suffix(".bson")?;
    (!coll.is_empty()).then(|| coll.to_string())
}

/// The metadata file beside a buckets dump.
pub fn metadata_path(path: &Path, coll: &str) -> PathBuf {
    path.with_file_name(format!("{coll}.metadata.json"))
}

/// The time-series options a metadata file gives.
pub fn options(metadata: &Path) -> Result<TimeseriesOptions, String> {
    let at = metadata.display();
    let text = std::fs::read_to_string(metadata).map_err(|e| format!("{at}: {e}"))?;
    let doc = crate::json::parse_doc(&text).map_err(|e| format!("{at}: {e}"))?;
    let opts = doc.get_document("options").unwrap_or(&doc);
    let ts = opts
        .get_document("timeseries")
        .map_err(|_| format!("{at}: no options.timeseries: not a time-series collection"))?;
    let time = ts
        .get_str("timeField")
        .map_err(|_| format!("{at}: options.timeseries has no timeField"))?;
    let mut o = TimeseriesOptions::new(time);
    if let Ok(m) = ts.get_str("metaField") {
        o = o.meta_field(m);
    }
    let number = |d: &Document, k: &str| match d.get(k) {
        Some(Bson::Int32(i)) => u64::try_from(*i).ok(),
        Some(Bson::Int64(i)) => u64::try_from(*i).ok(),
        Some(Bson::Double(f)) if *f >= 0.0 => Some(*f as u64),
        _ => None,
    };
    match (
        number(ts, "bucketMaxSpanSeconds"),
        number(ts, "bucketRoundingSeconds"),
        ts.get_str("granularity"),
    ) {
        (Some(span), Some(round), _) => {
            let as_u32 = |v: u64| u32::try_from(v).map_err(|_| format!("{at}: {v} seconds"));
            o = o.bucket_span(as_u32(span)?, as_u32(round)?);
        }
        (_, _, Ok(g)) => {
            o = o.granularity(Granularity::parse(g).map_err(|e| format!("{at}: {e}"))?);
        }
        _ => {}
    }
    if let Some(secs) = number(opts, "expireAfterSeconds") {
        o = o.expire_after_seconds(secs);
    }
    Ok(o)
}

/// The measurements of one bucket, in row order.
pub fn unpack(
    bucket: &Document,
    time_field: &str,
    meta_field: Option<&str>,
) -> Result<Vec<Document>, String> {
    let control = bucket
        .get_document("control")
        .map_err(|_| "the bucket has no control document".to_string())?;
    match control.get("version") {
        Some(Bson::Int32(1)) | Some(Bson::Int64(1)) | Some(Bson::Double(1.0)) => {}
        Some(v) => {
            return Err(format!(
                "the bucket is compressed (control.version {v}: MongoDB's BSONColumn); only \
                 uncompressed buckets (version 1) are read so far"
            ))
        }
        None => return Err("the bucket's control has no version".into()),
    }
    let data = bucket
        .get_document("data")
        .map_err(|_| "the bucket has no data document".to_string())?;
    let times = data
        .get_document(time_field)
        .map_err(|_| format!("the bucket has no data.{time_field} column"))?;
    let mut out: Vec<Document> = Vec::with_capacity(times.len());
    let meta = meta_field.and_then(|m| bucket.get("meta").map(|v| (m, v)));
    for (row, (k, t)) in times.iter().enumerate() {
        if k.parse::<usize>().ok() != Some(row) {
            return Err(format!(
                "data.{time_field} has key '{k}' at row {row}: time columns hold every row"
            ));
        }
        let mut d = Document::new();
        d.insert(time_field, t.clone());
        if let Some((m, v)) = meta {
            d.insert(m, v.clone());
        }
        out.push(d);
    }
    for (field, column) in data {
        if field == time_field {
            continue;
        }
        let Bson::Document(column) = column else {
            return Err(format!("data.{field} is not a document of rows"));
        };
        for (k, v) in column {
            let row = k
                .parse::<usize>()
                .ok()
                .filter(|&r| r < out.len())
                .ok_or_else(|| format!("data.{field} has key '{k}', not a row of the bucket"))?;
            if let Some(d) = out.get_mut(row) {
                d.insert(field.clone(), v.clone());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tsbucket::bson::{doc, DateTime};

    #[test]
    fn uncompressed_buckets_unpack_into_their_measurements() {
        let t = |s: i64| DateTime::from_millis(s * 1000);
        let bucket = doc! {
            "_id": 1,
            "control": {"version": 1, "min": {}, "max": {}},
            "meta": {"sensorId": 5},
            "data": {
                "timestamp": {"0": t(1), "1": t(2), "2": t(3)},
                "temp": {"0": 12, "2": 14},
                "_id": {"0": 10, "1": 11, "2": 12},
            },
        };
        let got = unpack(&bucket, "timestamp", Some("metadata")).unwrap();
        assert_eq!(
            got,
            vec![
                doc! {"timestamp": t(1), "metadata": {"sensorId": 5}, "temp": 12, "_id": 10},
                doc! {"timestamp": t(2), "metadata": {"sensorId": 5}, "_id": 11},
                doc! {"timestamp": t(3), "metadata": {"sensorId": 5}, "temp": 14, "_id": 12},
            ]
        );
        let mut compressed = bucket.clone();
        compressed.insert("control", doc! {"version": 2});
        let e = unpack(&compressed, "timestamp", None).unwrap_err();
        assert!(e.contains("compressed"), "{e}");
        let mut stray = bucket;
        stray.insert("data", doc! {"timestamp": {"0": t(1)}, "temp": {"7": 1}});
        assert!(unpack(&stray, "timestamp", None)
            .unwrap_err()
            .contains("'7'"));
        assert_eq!(
            buckets_of(Path::new("dump/db/system.buckets.weather.bson")).as_deref(),
            Some("weather")
        );
        assert_eq!(buckets_of(Path::new("weather.bson")), None);
    }
}
