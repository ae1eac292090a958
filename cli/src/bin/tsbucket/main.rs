//! The `tsbucket` command-line tool: generate workloads, create collections, import data, query
//! and check a database.
//!
//! Exit status: 0 on success, 1 when an operation fails or corruption is found, 2 for usage
//! errors.

// Nothing a user types or a file holds may panic the tool: no unwrap, no expect, no indexing
// that can go out of bounds. Tests may.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

mod admin;
mod csvdoc;
mod demo;
mod dump;
mod export;
mod extjson;
mod gen;
mod import;
mod json;
mod jsonbson;
mod lineproto;
mod modify;
mod out;
mod query;
mod rawjson;
mod shell;
mod sources;
mod times;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::Path;
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tsbucket::{Database, DbOptions};

/// What commands return: any error is reported on stderr and ends the process with status 1.
pub type CliResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

#[derive(Parser)]
#[command(
    name = "tsbucket",
    version,
    about = "Time-series collections with MongoDB semantics"
)]
struct Cli {
    /// For a command that writes: when another process has the database open for writing,
    /// wait up to this many seconds for it to close instead of failing at once. Commands that
    /// only read never wait: they read a snapshot beside the writer.
    #[arg(long, global = true, value_name = "SECONDS")]
    wait: Option<f64>,
    #[command(subcommand)]
    cmd: Cmd,
}

/// How long a command that writes waits for the database's lock (`--wait`).
static WAIT: OnceLock<Duration> = OnceLock::new();

#[derive(Subcommand)]
enum Cmd {
    /// Generate the devops-cpu workload, ingest it, flush, run queries and report storage and
    /// speed figures.
    Demo(demo::DemoArgs),
    /// Write a seeded benchmark workload to a file as JSON Lines, BSON or CSV.
    Gen(gen::GenArgs),
    /// Create a time-series collection (and the database if missing).
    Create(admin::CreateArgs),
    /// Import JSON, BSON, CSV or line protocol files (gzip or zstd too) into a collection.
    ///
    /// Documents go in batches of --batch rows or 8 MiB, each written all or nothing. A bad record
    /// (unparsable line or row, missing or invalid time field, ...) is reported by file and
    /// line (BSON: document number and byte offset) and stops the import with nothing of its
    /// batch written; earlier batches stay. With --skip-bad bad records are skipped and
    /// counted instead. The data is flushed to segments at the end.
    Import(import::ImportArgs),
    /// Print the measurements matching a filter, one relaxed Extended JSON document per line.
    Find(query::FindArgs),
    /// Write the measurements matching a filter to a file as JSON Lines, a JSON array, CSV
    /// or BSON (by --format or the file's extension); JSON Lines and BSON import again to
    /// identical documents.
    Export(export::ExportArgs),
    /// Run an aggregation pipeline and print its results as JSON Lines.
    Aggregate(query::AggregateArgs),
    /// Show how a find filter or a pipeline would read the collection's buckets.
    Explain(query::ExplainArgs),
    /// Count the measurements matching a filter.
    Count(query::CountArgs),
    /// Show storage figures of the collections.
    Stats(admin::StatsArgs),
    /// List the collections with their options.
    List(admin::ListArgs),
    /// Check every segment, the manifest and the _id index; exit 1 on any problem.
    Verify(admin::VerifyArgs),
    /// Update the meta value of the measurements whose meta matches a filter (MongoDB's
    /// meta-only rules: filter and update may name only the meta field).
    Update(modify::UpdateArgs),
    /// Delete the measurements whose meta matches a filter (which may name only the meta
    /// field); the space comes back at once.
    Delete(modify::DeleteArgs),
    /// Delete the buckets of collections with expireAfterSeconds whose measurements are all
    /// older than now - expireAfterSeconds.
    Sweep(modify::SweepArgs),
    /// Change a collection's bucketing (only coarser) or its expireAfterSeconds.
    CollMod(modify::CollModArgs),
    /// Create, list or drop a collection's secondary indexes.
    Index(modify::IndexArgs),
    /// Drop a collection and its files.
    Drop(modify::DropArgs),
}

/// Which seeded workload to generate.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// The TSBS devops cpu-only shape: 10 string tags as meta, 10 CPU fields, every 10 s.
    Devops,
    /// The seed 004 shape: per-minute call counts with dimensions as meta.
    Seed004,
}

/// File formats of `gen` and `import`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, ValueEnum)]
pub enum Format {
    /// From the file name's extension (.jsonl/.json/.ndjson, .bson, .csv, each possibly
    /// followed by .gz or .zst); when reading stdin or a file with another extension, from its
    /// first bytes. Input compressed with gzip or zstd is found by its first bytes.
    Auto,
    /// Relaxed or canonical MongoDB Extended JSON: one document per line (as mongoexport
    /// writes), pretty-printed over several lines, or a JSON array of documents (both found by
    /// the first line).
    Jsonl,
    /// Concatenated BSON documents (as mongodump writes).
    Bson,
    /// A header line and one row per document; nested fields as dotted column names.
    Csv,
    /// InfluxDB line protocol (.lp): the measurement and tags become the meta document.
    LineProtocol,
}

impl Format {
    /// The format a file name's extension names, if any.
    pub fn from_extension(path: &str) -> Option<Format> {
        let ext = Path::new(path).extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "jsonl" | "json" | "ndjson" => Some(Format::Jsonl),
            "bson" => Some(Format::Bson),
            "csv" => Some(Format::Csv),
            "lp" | "line" => Some(Format::LineProtocol),
            _ => None,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(w) = cli.wait {
        match Duration::try_from_secs_f64(w) {
            Ok(d) => {
                let _ = WAIT.set(d);
            }
            Err(_) => {
                eprintln!("error: --wait takes a number of seconds >= 0, not {w}");
                return ExitCode::from(2);
            }
        }
    }
    let r = match cli.cmd {
        Cmd::Demo(a) => demo::run(a),
        Cmd::Gen(a) => gen::run(a),
        Cmd::Create(a) => admin::create(a),
        Cmd::Import(a) => import::run(a),
        Cmd::Find(a) => query::find(a),
        Cmd::Export(a) => export::run(a),
        Cmd::Aggregate(a) => query::aggregate(a),
        Cmd::Explain(a) => query::explain(a),
        Cmd::Count(a) => query::count(a),
        Cmd::Stats(a) => admin::stats(a),
        Cmd::List(a) => admin::list(a),
        Cmd::Verify(a) => admin::verify(a),
        Cmd::Update(a) => modify::update(a),
        Cmd::Delete(a) => modify::delete(a),
        Cmd::Sweep(a) => modify::sweep(a),
        Cmd::CollMod(a) => modify::coll_mod(a),
        Cmd::Index(a) => modify::index(a),
        Cmd::Drop(a) => modify::drop(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        // The reader went away (`tsbucket find ... | head`): it has all it wanted.
        Err(e) if is_broken_pipe(e.as_ref()) => ExitCode::SUCCESS,
        Err(e) if e.is::<Interrupted>() => {
            eprintln!("{e}");
            // As a shell reports a process that SIGINT ended.
            ExitCode::from(130)
        }
        Err(e) => {
            eprintln!("error: {}", describe(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// The collection `name` of `db`; when there is none, the error names the collections with a
/// similar name.
pub fn collection(db: &Database, name: &str) -> CliResult<tsbucket::Collection> {
    match db.collection(name) {
        Err(tsbucket::Error::NamespaceNotFound(_)) => {
            let names: Vec<String> = db
                .list_collections()
                .map(|cs| cs.into_iter().map(|c| c.name).collect())
                .unwrap_or_default();
            let near: Vec<&str> = names
                .iter()
                .filter(|n| similar(n, name))
                .map(String::as_str)
                .collect();
            let hint = match (near.as_slice(), names.is_empty()) {
                ([], true) => " (the database has no collection)".to_string(),
                ([], false) => format!(" (its collections: {})", names.join(", ")),
                (near, _) => format!(" (did you mean {}?)", near.join(" or ")),
            };
            Err(format!("no collection '{name}' in {}{hint}", db.path().display()).into())
        }
        other => Ok(other?),
    }
}

/// Whether two names are a typo apart: at most two edits (of the shorter's length, at most a
/// third), or one the other's prefix.
fn similar(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len().min(b.len()) >= 2 && (a.starts_with(&b) || b.starts_with(&a)) {
        return true;
    }
    // Levenshtein distance, one row at a time.
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut row = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev.get(j).copied().unwrap_or(0) + usize::from(ca != cb);
            let del = prev.get(j + 1).copied().unwrap_or(0) + 1;
            let ins = row.get(j).copied().unwrap_or(0) + 1;
            row.push(sub.min(del).min(ins));
        }
        prev = row;
    }
    let d = prev.last().copied().unwrap_or(0);
    d <= 2 && d * 3 <= a.len().min(b.len()).max(1)
}

/// A command stopped by SIGINT (Ctrl-C), with what it had done: the exit status is 130.
#[derive(Debug)]
pub struct Interrupted(pub String);

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Interrupted {}

/// The error's message, with MongoDB's error code where the engine gives one.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    match e.downcast_ref::<tsbucket::Error>().and_then(|t| t.code()) {
        Some(code) => format!("{e} (MongoDB code {code})"),
        None => e.to_string(),
    }
}

/// Whether `e`, or an error it wraps, is a write to a closed pipe.
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        let io = match e.downcast_ref::<tsbucket::Error>() {
            Some(tsbucket::Error::Io(io)) => Some(io),
            _ => e.downcast_ref::<std::io::Error>(),
        };
        if io.is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe) {
            return true;
        }
        cur = e.source();
    }
    false
}

/// Opens the database in `dir` for writing, which must already hold one: a mistyped path must
/// not leave an empty database behind. The TTL sweeper stays off, so that a command deletes
/// nothing it was not asked to. Waits for another process's lock as `--wait` says.
pub fn open_existing(dir: &Path) -> CliResult<Database> {
    if !dir.join(tsbucket::manifest::MANIFEST_FILE).is_file() {
        return Err(format!("no tsbucket database in {}", dir.display()).into());
    }
    open_for_writing(dir)
}

/// Opens (creating if missing) the database in `dir` for writing, waiting for another
/// process's lock as `--wait` says.
pub fn open_for_writing(dir: &Path) -> CliResult<Database> {
    let opts = || DbOptions {
        ttl_interval: None,
        ..DbOptions::default()
    };
    let deadline = Instant::now() + WAIT.get().copied().unwrap_or_default();
    loop {
        match Database::open_with(dir, opts()) {
            Err(tsbucket::Error::Locked(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e @ tsbucket::Error::Locked(_)) if WAIT.get().is_none() => {
                return Err(format!("{e} (--wait SECONDS waits for it)").into())
            }
            r => return Ok(r?),
        }
    }
}

/// Opens the database in `dir` for a command that only reads: a snapshot read beside any
/// writer, taking no lock, so that reads and an import run at once.
pub fn open_for_reading(dir: &Path) -> CliResult<Database> {
    if !dir.join(tsbucket::manifest::MANIFEST_FILE).is_file() {
        return Err(format!("no tsbucket database in {}", dir.display()).into());
    }
    Ok(Database::open_read_only(dir)?)
}

/// Opens the database in `dir` for `stats` and `verify`: for writing when no other process
/// has it (an open that recovers, removes leftovers and sees the log as its writer does), else
/// read-only beside that process.
pub fn open_to_inspect(dir: &Path) -> CliResult<Database> {
    if !dir.join(tsbucket::manifest::MANIFEST_FILE).is_file() {
        return Err(format!("no tsbucket database in {}", dir.display()).into());
    }
    let opts = DbOptions {
        ttl_interval: None,
        ..DbOptions::default()
    };
    match Database::open_with(dir, opts) {
        Err(tsbucket::Error::Locked(_)) => Ok(Database::open_read_only(dir)?),
        r => Ok(r?),
    }
}

/// A path argument where `-` means stdin or stdout.
pub fn is_std(path: &Path) -> bool {
    path == Path::new("-")
}
