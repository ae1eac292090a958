//! Secondary indexes of a collection: validating a user's key pattern, its bucket form
//! (MongoDB's conversion), and the meta index that queries consult.
//!
//! Only definitions are persisted (in the manifest); the structures queries use are derived
//! from bucket summaries (see [`meta`]), so they cannot disagree with the buckets.

pub(crate) mod meta;
mod spec;

pub use spec::{bucket_key, parse_index, IndexDef, MAX_INDEXES};
