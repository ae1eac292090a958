//! Recovery never destroys and never loses data without a word: an open that fails leaves
//! every file byte for byte as it was; a log that is gone or does not reach back to the
//! checkpoint is refused; what a successful open cut from the log's tail and which leftovers
//! it removed is reported; strict recovery refuses a tail that may have held a record.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use tsbucket::bson::doc;
use tsbucket::{Database, DbOptions, Error, TailKind, WalRecovery};

fn options() -> DbOptions {
    DbOptions {
        ttl_interval: None,
        ..DbOptions::default()
    }
}

fn strict() -> DbOptions {
    DbOptions {
        wal_recovery: WalRecovery::AbsoluteConsistency,
        ..options()
    }
}

fn open(dir: &Path) -> tsbucket::Result<Database> {
    Database::open_with(dir, options())
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// Opens `dir` with `opts`, which must fail with `Corruption` naming a path for which `named`
/// holds, and checks that no file changed, appeared or disappeared.
fn assert_open_refused_untouched(
    dir: &Path,
    opts: DbOptions,
    named: impl Fn(&Path) -> bool,
) -> String {
    let before = snapshot(dir);
    let detail = match Database::open_with(dir, opts) {
        Err(Error::Corruption { path, detail, .. }) => {
            assert!(named(&path), "{}: {detail}", path.display());
            detail
        }
        Err(e) => panic!("open failed with another error: {e}"),
        Ok(_) => panic!("open succeeded"),
    };
    let after = snapshot(dir);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "a failed open added or removed files ({detail})"
    );
    for (p, b) in &before {
        assert!(after[p] == *b, "a failed open changed {}", p.display());
    }
    detail
}

/// A database with `batches` batches of 50 in collection "a", closed, never flushed.
fn logged_only(dir: &Path, batches: i64) {
    let db = open(dir).unwrap();
    let c = db.create_collection("a", ts_options()).unwrap();
    for b in 1..=batches {
        c.insert_many(&batch_docs(1, b, 50, 3)).unwrap();
    }
    db.close().unwrap();
}

fn count(db: &Database) -> u64 {
    db.collection("a")
        .unwrap()
        .count_documents(doc! {})
        .unwrap()
}

fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect();
    v.sort();
    v
}

/// Offsets and lengths of the records of a log file (24-byte headers, length at bytes 4..8).
fn records(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut pos = 32;
    while pos + 24 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[pos + 4..pos + 8].try_into().unwrap()) as usize;
        if len == 0 && bytes[pos..pos + 24].iter().all(|&b| b == 0) {
            break;
        }
        out.push((pos, 24 + len));
        pos += 24 + len;
    }
    out
}

fn seg_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir.join("seg"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn an_older_manifest_put_back_fails_the_open_and_deletes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let db = open(dir).unwrap();
    let c = db.create_collection("a", ts_options()).unwrap();
    c.insert_many(&batch_docs(1, 1, 200, 3)).unwrap();
    db.flush().unwrap();
    let old_manifest = fs::read(dir.join("MANIFEST")).unwrap();
    c.insert_many(&batch_docs(1, 2, 200, 3)).unwrap();
    db.flush().unwrap();
    c.insert_many(&batch_docs(1, 3, 100, 3)).unwrap();
    db.close().unwrap();
    let new_manifest = fs::read(dir.join("MANIFEST")).unwrap();

    // A restored backup or a rolled-back snapshot of the manifest alone.
    fs::write(dir.join("MANIFEST"), &old_manifest).unwrap();
    let detail = assert_open_refused_untouched(dir, options(), |p| p.starts_with(dir.join("wal")));
    assert!(detail.contains("missing"), "{detail}");

    // Nothing was lost: the right manifest opens with every row.
    fs::write(dir.join("MANIFEST"), &new_manifest).unwrap();
    let db = open(dir).unwrap();
    assert_eq!(count(&db), 500);
    db.verify().unwrap();
    db.close().unwrap();
}

#[test]
fn a_missing_log_directory_is_refused_not_recreated() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    logged_only(dir, 4);
    let wal = dir.join("wal");
    let aside = dir.join("wal-aside");
    fs::rename(&wal, &aside).unwrap();
    let detail = assert_open_refused_untouched(dir, options(), |p| p == wal);
    assert!(detail.contains("log is missing"), "{detail}");
    assert!(!wal.exists(), "the open recreated the log directory");
    fs::rename(&aside, &wal).unwrap();
    let db = open(dir).unwrap();
    assert_eq!(count(&db), 200);
    db.close().unwrap();
}

#[test]
fn deleted_log_files_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    logged_only(dir, 4);
    let logs = log_files(dir);
    // Every file gone, the directory kept.
    let saved: Vec<(PathBuf, Vec<u8>)> = logs
        .iter()
        .map(|p| (p.clone(), fs::read(p).unwrap()))
        .collect();
    for p in &logs {
        fs::remove_file(p).unwrap();
    }
    assert_open_refused_untouched(dir, options(), |p| p == dir.join("wal"));
    for (p, b) in &saved {
        fs::write(p, b).unwrap();
    }
    let db = open(dir).unwrap();
    assert_eq!(count(&db), 200);
    db.close().unwrap();
}

#[test]
fn a_new_database_whose_log_was_never_created_opens() {
    // A crash after the first manifest was written and before the log's first file was: no
    // change was ever committed, so nothing can be missing.
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    open(dir).unwrap().close().unwrap();
    fs::remove_dir_all(dir.join("wal")).unwrap();
    let db = open(dir).unwrap();
    let c = db.create_collection("a", ts_options()).unwrap();
    c.insert_many(&batch_docs(1, 1, 10, 2)).unwrap();
    db.close().unwrap();
    let db = open(dir).unwrap();
    assert_eq!(count(&db), 10);
    db.close().unwrap();
}

#[test]
fn a_torn_record_at_the_end_is_cut_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    logged_only(dir, 3);
    let last = log_files(dir).pop().unwrap();
    let bytes = fs::read(&last).unwrap();
    let (at, len) = *records(&bytes).last().unwrap();
    // The start of a copy of the last record: what a write interrupted by a crash leaves.
    let torn = bytes[at..at + len / 2].to_vec();
    let mut damaged = bytes.clone();
    damaged.extend_from_slice(&torn);
    fs::write(&last, &damaged).unwrap();

    // Strict recovery refuses it and changes nothing.
    let detail = assert_open_refused_untouched(dir, strict(), |p| p == last);
    assert!(detail.contains("strict"), "{detail}");

    let db = open(dir).unwrap();
    assert_eq!(count(&db), 150);
    let r = db.recovery_report();
    let cut = r.dropped_tail.as_ref().expect("the cut is reported");
    assert_eq!(cut.path, last);
    assert_eq!(cut.offset, bytes.len() as u64);
    assert_eq!(cut.bytes, torn.len() as u64);
    assert_eq!(cut.kind, TailKind::TornRecord);
    assert!(cut.may_hold_a_record());
    assert_eq!(r.records_replayed, 3, "{r}");
    db.close().unwrap();
    assert_eq!(fs::read(&last).unwrap(), bytes, "the tail was not cut");
}

#[test]
fn zeros_after_the_last_record_are_cut_even_by_strict_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    logged_only(dir, 2);
    let last = log_files(dir).pop().unwrap();
    let mut bytes = fs::read(&last).unwrap();
    let end = bytes.len() as u64;
    bytes.extend_from_slice(&[0; 4096]);
    fs::write(&last, &bytes).unwrap();
    let db = Database::open_with(dir, strict()).unwrap();
    assert_eq!(count(&db), 100);
    let cut = db.recovery_report().dropped_tail.unwrap();
    assert_eq!(
        (cut.offset, cut.bytes, cut.kind),
        (end, 4096, TailKind::Zeros)
    );
    assert!(!cut.may_hold_a_record());
    db.close().unwrap();
}

#[test]
fn garbage_after_the_last_record_is_reported_and_refused_by_strict_recovery() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    logged_only(dir, 2);
    let last = log_files(dir).pop().unwrap();
    let mut bytes = fs::read(&last).unwrap();
    bytes.extend_from_slice(&[0x5a; 300]);
    fs::write(&last, &bytes).unwrap();
    assert_open_refused_untouched(dir, strict(), |p| p == last);
    let db = open(dir).unwrap();
    assert_eq!(count(&db), 100);
    let cut = db.recovery_report().dropped_tail.unwrap();
    assert_eq!((cut.bytes, cut.kind), (300, TailKind::Garbage));
    db.close().unwrap();
}

#[test]
fn a_clean_log_reports_no_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    logged_only(dir, 2);
    let db = Database::open_with(dir, strict()).unwrap();
    let r = db.recovery_report();
    assert_eq!(r.dropped_tail, None, "{r}");
    assert!(r.removed.is_empty(), "{r}");
    assert_eq!(r.records_replayed, 2);
    assert!(r.to_string().contains("2 record(s) replayed"), "{r}");
    db.close().unwrap();
}

#[test]
fn damage_to_a_record_that_a_later_record_proves_acknowledged_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    logged_only(dir, 3);
    let last = log_files(dir).pop().unwrap();
    let bytes = fs::read(&last).unwrap();
    let recs = records(&bytes);
    let (at, len) = recs[recs.len() - 2];
    let mut damaged = bytes.clone();
    damaged[at + len - 1] ^= 0x40;
    fs::write(&last, &damaged).unwrap();
    for opts in [options(), strict()] {
        assert_open_refused_untouched(dir, opts, |p| p == last);
    }
}

/// A copy of `dir` in which one more batch was inserted and everything flushed: its newest
/// segment holds rows of log records up to `batches + 2`.
fn flushed_copy(dir: &Path, batches: i64) -> PathBuf {
    let copy = dir.with_extension("copy");
    fs::create_dir_all(copy.join("wal")).unwrap();
    fs::create_dir_all(copy.join("seg")).unwrap();
    for (p, b) in snapshot(dir) {
        fs::write(copy.join(p.strip_prefix(dir).unwrap()), b).unwrap();
    }
    let db = open(&copy).unwrap();
    let c = db.collection("a").unwrap();
    c.insert_many(&batch_docs(1, batches + 1, 50, 3)).unwrap();
    db.flush().unwrap();
    db.close().unwrap();
    copy
}

#[test]
fn a_segment_newer_than_the_manifest_is_removed_when_the_log_holds_its_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    logged_only(&dir, 3);
    // What a crash between a flush's segment rename and its manifest write leaves: the
    // segment holds rows the log also holds. Made by flushing a copy without its last batch.
    let before = tmp.path().join("before");
    logged_only(&before, 2);
    let copy = flushed_copy(&before, 2);
    let seg = seg_files(&copy).pop().unwrap();
    let orphan = dir.join("seg").join(seg.file_name().unwrap());
    fs::copy(&seg, &orphan).unwrap();
    // A name that is not ours stays.
    let stranger = dir.join("seg").join("notes.txt");
    fs::write(&stranger, b"kept").unwrap();
    let tmpseg = dir.join("seg").join("00000000000000aa.seg.tmp");
    fs::write(&tmpseg, b"half a segment").unwrap();
    // Nor does a segment under a name that parses but is not the writer's spelling.
    let name = seg.file_name().unwrap().to_str().unwrap().to_string();
    let misnamed = dir.join("seg").join(format!("+{}", &name[1..]));
    fs::copy(&seg, &misnamed).unwrap();

    let db = open(&dir).unwrap();
    let r = db.recovery_report();
    assert!(r.removed.contains(&orphan), "{r}");
    assert!(r.removed.contains(&tmpseg), "{r}");
    assert!(!orphan.exists() && !tmpseg.exists());
    assert!(stranger.exists(), "a file open does not know was removed");
    assert!(misnamed.exists(), "a misnamed segment was removed");
    assert_eq!(count(&db), 150);
    db.close().unwrap();
}

#[test]
fn a_segment_newer_than_the_manifest_whose_rows_the_log_lacks_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    logged_only(&dir, 2);
    // Its newest rows are of a record this log never had: the log lost records.
    let copy = flushed_copy(&dir, 2);
    let seg = seg_files(&copy).pop().unwrap();
    let orphan = dir.join("seg").join(seg.file_name().unwrap());
    fs::copy(&seg, &orphan).unwrap();
    let detail = assert_open_refused_untouched(&dir, options(), |p| p == orphan);
    assert!(detail.contains("log records are missing"), "{detail}");
}

#[test]
fn an_unreadable_segment_the_manifest_does_not_list_is_kept_and_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    logged_only(dir, 2);
    let odd = dir.join("seg").join("00000000000000ee.seg");
    fs::write(&odd, b"not a segment").unwrap();
    let detail = assert_open_refused_untouched(dir, options(), |p| p == odd);
    assert!(detail.contains("move it out"), "{detail}");
}

#[test]
fn every_way_the_crash_model_fails_an_open_leaves_the_files_as_they_were() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Small log files, so that the log spans several.
    let small = || DbOptions {
        wal_file_bytes: 4 << 10,
        wal_spare_files: 0,
        ..options()
    };
    let db = Database::open_with(dir, small()).unwrap();
    let c = db.create_collection("a", ts_options()).unwrap();
    for b in 1..=3 {
        c.insert_many(&batch_docs(1, b, 100, 3)).unwrap();
    }
    db.flush().unwrap();
    for b in 4..=8 {
        c.insert_many(&batch_docs(1, b, 100, 3)).unwrap();
    }
    db.close().unwrap();
    let good = snapshot(dir);
    let restore = || {
        for e in fs::read_dir(dir.join("seg")).unwrap() {
            fs::remove_file(e.unwrap().path()).unwrap();
        }
        for e in fs::read_dir(dir.join("wal")).unwrap() {
            fs::remove_file(e.unwrap().path()).unwrap();
        }
        for (p, b) in &good {
            fs::write(p, b).unwrap();
        }
    };
    let manifest = dir.join("MANIFEST");
    let seg = seg_files(dir).pop().unwrap();
    let logs = log_files(dir);
    assert!(logs.len() >= 3, "the log spans {} file(s)", logs.len());
    let last = logs[logs.len() - 1].clone();
    type Damage = Box<dyn Fn()>;
    let cases: Vec<(&str, Damage)> = vec![
        ("a log file in the middle removed", {
            let l = logs[logs.len() - 2].clone();
            Box::new(move || fs::remove_file(&l).unwrap())
        }),
        ("the oldest log file removed", {
            let l = logs[0].clone();
            Box::new(move || fs::remove_file(&l).unwrap())
        }),
        ("a flipped manifest byte", {
            let m = manifest.clone();
            Box::new(move || {
                let mut b = fs::read(&m).unwrap();
                b[40] ^= 1;
                fs::write(&m, b).unwrap();
            })
        }),
        ("a listed segment missing", {
            let s = seg.clone();
            Box::new(move || fs::remove_file(&s).unwrap())
        }),
        ("a flipped segment byte", {
            let s = seg.clone();
            Box::new(move || {
                let mut b = fs::read(&s).unwrap();
                let n = b.len();
                b[n - 10] ^= 1;
                fs::write(&s, b).unwrap();
            })
        }),
        ("a damaged record in a file with a successor", {
            let l = logs[0].clone();
            Box::new(move || {
                let mut b = fs::read(&l).unwrap();
                let (at, _) = records(&b)[0];
                b[at + 30] ^= 1;
                fs::write(&l, b).unwrap();
            })
        }),
        ("the log removed", {
            let w = dir.join("wal");
            Box::new(move || {
                for e in fs::read_dir(&w).unwrap() {
                    fs::remove_file(e.unwrap().path()).unwrap();
                }
            })
        }),
        ("an unreadable unlisted segment", {
            let s = dir.join("seg").join("00000000000000ee.seg");
            Box::new(move || fs::write(&s, b"?").unwrap())
        }),
    ];
    let strict_cases: Vec<(&str, Damage)> = vec![("a torn record at the end, strict", {
        let l = last.clone();
        Box::new(move || {
            let mut b = fs::read(&l).unwrap();
            let (at, len) = *records(&b).last().unwrap();
            let torn = b[at..at + len / 2].to_vec();
            b.extend_from_slice(&torn);
            fs::write(&l, b).unwrap();
        })
    })];
    let all = cases
        .into_iter()
        .map(|(w, d)| (w, d, options()))
        .chain(strict_cases.into_iter().map(|(w, d)| (w, d, strict())));
    for (what, damage, opts) in all {
        restore();
        damage();
        let before = snapshot(dir);
        let r = Database::open_with(dir, opts);
        assert!(
            matches!(r, Err(Error::Corruption { .. })),
            "{what}: {:?}",
            r.map(|_| ())
        );
        assert!(
            snapshot(dir) == before,
            "{what}: a failed open changed files"
        );
    }
    restore();
    let db = open(dir).unwrap();
    assert_eq!(count(&db), 800);
    db.close().unwrap();
}
