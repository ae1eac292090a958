//! The `_id` index: every live flushed bucket, by its start and `_id`.

/// Where a flushed bucket lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BucketLoc {
    pub segment: u64,
    pub index: u32,
}

/// Key of the `_id` index: the bucket's start (the `_id`'s time prefix, kept as full
/// milliseconds so starts outside the 32-bit range still sort right), then the `_id` bytes.
pub(crate) type IdKey = (i64, [u8; 12]);

/// The `_id` index key of a bucket in a segment.
pub(crate) fn id_key(b: &crate::segment::BucketSummary) -> IdKey {
    // The summary's start is control.min of the time field, else the _id's time prefix.
    (b.time_range().0, b.id.bytes())
}
