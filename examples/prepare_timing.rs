//! Times the inserting thread's part of an insert alone: validating a batch and encoding it as
//! a log record (`ingest::prepare_batch` for `Document`s, `ingest::prepare_raw_batch` for BSON
//! bytes), per measurement of the devops-cpu workload, beside the floor for the same input: a
//! bare BSON writer that checks nothing, and for bytes a plain copy. Each figure is the median
//! over batches of 1000, "cold" as `ingest_timing` has them (generated up front, long out of
//! cache) and "warm" (the batch walked just before, as an application that has just built it
//! would have it).
//!
//! Last, the log writer's share: compacting a prepared batch (`ingest::compact`), in the
//! steady state where every layout and meta value is already in the log file.
//!
//! `cargo run --release --example prepare_timing`

use clap::Parser;
use std::time::Instant;
use tsbucket::bson::{Bson, Document, RawDocumentBuf};
use tsbucket::ingest::compact::InsertCompactor;
use tsbucket::ingest::{prepare_batch, prepare_raw_batch, Prepared};
use tsbucket::schema::Schema;
use tsbucket_workload::Devops;

#[derive(Parser)]
struct Args {
    /// Hosts (series).
    #[arg(long, default_value_t = 1000)]
    hosts: usize,
    /// Hours of data at one measurement per host every 10 s.
    #[arg(long, default_value_t = 0.5)]
    hours: f64,
    /// Measurements per batch.
    #[arg(long, default_value_t = 1000)]
    batch: usize,
}

/// The least a writer of BSON can do for these documents: no checks, no names of its own.
fn bare(d: &Document, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    for (k, v) in d {
        out.push(v.element_type() as u8);
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        match v {
            Bson::Int64(i) => out.extend_from_slice(&i.to_le_bytes()),
            Bson::Double(f) => out.extend_from_slice(&f.to_le_bytes()),
            Bson::DateTime(t) => out.extend_from_slice(&t.timestamp_millis().to_le_bytes()),
            Bson::String(s) => {
                out.extend_from_slice(&((s.len() + 1) as i32).to_le_bytes());
                out.extend_from_slice(s.as_bytes());
                out.push(0);
            }
            Bson::Document(sub) => bare(sub, out),
            _ => {}
        }
    }
    out.push(0);
    let len = (out.len() - start) as i32;
    if let Some(prefix) = out.get_mut(start..start + 4) {
        prefix.copy_from_slice(&len.to_le_bytes());
    }
}

/// Median nanoseconds per measurement of `f` over the batches, each walked first by `f`
/// itself when `warm`.
fn per_doc<T>(batches: &[T], warm: bool, mut f: impl FnMut(&T) -> usize) -> f64 {
    let mut ns: Vec<f64> = batches
        .iter()
        .map(|b| {
            if warm {
                std::hint::black_box(f(b));
            }
            let t = Instant::now();
            let n = std::hint::black_box(f(b));
            t.elapsed().as_nanos() as f64 / n.max(1) as f64
        })
        .collect();
    ns.sort_by(f64::total_cmp);
    ns.get(ns.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    let docs: Vec<Document> = Devops {
        hosts: a.hosts,
        hours: a.hours,
        ..Devops::default()
    }
    .generate()
    .collect();
    let raws: Vec<RawDocumentBuf> = docs
        .iter()
        .map(RawDocumentBuf::try_from)
        .collect::<Result<_, _>>()?;
    let fields = Schema::new("time", Some("tags"), 3600, 60);
    let docs: Vec<&[Document]> = docs.chunks(a.batch.max(1)).collect();
    let raws: Vec<&[RawDocumentBuf]> = raws.chunks(a.batch.max(1)).collect();
    // Every series seen once, so that no figure pays for first sightings.
    for (d, r) in docs.iter().zip(&raws) {
        prepare_batch(1, d, &fields)?;
        prepare_raw_batch(1, r, &fields)?;
    }
    let mut out = Vec::new();
    println!(
        "devops {} hosts x {} h, batches of {}: median ns per measurement",
        a.hosts, a.hours, a.batch
    );
    println!(
        "{:<6} {:>14} {:>12} {:>18} {:>12}",
        "", "prepare_batch", "bare writer", "prepare_raw_batch", "plain copy"
    );
    for warm in [false, true] {
        let engine = per_doc(&docs, warm, |b| {
            prepare_batch(1, b, &fields).map_or(0, |p| p.0.len())
        });
        let floor = per_doc(&docs, warm, |b| {
            out.clear();
            b.iter().for_each(|d| bare(d, &mut out));
            b.len()
        });
        let raw = per_doc(&raws, warm, |b| {
            prepare_raw_batch(1, b, &fields).map_or(0, |p| p.0.len())
        });
        let copy = per_doc(&raws, warm, |b| {
            out.clear();
            b.iter().for_each(|d| out.extend_from_slice(d.as_bytes()));
            b.len()
        });
        println!(
            "{:<6} {engine:>14.0} {floor:>12.0} {raw:>18.0} {copy:>12.0}",
            if warm { "warm" } else { "cold" }
        );
    }
    let prepared = raws
        .iter()
        .map(|r| prepare_raw_batch(1, r, &fields))
        .collect::<Result<Vec<_>, _>>()?;
    let mut compactor = InsertCompactor::new();
    let mut compact = |b: &(Vec<Prepared>, Vec<u8>, Vec<Bson>)| {
        out.clear();
        compactor.compact_payload(&b.1, 1, &b.0, &mut out);
        b.0.len()
    };
    prepared.iter().for_each(|b| {
        compact(b);
    });
    let cold = per_doc(&prepared, false, &mut compact);
    let warm = per_doc(&prepared, true, &mut compact);
    let stored = out.len() as f64 / raws.last().map_or(1, |r| r.len()).max(1) as f64;
    println!(
        "compact for the log, ns per measurement: cold {cold:.0}, warm {warm:.0}; \
         {stored:.0} bytes stored"
    );
    Ok(())
}
