//! Loading a generated workload into a collection, for benches and timing tools that reuse a
//! database between runs.

use super::{Devops, Seed004};
use tsbucket::bson::Document;
use tsbucket::{Collection, Database, Result, TimeseriesOptions};

/// The collection `name` of `db` if it exists; otherwise creates it with `opts`, inserts
/// `docs` in batches of 1000 and flushes, so the data is all in segments.
pub fn load_or_create(
    db: &Database,
    name: &str,
    opts: TimeseriesOptions,
    docs: impl Iterator<Item = Document>,
) -> Result<Collection> {
    if let Ok(c) = db.collection(name) {
        return Ok(c);
    }
    let c = db.create_collection(name, opts)?;
    let mut batch = Vec::with_capacity(1000);
    for d in docs {
        batch.push(d);
        if batch.len() == 1000 {
            c.insert_many(&batch)?;
            batch.clear();
        }
    }
    if !batch.is_empty() {
        c.insert_many(&batch)?;
    }
    db.flush()?;
    Ok(c)
}

/// Seed 004's scale for the query benchmarks: `TSBUCKET_AGG_SCALE`, else 0.25.
pub fn bench_scale() -> f64 {
    std::env::var("TSBUCKET_AGG_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.25)
}

/// The collections the query benchmarks read, created in `db` on first use and all flushed:
/// `cpu` (devops 1000 hosts x 6 h, whose configuration comes back first) and `seed004_name`
/// (seed 004 at `scale`).
pub fn bench_collections(
    db: &Database,
    seed004_name: &str,
    scale: f64,
) -> Result<(Devops, Collection, Collection)> {
    let cfg = Devops {
        hosts: 1000,
        hours: 6.0,
        ..Devops::default()
    };
    let cpu = load_or_create(
        db,
        "cpu",
        TimeseriesOptions::new("time").meta_field("tags"),
        cfg.generate(),
    )?;
    let s004 = load_or_create(
        db,
        seed004_name,
        TimeseriesOptions::new("timestamp").meta_field("dims"),
        Seed004 { scale, seed: 4 }.generate(),
    )?;
    Ok((cfg, cpu, s004))
}
