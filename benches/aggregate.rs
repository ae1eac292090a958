//! The workload aggregations of `workload/src/queries.rs` under criterion: the devops-cpu
//! queries on 1000 hosts x 6 h and the two seed-004 queries at scale 0.25, all data flushed,
//! plus a memory bandwidth reference (summing a 256 MiB `f64` array) to read the figures
//! against.
//!
//! Run: `cargo bench --bench aggregate` (building the data takes about a minute). Set
//! `TSBUCKET_AGG_DIR` to keep the databases between runs; `TSBUCKET_AGG_SCALE` changes the
//! seed-004 scale (1.0 = 8.4 M rows).

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use std::time::Duration;
use tsbucket::{Database, DbOptions, SyncMode};
use tsbucket_workload::queries::{devops_queries, devops_scan_query, seed004_queries};
use tsbucket_workload::{bench_collections, bench_scale};

fn memory_bandwidth(c: &mut Criterion) {
    let v: Vec<f64> = (0..32 << 20).map(|i| i as f64).collect();
    let mut g = c.benchmark_group("reference");
    g.throughput(Throughput::Elements(v.len() as u64));
    g.sample_size(10);
    g.bench_function("sum_f64_256MiB", |b| {
        b.iter(|| black_box(&v).iter().sum::<f64>())
    });
    g.finish();
}

fn queries(c: &mut Criterion) {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = std::env::var("TSBUCKET_AGG_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| tmp.path().join("db"));
    let scale = bench_scale();
    let db = Database::open_with(&dir, DbOptions::default().sync(SyncMode::Never)).expect("open");
    let (cfg, cpu, s004) =
        bench_collections(&db, &format!("seed004_{scale}"), scale).expect("benchmark data");
    let mut g = c.benchmark_group("aggregate");
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(500));
    g.measurement_time(Duration::from_secs(3));
    let all = devops_queries(&cfg)
        .into_iter()
        .chain([devops_scan_query()])
        .map(|(n, p)| (&cpu, format!("devops/{n}"), p))
        .chain(
            seed004_queries()
                .into_iter()
                .map(|(n, p)| (&s004, format!("seed004_{scale}/{n}"), p)),
        );
    for (coll, name, p) in all {
        g.bench_function(name, |b| {
            b.iter(|| {
                coll.aggregate(p.clone())
                    .expect("aggregate")
                    .collect::<tsbucket::Result<Vec<_>>>()
                    .expect("rows")
                    .len()
            })
        });
    }
    g.finish();
}

criterion_group!(benches, memory_bandwidth, queries);
criterion_main!(benches);
