//! The formulation matrix: every benchmark question in each way MongoDB users write it (see
//! `workload/src/formulations.rs`), on devops 1000 hosts x 6 h and seed 004 at scale 0.25, all
//! flushed. Checks that every form of a question gives the same answer, then prints each
//! form's median time and, per question, the ratio of the slowest form to the fastest among
//! the forms that return `Document`s and among those that take BSON bytes.
//!
//! `cargo bench --bench formulations -- [runs] [name-filter] [form-filter]`; `TSBUCKET_AGG_DIR` reuses a
//! database (the `aggregate` bench's and `aggregate_timing`'s have the same data), and
//! `TSBUCKET_AGG_SCALE` sets the seed-004 scale.

use std::time::Instant;
use tsbucket::{Database, DbOptions, SyncMode};
use tsbucket_workload::formulations::{canonical, devops_matrix, seed004_matrix, Answer};
use tsbucket_workload::{bench_collections, bench_scale};

fn main() -> tsbucket::Result<()> {
    // `cargo bench` passes `--bench`; the numbers and the filter are ours.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let runs: usize = args
        .first()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5)
        .max(1);
    let only = args.get(1).cloned().unwrap_or_default();
    // A third argument keeps only the forms whose name contains it (for profiling one).
    let only_form = args.get(2).cloned().unwrap_or_default();
    let tmp = tempfile::tempdir()?;
    let dir = std::env::var("TSBUCKET_AGG_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| tmp.path().join("db"));
    let mut opts = DbOptions::default().sync(SyncMode::Never);
    if let Some(n) = std::env::var("TSBUCKET_QUERY_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        opts.query_threads = n;
    }
    let db = Database::open_with(&dir, opts)?;
    let (cfg, cpu, s004) = bench_collections(&db, "seed004", bench_scale())?;
    let mut worst: f64 = 1.0;
    let mut mismatched = Vec::new();
    println!("question | form | median ms | documents | x fastest");
    for q in devops_matrix(&cfg).into_iter().chain(seed004_matrix()) {
        if !q.name.contains(only.as_str()) {
            continue;
        }
        let c = if q.data == "devops" { &cpu } else { &s004 };
        let mut rows = Vec::new();
        let mut first: Option<Vec<String>> = None;
        for (name, form) in q.forms.iter().filter(|f| f.0.contains(only_form.as_str())) {
            let mut times = Vec::with_capacity(runs);
            let mut out = Answer::default();
            for _ in 0..runs {
                // Freeing the last run's documents is not part of this run.
                drop(std::mem::take(&mut out));
                let t = Instant::now();
                out = form.run(c)?;
                times.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            times.sort_by(f64::total_cmp);
            let n = out.len();
            let answer = canonical(&out.into_documents()?, q.ordered);
            match &first {
                None => first = Some(answer),
                Some(a) if *a != answer => mismatched.push(format!("{} {name}", q.name)),
                Some(_) => {}
            }
            rows.push((*name, times[runs / 2], n, form.returns_bson()));
        }
        // Forms that return `Document`s and forms that return BSON bytes are compared among
        // themselves: the same query, different products.
        let mut ratios = Vec::new();
        for bson in [false, true] {
            let kind: Vec<_> = rows.iter().filter(|r| r.3 == bson).collect();
            if kind.is_empty() {
                continue;
            }
            let fastest = kind.iter().map(|r| r.1).fold(f64::INFINITY, f64::min);
            let slowest = kind.iter().map(|r| r.1).fold(0.0, f64::max);
            for (name, ms, n, _) in &kind {
                println!(
                    "{} | {name} | {ms:.3} | {n} | {:.2}",
                    q.name,
                    ms / fastest.max(1e-9)
                );
            }
            let ratio = slowest / fastest.max(1e-9);
            worst = worst.max(ratio);
            ratios.push(format!(
                "{ratio:.2}{}",
                if bson { " (BSON forms)" } else { "" }
            ));
        }
        println!("{} | slowest / fastest | {}", q.name, ratios.join(", "));
    }
    println!("worst slowest/fastest ratio over the questions: {worst:.2}");
    if !mismatched.is_empty() {
        eprintln!("forms that answered differently from their question's first form:");
        for m in &mismatched {
            eprintln!("  {m}");
        }
        std::process::exit(1);
    }
    db.close()
}
