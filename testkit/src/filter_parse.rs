//! `filter_parse`: a filter (BSON bytes, or built from the input) parsed and evaluated against
//! the fixture collection through `find`, `count_documents`, `explain` and `buckets`. Errors
//! are fine; panics are not, and `find` and `count_documents` must agree.

use super::{fixture, query_gen, Input};
use tsbucket::bson::Document;
use tsbucket::query::{Filter, FindOptions};

/// First byte of an input whose rest is a BSON document (any other: a generated filter).
pub const RAW: u8 = b'B';

/// Runs one input.
pub fn run(data: &[u8]) {
    let filter = match data.split_first() {
        Some((&RAW, rest)) => match Document::from_reader(rest) {
            Ok(d) => d,
            Err(_) => return,
        },
        _ => query_gen::filter(&mut Input::new(data), 3),
    };
    check(filter);
}

/// Evaluates `filter` every way the collection offers.
pub fn check(filter: Document) {
    let _ = Filter::parse(&filter);
    let Some(coll) = fixture::collection() else {
        return;
    };
    let found: Option<usize> = coll
        .find(filter.clone())
        .ok()
        .and_then(|c| c.collect::<tsbucket::Result<Vec<_>>>().ok())
        .map(|v| v.len());
    let counted = coll.count_documents(filter.clone()).ok();
    if let (Some(f), Some(c)) = (found, counted) {
        assert_eq!(
            f as u64, c,
            "find and count_documents disagree on {filter:?}"
        );
    }
    let _ = coll.explain(filter.clone());
    let _ = coll.buckets(filter.clone());
    let opts = FindOptions {
        sort: Some(tsbucket::bson::doc! {"v": -1}),
        limit: Some(5),
        ..FindOptions::default()
    };
    if let Ok(c) = coll.find_with(filter, opts) {
        let _ = c.collect::<tsbucket::Result<Vec<_>>>();
    }
}
