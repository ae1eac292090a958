//! tsbucket: one time-series collection, the crate's aggregation pipelines as they are.

use crate::answer::Answer;
use crate::engine::{unknown, Engine, Res};
use crate::workload::{DevopsParams, Workload};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use tsbucket::bson::{doc, DateTime, Document};
use tsbucket::{Collection, Database, DbOptions, Granularity, SyncMode, TimeseriesOptions};
use tsbucket_workload::queries::{devops_queries, seed004_queries};

/// tsbucket with one collection holding the workload.
pub struct Tsbucket {
    dir: PathBuf,
    opts: DbOptions,
    db: Option<Database>,
    coll: Option<Collection>,
    work: Workload,
    pipelines: Vec<(&'static str, Vec<Document>)>,
}

const NAME: &str = "coll";

impl Tsbucket {
    /// Creates the database in `dir`; `sync` is tsbucket's default `Always` unless relaxed.
    pub fn create(dir: PathBuf, work: &Workload, sync: SyncMode) -> Res<Tsbucket> {
        let opts = DbOptions::default().sync(sync);
        let db = Database::open_with(&dir, opts.clone())?;
        let (coll_opts, pipelines) = match work {
            Workload::Devops(cfg) => (
                TimeseriesOptions::new("time")
                    .meta_field("tags")
                    .granularity(Granularity::Seconds),
                devops_queries(cfg),
            ),
            Workload::Seed004(_) => (
                TimeseriesOptions::new("timestamp").meta_field("dims"),
                seed004_queries(),
            ),
        };
        let coll = db.create_collection(NAME, coll_opts)?;
        Ok(Tsbucket {
            dir,
            opts,
            db: Some(db),
            coll: Some(coll),
            work: work.clone(),
            pipelines,
        })
    }

    fn coll(&self) -> Res<&Collection> {
        self.coll.as_ref().ok_or_else(|| "tsbucket: closed".into())
    }
}

impl Engine for Tsbucket {
    fn name(&self) -> &'static str {
        "tsbucket"
    }

    fn insert(&mut self, docs: &[Document]) -> Res<Duration> {
        let coll = self.coll()?;
        let t = Instant::now();
        coll.insert_many(docs)?;
        Ok(t.elapsed())
    }

    fn close(&mut self) -> Res<Duration> {
        self.coll = None;
        let db = self.db.take().ok_or("tsbucket: closed twice")?;
        let t = Instant::now();
        db.flush()?;
        db.close()?;
        Ok(t.elapsed())
    }

    fn reopen(&mut self) -> Res<Duration> {
        let t = Instant::now();
        let db = Database::open_with(&self.dir, self.opts.clone())?;
        let coll = db.collection(NAME)?;
        let took = t.elapsed();
        self.db = Some(db);
        self.coll = Some(coll);
        Ok(took)
    }

    fn query(&mut self, name: &str) -> Res<Answer> {
        let coll = self.coll()?;
        if name == "find-host-hour" {
            let Workload::Devops(cfg) = &self.work else {
                return Err(unknown("tsbucket", name));
            };
            let p = DevopsParams::new(cfg);
            let (lo, hi) = p.first_hour;
            let filter = doc! {
                "tags.hostname": &p.host,
                "time": {"$gte": DateTime::from_millis(lo), "$lt": DateTime::from_millis(hi)},
            };
            let docs = coll.find(filter)?.collect::<tsbucket::Result<Vec<_>>>()?;
            return Ok(Answer::of_documents(&docs));
        }
        let pipeline = self
            .pipelines
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, p)| p.clone())
            .ok_or_else(|| unknown("tsbucket", name))?;
        let docs = coll
            .aggregate(pipeline)?
            .collect::<tsbucket::Result<Vec<_>>>()?;
        if name == "high-cpu-all" {
            // `$count` yields no document at all when nothing matches.
            let n = docs
                .first()
                .and_then(|d| d.get("n"))
                .and_then(crate::answer::number)
                .unwrap_or(0.0);
            return Ok(Answer::count(n as u64));
        }
        Ok(Answer::of_documents(&docs))
    }

    fn note(&self, _name: &str) -> Option<&'static str> {
        None
    }
}
