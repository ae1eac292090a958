//! In-memory indexes over a collection's flushed buckets: the `_id` index (bucket start and
//! `_id` to the bucket's place in a segment) and the meta index that queries consult.
//!
//! Only index definitions are persisted (in the manifest, see [`crate::manifest::IndexDef`]);
//! these structures are derived from bucket summaries, so they cannot disagree with the buckets.

pub(crate) mod id;
pub(crate) mod meta;
