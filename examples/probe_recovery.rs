use std::time::Instant;
use tsbucket::workload::Devops;
use tsbucket::{Database, DbOptions, SyncMode, TimeseriesOptions};
fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let docs: Vec<_> = Devops {
        hosts: 1000,
        hours: n as f64 / 1000.0 * 10.0 / 3600.0,
        ..Devops::default()
    }
    .generate()
    .collect();
    let dir = tempfile::tempdir().unwrap();
    let keep = std::env::args().nth(2);
    {
        let db =
            Database::open_with(dir.path(), DbOptions::default().sync(SyncMode::Never)).unwrap();
        let c = db
            .create_collection("cpu", TimeseriesOptions::new("time").meta_field("tags"))
            .unwrap();
        let t = Instant::now();
        for ch in docs.chunks(1000) {
            c.insert_many(ch).unwrap();
        }
        println!(
            "inserted {} in {:.2} s; wal {} MB",
            docs.len(),
            t.elapsed().as_secs_f64(),
            c.stats().unwrap().wal_bytes >> 20
        );
        db.close().unwrap();
    }
    for _ in 0..3 {
        let t = Instant::now();
        let db = Database::open(dir.path()).unwrap();
        let e = t.elapsed();
        let s = db.collection("cpu").unwrap().stats().unwrap();
        println!(
            "reopen: {:.3} s, {} measurements in {} open buckets",
            e.as_secs_f64(),
            s.measurements,
            s.open_buckets
        );
        db.close().unwrap();
    }
    if let Some(k) = keep {
        let _ = std::fs::remove_dir_all(&k);
        std::fs::rename(dir.path(), &k).unwrap();
    }
}
