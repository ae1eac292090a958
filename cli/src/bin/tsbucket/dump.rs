//! mongodump of a MongoDB time-series collection: `system.buckets.<name>.bson` (the buckets)
//! beside `<name>.metadata.json` (the collection's options), as mongodump writes them since
//! MongoDB 5.0. Each bucket is unpacked into its measurements: the time and every other
//! field from the bucket's `data` columns (`{"0": v, "1": v, ...}`, a missing index a field
//! the measurement lacks), the meta field from the bucket's `meta`.
//!
//! Buckets of version 1 keep each column uncompressed, as that document of rows. Compressed
//! buckets (versions 2 and 3; 3 only leaves the times unsorted) keep each column as a binary of
//! subtype 7 in MongoDB's BSONColumn format, which `tsbucket-bsoncolumn` decodes: row i is the
//! column's i-th value, a missing value a field the measurement lacks.

use std::path::{Path, PathBuf};
use tsbucket::bson::spec::BinarySubtype;
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
    let compressed = match control.get("version") {
        Some(Bson::Int32(1)) | Some(Bson::Int64(1)) | Some(Bson::Double(1.0)) => false,
        Some(Bson::Int32(2 | 3)) | Some(Bson::Int64(2 | 3)) => true,
        Some(Bson::Double(v)) if *v == 2.0 || *v == 3.0 => true,
        Some(v) => {
            return Err(format!(
                "control.version {v} is not a bucket version this reads (1, 2 or 3)"
            ))
        }
        None => return Err("the bucket's control has no version".into()),
    };
    let data = bucket
        .get_document("data")
        .map_err(|_| "the bucket has no data document".to_string())?;
    let meta = meta_field.and_then(|m| bucket.get("meta").map(|v| (m, v)));
    let measurement = |t: &Bson| {
        let mut d = Document::new();
        d.insert(time_field, t.clone());
        if let Some((m, v)) = meta {
            d.insert(m, v.clone());
        }
        d
    };
    if compressed {
        unpack_columns(control, data, time_field, measurement)
    } else {
        unpack_rows(data, time_field, measurement)
    }
}

/// Version 1: each column a document `{"0": v, "1": v, ...}`.
fn unpack_rows(
    data: &Document,
    time_field: &str,
    measurement: impl Fn(&Bson) -> Document,
) -> Result<Vec<Document>, String> {
    let times = data
        .get_document(time_field)
        .map_err(|_| format!("the bucket has no data.{time_field} column"))?;
    let mut out: Vec<Document> = Vec::with_capacity(times.len());
    for (row, (k, t)) in times.iter().enumerate() {
        if k.parse::<usize>().ok() != Some(row) {
            return Err(format!(
                "data.{time_field} has key '{k}' at row {row}: time columns hold every row"
            ));
        }
        out.push(measurement(t));
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

/// Versions 2 and 3: each column a BSONColumn binary.
fn unpack_columns(
    control: &Document,
    data: &Document,
    time_field: &str,
    measurement: impl Fn(&Bson) -> Document,
) -> Result<Vec<Document>, String> {
    let decode = |field: &str, column: &Bson| match column {
        Bson::Binary(b) if b.subtype == BinarySubtype::Column => {
            tsbucket_bsoncolumn::decode(&b.bytes)
                .map_err(|e| format!("data.{field} does not decode as a BSONColumn: {e}"))
        }
        _ => Err(format!(
            "data.{field} is not a BSONColumn (a binary of subtype 7), as a compressed bucket's \
             columns are"
        )),
    };
    let times = data
        .get(time_field)
        .ok_or_else(|| format!("the bucket has no data.{time_field} column"))
        .and_then(|c| decode(time_field, c))?;
    if let Some(row) = times.iter().position(Option::is_none) {
        return Err(format!(
            "data.{time_field} lacks row {row}: time columns hold every row"
        ));
    }
    match control.get("count") {
        None => {}
        Some(Bson::Int32(n)) if usize::try_from(*n).ok() == Some(times.len()) => {}
        Some(Bson::Int64(n)) if usize::try_from(*n).ok() == Some(times.len()) => {}
        Some(n) => {
            return Err(format!(
                "data.{time_field} holds {} rows but control.count is {n}",
                times.len()
            ))
        }
    }
    let mut out: Vec<Document> = times.iter().flatten().map(measurement).collect();
    for (field, column) in data {
        if field == time_field {
            continue;
        }
        let rows = decode(field, column)?;
        if rows.len() > out.len() {
            return Err(format!(
                "data.{field} holds {} rows, more than the bucket's {}",
                rows.len(),
                out.len()
            ));
        }
        for (d, v) in out.iter_mut().zip(rows) {
            if let Some(v) = v {
                d.insert(field.clone(), v);
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
        let mut unknown = bucket.clone();
        unknown.insert("control", doc! {"version": 4});
        let e = unpack(&unknown, "timestamp", None).unwrap_err();
        assert!(e.contains("control.version 4"), "{e}");
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

    /// Columns whose decoding `tsbucket-bsoncolumn`'s own tests check byte for byte.
    mod columns {
        /// Dates 1000, 2000, 3000, 4000, 6000 ms (a literal, then delta-of-deltas).
        pub const TIMES: &[u8] = &[
            0x09, 0x00, 0xE8, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x0B, 0x7D, 0x00,
            0x00, 0x00, 0x00, 0xA0, 0x0F, 0x00,
        ];
        /// Doubles 1.0, 1.1, 1.2, 1.0, 1.5 (deltas at scale 10).
        pub const TEMPS: &[u8] = &[
            0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xF0, 0x3F, 0xA0, 0x2B, 0x00, 0x10,
            0x00, 0x0C, 0x00, 0x14, 0x00, 0x00,
        ];
        /// Missing, missing, 5, missing, 6 (int32).
        pub const COUNTS: &[u8] = &[
            0x80, 0xFD, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x10, 0x00, 0x05, 0x00, 0x00,
            0x00, 0x80, 0xFD, 0xFF, 0xFF, 0xFF, 0x0B, 0x00, 0x00, 0x00, 0x00,
        ];
    }

    fn column(bytes: &[u8]) -> Bson {
        Bson::Binary(tsbucket::bson::Binary {
            subtype: BinarySubtype::Column,
            bytes: bytes.to_vec(),
        })
    }

    #[test]
    fn compressed_buckets_unpack_into_their_measurements() {
        let t = |ms: i64| DateTime::from_millis(ms);
        let bucket = |version: i32, count: i32| {
            doc! {
                "_id": 1,
                "control": {"version": version, "count": count, "min": {}, "max": {}},
                "meta": "s1",
                "data": {
                    "time": column(columns::TIMES),
                    "temp": column(columns::TEMPS),
                    "count": column(columns::COUNTS),
                },
            }
        };
        let want = vec![
            doc! {"time": t(1000), "tag": "s1", "temp": 1.0},
            doc! {"time": t(2000), "tag": "s1", "temp": 1.1},
            doc! {"time": t(3000), "tag": "s1", "temp": 1.2, "count": 5},
            doc! {"time": t(4000), "tag": "s1", "temp": 1.0},
            doc! {"time": t(6000), "tag": "s1", "temp": 1.5, "count": 6},
        ];
        assert_eq!(unpack(&bucket(2, 5), "time", Some("tag")).unwrap(), want);
        assert_eq!(unpack(&bucket(3, 5), "time", Some("tag")).unwrap(), want);
        let mut no_count = bucket(2, 5);
        no_count
            .get_document_mut("control")
            .unwrap()
            .remove("count");
        assert_eq!(unpack(&no_count, "time", Some("tag")).unwrap(), want);

        let e = unpack(&bucket(2, 4), "time", None).unwrap_err();
        assert!(e.contains("holds 5 rows but control.count is 4"), "{e}");
        let with_data = |data: Document| {
            let mut b = bucket(2, 5);
            b.insert("data", data);
            b
        };
        // A time column with missing rows; a column cut short; one that is not a column.
        let e = unpack(
            &with_data(doc! {"time": column(columns::COUNTS)}),
            "time",
            None,
        )
        .unwrap_err();
        assert!(e.contains("data.time lacks row 0"), "{e}");
        let cut = &columns::TEMPS[..15];
        let e = unpack(
            &with_data(doc! {"time": column(columns::TIMES), "temp": column(cut)}),
            "time",
            None,
        )
        .unwrap_err();
        assert!(
            e.starts_with("data.temp does not decode as a BSONColumn: at byte 10:"),
            "{e}"
        );
        let e = unpack(
            &with_data(doc! {"time": column(columns::TIMES), "temp": {"0": 1}}),
            "time",
            None,
        )
        .unwrap_err();
        assert!(e.contains("data.temp is not a BSONColumn"), "{e}");
        // A column longer than the bucket (whose time column stops after its first literal).
        let one_time = [&columns::TIMES[..10], &[0]].concat();
        let mut short = with_data(doc! {"time": column(&one_time), "temp": column(columns::TEMPS)});
        short
            .get_document_mut("control")
            .unwrap()
            .insert("count", 1);
        let e = unpack(&short, "time", None).unwrap_err();
        assert!(
            e.contains("data.temp holds 5 rows, more than the bucket's 1"),
            "{e}"
        );
    }
}
