//! Meta-only `update_many` and `delete_many` (filter and update on the meta field alone, as
//! MongoDB's legacy time-series rules require): results and counts, refusals that change
//! nothing, disk space given back, reopen, and queries after two series' meta values became
//! equal, checked against a model.

mod common;

use common::{all_by_id, mem_options};
use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::vfs::MemFs;
use tsbucket::{Collection, Database, DbOptions, TimeseriesOptions};

const T0: i64 = 1_700_000_000_000;

fn t(i: i64) -> DateTime {
    DateTime::from_millis(T0 + i * 1000)
}

fn opts(fs: &MemFs) -> DbOptions {
    mem_options(fs)
}

fn coll(db: &Database, meta: Option<&str>) -> Collection {
    let mut o = TimeseriesOptions::new("time");
    if let Some(m) = meta {
        o = o.meta_field(m);
    }
    db.create_collection("c", o).unwrap()
}

fn all(c: &Collection) -> Vec<Document> {
    all_by_id(c)
}

fn ids(c: &Collection) -> Vec<i32> {
    all(c).iter().map(|d| d.get_i32("_id").unwrap()).collect()
}

fn seg_files(fs: &MemFs) -> Vec<String> {
    use tsbucket::vfs::Vfs;
    let mut v = fs.list_dir(std::path::Path::new("/db/seg")).unwrap();
    v.sort();
    v
}

#[test]
fn at13_unset_subfield_counts_measurements() {
    for flush in [false, true] {
        let fs = MemFs::new();
        let db = Database::open_with("/db", opts(&fs)).unwrap();
        let c = coll(&db, Some("tag"));
        c.insert_many(&[
            doc! {"_id": 1, "time": t(0), "tag": {"a": "A", "b": "B"}},
            doc! {"_id": 2, "time": t(1), "tag": {"c": "C", "d": 2}, "f": [{"k": "K", "v": "V"}]},
            doc! {"_id": 4, "time": t(2), "tag": {"a": "A", "b": "B"}, "f": "F"},
            doc! {"_id": 5, "time": t(3), "tag": {"a": "A", "b": "B", "c": "C"}},
        ])
        .unwrap();
        if flush {
            db.flush().unwrap();
        }
        let r = c
            .update_many(doc! {"tag.a": "A"}, doc! {"$unset": {"tag.a": ""}})
            .unwrap();
        assert_eq!((r.matched_count, r.modified_count), (3, 3));
        let tags: Vec<Bson> = all(&c)
            .iter()
            .map(|d| d.get("tag").unwrap().clone())
            .collect();
        assert_eq!(
            tags,
            vec![
                Bson::Document(doc! {"b": "B"}),
                Bson::Document(doc! {"c": "C", "d": 2}),
                Bson::Document(doc! {"b": "B"}),
                Bson::Document(doc! {"b": "B", "c": "C"}),
            ]
        );
        assert_eq!(c.count_documents(doc! {"tag.b": "B"}).unwrap(), 3);
        // Matching again changes nothing.
        let r = c
            .update_many(doc! {"tag.b": "B"}, doc! {"$unset": {"tag.a": ""}})
            .unwrap();
        assert_eq!((r.matched_count, r.modified_count), (3, 0));
        db.verify().unwrap();
    }
}

#[test]
fn at13_set_whole_meta_and_mul_missing_meta() {
    let fs = MemFs::new();
    let db = Database::open_with("/db", opts(&fs)).unwrap();
    let c = coll(&db, Some("tag"));
    c.insert_many(&[
        doc! {"_id": 1, "time": t(0), "tag": {"a": "A", "b": "B"}},
        doc! {"_id": 2, "time": t(1), "tag": {"c": "C", "d": 2}},
    ])
    .unwrap();
    let r = c
        .update_many(doc! {}, doc! {"$set": {"tag": {"z": "Z"}}})
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (2, 2));
    assert_eq!(c.count_documents(doc! {"tag": {"z": "Z"}}).unwrap(), 2);

    let db2fs = MemFs::new();
    let db2 = Database::open_with("/db", opts(&db2fs)).unwrap();
    let c2 = coll(&db2, Some("tag"));
    c2.insert_many(&[
        doc! {"_id": 1, "time": t(0), "tag": 200, "f": "F"},
        doc! {"_id": 3, "time": t(1), "f": "F"},
    ])
    .unwrap();
    let r = c2
        .update_many(doc! {"tag": {"$nin": [5, 15]}}, doc! {"$mul": {"tag": 10}})
        .unwrap();
    assert_eq!(r.matched_count, 2);
    let got: Vec<Option<Bson>> = all(&c2).iter().map(|d| d.get("tag").cloned()).collect();
    assert_eq!(got, vec![Some(Bson::Int32(2000)), Some(Bson::Int32(0))]);
}

#[test]
fn at13_refusals_are_72_and_change_nothing() {
    let fs = MemFs::new();
    let db = Database::open_with("/db", opts(&fs)).unwrap();
    let c = coll(&db, Some("tag"));
    c.insert_many(&[
        doc! {"_id": 1, "time": t(0), "tag": {"a": "A"}, "measurement": "cpu"},
        doc! {"_id": 2, "time": t(1), "tag": {"b": "B"}, "measurement": "mem"},
    ])
    .unwrap();
    db.flush().unwrap();
    c.insert_one(&doc! {"_id": 3, "time": t(2), "tag": {"a": "A"}})
        .unwrap();
    let before_docs = all(&c);
    let before_buckets = c.buckets(doc! {}).unwrap();
    let before_files = seg_files(&fs);
    let refused = [
        (doc! {"measurement": "cpu"}, doc! {"$set": {"tag.x": 1}}),
        (doc! {"time": t(0)}, doc! {"$set": {"tag.x": 1}}),
        (doc! {"tag.a": "A"}, doc! {"$set": {"f2": "f2"}}),
        (doc! {"tag.a": "A"}, doc! {}),
        (doc! {"tag.a": "A"}, doc! {"tag": {"z": 1}}),
        (doc! {"tag.a": "A"}, doc! {"$rename": {"tag.a": "a"}}),
        (
            doc! {"$or": [{"tag.a": "A"}, {"measurement": "cpu"}]},
            doc! {"$set": {"tag.x": 1}},
        ),
    ];
    for (f, u) in refused {
        let e = c.update_many(f.clone(), u.clone()).unwrap_err();
        assert_eq!(e.code(), Some(72), "{f} {u}: {e}");
    }
    let e = c.delete_many(doc! {"measurement": "cpu"}).unwrap_err();
    assert_eq!(e.code(), Some(72));
    assert!(e
        .to_string()
        .contains("when querying on a field that is not the metaField 'tag'"));
    // An operator failing on one bucket's value refuses the whole update.
    let e = c
        .update_many(doc! {}, doc! {"$inc": {"tag.a": 1}})
        .unwrap_err();
    assert_eq!(e.code(), Some(2));
    assert_eq!(all(&c), before_docs);
    assert_eq!(c.buckets(doc! {}).unwrap(), before_buckets);
    assert_eq!(seg_files(&fs), before_files);

    // No meta field: every update is 72; a delete only with {}, which deletes everything.
    let db2 = Database::open_with("/db2", opts(&fs)).unwrap();
    let c2 = coll(&db2, None);
    c2.insert_many(&[
        doc! {"_id": 1, "time": t(0), "x": 1},
        doc! {"_id": 2, "time": t(1)},
    ])
    .unwrap();
    let e = c2
        .update_many(doc! {}, doc! {"$set": {"x": 1}})
        .unwrap_err();
    assert_eq!(e.code(), Some(72));
    assert!(e.to_string().contains("does not have a metaField"));
    let e = c2.delete_many(doc! {"x": 1}).unwrap_err();
    assert_eq!(e.code(), Some(72));
    assert_eq!(c2.count_documents(doc! {}).unwrap(), 2);
    assert_eq!(c2.delete_many(doc! {}).unwrap().deleted_count, 2);
    assert_eq!(c2.count_documents(doc! {}).unwrap(), 0);
}

#[test]
fn at14_meta_deletes() {
    let fs = MemFs::new();
    let db = Database::open_with("/db", opts(&fs)).unwrap();
    let c = coll(&db, Some("tag"));
    c.insert_many(&[
        doc! {"_id": 1, "time": t(0), "tag": {"a": "A"}},
        doc! {"_id": 2, "time": t(1), "tag": {"b": "B"}},
        doc! {"_id": 3, "time": t(2), "tag": {"d": "D"}},
    ])
    .unwrap();
    assert_eq!(
        c.delete_many(doc! {"tag": {"a": "A"}})
            .unwrap()
            .deleted_count,
        1
    );
    let r = c
        .delete_many(doc! {"$or": [{"tag": {"d": "D"}}, {"tag": {"c": "C"}}]})
        .unwrap();
    assert_eq!(r.deleted_count, 1);
    assert_eq!(ids(&c), vec![2]);

    let c2 = db
        .create_collection("d", TimeseriesOptions::new("time").meta_field("tag"))
        .unwrap();
    c2.insert_many(&[
        doc! {"_id": 1, "time": t(0), "tag": {"a": "A"}},
        doc! {"_id": 2, "time": t(1), "tag": {"a": "A"}},
    ])
    .unwrap();
    assert_eq!(
        c2.delete_many(doc! {"tag.a": "A"}).unwrap().deleted_count,
        2
    );
    assert_eq!(c2.count_documents(doc! {}).unwrap(), 0);
    db.verify().unwrap();
}

/// 3 series x 300 measurements, flushed into several segments, some rows left open.
fn load(c: &Collection, db: &Database) -> Vec<Document> {
    let mut docs = Vec::new();
    for round in 0..3i64 {
        let batch: Vec<Document> = (0..300)
            .map(|i| {
                let n = (round * 300 + i) as i32;
                doc! {"_id": n, "time": t(round * 300 + i), "tag": {"dc": "x", "s": n % 3}, "v": n}
            })
            .collect();
        c.insert_many(&batch).unwrap();
        docs.extend(batch);
        if round < 2 {
            db.flush().unwrap();
        }
    }
    docs
}

#[test]
fn deletes_give_space_back_and_survive_reopen() {
    let fs = MemFs::new();
    let db = Database::open_with("/db", opts(&fs)).unwrap();
    let c = coll(&db, Some("tag"));
    let docs = load(&c, &db);
    db.flush().unwrap();
    let before = c.stats().unwrap().segment_bytes;
    let r = c.delete_many(doc! {"tag.s": 1}).unwrap();
    assert_eq!(r.deleted_count, 300);
    let after = c.stats().unwrap();
    assert!(
        after.segment_bytes < before,
        "{} -> {}",
        before,
        after.segment_bytes
    );
    let want: Vec<Document> = docs
        .iter()
        .filter(|d| d.get_document("tag").unwrap().get_i32("s").unwrap() != 1)
        .cloned()
        .collect();
    assert_eq!(all(&c), want);
    let report = db.verify().unwrap();
    assert_eq!(report.measurements, 600);
    db.close().unwrap();

    let db = Database::open_with("/db", opts(&fs)).unwrap();
    let c = db.collection("c").unwrap();
    assert_eq!(all(&c), want);
    // Deleting the rest leaves no segment file at all.
    assert_eq!(c.delete_many(doc! {}).unwrap().deleted_count, 600);
    assert!(seg_files(&fs).is_empty(), "{:?}", seg_files(&fs));
    assert_eq!(c.stats().unwrap().segment_bytes, 0);
    db.verify().unwrap();
    db.close().unwrap();
    let db = Database::open_with("/db", opts(&fs)).unwrap();
    assert_eq!(
        db.collection("c")
            .unwrap()
            .count_documents(doc! {})
            .unwrap(),
        0
    );
}

/// Buckets of two series whose meta became equal answer like one series, before and after
/// more inserts of that series, a flush and a reopen.
#[test]
fn queries_after_meta_merge_equal_the_model() {
    let fs = MemFs::new();
    let db = Database::open_with("/db", opts(&fs)).unwrap();
    let c = coll(&db, Some("tag"));
    let mut model = load(&c, &db);
    let r = c
        .update_many(doc! {"tag.s": 2}, doc! {"$set": {"tag.s": 1}})
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (300, 300));
    for d in model.iter_mut() {
        let tag = d.get_document_mut("tag").unwrap();
        if tag.get_i32("s").unwrap() == 2 {
            tag.insert("s", 1);
        }
    }
    let check = |c: &Collection, model: &[Document], ctx: &str| {
        assert_eq!(all(c), model, "{ctx}: find");
        for s in 0..3 {
            let n = model
                .iter()
                .filter(|d| d.get_document("tag").unwrap().get_i32("s").unwrap() == s)
                .count() as u64;
            assert_eq!(
                c.count_documents(doc! {"tag.s": s}).unwrap(),
                n,
                "{ctx}: s={s}"
            );
            assert_eq!(
                c.count_documents(doc! {"tag": {"dc": "x", "s": s}})
                    .unwrap(),
                n,
                "{ctx}: whole meta s={s}"
            );
        }
        let pipeline = vec![
            doc! {"$group": {"_id": "$tag", "n": {"$sum": 1}, "v": {"$sum": "$v"}}},
            doc! {"$sort": {"_id.s": 1}},
        ];
        let mut want: std::collections::BTreeMap<i32, (i32, i64)> = Default::default();
        for d in model {
            let e = want
                .entry(d.get_document("tag").unwrap().get_i32("s").unwrap())
                .or_default();
            e.0 += 1;
            e.1 += i64::from(d.get_i32("v").unwrap());
        }
        for columnar in [true, false] {
            let got: Vec<Document> = if columnar {
                c.aggregate(pipeline.clone()).unwrap()
            } else {
                c.aggregate_unpacked(pipeline.clone()).unwrap()
            }
            .collect::<tsbucket::Result<_>>()
            .unwrap();
            let got: Vec<(i32, i32, i64)> = got
                .iter()
                .map(|g| {
                    let v = match g.get("v").unwrap() {
                        Bson::Int32(x) => i64::from(*x),
                        Bson::Int64(x) => *x,
                        other => panic!("{other}"),
                    };
                    (
                        g.get_document("_id").unwrap().get_i32("s").unwrap(),
                        g.get_i32("n").unwrap(),
                        v,
                    )
                })
                .collect();
            let exp: Vec<(i32, i32, i64)> = want.iter().map(|(s, (n, v))| (*s, *n, *v)).collect();
            assert_eq!(got, exp, "{ctx}: $group by meta (columnar {columnar})");
        }
    };
    check(&c, &model, "after update");
    // New rows of the merged series go to new buckets next to both old ones.
    let more: Vec<Document> = (900..960)
        .map(|n| doc! {"_id": n, "time": t(i64::from(n)), "tag": {"dc": "x", "s": 1}, "v": n})
        .collect();
    c.insert_many(&more).unwrap();
    model.extend(more);
    check(&c, &model, "after insert");
    db.flush().unwrap();
    check(&c, &model, "after flush");
    db.verify().unwrap();
    db.close().unwrap();
    let db = Database::open_with("/db", opts(&fs)).unwrap();
    let c = db.collection("c").unwrap();
    check(&c, &model, "after reopen");
    db.verify().unwrap();
}

/// The command-shaped forms refuse what a driver may send and MongoDB refuses on a time-series
/// collection (a non-multi update, an upsert and a pipeline update are 72; a delete with
/// `limit: 1` is 20), with nothing changed, and run the accepted statements like
/// `update_many` and `delete_many`.
#[test]
fn at13_at14_statements() {
    let fs = MemFs::new();
    let db = Database::open_with("/db", opts(&fs)).unwrap();
    let c = coll(&db, Some("tag"));
    c.insert_many(&[
        doc! {"_id": 1, "time": t(0), "tag": {"a": "A"}},
        doc! {"_id": 2, "time": t(1), "tag": {"a": "A"}},
        doc! {"_id": 3, "time": t(2), "tag": {"b": "B"}},
    ])
    .unwrap();
    db.flush().unwrap();
    let before = all(&c);
    let u = doc! {"$set": {"tag.z": 1}};
    for (stmt, code) in [
        (doc! {"q": {"tag.a": "A"}, "u": u.clone()}, 72),
        (
            doc! {"q": {"tag.a": "A"}, "u": u.clone(), "multi": false},
            72,
        ),
        (
            doc! {"q": {"tag.a": "A"}, "u": u.clone(), "multi": true, "upsert": true},
            72,
        ),
        (
            doc! {"q": {"tag.a": "A"}, "u": [{"$set": {"tag.z": 1}}], "multi": true},
            72,
        ),
        (doc! {"q": {"x": 1}, "u": u.clone(), "multi": true}, 72),
        (
            doc! {"q": {"tag.a": "A"}, "u": {"f2": "f2"}, "multi": true},
            72,
        ),
    ] {
        let e = c.update(stmt.clone()).unwrap_err();
        assert_eq!(e.code(), Some(code), "{stmt}: {e}");
    }
    let e = c
        .delete(doc! {"q": {"tag.a": "A"}, "limit": 1})
        .unwrap_err();
    assert_eq!(e.code(), Some(20), "{e}");
    assert!(e.to_string().contains("non-multi delete"), "{e}");
    assert_eq!(all(&c), before);

    let r = c
        .update(doc! {"q": {"tag.a": "A"}, "u": u, "multi": true})
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (2, 2));
    let r = c.delete(doc! {"q": {"tag.b": "B"}, "limit": 0}).unwrap();
    assert_eq!(r.deleted_count, 1);
    assert_eq!(ids(&c), vec![1, 2]);
    assert_eq!(
        c.count_documents(doc! {"tag": {"a": "A", "z": 1}}).unwrap(),
        2
    );
}

/// Buckets the TTL sweeper deleted are neither matched nor counted by a later update or
/// delete, and a segment rewritten for one does not bring them back, before or after reopen.
#[test]
fn swept_buckets_stay_deleted_through_updates_and_deletes() {
    let fs = MemFs::new();
    let db = Database::open_with("/db", opts(&fs)).unwrap();
    let c = db
        .create_collection(
            "c",
            TimeseriesOptions::new("time")
                .meta_field("tag")
                .expire_after_seconds(3600),
        )
        .unwrap();
    // One segment holding old and young buckets of series 0 and 1.
    let mut docs = Vec::new();
    for s in 0..2 {
        for (k, at) in [(0, 0i64), (1, 10 * 3600)].into_iter() {
            docs.push(doc! {"_id": s * 10 + k, "time": t(at), "tag": {"s": s}, "v": 1});
        }
    }
    c.insert_many(&docs).unwrap();
    db.flush().unwrap();
    let now = DateTime::from_millis(T0 + 10 * 3_600_000);
    let swept = db.sweep_expired(now).unwrap();
    assert_eq!(swept.measurements_deleted, 2);
    assert_eq!(ids(&c), vec![1, 11]);

    let r = c
        .update_many(doc! {}, doc! {"$set": {"tag.k": "x"}})
        .unwrap();
    assert_eq!((r.matched_count, r.modified_count), (2, 2));
    assert_eq!(ids(&c), vec![1, 11]);
    assert_eq!(c.delete_many(doc! {"tag.s": 0}).unwrap().deleted_count, 1);
    assert_eq!(ids(&c), vec![11]);
    assert_eq!(c.stats().unwrap().measurements, 1);
    db.verify().unwrap();
    db.close().unwrap();

    let db = Database::open_with("/db", opts(&fs)).unwrap();
    let c = db.collection("c").unwrap();
    assert_eq!(ids(&c), vec![11]);
    assert_eq!(
        all(&c)[0].get_document("tag").unwrap(),
        &doc! {"s": 1, "k": "x"}
    );
    assert_eq!(db.verify().unwrap().measurements, 1);
}

/// A meta index answers for the new meta values after an update and forgets deleted series.
#[test]
fn meta_index_follows_updates_and_deletes() {
    let fs = MemFs::new();
    let db = Database::open_with("/db", opts(&fs)).unwrap();
    let c = coll(&db, Some("tag"));
    let docs = load(&c, &db);
    c.create_index(doc! {"tag.s": 1}).unwrap();
    let count = |c: &Collection, s: i32| {
        let e = c.explain(doc! {"tag.s": s}).unwrap();
        assert_eq!(e.index_used.as_deref(), Some("tag.s_1"));
        c.count_documents(doc! {"tag.s": s}).unwrap()
    };
    assert_eq!(count(&c, 2), 300);
    c.update_many(doc! {"tag.s": 2}, doc! {"$set": {"tag.s": 7}})
        .unwrap();
    assert_eq!((count(&c, 2), count(&c, 7)), (0, 300));
    c.delete_many(doc! {"tag.s": 7}).unwrap();
    assert_eq!((count(&c, 7), count(&c, 0)), (0, 300));
    db.close().unwrap();
    let db = Database::open_with("/db", opts(&fs)).unwrap();
    let c = db.collection("c").unwrap();
    assert_eq!((count(&c, 7), count(&c, 1)), (0, 300));
    assert_eq!(all(&c).len(), docs.len() - 300);
}
