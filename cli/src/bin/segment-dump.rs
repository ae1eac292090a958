//! `segment-dump`: shows what tsbucket segment files hold, and checks them.
//!
//! It reads files only through the crate's public segment reader, so whatever it can show, an
//! embedding program can read too; and a file it calls good is one the engine will read.

// Nothing a user types or a file holds may panic the tool: no unwrap, no expect, no indexing
// that can go out of bounds. Tests may.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

// The `tsbucket` binary's relaxed Extended JSON, so that both print dates alike.
#[path = "tsbucket/extjson.rs"]
mod extjson;

use clap::Parser;
use serde_json::{json, Map, Value};
use std::collections::{BTreeSet, HashMap};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tsbucket::bson::{Bson, Document};
use tsbucket::codec::{column_codec, decode_column, ids, CodecError};
use tsbucket::manifest::{parse_segment_name, Manifest};
use tsbucket::query::unpack::row_document;
use tsbucket::segment::format::HEADER_MAGIC;
use tsbucket::segment::{BucketLayout, BucketSummary, Segment};
use tsbucket::sums::SUM_KEY;
use tsbucket::vfs::RealFs;
use tsbucket::Error;

const AFTER_HELP: &str = "\
A DIR argument dumps every *.seg file in it and, for a database directory, in its seg/
subdirectory, sorted by name; other entries are skipped with a note on stderr. When a file
lies in a database's seg/ directory, the collection's name and meta field are read from the
database's MANIFEST.

Text output, per file: path, header (magic, format version, directory version, collection
id, time field), file size and where its bytes go, bucket and row counts, the BSON size of
the measurements as inserted and its ratio to the file size; per bucket: _id (hex, and the
bucket start in its time prefix), meta, count and BSON size as inserted, control.min,
control.max, the per-field sums kept in control.max (shown as sums), where its data lies
(page, page offset, bytes within the page) and a table of its columns: name, codec (name and id), rows that have
a value, raw bytes (the column as a BSON document {\"0\": v0, \"1\": v1, ...} of its present
rows, as MongoDB's uncompressed bucket stores it under data.<name>), encoded bytes and
raw/encoded. Names starting with U+0001 are the engine's bookkeeping.

--json prints one JSON document per file, one per line, with these keys:
  path, file_size, bucket_count, row_count, bson_bytes (BSON size of the measurements as
  inserted; null for files written before directory version 3),
  header {magic, format_version, directory_version, collection_id, time_field},
  collection {name, meta_field} (null when no MANIFEST names the collection),
  layout {header_bytes, page_count, zstd_page_count, page_bytes_stored, page_bytes_raw,
          directory_bytes_stored, directory_bytes_raw, footer_bytes},
  buckets [{index, expired (true when the MANIFEST lists the bucket as deleted by the TTL
            sweeper; left out otherwise), id, id_time, meta (left out when the bucket has no
            meta field), count, bson_bytes (null when unknown),
            control {min, max, sums (left out when the bucket keeps none)},
            data {page, page_offset, page_compressed, offset_in_page, bytes},
            columns [{name, codec, codec_id, rows, raw_bytes, encoded_bytes, ratio}],
            rows [...] (only with --rows)}]
BSON values are relaxed Extended JSON.

Exit status: 0 all files good, 1 a file is damaged or unreadable (reported as
\"FILE: offset N: what is wrong\" on stderr; the other files are still processed), 2 usage.";

/// Prints the contents of tsbucket segment files, or checks them.
#[derive(Parser)]
#[command(name = "segment-dump", version, after_help = AFTER_HELP)]
struct Cli {
    /// Segment files or directories.
    #[arg(required = true, value_name = "FILE|DIR")]
    paths: Vec<PathBuf>,
    /// One machine-readable JSON document per file (keys below).
    #[arg(long)]
    json: bool,
    /// Also print each bucket's measurements as find returns them, one relaxed Extended JSON
    /// document per line.
    #[arg(long)]
    rows: bool,
    /// Check every checksum and that every column decodes and agrees with the bucket's count
    /// and control.min/max; print "FILE: ok ..." per good file. With --json or --rows, good
    /// files are then dumped.
    #[arg(long)]
    check: bool,
    /// Name under which --rows shows the meta value (default: the collection's meta field from
    /// the database's MANIFEST, else "meta").
    #[arg(long, value_name = "NAME")]
    meta_field: Option<String>,
}

/// Why a file could not be dumped; the message is the line printed for it.
struct Failure(String);

/// Ends the run early: stdout is gone (e.g. piped into `head`) or cannot be written.
struct StdoutGone(io::Error);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut failed = false;
    let mut manifests = Manifests::default();
    let stdout = io::stdout();
    let mut out = stdout.lock();
    for arg in &cli.paths {
        let files = match expand(arg) {
            Ok(f) => f,
            Err(e) => {
                let _ = out.flush();
                eprintln!("{}: {e}", arg.display());
                failed = true;
                continue;
            }
        };
        for f in &files {
            let r = match cli.check.then(|| check(f)) {
                Some(Err(e)) => Err(e),
                Some(Ok(ok)) if !cli.json && !cli.rows => {
                    Ok(writeln!(out, "{}: {ok}", f.display()).map_err(StdoutGone))
                }
                _ => dump(&cli, f, &mut manifests, &mut out),
            };
            match r {
                Ok(Ok(())) => {}
                Ok(Err(StdoutGone(e))) => {
                    if e.kind() != io::ErrorKind::BrokenPipe {
                        eprintln!("segment-dump: cannot write the output: {e}");
                    }
                    return ExitCode::FAILURE;
                }
                Err(Failure(msg)) => {
                    // What was printed of a damaged file is kept; the problem ends it.
                    let _ = out.flush();
                    eprintln!("{msg}");
                    failed = true;
                }
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Whether `entry` is one of a database directory's own files (lock, manifest, log), which
/// are expected beside `seg/` and not worth a note.
fn is_database_entry(dir: &Path, entry: &Path) -> bool {
    dir.join("seg").is_dir()
        && entry
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| matches!(n, "LOCK" | "MANIFEST" | "wal"))
}

/// The files an argument names: itself, or a directory's `*.seg` files (and those of its `seg/`
/// subdirectory), sorted by name. Skipped entries are noted on stderr.
fn expand(p: &Path) -> io::Result<Vec<PathBuf>> {
    if !std::fs::metadata(p)?.is_dir() {
        return Ok(vec![p.to_path_buf()]);
    }
    let mut files = Vec::new();
    let mut seg_dir = None;
    for entry in sorted_entries(p)? {
        if entry.is_dir() && entry.file_name().is_some_and(|n| n == "seg") {
            seg_dir = Some(entry);
        } else if is_segment_name(&entry) && !entry.is_dir() {
            files.push(entry);
        } else if !is_database_entry(p, &entry) {
            eprintln!("note: skipping {}: not a segment file", entry.display());
        }
    }
    if let Some(d) = seg_dir {
        for entry in sorted_entries(&d)? {
            if is_segment_name(&entry) && !entry.is_dir() {
                files.push(entry);
            } else {
                eprintln!("note: skipping {}: not a segment file", entry.display());
            }
        }
    }
    if files.is_empty() {
        eprintln!("note: no segment files in {}", p.display());
    }
    Ok(files)
}

fn sorted_entries(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut v = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<io::Result<Vec<_>>>()?;
    v.sort();
    Ok(v)
}

fn is_segment_name(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == "seg")
}

/// The line for an error of file `path`: `FILE: offset N: what is wrong` for damage.
fn failure(path: &Path, e: Error) -> Failure {
    Failure(match e {
        Error::Corruption { offset, detail, .. } => {
            format!("{}: offset {offset}: {detail}", path.display())
        }
        e => format!("{}: {e}", path.display()),
    })
}

/// Opens and verifies `path`; the summary line for a good file.
fn check(path: &Path) -> Result<String, Failure> {
    let seg = Segment::open(&RealFs, path).map_err(|e| failure(path, e))?;
    seg.verify().map_err(|e| failure(path, e))?;
    let rows: u64 = seg.buckets().iter().map(|b| u64::from(b.count)).sum();
    Ok(format!(
        "ok ({} buckets, {rows} rows, {} bytes)",
        seg.buckets().len(),
        seg.len_bytes()
    ))
}

/// Collection names and meta fields, from the MANIFEST of the database a segment lies in.
#[derive(Default)]
struct Manifests {
    by_db: HashMap<PathBuf, Option<Manifest>>,
}

impl Manifests {
    /// The (name, meta field) of collection `id` if `seg_path` is in a database's `seg/`.
    fn collection(&mut self, seg_path: &Path, id: u32) -> Option<(String, Option<String>)> {
        let seg_dir = seg_path.parent()?;
        if seg_dir.file_name()? != "seg" {
            return None;
        }
        let db = seg_dir.parent()?.to_path_buf();
        let m = self.by_db.entry(db.clone()).or_insert_with(|| {
            Manifest::load(&RealFs, &db).unwrap_or_else(|e| {
                eprintln!("note: cannot read the MANIFEST of {}: {e}", db.display());
                None
            })
        });
        let c = m.as_ref()?.collections.iter().find(|c| c.id == id)?;
        Some((
            c.name.clone(),
            c.options.get_meta_field().map(str::to_string),
        ))
    }

    /// Positions of the buckets of `seg_path` that its database's TTL sweeper deleted.
    fn expired(&mut self, seg_path: &Path, id: u32) -> BTreeSet<u32> {
        let Some(sid) = seg_path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(parse_segment_name)
        else {
            return BTreeSet::new();
        };
        if self.collection(seg_path, id).is_none() {
            return BTreeSet::new();
        }
        let db = seg_path.parent().and_then(Path::parent);
        db.and_then(|d| self.by_db.get(d))
            .and_then(|m| m.as_ref())
            .and_then(|m| m.collections.iter().find(|c| c.id == id))
            .and_then(|c| c.expired.get(&sid).cloned())
            .unwrap_or_default()
    }
}

/// What a column costs, from its encoded bytes.
struct ColumnReport {
    name: String,
    codec_id: Option<u8>,
    rows: usize,
    raw_bytes: usize,
    encoded_bytes: usize,
}

impl ColumnReport {
    fn codec(&self) -> &'static str {
        self.codec_id.and_then(ids::name).unwrap_or("unknown")
    }
    fn ratio(&self) -> Option<f64> {
        (self.encoded_bytes > 0).then(|| self.raw_bytes as f64 / self.encoded_bytes as f64)
    }
}

/// Decodes every column of bucket `i` and measures it.
fn columns_of(
    seg: &Segment,
    i: usize,
    layout: &BucketLayout,
) -> tsbucket::Result<Vec<ColumnReport>> {
    let names: Vec<&str> = layout.columns.iter().map(|(n, _)| n.as_str()).collect();
    let measured = seg.read_columns_with(i, &names, |bytes, rows| {
        let values = decode_column(bytes, rows)?;
        if values.len() != rows {
            return Err(CodecError::new(
                0,
                format!("decoded to {} rows, expected {rows}", values.len()),
            ));
        }
        let mut raw = Document::new();
        for (r, v) in values.iter().enumerate() {
            if let Some(v) = v {
                raw.insert(r.to_string(), v.clone());
            }
        }
        let raw_bytes = raw
            .to_vec()
            .map_err(|e| CodecError::new(0, format!("cannot encode as BSON: {e}")))?
            .len();
        Ok((
            column_codec(bytes),
            values.iter().flatten().count(),
            raw_bytes,
            bytes.len(),
        ))
    })?;
    Ok(names
        .iter()
        .zip(measured)
        .filter_map(|(name, m)| {
            let (codec_id, rows, raw_bytes, encoded_bytes) = m?;
            Some(ColumnReport {
                name: (*name).to_string(),
                codec_id,
                rows,
                raw_bytes,
                encoded_bytes,
            })
        })
        .collect())
}

/// Bucket `i`'s measurements as find returns them.
fn rows_of(seg: &Segment, i: usize, meta_field: &str, at: u64) -> tsbucket::Result<Vec<Value>> {
    let b = seg.read_bucket(i)?;
    (0..b.count as usize)
        .map(|r| {
            row_document(&b, r, Some(meta_field))
                .map(|d| extjson::relaxed(Bson::Document(d)))
                .ok_or_else(|| {
                    Error::corruption(
                        seg.path(),
                        at,
                        format!("bucket {i}: row {r} does not match the bucket's field orders"),
                    )
                })
        })
        .collect()
}

fn ext(b: &Bson) -> Value {
    extjson::relaxed(b.clone())
}

/// `control.min` or `control.max` without the sums entry.
fn control(d: &Document) -> Value {
    let visible: Document = d
        .iter()
        .filter(|(k, _)| k.as_str() != SUM_KEY)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    extjson::relaxed(Bson::Document(visible))
}

/// The bucket start in the `_id`'s time prefix, RFC 3339.
fn id_time(s: &BucketSummary) -> String {
    let t = s.id.timestamp();
    t.try_to_rfc3339_string()
        .unwrap_or_else(|_| format!("{} ms", t.timestamp_millis()))
}

/// A name as a JSON string: bookkeeping names (U+0001...) stay readable.
fn quoted(name: &str) -> String {
    Value::String(name.to_string()).to_string()
}

/// Dumps one file. A damaged file ends with a `Failure` after what could be printed.
fn dump(
    cli: &Cli,
    path: &Path,
    manifests: &mut Manifests,
    out: &mut impl Write,
) -> Result<Result<(), StdoutGone>, Failure> {
    let fail = |e| failure(path, e);
    let seg = Segment::open(&RealFs, path).map_err(fail)?;
    let info = seg.info();
    let coll = manifests.collection(path, info.collection_id);
    let expired = manifests.expired(path, info.collection_id);
    let meta_field = cli
        .meta_field
        .clone()
        .or_else(|| coll.as_ref().and_then(|c| c.1.clone()))
        .unwrap_or_else(|| "meta".into());
    let st = seg.stats();
    let rows: u64 = seg.buckets().iter().map(|b| u64::from(b.count)).sum();
    let magic = String::from_utf8_lossy(&HEADER_MAGIC).into_owned();
    let mut w = Writer { out, gone: None };

    let mut doc = Map::new();
    if cli.json {
        doc.insert("path".into(), json!(path.display().to_string()));
        doc.insert("file_size".into(), json!(seg.len_bytes()));
        doc.insert("bucket_count".into(), json!(seg.buckets().len()));
        doc.insert("row_count".into(), json!(rows));
        doc.insert("bson_bytes".into(), json!(seg.bson_bytes()));
        doc.insert(
            "header".into(),
            json!({
                "magic": magic,
                "format_version": seg.format_version(),
                "directory_version": seg.directory_version(),
                "collection_id": info.collection_id,
                "time_field": info.time_field,
            }),
        );
        doc.insert(
            "collection".into(),
            coll.as_ref()
                .map_or(Value::Null, |(n, m)| json!({"name": n, "meta_field": m})),
        );
        doc.insert(
            "layout".into(),
            json!({
                "header_bytes": st.header_bytes,
                "page_count": st.page_count,
                "zstd_page_count": st.zstd_page_count,
                "page_bytes_stored": st.page_bytes_stored,
                "page_bytes_raw": st.page_bytes_raw,
                "directory_bytes_stored": st.directory_bytes_stored,
                "directory_bytes_raw": st.directory_bytes_raw,
                "footer_bytes": st.footer_bytes,
            }),
        );
    } else {
        w.line(format_args!("file {}", path.display()));
        w.line(format_args!(
            "  header: magic {}, format version {}, directory version {}",
            quoted(&magic),
            seg.format_version(),
            seg.directory_version()
        ));
        let named = coll.as_ref().map_or(String::new(), |(n, m)| {
            let meta = m.as_deref().map_or("none".into(), quoted);
            format!(" ({}, meta field {meta})", quoted(n))
        });
        w.line(format_args!(
            "  collection: {}{named}, time field {}",
            info.collection_id,
            quoted(&info.time_field)
        ));
        w.line(format_args!(
            "  size: {} bytes = header {} + pages {} + directory {} + footer {}",
            seg.len_bytes(),
            st.header_bytes,
            st.page_bytes_stored,
            st.directory_bytes_stored,
            st.footer_bytes
        ));
        w.line(format_args!(
            "  pages: {} ({} zstd), {} bytes decompressed; directory: {} bytes decompressed",
            st.page_count, st.zstd_page_count, st.page_bytes_raw, st.directory_bytes_raw
        ));
        w.line(format_args!(
            "  buckets: {}, rows: {rows}",
            seg.buckets().len()
        ));
        match seg.bson_bytes() {
            Some(n) => w.line(format_args!(
                "  inserted as {n} bytes of BSON: {:.2}x the file size",
                n as f64 / seg.len_bytes().max(1) as f64
            )),
            None => w.line(format_args!(
                "  inserted BSON size: unknown (written before directory version 3)"
            )),
        }
    }

    let mut buckets = Vec::new();
    for (i, s) in seg.buckets().iter().enumerate() {
        let layout = seg.bucket_layout(i).map_err(fail)?;
        let columns = columns_of(&seg, i, &layout).map_err(fail)?;
        let measurements = if cli.rows {
            rows_of(&seg, i, &meta_field, layout.page_offset).map_err(fail)?
        } else {
            Vec::new()
        };
        let ctl = seg.decode_control(i, s).map_err(fail)?;
        let sums = match ctl.max.get(SUM_KEY) {
            Some(sums @ Bson::Document(_)) => Some(ext(sums)),
            _ => None,
        };
        if cli.json {
            let mut b = Map::new();
            b.insert("index".into(), json!(i));
            if expired.contains(&(i as u32)) {
                b.insert("expired".into(), json!(true));
            }
            b.insert("id".into(), json!(s.id.to_hex()));
            b.insert("id_time".into(), json!(id_time(s)));
            if let Some(m) = seg.meta_of(s) {
                b.insert("meta".into(), ext(m));
            }
            b.insert("count".into(), json!(s.count));
            b.insert("bson_bytes".into(), json!(s.bson_bytes));
            let mut c = Map::new();
            c.insert("min".into(), control(&ctl.min));
            c.insert("max".into(), control(&ctl.max));
            if let Some(sums) = sums {
                c.insert("sums".into(), sums);
            }
            b.insert("control".into(), Value::Object(c));
            b.insert(
                "data".into(),
                json!({
                    "page": layout.page,
                    "page_offset": layout.page_offset,
                    "page_compressed": layout.page_compressed,
                    "offset_in_page": layout.offset_in_page,
                    "bytes": layout.len,
                }),
            );
            let cols: Vec<Value> = columns
                .iter()
                .map(|c| {
                    json!({
                        "name": c.name,
                        "codec": c.codec(),
                        "codec_id": c.codec_id,
                        "rows": c.rows,
                        "raw_bytes": c.raw_bytes,
                        "encoded_bytes": c.encoded_bytes,
                        "ratio": c.ratio(),
                    })
                })
                .collect();
            b.insert("columns".into(), Value::Array(cols));
            if cli.rows {
                b.insert("rows".into(), Value::Array(measurements));
            }
            buckets.push(Value::Object(b));
            continue;
        }
        w.line(format_args!(
            "bucket {i}: _id {} ({}){}",
            s.id.to_hex(),
            id_time(s),
            if expired.contains(&(i as u32)) {
                ", deleted by the TTL sweeper"
            } else {
                ""
            }
        ));
        match seg.meta_of(s) {
            Some(m) => w.line(format_args!("  meta: {}", ext(m))),
            None => w.line(format_args!("  meta: (none)")),
        }
        match s.bson_bytes {
            Some(n) => w.line(format_args!(
                "  count: {}, inserted as {n} bytes of BSON",
                s.count
            )),
            None => w.line(format_args!("  count: {}", s.count)),
        }
        w.line(format_args!("  control.min: {}", control(&ctl.min)));
        w.line(format_args!("  control.max: {}", control(&ctl.max)));
        if let Some(sums) = sums {
            w.line(format_args!("  sums: {sums}"));
        }
        w.line(format_args!(
            "  data: page {} at file offset {} ({}), bytes {}..{} of the page",
            layout.page,
            layout.page_offset,
            if layout.page_compressed {
                "zstd"
            } else {
                "raw"
            },
            layout.offset_in_page,
            u64::from(layout.offset_in_page) + u64::from(layout.len)
        ));
        print_columns(&mut w, &columns);
        for m in &measurements {
            w.line(format_args!("{m}"));
        }
    }
    if cli.json {
        doc.insert("buckets".into(), Value::Array(buckets));
        w.line(format_args!("{}", Value::Object(doc)));
    }
    Ok(w.finish())
}

fn print_columns(w: &mut Writer<'_, impl Write>, columns: &[ColumnReport]) {
    let names: Vec<String> = columns.iter().map(|c| quoted(&c.name)).collect();
    let codecs: Vec<String> = columns
        .iter()
        .map(|c| match c.codec_id {
            Some(id) => format!("{}({id})", c.codec()),
            None => c.codec().to_string(),
        })
        .collect();
    let nw = names.iter().map(String::len).max().unwrap_or(0).max(6);
    let cw = codecs.iter().map(String::len).max().unwrap_or(0).max(5);
    w.line(format_args!(
        "  {:<nw$}  {:<cw$}  {:>6}  {:>9}  {:>9}  {:>6}",
        "column", "codec", "rows", "raw", "encoded", "ratio"
    ));
    for ((c, name), codec) in columns.iter().zip(&names).zip(&codecs) {
        let ratio = c.ratio().map_or("-".into(), |r| format!("{r:.2}"));
        w.line(format_args!(
            "  {name:<nw$}  {codec:<cw$}  {:>6}  {:>9}  {:>9}  {ratio:>6}",
            c.rows, c.raw_bytes, c.encoded_bytes
        ));
    }
}

/// Writes lines to stdout, remembering the first failure instead of panicking like `println!`.
struct Writer<'a, W: Write> {
    out: &'a mut W,
    gone: Option<io::Error>,
}

impl<W: Write> Writer<'_, W> {
    fn line(&mut self, args: std::fmt::Arguments<'_>) {
        if self.gone.is_none() {
            if let Err(e) = writeln!(self.out, "{args}") {
                self.gone = Some(e);
            }
        }
    }

    fn finish(self) -> Result<(), StdoutGone> {
        match self.gone {
            Some(e) => Err(StdoutGone(e)),
            None => self.out.flush().map_err(StdoutGone),
        }
    }
}
