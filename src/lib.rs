//! tsbucket: an embeddable storage engine for time-series collections with MongoDB semantics.

pub use bson;

pub mod bucket;
pub mod codec;
pub mod error;
pub mod segment;
pub mod vfs;

pub use error::{Error, Result};
