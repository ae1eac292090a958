//! Collection and database options, validated as MongoDB validates them.

use crate::clock::{Clock, SystemClock};
use crate::error::{Error, Result};
use crate::vfs::{RealFs, Vfs};
use std::sync::Arc;
use std::time::Duration;

/// When an appended record is made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// `append` returns after the record's group was fsynced (`sync_data`). Survives power loss.
    #[default]
    Always,
    /// `append` returns after the write; the file is synced at most this long after the first
    /// unsynced write. **Weaker**: a power loss (not a process crash) may lose records that were
    /// acknowledged within the last interval.
    Periodic(Duration),
    /// Never synced except at rotation, reclaim and close. **Weaker**: a power loss may lose any
    /// record since the last rotation; a process crash loses nothing the OS already holds.
    Never,
}

/// What recovery does with damage at the end of the last log file (see
/// `format-spec/crash-model.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WalRecovery {
    /// Cut a torn tail: bytes after the last intact record that no later intact record
    /// follows. A crash in the middle of a write leaves one; under [`SyncMode::Always`] it
    /// never holds an acknowledged record. What was cut is reported
    /// ([`crate::RecoveryReport::dropped_tail`]).
    #[default]
    TolerateTornTail,
    /// Refuse to open (`Error::Corruption`) when the tail may have held a record (a torn or
    /// damaged record, or garbage in a file created empty), instead of cutting it. Zeros
    /// written ahead and the old bytes of a reused file are still cut: every crash leaves them.
    /// For a deployment that would rather inspect a damaged log than lose anything unsaid.
    AbsoluteConsistency,
}

/// Largest custom bucket span MongoDB accepts (365 days).
pub const MAX_BUCKET_SPAN_SECONDS: u32 = 31_536_000;
/// Largest `expireAfterSeconds` accepted (MongoDB's TTL limit, `i32::MAX`).
pub const MAX_EXPIRE_AFTER_SECONDS: u64 = i32::MAX as u64;

/// Preset bucketing of a time-series collection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Granularity {
    /// Buckets span up to an hour, starts rounded to the minute (the default).
    Seconds,
    /// Buckets span up to a day, starts rounded to the hour.
    Minutes,
    /// Buckets span up to 30 days, starts rounded to the day.
    Hours,
}

impl Granularity {
    /// `bucketMaxSpanSeconds` of this granularity.
    pub fn max_span_seconds(self) -> u32 {
        match self {
            Granularity::Seconds => 3_600,
            Granularity::Minutes => 86_400,
            Granularity::Hours => 2_592_000,
        }
    }
    /// `bucketRoundingSeconds` of this granularity.
    pub fn rounding_seconds(self) -> u32 {
        match self {
            Granularity::Seconds => 60,
            Granularity::Minutes => 3_600,
            Granularity::Hours => 86_400,
        }
    }
    /// MongoDB's name: "seconds", "minutes" or "hours".
    pub fn as_str(self) -> &'static str {
        match self {
            Granularity::Seconds => "seconds",
            Granularity::Minutes => "minutes",
            Granularity::Hours => "hours",
        }
    }
    /// Parses MongoDB's name.
    pub fn parse(s: &str) -> Result<Granularity> {
        match s {
            "seconds" => Ok(Granularity::Seconds),
            "minutes" => Ok(Granularity::Minutes),
            "hours" => Ok(Granularity::Hours),
            other => Err(Error::BadValue(format!(
                "unknown granularity '{other}': expected 'seconds', 'minutes' or 'hours'"
            ))),
        }
    }
}

/// How a time-series collection buckets its measurements.
///
/// Equality compares the options in force, not how they were spelled: the default granularity
/// equals an explicit `Granularity::Seconds` (as in MongoDB, which stores the default). The
/// manifest stores the granularity explicitly, so options read back after a reopen must still
/// equal the ones the collection was created with.
#[derive(Debug, Clone)]
pub struct TimeseriesOptions {
    pub(crate) time_field: String,
    pub(crate) meta_field: Option<String>,
    pub(crate) granularity: Option<Granularity>,
    pub(crate) custom_span: Option<(u32, u32)>,
    pub(crate) expire_after_seconds: Option<u64>,
}

impl PartialEq for TimeseriesOptions {
    fn eq(&self, other: &Self) -> bool {
        self.time_field == other.time_field
            && self.meta_field == other.meta_field
            && self.get_granularity() == other.get_granularity()
            && self.bucket_max_span_seconds() == other.bucket_max_span_seconds()
            && self.bucket_rounding_seconds() == other.bucket_rounding_seconds()
            && self.expire_after_seconds == other.expire_after_seconds
    }
}

impl Eq for TimeseriesOptions {}

impl TimeseriesOptions {
    /// Options with the given time field and MongoDB's defaults (granularity "seconds", no meta
    /// field, no expiry).
    pub fn new(time_field: impl Into<String>) -> TimeseriesOptions {
        TimeseriesOptions {
            time_field: time_field.into(),
            meta_field: None,
            granularity: None,
            custom_span: None,
            expire_after_seconds: None,
        }
    }
    /// Names the meta field: measurements with equal meta values share buckets.
    pub fn meta_field(mut self, name: impl Into<String>) -> Self {
        self.meta_field = Some(name.into());
        self
    }
    /// Chooses a preset granularity.
    pub fn granularity(mut self, g: Granularity) -> Self {
        self.granularity = Some(g);
        self
    }
    /// Custom bucketing: `bucketMaxSpanSeconds` and `bucketRoundingSeconds` (must be equal).
    pub fn bucket_span(mut self, max_span_secs: u32, rounding_secs: u32) -> Self {
        self.custom_span = Some((max_span_secs, rounding_secs));
        self
    }
    /// Deletes buckets once all their measurements are older than this many seconds.
    pub fn expire_after_seconds(mut self, secs: u64) -> Self {
        self.expire_after_seconds = Some(secs);
        self
    }

    /// The time field.
    pub fn get_time_field(&self) -> &str {
        &self.time_field
    }
    /// The meta field, if any.
    pub fn get_meta_field(&self) -> Option<&str> {
        self.meta_field.as_deref()
    }
    /// The granularity in force; `None` when custom spans are set.
    pub fn get_granularity(&self) -> Option<Granularity> {
        match (self.granularity, self.custom_span) {
            (Some(g), _) => Some(g),
            (None, Some(_)) => None,
            (None, None) => Some(Granularity::Seconds),
        }
    }
    /// `bucketMaxSpanSeconds` in force.
    pub fn bucket_max_span_seconds(&self) -> u32 {
        match self.custom_span {
            Some((span, _)) => span,
            None => self
                .granularity
                .unwrap_or(Granularity::Seconds)
                .max_span_seconds(),
        }
    }
    /// `bucketRoundingSeconds` in force.
    pub fn bucket_rounding_seconds(&self) -> u32 {
        match self.custom_span {
            Some((_, r)) => r,
            None => self
                .granularity
                .unwrap_or(Granularity::Seconds)
                .rounding_seconds(),
        }
    }
    /// Expiry, if set.
    pub fn get_expire_after_seconds(&self) -> Option<u64> {
        self.expire_after_seconds
    }

    /// Checks the options as MongoDB's `create` does.
    pub fn validate(&self) -> Result<()> {
        validate_field_name("timeField", &self.time_field)?;
        if let Some(meta) = &self.meta_field {
            validate_field_name("metaField", meta)?;
            if meta == &self.time_field {
                return Err(Error::InvalidOptions(
                    "'metaField' cannot be the same as 'timeField'".into(),
                ));
            }
        }
        if let Some((span, rounding)) = self.custom_span {
            if self.granularity.is_some() {
                return Err(Error::InvalidOptions(
                    "Timeseries 'bucketRoundingSeconds' cannot be set alongside the granularity parameter"
                        .into(),
                ));
            }
            validate_span("bucketMaxSpanSeconds", span)?;
            validate_span("bucketRoundingSeconds", rounding)?;
            if span != rounding {
                return Err(Error::InvalidOptions(
                    "Timeseries 'bucketRoundingSeconds' must be equal to 'bucketMaxSpanSeconds'"
                        .into(),
                ));
            }
        }
        if let Some(e) = self.expire_after_seconds {
            validate_expire(e)?;
        }
        Ok(())
    }
}

fn validate_field_name(what: &str, name: &str) -> Result<()> {
    if name.contains('\0') {
        return Err(Error::BadValue(format!(
            "'{what}' must not contain null bytes"
        )));
    }
    if name.is_empty() {
        return Err(Error::InvalidOptions(format!("'{what}' must not be empty")));
    }
    if name == "_id" {
        return Err(Error::InvalidOptions(format!("'{what}' cannot be '_id'")));
    }
    if name.contains('.') {
        return Err(Error::InvalidOptions(format!(
            "'{what}' must be a top-level field and cannot contain a '.'"
        )));
    }
    if name.starts_with('$') {
        return Err(Error::InvalidOptions(format!(
            "'{what}' cannot start with '$'"
        )));
    }
    Ok(())
}

fn validate_span(what: &str, v: u32) -> Result<()> {
    // MongoDB 7.1+ reports out-of-range bucketing parameters as BadValue.
    if v == 0 || v > MAX_BUCKET_SPAN_SECONDS {
        return Err(Error::BadValue(format!(
            "Timeseries '{what}' must be between 1 and {MAX_BUCKET_SPAN_SECONDS}, got {v}"
        )));
    }
    Ok(())
}

pub(crate) fn validate_expire(e: u64) -> Result<()> {
    if e > MAX_EXPIRE_AFTER_SECONDS {
        return Err(Error::InvalidOptions(format!(
            "'expireAfterSeconds' must be between 0 and {MAX_EXPIRE_AFTER_SECONDS}, got {e}"
        )));
    }
    Ok(())
}

/// Limits of the bucket catalog (MongoDB's server parameters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketLimits {
    /// `timeseriesBucketMaxCount`: measurements per bucket.
    pub max_count: u32,
    /// `timeseriesBucketMaxSize`: bytes of measurement data per bucket.
    pub max_size: usize,
    /// `timeseriesBucketMinCount`: below this count a bucket may grow past `max_size`.
    pub min_count: u32,
    /// Hard cap for buckets kept open for large measurements.
    pub large_max_size: usize,
}

impl Default for BucketLimits {
    fn default() -> Self {
        BucketLimits {
            max_count: 1000,
            max_size: 128_000,
            min_count: 10,
            large_max_size: 12 * 1024 * 1024,
        }
    }
}

/// CPU priority of the background threads that apply logged batches to the bucket catalog,
/// flush segments and sweep expired data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackgroundPriority {
    /// The priority of the thread that opened the database.
    Normal,
    /// Nice 19 on Linux (elsewhere as `Normal`): the threads an insert waits for, its own
    /// and the log writer, get a core first. The background threads keep up on average from
    /// the time the others leave; when they fall far behind, inserts wait for them (at most
    /// 4 commit groups wait to be applied). On a machine whose every core other programs
    /// keep busy, writes and the reads that wait for them then slow down more than at
    /// `Normal`.
    #[default]
    Low,
}

/// Options of a [`crate::Database`].
#[derive(Clone)]
pub struct DbOptions {
    /// When an insert is acknowledged relative to the log fsync. Default: [`SyncMode::Always`].
    pub sync: SyncMode,
    /// Bucket catalog limits.
    pub limits: BucketLimits,
    /// Memory the bucket catalog may use for unflushed buckets before it closes idle ones.
    /// Closed buckets waiting for the flusher are held to half of it: while more wait, inserts
    /// wait for the flusher to take them, so that a flusher slower than the inserts (a slow
    /// disk, a busy machine) slows the inserts instead of filling memory.
    pub catalog_memory_limit: usize,
    /// Closed buckets are written to a segment once their measurement bytes exceed this.
    pub flush_threshold_bytes: usize,
    /// Log bytes after which the oldest open buckets are closed so the log can be reclaimed.
    pub wal_limit_bytes: u64,
    /// Size at which a log file is closed and the next one started (default 64 MiB). Log space
    /// is reclaimed a whole file at a time.
    pub wal_file_bytes: u64,
    /// Reclaimed log files kept on disk for new log files to reuse (default 4; each is about
    /// `wal_file_bytes`, and files under a quarter of it are never kept). Records written into a reused file need
    /// no zeros written ahead of them, which halves the bytes the log writes (see
    /// `format-spec/wal.md`, "Spare files"); 0 deletes reclaimed files at once.
    pub wal_spare_files: usize,
    /// Store insert records in the log compacted (default true): each row as its values, its
    /// element names and meta value written once per log file (`format-spec/wal.md`, "Compacted
    /// insert records"). A measurement of ten string tags and ten int64 fields then takes about
    /// 105 log bytes instead of 470, which every insert writes and syncs. False stores every
    /// record as its BSON documents. Logs of either kind are always read.
    pub wal_compact: bool,
    /// Largest insert batch, in encoded bytes.
    pub max_batch_bytes: usize,
    /// What opening does with damage at the end of the log (default
    /// [`WalRecovery::TolerateTornTail`]: cut it, and report it in
    /// [`crate::Database::recovery_report`]).
    pub wal_recovery: WalRecovery,
    /// CPU priority of the background threads (default [`BackgroundPriority::Low`]).
    pub background_priority: BackgroundPriority,
    /// How often the background TTL sweeper runs; `None` disables it.
    pub ttl_interval: Option<Duration>,
    /// The file system; tests pass an in-memory or fault-injecting one.
    pub vfs: Arc<dyn Vfs>,
    /// Source of "now" for the TTL sweeper.
    pub clock: Arc<dyn Clock>,
    /// Threads a read may use to scan buckets (counts, and columnar `$group`s without
    /// `$first`/`$last`, over a thousand buckets or more; unsorted finds of 16 buckets or
    /// more): 0 for one per core, at most 4; 1
    /// keeps every read on the calling thread. Default: 0.
    ///
    /// Threads take stretches of buckets as they come free, so which thread sees which varies
    /// between runs: groups still come out in one order, but which of several values that
    /// compare equal with different numeric types a `$min` or `$max` returns, and the last bit
    /// of a `$sum` or `$avg` of doubles whose exact total needs more than 106 bits, may vary.
    /// 1 gives one answer always.
    pub query_threads: usize,
    /// Bytes of decompressed segment pages kept across reads, shared by all collections
    /// (least recently used dropped first; a segment's pages go when it does). Pages stored
    /// without compression are read from the mapped file and take none of it; 0 keeps only
    /// the few pages each segment holds for the read in progress. Default: 64 MiB.
    pub page_cache_bytes: usize,
    /// Bytes of documents a `$sort` (or a sorted `find` without a small limit) holds in
    /// memory; past it, sorted runs go to unnamed temporary files in the database directory
    /// (the system's temporary directory when that is not writable) and are merged as the
    /// results are read. Estimated from the documents' fields and values. Default: 100 MiB,
    /// MongoDB's limit for a blocking sort.
    pub sort_memory_limit: usize,
}

impl Default for DbOptions {
    fn default() -> Self {
        DbOptions {
            sync: SyncMode::Always,
            limits: BucketLimits::default(),
            catalog_memory_limit: 256 * 1024 * 1024,
            flush_threshold_bytes: 16 * 1024 * 1024,
            wal_limit_bytes: 512 * 1024 * 1024,
            wal_file_bytes: 64 << 20,
            wal_spare_files: 4,
            wal_compact: true,
            max_batch_bytes: 48 * 1024 * 1024,
            wal_recovery: WalRecovery::TolerateTornTail,
            background_priority: BackgroundPriority::Low,
            ttl_interval: Some(Duration::from_secs(60)),
            vfs: Arc::new(RealFs),
            clock: Arc::new(SystemClock),
            query_threads: 0,
            page_cache_bytes: 64 * 1024 * 1024,
            sort_memory_limit: 100 * 1024 * 1024,
        }
    }
}

impl std::fmt::Debug for DbOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbOptions")
            .field("sync", &self.sync)
            .field("limits", &self.limits)
            .field("catalog_memory_limit", &self.catalog_memory_limit)
            .field("flush_threshold_bytes", &self.flush_threshold_bytes)
            .field("wal_limit_bytes", &self.wal_limit_bytes)
            .field("wal_file_bytes", &self.wal_file_bytes)
            .field("wal_spare_files", &self.wal_spare_files)
            .field("wal_compact", &self.wal_compact)
            .field("max_batch_bytes", &self.max_batch_bytes)
            .field("wal_recovery", &self.wal_recovery)
            .field("background_priority", &self.background_priority)
            .field("ttl_interval", &self.ttl_interval)
            .field("vfs", &self.vfs)
            .field("query_threads", &self.query_threads)
            .field("page_cache_bytes", &self.page_cache_bytes)
            .field("sort_memory_limit", &self.sort_memory_limit)
            .finish()
    }
}

impl DbOptions {
    /// Sets the sync mode.
    pub fn sync(mut self, sync: SyncMode) -> Self {
        self.sync = sync;
        self
    }
    /// Sets the file system.
    pub fn vfs(mut self, vfs: Arc<dyn Vfs>) -> Self {
        self.vfs = vfs;
        self
    }
    /// Sets the clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    /// Sets the bucket limits.
    pub fn limits(mut self, limits: BucketLimits) -> Self {
        self.limits = limits;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(o: TimeseriesOptions) -> Option<i32> {
        o.validate().err().and_then(|e| e.code())
    }

    #[test]
    fn defaults_are_seconds_granularity() {
        let o = TimeseriesOptions::new("t");
        assert!(o.validate().is_ok());
        assert_eq!(o.get_granularity(), Some(Granularity::Seconds));
        assert_eq!(o.bucket_max_span_seconds(), 3600);
        assert_eq!(o.bucket_rounding_seconds(), 60);
    }

    #[test]
    fn bad_field_names_are_invalid_options() {
        assert_eq!(code(TimeseriesOptions::new("")), Some(72));
        assert_eq!(code(TimeseriesOptions::new("_id")), Some(72));
        assert_eq!(code(TimeseriesOptions::new("a.b")), Some(72));
        assert_eq!(code(TimeseriesOptions::new("t").meta_field("t")), Some(72));
        assert_eq!(
            code(TimeseriesOptions::new("t").meta_field("_id")),
            Some(72)
        );
        assert_eq!(
            code(TimeseriesOptions::new("t").meta_field("m.x")),
            Some(72)
        );
        assert_eq!(code(TimeseriesOptions::new("t\0")), Some(2));
    }

    #[test]
    fn spans_follow_mongodb_rules() {
        let t = || TimeseriesOptions::new("t");
        assert!(t().bucket_span(200, 200).validate().is_ok());
        assert_eq!(code(t().bucket_span(100, 50)), Some(72));
        assert_eq!(code(t().bucket_span(0, 0)), Some(2));
        assert_eq!(code(t().bucket_span(31_536_001, 31_536_001)), Some(2));
        assert!(t().bucket_span(31_536_000, 31_536_000).validate().is_ok());
        assert_eq!(
            code(t().granularity(Granularity::Hours).bucket_span(60, 60)),
            Some(72)
        );
        let o = t().bucket_span(200, 200);
        assert_eq!(o.get_granularity(), None);
        assert_eq!(o.bucket_max_span_seconds(), 200);
    }

    #[test]
    fn default_granularity_equals_explicit_seconds() {
        let t = || TimeseriesOptions::new("t").meta_field("m");
        assert_eq!(t(), t().granularity(Granularity::Seconds));
        assert_ne!(t(), t().granularity(Granularity::Minutes));
        assert_ne!(t(), t().bucket_span(60, 60));
        assert_ne!(t(), t().expire_after_seconds(5));
        assert_ne!(t(), TimeseriesOptions::new("t"));
    }

    #[test]
    fn granularity_table_matches_mongodb() {
        assert_eq!(Granularity::Minutes.max_span_seconds(), 86_400);
        assert_eq!(Granularity::Minutes.rounding_seconds(), 3_600);
        assert_eq!(Granularity::Hours.max_span_seconds(), 2_592_000);
        assert_eq!(Granularity::Hours.rounding_seconds(), 86_400);
    }

    #[test]
    fn expire_after_seconds_is_bounded() {
        assert!(TimeseriesOptions::new("t")
            .expire_after_seconds(0)
            .validate()
            .is_ok());
        assert_eq!(
            code(TimeseriesOptions::new("t").expire_after_seconds(1 << 62)),
            Some(72)
        );
    }
}
