//! What an open found and did to bring a database back ([`RecoveryReport`]), and which files
//! left by an interrupted flush, rewrite or manifest write it may remove.
//!
//! Open changes nothing on disk until recovery has fully succeeded: the manifest, every listed
//! segment and the whole log are read and checked first, and only then are leftovers removed
//! and the log's torn tail cut. A failing open therefore leaves every file as it was.

use crate::error::{Error, Result};
use crate::manifest::{parse_segment_name, Manifest, MANIFEST_FILE};
use crate::segment::Segment;
use crate::vfs::Vfs;
use crate::wal::DroppedTail;
use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

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
