//! A collection's reads: planning a filter against the collection's state, then running the
//! find, count, aggregation or bucket listing over what it selected, outside the state lock.

use super::Engine;
use crate::catalog::CatalogStats;
use crate::collstate::CollState;
use crate::error::{Error, Result};
use crate::manifest::MANIFEST_FILE;
use crate::options::TimeseriesOptions;
use crate::query::cursor::{FindSpec, Output};
use crate::query::execute;
use crate::query::options::{parse_sort, Projection};
use crate::query::pipeline::Pipeline;
use crate::query::rewrite::rewrite;
use crate::query::select::{count, load, select, select_in, Cursor, Explain, Plan, Scans};
use crate::query::sort::SortMemory;
use crate::query::unpack::raw_bucket;
use crate::query::{Filter, FindOptions};
use bson::Document;

/// Storage figures of a collection.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CollStats {
    /// Measurements stored (segments and memory).
    pub measurements: u64,
    /// Buckets (segments and memory).
    pub buckets: u64,
    /// Buckets held in segment files.
    pub flushed_buckets: u64,
    /// Open buckets in the catalog (gauge), set-aside ones included.
    pub open_buckets: u64,
    /// Of the open buckets, those set aside for late measurements because time moved past
    /// them (MongoDB's archived buckets; gauge).
    pub archived_buckets: u64,
    /// Closed buckets still in memory, waiting for the flusher (gauge).
    pub unflushed_buckets: u64,
    /// Approximate memory held by the collection's bucket catalog: open buckets and closed
    /// ones awaiting a flush, in bytes (gauge; the limit is `DbOptions::catalog_memory_limit`).
    pub catalog_memory_bytes: u64,
    /// Measurements per bucket over all buckets (0 when there are none).
    pub avg_measurements_per_bucket: f64,
    /// Segment bytes per flushed bucket, MongoDB's `avgBucketSize` (0 when none is flushed).
    pub avg_bucket_bytes: u64,
    /// Segment files of the collection.
    pub segments: u64,
    /// Bytes of this collection's segment files.
    pub segment_bytes: u64,
    /// Bytes of the database's log records, file headers included (shared by all collections).
    pub wal_bytes: u64,
    /// Bytes the log keeps on disk for reuse, not counted in `bytes_on_disk`: reclaimed log
    /// files kept as spares (`DbOptions::wal_spare_files`) and zeros written ahead of the
    /// records (shared by all collections).
    pub wal_spare_bytes: u64,
    /// Bytes of the manifest (shared by all collections).
    pub manifest_bytes: u64,
    /// `segment_bytes + wal_bytes + manifest_bytes`.
    pub bytes_on_disk: u64,
    /// BSON size of the stored measurements as they were inserted (each document's length,
    /// `_id` included), segments and memory. Buckets of segment files written before sizes
    /// were recorded (segment directory version 3) count 0; see `unsized_buckets`.
    pub bson_bytes: u64,
    /// Flushed buckets whose inserted BSON size is unknown (read from segment files of an
    /// older version); 0 for data written by this version.
    pub unsized_buckets: u64,
    /// Compression ratio of the flushed data: the BSON size of the measurements held in
    /// segments divided by `segment_bytes`. Segment bytes include buckets that TTL has
    /// already removed from the collection but whose file is still shared with live ones,
    /// so the ratio never flatters. 0 when nothing is flushed or `unsized_buckets > 0`.
    pub compression_ratio: f64,
    /// Bucket catalog counters.
    pub catalog: CatalogStats,
}

impl Engine {
    /// The threads a read may use (see [`crate::DbOptions::query_threads`]).
    pub(crate) fn query_threads(&self) -> usize {
        crate::query::parallel::allowed(self.opts.query_threads)
    }

    pub(crate) fn with_coll<R>(
        &self,
        id: u32,
        name: &str,
        f: impl FnOnce(&CollState) -> R,
    ) -> Result<R> {
        self.check_open()?;
        let st = self.state.read();
        st.colls
            .get(&id)
            .map(f)
            .ok_or_else(|| Error::NamespaceNotFound(name.to_string()))
    }

    /// See [`crate::Collection::options`].
    pub(crate) fn coll_options(&self, id: u32, name: &str) -> Result<TimeseriesOptions> {
        self.with_coll(id, name, |c| c.entry.options.clone())
    }

    pub(crate) fn plan(
        &self,
        id: u32,
        name: &str,
        filter: &Document,
    ) -> Result<(Plan, Scans, Explain)> {
        let f = Filter::parse(filter)?;
        self.with_coll(id, name, |c| {
            let s = c.schema();
            let plan = Plan::new(f, s.time(), s.meta());
            let (sources, ex) = select(c, &plan);
            (plan, sources, ex)
        })
    }

    /// What a sort may hold in memory, and where it writes sorted runs.
    fn sort_memory(&self) -> SortMemory {
        SortMemory {
            limit: self.opts.sort_memory_limit,
            dir: Some(self.path().to_path_buf()),
        }
    }

    /// See [`crate::Collection::find`].
    pub(crate) fn find(&self, id: u32, name: &str, filter: Document) -> Result<Cursor> {
        let (plan, sources, _) = self.plan(id, name, &filter)?;
        Ok(Cursor::new(sources, plan, self.query_threads()))
    }

    /// See [`crate::Collection::find_with`].
    pub(crate) fn find_with(
        &self,
        id: u32,
        name: &str,
        filter: Document,
        options: FindOptions,
    ) -> Result<Cursor> {
        let projection = options
            .projection
            .as_ref()
            .filter(|p| !p.is_empty())
            .map(Projection::parse)
            .transpose()?;
        let sort = options
            .sort
            .as_ref()
            .map(parse_sort)
            .transpose()?
            .unwrap_or_default();
        let limit = match options.limit {
            None | Some(0) => None,
            Some(l) => Some(l.unsigned_abs()),
        };
        let spec = FindSpec {
            projection,
            sort,
            skip: options.skip.unwrap_or(0),
            limit,
            memory: self.sort_memory(),
            threads: self.query_threads(),
        };
        let (plan, sources, _) = self.plan(id, name, &filter)?;
        Cursor::find(sources, plan, spec)
    }

    /// See [`crate::Collection::count_documents`].
    pub(crate) fn count_documents(&self, id: u32, name: &str, filter: Document) -> Result<u64> {
        if filter.is_empty() {
            return self.with_coll(id, name, |c| {
                let seg: u64 = c.segment_buckets().map(|b| u64::from(b.count)).sum();
                let mem: u64 = c
                    .flushing
                    .iter()
                    .chain(c.catalog.closed().iter())
                    .map(|b| u64::from(b.count()))
                    .sum::<u64>();
                seg + mem + c.catalog.open_measurements()
            });
        }
        let (plan, sources, _) = self.plan(id, name, &filter)?;
        count(&sources, &plan, self.query_threads())
    }

    /// See [`crate::Collection::explain`].
    pub(crate) fn explain(&self, id: u32, name: &str, filter: Document) -> Result<Explain> {
        Ok(self.plan(id, name, &filter)?.2)
    }

    pub(crate) fn run_pipeline(
        &self,
        id: u32,
        name: &str,
        pipeline: &[Document],
        columnar: bool,
    ) -> Result<(Output, Explain)> {
        let mut p = Pipeline::parse(pipeline)?;
        let threads = self.query_threads();
        let (plan, route, scans, ex, rewrites) = self.with_coll(id, name, |c| {
            let s = c.schema();
            // The unpacked path is the reference the rewrites are checked against: it runs the
            // pipeline as written.
            let rewrites = match columnar {
                true => rewrite(&mut p, s.time()),
                false => Vec::new(),
            };
            let plan = Plan::new(p.filter.clone(), s.time(), s.meta());
            let route = execute::Route::of(&plan, &p.stages, columnar);
            let (scans, ex) = select_in(c, &plan, route.order(), threads);
            (plan, route, scans, ex, rewrites)
        })?;
        let memory = self.sort_memory();
        let (out, mut ex) = execute::execute(scans, ex, plan, &p.stages, route, threads, &memory)?;
        ex.rewrites = rewrites;
        Ok((out, ex))
    }

    /// See [`crate::Collection::buckets`].
    pub(crate) fn buckets(&self, id: u32, name: &str, filter: Document) -> Result<Vec<Document>> {
        let f = Filter::parse(&filter)?;
        let (time_field, sources) = self.with_coll(id, name, |c| {
            let s = c.schema();
            let all = Plan::new(Filter::True, s.time(), s.meta());
            (s.time().to_string(), select(c, &all).0)
        })?;
        let mut out = Vec::new();
        for s in sources.iter() {
            let b = load(&s.src)?;
            let raw = raw_bucket(&b, &time_field);
            if f.matches(&raw) {
                out.push(raw);
            }
        }
        out.sort_by(|a, b| {
            let id = |d: &Document| d.get_object_id("_id").map(|o| o.bytes()).unwrap_or([0; 12]);
            id(a).cmp(&id(b))
        });
        Ok(out)
    }

    /// See [`crate::Collection::stats`].
    pub(crate) fn stats(&self, id: u32, name: &str) -> Result<CollStats> {
        let wal_bytes = self.wal_log_bytes();
        let wal_spare_bytes = self.wal_spare_bytes();
        let manifest_bytes = self
            .vfs
            .file_len(&self.path.join(MANIFEST_FILE))
            .unwrap_or(0);
        let mut s = self.with_coll(id, name, |c| {
            let mut s = CollStats::default();
            for seg in c.segments.values() {
                s.segments += 1;
                s.segment_bytes += seg.len_bytes();
            }
            let mut flushed_bson = 0;
            for b in c.segment_buckets() {
                s.flushed_buckets += 1;
                s.measurements += u64::from(b.count);
                match b.bson_bytes {
                    Some(n) => flushed_bson += n,
                    None => s.unsized_buckets += 1,
                }
            }
            if s.unsized_buckets == 0 && s.segment_bytes > 0 {
                s.compression_ratio = flushed_bson as f64 / s.segment_bytes as f64;
            }
            s.bson_bytes = flushed_bson + c.catalog.open_bson_bytes();
            s.open_buckets = c.catalog.open_buckets() as u64;
            s.archived_buckets = c.catalog.archived_buckets() as u64;
            s.catalog_memory_bytes = (c.catalog.memory() + 2 * c.catalog.closed_bytes()) as u64;
            for b in c.flushing.iter().chain(c.catalog.closed().iter()) {
                s.buckets += 1;
                s.unflushed_buckets += 1;
                s.measurements += u64::from(b.count());
                s.bson_bytes += b.bson_bytes();
            }
            s.buckets += s.open_buckets;
            s.measurements += c.catalog.open_measurements();
            s.buckets += s.flushed_buckets;
            s.catalog = c.catalog.stats().clone();
            s
        })?;
        s.wal_bytes = wal_bytes;
        s.wal_spare_bytes = wal_spare_bytes;
        s.manifest_bytes = manifest_bytes;
        s.bytes_on_disk = s.segment_bytes + wal_bytes + manifest_bytes;
        if s.buckets > 0 {
            s.avg_measurements_per_bucket = s.measurements as f64 / s.buckets as f64;
        }
        s.avg_bucket_bytes = s.segment_bytes.checked_div(s.flushed_buckets).unwrap_or(0);
        Ok(s)
    }
}
