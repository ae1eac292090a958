//! Reading commands: `find`, `aggregate`, `explain` and `count`.

use crate::common::{open_for_reading, CliResult};
use crate::json::{doc_arg, pipeline_arg};
use crate::out::Out;
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
    #[command(flatten)]
    query: Query,
    /// How to print the documents.
    #[arg(long, value_enum, default_value_t = Shown::Jsonl)]
    format: Shown,
}

/// What `find` and `export` read: a filter and the find options.
#[derive(Args)]
pub struct Query {
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
    /// Most matches to return (0 = no limit).
    #[arg(long)]
    limit: Option<i64>,
}

impl Query {
    /// The cursor of the query on collection `coll` of `db`.
    pub fn run(&self, db: &tsbucket::Database, coll: &str) -> CliResult<Cursor> {
        let filter = doc_arg("filter", &self.filter)?;
        let arg = |what: &str, text: &Option<String>| {
            text.as_deref().map(|t| doc_arg(what, t)).transpose()
        };
        let options = FindOptions {
            projection: arg("--projection", &self.projection)?,
            sort: arg("--sort", &self.sort)?,
            skip: self.skip,
            limit: self.limit,
        };
        Ok(crate::common::collection(db, coll)?.find_with(filter, options)?)
    }
}

/// How `find` and `aggregate` print documents.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Shown {
    /// One relaxed Extended JSON document per line.
    Jsonl,
    /// Indented relaxed Extended JSON, a document at a time.
    Pretty,
    /// A text table: a column per field of the first documents, nested fields dotted.
    Table,
    /// CSV: a header, then a row per document (the first document's fields).
    Csv,
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
    /// How to print the documents.
    #[arg(long, value_enum, default_value_t = Shown::Jsonl)]
    format: Shown,
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
    let db = open_for_reading(&a.dir)?;
    let cursor = a.query.run(&db, &a.coll)?;
    print_docs(cursor, a.format)?;
    db.close()?;
    Ok(())
}

/// Runs `aggregate`.
pub fn aggregate(a: AggregateArgs) -> CliResult {
    let pipeline = pipeline_arg(&a.pipeline)?;
    let db = open_for_reading(&a.dir)?;
    let cursor = crate::common::collection(&db, &a.coll)?.aggregate(pipeline)?;
    print_docs(cursor, a.format)?;
    db.close()?;
    Ok(())
}

/// Runs `explain`.
pub fn explain(a: ExplainArgs) -> CliResult {
    let db = open_for_reading(&a.dir)?;
    let coll = crate::common::collection(&db, &a.coll)?;
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
    let n = crate::common::collection(&db, &a.coll)?.count_documents(filter)?;
    let mut out = Out::new();
    out.line(&n.to_string())?;
    out.finish()?;
    db.close()?;
    Ok(())
}

/// Rows a table's column widths are measured on; later cells are cut to them.
const TABLE_ROWS_MEASURED: usize = 200;

fn print_docs(mut cursor: Cursor, shown: Shown) -> CliResult {
    match shown {
        Shown::Jsonl => {}
        Shown::Pretty => {
            let mut out = Out::new();
            for d in cursor {
                out.json_pretty(&crate::json::to_relaxed(d?))?;
            }
            return Ok(out.finish()?);
        }
        Shown::Csv => {
            let mut w = csv::Writer::from_writer(Out::new());
            let mut columns: Option<Vec<String>> = None;
            for d in cursor {
                let flat = crate::csvdoc::flatten(&d?);
                let cols = match &columns {
                    Some(c) => c,
                    None => {
                        let c = columns.insert(flat.iter().map(|(k, _)| k.clone()).collect());
                        w.write_record(c.iter())?;
                        c
                    }
                };
                w.write_record(cols.iter().map(|c| cell_of(&flat, c)))?;
            }
            w.flush()?;
            let out = w.into_inner().map_err(|e| e.to_string())?;
            return Ok(out.finish()?);
        }
        Shown::Table => return print_table(cursor),
    }
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

/// The text of column `c` in a flattened document; empty where it has none.
fn cell_of<'a>(flat: &'a [(String, String)], c: &str) -> &'a str {
    flat.iter()
        .find(|(k, _)| k == c)
        .map_or("", |(_, v)| v.as_str())
}

/// Documents as a text table, for a person: columns from the fields of the first rows, as
/// wide as their widest cell there (at most 40 characters; longer cells end in `…`).
fn print_table(cursor: Cursor) -> CliResult {
    let mut t = Table::default();
    let mut out = Out::new();
    for d in cursor {
        let flat = crate::csvdoc::flatten(&d?);
        if !t.printed {
            t.measure(&flat);
        }
        t.rows.push(flat);
        if t.rows.len() >= TABLE_ROWS_MEASURED {
            t.print(&mut out)?;
        }
    }
    t.print(&mut out)?;
    Ok(out.finish()?)
}

/// A table being printed: its columns and their widths, and the rows not printed yet.
#[derive(Default)]
struct Table {
    columns: Vec<String>,
    widths: Vec<usize>,
    rows: Vec<Vec<(String, String)>>,
    printed: bool,
}

impl Table {
    fn measure(&mut self, flat: &[(String, String)]) {
        let width = |s: &str| s.chars().count().min(40);
        for (k, v) in flat {
            match self.columns.iter().position(|c| c == k) {
                Some(i) => {
                    if let Some(w) = self.widths.get_mut(i) {
                        *w = (*w).max(width(v));
                    }
                }
                None => {
                    self.columns.push(k.clone());
                    self.widths.push(width(k).max(width(v)));
                }
            }
        }
    }

    fn line(&self, cells: impl Iterator<Item = String>) -> String {
        let mut l = String::new();
        for (c, &w) in cells.zip(&self.widths) {
            let text: String = match c.chars().count() > w {
                true => c.chars().take(w.saturating_sub(1)).chain(['…']).collect(),
                false => c,
            };
            l.push_str(&format!("{text:<w$}  "));
        }
        l.trim_end().to_string()
    }

    /// Prints the header the first time, then the rows held.
    fn print(&mut self, out: &mut Out) -> CliResult {
        if self.rows.is_empty() && self.printed {
            return Ok(());
        }
        if !self.printed {
            out.line(&self.line(self.columns.iter().cloned()))?;
            out.line(&self.line(self.widths.iter().map(|w| "-".repeat(*w))))?;
            self.printed = true;
        }
        for r in std::mem::take(&mut self.rows) {
            let cells = self.columns.iter().map(|c| cell_of(&r, c).to_string());
            out.line(&self.line(cells))?;
        }
        Ok(())
    }
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
