//! Running a parsed pipeline over the buckets its leading `$match` selected: a count when the
//! first stage only counts (`$count`, or a `$group` of one constant key summing constants),
//! the columnar group path when the pipeline has its shape, else the measurements unpacked by
//! the find path and every stage evaluated over documents. Stages after the first blocking one run on
//! its output documents.

use super::accum::{Acc, AccOp};
use super::expr::Expr;
use super::fastgroup::FastGroup;
use super::group::{GroupDocs, GroupSpec, GroupTable};
use super::options::sort_docs;
use super::pipeline::Stage;
use super::read::{count, Cursor, Explain, Order, Plan, Scans, Verdict};
use crate::error::Result;
use bson::{Bson, Document};

type Docs<'a> = Box<dyn Iterator<Item = Result<Document>> + 'a>;

/// How a pipeline runs, decided once, before its buckets are selected (the order they are
/// selected in depends on it).
pub(crate) enum Route {
    /// `$count`, or a `$group` of one constant key summing constants: a count of the matching
    /// measurements.
    Count,
    /// The columnar group path, over this many leading stages.
    Fast(Box<FastGroup>, usize),
    /// Measurements unpacked, every stage evaluated over documents.
    Docs,
}

impl Route {
    /// The route of `stages` after the pushed-down filter of `plan`; `columnar: false` forces
    /// the document path.
    pub(crate) fn of(plan: &Plan, stages: &[Stage], columnar: bool) -> Route {
        if !columnar {
            return Route::Docs;
        }
        match stages.first() {
            Some(Stage::Group(spec)) if count_consts(spec).is_some() => Route::Count,
            _ => match FastGroup::analyse(plan, stages) {
                Some((fast, used)) => Route::Fast(Box::new(fast), used),
                None => Route::Docs,
            },
        }
    }

    /// The order the route wants its buckets in: file order unless the answer depends on the
    /// order of the buckets (the document path, `$first`/`$last`).
    pub(crate) fn order(&self) -> Order {
        match self {
            Route::Count => Order::File,
            Route::Fast(fast, _) if !fast.arrival_order() => Order::File,
            _ => Order::Id,
        }
    }
}

/// What a pipeline gives.
pub(crate) enum Output {
    /// Documents, all built.
    Docs(Vec<Document>),
    /// The output of a final `$group`, built as it is read.
    Groups(Box<GroupDocs>),
}

/// Runs `stages` along `route` over the buckets `scans` chosen by `plan` (whose filter is the
/// pipeline's leading `$match`). Returns the output documents and how the scan was carried out.
pub(crate) fn execute(
    scans: Scans,
    explain: Explain,
    plan: Plan,
    stages: &[Stage],
    route: Route,
    threads: usize,
) -> Result<(Output, Explain)> {
    match route {
        Route::Count => {
            if let Some(Stage::Group(spec)) = stages.first() {
                if let Some(docs) = count_group(spec, &scans, &plan, threads)? {
                    let mut ex = explain;
                    ex.buckets_from_stats =
                        scans.iter().filter(|s| s.verdict == Verdict::All).count() as u64;
                    let rest = stages.get(1..).unwrap_or_default();
                    let docs = run_stages(Box::new(docs.into_iter().map(Ok)), rest)?;
                    return Ok((Output::Docs(docs), ex));
                }
            }
        }
        Route::Fast(fast, used) => {
            let (docs, ex) = fast.run(scans, explain, threads)?;
            let rest = stages.get(used..).unwrap_or_default();
            if rest.is_empty() {
                return Ok((Output::Groups(Box::new(docs)), ex));
            }
            return Ok((Output::Docs(run_stages(Box::new(docs), rest)?), ex));
        }
        Route::Docs => {}
    }
    let cursor = Cursor::new(scans, plan);
    Ok((Output::Docs(run_stages(Box::new(cursor), stages)?), explain))
}

/// The key and the summed constants of a `$group` whose key is a constant and whose
/// accumulators all sum constants; `None` for any other group.
fn count_consts(spec: &GroupSpec) -> Option<(&Bson, Vec<&Bson>)> {
    let Expr::Const(id) = &spec.id else {
        return None;
    };
    let mut consts = Vec::with_capacity(spec.accs.len());
    for a in &spec.accs {
        match (&a.op, &a.arg) {
            (AccOp::Sum, Expr::Const(v)) => consts.push(v),
            _ => return None,
        }
    }
    Some((id, consts))
}

/// The output of a `$group` whose key is a constant and whose accumulators all sum constants
/// (what `$count` becomes), from the number of matching measurements: the count path decodes
/// only the columns the filter still has to test, where the group path would also decode the
/// time column. `None` when the group has another shape.
fn count_group(
    spec: &GroupSpec,
    scans: &Scans,
    plan: &Plan,
    threads: usize,
) -> Result<Option<Vec<Document>>> {
    let Some((id, consts)) = count_consts(spec) else {
        return Ok(None);
    };
    let n = count(scans, plan, threads)?;
    // A group that saw no input yields no document.
    if n == 0 {
        return Ok(Some(Vec::new()));
    }
    let mut d = Document::new();
    d.insert("_id", id.clone());
    for (a, v) in spec.accs.iter().zip(consts) {
        let mut acc = Acc::new(AccOp::Sum);
        acc.feed_n(Some::<&Bson>(v), n);
        d.insert(a.name.clone(), acc.value()?);
    }
    Ok(Some(vec![d]))
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
                Box::new(table.docs())
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
