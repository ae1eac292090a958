use std::time::Instant;
use tsbucket::catalog::{BucketParams, CollCatalog, FitLimits};
use tsbucket::ingest::{prepare_batch, Fields};
use tsbucket::workload::Devops;
fn main() {
    let docs: Vec<_> = Devops {
        hosts: 1000,
        hours: 0.1,
        ..Devops::default()
    }
    .generate()
    .collect();
    let f = Fields {
        time: "time",
        meta: Some("tags"),
    };
    let batches: Vec<_> = docs
        .chunks(1000)
        .map(|c| prepare_batch(1, c, &f).unwrap())
        .collect();
    for _ in 0..3 {
        let mut cat = CollCatalog::new(
            BucketParams {
                time_field: "time".into(),
                meta_field: Some("tags".into()),
                span_ms: 3_600_000,
                rounding_ms: 60_000,
            },
            FitLimits {
                max_count: 1000,
                max_size: 128_000,
                min_count: 10,
                large_max_size: 12 << 20,
            },
        );
        let t = Instant::now();
        for (seq, (p, payload, _)) in batches.iter().enumerate() {
            cat.begin_batch();
            for (i, m) in p.iter().enumerate() {
                cat.insert(m, m.raw(payload).unwrap(), seq as u64 + 1, i as u32);
            }
        }
        let e = t.elapsed();
        let t = Instant::now();
        let snaps = cat.snapshot_open();
        let s = t.elapsed();
        println!(
            "catalog insert {:.2} us/doc; snapshot {} buckets {:.1} ms",
            e.as_secs_f64() * 1e6 / docs.len() as f64,
            snaps.len(),
            s.as_secs_f64() * 1e3
        );
    }
}
