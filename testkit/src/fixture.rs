//! A small fixed collection on `MemFs` for the query harnesses: three series, fields of
//! several types (some missing, some mixed), part in segments and part in open buckets.

use std::sync::{Arc, OnceLock};
use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::vfs::MemFs;
use tsbucket::{Collection, Database, DbOptions, TimeseriesOptions};

/// Field names the fixture's documents use (the query generators pick from them).
pub const FIELDS: [&str; 9] = ["t", "m", "m.id", "v", "i", "s", "a", "d", "d.x"];

/// Time of the first measurement.
pub const T0: i64 = 1_700_000_000_000;

/// The fixture's documents, in insertion order.
pub fn documents() -> Vec<Document> {
    (0..240i64)
        .map(|k| {
            let region = ["eu", "us"][(k % 2) as usize];
            let mut d = doc! {
                "t": DateTime::from_millis(T0 + k * 61_000 + (k % 7) * 3_600_000),
                "m": {"id": (k % 3) as i32, "region": region},
            };
            if k % 5 != 0 {
                d.insert("v", (k as f64) / 4.0 - 20.0);
            }
            match k % 4 {
                0 => d.insert("i", k as i32),
                1 => d.insert("i", k),
                2 => d.insert("i", (k as f64) + 0.5),
                _ => d.insert("i", "n/a"),
            };
            d.insert("s", ["x", "y", "zz"][(k % 3) as usize]);
            if k % 6 == 0 {
                d.insert("a", vec![Bson::Int32(k as i32), Bson::Null]);
            }
            if k % 9 == 0 {
                d.insert("d", doc! {"x": k, "y": Bson::Null});
            }
            if k == 17 {
                d.insert("v", f64::NAN);
            }
            d
        })
        .collect()
}

struct Fixture {
    _db: Database,
    coll: Collection,
}

/// The shared collection, built on first use (the database stays open for the process).
pub fn collection() -> Option<&'static Collection> {
    static F: OnceLock<Option<Fixture>> = OnceLock::new();
    F.get_or_init(|| {
        let fs = MemFs::new();
        let mut opts = DbOptions::default().vfs(Arc::new(fs));
        opts.ttl_interval = None;
        let db = Database::open_with("/db", opts).ok()?;
        let coll = db
            .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
            .ok()?;
        let docs = documents();
        let (old, new) = docs.split_at(160);
        coll.insert_many(old).ok()?;
        db.flush().ok()?;
        coll.insert_many(new).ok()?;
        Some(Fixture { _db: db, coll })
    })
    .as_ref()
    .map(|f| &f.coll)
}
