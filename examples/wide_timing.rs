//! Times a bucket with very many fields through the whole engine: three measurements of one
//! series, each with `--fields` integer fields, inserted, counted with a filter, flushed to a
//! segment, read back whole, and the database reopened. Each step should grow about linearly
//! with the number of fields (a bucket holds one column and one `control.min/max` entry per
//! field).
//!
//! `cargo run --release --example wide_timing -- --fields 60000`

use clap::Parser;
use std::time::Instant;
use tsbucket::bson::{doc, DateTime, Document};
use tsbucket::{Database, TimeseriesOptions};

#[derive(Parser)]
struct Args {
    /// Fields per measurement (a measurement may be 4 MiB, about 300,000 such fields).
    #[arg(long, default_value_t = 20_000)]
    fields: usize,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = Args::parse();
    let dir = tempfile::tempdir()?;
    let db = Database::open(dir.path())?;
    let c = db.create_collection("c", TimeseriesOptions::new("t").meta_field("m"))?;
    let docs: Vec<Document> = (0..3)
        .map(|j| {
            let mut d = doc! {"t": DateTime::from_millis(j), "m": 1};
            for i in 0..a.fields {
                d.insert(format!("f{i}"), i as i32);
            }
            d
        })
        .collect();
    let step = |what: &str, t0: Instant| println!("{what:>8}: {:>9.1} ms", ms(t0));
    let t0 = Instant::now();
    c.insert_many(&docs)?;
    step("insert", t0);
    let t0 = Instant::now();
    let n = c.count_documents(doc! {"f5": 5})?;
    step("count", t0);
    let t0 = Instant::now();
    db.flush()?;
    step("flush", t0);
    let t0 = Instant::now();
    let found = c.find(doc! {})?.collect::<tsbucket::Result<Vec<_>>>()?;
    step("find", t0);
    drop(c);
    db.close()?;
    let t0 = Instant::now();
    let db = Database::open(dir.path())?;
    step("reopen", t0);
    let again = db.collection("c")?.count_documents(doc! {})?;
    if n != 3 || found.len() != 3 || again != 3 {
        return Err(format!(
            "expected 3 measurements, counted {n}, found {}",
            found.len()
        )
        .into());
    }
    Ok(())
}

fn ms(t0: Instant) -> f64 {
    t0.elapsed().as_secs_f64() * 1e3
}
