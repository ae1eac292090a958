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
mod chunks;
mod common;
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
mod ordered;
mod out;
mod parquet_writer;
mod query;
mod rawjson;
mod serve;
mod shell;
mod sources;
mod times;

use clap::{Parser, Subcommand};
use common::{Interrupted, WAIT};
use std::process::ExitCode;
use std::time::Duration;

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

#[derive(Subcommand)]
enum Cmd {
    /// Generate the devops-cpu workload, ingest it, flush, run queries and report storage and
    /// speed figures.
    Demo(demo::DemoArgs),
    /// Write a seeded benchmark workload to a file as JSON Lines, BSON, CSV or line protocol.
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
    /// Serve the databases in a directory over MongoDB's wire protocol, for MongoDB's drivers
    /// and shell (loopback only, unless users are set up with --auth-file).
    Serve(serve::ServeArgs),
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
        Cmd::Serve(a) => serve::run(a),
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
