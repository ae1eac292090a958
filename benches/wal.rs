//! WAL throughput: appends of 256 KiB batches with `SyncMode::Always` (one fsync per batch when a
//! single thread appends) and `SyncMode::Never`, and recovery (replay) speed, on the real file
//! system in a temporary directory.
//!
//! Run: `cargo bench --bench wal`. Criterion reports time per batch and MiB/s.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tsbucket::vfs::{RealFs, Vfs};
use tsbucket::wal::{SyncMode, Wal, WalOptions};

const BATCH: usize = 256 << 10;

fn batch() -> Vec<u8> {
    (0..BATCH).map(|i| (i * 7 + i / 251) as u8).collect()
}

fn open(dir: &Path, sync: SyncMode, bytes: &mut u64) -> Wal<()> {
    let vfs: Arc<dyn Vfs> = Arc::new(RealFs);
    let opts = WalOptions {
        sync,
        ..Default::default()
    };
    let result = Wal::open(
        vfs,
        dir,
        opts,
        0,
        &mut |_, p| {
            *bytes += p.len() as u64;
            Ok(())
        },
        Box::new(|_, _, _| {}),
    );
    match result {
        Ok(w) => w,
        Err(e) => panic!("open failed: {e}"),
    }
}

fn append(c: &mut Criterion) {
    let mut g = c.benchmark_group("wal_append_256KiB");
    g.throughput(Throughput::Bytes(BATCH as u64));
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(8));
    for (name, sync) in [("always", SyncMode::Always), ("never", SyncMode::Never)] {
        let tmp = match tempfile::tempdir() {
            Ok(t) => t,
            Err(e) => panic!("tempdir: {e}"),
        };
        let wal = open(&tmp.path().join("wal"), sync, &mut 0);
        let data = batch();
        g.bench_function(name, |b| {
            b.iter(|| {
                if let Err(e) = wal.append(data.clone(), ()) {
                    panic!("append: {e}");
                }
            })
        });
        // Keep the disk bounded between runs: everything written is obsolete.
        let _ = wal.reclaim(wal.last_seq());
        drop(wal);
    }
    g.finish();
}

fn replay(c: &mut Criterion) {
    const RECORDS: u64 = 256; // 64 MiB of payload, in 2 files (rotation at 64 MiB)
    let tmp = match tempfile::tempdir() {
        Ok(t) => t,
        Err(e) => panic!("tempdir: {e}"),
    };
    let dir = tmp.path().join("wal");
    {
        let wal = open(&dir, SyncMode::Never, &mut 0);
        let data = batch();
        for _ in 0..RECORDS {
            if let Err(e) = wal.append(data.clone(), ()) {
                panic!("append: {e}");
            }
        }
        if let Err(e) = wal.close() {
            panic!("close: {e}");
        }
    }
    let mut g = c.benchmark_group("wal_replay");
    g.throughput(Throughput::Bytes(RECORDS * BATCH as u64));
    g.sample_size(10);
    g.bench_function("64MiB_in_256KiB_records", |b| {
        b.iter(|| {
            let mut bytes = 0;
            let wal = open(&dir, SyncMode::Never, &mut bytes);
            assert_eq!(bytes, RECORDS * BATCH as u64);
            drop(wal);
        })
    });
    g.finish();
}

criterion_group!(benches, append, replay);
criterion_main!(benches);
