//! The database directory stays locked while open, even when its `LOCK` file is deleted from
//! under the holder: neither this process nor another (the `tsbucket` binary) gets in to
//! write, and the holder's data stays whole.

use std::path::Path;
use std::process::{Command, Output};
use tsbucket::bson::{doc, DateTime, Document};
use tsbucket::{Database, Error, TimeseriesOptions};

const BASE_MS: i64 = 1_700_000_000_000;
const LOCKED: &str = "is locked by another open Database";

fn docs(from: i64, to: i64) -> Vec<Document> {
    (from..to)
        .map(|i| doc! {"t": DateTime::from_millis(BASE_MS + i * 1000), "v": i})
        .collect()
}

fn tsbucket(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tsbucket"))
        .current_dir(cwd)
        .args(args)
        .output()
        .unwrap()
}

fn assert_refused_as_locked(out: &Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{what}: {out:?}");
    assert!(err.contains(LOCKED), "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
}

#[test]
fn deleting_the_lock_file_lets_no_second_opener_in() {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path();
    let dir = cwd.join("db");
    let db = Database::open(&dir).unwrap();
    let c = db
        .create_collection("c", TimeseriesOptions::new("t"))
        .unwrap();
    c.insert_many(&docs(0, 10)).unwrap();
    db.flush().unwrap();

    std::fs::remove_file(dir.join("LOCK")).unwrap();

    // The same process: a second open is refused (its own open of the directory conflicts).
    match Database::open(&dir) {
        Err(Error::Locked(p)) => assert_eq!(p, dir),
        Err(e) => panic!("expected Locked, got {e}"),
        Ok(_) => panic!("a second Database opened the directory while it was open"),
    }

    // Another process: reading works beside the holder (a snapshot, no lock taken); writing
    // is refused.
    let out = tsbucket(cwd, &["count", "db", "c", "{}"]);
    assert!(out.status.success(), "count: {out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "10");
    let input = cwd.join("more.jsonl");
    let line = |i: i64| {
        format!(
            "{{\"t\": {{\"$date\": {}}}, \"v\": {i}}}\n",
            BASE_MS + i * 1000
        )
    };
    std::fs::write(&input, (100..105).map(line).collect::<String>()).unwrap();
    let out = tsbucket(cwd, &["import", "db", "c", "more.jsonl"]);
    assert_refused_as_locked(&out, "import");

    // The holder still writes, and everything it acknowledged is there after a reopen.
    c.insert_many(&docs(10, 20)).unwrap();
    assert_eq!(c.count_documents(doc! {}).unwrap(), 20);
    db.close().unwrap();
    let db = Database::open(&dir).unwrap();
    let c = db.collection("c").unwrap();
    assert_eq!(c.count_documents(doc! {}).unwrap(), 20);
    assert_eq!(c.count_documents(doc! {"v": {"$gte": 100}}).unwrap(), 0);
    db.close().unwrap();

    // Closed, the directory is free again, for other processes too.
    let out = tsbucket(cwd, &["count", "db", "c", "{}"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "20");
}
