//! `tsbucket export`: a collection's measurements (or those a filter matches, sorted,
//! limited, projected) to JSON Lines, a JSON array, CSV or BSON, for `import`, mongoimport,
//! DuckDB, pandas or a spreadsheet. JSON Lines and BSON import again to identical documents.

use crate::common::{is_std, open_for_reading, CliResult};
use crate::csvdoc::flatten;
use crate::query::Query;
use crate::rawjson::write_relaxed;
use clap::{Args, ValueEnum};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use tsbucket::bson::{Bson, Document, RawDocument};

/// Formats `export` writes.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum ExportFormat {
    /// Relaxed Extended JSON, one document per line (mongoexport's default).
    Jsonl,
    /// A JSON array of relaxed Extended JSON documents (mongoexport's --jsonArray).
    Json,
    /// A header and a row per document; nested fields as dotted columns.
    Csv,
    /// Concatenated BSON documents (as mongodump writes).
    Bson,
}

/// Flags of `tsbucket export`.
#[derive(Args)]
pub struct ExportArgs {
    /// Database directory.
    dir: PathBuf,
    /// Collection name.
    coll: String,
    #[command(flatten)]
    query: Query,
    /// Output file; `-` is stdout.
    #[arg(long, short, default_value = "-")]
    out: PathBuf,
    /// Output format (default: by the file's extension, else JSON Lines).
    #[arg(long, value_enum)]
    format: Option<ExportFormat>,
    /// JSON: canonical Extended JSON (every number's type kept) instead of relaxed.
    #[arg(long)]
    canonical: bool,
    /// CSV: the columns, as dotted paths (default: the first document's fields).
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    fields: Vec<String>,
}

/// Runs `export`.
pub fn run(a: ExportArgs) -> CliResult {
    let format = a.format.unwrap_or_else(|| {
        let ext = a
            .out
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or_default();
        match ext.to_ascii_lowercase().as_str() {
            "json" => ExportFormat::Json,
            "csv" => ExportFormat::Csv,
            "bson" => ExportFormat::Bson,
            _ => ExportFormat::Jsonl,
        }
    });
    let db = open_for_reading(&a.dir)?;
    let mut cursor = a.query.run(&db, &a.coll)?;
    let sink: Box<dyn Write> = match is_std(&a.out) {
        true => Box::new(io::stdout().lock()),
        false => Box::new(File::create(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?),
    };
    let mut w = BufWriter::with_capacity(1 << 16, sink);
    let mut n = 0u64;
    match format {
        ExportFormat::Bson => {
            let mut buf = Vec::new();
            while cursor.next_into(&mut buf)? {
                w.write_all(&buf)?;
                buf.clear();
                n += 1;
            }
        }
        ExportFormat::Jsonl | ExportFormat::Json => {
            let array = format == ExportFormat::Json;
            if array {
                w.write_all(b"[")?;
            }
            let (mut bson, mut text) = (Vec::new(), Vec::new());
            while cursor.next_into(&mut bson)? {
                text.clear();
                if array {
                    text.extend_from_slice(if n == 0 { b"\n" } else { b",\n" });
                }
                match a.canonical {
                    false => write_relaxed(RawDocument::from_bytes(&bson)?, &mut text)?,
                    true => {
                        let d = Document::from_reader(bson.as_slice())?;
                        serde_json::to_writer(
                            &mut text,
                            &Bson::Document(d).into_canonical_extjson(),
                        )?;
                    }
                }
                if !array {
                    text.push(b'\n');
                }
                w.write_all(&text)?;
                bson.clear();
                n += 1;
            }
            if array {
                w.write_all(b"\n]\n")?;
            }
        }
        ExportFormat::Csv => {
            let mut out = csv::Writer::from_writer(&mut w);
            let mut columns = a.fields.clone();
            for d in cursor.by_ref() {
                let flat = flatten(&d?);
                if n == 0 {
                    if columns.is_empty() {
                        columns = flat.iter().map(|(k, _)| k.clone()).collect();
                    }
                    out.write_record(&columns)?;
                }
                let row = columns.iter().map(|c| {
                    flat.iter()
                        .find(|(k, _)| k == c)
                        .map_or("", |(_, v)| v.as_str())
                });
                out.write_record(row)?;
                n += 1;
            }
            if n == 0 && !columns.is_empty() {
                out.write_record(&columns)?;
            }
            out.flush()?;
        }
    }
    w.flush()?;
    drop(w);
    db.close()?;
    if !is_std(&a.out) {
        eprintln!("exported {n} documents to {}", a.out.display());
    }
    Ok(())
}
