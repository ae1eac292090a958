//! `Database::coll_mod`: MongoDB's collMod rules for time-series collections (listed in
//! `format-spec/ttl.md`, "collMod"), persistence (reopen, power loss, an I/O error at every
//! step), and queries across a coarsening.

mod common;

use common::mem_options;
use std::sync::Arc;
use tsbucket::bson::{doc, DateTime, Document};
use tsbucket::vfs::{CrashMode, FaultFs, Injected, MemFs};
use tsbucket::{CollMod, Database, DbOptions, Error, Granularity, TimeseriesOptions};

const GRANULARITY_MSG: &str = "Invalid transition for timeseries.granularity. Can only transition \
                               from 'seconds' to 'minutes' or 'minutes' to 'hours'.";

fn open(fs: &MemFs) -> Database {
    Database::open_with("/db", mem_options(fs)).unwrap()
}

fn options(db: &Database, name: &str) -> TimeseriesOptions {
    db.list_collections()
        .unwrap()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap()
        .options
}

fn code(r: tsbucket::Result<()>) -> Option<i32> {
    r.err().and_then(|e| e.code())
}

fn iso(s: &str) -> DateTime {
    DateTime::parse_rfc3339_str(s).unwrap()
}

/// The transition table: granularity only coarsens, with MongoDB's message and code 72.
#[test]
fn at12_granularity_may_only_coarsen() {
    let fs = MemFs::new();
    let db = open(&fs);
    db.create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    let g = |g| CollMod::default().granularity(g);
    db.coll_mod("c", g(Granularity::Minutes)).unwrap();
    assert_eq!(options(&db, "c").bucket_max_span_seconds(), 86_400);
    assert_eq!(options(&db, "c").bucket_rounding_seconds(), 3_600);
    let e = db.coll_mod("c", g(Granularity::Seconds)).unwrap_err();
    assert_eq!(e.code(), Some(72));
    assert!(
        matches!(&e, Error::InvalidOptions(m) if m == GRANULARITY_MSG),
        "{e}"
    );
    // The same granularity again is allowed and changes nothing.
    db.coll_mod("c", g(Granularity::Minutes)).unwrap();
    db.coll_mod("c", g(Granularity::Hours)).unwrap();
    assert_eq!(options(&db, "c").bucket_max_span_seconds(), 2_592_000);
    assert_eq!(
        options(&db, "c").get_granularity(),
        Some(Granularity::Hours)
    );
    for back in [Granularity::Minutes, Granularity::Seconds] {
        let e = db.coll_mod("c", g(back)).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidOptions(m) if m == GRANULARITY_MSG),
            "{e}"
        );
    }
    assert_eq!(
        options(&db, "c").get_granularity(),
        Some(Granularity::Hours)
    );

    // Custom spans after a granularity: both, equal, not smaller.
    db.coll_mod("c", CollMod::default().bucket_span(2_592_001, 2_592_001))
        .unwrap();
    let o = options(&db, "c");
    assert_eq!(
        o.get_granularity(),
        None,
        "custom spans remove the granularity"
    );
    assert_eq!(o.bucket_max_span_seconds(), 2_592_001);
    assert_eq!(o.bucket_rounding_seconds(), 2_592_001);
    for m in [
        CollMod::default().bucket_max_span_seconds(2_600_000),
        CollMod::default().bucket_rounding_seconds(2_600_000),
        CollMod::default().bucket_span(2_600_000, 2_600_001),
    ] {
        let e = db.coll_mod("c", m.clone()).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidOptions(s) if s.contains("must be equal to 'bucketMaxSpanSeconds'")),
            "{m:?}: {e}"
        );
    }
    let e = db
        .coll_mod("c", CollMod::default().bucket_span(2_592_000, 2_592_000))
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidOptions(s) if s == "Timeseries 'bucketMaxSpanSeconds' needs to be equal or greater to transition"),
        "{e}"
    );
    // Out of range is BadValue, as at creation.
    assert_eq!(
        code(db.coll_mod("c", CollMod::default().bucket_span(31_536_001, 31_536_001))),
        Some(2)
    );
    // From custom spans, a granularity whose span is smaller is refused.
    assert_eq!(code(db.coll_mod("c", g(Granularity::Hours))), Some(72));
    // `timeseries: {}` is a no-op.
    db.coll_mod("c", CollMod::default()).unwrap();
    assert_eq!(options(&db, "c").bucket_max_span_seconds(), 2_592_001);
    // Timeseries options together with another collMod option: 72, nothing changed.
    let e = db
        .coll_mod(
            "c",
            CollMod::default()
                .bucket_span(3_000_000, 3_000_000)
                .expire_after_seconds(Some(60)),
        )
        .unwrap_err();
    assert_eq!(e.code(), Some(72));
    let o = options(&db, "c");
    assert_eq!(o.bucket_max_span_seconds(), 2_592_001);
    assert_eq!(o.get_expire_after_seconds(), None);
}

#[test]
fn seconds_to_hours_in_one_step_and_custom_to_a_wider_granularity() {
    let fs = MemFs::new();
    let db = open(&fs);
    db.create_collection("a", TimeseriesOptions::new("t"))
        .unwrap();
    db.coll_mod("a", CollMod::default().granularity(Granularity::Hours))
        .unwrap();
    assert_eq!(
        options(&db, "a").get_granularity(),
        Some(Granularity::Hours)
    );
    // Custom 200/200 -> minutes: 86400 and 3600 are both >= 200.
    db.create_collection("b", TimeseriesOptions::new("t").bucket_span(200, 200))
        .unwrap();
    db.coll_mod("b", CollMod::default().granularity(Granularity::Minutes))
        .unwrap();
    let o = options(&db, "b");
    assert_eq!(o.get_granularity(), Some(Granularity::Minutes));
    assert_eq!(o.bucket_max_span_seconds(), 86_400);
    // Custom 7200/7200 -> minutes would shrink the rounding below 7200: refused.
    db.create_collection("d", TimeseriesOptions::new("t").bucket_span(7_200, 7_200))
        .unwrap();
    assert_eq!(
        code(db.coll_mod("d", CollMod::default().granularity(Granularity::Minutes))),
        Some(72)
    );
    // A granularity with a rounding, or with a span other than its default: 72 (as at
    // creation); with its default span alone it is just the granularity.
    let e = db
        .coll_mod(
            "a",
            CollMod::default()
                .granularity(Granularity::Hours)
                .bucket_span(2_592_000, 2_592_000),
        )
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidOptions(m) if m.contains("cannot be set alongside the granularity")),
        "{e}"
    );
    let e = db
        .coll_mod(
            "b",
            CollMod::default()
                .granularity(Granularity::Hours)
                .bucket_max_span_seconds(3_600),
        )
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidOptions(m) if m == "Timeseries 'bucketMaxSpanSeconds' cannot be set to a value other than the default of 2592000 for the provided granularity"),
        "{e}"
    );
    db.coll_mod(
        "b",
        CollMod::default()
            .granularity(Granularity::Hours)
            .bucket_max_span_seconds(2_592_000),
    )
    .unwrap();
    assert_eq!(
        options(&db, "b").get_granularity(),
        Some(Granularity::Hours)
    );
}

#[test]
fn expiry_is_set_checked_and_removed() {
    let fs = MemFs::new();
    let db = open(&fs);
    db.create_collection("c", TimeseriesOptions::new("t"))
        .unwrap();
    db.coll_mod("c", CollMod::default().expire_after_seconds(Some(60)))
        .unwrap();
    assert_eq!(options(&db, "c").get_expire_after_seconds(), Some(60));
    assert_eq!(
        code(db.coll_mod("c", CollMod::default().expire_after_seconds(Some(1 << 62)))),
        Some(72)
    );
    assert_eq!(options(&db, "c").get_expire_after_seconds(), Some(60));
    db.coll_mod("c", CollMod::default().expire_after_seconds(None))
        .unwrap();
    assert_eq!(options(&db, "c").get_expire_after_seconds(), None);
}

#[test]
fn a_missing_collection_is_namespace_not_found() {
    let fs = MemFs::new();
    let db = open(&fs);
    let e = db
        .coll_mod("nope", CollMod::default().expire_after_seconds(Some(1)))
        .unwrap_err();
    assert!(matches!(e, Error::NamespaceNotFound(_)), "{e}");
    assert_eq!(e.code(), Some(26));
}

#[test]
fn changes_survive_reopen_and_power_loss() {
    let fs = MemFs::new();
    let db = open(&fs);
    db.create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    db.coll_mod("c", CollMod::default().granularity(Granularity::Minutes))
        .unwrap();
    db.coll_mod("c", CollMod::default().expire_after_seconds(Some(3600)))
        .unwrap();
    let want = TimeseriesOptions::new("t")
        .meta_field("m")
        .granularity(Granularity::Minutes)
        .expire_after_seconds(3600);
    assert_eq!(options(&db, "c"), want);
    // Acknowledged means durable: the power-loss image has it.
    let img = fs.crash();
    drop(db);
    for image in [img, fs.clone()] {
        let db = open(&image);
        assert_eq!(options(&db, "c"), want);
        db.close().unwrap();
    }
}

/// An I/O error at every file-system operation of a collMod: the call fails or succeeds, and
/// every power-loss image holds the old options or (only if it may have committed) the new ones.
#[test]
fn an_io_error_at_every_step_leaves_old_or_new_options() {
    let base = MemFs::new();
    {
        let db = open(&base);
        db.create_collection("c", TimeseriesOptions::new("t"))
            .unwrap();
        db.close().unwrap();
    }
    let old = TimeseriesOptions::new("t");
    let new = TimeseriesOptions::new("t").granularity(Granularity::Hours);
    let mut k = 0;
    loop {
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
        fault.fail_nth(k + 1, false, Injected::Eio);
        let res = db.coll_mod("c", CollMod::default().granularity(Granularity::Hours));
        let injected = fault.injected_count() > 0;
        if res.is_ok() {
            assert_eq!(options(&db, "c"), new);
        } else {
            assert_eq!(
                options(&db, "c"),
                old,
                "a failed collMod changed the handle"
            );
        }
        drop(db);
        fault.disarm();
        for mode in [
            CrashMode::DropUnsynced,
            CrashMode::KeepPrefix,
            CrashMode::Random,
        ] {
            for image in [mem.crash_with(mode, k), mem.crash_with_dir_entries(mode, k)] {
                let db = open(&image);
                let o = options(&db, "c");
                if res.is_ok() {
                    assert_eq!(o, new, "op {k}");
                } else {
                    assert!(o == old || o == new, "op {k}: {o:?}");
                }
                db.close().unwrap();
            }
        }
        if !injected {
            break;
        }
        k += 1;
    }
    assert!(k > 2, "collMod did too little I/O to test: {k}");
}

fn ts(db: &Database) -> Vec<i64> {
    let mut v: Vec<i64> = db
        .collection("c")
        .unwrap()
        .find(doc! {})
        .unwrap()
        .map(|d| d.unwrap().get_datetime("t").unwrap().timestamp_millis())
        .collect();
    v.sort();
    v
}

fn insert(db: &Database, times: &[&str]) {
    let docs: Vec<Document> = times
        .iter()
        .map(|t| doc! {"t": iso(t), "m": 1, "x": 1})
        .collect();
    db.collection("c").unwrap().insert_many(&docs).unwrap();
}

fn bucket_count(db: &Database) -> usize {
    db.collection("c").unwrap().buckets(doc! {}).unwrap().len()
}

fn count_after(db: &Database, t: &str) -> u64 {
    db.collection("c")
        .unwrap()
        .count_documents(doc! {"t": {"$gt": iso(t)}})
        .unwrap()
}

/// Behaviour after seconds -> minutes, as in MongoDB: new data joins the still-open bucket
/// under the new span, and a time-range query uses the new, larger span. Run with the first
/// bucket in memory and with it flushed to a segment before the change.
#[test]
fn at12_new_data_joins_open_buckets_and_queries_use_the_new_span() {
    for flush_first in [false, true] {
        let ctx = format!("flush before collMod: {flush_first}");
        let fs = MemFs::new();
        let db = open(&fs);
        db.create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
            .unwrap();
        insert(
            &db,
            &[
                "2021-04-22T20:00:00Z",
                "2021-04-22T20:00:03Z",
                "2021-04-22T20:00:59.999Z",
                "2021-04-22T20:59:59.999Z",
            ],
        );
        assert_eq!(bucket_count(&db), 1, "{ctx}");
        if flush_first {
            db.flush().unwrap();
        }
        insert(&db, &["2021-04-22T21:00:00Z"]);
        assert_eq!(bucket_count(&db), 2, "{ctx}");
        db.coll_mod("c", CollMod::default().granularity(Granularity::Minutes))
            .unwrap();
        insert(
            &db,
            &[
                "2021-04-23T20:00:00Z",
                "2021-04-23T20:22:02Z",
                "2021-04-23T20:59:59.999Z",
            ],
        );
        assert_eq!(
            bucket_count(&db),
            2,
            "{ctx}: they join the open 21:00 bucket"
        );
        let raw = db.collection("c").unwrap().buckets(doc! {}).unwrap();
        let newest = raw
            .iter()
            .map(|b| {
                b.get_document("control")
                    .and_then(|c| c.get_document("min"))
                    .and_then(|m| m.get_datetime("t"))
                    .unwrap()
                    .timestamp_millis()
            })
            .max()
            .unwrap();
        assert_eq!(
            newest,
            iso("2021-04-22T21:00:00Z").timestamp_millis(),
            "{ctx}: the open bucket keeps its start"
        );
        insert(&db, &["2021-04-23T21:00:00Z"]);
        assert_eq!(bucket_count(&db), 3, "{ctx}");
        assert_eq!(count_after(&db, "2021-04-23T19:00:00Z"), 4, "{ctx}");
        let found = db
            .collection("c")
            .unwrap()
            .find(doc! {"t": {"$gt": iso("2021-04-23T19:00:00Z")}})
            .unwrap()
            .count();
        assert_eq!(found, 4, "{ctx}");
        // Across the change: the old, narrower bucket and the widened ones.
        assert_eq!(count_after(&db, "2021-04-22T20:30:00Z"), 6, "{ctx}");
        let all = ts(&db);
        assert_eq!(all.len(), 9, "{ctx}");
        db.flush().unwrap();
        assert_eq!(count_after(&db, "2021-04-23T19:00:00Z"), 4, "{ctx}");
        assert_eq!(count_after(&db, "2021-04-22T20:30:00Z"), 6, "{ctx}");
        db.close().unwrap();
        let db = open(&fs);
        assert_eq!(ts(&db), all, "{ctx}");
        assert_eq!(count_after(&db, "2021-04-23T19:00:00Z"), 4, "{ctx}");
        db.verify().unwrap();
    }
}

/// Open buckets replayed from the log after a coarsening take the new parameters; whatever
/// bucket they land in, every measurement is back and queries find them.
#[test]
fn replay_after_a_coarsening_keeps_every_measurement() {
    let fs = MemFs::new();
    let db = open(&fs);
    db.create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    insert(&db, &["2021-04-22T20:00:00Z", "2021-04-22T21:30:00Z"]);
    db.coll_mod("c", CollMod::default().granularity(Granularity::Hours))
        .unwrap();
    insert(&db, &["2021-05-10T00:00:00Z"]);
    let all = ts(&db);
    drop(db);
    let db = open(&fs.crash());
    assert_eq!(ts(&db), all);
    assert_eq!(count_after(&db, "2021-04-22T21:00:00Z"), 2);
    db.verify().unwrap();
}
