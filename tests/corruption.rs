//! Damaged files and hostile input at the database level. A WAL cut at any byte of its last
//! records opens with exactly the batches wholly before the cut; a damaged record with intact
//! records after it is refused as corruption of that WAL file; any flipped byte of a segment is
//! reported as corruption of that segment, at open or at read, never as a panic or a wrong
//! answer; a damaged manifest is refused, a stray `MANIFEST.tmp` and orphan segments are
//! removed, a listed segment that is missing is a clear error; a second opener, in this or
//! another process, gets `Locked` until the holder dies; and a bad batch is refused with the
//! index of the bad document and not one byte logged.

mod common;

use common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tsbucket::bson::{doc, Bson, DateTime, Document};
use tsbucket::vfs::{MemFs, Vfs};
use tsbucket::{Database, Error};

/// Replaces the whole content of `path` in `fs`, durably.
fn put(fs: &MemFs, path: &Path, bytes: &[u8]) {
    let mut f = fs.open_append(path, true).unwrap();
    f.append(bytes).unwrap();
    f.sync_data().unwrap();
}

/// The one file in `dir` whose name ends with `suffix`.
fn only_file(fs: &MemFs, dir: &str, suffix: &str) -> PathBuf {
    let names: Vec<String> = file_sizes(fs, dir)
        .into_keys()
        .filter(|n| n.ends_with(suffix))
        .collect();
    assert_eq!(names.len(), 1, "{dir}: {names:?}");
    Path::new(dir).join(&names[0])
}

fn open(fs: &MemFs) -> tsbucket::Result<Database> {
    Database::open_with("/db", mem_options(fs))
}

fn by_id(mut docs: Vec<Document>) -> Vec<Document> {
    docs.sort_by_key(|d| match d.get("_id") {
        Some(Bson::ObjectId(o)) => o.bytes(),
        _ => [0; 12],
    });
    docs
}

/// A closed database whose log holds `sizes.len()` batches of collection "a" (writer 1) and no
/// segment; returns where the log file's records end after each batch (index 0: before the
/// first).
fn logged_batches(sizes: &[usize]) -> (MemFs, PathBuf, Vec<u64>) {
    let fs = MemFs::new();
    let db = open(&fs).unwrap();
    let c = db.create_collection("a", ts_options()).unwrap();
    let wal = only_file(&fs, "/db/wal", ".log");
    for (b, &n) in sizes.iter().enumerate() {
        c.insert_many(&batch_docs(1, b as i64 + 1, n, 3)).unwrap();
    }
    db.close().unwrap();
    // A power cut after a clean close loses nothing: the image is a faithful copy to damage.
    let img = fs.crash();
    let ends = record_ends(&img.read(&wal).unwrap());
    assert_eq!(ends.len(), sizes.len() + 1, "one record per batch");
    (img, wal, ends)
}

/// Where each record of a WAL file ends, after the 32-byte file header: each record is a
/// 24-byte header, whose bytes 4..8 hold the payload length, and the payload
/// (`format-spec/wal.md`).
fn record_ends(bytes: &[u8]) -> Vec<u64> {
    let mut ends = vec![32u64];
    let mut at = 32;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        at += 24 + len;
        ends.push(at as u64);
    }
    assert_eq!(at, bytes.len(), "the closed log ends with its last record");
    ends
}

#[test]
fn wal_cut_at_every_byte_of_the_last_two_records_recovers_exactly_the_whole_batches() {
    let sizes = [3, 1, 4, 2, 5, 3];
    let (base, wal, ends) = logged_batches(&sizes);
    let bytes = base.read(&wal).unwrap();
    assert_eq!(bytes.len() as u64, ends[sizes.len()]);
    let from = ends[sizes.len() - 2];
    let mut cases = 0;
    for cut in from..=ends[sizes.len()] {
        let img = base.crash();
        put(&img, &wal, &bytes[..cut as usize]);
        let whole = ends.iter().rposition(|&e| e <= cut).unwrap() as i64;
        let ctx = format!("WAL cut at {cut} (whole batches: {whole})");
        let db = open(&img).unwrap_or_else(|e| panic!("{ctx}: open failed: {e}"));
        let docs = read_all(&db.collection("a").unwrap()).unwrap();
        let present = check_batches(&docs, &BTreeMap::from([(1, whole)]), &ctx)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(present.get(&1).copied().unwrap_or(0), whole, "{ctx}");
        db.close().unwrap();
        // The torn tail was cut off, so the log ends after the last whole record.
        assert_eq!(img.file_len(&wal).unwrap(), ends[whole as usize], "{ctx}");
        if cut % 16 == 0 {
            check_liveness(&img, "/db", mem_options);
        }
        cases += 1;
    }
    eprintln!("corruption: WAL cut at {cases} offsets");
}

#[test]
fn wal_record_damaged_before_intact_records_is_corruption_of_that_file() {
    let sizes = [3, 1, 4, 2, 5, 3];
    let (base, wal, ends) = logged_batches(&sizes);
    let bytes = base.read(&wal).unwrap();
    // Record of batch 3, with batches 4..6 intact after it.
    for pos in ends[2]..ends[3] {
        let mut bad = bytes.clone();
        bad[pos as usize] ^= 0xFF;
        let img = base.crash();
        put(&img, &wal, &bad);
        match open(&img) {
            Err(Error::Corruption { path, offset, .. }) => {
                assert_eq!(path, wal, "byte {pos}");
                assert_eq!(
                    offset, ends[2],
                    "byte {pos}: the damaged record starts there"
                );
            }
            Err(e) => panic!("byte {pos}: {e}"),
            Ok(_) => panic!("byte {pos}: opened a log with a hole"),
        }
    }
}

/// A closed database with one flushed segment of collection "a"; returns the copy, the
/// segment's path and every document, ordered by `_id`.
fn flushed_segment() -> (MemFs, PathBuf, Vec<Document>) {
    let fs = MemFs::new();
    let db = open(&fs).unwrap();
    let c = db.create_collection("a", ts_options()).unwrap();
    for b in 1..=6 {
        c.insert_many(&batch_docs(1, b, 40, 4)).unwrap();
    }
    db.flush().unwrap();
    let docs = by_id(read_all(&c).unwrap());
    db.close().unwrap();
    let fs = fs.crash();
    let seg = only_file(&fs, "/db/seg", ".seg");
    (fs, seg, docs)
}

/// Opens `img`, whose segment `seg` was damaged, and reads everything: the damage must be
/// reported as corruption of `seg` (at open or at read), never missed and never a panic.
fn assert_segment_damage_detected(img: &MemFs, seg: &Path, expected: &[Document], ctx: &str) {
    let db = match open(img) {
        Err(Error::Corruption { path, .. }) if path == seg => return,
        Err(e) => panic!("{ctx}: open failed with another error: {e}"),
        Ok(db) => db,
    };
    let c = db.collection("a").unwrap();
    match read_all(&c) {
        Err(Error::Corruption { path, .. }) if path == seg => {}
        Err(e) => panic!("{ctx}: read failed with another error: {e}"),
        Ok(docs) if by_id(docs.clone()) == expected => {
            panic!("{ctx}: damage not detected (the read returned the right documents)")
        }
        Ok(_) => panic!("{ctx}: WRONG ANSWER: the read returned other documents"),
    }
    // Raw buckets read the same pages: the same verdict.
    match c.buckets(doc! {}) {
        Err(Error::Corruption { path, .. }) if path == seg => {}
        other => panic!("{ctx}: raw buckets: {:?}", other.map(|b| b.len())),
    }
}

#[test]
fn every_flipped_segment_header_footer_and_sampled_body_byte_is_reported_as_corruption() {
    let (base, seg, expected) = flushed_segment();
    let bytes = base.read(&seg).unwrap();
    let len = bytes.len();
    // Header: 20 fixed bytes, the time field name ("t"), a crc. Footer: the last 48 bytes.
    let header = 20 + TIME.len() + 4;
    let mut cases: Vec<(usize, u8)> = Vec::new();
    for pos in (0..header).chain(len - 48..len) {
        cases.push((pos, 0xFF));
        cases.extend((0..8).map(|bit| (pos, 1u8 << bit)));
    }
    let mut rng = Rng::new(seed_from_env(8));
    let body = count_from_env("TSBUCKET_BODY_FLIPS", 300);
    for _ in 0..body {
        cases.push((rng.range(header as u64, (len - 49) as u64) as usize, 0xFF));
    }
    for &(pos, mask) in &cases {
        let mut bad = bytes.clone();
        bad[pos] ^= mask;
        let img = base.crash();
        put(&img, &seg, &bad);
        let ctx = format!("segment byte {pos} of {len} xor {mask:#04x}");
        assert_segment_damage_detected(&img, &seg, &expected, &ctx);
    }
    // Truncated segments, as a torn copy would leave them.
    for _ in 0..50 {
        let cut = rng.range(0, len as u64 - 1) as usize;
        let img = base.crash();
        put(&img, &seg, &bytes[..cut]);
        assert_segment_damage_detected(&img, &seg, &expected, &format!("segment cut at {cut}"));
    }
    eprintln!("corruption: {} segment flips, 50 truncations", cases.len());
}

#[test]
fn every_flipped_manifest_byte_is_corruption_of_the_manifest() {
    let (base, _, _) = flushed_segment();
    let manifest = PathBuf::from("/db/MANIFEST");
    let bytes = base.read(&manifest).unwrap();
    for pos in 0..bytes.len() {
        let mut bad = bytes.clone();
        bad[pos] ^= 0xFF;
        let img = base.crash();
        put(&img, &manifest, &bad);
        match open(&img) {
            Err(Error::Corruption { path, .. }) => assert_eq!(path, manifest, "byte {pos}"),
            Err(e) => panic!("byte {pos}: {e}"),
            Ok(_) => panic!("byte {pos}: a damaged manifest was accepted"),
        }
    }
}

#[test]
fn stray_manifest_tmp_is_ignored_and_removed() {
    let (img, _, expected) = flushed_segment();
    let tmp = Path::new("/db/MANIFEST.tmp");
    put(
        &img,
        tmp,
        b"TSBMANIF garbage from a crash in the middle of a manifest write",
    );
    let db = open(&img).unwrap();
    assert!(!img.exists(tmp), "MANIFEST.tmp survived the open");
    let docs = by_id(read_all(&db.collection("a").unwrap()).unwrap());
    assert_eq!(docs, expected);
    db.close().unwrap();
}

#[test]
fn orphan_segment_files_are_removed_at_open_and_never_read() {
    let (img, seg, expected) = flushed_segment();
    // A complete segment the manifest does not list (a crash between the segment's rename and
    // the manifest's) holds rows that are also in the log or in live segments: loading it
    // would duplicate them.
    let bytes = img.read(&seg).unwrap();
    let orphan = Path::new("/db/seg/00000000000000ff.seg");
    let tmp = Path::new("/db/seg/0000000000000100.seg.tmp");
    put(&img, orphan, &bytes);
    put(&img, tmp, &bytes[..bytes.len() / 2]);
    img.sync_dir(Path::new("/db/seg")).unwrap();
    let db = open(&img).unwrap();
    assert!(
        !img.exists(orphan) && !img.exists(tmp),
        "orphans survived the open"
    );
    let docs = by_id(read_all(&db.collection("a").unwrap()).unwrap());
    assert_eq!(docs, expected);
    db.close().unwrap();
}

fn assert_missing_segment_named(r: tsbucket::Result<Database>, seg: &Path) {
    match r {
        Err(Error::Corruption { path, detail, .. }) => {
            assert_eq!(path, seg, "{detail}");
            assert!(detail.contains("missing"), "{detail}");
        }
        Err(e) => panic!("the error does not say which segment is missing: {e}"),
        Ok(_) => panic!("opened without a listed segment: silent data loss"),
    }
}

#[test]
fn listed_segment_that_is_missing_is_a_clear_error_naming_it() {
    let (img, seg, _) = flushed_segment();
    img.remove_file(&seg).unwrap();
    img.sync_dir(Path::new("/db/seg")).unwrap();
    assert_missing_segment_named(open(&img), &seg);
    // On a real file system too, where the OS error itself names no file.
    let tmp = tempfile::tempdir().unwrap();
    let db = Database::open(tmp.path()).unwrap();
    let c = db.create_collection("a", ts_options()).unwrap();
    c.insert_many(&batch_docs(1, 1, 5, 1)).unwrap();
    db.flush().unwrap();
    db.close().unwrap();
    let seg_dir = tmp.path().join("seg");
    let entries: Vec<_> = std::fs::read_dir(&seg_dir).unwrap().collect();
    assert_eq!(entries.len(), 1);
    let seg = entries[0].as_ref().unwrap().path();
    std::fs::remove_file(&seg).unwrap();
    assert_missing_segment_named(Database::open(tmp.path()), &seg);
}

const LOCK_DIR_VAR: &str = "TSBUCKET_LOCK_DIR";
const LOCK_CHILD: &str = "child_opens_and_reports";

/// Not a test of its own: the body of the lock-test child. With `TSBUCKET_LOCK_ROLE=hold` it
/// opens the database, says so and waits to be killed; otherwise it tries to open and prints
/// the outcome. Without `TSBUCKET_LOCK_DIR` (a normal test run) it returns at once.
#[test]
fn child_opens_and_reports() {
    let Ok(dir) = std::env::var(LOCK_DIR_VAR) else {
        return;
    };
    let hold = std::env::var("TSBUCKET_LOCK_ROLE").as_deref() == Ok("hold");
    match Database::open(&dir) {
        Ok(db) => {
            println!("RESULT Opened");
            if hold {
                // Killed by the parent; the timeout only bounds an orphaned child.
                std::thread::sleep(std::time::Duration::from_secs(60));
            }
            drop(db);
        }
        Err(e) => println!("RESULT {}", kind(&e)),
    }
}

fn spawn_opener(dir: &Path, hold: bool) -> (std::process::Child, String) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", LOCK_CHILD, "--nocapture", "--test-threads=1"])
        .env(LOCK_DIR_VAR, dir)
        .env("TSBUCKET_LOCK_ROLE", if hold { "hold" } else { "try" })
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let line = BufReader::new(out)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.find("RESULT ").map(|p| l[p + 7..].trim().to_string()))
        .unwrap_or_default();
    (child, line)
}

#[test]
fn second_opener_is_locked_out_until_the_holder_is_killed() {
    if std::env::var(LOCK_DIR_VAR).is_ok() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let (mut holder, said) = spawn_opener(&dir, true);
    assert_eq!(said, "Opened");
    // Another process and this one are both refused at once.
    let (mut other, said) = spawn_opener(&dir, false);
    other.wait().unwrap();
    assert_eq!(said, "Locked");
    let e = Database::open(&dir).unwrap_err();
    assert!(matches!(&e, Error::Locked(p) if p == &dir), "{e}");
    // kill -9: no destructor runs; the kernel releases the lock with the process.
    holder.kill().unwrap();
    holder.wait().unwrap();
    let db = Database::open(&dir).unwrap();
    // The same process cannot open it twice either.
    let e = Database::open(&dir).unwrap_err();
    assert!(matches!(e, Error::Locked(_)), "{e}");
    let (mut other, said) = spawn_opener(&dir, false);
    other.wait().unwrap();
    assert_eq!(said, "Locked");
    db.close().unwrap();
    let (mut other, said) = spawn_opener(&dir, false);
    other.wait().unwrap();
    assert_eq!(said, "Opened");
}

#[test]
fn malformed_batches_are_refused_with_the_bad_index_and_log_nothing() {
    let fs = MemFs::new();
    let db = open(&fs).unwrap();
    let c = db.create_collection("a", ts_options()).unwrap();
    c.insert_many(&batch_docs(1, 1, 3, 1)).unwrap();
    let good = |i: i64| batch_docs(1, 2, 3, 1).remove(i as usize);
    let now = DateTime::from_millis(BASE_MS);
    let huge = "x".repeat(4 * 1024 * 1024 + 1);
    let big_meta = "m".repeat(70 * 1024);
    let cases: Vec<(&str, Vec<Document>, usize)> = vec![
        ("no time field", vec![good(0), doc! {"v": 1}, good(2)], 1),
        (
            "string time",
            vec![good(0), good(1), doc! {TIME: "2024-01-01", "v": 1}],
            2,
        ),
        ("null time", vec![doc! {TIME: Bson::Null}], 0),
        (
            "int64 time",
            vec![good(0), doc! {TIME: 1_700_000_000_000i64}],
            1,
        ),
        (
            "oversize document",
            vec![doc! {TIME: now, "blob": huge.as_str()}, good(1)],
            0,
        ),
        (
            "reserved field name",
            vec![good(0), doc! {TIME: now, "\u{1}seq": 5}],
            1,
        ),
        (
            "meta too large",
            vec![good(0), good(1), doc! {TIME: now, META: big_meta.as_str()}],
            2,
        ),
    ];
    let wal_before = file_sizes(&fs, "/db/wal");
    for (what, docs, index) in &cases {
        match c.insert_many(docs) {
            Err(Error::InvalidDocument { index: i, message }) => {
                assert_eq!(i, *index, "{what}: {message}")
            }
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(
            file_sizes(&fs, "/db/wal"),
            wal_before,
            "{what}: bytes reached the log"
        );
        assert_eq!(c.count_documents(doc! {}).unwrap(), 3, "{what}");
    }
    // An empty batch is a no-op, not a log record.
    assert_eq!(c.insert_many(&[]).unwrap().inserted_count, 0);
    assert_eq!(file_sizes(&fs, "/db/wal"), wal_before);
    // The database was not disturbed: writes go on, and a reopen holds the good batches only.
    c.insert_many(&batch_docs(1, 2, 2, 1)).unwrap();
    db.close().unwrap();
    let db = open(&fs).unwrap();
    let docs = read_all(&db.collection("a").unwrap()).unwrap();
    let present = check_batches(&docs, &BTreeMap::from([(1, 2)]), "reopen").unwrap();
    assert_eq!(present, BTreeMap::from([(1, 2)]));
    db.close().unwrap();
}

/// `Database::verify` reads what `open` trusts without reading: a flipped byte inside a
/// segment's pages is invisible to `open` (it checks header, footer and directory) and must be
/// reported by `verify`, naming the segment file.
#[test]
fn verify_reports_damage_that_open_does_not_read() {
    use tsbucket::bson::{doc, DateTime};
    use tsbucket::{Database, Error, TimeseriesOptions};
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(dir.path()).unwrap();
        let c = db
            .create_collection("c", TimeseriesOptions::new("t").meta_field("m"))
            .unwrap();
        let docs: Vec<_> = (0..2000i64)
            .map(|i| doc! {"t": DateTime::from_millis(1_700_000_000_000 + i * 1000), "m": i % 7, "v": i * 3})
            .collect();
        c.insert_many(&docs).unwrap();
        db.flush().unwrap();
        let r = db.verify().unwrap();
        assert_eq!(r.measurements, 2000);
        assert!(r.segments >= 1 && r.buckets >= 7);
        db.close().unwrap();
    }
    let seg = std::fs::read_dir(dir.path().join("seg"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .next()
        .unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    // Just past the header: the first page.
    let at = 64.min(bytes.len() / 2);
    bytes[at] ^= 0x55;
    std::fs::write(&seg, &bytes).unwrap();
    let db = Database::open(dir.path()).unwrap();
    match db.verify() {
        Err(Error::Corruption { path, .. }) => assert_eq!(path, seg),
        other => panic!("verify must report the damaged segment, got {other:?}"),
    }
}
