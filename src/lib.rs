//! tsbucket: an embeddable storage engine for time-series collections with MongoDB semantics.

pub use bson;

pub mod bucket;
pub mod codec;
pub mod error;
pub mod vfs;
pub mod wal;

pub use error::{Error, Result};
