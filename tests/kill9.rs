//! Black-box `kill -9`: a child process (this test binary, re-executed) ingests batches from
//! several threads on the real file system, with explicit and background flushes, and reports
//! each batch on stdout only after `insert_many` returned `Ok`. The parent kills it with
//! SIGKILL at a seeded random moment, reopens the same directory and checks that every
//! acknowledged batch survived, that no batch is partial or duplicated, that each writer's
//! batches form a prefix with no hole, and that the database takes new writes. One directory
//! serves every cycle, so each open also recovers what earlier recoveries left behind.
//! `TSBUCKET_KILL_CYCLES=N` runs more cycles, `TSBUCKET_SEED` replays.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use tsbucket::bson::doc;
use tsbucket::{Database, DbOptions, Error};

const CHILD_TEST: &str = "child_ingests_until_killed";
const DIR_VAR: &str = "TSBUCKET_CHILD_DIR";

/// Not a test of its own: the body of the child process. Without `TSBUCKET_CHILD_DIR` (a
/// normal test run) it returns at once.
#[test]
fn child_ingests_until_killed() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let seed = count_from_env("TSBUCKET_CHILD_SEED", 1);
    let cycle = count_from_env("TSBUCKET_CHILD_CYCLE", 1) as i32;
    let mut rng = Rng::new(seed);
    // Small thresholds so background flushes, WAL-limit closes and memory closes all happen
    // within the short life of the child.
    // Half the cycles use small log files, so that reclaimed ones are kept as spares and new
    // files start in them (over their old records) while the child is killed.
    let wal_file_bytes = if rng.chance(2) {
        64 << 10
    } else {
        DbOptions::default().wal_file_bytes
    };
    let opts = DbOptions {
        flush_threshold_bytes: 48 << 10,
        wal_limit_bytes: 256 << 10,
        catalog_memory_limit: 1 << 20,
        ttl_interval: None,
        wal_file_bytes,
        ..DbOptions::default()
    };
    let db = match Database::open_with(&dir, opts) {
        Ok(db) => db,
        Err(e) => {
            println!("ERR open: {e}");
            return;
        }
    };
    let coll = match db.create_collection(&format!("c{cycle}"), ts_options()) {
        Ok(c) => c,
        Err(e) => {
            println!("ERR create: {e}");
            return;
        }
    };
    let threads = rng.range(2, 4) as i32;
    let deadline = Instant::now() + Duration::from_secs(30);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let coll = coll.clone();
            let db = db.clone();
            let mut rng = Rng::new(seed ^ (t as u64 + 1).wrapping_mul(0x5851_F42D_4C95_7F2D));
            let writer = cycle * 10 + t;
            std::thread::spawn(move || {
                let mut batch = 1i64;
                // A parent that died must not leave an immortal child behind.
                while Instant::now() < deadline {
                    let n = rng.range(1, 500) as usize;
                    let series = rng.range(1, 6);
                    let docs = batch_docs(writer, batch, n, series);
                    if let Err(e) = coll.insert_many(&docs) {
                        println!("ERR insert {writer} {batch}: {e}");
                        return;
                    }
                    {
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(out, "ACK {writer} {batch}");
                        let _ = out.flush();
                    }
                    batch += 1;
                    if t == 0 && rng.chance(20) {
                        if let Err(e) = db.flush() {
                            println!("ERR flush: {e}");
                            return;
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
}

/// Runs one child for `delay`, kills it with SIGKILL, and returns its acknowledged batches
/// (last batch per writer) and anything it reported as an error.
fn run_and_kill(
    dir: &std::path::Path,
    seed: u64,
    cycle: u64,
    delay: Duration,
) -> (BTreeMap<i32, i64>, Vec<String>) {
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .args(["--exact", CHILD_TEST, "--nocapture", "--test-threads=1"])
        .env(DIR_VAR, dir)
        .env("TSBUCKET_CHILD_SEED", seed.to_string())
        .env("TSBUCKET_CHILD_CYCLE", cycle.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    // Read while the child runs so it never blocks on a full pipe.
    let reader = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    std::thread::sleep(delay);
    // SIGKILL on Unix: no destructor, no flush, no close runs in the child.
    let _ = child.kill();
    let _ = child.wait();
    let lines = reader.join().unwrap();
    let stderr = err_reader.join().unwrap();
    let mut acked: BTreeMap<i32, i64> = BTreeMap::new();
    let mut errors = Vec::new();
    for line in &lines {
        // The test harness may print on the same line before our output.
        if let Some(p) = line.find("ACK ") {
            let mut it = line[p + 4..].split_whitespace();
            let w: i32 = it.next().unwrap().parse().unwrap();
            let b: i64 = it.next().unwrap().parse().unwrap();
            let last = acked.entry(w).or_insert(0);
            assert_eq!(b, *last + 1, "writer {w} acknowledged out of order");
            *last = b;
        } else if let Some(p) = line.find("ERR ") {
            errors.push(line[p..].to_string());
        }
    }
    if stderr.contains("panicked") {
        errors.push(format!("child panicked: {stderr}"));
    }
    (acked, errors)
}

/// What a killed child left in the log: spare files, and log files started in a spare (a
/// nonzero salt in the header, bytes 24..28).
fn reused_log_files(dir: &std::path::Path) -> (usize, usize) {
    let Ok(entries) = std::fs::read_dir(dir.join("wal")) else {
        return (0, 0);
    };
    let (mut spares, mut salted) = (0, 0);
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".free") {
            spares += 1;
        } else if name.ends_with(".log") {
            let head = std::fs::read(e.path()).unwrap_or_default();
            if head.get(24..28).is_some_and(|s| s != [0, 0, 0, 0]) {
                salted += 1;
            }
        }
    }
    (spares, salted)
}

#[test]
fn kill9_at_random_moments_never_loses_acked_batches_nor_exposes_partial_ones() {
    if std::env::var(DIR_VAR).is_ok() {
        return;
    }
    let cycles = count_from_env("TSBUCKET_KILL_CYCLES", 15);
    let seed = seed_from_env(0x6b_696c_6c39);
    eprintln!("kill9: {cycles} cycles, TSBUCKET_SEED={seed}");
    let mut rng = Rng::new(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    // Per cycle's collection: what the check after that cycle found, and its document count.
    let mut found: BTreeMap<u64, (common::Present, u64)> = BTreeMap::new();
    let mut total_acked = 0usize;
    let (mut spares_seen, mut salted_seen) = (0, 0);
    for cycle in 1..=cycles {
        let delay = Duration::from_millis(rng.range(20, 1500));
        let child_seed = rng.next_u64();
        let (acked, errors) = run_and_kill(&dir, child_seed, cycle, delay);
        let ctx = format!("cycle {cycle} (delay {delay:?}, child seed {child_seed})");
        let (spares, salted) = reused_log_files(&dir);
        spares_seen += spares;
        salted_seen += salted;
        assert!(errors.is_empty(), "{ctx}: the child reported {errors:?}");
        total_acked += acked.values().map(|&b| b as usize).sum::<usize>();

        let t0 = Instant::now();
        let db = Database::open(&dir).unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
        db.verify()
            .unwrap_or_else(|e| panic!("{ctx}: verify failed: {e}"));
        let t_open = t0.elapsed();
        match db.collection(&format!("c{cycle}")) {
            Ok(c) => {
                let docs = read_all(&c).unwrap_or_else(|e| panic!("{ctx}: read failed: {e}"));
                let present = check_batches(&docs, &acked, &ctx).unwrap_or_else(|e| panic!("{e}"));
                // A writer has at most one batch in flight.
                for (w, k) in &present {
                    let last = acked.get(w).copied().unwrap_or(0);
                    assert!(
                        *k <= last + 1,
                        "{ctx}: writer {w} has {k} batches, acked {last}"
                    );
                }
                found.insert(cycle, (present, docs.len() as u64));
            }
            Err(Error::NamespaceNotFound(_)) => {
                assert!(
                    acked.is_empty(),
                    "{ctx}: collection lost with acked batches"
                );
            }
            Err(e) => panic!("{ctx}: {e}"),
        }
        // Earlier cycles' data must neither shrink nor grow.
        for (old, (_, n)) in &found {
            let c = db.collection(&format!("c{old}")).unwrap();
            assert_eq!(
                c.count_documents(doc! {}).unwrap(),
                *n,
                "{ctx}: cycle {old}'s data changed"
            );
        }
        // Liveness: new writes are acknowledged and survive a clean reopen (checked next cycle).
        let live = db.create_collection("live", ts_options()).unwrap();
        let before = live.count_documents(doc! {}).unwrap();
        live.insert_many(&batch_docs(0, cycle as i64, 2, 1))
            .unwrap();
        assert_eq!(live.count_documents(doc! {}).unwrap(), before + 2);
        assert_eq!(before, 2 * (cycle - 1), "{ctx}: liveness batches lost");
        // Sometimes flush what recovery rebuilt: it exercises writing replayed rows to
        // segments (the next recovery must not replay them twice) and keeps the log, and so
        // the replay time of later cycles, bounded.
        if rng.chance(3) {
            db.flush()
                .unwrap_or_else(|e| panic!("{ctx}: flush after recovery: {e}"));
        }
        db.close().unwrap();
        if std::env::var_os("TSBUCKET_VERBOSE").is_some() {
            eprintln!(
                "{ctx}: acked {acked:?}, reopen {t_open:?}, checks {:?}",
                t0.elapsed()
            );
        }
    }
    // A last full read of everything: exact equality with what each check found.
    let db = Database::open(&dir).unwrap();
    for (cycle, (present, _)) in &found {
        let c = db.collection(&format!("c{cycle}")).unwrap();
        let docs = read_all(&c).unwrap();
        let again = check_batches(&docs, present, "final").unwrap();
        assert_eq!(&again, present, "cycle {cycle}'s batches changed");
    }
    eprintln!(
        "kill9: {cycles} cycles, {total_acked} acked batches verified; after the kills the log \
         held {spares_seen} spare files and {salted_seen} files started in spares"
    );
    // Half the children use small log files: over this many kills some were killed after
    // starting files in spares, which is what that half is for.
    assert!(
        cycles < 10 || salted_seen > 0,
        "no child got to start a log file in a spare"
    );
    db.close().unwrap();
}
