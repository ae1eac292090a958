//! The reading phase of an open ([`load`]): the manifest, every listed segment and the whole
//! log, replayed into the catalog in memory; what an open found and did ([`RecoveryReport`]);
//! and which files left by an interrupted flush, rewrite or manifest write it may remove.
//!
//! Open changes nothing on disk until recovery has fully succeeded: the manifest, every listed
//! segment and the whole log are read and checked first, and only then are leftovers removed
//! and the log's torn tail cut. A failing open therefore leaves every file as it was.

use super::state::Shared;
use crate::bucket::{IDX_COLUMN, SEQ_COLUMN};
use crate::catalog::FitLimits;
use crate::catalog::Prepared;
use crate::collstate::CollState;
use crate::error::{Error, Result};
use crate::ingest::compact::InsertExpander;
use crate::ingest::{decode_insert, prepare_replayed};
use crate::manifest::WAL_DIR;
use crate::manifest::{parse_segment_name, segment_path, Manifest, MANIFEST_FILE};
use crate::options::DbOptions;
use crate::schema::Schema;
use crate::segment::{PageCache, Segment};
use crate::vfs::Vfs;
use crate::wal::{DroppedTail, RecoveredLog, WalOptions};
use bson::Bson;
use crossbeam_channel::Receiver;
use parking_lot::RwLock;
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What [`crate::Database::open`] found and did to bring the database back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The manifest's log checkpoint: every record at or below it is in segments.
    pub checkpoint: u64,
    /// Log files found (reclaimable ones included).
    pub log_files: usize,
    /// Log records replayed into open buckets (those above the checkpoint).
    pub records_replayed: u64,
    /// Sequence number of the last intact log record (the checkpoint if the log holds none
    /// above it).
    pub last_seq: u64,
    /// Bytes cut from the end of the last log file: what a crash left after the last intact
    /// record. Under [`crate::SyncMode::Always`] they never hold an acknowledged insert; see
    /// [`DroppedTail::may_hold_a_record`] and [`crate::WalRecovery`].
    pub dropped_tail: Option<DroppedTail>,
    /// Files removed as leftovers of an interrupted flush, rewrite, sweep or manifest write.
    pub removed: Vec<PathBuf>,
}

impl fmt::Display for RecoveryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "log: {} file(s), checkpoint {}, last record {}, {} record(s) replayed",
            self.log_files, self.checkpoint, self.last_seq, self.records_replayed
        )?;
        match &self.dropped_tail {
            None => write!(f, "; no torn tail")?,
            Some(t) => write!(
                f,
                "; cut {} byte(s) of {} at offset {} of {}",
                t.bytes,
                t.kind,
                t.offset,
                t.path.display()
            )?,
        }
        if !self.removed.is_empty() {
            write!(f, "; removed {} leftover file(s):", self.removed.len())?;
            for p in &self.removed {
                write!(f, " {}", p.display())?;
            }
        }
        Ok(())
    }
}

/// The files an open may remove once recovery has succeeded: only those the crash model proves
/// are leftovers. Reads what it needs and changes nothing; an unlisted segment it cannot prove
/// is a leftover fails the open.
///
/// - `MANIFEST.tmp` and `seg/*.seg.tmp`: a write-then-rename that did not finish.
/// - An unlisted segment whose id is below the manifest's next segment id: a manifest stopped
///   listing it (drop, sweep, rewrite), so nothing needs it.
/// - An unlisted segment at or above that id: written by a flush or a rewrite whose manifest
///   write did not happen. Its rows are in the log (a flush's are above the checkpoint, and the
///   log was just checked to reach from the checkpoint to `log_end`) or in listed segments (a
///   rewrite's are copies). A row above `log_end` would be one the log lost: `Corruption` when
///   `log_must_hold_rows` (`SyncMode::Always`, where a flushed row was synced to the log
///   first), else the segment goes with the unsynced log records it held.
///
/// Any other name in `seg/` is not ours and is kept.
pub(crate) fn leftovers(
    vfs: &dyn Vfs,
    db: &Path,
    seg_dir: &Path,
    man: &Manifest,
    log_end: u64,
    log_must_hold_rows: bool,
) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let tmp = db.join(format!("{MANIFEST_FILE}.tmp"));
    if vfs.exists(&tmp) {
        out.push(tmp);
    }
    if !vfs.exists(seg_dir) {
        return Ok(out);
    }
    let live: HashSet<u64> = man
        .collections
        .iter()
        .flat_map(|c| c.segments.iter().copied())
        .collect();
    for name in vfs.list_dir(seg_dir)? {
        let path = seg_dir.join(&name);
        if name
            .strip_suffix(".tmp")
            .is_some_and(|n| parse_segment_name(n).is_some())
        {
            out.push(path);
            continue;
        }
        let Some(id) = parse_segment_name(&name) else {
            continue;
        };
        if live.contains(&id) {
            continue;
        }
        if id >= man.next_segment_id {
            let seg = Segment::open(vfs, &path).map_err(|e| match e {
                // An I/O error says nothing about the file; it is reported as it is.
                Error::Corruption { offset, detail, .. } => Error::corruption(
                    &path,
                    offset,
                    format!(
                        "segment file the manifest does not list and that cannot be read \
                         ({detail}); move it out of seg/ to open the database"
                    ),
                ),
                e => e,
            })?;
            let newest = seg.buckets().iter().map(|b| b.max_seq()).max().unwrap_or(0);
            if newest > log_end && log_must_hold_rows {
                return Err(Error::corruption(
                    &path,
                    0,
                    format!(
                        "segment file the manifest does not list holds rows of log record \
                         {newest}, but the log ends at record {log_end}: log records are missing"
                    ),
                ));
            }
        }
        out.push(path);
    }
    Ok(out)
}

/// Removes `files` (the leftovers [`leftovers`] found) and syncs the directories they were in.
pub(crate) fn remove(vfs: &dyn Vfs, files: &[PathBuf]) -> Result<()> {
    let mut dirs: Vec<&Path> = Vec::new();
    for f in files {
        vfs.remove_file(f)?;
        if let Some(d) = f.parent() {
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    for d in dirs {
        vfs.sync_dir(d)?;
    }
    Ok(())
}

/// What the reading phase of an open found, before anything on disk is changed.
pub(super) struct Loaded {
    /// No manifest yet: a new database, whose first manifest is `manifest`.
    pub(super) is_new: bool,
    pub(super) manifest: Manifest,
    pub(super) shared: Shared,
    pub(super) log: RecoveredLog,
}

/// The reading phase of an open: reads and checks the manifest, every listed segment (those in
/// `reuse` are taken as they are) and the whole log, and replays the log into the catalog in
/// memory. Changes nothing on disk. `read_only` refuses a directory without a manifest and
/// reads the log leniently (a writer may be in the middle of a write).
pub(super) fn load(
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

    let limits = FitLimits::of(opts);
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
    let fields: BTreeMap<u32, Schema> = manifest
        .collections
        .iter()
        .map(|c| (c.id, Schema::of(&c.options)))
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
pub(super) fn report(
    manifest: &Manifest,
    log: &RecoveredLog,
    removed: Vec<PathBuf>,
) -> RecoveryReport {
    RecoveryReport {
        checkpoint: manifest.wal_checkpoint,
        log_files: log.files(),
        records_replayed: log.replayed(),
        last_seq: log.last_seq(),
        dropped_tail: log.dropped().cloned(),
        removed,
    }
}

/// Pauses a reader takes over damage it finds before reporting it (2, 4, ... 64 ms).
const SETTLE_TRIES: u32 = 6;

/// [`load`] for a reader beside a writer. The writer may commit a manifest, delete the files it
/// no longer lists and reclaim its log while the reader reads them, so a failure is retried
/// with the manifest read again whenever that manifest has changed meanwhile. A log record
/// being written can also look damaged with an intact record after it: the reader may read a
/// page before the writer copies into it and the page after once the writer has (the log's
/// files are made ahead or reused, so the reader is not stopped at their end). So damage is
/// read again after short pauses, and reported only when it stays: a write settles in
/// microseconds.
pub(super) fn load_snapshot(
    path: &Path,
    opts: &DbOptions,
    vfs: &Arc<dyn Vfs>,
    page_cache: &Arc<PageCache>,
    reuse: &BTreeMap<u64, Arc<Segment>>,
) -> Result<Loaded> {
    let manifest_path = path.join(crate::manifest::MANIFEST_FILE);
    let (mut tries, mut settling) = (0, 0u32);
    loop {
        let before = vfs.read(&manifest_path).ok();
        match load(path, opts, vfs, page_cache, reuse, true) {
            Ok(l) => return Ok(l),
            Err(e) => {
                tries += 1;
                let after = vfs.read(&manifest_path).ok();
                if before != after && tries < 100 {
                    continue;
                }
                if matches!(e, Error::Corruption { .. }) && settling < SETTLE_TRIES {
                    std::thread::sleep(std::time::Duration::from_millis(2 << settling));
                    settling += 1;
                    continue;
                }
                return Err(e);
            }
        }
    }
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
    fields: &BTreeMap<u32, Schema>,
    seq: u64,
    payload: &[u8],
    wal_dir: &Path,
) -> Result<Option<Replayed>> {
    let bad = |d: String| Error::corruption(wal_dir, 0, format!("log record {seq}: {d}"));
    let Some(rec) = decode_insert(payload).map_err(bad)? else {
        return Err(bad("unknown record kind".into()));
    };
    let Some(schema) = fields.get(&rec.collection_id) else {
        return Ok(None);
    };
    let docs = prepare_replayed(payload, &rec, schema).map_err(|e| bad(e.to_string()))?;
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code: a panic is a test failure")]
    use super::*;
    use crate::bucket::BucketData;
    use crate::bucket::Column;
    use crate::segment::{write_segment, SegmentHeaderInfo};
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
