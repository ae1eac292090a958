//! Recovery: reads every WAL file in order, validates it, and decides what is a torn tail
//! (discarded) and what is corruption (refused).
//!
//! The rule (format-spec/wal.md, "Reader rules"): only the end of the *last* file can hold bytes
//! of a write that was never acknowledged, so only there may a bad record be discarded, and only
//! if nothing valid that continues the sequence follows it. Anything else damaged means that
//! acknowledged data is lost, and open refuses with `Error::Corruption` naming file and offset.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use super::codec::Expand;
use super::record::FORMAT_VERSION;
use super::record::{
    decode_file_header, decode_record, may_start_record, BadRecord, HeaderError, FILE_HEADER_LEN,
    KIND_COMPACT, RECORD_HEADER_LEN,
};
use crate::vfs::{FileBytes, Vfs};
use crate::{Error, Result};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// One WAL file, known by the sequence number of its first record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalFile {
    /// Seq of the first record the file holds (or would hold, if empty).
    pub first_seq: u64,
    /// Full path.
    pub path: PathBuf,
}

/// File name of the WAL file whose first record is `seq`.
pub fn file_name(seq: u64) -> String {
    format!("{seq:020}.log")
}

/// Parses a WAL file name; `None` for names that are not ours.
fn parse_name(name: &str) -> Option<u64> {
    seq_of_name(name, ".log")
}

/// The seq in a name of 20 decimal digits followed by `suffix`; `None` for any other name.
pub fn seq_of_name(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The WAL files in `dir`, oldest first. Other names are ignored.
pub fn list_files(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<WalFile>> {
    let mut files: Vec<WalFile> = vfs
        .list_dir(dir)?
        .iter()
        .filter_map(|n| {
            parse_name(n).map(|first_seq| WalFile {
                first_seq,
                path: dir.join(n),
            })
        })
        .collect();
    files.sort_by_key(|f| f.first_seq);
    if let Some(f) = files.first().filter(|f| f.first_seq == 0) {
        return Err(Error::corruption(
            &f.path,
            0,
            "WAL file named for seq 0; seqs start at 1",
        ));
    }
    Ok(files)
}

/// What the writer must do to the last file before appending to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailFix {
    /// The file ends exactly after its last valid record.
    None,
    /// Cut the file to this length (a torn or garbage tail).
    Truncate(u64),
    /// The header itself is torn and no record follows: rewrite the file as a fresh header.
    RewriteHeader,
}

/// What the bytes a recovery cut from the end of the last file were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailKind {
    /// Zeros: space written ahead of the records and never used. Nothing was lost.
    Zeros,
    /// The start of a record of this file that is not intact: a write that the crash
    /// interrupted (under `SyncMode::Always` it was never acknowledged), or damage to the last
    /// record.
    TornRecord,
    /// Bytes of an earlier use of a reused file (records of another salt, or parts of them).
    Reused,
    /// Anything else in a file created empty: bytes a power loss left unsynced, or damage.
    Garbage,
}

impl std::fmt::Display for TailKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TailKind::Zeros => "zeros written ahead",
            TailKind::TornRecord => "an incomplete or damaged record",
            TailKind::Reused => "bytes of the file's earlier use",
            TailKind::Garbage => "bytes that are not a record",
        })
    }
}

/// Bytes cut from the end of the last log file by a recovery (the torn-tail rule).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedTail {
    /// The file.
    pub path: PathBuf,
    /// Where the cut bytes start: the end of the last intact record.
    pub offset: u64,
    /// How many bytes were cut.
    pub bytes: u64,
    /// What they were.
    pub kind: TailKind,
}

impl DroppedTail {
    /// True when the cut bytes may have held a record: a torn write, or damage. Zeros and the
    /// bytes of a reused file's earlier use are what every crash leaves and hold none.
    pub fn may_hold_a_record(&self) -> bool {
        matches!(self.kind, TailKind::TornRecord | TailKind::Garbage)
    }
}

/// What bytes `buf[pos..]` of a file whose salt is `salt` are, once they are known to hold
/// no intact record of the file.
fn tail_kind(buf: &[u8], pos: usize, salt: u32) -> TailKind {
    let rest = buf.get(pos..).unwrap_or_default();
    if rest.iter().all(|&b| b == 0) {
        TailKind::Zeros
    } else if may_start_record(buf, pos, Some(salt)) {
        TailKind::TornRecord
    } else if salt != 0 {
        // Files started in a spare have a nonzero salt; what follows their last record is
        // the spare's old content.
        TailKind::Reused
    } else {
        TailKind::Garbage
    }
}

/// The outcome of a successful recovery.
#[derive(Debug)]
pub struct Recovery {
    /// Every WAL file, oldest first (including files whose records are all checkpointed).
    pub files: Vec<WalFile>,
    /// Seq of the last valid record read, or `first_seq - 1` of the first file read, or 0.
    pub last_seq: u64,
    /// What to do to the last file.
    pub tail: TailFix,
    /// The last file's salt (0 when it has no readable header: it is rewritten as new).
    pub last_salt: u32,
    /// The last file's format version (the current one when it is rewritten as new).
    pub last_version: u32,
    /// Records handed to `replay`.
    pub replayed: u64,
    /// What the torn-tail rule cut from the last file, if anything.
    pub dropped: Option<DroppedTail>,
}

/// A record found by the scan: which mapped file, which bytes.
struct Found {
    file: usize,
    seq: u64,
    kind: u8,
    payload: Range<usize>,
}

/// Scans `buf` from `from` for any intact record with `seq >= min_seq`; returns its offset.
///
/// Used after a bad record in the last file: such a record proves that data written *after*
/// the damage exists, so the damage is not a torn tail. Bounded by the buffer; the kind-word
/// pre-check keeps it about one comparison per byte.
///
/// `salt` is the file's (`None` when its header is unreadable): records of an earlier use of
/// a recycled file carry another salt and are not looked at.
fn valid_record_after(
    buf: &[u8],
    from: usize,
    min_seq: u64,
    salt: Option<u32>,
    max: usize,
) -> Option<usize> {
    let last_start = buf.len().checked_sub(RECORD_HEADER_LEN)?;
    (from..=last_start).find(|&q| {
        may_start_record(buf, q, salt)
            && match decode_record(buf, q, salt, max) {
                Ok(r) => r.seq >= min_seq,
                // A complete, checksummed record over the size limit is still a real record.
                Err(BadRecord::Oversize { .. }) => true,
                Err(_) => false,
            }
    })
}

/// Recovers the WAL in `dir`: validates every file that may hold a record after `checkpoint`,
/// then, only if all is well, calls `replay` for each record with seq > `checkpoint` in order.
/// Compacted records are expanded by `expand` first; without one, a compacted record is
/// corruption.
///
/// Files whose records are all at or below the checkpoint (their successor starts at or before
/// `checkpoint + 1`) are not read: they are obsolete and only wait for `reclaim`.
///
/// With `strict`, a last file whose cut tail may have held a record
/// ([`DroppedTail::may_hold_a_record`]) is refused as `Corruption` instead of cut.
///
/// Nothing on disk is changed: the caller applies [`Recovery::tail`] once it decides to go on.
pub fn recover(
    vfs: &dyn Vfs,
    dir: &Path,
    max_record_bytes: usize,
    checkpoint: u64,
    strict: bool,
    replay: &mut dyn FnMut(u64, &[u8]) -> Result<()>,
    mut expand: Option<&mut dyn Expand>,
) -> Result<Recovery> {
    let files = match vfs.exists(dir) {
        true => list_files(vfs, dir)?,
        false => Vec::new(),
    };
    let Some(first) = files.first() else {
        return Ok(Recovery {
            files,
            last_seq: checkpoint,
            tail: TailFix::None,
            last_salt: 0,
            last_version: FORMAT_VERSION,
            replayed: 0,
            dropped: None,
        });
    };
    let start_seq = checkpoint.saturating_add(1);
    if first.first_seq > start_seq {
        return Err(Error::corruption(
            &first.path,
            0,
            format!(
                "records {start_seq}..{} are missing (the checkpoint is {checkpoint})",
                first.first_seq - 1
            ),
        ));
    }
    // The newest file that starts at or before the first record we need.
    let start = files
        .iter()
        .rposition(|f| f.first_seq <= start_seq)
        .unwrap_or(0);

    let mut maps: Vec<FileBytes> = Vec::new();
    let mut found: Vec<Found> = Vec::new();
    let mut expected = files.get(start).map_or(start_seq, |f| f.first_seq);
    let mut tail = TailFix::None;
    let mut dropped = None;
    let mut last_salt = 0;
    let mut last_version = FORMAT_VERSION;
    let n = files.len();
    for (i, f) in files.iter().enumerate().skip(start) {
        let is_last = i + 1 == n;
        if f.first_seq != expected {
            return Err(Error::corruption(
                &f.path,
                0,
                format!(
                    "file starts at seq {} but the previous file ends at seq {}; records are missing",
                    f.first_seq,
                    expected - 1
                ),
            ));
        }
        let buf = vfs.map(&f.path)?;
        let idx = maps.len();
        let salt = match decode_file_header(&buf) {
            Ok(h) if h.first_seq == f.first_seq => {
                last_version = h.version;
                h.salt
            }
            Ok(h) => {
                return Err(Error::corruption(
                    &f.path,
                    0,
                    format!(
                        "file header says first seq {}, the file name says {}",
                        h.first_seq, f.first_seq
                    ),
                ))
            }
            // The header's checksum held, so these fields are what was written: a newer
            // format, or a file that is not ours. Rewriting it as torn would drop its records.
            Err(e @ (HeaderError::Version(_) | HeaderError::Length(_) | HeaderError::Salt(_))) => {
                return Err(Error::corruption(&f.path, 0, e));
            }
            Err(e) => {
                // A rotation that crashed before its header was synced leaves a last file with a
                // torn header and no records: recreate it. With a record after it, the header
                // was damaged later and acknowledged data is at stake. The salt is unknown, so
                // a record of any salt counts; records of an earlier use of the file have seqs
                // below the file's first.
                if is_last
                    && valid_record_after(&buf, 0, expected, None, max_record_bytes).is_none()
                {
                    let kind = match buf.iter().all(|&b| b == 0) {
                        true => TailKind::Zeros,
                        false => TailKind::Garbage,
                    };
                    let cut = DroppedTail {
                        path: f.path.clone(),
                        offset: 0,
                        bytes: buf.len() as u64,
                        kind,
                    };
                    if strict && cut.may_hold_a_record() {
                        return Err(Error::corruption(
                            &f.path,
                            0,
                            format!(
                                "{e}: a torn file header, which strict recovery refuses to rewrite"
                            ),
                        ));
                    }
                    tail = TailFix::RewriteHeader;
                    dropped = Some(cut).filter(|c| c.bytes > 0);
                    break;
                }
                return Err(Error::corruption(&f.path, 0, e));
            }
        };
        last_salt = salt;
        let mut pos = FILE_HEADER_LEN;
        while pos < buf.len() {
            let bad = match decode_record(&buf, pos, Some(salt), max_record_bytes) {
                Ok(r) if r.seq == expected => {
                    found.push(Found {
                        file: idx,
                        seq: r.seq,
                        kind: r.kind,
                        payload: r.end - r.payload.len()..r.end,
                    });
                    expected += 1;
                    pos = r.end;
                    continue;
                }
                Ok(r) => format!("record has seq {}, expected {expected}", r.seq),
                Err(e @ BadRecord::Oversize { .. }) => {
                    return Err(Error::corruption(&f.path, pos as u64, e));
                }
                Err(e) => e.to_string(),
            };
            if !is_last {
                return Err(Error::corruption(
                    &f.path,
                    pos as u64,
                    format!("{bad} (in a file that is not the last one)"),
                ));
            }
            // From `pos` itself: an intact record there with a seq beyond `expected` also
            // proves records are missing.
            if let Some(q) = valid_record_after(&buf, pos, expected, Some(salt), max_record_bytes) {
                return Err(Error::corruption(
                    &f.path,
                    pos as u64,
                    format!("{bad}; an intact record at offset {q} continues the log, so this is not a torn tail"),
                ));
            }
            // A torn or garbage tail: it can only hold writes that were never acknowledged.
            let cut = DroppedTail {
                path: f.path.clone(),
                offset: pos as u64,
                bytes: (buf.len() - pos) as u64,
                kind: tail_kind(&buf, pos, salt),
            };
            if strict && cut.may_hold_a_record() {
                return Err(Error::corruption(
                    &f.path,
                    pos as u64,
                    format!(
                        "{bad}: the log ends in {} ({} bytes), which strict recovery refuses to \
                         cut; open without strict recovery to keep the records before it",
                        cut.kind, cut.bytes
                    ),
                ));
            }
            tail = TailFix::Truncate(pos as u64);
            dropped = Some(cut);
            break;
        }
        maps.push(buf);
    }

    // Everything validated: only now hand records to the caller, so a failed open never
    // leaves the caller with a partial replay of a log it must refuse.
    let mut expanded = Vec::new();
    let mut file_of_last = None;
    let mut replayed = 0;
    for r in &found {
        let compact = r.kind == KIND_COMPACT;
        // A compacted record may refer to any earlier record of its file, so every one of
        // them is expanded in order, those at or below the checkpoint too.
        if r.seq <= checkpoint && !compact {
            continue;
        }
        let stored = maps
            .get(r.file)
            .and_then(|m| m.get(r.payload.clone()))
            .ok_or_else(|| Error::Internal("WAL recovery lost track of a record".into()))?;
        let payload = if compact {
            let path = files.get(start + r.file).map_or(dir, |f| f.path.as_path());
            let at = r.payload.start.saturating_sub(RECORD_HEADER_LEN) as u64;
            let Some(x) = expand.as_deref_mut() else {
                return Err(Error::corruption(
                    path,
                    at,
                    "a compacted record, and no expander for it",
                ));
            };
            if file_of_last != Some(r.file) {
                x.reset();
                file_of_last = Some(r.file);
            }
            expanded.clear();
            x.expand(stored, max_record_bytes, &mut expanded)
                .map_err(|e| Error::corruption(path, at, format!("compacted record: {e}")))?;
            expanded.as_slice()
        } else {
            stored
        };
        if r.seq > checkpoint {
            replay(r.seq, payload)?;
            replayed += 1;
        }
    }
    if tail == TailFix::RewriteHeader {
        last_salt = 0;
        last_version = FORMAT_VERSION;
    }
    Ok(Recovery {
        files,
        last_seq: expected - 1,
        tail,
        last_salt,
        last_version,
        replayed,
        dropped,
    })
}
