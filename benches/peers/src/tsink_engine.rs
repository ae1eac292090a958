//! tsink: a metrics store, one series per (series, field) with the meta values as labels.
//! It has per-series downsampling and aggregation but no grouping across series; where a query
//! groups across series, the harness combines per-series results (or raw points) in Rust.

use crate::answer::Answer;
use crate::engine::{unknown, Engine, Res};
use crate::workload::{DevopsParams, Workload, HOUR_MS, MINUTE_MS};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tsbucket::bson::{Bson, Document};
use tsbucket_workload::devops::FIELDS;
use tsink::{
    Aggregation, DataPoint, Label, MetricSeries, QueryOptions, Row, SeriesMatcher, SeriesSelection,
    Storage, StorageBuilder, TimestampPrecision, Value, WalSyncMode,
};

/// tsink storage in `dir`.
pub struct Tsink {
    dir: PathBuf,
    sync: WalSyncMode,
    storage: Option<Arc<dyn Storage>>,
    work: Workload,
    /// Seed 004: (combination, period) -> rows seen, to give repeated rows distinct times.
    seen: HashMap<String, (i64, i64)>,
}

fn value(v: Option<&Bson>) -> Option<Value> {
    match v {
        Some(Bson::Int32(i)) => Some(Value::I64(i64::from(*i))),
        Some(Bson::Int64(i)) => Some(Value::I64(*i)),
        Some(Bson::Double(f)) => Some(Value::F64(*f)),
        _ => None,
    }
}

fn num(p: &DataPoint) -> f64 {
    p.value_as_f64().unwrap_or(0.0)
}

impl Tsink {
    /// Opens the storage; `sync` is tsink's default `PerAppend` (fsync per write) unless relaxed.
    pub fn create(dir: PathBuf, work: &Workload, sync: WalSyncMode) -> Res<Tsink> {
        let mut t = Tsink {
            dir,
            sync,
            storage: None,
            work: work.clone(),
            seen: HashMap::new(),
        };
        t.open()?;
        Ok(t)
    }

    fn open(&mut self) -> Res<()> {
        // Retention is not enforced unless asked for, so 2015/2016 timestamps are kept.
        let s = StorageBuilder::new()
            .with_data_path(&self.dir)
            .with_timestamp_precision(TimestampPrecision::Milliseconds)
            .with_wal_sync_mode(self.sync)
            .build()?;
        self.storage = Some(s);
        Ok(())
    }

    fn storage(&self) -> Res<&Arc<dyn Storage>> {
        self.storage.as_ref().ok_or_else(|| "tsink: closed".into())
    }

    fn rows(&mut self, docs: &[Document]) -> Res<Vec<Row>> {
        let mut rows = Vec::with_capacity(docs.len() * 10);
        match &self.work {
            Workload::Devops(_) => {
                for d in docs {
                    let t = d.get_datetime("time")?.timestamp_millis();
                    let labels: Vec<Label> = d
                        .get_document("tags")?
                        .iter()
                        .map(|(k, v)| Label::new(k, v.as_str().unwrap_or_default()))
                        .collect();
                    for f in FIELDS {
                        if let Some(v) = value(d.get(f)) {
                            rows.push(Row::with_labels(f, labels.clone(), DataPoint::new(t, v)));
                        }
                    }
                }
            }
            Workload::Seed004(_) => {
                for d in docs {
                    let period = d.get_datetime("timestamp")?.timestamp_millis();
                    let dims = d.get_document("dims")?;
                    let result = dims.get_i32("iResult")?.to_string();
                    let cmd = dims.get_str("vCmdid")?;
                    let app = dims.get_str("vAppid")?;
                    // A series holds one value per timestamp (a later one replaces an earlier
                    // one), but seed 004 has several rows per combination and period: the k-th
                    // such row is stored k ms into its period, which stays inside the minute.
                    let key = format!("{result}\0{cmd}\0{app}");
                    let e = self.seen.entry(key).or_insert((period, 0));
                    if e.0 != period {
                        *e = (period, 0);
                    }
                    let t = period + e.1;
                    e.1 += 1;
                    let labels = vec![
                        Label::new("iResult", result),
                        Label::new("vCmdid", cmd),
                        Label::new("vAppid", app),
                    ];
                    for f in ["totalCount", "dProcessTime"] {
                        if let Some(v) = value(d.get(f)) {
                            rows.push(Row::with_labels(f, labels.clone(), DataPoint::new(t, v)));
                        }
                    }
                }
            }
        }
        Ok(rows)
    }

    /// The series of `metric` whose labels match.
    fn series(&self, metric: &str, matchers: Vec<SeriesMatcher>) -> Res<Vec<MetricSeries>> {
        let sel = SeriesSelection::new()
            .with_metric(metric)
            .with_matchers(matchers);
        Ok(self.storage()?.select_series(&sel)?)
    }

    /// One series downsampled: (bucket start, value) points.
    fn downsample(
        &self,
        s: &MetricSeries,
        (lo, hi): (i64, i64),
        interval: i64,
        agg: Aggregation,
    ) -> Res<Vec<DataPoint>> {
        let opts = QueryOptions::new(lo, hi)
            .with_labels(s.labels.clone())
            .with_downsample(interval, agg);
        Ok(self.storage()?.select_with_options(&s.name, opts)?)
    }

    fn devops(&self, cfg: &tsbucket_workload::Devops, name: &str) -> Res<Answer> {
        let p = DevopsParams::new(cfg);
        let host = || vec![SeriesMatcher::equal("hostname", p.host.clone())];
        match name {
            "cpu-max-all-1" => {
                let mut hours = BTreeMap::new();
                for f in FIELDS {
                    for s in self.series(f, host())? {
                        for pt in self.downsample(&s, p.eight_hours(), HOUR_MS, Aggregation::Max)? {
                            *hours.entry(pt.timestamp).or_insert(0.0) += num(&pt);
                        }
                    }
                }
                Ok(Answer {
                    rows: hours.len() as u64,
                    total: hours.values().sum(),
                })
            }
            "double-groupby-1" => {
                let mut a = Answer::default();
                for s in self.series("usage_user", vec![])? {
                    for pt in self.downsample(&s, p.twelve_hours(), HOUR_MS, Aggregation::Avg)? {
                        a.rows += 1;
                        a.total += num(&pt);
                    }
                }
                Ok(a)
            }
            "high-cpu-all" => {
                let (lo, hi) = p.twelve_hours();
                let all = self.storage()?.select_all("usage_user", lo, hi)?;
                let n = all
                    .iter()
                    .flat_map(|(_, pts)| pts)
                    .filter(|pt| num(pt) > 90.0)
                    .count();
                Ok(Answer::count(n as u64))
            }
            "lastpoint" => {
                let mut hosts: HashMap<String, f64> = HashMap::new();
                for f in FIELDS {
                    for s in self.series(f, vec![])? {
                        let opts = QueryOptions::new(0, i64::MAX)
                            .with_labels(s.labels.clone())
                            .with_aggregation(Aggregation::Last);
                        let pts = self.storage()?.select_with_options(f, opts)?;
                        let h = s
                            .labels
                            .iter()
                            .find(|l| l.name == "hostname")
                            .map(|l| l.value.clone())
                            .unwrap_or_default();
                        *hosts.entry(h).or_insert(0.0) += pts.iter().map(num).sum::<f64>();
                    }
                }
                Ok(Answer {
                    rows: hosts.len() as u64,
                    total: hosts.values().sum(),
                })
            }
            "single-groupby-1-1-1" => {
                let mut a = Answer::default();
                for s in self.series("usage_user", host())? {
                    for pt in self.downsample(&s, p.hour, MINUTE_MS, Aggregation::Max)? {
                        a.rows += 1;
                        a.total += num(&pt);
                    }
                }
                Ok(a)
            }
            "find-host-hour" => {
                // The host's ten series, joined on time into measurements.
                let sel = SeriesSelection::new()
                    .with_matcher(SeriesMatcher::equal("hostname", p.host.clone()));
                let series = self.storage()?.select_series(&sel)?;
                let (lo, hi) = p.first_hour;
                let mut rows: BTreeMap<i64, [f64; 10]> = BTreeMap::new();
                for sp in self.storage()?.select_many(&series, lo, hi)? {
                    let Some(i) = FIELDS.iter().position(|f| *f == sp.series.name) else {
                        continue;
                    };
                    for pt in &sp.points {
                        rows.entry(pt.timestamp).or_insert([0.0; 10])[i] = num(pt);
                    }
                }
                Ok(Answer {
                    rows: rows.len() as u64,
                    total: rows.values().flatten().sum(),
                })
            }
            _ => Err(unknown("tsink", name)),
        }
    }

    fn seed004(&self, name: &str) -> Res<Answer> {
        let (lo, hi) = (0, i64::MAX);
        match name {
            "count-per-period" => {
                let mut periods: BTreeMap<i64, u64> = BTreeMap::new();
                for (_, pts) in self.storage()?.select_all("totalCount", lo, hi)? {
                    for pt in pts {
                        *periods
                            .entry(pt.timestamp.div_euclid(MINUTE_MS))
                            .or_insert(0) += 1;
                    }
                }
                Ok(Answer {
                    rows: periods.len() as u64,
                    total: periods.values().sum::<u64>() as f64,
                })
            }
            "sum-per-period-cmd" => {
                let series =
                    self.series("totalCount", vec![SeriesMatcher::not_equal("vAppid", "")])?;
                let mut groups: HashMap<(i64, String), f64> = HashMap::new();
                for sp in self.storage()?.select_many(&series, lo, hi)? {
                    let cmd = sp
                        .series
                        .labels
                        .iter()
                        .find(|l| l.name == "vCmdid")
                        .map(|l| l.value.clone())
                        .unwrap_or_default();
                    for pt in &sp.points {
                        *groups
                            .entry((pt.timestamp.div_euclid(MINUTE_MS), cmd.clone()))
                            .or_insert(0.0) += num(pt);
                    }
                }
                Ok(Answer {
                    rows: groups.len() as u64,
                    total: groups.values().sum(),
                })
            }
            _ => Err(unknown("tsink", name)),
        }
    }
}

impl Engine for Tsink {
    fn name(&self) -> &'static str {
        "tsink"
    }

    fn insert(&mut self, docs: &[Document]) -> Res<Duration> {
        let rows = self.rows(docs)?;
        let s = self.storage()?;
        let t = Instant::now();
        s.insert_rows(&rows)?;
        Ok(t.elapsed())
    }

    fn close(&mut self) -> Res<Duration> {
        let s = self.storage.take().ok_or("tsink: closed twice")?;
        let t = Instant::now();
        s.close()?;
        Ok(t.elapsed())
    }

    fn reopen(&mut self) -> Res<Duration> {
        let t = Instant::now();
        self.open()?;
        Ok(t.elapsed())
    }

    fn query(&mut self, name: &str) -> Res<Answer> {
        match self.work.clone() {
            Workload::Devops(cfg) => self.devops(&cfg, name),
            Workload::Seed004(_) => self.seed004(name),
        }
    }

    fn note(&self, name: &str) -> Option<&'static str> {
        Some(match name {
            "cpu-max-all-1" => {
                "series lookup + per-series 1 h Max downsample, 10 series merged in Rust"
            }
            "double-groupby-1" => "per-series 1 h Avg downsample over every host's series",
            "high-cpu-all" => "select_all raw points, filter and count in Rust",
            "lastpoint" => {
                "per-series Last aggregation (10 x hosts calls), grouped by host in Rust"
            }
            "single-groupby-1-1-1" => "series lookup + 1 min Max downsample",
            "find-host-hour" => "select_many of the host's 10 series, joined on time in Rust",
            "count-per-period" => "select_all raw points, counted per minute in Rust",
            "sum-per-period-cmd" => {
                "series matcher vAppid!=\"\", select_many, summed per (minute, vCmdid) in Rust"
            }
            _ => return None,
        })
    }
}
