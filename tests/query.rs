//! Reads through the public API: bucket pruning as `explain` reports it on a known layout,
//! counts, projection, sort, skip and limit, and time-ordered reads that stop early.

use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::query::Filter;
use tsbucket::{Collection, Database, Explain, FindOptions, TimeseriesOptions};

const MIN: i64 = 60_000;
const HOUR: i64 = 3_600_000;

fn base() -> i64 {
    DateTime::parse_rfc3339_str("2024-01-01T00:00:00Z")
        .unwrap()
        .timestamp_millis()
}

fn t(ms: i64) -> DateTime {
    DateTime::from_millis(ms)
}

/// Hosts `a` and `b`, ten hours of one measurement a minute (`b` 30 s after `a`), in buckets
/// of exactly one hour: twenty buckets of sixty rows. `v` is `hour * 100 + minute`; `w` is in
/// every row of host `a`'s first three hours and in every other row of its fourth.
fn layout_docs() -> Vec<Document> {
    let mut docs = Vec::new();
    for h in 0..10i64 {
        for m in 0..60i64 {
            for (host, off) in [("a", 0), ("b", 30_000)] {
                let mut d = doc! {
                    "t": t(base() + h * HOUR + m * MIN + off),
                    "m": {"host": host},
                    "v": (h * 100 + m) as i32,
                };
                if host == "a" && (h < 3 || (h == 3 && m % 2 == 0)) {
                    d.insert("w", m as i32);
                }
                docs.push(d);
            }
        }
    }
    docs
}

fn layout(db: &Database) -> Collection {
    let c = db
        .create_collection(
            "c",
            TimeseriesOptions::new("t")
                .meta_field("m")
                .bucket_span(3600, 3600),
        )
        .unwrap();
    c.insert_many(&layout_docs()).unwrap();
    c
}

fn all(c: &Collection, f: Document) -> Vec<Document> {
    c.find(f).unwrap().map(|d| d.unwrap()).collect()
}

fn find(c: &Collection, f: Document, o: FindOptions) -> Vec<Document> {
    c.find_with(f, o).unwrap().map(|d| d.unwrap()).collect()
}

/// (pruned by `_id`, pruned by statistics, taken whole, unpacked). Buckets a meta lookup left
/// out count with those pruned by statistics: both were decided by the meta value, by the
/// lookup once a query asks for the same meta path a second time.
fn counts(e: &Explain) -> (u64, u64, u64, u64) {
    (
        e.buckets_pruned_by_id,
        e.buckets_pruned_by_stats + e.buckets_pruned_by_index,
        e.buckets_taken_whole,
        e.buckets_unpacked,
    )
}

#[test]
fn explain_counts_pruning_on_a_known_layout() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = layout(&db);
    let h = |n: i64| t(base() + n * HOUR);
    let half = t(base() + 5 * HOUR + 30 * MIN);
    // (filter, (by _id, by stats, whole, unpacked), matches)
    type Case = (Document, (u64, u64, u64, u64), u64);
    let cases: Vec<Case> = vec![
        (doc! {"t": {"$gte": h(5), "$lt": h(7)}}, (16, 0, 4, 0), 240),
        // Buckets starting up to a span before the bound can still hold matches.
        (doc! {"t": {"$gte": half}}, (10, 0, 8, 2), 540),
        (doc! {"t": {"$lt": h(0)}}, (20, 0, 0, 0), 0),
        (doc! {"v": {"$gte": 500}}, (0, 10, 10, 0), 600),
        (doc! {"v": {"$gt": 530, "$lt": 720}}, (0, 14, 2, 4), 218),
        (doc! {"m.host": "a", "v": {"$lt": 100}}, (0, 19, 1, 0), 60),
        (doc! {"w": {"$exists": true}}, (0, 16, 3, 1), 210),
        (doc! {"w": {"$exists": false}}, (0, 3, 16, 1), 990),
        (doc! {"w": {"$lt": 100}}, (0, 16, 3, 1), 210),
        (
            doc! {"$or": [{"v": {"$lt": 50}}, {"v": {"$gte": 950}}]},
            (0, 16, 0, 4),
            120,
        ),
        (
            doc! {"m.host": {"$ne": "a"}, "t": {"$lt": h(2)}},
            (16, 2, 2, 0),
            120,
        ),
    ];
    let check = |when: &str| {
        for (f, want, n) in &cases {
            let e = c.explain(f.clone()).unwrap();
            assert_eq!(e.buckets_total, 20, "{when} {f}");
            assert_eq!(counts(&e), *want, "{when} {f}: {e:?}");
            assert_eq!(
                e.buckets_examined,
                e.buckets_taken_whole + e.buckets_unpacked
            );
            assert_eq!(c.count_documents(f.clone()).unwrap(), *n, "{when} {f}");
            assert_eq!(all(&c, f.clone()).len() as u64, *n, "{when} {f}");
        }
    };
    // Buckets in memory and in segments are judged alike.
    check("in memory");
    db.flush().unwrap();
    check("flushed");
}

#[test]
fn counts_and_finds_agree_with_matching_every_document() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = layout(&db);
    db.flush().unwrap();
    // More rows after the flush: reads see segments and memory together.
    c.insert_many(&[
        doc! {"t": t(base() + 10 * HOUR), "m": {"host": "a"}, "v": "text", "w": [1, 2]},
        doc! {"t": t(base() + 10 * HOUR + 1), "m": {"host": "c"}, "v": f64::NAN},
        doc! {"t": t(base() + 10 * HOUR + 2), "m": {"host": "c"}, "v": Bson::Null},
    ])
    .unwrap();
    let everything = all(&c, doc! {});
    assert_eq!(everything.len(), 1203);
    for f in [
        doc! {"v": {"$gt": 930}},
        doc! {"v": {"$in": [5, 105, "text"]}},
        doc! {"v": {"$nin": [5, 105]}},
        doc! {"v": {"$ne": 100}},
        doc! {"v": null},
        doc! {"v": {"$lt": Bson::MaxKey}},
        doc! {"v": {"$gte": f64::NAN}},
        doc! {"v": {"$type_is_not_supported": 1}},
        doc! {"w": 2},
        doc! {"w": {"$not": {"$gt": 10}}},
        doc! {"m.host": {"$in": ["b", "c"]}, "v": {"$lte": 5}},
        doc! {"$nor": [{"m.host": "a"}, {"v": {"$gt": 100}}]},
        doc! {"m": {"host": "c"}},
    ] {
        let Ok(filter) = Filter::parse(&f) else {
            assert_eq!(c.count_documents(f.clone()).unwrap_err().code(), Some(2));
            continue;
        };
        let want = everything.iter().filter(|d| filter.matches(d)).count() as u64;
        assert_eq!(c.count_documents(f.clone()).unwrap(), want, "{f}");
        assert_eq!(all(&c, f.clone()).len() as u64, want, "{f}");
    }
}

#[test]
fn projection_follows_mongodb_id_rules() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = layout(&db);
    db.flush().unwrap();
    let f = doc! {"m.host": "a", "v": 3};
    let with = |p: Document| {
        find(
            &c,
            f.clone(),
            FindOptions {
                projection: Some(p),
                ..FindOptions::default()
            },
        )
    };
    let full = all(&c, f.clone());
    assert_eq!(full.len(), 1);
    let id = full[0].get("_id").unwrap().clone();
    let keys = |d: &Document| d.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&full[0]), ["_id", "t", "m", "v", "w"]);
    let only_v = with(doc! {"v": 1});
    assert_eq!(only_v, vec![doc! {"_id": id.clone(), "v": 3}]);
    assert_eq!(keys(&only_v[0]), ["_id", "v"]);
    assert_eq!(with(doc! {"v": 1, "_id": 0}), vec![doc! {"v": 3}]);
    assert_eq!(with(doc! {"_id": 1}), vec![doc! {"_id": id.clone()}]);
    assert_eq!(keys(&with(doc! {"_id": 0})[0]), ["t", "m", "v", "w"]);
    assert_eq!(keys(&with(doc! {"m": 0, "w": 0})[0]), ["_id", "t", "v"]);
    assert_eq!(
        with(doc! {"m.host": 1, "_id": false}),
        vec![doc! {"m": {"host": "a"}}]
    );
    // The filter reads `v` and `m` even though the projection leaves them out.
    assert_eq!(with(doc! {"w": 1, "_id": 0}), vec![doc! {"w": 3}]);
    assert_eq!(with(doc! {}), full);
    for bad in [
        doc! {"v": 1, "w": 0},
        doc! {"m": 1, "m.host": 1},
        doc! {"v": "x"},
    ] {
        let e = c
            .find_with(
                f.clone(),
                FindOptions {
                    projection: Some(bad.clone()),
                    ..FindOptions::default()
                },
            )
            .unwrap_err();
        assert_eq!(e.code(), Some(2), "{bad}");
    }
}

#[test]
fn sort_skip_and_limit_on_other_fields() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = layout(&db);
    let opts = |sort: Document, skip: u64, limit: i64| FindOptions {
        sort: Some(sort),
        skip: Some(skip),
        limit: Some(limit),
        projection: Some(doc! {"_id": 0, "v": 1, "w": 1}),
    };
    let got = find(&c, doc! {"m.host": "a"}, opts(doc! {"w": -1, "v": 1}, 1, 3));
    assert_eq!(
        got,
        vec![
            doc! {"v": 159, "w": 59},
            doc! {"v": 259, "w": 59},
            doc! {"v": 58, "w": 58}
        ]
    );
    // Missing sorts first ascending; a negative limit is its absolute value.
    let got = find(
        &c,
        doc! {"m.host": "a"},
        opts(doc! {"w": 1, "v": -1}, 0, -2),
    );
    assert_eq!(got, vec![doc! {"v": 959}, doc! {"v": 958}]);
    // Skip past everything, limit 0 (none).
    assert!(find(&c, doc! {}, opts(doc! {"v": 1}, 5000, 0)).is_empty());
    assert_eq!(find(&c, doc! {}, opts(doc! {"v": 1}, 1190, 0)).len(), 10);
    // Without a sort, skip and limit apply in storage order.
    let plain = FindOptions {
        skip: Some(100),
        limit: Some(7),
        ..FindOptions::default()
    };
    let everything = all(&c, doc! {});
    assert_eq!(find(&c, doc! {}, plain), everything[100..107].to_vec());
    let bad = FindOptions {
        sort: Some(doc! {"v": 2}),
        ..FindOptions::default()
    };
    assert_eq!(c.find_with(doc! {}, bad).unwrap_err().code(), Some(2));
}

/// 50 hosts, 6 hours of one measurement a minute each, host `i` at second `i` of the minute
/// (all times distinct): one bucket per host and hour, whose rows after the first arrive out
/// of order.
fn many_series(db: &Database) -> (Collection, Vec<Document>) {
    let c = db
        .create_collection("s", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    let mut docs = Vec::new();
    for h in 0..6i64 {
        let mut hour = Vec::new();
        for m in 0..60i64 {
            for host in 0..50i64 {
                hour.push(doc! {
                    "t": t(base() + h * HOUR + m * MIN + host * 1000),
                    "m": {"host": host as i32},
                    "v": (h * 60 + m) as i32,
                });
            }
        }
        // The hour's first minute opens the buckets; the other minutes follow shuffled.
        hour.sort_by_key(|d| {
            let m = d.get_i32("v").unwrap() % 60;
            (m != 0, (m * 7919) % 61)
        });
        docs.extend(hour);
    }
    (c, docs)
}

fn by_time(docs: &[Document], asc: bool) -> Vec<Document> {
    let mut v = docs.to_vec();
    v.sort_by_key(|d| d.get_datetime("t").unwrap().timestamp_millis());
    if !asc {
        v.reverse();
    }
    v
}

#[test]
fn time_sorted_reads_stream_and_stop_early() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let (c, docs) = many_series(&db);
    // Part of hour 4 is flushed: later rows of those series open new, overlapping buckets.
    let (first, rest) = docs.split_at(13_000);
    c.insert_many(first).unwrap();
    db.flush().unwrap();
    c.insert_many(rest).unwrap();
    let everything = all(&c, doc! {});
    assert_eq!(everything.len(), 18_000);
    let total = c.explain(doc! {}).unwrap().buckets_total;
    assert!(total >= 300, "{total}");
    let sorted = |f: Document, asc: bool, skip: u64, limit: i64| {
        let o = FindOptions {
            sort: Some(doc! {"t": if asc { 1 } else { -1 }}),
            skip: Some(skip),
            limit: Some(limit),
            ..FindOptions::default()
        };
        let mut cur = c.find_with(f, o).unwrap();
        let got: Vec<Document> = cur.by_ref().map(|d| d.unwrap()).collect();
        (got, cur.buckets_read())
    };
    // The latest ten: the last minute's ten latest hosts, from about as many buckets.
    let (latest, read) = sorted(doc! {}, false, 0, 10);
    assert_eq!(latest, by_time(&everything, false)[..10].to_vec());
    assert!(read <= 12, "read {read} of {total} buckets");
    let (page, read) = sorted(doc! {}, false, 20, 5);
    assert_eq!(page, by_time(&everything, false)[20..25].to_vec());
    assert!(read <= 30, "read {read} of {total} buckets");
    // Ascending: buckets share rounded starts, so the first hour is read, and no more.
    let (earliest, read) = sorted(doc! {}, true, 0, 10);
    assert_eq!(earliest, by_time(&everything, true)[..10].to_vec());
    assert!(read <= 51, "read {read} of {total} buckets");
    // With a filter, and without a limit: the whole match set in order.
    let f = doc! {"m.host": {"$in": [3, 17]}, "v": {"$gte": 100, "$lt": 250}};
    let filter = Filter::parse(&f).unwrap();
    let want: Vec<Document> = everything
        .iter()
        .filter(|d| filter.matches(d))
        .cloned()
        .collect();
    assert_eq!(sorted(f.clone(), true, 0, 0).0, by_time(&want, true));
    assert_eq!(sorted(f, false, 0, 0).0, by_time(&want, false));
}

#[test]
fn plain_finds_stop_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let (c, docs) = many_series(&db);
    c.insert_many(&docs).unwrap();
    db.flush().unwrap();
    let o = FindOptions {
        skip: Some(130),
        limit: Some(5),
        ..FindOptions::default()
    };
    let mut cur = c.find_with(doc! {"v": {"$gte": 0}}, o).unwrap();
    assert_eq!(cur.by_ref().count(), 5);
    // Buckets taken whole are skipped by their counts; only the one holding the page is read.
    assert_eq!(cur.buckets_read(), 1);
}

/// A long scan's rows are written (or built as documents) by worker threads, bucket stretch by
/// stretch: the same documents in the same order as on one thread, with skips, limits,
/// projections, flushed and in-memory buckets, and reads that take documents and BSON in turn.
#[test]
fn rows_written_on_threads_are_what_one_thread_writes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(dir.path()).unwrap();
        let (c, docs) = many_series(&db);
        let (first, rest) = docs.split_at(12_000);
        c.insert_many(first).unwrap();
        db.flush().unwrap();
        c.insert_many(rest).unwrap();
        db.close().unwrap();
    }
    let finds = [
        (doc! {}, FindOptions::default()),
        (
            doc! {"v": {"$gte": 100, "$lt": 300}},
            FindOptions {
                skip: Some(333),
                limit: Some(2_000),
                projection: Some(doc! {"_id": 0, "t": 1, "m.host": 1}),
                ..FindOptions::default()
            },
        ),
        (
            doc! {"m.host": {"$gte": 7}},
            FindOptions {
                limit: Some(3),
                ..FindOptions::default()
            },
        ),
    ];
    // How a read takes its documents: all as BSON, every third as a `Document`, or every
    // third as BSON (the first as a `Document`, so that workers build documents).
    let read = |threads: usize, mixed: u8| {
        let opts = tsbucket::DbOptions {
            query_threads: threads,
            ..tsbucket::DbOptions::default()
        };
        let db = Database::open_with(dir.path(), opts).unwrap();
        let c = db.collection("s").unwrap();
        let mut out = Vec::new();
        for (f, o) in &finds {
            let mut cur = c.find_with(f.clone(), o.clone()).unwrap();
            let mut got: Vec<Document> = Vec::new();
            loop {
                let as_document = match mixed {
                    0 => false,
                    1 => got.len() % 3 == 2,
                    _ => got.len() % 3 != 2,
                };
                let d = if as_document {
                    cur.next().map(|d| d.unwrap())
                } else {
                    cur.next_raw()
                        .map(|r| Document::try_from(r.unwrap()).unwrap())
                };
                match d {
                    Some(d) => got.push(d),
                    None => break,
                }
            }
            out.push(got);
        }
        db.close().unwrap();
        out
    };
    let one = read(1, 0);
    assert_eq!(one[0].len(), 18_000);
    assert_eq!(one[1].len(), 2_000);
    assert_eq!(one[2].len(), 3);
    for threads in [2, 3] {
        assert_eq!(read(threads, 0), one, "{threads} threads");
        assert_eq!(read(threads, 1), one, "{threads} threads, mixed reads");
        assert_eq!(read(threads, 2), one, "{threads} threads, documents first");
    }
}

/// Thousands of series whose meta values never repeat, as seed 004's one-off rows: the
/// planner stops sharing meta verdicts across segments once sharing mostly misses, and must
/// judge every bucket the same either way. Series `0..1500` come back in a third file, so
/// that some values do repeat.
#[test]
fn meta_verdicts_hold_when_meta_values_never_repeat() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("one_offs", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    let doc = |i: i64, round: i64| {
        let app = if i % 3 == 0 {
            String::new()
        } else {
            format!("u{i}")
        };
        doc! {"t": t(base() + round * HOUR + i), "m": {"app": app, "k": i % 5, "n": i}, "v": i}
    };
    let mut docs = Vec::new();
    for (range, round) in [(0..4500, 0), (4500..9000, 0), (0..1500, 1)] {
        let part: Vec<Document> = range.map(|i| doc(i, round)).collect();
        c.insert_many(&part).unwrap();
        db.flush().unwrap();
        docs.extend(part);
    }
    for f in [
        doc! {"m.app": {"$ne": ""}},
        doc! {"m.app": ""},
        doc! {"m.k": 2},
        doc! {"m.k": {"$in": [1, 4]}, "m.app": {"$gt": "u5"}},
    ] {
        let filter = Filter::parse(&f).unwrap();
        let want = docs.iter().filter(|d| filter.matches(d)).count() as u64;
        assert_eq!(c.count_documents(f.clone()).unwrap(), want, "{f}");
        // One row per bucket, and every conjunct reads the meta value: each bucket is
        // taken whole or pruned.
        let e = c.explain(f.clone()).unwrap();
        assert_eq!(e.buckets_total, 10_500, "{f}");
        assert_eq!(counts(&e), (0, 10_500 - want, want, 0), "{f}");
    }
    // A pipeline's planning judges stretches of thousands of buckets on threads of their own:
    // the same buckets, in the same order, whatever the number of threads.
    drop(c);
    db.close().unwrap();
    let f = doc! {"m.app": {"$ne": ""}, "m.k": {"$lt": 3}};
    let filter = Filter::parse(&f).unwrap();
    let kept: Vec<&Document> = docs.iter().filter(|d| filter.matches(d)).collect();
    let pipeline = vec![
        doc! {"$match": f},
        doc! {"$group": {"_id": "$m.k", "n": {"$sum": 1}, "first": {"$first": "$v"}}},
        doc! {"$sort": {"_id": 1}},
    ];
    let want: Vec<Document> = (0..3)
        .map(|k| {
            let of_k: Vec<&&Document> = kept
                .iter()
                .filter(|d| d.get_document("m").unwrap().get_i64("k").unwrap() == k)
                .collect();
            doc! {"_id": k, "n": of_k.len() as i32, "first": of_k[0].get("v").unwrap().clone()}
        })
        .collect();
    for threads in [1, 2, 3] {
        let opts = tsbucket::DbOptions {
            query_threads: threads,
            ..tsbucket::DbOptions::default()
        };
        let db = Database::open_with(dir.path(), opts).unwrap();
        let c = db.collection("one_offs").unwrap();
        let got: Vec<Document> = c
            .aggregate(pipeline.clone())
            .unwrap()
            .map(|d| d.unwrap())
            .collect();
        assert_eq!(got, want, "{threads} threads");
        let e = c.explain_aggregate(pipeline.clone()).unwrap();
        let n = kept.len() as u64;
        assert_eq!(counts(&e), (0, 10_500 - n, n, 0), "{threads} threads");
        db.close().unwrap();
    }
}
