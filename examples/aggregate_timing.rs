//! Times the workload queries on the benchmark sizes: devops 1000 hosts x 6 h and seed 004 at
//! scale 0.25 (`TSBUCKET_AGG_SCALE` to change), all flushed. The database is built in the
//! given directory on first use and reused afterwards.
//!
//! `TSBUCKET_QUERY_THREADS` sets `DbOptions::query_threads` (default 0: one per core, at most
//! 4); the CPU column counts the calling thread only.
//!
//! `cargo run --release --example aggregate_timing -- <dir> [runs] [query-name-filter]`

use std::time::Instant;
use tsbucket::bson::Document;
use tsbucket::{Collection, Database, DbOptions, SyncMode};
use tsbucket_workload::queries::{devops_queries, devops_scan_query, seed004_queries};
use tsbucket_workload::{bench_collections, bench_scale};

/// CPU time of this thread in nanoseconds (Linux), so that figures hold on a busy machine.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Median wall and CPU milliseconds of `runs` runs, the fastest wall time (the run least
/// disturbed by other processes) and the number of output documents.
fn medians(
    c: &Collection,
    p: &[Document],
    runs: usize,
) -> tsbucket::Result<(f64, f64, f64, usize)> {
    let mut wall = Vec::with_capacity(runs);
    let mut cpu = Vec::with_capacity(runs);
    let mut out = 0;
    for _ in 0..runs {
        let (s, c0) = (Instant::now(), thread_cpu_ns().unwrap_or(0));
        out = std::hint::black_box(c.aggregate(p.to_vec())?.count());
        wall.push(s.elapsed().as_secs_f64() * 1000.0);
        cpu.push(thread_cpu_ns().unwrap_or(0).saturating_sub(c0) as f64 / 1e6);
    }
    wall.sort_by(f64::total_cmp);
    cpu.sort_by(f64::total_cmp);
    Ok((
        wall.get(runs / 2).copied().unwrap_or(0.0),
        cpu.get(runs / 2).copied().unwrap_or(0.0),
        wall.first().copied().unwrap_or(0.0),
        out,
    ))
}

fn main() -> tsbucket::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = args.get(1).map_or("aggregate-timing-db", String::as_str);
    let runs: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(15);
    let only = args.get(3).cloned().unwrap_or_default();
    // As in the `aggregate` bench; a database built at another scale is reused as it is.
    let db = Database::open_with(
        dir,
        DbOptions {
            sync: SyncMode::Never,
            query_threads: std::env::var("TSBUCKET_QUERY_THREADS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            ..DbOptions::default()
        },
    )?;
    let (cfg, cpu, s004) = bench_collections(&db, "seed004", bench_scale())?;
    let all = devops_queries(&cfg)
        .into_iter()
        .chain([devops_scan_query()])
        .map(|(n, p)| (&cpu, "devops", n, p))
        .chain(
            seed004_queries()
                .into_iter()
                .map(|(n, p)| (&s004, "seed004", n, p)),
        );
    for (c, w, name, p) in all {
        if !name.contains(only.as_str()) {
            continue;
        }
        let ex = c.explain_aggregate(p.clone())?;
        let (wall, cpu, fastest, out) = medians(c, &p, runs)?;
        println!(
            "{w} {name}: median {wall:.3} ms wall, {cpu:.3} ms cpu, fastest {fastest:.3} ms \
             over {runs} runs, {out} documents \
             (buckets {}, examined {}, from stats {}, pruned by stats {})",
            ex.buckets_total,
            ex.buckets_examined,
            ex.buckets_from_stats,
            ex.buckets_pruned_by_stats,
        );
        if name == devops_scan_query().0 {
            // Every row's usage_user (and its time) is decoded and summed.
            let rows = c.count_documents(Document::new())? as f64;
            println!(
                "  {rows} usage_user values: {:.0} M values/s over the median wall time, {:.0} M \
                 values/s over its fastest run",
                rows / wall / 1e3,
                rows / fastest / 1e3,
            );
        }
    }
    db.close()
}
