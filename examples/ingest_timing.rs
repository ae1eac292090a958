//! Times inserts of the devops-cpu workload (TSBS shape, tags as meta, batches of 1000) with the
//! documents generated up front, so only the engine is measured. Prints the median rate over
//! several runs, each into a fresh database, and the CPU time each thread spent per batch: the
//! inserting threads (validation and encoding, and the wait for the log's reply), the log
//! writer (`tsbucket-wal`: write, fsync), its applier (`tsbucket-apply`: the bucket catalog)
//! and the flusher (segment encoding). CPU figures hold up better than wall time on a busy
//! machine. Then the log writer's own wall time per batch (`Database::log_stats`): writing
//! records, syncing them, and writing and syncing zeros ahead of them; and what the inserts
//! left: buckets closed for memory or not yet flushed, log and spare sizes. `--after-hours` times
//! a database whose log has reclaimed files to reuse.
//!
//! `cargo run --release --example ingest_timing -- --help`

use clap::Parser;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tsbucket::bson::{Bson, Document, RawDocumentBuf};
use tsbucket::{
    BackgroundPriority, Collection, Database, DbOptions, Granularity, LogStats, SyncMode,
    TimeseriesOptions,
};
use tsbucket_workload::Devops;

#[derive(Parser)]
struct Args {
    /// Hosts (series).
    #[arg(long, default_value_t = 1000)]
    hosts: usize,
    /// Hours of data at one measurement per host every 10 s.
    #[arg(long, default_value_t = 1.0)]
    hours: f64,
    /// Measurements per insert call.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
    /// Inserting threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// `always` (fsync before each insert returns), `never`, or `periodic` (100 ms).
    #[arg(long, default_value = "always")]
    sync: String,
    /// Timed runs, each into a fresh database.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Insert through `insert_many_raw` (BSON bytes) instead of `insert_many`.
    #[arg(long)]
    raw: bool,
    /// Read every name and value of a batch just before inserting it, as an application that
    /// has just built it would have them in cache; the rate then counts only the time spent
    /// inside the insert calls (one thread only).
    #[arg(long)]
    warm: bool,
    /// Hours of earlier data inserted and flushed, untimed, into each run's database before
    /// the timed inserts: the log files they filled are then reclaimed, and the timed inserts
    /// start new files in their space, as in a database that has been running for a while.
    #[arg(long, default_value_t = 0.0)]
    after_hours: f64,
    /// Store the log's records as BSON (`DbOptions::wal_compact` off).
    #[arg(long)]
    no_compact: bool,
    /// Leave the background threads at the inserting thread's priority
    /// (`DbOptions::background_priority`).
    #[arg(long)]
    normal_priority: bool,
}

/// CPU nanoseconds of the threads of this process, summed by thread name.
fn thread_cpu() -> HashMap<String, u64> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in dir.flatten() {
        let p = t.path();
        let name = std::fs::read_to_string(p.join("comm")).unwrap_or_default();
        let ns: u64 = std::fs::read_to_string(p.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse().ok())
            .unwrap_or(0);
        *out.entry(name.trim().to_string()).or_default() += ns;
    }
    out
}

enum Input {
    Docs(Vec<Document>),
    Raw(Vec<RawDocumentBuf>),
}

/// CPU nanoseconds of the calling thread.
fn own_cpu() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// One run: ingest time, close time, CPU nanoseconds per thread group during the ingest, what
/// the log writer did, and a line on the state the ingest left.
type RunResult = (Duration, Duration, HashMap<String, u64>, LogStats, String);

fn run_once(
    a: &Args,
    sync: SyncMode,
    earlier: &Input,
    input: &Input,
) -> tsbucket::Result<RunResult> {
    let dir = tempfile::tempdir()?;
    let mut opts = DbOptions::default().sync(sync);
    opts.wal_compact = !a.no_compact;
    if a.normal_priority {
        opts.background_priority = BackgroundPriority::Normal;
    }
    let db = Database::open_with(dir.path(), opts)?;
    let coll = db.create_collection(
        "cpu",
        TimeseriesOptions::new("time")
            .meta_field("tags")
            .granularity(Granularity::Seconds),
    )?;
    match earlier {
        Input::Docs(d) => d
            .chunks(a.batch.max(1))
            .try_for_each(|b| coll.insert_many(b).map(drop))?,
        Input::Raw(d) => d
            .chunks(a.batch.max(1))
            .try_for_each(|b| coll.insert_many_raw(b).map(drop))?,
    }
    db.flush()?;
    let log0 = db.log_stats()?;
    let n = match input {
        Input::Docs(d) => d.len(),
        Input::Raw(d) => d.len(),
    };
    let batches = n.div_ceil(a.batch);
    let next = AtomicUsize::new(0);
    // The thread's CPU nanoseconds, and the wall time spent inside the insert calls.
    let insert = |coll: &Collection| -> tsbucket::Result<(u64, Duration)> {
        let (c0, mut wall) = (own_cpu(), Duration::ZERO);
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= batches {
                return Ok((own_cpu().saturating_sub(c0), wall));
            }
            let r = i * a.batch..((i + 1) * a.batch).min(n);
            if a.warm {
                warm_up(input, r.clone());
            }
            let t0 = Instant::now();
            match input {
                Input::Docs(d) => coll.insert_many(&d[r])?,
                Input::Raw(d) => coll.insert_many_raw(&d[r])?,
            };
            wall += t0.elapsed();
        }
    };
    let before = thread_cpu();
    let t0 = Instant::now();
    let (insert_ns, busy) = std::thread::scope(|s| -> tsbucket::Result<(u64, Duration)> {
        let workers: Vec<_> = (0..a.threads.max(1))
            .map(|k| {
                std::thread::Builder::new()
                    .name(format!("ingest-{k}"))
                    .spawn_scoped(s, || insert(&coll))
            })
            .collect::<std::io::Result<_>>()?;
        let (mut ns, mut busy) = (0, Duration::ZERO);
        for w in workers {
            let (c, b) = w.join().map_err(|_| {
                tsbucket::Error::Io(std::io::Error::other("an insert thread panicked"))
            })??;
            ns += c;
            busy = busy.max(b);
        }
        Ok((ns, busy))
    })?;
    let ingest = if a.warm { busy } else { t0.elapsed() };
    let mut cpu: HashMap<String, u64> = thread_cpu()
        .into_iter()
        .filter(|(k, _)| k.starts_with("tsbucket"))
        .map(|(k, v)| {
            let d = v.saturating_sub(before.get(&k).copied().unwrap_or(0));
            (k, d)
        })
        .collect();
    // A thread's CPU time from schedstat lags while it runs, which sums to nothing over a
    // whole run but swamps the per-call figures that `--warm` would need.
    if !a.warm {
        cpu.insert("insert".into(), insert_ns);
    }
    let log = since(db.log_stats()?, log0);
    let st = coll.stats()?;
    let state = format!(
        "{} buckets closed by the catalog's memory limit, {} open and {} closed but unflushed; \
         log {:.0} MB, {:.0} MB kept in spare files; zeros written ahead of {:.0}% of the \
         record bytes",
        st.catalog.num_buckets_closed_due_to_memory_threshold,
        st.open_buckets,
        st.unflushed_buckets.saturating_sub(st.open_buckets),
        st.wal_bytes as f64 / 1e6,
        st.wal_spare_bytes as f64 / 1e6,
        100.0 * log.zero_bytes as f64 / log.stored_bytes.max(1) as f64,
    );
    let t1 = Instant::now();
    db.close()?;
    Ok((ingest, t1.elapsed(), cpu, log, state))
}

/// What the log writer did between two readings.
fn since(b: LogStats, a: LogStats) -> LogStats {
    LogStats {
        groups: b.groups - a.groups,
        records: b.records - a.records,
        record_bytes: b.record_bytes - a.record_bytes,
        stored_bytes: b.stored_bytes - a.stored_bytes,
        write_nanos: b.write_nanos - a.write_nanos,
        syncs: b.syncs - a.syncs,
        sync_nanos: b.sync_nanos - a.sync_nanos,
        zero_bytes: b.zero_bytes - a.zero_bytes,
        zero_nanos: b.zero_nanos - a.zero_nanos,
    }
}

/// Reads every name and value of the batch `r`, so that it is in cache.
fn warm_up(input: &Input, r: std::ops::Range<usize>) {
    fn walk(d: &Document) -> usize {
        d.iter()
            .map(|(k, v)| {
                k.bytes().map(usize::from).sum::<usize>()
                    + match v {
                        Bson::String(s) => s.bytes().map(usize::from).sum(),
                        Bson::Document(sub) => walk(sub),
                        _ => 1,
                    }
            })
            .sum()
    }
    let sum: usize = match input {
        Input::Docs(d) => d[r].iter().map(walk).sum(),
        Input::Raw(d) => d[r]
            .iter()
            .map(|b| b.as_bytes().iter().map(|&x| usize::from(x)).sum::<usize>())
            .sum(),
    };
    std::hint::black_box(sum);
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    let sync = match a.sync.as_str() {
        "always" => SyncMode::Always,
        "never" => SyncMode::Never,
        "periodic" => SyncMode::Periodic(Duration::from_millis(100)),
        other => return Err(format!("unknown sync mode {other:?}").into()),
    };
    let mut docs: Vec<Document> = Devops {
        hosts: a.hosts,
        hours: a.after_hours + a.hours,
        ..Devops::default()
    }
    .generate()
    .collect();
    // Rows come time by time, so the first ones are the earlier hours.
    let skip = (a.after_hours * 360.0).round() as usize * a.hosts;
    let timed = docs.split_off(skip.min(docs.len()));
    let n = timed.len();
    let as_input = |docs: Vec<Document>| -> Result<Input, Box<dyn std::error::Error>> {
        Ok(if a.raw {
            Input::Raw(
                docs.iter()
                    .map(RawDocumentBuf::try_from)
                    .collect::<Result<_, _>>()?,
            )
        } else {
            Input::Docs(docs)
        })
    };
    let earlier = as_input(docs)?;
    let input = as_input(timed)?;
    let batches = n.div_ceil(a.batch.max(1)) as f64;
    let mut rates = Vec::new();
    let mut closes = Vec::new();
    let mut cpu: HashMap<String, Vec<f64>> = HashMap::new();
    let mut log: [Vec<f64>; 5] = Default::default();
    let mut last_state = String::new();
    for _ in 0..a.runs.max(1) {
        let (ingest, close, used, l, state) = run_once(&a, sync, &earlier, &input)?;
        last_state = state;
        let per_batch = |ns: u64| ns as f64 / 1000.0 / batches;
        let taken = [l.write_nanos, l.sync_nanos, l.zero_nanos];
        for (v, ns) in log.iter_mut().zip(taken) {
            v.push(per_batch(ns));
        }
        log[3].push(l.record_bytes as f64 / l.records.max(1) as f64 / 1000.0);
        log[4].push(l.stored_bytes as f64 / l.records.max(1) as f64 / 1000.0);
        rates.push(n as f64 / ingest.as_secs_f64());
        closes.push(close.as_secs_f64() * 1000.0);
        for (k, v) in used {
            cpu.entry(k).or_default().push(v as f64 / 1000.0 / batches);
        }
    }
    println!(
        "devops {} hosts x {} h{} = {n} measurements, batches of {}, {} thread(s), sync {}, {}: \
         median {:.0} measurements/s over {} runs (min {:.0}, max {:.0}); close {:.0} ms",
        a.hosts,
        a.hours,
        if a.after_hours > 0.0 {
            format!(" after {} h flushed", a.after_hours)
        } else {
            String::new()
        },
        a.batch,
        a.threads,
        a.sync,
        match (a.raw, a.warm) {
            (false, false) => "insert_many",
            (false, true) => "insert_many, batches in cache",
            (true, false) => "insert_many_raw",
            (true, true) => "insert_many_raw, batches in cache",
        },
        median(rates.clone()),
        rates.len(),
        rates.iter().copied().fold(f64::INFINITY, f64::min),
        rates.iter().copied().fold(0.0, f64::max),
        median(closes)
    );
    let mut names: Vec<&String> = cpu.keys().collect();
    names.sort();
    let parts: Vec<String> = names
        .iter()
        .map(|k| format!("{k} {:.0}", median(cpu[*k].clone())))
        .collect();
    println!("CPU us per batch (medians): {}", parts.join(", "));
    let [write, sync, zeros, kb, stored] = log.map(median);
    println!(
        "log writer, wall us per batch (medians): write {write:.0}, sync {sync:.0}, \
         zeros written and synced ahead {zeros:.0}; {kb:.0} KB per record, {stored:.0} KB \
         stored"
    );
    println!("after the last run's inserts: {last_state}");
    Ok(())
}
