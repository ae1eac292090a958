//! Reading: filters, planning and pruning, unpacking buckets into measurements, aggregation.

pub mod accum;
pub(crate) mod agg;
mod binlane;
mod bins;
pub mod columns;
mod countlane;
pub mod cursor;
pub mod datetrunc;
pub mod expr;
pub(crate) mod fastgroup;
pub mod filter;
pub mod fromstats;
pub mod group;
pub mod keycache;
mod keyset;
pub mod materialise;
pub mod merge;
pub mod options;
pub(crate) mod parallel;
pub mod pipeline;
pub mod plan;
pub mod project;
pub mod prune;
pub mod read;
pub mod rewrite;
pub mod rowmask;
pub mod scans;
pub mod slots;
pub mod sort;
pub mod unpack;

pub use filter::Filter;
pub use options::FindOptions;
pub use plan::{BucketStats, Plan, Verdict};
pub use read::{Cursor, Explain};

#[cfg(test)]
mod verdict_tests;
