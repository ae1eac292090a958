//! Simulated power loss on `MemFs`: after every acknowledged step of a workload (inserts,
//! explicit and background flushes, a second collection) the test builds every kind of crash
//! image (unsynced data dropped, kept as a random prefix, torn in its last sector, or
//! zero-extended; directory entries rolled back to their last sync, or all kept) and checks
//! that each opens with exactly the acknowledged batches, none partial, and takes new writes.
//! Then a power cut at every file-system operation of a scripted workload (FaultFs failing
//! everything from operation k on): the failing call returns `Err`, the database refuses later
//! writes without touching the disk, and every crash image of what was left recovers each
//! acknowledged batch exactly once.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tsbucket::bson::doc;
use tsbucket::vfs::{CrashMode, FaultFs, Injected, MemFs, Vfs};
use tsbucket::{Database, DbOptions, Error};

/// Small thresholds so the background flusher writes segments and reclaims the log between
/// the test's own steps.
fn busy_options(fs: &MemFs) -> DbOptions {
    DbOptions {
        flush_threshold_bytes: 4 << 10,
        wal_limit_bytes: 16 << 10,
        ..mem_options(fs)
    }
}

/// Crash images of what `mem` holds after a power cut at operation `k`: unsynced data dropped,
/// kept as a prefix, torn in its last sector, and at random with directory entries kept.
fn cut_images(mem: &MemFs, k: u64) -> [MemFs; 4] {
    [
        mem.crash(),
        mem.crash_with(CrashMode::KeepPrefix, k),
        mem.crash_with(CrashMode::TornSector, k),
        mem.crash_with_dir_entries(CrashMode::Random, k),
    ]
}

/// Opens `image`, checks its batches against `out` (see `check_outcome`), and (with `live`)
/// that it takes new writes.
fn check_image(image: &MemFs, out: &Outcome, ctx: &str, live: bool) {
    let db = Database::open_with("/db", mem_options(image))
        .unwrap_or_else(|e| panic!("{ctx}: the crash image does not open: {e}"));
    check_outcome(&db, out, ctx);
    db.close().unwrap();
    if live {
        check_liveness(image, "/db", mem_options);
    }
}

#[test]
fn every_crash_image_after_each_acknowledged_step_holds_exactly_the_acknowledged_batches() {
    let seed = seed_from_env(3);
    let seeds_per_mode = count_from_env("TSBUCKET_CRASH_SEEDS", 2);
    let steps = count_from_env("TSBUCKET_CRASH_STEPS", 40);
    let mut rng = Rng::new(seed);
    let fs = MemFs::new();
    let db = Database::open_with("/db", busy_options(&fs)).unwrap();
    let mut out = Outcome::default();
    let mut images = 0u64;
    for step in 0..steps {
        // The second collection appears part-way, so images before and after its creation exist.
        let action = if step == 0 {
            Step::Create("a", 1)
        } else if step == steps / 3 {
            Step::Create("b", 2)
        } else if rng.chance(8) {
            Step::Flush
        } else if out.created.contains_key("b") && rng.chance(3) {
            Step::Insert("b", rng.range(1, 60) as usize)
        } else {
            Step::Insert("a", rng.range(1, 60) as usize)
        };
        match &action {
            Step::Create(name, w) => {
                db.create_collection(name, ts_options()).unwrap();
                out.created.insert(name, *w);
            }
            Step::Insert(name, n) => {
                let b = out.acked.get(name).copied().unwrap_or(0) + 1;
                let docs = batch_docs(out.created[name], b, *n, 3);
                db.collection(name).unwrap().insert_many(&docs).unwrap();
                out.acked.insert(name, b);
            }
            Step::Flush => db.flush().unwrap(),
            _ => unreachable!(),
        }
        // The background flusher may be anywhere in its work: any moment is a crash moment.
        for (m, mode) in CRASH_MODES.iter().enumerate() {
            for s in 0..seeds_per_mode {
                for keep_entries in [false, true] {
                    let img_seed = seed ^ (step << 16) ^ (m as u64) << 8 ^ s;
                    let image = if keep_entries {
                        fs.crash_with_dir_entries(*mode, img_seed)
                    } else {
                        fs.crash_with(*mode, img_seed)
                    };
                    let ctx = format!(
                        "step {step} ({action:?}), {mode:?} seed {img_seed}, dir entries kept: {keep_entries}"
                    );
                    check_image(&image, &out, &ctx, s == 0);
                    images += 1;
                }
            }
        }
    }
    db.close().unwrap();
    eprintln!("power_loss: {steps} steps, {images} crash images verified (TSBUCKET_SEED={seed})");
}

#[test]
fn power_cut_at_every_operation_loses_no_acknowledged_batch() {
    let steps = standard_steps();
    let mut k = 1u64;
    let mut images = 0u64;
    loop {
        let mem = MemFs::new();
        let fault = FaultFs::new(Arc::new(mem.clone()));
        let opts = DbOptions {
            vfs: Arc::new(fault.clone()),
            ..mem_options(&mem)
        };
        // From operation k on the device is gone: every call fails, as after a power cut.
        fault.fail_nth(k, true, Injected::Eio);
        let mut out = run_steps(|| Database::open_with("/db", opts.clone()), &steps);
        let ctx = format!(
            "power cut at operation {k} ({:?})",
            out.failure.as_ref().map(|f| &f.1)
        );
        if out.failure.is_none() {
            assert_eq!(
                fault.injected_count(),
                0,
                "{ctx}: an injected error was swallowed"
            );
            break;
        }
        // What the disk holds at the moment of the cut, before anything else can run.
        let cut = cut_images(&mem, k);
        if let Some(db) = &out.db {
            // The failed write poisoned the database: with the fault gone it still refuses
            // writes, and refuses them without any I/O (no retry can vouch for lost data).
            fault.disarm();
            let before = fault.op_count();
            if let Some(name) = out.created.keys().next() {
                let c = db.collection(name).unwrap();
                let e = c.insert_many(&batch_docs(7, 1, 1, 1)).unwrap_err();
                assert!(
                    matches!(e, Error::Poisoned(_)),
                    "{ctx}: insert after failure: {e}"
                );
            }
            let e = db.flush().unwrap_err();
            assert!(
                matches!(e, Error::Poisoned(_)),
                "{ctx}: flush after failure: {e}"
            );
            assert_eq!(fault.op_count(), before, "{ctx}: a refused write did I/O");
        }
        drop(out.db.take());
        for (i, image) in cut.iter().enumerate() {
            check_image(image, &out, &format!("{ctx}, image {i}"), i == 0);
            images += 1;
        }
        k += 1;
    }
    eprintln!(
        "power_loss: power cut at each of {} operations, {images} images",
        k - 1
    );
    assert!(k > 50, "the workload should span many operations, saw {k}");
}

#[test]
fn crash_images_taken_while_three_writers_and_the_flusher_run_keep_every_acked_batch() {
    let fs = MemFs::new();
    let db = Database::open_with("/db", busy_options(&fs)).unwrap();
    let c = db.create_collection("a", ts_options()).unwrap();
    let acked: Arc<Mutex<BTreeMap<i32, i64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (1..=3)
        .map(|w| {
            let (c, acked, stop) = (c.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(w as u64);
                // Bounded, so the images (and their checks) stay small while writers race.
                let mut b = 1;
                while !stop.load(Ordering::Relaxed) && b <= 120 {
                    let n = rng.range(1, 20) as usize;
                    c.insert_many(&batch_docs(w, b, n, 3)).unwrap();
                    acked.lock().unwrap().insert(w, b);
                    b += 1;
                }
            })
        })
        .collect();
    // Images are taken while the writers run and checked afterwards, so the checks do not
    // slow the race down.
    let rounds = count_from_env("TSBUCKET_CONCURRENT_ROUNDS", 40);
    let mut taken = Vec::new();
    for round in 0..rounds {
        if writers.iter().all(|w| w.is_finished()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
        if round % 10 == 9 {
            db.flush().unwrap();
        }
        // Acknowledged before the image: must be in it. Acknowledged after: may be, one each.
        let before = acked.lock().unwrap().clone();
        let image = if round % 2 == 0 {
            fs.crash_with(CrashMode::Random, round)
        } else {
            fs.crash_with_dir_entries(CrashMode::Random, round)
        };
        let after = acked.lock().unwrap().clone();
        taken.push((round, before, image, after));
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    db.close().unwrap();
    let images = taken.len();
    assert!(
        images >= 10,
        "the writers finished before {images} images were taken"
    );
    for (round, before, image, after) in taken {
        let ctx = format!("image {round}");
        let db = Database::open_with("/db", mem_options(&image))
            .unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let docs = read_all(&db.collection("a").unwrap()).unwrap();
        db.verify()
            .unwrap_or_else(|e| panic!("{ctx}: verify failed: {e}"));
        let present = check_batches(&docs, &before, &ctx).unwrap_or_else(|e| panic!("{e}"));
        for (w, k) in &present {
            let last = after.get(w).copied().unwrap_or(0);
            assert!(
                *k <= last + 1,
                "{ctx}: writer {w} has 1..{k}, acked 1..{last}"
            );
        }
        db.close().unwrap();
    }
    eprintln!("power_loss: {images} images under concurrent ingest");
}

/// A crash image that gives recovery work: a torn log tail, unflushed open buckets, an orphan
/// segment and a stray manifest temporary; with what it must recover.
fn image_needing_recovery() -> (MemFs, Outcome) {
    let fs = MemFs::new();
    let steps = standard_steps();
    // Everything but the final close: the log keeps open buckets to replay.
    let mut out = run_steps(
        || Database::open_with("/db", mem_options(&fs)),
        &steps[..steps.len() - 1],
    );
    assert!(out.failure.is_none());
    let db = out.db.take().unwrap();
    // An unacknowledged, partly written batch: the crash image keeps a torn prefix of it.
    let wal_dir = std::path::Path::new("/db/wal");
    let mut names = fs.list_dir(wal_dir).unwrap();
    names.sort();
    let wal = wal_dir.join(names.last().unwrap());
    let mut f = fs.open_append(&wal, false).unwrap();
    f.append(&[0x5a; 700]).unwrap();
    drop(db);
    let img = fs.crash_with(CrashMode::TornSector, 11);
    // A complete segment the manifest does not list, as a crash between a flush's segment
    // rename and its manifest write leaves: a copy of a listed one, whose rows are elsewhere.
    let mut segs = img.list_dir(std::path::Path::new("/db/seg")).unwrap();
    segs.sort();
    let listed = img
        .read(&std::path::Path::new("/db/seg").join(&segs[0]))
        .unwrap();
    let seg = std::path::Path::new("/db/seg/00000000000000ee.seg");
    let mut f = img.open_append(seg, true).unwrap();
    f.append(&listed).unwrap();
    f.sync_data().unwrap();
    let mut f = img
        .open_append(std::path::Path::new("/db/MANIFEST.tmp"), true)
        .unwrap();
    f.append(b"torn").unwrap();
    f.sync_data().unwrap();
    img.sync_dir(std::path::Path::new("/db/seg")).unwrap();
    img.sync_dir(std::path::Path::new("/db")).unwrap();
    (img, out)
}

#[test]
fn crash_during_recovery_at_every_operation_then_again_still_recovers() {
    let (base, out) = image_needing_recovery();
    let mut k = 1;
    let mut images = 0;
    loop {
        // A copy of the base image, recovered on a device that dies at operation k.
        let img = base.crash();
        let fault = FaultFs::new(Arc::new(img.clone()));
        fault.fail_nth(k, true, Injected::Eio);
        let opts = DbOptions {
            vfs: Arc::new(fault.clone()),
            ..mem_options(&img)
        };
        match Database::open_with("/db", opts) {
            Ok(db) => {
                assert_eq!(
                    fault.injected_count(),
                    0,
                    "open at k={k} swallowed an error"
                );
                drop(db);
                break;
            }
            Err(e) => assert!(!matches!(e, Error::Corruption { .. }), "k={k}: {e}"),
        }
        for (i, first) in [
            img.crash(),
            img.crash_with_dir_entries(CrashMode::Random, k),
        ]
        .into_iter()
        .enumerate()
        {
            // A second crash during the second recovery, then a third recovery.
            let j = 1 + (k + i as u64) % 13;
            let fault2 = FaultFs::new(Arc::new(first.clone()));
            fault2.fail_nth(j, true, Injected::Eio);
            let opts = DbOptions {
                vfs: Arc::new(fault2),
                ..mem_options(&first)
            };
            let second = match Database::open_with("/db", opts) {
                Ok(db) => {
                    drop(db);
                    first.clone()
                }
                Err(_) => first.crash(),
            };
            for (what, image) in [("after one crash", &first), ("after two", &second)] {
                let ctx = format!("crash in recovery at op {k}, image {i}, then at op {j}: {what}");
                let db = Database::open_with("/db", mem_options(image))
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
                check_outcome(&db, &out, &ctx);
                db.close().unwrap();
                images += 1;
            }
        }
        k += 1;
    }
    eprintln!(
        "power_loss: crash in recovery at each of {} operations, {images} reopens",
        k - 1
    );
}

#[test]
fn dropped_collection_never_comes_back_in_any_crash_image() {
    let fs = MemFs::new();
    let db = Database::open_with("/db", mem_options(&fs)).unwrap();
    let old = db.create_collection("a", ts_options()).unwrap();
    old.insert_many(&batch_docs(1, 1, 30, 3)).unwrap();
    db.flush().unwrap();
    // Logged but not flushed: only the log holds it when the collection is dropped.
    old.insert_many(&batch_docs(1, 2, 10, 3)).unwrap();
    assert!(db.drop_collection("a").unwrap());
    // Same name, new collection: the old one's segments and log records must not leak in.
    let new = db.create_collection("a", ts_options()).unwrap();
    new.insert_many(&batch_docs(2, 1, 4, 1)).unwrap();
    let out = Outcome {
        created: std::collections::BTreeMap::from([("a", 2)]),
        acked: std::collections::BTreeMap::from([("a", 1)]),
        ..Outcome::default()
    };
    let mut images = 0;
    for mode in CRASH_MODES {
        for seed in 0..4 {
            for image in [
                fs.crash_with(mode, seed),
                fs.crash_with_dir_entries(mode, seed),
            ] {
                let ctx = format!("{mode:?} seed {seed}");
                check_image(&image, &out, &ctx, false);
                images += 1;
            }
        }
    }
    db.close().unwrap();
    eprintln!("power_loss: {images} images after drop and re-create");
}

#[test]
fn power_cut_at_every_operation_of_a_drop_leaves_the_collection_dropped_or_intact() {
    let mut k = 1u64;
    loop {
        let mem = MemFs::new();
        let fault = FaultFs::new(Arc::new(mem.clone()));
        let opts = DbOptions {
            vfs: Arc::new(fault.clone()),
            ..mem_options(&mem)
        };
        let db = Database::open_with("/db", opts).unwrap();
        let a = db.create_collection("a", ts_options()).unwrap();
        let b = db.create_collection("b", ts_options()).unwrap();
        a.insert_many(&batch_docs(1, 1, 30, 3)).unwrap();
        b.insert_many(&batch_docs(2, 1, 5, 1)).unwrap();
        db.flush().unwrap();
        // In the log only: the drop must discard these as well.
        a.insert_many(&batch_docs(1, 2, 10, 3)).unwrap();

        fault.fail_nth(k, true, Injected::Eio);
        let dropped = db.drop_collection("a");
        let ctx = format!("power cut at operation {k} of the drop ({dropped:?})");
        if dropped.is_ok() && fault.injected_count() == 0 {
            break;
        }
        drop(db);
        for (i, image) in [
            mem.crash(),
            mem.crash_with(CrashMode::KeepPrefix, k),
            mem.crash_with(CrashMode::TornSector, k),
            mem.crash_with_dir_entries(CrashMode::Random, k),
        ]
        .iter()
        .enumerate()
        {
            let ctx = format!("{ctx}, image {i}");
            let db = Database::open_with("/db", mem_options(image))
                .unwrap_or_else(|e| panic!("{ctx}: does not open: {e}"));
            let names = collection_names(&db);
            assert!(names.contains(&"b".to_string()), "{ctx}: {names:?}");
            assert_eq!(
                db.collection("b")
                    .unwrap()
                    .count_documents(doc! {})
                    .unwrap(),
                5,
                "{ctx}"
            );
            if names.contains(&"a".to_string()) {
                assert!(dropped.is_err(), "{ctx}: an acknowledged drop came back");
                let n = db
                    .collection("a")
                    .unwrap()
                    .count_documents(doc! {})
                    .unwrap();
                assert_eq!(n, 40, "{ctx}: the collection came back partly");
            }
            // No file of the dropped collection is left behind, and nothing else is damaged.
            db.verify().unwrap_or_else(|e| panic!("{ctx}: verify: {e}"));
            db.close().unwrap();
        }
        k += 1;
    }
    assert!(k > 3, "the drop should span several operations, saw {k}");
}

/// Log files of a few KiB and flush thresholds smaller still: within a short script the log
/// rotates many times, reclaimed files are kept as spares and new files start in them over
/// their old records, and the background flusher writes segments between the script's steps.
fn rotating_options(fs: &MemFs) -> DbOptions {
    DbOptions {
        wal_file_bytes: 3 << 10,
        wal_spare_files: 2,
        flush_threshold_bytes: 2 << 10,
        wal_limit_bytes: 8 << 10,
        ..mem_options(fs)
    }
}

/// Inserts of many sizes into two collections, with explicit flushes between them.
fn rotating_steps() -> Vec<Step> {
    let mut rng = Rng::new(seed_from_env(0x0707));
    let mut steps = vec![Step::Create("a", 1)];
    for i in 1..=36 {
        if i == 12 {
            steps.push(Step::Create("b", 2));
        }
        let name = if i > 12 && rng.chance(3) { "b" } else { "a" };
        steps.push(Step::Insert(name, rng.range(1, 24) as usize));
        if i % 11 == 0 {
            steps.push(Step::Flush);
        }
    }
    steps.push(Step::Close);
    steps
}

/// Spare files, and log files started in a spare (a nonzero salt, header bytes 24..28).
fn reused_log_files(fs: &MemFs) -> (usize, usize) {
    let wal = std::path::Path::new("/db/wal");
    let names = fs.list_dir(wal).unwrap_or_default();
    let spares = names.iter().filter(|n| n.ends_with(".free")).count();
    let salted = names
        .iter()
        .filter(|n| n.ends_with(".log"))
        .filter(|n| {
            let head = fs.read(&wal.join(n.as_str())).unwrap_or_default();
            head.get(24..28).is_some_and(|s| s != [0, 0, 0, 0])
        })
        .count();
    (spares, salted)
}

#[test]
fn power_cut_at_every_operation_across_rotation_spare_reuse_and_background_flushes() {
    let steps = rotating_steps();
    // The script does reach what this test is about: without a cut, the log rotates, keeps
    // spares and starts files in them.
    let mem = MemFs::new();
    let out = run_steps(
        || Database::open_with("/db", rotating_options(&mem)),
        &steps[..steps.len() - 1],
    );
    assert!(out.failure.is_none(), "{:?}", out.failure);
    let (spares, salted) = reused_log_files(&mem);
    assert!(
        spares + salted > 0,
        "the script never kept or reused a log file"
    );
    drop(out);

    let (mut k, mut images) = (1u64, 0u64);
    loop {
        let mem = MemFs::new();
        let fault = FaultFs::new(Arc::new(mem.clone()));
        let opts = DbOptions {
            vfs: Arc::new(fault.clone()),
            ..rotating_options(&mem)
        };
        fault.fail_nth(k, true, Injected::Eio);
        let mut out = run_steps(|| Database::open_with("/db", opts.clone()), &steps);
        let ctx = format!(
            "power cut at operation {k} ({:?})",
            out.failure.as_ref().map(|f| &f.1)
        );
        if out.failure.is_none() && fault.injected_count() == 0 {
            break;
        }
        // The background flusher may have taken the failure: then a later step reports it,
        // or none did and the close does.
        let cut = cut_images(&mem, k);
        drop(out.db.take());
        for (i, image) in cut.iter().enumerate() {
            check_image(image, &out, &format!("{ctx}, image {i}"), i == 0);
            images += 1;
        }
        k += 1;
    }
    eprintln!(
        "power_loss: power cut at each of {} operations across log rotation, {images} images",
        k - 1
    );
    assert!(k > 120, "the workload should span many operations, saw {k}");
}
