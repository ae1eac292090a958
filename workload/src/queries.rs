//! The workloads' queries as aggregation pipelines, shared by benchmarks, the demo and tests.
//!
//! Devops (TSBS cpu-only; windows are fixed instead of TSBS's random ones, so runs compare):
//! `cpu-max-all-1`, `double-groupby-1`, `high-cpu-all`, `lastpoint`, `single-groupby-1-1-1`.
//! Seed 004: count per period; sum(totalCount) per (period, vCmdid) where vAppid != "".

use super::devops::{Devops, FIELDS};
use tsbucket::bson::{doc, Bson, DateTime, Document};

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;

fn trunc(date: &str, unit: &str) -> Bson {
    Bson::Document(doc! {"$dateTrunc": {"date": date, "unit": unit}})
}

fn window(lo: i64, hi: i64) -> Document {
    doc! {"$gte": DateTime::from_millis(lo), "$lt": DateTime::from_millis(hi)}
}

/// The host the single-host devops queries read.
pub fn devops_host(cfg: &Devops) -> String {
    format!("host_{}", cfg.hosts / 2)
}

/// The one-hour window of `single-groupby-1-1-1`: centred in the data, on minute boundaries
/// but not on bucket boundaries, so its edge buckets are unpacked.
pub fn devops_hour_window(cfg: &Devops) -> (i64, i64) {
    let span = (cfg.hours * HOUR_MS as f64) as i64;
    let mid = cfg.start_ms + span / 2;
    let lo = mid - mid.rem_euclid(MINUTE_MS) - 25 * MINUTE_MS;
    (lo, lo + HOUR_MS)
}

/// A devops query that statistics cannot answer, for the scan rate of decoded columns: the
/// sum of `usage_user` per minute over every host. Buckets span an hour, so every bucket's
/// time and `usage_user` columns are decoded and every row is summed into its minute.
pub fn devops_scan_query() -> (&'static str, Vec<Document>) {
    (
        "scan-sum-per-minute",
        vec![
            doc! {"$group": {"_id": trunc("$time", "minute"), "s": {"$sum": "$usage_user"}}},
            doc! {"$sort": {"_id": 1}},
        ],
    )
}

/// The devops queries: (name, pipeline).
pub fn devops_queries(cfg: &Devops) -> Vec<(&'static str, Vec<Document>)> {
    let host = devops_host(cfg);
    let start = cfg.start_ms;
    let mut max_all = doc! {"_id": trunc("$time", "hour")};
    for f in FIELDS {
        max_all.insert(format!("max_{f}"), doc! {"$max": format!("${f}")});
    }
    let mut last = doc! {"_id": "$tags.hostname", "time": {"$last": "$time"}};
    for f in FIELDS {
        last.insert(f, doc! {"$last": format!("${f}")});
    }
    let (h_lo, h_hi) = devops_hour_window(cfg);
    vec![
        (
            "cpu-max-all-1",
            vec![
                doc! {"$match": {"tags.hostname": &host, "time": window(start, start + 8 * HOUR_MS)}},
                doc! {"$group": max_all},
                doc! {"$sort": {"_id": 1}},
            ],
        ),
        (
            "double-groupby-1",
            vec![
                doc! {"$match": {"time": window(start, start + 12 * HOUR_MS)}},
                doc! {"$group": {
                    "_id": {"host": "$tags.hostname", "hour": trunc("$time", "hour")},
                    "avg_usage_user": {"$avg": "$usage_user"},
                }},
            ],
        ),
        (
            "high-cpu-all",
            vec![
                doc! {"$match": {"usage_user": {"$gt": 90}, "time": window(start, start + 12 * HOUR_MS)}},
                doc! {"$count": "n"},
            ],
        ),
        (
            "lastpoint",
            vec![doc! {"$sort": {"time": 1}}, doc! {"$group": last}],
        ),
        (
            "single-groupby-1-1-1",
            vec![
                doc! {"$match": {"tags.hostname": &host, "time": window(h_lo, h_hi)}},
                doc! {"$group": {"_id": trunc("$time", "minute"), "max_usage_user": {"$max": "$usage_user"}}},
                doc! {"$sort": {"_id": 1}},
            ],
        ),
    ]
}

/// The seed 004 queries: (name, pipeline).
pub fn seed004_queries() -> Vec<(&'static str, Vec<Document>)> {
    vec![
        (
            "count-per-period",
            vec![
                doc! {"$group": {"_id": trunc("$timestamp", "minute"), "count": {"$count": {}}}},
                doc! {"$sort": {"_id": 1}},
            ],
        ),
        (
            "sum-per-period-cmd",
            vec![
                doc! {"$match": {"dims.vAppid": {"$ne": ""}}},
                doc! {"$group": {
                    "_id": {"period": trunc("$timestamp", "minute"), "cmd": "$dims.vCmdid"},
                    "total": {"$sum": "$totalCount"},
                }},
            ],
        ),
    ]
}
