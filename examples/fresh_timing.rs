//! Times reads of fresh data, still in the open buckets, against the same reads once it is
//! flushed to a segment: devops 1000 hosts x 1 h (one open bucket of 360 measurements per
//! host), the workload queries, and every measurement returned by `find` as `Document`s and
//! as BSON bytes. Prints median milliseconds and the ratio open / flushed. First, a count on
//! the open buckets right after the ingest, and again after one more measurement per host: a
//! read splits the rows that wait unsplit into columns and keeps them, so the next read
//! splits only the rows that arrived since; then reads that each follow one more measurement
//! per host, as a dashboard over live data makes them.
//!
//! `cargo run --release --example fresh_timing -- [runs] [hosts] [hours] [query-name-filter]`

use std::time::Instant;
use tsbucket::bson::{doc, Document};
use tsbucket::{Collection, Database, DbOptions, Result, SyncMode, TimeseriesOptions};
use tsbucket_workload::queries::{devops_queries, devops_scan_query};
use tsbucket_workload::Devops;

/// The median of `runs` runs in milliseconds, and the result count.
fn median(runs: usize, mut f: impl FnMut() -> Result<usize>) -> Result<(f64, usize)> {
    let mut t = Vec::with_capacity(runs);
    let mut n = 0;
    for _ in 0..runs {
        let s = Instant::now();
        n = std::hint::black_box(f()?);
        t.push(s.elapsed().as_secs_f64() * 1000.0);
    }
    t.sort_by(f64::total_cmp);
    Ok((t.get(runs / 2).copied().unwrap_or(0.0), n))
}

type Query = (String, Box<dyn Fn(&Collection) -> Result<usize>>);

fn queries(cfg: &Devops) -> Vec<Query> {
    let mut out: Vec<Query> = vec![
        (
            "find all as Documents".into(),
            Box::new(|c: &Collection| Ok(c.find(Document::new())?.count())),
        ),
        (
            "find all as BSON bytes".into(),
            Box::new(|c: &Collection| {
                let mut cur = c.find(Document::new())?;
                let mut buf = Vec::with_capacity(1 << 20);
                let mut n = 0;
                while cur.next_into(&mut buf)? {
                    n += 1;
                    if buf.len() > 1 << 20 {
                        buf.clear();
                    }
                }
                Ok(n)
            }),
        ),
        (
            "find usage_user > 90".into(),
            Box::new(|c: &Collection| Ok(c.find(doc! {"usage_user": {"$gt": 90}})?.count())),
        ),
    ];
    for (name, p) in devops_queries(cfg).into_iter().chain([devops_scan_query()]) {
        out.push((
            name.to_string(),
            Box::new(move |c: &Collection| Ok(c.aggregate(p.clone())?.count())),
        ));
    }
    out
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let runs: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(7);
    let cfg = Devops {
        hosts: args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000),
        hours: args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1.0),
        ..Devops::default()
    };
    let dir = tempfile::tempdir()?;
    let db = Database::open_with(
        dir.path(),
        DbOptions {
            sync: SyncMode::Never,
            ..DbOptions::default()
        },
    )?;
    let c = db.create_collection("cpu", TimeseriesOptions::new("time").meta_field("tags"))?;
    let docs: Vec<Document> = cfg.generate().collect();
    // The last time's measurements (one per host) arrive after the first read.
    let (before, last) = docs.split_at(docs.len().saturating_sub(cfg.hosts));
    for batch in before.chunks(1000) {
        c.insert_many(batch)?;
    }
    let high = || c.count_documents(doc! {"usage_user": {"$gt": 90}});
    let s = Instant::now();
    let n = high()?;
    let first = s.elapsed().as_secs_f64() * 1000.0;
    c.insert_many(last)?;
    let s = Instant::now();
    let m = high()?;
    let next = s.elapsed().as_secs_f64() * 1000.0;
    println!(
        "count usage_user > 90 on open buckets: {first:.3} ms for the first read after the \
         ingest ({n}), {next:.3} ms after {} more measurements ({m})",
        last.len()
    );
    // A dashboard over live data: each read follows one more measurement per host (the last
    // time's again, other values), so it splits and counts only those.
    let mut live = Vec::with_capacity(runs);
    let mut idle = Vec::with_capacity(runs);
    for k in 0..runs as i64 {
        let more: Vec<Document> = last
            .iter()
            .map(|d| {
                let mut d = d.clone();
                d.insert("usage_user", k);
                d
            })
            .collect();
        c.insert_many(&more)?;
        let s = Instant::now();
        high()?;
        live.push(s.elapsed().as_secs_f64() * 1000.0);
        let s = Instant::now();
        high()?;
        idle.push(s.elapsed().as_secs_f64() * 1000.0);
    }
    live.sort_by(f64::total_cmp);
    idle.sort_by(f64::total_cmp);
    println!(
        "  then, median of {runs}: {:.3} ms after each {} more, {:.3} ms with none in between",
        live.get(runs / 2).copied().unwrap_or(0.0),
        last.len(),
        idle.get(runs / 2).copied().unwrap_or(0.0),
    );
    let only = args.get(4).cloned().unwrap_or_default();
    let qs: Vec<Query> = queries(&cfg)
        .into_iter()
        .filter(|(n, _)| n.contains(only.as_str()))
        .collect();
    let mut open = Vec::new();
    for (_, q) in &qs {
        open.push(median(runs, || q(&c))?);
    }
    db.flush()?;
    println!(
        "devops {} hosts x {} h, {} measurements; medians of {runs} runs, ms",
        cfg.hosts,
        cfg.hours,
        docs.len()
    );
    println!(
        "{:<28} {:>10} {:>10} {:>8} {:>9}",
        "query", "open", "flushed", "ratio", "results"
    );
    for ((name, q), (o, n)) in qs.iter().zip(open) {
        let (f, m) = median(runs, || q(&c))?;
        let same = if n == m {
            ""
        } else {
            " (result counts differ)"
        };
        println!("{name:<28} {o:>10.3} {f:>10.3} {:>8.2} {n:>9}{same}", o / f);
    }
    db.close()
}
