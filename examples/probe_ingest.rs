use std::time::Instant;
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
    for _ in 0..3 {
        let t = Instant::now();
        let mut n = 0;
        for c in docs.chunks(1000) {
            let mut v = Vec::new();
            for d in c {
                d.to_writer(&mut v).unwrap();
            }
            n += v.len();
        }
        let a = t.elapsed();
        let t = Instant::now();
        for c in docs.chunks(1000) {
            n += prepare_batch(1, c, &f).unwrap().1.len();
        }
        let b = t.elapsed();
        for sync in [tsbucket::SyncMode::Never, tsbucket::SyncMode::Always] {
            let dir = tempfile::tempdir().unwrap();
            let db = tsbucket::Database::open_with(
                dir.path(),
                tsbucket::DbOptions::default().sync(sync),
            )
            .unwrap();
            let c = db
                .create_collection(
                    "c",
                    tsbucket::TimeseriesOptions::new("time").meta_field("tags"),
                )
                .unwrap();
            let t = Instant::now();
            for ch in docs.chunks(1000) {
                c.insert_many(ch).unwrap();
            }
            let e = t.elapsed();
            println!(
                "insert {sync:?}: {:.2} us/doc = {:.0} docs/s",
                e.as_secs_f64() * 1e6 / docs.len() as f64,
                docs.len() as f64 / e.as_secs_f64()
            );
        }
        println!(
            "{} docs: to_writer {:.2} us/doc, prepare_batch {:.2} us/doc ({n})",
            docs.len(),
            a.as_secs_f64() * 1e6 / docs.len() as f64,
            b.as_secs_f64() * 1e6 / docs.len() as f64
        );
    }
}
#[allow(dead_code)]
fn unused() {}
