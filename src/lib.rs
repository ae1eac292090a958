//! tsbucket: an embeddable storage engine for time-series collections with MongoDB semantics.
//!
//! Measurements (BSON documents) are appended to a write-ahead log, grouped by meta value and
//! time into buckets, and flushed as immutable, compressed column segments. See the README for
//! an overview and `format-spec/` for the on-disk formats.
//!
//! ```
//! use tsbucket::{Database, TimeseriesOptions, Granularity};
//! use tsbucket::bson::{doc, DateTime};
//!
//! # fn main() -> tsbucket::Result<()> {
//! let dir = tempfile::tempdir()?;
//! let db = Database::open(dir.path())?;
//! let weather = db.create_collection(
//!     "weather",
//!     TimeseriesOptions::new("timestamp").meta_field("metadata").granularity(Granularity::Hours),
//! )?;
//! weather.insert_many(&[
//!     doc! {"timestamp": DateTime::from_millis(1_700_000_000_000), "metadata": {"sensorId": 5}, "temp": 12.5},
//!     doc! {"timestamp": DateTime::from_millis(1_700_000_060_000), "metadata": {"sensorId": 5}, "temp": 12.7},
//! ])?;
//! assert_eq!(weather.count_documents(doc! {"metadata.sensorId": 5})?, 2);
//! db.flush()?;
//! assert_eq!(weather.stats()?.buckets, 1);
//! db.close()?;
//! # Ok(())
//! # }
//! ```

// The public API is documented in full; internals are documented where it helps.
#![cfg_attr(not(feature = "internals"), deny(missing_docs))]
// Without `internals`, items (and re-exports) that only the CLI, the benches and the fuzz
// targets use are unreachable from the public API.
#![cfg_attr(not(feature = "internals"), allow(dead_code, unused_imports))]
// Nothing that comes from a file, a user or the OS may panic the library: no unwrap, no
// expect, no indexing that can go out of bounds. Tests may.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub use bson;

// Compiles and runs the README's Rust examples as doc tests, so the README cannot drift from
// the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// The public API is what the crate root re-exports below, plus `vfs` (the file system the
// engine runs on, which tests and embedders may replace) and `bson`. Everything else is
// internal: private, or with the `internals` feature public for the CLI, the benches, the fuzz
// targets and the tests, hidden from the docs and outside any compatibility promise.
macro_rules! internal {
    ($($name:ident),* $(,)?) => {$(
        #[cfg(feature = "internals")]
        #[doc(hidden)]
        pub mod $name;
        #[cfg(not(feature = "internals"))]
        mod $name;
    )*};
}

mod api;
mod collstate;
mod engine;
mod prefetch;
mod priority;
pub mod vfs;

internal!(
    bucket, catalog, clock, codec, depth, doc, error, index, ingest, manifest, options, order,
    query, schema, segment, sums, wal,
);

pub use api::collection::Collection;
pub use api::database::Database;
pub use catalog::CatalogStats;
pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::ddl::{CollMod, CollectionInfo};
pub use engine::read::CollStats;
pub use engine::recover::RecoveryReport;
pub use engine::rewrite::{DeleteResult, UpdateResult};
pub use engine::ttl::SweepResult;
pub use engine::verify::VerifyReport;
pub use engine::write::{InsertManyResult, InsertOneResult};
pub use error::{Error, Result};
pub use options::{BackgroundPriority, BucketLimits, DbOptions, Granularity, TimeseriesOptions};
pub use query::{Cursor, Explain, FindOptions};
pub use wal::{DroppedTail, LogStats, SyncMode, TailKind, WalRecovery};
