//! Opening a database: for writing (the directory lock, recovery, then the log writer, the
//! applier, the flusher and the TTL sweeper), or for reading only beside a writer.

use super::apply::{make_apply, Verbatim};
use super::flush::spawn_flusher;
use super::recover::{load, load_snapshot, report, Loaded};
use super::state::StateLock;
use super::Engine;
use crate::error::{Error, Result};
use crate::ingest::compact::InsertCompactor;
use crate::ingest::Batch;
use crate::manifest::{LOCK_FILE, SEG_DIR};
use crate::options::DbOptions;
use crate::segment::{PageCache, Segment};
use crate::vfs::{ReadOnlyFs, Vfs};
use crate::wal::codec::Compact;
use crate::wal::{Applied, Quiet};
use parking_lot::{Mutex, RwLock};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

impl Engine {
    /// Opens the database in `path` with `opts`. Takes the directory's exclusive lock first
    /// (`Error::Locked` if another `Database` holds it), then recovers: the manifest, every
    /// segment it lists and the whole log are read and checked, and the log is replayed so every
    /// acknowledged insert is back, open buckets included. Only when all of that succeeded are
    /// leftovers of an interrupted flush removed and the log's torn tail cut
    /// ([`Database::recovery_report`] says what was): an open that fails changes no file.
    pub(crate) fn open(path: &Path, opts: DbOptions) -> Result<Arc<Engine>> {
        let path = path.to_path_buf();
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
        let remove = crate::engine::recover::leftovers(
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
        crate::engine::recover::remove(vfs.as_ref(), &remove)?;
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
        let closed_gauge = Arc::new(AtomicUsize::new(0));
        let apply = make_apply(
            state.clone(),
            &opts,
            (flush_tx.clone(), closed_gauge.clone()),
            poisoned.clone(),
        );
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
                .map(|(&id, c)| (id, Arc::new(c.schema().clone())))
                .collect()
        };
        let inner = Arc::new(Engine {
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
            closed_gauge,
            flush_kick: Some(flush_tx),
            stop_tx: Mutex::new(Some(stop_tx)),
            flusher: Mutex::new(None),
            ttl_sweeper: Mutex::new(None),
            lock: Mutex::new(Some(lock)),
            recovery: Mutex::new(report),
            read_only: false,
        });
        if let Some(every) = inner.opts.ttl_interval {
            let h =
                crate::engine::ttl::spawn_sweeper(Arc::downgrade(&inner), every, stop_rx.clone())?;
            *inner.ttl_sweeper.lock() = Some(h);
        }
        let handle = spawn_flusher(Arc::downgrade(&inner), flush_rx, stop_rx)?;
        *inner.flusher.lock() = Some(handle);
        Ok(inner)
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
    pub(crate) fn open_read_only(path: &Path, opts: DbOptions) -> Result<Arc<Engine>> {
        let path = path.to_path_buf();
        let vfs: Arc<dyn Vfs> = Arc::new(ReadOnlyFs::new(opts.vfs.clone()));
        let page_cache = Arc::new(PageCache::new(opts.page_cache_bytes));
        let loaded = load_snapshot(&path, &opts, &vfs, &page_cache, &BTreeMap::new())?;
        let report = report(&loaded.manifest, &loaded.log, Vec::new());
        let inner = Arc::new(Engine {
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
            closed_gauge: Arc::default(),
            flush_kick: None,
            stop_tx: Mutex::new(None),
            flusher: Mutex::new(None),
            ttl_sweeper: Mutex::new(None),
            lock: Mutex::new(None),
            recovery: Mutex::new(report),
            read_only: true,
        });
        Ok(inner)
    }

    /// Moves a database opened with [`Database::open_read_only`] to the writer's latest
    /// acknowledged state: the manifest, segments and log are read again (segments already
    /// open are kept). Cursors opened before go on reading what they were opened on. On a
    /// database opened for writing it does nothing: that one always sees its latest state.
    pub(crate) fn refresh(&self) -> Result<()> {
        self.check_open()?;
        if !self.read_only {
            return Ok(());
        }
        let inner = self;
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
}
