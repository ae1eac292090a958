//! Reading: filters, planning and pruning, unpacking buckets into measurements.

pub mod cursor;
pub mod filter;
pub mod merge;
pub mod options;
pub mod plan;
pub mod prune;
pub mod read;
pub mod rows;
pub mod unpack;

pub use filter::Filter;
pub use options::FindOptions;
pub use plan::{BucketStats, Plan, Verdict};
pub use read::{Cursor, Explain};

#[cfg(test)]
mod verdict_tests;
