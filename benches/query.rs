//! Read-path timings on the devops-cpu workload (1000 hosts x 6 h at 10 s, flushed): a
//! measurement-field count, one host over one hour, every measurement of one hour (as
//! `Document`s and as BSON bytes), and the latest ten measurements.
//!
//! Run: `cargo bench --bench query`. Set `TSBUCKET_QUERY_DIR` to keep the database between runs
//! (it is built there on the first run and reused afterwards); `TSBUCKET_QUERY_HOSTS` and
//! `TSBUCKET_QUERY_HOURS` change the size; `TSBUCKET_QUERY_ONLY` runs the queries whose name
//! contains it. `TSBUCKET_QUERY_WORKLOAD=seed004` (with `TSBUCKET_QUERY_SCALE`, default 1.0)
//! times the seed-004 shape instead: many small buckets, where planning cost per bucket shows.
//! `TSBUCKET_QUERY_INDEX=1` creates a meta index first (`tags.hostname` on devops,
//! `dims.vAppid` on seed 004; without it any such index is dropped), to compare reads with and
//! without it.

use std::time::{Duration, Instant};
use tsbucket::bson::{doc, DateTime, Document};
use tsbucket::{Database, DbOptions, FindOptions, Granularity, SyncMode, TimeseriesOptions};
use tsbucket_workload::{Devops, Seed004};

fn env_or<T: std::str::FromStr>(var: &str, default: T) -> T {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn main() -> tsbucket::Result<()> {
    if std::env::var("TSBUCKET_QUERY_WORKLOAD").as_deref() == Ok("seed004") {
        return seed004();
    }
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
    meta_index(&cpu, doc! {"tags.hostname": 1}, "tags.hostname_1")?;

    let start = cfg.start_ms;
    let hour = doc! {"$gte": DateTime::from_millis(start), "$lt": DateTime::from_millis(start + 3_600_000)};
    let host_hour = doc! {"tags.hostname": "host_7", "time": hour.clone()};
    let latest = FindOptions {
        sort: Some(doc! {"time": -1}),
        limit: Some(10),
        ..FindOptions::default()
    };
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
            "return 1 h as documents",
            doc! {"time": hour.clone()},
            Box::new(|| Ok(cpu.find(doc! {"time": hour.clone()})?.count() as u64)),
        ),
        (
            "return 1 h as BSON",
            doc! {"time": hour.clone()},
            Box::new(|| {
                // Batches of documents appended to one buffer, as a server's reply takes them.
                let mut cursor = cpu.find(doc! {"time": hour.clone()})?;
                let (mut buf, mut n) = (Vec::with_capacity(1 << 20), 0);
                while cursor.next_into(&mut buf)? {
                    n += 1;
                    if buf.len() >= 1 << 20 {
                        buf.clear();
                    }
                }
                Ok(n)
            }),
        ),
        (
            "find sort time desc, limit 10",
            doc! {},
            Box::new(|| Ok(cpu.find_with(doc! {}, latest.clone())?.count() as u64)),
        ),
    ];
    run(&cpu, &queries)?;
    db.close()
}

/// With `TSBUCKET_QUERY_INDEX=1` makes sure the meta index `key` exists; otherwise that it
/// does not, so that a kept database compares reads with and without it.
fn meta_index(c: &tsbucket::Collection, key: Document, name: &str) -> tsbucket::Result<()> {
    let exists = c
        .list_indexes()?
        .iter()
        .any(|i| i.get_document("key").ok() == Some(&key));
    match (
        std::env::var("TSBUCKET_QUERY_INDEX").as_deref() == Ok("1"),
        exists,
    ) {
        (true, false) => {
            c.create_index(key)?;
        }
        (false, true) => c.drop_index(name)?,
        _ => {}
    }
    Ok(())
}

type Query<'a> = Box<dyn Fn() -> tsbucket::Result<u64> + 'a>;

/// Times each query (best and median of 7) and its planning alone (`explain`, best of 7).
fn run(c: &tsbucket::Collection, queries: &[(&str, Document, Query)]) -> tsbucket::Result<()> {
    let only = std::env::var("TSBUCKET_QUERY_ONLY").unwrap_or_default();
    for (name, filter, q) in queries.iter().filter(|q| q.0.contains(&only)) {
        let mut times: Vec<Duration> = Vec::new();
        let mut n = 0;
        for _ in 0..7 {
            let t = Instant::now();
            n = q()?;
            times.push(t.elapsed());
        }
        times.sort();
        let mut plan_time = Duration::MAX;
        for _ in 0..7 {
            let t = Instant::now();
            c.explain(filter.clone())?;
            plan_time = plan_time.min(t.elapsed());
        }
        let ex = c.explain(filter.clone())?;
        println!(
            "{name}: {n} results; min {:.2} ms, median {:.2} ms (planning {:.3} ms); buckets {} total, {} pruned by index {:?} or meta lookup {:?}, {} by _id, {} by stats, {} whole, {} unpacked",
            times[0].as_secs_f64() * 1000.0,
            times[times.len() / 2].as_secs_f64() * 1000.0,
            plan_time.as_secs_f64() * 1000.0,
            ex.buckets_total,
            ex.buckets_pruned_by_index,
            ex.index_used,
            ex.meta_lookup,
            ex.buckets_pruned_by_id,
            ex.buckets_pruned_by_stats,
            ex.buckets_taken_whole,
            ex.buckets_unpacked,
        );
    }
    Ok(())
}

fn seed004() -> tsbucket::Result<()> {
    let cfg = Seed004 {
        scale: env_or("TSBUCKET_QUERY_SCALE", 1.0),
        ..Seed004::default()
    };
    let tmp = tempfile::tempdir()?;
    let dir = std::env::var("TSBUCKET_QUERY_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| tmp.path().join("db"));
    let db = Database::open_with(&dir, DbOptions::default().sync(SyncMode::Never))?;
    let calls = match db.collection("calls") {
        Ok(c) => c,
        Err(_) => {
            let c = db.create_collection(
                "calls",
                TimeseriesOptions::new("timestamp").meta_field("dims"),
            )?;
            let docs: Vec<Document> = cfg.generate().collect();
            for chunk in docs.chunks(1000) {
                c.insert_many(chunk)?;
            }
            db.flush()?;
            c
        }
    };
    let s = calls.stats()?;
    println!(
        "{} rows in {} buckets ({} segments)",
        s.measurements, s.buckets, s.segments
    );
    meta_index(&calls, doc! {"dims.vAppid": 1}, "dims.vAppid_1")?;
    let one_app = doc! {"dims.vAppid": "app00007"};
    // An app id that is present, whatever the scale.
    let first = calls
        .find_with(
            doc! {"dims.vAppid": {"$ne": ""}},
            FindOptions {
                limit: Some(1),
                ..FindOptions::default()
            },
        )?
        .next()
        .transpose()?
        .and_then(|d| {
            d.get_document("dims")
                .ok()?
                .get_str("vAppid")
                .ok()
                .map(str::to_string)
        })
        .unwrap_or_default();
    let present_app = doc! {"dims.vAppid": first};
    let not_empty = doc! {"dims.vAppid": {"$ne": ""}};
    let slow = doc! {"dProcessTime": {"$gt": 4999.0}};
    let queries: Vec<(&str, Document, Query)> = vec![
        (
            "find one present app id",
            present_app.clone(),
            Box::new(|| Ok(calls.find(present_app.clone())?.count() as u64)),
        ),
        (
            "count one app id",
            one_app.clone(),
            Box::new(|| calls.count_documents(one_app.clone())),
        ),
        (
            "count app id not empty",
            not_empty.clone(),
            Box::new(|| calls.count_documents(not_empty.clone())),
        ),
        (
            "count process time > 4999",
            slow.clone(),
            Box::new(|| calls.count_documents(slow.clone())),
        ),
    ];
    run(&calls, &queries)?;
    db.close()
}
