//! A stress run against an expected state, killed with SIGKILL over and over: a child process
//! (this test binary, re-executed) runs several inserting threads, a thread of meta updates and
//! deletes, a thread of TTL sweeps and collMods, a flushing thread and a thread of read-only
//! snapshots beside the writer, with small log files and flush thresholds so that log
//! rotation, spare-file reuse and background flushes happen all the time. It reports each
//! operation on stdout only once it returned `Ok`, and an update or delete also when it
//! begins. The parent kills it at a random moment, reopens the directory and checks the
//! database against the state the reports imply:
//!
//! - every acknowledged insert is present exactly once, no batch is partly present, and a
//!   writer's batches form a prefix with at most the one in flight beyond its last report;
//! - every acknowledged update and delete is applied to all of its series, one in flight to
//!   all or none of it;
//! - counts and groupings answered by the engine equal a brute-force pass over the documents;
//! - a read-only snapshot taken by the child agreed with itself the same way (reported as an
//!   error otherwise), and one taken by the parent agrees with the writer;
//! - the database verifies, earlier cycles' data is unchanged, and new writes are taken.
//!
//! CI runs it for about half a minute (`TSBUCKET_STRESS_SECS`, default 25). For hours, in release:
//! `TSBUCKET_STRESS_SECS=36000 cargo test --release --test stress -- --nocapture`.
//! `TSBUCKET_STRESS_MAX_MS` bounds a child's life (default 900 ms; shorter gives more kills an
//! hour). `TSBUCKET_STRESS_CYCLES` ends the run early once that many cycles have passed.
//! `TSBUCKET_SEED` replays a run.

mod common;

use common::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::{CollMod, Database, DbOptions, Error, TimeseriesOptions};

const CHILD_TEST: &str = "stress_child";
const DIR_VAR: &str = "TSBUCKET_STRESS_DIR";
/// The writer number of the series that are updated and deleted.
const VICTIM_WRITER: i32 = 100;

fn child_options(small_files: bool) -> DbOptions {
    DbOptions {
        flush_threshold_bytes: 24 << 10,
        wal_limit_bytes: 192 << 10,
        wal_file_bytes: if small_files { 48 << 10 } else { 1 << 20 },
        wal_spare_files: 2,
        catalog_memory_limit: 512 << 10,
        ttl_interval: None,
        ..DbOptions::default()
    }
}

/// Prints one report line at once: the parent may kill the child right after.
fn report(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Batch `j` of the updated and deleted series: `n` documents, all with meta `{host: "v<j>"}`.
fn victim_docs(j: i64, n: usize) -> Vec<Document> {
    (0..n)
        .map(|i| {
            doc! {
                TIME: DateTime::from_millis(BASE_MS + j * 1_000 + i as i64),
                META: {"host": format!("v{j}"), "dc": 0},
                "writer": VICTIM_WRITER,
                "batch": j,
                "n": n as i32,
                "i": i as i32,
                "v": j as f64 + i as f64 * 0.25,
            }
        })
        .collect()
}

/// Checks a snapshot against itself: counts and a grouping from the engine against a pass
/// over every document. Returns the documents of collection `coll`.
fn self_consistent(db: &Database, coll: &str) -> Result<Vec<Document>, String> {
    let c = db.collection(coll).map_err(|e| e.to_string())?;
    let docs = read_all(&c).map_err(|e| format!("find: {e}"))?;
    let n = c.count_documents(doc! {}).map_err(|e| e.to_string())?;
    if n != docs.len() as u64 {
        return Err(format!("count {n}, find returned {}", docs.len()));
    }
    let late = c
        .count_documents(doc! {"batch": {"$gte": 5_i64}})
        .map_err(|e| e.to_string())?;
    let brute = docs
        .iter()
        .filter(|d| d.get_i64("batch").is_ok_and(|b| b >= 5))
        .count() as u64;
    if late != brute {
        return Err(format!("count of batch >= 5: {late}, brute force {brute}"));
    }
    let cut = DateTime::from_millis(BASE_MS + 200_000);
    let early = c
        .count_documents(doc! {TIME: {"$lt": cut}})
        .map_err(|e| e.to_string())?;
    let brute = docs
        .iter()
        .filter(|d| d.get_datetime(TIME).is_ok_and(|t| *t < cut))
        .count() as u64;
    if early != brute {
        return Err(format!("count of time < cut: {early}, brute force {brute}"));
    }
    let groups = c
        .aggregate(vec![
            doc! {"$group": {"_id": "$writer", "n": {"$sum": 1}, "s": {"$sum": "$i"}}},
        ])
        .map_err(|e| e.to_string())?
        .collect::<tsbucket::Result<Vec<Document>>>()
        .map_err(|e| e.to_string())?;
    let mut got: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    for g in groups {
        let w = g.get_i32("_id").map_err(|e| format!("{e} in {g}"))?;
        let num = |k: &str| match g.get(k) {
            Some(Bson::Int32(x)) => Ok(i64::from(*x)),
            Some(Bson::Int64(x)) => Ok(*x),
            other => Err(format!("{k} = {other:?} in {g}")),
        };
        got.insert(w, (num("n")?, num("s")?));
    }
    let mut want: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    for d in &docs {
        let e = want.entry(d.get_i32("writer").unwrap_or(-1)).or_default();
        e.0 += 1;
        e.1 += i64::from(d.get_i32("i").unwrap_or(0));
    }
    if got != want {
        return Err(format!("$group by writer {got:?}, brute force {want:?}"));
    }
    Ok(docs)
}

fn running(deadline: Instant, stop: &AtomicBool) -> bool {
    Instant::now() < deadline && !stop.load(Ordering::Relaxed)
}

/// Not a test of its own: the body of the child process. Without `TSBUCKET_STRESS_DIR` (a
/// normal test run) it returns at once.
#[test]
fn stress_child() {
    let Ok(dir) = std::env::var(DIR_VAR) else {
        return;
    };
    let seed = count_from_env("TSBUCKET_STRESS_CHILD_SEED", 1);
    let cycle = count_from_env("TSBUCKET_STRESS_CYCLE", 1) as i32;
    let mut rng = Rng::new(seed);
    let db = match Database::open_with(&dir, child_options(rng.chance(2))) {
        Ok(db) => db,
        Err(e) => return report(&format!("ERR open: {e}")),
    };
    let names = [
        format!("c{cycle}"),
        format!("v{cycle}"),
        format!("t{cycle}"),
    ];
    let ttl_opts = ts_options().expire_after_seconds(3600);
    let mut colls = Vec::new();
    for (name, opts) in names.iter().zip([ts_options(), ts_options(), ttl_opts]) {
        match db.create_collection(name, opts) {
            Ok(c) => colls.push(c),
            Err(e) => return report(&format!("ERR create {name}: {e}")),
        }
    }
    report("CREATED");
    // A parent that died must not leave an immortal child behind.
    let deadline = Instant::now() + Duration::from_secs(30);
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    let writers = rng.range(2, 3) as i32;
    for t in 0..writers {
        let (coll, stop) = (colls[0].clone(), stop.clone());
        let mut rng = Rng::new(seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        handles.push(std::thread::spawn(move || {
            let writer = cycle * 10 + t;
            let mut batch = 1i64;
            while running(deadline, &stop) {
                let docs = batch_docs(writer, batch, rng.range(1, 300) as usize, rng.range(1, 8));
                if let Err(e) = coll.insert_many(&docs) {
                    return report(&format!("ERR insert {writer} {batch}: {e}"));
                }
                report(&format!("ACK {writer} {batch}"));
                batch += 1;
            }
        }));
    }
    {
        // Updates and deletes of whole series, each on a series of its own.
        let (coll, stop) = (colls[1].clone(), stop.clone());
        let mut rng = Rng::new(seed ^ 0xDE1E7E);
        handles.push(std::thread::spawn(move || {
            let mut j = 1i64;
            while running(deadline, &stop) {
                if let Err(e) = coll.insert_many(&victim_docs(j, rng.range(1, 40) as usize)) {
                    return report(&format!("ERR victim insert {j}: {e}"));
                }
                report(&format!("VICTIM {j}"));
                let host = format!("v{j}");
                match rng.range(0, 2) {
                    0 => {
                        report(&format!("BEGIN-DEL {j}"));
                        if let Err(e) = coll.delete_many(doc! {"m.host": &host}) {
                            return report(&format!("ERR delete {j}: {e}"));
                        }
                        report(&format!("DEL {j}"));
                    }
                    1 => {
                        report(&format!("BEGIN-UPD {j}"));
                        let set = doc! {"$set": {"m.host": format!("u{j}")}};
                        if let Err(e) = coll.update_many(doc! {"m.host": &host}, set) {
                            return report(&format!("ERR update {j}: {e}"));
                        }
                        report(&format!("UPD {j}"));
                    }
                    _ => {}
                }
                j += 1;
            }
        }));
    }
    {
        // Expired and live data, sweeps and collMods of the expiry.
        let (coll, stop, db) = (colls[2].clone(), stop.clone(), db.clone());
        let name = names[2].clone();
        let mut rng = Rng::new(seed ^ 0x77_1C);
        handles.push(std::thread::spawn(move || {
            let mut b = 1i64;
            while running(deadline, &stop) {
                // Half the batches lie a day in the past: expired under an hour's expiry.
                let old = rng.chance(2);
                let mut docs = batch_docs(cycle, b, rng.range(1, 50) as usize, 3);
                if !old {
                    let now = DateTime::now().timestamp_millis();
                    for (k, d) in docs.iter_mut().enumerate() {
                        d.insert(TIME, DateTime::from_millis(now + k as i64));
                    }
                }
                if let Err(e) = coll.insert_many(&docs) {
                    return report(&format!("ERR ttl insert {b}: {e}"));
                }
                b += 1;
                if rng.chance(4) {
                    if let Err(e) = db.sweep_expired(DateTime::now()) {
                        return report(&format!("ERR sweep: {e}"));
                    }
                }
                if rng.chance(8) {
                    let secs = if rng.chance(2) { 3600 } else { 7200 };
                    let m = CollMod::default().expire_after_seconds(Some(secs));
                    if let Err(e) = db.coll_mod(&name, m) {
                        return report(&format!("ERR collMod: {e}"));
                    }
                }
            }
        }));
    }
    {
        let (db, stop) = (db.clone(), stop.clone());
        let mut rng = Rng::new(seed ^ 0xF1_05);
        handles.push(std::thread::spawn(move || {
            while running(deadline, &stop) {
                std::thread::sleep(Duration::from_millis(rng.range(5, 80)));
                if let Err(e) = db.flush() {
                    return report(&format!("ERR flush: {e}"));
                }
            }
        }));
    }
    {
        // Snapshots beside the writer, each checked against itself.
        let (stop, dir, name) = (stop.clone(), dir.clone(), names[0].clone());
        handles.push(std::thread::spawn(move || {
            while running(deadline, &stop) {
                std::thread::sleep(Duration::from_millis(20));
                let r = match Database::open_read_only(&dir) {
                    Ok(r) => r,
                    Err(e) => return report(&format!("ERR read-only open: {e}")),
                };
                // Before the collection is created there is nothing to check.
                if r.collection(&name).is_ok() {
                    if let Err(e) = self_consistent(&r, &name) {
                        return report(&format!("ERR snapshot: {e}"));
                    }
                }
                if let Err(e) = r.refresh() {
                    return report(&format!("ERR refresh: {e}"));
                }
            }
        }));
    }
    for h in handles {
        let _ = h.join();
    }
    stop.store(true, Ordering::Relaxed);
}

/// What a child reported before it was killed.
#[derive(Default, Debug)]
struct Reports {
    created: bool,
    /// Last acknowledged batch per writer.
    acked: BTreeMap<i32, i64>,
    /// Victim series inserted, and updates and deletes begun and acknowledged.
    victims: BTreeSet<i64>,
    del_begun: BTreeSet<i64>,
    deleted: BTreeSet<i64>,
    upd_begun: BTreeSet<i64>,
    updated: BTreeSet<i64>,
    errors: Vec<String>,
}

fn parse(lines: &[String]) -> Reports {
    let mut r = Reports::default();
    for line in lines {
        let num = |tag: &str| -> Option<i64> {
            let p = line.find(tag)?;
            line[p + tag.len()..].trim().parse().ok()
        };
        if let Some(p) = line.find("ERR ") {
            r.errors.push(line[p..].to_string());
        } else if line.contains("CREATED") {
            r.created = true;
        } else if let Some(p) = line.find("ACK ") {
            let mut it = line[p + 4..].split_whitespace();
            let (Some(w), Some(b)) = (it.next(), it.next()) else {
                continue;
            };
            let (w, b): (i32, i64) = (w.parse().unwrap(), b.parse().unwrap());
            let last = r.acked.entry(w).or_insert(0);
            assert_eq!(b, *last + 1, "writer {w} acknowledged out of order");
            *last = b;
        } else if let Some(j) = num("VICTIM ") {
            r.victims.insert(j);
        } else if let Some(j) = num("BEGIN-DEL ") {
            r.del_begun.insert(j);
        } else if let Some(j) = num("BEGIN-UPD ") {
            r.upd_begun.insert(j);
        } else if let Some(j) = num("DEL ") {
            r.deleted.insert(j);
        } else if let Some(j) = num("UPD ") {
            r.updated.insert(j);
        }
    }
    r
}

fn run_child(dir: &Path, seed: u64, cycle: u64, delay: Duration) -> Vec<String> {
    let env = [
        ("TSBUCKET_STRESS_CHILD_SEED", seed.to_string()),
        ("TSBUCKET_STRESS_CYCLE", cycle.to_string()),
    ];
    run_child_with_env_until_killed(CHILD_TEST, DIR_VAR, dir, &env, delay)
}

/// The victim series against the reports: each insert, update and delete all or nothing,
/// and everything reported done.
fn check_victims(docs: &[Document], r: &Reports, ctx: &str) {
    let mut by_batch: HashMap<i64, Vec<&Document>> = HashMap::new();
    for d in docs {
        by_batch
            .entry(d.get_i64("batch").unwrap())
            .or_default()
            .push(d);
    }
    let last = r.victims.iter().max().copied().unwrap_or(0);
    for (&j, ds) in &by_batch {
        assert!(j <= last + 1, "{ctx}: victim series {j} was never begun");
        let n = ds[0].get_i32("n").unwrap() as usize;
        assert_eq!(ds.len(), n, "{ctx}: victim series {j} is partial");
        let hosts: BTreeSet<&str> = ds
            .iter()
            .map(|d| d.get_document(META).unwrap().get_str("host").unwrap())
            .collect();
        assert_eq!(hosts.len(), 1, "{ctx}: series {j} half updated: {hosts:?}");
        let host = *hosts.iter().next().unwrap();
        assert!(!r.deleted.contains(&j), "{ctx}: deleted series {j} is back");
        if r.updated.contains(&j) {
            assert_eq!(host, format!("u{j}"), "{ctx}: update of {j} lost");
        } else if !r.upd_begun.contains(&j) {
            assert_eq!(host, format!("v{j}"), "{ctx}: series {j} changed unasked");
        }
    }
    for &j in &r.victims {
        if !r.del_begun.contains(&j) {
            assert!(
                by_batch.contains_key(&j),
                "{ctx}: acknowledged series {j} lost"
            );
        }
    }
}

#[test]
fn stress_against_an_expected_state_with_kill9() {
    if std::env::var(DIR_VAR).is_ok() {
        return;
    }
    let secs = count_from_env("TSBUCKET_STRESS_SECS", 25);
    // Shorter lives give more kills an hour; longer ones more flushes and rotations each.
    let max_ms = count_from_env("TSBUCKET_STRESS_MAX_MS", 900).max(31);
    let max_cycles = count_from_env("TSBUCKET_STRESS_CYCLES", u64::MAX);
    let seed = seed_from_env(0x5757_2e55);
    eprintln!("stress: {secs} s, TSBUCKET_SEED={seed}");
    let mut rng = Rng::new(seed);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let end = Instant::now() + Duration::from_secs(secs);
    // Per cycle still kept: its collections' document counts.
    let mut kept: BTreeMap<u64, [u64; 3]> = BTreeMap::new();
    let (mut cycles, mut acked_batches, mut ops) = (0u64, 0u64, 0u64);
    let mut live = 0u64;
    while Instant::now() < end && cycles < max_cycles {
        cycles += 1;
        let cycle = cycles;
        let delay = Duration::from_millis(rng.range(30, max_ms));
        let child_seed = rng.next_u64();
        let lines = run_child(&dir, child_seed, cycle, delay);
        let r = parse(&lines);
        let ctx = format!("cycle {cycle} (delay {delay:?}, child seed {child_seed})");
        assert!(
            r.errors.is_empty(),
            "{ctx}: the child reported {:?}",
            r.errors
        );
        acked_batches += r.acked.values().sum::<i64>() as u64;
        ops += (r.deleted.len() + r.updated.len()) as u64;

        let db = Database::open_with(&dir, DbOptions::default())
            .unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
        db.verify()
            .unwrap_or_else(|e| panic!("{ctx}: verify failed: {e}"));
        let names = [
            format!("c{cycle}"),
            format!("v{cycle}"),
            format!("t{cycle}"),
        ];
        let mut counts = [0u64; 3];
        if r.created {
            let docs = self_consistent(&db, &names[0]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let present = check_batches(&docs, &r.acked, &ctx).unwrap_or_else(|e| panic!("{e}"));
            for (w, k) in &present {
                let last = r.acked.get(w).copied().unwrap_or(0);
                assert!(*k <= last + 1, "{ctx}: writer {w} has {k}, acked {last}");
            }
            counts[0] = docs.len() as u64;
            let docs = self_consistent(&db, &names[1]).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            check_victims(&docs, &r, &ctx);
            counts[1] = docs.len() as u64;
            // Sweeps delete whole buckets: no batch rule, but nothing twice.
            let docs = read_all(&db.collection(&names[2]).unwrap()).unwrap();
            let ids: BTreeSet<String> = docs
                .iter()
                .map(|d| d.get_object_id("_id").unwrap().to_hex())
                .collect();
            assert_eq!(
                ids.len(),
                docs.len(),
                "{ctx}: a swept collection has duplicates"
            );
            counts[2] = docs.len() as u64;
            kept.insert(cycle, counts);
        } else {
            for n in &names {
                if let Ok(c) = db.collection(n) {
                    assert_eq!(c.count_documents(doc! {}).unwrap(), 0, "{ctx}: {n}");
                }
            }
        }
        // A snapshot beside the writer sees what it sees.
        let snap = Database::open_read_only(&dir).unwrap();
        for (name, n) in names.iter().zip(counts) {
            if r.created {
                let c = snap.collection(name).unwrap();
                assert_eq!(
                    c.count_documents(doc! {}).unwrap(),
                    n,
                    "{ctx}: snapshot of {name}"
                );
            }
        }
        snap.close().unwrap();
        // Earlier cycles' data neither shrinks nor grows (the swept collections may shrink:
        // their data keeps expiring).
        for (old, n) in &kept {
            let names = [format!("c{old}"), format!("v{old}"), format!("t{old}")];
            for k in 0..2 {
                let c = db.collection(&names[k]).unwrap();
                assert_eq!(
                    c.count_documents(doc! {}).unwrap(),
                    n[k],
                    "{ctx}: {}'s data changed",
                    names[k]
                );
            }
            let t = db.collection(&names[2]).unwrap();
            assert!(t.count_documents(doc! {}).unwrap() <= n[2]);
        }
        // Old cycles are dropped now and then, to keep each cycle's checks short.
        if kept.len() > 6 {
            let (&old, _) = kept.iter().next().unwrap();
            for n in [format!("c{old}"), format!("v{old}"), format!("t{old}")] {
                assert!(db.drop_collection(&n).unwrap(), "{ctx}: drop {n}");
            }
            kept.remove(&old);
        }
        // New writes are acknowledged and kept.
        let l = match db.collection("live") {
            Ok(l) => l,
            Err(Error::NamespaceNotFound(_)) => db
                .create_collection("live", TimeseriesOptions::new(TIME).meta_field(META))
                .unwrap(),
            Err(e) => panic!("{ctx}: {e}"),
        };
        assert_eq!(l.count_documents(doc! {}).unwrap(), live, "{ctx}: liveness");
        l.insert_many(&batch_docs(0, cycle as i64, 2, 1)).unwrap();
        live += 2;
        db.close().unwrap();
        if cycle % 500 == 0 {
            eprintln!("stress: {cycle} cycles, {acked_batches} acknowledged batches so far");
        }
    }
    eprintln!(
        "stress: {cycles} kill -9 cycles, {acked_batches} acknowledged batches, {ops} updates \
         and deletes acknowledged; no loss, no partial batch, no wrong answer"
    );
    assert!(cycles >= 3, "too few cycles to mean anything");
}
