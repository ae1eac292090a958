//! tsbucket: an embeddable storage engine for time-series collections with MongoDB semantics.

pub use bson;

pub mod bucket;
pub mod catalog;
pub mod clock;
pub mod codec;
pub mod error;
pub mod ingest;
pub mod options;
pub mod order;
pub mod vfs;
pub mod wal;

pub use error::{Error, Result};
