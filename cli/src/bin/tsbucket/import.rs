//! `tsbucket import`: JSON (lines, pretty or an array), BSON (a time-series collection's
//! mongodump too), CSV or line protocol files, compressed or not, into a collection, in
//! `insert_many_raw` batches. A batch is all-or-nothing, so a bad record stops the import with
//! its batch unwritten and earlier batches kept, and says which record was written last;
//! `--skip-bad` drops bad records instead and counts them.

use crate::admin::BucketArgs;
use crate::common::{open_existing, open_for_writing, CliResult, Format};
use crate::csvdoc::CsvOptions;
use crate::out::Out;
use crate::sources::{self, Loc, Record};
use crate::times::{TimeRead, TimeUnit};
use clap::Args;
use crossbeam_channel::{RecvTimeoutError, Sender};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tsbucket::bson::{Bson, Document, RawBsonRef, RawDocumentBuf};
use tsbucket::{Collection, Database, Error};

/// Bytes of documents that make a batch whatever `--batch` says: far below the engine's
/// limit on a batch, so that wide documents are not refused in batches of many.
const BATCH_BYTES: usize = 8 << 20;

/// Bad records described on stderr with `--skip-bad`; later ones are only counted.
const SHOWN_BAD: u64 = 10;

/// Flags of `tsbucket import`.
#[derive(Args)]
pub struct ImportArgs {
    /// Database directory.
    dir: PathBuf,
    /// Collection name.
    coll: String,
    /// Files to import in order; `-` reads stdin.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Input format; auto goes by the file extension, else by the first bytes.
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    format: Format,
    /// Measurements per insert batch (each batch is written all or nothing).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    batch: u64,
    /// Skip records that cannot be imported (reporting the first few) instead of stopping.
    #[arg(long)]
    skip_bad: bool,
    /// Create the collection first (it may exist with the same options).
    #[arg(long, requires = "time_field")]
    create: bool,
    /// Drop the collection first, with its data and indexes, as mongoimport's --drop does;
    /// without --create it is made again with the options it had.
    #[arg(long)]
    drop: bool,
    /// Time field of the collection to create.
    #[arg(long, requires = "create")]
    time_field: Option<String>,
    #[command(flatten)]
    bucket: BucketArgs,
    /// CSV: column holding the time (default: the time field).
    #[arg(long, value_name = "C")]
    time_column: Option<String>,
    /// Unit of times given as epoch numbers (CSV cells, JSON numbers). Without it, an epoch
    /// number is read as milliseconds only when that gives a date from 1973 to 5138, and
    /// refused otherwise.
    #[arg(long, value_enum, value_name = "UNIT")]
    time_unit: Option<TimeUnit>,
    /// Line protocol: the unit of timestamps, as InfluxDB's `precision` (default: ns).
    #[arg(long, value_enum, value_name = "UNIT", conflicts_with = "time_unit")]
    precision: Option<TimeUnit>,
    /// `strftime` format of times given as text, such as '%Y-%m-%d %H:%M:%S' (read as UTC
    /// unless the format has a zone, %z). Without it, text times must be RFC 3339.
    #[arg(long, value_name = "FMT")]
    time_format: Option<String>,
    /// CSV: header cells state their column's type as mongoimport's --columnsHaveTypes does,
    /// `name.type()`: auto, string, int32, int64, double, decimal, boolean, date, date(FORMAT).
    #[arg(long)]
    columns_have_types: bool,
    /// CSV: the character between fields: one ASCII character, or `tab`.
    #[arg(long, value_name = "C", default_value = ",", value_parser = parse_delimiter)]
    delimiter: u8,
    /// CSV: columns stored, as strings, as subfields of the meta field. Columns named
    /// `<metaField>.x` are meta subfields anyway; other columns are typed by content.
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    meta_columns: Vec<String>,
}

/// A `--delimiter`: one ASCII character other than a quote or a line end, or `tab`.
fn parse_delimiter(s: &str) -> Result<u8, String> {
    match s.as_bytes() {
        b"tab" | b"\\t" | b"\t" => Ok(b'\t'),
        [b'"' | b'\n' | b'\r'] => Err(format!("{s:?} cannot separate CSV fields")),
        &[b] if b.is_ascii() => Ok(b),
        _ => Err(format!(
            "the delimiter must be one ASCII character or 'tab', not {s:?}"
        )),
    }
}

/// `d` with its time field a date: an epoch number or text read as `times` says (see
/// [`TimeRead`]); other values are left for the engine to refuse. Documents whose time is a
/// date already, as nearly all are, pass as they are.
fn time_as_date(
    d: RawDocumentBuf,
    time_field: &str,
    times: &TimeRead,
) -> Result<RawDocumentBuf, String> {
    match d.get(time_field) {
        Ok(Some(RawBsonRef::DateTime(_)) | None) | Err(_) => return Ok(d),
        Ok(Some(_)) => {}
    }
    let mut doc = Document::from_reader(d.as_bytes()).map_err(|e| format!("invalid BSON: {e}"))?;
    let Some(got) = doc.get(time_field).and_then(|v| times.value(v)) else {
        return Ok(d);
    };
    let t = got.map_err(|why| format!("field '{time_field}': {why}"))?;
    doc.insert(time_field, Bson::DateTime(t));
    sources::raw(&doc)
}

/// Progress of an import.
#[derive(Default)]
struct Counts {
    imported: u64,
    skipped: u64,
}

/// Runs `import`.
pub fn run(a: ImportArgs) -> CliResult {
    if !a.create && a.bucket.any() {
        use clap::CommandFactory;
        let mut cli = crate::Cli::command();
        cli.build();
        let mut cmd = cli.find_subcommand_mut("import").cloned().unwrap_or(cli);
        cmd.error(
            clap::error::ErrorKind::ArgumentConflict,
            "collection options (--meta-field, --granularity, --bucket-span, \
                 --expire-after) need --create",
        )
        .exit();
    }
    let (db, coll) = open_collection(&a)?;
    let opts = coll.options()?;
    let times = TimeRead {
        unit: a.time_unit.or(a.precision),
        format: a.time_format.clone(),
    };
    let time_field = opts.get_time_field().to_string();
    let csv = CsvOptions {
        times: times.clone(),
        delimiter: a.delimiter,
        columns_have_types: a.columns_have_types,
        time_column: a
            .time_column
            .clone()
            .unwrap_or_else(|| opts.get_time_field().to_string()),
        time_field: opts.get_time_field().to_string(),
        meta_field: opts.get_meta_field().map(str::to_string),
        meta_columns: a.meta_columns.clone(),
    };
    // With every input a file, progress is the share of their bytes read (compressed ones
    // as stored); from stdin only rows can be counted.
    let sizes: Option<u64> = a
        .files
        .iter()
        .map(|f| match crate::common::is_std(f) {
            true => None,
            false => std::fs::metadata(f).ok().map(|m| m.len()),
        })
        .sum();
    let pb = match sizes {
        Some(total) => {
            let pb = ProgressBar::new(total);
            pb.set_style(ProgressStyle::with_template(
                "{spinner} import {percent:>3}% of {total_bytes}, {msg}, {eta} left",
            )?);
            pb
        }
        None => {
            let pb = ProgressBar::new_spinner();
            pb.set_style(ProgressStyle::with_template("{spinner} import {msg}")?);
            pb
        }
    };
    let read = Arc::new(AtomicU64::new(0));
    let interrupted = crate::common::ctrl_c_flag()?;
    let mut imp = Importer {
        coll: &coll,
        pb: &pb,
        skip_bad: a.skip_bad,
        batch: Vec::new(),
        locs: Vec::new(),
        bytes: 0,
        last: None,
        n: Counts::default(),
    };
    let t0 = Instant::now();
    let (tx, rx) = crossbeam_channel::bounded::<Chunk>(4);
    // Not a scoped thread: a reader blocked on stdin must not hold up the end of an
    // interrupted import. Returning early drops `rx`, which stops the reader at its next send.
    {
        let (files, format, csv, read) = (a.files.clone(), a.format, csv.clone(), read.clone());
        std::thread::Builder::new()
            .name("import-read".into())
            .spawn(move || read_files(&files, format, &csv, &read, tx))?;
    }
    let mut file = String::new();
    loop {
        if interrupted.load(Ordering::Relaxed) {
            return Err(Box::new(imp.interrupted()));
        }
        let secs = t0.elapsed().as_secs_f64().max(1e-9);
        pb.set_position(read.load(Ordering::Relaxed));
        pb.set_message(format!(
            "{} rows ({:.0}/s){file}",
            imp.n.imported,
            imp.n.imported as f64 / secs
        ));
        let chunk = match rx.recv_timeout(std::time::Duration::from_millis(100)) {
            Ok(c) => c,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        match chunk {
            Chunk::File(name) => file = format!(", {name}"),
            Chunk::Records(records) => {
                for (loc, doc) in records {
                    match doc.and_then(|d| time_as_date(d, &time_field, &times)) {
                        Ok(d) => imp.push(d, loc, a.batch)?,
                        Err(why) => imp.bad(loc, &why)?,
                    }
                }
            }
            Chunk::Fatal(e) => return Err(imp.stopped(e)),
        }
    }
    imp.write()?;
    let n = imp.n;
    pb.finish_and_clear();
    db.flush()?;
    db.close()?;
    let secs = t0.elapsed().as_secs_f64();
    let mut out = Out::new();
    if a.drop {
        out.line(&format!("dropped '{}' first", a.coll))?;
    }
    out.line(&format!(
        "imported {} rows, skipped {}, in {:.2} s ({:.0} rows/s)",
        n.imported,
        n.skipped,
        secs,
        n.imported as f64 / secs.max(1e-9)
    ))?;
    Ok(out.finish()?)
}

/// What the reader thread hands over.
enum Chunk {
    /// Reading moved on to this file.
    File(String),
    /// Records in file order.
    Records(Vec<Record>),
    /// The file cannot be read on; nothing after this.
    Fatal(String),
}

/// Records handed over at a time: enough to make the channel's cost negligible.
const CHUNK: usize = 256;

/// Reads and parses the files in order, on its own thread, so that parsing overlaps writing.
fn read_files(
    files: &[PathBuf],
    format: Format,
    csv: &CsvOptions,
    read: &Arc<AtomicU64>,
    tx: Sender<Chunk>,
) {
    for file in files {
        if tx.send(Chunk::File(file.display().to_string())).is_err() {
            return;
        }
        let records = match sources::open(file, format, csv, read) {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Chunk::Fatal(e));
                return;
            }
        };
        let mut chunk = Vec::with_capacity(CHUNK);
        for rec in records {
            match rec {
                Ok(r) => chunk.push(r),
                Err(e) => {
                    let _ = tx.send(Chunk::Records(chunk));
                    let _ = tx.send(Chunk::Fatal(e));
                    return;
                }
            }
            if chunk.len() == CHUNK
                && tx
                    .send(Chunk::Records(std::mem::replace(
                        &mut chunk,
                        Vec::with_capacity(CHUNK),
                    )))
                    .is_err()
            {
                return;
            }
        }
        if tx.send(Chunk::Records(chunk)).is_err() {
            return;
        }
    }
}

fn open_collection(a: &ImportArgs) -> CliResult<(Database, Collection)> {
    // A mongodump of a time-series collection says how the collection was made.
    let dumped = a.files.iter().find_map(|f| {
        let coll = crate::dump::buckets_of(f)?;
        Some(crate::dump::metadata_path(f, &coll))
    });
    let dumped = match dumped {
        Some(meta) if meta.is_file() => Some((crate::dump::options(&meta)?, meta)),
        _ => None,
    };
    let db = match (a.create, &dumped) {
        (false, None) => open_existing(&a.dir)?,
        _ => open_for_writing(&a.dir)?,
    };
    let options = match (&a.time_field, a.create, &dumped) {
        (Some(time_field), true, _) => a.bucket.options(time_field),
        (_, _, Some((o, meta))) if db.collection(&a.coll).is_err() => {
            eprintln!("creating '{}' as {} describes it", a.coll, meta.display());
            let coll = db.create_collection(&a.coll, o.clone())?;
            return Ok((db, coll));
        }
        _ => crate::common::collection(&db, &a.coll)?.options()?,
    };
    if a.drop {
        db.drop_collection(&a.coll)?;
    }
    let coll = match (a.create, a.drop) {
        (false, false) => crate::common::collection(&db, &a.coll)?,
        _ => db.create_collection(&a.coll, options)?,
    };
    Ok((db, coll))
}

struct Importer<'a> {
    coll: &'a Collection,
    pb: &'a ProgressBar,
    skip_bad: bool,
    /// The batch being filled, where each of its documents came from, and its bytes.
    batch: Vec<RawDocumentBuf>,
    locs: Vec<Loc>,
    bytes: usize,
    /// Where the last document written came from.
    last: Option<Loc>,
    n: Counts,
}

impl Importer<'_> {
    /// Adds a document to the batch, and writes the batch once it holds `rows` documents or
    /// [`BATCH_BYTES`].
    fn push(&mut self, d: RawDocumentBuf, loc: Loc, rows: u64) -> CliResult {
        self.bytes += d.as_bytes().len();
        self.batch.push(d);
        self.locs.push(loc);
        if self.batch.len() as u64 >= rows || self.bytes >= BATCH_BYTES {
            self.write()?;
        }
        Ok(())
    }

    /// Inserts the pending batch. The engine names the first invalid document; with
    /// `--skip-bad` it is dropped and the rest retried. A batch the engine finds too large
    /// (documents that encode larger than they read) is written in halves.
    fn write(&mut self) -> CliResult {
        let mut end = self.batch.len();
        while !self.batch.is_empty() {
            end = end.clamp(1, self.batch.len());
            let part = self.batch.get(..end).unwrap_or_default();
            match self.coll.insert_many_raw(part) {
                Ok(r) => {
                    self.n.imported += r.inserted_count;
                    self.last = self.locs.get(end - 1).cloned().or(self.last.take());
                    self.batch.drain(..end);
                    self.locs.drain(..end);
                    end = self.batch.len();
                }
                Err(Error::InvalidDocument { index, message }) if index < end => {
                    let loc = self.locs.remove(index);
                    self.batch.remove(index);
                    end -= 1;
                    self.bad(loc, &message)?;
                }
                Err(Error::BadValue(m)) if end > 1 && m.contains("split it") => end /= 2,
                Err(e) => return Err(e.into()),
            }
        }
        self.bytes = 0;
        Ok(())
    }

    /// What is written: the rows imported, through which record.
    fn written(&self) -> String {
        match &self.last {
            Some(loc) => format!(
                "the {} rows through {loc} are imported and stay",
                self.n.imported
            ),
            None => "no row is imported".to_string(),
        }
    }

    /// The error that ends the import, saying what was written.
    fn stopped(&self, e: impl std::fmt::Display) -> Box<dyn std::error::Error> {
        self.pb.finish_and_clear();
        format!(
            "{e}\nimport stopped: nothing of the current batch was written; {}",
            self.written()
        )
        .into()
    }

    /// The end of an import that SIGINT stopped.
    fn interrupted(&self) -> crate::common::Interrupted {
        self.pb.finish_and_clear();
        crate::common::Interrupted(format!(
            "import interrupted: {}; nothing after them was written",
            self.written()
        ))
    }

    /// A record that cannot be imported: stops the import, or is counted with `--skip-bad`.
    fn bad(&mut self, loc: Loc, why: &str) -> CliResult {
        if !self.skip_bad {
            return Err(self.stopped(format!("{loc}: {why} (use --skip-bad to skip bad records)")));
        }
        self.n.skipped += 1;
        if self.n.skipped <= SHOWN_BAD {
            self.pb.suspend(|| eprintln!("skipped {loc}: {why}"));
            if self.n.skipped == SHOWN_BAD {
                self.pb
                    .suspend(|| eprintln!("further bad records are counted, not shown"));
            }
        }
        Ok(())
    }
}
