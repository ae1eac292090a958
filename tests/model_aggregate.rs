//! Aggregation pipelines checked against the brute-force model.
//!
//! The collections of `tests/model.rs` (without shared `_id`s, so a sort on `_id` is total),
//! loaded with flushes and reopens, answer random pipelines of `$match`, `$project`, `$group`
//! (`_id` null, a path, or an object with `$dateTrunc`; `$sum`, `$avg`, `$min`, `$max`,
//! `$first`, `$last`, `$count`), `$sort`, `$skip`, `$limit` and `$count`. Each answer is
//! compared with the model's: in order when the pipeline fixes it, as a multiset otherwise;
//! doubles summed in another order are accepted within the summation error bound.
//! `PROPTEST_CASES` raises the number of cases.

mod model_kit;

use model_kit::harness::{cases, run};
use model_kit::{data, pipegen, pipeline};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::{Collection, Database, TimeseriesOptions};

fn aggregate(coll: &Collection, stages: Vec<Document>) -> tsbucket::Result<Vec<Document>> {
    coll.aggregate(stages)?.collect()
}

/// [`aggregate`] for pipelines with one output order, checked against the document path (the
/// reference of the columnar and counting paths).
fn aggregate_both(coll: &Collection, stages: Vec<Document>) -> Vec<Document> {
    let columnar = aggregate(coll, stages.clone()).unwrap();
    let unpacked: Vec<Document> = coll
        .aggregate_unpacked(stages)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(columnar, unpacked, "columnar and document paths disagree");
    columnar
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases(150)))]

    #[test]
    fn pipelines_match_the_model(
        coll in data::collection(120, false),
        pipes in prop::collection::vec(pipegen::pipeline(), 1..=4),
    ) {
        let ctx = coll.ctx();
        run(&coll, |st| {
            for p in &pipes {
                let built = pipegen::build(p, &ctx, st.docs);
                let got = aggregate(st.coll, built.stages.clone()).map_err(|e| {
                    TestCaseError::fail(format!("aggregate {} {built:?}: {e}", st.step))
                })?;
                pipeline::same_results(&got, &built.want, built.ordered).map_err(|e| {
                    TestCaseError::fail(format!("aggregate {} {built:?}: {e}", st.step))
                })?;
            }
            Ok(())
        })?;
    }
}

fn t(s: i64) -> DateTime {
    DateTime::from_millis(1_700_000_000_000 + s * 1000)
}

/// A collection `c` with minute buckets, holding `docs`.
fn collection_of(docs: &[Document]) -> (tempfile::TempDir, Database, Collection) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = db
        .create_collection(
            "c",
            TimeseriesOptions::new("t")
                .meta_field("m")
                .bucket_span(60, 60),
        )
        .unwrap();
    c.insert_many(docs).unwrap();
    (dir, db, c)
}

fn small_collection() -> (tempfile::TempDir, Database, Collection) {
    collection_of(&[
        doc! {"_id": 1, "t": t(0), "m": "a", "x": 1},
        doc! {"_id": 2, "t": t(90), "m": "a", "x": Bson::Int64(2)},
        doc! {"_id": 3, "t": t(30), "m": "b", "x": "text"},
        doc! {"_id": 4, "t": t(200), "m": "b"},
        doc! {"_id": 5, "t": t(150), "m": "b", "x": 2.5},
    ])
}

/// MongoDB's answers for the documents of [`small_collection`], written out by hand.
#[test]
fn documented_answers_on_a_small_collection() {
    let (_dir, db, c) = small_collection();
    for flush in [false, true] {
        if flush {
            db.flush().unwrap();
        }
        let by_meta = aggregate(
            &c,
            vec![
                doc! {"$group": {"_id": "$m", "s": {"$sum": "$x"}, "lo": {"$min": "$x"},
                "hi": {"$max": "$x"}, "n": {"$count": {}}}},
                doc! {"$sort": {"_id": 1}},
            ],
        )
        .unwrap();
        assert_eq!(
            by_meta,
            vec![
                doc! {"_id": "a", "s": Bson::Int64(3), "lo": 1, "hi": Bson::Int64(2), "n": 2},
                doc! {"_id": "b", "s": 2.5, "lo": 2.5, "hi": "text", "n": 3},
            ]
        );
        let first_last = aggregate(
            &c,
            vec![
                doc! {"$sort": {"t": 1, "_id": 1}},
                doc! {"$group": {"_id": null, "f": {"$first": "$x"}, "l": {"$last": "$x"},
                "avg": {"$avg": "$x"}}},
            ],
        )
        .unwrap();
        assert_eq!(
            first_last,
            vec![doc! {"_id": null, "f": 1, "l": null, "avg": 5.5 / 3.0}]
        );
        let per_two_minutes = aggregate(
            &c,
            vec![
                doc! {"$group": {"_id": {"t": {"$dateTrunc": {"date": "$t", "unit": "minute", "binSize": 2}}},
                    "n": {"$count": {}}}},
                doc! {"$sort": {"_id": 1}},
            ],
        )
        .unwrap();
        // Two-minute bins count from 2000-01-01, so they start 80 s before the first time.
        let bin = |s: i64| doc! {"t": t(s)};
        assert_eq!(
            per_two_minutes,
            vec![
                doc! {"_id": bin(-80), "n": 2},
                doc! {"_id": bin(40), "n": 2},
                doc! {"_id": bin(160), "n": 1},
            ]
        );
        let counted =
            |m: bson::Document| aggregate_both(&c, vec![doc! {"$match": m}, doc! {"$count": "n"}]);
        assert_eq!(counted(doc! {"x": {"$gte": 2}}), vec![doc! {"n": 2}]);
        assert_eq!(counted(doc! {"m": "b"}), vec![doc! {"n": 3}]);
        assert_eq!(counted(doc! {"t": {"$lt": t(100)}}), vec![doc! {"n": 3}]);
        let sums = aggregate(
            &c,
            vec![
                doc! {"$group": {"_id": "all", "n": {"$sum": 1}, "w": {"$sum": 0.5},
                "s": {"$sum": "str"}, "l": {"$sum": Bson::Int64(3)}}},
            ],
        )
        .unwrap();
        assert_eq!(
            sums,
            vec![doc! {"_id": "all", "n": 5, "w": 2.5, "s": 0, "l": Bson::Int64(15)}]
        );
        let none = aggregate(&c, vec![doc! {"$match": {"x": 99}}, doc! {"$count": "n"}]).unwrap();
        assert!(
            none.is_empty(),
            "$count of nothing is no document: {none:?}"
        );
    }
}

/// Found by the model: a flushed bucket whose times are stored as runs was grouped run by run
/// with the bucket's meta value, so a row whose meta document has its fields in another order
/// (a value of its own) joined the group of the bucket's.
#[test]
fn rows_with_their_own_meta_value_group_apart_in_a_segment() {
    let (_dir, db, c) = collection_of(&[
        doc! {"t": t(5), "m": {"b": 0, "c": 0}},
        doc! {"t": t(5), "m": {"c": 0, "b": 0}},
    ]);
    let by_second = doc! {"$dateTrunc": {"date": "$t", "unit": "second"}};
    let p = vec![doc! {"$group": {"_id": {"m": "$m", "t": by_second}, "n": {"$count": {}}}}];
    for flush in [false, true] {
        if flush {
            db.flush().unwrap();
        }
        let mut got: Vec<String> = aggregate(&c, p.clone())
            .unwrap()
            .iter()
            .map(|d| {
                format!(
                    "{:?} {:?}",
                    d.get_document("_id").unwrap().get("m"),
                    d.get("n")
                )
            })
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                r#"Some(Document({"b": Int32(0), "c": Int32(0)})) Some(Int32(1))"#,
                r#"Some(Document({"c": Int32(0), "b": Int32(0)})) Some(Int32(1))"#,
            ],
            "flushed: {flush}"
        );
    }
}
