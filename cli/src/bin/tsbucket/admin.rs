//! Database administration: `create`, `list`, `stats` and `verify`.

use crate::common::{open_for_reading, open_for_writing, open_to_inspect, CliResult};
use crate::out::Out;
use clap::{Args, ValueEnum};
use serde_json::{json, Value};
use std::path::PathBuf;
use tsbucket::{CollStats, Granularity, TimeseriesOptions};

/// Bucketing options of a new collection, shared by `create` and `import --create`.
#[derive(Args, Default)]
pub struct BucketArgs {
    /// Meta field: measurements with equal values share buckets.
    #[arg(long)]
    pub meta_field: Option<String>,
    /// Preset bucketing (default seconds: buckets span an hour, starts rounded to the minute).
    #[arg(long, value_enum, conflicts_with = "bucket_span")]
    pub granularity: Option<GranularityArg>,
    /// Custom bucketing: bucketMaxSpanSeconds = bucketRoundingSeconds = SECS.
    #[arg(long, value_name = "SECS")]
    pub bucket_span: Option<u32>,
    /// Delete buckets once all their measurements are older than SECS seconds.
    #[arg(long, value_name = "SECS")]
    pub expire_after: Option<u64>,
}

impl BucketArgs {
    /// Whether any option was given.
    pub fn any(&self) -> bool {
        self.meta_field.is_some()
            || self.granularity.is_some()
            || self.bucket_span.is_some()
            || self.expire_after.is_some()
    }

    /// The collection options with time field `time_field`.
    pub fn options(&self, time_field: &str) -> TimeseriesOptions {
        let mut o = TimeseriesOptions::new(time_field);
        if let Some(m) = &self.meta_field {
            o = o.meta_field(m);
        }
        if let Some(g) = self.granularity {
            o = o.granularity(g.into());
        }
        if let Some(s) = self.bucket_span {
            o = o.bucket_span(s, s);
        }
        if let Some(e) = self.expire_after {
            o = o.expire_after_seconds(e);
        }
        o
    }
}

/// Preset granularities.
#[derive(Clone, Copy, ValueEnum)]
pub enum GranularityArg {
    /// Buckets span up to an hour, starts rounded to the minute.
    Seconds,
    /// Buckets span up to a day, starts rounded to the hour.
    Minutes,
    /// Buckets span up to 30 days, starts rounded to the day.
    Hours,
}

impl From<GranularityArg> for Granularity {
    fn from(g: GranularityArg) -> Granularity {
        match g {
            GranularityArg::Seconds => Granularity::Seconds,
            GranularityArg::Minutes => Granularity::Minutes,
            GranularityArg::Hours => Granularity::Hours,
        }
    }
}

/// Flags of `tsbucket create`.
#[derive(Args)]
pub struct CreateArgs {
    /// Database directory (created if missing).
    dir: PathBuf,
    /// Collection name.
    coll: String,
    /// Field holding each measurement's time (a BSON date).
    #[arg(long)]
    time_field: String,
    #[command(flatten)]
    bucket: BucketArgs,
}

/// Flags of `tsbucket list`.
#[derive(Args)]
pub struct ListArgs {
    /// Database directory.
    dir: PathBuf,
}

/// Flags of `tsbucket stats`.
#[derive(Args)]
pub struct StatsArgs {
    /// Database directory.
    dir: PathBuf,
    /// Only this collection, with its bucket catalog counters.
    coll: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Flags of `tsbucket verify`.
#[derive(Args)]
pub struct VerifyArgs {
    /// Database directory.
    dir: PathBuf,
}

/// Runs `create`.
pub fn create(a: CreateArgs) -> CliResult {
    let options = a.bucket.options(&a.time_field);
    let db = open_for_writing(&a.dir)?;
    let existed = db.collection(&a.coll).is_ok();
    // An existing collection with the same options is accepted (as MongoDB does), and left
    // as it is.
    db.create_collection(&a.coll, options.clone())?;
    db.close()?;
    let mut out = Out::new();
    let what = match existed {
        true => "exists, with the same options, unchanged",
        false => "created",
    };
    out.line(&format!(
        "{what} '{}': {}",
        a.coll,
        describe_options(&options)
    ))?;
    Ok(out.finish()?)
}

/// Runs `list`.
pub fn list(a: ListArgs) -> CliResult {
    let db = open_for_reading(&a.dir)?;
    let mut out = Out::new();
    for c in db.list_collections()? {
        out.line(&format!("{}: {}", c.name, describe_options(&c.options)))?;
    }
    out.finish()?;
    db.close()?;
    Ok(())
}

/// One line describing a collection's options.
pub fn describe_options(o: &TimeseriesOptions) -> String {
    let mut s = format!("timeField '{}'", o.get_time_field());
    if let Some(m) = o.get_meta_field() {
        s += &format!(", metaField '{m}'");
    }
    match o.get_granularity() {
        Some(g) => s += &format!(", granularity {}", g.as_str()),
        None => s += ", custom bucketing",
    }
    s += &format!(
        " (buckets span up to {} s, starts rounded to {} s)",
        o.bucket_max_span_seconds(),
        o.bucket_rounding_seconds()
    );
    if let Some(e) = o.get_expire_after_seconds() {
        s += &format!(", expireAfterSeconds {e}");
    }
    s
}

/// Runs `stats`.
pub fn stats(a: StatsArgs) -> CliResult {
    let db = open_to_inspect(&a.dir)?;
    let names = match &a.coll {
        Some(c) => vec![c.clone()],
        None => db.list_collections()?.into_iter().map(|c| c.name).collect(),
    };
    let mut all = Vec::new();
    for n in names {
        let s = crate::common::collection(&db, &n)?.stats()?;
        all.push((n, s));
    }
    let recovery = db.recovery_report();
    db.close()?;
    let mut out = Out::new();
    if a.json {
        let v: serde_json::Map<String, Value> = all
            .iter()
            .map(|(n, s)| (n.clone(), stats_json(s)))
            .collect();
        out.json_pretty(&Value::Object(v))?;
    } else {
        for line in stats_table(&all) {
            out.line(&line)?;
        }
        if let (Some(_), [(_, s)]) = (&a.coll, all.as_slice()) {
            out.line(&format!(
                "inserted as {} bytes of BSON; {:.1} measurements per bucket, {} bytes per flushed bucket; open buckets {} ({} archived), {} awaiting flush, catalog memory {} bytes",
                s.bson_bytes,
                s.avg_measurements_per_bucket,
                s.avg_bucket_bytes,
                s.open_buckets,
                s.archived_buckets,
                s.unflushed_buckets,
                s.catalog_memory_bytes
            ))?;
            // As in MongoDB, these count since the database was opened, and this command
            // just opened it.
            out.line(
                "bucket catalog, since this command opened the database (counters of a \
                 running process are in Collection::stats):",
            )?;
            for (k, v) in catalog_counters(s) {
                out.line(&format!("  {k:<48} {v:>12}"))?;
            }
        }
        out.line(&format!("recovery at open: {recovery}"))?;
    }
    Ok(out.finish()?)
}

fn stats_table(all: &[(String, CollStats)]) -> Vec<String> {
    let mut lines = vec![format!(
        "{:<20} {:>12} {:>9} {:>9} {:>8} {:>14} {:>10} {:>8}",
        "collection",
        "measurements",
        "buckets",
        "in memory",
        "segments",
        "segment bytes",
        "bytes/row",
        "ratio"
    )];
    for (n, s) in all {
        lines.push(format!(
            "{:<20} {:>12} {:>9} {:>9} {:>8} {:>14} {:>10.2} {:>8}",
            n,
            s.measurements,
            s.buckets,
            s.buckets - s.flushed_buckets,
            s.segments,
            s.segment_bytes,
            s.segment_bytes as f64 / s.measurements.max(1) as f64,
            if s.compression_ratio > 0.0 {
                format!("{:.1}x", s.compression_ratio)
            } else {
                "-".into()
            }
        ));
    }
    if let Some((_, s)) = all.first() {
        lines.push(format!(
            "shared: log {} bytes, manifest {} bytes",
            s.wal_bytes, s.manifest_bytes
        ));
    }
    lines
}

fn catalog_counters(s: &CollStats) -> Vec<(&'static str, u64)> {
    s.catalog.named()
}

fn stats_json(s: &CollStats) -> Value {
    let catalog: serde_json::Map<String, Value> = catalog_counters(s)
        .into_iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({
        "measurements": s.measurements,
        "buckets": s.buckets,
        "flushedBuckets": s.flushed_buckets,
        "openBuckets": s.open_buckets,
        "archivedBuckets": s.archived_buckets,
        "unflushedBuckets": s.unflushed_buckets,
        "catalogMemoryBytes": s.catalog_memory_bytes,
        "avgMeasurementsPerBucket": s.avg_measurements_per_bucket,
        "avgBucketSize": s.avg_bucket_bytes,
        "segments": s.segments,
        "segmentBytes": s.segment_bytes,
        "walBytes": s.wal_bytes,
        "walSpareBytes": s.wal_spare_bytes,
        "manifestBytes": s.manifest_bytes,
        "bytesOnDisk": s.bytes_on_disk,
        "bsonBytes": s.bson_bytes,
        "unsizedBuckets": s.unsized_buckets,
        "compressionRatio": s.compression_ratio,
        "catalog": catalog,
    })
}

/// Runs `verify`: a problem is returned as the engine's `Corruption` error, which names the
/// file and offset, and `main` exits 1 with it.
pub fn verify(a: VerifyArgs) -> CliResult {
    let db = open_to_inspect(&a.dir)?;
    let pb = indicatif::ProgressBar::new(0);
    pb.set_style(indicatif::ProgressStyle::with_template(
        "verify {bar:40} {pos}/{len} segments eta {eta}",
    )?);
    let r = db.verify_with_progress(|done, total| {
        pb.set_length(total);
        pb.set_position(done);
    });
    pb.finish_and_clear();
    let r = r?;
    let recovery = db.recovery_report();
    db.close()?;
    let mut out = Out::new();
    out.line(&format!(
        "ok: {} segments, {} buckets, {} measurements verified; manifest and _id index consistent",
        r.segments, r.buckets, r.measurements
    ))?;
    out.line(&format!("recovery at open: {recovery}"))?;
    Ok(out.finish()?)
}
