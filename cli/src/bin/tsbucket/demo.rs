//! `tsbucket demo`: generate a workload, ingest it, flush, run its queries and report storage
//! and speed figures.

use crate::common::{CliResult, Workload};
use crate::out::Out;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tsbucket::bson::{doc, DateTime, Document};
use tsbucket::{Collection, Database, Granularity, TimeseriesOptions};
use tsbucket_workload::queries::{devops_queries, seed004_queries};
use tsbucket_workload::Devops;

/// Flags of `tsbucket demo`.
#[derive(Args)]
pub struct DemoArgs {
    /// Database directory (default: a temporary directory, removed afterwards).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Number of hosts (series).
    #[arg(long, default_value_t = 1000)]
    hosts: usize,
    /// Hours of data at one measurement per host every 10 s.
    #[arg(long, default_value_t = 6.0)]
    hours: f64,
    /// Float fields (2 decimals) instead of TSBS's int64.
    #[arg(long)]
    float: bool,
    /// Measurements per insert batch.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Threads inserting concurrently (their batches share log fsyncs).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Which workload: the TSBS devops-cpu shape, or the seed 004 shape.
    #[arg(long, value_enum, default_value_t = Workload::Devops)]
    workload: Workload,
    /// Size of the seed 004 workload (1.0 = 8.4 M rows).
    #[arg(long, default_value_t = 0.05)]
    scale: f64,
}

/// Runs the demo.
pub fn run(a: DemoArgs) -> CliResult {
    match a.workload {
        Workload::Devops => demo(a.dir, a.hosts, a.hours, a.float, a.batch, a.threads),
        Workload::Seed004 => seed004(a.dir, a.scale, a.batch),
    }
}

fn seed004(dir: Option<PathBuf>, scale: f64, batch: usize) -> CliResult {
    let (dir, _tmp) = demo_dir(dir)?;
    let cfg = tsbucket_workload::Seed004 {
        scale,
        ..Default::default()
    };
    let total = cfg.rows();
    let mut out = Out::new();
    out.line(&format!(
        "seed 004: scale {scale} = {total} rows over 272 one-minute periods, dims as meta"
    ))?;
    let db = Database::open(&dir)?;
    let _ = db.drop_collection("calls")?;
    let calls = db.create_collection(
        "calls",
        TimeseriesOptions::new("timestamp").meta_field("dims"),
    )?;
    let fed = ingest(&calls, cfg.generate(), total, batch, 1)?;
    db.flush()?;
    let stats = calls.stats()?;
    out.line(&format!(
        "ingest: {:.0} rows/s; storage: {} bytes = {:.1} bytes/row; {} buckets ({:.1} rows/bucket) in {} segments; {:.1}x smaller than the {} bytes of BSON inserted",
        fed.rows as f64 / fed.elapsed.as_secs_f64(),
        stats.bytes_on_disk,
        stats.bytes_on_disk as f64 / fed.rows.max(1) as f64,
        stats.buckets,
        fed.rows as f64 / stats.buckets.max(1) as f64,
        stats.segments,
        stats.bson_bytes as f64 / stats.bytes_on_disk.max(1) as f64,
        stats.bson_bytes
    ))?;
    let t = Instant::now();
    let n = calls.count_documents(doc! {"dims.vAppid": {"$ne": ""}})?;
    out.line(&format!(
        "query rows with vAppid != \"\": {n} in {}",
        ms(t.elapsed())
    ))?;
    run_pipelines(&mut out, &calls, seed004_queries())?;
    db.close()?;
    out.finish()?;
    Ok(())
}

/// What [`ingest`] did.
struct Fed {
    rows: u64,
    elapsed: Duration,
}

/// Inserts `docs` into `coll` in batches of `batch` from `threads` threads, with a progress
/// bar. A generator thread builds the batches while they are inserted, so memory stays at a
/// few batches whatever the workload's size; the elapsed time is wall time from the first
/// batch to the last insert's return.
fn ingest(
    coll: &Collection,
    docs: impl Iterator<Item = Document> + Send,
    total: u64,
    batch: usize,
    threads: usize,
) -> CliResult<Fed> {
    let batch = batch.max(1);
    let threads = threads.max(1);
    let pb = ProgressBar::new(total);
    pb.set_style(ProgressStyle::with_template(
        "ingest {bar:40} {pos}/{len} {per_sec} eta {eta}",
    )?);
    let (tx, rx) = crossbeam_channel::bounded::<Vec<Document>>(4 * threads);
    let t0 = Instant::now();
    let rows = std::thread::scope(|s| -> CliResult<u64> {
        let generator = s.spawn(move || {
            let mut rows = 0u64;
            let mut docs = docs.peekable();
            while docs.peek().is_some() {
                let chunk: Vec<Document> = docs.by_ref().take(batch).collect();
                rows += chunk.len() as u64;
                // The receivers are gone only when an insert failed; that error is reported.
                if tx.send(chunk).is_err() {
                    break;
                }
            }
            rows
        });
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let (rx, pb) = (rx.clone(), &pb);
                s.spawn(move || -> tsbucket::Result<()> {
                    for chunk in rx {
                        coll.insert_many(&chunk)?;
                        pb.inc(chunk.len() as u64);
                    }
                    Ok(())
                })
            })
            .collect();
        drop(rx);
        let mut first_err = None;
        for w in workers {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => first_err = first_err.or(Some(e.into())),
                Err(_) => first_err = first_err.or(Some("an insert thread panicked".into())),
            }
        }
        let counted = generator
            .join()
            .map_err(|_| "the workload generator panicked")?;
        match first_err {
            Some(e) => Err(e),
            None => Ok(counted),
        }
    })?;
    pb.finish_and_clear();
    Ok(Fed {
        rows,
        elapsed: t0.elapsed(),
    })
}

/// The database directory: the given one, or one inside a temporary directory that is removed
/// when the returned guard drops.
fn demo_dir(dir: Option<PathBuf>) -> CliResult<(PathBuf, Option<tempfile::TempDir>)> {
    match dir {
        Some(d) => Ok((d, None)),
        None => {
            let tmp = tempfile::tempdir()?;
            Ok((tmp.path().join("db"), Some(tmp)))
        }
    }
}

/// Runs the workload's aggregations once each, printing result counts and times.
fn run_pipelines(
    out: &mut Out,
    c: &Collection,
    queries: Vec<(&'static str, Vec<Document>)>,
) -> CliResult {
    for (name, p) in queries {
        let t = Instant::now();
        let n = c.aggregate(p)?.count();
        out.line(&format!(
            "aggregate {name}: {n} documents in {}",
            ms(t.elapsed())
        ))?;
    }
    Ok(())
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

fn demo(
    dir: Option<PathBuf>,
    hosts: usize,
    hours: f64,
    float: bool,
    batch: usize,
    threads: usize,
) -> CliResult {
    let (dir, _tmp) = demo_dir(dir)?;
    let cfg = Devops {
        hosts,
        hours,
        float,
        ..Devops::default()
    };
    let total = cfg.measurements();
    let mut out = Out::new();
    out.line(&format!(
        "devops-cpu: {hosts} hosts x {hours} h at 10 s = {total} measurements ({} values), {} fields",
        total * 10,
        if float { "float64" } else { "int64" }
    ))?;
    let db = Database::open(&dir)?;
    let _ = db.drop_collection("cpu")?;
    let cpu = db.create_collection(
        "cpu",
        TimeseriesOptions::new("time")
            .meta_field("tags")
            .granularity(Granularity::Seconds),
    )?;

    let fed = ingest(&cpu, cfg.generate(), total, batch, threads)?;
    let t1 = Instant::now();
    db.flush()?;
    let flush = t1.elapsed();
    let stats = cpu.stats()?;
    let values = fed.rows * 10;
    out.line(&format!(
        "ingest: {:.0} measurements/s ({} in {:.2} s, batches of {batch}, {threads} thread(s), fsync before each insert returns); flush {:.2} s",
        fed.rows as f64 / fed.elapsed.as_secs_f64(),
        fed.rows,
        fed.elapsed.as_secs_f64(),
        flush.as_secs_f64()
    ))?;
    out.line(&format!(
        "storage: {} bytes on disk = {:.2} bytes/measurement, {:.3} bytes/value; {} buckets in {} segments; {:.1}x smaller than the {} bytes of BSON inserted{}",
        stats.bytes_on_disk,
        stats.bytes_on_disk as f64 / fed.rows.max(1) as f64,
        stats.bytes_on_disk as f64 / values.max(1) as f64,
        stats.buckets,
        stats.segments,
        stats.bson_bytes as f64 / stats.bytes_on_disk.max(1) as f64,
        stats.bson_bytes,
        spare_note(&stats)
    ))?;

    let start = cfg.start_ms;
    let host = "host_0";
    type Query<'a> = Box<dyn Fn() -> tsbucket::Result<usize> + 'a>;
    let queries: Vec<(&str, Query)> = vec![
        (
            "one host, 1 h window",
            Box::new(|| {
                let f = doc! {"tags.hostname": host, "time": {"$gte": DateTime::from_millis(start), "$lt": DateTime::from_millis(start + 3_600_000)}};
                Ok(cpu.find(f)?.collect::<tsbucket::Result<Vec<_>>>()?.len())
            }),
        ),
        (
            "usage_user > 90, all hosts",
            Box::new(|| {
                let f = doc! {"usage_user": {"$gt": 90}};
                Ok(cpu.count_documents(f)? as usize)
            }),
        ),
        (
            "count all",
            Box::new(|| Ok(cpu.count_documents(doc! {})? as usize)),
        ),
    ];
    for (name, q) in &queries {
        let t = Instant::now();
        let n = q()?;
        out.line(&format!("query {name}: {n} results in {}", ms(t.elapsed())))?;
    }
    run_pipelines(&mut out, &cpu, devops_queries(&cfg))?;
    db.close()?;
    out.finish()?;
    Ok(())
}

/// What the log keeps on disk for reuse beside the data, which `bytes_on_disk` leaves out.
fn spare_note(stats: &tsbucket::CollStats) -> String {
    if stats.wal_spare_bytes == 0 {
        return String::new();
    }
    format!(
        "; the log also keeps {} bytes of reclaimed files for new ones to reuse (DbOptions::wal_spare_files)",
        stats.wal_spare_bytes
    )
}
