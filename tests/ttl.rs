//! TTL: `expireAfterSeconds`, `Database::sweep_expired` and the background sweeper. A bucket is
//! deleted once its latest measurement (`control.max` of the time field) is older than now −
//! expireAfterSeconds; never while it holds a younger one (`format-spec/ttl.md`). Includes
//! MongoDB's expiry cases (one of which tsbucket deletes earlier than MongoDB) and crash tests
//! (power loss and I/O errors at every step of a sweep).

mod common;

use common::mem_options;
use std::sync::Arc;
use std::time::Duration;
use tsbucket::bson::{doc, DateTime, Document};
use tsbucket::vfs::{FaultFs, Injected, MemFs, Vfs};
use tsbucket::{CollMod, Database, DbOptions, ManualClock, SweepResult, TimeseriesOptions};

/// 2024-01-01T00:30:00Z: half-way through a seconds-granularity bucket.
const NOW: i64 = 1_704_069_000_000;
const MIN: i64 = 60_000;

fn at(ms: i64) -> DateTime {
    DateTime::from_millis(ms)
}

fn ttl_options(expire: u64) -> TimeseriesOptions {
    TimeseriesOptions::new("t")
        .meta_field("m")
        .expire_after_seconds(expire)
}

fn open(fs: &MemFs) -> Database {
    Database::open_with("/db", mem_options(fs)).unwrap()
}

fn seg_files(fs: &MemFs) -> Vec<String> {
    let mut v = fs.list_dir(std::path::Path::new("/db/seg")).unwrap();
    v.sort();
    v
}

fn docs(series: &str, times: &[i64]) -> Vec<Document> {
    times
        .iter()
        .map(|&t| doc! {"t": at(t), "m": series, "v": t})
        .collect()
}

fn count(db: &Database, series: &str) -> u64 {
    db.collection("c")
        .unwrap()
        .count_documents(doc! {"m": series})
        .unwrap()
}

fn total(db: &Database) -> u64 {
    db.collection("c")
        .unwrap()
        .count_documents(doc! {})
        .unwrap()
}

fn buckets(db: &Database) -> usize {
    db.collection("c").unwrap().buckets(doc! {}).unwrap().len()
}

/// A measurement from now keeps its bucket, and the older one in it.
#[test]
fn at15_a_bucket_with_a_fresh_measurement_is_kept() {
    for flushed in [false, true] {
        let fs = MemFs::new();
        let db = open(&fs);
        let c = db.create_collection("c", ttl_options(5)).unwrap();
        c.insert_many(&docs("host", &[NOW - 5 * MIN, NOW])).unwrap();
        if flushed {
            db.flush().unwrap();
        }
        let r = db.sweep_expired(at(NOW)).unwrap();
        assert_eq!(r.buckets_deleted, 0);
        assert_eq!((total(&db), buckets(&db)), (2, 1));
    }
}

/// Older than the expiry but within the bucket's span. MongoDB keeps these (it waits for bucket
/// start + span + expireAfterSeconds); tsbucket uses the bucket's actual latest time
/// (`format-spec/ttl.md`, "The rule"), so both measurements being older than 5 s is enough.
#[test]
fn at15_b_all_older_than_the_expiry_but_within_the_span_is_deleted_by_control_max() {
    let fs = MemFs::new();
    let db = open(&fs);
    let c = db.create_collection("c", ttl_options(5)).unwrap();
    c.insert_many(&docs("host", &[NOW - 10 * MIN, NOW - 10_000]))
        .unwrap();
    // One millisecond later than the youngest measurement's expiry: kept.
    let r = db.sweep_expired(at(NOW - 5_000)).unwrap();
    assert_eq!(r.buckets_deleted, 0);
    assert_eq!(total(&db), 2);
    let r = db.sweep_expired(at(NOW)).unwrap();
    assert_eq!((r.buckets_deleted, r.measurements_deleted), (1, 2));
    assert_eq!((total(&db), buckets(&db)), (0, 0));
}

/// An hour-old bucket: max = now − 3600 s, min = max − 5 min: 0 documents, 0 buckets.
#[test]
fn at15_c_an_hour_old_bucket_is_deleted() {
    let fs = MemFs::new();
    let db = open(&fs);
    let c = db.create_collection("c", ttl_options(5)).unwrap();
    let max = NOW - 3_600_000;
    c.insert_many(&docs("host", &[max - 5 * MIN, max])).unwrap();
    db.flush().unwrap();
    let r = db.sweep_expired(at(NOW)).unwrap();
    assert_eq!((r.buckets_deleted, r.measurements_deleted), (1, 2));
    assert_eq!((total(&db), buckets(&db)), (0, 0));
    assert!(r.bytes_reclaimed > 0);
    assert!(seg_files(&fs).is_empty(), "{:?}", seg_files(&fs));
}

/// Expiry added later by collMod, then expiry happens.
#[test]
fn at15_expiry_added_by_coll_mod_takes_effect() {
    let fs = MemFs::new();
    let db = open(&fs);
    let c = db
        .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    c.insert_many(&docs("host", &[NOW - 2 * 3_600_000]))
        .unwrap();
    assert_eq!(db.sweep_expired(at(NOW)).unwrap(), SweepResult::default());
    db.coll_mod("c", CollMod::default().expire_after_seconds(Some(60)))
        .unwrap();
    assert_eq!(db.sweep_expired(at(NOW)).unwrap().buckets_deleted, 1);
    assert_eq!(total(&db), 0);
    // Removing the expiry stops it.
    db.coll_mod("c", CollMod::default().expire_after_seconds(None))
        .unwrap();
    c.insert_many(&docs("host", &[NOW - 2 * 3_600_000]))
        .unwrap();
    assert_eq!(db.sweep_expired(at(NOW)).unwrap().buckets_deleted, 0);
    assert_eq!(total(&db), 1);
}

/// The boundary, open and flushed: a bucket whose latest measurement is exactly
/// expireAfterSeconds old survives; one millisecond later it goes.
#[test]
fn a_bucket_one_millisecond_too_young_survives() {
    for flushed in [false, true] {
        let fs = MemFs::new();
        let clock = Arc::new(ManualClock::new(at(NOW)));
        let db = open(&fs);
        let c = db.create_collection("c", ttl_options(60)).unwrap();
        c.insert_many(&docs("a", &[NOW - 30_000, NOW])).unwrap();
        if flushed {
            db.flush().unwrap();
        }
        clock.set(at(NOW + 60_000));
        assert_eq!(db.sweep_expired(clock.now_dt()).unwrap().buckets_deleted, 0);
        assert_eq!(total(&db), 2, "flushed: {flushed}");
        clock.set(at(NOW + 60_001));
        let r = db.sweep_expired(clock.now_dt()).unwrap();
        assert_eq!((r.buckets_deleted, r.measurements_deleted), (1, 2));
        assert_eq!(total(&db), 0, "flushed: {flushed}");
    }
}

trait NowDt {
    fn now_dt(&self) -> DateTime;
}
impl NowDt for ManualClock {
    fn now_dt(&self) -> DateTime {
        tsbucket::Clock::now(self)
    }
}

/// Several series in one segment, expiring at different times: queries, counts, explain, raw
/// buckets and stats agree after every sweep and after a reopen; the file goes only when all
/// its buckets have.
#[test]
fn partly_expired_segments_hide_their_expired_buckets_until_wholly_expired() {
    let fs = MemFs::new();
    let db = open(&fs);
    let c = db.create_collection("c", ttl_options(0)).unwrap();
    // Series "s<k>" ends at NOW + k minutes.
    for k in 0..4 {
        c.insert_many(&docs(&format!("s{k}"), &[NOW - MIN, NOW + k * MIN]))
            .unwrap();
    }
    c.insert_many(&docs("young", &[NOW + 50 * MIN])).unwrap();
    db.flush().unwrap();
    let files = seg_files(&fs);
    assert_eq!(files.len(), 1);
    let check = |db: &Database, live: &[&str], ctx: &str| {
        let c = db.collection("c").unwrap();
        let n = 2 * (live.len() as u64 - 1) + 1;
        assert_eq!(c.count_documents(doc! {}).unwrap(), n, "{ctx}");
        assert_eq!(
            c.count_documents(doc! {"v": {"$gte": NOW - 2 * MIN}})
                .unwrap(),
            n,
            "{ctx}"
        );
        let found: Vec<Document> = c.find(doc! {}).unwrap().map(|d| d.unwrap()).collect();
        assert_eq!(found.len() as u64, n, "{ctx}");
        for d in &found {
            assert!(live.contains(&d.get_str("m").unwrap()), "{ctx}: {d}");
        }
        assert_eq!(c.buckets(doc! {}).unwrap().len(), live.len(), "{ctx}");
        let ex = c.explain(doc! {"v": {"$gte": 0}}).unwrap();
        assert_eq!(ex.buckets_total, live.len() as u64, "{ctx}");
        assert_eq!(ex.buckets_examined, live.len() as u64, "{ctx}");
        let s = c.stats().unwrap();
        assert_eq!(s.buckets, live.len() as u64, "{ctx}");
        assert_eq!(s.flushed_buckets, live.len() as u64, "{ctx}");
        assert_eq!(s.measurements, n, "{ctx}");
        let agg: Vec<Document> = c
            .aggregate(vec![doc! {"$group": {"_id": "$m", "n": {"$sum": 1}}}])
            .unwrap()
            .map(|d| d.unwrap())
            .collect();
        assert_eq!(agg.len(), live.len(), "{ctx}");
        db.verify().unwrap();
    };
    check(&db, &["s0", "s1", "s2", "s3", "young"], "before");
    // Cutoff NOW + 90 s: s0 and s1 are wholly older.
    let r = db.sweep_expired(at(NOW + 90_000)).unwrap();
    assert_eq!((r.buckets_deleted, r.measurements_deleted), (2, 4));
    assert_eq!(r.bytes_reclaimed, 0, "the segment still has live buckets");
    assert_eq!(seg_files(&fs), files);
    check(&db, &["s2", "s3", "young"], "after the first sweep");
    // Sweeping again at the same time deletes nothing more.
    assert_eq!(
        db.sweep_expired(at(NOW + 90_000)).unwrap(),
        SweepResult::default()
    );
    db.close().unwrap();
    let db = open(&fs);
    check(&db, &["s2", "s3", "young"], "after reopen");
    let size = fs
        .file_len(&std::path::Path::new("/db/seg").join(&files[0]))
        .unwrap();
    let r = db.sweep_expired(at(NOW + 60 * MIN)).unwrap();
    assert_eq!((r.buckets_deleted, r.measurements_deleted), (3, 5));
    assert_eq!(r.bytes_reclaimed, size);
    assert!(seg_files(&fs).is_empty());
    assert_eq!(total(&db), 0);
    assert_eq!(db.collection("c").unwrap().stats().unwrap().segments, 0);
    db.verify().unwrap();
    db.close().unwrap();
    let db = open(&fs);
    assert_eq!(total(&db), 0);
    db.verify().unwrap();
}

/// An expired bucket that was still open when it was swept must not come back from the log,
/// even while another open bucket pins the log so the checkpoint cannot pass its rows.
#[test]
fn the_log_cannot_resurrect_a_swept_open_bucket() {
    let fs = MemFs::new();
    let db = open(&fs);
    let c = db.create_collection("c", ttl_options(60)).unwrap();
    // "young" is logged first, so its open bucket holds the oldest unflushed log record.
    c.insert_many(&docs("young", &[NOW])).unwrap();
    c.insert_many(&docs("old", &[NOW - 10 * MIN, NOW - 9 * MIN]))
        .unwrap();
    let r = db.sweep_expired(at(NOW)).unwrap();
    assert_eq!((r.buckets_deleted, r.measurements_deleted), (1, 2));
    assert_eq!(r.bytes_reclaimed, 0, "the log still names the swept rows");
    assert_eq!(seg_files(&fs).len(), 1);
    assert_eq!((count(&db, "old"), count(&db, "young")), (0, 1));
    drop((c, db));
    for image in [fs.crash(), fs.clone()] {
        let db = open(&image);
        assert_eq!((count(&db, "old"), count(&db, "young")), (0, 1));
        db.verify().unwrap();
        db.close().unwrap();
    }
    let db = open(&fs);
    db.flush().unwrap();
    let r = db.sweep_expired(at(NOW)).unwrap();
    assert_eq!(r.buckets_deleted, 0);
    assert!(
        r.bytes_reclaimed > 0,
        "once the checkpoint passed, the file goes"
    );
    assert_eq!(seg_files(&fs).len(), 1, "only young's segment is left");
    db.close().unwrap();
    let db = open(&fs);
    assert_eq!((count(&db, "old"), count(&db, "young")), (0, 1));
}

/// The background sweeper uses the database's clock and stops at close.
#[test]
fn the_background_sweeper_deletes_with_the_database_clock() {
    let fs = MemFs::new();
    let clock = Arc::new(ManualClock::new(at(NOW)));
    let opts = DbOptions {
        ttl_interval: Some(Duration::from_millis(5)),
        ..mem_options(&fs)
    }
    .clock(clock.clone());
    let db = Database::open_with("/db", opts).unwrap();
    let c = db.create_collection("c", ttl_options(60)).unwrap();
    c.insert_many(&docs("a", &[NOW - 30_000])).unwrap();
    c.insert_many(&docs("b", &[NOW + 10 * MIN])).unwrap();
    // Not expired by the clock's time: the sweeper leaves it (checked after several rounds
    // would have run; the outcome, not the timing, is asserted).
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(total(&db), 2);
    clock.set(at(NOW + 31_000));
    let mut waited = 0;
    while count(&db, "a") != 0 {
        assert!(waited < 60_000, "the sweeper never ran");
        std::thread::sleep(Duration::from_millis(10));
        waited += 10;
    }
    assert_eq!(count(&db, "b"), 1);
    db.close().unwrap();
    let db = open(&fs);
    assert_eq!((count(&db, "a"), count(&db, "b")), (0, 1));
}

/// Builds a database with three flushed segments: one that a sweep at `NOW` deletes wholly,
/// one it deletes partly, one it keeps; plus an expired open bucket.
fn sweep_fixture(fs: &MemFs) -> Database {
    let db = open(fs);
    let c = db.create_collection("c", ttl_options(60)).unwrap();
    c.insert_many(&docs("w1", &[NOW - 20 * MIN, NOW - 19 * MIN]))
        .unwrap();
    c.insert_many(&docs("w2", &[NOW - 20 * MIN])).unwrap();
    db.flush().unwrap();
    c.insert_many(&docs("p1", &[NOW - 20 * MIN, NOW - 18 * MIN]))
        .unwrap();
    c.insert_many(&docs("p2", &[NOW - 20 * MIN, NOW + MIN]))
        .unwrap();
    db.flush().unwrap();
    c.insert_many(&docs("k1", &[NOW, NOW + 2 * MIN])).unwrap();
    db.flush().unwrap();
    c.insert_many(&docs("open", &[NOW - 30 * MIN])).unwrap();
    db
}

const SERIES: [(&str, u64, bool); 6] = [
    ("w1", 2, true),
    ("w2", 1, true),
    ("p1", 2, true),
    ("p2", 2, false),
    ("k1", 2, false),
    ("open", 1, true),
];

/// Every series (one bucket each) is wholly present or wholly gone; unexpired ones are
/// present; with `done`, expired ones are gone.
fn check_sweep_image(image: &MemFs, done: bool, ctx: &str) {
    let db = Database::open_with("/db", mem_options(image))
        .unwrap_or_else(|e| panic!("{ctx}: the image does not open: {e}"));
    db.verify().unwrap_or_else(|e| panic!("{ctx}: {e}"));
    for (s, n, expired) in SERIES {
        let got = count(&db, s);
        if expired && done {
            assert_eq!(got, 0, "{ctx}: {s}");
        } else if expired {
            assert!(got == 0 || got == n, "{ctx}: {s} has {got} of {n}");
        } else {
            assert_eq!(got, n, "{ctx}: {s}");
        }
    }
    // The sweep is repeatable on the image and finishes the job.
    db.sweep_expired(at(NOW)).unwrap();
    for (s, n, expired) in SERIES {
        assert_eq!(count(&db, s), if expired { 0 } else { n }, "{ctx}: {s}");
    }
    db.verify().unwrap();
    db.close().unwrap();
}

/// Power loss at every file-system operation of a sweep (FaultFs failing everything from
/// operation k on, then every crash image of what was left): each bucket is present or deleted,
/// the manifest never names a missing file, and a sweep that returned Ok is durable.
#[test]
fn a_crash_at_every_step_of_a_sweep_leaves_each_bucket_present_or_deleted() {
    let base = MemFs::new();
    drop(sweep_fixture(&base));
    let base = base.crash();
    // Count the sweep's operations on a healthy copy.
    let ops = {
        let mem = base.crash();
        let fault = FaultFs::new(Arc::new(mem.clone()));
        let db = Database::open_with(
            "/db",
            DbOptions {
                vfs: Arc::new(fault.clone()),
                ..mem_options(&mem)
            },
        )
        .unwrap();
        let before = fault.op_count();
        let r = db.sweep_expired(at(NOW)).unwrap();
        assert_eq!((r.buckets_deleted, r.measurements_deleted), (4, 6));
        assert!(r.bytes_reclaimed > 0);
        let n = fault.op_count() - before;
        db.close().unwrap();
        check_sweep_image(&mem, true, "healthy");
        n
    };
    assert!(ops > 3, "the sweep did too little I/O to test: {ops}");
    let mut images = 0;
    for k in 1..=ops + 1 {
        for (persistent, err) in [
            (true, Injected::Eio),
            (false, Injected::Eio),
            (false, Injected::NoSpace),
        ] {
            let mem = base.crash();
            let fault = FaultFs::new(Arc::new(mem.clone()));
            let db = Database::open_with(
                "/db",
                DbOptions {
                    vfs: Arc::new(fault.clone()),
                    ..mem_options(&mem)
                },
            )
            .unwrap();
            fault.fail_nth(k, persistent, err);
            let res = db.sweep_expired(at(NOW));
            if k <= ops {
                assert!(
                    fault.injected_count() > 0,
                    "op {k} of {ops} was not reached"
                );
            }
            let ctx = format!("fault at op {k} ({err:?}, persistent {persistent}): {res:?}");
            // What a live handle answers after the failure never shows a torn bucket.
            if res.is_ok() {
                for (s, _, expired) in SERIES {
                    if expired {
                        assert_eq!(count(&db, s), 0, "{ctx}: {s}");
                    }
                }
            }
            drop(db);
            fault.disarm();
            for (i, mode) in common::CRASH_MODES.iter().enumerate() {
                let seed = k * 31 + i as u64;
                check_sweep_image(&mem.crash_with(*mode, seed), res.is_ok(), &ctx);
                check_sweep_image(&mem.crash_with_dir_entries(*mode, seed), res.is_ok(), &ctx);
                images += 2;
            }
        }
    }
    assert!(images > 20);
}

/// Extended-range dates: before 1970 is expired; 2038 and 2106 are not. Five inserts,
/// three documents in three buckets remain.
#[test]
fn at15_extended_range_dates() {
    let fs = MemFs::new();
    let db = open(&fs);
    let c = db.create_collection("c", ttl_options(5)).unwrap();
    let times = [
        "1969-12-31T23:59:59Z",
        "1970-01-01T00:00:00Z",
        "2038-01-19T03:15:00Z",
        "2106-02-07T06:29:00Z",
    ];
    for t in times {
        c.insert_one(&doc! {"t": DateTime::parse_rfc3339_str(t).unwrap(), "m": "host"})
            .unwrap();
    }
    c.insert_one(&doc! {"t": at(NOW), "m": "host"}).unwrap();
    db.flush().unwrap();
    let r = db.sweep_expired(at(NOW)).unwrap();
    // The two measurements around the epoch share one bucket (starting 1969-12-31T23:59:00).
    assert_eq!((r.buckets_deleted, r.measurements_deleted), (1, 2));
    assert_eq!((total(&db), buckets(&db)), (3, 3));
    let left: Vec<i64> = c
        .find(doc! {})
        .unwrap()
        .map(|d| d.unwrap().get_datetime("t").unwrap().timestamp_millis())
        .collect();
    assert!(left.iter().all(|&t| t >= NOW), "{left:?}");
}

/// Sweeps running while other threads insert fresh and expired data: no fresh measurement is
/// lost, and after a final sweep no expired one is left.
#[test]
fn sweeps_run_alongside_inserts() {
    let fs = MemFs::new();
    let db = Database::open_with(
        "/db",
        DbOptions {
            flush_threshold_bytes: 2 << 10,
            ..mem_options(&fs)
        },
    )
    .unwrap();
    let c = db.create_collection("c", ttl_options(60)).unwrap();
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let c = c.clone();
            std::thread::spawn(move || {
                for i in 0..200i64 {
                    let series = format!("w{w}-{}", i % 7);
                    c.insert_many(&[
                        doc! {"t": at(NOW + i), "m": &series, "fresh": true},
                        doc! {"t": at(NOW - 3_600_000 + i), "m": &series, "fresh": false},
                    ])
                    .unwrap();
                }
            })
        })
        .collect();
    let mut deleted = 0;
    while !writers.iter().all(|w| w.is_finished()) {
        deleted += db.sweep_expired(at(NOW)).unwrap().measurements_deleted;
    }
    for w in writers {
        w.join().unwrap();
    }
    deleted += db.sweep_expired(at(NOW)).unwrap().measurements_deleted;
    assert_eq!(deleted, 400);
    assert_eq!(c.count_documents(doc! {"fresh": true}).unwrap(), 400);
    assert_eq!(c.count_documents(doc! {"fresh": false}).unwrap(), 0);
    db.verify().unwrap();
    drop((c, db));
    let db = open(&fs.crash());
    assert_eq!(total(&db), 400);
    db.verify().unwrap();
}

/// A manifest whose `expiredBuckets` names a bucket position the segment does not have is
/// reported as corruption of the manifest, not ignored.
#[test]
fn expired_buckets_beyond_a_segment_are_corruption() {
    use tsbucket::manifest::Manifest;
    let fs = MemFs::new();
    {
        let db = open(&fs);
        let c = db.create_collection("c", ttl_options(60)).unwrap();
        c.insert_many(&docs("a", &[NOW])).unwrap();
        db.flush().unwrap();
        db.close().unwrap();
    }
    let dir = std::path::Path::new("/db");
    let mut m = Manifest::load(&fs, dir).unwrap().unwrap();
    let sid = m.collections[0].segments[0];
    m.collections[0]
        .expired
        .insert(sid, std::collections::BTreeSet::from([5]));
    m.store(&fs, dir).unwrap();
    let e = Database::open_with("/db", mem_options(&fs)).unwrap_err();
    assert!(
        matches!(&e, tsbucket::Error::Corruption { .. }) && e.to_string().contains("MANIFEST"),
        "{e}"
    );
}

#[test]
fn a_meta_index_never_returns_swept_buckets() {
    let fs = MemFs::new();
    let db = open(&fs);
    let c = db.create_collection("c", ttl_options(3600)).unwrap();
    c.create_index(doc! {"m": 1}).unwrap();
    // Series "a": an old bucket (swept) and a recent one, in the same segment as "b"'s, so the
    // file stays while the old bucket is hidden.
    c.insert_many(&docs("a", &[NOW - 5 * 3600 * 1000, NOW - MIN]))
        .unwrap();
    c.insert_many(&docs("b", &[NOW - MIN])).unwrap();
    db.flush().unwrap();
    let r = db.sweep_expired(at(NOW)).unwrap();
    assert_eq!(r.buckets_deleted, 1);
    for filter in [doc! {"m": "a"}, doc! {"m": {"$in": ["a", "b"]}}] {
        let ex = c.explain(filter.clone()).unwrap();
        assert_eq!(ex.index_used.as_deref(), Some("m_1"), "{filter}");
        let found: Vec<_> = c
            .find(filter.clone())
            .unwrap()
            .map(|d| d.unwrap())
            .collect();
        assert!(
            found.iter().all(|d| d.get_i64("v").unwrap() == NOW - MIN),
            "{filter}: {found:?}"
        );
    }
    assert_eq!(count(&db, "a"), 1);
    db.close().unwrap();
    let db = open(&fs);
    assert_eq!(count(&db, "a"), 1);
    db.close().unwrap();
}
