//! Immutable segment files: closed buckets, stored as per-bucket column blocks packed into
//! checksummed pages, with a compressed, checksummed directory of per-bucket summaries
//! (`_id`, meta, count, `control.min/max`) and a fixed-size footer.
//!
//! The layout is described in `format-spec/segment.md`; [`format`] holds its constants.
//! [`write_segment`] writes a file durably (temporary file, fsync, rename, directory fsync);
//! [`Segment::open`] maps it, validates header, footer and directory, and decodes the bucket
//! summaries; [`Segment::read_bucket`] and [`Segment::read_bucket_columns`] decode bucket data
//! after checking the checksum of its page; [`Segment::verify`] checks everything;
//! [`Segment::bucket_layout`] tells where a bucket's bytes are (for the `segment-dump` tool).
//!
//! ```
//! use tsbucket::bucket::{BucketData, Column};
//! use tsbucket::bson::{doc, oid::ObjectId, Bson, DateTime};
//! use tsbucket::segment::{write_segment, Segment, SegmentHeaderInfo};
//! use tsbucket::vfs::RealFs;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("1.seg");
//! let t = DateTime::from_millis(1_700_000_000_000);
//! let mut bucket = BucketData {
//!     id: ObjectId::new(),
//!     meta: Some(Bson::String("sensor-1".into())),
//!     count: 1,
//!     min: doc! {"t": t, "v": 1.5},
//!     max: doc! {"t": t, "v": 1.5},
//!     columns: vec![
//!         Column { name: "t".into(), values: vec![Some(Bson::DateTime(t))] },
//!         Column { name: "v".into(), values: vec![Some(Bson::Double(1.5))] },
//!     ],
//!     shapes: vec![vec![0, 1]],
//!     row_shapes: vec![],
//!     // The measurement's BSON size as inserted: `doc! {"t": t, "v": 1.5}` is 27 bytes.
//!     bson_bytes: Some(27),
//! };
//! // control.max also carries per-field sums (`tsbucket::sums`), as the catalog's buckets do.
//! tsbucket::sums::set_bucket_sums(&mut bucket, "t");
//! let info = SegmentHeaderInfo { collection_id: 7, time_field: "t".into() };
//! write_segment(&RealFs, &path, &info, &[&bucket])?;
//! let seg = Segment::open(&RealFs, &path)?;
//! assert_eq!(seg.buckets()[0].count, 1);
//! assert_eq!(seg.read_bucket(0)?, bucket);
//! seg.verify()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod bounds;
mod control;
pub mod format;
mod meta_proj;
mod order;
mod pagecache;
mod reader;
mod sum_entry;
mod writer;

#[cfg(test)]
mod tests;

pub use bounds::{BoundRef, FieldBounds};
pub use control::Control;
pub use meta_proj::{MetaFields, MetaProjection};
pub use pagecache::PageCache;
pub use reader::{BucketLayout, BucketSummary, Segment, SegmentStats};
pub use writer::{write_encoded_segment, write_segment};

/// Collection-level facts stored in every segment's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentHeaderInfo {
    /// The owning collection's id (assigned by the manifest).
    pub collection_id: u32,
    /// Name of the time field; `verify` checks `control.min/max` of this column as times.
    pub time_field: String,
}
