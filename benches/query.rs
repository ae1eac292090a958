//! Read-path timings on the devops-cpu workload (1000 hosts x 6 h at 10 s, flushed): a
//! measurement-field count, one host over one hour, and the latest ten measurements.
//!
//! Run: `cargo bench --bench query`. Set `TSBUCKET_QUERY_DIR` to keep the database between runs
//! (it is built there on the first run and reused afterwards); `TSBUCKET_QUERY_HOSTS` and
//! `TSBUCKET_QUERY_HOURS` change the size.

use std::time::{Duration, Instant};
use tsbucket::bson::{doc, DateTime, Document};
use tsbucket::workload::Devops;
use tsbucket::{Database, DbOptions, FindOptions, Granularity, SyncMode, TimeseriesOptions};

fn env_or<T: std::str::FromStr>(var: &str, default: T) -> T {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() -> tsbucket::Result<()> {
    let cfg = Devops {
        hosts: env_or("TSBUCKET_QUERY_HOSTS", 1000),
        hours: env_or("TSBUCKET_QUERY_HOURS", 6.0),
        ..Devops::default()
    };
    let tmp = tempfile::tempdir()?;
    let dir = std::env::var("TSBUCKET_QUERY_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| tmp.path().join("db"));
    let db = Database::open_with(&dir, DbOptions::default().sync(SyncMode::Never))?;
    let cpu = match db.collection("cpu") {
        Ok(c) => c,
        Err(_) => {
            let c = db.create_collection(
                "cpu",
                TimeseriesOptions::new("time")
                    .meta_field("tags")
                    .granularity(Granularity::Seconds),
            )?;
            let docs: Vec<Document> = cfg.generate().collect();
            for chunk in docs.chunks(1000) {
                c.insert_many(chunk)?;
            }
            db.flush()?;
            c
        }
    };
    let s = cpu.stats()?;
    println!(
        "{} measurements in {} buckets ({} segments)",
        s.measurements, s.buckets, s.segments
    );

    let start = cfg.start_ms;
    let hour = doc! {"$gte": DateTime::from_millis(start), "$lt": DateTime::from_millis(start + 3_600_000)};
    let host_hour = doc! {"tags.hostname": "host_7", "time": hour};
    let latest = FindOptions {
        sort: Some(doc! {"time": -1}),
        limit: Some(10),
        ..FindOptions::default()
    };
    type Query<'a> = Box<dyn Fn() -> tsbucket::Result<u64> + 'a>;
    let queries: Vec<(&str, Document, Query)> = vec![
        (
            "count usage_user > 90",
            doc! {"usage_user": {"$gt": 90}},
            Box::new(|| cpu.count_documents(doc! {"usage_user": {"$gt": 90}})),
        ),
        (
            "find host_7, 1 h",
            host_hour.clone(),
            Box::new(|| Ok(cpu.find(host_hour.clone())?.count() as u64)),
        ),
        (
            "find sort time desc, limit 10",
            doc! {},
            Box::new(|| Ok(cpu.find_with(doc! {}, latest.clone())?.count() as u64)),
        ),
    ];
    for (name, filter, q) in &queries {
        let mut times: Vec<Duration> = Vec::new();
        let mut n = 0;
        for _ in 0..7 {
            let t = Instant::now();
            n = q()?;
            times.push(t.elapsed());
        }
        times.sort();
        let ex = cpu.explain(filter.clone())?;
        println!(
            "{name}: {n} results; min {:.2} ms, median {:.2} ms; buckets {} total, {} pruned by _id, {} by stats, {} whole, {} unpacked",
            times[0].as_secs_f64() * 1000.0,
            times[times.len() / 2].as_secs_f64() * 1000.0,
            ex.buckets_total,
            ex.buckets_pruned_by_id,
            ex.buckets_pruned_by_stats,
            ex.buckets_taken_whole,
            ex.buckets_unpacked,
        );
    }
    db.close()
}
