//! A handle to one time-series collection: inserts and reads.

use crate::catalog::CatalogStats;
use crate::engine::rewrite::segments::BucketAction;
use crate::engine::rewrite::{DeleteResult, UpdateResult};
use crate::engine::{catalog_stats, DbInner};
use crate::error::{Error, Result};
use crate::ingest::Batch;
use crate::ingest::{prepare_batch, prepare_raw_batch, Fields, Prepared};
use crate::manifest::MANIFEST_FILE;
use crate::options::TimeseriesOptions;
use crate::query::agg;
use crate::query::cursor::FindSpec;
use crate::query::options::{parse_sort, Projection};
use crate::query::pipeline::Pipeline;
use crate::query::read::{count, load, select, select_in, Cursor, Explain, Plan, Scans};
use crate::query::unpack::raw_bucket;
use crate::query::{Filter, FindOptions};
use bson::raw::RawDocumentBuf;
use bson::{Bson, Document};
use std::sync::Arc;

/// Result of [`Collection::insert_one`].
#[derive(Debug, Clone, PartialEq)]
pub struct InsertOneResult {
    /// The measurement's `_id` (generated when it had none).
    pub inserted_id: Bson,
}

/// Result of [`Collection::insert_many`].
#[derive(Debug, Clone, PartialEq)]
pub struct InsertManyResult {
    /// Measurements inserted.
    pub inserted_count: u64,
    /// Their `_id`s, in batch order.
    pub inserted_ids: Vec<Bson>,
}

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

/// A time-series collection. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Collection {
    db: Arc<DbInner>,
    name: String,
    id: u32,
}

impl std::fmt::Debug for Collection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collection")
            .field("name", &self.name)
            .finish()
    }
}

impl Collection {
    pub(crate) fn new(db: Arc<DbInner>, name: String, id: u32) -> Collection {
        Collection { db, name, id }
    }

    /// The collection's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The collection's options.
    pub fn options(&self) -> Result<TimeseriesOptions> {
        self.with_state(|c| c.entry.options.clone())
    }

    /// The threads a read may use (see [`crate::DbOptions::query_threads`]).
    fn query_threads(&self) -> usize {
        crate::query::parallel::allowed(self.db.opts.query_threads)
    }

    fn with_state<R>(&self, f: impl FnOnce(&crate::engine::CollState) -> R) -> Result<R> {
        self.db.check_open()?;
        let st = self.db.state.read();
        st.colls
            .get(&self.id)
            .map(f)
            .ok_or_else(|| Error::NamespaceNotFound(self.name.clone()))
    }

    /// Inserts one measurement.
    pub fn insert_one(&self, doc: &Document) -> Result<InsertOneResult> {
        let r = self.insert_many(std::slice::from_ref(doc))?;
        Ok(InsertOneResult {
            inserted_id: r.inserted_ids.into_iter().next().unwrap_or(Bson::Null),
        })
    }

    /// Inserts a batch atomically: every document is validated first, and a bad one fails the
    /// whole batch with `Error::InvalidDocument` naming its index, with nothing written. Returns
    /// once the batch is durable (per the database's sync mode) and visible to reads.
    pub fn insert_many(&self, docs: &[Document]) -> Result<InsertManyResult> {
        self.db.check_writable()?;
        let f = self.insert_fields()?;
        let fields = Fields {
            time: &f.time,
            meta: f.meta.as_deref(),
        };
        let (prepared, payload, inserted_ids) = prepare_batch(self.id, docs, &fields)?;
        self.append_prepared(prepared, payload, inserted_ids)
    }

    /// [`Collection::insert_many`] for documents that are already BSON bytes (for instance
    /// received off the wire), without building `Document`s. The same validation applies, and
    /// malformed bytes anywhere in a document are `Error::InvalidDocument`.
    pub fn insert_many_raw(&self, docs: &[RawDocumentBuf]) -> Result<InsertManyResult> {
        self.db.check_writable()?;
        let f = self.insert_fields()?;
        let fields = Fields {
            time: &f.time,
            meta: f.meta.as_deref(),
        };
        let (prepared, payload, inserted_ids) = prepare_raw_batch(self.id, docs, &fields)?;
        self.append_prepared(prepared, payload, inserted_ids)
    }

    /// Read apart from the shared state, so that an insert does not wait for the applier.
    fn insert_fields(&self) -> Result<Arc<crate::engine::InsertFields>> {
        self.db
            .insert_fields(self.id)
            .ok_or_else(|| Error::NamespaceNotFound(self.name.clone()))
    }

    fn append_prepared(
        &self,
        prepared: Vec<Prepared>,
        payload: Vec<u8>,
        inserted_ids: Vec<Bson>,
    ) -> Result<InsertManyResult> {
        if payload.len() > self.db.opts.max_batch_bytes {
            return Err(Error::BadValue(format!(
                "the batch encodes to {} bytes, over the limit of {}; split it",
                payload.len(),
                self.db.opts.max_batch_bytes
            )));
        }
        let n = prepared.len() as u64;
        if n > 0 {
            let batch = Batch {
                collection_id: self.id,
                docs: prepared,
            };
            self.db.append(payload, batch)?;
        }
        Ok(InsertManyResult {
            inserted_count: n,
            inserted_ids,
        })
    }

    fn plan(&self, filter: &Document) -> Result<(Plan, Scans, Explain)> {
        let f = Filter::parse(filter)?;
        self.with_state(|c| {
            let o = &c.entry.options;
            let plan = Plan::new(f, o.get_time_field(), o.get_meta_field());
            let (sources, ex) = select(c, &plan);
            (plan, sources, ex)
        })
    }

    /// Measurements matching `filter`, exactly as inserted.
    pub fn find(&self, filter: Document) -> Result<Cursor> {
        let (plan, sources, _) = self.plan(&filter)?;
        Ok(Cursor::new(sources, plan))
    }

    /// [`Collection::find`] with projection, sort, skip and limit. Only the columns the
    /// filter, projection and sort read are decoded. A sort on the time field alone streams
    /// buckets in time order, so with a limit only the buckets that can hold the first rows
    /// are read; other sorts read every match.
    pub fn find_with(&self, filter: Document, options: FindOptions) -> Result<Cursor> {
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
        };
        let (plan, sources, _) = self.plan(&filter)?;
        Cursor::find(sources, plan, spec)
    }

    /// Number of measurements matching `filter`. Buckets whose statistics prove every row
    /// matches count by their `control.count` without being read; the others decode only the
    /// columns the filter reads.
    pub fn count_documents(&self, filter: Document) -> Result<u64> {
        if filter.is_empty() {
            return self.with_state(|c| {
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
        let (plan, sources, _) = self.plan(&filter)?;
        count(&sources, &plan, self.query_threads())
    }

    /// How a read with `filter` would be carried out.
    pub fn explain(&self, filter: Document) -> Result<Explain> {
        Ok(self.plan(&filter)?.2)
    }

    /// Runs an aggregation pipeline (`$match $project $group $sort $skip $limit $count`).
    /// The leading `$match` stages select buckets as [`Collection::find`] does; a `$group` on
    /// meta and time is computed from bucket statistics and typed columns, without unpacking
    /// measurements, where its shape allows. Unsupported stages, operators or expressions are
    /// `Error::BadValue`.
    pub fn aggregate(&self, pipeline: Vec<Document>) -> Result<Cursor> {
        Ok(Cursor::from_output(self.run_pipeline(&pipeline, true)?.0))
    }

    /// How the pipeline's scan is carried out: buckets in all, pruned, taken whole, unpacked,
    /// and answered from their statistics alone. The pipeline runs to find out, since which
    /// buckets can be skipped may depend on those already read.
    pub fn explain_aggregate(&self, pipeline: Vec<Document>) -> Result<Explain> {
        Ok(self.run_pipeline(&pipeline, true)?.1)
    }

    /// [`Collection::aggregate`] with every stage evaluated over unpacked measurements: the
    /// reference the columnar path is checked against.
    #[doc(hidden)]
    pub fn aggregate_unpacked(&self, pipeline: Vec<Document>) -> Result<Cursor> {
        Ok(Cursor::from_output(self.run_pipeline(&pipeline, false)?.0))
    }

    fn run_pipeline(
        &self,
        pipeline: &[Document],
        columnar: bool,
    ) -> Result<(agg::Output, Explain)> {
        let p = Pipeline::parse(pipeline)?;
        let threads = self.query_threads();
        let (plan, route, scans, ex) = self.with_state(|c| {
            let o = &c.entry.options;
            let plan = Plan::new(p.filter.clone(), o.get_time_field(), o.get_meta_field());
            let route = agg::Route::of(&plan, &p.stages, columnar);
            let (scans, ex) = select_in(c, &plan, route.order(), threads);
            (plan, route, scans, ex)
        })?;
        agg::execute(scans, ex, plan, &p.stages, route, threads)
    }

    /// Raw buckets in MongoDB's bucket-collection schema, filtered by `filter` applied to the
    /// bucket documents themselves (e.g. `{"control.count": {"$gt": 10}}`).
    pub fn buckets(&self, filter: Document) -> Result<Vec<Document>> {
        let f = Filter::parse(&filter)?;
        let (time_field, sources) = self.with_state(|c| {
            let o = &c.entry.options;
            let all = Plan::new(Filter::True, o.get_time_field(), o.get_meta_field());
            (o.get_time_field().to_string(), select(c, &all).0)
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

    /// Updates the meta value of every measurement whose meta matches `filter`, under MongoDB's
    /// legacy time-series rules: the filter may read only the meta field (or its subfields)
    /// and `update` must be an operator document (`$set $unset $rename $inc $mul $min $max`)
    /// that changes only the meta field; anything else is refused with `InvalidOptions` (72)
    /// or `BadValue` before anything changes. Whole buckets are updated; counts are of
    /// measurements. Durable and atomic once it returns: a crash leaves it done or not done.
    pub fn update_many(&self, filter: Document, update: Document) -> Result<UpdateResult> {
        let opts = self.options()?;
        let meta = opts.get_meta_field();
        let f = crate::engine::rewrite::rules::update_filter(&filter, meta)?;
        let u = crate::engine::rewrite::update::MetaUpdate::parse(&update, meta)?;
        let counts =
            crate::engine::rewrite::apply_to_buckets(&self.db, self.id, &self.name, |meta| {
                if !f.matches(meta) {
                    return Ok(None);
                }
                let new = u.apply(meta)?;
                Ok(Some(if new.as_ref() == meta {
                    BucketAction::Keep
                } else {
                    BucketAction::SetMeta(new)
                }))
            })?;
        Ok(UpdateResult {
            matched_count: counts.matched,
            modified_count: counts.changed,
        })
    }

    /// Deletes every measurement whose meta matches `filter` (which may read only the meta
    /// field; on a collection without one, only `{}`, which deletes everything), whole
    /// buckets at a time. Segment files left without buckets are deleted and partly affected
    /// ones rewritten, so the space comes back. Atomic and durable like
    /// [`Collection::update_many`].
    pub fn delete_many(&self, filter: Document) -> Result<DeleteResult> {
        let opts = self.options()?;
        let f = crate::engine::rewrite::rules::delete_filter(&filter, opts.get_meta_field())?;
        let counts =
            crate::engine::rewrite::apply_to_buckets(&self.db, self.id, &self.name, |meta| {
                Ok(f.matches(meta).then_some(BucketAction::Drop))
            })?;
        Ok(DeleteResult {
            deleted_count: counts.changed,
        })
    }

    /// An update statement in the shape of MongoDB's `update` command, `{q, u, multi,
    /// upsert}`, run under the rules of [`Collection::update_many`]. Since `multi` defaults to
    /// false in MongoDB it must be given as `true`: a non-multi update, an upsert and a
    /// pipeline `u` are refused with `InvalidOptions` (72), as MongoDB refuses them on a
    /// time-series collection, before anything changes.
    pub fn update(&self, statement: Document) -> Result<UpdateResult> {
        let opts = self.options()?;
        let s = crate::engine::rewrite::statement::parse_update(&statement, opts.get_meta_field())?;
        self.update_many(s.filter, s.update)
    }

    /// A delete statement in the shape of MongoDB's `delete` command, `{q, limit}`, run as
    /// [`Collection::delete_many`]. `limit` must be 0: a limit of 1 (a non-multi delete) is
    /// refused with `Unsupported` (MongoDB's IllegalOperation, 20) before anything changes.
    pub fn delete(&self, statement: Document) -> Result<DeleteResult> {
        let filter = crate::engine::rewrite::statement::parse_delete(&statement)?;
        self.delete_many(filter)
    }

    /// Creates a secondary index on `keys` (time field, meta field or meta subfields,
    /// measurement fields; `1` ascending, `-1` descending; compound allowed) and returns its
    /// name, e.g. `"metadata.sensorId_1_timestamp_1"`. Creating an identical index again is a
    /// no-op. Unique, text, hashed, geo and wildcard indexes and sparse or partial options are
    /// refused with MongoDB's codes (see [`Collection::create_index_with`]). Durable once it
    /// returns. An index led by a meta path serves equality and `$in` on that path.
    pub fn create_index(&self, keys: Document) -> Result<String> {
        self.create_index_with(keys, Document::new())
    }

    /// [`Collection::create_index`] with MongoDB's index options document: `name` is honoured;
    /// `unique: true` and `expireAfterSeconds` are `Error::InvalidOptions` (72) as in MongoDB;
    /// `sparse: true`, `partialFilterExpression`, `hidden: true` and `collation` are
    /// `Error::CannotCreateIndex` (67), not supported here; other fields are
    /// `Error::InvalidOptions`.
    pub fn create_index_with(&self, keys: Document, options: Document) -> Result<String> {
        let opts = self.options()?;
        self.db.update_indexes(self.id, &self.name, |existing| {
            let (def, exists) = crate::manifest::parse_index(&keys, &options, &opts, existing)?;
            if exists {
                return Ok((None, def.name));
            }
            let mut next = existing.to_vec();
            let name = def.name.clone();
            next.push(def);
            Ok((Some(next), name))
        })
    }

    /// The collection's secondary indexes in the user's form `{v: 2, key, name}`, in creation
    /// order. Like MongoDB (reference §6) no default index is listed: the `_id` index of
    /// buckets is internal.
    pub fn list_indexes(&self) -> Result<Vec<Document>> {
        self.with_state(|c| c.entry.indexes.iter().map(|i| i.user_doc()).collect())
    }

    /// The secondary indexes in bucket form `{v: 2, key, name}` (`key` as MongoDB stores it on
    /// the bucket collection, e.g. `{"meta.a": 1, "control.min.t": 1, "control.max.t": 1}`).
    pub fn list_bucket_indexes(&self) -> Result<Vec<Document>> {
        self.with_state(|c| {
            c.entry
                .indexes
                .iter()
                .map(|i| {
                    bson::doc! {
                        "v": 2,
                        "key": crate::manifest::bucket_key(&i.key, &c.entry.options),
                        "name": &i.name,
                    }
                })
                .collect()
        })
    }

    /// Drops the index named `name`; `Error::IndexNotFound` (27) if there is none (names are
    /// not translated: the name is the one `list_indexes` shows). Durable once it returns.
    pub fn drop_index(&self, name: &str) -> Result<()> {
        self.db.update_indexes(self.id, &self.name, |existing| {
            if !existing.iter().any(|i| i.name == name) {
                return Err(Error::IndexNotFound(name.to_string()));
            }
            let next = existing
                .iter()
                .filter(|i| i.name != name)
                .cloned()
                .collect();
            Ok((Some(next), ()))
        })
    }

    /// Storage figures and catalog counters.
    pub fn stats(&self) -> Result<CollStats> {
        let wal_bytes = self.db.wal_log_bytes();
        let wal_spare_bytes = self.db.wal_spare_bytes();
        let manifest_bytes = self
            .db
            .vfs
            .file_len(&self.db.path.join(MANIFEST_FILE))
            .unwrap_or(0);
        let mut s = self.with_state(|c| {
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
            s
        })?;
        s.catalog = catalog_stats(&self.db.state.read(), self.id).unwrap_or_default();
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
