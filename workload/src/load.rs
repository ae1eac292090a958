//! Loading a generated workload into a collection, for benches and timing tools that reuse a
//! database between runs.

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
