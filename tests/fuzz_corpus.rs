//! Replays the fuzz corpora (`fuzz/corpus/<target>/`) and the crash reproducers
//! (`fuzz/regressions/<target>/`) through the same harness functions the cargo-fuzz targets
//! call, so every input the fuzzers kept is checked on stable Rust in every test run.
//!
//! `write_seed_corpus` (ignored) regenerates the seed inputs from files the engine writes:
//! `cargo test --test fuzz_corpus -- --ignored write_seed_corpus`.

use std::path::{Path, PathBuf};
use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::codec::encode_column;
use tsbucket::vfs::{MemFs, Vfs};
use tsbucket::{Database, DbOptions, TimeseriesOptions};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

/// Runs `run` on every file of the target's corpus and regressions; returns how many.
fn replay(target: &str, run: fn(&[u8])) -> usize {
    let mut n = 0;
    for kind in ["corpus", "regressions"] {
        let dir = fuzz_dir().join(kind).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files.iter().filter(|f| f.is_file()) {
            let data = std::fs::read(f).unwrap();
            let r = std::panic::catch_unwind(|| run(&data));
            assert!(r.is_ok(), "{target}: {} fails", f.display());
            n += 1;
        }
    }
    n
}

#[test]
fn wal_reader_corpus() {
    assert!(replay("wal_reader", tsbucket_testkit::wal_reader::run) > 0);
}

#[test]
fn wal_codec_corpus() {
    assert!(replay("wal_codec", tsbucket_testkit::wal_codec::run) > 0);
}

#[test]
fn segment_reader_corpus() {
    assert!(replay("segment_reader", tsbucket_testkit::segment_reader::run) > 0);
}

#[test]
fn codec_roundtrip_corpus() {
    assert!(replay("codec_roundtrip", tsbucket_testkit::codec_roundtrip::run) > 0);
}

#[test]
fn codec_decode_corpus() {
    assert!(replay("codec_decode", tsbucket_testkit::codec_decode::run) > 0);
}

#[test]
fn filter_parse_corpus() {
    assert!(replay("filter_parse", tsbucket_testkit::filter_parse::run) > 0);
}

#[test]
fn pipeline_parse_corpus() {
    assert!(replay("pipeline_parse", tsbucket_testkit::pipeline_parse::run) > 0);
}

#[test]
fn insert_bson_corpus() {
    assert!(replay("insert_bson", tsbucket_testkit::insert_bson::run) > 0);
}

#[test]
fn model_corpus() {
    assert!(replay("model", tsbucket_testkit::model::run) > 0);
}

fn write_seed(target: &str, name: &str, data: &[u8]) {
    let dir = fuzz_dir().join("corpus").join(target);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("seed-{name}")), data).unwrap();
}

fn measurements(n: i64) -> Vec<Document> {
    (0..n)
        .map(|k| {
            let s = ["a", "b"][(k % 2) as usize];
            doc! {
                "t": DateTime::from_millis(1_700_000_000_000 + k * 10_000),
                "m": {"host": format!("h{}", k % 3)},
                "cpu": (k % 17) as f64 * 1.5,
                "n": k,
                "s": s,
            }
        })
        .collect()
}

/// Seeds from real engine files: WAL files, segments, encoded columns, filters, pipelines.
#[test]
#[ignore]
fn write_seed_corpus() {
    let fs = MemFs::new();
    let mut opts = DbOptions::default().vfs(std::sync::Arc::new(fs.clone()));
    opts.ttl_interval = None;
    let db = Database::open_with("/db", opts).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    let docs = measurements(60);
    for chunk in docs.chunks(20) {
        c.insert_many(chunk).unwrap();
    }
    for name in fs.list_dir(Path::new("/db/wal")).unwrap() {
        let bytes = fs.read(&Path::new("/db/wal").join(&name)).unwrap();
        let mut seed = vec![0u8, 0u8];
        seed.extend_from_slice(&bytes);
        write_seed("wal_reader", "engine-wal", &seed);
    }
    db.flush().unwrap();
    for name in fs.list_dir(Path::new("/db/seg")).unwrap() {
        let bytes = fs.read(&Path::new("/db/seg").join(&name)).unwrap();
        let mut raw = vec![b'R'];
        raw.extend_from_slice(&bytes);
        write_seed("segment_reader", "engine-segment", &raw);
        let unsealed = tsbucket_testkit::segment_reader::unseal(&bytes).unwrap();
        assert_eq!(
            tsbucket_testkit::segment_reader::seal(&unsealed[1..]),
            bytes
        );
        write_seed("segment_reader", "engine-segment-unsealed", &unsealed);
    }
    db.close().unwrap();

    let cols: Vec<(&str, Vec<Option<Bson>>)> = vec![
        ("int64", (0..50).map(|k| Some(Bson::Int64(k * 3))).collect()),
        (
            "int32-gaps",
            (0..50)
                .map(|k| (k % 3 != 0).then_some(Bson::Int32(k)))
                .collect(),
        ),
        (
            "double",
            (0..50)
                .map(|k| Some(Bson::Double(k as f64 / 10.0)))
                .collect(),
        ),
        (
            "double-xor",
            (0..50)
                .map(|k| Some(Bson::Double((k as f64).sin())))
                .collect(),
        ),
        (
            "date",
            (0..50)
                .map(|k| {
                    Some(Bson::DateTime(DateTime::from_millis(
                        1_700_000_000_000 + k * 1000,
                    )))
                })
                .collect(),
        ),
        (
            // Several rows per minute: sparse and scaled residuals.
            "date-runs",
            (0..200)
                .map(|k| {
                    Some(Bson::DateTime(DateTime::from_millis(
                        1_700_000_040_000 + (k / 37) * 60_000,
                    )))
                })
                .collect(),
        ),
        (
            "date-seconds",
            (0..60)
                .map(|k| {
                    Some(Bson::DateTime(DateTime::from_millis(
                        1_700_000_000_000 + k * k % 7 * 1000 + k * 3000,
                    )))
                })
                .collect(),
        ),
        (
            "string",
            (0..50)
                .map(|k| Some(Bson::String(format!("host{}", k % 4))))
                .collect(),
        ),
        (
            "oid",
            (0..50u8)
                .map(|k| {
                    Some(Bson::ObjectId(tsbucket::bson::oid::ObjectId::from_bytes([
                        0x65, 0, 0, k, 1, 2, 3, 4, 5, 0, 0, k,
                    ])))
                })
                .collect(),
        ),
        (
            "bool",
            (0..50).map(|k| Some(Bson::Boolean(k % 7 == 0))).collect(),
        ),
        (
            "mixed",
            (0..50)
                .map(|k| {
                    Some(if k % 2 == 0 {
                        Bson::Int32(k)
                    } else {
                        Bson::String("x".into())
                    })
                })
                .collect(),
        ),
        (
            "const",
            (0..50)
                .map(|_| Some(Bson::Document(doc! {"a": 1})))
                .collect(),
        ),
        (
            // A small random walk: stored as plain Rice codes (directory version 5).
            "int-walk",
            (0..200i64)
                .scan(50i64, |v, k| {
                    let mut h = (k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    h = (h ^ (h >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    h ^= h >> 29;
                    // -1, 0 or +1, 0 twice as often: the shape of the devops walks.
                    *v += (h & 1) as i64 + (h >> 1 & 1) as i64 - 1;
                    Some(Some(Bson::Int64(*v)))
                })
                .collect(),
        ),
        (
            "zstd",
            (0..400)
                .map(|k| {
                    Some(Bson::String(format!(
                        "a long repeated string value {}",
                        k % 50
                    )))
                })
                .collect(),
        ),
    ];
    for (name, col) in cols {
        let mut enc = (col.len() as u16).to_le_bytes().to_vec();
        encode_column(&col, &mut enc);
        write_seed("codec_decode", name, &enc);
    }

    let filters = [
        doc! {"m.id": 1, "t": {"$gte": DateTime::from_millis(1_700_000_000_000)}},
        doc! {"$or": [{"v": {"$gt": 0}}, {"s": {"$in": ["x", "zz"]}}]},
        doc! {"i": {"$not": {"$lt": 10}}, "a": {"$exists": true}},
        doc! {"$nor": [{"d.x": null}], "m": {"id": 2, "region": "us"}},
    ];
    for (k, f) in filters.iter().enumerate() {
        let mut seed = vec![b'B'];
        seed.extend_from_slice(&f.to_vec().unwrap());
        write_seed("filter_parse", &format!("filter-{k}"), &seed);
    }
    let pipelines = [
        doc! {"0": {"$match": {"m.id": 1}}, "1": {"$group": {"_id": {"$dateTrunc": {"date": "$t", "unit": "hour"}}, "avg": {"$avg": "$v"}, "n": {"$count": {}}}}},
        doc! {"0": {"$group": {"_id": "$m.region", "max": {"$max": "$i"}, "first": {"$first": "$s"}}}, "1": {"$sort": {"max": -1}}, "2": {"$limit": 2}},
        doc! {"0": {"$project": {"v": 1, "s": 1}}, "1": {"$skip": 3}, "2": {"$count": "n"}},
    ];
    for (k, p) in pipelines.iter().enumerate() {
        let mut seed = vec![b'B'];
        seed.extend_from_slice(&p.to_vec().unwrap());
        write_seed("pipeline_parse", &format!("pipeline-{k}"), &seed);
    }
    let mut seed = vec![b'R'];
    for d in measurements(6) {
        seed.extend_from_slice(&d.to_vec().unwrap());
    }
    write_seed("insert_bson", "measurements", &seed);
}
