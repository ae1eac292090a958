//! The database: a directory holding a lock file, the manifest, the write-ahead log and the
//! segment files; and the in-memory state every handle shares.
//!
//! Data path of an insert: the caller's thread validates and encodes the batch
//! ([`crate::ingest`]), the log's writer thread makes it durable and acknowledges it, its
//! applier thread applies it to the bucket catalog in sequence order (so the catalog never
//! holds an unlogged measurement; reads wait for it, see [`crate::visible`]), and the flusher
//! writes closed buckets into segments and advances the manifest's log checkpoint.

use crate::bucket::EncodedBucket;
use crate::catalog::{
    BucketParams, CatalogStats, ClosedBucket, CollCatalog, FitLimits, Prepared, IDX_COLUMN,
    SEQ_COLUMN,
};
use crate::collection::Collection;
use crate::error::{Error, Result};
use crate::ingest::compact::{InsertCompactor, InsertExpander};
use crate::ingest::{decode_insert, prepare_replayed, Fields};
use crate::manifest::{parse_segment_name, segment_path, CollectionEntry, Manifest};
use crate::options::{DbOptions, TimeseriesOptions};
use crate::recovery::RecoveryReport;
use crate::segment::{write_encoded_segment, PageCache, Segment, SegmentHeaderInfo};
use crate::vfs::ReadOnlyFs;
use crate::vfs::{LockGuard, Vfs};
use crate::visible::StateLock;
use crate::wal::codec::Compact;
use crate::wal::{Applied, Quiet, RecoveredLog, Wal, WalOptions};
use bson::Bson;
use crossbeam_channel::{Receiver, Sender};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Name of the lock file inside the database directory.
pub const LOCK_FILE: &str = "LOCK";
/// Directory of the write-ahead log.
pub const WAL_DIR: &str = "wal";
/// Directory of segment files.
pub const SEG_DIR: &str = "seg";

/// The fields an insert reads, fixed for the life of a collection.
#[derive(Debug)]
pub(crate) struct InsertFields {
    pub time: String,
    pub meta: Option<String>,
}

impl InsertFields {
    fn of(o: &TimeseriesOptions) -> Arc<InsertFields> {
        Arc::new(InsertFields {
            time: o.get_time_field().to_string(),
            meta: o.get_meta_field().map(str::to_string),
        })
    }
}

/// Where a flushed bucket lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BucketLoc {
    pub segment: u64,
    pub index: u32,
}

/// Key of the `_id` index: the bucket's start (the `_id`'s time prefix, kept as full
/// milliseconds so starts outside the 32-bit range still sort right), then the `_id` bytes.
pub(crate) type IdKey = (i64, [u8; 12]);

/// One collection's live state.
pub(crate) struct CollState {
    pub entry: CollectionEntry,
    pub catalog: CollCatalog,
    pub segments: BTreeMap<u64, Arc<Segment>>,
    pub index: BTreeMap<IdKey, BucketLoc>,
    /// Closed buckets being written to a segment right now; readers still see them here.
    pub flushing: Vec<Arc<ClosedBucket>>,
    /// Maps of the meta indexes, derived from `segments` on demand.
    pub meta_cache: crate::index::meta::MetaCache,
}

impl CollState {
    fn new(entry: CollectionEntry, limits: FitLimits) -> CollState {
        let catalog = CollCatalog::new(bucket_params(&entry.options), limits);
        CollState {
            entry,
            catalog,
            segments: BTreeMap::new(),
            index: BTreeMap::new(),
            flushing: Vec::new(),
            meta_cache: Default::default(),
        }
    }

    pub(crate) fn add_segment(&mut self, id: u64, seg: Arc<Segment>) {
        for (i, b) in seg.buckets().iter().enumerate() {
            // Buckets the TTL sweeper deleted stay in the file but not in the index.
            if self.entry.is_expired(id, i as u32) {
                continue;
            }
            self.index.insert(
                id_key(b),
                BucketLoc {
                    segment: id,
                    index: i as u32,
                },
            );
        }
        self.segments.insert(id, seg);
    }

    /// Summaries of the live buckets in segments (those the `_id` index lists).
    pub(crate) fn segment_buckets(
        &self,
    ) -> impl Iterator<Item = &crate::segment::BucketSummary> + '_ {
        self.index.values().filter_map(|loc| {
            self.segments
                .get(&loc.segment)
                .and_then(|s| s.buckets().get(loc.index as usize))
        })
    }
}

/// The `_id` index key of a bucket in a segment.
pub(crate) fn id_key(b: &crate::segment::BucketSummary) -> IdKey {
    // The summary's start is control.min of the time field, else the _id's time prefix.
    (b.time_range().0, b.id.bytes())
}

pub(crate) fn bucket_params(o: &TimeseriesOptions) -> BucketParams {
    BucketParams {
        time_field: o.get_time_field().to_string(),
        meta_field: o.get_meta_field().map(str::to_string),
        span_ms: i64::from(o.bucket_max_span_seconds()) * 1000,
        rounding_ms: i64::from(o.bucket_rounding_seconds()) * 1000,
    }
}

/// Everything readers and writers share, behind one lock held only for short, CPU-only work.
pub(crate) struct Shared {
    pub colls: BTreeMap<u32, CollState>,
    pub names: BTreeMap<String, u32>,
    /// Sequence number of the last log record applied to the catalog.
    pub applied_seq: u64,
}

/// An insert batch on its way through the log to the catalog: where each document lies in the
/// record's bytes, which the log hands back once they are durable.
pub(crate) struct Batch {
    pub collection_id: u32,
    pub docs: Vec<Prepared>,
}

/// Stores every record as it is (`DbOptions::wal_compact` off).
struct Verbatim;

impl Compact<Batch> for Verbatim {
    fn reset(&mut self) {}
    fn compact(&mut self, _: &[u8], _: &Batch, _: &mut Vec<u8>) -> bool {
        false
    }
}

pub(crate) struct DbInner {
    pub path: PathBuf,
    pub opts: DbOptions,
    pub vfs: Arc<dyn Vfs>,
    pub state: StateLock,
    /// What an insert reads of each collection, kept apart from `state`, whose lock the
    /// applier holds while it applies a batch: preparing a batch never waits for the last one.
    inserting: RwLock<BTreeMap<u32, Arc<InsertFields>>>,
    /// Decompressed pages kept across reads (`DbOptions::page_cache_bytes`).
    pub page_cache: Arc<PageCache>,
    wal: RwLock<Option<Wal<Batch>>>,
    /// Stops the log's writes of its own accord once the database refuses writes.
    log_quiet: crate::wal::Quiet,
    /// The manifest as last written; its lock also serialises flushes and DDL.
    pub(crate) manifest: Mutex<Manifest>,
    /// Why writes are refused, once they are; shared with the applier, which poisons the
    /// database when a durable row cannot be applied.
    poisoned: Arc<Mutex<Option<String>>>,
    closed: AtomicBool,
    /// Dropping it tells the flusher and the TTL sweeper to stop.
    stop_tx: Mutex<Option<Sender<()>>>,
    flusher: Mutex<Option<JoinHandle<()>>>,
    /// The background TTL sweeper, when `DbOptions::ttl_interval` is set.
    ttl_sweeper: Mutex<Option<JoinHandle<()>>>,
    lock: Mutex<Option<Box<dyn LockGuard>>>,
    /// What the open (or, read-only, the last refresh) found and did.
    recovery: Mutex<RecoveryReport>,
    /// Opened with [`Database::open_read_only`]: no log writer, no lock, no background work.
    read_only: bool,
}

/// An open database. Cheap to clone; all clones share one state. `Send + Sync`.
///
/// Its [`Collection`](crate::Collection) handles share that state too. The database stays
/// open, and its directory locked, until [`Database::close`] is called or the last handle of
/// either kind is dropped. After `close`, the handles that remain answer `Error::Closed` and
/// write nothing, and the directory can be opened again at once; a cursor opened before the
/// close still reads what it was opened on.
#[derive(Clone)]
pub struct Database {
    pub(crate) inner: Arc<DbInner>,
}

/// What [`Database::verify`] checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segment files verified.
    pub segments: u64,
    /// Buckets in them.
    pub buckets: u64,
    /// Measurements in them.
    pub measurements: u64,
}

/// A collection as `list_collections` reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectionInfo {
    /// Collection name.
    pub name: String,
    /// Its options.
    pub options: TimeseriesOptions,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("path", &self.inner.path)
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
        let path = path.as_ref().to_path_buf();
        // Refused before anything is created or read.
        if opts.wal_file_bytes == 0 {
            return Err(Error::InvalidOptions(
                "the log file size (DbOptions::wal_file_bytes) must be > 0".into(),
            ));
        }
        let vfs = opts.vfs.clone();
        vfs.create_dir_all(&path)?;
        let lock = vfs
            .try_lock(&path, LOCK_FILE)?
            .ok_or_else(|| Error::Locked(path.clone()))?;
        let seg_dir = path.join(SEG_DIR);

        // Reading and checking: nothing below changes a file until the log is started.
        let page_cache = Arc::new(PageCache::new(opts.page_cache_bytes));
        let Loaded {
            is_new,
            manifest,
            shared,
            log,
        } = load(&path, &opts, &vfs, &page_cache, &BTreeMap::new(), false)?;
        let remove = crate::recovery::leftovers(
            vfs.as_ref(),
            &path,
            &seg_dir,
            &manifest,
            log.last_seq(),
            opts.sync == crate::wal::SyncMode::Always,
        )?;

        // Recovery succeeded: from here on the disk is brought to the recovered state.
        // Leftovers go first: a new database's first manifest write passes through the
        // `MANIFEST.tmp` that may be one of them.
        crate::recovery::remove(vfs.as_ref(), &remove)?;
        if is_new {
            manifest.store(vfs.as_ref(), &path)?;
            vfs.sync_dir(&path)?;
        }
        if !vfs.exists(&seg_dir) {
            vfs.create_dir_all(&seg_dir)?;
            vfs.sync_dir(&path)?;
        }
        let report = report(&manifest, &log, remove);
        let state = Arc::new(RwLock::new(shared));
        let poisoned: Arc<Mutex<Option<String>>> = Arc::default();
        let (flush_tx, flush_rx) = crossbeam_channel::bounded::<()>(1);
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let apply = make_apply(state.clone(), &opts, flush_tx, poisoned.clone());
        let compactor: Box<dyn Compact<Batch>> = match opts.wal_compact {
            true => Box::new(InsertCompactor::new()),
            false => Box::new(Verbatim),
        };
        let wal = log.start(apply, Some(compactor))?;
        {
            let mut st = state.write();
            st.applied_seq = st.applied_seq.max(wal.last_seq());
        }

        let inserting = {
            let st = state.read();
            st.colls
                .iter()
                .map(|(&id, c)| (id, InsertFields::of(&c.entry.options)))
                .collect()
        };
        let inner = Arc::new(DbInner {
            path,
            opts,
            vfs,
            state: StateLock::new(state, wal.applied()),
            log_quiet: wal.quiet(),
            inserting: RwLock::new(inserting),
            page_cache,
            wal: RwLock::new(Some(wal)),
            manifest: Mutex::new(manifest),
            poisoned,
            closed: AtomicBool::new(false),
            stop_tx: Mutex::new(Some(stop_tx)),
            flusher: Mutex::new(None),
            ttl_sweeper: Mutex::new(None),
            lock: Mutex::new(Some(lock)),
            recovery: Mutex::new(report),
            read_only: false,
        });
        if let Some(every) = inner.opts.ttl_interval {
            let h = crate::ttl::spawn_sweeper(Arc::downgrade(&inner), every, stop_rx.clone())?;
            *inner.ttl_sweeper.lock() = Some(h);
        }
        let handle = spawn_flusher(Arc::downgrade(&inner), flush_rx, stop_rx)?;
        *inner.flusher.lock() = Some(handle);
        Ok(Database { inner })
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
        let path = path.as_ref().to_path_buf();
        let vfs: Arc<dyn Vfs> = Arc::new(ReadOnlyFs::new(opts.vfs.clone()));
        let page_cache = Arc::new(PageCache::new(opts.page_cache_bytes));
        let loaded = load_snapshot(&path, &opts, &vfs, &page_cache, &BTreeMap::new())?;
        let report = report(&loaded.manifest, &loaded.log, Vec::new());
        let inner = Arc::new(DbInner {
            path,
            opts: DbOptions {
                ttl_interval: None,
                ..opts
            },
            vfs,
            state: StateLock::new(Arc::new(RwLock::new(loaded.shared)), Applied::idle()),
            log_quiet: Quiet::idle(),
            inserting: RwLock::new(BTreeMap::new()),
            page_cache,
            wal: RwLock::new(None),
            manifest: Mutex::new(loaded.manifest),
            poisoned: Arc::default(),
            closed: AtomicBool::new(false),
            stop_tx: Mutex::new(None),
            flusher: Mutex::new(None),
            ttl_sweeper: Mutex::new(None),
            lock: Mutex::new(None),
            recovery: Mutex::new(report),
            read_only: true,
        });
        Ok(Database { inner })
    }

    /// Moves a database opened with [`Database::open_read_only`] to the writer's latest
    /// acknowledged state: the manifest, segments and log are read again (segments already
    /// open are kept). Cursors opened before go on reading what they were opened on. On a
    /// database opened for writing it does nothing: that one always sees its latest state.
    pub fn refresh(&self) -> Result<()> {
        self.inner.check_open()?;
        if !self.inner.read_only {
            return Ok(());
        }
        let inner = &self.inner;
        let mut man = inner.manifest.lock();
        let open: BTreeMap<u64, Arc<Segment>> = {
            let st = inner.state.read();
            st.colls
                .values()
                .flat_map(|c| c.segments.iter().map(|(&id, s)| (id, s.clone())))
                .collect()
        };
        let loaded = load_snapshot(
            &inner.path,
            &inner.opts,
            &inner.vfs,
            &inner.page_cache,
            &open,
        )?;
        *inner.recovery.lock() = report(&loaded.manifest, &loaded.log, Vec::new());
        *inner.state.write() = loaded.shared;
        *man = loaded.manifest;
        Ok(())
    }

    /// True for a database opened with [`Database::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        self.inner.read_only
    }

    /// What the open of this handle found and did to bring the database back: log records
    /// replayed, the torn tail cut from the log (bytes, where, and what they were) and
    /// leftover files removed.
    /// For a database opened read-only, what its last open or [`Database::refresh`] read.
    pub fn recovery_report(&self) -> RecoveryReport {
        self.inner.recovery.lock().clone()
    }

    /// Directory of this database.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Creates a time-series collection. Creating an existing collection with identical options
    /// succeeds (as in MongoDB); with other options it is `Error::NamespaceExists`.
    pub fn create_collection(&self, name: &str, options: TimeseriesOptions) -> Result<Collection> {
        self.inner.check_writable()?;
        validate_collection_name(name)?;
        options.validate()?;
        let mut man = self.inner.manifest.lock();
        if let Some(existing) = man.collections.iter().find(|c| c.name == name) {
            if existing.options == options {
                return Ok(Collection::new(
                    self.inner.clone(),
                    name.to_string(),
                    existing.id,
                ));
            }
            return Err(Error::NamespaceExists(name.to_string()));
        }
        let id = man.next_collection_id;
        let entry = CollectionEntry {
            id,
            name: name.to_string(),
            options,
            segments: Vec::new(),
            expired: Default::default(),
            indexes: Vec::new(),
        };
        let mut next = man.clone();
        next.next_collection_id += 1;
        next.generation += 1;
        next.collections.push(entry.clone());
        self.inner.store_manifest(&next)?;
        *man = next;
        let mut st = self.inner.state.write();
        self.inner
            .inserting
            .write()
            .insert(id, InsertFields::of(&entry.options));
        st.names.insert(name.to_string(), id);
        st.colls
            .insert(id, CollState::new(entry, fit_limits(&self.inner.opts)));
        Ok(Collection::new(self.inner.clone(), name.to_string(), id))
    }

    /// A handle to an existing collection, `Error::NamespaceNotFound` if there is none.
    pub fn collection(&self, name: &str) -> Result<Collection> {
        self.inner.check_open()?;
        let st = self.inner.state.read();
        match st.names.get(name) {
            Some(&id) => Ok(Collection::new(self.inner.clone(), name.to_string(), id)),
            None => Err(Error::NamespaceNotFound(name.to_string())),
        }
    }

    /// Every collection with its options, by name.
    pub fn list_collections(&self) -> Result<Vec<CollectionInfo>> {
        self.inner.check_open()?;
        let st = self.inner.state.read();
        Ok(st
            .names
            .values()
            .filter_map(|id| st.colls.get(id))
            .map(|c| CollectionInfo {
                name: c.entry.name.clone(),
                options: c.entry.options.clone(),
            })
            .collect())
    }

    /// Drops a collection and its files; returns whether it existed. Durable once it returns:
    /// the manifest no longer lists it, and log records of the old collection are ignored.
    pub fn drop_collection(&self, name: &str) -> Result<bool> {
        self.inner.check_writable()?;
        let mut man = self.inner.manifest.lock();
        let Some(pos) = man.collections.iter().position(|c| c.name == name) else {
            return Ok(false);
        };
        let mut next = man.clone();
        let entry = next.collections.remove(pos);
        next.generation += 1;
        self.inner.store_manifest(&next)?;
        *man = next;
        let removed = {
            let mut st = self.inner.state.write();
            self.inner.inserting.write().remove(&entry.id);
            st.names.remove(name);
            st.colls.remove(&entry.id)
        };
        // The manifest no longer names these files; leftovers are removed at the next open too.
        if let Some(cs) = removed {
            for (sid, _) in cs.segments {
                let _ = self
                    .inner
                    .vfs
                    .remove_file(&segment_path(&self.inner.path, sid));
            }
        }
        let _ = self.inner.vfs.sync_dir(&self.inner.path.join(SEG_DIR));
        Ok(true)
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
    pub fn verify_with_progress(&self, mut progress: impl FnMut(u64, u64)) -> Result<VerifyReport> {
        self.inner.check_open()?;
        // Holding the manifest lock keeps flushes and DDL out while files are compared.
        let man = self.inner.manifest.lock();
        let st = self.inner.state.read();
        let mut report = VerifyReport::default();
        let seg_dir = self.inner.path.join(SEG_DIR);
        let listed: HashSet<u64> = man
            .collections
            .iter()
            .flat_map(|c| c.segments.iter().copied())
            .collect();
        let names = match self.inner.vfs.list_dir(&seg_dir) {
            Ok(names) => names,
            // A database that never flushed, copied by a tool that keeps no empty directory
            // (git does not), has no seg/; a reader creates nothing, so it stays missing.
            // Opening for writing creates it.
            Err(e) if self.inner.read_only && e.kind() == std::io::ErrorKind::NotFound => {
                Vec::new()
            }
            Err(e) => return Err(e.into()),
        };
        for name in names {
            let known = parse_segment_name(&name).is_some_and(|id| listed.contains(&id));
            // Beside a writer, seg/ also holds what it is flushing now, and files it unlisted
            // since this snapshot was read.
            if !known && !self.inner.read_only {
                return Err(Error::corruption(
                    seg_dir.join(&name),
                    0,
                    "file in seg/ that the manifest does not list",
                ));
            }
        }
        let total: u64 = man
            .collections
            .iter()
            .map(|c| c.segments.len() as u64)
            .sum();
        for entry in &man.collections {
            let Some(c) = st.colls.get(&entry.id) else {
                return Err(Error::corruption(
                    self.inner.path.join(crate::manifest::MANIFEST_FILE),
                    0,
                    format!("collection '{}' is listed but not loaded", entry.name),
                ));
            };
            let mut rebuilt = CollState::new(entry.clone(), fit_limits(&self.inner.opts));
            for &sid in &entry.segments {
                let seg = c.segments.get(&sid).ok_or_else(|| {
                    Error::corruption(
                        segment_path(&self.inner.path, sid),
                        0,
                        "segment listed in the manifest is not loaded",
                    )
                })?;
                seg.verify()?;
                report.segments += 1;
                report.buckets += seg.buckets().len() as u64;
                report.measurements += seg
                    .buckets()
                    .iter()
                    .map(|b| u64::from(b.count))
                    .sum::<u64>();
                rebuilt.add_segment(sid, seg.clone());
                progress(report.segments, total);
            }
            if rebuilt.index != c.index {
                return Err(Error::corruption(
                    &seg_dir,
                    0,
                    format!(
                        "the _id index of '{}' holds {} entries, a scan finds {}",
                        entry.name,
                        c.index.len(),
                        rebuilt.index.len()
                    ),
                ));
            }
        }
        Ok(report)
    }

    /// Stops background work, syncs the log and releases the directory lock, even while
    /// [`Collection`](crate::Collection) handles remain (they then answer `Error::Closed`).
    /// Open buckets are not closed: the log brings them back at the next open.
    pub fn close(self) -> Result<()> {
        self.inner.shutdown()
    }
}

/// What the reading phase of an open found, before anything on disk is changed.
struct Loaded {
    /// No manifest yet: a new database, whose first manifest is `manifest`.
    is_new: bool,
    manifest: Manifest,
    shared: Shared,
    log: RecoveredLog,
}

/// The reading phase of an open: reads and checks the manifest, every listed segment (those in
/// `reuse` are taken as they are) and the whole log, and replays the log into the catalog in
/// memory. Changes nothing on disk. `read_only` refuses a directory without a manifest and
/// reads the log leniently (a writer may be in the middle of a write).
fn load(
    path: &Path,
    opts: &DbOptions,
    vfs: &Arc<dyn Vfs>,
    page_cache: &Arc<PageCache>,
    reuse: &BTreeMap<u64, Arc<Segment>>,
    read_only: bool,
) -> Result<Loaded> {
    let wal_dir = path.join(WAL_DIR);
    let fs: &dyn Vfs = vfs.as_ref();
    let loaded = Manifest::load(fs, path)?;
    let log_files = match fs.exists(&wal_dir) {
        true => crate::wal::reader::list_files(fs, &wal_dir)?.len(),
        false => 0,
    };
    let manifest = match &loaded {
        Some(m) => {
            // Every committed change bumps the generation, and the log's first file is created
            // before the first one: a log that is gone took acknowledged inserts with it,
            // which no replay can tell.
            if m.generation > 0 && log_files == 0 {
                return Err(Error::corruption(
                    &wal_dir,
                    0,
                    format!(
                        "the log is missing (no log file in {}); the manifest's checkpoint is \
                         record {}, and inserts acknowledged after it were only in the log",
                        wal_dir.display(),
                        m.wal_checkpoint
                    ),
                ));
            }
            m.clone()
        }
        None if read_only => {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("no tsbucket database in {}", path.display()),
            )))
        }
        None => {
            if fs.exists(&wal_dir) && !fs.list_dir(&wal_dir)?.is_empty() {
                return Err(Error::corruption(
                    path.join(crate::manifest::MANIFEST_FILE),
                    0,
                    "the manifest is missing but the log has records; refusing to guess",
                ));
            }
            Manifest {
                next_collection_id: 1,
                next_segment_id: 1,
                ..Manifest::default()
            }
        }
    };

    let limits = fit_limits(opts);
    let mut shared = Shared {
        colls: BTreeMap::new(),
        names: BTreeMap::new(),
        applied_seq: manifest.wal_checkpoint,
    };
    // (seq, position in batch) of logged rows that are already in segments.
    let mut in_segments: HashSet<(u64, u32)> = HashSet::new();
    let listed: Vec<PathBuf> = manifest
        .collections
        .iter()
        .flat_map(|e| e.segments.iter())
        .filter(|sid| !reuse.contains_key(sid))
        .map(|&sid| segment_path(path, sid))
        .collect();
    let threads = crate::query::parallel::allowed(opts.query_threads);
    let mut opened = open_segments(fs, &listed, threads).into_iter();
    for entry in &manifest.collections {
        let mut cs = CollState::new(entry.clone(), limits);
        for &sid in &entry.segments {
            let sp = segment_path(path, sid);
            let seg = match reuse.get(&sid) {
                Some(s) => s.clone(),
                None => {
                    let opened = opened
                        .next()
                        .unwrap_or_else(|| Segment::open(fs, &sp))
                        .map(|s| s.with_page_cache(page_cache.clone()));
                    Arc::new(opened.map_err(|e| match e {
                        // The OS error names no file; the manifest says what was lost.
                        Error::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
                            Error::corruption(
                                &sp,
                                0,
                                format!(
                                    "segment {sid} of collection '{}' is listed in the manifest \
                                     but missing; its data cannot be recovered from the log",
                                    entry.name
                                ),
                            )
                        }
                        e => e,
                    })?)
                }
            };
            if seg.info().collection_id != entry.id {
                return Err(Error::corruption(
                    &sp,
                    0,
                    format!(
                        "segment belongs to collection id {}, the manifest lists it under {}",
                        seg.info().collection_id,
                        entry.id
                    ),
                ));
            }
            if let Some(&last) = entry.expired.get(&sid).and_then(|e| e.last()) {
                if last as usize >= seg.buckets().len() {
                    return Err(Error::corruption(
                        path.join(crate::manifest::MANIFEST_FILE),
                        0,
                        format!(
                            "expiredBuckets names bucket {last} of segment {sid}, which has {}",
                            seg.buckets().len()
                        ),
                    ));
                }
            }
            collect_logged_rows(&seg, manifest.wal_checkpoint, &mut in_segments)?;
            cs.add_segment(sid, seg);
        }
        shared.names.insert(entry.name.clone(), entry.id);
        shared.colls.insert(entry.id, cs);
    }

    let wal_opts = WalOptions {
        sync: opts.sync,
        max_record_bytes: opts.max_batch_bytes + 64,
        spare_files: opts.wal_spare_files,
        applier_priority: opts.background_priority,
        rotate_bytes: opts.wal_file_bytes,
        recovery: match read_only {
            // The tail a reader sees may be a write in progress.
            true => crate::wal::WalRecovery::TolerateTornTail,
            false => opts.wal_recovery,
        },
    };
    let fields: BTreeMap<u32, (String, Option<String>)> = manifest
        .collections
        .iter()
        .map(|c| {
            let o = &c.options;
            (
                c.id,
                (
                    o.get_time_field().to_string(),
                    o.get_meta_field().map(str::to_string),
                ),
            )
        })
        .collect();
    let state = RwLock::new(shared);
    // Replay in two stages on two threads: the log reader decodes and prepares records, a
    // second thread applies them to the catalog in sequence order.
    let log = std::thread::scope(|scope| -> Result<RecoveredLog> {
        let (tx, rx) = crossbeam_channel::bounded::<Replayed>(64);
        let applier = scope.spawn(|| apply_replayed(&state, rx, &in_segments));
        let read = {
            let mut replay = |seq: u64, payload: &[u8]| -> Result<()> {
                match prepare_record(&fields, seq, payload, &wal_dir)? {
                    // A send fails only once the applier stopped; its own error says why.
                    Some(r) => tx
                        .send(r)
                        .map_err(|_| Error::Internal("the replay applier stopped early".into())),
                    None => Ok(()),
                }
            };
            // Compacted records are always read; they are written only when asked for.
            let mut expander = InsertExpander::new();
            RecoveredLog::recover(
                vfs.clone(),
                &wal_dir,
                wal_opts,
                manifest.wal_checkpoint,
                &mut replay,
                Some(&mut expander),
            )
        };
        drop(tx);
        let applied = applier
            .join()
            .unwrap_or_else(|_| Err(Error::Internal("the replay applier panicked".into())));
        // The applier's error comes first: it is why a send above failed.
        applied?;
        read
    })?;
    let mut shared = state.into_inner();
    shared.applied_seq = shared.applied_seq.max(log.last_seq());
    Ok(Loaded {
        is_new: loaded.is_none(),
        manifest,
        shared,
        log,
    })
}

/// What an open found in the manifest and the log, and the leftovers it `removed`.
fn report(manifest: &Manifest, log: &RecoveredLog, removed: Vec<PathBuf>) -> RecoveryReport {
    RecoveryReport {
        checkpoint: manifest.wal_checkpoint,
        log_files: log.files(),
        records_replayed: log.replayed(),
        last_seq: log.last_seq(),
        dropped_tail: log.dropped().cloned(),
        removed,
    }
}

/// [`load`] for a reader beside a writer. The writer may commit a manifest, delete the files it
/// no longer lists and reclaim its log while the reader reads them, so a failure is retried
/// with the manifest read again whenever that manifest has changed meanwhile; a failure with
/// the same manifest twice is real.
fn load_snapshot(
    path: &Path,
    opts: &DbOptions,
    vfs: &Arc<dyn Vfs>,
    page_cache: &Arc<PageCache>,
    reuse: &BTreeMap<u64, Arc<Segment>>,
) -> Result<Loaded> {
    let manifest_path = path.join(crate::manifest::MANIFEST_FILE);
    let mut tries = 0;
    loop {
        let before = vfs.read(&manifest_path).ok();
        match load(path, opts, vfs, page_cache, reuse, true) {
            Ok(l) => return Ok(l),
            Err(e) => {
                tries += 1;
                let after = vfs.read(&manifest_path).ok();
                if before == after || tries >= 100 {
                    return Err(e);
                }
            }
        }
    }
}

impl DbInner {
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        if self.read_only {
            return Err(Error::ReadOnly(self.path.clone()));
        }
        if let Some(p) = self.poisoned.lock().as_ref() {
            return Err(Error::Poisoned(p.clone()));
        }
        Ok(())
    }

    pub(crate) fn poison(&self, e: &Error) {
        {
            let mut p = self.poisoned.lock();
            if p.is_none() {
                *p = Some(e.to_string());
            }
        }
        // Nothing may reach the disk after a failure, not even the log's zeros ahead.
        self.log_quiet.stop();
    }

    /// Replaces the index definitions of collection `id`: computed by `f` from the current ones
    /// under the manifest lock, made durable by a manifest write (the commit point), then
    /// published to readers. `f` returning an error or `None` changes nothing.
    pub(crate) fn update_indexes<R>(
        &self,
        id: u32,
        name: &str,
        f: impl FnOnce(&[crate::index::IndexDef]) -> Result<(Option<Vec<crate::index::IndexDef>>, R)>,
    ) -> Result<R> {
        self.check_writable()?;
        let mut man = self.manifest.lock();
        let pos = man
            .collections
            .iter()
            .position(|c| c.id == id)
            .ok_or_else(|| Error::NamespaceNotFound(name.to_string()))?;
        let (new, r) = f(&man.collections[pos].indexes)?;
        let Some(new) = new else {
            return Ok(r);
        };
        let mut next = man.clone();
        next.collections[pos].indexes = new.clone();
        next.generation += 1;
        self.store_manifest(&next)?;
        *man = next;
        if let Some(c) = self.state.write().colls.get_mut(&id) {
            c.entry.indexes = new;
        }
        Ok(r)
    }

    pub(crate) fn store_manifest(&self, m: &Manifest) -> Result<()> {
        m.store(self.vfs.as_ref(), &self.path)
            .inspect_err(|e| self.poison(e))
    }

    /// The fields an insert into collection `id` reads; `None` once it is dropped.
    pub(crate) fn insert_fields(&self, id: u32) -> Option<Arc<InsertFields>> {
        self.inserting.read().get(&id).cloned()
    }

    /// Appends a batch to the log; returns once it is durable. Reads through `state` see it.
    pub(crate) fn append(&self, payload: Vec<u8>, batch: Batch) -> Result<u64> {
        self.check_writable()?;
        let guard = self.wal.read();
        let wal = guard.as_ref().ok_or(Error::Closed)?;
        wal.append(payload, batch).inspect_err(|e| {
            if !matches!(e, Error::BadValue(_)) {
                self.poison(e)
            }
        })
    }

    /// See [`Database::log_stats`].
    pub(crate) fn log_stats(&self) -> Result<crate::wal::LogStats> {
        self.wal
            .read()
            .as_ref()
            .map(|w| w.stats())
            .ok_or(Error::Closed)
    }

    /// Bytes the log keeps on disk for reuse (see [`crate::CollStats::wal_spare_bytes`]).
    pub(crate) fn wal_spare_bytes(&self) -> u64 {
        self.wal.read().as_ref().map_or(0, |w| w.spare_bytes())
    }

    /// Bytes of the log's records: what [`DbOptions::wal_limit_bytes`] bounds.
    pub(crate) fn wal_log_bytes(&self) -> u64 {
        self.wal.read().as_ref().map_or(0, |w| w.log_bytes())
    }

    /// Writes closed buckets to segments, records them and the new log checkpoint in the
    /// manifest, then lets the log drop what is no longer needed. With `close_all`, every open
    /// bucket is closed first.
    pub(crate) fn flush(&self, close_all: bool) -> Result<()> {
        let mut man = self.manifest.lock();
        self.flush_locked(&mut man, close_all)
    }

    /// [`DbInner::flush`] for a caller that already holds the manifest lock.
    pub(crate) fn flush_locked(&self, man: &mut Manifest, close_all: bool) -> Result<()> {
        {
            let mut st = self.state.write();
            if close_all {
                for c in st.colls.values_mut() {
                    c.catalog.close_all();
                }
            } else if self.wal_log_bytes() > self.opts.wal_limit_bytes {
                // Buckets holding the oldest half of the unflushed log pin it: close them.
                let lo = checkpoint_of(&st);
                let upto = lo + (st.applied_seq.saturating_sub(lo)) / 2;
                for c in st.colls.values_mut() {
                    c.catalog.close_older_than(upto.max(lo + 1));
                }
            }
        }
        let work: Vec<(u32, String, Vec<Arc<ClosedBucket>>)> = {
            let mut st = self.state.write();
            st.colls
                .values_mut()
                .filter_map(|c| {
                    let b = c.catalog.take_closed();
                    if b.is_empty() {
                        return None;
                    }
                    c.flushing.extend(b.iter().cloned());
                    Some((c.entry.id, c.entry.options.get_time_field().to_string(), b))
                })
                .collect()
        };
        let mut next = man.clone();
        let mut written = Vec::new();
        for (cid, time_field, buckets) in &work {
            let sid = next.next_segment_id;
            next.next_segment_id += 1;
            let sp = segment_path(&self.path, sid);
            // Finishing closed buckets happens here, off the thread that applies batches.
            let encoded: Vec<EncodedBucket> = buckets.iter().map(|b| b.encoded()).collect();
            let refs: Vec<&EncodedBucket> = encoded.iter().collect();
            let info = SegmentHeaderInfo {
                collection_id: *cid,
                time_field: time_field.clone(),
            };
            let seg = write_encoded_segment(self.vfs.as_ref(), &sp, &info, &refs)
                .and_then(|_| Segment::open(self.vfs.as_ref(), &sp))
                .map(|s| s.with_page_cache(self.page_cache.clone()))
                .inspect_err(|e| self.poison(e))?;
            written.push((*cid, sid, Arc::new(seg), buckets.len()));
        }
        {
            let mut st = self.state.write();
            for (cid, sid, seg, n) in written {
                if let Some(c) = st.colls.get_mut(&cid) {
                    c.add_segment(sid, seg);
                    c.flushing.drain(..n.min(c.flushing.len()));
                    c.entry.segments.push(sid);
                    if let Some(e) = next.collections.iter_mut().find(|e| e.id == cid) {
                        e.segments.push(sid);
                    }
                }
            }
            next.wal_checkpoint = checkpoint_of(&st);
        }
        if next != *man {
            next.generation += 1;
            self.store_manifest(&next)?;
            let upto = next.wal_checkpoint;
            *man = next;
            if let Some(w) = self.wal.read().as_ref() {
                w.reclaim(upto).inspect_err(|e| self.poison(e))?;
            }
        }
        Ok(())
    }

    fn shutdown(&self) -> Result<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_tx.lock().take();
        let threads = [self.flusher.lock().take(), self.ttl_sweeper.lock().take()];
        for h in threads.into_iter().flatten() {
            // A background thread may drop the last handle; it cannot wait for itself.
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
        let wal = self.wal.write().take();
        let r = match wal {
            Some(w) => w.close(),
            None => Ok(()),
        };
        self.lock.lock().take();
        r
    }
}

impl Drop for DbInner {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// The highest sequence number such that every record up to it is wholly in segments.
fn checkpoint_of(st: &Shared) -> u64 {
    let min_mem = st
        .colls
        .values()
        .flat_map(|c| {
            c.catalog
                .min_seq()
                .into_iter()
                .chain(c.flushing.iter().map(|b| b.min_seq()))
        })
        .min();
    match min_mem {
        Some(s) => s.saturating_sub(1),
        None => st.applied_seq,
    }
}

fn fit_limits(o: &DbOptions) -> FitLimits {
    FitLimits {
        max_count: o.limits.max_count,
        max_size: o.limits.max_size,
        min_count: o.limits.min_count,
        large_max_size: o.limits.large_max_size,
    }
}

fn validate_collection_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('\0') || name.starts_with("system.") || name.len() > 255 {
        return Err(Error::InvalidOptions(format!(
            "invalid collection name '{name}': it must be 1-255 bytes, without NUL, and not start with 'system.'"
        )));
    }
    Ok(())
}

/// Opens the segment files at `paths` on up to `threads` threads (most of opening a database
/// of many buckets is decoding their directories); the results are in the order of `paths`.
fn open_segments(vfs: &dyn Vfs, paths: &[PathBuf], threads: usize) -> Vec<Result<Segment>> {
    // A file to a part: files differ in size, and a thread that opened small ones takes more.
    let each: Vec<usize> = (0..paths.len()).collect();
    let parts: Vec<&[usize]> = each.chunks(1).collect();
    let opened = crate::query::parallel::run_claimed(&parts, threads, Vec::new, |done, _, part| {
        done.extend((part.iter()).filter_map(|&i| Some((i, Segment::open(vfs, paths.get(i)?)))));
        Ok::<(), std::convert::Infallible>(())
    });
    let mut done: Vec<(usize, Result<Segment>)> = opened.into_iter().flatten().flatten().collect();
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Adds the (seq, position) of rows logged after `checkpoint` that this segment already holds.
fn collect_logged_rows(
    seg: &Segment,
    checkpoint: u64,
    out: &mut HashSet<(u64, u32)>,
) -> Result<()> {
    for (i, b) in seg.buckets().iter().enumerate() {
        if b.max_seq() <= checkpoint {
            continue;
        }
        let data = seg.read_bucket_columns(i, &[SEQ_COLUMN, IDX_COLUMN])?;
        let col = |n: &str| data.columns.iter().find(|c| c.name == n);
        let (Some(seqs), Some(idxs)) = (col(SEQ_COLUMN), col(IDX_COLUMN)) else {
            return Err(Error::corruption(
                seg.path(),
                0,
                format!("bucket {} lacks its log position columns", b.id),
            ));
        };
        for (s, x) in seqs.values.iter().zip(&idxs.values) {
            if let (Some(Bson::Int64(s)), Some(Bson::Int32(x))) = (s, x) {
                out.insert((*s as u64, *x as u32));
            }
        }
    }
    Ok(())
}

/// A log record decoded and prepared, on its way to the catalog.
struct Replayed {
    seq: u64,
    collection_id: u32,
    payload: Vec<u8>,
    docs: Vec<Prepared>,
}

/// First replay stage: decodes a record and prepares its documents; `None` for records of
/// collections dropped since.
fn prepare_record(
    fields: &BTreeMap<u32, (String, Option<String>)>,
    seq: u64,
    payload: &[u8],
    wal_dir: &Path,
) -> Result<Option<Replayed>> {
    let bad = |d: String| Error::corruption(wal_dir, 0, format!("log record {seq}: {d}"));
    let Some(rec) = decode_insert(payload).map_err(bad)? else {
        return Err(bad("unknown record kind".into()));
    };
    let Some((time, meta)) = fields.get(&rec.collection_id) else {
        return Ok(None);
    };
    let f = Fields {
        time,
        meta: meta.as_deref(),
    };
    let docs = prepare_replayed(payload, &rec, &f).map_err(|e| bad(e.to_string()))?;
    Ok(Some(Replayed {
        seq,
        collection_id: rec.collection_id,
        payload: {
            let mut p = crate::ingest::buffers::take(payload.len());
            p.extend_from_slice(payload);
            p
        },
        docs,
    }))
}

/// Second replay stage: applies prepared records in sequence order, skipping rows that a
/// segment already holds.
fn apply_replayed(
    state: &RwLock<Shared>,
    rx: Receiver<Replayed>,
    in_segments: &HashSet<(u64, u32)>,
) -> Result<()> {
    for r in rx {
        let mut st = state.write();
        st.applied_seq = r.seq;
        let Some(c) = st.colls.get_mut(&r.collection_id) else {
            continue;
        };
        c.catalog.begin_batch();
        for (i, p) in r.docs.iter().enumerate() {
            if in_segments.contains(&(r.seq, i as u32)) {
                continue;
            }
            // prepare_replayed checked every document's bytes: one that does not read now is
            // a bug, and skipping it would lose a durable row without a word.
            let raw = p.raw(&r.payload).ok_or_else(|| {
                Error::Internal(format!(
                    "log record {} row {i} does not read back as prepared",
                    r.seq
                ))
            })?;
            c.catalog.insert(p, raw, r.seq, i as u32);
        }
        drop(st);
        crate::ingest::buffers::give_back(r.payload);
    }
    Ok(())
}

fn make_apply(
    state: Arc<RwLock<Shared>>,
    opts: &DbOptions,
    flush_tx: Sender<()>,
    poisoned: Arc<Mutex<Option<String>>>,
) -> Box<dyn FnMut(u64, Batch, Vec<u8>) + Send> {
    let mem_limit = opts.catalog_memory_limit;
    let flush_bytes = opts.flush_threshold_bytes;
    Box::new(move |seq, batch: Batch, payload: Vec<u8>| {
        let mut st = state.write();
        st.applied_seq = seq;
        let mut want_flush = false;
        if let Some(c) = st.colls.get_mut(&batch.collection_id) {
            c.catalog.begin_batch();
            for (i, p) in batch.docs.iter().enumerate() {
                // The bytes were produced by prepare_batch from valid documents. A row that
                // does not read back is a bug; the record is durable, so the database stops
                // taking writes rather than answer without the row.
                match p.raw(&payload) {
                    Some(raw) => c.catalog.insert(p, raw, seq, i as u32),
                    None => {
                        let e = Error::Internal(format!(
                            "log record {seq} row {i} does not read back as prepared"
                        ));
                        poisoned.lock().get_or_insert_with(|| e.to_string());
                    }
                }
            }
            if c.catalog.memory() > mem_limit {
                c.catalog.close_idle(mem_limit / 10 * 9);
            }
            want_flush = c.catalog.closed_bytes() >= flush_bytes;
        }
        drop(st);
        crate::ingest::buffers::give_back(payload);
        if want_flush {
            // A full channel means a flush is already requested.
            let _ = flush_tx.try_send(());
        }
    })
}

fn spawn_flusher(
    inner: std::sync::Weak<DbInner>,
    rx: Receiver<()>,
    stop: Receiver<()>,
) -> Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name("tsbucket-flush".into())
        .spawn(move || {
            if let Some(db) = inner.upgrade() {
                crate::priority::apply_to_this_thread(db.opts.background_priority);
            }
            let tick = std::time::Duration::from_secs(1);
            loop {
                crossbeam_channel::select! {
                    recv(stop) -> _ => return,
                    recv(rx) -> msg => if msg.is_err() { return },
                    default(tick) => {}
                }
                let Some(db) = inner.upgrade() else { return };
                if db.closed.load(Ordering::Acquire) || db.poisoned.lock().is_some() {
                    continue;
                }
                let need = {
                    let st = db.state.read();
                    st.colls
                        .values()
                        .any(|c| c.catalog.closed_bytes() >= db.opts.flush_threshold_bytes)
                } || db.wal_log_bytes() > db.opts.wal_limit_bytes;
                if need {
                    // Failures poison the database; the next write reports them.
                    let _ = db.flush(false);
                }
            }
        })
        .map_err(Error::Io)
}

/// Counters of a collection's catalog (a copy).
pub(crate) fn catalog_stats(st: &Shared, id: u32) -> Option<CatalogStats> {
    st.colls.get(&id).map(|c| c.catalog.stats().clone())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a panic is a test failure")]
    use super::*;
    use crate::bucket::BucketData;
    use crate::bucket::Column;
    use crate::segment::write_segment;
    use crate::vfs::RealFs;
    use bson::{oid::ObjectId, DateTime};

    /// Segments opened on several threads come back in the order asked, errors in place.
    #[test]
    fn segments_open_in_the_order_listed_whatever_the_threads() {
        let dir = tempfile::tempdir().unwrap();
        let mut paths = Vec::new();
        for k in 0..7u32 {
            let path = dir.path().join(format!("{k}.seg"));
            paths.push(path.clone());
            if k == 4 {
                continue; // listed but missing
            }
            let t = Bson::DateTime(DateTime::from_millis(1_700_000_000_000));
            let b = BucketData {
                id: ObjectId::new(),
                meta: None,
                count: 1,
                min: bson::doc! {"t": t.clone()},
                max: bson::doc! {"t": t.clone()},
                columns: vec![Column {
                    name: "t".into(),
                    values: vec![Some(t)],
                }],
                shapes: vec![vec![0]],
                row_shapes: vec![],
                bson_bytes: None,
            };
            let info = SegmentHeaderInfo {
                collection_id: k,
                time_field: "t".into(),
            };
            write_segment(&RealFs, &path, &info, &[&b]).unwrap();
        }
        for threads in 1..=4 {
            let got = open_segments(&RealFs, &paths, threads);
            assert_eq!(got.len(), paths.len());
            for (k, r) in got.iter().enumerate() {
                match r {
                    Ok(seg) => assert_eq!(seg.info().collection_id, k as u32),
                    Err(e) => assert!(k == 4, "{k}: {e}"),
                }
            }
            assert!(got.get(4).is_some_and(Result::is_err));
        }
        assert!(open_segments(&RealFs, &[], 3).is_empty());
    }
}
