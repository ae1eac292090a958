//! The bucket catalog alone: routing prepared devops-cpu measurements into buckets,
//! snapshotting open buckets (what reads do) and encoding closed ones (what flushes do).

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use tsbucket::bucket::EncodedBucket;
use tsbucket::catalog::{CollCatalog, FitLimits};
use tsbucket::ingest::prepare_batch;
use tsbucket::schema::Schema;
use tsbucket_workload::Devops;

fn catalog() -> CollCatalog {
    CollCatalog::new(
        Schema::new("time", Some("tags"), 3600, 60),
        FitLimits {
            max_count: 1000,
            max_size: 128_000,
            min_count: 10,
            large_max_size: 12 << 20,
        },
    )
}

/// Devops rows for `hours`, prepared as the log's applier gets them.
fn prepared(hours: f64) -> Vec<PreparedBatch> {
    let docs: Vec<_> = Devops {
        hosts: 1000,
        hours,
        ..Devops::default()
    }
    .generate()
    .collect();
    let fields = Schema::new("time", Some("tags"), 3600, 60);
    docs.chunks(1000)
        .map(|c| prepare_batch(1, c, &fields).unwrap())
        .collect()
}

type PreparedBatch = (
    Vec<tsbucket::ingest::Prepared>,
    Vec<u8>,
    Vec<tsbucket::bson::Bson>,
);

fn fill(cat: &mut CollCatalog, batches: &[PreparedBatch]) {
    for (seq, (prepared, payload, _)) in batches.iter().enumerate() {
        cat.begin_batch();
        for (i, m) in prepared.iter().enumerate() {
            if let Some(raw) = m.raw(payload) {
                cat.insert(m, raw, seq as u64 + 1, i as u32);
            }
        }
    }
}

fn insert(c: &mut Criterion) {
    let mut g = c.benchmark_group("CollCatalog::insert");
    g.sample_size(10);
    // 36 rows per bucket, then whole hour-long buckets of 360 rows (about 90 KB each).
    for (name, hours) in [("devops_1000_hosts", 0.1), ("devops_1000_hosts_1h", 1.0)] {
        let batches = prepared(hours);
        let rows: usize = batches.iter().map(|b| b.0.len()).sum();
        g.throughput(Throughput::Elements(rows as u64));
        g.bench_function(name, |b| {
            b.iter_batched(
                catalog,
                |mut cat| fill(&mut cat, &batches),
                BatchSize::PerIteration,
            )
        });
    }
    g.finish();
    let batches = prepared(0.1);
    let rows: usize = batches.iter().map(|b| b.0.len()).sum();
    let mut full = catalog();
    fill(&mut full, &batches);
    let mut g = c.benchmark_group("CollCatalog::snapshot_open");
    g.throughput(Throughput::Elements(rows as u64));
    g.sample_size(20);
    g.bench_function("devops_1000_buckets", |b| b.iter(|| full.snapshot_open()));
    g.finish();
}

/// Encoding the closed buckets of an hour of devops for a segment, as the flusher does:
/// straight from the typed column vectors, and through the `Bson` values of their contents
/// (the way flushes went before).
fn encode_closed(c: &mut Criterion) {
    let batches = prepared(1.0);
    let rows: usize = batches.iter().map(|b| b.0.len()).sum();
    let closed = || {
        let mut cat = catalog();
        fill(&mut cat, &batches);
        cat.close_all();
        cat.take_closed()
    };
    let mut g = c.benchmark_group("ClosedBucket::encode");
    g.sample_size(10);
    g.throughput(Throughput::Elements(rows as u64));
    g.bench_function("devops_1000_hosts_1h/typed", |b| {
        b.iter_batched(
            closed,
            |buckets| {
                buckets
                    .iter()
                    .map(|b| b.encoded().body.len())
                    .sum::<usize>()
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("devops_1000_hosts_1h/via_bson", |b| {
        b.iter_batched(
            closed,
            |buckets| {
                buckets
                    .iter()
                    .map(|b| EncodedBucket::from_data(b.data()).body.len())
                    .sum::<usize>()
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, insert, encode_closed);
criterion_main!(benches);
