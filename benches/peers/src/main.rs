//! Loads the same generated data into tsbucket, SQLite and tsink and compares ingest rate,
//! bytes on disk, reopen time and the workload queries, checking that the engines agree.
//!
//! `cargo run --release --manifest-path benches/peers/Cargo.toml -- [devops|seed004|all]
//! [--hosts N] [--hours H] [--scale S] [--runs R] [--batch B] [--engines a,b] [--relaxed]`

mod answer;
mod engine;
mod report;
mod sqlite;
mod tsb;
mod tsink_engine;
mod workload;

use answer::Answer;
use clap::{Parser, ValueEnum};
use engine::{Engine, Res};
use report::{median, Better, Line};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tsbucket_workload::{Devops, Seed004};
use workload::Workload;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Which {
    Devops,
    Seed004,
    All,
}

/// Compares tsbucket with SQLite and tsink on the same generated data.
#[derive(Debug, Parser)]
struct Args {
    /// Which workload to run.
    #[arg(value_enum, default_value = "all")]
    workload: Which,
    /// Devops: number of hosts.
    #[arg(long, env = "TSBUCKET_PEERS_HOSTS", default_value_t = 100)]
    hosts: usize,
    /// Devops: hours of data (one measurement per host every 10 s).
    #[arg(long, env = "TSBUCKET_PEERS_HOURS", default_value_t = 6.0)]
    hours: f64,
    /// Devops: float64 fields (2 decimals) instead of TSBS's int64.
    #[arg(long)]
    float: bool,
    /// Seed 004: scale (1.0 = 8.4 M rows).
    #[arg(long, env = "TSBUCKET_PEERS_SCALE", default_value_t = 0.05)]
    scale: f64,
    /// Timed runs per query (after one untimed run that checks the answers).
    #[arg(long, env = "TSBUCKET_PEERS_RUNS", default_value_t = 7)]
    runs: usize,
    /// Measurements per insert call (per transaction for SQLite).
    #[arg(long, env = "TSBUCKET_PEERS_BATCH", default_value_t = 1000)]
    batch: usize,
    /// Engines to compare, tsbucket first (ratios are against the first).
    #[arg(
        long,
        env = "TSBUCKET_PEERS_ENGINES",
        value_delimiter = ',',
        default_value = "tsbucket,sqlite,tsink"
    )]
    engines: Vec<String>,
    /// Keep the data under this directory (it must not hold a previous run's data).
    #[arg(long, env = "TSBUCKET_PEERS_DIR")]
    dir: Option<PathBuf>,
    /// No fsync per batch: tsbucket SyncMode::Never, SQLite synchronous=OFF, tsink
    /// WalSyncMode::Periodic(1 h). Durability then differs per engine; see benches/README.md.
    #[arg(long)]
    relaxed: bool,
}

fn make(name: &str, dir: PathBuf, work: &Workload, relaxed: bool) -> Res<Box<dyn Engine>> {
    Ok(match name {
        "tsbucket" => Box::new(tsb::Tsbucket::create(
            dir,
            work,
            if relaxed {
                tsbucket::SyncMode::Never
            } else {
                tsbucket::SyncMode::Always
            },
        )?),
        "sqlite" => Box::new(sqlite::Sqlite::create(
            dir,
            work,
            if relaxed { "OFF" } else { "FULL" },
        )?),
        "tsink" => Box::new(tsink_engine::Tsink::create(
            dir,
            work,
            if relaxed {
                tsink::WalSyncMode::Periodic(Duration::from_secs(3600))
            } else {
                tsink::WalSyncMode::PerAppend
            },
        )?),
        _ => return Err(format!("unknown engine {name} (tsbucket, sqlite, tsink)").into()),
    })
}

/// Bytes of all files under `p`.
fn dir_bytes(p: &Path) -> Res<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(p)? {
        let e = e?;
        let m = e.metadata()?;
        n += if m.is_dir() {
            dir_bytes(&e.path())?
        } else {
            m.len()
        };
    }
    Ok(n)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Runs one workload on every engine; returns whether all answers agreed.
fn run(args: &Args, root: &Path, work: &Workload) -> Res<bool> {
    let names: Vec<&str> = args.engines.iter().map(String::as_str).collect();
    let mut engines = Vec::new();
    for n in &names {
        let dir = root.join(work.name()).join(n);
        if dir.exists() {
            return Err(format!("{} exists; pass an empty --dir", dir.display()).into());
        }
        engines.push(make(n, dir, work, args.relaxed)?);
    }
    println!(
        "\n## {} ({} engines, batch {})\n",
        work.describe(),
        names.len(),
        args.batch
    );

    // Ingest: the same batches, each offered to every engine in turn.
    let mut insert = vec![Duration::ZERO; engines.len()];
    let mut measurements = 0u64;
    let mut gen = work.generate();
    let mut batch = Vec::with_capacity(args.batch);
    let mut next_report = 100_000u64;
    loop {
        batch.clear();
        batch.extend(gen.by_ref().take(args.batch.max(1)));
        if batch.is_empty() {
            break;
        }
        measurements += batch.len() as u64;
        for (e, t) in engines.iter_mut().zip(insert.iter_mut()) {
            *t += e.insert(&batch)?;
        }
        if measurements >= next_report {
            eprintln!("  {measurements} measurements loaded");
            next_report += 100_000.max(measurements / 2);
        }
    }
    let mut close = Vec::new();
    let mut bytes = Vec::new();
    let mut reopen = Vec::new();
    for (e, n) in engines.iter_mut().zip(&names) {
        close.push(e.close()?);
        bytes.push(dir_bytes(&root.join(work.name()).join(n))?);
    }
    for e in engines.iter_mut() {
        reopen.push(e.reopen()?);
    }

    let m = measurements as f64;
    let all = |f: &dyn Fn(usize) -> f64| (0..engines.len()).map(|i| Some(f(i))).collect();
    let mut lines = vec![
        Line {
            metric: format!("ingest, {measurements} measurements (measurements/s)"),
            better: Better::Higher,
            values: all(&|i| m / insert[i].as_secs_f64()),
        },
        Line {
            metric: "flush + close (ms)".into(),
            better: Better::Lower,
            values: all(&|i| ms(close[i])),
        },
        Line {
            metric: "ingest incl. flush + close (measurements/s)".into(),
            better: Better::Higher,
            values: all(&|i| m / (insert[i] + close[i]).as_secs_f64()),
        },
        Line {
            metric: "bytes on disk after close".into(),
            better: Better::Lower,
            values: all(&|i| bytes[i] as f64),
        },
        Line {
            metric: "bytes on disk per measurement".into(),
            better: Better::Lower,
            values: all(&|i| bytes[i] as f64 / m),
        },
        Line {
            metric: "reopen (ms)".into(),
            better: Better::Lower,
            values: all(&|i| ms(reopen[i])),
        },
    ];

    // Queries: one checked run, then timed runs with the engines interleaved.
    let mut agreed = true;
    let mut notes = Vec::new();
    for q in work.queries() {
        let mut answers: Vec<Option<Answer>> = Vec::new();
        for e in engines.iter_mut() {
            match e.query(q) {
                Ok(a) => answers.push(Some(a)),
                Err(err) => {
                    eprintln!("!!! {} {q} failed: {err}", e.name());
                    answers.push(None);
                }
            }
        }
        let base = answers[0];
        for (a, n) in answers.iter().zip(&names).skip(1) {
            if let (Some(b), Some(a)) = (base, a) {
                if !b.agrees(a) {
                    agreed = false;
                    let msg = format!(
                        "!!! MISMATCH {} {q}: {} answered {} rows, total {}; {n} answered {} rows, total {}",
                        work.name(), names[0], b.rows, b.total, a.rows, a.total
                    );
                    eprintln!("{msg}");
                    println!("{msg}");
                }
            }
        }
        let mut times: Vec<Vec<f64>> = vec![Vec::new(); engines.len()];
        for _ in 0..args.runs {
            for (i, e) in engines.iter_mut().enumerate() {
                if answers[i].is_none() {
                    continue;
                }
                let t = std::time::Instant::now();
                e.query(q)?;
                times[i].push(ms(t.elapsed()));
            }
        }
        let rows = base.map_or(String::new(), |a| format!(", {} rows", a.rows));
        lines.push(Line {
            metric: format!("{q} (ms{rows})"),
            better: Better::Lower,
            values: times.iter_mut().map(|t| median(t)).collect(),
        });
        for e in &engines {
            if let Some(n) = e.note(q) {
                notes.push(format!("- {} {q}: {n}", e.name()));
            }
        }
    }
    report::print(&names, &lines);
    if !notes.is_empty() {
        println!("\nHow the queries are expressed where the engine has no native equivalent:\n");
        for n in notes {
            println!("{n}");
        }
    }
    println!(
        "\nAnswers {} (result rows and sums of the result values compared with {}).",
        if agreed { "agree" } else { "DO NOT AGREE" },
        names[0]
    );
    for mut e in engines {
        e.close()?;
    }
    Ok(agreed)
}

fn main() -> Res<()> {
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let root = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let mut works = Vec::new();
    if matches!(args.workload, Which::Devops | Which::All) {
        works.push(Workload::Devops(Devops {
            hosts: args.hosts,
            hours: args.hours,
            float: args.float,
            ..Devops::default()
        }));
    }
    if matches!(args.workload, Which::Seed004 | Which::All) {
        works.push(Workload::Seed004(Seed004 {
            scale: args.scale,
            ..Seed004::default()
        }));
    }
    println!(
        "# tsbucket against peers: {} timed runs per query (medians), {}",
        args.runs,
        if args.relaxed {
            "relaxed durability (no fsync per batch)"
        } else {
            "fsync per batch (tsbucket SyncMode::Always, SQLite WAL + synchronous=FULL, tsink WalSyncMode::PerAppend)"
        }
    );
    let mut agreed = true;
    for w in &works {
        agreed &= run(&args, &root, w)?;
    }
    if !agreed {
        eprintln!("!!! the engines' answers differ; see MISMATCH above");
        std::process::exit(2);
    }
    Ok(())
}
