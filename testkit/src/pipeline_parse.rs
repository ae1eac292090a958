//! `pipeline_parse`: a pipeline (BSON bytes whose document-valued fields are the stages, or
//! built from the input) parsed and run against the fixture collection, columnar and unpacked.
//! Errors are fine; panics are not, and both evaluations must return as many documents.

use super::{fixture, query_gen, Input};
use tsbucket::bson::{Bson, Document};
use tsbucket::query::pipeline::Pipeline;

/// First byte of an input whose rest is a BSON document (any other: a generated pipeline).
pub const RAW: u8 = b'B';

/// Runs one input.
pub fn run(data: &[u8]) {
    let stages = match data.split_first() {
        Some((&RAW, rest)) => match Document::from_reader(rest) {
            Ok(d) => d
                .into_iter()
                .filter_map(|(_, v)| match v {
                    Bson::Document(s) => Some(s),
                    _ => None,
                })
                .collect(),
            Err(_) => return,
        },
        _ => query_gen::pipeline(&mut Input::new(data)),
    };
    check(stages);
}

/// Runs `stages` every way the collection offers.
pub fn check(stages: Vec<Document>) {
    let _ = Pipeline::parse(&stages);
    let Some(coll) = fixture::collection() else {
        return;
    };
    let _ = coll.explain_aggregate(stages.clone());
    let run = |unpacked: bool| -> Option<Vec<Document>> {
        let c = if unpacked {
            coll.aggregate_unpacked(stages.clone())
        } else {
            coll.aggregate(stages.clone())
        };
        c.ok()?.collect::<tsbucket::Result<Vec<_>>>().ok()
    };
    if let (Some(a), Some(b)) = (run(false), run(true)) {
        assert_eq!(
            a.len(),
            b.len(),
            "columnar and unpacked evaluation disagree on {stages:?}"
        );
    }
}
