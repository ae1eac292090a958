//! Reading: filters, planning and pruning, unpacking buckets into measurements.

pub mod filter;
pub mod options;
pub mod plan;
pub mod read;
pub mod unpack;

pub use filter::Filter;
pub use options::FindOptions;
pub use plan::{BucketStats, Plan, Verdict};
pub use read::{Cursor, Explain};
