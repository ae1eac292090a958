//! Running a parsed pipeline over the buckets its leading `$match` selected: the columnar
//! group path when the pipeline has its shape, else the measurements unpacked by the find
//! path and every stage evaluated over documents. Stages after the first blocking one run on
//! its output documents.

use super::fastgroup::FastGroup;
use super::group::GroupTable;
use super::options::sort_docs;
use super::pipeline::Stage;
use super::read::{Cursor, Explain, Plan, Scan};
use crate::error::Result;
use bson::Document;

type Docs<'a> = Box<dyn Iterator<Item = Result<Document>> + 'a>;

/// Runs `stages` over the buckets `scans` chosen by `plan` (whose filter is the pipeline's
/// leading `$match`); `columnar: false` forces the document path. Returns the output documents
/// and how the scan was carried out.
pub(crate) fn execute(
    scans: Vec<Scan>,
    explain: Explain,
    plan: Plan,
    stages: &[Stage],
    columnar: bool,
) -> Result<(Vec<Document>, Explain)> {
    if columnar {
        if let Some((fast, used)) = FastGroup::analyse(&plan, stages) {
            let (docs, ex) = fast.run(scans, explain)?;
            let rest = stages.get(used..).unwrap_or_default();
            return Ok((run_stages(Box::new(docs.into_iter().map(Ok)), rest)?, ex));
        }
    }
    let cursor = Cursor::new(scans, plan);
    Ok((run_stages(Box::new(cursor), stages)?, explain))
}

/// Evaluates the stages over a stream of documents. Streaming stages stay lazy, so a `$limit`
/// stops the scan early; `$group` and `$sort` collect their input.
pub(crate) fn run_stages(input: Docs<'_>, stages: &[Stage]) -> Result<Vec<Document>> {
    let mut it = input;
    for st in stages {
        it = match st {
            Stage::Match(f) => {
                Box::new(it.filter(move |r| r.as_ref().map_or(true, |d| f.matches(d))))
            }
            Stage::Project(p) => Box::new(it.map(move |r| r.and_then(|d| p.apply(d)))),
            Stage::Skip(n) => {
                let mut left = *n;
                // Errors pass through: a skipped document must not hide a read failure.
                Box::new(it.filter(move |r| {
                    if r.is_err() || left == 0 {
                        return true;
                    }
                    left -= 1;
                    false
                }))
            }
            Stage::Limit(n) => Box::new(it.take(usize::try_from(*n).unwrap_or(usize::MAX))),
            Stage::Sort(keys) => {
                let mut docs: Vec<Document> = it.collect::<Result<_>>()?;
                sort_docs(&mut docs, keys);
                Box::new(docs.into_iter().map(Ok))
            }
            Stage::Group(spec) => {
                let mut table = GroupTable::for_spec(spec);
                for d in it {
                    table.feed_doc(spec, &d?)?;
                }
                Box::new(table.into_docs()?.into_iter().map(Ok))
            }
        };
    }
    it.collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::pipeline::Pipeline;
    use bson::doc;

    fn run(pipeline: &[Document], docs: Vec<Document>) -> Vec<Document> {
        let p = Pipeline::parse(pipeline).unwrap();
        let input = docs
            .into_iter()
            .filter(move |d| p.filter.matches(d))
            .map(Ok);
        run_stages(Box::new(input), &p.stages).unwrap()
    }

    #[test]
    fn stages_compose_over_documents() {
        let docs: Vec<Document> = (0..10).map(|i| doc! {"i": i, "k": i % 3}).collect();
        let out = run(
            &[
                doc! {"$match": {"i": {"$gte": 2}}},
                doc! {"$group": {"_id": "$k", "n": {"$count": {}}, "s": {"$sum": "$i"}}},
                doc! {"$sort": {"_id": -1}},
                doc! {"$skip": 1},
                doc! {"$limit": 1},
                doc! {"$project": {"_id": 0, "k": "$_id", "s": 1}},
            ],
            docs.clone(),
        );
        assert_eq!(out, vec![doc! {"s": 4 + 7, "k": 1}]);
        assert_eq!(
            run(
                &[doc! {"$match": {"i": 3}}, doc! {"$count": "n"}],
                docs.clone()
            ),
            vec![doc! {"n": 1}]
        );
        assert!(run(&[doc! {"$match": {"i": 30}}, doc! {"$count": "n"}], docs).is_empty());
    }

    #[test]
    fn errors_are_not_skipped() {
        let p = Pipeline::parse(&[doc! {"$skip": 5}]).unwrap();
        let input: Docs<'_> = Box::new(vec![Err(crate::Error::BadValue("x".into()))].into_iter());
        assert!(run_stages(input, &p.stages).is_err());
    }
}
