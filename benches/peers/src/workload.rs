//! The two workloads as the comparison runs them: the crate's generators and query windows,
//! plus the one query the aggregation set lacks (`find-host-hour`).

use tsbucket::bson::Document;
use tsbucket_workload::queries::{devops_host, devops_hour_window};
use tsbucket_workload::{Devops, Seed004};

/// One hour in milliseconds.
pub const HOUR_MS: i64 = 3_600_000;
/// One minute in milliseconds.
pub const MINUTE_MS: i64 = 60_000;

/// A workload and its size.
#[derive(Debug, Clone)]
pub enum Workload {
    /// TSBS devops cpu-only.
    Devops(Devops),
    /// The seed 004 shape.
    Seed004(Seed004),
}

/// The devops query names, in the order they are reported.
pub const DEVOPS_QUERIES: [&str; 6] = [
    "cpu-max-all-1",
    "double-groupby-1",
    "high-cpu-all",
    "lastpoint",
    "single-groupby-1-1-1",
    "find-host-hour",
];

/// The seed 004 query names.
pub const SEED004_QUERIES: [&str; 2] = ["count-per-period", "sum-per-period-cmd"];

impl Workload {
    /// Short name for the report.
    pub fn name(&self) -> &'static str {
        match self {
            Workload::Devops(_) => "devops",
            Workload::Seed004(_) => "seed004",
        }
    }

    /// The size, for the report's heading.
    pub fn describe(&self) -> String {
        match self {
            Workload::Devops(c) => format!(
                "devops-cpu, {} hosts x {} h at {} s, {} fields",
                c.hosts,
                c.hours,
                c.interval_ms / 1000,
                if c.float { "float64" } else { "int64" }
            ),
            Workload::Seed004(c) => format!("seed 004, scale {}", c.scale),
        }
    }

    /// The measurements, in generation order.
    pub fn generate(&self) -> Box<dyn Iterator<Item = Document>> {
        match self {
            Workload::Devops(c) => Box::new(c.generate()),
            Workload::Seed004(c) => Box::new(c.generate()),
        }
    }

    /// The queries the workload times.
    pub fn queries(&self) -> &'static [&'static str] {
        match self {
            Workload::Devops(_) => &DEVOPS_QUERIES,
            Workload::Seed004(_) => &SEED004_QUERIES,
        }
    }
}

/// The windows and host the devops queries read (the same as the crate's pipelines).
#[derive(Debug, Clone)]
pub struct DevopsParams {
    /// The host of the single-host queries.
    pub host: String,
    /// First timestamp of the data.
    pub start: i64,
    /// `single-groupby-1-1-1`'s hour, on minute boundaries.
    pub hour: (i64, i64),
    /// `find-host-hour`'s window: the first hour.
    pub first_hour: (i64, i64),
}

impl DevopsParams {
    /// The parameters of `cfg`.
    pub fn new(cfg: &Devops) -> DevopsParams {
        DevopsParams {
            host: devops_host(cfg),
            start: cfg.start_ms,
            hour: devops_hour_window(cfg),
            first_hour: (cfg.start_ms, cfg.start_ms + HOUR_MS),
        }
    }
    /// `cpu-max-all-1`'s window: 8 hours from the start.
    pub fn eight_hours(&self) -> (i64, i64) {
        (self.start, self.start + 8 * HOUR_MS)
    }
    /// The window of `double-groupby-1` and `high-cpu-all`: 12 hours from the start.
    pub fn twelve_hours(&self) -> (i64, i64) {
        (self.start, self.start + 12 * HOUR_MS)
    }
}
