//! Reading commands: `find`, `aggregate`, `explain` and `count`.

use crate::json::{doc_arg, pipeline_arg};
use crate::out::Out;
use crate::{open_for_reading, CliResult};
use clap::Args;
use serde_json::json;
use std::path::PathBuf;
use tsbucket::bson::RawDocument;
use tsbucket::{Cursor, Explain, FindOptions};

/// Flags of `tsbucket find`.
#[derive(Args)]
pub struct FindArgs {
    /// Database directory.
    dir: PathBuf,
    /// Collection name.
    coll: String,
    /// Query filter as (relaxed or canonical) Extended JSON, e.g. '{"tags.hostname": "host_1"}'.
    #[arg(default_value = "{}")]
    filter: String,
    /// Projection, e.g. '{"time": 1, "usage_user": 1, "_id": 0}'.
    #[arg(long)]
    projection: Option<String>,
    /// Sort keys, 1 ascending and -1 descending, e.g. '{"time": -1}'.
    #[arg(long)]
    sort: Option<String>,
    /// Matches to skip.
    #[arg(long)]
    skip: Option<u64>,
    /// Most matches to print (0 = no limit).
    #[arg(long)]
    limit: Option<i64>,
}

/// Flags of `tsbucket aggregate`.
#[derive(Args)]
pub struct AggregateArgs {
    /// Database directory.
    dir: PathBuf,
    /// Collection name.
    coll: String,
    /// Pipeline as a JSON array of stages, e.g. '[{"$group": {"_id": null, "n": {"$sum": 1}}}]'.
    pipeline: String,
}

/// Flags of `tsbucket explain`.
#[derive(Args)]
pub struct ExplainArgs {
    /// Database directory.
    dir: PathBuf,
    /// Collection name.
    coll: String,
    /// Find filter to explain.
    #[arg(default_value = "{}", conflicts_with = "pipeline")]
    filter: String,
    /// Explain this aggregation pipeline instead of a filter (the pipeline runs to find out).
    #[arg(long)]
    pipeline: Option<String>,
}

/// Flags of `tsbucket count`.
#[derive(Args)]
pub struct CountArgs {
    /// Database directory.
    dir: PathBuf,
    /// Collection name.
    coll: String,
    /// Query filter as Extended JSON.
    #[arg(default_value = "{}")]
    filter: String,
}

/// Runs `find`.
pub fn find(a: FindArgs) -> CliResult {
    let filter = doc_arg("filter", &a.filter)?;
    let options = FindOptions {
        projection: a
            .projection
            .map(|p| doc_arg("--projection", &p))
            .transpose()?,
        sort: a.sort.map(|s| doc_arg("--sort", &s)).transpose()?,
        skip: a.skip,
        limit: a.limit,
    };
    let db = open_for_reading(&a.dir)?;
    let cursor = crate::collection(&db, &a.coll)?.find_with(filter, options)?;
    print_docs(cursor)?;
    db.close()?;
    Ok(())
}

/// Runs `aggregate`.
pub fn aggregate(a: AggregateArgs) -> CliResult {
    let pipeline = pipeline_arg(&a.pipeline)?;
    let db = open_for_reading(&a.dir)?;
    let cursor = crate::collection(&db, &a.coll)?.aggregate(pipeline)?;
    print_docs(cursor)?;
    db.close()?;
    Ok(())
}

/// Runs `explain`.
pub fn explain(a: ExplainArgs) -> CliResult {
    let db = open_for_reading(&a.dir)?;
    let coll = crate::collection(&db, &a.coll)?;
    let ex = match &a.pipeline {
        Some(p) => coll.explain_aggregate(pipeline_arg(p)?)?,
        None => coll.explain(doc_arg("filter", &a.filter)?)?,
    };
    let mut out = Out::new();
    out.json_pretty(&explain_json(&ex))?;
    out.finish()?;
    db.close()?;
    Ok(())
}

/// Runs `count`.
pub fn count(a: CountArgs) -> CliResult {
    let filter = doc_arg("filter", &a.filter)?;
    let db = open_for_reading(&a.dir)?;
    let n = crate::collection(&db, &a.coll)?.count_documents(filter)?;
    let mut out = Out::new();
    out.line(&n.to_string())?;
    out.finish()?;
    db.close()?;
    Ok(())
}

fn print_docs(mut cursor: Cursor) -> CliResult {
    let mut out = Out::new();
    let (mut bson, mut line) = (Vec::new(), Vec::new());
    while cursor.next_into(&mut bson)? {
        line.clear();
        crate::rawjson::write_relaxed(RawDocument::from_bytes(&bson)?, &mut line)?;
        line.push(b'\n');
        out.bytes(&line)?;
        bson.clear();
    }
    out.finish()?;
    Ok(())
}

fn explain_json(ex: &Explain) -> serde_json::Value {
    json!({
        "buckets_total": ex.buckets_total,
        "buckets_pruned_by_id": ex.buckets_pruned_by_id,
        "buckets_pruned_by_stats": ex.buckets_pruned_by_stats,
        "buckets_examined": ex.buckets_examined,
        "buckets_taken_whole": ex.buckets_taken_whole,
        "buckets_unpacked": ex.buckets_unpacked,
        "buckets_from_stats": ex.buckets_from_stats,
        "time_bounds_ms": ex.time_bounds.map(|(lo, hi)| json!([lo, hi])),
        "index_used": ex.index_used,
        "meta_lookup": ex.meta_lookup,
        "buckets_from_index": ex.buckets_from_index,
        "buckets_pruned_by_index": ex.buckets_pruned_by_index,
        "rewrites": ex.rewrites,
        "operators": ex.operators,
    })
}
