//! [`Database`]: the handle an embedder opens. A thin facade over the engine: it holds no
//! state and takes no lock of its own.

use super::collection::Collection;
use super::Handles;
use crate::engine::ddl::{CollMod, CollectionInfo};
use crate::engine::recover::RecoveryReport;
use crate::engine::ttl::SweepResult;
use crate::engine::verify::VerifyReport;
use crate::engine::Engine;
use crate::error::Result;
use crate::options::{DbOptions, TimeseriesOptions};
use bson::DateTime;
use std::path::Path;
use std::sync::Arc;

/// An open database. Cheap to clone; all clones share one state. `Send + Sync`.
///
/// Its [`Collection`](crate::Collection) handles share that state too. The database stays
/// open, and its directory locked, until [`Database::close`] is called or the last handle of
/// either kind is dropped. After `close`, the handles that remain answer `Error::Closed` and
/// write nothing, and the directory can be opened again at once; a cursor opened before the
/// close still reads what it was opened on.
#[derive(Clone)]
pub struct Database {
    inner: Arc<Handles>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("path", &self.inner.path())
            .finish()
    }
}

impl Database {
    /// Opens the database in directory `path`, creating it if missing, with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Database> {
        Database::open_with(path, DbOptions::default())
    }

    /// Opens the database in `path` with `opts`. Takes the directory's exclusive lock first
    /// (`Error::Locked` if another `Database` holds it), then recovers: the manifest, every
    /// segment it lists and the whole log are read and checked, and the log is replayed so every
    /// acknowledged insert is back, open buckets included. Only when all of that succeeded are
    /// leftovers of an interrupted flush removed and the log's torn tail cut
    /// ([`Database::recovery_report`] says what was): an open that fails changes no file.
    pub fn open_with(path: impl AsRef<Path>, opts: DbOptions) -> Result<Database> {
        Ok(Database {
            inner: Handles::new(Engine::open(path.as_ref(), opts)?),
        })
    }

    /// Opens the database in `path` for reading only, with default options: see
    /// [`Database::open_read_only_with`].
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Database> {
        Database::open_read_only_with(path, DbOptions::default())
    }

    /// Opens the database in `path` for reading only. It takes no lock and writes nothing (no
    /// file is created, cut or removed), so it works beside a process that has the database
    /// open for writing, and on files it may not write.
    ///
    /// It sees a consistent snapshot: every insert acknowledged before it opened (and perhaps
    /// some whose insert had not yet returned), never part of a batch, and none acknowledged
    /// later until [`Database::refresh`]. The writer's log is replayed in memory; segments
    /// are read as they are (they never change once written). Writes on it return
    /// `Error::ReadOnly`. The database must exist (`Error::Io` with `NotFound` otherwise).
    pub fn open_read_only_with(path: impl AsRef<Path>, opts: DbOptions) -> Result<Database> {
        Ok(Database {
            inner: Handles::new(Engine::open_read_only(path.as_ref(), opts)?),
        })
    }

    /// Moves a database opened with [`Database::open_read_only`] to the writer's latest
    /// acknowledged state: the manifest, segments and log are read again (segments already
    /// open are kept). Cursors opened before go on reading what they were opened on. On a
    /// database opened for writing it does nothing: that one always sees its latest state.
    pub fn refresh(&self) -> Result<()> {
        self.inner.refresh()
    }

    /// True for a database opened with [`Database::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.is_read_only()
    }

    /// What the open of this handle found and did to bring the database back: log records
    /// replayed, the torn tail cut from the log (bytes, where, and what they were) and
    /// leftover files removed.
    /// For a database opened read-only, what its last open or [`Database::refresh`] read.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.inner.recovery_report()
    }

    /// Directory of this database.
    pub fn path(&self) -> &Path {
        self.inner.path()
    }

    /// Creates a time-series collection. Creating an existing collection with identical options
    /// succeeds (as in MongoDB); with other options it is `Error::NamespaceExists`.
    pub fn create_collection(&self, name: &str, options: TimeseriesOptions) -> Result<Collection> {
        let id = self.inner.create_collection(name, options)?;
        Ok(Collection::new(self.inner.clone(), name.to_string(), id))
    }

    /// A handle to an existing collection, `Error::NamespaceNotFound` if there is none.
    pub fn collection(&self, name: &str) -> Result<Collection> {
        let id = self.inner.collection_id(name)?;
        Ok(Collection::new(self.inner.clone(), name.to_string(), id))
    }

    /// Every collection with its options, by name.
    pub fn list_collections(&self) -> Result<Vec<CollectionInfo>> {
        self.inner.list_collections()
    }

    /// Drops a collection and its files; returns whether it existed. Durable once it returns:
    /// the manifest no longer lists it, and log records of the old collection are ignored.
    pub fn drop_collection(&self, name: &str) -> Result<bool> {
        self.inner.drop_collection(name)
    }

    /// Closes every open bucket, writes all buckets to segments and syncs; afterwards the log
    /// holds nothing that is not also in a segment.
    pub fn flush(&self) -> Result<()> {
        self.inner.check_writable()?;
        self.inner.flush(true)
    }

    /// What the write-ahead log's writer has done since the database was opened, and how long
    /// its writes, syncs and zeros written ahead took: where an insert's wait for durability
    /// goes. `Error::Closed` once the database is closed.
    pub fn log_stats(&self) -> Result<crate::wal::LogStats> {
        self.inner.log_stats()
    }

    /// Checks everything on disk: every segment's checksums and decoded columns, its control
    /// min/max against its data (`Segment::verify`), that the manifest's segments are exactly
    /// the files in `seg/` (on a database opened read-only, only that they are there: a writer
    /// beside it adds and removes files), and that the in-memory `_id` index equals one
    /// rebuilt from a scan.
    /// The first problem is returned as `Error::Corruption` naming the file.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_with_progress(|_, _| {})
    }

    /// [`Database::verify`], calling `progress(segments_done, segments_total)` after each
    /// segment, for a progress display on large databases.
    pub fn verify_with_progress(&self, progress: impl FnMut(u64, u64)) -> Result<VerifyReport> {
        self.inner.verify(progress)
    }

    /// Stops background work, syncs the log and releases the directory lock, even while
    /// [`Collection`](crate::Collection) handles remain (they then answer `Error::Closed`).
    /// Open buckets are not closed: the log brings them back at the next open.
    pub fn close(self) -> Result<()> {
        self.inner.shutdown()
    }

    /// Changes a collection's options as MongoDB's `collMod` does: the granularity may only
    /// coarsen, custom spans only grow, `expireAfterSeconds` may be set or removed. Refused
    /// changes are `Error::InvalidOptions` (code 72) or `Error::BadValue` and change nothing; a
    /// missing collection is `Error::NamespaceNotFound`. Durable once it returns. Open buckets
    /// take the new span at once (new data may join them); buckets already in segments keep
    /// theirs, which is never larger than the new one, so queries widened by the current span
    /// still find them.
    pub fn coll_mod(&self, name: &str, m: CollMod) -> Result<()> {
        self.inner.coll_mod(name, m)
    }
    /// Deletes every bucket whose measurements are all older than `now` − expireAfterSeconds,
    /// in every collection with expiry set, and deletes segment files left with no live bucket.
    /// The background sweeper (`DbOptions::ttl_interval`) calls this with the database clock's
    /// time. Durable once it returns.
    ///
    /// ```
    /// use tsbucket::bson::{doc, DateTime};
    /// use tsbucket::{CollMod, Database, TimeseriesOptions};
    /// # fn main() -> tsbucket::Result<()> {
    /// let dir = tempfile::tempdir()?;
    /// let db = Database::open(dir.path())?;
    /// let c = db.create_collection("m", TimeseriesOptions::new("t").expire_after_seconds(3600))?;
    /// let t = DateTime::from_millis(1_700_000_000_000);
    /// c.insert_one(&doc! {"t": t, "v": 1})?;
    /// // One hour after the measurement it is not older than expireAfterSeconds yet.
    /// let later = |ms| DateTime::from_millis(t.timestamp_millis() + ms);
    /// assert_eq!(db.sweep_expired(later(3_600_000))?.buckets_deleted, 0);
    /// let r = db.sweep_expired(later(3_600_001))?;
    /// assert_eq!((r.buckets_deleted, r.measurements_deleted), (1, 1));
    /// // Expiry can be changed or removed later.
    /// db.coll_mod("m", CollMod::default().expire_after_seconds(None))?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn sweep_expired(&self, now: DateTime) -> Result<SweepResult> {
        self.inner.check_writable()?;
        crate::engine::ttl::sweep(&self.inner, now)
    }
}
