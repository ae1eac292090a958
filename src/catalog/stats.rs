//! Counters of the bucket catalog, named as MongoDB names them (snake_case).

/// Per-collection bucket catalog counters. They only grow (MongoDB's are monotonic too) and
/// restart from zero when the database is opened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CatalogStats {
    /// Buckets opened because a meta value had no bucket yet.
    pub num_buckets_opened_due_to_metadata: u64,
    /// Buckets closed because they held the maximum count.
    pub num_buckets_closed_due_to_count: u64,
    /// Buckets closed because the next measurement would exceed the size limit.
    pub num_buckets_closed_due_to_size: u64,
    /// Buckets set aside because a measurement came at or past their span (they stay
    /// reopenable for late measurements until memory pressure closes them).
    pub num_buckets_closed_due_to_time_forward: u64,
    /// Buckets set aside because a measurement came before their start (MongoDB's
    /// `numBucketsArchivedDueToTimeBackward`).
    pub num_buckets_closed_due_to_time_backward: u64,
    /// Buckets closed because the catalog was over its memory limit (idle ones first).
    pub num_buckets_closed_due_to_memory_threshold: u64,
    /// Buckets closed because a field changed type class.
    pub num_buckets_closed_due_to_schema_change: u64,
    /// Buckets closed so that the write-ahead log could be reclaimed.
    pub num_buckets_closed_due_to_wal_limit: u64,
    /// Buckets closed by an explicit flush or a collection change.
    pub num_buckets_closed_due_to_flush: u64,
    /// Set-aside buckets that took a late measurement again.
    pub num_buckets_reopened: u64,
    /// Buckets kept open past the size limit because they held fewer than the minimum count.
    pub num_buckets_kept_open_due_to_large_measurements: u64,
    /// Commits that created a bucket.
    pub num_bucket_inserts: u64,
    /// Commits that added to an existing bucket.
    pub num_bucket_updates: u64,
    /// Per-bucket commits (one per insert batch and bucket it touched).
    pub num_commits: u64,
    /// Measurements committed.
    pub num_measurements_committed: u64,
}

impl CatalogStats {
    /// MongoDB's `avgNumMeasurementsPerCommit`: measurements per commit, integer division;
    /// `None` (absent in MongoDB) before the first commit.
    pub fn avg_num_measurements_per_commit(&self) -> Option<u64> {
        self.num_measurements_committed
            .checked_div(self.num_commits)
    }

    /// Every counter under MongoDB's name (`numBucketInserts`, …), in the order `collStats`
    /// reports them, with `avgNumMeasurementsPerCommit` last once there was a commit.
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        [
            ("numBucketsOpenedDueToMetadata", self.num_buckets_opened_due_to_metadata),
            ("numBucketsClosedDueToCount", self.num_buckets_closed_due_to_count),
            ("numBucketsClosedDueToSize", self.num_buckets_closed_due_to_size),
            ("numBucketsClosedDueToTimeForward", self.num_buckets_closed_due_to_time_forward),
            ("numBucketsClosedDueToTimeBackward", self.num_buckets_closed_due_to_time_backward),
            ("numBucketsClosedDueToMemoryThreshold", self.num_buckets_closed_due_to_memory_threshold),
            ("numBucketsClosedDueToSchemaChange", self.num_buckets_closed_due_to_schema_change),
            ("numBucketsClosedDueToWalLimit", self.num_buckets_closed_due_to_wal_limit),
            ("numBucketsClosedDueToFlush", self.num_buckets_closed_due_to_flush),
            ("numBucketsReopened", self.num_buckets_reopened),
            ("numBucketsKeptOpenDueToLargeMeasurements", self.num_buckets_kept_open_due_to_large_measurements),
            ("numBucketInserts", self.num_bucket_inserts),
            ("numBucketUpdates", self.num_bucket_updates),
            ("numCommits", self.num_commits),
            ("numMeasurementsCommitted", self.num_measurements_committed),
        ]
        .into_iter()
        .chain(
            self.avg_num_measurements_per_commit()
                .map(|v| ("avgNumMeasurementsPerCommit", v)),
        )
        .collect()
    }
}
