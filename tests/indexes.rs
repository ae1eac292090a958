//! Secondary indexes through the public API: creation, listing in user and bucket form,
//! dropping, MongoDB's refusals with their codes, persistence across reopen and power loss, and
//! meta-index reads that return exactly what a full scan returns while examining fewer buckets.

mod common;
mod model_kit;

use common::*;
use model_kit::matcher;
use proptest::prelude::*;
use std::sync::Arc;
use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::vfs::{CrashMode, FaultFs, Injected, MemFs};
use tsbucket::{Collection, Database, DbOptions, Granularity, TimeseriesOptions};

fn weather(db: &Database) -> Collection {
    db.create_collection(
        "weather",
        TimeseriesOptions::new("timestamp")
            .meta_field("metadata")
            .granularity(Granularity::Hours),
    )
    .unwrap()
}

fn insert_series(c: &Collection, series: i64, per: i64) {
    let docs: Vec<Document> = (0..series)
        .flat_map(|s| {
            (0..per).map(move |i| {
                doc! {
                    "timestamp": DateTime::from_millis(1_700_000_000_000 + i * 60_000),
                    "metadata": {"sensorId": s, "region": format!("r{}", s % 3)},
                    "temp": (s * 100 + i) as f64,
                }
            })
        })
        .collect();
    c.insert_many(&docs).unwrap();
}

#[test]
fn create_list_drop_in_user_and_bucket_form() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = weather(&db);
    assert_eq!(c.list_indexes().unwrap(), Vec::<Document>::new());
    let a = c
        .create_index(doc! {"metadata.sensorId": 1, "timestamp": 1})
        .unwrap();
    assert_eq!(a, "metadata.sensorId_1_timestamp_1");
    let b = c.create_index(doc! {"temp": -1}).unwrap();
    assert_eq!(b, "temp_-1");
    let named = c
        .create_index_with(doc! {"metadata": 1}, doc! {"name": "by_meta"})
        .unwrap();
    assert_eq!(named, "by_meta");
    // Same index again: a no-op returning the name.
    assert_eq!(c.create_index(doc! {"temp": -1}).unwrap(), "temp_-1");
    let user = vec![
        doc! {"v": 2, "key": {"metadata.sensorId": 1, "timestamp": 1}, "name": "metadata.sensorId_1_timestamp_1"},
        doc! {"v": 2, "key": {"temp": -1}, "name": "temp_-1"},
        doc! {"v": 2, "key": {"metadata": 1}, "name": "by_meta"},
    ];
    assert_eq!(c.list_indexes().unwrap(), user);
    assert_eq!(
        c.list_bucket_indexes().unwrap(),
        vec![
            doc! {"v": 2, "key": {"meta.sensorId": 1, "control.min.timestamp": 1, "control.max.timestamp": 1}, "name": "metadata.sensorId_1_timestamp_1"},
            doc! {"v": 2, "key": {"control.max.temp": -1, "control.min.temp": -1}, "name": "temp_-1"},
            doc! {"v": 2, "key": {"meta": 1}, "name": "by_meta"},
        ]
    );
    db.close().unwrap();

    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("weather").unwrap();
    assert_eq!(c.list_indexes().unwrap(), user, "indexes survive reopen");
    c.drop_index("temp_-1").unwrap();
    assert_eq!(c.drop_index("temp_-1").unwrap_err().code(), Some(27));
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("weather").unwrap();
    assert_eq!(
        c.list_indexes().unwrap(),
        vec![user[0].clone(), user[2].clone()],
        "the drop is durable"
    );
    db.close().unwrap();
}

/// As in MongoDB, with unusual field names: `{mm.tag1: 1, tm: -1}` converts to
/// `{meta.tag1: 1, control.max.tm: -1, control.min.tm: -1}`, listIndexes shows the user key,
/// unique / text / `{}` / `{$natural: 1}` are refused with 67 or 72, and dropping an index by a
/// name it does not have is IndexNotFound (27).
#[test]
fn at_21_index_conversion_and_list_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("ts", TimeseriesOptions::new("tm").meta_field("mm"))
        .unwrap();
    let name = c.create_index(doc! {"mm.tag1": 1, "tm": -1}).unwrap();
    assert_eq!(
        c.list_bucket_indexes().unwrap()[0]
            .get_document("key")
            .unwrap(),
        &doc! {"meta.tag1": 1, "control.max.tm": -1, "control.min.tm": -1}
    );
    assert_eq!(
        c.list_indexes().unwrap(),
        vec![doc! {"v": 2, "key": {"mm.tag1": 1, "tm": -1}, "name": &name}]
    );
    let code = |r: tsbucket::Result<String>| r.unwrap_err().code().unwrap();
    assert!([67, 72].contains(&code(
        c.create_index_with(doc! {"x": 1}, doc! {"unique": true})
    )));
    assert!([67, 72].contains(&code(c.create_index(doc! {"mm": "text"}))));
    assert!([67, 72].contains(&code(c.create_index(doc! {}))));
    assert!([67, 72].contains(&code(c.create_index(doc! {"$natural": 1}))));
    assert_eq!(c.drop_index("mm_1").unwrap_err().code(), Some(27));
    assert_eq!(
        c.list_indexes().unwrap().len(),
        1,
        "refusals changed nothing"
    );
    db.close().unwrap();
}

#[test]
fn refusals_persist_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = weather(&db);
    c.create_index(doc! {"metadata.sensorId": 1}).unwrap();
    let bad: Vec<(Document, Document, i32)> = vec![
        (doc! {"timestamp": "hashed"}, doc! {}, 2),
        (doc! {"temp": "text"}, doc! {}, 2),
        (doc! {"metadata": "hashed"}, doc! {}, 67),
        (doc! {"metadata": "2dsphere"}, doc! {}, 67),
        (doc! {"$**": 1}, doc! {}, 67),
        (doc! {"temp": 0}, doc! {}, 67),
        (doc! {"temp": 1}, doc! {"sparse": true}, 67),
        (
            doc! {"temp": 1},
            doc! {"partialFilterExpression": {"metadata.sensorId": 1}},
            67,
        ),
        (doc! {"temp": 1}, doc! {"expireAfterSeconds": 5}, 72),
        (
            doc! {"metadata.sensorId": -1},
            doc! {"name": "metadata.sensorId_1"},
            86,
        ),
        (doc! {"metadata.sensorId": 1}, doc! {"name": "other"}, 85),
    ];
    for (k, o, want) in bad {
        let e = c.create_index_with(k.clone(), o.clone()).unwrap_err();
        assert_eq!(e.code(), Some(want), "{k} {o}: {e}");
    }
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("weather").unwrap();
    assert_eq!(c.list_indexes().unwrap().len(), 1);
    db.close().unwrap();
}

/// 40 series of 5 flushed measurements each, and 2 more each still in open buckets.
fn forty_series(db: &Database) -> Collection {
    let c = weather(db);
    insert_series(&c, 40, 5);
    db.flush().unwrap();
    insert_series(&c, 40, 2);
    c
}

#[test]
fn meta_index_finds_a_series_without_judging_every_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = forty_series(&db);
    let filter = doc! {"metadata.sensorId": 7};
    let want: Vec<Document> = c
        .find(filter.clone())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let before = c.explain(filter.clone()).unwrap();
    assert_eq!(before.index_used, None);
    c.create_index(doc! {"metadata.sensorId": 1, "timestamp": 1})
        .unwrap();
    let got: Vec<Document> = c
        .find(filter.clone())
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got, want);
    assert_eq!(got.len(), 7);
    let ex = c.explain(filter.clone()).unwrap();
    assert_eq!(
        ex.index_used.as_deref(),
        Some("metadata.sensorId_1_timestamp_1")
    );
    assert_eq!(ex.buckets_from_index, 1);
    assert_eq!(ex.buckets_pruned_by_index, 39);
    assert_eq!(ex.buckets_total, before.buckets_total);
    assert_eq!(ex.buckets_examined, before.buckets_examined);
    assert_eq!(
        ex.buckets_total,
        ex.buckets_pruned_by_index
            + ex.buckets_pruned_by_id
            + ex.buckets_pruned_by_stats
            + ex.buckets_examined
    );
    // `$in`, and a query the index cannot serve.
    let f = doc! {"metadata.sensorId": {"$in": [3, 4.0, 99]}};
    assert_eq!(c.explain(f.clone()).unwrap().buckets_from_index, 2);
    assert_eq!(c.count_documents(f).unwrap(), 14);
    let f = doc! {"metadata.region": "r1"};
    assert_eq!(c.explain(f.clone()).unwrap().index_used, None);
    // After a drop the read walks the `_id` index again.
    c.drop_index("metadata.sensorId_1_timestamp_1").unwrap();
    assert_eq!(c.explain(filter).unwrap().index_used, None);
    db.close().unwrap();
}

/// Without an index, a meta path that queries ask an equality or `$in` on is mapped the second
/// time it is asked for, in memory only: reads give the same answers from fewer judged
/// buckets, nothing is listed or persisted as an index, and a reopened database starts over.
#[test]
fn meta_path_asked_for_twice_is_looked_up_without_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = forty_series(&db);
    let f = doc! {"metadata.sensorId": 7};
    let first = c.explain(f.clone()).unwrap();
    assert_eq!(first.meta_lookup, None);
    assert_eq!(first.buckets_pruned_by_index, 0);
    assert_eq!(first.buckets_pruned_by_stats, 39 + 39);
    let want: Vec<Document> = read_all(&c)
        .unwrap()
        .into_iter()
        .filter(|d| d.get_document("metadata").unwrap().get_i64("sensorId").ok() == Some(7))
        .collect();
    assert_eq!(want.len(), 7);
    let got: Vec<Document> = c.find(f.clone()).unwrap().map(Result::unwrap).collect();
    assert_eq!(got, want);
    let ex = c.explain(f.clone()).unwrap();
    assert_eq!(ex.meta_lookup.as_deref(), Some("sensorId"));
    assert_eq!(ex.index_used, None);
    assert_eq!(ex.buckets_from_index, 1);
    assert_eq!(ex.buckets_pruned_by_index, 39);
    assert_eq!(ex.buckets_pruned_by_stats, 39);
    assert_eq!(ex.buckets_examined, first.buckets_examined);
    assert_eq!(ex.buckets_total, first.buckets_total);
    // `$in` on the same path, and the whole meta value (a path of its own).
    let f_in = doc! {"metadata.sensorId": {"$in": [3, 4.0, 99]}};
    assert_eq!(c.explain(f_in.clone()).unwrap().buckets_from_index, 2);
    assert_eq!(c.count_documents(f_in).unwrap(), 14);
    let whole = doc! {"metadata": {"sensorId": 2, "region": "r2"}};
    assert_eq!(c.count_documents(whole.clone()).unwrap(), 7);
    assert_eq!(c.explain(whole).unwrap().meta_lookup.as_deref(), Some(""));
    // Operators the map cannot answer leave the walk in place.
    let gt = doc! {"metadata.sensorId": {"$gt": 37}};
    for _ in 0..3 {
        assert_eq!(c.explain(gt.clone()).unwrap().meta_lookup, None);
    }
    assert_eq!(c.count_documents(gt).unwrap(), 14);
    assert_eq!(c.list_indexes().unwrap(), Vec::<Document>::new());
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("weather").unwrap();
    assert_eq!(c.explain(f.clone()).unwrap().meta_lookup, None);
    assert_eq!(c.find(f.clone()).unwrap().count(), 7);
    assert_eq!(
        c.explain(f).unwrap().meta_lookup.as_deref(),
        Some("sensorId")
    );
    db.close().unwrap();
}

/// At most four meta paths are mapped without an index; later paths keep the `_id` walk, with
/// the same answers.
#[test]
fn meta_paths_mapped_without_an_index_are_limited() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = weather(&db);
    insert_series(&c, 12, 2);
    db.flush().unwrap();
    let filters = [
        doc! {"metadata.sensorId": 1},
        doc! {"metadata.region": "r1"},
        doc! {"metadata": {"sensorId": 1, "region": "r1"}},
        doc! {"metadata.sensorId": {"$in": [1, 2]}},
        doc! {"metadata.x": 1},
        doc! {"metadata.y": 1},
    ];
    let mut mapped = Vec::new();
    for f in &filters {
        let before = c.count_documents(f.clone()).unwrap();
        let ex = c.explain(f.clone()).unwrap();
        assert_eq!(c.count_documents(f.clone()).unwrap(), before, "{f}");
        if let Some(p) = ex.meta_lookup {
            if !mapped.contains(&p) {
                mapped.push(p);
            }
        }
    }
    assert_eq!(mapped, ["sensorId", "region", "", "x"]);
    db.close().unwrap();
}

/// A lookup that yields many buckets gives way to the `_id` walk when the time range holds far
/// fewer; without a time range it is kept.
#[test]
fn a_large_meta_lookup_gives_way_to_a_narrow_time_range() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection(
            "weather",
            TimeseriesOptions::new("timestamp")
                .meta_field("metadata")
                .granularity(Granularity::Seconds),
        )
        .unwrap();
    // One series, one measurement per hour: a bucket each (the span is an hour).
    let docs: Vec<Document> = (0..1100i64)
        .map(|i| {
            doc! {
                "timestamp": DateTime::from_millis(1_700_000_000_000 + i * 3_600_000),
                "metadata": {"sensorId": 1},
                "temp": i as f64,
            }
        })
        .collect();
    c.insert_many(&docs).unwrap();
    db.flush().unwrap();
    let narrow = doc! {
        "metadata.sensorId": 1,
        "timestamp": {"$gte": DateTime::from_millis(1_700_000_000_000 + 500 * 3_600_000),
                      "$lt": DateTime::from_millis(1_700_000_000_000 + 502 * 3_600_000)},
    };
    let all = doc! {"metadata.sensorId": 1};
    for _ in 0..3 {
        assert_eq!(c.count_documents(narrow.clone()).unwrap(), 2);
        assert_eq!(c.count_documents(all.clone()).unwrap(), 1100);
    }
    let ex = c.explain(narrow).unwrap();
    assert_eq!(ex.meta_lookup, None);
    assert_eq!(ex.buckets_total, 1100);
    assert!(ex.buckets_pruned_by_id >= 1090, "{ex:?}");
    let ex = c.explain(all).unwrap();
    assert_eq!(ex.meta_lookup.as_deref(), Some("sensorId"));
    assert_eq!(ex.buckets_from_index, 1100);
    db.close().unwrap();
}

#[test]
fn meta_index_stays_right_across_flushes_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = weather(&db);
    c.create_index(doc! {"metadata": 1}).unwrap();
    let f = doc! {"metadata": {"sensorId": 2, "region": "r2"}};
    for round in 1..=3 {
        insert_series(&c, 10, 3);
        db.flush().unwrap();
        assert_eq!(c.count_documents(f.clone()).unwrap(), 3 * round);
        assert_eq!(c.explain(f.clone()).unwrap().buckets_from_index, round);
    }
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("weather").unwrap();
    assert_eq!(c.count_documents(f.clone()).unwrap(), 9);
    // Field order differs: equality on documents is order-sensitive, the index is not.
    let g = doc! {"metadata": {"region": "r2", "sensorId": 2}};
    assert_eq!(c.count_documents(g).unwrap(), 0);
    assert_eq!(
        c.explain(f).unwrap().index_used.as_deref(),
        Some("metadata_1")
    );
    db.close().unwrap();
}

fn meta_value(v: u8) -> Bson {
    match v % 9 {
        0 => Bson::Int32(i32::from(v / 9)),
        1 => Bson::Double(f64::from(v / 9)),
        2 => Bson::Int64(i64::from(v / 9)),
        3 => Bson::String(format!("s{}", v / 9 % 3)),
        4 => Bson::Array(vec![Bson::Int32(i32::from(v / 9)), Bson::Int32(1)]),
        5 => Bson::Null,
        6 => Bson::Document(doc! {"x": i32::from(v / 9)}),
        7 => Bson::Double(f64::from(v / 9) + 0.5),
        _ => Bson::Boolean(v % 2 == 0),
    }
}

fn query_value(v: u8) -> Bson {
    match v % 5 {
        0 => Bson::Int32(i32::from(v / 5 % 4)),
        1 => Bson::Double(f64::from(v / 5 % 4)),
        2 => Bson::String(format!("s{}", v / 5 % 3)),
        3 => Bson::Document(doc! {"x": i32::from(v / 5 % 4)}),
        _ => Bson::Double(f64::from(v / 5 % 4) + 0.5),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// With a meta-subfield index, and without one once the path has been asked for twice
    /// (the automatic lookup), equality and `$in` reads return exactly what the model's
    /// brute-force matcher finds among the inserted documents, over metas of mixed types,
    /// arrays and missing fields, flushed or in memory.
    #[test]
    fn meta_index_reads_equal_full_scans(
        metas in proptest::collection::vec((any::<u8>(), any::<bool>()), 1..40),
        flush_at in 0usize..40,
        queries in proptest::collection::vec((any::<u8>(), any::<u8>(), any::<bool>()), 1..6),
    ) {
        let fs = MemFs::new();
        let db = Database::open_with("/db", mem_options(&fs)).unwrap();
        let plain = weather(&db);
        let indexed = db.create_collection("indexed", TimeseriesOptions::new("timestamp")
            .meta_field("metadata").granularity(Granularity::Hours)).unwrap();
        indexed.create_index(doc! {"metadata.k": 1}).unwrap();
        let mut inserted = Vec::new();
        for (i, (m, has)) in metas.iter().enumerate() {
            let meta = if *has { doc! {"k": meta_value(*m)} } else { doc! {"other": 1} };
            let d = doc! {
                "_id": i as i64,
                "timestamp": DateTime::from_millis(1_700_000_000_000 + i as i64 * 1000),
                "metadata": meta,
                "v": i as i64,
            };
            plain.insert_one(&d).unwrap();
            indexed.insert_one(&d).unwrap();
            inserted.push(d);
            if i == flush_at {
                db.flush().unwrap();
            }
        }
        for (n, (a, b, use_in)) in queries.into_iter().enumerate() {
            let f = if use_in {
                doc! {"metadata.k": {"$in": [query_value(a), query_value(b)]}}
            } else {
                doc! {"metadata.k": query_value(a)}
            };
            // Without a sort the order between buckets is unspecified (bucket `_id`s differ
            // between the collections), so compare by measurement `_id`.
            let by_id = |c: &Collection| {
                let mut v: Vec<Document> = c.find(f.clone()).unwrap().map(Result::unwrap).collect();
                v.sort_by_key(|d| d.get_i64("_id").unwrap());
                v
            };
            let want: Vec<Document> =
                inserted.iter().filter(|d| matcher::matches(&f, d)).cloned().collect();
            prop_assert_eq!(&by_id(&indexed), &want, "{}", f);
            let ex = indexed.explain(f.clone()).unwrap();
            prop_assert_eq!(ex.index_used.as_deref(), Some("metadata.k_1"));
            prop_assert_eq!(ex.meta_lookup, None);
            // The path was asked for by the earlier queries: from the second on, it is mapped.
            let auto = plain.explain(f.clone()).unwrap();
            prop_assert_eq!(auto.meta_lookup.is_some(), n > 0, "{}", f);
            prop_assert_eq!(&by_id(&plain), &want, "{}", f);
            prop_assert_eq!(auto.index_used, None);
            prop_assert_eq!(auto.buckets_examined, ex.buckets_examined);
        }
        db.close().unwrap();
    }
}

/// A power cut at every file-system operation of `create_index` and then of `drop_index`:
/// every crash image opens with the index either fully there or absent, and present whenever
/// the call had returned `Ok`.
#[test]
fn power_loss_during_create_and_drop_index_leaves_it_done_or_not() {
    let base = MemFs::new();
    {
        let db = Database::open_with("/db", mem_options(&base)).unwrap();
        let c = weather(&db);
        insert_series(&c, 3, 2);
        db.flush().unwrap();
        db.close().unwrap();
    }
    let want = doc! {"v": 2, "key": {"metadata.sensorId": 1}, "name": "metadata.sensorId_1"};
    for dropping in [false, true] {
        let start = base.crash();
        if dropping {
            let db = Database::open_with("/db", mem_options(&start)).unwrap();
            db.collection("weather")
                .unwrap()
                .create_index(doc! {"metadata.sensorId": 1})
                .unwrap();
            db.close().unwrap();
        }
        let mut k = 0;
        loop {
            let img = start.crash();
            let fault = FaultFs::new(Arc::new(img.clone()));
            let db = Database::open_with(
                "/db",
                DbOptions {
                    ttl_interval: None,
                    ..DbOptions::default().vfs(Arc::new(fault.clone()))
                },
            )
            .unwrap();
            let c = db.collection("weather").unwrap();
            let ops = fault.op_count();
            fault.fail_nth(ops + k, true, Injected::Eio);
            let r = if dropping {
                c.drop_index("metadata.sensorId_1")
            } else {
                c.create_index(doc! {"metadata.sensorId": 1}).map(|_| ())
            };
            let ok = r.is_ok();
            drop(c);
            let _ = db.close();
            for (i, mode) in [CrashMode::DropUnsynced, CrashMode::Random]
                .into_iter()
                .enumerate()
            {
                for entries in [false, true] {
                    let ctx = format!("drop={dropping} k={k} mode={mode:?} entries={entries}");
                    let crashed = if entries {
                        img.crash_with_dir_entries(mode, i as u64)
                    } else {
                        img.crash_with(mode, i as u64)
                    };
                    let db = Database::open_with("/db", mem_options(&crashed))
                        .unwrap_or_else(|e| panic!("{ctx}: does not open: {e}"));
                    let c = db.collection("weather").unwrap();
                    let list = c.list_indexes().unwrap();
                    let has = list == vec![want.clone()];
                    assert!(has || list.is_empty(), "{ctx}: {list:?}");
                    if ok {
                        assert_eq!(has, !dropping, "{ctx}: acknowledged but not durable");
                    }
                    assert_eq!(
                        c.count_documents(doc! {"metadata.sensorId": 1}).unwrap(),
                        2,
                        "{ctx}"
                    );
                    db.close().unwrap();
                }
            }
            if ok {
                break;
            }
            k += 1;
            assert!(k < 100, "the operation never succeeded");
        }
    }
}
