use super::*;
use crate::catalog::column::{Data, RunningStats};
use crate::ingest::prepare_batch;
use bson::{doc, DateTime};
use bson::{Bson, Document};

fn fields() -> Schema {
    Schema::new("t", Some("m"), 3600, 60)
}

fn catalog(span_s: i64, rounding_s: i64) -> CollCatalog {
    CollCatalog::new(
        Schema::new("t", Some("m"), span_s, rounding_s),
        FitLimits {
            max_count: 1000,
            max_size: 128_000,
            min_count: 10,
            large_max_size: 12 << 20,
        },
    )
}

fn ms(s: &str) -> i64 {
    DateTime::parse_rfc3339_str(s).unwrap().timestamp_millis()
}

fn put(c: &mut CollCatalog, d: Document) {
    c.begin_batch();
    let (mut p, payload, _) = prepare_batch(1, &[d], &fields()).unwrap();
    let mut p = p.remove(0);
    let raw = p.raw(&payload).unwrap();
    p.size = 100;
    c.insert(&p, raw, 1, 0);
}

fn buckets(c: &CollCatalog) -> Vec<BucketData> {
    let mut v = c.snapshot_open();
    v.extend(c.closed().iter().map(|b| (**b.data()).clone()));
    v.sort_by_key(|b| b.id.bytes());
    v
}

fn at(t: &str) -> Bson {
    Bson::DateTime(DateTime::parse_rfc3339_str(t).unwrap())
}

#[test]
fn rounding_and_span_seconds() {
    // Seconds: a bucket's start is its first time rounded down to the minute, and it spans an
    // hour; the first time past that opens a second bucket.
    let mut c = catalog(3600, 60);
    for t in [
        "2021-04-22T20:10:14.134Z",
        "2021-04-22T20:10:05.000Z",
        "2021-04-22T21:09:59.999Z",
    ] {
        put(&mut c, doc! {"t": at(t), "m": 1});
    }
    let b = buckets(&c);
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].min.get("t"), Some(&at("2021-04-22T20:10:00Z")));
    assert_eq!(b[0].max.get("t"), Some(&at("2021-04-22T21:09:59.999Z")));
    assert_eq!(
        b[0].id.timestamp().timestamp_millis(),
        ms("2021-04-22T20:10:00Z")
    );
    put(&mut c, doc! {"t": at("2021-04-22T21:10:00Z"), "m": 1});
    assert_eq!(buckets(&c).len(), 2);
    assert_eq!(c.stats().num_buckets_closed_due_to_time_forward, 1);
}

#[test]
fn rounding_and_span_minutes_and_hours() {
    // Minutes round to the hour and span a day; hours round to the day and span 30 days.
    let mut c = catalog(86_400, 3600);
    for t in [
        "2021-04-22T20:10:14.134Z",
        "2021-04-22T20:05:00Z",
        "2021-04-23T19:59:59.999Z",
    ] {
        put(&mut c, doc! {"t": at(t), "m": 1});
    }
    assert_eq!(buckets(&c).len(), 1);
    assert_eq!(
        buckets(&c)[0].min.get("t"),
        Some(&at("2021-04-22T20:00:00Z"))
    );
    put(&mut c, doc! {"t": at("2021-04-23T20:00:00Z"), "m": 1});
    assert_eq!(buckets(&c).len(), 2);

    let mut c = catalog(2_592_000, 86_400);
    for t in [
        "2021-04-22T20:10:14.134Z",
        "2021-04-22T10:00:00Z",
        "2021-05-21T23:59:59.999Z",
    ] {
        put(&mut c, doc! {"t": at(t), "m": 1});
    }
    assert_eq!(buckets(&c).len(), 1);
    assert_eq!(
        buckets(&c)[0].min.get("t"),
        Some(&at("2021-04-22T00:00:00Z"))
    );
    put(&mut c, doc! {"t": at("2021-05-22T00:00:00Z"), "m": 1});
    assert_eq!(buckets(&c).len(), 2);
}

#[test]
fn count_limit_closes_at_1000() {
    // A bucket closes at 1000 measurements, and the next measurement opens another.
    let mut c = catalog(3600, 60);
    let base = ms("2024-01-01T01:00:00Z");
    for i in 0..1100i64 {
        put(
            &mut c,
            doc! {"_id": i, "t": DateTime::from_millis(base + i * 1000), "x": i},
        );
    }
    let b = buckets(&c);
    assert_eq!(b.len(), 2);
    let first = b.iter().find(|b| b.count == 1000).unwrap();
    assert_eq!(first.min.get("_id"), Some(&Bson::Int64(0)));
    assert_eq!(first.max.get("_id"), Some(&Bson::Int64(999)));
    assert_eq!(c.stats().num_buckets_closed_due_to_count, 1);
}

#[test]
fn time_backward_opens_new_buckets() {
    // Descending minutes, each below the previous bucket's rounded start.
    let mut c = catalog(3600, 60);
    let base = ms("2024-04-08T00:10:00Z");
    for i in 0..10i64 {
        put(
            &mut c,
            doc! {"t": DateTime::from_millis(base - i * 60_000), "m": 1, "x": 1},
        );
    }
    assert_eq!(buckets(&c).len(), 10);
    assert_eq!(c.stats().num_buckets_closed_due_to_time_backward, 9);
    assert_eq!(c.stats().num_buckets_opened_due_to_metadata, 1);
    assert_eq!(c.stats().num_commits, 10);
    assert_eq!(c.stats().num_measurements_committed, 10);
}

#[test]
fn alternating_days_reopen_their_buckets() {
    // 2000 measurements of one series alternating between two days give 4 buckets
    // (MongoDB 5.0 made 4000).
    let mut c = catalog(3600, 60);
    let d1 = ms("2021-06-01T10:00:00Z");
    let d2 = ms("2021-06-02T10:00:00Z");
    for i in 0..2000i64 {
        let t = if i % 2 == 0 { d1 } else { d2 } + i;
        put(
            &mut c,
            doc! {"t": DateTime::from_millis(t), "m": "s", "v": i},
        );
    }
    for i in 0..2000i64 {
        let t = if i % 2 == 0 { d1 } else { d2 } + 2000 + i;
        put(
            &mut c,
            doc! {"t": DateTime::from_millis(t), "m": "s", "v": i},
        );
    }
    let b = buckets(&c);
    assert_eq!(
        b.len(),
        4,
        "{:?}",
        b.iter().map(|b| b.count).collect::<Vec<_>>()
    );
    assert!(b.iter().all(|b| b.count == 1000));
}

#[test]
fn a_set_aside_bucket_closes_once_its_series_has_moved_on() {
    let mut c = catalog(3600, 3600);
    let h0 = ms("2021-06-01T10:00:00Z");
    let h1 = h0 + 3_600_000;
    let put_at = |c: &mut CollCatalog, t: i64| {
        put(c, doc! {"t": DateTime::from_millis(t), "m": "s", "v": 1});
    };
    for i in 0..360 {
        put_at(&mut c, h0 + i * 10_000);
    }
    // The next hour sets the first bucket aside; a late measurement still joins it.
    put_at(&mut c, h1);
    put_at(&mut c, h0 + 5);
    assert_eq!((c.open_buckets(), c.archived_buckets()), (2, 1));
    for i in 1..SET_ASIDE_IDLE_INSERTS as i64 {
        put_at(&mut c, h1 + i * 10_000);
    }
    assert_eq!((c.open_buckets(), c.closed().len()), (2, 0));
    put_at(&mut c, h1 + 3_000_000);
    assert_eq!((c.open_buckets(), c.closed().len()), (1, 1));
    assert_eq!(c.closed()[0].count(), 361);
    // Once for the late measurement, once for the next hour's bucket after it.
    assert_eq!(c.stats().num_buckets_reopened, 2);
}

#[test]
fn schema_change_closes_bucket() {
    // A field whose type class changes closes the bucket, once per change.
    let mut c = catalog(3600, 60);
    let t = at("2024-04-08T10:00:00Z");
    let values: Vec<Bson> = vec![
        Bson::ObjectId(ObjectId::new()),
        Bson::Array(vec![1.into(), 2.into()]),
        at("2024-01-01T00:00:00Z"),
        Bson::Undefined,
        "MongoDB".into(),
        Bson::Decimal128("9223372036854775807".parse().unwrap()),
        Bson::Document(doc! {"a": 20}),
        42.into(),
    ];
    for (i, v) in values.into_iter().enumerate() {
        put(&mut c, doc! {"t": t.clone(), "m": 0, "x": v});
        assert_eq!(c.stats().num_buckets_closed_due_to_schema_change, i as u64);
    }
    // Numbers of different types are one class.
    let mut c = catalog(3600, 60);
    for v in [Bson::Int32(1), Bson::Int64(2), Bson::Double(3.0)] {
        put(&mut c, doc! {"t": t.clone(), "m": 0, "x": v});
    }
    assert_eq!(c.stats().num_buckets_closed_due_to_schema_change, 0);
}

#[test]
fn meta_field_order_does_not_split_series() {
    // Meta documents that differ only in field order are one series.
    let mut c = catalog(3600, 60);
    let base = ms("2024-01-01T00:00:00Z");
    let metas = [
        doc! {"a": 1, "b": 1},
        doc! {"a": 1, "b": 1},
        doc! {"b": 1, "a": 1},
        doc! {"a": 1},
    ];
    for (i, m) in metas.into_iter().enumerate() {
        put(
            &mut c,
            doc! {"t": DateTime::from_millis(base + i as i64 * 600_000), "m": m},
        );
    }
    let mut counts: Vec<u32> = buckets(&c).iter().map(|b| b.count).collect();
    counts.sort();
    assert_eq!(counts, vec![1, 3]);
}

#[test]
fn sparse_field_has_only_its_rows() {
    let mut c = catalog(3600, 60);
    let base = ms("2024-01-01T00:00:00Z");
    put(
        &mut c,
        doc! {"t": DateTime::from_millis(base), "m": 1, "a": 1},
    );
    put(
        &mut c,
        doc! {"t": DateTime::from_millis(base + 1), "m": 1, "a": 2},
    );
    put(
        &mut c,
        doc! {"t": DateTime::from_millis(base + 2), "m": 1, "a": 3, "late": true},
    );
    let b = &buckets(&c)[0];
    let late = b.columns.iter().find(|c| c.name == "late").unwrap();
    assert_eq!(late.values, vec![None, None, Some(Bson::Boolean(true))]);
}

#[test]
fn memory_limit_closes_least_recently_used_first() {
    let mut c = catalog(3600, 60);
    let base = ms("2024-01-01T00:00:00Z");
    for i in 0..10 {
        put(&mut c, doc! {"t": DateTime::from_millis(base), "m": i});
    }
    put(&mut c, doc! {"t": DateTime::from_millis(base), "m": 0});
    let one = c.memory() / 10;
    c.close_idle(one * 5);
    assert!(c.stats().num_buckets_closed_due_to_memory_threshold >= 5);
    // Series 0 was touched last, so it is still open.
    assert!(c
        .snapshot_open()
        .iter()
        .any(|b| b.meta == Some(Bson::Int32(0))));
}

#[test]
fn rows_are_sorted_by_time_with_every_column_permuted_alike() {
    let mut c = catalog(3600, 60);
    let base = ms("2024-01-01T00:00:00Z");
    for (i, dt) in [30i64, 10, 20, 0].into_iter().enumerate() {
        let mut d = doc! {"t": DateTime::from_millis(base + dt * 1000), "m": 1, "v": dt};
        if i == 1 {
            d.insert("only_in_second", true);
        }
        put(&mut c, d);
    }
    let b = &buckets(&c)[0];
    let col = |n: &str| &b.columns.iter().find(|c| c.name == n).unwrap().values;
    let times: Vec<i64> = col("t")
        .iter()
        .map(|v| match v {
            Some(Bson::DateTime(t)) => t.timestamp_millis() - base,
            _ => -1,
        })
        .collect();
    assert_eq!(times, vec![0, 10_000, 20_000, 30_000]);
    let vs: Vec<Option<Bson>> = vec![
        Some(0i64.into()),
        Some(10i64.into()),
        Some(20i64.into()),
        Some(30i64.into()),
    ];
    assert_eq!(col("v"), &vs);
    assert_eq!(
        col("only_in_second"),
        &vec![None, Some(Bson::Boolean(true)), None, None]
    );
    // The row that had the extra field keeps its own shape after the move.
    assert_eq!(b.row_shapes.len(), 4);
    assert_ne!(b.row_shapes[1], b.row_shapes[0]);
    assert_eq!(b.row_shapes[0], b.row_shapes[2]);
}

/// Sums of a snapshot must be what `sums::bucket_sums` finds in its stored rows, bit for bit,
/// whichever path (typed vectors or sorted columns) computed them.
fn assert_sums_match_rows(b: &BucketData) {
    let want = crate::sums::bucket_sums(b, "t");
    let got = b
        .max
        .get_document(crate::sums::SUM_KEY)
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (k, w) in &want {
        let g = got.get(k).unwrap();
        let same = match (g, w) {
            (Bson::Double(x), Bson::Double(y)) => x.to_bits() == y.to_bits(),
            _ => g == w,
        };
        assert!(same, "{k}: {g} vs {w}");
    }
}

#[test]
fn open_and_closed_buckets_carry_sums_of_numeric_fields() {
    let mut c = catalog(3600, 60);
    let t0 = ms("2021-04-22T20:00:00Z");
    // Arrival out of time order (the snapshot sorts rows), sparse and mixed numeric fields.
    for (i, dt) in [5_000, 1_000, 3_000, 2_000, 4_000].iter().enumerate() {
        let i = i as i32;
        let mut d =
            doc! {"t": DateTime::from_millis(t0 + dt), "m": "a", "i": i, "f": 0.1 * f64::from(i)};
        if i % 2 == 0 {
            d.insert(
                "sparse",
                if i == 2 {
                    Bson::Int64(7)
                } else {
                    Bson::Int32(i)
                },
            );
        }
        d.insert("s", format!("x{i}"));
        put(&mut c, d);
    }
    // In time order: the typed path.
    for i in 0..4 {
        put(
            &mut c,
            doc! {"t": DateTime::from_millis(t0 + i), "m": "b", "i": i32::MAX, "f": 0.1},
        );
    }
    let open = buckets(&c);
    assert_eq!(open.len(), 2);
    for b in &open {
        assert_sums_match_rows(b);
        assert!(crate::sums::bucket_sum(&b.max, "s").is_none());
        assert!(crate::sums::bucket_sum(&b.max, "t").is_none());
        assert!(crate::sums::bucket_sum(&b.max, "m").is_none());
        assert!(crate::sums::bucket_sum(&b.max, SEQ_COLUMN).is_none());
    }
    let a = open
        .iter()
        .find(|b| b.meta == Some(Bson::String("a".into())))
        .unwrap();
    assert_eq!(crate::sums::bucket_sum(&a.max, "i"), Some(&Bson::Int32(10)));
    assert_eq!(
        crate::sums::bucket_sum(&a.max, "sparse"),
        Some(&Bson::Int64(11))
    );
    let b = open
        .iter()
        .find(|b| b.meta == Some(Bson::String("b".into())))
        .unwrap();
    assert_eq!(
        crate::sums::bucket_sum(&b.max, "i"),
        Some(&Bson::Int64(4 * i64::from(i32::MAX)))
    );
    c.close_all();
    for b in c.take_closed() {
        let b = b.data();
        assert_sums_match_rows(b);
        assert!(open.iter().any(|o| o.max == b.max));
    }
}

/// A row for [`rows_wait_unsplit_with_the_same_result`]: mostly one shape, with the breaks
/// that end waiting (other field order, a missing or extra field, another type, a nested
/// value, a meta value in another field order or of another type).
fn varied_row(kind: u8, i: i64, in_order: bool) -> Document {
    let step = if in_order {
        i * 500
    } else {
        (i * 7919) % 50_000
    };
    let t = DateTime::from_millis(1_600_000_000_000 + step);
    let meta = doc! {"host": "h1", "dc": "eu"};
    match kind % 12 {
        0 => doc! {"t": t, "m": {"dc": "eu", "host": "h1"}, "a": i, "s": format!("v{i}")},
        1 => doc! {"t": t, "m": meta, "s": format!("v{i}"), "a": i},
        2 => doc! {"t": t, "m": meta, "a": i},
        3 => doc! {"t": t, "m": meta, "a": i as f64 / 3.0, "s": "x"},
        4 => doc! {"t": t, "m": meta, "a": i, "s": "x", "n": {"k": i}},
        5 => doc! {"t": t, "m": meta, "a": "text", "s": "x"},
        6 => doc! {"m": meta, "t": t, "a": i, "s": "x", "b": true, "z": Bson::Null},
        7 => doc! {"t": t, "m": meta, "a": i as i32, "s": "x"},
        // Only fixed-width values: rows of these shapes wait as their values alone.
        8 => {
            doc! {"t": t, "m": meta, "a": i, "f": i as f64 / 7.0, "b": i % 3 == 0, "z": Bson::Null}
        }
        9 => doc! {"t": t, "a": i, "m": meta, "o": ObjectId::from_bytes([i as u8; 12])},
        _ => doc! {"t": t, "m": meta, "a": i, "s": format!("v{i}")},
    }
}

/// An open bucket's copy for reads with its values spread out per row, and the snapshot of
/// the same bucket less the log's bookkeeping columns (which the copy leaves out).
fn copied_and_snapshot(b: &BucketBuilder) -> (BucketData, BucketData) {
    let c = b.copy_for_read();
    let rows = c.head.count as usize;
    let mut copied = BucketData::clone(&c.head);
    copied.columns = c
        .names()
        .into_iter()
        .map(|name| {
            let col = c.column(name).unwrap();
            let mut values = vec![None; rows];
            for i in 0..col.data.len() {
                let r = col.rows.map_or(i, |at| at[i] as usize);
                values[r] = Some(col.data.get(i));
            }
            crate::bucket::Column {
                name: name.to_string(),
                values,
            }
        })
        .collect();
    let mut snap = b.snapshot();
    snap.columns
        .retain(|c| c.name != SEQ_COLUMN && c.name != IDX_COLUMN);
    (copied, snap)
}

proptest::proptest! {
    /// Rows that wait unsplit give the bucket a deferring builder produces exactly what
    /// splitting every row on arrival produces: same refusals, same snapshots (open and
    /// finished), same meta flags. Either way, the columns encoded straight from the typed
    /// vectors are those of the finished snapshot, whenever rows arrived in time order.
    #[test]
    fn rows_wait_unsplit_with_the_same_result(
        kinds in proptest::collection::vec(0u8..24, 1..60),
        probe in 0usize..60,
        source in 0u8..3,
        in_order: bool,
        repeat in 0usize..60,
    ) {
        // The first `repeat` rows share the first row's shape, so rows wait unsplit for a
        // while before a break (if any) ends it.
        let docs: Vec<Document> = kinds
            .iter()
            .enumerate()
            .map(|(i, &k)| varied_row(if i < repeat { kinds[0] } else { k }, i as i64, in_order))
            .collect();
        // The rows as each way into the catalog prepares them: documents, BSON bytes, and
        // recovery replaying the log record.
        let (prepared, payload) = match source {
            0 => {
                let (p, payload, _) = prepare_batch(1, &docs, &fields()).unwrap();
                (p, payload)
            }
            1 => {
                let raw: Vec<bson::RawDocumentBuf> =
                    docs.iter().map(|d| d.try_into().unwrap()).collect();
                let (p, payload, _) =
                    crate::ingest::prepare_raw_batch(1, &raw, &fields()).unwrap();
                (p, payload)
            }
            _ => {
                let (_, payload, _) = prepare_batch(1, &docs, &fields()).unwrap();
                let record = crate::ingest::decode_insert(&payload).unwrap().unwrap();
                let p = crate::ingest::prepare_replayed(&payload, &record, &fields()).unwrap();
                (p, payload)
            }
        };
        let start = prepared[0].time_ms - prepared[0].time_ms % 60_000;
        let meta = Some(Bson::Document(doc! {"host": "h1", "dc": "eu"}));
        let new = || {
            BucketBuilder::new(ObjectId::from_bytes([1; 12]), start, meta.clone(), "t", Some("m"))
        };
        let (mut lazy, mut eager) = (new(), new().splitting_every_row());
        let limits = FitLimits {
            max_count: 1000,
            max_size: 128_000,
            min_count: 10,
            large_max_size: 12 << 20,
        };
        let mut times = Vec::new();
        for (i, p) in prepared.iter().enumerate() {
            let raw = p.raw(&payload).unwrap();
            let a = lazy.try_push(raw, p, 1, i as u32, &limits);
            let b = eager.try_push(raw, p, 1, i as u32, &limits);
            proptest::prop_assert_eq!(a, b);
            if a.is_ok() {
                times.push(p.time_ms);
            }
            if i == probe {
                proptest::prop_assert_eq!(lazy.snapshot(), eager.snapshot());
                let (copied, snap) = copied_and_snapshot(&lazy);
                proptest::prop_assert_eq!(copied, snap);
            }
        }
        // A read's copy holds the values of the snapshot, in its order, whether the rows
        // were split by a read before or not.
        for b in [&lazy, &eager, &lazy] {
            let (copied, snap) = copied_and_snapshot(b);
            proptest::prop_assert_eq!(copied, snap);
        }
        proptest::prop_assert_eq!(lazy.meta_varies(), eager.meta_varies());
        proptest::prop_assert_eq!(lazy.count, eager.count);
        // Encoding leaves the bucket readable: the snapshots below come after it.
        let (lazy_enc, eager_enc) = (lazy.encode(), eager.encode());
        let sorted = times.windows(2).all(|w| w[0] <= w[1]);
        proptest::prop_assert_eq!(lazy_enc.is_some(), sorted);
        proptest::prop_assert_eq!(eager_enc.is_some(), lazy_enc.is_some());
        let finished = lazy.finish();
        proptest::prop_assert_eq!(&finished, &eager.finish());
        let from_data = crate::bucket::EncodedBucket::from_data(&finished);
        for e in [lazy_enc, eager_enc].into_iter().flatten() {
            proptest::prop_assert_eq!(&e, &from_data);
        }
    }
}

#[test]
fn meta_values_compare_by_their_bytes_in_place() {
    // A row whose meta equals the bucket's only up to field order or numeric type keeps its own
    // value; an identical one does not, for every common meta type.
    for (meta, other) in [
        (Bson::String("h1".into()), Bson::String("h2".into())),
        (Bson::Int32(7), Bson::Int64(7)),
        (Bson::Int64(7), Bson::Int64(8)),
        (Bson::Double(0.5), Bson::Double(-0.5)),
        (
            Bson::DateTime(DateTime::from_millis(5)),
            Bson::DateTime(DateTime::from_millis(6)),
        ),
        (Bson::Boolean(true), Bson::Boolean(false)),
        (
            Bson::ObjectId(ObjectId::from_bytes([1; 12])),
            Bson::ObjectId(ObjectId::from_bytes([2; 12])),
        ),
        (
            Bson::Document(doc! {"a": 1, "b": 2}),
            Bson::Document(doc! {"b": 2, "a": 1}),
        ),
        (Bson::Array(vec![1.into()]), Bson::Array(vec![2.into()])),
        (Bson::Null, Bson::Undefined),
    ] {
        let t = DateTime::from_millis(0);
        // A sparse field makes the bucket split rows on arrival, where note_meta runs.
        let rows = [
            doc! {"t": t, "m": meta.clone(), "x": 1},
            doc! {"t": t, "m": meta.clone(), "y": 1},
            doc! {"t": t, "m": other.clone(), "x": 2},
        ];
        let (prepared, payload, _) = prepare_batch(1, &rows, &fields()).unwrap();
        let limits = FitLimits {
            max_count: 1000,
            max_size: 128_000,
            min_count: 10,
            large_max_size: 12 << 20,
        };
        let mut b = BucketBuilder::new(ObjectId::new(), 0, Some(meta.clone()), "t", Some("m"));
        for (i, p) in prepared.iter().take(2).enumerate() {
            b.try_push(p.raw(&payload).unwrap(), p, 1, i as u32, &limits)
                .unwrap();
        }
        assert!(!b.meta_varies(), "{meta:?}");
        let p = &prepared[2];
        b.try_push(p.raw(&payload).unwrap(), p, 1, 2, &limits)
            .unwrap();
        assert!(b.meta_varies(), "{meta:?} vs {other:?}");
    }
}

/// Guards a row from a checksummed but damaged log record: a string that is not UTF-8 must not
/// wait unsplit (the splitter could not take it, and the column would lose its place); it goes
/// to the checked split like any row that breaks the pattern.
#[test]
fn a_damaged_string_is_split_like_any_other_break() {
    let t = DateTime::from_millis(0);
    let rows: Vec<Document> = (0..3)
        .map(|i| doc! {"t": t, "m": "h", "s": format!("z{i}q"), "x": i})
        .collect();
    let (_, mut payload, _) = prepare_batch(1, &rows, &fields()).unwrap();
    let at = payload.windows(3).position(|w| w == b"z1q").unwrap();
    payload[at] = 0xff;
    // As recovery prepares the rows of a log record.
    let record = crate::ingest::decode_insert(&payload).unwrap().unwrap();
    let prepared = crate::ingest::prepare_replayed(&payload, &record, &fields()).unwrap();
    assert_ne!(prepared[0].shape, 0);
    assert_eq!(prepared[1].shape, 0, "a damaged string has no shape");
    let limits = FitLimits {
        max_count: 1000,
        max_size: 128_000,
        min_count: 10,
        large_max_size: 12 << 20,
    };
    let meta = Some(Bson::String("h".into()));
    let new = || {
        BucketBuilder::new(
            ObjectId::from_bytes([1; 12]),
            0,
            meta.clone(),
            "t",
            Some("m"),
        )
    };
    let (mut lazy, mut eager) = (new(), new().splitting_every_row());
    for (i, p) in prepared.iter().enumerate() {
        let raw = p.raw(&payload).unwrap();
        assert_eq!(
            lazy.try_push(raw, p, 1, i as u32, &limits),
            eager.try_push(raw, p, 1, i as u32, &limits)
        );
    }
    assert_eq!(lazy.snapshot(), eager.snapshot());
    assert_eq!(lazy.finish(), eager.finish());
}

proptest::proptest! {
    /// Bounds and sums kept up to date chunk by chunk are those of one pass over every value,
    /// to the bit (-0.0 and Int32 sums that outgrow Int32 included; any NaN for a NaN).
    #[test]
    fn running_stats_equal_one_pass(
        kind in 0u8..5,
        values in proptest::collection::vec(proptest::num::i64::ANY, 0..80),
        cuts in proptest::collection::vec(0usize..80, 0..6),
    ) {
        let specials = [f64::NAN, -0.0, 0.0, f64::INFINITY, f64::NEG_INFINITY, 1.5];
        let full = match kind {
            0 => Data::I32(values.iter().map(|&v| v as i32).collect()),
            1 => Data::I64(values.clone()),
            2 => Data::F64(
                values
                    .iter()
                    .map(|&v| if v % 7 == 0 { specials[(v.unsigned_abs() % 6) as usize] } else { v as f64 / 1e6 })
                    .collect(),
            ),
            3 => Data::Date(values.clone()),
            _ => Data::Str(values.iter().map(|v| format!("s{}", v % 9)).collect()),
        };
        let mut cuts: Vec<usize> = cuts.into_iter().filter(|&c| c <= values.len()).collect();
        cuts.push(values.len());
        cuts.sort_unstable();
        let mut running = RunningStats::default();
        // Every NaN is one value to MongoDB, and which of two NaN operands an addition
        // passes on (so the sign of a NaN sum) is up to the compiler's operand order.
        let bits = |b: Option<Bson>| format!("{:?}", b.map(|v| match v {
            Bson::Double(x) if x.is_nan() => Bson::String("NaN".into()),
            Bson::Double(x) => Bson::Int64(x.to_bits() as i64),
            other => other,
        }));
        for cut in cuts {
            let prefix = match &full {
                Data::I32(v) => Data::I32(v[..cut].to_vec()),
                Data::I64(v) => Data::I64(v[..cut].to_vec()),
                Data::F64(v) => Data::F64(v[..cut].to_vec()),
                Data::Date(v) => Data::Date(v[..cut].to_vec()),
                Data::Str(v) => Data::Str(v[..cut].to_vec()),
                _ => unreachable!(),
            };
            running.update(&prefix);
            let (want, got) = (prefix.min_max(), running.min_max());
            proptest::prop_assert_eq!(
                bits(want.as_ref().map(|w| w.0.clone())),
                bits(got.as_ref().map(|g| g.0.clone()))
            );
            proptest::prop_assert_eq!(
                bits(want.map(|w| w.1)),
                bits(got.map(|g| g.1))
            );
            proptest::prop_assert_eq!(bits(prefix.sum()), bits(running.sum(&prefix)));
        }
    }
}
