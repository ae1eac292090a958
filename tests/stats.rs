//! `Collection::stats`: the BSON size of the stored measurements as inserted and the
//! compression ratio of the flushed data, followed through flushes, reopens, meta updates,
//! meta deletes and TTL sweeps.

use tsbucket::bson::{doc, oid::ObjectId, DateTime, Document};
use tsbucket::{CollStats, Database, TimeseriesOptions};

/// 2024-01-01T00:00:00Z.
const T0: i64 = 1_704_067_200_000;
const HOUR: i64 = 3_600_000;
/// What the engine adds to a document without `_id`: type byte, `"_id\0"`, 12 bytes.
const GENERATED_ID: u64 = 17;

/// Documents of `series` over `rows` seconds from `start`; every other one without `_id`,
/// values of several types and a field that comes and goes.
fn docs(series: &str, start: i64, rows: i64) -> Vec<Document> {
    (0..rows)
        .map(|i| {
            let mut d = doc! {
                "t": DateTime::from_millis(start + i * 1000),
                "m": {"host": series, "dc": "eu-1"},
                "cpu": (i % 97) as f64 / 4.0,
                "n": i,
            };
            if i % 3 == 0 {
                d.insert("note", format!("sample {i}"));
            }
            if i % 2 == 0 {
                d.insert("_id", ObjectId::new());
            }
            d
        })
        .collect()
}

/// The BSON size of `docs` as the engine stores them.
fn inserted_size(docs: &[Document]) -> u64 {
    docs.iter()
        .map(|d| {
            let len = d.to_vec().unwrap().len() as u64;
            len + if d.contains_key("_id") {
                0
            } else {
                GENERATED_ID
            }
        })
        .sum()
}

fn check_ratio(s: &CollStats) {
    assert_eq!(s.unsized_buckets, 0);
    if s.flushed_buckets == 0 {
        assert_eq!(s.compression_ratio, 0.0);
    } else {
        assert!(s.segment_bytes > 0);
        assert!(s.compression_ratio > 1.0, "{s:?}");
    }
}

#[test]
fn bson_size_and_compression_ratio_follow_the_data() {
    let dir = tempfile::tempdir().unwrap();
    let opts = TimeseriesOptions::new("t")
        .meta_field("m")
        .expire_after_seconds(24 * 3600);
    let db = Database::open(dir.path()).unwrap();
    let c = db.create_collection("c", opts).unwrap();
    let empty = c.stats().unwrap();
    assert_eq!((empty.bson_bytes, empty.compression_ratio), (0, 0.0));

    // Day one: three series, flushed.
    let day1: Vec<Vec<Document>> = ["a", "b", "c"].iter().map(|s| docs(s, T0, 1500)).collect();
    for d in &day1 {
        c.insert_many(d).unwrap();
    }
    let size1: Vec<u64> = day1.iter().map(|d| inserted_size(d)).collect();
    let s = c.stats().unwrap();
    assert_eq!(s.bson_bytes, size1.iter().sum::<u64>(), "in memory");
    check_ratio(&s);
    assert_eq!(s.flushed_buckets, 0);
    db.flush().unwrap();
    let s = c.stats().unwrap();
    assert_eq!(s.bson_bytes, size1.iter().sum::<u64>(), "flushed");
    check_ratio(&s);
    assert_eq!(
        s.compression_ratio,
        s.bson_bytes as f64 / s.segment_bytes as f64
    );

    // Day two, series a only, left in open buckets; it counts in bson_bytes but not in the
    // ratio of the flushed data.
    let day2 = docs("a", T0 + 30 * HOUR, 700);
    c.insert_many(&day2).unwrap();
    let size2 = inserted_size(&day2);
    let s = c.stats().unwrap();
    let all = size1.iter().sum::<u64>() + size2;
    assert_eq!(s.bson_bytes, all);
    assert!(s.open_buckets > 0);
    let flushed_ratio = size1.iter().sum::<u64>() as f64 / s.segment_bytes as f64;
    assert_eq!(s.compression_ratio, flushed_ratio);

    // A reopen replays the open buckets from the log and reads the sizes back from segments.
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("c").unwrap();
    let s = c.stats().unwrap();
    assert_eq!(s.bson_bytes, all, "after reopen");
    assert_eq!(s.compression_ratio, flushed_ratio);

    // A meta update rewrites buckets but keeps the size they were inserted with.
    let r = c
        .update_many(
            doc! {"m.host": "b"},
            doc! {"$set": {"m.host": "a much longer host name than before"}},
        )
        .unwrap();
    assert_eq!(r.modified_count, 1500);
    let s = c.stats().unwrap();
    assert_eq!(s.bson_bytes, all, "after a meta update");
    check_ratio(&s);

    // A meta delete takes the deleted measurements' size away.
    let r = c.delete_many(doc! {"m.host": "c"}).unwrap();
    assert_eq!(r.deleted_count, 1500);
    let s = c.stats().unwrap();
    assert_eq!(s.bson_bytes, all - size1[2], "after a delete");
    check_ratio(&s);

    // The sweeper deletes day one (now = day two + 2 h, expireAfterSeconds one day).
    let r = db
        .sweep_expired(DateTime::from_millis(T0 + 32 * HOUR))
        .unwrap();
    assert!(r.buckets_deleted > 0);
    let s = c.stats().unwrap();
    assert_eq!(s.measurements, 700);
    assert_eq!(s.bson_bytes, size2, "after a sweep");
    check_ratio(&s);
    db.flush().unwrap();
    let s = c.stats().unwrap();
    assert_eq!(s.bson_bytes, size2);
    assert_eq!(
        s.compression_ratio,
        size2 as f64 / s.segment_bytes as f64,
        "{s:?}"
    );
    db.close().unwrap();
}

#[test]
fn devops_like_data_compresses_well() {
    // Ten hosts, an hour at 10 s, ten float fields: the kind of data the engine is for.
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("cpu", TimeseriesOptions::new("t").meta_field("tags"))
        .unwrap();
    let mut size = 0;
    for h in 0..10 {
        let batch: Vec<Document> = (0..360)
            .map(|i| {
                let mut d = doc! {
                    "t": DateTime::from_millis(T0 + i * 10_000),
                    "tags": {"hostname": format!("host_{h}"), "region": "eu-west-1"},
                };
                for f in 0..10 {
                    d.insert(format!("usage_{f}"), ((i * 7 + f * 13 + h) % 100) as f64);
                }
                d
            })
            .collect();
        size += inserted_size(&batch);
        c.insert_many(&batch).unwrap();
    }
    db.flush().unwrap();
    let s = c.stats().unwrap();
    assert_eq!(s.bson_bytes, size);
    // Integral doubles in 0..100 cost about a byte each against 9 + name bytes in BSON.
    assert!(s.compression_ratio > 10.0, "{}", s.compression_ratio);
}

/// `Database::log_stats`: one record per insert call, its bytes, and a sync per commit group
/// only when inserts wait for durability.
#[test]
fn log_stats_count_records_bytes_and_syncs() {
    for sync in [tsbucket::SyncMode::Always, tsbucket::SyncMode::Never] {
        let dir = tempfile::tempdir().unwrap();
        let opts = tsbucket::DbOptions::default().sync(sync);
        let db = Database::open_with(dir.path(), opts).unwrap();
        let c = db
            .create_collection("s", TimeseriesOptions::new("t").meta_field("m"))
            .unwrap();
        assert_eq!(db.log_stats().unwrap(), tsbucket::LogStats::default());
        let batches: Vec<Vec<Document>> = (0..3).map(|k| docs("h", T0 + k * HOUR, 50)).collect();
        for b in &batches {
            c.insert_many(b).unwrap();
        }
        // A refused batch writes nothing, so the log counts nothing for it.
        c.insert_many(&[doc! {"m": 1}]).unwrap_err();
        let s = db.log_stats().unwrap();
        assert_eq!(s.records, 3);
        assert!(s.groups >= 1 && s.groups <= 3, "{s:?}");
        // Each record holds its documents (with generated `_id`s) and a header.
        let at_least: u64 = batches.iter().map(|b| inserted_size(b)).sum();
        assert!(s.record_bytes > at_least, "{s:?}");
        match sync {
            tsbucket::SyncMode::Always => assert_eq!(s.syncs, s.groups, "{s:?}"),
            _ => assert_eq!((s.syncs, s.zero_bytes, s.zero_nanos), (0, 0, 0), "{s:?}"),
        }
        let db2 = db.clone();
        db.close().unwrap();
        assert!(matches!(db2.log_stats(), Err(tsbucket::Error::Closed)));
    }
}
