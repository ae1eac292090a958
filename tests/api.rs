//! The public API end to end: collections, inserts, reads, raw buckets and bucketing rules,
//! checked against MongoDB's documented behaviour.

use tsbucket::bson::{doc, oid::ObjectId, Bson, DateTime, Document};
use tsbucket::{Database, DbOptions, Error, FindOptions, Granularity, TimeseriesOptions};

fn at(s: &str) -> DateTime {
    DateTime::parse_rfc3339_str(s).unwrap()
}

fn all(c: &tsbucket::Collection, f: Document) -> Vec<Document> {
    c.find(f).unwrap().map(|d| d.unwrap()).collect()
}

fn sorted_by_time(mut v: Vec<Document>, t: &str) -> Vec<Document> {
    v.sort_by_key(|d| d.get_datetime(t).unwrap().timestamp_millis());
    v
}

#[test]
fn collections_are_created_listed_and_found() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let o = TimeseriesOptions::new("t").meta_field("m");
    db.create_collection("a", o.clone()).unwrap();
    // Identical options: idempotent. Different: NamespaceExists.
    db.create_collection("a", o.clone()).unwrap();
    let e = db
        .create_collection("a", TimeseriesOptions::new("t"))
        .unwrap_err();
    assert_eq!(e.code(), Some(48));
    let e = db.collection("nope").unwrap_err();
    assert!(matches!(e, Error::NamespaceNotFound(_)));
    assert_eq!(e.code(), Some(26));
    let list = db.list_collections().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].name, "a");
    assert_eq!(list[0].options, o);
    assert!(db.drop_collection("a").unwrap());
    assert!(!db.drop_collection("a").unwrap());
    assert!(db.list_collections().unwrap().is_empty());
}

#[test]
fn invalid_options_are_refused_with_mongodb_codes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let cases = [
        (TimeseriesOptions::new(""), 72),
        (TimeseriesOptions::new("time").meta_field("time"), 72),
        (TimeseriesOptions::new("_id"), 72),
        (TimeseriesOptions::new("t").bucket_span(100, 50), 72),
        (
            TimeseriesOptions::new("t")
                .granularity(Granularity::Minutes)
                .bucket_span(3600, 3600),
            72,
        ),
        (
            TimeseriesOptions::new("t").bucket_span(31_536_001, 31_536_001),
            2,
        ),
    ];
    for (o, code) in cases {
        let e = db.create_collection("c", o.clone()).unwrap_err();
        assert_eq!(e.code(), Some(code), "{o:?}: {e}");
    }
    assert!(db.list_collections().unwrap().is_empty());
}

#[test]
fn seed003_two_days_in_blocks_make_four_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("ts").meta_field("meta"))
        .unwrap();
    for day in ["2021-06-01T10:00:00Z", "2021-06-02T10:00:00Z"] {
        let base = at(day).timestamp_millis();
        let docs: Vec<Document> = (0..2000)
            .map(|i| doc! {"ts": DateTime::from_millis(base + i), "meta": "sensor", "v": i})
            .collect();
        c.insert_many(&docs).unwrap();
    }
    assert_eq!(c.buckets(doc! {}).unwrap().len(), 4);
    db.flush().unwrap();
    assert_eq!(c.buckets(doc! {}).unwrap().len(), 4);
    assert_eq!(c.count_documents(doc! {}).unwrap(), 4000);
}

#[test]
fn seed003_alternating_days_still_make_four_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open_with(
        dir.path(),
        tsbucket::DbOptions::default().sync(tsbucket::SyncMode::Never),
    )
    .unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("ts").meta_field("meta"))
        .unwrap();
    let d1 = at("2021-06-01T10:00:00Z").timestamp_millis();
    let d2 = at("2021-06-02T10:00:00Z").timestamp_millis();
    for i in 0..4000i64 {
        let t = if i % 2 == 0 { d1 } else { d2 } + i;
        c.insert_one(&doc! {"ts": DateTime::from_millis(t), "meta": "sensor", "v": i})
            .unwrap();
    }
    let b = c.buckets(doc! {}).unwrap();
    assert_eq!(b.len(), 4);
    for bucket in &b {
        assert_eq!(
            bucket
                .get_document("control")
                .unwrap()
                .get_i64("count")
                .unwrap(),
            1000
        );
    }
}

#[test]
fn raw_bucket_has_mongodb_shape_with_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("ts").meta_field("meta"))
        .unwrap();
    let base = at("2021-06-01T10:00:30Z").timestamp_millis();
    c.insert_many(&[
        doc! {"ts": DateTime::from_millis(base), "meta": {"b": 1, "a": 2}, "temp": 10},
        doc! {"ts": DateTime::from_millis(base + 1000), "meta": {"b": 1, "a": 2}, "temp": 12},
        doc! {"ts": DateTime::from_millis(base + 2000), "meta": {"b": 1, "a": 2}, "temp": 11, "humidity": 40},
    ])
    .unwrap();
    for flushed in [false, true] {
        if flushed {
            db.flush().unwrap();
        }
        let b = c.buckets(doc! {}).unwrap();
        assert_eq!(b.len(), 1);
        let b = &b[0];
        let control = b.get_document("control").unwrap();
        assert_eq!(control.get_i64("count").unwrap(), 3);
        let min = control.get_document("min").unwrap();
        let max = control.get_document("max").unwrap();
        assert_eq!(min.get_datetime("ts").unwrap(), &at("2021-06-01T10:00:00Z"));
        assert_eq!(
            max.get_datetime("ts").unwrap().timestamp_millis(),
            base + 2000
        );
        assert_eq!(min.get_i32("temp").unwrap(), 10);
        assert_eq!(max.get_i32("temp").unwrap(), 12);
        assert!(!min.contains_key("meta"), "meta never appears in control");
        // The engine's bookkeeping (log positions, per-field sums) stays hidden.
        for d in [min, max] {
            assert!(!d.keys().any(|k| k.starts_with('\u{1}')), "{d}");
        }
        // Buckets hold the normalised meta value.
        assert_eq!(b.get_document("meta").unwrap(), &doc! {"a": 2, "b": 1});
        let data = b.get_document("data").unwrap();
        assert_eq!(data.get_document("humidity").unwrap(), &doc! {"2": 40});
        assert_eq!(
            data.get_document("temp").unwrap(),
            &doc! {"0": 10, "1": 12, "2": 11}
        );
        assert_eq!(
            b.get_object_id("_id")
                .unwrap()
                .timestamp()
                .timestamp_millis(),
            at("2021-06-01T10:00:00Z").timestamp_millis()
        );
    }
    // The flushed bucket's sums are checked against its data.
    assert_eq!(db.verify().unwrap().buckets, 1);
}

#[test]
fn bucket_start_is_rounded_for_each_granularity() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let t = "2021-04-22T20:10:14.134Z";
    for (g, start) in [
        (Granularity::Seconds, "2021-04-22T20:10:00Z"),
        (Granularity::Minutes, "2021-04-22T20:00:00Z"),
        (Granularity::Hours, "2021-04-22T00:00:00Z"),
    ] {
        let c = db
            .create_collection(g.as_str(), TimeseriesOptions::new("t").granularity(g))
            .unwrap();
        c.insert_one(&doc! {"t": at(t)}).unwrap();
        let b = &c.buckets(doc! {}).unwrap()[0];
        let min = b
            .get_document("control")
            .unwrap()
            .get_document("min")
            .unwrap();
        assert_eq!(min.get_datetime("t").unwrap(), &at(start), "{g:?}");
        let id = b.get_object_id("_id").unwrap();
        assert_eq!(id.timestamp(), at(start), "{g:?}");
    }
    // Custom span: plain modular arithmetic on seconds.
    let c = db
        .create_collection("custom", TimeseriesOptions::new("t").bucket_span(200, 200))
        .unwrap();
    c.insert_one(&doc! {"t": DateTime::from_millis(1_000_123_456)})
        .unwrap();
    let b = &c.buckets(doc! {}).unwrap()[0];
    let min = b
        .get_document("control")
        .unwrap()
        .get_document("min")
        .unwrap();
    assert_eq!(
        min.get_datetime("t").unwrap().timestamp_millis(),
        1_000_000_000
    );
}

#[test]
fn the_earliest_and_latest_datetimes_are_stored_and_found() {
    // Near the ends of the i64 range the rounded bucket start and the span arithmetic would
    // overflow; every such measurement must still be kept and found, before and after a flush.
    let ends = [
        i64::MIN,
        i64::MIN + 1,
        i64::MIN + 59_999,
        i64::MIN + 3_600_000,
        -1,
        0,
        i64::MAX - 3_600_000,
        i64::MAX - 1,
        i64::MAX,
    ];
    let dir = tempfile::tempdir().unwrap();
    let names = ["seconds", "minutes", "hours", "custom"];
    {
        let db = Database::open(dir.path()).unwrap();
        for name in names {
            let o = TimeseriesOptions::new("t").meta_field("m");
            let o = match name {
                "seconds" => o.granularity(Granularity::Seconds),
                "minutes" => o.granularity(Granularity::Minutes),
                "hours" => o.granularity(Granularity::Hours),
                _ => o.bucket_span(31_536_000, 31_536_000),
            };
            let c = db.create_collection(name, o).unwrap();
            // One batch out of order, then one at a time in the other direction.
            let batch: Vec<Document> = ends
                .iter()
                .rev()
                .map(|&t| doc! {"t": DateTime::from_millis(t), "m": 1, "x": t})
                .collect();
            c.insert_many(&batch).unwrap();
            for &t in &ends {
                c.insert_one(&doc! {"t": DateTime::from_millis(t), "m": 2, "x": t})
                    .unwrap();
            }
            assert_eq!(c.count_documents(doc! {}).unwrap(), 2 * ends.len() as u64);
        }
        db.close().unwrap();
    }
    let db = Database::open(dir.path()).unwrap();
    for round in ["reopened", "flushed"] {
        for name in names {
            let c = db.collection(name).unwrap();
            let mut got: Vec<i64> = all(&c, doc! {})
                .iter()
                .map(|d| d.get_datetime("t").unwrap().timestamp_millis())
                .collect();
            got.sort();
            let mut want: Vec<i64> = ends.iter().chain(&ends).copied().collect();
            want.sort();
            assert_eq!(got, want, "{name} {round}");
            for (filter, n) in [
                (doc! {"t": {"$lte": DateTime::from_millis(i64::MIN)}}, 2),
                (doc! {"t": {"$gte": DateTime::from_millis(i64::MAX)}}, 2),
                (doc! {"t": {"$lt": DateTime::from_millis(0)}}, 10),
                (doc! {"t": {"$gt": DateTime::from_millis(i64::MAX - 2)}}, 4),
            ] {
                let found = c.count_documents(filter.clone()).unwrap();
                assert_eq!(found, n, "{name} {round} {filter}");
            }
        }
        db.flush().unwrap();
    }
}

#[test]
fn find_returns_measurements_exactly_as_inserted() {
    let dir = tempfile::tempdir().unwrap();
    let inserted = vec![
        doc! {"_id": 1, "time": at("2024-01-01T00:00:00Z"), "tags": {"host": "h1", "dc": "x"}, "f": 1.5, "i": 7i64, "s": "a"},
        doc! {"time": at("2024-01-01T00:00:10Z"), "_id": ObjectId::new(), "tags": {"dc": "x", "host": "h1"}, "i": 8i64, "arr": [1, "two"], "n": Bson::Null},
        doc! {"tags": {"host": "h2", "dc": "y"}, "time": at("2024-01-01T00:00:05Z"), "_id": "str-id", "f": -0.0, "nested": {"z": 1, "a": {"b": true}}},
    ];
    {
        let db = Database::open(dir.path()).unwrap();
        let c = db
            .create_collection("c", TimeseriesOptions::new("time").meta_field("tags"))
            .unwrap();
        c.insert_many(&inserted).unwrap();
        let got = sorted_by_time(all(&c, doc! {}), "time");
        assert_eq!(got, sorted_by_time(inserted.clone(), "time"));
        db.close().unwrap();
    }
    for flush in [false, true] {
        let db = Database::open(dir.path()).unwrap();
        let c = db.collection("c").unwrap();
        if flush {
            db.flush().unwrap();
        }
        let got = sorted_by_time(all(&c, doc! {}), "time");
        assert_eq!(got.len(), 3);
        for (g, want) in got.iter().zip(sorted_by_time(inserted.clone(), "time")) {
            // Field order, types and the meta's own field order are preserved.
            assert_eq!(
                g.keys().collect::<Vec<_>>(),
                want.keys().collect::<Vec<_>>()
            );
            assert_eq!(format!("{g:?}"), format!("{want:?}"));
        }
        db.close().unwrap();
    }
}

#[test]
fn generated_ids_are_returned_and_stored() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t"))
        .unwrap();
    let r = c
        .insert_many(&[
            doc! {"t": at("2024-01-01T00:00:00Z"), "v": 1},
            doc! {"t": at("2024-01-01T00:00:01Z"), "v": 2},
        ])
        .unwrap();
    assert_eq!(r.inserted_count, 2);
    let got = sorted_by_time(all(&c, doc! {}), "t");
    for (d, id) in got.iter().zip(&r.inserted_ids) {
        assert_eq!(d.get("_id"), Some(id));
        assert_eq!(d.keys().next().map(String::as_str), Some("_id"));
    }
}

#[test]
fn a_bad_document_rejects_the_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("time").meta_field("m"))
        .unwrap();
    c.insert_one(&doc! {"time": at("2020-11-26T00:00:00Z"), "m": "A"})
        .unwrap();
    let before = c.stats().unwrap();
    for (bad, msg) in [
        (doc! {"m": "B"}, "must be present"),
        (
            doc! {"time": "invalid", "m": "B"},
            "valid BSON UTC datetime",
        ),
        (doc! {"time": 12345, "m": "B"}, "valid BSON UTC datetime"),
    ] {
        let batch = vec![doc! {"time": at("2020-11-26T00:00:01Z"), "m": "B"}, bad];
        let e = c.insert_many(&batch).unwrap_err();
        match &e {
            Error::InvalidDocument { index, message } => {
                assert_eq!(*index, 1);
                assert!(message.contains(msg), "{message}");
            }
            other => panic!("unexpected {other}"),
        }
        assert_eq!(e.code(), Some(2));
    }
    assert_eq!(c.count_documents(doc! {}).unwrap(), 1);
    let after = c.stats().unwrap();
    assert_eq!(after.wal_bytes, before.wal_bytes, "nothing was logged");
    assert_eq!(after.catalog, before.catalog);
}

#[test]
fn size_limits_refuse_the_batch_with_nothing_written() {
    use tsbucket::bson::RawDocumentBuf;
    use tsbucket::DbOptions;
    const MAX: usize = 4 << 20;
    const MAX_META: usize = 64 << 10;
    let dir = tempfile::tempdir().unwrap();
    let opts = DbOptions {
        max_batch_bytes: 6 << 20,
        ..DbOptions::default()
    };
    let db = Database::open_with(dir.path(), opts.clone()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    let t = at("2020-11-26T00:00:00Z");
    // A measurement of `len` bytes of BSON, with its `_id` first if `id`.
    let sized = |len: usize, id: bool| {
        let mut d = Document::new();
        if id {
            d.insert("_id", ObjectId::new());
        }
        d.insert("t", t);
        d.insert("s", "");
        let base = d.to_vec().unwrap().len();
        d.insert("s", "x".repeat(len - base));
        assert_eq!(d.to_vec().unwrap().len(), len);
        d
    };
    // A measurement whose meta value is `len` bytes of BSON: a document, or a string (whose
    // bytes are its length, its characters and a terminator).
    let with_meta = |len: usize, string: bool| {
        let m = match string {
            true => Bson::String("x".repeat(len - 5)),
            false => Bson::Document(doc! {"s": "x".repeat(len - 13)}),
        };
        let d = doc! {"t": t, "m": m};
        let bytes = d.to_vec().unwrap().len();
        assert_eq!(bytes, 4 + 1 + 2 + 8 + 1 + 2 + len + 1);
        d
    };
    let raw = |docs: &[Document]| -> Vec<RawDocumentBuf> {
        docs.iter()
            .map(|d| RawDocumentBuf::try_from(d).unwrap())
            .collect()
    };
    let good = doc! {"t": t, "m": "a"};
    let before = c.stats().unwrap();
    for (bad, what) in [
        (sized(MAX + 1, true), "measurement is 4194305 bytes"),
        // Its own bytes fit; with the 17 bytes of a generated `_id` they do not.
        (sized(MAX - 16, false), "measurement is 4194305 bytes"),
        (
            with_meta(MAX_META + 1, false),
            "meta field 'm' is 65537 bytes",
        ),
        (
            with_meta(MAX_META + 1, true),
            "meta field 'm' is 65537 bytes",
        ),
    ] {
        let batch = [good.clone(), bad];
        for e in [
            c.insert_many(&batch).unwrap_err(),
            c.insert_many_raw(&raw(&batch)).unwrap_err(),
        ] {
            match &e {
                Error::InvalidDocument { index, message } => {
                    assert_eq!(*index, 1);
                    assert!(message.contains(what), "{message}");
                }
                other => panic!("unexpected {other}"),
            }
        }
    }
    // Each measurement fits but the batch does not.
    let big = [sized(MAX, true), sized(MAX, true)];
    for e in [
        c.insert_many(&big).unwrap_err(),
        c.insert_many_raw(&raw(&big)).unwrap_err(),
    ] {
        assert!(
            matches!(&e, Error::BadValue(m) if m.contains("split it")),
            "{e}"
        );
    }
    let after = c.stats().unwrap();
    assert_eq!(after.wal_bytes, before.wal_bytes, "nothing was logged");
    assert_eq!(c.count_documents(doc! {}).unwrap(), 0);
    // At the limits everything is taken, and comes back as it went in after a reopen.
    let fits = [
        sized(MAX, true),
        sized(MAX - 17, false),
        with_meta(MAX_META, false),
        with_meta(MAX_META, true),
    ];
    // One call each: two of them would be over the batch limit.
    let mut ids = c.insert_many(&fits[..1]).unwrap().inserted_ids;
    ids.extend(c.insert_many(&fits[1..2]).unwrap().inserted_ids);
    c.insert_many_raw(&raw(&fits[2..])).unwrap();
    drop(c);
    db.close().unwrap();
    let db = Database::open_with(dir.path(), opts).unwrap();
    let c = db.collection("c").unwrap();
    assert_eq!(c.count_documents(doc! {}).unwrap(), 4);
    let got = all(&c, doc! {"_id": ids[1].clone()});
    let mut want = doc! {"_id": ids[1].clone()};
    want.extend(fits[1].clone());
    assert_eq!(got, vec![want]);
    assert_eq!(got[0].to_vec().unwrap().len(), MAX);
    assert_eq!(all(&c, doc! {"_id": ids[0].clone()}), vec![fits[0].clone()]);
    for m in [&fits[2], &fits[3]] {
        let found = all(&c, doc! {"m": m.get("m").unwrap().clone()});
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].get("m"), m.get("m"));
    }
}

#[test]
fn filters_on_time_and_meta_prune_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    let base = at("2024-01-01T00:00:00Z").timestamp_millis();
    let mut docs = Vec::new();
    for h in 0..24i64 {
        for host in ["a", "b"] {
            docs.push(doc! {"t": DateTime::from_millis(base + h * 3_600_000), "m": {"host": host}, "v": h});
        }
    }
    c.insert_many(&docs).unwrap();
    let t = DateTime::from_millis(base + 10 * 3_600_000);
    let f = doc! {"t": {"$gte": t}, "m.host": "a"};
    // Open buckets are pruned by their start, latest time and meta before being copied.
    let open = c.explain(f.clone()).unwrap();
    assert_eq!(open.buckets_total, 48, "{open:?}");
    assert_eq!(open.buckets_examined, 14, "{open:?}");
    assert_eq!(all(&c, f.clone()).len(), 14);
    db.flush().unwrap();
    let got = all(&c, f.clone());
    assert_eq!(got.len(), 14);
    assert!(got.iter().all(|d| d.get_i64("v").unwrap() >= 10));
    let ex = c.explain(f).unwrap();
    assert_eq!(ex.buckets_total, 48);
    // `m.host` was asked for before: its lookup leaves out host b's 24 buckets, and the
    // `_id` range the 10 of host a's that start before hour 10.
    assert_eq!(ex.meta_lookup.as_deref(), Some("host"));
    assert_eq!(ex.buckets_pruned_by_index, 24, "{ex:?}");
    assert_eq!(ex.buckets_pruned_by_id, 10, "{ex:?}");
    assert_eq!(ex.buckets_examined, 14, "{ex:?}");
    // A path asked for the first time goes through the `_id` walk.
    let g = doc! {"t": {"$gte": t}, "m": {"host": "a"}};
    let ex = c.explain(g).unwrap();
    assert_eq!(ex.meta_lookup, None);
    assert!(ex.buckets_pruned_by_id >= 16, "{ex:?}");
    assert_eq!(ex.buckets_examined, 14, "{ex:?}");
    assert_eq!(
        c.count_documents(doc! {"v": {"$in": [1, 2]}, "m.host": "b"})
            .unwrap(),
        2
    );
    assert_eq!(c.count_documents(doc! {"t": {"$lt": t}}).unwrap(), 20);
}

#[test]
fn find_options_sort_skip_limit_and_project() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t"))
        .unwrap();
    let base = at("2024-01-01T00:00:00Z").timestamp_millis();
    let docs: Vec<Document> = (0..10i64)
        .map(|i| doc! {"t": DateTime::from_millis(base + i * 1000), "v": (i * 7) % 10, "w": i})
        .collect();
    c.insert_many(&docs).unwrap();
    let got: Vec<Document> = c
        .find_with(
            doc! {},
            FindOptions {
                sort: Some(doc! {"v": -1}),
                skip: Some(1),
                limit: Some(3),
                projection: Some(doc! {"_id": 0, "v": 1}),
            },
        )
        .unwrap()
        .map(|d| d.unwrap())
        .collect();
    assert_eq!(
        got,
        vec![doc! {"v": 8i64}, doc! {"v": 7i64}, doc! {"v": 6i64}]
    );
}

#[test]
fn second_opener_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let e = Database::open(dir.path()).unwrap_err();
    assert!(matches!(e, Error::Locked(_)), "{e}");
    db.close().unwrap();
    Database::open(dir.path()).unwrap();
}

#[test]
fn stats_count_buckets_and_closures() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("time"))
        .unwrap();
    let base = at("2024-01-01T01:00:00Z").timestamp_millis();
    let docs: Vec<Document> = (0..1100i64)
        .map(|i| doc! {"_id": i, "time": DateTime::from_millis(base + i * 1000), "x": i})
        .collect();
    c.insert_many(&docs).unwrap();
    let s = c.stats().unwrap();
    assert_eq!(s.measurements, 1100);
    assert_eq!(s.buckets, 2);
    assert_eq!(s.catalog.num_buckets_closed_due_to_count, 1);
    assert_eq!(s.catalog.num_measurements_committed, 1100);
    db.flush().unwrap();
    let s = c.stats().unwrap();
    assert_eq!(s.measurements, 1100);
    assert_eq!(s.flushed_buckets, 2);
    assert!(s.segment_bytes > 0 && s.bytes_on_disk >= s.segment_bytes);
    let b = c.buckets(doc! {"control.count": 1000}).unwrap();
    assert_eq!(b.len(), 1);
    let min = b[0]
        .get_document("control")
        .unwrap()
        .get_document("min")
        .unwrap();
    assert_eq!(min.get_i64("_id").unwrap(), 0);
}

fn wal_files_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

/// Names in the database's log directory with the given suffix.
fn wal_names(dir: &std::path::Path, suffix: &str) -> Vec<String> {
    std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect()
}

#[test]
fn a_reclaimed_log_file_is_kept_for_reuse_and_not_counted_as_data() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t"))
        .unwrap();
    let pad = "x".repeat(400);
    let base = at("2024-01-01T00:00:00Z").timestamp_millis();
    let batch = |round: i64| -> Vec<Document> {
        (0..1000i64)
            .map(|i| doc! {"t": DateTime::from_millis(base + round * 1000 + i), "pad": &pad})
            .collect()
    };
    // About 20 MB of log: more than the quarter of a log file below which none is kept.
    for round in 0..45 {
        c.insert_many(&batch(round)).unwrap();
    }
    db.flush().unwrap();
    let s = c.stats().unwrap();
    assert_eq!(wal_names(dir.path(), ".free").len(), 1);
    assert!(s.wal_spare_bytes > 16 << 20, "{s:?}");
    assert_eq!(
        s.bytes_on_disk,
        s.segment_bytes + s.wal_bytes + s.manifest_bytes
    );
    assert!(s.bytes_on_disk < s.wal_spare_bytes);
    assert_eq!(s.wal_bytes + s.wal_spare_bytes, wal_files_bytes(dir.path()));
    // New records go into the kept file, and everything is there after a reopen.
    for round in 45..50 {
        c.insert_many(&batch(round)).unwrap();
    }
    assert!(wal_names(dir.path(), ".free").is_empty());
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("c").unwrap();
    assert_eq!(c.count_documents(doc! {}).unwrap(), 50_000);
    let s = c.stats().unwrap();
    assert_eq!(s.wal_bytes + s.wal_spare_bytes, wal_files_bytes(dir.path()));
}

#[test]
fn a_log_file_size_of_zero_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let opts = tsbucket::DbOptions {
        wal_file_bytes: 0,
        ..Default::default()
    };
    assert!(matches!(
        Database::open_with(&path, opts),
        Err(Error::InvalidOptions(_))
    ));
    assert!(!path.exists());
}

#[test]
fn reported_log_size_matches_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t"))
        .unwrap();
    let base = at("2024-01-01T00:00:00Z").timestamp_millis();
    for round in 0..3i64 {
        let docs: Vec<Document> = (0..500i64)
            .map(|i| doc! {"t": DateTime::from_millis(base + round * 1_000_000 + i), "v": i})
            .collect();
        c.insert_many(&docs).unwrap();
        // Not compared here: between inserts the log writer may be adding zeros ahead of its
        // records, which a flush waits for.
        db.flush().unwrap();
        let s = c.stats().unwrap();
        assert_eq!(s.wal_bytes + s.wal_spare_bytes, wal_files_bytes(dir.path()));
        assert_eq!(
            s.bytes_on_disk,
            s.segment_bytes + s.wal_bytes + s.manifest_bytes
        );
    }
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("c").unwrap();
    let s = c.stats().unwrap();
    assert_eq!(s.wal_bytes + s.wal_spare_bytes, wal_files_bytes(dir.path()));
}

#[test]
fn raw_inserts_match_document_inserts_and_refuse_bad_bytes() {
    use tsbucket::bson::RawDocumentBuf;
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    let docs = [
        doc! {"t": at("2024-01-01T00:00:00Z"), "m": {"z": 1, "a": 2}, "v": 1.5},
        doc! {"_id": 7, "t": at("2024-01-01T00:00:01Z"), "m": {"a": 2, "z": 1}, "v": 2i64},
    ];
    let raw: Vec<RawDocumentBuf> = docs
        .iter()
        .map(|d| RawDocumentBuf::try_from(d).unwrap())
        .collect();
    let r = c.insert_many_raw(&raw).unwrap();
    assert_eq!(r.inserted_count, 2);
    assert_eq!(r.inserted_ids[1], Bson::Int32(7));
    let got = sorted_by_time(all(&c, doc! {}), "t");
    let mut want0 = doc! {"_id": r.inserted_ids[0].clone()};
    want0.extend(docs[0].clone());
    assert_eq!(got, vec![want0, docs[1].clone()]);
    // One series (meta equality ignores field order); the `_id` type change from ObjectId to
    // int is a schema change, so the series has two buckets.
    assert_eq!(
        c.stats()
            .unwrap()
            .catalog
            .num_buckets_opened_due_to_metadata,
        1
    );
    assert_eq!(
        c.stats()
            .unwrap()
            .catalog
            .num_buckets_closed_due_to_schema_change,
        1
    );

    let before = c.stats().unwrap().wal_bytes;
    // Truncated inner document: the outer length still matches, the inner one does not.
    let mut bytes = doc! {"t": at("2024-01-01T00:00:02Z"), "m": {"a": 1}}
        .to_vec()
        .unwrap();
    let inner = bytes.iter().position(|&b| b == 0x03).unwrap() + 3;
    bytes[inner] = 0x7f;
    let bad = RawDocumentBuf::from_bytes(bytes).unwrap();
    let e = c.insert_many_raw(&[raw[0].clone(), bad]).unwrap_err();
    assert!(matches!(e, Error::InvalidDocument { index: 1, .. }), "{e}");
    // Duplicate top-level names are refused.
    let mut bytes = doc! {"t": at("2024-01-01T00:00:03Z"), "x": 1, "y": 2}
        .to_vec()
        .unwrap();
    let y = bytes.iter().rposition(|&b| b == b'y').unwrap();
    bytes[y] = b'x';
    let dup = RawDocumentBuf::from_bytes(bytes).unwrap();
    let e = c.insert_many_raw(&[dup]).unwrap_err();
    assert!(e.to_string().contains("more than once"), "{e}");
    // A time field that is missing or not a datetime, wherever the bad document is.
    for (i, bad) in [
        doc! {"m": 1, "v": 1},
        doc! {"m": 1, "t": "2024-01-01", "v": 1},
    ]
    .into_iter()
    .enumerate()
    {
        let batch = [raw[0].clone(), RawDocumentBuf::try_from(&bad).unwrap()];
        let e = c.insert_many_raw(&batch).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidDocument { index: 1, message } if message.contains("valid BSON UTC datetime")),
            "case {i}: {e}"
        );
    }
    assert_eq!(c.stats().unwrap().wal_bytes, before, "nothing was logged");
    assert_eq!(c.count_documents(doc! {}).unwrap(), 2);
}

#[test]
fn stats_gauges_follow_open_archived_and_flushed_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    let s = c.stats().unwrap();
    assert_eq!(s.catalog.avg_num_measurements_per_commit(), None);
    assert_eq!(
        (s.avg_measurements_per_bucket, s.avg_bucket_bytes),
        (0.0, 0)
    );

    c.insert_one(&doc! {"t": at("2024-04-08T00:00:00Z"), "m": 1, "x": 1})
        .unwrap();
    // Two hours later: past the span, so the first bucket is set aside for late data.
    c.insert_many(&[
        doc! {"t": at("2024-04-08T02:00:00Z"), "m": 1, "x": 2},
        doc! {"t": at("2024-04-08T02:00:01Z"), "m": 1, "x": 3},
    ])
    .unwrap();
    let s = c.stats().unwrap();
    assert_eq!((s.open_buckets, s.archived_buckets), (2, 1));
    assert_eq!(s.buckets, 2);
    assert_eq!(s.avg_measurements_per_bucket, 1.5);
    assert!(s.catalog_memory_bytes > 0);
    assert_eq!(s.catalog.num_commits, 2);
    assert_eq!(s.catalog.avg_num_measurements_per_commit(), Some(1));

    db.flush().unwrap();
    let s = c.stats().unwrap();
    assert_eq!(
        (s.open_buckets, s.archived_buckets, s.unflushed_buckets),
        (0, 0, 0)
    );
    assert_eq!(s.catalog_memory_bytes, 0);
    assert_eq!(s.flushed_buckets, 2);
    assert_eq!(s.avg_bucket_bytes, s.segment_bytes / 2);
    assert!(s.avg_bucket_bytes > 0);
}

#[test]
fn handles_and_cursors_move_between_threads() {
    fn send<T: Send>() {}
    send::<tsbucket::Cursor>();
    send::<tsbucket::Collection>();
    send::<Database>();
}

#[test]
fn handles_that_outlive_the_database_handle() {
    let dir = tempfile::tempdir().unwrap();
    let options = || TimeseriesOptions::new("t").meta_field("m");
    let row = |i: i64| doc! {"t": DateTime::from_millis(i), "m": 1};
    let rows: Vec<Document> = (0..3000).map(row).collect();
    // `close` with a collection handle and a cursor still alive.
    let db = Database::open(dir.path()).unwrap();
    let c = db.create_collection("c", options()).unwrap();
    c.insert_many(&rows).unwrap();
    let mut cursor = c.find(doc! {}).unwrap();
    assert!(cursor.next().unwrap().is_ok());
    db.close().unwrap();
    // The directory is free at once; the old handle refuses everything, writing nothing.
    let db = Database::open(dir.path()).unwrap();
    assert!(matches!(c.insert_one(&row(5000)), Err(Error::Closed)));
    assert!(matches!(c.insert_many(&rows), Err(Error::Closed)));
    assert!(matches!(c.count_documents(doc! {}), Err(Error::Closed)));
    assert!(matches!(c.find(doc! {}).err(), Some(Error::Closed)));
    assert!(matches!(c.buckets(doc! {}).err(), Some(Error::Closed)));
    assert!(matches!(c.stats().err(), Some(Error::Closed)));
    // A cursor opened before the close reads what it was opened on.
    let rest: Vec<Document> = cursor.collect::<tsbucket::Result<_>>().unwrap();
    assert_eq!(rest.len(), 2999);
    let again = db.collection("c").unwrap();
    assert_eq!(again.count_documents(doc! {}).unwrap(), 3000);
    // Dropping the database handle without `close` while a collection handle lives: the
    // database stays open, and its directory locked, until the last handle goes.
    drop(db);
    again.insert_one(&row(3000)).unwrap();
    assert!(matches!(Database::open(dir.path()), Err(Error::Locked(_))));
    drop(again);
    let db = Database::open(dir.path()).unwrap();
    assert_eq!(
        db.collection("c")
            .unwrap()
            .count_documents(doc! {})
            .unwrap(),
        3001
    );
}

#[test]
fn nesting_beyond_mongodbs_limit_is_refused_without_exhausting_the_stack() {
    use tsbucket::bson::RawDocumentBuf;
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t"))
        .unwrap();
    let t = at("2024-01-01T00:00:00Z");
    // A measurement whose field "x" holds `leaf` under `levels - 1` documents, so that the
    // deepest element (`leaf`'s own, if it has any) sits `levels` deep.
    let nested = |levels: usize, leaf: Bson| {
        let mut v = leaf;
        for _ in 1..levels {
            v = Bson::Document(doc! {"a": v});
        }
        doc! {"t": t, "x": v}
    };
    let raw = |d: &Document| RawDocumentBuf::try_from(d).unwrap();
    let good = doc! {"t": t};
    let before = c.stats().unwrap();
    // Elements at level 181: under documents, under arrays, in the scope of code.
    let scope = tsbucket::bson::JavaScriptCodeWithScope {
        code: "f()".into(),
        scope: doc! {"b": 1},
    };
    for bad in [
        nested(181, Bson::Int32(1)),
        nested(180, Bson::Array(vec![Bson::Int32(1)])),
        nested(180, Bson::Document(doc! {"b": 1})),
        nested(180, Bson::JavaScriptCodeWithScope(scope)),
    ] {
        for e in [
            c.insert_many(&[good.clone(), bad.clone()]).unwrap_err(),
            c.insert_many_raw(&[raw(&good), raw(&bad)]).unwrap_err(),
        ] {
            match &e {
                Error::InvalidDocument { index, message } => {
                    assert_eq!(*index, 1);
                    assert!(message.contains("nested more than 180 levels"), "{message}");
                }
                other => panic!("unexpected {other}"),
            }
        }
    }
    // Raw bytes nested a hundred thousand levels deep, as a hostile client could send them:
    // as a document, and as the scope of code (`{ length | code | scope }`).
    let mut inner = vec![5u8, 0, 0, 0, 0];
    for _ in 0..100_000 {
        let mut d = ((inner.len() + 8) as i32).to_le_bytes().to_vec();
        d.extend_from_slice(b"\x03a\0");
        d.extend_from_slice(&inner);
        d.push(0);
        inner = d;
    }
    let mut with_scope = ((4 + 4 + 2 + inner.len()) as i32).to_le_bytes().to_vec();
    with_scope.extend_from_slice(&2i32.to_le_bytes());
    with_scope.extend_from_slice(b"f\0");
    with_scope.extend_from_slice(&inner);
    for (kind, value) in [(3u8, &inner), (0x0F, &with_scope)] {
        let mut top = raw(&good).into_bytes();
        top.pop();
        top.push(kind);
        top.extend_from_slice(b"x\0");
        top.extend_from_slice(value);
        top.push(0);
        let n = top.len() as i32;
        top[..4].copy_from_slice(&n.to_le_bytes());
        let hostile = RawDocumentBuf::from_bytes(top).unwrap();
        let e = c.insert_many_raw(&[hostile]).unwrap_err();
        assert!(matches!(&e, Error::InvalidDocument { index: 0, .. }), "{e}");
    }
    let after = c.stats().unwrap();
    assert_eq!(after.wal_bytes, before.wal_bytes, "nothing was logged");
    // At the limit, and with empty documents and arrays one level below it (they hold no
    // element that deep), measurements are taken and come back as they went in.
    let deep = [
        nested(180, Bson::Int32(1)),
        nested(180, Bson::Document(doc! {})),
        nested(179, Bson::Array(vec![Bson::Array(vec![])])),
    ];
    c.insert_many(&deep[..2]).unwrap();
    c.insert_many_raw(&[raw(&deep[2])]).unwrap();
    db.flush().unwrap();
    let got: Vec<Document> = all(&c, doc! {})
        .into_iter()
        .map(|mut d| {
            d.remove("_id");
            d
        })
        .collect();
    assert_eq!(got.len(), 3);
    for d in &deep {
        assert!(got.contains(d));
    }
}

#[test]
fn filters_pipelines_and_updates_nested_too_deep_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    c.insert_one(&doc! {"t": at("2024-01-01T00:00:00Z"), "m": {"k": 1}})
        .unwrap();
    // A value whose deepest element sits `levels` below it.
    let deep = |levels: usize| {
        let mut v = Bson::Int32(1);
        for _ in 0..levels {
            v = Bson::Document(doc! {"a": v});
        }
        v
    };
    // Far past the limit, though shallow enough for the bson crate's own recursive walks
    // (cloning, dropping) on a test thread's stack in a debug build.
    let hostile = deep(400);
    let refused = |r: tsbucket::Result<()>, what: &str| match r {
        Err(Error::BadValue(m)) => assert!(m.contains("levels deep"), "{what}: {m}"),
        other => panic!("{what}: {other:?}"),
    };
    refused(c.find(doc! {"m": hostile.clone()}).map(|_| ()), "find");
    refused(
        c.count_documents(doc! {"m": hostile.clone()}).map(|_| ()),
        "count",
    );
    refused(
        c.buckets(doc! {"m": hostile.clone()}).map(|_| ()),
        "buckets",
    );
    refused(
        c.delete_many(doc! {"m": hostile.clone()}).map(|_| ()),
        "delete",
    );
    refused(
        c.aggregate(vec![doc! {"$match": {"m": hostile.clone()}}])
            .map(|_| ()),
        "$match",
    );
    refused(
        c.aggregate(vec![doc! {"$project": {"v": hostile.clone()}}])
            .map(|_| ()),
        "$project",
    );
    refused(
        c.update_many(doc! {}, doc! {"$set": {"m": hostile.clone()}})
            .map(|_| ()),
        "$set",
    );
    // A value shallow enough in itself, set at a path that puts it too deep.
    let path = format!("m{}", ".a".repeat(99));
    refused(
        c.update_many(doc! {}, doc! {"$set": {path: deep(100)}})
            .map(|_| ()),
        "dotted $set",
    );
    // Nothing changed; a meta value at the limit is set and found.
    assert_eq!(all(&c, doc! {"m": {"k": 1}}).len(), 1);
    let at_limit = deep(179);
    c.update_many(doc! {}, doc! {"$set": {"m": at_limit.clone()}})
        .unwrap();
    assert_eq!(all(&c, doc! {"m": at_limit}).len(), 1);
}

#[test]
fn wide_measurements_round_trip() {
    // Thousands of fields per bucket: the control lists, sums and column lookups of a
    // bucket that wide take the paths meant for it (sets and ordered walks, not searches).
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    let docs: Vec<Document> = (0..6i64)
        .map(|j| {
            let mut d = doc! {"t": DateTime::from_millis(1_000 * j), "m": "host"};
            for i in 0..3000i64 {
                // Every row leaves out a different tenth of the fields.
                if (i + j) % 10 == 0 {
                    continue;
                }
                match i % 3 {
                    0 => d.insert(format!("i{i}"), i * j),
                    1 => d.insert(format!("f{i}"), (i * j) as f64 / 4.0),
                    _ => d.insert(format!("s{i}"), format!("v{}", (i + j) % 7)),
                };
            }
            d
        })
        .collect();
    c.insert_many(&docs[..3]).unwrap();
    c.insert_many(&docs[3..]).unwrap();
    let check = |c: &tsbucket::Collection, when: &str| {
        let mut got = all(c, doc! {});
        got.sort_by_key(|d| d.get_datetime("t").unwrap().timestamp_millis());
        let got: Vec<Document> = got
            .into_iter()
            .map(|mut d| {
                d.remove("_id");
                d
            })
            .collect();
        assert_eq!(got, docs, "{when}");
        assert_eq!(
            c.count_documents(doc! {"i2997": {"$gte": 2997}}).unwrap(),
            4,
            "{when}"
        );
        let sums = c
            .aggregate(vec![
                doc! {"$group": {"_id": null, "n": {"$sum": "$i2997"}}},
            ])
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(sums.get_i64("n").unwrap(), 2997 * (1 + 2 + 4 + 5), "{when}");
    };
    check(&c, "open buckets");
    db.flush().unwrap();
    check(&c, "flushed");
    drop(c);
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    check(&db.collection("c").unwrap(), "reopened");
}

/// `d` as raw BSON in which the field named `dupB` is renamed `dupA`: BSON can repeat a name,
/// a `Document` cannot.
fn with_repeated_name(d: &Document) -> tsbucket::bson::RawDocumentBuf {
    let mut bytes = d.to_vec().unwrap();
    let at = bytes.windows(5).position(|w| w == b"dupB\0").unwrap();
    bytes[at + 3] = b'A';
    tsbucket::bson::RawDocumentBuf::from_bytes(bytes).unwrap()
}

#[test]
fn names_repeated_inside_embedded_documents_are_refused_and_nothing_is_written() {
    use tsbucket::bson::{RawDocumentBuf, Regex};
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
        .unwrap();
    let t = |s: i64| DateTime::from_millis(1_700_000_000_000 + s * 1000);
    let good = |s: i64| doc! {"t": t(s), "m": {"host": "a"}, "x": {"dupA": 1, "v": s}};
    let raw_good = |s: i64| RawDocumentBuf::try_from(&good(s)).unwrap();
    c.insert_many_raw(&(0..5).map(raw_good).collect::<Vec<_>>())
        .unwrap();
    let wide: Document = (0..40).map(|i| (format!("f{i}"), Bson::Int32(i))).collect();
    let mut wide_dup = wide.clone();
    wide_dup.insert("dupA", 1);
    wide_dup.insert("dupB", 2);
    let regex = Regex {
        pattern: "a".to_string().try_into().unwrap(),
        options: "".to_string().try_into().unwrap(),
    };
    let cases = [
        // The same fields as the rows before, so the row meets what was learnt from them.
        (
            doc! {"t": t(9), "m": {"host": "a"}, "x": {"dupA": 1, "dupB": 2}},
            "x.dupA",
        ),
        (
            doc! {"t": t(9), "m": {"host": "a", "dupA": 1, "dupB": 2}, "x": 1},
            "m.dupA",
        ),
        (
            doc! {"t": t(9), "x": [1, {"dupA": 1, "dupB": 2}]},
            "x.1.dupA",
        ),
        (
            doc! {"t": t(9), "x": {"y": {"z": {"dupA": 1, "dupB": 2}}}},
            "x.y.z.dupA",
        ),
        (doc! {"t": t(9), "x": wide_dup}, "x.dupA"),
        // A type the fast checks leave to the bson crate's.
        (
            doc! {"t": t(9), "r": regex, "x": {"dupA": 1, "dupB": 2}},
            "x.dupA",
        ),
    ];
    for (bad, path) in &cases {
        let batch = vec![
            raw_good(6),
            raw_good(7),
            with_repeated_name(bad),
            raw_good(8),
        ];
        let e = c.insert_many_raw(&batch).unwrap_err();
        let want = format!("field name \"{path}\" appears more than once");
        assert!(
            matches!(&e, Error::InvalidDocument { index: 2, message } if *message == want),
            "{bad}: {e}"
        );
        // Alone, too, before anything is learnt.
        let e = c.insert_many_raw(&[with_repeated_name(bad)]).unwrap_err();
        assert!(matches!(&e, Error::InvalidDocument { index: 0, .. }), "{e}");
    }
    // Names repeated across documents, or an array's, are fine.
    c.insert_many_raw(&[RawDocumentBuf::try_from(
        &doc! {"t": t(10), "x": {"v": 1, "w": {"v": 2}}, "y": wide, "z": [{"v": 1}, {"v": 2}]},
    )
    .unwrap()])
        .unwrap();
    assert_eq!(c.count_documents(doc! {}).unwrap(), 6);
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db.collection("c").unwrap();
    assert_eq!(c.count_documents(doc! {}).unwrap(), 6);
    assert_eq!(c.count_documents(doc! {"x.dupA": 1}).unwrap(), 5);
}

#[test]
fn the_directory_opens_again_as_soon_as_the_last_handle_is_dropped() {
    // The flusher is woken by nearly every insert here, so it often holds the engine for a
    // moment when the handles go; the directory must be free all the same.
    let dir = tempfile::tempdir().unwrap();
    let opts = || DbOptions {
        flush_threshold_bytes: 1,
        ..DbOptions::default()
    };
    let options = || TimeseriesOptions::new("t").meta_field("m");
    let mut total = 0;
    for round in 0..150i64 {
        let db = Database::open_with(dir.path(), opts()).unwrap();
        let c = match round {
            0 => db.create_collection("c", options()).unwrap(),
            _ => db.collection("c").unwrap(),
        };
        for i in 0..4 {
            let t = round * 100 + i;
            c.insert_one(&doc! {"t": DateTime::from_millis(t * 1000), "m": i % 2})
                .unwrap();
            total += 1;
        }
        // Either handle may be the last; both orders are tried.
        if round % 2 == 0 {
            drop(db);
            drop(c);
        } else {
            drop(c);
            drop(db);
        }
    }
    let db = Database::open(dir.path()).unwrap();
    let n = db
        .collection("c")
        .unwrap()
        .count_documents(doc! {})
        .unwrap();
    assert_eq!(n, total);
}
