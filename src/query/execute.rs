//! Running a parsed pipeline over the buckets its leading `$match` selected: a count when the
//! first stage only counts (`$count`, or a `$group` of one constant key summing constants),
//! the columnar group path when the pipeline has its shape, else the measurements unpacked by
//! the find path and every stage evaluated over documents. Stages after the first blocking one run on
//! its output documents.

use crate::query::aggregate::accumulators::{Acc, AccOp};
use super::expr::Expr;
use crate::query::aggregate::FastGroup;
use crate::query::aggregate::table::{GroupDocs, GroupSpec, GroupTable};
use super::sort::{sort_within, top_sorted, SortMemory, TOP_K_MAX};
use super::options::Projection;
use super::pipeline::Stage;
use super::cursor::{bounded_keys, FindSpec, Output};
use crate::query::select::{count, Cursor, Explain, Order, Plan, Scans, Verdict};
use crate::error::Result;
use bson::{Bson, Document};

/// Documents as a stage reads them.
type Docs = Box<dyn Iterator<Item = Result<Document>> + Send>;

/// How a pipeline runs, decided once, before its buckets are selected (the order they are
/// selected in depends on it).
pub(crate) enum Route {
    /// `$count`, or a `$group` of one constant key summing constants: a count of the matching
    /// measurements.
    Count,
    /// The columnar group path, over this many leading stages.
    Fast(Box<FastGroup>, usize),
    /// Measurements unpacked, every stage evaluated over documents; why the columnar group
    /// path did not take the pipeline.
    Docs(String),
    /// The pipeline as written, over documents: the reference the others are checked
    /// against.
    AsWritten,
}

impl Route {
    /// The route of `stages` after the pushed-down filter of `plan`; `columnar: false` forces
    /// the document path.
    pub(crate) fn of(plan: &Plan, stages: &[Stage], columnar: bool) -> Route {
        if !columnar {
            return Route::AsWritten;
        }
        match stages.first() {
            Some(Stage::Group(spec)) if count_consts(spec).is_some() => Route::Count,
            _ => match FastGroup::analyse(plan, stages) {
                Ok((fast, used)) => Route::Fast(Box::new(fast), used),
                Err(why) => Route::Docs(why),
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

/// Runs `stages` along `route` over the buckets `scans` chosen by `plan` (whose filter is the
/// pipeline's leading `$match`). Returns the output documents and how the scan was carried out.
pub(crate) fn execute(
    scans: Scans,
    explain: Explain,
    plan: Plan,
    stages: &[Stage],
    route: Route,
    threads: usize,
    memory: &SortMemory,
) -> Result<(Output, Explain)> {
    let mut explain = explain;
    let as_written = matches!(route, Route::AsWritten);
    let why = match route {
        Route::Count => {
            if let Some(Stage::Group(spec)) = stages.first() {
                if let Some(docs) = count_group(spec, &scans, &plan, threads)? {
                    let mut ex = explain;
                    ex.buckets_from_stats =
                        scans.iter().filter(|s| s.verdict == Verdict::All).count() as u64;
                    ex.operators.push(
                        "count: control.count of the buckets taken whole, the rows of the \
                         others tested on typed columns"
                            .into(),
                    );
                    let rest = stages.get(1..).unwrap_or_default();
                    let docs = run_stages(
                        Box::new(docs.into_iter().map(Ok)),
                        rest,
                        memory,
                        &mut ex.operators,
                    )?;
                    return Ok((docs, ex));
                }
            }
            String::new()
        }
        Route::Fast(fast, used) => {
            let (docs, mut ex) = fast.run(scans, explain, threads, memory.limit)?;
            let (docs, sorted) = sort_groups(docs, stages.get(used..).unwrap_or_default());
            if sorted > 0 {
                ex.operators.push(SORTED_GROUPS.into());
            }
            let rest = stages.get(used + sorted..).unwrap_or_default();
            if rest.is_empty() {
                return Ok((Output::Groups(Box::new(docs)), ex));
            }
            let out = run_stages(Box::new(docs), rest, memory, &mut ex.operators)?;
            return Ok((out, ex));
        }
        Route::Docs(why) => why,
        Route::AsWritten => "the pipeline runs unpacked, as written".into(),
    };
    // A leading sort on time streams the buckets in time order (and stops at a limit); any
    // other leading sort with a limit keeps only the documents that can still be among the
    // first. Both are what `find` does with the same sort and limit.
    let (mut spec, used) = leading_find(&plan, stages, !as_written);
    // When a later stage replaces the measurements (a `$group`, `$count`, `$project`), the
    // scan builds only the paths the stages up to it read.
    let narrowed = match &spec {
        _ if as_written => None,
        Some(s) if s.projection.is_some() => None,
        _ => paths_read(stages.get(used..).unwrap_or_default()),
    };
    if let Some(mut paths) = narrowed {
        let find = spec.get_or_insert_with(FindSpec::default);
        // A sort of rows as bytes applies the projection as it writes them only when the
        // projection keeps the keys; a top takes its keys from the columns.
        if find.limit.is_none() {
            paths.extend(find.sort.iter().map(|(k, _)| k.clone()));
        }
        let p = Projection::keeping(&paths);
        let shown = p.kept().unwrap_or_default().join(", ");
        explain.operators.push(format!(
            "columns: only those of the paths the later stages read ({})",
            if shown.is_empty() { "none" } else { shown.as_str() }
        ));
        find.projection = Some(p);
    }
    explain.operators.push(find_operator(&plan, spec.as_ref()));
    let cursor = match spec {
        Some(spec) => Cursor::find(
            scans,
            plan,
            FindSpec {
                memory: memory.clone(),
                threads,
                ..spec
            },
        )?,
        None => Cursor::new(scans, plan, threads),
    };
    let rest = stages.get(used..).unwrap_or_default();
    if rest.is_empty() {
        return Ok((Output::Cursor(Box::new(cursor)), explain));
    }
    let out = run_stages(Box::new(cursor), rest, memory, &mut explain.operators)?;
    // Why the first `$group` is not the columnar operator's.
    if let Some(line) = explain.operators.iter_mut().find(|l| *l == GROUP_OVER_DOCUMENTS) {
        if !why.is_empty() {
            *line = format!("{GROUP_OVER_DOCUMENTS} (not on columns: {why})");
        }
    }
    Ok((out, explain))
}

/// The operator line of a `$group` over documents.
const GROUP_OVER_DOCUMENTS: &str = "$group: hash aggregate over documents";

/// The operator line of a group's output ordered by its keys.
const SORTED_GROUPS: &str =
    "$sort: groups ordered by their _id keys' normalised bytes before documents are built";

/// The operator line of the scan that gives a pipeline's measurements, with the find `spec`
/// its leading stages amount to.
fn find_operator(plan: &Plan, spec: Option<&FindSpec>) -> String {
    let select = "rows selected on typed columns, documents built from the columns per row shape";
    let Some(spec) = spec else {
        return format!("scan in _id order: {select}");
    };
    let project = match spec.projection {
        Some(_) => ", the $project applied as they are built",
        None => "",
    };
    let limit = match spec.limit {
        Some(n) => format!(", stopping after {}", spec.skip.saturating_add(n)),
        None => String::new(),
    };
    match spec.sort.as_slice() {
        [] => format!("scan in _id order: {select}{project}{limit}"),
        [(k, asc)] if *k == plan.time_field => format!(
            "scan in time order ({}): buckets merged by their time bounds, {select}{project}{limit}",
            if *asc { "ascending" } else { "descending" }
        ),
        keys => {
            let Some(limit) = spec.limit else {
                return format!(
                    "scan in _id order: rows selected on typed columns and written as BSON \
                     bytes; $sort: the bytes by normalised keys, within {} MiB, past which \
                     sorted runs go to temporary files{project}",
                    spec.memory.limit >> 20
                );
            };
            let n = spec.skip.saturating_add(limit);
            let bounded = bounded_keys(plan, keys);
            let scan = if bounded.is_empty() {
                "scan in _id order".to_string()
            } else {
                let by: Vec<&str> = bounded.iter().map(|(k, _, _)| *k).collect();
                format!(
                    "scan of the buckets best first by their bounds of {}, stopping when none \
                     left can hold a row before the {n}th kept",
                    by.join(", ")
                )
            };
            format!(
                "{scan}: rows selected on typed columns, only their sort keys built; $sort: \
                 top-k keeping the first {n} by normalised keys (a sort of the rows as BSON \
                 bytes within {} MiB when those keys would not fit or encode exactly); the {limit} rows after the skip built \
                 from the columns{project}",
                spec.memory.limit >> 20
            )
        }
    }
}

/// The find a pipeline's leading stages amount to, and how many stages it takes: a `$sort`
/// with the `$skip` and `$limit` stages after it, then a `$project` that only keeps or leaves
/// out paths. `None` when the pipeline starts with none of them that a find does better. A
/// `$sort` without a limit on other keys than the time is a find's only when `any_sort`: the
/// find sorts rows as bytes, where the pipeline as written sorts documents.
fn leading_find(plan: &Plan, stages: &[Stage], any_sort: bool) -> (Option<FindSpec>, usize) {
    let mut spec = FindSpec::default();
    let mut used = 0;
    if let Some(Stage::Sort(keys)) = stages.first() {
        spec.sort = keys.clone();
        used = 1;
        for s in stages.get(1..).unwrap_or_default() {
            match s {
                Stage::Skip(n) if spec.limit.is_none() => spec.skip = spec.skip.saturating_add(*n),
                Stage::Limit(n) => {
                    spec.limit = Some(spec.limit.map_or(*n, |l| l.min(*n)));
                }
                _ => break,
            }
            used += 1;
        }
        let time_sort = matches!(keys.as_slice(), [(k, _)] if *k == plan.time_field);
        if !time_sort && spec.limit.is_none() && !any_sort {
            return (None, 0);
        }
    }
    // A find applies its projection after sort, skip and limit, as the pipeline does.
    if let Some(Stage::Project(p)) = stages.get(used) {
        if let Some(p) = p.as_projection() {
            spec.projection = Some(p.clone());
            used += 1;
        }
    }
    if used == 0 {
        (None, 0)
    } else {
        (Some(spec), used)
    }
}

/// The paths of a measurement that `stages` read before one of them replaces the measurements
/// (a `$group`, or a `$project` that keeps or computes fields; `$count` is a `$group`).
/// `None` when the measurements themselves come out, or a stage may read any path (a
/// `$project` that leaves paths out).
fn paths_read(stages: &[Stage]) -> Option<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for s in stages {
        match s {
            Stage::Match(f) => f.paths(&mut out),
            Stage::Sort(keys) => out.extend(keys.iter().map(|(k, _)| k.clone())),
            Stage::Skip(_) | Stage::Limit(_) => {}
            Stage::Group(g) => {
                let mut read = Vec::new();
                g.id.paths(&mut read);
                for a in &g.accs {
                    a.arg.paths(&mut read);
                }
                out.extend(read.into_iter().map(str::to_string));
                return Some(out);
            }
            Stage::Project(p) => {
                let (kept, computed) = p.kept_and_computed()?;
                out.extend(kept.into_iter().map(str::to_string));
                let mut read = Vec::new();
                for (_, e) in computed {
                    e.paths(&mut read);
                }
                out.extend(read.into_iter().map(str::to_string));
                // Whatever the stage does with `_id`, it has it.
                out.push("_id".into());
                return Some(out);
            }
        }
    }
    None
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


/// A group's output put in the order of the `$sort` that starts `next`, from the groups' keys,
/// where [`GroupDocs::sort_by_id`] can; also says how many stages of `next` that took (0 or
/// 1).
fn sort_groups(mut docs: GroupDocs, next: &[Stage]) -> (GroupDocs, usize) {
    let sorted = matches!(next.first(), Some(Stage::Sort(keys)) if docs.sort_by_id(keys));
    (docs, usize::from(sorted))
}

/// How many documents of a sorted stream the `$skip` and `$limit` stages at the start of
/// `stages` can let through; `None` without a limit.
fn kept_by_limit(stages: &[Stage]) -> Option<u64> {
    let mut skip = 0u64;
    for s in stages {
        match s {
            Stage::Skip(n) => skip = skip.saturating_add(*n),
            Stage::Limit(n) => return Some(skip.saturating_add(*n)),
            _ => return None,
        }
    }
    None
}

/// Evaluates the stages over a stream of documents. Streaming stages stay lazy, so a `$limit`
/// stops the scan early; `$group` and `$sort` collect their input. The output is collected
/// (so that errors surface at once), unless a sort wrote runs to disk: then it is read as the
/// caller reads it, within the sort's memory. Notes in `operators` how each stage runs.
pub(crate) fn run_stages(
    input: Docs,
    stages: &[Stage],
    memory: &SortMemory,
    operators: &mut Vec<String>,
) -> Result<Output> {
    let mut it = input;
    let mut spilled = false;
    // Stages a stage before them already carried out.
    let mut skip = 0;
    for (i, st) in stages.iter().enumerate() {
        if skip > 0 {
            skip -= 1;
            continue;
        }
        it = match st {
            Stage::Match(f) => {
                operators.push("$match over documents".into());
                let f = f.clone();
                Box::new(it.filter(move |r| r.as_ref().map_or(true, |d| f.matches(d))))
            }
            Stage::Project(p) => {
                operators.push("$project over documents".into());
                let p = p.clone();
                Box::new(it.map(move |r| r.and_then(|d| p.apply(d))))
            }
            Stage::Skip(n) => {
                operators.push(format!("$skip {n}"));
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
            Stage::Limit(n) => {
                operators.push(format!("$limit {n}"));
                Box::new(it.take(usize::try_from(*n).unwrap_or(usize::MAX)))
            }
            Stage::Sort(keys) => {
                // With a limit after it, only the documents that can still come first are kept.
                match kept_by_limit(stages.get(i + 1..).unwrap_or_default()) {
                    Some(n) if n <= TOP_K_MAX => {
                        operators.push(format!(
                            "$sort: top-k keeping the first {n} documents by normalised keys"
                        ));
                        let n = usize::try_from(n).unwrap_or(usize::MAX);
                        Box::new(top_sorted(it, keys, n)?.into_iter().map(Ok))
                    }
                    _ => {
                        operators.push(format!(
                            "$sort: documents by normalised keys, within {} MiB, past which \
                             sorted runs go to temporary files",
                            memory.limit >> 20
                        ));
                        let (sorted, to_disk) = sort_within(it, keys, memory)?;
                        spilled |= to_disk;
                        sorted
                    }
                }
            }
            Stage::Group(spec) => {
                operators.push(GROUP_OVER_DOCUMENTS.into());
                let mut table = GroupTable::for_spec(spec);
                for (n, d) in it.enumerate() {
                    table.feed_doc(spec, &d?)?;
                    if n % 4096 == 4095 {
                        table.check_memory(memory.limit)?;
                    }
                }
                table.check_memory(memory.limit)?;
                let (docs, sorted) = sort_groups(table.docs(), stages.get(i + 1..).unwrap_or_default());
                skip = sorted;
                if sorted > 0 {
                    operators.push(SORTED_GROUPS.into());
                }
                Box::new(docs)
            }
        };
    }
    Ok(if spilled {
        Output::Stream(it)
    } else {
        Output::Docs(it.collect::<Result<_>>()?)
    })
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
        match run_stages(Box::new(input), &p.stages, &SortMemory::default(), &mut Vec::new()).unwrap() {
            Output::Docs(d) => d,
            _ => unreachable!("small inputs are not written to disk"),
        }
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
        let input: Docs = Box::new(vec![Err(crate::Error::BadValue("x".into()))].into_iter());
        assert!(run_stages(input, &p.stages, &SortMemory::default(), &mut Vec::new()).is_err());
    }
}
