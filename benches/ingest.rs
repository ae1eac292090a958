//! Ingest and recovery on the devops-cpu workload (TSBS shape): validation and encoding alone
//! (from `Document`s and from BSON bytes), whole inserts with and without fsync, and reopening a
//! database whose log holds the data.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::time::Duration;
use tsbucket::bson::{Document, RawDocumentBuf};
use tsbucket::ingest::{prepare_batch, prepare_raw_batch};
use tsbucket::schema::Schema;
use tsbucket::{Database, DbOptions, SyncMode, TimeseriesOptions};
use tsbucket_workload::Devops;

fn workload(hosts: usize, hours: f64) -> Vec<Document> {
    Devops {
        hosts,
        hours,
        ..Devops::default()
    }
    .generate()
    .collect()
}

fn options() -> TimeseriesOptions {
    TimeseriesOptions::new("time").meta_field("tags")
}

fn prepare(c: &mut Criterion) {
    let docs = workload(1000, 0.1);
    let mut g = c.benchmark_group("ingest::prepare_batch");
    g.throughput(Throughput::Elements(docs.len() as u64));
    let fields = Schema::new("time", Some("tags"), 3600, 60);
    g.bench_function("devops_1000", |b| {
        b.iter(|| {
            for chunk in docs.chunks(1000) {
                criterion::black_box(prepare_batch(1, chunk, &fields).unwrap());
            }
        })
    });
    g.finish();
    // The same documents as BSON bytes: rows that repeat the headers of the row before have
    // only their values checked.
    let raws: Vec<RawDocumentBuf> = docs
        .iter()
        .map(|d| RawDocumentBuf::try_from(d).unwrap())
        .collect();
    let mut g = c.benchmark_group("ingest::prepare_raw_batch");
    g.throughput(Throughput::Elements(raws.len() as u64));
    g.bench_function("devops_1000", |b| {
        b.iter(|| {
            for chunk in raws.chunks(1000) {
                criterion::black_box(prepare_raw_batch(1, chunk, &fields).unwrap());
            }
        })
    });
    // Rows of one shape, of two shapes in turn, and of six shapes in no order: what checking
    // a row by the headers of the rows before costs where they seldom repeat.
    for (name, shapes) in [
        ("same_shape", 1),
        ("two_shapes_in_turn", 2),
        ("six_shapes_mixed", 6),
    ] {
        let rows = shaped_rows(20_000, shapes);
        g.throughput(Throughput::Elements(rows.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                for chunk in rows.chunks(1000) {
                    criterion::black_box(prepare_raw_batch(1, chunk, &fields).unwrap());
                }
            })
        });
    }
    g.finish();
}

/// `n` small measurements whose fields come in one of `shapes` orders and sets; with more than
/// two shapes the order is pseudo-random.
fn shaped_rows(n: i64, shapes: u64) -> Vec<RawDocumentBuf> {
    let mut x: u64 = 7;
    (0..n)
        .map(|i| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let shape = match shapes {
                1 => 0,
                2 => i as u64 % 2,
                s => (x >> 33) % s,
            };
            let mut d = tsbucket::bson::doc! {
                "time": tsbucket::bson::DateTime::from_millis(1_700_000_000_000 + i),
                "tags": {"host": format!("h{}", i % 100), "dc": "eu"},
            };
            let names = ["a", "b", "c", "d"];
            for k in 0..4 {
                d.insert(names[(k + shape as usize) % 4], i + k as i64);
            }
            if shape >= 4 {
                d.insert(format!("x{shape}"), 1.5);
            }
            RawDocumentBuf::try_from(&d).unwrap()
        })
        .collect()
}

fn insert(c: &mut Criterion) {
    let docs = workload(1000, 0.25);
    let mut g = c.benchmark_group("Collection::insert_many");
    g.throughput(Throughput::Elements(docs.len() as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    for (name, sync) in [("never", SyncMode::Never), ("always", SyncMode::Always)] {
        g.bench_function(format!("devops_1000_hosts/{name}"), |b| {
            b.iter_batched(
                || {
                    let dir = tempfile::tempdir().unwrap();
                    let db =
                        Database::open_with(dir.path(), DbOptions::default().sync(sync)).unwrap();
                    let coll = db.create_collection("cpu", options()).unwrap();
                    (dir, db, coll)
                },
                |(dir, db, coll)| {
                    for chunk in docs.chunks(1000) {
                        coll.insert_many(chunk).unwrap();
                    }
                    (dir, db)
                },
                BatchSize::PerIteration,
            )
        });
    }
    let raw: Vec<tsbucket::bson::RawDocumentBuf> = docs
        .iter()
        .map(|d| tsbucket::bson::RawDocumentBuf::try_from(d).unwrap())
        .collect();
    g.bench_function("devops_1000_hosts/raw/never", |b| {
        b.iter_batched(
            || {
                let dir = tempfile::tempdir().unwrap();
                let db =
                    Database::open_with(dir.path(), DbOptions::default().sync(SyncMode::Never))
                        .unwrap();
                let coll = db.create_collection("cpu", options()).unwrap();
                (dir, db, coll)
            },
            |(dir, db, coll)| {
                for chunk in raw.chunks(1000) {
                    coll.insert_many_raw(chunk).unwrap();
                }
                (dir, db)
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn recovery(c: &mut Criterion) {
    // 1,000,000 measurements in the log: 1000 hosts x 10,000 s.
    let docs = workload(1000, 1000.0 * 10.0 / 3600.0);
    let dir = tempfile::tempdir().unwrap();
    {
        let db =
            Database::open_with(dir.path(), DbOptions::default().sync(SyncMode::Never)).unwrap();
        let coll = db.create_collection("cpu", options()).unwrap();
        for chunk in docs.chunks(1000) {
            coll.insert_many(chunk).unwrap();
        }
        db.close().unwrap();
    }
    let mut g = c.benchmark_group("Database::open");
    g.throughput(Throughput::Elements(docs.len() as u64));
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(30));
    g.bench_function("replay_1m_measurements", |b| {
        b.iter(|| {
            let db = Database::open(dir.path()).unwrap();
            db.close().unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, prepare, insert, recovery);
criterion_main!(benches);
