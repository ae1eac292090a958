//! Every read answer checked against a brute-force model of MongoDB's semantics.
//!
//! Random collections (several series with scalar, document or no meta values; sparse fields
//! of mixed numeric types, strings, booleans, nulls, arrays and embedded documents; times in
//! and out of order over several buckets per series) are inserted in random batches, with
//! flushes and reopens in between, so answers come from open buckets, closed in-memory buckets
//! and segments. At random points, random filters go through `find`, `count_documents`,
//! `explain` and `find_with`, and each answer is compared with what the model computes from
//! the inserted documents alone. `PROPTEST_CASES` raises the number of cases.

mod model_kit;

use model_kit::harness::{cases, check_query, run};
use model_kit::{data, filters};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(200)))]

    /// Collections of up to 200 measurements, a few queries at each checkpoint.
    #[test]
    fn reads_of_large_collections_match_the_model(
        coll in data::collection(200, true),
        queries in prop::collection::vec(filters::query(), 1..=4),
    ) {
        let ctx = coll.ctx();
        run(&coll, |st| {
            for q in &queries {
                check_query(st, &ctx, &q.filter, &q.find)?;
            }
            Ok(())
        })?;
    }

    /// Small collections and many queries: finds edge cases of the filter grammar quickly and
    /// shrinks them to a few rows.
    #[test]
    fn reads_of_small_collections_match_the_model(
        coll in data::collection(24, true),
        queries in prop::collection::vec(filters::query(), 1..=12),
    ) {
        let ctx = coll.ctx();
        run(&coll, |st| {
            for q in &queries {
                check_query(st, &ctx, &q.filter, &q.find)?;
            }
            Ok(())
        })?;
    }
}

/// Found by the model: an Int64 was converted to a double before being compared with one, so
/// `2^53 + 1` equalled the double `2^53` and `i64::MAX` the double `2^63`.
#[test]
fn large_integers_compare_exactly_with_doubles() {
    use tsbucket::bson::{doc, Bson, DateTime};
    let dir = tempfile::tempdir().unwrap();
    let db = tsbucket::Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", tsbucket::TimeseriesOptions::new("t"))
        .unwrap();
    let two53 = 9_007_199_254_740_992_i64;
    let t = DateTime::from_millis(data::BASE_MS);
    c.insert_many(&[
        doc! {"_id": 1, "t": t, "x": Bson::Int64(two53 + 1)},
        doc! {"_id": 2, "t": t, "x": Bson::Int64(i64::MAX)},
    ])
    .unwrap();
    for flush in [false, true] {
        if flush {
            db.flush().unwrap();
        }
        let count = |f| c.count_documents(f).unwrap();
        assert_eq!(count(doc! {"x": two53 as f64}), 0);
        assert_eq!(count(doc! {"x": {"$gt": two53 as f64}}), 2);
        assert_eq!(count(doc! {"x": 9_223_372_036_854_775_808.0}), 0);
        assert_eq!(count(doc! {"x": {"$lt": 9_223_372_036_854_775_808.0}}), 2);
        assert_eq!(count(doc! {"x": Bson::Int64(two53 + 1)}), 1);
    }
}

/// Found by the model: an empty array sorted as an array (after numbers and strings); MongoDB
/// sorts it before null and missing fields.
#[test]
fn empty_arrays_sort_before_missing_fields() {
    use tsbucket::bson::{doc, DateTime};
    let dir = tempfile::tempdir().unwrap();
    let db = tsbucket::Database::open(dir.path()).unwrap();
    let c = db
        .create_collection("c", tsbucket::TimeseriesOptions::new("t"))
        .unwrap();
    let t = DateTime::from_millis(data::BASE_MS);
    c.insert_many(&[
        doc! {"_id": 1, "t": t, "a": 5},
        doc! {"_id": 2, "t": t, "a": []},
        doc! {"_id": 3, "t": t},
        doc! {"_id": 4, "t": t, "a": "s"},
    ])
    .unwrap();
    let ids = |dir: i32| -> Vec<i32> {
        let o = tsbucket::FindOptions {
            sort: Some(doc! {"a": dir}),
            ..Default::default()
        };
        c.find_with(doc! {}, o)
            .unwrap()
            .map(|d| d.unwrap().get_i32("_id").unwrap())
            .collect()
    };
    assert_eq!(ids(1), [2, 3, 1, 4]);
    assert_eq!(ids(-1), [4, 1, 3, 2]);
}
