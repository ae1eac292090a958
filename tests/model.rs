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
