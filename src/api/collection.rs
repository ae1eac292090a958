//! [`Collection`]: a handle to one time-series collection. A thin facade over the engine: it
//! holds the collection's name and id, no state and no lock of its own.

use super::Handles;
use crate::engine::read::CollStats;
use crate::engine::rewrite::{DeleteResult, UpdateResult};
use crate::engine::write::{InsertManyResult, InsertOneResult};
use crate::error::Result;
use crate::options::TimeseriesOptions;
use crate::query::select::{Cursor, Explain};
use crate::query::FindOptions;
use bson::raw::RawDocumentBuf;
use bson::{Bson, Document};
use std::sync::Arc;

/// A time-series collection. Cheap to clone; `Send + Sync`.
#[derive(Clone)]
pub struct Collection {
    db: Arc<Handles>,
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
    pub(crate) fn new(db: Arc<Handles>, name: String, id: u32) -> Collection {
        Collection { db, name, id }
    }

    /// The collection's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The collection's options.
    pub fn options(&self) -> Result<TimeseriesOptions> {
        self.db.coll_options(self.id, &self.name)
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
        self.db.insert_many(self.id, &self.name, docs)
    }

    /// [`Collection::insert_many`] for documents that are already BSON bytes (for instance
    /// received off the wire), without building `Document`s. The same validation applies, and
    /// malformed bytes anywhere in a document are `Error::InvalidDocument`.
    pub fn insert_many_raw(&self, docs: &[RawDocumentBuf]) -> Result<InsertManyResult> {
        self.db.insert_many_raw(self.id, &self.name, docs)
    }

    /// Measurements matching `filter`, exactly as inserted.
    pub fn find(&self, filter: Document) -> Result<Cursor> {
        self.db.find(self.id, &self.name, filter)
    }

    /// [`Collection::find`] with projection, sort, skip and limit. Only the columns the
    /// filter, projection and sort read are decoded. A sort on the time field alone streams
    /// buckets in time order, so with a limit only the buckets that can hold the first rows
    /// are read; other sorts read every match.
    pub fn find_with(&self, filter: Document, options: FindOptions) -> Result<Cursor> {
        self.db.find_with(self.id, &self.name, filter, options)
    }

    /// Number of measurements matching `filter`. Buckets whose statistics prove every row
    /// matches count by their `control.count` without being read; the others decode only the
    /// columns the filter reads.
    pub fn count_documents(&self, filter: Document) -> Result<u64> {
        self.db.count_documents(self.id, &self.name, filter)
    }

    /// How a read with `filter` would be carried out.
    pub fn explain(&self, filter: Document) -> Result<Explain> {
        self.db.explain(self.id, &self.name, filter)
    }

    /// Runs an aggregation pipeline (`$match $project $group $sort $skip $limit $count`).
    /// The leading `$match` stages select buckets as [`Collection::find`] does; a `$group` on
    /// meta and time is computed from bucket statistics and typed columns, without unpacking
    /// measurements, where its shape allows. Unsupported stages, operators or expressions are
    /// `Error::BadValue`.
    pub fn aggregate(&self, pipeline: Vec<Document>) -> Result<Cursor> {
        Ok(Cursor::from_output(
            self.db
                .run_pipeline(self.id, &self.name, &pipeline, true)?
                .0,
        ))
    }

    /// How the pipeline's scan is carried out: buckets in all, pruned, taken whole, unpacked,
    /// and answered from their statistics alone. The pipeline runs to find out, since which
    /// buckets can be skipped may depend on those already read.
    pub fn explain_aggregate(&self, pipeline: Vec<Document>) -> Result<Explain> {
        Ok(self
            .db
            .run_pipeline(self.id, &self.name, &pipeline, true)?
            .1)
    }

    /// [`Collection::aggregate`] with every stage evaluated over unpacked measurements: the
    /// reference the columnar path is checked against.
    #[doc(hidden)]
    pub fn aggregate_unpacked(&self, pipeline: Vec<Document>) -> Result<Cursor> {
        Ok(Cursor::from_output(
            self.db
                .run_pipeline(self.id, &self.name, &pipeline, false)?
                .0,
        ))
    }

    /// Raw buckets in MongoDB's bucket-collection schema, filtered by `filter` applied to the
    /// bucket documents themselves (e.g. `{"control.count": {"$gt": 10}}`).
    pub fn buckets(&self, filter: Document) -> Result<Vec<Document>> {
        self.db.buckets(self.id, &self.name, filter)
    }

    /// Updates the meta value of every measurement whose meta matches `filter`, under MongoDB's
    /// legacy time-series rules: the filter may read only the meta field (or its subfields)
    /// and `update` must be an operator document (`$set $unset $rename $inc $mul $min $max`)
    /// that changes only the meta field; anything else is refused with `InvalidOptions` (72)
    /// or `BadValue` before anything changes. Whole buckets are updated; counts are of
    /// measurements. Durable and atomic once it returns: a crash leaves it done or not done.
    pub fn update_many(&self, filter: Document, update: Document) -> Result<UpdateResult> {
        self.db.update_many(self.id, &self.name, filter, update)
    }

    /// Deletes every measurement whose meta matches `filter` (which may read only the meta
    /// field; on a collection without one, only `{}`, which deletes everything), whole
    /// buckets at a time. Segment files left without buckets are deleted and partly affected
    /// ones rewritten, so the space comes back. Atomic and durable like
    /// [`Collection::update_many`].
    pub fn delete_many(&self, filter: Document) -> Result<DeleteResult> {
        self.db.delete_many(self.id, &self.name, filter)
    }

    /// An update statement in the shape of MongoDB's `update` command, `{q, u, multi,
    /// upsert}`, run under the rules of [`Collection::update_many`]. Since `multi` defaults to
    /// false in MongoDB it must be given as `true`: a non-multi update, an upsert and a
    /// pipeline `u` are refused with `InvalidOptions` (72), as MongoDB refuses them on a
    /// time-series collection, before anything changes.
    pub fn update(&self, statement: Document) -> Result<UpdateResult> {
        self.db.update(self.id, &self.name, statement)
    }

    /// A delete statement in the shape of MongoDB's `delete` command, `{q, limit}`, run as
    /// [`Collection::delete_many`]. `limit` must be 0: a limit of 1 (a non-multi delete) is
    /// refused with `Unsupported` (MongoDB's IllegalOperation, 20) before anything changes.
    pub fn delete(&self, statement: Document) -> Result<DeleteResult> {
        self.db.delete(self.id, &self.name, statement)
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
        self.db
            .create_index_with(self.id, &self.name, keys, options)
    }

    /// The collection's secondary indexes in the user's form `{v: 2, key, name}`, in creation
    /// order. Like MongoDB, no default index is listed: the `_id` index of buckets is
    /// internal.
    pub fn list_indexes(&self) -> Result<Vec<Document>> {
        self.db.list_indexes(self.id, &self.name)
    }

    /// The secondary indexes in bucket form `{v: 2, key, name}` (`key` as MongoDB stores it on
    /// the bucket collection, e.g. `{"meta.a": 1, "control.min.t": 1, "control.max.t": 1}`).
    pub fn list_bucket_indexes(&self) -> Result<Vec<Document>> {
        self.db.list_bucket_indexes(self.id, &self.name)
    }

    /// Drops the index named `name`; `Error::IndexNotFound` (27) if there is none (names are
    /// not translated: the name is the one `list_indexes` shows). Durable once it returns.
    pub fn drop_index(&self, name: &str) -> Result<()> {
        self.db.drop_index(self.id, &self.name, name)
    }

    /// Storage figures and catalog counters.
    pub fn stats(&self) -> Result<CollStats> {
        self.db.stats(self.id, &self.name)
    }
}
