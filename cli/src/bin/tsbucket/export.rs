//! `tsbucket export`: a collection's measurements (or those a filter matches, sorted,
//! limited, projected) to JSON Lines, a JSON array, CSV, BSON or Parquet, for `import`,
//! mongoimport, DuckDB, pandas or a spreadsheet. JSON Lines and BSON import again to identical
//! documents. A file is written whole or not at all: a failed or interrupted export leaves
//! no partial file, and any earlier file of that name as it was.

use crate::common::{ctrl_c_flag, is_std, open_for_reading, AtomicFile, CliResult, Interrupted};
use crate::csvdoc::flatten;
use crate::ordered::{cores, ordered};
use crate::parquet_writer::{Columns, ParquetWriter};
use crate::query::Query;
use crate::rawjson::write_relaxed;
use clap::{Args, ValueEnum};
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
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
    /// Apache Parquet, zstd-compressed: a column per dotted path, typed by its values.
    Parquet,
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
    /// CSV and Parquet: the columns, as dotted paths (default: CSV the first document's
    /// fields, Parquet every field of every document).
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    fields: Vec<String>,
}

/// Bytes of BSON documents a JSON worker formats at a time.
const JSON_RUN_BYTES: usize = 256 << 10;

/// The documents of `bson` (one after another) as JSON text: a line each, or, in an
/// array, each after a comma (or, the first of the array, after `[`).
fn json_text(bson: &[u8], first: bool, array: bool, canonical: bool) -> Result<Vec<u8>, String> {
    let mut text = Vec::with_capacity(bson.len() + bson.len() / 2);
    let mut at = 0;
    while at < bson.len() {
        let len = bson
            .get(at..at + 4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(i32::from_le_bytes)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n >= 5)
            .ok_or("a returned document is not well-formed BSON")?;
        let doc = bson
            .get(at..at + len)
            .ok_or("a returned document is not well-formed BSON")?;
        if array {
            text.extend_from_slice(if first && at == 0 { b"\n" } else { b",\n" });
        }
        match canonical {
            false => write_relaxed(
                RawDocument::from_bytes(doc).map_err(|e| e.to_string())?,
                &mut text,
            )?,
            true => {
                let d = Document::from_reader(doc).map_err(|e| e.to_string())?;
                serde_json::to_writer(&mut text, &Bson::Document(d).into_canonical_extjson())
                    .map_err(|e| e.to_string())?;
            }
        }
        if !array {
            text.push(b'\n');
        }
        at += len;
    }
    Ok(text)
}

/// A CSV error; a failed write stays an `io::Error` (the csv crate's error does not expose it
/// as its source), so that a closed pipe is known as one.
fn csv_error(e: csv::Error) -> Box<dyn std::error::Error> {
    if !e.is_io_error() {
        return e.into();
    }
    match e.into_kind() {
        csv::ErrorKind::Io(io) => io.into(),
        other => format!("{other:?}").into(),
    }
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
            "parquet" => ExportFormat::Parquet,
            _ => ExportFormat::Jsonl,
        }
    });
    let db = open_for_reading(&a.dir)?;
    let stop = ctrl_c_flag()?;
    let file = match is_std(&a.out) {
        true => None,
        false => Some(AtomicFile::create(&a.out)?),
    };
    let sink: Box<dyn Write + Send> = match &file {
        None => Box::new(io::stdout()),
        Some(f) => Box::new(f.file()?),
    };
    let mut w = BufWriter::with_capacity(1 << 16, sink);
    let n = write(&a, format, &db, &mut w, &stop);
    let n = match n {
        Err(e) if e.is::<Interrupted>() => {
            let at = match is_std(&a.out) {
                true => "; what was written to stdout is incomplete".to_string(),
                false => format!("; nothing was written to {}", a.out.display()),
            };
            return Err(Box::new(Interrupted(format!("export interrupted{at}"))));
        }
        r => r?,
    };
    w.flush()?;
    drop(w);
    db.close()?;
    if let Some(f) = file {
        f.commit()?;
        eprintln!("exported {n} documents to {}", a.out.display());
    }
    Ok(())
}

/// Writes the query's documents to `w` as `format`; returns how many.
fn write(
    a: &ExportArgs,
    format: ExportFormat,
    db: &tsbucket::Database,
    w: &mut BufWriter<Box<dyn Write + Send>>,
    stop: &AtomicBool,
) -> CliResult<u64> {
    let check = || match stop.load(Ordering::Relaxed) {
        true => Err(Interrupted(String::new())),
        false => Ok(()),
    };
    let mut cursor = a.query.run(db, &a.coll)?;
    let mut n = 0u64;
    match format {
        ExportFormat::Bson => {
            let mut buf = Vec::new();
            while cursor.next_into(&mut buf)? {
                check()?;
                w.write_all(&buf)?;
                buf.clear();
                n += 1;
            }
        }
        ExportFormat::Jsonl | ExportFormat::Json => {
            let (array, canonical) = (format == ExportFormat::Json, a.canonical);
            if array {
                w.write_all(b"[")?;
            }
            // Documents go to the workers in runs of about 256 KiB of BSON, and their text
            // comes back in order to a writing thread: formatting JSON is most of an export.
            let (feed, texts) = ordered(
                cores(),
                Arc::new(move |(first, bson): (bool, Vec<u8>)| {
                    json_text(&bson, first, array, canonical)
                }),
            );
            n = std::thread::scope(|s| -> CliResult<u64> {
                let out = &mut *w;
                // An io::Error stays one, so that a closed pipe still ends the export quietly.
                let writer = s.spawn(move || -> io::Result<()> {
                    for text in texts {
                        out.write_all(&text.map_err(io::Error::other)?)?;
                    }
                    Ok(())
                });
                // Moved in, so that any return below ends the feed and so the writer.
                let mut feed = feed;
                let fed = (|| -> CliResult<u64> {
                    let (mut run, mut first, mut n) = (Vec::new(), true, 0u64);
                    while cursor.next_into(&mut run)? {
                        check()?;
                        n += 1;
                        if run.len() >= JSON_RUN_BYTES {
                            if !feed.send((first, std::mem::take(&mut run))) {
                                break;
                            }
                            first = false;
                        }
                    }
                    if !run.is_empty() {
                        feed.send((first, run));
                    }
                    Ok(n)
                })();
                drop(feed);
                let written = writer
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                let n = fed?;
                written?;
                Ok(n)
            })?;
            if array {
                w.write_all(b"\n]\n")?;
            }
        }
        ExportFormat::Csv => {
            let mut out = csv::Writer::from_writer(&mut *w);
            let mut columns = a.fields.clone();
            for d in cursor.by_ref() {
                check()?;
                let flat = flatten(&d?);
                if n == 0 {
                    if columns.is_empty() {
                        columns = flat.iter().map(|(k, _)| k.clone()).collect();
                    }
                    out.write_record(&columns).map_err(csv_error)?;
                }
                let row = columns.iter().map(|c| {
                    flat.iter()
                        .find(|(k, _)| k == c)
                        .map_or("", |(_, v)| v.as_str())
                });
                out.write_record(row).map_err(csv_error)?;
                n += 1;
            }
            if n == 0 && !columns.is_empty() {
                out.write_record(&columns).map_err(csv_error)?;
            }
            out.flush()?;
        }
        ExportFormat::Parquet => {
            // Parquet fixes its columns first: one read learns them, a second writes.
            let mut columns = Columns::new(&a.fields);
            let mut buf = Vec::new();
            while cursor.next_into(&mut buf)? {
                check()?;
                columns.survey(RawDocument::from_bytes(&buf)?)?;
                buf.clear();
            }
            let mut cursor = a.query.run(db, &a.coll)?;
            let mut out = ParquetWriter::new(columns, &mut *w)?;
            while cursor.next_into(&mut buf)? {
                check()?;
                out.push(RawDocument::from_bytes(&buf)?)?;
                buf.clear();
                n += 1;
            }
            out.finish()?;
        }
    }
    Ok(n)
}
