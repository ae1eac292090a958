//! Reading: filters, planning and pruning, unpacking buckets into measurements, aggregation.

pub mod aggregate;
pub mod columns;
pub mod cursor;
pub mod datetrunc;
pub(crate) mod execute;
pub mod expr;
pub mod filter;
mod keyset;
pub mod materialise;
pub mod merge;
pub mod options;
pub(crate) mod parallel;
pub mod pipeline;
pub mod plan;
pub mod project;
pub mod prune;
pub mod rewrite;
pub mod row_filter;
pub mod select;
pub mod source;
pub mod slots;
pub mod sort;
pub mod unpack;

pub use filter::Filter;
pub use options::FindOptions;
pub use plan::{BucketStats, Plan, Verdict};
pub use select::{Cursor, Explain};

#[cfg(test)]
mod verdict_tests;
